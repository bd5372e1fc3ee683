"""Hugging Face ``config.json`` to a ``model:`` section in Megatron-Core's names.

:func:`from_hf_config` reads a ``config.json`` (a file, a model directory holding one, or the parsed
dict) and returns the model section of an estimator configuration. It maps every key that changes the
parameter count or the training memory, the way Megatron-Bridge's model bridges translate the same
configs (``model_type`` decides the architecture):

=================================  ====================================================================
Hugging Face                       Megatron-Core (this schema)
=================================  ====================================================================
num_hidden_layers                  num_layers
hidden_size                        hidden_size
num_attention_heads                num_attention_heads
num_key_value_heads                num_query_groups (absent: plain multi-head attention)
head_dim                           kv_channels (Qwen3: 128 even where hidden/heads is not)
intermediate_size                  ffn_hidden_size (the dense MLP; Mixtral's experts too)
vocab_size                         vocab_size (Megatron pads it: make_vocab_size_divisible_by)
max_position_embeddings            max_position_embeddings
rms_norm_eps                       layernorm_epsilon (RMSNorm everywhere)
hidden_act silu / gelu             activation_func swiglu / geglu (all supported MLPs are gated)
tie_word_embeddings                untie_embeddings_and_output_weights (negated)
attention_bias + mlp_bias          add_bias_linear (Llama: only both together map exactly)
Qwen2 / Qwen2-MoE                  add_qkv_bias (bias on q, k, v only; hard-wired in the model)
Qwen3 / Qwen3-MoE                  qk_layernorm (per-head RMSNorm of q and k)
num_local_experts / num_experts /  num_experts
n_routed_experts
num_experts_per_tok                moe_router_topk
moe_intermediate_size              moe_ffn_hidden_size
shared_expert_intermediate_size    moe_shared_expert_intermediate_size, with moe_shared_expert_gate
                                   (Qwen2-MoE's sigmoid gate on the shared expert)
n_shared_experts x                 moe_shared_expert_intermediate_size (DeepSeek: Megatron fuses the
moe_intermediate_size              shared experts into one MLP of the summed width)
first_k_dense_replace,             moe_layer_freq as a 0/1 list (layer i is MoE when
moe_layer_freq (DeepSeek)          i >= first_k_dense_replace and i % moe_layer_freq == 0)
decoder_sparse_step,               moe_layer_freq as a 0/1 list (layer i is MoE when i is not in
mlp_only_layers (Qwen MoE)         mlp_only_layers and (i + 1) % decoder_sparse_step == 0)
topk_method noaux_tc               moe_router_enable_expert_bias (e_score_correction_bias)
scoring_func (DeepSeek)            moe_router_score_function
n_group, topk_group (DeepSeek,     moe_router_num_groups, moe_router_group_topk (group-limited routing,
noaux_tc / group_limited_greedy)   when n_group > 1)
aux_loss_alpha, seq_aux (DeepSeek) moe_aux_loss_coeff with moe_router_load_balancing_type seq_aux_loss, as
                                   Megatron-Bridge's DeepSeek and Kimi bridges set them (DeepSeek-V3's
                                   config.json omits the coefficient: the bridge's 1e-4)
q_lora_rank (null: no compression) q_lora_rank, with multi_latent_attention and qk_layernorm (the
kv_lora_rank                       MLA latent norms)
qk_nope_head_dim                   qk_head_dim
qk_rope_head_dim                   qk_pos_emb_head_dim
v_head_dim                         v_head_dim
num_nextn_predict_layers           mtp_num_layers
=================================  ====================================================================

Keys without effect on parameters or memory (token ids, RoPE base and scaling, sliding windows, router
loss coefficients and scoring, checkpoint quantization) are accepted and dropped. Any other key stops the
import with :class:`~estimator.config.errors.UnsupportedError` naming it: a count is never silently wrong. Every
key that is read is type-checked first (an integer, a finite number, true/false, a name) and held to the
bound of the schema field it becomes, so that ``num_hidden_layers: 10**30`` or ``rms_norm_eps: true`` is
an error naming the key, never an overflow, a hang or a silent 1.0.
Architectures beyond the table (hybrid Mamba, gpt-oss, Qwen3-Next, Qwen3.5 and Qwen3-VL with their vision
tower, ...) are mapped by their own functions below, each documented with the keys it reads.

Nothing is downloaded: a Hub model id (``meta-llama/Llama-3.1-70B``) is resolved from the offline model
catalog (:mod:`estimator.formats.hf_catalog`); an id not in it is an error naming the closest ids.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from ..config import yamlio
from ..config.errors import ConfigError, Problem, UnsupportedError, clip, show
from ..config.schema import MAX_EXPERTS, MAX_LAYERS, MAX_WIDTH, section_specs

__all__ = ["SUPPORTED", "from_hf_config", "read_hf_config", "sibling_note"]

#: model_type -> (architecture class name, a short description), in the order the docs list them.
SUPPORTED: dict[str, tuple[str, str]] = {
    "llama": ("LlamaForCausalLM", "Llama 2, Llama 3, Llama 3.1"),
    "mistral": ("MistralForCausalLM", "Mistral"),
    "mixtral": ("MixtralForCausalLM", "Mixtral"),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2, Qwen2.5"),
    "qwen2_moe": ("Qwen2MoeForCausalLM", "Qwen2-MoE, Qwen1.5-MoE"),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3 dense"),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3-MoE"),
    "deepseek_v2": ("DeepseekV2ForCausalLM", "DeepSeek-V2, DeepSeek-V2-Lite"),
    "deepseek_v3": ("DeepseekV3ForCausalLM", "DeepSeek-V3, DeepSeek-R1, Kimi Moonlight"),
    "kimi_k2": ("DeepseekV3ForCausalLM", "Kimi-K2 (DeepSeek-V3's architecture)"),
    "phi3": ("Phi3ForCausalLM", "Phi-3, Phi-3.5, Phi-4-mini"),
    "mimo": ("MiMoForCausalLM", "MiMo (Qwen2 with MTP layers)"),
    "ernie4_5_moe": ("Ernie4_5_MoeForCausalLM", "ERNIE 4.5 MoE"),
    "bailing_moe": ("BailingMoeV2ForCausalLM", "Ling 2.0 (Bailing MoE V2)"),
    "llama4": ("Llama4ForConditionalGeneration", "Llama 4 (text part)"),
    "gemma2": ("Gemma2ForCausalLM", "Gemma 2"),
    "gemma3_text": ("Gemma3ForCausalLM", "Gemma 3 (text)"),
    "gemma4": ("Gemma4ForConditionalGeneration", "Gemma 4 MoE and 31B dense (text part; the vision tower is not "
               "counted)"),
    "gemma4_text": ("Gemma4ForCausalLM", "Gemma 4 MoE and 31B dense (text)"),
    "nemotron-nas": ("DeciLMForCausalLM", "Llama-Nemotron Super / Ultra (heterogeneous blocks, DeciLM)"),
    "gpt_oss": ("GptOssForCausalLM", "gpt-oss"),
    "qwen3_next": ("Qwen3NextForCausalLM", "Qwen3-Next"),
    "qwen3_5": ("Qwen3_5ForConditionalGeneration", "Qwen3.5 dense (gated delta net + gated attention, vision tower)"),
    "qwen3_5_moe": ("Qwen3_5MoeForConditionalGeneration", "Qwen3.5 MoE (gated delta net + gated attention, vision "
                    "tower)"),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", "Qwen3-VL dense (Qwen3 language model, vision tower with "
                 "deepstack mergers)"),
    "qwen3_vl_moe": ("Qwen3VLMoeForConditionalGeneration", "Qwen3-VL MoE (Qwen3-MoE language model, vision tower "
                     "with deepstack mergers)"),
    "qwen3_5_text": ("Qwen3_5ForCausalLM", "Qwen3.5 dense, language model only"),
    "qwen3_5_moe_text": ("Qwen3_5MoeForCausalLM", "Qwen3.5 MoE, language model only"),
    "nemotron_h": ("NemotronHForCausalLM", "Nemotron-H, Nemotron 3 (hybrid Mamba)"),
    "olmo2": ("Olmo2ForCausalLM", "OLMo 2 (norms after attention and MLP, full-width q/k norms)"),
    "minimax_m2": ("MiniMaxM2ForCausalLM", "MiniMax-M2, M2.5, M2.7"),
    "glm4_moe": ("Glm4MoeForCausalLM", "GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7"),
    "glm4_moe_lite": ("Glm4MoeLiteForCausalLM", "GLM-4.7-Flash (multi-latent attention)"),
    "deepseek_v32": ("DeepseekV32ForCausalLM", "DeepSeek-V3.2, DeepSeek-V3.2-Exp (DeepSeek sparse attention)"),
    "glm_moe_dsa": ("GlmMoeDsaForCausalLM", "GLM-5 (multi-latent attention with DeepSeek sparse attention)"),
    "deepseek_v4": ("DeepseekV4ForCausalLM", "DeepSeek-V4-Flash, DeepSeek-V4-Pro (hybrid compressed attention, "
                    "hyper-connections, hash-routed MoE layers)"),
    "kimi_k25": ("KimiK25ForConditionalGeneration", "Kimi K2.5 (text part: DeepSeek-V3's architecture)"),
    "mistral3": ("Mistral3ForConditionalGeneration", "Mistral Small 3.1/3.2, Magistral, Ministral 3 (text part)"),
    "ministral3": ("Mistral3ForConditionalGeneration", "Ministral 3 (text part)"),
}

#: Refused with the reason: architectures whose parameters this schema cannot describe exactly.
REFUSED: dict[str, str] = {}

_ARCH_TO_TYPE = {arch: mt for mt, (arch, _) in SUPPORTED.items() if mt not in ("kimi_k2", "ministral3")}

#: Keys that change neither the parameter count nor the training memory of any supported architecture.
_INERT = frozenset({
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
_PRETRAINED_DEFAULTS = frozenset({
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
_INERT = _INERT | _PRETRAINED_DEFAULTS

#: Keys the original Qwen3-MoE repositories carry and Hugging Face's Qwen3MoeConfig ignores (the model always has
#: per-head q/k norms, no QKV bias and no shared expert): accepted when they say what the model does.
_QWEN3_MOE_EXTRA = {"qkv_bias": False, "use_qk_norm": True, "shared_expert_intermediate_size": 0}

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

#: Nemotron-H's layer list (transformers 5's NemotronHConfig: layers_block_type, mtp_layers_block_type, one name per
#: layer, num_hidden_layers derived from its length) as the symbols of hybrid_override_pattern. huggingface/
#: transformers @ 13923c6 : src/transformers/models/nemotron_h/configuration_nemotron_h.py (_list_to_pattern) names
#: them linear_attention, full_attention, moe, mlp; the checkpoints' config.json files write mamba and attention.
_BLOCK_SYMBOL = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "moe": "E",
                 "mlp": "-"}

#: Qwen3.5's text_config (Hugging Face Qwen3_5TextConfig / Qwen3_5MoeTextConfig): Qwen3-Next's hybrid keys, the
#: attention output gate, the MTP layers and the SSM-state dtype of inference (no weights).
_QWEN3_5 = _COMMON | {"full_attention_interval", "linear_conv_kernel_dim", "linear_key_head_dim",
                      "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads", "attn_output_gate",
                      "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "mamba_ssm_dtype", "mlp_only_layers",
                      # the gate's activation ("swish" in Qwen3.6-27B; absent means sigmoid): no tensor's size
                      "output_gate_type"}

_GEMMA = frozenset({"hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                    "sliding_window_size", "cache_implementation"})

#: Keys each architecture understands on top of the common ones.
_KNOWN = {
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
                                                 "index_skip_topk_offset", "indexer_types", "mlp_layer_types"},
    "gemma3_text": _COMMON | _GEMMA | {"rope_local_base_freq", "sliding_window_pattern", "use_bidirectional_attention"},
    "nemotron-nas": _COMMON | {"block_configs"},
    "gemma4_text": _COMMON | _GEMMA | {"attention_k_eq_v", "enable_moe_block", "global_head_dim",
                                       "hidden_size_per_layer_input", "expert_intermediate_size",
                                       "moe_intermediate_size", "num_experts",
                                       "num_global_key_value_heads", "num_kv_shared_layers", "top_k_experts",
                                       "use_bidirectional_attention", "use_double_wide_mlp",
                                       "vocab_size_per_layer_input"},
}

_GATED_ACT = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_new": "geglu",
              "gelu_pytorch_tanh": "geglu", "gelu_fast": "geglu"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_MODEL_ORDER = {s.name: i for i, s in enumerate(section_specs("model"))}
_MODEL_SPECS = {s.name: s for s in section_specs("model")}
#: config.json key -> the model field it becomes (its bounds apply to the key), or the bound itself.
_BOUND_OF = {"num_hidden_layers": "num_layers", "hidden_size": "hidden_size",
             "num_attention_heads": "num_attention_heads", "num_key_value_heads": "num_query_groups",
             "head_dim": "kv_channels", "intermediate_size": "ffn_hidden_size", "vocab_size": "vocab_size",
             "max_position_embeddings": "max_position_embeddings", "num_local_experts": "num_experts",
             "num_experts": "num_experts", "n_routed_experts": "num_experts", "num_experts_per_tok": "moe_router_topk",
             "moe_intermediate_size": "moe_ffn_hidden_size", "q_lora_rank": "q_lora_rank",
             "shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
             "kv_lora_rank": "kv_lora_rank", "qk_nope_head_dim": "qk_head_dim", "qk_rope_head_dim": "qk_pos_emb_head_dim",
             "v_head_dim": "v_head_dim", "num_nextn_predict_layers": "mtp_num_layers", "rms_norm_eps": "layernorm_epsilon",
             "attention_dropout": "attention_dropout", "hidden_dropout": "hidden_dropout",
             "decoder_sparse_step": MAX_LAYERS, "first_k_dense_replace": MAX_LAYERS, "moe_layer_freq": MAX_LAYERS,
             "n_shared_experts": MAX_EXPERTS, "aux_loss_alpha": "moe_aux_loss_coeff",
             "n_group": "moe_router_num_groups", "topk_group": "moe_router_group_topk",
             # the families with their own mapping
             "layer_norm_epsilon": "layernorm_epsilon", "norm_eps": "layernorm_epsilon",
             "embd_pdrop": "hidden_dropout", "resid_pdrop": "hidden_dropout",
             "final_logit_softcapping": "final_logit_softcapping", "ssm_state_size": "mamba_state_dim",
             "mamba_head_dim": "mamba_head_dim", "n_groups": "mamba_num_groups", "mamba_num_heads": "mamba_num_heads",
             "moe_latent_size": "moe_latent_size", "attention_head_dim": "kv_channels",
             "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size", "expand": MAX_WIDTH,
             "conv_kernel": MAX_WIDTH, "full_attention_interval": MAX_LAYERS,
             "linear_conv_kernel_dim": "linear_conv_kernel_dim",
             "linear_key_head_dim": "linear_key_head_dim", "linear_value_head_dim": "linear_value_head_dim",
             "linear_num_key_heads": "linear_num_key_heads", "linear_num_value_heads": "linear_num_value_heads",
             "moe_num_experts": "num_experts", "moe_k": "moe_router_topk", "experts_per_token": "moe_router_topk",
             "intermediate_size_mlp": "ffn_hidden_size", "interleave_moe_layer_step": MAX_LAYERS,
             "moe_layer_start_index": MAX_LAYERS, "moe_layer_interval": MAX_LAYERS, "moe_layer_end_index": MAX_LAYERS,
             "num_shared_experts": MAX_EXPERTS, "moe_num_shared_experts": MAX_EXPERTS,
             "index_n_heads": "dsa_indexer_n_heads", "index_head_dim": "dsa_indexer_head_dim",
             "index_topk": "dsa_indexer_topk", "index_topk_freq": MAX_LAYERS,
             "o_groups": "o_groups", "o_lora_rank": "o_lora_rank", "hc_mult": "num_residual_streams",
             "num_hash_layers": "moe_n_hash_layers", "sliding_window": "csa_window_size",
             "index_skip_topk_offset": MAX_LAYERS, "qk_head_dim": MAX_WIDTH,
             "global_head_dim": "global_kv_channels", "num_global_key_value_heads": "num_global_query_groups",
             "top_k_experts": "moe_router_topk", "hidden_size_per_layer_input": MAX_WIDTH,
             "num_kv_shared_layers": MAX_LAYERS, "vocab_size_per_layer_input": "vocab_size",
             "mtp_num_hidden_layers": "mtp_num_layers"}
#: Keys whose 0 means "none" in published configs, though the field they become starts at 1.
_ZERO_IS_NONE = frozenset({"q_lora_rank", "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
                           "moe_latent_size", "max_position_embeddings", "n_group", "topk_group", "num_experts"})
#: What a key whose 0 is refused stands for (the hint of the error).
_ZERO_HINT = {"n_routed_experts": "null or absent for a model without routed experts",
              "num_local_experts": "the number of experts of every MoE layer"}
#: Unknown keys named in the error; the rest are counted.
_LISTED_KEYS = 20


def _supported_list() -> str:
    return "; ".join(f"{desc} ({mt}, {arch})" for mt, (arch, desc) in SUPPORTED.items())


def read_hf_config(source) -> dict:
    """The parsed ``config.json`` of a file, a model directory, a catalog Hub id or a dict (returned as is)."""
    if isinstance(source, dict):       # (only the keys known are read, in linear time: no size limit needed)
        from ..config.load import too_deep
        if too_deep(source):
            raise ConfigError(Problem("hf", None, f"the config.json nests deeper than {yamlio.MAX_DEPTH} levels"))
        return source
    if not isinstance(source, (str, os.PathLike)) or not isinstance(os.fspath(source), str):
        raise ConfigError(Problem("hf", type(source).__name__,
                                  "expected a config.json path, a model directory or a dict"))
    from ..config.load import path_kind, read_text_file
    path = Path(source)
    kind = path_kind(path)
    if kind is None:
        text = clip(os.fspath(source))
        if _HUB_ID.match(text) and not text.endswith(".json"):
            from .hf_catalog import get         # a Hub id: the offline catalog's copy, never a download
            return get(text).config()
        raise ConfigError(Problem("hf", text, f"file not found: {text}"))
    if kind == "dir":
        path = path / "config.json"
        if path_kind(path) != "file":
            raise ConfigError(Problem("hf", os.fspath(source), f"directory {source} holds no config.json"))
    try:
        data = yamlio.load_json(read_text_file(path, "hf"))
    except yamlio.YamlError as exc:
        raise ConfigError(Problem("hf", clip(os.fspath(path)), f"invalid JSON in {clip(os.fspath(path))}: "
                                  f"{exc}")) from None
    if not isinstance(data, dict):
        raise ConfigError(Problem("hf", os.fspath(path), "a config.json must hold a JSON object"))
    return data


def sibling_note(source) -> str | None:
    """The note for a Hub id that resolves to a catalogued sibling (another tuning suffix), else None."""
    if not isinstance(source, str) or not _HUB_ID.match(source.strip()) or source.strip().endswith(".json"):
        return None
    from ..config.load import path_kind
    if path_kind(Path(source)) is not None:          # a local file or directory wins
        return None
    from .hf_catalog import resolve
    try:
        return resolve(source)[1]
    except ConfigError:
        return None


def _model_type(hf: dict) -> str:
    mt = hf.get("model_type")
    archs = hf.get("architectures") or []
    if mt is not None and not isinstance(mt, str):
        raise ConfigError(Problem("config.json:model_type", mt, f"must be a name such as 'llama', got {show(mt)}"))
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(Problem("config.json:architectures", archs, "must be a list of class names such as "
                                  f"['LlamaForCausalLM'], got {show(archs)}"))
    if mt is None and archs:
        mt = _ARCH_TO_TYPE.get(archs[0])
    if mt in REFUSED:
        raise UnsupportedError(f"{archs[0] if archs else mt} (model_type {mt}) is not supported: {REFUSED[mt]}. "
                               f"Supported: {_supported_list()}.")
    if mt not in SUPPORTED:
        name = archs[0] if archs else (mt or "a config.json without model_type or architectures")
        raise UnsupportedError(f"unknown architecture {show(name)} (model_type {show(mt)}). Supported: "
                               f"{_supported_list()}.")
    return mt


class _Reader:
    """Typed access to the keys of one config.json, with errors that name the key."""

    def __init__(self, hf: dict, mt: str):
        self.hf, self.mt = hf, mt

    @staticmethod
    def bound(key: str):
        b = _BOUND_OF.get(key)
        return _MODEL_SPECS[b].max if isinstance(b, str) else b

    @staticmethod
    def least(key: str) -> int:
        """The smallest value of a key: that of the field it becomes (0 where published configs write 0 for none)."""
        b = _BOUND_OF.get(key)
        return int(_MODEL_SPECS[b].min or 0) if isinstance(b, str) and key not in _ZERO_IS_NONE else 0

    def int(self, key: str, default=None, *, required: bool = True):
        v = self.hf.get(key)
        if v is None:
            if default is not None or not required:
                return default
            raise ConfigError(Problem(f"config.json:{key}", None, f"is required for {self.mt} and missing"))
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be a non-negative integer, got {show(v)}"))
        least = self.least(key)
        if v < least:
            hint = f" ({_ZERO_HINT[key]})" if key in _ZERO_HINT else ""
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be >= {least}{hint}, got {show(v)}"))
        top = self.bound(key)
        if top is not None and v > top:
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be <= {top:,}, got {show(v)}"))
        return v

    def number(self, key: str, default: float | None) -> float | None:
        """A finite number within the bounds of the field it becomes (true/false is not a number)."""
        v = self.hf.get(key)
        if v is None:
            return default
        spec = _MODEL_SPECS[_BOUND_OF[key]]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be a finite number, got {show(v)}"))
        if not spec.min <= v <= spec.max:
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be between {spec.min:g} and {spec.max:g}, "
                                      f"got {show(v)}"))
        return float(v)

    def name(self, key: str, default: str | None, allowed=()) -> str | None:
        """A string key; ``allowed``, when given, is what the error lists (the caller refuses other names)."""
        v = self.hf.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            also = f"; allowed: {', '.join(allowed)}" if allowed else ""
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be a name (a string), got {show(v)}{also}"))
        return v

    def flag(self, key: str, default: bool = False) -> bool:
        v = self.hf.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be true or false, got {show(v)}"))
        return v


def from_hf_config(source, *, strict: bool = True) -> dict:
    """The ``model:`` section for a Hugging Face ``config.json`` (path, model directory, catalog Hub id or dict).

    Raises :class:`UnsupportedError` for an unknown or refused architecture, for a value with no exact
    Megatron-Core equivalent, and (with ``strict``) for any key not known to be harmless; raises
    :class:`ConfigError` for a missing file, a Hub id not in the catalog, invalid JSON or a missing required key.
    """
    hf = read_hf_config(source)
    mt = _model_type(hf)
    wrapper = hf if mt in _QWEN_VISION else None
    if mt in _WRAPPED:
        hf, mt = _text_part(hf, mt, strict)
    elif mt in ("qwen3_5_text", "qwen3_5_moe_text"):     # Qwen35Bridge / Qwen35MoEBridge: the language model alone
        mt, wrapper = mt[:-len("_text")], None
    if mt == "nemotron_h" and ("layers_block_type" in hf or "mtp_layers_block_type" in hf):
        hf = _nemotron_block_types(hf)
    if mt == "qwen3_moe":
        for key, means in _QWEN3_MOE_EXTRA.items():
            if key in hf and hf[key] != means:
                raise UnsupportedError(f"config.json:{key} = {show(hf[key])} for qwen3_moe: Hugging Face's Qwen3-MoE "
                                       f"ignores the key and builds the model as if it were {show(means)}, so the "
                                       "checkpoint and this config.json disagree")
    if strict:
        unknown = sorted(show(k) if not isinstance(k, str) or len(k) > 64 else k for k in hf
                         if k not in _KNOWN[mt] and k not in _INERT
                         and not (mt == "qwen3_moe" and k in _QWEN3_MOE_EXTRA))
        if unknown:
            listed = ", ".join(unknown[:_LISTED_KEYS]) + (f" and {len(unknown) - _LISTED_KEYS:,} more"
                                                         if len(unknown) > _LISTED_KEYS else "")
            raise UnsupportedError(
                f"config.json key(s) not understood for {mt}: {listed}. They may change "
                f"the parameter count, so the import stops rather than guess (pass strict=False to ignore them).")
    r = _Reader(hf, mt)
    L = r.int("num_hidden_layers")
    m: dict = {
        "num_layers": L,
        "hidden_size": r.int("hidden_size"),
        "num_attention_heads": r.int("num_attention_heads"),
        "vocab_size": r.int("vocab_size"),
        "normalization": "RMSNorm",
        "layernorm_epsilon": r.number("rms_norm_eps", 1e-6),
        "position_embedding_type": "rope",
        "untie_embeddings_and_output_weights": not r.flag("tie_word_embeddings", False),
    }
    act = r.name("hidden_act", "silu", sorted(_GATED_ACT))
    if act not in _GATED_ACT:
        raise UnsupportedError(f"config.json:hidden_act {show(act)} is not supported for {mt}; the gated MLP takes "
                               f"one of {', '.join(sorted(_GATED_ACT))}")
    m["activation_func"], m["gated_linear_unit"] = _GATED_ACT[act], True
    max_pos = r.int("max_position_embeddings", required=False)
    if max_pos:
        m["max_position_embeddings"] = max_pos
    for key in ("attention_dropout", "hidden_dropout"):
        p = r.number(key, 0.0)
        if p > 0:
            m[key] = p
    if mt in _OWN_MAPPING:
        _OWN_MAPPING[mt](r, m)
    elif mt.startswith("deepseek") or mt == "kimi_k2":
        _deepseek(r, m)
    else:
        _gqa(r, m)
        if mt in ("mixtral", "qwen2_moe", "qwen3_moe"):
            _moe(r, m)
    if wrapper is not None:
        _qwen_vision(wrapper.get("vision_config"), m, strict)
    return {k: m[k] for k in sorted(m, key=_MODEL_ORDER.__getitem__)}


def _gqa(r: _Reader, m: dict) -> None:
    """Standard attention (MHA/GQA) and the dense MLP of the Llama-style families."""
    mt, hf = r.mt, r.hf
    m["num_query_groups"] = r.int("num_key_value_heads", m["num_attention_heads"])
    head_dim = r.int("head_dim", required=False)
    if mt in ("qwen3", "qwen3_moe") and head_dim is None:
        raise ConfigError(Problem("config.json:head_dim", None, f"is required for {mt}: Qwen3's head width is "
                                  "128 even where hidden_size / num_attention_heads differs, so it must be stated"))
    if head_dim is not None:
        m["kv_channels"] = head_dim
    m["ffn_hidden_size"] = r.int("intermediate_size")
    att_bias, mlp_bias = r.flag("attention_bias"), r.flag("mlp_bias")
    if mt in ("qwen2", "qwen2_moe", "mimo"):
        if mlp_bias or hf.get("attention_bias") is False:
            raise UnsupportedError(f"{mt} always has biases on q, k and v only; this config.json sets "
                                   f"attention_bias={show(hf.get('attention_bias'))}, mlp_bias={show(mlp_bias)}, which "
                                   "does not describe that model")
        m["add_qkv_bias"] = True
    elif att_bias and mlp_bias and mt == "llama":
        m["add_bias_linear"] = True
    elif att_bias or mlp_bias:
        what = "attention_bias (q, k, v and o projections)" if att_bias else "mlp_bias"
        raise UnsupportedError(f"config.json:{what} = true for {mt} has no exact Megatron-Core equivalent: "
                               "add_bias_linear puts biases on every linear layer, add_qkv_bias on q, k, v only")
    if mt in ("qwen3", "qwen3_moe"):
        m["qk_layernorm"] = True


def _pattern_value(pattern: list[int]):
    """A 0/1 MoE pattern as this schema writes it: omitted when every layer is MoE."""
    return None if all(pattern) else pattern


def _moe(r: _Reader, m: dict) -> None:
    """Mixtral, Qwen2-MoE and Qwen3-MoE experts."""
    mt, L = r.mt, m["num_layers"]
    if mt == "mixtral":
        m["num_experts"] = r.int("num_local_experts")
        m["moe_ffn_hidden_size"] = m["ffn_hidden_size"]
    else:
        m["num_experts"] = r.int("num_experts")
        if m["num_experts"] == 0:       # Hugging Face's Qwen MoE models build dense MLPs then
            raise UnsupportedError(f"{mt} config.json makes no layer MoE (num_experts 0); import it as its dense "
                                   "counterpart instead")
        m["moe_ffn_hidden_size"] = r.int("moe_intermediate_size")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    if mt in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe"):
        step = r.int("decoder_sparse_step", 1)
        only = r.hf.get("mlp_only_layers")
        only = [] if only is None else only
        if not isinstance(only, list) or len(only) > L or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < L for i in only):
            raise ConfigError(Problem("config.json:mlp_only_layers", only,
                                      f"must be a list of layer indices in 0..{L - 1}"))
        if step < 1:
            raise ConfigError(Problem("config.json:decoder_sparse_step", step, "must be >= 1"))
        dense = set(only)
        pattern = [int(i not in dense and (i + 1) % step == 0) for i in range(L)]
        if not any(pattern):
            raise UnsupportedError(f"{mt} config.json makes no layer MoE (mlp_only_layers/decoder_sparse_step); "
                                   "import it as its dense counterpart instead")
        freq = _pattern_value(pattern)
        if freq is not None:
            m["moe_layer_freq"] = freq
    if mt in ("qwen2_moe", "qwen3_next", "qwen3_5_moe"):
        shared = r.int("shared_expert_intermediate_size", 0)
        if shared:
            m["moe_shared_expert_intermediate_size"] = shared
            m["moe_shared_expert_gate"] = True


def _mla(r: _Reader, m: dict) -> None:
    """Multi-latent attention as DeepSeek-V2/V3 write it (and GLM-4.7-Flash after them): the q and kv latent
    ranks (q_lora_rank optional), the nope / rope / v head dims, and the latent norms."""
    m["multi_latent_attention"] = True
    m["qk_layernorm"] = True
    q_lora = r.int("q_lora_rank", required=False)
    if q_lora:
        m["q_lora_rank"] = q_lora
    m["kv_lora_rank"] = r.int("kv_lora_rank")
    m["qk_head_dim"] = r.int("qk_nope_head_dim")
    m["qk_pos_emb_head_dim"] = r.int("qk_rope_head_dim")
    m["v_head_dim"] = r.int("v_head_dim")


def _deepseek_experts(r: _Reader, m: dict) -> None:
    """DeepSeek's routed and shared experts (V2/V3 and V4 alike): num_experts_per_tok of moe_intermediate_size, and
    n_shared_experts (none by default) joined into one shared expert of that many times the width."""
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    fm = r.int("moe_intermediate_size")
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("n_shared_experts", 0)
    if shared:
        m["moe_shared_expert_intermediate_size"] = shared * fm


def _deepseek(r: _Reader, m: dict) -> None:
    """DeepSeek-V2/V3 (and Moonlight): multi-latent attention, first-k-dense MoE, shared experts, MTP."""
    mt, L = r.mt, m["num_layers"]
    for key in ("attention_bias", "mlp_bias"):
        if r.flag(key):
            raise UnsupportedError(f"config.json:{key} = true for {mt}: biases on the MLA or MoE projections "
                                   "have no Megatron-Core equivalent")
    _mla(r, m)
    m["ffn_hidden_size"] = r.int("intermediate_size")
    experts = r.int("n_routed_experts", required=False)
    if experts:
        m["num_experts"] = experts
        _deepseek_experts(r, m)
        first = r.int("first_k_dense_replace", 0)
        freq = r.int("moe_layer_freq", 1)
        if freq < 1:
            raise ConfigError(Problem("config.json:moe_layer_freq", freq, "must be >= 1"))
        pattern = [int(i >= first and i % freq == 0) for i in range(L)]
        if not any(pattern):
            raise UnsupportedError(f"{mt} config.json makes no layer MoE (first_k_dense_replace {first} >= "
                                   f"num_hidden_layers {L})")
        if _pattern_value(pattern) is not None:
            m["moe_layer_freq"] = pattern
        method = r.name("topk_method", "greedy")
        if method == "noaux_tc":
            m["moe_router_enable_expert_bias"] = True
        elif method not in ("greedy", "group_limited_greedy"):
            raise UnsupportedError(f"config.json:topk_method {show(method)} is not supported; known: greedy, "
                                   "group_limited_greedy, noaux_tc (adds the e_score_correction_bias)")
        _deepseek_router(r, m, method)
    mtp = r.int("num_nextn_predict_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp


def _deepseek_router(r: _Reader, m: dict, method: str) -> None:
    """The router as Megatron-Bridge builds it from a DeepSeek config.json (NVIDIA-NeMo/Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/conversion/model_bridge.py CONFIG_MAPPING: scoring_func, n_group, topk_group,
    aux_loss_alpha; models/deepseek/deepseek_v2_bridge.py, deepseek_v3_bridge.py, models/kimi/kimi_bridge.py:
    seq_aux_loss, and DeepSeek-V3's coefficient 1e-4 where its config.json has none; DeepSeek-V3.2, V3's
    architecture with sparse attention and no bridge of its own, the same)."""
    fn = r.name("scoring_func", "softmax")
    if fn not in ("softmax", "sigmoid"):
        raise UnsupportedError(f"config.json:scoring_func {show(fn)} is not supported for {r.mt}; known: softmax, "
                               "sigmoid")
    if fn != "softmax":
        m["moe_router_score_function"] = fn
    groups, topk = r.int("n_group", required=False), r.int("topk_group", required=False)
    if method in ("noaux_tc", "group_limited_greedy") and groups and groups > 1 and topk:
        m["moe_router_num_groups"], m["moe_router_group_topk"] = groups, topk
    coeff = r.number("aux_loss_alpha", 1e-4 if r.mt in ("deepseek_v3", "deepseek_v32") else None)
    if coeff:
        m["moe_router_load_balancing_type"] = "seq_aux_loss" if r.flag("seq_aux", True) else "aux_loss"
        m["moe_aux_loss_coeff"] = coeff


# ---------------------------------------------------------------------- architectures with their own mapping

def _refuse_true(r: _Reader, *keys: str, why: str) -> None:
    for key in keys:
        if r.flag(key):
            raise UnsupportedError(f"config.json:{key} = true for {r.mt}: {why}")


def _positive_dropouts(r: _Reader, m: dict, *keys: str) -> None:
    """Phi-3's embd_pdrop / resid_pdrop: dropout on the embedding and the residual branches, Megatron's
    hidden_dropout (which it applies to both)."""
    vals = {k: r.number(k, 0.0) for k in keys}
    if len(set(vals.values())) > 1:
        raise UnsupportedError(f"config.json:{', '.join(keys)} = {vals} for {r.mt}: Megatron applies one "
                               "hidden_dropout to the embedding and the residual branches alike")
    p = next(iter(vals.values()))
    if p > 0:
        m["hidden_dropout"] = float(p)


def _phi3(r: _Reader, m: dict) -> None:
    """Phi-3 / Phi-3.5 / Phi-4-mini: Llama's layers with fused qkv_proj and gate_up_proj (the same tensors, the same
    count); embd_pdrop / resid_pdrop are the hidden dropout."""
    _refuse_true(r, "lm_head_bias", why="a bias on the output layer has no Megatron-Core equivalent")
    _gqa(r, m)
    _positive_dropouts(r, m, "embd_pdrop", "resid_pdrop")


def _mimo(r: _Reader, m: dict) -> None:
    """MiMo: Qwen2's layers (bias on q, k, v) and num_nextn_predict_layers MTP layers, each a Qwen2 layer with
    token/hidden norms, an input projection 2h x h and a final norm, as Megatron-Core's MTP layer."""
    _gqa(r, m)
    mtp = r.int("num_nextn_predict_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp


def _ernie4_5_moe(r: _Reader, m: dict) -> None:
    """ERNIE 4.5 MoE (Megatron-Bridge ernie_45_bridge): dense layers before moe_layer_start_index, MoE after,
    moe_num_shared_experts shared experts of the expert width, aux-free expert bias (moe_use_aux_free)."""
    _refuse_true(r, "use_bias", why="biases on every projection are not what ERNIE 4.5 MoE ships")
    _gqa(r, m)
    L = m["num_layers"]
    m["num_experts"] = r.int("moe_num_experts")
    m["moe_router_topk"] = r.int("moe_k")
    fm = r.hf.get("moe_intermediate_size")
    if isinstance(fm, list) and fm and all(type(x) is int and x == fm[0] for x in fm):
        fm = fm[0]
    if type(fm) is not int or not 1 <= fm <= r.bound("moe_intermediate_size"):
        raise ConfigError(Problem("config.json:moe_intermediate_size", fm, "must be a positive integer (or a list "
                                  f"of equal ones) up to {r.bound('moe_intermediate_size'):,}, got {show(fm)}"))
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("moe_num_shared_experts", 0)
    if shared:
        m["moe_shared_expert_intermediate_size"] = shared * fm
    start, step = r.int("moe_layer_start_index", 0), r.int("moe_layer_interval", 1)
    end = r.int("moe_layer_end_index", L - 1)
    if step != 1 or end != L - 1 or start >= L:
        raise UnsupportedError(f"config.json:moe_layer_interval {step} / moe_layer_end_index {end} / "
                               f"moe_layer_start_index {start}: only MoE layers from the start index to the last "
                               "layer, every layer, are mapped (as Megatron-Bridge does)")
    pattern = [int(i >= start) for i in range(L)]
    if _pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    if r.flag("moe_use_aux_free"):
        m["moe_router_enable_expert_bias"] = True


def _bailing_moe(r: _Reader, m: dict) -> None:
    """Ling 2.0 / Bailing MoE V2 (Megatron-Bridge bailing_moe2_bridge): first_k_dense_replace dense layers, then
    MoE with shared experts and a sigmoid router with expert bias, per-head q/k norms, MTP layers."""
    _refuse_true(r, "use_bias", why="biases on every projection have no Megatron-Core equivalent here")
    if not r.flag("use_rmsnorm", True):
        raise UnsupportedError("config.json:use_rmsnorm = false for bailing_moe: only RMSNorm is mapped")
    m["num_query_groups"] = r.int("num_key_value_heads", m["num_attention_heads"])
    head_dim = r.int("head_dim", required=False)
    if head_dim is not None:
        m["kv_channels"] = head_dim
    m["ffn_hidden_size"] = r.int("intermediate_size")
    if r.flag("use_qkv_bias"):
        m["add_qkv_bias"] = True
    if r.flag("use_qk_norm"):
        m["qk_layernorm"] = True
    L = m["num_layers"]
    m["num_experts"] = r.int("num_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    fm = r.int("moe_intermediate_size")
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("moe_shared_expert_intermediate_size", required=False)
    if shared is None:
        shared = r.int("num_shared_experts", 0) * fm
    if shared:
        m["moe_shared_expert_intermediate_size"] = shared
    first = r.int("first_k_dense_replace", 0)
    pattern = [int(i >= first) for i in range(L)]
    if not any(pattern):
        raise UnsupportedError(f"bailing_moe config.json makes no layer MoE (first_k_dense_replace {first})")
    if _pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    if r.flag("moe_router_enable_expert_bias"):
        m["moe_router_enable_expert_bias"] = True
    mtp = r.int("num_nextn_predict_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp


def _gpt_oss(r: _Reader, m: dict) -> None:
    """gpt-oss (Megatron-Bridge gpt_oss_bridge): every layer MoE with num_local_experts experts of width
    intermediate_size, biases on q/k/v/o, on every expert projection and on the router (add_bias_linear), learned
    attention sinks (softmax_type learnable), quick-GeGLU experts (quick_gelu, gated; swiglu_limit is a clamp),
    YaRN positions (no parameters). Sliding-window layers (layer_types) change no tensor's size."""
    hf = r.hf
    if not r.flag("attention_bias"):
        raise UnsupportedError("config.json:attention_bias must be true for gpt_oss: Megatron-Core's add_bias_linear "
                               "puts biases on q, k, v and o as gpt-oss has them; without them there is no exact "
                               "mapping")
    _refuse_true(r, "mlp_bias", why="gpt-oss's experts always have biases; the key has no meaning here")
    if r.name("hidden_act", "silu", ("silu",)) != "silu":
        raise UnsupportedError(f"config.json:hidden_act {show(hf.get('hidden_act'))} for gpt_oss: only its "
                               "quick-GeGLU experts (hidden_act silu) are mapped")
    m["num_query_groups"] = r.int("num_key_value_heads", m["num_attention_heads"])
    head_dim = r.int("head_dim", required=False)
    if head_dim is not None:
        m["kv_channels"] = head_dim
    fm = r.int("intermediate_size")
    m["ffn_hidden_size"] = fm
    m["add_bias_linear"] = True
    m["softmax_type"] = "learnable"
    m["activation_func"], m["gated_linear_unit"] = "quick_gelu", True
    m["num_experts"] = r.int("num_local_experts")
    k = r.int("num_experts_per_tok", required=False)
    m["moe_router_topk"] = k if k is not None else r.int("experts_per_token")
    m["moe_ffn_hidden_size"] = fm
    scaling = hf.get("rope_scaling")
    if isinstance(scaling, dict) and (scaling.get("rope_type") or scaling.get("type")) == "yarn":
        m["position_embedding_type"] = "yarn"


def _qwen3_next(r: _Reader, m: dict) -> None:
    """Qwen3-Next (Megatron-Bridge qwen3_next_bridge): gated delta net layers with a full gated-attention layer every
    full_attention_interval layers (experimental_attention_variant gdn, linear_attention_freq), per-head q/k norms,
    the attention output gate, and Qwen MoE layers with a gated shared expert. The checkpoint's MTP layer
    (mtp.* tensors) is not in config.json and Hugging Face does not load it; it is left out here too."""
    _gqa(r, m)
    m["qk_layernorm"] = True
    m["attention_output_gate"] = True
    m["experimental_attention_variant"] = "gdn"
    freq = r.int("full_attention_interval")
    if freq < 1:
        raise ConfigError(Problem("config.json:full_attention_interval", freq, "must be >= 1"))
    m["linear_attention_freq"] = freq
    for key in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                "linear_num_value_heads"):
        m[key] = r.int(key)
    _moe(r, m)


def _qwen3_5(r: _Reader, m: dict) -> None:
    """Qwen3.5's language model (text_config), as Megatron-Bridge maps it (NVIDIA-NeMo/Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/qwen/qwen35_bridge.py ``_apply_qwen35_common_config``, ``_apply_qwen35_moe_config``;
    qwen_vl/qwen35_vl_bridge.py ``provider_bridge``): Qwen3-Next's hybrid of gated delta nets and gated attention
    (experimental_attention_variant gated_delta_net, attention_output_gate, qk_layernorm; the layer pattern from
    layer_types, else full_attention_interval: transformers_compat.py ``full_attention_interval_from_hf``), GQA
    with head_dim, the GDN dims, and either a dense SwiGLU MLP of intermediate_size (qwen3_5) or Qwen MoE layers
    with a gated shared expert (qwen3_5_moe: global_aux_loss at router_aux_loss_coef). mtp_num_hidden_layers MTP
    layers (model_bridge.py CONFIG_MAPPING: mtp_num_layers), each built like the last decoder layer (full
    attention). Partial RoPE (partial_rotary_factor), mRoPE sections and the zero-centred norms change no
    tensor's size; the embeddings are tied only if the wrapper's tie_word_embeddings says so."""
    hf, L = r.hf, m["num_layers"]
    _refuse_true(r, "attention_bias", "mlp_bias", why="Qwen3.5's projections have no biases")
    if not r.flag("attn_output_gate", True):
        raise UnsupportedError(f"config.json:attn_output_gate = false for {r.mt}: Megatron-Bridge always builds the "
                               "attention output gate (attention_output_gate true)")
    if r.flag("mtp_use_dedicated_embeddings"):
        raise UnsupportedError(f"config.json:mtp_use_dedicated_embeddings = true for {r.mt}: Megatron-Bridge's MTP "
                               "layer shares the main embedding; a dedicated one is not mapped")
    m["num_query_groups"] = r.int("num_key_value_heads", m["num_attention_heads"])
    m["kv_channels"] = r.int("head_dim")
    m["qk_layernorm"] = True
    m["attention_output_gate"] = True
    m["experimental_attention_variant"] = "gdn"
    interval = r.int("full_attention_interval", required=False)
    if interval is not None and interval < 1:
        raise ConfigError(Problem("config.json:full_attention_interval", interval, "must be >= 1"))
    kinds = hf.get("layer_types")
    if kinds is not None:
        ok = {"linear_attention": 1, "full_attention": 0}
        if not isinstance(kinds, list) or len(kinds) != L or any(k not in ok for k in kinds):
            raise ConfigError(Problem("config.json:layer_types", kinds, f"must list num_hidden_layers ({L}) entries, "
                                      "each linear_attention or full_attention"))
        pattern = [ok[k] for k in kinds]
        if interval is not None and pattern == [int((i + 1) % interval != 0) for i in range(L)]:
            m["linear_attention_freq"] = interval
        else:
            m["linear_attention_freq"] = pattern          # Bridge prefers layer_types when both are given
    elif interval is not None:
        m["linear_attention_freq"] = interval
    else:
        raise ConfigError(Problem("config.json:layer_types", None, f"is required for {r.mt} (or "
                                  "full_attention_interval): which layers are full attention"))
    for key in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                "linear_num_value_heads"):
        m[key] = r.int(key)
    if r.mt == "qwen3_5":
        m["ffn_hidden_size"] = r.int("intermediate_size")
    else:
        r.int("intermediate_size", required=False)
        _moe(r, m)
        m["moe_router_load_balancing_type"] = "global_aux_loss"
        coeff = hf.get("router_aux_loss_coef", 1e-3)
        if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not 0 <= coeff < 1e6:
            raise ConfigError(Problem("config.json:router_aux_loss_coef", coeff, "must be a non-negative number"))
        if coeff:
            m["moe_aux_loss_coeff"] = float(coeff)
    mtp = r.int("mtp_num_hidden_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp


#: vision_config keys -> the model field they become (Megatron-Bridge @ 067f987d :
#: src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/transformer_config.py ``get_vision_model_config``).
_VISION_FIELDS = {"depth": "vision_num_layers", "hidden_size": "vision_hidden_size",
                  "num_heads": "vision_num_attention_heads", "intermediate_size": "vision_ffn_hidden_size",
                  "patch_size": "vision_patch_size", "temporal_patch_size": "vision_temporal_patch_size",
                  "in_channels": "vision_in_channels", "spatial_merge_size": "vision_spatial_merge_size",
                  "num_position_embeddings": "vision_num_position_embeddings",
                  "out_hidden_size": "vision_out_hidden_size"}
_VISION_INERT = frozenset({"model_type", "initializer_range", "hidden_act", "deepstack_visual_indexes", "dtype",
                           "torch_dtype", "_name_or_path", "transformers_version"})


def _qwen_vision(vc, m: dict, strict: bool) -> None:
    """The vision tower of a Qwen3.5 or Qwen3-VL config.json (its vision_config), as Megatron-Bridge builds it
    (modelling_qwen3_vl/transformer_config.py ``get_vision_model_config``: num_layers depth, hidden_size, num_heads
    heads without GQA, ffn intermediate_size, biases on every linear, LayerNorm, tanh-GELU MLP not gated;
    vision_model.py ``Qwen3VLVisionModel``: a Conv3d patch embedding, num_position_embeddings learned positions,
    the patch merger to out_hidden_size; transformer_block.py: one deepstack merger per deepstack_visual_indexes
    entry, Qwen3-VL's). Every value is required (the tower's parameters depend on them); hidden_act other than
    gelu_pytorch_tanh is refused: Bridge hard-wires the activation."""
    if not isinstance(vc, dict):
        raise ConfigError(Problem("config.json:vision_config", vc, "is required for Qwen3.5 and Qwen3-VL (the "
                                  "vision tower)"))
    if strict:
        unknown = sorted(str(k) for k in vc if k not in _VISION_FIELDS and k not in _VISION_INERT
                         and k not in _PRETRAINED_DEFAULTS)
        if unknown:
            raise UnsupportedError("config.json:vision_config key(s) not understood: "
                                   f"{', '.join(unknown[:_LISTED_KEYS])}")
    act = vc.get("hidden_act", "gelu_pytorch_tanh")
    if act != "gelu_pytorch_tanh":
        raise UnsupportedError(f"config.json:vision_config.hidden_act {show(act)}: Megatron-Bridge's vision tower "
                               "uses the tanh GELU (gelu_pytorch_tanh) whatever the config says; only that is mapped")
    deep = vc.get("deepstack_visual_indexes")
    deep = [] if deep is None else deep
    depth = vc.get("depth")
    if not isinstance(deep, list) or len(set(deep)) != len(deep) or not all(
            isinstance(i, int) and not isinstance(i, bool) and isinstance(depth, int) and 0 <= i < depth
            for i in deep):
        raise ConfigError(Problem("config.json:vision_config.deepstack_visual_indexes", deep, "must be a list of "
                                  "distinct tower layer indices in 0..depth-1 (one deepstack merger each)"))
    if deep:
        m["vision_deepstack_mergers"] = len(deep)
    for key, name in _VISION_FIELDS.items():
        v = vc.get(key)
        spec = _MODEL_SPECS[name]
        if isinstance(v, bool) or not isinstance(v, int) or not spec.min <= v <= spec.max:
            raise ConfigError(Problem(f"config.json:vision_config.{key}", v, f"must be an integer from "
                                      f"{spec.min:g} to {spec.max:g} (it becomes model.{name})"))
        m[name] = v


_RELU2 = {"relu2": ("squared_relu", False)}


def _block_pattern(hf: dict, key: str) -> str:
    names = hf[key]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n in _BLOCK_SYMBOL for n in names):
        raise ConfigError(Problem(f"config.json:{key}", show(names), "must be a non-empty list of layer kinds, each "
                                  f"one of {', '.join(sorted(_BLOCK_SYMBOL))}"))
    return "".join(_BLOCK_SYMBOL[n] for n in names)


def _nemotron_block_types(hf: dict) -> dict:
    """A copy of a Nemotron-H config.json whose layers_block_type / mtp_layers_block_type (transformers 5's spelling,
    no num_hidden_layers needed) are stated as hybrid_override_pattern / mtp_hybrid_override_pattern and
    num_hidden_layers, which :func:`_nemotron_h` reads. A config.json that states both spellings must agree."""
    out = dict(hf)
    for names, pattern in (("layers_block_type", "hybrid_override_pattern"),
                           ("mtp_layers_block_type", "mtp_hybrid_override_pattern")):
        if names not in hf:
            continue
        derived = _block_pattern(hf, names)
        if pattern in hf and hf[pattern] != derived:
            raise ConfigError(Problem(f"config.json:{pattern}", show(hf[pattern]), f"must agree with {names} "
                                      f"({derived}) where a config.json states both"))
        out[pattern] = derived
        del out[names]
    if "layers_block_type" in hf:
        layers = len(hf["layers_block_type"])
        if "num_hidden_layers" in hf and hf["num_hidden_layers"] != layers:
            raise ConfigError(Problem("config.json:num_hidden_layers", show(hf["num_hidden_layers"]), "must equal "
                                      f"the length of layers_block_type ({layers})"))
        out["num_hidden_layers"] = layers
    return out


def _nemotron_h(r: _Reader, m: dict) -> None:
    """Nemotron-H / Nemotron 3 (Megatron-Bridge nemotron_h_bridge, HybridModel): hybrid_override_pattern is the
    layer pattern (M Mamba-2, * attention, - MLP, E MoE; transformers 5's layers_block_type list is read as it, see
    :func:`_nemotron_block_types`); mtp_hybrid_override_pattern repeated
    num_nextn_predict_layers times its MTP layers. Mamba-2: ssm_state_size, mamba_head_dim, mamba_num_heads (or
    expand x hidden_size / mamba_head_dim), n_groups; Megatron-Core's MambaMixer fixes the convolution width at 4
    with a bias and no projection biases. MLP and experts: squared ReLU (relu2), not gated. MoE: sigmoid router
    with expert bias, moe_shared_expert_intermediate_size, moe_latent_size. No position embedding."""
    hf, a = r.hf, m["num_attention_heads"]
    pattern = hf.get("hybrid_override_pattern")
    if not isinstance(pattern, str):
        raise ConfigError(Problem("config.json:hybrid_override_pattern", pattern, "is required for nemotron_h: "
                                  "one symbol per layer (M, *, -, E)"))
    depths = r.int("num_nextn_predict_layers", 0)
    if depths:
        mtp = hf.get("mtp_hybrid_override_pattern")
        if not isinstance(mtp, str) or not mtp:
            raise ConfigError(Problem("config.json:mtp_hybrid_override_pattern", mtp, "is required with "
                                      "num_nextn_predict_layers > 0 (the layers of one MTP depth)"))
        if r.flag("mtp_use_repeated_layer", True):     # true by default with MTP layers: one layer, every depth
            m["mtp_use_repeated_layer"] = True
        pattern = pattern + "/" + "/".join([mtp] * depths)
    from ..config.hybrid_pattern import parse, pattern_problems
    bad = pattern_problems(pattern)
    if bad:
        raise UnsupportedError(f"config.json:hybrid_override_pattern {show(pattern)}: {'; '.join(bad)}")
    if len(parse(pattern).layers) != m["num_layers"]:
        raise ConfigError(Problem("config.json:num_hidden_layers", m["num_layers"], "must equal the length of "
                                  f"hybrid_override_pattern ({len(parse(pattern).layers)})"))
    m["hybrid_layer_pattern"] = pattern
    for key, why in (("use_bias", "biases on the Mamba projections"), ("mamba_proj_bias", "biases on the Mamba "
                     "projections"), ("attention_bias", "attention biases"), ("mlp_bias", "MLP biases"),
                     ("residual_in_fp32", "an fp32 residual stream")):
        _refuse_true(r, key, why=f"{why} are not modelled (Megatron-Core's MambaMixer has none)"
                     if "Mamba" in why else f"{why} are not modelled")
    if not r.flag("use_conv_bias", True):
        raise UnsupportedError("config.json:use_conv_bias = false for nemotron_h: Megatron-Core's MambaMixer always "
                               "has a convolution bias")
    if r.int("conv_kernel", 4) != 4:
        raise UnsupportedError(f"config.json:conv_kernel {hf.get('conv_kernel')} for nemotron_h: Megatron-Core's "
                               "MambaMixer fixes the convolution width at 4")
    if r.name("mamba_hidden_act", "silu", ("silu", "swish")) not in ("silu", "swish"):
        raise UnsupportedError(f"config.json:mamba_hidden_act {show(hf.get('mamba_hidden_act'))}: MambaMixer uses silu")
    act = r.name("mlp_hidden_act", "relu2", tuple(_RELU2))
    if act not in _RELU2:
        raise UnsupportedError(f"config.json:mlp_hidden_act {show(act)} for nemotron_h: only relu2 (squared ReLU) is "
                               "mapped")
    m["activation_func"], m["gated_linear_unit"] = _RELU2[act]
    m["num_query_groups"] = r.int("num_key_value_heads", a)
    head_dim = r.int("head_dim", required=False) or r.int("attention_head_dim", required=False)
    if head_dim is not None:
        m["kv_channels"] = head_dim
    m["ffn_hidden_size"] = r.int("intermediate_size")
    given = [e for e in (r.number(k, None) for k in ("layer_norm_epsilon", "norm_eps", "rms_norm_eps"))
             if e is not None]                   # each one checked; the first one given is the model's
    m["layernorm_epsilon"] = given[0] if given else 1e-5
    m["position_embedding_type"] = "none"
    m["mamba_state_dim"] = r.int("ssm_state_size")
    m["mamba_head_dim"] = r.int("mamba_head_dim")
    m["mamba_num_groups"] = r.int("n_groups")
    heads = r.int("mamba_num_heads", required=False)
    if heads is None:
        expand = r.int("expand", 2)
        heads = expand * m["hidden_size"] // m["mamba_head_dim"]
    m["mamba_num_heads"] = heads
    if "E" in pattern:
        m["num_experts"] = r.int("n_routed_experts")
        m["moe_router_topk"] = r.int("num_experts_per_tok")
        fm = r.int("moe_intermediate_size")
        m["moe_ffn_hidden_size"] = fm
        shared = r.int("moe_shared_expert_intermediate_size", required=False)
        if shared is None:
            shared = r.int("n_shared_experts", 0) * fm
        if shared:
            m["moe_shared_expert_intermediate_size"] = shared
        m["moe_router_enable_expert_bias"] = True      # NemotronH's router keeps an e_score_correction_bias
        latent = r.int("moe_latent_size", required=False)
        if latent:
            m["moe_latent_size"] = latent


def _gemma(r: _Reader, m: dict) -> None:
    """Gemma 2 and Gemma 3 text (Megatron-Bridge gemma2_provider / gemma3_provider): GeGLU (tanh GELU) MLPs, a
    post-attention and a post-feedforward norm in every layer (post_layernorm), tied embeddings unless
    tie_word_embeddings says otherwise (Hugging Face's default for Gemma is true), Gemma 3's per-head q/k norms,
    Gemma 2's final logit soft-capping. The embedding's sqrt(h) scaling, the zero-centred norms, sliding-window
    layers and query_pre_attn_scalar change no tensor's size. Gemma 2's attention soft-capping runs in
    Megatron-Bridge's FlexAttention core attention, taken here as a fused kernel (no s x s scores kept)."""
    hf = r.hf
    _gqa(r, m)
    geglu = tuple(a for a, g in _GATED_ACT.items() if g == "geglu")
    act = r.name("hidden_activation", None, geglu) or r.name("hidden_act", None, geglu) or "gelu_pytorch_tanh"
    if act not in _GATED_ACT or _GATED_ACT[act] != "geglu":
        raise UnsupportedError(f"config.json:hidden_activation {show(act)} for {r.mt}: Gemma's MLP is GeGLU "
                               "(gelu_pytorch_tanh)")
    m["activation_func"], m["gated_linear_unit"] = "geglu", True
    m["untie_embeddings_and_output_weights"] = not r.flag("tie_word_embeddings", True)
    m["post_layernorm"] = True
    if r.mt == "gemma3_text":
        m["qk_layernorm"] = True
        if r.flag("use_bidirectional_attention"):
            raise UnsupportedError("config.json:use_bidirectional_attention = true: an encoder, not a causal model")
    cap = r.number("final_logit_softcapping", None)
    if cap is not None:
        if cap <= 0:
            raise ConfigError(Problem("config.json:final_logit_softcapping", cap, "must be a positive number or null"))
        m["final_logit_softcapping"] = cap


def _nemotron_nas(r: _Reader, m: dict) -> None:
    """Llama-Nemotron Super / Ultra (DeciLMForCausalLM, model_type nemotron-nas; Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/llama_nemotron/llama_nemotron_bridge.py ``provider_bridge``, which hands the whole
    config.json to Megatron-Core's HeterogeneousTransformerConfig as heterogeneous_layers_config_encoded_json).
    Llama layers (SwiGLU, RMSNorm, RoPE, untied embeddings unless tie_word_embeddings) whose block_configs give each
    layer its attention (no_op, replace_with_linear, or n_heads_in_group heads per key/value head) and its MLP
    (no_op, replace_with_linear, or ffn_mult); every key of every block is type-checked by
    :func:`estimator.config.model_rules.parse_blocks`, which reads them as Megatron-Core does. The blocks are written to
    heterogeneous_layers_config in Megatron-Core's own names (num_query_groups, ffn_hidden_size); num_query_groups
    and ffn_hidden_size of the model are the first attention block's and the first MLP block's (Megatron-LM's
    arguments.py asserts one n_heads_in_group for all layers). intermediate_size and num_key_value_heads, null in
    the published config.json, are not read."""
    import json

    from ..config.model_rules import HeteroError, parse_blocks as parse
    from ..config.schema import MAX_FFN
    hf = r.hf
    _refuse_true(r, "attention_bias", why="DeciLM's attention has no biases in Megatron-Core's heterogeneous spec")
    _refuse_true(r, "mlp_bias", why="DeciLM's MLP has no biases in Megatron-Core's heterogeneous spec")
    if m["activation_func"] != "swiglu":
        raise UnsupportedError(f"config.json:hidden_act {show(hf.get('hidden_act'))} for nemotron-nas: Megatron-LM's "
                               "heterogeneous config asserts silu (SwiGLU)")
    blocks = hf.get("block_configs")
    if not isinstance(blocks, list):
        raise ConfigError(Problem("config.json:block_configs", blocks, "is required for nemotron-nas: a list of "
                                  "one block per layer, each with attention and ffn"))
    L, a, h = m["num_layers"], m["num_attention_heads"], m["hidden_size"]
    try:
        parsed = parse(json.dumps({"block_configs": blocks}), L, a, h, MAX_FFN)
    except HeteroError as exc:
        raise ConfigError(Problem("config.json:block_configs", clip(show(blocks)), str(exc))) from None
    r.int("num_key_value_heads", required=False)
    r.int("intermediate_size", required=False)
    r.int("head_dim", required=False)
    if r.hf.get("head_dim") not in (None, h // a):
        raise UnsupportedError(f"config.json:head_dim {hf['head_dim']} for nemotron-nas: Megatron-Core's "
                               f"heterogeneous layers take hidden_size / num_attention_heads ({h // a})")
    groups = {b.groups for b in parsed if b.mixer == "attention" and b.groups is not None}
    if len(groups) > 1:
        raise UnsupportedError(f"config.json:block_configs for nemotron-nas: key/value heads differ between blocks "
                               f"({', '.join(map(str, sorted(groups)))}); Megatron-LM's arguments.py asserts one "
                               "n_heads_in_group for all layers")
    if groups:
        m["num_query_groups"] = groups.pop()
    widths = [b.ffn for b in parsed if b.mlp == "dense" and b.ffn is not None]
    if widths:
        m["ffn_hidden_size"] = widths[0]
    out = []
    for b in parsed:
        att = {"no_op": True} if b.mixer == "" else {"replace_with_linear": True} if b.mixer == "linear" else (
            {"num_query_groups": b.groups} if b.groups is not None else {})
        mlp = {"no_op": True} if b.mlp == "" else {"replace_with_linear": True} if b.mlp == "linear" else (
            {"ffn_hidden_size": b.ffn} if b.ffn is not None else {})
        out.append({"attention": att, "mlp": mlp})
    m["heterogeneous_layers_config"] = json.dumps({"block_configs": out}, separators=(",", ":"))


def _gemma4(r: _Reader, m: dict) -> None:
    """Gemma 4's language model, MoE (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma/gemma4_bridge.py
    ``_build_moe_provider``, gemma4_provider.py ``Gemma4ModelProvider``, modeling_gemma4.py ``gemma4_block_spec``) or
    dense (``_build_dense_provider``, ``Gemma4DenseProvider``, ``get_gemma4_layer_spec``).
    Per layer: GQA of num_key_value_heads x head_dim with per-head q/k norms and a norm after the output
    projection; the layers layer_types names full_attention are global (global_attention_freq), their heads
    global_head_dim wide with num_global_key_value_heads key/value heads (global_kv_channels,
    num_global_query_groups). With attention_k_eq_v Hugging Face's global layers have no v_proj (the values are the
    keys), but Megatron-Bridge's fused QKV keeps the value rows (the loader copies k_proj into them:
    ``maybe_modify_loaded_hf_weight``; the exporter drops them: ``_is_synthesized_kv_projection``), so Megatron-Core
    counts them. The MoE block runs in every layer (enable_moe_block): num_experts experts of
    moe_intermediate_size, top_k_experts routing with a pre-softmax router (moe_router_pre_softmax), a dense GeGLU
    MLP of intermediate_size in parallel as the shared expert (no gate), each with its own input and output norm
    and a norm on their sum (post_layernorm with MoE: estimator.model.layers.moe ``gemma4_norms``), aux loss 1e-3
    (the provider's defaults). The dense variant (enable_moe_block false: Gemma-4-31B) has the same attention and,
    in place of the MoE block, one GeGLU MLP of intermediate_size between pre- and post-feedforward norms
    (Gemma4DenseTransformerLayer: input, post-attention, pre-MLP and post-MLP RMSNorms, as Gemma 3); its
    num_experts, top_k_experts, moe_intermediate_size and expert_intermediate_size must be null. Its layer_scalar is
    a buffer, not a parameter, and Bridge builds no per-layer-embedding module when hidden_size_per_layer_input is
    0. Tied embeddings, final_logit_softcapping. Refused: per-layer embeddings (hidden_size_per_layer_input > 0),
    KV sharing across layers (num_kv_shared_layers > 0), double-wide MLPs, and bidirectional attention over all
    tokens; use_bidirectional_attention "vision" (among an image's tokens) changes no tensor. Sliding windows,
    RoPE parameters and v_norm (no weight) change no tensor's size."""
    hf = r.hf
    moe = r.flag("enable_moe_block")
    if not moe:
        set_keys = [f"{k} = {show(hf[k])}" for k in ("num_experts", "top_k_experts", "moe_intermediate_size",
                                                    "expert_intermediate_size") if hf.get(k) is not None]
        if set_keys:
            raise ConfigError(Problem("config.json:enable_moe_block", hf.get("enable_moe_block"), "false (the dense "
                                      f"Gemma 4, which has no experts) requires {', '.join(set_keys)} to be null"))
    for key, what in (("hidden_size_per_layer_input", "per-layer embeddings"),
                      ("num_kv_shared_layers", "layers sharing another layer's keys and values")):
        if r.int(key, 0):
            raise UnsupportedError(f"config.json:{key} = {hf[key]} for gemma4: {what} are not modelled")
    r.int("vocab_size_per_layer_input", required=False)
    if r.flag("use_double_wide_mlp"):
        raise UnsupportedError("config.json:use_double_wide_mlp = true for gemma4: double-wide MLPs are not modelled")
    bidi = hf.get("use_bidirectional_attention")
    if bidi not in (None, False, "vision"):
        raise UnsupportedError(f"config.json:use_bidirectional_attention = {show(bidi)} for gemma4: only causal "
                               "attention (null, false, or 'vision': bidirectional among an image's tokens) is "
                               "mapped")
    _gemma(r, m)
    m["qk_layernorm"] = True
    L = m["num_layers"]
    types = hf.get("layer_types")
    kinds = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != L or any(t not in kinds for t in types):
        raise ConfigError(Problem("config.json:layer_types", types, f"must be a list of num_hidden_layers ({L}) "
                                  f"entries, each {' or '.join(kinds)}"))
    pattern = [int(t == "full_attention") for t in types]
    if any(pattern):
        k = pattern.index(1) + 1
        m["global_attention_freq"] = k if pattern == [int((i + 1) % k == 0) for i in range(L)] else pattern
        dh, g = m.get("kv_channels", m["hidden_size"] // m["num_attention_heads"]), m["num_query_groups"]
        gdh = r.int("global_head_dim", dh)
        gg = r.int("num_global_key_value_heads", g)
        if not r.flag("attention_k_eq_v") and gg != g:
            raise UnsupportedError(f"config.json:num_global_key_value_heads = {gg} with attention_k_eq_v false for "
                                   f"gemma4: Hugging Face's global layers then have num_key_value_heads ({g}) "
                                   "key/value heads, Megatron-Bridge's Gemma4SelfAttention "
                                   "num_global_key_value_heads; the two models differ")
        if gdh != dh:
            m["global_kv_channels"] = gdh
        if gg != g:
            m["num_global_query_groups"] = gg
    if not moe:
        return
    m["num_experts"] = r.int("num_experts")
    m["moe_router_topk"] = r.int("top_k_experts")
    m["moe_ffn_hidden_size"] = r.int("moe_intermediate_size")
    m["moe_shared_expert_intermediate_size"] = m["ffn_hidden_size"]
    m["moe_router_pre_softmax"] = True
    m["moe_router_load_balancing_type"] = "aux_loss"
    m["moe_aux_loss_coeff"] = 0.001


_QWEN_VL_TOP = frozenset({"video_token_id", "vision_start_token_id", "vision_end_token_id", "audio_token_id"})
_VISION_TOP = frozenset({"text_config", "vision_config", "image_token_index", "image_token_id", "tie_word_embeddings"})
#: Multimodal wrappers whose language model is their text_config: model_type -> (the text model_type(s) mapped,
#: the wrapper's own keys, which describe the vision tower, projector and media tokens: not counted here).
_WRAPPED: dict[str, tuple[tuple[str, ...], frozenset]] = {
    "llama4": (("llama4_text", "llama4"), _VISION_TOP | {"boi_token_index", "eoi_token_index", "image_processor_config"}),
    # Megatron-Bridge kimi_vl/kimi_k25_vl_bridge.py: the language model is DeepSeek-V3's (text_config kimi_k2).
    "kimi_k25": (("kimi_k2", "deepseek_v3"), _VISION_TOP | {"media_placeholder_token_id", "use_unified_vision_chunk",
                                                           "video_placeholder"}),
    # Megatron-Bridge ministral3/ministral3_bridge.py (Mistral3ForConditionalGeneration): a Mistral / Ministral 3
    # language model (text_config) with a Pixtral vision encoder and a patch-merger projector.
    "mistral3": (("mistral", "ministral3"), _VISION_TOP | {"multimodal_projector_bias", "projector_hidden_act",
                                                          "spatial_merge_size", "vision_feature_layer"}),
    "ministral3": (("mistral", "ministral3"), _VISION_TOP | {"multimodal_projector_bias", "projector_hidden_act",
                                                            "spatial_merge_size", "vision_feature_layer"}),
    # Megatron-Bridge gemma_vl/gemma4_vl_bridge.py: the Gemma 4 language model (text_config gemma4_text) with a
    # vision tower (about 0.55 B parameters, not counted: the published 25.2 B total is the language model's) and
    # media tokens; an audio tower (audio_config, on the small variants) is refused by _text_part.
    "gemma4": (("gemma4_text",), _VISION_TOP | {"audio_config", "audio_token_id", "boa_token_id", "boi_token_id",
                                                "eoa_token_id", "eoa_token_index", "eoi_token_id", "video_token_id",
                                                "vision_soft_tokens_per_image"}),
    # Megatron-Bridge qwen_vl/qwen35_vl_bridge.py (Qwen35VLBridge, Qwen35VLMoEBridge): the hybrid language model of
    # text_config and a Qwen3-VL vision tower (vision_config, mapped by _qwen_vision into the model.vision_* fields).
    # language_model_only (false in NVIDIA's Qwen3.6-27B-NVFP4) is no field of transformers' Qwen3_5Config
    # (huggingface/transformers @ 008e5743 : src/transformers/models/qwen3_5/configuration_qwen3_5.py: text_config,
    # vision_config, the media token ids, tie_word_embeddings), so it changes no tensor; it names vLLM's switch that
    # loads the language model without the vision encoder. False keeps the whole model; true is refused in _text_part.
    "qwen3_5": (("qwen3_5_text",), _VISION_TOP | _QWEN_VL_TOP | {"language_model_only"}),
    "qwen3_5_moe": (("qwen3_5_moe_text",), _VISION_TOP | _QWEN_VL_TOP | {"language_model_only"}),
    # Megatron-Bridge qwen_vl/qwen3_vl_bridge.py (Qwen3VLBridge, Qwen3VLMoEBridge): a Qwen3 / Qwen3-MoE language
    # model (text_config; M-RoPE has no weights) and the same vision tower, with deepstack mergers.
    "qwen3_vl": (("qwen3_vl_text",), _VISION_TOP | _QWEN_VL_TOP),
    "qwen3_vl_moe": (("qwen3_vl_moe_text",), _VISION_TOP | _QWEN_VL_TOP),
}
#: Wrappers whose vision_config :func:`_qwen_vision` maps into the model.vision_* fields.
_QWEN_VISION = frozenset({"qwen3_5", "qwen3_5_moe", "qwen3_vl", "qwen3_vl_moe"})


def _text_part(hf: dict, mt: str, strict: bool) -> tuple[dict, str]:
    """The language model's keys of a multimodal config.json (its text_config) and the model_type they are
    mapped as; the vision encoder and projector are left out here (Qwen3.5's are read from its vision_config by
    :func:`_qwen_vision`; the other wrappers' are not counted). A Ministral 3 text_config maps as Mistral: the same tensors (its YaRN / Llama-4 attention scaling in
    rope_parameters has no weights)."""
    inner, top = _WRAPPED[mt]
    text = hf.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError(Problem("config.json:text_config", text, f"is required for {mt} (the language model)"))
    if strict:
        unknown = [k for k in hf if k not in top and k not in _INERT]
        if unknown:
            raise UnsupportedError(f"config.json key(s) not understood for {mt}: {', '.join(sorted(unknown))}")
    if hf.get("audio_config") is not None:
        raise UnsupportedError(f"config.json:audio_config for {mt}: an audio tower is not modelled")
    if hf.get("language_model_only") not in (None, False):
        raise UnsupportedError(f"config.json:language_model_only = {show(hf['language_model_only'])} for {mt}: only "
                               "false (or absent) is mapped, the language model with its vision tower; whether a "
                               "checkpoint marked text-only still holds the tower is not known from the config.json")
    text_mt = text.get("model_type", inner[0])
    if text_mt not in inner:
        raise UnsupportedError(f"config.json:text_config.model_type {show(text_mt)} for {mt}: the language models "
                               f"mapped are {', '.join(inner)}")
    out = dict(text)
    target = {"ministral3": "mistral", "llama4_text": "llama4", "qwen3_5_text": "qwen3_5",
              "qwen3_5_moe_text": "qwen3_5_moe", "qwen3_vl_text": "qwen3",
              "qwen3_vl_moe_text": "qwen3_moe"}.get(text_mt, text_mt)
    out["model_type"] = target
    if "tie_word_embeddings" in hf and "tie_word_embeddings" not in out:
        out["tie_word_embeddings"] = hf["tie_word_embeddings"]
    return out, target


def _llama4(r: _Reader, m: dict) -> None:
    """Llama 4's language model (text_config): dense layers of width intermediate_size_mlp and MoE layers every
    interleave_moe_layer_step layers (Hugging Face: layer i is MoE when (i + 1) % step == 0, or the moe_layers
    list), num_local_experts experts of width intermediate_size with top-k routing and one shared expert of the
    same width, and with use_qk_norm the parameter-free L2 norm of queries and keys (Megatron-Core's
    qk_l2_norm; Hugging Face skips it in the no-RoPE layers, Megatron-Core applies it in every layer). Chunked
    attention (attention_chunk_size) and the no-RoPE layers change no tensor's size."""
    _gqa(r, m)
    L = m["num_layers"]
    m["ffn_hidden_size"] = r.int("intermediate_size_mlp")
    fm = r.int("intermediate_size")
    m["num_experts"] = r.int("num_local_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    m["moe_ffn_hidden_size"] = fm
    m["moe_shared_expert_intermediate_size"] = fm
    layers = r.hf.get("moe_layers")
    if layers is None:
        step = r.int("interleave_moe_layer_step", 1)
        if step < 1:
            raise ConfigError(Problem("config.json:interleave_moe_layer_step", step, "must be >= 1"))
        layers = list(range(step - 1, L, step))
    if not isinstance(layers, list) or not all(type(i) is int and 0 <= i < L for i in layers) or not layers:
        raise ConfigError(Problem("config.json:moe_layers", layers, f"must be a non-empty list of layer indices in "
                                  f"0..{L - 1}"))
    pattern = [int(i in layers) for i in range(L)]
    if _pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    if r.flag("use_qk_norm"):
        m["qk_l2_norm"] = True


def _olmo2(r: _Reader, m: dict) -> None:
    """OLMo 2 (Hugging Face Olmo2DecoderLayer; Megatron-Bridge has no OLMo 2 bridge at 067f987d, so the layer is
    described with the parts Bridge builds for other families): no norm before attention or the MLP
    (pre_layernorm false), an RMSNorm after the attention output projection and one after fc2 (post_layernorm,
    Gemma's TERowParallelLinearLayerNorm), and q/k RMSNorms over the whole projection, all heads together
    (qk_layernorm_full_dim: Hugging Face's q_norm of num_attention_heads x head_dim and k_norm of
    num_key_value_heads x head_dim weights; Bridge's minimax_m2_provider.py FullDimQNorm / FullDimKNorm). No
    biases, SwiGLU, untied embeddings."""
    _gqa(r, m)
    m["qk_layernorm"] = True
    m["qk_layernorm_full_dim"] = True
    m["pre_layernorm"] = False
    m["post_layernorm"] = True


def _minimax_m2(r: _Reader, m: dict) -> None:
    """MiniMax-M2 / M2.5 / M2.7 (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/minimax_m2/
    minimax_m2_bridge.py): GQA with q/k RMSNorms over all heads (qk_norm_type per_layer: FullDimQNorm /
    FullDimKNorm), every layer MoE with num_local_experts experts of width intermediate_size, top-k sigmoid
    routing with the expert bias (use_routing_bias), aux_loss at router_aux_loss_coef (Bridge's default 1e-3),
    no shared expert. The checkpoint's MTP modules (use_mtp, num_mtp_modules) are not mapped by Bridge ("MTP
    modules are not mapped"), so the Megatron model has none; rotary_dim (partial RoPE) has no weights."""
    hf = r.hf
    kinds = hf.get("attn_type_list")
    if kinds is not None and (not isinstance(kinds, list) or len(kinds) != m["num_layers"]
                              or any(k != 1 or isinstance(k, bool) for k in kinds)):
        raise UnsupportedError(f"config.json:attn_type_list {show(kinds)} for minimax_m2: only full softmax attention "
                               f"in every layer (1, num_hidden_layers = {m['num_layers']} entries) is mapped; 0 "
                               "(MiniMax-Text-01's lightning attention) is not")
    _gqa(r, m)
    if r.flag("use_qk_norm", True):
        kind = r.name("qk_norm_type", "per_layer", ("per_layer",))
        if kind != "per_layer":
            raise UnsupportedError(f"config.json:qk_norm_type {show(kind)} for minimax_m2: only per_layer (one norm "
                                   "over all heads, as Megatron-Bridge's FullDimQNorm builds it) is mapped")
        m["qk_layernorm"] = True
        m["qk_layernorm_full_dim"] = True
    if r.int("shared_intermediate_size", 0):
        raise UnsupportedError("config.json:shared_intermediate_size > 0 for minimax_m2: Megatron-Bridge's "
                               "MiniMax-M2 bridge maps no shared expert")
    fm = m["ffn_hidden_size"]
    m["num_experts"] = r.int("num_local_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    m["moe_ffn_hidden_size"] = fm
    fn = r.name("scoring_func", "sigmoid", ("sigmoid",))
    if fn != "sigmoid":
        raise UnsupportedError(f"config.json:scoring_func {show(fn)} for minimax_m2: the bridge routes by sigmoid")
    m["moe_router_score_function"] = "sigmoid"
    if r.flag("use_routing_bias", True):
        m["moe_router_enable_expert_bias"] = True
    m["moe_router_load_balancing_type"] = "aux_loss"
    coeff = hf.get("router_aux_loss_coef", 1e-3)
    if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not 0 <= coeff < 1e6:
        raise ConfigError(Problem("config.json:router_aux_loss_coef", coeff, "must be a non-negative number"))
    if coeff:
        m["moe_aux_loss_coeff"] = float(coeff)


def _glm_router(r: _Reader, m: dict, *, shared_times_count: bool, aux_coeff: float = 1e-3) -> None:
    """The MoE part of Megatron-Bridge's GLM bridges (glm/glm45_bridge.py, glm/glm47_flash_bridge.py @ 067f987d):
    first_k_dense_replace dense layers, then MoE with n_routed_experts of moe_intermediate_size, a shared expert
    (GLM-4.5: moe_intermediate_size; GLM-4.7-Flash: times n_shared_experts), sigmoid routing with the expert
    bias, seq_aux_loss at ``aux_coeff`` (1e-3; GLM-5's bridge sets none, so Megatron-Core's 0.0), and
    num_nextn_predict_layers MTP layers."""
    L = m["num_layers"]
    m["num_experts"] = r.int("n_routed_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    fm = r.int("moe_intermediate_size")
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("n_shared_experts", 1)
    if shared:
        m["moe_shared_expert_intermediate_size"] = fm * (shared if shared_times_count else 1)
    first = r.int("first_k_dense_replace", 1)
    if first >= L:
        raise UnsupportedError(f"{r.mt} config.json makes no layer MoE (first_k_dense_replace {first} >= "
                               f"num_hidden_layers {L})")
    pattern = [int(i >= first) for i in range(L)]
    if _pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    m["moe_router_score_function"] = "sigmoid"
    m["moe_router_enable_expert_bias"] = True
    m["moe_router_load_balancing_type"] = "seq_aux_loss"
    if aux_coeff:
        m["moe_aux_loss_coeff"] = aux_coeff
    groups, topk = r.int("n_group", required=False), r.int("topk_group", required=False)
    if groups and groups > 1 and topk:
        m["moe_router_num_groups"], m["moe_router_group_topk"] = groups, topk
    mtp = r.int("num_nextn_predict_layers")
    if mtp:
        m["mtp_num_layers"] = mtp


def _glm_required(r: _Reader, *keys: str) -> None:
    """GLM's published config.json files state these keys; Hugging Face's defaults (no biases, no q/k norm, no MTP
    layer) describe none of the GLM-4.5 / 4.6 / 4.7 checkpoints, so a copy without them (a tool's trimmed copy)
    is refused rather than counted short."""
    for key in keys:
        if key not in r.hf:
            raise UnsupportedError(f"config.json key {key} is missing for {r.mt}: the published GLM config.json states it "
                                   "and it changes the parameter count (Hugging Face's default leaves out what the "
                                   "checkpoint has); this copy looks trimmed, so pass the model's own config.json")


def _glm4_moe(r: _Reader, m: dict) -> None:
    """GLM-4.5 / 4.6 / 4.7 and GLM-4.5-Air (Megatron-Bridge glm/glm45_bridge.py): GQA with head_dim, biases on
    q, k and v (attention_bias: add_qkv_bias, as Bridge's CONFIG_MAPPING), per-head q/k norms where use_qk_norm,
    partial RoPE (no weights), and :func:`_glm_router`'s MoE. attention_bias, use_qk_norm and
    num_nextn_predict_layers must be stated (:func:`_glm_required`)."""
    _glm_required(r, "attention_bias", "use_qk_norm", "num_nextn_predict_layers")
    _refuse_true(r, "mlp_bias", why="biases on the MLP have no place in GLM-4.5's layers")
    m["num_query_groups"] = r.int("num_key_value_heads", m["num_attention_heads"])
    head_dim = r.int("head_dim", required=False)
    if head_dim is not None:
        m["kv_channels"] = head_dim
    m["ffn_hidden_size"] = r.int("intermediate_size")
    if r.flag("attention_bias"):
        m["add_qkv_bias"] = True
    if r.flag("use_qk_norm"):
        m["qk_layernorm"] = True
    _glm_router(r, m, shared_times_count=False)


def _glm4_moe_lite(r: _Reader, m: dict) -> None:
    """GLM-4.7-Flash (Megatron-Bridge glm/glm47_flash_bridge.py, an MLA provider): DeepSeek-V3's multi-latent
    attention (q_lora_rank, kv_lora_rank, qk_nope/rope/v head dims, latent norms) and :func:`_glm_router`'s MoE.
    num_key_value_heads and head_dim are Hugging Face bookkeeping for MLA and change no tensor.
    num_nextn_predict_layers must be stated (:func:`_glm_required`)."""
    _glm_required(r, "num_nextn_predict_layers")
    for key in ("attention_bias", "mlp_bias"):
        _refuse_true(r, key, why="biases on the MLA or MoE projections have no Megatron-Core equivalent")
    _mla(r, m)
    m["ffn_hidden_size"] = r.int("intermediate_size")
    r.int("num_key_value_heads", required=False)
    r.int("head_dim", required=False)
    _glm_router(r, m, shared_times_count=True)


def _dsa_indexer(r: _Reader, m: dict) -> None:
    """DeepSeek sparse attention's lightning indexer, as Megatron-Bridge maps it (NVIDIA-NeMo/Megatron-Bridge @
    067f987d : src/megatron/bridge/models/glm_moe_dsa/glm5_bridge.py ``provider_bridge``): Megatron-Core's
    experimental_attention_variant dsa with index_n_heads, index_head_dim and index_topk as the indexer's heads,
    head width and top-k (Megatron-LM @ d98e8a64 : megatron/core/transformer/experimental_attention_variant/dsa.py
    ``DSAIndexer``; the same keys as DeepSeek's own inference code writes them). All three are required: the
    indexer's weights depend on them."""
    m["experimental_attention_variant"] = "dsa"
    m["dsa_indexer_n_heads"] = r.int("index_n_heads")
    d = r.int("index_head_dim")
    rope = m["qk_pos_emb_head_dim"]
    if d < rope:
        raise ConfigError(Problem("config.json:index_head_dim", d, f"must be at least qk_rope_head_dim ({rope}): "
                                  "the indexer applies RoPE to the first qk_rope_head_dim channels of each head"))
    m["dsa_indexer_head_dim"] = d
    m["dsa_indexer_topk"] = r.int("index_topk")


def _deepseek_v32(r: _Reader, m: dict) -> None:
    """DeepSeek-V3.2 (and -Exp): DeepSeek-V3's layers (:func:`_deepseek`) with DeepSeek sparse attention
    (:func:`_dsa_indexer`). Megatron-Bridge @ 067f987d has no DeepSeek-V3.2 bridge; the indexer loss stays at
    Megatron-Core's default (off), and the indexer's options that change no tensor (RoPE layout, Hadamard rotation,
    ReLU scoring) at theirs, which match DeepSeek's inference code."""
    _deepseek(r, m)
    _dsa_indexer(r, m)


def _glm_moe_dsa(r: _Reader, m: dict) -> None:
    """GLM-5 (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/glm_moe_dsa/glm5_bridge.py, an MLA provider):
    multi-latent attention with DeepSeek sparse attention (:func:`_dsa_indexer`; the bridge turns the indexer
    loss on at 0.001), and :func:`_glm_router`'s MoE with the shared expert n_shared_experts x
    moe_intermediate_size and no aux-loss coefficient. qk_head_dim, where given, must be qk_nope_head_dim +
    qk_rope_head_dim (the bridge derives the rotary width from it); num_key_value_heads, head_dim and
    indexer_rope_interleave change no tensor. index_topk_freq other than 1 (cross-layer top-k sharing, which
    builds no indexer in the layers that reuse another's top-k) is refused. num_nextn_predict_layers must be stated (:func:`_glm_required`)."""
    _glm_required(r, "num_nextn_predict_layers")
    for key in ("attention_bias", "mlp_bias"):
        _refuse_true(r, key, why="biases on the MLA or MoE projections have no Megatron-Core equivalent")
    _mla(r, m)
    qk = r.int("qk_head_dim", required=False)
    if qk is not None and qk != m["qk_head_dim"] + m["qk_pos_emb_head_dim"]:
        raise ConfigError(Problem("config.json:qk_head_dim", qk, f"must be qk_nope_head_dim + qk_rope_head_dim "
                                  f"({m['qk_head_dim']} + {m['qk_pos_emb_head_dim']})"))
    m["ffn_hidden_size"] = r.int("intermediate_size")
    r.int("num_key_value_heads", required=False)
    r.int("head_dim", required=False)
    r.flag("indexer_rope_interleave")
    _dsa_indexer(r, m)
    freq = r.int("index_topk_freq", 1)
    if freq != 1:
        raise UnsupportedError(f"config.json:index_topk_freq = {freq} for {r.mt}: cross-layer top-k sharing (layers "
                               "without an indexer of their own reusing another layer's top-k) is not modelled; "
                               "only 1 is")
    r.int("index_skip_topk_offset", 0)
    m["dsa_indexer_loss_coeff"] = 0.001
    _glm_router(r, m, shared_times_count=True, aux_coeff=0.0)
    _glm_layer_lists(r, m)


def _glm_layer_lists(r: _Reader, m: dict) -> None:
    """GLM-5's per-layer lists (huggingface/transformers @ 008e574 :
    src/transformers/models/glm_moe_dsa/configuration_glm_moe_dsa.py): mlp_layer_types ("dense" / "sparse") must say
    what first_k_dense_replace says; indexer_types may only be "full" (every layer runs its own indexer), since a
    "shared" layer reuses the previous full layer's top-k and builds no indexer, which is not modelled."""
    L = m["num_layers"]
    first = r.int("first_k_dense_replace", 1)
    want = ["dense"] * first + ["sparse"] * (L - first)
    kinds = r.hf.get("mlp_layer_types")
    if kinds is not None and kinds != want:
        raise UnsupportedError(f"config.json:mlp_layer_types {show(kinds)} for {r.mt}: only the pattern "
                               f"first_k_dense_replace gives ({first} dense, then {L - first} sparse) is modelled")
    kinds = r.hf.get("indexer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != L or any(k not in ("full", "shared") for k in kinds):
            raise ConfigError(Problem("config.json:indexer_types", show(kinds), f"must list num_hidden_layers ({L}) "
                                      "entries, each full or shared"))
        if "shared" in kinds:
            raise UnsupportedError(f"config.json:indexer_types for {r.mt}: {kinds.count('shared')} shared layers "
                                   "(reusing another layer's top-k, with no indexer of their own) are not "
                                   "modelled; only full is")


#: DeepSeek-V4's attention kinds by Hugging Face layer type, and their compression ratios (Megatron-Bridge @ 067f987d :
#: src/megatron/bridge/models/deepseek/deepseek_v4_bridge.py ``_DSV4_LAYER_TYPE_TO_COMPRESS_RATIO``).
_V4_LAYER_TYPES = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}


def _v4_ratios(r: _Reader, layers: int) -> list[int]:
    """Each layer's compression ratio as Megatron-Bridge reads it (``_dsv4_compress_ratios``): compress_ratios, or
    the native layer_types with compress_rates; num_layers + MTP entries (the MTP layers take 0 when only the
    decoder's are given), longer lists cut."""
    key = "compress_ratios"
    raw = r.hf.get(key)
    if raw is None:
        types, rates = r.hf.get("layer_types"), r.hf.get("compress_rates") or {}
        if not isinstance(types, list) or not isinstance(rates, dict):
            raise ConfigError(Problem("config.json:compress_ratios", None, f"is required for {r.mt} (or layer_types "
                                      "with compress_rates): each layer's compression ratio"))
        key, raw = "layer_types", []
        for t in types:
            if t != "sliding_attention" and t in rates:
                raw.append(rates[t])
            elif t in _V4_LAYER_TYPES:
                raw.append(_V4_LAYER_TYPES[t])
            else:
                raise UnsupportedError(f"config.json:layer_types entry {show(t)} for {r.mt}: known "
                                       f"{', '.join(_V4_LAYER_TYPES)}")
    if not isinstance(raw, list) or not all(type(x) is int and x in (0, 4, 128) for x in raw):
        raise ConfigError(Problem(f"config.json:{key}", raw, "must be a list of compression ratios 0, 4 or 128 "
                                  "(Megatron-Core's TransformerConfig)"))
    mtp = r.int("num_nextn_predict_layers", 0)
    if len(raw) == layers and mtp:
        raw = raw + [0] * mtp
    if len(raw) < layers + mtp:
        raise ConfigError(Problem(f"config.json:{key}", raw, f"must have num_hidden_layers + "
                                  f"num_nextn_predict_layers ({layers + mtp}) entries, got {len(raw)}"))
    return raw[:layers + mtp]


def _deepseek_v4(r: _Reader, m: dict) -> None:
    """DeepSeek-V4 as Megatron-Bridge builds it (NVIDIA-NeMo/Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/deepseek/deepseek_v4_bridge.py ``DeepSeekV4Bridge.provider_bridge``): an MLA provider
    with experimental_attention_variant dsv4_hybrid, v_head_dim = head_dim, qk_pos_emb_head_dim = qk_rope_head_dim,
    q_lora_rank, o_groups, o_lora_rank, csa_compress_ratios from compress_ratios (or layer_types + compress_rates),
    csa_window_size = sliding_window, the indexer from index_n_heads / index_head_dim / index_topk; hyper-connections
    with num_residual_streams = hc_mult (hc_sinkhorn_iters and hc_eps change no tensor); every layer MoE with
    n_routed_experts, num_experts_per_tok, moe_intermediate_size experts, n_shared_experts x moe_intermediate_size of
    shared expert, scoring_func (sqrtsoftplus), expert bias (noaux_tc) except on the num_hash_layers hash-routed
    layers; make_vocab_size_divisible_by 1280; MTP layers num_nextn_predict_layers. num_key_value_heads must be 1 (one
    shared key/value head). compress_rope_theta, rope_scaling, swiglu_limit (the SwiGLU clamp), expert_dtype and
    quantization_config change no tensor of the bf16 model Megatron trains."""
    for key in ("attention_bias", "mlp_bias"):
        _refuse_true(r, key, why="DeepSeek-V4's projections have no biases")
    L = m["num_layers"]
    kv = r.int("num_key_value_heads", 1)
    if kv != 1:
        raise UnsupportedError(f"config.json:num_key_value_heads = {kv} for {r.mt}: DeepSeek-V4's attention has one "
                               "shared key/value head (DSv4HybridAttention's linear_kv_proj is h x head_dim)")
    m["multi_latent_attention"] = True
    m["qk_layernorm"] = True
    m["q_lora_rank"] = r.int("q_lora_rank")
    m["v_head_dim"] = r.int("head_dim")
    m["qk_pos_emb_head_dim"] = r.int("qk_rope_head_dim")
    m["experimental_attention_variant"] = "dsv4_hybrid"
    m["csa_compress_ratios"] = _v4_ratios(r, L)
    m["csa_window_size"] = r.int("sliding_window", 128)
    m["o_groups"] = r.int("o_groups")
    m["o_lora_rank"] = r.int("o_lora_rank")
    if 4 in m["csa_compress_ratios"]:
        m["dsa_indexer_n_heads"] = r.int("index_n_heads")
        m["dsa_indexer_head_dim"] = r.int("index_head_dim")
        m["dsa_indexer_topk"] = r.int("index_topk")
    m["enable_hyper_connections"] = True
    m["num_residual_streams"] = r.int("hc_mult")
    m["num_experts"] = r.int("n_routed_experts")
    _deepseek_experts(r, m)
    fn = r.name("scoring_func", "sqrtsoftplus")
    if fn not in ("softmax", "sigmoid", "sqrtsoftplus"):
        raise UnsupportedError(f"config.json:scoring_func {show(fn)} is not supported for {r.mt}; known: softmax, "
                               "sigmoid, sqrtsoftplus")
    if fn != "softmax":
        m["moe_router_score_function"] = fn
    method = r.name("topk_method", "noaux_tc")
    if method != "noaux_tc":
        raise UnsupportedError(f"config.json:topk_method {show(method)} for {r.mt}: Megatron-Bridge builds "
                               "DeepSeek-V4's router with the expert bias of noaux_tc only")
    m["moe_router_enable_expert_bias"] = True
    hashed = r.int("num_hash_layers", required=False)
    if hashed is None:
        types = r.hf.get("mlp_layer_types") or []
        hashed = next((i for i, t in enumerate(types) if t != "hash_moe"), len(types))
        if "hash_moe" in types[hashed:]:
            raise UnsupportedError(f"config.json:mlp_layer_types for {r.mt}: the hash_moe layers must lead")
    if hashed:
        m["moe_n_hash_layers"] = hashed
    m["make_vocab_size_divisible_by"] = 1280
    mtp = r.int("num_nextn_predict_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp


#: model_type -> its own mapping function (the Llama-style and DeepSeek families use _gqa / _moe / _deepseek).
_OWN_MAPPING = {"phi3": _phi3, "mimo": _mimo, "ernie4_5_moe": _ernie4_5_moe, "bailing_moe": _bailing_moe,
                "gpt_oss": _gpt_oss, "qwen3_next": _qwen3_next, "qwen3_5": _qwen3_5, "qwen3_5_moe": _qwen3_5,
                "nemotron_h": _nemotron_h, "gemma2": _gemma,
                "gemma3_text": _gemma, "llama4": _llama4, "olmo2": _olmo2, "minimax_m2": _minimax_m2,
                "glm4_moe": _glm4_moe, "glm4_moe_lite": _glm4_moe_lite, "deepseek_v32": _deepseek_v32,
                "glm_moe_dsa": _glm_moe_dsa, "gemma4_text": _gemma4, "deepseek_v4": _deepseek_v4,
                "nemotron-nas": _nemotron_nas}
