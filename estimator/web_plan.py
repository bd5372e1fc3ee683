"""The calculator's planning requests: what makes a configuration fit, and how its memory moves.

:func:`estimator.web.handle` passes these requests here (the form's state as in :mod:`estimator.web`):

- ``suggest`` ``{state}`` -> ``{suggestions, gpus, capacity}``: the cheapest changes after which every stage
  fits the chosen GPU (:func:`estimator.suggest.suggest`), each with the form fields to set (``set``), the
  CLI flags, the new peak, the memory saved and the relative step time, in words as well as in numbers;
  empty when the configuration fits or no GPU is chosen;
- ``sweep`` ``{state}`` -> :func:`estimator.sweep.sweep_view`: the peak-stage memory against the sequence
  length, the micro-batch size and the GPU count, with the fit boundaries (the CLI's reverse questions);
  ``{state, min_gpus: true}`` -> ``{min_gpus: {value, label, words, reason}}``: the fewest GPUs on which some
  layout fits (:func:`estimator.search.min_gpus`, a layout search per candidate count: seconds).

Errors are ``{"errors": [{field, value, message}]}`` as everywhere in the calculator.
"""

from __future__ import annotations

from .errors import ConfigError, EstimatorError
from .report import GIB
from .web import _capacity, _error, _errors, merged_config

__all__ = ["answer", "suggestions", "sweeps"]


def suggestions(state: dict) -> dict:
    """The "Make it fit" list of a form state."""
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = _capacity(state)
    if problems or gpu_problems:
        return _errors(problems + gpu_problems)
    if not capacity:
        return {"suggestions": [], "gpu": None}
    from .config import load_config
    from .suggest import suggest
    world = (cfg.get("training") or {}).get("world_size")
    try:
        load_config(cfg)
        found = suggest(cfg, capacity)
    except ConfigError as exc:
        return _errors(exc.problems)
    except (EstimatorError, ValueError) as exc:
        return _error("suggest", None, str(exc))
    return {"suggestions": [s.to_dict(world) for s in found], "gpu": gpu,
            "capacity": f"{capacity / GIB:.2f} GiB"}


def sweeps(state: dict, min_gpus: bool = False) -> dict:
    """The sweeps of a form state, or (``min_gpus``) the fewest GPUs on which some layout fits."""
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = _capacity(state)
    if problems or gpu_problems:
        return _errors(problems + gpu_problems)
    if not capacity:
        return _error("gpu", None, "choose a GPU to see where the memory crosses its capacity")
    try:
        if min_gpus:
            from .search import min_gpus as fewest
            from .web import _words
            ans = fewest(cfg, gpu=capacity, headroom=0.0)
            lay = ans.layout
            return {"min_gpus": {"value": ans.value, "reason": ans.reason, "label": lay.label if lay else None,
                                 "words": _words(lay) if lay else None}}
        from .sweep import sweep, sweep_view
        return {**sweep_view(sweep(cfg, capacity), capacity), "gpu": gpu}
    except ConfigError as exc:
        return _errors(exc.problems)
    except (EstimatorError, ValueError) as exc:
        return _error("sweep", None, str(exc))


def answer(op: str, req: dict) -> dict:
    state = req.get("state") or {}
    if op == "suggest":
        return suggestions(state)
    if req.get("min_gpus") not in (None, True, False):
        return _error("min_gpus", req.get("min_gpus"), "must be true or false")
    return sweeps(state, bool(req.get("min_gpus")))
