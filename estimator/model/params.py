"""Exact parameter counts, per component and per layer, as Megatron-Core builds the model.

Each function returns a :class:`Count`: parameters split by how tensor parallelism treats them.
``sharded`` parameters are divided over the tensor-parallel group (the linear layers, the
vocabulary-parallel embedding), ``replicated`` ones are whole on every tensor-parallel rank (norms,
the router, row-parallel biases, the MLA down-projections, learned position embeddings).

Each decoder layer is counted by the modules of its kind (:mod:`estimator.model.layers`: attention, MLA, gated
delta net, Mamba-2, dense MLP, MoE); this module adds the embedding, the output layer, the final norm and the
multi-token-prediction layers (``MultiTokenPredictionLayer``, ``LanguageModelEmbedding``), and sums the whole
model. The counts match the Hugging Face checkpoints tensor for tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.load import load_config
from .layers import hyper_connection, kimi, kind_components, moe, wan
from .layers.base import Count
from .resolve import Resolved, resolve
from .audio import sound_params
from .vision import vision_params

__all__ = ["Count", "ParameterCounts", "count_parameters", "count_parameters_of", "embedding", "final_norm", "mtp_built",
           "mtp_extra", "output_layer"]


def embedding(r: Resolved) -> Count:
    """Vocabulary-parallel word embedding Vp*h, plus learned absolute positions (max_pos*h, replicated); for Wan
    its patch, text and timestep embedders (:func:`estimator.model.layers.wan.embedder_params`)."""
    cfg = r.cfg.model
    if cfg.model_kind == "wan":
        return wan.embedder_params(r)
    pos = (cfg.max_position_embeddings or r.s) * r.h if cfg.position_embedding_type == "learned_absolute" else 0
    return Count(r.Vp * r.h, pos)


def output_layer(r: Resolved) -> Count:
    """Output projection Vp*h (a copy of the embedding when tied and the last stage is not the first); for Wan its
    head (:func:`estimator.model.layers.wan.head_params`)."""
    if r.cfg.model.model_kind == "wan":
        return wan.head_params(r)
    return Count(r.Vp * r.h, 0)


def final_norm(r: Resolved) -> Count:
    """The final norm, and with hyper-connections the learned output contraction beside it (hc_head_fn,
    hc_head_base, hc_head_scale: :func:`estimator.model.layers.hyper_connection.head_params`); with Kimi K3's AttnRes
    the last layer's output aggregation (norm and score projection, 2 h: :mod:`estimator.model.layers.kimi`). Wan
    has none (its head's norm has no weights)."""
    if r.cfg.model.model_kind == "wan":
        return Count()
    return Count(0, r.norm_w * r.h + hyper_connection.head_params(r)) + kimi.output_attn_res_params(r)


def mtp_built(r: Resolved, depths: int) -> int:
    """How many MTP layers are built for ``depths`` MTP depths: one when ``mtp_use_repeated_layer`` (Megatron-LM
    @ 2a75ac12 : megatron/core/transformer/multi_token_prediction.py ``MultiTokenPredictionBlock._build_layers``
    builds a single layer and ``forward`` applies ``self.layers[0]`` at every depth), else one per depth. The
    weights, gradients and optimizer states follow the layers built; the activations follow the depths run."""
    return min(depths, 1) if r.cfg.model.mtp_use_repeated_layer else depths


def mtp_extra(r: Resolved) -> Count:
    """One MTP layer's own parts besides its transformer layer: enorm, hnorm, eh_proj 2h*h (with hyper-connections
    e_proj and h_proj, h*h each: the same count), final norm, and with hyper-connections its output contraction."""
    return Count(2 * r.h * r.h, 3 * r.norm_w * r.h + hyper_connection.head_params(r))


@dataclass(frozen=True)
class ParameterCounts:
    """Unique parameters of the whole model (each counted once), by component."""

    embedding: int
    position_embedding: int
    attention: int          # self-attention and MLA mixers (their norms under norms)
    mamba: int              # Mamba-2 mixers of a hybrid model
    linear_attention: int   # gated delta nets
    mlp: int
    moe_router: int
    moe_experts: int
    moe_shared_experts: int
    moe_latent: int         # latent MoE's fc1/fc2 latent projections
    norms: int
    output_layer: int
    mtp: int
    mtp_active: int         # MTP parameters a token passes through (top-k experts of an MoE MTP layer)
    total: int
    active: int
    dense_layers: int       # decoder layers with a dense MLP
    moe_layers: int         # decoder layers with an MoE
    padded_vocab_size: int
    vocab_padding: int      # parameters added by Megatron's vocabulary padding (in embedding and output)
    layer_kinds: dict = field(default_factory=dict)   # decoder layers by kind ("attention + MLP": 32)
    vision: int = 0         # the vision tower and its patch merger (estimator/model/vision.py), in total and active
    hyper_connections: int = 0   # mHC modules of the decoder layers and the decoder's output contraction
    attn_res: int = 0       # Kimi K3's AttnRes norms and score projections, the last layer's output ones included
    sound: int = 0          # Nemotron Omni's sound encoder and projection (estimator/model/audio.py), total and active

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return asdict(self)


_COMPONENTS = ("attention", "mamba", "linear_attention", "mlp", "moe_router", "moe_experts", "moe_shared_experts",
               "moe_latent", "norms", "hyper_connections", "attn_res")


def count_parameters(r: Resolved) -> ParameterCounts:
    """Total and active (per token) parameters.

    Norm weights are counted under ``norms`` (input, pre-MLP, q/k, MLA latent, Mamba and gated-delta-net output
    norms, and the final norm); the routed experts under ``moe_experts``. ``active`` replaces each MoE layer's
    routed experts by the top-k experts a token passes through; everything else is active. MTP layers are
    counted under ``mtp`` and are included in ``total``, and so is a vision tower (``vision``: every image passes
    through all of it, so it is active too), and a sound tower (``sound``, likewise).
    """
    n_kind = [0] * len(r.kinds)
    for k in r.layer_kinds:
        n_kind[k] += 1
    comp = dict.fromkeys(_COMPONENTS, 0)
    per_kind = [kind_components(r, kind) for kind in r.kinds]
    for n, parts in zip(n_kind, per_kind):
        for key, value in parts.items():
            comp[key] += n * value
    emb = embedding(r)
    wan_model = r.cfg.model.model_kind == "wan"    # Wan's embedders (all replicated) count under embedding
    out = 0 if r.tied else output_layer(r).total
    # MTP: enorm, hnorm, eh_proj, its layers, final norm (embedding and output are shared).
    mtp_one = mtp_extra(r).total + sum(sum(per_kind[k].values()) for k in r.mtp_kinds)
    built = mtp_built(r, r.mtp)
    mtp = built * mtp_one
    vis = vision_params(r.cfg.model)
    vision = vis.total if vis else 0
    snd = sound_params(r.cfg.model)
    sound = snd.total if snd else 0
    head = hyper_connection.head_params(r)
    ar_out = kimi.output_attn_res_params(r).total
    fnorm = final_norm(r).total - head - ar_out        # the final norm's weights (none for Wan)
    total = emb.total + sum(comp.values()) + out + fnorm + head + ar_out + mtp + vision + sound
    n_moe = sum(n for n, kind in zip(n_kind, r.kinds) if kind.moe)
    idle = moe.expert_params(r).total - moe.active_experts(r) if r.E else 0   # experts a token skips, per layer
    mtp_active = mtp - built * sum(idle for k in r.mtp_kinds if r.kinds[k].moe)
    active = total - n_moe * idle - (mtp - mtp_active)
    return ParameterCounts(
        embedding=emb.total if wan_model else emb.sharded, position_embedding=0 if wan_model else emb.replicated,
        mamba=comp["mamba"],
        linear_attention=comp["linear_attention"], attention=comp["attention"], mlp=comp["mlp"],
        moe_router=comp["moe_router"], moe_experts=comp["moe_experts"], moe_shared_experts=comp["moe_shared_experts"],
        moe_latent=comp["moe_latent"], norms=comp["norms"] + fnorm, output_layer=out, mtp=mtp,
        mtp_active=mtp_active, total=total, active=active,
        dense_layers=sum(n for n, kind in zip(n_kind, r.kinds) if kind.mlp == "dense"), moe_layers=n_moe,
        padded_vocab_size=r.Vp, vocab_padding=(r.Vp - r.V) * r.h * (1 if r.tied else 2),
        layer_kinds={kind.label: n for n, kind in zip(n_kind, r.kinds) if n}, vision=vision,
        hyper_connections=comp["hyper_connections"] + head, attn_res=comp["attn_res"] + ar_out, sound=sound,
    )


def count_parameters_of(config) -> ParameterCounts:
    """Exact parameter counts of a configuration (path, dict or Config)."""
    return count_parameters(resolve(load_config(config)))
