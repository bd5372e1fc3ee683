"""Exact parameter counts, per component and per layer, as Megatron-Core builds the model.

Each function returns a :class:`Count`: parameters split by how tensor parallelism treats them.
``sharded`` parameters are divided over the tensor-parallel group (the linear layers, the
vocabulary-parallel embedding), ``replicated`` ones are whole on every tensor-parallel rank (norms,
the router, row-parallel biases, the MLA down-projections, learned position embeddings).

Counts follow Megatron-Core's modules (``TransformerLayer``, ``SelfAttention``/``MLASelfAttention``,
``MLP``, ``MoELayer`` with ``TopKRouter`` and ``SharedExpertMLP``, ``MultiTokenPredictionLayer``,
``LanguageModelEmbedding``), which match the Hugging Face checkpoints tensor for tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .resolve import Resolved

__all__ = ["Count", "ParameterCounts", "count_parameters", "attention", "dense_mlp", "linear_weights", "moe_experts",
           "moe_router", "shared_expert", "layer"]


class Count(NamedTuple):
    """Parameters of one component: ``sharded`` split over a tensor-parallel group, ``replicated`` not.

    A NamedTuple (immutable, and cheap to build: the estimator makes a dozen per estimate)."""

    sharded: int = 0
    replicated: int = 0

    @property
    def total(self) -> int:
        return self.sharded + self.replicated

    def per_rank(self, tp: int) -> int:
        return self.sharded // tp + self.replicated

    def __add__(self, other: "Count") -> "Count":  # type: ignore[override]
        return Count(self.sharded + other.sharded, self.replicated + other.replicated)

    def __mul__(self, n: int) -> "Count":  # type: ignore[override]
        return Count(self.sharded * n, self.replicated * n)


def attention(r: Resolved) -> Count:
    """Attention block including its input norm.

    Standard (MHA/GQA): h*(a + 2g)*dh for QKV (+ (a+2g)*dh bias), a*dh*h for the output projection
    (+ h bias, replicated), optional per-head q/k norms (dh each), and the input norm (h, or 2h for LayerNorm).
    MLA: q_down h*q_lora + q norm + q_up q_lora*a*(qk+rope) (or q_proj h*a*(qk+rope) without query
    compression), kv_down h*(kv_lora + rope) + kv norm + kv_up kv_lora*a*(qk+v), output a*v*h.
    """
    cfg = r.cfg.model
    h, a, nw = r.h, r.a, r.norm_w
    bias = cfg.add_bias_linear
    rep = nw * h  # input layernorm
    if r.mla:
        qk = r.qk_dim + r.rope_dim
        sh = 0
        if r.q_lora:
            rep += h * r.q_lora + (r.q_lora if bias else 0) + nw * r.q_lora
            sh += r.q_lora * a * qk + (a * qk if bias else 0)
        else:
            sh += h * a * qk + (a * qk if bias else 0)
        rep += h * (r.kv_lora + r.rope_dim) + ((r.kv_lora + r.rope_dim) if bias else 0) + nw * r.kv_lora
        sh += r.kv_lora * a * (r.qk_dim + r.v_dim) + (a * (r.qk_dim + r.v_dim) if bias else 0)
        sh += a * r.v_dim * h
        rep += h if bias else 0
        return Count(sh, rep)
    qkv_out = (a + 2 * r.g) * r.dh
    sh = h * qkv_out + (qkv_out if (bias or cfg.add_qkv_bias) else 0) + a * r.dh * h
    rep += (h if bias else 0) + (2 * nw * r.dh if cfg.qk_layernorm else 0)
    return Count(sh, rep)


def _mlp(h: int, f: int, gated: bool, bias: bool) -> Count:
    """fc1 h*f*(2 if gated) (+ bias), fc2 f*h (+ h bias, replicated)."""
    up = f * (2 if gated else 1)
    return Count(h * up + f * h + (up if bias else 0), h if bias else 0)


def dense_mlp(r: Resolved) -> Count:
    """Dense MLP with its pre-MLP norm."""
    return _mlp(r.h, r.f, r.gated, r.cfg.model.add_bias_linear) + Count(0, r.norm_w * r.h)


def moe_router(r: Resolved) -> Count:
    """Router E*h (replicated), the optional expert bias E, the pre-MLP norm, the shared-expert gate h."""
    cfg = r.cfg.model
    return Count(0, r.E * r.h + (r.E if cfg.moe_router_enable_expert_bias else 0) + r.norm_w * r.h
                 + (r.h if cfg.moe_shared_expert_gate and r.fs else 0))


def moe_experts(r: Resolved) -> Count:
    """All routed experts of one MoE layer; ``sharded`` splits over expert-parallel x expert-TP ranks."""
    one = _mlp(r.h, r.fm, r.gated, r.cfg.model.add_bias_linear)
    return one * r.E


def shared_expert(r: Resolved) -> Count:
    """The shared expert(s), tensor-parallel like a dense MLP."""
    return _mlp(r.h, r.fs, r.gated, r.cfg.model.add_bias_linear) if r.fs else Count()


def layer(r: Resolved, moe: bool) -> tuple[Count, Count]:
    """(dense-parallel part, routed-expert part) of one decoder layer."""
    if moe:
        return attention(r) + moe_router(r) + shared_expert(r), moe_experts(r)
    return attention(r) + dense_mlp(r), Count()


def linear_weights(r: Resolved, moe: bool) -> int:
    """Weight elements of one layer's Transformer Engine linear layers on one tensor-parallel rank, routed
    experts excluded (what FP8 holds in its own format; biases, norms and the router stay in the weights'
    dtype). MLA's down-projections are linear layers too, replicated over the tensor-parallel ranks."""
    t, h, a = r.t, r.h, r.a
    if r.mla:
        qk = r.qk_dim + r.rope_dim
        n = (h * r.q_lora + r.q_lora * a * qk // t) if r.q_lora else h * a * qk // t
        n += h * (r.kv_lora + r.rope_dim) + r.kv_lora * a * (r.qk_dim + r.v_dim) // t + a * r.v_dim * h // t
    else:
        n = h * (a + 2 * r.g) * r.dh // t + a * r.dh * h // t
    up = 2 if r.gated else 1
    width = (r.fs if moe else r.f) // t
    return n + h * width * up + width * h


def embedding(r: Resolved) -> Count:
    """Vocabulary-parallel word embedding Vp*h, plus learned absolute positions (max_pos*h, replicated)."""
    cfg = r.cfg.model
    pos = (cfg.max_position_embeddings or r.s) * r.h if cfg.position_embedding_type == "learned_absolute" else 0
    return Count(r.Vp * r.h, pos)


def output_layer(r: Resolved) -> Count:
    """Output projection Vp*h (a copy of the embedding when tied and the last stage is not the first)."""
    return Count(r.Vp * r.h, 0)


def final_norm(r: Resolved) -> Count:
    return Count(0, r.norm_w * r.h)


def mtp_extra(r: Resolved) -> Count:
    """One MTP layer's own parts besides its transformer layer: enorm, hnorm, eh_proj 2h*h, final norm."""
    return Count(2 * r.h * r.h, 3 * r.norm_w * r.h)


@dataclass(frozen=True)
class ParameterCounts:
    """Unique parameters of the whole model (each counted once), by component."""

    embedding: int
    position_embedding: int
    attention: int
    mlp: int
    moe_router: int
    moe_experts: int
    moe_shared_experts: int
    norms: int
    output_layer: int
    mtp: int
    mtp_active: int         # MTP parameters a token passes through (top-k experts of an MoE MTP layer)
    total: int
    active: int
    dense_layers: int
    moe_layers: int
    padded_vocab_size: int
    vocab_padding: int      # parameters added by Megatron's vocabulary padding (in embedding and output)

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return asdict(self)


def count_parameters(r: Resolved) -> ParameterCounts:
    """Total and active (per token) parameters.

    Norm weights are counted under ``norms`` (input, pre-MLP, q/k, MLA latent and final norms); the
    routed experts under ``moe_experts``. ``active`` replaces each MoE layer's routed experts by the
    top-k experts a token passes through; everything else is active. MTP layers are counted under
    ``mtp`` and are included in ``total``.
    """
    cfg = r.cfg.model
    nw = r.norm_w
    n_moe = sum(r.moe_layers)
    n_dense = r.L - n_moe
    att = attention(r).total
    q_norm = (nw * r.q_lora if r.q_lora else 0) + nw * r.kv_lora if r.mla else 0
    qk_norm = 2 * nw * r.dh if (cfg.qk_layernorm and not r.mla) else 0
    att_norms = nw * r.h + q_norm + qk_norm
    mlp = dense_mlp(r).total - nw * r.h
    router = moe_router(r).total - nw * r.h if r.E else 0
    experts = moe_experts(r).total if r.E else 0
    shared = shared_expert(r).total if r.E else 0
    emb = embedding(r)
    out = 0 if r.tied else output_layer(r).total
    # MTP: enorm, hnorm, eh_proj, one transformer layer, final norm (embedding and output are shared).
    mtp_one = mtp_extra(r).total + sum(c.total for c in layer(r, r.mtp_is_moe))
    mtp = r.mtp * mtp_one
    norms = r.L * att_norms + n_dense * nw * r.h + n_moe * nw * r.h + nw * r.h
    total = (emb.total + r.L * att + n_dense * mlp + n_moe * (router + experts + shared) + nw * r.h * (n_dense + n_moe)
             - 0 + out + nw * r.h + mtp)
    # (the pre-MLP norm is inside dense_mlp/moe_router totals; counted once above via nw*h*(n_dense+n_moe))
    active_experts_per_layer = (experts // r.E) * r.k if r.E else 0
    mtp_active = mtp - (r.mtp * (experts - active_experts_per_layer) if r.mtp_is_moe else 0)
    active = total - n_moe * (experts - active_experts_per_layer) - (mtp - mtp_active)
    return ParameterCounts(
        embedding=emb.sharded, position_embedding=emb.replicated, attention=r.L * (att - att_norms),
        mlp=n_dense * mlp, moe_router=n_moe * router, moe_experts=n_moe * experts,
        moe_shared_experts=n_moe * shared, norms=norms, output_layer=out, mtp=mtp, mtp_active=mtp_active, total=total, active=active,
        dense_layers=n_dense, moe_layers=n_moe, padded_vocab_size=r.Vp,
        vocab_padding=(r.Vp - r.V) * r.h * (1 if r.tied else 2),
    )
