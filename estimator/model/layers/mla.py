"""Multi-latent attention (DeepSeek-V2/V3, Kimi-K2, Moonlight), with its input norm.

Megatron-Core ``megatron/core/transformer/multi_latent_attention.py`` ``MLASelfAttention``. Symbols: h hidden
size, a heads, qk / rope / v the per-head query-key, rotary and value widths, q_lora and kv_lora the
compression ranks, nw weights per norm element.

Parameters::

    q_down    h q_lora + nw q_lora norm   (replicated: a TELinear down-projection)
    q_up      q_lora a (qk + rope)        (without query compression: q_proj h a (qk + rope))
    kv_down   h (kv_lora + rope) + nw kv_lora norm   (replicated)
    kv_up     kv_lora a (qk + v)
    output    a v h
    norm      nw h input norm

plus the biases of each projection with add_bias_linear. The up- and output projections are split over the
tensor-parallel ranks; the down-projections and the latent norms are replicated.

Activations per micro-batch on one GPU, in bytes::

    4 Tn h + 4 Tn q_lora + 4 Tn kv_lora      input norm, latent norms (inputs and outputs)
                                             (with FP8 or NVFP4 the norm output as the two projections that read
                                             it save it: two quantized copies)
    + B T a (2 (qk + rope) + v) / t          q, k, v as flash attention saves them
    + B T a v / t + 4 T a / t                attention output, softmax log-sum-exp

mla_up_proj recomputes the up-projected q, k, v; unfused attention adds the s x s scores.
"""

from __future__ import annotations

from ..fp8_scales import lin_saved
from .attention import backward_extra, scores
from .base import Count, Ctx, Part

__all__ = ["activations", "components", "linear_shapes", "linear_weights", "params", "weight_shapes"]


def params(r) -> Count:
    h, a, nw = r.h, r.a, r.norm_w
    bias = r.cfg.model.add_bias_linear
    rep = nw * h
    qk = r.qk_dim + r.rope_dim
    sh = 0
    if r.q_lora:
        rep += h * r.q_lora + (r.q_lora if bias else 0) + nw * r.q_lora
        sh += r.q_lora * a * qk + (a * qk if bias else 0)
    else:
        sh += h * a * qk + (a * qk if bias else 0)
    rep += h * (r.kv_lora + r.rope_dim) + ((r.kv_lora + r.rope_dim) if bias else 0) + nw * r.kv_lora
    sh += r.kv_lora * a * (r.qk_dim + r.v_dim) + (a * (r.qk_dim + r.v_dim) if bias else 0)
    sh += a * r.v_dim * h
    rep += h if bias else 0
    return Count(sh, rep)


def norms(r) -> int:
    nw = r.norm_w
    return nw * r.h + (nw * r.q_lora if r.q_lora else 0) + nw * r.kv_lora


def components(r) -> dict:
    n = norms(r)
    return {"attention": params(r).total - n, "norms": n}


def linear_weights(r) -> int:
    """Every projection on one tensor-parallel rank (the down-projections are linear layers too, replicated)."""
    t, h, a = r.t, r.h, r.a
    qk = r.qk_dim + r.rope_dim
    n = (h * r.q_lora + r.q_lora * a * qk // t) if r.q_lora else h * a * qk // t
    return n + h * (r.kv_lora + r.rope_dim) + r.kv_lora * a * (r.qk_dim + r.v_dim) // t + a * r.v_dim * h // t


def weight_shapes(r) -> set:
    return {(o, i) for o, i, _ in linear_shapes(r)}


def linear_shapes(r) -> tuple:
    """(out, in, count) of each linear-layer weight on one tensor-parallel rank: the query projections (down and
    up, or one), kv down and up, output projection."""
    t, h, a = r.t, r.h, r.a
    qk = r.qk_dim + r.rope_dim
    q = ((r.q_lora, h, 1), (a // t * qk, r.q_lora, 1)) if r.q_lora else ((a // t * qk, h, 1),)
    return q + ((r.kv_lora + r.rope_dim, h, 1), (a // t * (r.qk_dim + r.v_dim), r.kv_lora, 1),
                (h, a // t * r.v_dim, 1))


def activations(r, c: Ctx) -> Part:
    """Bytes one micro-batch keeps, and the backward working set (see the module docstring)."""
    cfg = r.cfg
    B, T, Tn, h = c.B, c.T, c.Tn, r.h
    heads = r.a // r.t
    norm_in = B * Tn * h
    # The input norm is a separate TENorm; its bf16 output feeds two linear layers (the query's down-projection, or
    # q_proj without q_lora_rank, and kv_down): they save that one tensor in bf16, but with FP8 or NVFP4 each
    # quantizes it and saves its own copy (Megatron-LM @ d98e8a64 : megatron/core/models/gpt/gpt_layer_specs.py,
    # MLASelfAttention with backend.layer_norm() and backend.linear(); multi_latent_attention.py
    # _qkv_down_projection). mla_down_proj_fusion's single fused projection would keep one copy: not modelled.
    copies = 2 if c.fp8 else 1
    norm_out = 0 if "layernorm" in c.modules else copies * lin_saved(c, Tn, h)
    norm_keep = norm_in + norm_out
    qk = r.qk_dim + r.rope_dim
    latent = (2 * B * Tn * r.q_lora if r.q_lora else 0) + 2 * B * Tn * r.kv_lora
    qkv = B * T * heads * (2 * qk + r.v_dim)
    out = B * T * heads * r.v_dim
    recompute = 0
    if "mla_up_proj" in c.modules:
        recompute = qkv
        qkv = 0
    saved = norm_keep + latent + qkv + out + 4 * T * heads
    kept_scores = bwd = 0
    if c.unfused:
        # Megatron's own DotProductAttention: the softmax output (and dropout mask and output) per head,
        # s x s per sequence; q and k are already per head, so nothing is expanded.
        sc = scores(r, heads)
        if "core_attn" in c.modules:
            recompute += sc
        else:
            saved += sc
            kept_scores = sc
        bwd = backward_extra(r, B, sc) + B * T * heads * r.v_dim
    proj_fp8 = 0
    # Megatron-Core sets save_original_input on linear_proj for every FP8 recipe but delayed and for NVFP4
    # (Megatron-LM @ d98e8a64 : megatron/core/transformer/attention.py and multi_latent_attention.py, "For fp8/fp4
    # training, the output of the fused core_attn is saved by itself"): the projection keeps the bf16 attention
    # output counted above, and Transformer Engine honours it for the requantization-safe quantizers, current
    # scaling, MXFP8, blockwise, NVFP4 (TransformerEngine @ d0067d0 : module/linear.py, module/_common.py
    # can_reconstruct_wgrad_input_from_original). Only the delayed recipe (Float8Quantizer) saves an FP8 copy.
    if c.fp8 == "delayed":
        proj_fp8 = lin_saved(c, T, heads * r.v_dim)   # FP8 copy of the projection input
        saved += proj_fp8
    if r.cp > 1 and cfg.parallelism.cp_comm_type in ("a2a", "a2a+p2p"):
        saved += B * T * heads * r.v_dim
    named = None
    if c.parts:
        named = {"norm_in": norm_in, "norm_out": norm_out, "latent": latent, "qkv": qkv, "attn_out": out,
                 "lse": 4 * T * heads, "scores": kept_scores, "proj_in_fp8": proj_fp8}
    return Part(saved, recompute, 0, bwd, named)
