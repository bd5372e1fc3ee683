"""The calculator as a planner uses it (issue 13), in Chromium: each test names the point it covers and
failed on the page before that point was fixed. Expected numbers come from the core run here in CPython
(``estimator.estimate``, ``estimator.web``), the same package the page runs in Pyodide."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimator import estimate
from estimator import web  # noqa: E402
from estimator.formats.presets import list_presets, load_preset  # noqa: E402
from estimator.plan.search import search  # noqa: E402

from _calc import (EVENTS, RESULTS, calc, events, field, fill, numbers, on_page_gpu, open_page, quick,  # noqa: E402
                   reveal, settle, shown, wait)

H100 = "H100-80GB"


def _search(page) -> None:
    n = page.evaluate("window.__mme.searches")
    page.click("button.mme-find")
    page.wait_for_function(f"() => window.__mme.searches > {n}", timeout=120_000)


# ---------------------------------------------------------------- 1, 2, 6: the layout search


@pytest.mark.parametrize("name", list_presets())
def test_every_layout_found_applies_to_what_the_search_showed(page, site_url, name):
    """Point 1: "Use this layout" on each of the top 10 results gives a valid configuration whose estimate is
    the one of the layout (Qwen3-235B: 10 of 10 were invalid, DeepSeek-V3: 7 of 10); point 6: the results
    stay after use, the one in use marked."""
    assert open_page(page, f"{site_url}calculator/?preset={name}&gpu={H100}") == "done"
    _search(page)
    cfg = load_preset(name).to_dict()
    expected = search(cfg, num_gpus=cfg["training"]["world_size"], gpu=H100, top=10).layouts
    labels = page.eval_on_selector_all(".mme-layout-table tbody code", "els => els.map((e) => e.textContent)")
    assert labels == [lay.label for lay in expected]
    for i, lay in enumerate(expected):
        n = events(page)
        page.click(f".mme-layout-table tr[data-rank='{i + 1}'] button.mme-use")
        assert settle(page, n) == "done", (lay.label, page.inner_text(RESULTS)[:300])
        assert numbers(shown(page)) == numbers(estimate(lay.config).to_dict()), lay.label
        assert page.inner_text(f".mme-layout-table tr[data-rank='{i + 1}']").count("in use") == 1
        assert page.locator(".mme-layout-table tbody tr").count() == len(expected)
        assert not page.is_visible(".mme-stale")
    assert page.input_value("#mme-preset") == name


def test_search_summary_and_staleness(page, site_url):
    """Point 2: the summary says what the CLI says (not "None of 143,406 layouts ... fit"); point 6: the
    label notation is explained, and the results say when the GPU count changed under them."""
    url = f"{site_url}calculator/?preset=deepseek-v3&gpu={H100}&training.world_size=1024"
    assert open_page(page, url) == "done"
    _search(page)
    cfg, _ = web.merged_config({"preset": "deepseek-v3", "values": {"training.world_size": "1024"}})
    result = search(cfg, num_gpus=1024, gpu=H100, top=10)
    text = page.inner_text(".mme-layouts")
    assert result.summary() in text and "None of" not in text
    assert "PP16[1/-] means 16 pipeline stages" in text
    assert "1,024 × H100-80GB" in page.inner_text(".mme-layouts h3")
    n = events(page)
    page.click(f"{quick('training.world_size')} ~ button[data-dir='up']")
    assert settle(page, n) == "done"
    assert page.is_visible(".mme-stale") and page.locator("button.mme-use:not([disabled])").count() == 0
    page.click(".mme-stale button")
    page.wait_for_function("() => !document.querySelector('.mme-stale')", timeout=120_000)


# ---------------------------------------------------------------- 4: the preset's values and history


def test_cleared_field_keeps_the_preset_value(page, site_url):
    """Point 4: clearing CP on Llama 3 8B fell back to the default CP 1 and flipped the verdict."""
    assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
    verdict = page.get_attribute(".mme-verdict", "data-verdict")
    n = events(page)
    fill(page, "parallelism.context_parallel_size", "4")
    assert settle(page, n) == "done" and shown(page)["parallel"]["cp"] == 4
    n = events(page)
    fill(page, "parallelism.context_parallel_size", "")
    assert settle(page, n) == "done"
    assert shown(page) == estimate(on_page_gpu(load_preset("llama-3-8b"))).to_dict()
    assert page.get_attribute(".mme-verdict", "data-verdict") == verdict == "tight"   # amber: allocated fits
    assert page.get_attribute("#mme-parallelism\\.context_parallel_size", "placeholder") == "preset: 2"


def test_changing_the_preset_asks_before_dropping_edits_and_back_undoes(page, site_url):
    """Point 4: a preset change (even ArrowDown on the select) silently dropped every edit, and the URL was
    replaced, so Back could not undo it."""
    assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
    n = events(page)
    page.select_option(quick("training.micro_batch_size"), label="2")
    assert settle(page, n) == "done"
    edited = shown(page)
    page.fill("#mme-preset", "qwen2.5-72b")             # another preset, named in the Model box
    page.press("#mme-preset", "Enter")
    page.wait_for_selector(".mme-confirm:not([hidden])")
    assert page.input_value("#mme-preset") == "llama-3-8b"
    assert "micro_batch_size=2" in page.url and shown(page) == edited
    n = events(page)
    page.click(".mme-confirm button.md-button--primary")
    assert settle(page, n) == "done"
    assert page.input_value("#mme-preset") != "llama-3-8b" and "micro_batch_size" not in page.url
    n = events(page)
    page.go_back()
    assert settle(page, n) == "done"
    assert page.input_value("#mme-preset") == "llama-3-8b" and shown(page) == edited


# ---------------------------------------------------------------- 5: errors where they belong


def test_world_size_error_sits_on_the_gpu_count_with_the_nearest_valid(page, site_url):
    """Point 5: DeepSeek-V3 on 1,000 GPUs marked the batch fields and suggested nothing; 1,024 is the nearest
    world size its layout (TP 2 x PP 8, EP 32 x PP 8 = 256) and global batch 4,096 accept."""
    assert open_page(page, f"{site_url}calculator/?preset=deepseek-v3") == "done"
    n = events(page)
    page.fill(quick("training.world_size"), "1000")
    assert settle(page, n) == "error"
    assert page.is_visible("#mme-q-training\\.world_size-err")
    visible = page.eval_on_selector_all(".mme-err:not([hidden])", "els => els.map((e) => e.id)")
    assert visible == ["mme-q-training.world_size-err"]
    n = events(page)
    page.click("#mme-q-training\\.world_size-err button.mme-fix:has-text('1,024 GPUs')")
    assert settle(page, n) == "done"
    assert shown(page)["parallel"]["world_size"] == 1024


def test_typing_shows_no_error_for_a_prefix(page, site_url):
    """Point 5: typing "16" showed the error of "1" before the "6" arrived."""
    assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b&parallelism.tensor_model_parallel_size=2") == "done"
    page.evaluate("""window.__flashes = 0; new MutationObserver(() => {
        if (document.querySelector('.mme-err:not([hidden])')) window.__flashes++;
      }).observe(document.querySelector('.mme-calc'), { subtree: true, attributes: true, childList: true });""")
    n = events(page)
    page.click(quick("training.world_size"), click_count=3)
    page.keyboard.type("16", delay=120)
    assert settle(page, n) == "done"
    assert page.evaluate("window.__flashes") == 0
    assert shown(page)["parallel"]["world_size"] == 16


def test_sequence_parallel_hint(page, site_url):
    """Point 5: Mixtral 8x7B with TP 2 and EP 8 needs sequence parallelism (Megatron-Core refuses TP x EP
    without it): typed in the full form, the error lands on TP and offers to keep it with sequence parallelism on.
    (The quick TP select brings it along itself since issue 29: tests/browser/test_calculator_controls.py.)"""
    assert open_page(page, f"{site_url}calculator/?preset=mixtral-8x7b&training.world_size=128") == "done"
    n = events(page)
    fill(page, "parallelism.tensor_model_parallel_size", "2")
    assert settle(page, n) == "error"
    n = events(page)
    page.click("button.mme-fix:has-text('keep 2: sequence parallelism on')")
    assert settle(page, n) == "done"
    assert shown(page)["parallel"]["sequence_parallel"] is True


# ---------------------------------------------------------------- 7: one vocabulary, a clean default


def test_verdicts_in_one_vocabulary_with_reasons(page, site_url):
    """Point 7: the page opens on a clean answer; Llama 3 8B on an H100 "does not fit" in the calculator and on
    its model page alike (it read "tight" before the one fit rule of issue 26: its estimate, reserve included, is
    over), and says why (what PyTorch allocates still fits); the words are explained on the page."""
    assert open_page(page, f"{site_url}calculator/") == "done"
    assert page.get_attribute(".mme-verdict", "data-verdict") == "fits"
    assert "fits" in page.inner_text(".mme-sticky")
    page.click(".mme-vocabulary > summary")
    assert "fits within the error band" in page.inner_text(".mme-vocabulary dl")
    assert "does not fit" in page.inner_text(".mme-vocabulary dl")
    n = events(page)
    page.fill("#mme-preset", "llama-3-8b")
    page.press("#mme-preset", "Enter")
    assert settle(page, n) == "done"
    assert page.get_attribute(".mme-verdict", "data-verdict") == "tight"
    assert "caching allocator's reserve" in page.inner_text(".mme-verdict .mme-why")
    n = events(page)
    page.fill("#mme-preset", "qwen2.5-72b")
    page.press("#mme-preset", "Enter")
    assert settle(page, n) == "done"
    assert page.inner_text(".mme-verdict .mme-word") == "Does not fit"
    assert "Sequence parallelism is off" in page.inner_text(".mme-verdict .mme-why")
    page.wait_for_selector(".mme-levers button.mme-fix")            # and which one change makes it fit
    page.goto(f"{site_url}models/llama-3-8b/")
    assert page.inner_text("table[data-table=fit] tr[data-gpu='H100-80GB'] td[data-fits]").strip() == "~ fits within the error band"
    assert "caching allocator's reserve" in page.inner_text("article")


# ---------------------------------------------------------------- 8, 9: the controls first, no scroll trap


def test_quick_controls_offer_only_valid_values(page, site_url):
    """Point 8: the main settings on top as selects of the values the model allows (from Python); the full
    form below, collapsed, labelled in words with the Megatron name; MoE fields only for MoE models."""
    assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
    tp = page.eval_on_selector_all(f"{quick('parallelism.tensor_model_parallel_size')} option",
                                   "os => os.map((o) => o.textContent)")
    # 32 heads, 8 KV heads, MLP 14,336 = 2^11 x 7 allow 1, 2, 4, 8; on the preset's 8 GPUs with CP 2, TP 8 would
    # need 16 GPUs (issue 29: only values valid on the GPU count are offered)
    assert tp == ["1", "2", "4"]
    quick_top = page.eval_on_selector(".mme-quick", "e => e.getBoundingClientRect().top")
    assert quick_top < page.eval_on_selector(RESULTS, "e => e.getBoundingClientRect().top")
    assert not page.is_visible(quick("parallelism.expert_model_parallel_size"))      # dense: no EP
    assert page.eval_on_selector_all(".mme-form details.mme-section", "ds => ds.filter((d) => d.open).length") == 0
    reveal(page, "model.num_query_groups")
    label = page.inner_text("label[for='mme-model.num_query_groups']")
    assert label.startswith("KV heads") and "num_query_groups" in label
    assert not page.is_visible("#mme-model\\.moe_router_topk")
    # DeepSeek-V3 (61 layers): PP 16 needs an uneven split; choosing it sets one and stays valid.
    assert open_page(page, f"{site_url}calculator/?preset=deepseek-v3&training.world_size=2048") == "done"
    assert page.is_visible(quick("parallelism.expert_model_parallel_size"))
    n = events(page)
    page.select_option(quick("parallelism.pipeline_model_parallel_size"), label="16 (first stage 1 layer)")
    assert settle(page, n) == "done"
    assert len(shown(page)["stages"]) == 16 and shown(page)["stages"][0]["layers"] == [[0]]


def test_no_scroll_box_and_the_answer_stays_in_view_on_a_phone(browser, site_url):
    """Point 9: the form was an 85vh scroll box inside the page; on a phone the result scrolled away."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        assert open_page(page, f"{site_url}calculator/") == "done"
        boxes = page.evaluate("""[...document.querySelectorAll('.mme-calc *')].filter((e) => {
            const s = getComputedStyle(e); return /(auto|scroll)/.test(s.overflowY) && e.scrollHeight > e.clientHeight + 1;
          }).map((e) => e.className)""")
        assert boxes == []
        reveal(page, "training.recompute_modules")
        page.locator("#mme-training\\.attention_backend").scroll_into_view_if_needed()
        box = page.eval_on_selector(".mme-sticky", "e => e.getBoundingClientRect().toJSON()")
        assert 0 <= box["top"] < 120 and box["height"] > 10
        assert "GiB per GPU" in page.inner_text(".mme-sticky")
    finally:
        context.close()


# ---------------------------------------------------------------- 11: cold start


def test_preset_link_shows_numbers_before_python_and_keeps_them_while_editing(browser, site_url):
    """Point 11: only the default preset was precomputed; a shared ?preset=deepseek-v3 link waited for Python.
    Here the runtime download is held back: the link shows the build-time numbers at once, the download
    progress is in bytes, and an edit keeps those numbers (marked) until Python answers."""
    context = browser.new_context()
    held = []
    context.route("**/pyodide.asm.wasm", lambda route: held.append(route))
    try:
        page = context.new_page()
        page.add_init_script(EVENTS)
        page.goto(f"{site_url}calculator/?preset=deepseek-v3", wait_until="domcontentloaded")
        page.wait_for_selector(f"{RESULTS}[data-state=precomputed] table")
        view = web.compute({"preset": "deepseek-v3", "values": {}, "gpu": H100}, False)["view"]
        cells = page.eval_on_selector_all(f"{RESULTS} td[data-col=device]", "tds => tds.map((t) => t.textContent)")
        assert cells == [r["cells"]["device"] for r in view["rows"]]
        assert "Precomputed" in page.inner_text(".mme-badge")
        page.wait_for_function("() => /MB/.test(document.querySelector('.mme-status').textContent)")
        page.select_option(quick("training.micro_batch_size"), label="2")
        assert page.get_attribute(RESULTS, "data-state") == "precomputed"
        assert "as soon as Python has started" in page.inner_text(".mme-badge")
        assert page.eval_on_selector_all(f"{RESULTS} td[data-col=device]", "tds => tds.map((t) => t.textContent)") == cells
        page.wait_for_function("() => document.querySelector('[data-mme-calculator]').calculator.engine")
        for route in held:
            route.continue_()
        page.wait_for_selector(f"{RESULTS}[data-state=done]", timeout=90_000)
        cfg = load_preset("deepseek-v3").to_dict()
        cfg["training"]["micro_batch_size"] = 2
        assert numbers(shown(page)) == numbers(estimate(on_page_gpu(cfg)).to_dict())
    finally:
        context.close()


# ---------------------------------------------------------------- 12: charts


def test_charts_share_colours_ticks_and_a_labelled_capacity(page, site_url):
    """Point 12: the calculator drew its own palette and no axis ticks; the capacity line said only "GPU
    memory"; a model page drew no line when the GPU was far off the axis."""
    assert open_page(page, f"{site_url}calculator/") == "done"
    probe = """(scheme) => { document.body.setAttribute('data-md-color-scheme', scheme);
        return [...document.querySelectorAll('svg rect.mme-seg')].reduce((o, r) => {
          o[[...r.classList].find((c) => c !== 'mme-seg')] = getComputedStyle(r).fill; return o; }, {}); }"""
    calc_colours = {s: page.evaluate(probe, s) for s in ("default", "slate")}
    assert len(calc_colours["default"]) >= 5
    assert page.locator(".mme-calc-chart text.mme-tick").count() >= 4
    assert "H100-80GB 79.65 GiB" in page.text_content(".mme-calc-chart")
    # Value labels sit right of the plot, the capacity label above it: none overlaps a bar.
    assert page.evaluate(OVERLAP.replace("SVG", ".mme-calc-chart")) is False
    page.goto(f"{site_url}models/llama-3-8b/")
    static = {s: page.evaluate(probe, s) for s in ("default", "slate")}
    for scheme in static:
        assert {k: v for k, v in static[scheme].items() if k in calc_colours[scheme]} == calc_colours[scheme]
    page.goto(f"{site_url}models/tiny/")                 # ~1 GiB: the H100 line is drawn all the same
    assert "H100-80GB 79.65 GiB" in page.inner_text("#chart-stages")
    page.goto(f"{site_url}models/llama-3-70b/")          # four stages, four GPU lines: no label on a bar
    assert page.evaluate(OVERLAP.replace("SVG", "#chart-stages svg")) is False


OVERLAP = """(() => { const rects = [...document.querySelectorAll('SVG rect')].map((r) => r.getBoundingClientRect())
    .filter((r) => r.height > 14);
  return [...document.querySelectorAll('SVG text')].some((t) => { const b = t.getBoundingClientRect();
    return rects.some((r) => b.left < r.right - 1 && b.right > r.left + 1 && b.top < r.bottom - 1 && b.bottom > r.top + 1); }); })()"""


def test_chart_text_stays_readable_on_a_phone(browser, site_url):
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    try:
        page = context.new_page()
        assert open_page(page, f"{site_url}calculator/") == "done"
        sizes = page.eval_on_selector_all(".mme-calc-chart text", "ts => ts.map((t) => t.getBoundingClientRect().height)")
        assert sizes and min(sizes) >= 9
        page.goto(f"{site_url}models/llama-3-8b/")
        sizes = page.eval_on_selector_all("#chart-stages text", "ts => ts.map((t) => t.getBoundingClientRect().height)")
        assert min(sizes) >= 9
    finally:
        context.close()


# ---------------------------------------------------------------- 13: copy, summary, live region


def said_copied(page, selector):
    """The button says "Copied" once the clipboard's (asynchronous) write has resolved: wait for it, at most 5 s."""
    page.wait_for_function("(sel) => document.querySelector(sel).innerText === 'Copied'", arg=selector,
                           timeout=5000)


def test_copy_buttons_summary_and_live_region(browser, site_url):
    """Point 13: copy buttons said nothing; there was no "Copy link"; the summary lacked the GPU count, the
    expert-data-parallel size and the micro-batches per step; the whole results block was aria-live."""
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    try:
        page = context.new_page()
        assert open_page(page, f"{site_url}calculator/?preset=mixtral-8x7b") == "done"
        page.click("button.mme-copy-link")
        said_copied(page, "button.mme-copy-link")
        assert page.evaluate("navigator.clipboard.readText()") == page.url
        n = events(page)
        page.click(".mme-exports > summary")
        assert wait(page, n) == "done"
        page.click("button[data-copy=yaml]")
        said_copied(page, "button[data-copy=yaml]")
        assert page.evaluate("navigator.clipboard.readText()") == page.inner_text("pre.mme-export-yaml")
        est = estimate(load_preset("mixtral-8x7b"))
        par = page.inner_text(".mme-parallel")
        assert f"{est.parallel['world_size']} GPUs" in par and f"expert-DP {est.parallel['edp']}" in par
        assert f"{est.parallel['num_microbatches']} micro-batches per step (micro-batch size 1)" in par
        # Two small live regions: the one-line sticky result and the screen-reader line that announces a result
        # arriving after a button (issue 29); neither holds the results block.
        live = page.eval_on_selector_all(".mme-calc [aria-live]", "els => els.map((e) => e.className)")
        assert sorted(live) == ["mme-sr", "mme-sticky"]
        assert page.eval_on_selector_all(".mme-calc [aria-live]",
                                         "els => els.filter((e) => e.querySelector('table, svg')).length") == 0
    finally:
        context.close()


# ---------------------------------------------------------------- issue 15: no request left waiting


FAULTY_WORKER = """(() => {
  const Native = window.Worker;
  window.__fault = null;     // "json": Python's answer is not JSON; "raise": Python raised; "crash": the worker dies
  window.Worker = function (url, opts) {
    const w = new Native(url, opts);
    let handler = null;
    Object.defineProperty(w, "onmessage", { set(fn) { handler = fn; w.addEventListener("message", (ev) => {
      const msg = ev.data;
      if (msg.type === "result" && window.__fault === "json") return fn({ data: { ...msg, response: '{"x": NaN}' } });
      if (msg.type === "result" && window.__fault === "raise") return fn({ data: { type: "result", id: msg.id, error: "boom" } });
      fn(ev);
    }); }, get() { return handler; } });
    const post = w.postMessage.bind(w);
    w.postMessage = (msg) => {
      if (msg.type === "call" && window.__fault === "crash") {
        setTimeout(() => w.onerror && w.onerror(new ErrorEvent("error", { message: "the worker crashed" })));
        return;
      }
      post(msg);
    };
    return w;
  };
})();"""


@pytest.mark.parametrize("fault, said", [("json", "not valid JSON"), ("raise", "Python raised: boom"),
                                         ("crash", "the worker crashed")])
def test_a_failed_request_is_shown_not_left_waiting(browser, site_url, fault, said):
    """Issue 15: Python's answer with NaN (not JSON) left the page waiting forever; any failed request to the
    worker must end in a message."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.add_init_script(FAULTY_WORKER)
        assert open_page(page, f"{site_url}calculator/?preset=tiny") == "done"
        page.evaluate(f"window.__fault = {json.dumps(fault)}")
        n = events(page)
        page.select_option(quick("training.micro_batch_size"), label="1")
        assert wait(page, n) == "failed"
        assert page.get_attribute(RESULTS, "data-state") == "failed"
        assert said in page.inner_text(RESULTS) and page.get_attribute(RESULTS, "data-estimate") is None
        assert not calc(page, "c.busy")
    finally:
        context.close()


def test_non_finite_input_ends_in_a_message(page, site_url):
    """Issue 15: hidden_dropout: inf made Python answer with Infinity, which JSON.parse refuses."""
    assert open_page(page, f"{site_url}calculator/?preset=tiny&model.hidden_dropout=inf") in ("error", "failed")
    assert page.get_attribute(RESULTS, "data-estimate") is None
    assert "hidden_dropout" in page.inner_text(RESULTS) or "not valid JSON" in page.inner_text(RESULTS)


def test_the_late_full_form_keeps_what_is_being_typed(page, site_url):
    """The full form is built once Python's first answer is drawn (up to half a second later, when the page is
    idle), and its fill wrote every field, the focused quick control too: a global batch size cleared and
    retyped in that moment read "512256" (Llama 3 8B's 512 put back under the cursor). Here the late build is
    run again while the cleared field has the focus."""
    assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
    reveal(page, "training.global_batch_size")
    box = quick("training.global_batch_size")
    page.fill(box, "")
    page.evaluate("() => { const c = window.mmeCalculator; c.form.replaceChildren(); c.buildForm(); }")
    page.wait_for_selector(field("training.global_batch_size"), state="attached")
    page.type(box, "256")
    assert page.input_value(box) == "256"


def test_typed_values_reach_the_link_once_typing_pauses_and_copy_link_at_once(browser, site_url):
    """The address bar is written after each request has gone to Python, and a typed value once typing pauses
    (Chromium took 2 to 14 ms per history update, on the path of every edit). What the user sees stays the
    same: "Copy link" right after typing copies the typed value, the link follows the field once typing
    pauses, and a choice made after typing gets its own history entry, so Back returns to the typed value.
    Llama 3 8B: global batch size 256 typed over the preset's, then micro-batch size 2 chosen."""
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    try:
        page = context.new_page()
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
        box = quick("training.global_batch_size")
        page.fill(box, "")
        page.type(box, "256")
        page.click("button.mme-copy-link")
        page.wait_for_function("() => document.querySelector('button.mme-copy-link').textContent === 'Copied'")
        assert "training.global_batch_size=256" in page.evaluate("navigator.clipboard.readText()")
        page.focus(box)                                         # 2560, and no click after it
        page.keyboard.press("End")
        page.keyboard.type("0")
        page.wait_for_function("() => location.search.includes('global_batch_size=2560')", timeout=10_000)
        n = events(page)
        page.select_option(quick("training.micro_batch_size"), label="2")
        assert settle(page, n) == "done"
        assert "micro_batch_size=2" in page.url and "global_batch_size=2560" in page.url
        n = events(page)
        page.go_back()
        assert settle(page, n) == "done"
        assert "global_batch_size=2560" in page.url and "micro_batch_size" not in page.url
        assert page.input_value(box) == "2560"
    finally:
        context.close()


@pytest.mark.parametrize("query, said", [
    ("preset=llama3-8b", "no preset named 'llama3-8b' (did you mean 'llama-3-8b'?)"),
    ("preset=llama-3-8b&gpu=H900", "unknown GPU; known: A100-40GB"),
])
def test_a_link_with_an_unknown_preset_or_gpu_names_it(page, site_url, query, said):
    """A mistyped preset or GPU in a shared link gets Python's error naming it (the preset and GPU selects have
    no error box of their own: it goes above the results); it used to raise in the page and leave the
    results waiting forever."""
    assert open_page(page, f"{site_url}calculator/?{query}") == "error"
    assert page.get_attribute(RESULTS, "data-estimate") is None
    assert said in page.inner_text(RESULTS)
