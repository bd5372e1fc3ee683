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
import os
from pathlib import Path

from . import yamlio
from .errors import ConfigError, Problem, clip, show
from .fields import coerce
from .input_size import data_problem, read_limited, text_problem
from .rules import cross_field_problems, refuse_not_modelled, validate
from .schema import SECTIONS, Config, FieldSpec, field_specs, plain_copy, section_specs

__all__ = ["config_from_dict", "implied_changes", "load_config", "parse_text", "path_kind", "read_text_file",
           "too_deep", "with_fields"]

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
    for a missing or unreadable file, a path that cannot name a file, bytes that are not UTF-8, or a file larger
    than :data:`~estimator.config.input_size.MAX_INPUT_BYTES` (1 MiB, of which no more is read)."""
    name = clip(os.fspath(source))
    try:
        data, too_large = read_limited(source, field)
        if not too_large:
            return data.decode("utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(Problem(field, name, f"file not found: {name}")) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(Problem(field, name, f"{name} is not UTF-8 text (byte {exc.start})")) from None
    except ValueError:          # "embedded null byte"
        raise ConfigError(Problem(field, name, f"not a valid file path: {name}")) from None
    except OSError as exc:
        raise ConfigError(Problem(field, name, f"cannot read {name}: {exc.strerror}")) from None
    raise ConfigError(too_large)


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
    too_large = text_problem(text, "config", "the configuration text")
    if too_large:
        raise ConfigError(too_large)
    text = text.removeprefix("\ufeff")
    stripped = text.lstrip()
    if suffix == ".json" or stripped.startswith("{"):
        try:
            return yamlio.load_json(text)
        except yamlio.YamlError as exc:
            if suffix == ".json" or isinstance(exc, yamlio.DuplicateKeyError):
                raise ConfigError(Problem("config", None, f"invalid JSON: {exc}")) from None
            # else it may be YAML flow style ({a: 1}), which the YAML reader takes, with the same limits
    try:
        return yamlio.load(text)
    except yamlio.YamlError as exc:
        raise ConfigError(Problem("config", None, f"invalid YAML: {exc}")) from None


def load_config(source) -> Config:
    """Load and validate a configuration.

    ``source`` is a :class:`Config` (returned as is once its values and rules are checked: one built by hand or
    changed with ``dataclasses.replace`` is held to the loader's checks), a dict, a path to a
    ``.yaml``/``.yml``/``.json`` file, or YAML/JSON text, at most
    :data:`~estimator.config.input_size.MAX_INPUT_BYTES` (1 MiB). Raises :class:`ConfigError` listing every
    problem (:class:`UnsupportedError` for a valid configuration the estimator does not model).
    """
    if isinstance(source, Config):
        problems = validate(source)
        if problems:
            raise ConfigError(problems)
        refuse_not_modelled(source)
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
    """Build a validated :class:`Config` from plain data (the four YAML sections), at most
    :data:`~estimator.config.input_size.MAX_INPUT_BYTES` (1 MiB) as JSON and nested at most
    :data:`~estimator.config.yamlio.MAX_DEPTH` levels."""
    if not isinstance(data, dict):
        raise ConfigError(Problem("config", type(data).__name__,
                                  "the configuration must be a mapping with sections model, parallelism, "
                                  f"training, precision; got {show(data)}"))
    too_large = data_problem(data, "config")
    if too_large:
        raise ConfigError(too_large)
    if too_deep(data):
        raise ConfigError(Problem("config", None, f"the configuration nests deeper than {yamlio.MAX_DEPTH} levels "
                                  "(it needs three)"))
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
                vals[name] = coerce(spec, raw[name], problems)
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
    problems = cross_field_problems(cfg)
    if problems:
        raise ConfigError(problems)
    refuse_not_modelled(cfg)
    return cfg


#: The field names of Config and of each section's dataclass, for :func:`_replaced`.
_FIELD_NAMES = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (Config, *SECTIONS.values())}


def _replaced(obj, changes: dict):
    """``dataclasses.replace(obj, **changes)`` for the schema's frozen dataclasses, six times faster ("Make it fit"
    builds hundreds of candidates): the fields copied and the changes set without the per-field ``__init__`` and
    frozen ``__setattr__`` (the schema's dataclasses have no ``__post_init__``; estimator/plan/space.py builds the
    search's candidates the same way). Only the fields are copied: not what is cached on a Config's instance dict
    (estimator/memory/features' plan), which belongs to that Config."""
    new = object.__new__(type(obj))
    d = obj.__dict__
    new.__dict__.update({name: d[name] for name in _FIELD_NAMES[type(obj)]})
    new.__dict__.update(changes)
    return new


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
            by_sec.setdefault(sec, {})[name] = coerce(_INDEX[sec][name], value, problems)
    if problems:
        raise ConfigError(problems)
    if source is None:
        source = plain_copy(cfg.source)
        for path, value in changes.items():
            sec, _, name = path.partition(".")
            source.setdefault(sec, {})[name] = value
    new = _replaced(cfg, {**{sec: _replaced(getattr(cfg, sec), vals) for sec, vals in by_sec.items()},
                          "source": source})
    problems = cross_field_problems(new)
    if problems:
        raise ConfigError(problems)
    refuse_not_modelled(new)
    return new


# ---------------------------------------------------------------- what a change implies

#: The recompute fields that apply to each recompute_granularity (none: null).
RECOMPUTE_DEPENDENTS = {None: ("recompute_method", "recompute_num_layers", "recompute_modules"),
                        "selective": ("recompute_method", "recompute_num_layers"),
                        "full": ("recompute_modules",)}
#: The ways of splitting the layers that a layout string replaces (Megatron-Core refuses them together).
SPLIT_FIELDS = ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
                "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")


def implied_changes(cfg: dict, given) -> list[str]:
    """Apply what changing the fields ``given`` (``section.field`` paths) implies for the fields it leaves alone, to
    ``cfg`` (the four sections as plain data with the changes written in, changed in place), and say what changed,
    one note each. The CLI's flags over a file or preset and the calculator's form over a preset both use it:

    - a new ``recompute_granularity`` drops the recompute fields that do not apply to it (none: method, layer count,
      modules; selective: method, layer count; full: modules);
    - ``tensor_model_parallel_size`` set to 1 turns off a ``sequence_parallel: true`` it inherits, as Megatron-LM
      does (NVIDIA/Megatron-LM @ d98e8a64 : megatron/training/arguments.py, "Disabling sequence parallelism because
      tensor model parallelism is disabled"); sequence parallelism asked for together with TP 1 is refused, as
      Megatron-Core's ``ModelParallelConfig`` refuses it ("Cannot use sequence parallelism without tensor
      parallelism");
    - a ``pipeline_model_parallel_layout`` replaces the other ways of splitting the layers and the virtual pipeline
      size, and another split given replaces the layout.

    A field named in ``given`` is never changed; a value that is not what the field takes is left for the loader to
    refuse by name."""
    given = set(given)
    sections = [cfg.get(sec) for sec in ("parallelism", "training")]
    if not all(isinstance(sec, dict) for sec in sections):
        return []                    # the loader names the section that is not a mapping
    par, tr = sections
    notes: list[str] = []
    if "training.recompute_granularity" in given:
        g = tr.get("recompute_granularity")
        g = g.lower() if isinstance(g, str) else g
        for name in RECOMPUTE_DEPENDENTS.get(g, ()) if isinstance(g, (str, type(None))) else ():
            if f"training.{name}" not in given and tr.pop(name, None) is not None:
                notes.append(f"training.{name} dropped: it does not apply with recompute_granularity "
                             f"{g or 'none'}")
    tp = par.get("tensor_model_parallel_size", 1)
    if ("parallelism.tensor_model_parallel_size" in given and "training.sequence_parallel" not in given
            and type(tp) is int and tp == 1 and tr.get("sequence_parallel") is True):
        tr["sequence_parallel"] = False
        notes.append("sequence parallelism turned off (training.sequence_parallel: false): it needs "
                     "tensor_model_parallel_size > 1, now 1 (Megatron-LM's arguments.py does the same)")
    if par.get("pipeline_model_parallel_layout") and "parallelism.pipeline_model_parallel_layout" in given:
        for name in SPLIT_FIELDS + ("virtual_pipeline_model_parallel_size",):
            if f"parallelism.{name}" not in given and par.pop(name, None) not in (None, False):
                notes.append(f"parallelism.{name} dropped: the layout given places every layer (and sets VPP)")
    elif any(f"parallelism.{n}" in given and par.get(n) not in (None, False) for n in SPLIT_FIELDS):
        if "parallelism.pipeline_model_parallel_layout" not in given and par.pop("pipeline_model_parallel_layout",
                                                                                 None):
            notes.append("parallelism.pipeline_model_parallel_layout dropped: the split given replaces it")
    return notes

