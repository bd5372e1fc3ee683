"""The calculator form's words: labels, the quick controls, and which fields apply to a configuration.

The form is generated from :mod:`estimator.config.schema` (field names, types, defaults, help text); this module
adds what a person reads: a label in words for each field, shown beside its Megatron name ("KV heads
(``num_query_groups``)"), the short list of quick controls at the top of the page, and which model fields
apply to a configuration (MoE, multi-latent attention and multi-token-prediction fields only where the
model has them). A field without a label here (a new schema field) gets one made from its name, so new
fields appear in the form without any change to this module or to the page's JavaScript.
"""

from __future__ import annotations

from ..config.schema import field_specs

__all__ = ["QUICK", "hidden_fields", "label"]

#: Words for each field, by path. The page writes the Megatron name (the field's name) beside them.
LABELS = {
    "model.num_layers": "Layers", "model.hidden_size": "Hidden size", "model.num_attention_heads": "Attention heads",
    "model.num_query_groups": "KV heads", "model.kv_channels": "Head width", "model.ffn_hidden_size": "MLP width",
    "model.num_experts": "Routed experts", "model.moe_router_topk": "Experts per token (top-k)",
    "model.moe_ffn_hidden_size": "Expert MLP width", "model.moe_shared_expert_intermediate_size": "Shared expert width",
    "model.moe_shared_expert_gate": "Shared expert gate", "model.moe_layer_freq": "Which layers are MoE",
    "model.moe_router_enable_expert_bias": "Expert routing bias", "model.moe_token_dispatcher_type": "Token dispatcher",
    "model.moe_expert_capacity_factor": "Expert capacity factor",
    "model.moe_router_score_function": "Router score function", "model.moe_router_pre_softmax": "Router pre-softmax",
    "model.moe_router_num_groups": "Router expert groups", "model.moe_router_group_topk": "Router groups per token",
    "model.moe_router_load_balancing_type": "Router load balancing", "model.moe_aux_loss_coeff": "Aux-loss coefficient",
    "model.moe_z_loss_coeff": "Z-loss coefficient", "model.moe_router_fusion": "Fused router",
    "model.moe_permute_fusion": "Fused permutation",
    "training.moe_overload_factor": "MoE routing imbalance (busiest rank's rows / balanced)",
    "model.moe_hybridep_ranks_per_nvlink_domain": "HybridEP ranks per NVLink domain",
    "model.moe_pad_expert_input_to_capacity": "Pad experts to capacity", "model.vocab_size": "Vocabulary",
    "model.make_vocab_size_divisible_by": "Pad vocabulary to a multiple of",
    "model.max_position_embeddings": "Longest sequence (positions)", "model.position_embedding_type": "Position embedding",
    "model.normalization": "Norm", "model.layernorm_epsilon": "Norm epsilon", "model.activation_func": "MLP activation",
    "model.gated_linear_unit": "Gated MLP", "model.qk_layernorm": "Query/key norm", "model.add_bias_linear": "Linear biases",
    "model.add_qkv_bias": "QKV bias", "model.untie_embeddings_and_output_weights": "Separate output layer",
    "model.multi_latent_attention": "Multi-latent attention (MLA)", "model.q_lora_rank": "MLA query rank",
    "model.kv_lora_rank": "MLA key/value rank", "model.qk_head_dim": "MLA query/key head width",
    "model.qk_pos_emb_head_dim": "MLA rotary head width", "model.v_head_dim": "MLA value head width",
    "model.mtp_num_layers": "Multi-token prediction layers",
    "model.mtp_use_repeated_layer": "One MTP layer at every depth", "model.mtp_dense_mlp": "Dense MLP in MTP layers",
    "model.mtp_hsm": "MTP hidden-state mixing",
    "model.hidden_dropout": "Hidden dropout",
    "model.v_channels": "Value head width", "model.global_softmax_type": "Global layers' softmax",
    "model.num_global_attention_heads": "Global layers' heads",
    "model.attention_dropout": "Attention dropout",
    "parallelism.tensor_model_parallel_size": "Tensor parallel (TP)",
    "parallelism.pipeline_model_parallel_size": "Pipeline parallel (PP)",
    "parallelism.expert_model_parallel_size": "Expert parallel (EP)",
    "parallelism.expert_tensor_parallel_size": "Expert tensor parallel (ETP)",
    "parallelism.context_parallel_size": "Context parallel (CP)", "parallelism.cp_comm_type": "CP communication",
    "parallelism.virtual_pipeline_model_parallel_size": "Virtual pipeline stages (VPP)",
    "parallelism.num_layers_in_first_pipeline_stage": "Layers on the first stage",
    "parallelism.num_layers_in_last_pipeline_stage": "Layers on the last stage",
    "training.micro_batch_size": "Micro-batch size", "training.global_batch_size": "Global batch size",
    "training.seq_length": "Sequence length", "training.world_size": "GPUs",
    "training.use_distributed_optimizer": "Distributed optimizer", "training.sequence_parallel": "Sequence parallel",
    "training.recompute_granularity": "Recompute", "training.recompute_method": "Recompute method",
    "training.recompute_num_layers": "Recompute layers", "training.recompute_modules": "Recomputed modules",
    "training.mhc_recompute_layer_num": "mHC recompute group (layers)",
    "training.attention_backend": "Attention kernel", "training.cross_entropy_loss_fusion": "Fused cross-entropy",
    "training.cross_entropy_fusion_impl": "Cross-entropy implementation", "training.transformer_impl": "Layer implementation",
    "training.gradient_accumulation_fusion": "Gradient accumulation fusion",
    "training.overlap_grad_reduce": "Overlap gradient reduce", "training.overlap_param_gather": "Overlap parameter gather",
    "training.gpu_arch": "GPU architecture (set by the GPU chosen)",
    "precision.params_dtype": "Weights dtype", "precision.fp8": "FP8 compute", "precision.fp8_recipe": "FP8 recipe",
    "precision.fp8_param_gather": "FP8 weights", "precision.fp4": "NVFP4 compute", "precision.fp4_recipe": "FP4 recipe",
    "precision.fp4_param_gather": "NVFP4 weights", "precision.accumulate_allreduce_grads_in_fp32": "Gradients in fp32",
    "precision.use_precision_aware_optimizer": "Precision-aware optimizer", "precision.main_grads_dtype": "Gradient dtype",
    "precision.main_params_dtype": "Master weights dtype", "precision.exp_avg_dtype": "Adam first moment dtype",
    "precision.exp_avg_sq_dtype": "Adam second moment dtype",
    "training.rl_algorithm": "RL algorithm", "training.rl_reference_model": "RL reference model",
    "training.rl_logprob_micro_batch_size": "RL log-prob micro-batch", "training.rl_response_length": "RL response length",
    "training.rl_entropy": "RL entropy in the update", "training.rl_logprob_entropy": "RL entropy in the log-prob pass", "training.rl_offload_params": "RL offload weights during rollout",
    "training.rl_offload_grads": "RL offload gradients", "training.rl_offload_optimizer": "RL offload optimizer",
    "training.rl_rollout_gpu_memory_fraction": "RL rollout engine's GPU share",
    "training.distillation_cached_logits": "Distillation from cached teacher logits",
    "precision.fp32_residual_connection": "FP32 residual stream",
    "precision.transformer_engine_version": "Transformer Engine version",
    "training.distillation_top_k": "Teacher top-K per token", "training.distillation_logprobs_dtype": "Teacher log-prob dtype",
}

#: The quick controls at the top of the page, in order: (path, short label). Their values come from
#: :func:`estimator.plan.advice.choices` (selects) or are typed (numbers).
QUICK = (
    ("training.world_size", "GPUs"),
    ("parallelism.tensor_model_parallel_size", "TP"),
    ("parallelism.pipeline_model_parallel_size", "PP"),
    ("parallelism.virtual_pipeline_model_parallel_size", "VPP"),
    ("parallelism.expert_model_parallel_size", "EP"),
    ("parallelism.expert_tensor_parallel_size", "ETP"),
    ("parallelism.context_parallel_size", "CP"),
    ("training.micro_batch_size", "Micro-batch"),
    ("training.global_batch_size", "Global batch"),
    ("training.seq_length", "Sequence length"),
    ("training.recompute_granularity", "Recompute"),
    ("training.sequence_parallel", "Sequence parallel"),
    ("training.peft", "PEFT"),
    ("training.peft_dim", "PEFT rank"),
)

_MOE = ("model.moe_router_topk", "model.moe_ffn_hidden_size", "model.moe_shared_expert_intermediate_size",
        "model.moe_shared_expert_gate", "model.moe_layer_freq", "model.moe_router_enable_expert_bias",
        "model.moe_token_dispatcher_type", "model.moe_expert_capacity_factor",
        "model.moe_pad_expert_input_to_capacity", "model.moe_router_score_function", "model.moe_router_pre_softmax",
        "model.moe_router_num_groups", "model.moe_router_group_topk", "model.moe_router_load_balancing_type",
        "model.moe_aux_loss_coeff", "model.moe_z_loss_coeff", "model.moe_router_fusion", "model.moe_permute_fusion",
        "parallelism.expert_model_parallel_size", "parallelism.expert_tensor_parallel_size",
        "training.moe_overload_factor")
_MLA = ("model.q_lora_rank", "model.kv_lora_rank", "model.qk_head_dim", "model.qk_pos_emb_head_dim",
        "model.v_head_dim")
_GQA = ("model.num_query_groups",)
_FULL = ("training.recompute_method", "training.recompute_num_layers")
_SELECTIVE = ("training.recompute_modules",)
_FP8 = ("precision.fp8_recipe", "precision.fp8_param_gather")
_FP4 = ("precision.fp4_recipe", "precision.fp4_param_gather")
_PEFT = ("training.peft_dim", "training.peft_alpha", "training.peft_target_modules",
         "training.peft_share_expert_adapters", "training.peft_sequence_parallel_input_regather")
_PRECISION_AWARE = ("precision.main_grads_dtype", "precision.main_params_dtype", "precision.exp_avg_dtype",
                    "precision.exp_avg_sq_dtype")
_RL = ("training.rl_reference_model", "training.rl_logprob_micro_batch_size", "training.rl_response_length",
       "training.rl_entropy", "training.rl_logprob_entropy", "training.rl_offload_params", "training.rl_offload_grads",
       "training.rl_offload_optimizer", "training.rl_rollout_gpu_memory_fraction")
_DISTILL = ("training.distillation_top_k", "training.distillation_logprobs_dtype")
_PATHS = {s.path for s in field_specs()}


def label(path: str) -> str:
    """The words for a field: from :data:`LABELS`, else its name with spaces ("pipeline model parallel layout")."""
    return LABELS.get(path) or path.split(".", 1)[1].replace("_", " ").capitalize()


def _set(cfg: dict, path: str) -> bool:
    sec, name = path.split(".", 1)
    value = (cfg.get(sec) or {}).get(name)
    return value not in (None, False, "", 0)


def hidden_fields(cfg: dict) -> list[str]:
    """Fields that do not apply to the configuration ``cfg`` (plain data) and that it leaves unset: the
    page hides them. A field the configuration sets stays visible, so that its error can be seen."""
    tr = cfg.get("training") or {}
    rules = ((_MOE, _set(cfg, "model.num_experts")), (_MLA, _set(cfg, "model.multi_latent_attention")),
             (_GQA, not _set(cfg, "model.multi_latent_attention")),
             (_FULL, tr.get("recompute_granularity") == "full"),
             (_SELECTIVE, tr.get("recompute_granularity") == "selective"),
             (_FP8, _set(cfg, "precision.fp8")),
             (_FP4, _set(cfg, "precision.fp4")),
             (_PEFT, _set(cfg, "training.peft")),
             (_PRECISION_AWARE, _set(cfg, "precision.use_precision_aware_optimizer")),
             (_RL, tr.get("rl_algorithm") not in (None, "none")),
             (_DISTILL, bool(tr.get("distillation_cached_logits"))))
    out = []
    for paths, applies in rules:
        if not applies:
            out += [p for p in paths if p in _PATHS and not _set(cfg, p)]
    return out
