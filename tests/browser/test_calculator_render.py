"""How an answer reaches the screen (issue 26: a calculator input change re-renders at p90 <= 50 ms, on two cores):
the results of the last answer are updated in place, not made anew, and what they then show is what a fresh page
shows for the same link. Before, every answer replaced the verdict, the assumptions, the exports and (when the
search went stale or fresh again) the whole table of layouts: on DeepSeek-V3 about 60 elements and 110 more of the
layouts' table per change, which the browser styled, laid out and painted again (traced on two cores: main-thread
time per change 36 -> 25 ms from the updates in place alone)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from _calc import RESULTS, events, open_page, quick, settle  # noqa: E402

#: The elements under ``root`` as text: tag, attributes in name order (a patched element may hold them in another
#: order than a new one; links as absolute addresses, as Material's instant navigation rewrites them once it has
#: started), text, children; the chart left out (drawn at the width of its page, which a scroll bar narrows while
#: the other page has none yet).
CANON = """(sel) => {
  const value = (a) => (a.name === "href" ? new URL(a.value, location.href).href : a.value);
  const canon = (n) => n.nodeType === 3 ? n.nodeValue : n.nodeType !== 1 || n.classList.contains("mme-chart-box") ? "" :
    `<${n.tagName} ${[...n.attributes].map((a) => `${a.name}=${value(a)}`).sort().join(" ")}>` +
    [...n.childNodes].map(canon).join("") + `</${n.tagName}>`;
  return canon(document.querySelector(sel));
}"""


def _change(page, path: str, value: str) -> str:
    n = events(page)
    page.fill(quick(path), value)
    return settle(page, n)


def test_an_input_change_updates_the_results_in_place(page, site_url):
    """A batch-size change on Qwen3 8B (TP 4 on 8 GPUs: DP 2, micro-batch 2, so 64 is valid) keeps every part of the
    results and every row of the layouts found (the search goes stale, then fresh again when the value comes back),
    and the results then read exactly as on a page opened at the new link."""
    assert open_page(page, f"{site_url}calculator/?preset=qwen3-8b&gpu=H100-80GB") == "done"
    n = page.evaluate("window.__mme.searches")
    page.click("button.mme-find")
    page.wait_for_function(f"() => window.__mme.searches > {n}", timeout=120_000)
    page.evaluate("() => { window.__kept = [...document.querySelectorAll('.mme-results > *, .mme-layout-table tbody tr')]; }")
    assert page.evaluate("window.__kept.length") > 10

    assert _change(page, "training.global_batch_size", "64") == "done"
    assert page.is_visible(".mme-stale")                 # the layouts were found for 32
    assert page.locator("button.mme-use:not([disabled])").count() == 0
    assert page.evaluate("window.__kept.every((n) => n.isConnected)"), "an answer made the results anew"
    # 64 sequences / (DP 2 x micro-batch 2) = 16 micro-batches: the patched sentence is the new one
    assert "16 micro-batches per step" in page.inner_text(".mme-parallel")

    fresh = page.context.new_page()
    try:
        assert open_page(fresh, page.url) == "done"
        fresh.wait_for_function(f"() => document.querySelector({RESULTS!r} + ' .mme-calc-chart')")
        assert page.evaluate(CANON, RESULTS) == fresh.evaluate(CANON, RESULTS)
    finally:
        fresh.close()

    assert _change(page, "training.global_batch_size", "32") == "done"
    assert not page.is_visible(".mme-stale")
    assert page.locator("button.mme-use:not([disabled])").count() == page.locator(".mme-layout-table tbody tr").count()
    assert page.evaluate("window.__kept.every((n) => n.isConnected)"), "the layouts' table was made anew"
