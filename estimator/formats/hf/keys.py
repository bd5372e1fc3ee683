"""Which ``config.json`` keys each architecture understands (:data:`KNOWN`), and the keys that change neither the
parameter count nor the training memory of any supported architecture (:data:`INERT`). An import with a key in
neither stops, naming it: a count is never silently wrong."""

from __future__ import annotations



#: Keys that change neither the parameter count nor the training memory of any supported architecture.
INERT = frozenset({
    "_name_or_path", "architectures", "model_type", "auto_map", "transformers_version", "torch_dtype", "dtype",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "use_cache", "initializer_range",
    "pretraining_tp", "tokenizer_class", "rope_theta", "rope_scaling", "rope_parameters", "rope_interleave",
    "partial_rotary_factor", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
    "output_router_logits", "router_aux_loss_coef", "aux_loss_alpha", "seq_aux", "router_jitter_noise",
    "norm_topk_prob", "scoring_func", "routed_scaling_factor", "n_group", "topk_group", "ep_size",
    "quantization_config", "use_mrope", "attention_dropout", "hidden_dropout", "return_dict",
    "output_attentions", "output_hidden_states", "tie_encoder_decoder", "is_encoder_decoder",
    "id2label", "label2id", "torchscript", "use_bfloat16", "bad_words_ids", "unsloth_fixed",
    "max_length", "num_beams", "chunk_size_feed_forward", "attn_implementation", "_attn_implementation",
    "_attn_implementation_autoset",
    "routed_scaling_factor",
})


#: Hugging Face PretrainedConfig's generation and bookkeeping defaults, which a nested text_config serialises
#: (Kimi K2.5's): none changes a tensor.
PRETRAINED_DEFAULTS = frozenset({
    "add_cross_attention", "bad_words_ids", "begin_suppress_tokens", "chunk_size_feed_forward",
    "cross_attention_hidden_size", "decoder_start_token_id", "diversity_penalty", "do_sample", "early_stopping",
    "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty", "finetuning_task", "forced_bos_token_id",
    "forced_eos_token_id", "is_decoder", "length_penalty", "min_length", "no_repeat_ngram_size", "num_beam_groups",
    "num_return_sequences", "output_scores", "prefix", "problem_type", "pruned_heads", "remove_invalid_values",
    "repetition_penalty", "return_dict_in_generate", "suppress_tokens", "task_specific_params", "temperature",
    "tf_legacy_loss", "top_k", "top_p", "typical_p", "ignore_index",
    # Hub tooling: the Llama-conversion flag, the RoPE layout (no weights) and transformers.js's runtime settings
    "is_llama_config", "rope_interleaved", "transformers.js_config",
})


INERT = INERT | PRETRAINED_DEFAULTS


#: Keys the original Qwen3-MoE repositories carry and Hugging Face's Qwen3MoeConfig ignores (the model always has
#: per-head q/k norms, no QKV bias and no shared expert): accepted when they say what the model does.
QWEN3_MOE_EXTRA = {"qkv_bias": False, "use_qk_norm": True, "shared_expert_intermediate_size": 0}


_COMMON = frozenset({"num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps", "hidden_act",
                     "tie_word_embeddings", "head_dim", "attention_bias", "mlp_bias"})


_MOE_QWEN = frozenset({"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                       "mlp_only_layers"})


_DEEPSEEK = frozenset({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                       "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                       "first_k_dense_replace", "moe_layer_freq", "topk_method", "num_nextn_predict_layers"})


#: DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2, GLM-5).
_DSA = frozenset({"index_n_heads", "index_head_dim", "index_topk"})


_HYBRID = frozenset({"hybrid_override_pattern", "mtp_hybrid_override_pattern", "num_nextn_predict_layers",
                     "ssm_state_size", "mamba_head_dim", "mamba_num_heads", "n_groups", "expand", "conv_kernel",
                     "use_conv_bias", "mamba_proj_bias", "mamba_hidden_act", "use_bias", "chunk_size",
                     "residual_in_fp32", "mlp_hidden_act", "attention_head_dim", "layer_norm_epsilon", "norm_eps",
                     "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                     "moe_shared_expert_intermediate_size", "moe_latent_size", "moe_shared_expert_overlap",
                     "time_step_min", "time_step_max", "time_step_floor", "time_step_limit", "time_step_rank",
                     "rescale_prenorm_residual", "num_logits_to_keep", "use_mamba_kernels", "mamba_ssm_cache_dtype",
                     "mtp_use_repeated_layer", "keep_mtp_spec_in_bf16", "mtp_loss_scaling_factor",
                     "layers_block_type", "mtp_layers_block_type"})


#: Qwen3.5's text_config (Hugging Face Qwen3_5TextConfig / Qwen3_5MoeTextConfig): Qwen3-Next's hybrid keys, the
#: attention output gate, the MTP layers and the SSM-state dtype of inference (no weights).
_QWEN3_5 = _COMMON | {"full_attention_interval", "linear_conv_kernel_dim", "linear_key_head_dim",
                      "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads", "attn_output_gate",
                      "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "mamba_ssm_dtype", "mlp_only_layers",
                      # the gate's activation ("swish" in Qwen3.6-27B; absent means sigmoid): no tensor's size
                      "output_gate_type"}


_GEMMA = frozenset({"hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                    "sliding_window_size", "cache_implementation"})


#: famD (issue 27): Sarvam's MoE keys, both variants (Sarvam's remote SarvamMoEConfig / SarvamMLAConfig).
_SARVAM = _COMMON | {"num_experts", "num_experts_per_tok", "num_shared_experts", "moe_intermediate_size",
                     "moe_shared_expert_intermediate_size", "first_k_dense_replace", "use_qk_norm", "use_bias",
                     "moe_router_enable_expert_bias", "score_function", "embedding_dropout", "output_dropout"}

#: Kimi K3's text_config keys (transformers' KimiLinearConfig as the published config.json writes them) beyond the
#: common ones; the SiTU betas, the gate's lower bound, the router's renormalisation and scaling size no tensor.
_KIMI_LINEAR = frozenset({
    "activation_situ_beta", "activation_situ_linear_beta", "attn_res_block_size", "first_k_dense_replace",
    "kv_lora_rank", "latent_moe_use_norm", "linear_attn_config", "mla_use_nope", "mla_use_output_gate",
    "moe_intermediate_size", "moe_layer_freq", "moe_renormalize", "moe_router_activation_func", "num_expert_group",
    "num_experts", "num_experts_per_token", "num_nextn_predict_layers", "num_shared_experts", "q_lora_rank",
    "qk_nope_head_dim", "qk_rope_head_dim", "quantization_config", "routed_expert_hidden_size",
    "routed_scaling_factor", "topk_group", "topk_method", "use_grouped_topk", "v_head_dim"})


#: Keys each architecture understands on top of the common ones.
KNOWN = {
    "llama": _COMMON,
    "mistral": _COMMON,
    "mixtral": _COMMON | {"num_local_experts", "num_experts_per_tok"},
    "qwen2": _COMMON,
    "qwen2_moe": _COMMON | _MOE_QWEN | {"shared_expert_intermediate_size"},
    "qwen3": _COMMON,
    "qwen3_moe": _COMMON | _MOE_QWEN,
    "deepseek_v2": _COMMON | _DEEPSEEK,
    "deepseek_v3": _COMMON | _DEEPSEEK,
    "kimi_k2": _COMMON | _DEEPSEEK,
    "phi3": _COMMON | {"embd_pdrop", "resid_pdrop", "original_max_position_embeddings", "lm_head_bias", "full_attn_mod",
                       "interpolate_factor"},
    "mimo": _COMMON | {"num_nextn_predict_layers"},
    "ernie4_5_vl_moe_text": _COMMON | {"moe_num_experts", "moe_k", "moe_intermediate_size", "moe_num_shared_experts",
                                       "mlp_layer_types", "use_bias", "moe_norm_min"},
    "ernie4_5_moe": _COMMON | {"moe_num_experts", "moe_k", "moe_intermediate_size", "moe_num_shared_experts",
                               "moe_layer_start_index", "moe_layer_interval", "moe_use_aux_free", "moe_capacity",
                               "moe_gate", "use_bias", "moe_layer_end_index"},
    "bailing_moe": _COMMON | {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "num_shared_experts",
                              "moe_shared_expert_intermediate_size", "first_k_dense_replace", "use_bias",
                              "use_qkv_bias", "use_qk_norm", "use_rmsnorm", "moe_router_enable_expert_bias",
                              "router_dtype", "score_function", "embedding_dropout", "output_dropout",
                              "num_nextn_predict_layers"},
    "gpt_oss": _COMMON | {"num_local_experts", "num_experts_per_tok", "experts_per_token", "initial_context_length",
                          "swiglu_limit"},
    "qwen3_next": _COMMON | _MOE_QWEN | {"shared_expert_intermediate_size", "full_attention_interval",
                                         "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
                                         "linear_num_key_heads", "linear_num_value_heads"},
    "nemotron_h": _COMMON | _HYBRID,
    "qwen3_5": _QWEN3_5,
    "qwen3_5_moe": _QWEN3_5 | _MOE_QWEN | {"shared_expert_intermediate_size"},
    "qwen3_5_text": _QWEN3_5,
    "qwen3_5_moe_text": _QWEN3_5 | _MOE_QWEN | {"shared_expert_intermediate_size"},
    "llama4": _COMMON | {"attention_chunk_size", "intermediate_size_mlp", "interleave_moe_layer_step", "moe_layers",
                         "num_local_experts", "num_experts_per_tok", "use_qk_norm", "no_rope_layers",
                         "attn_temperature_tuning", "floor_scale", "attn_scale", "for_llm_compressor",
                         "cache_implementation"},
    "gemma2": _COMMON | _GEMMA,
    "olmo2": _COMMON,
    "minimax_m2": _COMMON | {"num_local_experts", "num_experts_per_tok", "use_qk_norm", "qk_norm_type",
                             "use_routing_bias", "use_mtp", "mtp_transformer_layers", "num_mtp_modules",
                             "shared_intermediate_size", "scoring_func", "rotary_dim", "attn_type_list"},
    "glm4_moe": _COMMON | _DEEPSEEK | {"use_qk_norm", "partial_rotary_factor"},
    "glm4_moe_lite": _COMMON | _DEEPSEEK,
    "deepseek_v32": _COMMON | _DEEPSEEK | _DSA,
    "deepseek_v4": _COMMON | _DSA | {"q_lora_rank", "qk_rope_head_dim", "n_routed_experts", "n_shared_experts",
                                     "num_experts_per_tok", "moe_intermediate_size", "topk_method",
                                     "num_nextn_predict_layers", "o_groups", "o_lora_rank", "compress_ratios",
                                     "layer_types", "compress_rates", "compress_rope_theta", "hc_mult",
                                     "hc_sinkhorn_iters", "hc_eps", "num_hash_layers", "mlp_layer_types",
                                     "swiglu_limit", "expert_dtype"},
    "glm_moe_dsa": _COMMON | _DEEPSEEK | _DSA | {"qk_head_dim", "indexer_rope_interleave", "index_topk_freq",
                                                 "index_skip_topk_offset", "indexer_types", "mlp_layer_types",
                                                 "index_share_for_mtp_iteration", "index_topk_pattern",
                                                 "moe_router_dtype", "num_experts"},
    "gemma3_text": _COMMON | _GEMMA | {"rope_local_base_freq", "sliding_window_pattern", "use_bidirectional_attention"},
    "nemotron-nas": _COMMON | {"block_configs"},
    "minimax_m3": _COMMON | {"dense_intermediate_size", "shared_intermediate_size", "num_local_experts",
                             "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size", "moe_layer_freq",
                             "first_k_dense_replace", "scoring_func", "use_routing_bias", "use_qk_norm",
                             "qk_norm_type", "use_gemma_norm", "attention_output_gate", "rotary_dim", "swiglu_alpha",
                             "swiglu_limit", "num_mtp_modules", "num_nextn_predict_layers", "sparse_attention_config",
                             "router_aux_loss_coef"},
    "mimo_v2_flash": _COMMON | {"v_head_dim", "swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim",
                                "swa_v_head_dim", "hybrid_layer_pattern", "hybrid_block_size",
                                "add_swa_attention_sink_bias", "add_full_attention_sink_bias", "layernorm_epsilon",
                                "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                                "moe_layer_freq", "topk_method", "scoring_func", "swa_rope_theta", "sliding_window_size",
                                "attention_chunk_size", "attention_value_scale"},
    "gemma4_text": _COMMON | _GEMMA | {"attention_k_eq_v", "enable_moe_block", "global_head_dim",
                                       "hidden_size_per_layer_input", "expert_intermediate_size",
                                       "moe_intermediate_size", "num_experts",
                                       "num_global_key_value_heads", "num_kv_shared_layers", "top_k_experts",
                                       "use_bidirectional_attention", "use_double_wide_mlp",
                                       "vocab_size_per_layer_input"},
    # famA (issue 27)
    "olmoe": _COMMON | {"num_experts", "num_experts_per_tok", "clip_qkv", "scoring_func"},
    "gemma": _COMMON | {"hidden_activation"},
    "nemotron": (_COMMON - {"rms_norm_eps"}) | {"norm_eps", "kv_channels"},
    "exaone4": _COMMON | {"sliding_window_pattern"},
    # towers27 (issue 27): EXAONE 4.5's text_config (Megatron-Bridge @ 067f987d : exaone/exaone45/exaone45_bridge.py
    # reads the MTP keys; the loss scale sizes no tensor)
    "exaone4_5_text": _COMMON | {"sliding_window_pattern", "num_nextn_predict_layers", "mtp_share_layers",
                                 "mtp_loss_scaling_factor"},
    "exaone_moe": _COMMON | {"sliding_window_pattern", "sliding_windows", "mlp_layer_types", "is_moe_layer",
                             "first_k_dense_replace", "moe_intermediate_size", "num_experts", "num_experts_per_tok",
                             "num_shared_experts", "topk_method", "swiglu_limits", "num_nextn_predict_layers",
                             "mtp_num_speculative_steps", "mtp_share_layers", "mtp_layer_types",
                             "mtp_sliding_windows", "mtp_loss_scaling_factor"},
    # famD (issue 27)
    "hy_v3": _COMMON | {"qk_norm", "first_k_dense_replace", "mlp_layer_types", "num_experts", "num_experts_per_tok",
                        "moe_intermediate_size", "expert_hidden_dim", "num_shared_experts", "moe_router_use_sigmoid",
                        "moe_router_enable_expert_bias", "route_norm", "router_scaling_factor",
                        "num_nextn_predict_layers", "enable_lm_head_fp32", "enable_attention_fp32_softmax",
                        "enable_moe_fp32_combine", "eod_token_id", "use_grouped_mm"},
    "sarvam_moe": _SARVAM | {"use_qkv_bias"},
    "falcon_h1": _COMMON | {"mamba_d_ssm", "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state",
                            "mamba_d_conv", "mamba_expand", "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias",
                            "mamba_norm_before_gate", "mamba_rms_norm", "projectors_bias", "lm_head_multiplier",
                            "embedding_multiplier", "mlp_multipliers", "key_multiplier", "attention_out_multiplier",
                            "attention_in_multiplier", "ssm_multipliers", "ssm_in_multiplier", "ssm_out_multiplier",
                            "num_logits_to_keep", "time_step_min", "time_step_max", "time_step_floor",
                            "time_step_limit", "attn_layer_indices", "mamba_use_mlp"},
    "mamba2": (_COMMON - {"rms_norm_eps", "num_key_value_heads", "attention_bias", "mlp_bias"})
              | {"num_heads", "head_dim", "state_size", "expand", "n_groups", "conv_kernel", "use_bias",
                 "use_conv_bias", "rms_norm", "residual_in_fp32", "chunk_size", "layer_norm_epsilon",
                 "norm_before_gate", "rescale_prenorm_residual", "time_step_rank", "time_step_min", "time_step_max",
                 "time_step_floor", "time_step_limit", "time_step_init_scheme", "time_step_scale"},
    "sarvam_mla": _SARVAM | {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"},
    # Kimi K3's text_config (estimator.formats.hf.kimi)
    "kimi_linear": _COMMON | _KIMI_LINEAR,
    # famE (issue 27): Step 3.5 Flash (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/stepfun/
    # configuration_step35.py and step35_bridge.py; the RoPE, clamp and layer-switch keys change no tensor)
    "step3p5": (_COMMON - {"num_key_value_heads", "attention_bias", "mlp_bias"})
               | {"num_attention_groups", "max_seq_len", "moe_intermediate_size", "moe_num_experts", "moe_top_k",
                  "share_expert_dim", "share_expert_dims", "norm_expert_weight", "mtp_layer_types",
                  "attention_other_setting", "use_head_wise_attn_gate", "attention_output_gate",
                  "num_nextn_predict_layers", "moe_layers_enum", "use_qk_norm", "zero_centered",
                  "moe_router_activation", "moe_router_scaling_factor", "use_moe_router_bias", "need_fp32_gate",
                  "swiglu_limits", "swiglu_limits_shared", "partial_rotary_factors", "yarn_only_types",
                  "use_rope_layers", "use_moe", "moe_every_n_layer", "moe_layer_offset", "att_impl_type", "sink"},
}
