"""Communication buffers allocated outside PyTorch's caching allocator: device bytes that
``torch.cuda.max_memory_allocated()`` does not see but the GPU must hold.

Tensor-parallel communication overlap (Megatron-LM @ d98e8a64 ``megatron/training/initialize.py``
``_initialize_tp_communicators``; Transformer Engine @ d0067d0d ``transformer_engine/pytorch/module/base.py``
``initialize_ub`` and ``common/comm_gemm_overlap/comm_gemm_overlap.cpp``): one userbuffer for each of the twelve
overlapped GEMMs, registered with ``register_user_buffer_collective``, GEMM by GEMM in :mod:`.userbuffers`. With
the default configuration each is [S, h] with S = seq_length * micro_batch_size / CP; the eight all-gather
buffers hold FP8 (1 B) in an FP8 run, the four reduce-scatter buffers bf16 (Transformer Engine's default dtype,
which Megatron does not override):

    bf16: 12 * S * h * 2 B        FP8: (8 * 1 + 4 * 2) * S * h B        (+ a bf16 set with first_last_layers_bf16)

A custom configuration (``tp_comm_overlap_cfg``) changes the methods: a ring-exchange reduce-scatter holds
2 TP - 1 chunks of [S/TP, h] instead of [S, h].

DeepEP (flex dispatcher, ``moe_flex_dispatcher_backend: deepep``; Megatron-Core ``moe/fused_a2a.py``
``get_buffer``; DeepEP ``csrc/legacy/config.hpp`` ``get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint``
and ``deep_ep/buffers/legacy.py`` ``get_dispatch_config`` / ``get_combine_config``): over the expert-parallel x
expert-tensor-parallel group of G ranks, with c = num_sms / 2 channels (20 SMs unless set), hidden bytes
H = 2h, k = 128 top-k slots and 128 scales:

    NVLink  c * min(G, 8) * [ (2*R + 3)*4 + recv_nvl * (H + 8 + k*8 + k*4 + 128*4) ]       R = max(G / 8, 1)
    RDMA    c * R * [ 18*2*4 + 2*recv_rdma * (H + 8 + k*8 + k*4 + 128*4 + 16) ]           (G > 8 only)

the larger of the dispatch and the combine configuration, each rounded up to 128 bytes.

HybridEP (``moe_flex_dispatcher_backend: hybridep``; DeepEP branch hybrid-ep ``csrc/hybrid_ep/buffer/
intranode.cu``): buffers sized for the worst case of every token of the group reaching one rank, M = tokens
per rank * G: the token buffer M * h * 2 B (shared by dispatch and combine), routing probabilities
M * (local experts * ranks per NVLink domain) * 4 B and FP8 scaling factors M * h/128 * 4 B. The RDMA staging
buffers of a multi-node HybridEP group are not counted (a lower bound there).
"""

from __future__ import annotations

from . import userbuffers

__all__ = ["deepep_bytes", "hybridep_bytes", "tp_overlap_bytes", "DEEPEP_GROUP_SIZES"]

_K = 128            # DeepEP's kNumMaxTopK and kNumMaxScales
_NVL_PEERS = 8      # DeepEP's NUM_MAX_NVL_PEERS
_META = 8           # sizeof(SourceMeta)
_TOPK_IDX = 8       # topk_idx_t is int64 by default

#: DeepEP's recommended (nvl_send, nvl_recv, rdma_send, rdma_recv) chunk sizes by group size: (dispatch, combine).
_CONFIGS = {
    2: ((24, 256, 6, 128), (10, 256, 6, 128)), 4: ((6, 256, 6, 128), (9, 256, 6, 128)),
    8: ((6, 256, 6, 128), (4, 256, 6, 128)), 16: ((36, 288, 20, 128), (4, 288, 12, 128)),
    24: ((32, 288, 8, 128), (1, 288, 8, 128)), 32: ((32, 288, 8, 128), (1, 288, 8, 128)),
    48: ((32, 288, 8, 128), (1, 288, 8, 128)), 64: ((32, 288, 8, 128), (1, 288, 8, 128)),
    96: ((20, 480, 12, 128), (1, 480, 8, 128)), 128: ((20, 560, 12, 128), (1, 560, 8, 128)),
    144: ((32, 720, 12, 128), (2, 720, 8, 128)), 160: ((28, 720, 12, 128), (2, 720, 8, 128)),
}
DEEPEP_GROUP_SIZES = tuple(sorted(_CONFIGS))


def _round128(n: int) -> int:
    return -(-n // 128) * 128


def tp_overlap_bytes(r) -> int:
    """Transformer Engine's TP-overlap userbuffers on one GPU (0 without ``tp_comm_overlap``)."""
    return userbuffers.tp_overlap_bytes(r)


def deepep_bytes(r) -> int:
    """DeepEP's NVLink and RDMA buffers on one GPU (normal, high-throughput mode)."""
    G = r.ep * r.etp
    if G <= 1:
        return 0
    channels = (r.cfg.model.moe_flex_dispatcher_num_sms or 20) // 2
    hidden = 2 * r.h
    per_token = hidden + _META + _K * _TOPK_IDX + _K * 4 + _K * 4
    rdma_ranks = max(G // _NVL_PEERS, 1)
    nvl_ranks = min(G, _NVL_PEERS)
    nvl = rdma = 0
    for _, nvl_recv, rdma_send, rdma_recv in _CONFIGS[G]:
        nvl = max(nvl, _round128(channels * nvl_ranks * ((2 * rdma_ranks + 3) * 4 + nvl_recv * per_token)))
        if G > _NVL_PEERS:
            recv = -(-rdma_recv // rdma_send) * rdma_send
            rdma = max(rdma, _round128(channels * rdma_ranks * ((_NVL_PEERS * 2 + 2) * 2 * 4
                                                                + 2 * recv * (per_token + 16))))
    return nvl + rdma


def hybridep_bytes(r) -> int:
    """HybridEP's NVLink-domain buffers on one GPU."""
    G = r.ep * r.etp
    if G <= 1:
        return 0
    tokens = r.s * r.b // r.cp // (r.t if r.sp else 1)
    M = -(-tokens * G // 4) * 4
    local_experts = r.E // r.ep
    per_node = min(G, _NVL_PEERS)
    return M * r.h * 2 + M * local_experts * per_node * 4 + M * (r.h // 128) * 4
