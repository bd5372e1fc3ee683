"""Issue 27, famA: OLMoE, Gemma 1, Nemotron-4 / Minitron and EXAONE 4.0 through the Hugging Face import.

Each family's count is by hand in its docstring, from the Hugging Face module's tensor shapes (the modelling code
of transformers: OlmoeDecoderLayer, GemmaDecoderLayer, NemotronDecoderLayer, Exaone4DecoderLayer), and equals the
published figure where one is given (KerasHub's Gemma presets, with its source in the catalog's data file).
The configs written out here carry the shapes the hand calculations use; they are test inputs, not catalog
entries (the catalog holds google/gemma-2b-it and LGAI-EXAONE/EXAONE-4.0-1.2B as published).
"""

from __future__ import annotations

import pytest

from estimator import UnsupportedError, count_parameters_of
from estimator.formats import catalog
from estimator.formats.hf import from_hf_config
from tests.conftest import make_config


def _total(hf: dict) -> int:
    return count_parameters_of(make_config(from_hf_config(hf))).total


# --- OLMoE ---------------------------------------------------------------------------------------------------

OLMOE = {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "attention_bias": False,
         "attention_dropout": 0.0, "clip_qkv": None, "hidden_act": "silu", "hidden_size": 2048,
         "intermediate_size": 1024, "max_position_embeddings": 4096, "norm_topk_prob": False,
         "num_attention_heads": 16, "num_experts": 64, "num_experts_per_tok": 8, "num_hidden_layers": 16,
         "num_key_value_heads": 16, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "router_aux_loss_coef": 0.01,
         "tie_word_embeddings": False, "vocab_size": 50304}


def test_olmoe_1b_7b_counts_by_hand():
    """OLMoE-1B-7B's shapes (h 2048, 16 layers, 16 heads of 128, 64 experts of 1024, top 8, vocabulary 50,304,
    untied). Per layer: q, k, v, o 4 x 2048^2 = 16,777,216; q_norm 16 x 128 = 2048 and k_norm 16 x 128 = 2048 (over
    all heads: Megatron-Bridge's OLMoESelfAttention); 64 experts x 3 x 2048 x 1024 = 402,653,184; router
    64 x 2048 = 131,072; two norms 4096: 419,569,664. 16 x that + 2 x 50,304 x 2048 + 2048 = 6,919,161,856 (the
    paper's "6.9B total")."""
    per = 4 * 2048 ** 2 + 2 * 2048 + 64 * 3 * 2048 * 1024 + 64 * 2048 + 2 * 2048
    assert per == 419_569_664
    assert _total(OLMOE) == 16 * per + 2 * 50_304 * 2048 + 2048 == 6_919_161_856


def test_olmoe_maps_the_bridge_settings():
    """olmoe_bridge.py provider_bridge: full-width q/k norms, every layer MoE of intermediate_size, softmax before
    the top-k, seq_aux_loss at router_aux_loss_coef, no shared expert."""
    m = from_hf_config(OLMOE)
    assert (m["qk_layernorm"], m["qk_layernorm_full_dim"], m["num_experts"], m["moe_router_topk"],
            m["moe_ffn_hidden_size"], m["moe_router_pre_softmax"], m["moe_router_load_balancing_type"],
            m["moe_aux_loss_coeff"]) == (True, True, 64, 8, 1024, True, "seq_aux_loss", 0.01)
    assert "moe_shared_expert_intermediate_size" not in m and "moe_layer_freq" not in m


@pytest.mark.parametrize("key, value, words", [
    ("clip_qkv", 8.0, "clamp"),
    ("attention_bias", True, "no exact Megatron-Core equivalent"),
    ("scoring_func", "sigmoid", "softmax"),
    ("num_key_value_heads", 4, "only multi-head attention"),
])
def test_olmoe_refuses_what_megatron_does_not_build(key, value, words):
    with pytest.raises(UnsupportedError, match=words):
        from_hf_config(dict(OLMOE, **{key: value}))


# --- Gemma 1 -------------------------------------------------------------------------------------------------

GEMMA_7B = {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "attention_bias": False, "head_dim": 256,
            "hidden_act": "gelu", "hidden_size": 3072, "intermediate_size": 24576, "max_position_embeddings": 8192,
            "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
            "vocab_size": 256000}


def test_gemma_2b_catalog_entry_equals_keras_hub():
    """gemma-2b: h 2048, 18 layers, 8 heads of 256 and one key/value head (MQA), GeGLU MLP 16,384, tied vocabulary
    256,000. Per layer: q 2048 x 2048, k and v 2048 x 256 each, o 2048 x 2048 = 9,437,184; MLP 3 x 2048 x 16,384 =
    100,663,296; two norms 4096: 110,104,576. 18 x that + 256,000 x 2048 + 2048 = 2,506,172,416, KerasHub's
    'params' for gemma_instruct_2b_en (and gemma_2b_en)."""
    per = 2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 16_384 + 2 * 2048
    assert per == 110_104_576
    row = catalog.describe("google/gemma-2b-it")
    assert row["parameters"]["total"] == 18 * per + 256_000 * 2048 + 2048 == 2_506_172_416
    assert row["published"]["matches"] is True
    assert catalog.describe("google/gemma-2b")["parameters"]["total"] == 2_506_172_416     # the sibling


def test_gemma_7b_counts_by_hand():
    """gemma-7b: h 3072, 28 layers, 16 heads of 256 (4096 wide, more than h), GeGLU MLP 24,576, tied vocabulary
    256,000. Per layer: 4 x 3072 x 4096 = 50,331,648; 3 x 3072 x 24,576 = 226,492,416; norms 6144: 276,830,208.
    28 x that + 256,000 x 3072 + 3072 = 8,537,680,896, KerasHub's 'params' for gemma_7b_en (keras-team/keras-hub
    @ 71453d08 : keras_hub/src/models/gemma/gemma_presets.py)."""
    assert _total(GEMMA_7B) == 28 * 276_830_208 + 256_000 * 3072 + 3072 == 8_537_680_896


def test_gemma1_is_pre_norm_geglu_and_tied():
    """gemma_bridge.py provider_bridge: fast_gelu (GeGLU) whatever the legacy hidden_act says, tied, no
    post-norms (Gemma 2 and 3 add them)."""
    m = from_hf_config(GEMMA_7B)
    assert (m["activation_func"], m["gated_linear_unit"], m["untie_embeddings_and_output_weights"],
            m["kv_channels"]) == ("geglu", True, False, 256)
    assert "post_layernorm" not in m
    with pytest.raises(UnsupportedError, match="GeGLU"):
        from_hf_config(dict(GEMMA_7B, hidden_act="silu"))


# --- Nemotron-4 / Minitron -----------------------------------------------------------------------------------

MINITRON = {"architectures": ["NemotronForCausalLM"], "model_type": "nemotron", "head_dim": 128,
            "hidden_act": "relu2", "hidden_size": 4096, "intermediate_size": 16384, "max_position_embeddings": 4096,
            "norm_eps": 1e-05, "num_attention_heads": 48, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "partial_rotary_factor": 0.5, "rope_theta": 10000, "tie_word_embeddings": False,
            "vocab_size": 256000}


def test_minitron_8b_shapes_count_by_hand():
    """Minitron-8B's shapes (h 4096, 32 layers, 48 heads of 128 and 8 key/value heads, MLP 16,384, vocabulary
    256,000 untied). Per layer: q 4096 x 6144 = 25,165,824, k and v 4096 x 1024 each = 8,388,608, o 6144 x 4096 =
    25,165,824; up_proj and down_proj 2 x 4096 x 16,384 = 134,217,728 (not gated); two LayerNorms with weight and
    bias 4 x 4096 = 16,384: 192,954,368. 32 x that + 2 x 256,000 x 4096 + the final LayerNorm 2 x 4096 =
    8,271,699,968."""
    per = 4096 * 6144 + 2 * 4096 * 1024 + 6144 * 4096 + 2 * 4096 * 16_384 + 4 * 4096
    assert per == 192_954_368
    assert _total(MINITRON) == 32 * per + 2 * 256_000 * 4096 + 2 * 4096 == 8_271_699_968


def test_nemotron_4_340b_shapes_match_the_technical_report():
    """Nemotron-4 340B (technical report, arXiv 2406.11704, section 2.1: 96 layers, hidden 18,432, 96 heads and 8
    key/value heads, vocabulary 256,000, untied; "9.4 billion embedding parameters and 331.6 billion non-embedding
    parameters"), MLP 73,728 (4 h, squared ReLU). Per layer: q and o 2 x 18,432^2 = 679,477,248, k and v 2 x 18,432
    x 1536 = 56,623,104, up and down 2 x 18,432 x 73,728 = 2,717,908,992, two LayerNorms 4 x 18,432 = 73,728:
    3,454,083,072. 96 x that + the final LayerNorm 36,864 = 331,592,011,776 (331.6B); embedding and output layer
    2 x 256,000 x 18,432 = 9,437,184,000 (9.4B)."""
    hf = dict(MINITRON, hidden_size=18432, num_attention_heads=96, num_key_value_heads=8, num_hidden_layers=96,
              intermediate_size=73728)
    del hf["head_dim"]
    per = 2 * 18_432 ** 2 + 2 * 18_432 * 1536 + 2 * 18_432 * 73_728 + 4 * 18_432
    assert per == 3_454_083_072
    embeddings = 2 * 256_000 * 18_432
    assert _total(hf) == 96 * per + 2 * 18_432 + embeddings
    assert round((96 * per + 2 * 18_432) / 1e9, 1) == 331.6 and round(embeddings / 1e9, 1) == 9.4


def test_nemotron_maps_layernorm_and_squared_relu():
    """nemotron_bridge.py provider_bridge: LayerNorm (norm_eps), squared_relu, not gated, no biases; both biases
    together are add_bias_linear (q, k, v, o, up, down, as Megatron-Core's); one alone has no exact equivalent."""
    m = from_hf_config(MINITRON)
    assert (m["normalization"], m["layernorm_epsilon"], m["activation_func"], m["gated_linear_unit"],
            m["kv_channels"]) == ("LayerNorm", 1e-05, "squared_relu", False, 128)
    assert from_hf_config(dict(MINITRON, attention_bias=True, mlp_bias=True))["add_bias_linear"] is True
    with pytest.raises(UnsupportedError, match="no exact Megatron-Core equivalent"):
        from_hf_config(dict(MINITRON, mlp_bias=True))
    with pytest.raises(UnsupportedError, match="relu2"):
        from_hf_config(dict(MINITRON, hidden_act="silu"))
    with pytest.raises(UnsupportedError, match="rms_norm_eps"):     # Nemotron's norm is a LayerNorm: norm_eps
        from_hf_config(dict(MINITRON, rms_norm_eps=1e-5))


def test_nemotron_kv_channels_must_agree_with_the_head_width():
    """TensorRT-LLM's Nemotron-4 4B test config carries kv_channels 128 beside h 3072 / 24 heads = 128, which
    Hugging Face's NemotronConfig ignores: accepted when it agrees, an error naming it otherwise."""
    four_b = {k: v for k, v in MINITRON.items() if k != "head_dim"}
    four_b.update(hidden_size=3072, num_attention_heads=24, intermediate_size=9216, kv_channels=128)
    assert from_hf_config(four_b)["num_query_groups"] == 8
    from estimator import ConfigError
    with pytest.raises(ConfigError, match="kv_channels"):
        from_hf_config(dict(MINITRON, kv_channels=96))


# --- EXAONE 4.0 ----------------------------------------------------------------------------------------------

EXAONE4 = {"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "head_dim": 64, "hidden_act": "silu",
           "hidden_size": 2048, "intermediate_size": 4096, "max_position_embeddings": 65536,
           "num_attention_heads": 32, "num_hidden_layers": 30, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
           "sliding_window_pattern": "LLLG", "tie_word_embeddings": True, "vocab_size": 102400}


def test_exaone4_1_2b_counts_by_hand():
    """EXAONE-4.0-1.2B (the catalog's config.json: h 2048, 30 layers, 32 heads and 8 key/value heads of 64, SwiGLU
    4096, tied vocabulary 102,400). Per layer: q 2048^2, k and v 2048 x 512 each, o 2048^2 = 10,485,760; q_norm and
    k_norm 64 each (per head); 3 x 2048 x 4096 = 25,165,824; post_attention_layernorm and post_feedforward_layernorm
    4096 (no input norms): 35,655,808. 30 x that + 102,400 x 2048 + 2048 = 1,279,391,488; without the embedding
    1,069,676,288, the model card's "Number of Parameters (without embeddings): 1.07B"."""
    per = 2 * 2048 ** 2 + 2 * 2048 * 512 + 2 * 64 + 3 * 2048 * 4096 + 2 * 2048
    assert per == 35_655_808
    row = catalog.describe("LGAI-EXAONE/EXAONE-4.0-1.2B")
    assert row["parameters"]["total"] == _total(EXAONE4) == 30 * per + 102_400 * 2048 + 2048 == 1_279_391_488
    assert row["published"]["compared"] == 1_279_391_488 - 102_400 * 2048 == 1_069_676_288
    assert row["published"]["matches"] is True


def test_exaone4_norm_placement():
    """exaone4_provider.py exaone4_layer_spec: plain QKV and fc1 linears (no input norms), post-norms on the output
    projection and fc2, per-head q/k norms."""
    m = from_hf_config(EXAONE4)
    assert (m["pre_layernorm"], m["post_layernorm"], m["qk_layernorm"], m["untie_embeddings_and_output_weights"]) \
        == (False, True, True, False)
    assert "qk_layernorm_full_dim" not in m


# --- K-EXAONE (EXAONE MoE) -----------------------------------------------------------------------------------

#: K-EXAONE-236B-A23B's widths as TensorRT-LLM's tests/unittest/_torch/modeling/test_modeling_exaone_moe.py writes
#: them (EXAONE_MOE_CONFIG, its layer count cut for the test), with 48 layers and one MTP layer.
K_EXAONE = {"architectures": ["ExaoneMoEForCausalLM"], "model_type": "exaone_moe", "first_k_dense_replace": 1,
            "head_dim": 128, "hidden_act": "silu", "hidden_size": 6144, "intermediate_size": 18432,
            "is_moe_layer": [False] + [True] * 47, "moe_intermediate_size": 2048, "n_group": 1,
            "norm_topk_prob": True, "num_attention_heads": 64, "num_experts": 128, "num_experts_per_tok": 8,
            "num_hidden_layers": 48, "num_key_value_heads": 8, "num_shared_experts": 1, "rms_norm_eps": 1e-05,
            "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "sliding_window": 4096,
            "sliding_window_pattern": "LLLG", "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc",
            "vocab_size": 153600, "num_nextn_predict_layers": 1}


def test_k_exaone_counts_by_hand():
    """ExaoneMoeDecoderLayer (an OLMoE layer: input and post-attention RMSNorms) with Exaone4Attention (per-head q/k
    norms of 128). Attention: q 6144 x 8192, k and v 6144 x 1024 each, o 8192 x 6144 = 113,246,208, q/k norms 256,
    two norms 12,288. Layer 0 dense: + 3 x 6144 x 18,432 = 339,738,624 -> 452,997,376. MoE layers: 128 experts
    x 3 x 6144 x 2048 = 4,831,838,208, the shared expert 3 x 6144 x 2048 = 37,748,736, router 128 x 6144 and its
    expert bias 128 = 786,560 -> 4,983,632,256 each. 452,997,376 + 47 x 4,983,632,256 + 2 x 153,600 x 6144 + 6144
    = 236,571,156,352 (the name's 236B). The MTP layer is dense (Megatron-Bridge's build_exaone_moe_layer_spec):
    452,997,376 + eh_proj 2 x 6144^2 = 75,497,472 + enorm, hnorm and its final norm 18,432 = 528,513,280."""
    moe_layer = 113_246_208 + 256 + 12_288 + 128 * 3 * 6144 * 2048 + 3 * 6144 * 2048 + 128 * 6144 + 128
    dense_layer = 113_246_208 + 256 + 12_288 + 3 * 6144 * 18_432
    assert (dense_layer, moe_layer) == (452_997_376, 4_983_632_256)
    c = count_parameters_of(make_config(from_hf_config(K_EXAONE)))
    assert c.total - c.mtp == dense_layer + 47 * moe_layer + 2 * 153_600 * 6144 + 6144 == 236_571_156_352
    assert c.mtp == dense_layer + 2 * 6144 ** 2 + 3 * 6144 == 528_513_280


def test_k_exaone_maps_the_bridge_router_and_layer_pattern():
    """exaone_moe_bridge.py provider_bridge: the first layer dense, sigmoid routing with the expert bias, noaux_tc:
    no aux loss; mlp_layer_types wins over is_moe_layer, first_k_dense_replace (1 by default) comes last."""
    m = from_hf_config(K_EXAONE)
    assert m["moe_layer_freq"] == [0] + [1] * 47 and m["moe_shared_expert_intermediate_size"] == 2048
    assert (m["moe_router_score_function"], m["moe_router_enable_expert_bias"], m["moe_router_load_balancing_type"],
            m["qk_layernorm"], m["mtp_num_layers"], m["mtp_dense_mlp"]) == ("sigmoid", True, "none", True, 1, True)
    two_dense = {k: v for k, v in K_EXAONE.items() if k != "is_moe_layer"}
    assert from_hf_config({**two_dense, "first_k_dense_replace": 2})["moe_layer_freq"] == [0, 0] + [1] * 46
    assert from_hf_config({**two_dense, "mlp_layer_types": ["dense"] * 3 + ["sparse"] * 45})["moe_layer_freq"] \
        == [0, 0, 0] + [1] * 45
    aux = from_hf_config({k: v for k, v in K_EXAONE.items() if k != "topk_method"})
    assert (aux["moe_router_load_balancing_type"], aux["moe_aux_loss_coeff"], aux["moe_z_loss_coeff"]) == \
        ("global_aux_loss", 0.01, 0.001)
    shared = from_hf_config({**K_EXAONE, "mtp_num_speculative_steps": 3})
    assert (shared["mtp_num_layers"], shared["mtp_use_repeated_layer"]) == (3, True)
    with pytest.raises(UnsupportedError, match="exactly one physical"):
        from_hf_config({**K_EXAONE, "num_nextn_predict_layers": 2, "mtp_num_speculative_steps": 3})
    with pytest.raises(UnsupportedError, match="sigmoid"):
        from_hf_config({**K_EXAONE, "scoring_func": "softmax"})


def test_dense_mtp_layer_by_hand():
    """model.mtp_dense_mlp: the MTP layer holds a dense MLP (h 64, f 128: 3 x 64 x 128 = 24,576) instead of the last
    layer's MoE (4 experts of 32: 4 x 3 x 64 x 32 = 24,576, router 4 x 64 = 256): 256 fewer parameters, with the
    MoE layers unchanged."""
    moe = dict(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
               num_experts=4, moe_ffn_hidden_size=32, moe_router_topk=2, mtp_num_layers=1)
    a = count_parameters_of(make_config(moe))
    b = count_parameters_of(make_config(dict(moe, mtp_dense_mlp=True)))
    assert a.mtp - b.mtp == 256 and a.total - a.mtp == b.total - b.mtp
    from estimator import ConfigError, load_config
    with pytest.raises(ConfigError, match="mtp_dense_mlp"):
        load_config(make_config(dict(moe, mtp_num_layers=None, mtp_dense_mlp=True)))

# --- every key type-checked (as tests/formats/hf/test_hf_types.py does for the catalogued families) ------------

@pytest.mark.parametrize("hf", [OLMOE, MINITRON, EXAONE4, K_EXAONE], ids=["olmoe", "nemotron", "exaone4", "exaone_moe"])
def test_a_wrong_value_for_any_key_is_an_error_that_names_it(hf):
    """No catalogued config.json of these families yet: each key of the configs above, replaced by each wrong value,
    gives a model section or an EstimatorError whose ConfigError names config.json:<key>."""
    from estimator.config.errors import ConfigError, EstimatorError
    from tests.formats.hf.test_hf_types import WRONG
    for key in hf:
        for wrong in WRONG:
            try:
                from_hf_config({**hf, key: wrong})
            except ConfigError as exc:
                assert {p.field for p in exc.problems} <= {f"config.json:{key}", "config.json:num_hidden_layers"}, \
                    (key, wrong, exc)
            except EstimatorError:
                pass
