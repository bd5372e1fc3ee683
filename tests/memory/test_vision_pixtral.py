"""The pixtral vision tower (Mistral 3 / Magistral / Ministral 3: transformers' PixtralVisionModel and
Mistral3MultiModalProjector as Megatron-Bridge's Ministral3Model builds them; estimator/model/vision.py,
estimator/memory/vision.py). Expected values are worked out by hand in each docstring.

Model: mistralai/Magistral-Small-2509's config.json in the catalog (vision_config: hidden 1024, 24 layers, 16 heads of
64, intermediate 4096, patch 14, 3 channels, image_size 1540; spatial_merge_size 2, no projector bias) into the
language model's 5120. Parameters by hand (huggingface/transformers @ 0233e509 : models/pixtral/modeling_pixtral.py,
models/mistral3/modeling_mistral3.py):

- patch_conv, a Conv2d 3 x 14^2 -> 1024 without bias: 588 x 1024 = 602,112; ln_pre 1024;
- each layer: attention_norm, ffn_norm 2 x 1024, q / k / v / o 4 x 1024^2 = 4,194,304, gate / up / down 3 x 1024 x
  4096 = 12,582,912: 16,779,264; 24 layers 402,702,336;
- the projector: norm 1024, merging_layer 4 x 1024 x 1024 = 4,194,304, linear_1 1024 x 5120 = 5,242,880, linear_2
  5120^2 = 26,214,400: 35,652,608.

Tower 602,112 + 1024 + 402,702,336 = 403,305,472, with the projector 438,958,080; the language model
23,572,403,200 (tests/formats/test_catalog_families.py): 24,011,361,280, the Hugging Face API's safetensors total
for the checkpoint, exactly.
"""

from __future__ import annotations

import copy

import pytest

from estimator import ConfigError, UnsupportedError, from_hf_config, load_config
from estimator.config.errors import EstimatorError
from estimator.formats import catalog, hf_catalog
from estimator.memory.vision import vision_stage
from estimator.model.resolve import resolve
from estimator.model.vision import image_patches, image_tokens, vision_params

HF_ID = "mistralai/Magistral-Small-2509"
ENCODER, PROJECTOR = 403_305_472, 35_652_608
TOTAL = ENCODER + PROJECTOR


def _cfg(hf_id=HF_ID, tp=1, **training):
    return {"model": from_hf_config(hf_id), "parallelism": {"tensor_model_parallel_size": tp},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, "world_size": 8,
                         "sequence_parallel": tp > 1, **training}}


def _stage(tp=1, **training):
    return vision_stage(resolve(load_config(_cfg(tp=tp, **training))))


def test_the_tower_by_hand_and_the_safetensors_total():
    layer = 2 * 1024 + 4 * 1024 ** 2 + 3 * 1024 * 4096
    assert layer == 16_779_264 and 588 * 1024 + 1024 + 24 * layer == ENCODER
    assert 1024 + 4 * 1024 ** 2 + 1024 * 5120 + 5120 ** 2 == PROJECTOR
    vp = vision_params(load_config(_cfg()).model)
    assert (vp.encoder.total, vp.projection.total, vp.total) == (ENCODER, PROJECTOR, TOTAL)
    assert vp.layer.sharded == vp.merger.sharded == 0       # Hugging Face's modules: whole on every TP rank
    row = catalog.describe(HF_ID)
    assert row["parameters"]["total"] == 23_572_403_200 + TOTAL == 24_011_361_280
    assert row["published"]["compared"] == 24_011_361_280 and row["published"]["matches"] is True
    assert row["published"]["vision_parameters"] == 0        # no longer added by hand: the import counts it


def test_ministral_3_3b_is_the_cards_split():
    """Ministral 3 3B: the language model h 3072, 26 layers, 32 heads and 8 KV heads of 128, MLP 9216, tied vocabulary
    131,072: 26 x (2 x 3072 x 4096 + 2 x 3072 x 1024 + 3 x 3072 x 9216 + 2 x 3072) + 131,072 x 3072 + 3072 =
    3,429,006,336; the same Pixtral tower 403,305,472 and a projector into 3072: 1024 + 4,194,304 + 1024 x 3072 +
    3072^2 = 16,778,240. The card's "3.4B language model + 0.4B vision encoder": 3,429,006,336 and 420,083,712."""
    lm = 26 * (2 * 3072 * 4096 + 2 * 3072 * 1024 + 3 * 3072 * 9216 + 2 * 3072) + 131_072 * 3072 + 3072
    vision = ENCODER + 1024 + 4 * 1024 ** 2 + 1024 * 3072 + 3072 ** 2
    assert (lm, vision) == (3_429_006_336, 420_083_712)
    assert round(lm / 1e9, 1) == 3.4 and round(vision / 1e9, 1) == 0.4
    for hf_id in ("mistralai/Ministral-3-3B-Instruct-2512", "mistralai/Ministral-3-3B-Reasoning-2512"):
        assert catalog.describe(hf_id)["parameters"]["total"] == lm + vision == 3_849_090_048


def test_a_448_pixel_image_is_256_tokens():
    m = load_config(_cfg()).model
    assert (image_patches(m, 448), image_tokens(m, 448)) == (1024, 256)


def test_the_saved_tensors_of_one_image_by_hand():
    """One 448-pixel image, b 1, bf16 (B = 2): N = 1,024 patches, R = 256 merged rows, hv 1024, fv 4096, H 16, d 64,
    ho 5120. A layer: (8 + 9 B) N hv + 8 N + 4 N H + 4 B N fv = 27,262,976 + 8,192 + 65,536 + 33,554,432 =
    60,891,136; 24 layers 1,461,387,264. Before them: patch_conv's input B N 588 = 1,204,224, ln_pre 4 N hv + 4 N +
    B N hv = 6,295,552, cos and sin 2 B N d = 262,144, the block mask B N^2 = 2,097,152. The projector: its norm's fp32
    input and statistics 4 N hv + 4 N = 4,198,400; its normalised output, merging_layer's input 2 B N hv = 4,194,304,
    linear_1's input B R hv = 524,288, the GELU's input and output 2 B R ho = 5,242,880. Total 1,485,406,208 B, the
    same at TP 2. Frozen tower: the projector's 9,961,472. Two images: twice that, and the mask over 2,048 patches
    4 times as large: + 4,194,304."""
    N, R, hv, fv, H, ho = 1024, 256, 1024, 4096, 16, 5120
    layer = 26 * N * hv + 8 * N + 4 * N * H + 8 * N * fv
    assert layer == 60_891_136
    front = 2 * N * 588 + (4 * N * hv + 4 * N + 2 * N * hv) + 4 * N * 64 + 2 * N * N
    frozen = 4 * N * hv + 2 * R * hv + 4 * R * ho
    total = 24 * layer + front + 4 * N * hv + 4 * N + frozen
    assert (front, frozen, total) == (9_859_072, 9_961_472, 1_485_406_208)
    one = _stage(images_per_sample=1, image_resolution=448)
    assert (one.trained, one.frozen, one.activations, one.backward_peak) == (TOTAL, 0, total, 6 * N * fv)
    assert _stage(tp=2, images_per_sample=1, image_resolution=448).activations == total
    assert _stage(images_per_sample=2, image_resolution=448).activations == 2 * total + 2 * (4 - 2) * N * N
    f = _stage(images_per_sample=1, image_resolution=448, freeze_vision_model=True)
    assert (f.trained, f.frozen, f.activations) == (PROJECTOR, ENCODER, frozen)
    both = _stage(images_per_sample=1, image_resolution=448, freeze_vision_model=True, freeze_vision_projection=True)
    assert (both.trained, both.frozen, both.activations) == (0, TOTAL, 0)


def test_image_rules_name_the_field():
    """The rotary table covers 1540 / 14 = 110 patches a side: 1540 pixels at most; sides are multiples of 28."""
    load_config(_cfg(images_per_sample=1, image_resolution=1540))
    for res in (1568, 450):
        with pytest.raises(ConfigError) as exc:
            load_config(_cfg(images_per_sample=1, image_resolution=res))
        assert "training.image_resolution" in {p.field for p in exc.value.problems}
    cfg = _cfg()
    cfg["model"] = {**cfg["model"], "vision_num_position_embeddings": 12101}
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert "model.vision_num_position_embeddings" in {p.field for p in exc.value.problems}


@pytest.mark.parametrize("where, key, value, match", [
    ("vision_config", "hidden_act", "gelu", "SiLU"),
    ("vision_config", "head_dim", 128, "head_dim"),
    ("vision_config", "attention_dropout", 0.1, "dropout"),
    ("vision_config", "some_new_key", 1, "some_new_key"),
    (None, "multimodal_projector_bias", True, "biases"),
    (None, "projector_hidden_act", "silu", "GELU"),
    (None, "vision_feature_layer", [-1, -2], "last layer"),
])
def test_what_is_not_mapped_is_refused_by_name(where, key, value, match):
    hf = copy.deepcopy(hf_catalog.get(HF_ID).config())
    (hf[where] if where else hf)[key] = value
    with pytest.raises(UnsupportedError, match=match):
        from_hf_config(hf)


def test_a_wrong_value_for_any_vision_config_key_is_an_error_that_names_it():
    """Every key of the vision_config (and the wrapper's spatial_merge_size) replaced by values of the wrong kind: a
    model section (a key that sizes no tensor) or an EstimatorError; a ConfigError names the key."""
    hf = hf_catalog.get(HF_ID).config()
    for key in hf["vision_config"]:
        for wrong in ([1], "abc", True, -1, 0, 1.5, 10 ** 30, None):
            try:
                from_hf_config({**hf, "vision_config": {**hf["vision_config"], key: wrong}})
            except ConfigError as exc:
                assert {p.field for p in exc.problems} == {f"config.json:vision_config.{key}"}, (key, wrong, exc)
            except EstimatorError:
                pass
    for wrong in ([1], "abc", True, -1, 0, 1.5, 10 ** 30):
        with pytest.raises(ConfigError, match="config.json:spatial_merge_size"):
            from_hf_config({**hf, "spatial_merge_size": wrong})
