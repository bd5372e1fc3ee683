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

**RL training** (``training.rl_algorithm`` ppo or grpo; :func:`rl_phase_bytes`). One RL step of verl, NeMo-RL or
slime with the Megatron backend runs, on the same GPUs, the rollout (the inference engine generates), the actor's
log-probability pass (the "old" log-probs), the reference model's (when a KL term needs one) and the policy update,
a normal training step with the RL loss. Sources: verl @ b178a3cd5 (``verl/workers/actor/megatron_actor.py``,
``verl/workers/megatron_workers.py``, ``verl/utils/megatron/tensor_parallel.py``, ``verl/utils/megatron_utils.py``),
NeMo-RL @ 7ea279abf (``nemo_rl/models/policy/workers/megatron_policy_worker.py``), slime @ 624b824a8
(``slime/backends/megatron_utils/actor.py``, ``slime/utils/arguments.py``).

- *Log-probability passes* (``"actor_logprob"``, ``"reference_logprob"``): ``forward_backward_func(forward_only=True)``
  under ``torch.no_grad()`` with micro-batches of ``rl_logprob_micro_batch_size`` sequences, as evaluation: one
  layer's forward at a time, or on the loss stage the logits of one micro-batch. verl's ``logits_processor``
  divides the bf16 logits by the temperature in place and calls Megatron's ``vocab_parallel_cross_entropy``, whose
  ``.float()`` makes an fp32 copy: 2 + 4 = 6 B per logit element. With the entropy (``calculate_entropy``) the
  logits are cloned first (2 B) and ``_VocabParallelEntropy`` makes ``logits - max`` (2 B, then exp and divide in
  place); that is freed before the cross entropy's fp32 copy: max(2 + 2 + 2, 2 + 2 + 4) = 8 B. (fp32 logits: 4 B,
  and with the entropy max(3 x 4, 2 x 4) = 12 B.) verl's actor pass computes the entropy unless the actor is LoRA
  (``compute_log_prob(..., calculate_entropy=not is_lora)``, ``rl_logprob_entropy``); the reference pass never
  (``calculate_entropy=False``); the update with ``entropy_coeff`` != 0 (``rl_entropy``). The log-probs of the
  whole per-GPU batch (global_batch_size / DP
  sequences x rl_response_length tokens, fp32), and the entropies, are kept on the last stage as a list of
  micro-batch outputs and concatenated (twice their size during ``torch.cat``) before going to the host; the other
  stages receive them by broadcast (once their size).
- *States during those passes*: verl's ``compute_log_prob`` loads the weights back (``load_megatron_model_to_gpu(...,
  load_grad=False)``): the gradient buffer stays freed when offloaded, the optimizer states stay on the host with
  ``optimizer_offload``. A ``resident`` reference model (verl's ref ``param_offload`` false) keeps its weights on the
  GPU all step; an ``offloaded`` one brings them for its own pass, when the actor's weights are on the host if
  ``rl_offload_params``; a ``swapped`` one (NeMo-RL's ``use_reference_model``: pinned host state dict copied into the
  actor's parameters; slime's reference weights likewise) adds no weights.
- *Policy update* (``"policy_update"``): the steady step, plus the reference's weights when resident, plus the RL
  loss's per-token tensors of each micro-batch in flight (input ids, attention mask and positions in int64 over the
  sequence; responses and response mask in int64, old log-probs, advantages and, with a reference, its log-probs in
  fp32 over the response), plus with the entropy the logits and their softmax ``_VocabParallelEntropy`` saves for its
  backward (2 x 2 B per logit element of one micro-batch, an upper bound at the steady peak). The logits of the loss
  are those of the configured loss implementation: verl's unfused path is Megatron's unfused cross entropy
  (``cross_entropy_loss_fusion`` false).
- *Rollout* (``"rollout"``): while vLLM/SGLang holds ``rl_rollout_gpu_memory_fraction`` of the GPU, the training side
  keeps what is not offloaded: the weights unless ``rl_offload_params`` (verl's ``param_offload`` copies the
  parameter buffers to pinned host memory), the gradient buffer unless ``rl_offload_grads`` (verl frees it with the
  parameters: ``grad_data.storage().resize_(0)``), the optimizer states unless ``rl_offload_optimizer``, a resident
  reference model's weights, the run-long buffers and the step's fp32 gradient copies (with the optimizer);
  nothing else transient (``aggressive_empty_cache`` after every call). NeMo-RL's
  ``offload_after_refit`` moves the weights and gradients (and the optimizer with ``offload_optimizer_for_refit``);
  slime's colocated ``--offload-train`` pauses every training allocation (``torch_memory_saver``). The phase's bytes
  are the training side's; :func:`estimator.formats.gpus.fit` adds the engine's fraction of the GPU.
"""

from __future__ import annotations

from typing import NamedTuple

from .optimizer_step import FP32, PERSISTENT_BUFFERS, te_keeps_master_weights

__all__ = ["PHASE_NAMES", "PHASES", "PhaseInputs", "RL_PHASES", "RLInputs", "checkpoint_copies_per_param",
           "logprob_bytes_per_logit", "phase_bytes", "rl_phase_bytes"]

#: Phase keys in the order they are reported, and their names in text and in ``Estimate.peak_phase``.
PHASES = ("steady_step", "first_step", "evaluation", "checkpoint_save", "checkpoint_load")
PHASE_NAMES = {"steady_step": "steady step", "first_step": "first step", "evaluation": "evaluation",
               "checkpoint_save": "checkpoint save", "checkpoint_load": "checkpoint load",
               "actor_logprob": "actor log-prob pass", "reference_logprob": "reference log-prob pass",
               "policy_update": "policy update", "rollout": "rollout"}

#: The phases of one RL step (training.rl_algorithm ppo or grpo), reported after :data:`PHASES`.
RL_PHASES = ("actor_logprob", "reference_logprob", "policy_update", "rollout")

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


class RLInputs(NamedTuple):
    """What one stage's RL phases are built from, in bytes (:func:`rl_phase_bytes`)."""

    weights: int            # the actor's weights on this GPU (also the reference model's: same architecture)
    gradients: int          # the gradient buffer
    optimizer: int          # master weights and moments
    persistent: int         # run-long buffers (GEMM workspaces, ...)
    kept_after_step: int    # fp32 gradient copies and retained MoE inputs alive after the optimizer step
    layer_forward: int      # one layer's forward at micro_batch_size, under no_grad (an upper bound)
    logit_elements: int     # logit elements of one micro-batch of micro_batch_size on this GPU (0: no loss here)
    forward_backward: int   # the steady forward/backward peak
    optimizer_step: int     # the steady optimizer step's peak
    in_flight: int          # micro-batches in flight at the steady peak
    micro_batch_size: int
    seq_length: int
    sequences: int          # sequences per data-parallel rank in one RL step (global_batch_size / DP)
    logit_bytes: int        # bytes per logit element as the output layer produces it (2 bf16, 4 fp32)


def logprob_bytes_per_logit(act: int, entropy: bool) -> int:
    """Peak bytes per logit element of a forward-only log-probability pass (verl's ``logits_processor``): the
    logits (``act`` B) and Megatron's fp32 copy in ``vocab_parallel_cross_entropy`` (none when already fp32); with
    the entropy, a clone of the logits besides, and before the cross entropy ``_VocabParallelEntropy``'s shifted
    exponentials (``act`` B)."""
    copy = 4 if act != 4 else 0
    return max(3 * act, 2 * act + copy) if entropy else act + copy


def rl_phase_bytes(cfg, x: RLInputs) -> dict:
    """Allocated peak of every RL phase of one stage (keys :data:`RL_PHASES`), and the parts above the resident
    states, as ``{"phase": bytes, ..., "_parts": {phase: {name: bytes}}}``; see the module's "RL training".

    With W, G, O the actor's weights, gradients and optimizer, P the run-long buffers, K what the step leaves alive,
    Wr the reference's weights where it has its own (resident, or offloaded during its own pass), mb the log-prob
    micro-batch over micro_batch_size:

        actor_logprob     = W + G' + O' + K' + P + Wr(resident) + max(layer x mb, logits x mb x B_lp) + log-prob batch
        reference_logprob = W' + G' + O' + K' + P + Wr(resident, offloaded) + the same forward and batch
        policy_update     = max(forward_backward + per-token tensors + entropy's saved logits, optimizer_step)
                            + Wr(resident)
        rollout           = W' + G' + O' + K' + P + Wr(resident)

    G' and O' are 0 when offloaded (K' with O'); W' is 0 when the actor's weights are offloaded, except when a
    swapped reference is loaded into them."""
    tr = cfg.training
    ref = tr.rl_reference_model
    lb = tr.rl_logprob_micro_batch_size or x.micro_batch_size
    resp = tr.rl_response_length or x.seq_length
    w_keep = 0 if tr.rl_offload_params else x.weights
    g_keep = 0 if tr.rl_offload_grads else x.gradients
    o_keep = 0 if tr.rl_offload_optimizer else x.optimizer
    k_keep = 0 if tr.rl_offload_optimizer else x.kept_after_step
    ref_resident = x.weights if ref == "resident" else 0
    ref_own = x.weights if ref in ("resident", "offloaded") else 0
    layer = x.layer_forward * lb // x.micro_batch_size
    ent = tr.rl_logprob_entropy      # the actor's pass only: verl's reference pass has calculate_entropy=False

    def forward_and_batch(entropy):
        logits = logprob_bytes_per_logit(x.logit_bytes, entropy) * x.logit_elements * lb // x.micro_batch_size
        per_seq = FP32 * resp * (2 if entropy else 1)       # fp32 log-probs (and entropies) of one sequence
        return max(layer, logits), (2 * per_seq * x.sequences if x.logit_elements else FP32 * resp * x.sequences)

    lp_forward, lp_batch = forward_and_batch(ent)
    ref_forward, ref_batch = forward_and_batch(False)
    base = g_keep + o_keep + k_keep + x.persistent
    actor = x.weights + ref_resident + base + lp_forward + lp_batch
    reference = ((x.weights if ref == "swapped" else w_keep + ref_own) + base + ref_forward + ref_batch
                 if ref != "none" else 0)
    tokens = 3 * 8 * x.seq_length + resp * (8 + 8 + FP32 + FP32 + (FP32 if ref != "none" else 0))
    per_token = x.in_flight * x.micro_batch_size * tokens
    entropy_saved = 2 * x.logit_bytes * x.logit_elements if tr.rl_entropy else 0
    update = max(x.forward_backward + per_token + entropy_saved, x.optimizer_step) + ref_resident
    rollout = w_keep + g_keep + o_keep + k_keep + x.persistent + ref_resident
    lp_parts = {"logprob_forward": lp_forward, "logprob_batch_buffers": lp_batch}
    ref_parts = {"logprob_forward": ref_forward, "logprob_batch_buffers": ref_batch}
    return {
        "actor_logprob": actor, "reference_logprob": reference, "policy_update": update, "rollout": rollout,
        "_parts": {
            "actor_logprob": {**lp_parts, **({"reference_weights": ref_resident} if ref_resident else {})},
            "reference_logprob": ({**ref_parts, **({"reference_weights": ref_own} if ref_own else {})}
                                  if ref != "none" else {}),
            "policy_update": {k: v for k, v in (("reference_weights", ref_resident), ("rl_per_token_tensors", per_token),
                                                ("entropy_saved_logits", entropy_saved)) if v},
            "rollout": {"reference_weights": ref_resident} if ref_resident else {},
        },
        # the actor's states resident in each RL phase (the rest is on the host or freed)
        "_states": {"actor_logprob": (x.weights, g_keep, o_keep), "reference_logprob": (
            (x.weights if ref == "swapped" else w_keep), g_keep, o_keep), "policy_update": None,
            "rollout": (w_keep, g_keep, o_keep)},
    }


def rl_counted(cfg) -> tuple:
    """The RL phases a run goes through (none unless training.rl_algorithm is set; the reference pass with a
    reference model; the rollout when the engine is colocated, rl_rollout_gpu_memory_fraction set)."""
    tr = cfg.training
    if tr.rl_algorithm == "none":
        return ()
    out = ["actor_logprob"]
    if tr.rl_reference_model != "none":
        out.append("reference_logprob")
    out.append("policy_update")
    if tr.rl_rollout_gpu_memory_fraction is not None:
        out.append("rollout")
    return tuple(out)
