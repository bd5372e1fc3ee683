"""DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): multi-latent attention in its absorbed form plus the lightning
indexer that picks the top-k keys of every query, with its input norm.

Megatron-Core (Megatron-LM @ d98e8a64) builds it for ``experimental_attention_variant: dsa``:
``megatron/core/models/gpt/experimental_attention_variant_module_specs.py`` ``get_dsa_module_spec_for_backend``
makes the layer's self-attention an ``AbsorbedMLASelfAttention``
(``megatron/core/transformer/experimental_attention_variant/absorbed_mla.py``) whose core attention is
``DSAttention`` holding a ``DSAIndexer`` (``.../experimental_attention_variant/dsa.py``). Symbols: h hidden size,
a heads, qk / rope / v the per-head widths, q_lora and kv_lora the compression ranks (qin = q_lora, or h without
query compression), n and d the indexer's heads and head width, k its top-k, t the tensor-parallel size.

Parameters: those of :mod:`.mla` (AbsorbedMLASelfAttention builds the same q_down, q_up, kv_down, kv_up, output
projection and latent norms; its ``linear_kv_up_proj`` weight is only read, split into its k and v halves), plus
the indexer, every tensor of it replicated on the tensor-parallel ranks (``parallel_mode="duplicated"``,
``DSAIndexer.__init__``)::

    wq_b            qin x n d     (linear_wq_b, no bias)
    wk              h x d         (linear_wk, no bias)
    k_norm          2 d           (a LayerNorm whatever the model's normalization: weight and bias)
    weights_proj    h x n         (linear_weights_proj, no bias)

Activations per micro-batch on one GPU, in bytes (B = 2, bf16; T = s b / cp query rows, Tn = T / t under sequence
parallelism, which AbsorbedMLASelfAttention requires with t > 1; K = s b key rows, gathered over context
parallelism, which DSAttention supports only as allgather; hd = a / t heads on the rank)::

    B Tn h + B Tn h                     input norm: input, output (the q/kv down-projections' input)
    + B Tn (2 q_lora + kv_lora)          q latent before and after its norm, kv latent before its norm
    + B T hd (qk + rope)                 q from q_up (its no-rope part, a view, feeds the absorption einsum)
    + B hd v kv_lora                     the contiguous copy of kv_up's v half DSAttention makes
    + B T hd kv_lora                     latent attention output (the v absorption einsum's input)
    + B T hd v                           attention output (the output projection's input)

then, by ``dsa_kernel_backend`` (``dsa.py`` ``_run_sparse_attention``):

- ``none``: ``_unfused_absorbed_dsa_fn``, the PyTorch reference path, computes dense scores for all K keys
  and masks all but the top-k: the fp32 copies of q and the key its matmul saves, 4 T hd (kv_lora + rope) +
  4 K (kv_lora + rope); the key (its first kv_lora channels are the value) B K (kv_lora + rope); per score
  element (b hd (s / cp) s of them: every query row against every key of its sequence) 13 bytes: ``dsa_masking.masked_softmax``'s exp output (4) and masked probabilities
  divided by their sum (4), the bf16 copy the value matmul saves (2), and three bool masks its three
  ``masked_fill`` calls save (~valid_mask of the expanded [b, hd, T, K] mask, 1 each); the top-k indices are not
  kept (they only build the mask, without autograd). Backward working set: 10 bytes per score element (the
  gradient of the bf16 probabilities, its fp32 copy and the fp32 gradient of the scores);
- ``tilelang``: the fused sparse MLA (``ops/tilelang_dsa.py`` ``fused_sparse_mla_absorbed``,
  ``ops/sparse_mla.py`` ``SparseMLA`` saves q, kv and the indices): q copied per head, padded to at least 16
  heads, B T max(hd, 16) (kv_lora + rope); the key copied, B K (kv_lora + rope); the int32 top-k indices 4 T k;
- ``cudnn``: ``dsa_cudnn_kernels.py`` ``FusedSparseAttentionFunc`` saves views of the absorbed q and the key
  (B T hd (kv_lora + rope) + B K (kv_lora + rope)), the top-k indices (counted as int32, 4 T k), the latent
  output (counted above) and the fp32 log-sum-exp 4 T hd.

With the indexer loss (``dsa_indexer_loss_coeff`` > 0, on layers that compute the top-k) the indexer runs with
autograd and ``FusedDSAIndexerLoss`` saves its q, weights and k, the detached query and key and the int64
top-k indices; the indexer's linears and key norm keep their inputs::

    + B T (n d + n) + B K d              indexer q (after RoPE), head weights, k (gathered over cp)
    + B T d + 8 T                        k_norm input and its fp32 mean and rstd
    + 8 T k                              int64 top-k indices
    + B T hd (kv_lora + rope)            the absorbed query (its storage, detached), unless already kept
    + B T (h + q_lora)                   x and qr gathered over the sequence-parallel ranks (t > 1 only;
                                         otherwise the same tensors as the norm output and q latent)

and its backward (``bwd_fused_indexer_loss_naive``) recomputes the fp32 index scores of every indexer head,
4 T n s bytes.

Cross-layer top-k sharing (``dsa_indexer_topk_freq`` k > 1, GLM-5.2's IndexShare; ``DSAttention.__init__``
and ``forward``): which layers compute their top-k is
:func:`estimator.config.rules.attention.dsa_shared_topk`'s; a layer that reuses an earlier one's (``dsa_skip``) builds
no indexer (``self.indexer = None``): none of the indexer's parameters, none of its activations, no indexer loss
(it runs only where the top-k is computed) and no indexer backward. Its sparse attention still saves its own
int32 indices for the backward pass (cuDNN: ``dsa_cudnn_kernels.py`` ``_run_sparse_attention_forward`` converts and
clamps them into a new tensor per layer). The computing layers put their top-k in a per-forward holder (a dict on
the attention mask, the packed-sequence parameters or the config) for the layers after them, so each keeps it:
``8 T k`` bytes (int64) on the reference path, whose indices are otherwise dropped once the mask is built (with
the indexer loss it is the loss's saved top-k, counted once), ``4 T k`` (int32) beside the fused kernels' own
copies; counted with the micro-batch (where the holder is the config, only the latest micro-batch's are alive:
then an upper bound);
``core_attn`` recompute does not drop a held top-k (the checkpointed forward still fills the holder, and the
reusing layers' recomputation reads it).
Multi-token-prediction layers number their layers from 1, so they always compute their own.

With shared top-k, the fused kernels and the sparse indexer loss (``dsa_indexer_use_sparse_loss``, which
Megatron-Bridge's GLM-5 sets) the computing layers take the split path (``DSAttention.forward``: the fully fused
indexer-plus-attention path runs only without sharing), and with ``cudnn`` its top-k-with-loss kernel
(``dsa_cudnn_kernels.py`` ``FusedQKTopKWithSparseLossFunc``) computes the loss and the indexer's gradients in the
forward pass and keeps only those gradients (``B T (n d + n) + B K d``, the sizes of q, weights and k) and the key
norm's input and statistics: no int64 top-k, no detached query, and no backward recomputation of the index
scores. Other backends and the dense loss keep the reference loss's tensors above.

Selective recompute: ``core_attn`` checkpoints all of DSAttention (``_checkpointed_attention_forward``; it
keeps its inputs: the absorbed q and the key, B T hd (kv_lora + rope) + B T (kv_lora + rope)); ``mla_up_proj``
recomputes the up-projection and absorption (``CheckpointWithoutOutput``): it drops the q from q_up and frees its
outputs, the absorbed q and the key, wherever a later tensor keeps them as they are (cuDNN's views, the indexer
loss's detached query, the reference path's value, the core_attn checkpoint's inputs; not the key gathered over
context parallelism, a new tensor).
"""

from __future__ import annotations

from ..fp8_scales import lin_saved
from . import mla
from .base import Count, Ctx, Part

__all__ = ["activations", "components", "indexer_params", "linear_shapes", "linear_weights", "params",
           "weight_shapes"]


def _q_in(r) -> int:
    """The indexer's query input width: q_lora_rank, or the hidden size without query compression
    (``DSAIndexer.__init__``)."""
    return r.q_lora or r.h


def indexer_params(r) -> int:
    """Parameters of one layer's lightning indexer (all replicated): wq_b, wk, k_norm weight and bias,
    weights_proj."""
    n, d = r.dsa.heads, r.dsa.head_dim
    return _q_in(r) * n * d + r.h * d + 2 * d + r.h * n


def params(r) -> Count:
    return mla.params(r) + Count(0, 0 if r.dsa_skip else indexer_params(r))


def components(r) -> dict:
    out = mla.components(r)
    if r.dsa_skip:
        return out
    d = r.dsa.head_dim
    out["attention"] += indexer_params(r) - 2 * d
    out["norms"] += 2 * d
    return out


def _indexer_shapes(r) -> tuple:
    if r.dsa_skip:
        return ()
    n, d = r.dsa.heads, r.dsa.head_dim
    return ((n * d, _q_in(r), 1), (d, r.h, 1), (n, r.h, 1))


def linear_weights(r) -> int:
    """MLA's projections on one rank plus the indexer's three linears, whole on every rank."""
    return mla.linear_weights(r) + sum(o * i for o, i, _ in _indexer_shapes(r))


def linear_shapes(r) -> tuple:
    return mla.linear_shapes(r) + _indexer_shapes(r)


def weight_shapes(r) -> set:
    return {(o, i) for o, i, _ in linear_shapes(r)}


def activations(r, c: Ctx) -> Part:
    """Bytes one micro-batch keeps, and the backward working set (see the module docstring)."""
    x = r.dsa
    B, T, Tn, h = c.B, c.T, c.Tn, r.h
    hd = r.a // r.t
    K = T * r.cp                                   # keys after the context-parallel all-gather
    lat = r.kv_lora + r.rope_dim
    norm_in = B * Tn * h
    norm_out = 0 if "layernorm" in c.modules else lin_saved(c, Tn, h)
    latent = B * Tn * (2 * r.q_lora + r.kv_lora)
    q_up = B * T * hd * (r.qk_dim + r.rope_dim)
    v_copy = B * hd * r.v_dim * r.kv_lora
    lat_out = B * T * hd * r.kv_lora
    out = B * T * hd * r.v_dim
    score_elems = hd * T * r.s                     # b x hd x (s / cp) query rows x s keys
    q_store, k_store = B * T * hd * lat, B * T * lat   # AbsorbedMLA's absorbed q and latent key (before cp)
    # Which of those two storages a later tensor keeps (a view or the tensor itself): with cp > 1 DSAttention
    # gathers the key into a new tensor.
    q_kept = k_kept = False
    if x.backend == "none":
        core = 4 * T * hd * lat + 4 * K * lat + B * K * lat    # fp32 q and key, the key (the value's view)
        k_kept = r.cp == 1
        scores = 13 * score_elems
        bwd = 10 * score_elems
    elif x.backend == "tilelang":
        core = B * T * max(hd, 16) * lat + B * K * lat + 4 * T * x.topk
        scores = bwd = 0
    else:                                          # cudnn: views of q and the key, indices, fp32 log-sum-exp
        core = B * T * hd * lat + B * K * lat + 4 * T * x.topk + 4 * T * hd
        q_kept, k_kept = True, r.cp == 1
        scores = bwd = 0
    # With sharing, the holder keeps a computing layer's top-k (int64 from the reference path, int32 from the fused
    # ones) for the layers after it, whatever recompute drops; on the reference path with the indexer loss it is the
    # loss's own saved top-k (counted there).
    held = 0 if not x.share or r.dsa_skip else 8 * T * x.topk if x.backend == "none" else 4 * T * x.topk
    in_loss = held if x.backend == "none" and x.loss else 0
    indexer = 0
    if x.loss and not r.dsa_skip:
        n, d = x.heads, x.head_dim
        if x.share and x.sparse_loss and x.backend == "cudnn":
            # FusedQKTopKWithSparseLossFunc: the precomputed gradients of q, weights and k, and the key norm's input
            indexer = B * T * (n * d + n) + B * K * d + B * T * d + 8 * T
        else:
            indexer = B * T * (n * d + n) + B * K * d + B * T * d + 8 * T + 8 * T * x.topk
            if not q_kept:                         # the detached query FusedDSAIndexerLoss saves
                indexer += q_store
                q_kept = True
            bwd += 4 * T * n * r.s
        if r.sp and r.t > 1:
            indexer += B * T * (h + r.q_lora)
    saved = norm_in + norm_out + latent + q_up + v_copy + lat_out + out + core + scores + indexer + held - in_loss
    recompute = 0
    if "core_attn" in c.modules:
        # the checkpoint keeps its inputs, the absorbed q and the latent key, and drops what DSAttention saved
        dropped = core + scores + indexer + lat_out + v_copy - in_loss
        saved += q_store + k_store - dropped
        recompute += dropped
        q_kept = k_kept = True
    if "mla_up_proj" in c.modules:
        # CheckpointWithoutOutput drops q from q_up and frees its outputs (the absorbed q and the latent key)
        # until the backward pass recomputes them
        freed = q_up + (q_store if q_kept else 0) + (k_store if k_kept else 0)
        saved -= freed
        recompute += freed
    named = None
    if c.parts:
        named = {"norm_in": norm_in, "norm_out": norm_out, "latent": latent, "qkv": q_up, "attn_out": out,
                 "lse": 0, "scores": scores, "proj_in_fp8": 0, "dsa_core": core,
                 "dsa_indexer": indexer + held - in_loss}
    return Part(saved, recompute, 0, bwd, named)
