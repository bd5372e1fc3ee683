"""Unfused attention as Megatron-Core's own ``DotProductAttention`` runs it (``--transformer-impl local``).

What it keeps for the backward pass and what its backward needs besides, per layer and micro-batch on one
GPU, with T = s*b tokens, n = a/t heads, m = g/t key/value heads (one with g < t), head width d, activations of
B bytes, and U = B*b*n*s*s, one tensor of attention scores. Sources, Megatron-LM at the pinned revision:
``megatron/core/transformer/dot_product_attention.py`` (forward), ``megatron/core/fusions/fused_softmax.py``
(``FusedScaleMaskSoftmax``), ``megatron/core/transformer/utils.py`` (``attention_mask_func``,
``get_default_causal_mask``), ``megatron/core/transformer/attention.py`` (``get_query_key_value_tensors``,
``_checkpointed_attention_forward``), ``pretrain_gpt.py`` (``get_batch``).

Queries, keys and values are slices of one QKV projection output X ((n + 2m)*d per token; with g < t the
all-gathered output of all ranks, (a + 2g)*d per token, of which each rank slices its group). Keys and values
are *views* of X; queries are a view for multi-head attention and a copy for grouped queries (the reshape
of the query slice cannot be a view); RoPE and q/k norms make new tensors. With grouped queries the keys
and values are expanded to n heads (``repeat_interleave``, new tensors), so X is not kept; otherwise the
value view kept by the second matmul keeps all of X alive. Kept, in units of B*T*d:

    grouped (n > m):        q n + expanded k, v 2n                          = 3n
    multi-head, RoPE/norms: q n + k n (new) + X 3n                          = 5n
    multi-head, neither:    X 3n (q, k, v all views)                        = 3n
    core_attn recompute:    the checkpoint's inputs q, k (new or views) and v (a view: all of X)

The scores: ``baddbmm`` writes a new tensor, the softmax output is kept (U); attention dropout adds its
1-byte mask and output (U). Megatron's fused scale-mask-softmax kernel (``masked_softmax_fusion``, bf16/fp16
scores, 16 < s <= 4096, s and b*n multiples of 4) masks inside the kernel. Otherwise PyTorch runs it:
``attention_mask_func`` fills the causal positions in place (``masked_fill_``) on a view of the scores, which
keeps its boolean mask for the backward pass; the mask is the batch's b x s x s tensor where the dataloader
builds it (first and last pipeline stage) and a new s x s tensor per layer elsewhere.

The backward of the core attention, after the layer's MLP backward freed the MLP's saved tensors:
the first matmul's backward makes the gradient of the probabilities (U) while they are still kept. On
PyTorch's path the softmax backward adds one more (U) and frees the probabilities; then, because the mask
was applied in place to a view, autograd's ``CopySlices`` node copies the gradient into a new base tensor
(U), clones the slice (U) and ``masked_fill`` writes one more (U): four score tensors at once, nothing of the
kept scores left. So, above everything kept, the core attention's backward holds

    fused kernel:    U                          (the probabilities' gradient)
    PyTorch path:    4U - (kept score tensors)  (3U without dropout)

plus the gradient flowing through the residual stream (B*T*h) and one attention-output-sized gradient
(B*T*n*d), minus the layer's MLP activations, already freed.

Each function takes ``r``, a resolved configuration (:class:`estimator.model.resolve.Resolved`; not imported here,
since resolve imports the layer modules, which import this one).
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.derived import recomputed_modules

__all__ = ["LocalCoreAttention", "attention_backward_extra", "chunk_mask_bytes", "local_core_attention",
           "torch_softmax"]


class LocalCoreAttention(NamedTuple):
    """Bytes of one layer's core attention for one micro-batch."""

    kept: int            # q, k, v as kept, the scores, the per-layer mask (without core_attn recompute)
    checkpoint: int      # with core_attn recompute: the checkpoint's inputs as kept
    recomputed: int      # with core_attn recompute: what the backward rematerialises at once
    backward_extra: int  # above everything kept: the core attention's backward working set


def torch_softmax(r) -> bool:
    """Whether ``FusedScaleMaskSoftmax`` falls back to PyTorch (``is_kernel_available`` is false)."""
    tr, pr = r.cfg.training, r.cfg.precision
    n = r.a // r.t
    return (not tr.masked_softmax_fusion or pr.params_dtype == "fp32" or not 16 < r.s <= 4096 or r.s % 4
            or (r.b * n) % 4)


def chunk_mask_bytes(r, receives_batch: bool, n_layers: int) -> tuple[int, int]:
    """(kept, rematerialised at once) boolean causal masks of PyTorch's in-place masking for one micro-batch of
    a model chunk of ``n_layers`` layers. The batch's b x s x s mask where the dataloader builds it and the
    chunk receives the batch (it holds the embedding or the output layer: ``get_batch`` gives the others
    nothing), kept whatever is recomputed (it is the batch's, and a checkpoint input); else an s x s mask per
    layer, kept by each layer, or rebuilt by a recomputed layer (core_attn or full recompute: a uniform group
    rebuilds its layers' at once). Nothing with the fused kernel or Transformer Engine layers."""
    tr = r.cfg.training
    if tr.transformer_impl != "local" or not torch_softmax(r) or not n_layers:
        return 0, 0
    if receives_batch and tr.create_attention_mask_in_dataloader:
        return r.b * r.s * r.s, 0
    per = r.s * r.s
    if tr.recompute_granularity == "selective":
        if "core_attn" in recomputed_modules(tr):
            return 0, per
        return n_layers * per, 0
    if tr.recompute_granularity == "full":
        k = tr.recompute_num_layers if tr.recompute_num_layers is not None else 1
        if tr.recompute_method == "block":
            return max(n_layers - k, 0) * per, per
        return 0, max(min(k, n_layers), 1) * per
    return n_layers * per, 0


def local_core_attention(r, B: int, scores: int, qkv_new: bool) -> LocalCoreAttention:
    """Megatron's DotProductAttention of one non-MLA layer (module docstring). ``scores`` are the score
    tensors kept (softmax output, dropout mask and output); ``qkv_new`` whether RoPE or q/k norms make q and k
    new tensors."""
    T, t, dh = r.s * r.b, r.t, r.dh
    n, m = r.a // t, r.kv                       # query and key/value heads of this rank
    U = B * r.b * n * r.s * r.s
    unit = B * T * dh
    # the QKV projection's output X; with fewer key/value heads than ranks the all-gathered X the views slice
    x = unit * (n + 2 * m) if r.g >= t else unit * (r.a + 2 * r.g)
    if n > m:
        kept = unit * 3 * n
        q_ckpt = unit * n                       # a copy (grouped queries cannot be a view of X)
    else:
        kept = unit * (5 * n if qkv_new else 3 * n)
        q_ckpt = unit * n if qkv_new else 0
    k_ckpt = unit * m if qkv_new else 0
    checkpoint = q_ckpt + k_ckpt + x
    expanded = 2 * unit * n if n > m else 0
    extra = (4 * U - scores) if torch_softmax(r) else U
    return LocalCoreAttention(kept=kept + scores, checkpoint=checkpoint, recomputed=expanded + scores,
                              backward_extra=extra)


def attention_backward_extra(r, B: int, scores: int) -> int:
    """The core attention backward's working set above everything kept, for MLA layers too (their queries,
    keys and values are already per head: only the score tensors count)."""
    U = B * r.b * (r.a // r.t) * r.s * r.s
    return (4 * U - scores) if torch_softmax(r) else U
