"""Mamba-2 mixer layer (the ``M`` of a hybrid layer pattern), with its input norm.

Megatron-Core ``megatron/core/ssm/mamba_layer.py`` ``MambaLayer`` holding ``megatron/core/ssm/mamba_mixer.py``
``MambaMixer`` with ``in_proj`` a ``TELayerNormColumnParallelLinear`` (the layer's norm fused in) and ``out_proj``
a ``TERowParallelLinear`` (``megatron/core/models/hybrid/hybrid_layer_specs.py``). Symbols: h hidden size,
nh heads (mamba_num_heads), p head width (mamba_head_dim), di = nh p the inner width, g groups
(mamba_num_groups), N state size (mamba_state_dim), K = 4 the causal-convolution width (MambaMixer's d_conv),
t tensor-parallel size, nw weights per norm element.

Parameters::

    in_proj    h (2 di + 2 g N + nh)       z, x, B, C and dt in one projection (no bias)
    conv1d     (di + 2 g N) K + (di + 2 g N)   depthwise causal convolution on x, B, C, with its bias
    dt_bias    nh                          A_log nh (fp32), D nh (fp32; D_has_hdim is False)
    norm       di                          the gated RMSNorm (mamba_ssm RMSNormGated, groups of di / g)
    out_proj   di h                        (no bias)
    input norm nw h

Every part but the input norm is split over the tensor-parallel ranks: MambaMixer shards heads and groups
(nh and g must divide by t), so conv1d, dt_bias, A_log, D and the gated norm are per-rank slices. The
chunked scan runs in chunks of 128 tokens (MambaMixer's chunk_size).

Activations per micro-batch on one GPU, in bytes (T tokens per rank, Tn under sequence parallelism, B bytes
per element, widths per tensor-parallel rank)::

    4 Tn h                       input norm: input and output (saved by the fused in_proj)
    + B T (2 di + 2 g N + nh) / t    in_proj output zxBCdt, which mamba_split_conv1d_scan_combined saves
    + B T di / t                 out_x, the scan output before the z gate (saved by the same kernel)
    + B T di / t + 4 T g / t     the gated RMSNorm's input and its fp32 rstd per group
    + B T di / t                 the norm output, saved by out_proj

The memory-efficient path (MambaMixer._ssm_training, use_mamba_mem_eff_path) keeps none of the chunked
scan's intermediates for the backward pass: mamba_ssm's MambaSplitConv1dScanCombinedFn saves zxbcdt,
out_x and the small parameters, and recomputes the convolution output, dt, the cumulative decay, the
chunk states and C B^T in its backward. Those are the backward working set here::

    B T (2 di + 2 g N + nh) / t  the gradient of zxbcdt
    + B T (di + 2 g N) / t       the convolution output, recomputed
    + 2 x 4 b (s / 128) nh / t' p N   chunk states and their gradient (fp32)
    + 4 b (s / 128) g / t' 128^2     C B^T per chunk (fp32)
    + 2 x 4 b nh / t' s          dt and its cumulative sum (fp32)

with t' = t cp: under context parallelism the scan runs over the whole sequence on nh / (t cp) heads.
"""

from __future__ import annotations

from ..fp8_scales import lin_saved
from .base import Count, Ctx, Part

__all__ = ["CHUNK_SIZE", "CONV_WIDTH", "activations", "components", "linear_shapes", "linear_weights", "params",
           "weight_shapes"]

#: MambaMixer's d_conv (not a TransformerConfig field at the pinned revision).
CONV_WIDTH = 4
#: MambaMixer's chunk_size for the chunked scan (mamba_split_conv1d_scan_combined).
CHUNK_SIZE = 128


def _dims(r) -> tuple[int, int, int]:
    """(inner width di, in_proj output width, conv channels) over all ranks."""
    di = r.mamba.heads * r.mamba.head_dim
    gn = r.mamba.groups * r.mamba.state
    return di, 2 * di + 2 * gn + r.mamba.heads, di + 2 * gn


def params(r) -> Count:
    di, in_w, conv = _dims(r)
    sh = r.h * in_w + conv * CONV_WIDTH + conv + 3 * r.mamba.heads + di + di * r.h
    return Count(sh, r.norm_w * r.h)


def components(r) -> dict:
    di = r.mamba.heads * r.mamba.head_dim
    n = r.norm_w * r.h + di
    return {"mamba": params(r).total - n, "norms": n}


def linear_weights(r) -> int:
    di, in_w, _ = _dims(r)
    return r.h * in_w // r.t + di * r.h // r.t


def weight_shapes(r) -> set:
    return {(o, i) for o, i, _ in linear_shapes(r)}


def linear_shapes(r) -> tuple:
    """(out, in, count) of each linear-layer weight on one tensor-parallel rank: in_proj, out_proj."""
    di, in_w, _ = _dims(r)
    return ((in_w // r.t, r.h, 1), (r.h, di // r.t, 1))


def activations(r, c: Ctx) -> Part:
    """Bytes one micro-batch keeps, and the backward working set (see the module docstring)."""
    B, T, Tn, h, t = c.B, c.T, c.Tn, r.h, r.t
    di, in_w, conv = _dims(r)
    norm_keep = B * Tn * h + lin_saved(c, Tn, h, gathered=True)   # in_proj is a LayerNormLinear
    saved = (norm_keep + B * T * in_w // t + B * T * di // t + B * T * di // t + 4 * T * r.mamba.groups // t
             + lin_saved(c, T, di // t))
    tc = t * r.cp
    chunks = -(-r.s // CHUNK_SIZE)
    scan = (8 * r.b * chunks * (r.mamba.heads // tc) * r.mamba.head_dim * r.mamba.state
            + 4 * r.b * chunks * max(r.mamba.groups // tc, 1) * CHUNK_SIZE * CHUNK_SIZE
            + 8 * r.b * (r.mamba.heads // tc) * r.s)
    work = B * T * in_w // t + B * T * conv // t + scan
    return Part(saved, 0, work)
