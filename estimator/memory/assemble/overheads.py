"""What a GPU holds beside the tensors: the caching allocator's reserve, the CUDA context and NCCL's buffers.

The three constants turn allocated bytes into reserved and device bytes (:mod:`estimator.memory.assemble`);
:func:`communicators` counts the process groups of more than one rank a GPU talks through, each with its own
NCCL buffers (Megatron-LM @ d98e8a64 : megatron/core/parallel_state.py).
"""

from __future__ import annotations

from ...config.derived import hybrid_cp_groups
from ...model.resolve import Resolved


MIB = 2 ** 20

#: The caching allocator keeps freed blocks for reuse, so max_memory_reserved exceeds max_memory_allocated.
#: On the 19 SimuMax B200 runs of validation/measured.yaml the excess is 2.8-9.3 % (median 4.7 %); we use 5 %.
ALLOCATOR_RESERVE_FRACTION = 0.05

#: CUDA context with cuBLAS/cuDNN/NCCL kernels loaded, outside PyTorch's allocator. nvidia-smi shows
#: roughly 500-700 MiB per process on Hopper with CUDA 12; we take 600 MiB.
CUDA_CONTEXT_BYTES = 600 * MIB

#: NCCL's own buffers per communicator a rank uses (NCCL_BUFFSIZE 4 MiB x channels x peers), an
#: order-of-magnitude figure: 128 MiB per process group of more than one rank (so DP 1 -> 2 adds 128 MiB, or
#: 256 MiB where an MoE model's expert-data-parallel group grows from one rank too).
NCCL_BYTES_PER_COMMUNICATOR = 128 * MIB


def communicators(r: Resolved) -> int:
    """Process groups of more than one rank that a GPU talks through (a group of one rank needs none): DP 1 -> 2
    adds the data-parallel group, and in an MoE model the expert-data-parallel group where it grows from one rank;
    hierarchical context parallelism adds one group per level of more than one rank, dynamic (hybrid) context
    parallelism one per power of two from 2 below the data x context-parallel size, ``create_all_gather_group``
    Megatron-FSDP's all-gather copies of the data-parallel groups (:func:`_all_gather_groups`)."""
    par = r.cfg.parallelism
    sizes = [r.t, r.p, r.dp * r.cp, par.context_parallel_size]     # r.cp is a sub-sample's group with hybrid CP
    if r.E:
        sizes += [r.ep, r.etp, r.edp]
    if par.hybrid_context_parallel:
        # Dynamic CP: a group of each power of two below dp x cp (Megatron-LM @ d98e8a64 : megatron/core/
        # parallel_state.py create_hybrid_dp_cp_groups); the schedule may widen any sub-sample to any of them
        # (hybrid_cp_schedule.py fill_empty_gpus), so each is counted as used.
        sizes += hybrid_cp_groups(r.dp * r.cp)
    # Hierarchical CP: one more group per level (Megatron-LM @ d98e8a64 : megatron/core/parallel_state.py
    # initialize_model_parallel, create_hierarchical_groups over the CP ranks), each its own communicator.
    sizes += list(par.hierarchical_context_parallel_sizes or ())
    sizes += _all_gather_groups(r)
    return sum(1 for s in sizes if s > 1)


def _all_gather_groups(r: Resolved) -> list[int]:
    """Sizes of the extra all-gather groups of ``create_all_gather_group`` that a GPU talks through.

    Megatron-LM @ d98e8a64 : megatron/training/training.py ``get_model`` calls
    megatron/core/parallel_state.py ``create_all_gather_groups``: a copy of the data x context-parallel group
    (``dp_cp_ag``) and, with expert parallelism above one, of the expert-data-parallel group (``expt_dp_ag``). Only
    Megatron-FSDP uses them (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py passes them as
    ``fsdp_group_ag``; megatron_fsdp/param_and_grad_buffer.py gathers the model-weight buffer through them), and
    not where HSDP shards over the outer group (``should_create_hfsdp_helper_buffers``) or nothing is sharded
    (no_shard: no weight all-gather). PyTorch sets up a NCCL communicator at a group's first collective
    (Megatron-LM's ``init_process_group`` binds no device), so an unused group costs nothing.
    """
    par = r.cfg.parallelism
    if not (par.create_all_gather_group and par.use_megatron_fsdp) or \
            par.data_parallel_sharding_strategy == "no_shard" or \
            (par.num_distributed_optimizer_instances > 1 and par.outer_dp_sharding_strategy != "no_shard"):
        return []
    return [r.dp * r.cp] + ([r.edp] if r.E and r.ep > 1 else [])
