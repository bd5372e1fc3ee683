"""The optimizer step: what one GPU holds while Megatron-Core's optimizer runs, and when that is the peak.

A training iteration has two phases whose memory differs. During the forward and backward passes the GPU
holds the model states, the activations and the backward's working buffers (``estimator/memory/assemble/stage.py``).
During ``optimizer.step()`` the activations are gone, but the step allocates buffers of its own, in
proportion to the parameters, which can make it the peak of the iteration when activations are small
(full recompute, short sequences, many data-parallel shards of nothing). Following Megatron-Core at the
pinned revision (``megatron/core/optimizer/{optimizer,distrib_optimizer,__init__}.py``):

1. **fp32 copies of the gradient shard.** The optimizer's main parameters are fp32 (``main_param``,
   ``shard_fp32_from_float16_groups``), and PyTorch wants a gradient of its parameter's dtype, so
   ``_copy_model_grads_to_main_grads`` sets ``main_param.grad = model_grad.float()``: a view when the DDP
   gradient buffer is fp32, a new fp32 tensor when it is bf16/fp16 (``--grad-reduce-in-bf16``, fp16
   weights). ``ChainedOptimizer.prepare_grads`` makes them for every inner optimizer before any steps,
   and they are freed only by the next iteration's ``zero_grad``: 4 B per main parameter of this GPU's
   shard. The precision-aware optimizer, when Transformer Engine's FusedAdam keeps the master weights
   (``use_precision_aware_optimizer_no_fp8_or_ds_fp8``), reads the buffer through ``decoupled_grad``
   instead: no copy. fp32 weights have an fp32 buffer: no copy.
2. **The Adam implementation's temporaries.** Which Adam runs is decided by what is installed, not by a
   flag (``megatron/core/optimizer/__init__.py``): Transformer Engine's FusedAdam if it imports, else
   Apex's, else ``torch.optim.AdamW`` (schema field ``training.optimizer_implementation``).

   - ``torch``: the foreach implementation (PyTorch's default for CUDA tensors) computes
     ``exp_avg_sq.sqrt()`` into new tensors for a whole parameter group at once
     (``torch/optim/adam.py``, ``_multi_tensor_adam``): 4 B per main parameter.
   - ``te_fused``: the update runs in place in one multi-tensor kernel. With the precision-aware
     optimizer, every state kept in fp16 or FP8 (and bf16, unless both moments are bf16, which the kernel
     unscales itself) is unscaled into an fp32 copy for the whole group before the kernel runs
     (``transformer_engine/pytorch/optimizers/fused_adam.py``, ``get_unscaled_state``): 4 B per main
     parameter and such state.
   - ``apex_fused``: in place (``apex/optimizers/fused_adam.py``): nothing.

   SGD (``training.optimizer: sgd``) is stepped the same way: Transformer Engine's and Apex's FusedSGD update in
   place; ``torch.optim.SGD`` (foreach, ``_multi_tensor_sgd``) first adds the weight decay to the gradients
   into new tensors (``torch._foreach_add(grads, params, alpha=weight_decay)``; Megatron-LM's
   ``--weight-decay`` defaults to 0.01, and Megatron-Core keeps a group without weight decay apart, counted
   here with the rest): 4 B per main parameter. Its momentum buffer is a state, updated in place.

   The inner optimizers of a ``ChainedOptimizer`` step one after the other, so the temporaries are those
   of the largest one: dense and routed-expert parameters have separate optimizers when expert
   parallelism is used or the expert tensor-parallel size differs from the dense one (their parameters
   then carry ``allreduce = False``), else one optimizer holds both. Megatron puts the parameters
   without weight decay (biases and norm weights) in a group of their own, which PyTorch and Transformer
   Engine step separately; counting them with the rest over-estimates by 4 B per such parameter.

3. **Recomputed MoE inputs kept from the last backward.** A checkpointed MoE layer (selective recompute of
   ``moe``, or a full-recompute group holding a MoE layer) is rerun in the backward on a detached copy of its
   input, a leaf that requires grad (``megatron/core/tensor_parallel/random.py`` ``CheckpointFunction``:
   ``detach_variable``, then ``torch.autograd.backward``, which leaves the leaf's ``.grad``). The token
   dispatcher keeps the routing probabilities of its last call on itself (``token_dispatcher.py``: alltoall
   ``self.probs``, allgather ``self.local_probs``, the flex dispatcher's DeepEP, HybridEP and NCCL-EP managers
   ``self.token_probs``), and their autograd history reaches the router, whose input
   is that leaf: the leaf and its gradient stay alive, one micro-batch's worth per checkpointed group, until
   the layer runs forward again in the next iteration, so through the optimizer step (2 Tn h bytes each).
   Measured on one H100 (this project's batch 4, ``b4_moe_recompute_moe``: PyTorch's allocation trace names
   the pre-MLP norm output and ``CheckpointFunction.backward``'s gradient, 8 MiB each per MoE layer).

With PyTorch FSDP2 (``use_torch_fsdp2``) there is no gradient buffer: the gradients are the bf16 parameter
shards' own ``.grad``, and Megatron-Core's ``Float16OptimizerWithFloat16Params`` copies each to fp32 for its
shard of fp32 main parameters and drops it (``model_param.grad = None``), so the step holds the fp32 copies
instead of the bf16 gradients (measured on one H100, this project's batch 5: −0.03 %).

4. **The reduce-scatter with fp32 accumulation** (``parallelism.reduce_scatter_with_fp32_accumulation``,
   Megatron-LM's --ddp-reduce-scatter-with-fp32-accumulation; Megatron-LM @ d98e8a64
   ``megatron/core/distributed/reduce_scatter_with_fp32_accumulation.py``), which the distributed optimizer's
   gradient reduction uses instead of NCCL's reduce-scatter: an all-to-all of the bucket into a receive copy
   (``torch.empty_like(input_tensor)``: the bucket's elements in the gradient dtype), then the fp32 sum of the
   shard (``torch.sum(..., dtype=torch.float32)``: 4 B per element of the bucket / d), both freed once the sum is
   copied back. Without ``overlap_grad_reduce`` DDP makes one bucket per buffer (``distributed_data_parallel.py``:
   ``bucket_size = None``) and reduces the buffers one after the other after the last backward pass, when the
   activations are gone, before the step's own buffers exist: this moment's buffers are the larger buffer's
   n g + ceil(n / d) 4 B (n its parameters on this GPU, g the gradient bytes, d its shard count), and the step
   phase takes the larger of them and the step's own. The buffer's padding to whole shards (fewer than 128 d
   elements) is not counted. With ``overlap_grad_reduce`` the buckets follow ``bucket_size`` cut at parameter
   edges, which the estimate does not lay out: refused.

Gradient clipping adds nothing of parameter size: Transformer Engine's and Apex's multi-tensor L2 norm and
scale run in place, and Megatron's PyTorch fallback (``local_multi_tensor_scale``) makes one temporary per
tensor, less than the step's own temporaries. The distributed optimizer's copy of the updated shard into
the parameter buffer and the parameter all-gather work in the existing buffers. Buffers held all run
(GEMM workspaces, Megatron's global buffer, Transformer Engine's cached dummy weight gradients) are alive
during the step too.
"""

from __future__ import annotations

from typing import NamedTuple

from ..model.resolve import DTYPE_BYTES, Resolved
from .states import ByteModel, grad_reduce_in_fp32

__all__ = ["OPTIMIZER_IMPLEMENTATIONS", "PERSISTENT_BUFFERS", "StepBuffers", "fp32_reduce_scatter_scratch",
           "optimizer_step_buffers",
           "recompute_retained", "step_buffers", "te_keeps_master_weights"]

#: Values of ``training.optimizer_implementation``.
OPTIMIZER_IMPLEMENTATIONS = ("te_fused", "apex_fused", "torch")

#: Names of ``StageEstimate.transient`` entries held for the whole run (alive during the step too).
PERSISTENT_BUFFERS = ("workspaces", "global_memory_buffer", "te_dummy_wgrad", "cuda_graph_capture_workspaces",
                      "paged_stash_buffers", "fsdp_grad_shard_copies",
                      # GTP's gathered-weight cache and weight-gradient pools (estimator/memory/features/gtp.py)
                      "gtp_gathered_weights", "gtp_wgrad_pool", "gtp_reduce_scatter_outputs",
                      "gtp_symmetric_wgrad_pool")

#: Bytes of one fp32 element.
FP32 = 4


class StepBuffers(NamedTuple):
    """Bytes the optimizer step allocates on one GPU beyond the model states."""

    grad_copies: int     # fp32 copies of a non-fp32 gradient shard (``main_param.grad = grad.float()``)
    temporaries: int     # the Adam implementation's own, for the largest set of parameters stepped at once


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def te_keeps_master_weights(pr) -> bool:
    """Megatron-Core ``OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8``: with the precision-aware
    optimizer, Transformer Engine's FusedAdam keeps the master weights unless they are fp32 and FP8 uses a
    recipe other than delayed scaling (then Megatron-Core keeps them, as without it)."""
    return pr.use_precision_aware_optimizer and (
        pr.main_params_dtype != "fp32" or not pr.fp8 or (pr.fp8_recipe or "delayed") == "delayed")


def separate_expert_optimizer(r: Resolved) -> bool:
    """Routed experts get their own inner optimizer (Megatron-Core ``get_megatron_optimizer``: parameters
    with ``allreduce = False``, set when expert parallelism is used or ETP differs from TP)."""
    return bool(r.E) and (r.ep > 1 or r.etp != r.t)


def fp32_copies_per_state(r: Resolved) -> int:
    """States the implementation unscales into an fp32 copy for a whole group before its kernel."""
    pr = r.cfg.precision
    impl = r.cfg.training.optimizer_implementation
    if r.cfg.training.optimizer == "sgd":
        return 1 if impl == "torch" else 0        # torch: the gradients plus weight decay, a new list
    if impl == "torch":
        return 1                                  # exp_avg_sq.sqrt()
    if impl != "te_fused" or not pr.use_precision_aware_optimizer:
        return 0
    fused_unscale = pr.exp_avg_dtype == pr.exp_avg_sq_dtype == "bf16"
    n = sum(1 for d in (pr.exp_avg_dtype, pr.exp_avg_sq_dtype) if d != "fp32" and not fused_unscale)
    if te_keeps_master_weights(pr) and pr.main_params_dtype == "fp16":
        n += 1                                    # fp16 master weights, unscaled to fp32
    return n


def step_buffers(r: Resolved, bm: ByteModel, dense_params: int, expert_params: int, dense_shard: int) -> StepBuffers:
    """What the optimizer step of one GPU holding ``dense_params`` and ``expert_params`` parameters adds.

    With d = ``dense_shard`` (data x context parallel) and e = the expert-data-parallel size, the main
    parameters of this GPU are ``n_d = ceil(dense / d)`` and ``n_e = ceil(expert / e)`` with the
    distributed optimizer, all of them without it. Then

        grad_copies = 4 * (n_d + n_e)      if the gradient buffer is not fp32 and Megatron keeps the masters
        temporaries = 4 * c * (max(n_d, n_e) if separate expert optimizer else n_d + n_e)

    with c the fp32 copies per parameter the implementation makes (:func:`fp32_copies_per_state`).
    """
    if bm.distributed or r.cfg.parallelism.use_torch_fsdp2:      # FSDP2: each GPU steps its shards
        n_d, n_e = _ceil_div(dense_params, dense_shard), _ceil_div(expert_params, r.edp)
    else:
        n_d, n_e = dense_params, expert_params
    copies_fp32, separate, per_state = _flags(r)
    copies = FP32 * (n_d + n_e) if copies_fp32 else 0
    at_once = max(n_d, n_e) if separate else n_d + n_e
    return StepBuffers(grad_copies=copies, temporaries=FP32 * per_state * at_once)


def _flags(r: Resolved) -> tuple[bool, bool, int]:
    """(fp32 gradient copies made, separate expert optimizer, fp32 copies per state) of a configuration,
    remembered on the frozen Config (every stage of an estimate, and the search, ask again)."""
    cache = r.cfg.__dict__
    hit = cache.get("_step_flags")
    if hit is None:
        pr = r.cfg.precision
        # FSDP2 keeps no gradient buffer: the gradients are the bf16 parameters' own (no mixed-precision policy).
        fp32_grads = grad_reduce_in_fp32(pr) and not r.cfg.parallelism.use_torch_fsdp2
        copies = pr.params_dtype != "fp32" and not te_keeps_master_weights(pr) and not fp32_grads
        hit = cache["_step_flags"] = (copies, separate_expert_optimizer(r), fp32_copies_per_state(r))
    return hit


def recompute_retained(r: Resolved, chunks, acts) -> int:
    """Bytes of recomputed MoE inputs and their gradients alive through the step (module docstring, point 3):
    2 x the layer input (``LayerActivations.checkpoint``) per checkpointed group of ``chunks`` that holds a MoE
    layer. Groups follow Megatron-Core's ``TransformerBlock._checkpointed_forward`` within each model chunk:
    ``uniform`` groups of ``recompute_num_layers`` from the chunk's first layer, ``block`` its first
    ``recompute_num_layers`` layers one by one; selective ``moe`` checkpoints every MoE layer alone."""
    tr = r.cfg.training
    if not r.E:
        return 0
    moe, kinds = r.moe_layers, r.layer_kinds
    if tr.recompute_granularity == "selective":
        if "moe" not in (tr.recompute_modules or ()):
            return 0
        firsts = [i for c in chunks for i in c.layers if moe[i]]
    elif tr.recompute_granularity == "full":
        # each group's first layer, for the groups holding a MoE layer (the search asks for thousands of stages)
        k = tr.recompute_num_layers or 1
        firsts = []
        for c in chunks:
            rng = c.layers
            if tr.recompute_method == "block":
                firsts += [i for i in rng[:k] if moe[i]]
            else:
                firsts += [j for j in rng[::k] if any(moe[j:min(j + k, rng.stop)])]
    else:
        return 0
    if tr.recompute_granularity == "selective" and r.cfg.precision.fp32_residual_connection:
        # selective moe checkpoints the MoE block, whose input is the pre-MLP norm's bf16 output, not the layer's
        # fp32 input (estimator/memory/activations.py): 2 B per element
        return sum(2 * (acts[kinds[i]].checkpoint // 2) for i in firsts)
    return sum(2 * acts[kinds[i]].checkpoint for i in firsts)


def optimizer_step_buffers(r: Resolved, bm: ByteModel, dense_params: int, expert_params: int, dense_shard: int,
                           transient: dict, retained: int = 0, own: dict | None = None) -> dict:
    """Everything besides the model states alive at the step's peak, by name: the run-long buffers of
    ``transient`` (:data:`PERSISTENT_BUFFERS`), the recomputed MoE inputs kept from the backward (``retained``,
    :func:`recompute_retained`) and the step's own (zero entries left out); ``own`` replaces the latter where a
    feature steps differently (optimizer CPU offload: estimator/memory/features/offload.py; Megatron-FSDP:
    estimator/memory/features/fsdp.py)."""
    out = {k: transient[k] for k in PERSISTENT_BUFFERS if k in transient}
    if retained:
        out["recompute_retained_inputs"] = retained
    if own is not None:
        out.update((k, v) for k, v in own.items() if v)
        return out
    sb = step_buffers(r, bm, dense_params, expert_params, dense_shard)
    scratch = fp32_reduce_scatter_scratch(r, dense_params, expert_params, dense_shard)
    if scratch > sb.grad_copies + sb.temporaries:       # the reduction's moment, before the step's own buffers
        out["grad_reduce_fp32_scratch"] = scratch
        return out
    if sb.grad_copies:
        out["optimizer_fp32_grad_copies"] = sb.grad_copies
    if sb.temporaries:
        out["optimizer_temporaries"] = sb.temporaries
    return out


def fp32_reduce_scatter_scratch(r: Resolved, dense_params: int, expert_params: int, dense_shard: int) -> int:
    """Bytes of the reduce-scatter with fp32 accumulation at the end of the backward pass (module docstring, 4):
    the larger buffer's receive copy in the gradient dtype and fp32 sum of its shard; 0 when it is off."""
    if not (r.cfg.parallelism.reduce_scatter_with_fp32_accumulation and r.cfg.training.use_distributed_optimizer):
        return 0
    g = FP32 if grad_reduce_in_fp32(r.cfg.precision) else DTYPE_BYTES[r.cfg.precision.params_dtype]
    return max(n * g + -(-n // d) * FP32 for n, d in ((dense_params, dense_shard), (expert_params, r.edp)))


_IMPL_NAMES = {"te_fused": "Transformer Engine's FusedAdam", "apex_fused": "Apex's FusedAdam",
               "torch": "torch.optim.AdamW (foreach)"}
_SGD_NAMES = {"te_fused": "Transformer Engine's FusedSGD", "apex_fused": "Apex's FusedSGD",
              "torch": "torch.optim.SGD (foreach)"}


def assumption(r: Resolved, bm: ByteModel) -> str:
    """One sentence for the estimate's assumptions: which optimizer implementation runs and what its step adds."""
    sb = step_buffers(r, bm, 1, 0, 1)
    impl = r.cfg.training.optimizer_implementation
    names = _SGD_NAMES if r.cfg.training.optimizer == "sgd" else _IMPL_NAMES
    parts = []
    if sb.grad_copies and r.cfg.parallelism.use_torch_fsdp2:
        parts.append("fp32 copies of the gradient shards (4 B per parameter; FSDP2's bf16 gradients are freed as "
                     "they are copied)")
    elif sb.grad_copies:
        parts.append("fp32 copies of the gradient shard (4 B per parameter, the gradient buffer not being fp32)")
    if sb.temporaries:
        parts.append(f"{names[impl]}'s temporaries ({sb.temporaries} B per parameter stepped at once)")
    adds = " and ".join(parts) if parts else "nothing of parameter size"
    return (f"Optimizer step: {names[impl]} (training.optimizer_implementation: Megatron-Core picks it by "
            f"what is installed); with the activations freed, the step adds {adds} to the model states and the "
            "run-long buffers; the stage's peak is the larger of the forward/backward and the step (peak_phase).")
