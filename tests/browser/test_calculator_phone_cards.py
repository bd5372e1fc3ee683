"""Issue 29, item 1: on a 390 px phone the layout list of "Find layouts that fit" and the compare table of
"Pin to compare" are cards: Peak, Headroom and "Use this layout" (or a pin's verdict, peak and headroom) sit
inside the screen, with no sideways scrolling, and ten layouts no longer take ~7,000 px. At 1280 px both stay
tables. Both colour schemes, with the cards' text >= 4.5:1 against its background (WCAG AA)."""

from __future__ import annotations

import pytest

from _calc import events, open_page, settle, viewport_page
from test_contrast import CARDS, low_contrast

PHONE, DESKTOP = {"width": 390, "height": 844}, {"width": 1280, "height": 900}


def _scheme(page, scheme: str) -> None:
    page.emulate_media(color_scheme=scheme)


def _search(page) -> None:
    n = page.evaluate("window.__mme.searches")
    page.click("button.mme-find")
    page.wait_for_function(f"() => window.__mme.searches > {n}", timeout=180_000)
    page.wait_for_selector(".mme-layout-table tbody tr")


def _inside(page, selector: str) -> list:
    """The elements of ``selector`` (visible ones) that are not wholly inside the viewport's width."""
    return page.eval_on_selector_all(selector, """es => es.filter((e) => e.offsetParent !== null).map((e) => {
        const r = e.getBoundingClientRect(); return [e.className, r.left, r.right]; })
        .filter(([, l, r]) => l < 0 || r > window.innerWidth + 0.5)""")


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_phone_layout_list_is_cards_with_peak_headroom_and_use_in_view(browser, site_url, scheme):
    with viewport_page(browser, PHONE) as page:
        _scheme(page, scheme)
        assert open_page(page, f"{site_url}calculator/?preset=qwen3-8b") == "done"
        _search(page)
        rows = page.locator(".mme-layout-table tbody tr")
        assert rows.count() == 10
        # no column headers off to the side: each card says what its figures are
        assert page.locator(".mme-layout-table thead").bounding_box()["height"] <= 1
        for sel in (".mme-l-peak", ".mme-l-headroom", "button.mme-use", ".mme-l-layout code"):
            assert page.locator(f".mme-layout-table {sel}").count() >= 9, sel
            assert _inside(page, f".mme-layout-table {sel}") == [], sel
        label = page.evaluate("getComputedStyle(document.querySelector('.mme-layout-table .mme-l-peak'), '::before')"
                              ".content")
        assert "Peak" in label
        wrap = page.locator(".mme-layouts .mme-table-wrap")
        assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth + 1")
        height = page.locator(".mme-layout-table").bounding_box()["height"]
        assert height < 3500, height              # 10 rows took ~7,000 px as a squeezed table
        # readable: the card's figures, labels and button >= 4.5:1 (WCAG AA; test_contrast.py)
        failures, seen = low_contrast(page, CARDS, f"{scheme} layouts")
        assert {".mme-layout-table td", ".mme-layout-table button.mme-use"} <= seen and not failures, failures
        # and the button still works from the card
        n = events(page)
        page.locator(".mme-layout-table button.mme-use").first.click()
        settle(page, n)
        assert page.locator(".mme-layout-table tr.mme-in-use").count() == 1


def test_desktop_layout_list_stays_a_table(browser, site_url):
    with viewport_page(browser, DESKTOP) as page:
        assert open_page(page, f"{site_url}calculator/?preset=qwen3-8b") == "done"
        _search(page)
        assert page.locator(".mme-layout-table thead th").first.is_visible()
        assert page.evaluate("getComputedStyle(document.querySelector('.mme-layout-table tbody tr')).display") \
            == "table-row"


def _pin_two(page) -> None:
    page.click("button.mme-pin")
    n = events(page)
    page.select_option("#mme-q-parallelism\\.tensor_model_parallel_size", "2")
    settle(page, n)
    n = events(page)
    page.select_option("#mme-gpu", "A100-40GB")
    settle(page, n)
    page.click("button.mme-pin")
    page.wait_for_selector(".mme-compare[data-state=done] table", state="attached")


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_phone_compare_is_one_card_per_pin(browser, site_url, scheme):
    with viewport_page(browser, PHONE) as page:
        _scheme(page, scheme)
        assert open_page(page, f"{site_url}calculator/?preset=qwen3-8b") == "done"
        _pin_two(page)
        assert not page.locator(".mme-compare-table").is_visible()
        cards = page.locator(".mme-compare-card")
        assert cards.count() == 2
        for i in range(2):
            text = cards.nth(i).inner_text()
            for word in ("Verdict", "Peak on the device", "Headroom"):
                assert word in text, (i, word, text)
        assert "fits" in cards.nth(0).inner_text() and "does not fit" in cards.nth(1).inner_text()
        assert _inside(page, ".mme-compare-card, .mme-compare-card dd, .mme-compare-card button") == []
        failures, seen = low_contrast(page, CARDS, f"{scheme} compare")
        assert {".mme-compare-card dt", ".mme-compare-card dd"} <= seen and not failures, failures
        # the card's Unpin works
        page.locator(".mme-compare-card[data-pin='0'] button.mme-unpin").click()
        page.wait_for_function("() => document.querySelectorAll('.mme-compare-card').length === 1")


def test_desktop_compare_stays_a_table(browser, site_url):
    with viewport_page(browser, DESKTOP) as page:
        assert open_page(page, f"{site_url}calculator/?preset=qwen3-8b") == "done"
        _pin_two(page)
        assert page.locator(".mme-compare-table").is_visible()
        assert not page.locator(".mme-compare-cards").is_visible()
