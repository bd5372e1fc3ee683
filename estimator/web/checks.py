"""Checks around :func:`estimator.web.handle`: the shape of a request, and strict JSON in the answer.

The page's ``JSON.parse`` refuses NaN and Infinity, and a request it cannot parse would leave it waiting,
so ``handle`` answers every request with strict JSON. Before a request reaches the calculator's
functions, :func:`request_problem` checks its shape (an object with a known ``op``; ``state``,
``values``, ``preset``, ``hf``, ``gpu``, ``top``, ``kind``, ``text``, ``name`` and ``config`` of the right types; no
non-finite number anywhere); :func:`shape_problems` checks a whole configuration given to an import or a
layout; :func:`strict` turns a NaN or infinity an import produced into an error naming its field.
"""

from __future__ import annotations

import math

from ..config.errors import Problem, clip
from ..config.schema import SECTIONS, field_specs

__all__ = ["request_problem", "shape_problems", "strict"]

_SPECS = {s.path: s for s in field_specs()}

#: The requests ``handle`` answers.
_OPS = ("compute", "advice", "import", "search", "layout", "catalog", "model", "timeline", "suggest", "sweep",
        "compare")


def _non_finite(obj, path: tuple = ()) -> tuple | None:
    """The path of the first NaN or infinity in plain JSON data, or None."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else path
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        found = _non_finite(v, (*path, k))
        if found is not None:
            return found
    return None


def _where(path: tuple) -> str:
    """The field a path of the request or the response points at: a form field, else the dotted path."""
    if len(path) >= 3 and path[:2] == ("state", "values") and path[2] in _SPECS:
        return path[2]
    if len(path) >= 3 and path[0] == "config" and path[1] in SECTIONS:
        return f"{path[1]}.{path[2]}"
    return ".".join(str(p) for p in path) or "request"


def request_problem(req) -> Problem | None:
    """What is wrong with the shape of a parsed request, or None."""
    if not isinstance(req, dict):
        return Problem("request", req, "must be a JSON object such as {\"op\": \"compute\", \"state\": {...}}")
    op = req.get("op")
    if not isinstance(op, str) or op not in _OPS:
        return Problem("op", op, "unknown request; allowed: " + ", ".join(_OPS))
    state = req.get("state")
    if state is not None and not isinstance(state, dict):
        return Problem("state", state, "must be an object {preset, hf, values, gpu}")
    state = state or {}
    if state.get("values") is not None and not isinstance(state["values"], dict):
        return Problem("state.values", state["values"], "must be an object of \"section.field\": value")
    for key in ("preset", "hf", "gpu"):
        if state.get(key) is not None and not isinstance(state[key], str):
            return Problem(f"state.{key}", state[key], "must be a name or null")
    top = req.get("top")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= 1000):
        return Problem("top", top, "must be an integer from 1 to 1000")
    for key, kind in (("kind", str), ("text", str), ("name", str), ("config", dict)):
        if req.get(key) is not None and not isinstance(req[key], kind):
            return Problem(key, req[key], f"must be {'text' if kind is str else 'an object'}")
    path = _non_finite(req)
    if path is not None:
        return Problem(_where(path), _value_at(req, path), "must be a finite number")
    return None


def _value_at(obj, path: tuple):
    for k in path:
        obj = obj[k]
    return obj


def _finite_copy(obj):
    """Plain data with every NaN or infinity written as text ("inf", "nan"): the echo of what was typed."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite_copy(v) for v in obj]
    return obj


def strict(res: dict) -> dict:
    """``res`` without NaN or infinities: an answer holding one (from an import) becomes an error naming the
    field, and an error's echo of the form writes them as text."""
    path = _non_finite(res)
    if path is None:
        return res
    if "errors" not in res:          # an import produced it: name the field, as the loader would
        res = {"errors": [Problem(_where(path), _value_at(res, path), "must be a finite number").to_dict()]}
    return _finite_copy(res)


def _flatten(cfg: dict) -> dict:
    return {f"{sec}.{k}": v for sec in SECTIONS for k, v in (cfg.get(sec) or {}).items()}


def shape_problems(cfg: dict, where: str) -> list[Problem]:
    """Sections that are not mappings, unknown sections and unknown fields of a configuration given whole
    (an import, a layout), before it is flattened into form values; at most 20."""
    problems = [Problem(f"{where}.{sec}", v, "must be a mapping of field: value") if sec in SECTIONS else
                Problem(f"{where}.{clip(str(sec))}", None, "unknown section") for sec, v in cfg.items()
                if sec not in SECTIONS or not isinstance(v, (dict, type(None)))]
    if not problems:
        problems = [Problem(f"{where}.{clip(path)}", v, "unknown field") for path, v in _flatten(cfg).items()
                    if path not in _SPECS]
    return problems[:20]
