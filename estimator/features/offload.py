"""Offloading to the host: the optimizer step and activations. What leaves the GPU, what stays, and the host
memory it takes (reported beside the device figures, never added to them).

Optimizer CPU offload (Megatron-LM @ d98e8a64 ``megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py``,
``HybridDeviceOptimizer`` with ``param_update_in_fp32``; Megatron-LM requires the precision-aware optimizer,
so the distributed optimizer keeps no fp32 masters of its own). Of the n parameters this GPU's optimizer owns,
the first f*n (``optimizer_offload_fraction``, by element count) are stepped on the CPU:

    GPU   (1 - f) * n * (4 fp32 copy + moments)            torch Adam on the GPU part (moments 8 B, SGD 4 B)
    host  f * n * (4 + 4) pinned                            fp32 copy (``pin_cpu_params``) + gradient copy
          f * n * moments pageable                          the CPU optimizer's states

Layer-wise activation offloading (``cpu_offloading_num_layers`` = N; Transformer Engine @ d0067d0d
``transformer_engine/pytorch/cpu_offload.py``, ``DefaultOffloadSynchronizer``): the saved tensors of layers
0..N-1 are copied to pinned host buffers and released once layer L-N+i starts, so at the end of the forward
pass L-N layers' activations are on the GPU ("peak memory usage of saving activations is (num_layers -
num_offloaded_layers) * T").

Fine-grained activation offloading (``fine_grained_activation_offloading``) is refused (:mod:`.rules`). The
saved tensors of ``offload_modules`` go to pinned host buffers group by group, but what stays on the GPU at the
peak is Megatron-Core's run-time policy (``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``):
``post_warmup_callback`` keeps, for each group name, the last layer's group of the first chunk to run its
backward (the "offload margin"); ``should_bulk_offload`` keeps the last group of a name when that chunk's
backward comes next; ``bulk_reload`` brings one group back ahead of the backward pass, beside the gradients of
the group being differentiated (with unfused attention an s x s gradient as large as the saved probabilities);
tensors under ``min_offloaded_tensor_size`` elements stay. Offloading every listed tensor but one layer's was
25 % below the measured peak of Megatron-LM's CI case
``gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_no_mtp_no_a2a_ovlp_fine_grained_offloading`` (H100).
"""

from __future__ import annotations

__all__ = ["optimizer_offload"]


def optimizer_offload(n_params: int, master: int, moments: int, fraction: float) -> tuple[int, int, int]:
    """(GPU optimizer bytes, pinned host bytes, pageable host bytes) of ``n_params`` parameters; ``master`` is 4
    for bf16/fp16 weights (the GPU part's fp32 copy) and 0 for fp32 weights."""
    off = int(round(n_params * fraction))
    on = n_params - off
    return on * (master + moments), off * 8, off * moments
