"""Issue 29, item 2: a preset carries its provenance. The calculator links to the preset's model page with a
relative link (served under a sub-path here; the offline bundle's .html pages are checked on the built file), and
a published recipe the estimator finds does not fit says so and why (Gemma 3 1B on one H100, Llama 3.1 405B,
Qwen2.5-72B); a changed recipe, or one that fits, has no such note. Phone and desktop, both schemes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimator.web.protocol import compute  # noqa: E402

from _calc import calc, events, fill, open_page, settle, viewport_page  # noqa: E402

VIEWS = [({"width": 1280, "height": 900}, "light"), ({"width": 390, "height": 844}, "dark")]


@pytest.mark.parametrize("viewport,scheme", VIEWS, ids=["desktop-light", "phone-dark"])
@pytest.mark.parametrize("name", ["gemma-3-1b", "llama-3.1-405b", "qwen2.5-72b"])
def test_a_published_recipe_that_does_not_fit_says_so_and_why(browser, site_url, name, viewport, scheme):
    want = compute({"preset": name, "values": {}, "gpu": "H100-80GB"}, False)["view"]["preset"]["recipe_note"]
    assert want and want.startswith("The published recipe does not fit") and "Why" in want
    with viewport_page(browser, viewport) as page:
        page.emulate_media(color_scheme=scheme)
        assert open_page(page, f"{site_url}calculator/?preset={name}&gpu=H100-80GB") in ("done", "error")
        settle(page, 0)
        note = page.locator(".mme-recipe-note")
        assert note.is_visible()
        assert note.inner_text() == want
        box = note.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 1
        # its model page, by a relative link that works under any sub-path
        link = page.locator(".mme-about-link a")
        assert calc(page, f"c.boot.model_pages[{name!r}]") == f"../models/{name}/"   # (Material makes it absolute)
        assert link.get_attribute("href").endswith(f"/mme/models/{name}/")
        n = page.evaluate("location.pathname")
        link.click()
        page.wait_for_function(f"() => location.pathname !== {n!r}")
        assert page.evaluate("location.pathname").endswith(f"/mme/models/{name}/")


def test_a_changed_recipe_or_one_that_fits_has_no_note(browser, site_url):
    with viewport_page(browser, VIEWS[0][0]) as page:
        assert open_page(page, f"{site_url}calculator/?preset=qwen3-8b") == "done"
        settle(page, 0)
        assert page.locator(".mme-recipe-note").count() == 0
        assert page.locator(".mme-about-link a").get_attribute("href").endswith("/mme/models/qwen3-8b/")
        assert calc(page, "c.boot.model_pages['qwen3-8b']") == "../models/qwen3-8b/"
        assert open_page(page, f"{site_url}calculator/?preset=gemma-3-1b&gpu=H100-80GB") in ("done", "error")
        settle(page, 0)
        assert page.locator(".mme-recipe-note").is_visible()
        n = events(page)
        fill(page, "training.micro_batch_size", "2")
        settle(page, n)
        assert page.locator(".mme-recipe-note").count() == 0


def test_offline_bundle_links_to_the_html_model_page():
    """The offline build (use_directory_urls false) links calculator.html to models/NAME.html: the expression
    hooks/runtime.py uses, on the offline build's file names."""
    from mkdocs.structure.files import File
    src = str(ROOT / "docs")
    calc = File("calculator.md", src, "/tmp/x", use_directory_urls=False)
    model = File("models/gemma-3-1b.md", src, "/tmp/x", use_directory_urls=False)
    assert model.url_relative_to(calc) == "models/gemma-3-1b.html"
    online = File("models/gemma-3-1b.md", src, "/tmp/x", use_directory_urls=True)
    assert online.url_relative_to(File("calculator.md", src, "/tmp/x", use_directory_urls=True)) == \
        "../models/gemma-3-1b/"
    assert 'files.get_file_from_path(f"models/{p[\'name\']}.md")' in (ROOT / "hooks" / "runtime.py").read_text()
