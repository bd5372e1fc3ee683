"""GLM-4.5V (issue 27): GLM-4.5-Air's language model and transformers' GLM-4V vision tower, as Megatron-Bridge's
GLM45VBridge builds them (NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/models/glm_vl/
glm_45v_bridge.py, modeling_glm_45v.py). No genuine GLM-4.5V config.json was found in a citable repository, so none
is catalogued; the input is Megatron-Bridge's own toy GLM-4.5V configuration (tests/functional_tests/test_groups/
models/glm_vl/test_glm_45v_conversion.py ``HF_GLM_45V_TOY_MODEL_CONFIG``, the keys a GLM-4.5V config.json has).
Expected values are worked out by hand in each docstring.
"""

from __future__ import annotations

import pytest

from estimator import estimate, from_hf_config
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.model.params import count_parameters_of
from estimator.model.vision import vision_params

VISION = {"model_type": "glm4v_moe", "attention_bias": False, "attention_dropout": 0.0, "depth": 2,
          "hidden_act": "silu", "hidden_size": 256, "image_size": 336, "in_channels": 3, "initializer_range": 0.02,
          "intermediate_size": 10944, "num_heads": 2, "out_hidden_size": 128, "patch_size": 14, "rms_norm_eps": 1e-05,
          "spatial_merge_size": 2, "temporal_patch_size": 2}
TOY = {
    "architectures": ["Glm4vMoeForConditionalGeneration"], "model_type": "glm4v_moe",
    "image_start_token_id": 151339, "image_end_token_id": 151340, "video_start_token_id": 151341,
    "video_end_token_id": 151342, "image_token_id": 151363, "video_token_id": 151364,
    "tie_word_embeddings": False, "transformers_version": "4.57.1",
    "text_config": {
        "model_type": "glm4v_moe_text", "pad_token_id": 151329, "vocab_size": 151552,
        "eos_token_id": [151329, 151336, 151338], "head_dim": 128, "attention_bias": True, "attention_dropout": 0.0,
        "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 512, "initializer_range": 0.02,
        "intermediate_size": 1024, "max_position_embeddings": 65536, "moe_intermediate_size": 128, "n_group": 1,
        "n_routed_experts": 8, "n_shared_experts": 1, "num_local_experts": 8, "norm_topk_prob": True,
        "num_attention_heads": 16, "num_experts_per_tok": 4, "num_hidden_layers": 4, "num_key_value_heads": 8,
        "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-05, "dtype": "bfloat16",
        "rope_scaling": {"rope_type": "default", "mrope_section": [8, 12, 12]}, "rope_theta": 10000.0,
        "routed_scaling_factor": 1.0, "topk_group": 1, "use_cache": True, "use_qk_norm": False},
    "vision_config": VISION,
}


def _model():
    from estimator.config.load import load_config
    return load_config({"model": from_hf_config(TOY), "training": {"world_size": 1}}).model


def test_the_tower_by_hand():
    """hv 256, 2 layers of 2 heads, out 128 (also the layers' MLP width), merger width 10,944, patch 14, 2 frames,
    image 336 ((336 / 14)^2 = 576 positions), merge 2. Conv3d with bias 3 x 2 x 14^2 x 256 + 256 = 301,312; each
    layer: RMSNorms 512, qkv 3 x 256^2 = 196,608, proj 256^2 = 65,536, gate and up 2 x 256 x 128 = 65,536, down
    128 x 256 = 32,768: 360,960, two 721,920 (encoder 1,023,232). Merger: proj 128^2 = 16,384, LayerNorm 256, gate and
    up 2 x 128 x 10,944 = 2,801,664, down 1,400,832: 4,219,136. Never frozen: positions 576 x 256 = 147,456, the two
    outer RMSNorms 512, the downsample 4 x 256 x 128 + 128 = 131,200: 279,168. Tower 5,521,536."""
    m = from_hf_config(TOY)
    assert (m["vision_model_type"], m["vision_ffn_hidden_size"], m["vision_projector_ffn_hidden_size"]) == (
        "glm4v", 128, 10944)
    vp = vision_params(_model())
    assert (vp.encoder.total, vp.projection.total, vp.unfrozen.total) == (1_023_232, 4_219_136, 279_168)
    assert count_parameters_of({"model": m, "training": {"world_size": 1}}).vision == 5_521_536
    assert vp.encoder.per_rank(4) + vp.projection.per_rank(4) + vp.unfrozen.per_rank(4) == 5_521_536


def _est(**training):
    return estimate({"model": from_hf_config(TOY), "training": {"world_size": 1, "seq_length": 4096,
                                                                "micro_batch_size": 1, **training}})


def test_freezing_leaves_the_positions_norms_and_downsample_trained():
    """GLM45VModel.freeze freezes patch_embed and blocks, or the merger: with both on, 279,168 parameters still
    keep fp32 gradients (4 B each: 1,116,672 bytes more than none)."""
    frozen = _est(freeze_vision_model=True, freeze_vision_projection=True).stages[0]
    text = estimate({"model": {k: v for k, v in from_hf_config(TOY).items() if not k.startswith("vision_")},
                     "training": {"world_size": 1, "seq_length": 4096, "micro_batch_size": 1}}).stages[0]
    assert frozen.gradients_bytes - text.gradients_bytes == 4 * 279_168


def test_activations_by_hand_trained_and_frozen():
    """One 448-pixel image: N = (448 / 14)^2 = 1024 patches, R = 256 merged rows, B = 2.

    Trained: the Conv3d's input 2 x 1024 x 3 x 2 x 196 = 2,408,448 and post_conv_layernorm 4 N hv + 4 N + B N hv =
    1,576,960; the position table 4 x 576 x 256 = 589,824 and grid 8 N = 8192, cos and sin 8 N x 128 = 1,048,576,
    post_layernorm 1,576,960 and the downsample's input 524,288 (3,747,840 in all); each layer
    30 N hv + 8 N fv + 8 N + 4 N heads = 8,929,280, two 17,858,560; the merger 4 B R ho + 4 B R c + 8 R = 22,677,504.
    48,269,312 bytes.

    Both freeze fields on (gradients still reach the positions, outer norms and downsample): post_conv_layernorm
    keeps B N hv = 524,288; the same 3,747,840; each frozen layer 8 N hv + 8 N + 6 B N hv + 4 N heads + 3 B N fv =
    6,045,696, two 12,091,392; the frozen merger 2 B R ho + 3 B R c + 8 R = 16,943,104. 33,306,624 bytes."""
    none = _est().stages[0].activations_bytes
    assert _est(images_per_sample=1).stages[0].activations_bytes - none == 48_269_312
    both = dict(freeze_vision_model=True, freeze_vision_projection=True)
    assert (_est(images_per_sample=1, **both).stages[0].activations_bytes
            - _est(**both).stages[0].activations_bytes) == 33_306_624


@pytest.mark.parametrize("key, value, error, words", [
    ("attention_bias", True, UnsupportedError, "attention_bias"),
    ("hidden_act", "gelu", UnsupportedError, "hidden_act"),
    ("image_size", 340, ConfigError, "image_size"),
    ("depth", 0, ConfigError, "vision_config.depth"),
    ("window_size", 112, UnsupportedError, "window_size"),
])
def test_bad_vision_config_values_name_the_key(key, value, error, words):
    with pytest.raises(error, match=words):
        from_hf_config({**TOY, "vision_config": {**VISION, key: value}})


def test_num_local_experts_must_name_the_routed_experts():
    with pytest.raises(ConfigError, match="num_local_experts"):
        from_hf_config({**TOY, "text_config": {**TOY["text_config"], "num_local_experts": 16}})


def test_the_projector_width_belongs_to_glm4v_only():
    from tests.conftest import make_config
    vit = dict(num_layers=4, hidden_size=512, num_attention_heads=8, vocab_size=1000, vision_num_layers=2,
               vision_hidden_size=64, vision_num_attention_heads=4, vision_ffn_hidden_size=128)
    with pytest.raises(ConfigError, match="vision_projector_ffn_hidden_size"):
        estimate(make_config({**vit, "vision_projector_ffn_hidden_size": 256}))
    with pytest.raises(ConfigError, match="vision_projector_ffn_hidden_size"):
        estimate(make_config({**vit, "vision_model_type": "glm4v"}))


WRONG = [[1], ["silu"], {"a": 1}, "abc", True, False, -1, 0, 1.5, float("nan"), float("inf"), 10 ** 30, None]


def test_a_wrong_value_for_any_wrapper_or_vision_key_is_an_error_that_names_it():
    """As tests/formats/hf/test_hf_types.py does for the catalogued families: a model section or an error (a
    ConfigError names the key it read)."""
    from estimator.config.errors import EstimatorError
    cases = [({**TOY, key: w}, {f"config.json:{key}"}) for key in TOY for w in WRONG]
    cases += [({**TOY, "vision_config": {**VISION, key: w}}, {f"config.json:vision_config.{key}",
                                                              "config.json:vision_config.image_size"})
              for key in VISION for w in WRONG]
    for cfg, fields in cases:
        try:
            from_hf_config(cfg)
        except ConfigError as exc:
            assert {p.field for p in exc.problems} <= fields | {"config.json:text_config"}, (cfg, exc)
        except EstimatorError:
            pass
