"""The gemma4 vision tower (Gemma 4's, transformers' Gemma4VisionModel and Gemma4MultimodalEmbedder as Megatron-Bridge's
Gemma4VLModel builds them; estimator/model/vision.py, estimator/memory/vision.py). Expected values are worked out by
hand in each docstring.

Model: google/gemma-4-26B-A4B's vision_config (the catalog's genuine config.json: hidden 1152, 27 layers, 16 heads
of 72 with 16 key-value heads, intermediate 4304, patch 16, pooling_kernel_size 3, position_embedding_size 10240)
into the language model's width 2816. Parameters by hand (huggingface/transformers @ 0246b4f3 :
src/transformers/models/gemma4/modeling_gemma4.py):

- patch_embedder.input_proj, a Linear 3 x 16^2 = 768 -> 1152 without bias: 884,736;
- patch_embedder.position_embedding_table 2 x 10240 x 1152 = 23,592,960;
- each encoder layer: q, k, v, o (Gemma4ClippableLinear, no bias) 4 x 1152^2 = 5,308,416; gate, up, down 3 x 1152 x
  4304 = 14,874,624; input / post-attention / pre- and post-feedforward norms 4 x 1152 = 4,608; q_norm and k_norm
  2 x 72 = 144 (v_norm has no weight): 20,187,792; 27 layers 545,070,384;
- the pooler has no weights; std_bias / std_scale are buffers;
- embed_vision: embedding_projection 1152 x 2816 without bias = 3,244,032 (its RMSNorm has no scale).

Tower 884,736 + 23,592,960 + 545,070,384 = 569,548,080 (what freeze_vision_model freezes), with the embedder
572,792,112, all of it on every tensor-parallel rank. The model card's figure is rounded: "~550M" vision encoder
parameters (its 25.2B total is the language model's alone); KerasHub @ 71453d08 : keras_hub/src/models/gemma4/
gemma4_presets.py lists gemma4_26b_a4b at 26,000,000,000 parameters with the tower, which the language model's
25,233,141,760 (Hugging Face's checkpoint) + 572,792,112 = 25,805,933,872 rounds to.
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

HF_ID = "google/gemma-4-26B-A4B"
ENCODER, PROJECTOR = 569_548_080, 3_244_032
TOTAL = ENCODER + PROJECTOR


def _cfg(tp=1, **training):
    return {"model": from_hf_config(HF_ID),
            "parallelism": {"tensor_model_parallel_size": tp, "expert_model_parallel_size": 8,
                            "expert_tensor_parallel_size": 1},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, "world_size": 8,
                         "sequence_parallel": tp > 1, **training}}


def _stage(tp=1, **training):
    return vision_stage(resolve(load_config(_cfg(tp, **training))))


def test_the_tower_by_hand():
    layer = 4 * 1152 ** 2 + 3 * 1152 * 4304 + 4 * 1152 + 2 * 72
    assert layer == 20_187_792
    assert 768 * 1152 + 2 * 10240 * 1152 + 27 * layer == ENCODER
    vp = vision_params(load_config(_cfg()).model)
    assert (vp.patch_embed.total, vp.pos_embed.total, vp.layer.total) == (884_736, 23_592_960, layer)
    assert (vp.encoder.total, vp.projection.total, vp.total) == (ENCODER, PROJECTOR, TOTAL)
    assert vp.layer.sharded == vp.merger.sharded == 0       # Hugging Face's modules: whole on every TP rank
    assert round((25_233_141_760 + TOTAL) / 1e9) == 26      # KerasHub's 26,000,000,000


def test_the_catalog_counts_the_tower():
    """Megatron-Core's count of the language model, 25,247,559,680 (tests/formats/hf/test_gemma4.py), + the tower and
    embedder; active: 3,836,948,480 + 572,792,112 (the tower is dense). Gemma-4-31B: 30,807,445,760 + 569,548,080 +
    1152 x 5376 = 6,193,152."""
    p = catalog.describe(HF_ID)["parameters"]
    assert (p["total"], p["active"]) == (25_247_559_680 + TOTAL, 3_836_948_480 + TOTAL) \
        == (25_820_351_792, 4_409_740_592)
    assert catalog.describe("nvidia/Gemma-4-31B-IT-NVFP4")["parameters"]["total"] \
        == 30_807_445_760 + ENCODER + 1152 * 5376 == 31_383_186_992


def test_a_768_pixel_image_is_256_tokens():
    """48 x 48 = 2,304 patches of 16 pixels, averaged 3 x 3: 16 x 16 = 256 tokens (the processor's budget is 280)."""
    m = load_config(_cfg()).model
    assert (image_patches(m, 768), image_tokens(m, 768)) == (2304, 256)
    assert image_tokens(m, 864) == 324


def test_the_saved_tensors_of_one_image_by_hand():
    """One 768-pixel image, b 1, bf16 (B = 2): N = 2,304 patches, R = 256 rows after the pool, hv 1152, fv 4304, H 16,
    d 72, Np 10,240. A layer: 52 N hv + 32 N + 28 N H + 7 B N hv + 4 B N fv = 138,018,816 + 73,728 + 1,032,192 +
    37,158,912 + 79,331,328 = 255,614,976; 27 layers 6,901,604,352. Before them: input_proj's input B N 768 =
    3,538,944, the one-hot position lookup 2 B N Np = 94,371,840, cos and sin 2 B N d = 663,552. The pooler's fp32
    copy 4 N hv = 10,616,832 and weights 4 N R = 2,359,296; the embedder's norm 4 R hv + 8 R = 1,181,696 and the
    linear's input B R hv = 589,824. Total 7,014,926,336 B, the same at TP 1 and TP 2 (not split). Frozen tower:
    the linear's input alone, 589,824; both frozen: nothing. Backward working set 3 B N fv = 59,498,496."""
    N, R, hv, fv, H = 2304, 256, 1152, 4304, 16
    layer = 52 * N * hv + 32 * N + 28 * N * H + 14 * N * hv + 8 * N * fv
    assert layer == 255_614_976
    total = 27 * layer + 2 * N * 768 + 4 * N * 10240 + 4 * N * 72 + 4 * N * hv + 4 * N * R \
        + 4 * R * hv + 8 * R + 2 * R * hv
    assert total == 7_014_926_336
    one = _stage(images_per_sample=1, image_resolution=768)
    assert (one.trained, one.frozen, one.activations, one.backward_peak) == (TOTAL, 0, total, 6 * N * fv)
    assert _stage(tp=2, images_per_sample=1, image_resolution=768).activations == total
    assert _stage(images_per_sample=2, image_resolution=768).activations == 2 * total
    frozen = _stage(images_per_sample=1, image_resolution=768, freeze_vision_model=True)
    assert (frozen.trained, frozen.frozen, frozen.activations) == (PROJECTOR, ENCODER, 2 * R * hv)
    both = _stage(images_per_sample=1, image_resolution=768, freeze_vision_model=True, freeze_vision_projection=True)
    assert (both.trained, both.frozen, both.activations) == (0, TOTAL, 0)
    assert _stage().activations == 0


def test_image_rules_name_the_field():
    for training, field in (({"images_per_sample": 1, "image_resolution": 448}, "training.image_resolution"),
                            ({"images_per_sample": 1, "image_resolution": 48 * 4000}, "training.image_resolution")):
        with pytest.raises(ConfigError) as exc:
            load_config(_cfg(**training))
        assert field in {p.field for p in exc.value.problems}
    load_config(_cfg(image_resolution=448))         # the default side stands while there are no images
    for key, value in (("vision_in_channels", 4), ("vision_temporal_patch_size", 2)):
        cfg = _cfg()
        cfg["model"] = {**cfg["model"], key: value}
        with pytest.raises(ConfigError) as exc:
            load_config(cfg)
        assert f"model.{key}" in {p.field for p in exc.value.problems}


@pytest.mark.parametrize("key, value, match", [
    ("num_key_value_heads", 8, "key-value heads"),
    ("head_dim", 64, "head_dim"),
    ("use_clipped_linears", True, "clipped"),
    ("hidden_activation", "silu", "tanh GELU"),
    ("attention_dropout", 0.1, "dropout"),
    ("some_new_key", 1, "some_new_key"),
])
def test_what_is_not_mapped_is_refused_by_name(key, value, match):
    hf = copy.deepcopy(hf_catalog.get(HF_ID).config())
    hf["vision_config"][key] = value
    with pytest.raises(UnsupportedError, match=match):
        from_hf_config(hf)


def test_a_wrong_value_for_any_vision_config_key_is_an_error_that_names_it():
    """Every key of the vision_config replaced by values of the wrong kind: the import still gives a model section
    (a key that sizes no tensor) or an EstimatorError; a ConfigError names config.json:vision_config.<key>."""
    hf = hf_catalog.get(HF_ID).config()
    for key in hf["vision_config"]:
        for wrong in ([1], "abc", True, -1, 0, 1.5, 10 ** 30, None):
            try:
                from_hf_config({**hf, "vision_config": {**hf["vision_config"], key: wrong}})
            except ConfigError as exc:
                assert {p.field for p in exc.problems} == {f"config.json:vision_config.{key}"}, (key, wrong, exc)
            except EstimatorError:
                pass
    with pytest.raises(ConfigError, match="vision_config"):
        from_hf_config({**hf, "vision_config": None})
