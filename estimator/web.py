"""The calculator's Python entry point: one JSON request in, one JSON response out.

The calculator page runs this module in the browser, under Pyodide, in a Web Worker. JavaScript sends
the form's state and renders what comes back; every number it shows (bytes, GiB strings, the fit
verdict, the headroom) is computed here or in the core this module calls, so the page and the CLI
cannot disagree. The docs build (``hooks/runtime.py``) calls :func:`boot_data` to embed the form
schema, the presets, the GPUs and the default preset's estimate in the page.

The form's state is ``{"preset": name or null, "values": {"section.field": value}, "gpu": name,
"gpu_gib": number}``: ``values`` holds what the user typed over the preset (strings as typed, or JSON
values); an empty string means "not changed" (the preset's value stays), ``"null"`` or JSON null means
null. ``gpu`` is a catalog name, ``"custom"`` (then ``gpu_gib`` is the capacity in GiB) or null (no fit
verdict). Requests, ``{"op": ...}``:

- ``compute`` ``{state, exports, changed}`` -> ``{estimate, fit, view, config, exports, hidden, search_key}``
  or ``{errors, notes, config}``: ``notes`` groups the problems by field, on ``changed`` (the field the user
  just edited) where they involve it, with the nearest valid values (:func:`estimator.advice.fixes`);
  ``exports`` (YAML, CLI command, Megatron arguments) only when asked for;
- ``advice`` ``{state}`` -> ``{choices, steps, levers, hidden}``: the valid values of the quick controls,
  the nearest valid GPU counts, batch sizes and sequence lengths, and the single changes that make the
  configuration fit (:mod:`estimator.advice`);
- ``import`` ``{state, kind: yaml | hf | megatron, text}`` -> ``{state, notes}`` or ``{errors}``; for Megatron
  arguments also ``flags: {no_effect: [{flag, reason}]}``, and with the errors ``refused: [{flag, reason}]``;
  with ``kind: hf`` the text may be a catalog Hub id as well as a config.json;
- ``search`` ``{state, top, options?}`` -> ``{layouts, summary, notes, notation, search_key}`` or ``{errors}``
  (``options``: :func:`estimator.web_plan.search_options`);
- ``layout`` ``{state, config}`` -> ``{state}``: the form state whose configuration is ``config``;
- ``timeline`` ``{state}`` -> ``{timeline, breakdown}``: memory over one step and what is in the
  peak, by module (:mod:`estimator.web_charts`);
- ``suggest``, ``sweep``: see :mod:`estimator.web_plan`; ``compare`` ``{pins}``: :mod:`estimator.web_compare`;
- ``catalog`` -> ``{models}``: the model catalog (:func:`estimator.catalog.listing`), for a picker by Hub id
  and family.

Errors are ``{"field", "value", "message"}`` with the dotted field path, as :class:`~estimator.errors.Problem`.
:func:`handle` never raises and always answers strict JSON (no NaN or Infinity, which the page's
``JSON.parse`` refuses): a request that is not a JSON object of the shape above, or a non-finite number
anywhere in it or in what an import produced, is an error naming where it is.
Imports of the optional modules (presets, GPUs, Hugging Face, Megatron arguments, search) are lazy, so
``import estimator.web`` stays cheap.
"""

from __future__ import annotations

import json
from functools import lru_cache

from . import __version__, advice, estimate as _estimate
from . import yamlio
from .config import load_config, parse_text
from .errors import ConfigError, EstimatorError, Problem, clip, show
from .form import QUICK, hidden_fields, label
from .report import GB, GIB
from .schema import SECTIONS, field_specs, plain_copy
from .verdicts import MEANINGS, WORDS
from .web_checks import request_problem, shape_problems, strict
from .web_view import UNIT, view

__all__ = ["DEFAULT_PRESET", "boot_data", "compute", "handle", "import_text", "schema", "warm"]

#: The preset the page opens with: a model a new user knows, trained as its published recipe trains it,
#: that fits the default GPU with room to spare (a clean first answer).
DEFAULT_PRESET = "qwen3-8b"
DEFAULT_GPU_HINTS = ("h100", "80")
CUSTOM_GPU = "custom"
_SPECS = {s.path: s for s in field_specs()}
#: Fields the layout search chooses: a change to any other field makes its results stale.
_SEARCHED = frozenset({
    "parallelism.tensor_model_parallel_size", "parallelism.pipeline_model_parallel_size",
    "parallelism.virtual_pipeline_model_parallel_size", "parallelism.context_parallel_size",
    "parallelism.expert_model_parallel_size", "parallelism.expert_tensor_parallel_size",
    "parallelism.num_layers_in_first_pipeline_stage", "parallelism.num_layers_in_last_pipeline_stage",
    "parallelism.pipeline_model_parallel_layout", "parallelism.account_for_embedding_in_pipeline_split",
    "parallelism.account_for_loss_in_pipeline_split", "parallelism.microbatch_group_size_per_vp_stage",
    "training.micro_batch_size", "training.use_distributed_optimizer", "training.sequence_parallel",
    "training.recompute_granularity", "training.recompute_method", "training.recompute_num_layers",
    "training.recompute_modules"})


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
def _preset_config(name: str) -> dict:
    """Preset ``name`` as its file writes it (shared: copy it before changing it)."""
    from .presets import check_preset_name, load_preset
    check_preset_name(name, _preset_names())
    return load_preset(name).to_dict()


@lru_cache(maxsize=1)
def _preset_names() -> list[str]:
    """The presets' names, read once. In the browser the memory snapshot holds them: the package's files are
    unpacked only after Python's first answers, and until then an unknown preset must still be named with the
    closest known one."""
    from .presets import list_presets
    return list_presets()


def presets() -> list[dict]:
    """Every preset: name, title, provenance and its configuration as written."""
    try:
        from .presets import preset_info
    except ImportError:
        return []
    out = []
    for name in _preset_names():
        info = preset_info(name)
        out.append({"name": name, "title": info.get("title") or name, "source": info.get("source"),
                    "recipe": info.get("recipe"), "config": _preset_config(name)})
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
            base = plain_copy(_preset_config(name))
        except EstimatorError as exc:
            problems.append(Problem("preset", name, str(exc).strip("'\"")))
    cfg = {sec: dict(base.get(sec) or {}) for sec in SECTIONS}
    for path, raw in (state.get("values") or {}).items():
        if path not in _SPECS:
            problems.append(Problem(clip(path) or "state.values", raw, f"unknown field {show(path)}"))
            continue
        section, field = path.split(".", 1)
        value = parse_value(path, raw)
        if value is not UNSET:
            cfg[section][field] = value
    return cfg, problems


def _errors(problems) -> dict:
    return {"errors": [p.to_dict() if isinstance(p, Problem) else p for p in problems]}


def _error(field: str, value, message: str) -> dict:
    return _errors([Problem(field, value, message)])


# ---------------------------------------------------------------- compute


def _capacity(state: dict) -> tuple[str | None, int | None, list[Problem]]:
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
    if gpu not in _gpus():
        return None, None, [Problem("gpu", gpu, f"unknown GPU; known: {', '.join(_gpus())}")]
    return gpu, _gpus()[gpu].memory_bytes, []


def search_key(cfg: dict, state: dict) -> str:
    """What a layout search depends on: the configuration without the fields it chooses, and the GPU."""
    rest = {p: v for p, v in _flatten(cfg).items() if p not in _SEARCHED}
    return json.dumps([rest, state.get("gpu"), state.get("gpu_gib") if state.get("gpu") == CUSTOM_GPU else None],
                      sort_keys=True, default=str)


def compute(state: dict, with_exports: bool = True, changed: str | None = None) -> dict:
    """Estimate the configuration of a form state; errors name the field they concern."""
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = _capacity(state)
    problems += gpu_problems
    if not problems:
        try:
            config = load_config(cfg)
            est = _estimate(config)
        except ConfigError as exc:
            problems = list(exc.problems)
        except (EstimatorError, ValueError) as exc:
            return {**_error("config", None, str(exc)), "config": cfg}
    if problems:
        return {**_errors(problems), "notes": advice.fixes(cfg, problems, changed), "config": cfg,
                "hidden": hidden_fields(cfg)}
    from .gpus import fit
    fits = fit(est, capacity) if capacity else None
    return {"estimate": est.to_dict(), "fit": [f.to_dict() for f in fits] if fits else None,
            "view": view(est, fits, gpu, capacity, cfg), "config": cfg,
            "exports": exports(cfg, state) if with_exports else None,
            "hidden": hidden_fields(cfg), "search_key": search_key(cfg, state)}


def advise(state: dict) -> dict:
    """The valid values of the quick controls and, when the configuration does not fit its GPU, the single
    changes that make it fit."""
    cfg, problems = merged_config(state)
    _, capacity, gpu_problems = _capacity(state)
    out = {"choices": advice.choices(cfg), "hidden": hidden_fields(cfg), "levers": [], "steps": advice.steps(cfg)}
    if capacity and not problems and not gpu_problems:
        out["levers"] = [{**lv, "peak": f"{lv['peak_bytes'] / GIB:.2f} GiB"} for lv in advice.levers(cfg, capacity)]
    return out


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
    tail = [f"--gpu {gpu}"] if gpu and gpu != CUSTOM_GPU else []
    if gpu == CUSTOM_GPU and state.get("gpu_gib") not in (None, ""):
        tail = [f"--gpu-memory {state.get('gpu_gib')}"]
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
            problems = shape_problems(data, "import.yaml")
            if problems:
                return _errors(problems)
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
    """The form state whose configuration is ``config`` (complete, e.g. a search result): the preset kept,
    only the fields that differ from it set. A field the preset sets and ``config`` leaves out (an uneven
    split, the interleaved schedule, recompute settings of another layout) is set to its default, so the
    state gives exactly ``config``'s estimate."""
    preset = state.get("preset") or None
    base = _flatten(_preset_config(preset)) if preset else {}
    target = _flatten(config)
    values = {}
    for path, v in target.items():
        if path in base:
            if base[path] != v:
                values[path] = v
        elif v != _SPECS[path].default:
            values[path] = v
    for path in base:
        if path not in target:
            values[path] = _SPECS[path].default
    out = {"preset": preset, "values": values, "gpu": state.get("gpu")}
    if state.get("gpu") == CUSTOM_GPU:
        out["gpu_gib"] = state.get("gpu_gib")
    return out


#: How to read a layout label, shown beside the search results.
NOTATION = ("How to read a layout: TP tensor, PP pipeline, VPP virtual pipeline (interleaved schedule), CP "
            "context, EP expert, ETP expert tensor and DP data-parallel size; mbs the micro-batch size, then the "
            "recomputation. PP16[1/-] means 16 pipeline stages whose first holds 1 layer and whose last holds "
            "the even share of the rest (-): the numbers in brackets are num_layers_in_first_pipeline_stage / "
            "num_layers_in_last_pipeline_stage. no-distopt: without the distributed optimizer.")


def _words(lay) -> str:
    """A search layout in words, e.g. "TP 2, 16 pipeline stages (first 1 layer), EP 32, ..."."""
    pp = f"{lay.pp} pipeline stage{'s' if lay.pp > 1 else ''}"
    split = [f"{which} stage {n} layer{'s' if n != 1 else ''}" for which, n in
             (("first", lay.first_stage_layers), ("last", lay.last_stage_layers)) if n is not None]
    if split:
        pp += " (" + ", ".join(split) + ")"
    parts = [f"TP {lay.tp}", pp]
    if lay.vpp > 1:
        parts.append(f"{lay.vpp} virtual stages each")
    if lay.cp > 1:
        parts.append(f"CP {lay.cp}")
    if lay.ep > 1 or lay.etp != lay.tp:
        parts.append(f"EP {lay.ep}, ETP {lay.etp}")
    parts.append(f"DP {lay.dp}")
    parts.append(f"micro-batch {lay.micro_batch_size}")
    parts.append({"none": "no recomputation", "selective": "selective recomputation",
                  "full": "full recomputation"}[lay.recompute])
    if lay.sequence_parallel:
        parts.append("sequence parallel")
    return ", ".join(parts)


def _catalog_label(m: dict) -> str:
    """The model picker's line for one catalog model: its family and size, or why it is not supported."""
    if not (m["supported"] and m.get("parameters")):
        return f"{m['family']} · not supported: {m.get('reason') or ''}"
    n = m["parameters"]["total"]
    return f"{m['family']} · {n / 1e9:.1f}B parameters" if n >= 1e9 else f"{m['family']} · {n / 1e6:.0f}M parameters"


def find_layouts(state: dict, top: int = 10, **options) -> dict:
    """The best parallel layouts of this model on ``training.world_size`` GPUs of the chosen GPU; ``options``
    go to :func:`estimator.search.search` (``num_gpus``, ``headroom``, pinned fields: see
    :func:`estimator.web_plan.search_options`)."""
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = _capacity(state)
    if problems or gpu_problems:
        return _errors(problems + gpu_problems)
    if not capacity:
        return _error("gpu", None, "choose a GPU to search for layouts that fit")
    try:
        from .search import search
        n = options.pop("num_gpus", None) or load_config(cfg).training.world_size
        result = search(cfg, num_gpus=n, gpu=gpu if state.get("gpu") != CUSTOM_GPU else capacity, top=top, **options)
    except ConfigError as exc:
        return _errors(exc.problems)
    except (EstimatorError, ValueError, NotImplementedError) as exc:
        return _error("search", None, str(exc) or "the layout search is not available in this version")
    several = len(result.num_gpus) > 1
    layouts = [{"label": lay.label, "words": (f"{lay.num_gpus:,} GPUs: " if several else "") + _words(lay),
                "why": lay.why, "config": lay.config, "num_gpus": lay.num_gpus,
                "peak": f"{lay.peak_device_bytes / GIB:.2f} GiB", "peak_bytes": lay.peak_device_bytes,
                "headroom": f"{lay.headroom_bytes / GIB:.2f} GiB ({100 * lay.headroom_fraction:.0f} %)"}
               for lay in result.layouts]
    return {"layouts": layouts, "summary": result.summary(), "notes": list(result.notes), "notation": NOTATION,
            "gpus": n if not several else ", ".join(f"{g:,}" for g in result.num_gpus), "gpu": gpu, "elapsed_s": round(result.elapsed_s, 3), "search_key": search_key(cfg, state)}


# ---------------------------------------------------------------- entry points


def precomputed(name: str, gpu: str | None) -> dict:
    """What the page shows of preset ``name`` on ``gpu`` before Python starts: the view, the quick controls'
    values and the hidden fields (no estimate object: the page marks these numbers as precomputed)."""
    state = {"preset": name, "values": {}, "gpu": gpu}
    res = compute(state, with_exports=False)
    if "errors" in res:
        return {"errors": res["errors"], "notes": res["notes"], "hidden": res["hidden"]}
    return {"view": res["view"], "hidden": res["hidden"], "search_key": res["search_key"],
            "choices": advice.choices(res["config"])}


def boot_data() -> dict:
    """What the page needs before Python starts: schema, presets (each with its precomputed estimate on the
    default GPU), GPUs, the quick controls, the verdict vocabulary."""
    plist = presets()
    names = [p["name"] for p in plist]
    default = DEFAULT_PRESET if DEFAULT_PRESET in names else (names[0] if names else None)
    gpu = default_gpu()
    for p in plist:
        p["precomputed"] = precomputed(p["name"], gpu)
    return {"schema": schema(), "presets": plist, "gpus": gpus(), "unit": UNIT, "version": __version__,
            "quick": [{"path": p, "label": lbl} for p, lbl in QUICK],
            "verdicts": [{"verdict": k, "word": WORDS[k], "meaning": MEANINGS[k]} for k in WORDS],
            "default": {"state": {"preset": default, "values": {}, "gpu": gpu}}}


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
        from .catalog import listing
        return {"models": [{**m, "label": _catalog_label(m)} for m in listing()]}
    if op == "import":
        return import_text(state, req.get("kind"), req.get("text") or "")
    if op == "search":
        if req.get("options") is not None:       # the page's search options (estimator.web_plan)
            from . import web_plan
            return web_plan.search_with_options(state, req.get("top") or 10, req["options"])
        return find_layouts(state, req.get("top") or 10)
    if op == "timeline":
        from .web_charts import charts
        return charts(state)
    if op in ("suggest", "sweep"):               # "Make it fit" and the sweeps (estimator.web_plan)
        from . import web_plan
        return web_plan.answer(op, req)
    if op == "compare":                          # pinned configurations side by side
        from .web_compare import compare
        return compare(req.get("pins"))
    config = req.get("config") or {}
    problems = shape_problems(config, "config")
    if problems:
        return _errors(problems)
    try:
        return {"state": layout_state(state, config)}
    except EstimatorError as exc:
        return _error("preset", state.get("preset"), str(exc).strip("'\""))


def handle(request: str) -> str:
    """Answer one JSON request (see the module docstring) with a strict-JSON response; never raises."""
    try:
        try:
            req = yamlio.load_json(request) if isinstance(request, str) else None
        except yamlio.YamlError as exc:
            res = _error("request", None, f"invalid JSON: {exc}")
        else:
            problem = request_problem(req)
            res = _errors([problem]) if problem else _answer(req)
        try:                    # almost always: no NaN or infinity in the answer, nothing to look for
            return json.dumps(res, separators=(",", ":"), allow_nan=False)
        except ValueError:
            return json.dumps(strict(res), separators=(",", ":"), allow_nan=False)
    except Exception as exc:    # a bug of ours: the page shows it instead of waiting for ever
        return json.dumps(_error("internal", None, f"{type(exc).__name__}: {clip(str(exc))}"),
                          separators=(",", ":"))
