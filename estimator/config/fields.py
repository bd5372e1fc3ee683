"""One field's value against its spec: the type, then the bounds, before any arithmetic; and the layer-pattern text.

:func:`coerce` is the loader's check of each value it reads (:mod:`estimator.config.load`); :func:`field_problems`
holds a :class:`~estimator.config.schema.Config` built by hand (or changed with ``dataclasses.replace``) to the
same checks, so that :func:`~estimator.config.rules.validate` and the estimate never meet a string, a float or a
10**400 where the schema says integer.

Layer-pattern values (``moe_layer_freq``, ``linear_attention_freq``) are an integer k (every k-th layer), a list of
0/1 (one entry per layer) or Megatron-LM's list expression, which its ``moe_freq_type`` evaluates with Python's
``eval`` (NVIDIA/Megatron-LM @ d98e8a64 : megatron/training/arguments.py ``moe_freq_type``, ``_eval_pattern``):
``([0]*3+[1]*58)``, ``([1]*3+[0]*2)*2``. :func:`parse_layer_pattern` reads the part of that grammar patterns use,
without ``eval``: integers, list literals, ``+`` (lists joined, or integers added), ``*`` (a list repeated, or
integers multiplied) and parentheses. The loader (YAML/JSON strings, through :func:`coerce`), the CLI's
``--moe-layer-freq`` / ``--linear-attention-freq``, the calculator's field and the Megatron-LM argument reader all
call it, so they accept and refuse the same texts. It never recurses deeper than the text nests, and refuses before
building anything large: a text longer than :data:`MAX_PATTERN_CHARS`, brackets or parentheses nested deeper than
:data:`MAX_PATTERN_DEPTH`, a list or a number beyond :data:`~estimator.config.schema.MAX_LAYERS` (one entry per
layer). A 3,000-term ``[0]+[0]+...`` (the sum Python's own parser overflows its stack on) is read in a loop.
"""

from __future__ import annotations

import math
import re

from .errors import Problem, show
from .schema import MAX_LAYERS, SECTIONS, Config, FieldSpec, section_specs

__all__ = ["MAX_PATTERN_CHARS", "MAX_PATTERN_DEPTH", "PatternError", "coerce", "field_problems", "parse_layer_pattern",
           "type_name"]

#: Longest pattern text read: a literal list of MAX_LAYERS (10,000) entries written "0, 1, ..." takes 30,000
#: characters; an expression is far shorter.
MAX_PATTERN_CHARS = 50_000
#: Deepest nesting of brackets and parentheses (Megatron-LM's own examples nest two levels).
MAX_PATTERN_DEPTH = 16

_TOKEN = re.compile(r"\s*(?:([0-9]+)|(.))", re.S)
_EXAMPLE = "e.g. 2, [0,1,1,1] or ([0]*3+[1]*58)"


class PatternError(ValueError):
    """The text is not a layer pattern; the message says why (callers add the field's name)."""


def _tokens(text: str) -> list[str]:
    out = []
    for m in _TOKEN.finditer(text):
        number, char = m.groups()
        if number is not None:
            out.append(number)
        elif char is not None:
            if char not in "[](),+*":
                raise PatternError(f"{show(char)} is not allowed: only integers, [ ], ( ), commas, + and * "
                                   f"({_EXAMPLE})")
            out.append(char)
    return out


class _Parser:
    """Recursive descent over the tokens; recursion only at a bracket or parenthesis, at most
    MAX_PATTERN_DEPTH deep; sums and products are loops."""

    def __init__(self, tokens: list[str]):
        self.toks, self.i, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str) -> None:
        if self.peek() != want:
            got = self.peek()
            raise PatternError(f"expected {want!r}, got {'the end' if got is None else repr(got)} ({_EXAMPLE})")
        self.i += 1

    def expr(self):
        value = self.term()
        while self.peek() == "+":
            self.i += 1
            value = _add(value, self.term())
        return value

    def term(self):
        value = self.atom()
        while self.peek() == "*":
            self.i += 1
            value = _mul(value, self.atom())
        return value

    def atom(self):
        t = self.peek()
        if t is None:
            raise PatternError(f"the expression ends too early ({_EXAMPLE})")
        if t.isdigit():
            self.i += 1
            return _number(t)
        if t not in "[(":
            raise PatternError(f"unexpected {t!r} ({_EXAMPLE})")
        self.depth += 1
        if self.depth > MAX_PATTERN_DEPTH:
            raise PatternError(f"brackets and parentheses nested deeper than {MAX_PATTERN_DEPTH} levels")
        self.i += 1
        if t == "(":
            value = self.expr()
            self.take(")")
        else:
            value = []
            while self.peek() != "]":
                item = self.expr()
                if not isinstance(item, int):
                    raise PatternError("a list holds integers (0 or 1), not lists")
                value.append(item)
                if len(value) > MAX_LAYERS:
                    raise PatternError(_too_long())
                if self.peek() != ",":
                    break
                self.i += 1
            self.take("]")
        self.depth -= 1
        return value


def _too_long() -> str:
    return f"gives more than {MAX_LAYERS:,} entries (one per layer, at most {MAX_LAYERS:,} layers)"


def _number(digits: str) -> int:
    if len(digits) > len(str(MAX_LAYERS)) or int(digits) > MAX_LAYERS:
        raise PatternError(f"the number {show(digits) if len(digits) <= 20 else digits[:17] + '...'} is larger "
                           f"than {MAX_LAYERS:,} (the most layers)")
    return int(digits)


def _add(a, b):
    if isinstance(a, list) and isinstance(b, list):
        if len(a) + len(b) > MAX_LAYERS:
            raise PatternError(_too_long())
        a.extend(b)             # every list here is a new one, shared with nothing: extended in place
        return a
    if isinstance(a, int) and isinstance(b, int):
        return _number(str(a + b))
    raise PatternError("+ joins two lists or adds two integers, not a list and an integer")


def _mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return _number(str(a * b))
    if isinstance(a, int):
        a, b = b, a
    if isinstance(b, list):
        raise PatternError("* repeats a list an integer number of times; two lists cannot be multiplied")
    if len(a) * b > MAX_LAYERS:
        raise PatternError(_too_long())
    return a * b


def parse_layer_pattern(text: str, *, bare_lists: bool = True) -> int | list[int]:
    """The integer or 0/1 list a pattern text stands for; :class:`PatternError` says what is wrong.

    A text without ``[`` is an integer (as Megatron-LM reads it), or with ``bare_lists`` a comma-separated list
    (``0,1,1``, the CLI's and the calculator's shorthand for ``[0,1,1]``). Whether the integer is in range and
    the list as long as the model is deep is the loader's business; every entry of a list must be 0 or 1."""
    if not isinstance(text, str):
        raise PatternError(f"expected text, got {show(text)}")
    if len(text) > MAX_PATTERN_CHARS:
        raise PatternError(f"the text is {len(text):,} characters, more than the {MAX_PATTERN_CHARS:,} a pattern "
                           "may have")
    s = text.strip()
    if "[" not in s and not (bare_lists and "," in s):
        body = s[1:] if s[:1] in "+-" else s
        if not body.isdigit() or not body.isascii():
            raise PatternError(f"expected an integer or a list expression ({_EXAMPLE})")
        if len(body) > 20:      # far beyond any bound; int() refuses more than 4,300 digits
            raise PatternError(f"the number has {len(body):,} digits; it must be at most {MAX_LAYERS:,}")
        return int(s)
    if "[" not in s:
        s = f"[{s}]"
    parser = _Parser(_tokens(s))
    value = parser.expr()
    if parser.peek() is not None:
        raise PatternError(f"unexpected {parser.peek()!r} after the expression ({_EXAMPLE})")
    if not isinstance(value, list):
        raise PatternError(f"an expression must give a list ({_EXAMPLE}); write a plain integer without brackets")
    if any(x not in (0, 1) for x in value):
        raise PatternError("every entry must be 0 or 1")
    return value


# ---------------------------------------------------------------- one value against its spec

#: What 0 and 1 mean in each layer-pattern list field.
_PATTERN_WORDS = {"moe_layer_freq": "0 (dense) and 1 (MoE)",
                  "linear_attention_freq": "0 (full attention) and 1 (linear attention)",
                  "global_attention_freq": "0 (sliding-window attention) and 1 (global attention)"}


def type_name(spec: FieldSpec) -> str:
    return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
            "int_or_list": "an integer or a list of 0/1 integers", "str_list": "a list of names",
            "int_list": "a list of positive integers"}[spec.type]


def _limit(x) -> str:
    """A bound as messages print it: 10,000,000 rather than 1e+07."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def coerce(spec: FieldSpec, value, problems: list[Problem]):
    """Check one value against its spec (type, then bounds, before any arithmetic); return the canonical
    value (or None after a problem, appended to ``problems``). A layer-pattern field also takes its text
    (:func:`~estimator.config.layer_pattern.parse_layer_pattern`: ``"([0]*3+[1]*58)"``, ``"0,1,1"``, ``"2"``)."""
    path = spec.path
    if value is None:
        if spec.required:
            problems.append(Problem(path, None, "is required"))
        elif not spec.nullable:
            problems.append(Problem(path, None, f"must not be null; expected {type_name(spec)}"))
        return None
    t = spec.type
    if t == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                problems.append(Problem(path, value, f"must be an integer, got {show(value)}"))
                return None
    elif t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(Problem(path, value, f"must be a number, got {show(value)}"))
            return None
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(Problem(path, value, f"must be a finite number, got {show(value)}"))
            return None
        if isinstance(value, int) and spec.max is not None and value > spec.max:
            problems.append(Problem(path, value, f"must be <= {_limit(spec.max)}, got {show(value)}"))
            return None
        value = float(value)
    elif t == "bool":
        if not isinstance(value, bool):
            problems.append(Problem(path, value, f"must be true or false, got {show(value)}"))
            return None
    elif t == "str":
        if not isinstance(value, str):
            want = f"one of {', '.join(spec.choices)}" if spec.choices else "a string"
            if not spec.choices and isinstance(value, (int, float)) and not isinstance(value, bool):
                # transformer_engine_version: 2.20 unquoted is the number 2.2
                want += " (in quotes: YAML and JSON read an unquoted 2.20 as the number 2.2)"
            problems.append(Problem(path, value, f"must be {want}, got {show(value)}"))
            return None
        if spec.choices:
            canon = {c.lower(): c for c in spec.choices}
            if value.lower() not in canon:
                problems.append(Problem(path, value, f"must be one of {', '.join(spec.choices)}, got {show(value)}"))
                return None
            value = canon[value.lower()]
    elif t == "int_or_list":
        if isinstance(value, str):
            try:
                value = parse_layer_pattern(value)
            except PatternError as exc:
                problems.append(Problem(path, value, f"not a layer pattern: {exc}"))
                return None
        if isinstance(value, bool):
            problems.append(Problem(path, value, f"must be {type_name(spec)}, got {show(value)}"))
            return None
        if isinstance(value, list):
            if len(value) > MAX_LAYERS:
                problems.append(Problem(path, value, f"a pattern list has one entry per layer (at most "
                                        f"{MAX_LAYERS:,}), got {len(value):,} entries"))
                return None
            if not all(isinstance(x, int) and not isinstance(x, bool) and x in (0, 1) for x in value):
                words = _PATTERN_WORDS.get(spec.name, "0 and 1")
                problems.append(Problem(path, value, f"a list must hold only {words}"))
                return None
            return tuple(value)
        if not isinstance(value, int):
            problems.append(Problem(path, value, f"must be {type_name(spec)}, got {show(value)}"))
            return None
        if value < 1:
            what = {"linear_attention_freq": "full attention", "global_attention_freq": "global attention"}.get(
                spec.name, "MoE")
            problems.append(Problem(path, value, f"must be >= 1 (every k-th layer is {what})"))
            return None
        if value > MAX_LAYERS:
            problems.append(Problem(path, value, f"must be <= {MAX_LAYERS:,} (the largest number of layers), "
                                    f"got {show(value)}"))
            return None
        return value
    elif t == "int_list":
        if isinstance(value, str):
            try:
                value = [int(v) for v in value.strip("[]").replace(",", " ").split()]
            except ValueError:
                problems.append(Problem(path, value, f"must be {type_name(spec)}, got {show(value)}"))
                return None
        if not isinstance(value, list) or not value or \
                not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            problems.append(Problem(path, value, f"must be {type_name(spec)}, got {show(value)}"))
            return None
        for v in value:
            if (spec.min is not None and v < spec.min) or (spec.max is not None and v > spec.max):
                low = 1 if spec.min is None else spec.min
                problems.append(Problem(path, value, f"every entry must be between {_limit(low)} and "
                                        f"{_limit(spec.max)}, got {show(v)}"))
                return None
        return tuple(value)
    elif t == "str_list":
        if isinstance(value, str):
            value = [v.strip() for v in value.replace(",", " ").split() if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(Problem(path, value, "must be a list of names"))
            return None
        bad = [v for v in value if spec.choices and v not in spec.choices]
        if bad:
            problems.append(Problem(path, value, f"unknown name(s) {show(bad)}; allowed: "
                                    f"{', '.join(spec.choices)}"))
            return None
        return tuple(value)
    if spec.min is not None and value < spec.min:
        rule = "must be positive" if spec.min == 1 and spec.type != "float" else f"must be >= {_limit(spec.min)}"
        problems.append(Problem(path, value, f"{rule}, got {show(value)}"))
        return None
    if spec.max is not None and value > spec.max:
        problems.append(Problem(path, value, f"must be <= {_limit(spec.max)}, got {show(value)}"))
        return None
    return value


def _condition(spec: FieldSpec, var: str, consts: dict) -> str:
    """A Python expression true of the values the loader stores for ``spec`` (the value named ``var``); the sets of
    choices it names are added to ``consts``."""
    t = spec.type
    bounds = "".join(f" and {var} {op} {bound!r}" for op, bound in ((">=", spec.min), ("<=", spec.max))
                     if bound is not None)
    choices = ""
    if spec.choices:
        choices = f"_choices_{len(consts)}"
        consts[choices] = frozenset(spec.choices)
    if t == "int":
        cond = f"type({var}) is int{bounds}"
    elif t == "float":              # (NaN and the infinities fail the comparisons and go to coerce)
        cond = f"type({var}) is float and -1e308 <= {var} <= 1e308{bounds}"
    elif t == "bool":
        cond = f"type({var}) is bool"
    elif t == "str":
        cond = f"type({var}) is str" + (f" and {var} in {choices}" if choices else "")
    elif t == "int_or_list":
        cond = (f"(type({var}) is int and 1 <= {var} <= {MAX_LAYERS}) or (type({var}) is tuple and len({var}) <= "
                f"{MAX_LAYERS} and all(type(x) is int and (x == 0 or x == 1) for x in {var}))")
    elif t == "int_list":
        cond = (f"type({var}) is tuple and len({var}) > 0 and all(type(x) is int and {spec.min!r} <= x <= "
                f"{spec.max!r} for x in {var})")
    else:
        cond = f"type({var}) is tuple and all(type(x) is str for x in {var})" + (
            f" and {choices}.issuperset({var})" if choices else "")
    return f"({var} is None or {cond})" if spec.nullable else f"({cond})"


def _section_check(section: str):
    """One function per section, ``ok(values) -> bool``: every field's value as the loader stores it. It is written
    out field by field and compiled once (as :mod:`dataclasses` writes ``__init__``), because a Config is checked at
    every estimate and every layout the search tries: a loop over the fields took 50 us, this takes a few."""
    consts: dict = {}
    lines = ["def ok(d):"]
    for spec in section_specs(section):
        lines.append(f"    v = d[{spec.name!r}]")
        lines.append(f"    if not {_condition(spec, 'v', consts)}: return False")
    lines.append("    return True")
    scope: dict = {}
    exec("\n".join(lines), {"__builtins__": {"type": type, "int": int, "float": float, "bool": bool, "str": str,
                                              "tuple": tuple, "len": len, "all": all}, **consts}, scope)
    return scope["ok"]


_SPECS = {sec: section_specs(sec) for sec in SECTIONS}
#: Section -> its compiled check, written the second time a section object of that kind is checked: compiling all
#: four took 10-14 ms of every command's start, and a command that checks one configuration (``estimate``, the
#: search's model and precision sections) is done sooner with the loop below.
_OK: dict = {}
#: Sections whose first object was checked by the loop.
_SEEN: set = set()
#: The last section of each kind found valid (held, so its id stays its own): the search checks thousands of
#: layouts that share one model and one precision section. Sections are frozen, so a valid one stays valid.
_LAST_CHECKED: dict = {}


def field_problems(cfg: Config) -> list[Problem]:
    """The fields of a :class:`Config` whose value is not what the loader would have stored: a wrong type, a value
    out of bounds, a choice not written as the schema writes it (``"FULL"`` for ``"full"``), a list where a tuple
    is kept. Empty for every Config that :func:`~estimator.config.load.load_config` returns."""
    problems: list[Problem] = []
    for sec, cls in SECTIONS.items():
        obj = getattr(cfg, sec, None)
        if not isinstance(obj, cls):
            problems.append(Problem(sec, show(obj), f"must be a {cls.__name__}, got {type(obj).__name__}"))
            continue
        if _LAST_CHECKED.get(sec) is obj:
            continue
        ok = _OK.get(sec)
        if ok is None and sec in _SEEN:
            ok = _OK[sec] = _section_check(sec)
        _SEEN.add(sec)
        if ok is not None and ok(vars(obj)):
            _LAST_CHECKED[sec] = obj
            continue
        before = len(problems)
        for spec in _SPECS[sec]:
            value = getattr(obj, spec.name)
            plain = list(value) if isinstance(value, tuple) and spec.type in ("int_or_list", "str_list", "int_list") else value
            found: list[Problem] = []
            canon = coerce(spec, plain, found)
            if found:
                problems.extend(found)
            elif type(canon) is not type(value) or canon != value:
                problems.append(Problem(spec.path, value, f"must be stored as {show(canon)}, got {show(value)} "
                                        "(load_config builds a Config with every value in its stored form)"))
        if len(problems) == before:
            _LAST_CHECKED[sec] = obj
    return problems

