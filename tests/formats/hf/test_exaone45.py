"""EXAONE 4.5 (issue 27): EXAONE 4.0's language model with its MTP layers and the windowed ViT with grouped-query
attention, as Megatron-Bridge's Exaone45Bridge builds them (NVIDIA-NeMo/Megatron-Bridge @ 067f987d :
src/megatron/bridge/models/exaone/exaone45/exaone45_bridge.py, modelling_exaone45/). No genuine EXAONE 4.5
config.json was found in a citable repository, so none is catalogued. The input is the released form (a text_config
of model_type exaone4, transformers' Exaone4_5_Config) with the shapes of the checkpoint NVIDIA/TensorRT-LLM @
16bd5167 : tests/unittest/_torch/modeling/test_modeling_exaone4_5.py ``EXAONE_4_5_TEST_CONFIG`` runs (its vision_config
verbatim; its text_config's EXAONE 4.0 keys: h 5120, 64 layers, 40 query / 8 key-value heads of 128, MLP 27392,
vocabulary 153,600, untied). Expected values are worked out by hand in each docstring.
"""

from __future__ import annotations

import pytest

from estimator import estimate, from_hf_config
from estimator.config.errors import ConfigError, EstimatorError, UnsupportedError
from estimator.model.params import count_parameters_of
from tests.formats.hf.test_hf_types import WRONG

VISION = {"depth": 28, "dtype": "bfloat16", "fullatt_block_indexes": [6, 13, 20, 27], "hidden_act": "silu",
          "hidden_size": 2048, "in_channels": 3, "in_chans": 3, "initializer_range": 0.02, "intermediate_size": 5120,
          "model_type": "exaone4_5_vision", "num_heads": 32, "num_key_value_heads": 8, "out_hidden_size": 5120,
          "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14, "temporal_patch_size": 2,
          "tokens_per_second": 2, "torch_dtype": "bfloat16", "window_size": 112}
TEXT = {"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "hidden_act": "silu", "hidden_size": 5120,
        "head_dim": 128, "intermediate_size": 27392, "num_hidden_layers": 64, "num_attention_heads": 40,
        "num_key_value_heads": 8, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
        "sliding_window": 4096, "sliding_window_pattern": "LLLG", "vocab_size": 153600, "tie_word_embeddings": False}
CONFIG = {"architectures": ["Exaone4_5_ForConditionalGeneration"], "model_type": "exaone4_5", "image_token_id": 67,
          "video_token_id": 68, "vision_start_token_id": 73, "vision_end_token_id": 74, "vision_token_id": 67,
          "tie_word_embeddings": False, "transformers_version": "5.0.0.dev0", "use_cache": True,
          "text_config": TEXT, "vision_config": VISION}
LANGUAGE, TOWER = 32_527_504_384, 1_286_482_944


def _count(hf) -> int:
    return count_parameters_of({"model": from_hf_config(hf), "training": {"world_size": 8}}).total


def test_exaone_4_5_33b_by_hand():
    """The language model: embedding and output layer 2 x 153,600 x 5120 = 1,572,864,000; each layer q and o
    2 x 5120^2 = 52,428,800, k and v 2 x 5120 x 1024 = 10,485,760, per-head q / k norms 2 x 128, the two post-norms
    2 x 5120, MLP 3 x 5120 x 27392 = 420,741,120: 483,666,176; 64 layers 30,954,635,264; the final norm 5120:
    32,527,504,384. The tower (tests/memory/test_vision_exaone45.py, with out_hidden_size 5120): 1,286,482,944.
    33,813,987,328 in all: transformers' EXAONE 4.5 page gives "33 billion parameters in total, including 1.2
    billion parameters from the vision encoder" (huggingface.co/docs/transformers/main/model_doc/exaone4_5), 33.8
    billion written down to 33, the encoder without its merger 1,177,415,680."""
    m = from_hf_config(CONFIG)
    assert (m["vision_model_type"], m["vision_num_query_groups"], m["vision_out_hidden_size"]) == ("exaone45", 8, 5120)
    total = _count(CONFIG)
    assert total == LANGUAGE + TOWER == 33_813_987_328
    assert int(total / 1e9) == 33


def test_mtp_layers_are_read_from_the_text_config():
    """num_nextn_predict_layers 1 (the checkpoint's mtp.* tensors, which Hugging Face does not build and Bridge
    does): one more EXAONE 4.0 layer 483,666,176, eh_proj 2 x 5120^2 = 52,428,800, enorm, hnorm and its final norm
    3 x 5120: 536,110,336. mtp_share_layers repeats that one layer (mtp_use_repeated_layer)."""
    one = {**CONFIG, "text_config": {**TEXT, "num_nextn_predict_layers": 1}}
    assert _count(one) - _count(CONFIG) == 536_110_336
    shared = from_hf_config({**CONFIG, "text_config": {**TEXT, "num_nextn_predict_layers": 2, "mtp_share_layers": True}})
    assert (shared["mtp_num_layers"], shared["mtp_use_repeated_layer"]) == (2, True)


def test_the_first_released_text_model_type_maps_alike():
    """EXAONE 4.5 was first released with text_config.model_type exaone4_5_text (transformers maps it to exaone4)."""
    old = {**CONFIG, "text_config": {**TEXT, "model_type": "exaone4_5_text"}}
    assert from_hf_config(old) == from_hf_config(CONFIG)


def test_images_reach_the_estimate():
    """An imported EXAONE 4.5 estimates with images: one 448-pixel image adds 256 tokens' worth of tower
    activations (more bytes than none)."""
    cfg = {"model": from_hf_config(CONFIG), "parallelism": {"tensor_model_parallel_size": 8},
           "training": {"world_size": 8, "seq_length": 4096}}
    none = estimate(cfg).stages[0].activations_bytes
    cfg["training"] = {**cfg["training"], "images_per_sample": 1, "image_resolution": 448}
    assert estimate(cfg).stages[0].activations_bytes > none


def test_unmapped_values_are_refused_by_name():
    with pytest.raises(UnsupportedError, match="vision_config.hidden_act"):
        from_hf_config({**CONFIG, "vision_config": {**VISION, "hidden_act": "gelu"}})
    with pytest.raises(UnsupportedError, match="new_key"):
        from_hf_config({**CONFIG, "vision_config": {**VISION, "new_key": 1}})
    with pytest.raises(ConfigError, match="in_chans"):
        from_hf_config({**CONFIG, "vision_config": {**VISION, "in_chans": 4}})
    with pytest.raises(ConfigError, match="vision_config"):
        from_hf_config({k: v for k, v in CONFIG.items() if k != "vision_config"})


def test_a_wrong_value_for_any_vision_key_is_an_error_that_names_it():
    """Every vision_config key replaced by each WRONG value: a model section or an EstimatorError; a ConfigError
    names the key."""
    for key in VISION:
        for w in WRONG:
            try:
                from_hf_config({**CONFIG, "vision_config": {**VISION, key: w}})
            except ConfigError as exc:
                assert {p.field for p in exc.problems} <= {f"config.json:vision_config.{key}"}, (key, w, exc)
            except EstimatorError:
                pass
