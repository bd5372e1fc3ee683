"""The ernie45_vl vision tower (ERNIE-4.5-VL's DFN ViT and variable-resolution resampler, transformers' modules as
Megatron-Bridge's Ernie45VLModel builds them; estimator/model/vision.py, estimator/memory/vision.py), and ERNIE-4.5-VL's
language model with its second, vision expert pool (model.moe_vision_ffn_hidden_size): its parameters and states,
and the image tokens' activations in it. Expected values are worked out by hand in each docstring.

Model: ERNIE-4.5-VL-28B-A3B's vision part (transformers' Ernie4_5_VL_MoeVisionConfig: depth 32, hidden_size 1280,
16 heads, MLP 4 x 1280 = 5120, patch 14, 3 channels, spatial merge 2) into a language model of h 2560 (the 28B-A3B
text model's width), here a small dense stand-in. Parameters by hand (huggingface/transformers @ 4f2fa85a :
src/transformers/models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py):

- patch_embed, a Linear 3 x 14^2 = 588 -> 1280 without bias: 752,640;
- each block: norm1 and norm2 (LayerNorm) 4 x 1280 = 5,120, qkv 3 x 1280^2 + 3 x 1280 = 4,919,040, proj
  1280^2 + 1280 = 1,639,680, fc1 1280 x 5120 + 5120 = 6,558,720, fc2 5120 x 1280 + 1280 = 6,554,880: 19,677,440;
  32 blocks 629,678,080;
- the final LayerNorm ln 2 x 1280 = 2,560; tower 752,640 + 629,678,080 + 2,560 = 630,433,280;
- the resampler over W = 2^2 x 1280 = 5,120: spatial_linear fc1 and fc2 2 x (5120^2 + 5120) = 52,439,040 and its
  LayerNorm 10,240: 52,449,280; temporal_linear fc1 10240 x 5120 + 5120 = 52,433,920, fc2 26,219,520, LayerNorm
  10,240: 78,663,680; mlp 5120 x 2560 + 2560 = 13,109,760; after_norm (RMSNorm) 2,560: 144,225,280.

Vision part 630,433,280 + 144,225,280 = 774,658,560, all of it on every tensor-parallel rank.
"""

from __future__ import annotations

import pytest

from estimator import estimate, from_hf_config
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.config.load import load_config
from estimator.model.vision import vision_params
from tests.conftest import make_config

LM = dict(num_layers=4, hidden_size=2560, num_attention_heads=20, vocab_size=1000)
ERNIE = dict(LM, vision_model_type="ernie45_vl", vision_num_layers=32, vision_hidden_size=1280,
             vision_num_attention_heads=16, vision_ffn_hidden_size=5120, vision_patch_size=14,
             vision_temporal_patch_size=1)
TOTAL, RESAMPLER = 774_658_560, 144_225_280
IMAGE = dict(image_resolution=448)


def _stage(tp=1, model=ERNIE, **training):
    par = {"tensor_model_parallel_size": tp}
    base = estimate(make_config(LM, par, {"world_size": tp})).stages[0]
    return estimate(make_config(model, par, {"world_size": tp, **training})).stages[0], base


def test_the_ernie_vit_and_resampler_by_hand():
    vp = vision_params(load_config(make_config(ERNIE)).model)
    assert (vp.patch_embed.total, vp.pos_embed.total, vp.layer.total) == (752_640, 0, 19_677_440)
    assert (vp.merger.total, vp.unfrozen.total) == (RESAMPLER, 2_560)
    assert vp.total == TOTAL
    assert estimate(make_config(ERNIE)).parameters.vision == TOTAL


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_tower_is_whole_on_every_tensor_parallel_rank(tp):
    """Hugging Face's modules, marked for TP gradient averaging: 774,658,560 on each GPU at any TP size."""
    stage, base = _stage(tp)
    assert stage.parameters - base.parameters == TOTAL


def test_freezing_leaves_the_final_layernorm_trained():
    """fp32 gradients (4 bytes a trained parameter). Trained: 4 x 774,658,560 = 3,098,634,240. freeze_vision_model
    (Ernie45VLModel.freeze: patch_embed and blocks) leaves the resampler and ln: 4 x (144,225,280 + 2,560) =
    576,911,360. Both frozen: ln alone, 4 x 2,560 = 10,240. The weights stay 2 bytes each either way."""
    expected = {(False, False): 3_098_634_240, (True, False): 576_911_360, (True, True): 10_240}
    for (fv, fp), grads in expected.items():
        stage, base = _stage(freeze_vision_model=fv, freeze_vision_projection=fp)
        assert stage.gradients_bytes - base.gradients_bytes == grads
        assert stage.weights_bytes - base.weights_bytes == 2 * TOTAL


def test_one_image_of_activations_by_hand():
    """One 448-pixel image: N = (448 / 14)^2 = 1,024 patches, R = 256 rows after the 2 x 2 merge; B = 2 bytes.

    Each block: 11 x 2 x 1,024 x 1,280 = 28,835,840 (the norms' inputs, qkv's input and output, the rotated q and k,
    the attention output, proj's and fc1's inputs), 3 x 2 x 1,024 x 5,120 = 31,457,280 (fc1's output, quick_gelu's
    sigmoid and output), the norms' fp32 statistics 16 x 1,024 = 16,384 and the log-sum-exp 4 x 1,024 x 16 = 65,536:
    60,375,040; 32 blocks 1,932,001,280. The patches' input 2 x 1,024 x 588 = 1,204,224 and the fp32 rotary cos and
    sin 8 x 1,024 x 80 = 655,360. ln: 2 x 1,024 x 1,280 + 8 x 1,024 = 2,629,632. The resampler: 10 x 2 x 1,024 x
    1,280 = 26,214,400, its LayerNorms' statistics 16 x 256 = 4,096, after_norm's fp32 input 4 x 256 x 2,560 =
    2,621,440, rsqrt 1,024 and normalized output 2 x 256 x 2,560 = 1,310,720: 30,151,680.

    Trained: 1,932,001,280 + 1,859,584 + 2,629,632 + 30,151,680 = 1,966,642,176; two images twice that; the tower
    frozen: ln and the resampler, 32,781,312, and the same with both frozen (ln stays trained, so the gradient
    runs back through the resampler); at any TP size."""
    none, base = _stage()
    assert none.activations_bytes == base.activations_bytes
    for tp in (1, 2):
        one, base = _stage(tp, images_per_sample=1, **IMAGE)
        assert one.activations_bytes - base.activations_bytes == 1_966_642_176
    two, base = _stage(images_per_sample=2, **IMAGE)
    assert two.activations_bytes - base.activations_bytes == 2 * 1_966_642_176
    for frozen in ({"freeze_vision_model": True}, {"freeze_vision_model": True, "freeze_vision_projection": True}):
        stage, base = _stage(images_per_sample=1, **IMAGE, **frozen)
        assert stage.activations_bytes - base.activations_bytes == 32_781_312


@pytest.mark.parametrize("model, training, field", [
    ({**ERNIE, "vision_temporal_patch_size": 2}, {}, "model.vision_temporal_patch_size"),
    ({**ERNIE, "vision_num_position_embeddings": 4096}, {}, "model.vision_num_position_embeddings"),
    (ERNIE, {"images_per_sample": 1, "image_resolution": 450}, "training.image_resolution"),
])
def test_bad_ernie_settings_name_the_field(model, training, field):
    with pytest.raises(ConfigError) as exc:
        estimate(make_config(model, None, training))
    assert field in {p.field for p in exc.value.problems}, exc.value


def test_baidus_remote_code_ernie_vl_config_is_refused_by_name():
    """Baidu's flat remote-code config.json (ernie4_5_moe_vl) is refused with the fields to use instead; the
    transformers form (ernie4_5_vl_moe) is imported (tests/formats/hf/test_ernie45_vl.py)."""
    with pytest.raises(UnsupportedError, match="moe_vision_ffn_hidden_size"):
        from_hf_config({"model_type": "ernie4_5_moe_vl", "architectures": ["Ernie4_5_VLMoeForConditionalGeneration"]})


def test_nemotron_nano_vl_config_is_refused_with_the_fields_to_use():
    with pytest.raises(UnsupportedError, match="vision_model_type radio"):
        from_hf_config({"model_type": "NemotronH_Nano_VL_V2", "architectures": ["NemotronH_Nano_VL_V2"]})


# ERNIE-VL: the vision expert pool (model.moe_vision_ffn_hidden_size).
ERNIE_VL_LM = dict(num_layers=28, hidden_size=2560, num_attention_heads=20, num_query_groups=4, kv_channels=128,
                   vocab_size=103_424, ffn_hidden_size=12_288, normalization="RMSNorm", gated_linear_unit=True,
                   num_experts=64, moe_router_topk=6, moe_ffn_hidden_size=1536, moe_vision_ffn_hidden_size=512,
                   moe_shared_expert_intermediate_size=3072, moe_layer_freq=[0] + [1] * 27,
                   moe_router_enable_expert_bias=True)
EXPERTS = 27 * (754_974_720 + 251_658_240)


def test_the_28b_a3b_language_model_by_hand():
    """ERNIE-4.5-VL-28B-A3B's language model as Megatron-Bridge @ 067f987d builds it (ernie_vl/ernie45_vl_bridge.py
    provider_bridge and its unit test's flat config: h 2560, 28 layers, 20 query / 4 key-value heads of 128, layer 0
    dense of 12,288, layers 1-27 ErnieMultiTypeMoE: 64 text experts of 1536, 64 vision experts of 512, top-6, 2
    shared experts = 3072, sigmoid router with expert bias, RMSNorm, SwiGLU, tied embeddings), vocabulary 103,424.

    Per layer: attention 2 x 2560^2 + 2 x 2560 x 512 = 15,728,640, norms 5,120. Layer 0's MLP 3 x 2560 x 12,288 =
    94,371,840. Each MoE layer: text experts 64 x 3 x 2560 x 1536 = 754,974,720, vision experts 64 x 3 x 2560 x 512
    = 251,658,240, shared 3 x 2560 x 3072 = 23,592,960, two routers 2 x (64 x 2560 + 64) = 327,808: with attention and
    norms 1,046,287,488; 27 layers 28,249,762,176. Layer 0 110,105,600, embedding 103,424 x 2560 = 264,765,440, final
    norm 2,560: 28,624,635,776 (the model card's "28B total", with the 774,658,560 vision tower 29.40 B). Active per
    text token: 3,356,575,616 (6 of the 64 text experts, 11,796,480 each, in place of all 128: the model card's
    "3B activated")."""
    p = estimate(make_config(ERNIE_VL_LM)).parameters
    assert (p.total, p.moe_experts, p.moe_router) == (28_624_635_776, EXPERTS, 27 * 327_808)
    assert p.active == 28_624_635_776 - EXPERTS + 27 * 6 * 11_796_480


@pytest.mark.parametrize("ep, etp", [(1, 1), (4, 1), (8, 1), (4, 2)])
def test_both_pools_are_split_over_expert_parallel_ranks(ep, etp):
    """Each pool is a Megatron-Core MoELayer over the same EP x ETP group: one GPU holds dense + experts / (EP x ETP)
    parameters, 28,624,635,776 - 27,179,089,920 = 1,445,545,856 dense. fp32 gradients are 4 bytes each; the
    distributed optimizer's 12 bytes shard the dense part over DP = 8 and the experts over expert DP = 8 / (EP x ETP)
    (tp 1 world 8 here, or tp 2 with ETP 2: dense / 2 per GPU, over DP 4)."""
    tp = etp
    stage = estimate(make_config(ERNIE_VL_LM, {"expert_model_parallel_size": ep, "expert_tensor_parallel_size": etp,
                                               "tensor_model_parallel_size": tp},
                                 {"world_size": 8, "sequence_parallel": tp > 1})).stages[0]
    dense = 1_445_545_856
    if tp == 2:   # attention, dense MLP and shared experts split, embedding split, routers and norms whole
        dense = (264_765_440 + 28 * 15_728_640 + 94_371_840 + 27 * 23_592_960) // 2 + 27 * 327_808 + 28 * 5120 + 2560
    experts = EXPERTS // (ep * etp)
    assert stage.parameters == dense + experts
    assert stage.gradients_bytes == 4 * (dense + experts)


def test_images_with_the_vision_pool_are_estimated():
    """The image tokens go to the vision pool (hand-calculated layer: tests/model/layers/test_ernie_pools.py): one
    448-pixel image of (448 / 14)^2 / 2^2 = 256 tokens (258 with its start and end tokens) moves 258 x 6 routed rows
    a layer from the 1536-wide text experts to the 512-wide vision experts: a row keeps its input, fc1's output and the
    SwiGLU's output, 2 x 3 x (1536 - 512) = 6,144 B less in a vision expert; and the tower adds its own activations
    (test_one_image_of_activations_by_hand): 1,966,642,176 B. The first stage keeps 1,966,642,176 - 27 layers x 258
    x 6 x 6,144 (256,794,624) = 1,709,847,552 B more. Regression: the layers' activations were memoised without the
    image count, so the pools' split never reached the estimate."""
    model = {**ERNIE, **ERNIE_VL_LM}
    with_image = estimate(make_config(model, None, {"images_per_sample": 1, **IMAGE})).stages[0]
    text_only = estimate(make_config(model, None, {**IMAGE})).stages[0]
    assert with_image.activations_bytes - text_only.activations_bytes == 1_966_642_176 - 27 * 258 * 6 * 6_144 == 1_709_847_552


@pytest.mark.parametrize("model, par, field", [
    ({**ERNIE_VL_LM, "moe_vision_ffn_hidden_size": 510}, {"expert_tensor_parallel_size": 4,
                                                          "tensor_model_parallel_size": 4},
     "model.moe_vision_ffn_hidden_size"),
    ({**LM, "moe_vision_ffn_hidden_size": 512}, None, "model.moe_vision_ffn_hidden_size"),
])
def test_bad_vision_pool_names_the_field(model, par, field):
    with pytest.raises(ConfigError) as exc:
        estimate(make_config(model, par, {"world_size": 4, "sequence_parallel": True}))
    assert field in {p.field for p in exc.value.problems}, exc.value


@pytest.mark.parametrize("tp", [1, 2])
def test_text_only_activations_keep_the_pool_input_copy(tp):
    """images_per_sample 0: every token goes to the text pool, whose router saves the index copy of its rows
    (ErnieMultiTypeMoE.forward: flat_hidden[text_indices]) beside the norm output. One micro-batch of 4,096 tokens,
    bf16, per MoE layer 2 x 4,096 / tp x 2,560 (sequence parallel with tp 2): 27 layers x 20,971,520 / tp =
    566,231,040 / tp more than the same model with one pool; the vision pool itself keeps nothing."""
    par = {"tensor_model_parallel_size": tp}
    tr = {"world_size": tp, "seq_length": 4096, "sequence_parallel": tp > 1}
    one = {k: v for k, v in ERNIE_VL_LM.items() if k != "moe_vision_ffn_hidden_size"}
    a = estimate(make_config(ERNIE_VL_LM, par, tr)).stages[0]
    b = estimate(make_config(one, par, tr)).stages[0]
    assert a.activations_bytes - b.activations_bytes == 566_231_040 // tp
