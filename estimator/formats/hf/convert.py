"""From a parsed ``config.json`` to the ``model:`` section: the supported ``model_type`` table, the keys every
architecture shares (layers, widths, heads, vocabulary, norm, activation, dropout) and the dispatch to the family's
own mapping function. See :mod:`estimator.formats.hf` for the key table."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .deepseek import map_deepseek, map_deepseek_v32, map_deepseek_v4
from .gemma import map_gemma, map_gemma1, map_gemma4
from .glm import map_glm4_moe, map_glm4_moe_lite, map_glm_moe_dsa
from .hybrid import (mamba2_attention_heads, map_falcon_h1, map_mamba2, map_nemotron_h, map_qwen3_5,
                     map_qwen3_next, nemotron_block_types)
from .keys import INERT, KNOWN, QWEN3_MOE_EXTRA
from .kimi import map_kimi_k3
from .llama import (gqa, map_exaone4, map_exaone4_5, map_llama4, map_mimo, map_nemotron, map_nemotron_nas, map_olmo2, map_phi3,
                    moe_experts)
from .moe import (map_bailing_moe, map_ernie4_5_moe, map_ernie4_5_vl, map_exaone_moe, map_gpt_oss, map_hy_v3, map_minimax_m2,
                  map_minimax_m3, map_olmoe, map_sarvam)
from .multimodal import WRAPPED, text_part
from .reader import GATED_ACT, LISTED_KEYS, MODEL_ORDER, Reader
from .sliding import map_mimo_v2_flash, map_step3p5
from .source import read_hf_config
from .towers import VISION_TOWERS, read_vision


#: model_type -> (architecture class name, a short description), in the order the docs list them.
SUPPORTED: dict[str, tuple[str, str]] = {
    "llama": ("LlamaForCausalLM", "Llama 2, Llama 3, Llama 3.1"),
    "mistral": ("MistralForCausalLM", "Mistral"),
    "mixtral": ("MixtralForCausalLM", "Mixtral"),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2, Qwen2.5"),
    "qwen2_moe": ("Qwen2MoeForCausalLM", "Qwen2-MoE, Qwen1.5-MoE"),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3 dense"),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3-MoE"),
    "deepseek_v2": ("DeepseekV2ForCausalLM", "DeepSeek-V2, DeepSeek-V2-Lite"),
    "deepseek_v3": ("DeepseekV3ForCausalLM", "DeepSeek-V3, DeepSeek-R1, Kimi Moonlight"),
    "kimi_k2": ("DeepseekV3ForCausalLM", "Kimi-K2 (DeepSeek-V3's architecture)"),
    "phi3": ("Phi3ForCausalLM", "Phi-3, Phi-3.5, Phi-4-mini"),
    "mimo": ("MiMoForCausalLM", "MiMo (Qwen2 with MTP layers)"),
    "ernie4_5_moe": ("Ernie4_5_MoeForCausalLM", "ERNIE 4.5 MoE"),
    "ernie4_5_vl_moe": ("Ernie4_5_VLMoeForConditionalGeneration", "ERNIE-4.5-VL (text and vision expert pools, "
                        "the ViT and resampler)"),
    "bailing_moe": ("BailingMoeV2ForCausalLM", "Ling 2.0 (Bailing MoE V2)"),
    "llama4": ("Llama4ForConditionalGeneration", "Llama 4 (text part)"),
    "gemma2": ("Gemma2ForCausalLM", "Gemma 2"),
    "gemma3_text": ("Gemma3ForCausalLM", "Gemma 3 (text)"),
    "gemma3": ("Gemma3ForConditionalGeneration", "Gemma 3 4B, 12B, 27B (Gemma 3 language model, SigLIP vision tower "
               "and its pooling projector)"),
    "gemma4": ("Gemma4ForConditionalGeneration", "Gemma 4 MoE and 31B dense (text part; the vision tower is not "
               "counted)"),
    "gemma4_text": ("Gemma4ForCausalLM", "Gemma 4 MoE and 31B dense (text)"),
    "nemotron-nas": ("DeciLMForCausalLM", "Llama-Nemotron Super / Ultra (heterogeneous blocks, DeciLM)"),
    "gpt_oss": ("GptOssForCausalLM", "gpt-oss"),
    "qwen3_next": ("Qwen3NextForCausalLM", "Qwen3-Next"),
    "qwen3_5": ("Qwen3_5ForConditionalGeneration", "Qwen3.5 dense (gated delta net + gated attention, vision tower)"),
    "qwen3_5_moe": ("Qwen3_5MoeForConditionalGeneration", "Qwen3.5 MoE (gated delta net + gated attention, vision "
                    "tower)"),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", "Qwen3-VL dense (Qwen3 language model, vision tower with "
                 "deepstack mergers)"),
    "qwen3_vl_moe": ("Qwen3VLMoeForConditionalGeneration", "Qwen3-VL MoE (Qwen3-MoE language model, vision tower "
                     "with deepstack mergers)"),
    "qwen3_5_text": ("Qwen3_5ForCausalLM", "Qwen3.5 dense, language model only"),
    "qwen3_5_moe_text": ("Qwen3_5MoeForCausalLM", "Qwen3.5 MoE, language model only"),
    "nemotron_h": ("NemotronHForCausalLM", "Nemotron-H, Nemotron 3 (hybrid Mamba)"),
    "olmo2": ("Olmo2ForCausalLM", "OLMo 2 (norms after attention and MLP, full-width q/k norms)"),
    "minimax_m2": ("MiniMaxM2ForCausalLM", "MiniMax-M2, M2.5, M2.7"),
    "glm4_moe": ("Glm4MoeForCausalLM", "GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7"),
    "glm4_moe_lite": ("Glm4MoeLiteForCausalLM", "GLM-4.7-Flash (multi-latent attention)"),
    "deepseek_v32": ("DeepseekV32ForCausalLM", "DeepSeek-V3.2, DeepSeek-V3.2-Exp (DeepSeek sparse attention)"),
    "glm_moe_dsa": ("GlmMoeDsaForCausalLM", "GLM-5, GLM-5.1, GLM-5.2 (multi-latent attention with DeepSeek sparse "
                    "attention; GLM-5.2 shares each top-k over 4 layers)"),
    "deepseek_v4": ("DeepseekV4ForCausalLM", "DeepSeek-V4-Flash, DeepSeek-V4-Pro (hybrid compressed attention, "
                    "hyper-connections, hash-routed MoE layers)"),
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", "Qwen2.5-VL (Qwen2 language model, Hugging Face's vision "
                   "tower with window attention, whole on every TP rank)"),
    "glm4v_moe": ("Glm4vMoeForConditionalGeneration", "GLM-4.5V (GLM-4.5-Air's language model, GLM-4V vision tower "
                  "with its downsample and merger)"),
    "kimi_k25": ("KimiK25ForConditionalGeneration", "Kimi K2.5 (DeepSeek-V3's language model, MoonViT vision tower "
                 "and patch merger)"),
    "mistral3": ("Mistral3ForConditionalGeneration", "Mistral Small 3.1/3.2, Magistral, Ministral 3 (text part)"),
    "ministral3": ("Mistral3ForConditionalGeneration", "Ministral 3 (text part)"),
    # famA (issue 27): OLMoE, Gemma 1, Nemotron-4 / Minitron, EXAONE 4.0, K-EXAONE
    "olmoe": ("OlmoeForCausalLM", "OLMoE (q/k norms over all heads, 64 experts)"),
    "gemma": ("GemmaForCausalLM", "Gemma 1 (GeGLU, 256-wide heads)"),
    "nemotron": ("NemotronForCausalLM", "Nemotron-4, Minitron (LayerNorm, squared-ReLU MLP)"),
    "exaone4": ("Exaone4ForCausalLM", "EXAONE 4.0 (norms after attention and MLP, per-head q/k norms)"),
    "exaone_moe": ("ExaoneMoeForCausalLM", "K-EXAONE (EXAONE MoE: shared expert, sigmoid router, dense MTP layers)"),
    # famC (issue 27): MiMo-V2-Flash, MiniMax-M3
    "mimo_v2_flash": ("MiMoV2FlashForCausalLM", "MiMo-V2-Flash (sliding-window and global attention, sinks, "
                      "MoE)"),
    "minimax_m3_vl": ("MiniMaxM3SparseForConditionalGeneration", "MiniMax-M3 (text part; the vision tower and "
                      "the lightning indexers are not counted)"),
    # famD (issue 27): Hy3 (Hunyuan V3), Sarvam, Falcon-H1, Mamba-2
    "hy_v3": ("HYV3ForCausalLM", "Hy3 / Hunyuan V3 (q/k norms, dense first layer, sigmoid-routed MoE with a shared "
              "expert, MTP)"),
    "sarvam_moe": ("SarvamMoEForCausalLM", "Sarvam 30B (GQA with q/k norms, sigmoid-routed MoE with a shared "
                   "expert)"),
    "sarvam_mla": ("SarvamMLAForCausalLM", "Sarvam 105B (multi-latent attention, sigmoid-routed MoE with a "
                   "shared expert)"),
    "mamba2": ("Mamba2ForCausalLM", "Mamba-2 (every layer a Mamba-2 mixer; Mamba-Codestral)"),
    "falcon_h1": ("FalconH1ForCausalLM", "Falcon-H1 (a Mamba-2 mixer beside attention in every layer, then an MLP)"),
    # Kimi K3 (issue 27): Megatron-Bridge @ 067f987d : src/megatron/bridge/models/kimi/kimi_k3_bridge.py
    "kimi_k3": ("KimiK3ForConditionalGeneration", "Kimi K3 (Kimi delta attention, gated no-RoPE MLA, AttnRes, "
                "normalised latent MoE, SiTU; the language model: Megatron-Bridge passes the vision tower through "
                "uncounted)"),
    # famE (issue 27): Step 3.5 Flash
    "step3p5": ("Step3p5ForCausalLM", "Step 3.5 Flash (sliding-window layers with their own query heads, gated "
                "attention output, MoE with a shared expert, dense MTP layers)"),
    # towers27 (issue 27): Megatron-Bridge @ 067f987d : exaone/exaone45, stepfun/step37_bridge.py
    "exaone4_5": ("Exaone4_5_ForConditionalGeneration", "EXAONE 4.5 (EXAONE 4.0's language model with dense MTP "
                  "layers, a windowed-attention ViT with grouped-query attention and its patch merger)"),
    "step3p7": ("Step3p7ForConditionalGeneration", "Step 3.7 (Step 3.5 Flash's language model, a Perception-Encoder "
                "ViT with LayerScale, 2-D RoPE and two strided-convolution downsamplers, and its projector)"),
}


#: Refused with the reason: architectures whose parameters this schema cannot describe exactly.
REFUSED: dict[str, str] = {
    # ERNIE-VL (issue 27): Baidu's remote-code config.json (Ernie4_5_VLMoEConfig, flat: the language model's keys at
    # the top level, moe_layer_start_index / moe_layer_end_index per pool, the tower's embed_dim / mlp_ratio); the
    # transformers form, ernie4_5_vl_moe, is imported.
    "ernie4_5_moe_vl": ("Baidu's remote-code ERNIE-4.5-VL config.json (flat, per-pool moe_layer_start_index and "
                        "moe_layer_end_index, the tower as embed_dim and mlp_ratio) is not imported; use the "
                        "transformers-format config.json (model_type ernie4_5_vl_moe), or describe the model with "
                        "num_experts, moe_ffn_hidden_size and moe_vision_ffn_hidden_size (the text and vision "
                        "experts' widths, moe_intermediate_size) and model.vision_model_type ernie45_vl"),
    # Megatron-Bridge @ 067f987d : models/nemotron_vl (NemotronVLBridge, source NemotronH_Nano_VL_V2): the config.json
    # names its RADIO tower only by version (vision_config.version radio_v2.5-h); the provider hard-codes its shape.
    "NemotronH_Nano_VL_V2": ("Nemotron Nano VL's config.json names its RADIO vision tower only by version, so it is "
                             "not imported; describe it with model.vision_model_type radio and the model.vision_* "
                             "fields (32 layers of 1280, 16 heads, MLP 5120, patch 16, 16,384 positions, projector "
                             "20480) over the Nemotron-H language model of its llm_config"),
    # omni28: Megatron-Bridge @ 067f987d : models/nemotron_omni (NemotronOmniBridge, source
    # NemotronH_Nano_Omni_Reasoning_V3): the provider hard-codes the RADIO tower; the sound tower is sound_config's.
    "NemotronH_Nano_Omni_Reasoning_V3": ("Nemotron Omni's config.json names its RADIO vision tower only by version, "
                                         "so it is not imported; import the run's Megatron-Bridge config.yaml "
                                         "(--bridge-config reads both towers from NemotronOmniModelProvider), or "
                                         "describe it with model.vision_model_type radio (32 layers of 1280, 16 "
                                         "heads, MLP 5120, patch 16, 16,384 positions, projector 20480, "
                                         "vision_class_token_len 10, vision_temporal_patch_size 2 with "
                                         "vision_separate_video_embedder) and model.sound_* from its sound_config, "
                                         "over the Nemotron-H language model of its llm_config"),
}


_ARCH_TO_TYPE = {arch: mt for mt, (arch, _) in SUPPORTED.items() if mt not in ("kimi_k2", "ministral3")}


def _supported_list() -> str:
    return "; ".join(f"{desc} ({mt}, {arch})" for mt, (arch, desc) in SUPPORTED.items())


def _model_type(hf: dict) -> str:
    mt = hf.get("model_type")
    archs = hf.get("architectures") or []
    if mt is not None and not isinstance(mt, str):
        raise ConfigError(Problem("config.json:model_type", mt, f"must be a name such as 'llama', got {show(mt)}"))
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(Problem("config.json:architectures", archs, "must be a list of class names such as "
                                  f"['LlamaForCausalLM'], got {show(archs)}"))
    if mt is None and archs:
        mt = _ARCH_TO_TYPE.get(archs[0])
    if mt in REFUSED:
        raise UnsupportedError(f"{archs[0] if archs else mt} (model_type {mt}) is not supported: {REFUSED[mt]}. "
                               f"Supported: {_supported_list()}.")
    if mt not in SUPPORTED:
        name = archs[0] if archs else (mt or "a config.json without model_type or architectures")
        raise UnsupportedError(f"unknown architecture {show(name)} (model_type {show(mt)}). Supported: "
                               f"{_supported_list()}.")
    return mt


def from_hf_config(source, *, strict: bool = True) -> dict:
    """The ``model:`` section for a Hugging Face ``config.json`` (path, model directory, catalog Hub id or dict).

    Raises :class:`UnsupportedError` for an unknown or refused architecture, for a value with no exact
    Megatron-Core equivalent, and (with ``strict``) for any key not known to be harmless; raises
    :class:`ConfigError` for a missing file, a Hub id not in the catalog, invalid JSON or a missing required key.
    """
    hf = read_hf_config(source)
    mt = _model_type(hf)
    wrapper, wrapper_mt = (hf, mt) if mt in VISION_TOWERS else (None, None)
    if mt in WRAPPED:
        hf, mt = text_part(hf, mt, strict)
    elif mt in ("qwen3_5_text", "qwen3_5_moe_text"):     # Qwen35Bridge / Qwen35MoEBridge: the language model alone
        mt, wrapper = mt[:-len("_text")], None
    if mt == "nemotron_h" and ("layers_block_type" in hf or "mtp_layers_block_type" in hf):
        hf = nemotron_block_types(hf)
    if mt == "mamba2":
        hf = mamba2_attention_heads(hf)
    if mt == "qwen3_moe":
        for key, means in QWEN3_MOE_EXTRA.items():
            if key in hf and hf[key] != means:
                raise UnsupportedError(f"config.json:{key} = {show(hf[key])} for qwen3_moe: Hugging Face's Qwen3-MoE "
                                       f"ignores the key and builds the model as if it were {show(means)}, so the "
                                       "checkpoint and this config.json disagree")
    if strict:
        unknown = sorted(show(k) if not isinstance(k, str) or len(k) > 64 else k for k in hf
                         if k not in KNOWN[mt] and k not in INERT
                         and not (mt == "qwen3_moe" and k in QWEN3_MOE_EXTRA))
        if unknown:
            listed = ", ".join(unknown[:LISTED_KEYS]) + (f" and {len(unknown) - LISTED_KEYS:,} more"
                                                         if len(unknown) > LISTED_KEYS else "")
            raise UnsupportedError(
                f"config.json key(s) not understood for {mt}: {listed}. They may change "
                f"the parameter count, so the import stops rather than guess (pass strict=False to ignore them).")
    r = Reader(hf, mt)
    L = r.int("num_hidden_layers")
    m: dict = {
        "num_layers": L,
        "hidden_size": r.int("hidden_size"),
        "num_attention_heads": r.int("num_attention_heads"),
        "vocab_size": r.int("vocab_size"),
        "normalization": "RMSNorm",
        "layernorm_epsilon": r.number("rms_norm_eps", 1e-6),
        "position_embedding_type": "rope",
        "untie_embeddings_and_output_weights": not r.flag("tie_word_embeddings", False),
    }
    if mt not in _UNGATED:      # an ungated family's mapping reads hidden_act itself
        acts = GATED_ACT | _OWN_ACT.get(mt, {})
        act = r.name("hidden_act", "silu", sorted(acts))
        if act not in acts:
            raise UnsupportedError(f"config.json:hidden_act {show(act)} is not supported for {mt}; the gated MLP "
                                   f"takes one of {', '.join(sorted(acts))}")
        m["activation_func"], m["gated_linear_unit"] = acts[act], True
    max_pos = r.int("max_position_embeddings", required=False)
    if max_pos:
        m["max_position_embeddings"] = max_pos
    for key in ("attention_dropout", "hidden_dropout"):
        p = r.number(key, 0.0)
        if p > 0:
            m[key] = p
    if mt in _OWN_MAPPING:
        _OWN_MAPPING[mt](r, m)
    elif mt.startswith("deepseek") or mt == "kimi_k2":
        map_deepseek(r, m)
    else:
        gqa(r, m)
        if mt in ("mixtral", "qwen2_moe", "qwen3_moe"):
            moe_experts(r, m)
    if wrapper is not None:
        read_vision(wrapper, wrapper_mt, m, strict)
    return {k: m[k] for k in sorted(m, key=MODEL_ORDER.__getitem__)}


#: model_type -> its own mapping function (the Llama-style and DeepSeek families use gqa / moe_experts /
#: map_deepseek). A new family adds one line here, its keys to keys.KNOWN and its row to SUPPORTED.
_OWN_MAPPING = {
    "phi3": map_phi3,
    "mimo": map_mimo,
    "ernie4_5_moe": map_ernie4_5_moe,
    "ernie4_5_vl_moe_text": map_ernie4_5_vl,
    "bailing_moe": map_bailing_moe,
    "gpt_oss": map_gpt_oss,
    "qwen3_next": map_qwen3_next,
    "qwen3_5": map_qwen3_5,
    "qwen3_5_moe": map_qwen3_5,
    "nemotron_h": map_nemotron_h,
    "gemma2": map_gemma,
    "gemma3_text": map_gemma,
    "llama4": map_llama4,
    "olmo2": map_olmo2,
    "minimax_m2": map_minimax_m2,
    "glm4_moe": map_glm4_moe,
    "glm4_moe_lite": map_glm4_moe_lite,
    "deepseek_v32": map_deepseek_v32,
    "glm_moe_dsa": map_glm_moe_dsa,
    "gemma4_text": map_gemma4,
    "deepseek_v4": map_deepseek_v4,
    "nemotron-nas": map_nemotron_nas,
    "olmoe": map_olmoe,
    "gemma": map_gemma1,
    "nemotron": map_nemotron,
    "exaone4": map_exaone4,
    "exaone4_5_text": map_exaone4_5,
    "exaone_moe": map_exaone_moe,
    # famC (issue 27)
    "mimo_v2_flash": map_mimo_v2_flash,
    "minimax_m3": map_minimax_m3,
    # famD (issue 27)
    "hy_v3": map_hy_v3,
    "sarvam_moe": map_sarvam,
    "sarvam_mla": map_sarvam,
    "mamba2": map_mamba2,
    "falcon_h1": map_falcon_h1,
    "kimi_linear": map_kimi_k3,
    # famE (issue 27)
    "step3p5": map_step3p5,
}


#: model_types whose mapping function reads hidden_act itself: an MLP that is not gated (Nemotron-4's relu2), no MLP
#: (Mamba-2: its hidden_act is the mixer's), or an activation of its own (Kimi K3's situ).
_UNGATED = frozenset({"nemotron", "mamba2", "kimi_linear"})


#: Gated activations a family names its own way: MiniMax-M3's SwiGLU-OAI, x sigmoid(1.702 x) on the gate, is
#: quick-GELU (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/minimax_m3/minimax_m3_bridge.py
#: ``hf_to_megatron_activation``).
_OWN_ACT = {"minimax_m3": {"swigluoai": "quick_gelu"}}
