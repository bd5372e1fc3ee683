"""Issue 27: heterogeneous layers (Llama-3.3-Nemotron-Super-49B, DeciLM's block_configs) as Megatron-Core's
HeterogeneousTransformerConfig builds them (Megatron-LM @ d98e8a64 : megatron/core/transformer/heterogeneous/,
megatron/core/models/gpt/heterogeneous/heterogeneous_layer_specs.py).

Hand counts from the catalog's config.json (the published block_configs) and the DeciLM layer shapes; the
published figure is the model card's "49B" (the Hub's safetensors metadata: 49.9 B).
"""

from __future__ import annotations

import copy
import json

import pytest

from estimator import ConfigError, count_parameters_of, estimate, from_hf_config, load_config, parse_megatron_args
from estimator.formats import catalog, hf_catalog
from estimator.memory.activations import layer_activations
from estimator.model.resolve import resolve
from tests.conftest import make_config

HF_ID = "nvidia/Llama-3_3-Nemotron-Super-49B-v1"


def _cfg(model=None, **par):
    return {"model": model or from_hf_config(HF_ID), "parallelism": {"tensor_model_parallel_size": 8, **par},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 16,
                         "world_size": 8 * par.get("pipeline_model_parallel_size", 1), "sequence_parallel": True}}


def test_super_49b_by_hand():
    """h 8192, 64 heads of 128, 80 layers, vocabulary 128,256 untied. block_configs: 49 layers with attention
    (n_heads_in_group 8: 8 KV heads; input norm 8192 + QKV 8192 x (64 + 16) x 128 + output 64 x 128 x 8192 =
    151,003,136 each), 31 with none (no_op: no input norm either). MLP widths from ffn_mult, int(2 m 8192 / 3)
    rounded up to 256: 5.25 -> 28672 (49 layers), 1.3125 -> 7168 (10), 1.0 -> 5461 -> 5632 (8), 2.625 -> 14336
    (6), 0.5 -> 2730 -> 2816 (6), 3.28125 -> 17920 (1); sum of widths 1,642,496; each MLP 3 x 8192 x f + norm
    8192. Total: 49 x 151,003,136 + 3 x 8192 x 1,642,496 + 80 x 8192 + 2 x 128,256 x 8192 + 8192 =
    7,399,153,664 + 40,365,981,696 + 655,360 + 2,101,346,304 + 8192 = 49,867,145,216 (49.9 B; the card's "49B").
    Megatron pads the vocabulary to 129,024 at TP 8: + 2 x 768 x 8192 = 12,582,912 (the catalog compares the
    count without padding)."""
    widths = {28672: 49, 7168: 10, 5632: 8, 14336: 6, 2816: 6, 17920: 1}
    assert sum(widths.values()) == 80 and sum(f * n for f, n in widths.items()) == 1_642_496
    attn = 8192 + 8192 * 80 * 128 + 64 * 128 * 8192
    assert attn == 151_003_136
    total = 49 * attn + 3 * 8192 * 1_642_496 + 80 * 8192 + 2 * 128_256 * 8192 + 8192
    assert total == 49_867_145_216 and round(total / 1e9, 1) == 49.9
    c = count_parameters_of(_cfg())
    assert c.total - c.vocab_padding == total and c.vocab_padding == 2 * 768 * 8192
    assert c.layer_kinds["attention + MLP (ffn 28672)"] == 48 and c.layer_kinds["MLP (ffn 7168)"] == 10
    assert sum(n for k, n in c.layer_kinds.items() if k.startswith("attention")) == 49
    assert catalog.describe(HF_ID)["parameters"]["total"] == total


def test_the_blocks_are_written_in_megatron_cores_names_and_read_back_alike():
    m = from_hf_config(HF_ID)
    blocks = json.loads(m["heterogeneous_layers_config"])["block_configs"]
    assert blocks[0] == {"attention": {"num_query_groups": 8}, "mlp": {"ffn_hidden_size": 14336}}
    assert blocks[6] == {"attention": {"no_op": True}, "mlp": {"ffn_hidden_size": 14336}}
    # The published block_configs text itself (Hugging Face's names), as Megatron-LM takes it, counts the same.
    full = {**m, "heterogeneous_layers_config": json.dumps(hf_catalog.get(HF_ID).config())}
    assert count_parameters_of(_cfg(full)).total == count_parameters_of(_cfg(m)).total


def test_pipeline_stages_hold_different_layer_mixes():
    """PP 2: stage 0 holds layers 0-39 (37 with attention: all but 6, 7, 11) and the embedding, stage 1 layers
    40-79 (12 with attention: 40, 41, 52, 71-79) and the output layer. Weights on one GPU (bf16, TP 8; norms
    replicated): stage 1 = its 40 MLP norms and 12 attention input norms (52 x 8192) + 12 attention layers' QKV and
    output (12 x 150,994,944 / 8) + its MLPs 3 x 8192 x (sum of widths of layers 40-79) / 8 + the output layer
    129,024 x 8192 / 8 + final norm 8192."""
    cfg = _cfg(pipeline_model_parallel_size=2)
    blocks = hf_catalog.get(HF_ID).config()["block_configs"]

    def width(b):
        n = int(2 * b["ffn"]["ffn_mult"] * 8192 / 3)
        return n if n % 256 == 0 else n + 256 - n % 256

    att1 = sum(1 for b in blocks[40:] if not b["attention"]["no_op"])
    assert (sum(1 for b in blocks[:40] if not b["attention"]["no_op"]), att1) == (37, 12)
    f1 = sum(width(b) for b in blocks[40:])
    params1 = (40 + att1) * 8192 + att1 * 150_994_944 // 8 + 3 * 8192 * f1 // 8 + 129_024 * 8192 // 8 + 8192
    est = estimate(load_config(cfg))
    assert est.stages[1].weights_bytes == 2 * params1
    assert est.stages[0].weights_bytes > 2 * est.stages[1].weights_bytes


def test_no_op_attention_keeps_nothing_and_mlp_activations_follow_the_width():
    """s 4096, b 1, TP 8 with SP (T = 4096, Tn = 512), bf16. A no-op attention block has no attention activations.
    Two dense MLPs of widths 28672 and 7168 differ in fc1's output (2 x f / 8 elements per token, 2 B) and the
    activation's output (f / 8, 2 B): 2 x 4096 x 3 x (28672 - 7168) / 8 = 66,060,288 B."""
    r = resolve(load_config(_cfg()))
    kinds = {k.label: k for k in r.kinds}
    noop = layer_activations(r, kinds["MLP (ffn 7168)"])
    wide = layer_activations(r, kinds["attention + MLP (ffn 28672)"])
    assert noop.attention == 0
    assert wide.mlp - noop.mlp == 2 * 4096 * 3 * (28672 - 7168) // 8 == 66_060_288


@pytest.mark.parametrize("path, value, match", [
    (("attention", "n_heads_in_group"), 7, "must divide num_attention_heads"),
    (("attention", "no_op"), "yes", "must be true or false"),
    (("ffn", "ffn_mult"), "5.25", "positive number"),
    (("ffn", "ffn_mult"), float("inf"), "positive number"),
    (("attention", "sparsify"), [1], "must be null"),
    (("attention", "mystery"), 1, "does not read"),
])
def test_every_block_key_is_type_checked_naming_the_block(path, value, match):
    cfg = copy.deepcopy(hf_catalog.get(HF_ID).config())
    cfg["block_configs"][3][path[0]][path[1]] = value
    with pytest.raises(ConfigError, match=match) as exc:
        from_hf_config(cfg)
    assert exc.value.problems[0].field == "config.json:block_configs"
    assert "block_configs[3]" in str(exc.value)


def test_block_count_and_schema_field_errors_name_the_field():
    cfg = copy.deepcopy(hf_catalog.get(HF_ID).config())
    cfg["block_configs"] = cfg["block_configs"][:79]
    with pytest.raises(ConfigError, match="79 blocks; num_layers is 80"):
        from_hf_config(cfg)
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256)
    for text, match in (("not json", "not valid JSON"), ('{"block_configs": [{}]}', "1 blocks"),
                        ('{"block_configs": [{"attention": {"no_op": true}, "mlp": {"no_op": true}},'
                         ' {"attention": {"num_query_groups": 4, "no_op": true}, "mlp": {}}]}', "asserts")):
        with pytest.raises(ConfigError, match=match) as exc:
            load_config(make_config({**base, "heterogeneous_layers_config": text}))
        assert exc.value.problems[0].field == "model.heterogeneous_layers_config"


def test_linear_replacements_by_hand():
    """Two layers, h 64, 4 heads: layer 0 attention replaced by a linear (64 x 64 + norm 64), MLP of width 128
    (3 x 64 x 128 + norm 64); layer 1 attention (norm 64 + QKV 64 x 192 + output 64 x 64), MLP replaced by a
    linear (64 x 64 + norm 64). Embedding 256 x 64 tied, final norm 64. 4160 + 24,640 + 16,448 + 4160 + 16,384
    + 64 = 65,856."""
    text = json.dumps({"block_configs": [
        {"attention": {"replace_with_linear": True}, "mlp": {"ffn_hidden_size": 128}},
        {"attention": {}, "mlp": {"replace_with_linear": True}}]})
    model = dict(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
                 heterogeneous_layers_config=text)
    c = count_parameters_of(make_config(model))
    assert c.total == 4160 + 24_640 + 16_448 + 4160 + 16_384 + 64 == 65_856


def test_megatron_lm_flags_read_the_blocks():
    text = json.dumps(hf_catalog.get(HF_ID).config())
    flags = ["pretrain_gpt.py", "--num-layers", "80", "--hidden-size", "8192", "--num-attention-heads", "64",
             "--group-query-attention", "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm",
             "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--position-embedding-type", "rope",
             "--seq-length", "4096", "--max-position-embeddings", "131072", "--micro-batch-size", "1",
             "--vocab-size", "128256", "--ffn-hidden-size", "28672", "--tensor-model-parallel-size", "8", "--bf16"]
    cfg, _ = parse_megatron_args(flags + ["--heterogeneous-layers-config-encoded-json", text], world_size=8)
    assert cfg["model"]["heterogeneous_layers_config"] == text
    by_flag = count_parameters_of(cfg).total
    assert by_flag - count_parameters_of(cfg).vocab_padding == 49_867_145_216
    from estimator.formats.megatron_args import read_megatron_args
    imp = read_megatron_args(flags + ["--heterogeneous-layers-config-path", "cfg.json"], world_size=8,
                             read_file=lambda p: text if p == "cfg.json" else None)
    assert imp.config["model"]["heterogeneous_layers_config"] == text


def test_megatron_lm_export_needs_the_keys_pretrain_gpt_checks():
    """Megatron-LM's arguments.py (validate_model_config_args_from_heterogeneous_config) reads hidden_act,
    num_hidden_layers, rope_theta, rope_scaling, ... of the JSON: the importer's compact form cannot be exported,
    the published config.json text round-trips."""
    from estimator import UnsupportedError, to_megatron_args
    compact = load_config(_cfg())
    with pytest.raises(UnsupportedError, match="hidden_act, num_hidden_layers"):
        to_megatron_args(compact)
    text = json.dumps(hf_catalog.get(HF_ID).config())
    full = load_config(_cfg({**from_hf_config(HF_ID), "heterogeneous_layers_config": text}))
    back, _ = parse_megatron_args(to_megatron_args(full), world_size=8)
    assert back["model"]["heterogeneous_layers_config"] == text
    assert count_parameters_of(back).total == count_parameters_of(full).total


def test_a_linear_replacement_keeps_its_norms_input_and_output():
    """s 256, b 1, TP 1, bf16, h 64: TELayerNormColumnParallelLinear keeps the norm's input and its output (the
    linear's input), 256 x 64 elements of 2 B each (32,768 B), and one fp32 statistic per token (4 x 256):
    66,560 B, for the attention's replacement and the MLP's alike; the gathered output keeps nothing."""
    text = json.dumps({"block_configs": [
        {"attention": {"replace_with_linear": True}, "mlp": {"replace_with_linear": True}},
        {"attention": {}, "mlp": {}}]})
    model = dict(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
                 heterogeneous_layers_config=text)
    r = resolve(load_config(make_config(model, training={"seq_length": 256})))
    kind = r.kinds[r.layer_kinds[0]]
    assert (kind.mixer, kind.mlp) == ("linear", "linear")
    a = layer_activations(r, kind)
    assert a.attention == a.mlp == 2 * 256 * 64 * 2 + 4 * 256 == 66_560
