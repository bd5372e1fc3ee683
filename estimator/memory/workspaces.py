"""Buffers held for the whole run, inside PyTorch's allocator: GEMM workspaces and Megatron's global buffer.

These buffers are allocated through PyTorch's caching allocator on first use and never freed, so they
are part of ``torch.cuda.memory_allocated()`` after every step (not only at the peak).

GEMM workspaces, whose sizes depend on the GPU architecture (``training.gpu_arch``: the GPU named, else Hopper):

- Transformer Engine's cuBLASLt workspace, one per device: 32 MiB + 1 KiB from compute capability 9.0 on
  (Hopper, Blackwell; "32 MiB for NVFP4 GEMM, plus additional 1024 B for alignment and misc scales"), 4 MiB before
  (``get_cublas_workspace_size_bytes`` in TransformerEngine @ d0067d0d : transformer_engine/pytorch/cpp_extensions/
  gemm.py, which tests ``major >= 9``; AMD targets report major 9 and take the same, as far as ROCm's fork keeps it).
- For Transformer Engine's grouped GEMM (MoE experts with ``moe_grouped_gemm``), one more such workspace
  per compute stream: 4 streams (``num_compute_streams`` in ``transformer_engine/common/util/
  multi_stream.cpp``).
- With TP communication overlap (``tp_comm_overlap``), the GEMMs that run on a userbuffer take another one,
  three times that size (``get_cublas_workspace(device, ub=True, ...)``: ``get_cublas_workspace_size_bytes() *
  _NUM_MAX_UB_STREAMS``, _NUM_MAX_UB_STREAMS = 3, cached for the run; TransformerEngine @ d0067d0d), beside the
  plain one the other GEMMs (the proj/fc2 weight gradients) use.
- PyTorch's own cuBLAS workspace, one per (cuBLAS handle, CUDA stream) pair (``cublas_handle_stream_to_
  workspace`` in pytorch/pytorch @ 26a3905 : aten/src/ATen/cuda/CublasHandlePool.cpp, ``parseChosenWorkspaceSize``
  when ``CUBLAS_WORKSPACE_CONFIG`` is unset): 32 MiB (``:4096:8``) on Hopper and Blackwell, compute capability 9.x to
  12.x, 8 MiB + 128 KiB (``:4096:2:16:8``) on the NVIDIA GPUs before them (A100, L40S), and 128 MiB on AMD
  gfx94x/gfx95x (MI300X, MI325X, MI355X). PyTorch gave 32 MiB to sm_90 alone until pytorch/pytorch PR #175344
  (merged 2026-02-19, after 2.10's release: major 9, 10 or 12; PR #189312, 2026-07, added 11); Megatron-LM's GB200
  goldens show the step between NGC's PyTorch containers 26.02 and 26.04 (validation/megatron_ci.py
  ``BLACKWELL_32MIB_CUBLAS``). On an
  older PyTorch a Blackwell GPU has ``:4096:2:16:8``: give that as ``training.cublas_workspace_config`` (47.75 MiB
  less).
  ``CUBLAS_WORKSPACE_CONFIG`` (``training.cublas_workspace_config``) sets it on every GPU: SIZE KiB x COUNT summed
  over its ``:SIZE:COUNT`` pairs, so ``:4096:8`` is 32 MiB on any GPU (172 of Megatron-LM's 239 CI memory goldens
  set it; so do Megatron-Bridge's Llama 3 H100 recipes) and ``:16:8`` 128 KiB. ``training.deterministic_mode`` sets
  ``:4096:8`` when it is unset (Megatron-LM @ d98e8a64 : megatron/training/determinism.py
  ``DETERMINISM_ENV_VAR_DEFAULTS``, applied by arguments.py under ``--deterministic-mode``). Handles are per thread
  and autograd runs the backward pass on its own device thread, so a training step uses two: one for the forward
  matmuls (the output layer, core attention of the local implementation) and one for their backward.

PyTorch's separate cuBLASLt workspace (1 MiB by default, ``CUBLASLT_WORKSPACE_SIZE``; hipBLASLt's 76 MiB on ROCm) is
not counted.

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

from ..config.derived import compute_capability, cublas_workspace_config_bytes, gpu_arch, is_amd
from ..model.resolve import Resolved

__all__ = ["TE_GEMM_WORKSPACE_BYTES", "TE_GEMM_WORKSPACE_BYTES_PRE_HOPPER", "TE_GROUPED_GEMM_STREAMS",
           "TE_UB_STREAMS", "TORCH_CUBLAS_32MIB_MAJORS", "TORCH_CUBLAS_HANDLES", "TORCH_CUBLAS_WORKSPACE_BYTES",
           "TORCH_CUBLAS_WORKSPACE_BYTES_GFX94_95", "TORCH_CUBLAS_WORKSPACE_BYTES_OTHER", "global_buffer_bytes",
           "te_gemm_workspace", "torch_cublas_workspace", "workspace_bytes"]

MIB = 2 ** 20
KIB = 2 ** 10

#: Transformer Engine's cuBLASLt workspace from compute capability 9.0 on (Hopper, Blackwell): 32 MiB + 1 KiB.
TE_GEMM_WORKSPACE_BYTES = 32 * MIB + 1024
#: The same before Hopper (A100, L40S): 4 MiB.
TE_GEMM_WORKSPACE_BYTES_PRE_HOPPER = 4 * MIB

#: Transformer Engine's ``_NUM_MAX_UB_STREAMS``: the userbuffer GEMMs' workspace is this many plain ones.
TE_UB_STREAMS = 3

#: Compute streams of Transformer Engine's grouped GEMM, each with its own workspace.
TE_GROUPED_GEMM_STREAMS = 4

#: PyTorch's cuBLAS workspace per (handle, stream) on Hopper and Blackwell (compute capability 9.x to 12.x):
#: 4096 KiB x 8.
TORCH_CUBLAS_WORKSPACE_BYTES = 32 * MIB
#: Compute capability majors that take it (PyTorch PRs #175344 and #189312).
TORCH_CUBLAS_32MIB_MAJORS = (9, 10, 11, 12)
#: The same on the NVIDIA GPUs before Hopper (A100, L40S): 4096 KiB x 2 + 16 KiB x 8.
TORCH_CUBLAS_WORKSPACE_BYTES_OTHER = 4096 * KIB * 2 + 16 * KIB * 8
#: The same on AMD gfx94x/gfx95x (hipBLAS): 128 MiB.
TORCH_CUBLAS_WORKSPACE_BYTES_GFX94_95 = 128 * MIB

#: cuBLAS handles a training step uses: the main thread's (forward) and autograd's device thread's (backward).
TORCH_CUBLAS_HANDLES = 2


def te_gemm_workspace(arch: str) -> int:
    """Transformer Engine's cuBLASLt workspace on a GPU of architecture ``arch`` (a ``training.gpu_arch`` name)."""
    return TE_GEMM_WORKSPACE_BYTES if compute_capability(arch)[0] >= 9 else TE_GEMM_WORKSPACE_BYTES_PRE_HOPPER


def torch_cublas_workspace(arch: str, deterministic: bool = False, config: str = "") -> int:
    """PyTorch's cuBLAS workspace per (handle, stream) on a GPU of architecture ``arch`` under
    ``CUBLAS_WORKSPACE_CONFIG`` ``config`` (a validated ``training.cublas_workspace_config``; empty: unset, then
    ``:4096:8`` under Megatron-LM's deterministic mode, ``deterministic``, else the GPU's default)."""
    chosen = cublas_workspace_config_bytes(config)
    if chosen is not None:
        return chosen
    if deterministic:
        return TORCH_CUBLAS_WORKSPACE_BYTES
    if is_amd(arch):
        return TORCH_CUBLAS_WORKSPACE_BYTES_GFX94_95
    if compute_capability(arch)[0] in TORCH_CUBLAS_32MIB_MAJORS:
        return TORCH_CUBLAS_WORKSPACE_BYTES
    return TORCH_CUBLAS_WORKSPACE_BYTES_OTHER


def workspace_bytes(r: Resolved, has_moe_layers: bool) -> int:
    """GEMM workspaces held for the whole run on one GPU of a stage (with MoE layers or not)."""
    cfg = r.cfg
    arch = gpu_arch(cfg)
    total = TORCH_CUBLAS_HANDLES * torch_cublas_workspace(arch, cfg.training.deterministic_mode,
                                                          cfg.training.cublas_workspace_config)
    if cfg.training.transformer_impl == "transformer_engine":
        te = te_gemm_workspace(arch)
        total += te
        if has_moe_layers and cfg.model.moe_grouped_gemm:
            total += TE_GROUPED_GEMM_STREAMS * te
        if cfg.parallelism.tp_comm_overlap:
            total += TE_UB_STREAMS * te
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
