"""The seeds' theoretical-memory API: ``estimate_training_memory`` and ``format_training_memory_estimate``.

The result has the shape Megatron-Bridge gives it (``theoretical_memory_utils.py``): dense and embedding
parameter memory on the most-loaded GPU shard, routed MoE expert parameter memory, activation memory,
the total global parameter count and the assumptions. Three formulas fill it:

- ``estimator`` (the default): this project's per-stage model (:func:`estimator.estimate`), read at its
  peak stage: weights + gradients + optimizer states against saved activations + transient buffers.
- ``megatron-lm`` and ``megatron-bridge``: exactly what those projects compute and print
  (:mod:`estimator.reference.upstream`), so a training log's "Theoretical memory footprints" line can be reproduced.

:func:`megatron_lm_args` and :func:`megatron_bridge_config` map this project's configuration onto the
argument names the two upstream formulas read. Memory is in bytes; the printed "MB"/"GB" are 2^20/2^30
bytes, as Megatron prints them ("MiB"/"GiB" give the same numbers with honest labels).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from types import SimpleNamespace

from ..config.errors import ConfigError, Problem, clip, show, wrong_type
from ..config.load import load_config
from ..config.schema import MAX_BATCH, SECTIONS, Config
from ..memory.report import GIB
from ..model.resolve import resolve
from .results import MemoryComponent, TrainingMemoryEstimate, memory_unit

__all__ = ["FORMULAS", "MemoryComponent", "TrainingMemoryEstimate", "estimate_training_memory",
           "format_training_memory_estimate", "megatron_bridge_config", "megatron_lm_args", "memory_unit"]

#: The formulas :func:`estimate_training_memory` offers.
FORMULAS = ("estimator", "megatron-lm", "megatron-bridge")

def _freq(cfg: Config):
    f = cfg.model.moe_layer_freq
    return list(f) if isinstance(f, tuple) else (1 if f is None else f)


def megatron_lm_args(config) -> SimpleNamespace:
    """Our configuration as Megatron-LM's validated ``args`` (the names ``theoretical_memory_usage`` reads).

    As Megatron-LM's argument validation: ``data_parallel_size = world_size // (tp x pp x cp)``,
    ``expert_tensor_parallel_size`` defaults to TP, ``padded_vocab_size`` is the padded vocabulary, a
    virtual pipeline size of 1 is None and sequence parallelism is off with TP 1. ``swiglu`` is a gated
    SiLU MLP; ``group_query_attention`` is set when num_query_groups is given.
    """
    cfg = load_config(config)
    r = resolve(cfg)
    m, tr = cfg.model, cfg.training
    return SimpleNamespace(
        num_layers=r.L, hidden_size=r.h, num_attention_heads=r.a, kv_channels=r.dh, ffn_hidden_size=r.f,
        group_query_attention=m.num_query_groups is not None and not r.mla, num_query_groups=r.g or r.a,
        multi_latent_attention=r.mla, q_lora_rank=r.q_lora or None, kv_lora_rank=r.kv_lora or None,
        qk_head_dim=r.qk_dim or None, qk_pos_emb_head_dim=r.rope_dim or None, v_head_dim=r.v_dim or None,
        normalization=m.normalization, swiglu=r.gated and m.activation_func in ("swiglu", "silu"),
        add_bias_linear=m.add_bias_linear, padded_vocab_size=r.Vp,
        untie_embeddings_and_output_weights=m.untie_embeddings_and_output_weights,
        num_experts=m.num_experts, moe_router_topk=m.moe_router_topk or 2,
        moe_ffn_hidden_size=r.fm if r.E else None,
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        moe_shared_expert_gate=m.moe_shared_expert_gate, moe_latent_size=m.moe_latent_size,
        moe_layer_freq=_freq(cfg),
        mtp_num_layers=m.mtp_num_layers or None, hybrid_layer_pattern=None,
        tensor_model_parallel_size=r.t, pipeline_model_parallel_size=r.p, context_parallel_size=r.cp,
        expert_model_parallel_size=r.ep, expert_tensor_parallel_size=r.etp,
        virtual_pipeline_model_parallel_size=r.v if r.v > 1 else None,
        world_size=r.world, data_parallel_size=r.dp, use_distributed_optimizer=tr.use_distributed_optimizer,
        seq_length=r.s, micro_batch_size=r.b, sequence_parallel=tr.sequence_parallel and r.t > 1,
        recompute_granularity=tr.recompute_granularity,
    )


def megatron_bridge_config(config) -> SimpleNamespace:
    """Our configuration as Bridge's ``ConfigContainer`` (``model``, ``train``, ``optimizer``,
    ``data_parallel_size``) with the names ``theoretical_memory_utils`` reads.

    The vocabulary is padded as Megatron-LM pads it (``should_pad_vocab``), a gated SiLU MLP is
    ``gated_linear_unit`` with ``activation_func`` silu, ``expert_tensor_parallel_size`` defaults to TP.
    """
    cfg = load_config(config)
    r = resolve(cfg)
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    model = SimpleNamespace(
        num_layers=r.L, hidden_size=r.h, seq_length=r.s, ffn_hidden_size=r.f, num_attention_heads=r.a,
        num_query_groups=m.num_query_groups, kv_channels=r.dh, vocab_size=r.V,
        make_vocab_size_divisible_by=m.make_vocab_size_divisible_by, should_pad_vocab=True,
        share_embeddings_and_output_weights=not m.untie_embeddings_and_output_weights,
        tensor_model_parallel_size=r.t, pipeline_model_parallel_size=r.p,
        num_layers_in_first_pipeline_stage=par.num_layers_in_first_pipeline_stage,
        num_layers_in_last_pipeline_stage=par.num_layers_in_last_pipeline_stage,
        virtual_pipeline_model_parallel_size=r.v if r.v > 1 else None, context_parallel_size=r.cp,
        expert_model_parallel_size=r.ep, expert_tensor_parallel_size=r.etp, num_moe_experts=m.num_experts,
        moe_layer_freq=_freq(cfg), moe_router_topk=m.moe_router_topk or 2,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        moe_latent_size=m.moe_latent_size,
        mtp_num_layers=m.mtp_num_layers, gated_linear_unit=r.gated,
        activation_func="silu" if m.activation_func in ("swiglu", "silu") else m.activation_func,
        sequence_parallel=tr.sequence_parallel and r.t > 1, recompute_granularity=tr.recompute_granularity)
    return SimpleNamespace(model=model, train=SimpleNamespace(micro_batch_size=r.b),
                           optimizer=SimpleNamespace(use_distributed_optimizer=tr.use_distributed_optimizer),
                           data_parallel_size=r.dp)


def _is_upstream(source) -> bool:
    """True for upstream argument names (a namespace, or a dict that is not our four-section configuration)."""
    if isinstance(source, (Config, str, os.PathLike)):
        return False
    if isinstance(source, Mapping):
        return not (source and set(source) <= set(SECTIONS))
    return True


def estimate_training_memory(cfg, num_microbatches: int | None = None, formula: str = "estimator", *,
                             overrides: Mapping | None = None) -> TrainingMemoryEstimate:
    """Per-GPU training memory of ``cfg`` by one of :data:`FORMULAS`.

    ``cfg`` is anything :func:`estimator.load_config` accepts; the ``megatron-lm`` and ``megatron-bridge``
    formulas also take upstream argument names (a namespace or dict) and ``overrides`` of single upstream
    arguments (``moe_latent_size``, ...). ``num_microbatches`` defaults to the number the configuration's
    global_batch_size gives (upstream passes its own; None means "fill the pipeline").
    """
    if not isinstance(formula, str) or formula not in FORMULAS:
        raise ConfigError(Problem("formula", show(formula), f"Unknown formula {show(formula)}; allowed: "
                                  f"{', '.join(FORMULAS)}"))
    if num_microbatches is not None and (isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int)
                                         or not 1 <= num_microbatches <= MAX_BATCH):
        raise ConfigError(Problem("num_microbatches", show(num_microbatches), "num_microbatches must be a positive "
                                  f"integer (at most {MAX_BATCH:,}), got {show(num_microbatches)}"))
    upstream = _is_upstream(cfg)
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(Problem("overrides", show(overrides), "must be a mapping of upstream argument names"))
    if formula == "estimator":
        if upstream:
            raise ConfigError(Problem("config", show(cfg), "formula 'estimator' needs a configuration (path, "
                                      "YAML/JSON text, a dict of the sections model/parallelism/training/precision, "
                                      "or a Config), not upstream arguments"))
        if overrides:
            raise ConfigError(Problem("overrides", show(overrides), "overrides of upstream arguments apply only to "
                                      f"the megatron-lm and megatron-bridge formulas, got {show(sorted(map(str, overrides)))}"))
        return _from_estimator(load_config(cfg), num_microbatches)
    from . import upstream as compat  # compat builds this module's result types
    if not upstream:
        cfg = load_config(cfg)
        if num_microbatches is None:
            num_microbatches = resolve(cfg).m
        _refuse_layers_upstream_cannot_count(cfg, formula)
    else:
        _check_upstream(cfg, overrides or {}, formula)
    try:
        if formula == "megatron-lm":
            return compat.megatron_lm_estimate(cfg if upstream else megatron_lm_args(cfg), num_microbatches,
                                               **(overrides or {}))
        return compat.megatron_bridge_estimate(cfg if upstream else megatron_bridge_config(cfg), num_microbatches,
                                               **(overrides or {}))
    except (ValueError, TypeError, ArithmeticError, LookupError, AttributeError) as exc:
        if not upstream or isinstance(exc, ConfigError):
            raise
        # Upstream arguments are untyped by design; upstream's own code would fail the same way.
        raise ConfigError(Problem(formula, None, f"the upstream arguments cannot be evaluated: "
                                  f"{clip(str(exc))}")) from None


def _check_upstream(args, overrides: Mapping, formula: str) -> None:
    """Upstream arguments named like a schema field are held to its type and bounds before any arithmetic
    (``num_layers: 10**30`` would otherwise build a list per layer); every number must be finite."""
    from ..config.schema import field_specs
    specs = {s.name: s for s in field_specs()}
    items = []
    for source in (args, overrides):
        d = source if isinstance(source, Mapping) else getattr(source, "__dict__", {})
        for k, v in d.items():
            sub = v if isinstance(v, Mapping) else getattr(v, "__dict__", None) if k in ("model", "train",
                                                                                          "optimizer") else None
            items += list(sub.items()) if isinstance(sub, Mapping) else [(k, v)]
    for k, v in items:
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(Problem(f"{formula}.{k}", show(v), f"must be a finite number, got {show(v)}"))
        spec = specs.get(k) if isinstance(k, str) else None
        if spec is None or isinstance(v, bool) or not isinstance(v, (int, float)) or spec.type not in ("int", "float"):
            continue
        if (spec.min is not None and v < spec.min) or (spec.max is not None and v > spec.max):
            raise ConfigError(Problem(f"{formula}.{k}", show(v), f"must be between {spec.min:g} and {spec.max:,}, "
                                      f"got {show(v)}"))


def _refuse_layers_upstream_cannot_count(cfg: Config, formula: str) -> None:
    """Megatron-LM's report prints "not yet supported for hybrid Mamba-Transformer models" and neither formula
    knows gated delta nets, attention sinks or post-norms: a figure for them would be a GPT model's."""
    from ..config.errors import UnsupportedError
    m = cfg.model
    what = [name for name, on in (("hybrid_layer_pattern (Mamba / hybrid layers)", m.hybrid_layer_pattern),
                                  ("experimental_attention_variant (gated delta net)",
                                   m.experimental_attention_variant),
                                  ("attention_output_gate", m.attention_output_gate),
                                  ("post_layernorm", m.post_layernorm),
                                  ("pre_layernorm false", not m.pre_layernorm),
                                  ("qk_layernorm_full_dim", m.qk_layernorm_full_dim),
                                  ("mtp_dense_mlp", m.mtp_dense_mlp),
                                  ("v_channels (value heads of their own width)", m.v_channels is not None),
                                  ("num_global_attention_heads (the global layers' own query heads)",
                                   m.num_global_attention_heads is not None))
            if on]
    if what:
        raise UnsupportedError(f"the {formula} formula has no term for {', '.join(what)} (Megatron-LM's report "
                               "says \"not yet supported for hybrid Mamba-Transformer models\"); use formula "
                               "'estimator'")


def _from_estimator(cfg: Config, num_microbatches: int | None) -> TrainingMemoryEstimate:
    """This project's estimate, read at its peak stage (the stage with the most device memory)."""
    from ..memory.assemble import estimate
    from ..memory.states import byte_model, state_bytes
    est = estimate(cfg, num_microbatches=num_microbatches)
    st, params, r = est.peak_stage, est.parameters, resolve(cfg)
    states = st.weights_bytes + st.gradients_bytes + st.optimizer_bytes
    routed_total = routed_bytes = 0
    if r.E:
        # The routed experts' share of the stage's states, by the same byte model (their own optimizer shards).
        e = state_bytes(byte_model(r), 0, 0, st.expert_parameters, 1, r.edp)
        routed_bytes = e.weights + e.gradients + e.optimizer
        per_layer = params.moe_experts // params.moe_layers if params.moe_layers else 0
        routed_total = params.moe_experts + (r.mtp * per_layer if r.mtp_is_moe else 0)
    dense_gpu = st.parameters - st.expert_parameters
    comps = [MemoryComponent("dense parameters and optimizer", params.total - routed_total, dense_gpu,
                             (states - routed_bytes) / dense_gpu if dense_gpu else 0.0, states - routed_bytes)]
    if r.E:
        comps.append(MemoryComponent("routed expert parameters and optimizer", routed_total, st.expert_parameters,
                                     routed_bytes / st.expert_parameters if st.expert_parameters else 0.0,
                                     routed_bytes))
    act = MemoryComponent("activation", memory_bytes=st.activations_bytes + st.transient_bytes)
    assumptions = (
        f"Formula 'estimator': this project's model, read at pipeline stage {st.stage}, the stage with the most "
        "device memory. weight and optimizer = its weights + gradients + optimizer states; activation = its "
        "saved activations + transient buffers at the peak; total = allocated bytes "
        "(torch.cuda.max_memory_allocated).",
        f"Not in the total: the caching allocator's reserve, the CUDA context and NCCL buffers (device memory "
        f"{st.device_bytes / GIB:.2f} GiB, where GiB = 2^30 bytes).",
    ) + tuple(est.assumptions)
    details = {"peak_stage": st.stage, "num_microbatches": est.parallel.get("num_microbatches"),
               **{k: getattr(st, k) for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                                              "activations_bytes", "transient_bytes", "allocated_bytes",
                                              "reserved_bytes", "device_bytes")}}
    return TrainingMemoryEstimate("estimator", tuple(comps), act, params.total, assumptions, details)


def format_training_memory_estimate(estimate: TrainingMemoryEstimate, unit: str = "GB") -> str:
    """The one-line summary, formatted as the estimate's formula prints it.

    ``Theoretical memory footprints: weight and optimizer=X.XX GB, activation=Y.YY GB, total=Z.ZZ GB`` for
    ``estimator`` and ``megatron-lm`` (which, like Megatron-LM, adds the two values after scaling);
    for ``megatron-bridge`` each component by name (``dense parameters and optimizer=...``, ``routed expert
    parameters and optimizer=...``), then ``activation`` and ``total``. Units: MB, GB, MiB, GiB (all binary).
    Raises :class:`~estimator.config.errors.InputTypeError` (a ``TypeError``) when ``estimate`` is not a
    :class:`TrainingMemoryEstimate` and :class:`~estimator.config.errors.ConfigError` for an unknown unit.
    """
    if not isinstance(estimate, TrainingMemoryEstimate):
        raise wrong_type("format_training_memory_estimate", "estimate", "a TrainingMemoryEstimate", estimate,
                         "estimator.estimate_training_memory(config) makes one")
    scale, label = memory_unit(unit)
    if estimate.formula == "megatron-bridge":
        from .upstream import megatron_bridge_format
        return megatron_bridge_format(estimate, unit)
    w = estimate.weight_and_optimizer_bytes / scale
    line = f"Theoretical memory footprints: weight and optimizer={w:.2f} {label}"
    if estimate.activation is None:
        return line
    a = estimate.activation_bytes / scale
    total = w + a if estimate.formula == "megatron-lm" else estimate.total_memory_bytes / scale
    return f"{line}, activation={a:.2f} {label}, total={total:.2f} {label}"
