"""The entry point of validation: :func:`validate` collects every problem of a configuration, each naming field,
value and rule.

First each field's value against the schema (:func:`estimator.config.fields.field_problems`), then, when they hold,
:func:`cross_field_problems`: the attention shape, the world-size products, sequence and context parallelism, the
batch and the recompute fields here, and the rules of the modules beside this one, in a fixed order (MoE, RL, the
model's layer kinds, the pipeline split, precision, recipe features). The pipeline split's rules
(:func:`layer_split_problems`) and the interleaved schedule's micro-batch groups (:func:`interleaving_problem`)
are here too: the layout search and the sweeps ask them directly.
"""

from __future__ import annotations

import dataclasses
import math

from .. import hybrid_pattern
from ..derived import default_ffn_hidden_size, recipe_features, virtual_stages
from ..errors import Problem, wrong_type
from ..fields import field_problems
from ..pipeline_layout import layout_problems, placement
from ..schema import Config
from .attention import dsa_split_problems, kv_split_problems
from .features import feature_problems
from .model import model_problems
from .moe import moe_problems
from .precision import precision_problems

__all__ = ["cross_field_problems", "interleaving_problem", "layer_split_problems", "validate"]


def validate(cfg: Config) -> list[Problem]:
    """Every problem of a :class:`Config`, each naming field, value and rule: first each field's value against the
    schema (type and bounds, as the loader checks them, for a Config built by hand or changed with
    ``dataclasses.replace``), then, when they hold, every cross-field rule of Megatron-Core. An empty list means
    valid. Raises :class:`~estimator.config.errors.InputTypeError` (a ``TypeError``) for anything but a Config:
    :func:`~estimator.config.load.load_config` validates a dict, a path or a text (and raises
    :class:`~estimator.config.errors.ConfigError` listing the problems)."""
    if not isinstance(cfg, Config):
        raise wrong_type("validate", "cfg", "a Config", cfg, "estimator.load_config(...) checks a dict, a path or "
                         "YAML/JSON text and raises ConfigError listing every problem")
    return field_problems(cfg) or cross_field_problems(cfg)


def cross_field_problems(cfg: Config) -> list[Problem]:
    """Every cross-field rule of Megatron-Core, each failure naming field, value and rule, for a Config whose
    values have passed the schema's checks (:func:`validate` checks them first)."""
    P: list[Problem] = []
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    t, p, ep, cp = (par.tensor_model_parallel_size, par.pipeline_model_parallel_size,
                    par.expert_model_parallel_size, par.context_parallel_size)
    etp = par.expert_tensor_parallel_size or t
    ws = tr.world_size
    a = m.num_attention_heads
    moe = m.num_experts is not None

    def add(field, value, msg):
        P.append(Problem(field, value, msg))

    # Attention shape.
    if m.kv_channels is None and not m.multi_latent_attention and m.hidden_size % a:
        add("model.hidden_size", m.hidden_size, f"hidden_size ({m.hidden_size}) must be divisible by "
            f"num_attention_heads ({a}) unless kv_channels is set")
    if a % t:
        add("model.num_attention_heads", a, f"num_attention_heads ({a}) must be divisible by "
            f"tensor_model_parallel_size ({t})")
    if m.multi_latent_attention:
        pass
    else:
        g = m.num_query_groups or a
        if a % g:
            add("model.num_query_groups", g, f"num_attention_heads ({a}) must be divisible by "
                f"num_query_groups ({g})")
        dh = m.kv_channels or m.hidden_size // a
        width = (a * (2 if m.attention_output_gate else 1) + g) * dh + g * (m.v_channels or dh)
        P += kv_split_problems("model.num_query_groups", g, t, width)
        for name in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if getattr(m, name) is not None:
                add(f"model.{name}", getattr(m, name), "applies only with multi_latent_attention: true")
    if m.activation_func in ("swiglu", "geglu") and not m.gated_linear_unit:
        add("model.gated_linear_unit", False, f"activation_func {m.activation_func} is gated; "
            "gated_linear_unit must be true")
    ffn = default_ffn_hidden_size(m)
    if ffn % t:
        add("model.ffn_hidden_size", ffn, f"ffn_hidden_size ({ffn}) must be divisible by "
            f"tensor_model_parallel_size ({t})")

    # World size products.
    if ws % (t * p * cp):
        add("training.world_size", ws, f"world_size ({ws}) must be divisible by tensor ({t}) x pipeline ({p}) x "
            f"context ({cp}) parallel sizes = {t * p * cp}")
    if moe and ws % (etp * ep * p):
        add("training.world_size", ws, f"world_size ({ws}) must be divisible by expert tensor ({etp}) x expert "
            f"({ep}) x pipeline ({p}) parallel sizes = {etp * ep * p}")

    # MoE (estimator/config/rules/moe.py).
    P.extend(moe_problems(cfg))

    # RL training (estimator/memory/phases.py): the rl_* fields describe one RL step; without an algorithm they
    # would change nothing, so setting one is refused rather than ignored.
    if tr.rl_algorithm == "none":
        for name, default in (("rl_reference_model", "none"), ("rl_logprob_micro_batch_size", None),
                              ("rl_response_length", None), ("rl_entropy", False), ("rl_logprob_entropy", True),
                              ("rl_offload_params", False),
                              ("rl_offload_grads", False), ("rl_offload_optimizer", False),
                              ("rl_rollout_gpu_memory_fraction", None)):
            if getattr(tr, name) != default:
                add(f"training.{name}", getattr(tr, name), "applies only to RL training: set training.rl_algorithm "
                    "to ppo or grpo")
    else:
        # The RL phases are assembled on Megatron's plain step (estimator/memory/assemble/stage.py); a recipe feature's
        # own step would leave them out, a silent wrong number: refused by name instead.
        for path, value in recipe_features(cfg):
            add(path, value, f"is not modelled together with RL training (training.rl_algorithm: {tr.rl_algorithm}): "
                "the RL phases are built on Megatron's plain training step; turn it off or set rl_algorithm to none")
        s_rl = tr.seq_length or m.max_position_embeddings
        if tr.rl_response_length is not None and s_rl and tr.rl_response_length > s_rl:
            add("training.rl_response_length", tr.rl_response_length, f"the response is part of the sequence: must "
                f"be <= seq_length ({s_rl}), which is prompt plus response")
        f = tr.rl_rollout_gpu_memory_fraction
        if f is not None and not 0.0 < f < 1.0:
            add("training.rl_rollout_gpu_memory_fraction", f, "must be a fraction of the GPU's memory strictly "
                "between 0 and 1 (vLLM's gpu_memory_utilization, e.g. 0.5)")

    # Hybrid (Mamba) layers, gated delta nets, latent MoE, gated attention (estimator/config/rules/model.py).
    P.extend(model_problems(cfg))

    # Sequence.
    s = tr.seq_length or m.max_position_embeddings
    if s is None:
        add("training.seq_length", None, "is required (or set model.max_position_embeddings)")
    else:
        if m.max_position_embeddings is not None and s > m.max_position_embeddings:
            add("training.seq_length", s, f"seq_length ({s}) must be <= max_position_embeddings "
                f"({m.max_position_embeddings})")
        if cp > 1 and s % (2 * cp):
            add("training.seq_length", s, f"seq_length ({s}) must be divisible by 2 x context_parallel_size "
                f"= {2 * cp} (load-balanced context parallelism)")
        if tr.sequence_parallel and (s // cp) % t:
            add("training.seq_length", s, f"seq_length / context_parallel_size ({s // cp}) must be divisible "
                f"by tensor_model_parallel_size ({t}) with sequence parallelism")
    if tr.sequence_parallel and t == 1:
        add("training.sequence_parallel", True, "needs tensor_model_parallel_size > 1")
    # Hierarchical context parallelism: Megatron-LM @ d98e8a64 : megatron/training/arguments.py (the product of
    # --hierarchical-context-parallel-sizes is the CP size; a2a+p2p needs them), as Megatron-Bridge @ 067f987d :
    # src/megatron/bridge/training/config.py _validate_cp_comm_type checks the same two.
    hcp = par.hierarchical_context_parallel_sizes
    if hcp is not None and math.prod(hcp) != cp:
        add("parallelism.hierarchical_context_parallel_sizes", list(hcp), f"the product of the sizes "
            f"({math.prod(hcp)}) must equal context_parallel_size ({cp})")
    if cp > 1 and par.cp_comm_type == "a2a+p2p" and hcp is None:
        add("parallelism.hierarchical_context_parallel_sizes", None, "is required with cp_comm_type a2a+p2p "
            "(the a2a and p2p group sizes, inner first, e.g. [8, 2] for CP 16; Megatron-LM and Megatron-Bridge "
            "refuse a2a+p2p without them)")
    # The all-to-all splits each rank's heads over its group: Transformer Engine @ d0067d0 :
    # transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py flash_attn_a2a_communicate
    # views [.., h, d] as [.., cp, h // cp, d], for the queries, keys and values alike.
    a2a = cp if par.cp_comm_type == "a2a" else (hcp[0] if par.cp_comm_type == "a2a+p2p" and hcp else 1)
    if cp > 1 and a2a > 1 and not a % t:
        heads = {"query heads": a // t}
        if not m.multi_latent_attention:
            g = m.num_query_groups or a
            if not g % t or not t % g:
                heads["key/value heads"] = max(g // t, 1)     # one each with fewer heads than ranks
        for what, n in heads.items():
            if n % a2a:
                field = "parallelism.cp_comm_type" if par.cp_comm_type == "a2a" else \
                    "parallelism.hierarchical_context_parallel_sizes"
                add(field, par.cp_comm_type if par.cp_comm_type == "a2a" else list(hcp),
                    f"the all-to-all of {par.cp_comm_type} splits each rank's {what} ({n} per tensor-parallel "
                    f"rank) over its group of {a2a}: {n} must be divisible by {a2a}")
                break
    if cp > 1 and tr.attention_backend in ("unfused", "local"):
        add("training.attention_backend", tr.attention_backend, "context parallelism needs flash or fused "
            "attention (Transformer Engine)")

    # Batch.
    if tr.global_batch_size is not None and ws % (t * p * cp) == 0:
        dp = ws // (t * p * cp)
        gbs, b = tr.global_batch_size, tr.micro_batch_size
        if gbs % (b * dp):
            add("training.global_batch_size", gbs, f"global_batch_size ({gbs}) must be divisible by "
                f"micro_batch_size ({b}) x data-parallel size ({dp}) = {b * dp}")
        else:
            problem = interleaving_problem(p, virtual_stages(par), gbs // (b * dp),
                                           par.microbatch_group_size_per_vp_stage)
            if problem:
                add("training.global_batch_size", gbs, f"global_batch_size ({gbs}) / (micro_batch_size ({b}) x "
                    f"data-parallel size ({dp})) = {problem}")

    # Recompute.
    g = tr.recompute_granularity
    if tr.recompute_method is not None and g != "full":
        add("training.recompute_method", tr.recompute_method, "applies only with recompute_granularity: full")
    if tr.recompute_num_layers is not None and g != "full":
        add("training.recompute_num_layers", tr.recompute_num_layers,
            "applies only with recompute_granularity: full")
    if tr.recompute_modules is not None and g != "selective":
        add("training.recompute_modules", list(tr.recompute_modules),
            "applies only with recompute_granularity: selective")
    if g == "full" and tr.recompute_method is None and tr.recompute_num_layers not in (None,):
        add("training.recompute_method", None, "recompute_num_layers needs recompute_method (uniform or block)")
    if tr.distribute_saved_activations:
        # Megatron-LM @ d98e8a64 : megatron/training/arguments.py (TP > 1, full granularity, a method) and
        # megatron/core/transformer/transformer_config.py __post_init__ (not with sequence parallelism).
        if par.tensor_model_parallel_size == 1:
            add("training.distribute_saved_activations", True, "needs tensor_model_parallel_size > 1 (the "
                "checkpoints are split over the tensor-parallel group)")
        if g != "full" or tr.recompute_method is None:
            add("training.distribute_saved_activations", True, "needs recompute_granularity: full with a "
                "recompute_method (uniform or block), as Megatron-LM requires")
        if tr.sequence_parallel:
            add("training.distribute_saved_activations", True, "must be false with sequence_parallel (Megatron-Core "
                "refuses both; sequence parallelism already splits the layer input over the tensor-parallel group)")

    # Pipeline layout.
    P.extend(layer_split_problems(cfg))

    # Precision, deterministic mode and the cuBLAS workspace (estimator/config/rules/precision.py).
    P.extend(precision_problems(cfg))
    P.extend(feature_problems(cfg))
    return P


def interleaving_problem(p: int, vpp: int | None, m: int, group: int | None = None) -> str | None:
    """Why the interleaved schedule refuses ``m`` micro-batches per step, or None.

    Megatron-Core's ``forward_backward_pipelining_with_interleaving`` (``pipeline_parallel/schedules.py``)
    runs the micro-batches in groups of N = ``microbatch_group_size_per_vp_stage`` per model chunk (default:
    the pipeline size p, ``ModelParallelConfig.__post_init__``); it raises unless N <= m, and unless the last
    group, m mod N, is empty or holds at least p. With the default N = p, m must be a multiple of p.
    (N >= p itself is checked with the field, :func:`layer_split_problems`.)
    """
    if vpp is None or vpp <= 1 or p <= 1:
        return None
    n = group or p
    if n == p and m % p:
        return (f"{m} micro-batches per step; with the interleaved schedule (virtual pipeline stages {vpp}) "
                f"Megatron-Core needs a multiple of pipeline_model_parallel_size ({p}), in groups of {p} per "
                "model chunk")
    if n > m:
        return (f"{m} micro-batches per step; the interleaved schedule (virtual pipeline stages {vpp}) runs them in "
                f"groups of {n} (microbatch_group_size_per_vp_stage) per model chunk and Megatron-Core needs at "
                "least one whole group")
    if 0 < m % n < p:
        return (f"{m} micro-batches per step in groups of {n} (microbatch_group_size_per_vp_stage) leave a last "
                f"group of {m % n}; Megatron-Core needs 0 or at least pipeline_model_parallel_size ({p})")
    return None


def layer_split_problems(cfg: Config) -> list[Problem]:
    """Megatron-Core's rules for the pipeline split (:func:`estimator.config.pipeline_layout.layout_problems`; with
    shared DSA top-k, :func:`estimator.config.rules.attention.dsa_split_problems`) and the interleaved schedule's
    micro-batch groups."""
    m, par = cfg.model, cfg.parallelism
    if m.hybrid_layer_pattern is not None:
        out = [Problem(f, v, msg) for f, v, msg in hybrid_pattern.split_problems(m, par)]
        if out:
            return out
        layout = hybrid_pattern.layout_of(m.hybrid_layer_pattern)
        mtp = hybrid_pattern.parse(m.hybrid_layer_pattern).mtp_depths
        if layout is not None:
            par = dataclasses.replace(par, pipeline_model_parallel_layout=layout)
    else:
        mtp = m.mtp_num_layers or 0
    out = [Problem(f, v, msg) for f, v, msg in layout_problems(par, m.num_layers, mtp)]
    if not out and m.dsa_indexer_topk_freq > 1:
        plans, _ = placement(m.num_layers, par.pipeline_model_parallel_size, virtual_stages(par, m),
                             par.num_layers_in_first_pipeline_stage, par.num_layers_in_last_pipeline_stage,
                             par.account_for_embedding_in_pipeline_split, par.account_for_loss_in_pipeline_split,
                             par.pipeline_model_parallel_layout, mtp)
        out += dsa_split_problems(m, plans)
    group = par.microbatch_group_size_per_vp_stage
    if group is not None and not out:
        out += _group_problems(cfg, group)
    return out


def _group_problems(cfg: Config, group: int) -> list[Problem]:
    """``microbatch_group_size_per_vp_stage`` (schedules.py, forward_backward_pipelining_with_interleaving):
    only with virtual stages, and at least the pipeline size (its rules against the number of micro-batches
    are :func:`interleaving_problem`'s)."""
    par = cfg.parallelism
    p, v = par.pipeline_model_parallel_size, virtual_stages(par, cfg.model)
    name = "parallelism.microbatch_group_size_per_vp_stage"
    if v == 1:
        return [Problem(name, group, "applies only to the interleaved schedule (virtual pipeline stages > 1)")]
    if group < p:
        return [Problem(name, group, f"must be >= pipeline_model_parallel_size ({p}) (Megatron-Core)")]
    return []   # against the number of micro-batches: interleaving_problem
