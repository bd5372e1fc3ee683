"""What every surface reads before a configuration exists: layer-pattern texts, the input size limit, JSON
duplicates, hand-built Configs, and what a change of some fields implies for the others (issue 31).

Each test names the regression it holds: the value or the error it gave before.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from estimator import Config, ConfigError, estimate, load_config, validate
from estimator.config import yamlio
from estimator.config.errors import EstimatorError, InputTypeError
from estimator.config.fields import (MAX_PATTERN_CHARS, MAX_PATTERN_DEPTH, PatternError, field_problems,
                                     parse_layer_pattern)
from estimator.config.input_size import MAX_INPUT_BYTES, MAX_REQUEST_CHARS
from estimator.config.load import implied_changes, parse_text
from estimator.config.schema import MAX_LAYERS
from estimator.formats.presets import load_preset
from tests.conftest import ROOT, make_config

TINY_MOE = dict(num_layers=4, hidden_size=64, num_attention_heads=4, vocab_size=128, num_experts=4,
                moe_router_topk=2, moe_ffn_hidden_size=32)


# ---------------------------------------------------------------- layer patterns

@pytest.mark.parametrize("text, value", [
    ("([0]*3+[1]*58)", [0] * 3 + [1] * 58),           # Megatron-LM's own example (arguments.py moe_freq_type)
    ("([1]*3+[0]*2)*2", [1, 1, 1, 0, 0] * 2),         # idem: three MoE, two dense, twice
    ("[1]*27", [1] * 27),
    ("([0]*1+[1]*26)", [0] + [1] * 26),               # DeepSeek-V2-Lite: the first layer dense
    ("3*[1]", [1, 1, 1]),
    ("[0]*(2+1)", [0, 0, 0]),                         # integers add and multiply, as in Python
    ("[0, 1, 1]", [0, 1, 1]),
    ("0,1,1", [0, 1, 1]),                             # the CLI's and the form's shorthand
    (" 4 ", 4),
    ("-1", -1),                                       # an integer: the loader says it must be >= 1
])
def test_layer_pattern_values(text, value):
    assert parse_layer_pattern(text) == value


@pytest.mark.parametrize("text, message", [
    ('__import__("os").getcwd()', "expected an integer or a list expression"),
    ("[__import__]", "'_' is not allowed"),
    ("[2]*4", "every entry must be 0 or 1"),
    ("[0]*10**9", "unexpected '*'"),                  # no power operator
    ("[[1]]", "a list holds integers (0 or 1), not lists"),
    ("[1]+1", "+ joins two lists or adds two integers"),
    ("[1]*[1]", "two lists cannot be multiplied"),
    ("[1,,1]", "unexpected ','"),
    ("[1", "expected ']', got the end"),
    ("(4)", "expected an integer or a list expression"),
    ("[0]*10001", "the number '10001' is larger than 10,000 (the most layers)"),
    ("[0]*5000+[1]*5001", f"gives more than {MAX_LAYERS:,} entries"),
    ("(" * 17 + "[0]" + ")" * 17, f"nested deeper than {MAX_PATTERN_DEPTH} levels"),
    ("1" * 5000, "the number has 5,000 digits"),      # int() refuses 4,300 digits
    ("[0]+" * 12500 + "[0]", f"more than the {MAX_PATTERN_CHARS:,} a pattern may have"),
])
def test_layer_pattern_errors_say_what_is_allowed(text, message):
    with pytest.raises(PatternError) as exc:
        parse_layer_pattern(text)
    assert message in str(exc.value)


def test_a_long_sum_is_read_in_a_loop():
    """Regression: a 3,000-term [0]+[0]+... overflowed Python's parser (RecursionError during ast construction)."""
    assert parse_layer_pattern("+".join(["[0]"] * 3000)) == [0] * 3000
    deepest = MAX_PATTERN_DEPTH - 1                   # parentheses around the list's own brackets
    assert parse_layer_pattern("(" * deepest + "[1]" + ")" * deepest) == [1]


def test_the_loader_reads_a_pattern_text_like_the_list_it_stands_for():
    """Regression: the calculator's field and a YAML string refused ([0]*1+[1]*26), which the CLI accepted."""
    as_list = load_config(make_config({**TINY_MOE, "moe_layer_freq": [0, 1, 1, 1]}))
    as_text = load_config(make_config({**TINY_MOE, "moe_layer_freq": "([0]*1+[1]*3)"}))
    assert as_text.model == as_list.model and as_text.model.moe_layer_freq == (0, 1, 1, 1)
    assert as_text.to_dict()["model"]["moe_layer_freq"] == "([0]*1+[1]*3)"     # written as given
    with pytest.raises(ConfigError) as exc:
        load_config(make_config({**TINY_MOE, "moe_layer_freq": "(" * 20 + "[1]" + ")" * 20}))
    (p,) = exc.value.problems
    assert (p.field, p.message) == ("model.moe_layer_freq", "not a layer pattern: brackets and parentheses nested "
                                    "deeper than 16 levels")


# ---------------------------------------------------------------- size

def test_a_text_over_the_limit_is_refused_before_it_is_parsed():
    """Regression: a 48 MB configuration took 24 s and 0.6 GiB before its error; now it is refused by its length."""
    text = "model:\n" + "#" * (48 * 10 ** 6)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as exc:
        load_config(text)
    assert time.perf_counter() - t0 < 2.0
    (p,) = exc.value.problems
    assert p.field == "config" and "48,000,007 characters, more than the limit of 1 MiB (1,048,576 characters)" \
        in p.message


def test_the_limit_is_inclusive_and_the_same_for_files_texts_and_dicts(tmp_path):
    base = yamlio.dump(make_config(dict(TINY_MOE)))
    exact = base + "#" * (MAX_INPUT_BYTES - len(base) - 1) + "\n"      # a comment line pads it to the limit
    assert len(exact) == MAX_INPUT_BYTES and load_config(exact).model.num_layers == 4
    (tmp_path / "c.yaml").write_text(exact)
    assert load_config(tmp_path / "c.yaml").model.num_layers == 4
    (tmp_path / "big.yaml").write_text(exact + "#")
    for source, unit in ((exact + "#", "characters"), (tmp_path / "big.yaml", "bytes")):
        with pytest.raises(ConfigError) as exc:
            load_config(source)
        assert f"the limit of 1 MiB (1,048,576 {unit}) on any input" in exc.value.problems[0].message
    with pytest.raises(ConfigError) as exc:
        load_config({"model": {"notes": "x" * MAX_INPUT_BYTES}})
    assert exc.value.problems[0].message == ("the configuration, written as JSON, is more than the limit of 1 MiB "
                                             "(1,048,576 characters) on any input; a configuration is a few KB")
    assert MAX_REQUEST_CHARS == 8 * MAX_INPUT_BYTES


def test_a_dict_that_contains_itself_is_refused():
    loop: dict = {"model": {}}
    loop["model"]["again"] = loop
    with pytest.raises(ConfigError, match="nests deeper than 32 levels|more than the limit"):
        load_config(loop)


# ---------------------------------------------------------------- JSON duplicates

@pytest.mark.parametrize("text, key", [
    ('{"model": {"num_layers": 2, "num_layers": 4}}', "num_layers"),
    ('{"model": {"num_layers": 2}, "model": {"num_layers": 4}}', "model"),
    ('{"training": {"world_size": 1}, "precision": {"params_dtype": "bf16", "params_dtype": "fp32"}}',
     "params_dtype"),
])
def test_a_json_key_given_twice_is_refused_naming_it(text, key, tmp_path):
    """Regression: json.loads kept the last value, silently, where YAML refused the duplicate."""
    with pytest.raises(yamlio.DuplicateKeyError, match=f"duplicate key '{key}'"):
        yamlio.load_json(text)
    (tmp_path / "c.json").write_text(text)
    for source in (text, tmp_path / "c.json"):
        with pytest.raises(ConfigError) as exc:
            load_config(source)
        assert exc.value.problems[0].message == f"invalid JSON: duplicate key '{key}' (a key may appear once in an " \
                                                "object)"


def test_yaml_flow_mappings_refuse_duplicates_too():
    with pytest.raises(ConfigError, match="duplicate key 'a'"):
        parse_text("model: {a: 1, a: 2}\n")


# ---------------------------------------------------------------- hand-built Configs (the Python API)

def test_validate_takes_a_config_and_says_so_otherwise():
    """Regression: validate({...}) raised AttributeError: 'dict' object has no attribute 'model'."""
    for wrong in ({"model": {}}, None, "presets/tiny.yaml", 5):
        with pytest.raises(InputTypeError) as exc:
            validate(wrong)
        assert isinstance(exc.value, TypeError) and isinstance(exc.value, EstimatorError)
        assert str(exc.value).startswith("validate() takes a Config as cfg, got ") and "load_config" in str(exc.value)


def test_a_changed_config_is_checked_field_by_field_before_any_rule():
    """A Config changed with dataclasses.replace skips the loader: a 401-digit hidden size reached SwiGLU's derived
    width, int(4h * 2/3 / 64) * 64, as an OverflowError; a float, a string or a lower-case choice passed silently."""
    tiny = load_preset("tiny")
    assert validate(tiny) == [] and field_problems(tiny) == []
    cases = [(dict(hidden_size=10 ** 400, activation_func="swiglu", ffn_hidden_size=None),
              "must be <= 1,000,000, got <an integer of about 401 digits>"),
             (dict(hidden_size="256"), "must be an integer, got '256'"),
             (dict(hidden_size=256.0), "must be stored as 256, got 256.0"),
             (dict(normalization="rmsnorm"), "must be stored as 'RMSNorm', got 'rmsnorm'"),
             (dict(moe_layer_freq=[1, 1, 1, 1]), "must be stored as (1, 1, 1, 1), got [1, 1, 1, 1]")]
    for change, message in cases:
        cfg = dataclasses.replace(tiny, model=dataclasses.replace(tiny.model, **change))
        (p,) = validate(cfg)
        field = next(k for k in change if k in ("hidden_size", "normalization", "moe_layer_freq"))
        assert (p.field, message in p.message) == (f"model.{field}", True), p
        with pytest.raises(ConfigError):
            estimate(cfg)
    with pytest.raises(ConfigError, match="must be a ModelConfig, got dict"):
        load_config(dataclasses.replace(tiny, model={"num_layers": 4}))
    assert isinstance(load_config(tiny), Config)


# ---------------------------------------------------------------- implied changes (CLI flags, calculator form)

def _preset(name: str) -> dict:
    return json.loads(json.dumps(load_preset(name).to_dict()))


def test_recompute_none_drops_the_full_recompute_fields():
    """DeepSeek-V2-Lite's recipe recomputes full layers (uniform, 1): granularity none leaves the method and the
    layer count without meaning; Megatron-Core checks them only with a granularity."""
    cfg = _preset("deepseek-v2-lite")
    cfg["training"]["recompute_granularity"] = None
    notes = implied_changes(cfg, {"training.recompute_granularity"})
    assert notes == ["training.recompute_method dropped: it does not apply with recompute_granularity none",
                     "training.recompute_num_layers dropped: it does not apply with recompute_granularity none"]
    assert "recompute_method" not in cfg["training"] and load_config(cfg).training.recompute_granularity is None
    kept = _preset("deepseek-v2-lite")
    kept["training"]["recompute_granularity"] = None
    assert implied_changes(kept, {"training.recompute_granularity", "training.recompute_method"}) == [
        "training.recompute_num_layers dropped: it does not apply with recompute_granularity none"]
    assert kept["training"]["recompute_method"] == "uniform"      # given with it: the loader refuses it by name


def test_tp_1_turns_off_inherited_sequence_parallelism_only():
    """Megatron-LM @ d98e8a64 arguments.py: TP 1 disables sequence parallelism with a warning; Megatron-Core's
    ModelParallelConfig refuses the pair. Lowering TP under a preset is the first; asking for both the second."""
    cfg = _preset("qwen3-30b-a3b")
    cfg["parallelism"]["tensor_model_parallel_size"] = 1
    assert implied_changes(cfg, {"parallelism.tensor_model_parallel_size"}) == [
        "sequence parallelism turned off (training.sequence_parallel: false): it needs tensor_model_parallel_size "
        "> 1, now 1 (Megatron-LM's arguments.py does the same)"]
    assert cfg["training"]["sequence_parallel"] is False
    asked = _preset("qwen3-30b-a3b")
    asked["parallelism"]["tensor_model_parallel_size"] = 1
    assert implied_changes(asked, {"parallelism.tensor_model_parallel_size", "training.sequence_parallel"}) == []
    for garbage in ("four", -1, 1.5, float("nan"), 10 ** 30, "<b>on</b>", "yes", 1):
        junk = _preset("qwen3-30b-a3b")
        junk["parallelism"]["tensor_model_parallel_size"] = 1
        junk["training"]["sequence_parallel"] = garbage
        assert implied_changes(junk, {"parallelism.tensor_model_parallel_size"}) == []
        assert junk["training"]["sequence_parallel"] is garbage          # left for the loader to refuse
        with pytest.raises(ConfigError) as exc:
            load_config(junk)
        assert any(p.field == "training.sequence_parallel" and p.message.startswith("must be true or false, got")
                   for p in exc.value.problems)


# ---------------------------------------------------------------- documentation

def test_the_configuration_page_states_every_limit():
    page = ROOT / "docs" / "configuration.md"
    if not page.is_file():
        pytest.skip("docs/ is not beside this checkout")
    text = Path(page).read_text(encoding="utf-8")
    limits = text[text.index("## Limits"):]
    for stated in (f"{MAX_INPUT_BYTES:,}", "1 MiB", f"{MAX_REQUEST_CHARS:,}", "8 MiB", f"{yamlio.MAX_DEPTH} levels",
                   f"{MAX_PATTERN_CHARS:,} characters", f"nested {MAX_PATTERN_DEPTH} levels", f"{MAX_LAYERS:,} entries",
                   "given twice"):
        assert stated in limits, stated
