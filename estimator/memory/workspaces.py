"""Buffers held for the whole run, inside PyTorch's allocator: GEMM workspaces and Megatron's global buffer.

These buffers are allocated through PyTorch's caching allocator on first use and never freed, so they
are part of ``torch.cuda.memory_allocated()`` after every step (not only at the peak).

GEMM workspaces:

- Transformer Engine's cuBLASLt workspace, one per device: 32 MiB + 1 KiB on Hopper and newer
  (``get_cublas_workspace_size_bytes`` in TransformerEngine ``transformer_engine/pytorch/cpp_extensions/
  gemm.py``: "32 MiB for NVFP4 GEMM, plus additional 1024 B for alignment and misc scales").
- For Transformer Engine's grouped GEMM (MoE experts with ``moe_grouped_gemm``), one more such workspace
  per compute stream: 4 streams (``num_compute_streams`` in ``transformer_engine/common/util/
  multi_stream.cpp``).
- With TP communication overlap (``tp_comm_overlap``), the GEMMs that run on a userbuffer take another one,
  three times that size (``get_cublas_workspace(device, ub=True, ...)``: ``get_cublas_workspace_size_bytes() *
  _NUM_MAX_UB_STREAMS``, _NUM_MAX_UB_STREAMS = 3, cached for the run; TransformerEngine @ d0067d0d), beside the
  plain one the other GEMMs (the proj/fc2 weight gradients) use.
- PyTorch's own cuBLAS workspace, one per (cuBLAS handle, CUDA stream) pair (``cublas_handle_stream_to_
  workspace`` in ``aten/src/ATen/cuda/CublasHandlePool.cpp``): 32 MiB on Hopper (``:4096:8``, also what
  Megatron-LM's deterministic CI sets through ``CUBLAS_WORKSPACE_CONFIG``). Handles are per thread and
  autograd runs the backward pass on its own device thread, so a training step uses two: one for the
  forward matmuls (the output layer, core attention of the local implementation) and one for their
  backward.

Hopper sizes are used throughout. On other GPUs PyTorch's default workspace is 8 MiB + 128 KiB (unless
``CUBLAS_WORKSPACE_CONFIG`` says otherwise), so the estimate is 47.75 MiB high on Blackwell without that
variable, and Transformer Engine's workspace is 4 MiB before Hopper.

Megatron-Core's global memory buffer (``GlobalMemoryBuffer`` in ``megatron/core/utils.py``): one tensor per
name and dtype, grown to the largest request and kept. Under the name "mpu" it serves, in the activation
dtype (B bytes):

- the attention scores of the local (non-Transformer-Engine) implementation's ``DotProductAttention``:
  B * b * (a/t) * s * s;
- the sequence-parallel all-gather of Megatron's own linear layers (``tensor_parallel/layers.py``): every
  linear layer of the local implementation, the output layer with Transformer Engine, and the LoRA-A projections
  of Megatron-Bridge's ``sequence_parallel_input_regather`` on every stage (estimator/memory/features/peft.py):
  B * T * h, with T = s*b/cp tokens;
- the all-gather dispatcher's gathered tokens in MoE layers (``token_dispatcher.py``), over the
  tensor x expert parallel group: B * T/t_sp * t * ep * h.
"""

from __future__ import annotations

from ..model.resolve import Resolved

__all__ = ["TE_GEMM_WORKSPACE_BYTES", "TE_GROUPED_GEMM_STREAMS", "TE_UB_STREAMS", "TORCH_CUBLAS_WORKSPACE_BYTES",
           "TORCH_CUBLAS_HANDLES", "global_buffer_bytes", "workspace_bytes"]

MIB = 2 ** 20

#: Transformer Engine's cuBLASLt workspace on Hopper and newer: 32 MiB + 1 KiB.
TE_GEMM_WORKSPACE_BYTES = 32 * MIB + 1024

#: Transformer Engine's ``_NUM_MAX_UB_STREAMS``: the userbuffer GEMMs' workspace is this many plain ones.
TE_UB_STREAMS = 3

#: Compute streams of Transformer Engine's grouped GEMM, each with its own workspace.
TE_GROUPED_GEMM_STREAMS = 4

#: PyTorch's cuBLAS workspace per (handle, stream) on Hopper: 4096 KiB x 8.
TORCH_CUBLAS_WORKSPACE_BYTES = 32 * MIB

#: cuBLAS handles a training step uses: the main thread's (forward) and autograd's device thread's (backward).
TORCH_CUBLAS_HANDLES = 2


def workspace_bytes(r: Resolved, has_moe_layers: bool) -> int:
    """GEMM workspaces held for the whole run on one GPU of a stage (with MoE layers or not)."""
    cfg = r.cfg
    total = TORCH_CUBLAS_HANDLES * TORCH_CUBLAS_WORKSPACE_BYTES
    if cfg.training.transformer_impl == "transformer_engine":
        total += TE_GEMM_WORKSPACE_BYTES
        if has_moe_layers and cfg.model.moe_grouped_gemm:
            total += TE_GROUPED_GEMM_STREAMS * TE_GEMM_WORKSPACE_BYTES
        if cfg.parallelism.tp_comm_overlap:
            total += TE_UB_STREAMS * TE_GEMM_WORKSPACE_BYTES
    return total


def global_buffer_bytes(r: Resolved, has_moe_layers: bool, last: bool) -> int:
    """Megatron-Core's "mpu" global buffer on one GPU of a stage: its largest user."""
    cfg = r.cfg
    B = 4 if cfg.precision.params_dtype == "fp32" else 2
    local = cfg.training.transformer_impl == "local"
    T = r.s * r.b // r.cp
    uses = [0]
    if local:
        uses.append(B * r.b * (r.a // r.t) * r.s * r.s)
    from .features.peft import regathered
    if r.sp and (local or last or (cfg.training.peft and regathered(r))):
        uses.append(B * T * r.h)
    if has_moe_layers and cfg.model.moe_token_dispatcher_type == "allgather" and r.t * r.ep > 1:
        tokens = T // r.t if r.sp else T
        uses.append(B * tokens * r.t * r.ep * r.h)
    return max(uses)
