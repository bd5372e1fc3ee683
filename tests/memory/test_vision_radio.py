"""The radio vision tower (model.vision_model_type radio: Nemotron Nano VL's RADIO ViT and its pixel-shuffle
projector, as Megatron-Bridge's NemotronVLModelProvider builds Megatron-Core's LLaVAModel; estimator/model/vision.py,
estimator/memory/vision.py). Expected values are worked out by hand in each docstring.

Model: nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL's tower and projector as the provider hard-codes them (Megatron-Bridge
@ 067f987d : src/megatron/bridge/models/nemotron_vl/nemotron_vl_provider.py): 32 layers of hv 1280, 16 heads, MLP
5120, patch 16, RADIO's 2048-pixel position table, a projector MLP of 20480 into the language model's 5120, under a
small stand-in for its Nemotron-H language model (4 MLP layers of h 5120, RMSNorm, squared ReLU, no biases: the
projector copies its MLP).

Parameters by hand:

- embedder (a linear over a 16 x 16 RGB patch, no bias): 3 x 16^2 x 1280 = 983,040, split over TP;
- class tokens 16 x 1280 = 20,480 and positions (2048 / 16)^2 x 1280 = 16,384 x 1280 = 20,971,520: 20,992,000,
  replicated;
- each layer: LayerNorms 4 x 1280 = 5,120, qkv 3 x 1280^2 + 3 x 1280 = 4,919,040, proj 1280^2 + 1280 = 1,639,680,
  fc1 1280 x 5120 + 5120 = 6,558,720, fc2 5120 x 1280 + 1280 = 6,554,880: 19,677,440, of which the norms and the
  row-parallel biases (proj, fc2) 5,120 + 2 x 1280 = 7,680 are replicated; 32 layers 629,678,080;
- projector over the pixel-shuffled 4 x 1280 = 5,120-wide rows: RMSNorm 5,120 (replicated), fc1 5120 x 20480 =
  104,857,600, fc2 20480 x 5120 = 104,857,600 (no biases): 209,720,320.

Tower 983,040 + 20,992,000 + 629,678,080 + 209,720,320 = 861,373,440.
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.model.vision import vision_params
from tests.conftest import make_config

LM = dict(num_layers=4, hidden_size=5120, num_attention_heads=40, vocab_size=1000, normalization="RMSNorm",
          gated_linear_unit=False, activation_func="squared_relu", add_bias_linear=False, ffn_hidden_size=20480)
RADIO = dict(LM, vision_model_type="radio", vision_num_layers=32, vision_hidden_size=1280,
             vision_num_attention_heads=16, vision_ffn_hidden_size=5120, vision_patch_size=16,
             vision_temporal_patch_size=1, vision_num_position_embeddings=16384,
             vision_projector_ffn_hidden_size=20480)
TOWER, PROJECTOR = 861_373_440, 209_720_320
TILE = dict(image_resolution=512)


def _est(model=RADIO, parallelism=None, **training):
    return estimate(make_config(model, parallelism, training))


def _tower_stage(tp=1, **training):
    """The first stage of the model less that of the language model alone: the tower's share."""
    par = {"tensor_model_parallel_size": tp}
    base = _est(LM, par, world_size=tp).stages[0]
    return _est(RADIO, par, world_size=tp, **training).stages[0], base


def test_the_nemotron_nano_vl_tower_by_hand():
    """The parts and the 861,373,440 total of the module docstring."""
    from estimator.config.load import load_config
    vp = vision_params(load_config(make_config(RADIO)).model)
    assert (vp.patch_embed.sharded, vp.patch_embed.replicated) == (983_040, 0)
    assert vp.pos_embed.replicated == 20_992_000
    assert (vp.layer.total, vp.layer.replicated) == (19_677_440, 7_680)
    assert (vp.merger.total, vp.merger.replicated) == (PROJECTOR, 5_120)
    assert vp.total == TOWER
    assert _est().parameters.vision == TOWER


@pytest.mark.parametrize("tp, per_gpu", [(1, 861_373_440), (2, 441_308_160), (4, 231_275_520)])
def test_tensor_parallelism_splits_the_layers_embedder_and_projector(tp, per_gpu):
    """Megatron-Core layers split like the language model's. Replicated: positions and class tokens 20,992,000,
    32 x 7,680 = 245,760 of the layers, the projector's RMSNorm 5,120: 21,242,880; the rest, 861,373,440 -
    21,242,880 = 840,130,560, divides by TP: TP 2 21,242,880 + 420,065,280 = 441,308,160; TP 4 21,242,880 +
    210,032,640 = 231,275,520."""
    stage, base = _tower_stage(tp)
    assert stage.parameters - base.parameters == per_gpu


def test_frozen_parts_keep_their_weights_only():
    """bf16 weights, fp32 gradients, Adam with fp32 masters: a trained parameter costs 2 + 4 + 12 bytes, a frozen
    one 2. freeze_vision_model freezes the whole RADIOViTModel (NemotronVLModel.freeze: vision_model),
    861,373,440 - 209,720,320 = 651,653,120; the projector stays trained."""
    stage, base = _tower_stage(freeze_vision_model=True)
    assert (stage.weights_bytes - base.weights_bytes, stage.gradients_bytes - base.gradients_bytes,
            stage.optimizer_bytes - base.optimizer_bytes) == (2 * TOWER, 4 * PROJECTOR, 12 * PROJECTOR)


def test_one_tile_of_activations_by_hand():
    """One 512-pixel tile a sample: N = (512 / 16)^2 = 1,024 patches, R = 256 tokens after the pixel shuffle; the
    layers run over s = 1,024 + 16 class tokens = 1,040 rows; B = 2 bytes.

    Projector (trained): its fused RMSNorm's input and output 2 x 2 x 1,024 x 1,280 = 5,242,880, fp32 rsigma
    4 x 256 = 1,024, fc1's output and the squared ReLU's output 2 x 2 x 256 x 20,480 = 20,971,520: 26,215,424.

    Trained tower: the embedder's input 2 x 1,024 x 768 = 1,572,864; each layer, as the language model's layers are
    counted (flash attention, no dropout, the norms' statistics left out): the layer input, qkv's input, q, k and v,
    the attention output, the MLP norm's input and fc1's input, 8 s hv = 10,649,600 elements, fc1's output and the
    GELU's output 2 s fv = 10,649,600, in 2 bytes: 42,598,400, and the fp32 log-sum-exp 4 x 1,040 x 16 = 66,560:
    42,664,960; 32 layers 1,365,278,720. Total 1,393,067,008; two tiles twice that; frozen tower: the projector's
    26,215,424 alone."""
    stage0, base = _tower_stage()
    one, _ = _tower_stage(images_per_sample=1, **TILE)
    two, _ = _tower_stage(images_per_sample=2, **TILE)
    frozen, _ = _tower_stage(images_per_sample=1, freeze_vision_model=True, **TILE)
    assert stage0.activations_bytes == base.activations_bytes
    assert one.activations_bytes - base.activations_bytes == 1_393_067_008
    assert two.activations_bytes - base.activations_bytes == 2 * 1_393_067_008
    assert frozen.activations_bytes - base.activations_bytes == 26_215_424
    both, _ = _tower_stage(images_per_sample=1, freeze_vision_model=True, freeze_vision_projection=True, **TILE)
    assert both.activations_bytes == base.activations_bytes


def test_tensor_parallelism_splits_the_tile_activations():
    """TP 2, one tile, no sequence parallelism: each layer keeps the replicated layer input, qkv's input, the MLP
    norm's input and fc1's input 2 x 4 s hv = 10,649,600 bytes, and half of q, k, v and the attention output
    2 x 4 s hv / 2 = 5,324,800, of fc1's and the GELU's outputs 2 x 2 s fv / 2 = 10,649,600 and of the log-sum-exp
    33,280: 26,657,280, 32 layers 853,032,960; with the embedder's 1,572,864 and the projector's 5,242,880 + 1,024 +
    20,971,520 / 2 = 15,729,664: 870,335,488."""
    stage, base = _tower_stage(2, images_per_sample=1, **TILE)
    assert stage.activations_bytes - base.activations_bytes == 870_335_488


def test_the_language_models_recompute_does_not_reach_the_tower():
    """NemotronVLModelProvider.provide sets the vision config's recompute_granularity None: with the language model
    fully recomputed the tile still adds its 1,393,067,008 bytes."""
    full = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    base = _est(LM, **full).stages[0]
    stage = _est(RADIO, images_per_sample=1, **full, **TILE).stages[0]
    assert stage.activations_bytes - base.activations_bytes == 1_393_067_008


@pytest.mark.parametrize("model, training, field", [
    (RADIO, {"images_per_sample": 1, "image_resolution": 448}, "training.image_resolution"),
    # vision_temporal_patch_size 2: Nemotron Omni's temporal_patch_dim (omni28), valid (tests/model/test_audio.py)
    ({**RADIO, "vision_spatial_merge_size": 4}, {}, "model.vision_spatial_merge_size"),
    ({**RADIO, "vision_num_position_embeddings": 2304}, {}, "model.vision_num_position_embeddings"),
    ({**RADIO, "vision_projector_ffn_hidden_size": None}, {}, "model.vision_projector_ffn_hidden_size"),
])
def test_bad_radio_settings_name_the_field(model, training, field):
    with pytest.raises(ConfigError) as exc:
        estimate(make_config(model, None, training))
    assert field in {p.field for p in exc.value.problems}, exc.value


@pytest.mark.parametrize("precision", [{"fp8": True}, {"fp4": True}])
def test_an_fp8_or_nvfp4_run_is_refused_by_name(precision):
    """NemotronVLModelProvider deep-copies the language model's config into the tower's and the projector's, FP8 /
    NVFP4 recipe included, so the tower would not run in bf16 as the other kinds do: refused, naming the fields."""
    with pytest.raises(UnsupportedError, match="model.vision_model_type radio with precision.fp"):
        estimate(make_config(RADIO, None, None, precision))
