"""Issue 29, item 3: the step timeline has a legend and says it plots allocated memory beside the headline's
figure on the device (both from Python); the sweeps' token ticks are plain numbers with thousands separators
(8,192, not 8Ki) and the axis's unit label does not touch its ticks. Desktop and phone, both schemes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimator.web import charts, plan  # noqa: E402

from _calc import open_page, viewport_page  # noqa: E402

DONE = ".mme-timeline-box[data-state='done'] svg.mme-timeline"
VIEWS = [({"width": 1280, "height": 900}, "light"), ({"width": 390, "height": 844}, "dark")]
STATE = {"preset": "llama-3-70b", "values": {}, "gpu": "H100-80GB"}


@pytest.mark.parametrize("viewport,scheme", VIEWS, ids=["desktop-light", "phone-dark"])
def test_timeline_has_a_legend_and_says_it_plots_allocated(browser, site_url, viewport, scheme):
    want = charts.charts(STATE)["timeline"]["lead"]
    assert "allocated" in want and "on the device" in want
    with viewport_page(browser, viewport) as page:
        page.emulate_media(color_scheme=scheme)
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-70b&gpu=H100-80GB") == "done"
        page.wait_for_selector(DONE, timeout=120_000)
        assert page.inner_text(".mme-tl-lead") == want
        headline = page.inner_text(".mme-sticky")
        device = want.split("The headline's ")[1].split(" GiB")[0]
        assert f"{device} GiB" in headline          # the same figure as the headline
        items = page.eval_on_selector_all(".mme-tl-legend li", "ls => ls.map((l) => l.innerText.trim())")
        assert items[0].startswith("peak stage") and "other stages" in items and "GPU capacity" in items
        # each key drawn with the chart's own strokes: the peak's differs from the others'
        strokes = page.eval_on_selector_all(".mme-tl-legend svg line",
                                            "ls => ls.map((l) => getComputedStyle(l).stroke)")
        assert len(set(strokes[:2])) == 2
        box = page.locator(".mme-tl-legend").bounding_box()
        assert box["x"] + box["width"] <= viewport["width"] + 1


def _overlap(a, b) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and \
        a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


@pytest.mark.parametrize("viewport,scheme", VIEWS, ids=["desktop-light", "phone-dark"])
def test_sweep_ticks_are_plain_tokens_and_clear_of_the_axis_label(browser, site_url, viewport, scheme):
    want = plan.sweeps(STATE)
    seq = next(s for s in want["series"] if s["name"] == "seq_length")
    labels = [t["label"] for t in seq["x_ticks"]]
    assert "8,192" in labels and not any("Ki" in t or "Mi" in t for t in labels)
    with viewport_page(browser, viewport) as page:
        page.emulate_media(color_scheme=scheme)
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-70b&gpu=H100-80GB") == "done"
        page.click(".mme-sweeps > summary")
        page.wait_for_selector(".mme-sweeps[data-state='done'] .mme-sweep-chart", timeout=180_000)
        fig = page.locator(".mme-sweep[data-sweep='seq_length']")
        ticks = fig.locator("text.mme-x-tick")
        assert [ticks.nth(i).text_content() for i in range(ticks.count())] == labels
        unit = fig.locator("text.mme-x-unit")
        assert unit.text_content() == seq["unit"]
        # the axis's ticks and its unit label: none overlaps another
        texts = fig.locator("text.mme-x-tick, text.mme-x-unit").all()
        boxes = [t.bounding_box() for t in texts]
        names = [t.text_content() for t in texts]
        clash = [(names[i], names[j]) for i in range(len(boxes)) for j in range(i + 1, len(boxes))
                 if _overlap(boxes[i], boxes[j])]
        assert clash == []
