"""Qwen2.5-VL from its Hub id (issue 27): the Qwen2 language model of the config.json's top-level keys and
transformers' own vision tower, as Megatron-Bridge's Qwen25VLBridge builds them (NVIDIA-NeMo/Megatron-Bridge @
067f987d : src/megatron/bridge/models/qwen_vl/qwen25_vl_bridge.py, modeling_qwen25_vl.py: ``self.visual`` is
``Qwen2_5_VisionTransformerPretrainedModel``, whole on every tensor-parallel rank of the first stage). Expected values
are worked out by hand in each docstring.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from estimator import estimate, from_hf_config
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.formats import hf_catalog
from estimator.model.params import count_parameters_of
from estimator.model.vision import vision_params

ID = "Qwen/Qwen2.5-VL-3B-Instruct"


def test_the_3b_counts_by_hand():
    """Qwen2.5-VL-3B: the language model is Qwen2.5-3B's (h 2048, 36 layers, 16 heads, 2 KV groups, MLP 11,008,
    vocabulary 151,936, tied): 3,085,938,688, Qwen/Qwen2.5-3B-Instruct's Hub safetensors total (in the catalog).

    Tower (hv 1280, 32 layers, 16 heads, gated MLP 3420, patch 14, 2 frames, 3 channels, merge 2, out 2048):
    patch embedding (Conv3d without bias) 3 x 2 x 14^2 x 1280 = 1,505,280; each layer: RMSNorms 2 x 1280 = 2560,
    qkv 3 x 1280^2 + 3 x 1280 = 4,919,040, proj 1280^2 + 1280 = 1,639,680, gate_proj and up_proj
    2 x (1280 x 3420 + 3420) = 8,762,040, down_proj 3420 x 1280 + 1280 = 4,378,880: 19,702,200, 32 of them
    630,470,400; merger: RMSNorm 1280, fc1 5120^2 + 5120 = 26,219,520, fc2 5120 x 2048 + 2048 = 10,487,808:
    36,708,608. Tower 668,684,288; total 3,754,622,976, the published figure (the catalog's source; the quoted
    config's own torchinfo table lists 1,505,280, 19,702,200 a block, 1,280 and 36,707,328)."""
    m = from_hf_config(ID)
    assert m["vision_model_type"] == "qwen2_5_vl" and m["vision_num_layers"] == 32
    c = count_parameters_of({"model": m, "training": {"world_size": 1}})
    vp = vision_params(_model())
    assert (vp.patch_embed.total, vp.layer.total, vp.merger.total) == (1_505_280, 19_702_200, 36_708_608)
    assert c.vision == 668_684_288
    assert c.total - c.vision == 3_085_938_688
    assert c.total == 3_754_622_976 == hf_catalog.get(ID).published["total"]


def test_the_7b_tower_by_hand():
    """Qwen2.5-VL-7B's vision_config is the 3B's but for out_hidden_size 3584 (the language model's width), so its
    tower differs only in the merger's fc2: 5120 x 3584 + 3584 = 18,353,664 instead of 10,487,808, a tower of
    668,684,288 + 7,865,856 = 676,550,144; with Qwen2.5-7B's 7,615,616,512 (catalog) that is 8,292,166,656, the
    figure mteb publishes for Alibaba-NLP/GVE-7B (adapted from Qwen2.5-VL-7B-Instruct, the same tensors). The catalog's
    7B entry (Qwen-Image's text encoder config.json, the 7B's tensors) gives exactly that."""
    hf = hf_catalog.get(ID).config()
    hf["vision_config"]["out_hidden_size"] = 3584
    vp = vision_params(_model(hf))
    assert vp.total == 676_550_144
    assert vp.total + 7_615_616_512 == 8_292_166_656
    c = count_parameters_of({"model": from_hf_config("Qwen/Qwen2.5-VL-7B-Instruct"), "training": {"world_size": 1}})
    assert (c.vision, c.total) == (676_550_144, 8_292_166_656)
    assert c.total == hf_catalog.get("Qwen/Qwen2.5-VL-7B-Instruct").published["total"]


def test_the_tower_is_replicated_over_tensor_parallel_ranks():
    """Hugging Face's module on every TP rank: per GPU the whole 668,684,288 at any TP size."""
    vp = vision_params(_model())
    assert vp.encoder.per_rank(4) + vp.projection.per_rank(4) == vp.total == 668_684_288


def test_a_text_config_form_maps_the_same():
    """transformers re-saves the file with a text_config (the language model's keys repeated inside, with media
    token ids and model_type qwen2_5_vl_text); the same model comes out."""
    hf = hf_catalog.get(ID).config()
    text = {k: v for k, v in hf.items() if k not in ("vision_config", "architectures")}
    text.update(model_type="qwen2_5_vl_text", image_token_id=None, video_token_id=None)
    assert from_hf_config({**hf, "text_config": text}) == from_hf_config(ID)


def _model(hf=None):
    from estimator.config.load import load_config
    return load_config({"model": from_hf_config(hf or ID), "training": {"world_size": 1, "seq_length": 4096}}).model


def _est(tp=1, **training):
    cfg = {"model": from_hf_config(ID), "parallelism": {"tensor_model_parallel_size": tp},
           "training": {"world_size": 8, "seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 8,
                        **training}}
    return estimate(cfg)


def test_frozen_vs_trained_and_tensor_parallelism():
    """bf16 weights, fp32 gradients, distributed optimizer over the data-parallel ranks. Freezing the encoder (patch
    embedding and blocks: 1,505,280 + 630,470,400 = 631,975,680) takes 4 B of gradient each off stage 0:
    2,527,902,720 bytes, at TP 1 and at TP 2 alike (the tower is not split)."""
    for tp in (1, 2):
        trained, frozen = _est(tp).stages[0], _est(tp, freeze_vision_model=True).stages[0]
        assert trained.weights_bytes == frozen.weights_bytes
        assert trained.gradients_bytes - frozen.gradients_bytes == 4 * 631_975_680


def test_more_images_keep_more_tower_activations_whatever_the_tp():
    """448-pixel images: (448 / 14)^2 = 1024 patches, 256 tokens each. Two images, N = 2048 patches, B = 2: each of
    the 32 layers keeps 30 x 2048 x 1280 + 8 x 2048 x 3420 + 8 x 2048 + 4 x 2048 x 16 = 78,643,200 + 56,033,280 +
    16,384 + 131,072 = 134,823,936 (4,314,365,952 for 32); the patch input 2 x 2048 x 3 x 2 x 196 = 4,816,896; cos
    and sin 2 x 4 x 2048 x 80 = 1,310,720; the merger 12 x 2048 x 1280 + 4 x 2048 = 31,465,472. 4,351,959,040
    bytes, the same at TP 2. Frozen tower and projection: nothing."""
    none, two = (_est(images_per_sample=n).stages[0].activations_bytes for n in (0, 2))
    assert two - none == 4_351_959_040
    none2, two2 = (_est(2, images_per_sample=n).stages[0].activations_bytes for n in (0, 2))
    assert two2 - none2 == 4_351_959_040
    frozen = dict(freeze_vision_model=True, freeze_vision_projection=True)
    assert _est(images_per_sample=2, **frozen).stages[0].activations_bytes == none


@pytest.mark.parametrize("key, value, error, words", [
    ("hidden_act", "gelu", UnsupportedError, "hidden_act"),
    ("in_chans", 4, ConfigError, "in_chans"),
    ("depth", 0, ConfigError, "vision_config.depth"),
    ("num_position_embeddings", 2304, UnsupportedError, "num_position_embeddings"),
])
def test_bad_vision_config_values_name_the_key(key, value, error, words):
    hf = hf_catalog.get(ID).config()
    hf["vision_config"][key] = value
    with pytest.raises(error, match=words):
        from_hf_config(hf)


@pytest.mark.subprocess
def test_the_cli_estimates_the_hub_id():
    """``estimate --hf Qwen/Qwen2.5-VL-3B-Instruct --num-gpus 8 --json`` works and counts the tower."""
    out = subprocess.run([sys.executable, "-m", "estimator", "estimate", "--hf", ID, "--num-gpus", "8", "--json",
                          "--seq-length", "4096"], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert data["parameters"]["total"] == 3_754_622_976
    assert data["parameters"]["vision"] == 668_684_288
