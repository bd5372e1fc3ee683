"""The same input, refused the same way by the three surfaces (issue 31): the command line (exit code 2, the message,
no traceback), the Python API (the documented exception and its problems) and the calculator's ``web.handle``
(``{"errors": [{field, value, message}]}``, never ``internal``). Where a surface imports a text (the calculator's
import panel), its error is the same problem behind ``import.<kind>``: ``"<field>: <message>"``.

Only the public surfaces are used, so that each test ran against the code before the fix and failed there for the
reason its docstring gives.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from estimator import ConfigError, EstimatorError, estimate, from_hf_config, load_config, parse_megatron_args
from estimator.cli.commands import main
from estimator.formats.hf_catalog import get
from estimator.formats.presets import load_preset
from estimator.web import handle
from tests.conftest import ROOT

MIB = 2 ** 20
DEEP = "(" * 40 + "[1]" + ")" * 40                     # nested 41 levels
SUM_3000 = "+".join(["[0]"] * 3000)                    # 3,000 terms
MEGATRON = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128"


# ---------------------------------------------------------------- the three surfaces

def cli(capsys, *argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python -m estimator ARGV`` run in-process; never a traceback."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:              # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    return code, out, err


def cli_refuses(capsys, field: str, message: str, *argv) -> None:
    code, _, err = cli(capsys, *argv)
    assert code == 2 and f"{field}: {message}" in err, err


def api_refuses(field: str, message: str, call) -> None:
    with pytest.raises(EstimatorError) as exc:
        call()
    problems = getattr(exc.value, "problems", ())
    assert any(p.field == field and message in p.message for p in problems), exc.value


def web(request: dict) -> dict:
    res = json.loads(handle(json.dumps(request)))
    assert all(e["field"] != "internal" for e in res.get("errors", [])), res
    return res


def web_refuses(field: str, message: str, request: dict, *, imported: str | None = None) -> None:
    errors = web(request).get("errors") or []
    if imported:                           # the import panel: the problem behind import.<kind>
        assert any(e["field"] == f"import.{imported}" and e["message"].startswith(f"{field}: ") and
                   message in e["message"] for e in errors), errors
    else:
        assert any(e["field"] == field and message in e["message"] for e in errors), errors


def compute(preset: str, values: dict) -> dict:
    return web({"op": "compute", "state": {"preset": preset, "values": values, "gpu": None}, "exports": False})


def import_(kind: str, text: str) -> dict:
    return {"op": "import", "kind": kind, "text": text, "state": {"preset": None, "values": {}}}


def preset_with(name: str, **fields) -> dict:
    """A preset as its file writes it, with ``section.field`` values set."""
    cfg = json.loads(json.dumps(load_preset(name).to_dict()))
    for path, value in fields.items():
        sec, field = path.split("__")
        cfg[sec][field] = value
    return cfg


# ---------------------------------------------------------------- 1. layer-pattern expressions

@pytest.mark.parametrize("text, same_as", [("([0]*1+[1]*26)", [0] + [1] * 26), ("[1]*27", 1)])
def test_a_pattern_expression_is_read_alike_everywhere(capsys, text, same_as):
    """Regression: the calculator refused --moe-layer-freq's documented expressions. DeepSeek-V2-Lite's first layer
    is dense: ([0]*1+[1]*26) is the preset's own list, [1]*27 every layer MoE (moe_layer_freq 1)."""
    want = estimate(preset_with("deepseek-v2-lite", model__moe_layer_freq=same_as)).to_dict()["stages"]
    code, out, _ = cli(capsys, "estimate", "deepseek-v2-lite", "--moe-layer-freq", text, "--json")
    assert code == 0 and json.loads(out)["stages"] == want
    assert estimate(preset_with("deepseek-v2-lite", model__moe_layer_freq=text)).to_dict()["stages"] == want
    assert compute("deepseek-v2-lite", {"model.moe_layer_freq": text})["estimate"]["stages"] == want


def test_a_3000_term_pattern_is_refused_alike(capsys):
    """Regression: a RecursionError traceback on the CLI (in argparse's converter, before main's guard) and an
    internal error elsewhere; now the pattern is read (3,000 entries) and refused for its length."""
    field, message = "model.moe_layer_freq", "a pattern list must have num_layers (27) entries, got 3000"
    cli_refuses(capsys, field, message, "estimate", "deepseek-v2-lite", "--moe-layer-freq", SUM_3000)
    api_refuses(field, message, lambda: load_config(preset_with("deepseek-v2-lite", model__moe_layer_freq=SUM_3000)))
    web_refuses(field, message, {"op": "compute", "state": {"preset": "deepseek-v2-lite",
                                                             "values": {field: SUM_3000}}})


@pytest.mark.parametrize("field", ["model.moe_layer_freq", "model.linear_attention_freq"])
def test_a_pattern_nested_too_deep_names_the_limit_alike(capsys, field):
    message = "not a layer pattern: brackets and parentheses nested deeper than 16 levels"
    flag = "--" + field.split(".")[1].replace("_", "-")
    cli_refuses(capsys, field, message, "estimate", "deepseek-v2-lite", flag, DEEP)
    api_refuses(field, message, lambda: load_config(preset_with("deepseek-v2-lite",
                                                                **{field.replace(".", "__"): DEEP})))
    web_refuses(field, message, {"op": "compute", "state": {"preset": "deepseek-v2-lite", "values": {field: DEEP}}})


@pytest.mark.parametrize("flag", ["--moe-layer-freq", "--linear-attention-freq"])
def test_megatron_pattern_flags_are_refused_alike(capsys, flag):
    args = f"{MEGATRON} --num-experts 4 --experimental-attention-variant gdn {flag} '{DEEP}'"
    message = "not a layer pattern: brackets and parentheses nested deeper than 16 levels"
    cli_refuses(capsys, flag, message, "estimate", "--megatron-args", args, "--num-gpus", "1")
    api_refuses(flag, message, lambda: parse_megatron_args(args))
    web_refuses(flag, message, import_("megatron", args), imported="megatron")


@pytest.mark.subprocess
@pytest.mark.parametrize("flag", ["--moe-layer-freq", "--linear-attention-freq"])
def test_the_real_entry_point_has_no_traceback_for_a_long_pattern(flag):
    p = subprocess.run([sys.executable, "-m", "estimator", "estimate", "deepseek-v2-lite", flag, SUM_3000],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "model." + flag[2:].replace("-", "_") in p.stderr


# ---------------------------------------------------------------- 2. config.json nesting

def test_a_deeply_nested_config_json_is_refused_alike(capsys, tmp_path):
    """Regression: the calculator read an imported config.json with json.loads: 60,000 nested objects gave an
    internal RecursionError."""
    text = '{"a": ' * 60_000 + "1" + "}" * 60_000
    (tmp_path / "config.json").write_text(text)
    message = "collections nested deeper than 32 levels"
    code, _, err = cli(capsys, "from-hf", tmp_path / "config.json", "--num-gpus", "1")
    assert code == 2 and message in err
    with pytest.raises(ConfigError, match=message):
        from_hf_config(tmp_path / "config.json")
    errors = web(import_("hf", text))["errors"]
    assert errors[0]["field"] == "import.hf" and message in errors[0]["message"]


# ---------------------------------------------------------------- 3. input size

def test_an_oversized_configuration_is_refused_alike(capsys, tmp_path):
    """Regression: no limit (a 75 MB configuration took 2.4 GiB and 36 s before its error)."""
    text = "model:\n  num_layers: 2\n" + "#" * MIB + "\n"
    (tmp_path / "big.yaml").write_text(text)
    rule = "the limit of 1 MiB (1,048,576"
    code, _, err = cli(capsys, "estimate", tmp_path / "big.yaml")
    assert code == 2 and "config: " in err and rule in err
    api_refuses("config", rule, lambda: load_config(text))
    web_refuses("config", rule, import_("yaml", text), imported="yaml")
    # a dict: the Python API's configuration, the calculator's form values
    api_refuses("config", "written as JSON, is more than " + rule,
                lambda: load_config(preset_with("tiny", model__hybrid_layer_pattern="M" * MIB)))
    web_refuses("config", "written as JSON, is more than " + rule,
                {"op": "compute", "state": {"preset": "tiny", "values": {"model.hybrid_layer_pattern": "M" * MIB}}})


def test_an_oversized_config_json_and_megatron_arguments_are_refused_alike(capsys, tmp_path):
    hf = get("Qwen/Qwen3-8B").config()
    text = json.dumps({**hf, "_name_or_path": "x" * MIB})
    (tmp_path / "config.json").write_text(text)
    rule = "the limit of 1 MiB (1,048,576"
    code, _, err = cli(capsys, "from-hf", tmp_path / "config.json", "--num-gpus", "1")
    assert code == 2 and "hf: " in err and rule in err
    api_refuses("hf", rule, lambda: from_hf_config(tmp_path / "config.json"))
    web_refuses("import.hf", rule, import_("hf", text))
    args = MEGATRON + " --lr 1" * (MIB // 6)
    (tmp_path / "launch.sh").write_text(args)
    code, _, err = cli(capsys, "estimate", "--megatron-args-file", tmp_path / "launch.sh", "--num-gpus", "1")
    assert code == 2 and rule in err
    code, _, err = cli(capsys, "estimate", "--megatron-args", args, "--num-gpus", "1")
    assert code == 2 and "megatron_args: " in err and rule in err
    api_refuses("megatron_args", rule, lambda: parse_megatron_args(args))
    web_refuses("megatron_args", rule, import_("megatron", args), imported="megatron")


def test_an_oversized_request_is_refused_before_it_is_parsed():
    res = json.loads(handle('{"op": "compute", "pad": "' + "x" * (8 * MIB) + '"}'))
    assert res["errors"][0]["field"] == "request" and "the limit of 8 MiB (8,388,608 characters)" in \
        res["errors"][0]["message"]


# ---------------------------------------------------------------- 4. duplicate keys

def test_a_json_key_given_twice_is_refused_alike(capsys, tmp_path):
    """Regression: the last value was taken, on all three surfaces."""
    text = json.dumps(preset_with("tiny"))[:-1] + ', "model": {"num_layers": 8}}'
    (tmp_path / "c.json").write_text(text)
    message = "invalid JSON: duplicate key 'model' (a key may appear once in an object)"
    cli_refuses(capsys, "config", message, "estimate", tmp_path / "c.json")
    api_refuses("config", message, lambda: load_config(text))
    web_refuses("config", message, import_("yaml", text), imported="yaml")
    hf = json.dumps(get("Qwen/Qwen3-8B").config())[:-1] + ', "hidden_size": 8}'
    (tmp_path / "config.json").write_text(hf)
    message = "duplicate key 'hidden_size' (a key may appear once in an object)"
    code, _, err = cli(capsys, "from-hf", tmp_path / "config.json", "--num-gpus", "1")
    assert code == 2 and message in err
    api_refuses("hf", message, lambda: from_hf_config(tmp_path / "config.json"))
    web_refuses("import.hf", message, import_("hf", hf))


# ---------------------------------------------------------------- 5. bounds before derived values

def test_a_huge_hidden_size_is_refused_alike(capsys):
    """Regression: "internal error (OverflowError ...)": SwiGLU's width was derived before the bound check."""
    args = MEGATRON.replace("--hidden-size 64", "--hidden-size 1" + "0" * 400) + " --swiglu"
    field, message = "--hidden-size", "--hidden-size must be <= 1,000,000, got <an integer of about 401 digits>"
    cli_refuses(capsys, field, message, "estimate", "--megatron-args", args, "--num-gpus", "1")
    api_refuses(field, message, lambda: parse_megatron_args(args))
    web_refuses(field, message, import_("megatron", args), imported="megatron")


# ---------------------------------------------------------------- 7. Hugging Face keys of the newer families

def _gemma() -> dict:
    return get("google/gemma-2-2b-it").config()


def _nemotron() -> dict:
    return get("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").config()


@pytest.mark.parametrize("hf, key, message", [
    ({**_gemma(), "hidden_activation": ["gelu_pytorch_tanh"]}, "hidden_activation",
     "must be a name (a string), got ['gelu_pytorch_tanh']"),
    ({**_nemotron(), "mlp_hidden_act": ["relu2"]}, "mlp_hidden_act", "must be a name (a string), got ['relu2']"),
    ({**_nemotron(), "layer_norm_epsilon": "abc"}, "layer_norm_epsilon", "must be a finite number, got 'abc'"),
    ({**_nemotron(), "layer_norm_epsilon": True}, "layer_norm_epsilon", "must be a finite number, got True"),
    ({**get("deepseek-ai/DeepSeek-V2-Lite").config(), "n_routed_experts": 0}, "n_routed_experts",
     "must be >= 1 (null or absent for a model without routed experts), got 0"),
], ids=["gemma-hidden_activation", "nemotron-mlp_hidden_act", "nemotron-eps-text", "nemotron-eps-true",
        "deepseek-no-experts"])
def test_newer_hf_families_are_refused_alike(capsys, tmp_path, hf, key, message):
    """Regressions: internal TypeError (lists), a raw float() message, true read as 1.0, 0 experts read as dense."""
    (tmp_path / "config.json").write_text(json.dumps(hf))
    field = f"config.json:{key}"
    cli_refuses(capsys, field, message, "from-hf", tmp_path / "config.json", "--num-gpus", "8")
    api_refuses(field, message, lambda: from_hf_config(hf))
    web_refuses(field, message, import_("hf", json.dumps(hf)), imported="hf")


# ---------------------------------------------------------------- 8. sequence parallelism at TP 1

@pytest.mark.parametrize("value, shown", [("four", "'four'"), (-1, "-1"), (1.5, "1.5"), (1e30, "1e+30"),
                                          ("<b>on</b>", "'<b>on</b>'"), ("yes", "'yes'"), (1, "1")])
def test_sequence_parallel_takes_true_or_false_alike(capsys, tmp_path, value, shown):
    """Regression: with TP 1 the CLI replaced any truthy sequence_parallel by false before validation."""
    cfg = preset_with("tiny", training__sequence_parallel=value)
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    field, message = "training.sequence_parallel", f"must be true or false, got {shown}"
    cli_refuses(capsys, field, message, "estimate", tmp_path / "c.json", "--tp", "1")
    api_refuses(field, message, lambda: load_config(cfg))
    web_refuses(field, message, {"op": "compute", "state": {"preset": "tiny", "values": {    # typed text or JSON
        "parallelism.tensor_model_parallel_size": "1", field: value}}})


def test_sequence_parallelism_asked_for_with_tp_1_is_refused_alike(capsys):
    field, message = "training.sequence_parallel", "needs tensor_model_parallel_size > 1"
    cli_refuses(capsys, field, message, "estimate", "qwen3-30b-a3b", "--tp", "1", "--sequence-parallel",
                "--num-gpus", "8", "--ep", "4")
    api_refuses(field, message, lambda: load_config(preset_with(
        "qwen3-30b-a3b", parallelism__tensor_model_parallel_size=1, training__world_size=8,
        parallelism__expert_model_parallel_size=4)))
    web_refuses(field, message, {"op": "compute", "state": {"preset": "qwen3-30b-a3b", "values": {
        "parallelism.tensor_model_parallel_size": "1", "training.sequence_parallel": "true",
        "training.world_size": "8", "parallelism.expert_model_parallel_size": "4"}}})


def test_lowering_tp_to_1_turns_off_the_presets_sequence_parallelism_alike(capsys):
    """Regression: the CLI turned it off with a note, the calculator refused. Both now do what Megatron-LM's
    arguments.py does when TP is 1 (NVIDIA/Megatron-LM @ d98e8a64), with the same note."""
    code, out, err = cli(capsys, "estimate", "qwen3-30b-a3b", "--tp", "1", "--num-gpus", "8", "--ep", "4", "--json")
    notes = [line[len("note: "):] for line in err.splitlines() if line.startswith("note: ")]
    res = compute("qwen3-30b-a3b", {"parallelism.tensor_model_parallel_size": "1", "training.world_size": "8",
                                    "parallelism.expert_model_parallel_size": "4"})
    assert code == 0 and "estimate" in res
    assert [n for n in notes if "sequence parallel" in n] == res["implied"] == [
        "sequence parallelism turned off (training.sequence_parallel: false): it needs tensor_model_parallel_size "
        "> 1, now 1 (Megatron-LM's arguments.py does the same)"]
    assert res["estimate"]["stages"] == json.loads(out)["stages"]
    assert json.loads(out)["config"]["training"]["sequence_parallel"] is False


# ---------------------------------------------------------------- 9. recompute granularity none

def test_recompute_none_on_a_full_recompute_preset_alike(capsys):
    """Regression: the CLI dropped recompute_method and recompute_num_layers with a note; the calculator's full form
    refused, on fields the user had not touched."""
    code, out, err = cli(capsys, "estimate", "deepseek-v2-lite", "--recompute", "none", "--json")
    notes = [line[len("note: "):] for line in err.splitlines() if line.startswith("note: ")]
    res = compute("deepseek-v2-lite", {"training.recompute_granularity": "null"})    # the form's "null (none)"
    assert code == 0 and "errors" not in res
    assert notes == res["implied"] == [
        "training.recompute_method dropped: it does not apply with recompute_granularity none",
        "training.recompute_num_layers dropped: it does not apply with recompute_granularity none"]
    # the API's configuration: the preset with its three recompute fields left out, written by hand
    cfg = preset_with("deepseek-v2-lite")
    for name in ("recompute_granularity", "recompute_method", "recompute_num_layers"):
        del cfg["training"][name]
    assert res["estimate"]["stages"] == json.loads(out)["stages"] == estimate(cfg).to_dict()["stages"]
