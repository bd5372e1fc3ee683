"""Hugging Face config.json import: every reference config, exact counts, and honest refusals.

Expected totals are the "exact count" column of ../shared/reference/hf-configs/SOURCES.md (the DeepSeek-V3
figure excludes the MTP layer) and owners' published counts for the synthetic configs below.
"""

from __future__ import annotations

import json

import pytest

from estimator import ConfigError, UnsupportedError, count_parameters_of
from estimator.formats.hf import SUPPORTED, from_hf_config
from estimator.formats.presets import published_bounds
from tests.conftest import make_config
from tests.model.test_params import MODELS

#: SOURCES.md, "exact count" column.
EXACT = {
    "Llama-2-7b-hf": 6_738_415_616,
    "Llama-3.1-405B": 405_853_388_800,
    "Mixtral-8x7B-v0.1": 46_702_792_704,
    "Mixtral-8x22B-v0.1": 140_620_634_112,
    "Qwen2.5-7B": 7_615_616_512,
    "Qwen3-8B": 8_190_735_360,
    "Qwen3-30B-A3B": 30_532_122_624,
    "Qwen3-235B-A22B": 235_093_634_560,
    "DeepSeek-V3": 671_026_419_200,   # main model; the MTP layer is counted apart
}


def _total_without_mtp(model: dict) -> int:
    c = count_parameters_of(make_config(model))
    return c.total - c.mtp


def test_every_reference_config_imports_with_its_exact_count(reference):
    files = sorted((reference / "hf-configs").glob("*.json"))
    assert len(files) >= 10
    seen = set()
    for path in files:
        if path.stem == "gpt-oss-120b":
            # KerasHub's gpt_oss_120b_en preset: "params" 116,829,156,672 (keras-team/keras-hub @ 71453d08 :
            # keras_hub/src/models/gpt_oss/gpt_oss_presets.py); SOURCES.md gives only the MXFP4 byte total.
            assert _total_without_mtp(from_hf_config(path)) == 116_829_156_672
            continue
        assert _total_without_mtp(from_hf_config(path)) == EXACT[path.stem], path.name
        seen.add(path.stem)
    assert seen == set(EXACT)


def test_import_agrees_with_the_hand_written_sections(reference):
    """The model sections written by hand in test_params.py (from the same files) are a subset of the import."""
    for name in EXACT:
        imported = from_hf_config(reference / "hf-configs" / f"{name}.json")
        hand, _ = MODELS[name]
        for key, value in hand.items():
            assert imported.get(key) == value, (name, key)


def test_deepseek_v3_mapping(reference):
    """first_k_dense_replace 3 -> three dense layers; 1 shared expert x 2048; noaux_tc -> expert bias; MTP 1."""
    m = from_hf_config(reference / "hf-configs" / "DeepSeek-V3.json")
    assert m["moe_layer_freq"] == [0, 0, 0] + [1] * 58
    assert m["moe_shared_expert_intermediate_size"] == 2048
    assert m["moe_router_enable_expert_bias"] is True
    assert m["mtp_num_layers"] == 1
    assert (m["q_lora_rank"], m["kv_lora_rank"], m["qk_head_dim"], m["qk_pos_emb_head_dim"], m["v_head_dim"]) == \
        (1536, 512, 128, 64, 128)
    assert m["max_position_embeddings"] == 163840


def test_model_directory_and_dict_give_the_same_section(reference, tmp_path):
    src = reference / "hf-configs" / "Qwen3-8B.json"
    (tmp_path / "config.json").write_text(src.read_text())
    assert from_hf_config(tmp_path) == from_hf_config(src) == from_hf_config(json.loads(src.read_text()))
    assert from_hf_config(src)["kv_channels"] == 128 and from_hf_config(src)["qk_layernorm"] is True


def test_hub_id_is_refused_without_network():
    with pytest.raises(ConfigError, match="never downloads.*config.json"):
        from_hf_config("meta-llama/Llama-3-8B")


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        from_hf_config(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="holds no config.json"):
        from_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON"):
        from_hf_config(tmp_path)


LLAMA = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=256, intermediate_size=688,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
             max_position_embeddings=512, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False)


def test_unknown_architecture_lists_the_supported_ones():
    with pytest.raises(UnsupportedError, match="unknown architecture 'GPT2LMHeadModel'.*Qwen3-MoE"):
        from_hf_config({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    assert "deepseek_v3" in SUPPORTED and "mixtral" in SUPPORTED


def test_unknown_key_stops_the_import_unless_not_strict():
    cfg = {**LLAMA, "num_memory_tokens": 16}
    with pytest.raises(UnsupportedError, match="num_memory_tokens"):
        from_hf_config(cfg)
    assert from_hf_config(cfg, strict=False) == from_hf_config(LLAMA)


def test_biases_map_only_where_exact():
    """Llama attention_bias + mlp_bias = Megatron's add_bias_linear; attention_bias alone has no equivalent."""
    assert from_hf_config({**LLAMA, "attention_bias": True, "mlp_bias": True})["add_bias_linear"] is True
    with pytest.raises(UnsupportedError, match="attention_bias"):
        from_hf_config({**LLAMA, "attention_bias": True})
    assert "add_bias_linear" not in from_hf_config({**LLAMA, "attention_bias": False})


def test_tied_embeddings_and_gelu():
    m = from_hf_config({**LLAMA, "tie_word_embeddings": True, "hidden_act": "gelu_pytorch_tanh"})
    assert m["untie_embeddings_and_output_weights"] is False
    assert (m["activation_func"], m["gated_linear_unit"]) == ("geglu", True)
    with pytest.raises(UnsupportedError, match="hidden_act 'relu'"):
        from_hf_config({**LLAMA, "hidden_act": "relu"})


def test_qwen3_needs_head_dim():
    cfg = {**LLAMA, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}
    with pytest.raises(ConfigError, match="head_dim"):
        from_hf_config(cfg)


def test_mistral_7b_published_count():
    """Mistral-7B-v0.1 (h 4096, 32 layers, 32 heads / 8 KV, ffn 14336, vocab 32000, untied): 7,241,732,096
    parameters, the count its checkpoint holds. Sliding window 4096 changes no parameter."""
    m = from_hf_config(dict(model_type="mistral", architectures=["MistralForCausalLM"], hidden_size=4096,
                            intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                            num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
                            rms_norm_eps=1e-5, sliding_window=4096, tie_word_embeddings=False, hidden_act="silu"))
    assert count_parameters_of(make_config(m)).total == 7_241_732_096


def test_qwen2_moe_shared_expert_and_gate():
    """Qwen1.5-MoE-A2.7B (Qwen2MoeForCausalLM): published "14.3B total, 2.7B activated". The shared expert
    (5632 wide) has a sigmoid gate of h weights, and q/k/v carry biases."""
    m = from_hf_config(dict(model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"], hidden_size=2048,
                            intermediate_size=5632, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                            num_experts=60, num_experts_per_tok=4, num_hidden_layers=24, num_attention_heads=16,
                            num_key_value_heads=16, vocab_size=151936, max_position_embeddings=8192,
                            decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=False,
                            tie_word_embeddings=False))
    assert m["moe_shared_expert_gate"] is True and m["add_qkv_bias"] is True
    c = count_parameters_of(make_config(m))
    lo, hi = published_bounds("14.3B")
    assert lo <= c.total <= hi
    lo, hi = published_bounds("2.7B")
    assert lo <= c.active <= hi


def test_deepseek_v2_lite_published_count():
    """DeepSeek-V2-Lite: "15.7B total parameters" (DeepSeek-V2 paper); no query compression (q_lora_rank null),
    greedy routing (no expert bias), 2 shared experts of 1408 -> 2816."""
    m = from_hf_config(dict(model_type="deepseek_v2", architectures=["DeepseekV2ForCausalLM"], hidden_size=2048,
                            intermediate_size=10944, moe_intermediate_size=1408, num_hidden_layers=27,
                            num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64, n_shared_experts=2,
                            num_experts_per_tok=6, first_k_dense_replace=1, moe_layer_freq=1, q_lora_rank=None,
                            kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                            vocab_size=102400, max_position_embeddings=163840, topk_method="greedy",
                            tie_word_embeddings=False))
    assert "q_lora_rank" not in m and "moe_router_enable_expert_bias" not in m
    assert m["moe_shared_expert_intermediate_size"] == 2816 and m["moe_layer_freq"] == [0] + [1] * 26
    lo, hi = published_bounds("15.7B")
    assert lo <= count_parameters_of(make_config(m)).total <= hi


def test_moe_layer_patterns():
    """Qwen MoE: layer i is sparse when i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
    DeepSeek: layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0."""
    qwen = dict(LLAMA, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_hidden_layers=4,
                head_dim=64, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128)
    assert from_hf_config({**qwen, "decoder_sparse_step": 2})["moe_layer_freq"] == [0, 1, 0, 1]
    assert from_hf_config({**qwen, "mlp_only_layers": [3]})["moe_layer_freq"] == [1, 1, 1, 0]
    assert "moe_layer_freq" not in from_hf_config(qwen)
    ds = dict(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"], hidden_size=256,
              intermediate_size=512, moe_intermediate_size=64, num_hidden_layers=6, num_attention_heads=4,
              n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, moe_layer_freq=2,
              q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
              vocab_size=1000, topk_method="noaux_tc", num_nextn_predict_layers=0)
    m = from_hf_config(ds)
    assert m["moe_layer_freq"] == [0, 0, 1, 0, 1, 0] and "mtp_num_layers" not in m
    with pytest.raises(UnsupportedError, match="topk_method 'weird'"):
        from_hf_config({**ds, "topk_method": "weird"})


# --- hostile config.json values (issue 15): every key read is type-checked and bounded ------------------

@pytest.mark.parametrize("key, value, message", [
    ("model_type", [], "must be a name such as 'llama', got []"),                 # was TypeError: unhashable
    ("architectures", "LlamaForCausalLM", "must be a list of class names"),
    ("hidden_act", {}, "must be a name (a string), got {}"),                       # was TypeError: unhashable
    ("rms_norm_eps", True, "must be a finite number, got True"),                   # was silently 1.0
    ("rms_norm_eps", [1], "must be a finite number, got [1]"),                     # was TypeError in float()
    ("rms_norm_eps", float("nan"), "must be a finite number, got nan"),
    ("rms_norm_eps", 2.0, "must be between 0 and 1"),
    ("attention_dropout", "0.1", "must be a finite number, got '0.1'"),           # was silently ignored
    ("hidden_dropout", float("inf"), "must be a finite number, got inf"),          # was Infinity in the page's JSON
    ("num_hidden_layers", 10 ** 30, "must be <= 10,000, got"),                    # was a hang building the pattern
    ("hidden_size", 10 ** 80, "must be <= 1,000,000, got"),
    ("vocab_size", 4096.0, "must be a non-negative integer, got 4096.0"),
])
def test_wrong_types_and_absurd_values_name_the_key(key, value, message):
    with pytest.raises(ConfigError) as exc:
        from_hf_config({**LLAMA, key: value})
    (p,) = exc.value.problems
    assert p.field == f"config.json:{key}" and message in p.message


def test_a_config_that_is_not_an_object(tmp_path):
    for text in ("5", "[1, 2]", "null", '"llama"'):
        (tmp_path / "config.json").write_text(text)
        with pytest.raises(ConfigError, match="must hold a JSON object"):
            from_hf_config(tmp_path / "config.json")
    (tmp_path / "config.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(LLAMA).encode())     # a byte-order mark
    assert from_hf_config(tmp_path / "config.json") == from_hf_config(LLAMA)
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nested deeper than 32 levels"):
        from_hf_config(tmp_path)
    for source in (5, [LLAMA], "a\0b/config.json"):
        with pytest.raises(ConfigError):
            from_hf_config(source)


def test_many_unknown_keys_are_listed_briefly():
    with pytest.raises(UnsupportedError) as exc:
        from_hf_config({**LLAMA, **{f"extra_{i:05}": i for i in range(50_000)}})
    assert "extra_00019 and 49,980 more" in str(exc.value) and len(str(exc.value)) < 2_000


def test_mlp_only_layers_are_checked_before_use():
    qwen = {**LLAMA, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "head_dim": 32,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
    for bad in ([True], [0] * 10 ** 6, "0", [99]):
        with pytest.raises(ConfigError, match="mlp_only_layers"):
            from_hf_config({**qwen, "mlp_only_layers": bad})


def test_kimi_k3_imports_its_language_model():
    """moonshotai/Kimi-K3's genuine config.json (tests/formats/data, from ai-dynamo/aiconfigurator @ a77804e3 :
    aic-core/src/aiconfigurator_core/model_configs/moonshotai--Kimi-K3_config.json) maps to the language model
    Megatron-Bridge's KimiK3Bridge builds (kimi/kimi_k3_bridge.py provider_bridge): KDA in the 69 layers of
    linear_attn_config.kda_layers (1-based), gated no-RoPE MLA in the 24 others, AttnRes every 12 layers, a latent MoE
    of 896 experts in 3584 with its routed-expert norm, 2 x 3072 shared, one dense layer, SiTU. Its parameter count
    is tested in tests/model/layers/test_kimi.py."""
    from pathlib import Path
    cfg = json.loads((Path(__file__).parents[1] / "data" / "moonshotai--Kimi-K3_config.json").read_text())
    m = from_hf_config(cfg)
    assert m["experimental_attention_variant"] == "kda" and m["activation_func"] == "situ"
    assert sum(m["linear_attention_freq"]) == 69 and m["linear_attention_freq"][3] == 0
    assert (m["attn_res_block_size"], m["moe_latent_size"], m["moe_latent_norm"]) == (12, 3584, True)
    assert (m["num_experts"], m["moe_router_topk"], m["moe_shared_expert_intermediate_size"]) == (896, 16, 6144)
    assert m["moe_layer_freq"] == [0] + [1] * 92 and m["position_embedding_type"] == "none"
    bad = json.loads(json.dumps(cfg))
    bad["text_config"]["linear_attn_config"]["kda_layers"] = [1, 2]
    with pytest.raises(ConfigError, match=r"kda_layers.*each of the 93 layers exactly once"):
        from_hf_config(bad)
