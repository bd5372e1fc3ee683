"""The MoE rules: experts over the expert-parallel ranks, the router's options, the overload factor a layout can
receive, and what HybridEP refuses of an expert group.

:func:`moe_problems` is the MoE part of :func:`estimator.config.rules.check.cross_field_problems`; :func:`router_rules`
(TopKRouter's) closes :func:`estimator.config.rules.model.model_problems`; :func:`hybridep_rules` is called by the
recipe features' dispatcher rules (:mod:`estimator.config.rules.features`); :func:`overload_cap` says why a layout
caps ``training.moe_overload_factor`` (the estimate's assumptions quote it).
"""

from __future__ import annotations

from ..derived import default_ffn_hidden_size, max_overload_factor
from ..errors import Problem
from ..limits import HYBRIDEP_MAX_DOMAINS, HYBRIDEP_MAX_RDMA_TOKENS, hybridep_domains, hybridep_tokens

__all__ = ["ERNIE_IMAGE_BOUNDARY_TOKENS", "hybridep_rules", "moe_problems", "overload_cap", "router_rules"]

#: Tokens ERNIE-VL's processor puts around each image and marks for the vision expert pool: image_start and
#: image_end (huggingface/transformers @ 06053b84 : src/transformers/models/ernie4_5_vl_moe/
#: processing_ernie4_5_vl_moe.py ``Ernie4_5_VL_MoeProcessor.__call__``: ``moe_mm_token_type_ids`` is 1 on the image
#: placeholders and "additionally" on ``image_start_token_id`` and ``image_end_token_id``; Megatron-Bridge @ 067f987d
#: : src/megatron/bridge/models/ernie_vl/modeling_ernie45_vl/model.py routes by ``moe_mm_token_type_ids``).
ERNIE_IMAGE_BOUNDARY_TOKENS = 2


def moe_problems(cfg) -> list[Problem]:
    """The MoE fields against the layout and each other (experts over expert-parallel ranks, expert widths over
    expert-tensor-parallel ranks, sequence parallelism with TP and EP), and the MoE fields of a dense model."""
    P: list[Problem] = []
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    t, ep = par.tensor_model_parallel_size, par.expert_model_parallel_size
    etp = par.expert_tensor_parallel_size or t
    moe = m.num_experts is not None
    ffn = default_ffn_hidden_size(m)

    def add(field, value, msg):
        P.append(Problem(field, value, msg))

    # MoE.
    if moe:
        E = m.num_experts
        k = m.moe_router_topk or 2
        if E % ep:
            add("parallelism.expert_model_parallel_size", ep, f"num_experts ({E}) must be divisible by "
                f"expert_model_parallel_size ({ep})")
        if k > E:
            add("model.moe_router_topk", k, f"moe_router_topk ({k}) must be <= num_experts ({E})")
        fm = m.moe_ffn_hidden_size or ffn
        if fm % etp:
            add("model.moe_ffn_hidden_size", fm, f"moe_ffn_hidden_size ({fm}) must be divisible by "
                f"expert_tensor_parallel_size ({etp})")
        fv = m.moe_vision_ffn_hidden_size         # ERNIE-VL's vision pool, split over the same ranks
        if fv and fv % etp:
            add("model.moe_vision_ffn_hidden_size", fv, f"moe_vision_ffn_hidden_size ({fv}) must be divisible by "
                f"expert_tensor_parallel_size ({etp})")
        if fv and tr.images_per_sample and m.vision_num_layers is not None:
            per = (tr.image_resolution // m.vision_patch_size) ** 2 // m.vision_spatial_merge_size ** 2
            vis = tr.images_per_sample * (per + ERNIE_IMAGE_BOUNDARY_TOKENS)
            s = tr.seq_length or m.max_position_embeddings
            if s is not None and tr.images_per_sample * per <= s < vis:   # more images: the vision rules say so
                add("training.images_per_sample", tr.images_per_sample, f"{tr.images_per_sample} images x ({per} "
                    f"tokens + {ERNIE_IMAGE_BOUNDARY_TOKENS} image start / end tokens) = {vis:,} tokens must fit in "
                    f"the sequence ({s:,} tokens): ERNIE-VL's processor wraps each image in start and end tokens")
        fs = m.moe_shared_expert_intermediate_size
        if fs and fs % t:
            add("model.moe_shared_expert_intermediate_size", fs, f"({fs}) must be divisible by "
                f"tensor_model_parallel_size ({t})")
        if isinstance(m.moe_layer_freq, tuple) and len(m.moe_layer_freq) != m.num_layers:
            add("model.moe_layer_freq", list(m.moe_layer_freq), f"a pattern list must have num_layers "
                f"({m.num_layers}) entries, got {len(m.moe_layer_freq)}")
        if t > 1 and ep > 1 and not tr.sequence_parallel:
            add("training.sequence_parallel", False, "Megatron-Core requires sequence_parallel when both "
                "tensor and expert parallelism are used")
        if m.moe_pad_expert_input_to_capacity and m.moe_expert_capacity_factor is None:
            add("model.moe_pad_expert_input_to_capacity", True, "needs moe_expert_capacity_factor")
    else:
        for name in ("moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                     "moe_expert_capacity_factor", "moe_vision_ffn_hidden_size"):
            if getattr(m, name) is not None:
                add(f"model.{name}", getattr(m, name), "applies only to MoE models (set num_experts)")
        if m.moe_layer_freq not in (1, None):
            add("model.moe_layer_freq", m.moe_layer_freq if isinstance(m.moe_layer_freq, int)
                else list(m.moe_layer_freq), "applies only to MoE models (set num_experts)")
        for name in ("moe_shared_expert_gate", "moe_router_enable_expert_bias", "moe_pad_expert_input_to_capacity"):
            if getattr(m, name):
                add(f"model.{name}", True, "applies only to MoE models (set num_experts)")
        if ep > 1:
            add("parallelism.expert_model_parallel_size", ep, "expert parallelism needs an MoE model "
                "(set num_experts)")
        if tr.moe_overload_factor != 1:
            add("training.moe_overload_factor", tr.moe_overload_factor, "applies only to MoE models (set "
                "num_experts); a dense model routes no tokens")
    return P


def overload_cap(m, par, f: float) -> str | None:
    """Why this layout caps an MoE overload factor ``f`` below itself (:func:`~.derived.max_overload_factor`), or
    None when ``f`` is within the layout's bound. For an MoE model whose values passed the field checks.

    The factor describes the routing (how unevenly tokens pick experts); how much of it reaches one rank depends on
    the layout. A layout-changing tool (the search, the sweeps, "Make it fit", a quick control) keeps the factor as
    written and each layout receives what it can: ``min(f, bound)``, said in the estimate's assumptions."""
    bound = max_overload_factor(m, par)
    if f <= bound:
        return None
    E, ep, k = m.num_experts, par.expert_model_parallel_size, m.moe_router_topk or 2
    c = m.moe_expert_capacity_factor
    if ep == 1:
        why = ("with expert_model_parallel_size 1 one rank holds every expert and receives exactly its balanced "
               "rows (its tokens x moe_router_topk), however the routing falls")
    elif c is not None and bound == max(1.0, c) and bound < ep * min(k, E // ep) / k:
        why = (f"moe_expert_capacity_factor {c:g} drops the rows an expert receives beyond {max(1.0, c):g} x its "
               "balanced share (Megatron-Core's token dropping)")
    else:
        why = (f"the busiest expert-parallel rank receives at most every token's rows for its experts: "
               f"expert_model_parallel_size ({ep}) x min(moe_router_topk ({k}), local experts ({E // ep})) / "
               f"moe_router_topk = {bound:g}")
    return f"this layout receives at most {bound:g} x its balanced share: {why}"


def router_rules(m, add) -> None:
    """TopKRouter's rules (Megatron-LM @ d98e8a64 : megatron/core/transformer/transformer_config.py
    ``__post_init__``, megatron/core/transformer/moe/router.py; TransformerEngine @ d0067d0d :
    transformer_engine/pytorch/router.py)."""
    groups, gk = m.moe_router_num_groups, m.moe_router_group_topk
    if gk is not None and groups is None:
        add("moe_router_group_topk", gk, "group-limited routing needs moe_router_num_groups")
    if groups is not None and m.num_experts % groups:
        add("moe_router_num_groups", groups, f"num_experts ({m.num_experts}) must be divisible by "
            f"moe_router_num_groups ({groups})")
    if gk is not None and groups is not None and gk > groups:
        add("moe_router_group_topk", gk, f"must be <= moe_router_num_groups ({groups})")
    if m.moe_router_fusion and m.moe_router_dtype == "fp64":
        add("moe_router_fusion", True, "Transformer Engine's fused router does not support moe_router_dtype fp64")
    if m.moe_router_load_balancing_type == "sinkhorn" and m.moe_aux_loss_coeff:
        add("moe_aux_loss_coeff", m.moe_aux_loss_coeff, "Sinkhorn routing does not support an aux loss (must be 0)")


def hybridep_rules(add, ep: int, group: int, setting: int | None, seq: int, tokens: int) -> None:
    """What HybridEP (deepseek-ai/DeepEP @ 34152ae) refuses of an expert group of ``group`` ranks: a group that is
    not a whole number of NVLink domains (``hybrid_ep_buffer.py``'s assert), more domains than one warp serves
    (``hybrid_ep_backend.cuh``'s static_assert) and, across domains, a send queue of 65,536 entries or more
    (``internode.cu`` ``setup_qp_init_attr``'s assert)."""
    L, N = hybridep_domains(group, setting)
    field, value = (("model.moe_hybridep_ranks_per_nvlink_domain", setting) if setting
                    else ("parallelism.expert_model_parallel_size", ep))
    if group % L:
        add(field, value, f"HybridEP needs the expert x expert-tensor parallel group ({group} ranks) to be whole "
            f"NVLink domains of {L} ranks (moe_hybridep_ranks_per_nvlink_domain, "
            f"{'as set' if setting else 'min(G, 8) unless set'})")
    elif N > HYBRIDEP_MAX_DOMAINS:
        add(field, value, f"HybridEP reaches at most {HYBRIDEP_MAX_DOMAINS} NVLink domains; {group} ranks in "
            f"domains of {L} make {N}")
    elif N > 1 and hybridep_tokens(tokens) > HYBRIDEP_MAX_RDMA_TOKENS:
        add("training.seq_length", seq, f"HybridEP across NVLink domains takes at most "
            f"{HYBRIDEP_MAX_RDMA_TOKENS:,} tokens per rank (its RDMA send queue holds 3 x tokens + 1 entries, "
            f"under 65,536); this layout gives {tokens:,} (sequence x micro-batch / CP, / TP with sequence "
            "parallelism)")
