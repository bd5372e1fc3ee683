"""The logits and the loss on the last pipeline stage: what is kept, and what exists only briefly.

Per micro-batch the output layer produces logits of T x V/t elements (T = s*b/cp tokens on this rank,
V the padded vocabulary, t the tensor-parallel size); the loss implementation decides how many bytes
per element stay saved for the backward pass and how many exist only for a moment. In bytes per logit
element (Megatron-Core ``LanguageModule.compute_language_model_loss``):

    implementation                 saved   end of forward   during backward   output-layer backward
    unfused                          4        + 2             + 2                 - 4 + 2
    native fusion                    4        + 2 + 4         + 2 + 4             - 4 + 2
    Transformer Engine fusion        4        + 2             + 2                 - 4 + 2
    Transformer Engine before 2.18   2        + 0             + 0                   0

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
  (release_v2.2 to release_v2.17 read the same) ``cross_entropy_forward`` wrote the gradient into the logits
  themselves and returned them, and ``CrossEntropyFunction`` saved them: the logits' own bytes, nothing else, and
  the output layer reads that gradient where it lies. ``precision.transformer_engine_version`` (default 2.18)
  chooses; the kernel's other changes since 2.2 (ignored tokens, the non-contiguous-input guard, CUDA-graph
  capture) allocate nothing of the logits' size for Megatron-Core's contiguous logits.

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
                             gradient on as it is (before 2.18: the logits themselves, saved 4, nothing more); the output layer's backward casts the fp32 gradient, still held by
                             the autograd call, to the input dtype: + A beside it
    half logits (L = 2)      as in the table: the fp32 copy (Transformer Engine: the fp32 gradient) is saved, the
                             L-byte logits live until the model's forward returns; a dtype other than the input's
                             adds the cast's A during the output layer's backward

Offline distillation from cached teacher logits (``training.distillation_cached_logits``, Megatron-LM
``--logits-load-dir``; Megatron-LM @ d98e8a64 : megatron/training/distillation/cached_logits_loss.py, called by
pretrain_gpt.py ``loss_func`` on the last pipeline stage) adds a KL loss on the main head's logits after the
model's forward, beside the cross entropy above (``LossFuncCallable``: (1 - alpha) LM + alpha KD, both computed
whatever alpha is). ``StudentLogitsCapture`` keeps the output layer's logits until the loss function has run;
``CachedLogitsKDLoss`` copies this micro-batch's teacher top-K log-probabilities (dtype as the teacher run saved
them, v B) and their indices (unpacked to int64 on the host) to the GPU, and ``topk_kl_div`` (ghost token on) runs.
With n = T V/t logit elements and K the files' top-K (at most V), in bytes:

    saved for the backward      8 n + T (18 K + 21)
        exp(logits - max) kept by exp's backward (4 n), the fp32 log-softmax kept by torch.gather's backward (4 n);
        per token: gather's int64 indices (8 K), exp of the gathered log-probabilities (4 K) and the mask that
        multiplies it (1 K), the teacher's probabilities over K + 1 entries kept by the KL product (4 (K + 1)) and
        the concatenated mask (K + 1), four fp32 scalars (the log-sum-exp's input, the ghost token's clamp and
        log inputs, the loss mask as float: 16)
    end of its forward          + L n + 4 n + T ((v + 12) K + 16 (K + 1))
        the captured logits, their fp32 copy (``student_logits.float()``, the max subtracted in place), the teacher's
        values as loaded and their int64 indices, the masked exponentials, the student's and the teacher's
        concatenations, the KL terms and their masked product
    during its backward         + 4 n + 4 T K
        gather's backward scatters into a zeroed fp32 [T, V/t] while the log-softmax it kept is still alive; exp's
        backward makes one more while the first waits (the log-softmax then freed); then the fp32 gradient is cast
        to the logits' dtype and waits, L n, for the cross entropy's backward, which adds its own into it in place
    output-layer backward       as without it, less everything it saved

The saved terms are in flight with the micro-batch like the cross entropy's; alpha, the decode threads, the
DataLoader's prefetch (pinned host memory) and the remote-shard prefetch change nothing on the GPU. Evaluation
(``model.training`` false) computes the LM loss only. The MTP heads' logits get the cross entropy alone (the
capture keeps the main head's, which runs last).
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.derived import te_version
from ..model.resolve import Resolved

__all__ = ["DISTILLATION_VALUE_BYTES", "LossBuffers", "TE_FP32_CE_GRADIENT", "distillation_buffers", "lm_loss_buffers",
           "logit_bytes", "loss_buffers"]

#: The first Transformer Engine release whose fused cross entropy keeps an fp32 gradient rather than the logits
#: (TransformerEngine commit 01bbe3e, "Fix the numerical issue with the Fused CE loss (#3193)"; ``git tag --contains``
#: gives v2.18 first).
TE_FP32_CE_GRADIENT = (2, 18)

#: Bytes per cached teacher log-probability by ``training.distillation_logprobs_dtype`` (the teacher run's
#: ``--logits-save-dtype``: LogitsSaverHooks._DTYPE_MAP, fp16 by default).
DISTILLATION_VALUE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


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


def lm_loss_buffers(r: Resolved) -> LossBuffers:
    """What the cross entropy of one micro-batch's logits costs on one GPU of the last stage (bf16 logits; fp32
    weights give fp32 logits; ``logit_dtype`` sets them apart from the weights): the main head without
    distillation, and each MTP head."""
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
    if te and te_version(pr.transformer_engine_version) < TE_FP32_CE_GRADIENT:
        # before TE 2.18: the gradient written into the logits in place, which are all it saves
        return LossBuffers(saved=lb * n + cap, forward_extra=0, backward_extra=0, output_backward=cast)
    extra_fp32 = 4 * n if tr.cross_entropy_loss_fusion and not te else 0   # torch.compile's out-of-place buffer
    if lb == 4:   # fp32 logits: .float() returns them as they are
        # unfused and native: the loss works in them in place; Transformer Engine keeps its own fp32 gradient
        # beside them until the forward returns, and hands it on without a cast
        return LossBuffers(saved=4 * n + cap, forward_extra=4 * n if te else extra_fp32, backward_extra=extra_fp32,
                           output_backward=cast)
    return LossBuffers(saved=4 * n + cap, forward_extra=lb * n + extra_fp32, backward_extra=lb * n + extra_fp32,
                       output_backward=lb * n - 4 * n + cast)


def distillation_buffers(r: Resolved) -> LossBuffers:
    """The cached-logits KL loss of one micro-batch on one GPU of the last stage, on its own (module docstring):
    (saved, end of its forward, during its backward, 0). Zeros without ``training.distillation_cached_logits``."""
    tr = r.cfg.training
    if not tr.distillation_cached_logits:
        return LossBuffers(0, 0, 0, 0)
    T = r.s * r.b // r.cp
    n = T * (r.Vp // r.t)
    k = min(tr.distillation_top_k, r.Vp)         # LogitsSaverHooks: effective_k = min(k, global vocabulary)
    v = DISTILLATION_VALUE_BYTES[tr.distillation_logprobs_dtype]
    lb = logit_bytes(r.cfg.precision)
    saved = 8 * n + T * (18 * k + 21)
    forward = (lb + 4) * n + T * ((v + 12) * k + 16 * (k + 1))
    return LossBuffers(saved=saved, forward_extra=forward, backward_extra=4 * n + 4 * T * k, output_backward=0)


def loss_buffers(r: Resolved) -> LossBuffers:
    """What the main head's loss of one micro-batch costs on one GPU of the last stage: the cross entropy
    (:func:`lm_loss_buffers`), and with ``training.distillation_cached_logits`` the KL loss after it
    (:func:`distillation_buffers`). Each figure is relative to everything both keep: the cross entropy's forward
    moment comes before the KL loss has saved anything, its backward after the KL loss has freed everything."""
    lm = lm_loss_buffers(r)
    kd = distillation_buffers(r)
    if not kd.saved:
        return lm
    lb = logit_bytes(r.cfg.precision)
    n = (r.s * r.b // r.cp) * (r.Vp // r.t)
    return LossBuffers(saved=lm.saved + kd.saved,
                       forward_extra=max(lm.forward_extra - kd.saved, kd.forward_extra),
                       # the KL loss's backward runs first (its autograd nodes are the newer); its bf16 gradient of
                       # the logits waits through the cross entropy's backward
                       backward_extra=max(kd.backward_extra, lm.backward_extra + lb * n - kd.saved),
                       output_backward=lm.output_backward - kd.saved)
