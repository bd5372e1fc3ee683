"""ERNIE-4.5-VL's config.json (transformers' form, model_type ernie4_5_vl_moe): the language model with its text and
vision expert pools, and the ViT and resampler (estimator/formats/hf/moe.py map_ernie4_5_vl, towers.py ernie_vision).

No genuine Hub config.json was at hand, so the config below is written from transformers' own defaults for
baidu/ERNIE-4.5-VL-28B-A3B-PT (huggingface/transformers @ 020a37d2 : src/transformers/models/ernie4_5_vl_moe/
configuration_ernie4_5_vl_moe.py: ``Ernie4_5_VLMoeTextConfig`` vocab 103,424, h 2560, intermediate 12,288, 28 layers,
20 heads, 4 key-value heads, moe_intermediate_size [1536, 512], moe_k 6, 64 experts, 2 shared, mlp_layer_types
dense then sparse; ``Ernie4_5_VLMoeVisionConfig`` depth 32, hidden 1280, 16 heads, MLP 5120, patch 14, merge 2;
``Ernie4_5_VLMoeConfig`` tie_word_embeddings true), which Megatron-Bridge @ 067f987d : src/megatron/bridge/models/
ernie_vl/ernie45_vl_bridge.py ``provider_bridge`` maps (sigmoid router with expert bias in fp32, shared width =
moe_intermediate_size[0] x moe_num_shared_experts).
"""

from __future__ import annotations

import pytest

from estimator import estimate, from_hf_config
from estimator.config.errors import ConfigError, UnsupportedError
from tests.conftest import make_config

TEXT = {"model_type": "ernie4_5_vl_moe_text", "hidden_size": 2560, "intermediate_size": 12288,
        "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4, "vocab_size": 103424,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "hidden_act": "silu", "use_bias": False,
        "moe_intermediate_size": [1536, 512], "moe_k": 6, "moe_num_experts": 64, "moe_num_shared_experts": 2,
        "moe_norm_min": 1e-12, "mlp_layer_types": ["dense"] + ["sparse"] * 27,
        "rope_parameters": {"rope_theta": 500000.0, "mrope_section": [22, 22, 20]}}
VISION = {"model_type": "ernie4_5_vl_moe_vision", "depth": 32, "hidden_size": 1280, "hidden_act": "quick_gelu",
          "num_heads": 16, "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2, "intermediate_size": 5120,
          "temporal_merge_size": 2, "rms_norm_eps": 1e-6, "initializer_range": 0.02}
CONFIG = {"model_type": "ernie4_5_vl_moe", "architectures": ["Ernie4_5_VLMoeForConditionalGeneration"],
          "text_config": TEXT, "vision_config": VISION, "image_start_token_id": 101304, "image_end_token_id": 101305,
          "image_token_id": 100295, "video_start_token_id": 101306, "video_end_token_id": 101307,
          "video_token_id": 103367, "tie_word_embeddings": True}


def test_the_import_maps_both_pools_and_the_tower():
    m = from_hf_config(CONFIG)
    assert (m["num_experts"], m["moe_router_topk"], m["moe_ffn_hidden_size"], m["moe_vision_ffn_hidden_size"],
            m["moe_shared_expert_intermediate_size"]) == (64, 6, 1536, 512, 3072)
    assert m["moe_layer_freq"] == [0] + [1] * 27
    assert (m["moe_router_score_function"], m["moe_router_enable_expert_bias"]) == ("sigmoid", True)
    assert (m["vision_model_type"], m["vision_num_layers"], m["vision_hidden_size"], m["vision_ffn_hidden_size"],
            m["vision_temporal_patch_size"]) == ("ernie45_vl", 32, 1280, 5120, 1)
    assert m["untie_embeddings_and_output_weights"] is False


def test_28b_a3b_parameters_by_hand():
    """Per layer: attention q and o 2 x 2560^2 = 13,107,200, k and v 2 x 2560 x 4 x 128 = 2,621,440; norms 2 x 2560.
    Layer 0: + MLP 3 x 2560 x 12,288 = 94,371,840: 110,105,600. Layers 1-27: text experts 64 x 3 x 2560 x 1536 =
    754,974,720, vision experts 64 x 3 x 2560 x 512 = 251,658,240, shared 3 x 2560 x 3072 = 23,592,960, two routers
    2 x (64 x 2560 + 64 expert bias) = 327,808; with attention and norms 1,046,287,488, x 27 = 28,249,762,176.
    Embedding (tied) 103,424 x 2560 = 264,765,440; final norm 2,560. Language model 28,624,635,776; with the
    ViT and resampler 774,658,560 (tests/memory/test_vision_ernie.py) 29,399,294,336.

    Published: the model card's "28B total, 3B activated" (ERNIE-4.5-VL-28B-A3B): the language model is 28.62 B
    and one text token passes 3,356,575,616 of it (6 of 64 text experts, 11,796,480 each, in place of all 128
    experts of both pools). The Hub's exact safetensors total was not at hand, so only the nominal figures are
    checked against the card."""
    p = estimate(make_config(from_hf_config(CONFIG))).parameters
    assert p.vision == 774_658_560
    assert p.total == 29_399_294_336
    lm, active = p.total - p.vision, p.active - p.vision
    assert lm == 28_624_635_776 and 28e9 <= lm < 29e9
    assert active == 3_356_575_616 and 3e9 <= active < 4e9


@pytest.mark.parametrize("text, field", [
    ({"moe_intermediate_size": [1536]}, "config.json:moe_intermediate_size"),
    ({"moe_intermediate_size": 1536}, "config.json:moe_intermediate_size"),
    ({"moe_num_experts": [64, 32]}, "config.json:moe_num_experts"),
    ({"mlp_layer_types": ["dense"] * 3}, "config.json:mlp_layer_types"),
])
def test_bad_values_name_the_key(text, field):
    with pytest.raises(ConfigError) as exc:
        from_hf_config({**CONFIG, "text_config": {**TEXT, **text}})
    assert field in {p.field for p in exc.value.problems}, exc.value


@pytest.mark.parametrize("config, words", [
    ({**CONFIG, "text_config": {**TEXT, "use_bias": True}}, "use_bias"),
    ({**CONFIG, "vision_config": {**VISION, "temporal_merge_size": 4}}, "temporal_merge_size"),
    ({**CONFIG, "vision_config": {**VISION, "embed_dim": 1280}}, "embed_dim"),
    ({**CONFIG, "text_config": {**TEXT, "moe_layer_start_index": [1, 1]}}, "moe_layer_start_index"),
])
def test_what_is_not_mapped_is_refused_by_name(config, words):
    with pytest.raises(UnsupportedError, match=words):
        from_hf_config(config)


WRONG = [[1], ["silu"], {"a": 1}, "abc", True, False, -1, 0, 1.5, float("nan"), float("inf"), 10 ** 30, None]


@pytest.mark.parametrize("part", ["text_config", "vision_config"])
def test_a_wrong_value_for_any_key_is_an_error_that_names_it(part):
    """Every key of the text and vision config, replaced by each value of WRONG: a model section or an
    EstimatorError naming the key, never a traceback (tests/formats/hf/test_hf_types.py's loop)."""
    from estimator.config.errors import EstimatorError
    for key in CONFIG[part]:
        for wrong in WRONG:
            try:
                from_hf_config({**CONFIG, part: {**CONFIG[part], key: wrong}})
            except ConfigError as exc:
                fields = {p.field for p in exc.problems}
                assert fields <= {f"config.json:{key}", f"config.json:{part}.{key}", "config.json:num_hidden_layers",
                                  "config.json:mlp_layer_types", f"config.json:{part}"}, (key, wrong, exc)
            except EstimatorError:
                pass
