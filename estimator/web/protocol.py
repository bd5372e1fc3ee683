"""The calculator's Python entry point: one JSON request in, one JSON response out.

The calculator page runs this module in the browser, under Pyodide, in a Web Worker. JavaScript sends
the form's state and renders what comes back; every number it shows (bytes, GiB strings, the fit
verdict, the headroom) is computed here or in the core this module calls, so the page and the CLI
cannot disagree. The docs build (``hooks/runtime.py``) calls :func:`boot_data` to embed the form
schema, the presets, the GPUs and the default preset's estimate in the page.

The form's state is ``{"preset": name or null, "hf": Hub id or null, "values": {"section.field": value}, "gpu": name,
"gpu_gib": number}``: ``hf`` names a model of the offline catalog whose ``config.json`` gives the model section over the
preset's (:func:`estimator.web.state.base_config`, as ``estimate [PRESET] --hf ID``); ``values`` holds what the user typed over the preset (strings as typed, or JSON
values); an empty string means "not changed" (the preset's value stays), ``"null"`` or JSON null means
null. ``gpu`` is a catalog name, ``"custom"`` (then ``gpu_gib`` is the capacity in GiB) or null (no fit
verdict). Requests, ``{"op": ...}``:

- ``compute`` ``{state, exports, changed}`` -> ``{estimate, fit, view, config, exports, hidden, search_key,
  implied}`` or ``{errors, notes, config, implied}``, both with ``hf_model`` (the model section of ``state.hf``) where
  the state names a catalog model: ``notes`` groups the problems by field, on ``changed`` (the
  field the user just edited) where they involve it, with the nearest valid values
  (:func:`estimator.plan.advice.fixes`); ``exports`` (YAML, CLI command, Megatron arguments) only when asked for;
  ``implied``: what the typed values changed in fields the user left alone, one sentence each, the CLI's notes
  (:func:`estimator.config.load.implied_changes`: TP 1 turns off the preset's sequence parallelism, a recompute
  granularity of none drops the preset's recompute method and layer count, ...);
- ``advice`` ``{state}`` -> ``{choices, steps, levers, hidden}``: the valid values of the quick controls,
  the nearest valid GPU counts, batch sizes and sequence lengths, and the single changes that make the
  configuration fit (:mod:`estimator.plan.advice`);
- ``import`` ``{state, kind: yaml | hf | megatron | bridge, text}`` -> ``{state, notes}`` or ``{errors}``; for
  Megatron arguments and a Megatron-Bridge ``config.yaml`` also ``flags: {no_effect: [{flag, reason}]}`` (a Bridge
  field as ``section.field = value``), and with the errors ``refused: [{flag, reason}]``;
  with ``kind: hf`` the text may be a catalog Hub id as well as a config.json;
- ``search`` ``{state, top, options?}`` -> ``{layouts, summary, notes, notation, search_key}`` or ``{errors}``
  (``options``: :func:`estimator.web.plan.search_options`);
- ``layout`` ``{state, config}`` -> ``{state}``: the form state whose configuration is ``config``;
- ``timeline`` ``{state}`` -> ``{timeline, breakdown}``: memory over one step and what is in the
  peak, by module (:mod:`estimator.web.charts`);
- ``suggest``, ``sweep``: see :mod:`estimator.web.plan`; ``compare`` ``{pins}``: :mod:`estimator.web.compare`;
- ``catalog`` -> ``{models, options}``: the model catalog (:func:`estimator.formats.catalog.listing`), for a picker by
  Hub id and family, and the Model box's completion list (presets and catalog ids, :func:`estimator.web.models.options`);
- ``model`` ``{state, name}`` -> ``{preset}``, ``{state, notes, hf}`` or ``{errors, closest}``: the Model box, a preset
  name or a catalog Hub id (:func:`estimator.web.models.pick`).

Errors are ``{"field", "value", "message"}`` with the dotted field path, as :class:`~estimator.config.errors.Problem`.
A request longer than :data:`~estimator.config.input_size.MAX_REQUEST_CHARS` (8 MiB) is refused before it is parsed;
the texts it carries (an import) are held to :data:`~estimator.config.input_size.MAX_INPUT_BYTES` (1 MiB), as on
the command line.
:func:`handle` never raises and always answers strict JSON (no NaN or Infinity, which the page's
``JSON.parse`` refuses): a request that is not a JSON object of the shape above, or a non-finite number
anywhere in it or in what an import produced, is an error naming where it is.
Imports of the optional modules (presets, GPUs, Hugging Face, Megatron arguments, search) are lazy, so
``import estimator.web`` stays cheap.
"""

from __future__ import annotations

import json

from ..config import yamlio
from ..config.errors import ConfigError, EstimatorError, Problem, clip
from ..config.input_size import MAX_REQUEST_CHARS, text_problem
from ..config.load import load_config, parse_text
from ..config.schema import SECTIONS
from ..memory.assemble import estimate as _estimate
from ..memory.report import GIB
from ..plan import advice
from ..plan.verdicts import MEANINGS, WORDS
from ..version import __version__
from .checks import request_problem, shape_problems, strict
from .form import QUICK, hidden_fields
from .layouts import find_layouts, layout_state, search_key
from .state import (CUSTOM_GPU, FIELD_SPECS, UNSET, default_gpu, error_answer, errors_answer, flatten, gpus,
                    merged, merged_config, preset_config, presets, schema, state_capacity)
from .view import UNIT, preset_about, view

__all__ = ["DEFAULT_PRESET", "boot_data", "catalog_precomputed", "compute", "handle", "hf_precomputed", "import_text",
           "schema", "warm"]

#: The preset the page opens with: a model a new user knows, trained as its published recipe trains it,
#: that fits the default GPU with room to spare (a clean first answer).
DEFAULT_PRESET = "qwen3-8b"

def compute(state: dict, with_exports: bool = True, changed: str | None = None) -> dict:
    """Estimate the configuration of a form state; errors name the field they concern."""
    cfg, problems, implied = merged(state)
    gpu, capacity, gpu_problems = state_capacity(state)
    problems += gpu_problems
    if not problems:
        try:
            config = load_config(cfg)
            est = _estimate(config)
        except ConfigError as exc:
            problems = list(exc.problems)
        except (EstimatorError, ValueError) as exc:
            return {**error_answer("config", None, str(exc)), "config": cfg, "implied": implied}
    if problems:
        return {**errors_answer(problems), "notes": advice.fixes(cfg, problems, changed), "config": cfg,
                "hidden": hidden_fields(cfg), "implied": implied, **_hf_base(state)}
    from ..formats.gpus import fit
    fits = fit(est, capacity) if capacity else None
    overload = None
    if capacity and config.model.num_experts:
        from ..plan.headroom import overload_headroom
        overload = overload_headroom(config, capacity, estimate=est)
    shown = view(est, fits, gpu, capacity, cfg, overload, model=_model_name(state))
    same = bool(state.get("preset")) and not state.get("hf") and (
        not state.get("values") or cfg == merged({"preset": state["preset"], "values": {}, "gpu": state.get("gpu")})[0])
    shown["preset"] = preset_about(state, shown["verdict"], same)
    return {"estimate": est.to_dict(), "fit": [f.to_dict() for f in fits] if fits else None,
            "view": shown, "config": cfg,
            "exports": exports(cfg, state) if with_exports else None,
            "hidden": hidden_fields(cfg), "search_key": search_key(cfg, state), "implied": implied, **_hf_base(state)}


def _hf_base(state: dict) -> dict:
    """``{"hf_model": model section}`` of a state's catalog model (what the form's model fields show under the
    values typed over it), ``{}`` without one or for an id the catalog does not have."""
    if not state.get("hf"):
        return {}
    from .state import hf_model
    try:
        return {"hf_model": hf_model(state["hf"])[0]}
    except EstimatorError:
        return {}


def _model_name(state: dict) -> str | None:
    """The catalog id a state's model comes from, as the page names it (None for a preset's or a typed model)."""
    if not state.get("hf"):
        return None
    from .state import hf_model
    return hf_model(state["hf"])[1]


def advise(state: dict) -> dict:
    """The valid values of the quick controls and, when the configuration does not fit its GPU, the single
    changes that make it fit."""
    cfg, problems = merged_config(state)
    _, capacity, gpu_problems = state_capacity(state)
    out = {"choices": advice.choices(cfg, gpus=True), "hidden": hidden_fields(cfg), "levers": [], "steps": advice.steps(cfg)}
    if capacity and not problems and not gpu_problems:
        out["levers"] = [{**lv, "peak": f"{lv['peak_bytes'] / GIB:.2f} GiB"} for lv in advice.levers(cfg, capacity)]
    return out


# ---------------------------------------------------------------- exports


def _preset_overrides(cfg: dict, state: dict) -> dict:
    """The fields of ``cfg`` that differ from the state's base (its preset, with its catalog model); a field removed
    maps to its default."""
    from .state import base_config
    base, _ = base_config(state)
    out: dict = {}
    for sec in SECTIONS:
        b, c = base.get(sec) or {}, cfg.get(sec) or {}
        out.update({f"{sec}.{k}": FIELD_SPECS[f"{sec}.{k}"].default for k in b if k not in c})
        out.update({f"{sec}.{k}": v for k, v in c.items()
                    if b.get(k, UNSET) != v and (k in b or v != FIELD_SPECS[f"{sec}.{k}"].default)})
    return out


def _cli_flag(path: str, v) -> str:
    spec = FIELD_SPECS[path]
    if spec.type == "bool" and isinstance(v, bool):
        return spec.cli_flag if v else "--no-" + spec.cli_flag[2:]
    if v is None:
        text = "none"
    elif isinstance(v, (list, tuple)):
        text = ",".join(str(x) for x in v)
    else:
        text = str(v)
    from shlex import quote         # here, not at import: the page imports this module before its first result
    return f"{spec.cli_flag} {quote(text)}"     # a glob (precision.quant_recipe) must reach the CLI as typed


def exports(cfg: dict, state: dict) -> dict:
    """The configuration as YAML, as a CLI command and as Megatron-LM arguments (None where impossible)."""
    from ..config import yamlio
    out = {"yaml": yamlio.dump({k: v for k, v in cfg.items() if v})}
    preset, gpu = state.get("preset") or None, state.get("gpu") or None
    hf = _model_name(state)
    tail = [f"--gpu {gpu}"] if gpu and gpu != CUSTOM_GPU else []
    if gpu == CUSTOM_GPU and state.get("gpu_gib") not in (None, ""):
        tail = [f"--gpu-memory {state.get('gpu_gib')}"]
    if preset or hf:
        flags = [_cli_flag(p, v) for p, v in _preset_overrides(cfg, state).items()]
        source = [preset] if preset else []
        source += [f"--hf {hf}"] if hf else []
        out["cli"] = " ".join(["python -m estimator estimate", *source, *flags, *tail])
    else:
        out["cli"] = " ".join(["python -m estimator estimate config.yaml", *tail]) + \
            "   # config.yaml: the YAML configuration"
    try:
        from ..formats.megatron_args import to_megatron_args
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
    try:
        from ..formats.bridge.export import to_bridge_overrides
        out["bridge"] = " \\\n".join(to_bridge_overrides(cfg))
    except ImportError:
        out["bridge"] = None
    except (EstimatorError, ValueError) as exc:
        out["bridge"] = f"# no Megatron-Bridge overrides: {exc}"
    return out


def import_text(state: dict, kind: str, text: str) -> dict:
    """A new form state from pasted YAML/JSON, a Hugging Face config.json or Megatron launch arguments."""
    current, _ = merged_config(state)
    notes: list[str] = []
    try:
        if kind == "yaml":
            data = parse_text(text)
            if not isinstance(data, dict):
                return error_answer("import.yaml", None, "expected a mapping with sections model, parallelism, "
                              "training, precision")
            problems = shape_problems(data, "import.yaml")
            if problems:
                return errors_answer(problems)
            cfg = data
        elif kind == "hf":
            from ..formats.hf import from_hf_config
            hub_id = text.strip() if text.strip() and not text.lstrip().startswith("{") else None
            if hub_id:                          # a catalog Hub id, e.g. meta-llama/Llama-3.1-70B
                from ..formats.hf_catalog import resolve
                entry, sibling = resolve(hub_id)
                hf = entry.config()
                if sibling:
                    notes.append(sibling + ".")
            else:                               # the readers' limits: size, depth, duplicate keys
                too_large = text_problem(text, "import.hf", "the config.json")
                if too_large:
                    return errors_answer([too_large])
                try:
                    hf = yamlio.load_json(text)
                except yamlio.YamlError as exc:
                    return error_answer("import.hf", None, f"invalid JSON: {exc}")
            if not isinstance(hf, dict):
                return error_answer("import.hf", None, "a config.json holds a JSON object")
            cfg = {**current, "model": from_hf_config(hf)}
            notes.append(f"Model section from {'the catalog config.json of ' + hub_id if hub_id else 'config.json'};"
                         " parallelism, training and precision kept.")
        elif kind == "megatron":
            from ..formats.megatron_args import grouped_no_effect, read_megatron_args
            world = (current.get("training") or {}).get("world_size")
            imp = read_megatron_args(text, world_size=world if isinstance(world, int) else None)
            cfg = imp.config
            notes.append("Everything from the arguments, with Megatron-LM's defaults where a flag is absent; "
                         "the number of GPUs kept.")
            notes.extend(imp.notes)
            notes.extend(f"No effect on memory: {', '.join(flags)} ({why})."
                         for flags, why in grouped_no_effect(imp.no_effect))
            flags = {"no_effect": [{"flag": f, "reason": why} for f, why in imp.no_effect]}
        elif kind == "bridge":
            from ..formats.bridge.config import read_bridge_config
            world = (current.get("training") or {}).get("world_size")
            imp = read_bridge_config(text, world_size=world if isinstance(world, int) else None)
            cfg = imp.config
            notes.append("Everything from the Megatron-Bridge configuration, with Bridge's rules (the precision "
                         "preset, CommOverlapConfig) and defaults; the number of GPUs kept.")
            notes.extend(imp.notes)
            if imp.no_effect:
                notes.append(f"No effect on memory: {', '.join(f.split(' = ')[0] for f, _ in imp.no_effect)}.")
            flags = {"no_effect": [{"flag": f, "reason": why} for f, why in imp.no_effect]}
        else:
            return error_answer("import", kind, "unknown import kind; allowed: yaml, hf, megatron, bridge")
    except ConfigError as exc:
        return errors_answer([Problem(f"import.{kind}", p.value, f"{p.field}: {p.message}") for p in exc.problems])
    except (EstimatorError, ValueError) as exc:
        if hasattr(exc, "refused"):     # megatron_args.RefusedFlagsError: one error per refused flag
            out = errors_answer([Problem(f"import.{kind}", p.value, f"{p.field}: {p.message}")
                           for p in exc.to_problems()])
            out["refused"] = [{"flag": f, "reason": why} for f, why in exc.refused]
            return out
        return error_answer(f"import.{kind}", None, str(exc))
    out = {"state": {"preset": None, "values": flatten(cfg), "gpu": state.get("gpu")}, "notes": notes}
    if kind in ("megatron", "bridge"):
        out["flags"] = flags
    return out


# ---------------------------------------------------------------- entry points


def precomputed(name: str, gpu: str | None) -> dict:
    """What the page shows of preset ``name`` on ``gpu`` before Python starts: the view, the quick controls'
    values and the hidden fields (no estimate object: the page marks these numbers as precomputed)."""
    return _precomputed_state({"preset": name, "values": {}, "gpu": gpu})


def _precomputed_state(state: dict) -> dict:
    res = compute(state, with_exports=False)
    if "errors" in res:
        return {"errors": res["errors"], "notes": res["notes"], "hidden": res["hidden"]}
    return {"view": res["view"], "hidden": res["hidden"], "search_key": res["search_key"],
            "choices": advice.choices(res["config"], gpus=True)}


def hf_precomputed(hub_id: str, state: dict | None = None) -> dict:
    """What the page shows of a short link ``?hf=ID`` before Python starts, as Python will show it: the Model box's
    answer for ``hub_id`` over the page's opening ``state`` (default: :func:`boot_data`'s; the form state, its
    notes and its model section, :func:`estimator.web.models.pick`) and :func:`precomputed`'s view of that state.
    ``{"errors", "closest"}`` for an id the Model box refuses (the page then waits for Python)."""
    from .models import pick
    if state is None:
        state = boot_data(precompute=False)["default"]["state"]
    picked = pick(state, hub_id)
    if "state" not in picked:
        return {"errors": picked.get("errors") or [], "closest": picked.get("closest") or []}
    return {"hf": picked["hf"], "state": picked["state"], "notes": picked["notes"],
            "hf_model": _hf_base(picked["state"]).get("hf_model"), **_precomputed_state(picked["state"])}


def catalog_precomputed() -> tuple[dict, dict]:
    """:func:`hf_precomputed` of every catalog id, for the site build: ``({id: result}, {id: why it has none})``
    (an id the Model box refuses, or whose estimate is an error on the page's opening layout, has none: the page
    waits for Python)."""
    from ..formats.hf_catalog import ids
    state = boot_data(precompute=False)["default"]["state"]
    done, missing = {}, {}
    for hub_id in ids():
        res = hf_precomputed(hub_id, state)
        if "view" in res:
            done[hub_id] = res
        else:
            missing[hub_id] = "; ".join(e["message"] for e in res["errors"]) or "no estimate"
    return done, missing


def boot_data(precompute: bool = True) -> dict:
    """What the page needs before Python starts: schema, presets (each with its precomputed estimate on the
    default GPU, unless ``precompute`` is false), GPUs, the Model box's completion list (presets and catalog ids,
    :func:`estimator.web.models.options`), the quick controls, the verdict vocabulary."""
    plist = presets()
    names = [p["name"] for p in plist]
    default = DEFAULT_PRESET if DEFAULT_PRESET in names else (names[0] if names else None)
    gpu = default_gpu()
    for p in plist if precompute else ():
        p["precomputed"] = precomputed(p["name"], gpu)
    from .models import options
    return {"schema": schema(), "presets": plist, "gpus": gpus(), "unit": UNIT, "version": __version__,
            "models": options(),
            "quick": [{"path": p, "label": lbl} for p, lbl in QUICK],
            "verdicts": [{"verdict": k, "word": WORDS[k], "meaning": MEANINGS[k]} for k in WORDS],
            "default": {"state": {"preset": default, "values": {}, "gpu": gpu}}}


def warm() -> None:
    """Prepare the build-time memory snapshot: import everything a request may need, run one estimate,
    and freeze the heap so that the garbage collector never scans these long-lived objects again."""
    import gc
    import importlib
    for mod in ("formats.presets", "formats.gpus", "formats.hf", "formats.megatron_args", "plan.search",
                "config.yamlio"):
        try:
            importlib.import_module(f"estimator.{mod}")
        except ImportError:
            pass
    boot_data()
    gc.collect()
    gc.freeze()
    # A request allocates tens of thousands of short-lived objects: collecting the youngest generation every
    # 20,000 allocations instead of 2,000 takes a tenth off a request under Pyodide (measured under Node.js:
    # median 4.0 -> 3.6 ms, 90th percentile 5.8 -> 4.4 ms for a DeepSeek-V3 estimate); memory is no concern.
    gc.set_threshold(20_000, 20, 20)


def _answer(req: dict) -> dict:
    op, state = req["op"], req.get("state") or {}
    if op == "compute":
        changed = req.get("changed")
        return compute(state, bool(req.get("exports", True)), changed if isinstance(changed, str) else None)
    if op == "advice":
        return advise(state)
    if op == "catalog":
        from ..formats.catalog import listing
        from .models import hf_label, options
        return {"models": [{**m, "label": hf_label(m)} for m in listing()], "options": options()}
    if op == "model":                            # the Model box: a preset or a catalog Hub id (estimator.web.models)
        from .models import pick
        return pick(state, req.get("name"))
    if op == "import":
        return import_text(state, req.get("kind"), req.get("text") or "")
    if op == "search":
        if req.get("options") is not None:       # the page's search options (estimator.web.plan)
            from . import plan as web_plan
            return web_plan.search_with_options(state, req.get("top") or 10, req["options"])
        return find_layouts(state, req.get("top") or 10)
    if op == "timeline":
        from .charts import charts
        return charts(state)
    if op in ("suggest", "sweep"):               # "Make it fit" and the sweeps (estimator.web.plan)
        from . import plan as web_plan
        return web_plan.answer(op, req)
    if op == "compare":                          # pinned configurations side by side
        from .compare import compare
        return compare(req.get("pins"))
    config = req.get("config") or {}
    problems = shape_problems(config, "config")
    if problems:
        return errors_answer(problems)
    try:
        return {"state": layout_state(state, config)}
    except EstimatorError as exc:
        return error_answer("preset", state.get("preset"), str(exc).strip("'\""))


def _answer_text(request) -> dict:
    """The answer to a request text: its size first (before anything is parsed), then its JSON and its shape."""
    req = None                  # (not a text: refused as not a JSON object, below)
    if isinstance(request, str):
        too_large = text_problem(request, "request", "the request", MAX_REQUEST_CHARS)
        if too_large:
            return errors_answer([too_large])
        try:
            req = yamlio.load_json(request, limit=MAX_REQUEST_CHARS)
        except yamlio.YamlError as exc:
            return error_answer("request", None, f"invalid JSON: {exc}")
    problem = request_problem(req)
    return errors_answer([problem]) if problem else _answer(req)


def handle(request: str) -> str:
    """Answer one JSON request (see the module docstring) with a strict-JSON response; never raises."""
    try:
        res = _answer_text(request)
        try:                    # almost always: no NaN or infinity in the answer, nothing to look for
            return json.dumps(res, separators=(",", ":"), allow_nan=False)
        except ValueError:
            return json.dumps(strict(res), separators=(",", ":"), allow_nan=False)
    except Exception as exc:    # a bug of ours: the page shows it instead of waiting for ever
        return json.dumps(error_answer("internal", None, f"{type(exc).__name__}: {clip(str(exc))}"),
                          separators=(",", ":"))
