"""Schedules and buffers inside the allocator: expert-parallel overlap, deferred output-layer weight gradients,
FP8 without the weight cache, and bf16 first/last layers in an FP8 run.

- ``overlap_moe_expert_parallel_comm`` (Megatron-LM @ d98e8a64 ``megatron/core/pipeline_parallel/
  combined_1f1b.py``, ``models/common/model_chunk_schedule_plan.py`` ``TransformerModelChunkSchedulePlan.run``
  and ``TransformerLayerSchedulePlan.run``, ``models/gpt/fine_grained_callables.py``): the combined 1F1B step
  runs the forward of one (chunk-)micro-batch layer by layer beside the backward of an earlier one: forward
  layer i with backward layer n-1-i, each backward layer's saved tensors freed as it finishes. The forward
  grows by what the backward frees, so the step holds the same set as the plain schedule plus at most one
  layer. The interleaved schedule's one extra warm-up forward (``get_pp_rank_microbatches``:
  ``num_warmup_microbatches + 1``) only moves the forward of the plain steady state into the warm-up: before
  each combined step the rank holds the plain schedule's W + 1 (chunk-)micro-batches, and no more.
  Inside a layer step (``TransformerLayerSchedulePlan.run``) the forward's pre-dispatch part (attention, pre-MLP
  norm, router, shared experts: ``submodule_pre_dispatch_forward``) runs before the backward's MLP / experts
  backward; that is the step's peak: the held layers + one pre-dispatch part + the backward working set. The
  backward's output layer and loss ran first (``post_process.backward`` before the layers), so without
  pipelining (one chunk, which holds the loss) the loss chunk's activations are gone by then; with the
  interleaved schedule the estimate keeps them (the chunk a step's backward runs is not tracked). With
  ``delay_wgrad_compute`` the step has two more moments, each another working set (:mod:`.delayed_wgrad`).
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

__all__ = ["PEAK_PHASES", "bf16_layers", "bf16_resolved", "deferred_wgrad_bytes", "ep_overlap_layer",
           "ep_overlap_peak"]


#: The transient entries of :func:`estimator.memory.stage_memory` of which exactly one, the largest, is the peak.
PEAK_PHASES = ("backward_working_set", "loss_forward", "loss_backward", "output_layer_wgrad", "embedding_wgrad")


def ep_overlap_layer(acts: list) -> int:
    """One forward layer's pre-dispatch part, the heaviest layer kind's: its attention, and in an MoE layer the
    pre-MLP norm's input and output, the router's logits and probabilities, the fused permutation's row map
    (MoELayer.preprocess runs in the attention node: fine_grained_callables.py) and the shared experts. ``acts``
    holds (MoE layer?, LayerActivations with parts) per layer kind."""
    out = 0
    for moe, a in acts:
        pre = a.attention
        if moe:
            p = a.parts
            pre += p["mlp_norm_in"] + p["mlp_norm_out"] + p["router"] + p["permute_map"] + p["shared"]
        out = max(out, pre)
    return out


def ep_overlap_peak(layer: int, bwd_work: int, loss_chunk: int, first_stage_input: int) -> int:
    """The peak inside a combined 1F1B layer step, on top of the held (chunk-)micro-batches' activations.

        layer + bwd_work + first_stage_input - loss_chunk

    ``layer``: :func:`ep_overlap_layer`; ``bwd_work``: the backward working set of a layer;
    ``loss_chunk``: the loss chunk's activations when the step's backward has already freed them (0 when
    unknown); ``first_stage_input``: the forward's embedding-chunk activations on the first stage."""
    return layer + bwd_work + first_stage_input - loss_chunk


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
