"""Communication buffers outside PyTorch's allocator (estimator/memory/features/comm_buffers.py), by hand: they add to
the device figure, not to the allocated one."""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.config.limits import hybridep_tokens
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


def test_deepep_buffer_moves_latent_rows():
    """With moe_latent_size 512 the dispatched rows are 512 wide (Megatron-LM @ d98e8a64 moe/moe_layer.py runs
    fc1_latent_proj before the dispatch; moe/fused_a2a.py sizes the buffer from the dispatched tensor,
    get_hidden_bytes): hidden 2 x 512 = 1024 B, per received token 1024 + 8 + 1024 + 512 + 512 = 3080 B;
    10 channels x 8 ranks x ((2 + 3) x 4 + 256 x 3080 = 788,500) = 63,080,000, rounded up to 128: 63,080,064."""
    f = est({**MOE, "moe_token_dispatcher_type": "flex", "moe_latent_size": 512}, {"expert_model_parallel_size": 8})
    assert f.outside_allocator == {"deepep_buffers": 63_080_064}


HYB = {**MOE, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}


def test_hybridep_buffers_in_one_nvlink_domain():
    """EP 8 (G = 8 ranks, one NVLink domain of L = 8), h = 1024, 1 local expert of 8, T = 2048 tokens per rank
    (deepseek-ai/DeepEP @ 34152ae, csrc/hybrid_ep/buffer/intranode.cu and extension/allgather.cu), worst case
    M = 8 x 2048 = 16,384 rows:
    tokens M x h x 2 B = 33,554,432; probabilities M x (1 expert x 8 ranks) x 4 B = 524,288; FP8 scales
    M x 1024/128 x 4 B = 524,288; the gathered routing map (8 experts) x 2048 tokens x 8 ranks x 1 B = 131,072;
    flags: chunk flags 2 x (2048/64 = 32 chunks) x 8 ranks x 4 B = 2,048, scan scratch 108 blocks x (8 + 1) x 8 B
    = 7,776, counters 2 x (8 + 4 + 4) + 2 x 8 = 48, probe 512, the all-gather's flags 3 x 8 and peer table 8 x 8
    = 88: 10,472.
    Total 33,554,432 + 524,288 + 524,288 + 131,072 + 10,472 = 34,744,552 B.
    With moe_latent_size 512 the dispatcher moves latent rows (Megatron-LM @ d98e8a64 moe/moe_layer.py: the
    fc1_latent_proj runs before the dispatch): tokens 16,384 x 512 x 2 = 16,777,216, scales 16,384 x 4 x 4 =
    262,144, the rest as above: 16,777,216 + 524,288 + 262,144 + 131,072 + 10,472 = 17,705,192 B."""
    base = est({**MOE, "moe_router_dtype": "fp32"}, {"expert_model_parallel_size": 8})
    f = est({**HYB, "moe_router_dtype": "fp32"}, {"expert_model_parallel_size": 8})
    assert f.outside_allocator == {"hybridep_buffers": 34_744_552}
    assert f.device_bytes - base.device_bytes == 34_744_552       # outside the allocator: the device figure only
    f = est({**HYB, "moe_latent_size": 512}, {"expert_model_parallel_size": 8})
    assert f.outside_allocator == {"hybridep_buffers": 17_705_192}


def test_hybridep_buffers_across_two_nvlink_domains():
    """EP 16 with 16 experts (1 local), G = 16 ranks in N = 2 domains of L = 8 (the default, eight GPUs per
    host), h = 1024, T = 2048 tokens per rank, 8 SMs (HybridEP's default across domains), M = 16 x 2048 = 32,768.
    NVLink (intranode.cu, allgather.cu): tokens 32,768 x 1024 x 2 = 67,108,864; probabilities 32,768 x 1 x 8 x 4
    = 1,048,576; scales 32,768 x 8 x 4 = 1,048,576; routing map 16 experts x 2048 x 16 = 524,288; flags
    2 x 32 x 16 x 4 = 4,096 + 108 x 9 x 8 = 7,776 + 48 + 512 = 12,432 (no all-gather flags across domains).
    RDMA (internode.cu RDMACoordinator::allocate_dispatch_buffers / allocate_combine_buffers), one remote domain:
    tokens: send copy 2048 x 1024 x 2 = 4,194,304, receive slot 4,194,304, two combine staging areas 8,388,608:
    16,777,216; probabilities 2048 x 16 x 4 = 131,072 + 3 x 2048 x 8 x 4 = 196,608: 327,680; scales 2 x 2048 x 8
    x 4 = 131,072; flags 4 x (32 + 2) x 8 + 2 x 8 = 1,104.
    Queue pairs (DOCA GPUNetIO, NVIDIA/nccl @ 1e0c869c doca_gpu_verbs_create_qp_hl): 8 for dispatch with
    3 x 2048 + 1 = 6145 -> 8192 entries, each a 64 B send ring and a 64 B completion ring 8192 x 128 = 1,048,576
    + 7 pages 28,672 + descriptor 280 + pointer 8 + memory-region table 96 = 1,077,632; 8 for combine with
    2 x 2048 + 1 = 4097 -> 8192 entries: 1,048,576 + 28,672 + 280 + 8 + 72 = 1,077,608; 8 x 1,077,632 +
    8 x 1,077,608 = 17,241,920.
    NVLink 67,108,864 + 1,048,576 + 1,048,576 + 524,288 + 12,432 = 69,742,736; RDMA 16,777,216 + 327,680 +
    131,072 + 1,104 + 17,241,920 = 34,478,992; total 104,221,728 B.
    With moe_hybridep_ranks_per_nvlink_domain 16 (a 16-GPU NVLink domain) no RDMA part: probabilities
    32,768 x 16 x 4 = 2,097,152, flags 4,096 + 108 x 17 x 8 = 14,688 + 48 + 512 + 24 + 16 x 8 = 19,496:
    67,108,864 + 2,097,152 + 1,048,576 + 524,288 + 19,496 = 70,798,376 B."""
    par, tr = {"expert_model_parallel_size": 16}, {"world_size": 16}
    f = est({**HYB, "num_experts": 16}, par, tr)
    assert f.outside_allocator == {"hybridep_buffers": 104_221_728}
    f = est({**HYB, "num_experts": 16, "moe_hybridep_ranks_per_nvlink_domain": 16}, par, tr)
    assert f.outside_allocator == {"hybridep_buffers": 70_798_376}


def test_hybridep_queue_pairs_follow_the_sm_count():
    """32 SMs instead of 8 (Megatron-Bridge's perf recipes: moe_hybridep_num_sms 32, which Megatron-Core routes to
    moe_flex_dispatcher_num_sms): 24 more queue pairs each way, 24 x (1,077,632 + 1,077,608) = 51,725,760 B more
    than the 104,221,728 above."""
    f = est({**HYB, "num_experts": 16, "moe_flex_dispatcher_num_sms": 32}, {"expert_model_parallel_size": 16},
            {"world_size": 16})
    assert f.outside_allocator == {"hybridep_buffers": 104_221_728 + 51_725_760}


def test_hybridep_token_count():
    """HybridEP sizes for at least 512 tokens per rank (Configurer) and rounds the count up to 16
    (update_template_config)."""
    assert [hybridep_tokens(n) for n in (1, 100, 512, 1000, 2048)] == [512, 512, 512, 1008, 2048]


def test_hybridep_rules():
    """What HybridEP itself refuses (deepseek-ai/DeepEP @ 34152ae): a group that is not whole NVLink domains,
    more than 33 domains, more than 21,840 tokens per rank across domains (3T + 1 < 65,536)."""
    with pytest.raises(ConfigError, match="whole NVLink domains of 8"):
        est({**HYB, "num_experts": 12}, {"expert_model_parallel_size": 12}, {"world_size": 12})
    with pytest.raises(ConfigError, match="moe_hybridep_ranks_per_nvlink_domain"):
        est({**HYB, "num_experts": 16, "moe_hybridep_ranks_per_nvlink_domain": 3}, {"expert_model_parallel_size": 16},
            {"world_size": 16})
    with pytest.raises(ConfigError, match="at most 33 NVLink domains"):
        est({**HYB, "num_experts": 34, "moe_hybridep_ranks_per_nvlink_domain": 1},
            {"expert_model_parallel_size": 34}, {"world_size": 34})
    long = {**HYB, "num_experts": 16, "max_position_embeddings": 32768}
    with pytest.raises(ConfigError, match="21,840 tokens per rank"):
        est(long, {"expert_model_parallel_size": 16}, {"world_size": 16, "seq_length": 32768})
    est({**long, "moe_hybridep_ranks_per_nvlink_domain": 16}, {"expert_model_parallel_size": 16},
        {"world_size": 16, "seq_length": 32768})          # one domain: no RDMA queue
    with pytest.raises(ConfigError, match="applies only with"):
        est({**MOE, "moe_token_dispatcher_type": "flex", "moe_hybridep_ranks_per_nvlink_domain": 8},
            {"expert_model_parallel_size": 8})


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
    Qwen3-30B-A3B HybridEP recipe out). The buffers do not depend on the router dtype (34,744,552 B, as above);
    with the z-loss the router keeps its logits (logsumexp's input) in bf16 instead of fp32: (4 - 2) B x 2048
    tokens x (8 experts + 1 logsumexp output) = 36,864 B less per layer, x 4 layers x 1 micro-batch in flight
    = 147,456 B."""
    hyb = {**MOE, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
           "moe_z_loss_coeff": 1e-3}
    bf16 = est(hyb, {"expert_model_parallel_size": 8})
    fp32 = est({**hyb, "moe_router_dtype": "fp32"}, {"expert_model_parallel_size": 8})
    assert bf16.outside_allocator == fp32.outside_allocator == {"hybridep_buffers": 34_744_552}
    assert fp32.activations_bytes - bf16.activations_bytes == 147_456
