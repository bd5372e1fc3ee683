"""Optimizer states per parameter beyond Adam, and how they are sharded.

Bytes per parameter, before sharding, with bf16 (or fp16) weights (fp32 weights need no master copy):

    adam  master 4 + exp_avg + exp_avg_sq (4 + 4, or the precision-aware optimizer's dtypes)   = 12
    sgd   master 4 + momentum_buffer 4 (torch.optim.SGD keeps it only when momentum > 0)        = 8 (4)
    muon  2-D linear weights: master 4 + momentum 4                                             = 8
          embedding, output layer, norms, biases, router: Adam (Muon's scalar optimizer)        = 12

Sources (Megatron-LM @ d98e8a64): ``megatron/core/optimizer/__init__.py`` (SGD with ``sgd_momentum``;
``dist_muon`` is ``muon`` with ``use_layer_wise_distributed_optimizer``), ``emerging_optimizers.py``
(``TensorParallelMuon`` keeps one momentum buffer; ``_is_muon_excluded`` sends embeddings and non-2-D
parameters to Adam), ``layer_wise_optimizer.py`` (``LayerWiseDistributedOptimizer`` gives each 2-D weight
whole to one data-parallel rank; everything else goes through the byte-sharded distributed optimizer).

Sharding: with the distributed optimizer the states are divided over the data x context-parallel ranks
(experts: expert-data-parallel ranks), and with ``num_distributed_optimizer_instances`` = M copies over only
1/M of them (``parallel_state.py``: intra-partial data-parallel size dp*cp/M, expert dp/M). Muon's
layer-wise sharding hands out whole tensors; the estimate divides evenly (the busiest rank can hold up to
one weight matrix more).
"""

from __future__ import annotations

from typing import NamedTuple

from ..resolve import DTYPE_BYTES

__all__ = ["OptimizerBytes", "optimizer_bytes", "optimizer_shards"]


class OptimizerBytes(NamedTuple):
    """Unsharded optimizer bytes per parameter, and how much of it is the fp32 master copy."""

    linear: int      # per 2-D linear weight (routed experts included)
    other: int       # per embedding, output-layer, norm, bias and router parameter
    master: int      # the master-weight part of both


def optimizer_bytes(r, bm) -> OptimizerBytes:
    """Bytes per parameter of the optimizer selected by ``training.optimizer`` (Adam: ``bm.optimizer``)."""
    tr, pr = r.cfg.training, r.cfg.precision
    master = 0 if pr.params_dtype == "fp32" else 4
    if tr.optimizer == "sgd":
        b = master + (4 if tr.sgd_momentum > 0 else 0)
        return OptimizerBytes(b, b, master)
    if tr.optimizer == "muon":
        return OptimizerBytes(master + 4, master + 8, master)
    moments = (DTYPE_BYTES[pr.exp_avg_dtype] + DTYPE_BYTES[pr.exp_avg_sq_dtype]
               if pr.use_precision_aware_optimizer else 8)
    return OptimizerBytes(bm.optimizer, bm.optimizer, bm.optimizer - moments)


def optimizer_shards(r) -> tuple[int, int]:
    """(dense, expert) shard counts of the optimizer states (1 without the distributed optimizer)."""
    tr = r.cfg.training
    if not tr.use_distributed_optimizer:
        return 1, 1
    m = r.cfg.parallelism.num_distributed_optimizer_instances
    return max(r.dp * r.cp // m, 1), max(r.edp // m, 1)
