"""Schedules and buffers inside the allocator: expert-parallel overlap, deferred output-layer weight gradients,
FP8 without the weight cache, and bf16 first/last layers in an FP8 run.

- ``overlap_moe_expert_parallel_comm`` (Megatron-LM @ d98e8a64 ``megatron/core/pipeline_parallel/
  combined_1f1b.py``, ``models/common/model_chunk_schedule_plan.py`` ``TransformerModelChunkSchedulePlan.run``
  and ``TransformerLayerSchedulePlan.run``, ``models/gpt/fine_grained_callables.py``, ``models/common/utils.py``
  ``TransformerLayerNode`` and ``should_free_input``, ``pipeline_parallel/utils.py`` ``ScheduleNode``): the
  combined 1F1B step runs the forward of one (chunk-)micro-batch layer by layer beside the backward of an
  earlier one: forward layer i with backward layer n-1-i, each backward layer's saved tensors freed as it
  finishes. The forward grows by what the backward frees, so the step holds the same set as the plain schedule
  plus at most one layer. The interleaved schedule's one extra warm-up forward (``get_pp_rank_microbatches``:
  ``num_warmup_microbatches + 1``) only moves the forward of the plain steady state into the warm-up: before
  each combined step the rank holds the plain schedule's W + 1 (chunk-)micro-batches, and no more.

  A layer step (forward layer f, backward layer b) runs its nodes in this order; the allocator sees them in
  that (host) order whatever stream runs them (a tensor freed after ``record_stream`` leaves the allocated figure
  at once, only its block's reuse waits: PyTorch ``c10/cuda/CUDACachingAllocator.cpp``
  ``DeviceCachingAllocator::free``):

  1. b's combine backward: from the gradient G of b's output (B Tn h) to the experts' output gradient X
     (B P d, P = Tn k the rows the all-to-all moves, d = h or the latent size; the busiest rank receives P times
     the overload factor, and what follows the dispatch scales with it: estimator/model/layers/moe.py) and
     the gradients of the
     residual and of the shared experts' output, which AccumulateGrad copies into the ``.grad`` of b's
     pre-dispatch node's detached leaves: G is still referenced by the callers, so it cannot be taken over
     (PyTorch ``torch/csrc/autograd/functions/accumulate_grad.h`` ``accumulateGrad``, ``variable.h``
     ``is_tensor_stealable``). The copies stay until the node is deleted after the step (``__del__``), G with
     the chunk's caller (``TransformerModelChunkSchedulePlan.run`` passes ``b_grad`` down and rebinds it only
     when the layer step returns);
  2. f's pre-dispatch forward (attention, pre-MLP norm, shared experts, router, permutation): its saved
     tensors, and its outputs, the permuted tokens (B P d) and probabilities, wait for the dispatch;
  3. b's MLP backward (the experts' data gradients). ``TransformerLayerSchedulePlan.run`` holds X as
     ``b_grad`` until the node returns (``ScheduleNode.backward`` passes it to ``run_backward`` as the root
     gradient), where the plain backward frees X as soon as its first consumer has run: **the step's peak**;
  4. f's dispatch: the all-to-all's input and output; then the input's storage is freed
     (``should_free_input``: ``untyped_storage().resize_(0)``; not with the flex dispatcher, whose input is a
     view of the pre-MLP norm's output, kept anyway). b's MLP activations are gone by now, and X with them;
  5. (``delay_wgrad_compute``: b's MLP ``backward_dw``) b's dispatch backward: the permuted tokens' gradient
     (B P d) comes back, held by the caller through b's pre-dispatch backward;
  6. f's MLP forward: its saved tensors regrow what b's MLP freed, and beside them, until the node returns, its
     input (P d, freed after the node; with one local expert and no FP8 it is the experts' saved input or kept
     anyway, layers/moe.py), fc2's output (R d, R the routed rows after the expert-TP gather), its re-sorted copy
     with several local experts (``combine_preprocess``: R d) and with expert TP the reduce-scatter's output
     (P d), while b holds the permuted tokens' gradient instead of X and the working set: the second candidate
     for the peak, above 3 only with expert TP and several local experts. Then f's combine, and b's
     pre-dispatch backward beside f's output (B Tn h): the attention's working set beside the permuted tokens'
     gradient, no larger than 3 (P d >= Tn h, and the working set of 3 is the larger of the MoE's and the
     attention's). Moments 4 and 5 are below 3: b's MLP activations (at least R d) and X are gone by then.

  A dense layer has no dispatch and combine: its pre-dispatch part is the attention, whose output (B Tn h)
  waits for the MLP node (pre-MLP norm, MLP, bias-dropout-add); as b, the caller holds G through the MLP
  backward and AccumulateGrad copies the residual's gradient into the MLP node's input leaf (its forward
  transients are not counted, as in the plain schedule). So the step's peak, on top of the held
  (chunk-)micro-batches::

      max( max_f (pre + waiting) + max_b (held gradients + X) + working set,               moment 3
           max_f (pre + MLP forward) + max_b (held gradients + token gradient) )          moment 6
      pre      attention [+ MoE: pre-MLP norm input and output, router, row map, shared experts and their
               output (estimator/model/layers/moe.py: a tensor the schedule nodes keep per micro-batch)]
      waiting  B P d (alltoall), 0 (flex), B Tn h (dense)
      held gradients  2 B Tn h (G and the residual's copy) + B Tn h with shared experts (their copy)
      X        B P d (alltoall), B R d (flex: HybridEP's permuted rows; DeepEP's received tokens, data-dependent,
               at most the routed rows R)
      MLP forward     alltoall: B P d (the input, unless one local expert without FP8) + B R d (fc2's output)
                      + B R d (several local experts) + B P d (expert TP); flex: HybridEP B R d (fc2's output,
                      its input is the experts' own), DeepEP 3 B R d (its received tokens, at most R, and their
                      restored copy beside fc2's output); dense 0
      token gradient  B P d (alltoall), B Tn d (flex), 0 (dense: its input gradient is the residual's copy)

  With ``ep_overlap_early_attn_memory_release`` (``TransformerLayerSchedulePlan.run``: b's
  ``pre_dispatch_computation.backward`` right after b's dispatch backward, before f's MLP forward) moment 6 sits
  beside what b holds once its pre-dispatch backward has run: its held gradients and its input's gradient
  (B Tn h), its pre-dispatch tensors freed and the tokens' gradient consumed::

      max_f (pre + MLP forward) + max_b (held gradients + B Tn h - pre)                  moment 6, early release

  The pre-dispatch backward itself now runs beside f's pre-dispatch part and its dispatched rows (the received
  P rows, X's size: f's dispatch input is freed) and b's held gradients and tokens' gradient (the waiting size):
  the terms of moment 3 with the attention's working set, no larger than moment 3's, for the alltoall dispatcher
  (with flex the tokens' gradient exceeds what waits, so the flag is refused there, as with delay_wgrad_compute,
  whose attention window moves with it).
  the maxima over the layer kinds of the stage (a forward and a backward layer of one step may differ in kind);
  per-row tensors (probabilities, indices) are not counted, as elsewhere. The backward's output layer and loss
  ran first (``post_process.backward`` before the layers), so without pipelining (one chunk, which holds the
  loss) the loss chunk's activations are gone by then; with the interleaved schedule the estimate keeps them
  (the chunk a step's backward runs is not tracked). With ``delay_wgrad_compute`` moment 4 and the end of 6
  hold more (:mod:`.delayed_wgrad`). Megatron-FSDP's gradient buckets (:mod:`.fsdp`) are fetched as the
  backward passes its layers while the forward regrows the activations, so at the chunk's last layer step all
  its units' buckets are there (Megatron-FSDP runs the combined schedule without pipelining only:
  ``combined_1f1b_schedule_for_interleaved_pipelining`` asserts no FSDP).
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
from typing import NamedTuple

from ...model.fp8_scales import quantized
from ...model.layers.moe import dispatch_rows, received_rows, routed_rows
from ..activations import context

__all__ = ["PEAK_PHASES", "EpOverlapLayer", "bf16_layers", "bf16_resolved", "deferred_wgrad_bytes",
           "ep_overlap_backward", "ep_overlap_layer", "ep_overlap_moments", "ep_overlap_peak"]


#: The transient entries of :func:`estimator.memory.stage_memory` of which exactly one, the largest, is the peak
#: (the combined 1F1B step replaces the one it outgrows).
PEAK_PHASES = ("backward_working_set", "loss_forward", "loss_backward", "output_layer_wgrad", "embedding_wgrad",
               "ep_overlap_1f1b_step")


class EpOverlapLayer(NamedTuple):
    """One layer kind in a combined 1F1B layer step (module docstring), in bytes: as the forward layer f (``pre``,
    ``waiting``, ``output``) and as the backward layer b (``held_grads``, ``expert_grad``)."""

    pre: int            # f: the saved tensors of its pre-dispatch part
    waiting: int        # f: the pre-dispatch node's output waiting for the dispatch (or the dense MLP)
    output: int         # f: its output, once its combine has run (the next layer's input)
    held_grads: int     # b: its output's gradient (the chunk's caller) and the .grad copies of its detached leaves
    expert_grad: int    # b: the experts' output gradient X the caller holds through the MLP backward
    mlp_forward: int = 0   # f: its MLP node's tensors beside its saved ones while the node runs (moment 6)
    token_grad: int = 0    # b: the permuted tokens' gradient its caller holds through the pre-dispatch backward


def ep_overlap_layer(r, kind, a) -> EpOverlapLayer:
    """The combined step's figures of one layer kind (``a``: its LayerActivations with parts)."""
    c = context(r)
    B, T, Tn, h = c.B, c.T, c.Tn, r.h
    hidden = B * Tn * h
    held = 2 * hidden                       # G, and the residual's copy (dense: the MLP node input's)
    if not kind.moe:
        return EpOverlapLayer(a.attention, hidden if kind.mlp else 0, hidden, held, 0)
    p = a.parts
    pre = (a.attention + p["mlp_norm_in"] + p["mlp_norm_out"] + p["router"] + p["permute_map"] + p["shared"]
           + p["shared_out"])
    d = r.lat or h
    R = B * routed_rows(r, T, Tn) * d
    m = r.cfg.model
    if m.moe_token_dispatcher_type == "flex":
        # HybridEP hands the experts their permuted rows and takes fc2's output as they are (token_dispatcher.py
        # _HybridEPManager get_permuted_hidden_states_by_experts / get_restored_hidden_states_by_experts); DeepEP
        # permutes its received tokens and restores them (two more tensors of at most R rows).
        waiting, expert, tokens = 0, R, B * Tn * d
        fwd = R if m.moe_flex_dispatcher_backend == "hybridep" else 3 * R
    else:
        # The rank's own tokens' copies (P: the dispatch's input, the token gradient) and the rows it receives
        # (P x the overload factor: the MLP node's input and output, X), equal under balanced routing (layers/moe.py).
        waiting = tokens = B * dispatch_rows(r, T, Tn) * d
        expert = P = B * received_rows(r, T, Tn) * d
        single = r.E // r.ep == 1
        fwd = ((0 if single and not quantized(r.cfg.precision) else P) + R + (0 if single else R)
               + (P if r.etp > 1 else 0))
    return EpOverlapLayer(pre, waiting, hidden, held + (hidden if r.fs else 0), expert, fwd, tokens)


def ep_overlap_backward(layers: list) -> int:
    """What the combined step's backward layer holds beside its working set: max_b (held gradients + X)."""
    return max((x.held_grads + x.expert_grad for x in layers), default=0)


def ep_overlap_moments(layers: list, bwd_work: int, early: bool = False) -> int:
    """The larger of the combined step's two candidate moments beyond the held set (module docstring): b's MLP
    backward (3) and f's MLP forward (6); ``early``: ep_overlap_early_attn_memory_release's moment 6."""
    m3 = max((x.pre + x.waiting for x in layers), default=0) + ep_overlap_backward(layers) + bwd_work
    b_side = ((x.held_grads + x.output - x.pre) if early else (x.held_grads + x.token_grad) for x in layers)
    m6 = max((x.pre + x.mlp_forward for x in layers), default=0) + max(b_side, default=0)
    return max(m3, m6)


def ep_overlap_peak(layers: list, bwd_work: int, loss_chunk: int, first_stage_input: int,
                    early: bool = False) -> int:
    """The peak inside a combined 1F1B layer step, on top of the held (chunk-)micro-batches' activations:

        max(max_f (pre + waiting) + max_b (held gradients + X) + bwd_work,
            max_f (pre + MLP forward) + max_b (held gradients + token gradient))
        + first_stage_input - loss_chunk

    ``layers``: :func:`ep_overlap_layer` of the stage's layer kinds; ``bwd_work``: the backward working set of a
    layer; ``loss_chunk``: the loss chunk's activations when the step's backward has already freed them (0 when
    unknown); ``first_stage_input``: the forward's embedding-chunk activations on the first stage; ``early``:
    ``ep_overlap_early_attn_memory_release``."""
    return ep_overlap_moments(layers, bwd_work, early) + first_stage_input - loss_chunk


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
    """Global indices of the decoder layers kept in bf16 in an FP8 or NVFP4 run (``fp4_utils.py``
    ``get_fp4_context`` skips the same layers as ``fp8_utils.py`` does)."""
    pr = r.cfg.precision
    if not (quantized(pr) and pr.first_last_layers_bf16):
        return frozenset()
    start, end = pr.num_layers_at_start_in_bf16, pr.num_layers_at_end_in_bf16
    return frozenset(i for i in range(r.L) if i < start or i >= r.L - end)


def bf16_resolved(r):
    """The same resolved configuration with FP8 and NVFP4 off (for the activations of the bf16 layers)."""
    pr = dataclasses.replace(r.cfg.precision, fp8=False, fp8_recipe=None, fp8_param_gather=False, fp4=False,
                             fp4_recipe=None, fp4_param_gather=False)
    return dataclasses.replace(r, cfg=dataclasses.replace(r.cfg, precision=pr))
