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
rms_norm_eps                       layernorm_epsilon (RMSNorm; Nemotron-4: norm_eps, LayerNorm)
hidden_act silu / gelu             activation_func swiglu / geglu (gated; Nemotron-4's relu2: squared_relu,
                                   not gated)
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
Architectures beyond the table (hybrid Mamba, gpt-oss, Qwen3-Next, the vision-language models with their vision
towers, ...) are mapped by their own functions, each documented with the keys it reads. The package's modules:

- :mod:`.convert`: :func:`from_hf_config`, the supported ``model_type`` table and the dispatch to a family;
- :mod:`.source`: reading a file, a model directory or a catalog Hub id (:func:`read_hf_config`);
- :mod:`.keys`: which keys each architecture reads, and which are inert;
- :mod:`.reader`: typed, bounded access to one config.json's keys, and the helpers every family shares;
- one module per group of families: :mod:`.llama` (the Llama-style layers, Mixtral / Qwen MoE, Phi-3, MiMo,
  OLMo 2, EXAONE 4.0, Nemotron-4 / Minitron, Llama 4, Llama-Nemotron), :mod:`.deepseek` (MLA,
  DeepSeek-V2/V3/V3.2/V4), :mod:`.glm`, :mod:`.moe` (ERNIE 4.5 and 4.5-VL, Ling, gpt-oss, MiniMax-M2 and M3, OLMoE,
  K-EXAONE, Hy3, Sarvam), :mod:`.sliding` (MiMo-V2-Flash, Step 3.5 Flash: sliding-window and global layers of
  different shapes), :mod:`.hybrid` (Qwen3-Next, Qwen3.5, Nemotron-H, pure Mamba-2, Falcon-H1), :mod:`.kimi`
  (Kimi K3), :mod:`.gemma` (Gemma 1 to 4);
- :mod:`.multimodal`: the vision-language wrappers (their language model: text_config);
- :mod:`.towers`: the vision towers mapped (vision_config: Qwen3.5 / Qwen3-VL, Qwen2.5-VL, Gemma 3, Kimi K2.5,
  GLM-4.5V).

Nothing is downloaded: a Hub model id (``meta-llama/Llama-3.1-70B``) is resolved from the offline model
catalog (:mod:`estimator.formats.hf_catalog`); an id not in it is an error naming the closest ids.
"""

from __future__ import annotations

from .convert import REFUSED, SUPPORTED, from_hf_config
from .source import read_hf_config, sibling_note

__all__ = ["SUPPORTED", "from_hf_config", "read_hf_config", "sibling_note"]
