"""Issue 27, famD: Hy3 (Hunyuan V3) and Sarvam through the Hugging Face import.

Each count is by hand in its docstring, from the tensors the checkpoints hold (Hy3's model.safetensors.index.json
names: q/k/v/o, q_norm, k_norm, router.gate, expert_bias, experts.*, shared_mlp, the MTP layer's eh_proj, enorm,
hnorm, final_layernorm) and Megatron-Bridge's providers. The configs written out here are test inputs with the
published models' shapes, not catalog entries: no public repository vendoring their config.json whole was found.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, count_parameters_of
from estimator.config.errors import EstimatorError
from estimator.formats.hf import from_hf_config
from tests.conftest import make_config


def _counts(hf: dict):
    return count_parameters_of(make_config(from_hf_config(hf)))


# --- Hy3 / Hunyuan V3 ----------------------------------------------------------------------------------------

#: tencent/Hy3's config.json as a test of kiln's quotes it (every key; "https://huggingface.co/tencent/Hy3/raw/main/
#: config.json, read 2026-10-03"); tencent/Hy3-preview has the same shapes.
HY3 = {"architectures": ["HYV3ForCausalLM"], "bos_token_id": 120000, "dtype": "bfloat16",
       "enable_attention_fp32_softmax": False, "enable_lm_head_fp32": True, "enable_moe_fp32_combine": False,
       "eod_token_id": 120026, "eos_token_id": 120025, "expert_hidden_dim": 1536, "moe_intermediate_size": 1536,
       "first_k_dense_replace": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
       "initializer_range": 0.006, "intermediate_size": 13312, "max_position_embeddings": 262144,
       "model_type": "hy_v3", "moe_router_enable_expert_bias": True, "moe_router_use_sigmoid": True,
       "num_attention_heads": 64, "num_experts": 192, "num_experts_per_tok": 8, "num_hidden_layers": 80,
       "num_key_value_heads": 8, "num_shared_experts": 1, "output_router_logits": True, "pad_token_id": 120002,
       "qk_norm": True, "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 11158840.0, "rope_type": "default"},
       "route_norm": True, "router_scaling_factor": 2.826, "sep_token_id": 120007, "tie_word_embeddings": False,
       "transformers_version": "5.6.0", "use_cache": True, "use_grouped_mm": False, "vocab_size": 120832,
       "num_nextn_predict_layers": 1}


def test_hy3_counts_by_hand_and_matches_the_checkpoint_and_the_model_card():
    """Hy3: h 4096, 80 layers, 64 query heads and 8 key/value heads of 128, layer 0 dense (SwiGLU 13,312), layers
    1-79 MoE (192 experts of 1536, one shared expert of 1536, top 8), vocabulary 120,832 untied, one MTP layer.

    attention: q 4096 x 8192 + k, v 2 x 4096 x 1024 + o 8192 x 4096 = 75,497,472; q/k norms 2 x 128; two layer
    norms 2 x 4096: 75,505,920 per layer.
    dense layer 0: 75,505,920 + 3 x 4096 x 13,312 (163,577,856) = 239,083,776.
    MoE layer: 75,505,920 + 192 x 3 x 4096 x 1536 (3,623,878,656) + shared 3 x 4096 x 1536 (18,874,368) + router
    192 x 4096 (786,432) + expert bias 192 = 3,719,045,568.
    decoder: 239,083,776 + 79 x 3,719,045,568 + embedding and output 2 x 120,832 x 4096 (989,855,744) + final
    norm 4096 = 295,033,543,488: the model card's "295B" (MTP not counted).
    MTP layer: an MoE layer 3,719,045,568 + eh_proj 8192 x 4096 (33,554,432) + enorm, hnorm, final_layernorm
    3 x 4096 = 3,752,612,288: the card's "+ 3.8B MTP".
    The checkpoint: 298,786,155,776 parameters of which the 80 expert biases (15,360) are fp32, the rest bf16:
    2 x 298,786,140,416 + 4 x 15,360 = 597,572,342,272 bytes, model.safetensors.index.json's metadata.total_size
    (huggingface.co/tencent/Hy3 @ 716aa7241bd6d95896be4ebfc761162a9c4d49ef)."""
    moe_layer = 75_505_920 + 192 * 3 * 4096 * 1536 + 3 * 4096 * 1536 + 192 * 4096 + 192
    assert moe_layer == 3_719_045_568
    decoder = 239_083_776 + 79 * moe_layer + 2 * 120_832 * 4096 + 4096
    mtp = moe_layer + 8192 * 4096 + 3 * 4096
    p = _counts(HY3)
    assert (decoder, mtp) == (295_033_543_488, 3_752_612_288)
    assert (p.total - p.mtp, p.mtp, p.total) == (decoder, mtp, decoder + mtp)
    assert 2 * (p.total - 80 * 192) + 4 * 80 * 192 == 597_572_342_272
    assert round(p.active / 1e9) == 21          # the card's "21B active"


def test_hy3_maps_the_bridge_settings():
    """hy_v3_bridge.py provider_bridge: qk_layernorm, dense first layer, shared expert of num_shared_experts x
    moe_intermediate_size, sigmoid routing with the expert bias, load balancing none, one MoE MTP layer."""
    m = from_hf_config(HY3)
    assert (m["qk_layernorm"], m["num_query_groups"], m["kv_channels"], m["moe_layer_freq"][:3], m["num_experts"],
            m["moe_ffn_hidden_size"], m["moe_shared_expert_intermediate_size"], m["moe_router_score_function"],
            m["moe_router_enable_expert_bias"], m["moe_router_load_balancing_type"], m["mtp_num_layers"]) == (
        True, 8, 128, [0, 1, 1], 192, 1536, 1536, "sigmoid", True, "none", 1)


@pytest.mark.parametrize("key, value, error, words", [
    ("qk_norm", False, UnsupportedError, "q/k norms"),
    ("moe_router_use_sigmoid", False, UnsupportedError, "sigmoid"),
    ("attention_bias", True, UnsupportedError, "no exact Megatron-Core equivalent"),
    ("expert_hidden_dim", 1024, ConfigError, "moe_intermediate_size"),
    ("mlp_layer_types", ["sparse"] * 80, UnsupportedError, "first_k_dense_replace"),
    ("first_k_dense_replace", 80, UnsupportedError, "no layer MoE"),
])
def test_hy3_refuses_what_the_bridge_does_not_build(key, value, error, words):
    with pytest.raises(error, match=words):
        from_hf_config(dict(HY3, **{key: value}))


def test_hy3_layer_types_saying_the_same_are_accepted():
    assert from_hf_config(dict(HY3, mlp_layer_types=["dense"] + ["sparse"] * 79)) == from_hf_config(HY3)


# --- Sarvam ----------------------------------------------------------------------------------------------------

#: sarvam-30b's shapes as Megatron-Bridge's SarvamMoEModelProvider defaults state them (19 layers, h 4096, 64
#: heads of 64 and 4 key/value heads, dense 8192, 128 experts of 1024 top 6, one shared expert, vocabulary 262,144).
SARVAM_30B = {"architectures": ["SarvamMoEForCausalLM"], "model_type": "sarvam_moe", "num_hidden_layers": 19,
              "hidden_size": 4096, "intermediate_size": 8192, "moe_intermediate_size": 1024,
              "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 64, "num_experts": 128,
              "num_experts_per_tok": 6, "num_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 262144,
              "max_position_embeddings": 131072, "rope_theta": 8000000.0, "rms_norm_eps": 1e-06,
              "use_qk_norm": True, "use_qkv_bias": False, "use_bias": False, "score_function": "sigmoid",
              "moe_router_enable_expert_bias": True, "routed_scaling_factor": 2.5, "tie_word_embeddings": False}

#: sarvam-105b's shapes as SarvamMLAModelProvider's defaults state them (32 layers, h 4096, 64 heads, MLA with
#: kv_lora_rank 512, no q compression, 128 + 64 query/key and 128 value head widths, dense 16,384, 128 experts of
#: 2048 top 8, one shared expert).
SARVAM_105B = {"architectures": ["SarvamMLAForCausalLM"], "model_type": "sarvam_mla", "num_hidden_layers": 32,
               "hidden_size": 4096, "intermediate_size": 16384, "moe_intermediate_size": 2048,
               "num_attention_heads": 64, "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
               "num_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 262144,
               "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
               "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}}


def test_sarvam_30b_counts_by_hand():
    """Per layer: q 4096 x 4096 + k, v 2 x 4096 x 256 + o 4096 x 4096 = 35,651,584; q/k norms 2 x 64; two norms
    2 x 4096: 35,659,904. Dense layer 0: + 3 x 4096 x 8192 (100,663,296) = 136,323,200. MoE layer: + 128 x 3 x 4096
    x 1024 (1,610,612,736) + shared 3 x 4096 x 1024 (12,582,912) + router 128 x 4096 and expert bias 128 (524,416)
    = 1,659,379,968. 18 of them + layer 0 + embedding and output 2 x 262,144 x 4096 (2,147,483,648) + final norm
    4096 = 32,152,650,368."""
    moe_layer = 35_659_904 + 128 * 3 * 4096 * 1024 + 3 * 4096 * 1024 + 128 * 4096 + 128
    assert moe_layer == 1_659_379_968
    assert _counts(SARVAM_30B).total == 18 * moe_layer + 136_323_200 + 2 * 262_144 * 4096 + 4096 == 32_152_650_368


def test_sarvam_105b_counts_by_hand():
    """MLA per layer: q 4096 x 64 x 192 (50,331,648) + kv down 4096 x (512 + 64) (2,359,296) + kv latent norm 512 +
    kv up 512 x 64 x (128 + 128) (8,388,608) + o 64 x 128 x 4096 (33,554,432) + two norms 8192 = 94,642,688. Dense
    layer 0: + 3 x 4096 x 16,384 (201,326,592) = 295,969,280. MoE layer: + 128 x 3 x 4096 x 2048 (3,221,225,472) +
    shared 3 x 4096 x 2048 (25,165,824) + router and expert bias 128 x 4097 (524,416) = 3,341,558,400. 31 of them +
    layer 0 + 2 x 262,144 x 4096 + 4096 = 106,031,767,424. Bridge's Sarvam page says "105B total": these
    shapes are its provider's defaults, not a published config.json, so the published figure is not held here."""
    mla = 4096 * 64 * 192 + 4096 * 576 + 512 + 512 * 64 * 256 + 64 * 128 * 4096 + 2 * 4096
    assert mla == 94_642_688
    moe_layer = mla + 128 * 3 * 4096 * 2048 + 3 * 4096 * 2048 + 128 * 4097
    p = _counts(SARVAM_105B)
    assert p.total == 31 * moe_layer + mla + 3 * 4096 * 16_384 + 2 * 262_144 * 4096 + 4096 == 106_031_767_424
    m = from_hf_config(SARVAM_105B)
    assert (m["multi_latent_attention"], m["position_embedding_type"], "q_lora_rank" in m) == (True, "yarn", False)


def test_sarvam_maps_the_bridge_providers():
    """sarvam_provider.py: sigmoid routing before the top-k with the expert bias, no aux loss (coefficient 0,
    the schema's default), qk_layernorm, untied."""
    m = from_hf_config(SARVAM_30B)
    assert (m["moe_router_score_function"], m["moe_router_pre_softmax"], m["moe_router_enable_expert_bias"],
            m["qk_layernorm"], m["num_query_groups"], m["kv_channels"], m["moe_shared_expert_intermediate_size"],
            m["untie_embeddings_and_output_weights"]) == ("sigmoid", True, True, True, 4, 64, 1024, True)
    assert "moe_aux_loss_coeff" not in m


@pytest.mark.parametrize("key, value, error, words", [
    ("tie_word_embeddings", True, UnsupportedError, "untie"),
    ("use_qkv_bias", True, UnsupportedError, "no biases"),
    ("use_qk_norm", False, UnsupportedError, "q/k norms"),
    ("score_function", "softmax", UnsupportedError, "sigmoid"),
    ("moe_shared_expert_intermediate_size", 2048, ConfigError, "num_shared_experts x moe_intermediate_size"),
    ("mystery_key", 1, UnsupportedError, "mystery_key"),
])
def test_sarvam_refuses_what_the_bridge_does_not_build(key, value, error, words):
    with pytest.raises(error, match=words):
        from_hf_config(dict(SARVAM_30B, **{key: value}))


@pytest.mark.parametrize("hf", [HY3, SARVAM_30B, SARVAM_105B], ids=["hy_v3", "sarvam_moe", "sarvam_mla"])
def test_a_wrong_value_for_any_key_is_an_error_that_names_it(hf):
    """As tests/formats/hf/test_hf_types.py does for the catalogued families: every key replaced by each wrong
    value gives a model section or an EstimatorError, a ConfigError naming that key."""
    for key in hf:
        for wrong in [[1], ["silu"], {"a": 1}, "abc", True, False, -1, 0, 1.5, float("nan"), float("inf"), 10 ** 30,
                      None]:
            try:
                from_hf_config({**hf, key: wrong})
            except ConfigError as exc:
                assert {p.field for p in exc.problems} <= {f"config.json:{key}", "config.json:num_hidden_layers"}, \
                    (key, wrong, exc)
            except EstimatorError:
                pass
