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

Fine-grained activation offloading (``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``,
docs/user-guide/features/fine_grained_activation_offloading.md): the tensors each module in ``offload_modules``
saves for its backward go to pinned host buffers, for every layer and in-flight micro-batch; the last layer's
groups stay (they are reloaded at once), and ``activation_offload_fraction`` keeps only the first fraction of
the groups in forward order. Module -> saved tensors (Transformer Engine layers):

    attn_norm   the attention norm's input, when the norm is a module of its own (local layers)
    qkv_linear  the fused norm + QKV linear's saved tensors: norm input and output (MLA: and the latents)
    core_attn   q, k, v, the attention output and the softmax statistics (unfused: the scores)
    attn_proj   the output projection's input (the attention output) and its FP8 copy
    mlp_norm    the pre-MLP norm's input, where it is a module of its own (MoE layers; local layers)
    expert_fc1  the routed experts' fc1 input
    moe_act     the routed experts' fc1 output (the activation's input)
"""

from __future__ import annotations

__all__ = ["offloaded_parts", "optimizer_offload"]


def optimizer_offload(n_params: int, master: int, moments: int, fraction: float) -> tuple[int, int, int]:
    """(GPU optimizer bytes, pinned host bytes, pageable host bytes) of ``n_params`` parameters; ``master`` is 4
    for bf16/fp16 weights (the GPU part's fp32 copy) and 0 for fp32 weights."""
    off = int(round(n_params * fraction))
    on = n_params - off
    return on * (master + moments), off * 8, off * moments


def offloaded_parts(r, moe: bool, parts: dict) -> int:
    """Bytes of one layer's saved tensors that fine-grained offloading moves to the host, one micro-batch."""
    mods = set(r.cfg.training.offload_modules or ())
    local = r.cfg.training.transformer_impl == "local"
    n = 0
    if "attn_norm" in mods and local:
        n += parts["norm_in"]
    if "qkv_linear" in mods:
        n += (0 if local else parts["norm_in"]) + parts["norm_out"] + parts.get("latent", 0)
    if "core_attn" in mods:
        n += parts["qkv"] + parts["attn_out"] + parts["lse"] + parts["scores"]
    if "attn_proj" in mods:
        n += (0 if "core_attn" in mods else parts["attn_out"]) + parts["proj_in_fp8"]
    if "mlp_norm" in mods and (moe or local):
        n += parts["mlp_norm_in"]
    if moe:
        if "expert_fc1" in mods:
            n += parts["expert_in"]
        if "moe_act" in mods:
            n += parts["expert_fc1_out"]
    return n
