"""The vision-tower rules: a tower's dimensions come together and split over the tensor-parallel ranks, each kind
(qwen3_vl, qwen2_5_vl, gemma3_vl's SigLIP, radio, kimi_k25, glm4v, ernie45_vl, exaone45, step37, gemma4,
pixtral) with its own patch, position and projector rules, images that fit the sequence, and the frozen parts
(``freeze_*``) of a vision-language model, and the frozen multi-token-prediction layers (``freeze_mtp``, EXAONE 4.5's
provider's field, which applies to any model with MTP layers).

:func:`vision_problems` is called by :func:`estimator.config.rules.model.model_problems`. The radio tower's fixed
shapes (``RADIO_*``) are the model's too (estimator/model/vision.py).
"""

from __future__ import annotations

import dataclasses
import math

from ..derived import recipe_features
from ..errors import Problem
from .attention import kv_split_problems

__all__ = ["MUON_TOWERS", "RADIO_CLASS_TOKENS", "RADIO_MAX_SIDE", "RADIO_TILE", "vision_graph_tokens",
           "vision_problems"]


#: The radio tower's fixed shapes (Megatron-LM @ d98e8a64 : megatron/core/models/multimodal/llava_model.py for
#: vision_model_type "radio"; Megatron-Bridge @ 067f987d : nemotron_vl/nemotron_vl_provider.py): class_token_len 16
#: under use_vision_backbone_fp8_arch (which the provider sets; 32 with fp8_recipe mxfp8, 8 without it), the image
#: side img_h = img_w the provider builds it for, and max_img_h = max_img_w, the side its position table covers
#: (pixels). Here, below estimator/model/vision.py, because the rules need them too.
RADIO_CLASS_TOKENS, RADIO_TILE, RADIO_MAX_SIDE = 16, 512, 2048

#: Towers whose 2-D weights Megatron-Core's Muon takes are read here (estimator/model/vision.py ``muon_matrices``):
#: Muon beside them is modelled (rules/unsupported.py).
MUON_TOWERS = ("kimi_k25",)


def _one_frame(m, kind: str, embedding: str) -> list[Problem]:
    """A tower whose patch embedding takes one frame: ``vision_temporal_patch_size`` must be 1 (``embedding`` says
    what the embedding is)."""
    if m.vision_temporal_patch_size == 1:
        return []
    return [Problem("model.vision_temporal_patch_size", m.vision_temporal_patch_size,
                    f"must be 1 for the {kind} tower: its patch embedding is {embedding}")]


def _radio_rules(m, tr, t) -> list[Problem]:
    """The radio tower (Nemotron Nano VL, Nemotron Omni; estimator/model/vision.py): a linear embedder over
    C Pt P^2 (Pt frames a patch: Nemotron Omni's temporal_patch_dim; rules/media.py for its video embedder), pixel
    shuffle joining 2 x 2 patches (LLaVAModel multiplies the projector's input width by 4), the position table of
    (RADIO_MAX_SIDE / P)^2 entries RADIOViTModel builds, and the projector's fc1 split over TP."""
    out: list[Problem] = []
    if m.vision_spatial_merge_size != 2:     # vision_temporal_patch_size > 1: Omni's temporal_patch_dim (omni28)
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


def vision_problems(cfg) -> list[Problem]:
    """The vision tower (estimator/model/vision.py, estimator/memory/vision.py): its dimensions come together; the
    language model's tensor-parallel size splits a qwen3_vl tower's heads, its MLP and its merger (Megatron-Core's
    ColumnParallelLinear divides the output width by it: Megatron-Bridge @ 067f987d : modelling_qwen3_vl/
    transformer_config.py ``get_vision_model_config`` copies tensor_model_parallel_size; a qwen2_5_vl tower is
    Hugging Face's module, whole on every rank); deepstack mergers and learned positions are qwen3_vl's only; images
    need a tower, a resolution that whole merged patches tile, and their tokens fit in the sequence."""
    m, tr, t = cfg.model, cfg.training, cfg.parallelism.tensor_model_parallel_size
    out: list[Problem] = _frozen_mtp_rules(cfg)
    if m.vision_num_layers is None:
        for name in _VISION_DIMS + ("vision_out_hidden_size", "vision_projector_ffn_hidden_size",
                                    "vision_num_query_groups"):
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
        if tr.vision_cuda_graph_impl != "none":
            out.append(Problem("training.vision_cuda_graph_impl", tr.vision_cuda_graph_impl, "needs a model with a "
                               "vision tower (model.vision_num_layers)"))
        out += _vision_graph_companions(tr)
        return out
    out += _frozen_language_rules(cfg)
    out += _vision_graph_rules(cfg)
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
    if kind in ("qwen2_5_vl", "ernie45_vl", "exaone45") and m.vision_num_position_embeddings != default:
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
    out += _query_group_rules(m, t)
    if kind == "step37":
        out += _step37_rules(m, tr)
    if kind == "gemma4":
        out += _gemma4_rules(m, tr)
    if kind == "pixtral":
        out += _pixtral_rules(m, tr)
    if kind == "kimi_k25":
        out += _one_frame(m, "kimi_k25", "a Conv2d over one frame")
    if kind == "ernie45_vl":
        out += _one_frame(m, "ernie45_vl", "a linear layer over one frame's patch (the resampler joins "
                          "frames)")
    wide = m.vision_spatial_merge_size ** 2 * hv
    split = kind in ("qwen3_vl", "radio", "exaone45")   # the others are Hugging Face's or PyTorch modules, whole
                                                         # on every TP rank
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
    elif kind in ("step37", "pixtral") and tr.images_per_sample and tr.image_resolution > _step37_side(m):
        pass                                                    # named by _step37_rules, _pixtral_rules
    elif kind != "gemma3_vl" and tr.image_resolution % side and (tr.images_per_sample or kind != "gemma4"):
        # gemma3_vl: the side is fixed (_siglip_rules); gemma4 (48-pixel merged patches): the default 448 stands
        # while there are no images
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


def _query_group_rules(m, t: int) -> list[Problem]:
    """model.vision_num_query_groups: EXAONE 4.5's grouped-query attention (Megatron-Bridge @ 067f987d :
    exaone/exaone45/modelling_exaone45/transformer_config.py ``get_vision_model_config``: num_query_groups =
    num_key_value_heads) in a tower split over TP, whose query groups Megatron-Core divides among the ranks (the
    tower is Megatron-Core's ViT layer spec, a SelfAttention, so fewer groups than ranks run as in the language
    model: each rank all-gathers the QKV output and attends with one group)."""
    g, heads = m.vision_num_query_groups, m.vision_num_attention_heads
    if g is None:
        return []
    if m.vision_model_type != "exaone45":
        return [Problem("model.vision_num_query_groups", g, f"applies only to the exaone45 tower (grouped-query "
                        f"attention); leave it null for vision_model_type {m.vision_model_type}")]
    out: list[Problem] = []
    if heads % g:
        out.append(Problem("model.vision_num_query_groups", g, f"must divide vision_num_attention_heads ({heads}): "
                           "each group serves the same number of query heads"))
    if g % t and t % g:
        out.append(Problem("model.vision_num_query_groups", g, f"must be a multiple or a divisor of "
                           f"tensor_model_parallel_size ({t}): the exaone45 tower's key-value groups are split over "
                           "the ranks, or with fewer groups than ranks each rank attends with one"))
    elif m.vision_hidden_size and not heads % g:
        out += kv_split_problems("model.vision_num_query_groups", g, t,
                                 (heads + 2 * g) * (m.vision_hidden_size // heads))
    return out


def _step37_side(m) -> int:
    """The largest image side (pixels) Step 3.7's tower takes: its positions' square grid of patches."""
    return math.isqrt(m.vision_num_position_embeddings) * m.vision_patch_size


def _step37_rules(m, tr) -> list[Problem]:
    """Step 3.7's Perception-Encoder (Megatron-Bridge @ 067f987d : stepfun/modelling_step37/vision_model.py): a
    Conv2d patch embedding (one frame), two stride-2 convolutions (a 4 x 4 merge), learned positions on a square grid
    of image_size / patch_size a side, which the 2-D rotary table (``EncoderRope2D``, built for that grid) also
    bounds: a larger image is refused, a smaller one a multiple of 4 patches a side."""
    out: list[Problem] = []
    out += _one_frame(m, "step37", "a Conv2d over one frame")
    if m.vision_spatial_merge_size != 4:
        out.append(Problem("model.vision_spatial_merge_size", m.vision_spatial_merge_size, "must be 4 for the step37 "
                           "tower: its two stride-2 convolutions join 4 x 4 patches into one token"))
    per_side = math.isqrt(m.vision_num_position_embeddings)
    if per_side * per_side != m.vision_num_position_embeddings:
        out.append(Problem("model.vision_num_position_embeddings", m.vision_num_position_embeddings, "must be a "
                           "square number for the step37 tower: (image_size / patch_size)^2 learned positions"))
    elif tr.images_per_sample and tr.image_resolution > _step37_side(m):
        out.append(Problem("training.image_resolution", tr.image_resolution, f"must be at most "
                           f"{_step37_side(m)} pixels for the step37 tower: its positions and 2-D rotary table cover "
                           f"{per_side} patches of {m.vision_patch_size} a side (count each crop of a larger image in "
                           "images_per_sample)"))
    return out


def _gemma4_rules(m, tr) -> list[Problem]:
    """Gemma 4's tower (huggingface/transformers @ 0246b4f3 : models/gemma4/modeling_gemma4.py
    ``Gemma4VisionPatchEmbedder``): a linear patch embedding over one frame of 3 channels (``3 * patch_size**2``
    inputs, fixed), and per-axis position tables of vision_num_position_embeddings rows, one row per patch column or
    row (a one-hot lookup): an image side of more patches than rows has no position."""
    out: list[Problem] = []
    out += _one_frame(m, "gemma4", "a linear layer over one frame's patch")
    if m.vision_in_channels != 3:
        out.append(Problem("model.vision_in_channels", m.vision_in_channels, "must be 3 for the gemma4 tower: "
                           "Gemma4VisionPatchEmbedder takes 3 x patch^2 inputs whatever the config says"))
    side = tr.image_resolution // m.vision_patch_size
    if tr.images_per_sample and side > m.vision_num_position_embeddings:
        out.append(Problem("training.image_resolution", tr.image_resolution, f"must be at most "
                           f"{m.vision_num_position_embeddings * m.vision_patch_size} pixels for the gemma4 tower: "
                           f"its position tables hold {m.vision_num_position_embeddings} patches a side"))
    return out


def _pixtral_rules(m, tr) -> list[Problem]:
    """Mistral 3's Pixtral tower (huggingface/transformers @ 0233e509 : models/pixtral/modeling_pixtral.py): a Conv2d
    patch embedding over one frame, and a 2-D rotary table of (image_size / patch_size)^2 positions
    (model.vision_num_position_embeddings, a buffer without weights) that bounds the image side."""
    out: list[Problem] = []
    out += _one_frame(m, "pixtral", "a Conv2d over one frame")
    per_side = math.isqrt(m.vision_num_position_embeddings)
    if per_side * per_side != m.vision_num_position_embeddings:
        out.append(Problem("model.vision_num_position_embeddings", m.vision_num_position_embeddings, "must be a "
                           "square number for the pixtral tower: its rotary table covers (image_size / patch_size)^2 "
                           "positions"))
    elif tr.images_per_sample and tr.image_resolution > _step37_side(m):
        out.append(Problem("training.image_resolution", tr.image_resolution, f"must be at most {_step37_side(m)} "
                           f"pixels for the pixtral tower: its rotary table covers {per_side} patches of "
                           f"{m.vision_patch_size} a side (vision_config.image_size)"))
    return out


def _siglip_rules(m, tr, t: int) -> list[Problem]:
    """Gemma 3's SigLIP tower (Megatron-Bridge @ 067f987d : gemma_vl/modeling_gemma3_vl.py): a Conv2d patch
    embedding (one frame a patch), num_positions = (image_size / patch)^2 learned positions that fix the image side
    (transformers' SiglipVisionEmbeddings; Gemma 3 does not interpolate them), a projector that average-pools the
    side's patches by vision_spatial_merge_size (Gemma3VLMultimodalProjector: patches_per_side / tokens_per_side) and
    whose ColumnParallelLinear splits the output width over TP."""
    out: list[Problem] = []
    out += _one_frame(m, "gemma3_vl", "a Conv2d over one frame")
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

    sound_trained = cfg.model.sound_num_layers is not None and not (tr.freeze_sound_encoder
                                                                    and tr.freeze_sound_projection)   # omni28
    if tr.freeze_vision_model and tr.freeze_vision_projection and not sound_trained:
        add(True, "with freeze_vision_model and freeze_vision_projection also true nothing trains (Megatron-Core's "
            "optimizer gets no parameter); leave the tower or its projection trained")
    if tr.peft is not None:
        add(True, f"with training.peft ({tr.peft}) the language model's base weights are frozen by the adapters' "
            "own transform already; leave freeze_language_model false")
    if cfg.model.vision_model_type == "exaone45" and cfg.model.mtp_num_layers and not tr.freeze_mtp:
        add(True, f"with the exaone45 tower and MTP layers (mtp_num_layers {cfg.model.mtp_num_layers}) is not "
            "modelled: Megatron-Bridge's Exaone45Model.freeze leaves the MTP layers trained while the rest of the "
            "language model is frozen (with training.freeze_mtp, its freeze_mtp_model, everything is frozen and "
            "that is modelled)")
    if par.use_megatron_fsdp or par.use_torch_fsdp2:
        add(True, "with FSDP is not modelled (which frozen units FSDP still gathers and shards)")
    if tr.rl_algorithm != "none":
        add(True, f"with RL training (training.rl_algorithm: {tr.rl_algorithm}) is not modelled")
    if tr.reserved_memory_model == "replay":
        add(True, "with reserved_memory_model replay is not modelled (the allocator trace keeps every linear "
            "layer's input); use fraction")
    return out


def vision_graph_tokens(m, tr) -> int:
    """The patches the vision tower's CUDA graphs run each micro-batch over: ``max_vision_cuda_graph_seq_length``, or
    Np // M^2 without it (Megatron-LM @ d98e8a64 : megatron/core/transformer/cuda_graphs.py
    ``get_vision_cuda_graph_seq_length``, the helper's capture length; Megatron-Bridge @ 067f987d :
    modelling_qwen3_vl/vision_model.py ``_get_max_vision_seq_length``, the length the forward pads to: the same)."""
    return tr.max_vision_cuda_graph_seq_length or m.vision_num_position_embeddings // m.vision_spatial_merge_size ** 2


def _vision_graph_companions(tr) -> list[Problem]:
    """The vision graphs' companions are read only with ``vision_cuda_graph_impl`` transformer_engine (Megatron-Bridge
    @ 067f987d : modelling_qwen3_vl/transformer_config.py ``get_vision_model_config`` clears the scope otherwise)."""
    if tr.vision_cuda_graph_impl != "none":
        return []
    return [Problem("training." + name, getattr(tr, name), "applies only with training.vision_cuda_graph_impl "
                    "transformer_engine (the vision tower's CUDA graphs)")
            for name in ("vision_cuda_graph_modules", "max_vision_cuda_graph_seq_length") if getattr(tr, name)]


def _vision_graph_rules(cfg) -> list[Problem]:
    """The vision tower's CUDA graphs (``training.vision_cuda_graph_impl``, estimator/memory/vision.py): modelled for
    the trained qwen3_vl tower whose every micro-batch fits the padded length, under the language model's recompute
    without full recompute, without virtual pipeline stages; the rest is refused by name."""
    m, tr, par = cfg.model, cfg.training, cfg.parallelism
    out = _vision_graph_companions(tr)
    if tr.vision_cuda_graph_impl == "none":
        return out
    field, value = "training.vision_cuda_graph_impl", tr.vision_cuda_graph_impl

    def add(msg):
        out.append(Problem(field, value, msg))

    if m.vision_model_type != "qwen3_vl":
        add(f"applies only to the qwen3_vl tower (Megatron-Bridge's Qwen3VLVisionModel pads for the graphs and "
            f"its providers hold the field); not to vision_model_type {m.vision_model_type}")
        return out
    if tr.freeze_vision_model:
        add("with freeze_vision_model is not modelled: the graphs are captured with a static input that wants a "
            "gradient, so what a frozen tower's graphs keep is not the eager frozen tower's")
    if tr.recompute_granularity == "full":
        # get_vision_model_config copies the language model's recompute granularity, method and layer count.
        add("with recompute_granularity full is not modelled: the tower takes the language model's recompute "
            "settings, and Megatron-Core captures per-layer graphs only without full recompute")
    if (par.virtual_pipeline_model_parallel_size or 1) > 1:
        add("with virtual pipeline stages is not modelled: VisionTECudaGraphHelper captures in the order of one "
            "model chunk (num_model_chunks 1), which is not the interleaved schedule's")
    if tr.video_frames_per_sample:
        add("with video frames is not modelled (only images are counted for the padded length)")
    if par.use_megatron_fsdp or par.use_torch_fsdp2:
        add("with FSDP is not modelled: VisionTECudaGraphHelper sets no parameter-gather hooks for the graphed layers "
            "(cuda_graph_set_manual_hooks is a no-op)")
    S = vision_graph_tokens(m, tr)
    if tr.images_per_sample and m.vision_patch_size and m.vision_num_position_embeddings:
        per = (tr.image_resolution // m.vision_patch_size) ** 2
        n = tr.micro_batch_size * tr.images_per_sample * per
        if n > S:
            named = ("training.max_vision_cuda_graph_seq_length", tr.max_vision_cuda_graph_seq_length) \
                if tr.max_vision_cuda_graph_seq_length else (field, value)
            out.append(Problem(*named, f"the graphed tower pads each micro-batch's patches to {S:,} "
                               f"(max_vision_cuda_graph_seq_length, or vision_num_position_embeddings // "
                               f"vision_spatial_merge_size^2 without it), but micro_batch_size "
                               f"({tr.micro_batch_size}) x images_per_sample ({tr.images_per_sample}) x {per:,} "
                               f"patches ({tr.image_resolution}-pixel images) = {n:,} do not fit (Megatron-Bridge "
                               "raises ValueError); raise max_vision_cuda_graph_seq_length to at least that"))
    return out


def _frozen_mtp_rules(cfg) -> list[Problem]:
    """``training.freeze_mtp`` (estimator/memory/features/frozen_language.py ``mtp_states``): it needs MTP layers, and
    the features that re-plan the states or the saved tensors of every layer (FSDP, PEFT, other optimizers,
    offloading, CUDA graphs, ...: :func:`estimator.config.derived.recipe_features`), the RL phases and the allocator
    replay are refused beside it by name rather than estimated wrong."""
    tr, m = cfg.training, cfg.model
    if not tr.freeze_mtp:
        return []
    out: list[Problem] = []
    if not (m.mtp_num_layers or "/" in (m.hybrid_layer_pattern or "")):
        out.append(Problem("training.freeze_mtp", True, "needs multi-token-prediction layers (model.mtp_num_layers, "
                           "or '/' parts of model.hybrid_layer_pattern)"))
    on = [path for path, _ in recipe_features(cfg)]
    if on:
        out.append(Problem("training.freeze_mtp", True, f"with {', '.join(on)} is not modelled (frozen MTP layers are "
                           "modelled with Megatron-Core's plain DDP, distributed optimizer and Adam)"))
    if tr.rl_algorithm != "none":
        out.append(Problem("training.freeze_mtp", True, f"with RL training (training.rl_algorithm: "
                           f"{tr.rl_algorithm}) is not modelled"))
    if tr.reserved_memory_model == "replay":
        out.append(Problem("training.freeze_mtp", True, "with reserved_memory_model replay is not modelled (the "
                           "allocator trace keeps every linear layer's input); use fraction"))
    return out
