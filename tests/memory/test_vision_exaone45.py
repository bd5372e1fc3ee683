"""The exaone45 vision tower (EXAONE 4.5's windowed ViT with grouped-query attention, Megatron-Core layers as
Megatron-Bridge's Exaone45Model builds them; estimator/model/vision.py, estimator/memory/vision.py). Expected values
are worked out by hand in each docstring.

Model: EXAONE 4.5 33B's tower (vision_config of the checkpoint NVIDIA/TensorRT-LLM @ 16bd5167 :
tests/unittest/_torch/modeling/test_modeling_exaone4_5.py runs: depth 28, hidden_size 2048, 32 heads in 8 key-value
groups, intermediate_size 5120, patch 14, temporal patch 2, spatial merge 2, out_hidden_size 5120) over a small dense
language model of h 5120. Parameters by hand (Megatron-Bridge @ 067f987d : exaone/exaone45/modelling_exaone45/
transformer_config.py get_vision_model_config, utils.py, Megatron-Core's ViT layer spec; d = 2048 / 32 = 64):

- patch_embed, a Conv3d 3 x 2 x 14^2 -> 2048 without bias: 1,176 x 2048 = 2,408,448;
- each layer, split over TP: linear_qkv (2048 + 2 x 8 x 64) x 2048 + 3,072 = 6,294,528, linear_proj 2048^2 =
  4,194,304, linear_fc1 (gate and up) 2 x 2048 x 5120 + 2 x 5120 = 20,981,760, linear_fc2 5120 x 2048 = 10,485,760:
  41,956,352; replicated: the two RMSNorms 2 x 2048 and the row-parallel biases 2048 + 2048: 8,192; 28 layers
  1,174,777,856 + 229,376;
- the merger over 4 x 2048 = 8192: the RMSNorm 2048 (replicated), fc1 8192^2 + 8192 = 67,117,056 and fc2
  8192 x 5120 = 41,943,040 (split), fc2's bias 5120 (replicated): 109,060,096 + 7,168.

Tower: 2,408,448 + 1,175,007,232 + 109,067,264 = 1,286,482,944 (the encoder without the merger 1,177,415,680: the
"1.2 billion parameters from the vision encoder" of transformers' EXAONE 4.5 page).
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from estimator.config.load import load_config
from estimator.model.vision import vision_params
from tests.conftest import make_config

LM = dict(num_layers=4, hidden_size=5120, num_attention_heads=40, vocab_size=1000)
EX = dict(LM, vision_model_type="exaone45", vision_num_layers=28, vision_hidden_size=2048,
          vision_num_attention_heads=32, vision_num_query_groups=8, vision_ffn_hidden_size=5120, vision_patch_size=14,
          vision_out_hidden_size=5120)
TOTAL = 1_286_482_944
IMAGE = dict(images_per_sample=1, image_resolution=448)


def _stage(tp=1, model=EX, **training):
    par = {"tensor_model_parallel_size": tp}
    base = estimate(make_config(LM, par, {"world_size": tp})).stages[0]
    return estimate(make_config(model, par, {"world_size": tp, **training})).stages[0], base


def test_the_exaone45_tower_by_hand():
    vp = vision_params(load_config(make_config(EX)).model)
    assert vp.patch_embed.total == 2_408_448 and vp.pos_embed.total == 0
    assert (vp.layer.sharded, vp.layer.replicated) == (41_956_352, 8_192)
    assert (vp.merger.sharded, vp.merger.replicated) == (109_060_096, 7_168)
    assert vp.encoder.total == 1_177_415_680
    assert round(vp.encoder.total / 1e9, 1) == 1.2      # transformers' "1.2 billion parameters from the vision encoder"
    assert vp.total == TOTAL
    assert estimate(make_config(EX)).parameters.vision == TOTAL


def test_grouped_query_attention_is_what_makes_it_exact():
    """Without the groups (32 key-value heads) linear_qkv would be 3 x 2048 x 2049 = 12,589,056 a layer, 6,294,528
    more: 28 x 6,294,528 = 176,246,784 more in all."""
    mha = vision_params(load_config(make_config({**EX, "vision_num_query_groups": None})).model)
    assert mha.total - TOTAL == 176_246_784


def test_tensor_parallelism_splits_the_layers_and_merger():
    """TP 2: the split part halves, (1,174,777,856 + 109,060,096) / 2 = 641,918,976, beside the replicated
    2,637,824 + 7,168: 644,563,968 on each GPU."""
    stage, base = _stage(2)
    assert stage.parameters - base.parameters == 644_563_968


def test_one_image_of_activations_by_hand():
    """One 448-pixel image: N = (448 / 14)^2 = 1,024 patches, 256 merged tokens; B = 2 bytes; the layer formulas of
    estimator/memory/activations.py (h 2048, a 32, g 8, dh 64, f 5120 gated), no sequence parallelism.

    TP 1, per layer: attention 4 N h = 8,388,608 (the norm's input and output) + 2 N (a + 2g) dh = 6,291,456 (q, k,
    v) + 2 N a dh = 4,194,304 (its output) + 4 N a = 131,072 (softmax statistics): 19,005,440; MLP 4 N h = 8,388,608
    + 2 N 2f = 20,971,520 (fc1's output) + 2 N f = 10,485,760 (the SiLU product): 39,845,888; 58,851,328 a layer,
    28 layers 1,647,837,184. The Conv3d's input 2 x 1,024 x 1,176 = 2,408,448. The merger: the RMSNorm's input and
    output 2 x 2 x 1,024 x 2,048 = 8,388,608, its fp32 rsigma 4 x 1,024 = 4,096, fc1's and the GELU's outputs
    2 x 2 x 256 x 8,192 = 8,388,608: 16,781,312. In all 1,667,026,944.

    TP 2: attention 8,388,608 + (6,291,456 + 4,194,304 + 131,072) / 2 = 13,697,024, MLP 8,388,608 + 31,457,280 / 2
    = 24,117,248: 37,814,272 a layer, 1,058,799,616 for 28; the merger 8,388,608 + 4,096 + 4,194,304 =
    12,587,008; with the Conv3d's input 1,073,795,072.

    Frozen tower (freeze_vision_model; Exaone45Model.freeze turns the merger back on): the merger's 16,781,312;
    both frozen: nothing."""
    one, base = _stage(**IMAGE)
    assert one.activations_bytes - base.activations_bytes == 1_667_026_944
    two, base = _stage(2, **IMAGE)
    assert two.activations_bytes - base.activations_bytes == 1_073_795_072
    frozen, base = _stage(**IMAGE, freeze_vision_model=True)
    assert frozen.activations_bytes - base.activations_bytes == 16_781_312
    both, base = _stage(**IMAGE, freeze_vision_model=True, freeze_vision_projection=True)
    assert both.activations_bytes == base.activations_bytes


def test_frozen_parts_keep_weights_only():
    """fp32 gradients, 4 bytes a trained parameter: the tower frozen leaves the merger, 4 x 109,067,264 =
    436,269,056; the merger frozen leaves the encoder, 4 x 1,177,415,680 = 4,709,662,720."""
    tower, base = _stage(freeze_vision_model=True)
    assert tower.gradients_bytes - base.gradients_bytes == 436_269_056
    merger, base = _stage(freeze_vision_projection=True)
    assert merger.gradients_bytes - base.gradients_bytes == 4_709_662_720


@pytest.mark.parametrize("model, parallelism, training, field", [
    ({**EX, "vision_num_query_groups": 5}, {}, {}, "model.vision_num_query_groups"),
    ({**EX, "vision_hidden_size": 2304, "vision_num_attention_heads": 24, "vision_num_query_groups": 6},
     {"tensor_model_parallel_size": 4}, {"world_size": 4}, "model.vision_num_query_groups"),   # 6 vs TP 4
    ({**EX, "vision_model_type": "qwen3_vl"}, {}, {}, "model.vision_num_query_groups"),
    ({**EX, "vision_num_position_embeddings": 1024}, {}, {}, "model.vision_num_position_embeddings"),
    (EX, {}, {"images_per_sample": 1, "image_resolution": 450}, "training.image_resolution"),
    ({**EX, "mtp_num_layers": 1}, {}, {"freeze_language_model": True}, "training.freeze_language_model"),
])
def test_bad_exaone45_settings_name_the_field(model, parallelism, training, field):
    with pytest.raises(ConfigError) as exc:
        estimate(make_config(model, parallelism, training))
    assert field in {p.field for p in exc.value.problems}, exc.value
