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
    out += _vision_rules(cfg)
    if m.moe_latent_size is not None and m.num_experts is None:
        add("moe_latent_size", m.moe_latent_size, "applies only to MoE models (set num_experts)")
    if m.post_layernorm and (m.num_experts is not None or m.multi_latent_attention or pattern is not None
                             or m.experimental_attention_variant is not None):
        add("post_layernorm", True, "modelled for the dense attention + MLP layers of Megatron-Bridge's Gemma "
            "spec only (not with MoE, MLA, gated delta nets or a hybrid pattern)")
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


_DSA_FIELDS = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk")


_VISION_DIMS = ("vision_hidden_size", "vision_num_attention_heads", "vision_ffn_hidden_size")


def _vision_rules(cfg) -> list[Problem]:
    """The vision tower (estimator/model/vision.py, estimator/memory/vision.py): its dimensions come together; the
    language model's tensor-parallel size splits its heads, its MLP and its merger (Megatron-Core's
    ColumnParallelLinear divides the output width by it: Megatron-Bridge @ 067f987d : modelling_qwen3_vl/
    transformer_config.py ``get_vision_model_config`` copies tensor_model_parallel_size); images need a tower, a
    resolution that whole merged patches tile, and their tokens fit in the sequence."""
    m, tr, t = cfg.model, cfg.training, cfg.parallelism.tensor_model_parallel_size
    out: list[Problem] = []
    if m.vision_num_layers is None:
        for name in _VISION_DIMS + ("vision_out_hidden_size",):
            if getattr(m, name) is not None:
                out.append(Problem("model." + name, getattr(m, name), "applies only with a vision tower "
                                   "(set model.vision_num_layers)"))
        if tr.images_per_sample:
            out.append(Problem("training.images_per_sample", tr.images_per_sample, "needs a model with a vision "
                               "tower (model.vision_num_layers); 0 for a text-only model"))
        for name in ("freeze_vision_model", "freeze_vision_projection"):
            if getattr(tr, name):
                out.append(Problem("training." + name, True, "needs a model with a vision tower "
                                   "(model.vision_num_layers)"))
        return out
    missing = [n for n in _VISION_DIMS if getattr(m, n) is None]
    for name in missing:
        out.append(Problem("model." + name, None, "is required with model.vision_num_layers (the vision tower)"))
    if missing:
        return out
    hv, heads, fv = m.vision_hidden_size, m.vision_num_attention_heads, m.vision_ffn_hidden_size
    if hv % heads:
        out.append(Problem("model.vision_hidden_size", hv, f"must be a multiple of vision_num_attention_heads "
                           f"({heads}): the tower has no head width of its own"))
    wide = m.vision_spatial_merge_size ** 2 * hv
    for name, n in (("vision_num_attention_heads", heads), ("vision_ffn_hidden_size", fv)):
        if n % t:
            out.append(Problem("model." + name, n, f"must be a multiple of tensor_model_parallel_size ({t}): the "
                               "vision tower is split over the language model's tensor-parallel ranks"))
    if wide % t:
        out.append(Problem("model.vision_hidden_size", hv, f"x vision_spatial_merge_size^2 ({wide}, the patch "
                           f"merger's width) must be a multiple of tensor_model_parallel_size ({t})"))
    side = m.vision_patch_size * m.vision_spatial_merge_size
    if tr.image_resolution % side:
        out.append(Problem("training.image_resolution", tr.image_resolution, f"must be a multiple of "
                           f"vision_patch_size x vision_spatial_merge_size ({side} pixels): the processor resizes "
                           "each image to whole merged patches"))
    elif tr.images_per_sample:
        per = (tr.image_resolution // m.vision_patch_size) ** 2 // m.vision_spatial_merge_size ** 2
        s = tr.seq_length or m.max_position_embeddings
        if s is not None and tr.images_per_sample * per > s:
            out.append(Problem("training.images_per_sample", tr.images_per_sample,
                               f"{tr.images_per_sample} images x {per} tokens each ({tr.image_resolution}-pixel "
                               f"side) = {tr.images_per_sample * per:,} tokens must fit in the sequence ({s:,} "
                               "tokens), which holds the image tokens"))
    return out


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
