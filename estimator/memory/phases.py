"""The moments of a run besides the steady training step, each with its own peak per pipeline stage.

The estimate's stage totals are those of the steady training step: the larger of the forward/backward peak and
the optimizer step's (:mod:`estimator.memory.optimizer_step`). A job also runs its first iteration, evaluation
steps, checkpoint saves and a checkpoint load on resume, and users report OOMs in each. This module gives each of
those its allocated peak per stage (what ``torch.cuda.max_memory_allocated`` would read), from what Megatron-Core
does at the pinned revisions (Megatron-LM @ d98e8a64, TransformerEngine @ d0067d0d):

**Between iterations.** ``train_step`` frees nothing when it returns: the gradient buffer is persistent, and
``optimizer.zero_grad()`` runs at the *start* of the next ``train_step`` (``megatron/training/training.py``), so the
fp32 gradient copies the optimizer step made (``main_param.grad = model_grad.float()``) stay alive until then, as
do the recomputed MoE inputs kept from the last backward (both in :func:`estimator.memory.optimizer_step.
optimizer_step_buffers`). Evaluation and checkpoint saves run there, beside them. That base is

    between = model states + run-long buffers (GEMM workspaces, ...) + fp32 gradient copies + retained MoE inputs

**First step** (``"first_step"``). Adam's moments are created lazily, at the first ``optimizer.step()``: PyTorch's
``Adam._init_group`` (``torch.zeros_like`` per parameter, all before ``_multi_tensor_adam`` allocates its
temporaries), TransformerEngine's ``FusedAdam.initialize_state`` (``transformer_engine/pytorch/optimizers/
fused_adam.py``, ``_initialize_state``: ``torch.empty_like``, all states before the kernel); the fp32 master shard
exists from the optimizer's construction (``distrib_optimizer.py``: ``shard_model_param.clone().float()``). So in
the first iteration the forward/backward runs *without* the moments, and the step holds exactly what a steady step
holds (moments, masters, the same temporaries): ``first = max(forward_backward - moments, optimizer_step)``,
never above the steady step in allocated bytes. (TE's FP8 moments are quantized from a one-parameter fp32 buffer
as each is created, less than the step's temporaries; the reserved memory of the first step differs, which the
allocator replay of :mod:`estimator.memory.reserved` covers by replaying two iterations.)

**Evaluation** (``"evaluation"``; counted when ``training.eval_interval`` is set and ``eval_iters`` > 0).
``evaluate()`` runs ``forward_backward_func(forward_only=True)`` under ``torch.no_grad()``: nothing is saved for a
backward pass, the schedules keep no input/output tensors (``if not forward_only``), and a tensor is freed as soon
as nothing refers to it. On top of ``between`` the stage holds one layer's forward at a time, bounded here by
everything that layer would keep for its backward (``LayerActivations.full``: an upper bound, as no_grad frees
earlier), and on the loss stage the logits of one micro-batch with the loss's forward buffers
(:mod:`estimator.memory.loss`). It is usually far below the training step, which holds the activations of every
micro-batch in flight; it can be higher when the training step holds little (full recompute, one micro-batch in
flight) and its peak is the optimizer step with no temporaries of its own (fused Adam), the fp32 gradient copies
being still alive during evaluation. Its micro-batch is ``eval_micro_batch_size`` (Megatron-LM's
``--eval-micro-batch-size``, default ``micro_batch_size``): every tensor of the forward holds that many sequences, so
the forward's bytes scale by eval_micro_batch_size / micro_batch_size.

**Checkpoint save** (``"checkpoint_save"``; counted when ``training.save_interval`` is set). With ``torch_dist``
(Megatron-LM's default; also ``torch_dcp`` and ``fsdp_dtensor``) the whole sharded state dict is built before
anything is written (``megatron/training/checkpointing.py``, ``generate_state_dict``; the distributed optimizer's
default ``dp_reshardable`` layout, ``distrib_optimizer.py`` ``sharded_param_state_dp_reshardable``). Its tensors are
views of the weights, master weights and moments (no copy), except:

- with the precision-aware optimizer where TE keeps the master weights
  (``use_precision_aware_optimizer_no_fp8_or_ds_fp8``), ``_get_main_param_and_optimizer_states`` calls TE's
  ``get_unscaled_state`` for every state of every parameter: a new fp32 tensor for each state held in fp16, bf16 or
  FP8 (``.float()``), the state itself when fp32 or when the master is stored as int16 remainders: 4 B per main
  parameter and such state, all alive until the state dict is written;
- FP8 and NVFP4 weights (``fp8_param_gather``, ``fp4_param_gather``) are dequantized for the writer
  (``strategies/filesystem_async.py``, ``_clone_or_dequantize_if_needed``: any quantized tensor on the GPU): a copy
  in the weights' dtype of the quantized linear weights this rank writes.
  Fully parallel save (``--ckpt-fully-parallel-save``, on by default) spreads the replicated tensors over the
  data-parallel ranks, so about 1/(DP x CP) of them; without it data-parallel rank 0 writes them all (not modelled:
  the default is assumed).

The tensors are then copied to host memory (``preload_tensors``: ``tensor.to("cpu", non_blocking=True)``, pinned)
and the GPU copies freed, before training resumes both with ``async_save`` and without: an asynchronous save holds
the same on the GPU, and a host copy of what this rank writes. Fully parallel save exchanges only metadata between
ranks. The legacy ``torch`` format gathers the distributed optimizer's state through CPU buffers over gloo
(``get_parameter_state_dp_zero(use_gloo_comm=True)``), one parameter's states at a time: nothing of shard size on
the GPU, and the model's state dict is views.

**Checkpoint load** (``"checkpoint_load"``; counted with checkpoint saves: a job that saves resumes from them).
The model, the gradient buffer and the masters exist; ``DistributedOptimizer.load_state_dict`` allocates the moments
(``torch.empty``, their steady size), so all model states are there, but no kernel has run: no GEMM workspace or
other run-long buffer yet. The sharded state dict for loading is built as for saving (the same unscaled fp32 copies
with the precision-aware optimizer, written back by ``set_scaled_state``); ``torch_dist`` loads into those tensors.
The legacy ``torch`` format scatters the optimizer state through CPU buffers. FP8 weights: not counted.

Recipe features that change the model states or the step (FSDP, offloading, PEFT, ...) are not modelled here: their
stages report the steady step only.
"""

from __future__ import annotations

from typing import NamedTuple

from .optimizer_step import FP32, PERSISTENT_BUFFERS, te_keeps_master_weights

__all__ = ["PHASE_NAMES", "PHASES", "PhaseInputs", "checkpoint_copies_per_param", "phase_bytes"]

#: Phase keys in the order they are reported, and their names in text and in ``Estimate.peak_phase``.
PHASES = ("steady_step", "first_step", "evaluation", "checkpoint_save", "checkpoint_load")
PHASE_NAMES = {"steady_step": "steady step", "first_step": "first step", "evaluation": "evaluation",
               "checkpoint_save": "checkpoint save", "checkpoint_load": "checkpoint load"}

#: Checkpoint formats that build the whole sharded state dict before writing.
SHARDED_FORMATS = ("torch_dist", "torch_dcp", "fsdp_dtensor")


class PhaseInputs(NamedTuple):
    """What one stage's phases are built from, in bytes (parameters counted per GPU of the stage)."""

    states: int              # weights + gradients + optimizer states
    moments: int             # of the optimizer states: Adam's moments (created at the first step)
    forward_backward: int    # the steady forward/backward peak
    optimizer_step: int      # the steady optimizer step's peak (0: not modelled)
    persistent: int          # run-long buffers (GEMM workspaces, Megatron's global buffer, TE dummy wgrads)
    kept_after_step: int     # fp32 gradient copies and retained MoE inputs, alive until the next zero_grad
    eval_forward: int        # one layer's forward (and the loss stage's logits) under no_grad
    main_params: int         # master parameters of this GPU (its shard with the distributed optimizer)
    fp8_linear_written: int  # FP8 linear weights this rank writes, dequantized for a save (elements)
    weight_bytes: int        # bytes per element of the weights' dtype


def checkpoint_copies_per_param(cfg) -> int:
    """fp32 copies per main parameter TE's ``get_unscaled_state`` makes when a sharded state dict is built: one per
    Adam moment held in fp16, bf16 or FP8, and one for fp16 or bf16 master weights (int16 remainders and fp32 states
    are returned as they are). 0 unless Transformer Engine keeps the master weights (precision-aware optimizer)."""
    pr = cfg.precision
    if not te_keeps_master_weights(pr) or cfg.training.optimizer != "adam":
        return 0
    n = sum(1 for d in (pr.exp_avg_dtype, pr.exp_avg_sq_dtype) if d != "fp32")
    if pr.main_params_dtype in ("fp16", "bf16"):
        n += 1
    return n


def phase_bytes(cfg, x: PhaseInputs) -> dict:
    """Allocated peak of every phase of one stage (keys :data:`PHASES`), and the transient parts of each phase
    above the model states, by name, as ``{"phase": bytes, ..., "_parts": {phase: {name: bytes}}}``.

    With S the model states, P the run-long buffers, K what the step leaves alive (:class:`PhaseInputs`):

        steady_step     = max(forward_backward, optimizer_step)
        first_step      = max(forward_backward - moments, optimizer_step)
        evaluation      = S + P + K + eval_forward
        checkpoint_save = S + P + K + 4 B x main_params x copies + weight_bytes x fp8_linear_written   (sharded formats)
        checkpoint_load = S + 4 B x main_params x copies                                              (sharded formats)

    The legacy ``torch`` format adds nothing of shard size to ``S + P + K`` (save) or ``S`` (load)."""
    tr = cfg.training
    steady = max(x.forward_backward, x.optimizer_step)
    first = max(x.forward_backward - x.moments, x.optimizer_step)
    between = x.states + x.persistent + x.kept_after_step
    sharded = tr.ckpt_format in SHARDED_FORMATS
    copies = FP32 * x.main_params * checkpoint_copies_per_param(cfg) if sharded else 0
    dequant = x.weight_bytes * x.fp8_linear_written if sharded else 0
    save_parts = {k: v for k, v in (("checkpoint_unscaled_optimizer_states", copies),
                                    ("checkpoint_dequantized_fp8_weights", dequant)) if v}
    return {
        "steady_step": steady, "first_step": first,
        "evaluation": between + x.eval_forward,
        "checkpoint_save": between + copies + dequant,
        "checkpoint_load": x.states + copies,
        "_parts": {"evaluation": {"evaluation_forward": x.eval_forward},
                   "checkpoint_save": save_parts,
                   "checkpoint_load": {"checkpoint_unscaled_optimizer_states": copies} if copies else {}},
    }


def counted(cfg) -> tuple:
    """The phases a run of this configuration goes through (the steady and first steps always; evaluation when
    ``eval_interval`` is set and ``eval_iters`` > 0; checkpoint save and load when ``save_interval`` is set)."""
    tr = cfg.training
    out = ["steady_step", "first_step"]
    if tr.eval_interval is not None and tr.eval_iters > 0:
        out.append("evaluation")
    if tr.save_interval is not None:
        out += ["checkpoint_save", "checkpoint_load"]
    return tuple(out)


def kept_after_step(step: dict) -> int:
    """Of the optimizer step's buffers (:func:`estimator.memory.optimizer_step.optimizer_step_buffers`), what is
    still alive after it: the fp32 gradient copies (freed by the next ``zero_grad``) and the retained MoE inputs."""
    return step.get("optimizer_fp32_grad_copies", 0) + step.get("recompute_retained_inputs", 0)


def persistent_bytes(transient: dict) -> int:
    return sum(transient.get(k, 0) for k in PERSISTENT_BUFFERS)
