"""Qwen3.5 from its Hub ids (issue 27): the language model as Megatron-Bridge's Qwen35VL bridges map it, and the
vision tower, with exact parameter counts held against the Hugging Face checkpoints' safetensors totals.

The published totals (AlexsJones/llmfit @ 3f44fd30 : scripts/scrape_hf_models.py, the Hub API's safetensors counts,
also in the catalog files) count the whole checkpoint: language model, MTP layer (``mtp.*``) and vision tower
(``model.visual.*``). The model cards' rounded "35B / 3B active", "27B" and "397B / 17B active" leave out the MTP
layer and count the vision tower (0.45B; Qwen3.5-397B-A17B's language model alone rounds to 396B).
"""

from __future__ import annotations

import pytest

from estimator import estimate, from_hf_config
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.formats import hf_catalog
from estimator.model.params import count_parameters_of

IDS = ("Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-397B-A17B")
#: The Hub's safetensors totals (source above).
SAFETENSORS = {"Qwen/Qwen3.5-27B": 27_781_427_952, "Qwen/Qwen3.5-35B-A3B": 35_951_822_704,
               "Qwen/Qwen3.5-397B-A17B": 403_397_928_944}


def _counts(hf_id):
    return count_parameters_of({"model": from_hf_config(hf_id), "training": {"world_size": 8}})


def _vision_by_hand(hv, fv, layers, out, patch=16, frames=2, channels=3, positions=2304, merge=2):
    """Qwen3-VL's tower: Conv3d patch embedding with bias, learned positions, per layer two LayerNorms (weight and
    bias), qkv / proj / fc1 / fc2 with biases, and the merger: LayerNorm over hv, fc1 (4 hv)^2 + bias, fc2 4 hv x out
    + bias."""
    layer = 2 * 2 * hv + (3 * hv * hv + 3 * hv) + (hv * hv + hv) + (hv * fv + fv) + (fv * hv + hv)
    wide = merge * merge * hv
    return (channels * frames * patch * patch * hv + hv + positions * hv + layers * layer
            + 2 * hv + wide * wide + wide + wide * out + out)


def test_the_35b_a3b_counts_by_hand():
    """Qwen3.5-35B-A3B, h 2048, vocabulary 248,320 (untied), 40 layers (30 gated delta nets, 10 gated attention),
    every layer MoE.

    Embedding and output layer: 2 x 248,320 x 2048 = 1,017,118,720.
    Gated delta net (16 key heads, 32 value heads of 128): in_proj 2048 x (2 x 2048 + 2 x 4096 + 2 x 32) =
    25,296,896; conv1d (2 x 2048 + 4096) x 4 = 32,768; A_log and dt_bias 64; out_norm 128; out_proj 4096 x 2048 =
    8,388,608; input norm 2048: 33,720,512.
    Gated attention (16 heads, 2 groups, head 256): q and its gate 2 x 16 x 256 x 2048 = 16,777,216; k, v
    2 x 2 x 256 x 2048 = 2,097,152; o 4096 x 2048 = 8,388,608; q/k norms 512; input norm 2048: 27,265,536.
    MoE: router 256 x 2048 = 524,288; experts 256 x 3 x 2048 x 512 = 805,306,368; shared expert 3 x 2048 x 512 =
    3,145,728 and its gate 2048; pre-MLP norm 2048: 808,980,480.
    Layers: 30 x 842,700,992 + 10 x 836,246,016 = 33,643,489,920; final norm 2048.
    Language model: 34,660,610,688.
    MTP layer: eh_proj 2 x 2048 x 2048 = 8,388,608, three norms 6144, a gated-attention MoE layer 836,246,016:
    844,640,768.
    Vision tower (hv 1152, 27 layers, MLP 4304, out 2048): patch embedding 3 x 2 x 16 x 16 x 1152 + 1152 =
    1,770,624; positions 2304 x 1152 = 2,654,208; layers 27 x 15,239,504 = 411,466,608; merger 2304 + 4608^2 + 4608
    + 4608 x 2048 + 2048 = 30,679,808: 446,571,248.
    Total 35,951,822,704, the Hub's safetensors total."""
    c = _counts("Qwen/Qwen3.5-35B-A3B")
    assert c.mtp == 844_640_768
    assert c.vision == 446_571_248 == _vision_by_hand(1152, 4304, 27, 2048)
    assert c.total - c.mtp - c.vision == 34_660_610_688
    assert c.total == 35_951_822_704 == SAFETENSORS["Qwen/Qwen3.5-35B-A3B"]
    # Active: the top-8 of 256 experts in each of the 40 MoE layers (the card's "3B" leaves out MTP and rounds)
    idle = 40 * (256 - 8) * 3 * 2048 * 512
    assert c.active - c.mtp_active == c.total - c.mtp - idle
    assert 3e9 <= c.active - c.mtp_active - c.vision < 3.5e9


@pytest.mark.parametrize("hf_id", IDS)
def test_every_qwen35_equals_the_hub_total_and_the_card_figure(hf_id):
    """The whole checkpoint (language model, MTP layer, vision tower) equals the safetensors total; without the MTP
    layer it rounds to the card's figure. The cards count the vision tower: without it Qwen3.5-397B-A17B's language
    model is 396,346,350,336 parameters, which rounds to 396B, not the card's 397B."""
    c = _counts(hf_id)
    assert c.total == SAFETENSORS[hf_id] == hf_catalog.get(hf_id).published["total"]
    card = {"Qwen/Qwen3.5-27B": 27, "Qwen/Qwen3.5-35B-A3B": 35, "Qwen/Qwen3.5-397B-A17B": 397}[hf_id]
    assert round((c.total - c.mtp) / 1e9) == card
    if hf_id == "Qwen/Qwen3.5-397B-A17B":
        assert round((c.total - c.mtp - c.vision) / 1e9) == 396
    hv_out = from_hf_config(hf_id)["hidden_size"]
    assert c.vision == _vision_by_hand(1152, 4304, 27, hv_out)


def test_the_mapping_follows_the_bridge():
    """Megatron-Bridge @ 067f987d : models/qwen/qwen35_bridge.py and qwen_vl/qwen35_vl_bridge.py: gated delta net
    every layer but each 4th (gated attention), q/k norms, the attention output gate, head 256; MoE with the gated
    shared expert and global_aux_loss at 1e-3; one MTP layer; untied embeddings (the wrapper's
    tie_word_embeddings); the vision tower's dims from vision_config."""
    dense, moe = from_hf_config("Qwen/Qwen3.5-27B"), from_hf_config("Qwen/Qwen3.5-35B-A3B")
    for m in (dense, moe):
        assert m["experimental_attention_variant"] == "gdn" and m["linear_attention_freq"] == 4
        assert m["attention_output_gate"] and m["qk_layernorm"] and m["kv_channels"] == 256
        assert m["mtp_num_layers"] == 1 and m["untie_embeddings_and_output_weights"]
        assert (m["vision_num_layers"], m["vision_hidden_size"], m["vision_num_attention_heads"],
                m["vision_ffn_hidden_size"]) == (27, 1152, 16, 4304)
        assert m["vision_out_hidden_size"] == m["hidden_size"]
    assert dense["ffn_hidden_size"] == 17408 and "num_experts" not in dense
    assert moe["num_experts"] == 256 and moe["moe_shared_expert_gate"]
    assert moe["moe_shared_expert_intermediate_size"] == 512
    assert moe["moe_router_load_balancing_type"] == "global_aux_loss" and moe["moe_aux_loss_coeff"] == 1e-3


def _config(**changes):
    cfg = hf_catalog.get("Qwen/Qwen3.5-35B-A3B").config()
    for path, value in changes.items():
        d = cfg
        *keys, last = path.split(".")
        for k in keys:
            d = d[k]
        if value is None:
            d.pop(last)
        else:
            d[last] = value
    return cfg


def test_a_layer_pattern_other_than_the_interval_is_kept_as_a_list():
    types = ["linear_attention"] * 39 + ["full_attention"]
    m = from_hf_config(_config(**{"text_config.layer_types": types}))
    assert m["linear_attention_freq"] == [1] * 39 + [0]


@pytest.mark.parametrize("change, words", [
    # deepstack mergers are mapped (tests/formats/hf/test_qwen3_vl.py); an index past the tower's depth is not
    ({"vision_config.deepstack_visual_indexes": [8, 16, 99]}, "deepstack"),
    ({"vision_config.hidden_act": "silu"}, "gelu_pytorch_tanh"),
    ({"vision_config.depth": None}, "config.json:vision_config.depth"),
    ({"vision_config": None}, "config.json:vision_config"),
    ({"vision_config.spatial_merge_size": "2"}, "config.json:vision_config.spatial_merge_size"),
    ({"text_config.mtp_use_dedicated_embeddings": True}, "mtp_use_dedicated_embeddings"),
    ({"text_config.attn_output_gate": False}, "attn_output_gate"),
    ({"text_config.layer_types": ["linear_attention"] * 3}, "config.json:layer_types"),
    ({"vision_config.fancy_new_key": 1}, "fancy_new_key"),
])
def test_what_is_not_mapped_is_refused_by_name(change, words):
    with pytest.raises((UnsupportedError, ConfigError), match=words):
        from_hf_config(_config(**change))


def test_the_35b_a3b_estimates_on_8_gpus():
    est = estimate({"model": from_hf_config("Qwen/Qwen3.5-35B-A3B"),
                    "parallelism": {"expert_model_parallel_size": 8},
                    "training": {"world_size": 8, "seq_length": 4096, "images_per_sample": 4}})
    assert est.parameters.vision == 446_571_248 and est.peak_stage.device_bytes > 0


def test_a_text_only_config_maps_without_a_tower():
    """Qwen3_5MoeForCausalLM (model_type qwen3_5_moe_text; Megatron-Bridge's Qwen35MoEBridge, a GPTModel): the
    text_config alone with tie_word_embeddings beside it counts the language model and its MTP layer, 35,505,251,456
    = 35,951,822,704 less the vision tower's 446,571,248."""
    cfg = hf_catalog.get("Qwen/Qwen3.5-35B-A3B").config()
    text = {**cfg["text_config"], "architectures": ["Qwen3_5MoeForCausalLM"], "tie_word_embeddings": False}
    m = from_hf_config(text)
    assert "vision_num_layers" not in m
    c = count_parameters_of({"model": m, "training": {"world_size": 8}})
    assert c.total == 35_951_822_704 - 446_571_248 == 35_505_251_456 and c.vision == 0


@pytest.mark.parametrize("key", ["hidden_size", "num_experts", "layer_types", "linear_num_value_heads",
                                 "mtp_num_hidden_layers", "attn_output_gate", "rms_norm_eps"])
@pytest.mark.parametrize("wrong", [[1], "abc", -1, 1.5, 10 ** 30, True])
def test_a_wrong_text_config_value_is_an_error_naming_the_key(key, wrong):
    """The nested text_config's keys are type-checked like top-level ones: an error naming config.json:<key>."""
    cfg = hf_catalog.get("Qwen/Qwen3.5-35B-A3B").config()
    cfg["text_config"][key] = wrong
    try:
        from_hf_config(cfg)
    except (ConfigError, UnsupportedError) as exc:
        assert key in str(exc), (key, wrong, str(exc))
