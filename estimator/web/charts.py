"""The calculator's ``timeline`` request: the memory timeline and the module breakdown of a form state.

Asked for after each ``compute`` (the page draws the estimate first, then these two), so that walking a
long pipeline schedule never delays the main numbers. ``{"op": "timeline", "state": ...}`` ->
``{timeline, breakdown}`` (:func:`estimator.memory.timeline.view`, :func:`estimator.memory.breakdown.view`) or
``{errors}`` as ``compute`` gives them.
"""

from __future__ import annotations

from ..config.errors import ConfigError, EstimatorError
from ..config.load import load_config
from ..memory.assemble import estimate
from ..memory.breakdown import view as breakdown_view
from ..memory.report import GIB, gib_ticks
from ..memory.timeline import stage_timelines

__all__ = ["charts", "timeline_view"]


def timeline_view(est, capacity: int | None = None, gpu: str | None = None) -> dict:
    """What the page draws of the timeline: every stage's points, the peak stage (the estimate's), the axis
    ticks and the capacity line, labels in GiB (2^30 bytes)."""
    lines = stage_timelines(est)
    top = max([ln["peak_bytes"] for ln in lines] + [capacity or 0])
    peak = lines[est.peak.stage]
    for ln in lines:
        ln["peak_label"] = f"{ln['peak_bytes'] / GIB:.2f} GiB"
        ln["base_label"] = f"{ln['base_bytes'] / GIB:.2f} GiB"
        ln["peak_point"] = ln["points"][ln["peak_index"]]["label"]
    ticks = gib_ticks(top)
    par = est.parallel
    schedule = ("interleaved 1F1B, VPP " + str(par["vpp"]) if par["vpp"] > 1 else "1F1B") if par["pp"] > 1 \
        else "no pipeline: forward and backward of each micro-batch in turn"
    return {"unit": "GiB (2^30 bytes)", "stages": lines, "peak_stage": peak["stage"],
            "peak_bytes": peak["peak_bytes"], "peak_label": f"{peak['peak_bytes'] / GIB:.2f} GiB",
            "ticks": ticks, "scale_bytes": ticks[-1]["bytes"] or top, "capacity_bytes": capacity,
            "capacity_label": f"{gpu} {capacity / GIB:.2f} GiB" if capacity else None, "schedule": schedule}


def charts(state: dict) -> dict:
    """The timeline and the breakdown of the configuration of a form state."""
    from .state import error_answer, errors_answer, merged_config, state_capacity
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = state_capacity(state)
    problems += gpu_problems
    if problems:
        return errors_answer(problems)
    try:
        est = estimate(load_config(cfg))
    except ConfigError as exc:
        return errors_answer(list(exc.problems))
    except (EstimatorError, ValueError) as exc:
        return error_answer("config", None, str(exc))
    return {"timeline": timeline_view(est, capacity, gpu), "breakdown": breakdown_view(est)}
