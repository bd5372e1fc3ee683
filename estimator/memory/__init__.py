"""Layer 3, ``memory``: the bytes of every pipeline stage of one training step, and where they go.

- :mod:`.states`: weights, gradients and optimizer states per parameter (distributed optimizer, precision);
- :mod:`.activations`: what a decoder layer saves for the backward pass; :mod:`.loss`: the output layer and loss;
- :mod:`.workspaces`: transient buffers (cuBLAS, Transformer Engine, the all-gather buffer);
  :mod:`.optimizer_step`: the optimizer step's temporaries; :mod:`.schedule`: micro-batches in flight per stage;
- :mod:`.features`: today's recipe features (FSDP, PEFT, offloading, CUDA graphs, communication buffers,
  expert-parallel overlap, Muon, ...), one module each;
- :mod:`.assemble`: the per-stage assembly (:func:`stage_memory`) and the entry point :func:`estimate`;
- :mod:`.allocator`: PyTorch's caching allocator simulated; :mod:`.reserved`: one step per stage as an allocation
  trace replayed through it (``training.reserved_memory_model: replay``);
- :mod:`.report`: the result types (:class:`~.report.Estimate`); :mod:`.timeline`: memory over one step;
  :mod:`.breakdown`: the peak by module.

Imports: ``config``, ``model``. Imported by ``formats``, ``reference``, ``plan``, ``validation``, ``web``, ``cli``.
A new memory term goes in the module of its kind (or a new one in :mod:`.features` for a recipe feature), summed by
:mod:`.assemble`.

The names below are re-exported for the old ``estimator.memory`` module's users.
"""

from __future__ import annotations

from .assemble import (ALLOCATOR_RESERVE_FRACTION, CUDA_CONTEXT_BYTES, NCCL_BYTES_PER_COMMUNICATOR, estimate, in_flight,
                       stage_memory)

__all__ = ["ALLOCATOR_RESERVE_FRACTION", "CUDA_CONTEXT_BYTES", "NCCL_BYTES_PER_COMMUNICATOR", "estimate", "in_flight",
           "stage_memory"]
