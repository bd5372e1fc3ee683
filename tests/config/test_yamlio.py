"""The stdlib YAML reader agrees with PyYAML on the project's files and round-trips its own output."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from estimator.config import yamlio

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(ROOT.glob("presets/*.yaml")) + [ROOT / "validation" / "measured.yaml"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_reads_like_pyyaml(path):
    text = path.read_text()
    assert yamlio.load(text) == yaml.safe_load(text)


def test_round_trip():
    data = {"model": {"num_layers": 4, "moe_layer_freq": [0, 1, 1], "normalization": "RMSNorm", "x": None,
                      "eps": 1e-05, "flag": True, "name": "a: b", "empty": []},
            "list": [{"a": 1, "b": [1, 2]}, {"a": 2}]}
    text = yamlio.dump(data)
    assert yamlio.load(text) == data == yaml.safe_load(text)


def test_scalars_and_comments():
    text = "a: 1  # one\nb: 'x # not a comment'\nc: ~\nd: 1.5e+3\ne: \"q\\\"\"\nf: [1, 2, 3]\ng: {h: 1}\n"
    assert yamlio.load(text) == yaml.safe_load(text)


def test_exponent_floats_follow_yaml_1_2():
    """YAML 1.2 reads 1e-5 as a float (PyYAML, a YAML 1.1 reader, keeps it a string): configs mean the number."""
    assert yamlio.load("eps: 1e-5\n") == {"eps": 1e-05}


@pytest.mark.parametrize("text, fragment", [("a: &x 1\n", "anchors"), ("a:\n\tb: 1\n", "tabs"),
                                             ("a: 1\na: 2\n", "duplicate key"), ("a: [1, 2\n", "unterminated")])
def test_errors_name_the_line(text, fragment):
    with pytest.raises(yamlio.YamlError) as exc:
        yamlio.load(text)
    assert fragment in str(exc.value) and "line" in str(exc.value)


def test_hostile_text_is_a_yaml_error_in_linear_time():
    """Nesting past MAX_DEPTH and integers longer than Python converts are errors naming the line; flow
    collections 100,000 deep used to hang (each level re-split the whole text)."""
    from estimator.config.yamlio import MAX_DEPTH, YamlError, load, load_json
    ok = "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert load(ok)["a"] is not None
    for text in ("a: " + "[" * 100_000 + "]" * 100_000, "a:\n  b: {c: " + "{d: " * 40 + "}" * 41 + "\n",
                 "".join(" " * i + "- \n" for i in range(0, 80, 2)) + "  " * 40 + "- 1\n"):
        with pytest.raises(YamlError, match="nested deeper than 32 levels"):
            load(text)
    with pytest.raises(YamlError, match=r"line 2: the number '1111.*' has 5,000 digits"):
        load("a: 1\nb: " + "1" * 5000)
    with pytest.raises(YamlError, match="nested deeper"):
        load_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(YamlError, match="more than 4,300 digits"):
        load_json('{"a": ' + "1" * 5000 + "}")
    assert load_json('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\"[["}') == {"a": "[" * 40 + '"[['}


def test_error_messages_quote_bounded_values():
    from estimator.config.errors import clip, show
    assert show(10 ** 5000) == "<an integer of about 5,001 digits>"
    assert len(show("x" * 10 ** 6)) <= 80 and len(show(list(range(10 ** 5)))) <= 80
    deep = []
    for _ in range(2_000):          # (freeing 100,000 levels overflows the WebAssembly stack under Pyodide)
        deep = [deep]
    assert show(deep) == "[[[[...]]]]"
    assert clip("a\0b") == "a\\0b" and len(clip("y" * 10 ** 6)) == 160


def test_multi_line_strings_round_trip():
    """A file's text kept as a string (validation/megatron_ci.yaml carries --tp-comm-overlap-cfg files): line
    breaks, tabs and carriage returns are escaped in the double-quoted scalar, which both readers take back."""
    data = {"files": {"a/b.yaml": "qkv_fprop:\n  method: ring_exchange\n\tx\r\n"}, "q": 'say "\\n"'}
    text = yamlio.dump(data)
    assert len(text.splitlines()) == 3
    assert yamlio.load(text) == data == yaml.safe_load(text)


def test_long_strings_as_pyyaml_wraps_them():
    """PyYAML (which Megatron-Bridge writes config.yaml with) wraps a long flow scalar onto lines indented deeper
    than its key: plain, single-quoted (a # inside is text), double-quoted with an escaped line break, and a list
    item. Each folds back to the string written."""
    data = {"logger": {"name": "a very long experiment name with spaces " * 4, "tags": [], "extra": {}},
            "model": {"plain": "word " * 30 + "end", "dq": "tab\there " * 12, "hash": "a # b " * 20,
                      "items": ["long item with many words " * 5, "x"], "after": 1}}
    text = yaml.safe_dump(data)
    assert "\n    " in text                      # it did wrap
    assert yamlio.load(text) == data


def test_folded_plain_scalar_and_blank_line():
    """YAML 1.2 7.3: a line break between continuation lines folds to a space, an empty line to a newline."""
    assert yamlio.load("k: one\n  two\n\n  three\nnext: 1\n") == {"k": "one two\nthree", "next": 1}
