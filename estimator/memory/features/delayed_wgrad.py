"""Delayed weight gradients (``delay_wgrad_compute``) in the combined 1F1B step of expert-parallel overlap.

What Megatron-Core does (Megatron-LM @ d98e8a64; Transformer Engine @ d0067d0d):

- It needs ``overlap_moe_expert_parallel_comm`` (transformer/transformer_config.py ``__post_init__``: "must be
  enabled when enabling delay_wgrad_compute") and Transformer Engine (training/arguments.py). Every Transformer
  Engine linear of a decoder layer gets ``delay_wgrad_compute=True`` (extensions/transformer_engine.py
  ``TELinear``, ``TELayerNormColumnParallelLinear``, ``TEColumnParallelLinear``, ``TERowParallelLinear``,
  ``TEGroupedLinear``): attention (QKV, the MLA down- and up-projections, the output projection), the dense
  MLP, the shared experts, the routed experts' grouped GEMMs, the latent projections. Not the output layer
  (``tensor_parallel.ColumnParallelLinear``, whose ``backward_dw`` does nothing) nor the router (a plain matmul).
- Such a linear's backward computes only the data gradient and puts what the weight gradient needs into its
  ``WeightGradStore`` (module/_common.py): ``[input, grad_output]`` (module/linear.py and
  layernorm_linear.py ``wgrad_store.put([inputmat_total / ln_out_total, grad_output], wgrad_gemm)``;
  grouped_linear.py ``put([inputmats, grad_output, wgrad_list], grouped_gemm_wgrad)``) instead of computing it
  and freeing them. The input is the one the weight gradient reads: under sequence parallelism the
  column-parallel linears' all-gathered input ([T, h], not the [T/t, h] they saved), and the row-parallel
  ones' all-gathered output gradient ([T, h]); both are freed by the plain path right after the GEMM
  (``clear_tensor_data``). ``backward_dw`` pops the store and runs the GEMM (base.py / grouped_linear.py
  ``backward_dw``), into ``main_grad`` with gradient-accumulation fusion (nothing more allocated); without it
  the plain linears allocate the gradient there, while ``GroupedLinear`` allocates its packed
  [experts, out, in] gradient in the backward itself (``wgrad_packed``, kept in the store) and also returns
  those not-yet-computed tensors to autograd, which copies them into each weight's ``.grad`` because the store
  still references them (PyTorch's AccumulateGrad steals a gradient only when nothing else holds it);
  ``backward_dw`` then replaces ``.grad``.
- When (models/common/model_chunk_schedule_plan.py ``TransformerLayerSchedulePlan.run``, forward layer f beside
  backward layer b): b's combine backward; f's pre-dispatch forward (attention, pre-MLP norm, router, shared
  experts, permutation); b's MLP backward (the experts' or dense MLP's data gradients); f's dispatch
  all-to-all; **b's MLP backward_dw** (``b_layer.mlp.backward_dw()``: models/gpt/fine_grained_callables.py
  maps the "mlp" node to ``layer.mlp``, i.e. ``MoELayer.backward_dw`` for the routed experts and
  fc2_latent_proj, ``MLP.backward_dw`` for a dense layer); b's dispatch backward; f's MLP and combine; b's
  pre-dispatch backward (router, shared experts, attention); **b's pre-dispatch backward_dw**
  (``_BackwardDWWrapper`` in models/common/utils.py: attention, shared experts, fc1_latent_proj) at the end
  of the layer step, except for the chunk's first layer, whose runs after the pipeline send and receive
  (``TransformerModelChunkSchedulePlan.run``), still before the forward chunk's output layer and loss. So
  nothing delayed outlives its combined step, and the loss phase is untouched.
- The gradient reduction (distributed optimizer buckets, Megatron-FSDP's reduce-scatter) is triggered from
  ``backward_dw`` instead of the backward hook (distributed/distributed_data_parallel.py
  ``skip_backward_post_hook``; ``TransformerLayerNode.backward_dw``): it moves in time, its buffers do not
  change.

The model: the plain combined step (:mod:`.schedule`) peaks in the backward layer's MLP backward (moment 3
there): the held set + the forward layer's pre-dispatch part and its waiting tokens + the backward layer's
held gradients and the experts' output gradient X + one backward working set (or, with expert TP, in the forward
layer's MLP node, moment 6). Delaying adds two later moments in it, beside the held set (which still counts the
backward layer whole), and the step takes the largest. In bytes (B per element; T tokens per rank, Tn = T/t
under sequence parallelism, R routed rows, P = Tn k the rows the all-to-all moves (on the receiving side, as
here, times the overload factor: estimator/model/layers/moe.py; R with the flex dispatcher:
HybridEP's permuted rows, a bound on DeepEP's received tokens), d = latent size or h, fm the expert width /
expert TP, up = 2 gated, El local experts, f dense width, fs shared width, l latent size, t tensor-parallel
size)::

    MLP window (f's dispatch, before b's MLP backward_dw), b's MLP part:
      MoE    B R (fm up + d)               fc1's and fc2's kept output gradients
             + B P d                       the MLP node's input gradient, waiting for the dispatch backward
             - B R fm up - weighted        fc1's output (the activation's saved input) is freed, and the
             - unpermute source             unweighted activation output; combine's rows (deterministic mode)
             + B Tn h                      latent MoE: fc2_latent_proj's output gradient
             + B R fm                      moe_act recompute: the recomputed fc2 input, kept
             + 2 B El (d fm up + fm d)     without gradient-accumulation fusion: the packed gradients + .grad
      dense  B T f up / t + B T h          fc1's and fc2's output gradients (fc2's gathered under SP)
             + (B T h - norm output kept)  fc1's gathered input
             + B Tn h - B T f up / t       the node's input gradient; fc1's output freed
    plus f's dispatch (an MoE forward layer): its waiting tokens (the all-to-all's input, :mod:`.schedule`) and
    the all-to-all's output B P d, both alive while it runs.

    Pre-dispatch window (end of b's pre-dispatch backward), b's pre-dispatch part:
      attention  B T (a + 2g) dh / t + B T h   QKV's and the output projection's output gradients
                 + (B T h - norm output kept)  QKV's input, all-gathered under SP
      MLA        B Tn (q_lora + kv_lora + rope) + B T a (qk + rope + qk + v) / t + B T h   the projections'
                 output gradients; + B (T - Tn) (q_lora + kv_lora) the up-projections' gathered inputs; the
                 down-projections' input (B Tn h - norm output kept); without q_lora q_proj's gathered input
      shared     B T fs up / t + B T h + (B T h - pre-MLP norm output kept)   (+ B T fs / t recomputed)
      latent     B Tn l                        fc1_latent_proj's output gradient
      + B Tn h                                 the layer input's gradient
      - q, k, v, softmax statistics, kept scores, router tensors, permutation map, shared fc1 output
                                               freed by then (core attention, router, activation backward)
    plus f's output B Tn h (its combine has run; the next layer's input).

    M     = the plain step (:mod:`.schedule`: moment 3, or moment 6 with expert TP)
    W_mlp = max_f (pre + waiting + dispatch output) + max_b (held gradients + MLP window)
    W_pre = max_f (pre + output) + max_b (held gradients + pre-dispatch window)
    step  = held + max(M, W_mlp, W_pre)

the maxima over the layer kinds of the stage (a forward and a backward layer of one step may differ in kind);
the held gradients (the backward layer's output gradient and the .grad copies of its residual and shared
experts' output) stay to the end of the layer step. What is not subtracted (the norms' inputs, freed as the
backward passes them) keeps both windows upper bounds.

Refused as not modelled (:func:`estimator.config.rules.not_modelled`): FP8 (quantised copies of the kept inputs and
gradients), userbuffers (``tp_comm_overlap``: Transformer Engine refuses delayed GEMMs with userbuffers
weight-gradient overlap), CUDA graphs (graphed ``backward_dw``), MTP layers (eh_proj's delayed GEMM),
recompute of the dense MLP, PEFT, activation offloading, and layers other than attention / MLA + MLP / MoE.
"""

from __future__ import annotations

from typing import NamedTuple

from ...model.layers import view
from ...model.layers.attention import qkv_width
from ...model.layers.moe import received_rows, routed_rows
from ..activations import context
from .schedule import ep_overlap_moments

__all__ = ["DelayWindows", "kind_windows", "step_extra"]


class DelayWindows(NamedTuple):
    """The two moments of one layer kind, in bytes beside the held set, the forward layer's pre-dispatch part and
    the backward layer's held gradients: as the backward layer (``mlp``, ``pre``) and as the forward layer
    (``dispatch``)."""

    mlp: int        # b's MLP window: kept output gradients and inputs, input gradient, less what is freed
    dispatch: int   # f's dispatch all-to-all output (its input is the forward layer's waiting tokens; 0 dense)
    pre: int        # b's pre-dispatch window at the end of its backward


def _mixer(r, kind, p: dict, B: int, T: int, Tn: int) -> tuple[int, int]:
    """(kept output gradients and inputs, freed tensors) of the token mixer's linears (module docstring)."""
    h, t = r.h, r.t
    full = B * T * h                    # a [T, h] tensor: a row-parallel output gradient, a gathered input
    freed = p["qkv"] + p["lse"] + p["scores"]
    if kind.mixer == "attention":
        return B * T * qkv_width(r) // t + full + (full - p["norm_out"]), freed
    heads = r.a // t
    qk = r.qk_dim + r.rope_dim
    kept = B * Tn * (r.kv_lora + r.rope_dim) + B * T * heads * (r.qk_dim + r.v_dim) + full
    kept += B * (T - Tn) * r.kv_lora + (B * Tn * h - p["norm_out"])
    if r.q_lora:
        kept += B * Tn * r.q_lora + B * T * heads * qk + B * (T - Tn) * r.q_lora
    else:
        kept += B * T * heads * qk + (full if r.sp else 0)
    return kept, freed


def kind_windows(r, kind, p: dict) -> DelayWindows:
    """The windows of one layer kind (``p``: its named saved tensors, ``LayerActivations.parts``)."""
    c = context(r)
    r = view(r, kind)            # the layer's own head shapes and MLP width
    B, T, Tn, h, t = c.B, c.T, c.Tn, r.h, r.t
    full = B * T * h
    up = 2 if r.gated else 1
    kept, freed = _mixer(r, kind, p, B, T, Tn)
    mlp = dispatch = 0
    if kind.moe:
        if r.fs:
            fs = r.fs // t
            kept += B * T * fs * up + full + (full - p["mlp_norm_out"])
            if "shared_experts" in c.modules:
                kept += B * T * fs              # the recomputed fc2 input
            else:
                freed += B * T * fs * up        # fc1's output, freed by the activation's backward
        kept += B * Tn * r.lat
        freed += p["router"] + p["permute_map"]
        d, fm = r.lat or h, r.fm // r.etp
        rows = routed_rows(r, T, Tn)
        flex = r.cfg.model.moe_token_dispatcher_type == "flex"
        moved = rows if flex else received_rows(r, T, Tn)      # the dispatch all-to-all's output rows
        mlp = B * rows * (fm * up + d) + B * moved * d + (B * Tn * h if r.lat else 0)
        weighted = p["expert_act_out"] - B * rows * fm if p["expert_act_out"] else 0
        mlp -= p["expert_fc1_out"] + weighted + p["unpermute_source"]
        if "moe_act" in c.modules:
            mlp += B * rows * fm
        if not r.cfg.training.gradient_accumulation_fusion:
            mlp += 2 * B * (r.E // r.ep) * (d * fm * up + fm * d)
        dispatch = B * moved * d
    elif kind.mlp == "dense":
        f = r.f // t
        mlp = B * T * f * up + full + (full - p["mlp_norm_out"]) + B * Tn * h - p["fc1_out"]
    return DelayWindows(mlp, dispatch, kept + B * Tn * h - freed)


def step_extra(kinds: list, work: int) -> int:
    """Bytes the delayed weight gradients add to a combined step whose backward working set is ``work``, over the
    stage's layer kinds, each a (:class:`DelayWindows`, :class:`estimator.memory.features.schedule.EpOverlapLayer`)
    pair (module docstring: max(M, W_mlp, W_pre) - M); 0 where neither window exceeds the plain step."""
    if not kinds:
        return 0
    plain = ep_overlap_moments([x for _, x in kinds], work)
    mlp = max(x.pre + x.waiting + w.dispatch for w, x in kinds) + max(x.held_grads + w.mlp for w, x in kinds)
    pre = max(x.pre + x.output for _, x in kinds) + max(x.held_grads + w.pre for w, x in kinds)
    return max(plain, mlp, pre) - plain
