"""Megatron-Core's rules for the layer kinds beyond a plain GPT layer: hybrid (Mamba) models, gated delta nets,
latent MoE, gated attention, Gemma 4's global-attention layers, MiMo-V2-Flash's value heads and per-layer softmax,
DeepSeek-V4's layers (:func:`dsv4_problems`) and
heterogeneous layers.

Each rule is checked where Megatron-Core checks it (cited per rule) and reported as a
:class:`~estimator.config.errors.Problem` naming the field, the value and the rule; :func:`estimator.config.rules.validate`
collects them with the other cross-field rules. The pipeline split of a hybrid pattern is checked by
:func:`estimator.config.hybrid_pattern.split_problems` (through :func:`estimator.config.rules.layer_split_problems`).

Heterogeneous layers: the per-layer block configurations of Llama-Nemotron (DeciLM) models, read as
Megatron-Core reads them (:func:`parse_blocks`).

Megatron-LM @ d98e8a64 : megatron/core/transformer/heterogeneous/heterogeneous_config.py
(``HeterogeneousTransformerConfig``, ``AttentionConfig.build_config_from_dict``,
``MLPConfig.build_config_from_dict``, ``MLPConfig.ffn_mult_to_intermediate_size``) takes the JSON text of a
Hugging Face DeciLM ``config.json`` (``--heterogeneous-layers-config-path`` / ``-encoded-json``) and reads its
``block_configs``, one block per decoder layer:

- ``attention``: ``no_op`` (the layer has no attention and, with Transformer Engine, no input norm),
  ``replace_with_linear`` (one h x h column-parallel linear with its fused norm, gathered back:
  linear_replacements.py ``TELayerNormColumnParallelLinearGathered``), else self-attention with
  ``num_query_groups`` key/value heads, or Hugging Face's ``n_heads_in_group`` (heads per group: groups =
  num_attention_heads / n_heads_in_group, which must divide), or the model's own when null;
- ``mlp`` (or Hugging Face's ``ffn``): ``no_op``, ``replace_with_linear``, else a gated MLP of width
  ``ffn_hidden_size``, or Hugging Face's ``ffn_mult``: int(2 ffn_mult h / 3) rounded up to a multiple of 256,
  or the model's own when null.

Megatron-Core keeps only these fields of a block and drops every other key (DeciLM's ``sparsify``,
``window_length``, ``num_sink_tokens``, ...); they are accepted here when they are null, true/false or a number,
and change nothing. :func:`parse_blocks` returns one :class:`Block` per layer or raises :class:`HeteroError` with
the reason (the caller names the field).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import NamedTuple

from .errors import Problem
from .hybrid_pattern import parse, pattern_problems

__all__ = ["Block", "HeteroError", "dsa_shared_topk", "dsa_split_problems", "ffn_mult_to_size", "model_problems",
           "parse_blocks"]


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
    v4 = variant == "dsv4_hybrid"
    kda = variant == "kda"
    gdn = (variant is not None and not dsa and not v4 and not kda) or "G" in symbols
    if pattern is None:
        if variant is not None and not dsa and not v4 and m.linear_attention_freq is None:
            add("linear_attention_freq", None, "is required with experimental_attention_variant gdn "
                "(TransformerConfig: which layers are linear attention)")
        if m.linear_attention_freq is not None and (variant is None or dsa or v4):
            add("linear_attention_freq", m.linear_attention_freq if isinstance(m.linear_attention_freq, int)
                else list(m.linear_attention_freq), "applies only with experimental_attention_variant: gdn or kda")
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
    if not v4:       # DeepSeek-V4's layers use the indexer fields and the kernel backend their own way
        out += _dsa_rules(cfg, dsa and pattern is None)
    out += dsv4_problems(cfg)
    out += kimi_problems(cfg)
    out += _vision_rules(cfg)
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
    out += _mimo_rules(cfg, pattern)
    out += _hetero_rules(m, t, pattern)
    if not m.pre_layernorm and not m.post_layernorm:
        add("pre_layernorm", False, "only OLMo 2's placement is modelled without the pre-norms: set "
            "post_layernorm true (norms after attention and after the MLP)")
    if m.qk_layernorm_full_dim and (not m.qk_layernorm or m.multi_latent_attention or m.normalization != "RMSNorm"):
        add("qk_layernorm_full_dim", True, "needs qk_layernorm true with self-attention (not multi-latent "
            "attention) and normalization RMSNorm: Megatron-Bridge's full-width q/k norm is an RMSNorm")
    if m.mtp_dense_mlp and (not m.mtp_num_layers or m.hybrid_layer_pattern is not None
                            or m.heterogeneous_layers_config is not None
                            or m.experimental_attention_variant is not None):
        add("mtp_dense_mlp", True, "needs mtp_num_layers > 0 in a GPT model without hybrid_layer_pattern, "
            "heterogeneous_layers_config or an experimental attention variant (K-EXAONE's dense MTP layers)")
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
    if m.qk_l2_norm and (m.qk_layernorm or m.multi_latent_attention):
        add("qk_l2_norm", True, "Megatron-Core uses either the L2 norm or qk_layernorm on queries and keys, and "
            "not with multi-latent attention")
    if m.attention_output_gate and m.multi_latent_attention and not kda:
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
        if g % t:
            out.append(Problem("model.num_global_query_groups", g, f"num_global_query_groups ({g}) must be "
                               f"divisible by tensor_model_parallel_size ({t})"))
    return out


def _mimo_rules(cfg, pattern) -> list[Problem]:
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


def _hetero_rules(m, t: int, pattern) -> list[Problem]:
    """Heterogeneous layers (:func:`parse_blocks`): readable blocks, one per layer, for a dense GPT
    model (Megatron-LM @ d98e8a64 : megatron/core/models/gpt/heterogeneous/heterogeneous_layer_specs.py builds
    self-attention, linear replacements and dense MLPs only); each block's key/value heads split over the
    tensor-parallel ranks."""
    text = m.heterogeneous_layers_config
    if text is None:
        return []
    from .schema import MAX_FFN
    field = "model.heterogeneous_layers_config"
    shown = text if len(text) <= 80 else text[:77] + "..."
    try:
        blocks = parse_blocks(text, m.num_layers, m.num_attention_heads, m.hidden_size, MAX_FFN)
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


#: The radio tower's fixed shapes (Megatron-LM @ d98e8a64 : megatron/core/models/multimodal/llava_model.py for
#: vision_model_type "radio"; Megatron-Bridge @ 067f987d : nemotron_vl/nemotron_vl_provider.py): class_token_len 16
#: under use_vision_backbone_fp8_arch (which the provider sets; 32 with fp8_recipe mxfp8, 8 without it), the image
#: side img_h = img_w the provider builds it for, and max_img_h = max_img_w, the side its position table covers
#: (pixels). Here, below estimator/model/vision.py, because the rules need them too.
RADIO_CLASS_TOKENS, RADIO_TILE, RADIO_MAX_SIDE = 16, 512, 2048


def _radio_rules(m, tr, t) -> list[Problem]:
    """The radio tower (Nemotron Nano VL; estimator/model/vision.py): one frame per patch (a linear embedder over
    C P^2), pixel shuffle joining 2 x 2 patches (LLaVAModel multiplies the projector's input width by 4), the
    position table of (RADIO_MAX_SIDE / P)^2 entries RADIOViTModel builds, and the projector's fc1 split over TP."""
    out: list[Problem] = []
    if m.vision_temporal_patch_size != 1:
        out.append(Problem("model.vision_temporal_patch_size", m.vision_temporal_patch_size, "must be 1 for the "
                           "radio tower: its embedder is a linear layer over one frame's patch"))
    if m.vision_spatial_merge_size != 2:
        out.append(Problem("model.vision_spatial_merge_size", m.vision_spatial_merge_size, "must be 2 for the radio "
                           "tower: its pixel shuffle joins 2 x 2 patches into one token"))
    grid = (RADIO_MAX_SIDE // m.vision_patch_size) ** 2
    if RADIO_MAX_SIDE % m.vision_patch_size or m.vision_num_position_embeddings != grid:
        out.append(Problem("model.vision_num_position_embeddings", m.vision_num_position_embeddings,
                           f"must be (2048 / vision_patch_size)^2 = {grid:,} for the radio tower (RADIOViTModel's "
                           f"table covers {RADIO_MAX_SIDE}-pixel images; the patch must divide {RADIO_MAX_SIDE})"))
    c = m.vision_projector_ffn_hidden_size
    if c is not None and c % t:
        out.append(Problem("model.vision_projector_ffn_hidden_size", c, f"must be a multiple of "
                           f"tensor_model_parallel_size ({t}): the projector's fc1 is split over the ranks"))
    return out


_VISION_DIMS = ("vision_hidden_size", "vision_num_attention_heads", "vision_ffn_hidden_size")


def _vision_rules(cfg) -> list[Problem]:
    """The vision tower (estimator/model/vision.py, estimator/memory/vision.py): its dimensions come together; the
    language model's tensor-parallel size splits a qwen3_vl tower's heads, its MLP and its merger (Megatron-Core's
    ColumnParallelLinear divides the output width by it: Megatron-Bridge @ 067f987d : modelling_qwen3_vl/
    transformer_config.py ``get_vision_model_config`` copies tensor_model_parallel_size; a qwen2_5_vl tower is
    Hugging Face's module, whole on every rank); deepstack mergers and learned positions are qwen3_vl's only; images
    need a tower, a resolution that whole merged patches tile, and their tokens fit in the sequence."""
    m, tr, t = cfg.model, cfg.training, cfg.parallelism.tensor_model_parallel_size
    out: list[Problem] = []
    if m.vision_num_layers is None:
        for name in _VISION_DIMS + ("vision_out_hidden_size", "vision_projector_ffn_hidden_size"):
            if getattr(m, name) is not None:
                out.append(Problem("model." + name, getattr(m, name), "applies only with a vision tower "
                                   "(set model.vision_num_layers)"))
        if tr.images_per_sample:
            out.append(Problem("training.images_per_sample", tr.images_per_sample, "needs a model with a vision "
                               "tower (model.vision_num_layers); 0 for a text-only model"))
        if m.vision_deepstack_mergers:
            out.append(Problem("model.vision_deepstack_mergers", m.vision_deepstack_mergers, "applies only with a "
                               "vision tower (set model.vision_num_layers); 0 without one"))
        if m.vision_model_type != "qwen3_vl":
            out.append(Problem("model.vision_model_type", m.vision_model_type, "applies only with a vision tower "
                               "(set model.vision_num_layers)"))
        for name in ("freeze_vision_model", "freeze_vision_projection"):
            if getattr(tr, name):
                out.append(Problem("training." + name, True, "needs a model with a vision tower "
                                   "(model.vision_num_layers)"))
        if tr.freeze_language_model:
            out.append(Problem("training.freeze_language_model", True, "needs a model with a vision tower "
                               "(model.vision_num_layers): a text-only model with its language model frozen trains "
                               "nothing"))
        return out
    out += _frozen_language_rules(cfg)
    missing = [n for n in _VISION_DIMS if getattr(m, n) is None]
    for name in missing:
        out.append(Problem("model." + name, None, "is required with model.vision_num_layers (the vision tower)"))
    if missing:
        return out
    if m.vision_deepstack_mergers > m.vision_num_layers:
        out.append(Problem("model.vision_deepstack_mergers", m.vision_deepstack_mergers, f"must be at most "
                           f"vision_num_layers ({m.vision_num_layers}): each merger taps one tower layer"))
    if m.vision_deepstack_mergers > m.num_layers:
        out.append(Problem("model.vision_deepstack_mergers", m.vision_deepstack_mergers, f"must be at most "
                           f"num_layers ({m.num_layers}): each merger's output is added to one language-model layer"))
    hv, heads, fv = m.vision_hidden_size, m.vision_num_attention_heads, m.vision_ffn_hidden_size
    if hv % heads:
        out.append(Problem("model.vision_hidden_size", hv, f"must be a multiple of vision_num_attention_heads "
                           f"({heads}): the tower has no head width of its own"))
    kind = m.vision_model_type      # estimator/model/vision.py KINDS: what each kind is built of
    if kind != "qwen3_vl" and m.vision_deepstack_mergers:
        out.append(Problem("model.vision_deepstack_mergers", m.vision_deepstack_mergers, f"applies only to the "
                           f"qwen3_vl tower (Qwen3-VL's deepstack mergers); 0 for vision_model_type {kind}"))
    default = next(f.default for f in dataclasses.fields(m) if f.name == "vision_num_position_embeddings")
    if kind in ("qwen2_5_vl", "ernie45_vl") and m.vision_num_position_embeddings != default:
        out.append(Problem("model.vision_num_position_embeddings", m.vision_num_position_embeddings,
                           f"applies only to towers with learned positions; the {kind} tower's positions are "
                           f"rotary, without weights: leave it at {default}"))
    if kind == "gemma3_vl":
        out += _siglip_rules(m, tr, t)
    if (kind in ("glm4v", "radio")) != (m.vision_projector_ffn_hidden_size is not None):
        out.append(Problem("model.vision_projector_ffn_hidden_size", m.vision_projector_ffn_hidden_size,
                           "is required with vision_model_type glm4v or radio (its projector's MLP width) and "
                           f"applies to no other kind (vision_model_type {kind})"))
    if kind == "radio":
        out += _radio_rules(m, tr, t)
    if kind == "kimi_k25" and m.vision_temporal_patch_size != 1:
        out.append(Problem("model.vision_temporal_patch_size", m.vision_temporal_patch_size, "must be 1 for the "
                           "kimi_k25 tower: its patch embedding is a Conv2d over one frame"))
    if kind == "ernie45_vl" and m.vision_temporal_patch_size != 1:
        out.append(Problem("model.vision_temporal_patch_size", m.vision_temporal_patch_size, "must be 1 for the "
                           "ernie45_vl tower: its patch embedding is a linear layer over one frame's patch (the "
                           "resampler joins frames)"))
    wide = m.vision_spatial_merge_size ** 2 * hv
    split = kind in ("qwen3_vl", "radio")   # the other towers are Hugging Face's modules, whole on every TP rank
    for name, n in (("vision_num_attention_heads", heads), ("vision_ffn_hidden_size", fv)):
        if split and n % t:
            out.append(Problem("model." + name, n, f"must be a multiple of tensor_model_parallel_size ({t}): the "
                               "vision tower is split over the language model's tensor-parallel ranks"))
    if split and wide % t:
        out.append(Problem("model.vision_hidden_size", hv, f"x vision_spatial_merge_size^2 ({wide}, the patch "
                           f"merger's width) must be a multiple of tensor_model_parallel_size ({t})"))
    side = m.vision_patch_size * m.vision_spatial_merge_size
    if kind == "radio" and tr.images_per_sample and tr.image_resolution != RADIO_TILE:
        out.append(Problem("training.image_resolution", tr.image_resolution, f"must be {RADIO_TILE} for the radio "
                           f"tower: Megatron-Bridge builds it for {RADIO_TILE}-pixel tiles (img_h = img_w); count "
                           "each tile of a tiled image (and its thumbnail) in images_per_sample"))
    elif kind != "gemma3_vl" and tr.image_resolution % side:     # gemma3_vl: the side is fixed (_siglip_rules)
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


def dsa_shared_topk(L: int, freq: int, offset: int) -> tuple:
    """Per decoder layer (0-indexed), whether it reuses an earlier layer's DeepSeek-sparse-attention top-k instead of
    building an indexer (Megatron-LM @ d98e8a64 : megatron/core/transformer/experimental_attention_variant/dsa.py
    ``is_dsa_skip_topk_layer``, on the 1-indexed layer number n: with o = max(offset, 1), n reuses when
    max(n - o, 0) mod freq != 0, and then takes the top-k of layer n - ((n - o) mod freq),
    ``source_dsa_compute_layer``). freq 1: no layer reuses. GLM-5.2 (78 layers, freq 4, offset 3): layers 1, 2,
    3, then 7, 11, ..., 75 compute (21), the other 57 reuse."""
    if freq <= 1:
        return (False,) * L
    o = max(offset, 1)
    return tuple(max(n - o, 0) % freq != 0 for n in range(1, L + 1))


def dsa_split_problems(m, plans) -> list[Problem]:
    """Megatron-LM @ d98e8a64 : megatron/core/models/gpt/experimental_attention_variant_module_specs.py
    ``_validate_dsa_index_share_pipeline_split``: a layer that reuses another's top-k must find that layer earlier in
    its own model chunk (pipeline stage, or virtual stage), so every chunk must start on a layer that computes its
    top-k. ``plans``: each stage's :class:`~estimator.config.pipeline_layout.StagePlan`."""
    if m.experimental_attention_variant != "dsa" or m.dsa_indexer_topk_freq <= 1 or m.hybrid_layer_pattern:
        return []
    shared = dsa_shared_topk(m.num_layers, m.dsa_indexer_topk_freq, m.dsa_indexer_skip_topk_offset)
    starts = sorted({c.layers.start for plan in plans for c in plan.chunks if len(c.layers)})
    bad = [i + 1 for i in starts if shared[i]]
    if not bad:
        return []
    return [Problem("model.dsa_indexer_topk_freq", m.dsa_indexer_topk_freq,
                    f"with dsa_indexer_skip_topk_offset {m.dsa_indexer_skip_topk_offset}, every pipeline chunk must "
                    f"start on a layer that computes its own top-k; layer(s) {', '.join(map(str, bad))} (1-indexed) "
                    "start a chunk but reuse an earlier layer's top-k, which does not cross pipeline stages "
                    "(Megatron-Core); change the pipeline split (e.g. num_layers_in_first_pipeline_stage or "
                    "pipeline_model_parallel_layout)")]


def _siglip_rules(m, tr, t: int) -> list[Problem]:
    """Gemma 3's SigLIP tower (Megatron-Bridge @ 067f987d : gemma_vl/modeling_gemma3_vl.py): a Conv2d patch
    embedding (one frame a patch), num_positions = (image_size / patch)^2 learned positions that fix the image side
    (transformers' SiglipVisionEmbeddings; Gemma 3 does not interpolate them), a projector that average-pools the
    side's patches by vision_spatial_merge_size (Gemma3VLMultimodalProjector: patches_per_side / tokens_per_side) and
    whose ColumnParallelLinear splits the output width over TP."""
    out: list[Problem] = []
    if m.vision_temporal_patch_size != 1:
        out.append(Problem("model.vision_temporal_patch_size", m.vision_temporal_patch_size, "must be 1 for the "
                           "gemma3_vl tower: its patch embedding is a Conv2d over one frame"))
    per_side = math.isqrt(m.vision_num_position_embeddings)
    if per_side * per_side != m.vision_num_position_embeddings or per_side % m.vision_spatial_merge_size:
        out.append(Problem("model.vision_num_position_embeddings", m.vision_num_position_embeddings, "must be the "
                           "square of the patches per image side, a multiple of vision_spatial_merge_size "
                           f"({m.vision_spatial_merge_size}: the projector's average pool) for the gemma3_vl tower"))
    elif tr.images_per_sample and tr.image_resolution != per_side * m.vision_patch_size:
        out.append(Problem("training.image_resolution", tr.image_resolution, f"must be {per_side * m.vision_patch_size}"
                           f" pixels for the gemma3_vl tower: {per_side} patches of {m.vision_patch_size} a side, "
                           "as its learned positions fix (the processor resizes every image to it)"))
    ho = m.vision_out_hidden_size or m.hidden_size
    if ho % t:
        out.append(Problem("model.vision_out_hidden_size", ho, f"must be a multiple of tensor_model_parallel_size "
                           f"({t}): the projector's linear is split over the tensor-parallel ranks"))
    return out


def _dsa_rules(cfg, dsa: bool) -> list[Problem]:
    """DeepSeek sparse attention (Megatron-LM @ d98e8a64): ``experimental_attention_variant_module_specs.py``
    ``get_dsa_module_spec_for_backend`` asserts multi-latent attention; ``transformer_config.py`` ``__post_init__``
    requires add_bias_linear false and, with context parallelism, cp_comm_type allgather;
    ``absorbed_mla.py`` ``AbsorbedMLASelfAttention.__init__`` requires sequence parallelism with TP > 1 and no
    FP8/FP4 with the mla_up_proj recompute; the indexer needs its heads, head width (at least the rotary width it
    splits off) and top-k. FP8 is not modelled. Cross-layer top-k sharing (:func:`dsa_shared_topk`) applies only
    with dsa; its pipeline split is :func:`dsa_split_problems`'s."""
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem(field if "." in field else "model." + field, value, msg))

    if not dsa:
        for name in _DSA_FIELDS + ("dsa_indexer_loss_coeff",):
            if getattr(m, name) is not None:
                add(name, getattr(m, name), "applies only with experimental_attention_variant: dsa")
        for name, default in (("dsa_indexer_topk_freq", 1), ("dsa_indexer_skip_topk_offset", 0),
                              ("dsa_indexer_use_sparse_loss", False)):
            if getattr(m, name) != default:
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
    if cfg.precision.fp4:
        add("precision.fp4", cfg.precision.fp4, "is not modelled with DeepSeek sparse attention")
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


# --- heterogeneous layers ---------------------------------------------------------------------------------





#: Keys of a DeciLM block that Megatron-Core drops (no tensor of the Megatron model depends on them).
_DROPPED = frozenset({"sparsify", "window_length", "num_sink_tokens", "unshifted_sink",
                      "use_prefill_window_in_sink_attention", "llama4", "mamba", "moe"})
#: The longest JSON text accepted (an 80-layer DeciLM config.json is about 30 KB).
MAX_CHARS = 2_000_000


class HeteroError(ValueError):
    """A block configuration Megatron-Core would refuse or that this module cannot read."""


class Block(NamedTuple):
    """One decoder layer: ``mixer`` "attention", "linear" or "" (no-op); ``groups`` its key/value heads (None:
    the model's); ``mlp`` "dense", "linear" or ""; ``ffn`` its MLP width (None: the model's)."""

    mixer: str
    groups: int | None
    mlp: str
    ffn: int | None


def ffn_mult_to_size(mult: float, hidden: int) -> int:
    """MLPConfig.ffn_mult_to_intermediate_size: int(2 mult h / 3), rounded up to a multiple of 256."""
    n = int(2 * mult * hidden / 3)
    return n if n % 256 == 0 else n + 256 - n % 256


def _flag(d: dict, key: str, where: str) -> bool:
    v = d.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise HeteroError(f"{where}.{key} must be true or false, got {v!r}")
    return v


def _count(v, where: str, top: int) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
        raise HeteroError(f"{where} must be an integer between 1 and {top:,} or null, got {v!r}")
    return v


def _others(d: dict, known: set, where: str) -> None:
    for k, v in d.items():
        if k in known:
            continue
        if k not in _DROPPED:
            raise HeteroError(f"{where} has the key {k!r}, which Megatron-Core's heterogeneous config does not read "
                              f"and this estimator does not know; known: {', '.join(sorted(known))}")
        if v is not None and not isinstance(v, (bool, int, float, str)):
            raise HeteroError(f"{where}.{k} must be null, true/false, a number or a name, got {v!r}")


def _attention(d, i: int, heads: int) -> tuple[str, int | None]:
    where = f"block_configs[{i}].attention"
    if not isinstance(d, dict):
        raise HeteroError(f"{where} must be an object, got {d!r}")
    _others(d, {"no_op", "replace_with_linear", "num_query_groups", "n_heads_in_group"}, where)
    no_op, linear = _flag(d, "no_op", where), _flag(d, "replace_with_linear", where)
    if "num_query_groups" in d:
        groups = _count(d["num_query_groups"], f"{where}.num_query_groups", heads)
    else:
        per = _count(d.get("n_heads_in_group"), f"{where}.n_heads_in_group", heads)
        if per is not None and heads % per:
            raise HeteroError(f"{where}.n_heads_in_group {per} must divide num_attention_heads ({heads})")
        groups = heads // per if per is not None else None
    if groups is not None and (no_op or linear):
        raise HeteroError(f"{where}: key/value heads are given for a block whose attention is "
                          f"{'no_op' if no_op else 'replace_with_linear'} (Megatron-Core asserts against it)")
    if no_op and linear:
        raise HeteroError(f"{where}: no_op and replace_with_linear are both true")
    if groups is not None and heads % groups:
        raise HeteroError(f"{where}: {groups} key/value heads must divide num_attention_heads ({heads})")
    return ("" if no_op else "linear" if linear else "attention"), groups


def _mlp(block: dict, i: int, hidden: int, top: int) -> tuple[str, int | None]:
    key = "ffn" if block.get("ffn") is not None else "mlp"
    d = block.get(key)
    where = f"block_configs[{i}].{key}"
    if not isinstance(d, dict):
        raise HeteroError(f"block_configs[{i}] needs an 'ffn' or 'mlp' object, got {d!r}")
    _others(d, {"no_op", "replace_with_linear", "ffn_hidden_size", "ffn_mult"}, where)
    no_op, linear = _flag(d, "no_op", where), _flag(d, "replace_with_linear", where)
    if "ffn_hidden_size" in d:
        ffn = _count(d["ffn_hidden_size"], f"{where}.ffn_hidden_size", top)
    else:
        mult = d.get("ffn_mult")
        if mult is not None and (isinstance(mult, bool) or not isinstance(mult, (int, float))
                                 or not math.isfinite(mult) or not 0 < mult <= 1e4):
            raise HeteroError(f"{where}.ffn_mult must be a positive number or null, got {mult!r}")
        ffn = ffn_mult_to_size(mult, hidden) if mult is not None else None
        if ffn is not None and ffn > top:
            raise HeteroError(f"{where}.ffn_mult {mult} makes an MLP of width {ffn:,}, above {top:,}")
    if ffn is not None and (no_op or linear):
        raise HeteroError(f"{where}: an MLP width is given for a block whose MLP is "
                          f"{'no_op' if no_op else 'replace_with_linear'} (Megatron-Core asserts against it)")
    if no_op and linear:
        raise HeteroError(f"{where}: no_op and replace_with_linear are both true")
    return ("" if no_op else "linear" if linear else "dense"), ffn


def parse_blocks(text: str, num_layers: int, heads: int, hidden: int,
                 max_ffn: int = 10 ** 7) -> tuple[Block, ...]:
    """One :class:`Block` per decoder layer of the JSON text (see the module docstring)."""
    if not isinstance(text, str):
        raise HeteroError(f"must be the JSON text of an object with block_configs, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise HeteroError(f"the JSON text is {len(text):,} characters, above {MAX_CHARS:,}")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HeteroError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("block_configs"), list):
        raise HeteroError("must be a JSON object with a block_configs list (one block per layer)")
    blocks = data["block_configs"]
    if len(blocks) != num_layers:
        raise HeteroError(f"block_configs has {len(blocks):,} blocks; num_layers is {num_layers:,} (one block per "
                          "layer)")
    out = []
    for i, b in enumerate(blocks):
        if not isinstance(b, dict):
            raise HeteroError(f"block_configs[{i}] must be an object with attention and ffn (or mlp), got {b!r}")
        extra = set(b) - {"attention", "ffn", "mlp"}
        if extra:
            raise HeteroError(f"block_configs[{i}] has the key(s) {', '.join(sorted(map(str, extra)))}; a block "
                              "holds attention and ffn (or mlp)")
        mixer, groups = _attention(b.get("attention"), i, heads)
        mlp, ffn = _mlp(b, i, hidden, max_ffn)
        out.append(Block(mixer, groups, mlp, ffn))
    return tuple(out)


_INDEXER = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk")


def dsv4_problems(cfg) -> list[Problem]:
    """DeepSeek-V4's layers: the hybrid attention (``experimental_attention_variant: dsv4_hybrid``),
    manifold-constrained hyper-connections and hash-routed MoE layers.

    Megatron-LM @ d48bd6be (the ``dev`` branch, where DeepSeek-V4 is built; Megatron-Bridge @ 067f987d calls these
    "MCore-dev-only"): ``megatron/core/transformer/experimental_attention_variant/deepseek_v4_hybrid_attention.py``
    ``DSv4HybridAttention.__init__`` asserts tensor-parallel size 1 and no ``core_attn`` checkpoint, and that
    num_attention_heads x v_head_dim divides by ``o_groups``; it reads the layer's ratio from ``csa_compress_ratios``
    at index (layer - 1), or num_layers + (MTP layer - 1) for an MTP layer; ``transformer_config.py``
    ``__post_init__`` requires at least num_layers + mtp_num_layers ratios, each 0, 4 or 128, and no tilelang backend; ``csa.py`` builds a compressor for a ratio
    above 1 and an indexer for ratio 4 (its heads, head width and top-k from the ``dsa_indexer_*`` fields);
    ``transformer_config.py`` makes ``moe_n_hash_layers`` the leading layers' routing and
    ``hyper_connection.py`` the residual streams."""
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem(field if "." in field else "model." + field, value, msg))

    v4 = m.experimental_attention_variant == "dsv4_hybrid"
    mhc = tr.recompute_granularity == "selective" and "mhc" in (tr.recompute_modules or ())
    if mhc and not m.enable_hyper_connections:
        add("training.recompute_modules", list(tr.recompute_modules), "mhc needs enable_hyper_connections true "
            "(TransformerConfig)")
    if mhc and "mlp" in tr.recompute_modules:
        add("training.recompute_modules", list(tr.recompute_modules), "mhc cannot be used with mlp "
            "(TransformerConfig)")
    if m.enable_hyper_connections and m.hybrid_layer_pattern is not None:
        add("enable_hyper_connections", True, "is modelled for GPT models only (not with hybrid_layer_pattern)")
    if m.moe_n_hash_layers:
        if m.num_experts is None:
            add("moe_n_hash_layers", m.moe_n_hash_layers, "applies only to MoE models (set num_experts)")
        elif m.moe_n_hash_layers > m.num_layers:
            add("moe_n_hash_layers", m.moe_n_hash_layers, f"must be at most num_layers ({m.num_layers})")
    if not v4:
        if m.csa_compress_ratios is not None:
            add("csa_compress_ratios", list(m.csa_compress_ratios),
                "applies only with experimental_attention_variant: dsv4_hybrid")
        return out
    if m.hybrid_layer_pattern is not None:
        add("experimental_attention_variant", "dsv4_hybrid", "is modelled for GPT models only (not with "
            "hybrid_layer_pattern)")
        return out
    if not m.multi_latent_attention:
        add("experimental_attention_variant", "dsv4_hybrid", "needs multi_latent_attention true (Megatron-Bridge "
            "builds DeepSeek-V4 with an MLA provider; q_lora_rank, v_head_dim and qk_pos_emb_head_dim give its shape)")
    if m.q_lora_rank is None:
        add("q_lora_rank", None, "is required with dsv4_hybrid (every layer has a query down-projection)")
    if m.add_bias_linear:
        add("add_bias_linear", True, "must be false with dsv4_hybrid (its projections have no biases)")
    t = par.tensor_model_parallel_size
    if t != 1:
        add("parallelism.tensor_model_parallel_size", t, "must be 1 with dsv4_hybrid (DSv4HybridAttention supports "
            "tensor-parallel size 1 only; use expert, pipeline and data parallelism)")
    if par.context_parallel_size > 1:
        add("parallelism.context_parallel_size", par.context_parallel_size, "context parallelism with dsv4_hybrid "
            "needs packed sequences (THD) split contiguously over the ranks (DSv4HybridAttention.forward, "
            "cp_partition_mode contiguous), which is not modelled; use 1")
    mods = tr.recompute_modules or ()
    if tr.recompute_granularity == "selective" and "core_attn" in mods:
        add("training.recompute_modules", list(mods), "core_attn is refused by DSv4HybridAttention")
    v = m.v_head_dim or 128
    if (m.num_attention_heads * v) % m.o_groups:
        add("o_groups", m.o_groups, f"must divide num_attention_heads x v_head_dim ({m.num_attention_heads} x {v})")
    ratios = m.csa_compress_ratios
    mtp = m.mtp_num_layers or 0
    if ratios is None:
        add("csa_compress_ratios", None, "is required with dsv4_hybrid (each layer's compression ratio)")
        return out
    if len(ratios) < m.num_layers + mtp:
        add("csa_compress_ratios", list(ratios), f"must have at least num_layers + mtp_num_layers ({m.num_layers} "
            f"+ {mtp}) entries, got {len(ratios)}")
    if not set(ratios) <= {0, 4, 128}:
        add("csa_compress_ratios", list(ratios), "every ratio must be 0 (sliding window only), 4 (compressed "
            f"sparse) or 128 (heavily compressed), got {sorted(set(ratios) - {0, 4, 128})}")
    if m.dsa_kernel_backend == "tilelang":
        add("dsa_kernel_backend", "tilelang", "is not supported with dsv4_hybrid: cudnn (fused) or none")
    extra = ratios[m.num_layers:m.num_layers + mtp]
    if len(set(extra)) > 1:
        add("csa_compress_ratios", list(ratios), f"the MTP layers' ratios must be equal (modelled as one kind), "
            f"got {list(extra)}")
    if 4 in ratios:
        for name in _INDEXER:
            if getattr(m, name) is None:
                add(name, None, "is required with a ratio-4 layer in csa_compress_ratios (the indexer's shape)")
    return out


def _frozen_language_rules(cfg) -> list[Problem]:
    """``training.freeze_language_model`` (estimator/memory/features/frozen_language.py): something must still train
    (Megatron-Core's optimizer has no parameter to step otherwise), and the combinations whose frozen states or saved
    tensors another part of the estimator re-plans are refused by name rather than estimated wrong."""
    tr, par = cfg.training, cfg.parallelism
    if not tr.freeze_language_model:
        return []
    out: list[Problem] = []

    def add(value, msg):
        out.append(Problem("training.freeze_language_model", value, msg))

    if tr.freeze_vision_model and tr.freeze_vision_projection:
        add(True, "with freeze_vision_model and freeze_vision_projection also true nothing trains (Megatron-Core's "
            "optimizer gets no parameter); leave the tower or its projection trained")
    if tr.peft is not None:
        add(True, f"with training.peft ({tr.peft}) the language model's base weights are frozen by the adapters' "
            "own transform already; leave freeze_language_model false")
    if par.use_megatron_fsdp or par.use_torch_fsdp2:
        add(True, "with FSDP is not modelled (which frozen units FSDP still gathers and shards)")
    if tr.rl_algorithm != "none":
        add(True, f"with RL training (training.rl_algorithm: {tr.rl_algorithm}) is not modelled")
    if tr.reserved_memory_model == "replay":
        add(True, "with reserved_memory_model replay is not modelled (the allocator trace keeps every linear "
            "layer's input); use fraction")
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
