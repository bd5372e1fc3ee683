"""CUDA graphs with Transformer Engine's per-layer capture (``cuda_graph_impl: transformer_engine``): when the
allocator counts what, and the peak that follows; the whole-iteration graph (``full_iteration``) at the end of
this docstring. The ``local`` implementation is refused (:mod:`estimator.config.rules.features`).

Sources: Megatron-LM @ d98e8a64 ``megatron/core/transformer/cuda_graphs.py`` (``TECudaGraphHelper``:
``create_cudagraphs`` runs once, at the training step ``cuda_graph_warmup_steps``, before the step;
``_get_sample_arguments`` allocates one static input per (layer, micro-batch) and reuses it once that
micro-batch's backward is done, so one per in-flight micro-batch), ``megatron/training/training.py`` (the
capture call; ``mem-max-allocated-bytes`` is ``allocated_bytes.all.peak`` since the start, never reset),
``transformer/transformer_layer.py`` (``_te_cuda_graph_capture``: one graph per layer and micro-batch holding
the attention and/or the MLP, MoE block or pre-MLP norm + router + shared experts, as ``cuda_graph_modules``
says), Transformer Engine @ d0067d0d ``transformer_engine/pytorch/graph.py`` (``_make_graphed_callables``: with
``_order`` the warm-up runs and the captures follow the pipeline schedule, forward graphs keep their saved
tensors until the matching backward graph is captured, all in one private memory pool;
``_reuse_graph_input_output_buffers`` from TE 2.7) and PyTorch's caching allocator (a private pool's blocks
count as allocated only while a tensor holds them: a graph replay allocates nothing).

Which layers have a graph (``cuda_graphs.py`` ``_layer_is_graphable``; :func:`captured_layer`): with no
``cuda_graph_modules`` every decoder layer, whole; otherwise a ``MambaLayer`` with ``mamba``, a
``TransformerLayer`` whose self-attention is not an ``IdentityOp`` with ``attn``, one with an ``MoELayer`` with
``moe``, ``moe_router`` or ``moe_preprocess``, one with a dense ``MLP`` with ``mlp``. A hybrid model's layers
(``models/hybrid/hybrid_layer_specs.py`` ``hybrid_stack_spec``) hold one part each: the ``*`` layer is a
``TransformerLayer`` with attention and an ``IdentityOp`` MLP, ``-`` an ``MLPLayer`` and ``E`` a
``MoETransformerLayer`` (both ``TransformerLayer`` with ``IdentityOp`` self-attention, so ``attn`` does not capture
them), and ``M`` a ``MambaLayer`` (``ssm/mamba_layer.py``), a ``GraphableMegatronModule`` captured whole by its
``forward``: the fused-norm ``in_proj``, the mixer (``MambaMixer._ssm_training``, the same
``mamba_split_conv1d_scan_combined`` and saved tensors as eager, :mod:`estimator.model.layers.mamba`) and the
bias-dropout-add. Its static input is the hidden states alone (``GraphableMegatronModule.get_layer_static_inputs``,
[s / cp (/ t with sequence parallelism), b, h]), its output the hidden states of the same shape, like a
transformer layer's; its region's backward working set is the Mamba mixer's. A hybrid model's MTP layers are
``HybridStack`` blocks (``transformer/multi_token_prediction.py``), not graphable; a GPT model's MTP layer is a
``TransformerLayer`` the helper takes with the chunk's decoder layers (``mtp.layers[i].mtp_model_layer``), graphed
like them. A repeated MTP layer (``mtp_use_repeated_layer``) over several depths is refused: its one graph per
micro-batch (``transformer/module.py`` ``_te_cuda_graph_replay`` picks it by ``current_microbatch``) would be
replayed at every depth. Gated delta net layers are refused when captured (:mod:`estimator.config.rules.features`).

So a run passes through three peaks, and ``torch.cuda.max_memory_allocated`` is the largest:

    eager    the plain estimate, during the cuda_graph_warmup_steps eager steps (none when it is 0)
    capture  model states + the captured parts' saved tensors of the in-flight (chunk-)micro-batches
             + static buffers + one captured region's backward working set + workspaces
             (the uncaptured modules do not run during the capture)
    steady   model states + static buffers + the uncaptured parts' saved tensors + the eager transients;
             the captured parts live in the private pool, reserved but not allocated

Static buffers, per captured layer and in-flight (chunk-)micro-batch: a static input and output of hidden states,
2 * B * Tn * h bytes, and, where the layer's self-attention is in the graph, a boolean causal mask
[b, 1, s / cp, s], b * s^2 / cp bytes (16 MiB at b 1, s 4096, cp 1): ``TransformerLayer.get_layer_static_inputs``
(transformer_layer.py) builds one for every such (layer, micro-batch) sample, whatever the data path gives
(pretrain_gpt's dataloader mask, or None with ``--no-create-attention-mask-in-dataloader`` and in
Megatron-Bridge, whose replay then copies a fresh all-false mask of that shape into it:
``_get_te_cuda_graph_replay_args``), and Transformer Engine keeps it among the graph's static inputs
(graph.py: the sample kwargs join ``static_input_surface``) for the run. A Mamba layer's graph has no mask.

Backward working set of a captured region: the layer's (whole layer, Mamba layer, MLP or MoE block), or for
attention alone the q/k/v gradients and, with unfused attention, the gradient of the s x s probabilities (the fused
softmax backward writes its result in place). The private pool stays reserved after the capture; the device figure
adds what of it the allocated peak does not already hold.

A vision tower's own graphs (``training.vision_cuda_graph_impl``, estimator/memory/vision.py) are captured right
after the language model's, into a pool of their own: a fourth moment, ``vision_capture`` (:func:`peak`), when the
helper's sample inputs of every micro-batch of the step, then the in-flight ones with the captured layers' tensors
and one region's working set, sit beside the model states and the language model's static buffers; in the steady
step their static buffers add to the language model's and their pool to its pool.

Uncertainty: a fresh run capturing at step 0 has no Adam moments yet (they appear at the first optimizer
step); the estimate counts them (a resumed run has them), so it can be high by their size. Fragmentation of
the private pool is not counted.

Whole-iteration graph (``full_iteration``; Megatron-LM @ d98e8a64 ``megatron/core/full_cuda_graph.py``,
``FullCudaGraphWrapper``): the forward-backward function of every micro-batch is captured once, at training step
``cuda_graph_warmup_steps``, and replayed after; the optimizer step stays eager. The captured iteration allocates what
an eager one does, in the graph's private pool, plus PyTorch's cuBLAS workspaces for the capture stream (one per
cuBLAS handle and stream, ``aten/src/ATen/cuda/CublasHandlePool.cpp``: the forward's and autograd's, 2 x 32 MiB on
Hopper and Blackwell, 2 x 8.125 MiB on an A100, or as ``training.cublas_workspace_config`` sets them:
:func:`estimator.memory.workspaces.torch_cublas_workspace`), kept all run.
``torch.cuda.graph`` empties the caching allocator's cache before it captures, and the private pool keeps the captured
working set (activations and transient buffers above the model states and run-long buffers) reserved for the rest of
the run, beside the regular pool in which the optimizer step then allocates. What the GPU holds is therefore the
step's peak plus that working set: beyond the allocated peak, min(forward/backward peak, step peak) - (model states +
run-long buffers), added to the device figure (:func:`full_iteration_pool`). Measured on one H100 (this project's
batch 7, dense model, local layers): allocated peak -0.70 % before the capture workspaces were counted (-0.14 % with
them); PyTorch's peak reserved 13.72 GiB against 12.28 GiB for the same run without the graph, which the 1.05 reserve
alone put at 11.70.

The optimizer step's graph (``training.optimizer_cuda_graph``, Megatron-LM's --optimizer-cuda-graph; Megatron-LM @
d98e8a64 ``megatron/core/optimizer/optimizer_cuda_graph.py`` ``OptimizerCudaGraphWrapper``, installed by
``megatron/training/training.py`` over ``optimizer.step``): the whole step (the fp32 gradient copies, the gradient
norm, Adam, the copies back into the parameters) is captured once, at training step ``cuda_graph_warmup_steps``,
into a private pool (``full_cuda_graph.get_graph_pool``: a new pool per capture unless
``cuda_graph_use_single_mempool``, off by default) and replayed after. It is the mirror image of the whole-iteration
graph: the pool keeps the step's working set (``step - kept``) reserved while the forward/backward pass allocates
in the regular pool, so the device holds both working sets, beyond the allocated peak min(forward/backward peak,
step peak) - (model states + run-long buffers) (``optimizer_cuda_graph_pool``; the same sum with the whole-iteration
graph as well, each pool holding its own phase). Megatron-Core makes Adam capturable (``optimizer/__init__.py``:
``capturable=config.optimizer_cuda_graph``): Transformer Engine's FusedAdam then keeps its step count and learning
rate as device scalars (bytes) and refuses BF16 remainders and non-fp32 master weights
(``optimizers/fused_adam.py``), which the rules refuse too. Not counted: the eager steps before the capture
(their peak is the plain estimate's), the pool's fragmentation.
"""

from __future__ import annotations

from typing import NamedTuple

from ...config.derived import gpu_arch
from ..workspaces import TORCH_CUBLAS_HANDLES, torch_cublas_workspace

__all__ = ["GraphPeak", "attention_mask_bytes", "captured_bytes", "captured_layer", "capture_work",
           "capture_workspaces", "full_iteration_pool", "peak", "static_bytes_per_layer"]


def capture_workspaces(cfg) -> int:
    """PyTorch's cuBLAS workspaces for the whole-iteration graph's capture stream, held all run, on the
    configuration's GPU (``training.gpu_arch``)."""
    tr = cfg.training
    return TORCH_CUBLAS_HANDLES * torch_cublas_workspace(gpu_arch(cfg), tr.deterministic_mode,
                                                         tr.cublas_workspace_config)


def full_iteration_pool(fwd_bwd: int, step: int, kept: int) -> int:
    """Bytes the whole-iteration graph's private pool holds beyond the allocated peak: the captured working set
    (``fwd_bwd - kept``) beside the step's own (``step - kept``), less the larger of the two, which the allocated
    peak already holds; ``kept`` is the model states and run-long buffers."""
    return max(min(fwd_bwd, step) - kept, 0)



def captured_layer(r, kind) -> bool:
    """Whether a decoder layer of this :class:`~estimator.model.layers.LayerKind` has a graph (with
    ``transformer_engine``: one per layer and micro-batch), as Megatron-Core's ``_layer_is_graphable`` decides."""
    tr = r.cfg.training
    if tr.cuda_graph_impl != "transformer_engine":
        return False
    mods = set(tr.cuda_graph_modules or ())
    if not mods:
        return True
    if kind.mixer == "mamba":
        return "mamba" in mods
    if kind.mixer and "attn" in mods:
        return True
    if kind.moe:
        return bool(mods & {"moe", "moe_router", "moe_preprocess"})
    return kind.mlp == "dense" and "mlp" in mods


def captured_bytes(r, kind, a) -> int:
    """Saved-for-backward bytes of one layer and micro-batch inside its graph (``a``: the layer's activations
    with parts). A Mamba layer is captured whole; a transformer layer's attention with ``attn`` (a hybrid MLP or
    MoE layer's is an ``IdentityOp``: nothing)."""
    if not captured_layer(r, kind):
        return 0
    mods = set(r.cfg.training.cuda_graph_modules or ())
    if not mods or kind.mixer == "mamba":
        return a.attention + a.mlp
    n = a.attention if "attn" in mods else 0
    if ("moe" in mods) if kind.moe else ("mlp" in mods):
        n += a.mlp
    elif kind.moe and "moe_router" in mods:
        p = a.parts
        n += p["mlp_norm_in"] + p["mlp_norm_out"] + p["router"] + p["shared"]
        if "moe_preprocess" in mods:     # MoELayer.preprocess: the fused permutation's row map
            n += p["permute_map"]
    return n


def attention_mask_bytes(r, kind) -> int:
    """The boolean causal-mask static input of one captured layer and micro-batch whose self-attention is in the
    graph (a ``TransformerLayer`` with any mixer but Mamba, captured whole or with ``attn``): [b, 1, s / cp, s],
    1 byte an element, so b * s^2 / cp. Not divided by tensor parallelism: sequence parallelism splits the hidden
    states, not the mask."""
    mods = set(r.cfg.training.cuda_graph_modules or ())
    if not captured_layer(r, kind) or kind.mixer in ("", "mamba") or (mods and "attn" not in mods):
        return 0
    return r.b * (r.s // r.cp) * r.s


def static_bytes_per_layer(r, kind) -> int:
    """The static buffers of one captured layer and micro-batch (0 for a layer without a graph): a static input
    and output of hidden states, 2 * B * Tn * h (n * h with mHC's n residual streams), and with the attention in
    the graph its mask (:func:`attention_mask_bytes`)."""
    if not captured_layer(r, kind):
        return 0
    T = r.s * r.b // r.cp
    Tn = T // r.t if r.sp else T
    B = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    # mHC layers take and give the n residual streams, [s, b, n * h] (transformer_layer.py
    # HyperConnectionTransformerLayer.get_layer_static_inputs)
    m = r.cfg.model
    n = m.num_residual_streams if m.enable_hyper_connections else 1
    return 2 * B * Tn * n * r.h + attention_mask_bytes(r, kind)


def capture_work(r, acts: list) -> int:
    """The backward working set of the largest captured region (held in the private pool at capture); ``acts``
    holds (LayerKind, LayerActivations with parts) per layer kind. A partly captured MoE layer's router region
    adds nothing here: its gradients (a few [tokens, experts] tensors) are far below any other region's."""
    mods = set(r.cfg.training.cuda_graph_modules or ())
    B = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    out = 0
    for kind, a in acts:
        if not captured_layer(r, kind):
            continue
        if not mods or kind.mixer == "mamba" or (("moe" in mods) if kind.moe else ("mlp" in mods)):
            out = max(out, a.backward_peak + a.recompute_peak)
        if kind.mixer in ("attention", "mla") and ("attn" in mods or not mods):
            p = a.parts
            scores = p["scores"]
            if scores and r.cfg.model.attention_dropout > 0:
                scores = scores * B // (2 * B + 1)     # the probabilities' share (no mask, no dropout output)
            out = max(out, p["qkv"] + scores)
    return out


class GraphPeak(NamedTuple):
    """The stage at the largest of the three peaks."""

    phase: str                  # eager | capture | steady
    activations: int            # activations allocated at that peak
    parts: dict                 # activation components not allocated then (negative)
    transient: dict             # transient buffers at that peak
    pool_outside: int           # private-pool bytes the allocated peak does not hold (device figure only)


def peak(r, states: int, activations: int, transient: dict, captured: int, static: int, work: int,
         vision: tuple = (0, 0, 0, 0)) -> GraphPeak:
    """The largest of the eager, capture and steady peaks of one stage.

    ``captured``: the captured parts' saved tensors of the in-flight (chunk-)micro-batches; ``static``: their
    static buffers; ``work``: :func:`capture_work`. ``vision``: the vision tower's own graphs on the first stage
    (estimator/memory/vision.py), (captured, static, created, work) of its micro-batches in flight (``created``: the
    static inputs its helper allocates for every micro-batch of the step); captured after the language model's,
    into a pool of their own, so a fourth moment: ``vision_capture``."""
    v_cap, v_static, v_created, v_work = vision
    eager_t = sum(transient.values())
    eager = states + activations + eager_t if r.cfg.training.cuda_graph_warmup_steps > 0 else -1
    space = {"workspaces": transient["workspaces"]} if "workspaces" in transient else {}
    cap_t = {"cuda_graph_static_buffers": static, "cuda_graph_capture_working_set": work, **space}
    capture = states + captured + sum(cap_t.values())
    # the helper's sample inputs of the whole step, then the in-flight ones with the captured tensors and the work
    v_capture = states + max(static + v_created + sum(space.values()), static + v_static + v_cap + v_work
                             + sum(space.values())) if v_static else -1
    steady_t = dict(transient, cuda_graph_static_buffers=static + v_static)
    steady = states + activations - captured - v_cap + sum(steady_t.values())
    pool = captured + work + v_cap + v_work
    if eager >= max(capture, v_capture, steady):
        return GraphPeak("eager", activations, {}, dict(transient), max(steady + pool - eager, 0))
    if v_capture > capture and v_capture >= steady:
        held = v_cap if v_static + v_cap + v_work >= v_created else 0
        vis_t = ({"cuda_graph_static_buffers": static + v_static, "cuda_graph_capture_working_set": v_work, **space}
                 if held else {"cuda_graph_static_buffers": static + v_created, **space})
        return GraphPeak("vision_capture", held, {"not_run_at_capture": held - activations}, vis_t,
                         max(steady + pool - v_capture, 0))
    if capture >= steady:
        return GraphPeak("capture", captured, {"not_run_at_capture": captured - activations}, cap_t,
                         max(steady + pool - capture, 0))
    return GraphPeak("steady", activations - captured - v_cap, {"cuda_graph_private_pool": -(captured + v_cap)},
                     steady_t, pool)
