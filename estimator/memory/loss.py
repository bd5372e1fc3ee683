"""The logits and the cross-entropy loss on the last pipeline stage: what is kept, and what exists only briefly.

Per micro-batch the output layer produces logits of T x V/t elements (T = s*b/cp tokens on this rank,
V the padded vocabulary, t the tensor-parallel size); the loss implementation decides how many bytes
per element stay saved for the backward pass and how many exist only for a moment. In bytes per logit
element (Megatron-Core ``LanguageModule.compute_language_model_loss``):

    implementation                 saved   end of forward   during backward   output-layer backward
    unfused                          4        + 2             + 2                 - 4 + 2
    native fusion                    4        + 2 + 4         + 2 + 4             - 4 + 2
    Transformer Engine fusion        2        + 0             + 0                   0

- Unfused (``megatron/core/tensor_parallel/cross_entropy.py``): the fp32 copy of the logits is turned
  into the softmax in place and saved; the bf16 logits are alive until the model's forward returns.
  The gradient is computed in place into the softmax and cast to bf16 for the output layer.
- Native fusion (``megatron/core/fusions/fused_cross_entropy.py``): the same arithmetic inside
  ``jit_fuser`` functions, which are ``torch.compile`` since PyTorch 2.2 (``megatron/core/jit.py``);
  compiled functions do not update their inputs in place (they compute into a new buffer and copy
  back), so one more fp32 buffer of the logits' size exists while they run.
- Transformer Engine (``transformer_engine/pytorch/cross_entropy.py``): the Triton kernel writes the
  gradient into the bf16 logits tensor, which is what it saves; nothing else of the logits' size.

The output layer's backward then needs the bf16 gradient of the logits and its own weight gradient
(V/t x h in the weight dtype; Megatron allocates it even when the gradient accumulates straight into
``main_grad``) after the loss has freed what it saved.
"""

from __future__ import annotations

from typing import NamedTuple

from ..model.resolve import Resolved

__all__ = ["LossBuffers", "loss_buffers"]


class LossBuffers(NamedTuple):
    """Bytes of one micro-batch's logits, per GPU of the last stage."""

    saved: int            # kept from the loss forward until its backward
    forward_extra: int    # besides ``saved``, alive at the end of the loss forward
    backward_extra: int   # besides ``saved``, alive while the loss runs its backward
    output_backward: int  # change against ``saved`` while the output layer runs its backward (without wgrad)


def loss_buffers(r: Resolved) -> LossBuffers:
    """What the logits of one micro-batch cost on one GPU of the last stage (bf16 logits; fp32 weights
    give fp32 logits)."""
    tr = r.cfg.training
    n = (r.s * r.b // r.cp) * (r.Vp // r.t)    # logit elements on this GPU
    act = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    # Gemma 2's final_logit_softcapping (Megatron-Bridge Gemma2OutputLayer: cap * tanh(logits / cap)) keeps
    # tanh's output, one more logits-sized tensor, until the backward pass.
    cap = act * n if r.cfg.model.final_logit_softcapping else 0
    if tr.cross_entropy_loss_fusion and tr.cross_entropy_fusion_impl == "te":
        return LossBuffers(saved=act * n + cap, forward_extra=0, backward_extra=0, output_backward=0)
    extra_fp32 = 4 * n if tr.cross_entropy_loss_fusion else 0   # torch.compile's out-of-place buffer
    if act == 4:   # fp32 logits: .float() returns them as they are, so the loss works in them in place
        return LossBuffers(saved=4 * n + cap, forward_extra=extra_fp32, backward_extra=extra_fp32,
                           output_backward=0)
    return LossBuffers(saved=4 * n + cap, forward_extra=act * n + extra_fp32, backward_extra=act * n + extra_fp32,
                       output_backward=act * n - 4 * n)
