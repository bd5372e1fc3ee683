"""Nemotron Omni's media rules (omni28): the sound tower's dimensions and inputs (estimator/model/audio.py), its
frozen parts, and the radio tower's video frames and separate video embedder (estimator/model/vision.py).

:func:`media_problems` is called by :func:`estimator.config.rules.model.model_problems` after the vision rules.
Sources: NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/models/nemotron_omni/ (the provider builds the
sound tower only beside its RADIO vision tower), huggingface/transformers @ 00111b31 :
src/transformers/models/parakeet/modeling_parakeet.py (the encoder's shapes), Megatron-LM @ d98e8a64 :
megatron/core/models/vision/radio.py (``temporal_patch_dim``, ``separate_video_embedder``).
"""

from __future__ import annotations

from ..errors import Problem

__all__ = ["SOUND_HOP", "SOUND_SAMPLE_RATE", "SUB_KERNEL", "SUB_STRIDE", "clip_frames", "media_problems",
           "subsampled"]

#: Hugging Face's ParakeetFeatureExtractor: sampling rate (Hz) and hop (samples) of the mel features
#: (Megatron-Bridge @ 067f987d : nemotron_omni_utils.py ``compute_audio_token_count`` hop_length 160; sound_config
#: sampling_rate 16000), and ParakeetEncoderConfig's subsampling convolution kernel and stride (the defaults
#: Megatron-Bridge keeps). Here, below estimator/model/audio.py, because the rules need them too.
SOUND_SAMPLE_RATE, SOUND_HOP = 16000, 160
SUB_KERNEL, SUB_STRIDE = 3, 2


def clip_frames(seconds: float) -> int:
    """Valid mel frames of a clip of ``seconds``."""
    return int(seconds * SOUND_SAMPLE_RATE) // SOUND_HOP


def subsampled(m, frames: int) -> int:
    """The length ``frames`` mel frames have after the encoder's log2(sound_subsampling_factor) convolutions
    (kernel 3, stride 2, padding 1: L -> (L - 1) // 2 + 1)."""
    for _ in range(m.sound_subsampling_factor.bit_length() - 1):
        frames = (frames - 1) // SUB_STRIDE + 1
    return frames

_SOUND_DIMS = ("sound_hidden_size", "sound_num_attention_heads", "sound_ffn_hidden_size", "sound_conv_kernel_size",
               "sound_num_mel_bins", "sound_subsampling_factor", "sound_subsampling_conv_channels", "sound_bias",
               "sound_projector_ffn_hidden_size")


def _default(obj, name):
    """The schema's default of field ``name`` of the section ``obj`` (a lookup: ``dataclasses.fields`` walked all
    290 fields nine times per validation, a sixth of the layout search's time)."""
    return type(obj).__dataclass_fields__[name].default


def _sound_problems(cfg) -> list[Problem]:
    m, tr, t = cfg.model, cfg.training, cfg.parallelism.tensor_model_parallel_size
    out: list[Problem] = []
    if m.sound_num_layers is None:
        for name in _SOUND_DIMS:
            if getattr(m, name) != _default(m, name):
                out.append(Problem("model." + name, getattr(m, name), "applies only with a sound tower (set "
                                   "model.sound_num_layers)"))
        if tr.audio_clips_per_sample:
            out.append(Problem("training.audio_clips_per_sample", tr.audio_clips_per_sample, "needs a model with a "
                               "sound tower (model.sound_num_layers); 0 without one"))
        for name in ("freeze_sound_encoder", "freeze_sound_projection"):
            if getattr(tr, name):
                out.append(Problem("training." + name, True, "needs a model with a sound tower "
                                   "(model.sound_num_layers)"))
        return out
    if m.vision_num_layers is None or m.vision_model_type != "radio":
        out.append(Problem("model.sound_num_layers", m.sound_num_layers, "is modelled as Nemotron Omni's Parakeet "
                           "sound tower, which Megatron-Bridge builds beside its radio vision tower: set "
                           "model.vision_model_type radio and the model.vision_* fields"))
    hs, heads = m.sound_hidden_size, m.sound_num_attention_heads
    if hs % heads:
        out.append(Problem("model.sound_hidden_size", hs, f"must be a multiple of sound_num_attention_heads ({heads})"
                           ": the head width is hidden / heads (ParakeetEncoderAttention)"))
    s = m.sound_subsampling_factor
    if s & (s - 1):
        out.append(Problem("model.sound_subsampling_factor", s, "must be a power of 2: the encoder applies log2 of it "
                           "stride-2 convolutions (ParakeetEncoderSubsamplingConv2D)"))
    elif m.sound_num_mel_bins < s:
        out.append(Problem("model.sound_num_mel_bins", m.sound_num_mel_bins, f"must be at least "
                           f"sound_subsampling_factor ({s}): the subsampled mel axis feeds the front end's linear"))
    if m.sound_conv_kernel_size % 2 == 0:
        out.append(Problem("model.sound_conv_kernel_size", m.sound_conv_kernel_size, "must be odd ('same' padding "
                           "of the depthwise convolution)"))
    if m.sound_projector_ffn_hidden_size % t:
        out.append(Problem("model.sound_projector_ffn_hidden_size", m.sound_projector_ffn_hidden_size, f"must be a "
                           f"multiple of tensor_model_parallel_size ({t}): the projection's fc1 is split over the "
                           "ranks"))
    if tr.audio_clips_per_sample and not tr.freeze_sound_encoder:
        out.append(Problem("training.freeze_sound_encoder", False, "with audio_clips_per_sample > 0 is not "
                           "modelled: a trained Parakeet encoder's saved tensors (relative-position attention, "
                           "convolution modules, dropout masks) are not counted, and with ParakeetEncoderConfig's "
                           "LayerDrop 0.1, which Megatron-Bridge keeps, they change from step to step; Bridge's "
                           "Nemotron Omni recipes freeze it (freeze_sound_encoder true)"))
    return out


def _video_problems(cfg) -> list[Problem]:
    m, tr = cfg.model, cfg.training
    out: list[Problem] = []
    radio = m.vision_num_layers is not None and m.vision_model_type == "radio"
    Pt = m.vision_temporal_patch_size
    if m.vision_separate_video_embedder and not (radio and Pt > 1):
        out.append(Problem("model.vision_separate_video_embedder", True, "needs the radio vision tower "
                           "(vision_model_type radio) with vision_temporal_patch_size above 1 (RADIOViTModel builds "
                           f"the video embedder only then); got {m.vision_model_type} with {Pt}"))
    if m.vision_class_token_len is not None and not radio:
        out.append(Problem("model.vision_class_token_len", m.vision_class_token_len, "applies only to the radio "
                           "vision tower (vision_model_type radio)"))
    if tr.video_frames_per_sample:
        if not radio:
            out.append(Problem("training.video_frames_per_sample", tr.video_frames_per_sample, "is modelled for the "
                               "radio vision tower (Nemotron Omni) only; other towers: count frames as images"))
        elif tr.video_frames_per_sample % Pt:
            out.append(Problem("training.video_frames_per_sample", tr.video_frames_per_sample, f"must be a multiple "
                               f"of vision_temporal_patch_size ({Pt}): the tower joins that many frames into one"))
    return out


def _tokens_problem(cfg) -> list[Problem]:
    """Images, video frame groups and audio clips together fit the sequence, which holds their tokens."""
    m, tr = cfg.model, cfg.training
    if m.vision_num_layers is None or not (tr.video_frames_per_sample or tr.audio_clips_per_sample):
        return []
    side, merge = m.vision_patch_size, m.vision_spatial_merge_size
    if tr.image_resolution % (side * merge) or m.vision_temporal_patch_size < 1:
        return []                                   # the vision rules report the resolution
    per = (tr.image_resolution // side) ** 2 // merge ** 2
    images = (tr.images_per_sample + tr.video_frames_per_sample // m.vision_temporal_patch_size) * per
    audio = (tr.audio_clips_per_sample * subsampled(m, clip_frames(tr.audio_clip_seconds))
             if m.sound_num_layers is not None else 0)
    s = tr.seq_length or m.max_position_embeddings
    if s is None or images + audio <= s:
        return []
    return [Problem("training.audio_clips_per_sample" if audio else "training.video_frames_per_sample",
                    tr.audio_clips_per_sample if audio else tr.video_frames_per_sample,
                    f"images and video ({images:,} tokens) and audio ({audio:,} tokens) must fit in the sequence "
                    f"({s:,} tokens), which holds them")]


def media_problems(cfg) -> list[Problem]:
    """Every rule of the sound tower, the video frames and the radio tower's video embedder the configuration
    breaks."""
    return _sound_problems(cfg) + _video_problems(cfg) + _tokens_problem(cfg)
