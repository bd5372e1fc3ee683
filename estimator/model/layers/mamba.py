"""Mamba-2 mixer layer (the ``M`` of a hybrid layer pattern), with its input norm; and Falcon-H1's mixer, a
Mamba-2 mixer beside self-attention on one norm (:data:`PARALLEL`, at the end).

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
    norm       di                          the gated RMSNorm (mamba_ssm RMSNormGated, groups of di / g; none
                                           with mamba_gated_norm false, MambaMixer's rmsnorm off)
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
    + B T di / t + 4 T g / t     the gated RMSNorm's input and its fp32 rstd per group (none with
                                 mamba_gated_norm false: the kernel gates the scan output by z itself)
    + B T di / t                 the norm output (the gated output), saved by out_proj

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

Without the fused scan (``use_mamba_mem_eff_path`` false, Megatron-LM ``--disable-mamba-mem-eff-path``;
Megatron-LM @ d98e8a64 : megatron/core/ssm/mamba_mixer.py ``MambaMixer._static_prefill``, which the mixer warns is not
tested for training) the convolution and the chunked scan are separate autograd functions, each saving its own
contiguous copy of its inputs, and zxBCdt itself is kept by nobody::

    B T (di + 2 g N) / t          the convolution's input (xBC transposed; causal_conv1d's CausalConv1dFn saves x)
    + B T (di + 2 g N + nh) / t   x, B, C and dt as the chunked scan saves them (mamba_ssm
                                  MambaChunkScanCombinedFn: out or out_x, x, dt, dA_cumsum, A, B, C, D, z, dt_bias)
    + 4 b nh / t' (s / 128) 128   dA_cumsum, the cumulative decay per chunk (fp32)
    + B T di / t                  the scan's output (out; out_x with mamba_gated_norm false, when the scan gates by z)
    + B T di / t                  z: the gated norm's gate (its input y and rstd as above), or with mamba_gated_norm
                                  false the scan's own copy of z

against the fused path's B T (2 di + 2 g N + nh) / t + B T di / t (zxBCdt and out_x): B T (di + 2 g N) / t + 4 T nh / t
more per layer (the chunk padding aside), with or without the gated norm. Assumed: causal_conv1d is installed (without
it ``nn.Conv1d`` and SiLU keep the convolution's output too, another B T (di + 2 g N) / t); the backward working set is
taken as the fused path's (the gradients of x, B, C, dt and of the convolution's input in place of zxbcdt's and the
recomputed convolution output; the chunk states and C B^T alike).
"""

from __future__ import annotations

from ..fp8_scales import lin_saved
from . import attention
from .base import Count, Ctx, Part

__all__ = ["CHUNK_SIZE", "CONV_WIDTH", "PARALLEL", "activations", "components", "linear_shapes", "linear_weights",
           "params", "weight_shapes"]

#: MambaMixer's d_conv (not a TransformerConfig field at the pinned revision).
CONV_WIDTH = 4
#: MambaMixer's chunk_size for the chunked scan (mamba_split_conv1d_scan_combined).
CHUNK_SIZE = 128


def _dims(r) -> tuple[int, int, int]:
    """(inner width di, in_proj output width, conv channels) over all ranks."""
    di = r.mamba.heads * r.mamba.head_dim
    gn = r.mamba.groups * r.mamba.state
    return di, 2 * di + 2 * gn + r.mamba.heads, di + 2 * gn


def _gated_norm(r) -> int:
    """Weights of the gated RMSNorm over the inner width (none with mamba_gated_norm false)."""
    return r.mamba.heads * r.mamba.head_dim if r.mamba.gated_norm else 0


def params(r) -> Count:
    di, in_w, conv = _dims(r)
    sh = r.h * in_w + conv * CONV_WIDTH + conv + 3 * r.mamba.heads + _gated_norm(r) + di * r.h
    return Count(sh, r.norm_w * r.h)


def components(r) -> dict:
    n = r.norm_w * r.h + _gated_norm(r)
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
    norm_keep = B * Tn * h + lin_saved(c, Tn, h, gathered=True, module="mixer.in_proj")   # a LayerNormLinear
    gated_norm = B * T * di // t + 4 * T * r.mamba.groups // t if r.mamba.gated_norm else 0
    out_in = lin_saved(c, T, di // t, module="mixer.out_proj")
    saved = norm_keep + B * T * in_w // t + B * T * di // t + gated_norm + out_in
    tc = t * r.cp
    chunks = -(-r.s // CHUNK_SIZE)
    if not r.cfg.model.use_mamba_mem_eff_path:
        # the unfused convolution and scan (module docstring): the convolution's input once more and the fp32
        # cumulative decay, zxBCdt's other pieces as the scan's and the gated norm's own copies
        saved += B * T * conv // t + 4 * r.b * (r.mamba.heads // tc) * chunks * CHUNK_SIZE
    scan = (8 * r.b * chunks * (r.mamba.heads // tc) * r.mamba.head_dim * r.mamba.state
            + 4 * r.b * chunks * max(r.mamba.groups // tc, 1) * CHUNK_SIZE * CHUNK_SIZE
            + 8 * r.b * (r.mamba.heads // tc) * r.s)
    work = B * T * in_w // t + B * T * conv // t + scan
    return Part(saved, 0, work)


class _ParallelMambaAttention:
    """Falcon-H1's token mixer (``parallel_mamba_attention``): a Mamba-2 mixer and self-attention side by side on
    one shared RMSNorm, their outputs added (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/falcon_h1/
    modeling_falconh1/falconh1_layer.py ``FalconH1Layer``, falconh1_layer_specs.py: ``TENorm``, then the mixer's
    in_proj and the attention's QKV as ``TEColumnParallelLinear``, no norm fused into either). The MLP that follows
    is the dense one (:mod:`.mlp`).

    Parameters: the mixer's (above) and the attention's (:mod:`.attention`) without the attention's input norm: one
    norm nw h serves both.

    Activations: the mixer's and the attention's, with one norm input (B Tn h) instead of two. Each branch multiplies
    the normalised input by its own multiplier (ssm_in_multiplier, attention_in_multiplier), so the two linears keep
    two copies of it, as the fused norms of a Mamba and an attention layer keep two norm outputs. The mixer's
    ssm_multipliers scale zxBCdt before the scan, which keeps the scaled copy instead of in_proj's output (no more
    bytes); the key_multiplier's scaled key is consumed by RoPE. The backward working set is the larger of the two."""

    def params(self, r) -> Count:
        return params(r) + attention.params(r) + Count(0, -r.norm_w * r.h)

    def components(self, r) -> dict:
        a, m = attention.components(r), components(r)
        return {"mamba": m["mamba"], "attention": a["attention"], "norms": a["norms"] + m["norms"] - r.norm_w * r.h}

    def linear_weights(self, r) -> int:
        return linear_weights(r) + attention.linear_weights(r)

    def linear_shapes(self, r) -> tuple:
        return linear_shapes(r) + attention.linear_shapes(r)

    def weight_shapes(self, r) -> set:
        return weight_shapes(r) | attention.weight_shapes(r)

    def activations(self, r, c: Ctx) -> Part:
        a, m = attention.activations(r, c), activations(r, c)
        return Part(a.saved + m.saved - c.B * c.Tn * r.h, a.recompute + m.recompute, max(a.work, m.work),
                    a.backward, a.named)


#: The token mixer of a Falcon-H1 layer (``LayerKind`` mixer "mamba_attention").
PARALLEL = _ParallelMambaAttention()
