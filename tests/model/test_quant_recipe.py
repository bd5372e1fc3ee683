"""precision.quant_recipe (Megatron-Core's per-module quantisation recipe): each linear's own precision, by hand.

The model is tests/model/test_fp8_scales.py's: L=4, h=1024, 8 heads (MHA), GeLU MLP f=4096, untied vocabulary 32000,
s=2048, b=1, one GPU, N = 115,876,864 parameters. Per layer: QKV 3072 x 1024 (3,145,728 elements), projection
1024 x 1024 (1,048,576), fc1 4096 x 1024 (4,194,304), fc2 1024 x 4096 (4,194,304). The run is NVFP4 (fp4: true,
Blackwell, no fp4_param_gather), and the mixed recipe of these tests is::

    *.linear_qkv=bf16       QKV in bf16: no quantised copies, its input saved in bf16
    *.linear_fc2=mxfp8      fc2 in MXFP8: row-wise and column-wise 1 B copies with E8M0 scales
    (the rest)              the projection and fc1 keep the run's NVFP4

Quantised copies and scales per linear (TransformerEngine @ d0067d0d, tests/model/test_nvfp4.py and
test_fp8_scales.py derive them):

    NVFP4 weight  m x k: 0.5 + 0.5 B per element + E4M3 scales m k / 16 per copy (multiples of 128) = m k (1 + 1/8)
    MXFP8 weight  m x k: 1 + 1 B per element + E8M0 scales m k / 32 per copy                         = m k (2 + 1/16)
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.config.load import load_config
from estimator.memory.activations import layer_activations
from estimator.model.quant_recipe import kind_quant
from estimator.model.resolve import resolve
from tests.conftest import make_config
from tests.model.test_fp8_scales import MODEL, N

MIXED = ["*.linear_qkv=bf16", "*.linear_fc2=mxfp8"]
TRAIN = {"seq_length": 2048, "world_size": 1, "use_distributed_optimizer": True}


def cfg(precision=None, model=None, training=None):
    return make_config({**MODEL, **(model or {})}, None, {**TRAIN, **(training or {})}, precision)


def stage(precision):
    return estimate(cfg(precision)).stages[0]


def layer(precision):
    r = resolve(load_config(cfg(precision)))
    return layer_activations(r, r.kinds[0])


def test_weights_of_a_mixed_recipe():
    """Per layer: QKV bf16, 0; projection NVFP4, 1,048,576 x 1.125 = 1,179,648; fc1 NVFP4, 4,194,304 x 1.125 =
    4,718,592; fc2 MXFP8, 4,194,304 x 2 = 8,388,608 + scales (row-wise 1024 x 4096/32 = 131,072, column-wise
    1024/32 x 4096 = 131,072) = 8,650,752. 14,548,992 B per layer, 58,195,968 for 4; with the bf16 weights 2 N =
    231,753,728: 289,949,696 B (the whole model NVFP4: 2 N + 12,582,912 x 4 x 1.125 = 288,376,832)."""
    assert stage({"fp4": True, "quant_recipe": MIXED}).weights_bytes == 289_949_696
    assert stage({"fp4": True}).weights_bytes == 288_376_832
    assert 2 * N == 231_753_728


def test_one_layers_saved_inputs_under_a_mixed_recipe():
    """Saved for the weight gradients, T = 2048 rows, no sequence parallelism:
    QKV's input (the norm output) in bf16: 2 x 2048 x 1024 = 4,194,304 B, where NVFP4 keeps its column-wise copy,
    2048 x 1024 / 2 = 1,048,576 + scales 1024 x 2048/16 = 131,072: 1,179,648 (3,014,656 more);
    fc2's input (2048 x 4096) in MXFP8: 8,388,608 + column-wise scales 2048/32 x 4096 = 262,144: 8,650,752 B, where
    NVFP4 keeps 4,194,304 + 4096 x 2048/16 = 524,288: 4,718,592 (3,932,160 more). The layer keeps 6,946,816 B more."""
    assert layer({"fp4": True, "quant_recipe": MIXED}).saved - layer({"fp4": True}).saved == 6_946_816


def test_a_catch_all_rule_is_the_whole_model_in_that_precision():
    """'*=bf16' takes every linear out of the NVFP4 autocast: the bf16 run's weights and activations; '*=nvfp4'
    is the run itself."""
    bf16, plain = stage({}), stage({"fp4": True})
    all_bf16 = stage({"fp4": True, "quant_recipe": ["*=bf16"]})
    all_fp4 = stage({"fp4": True, "quant_recipe": ["*=nvfp4"]})
    assert (all_bf16.weights_bytes, all_bf16.activations_bytes) == (bf16.weights_bytes, bf16.activations_bytes)
    assert (all_fp4.weights_bytes, all_fp4.activations_bytes) == (plain.weights_bytes, plain.activations_bytes)


def test_first_match_wins():
    """'*.linear_fc2=mxfp8' before '*=bf16': fc2 in MXFP8, the rest bf16: 2 N + 8,650,752 x 4 = 266,356,736 B."""
    s = stage({"fp4": True, "quant_recipe": ["*.linear_fc2=mxfp8", "*=bf16"]})
    assert s.weights_bytes == 2 * N + 4 * 8_650_752 == 266_356_736


def test_the_bf16_first_and_last_layers_stay_bf16():
    """Rules apply inside the NVFP4 autocast only (override_nonquantized_autocast false): with one bf16 layer at each
    end, two layers of 14,548,992 B: 2 N + 29,097,984 = 260,851,712 B."""
    pr = {"fp4": True, "quant_recipe": MIXED, "first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 1,
          "num_layers_at_end_in_bf16": 1}
    assert stage(pr).weights_bytes == 2 * N + 2 * 14_548_992 == 260_851_712


def test_named_modules_of_a_kind():
    r = resolve(load_config(cfg({"fp4": True, "quant_recipe": MIXED})))
    q = kind_quant(r, r.kinds[0])
    assert q.of("self_attention.linear_qkv") == "" and q.of("mlp.linear_fc2") == "mxfp8"
    assert q.of("self_attention.linear_proj") == q.of("mlp.linear_fc1") == q.other == "nvfp4"


@pytest.mark.parametrize("precision, words", [
    ({"fp4": True, "quant_recipe": ["*.linear_qkv"]}, "not GLOB=PRECISION"),
    ({"fp4": True, "quant_recipe": ["*=delayed"]}, "refuses delayed scaling"),
    ({"quant_recipe": ["*=mxfp8"]}, "applies only with fp8: true or fp4: true"),
    ({"fp4": True, "fp4_param_gather": True, "quant_recipe": MIXED}, "fp4_param_gather is not modelled"),
    ({"fp4": True, "quant_recipe": ["*layers.1.*=bf16"]}, "by layer number"),
])
def test_refused_with_the_field_and_the_rule(precision, words):
    with pytest.raises(ConfigError) as e:
        estimate(cfg(precision))
    assert "precision.quant_recipe" in str(e.value) and words in str(e.value)


def test_a_layer_kind_without_named_linears_takes_only_a_catch_all_rule():
    """Multi-latent attention's linears are not named: '*.linear_qkv=bf16' could match one of them, and is refused;
    '*=mxfp8' is every linear in MXFP8."""
    mla = {"multi_latent_attention": True, "q_lora_rank": 256, "kv_lora_rank": 128, "qk_head_dim": 64,
           "qk_pos_emb_head_dim": 32, "v_head_dim": 64}
    with pytest.raises(ConfigError, match="does not name per module"):
        estimate(cfg({"fp8": True, "fp8_recipe": "mxfp8", "quant_recipe": ["*.linear_qkv=bf16"]}, model=mla))
    a = estimate(cfg({"fp8": True, "fp8_recipe": "mxfp8", "quant_recipe": ["*=mxfp8"]}, model=mla)).stages[0]
    b = estimate(cfg({"fp8": True, "fp8_recipe": "mxfp8"}, model=mla)).stages[0]
    assert (a.weights_bytes, a.activations_bytes) == (b.weights_bytes, b.activations_bytes)


def test_a_rules_recipe_needs_its_gpu():
    """MXFP8 runs on compute capability 10.x and 11.x only (Transformer Engine's check_recipe_support): a
    '*.linear_fc2=mxfp8' rule in an FP8 tensorwise run on Hopper is refused, as the run's own MXFP8 would be."""
    with pytest.raises(ConfigError, match=r"precision\.quant_recipe.*needs sm_100 or sm_103"):
        estimate(cfg({"fp8": True, "fp8_recipe": "tensorwise", "quant_recipe": ["*.linear_fc2=mxfp8"]},
                     training={"gpu_arch": "sm_90"}))
    assert estimate(cfg({"fp8": True, "fp8_recipe": "tensorwise", "quant_recipe": ["*.linear_fc2=bf16"]},
                        training={"gpu_arch": "sm_90"}))


def test_mtp_rule_takes_the_mtp_layer_out_of_nvfp4():
    """With one MTP layer, 'mtp.*=bf16' (Nemotron 3 Super's mtp_bf16 matcher) leaves its eh_proj (1024 x 2048 =
    2,097,152 elements) and its transformer layer's four linears (12,582,912) without NVFP4 copies: 14,680,064 x
    1.125 = 16,515,072 B less of weights; the decoder layers keep theirs."""
    mtp = {"mtp_num_layers": 1}
    a = estimate(cfg({"fp4": True, "quant_recipe": ["mtp.*=bf16"]}, model=mtp)).stages[0]
    b = estimate(cfg({"fp4": True}, model=mtp)).stages[0]
    assert b.weights_bytes - a.weights_bytes == 16_515_072
    assert a.activations_bytes > b.activations_bytes        # its saved inputs in bf16 instead of NVFP4
