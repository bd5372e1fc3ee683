"""Loading and validation: every problem at once, each naming field, value and rule."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from estimator import Config, ConfigError, load_config
from estimator.config.errors import EstimatorError
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
    from estimator.config import yamlio
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
    from estimator.config import yamlio
    cases = yamlio.load((reference / "measured.yaml").read_text())["cases"]
    for case in cases:
        load_config(case["config"])


# --- hostile input (issue 15): bounds before arithmetic, depth, encodings, the interleaved schedule ---------

@pytest.mark.parametrize("section, name, value, limit", [
    ("model", "hidden_size", 10 ** 80, "1,000,000"),            # was OverflowError: int too large to convert to float
    ("model", "num_layers", 10 ** 30, "10,000"),                # was "cannot fit 'int' into an index-sized integer"
    ("model", "num_layers", 10 ** 8, "10,000"),                 # was a MemoryError
    ("training", "world_size", 10 ** 18, "10,000,000"),
    ("training", "seq_length", 10 ** 9, "100,000,000"),
    ("parallelism", "pipeline_model_parallel_size", 10 ** 6, "1,024"),
    ("model", "hidden_dropout", 1e308, "1"),
])
def test_values_past_the_bounds_name_field_value_and_limit(section, name, value, limit):
    cfg = make_config(dict(LLAMA), training={"world_size": 8})
    cfg[section][name] = value
    p = problems(cfg)[f"{section}.{name}"]
    assert p.message.startswith(f"must be <= {limit}, got ") and p.value == value


def test_bounds_come_from_the_schema():
    from estimator.config.schema import field_specs
    numeric = [s for s in field_specs() if s.type in ("int", "float")]
    assert all(s.max is not None for s in numeric), [s.path for s in numeric if s.max is None]


def test_an_integer_too_long_to_print_is_named_not_printed():
    """A 5,000-digit integer cannot even be converted to text by Python (sys.get_int_max_str_digits)."""
    p = problems(make_config({**LLAMA, "hidden_size": 10 ** 5000}, training={"world_size": 8}))["model.hidden_size"]
    assert "an integer of about 5,001 digits" in p.message
    for text in ('{"model": {"num_layers": ' + "1" * 5000 + "}}", "model:\n  num_layers: " + "1" * 5000 + "\n"):
        assert "too many" in problems(text)["config"].message


@pytest.mark.parametrize("text", ['{"model": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                  "model: " + "[" * 100_000 + "]" * 100_000 + "\n",
                                  "model: " + "{a: " * 100_000 + "}" * 100_000 + "\n",
                                  "".join(" " * i + f"k{i}:\n" for i in range(0, 200, 2))])
def test_deep_nesting_is_refused_without_recursion(text):
    """JSON or YAML nested 100,000 deep was a RecursionError (JSON) or a hang (YAML flow collections)."""
    assert "nested deeper than 32 levels" in problems(text)["config"].message


def test_a_byte_order_mark_is_ignored(tmp_path):
    """Editors on Windows write one; it was read as part of the first key ("model: unknown section")."""
    from estimator.config import yamlio
    cfg = make_config(dict(LLAMA), training={"world_size": 8})
    for name, text in (("c.yaml", yamlio.dump(cfg)), ("c.json", json.dumps(cfg))):
        (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + text.encode())
        assert load_config(tmp_path / name) == load_config(cfg)
        assert load_config("\ufeff" + text) == load_config(cfg)


def test_unreadable_paths_are_clear_errors(tmp_path):
    assert "not a valid file path" in problems("a\0b.yaml")["config"].message       # was "embedded null byte"
    (tmp_path / "latin1.yaml").write_bytes(b"model:\n  num_layers: 2 # \xe9\n")
    assert "is not UTF-8 text" in problems(tmp_path / "latin1.yaml")["config"].message


def test_fifty_thousand_unknown_keys_are_counted_not_each_matched():
    """Each unknown key was compared with every known name (37 s for 50,000 keys)."""
    with pytest.raises(ConfigError) as exc:
        load_config({"model": {f"k{i}": 1 for i in range(50_000)}})
    unknown = [p for p in exc.value.problems if p.field.startswith("model.k")]
    assert len(unknown) == 19 and any(p.message == "49,981 more unknown keys in 'model'" for p in exc.value.problems)


def test_non_mapping_configurations_are_refused():
    for data in (5, [1, 2], None, "[1, 2]\n", "5\n"):
        with pytest.raises(ConfigError):
            load_config(data)


def test_a_string_where_a_boolean_belongs_is_refused():
    p = problems(make_config(dict(LLAMA), training={"world_size": 8, "sequence_parallel": "four"}))
    assert p["training.sequence_parallel"].message == "must be true or false, got 'four'"


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


@pytest.mark.parametrize("preset, changes", [
    ("llama-3-8b", {"parallelism.tensor_model_parallel_size": 2, "training.recompute_granularity": "full",
                    "training.recompute_method": "uniform", "training.recompute_num_layers": 1}),
    ("deepseek-v3", {"parallelism.expert_model_parallel_size": 32, "training.world_size": 2048}),
    ("llama-3-8b", {"parallelism.tensor_model_parallel_size": 3}),              # heads do not divide
    ("llama-3-8b", {"training.micro_batch_size": "two"}),                          # not an integer
    ("llama-3-8b", {"training.offload_modules": ["core_attn"]}),                  # only with fine-grained offloading
    ("qwen3-8b", {"precision.use_precision_aware_optimizer": True, "training.optimizer_cpu_offload": True}),
])
def test_with_fields_is_config_from_dict_of_the_changed_configuration(preset, changes):
    """"Make it fit" reads only the fields a candidate changes (config.with_fields): the configuration, or the
    problems, must be those of reading the whole changed configuration."""
    from estimator.config.load import config_from_dict, with_fields
    from estimator.formats.presets import load_preset
    data = load_preset(preset).to_dict()
    changed = {sec: dict(v) for sec, v in data.items()}
    for path, value in changes.items():
        sec, name = path.split(".")
        changed.setdefault(sec, {})[name] = value
    try:
        whole = config_from_dict(changed)
    except ConfigError as exc:
        with pytest.raises(ConfigError) as got:
            with_fields(config_from_dict(data), changes)
        assert got.value.problems == exc.problems
    else:
        new = with_fields(config_from_dict(data), changes)
        assert new == whole and new.to_dict() == whole.to_dict()


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
