"""Per-stage memory: the assembly of parameters, model states, activations and transient buffers.

For each pipeline stage this package finds the layers it holds (per virtual chunk), the parameters one
of its GPUs keeps, the micro-batches in flight at the peak of the pipeline schedule, and the transient
buffers alive at that peak; then the three totals:

- ``allocated_bytes``: weights + gradients + optimizer states + activations + transient buffers, what
  ``torch.cuda.max_memory_allocated()`` reports;
- ``reserved_bytes``: plus the PyTorch caching allocator's reserve (:data:`ALLOCATOR_RESERVE_FRACTION`);
- ``device_bytes``: plus the CUDA context and NCCL communicator buffers (one per process group of more than
  one rank, so DP 1 -> 2 adds one, two in an MoE model whose expert-data-parallel group grows too; with
  Megatron-FSDP, ``create_all_gather_group`` (Megatron-LM's --create-all-gather-group) adds the all-gather copies
  of the data x context-parallel and expert-data-parallel groups, Megatron-LM @ d98e8a64 :
  megatron/core/parallel_state.py ``create_all_gather_groups``), the figure to hold against a GPU's capacity.

The totals are those of the phase with the larger peak, forward/backward or the optimizer step
(``peak_phase``); at the optimizer step the activations are 0, freed by the last backward pass before it.

Where the layers, the embedding, the output layer and the MTP layers sit comes from
:mod:`estimator.config.pipeline_layout` (per virtual chunk); the micro-batches in flight from
:mod:`estimator.memory.schedule` (Megatron-Core ``pipeline_parallel/schedules.py``): with 1F1B stage r holds
min(p - r, m) micro-batches at its peak; with the interleaved schedule rank r runs 2 (p - r - 1) +
(v - 1) N warm-up forwards (N = ``microbatch_group_size_per_vp_stage``), so it holds that many
chunk-micro-batches plus one, capped at m v, in the heaviest mix of chunks the schedule produces
(:func:`estimator.memory.schedule.heaviest_mix`, O(v) per stage whatever the number of micro-batches).

The package, one concern a module: :mod:`.per_kind` (memoised per-layer-kind parameters, activations and
layer counts), :mod:`.stage` (the assembly of one estimate per stage), :mod:`.overheads` (allocator reserve,
CUDA context, NCCL communicators), :mod:`.replay` (the link to :mod:`estimator.memory.reserved`) and
:mod:`.assumptions` (the assumptions' text). This module holds the public API; the names other modules import
from ``estimator.memory.assemble`` stay importable here.
"""

from __future__ import annotations

from ...config.errors import ConfigError, Problem
from ...config.load import load_config
from ...config.rules import interleaving_problem
from ...config.schema import MAX_BATCH
from ...model.resolve import Resolved, resolve
from ..report import Estimate, Peak, StageEstimate
from ..schedule import first_chunks, warmup
from .overheads import ALLOCATOR_RESERVE_FRACTION, CUDA_CONTEXT_BYTES, MIB, NCCL_BYTES_PER_COMMUNICATOR
from .per_kind import chunk_activations, kind_activations, layer_kind_counts, parameter_layout, sum_activations
from .replay import MAX_REPLAYED_STAGES
# Bound as _assemble here, where stage_memory and peak_memory look it up at each call (benchmarks/make_it_fit.py
# counts the estimates by replacing it).
from .stage import assemble as _assemble

__all__ = ["estimate", "ALLOCATOR_RESERVE_FRACTION", "CUDA_CONTEXT_BYTES", "NCCL_BYTES_PER_COMMUNICATOR", "in_flight",
           "peak_memory", "stage_memory"]


def in_flight(r: Resolved, stage: int) -> list[int]:
    """Virtual-chunk index of every (chunk-)micro-batch whose activations stage ``stage`` holds before its first
    backward pass, in the order of their forward passes. That is the peak when all chunks weigh the same;
    :func:`stage_memory` takes the heaviest mix the schedule ever holds (:func:`estimator.memory.schedule.heaviest_mix`)."""
    p, v, m = r.p, r.v, r.m
    if v == 1:
        n = p - stage
        if m is not None:
            n = min(n, m)
        return [0] * n
    if m is None:
        m = r.group * (v + 4)
    return first_chunks(v, r.group, m, min(warmup(p, stage, v, r.group, m) + 1, m * v))


def stage_memory(r: Resolved, *, replay: bool | None = None) -> Estimate:
    """The estimate for every pipeline stage of a resolved configuration.

    ``replay``: reserved memory from the replay of each stage's allocation trace through the simulated caching
    allocator (:mod:`estimator.memory.reserved`) rather than allocated x (1 + :data:`ALLOCATOR_RESERVE_FRACTION`);
    None follows ``training.reserved_memory_model`` (the layout search passes False: thousands of calls)."""
    if replay is None:
        replay = r.cfg.training.reserved_memory_model == "replay"
    return _assemble(r, replay, False)


def peak_memory(r: Resolved) -> tuple[Peak, StageEstimate]:
    """The peak of :func:`stage_memory` (``replay=False``) and the stage that holds it, the same numbers, without
    the stages that cannot hold it (the layout search asks thousands of times).

    Left out: with the plain 1F1B schedule (v = 1), no recipe feature and no RL phases, a stage holding neither the
    embedding nor the loss whose parameters, model states, one micro-batch's activations per chunk, recompute
    working set, layer kinds, MTP layers, vocabulary chunks and recomputed MoE inputs kept through the step are
    those of an earlier stage with at least as many micro-batches in flight. Its run-long and step buffers are then
    the earlier stage's and its activations no more, so no phase peaks higher: forward/backward = states + n x (one
    micro-batch's activations) + buffers grows with the micro-batches in flight n; the optimizer step, evaluation
    and checkpoint phases do not depend on n; the stage's allocated peak is the largest of them, and its device
    bytes grow with it. Ties go to the first stage, as in :func:`stage_memory` (``tests/memory/test_memory.py``
    holds the two equal)."""
    return _assemble(r, False, True)


def estimate(config, *, num_microbatches: int | None = None) -> Estimate:
    """Estimate the memory of every pipeline stage of a configuration (path, dict, YAML/JSON text or Config).

    ``num_microbatches`` overrides the number derived from ``training.global_batch_size``.
    Raises :class:`~estimator.config.errors.ConfigError` listing every problem of an invalid configuration.
    """
    r = resolve(load_config(config))
    if num_microbatches is not None:
        if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
            raise ConfigError(Problem("num_microbatches", num_microbatches, "must be a positive integer"))
        if num_microbatches > MAX_BATCH:
            raise ConfigError(Problem("num_microbatches", num_microbatches, f"must be <= {MAX_BATCH:,}"))
        problem = interleaving_problem(r.p, r.v, num_microbatches, r.group)
        if problem:
            raise ConfigError(Problem("num_microbatches", num_microbatches, problem))
        r.m = num_microbatches
    return stage_memory(r)
