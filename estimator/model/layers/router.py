"""What the MoE router leaves for the backward pass: the tensors autograd saves from the gate's logits to the
routing probabilities, per micro-batch on one GPU.

Derived from Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/router.py (``TopKRouter.gating``,
``routing``, ``apply_z_loss``, ``sinkhorn_load_balancing``), megatron/core/transformer/moe/moe_utils.py
(``router_gating_linear``, ``topk_routing_with_score_function``, ``group_limited_topk``,
``compute_routing_scores_for_aux_loss``, ``switch_load_balancing_loss_func``, ``z_loss_func``,
``apply_router_token_dropping``, ``MoEAuxLossAutoScaler``), megatron/core/transformer/moe/token_dispatcher.py,
and for ``moe_router_fusion`` TransformerEngine @ d0067d0d : transformer_engine/pytorch/router.py with
transformer_engine/pytorch/csrc/extensions/router.cpp. A tensor saved by two operations (an op's output that
the next op saves again) is one tensor and is counted once.

Symbols: Tn tokens of the micro-batch on this rank (after sequence parallelism), E routed experts, k top-k,
P = Tn E, Rb bytes of the logits (the activations' dtype; 4 or 8 with moe_router_dtype fp32 or fp64)::

    gate            nothing new: router_gating_linear saves its input (the norm output, counted by the MoE
                    layer) and the weight; the logits [Tn, E] are saved only by what follows
    top-k, unfused  softmax (default)     8 Tn k indices (int64, topk; scatter saves the same tensor)
                                          + 4 Tn k softmax of the k selected logits (fp32, its output)
                    softmax, pre-softmax  4 P softmax output (fp32) + 8 Tn k indices
                    sigmoid               4 P sigmoid output (fp32; gather's input with expert bias, the same
                                          tensor) + 8 Tn k indices; with k > 1 the normalisation
                                          probs = s / sum(s) saves the k scores and their sum: + 4 Tn k + 4 Tn
                    sqrtsoftplus          as sigmoid + 4 P: softplus saves its fp32 input (a copy of the
                                          logits, or the logits themselves when they are fp32), sqrt its output
                    group-limited routing (moe_router_num_groups, moe_router_group_topk) without expert bias:
                                          + P masked_fill's bool mask (with expert bias the whole top-k graph
                                          is dropped, only its indices are used)
    top-k, fused    4 P intermediate output (fp32) + P routing map (bool [Tn, E]; the same tensor the
                    dispatcher receives), TE FusedTopkScoreFunction.save_for_backward
    sinkhorn        k = 1: Rb P sigmoid output, else 4 P softmax output (fp32); + P bool map (mul saves it)
    capacity factor + P: the final bool map, saved by ``routing_probs * final_map``
    aux losses      (aux_loss, seq_aux_loss, global_aux_loss with moe_aux_loss_coeff > 0; one set of scores
                    serves all three) unfused: softmax 4 P; sigmoid 4 P + 4 Tn (normalisation); sqrtsoftplus
                    4 P + 4 P input copy (shared with the top-k's when the logits are fp32) + 4 Tn;
                    fused: 4 P intermediate output (TE FusedComputeScoresForMoEAuxLoss). The loss itself
                    saves per-expert vectors only (E elements; not counted)
    z-loss          (moe_z_loss_coeff set) Rb P logits + Rb Tn logsumexp output (logsumexp saves both;
                    square saves the same output)
    dispatcher      allgather: ``masked_select`` of the local experts' probabilities saves its input and its
                    mask, Tg El (Rb + 1) with Tg the tokens gathered over the expert-TP x EP ranks and
                    El = E / ep the local experts. alltoall and flex permute the probabilities by index and
                    save int64 indices per routed row only (not counted, like the tokens' sort order).

Megatron-Core's defaults (TransformerConfig): softmax after top-k, load balancing type aux_loss with
moe_aux_loss_coeff 0.0 (so no aux-loss path), no z-loss, no fusion. Left out: the dispatcher's attributes
(alltoall's ``self.probs`` [Tn, E] and ``self.routing_map``, allgather's ``local_map``) live until the same
layer's next forward, i.e. for one micro-batch per layer, not per micro-batch in flight; and per-row int64
indices.
"""

from __future__ import annotations

__all__ = ["aux_loss_enabled", "gather_ranks", "saved"]

#: Bytes per element of the logits with ``moe_router_dtype`` set (else the activations' dtype).
ROUTER_BYTES = {"fp32": 4, "fp64": 8}

#: Load balancing types whose losses read the aux-loss scores (router.py ``is_aux_loss_enabled``).
AUX_TYPES = ("aux_loss", "seq_aux_loss", "global_aux_loss")

_F32, _I64, _BOOL = 4, 8, 1


def gather_ranks(r) -> int:
    """Ranks whose tokens the allgather dispatcher gathers: expert-TP (with sequence parallelism) x EP."""
    return (r.etp if (r.sp and r.etp > 1) else 1) * r.ep


def aux_loss_enabled(m) -> bool:
    """Whether the router computes the aux-loss scores: an aux-loss type with a positive coefficient."""
    return m.moe_router_load_balancing_type in AUX_TYPES and (m.moe_aux_loss_coeff or 0) > 0


def _score_tensors(fn: str, P: int, Rb: int, prefix: str) -> dict:
    """The [Tn, E] tensors the score function saves: softmax or sigmoid their fp32 output; sqrtsoftplus the
    fp32 input of softplus (the logits themselves when they are fp32) and the output of sqrt."""
    if fn == "sqrtsoftplus":
        return {("logits" if Rb == _F32 else prefix + "float_logits"): _F32 * P, prefix + "sqrt": _F32 * P}
    return {prefix + fn: _F32 * P}


def saved(r, B: int, T: int, Tn: int) -> dict:
    """The router's saved tensors for one micro-batch, by name, in bytes (module docstring)."""
    m = r.cfg.model
    E, k = r.E, r.k
    P = Tn * E
    Rb = ROUTER_BYTES.get(m.moe_router_dtype, B)
    fn = m.moe_router_score_function
    out: dict[str, int] = {}
    if m.moe_router_load_balancing_type == "sinkhorn":
        out["sinkhorn_scores"] = Rb * P if k == 1 else _F32 * P
        out["sinkhorn_map"] = _BOOL * P
    elif m.moe_router_fusion:
        out["topk_intermediate"] = _F32 * P
        out["routing_map"] = _BOOL * P
    else:
        out["topk_indices"] = _I64 * Tn * k
        if fn == "softmax" and not m.moe_router_pre_softmax:
            out["topk_softmax"] = _F32 * Tn * k
        else:
            out.update(_score_tensors(fn, P, Rb, "topk_"))
        grouped = bool(m.moe_router_group_topk)
        if grouped and not (fn != "softmax" and m.moe_router_enable_expert_bias):
            out["group_mask"] = _BOOL * P
        if fn != "softmax" and k > 1:
            out["topk_scores"] = _F32 * Tn * k
            out["topk_denominator"] = _F32 * Tn
    if m.moe_expert_capacity_factor is not None:
        out["capacity_map"] = _BOOL * P
    if aux_loss_enabled(m):
        if m.moe_router_fusion:
            out["aux_intermediate"] = _F32 * P
        else:
            out.update(_score_tensors(fn, P, Rb, "aux_"))
            if fn != "softmax":
                out["aux_denominator"] = _F32 * Tn
    if m.moe_z_loss_coeff is not None:
        out["logits"] = Rb * P
        out["z_logsumexp"] = Rb * Tn
    if m.moe_token_dispatcher_type == "allgather":
        tokens = Tn if r.sp else T
        local = tokens * gather_ranks(r) * (E // r.ep)
        out["dispatch_probs"] = Rb * local
        out["dispatch_map"] = _BOOL * local
    return out
