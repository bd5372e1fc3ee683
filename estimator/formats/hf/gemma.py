"""The Gemma families: Gemma 1 (GeGLU, pre-norms only), Gemma 2 and Gemma 3 (GeGLU, soft-capping, sandwich norms) and Gemma 4 (global layers
with their own head width, K = V, MoE with post-norms)."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .llama import gqa
from .reader import GATED_ACT, Reader


def map_gemma1(r: Reader, m: dict) -> None:
    """Gemma 1 (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma/gemma_bridge.py ``provider_bridge``,
    gemma_provider.py ``GemmaModelProvider``): Llama's layer (an RMSNorm before attention and one before the MLP, no
    biases, no post-norms) with a GeGLU MLP (tanh GELU: the bridge maps the published hidden_act "gelu" to
    fast_gelu, as Hugging Face's GemmaMLP runs it), heads head_dim wide (256, whatever hidden_size /
    num_attention_heads is: gemma-7b's 16 x 256 = 4096 from h 3072) and tied embeddings unless tie_word_embeddings
    says otherwise (the provider's share_embeddings_and_output_weights). The embedding's sqrt(h) scaling
    (EmbeddingScalingMixin) and the zero-centred norm weights (layernorm_zero_centered_gamma) change no tensor's
    size."""
    gqa(r, m)
    geglu = tuple(a for a, g in GATED_ACT.items() if g == "geglu")
    act = r.name("hidden_activation", None, geglu) or r.name("hidden_act", None, geglu) or "gelu_pytorch_tanh"
    if GATED_ACT.get(act) != "geglu":
        raise UnsupportedError(f"config.json:hidden_act {show(act)} for gemma: Gemma's MLP is GeGLU (tanh GELU)")
    m["activation_func"], m["gated_linear_unit"] = "geglu", True
    m["untie_embeddings_and_output_weights"] = not r.flag("tie_word_embeddings", True)


def map_gemma(r: Reader, m: dict) -> None:
    """Gemma 2 and Gemma 3 text (Megatron-Bridge gemma2_provider / gemma3_provider): GeGLU (tanh GELU) MLPs, a
    post-attention and a post-feedforward norm in every layer (post_layernorm), tied embeddings unless
    tie_word_embeddings says otherwise (Hugging Face's default for Gemma is true), Gemma 3's per-head q/k norms,
    Gemma 2's final logit soft-capping. The embedding's sqrt(h) scaling, the zero-centred norms, sliding-window
    layers and query_pre_attn_scalar change no tensor's size. Gemma 2's attention soft-capping runs in
    Megatron-Bridge's FlexAttention core attention, taken here as a fused kernel (no s x s scores kept)."""
    hf = r.hf
    gqa(r, m)
    geglu = tuple(a for a, g in GATED_ACT.items() if g == "geglu")
    act = r.name("hidden_activation", None, geglu) or r.name("hidden_act", None, geglu) or "gelu_pytorch_tanh"
    if act not in GATED_ACT or GATED_ACT[act] != "geglu":
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


def map_gemma4(r: Reader, m: dict) -> None:
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
    map_gemma(r, m)
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
