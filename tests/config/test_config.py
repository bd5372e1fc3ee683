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
    assert "num_query_groups (6) must be a multiple or a divisor of tensor_model_parallel_size (4)" in \
        p["model.num_query_groups"].message
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
