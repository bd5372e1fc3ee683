"""MoE families with their own layouts: ERNIE 4.5 MoE, Ling 2.0 (Bailing MoE V2), gpt-oss, MiniMax-M2, OLMoE, K-EXAONE
(EXAONE MoE), MiMo-V2-Flash (sliding-window and global attention with their own key/value heads and sinks),
MiniMax-M3's language model, Hy3 (Hunyuan V3), Sarvam (its GQA and multi-latent-attention variants) and Step 3.5
Flash (sliding-window layers with more query heads than the global ones, a gated attention output)."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .llama import gqa
from .reader import Reader, pattern_value, refuse_true


def map_ernie4_5_moe(r: Reader, m: dict) -> None:
    """ERNIE 4.5 MoE (Megatron-Bridge ernie_45_bridge): dense layers before moe_layer_start_index, MoE after,
    moe_num_shared_experts shared experts of the expert width, aux-free expert bias (moe_use_aux_free)."""
    refuse_true(r, "use_bias", why="biases on every projection are not what ERNIE 4.5 MoE ships")
    gqa(r, m)
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
    if pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    if r.flag("moe_use_aux_free"):
        m["moe_router_enable_expert_bias"] = True


def map_bailing_moe(r: Reader, m: dict) -> None:
    """Ling 2.0 / Bailing MoE V2 (Megatron-Bridge bailing_moe2_bridge): first_k_dense_replace dense layers, then
    MoE with shared experts and a sigmoid router with expert bias, per-head q/k norms, MTP layers."""
    refuse_true(r, "use_bias", why="biases on every projection have no Megatron-Core equivalent here")
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
    if pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    if r.flag("moe_router_enable_expert_bias"):
        m["moe_router_enable_expert_bias"] = True
    mtp = r.int("num_nextn_predict_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp


def map_gpt_oss(r: Reader, m: dict) -> None:
    """gpt-oss (Megatron-Bridge gpt_oss_bridge): every layer MoE with num_local_experts experts of width
    intermediate_size, biases on q/k/v/o, on every expert projection and on the router (add_bias_linear), learned
    attention sinks (softmax_type learnable), quick-GeGLU experts (quick_gelu, gated; swiglu_limit is a clamp),
    YaRN positions (no parameters). Sliding-window layers (layer_types) change no tensor's size."""
    hf = r.hf
    if not r.flag("attention_bias"):
        raise UnsupportedError("config.json:attention_bias must be true for gpt_oss: Megatron-Core's add_bias_linear "
                               "puts biases on q, k, v and o as gpt-oss has them; without them there is no exact "
                               "mapping")
    refuse_true(r, "mlp_bias", why="gpt-oss's experts always have biases; the key has no meaning here")
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


def map_minimax_m2(r: Reader, m: dict) -> None:
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
    gqa(r, m)
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


def map_olmoe(r: Reader, m: dict) -> None:
    """OLMoE (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/olmoe/olmoe_bridge.py ``provider_bridge``,
    olmoe_provider.py ``OLMoESelfAttention``): Llama's attention without biases, with q/k RMSNorms over the whole
    projection, all heads together (Hugging Face OlmoeAttention's q_norm of num_attention_heads x head_dim and k_norm
    of num_key_value_heads x head_dim weights: qk_layernorm_full_dim), and every layer MoE: num_experts SwiGLU
    experts of width intermediate_size, top-k softmax routing before the top-k (moe_router_pre_softmax), no shared
    expert, the sequence-level aux loss at router_aux_loss_coef (the bridge's seq_aux_loss). Untied embeddings
    unless tie_word_embeddings. clip_qkv (a clamp of q, k and v Megatron-Core has no equivalent for) must be null;
    norm_topk_prob changes no tensor. Only multi-head attention is mapped: OLMoESelfAttention sizes the key norm for
    all query heads (num_attention_heads x head_dim) where Hugging Face's k_norm has num_key_value_heads x head_dim.
    It also sizes both norms for all heads on every tensor-parallel rank, which runs only at TP 1 (the bridge's
    recipes use TP 1, EP 8); the estimate splits them over TP as FullDimQNorm does."""
    hf = r.hf
    if hf.get("clip_qkv") is not None:
        raise UnsupportedError(f"config.json:clip_qkv = {show(hf['clip_qkv'])} for olmoe: Megatron-Core has no clamp "
                               "of q, k and v (Megatron-Bridge's OLMoE bridge does not map it); only null is mapped")
    fn = r.name("scoring_func", "softmax", ("softmax",))
    if fn != "softmax":
        raise UnsupportedError(f"config.json:scoring_func {show(fn)} for olmoe: Megatron-Bridge's OLMoE bridge "
                               "supports only softmax routing")
    gqa(r, m)
    if m["num_query_groups"] != m["num_attention_heads"]:
        raise UnsupportedError(f"config.json:num_key_value_heads = {m['num_query_groups']} for olmoe: Megatron-Bridge's "
                               "OLMoESelfAttention sizes the key norm for all num_attention_heads "
                               f"({m['num_attention_heads']}) heads, Hugging Face's for the key heads; only "
                               "multi-head attention maps")
    m["qk_layernorm"] = True
    m["qk_layernorm_full_dim"] = True
    m["num_experts"] = r.int("num_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    m["moe_ffn_hidden_size"] = m["ffn_hidden_size"]
    m["moe_router_pre_softmax"] = True
    m["moe_router_load_balancing_type"] = "seq_aux_loss"
    coeff = hf.get("router_aux_loss_coef", 0.01)
    if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not 0 <= coeff < 1e6:
        raise ConfigError(Problem("config.json:router_aux_loss_coef", coeff, "must be a non-negative number"))
    m["moe_aux_loss_coeff"] = float(coeff)


def map_exaone_moe(r: Reader, m: dict) -> None:
    """K-EXAONE, EXAONE MoE (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/exaone/exaone_moe/
    exaone_moe_bridge.py ``provider_bridge``, exaone_moe_provider.py ``ExaoneMoeModelProvider``,
    ``build_exaone_moe_layer_spec``; Hugging Face ExaoneMoeDecoderLayer): pre-norm layers (input and
    post-attention RMSNorms) with GQA and per-head q/k RMSNorms, a dense SwiGLU MLP of intermediate_size where
    mlp_layer_types says dense (else is_moe_layer, else the first first_k_dense_replace layers: 1 by default), else
    num_experts experts of moe_intermediate_size with num_shared_experts x moe_intermediate_size as one ungated
    shared expert, sigmoid routing with the expert bias (e_score_correction_bias), group-limited when n_group > 1;
    topk_method noaux_tc turns the aux loss off, else the provider's global_aux_loss at 1e-2 with a z-loss of
    1e-3. num_nextn_predict_layers MTP layers (the checkpoint's mtp.*; Hugging Face does not build them, Bridge
    does), each dense (mtp_dense_mlp); mtp_share_layers, or mtp_num_speculative_steps above one physical layer,
    repeat it (mtp_use_repeated_layer). Sliding windows, the no-RoPE global layers and swiglu_limits (a clamp)
    change no tensor's size."""
    hf = r.hf
    gqa(r, m)
    m["qk_layernorm"] = True
    L = m["num_layers"]
    types = hf.get("mlp_layer_types")
    moe_flags = hf.get("is_moe_layer")
    if types is not None:
        if not isinstance(types, list) or len(types) != L or any(t not in ("dense", "sparse") for t in types):
            raise ConfigError(Problem("config.json:mlp_layer_types", types, f"must be a list of num_hidden_layers "
                                      f"({L}) entries, each dense or sparse"))
        pattern = [int(t == "sparse") for t in types]
    elif moe_flags is not None:
        if not isinstance(moe_flags, list) or len(moe_flags) != L or any(type(x) is not bool for x in moe_flags):
            raise ConfigError(Problem("config.json:is_moe_layer", moe_flags, f"must be a list of num_hidden_layers "
                                      f"({L}) true/false entries"))
        pattern = [int(x) for x in moe_flags]
    else:
        first = r.int("first_k_dense_replace", 1)
        pattern = [int(i >= first) for i in range(L)]
    if not any(pattern):
        raise UnsupportedError("exaone_moe config.json makes no layer MoE (mlp_layer_types / is_moe_layer / "
                               "first_k_dense_replace)")
    if pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    m["num_experts"] = r.int("num_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    fm = r.int("moe_intermediate_size")
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("num_shared_experts", 1)
    if shared:
        m["moe_shared_expert_intermediate_size"] = shared * fm
    fn = r.name("scoring_func", "sigmoid", ("sigmoid",))
    if fn != "sigmoid":
        raise UnsupportedError(f"config.json:scoring_func {show(fn)} for exaone_moe: its router (ExaoneMoeTopkRouter) "
                               "scores by sigmoid")
    m["moe_router_score_function"] = "sigmoid"
    m["moe_router_enable_expert_bias"] = True
    m["moe_router_pre_softmax"] = True
    groups, top_groups = r.int("n_group", 1), r.int("topk_group", 1)
    if groups > 1:
        m["moe_router_num_groups"], m["moe_router_group_topk"] = groups, top_groups
    if r.name("topk_method", None, ("noaux_tc",)) == "noaux_tc":
        m["moe_router_load_balancing_type"] = "none"
    else:
        m["moe_router_load_balancing_type"] = "global_aux_loss"
        m["moe_aux_loss_coeff"] = 0.01
        m["moe_z_loss_coeff"] = 0.001
    physical = r.int("num_nextn_predict_layers", 0)
    steps = r.int("mtp_num_speculative_steps", physical)
    repeated = r.flag("mtp_share_layers")
    if steps > physical:
        if physical != 1:
            raise UnsupportedError(f"config.json:mtp_num_speculative_steps = {steps} with num_nextn_predict_layers "
                                   f"= {physical} for exaone_moe: Megatron-Bridge repeats exactly one physical MTP "
                                   "layer")
        repeated = True
    depths = steps if repeated else physical
    if depths:
        m["mtp_num_layers"] = depths
        m["mtp_dense_mlp"] = True
        if repeated:
            m["mtp_use_repeated_layer"] = True


def _layer_flags(r: Reader, key: str, L: int) -> list[int]:
    """A list of num_hidden_layers 0/1 entries (MiMo-V2-Flash's hybrid_layer_pattern and moe_layer_freq)."""
    v = r.hf.get(key)
    if not isinstance(v, list) or len(v) != L or any(type(x) is not int or x not in (0, 1) for x in v):
        raise ConfigError(Problem(f"config.json:{key}", v, f"must be a list of num_hidden_layers ({L}) entries, "
                                  "each 0 or 1"))
    return v


def map_mimo_v2_flash(r: Reader, m: dict) -> None:
    """MiMo-V2-Flash (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/mimo_v2_flash/mimo_v2_flash_bridge.py
    ``provider_bridge``, mimo_v2_flash_provider.py, modeling_mimo_v2_flash.py). hybrid_layer_pattern gives each
    layer's attention: 1 sliding window (swa_num_key_value_heads key/value heads, learnable sinks with
    add_swa_attention_sink_bias), 0 global (num_key_value_heads, sinks with add_full_attention_sink_bias). Here the
    sliding-window layers are the model's own (num_query_groups, softmax_type) and the global ones its
    global-attention layers (global_attention_freq, num_global_query_groups, global_softmax_type). Query and key
    heads are head_dim wide, value heads v_head_dim (v_channels); the swa_ head counts and widths must equal the
    global ones (Bridge builds both kinds from one num_attention_heads, kv_channels and v_head_dim). moe_layer_freq
    (a 0/1 list) says which layers are MoE: n_routed_experts of moe_intermediate_size, top-k sigmoid routing with the
    expert bias (topk_method noaux_tc), no aux loss (Bridge: load balancing none, pre-softmax), no shared expert;
    the others a dense MLP of intermediate_size. The config.json does not state the MTP layers: Bridge counts the
    checkpoint's model.mtp.layers.* (three in MiMo-V2-Flash) and builds each with sliding-window attention and a
    dense MLP: add mtp_num_layers 3 with mtp_dense_mlp true to train with them.
    layernorm_epsilon is the norms' epsilon; attention_value_scale, the RoPE bases and partial rotary, the window and
    chunk sizes change no tensor."""
    hf = r.hf
    refuse_true(r, "attention_bias", why="MiMo-V2-Flash's projections have no biases (Bridge maps none)")
    if hf.get("hybrid_block_size") is not None:
        raise UnsupportedError(f"config.json:hybrid_block_size = {show(hf['hybrid_block_size'])} for "
                               f"{r.mt}: only the per-layer hybrid_layer_pattern is mapped (as Megatron-Bridge does)")
    L, a = m["num_layers"], m["num_attention_heads"]
    head_dim, v_dim = r.int("head_dim"), r.int("v_head_dim")
    for key, same in (("swa_num_attention_heads", a), ("swa_head_dim", head_dim), ("swa_v_head_dim", v_dim)):
        v = r.int(key, same)
        if v != same:
            raise UnsupportedError(f"config.json:{key} = {v} differs from its global-attention counterpart ({same}) "
                                   f"for {r.mt}: Megatron-Bridge builds both attention kinds with one "
                                   "num_attention_heads, kv_channels and v_head_dim")
    full_g, swa_g = r.int("num_key_value_heads"), r.int("swa_num_key_value_heads")
    swa_sinks, full_sinks = r.flag("add_swa_attention_sink_bias"), r.flag("add_full_attention_sink_bias")
    swa = _layer_flags(r, "hybrid_layer_pattern", L)
    m["kv_channels"] = head_dim
    if v_dim != head_dim:
        m["v_channels"] = v_dim
    local = any(swa)
    m["num_query_groups"] = swa_g if local else full_g
    if (swa_sinks if local else full_sinks):
        m["softmax_type"] = "learnable"
    if local and not all(swa):
        m["global_attention_freq"] = [1 - x for x in swa]
        if full_g != swa_g:
            m["num_global_query_groups"] = full_g
        if full_sinks != swa_sinks:
            m["global_softmax_type"] = "learnable" if full_sinks else "vanilla"
    m["ffn_hidden_size"] = r.int("intermediate_size")
    m["layernorm_epsilon"] = r.number("layernorm_epsilon", m["layernorm_epsilon"])
    experts = r.int("n_routed_experts", required=False)
    if not experts:
        return
    if r.int("n_shared_experts", 0):
        raise UnsupportedError(f"config.json:n_shared_experts > 0 for {r.mt}: Megatron-Bridge's MiMo-V2-Flash "
                               "bridge maps no shared expert")
    moe = _layer_flags(r, "moe_layer_freq", L)
    if not any(moe):
        raise UnsupportedError(f"{r.mt} config.json makes no layer MoE (moe_layer_freq is all 0)")
    m["num_experts"] = experts
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    m["moe_ffn_hidden_size"] = r.int("moe_intermediate_size")
    if pattern_value(moe) is not None:
        m["moe_layer_freq"] = moe
    method = r.name("topk_method", "noaux_tc", ("noaux_tc",))
    fn = r.name("scoring_func", "sigmoid", ("sigmoid",))
    if method != "noaux_tc" or fn != "sigmoid":
        raise UnsupportedError(f"config.json:topk_method {show(method)} / scoring_func {show(fn)} for {r.mt}: the "
                               "bridge routes by sigmoid with the expert bias (noaux_tc)")
    m["moe_router_score_function"] = "sigmoid"
    m["moe_router_enable_expert_bias"] = True
    m["moe_router_pre_softmax"] = True
    m["moe_router_load_balancing_type"] = "none"


def map_minimax_m3(r: Reader, m: dict) -> None:
    """MiniMax-M3's language model (its text_config), as Megatron-Bridge's MiniMax-M3 recipes train it: the text
    provider of Megatron-Bridge @ 067f987d : src/megatron/bridge/models/minimax_m3/minimax_m3_bridge.py
    (``provider_bridge``, ``MiniMaxM3VLModelProvider.to_text_provider``; recipes/minimax/h100/minimax_m3.py). GQA
    with per-head q/k RMSNorms (qk_norm_type per_head), no output gate; moe_layer_freq (a 0/1 list, else
    first_k_dense_replace) says which layers are MoE: num_local_experts experts of intermediate_size (the per-expert
    width), top-k sigmoid routing with the expert bias (use_routing_bias), aux loss at router_aux_loss_coef (the
    bridge's default 1e-3), n_shared_experts x shared_intermediate_size as one shared expert; the others a dense MLP
    of dense_intermediate_size. SwiGLU-OAI (hidden_act swigluoai) is quick-GELU gated (the bridge's
    ``hf_to_megatron_activation``); its clamp (swiglu_limit) and +1 offset change no tensor's size. Gemma-style
    norms (use_gemma_norm), partial RoPE (rotary_dim) and routed_scaling_factor have no weights. Not counted: the
    MTP modules (the bridge sets mtp_num_layers None: the checkpoint ships none), the lightning indexers of
    sparse_attention_config (Megatron runs full attention; only the vision-language provider keeps their weights,
    frozen, as checkpoint state), the vision tower and projectors, and the router weights' fp32 copy (the bridge
    keeps them in fp32: 2 more bytes per router weight, 89.7 MB (10^6 bytes) for MiniMax-M3's 57
    routers)."""
    hf = r.hf
    for key in ("attention_bias", "mlp_bias"):
        refuse_true(r, key, why="the bridge builds MiniMax-M3 without biases")
    refuse_true(r, "attention_output_gate", why="the bridge builds no attention output gate for MiniMax-M3")
    gqa(r, m)
    if r.flag("use_qk_norm", True):
        kind = r.name("qk_norm_type", "per_head", ("per_head",))
        if kind != "per_head":
            raise UnsupportedError(f"config.json:qk_norm_type {show(kind)} for {r.mt}: the bridge builds per-head q/k "
                                   "norms (Megatron-Core's qk_layernorm); only per_head is mapped")
        m["qk_layernorm"] = True
    L = m["num_layers"]
    fm = m.pop("ffn_hidden_size")
    if r.int("moe_intermediate_size", fm) != fm:
        raise UnsupportedError(f"config.json:moe_intermediate_size = {hf['moe_intermediate_size']} differs from "
                               f"intermediate_size ({fm}) for {r.mt}: the bridge takes intermediate_size as the "
                               "experts' width")
    m["ffn_hidden_size"] = r.int("dense_intermediate_size", fm)
    m["num_experts"] = r.int("num_local_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    m["moe_ffn_hidden_size"] = fm
    if hf.get("moe_layer_freq") is not None:
        moe = _layer_flags(r, "moe_layer_freq", L)
    else:
        moe = [int(i >= r.int("first_k_dense_replace", 0)) for i in range(L)]
    if not any(moe):
        raise UnsupportedError(f"{r.mt} config.json makes no layer MoE")
    if pattern_value(moe) is not None:
        m["moe_layer_freq"] = moe
    shared_w = r.int("shared_intermediate_size", 0)
    shared = r.int("n_shared_experts", 1 if shared_w else 0)
    if shared * shared_w:
        m["moe_shared_expert_intermediate_size"] = shared * shared_w
    fn = r.name("scoring_func", "sigmoid", ("sigmoid",))
    if fn != "sigmoid":
        raise UnsupportedError(f"config.json:scoring_func {show(fn)} for {r.mt}: the bridge routes by sigmoid")
    m["moe_router_score_function"] = "sigmoid"
    if r.flag("use_routing_bias", True):
        m["moe_router_enable_expert_bias"] = True
    m["moe_router_dtype"] = "fp32"
    m["moe_router_load_balancing_type"] = "aux_loss"
    coeff = hf.get("router_aux_loss_coef", 1e-3)
    if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not 0 <= coeff < 1e6:
        raise ConfigError(Problem("config.json:router_aux_loss_coef", coeff, "must be a non-negative number"))
    if coeff:
        m["moe_aux_loss_coeff"] = float(coeff)


def map_hy_v3(r: Reader, m: dict) -> None:
    """Hy3 / Hunyuan V3 (tencent/Hy3-preview, tencent/Hy3; Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/hy_v3/hy_v3_bridge.py ``provider_bridge``): GQA without biases and with per-head
    q/k RMSNorms (qk_norm), a dense SwiGLU MLP of intermediate_size in the first first_k_dense_replace layers, then
    MoE layers of num_experts experts of moe_intermediate_size (expert_hidden_dim, its legacy alias, must agree) with
    num_shared_experts x moe_intermediate_size as one ungated shared expert, top-k sigmoid routing with the expert
    bias (a buffer), no aux loss (the bridge's load balancing none). num_nextn_predict_layers MTP layers (the
    checkpoint's layer num_hidden_layers), each an MoE layer like the decoder's. route_norm, router_scaling_factor
    and the fp32 switches (enable_lm_head_fp32, enable_attention_fp32_softmax, enable_moe_fp32_combine) change no
    tensor's size. transformers 5's mlp_layer_types, where given, must say the same as first_k_dense_replace."""
    hf = r.hf
    if not r.flag("qk_norm", True):
        raise UnsupportedError("config.json:qk_norm = false for hy_v3: Megatron-Bridge's HY V3 bridge always builds "
                               "the q/k norms (qk_layernorm true)")
    if not r.flag("moe_router_use_sigmoid", True):
        raise UnsupportedError("config.json:moe_router_use_sigmoid = false for hy_v3: the bridge routes by sigmoid")
    if not r.flag("moe_router_enable_expert_bias", True):
        raise UnsupportedError("config.json:moe_router_enable_expert_bias = false for hy_v3: the bridge always keeps "
                               "the expert bias")
    gqa(r, m)
    m["qk_layernorm"] = True
    L = m["num_layers"]
    first = r.int("first_k_dense_replace", 1)
    pattern = [int(i >= first) for i in range(L)]
    types = hf.get("mlp_layer_types")
    if types is not None and types != ["dense" if not p else "sparse" for p in pattern]:
        raise UnsupportedError(f"config.json:mlp_layer_types {show(types)} for hy_v3: Megatron-Bridge builds the "
                               f"first first_k_dense_replace ({first}) layers dense and the rest MoE; only a list "
                               "saying the same is mapped")
    if not any(pattern):
        raise UnsupportedError(f"hy_v3 config.json makes no layer MoE (first_k_dense_replace {first})")
    if pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    m["num_experts"] = r.int("num_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    fm = r.int("moe_intermediate_size")
    alias = r.int("expert_hidden_dim", fm)
    if alias != fm:
        raise ConfigError(Problem("config.json:expert_hidden_dim", alias, f"must equal moe_intermediate_size ({fm}), "
                                  "whose legacy alias it is"))
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("num_shared_experts", 1)
    if shared:
        m["moe_shared_expert_intermediate_size"] = shared * fm
    m["moe_router_score_function"] = "sigmoid"
    m["moe_router_enable_expert_bias"] = True
    m["moe_router_load_balancing_type"] = "none"
    mtp = r.int("num_nextn_predict_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp


def map_sarvam(r: Reader, m: dict) -> None:
    """Sarvam (sarvamai/sarvam-30b: sarvam_moe; sarvamai/sarvam-105b: sarvam_mla), as Megatron-Bridge @ 067f987d
    builds them (src/megatron/bridge/models/sarvam/common.py ``get_common_config``, sarvam_moe_bridge.py,
    sarvam_mla_bridge.py ``provider_bridge``, sarvam_provider.py ``SarvamMoEModelProvider`` /
    ``SarvamMLAModelProvider``): a dense SwiGLU MLP of intermediate_size in the first first_k_dense_replace layers,
    then MoE layers of num_experts experts of moe_intermediate_size, num_shared_experts x moe_intermediate_size as
    one ungated shared expert, sigmoid routing before the top-k (moe_router_pre_softmax) with the expert bias and no
    aux loss (coefficient 0); untied embeddings and no biases whatever the config.json says (the providers fix them,
    so a config.json saying otherwise is refused). sarvam_moe: GQA of num_key_value_heads with head_dim-wide heads
    and per-head q/k RMSNorms (the checkpoint's fused query_key_value, query_layernorm, key_layernorm).
    sarvam_mla: DeepSeek-V3's multi-latent attention without q compression (kv_lora_rank, qk_nope_head_dim,
    qk_rope_head_dim, v_head_dim; the kv latent norm), YaRN positions (no weights). Group-limited routing (n_group,
    topk_group) and routed_scaling_factor change no tensor's size; the bridge maps neither."""
    hf = r.hf
    refuse_true(r, "tie_word_embeddings", why="Megatron-Bridge's Sarvam providers always untie the output layer")
    refuse_true(r, "use_bias", "use_qkv_bias", "attention_bias", "mlp_bias",
                why="Megatron-Bridge's Sarvam providers build no biases (add_bias_linear and add_qkv_bias false)")
    if not r.flag("use_qk_norm", True):
        raise UnsupportedError(f"config.json:use_qk_norm = false for {r.mt}: Megatron-Bridge's Sarvam providers "
                               "always build the q/k norms (qk_layernorm true)")
    for key in ("score_function", "scoring_func"):
        fn = r.name(key, "sigmoid", ("sigmoid",))
        if fn != "sigmoid":
            raise UnsupportedError(f"config.json:{key} {show(fn)} for {r.mt}: the Sarvam providers route by sigmoid")
    if r.mt == "sarvam_mla":
        from .deepseek import mla
        mla(r, m)
    else:
        m["num_query_groups"] = r.int("num_key_value_heads", m["num_attention_heads"])
        m["kv_channels"] = r.int("head_dim", m["hidden_size"] // m["num_attention_heads"])
        m["qk_layernorm"] = True
    m["ffn_hidden_size"] = r.int("intermediate_size")
    L = m["num_layers"]
    first = r.int("first_k_dense_replace", 1)
    pattern = [int(i >= first) for i in range(L)]
    if not any(pattern):
        raise UnsupportedError(f"{r.mt} config.json makes no layer MoE (first_k_dense_replace {first})")
    if pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    m["num_experts"] = r.int("num_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    fm = r.int("moe_intermediate_size")
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("num_shared_experts", 1) * fm
    stated = r.int("moe_shared_expert_intermediate_size", required=False)
    if stated is not None and stated != shared:
        raise ConfigError(Problem("config.json:moe_shared_expert_intermediate_size", stated, "must equal "
                                  f"num_shared_experts x moe_intermediate_size ({shared}), the width "
                                  "Megatron-Bridge builds"))
    if shared:
        m["moe_shared_expert_intermediate_size"] = shared
    m["moe_router_score_function"] = "sigmoid"
    m["moe_router_pre_softmax"] = True
    m["moe_router_enable_expert_bias"] = True
    scaling = hf.get("rope_scaling") or hf.get("rope_parameters")
    kind = (scaling.get("rope_type") or scaling.get("type")) if isinstance(scaling, dict) else None
    if r.mt == "sarvam_mla" and kind == "yarn":
        m["position_embedding_type"] = "yarn"


#: famE (issue 27): the sliding-window layers' shape Megatron-Bridge's Step 3.5 bridge starts from, and the keys of
#: attention_other_setting that override it (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/stepfun/
#: step35_bridge.py ``provider_bridge``, sliding_attention_setting).
_STEP35_SLIDING = {"num_attention_heads": 96, "num_attention_groups": 8, "head_dim": 128}
_STEP35_LAYER_TYPES = ("full_attention", "sliding_attention")


def _step35_sliding_shape(r: Reader) -> tuple[int, int, int]:
    """(query heads, key/value heads, head width) of Step 3.5's sliding-window layers: Bridge's defaults (96, 8,
    128), overridden by attention_other_setting's values when its attention_type is sliding_attention. A setting
    without that attention_type Bridge ignores: its values must then be the defaults (else the checkpoint and the
    model Bridge builds disagree); a missing one leaves the checkpoint's sliding layers unstated."""
    other = r.hf.get("attention_other_setting")
    if other is None:
        raise UnsupportedError(f"config.json:attention_other_setting is missing for {r.mt} with sliding_attention "
                               "layers: the checkpoint's sliding-window shape is not stated (Megatron-Bridge would "
                               "assume 96 query heads, 8 key/value heads, head_dim 128)")
    if not isinstance(other, dict):
        raise ConfigError(Problem("config.json:attention_other_setting", other, "must be an object with "
                                  "num_attention_heads, num_attention_groups, head_dim (and attention_type)"))
    unknown = sorted(set(other) - set(_STEP35_SLIDING) - {"attention_type"})
    if unknown:
        raise UnsupportedError(f"config.json:attention_other_setting key(s) not understood for {r.mt}: "
                               f"{', '.join(map(show, unknown))}")
    shape = {}
    for key, default in _STEP35_SLIDING.items():
        v = other.get(key, default)
        top = r.bound(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            raise ConfigError(Problem(f"config.json:attention_other_setting.{key}", v,
                                      f"must be an integer from 1 to {top:,}, got {show(v)}"))
        shape[key] = v
    kind = other.get("attention_type")
    if kind != "sliding_attention" and shape != _STEP35_SLIDING:
        raise UnsupportedError(f"config.json:attention_other_setting.attention_type = {show(kind)} for {r.mt}: "
                               "Megatron-Bridge applies the setting only when it is \"sliding_attention\" and "
                               f"otherwise builds the sliding layers with {_STEP35_SLIDING}, not {shape}")
    return shape["num_attention_heads"], shape["num_attention_groups"], shape["head_dim"]


def _step35_layer_types(r: Reader, L: int, mtp: int) -> tuple[list[bool], list[bool]]:
    """Sliding-window flags of the decoder layers and of the MTP layers: layer_types holds num_hidden_layers entries
    (the MTP layers' then in mtp_layer_types) or num_hidden_layers + num_nextn_predict_layers (the published form,
    which Bridge's Step35Config splits). Without layer_types every layer is full attention (Bridge's
    Step35DecoderLayer finds no sliding_attention entry)."""
    types = r.hf.get("layer_types")
    if types is None:
        return [False] * L, [False] * mtp
    extra = r.hf.get("mtp_layer_types")
    if isinstance(types, list) and len(types) == L and extra is not None:
        types = types + (extra if isinstance(extra, list) else [extra])
    if (not isinstance(types, list) or len(types) not in (L, L + mtp)
            or any(t not in _STEP35_LAYER_TYPES for t in types)):
        raise ConfigError(Problem("config.json:layer_types", types, f"must list num_hidden_layers ({L}) or "
                                  f"num_hidden_layers + num_nextn_predict_layers ({L + mtp}) entries, each "
                                  "full_attention or sliding_attention"))
    flags = [t == "sliding_attention" for t in types]
    return flags[:L], flags[L:] if len(flags) > L else [False] * mtp


def map_step3p5(r: Reader, m: dict) -> None:
    """Step 3.5 Flash (stepfun-ai/Step-3.5-Flash, model_type step3p5; Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/stepfun/step35_bridge.py ``provider_bridge``, step35_provider.py
    ``Step35DecoderLayer``, configuration_step35.py). layer_types says which layers attend through a sliding window:
    those take num_attention_heads, num_attention_groups and head_dim from attention_other_setting (96, 8 and 128;
    the model's own num_attention_heads, num_query_groups and kv_channels here), the full-attention layers the
    top-level ones (64, 8, 128: the global-attention layers, global_attention_freq, num_global_attention_heads,
    num_global_query_groups, global_kv_channels). use_head_wise_attn_gate gives every layer a sigmoid gate on the
    attention output: Hugging Face's g_proj holds one gate per head, but Megatron-Core @ d98e8a64 has no
    head_wise_attn_gate, so Bridge builds its fallback, attention_output_gate (a gate as wide as the queries, a x
    head_dim outputs more in the QKV projection), which is what is counted (the verification card's
    199,997,706,240 parameters). Per-head q/k RMSNorms with use_qk_norm. moe_layers_enum (a comma-separated text or
    a list of layer indices) says which layers are MoE: moe_num_experts experts of moe_intermediate_size, top-k
    moe_top_k routed by moe_router_activation, the expert bias with use_moe_router_bias, an fp32 router with
    need_fp32_gate, aux loss 1e-3 (Bridge's), and one shared expert of share_expert_dim; the others a dense MLP of
    intermediate_size. The num_nextn_predict_layers MTP layers are dense (Bridge's _MTPDenseLayerSpecsList) and
    must be sliding-window layers in layer_types (the published form), whose attention mtp_dense_mlp gives them.
    The per-layer RoPE bases and partial rotary factors, the SwiGLU clamps (swiglu_limits, swiglu_limits_shared),
    zero-centred norms, the router's scaling factor and use_moe / moe_every_n_layer / moe_layer_offset (Bridge reads
    moe_layers_enum alone) change no tensor. Not modelled: at pipeline-parallel size > 1 Bridge's
    Step35DecoderLayer indexes the MTP layers past layer_types (it adds the last stage's layer offset) and builds
    them as full-attention layers."""
    hf = r.hf
    refuse_true(r, "sink", why="Megatron-Bridge's Step 3.5 bridge maps no attention sinks")
    impl = r.name("att_impl_type", "GQA", ("GQA",))
    if impl != "GQA":
        raise UnsupportedError(f"config.json:att_impl_type {show(impl)} for {r.mt}: only GQA is mapped")
    for key in ("use_head_wise_attn_gate", "num_nextn_predict_layers"):
        if key not in hf:
            # Bridge's Step35Config defaults differ from Hugging Face's remote one (gate true vs false, 3 MTP layers)
            raise ConfigError(Problem(f"config.json:{key}", None, f"is required for {r.mt} and missing (its default "
                                      "differs between Megatron-Bridge's Step35Config and the remote config class)"))
    L, a = m["num_layers"], m["num_attention_heads"]
    g, dh = r.int("num_attention_groups"), r.int("head_dim")
    mtp = r.int("num_nextn_predict_layers")
    sliding, mtp_sliding = _step35_layer_types(r, L, mtp)
    if any(sliding):
        sa, sg, sdh = _step35_sliding_shape(r)
        m["num_attention_heads"], m["num_query_groups"], m["kv_channels"] = sa, sg, sdh
        if not all(sliding):
            m["global_attention_freq"] = [0 if s else 1 for s in sliding]
            if a != sa:
                m["num_global_attention_heads"] = a
            if g != sg:
                m["num_global_query_groups"] = g
            if dh != sdh:
                m["global_kv_channels"] = dh
        if mtp and not all(mtp_sliding):
            raise UnsupportedError(f"config.json:layer_types gives {r.mt}'s MTP layers full attention beside "
                                   "sliding-window decoder layers: only sliding-window MTP layers (the published "
                                   "form) are modelled")
    else:
        m["num_query_groups"], m["kv_channels"] = g, dh
    if r.flag("use_head_wise_attn_gate") or r.flag("attention_output_gate"):
        m["attention_output_gate"] = True
    if r.flag("use_qk_norm"):
        m["qk_layernorm"] = True
    m["ffn_hidden_size"] = r.int("intermediate_size")
    if mtp:
        m["mtp_num_layers"] = mtp
    experts = r.int("moe_num_experts", required=False)
    if not experts:
        return
    enum = hf.get("moe_layers_enum")
    if isinstance(enum, str):
        parts = [x.strip() for x in enum.split(",") if x.strip()]
        enum = [int(x) if x.isdigit() else x for x in parts]
    if not isinstance(enum, list) or any(type(i) is not int or not 0 <= i < L for i in enum):
        raise ConfigError(Problem("config.json:moe_layers_enum", hf.get("moe_layers_enum"), "must list the MoE "
                                  f"layers' indices, 0 to {L - 1} (a comma-separated text or a list)"))
    moe = [int(i in enum) for i in range(L)]
    if not any(moe):
        raise UnsupportedError(f"{r.mt} config.json makes no layer MoE (moe_layers_enum is empty)")
    m["num_experts"] = experts
    m["moe_router_topk"] = r.int("moe_top_k")
    m["moe_ffn_hidden_size"] = r.int("moe_intermediate_size")
    if pattern_value(moe) is not None:
        m["moe_layer_freq"] = moe
    shared = {k: r.int(k) for k in ("share_expert_dim", "share_expert_dims") if hf.get(k) is not None}
    if len(set(shared.values())) > 1:
        raise UnsupportedError(f"config.json:share_expert_dim and share_expert_dims differ for {r.mt} "
                               f"({shared}): Bridge maps both to the one shared expert's width")
    if shared and next(iter(shared.values())):
        m["moe_shared_expert_intermediate_size"] = next(iter(shared.values()))
    fn = r.name("moe_router_activation", "softmax", ("sigmoid", "softmax"))
    if fn not in ("sigmoid", "softmax"):
        raise UnsupportedError(f"config.json:moe_router_activation {show(fn)} for {r.mt}: sigmoid or softmax")
    m["moe_router_score_function"] = fn
    if r.flag("use_moe_router_bias"):
        m["moe_router_enable_expert_bias"] = True
    if r.flag("need_fp32_gate"):
        m["moe_router_dtype"] = "fp32"
    m["moe_router_load_balancing_type"] = "aux_loss"
    m["moe_aux_loss_coeff"] = 1e-3
    if mtp:
        m["mtp_dense_mlp"] = True
