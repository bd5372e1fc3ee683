"""Wide documentation tables say that they scroll (issue 29: 160 of 307 tables scrolled sideways at 390 px with
no hint).

Each table's scroll box (Material's ``.md-typeset__scrollwrap``) carries scroll shadows: two
linear gradients fixed to the box's edges (attachment ``scroll``) under two covers in the page's colour that
move with the content (attachment ``local``), so that a shadow shows on a side with more columns only; the table
in it is transparent, so that they show through.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_tables_that_scroll_show_a_shadow(browser, site_url, scheme):
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme=scheme)
    page = context.new_page()
    try:
        page.goto(site_url + "configuration/", wait_until="load")
        found = page.evaluate("""() => [...document.querySelectorAll('.md-typeset__scrollwrap')]
            .filter((t) => t.scrollWidth > t.clientWidth + 1).map((t) => {
                const s = getComputedStyle(t), table = t.querySelector('table');
                return [s.backgroundImage, s.backgroundAttachment, getComputedStyle(table).backgroundColor]; })""")
        assert found, "no table scrolls sideways at 390 px on the configuration page"
        for image, attachment, table in found:
            assert table == "rgba(0, 0, 0, 0)", table
            assert image.count("linear-gradient") == 4, image
            assert attachment.replace(" ", "").startswith("local,local,scroll,scroll"), attachment
    finally:
        context.close()
