"""Issue 29, cold start of a catalog model link: ``calculator/?hf=ID`` shows the numbers the site build computed for
that id (hooks/runtime.py, :func:`estimator.web.protocol.hf_precomputed`), marked as precomputed, before Python has
started, as a preset link does; Python's own answer then replaces them, and is the same. Before, such a link showed
"Waiting for Python" until Python had started and imported the model (1.8 s measured for Qwen3-30B-A3B, target
0.8 s). Served, the page fetches one small JSON file for the id; from file:// (the offline bundle), where Chromium
refuses fetch(), a classic script carries the same data.

Expected numbers: what the page shows when Python has answered, and for the MoE the estimate of the core run here
(the model on the default preset's layout, as ``estimate qwen3-8b --hf ID`` gives it)."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimator import estimate, from_hf_config, load_preset  # noqa: E402
from estimator.web import DEFAULT_PRESET  # noqa: E402

from _calc import EVENTS, RESULTS, numbers, on_page_gpu, shown  # noqa: E402

MOE = "Qwen/Qwen3-30B-A3B"
#: A dense model, a MoE, a VLM (its tower counted) and DeepSeek-V4 (hyper-connections, its own attention).
IDS = ["Qwen/Qwen3-8B", MOE, "Qwen/Qwen3-VL-30B-A3B-Instruct", "deepseek-ai/DeepSeek-V4-Flash"]

# What the results show at each data-state: the headline, the table's text and the Model box's note.
SCREEN = """() => ({ state: document.querySelector('.mme-results').dataset.state,
  headline: document.querySelector('.mme-sticky').textContent,
  table: (document.querySelector('.mme-results table') || {}).innerText || null,
  summary: (document.querySelector('.mme-results .mme-summary') || {}).textContent || null,
  box: document.querySelector('#mme-preset').value,
  note: document.querySelector('#mme-preset-note').textContent })"""
# Records the screen the first time the results are marked precomputed (for file://, where nothing can be held back).
RECORD = """window.__mmeScreens = [];
new MutationObserver(() => {
  const r = document.querySelector('.mme-results');
  if (!r || r.dataset.state !== 'precomputed' || window.__mmeScreens.length) return;
  window.__mmeScreens.push((""" + SCREEN + """)());
}).observe(document, { subtree: true, attributes: true, attributeFilter: ['data-state'] });"""


def _on_default_layout(hf_id: str) -> dict:
    cfg = load_preset(DEFAULT_PRESET).to_dict()
    cfg["model"] = from_hf_config(hf_id)
    return estimate(on_page_gpu(cfg)).to_dict()


@pytest.mark.parametrize("hf_id", IDS)
def test_a_catalog_link_shows_build_time_numbers_then_the_same_from_python(browser, site_url, hf_id):
    """Python's runtime is held back: the link shows its numbers all the same, marked as precomputed, with no
    estimate object (data-estimate is Python's only). Released, Python answers with the very same screen."""
    context = browser.new_context()
    held, requests = [], []
    context.route("**/pyodide.asm.wasm", lambda route: held.append(route))
    try:
        page = context.new_page()
        page.on("request", lambda req: requests.append(req.url))
        page.add_init_script(EVENTS)
        page.goto(f"{site_url}calculator/?hf={hf_id}", wait_until="domcontentloaded")
        page.wait_for_selector(f"{RESULTS}[data-state=precomputed] table", timeout=30_000)
        before = page.evaluate(SCREEN)
        assert before["headline"].startswith(f"{hf_id}: ") and "GiB per GPU at the peak" in before["headline"]
        assert before["box"] == hf_id and hf_id in before["note"]        # the Model box's note, as Python's
        assert "Precomputed" in page.inner_text(".mme-badge")
        assert page.get_attribute(RESULTS, "data-source") == "precomputed"
        assert page.get_attribute(RESULTS, "data-estimate") is None
        assert not page.evaluate("document.querySelector('[data-mme-calculator]').calculator.engine.ready")
        # one small file for this id, from this site
        fetched = [u for u in requests if "/assets/calculator/hf/" in u]
        assert [urlparse(u).path.rsplit("/", 1)[1] for u in fetched] == [hf_id.replace("/", "--") + ".json"]
        page.wait_for_function("() => document.querySelector('[data-mme-calculator]').calculator.engine")
        for route in held:
            route.continue_()
        page.wait_for_selector(f"{RESULTS}[data-state=done]", timeout=90_000)
        after = page.evaluate(SCREEN)
        assert after == {**before, "state": "done"}
        assert page.get_attribute(RESULTS, "data-source") == "python" and not page.is_visible(".mme-badge")
        if hf_id == MOE:
            assert numbers(shown(page)) == numbers(_on_default_layout(MOE))
    finally:
        context.close()


@pytest.fixture(scope="module")
def offline_dir(site_dir, tmp_path_factory) -> Path:
    """The offline bundle as a user gets it: the zip the site links to (hooks/offline_zip.py), unzipped."""
    import zipfile
    out = tmp_path_factory.mktemp("offline-short-links")
    with zipfile.ZipFile(site_dir / "downloads" / "megatron-memory-estimator-offline.zip") as zf:
        zf.extractall(out)
    return out / "megatron-memory-estimator-offline"


def test_a_catalog_link_of_the_offline_bundle_is_precomputed_too(browser, offline_dir):
    """From file:// (no server, fetch() refused): the id's numbers come from a classic script of the bundle, are
    shown marked as precomputed, and are the ones Python then computes."""
    context = browser.new_context()
    errors = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.add_init_script(EVENTS)
        page.add_init_script(RECORD)
        page.goto((offline_dir / "calculator.html").as_uri() + f"?hf={MOE}")
        page.wait_for_selector(f"{RESULTS}[data-state=done]", timeout=90_000)
        screens = page.evaluate("window.__mmeScreens")
        assert len(screens) == 1 and screens[0]["headline"].startswith(f"{MOE}: ")
        assert page.evaluate(SCREEN) == {**screens[0], "state": "done"}
        assert numbers(shown(page)) == numbers(_on_default_layout(MOE))
    finally:
        context.close()
    assert not errors
