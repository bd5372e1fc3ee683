"""Optimizer states per parameter beyond Adam, and how they are sharded.

Bytes per parameter, before sharding, with bf16 (or fp16) weights (fp32 weights need no master copy):

    adam  master 4 + exp_avg + exp_avg_sq (4 + 4, or the precision-aware optimizer's dtypes)   = 12
    sgd   master 4 + momentum_buffer 4 (torch.optim.SGD keeps it only when momentum > 0)        = 8 (4)
    muon  2-D linear weights: master 4 + momentum 4                                             = 8
          embedding, output layer, norms, biases, router: Adam (Muon's scalar optimizer)        = 12
          (the kimi_k25 vision tower: its 2-D weights Muon's, the rest Adam's; muon_step.py)

Sources (Megatron-LM @ d98e8a64): ``megatron/core/optimizer/__init__.py`` (SGD with ``sgd_momentum``;
``dist_muon`` is ``muon`` with ``use_layer_wise_distributed_optimizer``), ``emerging_optimizers.py``
(``TensorParallelMuon`` keeps one momentum buffer; ``_is_muon_excluded`` sends embeddings and non-2-D
parameters to Adam), ``layer_wise_optimizer.py`` (``LayerWiseDistributedOptimizer`` gives each 2-D weight
whole to one data-parallel rank; everything else goes through the byte-sharded distributed optimizer).

SGD does not run with the distributed optimizer (nor Megatron-FSDP, which uses it): ``distrib_optimizer.py``
``DistributedOptimizer.__init__`` asserts Adam, ``HybridDeviceOptimizer`` or a state initializer, and SGD is built
without one (this project's batch-4 SGD run stopped there on an H100); the configuration is refused
(:mod:`estimator.config.rules.features`).

Sharding: with the distributed optimizer the states are divided over the data x context-parallel ranks
(experts: expert-data-parallel ranks), and with ``num_distributed_optimizer_instances`` = M copies over only
1/M of them (``parallel_state.py``: intra-partial data-parallel size dp*cp/M, expert dp/M).

Muon with the distributed optimizer (``megatron/training/arguments.py`` turns ``--use-distributed-optimizer``
into ``use_layer_wise_distributed_optimizer``; ``training/models/dist_utils.py``,
``optimizer/__init__.py`` ``_get_megatron_emerging_optimizer``, ``layer_wise_optimizer.py``):

- with the parameter layout (``use_layer_wise_param_layout``, the default) the Muon matrices sit in a
  shard-aligned buffer, bin-packed over the ranks bucket by bucket, and everything else goes through a
  byte-sharded ``DistributedOptimizer``: the estimate divides evenly (a rank can hold up to one matrix more);
- without it (``--no-use-layer-wise-param-layout``, ``_shard_params_ping_pong``) all parameters, sorted by
  size, are handed whole to the data-parallel ranks in the order 0..n-1, n-1..0, 0.. (experts over the
  expert-data-parallel ranks). One rank receives the largest tensor whole, usually the embedding or the
  output layer (Adam: 12 B per parameter), and about an even share of the rest. The estimate is that busiest
  rank's: the even share plus the largest tensor's bytes beyond its share, B * (1 - 1/n) (and the same for
  the largest expert matrix over the expert-data-parallel ranks). Other ranks hold less.
"""

from __future__ import annotations

from typing import NamedTuple

from ...model.resolve import DTYPE_BYTES

__all__ = ["OptimizerBytes", "largest_expert_matrix", "largest_matrix", "optimizer_bytes", "optimizer_shards",
           "ping_pong_extra"]


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


def largest_matrix(r, dense_layers: bool, moe_layers: bool) -> int:
    """Elements of the largest non-expert 2-D linear weight one GPU holds (attention, dense MLP, shared
    experts), over the layer kinds' own head shapes and MLP widths (Gemma 4's global layers, heterogeneous
    blocks: :func:`estimator.model.layers.view`)."""
    from ...model.layers import view
    return max(_largest_matrix(view(r, k), dense_layers, moe_layers) for k in r.kinds)


def _largest_matrix(r, dense_layers: bool, moe_layers: bool) -> int:
    t, h, a = r.t, r.h, r.a
    up = 2 if r.gated else 1
    if r.mla:
        qk = r.qk_dim + r.rope_dim
        out = max((r.kv_lora + r.rope_dim) * h, a // t * (r.qk_dim + r.v_dim) * r.kv_lora, h * a // t * r.v_dim,
                  max(r.q_lora * h, a // t * qk * r.q_lora) if r.q_lora else a // t * qk * h)
    else:
        out = max(((a + r.g) * r.dh + r.g * (r.dv or r.dh)) // t * h, h * a // t * (r.dv or r.dh))  # QKV: even split
    if dense_layers:
        out = max(out, r.f // t * up * h)
    if moe_layers and r.fs:
        out = max(out, r.fs // t * up * h)
    return out


def largest_expert_matrix(r) -> int:
    """Elements of one local expert's fc1 weight (its largest matrix) on one GPU."""
    return r.fm // r.etp * (2 if r.gated else 1) * r.h


def ping_pong_extra(ob: OptimizerBytes, shards: tuple[int, int], vocab: int, matrix: int, expert: int) -> int:
    """Optimizer bytes of the busiest rank beyond the even share under the ping-pong assignment.

        max(vocab * other, matrix * linear) * (1 - 1/n_dense) + expert * linear * (1 - 1/n_expert)

    ``vocab``: elements of the stage's embedding or output-layer weight (0 without one); ``matrix``:
    :func:`largest_matrix`; ``expert``: :func:`largest_expert_matrix` (0 without experts); ``shards``:
    (data x context-parallel, expert-data-parallel) sizes."""
    sd, se = shards
    big = max(vocab * ob.other, matrix * ob.linear)
    return big - big // sd + expert * ob.linear - expert * ob.linear // se
