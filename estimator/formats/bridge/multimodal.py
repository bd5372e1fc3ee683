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
- the vision encoder's CUDA graphs (``vision_cuda_graph_impl: transformer_engine``) are refused: Megatron-LM @
  d98e8a64 : megatron/core/transformer/cuda_graphs.py ``VisionTECudaGraphHelper`` captures one graph per tower
  layer and per micro-batch of the whole step (``num_microbatches``, not those in flight), each with static
  input and output buffers of ``get_vision_cuda_graph_seq_length`` tokens; the graphed tower
  (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/vision_model.py
  ``_maybe_pad_vision_sequence_for_cuda_graph``, ``_vision_forward_packed_attention_setup``) pads all the
  micro-batch's patches to ``max_vision_cuda_graph_seq_length`` and runs full attention over them at once (an
  additive s x s mask for the padding) instead of one packed sequence per image. Its two companions,
  ``vision_cuda_graph_scope`` and ``max_vision_cuda_graph_seq_length``, are read only there (modelling_qwen3_vl/
  transformer_config.py ``get_vision_model_config`` clears the tower's graph modules and sets its
  ``cuda_graph_impl`` to none otherwise; the padding and the helper run only with ``transformer_engine``), so
  with ``vision_cuda_graph_impl`` none they are without effect at any value.
- Qwen3-Omni's ``vit_gradient_checkpointing`` and Nemotron Omni's video ``temporal_patch_dim`` are refused when set
  away from their defaults, and without effect at them.
- the audio / sound towers (``has_sound``, ``freeze_sound_encoder``, ``freeze_sound_projection``,
  ``freeze_audio_model``, ``freeze_audio_projection``) are refused when on: no audio tower is modelled.
- Nemotron Omni's video fields (nemotron_omni_provider.py, passed to Megatron-LM @ d98e8a64 :
  megatron/core/models/vision/radio.py ``RADIOViTModel``): ``separate_video_embedder`` with ``temporal_patch_dim``
  above 1 builds a second patch embedder for frame pairs (``video_embedder``, 3 x temporal_patch_dim x patch^2 x
  hidden) beside the image one, refused when on like ``temporal_patch_dim`` (video is not modelled);
  ``temporal_ckpt_compat`` only registers a state-dict pre-hook that fills the temporal embedder when a checkpoint
  lacks it, without effect on memory at any value.
- Qwen3-Omni's ``multimodal_attn_impl`` (qwen_omni/modeling_qwen3_omni/thinker_model.py
  ``_configure_multimodal_attn_impl``) picks the attention of its Hugging Face vision and audio towers: without
  effect at ``auto``, refused otherwise (no Qwen3-Omni tower is modelled).
"""

from __future__ import annotations

__all__ = ["MULTIMODAL", "NO_EFFECT", "TRAINING_FIELD", "hf_tower", "judge"]

_CUDA_GRAPHS = ("the vision encoder's CUDA graphs (Megatron-Core's VisionTECudaGraphHelper) are not modelled: "
                "static input and output buffers per tower layer and per micro-batch of the whole step, and a "
                "tower that pads the micro-batch's patches to max_vision_cuda_graph_seq_length and attends over "
                "all of them at once (an additive s x s mask) instead of per image")
#: The fields read only when the vision encoder's CUDA graphs are on (module docstring).
_GRAPH_COMPANIONS = ("vision_cuda_graph_scope", "max_vision_cuda_graph_seq_length")
_AUDIO = "an audio / sound tower is not modelled (only vision towers are)"

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
    "temporal_patch_dim": (1, "video frames per temporal patch: video is not modelled (one image per temporal "
                           "patch)"),
    "has_sound": (False, _AUDIO),
    "freeze_sound_encoder": (False, _AUDIO),
    "freeze_sound_projection": (False, _AUDIO),
    "freeze_audio_model": (False, _AUDIO),
    "freeze_audio_projection": (False, _AUDIO),
    "separate_video_embedder": (False, "Nemotron Omni's separate video patch embedder (RADIOViTModel.video_embedder "
                                "for frame pairs): video is not modelled (one image per temporal patch)"),
    "temporal_ckpt_compat": (False, None),
    "multimodal_attn_impl": ("auto", "the attention implementation of Qwen3-Omni's Hugging Face vision and audio "
                             "towers: no Qwen3-Omni tower is modelled"),
}

#: Fields without effect on memory at any value: field -> why.
NO_EFFECT = {"temporal_ckpt_compat": "a checkpoint-loading hook of Nemotron Omni's RADIO tower (fills the temporal "
                                     "patch embedder when a checkpoint lacks it): no memory effect"}

#: The mapped fields: model field -> the estimator's training field.
TRAINING_FIELD = {"freeze_vision_model": "freeze_vision_model",
                  "freeze_vision_projection": "freeze_vision_projection",
                  "freeze_language_model": "freeze_language_model"}


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
    if name in TRAINING_FIELD:
        return "modelled", f"training.{TRAINING_FIELD[name]} (needs a vision tower in the model)"
    if _off(value, default):
        return "no_effect", f"the multimodal provider's default ({default!r}): nothing to model"
    return "refused", refused or ""


def hf_tower(hf_id: str | None) -> dict | None:
    """The ``model.vision_*`` fields of Hugging Face model ``hf_id`` as the offline catalog's import reads it
    (:func:`estimator.formats.catalog.status`); None when the id is not catalogued, its import is refused, or it holds
    no vision tower the estimator models."""
    if not hf_id:
        return None
    from ...config.errors import ConfigError
    from ..catalog import status
    try:
        model, _ = status(hf_id)
    except ConfigError:                 # not in the offline catalog
        return None
    if not model or model.get("vision_num_layers") is None:
        return None
    return {k: v for k, v in model.items() if k.startswith("vision_")}
