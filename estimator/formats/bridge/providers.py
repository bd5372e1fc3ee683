"""The vision tower of a Megatron-Bridge vision-language ``config.yaml``, and its provider's own fields.

A Bridge run writes its model provider whole (``ConfigContainer.to_yaml()``), so a vision-language run's ``model``
section holds, beside the ``GPTModelProvider`` fields the catalogue declares (:mod:`.catalog`):

- ``_target_``, the provider class, which says the tower's kind (:data:`PROVIDER_TOWERS`);
- ``vision_config``, the Hugging Face vision config the provider builds its tower from. Megatron-Bridge @ 067f987d :
  src/megatron/bridge/training/utils/config_utils.py ``_ConfigContainerBase._convert_value_to_dict`` writes a
  ``PreTrainedConfig`` as ``{_target_: <its class>, <key>: <value>, ...}`` (its fields, without the private ones);
  runs saved before that (Megatron-LM @ d98e8a64 : megatron/training/config/yaml_utils.py
  ``_pretrained_config_representer``) wrote ``{_target_: <class>.from_dict, _call_: true, config_dict: {...}}``.
  Both are read, with the Hugging Face importer's own tower readers (:func:`estimator.formats.hf.towers.read_vision`),
  so a ``config.yaml`` and the Hugging Face ``config.json`` of the same model give the same tower;
- some thirty fields of its own (token ids, ``mrope_section``, ``hf_text_config``, Qwen3-VL's ``dist_train``, ...),
  each classified in :data:`PROVIDER_FIELDS`: mapped, without memory effect (at any value, or at the value that keeps
  Megatron-Core's plain tower), or refused by name.

Nemotron Nano VL's provider has no ``vision_config``: ``NemotronVLModelProvider.provide`` (nemotron_vl/
nemotron_vl_provider.py) hard-codes its RADIO tower, so the provider class and ``vision_model_type: radio`` give it
(:data:`RADIO_TOWER`, the shapes estimator/model/vision.py documents).

Gemma 3 VL's layer spec and activation (``transformer_layer_spec: gemma3_layer_spec``, ``fast_gelu`` gated), which
no Megatron-LM flag says, become the schema's fields through :data:`PROVIDER_SPECS`.

Imports: ``config.errors`` and :mod:`estimator.formats.hf.towers`. Imported by :mod:`.config` and
:mod:`.field_classes` (the catalogue's rows).
"""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from ..hf.towers import read_vision

__all__ = ["PROVIDER_FIELDS", "PROVIDER_SPECS", "PROVIDER_TOWERS", "RADIO_TOWER", "judge_provider_field",
           "provider_spec", "provider_tower"]

_PKG = "megatron.bridge.models."
#: Provider class (``model._target_``) -> the Hugging Face wrapper ``model_type`` whose ``vision_config`` reader
#: builds its tower (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/<family>/*_provider.py, each building
#: its tower from ``self.vision_config``), or ``radio`` for Nemotron Nano VL's hard-coded tower.
PROVIDER_TOWERS = {
    _PKG + "qwen_vl.qwen3_vl_provider.Qwen3VLModelProvider": "qwen3_vl",
    _PKG + "qwen_vl.qwen3_vl_provider.Qwen3VLMoEModelProvider": "qwen3_vl_moe",
    _PKG + "qwen_vl.qwen35_vl_provider.Qwen35VLModelProvider": "qwen3_5",
    _PKG + "qwen_vl.qwen35_vl_provider.Qwen35VLMoEModelProvider": "qwen3_5_moe",
    _PKG + "qwen_vl.qwen25_vl_provider.Qwen25VLModelProvider": "qwen2_5_vl",
    _PKG + "gemma_vl.gemma3_vl_provider.Gemma3VLModelProvider": "gemma3",
    _PKG + "glm_vl.glm_45v_provider.GLM45VModelProvider": "glm4v_moe",
    _PKG + "nemotron_vl.nemotron_vl_provider.NemotronVLModelProvider": "radio",
}

#: Nemotron Nano VL's tower as ``NemotronVLModelProvider.provide`` builds it (32 layers of 1280, 16 heads, MLP 5120,
#: patch 16, a 2048-pixel position table, pixel shuffle 2 x 2, a projector MLP of 20480): model.vision_* fields.
RADIO_TOWER = {"vision_model_type": "radio", "vision_num_layers": 32, "vision_hidden_size": 1280,
               "vision_num_attention_heads": 16, "vision_ffn_hidden_size": 5120, "vision_patch_size": 16,
               "vision_temporal_patch_size": 1, "vision_in_channels": 3, "vision_spatial_merge_size": 2,
               "vision_num_position_embeddings": (2048 // 16) ** 2, "vision_projector_ffn_hidden_size": 20480}

#: transformers' ``PreTrainedConfig`` attributes every config carries (output switches, label maps, generation ids,
#: the dtype, ...): they size no tensor of the tower, and a ``vision_config`` written from the object holds them.
_PRETRAINED_COMMON = frozenset({
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "dtype", "torch_dtype",
    "pruned_heads", "tie_word_embeddings", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder",
    "cross_attention_hidden_size", "add_cross_attention", "tie_encoder_decoder", "architectures", "finetuning_task",
    "id2label", "label2id", "tokenizer_class", "prefix", "bos_token_id", "pad_token_id", "eos_token_id",
    "sep_token_id", "decoder_start_token_id", "task_specific_params", "problem_type", "transformers_version",
    "_name_or_path", "use_return_dict", "output_scores", "return_dict_in_generate"})

_TOKEN = "a token id of the processor: no tensor"
_DUPLICATE = ("the tower is built from vision_config (modelling_qwen3_vl/transformer_config.py "
              "get_vision_model_config); the provider's copy feeds the M-RoPE position ids only: no tensor")
#: name -> (kind, off, why). kind: "no_effect" (without memory effect at any value), "refused" (refused away from
#: ``off``, its value in Megatron-Core's plain tower), "modelled" (read by :func:`provider_tower`).
PROVIDER_FIELDS: dict[str, tuple[str, object, str]] = {
    **{k: ("no_effect", None, _TOKEN) for k in (
        "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id", "vision_token_id",
        "bos_token_id", "eos_token_id", "image_start_token_id", "image_end_token_id", "video_start_token_id",
        "video_end_token_id")},
    **{k: ("no_effect", None, _DUPLICATE) for k in (
        "patch_size", "temporal_patch_size", "in_channels", "spatial_merge_size", "num_position_embeddings",
        "out_hidden_size", "deepstack_visual_indexes")},
    "hf_text_config": ("no_effect", None, "the Hugging Face text config kept for the checkpoint conversion: the "
                       "language model is the provider's own fields"),
    "pretrained_model_name": ("no_effect", None, "a Hugging Face id kept for the checkpoint conversion"),
    "return_dict": ("no_effect", None, "how the Hugging Face tower returns its outputs: no tensor"),
    "head_dim": ("no_effect", None, "the Hugging Face name of the head width: Megatron-Core sizes the heads by "
                 "kv_channels"),
    "language_max_sequence_length": ("no_effect", None, "the length of the M-RoPE table the language model "
                                     "computes per step (no weights; position_embedding_type mrope learns no "
                                     "positions)"),
    "apply_rotary_pos_emb_in_fp32": ("no_effect", None, "the rotary product computed in fp32 and cast back: "
                                     "transient, no saved activation"),
    "mlp_only_layers": ("no_effect", None, "set from the Hugging Face text config and read by no module of "
                        "Bridge's Qwen3-VL model (the MoE layout is moe_layer_freq)"),
    "decoder_sparse_step": ("no_effect", None, "set from the Hugging Face text config and read by no module of "
                            "Bridge's Qwen3-VL model (the MoE layout is moe_layer_freq)"),
    "is_vision_language": ("modelled", None, "Gemma 3's vision-language switch (Gemma3VLModelProvider requires it "
                           "true): the model is its tower and language model, as the gemma-3-4b-it preset counts "
                           "them; the s x s attention bias its language layers take instead of a causal mask is not "
                           "counted"),
    "language_model_type": ("no_effect", None, "Nemotron Nano VL's and Nemotron Omni's language model name, read "
                            "by no module of Bridge (the language model is the provider's own fields)"),
    "use_hf_vision_model": ("refused", False, "transformers' vision tower instead of Megatron-Core's "
                            "(Qwen3VLModel): not modelled"),
    "vision_dp_when_cp": ("refused", False, "the tower split over the context-parallel ranks as data parallel "
                          "(Qwen3VLModel): not modelled"),
    "dist_train": ("refused", None, "the tower and the language model on separate GPUs (DistTrainConfig."
                   "use_dist_train): not modelled"),
    "add_encoder": ("refused", True, "a pipeline stage without the tower: not modelled"),
    "add_decoder": ("refused", True, "a pipeline stage without the language model: not modelled"),
    "vision_config": ("modelled", None, "the vision tower: model.vision_*"),
    "interleaved_attn_pattern": ("modelled", None, "Gemma 3's local / global layers: with is_vision_language true "
                                 "(Gemma 3 VL) every layer drops its window for an attention bias "
                                 "(gemma3_provider.py), so the pattern chooses the bias only; refused for the text "
                                 "model, whose local windows a config.yaml does not map"),
    "vision_model_type": ("modelled", "radio", "Nemotron Nano VL's tower kind: only radio is built"),
    "mm_tokens_per_image": ("modelled", None, "Gemma 3's image tokens: the projector's average pool "
                            "(model.vision_spatial_merge_size)"),
    "vision_projector_config": ("modelled", None, "Gemma 3's projector: checked against the tower and the "
                                "language model"),
}


def judge_provider_field(name: str, value, model: dict | None = None) -> tuple[str, str]:
    """("modelled" | "no_effect" | "refused" | "default", why) for a vision-language provider's own field set to
    ``value`` in the ``model`` section; ``default``: a refused field at its harmless value (nothing to list)."""
    kind, off, why = PROVIDER_FIELDS[name]
    if name == "interleaved_attn_pattern":
        vl = (model or {}).get("is_vision_language") is True
        return ("no_effect" if vl else "refused"), why
    if name == "dist_train":
        on = isinstance(value, dict) and value.get("use_dist_train") not in (None, False)
        return ("refused", why) if on else ("default", why)
    if kind == "refused":
        return ("default", why) if value in (off, None) else ("refused", why)
    return kind, why


#: Provider class -> (the layer-spec function its config.yaml names in ``transformer_layer_spec``, its activation
#: (``activation_func``, ``gated_linear_unit``), the schema model fields they mean). Gemma 3 VL
#: (gemma/gemma3_provider.py ``gemma3_layer_spec``: norms after attention and after the MLP; ``fast_gelu``, gated:
#: GeGLU), the fields its recipe's preset (gemma-3-4b-it) holds; Megatron-LM's flags cannot say them, so they are set
#: after the flags are read, as ``--bridge-recipe`` sets them.
PROVIDER_SPECS = {
    _PKG + "gemma_vl.gemma3_vl_provider.Gemma3VLModelProvider": (
        _PKG + "gemma.gemma3_provider.gemma3_layer_spec", ("megatron.core.activations.fast_gelu", True),
        {"post_layernorm": True, "activation_func": "geglu"}),
}


def provider_spec(target, model: dict) -> dict:
    """The schema model fields that provider ``target``'s layer spec and activation mean (:data:`PROVIDER_SPECS`), and
    ``model`` (the importer's own copy of the section) given a plain GPT stand-in for them (SwiGLU, the default spec),
    which the Megatron-LM flags can say; {} for another provider, or when the section names another spec or
    activation (then read as written)."""
    if target not in PROVIDER_SPECS:
        return {}
    spec_fn, (act, gated), fields = PROVIDER_SPECS[target]
    if model.get("transformer_layer_spec", spec_fn) != spec_fn or model.get("activation_func", act) != act or \
            model.get("gated_linear_unit", gated) is not gated:
        return {}
    model.update(activation_func="torch.nn.functional.silu", gated_linear_unit=True)
    model.pop("transformer_layer_spec", None)
    return dict(fields)


def _vision_dict(vc) -> dict:
    """The Hugging Face vision_config as written, either form (module docstring), without the common attributes."""
    if not isinstance(vc, dict):
        raise ConfigError(Problem("model.vision_config", show(vc), "must be the Hugging Face vision config as "
                                  "ConfigContainer.to_yaml() writes it (a mapping)"))
    if isinstance(vc.get("config_dict"), dict):
        vc = vc["config_dict"]
    return {k: v for k, v in vc.items() if k not in ("_target_", "_call_") and k not in _PRETRAINED_COMMON}


def provider_tower(target, model: dict) -> dict | None:
    """The ``model.vision_*`` fields of the tower of the provider ``target`` (``model._target_``) whose ``model``
    section is given; None for a provider without a modelled tower. Raises :class:`ConfigError` or
    :class:`UnsupportedError` naming the ``model.vision_config`` key a reader refuses."""
    mt = PROVIDER_TOWERS.get(target)
    if mt is None:
        if "vision_config" in model and not target:
            raise ConfigError(Problem("model._target_", None, "a config.yaml with model.vision_config names its "
                                      "provider class, which says the tower's kind (ConfigContainer.to_yaml() "
                                      "writes it)"))
        if "vision_config" in model:
            raise UnsupportedError(f"model.vision_config of model._target_ {target}: the estimator models the towers "
                                   f"of {', '.join(sorted(t.rsplit('.', 1)[1] for t in PROVIDER_TOWERS))} only")
        return None
    if mt == "radio":
        kind = model.get("vision_model_type", "radio")
        if kind != "radio":
            raise UnsupportedError(f"model.vision_model_type {show(kind)}: NemotronVLModelProvider builds the radio "
                                   "tower only")
        return dict(RADIO_TOWER)
    if "vision_config" not in model:
        raise ConfigError(Problem("model.vision_config", None, f"{target.rsplit('.', 1)[1]} builds its tower from "
                                  "it: a config.yaml written by ConfigContainer.to_yaml() holds it"))
    hf = {"vision_config": _vision_dict(model["vision_config"]),
          "mm_tokens_per_image": model.get("mm_tokens_per_image")}
    m: dict = {}
    try:
        read_vision(hf, mt, m, True)
    except ConfigError as exc:
        raise ConfigError([Problem(p.field.replace("config.json:", "model."), p.value, p.message)
                           for p in exc.problems]) from None
    except UnsupportedError as exc:
        raise UnsupportedError(str(exc).replace("config.json:", "model.")) from None
    if mt == "gemma3":
        _check_gemma_projector(model.get("vision_projector_config"), m, model.get("hidden_size"),
                               hf["vision_config"], hf["mm_tokens_per_image"])
    return m


def _check_gemma_projector(proj, tower: dict, hidden, vc: dict, tokens) -> None:
    """Gemma 3's projector (modeling_gemma3_vl.py ``Gemma3VLMultimodalProjector``: an RMSNorm of ``input_size``, a
    linear ``input_size`` -> ``hidden_size``, an average pool from ``image_size / patch_dim`` patches a side to
    sqrt(``tokens_per_image``)) is counted from the tower and the language model; a projector config that says
    otherwise is refused by name rather than counted wrong."""
    if not isinstance(proj, dict):
        return
    want = {"input_size": tower["vision_hidden_size"], "hidden_size": hidden, "image_size": vc.get("image_size"),
            "patch_dim": tower["vision_patch_size"], "tokens_per_image": 256 if tokens is None else tokens}
    problems = [Problem(f"model.vision_projector_config.{k}", show(proj[k]), f"must be {show(v)} (the tower's and "
                        "the language model's, as Gemma3VLBridge sets it): another projector is not modelled")
                for k, v in want.items() if k in proj and v is not None and proj[k] != v]
    if problems:
        raise ConfigError(problems)
