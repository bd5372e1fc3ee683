"""Schedules and buffers inside the allocator: expert-parallel overlap, deferred output-layer weight gradients,
FP8 without the weight cache, and bf16 first/last layers in an FP8 run.

- ``overlap_moe_expert_parallel_comm`` (Megatron-LM @ d98e8a64 ``megatron/core/pipeline_parallel/
  schedules.py``): the interleaved schedule runs one more warm-up (chunk-)micro-batch
  (``get_pp_rank_microbatches``: ``num_warmup_microbatches + 1``) and without pipelining the combined 1F1B
  schedule runs the forward of micro-batch i+1 beside the backward of micro-batch i: one more in flight.
- ``defer_embedding_wgrad_compute`` (``tensor_parallel/layers.py``: ``embedding_activation_buffer`` and
  ``grad_output_buffer``; ``utils.py`` ``drain_embedding_wgrad_compute``): the last stage keeps, for each of
  the first ``wgrad_deferral_limit`` micro-batches (all with 0), the output layer's input (B*Tn*h) and its
  logits gradient (B*T*Vp/t) until the pipeline flush, and computes no weight gradient per micro-batch.
- ``disable_parameter_transpose_cache`` (``extensions/transformer_engine.py``: ``is_first_microbatch=None``;
  Transformer Engine @ d0067d0d ``module/linear.py`` ``quantize_weight(cache=False)``): no FP8 copies are cached
  with the weights; each forward quantises them anew (row- and column-wise, 2 B per linear weight) and keeps
  them for that micro-batch's backward, so each in-flight (chunk-)micro-batch holds its chunk's copies.
- ``first_last_layers_bf16`` (``fp8_utils.py`` ``is_first_last_bf16_layer``; ``transformer_block.py`` builds
  those layers outside the FP8 context): the first ``num_layers_at_start_in_bf16`` and last
  ``num_layers_at_end_in_bf16`` decoder layers have weights in the weights' dtype without FP8 copies and save
  their activations as in a bf16 run.
"""

from __future__ import annotations

import dataclasses

__all__ = ["bf16_layers", "bf16_resolved", "deferred_wgrad_bytes", "extra_in_flight"]


def extra_in_flight(r) -> int:
    """(Chunk-)micro-batches in flight beyond the schedule's own count."""
    return 1 if r.cfg.training.overlap_moe_expert_parallel_comm else 0


def deferred_wgrad_bytes(r) -> int:
    """Bytes the last stage keeps for the deferred output-layer weight gradients at the end of the step."""
    tr = r.cfg.training
    if not tr.defer_embedding_wgrad_compute:
        return 0
    m = r.m if r.m is not None else r.p * r.v
    n = min(tr.wgrad_deferral_limit, m) if tr.wgrad_deferral_limit else m
    T = r.s * r.b // r.cp
    Tn = T // r.t if r.sp else T
    B = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    return n * (B * Tn * r.h + B * T * (r.Vp // r.t))


def bf16_layers(r) -> frozenset:
    """Global indices of the decoder layers kept in bf16 in an FP8 run."""
    pr = r.cfg.precision
    if not (pr.fp8 and pr.first_last_layers_bf16):
        return frozenset()
    start, end = pr.num_layers_at_start_in_bf16, pr.num_layers_at_end_in_bf16
    return frozenset(i for i in range(r.L) if i < start or i >= r.L - end)


def bf16_resolved(r):
    """The same resolved configuration with FP8 off (for the activations of the bf16 layers)."""
    pr = dataclasses.replace(r.cfg.precision, fp8=False, fp8_recipe=None, fp8_param_gather=False)
    return dataclasses.replace(r, cfg=dataclasses.replace(r.cfg, precision=pr))
