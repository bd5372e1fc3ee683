"""Nemotron Omni's sound tower (estimator/model/audio.py) and the RADIO video embedder (estimator/model/vision.py):
parameters by hand from Hugging Face's ParakeetEncoder and Megatron-Core's RADIOViTModel, and against the published
parameter count of the converted checkpoint; the tokens a clip gives."""

from __future__ import annotations

import pytest

from estimator.config.load import load_config
from estimator.formats.catalog import status
from estimator.model.audio import clip_tokens, encoder_width, sound_params
from estimator.model.params import count_parameters
from estimator.model.resolve import resolve

#: Nemotron-3-Nano-Omni's sound_config (the keys Megatron-Bridge's provider reads; Parakeet 0.6B's shape) and RADIO
#: tower as NemotronOmniModelProvider builds it (projector_hidden_size 20480, 10 class tokens, frame pairs through
#: the separate video embedder).
SOUND = {"sound_num_layers": 24, "sound_hidden_size": 1024, "sound_num_attention_heads": 8,
         "sound_ffn_hidden_size": 4096, "sound_conv_kernel_size": 9, "sound_num_mel_bins": 128,
         "sound_subsampling_factor": 8, "sound_subsampling_conv_channels": 256, "sound_bias": False,
         "sound_projector_ffn_hidden_size": 4096}
RADIO = {"vision_num_layers": 32, "vision_hidden_size": 1280, "vision_num_attention_heads": 16,
         "vision_ffn_hidden_size": 5120, "vision_patch_size": 16, "vision_temporal_patch_size": 2,
         "vision_spatial_merge_size": 2, "vision_num_position_embeddings": 16384, "vision_model_type": "radio",
         "vision_projector_ffn_hidden_size": 20480, "vision_separate_video_embedder": True,
         "vision_class_token_len": 10}


def _omni(**extra):
    lm, _ = status("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    model = {**lm, **RADIO, **SOUND, **extra}
    return load_config({"model": model, "parallelism": {"tensor_model_parallel_size": 2},
                        "training": {"world_size": 2, "micro_batch_size": 1, "global_batch_size": 2,
                                     "seq_length": 4096}})


def test_parakeet_encoder_by_hand():
    """The Omni's Parakeet encoder (huggingface/transformers @ 00111b31 : models/parakeet/modeling_parakeet.py),
    hs 1024, fs 4096, 8 heads, kernel 9, 128 mel bins, subsampling 8 (three stride-2 convolutions), 256 channels,
    no biases in the blocks:

    subsampling  Conv2d(1, 256, 3) 2,304 + 256 = 2,560; two depthwise Conv2d(256, 256, 3, groups 256)
                 2 x (2,304 + 256) = 5,120; two pointwise Conv2d(256, 256, 1) 2 x (65,536 + 256) = 131,584;
                 linear 256 x (128 / 8 = 16) x 1024 + 1024 = 4,195,328; together 4,334,592
    a block      feed_forward1 + feed_forward2 2 x 2 x 1024 x 4096 = 16,777,216; q, k, v, o 4 x 1024^2 =
                 4,194,304; relative_k_proj 1,048,576; bias_u, bias_v 2 x 8 x 128 = 2,048; pointwise_conv1
                 1024 x 2048 = 2,097,152; depthwise_conv 1024 x 9 = 9,216; BatchNorm1d 2,048; pointwise_conv2
                 1,048,576; five LayerNorms 10,240; together 25,189,376
    encoder      4,334,592 + 24 x 25,189,376 = 608,879,616 (Parakeet "0.6B")
    projection   Nemotron-H's MLP spec: the fused RMSNorm over 1024 (1,024), fc1 1024 x 4096 (4,194,304, squared
                 ReLU, not gated), fc2 4096 x 2688 (11,010,048), no biases: 15,205,376
    """
    p = sound_params(_omni().model)
    assert p.subsampling == 4_334_592
    assert p.block == 25_189_376
    assert p.encoder.total == 608_879_616 and p.encoder.sharded == 0      # whole on every TP rank
    assert p.projection.total == 15_205_376
    assert p.projection.replicated == 1_024                               # the norm; fc1 / fc2 split over TP


def test_biases_add_their_vectors():
    """sound_bias (sound_config.convolution_bias, passed to attention_bias and convolution_bias): per block the two
    feed-forwards 2 x (4096 + 1024) = 10,240, q/k/v/o 4 x 1024 = 4,096, the three convolutions 2048 + 1024 + 1024
    = 4,096: 18,432, x 24 blocks = 442,368 (relative_k_proj stays without one)."""
    with_bias = sound_params(_omni(sound_bias=True).model).encoder.total
    assert with_bias - 608_879_616 == 442_368


def test_the_converted_checkpoint_s_published_count():
    """Megatron-Bridge @ 067f987d : examples/model_verification_cards/nemotron-3-nano-omni-30b-a3b-reasoning/
    card.yaml: the CPU import "creates a reloadable iter_0000000 torch_dist checkpoint with 33,015,546,816
    parameters on the single model parallel rank".

    The towers by hand (RADIO as in estimator/model/vision.py): image embedder 3 x 16^2 x 1280 = 983,040, video
    embedder 3 x 2 x 16^2 x 1280 = 1,966,080, class tokens 10 x 1280 = 12,800, positions 128^2 x 1280 =
    20,971,520, 32 layers x 19,677,440 = 629,678,080, projector 5,120 + 5,120 x 20,480 + 20,480 x 2,688 =
    159,912,960: 813,524,480. Sound: 608,879,616 + 15,205,376 = 624,084,992 (test above). The language model as the
    catalog's Nemotron-3-Nano-30B-A3B imports it: 31,577,940,288. Sum 33,015,549,760, 2,944 (9e-8 of it) above the
    published figure: 2,944 = 23 x 128, 128 per Mamba layer of the language model, a difference in the language
    model's count that this test pins rather than explains (the towers account for no multiple of 23)."""
    p = count_parameters(resolve(_omni()))
    assert p.vision == 813_524_480
    assert p.sound == 624_084_992
    assert p.total - p.vision - p.sound == 31_577_940_288
    assert p.total - 33_015_546_816 == 2_944


def test_one_embedder_over_frame_pairs_without_the_separate_one():
    """Without separate_video_embedder, RADIOViTModel's single embedder reads 3 x Pt x P^2 inputs (Megatron-LM @
    d98e8a64 : megatron/core/models/vision/radio.py): 1,966,080 parameters, the image embedder's 983,040 less than
    the two together."""
    both = count_parameters(resolve(_omni())).vision
    one = count_parameters(resolve(_omni(vision_separate_video_embedder=False))).vision
    assert both - one == 983_040


@pytest.mark.parametrize("seconds, tokens, width", [(10.0, 125, 126), (1.0, 13, 13), (30.0, 375, 376)])
def test_tokens_of_a_clip(seconds, tokens, width):
    """Megatron-Bridge @ 067f987d : nemotron_omni_utils.py ``compute_audio_token_count``: samples // 160 frames,
    then three times L -> floor((L + 2 - 3) / 2 + 1). 10 s: 160,000 samples, 1,000 frames -> 500 -> 250 -> 125
    tokens; the padded features hold one frame more, 1,001 -> 501 -> 251 -> 126 rows through the encoder. 1 s: 100
    -> 50 -> 25 -> 13, and 101 -> 51 -> 26 -> 13. 30 s: 3,000 -> 1,500 -> 750 -> 375; 3,001 -> 1,501 -> 751 -> 376."""
    m = _omni().model
    assert clip_tokens(m, seconds) == tokens
    assert encoder_width(m, seconds) == width


def test_the_omni_config_json_is_refused_with_the_way_in():
    """Nemotron Omni's config.json names its RADIO tower only by version (vision_config.version c-radio_v4-h):
    refused by name, pointing to the Bridge config.yaml import and the model.sound_* fields."""
    from estimator.config.errors import UnsupportedError
    from estimator.formats.hf.convert import from_hf_config
    arch = "NemotronH_Nano_Omni_Reasoning_V3"
    with pytest.raises(UnsupportedError, match="--bridge-config reads both towers.*model.sound_"):
        from_hf_config({"model_type": arch, "architectures": [arch]})
