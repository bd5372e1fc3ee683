"""MoE families with their own layouts: ERNIE 4.5 MoE, ERNIE-4.5-VL's language model (text and vision expert
pools), Ling 2.0 (Bailing MoE V2), gpt-oss, MiniMax-M2, OLMoE, K-EXAONE (EXAONE MoE), MiniMax-M3's language model,
Hy3 (Hunyuan V3) and Sarvam (its GQA and multi-latent-attention variants). MiMo-V2-Flash and Step 3.5 Flash are
in :mod:`.sliding`."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .llama import gqa
from .reader import Reader, layer_flags, pattern_value, refuse_true


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


def map_ernie4_5_vl(r: Reader, m: dict) -> None:
    """ERNIE-4.5-VL's language model (text_config of transformers' Ernie4_5_VLMoeConfig, huggingface/transformers
    @ 020a37d2 : configuration_ernie4_5_vl_moe.py ``Ernie4_5_VLMoeTextConfig``) as Megatron-Bridge @ 067f987d :
    ernie_vl/ernie45_vl_bridge.py ``provider_bridge`` maps it: moe_num_experts experts (an int, or one equal count
    per pool) in each of two pools, the text one moe_intermediate_size[0] wide and the vision one
    moe_intermediate_size[1] (default [1536, 512]), top moe_k, moe_num_shared_experts shared experts of the text
    width, a sigmoid router with expert bias in fp32 and an aux loss of router_aux_loss_coef (default 0.001), and
    mlp_layer_types "dense" / "sparse" (default: layer 0 dense)."""
    refuse_true(r, "use_bias", why="biases on every projection are not what ERNIE-4.5-VL ships")
    gqa(r, m)
    L = m["num_layers"]
    E = r.hf.get("moe_num_experts", 64)
    if isinstance(E, list) and len(E) == 2 and E[0] == E[1]:
        E = E[0]
    if type(E) is not int or not 1 <= E <= r.bound("moe_num_experts"):
        raise ConfigError(Problem("config.json:moe_num_experts", E, "must be a positive integer (or two equal ones, "
                                  "text and vision pool: Megatron-Bridge builds both pools with one count) up to "
                                  f"{r.bound('moe_num_experts'):,}, got {show(E)}"))
    widths = r.hf.get("moe_intermediate_size", [1536, 512])
    if (not isinstance(widths, list) or len(widths) != 2
            or not all(type(x) is int and 1 <= x <= r.bound("moe_intermediate_size") for x in widths)):
        raise ConfigError(Problem("config.json:moe_intermediate_size", widths, "must be two positive integers, "
                                  "the text and the vision experts' widths (ErnieMultiTypeMoE), up to "
                                  f"{r.bound('moe_intermediate_size'):,}, got {show(widths)}"))
    m["num_experts"], m["moe_router_topk"] = E, r.int("moe_k", 6)
    m["moe_ffn_hidden_size"], m["moe_vision_ffn_hidden_size"] = widths
    shared = r.int("moe_num_shared_experts", 2)
    if shared:
        m["moe_shared_expert_intermediate_size"] = shared * widths[0]
    types = r.hf.get("mlp_layer_types", ["dense"] + ["sparse"] * (L - 1))
    if not isinstance(types, list) or len(types) != L or any(t not in ("dense", "sparse") for t in types):
        raise ConfigError(Problem("config.json:mlp_layer_types", types, f"must list num_hidden_layers ({L}) "
                                  f"entries, each 'dense' or 'sparse', got {show(types)}"))
    pattern = [int(t == "sparse") for t in types]
    if pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    m.update(moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True, moe_router_dtype="fp32")
    coeff = r.number("router_aux_loss_coef", 0.001)       # the bridge's moe_aux_loss_coeff (aux_loss balancing)
    if coeff:
        m["moe_aux_loss_coeff"] = coeff


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


def _minimax_router(r: Reader, m: dict) -> None:
    """MiniMax-M2's and M3's router as their bridges build it: sigmoid scores (scoring_func; another is refused),
    the expert bias (use_routing_bias, on by default) and the aux loss at router_aux_loss_coef (default 1e-3)."""
    fn = r.name("scoring_func", "sigmoid", ("sigmoid",))
    if fn != "sigmoid":
        raise UnsupportedError(f"config.json:scoring_func {show(fn)} for {r.mt}: the bridge routes by sigmoid")
    m["moe_router_score_function"] = "sigmoid"
    if r.flag("use_routing_bias", True):
        m["moe_router_enable_expert_bias"] = True
    m["moe_router_load_balancing_type"] = "aux_loss"
    coeff = r.hf.get("router_aux_loss_coef", 1e-3)
    if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not 0 <= coeff < 1e6:
        raise ConfigError(Problem("config.json:router_aux_loss_coef", coeff, "must be a non-negative number"))
    if coeff:
        m["moe_aux_loss_coeff"] = float(coeff)


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
    _minimax_router(r, m)


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
        moe = layer_flags(r, "moe_layer_freq", L)
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
    _minimax_router(r, m)
    m["moe_router_dtype"] = "fp32"


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
