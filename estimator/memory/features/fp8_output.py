"""The output layer in MXFP8 (``precision.fp8_output_proj``): what Transformer Engine's Linear keeps for the LM head.

Megatron-LM @ d98e8a64 : megatron/core/models/gpt/gpt_model.py builds the output layer as
``TELMHeadColumnParallelLinear`` (megatron/core/extensions/transformer_engine.py, a ``TEColumnParallelLinear``)
instead of Megatron-Core's bf16 ``tensor_parallel.ColumnParallelLinear`` when ``fp8_utils.is_mxfp8_output_proj_active``:
``fp8_output_proj`` with ``fp8`` and ``fp8_recipe = mxfp8`` (``TransformerConfig.__post_init__`` refuses the flag
otherwise). The layer is built outside the decoder's ``fp8_model_init`` context (transformer_block.py opens it per
layer), so its weight stays a bf16 parameter even with ``fp8_param_gather``; it runs its forward in an MXFP8
autocast (``get_fp8_context``). It refuses a shared embedding weight (``skip_weight_param_allocation``: tied
embeddings on one stage) and ``defer_embedding_wgrad_compute``. For the last stage's GPU, with V the padded
vocabulary, t the tensor-parallel size, h the hidden size, T = s b / cp tokens, Tn = T / t under sequence parallelism
(else T), B the activations' bytes (TransformerEngine @ d0067d0d : transformer_engine/pytorch/module/linear.py):

- weights: the MXFP8 row-wise and column-wise copies of the V/t x h weight, 1 B each, with their E8M0 scales
  (:func:`estimator.model.fp8_scales.tensor_scale_bytes`), cached across micro-batches as the decoder's linear
  weights are (Megatron's ``TELinear`` passes ``is_first_microbatch``): 2 V/t h + scales (:func:`weight_copies`);
- saved input: the column-wise MXFP8 copy of the local input, Tn h (1 B) + its scales, instead of the bf16 final
  norm output Megatron's ``ColumnParallelLinear`` saves (B Tn h); the same for each MTP depth's call of the output
  layer (:func:`saved_input_change`);
- backward: the logits' gradient quantized both ways (``grad_output_quantizer.set_usage(rowwise=True,
  columnwise=True)``: row-wise for the data gradient, column-wise for the weight gradient), 2 T V/t (1 B) + scales,
  and under sequence parallelism the input's column-wise copy gathered to T h + scales, beside the bf16 gradient
  the loss hands over (:func:`backward_extra`); with fused weight-gradient accumulation Transformer Engine writes
  into ``main_grad`` and returns its cached dummy weight gradient (one per weight shape, V/t x h in the weights'
  dtype, :func:`dummy_wgrad`) instead of the bf16 weight gradient Megatron's ``ColumnParallelLinear`` makes.
"""

from __future__ import annotations

from ...model.fp8_scales import saved_scale_bytes, tensor_scale_bytes

__all__ = ["active", "backward_extra", "dummy_wgrad", "saved_input_change", "weight_copies"]

MXFP8 = "mxfp8"


def active(pr) -> bool:
    """Whether the output layer runs in MXFP8 (``fp8_utils.is_mxfp8_output_proj_active``)."""
    return bool(pr.fp8_output_proj and pr.fp8 and pr.fp8_recipe == MXFP8)


def weight_copies(r) -> int:
    """Bytes of the cached MXFP8 copies of the output layer's weight on one GPU: 2 x V/t x h + both scale tensors."""
    rows = r.Vp // r.t
    return 2 * rows * r.h + tensor_scale_bytes(MXFP8, rows, r.h, True, True, True)


def _tokens(r) -> tuple[int, int]:
    T = r.s * r.b // r.cp
    return T, (T // r.t if r.sp else T)


def saved_input_change(r) -> int:
    """Bytes one call of the output layer saves more (negative: less) for its weight gradient: the column-wise MXFP8
    copy of its local input, Tn x h + scales, instead of the bf16 input, B x Tn x h."""
    _, Tn = _tokens(r)
    B = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    return Tn * r.h + saved_scale_bytes(MXFP8, Tn, r.h) - B * Tn * r.h


def backward_extra(r) -> int:
    """Bytes alive besides the bf16 logits gradient while the output layer runs its backward: the gradient's
    row-wise and column-wise MXFP8 copies, 2 x T x V/t + scales, and with sequence parallelism over TP > 1 the
    input's column-wise copy gathered to T x h + scales."""
    T, Tn = _tokens(r)
    cols = r.Vp // r.t
    out = 2 * T * cols + tensor_scale_bytes(MXFP8, T, cols, True, True, False)
    if Tn != T:
        out += T * r.h + saved_scale_bytes(MXFP8, T, r.h)
    return out


def dummy_wgrad(r, wbytes: int) -> int:
    """Transformer Engine's cached dummy weight gradient of the output layer's shape, V/t x h in the weights' dtype
    (with fused weight-gradient accumulation)."""
    return wbytes * (r.Vp // r.t) * r.h
