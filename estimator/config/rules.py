"""Megatron-Core's cross-field rules: what makes a configuration invalid, and what is valid but not modelled.

:func:`validate` collects every broken rule (field, value, rule) of a configuration whose fields each passed the
schema (:mod:`estimator.config.load` checks those); :func:`not_modelled` lists the valid configurations Megatron-LM
runs that the estimator does not model, which :func:`refuse_not_modelled` raises as an
:class:`~estimator.config.errors.UnsupportedError`. The rules of layer patterns and newer layer kinds are in
:mod:`estimator.config.model_rules`, those of recipe features (FSDP, offloading, CUDA graphs, ...) in
:mod:`estimator.config.feature_rules`.
"""

from __future__ import annotations

import dataclasses
import math

from . import hybrid_pattern, tp_overlap
from .derived import (cublas_workspace_config_bytes, default_ffn_hidden_size, grad_comm_dtype, grad_dtype,
                      max_overload_factor, recipe_features, virtual_stages)
from .errors import Problem, UnsupportedError, show, wrong_type
from .feature_rules import feature_problems
from .fields import field_problems
from .model_rules import dsa_split_problems, model_problems
from .pipeline_layout import layout_problems, placement
from .schema import Config

__all__ = ["cross_field_problems", "interleaving_problem", "layer_split_problems", "not_modelled",
           "overload_cap", "refuse_not_modelled", "validate"]


def not_modelled(cfg: Config) -> list[str]:
    """Valid configurations, ones Megatron-LM runs, that the estimator does not model: one sentence each (an
    empty list when it models the configuration). :func:`config_from_dict` raises them as an
    :class:`~estimator.config.errors.UnsupportedError`, not as invalid input."""
    pr, par = cfg.precision, cfg.parallelism
    out = []
    if (par.use_megatron_fsdp and par.num_distributed_optimizer_instances > 1
            and grad_comm_dtype(pr) != grad_dtype(pr)):
        # param_and_grad_buffer.py _bucket_group_gradient_reduce: the outer (DP-Outer) reduction copies each bucket
        # into an hsdp_comm_gbuf bucket of the communication dtype.
        out.append(f"precision.megatron_fsdp_grad_comm_dtype {pr.megatron_fsdp_grad_comm_dtype} with HSDP "
                   f"(num_distributed_optimizer_instances {par.num_distributed_optimizer_instances}): Megatron-FSDP "
                   f"runs it, but the outer reduction's copies of the gradient buckets in a dtype other than the "
                   f"gradient buffer's ({grad_dtype(pr)}) are not modelled")
    if pr.fp8 and pr.params_dtype == "fp32":
        # Megatron-LM @ d98e8a64 runs --fp8-format without --bf16/--fp16 (no rule in arguments.py; CI case
        # moe/deepseek_proxy_fsdp_ep2_fsdp2). Then the FP8 weights (--fp8-param-gather) are Float8Tensors of
        # nominal dtype fp32: the distributed optimizer takes them for fp32 parameters (distrib_optimizer.py
        # "fp32 params", no master copy), Megatron-FSDP gives them bf16 gradient buffers beside fp32 ones for the
        # other parameters (param_and_grad_buffer.py _resolve_group_grad_dtype), and the layers run in fp32
        # around FP8 GEMMs; none of it is modelled or measured here.
        out.append("precision.fp8 true with precision.params_dtype fp32: Megatron-LM runs FP8 compute over fp32 "
                   "weights (no --bf16), but the estimator does not model it (fp32 activations around FP8 "
                   "GEMMs; with fp8_param_gather, FP8 weights that Megatron-Core's optimizers treat as fp32 "
                   "parameters and Megatron-FSDP gives bf16 gradient buffers); use bf16 weights to estimate the "
                   "usual FP8 recipe")
    if pr.fp4 and pr.params_dtype != "bf16":
        # TransformerEngine @ d0067d0d : transformer_engine/pytorch/csrc/quantizer.cpp NVFP4Quantizer::quantize_impl
        # ("RHT is only supported for bfloat16 input"): the recipe's random Hadamard transform of inputs and
        # gradients takes only bf16 tensors.
        out.append(f"precision.fp4 true with precision.params_dtype {pr.params_dtype}: NVFP4's random Hadamard "
                   "transform takes only bf16 inputs in Transformer Engine, and NVFP4 over other weights is not "
                   "modelled; use bf16 weights")
    if pr.fp4 and (par.use_megatron_fsdp or par.use_torch_fsdp2):
        # mcore_fsdp_adapter.py refuses FP4 under Megatron-FSDP 2; version 1 and FSDP2 hold NVFP4 weights in ways
        # not read here.
        out.append("precision.fp4 true with " + ("use_megatron_fsdp" if par.use_megatron_fsdp else "use_torch_fsdp2")
                   + ": NVFP4 weights and their copies under FSDP are not modelled")
    if pr.fp4 and par.tp_comm_overlap:
        # Megatron-LM @ d98e8a64 : megatron/training/initialize.py registers FP8 userbuffers only with --fp8-format;
        # Transformer Engine's layers in an NVFP4 autocast ask for them (module/base.py get_ub(name, use_fp8)).
        out.append("precision.fp4 true with parallelism.tp_comm_overlap: Megatron-LM registers only bf16 "
                   "userbuffers without --fp8-format while Transformer Engine's NVFP4 layers ask for quantized "
                   "ones; not modelled")
    if pr.fp4 and pr.fp4_param_gather and pr.use_precision_aware_optimizer:
        # distrib_optimizer.py _build_model_and_main_param_groups: an NVFP4 weight has no shard view
        # (shard_model_param = None). With OptimizerConfig.fp8_recipe None or delayed (Megatron-LM's default) the
        # precision-aware path hands those to Transformer Engine's FusedAdam; with another fp8_recipe (Megatron-
        # Bridge's MixedPrecisionConfig copies its default, tensorwise) Megatron-Core keeps fp32 masters itself.
        # Which one a run takes is not in this configuration.
        out.append("precision.fp4_param_gather true with use_precision_aware_optimizer: Megatron-Core's "
                   "distributed optimizer has no shard of an NVFP4 weight; who keeps the master weights then "
                   "depends on the optimizer's fp8_recipe (Megatron-Core itself with Megatron-Bridge's tensorwise "
                   "default, none with Megatron-LM's delayed), which is not modelled")
    if (pr.reuse_grad_buf_for_mxfp8_param_ag and pr.fp8 and pr.fp8_param_gather and pr.fp8_recipe != "mxfp8"
            and not par.use_megatron_fsdp):
        # param_and_grad_buffer.py: FP8 weights other than MXFP8 still get a uint8 parameter buffer, but with the
        # flag they keep Transformer Engine's own storage too (_param_uses_quantized_storage skips the remap).
        out.append(f"precision.reuse_grad_buf_for_mxfp8_param_ag true with fp8_recipe {pr.fp8_recipe or 'delayed'}: "
                   "Megatron-Core then keeps both its uint8 parameter buffer and Transformer Engine's own storage "
                   "of the FP8 weights, which is not modelled (the setting is meant for mxfp8)")
    out.extend(tp_overlap.not_modelled(cfg))
    out += _delay_wgrad_not_modelled(cfg)
    out += _dispatch_wgrad_not_modelled(cfg)
    if cfg.model.vision_num_layers is not None and recipe_features(cfg):
        out.append("model.vision_num_layers (a vision tower) with a recipe feature that re-plans the model states "
                   "or activations (" + ", ".join(path for path, _ in recipe_features(cfg)) + "): the tower is "
                   "modelled with Megatron-Core's plain distributed optimizer only")
    if cfg.model.vision_num_layers is not None and cfg.model.vision_model_type == "radio" and (pr.fp8 or pr.fp4):
        # Megatron-Bridge @ 067f987d : nemotron_vl/nemotron_vl_provider.py: the vision and projection configs are
        # deep copies of the language model's, FP8 / NVFP4 recipe included (estimator/model/vision.py).
        out.append(f"model.vision_model_type radio with precision.{'fp8' if pr.fp8 else 'fp4'} true: Nemotron Nano "
                   "VL's RADIO tower and projector copy the language model's config, so they run in FP8 / NVFP4 "
                   "too, which is not modelled for a vision tower")
    return out


def _dispatch_wgrad_not_modelled(cfg: Config) -> list[str]:
    """The combinations of ``overlap_dispatch_backward_with_experts_wgrad`` that estimator/model/layers/moe.py
    (``dispatch_wgrad_window``) does not model."""
    m, tr, pr = cfg.model, cfg.training, cfg.precision
    if not (tr.overlap_dispatch_backward_with_experts_wgrad and m.num_experts):
        return []
    what = "training.overlap_dispatch_backward_with_experts_wgrad with "
    out = []
    if pr.fp8 or pr.fp4:
        out.append(what + ("FP8" if pr.fp8 else "NVFP4") + ": the delayed GEMMs keep quantised copies of their "
                   "inputs and output gradients, which are not modelled")
    if tr.peft is not None:
        out.append(what + "PEFT: delayed GEMMs of frozen experts and their adapters are not modelled")
    if tr.cuda_graph_impl != "none":
        out.append(what + f"cuda_graph_impl {tr.cuda_graph_impl}: graphed expert backward is not modelled")
    if tr.cpu_offloading or tr.fine_grained_activation_offloading:
        out.append(what + "activation offloading: not modelled")
    return out


def _delay_wgrad_not_modelled(cfg: Config) -> list[str]:
    """The combinations of ``delay_wgrad_compute`` that estimator/memory/features/delayed_wgrad.py does not model."""
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    if not (tr.delay_wgrad_compute and tr.overlap_moe_expert_parallel_comm):
        return []
    what = "training.delay_wgrad_compute with "
    out = []
    if pr.fp8 or pr.fp4:
        out.append(what + ("FP8" if pr.fp8 else "NVFP4") + ": the delayed GEMMs keep quantised copies of their "
                   "inputs and output gradients, which are not modelled")
    if par.tp_comm_overlap:
        out.append(what + "tp_comm_overlap: Transformer Engine refuses userbuffers' weight-gradient overlap for a "
                   "delayed GEMM (module/_common.py WeightGradStore, module/linear.py), and the combination is not "
                   "modelled")
    if tr.cuda_graph_impl != "none":
        out.append(what + f"cuda_graph_impl {tr.cuda_graph_impl}: graphed backward_dw is not modelled")
    if m.mtp_num_layers:
        out.append(what + "MTP layers: the MTP layer's delayed eh_proj and its pre-dispatch part are not modelled")
    if m.hybrid_layer_pattern or m.experimental_attention_variant:
        out.append(what + "hybrid, linear-attention or DeepSeek sparse attention layers: only attention / MLA with a "
                   "dense MLP or MoE is modelled")
    freq = m.moe_layer_freq
    all_moe = freq == 1 or (isinstance(freq, list) and all(freq))
    if tr.recompute_granularity == "selective" and "mlp" in (tr.recompute_modules or ()) and not all_moe:
        out.append(what + "recompute of mlp: the recomputed dense MLP's delayed inputs are not modelled")
    if tr.peft is not None:
        out.append(what + "PEFT: delayed GEMMs of frozen weights and adapters are not modelled")
    if tr.cpu_offloading or tr.fine_grained_activation_offloading:
        out.append(what + "activation offloading: not modelled")
    return out


def refuse_not_modelled(cfg: Config) -> None:
    reasons = not_modelled(cfg)
    if reasons:
        raise UnsupportedError("not modelled: " + "; ".join(reasons))


def interleaving_problem(p: int, vpp: int | None, m: int, group: int | None = None) -> str | None:
    """Why the interleaved schedule refuses ``m`` micro-batches per step, or None.

    Megatron-Core's ``forward_backward_pipelining_with_interleaving`` (``pipeline_parallel/schedules.py``)
    runs the micro-batches in groups of N = ``microbatch_group_size_per_vp_stage`` per model chunk (default:
    the pipeline size p, ``ModelParallelConfig.__post_init__``); it raises unless N <= m, and unless the last
    group, m mod N, is empty or holds at least p. With the default N = p, m must be a multiple of p.
    (N >= p itself is checked with the field, :func:`estimator.config.rules.layer_split_problems`.)
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


def overload_cap(m, par, f: float) -> str | None:
    """Why this layout caps an MoE overload factor ``f`` below itself (:func:`~.derived.max_overload_factor`), or
    None when ``f`` is within the layout's bound. For an MoE model whose values passed the field checks.

    The factor describes the routing (how unevenly tokens pick experts); how much of it reaches one rank depends on
    the layout. A layout-changing tool (the search, the sweeps, "Make it fit", a quick control) keeps the factor as
    written and each layout receives what it can: ``min(f, bound)``, said in the estimate's assumptions."""
    bound = max_overload_factor(m, par)
    if f <= bound:
        return None
    E, ep, k = m.num_experts, par.expert_model_parallel_size, m.moe_router_topk or 2
    c = m.moe_expert_capacity_factor
    if ep == 1:
        why = ("with expert_model_parallel_size 1 one rank holds every expert and receives exactly its balanced "
               "rows (its tokens x moe_router_topk), however the routing falls")
    elif c is not None and bound == max(1.0, c) and bound < ep * min(k, E // ep) / k:
        why = (f"moe_expert_capacity_factor {c:g} drops the rows an expert receives beyond {max(1.0, c):g} x its "
               "balanced share (Megatron-Core's token dropping)")
    else:
        why = (f"the busiest expert-parallel rank receives at most every token's rows for its experts: "
               f"expert_model_parallel_size ({ep}) x min(moe_router_topk ({k}), local experts ({E // ep})) / "
               f"moe_router_topk = {bound:g}")
    return f"this layout receives at most {bound:g} x its balanced share: {why}"


def cross_field_problems(cfg: Config) -> list[Problem]:
    """Every cross-field rule of Megatron-Core, each failure naming field, value and rule, for a Config whose
    values have passed the schema's checks (:func:`validate` checks them first)."""
    P: list[Problem] = []
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
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
        if g % t:
            add("model.num_query_groups", g, f"num_query_groups ({g}) must be divisible by "
                f"tensor_model_parallel_size ({t})")
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

    # MoE.
    if moe:
        E = m.num_experts
        k = m.moe_router_topk or 2
        if E % ep:
            add("parallelism.expert_model_parallel_size", ep, f"num_experts ({E}) must be divisible by "
                f"expert_model_parallel_size ({ep})")
        if k > E:
            add("model.moe_router_topk", k, f"moe_router_topk ({k}) must be <= num_experts ({E})")
        fm = m.moe_ffn_hidden_size or ffn
        if fm % etp:
            add("model.moe_ffn_hidden_size", fm, f"moe_ffn_hidden_size ({fm}) must be divisible by "
                f"expert_tensor_parallel_size ({etp})")
        fs = m.moe_shared_expert_intermediate_size
        if fs and fs % t:
            add("model.moe_shared_expert_intermediate_size", fs, f"({fs}) must be divisible by "
                f"tensor_model_parallel_size ({t})")
        if isinstance(m.moe_layer_freq, tuple) and len(m.moe_layer_freq) != m.num_layers:
            add("model.moe_layer_freq", list(m.moe_layer_freq), f"a pattern list must have num_layers "
                f"({m.num_layers}) entries, got {len(m.moe_layer_freq)}")
        if t > 1 and ep > 1 and not tr.sequence_parallel:
            add("training.sequence_parallel", False, "Megatron-Core requires sequence_parallel when both "
                "tensor and expert parallelism are used")
        if m.moe_pad_expert_input_to_capacity and m.moe_expert_capacity_factor is None:
            add("model.moe_pad_expert_input_to_capacity", True, "needs moe_expert_capacity_factor")
    else:
        for name in ("moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                     "moe_expert_capacity_factor"):
            if getattr(m, name) is not None:
                add(f"model.{name}", getattr(m, name), "applies only to MoE models (set num_experts)")
        if m.moe_layer_freq not in (1, None):
            add("model.moe_layer_freq", m.moe_layer_freq if isinstance(m.moe_layer_freq, int)
                else list(m.moe_layer_freq), "applies only to MoE models (set num_experts)")
        for name in ("moe_shared_expert_gate", "moe_router_enable_expert_bias", "moe_pad_expert_input_to_capacity"):
            if getattr(m, name):
                add(f"model.{name}", True, "applies only to MoE models (set num_experts)")
        if ep > 1:
            add("parallelism.expert_model_parallel_size", ep, "expert parallelism needs an MoE model "
                "(set num_experts)")
        if tr.moe_overload_factor != 1:
            add("training.moe_overload_factor", tr.moe_overload_factor, "applies only to MoE models (set "
                "num_experts); a dense model routes no tokens")

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
        # The RL phases are assembled on Megatron's plain step (estimator/memory/assemble.py); a recipe feature's
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

    # Hybrid (Mamba) layers, gated delta nets, latent MoE, gated attention (estimator/config/model_rules.py).
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
            if not g % t:
                heads["key/value heads"] = g // t
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

    # Precision.
    if pr.fp8_recipe is not None and not pr.fp8:
        add("precision.fp8_recipe", pr.fp8_recipe, "applies only with fp8: true")
    # Megatron-LM @ d98e8a64 : megatron/training/arguments.py validate_args (FP4 and FP8 are mutually exclusive;
    # --fp4-param-gather needs --fp4-format) and transformer_config.py __post_init__ (the same two rules).
    if pr.fp4 and pr.fp8:
        add("precision.fp4", True, "excludes fp8: true (Megatron-LM: --fp4-format and --fp8-format cannot be used "
            "together)")
    if pr.fp4 and tr.transformer_impl != "transformer_engine":
        add("precision.fp4", True, "needs training.transformer_impl: transformer_engine (NVFP4 is Transformer "
            "Engine's NVFP4BlockScaling recipe; Megatron-Core's local layers do not quantize)")
    if pr.fp4_recipe is not None and not pr.fp4:
        add("precision.fp4_recipe", pr.fp4_recipe, "applies only with fp4: true")
    if pr.fp4_param_gather and not pr.fp4:
        add("precision.fp4_param_gather", True, "needs fp4: true (Megatron-LM: --fp4-param-gather must be used "
            "together with --fp4-format)")
    if pr.fp8_param_gather and not pr.fp8:
        add("precision.fp8_param_gather", True, "applies only with fp8: true")
    elif pr.fp8_param_gather and not tr.use_distributed_optimizer:
        add("precision.fp8_param_gather", True, "needs training.use_distributed_optimizer: true (Megatron-LM's rule)")
    # MXFP8 weights under the distributed optimizer (Megatron-LM @ d98e8a64 : megatron/core/distributed/
    # param_and_grad_buffer.py, _ParamAndGradBuffer.__init__): the parameter buffer is a view of the gradient
    # buffer; without reuse_grad_buf_for_mxfp8_param_ag the weights are moved into it with Transformer Engine's
    # replace_raw_data, which raises NotImplementedError for MXFP8Tensor (TransformerEngine @ d0067d0d :
    # transformer_engine/pytorch/tensor/utils.py).
    mxfp8_gather = (pr.fp8 and pr.fp8_param_gather and pr.fp8_recipe == "mxfp8" and tr.use_distributed_optimizer
                    and not par.use_megatron_fsdp)
    if pr.reuse_grad_buf_for_mxfp8_param_ag:
        if not pr.fp8_param_gather:
            add("precision.reuse_grad_buf_for_mxfp8_param_ag", True, "needs fp8_param_gather: true (Megatron-Core's "
                "DistributedDataParallelConfig: reuse the gradient buffer only when keeping the weights in MXFP8)")
        elif par.use_megatron_fsdp:
            add("precision.reuse_grad_buf_for_mxfp8_param_ag", True, "applies only without use_megatron_fsdp "
                "(Megatron-LM turns it off for Megatron-FSDP)")
    elif mxfp8_gather:
        add("precision.reuse_grad_buf_for_mxfp8_param_ag", False, "must be true with fp8_recipe mxfp8, "
            "fp8_param_gather and the distributed optimizer: Transformer Engine cannot move MXFP8 weights into "
            "Megatron-Core's parameter buffer (replace_raw_data is not supported for MXFP8Tensor); Megatron-Bridge's "
            "bf16_with_mxfp8_mixed sets it")
    if not pr.use_precision_aware_optimizer:
        for name, default in (("main_grads_dtype", "fp32"), ("main_params_dtype", "fp32"),
                              ("exp_avg_dtype", "fp32"), ("exp_avg_sq_dtype", "fp32")):
            if getattr(pr, name) != default:
                add(f"precision.{name}", getattr(pr, name), "needs use_precision_aware_optimizer: true")
    elif not tr.use_distributed_optimizer:
        add("precision.use_precision_aware_optimizer", True, "needs training.use_distributed_optimizer: true")
    if tr.optimizer_implementation != "te_fused" and tr.transformer_impl == "transformer_engine":
        add("training.optimizer_implementation", tr.optimizer_implementation, "Megatron-Core uses Transformer "
            "Engine's FusedAdam whenever Transformer Engine is installed (transformer_impl: transformer_engine "
            "needs it); apex_fused and torch need transformer_impl: local")
    elif (tr.optimizer_implementation != "te_fused" and pr.use_precision_aware_optimizer
          and not tr.optimizer_cpu_offload):
        # Megatron-LM @ d98e8a64 : megatron/core/optimizer/optimizer_config.py (__post_init__): only Transformer
        # Engine's FusedAdam and HybridDeviceOptimizer (optimizer CPU offload) take the precision-aware optimizer.
        add("training.optimizer_implementation", tr.optimizer_implementation, f"{tr.optimizer_implementation} "
            "does not take the precision-aware optimizer: it needs Transformer Engine's FusedAdam "
            "(optimizer_implementation: te_fused), or the optimizer offloaded (training.optimizer_cpu_offload: "
            "true, HybridDeviceOptimizer, which runs without Transformer Engine)")

    # Deterministic mode refuses these (Megatron-LM @ d98e8a64 : megatron/training/determinism.py
    # ARG_VALUES_REQUIRED_FOR_DETERMINISM).
    if tr.deterministic_mode:
        if tr.cross_entropy_loss_fusion:
            add("training.cross_entropy_loss_fusion", True, "Megatron-LM's --deterministic-mode requires it off")
        if par.tp_comm_overlap:
            add("parallelism.tp_comm_overlap", True, "Megatron-LM's --deterministic-mode requires it off")
    P.extend(_cublas_workspace_problems(tr))
    P.extend(feature_problems(cfg))
    return P


#: The CUBLAS_WORKSPACE_CONFIG values Megatron-LM's --deterministic-mode accepts (Megatron-LM @ d98e8a64 :
#: megatron/training/determinism.py ``ACCEPTED_ENV_VAR_VALUES``: NVIDIA's two deterministic workspace settings).
DETERMINISTIC_CUBLAS_WORKSPACE_CONFIGS = (":4096:8", ":16:8")
#: The largest cuBLAS workspace accepted (1 TiB per handle and stream): far above any GPU's memory.
MAX_CUBLAS_WORKSPACE_BYTES = 2 ** 40


def _cublas_workspace_problems(tr) -> list[Problem]:
    """``training.cublas_workspace_config``: a value PyTorch reads (``:SIZE:COUNT`` pairs, SIZE in KiB), of a
    size a GPU can hold, and under deterministic mode one of the two Megatron-LM accepts."""
    text = tr.cublas_workspace_config
    if not text.strip():
        return []
    size = cublas_workspace_config_bytes(text)
    field = "training.cublas_workspace_config"
    if size is None:
        return [Problem(field, text, f"must be :SIZE:COUNT pairs, SIZE in KiB, such as :4096:8 (32 MiB) or :16:8 "
                        f"(128 KiB), got {show(text)}: PyTorch finds no pair in it and ignores it with a warning "
                        "(leave it empty for PyTorch's default)")]
    if size > MAX_CUBLAS_WORKSPACE_BYTES:
        return [Problem(field, text, f"asks for {size:,} bytes per cuBLAS handle, more than any GPU holds (at most "
                        f"{MAX_CUBLAS_WORKSPACE_BYTES:,} = 1 TiB)")]
    if tr.deterministic_mode and text not in DETERMINISTIC_CUBLAS_WORKSPACE_CONFIGS:
        return [Problem(field, text, "Megatron-LM's --deterministic-mode accepts only "
                        f"{' or '.join(DETERMINISTIC_CUBLAS_WORKSPACE_CONFIGS)} (megatron/training/determinism.py), "
                        f"got {show(text)}")]
    return []


def layer_split_problems(cfg: Config) -> list[Problem]:
    """Megatron-Core's rules for the pipeline split (:func:`estimator.config.pipeline_layout.layout_problems`; with
    shared DSA top-k, :func:`estimator.config.model_rules.dsa_split_problems`) and the interleaved schedule's
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
    are :func:`estimator.config.rules.interleaving_problem`'s)."""
    par = cfg.parallelism
    p, v = par.pipeline_model_parallel_size, virtual_stages(par, cfg.model)
    name = "parallelism.microbatch_group_size_per_vp_stage"
    if v == 1:
        return [Problem(name, group, "applies only to the interleaved schedule (virtual pipeline stages > 1)")]
    if group < p:
        return [Problem(name, group, f"must be >= pipeline_model_parallel_size ({p}) (Megatron-Core)")]
    return []   # against the number of micro-batches: estimator.config.rules.interleaving_problem
