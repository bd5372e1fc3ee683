"""The calculator's planning requests: what makes a configuration fit, and how its memory moves.

:func:`estimator.web.handle` passes these requests here (the form's state as in :mod:`estimator.web`):

- ``suggest`` ``{state}`` -> ``{suggestions, gpus, capacity}``: the cheapest changes after which every stage
  fits the chosen GPU (:func:`estimator.suggest.suggest`), each with the form fields to set (``set``), the
  CLI flags, the new peak, the memory saved and the relative step time, in words as well as in numbers;
  empty when the configuration fits or no GPU is chosen.

Errors are ``{"errors": [{field, value, message}]}`` as everywhere in the calculator.
"""

from __future__ import annotations

from .errors import ConfigError, EstimatorError
from .report import GIB
from .web import _capacity, _error, _errors, merged_config

__all__ = ["answer", "suggestions"]


def suggestions(state: dict) -> dict:
    """The "Make it fit" list of a form state."""
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = _capacity(state)
    if problems or gpu_problems:
        return _errors(problems + gpu_problems)
    if not capacity:
        return {"suggestions": [], "gpu": None}
    from .suggest import suggest
    world = (cfg.get("training") or {}).get("world_size")
    try:
        found = suggest(cfg, capacity)
    except ConfigError as exc:
        return _errors(exc.problems)
    except (EstimatorError, ValueError) as exc:
        return _error("suggest", None, str(exc))
    return {"suggestions": [s.to_dict(world) for s in found], "gpu": gpu,
            "capacity": f"{capacity / GIB:.2f} GiB"}


def answer(op: str, req: dict) -> dict:
    state = req.get("state") or {}
    if op == "suggest":
        return suggestions(state)
    return _error("op", op, "unknown planning request")
