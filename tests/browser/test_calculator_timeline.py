"""Memory over one training step and what is in the peak (issue 14, points 1 and 2), in Chromium: on the
calculator at desktop width and at 390 px, in light and dark, and on a preset page without JavaScript's
help. Expected numbers come from the core run here in CPython (the package the page runs in Pyodide)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimator import estimate, load_preset  # noqa: E402

from _calc import open_page, shown  # noqa: E402

GIB = 2 ** 30
DONE = ".mme-timeline-box[data-state='done'] svg.mme-timeline"


def _peak_label(est) -> str:
    return f"{est['peak']['allocated_bytes'] / GIB:.2f} GiB"


def _colours(page, scheme: str) -> dict:
    return page.evaluate("""(scheme) => { document.body.setAttribute('data-md-color-scheme', scheme);
        const st = (sel, prop) => getComputedStyle(document.querySelector(sel))[prop];
        return { peak: st('.mme-tl-peak .mme-tl-line', 'stroke'),
                 other: st('.mme-tl-stage:not(.mme-tl-peak) .mme-tl-line', 'stroke'),
                 text: st('svg.mme-timeline text', 'fill'), bg: getComputedStyle(document.body).backgroundColor }; }""",
                         scheme)


# Every text of the chart the peak's label crosses, and whether it leaves the chart (issue 29: it must do neither).
CROSSED = """() => { const svg = document.querySelector('svg.mme-timeline'), s = svg.getBoundingClientRect(),
    p = svg.querySelector('.mme-tl-peak-label').getBoundingClientRect();
  const hit = [...svg.querySelectorAll('text:not(.mme-tl-peak-label)')].filter((t) => { const q = t.getBoundingClientRect();
    return p.left < q.right && p.right > q.left && p.top < q.bottom && p.bottom > q.top; }).map((t) => t.textContent);
  if (p.left < s.left || p.right > s.right || p.top < s.top || p.bottom > s.bottom) hit.push('outside the chart');
  return hit; }"""
CROSS = """([a, b]) => { const r = document.querySelector(a).getBoundingClientRect(),
    q = document.querySelector(b).getBoundingClientRect();
  return r.left < q.right && r.right > q.left && r.top < q.bottom && r.bottom > q.top; }"""


@pytest.mark.parametrize("width,scheme,preset", [(1280, "light", "deepseek-v3"), (390, "dark", "deepseek-v3"),
                                                (390, "light", "llama-3-70b"), (1280, "dark", "llama-3-70b")])
def test_calculator_draws_the_timeline_and_the_breakdown(browser, site_url, width, scheme, preset):
    """Llama-3-70B's peak (75.49 GiB) sits just under the H100's capacity line: the two labels must not cross; the
    peak's label crosses no other label (ticks, axis words) and stays inside the chart, at 1280 and 390 px."""
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
    try:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        assert open_page(page, f"{site_url}calculator/?preset={preset}&gpu=H100-80GB") == "done"
        page.wait_for_selector(DONE, timeout=120_000)
        est = shown(page)
        stage = est["peak"]["stage"]
        svg = page.locator("svg.mme-timeline")
        # one line per stage, the peak stage's highlighted; its label is the estimate's peak
        assert page.locator("svg.mme-timeline g.mme-tl-stage").count() == len(est["stages"])
        assert svg.get_attribute("data-peak-stage") == str(stage)
        assert page.locator("svg.mme-timeline g.mme-tl-peak").get_attribute("data-stage") == str(stage)
        label = page.text_content("svg.mme-timeline .mme-tl-peak-label")
        assert label == f"Peak: stage {stage}, {_peak_label(est)} allocated"
        assert _peak_label(est).split()[0] + " GiB allocated" in page.text_content(".mme-summary")
        assert "H100-80GB 79.65 GiB" in page.text_content("svg.mme-timeline")          # the capacity line
        assert not page.evaluate(CROSS, ["svg.mme-timeline .mme-tl-peak-label", "svg.mme-timeline .mme-capacity-label"])
        assert page.evaluate(CROSSED) == []
        # the breakdown of the peak stage adds up to its peak
        rows = page.eval_on_selector_all(".mme-bd-table tbody tr", "trs => trs.map((t) => Number(t.dataset.bytes))")
        assert sum(rows) == est["stages"][stage]["allocated_bytes"]
        assert page.text_content(".mme-bd-table tfoot [data-col='total']") == _peak_label(est).split()[0]
        assert page.locator(".mme-bd-seg").count() == len(rows)
        # another stage, chosen in the heading
        page.select_option(".mme-breakdown-stage", "0")
        rows = page.eval_on_selector_all(".mme-bd-table tbody tr", "trs => trs.map((t) => Number(t.dataset.bytes))")
        assert sum(rows) == est["stages"][0]["allocated_bytes"]
        assert page.get_attribute(".mme-breakdown", "data-stage") == "0"
        # readable and inside the screen at this width; colours follow the scheme
        box = svg.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width + 1
        sizes = page.eval_on_selector_all("svg.mme-timeline text",
                                          "ts => ts.map((t) => t.getBoundingClientRect().height)")
        assert min(sizes) >= 9
        light, dark = _colours(page, "default"), _colours(page, "slate")
        for c in (light, dark):
            assert c["peak"] != c["other"] and c["text"] != c["bg"]
        assert light["text"] != dark["text"]
        # the accessible alternative: a title, a description naming every stage, a table
        assert page.text_content("#mme-tl-title").startswith("Allocated memory")
        assert page.text_content("#mme-tl-desc").count("Stage ") == len(est["stages"])
        assert page.locator(".mme-timeline-table tbody tr").count() == len(est["stages"])
        assert not errors
    finally:
        context.close()


def test_timeline_follows_the_form(page, site_url):
    """A change of the form redraws the timeline for the new configuration (PP 2 of the tiny model: two
    lines; its peak the estimate's)."""
    assert open_page(page, f"{site_url}calculator/?preset=tiny") == "done"
    page.wait_for_selector(DONE, timeout=120_000)
    assert page.locator("svg.mme-timeline g.mme-tl-stage").count() == 2
    page.goto(f"{site_url}calculator/?preset=tiny&parallelism.pipeline_model_parallel_size=1&training.world_size=2")
    page.wait_for_selector(DONE, timeout=120_000)
    est = shown(page)
    assert len(est["stages"]) == 1
    assert page.locator("svg.mme-timeline g.mme-tl-stage").count() == 1
    assert page.text_content("svg.mme-timeline .mme-tl-peak-label") == f"Peak: stage 0, {_peak_label(est)} allocated"


@pytest.mark.parametrize("width,scheme", [(1280, "light"), (390, "dark")])
def test_preset_page_has_the_timeline_and_breakdown_without_javascript(browser, site_url, width, scheme):
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme,
                                  java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{site_url}models/llama-3-70b/")
        est = estimate(load_preset("llama-3-70b")).to_dict()
        svg = page.locator("#chart-timeline svg")
        assert svg.get_attribute("data-peak-stage") == str(est["peak"]["stage"])
        assert page.text_content("#chart-timeline .mme-tl-peak-label") == \
            f"Peak: stage {est['peak']['stage']}, {_peak_label(est)} allocated"
        assert page.locator("#chart-timeline g.mme-tl-stage").count() == len(est["stages"])
        values = page.eval_on_selector_all("table[data-table=breakdown] tbody tr:not([data-key=total]) td[data-value]",
                                           "tds => tds.map((t) => Number(t.dataset.value))")
        assert sum(values) == est["peak"]["allocated_bytes"]
        assert page.text_content("table[data-table=breakdown] tr[data-key=total] strong") == _peak_label(est).split()[0]
    finally:
        context.close()


def test_long_pipeline_draws_a_sample_of_stages(page, site_url):
    """PP 64 x VPP 2 of the tiny model (128 layers, 512 micro-batches): 31 stages evenly spaced from 0 to 63
    (63 i // 30: 0, 2, 4, ..., 63) and the peak stage are drawn, the caption says so, and the breakdown offers
    the same stages, the peak's first."""
    assert open_page(page, f"{site_url}calculator/?preset=tiny&model.num_layers=128"
                           "&parallelism.pipeline_model_parallel_size=64"
                           "&parallelism.virtual_pipeline_model_parallel_size=2&training.world_size=64"
                           "&training.global_batch_size=1024") == "done"
    page.wait_for_selector(DONE, timeout=120_000)
    est = shown(page)
    stage = est["peak"]["stage"]
    drawn = sorted({63 * i // 30 for i in range(31)} | {stage})
    lines = page.eval_on_selector_all("svg.mme-timeline g.mme-tl-stage", "gs => gs.map((g) => Number(g.dataset.stage))")
    assert sorted(lines) == drawn
    assert page.locator("svg.mme-timeline g.mme-tl-peak").get_attribute("data-stage") == str(stage)
    assert f"Drawn: {len(drawn)} of 64 stages (0, 2, 4, ..., 63" in page.text_content(".mme-timeline-figure figcaption")
    options = page.eval_on_selector_all(".mme-breakdown-stage option", "os => os.map((o) => Number(o.value))")
    assert options == drawn
    assert page.get_attribute(".mme-breakdown", "data-stage") == str(stage)
    page.select_option(".mme-breakdown-stage", "63")
    rows = page.eval_on_selector_all(".mme-bd-table tbody tr", "trs => trs.map((t) => Number(t.dataset.bytes))")
    assert sum(rows) == est["stages"][63]["allocated_bytes"]
