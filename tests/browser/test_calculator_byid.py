"""Issue 27, item 4: picking a model by its Hugging Face id comes first on the page. The Model box at the top takes a
preset or a catalog Hub id with completion; ``?hf=ID`` opens the calculator with that model; the headline, the pins and
the recent list name it; the catalog page links every supported model to the calculator; an unknown id gets the
page's message with its closest ids as buttons. Expected numbers come from the core run here in CPython."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimator import estimate, from_hf_config, load_preset  # noqa: E402
from estimator.web import DEFAULT_PRESET  # noqa: E402

from _calc import EVENTS, events, numbers, on_page_gpu, open_page, settle, shown, viewport_page  # noqa: E402

BOX = "#mme-preset"
MOE = "Qwen/Qwen3-30B-A3B"


def _on_default_layout(hf_id: str) -> dict:
    """The estimate of a catalog model on the default preset's layout, as `estimate qwen3-8b --hf ID` gives it."""
    cfg = load_preset(DEFAULT_PRESET).to_dict()
    cfg["model"] = from_hf_config(hf_id)
    return estimate(on_page_gpu(cfg)).to_dict()


def _headline(page) -> str:
    return page.inner_text(".mme-sticky")


def test_typing_a_hub_id_in_the_first_box_estimates_it_and_names_it(page, site_url):
    assert open_page(page, site_url + "calculator/") == "done"
    box = page.locator(BOX)
    assert box.evaluate("(el) => el.tagName") == "INPUT" and box.get_attribute("list") == "mme-preset-list"
    # The box is the first control, labelled Model, its list holding the presets and the catalog's ids.
    assert page.evaluate("() => document.querySelector('.mme-calc input, .mme-calc select').id") == "mme-preset"
    assert page.inner_text("label[for=mme-preset]") == "Model"
    assert page.locator(f"#mme-preset-list option[value='{MOE}']").count() == 1
    assert page.locator("#mme-preset-list option[value='llama-3-8b']").count() == 1
    n = events(page)
    box.fill(MOE)                                          # typed out in full: taken at once
    assert settle(page, n) == "done"
    assert numbers(shown(page)) == numbers(_on_default_layout(MOE))
    assert _headline(page).startswith(f"{MOE}: ") and "GiB per GPU at the peak" in _headline(page)
    assert parse_qs(urlparse(page.url).query)["hf"] == [MOE] and f"hf={MOE}" in page.url
    assert "from the model catalog" in page.inner_text("#mme-preset-note")
    # A preset by name, on Enter, and back to the id with Back.
    n = events(page)
    box.fill("llama-3-8b")
    box.press("Enter")
    assert settle(page, n) == "done"
    assert numbers(shown(page)) == numbers(estimate(on_page_gpu(load_preset("llama-3-8b"))).to_dict())
    assert "hf=" not in page.url and not _headline(page).startswith(MOE)
    page.go_back()              # (Material may build the page anew: wait for the answer of the one shown)
    page.wait_for_function(f"() => document.querySelector('.mme-sticky').textContent.startsWith('{MOE}: ')",
                           timeout=90_000)
    page.wait_for_selector(".mme-results[data-state=done]")
    page.wait_for_timeout(700)
    page.wait_for_selector(".mme-results[data-state=done]")
    assert page.input_value(BOX) == MOE and numbers(shown(page)) == numbers(_on_default_layout(MOE))


def test_a_short_link_opens_the_model_named_and_pins_and_recent_keep_the_name(page, site_url):
    assert open_page(page, f"{site_url}calculator/?hf={MOE}") == "done"
    assert page.input_value(BOX) == MOE
    assert _headline(page).startswith(f"{MOE}: ")
    assert numbers(shown(page)) == numbers(_on_default_layout(MOE))
    assert page.url.endswith(f"calculator/?hf={MOE}")      # the page's own link is the short one
    page.click("button.mme-pin")
    page.wait_for_selector(".mme-compare[data-state=done] th[data-pin='0']")
    assert page.inner_text(".mme-compare th[data-pin='0']").startswith(MOE)
    assert "Custom model" not in page.inner_text(".mme-compare")
    page.click(".mme-history > summary")
    assert page.inner_text(".mme-history li").split("\n")[0].endswith(_headline(page)) or \
        _headline(page) in page.inner_text(".mme-history li")
    # Another GPU: the link keeps the id, and opens the same estimate elsewhere.
    n = events(page)
    page.select_option("#mme-gpu", "H200-141GB")
    assert settle(page, n) == "done"
    assert f"hf={MOE}" in page.url and "gpu=H200-141GB" in page.url
    url, estimate_shown = page.url, shown(page)
    other = page.context.new_page()
    other.add_init_script(EVENTS)
    other.goto(url)
    other.wait_for_function("() => window.__mme.events.length > 0", timeout=90_000)
    assert settle(other, 0) == "done" and shown(other) == estimate_shown
    assert other.input_value(BOX) == MOE and other.inner_text(".mme-sticky").startswith(f"{MOE}: ")
    other.close()


def test_an_unknown_id_gets_the_pages_words_and_clickable_closest_ids(page, site_url):
    assert open_page(page, site_url + "calculator/?preset=llama-3-8b") == "done"
    before = shown(page)
    page.fill(BOX, "openai/gpt-oss-12b")
    page.press(BOX, "Enter")
    err = page.wait_for_selector("#mme-preset-err:not([hidden])")
    text = err.inner_text()
    assert text.startswith("'openai/gpt-oss-12b' is not a preset or a Hugging Face id of the model catalog")
    assert "All settings › import" in text and "python -m" not in text
    assert page.get_attribute(BOX, "aria-invalid") is not None
    assert shown(page) == before                            # the estimate shown stays
    closest = page.locator("#mme-preset-err button.mme-closest")
    assert closest.first.inner_text() == "openai/gpt-oss-120b"
    n = events(page)
    closest.first.click()
    assert settle(page, n) == "done"
    assert page.input_value(BOX) == "openai/gpt-oss-120b" and not page.is_visible("#mme-preset-err")
    assert _headline(page).startswith("openai/gpt-oss-120b: ")
    # A short link to an unknown id: the results say which field, the box offers the closest ids.
    page.goto(f"{site_url}calculator/?hf=Qwen/Qwen3-30B-A3")
    page.wait_for_selector(".mme-results[data-state=error]", timeout=90_000)
    assert "Model" in page.inner_text(".mme-results") and "Qwen/Qwen3-30B-A3B" in page.inner_text(".mme-results")
    page.wait_for_selector("#mme-preset-err:not([hidden]) button.mme-closest")
    assert page.locator("#mme-preset-err button.mme-closest").first.inner_text() == MOE


def test_a_catalog_row_opens_the_calculator_with_its_model(page, site_url, site_dir):
    html = (site_dir / "models" / "catalog" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../calculator/?hf=Qwen/Qwen3-8B"' in html          # relative: any host, any path
    page.add_init_script(EVENTS)
    page.goto(f"{site_url}models/catalog/", wait_until="load")
    page.click("tr[data-hf-id='Qwen/Qwen3-8B'] a")
    page.wait_for_selector(".mme-results[data-state=done]", timeout=90_000)
    assert page.input_value(BOX) == "Qwen/Qwen3-8B"
    page.wait_for_function("() => document.querySelector('.mme-sticky').textContent.startsWith('Qwen/Qwen3-8B: ')")
    # Qwen3-8B: 8,190,735,360 parameters (its safetensors total, ../shared/reference/hf-configs/SOURCES.md), with the
    # vocabulary padded as Megatron pads it on the default preset's TP
    est = shown(page)
    assert numbers(est) == numbers(_on_default_layout("Qwen/Qwen3-8B"))
    assert est["parameters"]["total"] - est["parameters"]["vocab_padding"] == 8_190_735_360


def test_the_model_box_fits_a_phone(browser, site_url):
    with viewport_page(browser, {"width": 390, "height": 844}) as page:
        page.add_init_script(EVENTS)
        page.goto(f"{site_url}calculator/?hf={MOE}")
        page.wait_for_selector(".mme-results[data-state=done]", timeout=90_000)
        box = page.locator(BOX).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_box_and_its_message_are_readable_in_both_schemes(browser, site_url, scheme, tmp_path):
    """The box's text and border, the not-in-catalog message and its closest-id buttons: text >= 4.5:1, the box's
    and the buttons' borders >= 3:1 (WCAG AA), at 1280 px, light and dark."""
    from test_contrast import PROBE, SETTLED, ratio
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    try:
        page = context.new_page()
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
        page.wait_for_function(SETTLED, timeout=60_000)
        page.fill(BOX, "openai/gpt-oss-12b")
        page.press(BOX, "Enter")
        page.wait_for_selector("#mme-preset-err:not([hidden]) button.mme-closest")
        page.screenshot(path=str(tmp_path / f"box-{scheme}.png"))
        failures = []
        for selector, border in ((BOX, True), ("#mme-preset-err p", False), ("#mme-preset-err .mme-fix", True)):
            items = page.evaluate(PROBE.replace("e.textContent.trim())", "(e.textContent.trim() || e.value))"), selector)
            assert items, selector
            for item in items:
                if ratio(item["fg"], item["bg"]) < 4.5:
                    failures.append(f"{selector} {item['text']!r}: text {ratio(item['fg'], item['bg']):.2f}:1")
                if border and item["border"] is not None and ratio(item["border"], item["outer"]) < 3.0:
                    failures.append(f"{selector}: border {ratio(item['border'], item['outer']):.2f}:1")
        assert not failures, failures
    finally:
        context.close()


@pytest.fixture(scope="module")
def offline_dir(site_dir, tmp_path_factory) -> Path:
    """The offline bundle as a user gets it: the zip the site links to (hooks/offline_zip.py), unzipped."""
    import zipfile
    out = tmp_path_factory.mktemp("offline-byid")
    with zipfile.ZipFile(site_dir / "downloads" / "megatron-memory-estimator-offline.zip") as zf:
        zf.extractall(out)
    return out / "megatron-memory-estimator-offline"


def test_a_catalog_row_opens_its_model_in_the_offline_bundle(browser, offline_dir):
    """From file://, with no server: the catalog page's link is ../calculator.html?hf=ID, and it opens that model."""
    html = (offline_dir / "models" / "catalog.html").read_text(encoding="utf-8")
    assert f'href="../calculator.html?hf={MOE}"' in html
    with viewport_page(browser, {"width": 1280, "height": 900}) as page:
        page.add_init_script(EVENTS)
        page.goto((offline_dir / "models" / "catalog.html").as_uri(), wait_until="load")
        page.click(f"tr[data-hf-id='{MOE}'] a")
        page.wait_for_selector(".mme-results[data-state=done]", timeout=90_000)
        assert page.input_value(BOX) == MOE and page.inner_text(".mme-sticky").startswith(f"{MOE}: ")
        assert numbers(shown(page)) == numbers(_on_default_layout(MOE))
