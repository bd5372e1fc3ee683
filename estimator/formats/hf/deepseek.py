"""Multi-latent attention and the DeepSeek families: DeepSeek-V2/V3 (and Moonlight, Kimi K2), their router as
Megatron-Bridge builds it, DeepSeek-V3.2's sparse attention (the lightning indexer) and DeepSeek-V4's hybrid
compressed attention, hyper-connections and hash-routed layers."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .reader import Reader, pattern_value, refuse_true


def mla(r: Reader, m: dict) -> None:
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


def _deepseek_experts(r: Reader, m: dict) -> None:
    """DeepSeek's routed and shared experts (V2/V3 and V4 alike): num_experts_per_tok of moe_intermediate_size, and
    n_shared_experts (none by default) joined into one shared expert of that many times the width."""
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    fm = r.int("moe_intermediate_size")
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("n_shared_experts", 0)
    if shared:
        m["moe_shared_expert_intermediate_size"] = shared * fm


def map_deepseek(r: Reader, m: dict) -> None:
    """DeepSeek-V2/V3 (and Moonlight): multi-latent attention, first-k-dense MoE, shared experts, MTP."""
    mt, L = r.mt, m["num_layers"]
    for key in ("attention_bias", "mlp_bias"):
        if r.flag(key):
            raise UnsupportedError(f"config.json:{key} = true for {mt}: biases on the MLA or MoE projections "
                                   "have no Megatron-Core equivalent")
    mla(r, m)
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
        if pattern_value(pattern) is not None:
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


def _deepseek_router(r: Reader, m: dict, method: str) -> None:
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


def dsa_indexer(r: Reader, m: dict) -> None:
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


def map_deepseek_v32(r: Reader, m: dict) -> None:
    """DeepSeek-V3.2 (and -Exp): DeepSeek-V3's layers (:func:`map_deepseek`) with DeepSeek sparse attention
    (:func:`dsa_indexer`). Megatron-Bridge @ 067f987d has no DeepSeek-V3.2 bridge; the indexer loss stays at
    Megatron-Core's default (off), and the indexer's options that change no tensor (RoPE layout, Hadamard rotation,
    ReLU scoring) at theirs, which match DeepSeek's inference code."""
    map_deepseek(r, m)
    dsa_indexer(r, m)


#: DeepSeek-V4's attention kinds by Hugging Face layer type, and their compression ratios (Megatron-Bridge @ 067f987d :
#: src/megatron/bridge/models/deepseek/deepseek_v4_bridge.py ``_DSV4_LAYER_TYPE_TO_COMPRESS_RATIO``).
_V4_LAYER_TYPES = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}


def _v4_ratios(r: Reader, layers: int) -> list[int]:
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


def map_deepseek_v4(r: Reader, m: dict) -> None:
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
        refuse_true(r, key, why="DeepSeek-V4's projections have no biases")
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
