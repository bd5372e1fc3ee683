"""Limits of the communication libraries Megatron-Core calls for MoE dispatch (DeepEP, HybridEP): the group
sizes and token counts they accept, which validation enforces (:mod:`estimator.config.rules.features`) and the
buffer model sizes with (:mod:`estimator.memory.features.comm_buffers`, whose docstring gives the sources:
deepseek-ai/DeepEP ``deep_ep/buffers/legacy.py`` and, for HybridEP, DeepEP @ 34152ae branch hybrid-ep).
"""

from __future__ import annotations

__all__ = ["DEEPEP_CONFIGS", "DEEPEP_GROUP_SIZES", "HYBRIDEP_MAX_DOMAINS", "HYBRIDEP_MAX_RDMA_TOKENS", "hybridep_domains",
           "hybridep_tokens"]

#: DeepEP's recommended (nvl_send, nvl_recv, rdma_send, rdma_recv) chunk sizes by group size: (dispatch, combine).
DEEPEP_CONFIGS = {
    2: ((24, 256, 6, 128), (10, 256, 6, 128)), 4: ((6, 256, 6, 128), (9, 256, 6, 128)),
    8: ((6, 256, 6, 128), (4, 256, 6, 128)), 16: ((36, 288, 20, 128), (4, 288, 12, 128)),
    24: ((32, 288, 8, 128), (1, 288, 8, 128)), 32: ((32, 288, 8, 128), (1, 288, 8, 128)),
    48: ((32, 288, 8, 128), (1, 288, 8, 128)), 64: ((32, 288, 8, 128), (1, 288, 8, 128)),
    96: ((20, 480, 12, 128), (1, 480, 8, 128)), 128: ((20, 560, 12, 128), (1, 560, 8, 128)),
    144: ((32, 720, 12, 128), (2, 720, 8, 128)), 160: ((28, 720, 12, 128), (2, 720, 8, 128)),
}
DEEPEP_GROUP_SIZES = tuple(sorted(DEEPEP_CONFIGS))

# HybridEP
_HOST_GPUS = 8            # the default ranks per NVLink domain: GPUs of one host without multi-node NVLink
_MIN_TOKENS = 512         # Configurer: max_num_of_tokens_per_rank = max(tokens, 512)
_TOKEN_ALIGN = 16         # update_template_config: tokens per rank rounded up to 16
#: Most NVLink domains in one HybridEP group: one warp loads the remote domains' memory regions (static_assert).
HYBRIDEP_MAX_DOMAINS = 33
#: Most tokens per rank across domains: the dispatch send queue, 3T + 1 entries, must stay under 65,536
#: (internode.cu setup_qp_init_attr's assert), T a multiple of 16.
HYBRIDEP_MAX_RDMA_TOKENS = (65535 - 1) // 3 // _TOKEN_ALIGN * _TOKEN_ALIGN


def hybridep_tokens(tokens: int) -> int:
    """T: the tokens per rank HybridEP sizes its buffers for (at least 512, a multiple of 16)."""
    return max(-(-tokens // _TOKEN_ALIGN) * _TOKEN_ALIGN, _MIN_TOKENS)


def hybridep_domains(group: int, ranks_per_domain: int | None) -> tuple[int, int]:
    """(L, N): ranks per NVLink domain (the setting, else min(G, 8)) and domains in a group of G ranks."""
    L = ranks_per_domain or min(group, _HOST_GPUS)
    return L, group // L
