"""Megatron-Core's cross-field rules (estimator/config/rules/check.py) and the valid configurations the estimator does
not model (estimator/config/rules/unsupported.py), through the loader: every problem names field, value and rule.
Moved from tests/config/test_config.py when the rules became a subpackage."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from estimator import ConfigError, load_config
from tests.conftest import make_config

LLAMA = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
             vocab_size=128256)


def problems(cfg) -> dict:
    """The problems of a configuration the loader refuses, one entry per field, its messages joined."""
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    out: dict = {}
    for p in exc.value.problems:
        out[p.field] = SimpleNamespace(message=(out[p.field].message + " | " if p.field in out else "") + p.message,
                                       value=p.value)
    return out


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
    from estimator.model.resolve import resolve
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


INTERLEAVED = make_config({**LLAMA, "num_layers": 8}, {"pipeline_model_parallel_size": 2,
                          "virtual_pipeline_model_parallel_size": 2}, {"world_size": 8, "micro_batch_size": 4})


@pytest.mark.parametrize("gbs, ok", [(16, False), (32, True), (48, False), (64, True)])
def test_interleaved_schedule_needs_a_multiple_of_pp_micro_batches(gbs, ok):
    """Megatron-Core's interleaved schedule runs micro-batches in groups of PP per chunk and refuses a last
    group that is not full. World 8, PP 2 -> DP 4; micro-batch 4: m = gbs / 16, i.e. 1, 2, 3, 4 for the
    global batches above: 1 and 3 are not multiples of PP 2 (1 < PP is the case that was under-counted)."""
    cfg = json.loads(json.dumps(INTERLEAVED))
    cfg["training"]["global_batch_size"] = gbs
    if ok:
        assert load_config(cfg).training.global_batch_size == gbs
    else:
        p = problems(cfg)["training.global_batch_size"]
        assert f"= {gbs // 16} micro-batches per step" in p.message and "multiple of pipeline_model_parallel_size (2)" in p.message
        cfg["parallelism"]["virtual_pipeline_model_parallel_size"] = None      # plain 1F1B takes any number
        load_config(cfg)


def test_interleaved_micro_batch_override_is_checked_too():
    from estimator import estimate
    cfg = json.loads(json.dumps(INTERLEAVED))
    with pytest.raises(ConfigError, match="multiple of pipeline_model_parallel_size"):
        estimate(cfg, num_microbatches=3)
    assert estimate(cfg, num_microbatches=4).parallel["num_microbatches"] == 4


def test_fp8_over_fp32_weights_is_refused_as_not_modelled_not_called_invalid():
    """Megatron-LM runs --fp8-format without --bf16 (no rule against it in arguments.py; its CI case
    moe/deepseek_proxy_fsdp_ep2_fsdp2 does, with --fp8-param-gather and Megatron-FSDP). The estimator does not
    model it, and says so: an UnsupportedError that says Megatron-LM runs it, never a ConfigError that would
    call a configuration Megatron runs invalid. The same configuration in bf16 is modelled."""
    from estimator import UnsupportedError, estimate
    from estimator.config.rules import not_modelled
    cfg = make_config(LLAMA, {}, {}, {"params_dtype": "fp32", "fp8": True})
    with pytest.raises(UnsupportedError, match="Megatron-LM runs FP8 compute over fp32 weights.*does not model") as e:
        load_config(cfg)
    assert not isinstance(e.value, ConfigError)
    for precision in ({"fp8_param_gather": True}, {"fp8_param_gather": False}):
        with pytest.raises(UnsupportedError):
            estimate(make_config(LLAMA, {}, {"use_distributed_optimizer": True},
                                 {"params_dtype": "fp32", "fp8": True, **precision}))
    ok = load_config(make_config(LLAMA, {}, {}, {"params_dtype": "bf16", "fp8": True}))
    assert not_modelled(ok) == []


def test_fp8_over_fp32_weights_from_megatron_flags_is_refused():
    """The CI run's precision flags (--fp8-format e4m3 --fp8-recipe tensorwise --fp8-param-gather, no --bf16)
    through the importer: refused, with the reason."""
    from estimator import UnsupportedError, estimate
    from estimator.formats.megatron_args import parse_megatron_args
    cfg, _ = parse_megatron_args("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
                                 "--max-position-embeddings 1024 --vocab-size 1024 --use-distributed-optimizer "
                                 "--fp8-format e4m3 --fp8-recipe tensorwise --fp8-param-gather", world_size=1)
    assert cfg["precision"]["params_dtype"] == "fp32" and cfg["precision"]["fp8"]
    with pytest.raises(UnsupportedError, match="does not model"):
        estimate(cfg)


TE_FUSED = {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}


@pytest.mark.parametrize("version", ["2", "2.x", "v2.11", "2.11 or 2.12", "0.12", "", "2.1234"])
def test_transformer_engine_version_must_be_a_release_number(version):
    """tever29: precision.transformer_engine_version is "MAJOR.MINOR" (an optional .PATCH), from 1.0; the message
    names the field, the value and the form."""
    p = problems(make_config(LLAMA, precision={"transformer_engine_version": version}))
    field = p["precision.transformer_engine_version"]
    assert field.value == version and '"MAJOR.MINOR" from 1.0' in field.message


def test_transformer_engine_version_written_as_a_number_asks_for_quotes():
    """YAML reads an unquoted 2.20 as the number 2.2: refused, saying to quote it."""
    p = problems(make_config(LLAMA, precision={"transformer_engine_version": 2.2}))
    assert "in quotes" in p["precision.transformer_engine_version"].message


def test_transformer_engine_fused_cross_entropy_needs_2_2_and_2_7_under_full_graphs():
    """Megatron-LM @ d98e8a64 language_module.py: TE's parallel_cross_entropy (TE 2.2, commit 8ca2caf8a) or a
    RuntimeError; with cuda_graph_impl full_iteration TE 2.7 or an AssertionError. Without the te loss any release
    from 1.0 is taken."""
    assert "older than 2.2" in problems(make_config(LLAMA, training=TE_FUSED, precision={
        "transformer_engine_version": "2.1"}))["precision.transformer_engine_version"].message
    load_config(make_config(LLAMA, precision={"transformer_engine_version": "1.13"}))
    load_config(make_config(LLAMA, training=TE_FUSED, precision={"transformer_engine_version": "2.2"}))
    full = {**TE_FUSED, "cuda_graph_impl": "full_iteration"}
    cfg = make_config(LLAMA, training=full, precision={"transformer_engine_version": "2.6"})
    assert "older than 2.7" in problems(cfg)["precision.transformer_engine_version"].message


@pytest.mark.parametrize("text, want", [("2.11", (2, 11)), ("2.11.0", (2, 11)), ("2.11.0+c188b533", (2, 11)),
                                        ("2.20.0.dev0", (2, 20)), (" 2.18 ", (2, 18)), ("2.1", (2, 1))])
def test_transformer_engine_version_reads_what_the_package_prints(text, want):
    """transformer_engine.__version__ as the SimuMax runs recorded it (2.11.0+c188b533) and as the pinned
    d0067d0 reports it (build_tools/VERSION.txt 2.20.0.dev0) read as MAJOR.MINOR."""
    from estimator.config.derived import te_version
    assert te_version(text) == want
