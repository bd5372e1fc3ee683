"""The multimodal model providers' own fields of a Megatron-Bridge configuration: which the estimator maps, which
have no memory effect at their default, and which it refuses by name.

Megatron-Bridge's vision-language providers (NVIDIA-NeMo/Megatron-Bridge @ 067f987d :
src/megatron/bridge/models/qwen_vl/qwen3_vl_provider.py ``Qwen3VLModelProvider``, qwen35_vl_provider.py,
gemma_vl/gemma3_vl_provider.py, glm_vl/glm_45v_provider.py, kimi_vl/kimi_k25_vl_provider.py,
ernie_vl/ernie45_vl_provider.py, ministral3/ministral3_provider.py, qwen_omni/qwen3_omni_provider.py,
nemotron_omni/nemotron_omni_provider.py, ...) add fields to the ``model`` section that the catalogued
``GPTModelProvider`` does not declare (:mod:`estimator.formats.bridge.catalog`). Each is classified here:

- ``freeze_vision_model`` / ``freeze_vision_projection`` are the estimator's ``training.freeze_vision_model`` /
  ``training.freeze_vision_projection`` (the providers' ``freeze`` sets ``requires_grad`` false on the tower / the
  projector, as ``Qwen3VLModel.freeze`` does). They need the imported model to hold a vision tower
  (``model.vision_*``): a Bridge ``config.yaml`` carries the provider's ``vision_config`` as a Hugging Face object
  the importer does not read, so turned on without a tower they are refused, never dropped. A recipe builds its
  provider from a Hugging Face model (``AutoBridge.from_hf_pretrained(hf_path)``): where that model is in the
  offline catalog and its import holds a tower (:func:`hf_tower`, whichever family's tower the Hugging Face
  importer models), ``--bridge-recipe`` takes the tower from it and the freeze fields apply.
- ``freeze_language_model`` is the estimator's ``training.freeze_language_model`` (``freeze`` sets
  ``requires_grad`` false on the whole ``language_model``: estimator/memory/features/frozen_language.py); like the
  vision freeze fields it needs the tower, since only the tower or its projector is left to train.
- the vision encoder's CUDA graphs (vgraph29): ``vision_cuda_graph_impl``, ``vision_cuda_graph_scope`` and
  ``max_vision_cuda_graph_seq_length`` are the estimator's ``training.vision_cuda_graph_impl``,
  ``training.vision_cuda_graph_modules`` and ``training.max_vision_cuda_graph_seq_length`` (estimator/memory/
  vision.py: the tower padded to the graphs' length, their static buffers and private pool; the rules in
  estimator/config/rules/vision.py refuse what is not modelled). Megatron-Bridge @ 067f987d :
  modelling_qwen3_vl/transformer_config.py ``get_vision_model_config`` gives the tower's config the provider's
  ``vision_cuda_graph_impl`` and scope, or ``cuda_graph_impl`` none and no scope; training/train.py builds
  Megatron-Core's ``VisionTECudaGraphHelper`` only for ``transformer_engine``, so another implementation
  (``local``, ...) is refused. The two companions are read only there (vision_model.py pads only with
  ``transformer_engine``), so with ``vision_cuda_graph_impl`` none they are without effect at any value.
- Qwen3-Omni's ``vit_gradient_checkpointing`` is refused when set away from its default, and without effect
  at it.
- Nemotron Omni's sound tower (omni28; nemotron_omni_provider.py ``_build_sound_modules``, estimator/model/audio.py):
  ``has_sound`` true builds the Parakeet encoder from the provider's ``sound_config`` (the Hugging Face
  sound_config dict a ``config.yaml`` carries) and the sound projection (``sound_hidden_size`` ->
  ``sound_projection_hidden_size``): :func:`sound_model` maps them to ``model.sound_*``; ``freeze_sound_encoder`` /
  ``freeze_sound_projection`` are the estimator's ``training.freeze_sound_*``. With ``has_sound`` false the provider
  builds neither module and ``NemotronOmniModel.freeze`` skips the missing ones: the freeze fields are without
  effect (Bridge's CORD v2 recipes). Qwen-Omni's ``freeze_audio_model`` / ``freeze_audio_projection`` stay refused
  when on: no Qwen-Omni audio tower is modelled.
- Nemotron Omni's RADIO tower is fixed by the provider's code (``NemotronVLModelProvider._build_vision_config``: 32
  layers of 1280, 16 heads, MLP 5120; ``NemotronOmniModel``: patch 16, 2048-pixel position table, pixel shuffle,
  ``vision_class_token_len`` or 10 class tokens; the projector of ``vision_proj_ffn_hidden_size``), so for a
  ``NemotronOmniModelProvider`` :func:`omni_tower` reads it from the model section itself. Its video fields
  (Megatron-LM @ d98e8a64 : megatron/core/models/vision/radio.py ``RADIOViTModel``): ``temporal_patch_dim`` is the
  tower's ``vision_temporal_patch_size`` (frames per patch), ``separate_video_embedder`` its
  ``vision_separate_video_embedder`` (a second embedder for frame groups); both are refused for any other
  provider; ``temporal_ckpt_compat`` only registers a state-dict pre-hook that fills the temporal embedder when a
  checkpoint lacks it, without effect on memory at any value.
- Qwen3-Omni's ``multimodal_attn_impl`` (qwen_omni/modeling_qwen3_omni/thinker_model.py
  ``_configure_multimodal_attn_impl``) picks the attention of its Hugging Face vision and audio towers: without
  effect at ``auto``, refused otherwise (no Qwen3-Omni tower is modelled).
"""

from __future__ import annotations

__all__ = ["GRAPH_IMPLS", "MULTIMODAL", "NO_EFFECT", "OMNI_HF_IDS", "OMNI_PROVIDERS", "OMNI_TOWER", "SOUND_FIELD",
           "TRAINING_FIELD", "VIDEO_FIELD", "OmniRefused", "hf_tower", "is_off", "judge", "omni_media", "omni_tower",
           "sound_model"]

_CUDA_GRAPHS = ("the vision encoder's CUDA graphs other than transformer_engine: Megatron-Bridge's training loop "
                "builds Megatron-Core's VisionTECudaGraphHelper, and the tower pads for the graphs, only with "
                "transformer_engine (training/train.py, modelling_qwen3_vl/vision_model.py)")
#: The fields read only when the vision encoder's CUDA graphs are on (module docstring).
_GRAPH_COMPANIONS = ("vision_cuda_graph_scope", "max_vision_cuda_graph_seq_length")
_AUDIO = "Qwen-Omni's audio tower is not modelled (Nemotron Omni's sound tower is)"

#: model field -> (its value when off, the reason it is refused when on, or None when it is mapped).
MULTIMODAL: dict[str, tuple[object, str | None]] = {
    "freeze_vision_model": (False, None),
    "freeze_vision_projection": (False, None),
    "freeze_language_model": (False, None),
    "vision_cuda_graph_impl": ("none", _CUDA_GRAPHS),
    "vision_cuda_graph_scope": ([], _CUDA_GRAPHS),
    "max_vision_cuda_graph_seq_length": (None, _CUDA_GRAPHS),
    "vit_gradient_checkpointing": (False, "Qwen3-Omni's vision-encoder recompute: the estimator models no "
                                   "Qwen3-Omni tower (a modelled tower takes the language model's recompute)"),
    "temporal_patch_dim": (1, None),
    "has_sound": (False, None),
    "sound_config": (None, None),
    "sound_hidden_size": (1024, None),
    "sound_projection_hidden_size": (4096, None),
    "sound_model_type": ("parakeet", None),
    "sound_context_token_id": (0, None),
    "vision_proj_ffn_hidden_size": (20480, None),
    "vision_class_token_len": (None, None),
    "freeze_sound_encoder": (False, None),
    "freeze_sound_projection": (False, None),
    "freeze_audio_model": (False, _AUDIO),
    "freeze_audio_projection": (False, _AUDIO),
    "separate_video_embedder": (False, None),
    "temporal_ckpt_compat": (False, None),
    "multimodal_attn_impl": ("auto", "the attention implementation of Qwen3-Omni's Hugging Face vision and audio "
                             "towers: no Qwen3-Omni tower is modelled"),
}

#: Fields without effect on memory at any value: field -> why.
NO_EFFECT = {"temporal_ckpt_compat": "a checkpoint-loading hook of Nemotron Omni's RADIO tower (fills the temporal "
                                     "patch embedder when a checkpoint lacks it): no memory effect",
             "sound_context_token_id": "the token id Nemotron Omni's sound embeddings replace: no memory effect"}

#: Nemotron VL / Omni provider fields a config.yaml carries that change no memory (nemotron_vl_provider.py,
#: nemotron_omni_provider.py): token ids and tokenizer names, the RADIO tower's eval-mode and position-interpolation
#: switches (its parameters are built whatever they say), the dynamic-resolution input contract Omni requires, and
#: the serialized model contract. Each is kept at any value.
_OMNI_NO_EFFECT = {
    "image_token_index": "the image token id: no memory effect",
    "img_start_token_id": "the image start token id: no memory effect",
    "img_end_token_id": "the image end token id: no memory effect",
    "tokenizer_type": "a tokenizer name: no memory effect",
    "language_model_type": "a tokenizer / prompt family name: no memory effect",
    "vision_model_type": "the vision backbone's name (the provider builds RADIO whatever it says): no memory effect",
    "dynamic_resolution": "RADIO's dynamic-resolution input contract (Nemotron Omni requires it): images are counted "
                          "by training.images_per_sample and image_resolution",
    "use_vision_backbone_fp8_arch": "used by the LLaVA path only (NemotronOmniModel takes vision_class_token_len)",
    "radio_force_eval_mode": "RADIO's eval mode (no dropout in the tower): no memory effect",
    "radio_force_cpe_eval_mode": "RADIO's position-embedding eval mode: no memory effect",
    "radio_interpolate_only_cpe": "how RADIO interpolates its position table: no memory effect",
    "radio_cpe_aspect_ratio_select": "how RADIO crops its position table: no memory effect",
    "radio_disable_cpe": "RADIO's position table is built either way: no memory effect",
    "nemotron_omni_contract": "the serialized model contract name: no memory effect",
}
NO_EFFECT.update(_OMNI_NO_EFFECT)
MULTIMODAL.update({name: (None, None) for name in _OMNI_NO_EFFECT})

#: Nemotron Omni's sound fields, mapped by :func:`sound_model` (model.sound_* fields; training.freeze_sound_*).
SOUND_FIELD = {"has_sound", "sound_config", "sound_hidden_size", "sound_projection_hidden_size", "sound_model_type",
               "freeze_sound_encoder", "freeze_sound_projection"}

#: Nemotron Omni's RADIO tower fields, mapped by :func:`omni_tower` (model.vision_* fields).
VIDEO_FIELD = {"temporal_patch_dim", "separate_video_embedder", "vision_proj_ffn_hidden_size",
               "vision_class_token_len"}

#: The providers whose RADIO tower :func:`omni_tower` reads from the model section (``_target_``'s class name).
OMNI_PROVIDERS = ("NemotronOmniModelProvider",)

#: The RADIO tower NemotronOmniModelProvider builds, fixed in its code (Megatron-Bridge @ 067f987d :
#: nemotron_omni/nemotron_omni_provider.py ``_build_vision_config`` via nemotron_vl_provider.py;
#: modeling_nemotron_omni.py ``NemotronOmniModel``: patch_dim 16, max_img_h = max_img_w = 2048, pixel shuffle).
OMNI_TOWER = {"vision_num_layers": 32, "vision_hidden_size": 1280, "vision_num_attention_heads": 16,
              "vision_ffn_hidden_size": 5120, "vision_patch_size": 16, "vision_spatial_merge_size": 2,
              "vision_num_position_embeddings": (2048 // 16) ** 2, "vision_in_channels": 3,
              "vision_model_type": "radio"}

#: Hugging Face ids whose Megatron-Bridge provider is NemotronOmniModelProvider (the checkpoint's architecture
#: NemotronH_Nano_Omni_Reasoning_V3, registered by nemotron_omni_bridge.py ``NemotronOmniBridge``; Megatron-Bridge @
#: 067f987d : examples/model_verification_cards/nemotron-3-nano-omni-30b-a3b-reasoning/card.yaml names the id and
#: its architecture). Their tower is the provider's (:data:`OMNI_TOWER`, projector 20480, 10 class tokens).
OMNI_HF_IDS = ("nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16",)

#: ParakeetEncoderConfig's defaults for the keys Megatron-Bridge passes from sound_config (nemotron_omni_provider.py
#: ``_build_sound_encoder``: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, num_mel_bins,
#: subsampling_factor required; conv_kernel_size 9 and convolution_bias false when absent) and the fields they fill.
_SOUND_CONFIG = {"num_hidden_layers": ("sound_num_layers", None), "hidden_size": ("sound_hidden_size", None),
                 "num_attention_heads": ("sound_num_attention_heads", None),
                 "intermediate_size": ("sound_ffn_hidden_size", None), "num_mel_bins": ("sound_num_mel_bins", None),
                 "subsampling_factor": ("sound_subsampling_factor", None),
                 "conv_kernel_size": ("sound_conv_kernel_size", 9), "convolution_bias": ("sound_bias", False)}
#: sound_config keys Bridge does not pass to ParakeetEncoderConfig, which then keeps its default: the estimator's
#: subsampling kernel 3 and stride 2, channels 256 (estimator/model/audio.py). A config naming another value is refused.
_SOUND_FIXED = {"subsampling_conv_kernel_size": 3, "subsampling_conv_stride": 2, "subsampling_conv_channels": 256,
                "num_key_value_heads": None}

#: The mapped fields: model field -> the estimator's training field.
TRAINING_FIELD = {"freeze_vision_model": "freeze_vision_model",
                  "freeze_vision_projection": "freeze_vision_projection",
                  "freeze_language_model": "freeze_language_model",
                  "vision_cuda_graph_impl": "vision_cuda_graph_impl",
                  "vision_cuda_graph_scope": "vision_cuda_graph_modules",
                  "max_vision_cuda_graph_seq_length": "max_vision_cuda_graph_seq_length"}
#: The vision encoder's CUDA graph implementations the estimator models (others are refused: module docstring).
GRAPH_IMPLS = ("none", "transformer_engine")


def _off(value, default) -> bool:
    return value == default or value is None or (default == [] and value in ((), []))


def judge(name: str, value, graph_impl="none") -> tuple[str, str]:
    """("modelled" | "no_effect" | "refused", why) for a multimodal provider's field set to ``value``;
    ``graph_impl``: the same model section's ``vision_cuda_graph_impl``, without which its companions
    (``vision_cuda_graph_scope``, ``max_vision_cuda_graph_seq_length``) are read nowhere."""
    default, refused = MULTIMODAL[name]
    if name in NO_EFFECT:
        return "no_effect", NO_EFFECT[name]
    if name in _GRAPH_COMPANIONS and _off(graph_impl, "none"):
        return "no_effect", ("read only by the vision encoder's CUDA graphs, which vision_cuda_graph_impl "
                             f"{graph_impl or 'none'} leaves off (get_vision_model_config clears them)")
    if name in SOUND_FIELD:
        return "modelled", "model.sound_* and training.freeze_sound_* (Nemotron Omni's sound tower)"
    if name in VIDEO_FIELD:
        return "modelled", "model.vision_* (Nemotron Omni's RADIO tower)"
    if name == "vision_cuda_graph_impl" and value not in GRAPH_IMPLS and value is not None:
        return "refused", refused or ""
    if name in TRAINING_FIELD:
        return "modelled", f"training.{TRAINING_FIELD[name]} (needs a vision tower in the model)"
    if _off(value, default):
        return "no_effect", f"the multimodal provider's default ({default!r}): nothing to model"
    return "refused", refused or ""


def is_off(name: str, value) -> bool:
    """Whether multimodal field ``name`` holds its off value (``None``, its default, an empty list)."""
    return _off(value, MULTIMODAL[name][0])


def hf_tower(hf_id: str | None) -> dict | None:
    """The ``model.vision_*`` fields of Hugging Face model ``hf_id`` as the offline catalog's import reads it
    (:func:`estimator.formats.catalog.status`); None when the id is not catalogued, its import is refused, or it holds
    no vision tower the estimator models."""
    if not hf_id:
        return None
    if hf_id in OMNI_HF_IDS:            # omni28: the provider fixes its tower (module docstring)
        return omni_tower({})
    from ...config.errors import ConfigError
    from ..catalog import status
    try:
        model, _ = status(hf_id)
    except ConfigError:                 # not in the offline catalog
        return None
    if not model or model.get("vision_num_layers") is None:
        return None
    return {k: v for k, v in model.items() if k.startswith("vision_")}


class OmniRefused(Exception):
    """A Nemotron Omni field the estimator does not model: ``(setting, why)`` in ``args[0]``; the importer
    (config.py) raises it as its BridgeRefusedError."""


def _refuse(where: str, value, why: str):
    from ...config.errors import show
    raise OmniRefused((f"model.{where} = {show(value)}", why))


def omni_tower(m: dict) -> dict:
    """The ``model.vision_*`` fields of the RADIO tower a NemotronOmniModelProvider with model section ``m`` builds
    (its fixed shape :data:`OMNI_TOWER`, the projector width, class tokens and video embedder from ``m``)."""
    Pt = m.get("temporal_patch_dim", 1)
    if not isinstance(Pt, int) or isinstance(Pt, bool) or Pt < 1:
        _refuse("temporal_patch_dim", Pt, "must be a whole number of frames, at least 1")
    separate = m.get("separate_video_embedder", False)
    if not isinstance(separate, bool):
        _refuse("separate_video_embedder", separate, "must be true or false")
    return {**OMNI_TOWER, "vision_temporal_patch_size": Pt,
            "vision_projector_ffn_hidden_size": m.get("vision_proj_ffn_hidden_size", 20480),
            "vision_class_token_len": m.get("vision_class_token_len") or 10,
            "vision_separate_video_embedder": bool(separate and Pt > 1)}


def sound_model(m: dict) -> tuple[dict, dict]:
    """(``model.sound_*`` fields, ``training.freeze_sound_*`` fields) of a Nemotron Omni model section ``m``: empty
    without ``has_sound`` (no sound modules, so the freeze fields do nothing). Refuses by name what the estimator's
    Parakeet encoder does not describe."""
    if not m.get("has_sound"):
        return {}, {}
    if m.get("sound_model_type", "parakeet") != "parakeet":
        _refuse("sound_model_type", m["sound_model_type"], "only Nemotron Omni's Parakeet sound encoder is modelled")
    sc = m.get("sound_config")
    if not isinstance(sc, dict):
        _refuse("sound_config", sc, "with has_sound true must be the sound encoder's configuration (the Hugging Face "
                "sound_config dict Megatron-Bridge stores in config.yaml)")
    out = {}
    for key, (field, default) in _SOUND_CONFIG.items():
        value = sc.get(key, default)
        if value is None:
            _refuse(f"sound_config.{key}", None, "is required by Megatron-Bridge's sound encoder")
        out[field] = value
    for key, allowed in _SOUND_FIXED.items():
        if key in sc and sc[key] != allowed and not (key == "num_key_value_heads"
                                                     and sc[key] == sc.get("num_attention_heads")):
            _refuse(f"sound_config.{key}", sc[key], "is not passed by Megatron-Bridge to the encoder, which keeps "
                    f"ParakeetEncoderConfig's default ({allowed if allowed is not None else 'no GQA'}); another "
                    "value is not modelled")
    if m.get("sound_hidden_size", 1024) != out["sound_hidden_size"]:
        _refuse("sound_hidden_size", m.get("sound_hidden_size", 1024), f"must equal sound_config.hidden_size "
                f"({out['sound_hidden_size']}): the projection's input is the encoder's output")
    out["sound_projector_ffn_hidden_size"] = m.get("sound_projection_hidden_size", 4096)
    freeze = {f: m[f] for f in ("freeze_sound_encoder", "freeze_sound_projection") if f in m}
    return out, freeze


def omni_media(m: dict) -> tuple[dict | None, dict, dict]:
    """(the RADIO tower's ``model.vision_*`` fields or None, ``model.sound_*`` fields, ``training.freeze_sound_*``)
    of a Bridge model section ``m``: the tower and the sound tower for a Nemotron Omni provider; for any other
    provider its Omni fields set away from their defaults are refused by name."""
    target = str(m.get("_target_") or "").rsplit(".", 1)[-1]
    if target in OMNI_PROVIDERS:
        sound, freeze = sound_model(m)
        return omni_tower(m), sound, freeze
    for name in ("has_sound", "temporal_patch_dim", "separate_video_embedder", "freeze_sound_encoder",
                 "freeze_sound_projection", "vision_class_token_len"):
        default = MULTIMODAL[name][0]
        if name in m and m[name] not in (default, None, False):
            _refuse(name, m[name], f"is modelled for Megatron-Bridge's {', '.join(OMNI_PROVIDERS)} only (Nemotron "
                    f"Omni's sound tower and RADIO video embedder), not for provider {target or 'GPTModelProvider'}")
    return None, {}, {}
