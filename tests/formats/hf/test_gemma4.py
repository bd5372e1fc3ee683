"""Issue 27: Gemma 4 MoE (google/gemma-4-26B-A4B) and dense (Gemma-4-31B), the language model as Megatron-Bridge
builds it.

Hand counts from Hugging Face's Gemma 4 modules (modeling_gemma4.py: Gemma4TextAttention, Gemma4TextRouter,
Gemma4TextExperts, Gemma4TextDecoderLayer) and the catalog's config.json; the published figures are the model
card's "25.2B total, 3.8B active" (the ~0.55 B vision encoder is listed apart and not in either figure; the import
counts it too, by hand in tests/memory/test_vision_gemma4.py).
"""

from __future__ import annotations

import copy

import pytest

from estimator import ConfigError, UnsupportedError, count_parameters_of, from_hf_config, load_config
from estimator.formats import catalog, hf_catalog
from estimator.memory.activations import layer_activations
from estimator.model.resolve import resolve
from tests.conftest import make_config

HF_ID = "google/gemma-4-26B-A4B"


def _cfg(**par):
    return {"model": from_hf_config(HF_ID), "parallelism": par,
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, "world_size": 8}}


def test_gemma4_26b_a4b_by_hand_matches_the_published_total_and_active():
    """h 2816, 30 layers (layer_types: five sliding-window layers then a global one), 16 heads; sliding layers 8 KV
    heads of 256, global layers 2 KV heads of 512 with K = V (no v_proj); vocabulary 262,144 tied.

    Sliding attention: q 16 x 256 x 2816 = 11,534,336, k and v 8 x 256 x 2816 = 5,767,168 each, o 11,534,336,
    q/k norms 256 + 256: 34,603,520. Global attention: q 16 x 512 x 2816 = 23,068,672, k 2 x 512 x 2816 =
    2,883,584, o 23,068,672, q/k norms 512 + 512: 49,021,952. Every layer: seven norms 7 x 2816 = 19,712 (input,
    post-attention, pre-feedforward (shared), post-feedforward, post-feedforward 1 and 2, pre-feedforward 2),
    router 128 x 2816 + scale 2816 + per-expert scale 128 = 363,392, experts 128 x 3 x 704 x 2816 = 761,266,176,
    dense MLP 3 x 2816 x 2112 = 17,842,176: 798,491,456 - 19,000,000 = 779,491,456. Embedding 262,144 x 2816 =
    738,197,504, final norm 2816.

    Hugging Face: 738,197,504 + 2816 + 25 x 34,603,520 + 5 x 49,021,952 + 30 x 779,491,456 = 25,233,141,760
    (25.2 B); active: experts 8 of 128, 30 x 120 x 3 x 704 x 2816 fewer = 3,822,530,560 (3.8 B).
    Megatron-Core (Megatron-Bridge's fused QKV keeps the global layers' value rows, a copy of k_proj):
    + 5 x 2 x 512 x 2816 = 14,417,920, so 25,247,559,680 and 3,836,948,480."""
    sliding = 2 * 16 * 256 * 2816 + 2 * 8 * 256 * 2816 + 2 * 256
    glob = 2 * 16 * 512 * 2816 + 2 * 512 * 2816 + 2 * 512
    layer = 7 * 2816 + 128 * 2816 + 2816 + 128 + 128 * 3 * 704 * 2816 + 3 * 2816 * 2112
    assert (sliding, glob, layer) == (34_603_520, 49_021_952, 779_491_456)
    hf_total = 262_144 * 2816 + 2816 + 25 * sliding + 5 * glob + 30 * layer
    hf_active = hf_total - 30 * 120 * 3 * 704 * 2816
    assert (hf_total, hf_active) == (25_233_141_760, 3_822_530_560)
    assert round(hf_total / 1e9, 1) == 25.2 and round(hf_active / 1e9, 1) == 3.8
    value_rows = 5 * 2 * 512 * 2816
    c = count_parameters_of(_cfg(expert_model_parallel_size=8))
    lm = (c.total - c.vision, c.active - c.vision)      # the vision tower: tests/memory/test_vision_gemma4.py
    assert lm == (hf_total + value_rows, hf_active + value_rows) == (25_247_559_680, 3_836_948_480)
    assert c.layer_kinds == {"attention + MoE": 25, "attention + MoE (kv_channels 512, query groups 2)": 5}
    assert c.vision == 572_792_112
    assert catalog.describe(HF_ID)["parameters"]["total"] == 25_247_559_680 + 572_792_112


def test_gemma4_mapping():
    m = from_hf_config(HF_ID)
    assert (m["global_attention_freq"], m["global_kv_channels"], m["num_global_query_groups"]) == (6, 512, 2)
    assert (m["kv_channels"], m["num_query_groups"], m["moe_shared_expert_intermediate_size"]) == (256, 8, 2112)
    assert m["post_layernorm"] and m["qk_layernorm"] and m["final_logit_softcapping"] == 30.0
    assert m["untie_embeddings_and_output_weights"] is False and m["moe_router_pre_softmax"] is True


def test_global_layers_keep_their_own_head_shapes_in_the_activations():
    """One micro-batch, s = 4096, b = 1, no SP (T = Tn = 4096), bf16. The attention of a global layer keeps q, k, v
    (16 + 2 + 2) x 512 and the output 16 x 512 per token where a sliding one keeps (16 + 8 + 8) x 256 and 16 x 256;
    the value norm's fp32 copy 2 x 512 vs 8 x 256 elements; the q/k norms' copies (16 + 2) x 512 x 2 B vs
    (16 + 8) x 256 x 2 B and their fp32 statistics per row (16 + 2 vs 16 + 8 rows); the value norm's statistics
    8 B per KV row (2 vs 8). Difference per token: 2 x (20 x 512 - 32 x 256) + 2 x (16 x 512 - 16 x 256)
    + 4 x (2 x 512 - 8 x 256) + 2 x 2 x (18 x 512 - 24 x 256) + 4 x (18 - 24) + 8 x (2 - 8)
    = 4096 + 8192 - 4096 + 12,288 - 24 - 48 = 20,408 B."""
    r = resolve(load_config(_cfg(expert_model_parallel_size=8)))
    local, glob = (r.kinds[r.layer_kinds[i]] for i in (0, 5))
    assert glob.var == (("dh", 512), ("g", 2)) and local.var == ()
    diff = layer_activations(r, glob).attention - layer_activations(r, local).attention
    per_token = (2 * (20 * 512 - 32 * 256) + 2 * (16 * 512 - 16 * 256) + 4 * (2 * 512 - 8 * 256)
                 + 4 * (18 * 512 - 24 * 256) + 4 * (18 - 24) + 8 * (2 - 8))
    assert per_token == 20_408
    assert diff == 4096 * per_token


@pytest.mark.parametrize("key, value, match", [
    ("hidden_size_per_layer_input", 256, "per-layer embeddings"),
    ("num_kv_shared_layers", 10, "sharing"),
    ("use_double_wide_mlp", True, "double-wide"),
    ("use_bidirectional_attention", "all", "causal"),
])
def test_gemma4_refuses_what_is_not_modelled(key, value, match):
    cfg = copy.deepcopy(hf_catalog.get(HF_ID).config())
    cfg["text_config"][key] = value
    with pytest.raises(UnsupportedError, match=match):
        from_hf_config(cfg)


def test_gemma4_bad_layer_types_and_audio_are_named():
    cfg = copy.deepcopy(hf_catalog.get(HF_ID).config())
    cfg["text_config"]["layer_types"] = ["sliding_attention"] * 3
    with pytest.raises(ConfigError, match="config.json:layer_types"):
        from_hf_config(cfg)
    cfg = copy.deepcopy(hf_catalog.get(HF_ID).config())
    cfg["audio_config"] = {"hidden_size": 1024}
    with pytest.raises(UnsupportedError, match="audio_config"):
        from_hf_config(cfg)


def test_global_attention_fields_are_checked():
    base = dict(num_layers=4, hidden_size=64, num_attention_heads=4, kv_channels=16, ffn_hidden_size=128,
                vocab_size=256)
    with pytest.raises(ConfigError, match="global_attention_freq"):
        load_config(make_config({**base, "global_attention_freq": [0, 1]}))
    with pytest.raises(ConfigError, match="global_kv_channels"):
        load_config(make_config({**base, "global_kv_channels": 32}))
    with pytest.raises(ConfigError, match="num_global_query_groups"):
        load_config(make_config({**base, "global_attention_freq": 2, "num_global_query_groups": 3}))
    # a list pattern: layers 1 and 3 global, their heads 32 wide instead of 16 (no q/k norms here): QKV
    # 64 x (4 + 2 x 4) x 16 and output 4 x 16 x 64 more weights each, 2 x (12,288 + 4096) = 32,768
    plain = count_parameters_of(make_config(base)).total
    glob = count_parameters_of(make_config({**base, "global_attention_freq": [0, 1, 0, 1],
                                            "global_kv_channels": 32})).total
    assert glob - plain == 2 * (64 * 12 * 16 + 4 * 16 * 64) == 32_768


def test_a_wrong_value_for_any_text_config_key_is_an_error_that_names_it():
    """Every key of Gemma 4's text_config replaced by values of the wrong kind: a model section or an
    EstimatorError; a ConfigError names config.json:<key> (or num_hidden_layers / layer_types, which the other
    keys are checked against)."""
    from estimator.config.errors import EstimatorError
    hf = hf_catalog.get(HF_ID).config()
    for key in hf["text_config"]:
        for wrong in ([1], ["silu"], {"a": 1}, "abc", True, False, -1, 0, 1.5, float("nan"), 10 ** 30, None):
            try:
                from_hf_config({**hf, "text_config": {**hf["text_config"], key: wrong}})
            except ConfigError as exc:
                fields = {p.field for p in exc.problems}
                assert fields <= {f"config.json:{key}", "config.json:num_hidden_layers", "config.json:layer_types"}, \
                    (key, wrong, exc)
            except EstimatorError:
                pass


def test_what_megatron_bridge_refuses_for_the_moe_block_is_refused_and_never_suggested():
    """gemma4_provider.py _validate_gemma4_moe_orchestration: no layernorm recompute, no CUDA graphs."""
    from estimator.plan.suggest import _modules
    cfg = _cfg(expert_model_parallel_size=8)
    for training, field in (({"recompute_granularity": "selective", "recompute_modules": ["layernorm"]},
                             "training.recompute_modules"),
                            ({"cuda_graph_impl": "transformer_engine"}, "training.cuda_graph_impl")):
        with pytest.raises(ConfigError) as exc:
            load_config({**cfg, "training": {**cfg["training"], **training}})
        assert field in {p.field for p in exc.value.problems}
    assert "layernorm" not in _modules(resolve(load_config(cfg)))


def test_the_moe_blocks_eager_norms_by_hand():
    """One micro-batch, s 4096, b 1, no SP (Tn = 4096), bf16, h 2816. Megatron-Bridge's _gemma4_rms_norm keeps two
    fp32 copies of its input (pow, product) and, with a weight, the fp32 normalised tensor: 12 Tn h + 8 Tn (two
    fp32 values per token); without a weight 8 Tn h + 8 Tn. Against the same MoE layer without Gemma 4's block:
    five weighted norms (routed input, shared input, routed output, shared output, sum) + the router's scaleless
    norm + the router's bf16 scaled input (2 Tn h) + the shared expert's own fc1 input (2 Tn h), less Transformer
    Engine's pre-MLP norm input and output (4 Tn h): 5 (12 Tn h + 8 Tn) + 8 Tn h + 8 Tn = 68 Tn h + 48 Tn =
    784,334,848 + 196,608 = 784,531,456 B."""
    m = from_hf_config(HF_ID)
    plain = {**m, "post_layernorm": False}
    r1, r0 = (resolve(load_config({**_cfg(expert_model_parallel_size=8), "model": x})) for x in (m, plain))
    diff = layer_activations(r1, r1.kinds[0]).mlp - layer_activations(r0, r0.kinds[0]).mlp
    assert diff == 68 * 4096 * 2816 + 48 * 4096 == 784_531_456


DENSE_ID = "nvidia/Gemma-4-31B-IT-NVFP4"


def test_gemma4_31b_dense_by_hand():
    """Gemma-4-31B (enable_moe_block false; Megatron-Bridge's Gemma4DenseProvider and get_gemma4_layer_spec): h 5376,
    60 layers (layer_types: five sliding-window layers then a global one, 50 + 10), 32 heads; sliding layers 16 KV
    heads of 256, global layers 4 KV heads of 512 with K = V; GeGLU MLP of 21,504; vocabulary 262,144 tied.

    Sliding attention: q 32 x 256 x 5376 = 44,040,192, k and v 16 x 256 x 5376 = 22,020,096 each, o 44,040,192,
    q/k norms 256 + 256: 132,121,088. Global attention (Megatron-Core's fused QKV keeps the value rows): q 32 x 512
    x 5376 = 88,080,384, k and v 4 x 512 x 5376 = 11,010,048 each, o 88,080,384, q/k norms 512 + 512: 198,181,888.
    Every layer: four norms 4 x 5376 = 21,504 and the MLP 3 x 5376 x 21,504 = 346,816,512: 346,838,016.
    Embedding 262,144 x 5376 = 1,409,286,144, final norm 5376.
    Total: 1,409,286,144 + 5376 + 50 x 132,121,088 + 10 x 198,181,888 + 60 x 346,838,016 = 30,807,445,760 (Hugging
    Face's checkpoint has no v_proj in the 10 global layers: 10 x 11,010,048 fewer, 30,697,345,280)."""
    sliding = 2 * 32 * 256 * 5376 + 2 * 16 * 256 * 5376 + 2 * 256
    glob = 2 * 32 * 512 * 5376 + 2 * 4 * 512 * 5376 + 2 * 512
    layer = 4 * 5376 + 3 * 5376 * 21504
    assert (sliding, glob, layer) == (132_121_088, 198_181_888, 346_838_016)
    total = 262_144 * 5376 + 5376 + 50 * sliding + 10 * glob + 60 * layer
    assert total == 30_807_445_760 and total - 10 * 4 * 512 * 5376 == 30_697_345_280
    m = from_hf_config(DENSE_ID)
    assert (m["global_attention_freq"], m["global_kv_channels"], m["num_global_query_groups"]) == (6, 512, 4)
    assert m["ffn_hidden_size"] == 21504 and m["post_layernorm"] and "num_experts" not in m
    tower = 569_548_080 + 1152 * 5376       # the vision tower and embedder: tests/memory/test_vision_gemma4.py
    assert catalog.describe(DENSE_ID)["parameters"] == {"total": total + tower, "active": total + tower, "mtp": 0,
                                                        "moe_layers": 0}


def test_gemma4_dense_with_expert_keys_is_an_error_that_names_them():
    cfg = copy.deepcopy(hf_catalog.get(HF_ID).config())
    cfg["text_config"]["enable_moe_block"] = False
    with pytest.raises(ConfigError, match=r"enable_moe_block.*num_experts = 128.*to be null"):
        from_hf_config(cfg)
