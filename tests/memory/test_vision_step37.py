"""The step37 vision tower (Step 3.7's Perception-Encoder G/14, plain PyTorch modules as Megatron-Bridge's Step37Model
builds them; estimator/model/vision.py, estimator/memory/vision.py). Expected values are worked out by hand in each
docstring.

Model: the tower Megatron-Bridge @ 067f987d : stepfun/configuration_step37.py ``Step37VisionConfig`` describes by
default (the released checkpoint's: width 1536, 47 layers, 16 heads, mlp_ratio 8960 / 1536, patch 14, 728-pixel
images, use_ln_pre true, use_ln_post false, no class token) into Step 3.5 Flash's width 4096, here over a small
dense stand-in. Parameters by hand (modelling_step37/vision_model.py, utils.py, image_insert_embedding.py):

- conv1, a Conv2d 3 x 14^2 -> 1536 without bias: 588 x 1536 = 903,168;
- positional_embedding (728 / 14)^2 = 2,704 x 1536 = 4,153,344;
- each block: ln_1, ln_2 (LayerNorm) 4 x 1536 = 6,144, ls_1, ls_2 (LayerScale gamma) 2 x 1536 = 3,072, in_proj
  3 x 1536^2 + 3 x 1536 = 7,082,496, out_proj 1536^2 + 1536 = 2,360,832, c_fc 1536 x 8960 + 8960 = 13,771,520,
  c_proj 8960 x 1536 + 1536 = 13,764,096: 36,988,160; 47 blocks 1,738,443,520;
- ln_pre 2 x 1536 = 3,072; vit_downsampler1 Conv2d(1536, 3072, 3) 9 x 3072 x 1536 + 3072 = 42,470,400;
  vit_downsampler2 Conv2d(3072, 6144, 3) 9 x 6144 x 3072 + 6144 = 169,875,456: 212,348,928;
- align_projector (vit_large_projector) 6144 x 4096 without bias: 25,165,824.

Tower 903,168 + 4,153,344 + 1,738,443,520 + 212,348,928 = 1,955,848,960 (what freeze_vision_model freezes), with
the projector 1,981,014,784, all of it on every tensor-parallel rank.
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from estimator.config.load import load_config
from estimator.model.vision import image_tokens, vision_params
from tests.conftest import make_config

LM = dict(num_layers=4, hidden_size=4096, num_attention_heads=32, vocab_size=1000)
STEP = dict(LM, vision_model_type="step37", vision_num_layers=47, vision_hidden_size=1536,
            vision_num_attention_heads=16, vision_ffn_hidden_size=8960, vision_patch_size=14,
            vision_temporal_patch_size=1, vision_spatial_merge_size=4, vision_num_position_embeddings=2704)
TOTAL, ENCODER, PROJECTOR = 1_981_014_784, 1_955_848_960, 25_165_824
IMAGE = dict(images_per_sample=1, image_resolution=728)


def _stage(tp=1, model=STEP, **training):
    par = {"tensor_model_parallel_size": tp}
    base = estimate(make_config(LM, par, {"world_size": tp})).stages[0]
    return estimate(make_config(model, par, {"world_size": tp, **training})).stages[0], base


def test_the_perception_encoder_by_hand():
    vp = vision_params(load_config(make_config(STEP)).model)
    assert (vp.patch_embed.total, vp.pos_embed.total, vp.layer.total) == (903_168, 4_153_344, 36_988_160)
    assert (vp.downsample.total, vp.merger.total) == (212_348_928, PROJECTOR)
    assert (vp.encoder.total, vp.projection.total, vp.total) == (ENCODER, PROJECTOR, TOTAL)
    assert estimate(make_config(STEP)).parameters.vision == TOTAL


def test_a_728_pixel_image_is_169_tokens():
    """52 x 52 patches, halved twice by the stride-2 convolutions: 13 x 13 = 169 tokens (the 169-token <im_patch>
    span of Step37Model.forward's docstring)."""
    m = load_config(make_config(STEP)).model
    assert image_tokens(m, 728) == 169 and image_tokens(m, 448) == 64


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_tower_is_whole_on_every_tensor_parallel_rank(tp):
    stage, base = _stage(tp)
    assert stage.parameters - base.parameters == TOTAL


def test_frozen_parts_keep_weights_only():
    """fp32 gradients, 4 bytes a trained parameter: the tower frozen (convolutions included) leaves the projector,
    4 x 25,165,824 = 100,663,296; the projector frozen leaves the tower, 4 x 1,955,848,960 = 7,823,395,840."""
    tower, base = _stage(freeze_vision_model=True)
    assert tower.gradients_bytes - base.gradients_bytes == 100_663_296
    projector, base = _stage(freeze_vision_projection=True)
    assert projector.gradients_bytes - base.gradients_bytes == 7_823_395_840


def test_one_image_of_activations_by_hand():
    """One 728-pixel image: N = 2,704 patches, B = 2 bytes, d = 1536 / 16 = 96.

    Each block: 13 x 2 x 2,704 x 1,536 = 107,986,944 (the two norms' inputs, in_proj's input and output, the rotated
    q and k, attention's output, out_proj's input, the two LayerScale inputs, c_fc's input), 3 x 2 x 2,704 x 8,960 =
    145,367,040 (c_fc's output, quick-GELU's sigmoid and output), the norms' fp32 statistics 16 x 2,704 = 43,264, the
    log-sum-exp 4 x 2,704 x 16 = 173,056 and the fp32 rotary cos and sin for q and k 16 x 2,704 x 96 = 4,153,344:
    257,723,648; 47 blocks 12,113,011,456. conv1's input 2 x 2,704 x 588 = 3,179,904, ln_pre's input and statistics
    2 x 2,704 x 1,536 + 8 x 2,704 = 8,328,320, the convolutions' inputs 8,306,688 + 4,153,344 = 12,460,032, the
    projector's input 2 x 169 x 6,144 = 2,076,672. In all 12,139,056,384, at any TP size (the tower is whole on
    every rank).

    Frozen tower: the projector's input alone, 2,076,672; the projector frozen too: nothing; the projector alone
    frozen: 12,139,056,384 - 2,076,672 = 12,136,979,712."""
    for tp in (1, 2):
        one, base = _stage(tp, **IMAGE)
        assert one.activations_bytes - base.activations_bytes == 12_139_056_384
    tower, base = _stage(**IMAGE, freeze_vision_model=True)
    assert tower.activations_bytes - base.activations_bytes == 2_076_672
    both, base = _stage(**IMAGE, freeze_vision_model=True, freeze_vision_projection=True)
    assert both.activations_bytes == base.activations_bytes
    projector, base = _stage(**IMAGE, freeze_vision_projection=True)
    assert projector.activations_bytes - base.activations_bytes == 12_136_979_712


@pytest.mark.parametrize("model, training, field", [
    ({**STEP, "vision_temporal_patch_size": 2}, {}, "model.vision_temporal_patch_size"),
    ({**STEP, "vision_spatial_merge_size": 2}, {}, "model.vision_spatial_merge_size"),
    ({**STEP, "vision_num_position_embeddings": 2700}, {}, "model.vision_num_position_embeddings"),
    (STEP, {"images_per_sample": 1, "image_resolution": 784}, "training.image_resolution"),
    (STEP, {"images_per_sample": 1, "image_resolution": 700}, "training.image_resolution"),
    ({**STEP, "vision_num_query_groups": 8}, {}, "model.vision_num_query_groups"),
])
def test_bad_step37_settings_name_the_field(model, training, field):
    with pytest.raises(ConfigError) as exc:
        estimate(make_config(model, None, training))
    assert field in {p.field for p in exc.value.problems}, exc.value
