"""Hybrid layer stacks: Qwen3-Next and Qwen3.5 (gated delta net with gated attention), Nemotron-H / Nemotron 3
(Mamba-2 with attention, MLP and MoE layers, by hybrid_override_pattern or transformers 5's layer list), pure
Mamba-2 (every layer a Mamba-2 mixer) and Falcon-H1 (a Mamba-2 mixer beside attention in every layer)."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .llama import gqa, moe_experts
from .reader import Reader, refuse_true


#: Nemotron-H's layer list (transformers 5's NemotronHConfig: layers_block_type, mtp_layers_block_type, one name per
#: layer, num_hidden_layers derived from its length) as the symbols of hybrid_override_pattern. huggingface/
#: transformers @ 13923c6 : src/transformers/models/nemotron_h/configuration_nemotron_h.py (_list_to_pattern) names
#: them linear_attention, full_attention, moe, mlp; the checkpoints' config.json files write mamba and attention.
_BLOCK_SYMBOL = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "moe": "E",
                 "mlp": "-"}


def map_qwen3_next(r: Reader, m: dict) -> None:
    """Qwen3-Next (Megatron-Bridge qwen3_next_bridge): gated delta net layers with a full gated-attention layer every
    full_attention_interval layers (experimental_attention_variant gdn, linear_attention_freq), per-head q/k norms,
    the attention output gate, and Qwen MoE layers with a gated shared expert. The checkpoint's MTP layer
    (mtp.* tensors) is not in config.json and Hugging Face does not load it; it is left out here too."""
    gqa(r, m)
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
    moe_experts(r, m)


def map_qwen3_5(r: Reader, m: dict) -> None:
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
    refuse_true(r, "attention_bias", "mlp_bias", why="Qwen3.5's projections have no biases")
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
        moe_experts(r, m)
        m["moe_router_load_balancing_type"] = "global_aux_loss"
        coeff = hf.get("router_aux_loss_coef", 1e-3)
        if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not 0 <= coeff < 1e6:
            raise ConfigError(Problem("config.json:router_aux_loss_coef", coeff, "must be a non-negative number"))
        if coeff:
            m["moe_aux_loss_coeff"] = float(coeff)
    mtp = r.int("mtp_num_hidden_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp


_RELU2 = {"relu2": ("squared_relu", False)}


def _block_pattern(hf: dict, key: str) -> str:
    names = hf[key]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n in _BLOCK_SYMBOL for n in names):
        raise ConfigError(Problem(f"config.json:{key}", show(names), "must be a non-empty list of layer kinds, each "
                                  f"one of {', '.join(sorted(_BLOCK_SYMBOL))}"))
    return "".join(_BLOCK_SYMBOL[n] for n in names)


def nemotron_block_types(hf: dict) -> dict:
    """A copy of a Nemotron-H config.json whose layers_block_type / mtp_layers_block_type (transformers 5's spelling,
    no num_hidden_layers needed) are stated as hybrid_override_pattern / mtp_hybrid_override_pattern and
    num_hidden_layers, which :func:`map_nemotron_h` reads. A config.json that states both spellings must agree."""
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


def map_nemotron_h(r: Reader, m: dict) -> None:
    """Nemotron-H / Nemotron 3 (Megatron-Bridge nemotron_h_bridge, HybridModel): hybrid_override_pattern is the
    layer pattern (M Mamba-2, * attention, - MLP, E MoE; transformers 5's layers_block_type list is read as it, see
    :func:`nemotron_block_types`); mtp_hybrid_override_pattern repeated
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
    from ...config.hybrid_pattern import parse, pattern_problems
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
        refuse_true(r, key, why=f"{why} are not modelled (Megatron-Core's MambaMixer has none)"
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


def mamba2_attention_heads(hf: dict) -> dict:
    """A Mamba2Config states no attention heads, which Megatron-Core's TransformerConfig needs though no layer
    attends: a copy with num_attention_heads = num_heads (sizing nothing in an all-Mamba model)."""
    if "num_attention_heads" in hf:
        return hf
    heads = hf.get("num_heads")       # a bad num_heads is reported by map_mamba2, under its own name
    ok = type(heads) is int and 1 <= heads <= Reader.bound("num_heads")
    return {**hf, "num_attention_heads": heads if ok else 1}


def map_mamba2(r: Reader, m: dict) -> None:
    """Pure Mamba-2 (Hugging Face Mamba2Config: mistralai/Mamba-Codestral-7B, the transformers ports of
    state-spaces/mamba2-*) as Megatron-Core's HybridModel builds it with every layer a Mamba-2 mixer
    (hybrid_layer_pattern all M; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/mamba/mamba_provider.py is
    HybridModelProvider under its old name, with no Hugging Face bridge of its own): num_heads heads of head_dim,
    state_size, n_groups, Megatron-Core's MambaMixer with its gated RMSNorm (rms_norm must be true), the convolution
    bias and width 4, no projection biases; one RMSNorm per layer (fused into in_proj) and the final one; tied
    embeddings unless tie_word_embeddings is false; no position embedding and no MLP. residual_in_fp32 has no
    Megatron-Core counterpart (Megatron-LM @ d98e8a64 has none: the residual stream stays in the training dtype),
    so it changes no tensor of the Megatron model; norm_before_gate orders the gate and the norm (Megatron-Core
    gates first) without changing a tensor's size; the time-step ranges, chunk_size and rescale_prenorm_residual
    are initialisation and kernel settings. intermediate_size, where given, is the inner width."""
    hf, h = r.hf, m["hidden_size"]
    L = m["num_layers"]
    refuse_true(r, "use_bias", why="biases on the Mamba projections are not modelled (Megatron-Core's MambaMixer "
                                   "has none)")
    if not r.flag("use_conv_bias", True):
        raise UnsupportedError("config.json:use_conv_bias = false for mamba2: Megatron-Core's MambaMixer always has a "
                               "convolution bias")
    if not r.flag("rms_norm", True):
        raise UnsupportedError("config.json:rms_norm = false for mamba2: only the gated RMSNorm Megatron-Core's "
                               "MambaMixer builds by default (rmsnorm true) is mapped")
    if r.int("conv_kernel", 4) != 4:
        raise UnsupportedError(f"config.json:conv_kernel {hf.get('conv_kernel')} for mamba2: Megatron-Core's "
                               "MambaMixer fixes the convolution width at 4")
    if r.name("hidden_act", "silu", ("silu",)) not in ("silu", "swish"):
        raise UnsupportedError(f"config.json:hidden_act {show(hf.get('hidden_act'))} for mamba2: MambaMixer uses silu")
    m["hybrid_layer_pattern"] = "M" * L
    m["layernorm_epsilon"] = r.number("layer_norm_epsilon", 1e-5)
    m["position_embedding_type"] = "none"
    m["mamba_state_dim"] = r.int("state_size")
    m["mamba_head_dim"] = r.int("head_dim")
    m["mamba_num_groups"] = r.int("n_groups", 1)
    heads, expand = r.int("num_heads"), r.int("expand", 2)
    if expand < 1:
        raise ConfigError(Problem("config.json:expand", expand, "must be >= 1 (the inner width is expand x "
                                  "hidden_size)"))
    width = expand * h
    if heads * m["mamba_head_dim"] != width:
        raise ConfigError(Problem("config.json:num_heads", heads, f"times head_dim ({m['mamba_head_dim']}) must "
                                  f"equal expand x hidden_size ({expand} x {h} = {width}), the mixer's inner width"))
    if heads % m["mamba_num_groups"]:
        raise ConfigError(Problem("config.json:n_groups", m["mamba_num_groups"], f"must divide num_heads ({heads})"))
    inner = r.int("intermediate_size", width)
    if inner != width:
        raise ConfigError(Problem("config.json:intermediate_size", inner, f"must equal expand x hidden_size ({width}), "
                                  "the mixer's inner width"))
    m["mamba_num_heads"] = heads
    m["untie_embeddings_and_output_weights"] = not r.flag("tie_word_embeddings", True)


def map_falcon_h1(r: Reader, m: dict) -> None:
    """Falcon-H1 (tiiuae/Falcon-H1-*; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/falcon_h1/
    falconh1_bridge.py ``provider_bridge``, modeling_falconh1/falconh1_layer.py ``FalconH1Layer``): every layer runs
    a Mamba-2 mixer and GQA self-attention side by side on one RMSNorm and adds them (parallel_mamba_attention),
    then a SwiGLU MLP of intermediate_size. The mixer: mamba_n_heads heads of mamba_d_head (\"auto\" or absent:
    mamba_d_ssm / mamba_n_heads), mamba_d_ssm the inner width (absent: mamba_expand x hidden_size), mamba_n_groups,
    mamba_d_state, the convolution of width 4 with its bias, the gated RMSNorm only with mamba_rms_norm
    (mamba_gated_norm). The multipliers (embedding, lm_head, key, attention and SSM in/out, mlp_multipliers,
    ssm_multipliers) scale activations, not weights; the MLP's are applied in eager code (see
    :mod:`estimator.model.layers.mlp`). Biases (projectors_bias, mamba_proj_bias, attention_bias, mlp_bias) are
    refused: the bridge maps projectors_bias to add_bias_linear, which Falcon-H1's mixer does not follow. Bridge's
    provider also sets attention_backend unfused (an s x s score matrix per head): that is a training setting
    (training.attention_backend), left to the run."""
    hf, h = r.hf, m["hidden_size"]
    refuse_true(r, "projectors_bias", "mamba_proj_bias", "attention_bias", "mlp_bias",
                why="biases on Falcon-H1's projections are not modelled (its released checkpoints have none)")
    if not r.flag("mamba_conv_bias", True):
        raise UnsupportedError("config.json:mamba_conv_bias = false for falcon_h1: Megatron-Core's MambaMixer always "
                               "has a convolution bias")
    if r.int("mamba_d_conv", 4) != 4:
        raise UnsupportedError(f"config.json:mamba_d_conv {hf.get('mamba_d_conv')} for falcon_h1: the estimate's "
                               "Mamba-2 mixer has Megatron-Core's default convolution width 4")
    if r.int("mamba_chunk_size", 128) != 128:
        raise UnsupportedError(f"config.json:mamba_chunk_size {hf.get('mamba_chunk_size')} for falcon_h1: the "
                               "estimate's scan working set is MambaMixer's default chunks of 128 tokens")
    if hf.get("attn_layer_indices") is not None:
        raise UnsupportedError(f"config.json:attn_layer_indices {show(hf['attn_layer_indices'])} for falcon_h1: only "
                               "attention in every layer (null) is mapped, as Megatron-Bridge's bridge builds it")
    if not r.flag("mamba_use_mlp", True):
        raise UnsupportedError("config.json:mamba_use_mlp = false for falcon_h1: Megatron-Bridge's bridge builds the "
                               "MLP in every layer (use_mlp true)")
    gqa(r, m)
    m["parallel_mamba_attention"] = True
    m["mamba_state_dim"] = r.int("mamba_d_state")
    heads, groups = r.int("mamba_n_heads"), r.int("mamba_n_groups", 1)
    expand = r.int("mamba_expand", 2)
    width = r.int("mamba_d_ssm", required=False)
    if width is None:
        width = expand * h
    head_dim = hf.get("mamba_d_head", "auto")
    head_dim = width // heads if head_dim == "auto" and heads else r.int("mamba_d_head")
    if heads * head_dim != width:
        raise ConfigError(Problem("config.json:mamba_d_head", hf.get("mamba_d_head"), f"times mamba_n_heads ({heads}) "
                                  f"must equal the inner width mamba_d_ssm ({width})"))
    if heads % groups:
        raise ConfigError(Problem("config.json:mamba_n_groups", groups, f"must divide mamba_n_heads ({heads})"))
    m["mamba_head_dim"], m["mamba_num_heads"], m["mamba_num_groups"] = head_dim, heads, groups
    if not r.flag("mamba_rms_norm", False):
        m["mamba_gated_norm"] = False
