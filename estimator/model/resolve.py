"""Derived values, resolved in one explicit step.

A validated :class:`~estimator.config.schema.Config` leaves some fields ``None`` ("derive it"). This module
turns it into a :class:`Resolved` record of plain integers, the single place where Megatron-Core's
defaults and derived quantities are applied: padded vocabulary, head width, data-parallel and
expert-data-parallel sizes, the layers of every pipeline stage and virtual chunk, which layers are
MoE, and the number of micro-batches. With dynamic (hybrid) context parallelism the sequence length, micro-batch
size, context- and data-parallel sizes become those of the busiest rank's largest sub-sample
(:func:`~estimator.config.derived.hybrid_cp_shard`), their product dp x cp unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from ..config import hybrid_pattern
from ..config.derived import default_ffn_hidden_size, hybrid_cp_shard, layout_stages
from ..config.rules.attention import dsa_shared_topk
from ..config.rules.moe import ERNIE_IMAGE_BOUNDARY_TOKENS
from ..config.pipeline_layout import placement, stage_counts
from ..config.schema import Config
from .layers import LayerKind
from .layers.kimi import attn_res_rows as kimi_attn_res_rows
from .vision import image_tokens
from .layers.wan import latent_tokens

__all__ = ["DTYPE_BYTES", "Resolved", "padded_vocab_size", "resolve", "stage_counts", "stage_layers"]

#: Bytes per element of each dtype name used in the schema.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def padded_vocab_size(vocab_size: int, divisible_by: int, tp: int) -> int:
    """Megatron's ``_vocab_size_with_padding``: round up to a multiple of ``divisible_by x tp``."""
    multiple = divisible_by * tp
    return -(-vocab_size // multiple) * multiple


def stage_layers(L: int, p: int, v: int, first: int | None = None, last: int | None = None) -> list[list[range]]:
    """Global decoder-layer indices of each (stage, virtual chunk) for the even or uneven first/last split, in
    Megatron's interleaved order: with p=2, v=2 and 8 layers, stage 0 holds layers 0-1 and 4-5, stage 1 holds
    2-3 and 6-7."""
    return [list(layers) for layers in placement(L, p, v, first, last, False, False, None, 0)[1]]


@lru_cache(maxsize=1024)
def _moe_pattern(L: int, freq) -> tuple:
    """Which of the L layers are MoE: freq 0 none, an int k every k-th (Megatron: i % k == 0), a 0/1 tuple."""
    if not freq:
        return (False,) * L
    if isinstance(freq, tuple):
        return tuple(bool(x) for x in freq)
    return tuple(i % freq == 0 for i in range(L))


def _linear_pattern(L: int, freq) -> tuple:
    """Which of the L layers are linear attention (Megatron-Core's get_linear_attention_pattern): an int k makes
    layer i full attention when (i + 1) % k == 0, a 0/1 tuple says it (1 linear)."""
    if isinstance(freq, tuple):
        return tuple(bool(x) for x in freq)
    return tuple((i + 1) % freq != 0 for i in range(L))


class MambaDims(NamedTuple):
    """Mamba-2 mixer: heads (mamba_num_heads, derived 2h / head width), head width, groups, state size."""

    heads: int
    head_dim: int
    groups: int
    state: int
    gated_norm: bool = True     # the gated RMSNorm over the inner width (mamba_gated_norm)


class GDNDims(NamedTuple):
    """Gated delta net: convolution width, key and value head widths, key and value heads."""

    conv: int
    key_dim: int
    value_dim: int
    key_heads: int
    value_heads: int


class DSADims(NamedTuple):
    """DeepSeek sparse attention's lightning indexer: heads, head width, top-k keys per query, whether the indexer
    loss is on (its autograd graph is kept), the kernel backend (none, tilelang, cudnn), whether layers share
    their top-k across layers (dsa_indexer_topk_freq > 1: the layers that compute it keep it for the ones after) and
    whether the indexer loss is the sparse one (dsa_indexer_use_sparse_loss)."""

    heads: int
    head_dim: int
    topk: int
    loss: bool
    backend: str
    share: bool = False
    sparse_loss: bool = False   # dsa_indexer_use_sparse_loss


class V4Dims(NamedTuple):
    """DeepSeek-V4's hybrid attention (:mod:`estimator.model.layers.dsv4`): the output projection's groups and rank,
    the sliding window, the indexer's heads, head width and top-k, the kernel backend (none: the reference path),
    and every layer's compression ratio (decoder layers, then MTP layers)."""

    o_groups: int
    o_lora: int
    window: int
    heads: int
    head_dim: int
    topk: int
    backend: str
    ratios: tuple


class KindInfo(NamedTuple):
    """The layer kinds of a model (:func:`layer_kinds`), worked out once per model shape."""

    kinds: tuple        # distinct LayerKind
    per_layer: tuple    # kind index per decoder layer
    mtp_kinds: tuple    # kind indices of the layers of one MTP depth
    moe: tuple          # MoE flag per decoder layer
    mtp_is_moe: bool
    mamba: bool         # some layer holds a Mamba-2 mixer
    gdn: bool           # some layer holds a gated delta net


def _info(kinds: list, per_layer: tuple, mtp_kinds: tuple, moe: tuple) -> KindInfo:
    return KindInfo(tuple(kinds), per_layer, mtp_kinds, moe, any(kinds[k].moe for k in mtp_kinds),
                    any(k.mixer in ("mamba", "mamba_attention") for k in kinds), any(k.mixer == "gdn" for k in kinds))


def global_pattern(L: int, freq) -> tuple:
    """Which of the L layers are global attention (Gemma 4): an int k makes layer i global when (i + 1) % k == 0
    (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma/modeling_gemma4.py ``_is_local_attn_layer``
    with interleaved_attn_pattern (k - 1, 1): k - 1 sliding-window layers, then a global one), a 0/1 tuple says
    it (1 global)."""
    if isinstance(freq, tuple):
        return tuple(bool(x) for x in freq)
    return tuple((i + 1) % freq == 0 for i in range(L))


@lru_cache(maxsize=1024)
def layer_kinds(L: int, mla: bool, moe_freq, linear_freq, hybrid: str | None, mtp: int, dsa: bool = False,
                glob: tuple | None = None, glob_var: tuple = (), blocks: tuple | None = None,
                v4: tuple | None = None, hash_layers: int = 0, mtp_dense: bool = False,
                dsa_shared: tuple = (), parallel_mamba: bool = False, kda: bool = False,
                attn_res: int = 0) -> KindInfo:
    """The distinct kinds, the kind index of every decoder layer, the kind indices of one MTP depth and the MoE
    flag of every layer (:class:`KindInfo`).

    A GPT model's layer i holds attention (MLA with multi_latent_attention, a gated delta net where the linear
    attention pattern says so) and an MoE where the MoE pattern says so, else a dense MLP; its MTP layers are
    built like its last layer (Megatron-Core's MTP block takes the decoder's last layer spec). A hybrid model's
    layers and MTP layers come from the pattern's symbols (:mod:`estimator.config.hybrid_pattern`). DeepSeek-V4's
    layers (``v4``: every layer's compression ratio, decoder then MTP) carry their ratio, and the first
    ``hash_layers`` MoE layers their hash routing, as the kind's overrides; its MTP layers take their own ratio.
    With ``mtp_dense`` (K-EXAONE, MiMo-V2-Flash) the MTP layers hold attention (the non-global layers' with
    global-attention layers) and a dense MLP whatever the last layer holds.
    DeepSeek-sparse-attention layers that reuse an earlier layer's top-k (``dsa_shared``, one flag per layer:
    :func:`estimator.config.rules.attention.dsa_shared_topk`) carry ``dsa_skip``; an MTP layer (layer number 1 of its
    own block, so always computing) does not.
    With ``parallel_mamba`` (Falcon-H1) every layer's mixer is a Mamba-2 mixer beside self-attention.
    With ``kda`` (Kimi K3) the linear-attention layers hold Kimi delta attention and the others the gated MLA
    (:mod:`estimator.model.layers.kimi`); with ``attn_res`` (its AttnRes block size) every layer carries the rows its
    aggregations read (``ar``)."""
    kinds: list = []

    def index(kind: LayerKind) -> int:
        if kind not in kinds:
            kinds.append(kind)
        return kinds.index(kind)

    if hybrid is not None:
        p = hybrid_pattern.parse(hybrid)
        per_layer = tuple(index(LayerKind(*hybrid_pattern.KINDS[ch])) for ch in p.layers)
        mtp_kinds = tuple(index(LayerKind(*hybrid_pattern.KINDS[ch])) for ch in p.mtp)
        moe = tuple(ch == "E" for ch in p.layers)
        return _info(kinds, per_layer, mtp_kinds, moe)
    moe = _moe_pattern(L, moe_freq)
    linear = _linear_pattern(L, linear_freq) if linear_freq is not None else (False,) * L
    attn = "dsa" if dsa else "mla" if mla else "mamba_attention" if parallel_mamba else "attention"
    if blocks is not None:
        # Heterogeneous layers (estimator.config.rules.hetero.parse_blocks): each block's mixer and MLP, with its own key/value
        # heads and MLP width where they differ from the model's (blocks hold (mixer, var, mlp, var) here).
        per_layer = tuple(index(LayerKind(mx, ml, mv + fv)) for mx, mv, ml, fv in blocks)
        return _info(kinds, per_layer, (per_layer[-1],) if mtp else (), moe)
    if v4 is not None:
        def v4_kind(ratio: int, e: bool, hashed: bool) -> LayerKind:
            var = (("cr", ratio),) + ((("hash_route", True),) if hashed and e else ())
            return LayerKind("dsv4", "moe" if e else "dense", var)
        per_layer = tuple(index(v4_kind(v4[i], e, i < hash_layers)) for i, e in enumerate(moe))
        mtp_kinds = (index(v4_kind(v4[L] if len(v4) > L else 0, moe[-1], False)),) if mtp else ()
        return _info(kinds, per_layer, mtp_kinds, moe)
    glob = glob or (False,) * L
    skip = dsa_shared or (False,) * L
    lin = "kda" if kda else "gdn"
    if kda:
        attn = "kimi_mla"
    rows = kimi_attn_res_rows(L, attn_res) if attn_res else ((),) * L
    per_layer = tuple(index(LayerKind(lin if la else attn, "moe" if e else "dense",
                                      (glob_var if gl else ()) + ((("dsa_skip", True),) if sk else ())
                                      + ((("ar", ar),) if ar else ())))
                      for la, e, gl, sk, ar in zip(linear, moe, glob, skip, rows))
    if mtp and mtp_dense:
        return _info(kinds, per_layer, (index(LayerKind(attn, "dense")),), moe)
    if mtp and skip[-1]:
        return _info(kinds, per_layer, (index(LayerKind(attn, "moe" if moe[-1] else "dense")),), moe)
    return _info(kinds, per_layer, (per_layer[-1],) if mtp else (), moe)


@dataclass(slots=True)
class Resolved:
    """Every quantity the formulas need, with Megatron-Core's defaults applied.

    Internal and treated as read-only; not frozen only because it is built thousands of times per second
    by the layout search, and frozen dataclasses pay for every field they set."""

    cfg: Config
    # model
    L: int
    h: int
    a: int
    g: int            # query groups (0 with MLA)
    dh: int           # head width (kv_channels)
    f: int            # dense ffn width
    gated: bool
    norm_w: int       # weights per norm element: 1 RMSNorm, 2 LayerNorm
    V: int            # vocabulary before padding
    Vp: int           # padded vocabulary
    E: int            # routed experts (0 dense)
    k: int            # top-k
    fm: int           # expert ffn width
    fs: int           # shared expert width (0 none)
    moe_layers: tuple  # bool per decoder layer
    kinds: tuple       # distinct layers.LayerKind of the decoder and MTP layers
    layer_kinds: tuple  # index into kinds per decoder layer
    mtp_kinds: tuple   # indices into kinds of the layers of one MTP depth
    mla: bool
    q_lora: int
    kv_lora: int
    qk_dim: int
    rope_dim: int
    v_dim: int
    mtp: int
    mtp_is_moe: bool
    tied: bool
    gate: bool        # attention_output_gate
    post_norm: bool   # post_layernorm (Gemma): a norm after the attention output and after fc2
    pre_norm: bool    # pre_layernorm: the norms before attention and MLP (false: OLMo 2)
    qk_full: bool     # qk_layernorm_full_dim: q/k norms over all heads (OLMo 2, MiniMax-M2)
    sinks: bool       # learnable softmax offsets (attention sinks)
    dv: int           # self-attention's value head width (v_channels; 0: kv_channels, also a layer kind's)
    lat: int          # moe_latent_size (0 none)
    mamba: "MambaDims | None"   # the Mamba-2 mixer's shape (None without Mamba layers)
    gdn: "GDNDims | None"       # the gated delta net's shape (None without one)
    dsa: "DSADims | None"       # DeepSeek sparse attention's indexer (None without it)
    v4: "V4Dims | None"         # DeepSeek-V4's hybrid attention (None without it)
    hc: int           # hyper-connection residual streams (0 without mHC)
    shape: tuple      # the model section's derived values, one object per distinct section (a cache key)
    # parallelism
    t: int
    p: int
    ep: int
    etp: int
    cp: int
    v: int
    dp: int
    edp: int
    stages: tuple     # per stage: tuple of decoder-layer ranges (one per virtual chunk)
    plan: tuple       # per stage: pipeline_layout.StagePlan (its chunks: layers, embedding, loss, MTP)
    group: int        # microbatch_group_size_per_vp_stage (micro-batches per virtual stage in a row)
    # training
    s: int
    b: int
    m: int | None     # micro-batches per step (None: unknown)
    sp: bool
    world: int
    # per layer kind (a LayerKind's var overrides them)
    cr: int = 0               # DeepSeek-V4: the layer's key compression ratio (0 sliding window only)
    hash_route: bool = False  # the layer's MoE routes by a fixed token table (no expert bias)
    dsa_skip: bool = False    # DeepSeek sparse attention: the layer reuses an earlier layer's top-k (no indexer)
    ar: tuple = (0, 0, 0)     # Kimi K3's AttnRes: rows aggregated before attention, before the MLP, for the output
    # Kimi K3 (model-wide)
    kda: "GDNDims | None" = None   # Kimi delta attention's shape (conv, head width twice, heads twice; None without)
    attn_res: int = 0         # AttnRes block size (0 without AttnRes)
    lat_norm: bool = False    # the routed-expert norm of latent MoE (moe_latent_norm)
    fmv: int = 0              # ERNIE-VL: the vision expert pool's width (0: one pool)
    vis: int = 0              # ERNIE-VL: tokens of each sequence routed to the vision pool (images x (tokens per
    #                           image + the image start and end tokens))

    @property
    def kv(self) -> int:
        """Key/value heads each tensor-parallel rank attends with: g / t, or one when t is a multiple of g
        (fewer key/value heads than ranks: Megatron-LM @ d98e8a64 : megatron/core/transformer/attention.py
        ``Attention.__init__`` sets num_query_groups_per_partition = 1 and ``SelfAttention.
        get_query_key_value_tensors`` all-gathers the QKV output and takes the rank's group from it)."""
        return self.g // self.t if self.g >= self.t else 1


_MODEL_SHAPES: dict = {}      # id(model section) -> (section, shape): the layout search's one model object
_SHAPES_BY_VALUE: dict = {}   # model section -> shape: equal sections loaded anew share one shape object


def _model_shape(m) -> tuple:
    """(ffn width, MTP layers, :class:`KindInfo`, the hybrid pattern's layout, Mamba and GDN shapes) of a model
    section, memoised on the section object (the layout search resolves one model in many layouts) and on its
    value (configurations loaded anew). Equal sections get the same tuple object, which later caches key on."""
    hit = _MODEL_SHAPES.get(id(m))
    if hit is not None and hit[0] is m:
        return hit[1]
    out = _SHAPES_BY_VALUE.get(m)
    if out is None:
        out = _SHAPES_BY_VALUE[m] = _compute_shape(m)
        if len(_SHAPES_BY_VALUE) > 1024:
            _SHAPES_BY_VALUE.clear()
            _SHAPES_BY_VALUE[m] = out
    if len(_MODEL_SHAPES) > 1024:
        _MODEL_SHAPES.clear()
    _MODEL_SHAPES[id(m)] = (m, out)
    return out


def _variants(m) -> tuple:
    """(global-attention flag per layer or None, the global layers' overrides, heterogeneous blocks or None) of a
    model section: the layers that differ from the model's own query heads (num_global_attention_heads), head
    width, key/value heads, attention sinks (global_softmax_type) or MLP width."""
    dh = m.kv_channels or m.hidden_size // m.num_attention_heads
    g = m.num_query_groups or m.num_attention_heads
    glob = glob_var = None
    if m.global_attention_freq is not None and m.hybrid_layer_pattern is None:
        glob = global_pattern(m.num_layers, m.global_attention_freq)
        sinks = m.softmax_type == "learnable"
        own = {"a": m.num_attention_heads, "dh": dh, "g": g, "sinks": sinks}
        glob_var = tuple((k, v) for k, v in (("a", m.num_global_attention_heads or m.num_attention_heads),
                                             ("dh", m.global_kv_channels or dh), ("g", m.num_global_query_groups
                                                                                  or g),
                                             ("sinks", (m.global_softmax_type or m.softmax_type) == "learnable"))
                         if v != own[k])
    blocks = None
    if m.heterogeneous_layers_config is not None and m.hybrid_layer_pattern is None:
        from ..config.rules.hetero import parse_blocks as parse
        f = default_ffn_hidden_size(m)
        blocks = tuple((b.mixer, (("g", b.groups),) if b.groups not in (None, g) else (),
                        b.mlp, (("f", b.ffn),) if b.ffn not in (None, f) else ())
                       for b in parse(m.heterogeneous_layers_config, m.num_layers, m.num_attention_heads,
                                      m.hidden_size))
    return glob, glob_var or (), blocks


def _compute_shape(m) -> tuple:
    if m.model_kind == "wan":       # Megatron-Bridge's WanModel: one kind of layer (estimator/model/layers/wan.py)
        ki = _info([LayerKind("wan", "wan_mlp")], (0,) * m.num_layers, (), (False,) * m.num_layers)
        return (default_ffn_hidden_size(m), 0, ki, None, None, None, None, None)
    E = m.num_experts or 0
    hybrid = m.hybrid_layer_pattern
    mtp = hybrid_pattern.parse(hybrid).mtp_depths if hybrid is not None else (m.mtp_num_layers or 0)
    dsa = m.experimental_attention_variant == "dsa"
    dsv4 = m.experimental_attention_variant == "dsv4_hybrid" and hybrid is None
    linear = m.linear_attention_freq if m.experimental_attention_variant and not dsa and not dsv4 else None
    kda = m.experimental_attention_variant == "kda" and hybrid is None
    glob, glob_var, blocks = _variants(m)
    ki = layer_kinds(m.num_layers, m.multi_latent_attention,
                     (m.moe_layer_freq if m.moe_layer_freq is not None else 1) if E else 0, linear, hybrid, mtp,
                     dsa=dsa and hybrid is None, glob=glob, glob_var=glob_var, blocks=blocks,
                     v4=tuple(m.csa_compress_ratios or ()) if dsv4 else None,
                     hash_layers=m.moe_n_hash_layers if E else 0, mtp_dense=m.mtp_dense_mlp,
                     dsa_shared=dsa_shared_topk(m.num_layers, m.dsa_indexer_topk_freq, m.dsa_indexer_skip_topk_offset)
                     if dsa and hybrid is None and m.dsa_indexer_topk_freq > 1 else (),
                     parallel_mamba=m.parallel_mamba_attention,
                     kda=kda, attn_res=(m.attn_res_block_size or 0) if kda else 0)
    mamba = MambaDims(m.mamba_num_heads or 2 * m.hidden_size // m.mamba_head_dim, m.mamba_head_dim,
                      m.mamba_num_groups, m.mamba_state_dim, m.mamba_gated_norm) if ki.mamba else None
    gdn = GDNDims(m.linear_conv_kernel_dim, m.linear_key_head_dim, m.linear_value_head_dim, m.linear_num_key_heads,
                  m.linear_num_value_heads) if ki.gdn else None
    dsa_dims = DSADims(m.dsa_indexer_n_heads or 0, m.dsa_indexer_head_dim or 0, m.dsa_indexer_topk or 0,
                       bool(m.dsa_indexer_loss_coeff), m.dsa_kernel_backend,
                       m.dsa_indexer_topk_freq > 1, m.dsa_indexer_use_sparse_loss) if dsa and hybrid is None else None
    v4 = V4Dims(m.o_groups, m.o_lora_rank, m.csa_window_size, m.dsa_indexer_n_heads or 0,
                m.dsa_indexer_head_dim or 0, m.dsa_indexer_topk or 0, m.dsa_kernel_backend,
                tuple(m.csa_compress_ratios or ())) if dsv4 else None
    return (default_ffn_hidden_size(m), mtp, ki, hybrid_pattern.layout_of(hybrid) if hybrid is not None else None,
            mamba, gdn, dsa_dims, v4)


def resolve(cfg: Config, *, sub_sample: bool = True) -> Resolved:
    """Apply every derived default (see each field's ``derived`` text in the schema).

    With dynamic (hybrid) context parallelism the sequence, micro-batch, context- and data-parallel sizes are those
    of the busiest rank's largest sub-sample, what the memory is computed from; ``sub_sample=False`` keeps the
    configured ones, for the layout tools (estimator/plan/) that reason about the layout as written."""
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    t, p, cp, ep = (par.tensor_model_parallel_size, par.pipeline_model_parallel_size,
                    par.context_parallel_size, par.expert_model_parallel_size)
    etp = par.expert_tensor_parallel_size or t
    L, h, a = m.num_layers, m.hidden_size, m.num_attention_heads
    E = m.num_experts or 0
    shape = _model_shape(m)
    f, mtp, ki, layout, mamba, gdn, dsa, v4 = shape
    if m.hybrid_layer_pattern is None:
        layout = par.pipeline_model_parallel_layout
    dp = tr.world_size // (t * p * cp)
    edp = tr.world_size // (etp * ep * p) if E else dp * cp
    s = tr.seq_length or m.max_position_embeddings
    wan = m.model_kind == "wan"
    if wan:             # the latent video tokens of a micro-batch; no vocabulary (estimator/model/layers/wan.py)
        s = latent_tokens(m, s, cp)
    mb = tr.global_batch_size // (tr.micro_batch_size * dp) if tr.global_batch_size else None
    b = tr.micro_batch_size
    if par.hybrid_context_parallel and sub_sample:
        # Dynamic CP: the busiest rank's micro-batch is one sequence, its largest shard (hybrid_cp_shard), run over
        # c of the dp x cp ranks; dp x cp, which shards the optimizer, is kept.
        c, s = hybrid_cp_shard(s, par.max_seqlen_per_dp_cp_rank)
        dp, cp, b = dp * cp // c, c, 1
    mla = m.multi_latent_attention
    kda = m.experimental_attention_variant == "kda" and m.hybrid_layer_pattern is None
    v = (par.virtual_pipeline_model_parallel_size or 1) if layout is None else layout_stages(layout, p)
    plan, stages = placement(L, p, v, par.num_layers_in_first_pipeline_stage, par.num_layers_in_last_pipeline_stage,
                             par.account_for_embedding_in_pipeline_split, par.account_for_loss_in_pipeline_split,
                             layout, mtp)
    return Resolved(
        cfg=cfg, L=L, h=h, a=a,
        g=0 if mla else (m.num_query_groups or a),
        dh=m.kv_channels or h // a,
        f=f, gated=m.gated_linear_unit, norm_w=2 if m.normalization == "LayerNorm" else 1,
        V=0 if wan else m.vocab_size,
        Vp=0 if wan else padded_vocab_size(m.vocab_size, m.make_vocab_size_divisible_by, t),
        E=E, k=(m.moe_router_topk or 2) if E else 0, fm=(m.moe_ffn_hidden_size or f) if E else 0,
        fs=(m.moe_shared_expert_intermediate_size or 0) if E else 0, moe_layers=ki.moe,
        kinds=ki.kinds, layer_kinds=ki.per_layer, mtp_kinds=ki.mtp_kinds,
        mla=mla, q_lora=m.q_lora_rank or 0 if mla else 0,
        kv_lora=(m.kv_lora_rank or 512) if mla else 0,
        qk_dim=(m.qk_head_dim or 128) if mla else 0,
        rope_dim=(m.qk_pos_emb_head_dim or 64) if mla else 0,
        v_dim=(m.v_head_dim or 128) if mla else 0,
        mtp=mtp, mtp_is_moe=ki.mtp_is_moe,
        tied=not (m.untie_embeddings_and_output_weights or wan),
        gate=m.attention_output_gate, post_norm=m.post_layernorm, pre_norm=m.pre_layernorm,
        qk_full=m.qk_layernorm and m.qk_layernorm_full_dim, sinks=m.softmax_type == "learnable",
        dv=0 if mla else (m.v_channels or 0),
        lat=(m.moe_latent_size or 0) if E else 0, mamba=mamba, gdn=gdn, dsa=dsa, v4=v4,
        hc=m.num_residual_streams if m.enable_hyper_connections else 0, shape=shape,
        t=t, p=p, ep=ep, etp=etp, cp=cp, v=v, dp=dp, edp=edp, stages=stages, plan=plan,
        group=par.microbatch_group_size_per_vp_stage or p,
        s=s, b=b, m=mb, sp=tr.sequence_parallel, world=tr.world_size,
        kda=GDNDims(m.linear_conv_kernel_dim, m.linear_key_head_dim, m.linear_value_head_dim, m.linear_num_key_heads,
                    m.linear_num_value_heads) if kda else None,
        attn_res=(m.attn_res_block_size or 0) if kda else 0, lat_norm=m.moe_latent_norm and bool(E),
        fmv=(m.moe_vision_ffn_hidden_size or 0) if E else 0,
        vis=tr.images_per_sample * (image_tokens(m, tr.image_resolution) + ERNIE_IMAGE_BOUNDARY_TOKENS)
        if E and m.moe_vision_ffn_hidden_size and tr.images_per_sample and m.vision_num_layers is not None else 0,
    )
