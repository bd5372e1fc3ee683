"""Loading and validation: every problem at once, each naming field, value and rule."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from estimator import Config, ConfigError, load_config
from estimator.errors import EstimatorError
from tests.conftest import make_config

LLAMA = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
             vocab_size=128256)


def problems(cfg) -> dict:
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, EstimatorError)
    out: dict = {}
    for p in exc.value.problems:   # one entry per field, its messages joined
        out[p.field] = SimpleNamespace(message=(out[p.field].message + " | " if p.field in out else "") + p.message,
                                       value=p.value)
    return out


def test_yaml_file_json_file_text_and_dict_load_the_same(tmp_path):
    cfg = make_config(LLAMA, {"tensor_model_parallel_size": 2}, {"world_size": 8})
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    from estimator import yamlio
    (tmp_path / "c.yaml").write_text(yamlio.dump(cfg))
    loaded = [load_config(cfg), load_config(tmp_path / "c.json"), load_config(str(tmp_path / "c.yaml")),
              load_config(yamlio.dump(cfg))]
    assert all(c == loaded[0] for c in loaded)
    assert isinstance(loaded[0], Config)


def test_to_dict_returns_what_the_user_wrote():
    cfg = {"model": dict(LLAMA), "training": {"world_size": 8, "seq_length": 4096}}
    c = load_config(cfg)
    assert c.to_dict() == cfg
    assert c.parallelism.expert_tensor_parallel_size is None      # derived later, not written back


def test_every_problem_is_reported_at_once():
    p = problems(make_config({**LLAMA, "num_query_groups": 6}, {"tensor_model_parallel_size": 4,
                             "pipeline_model_parallel_size": 3}, {"world_size": 16, "sequence_parallel": False}))
    assert "num_query_groups (6) must be divisible by tensor_model_parallel_size (4)" in p["model.num_query_groups"].message
    assert "world_size (16) must be divisible by tensor (4) x pipeline (3) x context (1)" in p["training.world_size"].message
    assert "num_layers (32) must be divisible by pipeline_model_parallel_size (3)" in p["model.num_layers"].message


def test_unknown_key_suggests_the_nearest_name_and_the_right_section():
    p = problems({"model": {**LLAMA, "hiden_size": 1}, "training": {"world_size": 1, "tensor_model_parallel_size": 2},
                  "precison": {}})
    assert "did you mean 'hidden_size'" in p["model.hiden_size"].message
    assert "belongs in the 'parallelism' section" in p["training.tensor_model_parallel_size"].message
    assert "did you mean 'precision'" in p["precison"].message


def test_types_and_ranges():
    p = problems(make_config({**LLAMA, "hidden_size": "4096", "num_layers": 0, "normalization": "BatchNorm"},
                             training={"world_size": 1, "use_distributed_optimizer": "yes"}))
    assert "must be an integer" in p["model.hidden_size"].message
    assert "must be positive" in p["model.num_layers"].message
    assert "must be one of RMSNorm, LayerNorm" in p["model.normalization"].message
    assert "must be true or false" in p["training.use_distributed_optimizer"].message


def test_required_fields():
    p = problems({"model": {"hidden_size": 8}, "training": {}})
    assert {"model.num_layers", "model.num_attention_heads", "model.vocab_size", "training.world_size"} <= set(p)


def test_megatron_rules():
    p = problems(make_config({**LLAMA, "num_experts": 6, "max_position_embeddings": 2048},
                             {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 4,
                              "context_parallel_size": 2},
                             {"world_size": 16, "seq_length": 4095, "recompute_method": "block"}))
    assert "num_experts (6) must be divisible by expert_model_parallel_size (4)" in \
        p["parallelism.expert_model_parallel_size"].message
    assert "must be <= max_position_embeddings" in p["training.seq_length"].message
    assert "sequence_parallel" in p["training.sequence_parallel"].message   # TP x EP needs SP
    assert "only with recompute_granularity: full" in p["training.recompute_method"].message


def test_sequence_parallel_needs_tp_but_context_parallel_does_not():
    """Seeds' error #2: CP works on its own; it is SP that needs TP > 1."""
    load_config(make_config(LLAMA, {"context_parallel_size": 2}, {"world_size": 2}))
    p = problems(make_config(LLAMA, training={"world_size": 1, "sequence_parallel": True}))
    assert "needs tensor_model_parallel_size > 1" in p["training.sequence_parallel"].message


def test_world_size_for_experts_folds_over_the_same_ranks():
    """Seeds' error #1: EP does not multiply the world size. 8 GPUs, TP 2, EP 4 (etp defaults to TP = 2):
    dense tp*dp = 2*4 = 8; experts etp*ep*edp = 2*4*1 = 8."""
    cfg = make_config({**LLAMA, "num_experts": 8}, {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 4},
                      {"world_size": 8, "sequence_parallel": True})
    c = load_config(cfg)
    from estimator.resolve import resolve
    r = resolve(c)
    assert (r.dp, r.etp, r.edp) == (4, 2, 1)


def test_moe_and_mla_fields_only_where_they_apply():
    p = problems(make_config({**LLAMA, "moe_router_topk": 2, "kv_lora_rank": 512}, training={"world_size": 1}))
    assert "only to MoE models" in p["model.moe_router_topk"].message
    assert "only with multi_latent_attention" in p["model.kv_lora_rank"].message


def test_uneven_pipeline_split():
    cfg = make_config({**LLAMA, "num_layers": 30}, {"pipeline_model_parallel_size": 4,
                      "num_layers_in_first_pipeline_stage": 6, "num_layers_in_last_pipeline_stage": 8},
                      {"world_size": 4})
    from estimator import estimate
    e = estimate(cfg)
    assert [sum(len(c) for c in s.layers) for s in e.stages] == [6, 8, 8, 8]
    cfg["parallelism"]["num_layers_in_last_pipeline_stage"] = 7
    p = problems(cfg)
    assert "must split evenly" in p["parallelism.num_layers_in_first_pipeline_stage"].message


def test_error_message_names_field_value_and_rule():
    with pytest.raises(ConfigError) as exc:
        load_config(make_config({**LLAMA, "num_attention_heads": 30, "hidden_size": 3840, "num_query_groups": 30},
                                {"tensor_model_parallel_size": 4}, {"world_size": 4}))
    assert "model.num_attention_heads: num_attention_heads (30) must be divisible by tensor_model_parallel_size (4)" \
        in str(exc.value)
    d = exc.value.to_dict()
    assert d["problems"][0]["value"] == 30


def test_missing_file_is_a_config_error(tmp_path):
    p = problems(tmp_path / "nope.yaml")
    assert "file not found" in p["config"].message


def test_measured_config_blocks_load_as_they_are(reference):
    """Every config: block of the reference measured runs loads unchanged (nulls included)."""
    from estimator import yamlio
    cases = yamlio.load((reference / "measured.yaml").read_text())["cases"]
    for case in cases:
        load_config(case["config"])
