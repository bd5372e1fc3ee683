"""DeepSeek-V4's hybrid attention (``experimental_attention_variant: dsv4_hybrid``), with its input norm.

Megatron-Core builds it on its ``dev`` branch only (Megatron-LM @ d48bd6be, ``dev``; not on ``main`` @ d98e8a64, nor at
the revision Megatron-Bridge pins, 2a75ac12):
``megatron/core/transformer/experimental_attention_variant/deepseek_v4_hybrid_attention.py``
``DSv4HybridSelfAttention`` whose core attention is ``csa.py`` ``CompressedSparseAttention`` with an optional
``Compressor`` and ``CSAIndexer``. Megatron-Bridge (@ 067f987d : src/megatron/bridge/models/deepseek/
deepseek_v4_bridge.py) sets it up from a Hugging Face ``deepseek_v4`` configuration. The layer supports tensor-parallel
size 1 only (an assertion in ``DSv4HybridAttention.__init__``). Symbols: h hidden size, a heads, d = v_head_dim the
width of every head (query, the one shared key/value head, output), ql = q_lora_rank, og / ol = o_groups /
o_lora_rank, c the layer's compression ratio (``csa_compress_ratios``: 0, 4 or 128), w = 2 when c = 4 (the
overlapping compressor) else 1, n / e the indexer's heads and head width, nw weights per norm element.

Parameters of one layer::

    norm          nw h                    input norm
    q             h ql + nw ql + ql a d   q_down, q_layernorm, q_up
    kv            h d + nw d              linear_kv_proj (one head, key = value), kv_layernorm
    output        ol a d + og ol h        linear_o_group_proj (wo_a: each of og groups maps a d / og to ol), linear_proj
    sink          a                       attn_sink (fp32)
    compressor    2 h w d + c w d + d     (c > 1) linear_wkv, linear_wgate, ape (fp32), norm (always RMSNorm)
    indexer       ql n e + h n            (c = 4) linear_wq_b, linear_weights_proj,
                  + 2 h 2 e + 4 2 e + e   and its own compressor of width e (ratio 4, overlapping)

Activations per micro-batch on one GPU, in bytes (B = 2, bf16; T = s b / cp query rows; K = T + T / c key rows
of the window and the compressed keys; k the keys each query reads: the window plus, with c = 4, min(topk, T / 4)
picked by the indexer, with c = 128 all T / 128 compressed ones)::

    B T h + B T h                       input norm: input, output (q_down's, kv_proj's and the compressors' input)
    + 2 B T ql + B T d                  q latent before and after its norm, kv before its norm
    + B T a d + 4 T a                   q from q_up (the weightless per-head RMS norm's input) and its fp32 rstd
    + B T a d + B K d                   the attention's query (after norm and RoPE) and keys (window + compressed)
    + B T a d + 4 T a                   attention output, fp32 log-sum-exp
    + B T a d + B T og ol               the inverse RoPE's output (wo_a's input), wo_a's output (linear_proj's input)
    + compressor (c > 1)                B T 2 w d (wkv, wgate outputs) + 4 T w d (the fp32 softmax over each
                                        window of c rows) + 2 B (T / c) d (compressed keys before and after norm)
    + indexer (c = 4)                   B T 2 n e (q from wq_b, and after RoPE and the Hadamard rotation) + B T n
                                        (weights_proj) + its compressor (width e) + 8 T min(topk, T / 4) (int64
                                        top-k); the indexer runs with autograd in training (``FusedDSAIndexerLoss``)

then, by ``dsa_kernel_backend`` (Megatron-Core maps the deprecated ``apply_dsa_kernel_fusion`` to cudnn or none):

- cudnn or tilelang, the fused sparse attention: 4 T k int32 indices;
- none, ``unfused_compressed_sparse_attn``: the gathered keys in fp32 4 T k d, the fp32 query 4 T a d, the exp
  scores and the normalised weights 8 T a k, the int64 gather index 8 T k.

``mla_up_proj`` (selective recompute) recomputes q from q_up and the query; ``core_attn`` is refused by
Megatron-Core for this layer. Left out: RoPE caches, the per-query top-k of the unfused path's window (its indices
are built without autograd), the boundary rows context parallelism exchanges, and FP8/NVFP4 copies of the linear
inputs other than the norm output (counted in bf16); nothing here is measured yet: the figures follow the forward
code, not a run.
"""

from __future__ import annotations

from ..fp8_scales import lin_saved
from .base import Count, Ctx, Part

__all__ = ["activations", "components", "compressor_params", "indexer_params", "keys_read", "linear_shapes",
           "linear_weights", "params", "weight_shapes"]


def _overlap(c: int) -> int:
    """w: the compressor's rows per output (2 for the overlapping ratio-4 compressor, ``Compressor.coff``)."""
    return 2 if c == 4 else 1


def compressor_params(r, c: int, width: int) -> int:
    """One ``Compressor`` of ratio c and head width ``width``: linear_wkv, linear_wgate, ape, RMSNorm weight."""
    w = _overlap(c)
    return 2 * r.h * w * width + c * w * width + width


def indexer_params(r) -> int:
    """One ``CSAIndexer`` (ratio-4 layers): linear_wq_b, linear_weights_proj and its own compressor."""
    v = r.v4
    return r.q_lora * v.heads * v.head_dim + r.h * v.heads + compressor_params(r, 4, v.head_dim)


def _extra(r) -> int:
    """The compressor and indexer of this layer's ratio (all replicated, ``parallel_mode="duplicated"``)."""
    c = r.cr
    n = compressor_params(r, c, r.v_dim) if c > 1 else 0
    return n + (indexer_params(r) if c == 4 else 0)


def params(r) -> Count:
    h, a, d, nw, v = r.h, r.a, r.v_dim, r.norm_w, r.v4
    rep = nw * h + h * r.q_lora + nw * r.q_lora + nw * d + v.o_lora * a * d + _extra(r)
    sh = r.q_lora * a * d + h * d + v.o_groups * v.o_lora * h + a
    return Count(sh, rep)


def _norms(r) -> int:
    nw, c = r.norm_w, r.cr
    n = nw * r.h + nw * r.q_lora + nw * r.v_dim
    if c > 1:
        n += r.v_dim
    if c == 4:
        n += r.v4.head_dim
    return n


def components(r) -> dict:
    n = _norms(r)
    return {"attention": params(r).total - n, "norms": n}


def linear_shapes(r) -> tuple:
    """(out, in, count) of the Transformer Engine linears that take the FP8 recipe: q_down, q_up, linear_kv_proj,
    linear_proj and, on ratio-4 layers, the indexer's linear_wq_b (the compressors and weights_proj are built
    with FP8 disabled, and wo_a is a plain parameter)."""
    h, a, d, v = r.h, r.a, r.v_dim, r.v4
    out = ((r.q_lora, h, 1), (a * d, r.q_lora, 1), (d, h, 1), (h, v.o_groups * v.o_lora, 1))
    if r.cr == 4:
        out += ((v.heads * v.head_dim, r.q_lora, 1),)
    return out


def linear_weights(r) -> int:
    return sum(o * i * n for o, i, n in linear_shapes(r))


def weight_shapes(r) -> set:
    return {(o, i) for o, i, _ in linear_shapes(r)}


def keys_read(r, T: int) -> int:
    """k: the keys one query reads, its window plus the compressed keys the layer's ratio gives it."""
    c, v = r.cr, r.v4
    k = min(v.window, T)
    if c == 4:
        k += min(v.topk, T // 4)
    elif c > 1:
        k += T // c
    return k


def activations(r, c: Ctx) -> Part:
    """Bytes one micro-batch keeps (see the module docstring)."""
    v, cr = r.v4, r.cr
    B, T, h, a, d = c.B, c.T, r.h, r.a, r.v_dim
    norm_in = B * T * h
    norm_out = 0 if "layernorm" in c.modules else lin_saved(c, T, h)
    latent = 2 * B * T * r.q_lora + B * T * d
    q_up = B * T * a * d + 4 * T * a
    query = B * T * a * d
    keys = B * (T + (T // cr if cr > 1 else 0)) * d
    out = B * T * a * d + 4 * T * a
    oproj = B * T * a * d + B * T * v.o_groups * v.o_lora
    comp = 0
    if cr > 1:
        w = _overlap(cr)
        comp = 2 * B * T * w * d + 4 * T * w * d + 2 * B * (T // cr) * d
    k = keys_read(r, T)
    indexer = 0
    if cr == 4:
        n, e = v.heads, v.head_dim
        indexer = 2 * B * T * n * e + B * T * n + (2 * B * T * 2 * e + 4 * T * 2 * e + 2 * B * (T // 4) * e)
        indexer += 8 * T * min(v.topk, T // 4)
    if v.backend == "none":
        core = 4 * T * k * d + 4 * T * a * d + 8 * T * a * k + 8 * T * k
    else:
        core = 4 * T * k
    recompute = 0
    if "mla_up_proj" in c.modules:
        recompute = q_up + query
        q_up = query = 0
    saved = norm_in + norm_out + latent + q_up + query + keys + out + oproj + comp + indexer + core
    named = None
    if c.parts:
        named = {"norm_in": norm_in, "norm_out": norm_out, "latent": latent, "qkv": q_up + query + keys,
                 "attn_out": out, "o_proj": oproj, "compressor": comp, "indexer": indexer, "core": core}
    return Part(saved, recompute, 0, 0, named)
