"""The calculator's form state and what it stands for: the presets and GPUs it offers, the configuration a state
describes (preset + typed values), the GPU capacity it names, and the error answers of the request protocol
(:mod:`estimator.web.protocol`).

The form's state is ``{"preset": name or null, "hf": Hub id or null, "values": {"section.field": value}, "gpu": name,
"gpu_gib": number}`` (see :mod:`estimator.web.protocol`). ``hf`` names a model of the offline catalog
(:mod:`estimator.formats.hf_catalog`): its ``config.json``, imported as ``python -m estimator estimate [PRESET] --hf ID``
imports it, is the model section, over the preset's (the preset then gives the rest: layout, training, precision).
"""

from __future__ import annotations

from functools import lru_cache

from ..config.errors import ConfigError, EstimatorError, Problem, clip, show
from ..config.fields import PatternError, parse_layer_pattern
from ..config.load import implied_changes
from ..config.schema import SECTIONS, field_specs, plain_copy
from ..memory.report import GIB
from .form import label

__all__ = ["CUSTOM_GPU", "FIELD_SPECS", "UNSET", "base_config", "default_gpu", "error_answer", "errors_answer",
           "flatten", "gpu_arch_problem", "gpu_table", "gpus", "hf_model", "merged", "merged_config", "parse_value",
           "preset_config", "preset_names", "presets", "schema", "state_capacity"]

DEFAULT_GPU_HINTS = ("h100", "80")
CUSTOM_GPU = "custom"
FIELD_SPECS = {s.path: s for s in field_specs()}
#: Unknown fields of a state reported one by one (the rest are left out: a request may hold thousands).
MAX_UNKNOWN_FIELDS = 20
class _Unset:
    """A field the user cleared: not changed, so the preset's value (or the default) applies."""


UNSET = _Unset()


# ---------------------------------------------------------------- schema, presets, GPUs


def schema() -> list[dict]:
    """The form: one entry per section with its fields' specs, in YAML order."""
    out = []
    for name, cls in SECTIONS.items():
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        out.append({"name": name, "doc": " ".join(doc.split()),
                    "fields": [{**s.to_dict(), "label": label(s.path)} for s in field_specs() if s.section == name]})
    return out


@lru_cache(maxsize=None)
def preset_config(name: str) -> dict:
    """Preset ``name`` as its file writes it (shared: copy it before changing it)."""
    from ..formats.presets import check_preset_name, load_preset
    check_preset_name(name, preset_names())
    return load_preset(name).to_dict()


@lru_cache(maxsize=1)
def preset_names() -> list[str]:
    """The presets' names, read once. In the browser the memory snapshot holds them: the package's files are
    unpacked only after Python's first answers, and until then an unknown preset must still be named with the
    closest known one."""
    from ..formats.presets import list_presets
    return list_presets()


def presets() -> list[dict]:
    """Every preset: name, title, provenance and its configuration as written."""
    try:
        from ..formats.presets import preset_info
    except ImportError:
        return []
    out = []
    for name in preset_names():
        info = preset_info(name)
        out.append({"name": name, "title": info.get("title") or name, "source": info.get("source"),
                    "recipe": info.get("recipe"), "config": preset_config(name)})
    return out


def gpu_table() -> dict:
    try:
        from ..formats.gpus import GPUS
    except ImportError:
        return {}
    return GPUS


def gpus() -> list[dict]:
    """Every known GPU with its memory in bytes and in GiB (text) and its architecture (``training.gpu_arch``)."""
    return [{"name": name, "memory_bytes": g.memory_bytes, "memory": f"{g.memory_bytes / GIB:.1f} GiB",
             "source": getattr(g, "source", None), "arch": getattr(g, "arch", None)}
            for name, g in gpu_table().items()]


def default_gpu() -> str | None:
    names = list(gpu_table())
    for name in names:
        if all(h in name.lower() for h in DEFAULT_GPU_HINTS):
            return name
    return names[0] if names else None


# ---------------------------------------------------------------- a model of the catalog

#: The end of the page's message for a model it does not know.
NOT_DOWNLOADED = "nothing is downloaded. For another model, paste its config.json under All settings › import."
#: A name longer than this is not compared with the known ones (it is no preset or Hub id, and difflib is quadratic).
MAX_NAME = 200


@lru_cache(maxsize=32)
def _hf_model(key: str) -> tuple[dict, str, str | None]:
    from ..formats.catalog import status
    from ..formats.hf_catalog import resolve
    entry, sibling = resolve(key)               # ConfigError naming the closest ids for an unknown one
    model, reason = status(entry.hf_id)
    if model is None:
        raise EstimatorError(f"'{key}' is in the model catalog but not supported yet: {reason}")
    return model, (key if sibling else entry.hf_id), sibling


def hf_model(hf_id: str) -> tuple[dict, str, str | None]:
    """(model section, the name to show, the sibling note or None) of a catalog Hub id, as ``--hf ID`` imports it:
    the name is the catalog's spelling of the id, or the id as given where a sibling stands in for it (its note
    says so). :class:`~estimator.config.errors.ConfigError` for an id not in the catalog (naming the closest),
    :class:`~estimator.config.errors.EstimatorError` for a catalog model the import refuses (with the reason)."""
    key = str(hf_id).strip()
    if len(key) > MAX_NAME:                     # no Hub id is this long: not looked up, nor compared
        raise ConfigError(Problem("hf", key, "not in the model catalog"))
    model, name, note = _hf_model(key)
    return plain_copy(model), name, note


def base_config(state: dict) -> tuple[dict, list[Problem]]:
    """What a state's typed values are written over: its preset (or nothing), with the model section of its catalog
    model (``hf``) in place of the preset's and the architecture of its catalog GPU (``training.gpu_arch``, as the
    CLI's ``--gpu`` sets it: :func:`estimator.formats.gpus.with_gpu_arch`); and the problems of an unknown preset or
    model."""
    problems: list[Problem] = []
    name = state.get("preset") or None
    base: dict = {}
    if name:
        try:
            base = plain_copy(preset_config(name))
        except EstimatorError as exc:
            problems.append(Problem("preset", name, str(exc).strip("'\"")))
    cfg = {sec: dict(base.get(sec) or {}) for sec in SECTIONS}
    hf = state.get("hf") or None
    if hf:
        try:
            cfg["model"] = hf_model(hf)[0]
        except EstimatorError as exc:
            problems.append(Problem("hf", hf, _hf_message(exc)))
    g = gpu_table().get(state.get("gpu")) if isinstance(state.get("gpu"), str) else None
    if g is not None:
        from ..formats.gpus import with_gpu_arch
        try:
            cfg = with_gpu_arch(cfg, g)
        except ConfigError as exc:
            problems += exc.problems
    return cfg, problems


def gpu_arch_problem(state: dict, cfg: dict) -> Problem | None:
    """The problem of a state whose typed ``training.gpu_arch`` is not its catalog GPU's architecture (the GPU sets
    it; a custom capacity takes any), else None."""
    g = gpu_table().get(state.get("gpu")) if isinstance(state.get("gpu"), str) else None
    typed = (cfg.get("training") or {}).get("gpu_arch")
    arch = getattr(g, "arch", None)
    if arch is None or typed in (None, arch):
        return None
    return Problem("training.gpu_arch", typed, f"is {show(typed)}, but the GPU chosen, {g.name}, is {arch}: clear "
                   "it (the GPU sets it) or choose the custom GPU to give a capacity with another architecture")


def _hf_message(exc: EstimatorError) -> str:
    """The page's words for a Hub id the state cannot use: not in the catalog (with the closest ids), or refused."""
    if getattr(exc, "problems", None) and exc.problems[0].field == "hf":
        from ..formats.hf_catalog import closest, ids
        name = str(exc.problems[0].value).strip()
        near = closest(name) if len(name) <= MAX_NAME else []
        return (f"'{clip(name)}' is not a Hugging Face id of the model catalog ({len(ids())} Hub ids); {NOT_DOWNLOADED}"
                + (f" Closest: {', '.join(near)}." if near else ""))
    return str(exc).strip("'\"")


# ---------------------------------------------------------------- state -> configuration


def parse_value(path: str, raw):
    """The configuration value of one form entry (strings as typed; JSON values pass through). A text the field does
    not take is returned as it is, for the loader to refuse with the message every surface gives (a layer pattern
    is read by the loader's own parser, :func:`estimator.config.fields.parse_layer_pattern`)."""
    spec = FIELD_SPECS[path]
    if not isinstance(raw, str):
        return raw                          # a JSON value (an import or a layout), null included
    text = raw.strip()
    if text == "":
        return UNSET                        # not changed: the preset's value stays
    if text.lower() in ("null", "none", "~") and not (spec.choices and text.lower() in spec.choices):
        return None                         # (position_embedding_type's choice "none" is a value, not null)
    t = spec.type
    try:
        if t == "int":
            return int(text)
        if t == "float":
            return float(text)
        if t == "bool" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if t == "int_or_list":
            return parse_layer_pattern(text)
        if t == "str_list":
            return [x for x in text.strip("[]").replace(",", " ").split() if x]
        if t == "int_list":
            return [int(x) for x in text.strip("[]").replace(",", " ").split() if x]
    except (ValueError, PatternError):
        pass
    return text          # a string the loader rejects with a message naming the field


def merged_config(state: dict) -> tuple[dict, list[Problem]]:
    """The configuration the form describes (preset + values), before validation, and unknown-field problems."""
    cfg, problems, _ = merged(state)
    return cfg, problems


def merged(state: dict) -> tuple[dict, list[Problem], list[str]]:
    """(configuration, unknown-field problems, notes) of a form state: the preset (with the model section of its
    catalog model, ``hf``) with the typed values written over it and what they imply for the fields the user left alone, as the CLI's flags over a preset
    (:func:`estimator.config.load.implied_changes`: a new recompute granularity drops the recompute fields that no
    longer apply, TP 1 turns off an inherited sequence parallelism, a layout replaces the other splits), one note
    each."""
    cfg, problems = base_config(state)
    given = set()
    for path, raw in (state.get("values") or {}).items():
        if path not in FIELD_SPECS:
            if len(problems) < MAX_UNKNOWN_FIELDS:
                problems.append(Problem(clip(path) or "state.values", raw, f"unknown field {show(path)}"))
            continue
        section, field = path.split(".", 1)
        value = parse_value(path, raw)
        if value is not UNSET:
            cfg[section][field] = value
            given.add(path)
    wrong_arch = gpu_arch_problem(state, cfg)
    if wrong_arch is not None:
        problems.append(wrong_arch)
    return cfg, problems, implied_changes(cfg, given)


def errors_answer(problems) -> dict:
    return {"errors": [p.to_dict() if isinstance(p, Problem) else p for p in problems]}


def error_answer(field: str, value, message: str) -> dict:
    return errors_answer([Problem(field, value, message)])



def state_capacity(state: dict) -> tuple[str | None, int | None, list[Problem]]:
    """(GPU name, capacity in bytes, problems) of a state: a catalog GPU, a custom capacity, or none."""
    gpu = state.get("gpu") or None
    if gpu is None:
        return None, None, []
    if gpu == CUSTOM_GPU:
        raw = state.get("gpu_gib")
        try:
            gib = float(raw)
        except (TypeError, ValueError):
            gib = None
        if gib is None or not 1 <= gib <= 100_000:
            return None, None, [Problem("gpu_gib", raw, "the GPU memory in GiB: a number from 1 to 100,000")]
        return f"a {gib:g} GiB GPU", int(gib * GIB), []
    if gpu not in gpu_table():
        return None, None, [Problem("gpu", gpu, f"unknown GPU; known: {', '.join(gpu_table())}")]
    return gpu, gpu_table()[gpu].memory_bytes, []


def flatten(cfg: dict) -> dict:
    return {f"{sec}.{k}": v for sec in SECTIONS for k, v in (cfg.get(sec) or {}).items()}
