"""Derived values, resolved in one explicit step.

A validated :class:`~estimator.schema.Config` leaves some fields ``None`` ("derive it"). This module
turns it into a :class:`Resolved` record of plain integers, the single place where Megatron-Core's
defaults and derived quantities are applied: padded vocabulary, head width, data-parallel and
expert-data-parallel sizes, the layers of every pipeline stage and virtual chunk, which layers are
MoE, and the number of micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .errors import Problem
from .pipeline_layout import LayoutError, expand_layout, layout_problems, placement, stage_counts
from .schema import Config

__all__ = ["DTYPE_BYTES", "Resolved", "layer_split_problems", "padded_vocab_size", "resolve", "stage_counts",
           "stage_layers", "virtual_stages"]

#: Bytes per element of each dtype name used in the schema.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def padded_vocab_size(vocab_size: int, divisible_by: int, tp: int) -> int:
    """Megatron's ``_vocab_size_with_padding``: round up to a multiple of ``divisible_by x tp``."""
    multiple = divisible_by * tp
    return -(-vocab_size // multiple) * multiple


def default_ffn_hidden_size(m) -> int:
    """Megatron-LM's derived ffn_hidden_size (arguments.py): int(4h * 2/3 / 64) * 64 for SwiGLU, else 4h."""
    if m.ffn_hidden_size:
        return m.ffn_hidden_size
    if m.activation_func == "swiglu":
        return int(4 * m.hidden_size * 2 / 3 / 64) * 64
    return 4 * m.hidden_size


def layer_split_problems(cfg: Config) -> list[Problem]:
    """Megatron-Core's rules for the pipeline split (:func:`estimator.pipeline_layout.layout_problems`) and the
    interleaved schedule's micro-batch groups."""
    m, par = cfg.model, cfg.parallelism
    out = [Problem(f, v, msg) for f, v, msg in layout_problems(par, m.num_layers, m.mtp_num_layers or 0)]
    group = par.microbatch_group_size_per_vp_stage
    if group is not None and not out:
        out += _group_problems(cfg, group)
    return out


def _group_problems(cfg: Config, group: int) -> list[Problem]:
    """``microbatch_group_size_per_vp_stage`` (schedules.py, forward_backward_pipelining_with_interleaving):
    only with virtual stages, and at least the pipeline size (its rules against the number of micro-batches
    are :func:`estimator.config.interleaving_problem`'s)."""
    par = cfg.parallelism
    p, v = par.pipeline_model_parallel_size, virtual_stages(par)
    name = "parallelism.microbatch_group_size_per_vp_stage"
    if v == 1:
        return [Problem(name, group, "applies only to the interleaved schedule (virtual pipeline stages > 1)")]
    if group < p:
        return [Problem(name, group, f"must be >= pipeline_model_parallel_size ({p}) (Megatron-Core)")]
    return []   # against the number of micro-batches: estimator.config.interleaving_problem


def virtual_stages(par) -> int:
    """Virtual pipeline stages per rank: from the layout string when there is one, else the field (1 if null)."""
    if par.pipeline_model_parallel_layout is not None:
        try:
            n = len(expand_layout(par.pipeline_model_parallel_layout))
        except LayoutError:
            return 1
        return max(n // par.pipeline_model_parallel_size, 1)
    return par.virtual_pipeline_model_parallel_size or 1


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
    mla: bool
    q_lora: int
    kv_lora: int
    qk_dim: int
    rope_dim: int
    v_dim: int
    mtp: int
    mtp_is_moe: bool
    tied: bool
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


def resolve(cfg: Config) -> Resolved:
    """Apply every derived default (see each field's ``derived`` text in the schema)."""
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    t, p, cp, ep = (par.tensor_model_parallel_size, par.pipeline_model_parallel_size,
                    par.context_parallel_size, par.expert_model_parallel_size)
    etp = par.expert_tensor_parallel_size or t
    v = (par.virtual_pipeline_model_parallel_size or 1) if par.pipeline_model_parallel_layout is None \
        else virtual_stages(par)
    L, h, a = m.num_layers, m.hidden_size, m.num_attention_heads
    E = m.num_experts or 0
    f = default_ffn_hidden_size(m)
    pattern = _moe_pattern(L, (m.moe_layer_freq if m.moe_layer_freq is not None else 1) if E else 0)
    dp = tr.world_size // (t * p * cp)
    edp = tr.world_size // (etp * ep * p) if E else dp * cp
    s = tr.seq_length or m.max_position_embeddings
    mb = tr.global_batch_size // (tr.micro_batch_size * dp) if tr.global_batch_size else None
    mla = m.multi_latent_attention
    plan, stages = placement(L, p, v, par.num_layers_in_first_pipeline_stage, par.num_layers_in_last_pipeline_stage,
                       par.account_for_embedding_in_pipeline_split, par.account_for_loss_in_pipeline_split,
                       par.pipeline_model_parallel_layout, m.mtp_num_layers or 0)
    return Resolved(
        cfg=cfg, L=L, h=h, a=a,
        g=0 if mla else (m.num_query_groups or a),
        dh=m.kv_channels or h // a,
        f=f, gated=m.gated_linear_unit, norm_w=2 if m.normalization == "LayerNorm" else 1,
        V=m.vocab_size, Vp=padded_vocab_size(m.vocab_size, m.make_vocab_size_divisible_by, t),
        E=E, k=(m.moe_router_topk or 2) if E else 0, fm=(m.moe_ffn_hidden_size or f) if E else 0,
        fs=(m.moe_shared_expert_intermediate_size or 0) if E else 0, moe_layers=pattern,
        mla=mla, q_lora=m.q_lora_rank or 0 if mla else 0,
        kv_lora=(m.kv_lora_rank or 512) if mla else 0,
        qk_dim=(m.qk_head_dim or 128) if mla else 0,
        rope_dim=(m.qk_pos_emb_head_dim or 64) if mla else 0,
        v_dim=(m.v_head_dim or 128) if mla else 0,
        mtp=m.mtp_num_layers or 0, mtp_is_moe=bool(pattern[-1]) if pattern else False,
        tied=not m.untie_embeddings_and_output_weights,
        t=t, p=p, ep=ep, etp=etp, cp=cp, v=v, dp=dp, edp=edp, stages=stages, plan=plan,
        group=par.microbatch_group_size_per_vp_stage or p,
        s=s, b=tr.micro_batch_size, m=mb, sp=tr.sequence_parallel, world=tr.world_size,
    )
