"""The calculator's planning requests: what makes a configuration fit, and how its memory moves.

:func:`estimator.web.handle` passes these requests here (the form's state as in :mod:`estimator.web`):

- ``suggest`` ``{state}`` -> ``{suggestions, gpus, capacity}``: the cheapest changes after which every stage
  fits the chosen GPU (:func:`estimator.plan.suggest.suggest`), each with the form fields to set (``set``), the
  CLI flags, the new peak, the memory saved and the relative step time, in words as well as in numbers;
  empty when the configuration fits or no GPU is chosen; ``not_proposed``: why each lever the verdict can name
  (sequence parallelism, expert parallelism, recomputation, offloading, FSDP) is not in the list;
- ``sweep`` ``{state}`` -> :func:`estimator.plan.sweep.sweep_view`: the peak-stage memory against the sequence
  length, the micro-batch size and the GPU count, with the fit boundaries (the CLI's reverse questions);
  ``{state, min_gpus: true, options?}`` -> ``{min_gpus: {value, label, words, reason}}``: the fewest GPUs on which
  some layout fits (:func:`estimator.plan.search.min_gpus`, a layout search per candidate count: seconds), with the
  search options' TP and keep-free setting (none kept free by default, as the verdict).

The layout search of the page takes options (:func:`search_options`): the GPU counts to search, a tensor
parallel size and an expert parallel size to keep fixed, the keep-free percent. Errors are ``{"errors": [{field, value, message}]}`` as everywhere in
the calculator.
"""

from __future__ import annotations

from ..config.errors import ConfigError, EstimatorError
from ..config.schema import MAX_EXPERTS
from ..formats.gpus import KEEP_FREE
from ..memory.report import GIB
from .state import error_answer, errors_answer, merged_config, state_capacity

__all__ = ["answer", "search_options", "search_with_options", "suggestions", "sweeps"]

#: Most GPU counts one search from the page takes.
MAX_GPU_COUNTS = 8


def suggestions(state: dict) -> dict:
    """The "Make it fit" list of a form state."""
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = state_capacity(state)
    if problems or gpu_problems:
        return errors_answer(problems + gpu_problems)
    if not capacity:
        return {"suggestions": [], "gpu": None}
    from ..config.load import load_config
    from ..plan.suggest import notes, suggest_with_reasons, target_text
    world = (cfg.get("training") or {}).get("world_size")
    try:
        load_config(cfg)
        found, why = suggest_with_reasons(cfg, capacity)
    except ConfigError as exc:
        return errors_answer(exc.problems)
    except (EstimatorError, ValueError) as exc:
        return error_answer("suggest", None, str(exc))
    return {"suggestions": [s.to_dict(world) for s in found], "gpu": gpu,
            "capacity": f"{capacity / GIB:.2f} GiB", "notes": notes(), "target": target_text(cfg, capacity),
            "not_proposed": why}


def sweeps(state: dict, min_gpus: bool = False, options=None) -> dict:
    """The sweeps of a form state, or (``min_gpus``) the fewest GPUs on which some layout fits, with the search
    options (:func:`search_options`, GPU counts aside) when given."""
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = state_capacity(state)
    if problems or gpu_problems:
        return errors_answer(problems + gpu_problems)
    if not capacity:
        return error_answer("gpu", None, "choose a GPU to see where the memory crosses its capacity")
    try:
        if min_gpus:
            from ..plan.search import min_gpus as fewest
            from .layouts import layout_words
            kwargs, bad = search_options(options) if options is not None else ({}, [])
            if bad:
                return errors_answer(bad)
            kwargs.pop("num_gpus", None)
            ans = fewest(cfg, gpu=capacity, **kwargs)
            lay = ans.layout
            return {"min_gpus": {"value": ans.value, "reason": ans.reason, "label": lay.label if lay else None,
                                 "words": layout_words(lay) if lay else None}}
        from ..plan.sweep import sweep, sweep_view
        from ..formats.error_bands import band_for
        return {**sweep_view(sweep(cfg, capacity), capacity, band=band_for(cfg).fraction), "gpu": gpu}
    except ConfigError as exc:
        return errors_answer(exc.problems)
    except (EstimatorError, ValueError) as exc:
        return error_answer("sweep", None, str(exc))


def answer(op: str, req: dict) -> dict:
    state = req.get("state") or {}
    if op == "suggest":
        return suggestions(state)
    if req.get("min_gpus") not in (None, True, False):
        return error_answer("min_gpus", req.get("min_gpus"), "must be true or false")
    return sweeps(state, bool(req.get("min_gpus")), req.get("options"))


def search_options(options) -> tuple[dict, list]:
    """The keyword arguments of :func:`estimator.plan.search.search` from the page's search options, and problems.

    ``{"num_gpus": "64, 128" or [64, 128] or null (the configuration's), "tp": 8 or null (any), "ep": 8 or null
    (any), "keep_free": 5 (percent of the GPU memory kept free on top of the upper bound; null: the verdict's
    default, 0; "headroom" is its old name)}``."""
    from ..config.errors import Problem
    if not isinstance(options, dict):
        return {}, [Problem("options", options, "must be an object {num_gpus, tp, ep, keep_free}")]
    out, problems = {}, []
    unknown = sorted(set(options) - {"num_gpus", "tp", "ep", "keep_free", "headroom"})
    if unknown:
        problems.append(Problem(f"options.{unknown[0]}", options[unknown[0]], "unknown search option; known: num_gpus, "
                                "tp, ep, keep_free (or its old name headroom)"))
    raw = options.get("num_gpus")
    if isinstance(raw, str):
        raw = [x for x in raw.replace(",", " ").split() if x]
    if raw not in (None, []):
        vals = raw if isinstance(raw, list) else [raw]
        try:
            counts = [int(x) for x in vals if not isinstance(x, bool) and str(int(x)) == str(x).strip()]
        except (TypeError, ValueError):
            counts = []
        if len(counts) != len(vals) or not all(1 <= c <= 10 ** 7 for c in counts) or len(counts) > MAX_GPU_COUNTS:
            problems.append(Problem("options.num_gpus", options.get("num_gpus"), "GPU counts: up to "
                                    f"{MAX_GPU_COUNTS} whole numbers from 1 to 10,000,000, separated by commas"))
        else:
            out["num_gpus"] = sorted(set(counts))
    tp = options.get("tp")
    if tp not in (None, ""):
        if isinstance(tp, str) and tp.strip().isdigit():
            tp = int(tp)
        if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= 1024:
            problems.append(Problem("options.tp", options.get("tp"), "a tensor parallel size from 1 to 1,024, or any"))
        else:
            out["tensor_model_parallel_size"] = tp
            out["max_tp"] = max(tp, 8)
    ep = options.get("ep")
    if ep not in (None, ""):
        if isinstance(ep, str) and ep.strip().isdigit():
            ep = int(ep)
        if isinstance(ep, bool) or not isinstance(ep, int) or not 1 <= ep <= MAX_EXPERTS:
            problems.append(Problem("options.ep", options.get("ep"), f"an expert parallel size from 1 to "
                                    f"{MAX_EXPERTS:,} (dividing the experts), or any"))
        else:
            out["expert_model_parallel_size"] = ep
    key = "keep_free" if options.get("keep_free") not in (None, "") else "headroom"
    hr = options.get(key)
    if hr not in (None, ""):
        try:
            pct = float(hr)
        except (TypeError, ValueError):
            pct = -1.0
        if not 0 <= pct < 100:
            problems.append(Problem(f"options.{key}", hr, "the percent of the GPU memory kept free: 0 to 99"))
        else:
            out["keep_free"] = pct / 100
    return out, problems


def search_with_options(state: dict, top: int, options) -> dict:
    """The page's layout search with its options."""
    from .layouts import find_layouts
    kwargs, problems = search_options(options)
    if problems:
        return errors_answer(problems)
    res = find_layouts(state, top, **kwargs)
    if "errors" not in res:
        res["keep_free"] = res["headroom"] = f"{100 * kwargs.get('keep_free', KEEP_FREE):g} %"
    return res
