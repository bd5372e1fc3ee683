"""Import a verl PPO/GRPO trainer configuration (the Megatron backend) into the estimator's configuration.

verl (volcengine/verl @ b178a3cd5) runs RL with Hydra configurations such as
``verl/trainer/config/ppo_megatron_trainer.yaml`` (flattened in ``_generated_ppo_megatron_trainer.yaml``). This
module reads the keys that decide the actor's memory on the GPU into the ``parallelism``, ``training`` and
``precision`` sections (the model comes from elsewhere: verl names a Hugging Face path, so give the model with a
preset, a configuration file or ``--hf``) and classifies every other key:

- *mapped*: set a field (the table :data:`MAPPED`; e.g. ``actor_rollout_ref.actor.megatron.tensor_model_parallel_size``
  -> ``parallelism.tensor_model_parallel_size``, ``actor.ppo_micro_batch_size_per_gpu`` -> ``training.micro_batch_size``,
  ``rollout.gpu_memory_utilization`` -> ``training.rl_rollout_gpu_memory_fraction``);
- *no effect on memory*: the key changes nothing this estimate counts (learning rates, clipping, seeds, logging,
  the rollout engine's internals, whose share is fixed by ``gpu_memory_utilization``), each with why;
- *refused*: a key of the actor's Megatron engine the estimator does not read (``actor.megatron.*`` or
  ``override_transformer_config.*`` beyond those mapped), set to other than verl's default: the import stops and
  names it, as the Megatron-Bridge importer does.

Hydra interpolations (``${oc.select:a.b,default}``, ``${a.b}``) are resolved against the same file where they
point at a key of it, else to their default.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..config.errors import ConfigError, Problem, UnsupportedError
from ..config.load import parse_text

__all__ = ["VerlImport", "VerlRefusedError", "read_verl_config"]

A = "actor_rollout_ref.actor."
M = A + "megatron."
R = "actor_rollout_ref.rollout."
REF = "actor_rollout_ref.ref."

#: verl key -> (section.field, converter); the converters take the value and return the field's value.
MAPPED = {
    M + "tensor_model_parallel_size": "parallelism.tensor_model_parallel_size",
    M + "pipeline_model_parallel_size": "parallelism.pipeline_model_parallel_size",
    M + "virtual_pipeline_model_parallel_size": "parallelism.virtual_pipeline_model_parallel_size",
    M + "context_parallel_size": "parallelism.context_parallel_size",
    M + "expert_model_parallel_size": "parallelism.expert_model_parallel_size",
    M + "expert_tensor_parallel_size": "parallelism.expert_tensor_parallel_size",
    M + "use_distributed_optimizer": "training.use_distributed_optimizer",
    M + "override_transformer_config.recompute_granularity": "training.recompute_granularity",
    M + "override_transformer_config.recompute_method": "training.recompute_method",
    M + "override_transformer_config.recompute_num_layers": "training.recompute_num_layers",
    M + "override_transformer_config.recompute_modules": "training.recompute_modules",
    M + "optimizer_offload": "training.rl_offload_optimizer",
    A + "ppo_micro_batch_size_per_gpu": "training.micro_batch_size",
    R + "gpu_memory_utilization": "training.rl_rollout_gpu_memory_fraction",
    "data.max_response_length": "training.rl_response_length",
}

#: Keys read by hand (several fields or a derived value), with what they set.
BY_HAND = {
    M + "sequence_parallel": "training.sequence_parallel (with tensor parallelism only, as verl does)",
    M + "param_offload": "training.rl_offload_params and rl_offload_grads (offload_megatron_model_to_cpu copies the "
                         "parameter buffers to pinned host memory and frees the gradient buffer)",
    M + "grad_offload": "read, not used by verl's Megatron worker: the gradient buffer goes with param_offload",
    M + "dtype": "precision.params_dtype",
    A + "ppo_mini_batch_size": "training.global_batch_size (x rollout.n: one optimizer step per mini-batch)",
    A + "entropy_coeff": "training.rl_entropy (!= 0)",
    A + "use_kl_loss": "training.rl_reference_model (a reference model is built)",
    A + "optim.optimizer": "training.optimizer",
    R + "n": "training.global_batch_size (responses per prompt)",
    R + "log_prob_micro_batch_size_per_gpu": "training.rl_logprob_micro_batch_size (the actor's old log-probs)",
    REF + "log_prob_micro_batch_size_per_gpu": "training.rl_logprob_micro_batch_size (the larger of the two)",
    REF + "megatron.param_offload": "training.rl_reference_model offloaded or resident",
    "data.max_prompt_length": "training.seq_length (prompt + response)",
    "algorithm.adv_estimator": "training.rl_algorithm (grpo, else ppo)",
    "algorithm.use_kl_in_reward": "training.rl_reference_model (a reference model is built)",
    "trainer.n_gpus_per_node": "training.world_size (x nnodes)",
    "trainer.nnodes": "training.world_size",
    A + "use_dynamic_bsz": "a note: token budgets per micro-batch are not modelled",
    A + "megatron.use_remove_padding": "a note: packed sequences hold fewer tokens than the full length counted",
    "actor_rollout_ref.model.use_fused_kernels": "a note: verl's fused kernels avoid the full logits",
}

#: Prefixes of keys that change nothing this estimate counts, with why.
NO_EFFECT_PREFIXES = (
    (A + "optim.", "learning-rate schedule and optimizer hyper-parameters: no memory effect"),
    (A + "policy_loss.", "the policy loss's coefficients: per-token scalars"),
    (A + "checkpoint.", "checkpoint contents (verl's checkpoint manager, not a phase modelled here)"),
    (A + "profiler.", "profiling"),
    (A + "router_replay.", "MoE routing replay: the recorded routes (small integer tensors)"),
    (REF, "the reference worker's other settings: its parallel layout follows the actor's"),
    (R, "the rollout engine's internals: its memory is its gpu_memory_utilization share"),
    ("actor_rollout_ref.model.", "the model's source (give the model with a preset, a file or --hf)"),
    ("actor_rollout_ref.hybrid_engine", "colocated actor and rollout: assumed"),
    ("actor_rollout_ref.nccl_timeout", "a timeout"),
    ("data.", "dataset settings"),
    ("algorithm.", "the advantage estimator's coefficients"),
    ("trainer.", "trainer bookkeeping (logging, saving, validation)"),
    ("critic.", "the critic is not counted (the actor side only)"),
    ("reward_model.", "the reward model is not counted (the actor side only)"),
    ("reward_manager.", "reward computation on the host"),
    ("custom_reward_function.", "reward computation on the host"),
    ("global_profiler.", "profiling"), ("transfer_queue.", "data transfer between workers"),
    ("ray_kwargs.", "Ray settings"),
    (A, "the actor's loss coefficients and bookkeeping (clip ratios, KL coefficients, epochs, shuffling)"),
)

#: Keys of the actor's Megatron engine not read, with verl's default: any other value is refused.
ENGINE_DEFAULTS = {
    M + "_target_": "verl.workers.config.McoreEngineConfig", M + "seed": 42, M + "use_dist_checkpointing": False,
    M + "dist_checkpointing_path": None, M + "dist_checkpointing_prefix": "", M + "use_mbridge": True,
    M + "vanilla_mbridge": True, M + "forward_only": False, M + "override_ddp_config": {},
    M + "override_mcore_model_config": {}, M + "override_transformer_config.attention_backend": "flash",
}

_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "float32": "fp32", "fp32": "fp32"}
_INTERP = re.compile(r"^\$\{(?:oc\.select:)?([^,}]+)(?:,([^}]*))?\}$")


class VerlImport(NamedTuple):
    """What a verl configuration means for the estimate."""

    config: dict          # the parallelism, training and precision sections (no model)
    no_effect: tuple      # (key = value, why), in order
    notes: tuple          # what is assumed or approximated, one line each


class VerlRefusedError(UnsupportedError):
    """Keys of the actor's Megatron engine the estimator does not read, set to other than verl's default."""

    def __init__(self, refused: list[tuple[str, str]]):
        self.refused = tuple(refused)
        lines = "\n".join(f"  - {key}: {why}" for key, why in refused)
        super().__init__(f"not modelled, so no estimate (remove these keys to estimate without them):\n{lines}")

    def to_problems(self) -> list[Problem]:
        return [Problem(key.split(" = ")[0], key.split(" = ", 1)[1] if " = " in key else None, why)
                for key, why in self.refused]


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _scalar(text: str):
    t = text.strip()
    if t in ("null", "None", "~", ""):
        return None
    if t in ("true", "True"):
        return True
    if t in ("false", "False"):
        return False
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t.strip("'\"")


def _resolve(flat: dict, key: str, depth: int = 0):
    """The value of ``key`` with Hydra interpolations followed (``${oc.select:a.b,default}``, ``${a.b}``); keys
    relative to their node (``${.x}``) and unknown targets take the default (None without one)."""
    v = flat.get(key)
    m = _INTERP.match(v) if isinstance(v, str) else None
    if m is None or depth > 8:
        return v
    target, default = m.group(1).strip(), m.group(2)
    if target.startswith("."):
        target = key.rsplit(".", 1)[0] + target if not target.startswith("..") else ""
    if target in flat:
        return _resolve(flat, target, depth + 1)
    return _scalar(default) if default is not None else None


def _why_no_effect(key: str) -> str | None:
    for prefix, why in NO_EFFECT_PREFIXES:
        if key.startswith(prefix):
            return why
    return None


def read_verl_config(text: str) -> VerlImport:
    """The configuration sections a verl Megatron trainer configuration (YAML text) describes, the keys without
    effect on memory and the notes; :class:`VerlRefusedError` for keys of the actor's engine not modelled,
    :class:`~estimator.config.errors.ConfigError` for a value of the wrong kind (naming the key)."""
    data = parse_text(text, ".yaml")
    if not isinstance(data, dict) or not isinstance(data.get("actor_rollout_ref"), dict):
        raise ConfigError(Problem("verl_config", None, "a verl trainer configuration must hold actor_rollout_ref "
                                  "(verl/trainer/config/ppo_megatron_trainer.yaml)"))
    flat = _flatten(data)
    get = {k: _resolve(flat, k) for k in flat}
    strategy = get.get(A + "strategy")
    if strategy not in (None, "megatron"):
        raise ConfigError(Problem(A + "strategy", strategy, "only verl's Megatron backend is modelled (strategy: "
                                  "megatron); the FSDP backend's memory is not Megatron-Core's"))
    par: dict = {}
    tr: dict = {}
    prec: dict = {}
    notes: list[str] = []

    def num(key, lo=1):
        v = get.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < lo:
            raise ConfigError(Problem(key, v, f"must be a number >= {lo}"))
        return v

    granularity = get.get(M + "override_transformer_config.recompute_granularity")
    for key, path in MAPPED.items():
        v = get.get(key)
        if v is None or (granularity is None and key.startswith(M + "override_transformer_config.recompute_")):
            continue        # verl's default recompute_modules [core_attn] means nothing without a granularity
        sec, name = path.split(".", 1)
        (par if sec == "parallelism" else tr)[name] = v
    # verl computes the update's log-probs in its logits_processor with Megatron's vocab_parallel_cross_entropy:
    # the unfused loss, whatever the model's own recipe uses.
    tr["cross_entropy_loss_fusion"] = False
    tp = par.get("tensor_model_parallel_size", 1)
    if get.get(M + "sequence_parallel") and tp > 1:
        tr["sequence_parallel"] = True
    if get.get(M + "param_offload"):
        tr["rl_offload_params"] = tr["rl_offload_grads"] = True
    dtype = get.get(M + "dtype")
    if dtype is not None:
        if dtype not in _DTYPES:
            raise ConfigError(Problem(M + "dtype", dtype, f"one of {', '.join(sorted(_DTYPES))}"))
        prec["params_dtype"] = _DTYPES[dtype]
    opt = get.get(A + "optim.optimizer")
    if opt not in (None, "adam"):
        raise ConfigError(Problem(A + "optim.optimizer", opt, "only adam is modelled for verl's Megatron actor"))
    n = num(R + "n") or 1
    mini = num(A + "ppo_mini_batch_size")
    if mini is not None:
        tr["global_batch_size"] = int(mini * n)
    prompt, resp = num("data.max_prompt_length"), num("data.max_response_length")
    if prompt is not None and resp is not None:
        tr["seq_length"] = int(prompt + resp)
    gpus, nodes = num("trainer.n_gpus_per_node"), num("trainer.nnodes")
    if gpus is not None:
        tr["world_size"] = int(gpus * (nodes or 1))
    lps = [v for v in (num(R + "log_prob_micro_batch_size_per_gpu"), num(REF + "log_prob_micro_batch_size_per_gpu"))
           if v is not None]
    if lps:
        tr["rl_logprob_micro_batch_size"] = int(max(lps))
        if len(set(lps)) > 1:
            notes.append(f"the actor's and the reference's log-prob micro-batches differ ({lps[0]} and {lps[1]}): "
                         "the larger is taken for both passes")
    adv = get.get("algorithm.adv_estimator")
    tr["rl_algorithm"] = "grpo" if adv == "grpo" else "ppo"
    if tr["rl_algorithm"] == "ppo":
        notes.append(f"algorithm.adv_estimator {adv}: the critic (its own Megatron model on the same GPUs) is not "
                     "counted; the estimate is the actor's side")
    if get.get(A + "use_kl_loss") or get.get("algorithm.use_kl_in_reward"):
        tr["rl_reference_model"] = "offloaded" if get.get(REF + "megatron.param_offload") else "resident"
    coeff = get.get(A + "entropy_coeff")
    if isinstance(coeff, (int, float)) and not isinstance(coeff, bool) and coeff != 0:
        tr["rl_entropy"] = True
    if get.get(A + "use_dynamic_bsz"):
        notes.append("use_dynamic_bsz: micro-batches are packed to a token budget (ppo_max_token_len_per_gpu); the "
                     "estimate takes ppo_micro_batch_size_per_gpu sequences of full length")
    if get.get(M + "use_remove_padding", True):
        notes.append("use_remove_padding: sequences are packed without padding; every sequence is counted at "
                     "prompt + response length, an upper bound")
    if get.get("actor_rollout_ref.model.use_fused_kernels"):
        notes.append("use_fused_kernels: verl's fused log-prob kernels avoid the full-vocabulary logits the "
                     "estimate counts, an upper bound for the log-prob passes and the update's loss")
    if "micro_batch_size" not in tr:
        raise ConfigError(Problem(A + "ppo_micro_batch_size_per_gpu", None, "must be set (sequences per GPU per "
                                  "forward pass of the update); dynamic batch sizes are not modelled"))

    no_effect: list[tuple[str, str]] = []
    refused: list[tuple[str, str]] = []
    for key, value in flat.items():
        if key in MAPPED or key in BY_HAND:
            continue
        shown = f"{key} = {value!r}"
        if key in ENGINE_DEFAULTS:
            if get.get(key) == ENGINE_DEFAULTS[key] or (key.endswith("_target_")):
                no_effect.append((shown, "verl's default"))
            else:
                refused.append((shown, f"not modelled (verl's default is {ENGINE_DEFAULTS[key]!r})"))
            continue
        if key.startswith(M):
            if get.get(key) in (None, {}, [], False):
                no_effect.append((shown, "off"))
            else:
                refused.append((shown, "a setting of the actor's Megatron engine the estimator does not read"))
            continue
        why = _why_no_effect(key)
        no_effect.append((shown, why or "outside the actor's training memory"))
    if refused:
        raise VerlRefusedError(refused)
    config = {"parallelism": par, "training": tr, "precision": prec}
    return VerlImport(config, tuple(no_effect), tuple(notes))
