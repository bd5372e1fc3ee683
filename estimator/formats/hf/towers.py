"""The vision towers read from a multimodal ``config.json``'s ``vision_config`` into the ``model.vision_*`` fields
(estimator/model/vision.py for what each kind is built of): Qwen3.5's and Qwen3-VL's, Qwen2.5-VL's
(:func:`qwen_vision`), Gemma 3's SigLIP (:func:`siglip_vision`), Kimi K2.5's MoonViT (:func:`moonvit_vision`),
GLM-4.5V's (:func:`glm4v_vision`), ERNIE-4.5-VL's ViT and resampler (:func:`ernie_vision`), EXAONE 4.5's
(:func:`exaone45_vision`), Step 3.7's Perception-Encoder (:func:`step37_vision`), Gemma 4's
(:func:`gemma4_vision`) and Mistral 3's Pixtral (:func:`pixtral_vision`); :func:`read_vision` picks the reader for a
wrapper's ``model_type``. Every key that sizes a tensor is read, type-checked and bounded; a key understood by none is
refused by name."""

from __future__ import annotations

import math

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .keys import PRETRAINED_DEFAULTS
from .reader import LISTED_KEYS, MODEL_SPECS

#: vision_config keys -> the model field they become (Megatron-Bridge @ 067f987d :
#: src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/transformer_config.py ``get_vision_model_config``).
_VISION_FIELDS = {"depth": "vision_num_layers", "hidden_size": "vision_hidden_size",
                  "num_heads": "vision_num_attention_heads", "intermediate_size": "vision_ffn_hidden_size",
                  "patch_size": "vision_patch_size", "temporal_patch_size": "vision_temporal_patch_size",
                  "in_channels": "vision_in_channels", "spatial_merge_size": "vision_spatial_merge_size",
                  "num_position_embeddings": "vision_num_position_embeddings",
                  "out_hidden_size": "vision_out_hidden_size"}


_VISION_INERT = frozenset({"model_type", "initializer_range", "hidden_act", "deepstack_visual_indexes", "dtype",
                           "torch_dtype", "_name_or_path", "transformers_version"})


#: Qwen2.5-VL's vision_config keys that size no tensor: the attention windows (window_size, and the layers that
#: attend fully, fullatt_block_indexes: the same weights, and attention memory linear in the patches either way),
#: the video time scale (tokens_per_second) and spatial_patch_size, which transformers' model never reads (the
#: Conv3d kernel is patch_size): huggingface/transformers @ 00b676f8 : src/transformers/models/qwen2_5_vl/
#: modeling_qwen2_5_vl.py ``Qwen2_5_VisionTransformerPretrainedModel``.
_QWEN25_VISION_INERT = frozenset({"window_size", "fullatt_block_indexes", "tokens_per_second", "spatial_patch_size",
                                  "in_chans"})


def _require_dict(vc, wrapper: str) -> None:
    """A vision_config must be a JSON object: the tower's parameters depend on it."""
    if not isinstance(vc, dict):
        raise ConfigError(Problem("config.json:vision_config", vc, f"is required for {wrapper} (the vision tower)"))


def _refuse_unknown(vc: dict, strict: bool, what: str, *known, refused=()) -> None:
    """With ``strict``, refuse the vision_config keys that none of the ``known`` key sets holds (Hugging Face's
    PretrainedConfig defaults are inert), and those in ``refused``; ``what`` ends the message (" for <wrapper>")."""
    if not strict:
        return
    unknown = sorted(str(k) for k in vc if k in refused
                     or not any(k in keys for keys in known) and k not in PRETRAINED_DEFAULTS)
    if unknown:
        raise UnsupportedError(f"config.json:vision_config key(s) not understood{what}: "
                               f"{', '.join(unknown[:LISTED_KEYS])}")


def _qwen25_vision(vc: dict, m: dict, strict: bool) -> None:
    """Qwen2.5-VL's tower (Megatron-Bridge @ 067f987d : qwen_vl/modeling_qwen25_vl.py builds transformers'
    ``Qwen2_5_VisionTransformerPretrainedModel`` from this vision_config): depth, hidden_size, num_heads,
    intermediate_size (the gated MLP), patch_size, temporal_patch_size, spatial_merge_size and out_hidden_size are
    required; in_channels is transformers' default 3 when absent, and the older in_chans must agree with it."""
    fields = {k: v for k, v in _VISION_FIELDS.items() if k not in ("num_position_embeddings", "in_channels")}
    _refuse_unknown(vc, strict, " for qwen2_5_vl", _VISION_FIELDS, _VISION_INERT, _QWEN25_VISION_INERT,
                    refused=("num_position_embeddings", "deepstack_visual_indexes"))
    act = vc.get("hidden_act", "silu")
    if act != "silu":
        raise UnsupportedError(f"config.json:vision_config.hidden_act {show(act)}: Qwen2.5-VL's tower is mapped with "
                               "its gated SiLU MLP only (silu)")
    channels = vc.get("in_channels", 3)
    if "in_chans" in vc and vc["in_chans"] != channels:
        raise ConfigError(Problem("config.json:vision_config.in_chans", vc["in_chans"], f"must equal in_channels "
                                  f"({show(channels)}): transformers builds the patch embedding from in_channels"))
    _read_fields(vc, {**fields, "in_channels": "vision_in_channels"}, m, {"in_channels": 3})
    m["vision_model_type"] = "qwen2_5_vl"


def _read_fields(vc: dict, fields: dict, m: dict, defaults: dict | None = None) -> None:
    """Each vision_config key of ``fields`` into its model field, an integer within the field's bounds."""
    for key, name in fields.items():
        v = vc.get(key, (defaults or {}).get(key))
        spec = MODEL_SPECS[name]
        if isinstance(v, bool) or not isinstance(v, int) or not spec.min <= v <= spec.max:
            raise ConfigError(Problem(f"config.json:vision_config.{key}", v, f"must be an integer from "
                                      f"{spec.min:g} to {spec.max:g} (it becomes model.{name})"))
        m[name] = v


#: Gemma 3's SigLIP vision_config: the keys that size its tensors (each required: transformers' SiglipVisionConfig
#: defaults changed between releases) -> the model field, and the keys that size none. vision_use_head is forced
#: false by Megatron-Bridge (gemma_vl/gemma3_vl_bridge.py), so the pooling head is never built.
_SIGLIP_FIELDS = {"num_hidden_layers": "vision_num_layers", "hidden_size": "vision_hidden_size",
                  "num_attention_heads": "vision_num_attention_heads", "intermediate_size": "vision_ffn_hidden_size",
                  "patch_size": "vision_patch_size", "num_channels": "vision_in_channels"}
_SIGLIP_INERT = frozenset({"model_type", "vision_use_head", "layer_norm_eps", "initializer_range", "dtype",
                           "torch_dtype", "_name_or_path", "transformers_version", "image_size", "hidden_act",
                           "attention_dropout"})


def siglip_vision(vc, m: dict, strict: bool, tokens_per_image) -> None:
    """Gemma 3's vision tower, transformers' SigLIP vision model as Megatron-Bridge builds it
    (gemma_vl/modeling_gemma3_vl.py ``Gemma3VLModel``), and its projector: num_hidden_layers layers of hidden_size,
    num_attention_heads heads and a tanh-GELU MLP of intermediate_size, a Conv2d of patch_size over num_channels
    (transformers' default 3), (image_size / patch_size)^2 learned positions (model.vision_num_position_embeddings),
    and the projector's average pool of side (image_size / patch_size) / sqrt(mm_tokens_per_image)
    (model.vision_spatial_merge_size; Gemma3Config's default 256 tokens an image)."""
    _require_dict(vc, "gemma3")
    _refuse_unknown(vc, strict, " for gemma3", _SIGLIP_FIELDS, _SIGLIP_INERT)
    act = vc.get("hidden_act", "gelu_pytorch_tanh")
    if act != "gelu_pytorch_tanh":
        raise UnsupportedError(f"config.json:vision_config.hidden_act {show(act)}: Gemma 3's SigLIP tower is mapped "
                               "with its tanh GELU (gelu_pytorch_tanh) only")
    if vc.get("attention_dropout", 0.0) not in (0, 0.0):
        raise UnsupportedError(f"config.json:vision_config.attention_dropout {show(vc['attention_dropout'])}: only 0 "
                               "is mapped (the tower's attention keeps no dropout mask)")
    _read_fields(vc, _SIGLIP_FIELDS, m, {"num_channels": 3})
    size, patch = vc.get("image_size"), m["vision_patch_size"]
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size % patch:
        raise ConfigError(Problem("config.json:vision_config.image_size", size, f"must be a positive multiple of "
                                  f"patch_size ({patch}): the learned positions cover whole patches"))
    side = size // patch
    tokens = 256 if tokens_per_image is None else tokens_per_image
    pooled = math.isqrt(tokens) if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else 0
    if not pooled or pooled * pooled != tokens or side % pooled:
        raise ConfigError(Problem("config.json:mm_tokens_per_image", tokens_per_image, f"must be a square number "
                                  f"whose root divides the {side} patches of an image side (the projector's "
                                  "average pool)"))
    m.update(vision_num_position_embeddings=side * side, vision_spatial_merge_size=side // pooled,
             vision_temporal_patch_size=1, vision_model_type="gemma3_vl")


#: Kimi K2.5's vision_config (MoonViT and its PatchMergerMLP): the keys that size a tensor -> the model field; the
#: keys whose value is checked because only it is mapped; and the keys that size none (the video time table is a
#: buffer, video attention and the attention kernel change no tensor, the projector's LayerNorm epsilon neither).
_MOONVIT_FIELDS = {"vt_num_hidden_layers": "vision_num_layers", "vt_hidden_size": "vision_hidden_size",
                   "vt_num_attention_heads": "vision_num_attention_heads",
                   "vt_intermediate_size": "vision_ffn_hidden_size", "patch_size": "vision_patch_size",
                   "text_hidden_size": "vision_out_hidden_size"}
_MOONVIT_ONLY = {"merge_type": "sd2_tpool", "mm_projector_type": "patchmerger", "pos_emb_type": "divided_fixed",
                 "projector_hidden_act": "gelu"}
_MOONVIT_INERT = frozenset({"model_type", "_attn_implementation", "init_pos_emb_time", "video_attn_type",
                            "projector_ln_eps", "init_pos_emb_height", "init_pos_emb_width", "merge_kernel_size",
                            "mm_hidden_size"})


def moonvit_vision(vc, m: dict, strict: bool) -> None:
    """Kimi K2.5's vision tower (MoonViT3dPretrainedModel) and projector (PatchMergerMLP), the checkpoint's own
    modules as Megatron-Bridge builds them (kimi_vl/modeling_kimi_k25_vl.py): vt_num_hidden_layers layers of
    vt_hidden_size, vt_num_attention_heads heads and a tanh-GELU MLP of vt_intermediate_size, a Conv2d of patch_size
    over 3 channels, init_pos_emb_height x init_pos_emb_width learned positions (a square grid, interpolated to each
    image), and a merger of merge_kernel_size (a square) patches into text_hidden_size. mm_hidden_size must be
    vt_hidden_size (the merger's input is the tower's output)."""
    _require_dict(vc, "kimi_k25")
    _refuse_unknown(vc, strict, " for kimi_k25", _MOONVIT_FIELDS, _MOONVIT_ONLY, _MOONVIT_INERT)
    for key, only in _MOONVIT_ONLY.items():
        if vc.get(key, only) != only:
            raise UnsupportedError(f"config.json:vision_config.{key} {show(vc[key])} for kimi_k25: only {only!r} is "
                                   "mapped (Kimi K2.5's MoonViT and PatchMergerMLP)")
    _read_fields(vc, _MOONVIT_FIELDS, m)
    if vc.get("mm_hidden_size", m["vision_hidden_size"]) != m["vision_hidden_size"]:
        raise ConfigError(Problem("config.json:vision_config.mm_hidden_size", vc["mm_hidden_size"],
                                  f"must equal vt_hidden_size ({m['vision_hidden_size']}): the projector reads the "
                                  "tower's output"))
    h, w = vc.get("init_pos_emb_height"), vc.get("init_pos_emb_width")
    if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in (h, w)) or h != w:
        raise ConfigError(Problem("config.json:vision_config.init_pos_emb_height", h, "must be a positive integer "
                                  f"equal to init_pos_emb_width ({show(w)}): the learned positions, a square grid"))
    merge = vc.get("merge_kernel_size")
    if (not isinstance(merge, list) or len(merge) != 2 or merge[0] != merge[1]
            or isinstance(merge[0], bool) or not isinstance(merge[0], int) or merge[0] <= 0):
        raise ConfigError(Problem("config.json:vision_config.merge_kernel_size", merge, "must be [k, k], a square "
                                  "of patches the projector merges into one token"))
    if h * w > MODEL_SPECS["vision_num_position_embeddings"].max:
        raise ConfigError(Problem("config.json:vision_config.init_pos_emb_height", h, "is too large (its square "
                                  "becomes model.vision_num_position_embeddings)"))
    m.update(vision_num_position_embeddings=h * w, vision_spatial_merge_size=merge[0], vision_temporal_patch_size=1,
             vision_in_channels=3, vision_model_type="kimi_k25")


#: GLM-4.5V's vision_config (transformers' Glm4vVisionConfig): key -> model field; out_hidden_size is both the
#: tower's MLP width (Glm4VisionMlp) and the merger's output, intermediate_size the merger's gated MLP.
_GLM4V_FIELDS = {"depth": "vision_num_layers", "hidden_size": "vision_hidden_size",
                 "num_heads": "vision_num_attention_heads", "out_hidden_size": "vision_out_hidden_size",
                 "intermediate_size": "vision_projector_ffn_hidden_size", "patch_size": "vision_patch_size",
                 "temporal_patch_size": "vision_temporal_patch_size", "spatial_merge_size": "vision_spatial_merge_size",
                 "in_channels": "vision_in_channels"}
_GLM4V_INERT = frozenset({"model_type", "initializer_range", "rms_norm_eps", "dtype", "torch_dtype", "image_size",
                          "attention_bias", "attention_dropout", "hidden_act", "_name_or_path",
                          "transformers_version"})


def glm4v_vision(vc, m: dict, strict: bool) -> None:
    """GLM-4.5V's vision tower, transformers' Glm4vVisionModel as Megatron-Bridge builds it (glm_vl/
    modeling_glm_45v.py): depth layers of hidden_size with num_heads heads and a gated SiLU MLP of out_hidden_size,
    a Conv3d of temporal_patch_size x patch_size^2 over in_channels (default 3), (image_size / patch_size)^2
    learned positions, a downsample of spatial_merge_size and a merger to out_hidden_size with a gated MLP of
    intermediate_size. attention_bias true (biases on qkv), another hidden_act and attention dropout are refused."""
    _require_dict(vc, "glm4v_moe")
    _refuse_unknown(vc, strict, " for glm4v_moe", _GLM4V_FIELDS, _GLM4V_INERT)
    for key, only in (("attention_bias", False), ("hidden_act", "silu"), ("attention_dropout", 0.0)):
        if vc.get(key, only) != only:
            raise UnsupportedError(f"config.json:vision_config.{key} {show(vc[key])} for glm4v_moe: only "
                                   f"{show(only)} is mapped (GLM-4.5V's tower)")
    _read_fields(vc, _GLM4V_FIELDS, m, {"in_channels": 3})
    size, patch = vc.get("image_size"), m["vision_patch_size"]
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size % patch:
        raise ConfigError(Problem("config.json:vision_config.image_size", size, f"must be a positive multiple of "
                                  f"patch_size ({patch}): the learned positions cover whole patches"))
    m.update(vision_num_position_embeddings=(size // patch) ** 2, vision_ffn_hidden_size=m["vision_out_hidden_size"],
             vision_model_type="glm4v")


def qwen_vision(vc, m: dict, strict: bool, wrapper: str = "qwen3_vl") -> None:
    """The vision tower of a Qwen3.5, Qwen3-VL or (``wrapper`` qwen2_5_vl) Qwen2.5-VL config.json (its
    vision_config), as Megatron-Bridge builds it. Qwen3.5 and Qwen3-VL
    (modelling_qwen3_vl/transformer_config.py ``get_vision_model_config``: num_layers depth, hidden_size, num_heads
    heads without GQA, ffn intermediate_size, biases on every linear, LayerNorm, tanh-GELU MLP not gated;
    vision_model.py ``Qwen3VLVisionModel``: a Conv3d patch embedding, num_position_embeddings learned positions,
    the patch merger to out_hidden_size; transformer_block.py: one deepstack merger per deepstack_visual_indexes
    entry, Qwen3-VL's): every value is required (the tower's parameters depend on them); hidden_act other than
    gelu_pytorch_tanh is refused: Bridge hard-wires the activation."""
    _require_dict(vc, wrapper)
    if wrapper == "qwen2_5_vl":
        _qwen25_vision(vc, m, strict)
        return
    _refuse_unknown(vc, strict, "", _VISION_FIELDS, _VISION_INERT)
    act = vc.get("hidden_act", "gelu_pytorch_tanh")
    if act != "gelu_pytorch_tanh":
        raise UnsupportedError(f"config.json:vision_config.hidden_act {show(act)}: Megatron-Bridge's vision tower "
                               "uses the tanh GELU (gelu_pytorch_tanh) whatever the config says; only that is mapped")
    deep = vc.get("deepstack_visual_indexes")
    deep = [] if deep is None else deep
    depth = vc.get("depth")
    if not isinstance(deep, list) or not all(        # the element check first: set() needs hashable items
            isinstance(i, int) and not isinstance(i, bool) and isinstance(depth, int) and 0 <= i < depth
            for i in deep) or len(set(deep)) != len(deep):
        raise ConfigError(Problem("config.json:vision_config.deepstack_visual_indexes", deep, "must be a list of "
                                  "distinct tower layer indices in 0..depth-1 (one deepstack merger each)"))
    if deep:
        m["vision_deepstack_mergers"] = len(deep)
    _read_fields(vc, _VISION_FIELDS, m)


#: Wrappers whose vision_config :func:`qwen_vision` maps into the model.vision_* fields.
#: ERNIE-4.5-VL's vision_config (huggingface/transformers @ 020a37d2 : src/transformers/models/ernie4_5_vl_moe/
#: configuration_ernie4_5_vl_moe.py ``Ernie4_5_VLMoeVisionConfig``, whose defaults fill the keys left out) -> the
#: model field; temporal_merge_size is the resampler's (estimator/model/vision.py: 2, the only value mapped).
_ERNIE_FIELDS = {"depth": "vision_num_layers", "hidden_size": "vision_hidden_size",
                 "num_heads": "vision_num_attention_heads", "intermediate_size": "vision_ffn_hidden_size",
                 "patch_size": "vision_patch_size", "in_channels": "vision_in_channels",
                 "spatial_merge_size": "vision_spatial_merge_size"}
_ERNIE_DEFAULTS = {"depth": 32, "hidden_size": 1280, "num_heads": 16, "intermediate_size": 5120, "patch_size": 14,
                   "in_channels": 3, "spatial_merge_size": 2}
_ERNIE_INERT = frozenset({"model_type", "initializer_range", "dtype", "torch_dtype", "_name_or_path",
                          "transformers_version", "rms_norm_eps", "hidden_act", "temporal_merge_size"})


def ernie_vision(vc, m: dict, strict: bool) -> None:
    """ERNIE-4.5-VL's ViT and resampler (model.vision_model_type ernie45_vl), transformers' modules as
    Megatron-Bridge @ 067f987d : ernie_vl/modeling_ernie45_vl/model.py builds them (use_mg_vit false): depth blocks
    of hidden_size, num_heads, a quick-GELU MLP of intermediate_size, a linear patch embedding of in_channels x
    patch_size^2 (one frame: vision_temporal_patch_size 1), spatial_merge_size; another hidden_act or a
    temporal_merge_size other than 2 is refused."""
    _require_dict(vc, "ernie4_5_vl_moe")
    _refuse_unknown(vc, strict, " for ernie4_5_vl_moe", _ERNIE_FIELDS, _ERNIE_INERT)
    for key, only in (("hidden_act", "quick_gelu"), ("temporal_merge_size", 2)):
        if vc.get(key, only) != only:
            raise UnsupportedError(f"config.json:vision_config.{key} {show(vc[key])} for ernie4_5_vl_moe: only "
                                   f"{show(only)} is mapped (ERNIE-4.5-VL's tower and resampler)")
    _read_fields(vc, _ERNIE_FIELDS, m, _ERNIE_DEFAULTS)
    m.update(vision_temporal_patch_size=1, vision_model_type="ernie45_vl")


#: EXAONE 4.5's vision_config (transformers' Exaone4_5_VisionConfig, Qwen2_5_VLVisionConfig's keys and
#: num_key_value_heads, default 8: huggingface/transformers modular_exaone4_5.py) -> the model field. The windows
#: (window_size, fullatt_block_indexes), the video time scale and spatial_patch_size / in_chans size no tensor
#: (_QWEN25_VISION_INERT).
_EXAONE45_FIELDS = {"depth": "vision_num_layers", "hidden_size": "vision_hidden_size",
                    "num_heads": "vision_num_attention_heads", "num_key_value_heads": "vision_num_query_groups",
                    "intermediate_size": "vision_ffn_hidden_size", "patch_size": "vision_patch_size",
                    "temporal_patch_size": "vision_temporal_patch_size", "in_channels": "vision_in_channels",
                    "spatial_merge_size": "vision_spatial_merge_size", "out_hidden_size": "vision_out_hidden_size"}


def exaone45_vision(vc, m: dict, strict: bool) -> None:
    """EXAONE 4.5's vision tower as Megatron-Bridge @ 067f987d : exaone/exaone45/modelling_exaone45/
    transformer_config.py ``get_vision_model_config`` builds it from this vision_config: depth Megatron-Core layers of
    hidden_size, num_heads heads in num_key_value_heads groups (transformers' default 8), a gated SiLU MLP of
    intermediate_size (hard-wired: another hidden_act is refused), a Conv3d of temporal_patch_size x patch_size^2 over
    in_channels (default 3), a merger of spatial_merge_size^2 patches into out_hidden_size. Every other key that
    sizes a tensor is required; in_chans must agree with in_channels."""
    _require_dict(vc, "exaone4_5")
    _refuse_unknown(vc, strict, " for exaone4_5", _EXAONE45_FIELDS, _VISION_INERT, _QWEN25_VISION_INERT)
    act = vc.get("hidden_act", "silu")
    if act != "silu":
        raise UnsupportedError(f"config.json:vision_config.hidden_act {show(act)} for exaone4_5: Megatron-Bridge's "
                               "EXAONE 4.5 tower is a gated SiLU MLP whatever the config says; only silu is mapped")
    _read_fields(vc, _EXAONE45_FIELDS, m, {"in_channels": 3, "num_key_value_heads": 8})
    channels = m["vision_in_channels"]
    if "in_chans" in vc and vc["in_chans"] != channels:
        raise ConfigError(Problem("config.json:vision_config.in_chans", vc["in_chans"], f"must equal in_channels "
                                  f"({show(channels)}): the patch embedding is built from in_channels"))
    m["vision_model_type"] = "exaone45"


#: Step 3.7's vision_config (Megatron-Bridge @ 067f987d : stepfun/configuration_step37.py ``Step37VisionConfig``,
#: whose defaults fill the keys left out: PE-G/14, 47 layers of 1536, 16 heads, mlp_ratio 8960 / 1536, 728-pixel
#: images of 14-pixel patches) -> the model field; the switches whose value is checked because only it is mapped
#: (the released tower's: Step37VisionModel builds other modules for the others); and the keys that size no tensor.
_STEP37_FIELDS = {"layers": "vision_num_layers", "width": "vision_hidden_size", "heads": "vision_num_attention_heads",
                  "patch_size": "vision_patch_size", "num_channels": "vision_in_channels"}
_STEP37_DEFAULTS = {"width": 1536, "layers": 47, "heads": 16, "num_channels": 3, "image_size": 728,
                    "mlp_ratio": 8960 / 1536, "patch_size": 14}
_STEP37_ONLY = {"hidden_act": "quick_gelu", "use_cls_token": False, "use_ln_pre": True, "use_ln_post": False,
                "use_abs_posemb": True, "use_rope2d": True}
_STEP37_INERT = frozenset({"model_type", "image_size", "mlp_ratio", "layer_norm_eps", "ls_init_value", "rope_theta",
                           "rope_max_freq", "rope_num_freqs", "rope_theta_rescale_factor", "rope_freqs_for", "dtype",
                           "torch_dtype", "_name_or_path", "transformers_version"})


def step37_vision(hf: dict, m: dict, strict: bool) -> None:
    """Step 3.7's Perception-Encoder tower and projector (model.vision_model_type step37) as Megatron-Bridge @ 067f987d
    : stepfun/modelling_step37/vision_model.py ``Step37VisionModel`` and image_insert_embedding.py build them: layers
    blocks of width with heads heads and a quick-GELU MLP of int(width x mlp_ratio), a Conv2d of patch_size over
    num_channels, (image_size / patch_size)^2 learned positions, two stride-2 convolutions (a 4 x 4 merge) and the
    projector Linear(4 width, the language model's hidden size). The wrapper's projector_bias true and an
    understand_projector_stride other than 2 are refused."""
    vc = hf.get("vision_config")
    _require_dict(vc, "step3p7")
    _refuse_unknown(vc, strict, " for step3p7", _STEP37_FIELDS, _STEP37_ONLY, _STEP37_INERT)
    for key, only in _STEP37_ONLY.items():
        if vc.get(key, only) != only:
            raise UnsupportedError(f"config.json:vision_config.{key} {show(vc[key])} for step3p7: only {show(only)} "
                                   "is mapped (Step 3.7's released Perception-Encoder tower)")
    for key, only in (("projector_bias", False), ("understand_projector_stride", 2)):
        if hf.get(key, only) != only:
            raise UnsupportedError(f"config.json:{key} {show(hf[key])} for step3p7: only {show(only)} is mapped "
                                   "(Megatron-Bridge's Step37ModelProvider default)")
    _read_fields(vc, _STEP37_FIELDS, m, _STEP37_DEFAULTS)
    hv, patch = m["vision_hidden_size"], m["vision_patch_size"]
    ratio = vc.get("mlp_ratio", _STEP37_DEFAULTS["mlp_ratio"])
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio * hv <= \
            MODEL_SPECS["vision_ffn_hidden_size"].max:
        raise ConfigError(Problem("config.json:vision_config.mlp_ratio", ratio, "must be a positive number: the "
                                  f"MLP is int(width x mlp_ratio) wide (width {hv})"))
    size = vc.get("image_size", _STEP37_DEFAULTS["image_size"])
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size % (4 * patch) or \
            (size // patch) ** 2 > MODEL_SPECS["vision_num_position_embeddings"].max:
        raise ConfigError(Problem("config.json:vision_config.image_size", size, f"must be a positive multiple of 4 "
                                  f"x patch_size ({4 * patch}): the learned positions cover whole patches, which the "
                                  "two stride-2 convolutions halve twice"))
    m.update(vision_ffn_hidden_size=int(hv * ratio), vision_num_position_embeddings=(size // patch) ** 2,
             vision_spatial_merge_size=4, vision_temporal_patch_size=1, vision_model_type="step37")


#: Gemma 4's vision_config (huggingface/transformers @ 0246b4f3 : models/gemma4/modeling_gemma4.py): the keys that
#: size a tensor -> the model field (each required), and the keys that size none: the rotary positions
#: (max_position_embeddings, rope_parameters: a buffer), global_head_dim (read by the text attention only; the vision
#: attention's width is head_dim), attention_bias (``Gemma4ClippableLinear`` has no bias whatever it says), the norms'
#: epsilon, ``standardize`` (two buffers), the processor's token budgets (default_output_length, and
#: image_seq_length / video_seq_length in NVIDIA's re-saved Gemma-4-31B-IT-NVFP4: 280 and 70 tokens), and the
#: PretrainedConfig attributes transformers writes into a nested config (architectures, id2label, return_dict, ...).
_GEMMA4_FIELDS = {"num_hidden_layers": "vision_num_layers", "hidden_size": "vision_hidden_size",
                  "num_attention_heads": "vision_num_attention_heads", "intermediate_size": "vision_ffn_hidden_size",
                  "patch_size": "vision_patch_size", "pooling_kernel_size": "vision_spatial_merge_size",
                  "position_embedding_size": "vision_num_position_embeddings"}
_GEMMA4_INERT = frozenset({"model_type", "dtype", "torch_dtype", "_name_or_path", "transformers_version",
                           "initializer_range", "max_position_embeddings", "rope_parameters", "global_head_dim",
                           "attention_bias", "rms_norm_eps", "standardize", "default_output_length", "head_dim",
                           "num_key_value_heads", "hidden_activation", "use_clipped_linears", "attention_dropout",
                           "architectures", "id2label", "label2id", "is_encoder_decoder", "output_attentions",
                           "output_hidden_states", "return_dict", "image_seq_length", "video_seq_length"})


def gemma4_vision(vc, m: dict, strict: bool) -> None:
    """Gemma 4's vision tower and embedder (model.vision_model_type gemma4), transformers' ``Gemma4VisionModel`` and
    ``Gemma4MultimodalEmbedder`` as Megatron-Bridge @ 067f987d : gemma_vl/modeling_gemma4_vl.py builds them:
    num_hidden_layers layers of hidden_size, num_attention_heads heads of head_dim (num_key_value_heads must equal
    the heads and head_dim be hidden_size / heads: the only shapes mapped), a gated tanh-GELU MLP of
    intermediate_size, patches of patch_size, two position tables of position_embedding_size rows, the average pool
    of pooling_kernel_size a side; clipped linears (their clamps keep more) and attention dropout are refused."""
    _require_dict(vc, "gemma4")
    _refuse_unknown(vc, strict, " for gemma4", _GEMMA4_FIELDS, _GEMMA4_INERT)
    _read_fields(vc, _GEMMA4_FIELDS, m)
    heads, hv = m["vision_num_attention_heads"], m["vision_hidden_size"]
    for key, want, why in (("hidden_activation", "gelu_pytorch_tanh", "its tanh GELU MLP only"),
                           ("use_clipped_linears", False, "without clipped linears only (their clamps keep their "
                                                          "inputs)"),
                           ("attention_dropout", 0.0, "without attention dropout only"),
                           ("num_key_value_heads", heads, "with as many key-value heads as heads "
                                                          "(num_attention_heads) only"),
                           ("head_dim", hv // heads if hv % heads == 0 else None, "with head_dim = hidden_size / "
                                                                                  "num_attention_heads only")):
        v = vc.get(key, want)
        if isinstance(v, bool) != isinstance(want, bool) or v != want:
            raise UnsupportedError(f"config.json:vision_config.{key} {show(v)}: Gemma 4's tower is mapped {why} "
                                   f"({show(want)})")
    m.update(vision_temporal_patch_size=1, vision_in_channels=3, vision_model_type="gemma4")


#: Mistral 3's Pixtral vision_config (huggingface/transformers @ 0233e509 : models/pixtral/configuration_pixtral.py,
#: modeling_pixtral.py): the keys that size a tensor -> the model field (each required), and those that size none (the
#: rotary base, a buffer; head_dim, checked to be hidden_size / heads, as PixtralAttention computes it).
_PIXTRAL_FIELDS = {"num_hidden_layers": "vision_num_layers", "hidden_size": "vision_hidden_size",
                   "num_attention_heads": "vision_num_attention_heads", "intermediate_size": "vision_ffn_hidden_size",
                   "patch_size": "vision_patch_size", "num_channels": "vision_in_channels"}
_PIXTRAL_INERT = frozenset({"model_type", "dtype", "torch_dtype", "_name_or_path", "transformers_version",
                            "initializer_range", "rope_theta", "rope_parameters", "head_dim", "hidden_act",
                            "attention_dropout", "image_size"})


def pixtral_vision(hf: dict, m: dict, strict: bool) -> None:
    """Mistral 3's Pixtral tower and projector (model.vision_model_type pixtral) as Megatron-Bridge @ 067f987d :
    ministral3/modeling_ministral3.py builds them (transformers' PixtralVisionModel and Mistral3MultiModalProjector):
    num_hidden_layers layers of hidden_size, num_attention_heads heads, a gated SiLU MLP of intermediate_size, a Conv2d
    of patch_size over num_channels, the rotary table of (image_size / patch_size)^2 positions (the largest image),
    the wrapper's spatial_merge_size; the projector's biases (multimodal_projector_bias), another activation, another
    vision_feature_layer than the last (-1) and another head width are refused by name."""
    vc = hf.get("vision_config")
    _require_dict(vc, hf.get("model_type", "mistral3"))
    _refuse_unknown(vc, strict, " for pixtral", _PIXTRAL_FIELDS, _PIXTRAL_INERT)
    _read_fields(vc, _PIXTRAL_FIELDS, m)
    heads, hv, patch = m["vision_num_attention_heads"], m["vision_hidden_size"], m["vision_patch_size"]
    for where, key, want, why in (
            (vc, "hidden_act", "silu", "its gated SiLU MLP only"),
            (vc, "attention_dropout", 0.0, "without attention dropout only"),
            (vc, "head_dim", hv // heads if hv % heads == 0 else None, "with head_dim = hidden_size / "
                                                                       "num_attention_heads only"),
            (hf, "multimodal_projector_bias", False, "with a projector without biases only"),
            (hf, "projector_hidden_act", "gelu", "with the projector's GELU only"),
            (hf, "vision_feature_layer", -1, "with the last layer's features only")):
        v = where.get(key, want)
        if isinstance(v, bool) != isinstance(want, bool) or v != want:
            name = f"vision_config.{key}" if where is vc else key
            raise UnsupportedError(f"config.json:{name} {show(v)}: Mistral 3's Pixtral tower is mapped {why} "
                                   f"({show(want)})")
    size = vc.get("image_size")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size % patch:
        raise ConfigError(Problem("config.json:vision_config.image_size", size, f"must be a positive multiple of "
                                  f"patch_size ({patch}): the rotary table covers whole patches"))
    merge = hf.get("spatial_merge_size", 2)
    if isinstance(merge, bool) or not isinstance(merge, int) or not 1 <= merge <= MODEL_SPECS[
            "vision_spatial_merge_size"].max:
        raise ConfigError(Problem("config.json:spatial_merge_size", merge, "must be a positive integer (the patch "
                                  "merger's side)"))
    m.update(vision_num_position_embeddings=(size // patch) ** 2, vision_spatial_merge_size=merge,
             vision_temporal_patch_size=1, vision_model_type="pixtral")


QWEN_VISION = frozenset({"qwen3_5", "qwen3_5_moe", "qwen3_vl", "qwen3_vl_moe", "qwen2_5_vl"})
#: Wrappers whose vision tower is modelled: :func:`read_vision` maps it into the model.vision_* fields.
VISION_TOWERS = QWEN_VISION | {"gemma3", "gemma4", "mistral3", "ministral3", "kimi_k25", "glm4v_moe", "ernie4_5_vl_moe",
                               "exaone4_5", "step3p7"}


def read_vision(hf: dict, mt: str, m: dict, strict: bool) -> None:
    """The vision tower of the ``mt`` wrapper's config.json ``hf`` into the model.vision_* fields of ``m``."""
    if mt == "gemma3":
        siglip_vision(hf.get("vision_config"), m, strict, hf.get("mm_tokens_per_image"))
    elif mt == "kimi_k25":
        moonvit_vision(hf.get("vision_config"), m, strict)
    elif mt == "glm4v_moe":
        glm4v_vision(hf.get("vision_config"), m, strict)
    elif mt == "ernie4_5_vl_moe":
        ernie_vision(hf.get("vision_config", {}), m, strict)
    elif mt == "exaone4_5":
        exaone45_vision(hf.get("vision_config"), m, strict)
    elif mt == "step3p7":
        step37_vision(hf, m, strict)
    elif mt == "gemma4":
        gemma4_vision(hf.get("vision_config"), m, strict)
    elif mt in ("mistral3", "ministral3"):
        pixtral_vision(hf, m, strict)
    else:
        qwen_vision(hf.get("vision_config"), m, strict, mt)
