"""The stdlib YAML reader agrees with PyYAML on the project's files and round-trips its own output."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from estimator import yamlio

ROOT = Path(__file__).resolve().parent.parent
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
