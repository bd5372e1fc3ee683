"""Communication buffers outside PyTorch's allocator (estimator/features/comm_buffers.py), by hand: they add to
the device figure, not to the allocated one."""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from tests.conftest import make_config

H, F, V, L, T = 1024, 4096, 32000, 4, 2048
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)
MOE = {**MODEL, "num_experts": 8, "moe_router_topk": 2}


def est(model=MODEL, parallelism=None, training=None, precision=None):
    tr = {"seq_length": T, "world_size": 8}
    tr.update(training or {})
    return estimate(make_config(model, parallelism, tr, precision)).stages[0]


def test_tp_overlap_userbuffers():
    """Twelve buffers of [T, h] = [2048, 1024]: bf16 12 x 2 B x 2,097,152 = 50,331,648 outside the allocator; FP8
    run: the eight all-gather buffers in 1 B, the four reduce-scatter ones in 2 B, 16 x 2,097,152 = 33,554,432.
    Inside the allocator, the overlapped GEMMs' cuBLAS workspace: 3 x (32 MiB + 1 KiB) = 3 x 33,555,456 =
    100,666,368 (Transformer Engine's get_cublas_workspace with ub, _NUM_MAX_UB_STREAMS = 3)."""
    par = {"tensor_model_parallel_size": 2, "tp_comm_overlap": True}
    base = est(parallelism={"tensor_model_parallel_size": 2}, training={"sequence_parallel": True})
    s = est(parallelism=par, training={"sequence_parallel": True})
    assert s.outside_allocator == {"tp_comm_overlap_userbuffers": 50_331_648}
    assert s.allocated_bytes == base.allocated_bytes + 100_666_368
    assert s.transient["workspaces"] == base.transient["workspaces"] + 100_666_368
    assert s.device_bytes - s.reserved_bytes == base.device_bytes - base.reserved_bytes + 50_331_648
    s = est(parallelism=par, training={"sequence_parallel": True}, precision={"fp8": True})
    assert s.outside_allocator["tp_comm_overlap_userbuffers"] == 16 * T * H


def test_deepep_buffer_for_eight_ranks():
    """EP 8, 20 SMs -> 10 channels, 8 NVLink ranks, 1 RDMA rank, hidden 2h = 2048 B. Per received token
    2048 + 8 (source meta) + 128 x 8 (top-k indices) + 128 x 4 (weights) + 128 x 4 (scales) = 4104 B; dispatch and
    combine both receive 256 tokens per channel: 10 x 8 x ((2 + 3) x 4 + 256 x 4104) = 84,051,520, rounded up to
    a multiple of 128: 84,051,584. No RDMA buffer within 8 ranks."""
    s = est(MOE, {"expert_model_parallel_size": 8}, {"sequence_parallel": False})
    f = est({**MOE, "moe_token_dispatcher_type": "flex"}, {"expert_model_parallel_size": 8})
    assert f.outside_allocator == {"deepep_buffers": 84_051_584}
    assert f.device_bytes - s.device_bytes == 84_051_584


def test_hybridep_buffers():
    """EP 8, 2048 tokens per rank: M = 8 x 2048 = 16,384 rows for the worst case; tokens M x h x 2 B =
    33,554,432, probabilities M x (1 local expert x 8 ranks) x 4 B = 524,288, FP8 scales M x h/128 x 4 B =
    524,288: 34,603,008."""
    f = est({**MOE, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
             "moe_router_dtype": "fp32"}, {"expert_model_parallel_size": 8})
    assert f.outside_allocator == {"hybridep_buffers": 34_603_008}


def test_nccl_ub_buffers_have_no_allocator_reserve():
    """With NCCL user buffers the gradient and parameter buffers sit in NCCL's pool: the 5 % reserve applies
    to the rest only."""
    base = est()
    s = est(parallelism={"nccl_ub": True})
    assert s.allocated_bytes == base.allocated_bytes
    assert s.reserved_bytes == s.allocated_bytes + int(0.05 * (s.allocated_bytes - s.gradients_bytes - s.weights_bytes))


def test_comm_rules():
    with pytest.raises(ConfigError, match="sequence_parallel"):
        est(parallelism={"tensor_model_parallel_size": 2, "tp_comm_overlap": True})
    with pytest.raises(ConfigError, match="DeepEP supports"):
        est({**MOE, "moe_token_dispatcher_type": "flex", "num_experts": 6}, {"expert_model_parallel_size": 6},
            {"world_size": 6})


def test_hybridep_with_a_bf16_router():
    """Megatron-Core does not require moe_router_dtype fp32 for HybridEP (NVIDIA/Megatron-LM @ d98e8a64
    megatron/core/transformer/moe/token_dispatcher.py, the HybridEP dispatch: bf16 probabilities get a warning
    and a cast to fp32), so the configuration is accepted (it was refused before, which kept Megatron-Bridge's
    Qwen3-30B-A3B HybridEP recipe out). The buffers do not depend on the router dtype (34,603,008 B, as above);
    with the z-loss the router keeps its logits (logsumexp's input) in bf16 instead of fp32: (4 - 2) B x 2048
    tokens x (8 experts + 1 logsumexp output) = 36,864 B less per layer, x 4 layers x 1 micro-batch in flight
    = 147,456 B."""
    hyb = {**MOE, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
           "moe_z_loss_coeff": 1e-3}
    bf16 = est(hyb, {"expert_model_parallel_size": 8})
    fp32 = est({**hyb, "moe_router_dtype": "fp32"}, {"expert_model_parallel_size": 8})
    assert bf16.outside_allocator == fp32.outside_allocator == {"hybridep_buffers": 34_603_008}
    assert fp32.activations_bytes - bf16.activations_bytes == 147_456
