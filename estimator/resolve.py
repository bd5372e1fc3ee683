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
from .schema import Config

__all__ = ["DTYPE_BYTES", "Resolved", "layer_split_problems", "padded_vocab_size", "resolve", "stage_counts",
           "stage_layers"]

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


def stage_counts(L: int, p: int, first: int | None, last: int | None) -> list[int] | None:
    """Layers per pipeline stage, or None when they cannot be split."""
    if p == 1:
        return [L]
    if first is None and last is None:
        return [L // p] * p if L % p == 0 else None
    middle = p - (first is not None) - (last is not None)
    rest = L - (first or 0) - (last or 0)
    if rest < 0 or (middle == 0 and rest != 0) or (middle and rest % middle):
        return None
    each = rest // middle if middle else 0
    counts = [each] * p
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return counts


def layer_split_problems(cfg: Config) -> list[Problem]:
    m, par = cfg.model, cfg.parallelism
    L, p, v = m.num_layers, par.pipeline_model_parallel_size, par.virtual_pipeline_model_parallel_size or 1
    first, last = par.num_layers_in_first_pipeline_stage, par.num_layers_in_last_pipeline_stage
    out = []
    if (first is not None or last is not None) and p == 1:
        name = "num_layers_in_first_pipeline_stage" if first is not None else "num_layers_in_last_pipeline_stage"
        out.append(Problem(f"parallelism.{name}", first if first is not None else last,
                           "an uneven pipeline split needs pipeline_model_parallel_size > 1"))
        return out
    if par.virtual_pipeline_model_parallel_size is not None and p == 1 and v > 1:
        out.append(Problem("parallelism.virtual_pipeline_model_parallel_size", v,
                           "the interleaved schedule needs pipeline_model_parallel_size > 1"))
        return out
    counts = stage_counts(L, p, first, last)
    if counts is None:
        if first is None and last is None:
            out.append(Problem("model.num_layers", L, f"num_layers ({L}) must be divisible by "
                               f"pipeline_model_parallel_size ({p}), or set num_layers_in_first/last_pipeline_stage"))
        else:
            out.append(Problem("parallelism.num_layers_in_first_pipeline_stage", first,
                               f"num_layers ({L}) minus first ({first}) and last ({last}) stage layers must split "
                               f"evenly over the remaining stages of {p}"))
        return out
    if v > 1:
        bad = [c for c in counts if c % v]
        if bad:
            out.append(Problem("parallelism.virtual_pipeline_model_parallel_size", v,
                               f"the layers of each pipeline stage ({', '.join(map(str, counts))}) must be "
                               f"divisible by virtual_pipeline_model_parallel_size ({v})"))
    return out


def stage_layers(L: int, p: int, v: int, first: int | None = None, last: int | None = None) -> list[list[range]]:
    """Global layer indices of each (stage, virtual chunk), in Megatron's interleaved order.

    Chunk c of stage r holds the (c*p + r)-th block of layers: with p=2, v=2 and 8 layers, stage 0 holds
    layers 0-1 and 4-5, stage 1 holds 2-3 and 6-7.
    """
    counts = stage_counts(L, p, first, last)
    assert counts is not None, "validated before"
    chunk = [c // v for c in counts]
    out: list[list[range]] = [[] for _ in range(p)]
    start = 0
    for c in range(v):
        for r in range(p):
            out[r].append(range(start, start + chunk[r]))
            start += chunk[r]
    return out


@lru_cache(maxsize=1024)
def _moe_pattern(L: int, freq) -> tuple:
    """Which of the L layers are MoE: freq 0 none, an int k every k-th (Megatron: i % k == 0), a 0/1 tuple."""
    if not freq:
        return (False,) * L
    if isinstance(freq, tuple):
        return tuple(bool(x) for x in freq)
    return tuple(i % freq == 0 for i in range(L))


@lru_cache(maxsize=1024)
def _stages(L: int, p: int, v: int, first: int | None, last: int | None) -> tuple:
    return tuple(tuple(chunks) for chunks in stage_layers(L, p, v, first, last))


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
    stages: tuple     # per stage: tuple of ranges (one per virtual chunk)
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
    v = par.virtual_pipeline_model_parallel_size or 1
    L, h, a = m.num_layers, m.hidden_size, m.num_attention_heads
    E = m.num_experts or 0
    f = default_ffn_hidden_size(m)
    pattern = _moe_pattern(L, (m.moe_layer_freq if m.moe_layer_freq is not None else 1) if E else 0)
    dp = tr.world_size // (t * p * cp)
    edp = tr.world_size // (etp * ep * p) if E else dp * cp
    s = tr.seq_length or m.max_position_embeddings
    mb = tr.global_batch_size // (tr.micro_batch_size * dp) if tr.global_batch_size else None
    mla = m.multi_latent_attention
    stages = _stages(L, p, v, par.num_layers_in_first_pipeline_stage, par.num_layers_in_last_pipeline_stage)
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
        t=t, p=p, ep=ep, etp=etp, cp=cp, v=v, dp=dp, edp=edp, stages=stages,
        s=s, b=tr.micro_batch_size, m=mb, sp=tr.sequence_parallel, world=tr.world_size,
    )
