"""What Megatron-LM and Megatron-Bridge print as "Theoretical memory footprints", reproduced exactly.

Users reconcile their training logs with this project's (more complete) model; this module gives the
two first-party formulas as pure functions, written from a reading of the upstream code (snapshots of
2026-08-22), so their numbers can be recomputed and explained:

- ``megatron-lm``: NVIDIA/Megatron-LM ``megatron/training/theoretical_memory_usage.py``:
  ``compute_weight_and_optimizer_memory``, ``compute_activation_memory`` (sequence parallelism and
  selective recompute), ``compute_activation_memory_without_sp`` and ``report_theoretical_memory``.
- ``megatron-bridge``: NVIDIA-NeMo/Megatron-Bridge
  ``src/megatron/bridge/training/utils/theoretical_memory_utils.py``: ``estimate_training_memory``,
  ``format_training_memory_estimate`` and ``report_theoretical_memory``.

Both count bytes per parameter as 18 without the distributed optimizer and ``6 + 12 / d`` with it
(bf16 weights, fp32 gradients, fp32 master weights and Adam moments), and take activations from
Table 2 of Korthikanti et al. 2022 (arXiv:2205.05198), ``s*b*h*(18 + 4F/h)`` bytes per layer.
How they differ (norms, router, MTP, uneven pipelines, context parallelism) is tabulated in
``shared/reference/formula-vectors.md``; each docstring below gives the formula.

Every function takes the upstream argument names (a ``SimpleNamespace`` or a dict: Megatron-LM's flat
``args``; Bridge's ``model``/``train``/``optimizer``/``data_parallel_size`` container), so upstream's own
test cases feed in unchanged; :mod:`estimator.reference.theoretical` maps this project's configuration onto them.
Keyword ``overrides`` set single arguments, including those our schema lacks (``moe_latent_size``).
Results are :class:`~estimator.reference.results.TrainingMemoryEstimate` or floats, in bytes, as upstream
computes them; "MB"/"GB" are 2^20/2^30 bytes, as upstream prints them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .results import MemoryComponent, TrainingMemoryEstimate, memory_unit

__all__ = [
    "FORMULAS", "megatron_lm_weight_and_optimizer_bytes", "megatron_lm_activation_bytes",
    "megatron_lm_activation_bytes_without_sp", "megatron_lm_estimate", "megatron_lm_report",
    "megatron_bridge_estimate", "megatron_bridge_format", "megatron_bridge_report",
]

#: The upstream formulas this module reproduces.
FORMULAS = ("megatron-lm", "megatron-bridge")

#: Bytes per parameter: bf16 weight 2 + fp32 gradient 4 (fixed) + fp32 master 4 + Adam moments 8 (sharded).
UNSHARDED_BYTES, FIXED_BYTES, SHARDED_BYTES = 18, 6, 12

#: Megatron-LM's allowance for optimizer and other temporaries on the activations without SP (+5 %).
WITHOUT_SP_OVERHEAD = 1.05


def _bytes_per_parameter(distributed: bool, shards: float) -> float:
    return UNSHARDED_BYTES if not distributed else FIXED_BYTES + SHARDED_BYTES / shards


def _plain_dict(obj, what: str) -> dict:
    from ..config.schema import Config
    if isinstance(obj, (Config, str, os.PathLike)):
        raise ValueError(f"{what}: expected upstream argument names (a namespace or dict), got a configuration; "
                         "estimator.reference.theoretical.megatron_lm_args / megatron_bridge_config map one")
    if isinstance(obj, Mapping):
        return dict(obj)
    if hasattr(obj, "__dict__"):
        return dict(vars(obj))
    raise ValueError(f"{what}: expected a namespace or a dict of upstream argument names, got {type(obj).__name__}")


def _need(d: dict, names, formula: str, where: str = "") -> None:
    missing = [where + n for n in names if n not in d]
    if missing:
        raise ValueError(f"{formula}: missing upstream argument(s): {', '.join(missing)}")


def _moe_pattern(freq, num_layers: int, formula: str) -> list:
    """0/1 per layer from ``moe_layer_freq``: an int k makes every k-th layer (from 0) MoE, a list is the pattern."""
    if isinstance(freq, bool) or not isinstance(freq, (int, list, tuple)):
        raise ValueError(f"{formula}: moe_layer_freq must be an int or a list of 0/1, got {freq!r}")
    if isinstance(freq, int):
        if freq <= 0:
            raise ValueError(f"{formula}: moe_layer_freq must be positive, got {freq}")
        return [1 if i % freq == 0 else 0 for i in range(num_layers)]
    if len(freq) != num_layers:
        raise ValueError(f"{formula}: moe_layer_freq has {len(freq)} entries; num_layers is {num_layers}")
    return [int(x) for x in freq]


def _embedding_and_schedule(act: float, s, b, h, p, v, num_microbatches) -> float:
    """Terms both projects add to the layers' activations of the first stage: the embedding input ``8sbp``
    and dropout ``sbhp``, then the interleaving penalty ``1 + (p-1)/(p v)`` or, with 1F1B and a known
    number m of micro-batches, the discount ``min(1, m/p)``."""
    act += 8 * s * b * p
    act += s * b * h * p
    if v is not None:
        act *= 1 + (p - 1) / (p * v)
    elif p > 1 and num_microbatches is not None:
        act *= min(1, num_microbatches / p)
    return act


# --------------------------------------------------------------------------------------------------
# Megatron-LM

#: Arguments that switch a feature on; absent means off (Megatron-LM's defaults).
_MLM_OFF = {"num_experts": None, "moe_shared_expert_intermediate_size": None, "moe_latent_size": None,
            "moe_shared_expert_gate": False, "mtp_num_layers": None, "multi_latent_attention": False,
            "group_query_attention": False, "virtual_pipeline_model_parallel_size": None,
            "hybrid_layer_pattern": None}


def _mlm_input(args, overrides: dict) -> dict:
    a = _plain_dict(args, "megatron-lm")
    a.update(overrides)
    for name, off in _MLM_OFF.items():
        a.setdefault(name, off)
    return a


@dataclass(frozen=True, slots=True)
class _MLMShard:
    """Megatron-LM's parameters: totals and the split on its "most loaded shard"."""

    total: float
    active: float
    routed_total: float     # routed-expert parameters of the block and the MTP block
    dense_on_shard: float   # TP-sharded + replicated parameters
    expert_on_shard: float
    dense_bpp: float        # bytes per parameter, optimizer sharded over data_parallel_size
    expert_bpp: float       # ... over world_size // (etp * ep * pp)


def _mlm_shard(a: dict) -> _MLMShard:
    """``compute_weight_and_optimizer_memory``, split into its parts.

    Per layer: attention ``2h^2 (1 + g/a)(a*kv/h)`` (or the MLA terms), dense MLP ``2hF`` (x1.5 with
    swiglu), shared expert ``2hFs`` (x1.5), routed experts ``2 h' Fm E`` (x1.5; h' = moe_latent_size or h),
    latent projections ``2 h h'``, norms ``2nh`` (n = 1 RMSNorm, 2 LayerNorm), router ``hE`` (+E bias),
    shared-expert gate ``h``; final norm ``nh``; embedding ``hV`` (twice when untied); MTP layers are
    copies of the last layer's kind. The most-loaded shard holds 1/pp of the block, the whole MTP block and
    one embedding (two when untied and pp = 1): TP-sharded parts / tp, norms, router, gate and latent
    projections whole, routed experts / (etp * ep).
    """
    f = "megatron-lm"
    _need(a, ("hidden_size", "num_attention_heads", "kv_channels", "num_layers", "ffn_hidden_size",
              "padded_vocab_size", "normalization", "swiglu", "untie_embeddings_and_output_weights",
              "tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
              "expert_tensor_parallel_size", "world_size", "data_parallel_size", "use_distributed_optimizer"), f)
    h, heads, L = a["hidden_size"], a["num_attention_heads"], a["num_layers"]
    t, p = a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"]
    etp, ep = a["expert_tensor_parallel_size"], a["expert_model_parallel_size"]
    E = a["num_experts"]
    if E is not None:
        _need(a, ("moe_layer_freq", "moe_ffn_hidden_size", "moe_router_topk", "add_bias_linear"), f)
    if a["group_query_attention"]:
        _need(a, ("num_query_groups",), f)
    groups = a["num_query_groups"] if a["group_query_attention"] else heads
    glu = 3 / 2 if a["swiglu"] else 1
    fs = a["moe_shared_expert_intermediate_size"] or 0
    pattern = [0] * L if E is None else _moe_pattern(a["moe_layer_freq"], L, f)
    fm = 0 if E is None else a["moe_ffn_hidden_size"]
    n_moe = sum(pattern)
    n_dense = L - n_moe
    mtp = a["mtp_num_layers"] or 0
    mtp_moe, mtp_dense = pattern[-1] * mtp, (1 - pattern[-1]) * mtp
    norm = 1 if a["normalization"] == "RMSNorm" else 2

    if a["multi_latent_attention"]:
        _need(a, ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"), f)
        qk, rope, vd = a["qk_head_dim"], a["qk_pos_emb_head_dim"], a["v_head_dim"]
        qr = a["q_lora_rank"]
        q_part = h * heads * (qk + rope) if qr is None else qr * (h + heads * (qk + rope) + norm)
        attn = q_part + a["kv_lora_rank"] * (h + heads * (qk + vd) + norm) + h * rope + heads * vd * h
    else:
        attn = 2 * h * h * ((1 + groups / heads) * (a["kv_channels"] * heads / h))
    emb = h * a["padded_vocab_size"]
    final = norm * h
    mlp = 2 * h * a["ffn_hidden_size"] * glu
    shared = 2 * h * fs * glu
    latent = a["moe_latent_size"]
    eh = latent if latent is not None else h
    routed = 2 * eh * fm * (1 if E is None else E) * glu
    routed_active = 2 * eh * fm * a["moe_router_topk"] * glu if E is not None else 0
    latent_proj = 2 * h * latent if E is not None and latent is not None else 0
    norms = 2 * h * norm
    router = h * E + (E if a["add_bias_linear"] else 0) if E is not None else 0
    gate = h if fs > 0 and a["moe_shared_expert_gate"] else 0

    untied = a["untie_embeddings_and_output_weights"]
    dense_layer = attn + mlp + norms
    moe_rest = attn + shared + latent_proj + norms + router + gate  # an MoE layer without its routed experts
    shared_part = dense_layer * n_dense + final + dense_layer * mtp_dense + (moe_rest + routed) * mtp_moe \
        + (2 * emb if untied else emb)
    sharded = lambda nd, nm: (attn + mlp) * nd + (attn + shared) * nm  # noqa: E731
    replicated = lambda nd, nm: norms * nd + (norms + latent_proj + router + gate) * nm  # noqa: E731
    tp_part = (sharded(n_dense, n_moe) / p + sharded(mtp_dense, mtp_moe) + emb) / t
    if untied and p == 1:
        tp_part += emb / t
    rep_part = (replicated(n_dense, n_moe) + final) / p + replicated(mtp_dense, mtp_moe)
    dist, dp, edp = a["use_distributed_optimizer"], a["data_parallel_size"], a["world_size"] // (etp * ep * p)
    if dist and (dp < 1 or edp < 1):
        raise ValueError(f"megatron-lm: data_parallel_size ({dp}) and world_size ({a['world_size']}) // (etp x ep x "
                         f"pp = {etp * ep * p}) must be at least 1")
    return _MLMShard(total=shared_part + (moe_rest + routed) * n_moe,
                     active=shared_part + (moe_rest + routed_active) * n_moe,
                     routed_total=routed * (n_moe + mtp_moe), dense_on_shard=tp_part + rep_part,
                     expert_on_shard=(routed * n_moe / p + routed * mtp_moe) / (etp * ep),
                     dense_bpp=_bytes_per_parameter(dist, dp), expert_bpp=_bytes_per_parameter(dist, edp))


def megatron_lm_weight_and_optimizer_bytes(args, **overrides) -> float:
    """Megatron-LM's ``compute_weight_and_optimizer_memory``: model-state bytes of the most-loaded shard."""
    s = _mlm_shard(_mlm_input(args, overrides))
    return s.dense_on_shard * s.dense_bpp + s.expert_on_shard * s.expert_bpp


def _mlm_activation(args, num_microbatches, overrides: dict, with_sp: bool) -> float:
    a = _mlm_input(args, overrides)
    _need(a, ("seq_length", "micro_batch_size", "hidden_size", "num_layers", "ffn_hidden_size",
              "padded_vocab_size", "tensor_model_parallel_size", "pipeline_model_parallel_size"), "megatron-lm")
    s, b, h, V = a["seq_length"], a["micro_batch_size"], a["hidden_size"], a["padded_vocab_size"]
    p, t = a["pipeline_model_parallel_size"], a["tensor_model_parallel_size"]
    per_layer = s * b * h * ((18 + 4 * (a["ffn_hidden_size"] / h)) if with_sp else (10 + 24 / t))
    act = _embedding_and_schedule(per_layer * a["num_layers"], s, b, h, p,
                                  a["virtual_pipeline_model_parallel_size"], num_microbatches)
    if with_sp:
        if p == 1:
            act += s * b * h * 4 * (1 + V / h)
        return act / t
    if p == 1:
        act += (s * b * V / t + s * b * h) * 2
    return act * WITHOUT_SP_OVERHEAD


def megatron_lm_activation_bytes(args, num_microbatches: int | None = None, **overrides) -> float:
    """Megatron-LM's ``compute_activation_memory`` (for SP with selective recompute), first stage:
    ``sbh(18 + 4F/h) L`` (dense F for every layer) plus the embedding and schedule terms, plus
    ``4sbh(1 + V/h)`` for the output layer and loss when pp = 1; all divided by tp."""
    return _mlm_activation(args, num_microbatches, overrides, with_sp=True)


def megatron_lm_activation_bytes_without_sp(args, num_microbatches: int | None = None, **overrides) -> float:
    """Megatron-LM's ``compute_activation_memory_without_sp``: ``sbh(10 + 24/t) L`` plus the embedding and
    schedule terms, ``2(sbV/t + sbh)`` for logits and final norm when pp = 1, times 1.05; not divided by tp."""
    return _mlm_activation(args, num_microbatches, overrides, with_sp=False)


def megatron_lm_estimate(args, num_microbatches: int | None = None, **overrides) -> TrainingMemoryEstimate:
    """Megatron-LM's numbers as a structured estimate. The activation path is the one its
    ``report_theoretical_memory`` picks: with SP only for sequence_parallel and selective recompute."""
    a = _mlm_input(args, overrides)
    if a["hybrid_layer_pattern"] is not None:
        from ..config.errors import UnsupportedError
        raise UnsupportedError("megatron-lm: theoretical memory footprints are not supported for hybrid "
                               "Mamba-Transformer models (hybrid_layer_pattern is set)")
    _need(a, ("sequence_parallel", "recompute_granularity"), "megatron-lm")
    s = _mlm_shard(a)
    with_sp = bool(a["sequence_parallel"]) and a["recompute_granularity"] == "selective"
    act = _mlm_activation(a, num_microbatches, {}, with_sp)
    comps = [MemoryComponent("dense parameters and optimizer", s.total - s.routed_total, s.dense_on_shard,
                             s.dense_bpp, s.dense_on_shard * s.dense_bpp)]
    if s.routed_total:
        comps.append(MemoryComponent("routed expert parameters and optimizer", s.routed_total, s.expert_on_shard,
                                     s.expert_bpp, s.expert_on_shard * s.expert_bpp))
    path = "compute_activation_memory (with SP)" if with_sp else "compute_activation_memory_without_sp"
    assumptions = (
        "Megatron-LM theoretical_memory_usage.py: 18 B per parameter, or 6 + 12/d B with the distributed "
        "optimizer (d = data_parallel_size, not multiplied by context parallelism; world_size // (etp x ep x "
        "pp) for routed experts).",
        "The most-loaded shard holds 1/pp of the decoder layers, the whole MTP block and the embedding (an "
        "untied output layer only when pp = 1); norms, router and latent projections are not split by TP.",
        f"Activations: {path}, first pipeline stage; the dense ffn_hidden_size for every layer; context "
        "parallelism ignored.",
        "Not modelled: CUDA context, NCCL buffers, allocator fragmentation, transient buffers.",
    )
    return TrainingMemoryEstimate("megatron-lm", tuple(comps), MemoryComponent("activation", memory_bytes=act),
                                  s.total, assumptions, {"activation_formula": "with_sp" if with_sp else
                                                         "without_sp", "active_parameters": s.active})


def megatron_lm_report(args, num_microbatches: int | None = None, **overrides) -> str:
    """The line Megatron-LM's ``report_theoretical_memory`` prints (without its trailing newline)."""
    e = megatron_lm_estimate(args, num_microbatches, **overrides)
    w, act = e.weight_and_optimizer_bytes / 2 ** 20, e.activation_bytes / 2 ** 20
    return (f"Theoretical memory footprints: weight and optimizer={w:.2f} MB, activation={act:.2f} MB, "
            f"total={w + act:.2f} MB")


# --------------------------------------------------------------------------------------------------
# Megatron-Bridge

#: Container arguments outside ``model`` (where an override of that name goes).
_BRIDGE_RUN = {"micro_batch_size": "train", "use_distributed_optimizer": "optimizer", "data_parallel_size": None}


def _bridge_input(config, overrides: dict) -> tuple[dict, dict]:
    """(model arguments, run arguments: micro_batch_size, use_distributed_optimizer, data_parallel_size)."""
    top = _plain_dict(config, "megatron-bridge")
    _need(top, ("model",), "megatron-bridge")
    model = _plain_dict(top["model"], "megatron-bridge model")
    run = {k: top[k] for k in ("data_parallel_size",) if k in top}
    for name, section in _BRIDGE_RUN.items():
        sub = _plain_dict(top[section], section) if section and top.get(section) is not None else {}
        if name in sub:
            run[name] = sub[name]
    for k, v in overrides.items():
        (run if k in _BRIDGE_RUN else model)[k] = v
    _need(model, ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels",
                  "vocab_size", "share_embeddings_and_output_weights"), "megatron-bridge", "model.")
    return model, run


def _int(d: dict, name: str, default: int, minimum: int = 1) -> int:
    """Bridge's ``_positive_int_attr`` (minimum 1) and ``_optional_positive_int_attr`` (minimum 0): None or
    absent means ``default``."""
    v = d.get(name)
    if v is None:
        return default
    if int(v) < minimum:
        raise ValueError(f"megatron-bridge: {name} must be {'positive' if minimum else 'non-negative'}, got {v}")
    return int(v)


def _bridge_pattern(m: dict) -> list:
    """MoE flag per layer, MTP layers appended as copies of the last decoder layer's kind."""
    L = _int(m, "num_layers", 1)
    moe = (m.get("num_moe_experts") or 0) > 0
    pattern = _moe_pattern(m.get("moe_layer_freq", 1), L, "megatron-bridge") if moe else [0] * L
    return pattern + pattern[-1:] * (m.get("mtp_num_layers") or 0)


def _bridge_vocab(m: dict) -> int:
    """The vocabulary padded to a multiple of make_vocab_size_divisible_by x tp, unless should_pad_vocab is false."""
    if not m.get("should_pad_vocab", True):
        return m["vocab_size"]
    _need(m, ("make_vocab_size_divisible_by", "tensor_model_parallel_size"), "megatron-bridge", "model.")
    multiple = m["make_vocab_size_divisible_by"] * m["tensor_model_parallel_size"]
    return -(-m["vocab_size"] // multiple) * multiple


def _bridge_counts(m: dict, pattern: list) -> tuple[list, list]:
    """(dense parameters, routed parameters) of every layer, MTP layers included.

    Attention ``2h^2 (1 + g/a)(a*kv/h)``, norms always ``4h``, then a dense MLP ``c h F`` (c = 3 for a
    gated SiLU, else 2) or, in an MoE layer, a shared expert ``c h Fs`` and latent projections ``2 h h'``,
    and routed experts ``c h' Fm E`` (h' = moe_latent_size or h). No router, gate or MLA terms.
    """
    h, heads = m["hidden_size"], m["num_attention_heads"]
    act = m.get("activation_func")
    silu = act in ("silu", "swiglu") or getattr(act, "__name__", None) == "silu"
    c = 3.0 if m.get("gated_linear_unit", False) and silu else 2.0
    groups = m.get("num_query_groups") or heads
    attn = 2 * h * h * ((1 + groups / heads) * (m["kv_channels"] * heads / h))
    shared = c * h * _int(m, "moe_shared_expert_intermediate_size", 0, 0)
    routed = latent_proj = 0.0
    if (m.get("num_moe_experts") or 0) > 0 and any(pattern):
        fm = _int(m, "moe_ffn_hidden_size", m["ffn_hidden_size"], 0)
        latent = m.get("moe_latent_size")
        routed = c * (h if latent is None else latent) * fm * m["num_moe_experts"]
        latent_proj = 0.0 if latent is None else 2 * h * latent
    base = attn + 4 * h
    dense = [base + (shared + latent_proj if moe else c * h * m["ffn_hidden_size"]) for moe in pattern]
    return dense, [routed if moe else 0.0 for moe in pattern]


def _bridge_stages(m: dict, p: int):
    """Layer indices of each pipeline rank for an uneven split (chunks interleaved with a virtual size), or
    None for an even split."""
    first, last = m.get("num_layers_in_first_pipeline_stage"), m.get("num_layers_in_last_pipeline_stage")
    if first is None and last is None:
        return None
    if p <= 1:
        raise ValueError("megatron-bridge: uneven pipeline stages need pipeline_model_parallel_size > 1")
    rest, left = _int(m, "num_layers", 1), p
    for name, n in (("num_layers_in_first_pipeline_stage", first), ("num_layers_in_last_pipeline_stage", last)):
        if n is not None:
            rest, left = rest - _int(m, name, 1), left - 1
    if (left == 0 and rest != 0) or (left and (rest <= 0 or rest % left)):
        raise ValueError(f"megatron-bridge: {rest} remaining layers do not divide over {left} middle stages")
    counts = [rest // left if left else 0] * p
    counts[0] = counts[0] if first is None else first
    counts[-1] = counts[-1] if last is None else last
    v = _int(m, "virtual_pipeline_model_parallel_size", 1)
    if any(n % v for n in counts):
        raise ValueError(f"megatron-bridge: stage layer counts {counts} must divide by the virtual size {v}")
    stages, start = [[] for _ in counts], 0
    for _ in range(v):
        for rank, n in enumerate(counts):
            stages[rank].extend(range(start, start + n // v))
            start += n // v
    return stages


def _bridge_activation(m: dict, run: dict, pattern: list, num_microbatches) -> float:
    """``sbh(18 + 4F'/h)`` per layer, MTP layers included, with the layer-weighted width ``F' = (dense
    layers x F + MoE layers x (k Fm + Fs)) / layers``; the embedding and schedule terms; ``4sbh(1 + V/h)``
    when pp = 1; divided by ``tp x cp``."""
    _need(m, ("seq_length",), "megatron-bridge", "model.")
    _need(run, ("micro_batch_size",), "megatron-bridge", "train.")
    s, b, h = m["seq_length"], run["micro_batch_size"], m["hidden_size"]
    t, p = _int(m, "tensor_model_parallel_size", 1), _int(m, "pipeline_model_parallel_size", 1)
    n_moe = sum(pattern)
    ffn = (len(pattern) - n_moe) * m["ffn_hidden_size"]
    if (m.get("num_moe_experts") or 0) > 0 and n_moe:
        k = _int(m, "moe_router_topk", _int(m, "num_experts_routed_to", 1, 0), 0)
        fm = _int(m, "moe_ffn_hidden_size", m["ffn_hidden_size"], 0)
        ffn += n_moe * (fm * k + _int(m, "moe_shared_expert_intermediate_size", 0, 0))
    ratio = ffn / (len(pattern) * h) if pattern else 0.0
    act = _embedding_and_schedule(s * b * h * (18 + 4 * ratio) * len(pattern), s, b, h, p,
                                  m.get("virtual_pipeline_model_parallel_size"), num_microbatches)
    if p == 1:
        act += s * b * h * 4 * (1 + _bridge_vocab(m) / h)
    return act / (t * _int(m, "context_parallel_size", 1))


def megatron_bridge_estimate(config, num_microbatches: int | None = None, *, include_activation: bool = True,
                             **overrides) -> TrainingMemoryEstimate:
    """Bridge's ``estimate_training_memory``.

    Dense + embedding: even split ``(layers + final norm 2h) / (pp x tp) + hV/t`` (twice when untied and
    pp = 1); uneven split: the heaviest stage / tp, ``hV`` on the first and on the last stage, MTP layers
    and the final norm on the last. Optimizer over ``dp x cp``. Routed experts: ``/ (pp x ep x etp)`` or the
    heaviest uneven stage ``/ (ep x etp)``; optimizer over ``dp x tp x cp // (ep x etp)``.
    """
    m, run = _bridge_input(config, overrides)
    pattern = _bridge_pattern(m)
    dense, routed = _bridge_counts(m, pattern)
    h, L, final = m["hidden_size"], _int(m, "num_layers", 1), 2 * m["hidden_size"]
    t, p = _int(m, "tensor_model_parallel_size", 1), _int(m, "pipeline_model_parallel_size", 1)
    cp, ep = _int(m, "context_parallel_size", 1), _int(m, "expert_model_parallel_size", 1)
    etp, dp = _int(m, "expert_tensor_parallel_size", 1), _int(run, "data_parallel_size", 1)
    hv = h * _bridge_vocab(m)
    tied = m["share_embeddings_and_output_weights"]
    stages = _bridge_stages(m, p)
    if stages is None:
        dense_gpu = (sum(dense) + final) / (p * t) + hv / t + (hv / t if not tied and p == 1 else 0)
        routed_gpu = sum(routed) / (p * ep * etp)
    else:
        d = [sum(dense[i] for i in st) for st in stages]
        r = [sum(routed[i] for i in st) for st in stages]
        d[0] += hv
        d[-1] += sum(dense[L:]) + final + hv
        r[-1] += sum(routed[L:])
        dense_gpu, routed_gpu = max(d) / t, max(r) / (ep * etp)
    dist = bool(run.get("use_distributed_optimizer", False))
    dense_total, routed_total = sum(dense) + final + hv * (1 if tied else 2), sum(routed)
    bpp = _bytes_per_parameter(dist, max(1, dp * cp))
    comps = [MemoryComponent("dense parameters and optimizer", dense_total, dense_gpu, bpp, dense_gpu * bpp)]
    if routed_total > 0:
        bpp_e = _bytes_per_parameter(dist, max(1, dp * t * cp // max(1, ep * etp)))
        comps.append(MemoryComponent("routed expert parameters and optimizer", routed_total, routed_gpu, bpp_e,
                                     routed_gpu * bpp_e))
    act = None
    if include_activation:
        act = MemoryComponent("activation", memory_bytes=_bridge_activation(m, run, pattern, num_microbatches))
    assumptions = [
        "Megatron-Bridge theoretical_memory_utils.py: the most-loaded GPU shard; allocator, kernel workspace, "
        "NCCL and CUDA-graph buffers are not modelled.",
        "18 B per parameter without the distributed optimizer, else 6 + 12/d B (d = data x context-parallel "
        "ranks for dense parameters).",
        "The embedding sits on the first and the last pipeline stage; an untied output layer adds to the same "
        "GPU only when pp = 1. Norms count 4h per layer; router and shared-expert gate are not counted.",
    ]
    if routed_total > 0:
        assumptions.append("Routed experts are split over expert_model_parallel_size x expert_tensor_parallel_"
                           "size; their optimizer states over dp x tp x cp / (ep x etp) ranks.")
    if cp > 1:
        assumptions.append("Dense optimizer states and activations are divided over the context-parallel ranks.")
    if include_activation:
        assumptions.append("Activations assume sequence parallelism and selective recompute; full recompute, "
                           "offloading, routing imbalance and dispatcher buffers are not modelled.")
    return TrainingMemoryEstimate("megatron-bridge", tuple(comps), act, dense_total + routed_total,
                                  tuple(assumptions))


def megatron_bridge_format(estimate: TrainingMemoryEstimate, unit: str = "MB") -> str:
    """Bridge's ``format_training_memory_estimate``: every component, the activation and the total."""
    scale, label = memory_unit(unit)
    parts = [f"{c.name}={c.memory_bytes / scale:.2f} {label}" for c in estimate.model_state_components]
    if estimate.activation is not None:
        parts.append(f"{estimate.activation.name}={estimate.activation.memory_bytes / scale:.2f} {label}")
    parts.append(f"total={estimate.total_memory_bytes / scale:.2f} {label}")
    return "Theoretical memory footprints: " + ", ".join(parts)


def megatron_bridge_report(config, num_microbatches: int | None = None, **overrides) -> str:
    """The line Bridge's ``report_theoretical_memory`` prints (without its trailing newline): activation and
    total only with sequence parallelism and selective recompute, else weight and optimizer alone."""
    m, _ = _bridge_input(config, overrides)
    _need(m, ("sequence_parallel", "recompute_granularity"), "megatron-bridge", "model.")
    with_act = bool(m["sequence_parallel"]) and m["recompute_granularity"] == "selective"
    e = megatron_bridge_estimate(config, num_microbatches, include_activation=with_act, **overrides)
    w = e.weight_and_optimizer_bytes / 2 ** 20
    if not with_act:
        return f"Theoretical memory footprints: weight and optimizer={w:.2f} MB"
    act = e.activation_bytes / 2 ** 20
    return (f"Theoretical memory footprints: weight and optimizer={w:.2f} MB, activation={act:.2f} MB, "
            f"total={w + act:.2f} MB")
