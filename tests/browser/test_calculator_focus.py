"""Results appear where the user is looking (issue 29, item 1): after "Find layouts that fit", "Pin to compare" and
"Make it fit"'s "Apply", the page scrolls to what the action brought, below the sticky result bar, moves focus
there and says it to screen readers; while the action works, a badge stands beside the button that was pressed.

Before: the layout list landed ~2,850 px below the button (1,440 px wide), the compare table ~2,450 px (3,480 px on
a phone); focus and scroll stayed where they were and the "Searching… N s" badge was off-screen.

The case: Llama 3 70B LoRA (Bridge's 8-GPU H100 recipe) at sequence 8192 and micro-batch 2 does not fit an H100
(about 138 GiB per GPU against 79.65 GiB), so it has a "Make it fit" list and a layout search with results.
"""

from __future__ import annotations

import pytest

from _calc import RESULTS, events, open_page, viewport_page, wait

URL = ("calculator/?preset=llama-3-70b-lora&gpu=H100-80GB&training.seq_length=8192&training.micro_batch_size=2")
VIEWPORTS = [{"width": 1280, "height": 900}, {"width": 390, "height": 844}]

IN_VIEW = """(sel) => { const el = document.querySelector(sel);
    const top = el.getBoundingClientRect().top, bar = document.querySelector('.mme-sticky').getBoundingClientRect().bottom;
    const a = document.activeElement;
    return { top, bar, inner: window.innerHeight, focused: a === el || el.contains(a),
             said: document.querySelector('.mme-sr').textContent }; }"""

# Clicks and reads the badge in the same task: Python may answer before a second call could look.
BESIDE = """(sel) => { const b = document.querySelector(sel); b.click(); const w = b.nextElementSibling;
    if (!w || !w.classList.contains('mme-working')) return null;
    const r = w.getBoundingClientRect();
    return { text: w.textContent, top: r.top, bottom: r.bottom, inner: window.innerHeight }; }"""


def _landed(page, sel: str) -> dict:
    got = page.evaluate(IN_VIEW, sel)
    assert got["bar"] - 1 <= got["top"] < got["inner"] - 40, (sel, got)
    assert got["focused"], f"focus is not on {sel}"
    assert got["said"].strip(), "nothing announced"
    return got


def _pressed(page, sel: str) -> dict:
    """Press the button (scrolled into view as a user would) and read the badge beside it at once."""
    page.locator(sel).first.scroll_into_view_if_needed()
    badge = page.evaluate(BESIDE, sel)
    assert badge, f"no working badge beside {sel}"
    assert 0 <= badge["top"] and badge["bottom"] <= badge["inner"], badge
    return badge


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=["desktop", "phone"])
def test_search_pin_and_apply_land_where_the_eye_is(browser, site_url, viewport):
    with viewport_page(browser, viewport) as page:
        assert open_page(page, site_url + URL) == "done"
        page.evaluate("() => { window.__mme.compares = 0; document.addEventListener('compare:done', "
                      "() => window.__mme.compares++, true); }")

        # 1. The layout search: badge beside the button, then the list's heading in view and focused.
        badge = _pressed(page, "button.mme-find")
        assert badge["text"].startswith("Searching"), badge
        page.wait_for_function("() => window.__mme.searches > 0", timeout=120_000)
        got = _landed(page, "#mme-layouts-title")
        assert "layouts found" in got["said"] or "layout found" in got["said"], got
        assert not page.locator("button.mme-find + .mme-working").count()

        # 2. Pin to compare: the table's heading in view and focused.
        page.evaluate("() => window.scrollTo(0, 0)")
        n = page.evaluate("window.__mme.compares")
        _pressed(page, "button.mme-pin")
        page.wait_for_function(f"() => window.__mme.compares > {n} && "
                               "document.querySelector('.mme-compare').dataset.state === 'done'", timeout=90_000)
        got = _landed(page, "#mme-compare-title")
        assert "Pinned" in got["said"], got

        # 3. "Make it fit": Apply the first suggestion; the new estimate in view and focused.
        page.wait_for_selector(".mme-fit[data-state='done'] button.mme-apply", timeout=90_000)
        label = page.inner_text(".mme-fit-list li .mme-fit-label")
        n = events(page)
        badge = _pressed(page, ".mme-fit-list button.mme-apply")
        assert badge["text"].startswith("Applying"), badge
        assert wait(page, n) == "done"
        page.wait_for_timeout(100)
        got = _landed(page, RESULTS)
        assert got["said"].startswith(f"Applied: {label}."), got
