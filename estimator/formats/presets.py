"""Presets: one YAML configuration per well-known model, with its provenance.

A preset is an ordinary configuration file (sections ``model``, ``parallelism``, ``training``,
``precision``) that :func:`estimator.load_config` reads as it is. Its provenance sits in a structured
header of ``# key: value`` comment lines above the first section (a line ``#   more`` continues the
previous key), so the file stays a plain, copyable configuration:

- ``title``: the model's name;
- ``source``: where the model section comes from (a ``config.json``, a model card, a paper);
- ``hf_config``: the file name of that ``config.json`` among the reference copies, when there is one;
- ``hf_id``: the Hub id of that ``config.json`` in the model catalog (:mod:`estimator.formats.hf_catalog`), when it
  is there;
- ``published_total`` / ``published_active``: the parameter counts as their owner publishes them, exact
  (``8,030,261,248``) or rounded (``72.7B``); ``published_total_excludes: mtp`` where the owner's total
  leaves out the multi-token-prediction layers; ``published_active_excludes: embedding`` where the owner
  leaves the input embedding out of the active count;
- ``published_note``: where those figures come from;
- ``recipe``: the public training recipe the parallel layout, batch and recompute settings follow;
- ``notes``: anything else worth knowing.

Presets are found in the installed package ``estimator._presets`` (``pyproject.toml`` maps the repository's
``presets/`` directory there) and, in a source checkout, in ``presets/`` beside the package.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from ..config.errors import PresetNotFoundError, show
from ..config.load import load_config
from ..config.schema import Config

__all__ = ["list_presets", "load_preset", "preset_info", "preset_path", "preset_text", "published_bounds"]

_KEY = re.compile(r"^#\s?([a-z_]+):\s?(.*)$")
_CONT = re.compile(r"^#\s{2,}(\S.*)$")
_COUNT = re.compile(r"^([0-9][0-9,_]*)(?:\.([0-9]+))?\s*([KMBT]?)$")
_SCALE = {"": 1, "K": 10 ** 3, "M": 10 ** 6, "B": 10 ** 9, "T": 10 ** 12}


def _directory():
    """The directory (a Path or an importlib Traversable) holding the preset YAML files: the checkout's own
    ``presets/`` beside the package first (so a working tree reads its presets even when another checkout is installed
    in editable mode, whose finder maps ``estimator._presets`` to that checkout), else the installed copy."""
    beside = Path(__file__).resolve().parents[2] / "presets"
    if beside.is_dir() and any(beside.glob("*.yaml")):
        return beside
    try:
        from importlib.resources import files
        d = files("estimator._presets")
        if any(str(p.name).endswith(".yaml") for p in d.iterdir()):
            return d
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "presets"


def list_presets() -> list[str]:
    """Names of every preset (the file names without ``.yaml``), sorted."""
    d = _directory()
    try:
        names = [p.name[:-5] for p in d.iterdir() if p.name.endswith(".yaml")]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(names)


def preset_path(name: str):
    """The file of preset ``name``; raises :class:`PresetNotFoundError` naming the known presets."""
    check_preset_name(name, list_presets())
    return _directory() / f"{name}.yaml"


def check_preset_name(name, names: list[str]) -> None:
    """Raise :class:`PresetNotFoundError` unless ``name`` is one of ``names``: the error names the closest one
    and lists them all."""
    if not isinstance(name, str) or name not in names:
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5) if isinstance(name, str) and \
            len(name) <= 64 else []
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise PresetNotFoundError(f"no preset named {show(name)}{hint}; known presets: {', '.join(names)}")


def preset_text(name: str) -> str:
    """The YAML text of preset ``name`` (header comment included)."""
    return preset_path(name).read_text(encoding="utf-8")


def load_preset(name: str) -> Config:
    """The validated configuration of preset ``name``."""
    return load_config(preset_text(name))


def _header(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if not line.startswith("#"):
            if line.strip():
                break
            continue
        cont = _CONT.match(line)
        if cont and key:
            out[key] += " " + cont.group(1).strip()
            continue
        m = _KEY.match(line)
        if m:
            key = m.group(1)
            out[key] = m.group(2).strip()
        else:
            key = None
    return out


def _parse_count(text: str | None) -> tuple[int | None, bool]:
    """(value, exact) of a published count such as ``8,030,261,248`` or ``72.7B``."""
    if not text:
        return None, False
    m = _COUNT.match(text.split()[0])
    if not m:
        return None, False
    whole, frac, unit = m.group(1).replace(",", "").replace("_", ""), m.group(2) or "", m.group(3)
    if not unit and not frac:
        return int(whole), True
    scale = _SCALE[unit]
    return int(whole) * scale + (int(frac) * scale // 10 ** len(frac) if frac else 0), False


def published_bounds(text: str) -> tuple[int, int]:
    """The range of exact counts a published figure stands for.

    An exact figure stands for itself. A rounded one (``72.7B``, ``37B``) covers the counts that round
    *or* truncate to it, as owners do both ("37B activated" for 37.55 billion): from half a unit of its
    last digit below to one unit above (exclusive).
    """
    value, exact = _parse_count(text)
    if value is None:
        raise ValueError(f"not a parameter count: {text!r}")
    if exact:
        return value, value
    m = _COUNT.match(text.split()[0])
    unit = _SCALE[m.group(3)] // 10 ** len(m.group(2) or "")
    return value - unit // 2, value + unit - 1


def preset_info(name: str) -> dict:
    """Provenance of preset ``name``: title, source, published total/active parameters, recipe, notes."""
    text = preset_text(name)
    h = _header(text)
    total, total_exact = _parse_count(h.get("published_total"))
    active, active_exact = _parse_count(h.get("published_active"))
    return {
        "name": name,
        "title": h.get("title", name),
        "source": h.get("source"),
        "hf_config": h.get("hf_config"),
        "hf_id": h.get("hf_id"),
        "published_total": total,
        "published_total_text": h.get("published_total"),
        "published_total_exact": total_exact,
        "published_active": active,
        "published_active_text": h.get("published_active"),
        "published_active_exact": active_exact,
        "published_active_excludes": h.get("published_active_excludes"),
        "published_total_excludes": h.get("published_total_excludes"),
        "published_note": h.get("published_note"),
        "recipe": h.get("recipe"),
        "notes": h.get("notes"),
    }
