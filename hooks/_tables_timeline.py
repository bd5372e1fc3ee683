"""Geometry of the preset pages' memory timeline (one line per pipeline stage over one training step) and
the data of their "what is in the peak" table.

The points come from :func:`estimator.web.charts.timeline_view` and the rows from
:func:`estimator.memory.breakdown.view`, the same data the calculator draws (``docs/assets/calculator/
timeline.js``); this module only scales bytes to SVG user units. Markup: ``templates/timeline.svg.j2`` and
``templates/breakdown.html.j2``; colours: ``docs/assets/stylesheets/timeline.css``.
"""

from __future__ import annotations

from estimator.memory.breakdown import view as breakdown_view
from estimator.web.charts import timeline_view

WIDTH, LEFT, RIGHT, TOP, PLOT_H, AXIS = 760, 56, 16, 28, 240, 44


def timeline_chart(chart_id: str, title: str, est, gpu: dict | None) -> dict:
    """The SVG geometry of the timeline of ``est``, with ``gpu``'s capacity line (a dict with ``label`` and
    ``memory_bytes``) drawn when it is within twice the peak."""
    cap = gpu["memory_bytes"] if gpu and gpu["memory_bytes"] <= 2 * est.peak.allocated_bytes else None
    tl = timeline_view(est, cap, gpu["label"] if cap else None)
    plot = WIDTH - LEFT - RIGHT
    scale = tl["scale_bytes"] or 1

    def y(b: int) -> float:
        return round(TOP + PLOT_H - b / scale * PLOT_H, 1)

    lines = []
    for s in tl["stages"]:
        n = len(s["points"])

        def x(i: int) -> float:
            return round(LEFT + (i / (n - 1) * plot if n > 1 else 0), 1)

        runs, gaps, run = [], [], []
        for i, p in enumerate(s["points"]):
            if p.get("skipped") and run:
                runs.append(" ".join(run))
                gaps.append({"x1": x(i - 1), "y1": y(s["points"][i - 1]["bytes"]), "x2": x(i), "y2": y(p["bytes"]),
                             "skipped": p["skipped"]})
                run = []
            run.append(f"{x(i)},{y(p['bytes'])}")
        runs.append(" ".join(run))
        lines.append({"stage": s["stage"], "peak": s["stage"] == tl["peak_stage"], "runs": runs, "gaps": gaps,
                      "peak_label": s["peak_label"], "peak_point": s["peak_point"], "base_label": s["base_label"],
                      "dot": (x(s["peak_index"]), y(s["peak_bytes"]))})
    lines.sort(key=lambda ln: ln["peak"])            # the peak stage drawn last, on top
    peak = next(ln for ln in lines if ln["peak"])
    right_half = peak["dot"][0] > LEFT + plot * 0.6
    above = max(12, peak["dot"][1] - 8)         # the peak's label: above the dot, unless the capacity's is there
    label_y = peak["dot"][1] + 17 if cap and abs(above - (y(cap) - 4)) < 14 else above
    return {
        "id": chart_id, "title": title, "width": WIDTH, "height": TOP + PLOT_H + AXIS, "left": LEFT,
        "right": WIDTH - RIGHT, "bottom": TOP + PLOT_H, "schedule": tl["schedule"], "lines": lines,
        "stages": sorted(lines, key=lambda ln: ln["stage"]),
        "ticks": [{"y": y(t["bytes"]), "label": t["label"]} for t in tl["ticks"]],
        "peak": {"stage": tl["peak_stage"], "label": tl["peak_label"], "x": peak["dot"][0], "y": peak["dot"][1],
                 "tx": peak["dot"][0] + (-6 if right_half else 6), "ty": label_y,
                 "anchor": "end" if right_half else "start"},
        "cap": {"y": y(cap), "label": tl["capacity_label"]} if cap else None,
    }


def peak_breakdown(est) -> dict:
    """The peak stage's rows, largest first, with GiB strings and shares."""
    v = breakdown_view(est)
    return {**v["stages"][v["peak_stage"]], "unit": v["unit"]}
