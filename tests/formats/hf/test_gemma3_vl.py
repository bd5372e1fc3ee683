"""Gemma 3 with its vision tower (issue 27): the Gemma 3 language model of text_config and the SigLIP tower with its
pooling projector, as Megatron-Bridge's Gemma3VLBridge builds them (NVIDIA-NeMo/Megatron-Bridge @ 067f987d :
src/megatron/bridge/models/gemma_vl/gemma3_vl_bridge.py, modeling_gemma3_vl.py: ``vision_tower`` is transformers'
SigLIP vision model whole on every tensor-parallel rank, ``Gemma3VLMultimodalProjector`` an average pool, an RMSNorm
and a column-parallel linear). Expected values are worked out by hand in each docstring and checked against
KerasHub's published counts (keras-team/keras-hub @ 71453d08 : keras_hub/src/models/gemma3/gemma3_presets.py,
``params`` of gemma3_instruct_4b / 12b / 27b and of their ``_text`` presets; KerasHub's vocabulary is 262,144,
Hugging Face's 262,208).

No genuine Gemma 3 vision config.json was found in a citable repository, so none is catalogued; the inputs here
are written in the Hub files' shape (text_config states only what differs from transformers' Gemma3TextConfig
defaults, which the import fills in).
"""

from __future__ import annotations

import pytest

from estimator import estimate, from_hf_config
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.model.params import count_parameters_of
from estimator.model.vision import vision_params

VISION = {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
          "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}
TEXT = {
    "4b": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
           "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
    "12b": {"hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text", "num_attention_heads": 16,
            "num_hidden_layers": 48, "num_key_value_heads": 8, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024},
    "27b": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
            "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
            "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024},
}


def _hf(size: str = "4b", **vision) -> dict:
    return {"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
            "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
            "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
            "text_config": dict(TEXT[size]), "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
            "vision_config": {**VISION, **vision}}


@pytest.mark.parametrize("size, h, keras_total, keras_text", [
    ("4b", 2560, 4_299_915_632, 3_880_099_328),
    ("12b", 3840, 12_187_079_280, 11_765_788_416),
    ("27b", 5376, 27_432_062_576, 27_009_002_240),
])
def test_tower_and_projector_by_hand_equal_the_published_difference(size, h, keras_total, keras_text):
    """The tower (hv 1152, 27 layers, 16 heads, MLP 4304, patch 14, image 896): Conv2d 3 x 14^2 x 1152 + 1152 =
    678,528; positions (896 / 14)^2 = 4096 x 1152 = 4,718,592; each layer LayerNorms 4 x 1152 = 4608, q/k/v/out
    4 x 1152^2 + 4 x 1152 = 5,313,024, fc1 and fc2 2 x 1152 x 4304 + 4304 + 1152 = 9,921,872: 15,239,504, 27 of them
    411,466,608; post_layernorm 2304. Tower 416,866,032. Projector: RMSNorm 1152 and the linear 1152 x h. So
    4B (h 2560): 419,816,304; 12B (3840): 421,290,864; 27B (5376): 423,060,336, each KerasHub's vision preset count
    minus its text preset count. The language model is KerasHub's text count plus the 64 more vocabulary rows of
    Hugging Face's 262,208 (tied): + 64 h."""
    m = from_hf_config(_hf(size))
    assert (m["vision_model_type"], m["vision_spatial_merge_size"], m["vision_num_position_embeddings"]) == (
        "gemma3_vl", 4, 4096)
    c = count_parameters_of({"model": m, "training": {"world_size": 1}})
    assert c.vision == 416_866_032 + 1152 + 1152 * h == keras_total - keras_text
    assert c.total - c.vocab_padding - c.vision == keras_text + 64 * h


def _model(**model):
    from estimator.config.load import load_config
    return load_config({"model": {**from_hf_config(_hf()), **model}, "training": {"world_size": 1}}).model


def test_tensor_parallelism_splits_the_projector_linear_only():
    """TP 2: the tower's 416,866,032 and the projector's norm 1152 whole on each GPU, the projector's linear
    1152 x 2560 = 2,949,120 halved: 416,867,184 + 1,474,560 = 418,341,744 a GPU."""
    vp = vision_params(_model())
    assert vp.encoder.per_rank(2) + vp.projection.per_rank(2) == 418_341_744


def _est(tp=1, **training):
    cfg = {"model": from_hf_config(_hf()), "parallelism": {"tensor_model_parallel_size": tp},
           "training": {"world_size": 8, "seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 8,
                        "image_resolution": 896, **training}}
    return estimate(cfg)


def test_one_image_by_hand_at_any_tp():
    """One 896-pixel image: N = 4096 patches, 256 tokens, B = 2. Each of the 27 layers keeps
    9 B N hv + 2 B N fv + 16 N + 4 N heads = 84,934,656 + 70,516,736 + 65,536 + 262,144 = 155,779,072
    (4,206,034,944 for 27); the Conv2d's input 2 x 4096 x 3 x 196 = 4,816,896; post_layernorm's input and
    statistics and the pool's input 2 B N hv + 8 N = 18,907,136; the projector 2 B x 256 x 1152 + 4 x 256 =
    1,180,672. 4,230,939,648 bytes, at TP 1 and TP 2 alike; with the tower frozen the projector's 1,180,672; with
    the projector frozen too nothing."""
    for tp in (1, 2):
        none, one = (_est(tp, images_per_sample=n).stages[0].activations_bytes for n in (0, 1))
        assert one - none == 4_230_939_648
    frozen = _est(images_per_sample=1, freeze_vision_model=True).stages[0].activations_bytes
    assert frozen - _est(freeze_vision_model=True).stages[0].activations_bytes == 1_180_672
    both = dict(freeze_vision_model=True, freeze_vision_projection=True)
    assert _est(images_per_sample=1, **both).stages[0].activations_bytes == _est(**both).stages[0].activations_bytes


def test_frozen_tower_keeps_weights_only():
    """bf16 weights, fp32 gradients: freezing the tower (416,866,032 parameters, whole on each TP rank) takes
    4 B of gradient each off stage 0, at TP 1 and TP 2."""
    for tp in (1, 2):
        trained, frozen = _est(tp).stages[0], _est(tp, freeze_vision_model=True).stages[0]
        assert trained.weights_bytes == frozen.weights_bytes
        assert trained.gradients_bytes - frozen.gradients_bytes == 4 * 416_866_032


def test_the_image_side_is_fixed_by_the_positions():
    with pytest.raises(ConfigError, match="must be 896 pixels"):
        _est(images_per_sample=1, image_resolution=448)


@pytest.mark.parametrize("change, error, words", [
    ({"vision_config": {**VISION, "hidden_act": "quick_gelu"}}, UnsupportedError, "hidden_act"),
    ({"vision_config": {**VISION, "image_size": 900}}, ConfigError, "image_size"),
    ({"mm_tokens_per_image": 250}, ConfigError, "mm_tokens_per_image"),
    ({"vision_config": {**VISION, "projection_dim": 2048}}, UnsupportedError, "projection_dim"),
    ({"vision_config": {k: v for k, v in VISION.items() if k != "num_hidden_layers"}}, ConfigError,
     "num_hidden_layers"),
])
def test_bad_values_name_the_key(change, error, words):
    with pytest.raises(error, match=words):
        from_hf_config({**_hf(), **change})


WRONG = [[1], ["silu"], {"a": 1}, "abc", True, False, -1, 0, 1.5, float("nan"), float("inf"), 10 ** 30, None]


def test_a_wrong_value_for_any_wrapper_or_vision_key_is_an_error_that_names_it():
    """As tests/formats/hf/test_hf_types.py does for the catalogued families: each top-level and vision_config key
    replaced by each wrong value gives a model section or an error (a ConfigError names the key)."""
    from estimator.config.errors import EstimatorError
    hf = _hf()
    cases = [({**hf, key: w}, {f"config.json:{key}"}) for key in hf for w in WRONG]
    cases += [({**hf, "vision_config": {**VISION, key: w}}, {f"config.json:vision_config.{key}",
                                                             "config.json:vision_config.image_size",
                                                             "config.json:mm_tokens_per_image"})
              for key in VISION for w in WRONG]
    for cfg, fields in cases:
        try:
            from_hf_config(cfg)
        except ConfigError as exc:
            assert {p.field for p in exc.problems} <= fields | {"config.json:text_config"}, (cfg, exc)
        except EstimatorError:
            pass
