"""Geometry of the site's inline SVG charts: axes, ticks and shapes, in SVG user units.

No memory arithmetic happens here: the charts receive byte counts the estimator computed and only
scale them to pixels. The markup lives in ``templates/*.svg.j2``; colours come from CSS classes
(``docs/assets/stylesheets/estimator.css``) so the charts follow Material's light and dark palettes,
and text uses ``currentColor``.
"""

from __future__ import annotations

import math

GIB = 2 ** 30

#: Stacked segments of a stage bar, bottom to top, with their legend labels.
STAGE_SEGMENTS = (
    ("weights", "Weights"),
    ("gradients", "Gradients"),
    ("optimizer", "Optimizer states"),
    ("activations", "Activations"),
    ("transient", "Transient buffers"),
    ("reserve", "Allocator reserve"),
    ("runtime", "CUDA context, NCCL, other"),
)


def nice_ticks(top: float, target: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``top`` (steps of 1, 2 or 5 x 10^k)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _label(v: float) -> str:
    return f"{v:g}"


def stage_bars(chart_id: str, title: str, stages: list[dict], capacities: list[tuple[str, int]],
               selected: str | None = None) -> dict:
    """A horizontal stacked bar per pipeline stage.

    ``stages``: dicts with ``label`` and one byte count per key of :data:`STAGE_SEGMENTS`.
    ``capacities``: (label, bytes) of GPUs drawn as dashed lines, labelled with their capacity, when they
    fall inside the axis; the one named ``selected`` always (the GPU the page is about). Their labels sit
    above the bars, one line each, so that they never cross a bar.
    """
    left, right, row_h, bar_h = 96, 24, 30, 20
    width = 760
    plot_w = width - left - right
    totals = [sum(s[k] for k, _ in STAGE_SEGMENTS) for s in stages]
    axis_max = max(totals) / GIB
    shown_caps = [(n, c) for n, c in capacities if c / GIB <= axis_max * 1.6 or n == selected]
    top_pad = 64 + 14 * len(shown_caps)
    if shown_caps:
        axis_max = max(axis_max, max(c for _, c in shown_caps) / GIB)
    ticks = nice_ticks(axis_max)
    scale = plot_w / ticks[-1]
    rows = []
    for i, (s, total) in enumerate(zip(stages, totals)):
        y = top_pad + i * row_h
        x = float(left)
        segs = []
        for key, name in STAGE_SEGMENTS:
            w = s[key] / GIB * scale
            if w > 0:
                segs.append({"cls": key, "name": name, "x": round(x, 2), "w": round(w, 2),
                             "gib": s[key] / GIB})
            x += w
        rows.append({"label": s["label"], "y": y, "bar_y": y + (row_h - bar_h) / 2, "bar_h": bar_h, "segs": segs,
                     "total_gib": total / GIB, "end_x": round(x, 2)})
    plot_bottom = top_pad + len(stages) * row_h
    legend_rows, row, x0 = [], [], float(left)
    for key, name in STAGE_SEGMENTS:   # the legend, wrapped into lines that fit the width
        w = 14 + 7.2 * len(name) + 18
        if row and x0 + w > width - right:
            legend_rows.append(row)
            row, x0 = [], float(left)
        row.append({"cls": key, "name": name, "x": round(x0, 2)})
        x0 += w
    legend_rows.append(row)
    legend_h = 20 * len(legend_rows)
    shift = legend_h - 20
    for r in rows:
        r["y"] += shift
        r["bar_y"] += shift
    plot_top = top_pad - 12 + shift
    plot_bottom += shift
    return {
        "id": chart_id, "title": title, "width": width, "height": plot_bottom + 44,
        "left": left, "right": width - right, "plot_top": plot_top, "plot_bottom": plot_bottom,
        "rows": rows,
        "legend": [[{**it, "y": 16 + 20 * j} for it in line] for j, line in enumerate(legend_rows)],
        "ticks": [{"x": round(left + t * scale, 2), "label": _label(t)} for t in ticks],
        "caps": [{"x": round(left + c / GIB * scale, 2), "label": f"{n} {c / GIB:.2f} GiB",
                  "y": plot_top - 4 - 14 * (len(shown_caps) - 1 - i), "selected": n == selected,
                  "anchor": "end" if c / GIB * scale > plot_w / 2 else "start"}
                 for i, (n, c) in enumerate(shown_caps)],
    }


def scatter(chart_id: str, title: str, points: list[dict], band: float = 0.10) -> dict:
    """Estimated against measured (GiB), with the y = x line and a +/- ``band`` band.

    ``points``: dicts with ``x`` (measured GiB), ``y`` (estimated GiB), ``label`` and ``precise``.
    """
    size, pad_l, pad_b, pad_t, pad_r = 440, 64, 52, 20, 20
    top = max(max(p["x"], p["y"]) for p in points) * 1.05
    ticks = nice_ticks(top)
    span = ticks[-1]
    plot = size - pad_l - pad_r

    def sx(v: float) -> float:
        return round(pad_l + v / span * plot, 2)

    def sy(v: float) -> float:
        return round(pad_t + plot - v / span * plot, 2)

    return {
        "id": chart_id, "title": title, "width": size, "height": pad_t + plot + pad_b,
        "x0": sx(0), "x1": sx(span), "y0": sy(0), "y1": sy(span),
        "band_pct": round(band * 100),
        "band_poly": (f"{sx(0)},{sy(0)} {sx(span / (1 + band))},{sy(span)} {sx(span)},{sy(span)} "
                      f"{sx(span)},{sy(span * (1 - band))}"),
        "ticks": [{"x": sx(t), "y": sy(t), "label": _label(t)} for t in ticks],
        "points": [{**p, "cx": sx(p["x"]), "cy": sy(p["y"])} for p in points],
    }


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks covering [lo, hi] on a logarithmic axis."""
    out = []
    k = math.floor(math.log10(lo))
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** k
            if v >= lo / 1.0001 and v <= hi * 1.0001:
                out.append(round(v, 10))
            if v > hi:
                return out
        k += 1


def log_scatter(chart_id: str, title: str, points: list[dict], bands: tuple = (0.02, 0.06)) -> dict:
    """Estimated against measured (GiB), both axes logarithmic, with the y = x line and +/- bands.

    ``points``: dicts with ``x`` (measured GiB), ``y`` (estimated GiB), ``label``, ``cls`` (a CSS suffix naming
    the point's group) and ``error`` (signed %).
    """
    size, pad_l, pad_b, pad_t, pad_r = 480, 64, 52, 20, 20
    lo = min(min(p["x"], p["y"]) for p in points) / 1.3
    hi = max(max(p["x"], p["y"]) for p in points) * 1.3
    ticks = log_ticks(lo, hi)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    plot = size - pad_l - pad_r
    span = math.log10(hi) - math.log10(lo)

    def pos(v: float) -> float:
        return (math.log10(v) - math.log10(lo)) / span * plot

    def sx(v: float) -> float:
        return round(pad_l + pos(v), 2)

    def sy(v: float) -> float:
        return round(pad_t + plot - pos(v), 2)

    def band(f: float) -> str:   # the region between y = x (1 - f) and y = x (1 + f), clipped to the plot
        return (f"{sx(lo)},{sy(lo * (1 + f))} {sx(hi / (1 + f))},{sy(hi)} {sx(hi)},{sy(hi)} "
                f"{sx(hi)},{sy(hi * (1 - f))} {sx(lo / (1 - f))},{sy(lo)} {sx(lo)},{sy(lo)}")

    return {
        "id": chart_id, "title": title, "width": size, "height": pad_t + plot + pad_b,
        "x0": sx(lo), "x1": sx(hi), "y0": sy(lo), "y1": sy(hi),
        "bands": [{"pct": round(f * 100), "poly": band(f)} for f in sorted(bands, reverse=True)],
        "ticks": [{"x": sx(t), "y": sy(t), "label": _label(t)} for t in ticks],
        "points": [{**p, "cx": sx(p["x"]), "cy": sy(p["y"])} for p in points],
    }
