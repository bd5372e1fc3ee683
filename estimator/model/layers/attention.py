"""Self-attention (multi-head, grouped-query, multi-query), with its input norm.

Megatron-Core ``megatron/core/transformer/attention.py`` ``SelfAttention`` with the Transformer Engine spec
(``TELayerNormColumnParallelLinear`` for the fused input norm and QKV projection, ``TEDotProductAttention``,
``TERowParallelLinear`` for the output projection). Symbols: h hidden size, a query heads, g query groups,
dh head width (kv_channels), dv value head width (v_channels, else dh), t tensor-parallel size, nw weights per
norm element (1 RMSNorm, 2 LayerNorm).

Parameters::

    QKV       h (a dh + g dh + g dv)    (+ a dh more with attention_output_gate: the per-head gate)
              + the same as bias with add_bias_linear or add_qkv_bias
    output    a dv h                    (+ h bias, replicated, with add_bias_linear)
    sinks     a                         softmax_type learnable (TEDotProductAttention.softmax_offset, per head);
                                        global_softmax_type sets the global layers' own (MiMo-V2-Flash: vanilla)
    norms     nw h input norm           + 2 nw dh q/k norms with qk_layernorm (per head, replicated)
              + nw h after the output projection with post_layernorm (Gemma; Megatron-Bridge's
              TERowParallelLinearLayerNorm)
              with qk_layernorm_full_dim (OLMo 2, MiniMax-M2) the q/k norms are (a + g) dh, split over t
              (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/minimax_m2/minimax_m2_provider.py,
              FullDimQNorm / FullDimKNorm: weight of the local heads' width); with pre_layernorm false
              (OLMo 2) there is no input norm

Everything but the norms and the output bias is split over the t tensor-parallel ranks, also with fewer key/value
heads than ranks (g < t, t a multiple of g; Megatron-LM @ d98e8a64 : megatron/core/transformer/attention.py
``Attention.__init__`` and ``SelfAttention.get_query_key_value_tensors``): the QKV weight stays one column-parallel
linear of (a (1 or 2) dh + g (dh + dv)) outputs split evenly, so weights, gradients and optimizer states per rank
are the same formula and nothing is replicated. Each rank then all-gathers the QKV output (all g groups), slices
its group (the t / g ranks of a group share it) and its a / t query heads, and attends with one key/value head
(``Resolved.kv``: g / t, or 1); the gather's backward reduce-scatters the gradient, which sums the shared key/value
heads' contributions.

Sliding windows (GPT-OSS, Gemma, MiMo-V2-Flash) and chunked attention (Llama 4) change which scores are computed,
not any tensor's size.

MiMo-V2-Flash (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/mimo_v2_flash/modeling_mimo_v2_flash.py):
``MiMoV2FlashSelfAttention`` rebuilds the QKV projection with g (dh + dv) key/value outputs and the output
projection with a dv inputs (v_channels: dh 192, dv 128), and takes each layer's key/value heads from its kind
(swa_num_query_groups 8 in the sliding-window layers, full_attn_num_query_groups 4 in the global ones:
num_query_groups and num_global_query_groups here); ``MiMoV2FlashTEDotProductAttention`` gives the sliding-window
layers learnable sinks and the global ones a vanilla softmax, and multiplies v by attention_value_scale (a new
tensor of v's size, which flash attention saves in place of the view of the QKV output: no change to the count).

Step 3.5 Flash (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/stepfun/step35_provider.py
``Step35DecoderLayer``): each layer is built from a copy of the configuration with its kind's query heads, key/value
heads and head width, 96 query heads in the sliding-window layers (the model's own a) and 64 in the full-attention
ones (num_global_attention_heads, the layer kind's ``a``), so every term above takes its layer's a. Its per-head gate
(Hugging Face's g_proj, a x h) is built as attention_output_gate, a dh x h (the bridge's fallback where
Megatron-Core, as @ d98e8a64, has no head_wise_attn_gate; Megatron-Bridge's verification card counts 199,997,706,240
parameters with it).

Activations per micro-batch on one GPU, in bytes (T tokens per rank, Tn under sequence parallelism, B bytes
per element)::

    4 Tn h                        norm input + norm output (saved by the fused QKV linear)
    + B T (a dh / t + k (dh + dv)) q, k, v as flash attention saves them (k = g / t key/value heads a rank,
                                  one with g < t; every g / t below is that k)
    + B T a dv / t                attention output (also the output projection's input)
    + 4 T a / t                   softmax log-sum-exp (fp32)
    + 2 B T (a + g) dh / t + 4 or 8 T (a + g) / t     q/k norms: input copies, outputs, statistics
    + B T (a + 2g) dh / t + 4 T (a + g) / t        qk_l2_norm (Llama 4): Megatron-Core's L2Norm is a compiled
                                  function that saves its input, a view that keeps the fused QKV output
                                  alive, and an fp32 statistic per head
    + 2 B T a dh / t              attention_output_gate: the gate the fused gating keeps, and the gated
                                  output the output projection saves (no longer the flash output)
    + B Tn h + 4 or 8 Tn          post_layernorm: the post-norm's input and statistics
    + 4 T g dh / t + 8 T g / t    Gemma 4 (global_attention_freq with post_layernorm; MiMo-V2-Flash has global
                                  layers without either): the eager fp32 value norm's copy of v and
                                  its per-row root mean square. Its global layers (every k-th) count with
                                  their own head width and key/value heads (global_kv_channels,
                                  num_global_query_groups: the layer kind's overrides, estimator.model.layers.view)
    qk_layernorm_full_dim replaces the q/k-norm term by (4 + 2 B) T (a + g) dh / t + 8 T: the eager
                                  _FullDimRMSNorm keeps its fp32 copy of q (or k) for pow and mul, the
                                  normalised bf16 tensor for the weight's mul, the output as the per-head
                                  norm's is counted, and one fp32 rsqrt per token and norm
    pre_layernorm false           no norm input and output: the QKV linear (TEColumnParallelLinear) keeps
                                  the layer input itself (Tn h elements as the fused one keeps its norm
                                  output), which recomputing layernorm cannot drop

With g < t the backward's working set holds the gradient of the all-gathered QKV output, the copy the
reduce-scatter concatenates in rank order and the reduce-scattered share, B T (a + 2g) dh (2 + 1 / t) (dv for dh
in the values' share), beside the residual stream's gradient B Tn h; the views that qk_l2_norm keeps point into
the gathered output, so that term is B T (a + 2g) dh. The forward's gather (its buffer and the torch.cat in rank
order, 2 B T (a + 2g) dh, transient) is below that backward working set. Bridge's full-width q/k norms
(qk_layernorm_full_dim) hold one key head's weights, dh, on each rank with g < t; counted as their g dh / t share
(under dh of difference per layer).

Unfused attention adds the s x s scores and K, V expanded to every head (recomputed with core_attn);
the delayed FP8 recipe a 1-byte copy of the output projection's input (the other FP8 recipes and NVFP4 none:
Megatron-Core has the projection save the attention output itself, ``save_original_input``); context parallelism
with a2a the output before and after the all-to-all, with allgather the gathered keys and values.
"""

from __future__ import annotations

from ..fp8_scales import lin_saved, module_recipe
from ..local_attention import attention_backward_extra, local_core_attention
from .base import Count, Ctx, Part

__all__ = ["activations", "backward_extra", "components", "linear_shapes", "linear_weights", "params", "scores",
           "weight_shapes"]


#: The linears' module names (precision.quant_recipe, estimator/model/quant_recipe.py).
QKV, PROJ = "self_attention.linear_qkv", "self_attention.linear_proj"

def qkv_width(r) -> int:
    """Output width of the fused QKV projection (all ranks): query, gate, keys and values."""
    return (r.a * (2 if r.gate else 1) + r.g) * r.dh + r.g * value_width(r)


def value_width(r) -> int:
    """Width of one value head: v_channels (MiMo-V2-Flash), else the head width."""
    return r.dv or r.dh


def params(r) -> Count:
    """QKV + output projection + sinks + norms (see the module docstring)."""
    m = r.cfg.model
    h, a, nw = r.h, r.a, r.norm_w
    bias = m.add_bias_linear
    qkv_out = qkv_width(r)
    sh = h * qkv_out + (qkv_out if (bias or m.add_qkv_bias) else 0) + a * value_width(r) * h + (a if r.sinks else 0)
    rep = (nw * h if r.pre_norm else 0) + (h if bias else 0) + (nw * h if r.post_norm else 0)
    if r.qk_full:
        sh += (a + r.g) * r.dh          # RMSNorm (one weight per element), sharded with the heads
    elif m.qk_layernorm:
        rep += 2 * nw * r.dh
    return Count(sh, rep)


def norms(r) -> int:
    nw = r.norm_w
    qk = (r.a + r.g) * r.dh if r.qk_full else (2 * nw * r.dh if r.cfg.model.qk_layernorm else 0)
    return nw * r.h * ((1 if r.pre_norm else 0) + (1 if r.post_norm else 0)) + qk


def components(r) -> dict:
    n = norms(r)
    return {"attention": params(r).total - n, "norms": n}


def linear_weights(r) -> int:
    """QKV and output-projection weights on one tensor-parallel rank."""
    t, h = r.t, r.h
    return h * qkv_width(r) // t + r.a * value_width(r) * h // t


def weight_shapes(r) -> set:
    return {(o, i) for o, i, _ in linear_shapes(r)}


def linear_shapes(r) -> tuple:
    """(out, in, count) of each linear-layer weight on one tensor-parallel rank: QKV, output projection."""
    t, h, a, dv = r.t, r.h, r.a, value_width(r)
    return ((qkv_width(r) // t, h, 1), (h, a // t * dv, 1))       # QKV: column-parallel, even with g < t


def scores(r, heads: int) -> int:
    """Unfused attention's s x s tensors kept for the backward pass: softmax output (B bytes), and with
    attention dropout its 1-byte mask and B-byte output, for ``heads`` heads of b sequences."""
    B = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    per = B + ((1 + B) if r.cfg.model.attention_dropout > 0 else 0)
    return per * r.b * heads * r.s * r.s


def backward_extra(r, B: int, scores: int) -> int:
    """Unfused attention's backward working set above what it keeps: the local implementation's
    (:mod:`estimator.model.local_attention`); Transformer Engine's unfused attention masks inside its fused softmax
    kernel, so there it is the probabilities' gradient, one score tensor."""
    if r.cfg.training.transformer_impl == "local":
        return attention_backward_extra(r, B, scores)
    return B * r.b * (r.a // r.t) * r.s * r.s


def activations(r, c: Ctx) -> Part:
    """Bytes one micro-batch keeps, and the backward working set (see the module docstring)."""
    cfg = r.cfg
    B, T, Tn, h = c.B, c.T, c.Tn, r.h
    t, dh, dv = r.t, r.dh, value_width(r)
    heads, kv = r.a // t, r.kv        # query heads and key/value heads this rank attends with
    if r.pre_norm:
        norm_in = B * Tn * h
        norm_out = 0 if "layernorm" in c.modules else lin_saved(c, Tn, h, gathered=True, module=QKV)  # LayerNormLinear
    else:       # no input norm: the QKV linear keeps the layer input itself
        norm_in, norm_out = 0, lin_saved(c, Tn, h, module=QKV)
    norm_keep = norm_in + norm_out
    qkv = B * T * ((heads + kv) * dh + kv * dv)
    # The fused QKV output the q/k/v views point into: the rank's own columns, or with g < t all of them
    # (all-gathered, then sliced to the rank's group). The gather's backward (Megatron-LM @ d98e8a64 :
    # megatron/core/tensor_parallel/mappings.py _reduce_scatter_along_last_dim) holds the gathered gradient, its
    # torch.cat copy in rank order and the reduce-scattered share at once, beside the residual stream's gradient.
    fused = qkv if r.g >= t else B * T * qkv_width(r)
    work = 0 if r.g >= t else 2 * fused + B * T * qkv_width(r) // t + B * Tn * h
    out = B * T * heads * dv
    saved = norm_keep + qkv + out + 4 * T * heads
    recompute = 0
    if r.qk_full:
        # Megatron-Bridge's eager _FullDimRMSNorm: an fp32 copy of q (k) kept by pow and mul, the normalised
        # tensor cast back (kept by the weight's mul), the output (as the per-head count below has it), and
        # one fp32 rsqrt per token for each of the two norms.
        saved += (4 + 2 * B) * T * (heads + kv) * dh + 8 * T
    elif cfg.model.qk_layernorm:
        # Per-head norms of q and k (Transformer Engine's norm op): each saves a contiguous copy of its input
        # (the q/k slices of the fused QKV output are strided) and produces a new output, plus fp32
        # statistics per row (mean and rstd for LayerNorm, rstd for RMSNorm).
        rows = T * (heads + kv)
        saved += 2 * B * rows * dh + (8 if r.norm_w == 2 else 4) * rows
    if cfg.model.qk_l2_norm:
        saved += fused + 4 * T * (heads + kv)
    if r.gate:
        # SelfAttention._apply_output_gate (a fused x * sigmoid(gate)) keeps the contiguous gate; its output is
        # a new tensor, which the output projection saves.
        saved += 2 * B * T * heads * dh
    if r.post_norm:
        saved += B * Tn * h + (8 if r.norm_w == 2 else 4) * Tn
    if cfg.model.global_attention_freq is not None and r.post_norm:
        # Gemma 4's value norm, whose layers have post-norms (MiMo-V2-Flash's global layers have neither)
        # (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma/modeling_gemma4.py
        # Gemma4SelfAttention.get_query_key_value_tensors): v.float() kept by pow and the division, and the fp32
        # root mean square per row (kept by sqrt and the division).
        saved += 4 * T * kv * dh + 8 * T * kv
    kept_scores = bwd = 0
    if c.unfused and cfg.training.transformer_impl == "local":
        # Megatron's own DotProductAttention (estimator/model/local_attention.py): q, k, v as it keeps them
        # (views of the QKV output keep all of it), replacing the generic count above.
        sc = scores(r, heads)
        rotary = cfg.model.position_embedding_type in ("rope", "yarn", "mrope")
        la = local_core_attention(r, B, sc, rotary or cfg.model.qk_layernorm)
        saved -= qkv
        if "core_attn" in c.modules:
            saved += la.checkpoint
            recompute = la.recomputed
        else:
            saved += la.kept
            kept_scores = sc
        bwd = la.backward_extra + B * T * heads * dh
    elif c.unfused:
        sc = scores(r, heads)
        # Unfused attention also keeps K and V expanded to all heads for the two batched matmuls.
        expanded = B * T * (heads - kv) * (dh + dv)
        if "core_attn" in c.modules:
            recompute = sc + expanded
        else:
            saved += sc + expanded
            kept_scores = sc + expanded
        bwd = backward_extra(r, B, sc) + B * T * heads * dv
    proj_fp8 = 0
    # Megatron-Core sets save_original_input on linear_proj for every FP8 recipe but delayed and for NVFP4
    # (Megatron-LM @ d98e8a64 : megatron/core/transformer/attention.py and multi_latent_attention.py, "For fp8/fp4
    # training, the output of the fused core_attn is saved by itself"): the projection keeps the bf16 attention
    # output counted above, and Transformer Engine honours it for the requantization-safe quantizers, current
    # scaling, MXFP8, blockwise, NVFP4 (TransformerEngine @ d0067d0 : module/linear.py, module/_common.py
    # can_reconstruct_wgrad_input_from_original). Only the delayed recipe (Float8Quantizer) saves an FP8 copy.
    if module_recipe(c, PROJ) == "delayed":
        proj_fp8 = lin_saved(c, T, heads * dv, module=PROJ)   # FP8 copy of the projection input
        saved += proj_fp8
    cp_type = cfg.parallelism.cp_comm_type
    if r.cp > 1 and cp_type in ("a2a", "a2a+p2p"):
        saved += B * T * heads * dv       # output before and after the all-to-all
    elif r.cp > 1 and cp_type == "allgather":
        saved += B * T * (r.cp - 1) * kv * (dh + dv)       # gathered keys and values
    named = None
    if c.parts:
        named = {"norm_in": norm_in, "norm_out": norm_out, "latent": 0, "qkv": qkv, "attn_out": out,
                 "lse": 4 * T * heads, "scores": kept_scores, "proj_in_fp8": proj_fp8}
    return Part(saved, recompute, work, bwd, named)
