"""The calculator's Python entry point: one JSON request in, one JSON response out.

The calculator page runs this module in the browser, under Pyodide, in a Web Worker. JavaScript sends
the form's state and renders what comes back; every number it shows (bytes, GiB strings, the fit
verdict, the headroom) is computed here or in the core this module calls, so the page and the CLI
cannot disagree. The docs build (``hooks/runtime.py``) calls :func:`boot_data` to embed the form
schema, the presets, the GPUs and the default preset's estimate in the page.

The form's state is ``{"preset": name or null, "values": {"section.field": value}, "gpu": name}``:
``values`` holds what the user typed over the preset (strings as typed, or JSON values), an empty
string meaning "not set" (the preset's value is dropped, the default applies) and ``"null"`` or JSON
null meaning null. Requests, ``{"op": ...}``:

- ``compute`` ``{state, exports}`` -> ``{estimate, fit, view, config, exports}`` or ``{errors, config}``
  (``exports``, the configuration as YAML, CLI command and Megatron arguments, only when asked for);
- ``import`` ``{state, kind: yaml | hf | megatron, text}`` -> ``{state, notes}`` or ``{errors}``; for Megatron
  arguments also ``flags: {no_effect: [{flag, reason}]}``, and with the errors ``refused: [{flag, reason}]``;
- ``search`` ``{state, top}`` -> ``{layouts, summary}`` or ``{errors}``;
- ``layout`` ``{state, config}`` -> ``{state}``: the form state of a complete configuration;
- ``catalog`` -> ``{models}``: the model catalog (:func:`estimator.catalog.listing`), for a picker by Hub id
  and family; ``import`` with ``kind: hf`` takes a catalog Hub id as ``text`` as well as a config.json.

Errors are ``{"field", "value", "message"}`` with the dotted field path, as :class:`~estimator.errors.Problem`.
Imports of the optional modules (presets, GPUs, Hugging Face, Megatron arguments, search) are lazy, so
``import estimator.web`` stays cheap.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache

from . import estimate as _estimate
from .config import load_config, parse_text
from .errors import ConfigError, EstimatorError, Problem
from .report import GB, GIB
from .schema import SECTIONS, field_specs

__all__ = ["DEFAULT_PRESET", "boot_data", "compute", "handle", "import_text", "schema", "warm"]

DEFAULT_PRESET = "llama-3-8b"
DEFAULT_GPU_HINTS = ("h100", "80")
COLUMNS = (("weights", "Weights"), ("gradients", "Gradients"), ("optimizer", "Optimizer"),
           ("activations", "Activations"), ("transient", "Transient"), ("allocated", "Allocated"),
           ("device", "Device total"))
UNIT = "GiB (2^30 bytes)"
_SPECS = {s.path: s for s in field_specs()}


class _Unset:
    """A field the user cleared: the preset's value, if any, is dropped and the default applies."""


UNSET = _Unset()


# ---------------------------------------------------------------- schema, presets, GPUs


def schema() -> list[dict]:
    """The form: one entry per section with its fields' specs, in YAML order."""
    out = []
    for name, cls in SECTIONS.items():
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        out.append({"name": name, "doc": " ".join(doc.split()),
                    "fields": [s.to_dict() for s in field_specs() if s.section == name]})
    return out


@lru_cache(maxsize=None)
def _preset_config(name: str) -> dict:
    from .presets import load_preset
    return load_preset(name).to_dict()


def presets() -> list[dict]:
    """Every preset: name, title, provenance and its configuration as written."""
    try:
        from .presets import list_presets, preset_info
    except ImportError:
        return []
    out = []
    for name in list_presets():
        info = preset_info(name)
        out.append({"name": name, "title": info.get("title") or name, "source": info.get("source"),
                    "config": _preset_config(name)})
    return out


def _gpus() -> dict:
    try:
        from .gpus import GPUS
    except ImportError:
        return {}
    return GPUS


def gpus() -> list[dict]:
    """Every known GPU with its memory in bytes and in GiB (text)."""
    return [{"name": name, "memory_bytes": g.memory_bytes, "memory": f"{g.memory_bytes / GIB:.1f} GiB",
             "source": getattr(g, "source", None)} for name, g in _gpus().items()]


def default_gpu() -> str | None:
    names = list(_gpus())
    for name in names:
        if all(h in name.lower() for h in DEFAULT_GPU_HINTS):
            return name
    return names[0] if names else None


# ---------------------------------------------------------------- state -> configuration


def parse_value(path: str, raw):
    """The configuration value of one form entry (strings as typed; JSON values pass through)."""
    spec = _SPECS[path]
    if not isinstance(raw, str):
        return raw                          # a JSON value (an import or a layout), null included
    text = raw.strip()
    if text == "":
        return UNSET
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
            if text.startswith("[") or "," in text:
                return [int(x) for x in text.strip("[]").replace(",", " ").split()]
            return int(text)
        if t == "str_list":
            return [x for x in text.strip("[]").replace(",", " ").split() if x]
    except ValueError:
        pass
    return text          # a string the loader rejects with a message naming the field


def merged_config(state: dict) -> tuple[dict, list[Problem]]:
    """The configuration the form describes (preset + values), before validation, and unknown-field problems."""
    problems: list[Problem] = []
    name = state.get("preset") or None
    base: dict = {}
    if name:
        try:
            base = copy.deepcopy(_preset_config(name))
        except EstimatorError as exc:
            problems.append(Problem("preset", name, str(exc).strip("'\"")))
    cfg = {sec: dict(base.get(sec) or {}) for sec in SECTIONS}
    for path, raw in (state.get("values") or {}).items():
        if path not in _SPECS:
            problems.append(Problem(path, raw, "unknown field"))
            continue
        section, field = path.split(".", 1)
        value = parse_value(path, raw)
        if value is UNSET:
            cfg[section].pop(field, None)
        else:
            cfg[section][field] = value
    return cfg, problems


def _errors(problems) -> dict:
    return {"errors": [p.to_dict() if isinstance(p, Problem) else p for p in problems]}


def _error(field: str, value, message: str) -> dict:
    return _errors([Problem(field, value, message)])


# ---------------------------------------------------------------- compute


def compute(state: dict, with_exports: bool = True) -> dict:
    """Estimate the configuration of a form state; errors name the field they concern."""
    cfg, problems = merged_config(state)
    gpu = state.get("gpu") or None
    if gpu and gpu not in _gpus():
        problems.append(Problem("gpu", gpu, f"unknown GPU; known: {', '.join(_gpus())}"))
    if problems:
        return {**_errors(problems), "config": cfg}
    try:
        config = load_config(cfg)
        est = _estimate(config)
    except ConfigError as exc:
        return {**_errors(exc.problems), "config": cfg}
    except (EstimatorError, ValueError) as exc:
        return {**_error("config", None, str(exc)), "config": cfg}
    capacity = _gpus()[gpu].memory_bytes if gpu else None
    fit = _fit(est, capacity)
    return {"estimate": est.to_dict(), "fit": fit, "view": view(est, fit, gpu, capacity), "config": cfg,
            "exports": exports(cfg, state) if with_exports else None}


def _fit(est, capacity: int | None) -> list[dict] | None:
    """Per-stage verdicts of :func:`estimator.gpus.fit` (fits, tight or no; headroom) as plain data."""
    if capacity is None:
        return None
    from .gpus import fit
    return [f.to_dict() for f in fit(est, capacity)]


def _gib(b: int) -> str:
    return f"{b / GIB:.2f}"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 10 ** 9 else f"{n / 1e6:.2f} M" if n >= 10 ** 6 else f"{n:,}"


def view(est, fit: list[dict] | None, gpu: str | None, capacity: int | None) -> dict:
    """What the page shows, formatted: table rows in GiB, bar segments in bytes, the verdict in words."""
    rows, bars = [], []
    for s in est.stages:
        cells = {key: _gib(getattr(s, f"{key}_bytes")) for key, _ in COLUMNS}
        extras = [x for x, on in (("embedding", s.has_embedding), ("output layer", s.has_output_layer),
                                  (f"{s.mtp_layers} MTP", s.mtp_layers)) if on]
        if len(s.chunks) > 1:
            extras.append("in flight per chunk: " + ", ".join(str(c.microbatches_in_flight) for c in s.chunks))
        rows.append({"stage": s.stage, "layers": s.label, "extras": "; ".join(extras), "cells": cells,
                     "peak": s.stage == est.peak.stage,
                     "fits": None if fit is None else fit[s.stage]["verdict"]})
        segs = [(key, getattr(s, f"{key}_bytes")) for key, _ in COLUMNS[:5]]
        segs.append(("reserve", s.device_bytes - s.allocated_bytes))
        segs = [{"name": k, "bytes": b, "gib": _gib(b)} for k, b in segs]
        bars.append({"stage": s.stage, "segments": segs, "device_bytes": s.device_bytes,
                     "label": f"{_gib(s.device_bytes)} GiB"})
    peak = est.peak
    summary = (f"Peak: stage {peak.stage}, {_gib(peak.device_bytes)} GiB on each GPU "
               f"({_gib(peak.allocated_bytes)} GiB allocated by PyTorch, {_gib(peak.reserved_bytes)} GiB reserved).")
    verdict = None
    if fit:
        worst = min(fit, key=lambda f: f["headroom_bytes"])
        room, pct, where = worst["headroom_bytes"], worst["headroom_pct"], f"stage {worst['stage']}"
        size = f"{gpu} ({_gib(capacity)} GiB = {capacity / GB:.1f} GB)"
        if worst["fits"]:
            text = f"Fits on {size}: {_gib(room)} GiB ({pct:.1f}%) headroom on the fullest GPU ({where})."
        elif worst["tight"]:
            text = (f"Tight on {size}: {where} needs {_gib(-room)} GiB more than the GPU has, but fits if the "
                    "caching allocator gives back its reserve (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                    "helps).")
        else:
            text = f"Does not fit on {size}: {where} needs {_gib(-room)} GiB ({-pct:.1f}%) more."
        verdict = {"fits": worst["fits"], "verdict": worst["verdict"], "text": text, "headroom_bytes": room}
    p = est.parameters
    params = f"{_count(p.total)} parameters" + (f" ({_count(p.active)} active)" if p.active != p.total else "")
    return {"unit": UNIT, "columns": [{"key": k, "label": lbl} for k, lbl in COLUMNS], "rows": rows, "bars": bars,
            "capacity_bytes": capacity, "scale_bytes": max([b["device_bytes"] for b in bars] + [capacity or 0]),
            "summary": summary, "verdict": verdict, "parameters": params, "parallel": _parallel_text(est.parallel)}


def _parallel_text(par: dict) -> str:
    keys = (("tp", "TP"), ("pp", "PP"), ("vpp", "VPP"), ("cp", "CP"), ("dp", "DP"), ("ep", "EP"), ("etp", "ETP"),
            ("num_microbatches", "micro-batches"))
    return ", ".join(f"{label} {par[k]}" for k, label in keys if par.get(k) not in (None,))


# ---------------------------------------------------------------- exports


def _preset_overrides(cfg: dict, preset: str) -> dict:
    """The fields of ``cfg`` that differ from ``preset``'s; a field removed maps to its default."""
    base = _preset_config(preset)
    out: dict = {}
    for sec in SECTIONS:
        b, c = base.get(sec) or {}, cfg.get(sec) or {}
        out.update({f"{sec}.{k}": _SPECS[f"{sec}.{k}"].default for k in b if k not in c})
        out.update({f"{sec}.{k}": v for k, v in c.items()
                    if b.get(k, UNSET) != v and (k in b or v != _SPECS[f"{sec}.{k}"].default)})
    return out


def _cli_flag(path: str, v) -> str:
    spec = _SPECS[path]
    if spec.type == "bool" and isinstance(v, bool):
        return spec.cli_flag if v else "--no-" + spec.cli_flag[2:]
    if v is None:
        text = "none"
    elif isinstance(v, (list, tuple)):
        text = ",".join(str(x) for x in v)
    else:
        text = str(v)
    return f"{spec.cli_flag} {text}"


def exports(cfg: dict, state: dict) -> dict:
    """The configuration as YAML, as a CLI command and as Megatron-LM arguments (None where impossible)."""
    from . import yamlio
    out = {"yaml": yamlio.dump({k: v for k, v in cfg.items() if v})}
    preset, gpu = state.get("preset") or None, state.get("gpu") or None
    tail = [f"--gpu {gpu}"] if gpu else []
    if preset:
        flags = [_cli_flag(p, v) for p, v in _preset_overrides(cfg, preset).items()]
        out["cli"] = " ".join(["python -m estimator estimate", preset, *flags, *tail])
    else:
        out["cli"] = " ".join(["python -m estimator estimate config.yaml", *tail]) + \
            "   # config.yaml: the YAML configuration"
    try:
        from .megatron_args import to_megatron_args
        lines: list[list[str]] = []
        for tok in to_megatron_args(cfg):
            if tok.startswith("--") or not lines:
                lines.append([tok])
            else:
                lines[-1].append(tok)
        out["megatron"] = " \\\n".join(" ".join(line) for line in lines)
    except ImportError:
        out["megatron"] = None
    except (EstimatorError, ValueError) as exc:
        out["megatron"] = f"# no Megatron-LM arguments: {exc}"
    return out


# ---------------------------------------------------------------- import, layouts


def _flatten(cfg: dict) -> dict:
    return {f"{sec}.{k}": v for sec in SECTIONS for k, v in (cfg.get(sec) or {}).items()}


def import_text(state: dict, kind: str, text: str) -> dict:
    """A new form state from pasted YAML/JSON, a Hugging Face config.json or Megatron launch arguments."""
    current, _ = merged_config(state)
    notes: list[str] = []
    try:
        if kind == "yaml":
            data = parse_text(text)
            if not isinstance(data, dict):
                return _error("import.yaml", None, "expected a mapping with sections model, parallelism, "
                              "training, precision")
            cfg = data
        elif kind == "hf":
            from .hf import from_hf_config
            hub_id = text.strip() if text.strip() and not text.lstrip().startswith("{") else None
            if hub_id:                          # a catalog Hub id, e.g. meta-llama/Llama-3.1-70B
                from .hf_catalog import get
                hf = get(hub_id).config()
            else:
                try:
                    hf = json.loads(text)
                except json.JSONDecodeError as exc:
                    return _error("import.hf", None, f"invalid JSON at line {exc.lineno}: {exc.msg}")
            if not isinstance(hf, dict):
                return _error("import.hf", None, "a config.json holds a JSON object")
            cfg = {**current, "model": from_hf_config(hf)}
            notes.append(f"Model section from {'the catalog config.json of ' + hub_id if hub_id else 'config.json'};"
                         " parallelism, training and precision kept.")
        elif kind == "megatron":
            from .megatron_args import grouped_no_effect, read_megatron_args
            world = (current.get("training") or {}).get("world_size")
            imp = read_megatron_args(text, world_size=world if isinstance(world, int) else None)
            cfg = imp.config
            notes.append("Everything from the arguments, with Megatron-LM's defaults where a flag is absent; "
                         "the number of GPUs kept.")
            notes.extend(imp.notes)
            notes.extend(f"No effect on memory: {', '.join(flags)} ({why})."
                         for flags, why in grouped_no_effect(imp.no_effect))
            flags = {"no_effect": [{"flag": f, "reason": why} for f, why in imp.no_effect]}
        else:
            return _error("import", kind, "unknown import kind; allowed: yaml, hf, megatron")
    except ConfigError as exc:
        return _errors([Problem(f"import.{kind}", p.value, f"{p.field}: {p.message}") for p in exc.problems])
    except (EstimatorError, ValueError) as exc:
        if hasattr(exc, "refused"):     # megatron_args.RefusedFlagsError: one error per refused flag
            out = _errors([Problem(f"import.{kind}", p.value, f"{p.field}: {p.message}")
                           for p in exc.to_problems()])
            out["refused"] = [{"flag": f, "reason": why} for f, why in exc.refused]
            return out
        return _error(f"import.{kind}", None, str(exc))
    out = {"state": {"preset": None, "values": _flatten(cfg), "gpu": state.get("gpu")}, "notes": notes}
    if kind == "megatron":
        out["flags"] = flags
    return out


def layout_state(state: dict, config: dict) -> dict:
    """The form state of a complete configuration: the preset kept, only the differing fields set."""
    preset = state.get("preset") or None
    base = _preset_config(preset) if preset else {}
    values = {}
    for path, v in _flatten(config).items():
        sec, name = path.split(".", 1)
        in_base = name in (base.get(sec) or {})
        if (in_base and base[sec][name] != v) or (not in_base and v != _SPECS[path].default):
            values[path] = v
    return {"preset": preset, "values": values, "gpu": state.get("gpu")}


def find_layouts(state: dict, top: int = 10) -> dict:
    """The best parallel layouts of this model on ``training.world_size`` GPUs of the chosen GPU."""
    cfg, problems = merged_config(state)
    gpu = state.get("gpu")
    if problems:
        return _errors(problems)
    if not gpu:
        return _error("gpu", None, "choose a GPU to search for layouts that fit")
    try:
        from .search import search
        n = load_config(cfg).training.world_size
        result = search(cfg, num_gpus=n, gpu=gpu, top=top)
    except ConfigError as exc:
        return _errors(exc.problems)
    except (EstimatorError, ValueError, NotImplementedError) as exc:
        return _error("search", None, str(exc) or "the layout search is not available in this version")
    layouts = [{"label": lay.label, "why": lay.why, "config": lay.config,
                "peak": f"{_gib(lay.peak_device_bytes)} GiB",
                "headroom": f"{_gib(lay.headroom_bytes)} GiB ({100 * lay.headroom_fraction:.0f}%)"}
               for lay in result.layouts]
    summary = (f"{result.fitting} of {result.enumerated} layouts on {n} GPUs fit ({result.evaluated} evaluated); "
               f"best {len(layouts)} shown.")
    return {"layouts": layouts, "summary": summary}


# ---------------------------------------------------------------- entry points


def boot_data() -> dict:
    """What the page needs before Python starts: schema, presets, GPUs, the default preset's estimate."""
    plist = presets()
    names = [p["name"] for p in plist]
    default = DEFAULT_PRESET if DEFAULT_PRESET in names else (names[0] if names else None)
    state = {"preset": default, "values": {}, "gpu": default_gpu()}
    return {"schema": schema(), "presets": plist, "gpus": gpus(), "unit": UNIT,
            "default": {"state": state, "result": compute(state) if default else None}}


def warm() -> None:
    """Prepare the build-time memory snapshot: import everything a request may need, run one estimate,
    and freeze the heap so that the garbage collector never scans these long-lived objects again."""
    import gc
    import importlib
    for mod in ("presets", "gpus", "hf", "megatron_args", "search", "yamlio"):
        try:
            importlib.import_module(f"estimator.{mod}")
        except ImportError:
            pass
    boot_data()
    gc.collect()
    gc.freeze()


def handle(request: str) -> str:
    """Answer one JSON request (see the module docstring) with a JSON response; never raises."""
    try:
        req = json.loads(request)
        op, state = req.get("op"), req.get("state") or {}
        if op == "compute":
            res = compute(state, bool(req.get("exports", True)))
        elif op == "import":
            res = import_text(state, req.get("kind"), req.get("text") or "")
        elif op == "search":
            res = find_layouts(state, int(req.get("top") or 10))
        elif op == "layout":
            res = {"state": layout_state(state, req.get("config") or {})}
        elif op == "catalog":
            from .catalog import listing
            res = {"models": listing()}
        else:
            res = _error("op", op, "unknown request; allowed: compute, import, search, layout, catalog")
    except Exception as exc:    # the page shows it instead of hanging
        res = _error("internal", None, f"{type(exc).__name__}: {exc}")
    return json.dumps(res, separators=(",", ":"))
