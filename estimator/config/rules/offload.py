"""The activation-offloading rules: CPU offloading (``cpu_offloading``) and fine-grained activation offloading
(``fine_grained_activation_offloading``, ``offload_modules``), as Megatron-Core checks them, plus the combinations
estimator/memory/features/offload.py does not model, each refused by name.

:func:`offload_problems` is called by :func:`estimator.config.rules.features.feature_problems`.
"""

from __future__ import annotations

from ..errors import Problem

__all__ = ["FINE_GRAINED_MODULES", "offload_problems"]


#: The offload groups estimator/memory/features/offload.py models (Megatron-Core's other two are refused).
FINE_GRAINED_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")


def offload_problems(cfg) -> list[Problem]:
    """CPU activation offloading (``cpu_offloading``), then fine-grained activation offloading."""
    m, tr, p = cfg.model, cfg.training, cfg.parallelism.pipeline_model_parallel_size
    P: list[Problem] = []

    def add(field, value, msg):
        P.append(Problem(field, value, msg))

    if tr.cpu_offloading_num_layers and not tr.cpu_offloading:
        add("training.cpu_offloading", False, "set it to true with cpu_offloading_num_layers > 0 (Megatron-LM does)")
    if tr.cpu_offloading:
        if tr.cpu_offloading_num_layers >= m.num_layers:
            add("training.cpu_offloading_num_layers", tr.cpu_offloading_num_layers, f"must be less than num_layers "
                f"({m.num_layers})")
        if p > 1:
            add("training.cpu_offloading", True, "Megatron-Core does not support CPU offloading with pipeline "
                "parallelism")
        if tr.recompute_granularity is not None:
            add("training.cpu_offloading", True, "Megatron-Core does not support CPU offloading with activation "
                "recomputation")
    P.extend(_fine_grained_offload_problems(cfg))
    return P


def _fine_grained_offload_problems(cfg) -> list[Problem]:
    """Fine-grained activation offloading: Megatron-Core's own checks (Megatron-LM @ d98e8a64 :
    megatron/core/transformer/transformer_config.py ``__post_init__``, megatron/training/arguments.py) and the
    combinations estimator/memory/features/offload.py does not model, each named."""
    m, tr = cfg.model, cfg.training
    P: list[Problem] = []
    fgo = tr.fine_grained_activation_offloading
    mods = tuple(tr.offload_modules or ())

    def add(field, value, msg):
        P.append(Problem(field, list(value) if isinstance(value, tuple) else value, msg))

    if not fgo:
        for name in ("offload_modules", "min_offloaded_tensor_size", "activation_offload_fraction",
                     "delta_offload_bytes_across_pp_ranks"):
            value, default = getattr(tr, name), type(tr).__dataclass_fields__[name].default     # the schema's
            if value != default and not (name == "offload_modules" and not value):   # [] as Bridge's recipes set it
                shown = list(value) if isinstance(value, tuple) else value
                add(f"training.{name}", value, f"{shown} applies only with fine_grained_activation_offloading: true")
        return P
    if not mods:
        add("training.offload_modules", tr.offload_modules, f"is {list(mods)}: fine_grained_activation_offloading "
            f"needs at least one module to offload (from {', '.join(FINE_GRAINED_MODULES)})")
    if "attn_proj" in mods and "core_attn" not in mods:
        add("training.offload_modules", mods, f"{list(mods)}: attn_proj needs core_attn too (Megatron-Core: the output "
            "projection's input is the core attention's output, which core_attn's backward needs)")
    if tr.cpu_offloading:
        add("training.cpu_offloading", True, "cannot be enabled with fine_grained_activation_offloading "
            "(Megatron-Core)")
    if tr.transformer_impl != "transformer_engine":
        add("training.transformer_impl", tr.transformer_impl, f"is {tr.transformer_impl}; fine-grained activation "
            "offloading runs only with transformer_engine (Megatron-LM's arguments.py)")
    recomputed = tuple(tr.recompute_modules or ()) if tr.recompute_granularity == "selective" else ()
    inside_moe = sorted({"moe_act", "expert_fc1"} & set(mods))
    if "moe" in recomputed and inside_moe:
        add("training.offload_modules", mods, f"{list(mods)}: {', '.join(inside_moe)} cannot be offloaded while the "
            "whole MoE layer is recomputed (recompute_modules has moe; Megatron-Core)")
    if "mhc" in recomputed:
        add("training.recompute_modules", list(recomputed), "mhc recompute with fine_grained_activation_offloading "
            "is not supported by Megatron-Core")
    # Not modelled: refused by name rather than estimated wrongly.
    for mod in ("fused_group_mlp", "gdp_qkv"):
        if mod in mods:
            add("training.offload_modules", mods, f"{list(mods)}: offloading {mod} is not modelled (the groups "
                f"modelled: {', '.join(FINE_GRAINED_MODULES)})")
    for cond, field, value, what in (
            (tr.recompute_granularity == "full", "training.recompute_granularity", "full",
             "full recompute (the checkpointed layer's tensors inside the offload groups)"),
            (tr.cuda_graph_impl != "none", "training.cuda_graph_impl", tr.cuda_graph_impl,
             "CUDA graphs (the offload inside captured modules, delay_offload_until_cuda_graph)"),
            (tr.peft is not None, "training.peft", tr.peft, "PEFT adapters' saved inputs"),
            (tr.moe_paged_stash, "training.moe_paged_stash", True, "the paged stash of the experts' saved tensors"),
            (bool(m.enable_hyper_connections), "model.enable_hyper_connections", True,
             "hyper-connection streams")):
        if cond:
            add(field, value, f"{value} is not modelled with fine_grained_activation_offloading: {what} (the "
                "offload groups are modelled for plain attention, MLA, dense MLP and MoE layers)")
    return P
