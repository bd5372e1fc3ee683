"""Nemotron Omni on the first stage (estimator/memory/vision.py): its Parakeet sound tower's states, trained or
frozen, and the activations of its projection; the RADIO tower's video frames. Expected values by hand in each
docstring.

Model: the Omni's towers (tests/model/test_audio.py: sound encoder 608,879,616 parameters, RADIO with the separate
video embedder) over a small stand-in for its Nemotron-H language model (4 MLP layers of h 2688, RMSNorm, squared
ReLU, no biases: the projections copy its MLP), bf16 weights, fp32 gradients.
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from tests.conftest import make_config
from tests.model.test_audio import RADIO, SOUND

LM = dict(num_layers=4, hidden_size=2688, num_attention_heads=32, vocab_size=1000, normalization="RMSNorm",
          gated_linear_unit=False, activation_func="squared_relu", add_bias_linear=False, ffn_hidden_size=1856)
OMNI = dict(LM, **RADIO, **SOUND)
ENCODER = 608_879_616
FROZEN_TOWER = dict(freeze_vision_model=True, image_resolution=512)


def _stage(model=OMNI, tp=2, **training):
    cfg = make_config(model, {"tensor_model_parallel_size": tp}, {"world_size": tp, **training})
    return estimate(cfg).stages[0]


def test_a_frozen_sound_encoder_keeps_its_weights_only():
    """freeze_sound_encoder: the encoder, whole on every TP rank, keeps its bf16 weights (2 B x 608,879,616 =
    1,217,759,232 bytes either way) but neither its fp32 gradients (4 B each: 2,435,518,464 bytes) nor Adam's
    states (DP 1, no distributed optimizer: fp32 main weights and two moments, 12 B each: 7,306,555,392 bytes)."""
    trained = _stage(**FROZEN_TOWER)
    frozen = _stage(**FROZEN_TOWER, freeze_sound_encoder=True)
    assert trained.weights_bytes == frozen.weights_bytes
    assert trained.gradients_bytes - frozen.gradients_bytes == 4 * ENCODER
    assert trained.optimizer_bytes - frozen.optimizer_bytes == 12 * ENCODER


def test_the_projection_is_split_like_the_language_model_s_mlp():
    """freeze_sound_projection on TP 2: fc1 1024 x 4096 and fc2 4096 x 2688 split over the two ranks,
    (4,194,304 + 11,010,048) / 2 = 7,602,176, and the RMSNorm's 1,024 whole: 7,603,200 parameters a GPU, 4 B of
    gradient each: 30,412,800 bytes."""
    trained = _stage(**FROZEN_TOWER, freeze_sound_encoder=True)
    frozen = _stage(**FROZEN_TOWER, freeze_sound_encoder=True, freeze_sound_projection=True)
    assert trained.gradients_bytes - frozen.gradients_bytes == 4 * 7_603_200


def test_the_projection_s_activations_for_one_clip():
    """One 10-second clip per sample, micro-batch 1, TP 2, the encoder frozen (it keeps nothing: no parameter and
    not its input wants a gradient), the projection trained over R = 126 rows (1,001 padded mel frames subsampled
    three times: tests/model/test_audio.py), B = 2 bytes:

        fc1's fused RMSNorm: its input and output 2 x 2 x 126 x 1024 = 516,096, fp32 rsigma 4 x 126 = 504
        fc1's output (squared ReLU's input) and fc2's input 2 x 2 x 126 x 4096 / 2 = 1,032,192

    1,548,792 bytes more than without the clip; with the projection frozen too, nothing more."""
    base = _stage(**FROZEN_TOWER, freeze_sound_encoder=True)
    clip = _stage(**FROZEN_TOWER, freeze_sound_encoder=True, audio_clips_per_sample=1)
    assert clip.activations_bytes - base.activations_bytes == 1_548_792
    frozen = dict(FROZEN_TOWER, freeze_sound_encoder=True, freeze_sound_projection=True)
    assert _stage(**frozen, audio_clips_per_sample=1).activations_bytes == _stage(**frozen).activations_bytes


def test_clips_scale_with_the_micro_batch_and_their_count():
    """R = micro-batch x clips x 126 rows: micro-batch 2 with 3 clips each is six clips, 6 x 1,548,792 =
    9,292,752 bytes (every term is linear in R)."""
    kw = dict(FROZEN_TOWER, freeze_sound_encoder=True, micro_batch_size=2, global_batch_size=2)
    assert (_stage(**kw, audio_clips_per_sample=3).activations_bytes - _stage(**kw).activations_bytes
            == 6 * 1_548_792)


def test_video_frames_pass_the_tower_in_pairs():
    """vision_temporal_patch_size 2: 8 frames of 512 pixels are 4 images' worth through the tower and its
    projector, so with the tower frozen (only the projector keeps tensors) 8 video frames cost what 4 images do."""
    video = _stage(**FROZEN_TOWER, freeze_sound_encoder=True, video_frames_per_sample=8)
    images = _stage(**FROZEN_TOWER, freeze_sound_encoder=True, images_per_sample=4)
    assert video.activations_bytes == images.activations_bytes > _stage(**FROZEN_TOWER,
                                                                         freeze_sound_encoder=True).activations_bytes


def test_a_trained_tower_keeps_the_video_embedder_s_input():
    """With the tower trained, the video embedder keeps its input, 3 x 2 x 16^2 = 1,536 values per patch where an
    image's embedder keeps 768: 2 video frames (one pair, 1,024 patches of a 512-pixel frame) keep B x 1,024 x 768
    = 1,572,864 bytes more than one image, whose patches, tokens and layers are the same."""
    video = _stage(image_resolution=512, freeze_sound_encoder=True, video_frames_per_sample=2)
    image = _stage(image_resolution=512, freeze_sound_encoder=True, images_per_sample=1)
    assert video.activations_bytes - image.activations_bytes == 2 * 1024 * 768


def test_a_trained_encoder_with_clips_is_refused_by_name():
    with pytest.raises(ConfigError, match="training.freeze_sound_encoder"):
        _stage(**FROZEN_TOWER, audio_clips_per_sample=1)


def test_the_assumptions_name_the_sound_tower_and_the_frames():
    """The estimate says what it assumed: the sound tower's parameters a GPU on TP 2 (the encoder 608,879,616
    whole, the projection 7,603,200: 616,482,816), its state, and the clips' tokens; the frames beside the tower."""
    cfg = make_config(OMNI, {"tensor_model_parallel_size": 2},
                      {"world_size": 2, **FROZEN_TOWER, "freeze_sound_encoder": True, "audio_clips_per_sample": 1,
                       "video_frames_per_sample": 4})
    said = " ".join(estimate(cfg).to_dict()["assumptions"])
    assert "Sound tower (Parakeet, 24 conformer blocks, 616,482,816 parameters a GPU, encoder frozen, projection " \
           "trained)" in said
    assert "1 clip(s) of 10 s a sequence, 125 tokens each" in said
    assert "4 video frame(s) of 512 pixels a sequence, 2 a patch" in said
