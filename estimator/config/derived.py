"""Megatron's derived defaults that validation needs before anything is resolved.

A field left ``None`` means "derive it" (:mod:`estimator.model.resolve` applies every default in one step); a few
of those derived values are already needed by the rules that validate a configuration
(:mod:`estimator.config.rules`): the MLP width, the virtual pipeline stages a layout string implies, the layout a
hybrid pattern stands for, the dtypes of Megatron-FSDP's gradient buffers and the largest MoE overload factor a
layout allows. They live here, below both.
"""

from __future__ import annotations

import re

from . import hybrid_pattern
from .pipeline_layout import LayoutError, expand_layout

__all__ = ["BLACKWELL_GPU_ARCH", "DEFAULT_GPU_ARCH", "compute_capability", "cublas_workspace_config_bytes",
           "default_ffn_hidden_size", "gpu_arch",
           "grad_comm_dtype", "grad_dtype", "grad_reduce_in_fp32", "hybrid_cp_group", "hybrid_cp_groups",
           "hybrid_cp_shard", "hybrid_layout", "is_amd", "layout_stages", "effective_overload_factor",
           "max_overload_factor", "recipe_features", "recomputed_modules", "te_version",
           "virtual_stages"]

#: The architecture assumed when no GPU is named (``training.gpu_arch`` null): Hopper, the GPU of Megatron-LM's CI
#: goldens and of most published recipes; the estimate's assumptions say so.
DEFAULT_GPU_ARCH = "sm_90"
#: The one assumed instead for the recipes Transformer Engine runs only on Blackwell (``fp8_recipe: mxfp8``, ``fp4``).
BLACKWELL_GPU_ARCH = "sm_100"


def recipe_features(cfg) -> list[tuple[str, object]]:
    """The recipe features a configuration switches on that the estimate models beside Megatron's plain step
    (estimator/memory/features/: FSDP, TP-overlap userbuffers, PEFT, other optimizers, offloading, CUDA graphs, EP
    overlap, the flex dispatcher, ...), as (field path, value); empty for a plain run."""
    par, tr, pr, m = cfg.parallelism, cfg.training, cfg.precision, cfg.model
    on = [("parallelism.use_megatron_fsdp", par.use_megatron_fsdp), ("parallelism.use_torch_fsdp2", par.use_torch_fsdp2),
          ("parallelism.tp_comm_overlap", par.tp_comm_overlap), ("parallelism.nccl_ub", par.nccl_ub),
          ("parallelism.num_distributed_optimizer_instances", par.num_distributed_optimizer_instances > 1),
          ("training.peft", tr.peft is not None), ("training.optimizer", tr.optimizer != "adam"),
          ("training.optimizer_cpu_offload", tr.optimizer_cpu_offload), ("training.cpu_offloading", tr.cpu_offloading),
          ("training.cpu_offloading_num_layers", tr.cpu_offloading_num_layers > 0),
          ("training.fine_grained_activation_offloading", tr.fine_grained_activation_offloading),
          ("training.cuda_graph_impl", tr.cuda_graph_impl != "none"),
          ("training.optimizer_cuda_graph", tr.optimizer_cuda_graph),
          ("training.vision_cuda_graph_impl", tr.vision_cuda_graph_impl != "none"),
          ("training.overlap_moe_expert_parallel_comm", tr.overlap_moe_expert_parallel_comm),
          ("training.defer_embedding_wgrad_compute", tr.defer_embedding_wgrad_compute),
          ("model.moe_token_dispatcher_type", m.moe_token_dispatcher_type == "flex"),
          ("training.moe_paged_stash", tr.moe_paged_stash),
          ("precision.disable_parameter_transpose_cache", bool(pr.fp8 or pr.fp4) and pr.disable_parameter_transpose_cache),
          ("precision.first_last_layers_bf16", bool(pr.fp8 or pr.fp4) and pr.first_last_layers_bf16),
          ("parallelism.tensor_parallel_num_weight_shards",
           (par.tensor_parallel_num_weight_shards or 1) > par.tensor_model_parallel_size),
          ("parallelism.expert_tensor_parallel_num_weight_shards", m.num_experts is not None and
           (par.expert_tensor_parallel_num_weight_shards or 1)
           > (par.expert_tensor_parallel_size or par.tensor_model_parallel_size))]
    return [(path, _value(cfg, path)) for path, is_on in on if is_on]


def _value(cfg, path: str):
    section, name = path.split(".")
    value = getattr(getattr(cfg, section), name)
    return list(value) if isinstance(value, tuple) else value


def default_ffn_hidden_size(m) -> int:
    """Megatron-LM's derived ffn_hidden_size (arguments.py): int(4h * 2/3 / 64) * 64 for SwiGLU, else 4h. Called
    on a Config whose values have passed the field checks (:func:`~estimator.config.rules.validate` checks them
    first), so h is at most MAX_WIDTH here: the float arithmetic cannot overflow."""
    if m.ffn_hidden_size:
        return m.ffn_hidden_size
    if m.activation_func == "swiglu":
        return int(4 * m.hidden_size * 2 / 3 / 64) * 64
    return 4 * m.hidden_size


def layout_stages(layout: str, p: int) -> int:
    try:
        n = len(expand_layout(layout))
    except LayoutError:
        return 1
    return max(n // p, 1)


def virtual_stages(par, model=None) -> int:
    """Virtual pipeline stages per rank: from the layout string (or the hybrid pattern's pipeline segments)
    when there is one, else the field (1 if null)."""
    layout = hybrid_layout(model, par) if model is not None else par.pipeline_model_parallel_layout
    if layout is not None:
        return layout_stages(layout, par.pipeline_model_parallel_size)
    return par.virtual_pipeline_model_parallel_size or 1


def hybrid_layout(m, par) -> str | None:
    """The pipeline layout string a configuration places its layers by: the one given, or the one a hybrid
    pattern with pipeline segments stands for."""
    if m.hybrid_layer_pattern is not None:
        return hybrid_pattern.layout_of(m.hybrid_layer_pattern)
    return par.pipeline_model_parallel_layout


def compute_capability(arch: str) -> tuple[int, int]:
    """(major, minor) of a ``training.gpu_arch`` name, as ``torch.cuda.get_device_capability()`` reports it: sm_XY
    is (X, Y), Y its last digit (sm_100 -> (10, 0), sm_89 -> (8, 9)); an AMD gfx9MN target is (9, M), the
    major/minor HIP reports (PyTorch's aten/src/ATen/cuda/CublasHandlePool.cpp tests major 9, minor 4 for gfx94x)."""
    if arch.startswith("gfx"):
        return int(arch[3]), int(arch[4])
    digits = arch.removeprefix("sm_")
    return int(digits[:-1]), int(digits[-1])


def is_amd(arch: str) -> bool:
    """Whether a ``training.gpu_arch`` name is an AMD target (ROCm builds of PyTorch and Transformer Engine)."""
    return arch.startswith("gfx")


def gpu_arch(cfg) -> str:
    """The GPU architecture of a configuration: ``training.gpu_arch``, or when it is null :data:`DEFAULT_GPU_ARCH`
    (Hopper), :data:`BLACKWELL_GPU_ARCH` for MXFP8 and NVFP4, which Transformer Engine runs only from sm_100 on
    (TransformerEngine @ d0067d0d : transformer_engine/pytorch/quantization.py ``_compute_mxfp8_support``,
    ``_compute_nvfp4_support``)."""
    arch = cfg.training.gpu_arch
    if arch is not None:
        return arch
    pr = cfg.precision
    return BLACKWELL_GPU_ARCH if pr.fp4 or (pr.fp8 and pr.fp8_recipe == "mxfp8") else DEFAULT_GPU_ARCH


#: One ``:SIZE:COUNT`` pair of ``CUBLAS_WORKSPACE_CONFIG`` (SIZE in KiB), as PyTorch matches it.
_CUBLAS_PAIR = re.compile(r":([0-9]+):([0-9]+)")


def cublas_workspace_config_bytes(text: str) -> int | None:
    """PyTorch's cuBLAS workspace per (handle, stream) that a ``CUBLAS_WORKSPACE_CONFIG`` value sets, in bytes: the
    sum of SIZE KiB x COUNT over every ``:SIZE:COUNT`` pair in it (``:4096:8`` -> 32 MiB, ``:16:8`` -> 128 KiB,
    ``:4096:2:16:8`` -> 8 MiB + 128 KiB). None for an empty value (unset: the GPU's default) and for one without a
    pair, which PyTorch ignores with a warning (pytorch/pytorch @ 26a3905 : aten/src/ATen/cuda/CublasHandlePool.cpp
    ``parseChosenWorkspaceSize``, which searches the value with the regular expression ``:([0-9]+):([0-9]+)``)."""
    pairs = _CUBLAS_PAIR.findall(text or "")
    if not pairs:
        return None
    return sum(int(size) * 1024 * int(count) for size, count in pairs)


def hybrid_cp_group(length: int, max_per_rank: int) -> int:
    """Ranks one sequence of ``length`` tokens runs over under dynamic (hybrid) context parallelism: the smallest
    power of two c with c x ``max_per_rank`` >= ``length``, so 1 up to ``max_per_rank`` tokens.

    Megatron-LM @ d98e8a64 : megatron/core/pipeline_parallel/hybrid_cp_schedule.py ``BalancedCPScheduler.
    gpus_needed``: max(1, 2 ** ceil(log2(seq_len / max_seq_len_per_rank))), here in integers."""
    c = 1
    while c * max_per_rank < length:
        c *= 2
    return c


def hybrid_cp_shard(longest: int, max_per_rank: int) -> tuple[int, int]:
    """(ranks c, sequence tokens L) of the sub-sample whose shard L / c is the largest a rank runs, with sequences of
    at most ``longest`` tokens: L / c <= ``max_per_rank`` always (:func:`hybrid_cp_group`), reached by a sequence of
    exactly c x ``max_per_rank`` tokens. Of those, the one over the most ranks (largest c with c x max <= longest):
    at a fixed shard a larger group holds as much or more (ring attention's key/value chunks in flight are shard-
    sized from c = 2 on). Sequences no longer than ``max_per_rank``: one rank, ``longest`` tokens.

    E.g. longest 32768, max 4096: c = 8, L = 32768; longest 10000, max 4096: c = 2, L = 8192 (a 10000-token
    sequence runs over 4 ranks, 2500 tokens each)."""
    if longest <= max_per_rank:
        return 1, longest
    c = 1
    while 2 * c * max_per_rank <= longest:
        c *= 2
    return c, c * max_per_rank


def hybrid_cp_groups(ranks: int) -> list[int]:
    """Sizes of the extra process groups dynamic (hybrid) context parallelism builds that a rank belongs to: every
    power of two from 2 below the data x context-parallel size ``ranks`` (the full group is the data x context-
    parallel group itself). Megatron-LM @ d98e8a64 : megatron/core/parallel_state.py ``create_hybrid_dp_cp_groups``
    ([2 ** i for i in range(int(log2(n)))][1:])."""
    out, g = [], 2
    while 2 * g <= ranks:
        out.append(g)
        g *= 2
    return out


#: A Transformer Engine release as ``precision.transformer_engine_version`` takes it: MAJOR.MINOR, at most three
#: digits each, and optionally the rest of what ``transformer_engine.__version__`` prints (``2.11.0+c188b533``,
#: ``2.20.0.dev0``): a .PATCH, a dev/rc/post tag, a +local build tag.
_TE_VERSION = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})(?:\.[0-9]{1,3})?(?:\.?(?:dev|rc|post)[0-9]{0,3})?"
                         r"(?:\+[0-9A-Za-z.]{1,40})?")


def te_version(text: str) -> tuple[int, int] | None:
    """``precision.transformer_engine_version`` as (major, minor): ``"2.11"``, ``"2.11.0"`` and ``"2.11.0+c188b533"``
    -> (2, 11). None for a text of another form (:func:`~estimator.config.rules.precision.precision_problems` names
    it)."""
    m = _TE_VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def grad_reduce_in_fp32(pr) -> bool:
    """Megatron-Core DDP's ``grad_reduce_in_fp32`` for a precision section (Megatron-LM's rule when unset)."""
    if pr.params_dtype == "fp32":
        return True
    if pr.accumulate_allreduce_grads_in_fp32 is not None:
        return pr.accumulate_allreduce_grads_in_fp32
    return pr.params_dtype == "bf16" and pr.main_grads_dtype == "fp32"


def grad_dtype(pr) -> str:
    """Megatron-FSDP's gradient buffer dtype (``ParamAndGradBuffer._resolve_group_grad_dtype``): the main
    gradients' dtype, auto the weights'."""
    g = pr.megatron_fsdp_main_grads_dtype
    return pr.params_dtype if g == "auto" else g


def grad_comm_dtype(pr) -> str:
    """The dtype gradients are reduced in (``MixedPrecisionPolicy.grad_comm_dtype``; auto: the buffer's)."""
    c = pr.megatron_fsdp_grad_comm_dtype
    return grad_dtype(pr) if c == "auto" else c


def recomputed_modules(tr) -> tuple:
    """The modules selective recompute recomputes: ``training.recompute_modules`` as given, ``("core_attn",)`` when
    it is null. An explicit empty list stays empty (selective recompute of nothing), as Megatron-Core keeps it:
    Megatron-LM @ d98e8a64 : megatron/core/transformer/transformer_config.py ``__post_init__`` replaces only
    ``None`` by ``["core_attn"]``. Empty outside selective recompute."""
    if tr.recompute_granularity != "selective":
        return ()
    return ("core_attn",) if tr.recompute_modules is None else tuple(tr.recompute_modules)


def effective_overload_factor(m, par, f: float) -> float:
    """The overload factor a layout's busiest expert-parallel rank receives: ``min(f, max_overload_factor)``. ``f``
    (``training.moe_overload_factor``) describes the routing; a layout cannot receive more than its bound (with one
    expert-parallel rank, exactly its balanced rows). For an MoE model that passed the field checks."""
    return min(float(f), max_overload_factor(m, par))


def max_overload_factor(m, par) -> float:
    """The largest ``training.moe_overload_factor`` a layout allows: the busiest expert-parallel rank's routed rows
    over their balanced share, at most (for an MoE model that passed the field checks)::

        dropless       ep x min(k, E / ep) / k      every token of the expert-parallel group sends its rows to
                                                    the one rank, at most min(k, E / ep) each (top-k picks k
                                                    distinct experts, the rank holds E / ep of them)
        token dropping min(that, max(1, c))         each rank's router keeps at most c x its balanced share per
                                                    expert (moe_expert_capacity_factor c)

    Balanced, the rank receives T k rows of the ep T tokens of its group (T per rank); at most ep T min(k, E/ep).
    With one expert-parallel rank it is exactly 1. Expert tensor parallelism gathers the same ratio over its ranks.
    Group-limited routing (moe_router_group_topk) lowers it only where a rank holds more experts than the selected
    groups, which the top-k already caps (k <= selected groups x group size). Megatron-LM @ d98e8a64 :
    megatron/core/transformer/moe/moe_utils.py ``get_capacity`` and ``apply_router_token_dropping`` (the
    capacity of an expert over the local tokens, ``ceil(tokens x k / E x c)``), token_dispatcher.py
    ``MoEAlltoAllTokenDispatcher.preprocess`` (the rows each rank receives: the sum of its local experts' counts
    over the group)."""
    E, ep = m.num_experts, par.expert_model_parallel_size
    k = m.moe_router_topk or 2
    bound = ep * min(k, E // ep) / k
    c = m.moe_expert_capacity_factor
    if c is not None:
        bound = min(bound, max(1.0, c))
    return bound
