"""Kimi K2.5's vision tower (issue 27): MoonViT and its PatchMergerMLP, the checkpoint's own modules as
Megatron-Bridge's KimiK25VLModel builds them (NVIDIA-NeMo/Megatron-Bridge @ 067f987d :
src/megatron/bridge/models/kimi_vl/modeling_kimi_k25_vl.py), whole on every tensor-parallel rank of the first stage.
The tensors follow sgl-project/sglang @ 00a239e5 : python/sglang/srt/models/kimi_k25.py, which loads the
checkpoint's. Expected values are worked out by hand in each docstring.
"""

from __future__ import annotations

import pytest

from estimator import from_hf_config
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.formats import hf_catalog
from estimator.model.vision import vision_params

ID = "moonshotai/Kimi-K2.5"


def _model(hf=None):
    from estimator.config.load import load_config
    return load_config({"model": from_hf_config(hf or ID), "training": {"world_size": 1}}).model


def test_moonvit_and_projector_by_hand():
    """vision_config: vt_hidden_size 1152, 27 layers, 16 heads, MLP 4304, patch 14, a 64 x 64 position grid,
    merge 2 x 2, text_hidden_size 7168. Conv2d with bias 3 x 14^2 x 1152 + 1152 = 678,528; positions
    64 x 64 x 1152 = 4,718,592; each layer: norm0 and norm1 4 x 1152 = 4608, qkv 3 x 1152^2 + 3 x 1152 = 3,984,768,
    out 1152^2 + 1152 = 1,328,256, fc0 1152 x 4304 + 4304 = 4,962,512, fc1 4304 x 1152 + 1152 = 4,959,360:
    15,239,504, 27 of them 411,466,608; final_layernorm 2304. Tower 416,866,032, the tensors of Gemma 3's SigLIP tower
    (its count agrees with KerasHub's published figures: tests/formats/hf/test_gemma3_vl.py). PatchMergerMLP:
    pre_norm 2 x 1152 = 2304, 4608 x 4608 + 4608 = 21,238,272, 4608 x 7168 + 7168 = 33,037,312: 54,277,888.
    471,143,920 in all (the model card's "MoonViT, 400M" is the tower, rounded)."""
    vp = vision_params(_model())
    assert vp.layer.total == 15_239_504
    assert vp.encoder.total == 416_866_032
    assert vp.projection.total == 54_277_888
    assert vp.total == 471_143_920


def test_nvidia_copies_count_the_same_tower():
    for hf_id in ("nvidia/Kimi-K2.5-NVFP4", "nvidia/Kimi-K2.6-NVFP4", "nvidia/Kimi-K2.7-Code-NVFP4"):
        assert vision_params(_model(hf_id)).total == 471_143_920, hf_id


def test_the_tower_is_whole_on_every_tensor_parallel_rank():
    vp = vision_params(_model())
    assert vp.encoder.per_rank(8) + vp.projection.per_rank(8) == 471_143_920


@pytest.mark.parametrize("key, value, error, words", [
    ("merge_type", "sd2", UnsupportedError, "merge_type"),
    ("mm_projector_type", "mlp", UnsupportedError, "mm_projector_type"),
    ("mm_hidden_size", 1024, ConfigError, "mm_hidden_size"),
    ("merge_kernel_size", [2, 3], ConfigError, "merge_kernel_size"),
    ("init_pos_emb_width", 32, ConfigError, "init_pos_emb_height"),
    ("vt_num_hidden_layers", 0, ConfigError, "vt_num_hidden_layers"),
    ("vt_extra", 1, UnsupportedError, "vt_extra"),
])
def test_bad_vision_config_values_name_the_key(key, value, error, words):
    hf = hf_catalog.get(ID).config()
    hf["vision_config"][key] = value
    with pytest.raises(error, match=words):
        from_hf_config(hf)
