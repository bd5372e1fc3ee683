"""Loading and validating configurations.

:func:`load_config` accepts a YAML or JSON file, YAML/JSON text, a plain dict or a
:class:`~estimator.config.schema.Config`, checks every field against the schema and every cross-field rule
Megatron-Core enforces, and raises one :class:`~estimator.config.errors.ConfigError` listing every problem
(field, value, rule). User input is never mutated: derived values are computed separately by
:mod:`estimator.model.resolve`, and ``Config.to_dict()`` returns exactly what was written.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
from pathlib import Path

from . import yamlio
from .errors import ConfigError, Problem, clip, show
from .rules import refuse_not_modelled, validate
from .schema import MAX_LAYERS, SECTIONS, Config, FieldSpec, field_specs, plain_copy, section_specs

__all__ = ["config_from_dict", "load_config", "parse_text", "path_kind", "read_text_file", "too_deep", "with_fields"]

#: Unknown keys reported one by one; beyond them one problem says how many more there are.
MAX_UNKNOWN_KEYS = 20


def _spec_index() -> dict[str, dict[str, FieldSpec]]:
    return {sec: {s.name: s for s in section_specs(sec)} for sec in SECTIONS}


_INDEX = _spec_index()
_ALL_NAMES = {s.name: s.section for s in field_specs()}


def too_deep(data, limit: int = yamlio.MAX_DEPTH) -> bool:
    """True when plain data (dicts and lists) nests deeper than ``limit`` levels; iterative, so that a
    100,000-deep structure built in Python is refused before anything recurses into it."""
    stack = [(data, 0)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, dict):
            children = obj.values()
        elif isinstance(obj, (list, tuple)):
            children = obj
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return False


def read_text_file(source: str | os.PathLike, field: str = "config") -> str:
    """The text of a UTF-8 file (a byte-order mark is dropped); a :class:`ConfigError` naming ``field``
    for a missing or unreadable file, a path that cannot name a file, or bytes that are not UTF-8."""
    name = clip(os.fspath(source))
    try:
        return Path(source).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(Problem(field, name, f"file not found: {name}")) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(Problem(field, name, f"{name} is not UTF-8 text (byte {exc.start})")) from None
    except ValueError:          # "embedded null byte"
        raise ConfigError(Problem(field, name, f"not a valid file path: {name}")) from None
    except OSError as exc:
        raise ConfigError(Problem(field, name, f"cannot read {name}: {exc.strerror}")) from None


def path_kind(source: str | os.PathLike) -> str | None:
    """"file", "dir" or None (nothing there, or a string that cannot name a file: too long, a null byte)."""
    try:
        path = Path(source)
        return "file" if path.is_file() else "dir" if path.is_dir() else None
    except (OSError, ValueError):
        return None


def _read_text(source: str | os.PathLike) -> tuple[str, str]:
    return read_text_file(source), Path(source).suffix.lower()


def parse_text(text: str, suffix: str = "") -> dict:
    """Parse YAML or JSON text (JSON is tried first when it looks like JSON). A leading byte-order mark is
    ignored; nesting deeper than :data:`estimator.config.yamlio.MAX_DEPTH` levels is refused."""
    if not isinstance(text, str):
        raise ConfigError(Problem("config", show(text), "expected YAML or JSON text"))
    text = text.removeprefix("\ufeff")
    stripped = text.lstrip()
    if suffix == ".json" or stripped.startswith("{"):
        try:
            return yamlio.load_json(text)
        except yamlio.YamlError as exc:
            if suffix == ".json":
                raise ConfigError(Problem("config", None, f"invalid JSON: {exc}")) from None
            # else it may be YAML flow style ({a: 1}), which the YAML reader takes, with the same limits
    try:
        return yamlio.load(text)
    except yamlio.YamlError as exc:
        raise ConfigError(Problem("config", None, f"invalid YAML: {exc}")) from None


def load_config(source) -> Config:
    """Load and validate a configuration.

    ``source`` is a :class:`Config` (returned as is), a dict, a path to a ``.yaml``/``.yml``/``.json``
    file, or YAML/JSON text. Raises :class:`ConfigError` listing every problem.
    """
    if isinstance(source, Config):
        return source
    if isinstance(source, dict):
        return config_from_dict(source)
    if isinstance(source, (str, os.PathLike)):
        s = os.fspath(source)
        if not isinstance(s, str):
            raise ConfigError(Problem("config", show(s), "expected a file path, YAML/JSON text, a dict or a Config"))
        if "\n" in s or s.lstrip("\ufeff \t\r").startswith("{"):
            data = parse_text(s)
        else:
            data = parse_text(*_read_text(s))
        return config_from_dict(data)
    raise ConfigError(Problem("config", type(source).__name__,
                              "expected a file path, YAML/JSON text, a dict or a Config"))


#: What 0 and 1 mean in each layer-pattern list field.
_PATTERN_WORDS = {"moe_layer_freq": "0 (dense) and 1 (MoE)",
                  "linear_attention_freq": "0 (full attention) and 1 (linear attention)"}


def _type_name(spec: FieldSpec) -> str:
    return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
            "int_or_list": "an integer or a list of 0/1 integers", "str_list": "a list of names"}[spec.type]


def _limit(x) -> str:
    """A bound as messages print it: 10,000,000 rather than 1e+07."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _coerce(spec: FieldSpec, value, problems: list[Problem]):
    """Check one value against its spec (type, then bounds, before any arithmetic); return the canonical
    value (or None after a problem)."""
    path = spec.path
    if value is None:
        if spec.required:
            problems.append(Problem(path, None, "is required"))
        elif not spec.nullable:
            problems.append(Problem(path, None, f"must not be null; expected {_type_name(spec)}"))
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
            problems.append(Problem(path, value, f"must be {want}, got {show(value)}"))
            return None
        if spec.choices:
            canon = {c.lower(): c for c in spec.choices}
            if value.lower() not in canon:
                problems.append(Problem(path, value, f"must be one of {', '.join(spec.choices)}, got {show(value)}"))
                return None
            value = canon[value.lower()]
    elif t == "int_or_list":
        if isinstance(value, bool):
            problems.append(Problem(path, value, f"must be {_type_name(spec)}, got {show(value)}"))
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
            problems.append(Problem(path, value, f"must be {_type_name(spec)}, got {show(value)}"))
            return None
        if value < 1:
            what = "full attention" if spec.name == "linear_attention_freq" else "MoE"
            problems.append(Problem(path, value, f"must be >= 1 (every k-th layer is {what})"))
            return None
        if value > MAX_LAYERS:
            problems.append(Problem(path, value, f"must be <= {MAX_LAYERS:,} (the largest number of layers), "
                                    f"got {show(value)}"))
            return None
        return value
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
        rule = "must be positive" if spec.min == 1 else f"must be >= {_limit(spec.min)}"
        problems.append(Problem(path, value, f"{rule}, got {show(value)}"))
        return None
    if spec.max is not None and value > spec.max:
        problems.append(Problem(path, value, f"must be <= {_limit(spec.max)}, got {show(value)}"))
        return None
    return value


def _unknown_keys(section: str | None, keys: list, problems: list[Problem]) -> None:
    """Report the unknown keys of ``section`` (None: the top level), each with the nearest known name; past
    :data:`MAX_UNKNOWN_KEYS` - 1 of them, one more problem gives the number of the others."""
    listed = keys if len(keys) <= MAX_UNKNOWN_KEYS else keys[:MAX_UNKNOWN_KEYS - 1]
    for key in listed:
        _unknown_key(section, key, problems)
    if len(listed) < len(keys):
        where = f" in '{section}'" if section else ""
        problems.append(Problem(section or "config", None, f"{len(keys) - len(listed):,} more unknown keys{where}"))


def _unknown_key(section: str | None, key, problems: list[Problem]) -> None:
    plain = isinstance(key, str) and len(key) <= 64      # worth comparing with the known names
    text = key if plain else show(key)
    where = f"{section}.{text}" if section else text
    if section and plain and key in _ALL_NAMES:
        problems.append(Problem(where, key, f"unknown key in '{section}'; '{key}' belongs in the "
                                f"'{_ALL_NAMES[key]}' section"))
        return
    names = list(_INDEX[section]) if section else list(SECTIONS)
    close = difflib.get_close_matches(text, names, n=1, cutoff=0.6) if plain else []
    if not close and section and plain:
        close = difflib.get_close_matches(text, list(_ALL_NAMES), n=1, cutoff=0.6)
        if close:
            close = [f"{_ALL_NAMES[close[0]]}.{close[0]}"]
    hint = f"; did you mean '{close[0]}'?" if close else ""
    kind = "section" if section is None else "key"
    problems.append(Problem(where, key, f"unknown {kind}{hint}"))


def config_from_dict(data) -> Config:
    """Build a validated :class:`Config` from plain data (the four YAML sections)."""
    if not isinstance(data, dict):
        raise ConfigError(Problem("config", type(data).__name__,
                                  "the configuration must be a mapping with sections model, parallelism, "
                                  f"training, precision; got {show(data)}"))
    problems: list[Problem] = []
    values: dict[str, dict] = {}
    _unknown_keys(None, [k for k in data if not isinstance(k, str) or k not in SECTIONS], problems)
    for sec, cls in SECTIONS.items():
        raw = data.get(sec)
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            problems.append(Problem(sec, raw, f"must be a mapping of field: value, got {show(raw)}"))
            raw = {}
        _unknown_keys(sec, [k for k in raw if not isinstance(k, str) or k not in _INDEX[sec]], problems)
        vals = {}
        for name, spec in _INDEX[sec].items():
            if name in raw:
                vals[name] = _coerce(spec, raw[name], problems)
            elif spec.required:
                problems.append(Problem(spec.path, None, "is required"))
                vals[name] = None
            else:
                vals[name] = spec.default
        values[sec] = vals
    if problems:
        raise ConfigError(problems)
    cfg = Config(**{sec: SECTIONS[sec](**values[sec]) for sec in SECTIONS},
                 source=json.loads(json.dumps(data)))
    problems = validate(cfg)
    if problems:
        raise ConfigError(problems)
    refuse_not_modelled(cfg)
    return cfg


def with_fields(cfg: Config, changes: dict, source: dict | None = None) -> Config:
    """``cfg`` (valid) with the fields ``changes`` names (``section.field`` -> value, as written) set: what
    :func:`config_from_dict` gives for the configuration with those values, the same problems raised, but only the
    new values coerced (the search's and "Make it fit"'s candidates differ from a valid configuration in a few
    fields). ``source`` is what ``to_dict()`` returns (default: ``cfg``'s with the changes)."""
    problems: list[Problem] = []
    by_sec: dict[str, dict] = {}
    for path, value in changes.items():
        sec, _, name = path.partition(".")
        if sec not in SECTIONS:
            _unknown_keys(None, [sec], problems)
        elif name not in _INDEX[sec]:
            _unknown_keys(sec, [name], problems)
        else:
            by_sec.setdefault(sec, {})[name] = _coerce(_INDEX[sec][name], value, problems)
    if problems:
        raise ConfigError(problems)
    if source is None:
        source = plain_copy(cfg.source)
        for path, value in changes.items():
            sec, _, name = path.partition(".")
            source.setdefault(sec, {})[name] = value
    new = dataclasses.replace(cfg, **{sec: dataclasses.replace(getattr(cfg, sec), **vals)
                                      for sec, vals in by_sec.items()}, source=source)
    problems = validate(new)
    if problems:
        raise ConfigError(problems)
    refuse_not_modelled(new)
    return new
