"""Issue 29, item 4: a skip link takes keyboard users to the Model box on their first Tab; retyping a preset's own
value is no change; Recent stores what the user settled on, not each keystroke; the results tables' headers sit
as their columns do. Desktop and phone."""

from __future__ import annotations

import json

import pytest

from _calc import calc, events, open_page, quick, settle, viewport_page

VIEWS = [{"width": 1280, "height": 900}, {"width": 390, "height": 844}]


@pytest.mark.parametrize("viewport", VIEWS, ids=["desktop", "phone"])
def test_first_tab_reaches_a_skip_link_to_the_model_box(browser, site_url, viewport):
    with viewport_page(browser, viewport) as page:
        assert open_page(page, f"{site_url}calculator/") == "done"
        page.keyboard.press("Tab")
        focused = page.evaluate("[document.activeElement.className, document.activeElement.textContent.trim()]")
        assert "mme-skip" in focused[0] and focused[1] == "Skip to the Model box"
        assert page.locator("a.mme-skip").is_visible()           # shown while focused
        page.keyboard.press("Enter")
        page.wait_for_function("() => document.activeElement && document.activeElement.id === 'mme-preset'")
        box = page.locator("#mme-preset").bounding_box()
        assert 0 <= box["y"] <= viewport["height"]


@pytest.mark.parametrize("viewport", VIEWS, ids=["desktop", "phone"])
def test_retyping_a_presets_own_value_is_no_change(browser, site_url, viewport):
    with viewport_page(browser, viewport) as page:
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
        own = calc(page, "c.presetValue('training.seq_length')")
        n = events(page)
        page.fill(quick("training.seq_length"), str(own))
        settle(page, n)
        assert calc(page, "Object.keys(c.state.values)") == []
        assert "training.seq_length" not in page.url


def test_recent_stores_the_settled_value_not_each_keystroke(browser, site_url):
    with viewport_page(browser, VIEWS[0]) as page:
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
        page.evaluate("localStorage.removeItem('mme.history')")
        page.click(quick("training.seq_length"), click_count=3)
        page.keyboard.press("Backspace")
        n = events(page)
        page.keyboard.type("2048", delay=900)                   # each keystroke answered before the next
        settle(page, n)
        page.wait_for_timeout(2000)                              # the form rests
        history = json.loads(page.evaluate("localStorage.getItem('mme.history')") or "[]")
        seqs = [e["state"]["values"].get("training.seq_length") for e in history]
        assert seqs[0] == "2048"
        assert not {"2", "20", "204"} & set(seqs), seqs


def test_table_headers_align_with_their_columns(browser, site_url):
    with viewport_page(browser, VIEWS[0]) as page:
        assert open_page(page, f"{site_url}calculator/?preset=qwen3-8b") == "done"
        n = page.evaluate("window.__mme.searches")
        page.click("button.mme-find")
        page.wait_for_function(f"() => window.__mme.searches > {n}", timeout=180_000)
        for table in (".mme-results table.mme-table", ".mme-layout-table"):
            pairs = page.evaluate("""(sel) => { const t = document.querySelector(sel);
                const heads = [...t.tHead.rows[0].cells], row = t.tBodies[0].rows[0];
                return heads.map((th, i) => [th.textContent, getComputedStyle(th).textAlign,
                                             getComputedStyle(row.cells[i]).textAlign]); }""", table)
            assert [p for p in pairs if p[0] and p[1] != p[2]] == [], (table, pairs)


@pytest.mark.parametrize("viewport", VIEWS, ids=["desktop", "phone"])
def test_a_long_quick_choice_is_not_cut(browser, site_url, viewport):
    """DeepSeek-V3's VPP select reads "set by the pipeline layout": the whole text fits in the select."""
    with viewport_page(browser, viewport) as page:
        assert open_page(page, f"{site_url}calculator/?preset=deepseek-v3") == "done"
        settle(page, 0)
        sel = quick("parallelism.virtual_pipeline_model_parallel_size")
        page.wait_for_function(f"() => document.querySelector({sel!r}).selectedOptions.length === 1")
        room, need, text = page.evaluate(f"""(() => {{ const s = document.querySelector({sel!r}), st = getComputedStyle(s);
            const ctx = document.createElement('canvas').getContext('2d'); ctx.font = st.font;
            const text = s.selectedOptions[0].textContent;
            return [s.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight),
                    ctx.measureText(text).width, text]; }})()""")
        assert len(text) > 12, text
        assert need + 16 <= room, (text, need, room)             # 16 px for the arrow
        assert page.get_attribute(sel, "title") == text
        box = page.locator(sel).bounding_box()
        assert box["x"] + box["width"] <= viewport["width"]


@pytest.mark.parametrize("viewport,scale", [({"width": 640, "height": 450}, 2), ({"width": 390, "height": 844}, 1)],
                         ids=["zoom-200", "phone"])
@pytest.mark.parametrize("preset", ["llama-3-70b", "llama-3.1-405b"])
def test_the_verdict_column_is_not_cut(browser, site_url, viewport, scale, preset):
    """1280 px at 200 % zoom is a 640 px page at twice the pixels: the stage table's Verdict column stays on it."""
    context = browser.new_context(viewport=viewport, device_scale_factor=scale)
    try:
        page = context.new_page()
        assert open_page(page, f"{site_url}calculator/?preset={preset}&gpu=H100-80GB") == "done"
        wrap = ".mme-results .mme-table-wrap"
        sizes = page.evaluate(f"""(() => {{ const w = document.querySelector({wrap!r});
            const th = [...w.querySelectorAll('thead th')].pop();
            return [w.scrollWidth, w.clientWidth, th.textContent, th.getBoundingClientRect().right,
                    w.getBoundingClientRect().right]; }})()""")
        assert sizes[2] == "Verdict"
        assert sizes[0] <= sizes[1] + 1 and sizes[3] <= sizes[4] + 1, sizes
    finally:
        context.close()
