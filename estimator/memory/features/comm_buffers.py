"""Communication buffers allocated outside PyTorch's caching allocator: device bytes that
``torch.cuda.max_memory_allocated()`` does not see but the GPU must hold.

Tensor-parallel communication overlap (Megatron-LM @ d98e8a64 ``megatron/training/initialize.py``
``_initialize_tp_communicators``; Transformer Engine @ d0067d0d ``transformer_engine/pytorch/module/base.py``
``initialize_ub`` and ``common/comm_gemm_overlap/comm_gemm_overlap.cpp``): one userbuffer for each of the twelve
overlapped GEMMs, registered with ``register_user_buffer_collective``, GEMM by GEMM in :mod:`estimator.config.tp_overlap`. With
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
H = 2h (2 x the latent width with ``moe_latent_size``), k = 128 top-k slots and 128 scales:

    NVLink  c * min(G, 8) * [ (2*R + 3)*4 + recv_nvl * (H + 8 + k*8 + k*4 + 128*4) ]       R = max(G / 8, 1)
    RDMA    c * R * [ 18*2*4 + 2*recv_rdma * (H + 8 + k*8 + k*4 + 128*4 + 16) ]           (G > 8 only)

the larger of the dispatch and the combine configuration, each rounded up to 128 bytes.

HybridEP (``moe_flex_dispatcher_backend: hybridep``): DeepEP's branch hybrid-ep at the revision Megatron-Bridge
@ 067f987d (``docker/Dockerfile.ci``) and Megatron-LM's LTS image @ d98e8a64 build, deepseek-ai/DeepEP @ 34152ae,
with its RDMA part (``HYBRID_EP_MULTINODE=1``). Megatron-Core (``moe/fused_a2a.py`` ``init_hybrid_ep_buffer``)
creates one buffer per process at the first dispatch, for the expert x expert-tensor parallel group of G ranks,
the tokens of that first input (sequence x micro-batch / CP, / TP with sequence parallelism) and the local
experts. The group splits into N = G / L NVLink domains of L ranks
(``deep_ep/hybrid_ep_buffer.py``: the environment variable NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN, else the
ranks whose memory the process can map; ``moe_hybridep_ranks_per_nvlink_domain``). With T = max(tokens rounded
up to 16, 512) tokens per rank (``config.cuh`` ``Configurer``, ``update_template_config``), M = T x G rows for
the worst case of every token reaching this rank, hidden width H (the latent width with ``moe_latent_size``,
which the dispatcher moves instead), e local experts, c = ceil(T / 64) token chunks
(NUM_OF_TOKENS_PER_CHUNK_{DISPATCH,COMBINE}_API, 64 unless set: another chunk size moves only the flags, by KiB):

    NVLink  M*H*2 (bf16 tokens; dispatch shares combine's, use_shared_buffer) + M*e*L*4 (fp32 probabilities)
            + M*(H/128)*4 (fp32 FP8 scales, allocated in BF16 runs too) + e*G*T*G (the gathered bool routing map)
            + flags: 2*c*G*4 chunk flags, 108*(L + e)*8 scan scratch, 48 B of counters, a 512 B probe
              (+ 24 + 8L B in one domain: the all-gather's flags and peer table)
    RDMA    T*H*2*(3N - 2) tokens: a send copy, N - 1 receive slots, two combine staging areas of N - 1
            + T*e*G*4 + 3*(N-1)*T*e*L*4 probabilities + N*T*(H/128)*4 scales + 4*(c + 2)*(N-1)*8 + 16 flags
            + queue pairs, (N-1) x SMs for dispatch and again for combine (8 SMs unless set): each a send ring
              and a completion ring of W x 64 B, W = 3T+1 (dispatch) or 2T+1 (combine) rounded up to a power of
              two, plus 7 pages of 4 KiB and a 280 B descriptor; 8 B + 96 B (dispatch) or 72 B (combine) of
              tables per queue pair

(``csrc/hybrid_ep/buffer/intranode.cu`` ``NVLCoordinator::allocate_*``, ``extension/allgather.cu``,
``buffer/internode.cu`` ``RDMACoordinator::allocate_dispatch_buffers`` / ``allocate_combine_buffers``; the queue
pairs from DOCA GPUNetIO in NVIDIA/nccl @ 1e0c869c, the submodule it builds: ``doca_gpunetio_high_level.cpp``
``doca_gpu_verbs_create_qp_hl``, ``doca_gpunetio.cpp`` ``doca_gpu_mem_alloc``, which asks cudaMalloc for one
page more than each ring). All of it is cudaMalloc'd (or cuMem-allocated with fabric handles under multi-node
NVLink), outside PyTorch's allocator, and counted on the local rank 0 of a domain, which holds the few shared
counters. Not counted: the driver's rounding of each allocation (to the fabric granularity under multi-node
NVLink, nine shared allocations), and 64 KiB instead of 4 KiB pages on hosts that use them (Grace). HybridEP
itself refuses a group that is not a whole number of domains, more than 33 domains, and across domains more
than 21,840 tokens per rank (its RDMA send queue must stay under 65,536 entries).
"""

from __future__ import annotations

from ...config.limits import DEEPEP_CONFIGS, hybridep_domains, hybridep_tokens
from ...config.tp_overlap import Userbuffer, fp8_modes, parse_ub_cfgs, userbuffers

__all__ = ["buffer_bytes", "deepep_bytes", "hybridep_bytes", "hybridep_parts", "tp_overlap_bytes"]

_K = 128            # DeepEP's kNumMaxTopK and kNumMaxScales
_NVL_PEERS = 8      # DeepEP's NUM_MAX_NVL_PEERS
_META = 8           # sizeof(SourceMeta)
_TOPK_IDX = 8       # topk_idx_t is int64 by default



def _round128(n: int) -> int:
    return -(-n // 128) * 128


def buffer_bytes(ub: Userbuffer, S: int, h: int, tp: int) -> int:
    """Device bytes of one userbuffer (see the module docstring)."""
    n = S * h * (1 if ub.uint8 else 2)
    ring = ub.method == "ring_exchange"
    if ring and ub.reduce_scatter:
        n = n // tp * (2 * tp - 1)
    if ub.atomic:
        n += (tp if ring else ub.num_splits) * 2 * 4
    return n


def tp_overlap_bytes(r) -> int:
    """Transformer Engine's TP-overlap userbuffers on one GPU (0 without ``tp_comm_overlap``)."""
    par = r.cfg.parallelism
    if not par.tp_comm_overlap:
        return 0
    S = r.s * r.b // r.cp
    bufs = userbuffers(parse_ub_cfgs(par.tp_comm_overlap_cfg), fp8_modes(r.cfg.precision))
    return sum(buffer_bytes(ub, S, r.h, r.t) for ub in bufs)


def deepep_bytes(r) -> int:
    """DeepEP's NVLink and RDMA buffers on one GPU (normal, high-throughput mode)."""
    G = r.ep * r.etp
    if G <= 1:
        return 0
    channels = (r.cfg.model.moe_flex_dispatcher_num_sms or 20) // 2
    # fused_a2a.py get_hidden_bytes(x): the row width of the dispatched tensor, the latent width with
    # moe_latent_size (moe_layer.py runs fc1_latent_proj before the dispatch).
    hidden = 2 * (r.lat or r.h)
    per_token = hidden + _META + _K * _TOPK_IDX + _K * 4 + _K * 4
    rdma_ranks = max(G // _NVL_PEERS, 1)
    nvl_ranks = min(G, _NVL_PEERS)
    nvl = rdma = 0
    for _, nvl_recv, rdma_send, rdma_recv in DEEPEP_CONFIGS[G]:
        nvl = max(nvl, _round128(channels * nvl_ranks * ((2 * rdma_ranks + 3) * 4 + nvl_recv * per_token)))
        if G > _NVL_PEERS:
            recv = -(-rdma_recv // rdma_send) * rdma_send
            rdma = max(rdma, _round128(channels * rdma_ranks * ((_NVL_PEERS * 2 + 2) * 2 * 4
                                                                + 2 * recv * (per_token + 16))))
    return nvl + rdma


# HybridEP (deepseek-ai/DeepEP @ 34152ae, branch hybrid-ep) ------------------------------------------------
_HYB_CHUNK = 64               # NUM_OF_TOKENS_PER_CHUNK_{DISPATCH,COMBINE}_API default
_HYB_SCAN_BLOCKS = 108        # num_sms_preprocessing_api (Megatron-Core moe_hybridep_num_sms_preprocessing)
_HYB_SCAN_STATE = 8           # sizeof(tmp_state_t): enum + int32
_HYB_RDMA_SMS = 8             # Configurer: num_sms_{dispatch,combine}_api default across domains
_HYB_COUNTERS = 2 * (8 + 4 + 4) + 2 * 2 * 4   # expected flag, parity, (un)permute flag; rank 0's completion flags
_HYB_PROBE = 128 * 4          # ExtendedMemoryAllocator's test allocation
_WQE = _CQE = 64              # sizeof(doca_gpu_dev_verbs_wqe), sizeof(doca_gpunetio_ib_mlx5_cqe64)
_PAGE = 4096                  # doca_gpu_mem_alloc's alignment: the host page (x86)
_QP_DESC = 280                # sizeof(doca_gpu_dev_verbs_qp)
_MR_INFO = (96, 72)           # sizeof(dispatch_/combine_memory_region_info_t) (config.cuh compute_smem_sizes)


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def hybridep_parts(r) -> dict[str, int]:
    """HybridEP's buffers on one GPU by kind (bytes; empty without a group): the formula in the module docstring."""
    m = r.cfg.model
    G = r.ep * r.etp
    if G <= 1:
        return {}
    T = hybridep_tokens(r.s * r.b // r.cp // (r.t if r.sp else 1))
    L, N = hybridep_domains(G, m.moe_hybridep_ranks_per_nvlink_domain)
    H, e = r.lat or r.h, r.E // r.ep
    M, sc, c = T * G, H // 128, -(-T // _HYB_CHUNK)
    flags = 2 * c * G * 4 + _HYB_SCAN_BLOCKS * (L + e) * _HYB_SCAN_STATE + _HYB_COUNTERS + _HYB_PROBE
    if N == 1:
        flags += 3 * 8 + L * 8      # the custom all-gather's flags and peer table (one domain only)
    parts = {"tokens": M * H * 2, "probs": M * e * L * 4, "scales": M * sc * 4, "routing_map": e * G * T * G,
             "flags": flags}
    if N > 1:
        sms = m.moe_flex_dispatcher_num_sms or _HYB_RDMA_SMS
        qps = (N - 1) * sms                     # per direction
        per_qp = 7 * _PAGE + _QP_DESC + 8      # rings' and doorbells' pages, descriptor, its pointer
        parts.update({
            "rdma_tokens": T * H * 2 * (3 * N - 2),
            "rdma_probs": T * e * G * 4 + 3 * (N - 1) * T * e * L * 4,
            "rdma_scales": N * T * sc * 4,
            "rdma_flags": 4 * (c + 2) * (N - 1) * 8 + 2 * 8,
            "queue_pairs": qps * (_pow2(3 * T + 1) * (_WQE + _CQE) + per_qp + _MR_INFO[0])
                           + qps * (_pow2(2 * T + 1) * (_WQE + _CQE) + per_qp + _MR_INFO[1]),
        })
    return parts


def hybridep_bytes(r) -> int:
    """HybridEP's buffers on one GPU: NVLink domain, and RDMA across domains (module docstring)."""
    return sum(hybridep_parts(r).values())
