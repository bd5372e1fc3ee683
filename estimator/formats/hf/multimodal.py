"""Vision-language wrappers: the language model of a multimodal ``config.json`` is its ``text_config``
(:func:`text_part`; Qwen2.5-VL's Hub files keep it flat, at the top level; Gemma 3's states only what differs from
transformers' defaults), and the wrappers whose vision tower is modelled read it with :mod:`.towers`."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .keys import INERT


#: GLM-4.5V's text_config keys the Hugging Face wrapper adds to GLM-4.5-Air's: media token ids (no tensor).
_GLM4V_MEDIA = frozenset({"image_start_token_id", "image_end_token_id", "video_start_token_id",
                          "video_end_token_id", "image_token_id", "video_token_id"})

_QWEN_VL_TOP = frozenset({"video_token_id", "vision_start_token_id", "vision_end_token_id", "audio_token_id"})


_VISION_TOP = frozenset({"text_config", "vision_config", "image_token_index", "image_token_id", "tie_word_embeddings"})


#: Multimodal wrappers whose language model is their text_config: model_type -> (the text model_type(s) mapped,
#: the wrapper's own keys, which describe the vision tower, projector and media tokens: not counted here).
WRAPPED: dict[str, tuple[tuple[str, ...], frozenset]] = {
    "llama4": (("llama4_text", "llama4"), _VISION_TOP | {"boi_token_index", "eoi_token_index", "image_processor_config"}),
    # Megatron-Bridge kimi_vl/kimi_k25_vl_bridge.py: the language model is DeepSeek-V3's (text_config kimi_k2); the
    # MoonViT tower and its projector are read from vision_config (moonvit_vision).
    "kimi_k25": (("kimi_k2", "deepseek_v3"), _VISION_TOP | {"media_placeholder_token_id", "use_unified_vision_chunk",
                                                           "video_placeholder"}),
    # Megatron-Bridge ministral3/ministral3_bridge.py (Mistral3ForConditionalGeneration): a Mistral / Ministral 3
    # language model (text_config) with a Pixtral vision encoder and a patch-merger projector (towers.pixtral_vision
    # reads the vision_config and the wrapper's projector keys).
    "mistral3": (("mistral", "ministral3"), _VISION_TOP | {"multimodal_projector_bias", "projector_hidden_act",
                                                          "spatial_merge_size", "vision_feature_layer"}),
    "ministral3": (("mistral", "ministral3"), _VISION_TOP | {"multimodal_projector_bias", "projector_hidden_act",
                                                            "spatial_merge_size", "vision_feature_layer"}),
    # Megatron-Bridge gemma_vl/gemma4_vl_bridge.py: the Gemma 4 language model (text_config gemma4_text) with a
    # vision tower and embedder (vision_config, mapped by towers.gemma4_vision; the published 25.2 B total is the
    # language model's alone) and media tokens; an audio tower (audio_config, on the small variants) is refused by
    # text_part.
    "gemma4": (("gemma4_text",), _VISION_TOP | {"audio_config", "audio_token_id", "boa_token_id", "boi_token_id",
                                                "eoa_token_id", "eoa_token_index", "eoi_token_id", "video_token_id",
                                                "vision_soft_tokens_per_image"}),
    # Megatron-Bridge qwen_vl/qwen35_vl_bridge.py (Qwen35VLBridge, Qwen35VLMoEBridge): the hybrid language model of
    # text_config and a Qwen3-VL vision tower (vision_config, mapped by towers.qwen_vision into model.vision_*).
    # language_model_only (false in NVIDIA's Qwen3.6-27B-NVFP4) is no field of transformers' Qwen3_5Config
    # (huggingface/transformers @ 008e5743 : src/transformers/models/qwen3_5/configuration_qwen3_5.py: text_config,
    # vision_config, the media token ids, tie_word_embeddings), so it changes no tensor; it names vLLM's switch that
    # loads the language model without the vision encoder. False keeps the whole model; true is refused in text_part.
    "qwen3_5": (("qwen3_5_text",), _VISION_TOP | _QWEN_VL_TOP | {"language_model_only"}),
    "qwen3_5_moe": (("qwen3_5_moe_text",), _VISION_TOP | _QWEN_VL_TOP | {"language_model_only"}),
    # Megatron-Bridge qwen_vl/qwen3_vl_bridge.py (Qwen3VLBridge, Qwen3VLMoEBridge): a Qwen3 / Qwen3-MoE language
    # model (text_config; M-RoPE has no weights) and the same vision tower, with deepstack mergers.
    # Megatron-Bridge minimax_m3/minimax_m3_bridge.py (MiniMaxM3SparseForConditionalGeneration): the language model
    # of text_config (its recipes train it alone: to_text_provider) with a CLIP-style vision tower and two projector
    # MLPs replicated over the tensor-parallel ranks (not counted), image tokens and their compression.
    "minimax_m3_vl": (("minimax_m3",), _VISION_TOP | {"img_token_compression_config", "image_grid_pinpoints",
                                                       "image_seq_length", "video_token_index",
                                                       "multimodal_projector_bias", "num_reward_heads",
                                                       "process_image_mode", "projector_hidden_act",
                                                       "vision_feature_layer", "vision_feature_select_strategy",
                                                       "projector_hidden_size"}),
    "qwen3_vl": (("qwen3_vl_text",), _VISION_TOP | _QWEN_VL_TOP),
    "qwen3_vl_moe": (("qwen3_vl_moe_text",), _VISION_TOP | _QWEN_VL_TOP),
    # Megatron-Bridge qwen_vl/qwen25_vl_bridge.py (Qwen25VLBridge): a Qwen2 language model (RMSNorm, SwiGLU, q/k/v
    # biases; M-RoPE has no weights) and transformers' own Qwen2.5-VL vision tower (_qwen25_vision). The Hub's
    # config.json files keep the language model's keys flat, at the top level (FLAT_TEXT).
    "qwen2_5_vl": (("qwen2_5_vl_text",), _VISION_TOP | _QWEN_VL_TOP | {"vision_token_id"}),
    # Megatron-Bridge gemma_vl/gemma3_vl_bridge.py (Gemma3VLBridge): the Gemma 3 language model of text_config
    # (transformers' Gemma3TextConfig defaults fill the keys the Hub files leave out: GEMMA3_TEXT_DEFAULTS) and the
    # SigLIP vision tower with its projector (siglip_vision).
    "gemma3": (("gemma3_text",), _VISION_TOP | {"boi_token_index", "eoi_token_index", "mm_tokens_per_image"}),
    # Megatron-Bridge glm_vl/glm_45v_bridge.py (GLM45VBridge): GLM-4.5-Air's language model (text_config, mapped as
    # glm4_moe with no MTP layer: the bridge sets mtp_num_layers 0 for the VL model) and transformers' GLM-4V vision
    # tower (glm4v_vision).
    "glm4v_moe": (("glm4v_moe_text",), _VISION_TOP | _GLM4V_MEDIA),
    # Megatron-Bridge @ 067f987d : kimi/kimi_k3_bridge.py (KimiK3Bridge): the language model of text_config
    # (kimi_linear, :mod:`.kimi`); the vision tower and projector pass through the bridge and are not built.
    # ERNIE-VL (issue 27): Megatron-Bridge @ 067f987d : ernie_vl/ernie45_vl_bridge.py (Ernie45VLBridge): the
    # language model of text_config with ErnieMultiTypeMoE's two expert pools (moe.map_ernie4_5_vl) and the ViT and
    # resampler of vision_config (towers.ernie_vision); transformers' Ernie4_5_VLMoeConfig (huggingface/transformers
    # @ 020a37d2) adds the media token ids.
    "ernie4_5_vl_moe": (("ernie4_5_vl_moe_text",), _VISION_TOP | _GLM4V_MEDIA),
    "kimi_k3": (("kimi_linear",), _VISION_TOP | {"ignore_index", "image_placeholder", "media_placeholder_token_id"}),
    # towers27 (issue 27): Megatron-Bridge @ 067f987d : exaone/exaone45/exaone45_bridge.py (Exaone45Bridge): EXAONE
    # 4.0's language model of text_config (model_type exaone4, first released as exaone4_5_text) with its dense MTP
    # layers (num_nextn_predict_layers, mtp_share_layers), mapped as exaone4_5_text, and the tower
    # (towers.exaone45_vision).
    "exaone4_5": (("exaone4", "exaone4_5_text"), _VISION_TOP | _QWEN_VL_TOP | {"vision_token_id"}),
    # Megatron-Bridge @ 067f987d : stepfun/step37_bridge.py (Step37Bridge): Step 3.5 Flash's decoder (text_config
    # step3p5) and the Perception-Encoder tower with its projector (towers.step37_vision); configuration_step37.py
    # ``Step37Config`` copies the text model's hidden_size and max_position_embeddings to the top level.
    "step3p7": (("step3p5",), _VISION_TOP | {"understand_projector_stride", "projector_bias", "hidden_size",
                                             "max_position_embeddings"}),
}


#: transformers' Gemma3TextConfig defaults for the keys that size a tensor (huggingface/transformers @ 008f5c8c :
#: src/transformers/models/gemma3/configuration_gemma3.py ``Gemma3TextConfig.__init__``): Gemma 3's Hub config.json
#: files state only what differs from them (google/gemma-3-4b-it's text_config: hidden_size, intermediate_size,
#: num_hidden_layers, rope_scaling, sliding_window), and transformers, hence Megatron-Bridge, builds the rest so.
GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
                        "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131_072,
                        "rms_norm_eps": 1e-6}


#: Wrappers whose config.json may hold the language model's keys at the top level instead of a text_config
#: (transformers' Qwen2_5_VLConfig reads either).
FLAT_TEXT = frozenset({"qwen2_5_vl"})


def _glm4v_text(text: dict) -> dict:
    """GLM-4.5V's text_config as GLM-4.5-Air's: no MTP layer (Megatron-Bridge @ 067f987d : glm_vl/glm_45v_bridge.py
    sets mtp_num_layers 0), transformers' num_local_experts only as a second name for n_routed_experts, and the
    media token ids dropped."""
    out = {k: v for k, v in text.items() if k not in _GLM4V_MEDIA}
    local = out.pop("num_local_experts", None)
    if local is not None and local != out.get("n_routed_experts"):
        raise ConfigError(Problem("config.json:text_config.num_local_experts", local, "must equal n_routed_experts "
                                  f"({show(out.get('n_routed_experts'))}): the same experts under another name"))
    out["num_nextn_predict_layers"] = 0
    return out


def text_part(hf: dict, mt: str, strict: bool) -> tuple[dict, str]:
    """The language model's keys of a multimodal config.json (its text_config) and the model_type they are
    mapped as; the vision encoder and projector are left out here (:mod:`.towers` reads those that are modelled;
    the other wrappers' are not counted). A Ministral 3 text_config maps as Mistral: the same tensors (its YaRN /
    Llama-4 attention scaling in rope_parameters has no weights)."""
    inner, top = WRAPPED[mt]
    text = hf.get("text_config")
    if text is None and mt in FLAT_TEXT:        # the language model's keys at the top level
        text = {k: v for k, v in hf.items() if k not in top or k == "tie_word_embeddings"}
        text["model_type"] = inner[0]
    if not isinstance(text, dict):
        raise ConfigError(Problem("config.json:text_config", text, f"is required for {mt} (the language model)"))
    if mt == "gemma3":
        text = {**GEMMA3_TEXT_DEFAULTS, **text}
    if mt == "glm4v_moe":
        text = _glm4v_text(text)
    if mt in FLAT_TEXT:     # media token ids a re-saved text_config repeats: the wrapper's, sizing no tensor
        text = {k: v for k, v in text.items() if k not in top - {"tie_word_embeddings"}}
    if strict:
        unknown = [k for k in hf if k not in top and k not in INERT
                   and not (mt in FLAT_TEXT and k in text and text[k] == hf[k])]
        if unknown:
            raise UnsupportedError(f"config.json key(s) not understood for {mt}: {', '.join(sorted(unknown))}")
    if hf.get("audio_config") is not None:
        raise UnsupportedError(f"config.json:audio_config for {mt}: an audio tower is not modelled")
    if hf.get("language_model_only") not in (None, False):
        raise UnsupportedError(f"config.json:language_model_only = {show(hf['language_model_only'])} for {mt}: only "
                               "false (or absent) is mapped, the language model with its vision tower; whether a "
                               "checkpoint marked text-only still holds the tower is not known from the config.json")
    text_mt = text.get("model_type", inner[0])
    if text_mt not in inner:
        raise UnsupportedError(f"config.json:text_config.model_type {show(text_mt)} for {mt}: the language models "
                               f"mapped are {', '.join(inner)}")
    out = dict(text)
    target = {"ministral3": "mistral", "llama4_text": "llama4", "qwen3_5_text": "qwen3_5",
              "glm4v_moe_text": "glm4_moe", "qwen2_5_vl_text": "qwen2", "qwen3_5_moe_text": "qwen3_5_moe",
              "qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3_moe"}.get(text_mt, text_mt)
    if mt == "exaone4_5":       # EXAONE 4.0's keys and the MTP layers Exaone45Bridge reads (llama.map_exaone4_5)
        target = "exaone4_5_text"
    out["model_type"] = target
    if "tie_word_embeddings" in hf and "tie_word_embeddings" not in out:
        out["tie_word_embeddings"] = hf["tie_word_embeddings"]
    return out, target
