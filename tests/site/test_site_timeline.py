"""The preset pages' timeline and breakdown (hooks/_tables_timeline.py, templates timeline.svg.j2 and
breakdown.html.j2), rendered through the markers as the build renders them: the chart's peak is the
estimate's, its geometry scales bytes and nothing else, and the table's rows add up to the peak."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from estimator import estimate, load_preset

ROOT = Path(__file__).resolve().parents[2]
GIB = 2 ** 30


@pytest.fixture(scope="module")
def hooks():
    sys.path.insert(0, str(ROOT / "hooks"))
    try:
        import _tables_timeline
        import _tables_views
        yield _tables_timeline, _tables_views
    finally:
        sys.path.remove(str(ROOT / "hooks"))


@pytest.mark.parametrize("name", ["tiny", "llama-3-70b", "deepseek-v3"])
def test_preset_page_draws_the_estimates_peak_and_its_breakdown(hooks, name):
    _, views = hooks
    html = views.render("preset-page", {"name": name}, None)
    e = estimate(load_preset(name))
    label = f"{e.peak.allocated_bytes / GIB:.2f} GiB"
    svg = re.search(r'<figure class="mme-chart mme-tl-chart" id="chart-timeline">.*?</figure>', html, re.S).group(0)
    assert f'data-peak-stage="{e.peak.stage}"' in svg and f'data-peak-label="{label}"' in svg
    assert f">Peak: stage {e.peak.stage}, {label} allocated</text>" in svg
    assert svg.count('<g class="mme-tl-stage') == len(e.stages)
    assert svg.count("Stage ") >= len(e.stages)                 # the description names every stage
    table = re.search(r'<table data-table="breakdown".*?</table>', html, re.S).group(0)
    values = [int(v) for v in re.findall(r'<tr data-key="(?!total)[^"]+"><td>[^<]*</td><td data-value="(\d+)"', table)]
    assert values and sum(values) == e.peak.allocated_bytes
    total = f'<tr data-key="total"><th scope="row">Total (allocated)</th><td data-value="{e.peak.allocated_bytes}">'
    assert total in table


def test_geometry_scales_bytes_only(hooks):
    """The peak dot sits at the peak's height on the axis: y = top + H - peak / scale x H, with the axis
    ticks from estimator.web.view (0 at the bottom); the capacity line is drawn within twice the peak."""
    tl_hooks, _ = hooks
    e = estimate(load_preset("llama-3-70b"))
    gpu = {"label": "H100-80GB", "memory_bytes": 85_520_809_984}
    c = tl_hooks.timeline_chart("x", "t", e, gpu)
    top, H = tl_hooks.TOP, tl_hooks.PLOT_H
    ticks = c["ticks"]
    assert ticks[0]["label"] == "0" and ticks[0]["y"] == top + H
    scale = float(ticks[-1]["label"]) * GIB
    assert c["peak"]["y"] == round(top + H - e.peak.allocated_bytes / scale * H, 1)
    assert c["cap"]["label"] == "H100-80GB 79.65 GiB"
    assert tl_hooks.timeline_chart("x", "t", estimate(load_preset("tiny")), gpu)["cap"] is None   # 0.13 GiB peak
