"""Nemotron Omni's media rules (estimator/config/rules/media.py): each bad input is reported by field, value and
rule; the valid Omni configuration passes."""

from __future__ import annotations

import pytest

from estimator.config.errors import ConfigError
from estimator.config.load import load_config
from tests.conftest import make_config
from tests.memory.test_vision_omni import LM, OMNI

OK = dict(freeze_vision_model=True, freeze_sound_encoder=True, image_resolution=512)


def _load(model=OMNI, **training):
    return load_config(make_config(model, {"tensor_model_parallel_size": 2}, {"world_size": 2, **training}))


def test_the_omni_configuration_with_clips_and_frames_passes():
    cfg = _load(**OK, audio_clips_per_sample=2, video_frames_per_sample=8)
    assert cfg.training.audio_clips_per_sample == 2


@pytest.mark.parametrize("model, training, field, words", [
    (LM, dict(audio_clips_per_sample=1), "training.audio_clips_per_sample", "needs a model with a sound tower"),
    (LM, dict(freeze_sound_encoder=True), "training.freeze_sound_encoder", "needs a model with a sound tower"),
    (dict(LM, sound_hidden_size=512), {}, "model.sound_hidden_size", "applies only with a sound tower"),
    (dict(LM, sound_num_layers=2), {}, "model.sound_num_layers", "beside its radio vision tower"),
    (dict(OMNI, sound_num_attention_heads=3), OK, "model.sound_hidden_size", "multiple of sound_num_attention"),
    (dict(OMNI, sound_subsampling_factor=6), OK, "model.sound_subsampling_factor", "power of 2"),
    (dict(OMNI, sound_conv_kernel_size=8), OK, "model.sound_conv_kernel_size", "must be odd"),
    (dict(OMNI, sound_projector_ffn_hidden_size=4095), OK, "model.sound_projector_ffn_hidden_size",
     "tensor_model_parallel_size"),
    (OMNI, dict(OK, freeze_sound_encoder=False, audio_clips_per_sample=1), "training.freeze_sound_encoder",
     "not modelled"),
    (OMNI, dict(OK, video_frames_per_sample=3), "training.video_frames_per_sample", "multiple of"),
    (dict(OMNI, vision_temporal_patch_size=1), OK, "model.vision_separate_video_embedder", "above 1"),
    (dict(LM, vision_class_token_len=10), {}, "model.vision_class_token_len", "radio"),
    (OMNI, dict(OK, audio_clips_per_sample=40), "training.audio_clips_per_sample", "must fit in the sequence"),
])
def test_each_rule_names_field_value_and_rule(model, training, field, words):
    """The last case: 40 clips of 125 tokens (10 s each) are 5,000 tokens, more than the 4,096 of the sequence."""
    with pytest.raises(ConfigError) as exc:
        _load(model, **training)
    assert any(p.field == field and words in p.message for p in exc.value.problems), exc.value.problems


def test_a_trained_sound_projection_is_something_to_train():
    """With the language model and the vision tower and projection frozen, the sound projection still trains, so
    freeze_language_model is accepted; with the sound parts frozen too nothing trains and it is refused."""
    frozen = dict(OK, freeze_language_model=True, freeze_vision_projection=True)
    assert _load(**frozen).training.freeze_language_model
    with pytest.raises(ConfigError, match="nothing trains"):
        _load(**frozen, freeze_sound_projection=True)
