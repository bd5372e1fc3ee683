"""The valid configurations the estimator does not model: what Megatron-LM runs but no formula here covers.

:func:`not_modelled` lists them, one sentence each; :func:`refuse_not_modelled` raises them as an
:class:`~estimator.config.errors.UnsupportedError` (not as invalid input: Megatron-LM runs them).
"""

from __future__ import annotations

from .. import tp_overlap
from ..derived import grad_comm_dtype, grad_dtype, recipe_features
from ..errors import UnsupportedError
from ..schema import Config
from .vision import MUON_TOWERS
from .wan import wan_not_modelled

__all__ = ["not_modelled", "refuse_not_modelled"]


def not_modelled(cfg: Config) -> list[str]:
    """Valid configurations, ones Megatron-LM runs, that the estimator does not model: one sentence each (an
    empty list when it models the configuration). :func:`config_from_dict` raises them as an
    :class:`~estimator.config.errors.UnsupportedError`, not as invalid input."""
    pr, par = cfg.precision, cfg.parallelism
    out = wan_not_modelled(cfg)          # Wan (model_kind wan): the settings not modelled with it
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
    if par.hybrid_context_parallel:
        out += _hybrid_cp_not_modelled(cfg)
    out.extend(tp_overlap.not_modelled(cfg))
    out += _delay_wgrad_not_modelled(cfg)
    out += _dispatch_wgrad_not_modelled(cfg)
    out += _tower_features_not_modelled(cfg)
    if cfg.model.vision_num_layers is not None and cfg.model.vision_model_type == "radio" and (pr.fp8 or pr.fp4):
        # Megatron-Bridge @ 067f987d : nemotron_vl/nemotron_vl_provider.py: the vision and projection configs are
        # deep copies of the language model's, FP8 / NVFP4 recipe included (estimator/model/vision.py).
        out.append(f"model.vision_model_type radio with precision.{'fp8' if pr.fp8 else 'fp4'} true: Nemotron Nano "
                   "VL's RADIO tower and projector copy the language model's config, so they run in FP8 / NVFP4 "
                   "too, which is not modelled for a vision tower")
    out += _ernie_vl_not_modelled(cfg)
    return out


def _language_model_only(cfg: Config) -> set[str]:
    """The recipe features (``recipe_features`` paths) that act on the language model alone beside this tower, so the
    language model's own formulas hold and the tower runs as without them:

    - ``parallelism.tp_comm_overlap``: the userbuffers serve Transformer Engine's linears that ask for them. A qwen3_vl
      tower's config sets ``tp_comm_overlap = False`` (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/
      qwen_vl/modelling_qwen3_vl/transformer_config.py ``get_vision_model_config``); the Hugging Face towers hold no
      Transformer Engine module (Gemma 3's projector is Megatron-Core's local ``ColumnParallelLinear``:
      gemma_vl/modeling_gemma3_vl.py). Not the radio tower: Nemotron VL's vision config is a deep copy of the language
      model's, overlap included (nemotron_vl/nemotron_vl_provider.py).
    - ``model.moe_token_dispatcher_type: flex`` (DeepEP or HybridEP, whose buffers are sized by the language model's
      hidden size and routing: estimator/memory/features/comm_buffers.py) beside any tower but radio: the
      dispatcher serves MoE layers, and a tower has none (``get_vision_model_config`` sets ``num_moe_experts`` None;
      the Hugging Face towers are dense).
    - ``training.cuda_graph_impl: transformer_engine`` with the qwen3_vl tower: Megatron-LM @ d98e8a64 :
      megatron/core/transformer/cuda_graphs.py ``TECudaGraphHelper._discover_layers`` graphs the layers of the
      chunk's ``decoder``, which ``Qwen3VLModel`` (modelling_qwen3_vl/model.py, also Qwen3.5-VL's model) exposes as
      its language model's decoder; the tower's config gets ``cuda_graph_impl`` none unless the provider's own
      ``vision_cuda_graph_impl`` is set (``get_vision_model_config``), and Megatron-Bridge's training loop runs the
      language model's helper with the language model's sequence length and micro-batch size (training/train.py).
    """
    m, tr = cfg.model, cfg.training
    out = set() if m.vision_model_type == "radio" else {"parallelism.tp_comm_overlap",
                                                         "model.moe_token_dispatcher_type"}
    if m.vision_model_type == "qwen3_vl" and tr.cuda_graph_impl == "transformer_engine":
        out.add("training.cuda_graph_impl")
    if _peft_beside_hf_qwen25_tower(cfg):      # a trained tower is refused with its own message
        out.add("training.peft")
    return out


def _peft_beside_hf_qwen25_tower(cfg: Config) -> bool:
    """PEFT beside the qwen2_5_vl tower acts on the language model alone. Megatron-Bridge @ 067f987d :
    src/megatron/bridge/peft/base.py ``PEFT.__call__`` runs ``freeze_model`` (``requires_grad`` false on every
    parameter of the model, tower and merger included) before it walks the model with its transform, and
    peft/module_matcher.py ``ModuleMatcher.match`` adapts a module whose name is a target (``linear_qkv``,
    ``linear_proj``, ``linear_fc1``, ``linear_fc2``: the only values training.peft_target_modules takes). Bridge's
    Qwen2.5-VL tower is Hugging Face's ``Qwen2_5_VisionTransformerPretrainedModel`` (models/qwen_vl/
    modeling_qwen25_vl.py), whose linears are ``qkv``, ``proj``, ``gate_proj``, ``up_proj``, ``down_proj`` and the
    merger's ``mlp.0`` / ``mlp.2``: no adapter lands there, so the tower and its merger are frozen whole, which is
    the estimator's training.freeze_vision_model and freeze_vision_projection (estimator/memory/vision.py)."""
    return (cfg.training.peft is not None and cfg.model.vision_num_layers is not None
            and cfg.model.vision_model_type == "qwen2_5_vl")


def _tower_features_not_modelled(cfg: Config) -> list[str]:
    """A vision tower with the recipe features that re-plan the model states or activations: modelled only where
    they act on the language model alone (:func:`_language_model_only`)."""
    if cfg.model.vision_num_layers is None:
        return []
    out = []
    if cfg.training.overlap_moe_expert_parallel_comm:
        # Megatron-LM @ d98e8a64 : megatron/core/pipeline_parallel/combined_1f1b.py combined_forward_backward_step
        # finds the model through get_attr_wrapped_model(model, "build_schedule_plan"), which unwraps .module only;
        # GPTModel defines it, no vision-language model of Megatron-Bridge @ 067f987d does (Qwen3VLModel holds its
        # GPTModel as language_model), though qwen_vl/qwen3_vl_step.py calls model.build_schedule_plan.
        out.append("training.overlap_moe_expert_parallel_comm with a vision tower (model.vision_num_layers): "
                   "Megatron-Core's combined 1F1B schedule builds each micro-batch's plan with the model's "
                   "build_schedule_plan, which GPTModel defines and no Megatron-Bridge vision-language model "
                   "(Qwen3VLModel, ...) does at 067f987d; how such a run holds its layers is not modelled")
    m, tr = cfg.model, cfg.training
    mods = set(tr.cuda_graph_modules or ())
    if (tr.freeze_language_model and tr.cuda_graph_impl == "transformer_engine"
            and m.moe_shared_expert_intermediate_size and "moe_router" in mods and "moe" not in mods):
        # estimator/memory/features/cuda_graphs.py captured_bytes counts the router region's shared experts from the
        # trained layer's parts; frozen, their linears keep fewer inputs (frozen_language.py).
        out.append("training.freeze_language_model with cuda_graph_modules moe_router and shared experts "
                   "(model.moe_shared_expert_intermediate_size): the frozen shared experts' saved tensors inside "
                   "the router's graph are not modelled")
    if _peft_beside_hf_qwen25_tower(cfg) and not (tr.freeze_vision_model and tr.freeze_vision_projection):
        out.append(f"training.peft ({tr.peft}) with the qwen2_5_vl tower trained (training.freeze_vision_model "
                   f"{str(tr.freeze_vision_model).lower()}, freeze_vision_projection "
                   f"{str(tr.freeze_vision_projection).lower()}): Megatron-Bridge's PEFT freezes the whole model and "
                   "its adapter targets match no module of Hugging Face's Qwen2.5-VL tower, so the tower and its "
                   "merger train nothing; set training.freeze_vision_model and freeze_vision_projection true")
    # The vision tower's own CUDA graphs are the tower's feature (rules/vision.py, estimator/memory/vision.py).
    lm_only = _language_model_only(cfg) | {"training.overlap_moe_expert_parallel_comm",
                                           "training.vision_cuda_graph_impl"}
    if (m.vision_model_type in MUON_TOWERS and tr.optimizer == "muon" and tr.peft is None
            and not tr.freeze_language_model):
        # Muon beside a tower of Hugging Face remote code whose 2-D weights are read (estimator/model/vision.py
        # muon_matrices): Muon's states and step for them, Adam's for the rest (features/optimizers.py, muon_step.py).
        lm_only.add("training.optimizer")
    if m.vision_model_type == "qwen3_vl":
        # Megatron-FSDP: the tower's layers are FSDP units like the decoder's (estimator/memory/features/fsdp.py).
        lm_only.add("parallelism.use_megatron_fsdp")
        if cfg.parallelism.use_megatron_fsdp and (tr.freeze_vision_model or tr.freeze_vision_projection):
            out.append("parallelism.use_megatron_fsdp with a frozen vision tower or projection "
                       "(training.freeze_vision_*): which frozen parameters Megatron-FSDP still shards and gathers "
                       "is not modelled")
    rest = [path for path, _ in recipe_features(cfg) if path not in lm_only]
    if rest:
        out.append("model.vision_num_layers (a vision tower) with a recipe feature that re-plans the model states "
                   "or activations (" + ", ".join(rest) + "): the tower is modelled with Megatron-Core's plain "
                   "distributed optimizer only (the features that act on the language model alone are modelled: "
                   "tp_comm_overlap and the flex dispatcher beside any tower but radio, cuda_graph_impl "
                   "transformer_engine beside the qwen3_vl tower; and with the qwen3_vl tower, whose layers are "
                   "FSDP units too, use_megatron_fsdp and its own vision_cuda_graph_impl; optimizer muon beside the "
                   "kimi_k25 tower, whose 2-D weights are read, without PEFT or freeze_language_model)")
    return out


def _ernie_vl_not_modelled(cfg: Config) -> list[str]:
    """ERNIE-VL's two expert pools (model.moe_vision_ffn_hidden_size) are modelled with plain Megatron-Core MoE
    layers, text and image tokens each in their pool (estimator/model/layers/moe.py); not with what no ERNIE-VL model
    has (latent MoE, Gemma 4's block), nor with the schedules that need one MoELayer per layer. Megatron-LM @ d98e8a64
    : megatron/core/models/common/fine_grained_callables.py ``get_layer_moe_metadata`` (``isinstance(layer.mlp,
    MoELayer)``) runs Megatron-Bridge @ 067f987d's ``ErnieMultiTypeMoE`` as a dense MLP under expert-parallel
    overlap; HybridEP's per-rank budget and its paged stash would hold one budget per pool."""
    m, tr = cfg.model, cfg.training
    if not (m.moe_vision_ffn_hidden_size and m.num_experts):
        return []
    out = []
    for name in ("moe_latent_size", "post_layernorm"):
        if getattr(m, name):
            out.append(f"model.{name} with model.moe_vision_ffn_hidden_size: ERNIE-VL's two expert pools are "
                       "modelled with plain Megatron-Core MoE layers only")
    if tr.overlap_moe_expert_parallel_comm:
        out.append("training.overlap_moe_expert_parallel_comm with model.moe_vision_ffn_hidden_size: Megatron-Core's "
                   "schedule nodes run ERNIE-VL's two-pool MoE block as a dense MLP (it is not an MoELayer), which "
                   "is not modelled")
    if m.moe_expert_rank_capacity_factor is not None and tr.images_per_sample:
        out.append(f"model.moe_expert_rank_capacity_factor with model.moe_vision_ffn_hidden_size and "
                   f"training.images_per_sample {tr.images_per_sample}: HybridEP's per-rank budget and paged stash "
                   "for each of ERNIE-VL's two expert pools are not modelled")
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


def _hybrid_cp_not_modelled(cfg) -> list[str]:
    """Dynamic (hybrid) context parallelism with what its estimate (one sequence's largest shard per micro-batch,
    estimator/model/resolve.py) does not cover: buffers Megatron-Core sizes from the configured sequence, micro-
    batch and CP size or from the first input (TP-overlap userbuffers: megatron/training/initialize.py; HybridEP's
    buffer: moe/fused_a2a.py), communication types whose per-rank memory grows with the whole sequence
    (allgather) or needs the configured hierarchical groups (a2a+p2p), FSDP2, the RL step's log-probability passes
    (verl, NeMo-RL and slime batch those themselves) and the vision, sound and Wan towers, whose inputs the
    sub-sample schedule does not split."""
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    out = []
    for on, what in ((par.tp_comm_overlap, "parallelism.tp_comm_overlap (userbuffers sized from seq_length x "
                      "micro_batch_size / context_parallel_size, not from the sub-samples)"),
                     (par.cp_comm_type in ("allgather", "a2a+p2p"), f"parallelism.cp_comm_type {par.cp_comm_type}"),
                     (m.moe_token_dispatcher_type == "flex" and m.moe_flex_dispatcher_backend == "hybridep",
                      "model.moe_flex_dispatcher_backend hybridep (its buffer is sized by the first sub-sample's "
                      "tokens)"),
                     (par.use_torch_fsdp2, "parallelism.use_torch_fsdp2"),
                     (tr.rl_algorithm != "none", f"training.rl_algorithm {tr.rl_algorithm} (the RL frameworks' "
                      "log-probability passes batch sequences their own way)"),
                     (m.model_kind != "gpt" or m.vision_num_layers is not None or m.sound_num_layers is not None
                      or tr.images_per_sample, "a vision, sound or Wan model")):
            if on:
                out.append(f"parallelism.hybrid_context_parallel true with {what}: not modelled (the estimate "
                           f"covers the language model's sub-samples with p2p or a2a context parallelism)")
    return out
