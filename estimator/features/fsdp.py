"""Model states under Megatron-FSDP and PyTorch FSDP2: what each sharding strategy shards, and the gathered
unit buffers alive at the peak.

Megatron-FSDP (v1; Megatron-LM @ d98e8a64 ``megatron/core/distributed/fsdp/src/megatron_fsdp/``,
``param_and_grad_buffer.py`` ``_init_each_parameter_group_buffers``). Every transformer layer is an FSDP unit
(``mcore_fsdp_adapter.py``); the embedding, output layer and final norm belong to the root module. With N the
data x context-parallel size divided by ``num_distributed_optimizer_instances`` M (the HSDP inner size; routed
experts: expert-data-parallel size / M), per parameter:

    strategy             weights      gradients (dtype g)   master weights + optimizer moments
    no_shard             w            g                     m + s
    optim                w            g                     (m + s) / N
    optim_grads          w            g / N                 (m + s) / N
    optim_grads_params   w / N        g / N                 (m + s) / N   (/ (N*M) with outer_dp_sharding optim)

g is ``megatron_fsdp_main_grads_dtype`` (auto: the weights' dtype), m ``megatron_fsdp_main_params_dtype``
(fp32 4 B; auto none), s the optimizer moments. At the backward peak, beside these:

- optim_grads_params gathers the running unit and prefetches the next ones until the prefetched elements reach
  P = max(1e9, 2*U_avg) / 2 (``megatron_fsdp.py``: ``suggested_communication_unit_size``, at least 1e9
  elements; ``AllGatherPipeline.all_gather_params``): (1 + ceil(P / U)) units of U weights, and the root
  module's weights stay gathered for the whole step;
- optim_grads and optim_grads_params keep unsharded gradient buckets of the units waiting for their
  reduce-scatter, up to C = max(1e9, 2*U_avg) elements (``GradReducePipeline.wait_for_previous_grad_reduce``),
  plus the unit being accumulated;
- with ``fsdp_double_buffer`` (forced by ``nccl_ub``) both are exactly two unit-sized buffers
  (``FixedPoolAllocator``, size 2).

PyTorch FSDP2 (``megatron/core/distributed/torch_fully_sharded_data_parallel.py``): ``fully_shard`` on every
transformer layer, the embedding and the output layer, over the data x context-parallel group N: weights w/N,
gradients reduce-scattered in the weights' dtype w/N, and Megatron's mixed-precision optimizer keeps fp32
master weights and moments of the local shards, (m + s)/N. At the peak the running layer and the prefetched
next one are gathered, and the running and the previous layer's unsharded gradients exist (4 units of w);
``torch_fsdp2_reshard_after_forward: false`` keeps every layer gathered from its forward to its backward.
"""

from __future__ import annotations

from typing import NamedTuple

from ..resolve import DTYPE_BYTES

__all__ = ["FsdpStates", "megatron_fsdp_states", "torch_fsdp2_states", "fsdp_shards"]

#: Megatron-FSDP's floor on the communication unit (elements): prefetch P = this / 2, reduce-scatter queue C.
COMMUNICATION_UNIT_FLOOR = 1_000_000_000


class FsdpStates(NamedTuple):
    weights: int
    gradients: int
    optimizer: int
    transient: dict


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def fsdp_shards(r) -> tuple[int, int, int, int]:
    """(dense, expert) shard counts of weights/gradients and (dense, expert) of the optimizer states."""
    par = r.cfg.parallelism
    if par.use_torch_fsdp2:
        n = r.dp * r.cp
        return n, n, n, n
    m = par.num_distributed_optimizer_instances
    nd, ne = max(r.dp * r.cp // m, 1), max(r.edp // m, 1)
    if par.data_parallel_sharding_strategy == "no_shard":
        return nd, ne, 1, 1
    outer = m if par.outer_dp_sharding_strategy == "optim" else 1
    return nd, ne, nd * outer, ne * outer


def _grad_bytes(r) -> int:
    pr = r.cfg.precision
    g = pr.megatron_fsdp_main_grads_dtype
    return DTYPE_BYTES[pr.params_dtype] if g == "auto" else DTYPE_BYTES[g]


def _master_bytes(r) -> int:
    mp = r.cfg.precision.megatron_fsdp_main_params_dtype
    return 0 if mp == "auto" else DTYPE_BYTES[mp]


def megatron_fsdp_states(r, bm, moments: int, n_dense: int, n_linear: int, n_expert: int, units: list,
                         root: int) -> FsdpStates:
    """States of one GPU holding ``n_dense`` non-expert parameters (``n_linear`` of them linear weights) and
    ``n_expert`` routed-expert parameters; ``units`` lists (elements, linear elements) of each FSDP unit
    (transformer layer) on the stage, ``root`` the elements of the root module (embedding, output layer)."""
    par = r.cfg.parallelism
    strat = par.data_parallel_sharding_strategy
    nd, ne, od, oe = fsdp_shards(r)
    w, lw = bm.weight, bm.linear_weight or bm.weight
    dense_w = w * (n_dense - n_linear) + lw * n_linear
    expert_w = lw * n_expert
    g = _grad_bytes(r)
    per_opt = _master_bytes(r) + moments
    transient = {}
    if strat == "optim_grads_params":
        weights = _cdiv(dense_w, nd) + _cdiv(expert_w, ne)
    else:
        weights = dense_w + expert_w + bm.fp8_cache * (n_linear + n_expert)
    if strat in ("optim_grads", "optim_grads_params"):
        grads = _cdiv(g * n_dense, nd) + _cdiv(g * n_expert, ne)
    else:
        grads = g * (n_dense + n_expert)
    optimizer = per_opt * (_cdiv(n_dense, od) + _cdiv(n_expert, oe))
    if units and strat != "no_shard":
        u_max = max(e for e, _ in units)
        u_lin = max(li for _, li in units)
        u_avg = sum(e for e, _ in units) // len(units)
        unit_bytes = w * (u_max - u_lin) + (lw + bm.fp8_cache) * u_lin
        comm = par.suggested_communication_unit_size or max(COMMUNICATION_UNIT_FLOOR, 2 * u_avg)
        double = par.fsdp_double_buffer or par.nccl_ub
        if strat == "optim_grads_params":
            if double:
                n_gathered = min(2, len(units))
            else:
                n_gathered = 1 + min(_cdiv(comm // 2, u_max), len(units) - 1)
            transient["fsdp_gathered_units"] = n_gathered * unit_bytes
            if root:
                transient["fsdp_gathered_root"] = w * root
        if strat in ("optim_grads", "optim_grads_params"):
            if double:
                pending = min(2, len(units)) * u_max
            else:
                pending = min(comm + u_max, sum(e for e, _ in units) + root)
            transient["fsdp_unsharded_grads"] = g * pending
    return FsdpStates(weights, grads, optimizer, transient)


def torch_fsdp2_states(r, bm, moments: int, n_dense: int, n_expert: int, units: list, root: int) -> FsdpStates:
    """States of one GPU under PyTorch FSDP2 (no expert parallelism, no pipeline parallelism)."""
    n = r.dp * r.cp
    w = bm.weight
    total = n_dense + n_expert
    master = 0 if r.cfg.precision.params_dtype == "fp32" else 4
    layers = 0
    if units:
        u_max = max(e for e, _ in units)
        if r.cfg.parallelism.torch_fsdp2_reshard_after_forward:
            gathered = min(2, len(units)) * u_max
        else:
            gathered = sum(e for e, _ in units)
        layers = w * (gathered + min(2, len(units)) * u_max)
    # The embedding and the output layer are units of their own, gathered only while they run (the output
    # layer's backward, beside its gradient): the larger of the two moments is the peak.
    transient = {"fsdp_gathered_units": max(layers, w * root)} if (layers or root) else {}
    return FsdpStates(_cdiv(w * total, n), _cdiv(w * total, n), (master + moments) * _cdiv(total, n), transient)
