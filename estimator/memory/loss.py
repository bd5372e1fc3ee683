"""The logits and the loss on the last pipeline stage: what is kept, and what exists only briefly.

Per micro-batch the output layer produces logits of T x V/t elements (T = s*b/cp tokens on this rank,
V the padded vocabulary, t the tensor-parallel size); the loss implementation decides how many bytes
per element stay saved for the backward pass and how many exist only for a moment. In bytes per logit
element (Megatron-Core ``LanguageModule.compute_language_model_loss``):

    implementation                 saved   end of forward   during backward   output-layer backward
    unfused                          4        + 2             + 2                 - 4 + 2
    native fusion                    4        + 2 + 4         + 2 + 4             - 4 + 2
    Transformer Engine fusion        4        + 2             + 2                 - 4 + 2

- Unfused (``megatron/core/tensor_parallel/cross_entropy.py``): the fp32 copy of the logits is turned
  into the softmax in place and saved; the bf16 logits are alive until the model's forward returns.
  The gradient is computed in place into the softmax and cast to bf16 for the output layer.
- Native fusion (``megatron/core/fusions/fused_cross_entropy.py``): the same arithmetic inside
  ``jit_fuser`` functions, which are ``torch.compile`` since PyTorch 2.2 (``megatron/core/jit.py``);
  compiled functions do not update their inputs in place (they compute into a new buffer and copy
  back), so one more fp32 buffer of the logits' size exists while they run.
- Transformer Engine (TransformerEngine @ d0067d0 : transformer_engine/pytorch/triton/cross_entropy.py
  ``cross_entropy_forward``, since TE 2.18, commit 01bbe3e "Fix the numerical issue with the Fused CE loss"): the
  Triton kernel writes the gradient into a new fp32 tensor, ``torch.empty_like(_input, dtype=torch.float32)``,
  which ``CrossEntropyFunction`` saves instead of the logits (4 B); the logits are not saved and live until the
  model's forward returns (+ 2). Its backward scales that fp32 gradient in place and returns it; autograd casts it
  to the logits' dtype for the output layer (+ 2 beside it), the same bytes as the unfused loss. Before TE 2.18
  the kernel wrote the gradient into the bf16 logits and saved them (2 B, nothing else).

The output layer's backward then needs the bf16 gradient of the logits and its own weight gradient
(V/t x h in the weight dtype; Megatron allocates it even when the gradient accumulates straight into
``main_grad``) after the loss has freed what it saved.

Logits in another dtype than the output layer's input (``precision.logit_dtype``, Megatron-LM
``--output-logit-dtype``; Megatron-LM @ d98e8a64 : megatron/core/tensor_parallel/layers.py ``_linear_forward``
runs Transformer Engine's ``general_gemm`` with ``out_dtype``, and the backward of
``LinearWithGradAccumulationAndAsyncCommunication`` starts with ``grad_output.to(ctx.input_dtype)``). With L the
logits' bytes per element and A the input's:

    fp32 logits (L = 4)      .float() returns them as they are: the unfused and native losses turn them into the
                             softmax in place (saved 4, no half copy); Transformer Engine's kernel keeps its fp32
                             gradient (saved 4) beside the logits until the forward returns (+ 4) and hands that
                             gradient on as it is; the output layer's backward casts the fp32 gradient, still held by
                             the autograd call, to the input dtype: + A beside it
    half logits (L = 2)      as in the table: the fp32 copy (Transformer Engine: the fp32 gradient) is saved, the
                             L-byte logits live until the model's forward returns; a dtype other than the input's
                             adds the cast's A during the output layer's backward
"""

from __future__ import annotations

from typing import NamedTuple

from ..model.resolve import Resolved

__all__ = ["LossBuffers", "logit_bytes", "loss_buffers"]


class LossBuffers(NamedTuple):
    """Bytes of one micro-batch's logits, per GPU of the last stage."""

    saved: int            # kept from the loss forward until its backward
    forward_extra: int    # besides ``saved``, alive at the end of the loss forward
    backward_extra: int   # besides ``saved``, alive while the loss runs its backward
    output_backward: int  # change against ``saved`` while the output layer runs its backward (without wgrad)


def logit_bytes(precision) -> int:
    """Bytes per logit element as the output layer writes it: ``logit_dtype``, else the weights' dtype (fp32 4,
    bf16 and fp16 2)."""
    dtype = precision.logit_dtype or precision.params_dtype
    return 4 if dtype == "fp32" else 2


def loss_buffers(r: Resolved) -> LossBuffers:
    """What the logits of one micro-batch cost on one GPU of the last stage (bf16 logits; fp32 weights give fp32
    logits; ``logit_dtype`` sets them apart from the weights)."""
    tr, pr = r.cfg.training, r.cfg.precision
    n = (r.s * r.b // r.cp) * (r.Vp // r.t)    # logit elements on this GPU
    act = 4 if pr.params_dtype == "fp32" else 2     # the output layer's input
    lb = logit_bytes(pr)
    # the output layer's backward casts the logits' gradient to its input's dtype (a new tensor beside it)
    cast = act * n if pr.logit_dtype not in (None, pr.params_dtype) else 0
    # Gemma 2's final_logit_softcapping (Megatron-Bridge Gemma2OutputLayer: cap * tanh(logits / cap)) keeps
    # tanh's output, one more logits-sized tensor, until the backward pass.
    cap = lb * n if r.cfg.model.final_logit_softcapping else 0
    te = tr.cross_entropy_loss_fusion and tr.cross_entropy_fusion_impl == "te"
    extra_fp32 = 4 * n if tr.cross_entropy_loss_fusion and not te else 0   # torch.compile's out-of-place buffer
    if lb == 4:   # fp32 logits: .float() returns them as they are
        # unfused and native: the loss works in them in place; Transformer Engine keeps its own fp32 gradient
        # beside them until the forward returns, and hands it on without a cast
        return LossBuffers(saved=4 * n + cap, forward_extra=4 * n if te else extra_fp32, backward_extra=extra_fp32,
                           output_backward=cast)
    return LossBuffers(saved=4 * n + cap, forward_extra=lb * n + extra_fp32, backward_extra=lb * n + extra_fp32,
                       output_backward=lb * n - 4 * n + cast)
