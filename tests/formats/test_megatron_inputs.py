"""Megatron-LM arguments as input (issue 31): the command line split in linear time exactly as ``shlex`` splits it,
the size limit, bounds checked before a default is derived, layer-pattern flags read by the shared parser."""

from __future__ import annotations

import random
import shlex
import time

import pytest

from estimator import ConfigError, parse_megatron_args
from estimator.config.errors import InputTypeError
from estimator.formats.megatron_args import shell_words

MODEL = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 128"


def test_shell_words_split_as_shlex_does():
    """Seeded random command lines over the characters that matter (quotes, backslashes, #, whitespace): the same
    words, or the same error, as shlex.split(text, comments=True)."""
    r = random.Random(31)
    alphabet = ["a", "-", "'", '"', "\\", " ", "\t", "\n", "\r", "#", "x y", "--f", '""', "''", "$", "é"]
    for _ in range(20_000):
        text = "".join(r.choice(alphabet) for _ in range(r.randint(0, 14)))
        try:
            want = ("ok", shlex.split(text, comments=True))
        except ValueError as exc:
            want = ("error", str(exc))
        try:
            got = ("ok", shell_words(text))
        except ValueError as exc:
            got = ("error", str(exc))
        assert got == want, repr(text)


def test_a_long_word_is_split_in_linear_time():
    """Regression: shlex adds a word's characters one at a time; a 1 MiB quoted word took 16 s."""
    t0 = time.perf_counter()
    assert shell_words("--x '" + "y" * 2 ** 20 + "'") == ["--x", "y" * 2 ** 20]
    assert time.perf_counter() - t0 < 1.0


def test_arguments_over_the_limit_are_refused_before_they_are_split():
    # 150,000 x 7 characters; 300,000 x ("--lr" + "1", each with a space: 7 characters)
    for args, what in (("--lr 1 " * 150_000, "the Megatron-LM argument text is 1,050,000 characters"),
                       (["--lr", "1"] * 300_000, "the Megatron-LM argument list is 2,100,000 characters")):
        with pytest.raises(ConfigError) as exc:
            parse_megatron_args(args)
        (p,) = exc.value.problems
        assert p.field == "megatron_args" and what in p.message and "the limit of 1 MiB" in p.message


def test_a_huge_hidden_size_is_refused_before_swiglus_width_is_derived():
    """Regression: --hidden-size of 401 digits with --swiglu and no --ffn-hidden-size gave "internal error
    (OverflowError: int too large to convert to float)": Megatron-LM's int(4h * 2/3 / 64) * 64 ran first."""
    with pytest.raises(ConfigError) as exc:
        parse_megatron_args(MODEL.replace("--hidden-size 64", "--hidden-size 1" + "0" * 400) + " --swiglu")
    (p,) = exc.value.problems
    assert (p.field, p.message) == ("--hidden-size", "--hidden-size must be <= 1,000,000, got <an integer of about "
                                    "401 digits>")
    # within bounds, the derived width is Megatron-LM's: int(4 * 4096 * 2 / 3 / 64) * 64 = 10,880
    cfg, _ = parse_megatron_args(MODEL.replace("--hidden-size 64", "--hidden-size 4096") + " --swiglu")
    assert cfg["model"]["ffn_hidden_size"] == 10_880


def test_layer_pattern_flags_use_the_shared_parser_and_its_limits():
    """Regression: a 3,000-term --moe-layer-freq or --linear-attention-freq raised RecursionError in ast.parse."""
    cfg, _ = parse_megatron_args(f"{MODEL} --num-experts 4 --moe-layer-freq " + "+".join(["[1]"] * 3000))
    assert cfg["model"]["moe_layer_freq"] == [1] * 3000        # read; the loader then checks it against num_layers
    deep = "(" * 20 + "[1]" + ")" * 20
    for flag in ("--moe-layer-freq", "--linear-attention-freq"):
        with pytest.raises(ConfigError) as exc:
            parse_megatron_args(f"{MODEL} --num-experts 4 --experimental-attention-variant gdn {flag} '{deep}'")
        (p,) = exc.value.problems
        assert (p.field, p.message) == (flag, "not a layer pattern: brackets and parentheses nested deeper than 16 "
                                        "levels")
    with pytest.raises(ConfigError, match="expected an integer or a list expression"):
        parse_megatron_args(f"{MODEL} --num-experts 4 --moe-layer-freq 0,1")     # not an int to Megatron-LM either


def test_read_file_must_be_a_function():
    with pytest.raises(InputTypeError, match=r"read_megatron_args\(\) takes a function"):
        parse_megatron_args(MODEL, read_file="cfg.yaml")
