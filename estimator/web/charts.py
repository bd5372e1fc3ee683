"""The calculator's ``timeline`` request: the memory timeline and the module breakdown of a form state.

Asked for after each ``compute`` (the page draws the estimate first, then these two), so that walking a
long pipeline schedule never delays the main numbers. ``{"op": "timeline", "state": ...}`` ->
``{timeline, breakdown}`` (:func:`timeline_view`, :func:`estimator.memory.breakdown.view` of the stages drawn) or
``{errors}`` as ``compute`` gives them.

The answer is bounded whatever the pipeline: at most :data:`MAX_STAGES_DRAWN` stages are drawn (every stage of a
pipeline that small, else stage 0, the last stage, the peak stage and stages evenly spaced between them), each
with at most :data:`estimator.memory.timeline.MAX_POINTS` points, and ``resolution`` says which were drawn
(``"32 of 1,024 stages (0, 33, 66, ..., 1,023 and the peak stage 40), at most 256 points each"``).
"""

from __future__ import annotations

from ..config.errors import ConfigError, EstimatorError
from ..config.load import load_config
from ..memory.assemble import estimate
from ..memory.breakdown import view as breakdown_view
from ..memory.report import GIB, gib_ticks
from ..memory.timeline import MAX_POINTS, stage_timelines

__all__ = ["MAX_STAGES_DRAWN", "charts", "drawn_stages", "resolution", "timeline_view"]

#: Pipeline stages the timeline draws at most (one line each).
MAX_STAGES_DRAWN = 32


def _spaced(p: int, limit: int) -> list[int]:
    n = limit - 1
    return sorted({(p - 1) * i // (n - 1) for i in range(n)})


def drawn_stages(p: int, peak: int, limit: int = MAX_STAGES_DRAWN) -> list[int]:
    """The stages drawn of ``p``: all of them up to ``limit``; else ``limit - 1`` stages evenly spaced from stage 0
    to stage p - 1, and the peak stage."""
    if p <= limit:
        return list(range(p))
    return sorted(set(_spaced(p, limit)) | {peak})


def resolution(p: int, peak: int, limit: int = MAX_STAGES_DRAWN) -> str:
    """Which stages the timeline draws and how finely, in words."""
    if p <= limit:
        which = f"all {p:,} stages" if p > 1 else "the one stage"
    else:
        spaced = _spaced(p, limit)
        which = (f"{len(drawn_stages(p, peak, limit))} of {p:,} stages ("
                 + ", ".join(f"{s:,}" for s in spaced[:3]) + f", ..., {spaced[-1]:,}"
                 + ("" if peak in spaced else f" and the peak stage {peak:,}") + ")")
    return f"{which}, at most {MAX_POINTS} points each"


def timeline_view(est, capacity: int | None = None, gpu: str | None = None) -> dict:
    """What the page draws of the timeline: the drawn stages' points (:func:`drawn_stages`), the peak stage (the
    estimate's), the axis ticks and the capacity line, labels in GiB (2^30 bytes)."""
    p = len(est.stages)
    drawn = drawn_stages(p, est.peak.stage)
    lines = stage_timelines(est, drawn)
    top = max([ln["peak_bytes"] for ln in lines] + [capacity or 0])
    peak = lines[drawn.index(est.peak.stage)]
    for ln in lines:
        ln.pop("activations_per_microbatch")      # one figure per chunk: not drawn
        ln["peak_label"] = f"{ln['peak_bytes'] / GIB:.2f} GiB"
        ln["base_label"] = f"{ln['base_bytes'] / GIB:.2f} GiB"
        ln["peak_point"] = ln["points"][ln["peak_index"]]["label"]
    ticks = gib_ticks(top)
    par = est.parallel
    schedule = ("interleaved 1F1B, VPP " + str(par["vpp"]) if par["vpp"] > 1 else "1F1B") if par["pp"] > 1 \
        else "no pipeline: forward and backward of each micro-batch in turn"
    device = est.stages[est.peak.stage].device_bytes
    lead = (f"Allocated by PyTorch: stage {peak['stage']} peaks at {peak['peak_bytes'] / GIB:.2f} GiB allocated. The "
            f"headline's {device / GIB:.2f} GiB is on the device: it adds the caching allocator's reserve, the CUDA "
            "context and the NCCL buffers, which this chart leaves out.")
    return {"unit": "GiB (2^30 bytes)", "stages": lines, "peak_stage": peak["stage"], "lead": lead,
            "peak_bytes": peak["peak_bytes"], "peak_label": f"{peak['peak_bytes'] / GIB:.2f} GiB",
            "ticks": ticks, "scale_bytes": ticks[-1]["bytes"] or top, "capacity_bytes": capacity,
            "capacity_label": f"{gpu} {capacity / GIB:.2f} GiB" if capacity else None, "schedule": schedule,
            "num_stages": p, "resolution": resolution(p, est.peak.stage)}


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
    drawn = drawn_stages(len(est.stages), est.peak.stage)
    return {"timeline": timeline_view(est, capacity, gpu), "breakdown": breakdown_view(est, drawn)}
