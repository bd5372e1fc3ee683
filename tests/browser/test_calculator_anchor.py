"""An error's link to its field takes the reader to the field, below the sticky result bar, without reloading the page
(issue 29).

The header (2.4rem) and the one-line sticky result (``.mme-sticky``, sticky at top 2.4rem) cover the top of the
viewport; a target scrolled into view must start below the sticky bar's bottom edge. Left to the browser, the hash
change made Material's instant navigation fetch the page again and rebuild the calculator (the field was gone for
a moment, then came back unscrolled): the link is followed by the calculator itself.
"""

from __future__ import annotations

import pytest

from _calc import open_page


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 900}, {"width": 390, "height": 844}],
                         ids=["desktop", "phone"])
def test_error_link_lands_on_its_field_below_the_bar(browser, site_url, viewport):
    """``hidden_size`` 4095 is not divisible by the 32 heads: the page shows "No estimate" with a link to the field.
    Clicking it scrolls the field in, below the bar, in the same calculator (no new request for the page)."""
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    try:
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b&model.hidden_size=4095") == "error"
        link = page.locator(".mme-errors a").first
        href = link.evaluate("(a) => a.hash")            # the attribute is made absolute by Material
        assert href.startswith("#mme-"), href
        page.evaluate("() => { window.__root = document.querySelector('[data-mme-calculator]'); }")
        requests = []
        page.on("request", lambda r: requests.append(r.url) if "/calculator/" in r.url else None)
        link.click()
        page.wait_for_timeout(500)
        same, top, sticky, inner, focused = page.evaluate("""(id) => {
            const el = document.getElementById(id);
            return [window.__root === document.querySelector('[data-mme-calculator]'),
                    el.getBoundingClientRect().top, document.querySelector('.mme-sticky').getBoundingClientRect().bottom,
                    window.innerHeight, document.activeElement === el]; }""", href[1:])
        assert same and not requests, ("the calculator was rebuilt", requests)
        assert sticky - 1 <= top < inner, (href, top, sticky, inner)
        assert focused, f"{href} is not focused"
    finally:
        context.close()
