"""The Llama-style families: standard attention (MHA / GQA) and the dense MLP (:func:`gqa`), Mixtral's and the
Qwen MoE models' experts (:func:`moe_experts`), and the families built from them: Phi-3, MiMo, OLMo 2, EXAONE 4.0,
Nemotron-4 / Minitron, Llama 4 and Llama-Nemotron's heterogeneous blocks."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, clip, show
from .reader import Reader, pattern_value, positive_dropouts, refuse_true


def gqa(r: Reader, m: dict) -> None:
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
    elif att_bias and mlp_bias and mt in ("llama", "nemotron"):
        m["add_bias_linear"] = True
    elif att_bias or mlp_bias:
        what = "attention_bias (q, k, v and o projections)" if att_bias else "mlp_bias"
        raise UnsupportedError(f"config.json:{what} = true for {mt} has no exact Megatron-Core equivalent: "
                               "add_bias_linear puts biases on every linear layer, add_qkv_bias on q, k, v only")
    if mt in ("qwen3", "qwen3_moe"):
        m["qk_layernorm"] = True


def moe_experts(r: Reader, m: dict) -> None:
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
        freq = pattern_value(pattern)
        if freq is not None:
            m["moe_layer_freq"] = freq
    if mt in ("qwen2_moe", "qwen3_next", "qwen3_5_moe"):
        shared = r.int("shared_expert_intermediate_size", 0)
        if shared:
            m["moe_shared_expert_intermediate_size"] = shared
            m["moe_shared_expert_gate"] = True


def map_phi3(r: Reader, m: dict) -> None:
    """Phi-3 / Phi-3.5 / Phi-4-mini: Llama's layers with fused qkv_proj and gate_up_proj (the same tensors, the same
    count); embd_pdrop / resid_pdrop are the hidden dropout."""
    refuse_true(r, "lm_head_bias", why="a bias on the output layer has no Megatron-Core equivalent")
    gqa(r, m)
    positive_dropouts(r, m, "embd_pdrop", "resid_pdrop")


def map_mimo(r: Reader, m: dict) -> None:
    """MiMo: Qwen2's layers (bias on q, k, v) and num_nextn_predict_layers MTP layers, each a Qwen2 layer with
    token/hidden norms, an input projection 2h x h and a final norm, as Megatron-Core's MTP layer."""
    gqa(r, m)
    mtp = r.int("num_nextn_predict_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp


def map_nemotron_nas(r: Reader, m: dict) -> None:
    """Llama-Nemotron Super / Ultra (DeciLMForCausalLM, model_type nemotron-nas; Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/llama_nemotron/llama_nemotron_bridge.py ``provider_bridge``, which hands the whole
    config.json to Megatron-Core's HeterogeneousTransformerConfig as heterogeneous_layers_config_encoded_json).
    Llama layers (SwiGLU, RMSNorm, RoPE, untied embeddings unless tie_word_embeddings) whose block_configs give each
    layer its attention (no_op, replace_with_linear, or n_heads_in_group heads per key/value head) and its MLP
    (no_op, replace_with_linear, or ffn_mult); every key of every block is type-checked by
    :func:`estimator.config.rules.hetero.parse_blocks`, which reads them as Megatron-Core does. The blocks are written to
    heterogeneous_layers_config in Megatron-Core's own names (num_query_groups, ffn_hidden_size); num_query_groups
    and ffn_hidden_size of the model are the first attention block's and the first MLP block's (Megatron-LM's
    arguments.py asserts one n_heads_in_group for all layers). intermediate_size and num_key_value_heads, null in
    the published config.json, are not read."""
    import json

    from ...config.rules.hetero import HeteroError, parse_blocks as parse
    from ...config.schema import MAX_FFN
    hf = r.hf
    refuse_true(r, "attention_bias", why="DeciLM's attention has no biases in Megatron-Core's heterogeneous spec")
    refuse_true(r, "mlp_bias", why="DeciLM's MLP has no biases in Megatron-Core's heterogeneous spec")
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


def map_llama4(r: Reader, m: dict) -> None:
    """Llama 4's language model (text_config): dense layers of width intermediate_size_mlp and MoE layers every
    interleave_moe_layer_step layers (Hugging Face: layer i is MoE when (i + 1) % step == 0, or the moe_layers
    list), num_local_experts experts of width intermediate_size with top-k routing and one shared expert of the
    same width, and with use_qk_norm the parameter-free L2 norm of queries and keys (Megatron-Core's
    qk_l2_norm; Hugging Face skips it in the no-RoPE layers, Megatron-Core applies it in every layer). Chunked
    attention (attention_chunk_size) and the no-RoPE layers change no tensor's size."""
    gqa(r, m)
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
    if pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    if r.flag("use_qk_norm"):
        m["qk_l2_norm"] = True


def map_olmo2(r: Reader, m: dict) -> None:
    """OLMo 2 (Hugging Face Olmo2DecoderLayer; Megatron-Bridge has no OLMo 2 bridge at 067f987d, so the layer is
    described with the parts Bridge builds for other families): no norm before attention or the MLP
    (pre_layernorm false), an RMSNorm after the attention output projection and one after fc2 (post_layernorm,
    Gemma's TERowParallelLinearLayerNorm), and q/k RMSNorms over the whole projection, all heads together
    (qk_layernorm_full_dim: Hugging Face's q_norm of num_attention_heads x head_dim and k_norm of
    num_key_value_heads x head_dim weights; Bridge's minimax_m2_provider.py FullDimQNorm / FullDimKNorm). No
    biases, SwiGLU, untied embeddings."""
    gqa(r, m)
    m["qk_layernorm"] = True
    m["qk_layernorm_full_dim"] = True
    m["pre_layernorm"] = False
    m["post_layernorm"] = True


def map_exaone4(r: Reader, m: dict) -> None:
    """EXAONE 4.0 (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/exaone/exaone4/exaone4_bridge.py
    ``provider_bridge``, exaone4_provider.py ``exaone4_layer_spec``): OLMo 2's norm placement (no norm before
    attention or the MLP: pre_layernorm false; an RMSNorm after the output projection and one after down_proj, the
    spec's TERowParallelLinearLayerNorm: post_layernorm) with per-head q/k RMSNorms of head_dim (qk_layernorm, as
    Hugging Face's Exaone4Attention q_norm / k_norm), GQA without biases, SwiGLU, untied embeddings unless
    tie_word_embeddings (EXAONE-4.0-1.2B ties them). The sliding-window layers (sliding_window,
    sliding_window_pattern, layer_types) and the llama3 RoPE scaling change no tensor's size."""
    gqa(r, m)
    m["qk_layernorm"] = True
    m["pre_layernorm"] = False
    m["post_layernorm"] = True


def map_exaone4_5(r: Reader, m: dict) -> None:
    """EXAONE 4.5's language model (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/exaone/exaone45/
    exaone45_bridge.py ``provider_bridge``, exaone45_provider.py ``exaone_45_mtp_block_spec``): EXAONE 4.0's layers
    (:func:`map_exaone4`) and num_nextn_predict_layers MTP layers of the same dense layer spec (Megatron-Core's
    ``get_gpt_mtp_block_spec``), one repeated at every depth with mtp_share_layers (mtp_use_repeated_layer)."""
    map_exaone4(r, m)
    depths = r.int("num_nextn_predict_layers", 0)
    if depths:
        m["mtp_num_layers"] = depths
        if r.flag("mtp_share_layers", False):
            m["mtp_use_repeated_layer"] = True


def map_nemotron(r: Reader, m: dict) -> None:
    """Nemotron-4 and Minitron (NemotronForCausalLM; Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/nemotron/nemotron_bridge.py ``provider_bridge``, ``mapping_registry``): GQA with
    head_dim-wide heads (Minitron-8B: 48 x 128 from h 4096), a LayerNorm with weight and bias before attention and
    before the MLP and as the final norm (Hugging Face's NemotronLayerNorm1P; the bridge's layernorm_zero_centered_gamma
    stores gamma - 1, the same tensors), a non-gated MLP up_proj h x f, squared ReLU (hidden_act relu2:
    squared_relu), down_proj f x h, no biases unless attention_bias and mlp_bias are both true (then
    add_bias_linear, exact), untied embeddings unless tie_word_embeddings. norm_eps is the norm's epsilon;
    partial_rotary_factor (rotary_percent) and RoPE parameters change no tensor's size. kv_channels, which some
    NeMo-exported files carry and Hugging Face's NemotronConfig ignores, must agree with the head width it uses
    (head_dim, else hidden_size / num_attention_heads). Bridge marks this bridge deprecated (to be removed in 0.7.0)."""
    act = r.name("hidden_act", "relu2", ("relu2",))
    if act != "relu2":
        raise UnsupportedError(f"config.json:hidden_act {show(act)} for nemotron: only Nemotron-4's squared ReLU "
                               "(relu2) is mapped")
    m["activation_func"], m["gated_linear_unit"] = "squared_relu", False
    m["normalization"] = "LayerNorm"
    m["layernorm_epsilon"] = r.number("norm_eps", 1e-5)
    gqa(r, m)
    kv = r.int("kv_channels", required=False)
    width = m.get("kv_channels", m["hidden_size"] // m["num_attention_heads"])
    if kv is not None and kv != width:
        raise ConfigError(Problem("config.json:kv_channels", kv, f"must equal the head width Hugging Face's "
                                  f"NemotronConfig uses (head_dim, else hidden_size / num_attention_heads = {width})"))
