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

Activations per micro-batch on one GPU, in bytes (B = 2, bf16; T = s b / cp query rows; K = T + T / c the rows of
``kv_full``, the window keys and the compressed ones; k the keys each query reads: the window plus, with c = 4,
min(topk, T / 4) picked by the indexer, with c = 128 all T / 128 compressed ones)::

    B T h + B T h                       input norm: input, output (q_down's, kv_proj's and the compressors' input)
    + 2 B T ql + B T d                  q latent before and after its norm, kv before its norm
    + B T a d + 4 T a                   q from q_up (the weightless per-head RMS norm's input) and its fp32 rstd
    + B K d                             ``kv_full``: the window keys and the compressed ones (``torch.cat``)
    + B T a d + B T og ol               the inverse RoPE's output (wo_a's input), wo_a's output (linear_proj's input)
    + compressor (c > 1)                B T 2 w d (the windows of kv and the bf16 softmax weights their product
                                        keeps) + 4 T w d (the fp32 softmax over each window of c rows) + 2 B (T / c) d
                                        (compressed keys before and after norm)
    + indexer (c = 4)                   its own compressor (width e: B T 2 w e + 4 T w e + 2 B (T / 4) e) and what
                                        the backend keeps of its query, weights and keys (below); it runs with
                                        autograd in training even at ``dsa_indexer_loss_coeff`` 0

then, by ``dsa_kernel_backend`` (Megatron-Core maps the deprecated ``apply_dsa_kernel_fusion`` to cudnn or none):

- cudnn or tilelang, the fused sparse attention (``CSASparseAttnFunc``, ``FusedCSAIndexerSparseAttnFunc`` save the
  query, ``kv_full``, output, log-sum-exp and flat indices): the query B T a d, the output B T a d and its fp32
  log-sum-exp 4 T a, the int32 indices 4 T k; with c = 4 the indexer gradients it computes in the forward pass,
  B T n e + B T n + B (T / 4) e;
- none, ``unfused_compressed_sparse_attn`` ("mainly for reference", its docstring says): its two matmuls keep the
  fp32 query 4 T a d and the gathered keys in fp32 4 T k d, the softmax the exp scores and the normalised weights
  8 T a k, the gather its int64 index 8 T k and the mask its boolean T k. Nothing keeps the bf16 query (the fp32
  copy is what the matmul saves) or the output (the inverse RoPE clones it and saves only cos/sin), except that on
  c = 4 layers ``FusedDSAIndexerLoss`` keeps the query, B T a d, with the indexer's query B T n e, its fp32
  weights 4 T n, the int64 top-k 8 T min(topk, T / 4), the window's fp32 log-sum-exp 4 T a (its teacher's
  normaliser) and the fp32 causal mask 4 s (s / 4).

The unfused path's backward needs far more than it keeps: the gather's backward (PyTorch ``gather_backward``) fills a
zero gradient of its input, ``kv_full`` expanded to every query row, [T, K, d] in bf16, 2 T K d, beside the bf16
gradient of the gathered keys 2 T k d; before it, the scores matmul's backward holds both fp32 parts of the gathered
keys' gradient with the scores' and the query's, 8 T k d + 4 T a k + 4 T a d. The larger is the layer's attention
backward working set (``Part.backward``): 22.5 GiB (2^30 bytes) for a ratio-4 layer of DeepSeek-V4-Flash at
s = 4096 (T 4096, K 5120, k 640, d 512). Smaller, so left out: the indexer loss's backward
(``bwd_fused_indexer_loss_naive``, run even at coefficient 0), which rebuilds fp32 scores of [a, T, T / 4] and
[T, n, T / 4], a T^2 and n T^2 bytes, a few at a time, against 2.5 d T^2 for the gather.

``mla_up_proj`` (selective recompute) recomputes q from q_up and the query; ``core_attn`` is refused by
Megatron-Core for this layer. Left out: RoPE caches, the softmax's per-row statistics (about 20 T a), the per-query
top-k of the unfused path's window (its indices are built without autograd), the boundary rows context parallelism
exchanges, and FP8/NVFP4 copies of the linear inputs other than the norm output (counted in bf16); nothing here is
measured yet: the figures follow the forward code (Megatron-LM @ d48bd6be; the dev commit Megatron-Bridge's DeepSeek-V4
README names, 35f36c7c, has the same gather of the expanded keys and the same fp32 copies), not a run.
"""

from __future__ import annotations

from ..fp8_scales import lin_saved
from .base import Count, Ctx, Part

__all__ = ["activations", "components", "compressor_params", "indexer_params", "keys_read", "linear_shapes",
           "linear_weights", "params", "unfused_backward", "weight_shapes"]


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


def _kv_rows(r, T: int) -> int:
    """K: the rows of ``kv_full``, the T window keys and the T / c compressed ones."""
    return T + (T // r.cr if r.cr > 1 else 0)


def _compressor_acts(B: int, T: int, c: int, width: int) -> int:
    """One eager ``Compressor`` of ratio c and head width ``width`` (``Compressor._forward_sbhd``)."""
    w = _overlap(c)
    return 2 * B * T * w * width + 4 * T * w * width + 2 * B * (T // c) * width


def unfused_backward(r, T: int) -> int:
    """The unfused sparse attention's backward working set above what it keeps (see the module docstring): the
    gather's zero-filled gradient of the expanded keys with the incoming one, 2 T K d + 2 T k d, or the scores
    matmul's backward, 8 T k d + 4 T a k + 4 T a d, whichever is larger."""
    a, d, k = r.a, r.v_dim, keys_read(r, T)
    return max(2 * T * _kv_rows(r, T) * d + 2 * T * k * d, 8 * T * k * d + 4 * T * a * k + 4 * T * a * d)


def activations(r, c: Ctx) -> Part:
    """Bytes one micro-batch keeps (see the module docstring)."""
    v, cr = r.v4, r.cr
    B, T, h, a, d = c.B, c.T, r.h, r.a, r.v_dim
    unfused = v.backend == "none"
    norm_in = B * T * h
    norm_out = 0 if "layernorm" in c.modules else lin_saved(c, T, h)
    latent = 2 * B * T * r.q_lora + B * T * d
    q_up = B * T * a * d + 4 * T * a
    # The bf16 query: the fused kernels keep it; on the unfused path only FusedDSAIndexerLoss (ratio-4 layers).
    query = B * T * a * d
    query_saved = query if (not unfused or cr == 4) else 0
    keys = B * _kv_rows(r, T) * d
    out = 0 if unfused else B * T * a * d + 4 * T * a
    oproj = B * T * a * d + B * T * v.o_groups * v.o_lora
    comp = _compressor_acts(B, T, cr, d) if cr > 1 else 0
    k = keys_read(r, T)
    indexer = 0
    if cr == 4:
        n, e = v.heads, v.head_dim
        indexer = B * T * n * e + _compressor_acts(B, T, 4, e)
        if unfused:
            # FusedDSAIndexerLoss: fp32 weights, int64 top-k, the window's fp32 log-sum-exp, the fp32 causal mask
            indexer += 4 * T * n + 8 * T * min(v.topk, T // 4) + 4 * T * a + 4 * r.s * (r.s // 4)
        else:
            # FusedCSAIndexerSparseAttnFunc: the indexer's gradients, computed in the forward pass
            indexer += B * T * n + B * (T // 4) * e
    if unfused:
        core = 4 * T * k * d + 4 * T * a * d + 8 * T * a * k + 8 * T * k + T * k
        backward = unfused_backward(r, T)
    else:
        core = 4 * T * k
        backward = 0
    recompute = 0
    if "mla_up_proj" in c.modules:
        recompute = q_up + query          # what the checkpoint rematerialises at once
        q_up = query_saved = 0
    saved = norm_in + norm_out + latent + q_up + query_saved + keys + out + oproj + comp + indexer + core
    named = None
    if c.parts:
        named = {"norm_in": norm_in, "norm_out": norm_out, "latent": latent, "qkv": q_up + query_saved + keys,
                 "attn_out": out, "o_proj": oproj, "compressor": comp, "indexer": indexer, "core": core}
    return Part(saved, recompute, 0, backward, named)
