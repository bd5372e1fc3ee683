"""The per-family model rules: Gemma 4 (its MoE block and global-attention layers), MiMo-V2-Flash (value heads of
their own width), K-EXAONE (dense MTP layers), Falcon-H1 (a Mamba-2 mixer beside attention) and Kimi K3 (Kimi
delta attention, AttnRes, SiTU), as Megatron-Bridge builds them (cited per rule).

Each function returns the :class:`~estimator.config.errors.Problem` list of its family;
:func:`estimator.config.rules.model.model_problems` calls them in a fixed order.
"""

from __future__ import annotations

from ..errors import Problem
from .attention import kv_split_problems

__all__ = ["falcon_h1_problems", "gemma4_moe_problems", "global_attention_problems", "k_exaone_problems",
           "kimi_problems", "mimo_problems", "te_full_layer_problems"]


def gemma4_moe_problems(cfg) -> list[Problem]:
    """Gemma 4's MoE block (post_layernorm with MoE): the modes Megatron-Bridge refuses for it."""
    m, out = cfg.model, []
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
    return out


def global_attention_problems(m, t: int, pattern) -> list[Problem]:
    """Gemma 4's global-attention layers (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma/
    modeling_gemma4.py ``Gemma4SelfAttention``: a SelfAttention whose kv_channels and num_query_groups are the
    global ones; Step 3.5 Flash's also take their own query heads, Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/stepfun/step35_provider.py ``Step35DecoderLayer``): a pattern of num_layers entries,
    self-attention only, key/value heads that divide the query heads, both split over the tensor-parallel
    ranks."""
    out: list[Problem] = []
    freq = m.global_attention_freq
    if freq is None:
        for name in ("global_kv_channels", "num_global_query_groups", "num_global_attention_heads"):
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
    a = m.num_global_attention_heads
    if a is not None and a % t:
        out.append(Problem("model.num_global_attention_heads", a, f"num_global_attention_heads ({a}) must be "
                           f"divisible by tensor_model_parallel_size ({t})"))
    heads = a or m.num_attention_heads
    g = m.num_global_query_groups
    if a is not None and g is None and m.num_query_groups is not None and a % m.num_query_groups:
        out.append(Problem("model.num_global_attention_heads", a, f"num_global_attention_heads ({a}) must be "
                           f"divisible by num_query_groups ({m.num_query_groups}), the global layers' key/value "
                           "heads unless num_global_query_groups is set"))
    if g is not None:
        if heads % g:
            name = "num_global_attention_heads" if a else "num_attention_heads"
            out.append(Problem("model.num_global_query_groups", g, f"{name} ({heads}) "
                               f"must be divisible by num_global_query_groups ({g})"))
        dh = m.global_kv_channels or m.kv_channels or m.hidden_size // m.num_attention_heads
        width = (heads * (2 if m.attention_output_gate else 1) + g) * dh + g * (m.v_channels or dh)
        out += kv_split_problems("model.num_global_query_groups", g, t, width)
    return out


def mimo_problems(cfg, pattern) -> list[Problem]:
    """MiMo-V2-Flash's attention (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/mimo_v2_flash/): value
    heads of their own width (v_channels) in self-attention built by Transformer Engine, without context
    parallelism (``MiMoV2FlashModelProvider.provide`` asserts context_parallel_size <= 1) or the output gate (whose
    width is the value heads'); a softmax of the global layers' own (global_softmax_type) only with
    global-attention layers."""
    m, out = cfg.model, []
    other = (m.multi_latent_attention or pattern is not None or m.experimental_attention_variant is not None
             or m.heterogeneous_layers_config is not None)
    what = "modelled for self-attention layers only (not with MLA, DSA, gated delta nets, a hybrid pattern or " \
           "heterogeneous layers)"
    if m.v_channels is not None:
        t = cfg.parallelism.tensor_model_parallel_size
        for name in ("num_query_groups", "num_global_query_groups"):
            g = getattr(m, name) or (m.num_attention_heads if name == "num_query_groups" else None)
            if g is not None and g < t:
                out.append(Problem("model." + name, g, f"must be at least tensor_model_parallel_size ({t}) with "
                                   "v_channels: MiMo-V2-Flash's attention splits each rank's own QKV output into "
                                   "its key/value heads, without Megatron-Core's all-gather for fewer heads than "
                                   "ranks (Megatron-Bridge @ 067f987d : mimo_v2_flash/modeling_mimo_v2_flash.py "
                                   "MiMoV2FlashSelfAttention.get_query_key_value_tensors)"))
        if other:
            out.append(Problem("model.v_channels", m.v_channels, what))
        if m.attention_output_gate:
            out.append(Problem("model.v_channels", m.v_channels, "is not modelled with attention_output_gate"))
        if cfg.parallelism.context_parallel_size > 1:
            out.append(Problem("parallelism.context_parallel_size", cfg.parallelism.context_parallel_size,
                               "must be 1 with v_channels: Megatron-Bridge's MiMo-V2-Flash provider asserts "
                               "\"does not support context parallelism yet\""))
        if cfg.training.transformer_impl != "transformer_engine":
            out.append(Problem("training.transformer_impl", cfg.training.transformer_impl, "must be "
                               "transformer_engine with v_channels (MiMo-V2-Flash's attention is a Transformer "
                               "Engine DotProductAttention given k_channels and v_channels)"))
    if m.global_softmax_type is not None and m.global_attention_freq is None:
        out.append(Problem("model.global_softmax_type", m.global_softmax_type, "applies only with "
                           "global_attention_freq (the global-attention layers)"))
    return out


def k_exaone_problems(m) -> list[Problem]:
    """The MTP layers' options: K-EXAONE's dense MTP layers (``mtp_dense_mlp``) only under a GPT model with MTP
    layers, and hidden-state mixing (``mtp_hsm``) only with two MTP depths or more."""
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem("model." + field, value, msg))

    if m.mtp_dense_mlp and (not m.mtp_num_layers or m.hybrid_layer_pattern is not None
                            or m.heterogeneous_layers_config is not None
                            or m.experimental_attention_variant is not None):
        add("mtp_dense_mlp", True, "needs mtp_num_layers > 0 in a GPT model without hybrid_layer_pattern, "
            "heterogeneous_layers_config or an experimental attention variant (K-EXAONE's dense MTP layers)")
    if m.mtp_hsm and m.hybrid_layer_pattern is None and (m.mtp_num_layers or 0) < 2:
        # Megatron-LM @ d98e8a64 : transformer_config.py __post_init__ (a hybrid pattern's MTP depths: hybrid.py)
        add("mtp_hsm", True, f"needs mtp_num_layers >= 2 (got {m.mtp_num_layers}): with one MTP depth there is "
            "nothing to mix (TransformerConfig)")
    return out


def falcon_h1_problems(cfg) -> list[Problem]:
    """Falcon-H1's layers (``parallel_mamba_attention``: a Mamba-2 mixer beside self-attention on one shared
    norm): the model it is modelled in, and the CUDA graphs, virtual pipeline, optimizers and PEFT it is not."""
    m, par = cfg.model, cfg.parallelism
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem("model." + field, value, msg))

    if m.parallel_mamba_attention and (m.hybrid_layer_pattern is not None or m.multi_latent_attention
                                       or m.num_experts or m.experimental_attention_variant is not None
                                       or m.heterogeneous_layers_config is not None or m.mtp_num_layers
                                       or m.global_attention_freq is not None or not m.pre_layernorm
                                       or m.post_layernorm):
        add("parallel_mamba_attention", True, "needs a GPT model of pre-norm self-attention and dense MLPs: no "
            "hybrid_layer_pattern, multi-latent attention, MoE, experimental attention variant, heterogeneous "
            "layers, MTP layers, global attention layers or post-norms, and pre_layernorm true (Falcon-H1's layers "
            "are all alike, one shared norm before the mixers)")
    if m.parallel_mamba_attention and cfg.training.cuda_graph_impl != "none":
        add("parallel_mamba_attention", True, f"is not modelled with CUDA graphs (training.cuda_graph_impl "
            f"{cfg.training.cuda_graph_impl!r}): which parts of a Falcon-H1 layer a graph captures is not known")
    if m.parallel_mamba_attention and (par.virtual_pipeline_model_parallel_size or 1) > 1:
        add("parallel_mamba_attention", True, "does not run with a virtual pipeline (Megatron-Bridge's "
            "FalconH1ModelProvider asserts virtual_pipeline_model_parallel_size is None)")
    if m.parallel_mamba_attention and (cfg.training.optimizer not in ("adam", "sgd") or cfg.training.peft):
        add("parallel_mamba_attention", True, "is modelled with the Adam and SGD optimizers and without PEFT only")
    return out


def kimi_problems(cfg) -> list[Problem]:
    """Kimi K3's layers as Megatron-Bridge @ 067f987d builds them (src/megatron/bridge/models/kimi/kimi_k3_layers.py,
    kimi_k3_spec.py): Kimi delta attention (``experimental_attention_variant: kda``) beside a gated MLA, the AttnRes
    bank, the routed-expert norm and SiTU. The bridge's own refusals (KDA heads and MLA heads split over TP, no
    context parallelism with KDA, no virtual pipeline stages, hidden_dropout 0) and the combinations whose
    activations the estimator does not derive (recomputation, FP8/NVFP4 linear layers, PEFT, activation offloading,
    CUDA graphs, expert-parallel overlap, delayed weight gradients) are refused by name."""
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    t = par.tensor_model_parallel_size
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem(field, value, msg))

    kda = m.experimental_attention_variant == "kda"
    if m.attn_res_block_size is not None and not kda:
        add("model.attn_res_block_size", m.attn_res_block_size, f"{m.attn_res_block_size} needs "
            "experimental_attention_variant kda (Kimi "
            "K3's AttnRes is built only by Megatron-Bridge's KimiK3TransformerLayer)")
    if m.moe_latent_norm and not m.moe_latent_size:
        add("model.moe_latent_norm", True, "true needs moe_latent_size (the norm is over the latent width)")
    if m.activation_func == "situ" and not (kda and m.gated_linear_unit):
        add("model.activation_func", "situ", "situ needs experimental_attention_variant kda and gated_linear_unit "
            "true (SiTU is installed by Megatron-Bridge's Kimi K3 spec on its gated MLPs only)")
    if not kda:
        return out
    if m.hybrid_layer_pattern is not None:
        return out          # model_problems: the variant does not apply to a hybrid model
    if not m.multi_latent_attention:
        add("model.experimental_attention_variant", "kda", "kda needs multi_latent_attention true (Kimi K3's other "
            "layers are multi-latent attention)")
    nk, nv = m.linear_num_key_heads, m.linear_num_value_heads
    if nk != nv:
        add("model.linear_num_value_heads", nv, f"must equal linear_num_key_heads ({nk}) with kda: Kimi delta "
            "attention has one head count")
    if m.linear_key_head_dim != m.linear_value_head_dim:
        add("model.linear_value_head_dim", m.linear_value_head_dim, f"must equal linear_key_head_dim "
            f"({m.linear_key_head_dim}) with kda: Kimi delta attention has one head width")
    if nk % t:
        add("model.linear_num_key_heads", nk, f"KDA heads ({nk}) must be divisible by tensor_model_parallel_size "
            f"({t}) (KimiK3Attention._init_kda)")
    if m.num_attention_heads % t:
        add("model.num_attention_heads", m.num_attention_heads, f"MLA heads must be divisible by "
            f"tensor_model_parallel_size ({t}) (KimiK3Attention._init_mla)")
    if not m.attention_output_gate:
        add("model.attention_output_gate", False, "false: must be true with kda, KimiK3Attention always builds the MLA "
            "output gate (g_proj)")
    if par.context_parallel_size > 1:
        add("parallelism.context_parallel_size", par.context_parallel_size, f"must be 1 with kda, got "
            f"{par.context_parallel_size}: Megatron-Bridge refuses context parallelism for Kimi delta attention")
    if (par.virtual_pipeline_model_parallel_size or 1) > 1:
        add("parallelism.virtual_pipeline_model_parallel_size", par.virtual_pipeline_model_parallel_size,
            f"must be null with kda, got {par.virtual_pipeline_model_parallel_size}: Megatron-Bridge's Kimi K3 spec "
            "refuses virtual pipeline parallelism")
    if m.hidden_dropout:
        add("model.hidden_dropout", m.hidden_dropout, f"must be 0 with kda, got {m.hidden_dropout} "
            "(KimiK3TransformerLayer)")
    if tr.recompute_granularity is not None:
        add("training.recompute_granularity", tr.recompute_granularity, f"{tr.recompute_granularity} is not "
            "modelled with kda: what Kimi K3's "
            "layers keep under recomputation (the AttnRes bank travels beside the checkpointed input) is not "
            "derived; use null")
    if pr.fp8 or pr.fp4:
        add("precision.fp8" if pr.fp8 else "precision.fp4", True, "true is not modelled with kda: which of Kimi K3's "
            "projections save quantized inputs is not derived; use bf16")
    # The features below act on a layer's named tensors (attention's qkv, norm outputs, the MoE layer's schedule
    # nodes), which Kimi K3's own layer does not have in that form: their effect on it is not derived.
    for name, on in (("peft", tr.peft is not None), ("cpu_offloading", tr.cpu_offloading),
                     ("fine_grained_activation_offloading", tr.fine_grained_activation_offloading),
                     ("cuda_graph_impl", tr.cuda_graph_impl != "none"),
                     ("overlap_moe_expert_parallel_comm", tr.overlap_moe_expert_parallel_comm),
                     ("delay_wgrad_compute", tr.delay_wgrad_compute)):
        if on:
            add(f"training.{name}", getattr(tr, name), f"{getattr(tr, name)} is not modelled with kda: what it "
                "keeps or frees of Kimi "
                "K3's layers (Megatron-Bridge's KimiK3TransformerLayer and KimiK3Attention) is not derived")
    return out


def te_full_layer_problems(cfg) -> list[Problem]:
    """``training.transformer_engine_full_layer_spec`` (Megatron-Bridge's ``use_transformer_engine_full_layer_spec``):
    the layer is Transformer Engine's ``TransformerLayer`` as Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/gpt_full_te_layer_autocast_spec.py ``TETransformerLayerAutocast`` builds it. It passes
    hidden and MLP widths, heads, kv_channels, dropouts, TP and sequence parallelism, zero-centred gamma and the TP
    overlap flags, and leaves the rest at Transformer Engine @ d0067d0d transformer_engine/pytorch/transformer.py's
    defaults: LayerNorm, ``gelu``, biases, no GQA (``num_gqa_groups`` None), no MoE. That layer (LayerNormLinear qkv,
    DotProductAttention, Linear proj, LayerNormMLP with the bias-GELU fused) saves what Megatron-Core's TE spec of
    the same model does (module/layernorm_mlp.py saves the input, ln_out, fc1's output and the activation's, mu and
    rsigma, as LayerNormLinear, bias_gelu and fc2's Linear do) and holds the same parameters, so the estimate is that
    spec's. Refused by name: a model of another shape (Bridge would build a different layer), selective recompute
    (``forward`` does not pass ``checkpoint_core_attention``, and Megatron-Core's other recompute modules live in its
    own TransformerLayer), FP8 / NVFP4 (not established), CUDA graphs (the layer is no GraphableMegatronModule) and
    the local implementation."""
    m, tr, pr = cfg.model, cfg.training, cfg.precision
    if not tr.transformer_engine_full_layer_spec:
        return []
    why = []
    if m.normalization != "LayerNorm":
        why.append(f"normalization {m.normalization} (the layer is built with LayerNorm)")
    if m.activation_func != "gelu" or m.gated_linear_unit:
        why.append(f"activation_func {m.activation_func}{' gated' if m.gated_linear_unit else ''} (the layer's MLP "
                   "is GELU, not gated)")
    if not m.add_bias_linear:
        why.append("add_bias_linear false (the layer's linears have biases)")
    if (m.num_query_groups or m.num_attention_heads) != m.num_attention_heads:
        why.append(f"num_query_groups {m.num_query_groups} (the layer is built without GQA)")
    others = [(m.num_experts is not None, "MoE layers"), (m.multi_latent_attention, "multi-latent attention"),
              (m.qk_layernorm, "q/k norms"), (m.hybrid_layer_pattern is not None, "a hybrid layer pattern"),
              (m.experimental_attention_variant is not None, "an attention variant"),
              (bool(m.mtp_num_layers), "MTP layers"), (m.post_layernorm, "post-norms"),
              (tr.recompute_granularity == "selective", "selective recompute (the layer ignores it)"),
              (pr.fp8 or pr.fp4, "FP8 / NVFP4"), (tr.cuda_graph_impl != "none", "CUDA graphs"),
              (tr.transformer_impl != "transformer_engine", "transformer_impl local")]
    why += [what for on, what in others if on]
    return [Problem("training.transformer_engine_full_layer_spec", True, f"with {w} is not modelled: Transformer "
                    "Engine's TransformerLayer as Megatron-Bridge builds it is modelled only as the LayerNorm, GELU, "
                    "bias, multi-head-attention layer Megatron-Core's TE spec gives") for w in why]
