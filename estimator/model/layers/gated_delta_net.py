"""Gated delta net (linear attention of Qwen3-Next; the ``G`` of a hybrid layer pattern), with its input norm.

Megatron-Core ``megatron/core/ssm/gated_delta_net/common.py`` ``_GDNBase`` and ``gdn.py`` ``GatedDeltaNet``,
built by ``megatron/core/models/gpt/experimental_attention_variant_module_specs.py``
(``get_gated_delta_net_module_spec``: ``in_proj`` a ``TELayerNormColumnParallelLinear`` with the layer's input
norm fused in, ``out_norm`` a norm over one value head, ``out_proj`` a ``TERowParallelLinear``). Symbols: h
hidden size, nk / nv key and value heads (linear_num_key_heads / linear_num_value_heads), dk / dv their widths,
qk = nk dk, v = nv dv, K the convolution width (linear_conv_kernel_dim), t tensor-parallel size, nw weights
per norm element.

Parameters::

    in_proj    h (2 qk + 2 v + 2 nv)    q, k, v, the output gate z, beta and alpha (no bias)
    conv1d     (2 qk + v) K             depthwise causal convolution on q, k, v (no bias)
    dt_bias    nv                       A_log nv
    out_norm   nw dv                    one value head wide, shared by all heads (replicated)
    out_proj   v h                      (no bias)
    input norm nw h

All but the two norms are split over the tensor-parallel ranks (nk and nv must divide by t).

Activations per micro-batch on one GPU, in bytes (T tokens per rank, Tn under sequence parallelism, B bytes
per element, widths per tensor-parallel rank), following
GatedDeltaNet.forward::

    4 Tn h                           input norm: input and output (saved by the fused in_proj)
    + B T (2 qk + 2 v + 2 nv) / t    in_proj output: the causal convolution saves its q, k, v slice, a view
                                     that keeps the whole projection alive
    + B T (2 qk + v) / t             convolution output, the input of the fused input preparation
    + B T (2 nv dk + v) / t          q and k (L2-normed, repeated to the nv value heads) and v, contiguous,
                                     saved by the chunked gated delta rule
    + 4 T nv / t + B T nv / t        the decay g (fp32) and beta
    + B T nv 64 / t                  the rule's lower-triangular WY factors (chunks of 64)
    + B T v / t + B T v / t          rule output and the gate z: the fused gated norm's inputs
    + 4 T nv / t                     the gated norm's rstd (fp32)
    + B T v / t                      the gated output, saved by out_proj

The chunked rule recomputes its hidden states in the backward pass: the backward working set is those
states and their gradients, 2 x 2 b (s / 64) nv / t' dk dv bytes (t' = t cp), and the in_proj-output
gradient.
"""

from __future__ import annotations

from ..fp8_scales import lin_saved
from .base import Count, Ctx, Part

__all__ = ["CHUNK", "activations", "components", "linear_shapes", "linear_weights", "params", "weight_shapes"]

#: Chunk length of the chunked gated delta rule (GatedDeltaNet.chunk_size; FLA's chunk_gated_delta_rule).
CHUNK = 64


def _dims(r) -> tuple[int, int, int, int]:
    """(qk, v, in_proj output width, conv channels) over all ranks."""
    qk, v = r.gdn.key_heads * r.gdn.key_dim, r.gdn.value_heads * r.gdn.value_dim
    return qk, v, 2 * qk + 2 * v + 2 * r.gdn.value_heads, 2 * qk + v


def params(r) -> Count:
    qk, v, in_w, conv = _dims(r)
    sh = r.h * in_w + conv * r.gdn.conv + 2 * r.gdn.value_heads + v * r.h
    return Count(sh, r.norm_w * (r.h + r.gdn.value_dim))


def components(r) -> dict:
    n = r.norm_w * (r.h + r.gdn.value_dim)
    return {"linear_attention": params(r).total - n, "norms": n}


def linear_weights(r) -> int:
    qk, v, in_w, _ = _dims(r)
    return r.h * in_w // r.t + v * r.h // r.t


def weight_shapes(r) -> set:
    return {(o, i) for o, i, _ in linear_shapes(r)}


def linear_shapes(r) -> tuple:
    """(out, in, count) of each linear-layer weight on one tensor-parallel rank: in_proj, out_proj."""
    qk, v, in_w, _ = _dims(r)
    return ((in_w // r.t, r.h, 1), (r.h, v // r.t, 1))


def activations(r, c: Ctx) -> Part:
    """Bytes one micro-batch keeps, and the backward working set (see the module docstring)."""
    B, T, Tn, h, t = c.B, c.T, c.Tn, r.h, r.t
    qk, v, in_w, conv = _dims(r)
    nv = r.gdn.value_heads
    norm_keep = B * Tn * h + lin_saved(c, Tn, h, gathered=True)   # in_proj is a LayerNormLinear
    saved = (norm_keep + B * T * in_w // t + B * T * conv // t + B * T * (2 * nv * r.gdn.key_dim + v) // t
             + 4 * T * nv // t + B * T * nv // t + B * T * nv * CHUNK // t + 2 * B * T * v // t
             + 4 * T * nv // t + lin_saved(c, T, v // t))
    chunks = -(-r.s // CHUNK)
    states = 2 * B * r.b * chunks * (nv // (t * r.cp)) * r.gdn.key_dim * r.gdn.value_dim
    return Part(saved, 0, states + B * T * in_w // t)
