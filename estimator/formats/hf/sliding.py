"""MoE families whose layers mix sliding-window and global attention of different shapes: MiMo-V2-Flash
(its own key/value heads and sinks per kind, value heads narrower than query/key heads) and Step 3.5 Flash
(more query heads in the sliding-window layers than in the global ones, a gated attention output)."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .reader import Reader, layer_flags, pattern_value, refuse_true


#: The sliding-window layers' shape Megatron-Bridge's Step 3.5 bridge starts from, and the keys of
#: attention_other_setting that override it (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/stepfun/
#: step35_bridge.py ``provider_bridge``, sliding_attention_setting).
_STEP35_SLIDING = {"num_attention_heads": 96, "num_attention_groups": 8, "head_dim": 128}
_STEP35_LAYER_TYPES = ("full_attention", "sliding_attention")


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
    swa = layer_flags(r, "hybrid_layer_pattern", L)
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
    moe = layer_flags(r, "moe_layer_freq", L)
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
