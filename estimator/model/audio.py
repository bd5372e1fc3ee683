"""The sound tower of Nemotron Omni: its parameters (the Parakeet / FastConformer encoder and the sound projection),
the mel frames a clip gives it and the tokens it gives the language model, and the activations it keeps.

Where it comes from. NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/models/nemotron_omni/
``nemotron_omni_provider.py`` (``_build_sound_modules``: built only where ``has_sound`` and on the encoder stage, the
first pipeline stage; ``_build_sound_projection_config``: a copy of the language model's config with sequence and
context parallelism and recompute off), ``nemotron_omni_sound.py`` ``BridgeSoundEncoder`` (Hugging Face's
``ParakeetEncoder``, eager PyTorch, not Transformer Engine, with ``attention_bias`` and ``convolution_bias`` both
``sound_config.convolution_bias`` (default false) and ``scale_input`` false; every parameter is marked
``average_gradients_across_tp_domain``: the whole encoder on every tensor-parallel rank, its gradients averaged over
them), ``modeling_nemotron_omni.py`` ``NemotronOmniModel._encode_sound`` (the projection runs over the encoder's
padded output, then each clip's valid rows replace its sound tokens) and ``freeze`` (``requires_grad`` false on
``sound_model`` / ``sound_projection``). The encoder: huggingface/transformers @ 00111b31 :
src/transformers/models/parakeet/modeling_parakeet.py.

Symbols: hs ``sound_hidden_size``, fs ``sound_ffn_hidden_size``, Ls ``sound_num_layers``, k
``sound_conv_kernel_size``, c ``sound_subsampling_conv_channels``, mel ``sound_num_mel_bins``, S
``sound_subsampling_factor`` (n = log2 S stride-2 convolutions of kernel 3, ParakeetEncoderConfig's defaults), p
``sound_projector_ffn_hidden_size``, h the language model's hidden size, b 1 with ``sound_bias`` else 0::

    subsampling   9c + c                                 Conv2d(1, c, 3, stride 2) with bias
                  (n - 1) (9c + c + c^2 + c)             depthwise Conv2d(c, c, 3, groups c) and pointwise
                                                         Conv2d(c, c, 1), both with bias
                  c (mel / 2^n) hs + hs                  linear to hs, with bias
    each block    2 (2 hs fs + b (fs + hs))              feed_forward1 and feed_forward2 (linear1, linear2)
                  4 hs^2 + 4 b hs                        q_proj, k_proj, v_proj, o_proj
                  hs^2 + 2 hs                            relative_k_proj (no bias), bias_u and bias_v (heads x
                                                         head width each)
                  2 hs^2 + hs k + hs^2 + b (4 hs)        pointwise_conv1 (hs -> 2 hs, GLU), depthwise_conv,
                                                         pointwise_conv2
                  2 hs + 5 x 2 hs                        BatchNorm1d (weight, bias; its running statistics are
                                                         buffers) and five LayerNorms
    projection    n(hs) + hs p (x 2 if gated) + p h      the language model's MLP spec (Nemotron-H's: an RMSNorm
                  (+ biases as the language model's)     fused into fc1, squared ReLU, no biases) from hs to h,
                                                         fc1 column- and fc2 row-parallel, the norm replicated

The relative positions are sines computed per forward (a buffer, no weights). Without biases a block holds
4 hs fs + 8 hs^2 + k hs + 14 hs.

Tokens. Hugging Face's ``ParakeetFeatureExtractor`` at 16 kHz with hop 160 gives ``floor(seconds x 16000) // 160``
valid mel frames and one boundary frame more in the padded features (Megatron-Bridge's
``valid_audio_feature_lengths``); each of the n subsampling convolutions (kernel 3, stride 2, padding 1) maps a
length L to ``(L - 1) // 2 + 1`` (``ParakeetPreTrainedModel._get_subsampling_output_length``, Bridge's
``compute_audio_token_count``). A clip gives the language model its valid frames subsampled as tokens; the encoder
and the projection run over the padded frames subsampled.

Activations (estimator/memory/vision.py): with the encoder frozen it keeps none; a trained encoder with clips is
refused (estimator/config/rules/media.py): Bridge keeps ParakeetEncoderConfig's training-time defaults (dropout,
activation and attention dropout 0.1, LayerDrop 0.1: each block is skipped at random in training), so what its
blocks save changes from step to step.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.rules.media import SOUND_HOP, SOUND_SAMPLE_RATE, SUB_KERNEL, SUB_STRIDE, clip_frames, subsampled
from .layers.base import Count

__all__ = ["SOUND_HOP", "SOUND_SAMPLE_RATE", "SoundParams", "clip_frames", "clip_tokens", "encoder_width",
           "has_sound", "sound_params", "subsampled"]

def has_sound(m) -> bool:
    """Whether a model section has a sound tower."""
    return m.sound_num_layers is not None


def _conv_layers(m) -> int:
    return m.sound_subsampling_factor.bit_length() - 1         # log2 of a power of two


class SoundParams(NamedTuple):
    """Parameters of the sound tower by part (:class:`Count`: split over TP, or not)."""

    encoder: Count       # the subsampling front end and the conformer blocks: what freeze_sound_encoder freezes
    projection: Count    # the sound projection: what freeze_sound_projection freezes
    block: int           # one conformer block
    subsampling: int     # the convolutional front end

    @property
    def total(self) -> int:
        return self.encoder.total + self.projection.total


def sound_params(m) -> SoundParams | None:
    """The sound tower's parameters (None without one); the module docstring has the formulas."""
    if not has_sound(m):
        return None
    hs, fs, c, k = m.sound_hidden_size, m.sound_ffn_hidden_size, m.sound_subsampling_conv_channels, \
        m.sound_conv_kernel_size
    b = 1 if m.sound_bias else 0
    n = _conv_layers(m)
    kk = SUB_KERNEL * SUB_KERNEL
    sub = (kk * c + c) + (n - 1) * (kk * c + c + c * c + c) + c * (m.sound_num_mel_bins // SUB_STRIDE ** n) * hs + hs
    ff = 2 * (2 * hs * fs + b * (fs + hs))
    attn = 4 * hs * hs + 4 * b * hs + hs * hs + 2 * hs
    conv = 2 * hs * hs + hs * k + hs * hs + b * 4 * hs
    norms = 2 * hs + 5 * 2 * hs
    block = ff + attn + conv + norms
    p, h = m.sound_projector_ffn_hidden_size, m.hidden_size
    up = 2 if m.gated_linear_unit else 1
    norm = 2 * hs if m.normalization == "LayerNorm" else hs
    bias = m.add_bias_linear
    projection = Count(hs * p * up + p * h + (p * up if bias else 0), norm + (h if bias else 0))
    return SoundParams(Count(0, sub + m.sound_num_layers * block), projection, block, sub)


def clip_tokens(m, seconds: float) -> int:
    """Language-model tokens one clip of ``seconds`` gives (its valid frames, subsampled)."""
    return subsampled(m, clip_frames(seconds))


def encoder_width(m, seconds: float) -> int:
    """Rows per clip the encoder and the projection run over: the padded frames (one boundary frame more than the
    valid ones), subsampled."""
    return subsampled(m, clip_frames(seconds) + 1)
