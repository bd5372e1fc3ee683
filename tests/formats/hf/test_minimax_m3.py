"""Issue 27: MiniMax-M3's language model (MiniMaxM3SparseForConditionalGeneration, model_type minimax_m3_vl) as
Megatron-Bridge's MiniMax-M3 recipes train it (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/minimax_m3/
minimax_m3_bridge.py ``provider_bridge`` and ``to_text_provider``; recipes/minimax/h100/minimax_m3.py).

The input is nvidia/MiniMax-M3-NVFP4's config.json as ai-dynamo/aiconfigurator @ 095f58a5 :
aic-core/src/aiconfigurator_core/model_configs/nvidia--MiniMax-M3-NVFP4_config.json holds it, without its
quantization_config (2.4 MB of per-tensor entries, over the catalog's 1 MiB input limit, which is why MiniMax-M3 is
not in the catalog; the same repository's MiniMaxAI--MiniMax-M3_config.json is a flattened text-decoder form, its
commit says, not the published file). Every other key is as published; the text_config is MiniMax-M3's.
"""

from __future__ import annotations

import copy
import json

import pytest

from estimator import ConfigError, UnsupportedError, count_parameters_of, from_hf_config
from estimator.config.errors import EstimatorError
from tests.conftest import ROOT

DATA = ROOT / "tests" / "formats" / "data" / "nvidia--MiniMax-M3-NVFP4_config.json"


def _hf() -> dict:
    return json.loads(DATA.read_text())


def _recipe(model: dict) -> dict:
    """minimax_m3_pretrain_256gpu_h100_bf16_config's layout: TP 2, PP 4, EP 32, expert TP 1, 256 GPUs."""
    return {"model": model, "parallelism": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4,
                                            "expert_model_parallel_size": 32, "expert_tensor_parallel_size": 1},
            "training": {"world_size": 256, "seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 2048,
                         "sequence_parallel": True, "use_distributed_optimizer": True}}


def test_minimax_m3_mapping():
    """Three dense layers of 12,288, then 57 MoE layers of 128 experts of 3072 (intermediate_size is the experts'
    width), top-4 sigmoid with the expert bias and fp32 router, one shared expert of 3072; SwiGLU-OAI as gated
    quick-GELU; per-head q/k norms; no MTP layers (the bridge maps none)."""
    m = from_hf_config(_hf())
    assert (m["num_layers"], m["hidden_size"], m["num_attention_heads"], m["num_query_groups"], m["kv_channels"]) \
        == (60, 6144, 64, 4, 128)
    assert (m["ffn_hidden_size"], m["num_experts"], m["moe_ffn_hidden_size"], m["moe_router_topk"],
            m["moe_shared_expert_intermediate_size"]) == (12288, 128, 3072, 4, 3072)
    assert m["moe_layer_freq"] == [0, 0, 0] + [1] * 57
    assert (m["activation_func"], m["gated_linear_unit"], m["qk_layernorm"]) == ("quick_gelu", True, True)
    assert (m["moe_router_score_function"], m["moe_router_enable_expert_bias"], m["moe_router_dtype"],
            m["moe_router_load_balancing_type"], m["moe_aux_loss_coeff"]) == ("sigmoid", True, "fp32", "aux_loss",
                                                                             0.001)
    assert "mtp_num_layers" not in m and "vision_num_layers" not in m


def test_minimax_m3_by_hand():
    """h 6144, 60 layers, 64 query heads and 4 KV heads of 128, vocabulary 200,064 untied.

    Attention: q and o 2 x 64 x 128 x 6144 = 100,663,296, k and v 2 x 4 x 128 x 6144 = 6,291,456, q/k norms
    2 x 128: 106,955,008; two norms per layer 2 x 6144. Dense MLP 3 x 6144 x 12,288 = 226,492,416 (layers 0-2).
    MoE: experts 128 x 3 x 6144 x 3072 = 7,247,757,312, shared expert 3 x 6144 x 3072 = 56,623,104, router
    128 x 6144 + expert bias 128 = 786,560. Embedding and output 2 x 200,064 x 6144 = 2,458,386,432, final norm.

    60 x (106,955,008 + 12,288) + 3 x 226,492,416 + 57 x (7,247,757,312 + 56,623,104 + 786,560) + 2,458,386,432
    + 6144 = 425,950,425,216. Active (4 of 128 experts): 57 x 124 x 3 x 6144 x 3072 fewer = 25,738,326,144, of
    which 23,279,939,712 without the embedding and output layer: the recipe docstring's "~23B active". At TP 2
    Megatron pads the vocabulary to 200,192 rows (a multiple of 128 x 2): 2 x 128 x 6144 = 1,572,864 more."""
    att = 2 * 64 * 128 * 6144 + 2 * 4 * 128 * 6144 + 2 * 128
    moe = 128 * 3 * 6144 * 3072 + 3 * 6144 * 3072 + 128 * 6144 + 128
    assert (att, moe) == (106_955_008, 7_305_166_976)
    total = 60 * (att + 2 * 6144) + 3 * 3 * 6144 * 12288 + 57 * moe + 2 * 200_064 * 6144 + 6144
    active = total - 57 * 124 * 3 * 6144 * 3072
    assert (total, active) == (425_950_425_216, 25_738_326_144)
    assert round((active - 2 * 200_064 * 6144) / 1e9) == 23
    c = count_parameters_of(_recipe(from_hf_config(_hf())))
    assert (c.total - c.vocab_padding, c.active - c.vocab_padding) == (total, active)
    assert c.vocab_padding == 2 * 128 * 6144
    assert c.layer_kinds == {"attention + MLP": 3, "attention + MoE": 57}


@pytest.mark.parametrize("key, value, match", [
    ("qk_norm_type", "per_layer", "per_head"),
    ("attention_output_gate", True, "output gate"),
    ("moe_intermediate_size", 1536, "experts' width"),
    ("scoring_func", "softmax", "sigmoid"),
])
def test_minimax_m3_refuses_what_the_bridge_does_not_build(key, value, match):
    hf = _hf()
    hf["text_config"][key] = value
    with pytest.raises(UnsupportedError, match=match):
        from_hf_config(hf)


def test_minimax_m3_bad_values_are_named():
    hf = _hf()
    hf["text_config"]["moe_layer_freq"] = [0, 1]
    with pytest.raises(ConfigError, match="config.json:moe_layer_freq"):
        from_hf_config(hf)
    hf = _hf()
    hf["text_config"]["model_type"] = "minimax_m2"
    with pytest.raises(UnsupportedError, match="text_config.model_type"):
        from_hf_config(hf)


def test_swigluoai_is_minimax_m3s_own():
    """hidden_act swigluoai is a name only MiniMax-M3's config uses; another family refuses it."""
    llama = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
             "intermediate_size": 128, "vocab_size": 100, "hidden_act": "swigluoai"}
    with pytest.raises(UnsupportedError, match="hidden_act"):
        from_hf_config(copy.deepcopy(llama))


def test_a_wrong_value_for_any_text_key_is_an_error_that_names_it():
    """As tests/formats/hf/test_hf_types.py does for the catalogued families: every text_config key replaced by
    values of the wrong kind gives a model section or an error, a ConfigError naming that key."""
    from tests.formats.hf.test_hf_types import WRONG
    text = _hf()["text_config"]
    for key in text:
        for wrong in WRONG:
            hf = _hf()
            hf["text_config"][key] = wrong
            try:
                from_hf_config(hf)
            except ConfigError as exc:
                assert {p.field for p in exc.problems} <= {f"config.json:{key}", "config.json:num_hidden_layers",
                                                            "config.json:text_config"}, (key, wrong, exc)
            except EstimatorError:
                pass
