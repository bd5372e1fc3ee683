"""Megatron-Core's rules for the layer kinds beyond a plain GPT layer: hybrid (Mamba) models, gated delta nets,
latent MoE, gated attention.

Each rule is checked where Megatron-Core checks it (cited per rule) and reported as a
:class:`~estimator.config.errors.Problem` naming the field, the value and the rule; :func:`estimator.config.rules.validate`
collects them with the other cross-field rules. The pipeline split of a hybrid pattern is checked by
:func:`estimator.config.hybrid_pattern.split_problems` (through :func:`estimator.config.rules.layer_split_problems`).
"""

from __future__ import annotations

from .errors import Problem
from .hybrid_pattern import parse, pattern_problems

__all__ = ["model_problems"]


def model_problems(cfg) -> list[Problem]:
    """Every rule below that the configuration breaks."""
    m, par = cfg.model, cfg.parallelism
    t, cp = par.tensor_model_parallel_size, par.context_parallel_size
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem("model." + field, value, msg))

    pattern = m.hybrid_layer_pattern
    symbols = ""
    if pattern is not None and not pattern_problems(pattern):
        p = parse(pattern)
        symbols = p.layers + p.mtp
        # arguments.py and hybrid_layer_allocation.py: the pattern decides every layer's kind.
        if m.num_experts is not None and "E" not in symbols:
            add("num_experts", m.num_experts, "a hybrid model has MoE layers only where its pattern has E")
        if m.num_experts is None and "E" in symbols:
            add("hybrid_layer_pattern", pattern, "E (MoE) layers need num_experts")
        if m.moe_layer_freq not in (1, None):
            add("moe_layer_freq", m.moe_layer_freq if isinstance(m.moe_layer_freq, int) else list(m.moe_layer_freq),
                "does not apply to a hybrid model (its pattern's E symbols are the MoE layers)")
        if m.multi_latent_attention:
            add("multi_latent_attention", True, "not modelled in a hybrid model (its '+' layers)")
        for name in ("experimental_attention_variant", "linear_attention_freq"):
            if getattr(m, name) is not None:
                add(name, getattr(m, name), "does not apply to a hybrid model: its G symbols are the gated delta "
                    "net layers")
    if "M" in symbols:
        # mamba_mixer.py MambaMixer.__init__: heads and groups are split over the tensor-parallel ranks.
        heads = m.mamba_num_heads
        if heads is None:
            if (2 * m.hidden_size) % m.mamba_head_dim:
                add("mamba_head_dim", m.mamba_head_dim, f"must divide the inner width 2 x hidden_size "
                    f"({2 * m.hidden_size}) when mamba_num_heads is null (MambaMixer)")
            heads = 2 * m.hidden_size // m.mamba_head_dim
        if heads % t:
            add("mamba_num_heads", heads, f"Mamba heads ({heads}) must be divisible by tensor_model_parallel_size "
                f"({t}) (MambaMixer)")
        if m.mamba_num_groups % t:
            add("mamba_num_groups", m.mamba_num_groups, f"must be divisible by tensor_model_parallel_size ({t}) "
                "(MambaMixer)")
        if heads % m.mamba_num_groups:
            add("mamba_num_groups", m.mamba_num_groups, f"must divide the Mamba heads ({heads}) (MambaMixer)")
        if cp > 1 and (heads % (t * cp) or m.mamba_num_groups % (t * cp) and (t * cp) % m.mamba_num_groups):
            add("mamba_num_heads", heads, f"Mamba heads ({heads}) and groups ({m.mamba_num_groups}) must split "
                f"over tensor x context parallel ranks ({t * cp}) (MambaContextParallel)")
    variant = m.experimental_attention_variant
    dsa = variant == "dsa"
    gdn = (variant is not None and not dsa) or "G" in symbols
    if pattern is None:
        if variant is not None and not dsa and m.linear_attention_freq is None:
            add("linear_attention_freq", None, "is required with experimental_attention_variant gdn "
                "(TransformerConfig: which layers are linear attention)")
        if m.linear_attention_freq is not None and (variant is None or dsa):
            add("linear_attention_freq", m.linear_attention_freq if isinstance(m.linear_attention_freq, int)
                else list(m.linear_attention_freq), "applies only with experimental_attention_variant: gdn")
        if isinstance(m.linear_attention_freq, tuple) and len(m.linear_attention_freq) != m.num_layers:
            add("linear_attention_freq", list(m.linear_attention_freq), f"a pattern list must have num_layers "
                f"({m.num_layers}) entries, got {len(m.linear_attention_freq)}")
    if gdn:
        # transformer_config.py __post_init__ (gated delta net checks).
        nk, nv = m.linear_num_key_heads, m.linear_num_value_heads
        if nv % nk:
            add("linear_num_value_heads", nv, f"must be a multiple of linear_num_key_heads ({nk})")
        for name, n in (("linear_num_key_heads", nk), ("linear_num_value_heads", nv)):
            if n % (t * cp):
                add(name, n, f"must be a multiple of tensor x context parallel size ({t * cp})")
    out += _dsa_rules(cfg, dsa and pattern is None)
    if m.moe_latent_size is not None and m.num_experts is None:
        add("moe_latent_size", m.moe_latent_size, "applies only to MoE models (set num_experts)")
    if m.post_layernorm and (m.multi_latent_attention or pattern is not None
                             or m.experimental_attention_variant is not None):
        add("post_layernorm", True, "modelled for the attention + MLP / MoE layers of Megatron-Bridge's Gemma "
            "specs only (not with MLA, gated delta nets or a hybrid pattern)")
    if m.post_layernorm and m.num_experts is not None:
        # Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma/gemma4_provider.py
        # _validate_gemma4_moe_orchestration: Gemma 4's MoE forward takes separately normalised router, shared and
        # routed inputs, which these modes bypass.
        tr = cfg.training
        if tr.recompute_granularity == "selective" and "layernorm" in (tr.recompute_modules or ()):
            out.append(Problem("training.recompute_modules", list(tr.recompute_modules), "layernorm recompute is "
                               "refused by Megatron-Bridge for Gemma 4's MoE block (post_layernorm with MoE)"))
        if tr.cuda_graph_impl != "none":
            out.append(Problem("training.cuda_graph_impl", tr.cuda_graph_impl, "CUDA graphs are refused by "
                               "Megatron-Bridge for Gemma 4's MoE block (post_layernorm with MoE)"))
    out += _global_rules(m, t, pattern)
    out += _hetero_rules(m, t, pattern)
    if not m.pre_layernorm and not m.post_layernorm:
        add("pre_layernorm", False, "only OLMo 2's placement is modelled without the pre-norms: set "
            "post_layernorm true (norms after attention and after the MLP)")
    if m.qk_layernorm_full_dim and (not m.qk_layernorm or m.multi_latent_attention or m.normalization != "RMSNorm"):
        add("qk_layernorm_full_dim", True, "needs qk_layernorm true with self-attention (not multi-latent "
            "attention) and normalization RMSNorm: Megatron-Bridge's full-width q/k norm is an RMSNorm")
    if m.qk_l2_norm and (m.qk_layernorm or m.multi_latent_attention):
        add("qk_l2_norm", True, "Megatron-Core uses either the L2 norm or qk_layernorm on queries and keys, and "
            "not with multi-latent attention")
    if m.attention_output_gate and m.multi_latent_attention:
        add("attention_output_gate", True, "the output gate exists only in SelfAttention, not with multi-latent "
            "attention")
    if m.softmax_type != "vanilla" and m.multi_latent_attention:
        add("softmax_type", m.softmax_type, "modelled only for self-attention, not multi-latent attention")
    if m.num_experts is not None:
        _router_rules(m, add)
    return out


def _global_rules(m, t: int, pattern) -> list[Problem]:
    """Gemma 4's global-attention layers (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma/
    modeling_gemma4.py ``Gemma4SelfAttention``: a SelfAttention whose kv_channels and num_query_groups are the
    global ones): a pattern of num_layers entries, self-attention only, key/value heads that divide the query
    heads and split over the tensor-parallel ranks."""
    out: list[Problem] = []
    freq = m.global_attention_freq
    if freq is None:
        for name in ("global_kv_channels", "num_global_query_groups"):
            if getattr(m, name) is not None:
                out.append(Problem("model." + name, getattr(m, name), "applies only with global_attention_freq "
                                   "(the global-attention layers)"))
        return out
    if isinstance(freq, tuple) and len(freq) != m.num_layers:
        out.append(Problem("model.global_attention_freq", list(freq), f"a pattern list must have num_layers "
                           f"({m.num_layers}) entries, got {len(freq)}"))
    if (m.multi_latent_attention or pattern is not None or m.experimental_attention_variant is not None
            or m.heterogeneous_layers_config is not None):
        out.append(Problem("model.global_attention_freq", freq if isinstance(freq, int) else list(freq),
                           "modelled for self-attention layers only (not with MLA, DSA, gated delta nets, a hybrid "
                           "pattern or heterogeneous layers)"))
    g = m.num_global_query_groups
    if g is not None:
        if m.num_attention_heads % g:
            out.append(Problem("model.num_global_query_groups", g, f"num_attention_heads ({m.num_attention_heads}) "
                               f"must be divisible by num_global_query_groups ({g})"))
        if g % t:
            out.append(Problem("model.num_global_query_groups", g, f"num_global_query_groups ({g}) must be "
                               f"divisible by tensor_model_parallel_size ({t})"))
    return out


def _hetero_rules(m, t: int, pattern) -> list[Problem]:
    """Heterogeneous layers (:mod:`estimator.config.heterogeneous`): readable blocks, one per layer, for a dense GPT
    model (Megatron-LM @ d98e8a64 : megatron/core/models/gpt/heterogeneous/heterogeneous_layer_specs.py builds
    self-attention, linear replacements and dense MLPs only); each block's key/value heads split over the
    tensor-parallel ranks."""
    text = m.heterogeneous_layers_config
    if text is None:
        return []
    from .heterogeneous import HeteroError, parse
    from .schema import MAX_FFN
    field = "model.heterogeneous_layers_config"
    shown = text if len(text) <= 80 else text[:77] + "..."
    try:
        blocks = parse(text, m.num_layers, m.num_attention_heads, m.hidden_size, MAX_FFN)
    except HeteroError as exc:
        return [Problem(field, shown, str(exc))]
    out: list[Problem] = []
    if (m.num_experts is not None or m.multi_latent_attention or pattern is not None
            or m.experimental_attention_variant is not None or m.post_layernorm):
        out.append(Problem(field, shown, "Megatron-Core's heterogeneous layer spec builds self-attention, linear "
                           "replacements and dense MLPs only (not with MoE, MLA, DSA, gated delta nets, a hybrid "
                           "pattern or post_layernorm)"))
    for i, b in enumerate(blocks):
        if b.groups is not None and b.groups % t:
            out.append(Problem(field, shown, f"block {i}: {b.groups} key/value heads must be divisible by "
                               f"tensor_model_parallel_size ({t})"))
            break
    return out


_DSA_FIELDS = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk")


def _dsa_rules(cfg, dsa: bool) -> list[Problem]:
    """DeepSeek sparse attention (Megatron-LM @ d98e8a64): ``experimental_attention_variant_module_specs.py``
    ``get_dsa_module_spec_for_backend`` asserts multi-latent attention; ``transformer_config.py`` ``__post_init__``
    requires add_bias_linear false and, with context parallelism, cp_comm_type allgather;
    ``absorbed_mla.py`` ``AbsorbedMLASelfAttention.__init__`` requires sequence parallelism with TP > 1 and no
    FP8/FP4 with the mla_up_proj recompute; the indexer needs its heads, head width (at least the rotary width it
    splits off) and top-k. FP8 is not modelled (nor cross-layer top-k sharing, which has no field: the importers
    refuse --dsa-indexer-topk-freq above 1)."""
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem(field if "." in field else "model." + field, value, msg))

    if not dsa:
        for name in _DSA_FIELDS + ("dsa_indexer_loss_coeff",):
            if getattr(m, name) is not None:
                add(name, getattr(m, name), "applies only with experimental_attention_variant: dsa")
        return out
    if not m.multi_latent_attention:
        add("experimental_attention_variant", "dsa", "needs multi_latent_attention true (Megatron-Core's DSA is "
            "built on absorbed multi-latent attention only)")
    for name in _DSA_FIELDS:
        if getattr(m, name) is None:
            add(name, None, "is required with experimental_attention_variant dsa (the indexer's shape)")
    rope = m.qk_pos_emb_head_dim or 64
    if m.dsa_indexer_head_dim is not None and m.dsa_indexer_head_dim < rope:
        add("dsa_indexer_head_dim", m.dsa_indexer_head_dim, f"must be at least qk_pos_emb_head_dim ({rope}): the "
            "indexer applies RoPE to that many channels of each head")
    if m.add_bias_linear:
        add("add_bias_linear", True, "must be false with DeepSeek sparse attention (AbsorbedMLASelfAttention)")
    if par.tensor_model_parallel_size > 1 and not tr.sequence_parallel:
        add("training.sequence_parallel", False, "must be true with DeepSeek sparse attention and "
            f"tensor_model_parallel_size {par.tensor_model_parallel_size} (AbsorbedMLASelfAttention)")
    if par.context_parallel_size > 1 and par.cp_comm_type != "allgather":
        add("parallelism.cp_comm_type", par.cp_comm_type, "must be allgather with DeepSeek sparse attention and "
            "context parallelism (DSAttention)")
    if cfg.precision.fp8:
        add("precision.fp8", cfg.precision.fp8, "is not modelled with DeepSeek sparse attention")
    return out


def _router_rules(m, add) -> None:
    """TopKRouter's rules (Megatron-LM @ d98e8a64 : megatron/core/transformer/transformer_config.py
    ``__post_init__``, megatron/core/transformer/moe/router.py; TransformerEngine @ d0067d0d :
    transformer_engine/pytorch/router.py)."""
    groups, gk = m.moe_router_num_groups, m.moe_router_group_topk
    if gk is not None and groups is None:
        add("moe_router_group_topk", gk, "group-limited routing needs moe_router_num_groups")
    if groups is not None and m.num_experts % groups:
        add("moe_router_num_groups", groups, f"num_experts ({m.num_experts}) must be divisible by "
            f"moe_router_num_groups ({groups})")
    if gk is not None and groups is not None and gk > groups:
        add("moe_router_group_topk", gk, f"must be <= moe_router_num_groups ({groups})")
    if m.moe_router_fusion and m.moe_router_dtype == "fp64":
        add("moe_router_fusion", True, "Transformer Engine's fused router does not support moe_router_dtype fp64")
    if m.moe_router_load_balancing_type == "sinkhorn" and m.moe_aux_loss_coeff:
        add("moe_aux_loss_coeff", m.moe_aux_loss_coeff, "Sinkhorn routing does not support an aux loss (must be 0)")
