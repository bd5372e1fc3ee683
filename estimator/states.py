"""Model states per GPU: weights, gradients and optimizer states, by Megatron-Core's rules.

Per parameter, with bf16 weights, fp32 main gradients (Megatron forces fp32 gradient accumulation for
bf16) and Adam:

    weights 2 B + gradients 4 B + (fp32 master weights 4 B + exp_avg 4 B + exp_avg_sq 4 B) / d

where ``d`` is the shard count of the distributed optimizer: the data-parallel x context-parallel size for
dense parameters, the expert-data-parallel size (world / (etp * ep * pp)) for routed experts, and 1
without the distributed optimizer (18 B per parameter). The precision-aware optimizer changes the dtypes
of the master weights, the gradient buffer and the Adam moments; fp32 weights need no master copy.
Shards are rounded up, as the distributed optimizer pads its buffers to equal shards.
"""

from __future__ import annotations

from typing import NamedTuple

from .resolve import DTYPE_BYTES, Resolved

__all__ = ["StateBytes", "ByteModel", "byte_model", "state_bytes"]


class ByteModel(NamedTuple):
    """Bytes per parameter of each model state, before sharding."""

    weight: int
    fp8_cache: int      # extra FP8 copies Transformer Engine keeps of each linear weight
    grad: int
    optimizer: int      # master weights + both Adam moments, divided by the shard count
    distributed: bool


def byte_model(r: Resolved) -> ByteModel:
    pr = r.cfg.precision
    w = DTYPE_BYTES[pr.params_dtype]
    if pr.use_precision_aware_optimizer:
        grad = DTYPE_BYTES[pr.main_grads_dtype]
        main = DTYPE_BYTES[pr.main_params_dtype]
        opt = main + DTYPE_BYTES[pr.exp_avg_dtype] + DTYPE_BYTES[pr.exp_avg_sq_dtype]
    else:
        # Megatron forces fp32 gradient accumulation for bf16 weights (arguments.py: "accumulate and all-reduce
        # gradients in fp32 for bfloat16 data type"); for fp16 it is the --accumulate-allreduce-grads-in-fp32 flag.
        fp32_grads = pr.params_dtype != "fp16" or bool(pr.accumulate_allreduce_grads_in_fp32)
        grad = 4 if fp32_grads else w
        main = 0 if pr.params_dtype == "fp32" else 4
        opt = main + 8
    fp8_cache = 0
    if pr.fp8:
        if pr.fp8_param_gather:
            w = 1            # the weights themselves are FP8 ...
            fp8_cache = 1    # ... plus the column-wise (transposed) copy for the backward pass
        else:
            fp8_cache = 2    # row-wise and column-wise FP8 copies beside the bf16 weights
    return ByteModel(weight=w, fp8_cache=fp8_cache, grad=grad, optimizer=opt,
                     distributed=r.cfg.training.use_distributed_optimizer)


class StateBytes(NamedTuple):
    weights: int
    gradients: int
    optimizer: int


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def state_bytes(bm: ByteModel, dense_params: int, dense_linear: int, expert_params: int, dense_shard: int,
                expert_shard: int) -> StateBytes:
    """States of one GPU holding ``dense_params`` (of which ``dense_linear`` are linear-layer weights that
    FP8 caches) and ``expert_params`` routed-expert parameters."""
    weights = bm.weight * (dense_params + expert_params) + bm.fp8_cache * (dense_linear + expert_params)
    grads = bm.grad * (dense_params + expert_params)
    if bm.distributed:
        opt = bm.optimizer * (_ceil_div(dense_params, dense_shard) + _ceil_div(expert_params, expert_shard))
    else:
        opt = bm.optimizer * (dense_params + expert_params)
    return StateBytes(weights, grads, opt)
