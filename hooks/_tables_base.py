"""Shared pieces of the site's views: the error type, the Jinja2 environment and number formats.

Formatting is the only arithmetic here: bytes become GiB (2^30 bytes) with two decimals, counts get
thousands separators. Every value formatted comes from the estimator.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jinja2

HOOKS = Path(__file__).resolve().parent
ROOT = HOOKS.parent
GIB = 2 ** 30
GB = 10 ** 9


class MarkerError(Exception):
    """A marker that cannot be rendered: unknown, badly written, or naming data the estimator rejects."""


def gib(n: int | float | None) -> str:
    """Bytes as GiB (2^30 bytes), two decimals."""
    return "" if n is None else f"{n / GIB:.2f}"


def count(n: int | None) -> str:
    """An exact count with thousands separators."""
    return "" if n is None else f"{n:,}"


def billions(n: int | None) -> str:
    """A count in billions (10^9), two decimals: 8.03 billion (millions, 10^6, below one billion)."""
    if n is None:
        return ""
    return f"{n / 1e9:.2f} billion" if n >= 10 ** 9 else f"{n / 1e6:.2f} million"


def pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return ""
    return f"{x:+.1f} %" if signed else f"{x:.1f} %"


def yaml_value(v) -> str:
    """A schema default written as it would appear in YAML."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    return str(v)


def to_json(data) -> str:
    """Deterministic JSON for data-* attributes."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def merge(base: dict, overrides: dict) -> dict:
    """The config ``base`` with the keys of each section of ``overrides`` set (a copy; sections update)."""
    out = copy.deepcopy(base)
    for section, values in (overrides or {}).items():
        if not isinstance(values, dict):
            raise MarkerError(f"section {section!r} must be a mapping of fields, got {values!r}")
        out.setdefault(section, {})
        out[section] = {**(out[section] or {}), **copy.deepcopy(values)}
    return out


_ENV: jinja2.Environment | None = None


def env() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(HOOKS / "templates")), autoescape=True,
            undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        _ENV.filters.update(gib=gib, count=count, billions=billions, pct=pct, yaml_value=yaml_value, json=to_json)
        from estimator.plan.verdicts import MEANINGS, WORDS           # one vocabulary with the calculator
        _ENV.globals.update(verdict_words=WORDS, verdict_meanings=MEANINGS)
    return _ENV


def render_template(template: str, **context) -> str:
    try:
        return env().get_template(template).render(**context)
    except jinja2.TemplateError as exc:
        raise MarkerError(f"template {template}: {exc}") from exc
