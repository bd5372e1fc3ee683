"""The calculator page in a real browser: the estimator in Pyodide must give what the CLI gives.

The page's usability (issue 13) is tested in test_calculator_ux.py.

Every test reads what the user sees: the results element's ``data-estimate`` (``Estimate.to_dict()`` as
JSON, set only for a Python-computed result) and its ``data-state``. Expected values come from the CLI
(``python -m estimator estimate FILE --json``) run on the same configuration, and, where the model is
public, from its published parameter count (``shared/reference/hf-configs/SOURCES.md``).
The ``page`` fixture fails a test on any console error and on any request that leaves the site's origin.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimator import estimate  # noqa: E402
from estimator.formats.hf import from_hf_config  # noqa: E402
from estimator.formats.presets import load_preset  # noqa: E402

from _calc import (EVENTS, RESULTS, events as _events, fill, numbers, on_page_gpu,  # noqa: E402
                   open_page as _open, settle as _settle, shown as _shown, wait as _wait)

LLAMA3_8B = {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_query_groups": 8,
             "ffn_hidden_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
             "untie_embeddings_and_output_weights": True}
DEEPSEEK_V3 = {"num_layers": 61, "hidden_size": 7168, "num_attention_heads": 128, "ffn_hidden_size": 18432,
               "num_experts": 256, "moe_router_topk": 8, "moe_ffn_hidden_size": 2048,
               "moe_shared_expert_intermediate_size": 2048, "moe_layer_freq": [0] * 3 + [1] * 58,
               "moe_router_enable_expert_bias": True, "vocab_size": 129280, "max_position_embeddings": 163840,
               "layernorm_epsilon": 1e-06, "qk_layernorm": True, "untie_embeddings_and_output_weights": True,
               "multi_latent_attention": True, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128,
               "qk_pos_emb_head_dim": 64, "v_head_dim": 128, "mtp_num_layers": 1}

# Five configurations (model sections from the models' config.json files) and the published exact
# parameter count of the main model (without MTP layers), from SOURCES.md.
CASES = {
    "dense": ({"model": {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "ffn_hidden_size": 11008,
                         "vocab_size": 32000, "max_position_embeddings": 4096,
                         "untie_embeddings_and_output_weights": True},
               "parallelism": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
               "training": {"world_size": 8, "seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 16,
                            "sequence_parallel": True, "recompute_granularity": "selective"},
               "precision": {"params_dtype": "bf16"}}, 6_738_415_616),          # Llama-2-7B
    "gqa": ({"model": {"num_layers": 28, "hidden_size": 3584, "num_attention_heads": 28, "num_query_groups": 4,
                       "ffn_hidden_size": 18944, "vocab_size": 152064, "max_position_embeddings": 131072,
                       "layernorm_epsilon": 1e-06, "add_qkv_bias": True,
                       "untie_embeddings_and_output_weights": True},
             "parallelism": {"tensor_model_parallel_size": 4},
             "training": {"world_size": 8, "seq_length": 4096, "sequence_parallel": True,
                          "recompute_granularity": "full", "recompute_method": "uniform",
                          "recompute_num_layers": 1},
             "precision": {"params_dtype": "bf16"}}, 7_615_616_512),            # Qwen2.5-7B
    "moe-ep": ({"model": {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_query_groups": 8,
                          "ffn_hidden_size": 14336, "num_experts": 8, "moe_router_topk": 2, "vocab_size": 32000,
                          "max_position_embeddings": 32768, "untie_embeddings_and_output_weights": True},
                "parallelism": {"pipeline_model_parallel_size": 4, "expert_model_parallel_size": 8},
                "training": {"world_size": 32, "seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
                "precision": {"params_dtype": "bf16"}}, 46_702_792_704),      # Mixtral-8x7B
    "mla-mtp": ({"model": DEEPSEEK_V3,
                 "parallelism": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 8,
                                 "expert_model_parallel_size": 32, "expert_tensor_parallel_size": 1,
                                 "num_layers_in_first_pipeline_stage": 8, "num_layers_in_last_pipeline_stage": 5},
                 "training": {"world_size": 256, "seq_length": 4096, "global_batch_size": 4096,
                              "sequence_parallel": True, "recompute_granularity": "full",
                              "recompute_method": "uniform", "recompute_num_layers": 1},
                 "precision": {"params_dtype": "bf16"}}, 671_026_419_200),    # DeepSeek-V3
    "cp-vpp": ({"model": LLAMA3_8B,
                "parallelism": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4,
                                "virtual_pipeline_model_parallel_size": 2, "context_parallel_size": 2},
                "training": {"world_size": 32, "seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64,
                             "sequence_parallel": True},
                "precision": {"params_dtype": "bf16"}}, 8_030_261_248),       # Llama-3-8B
}


def _query(cfg: dict, gpu: str | None = None) -> str:
    """The calculator URL of a configuration: no preset, one parameter per field."""
    def show(v):
        return ", ".join(map(str, v)) if isinstance(v, list) else json.dumps(v) if isinstance(v, bool) else str(v)
    params = {"preset": "none", "gpu": gpu or "none"}
    params.update({f"{sec}.{k}": show(v) for sec, fields in cfg.items() for k, v in fields.items()})
    return "?" + urlencode(params)


def _cli_json(cfg: dict, tmp_path: Path) -> dict:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    proc = subprocess.run([sys.executable, "-m", "estimator", "estimate", str(path), "--json"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("case", list(CASES))
def test_page_computes_what_the_cli_computes(page, site_url, tmp_path, case):
    cfg, published = CASES[case]
    assert _open(page, site_url + "calculator/" + _query(cfg)) == "done"
    shown = _shown(page)
    assert page.get_attribute(RESULTS, "data-source") == "python"
    assert shown == _cli_json(cfg, tmp_path)
    p = shown["parameters"]
    assert p["total"] - p["mtp"] == published
    assert page.locator(".mme-table tbody tr").count() == len(shown["stages"])
    assert page.locator(".mme-table tr.mme-peak").get_attribute("data-stage") == str(shown["peak"]["stage"])


def test_default_preset_is_precomputed_then_computed(page, site_url):
    page.add_init_script(EVENTS)
    page.goto(site_url + "calculator/", wait_until="domcontentloaded")
    # Before Python has started the build-time numbers are shown, marked as such.
    assert page.get_attribute(RESULTS, "data-state") == "precomputed"
    assert "Precomputed" in page.inner_text(".mme-badge")
    expected = estimate(on_page_gpu(load_preset("qwen3-8b"))).to_dict()
    assert _wait(page) == "done"
    assert page.get_attribute(RESULTS, "data-source") == "python"
    assert not page.is_visible(".mme-badge")
    shown = _shown(page)
    assert shown == expected
    # Qwen3-8B has 8,190,735,360 parameters (SOURCES.md); at TP 4 Megatron pads its 151,936-row vocabulary to
    # a multiple of 128 x 4 = 512, 152,064 rows: 128 more rows of 4,096 in the embedding and the untied output.
    assert shown["parameters"]["total"] == 8_190_735_360 + 2 * 128 * 4096


def test_invalid_value_shows_its_error_and_no_number(page, site_url):
    assert _open(page, site_url + "calculator/?preset=llama-3-8b") == "done"
    n = _events(page)
    fill(page, "model.hidden_size", "4096x")
    assert _settle(page, n) == "error"
    err = page.locator("#mme-model\\.hidden_size-err")
    assert err.is_visible() and "must be an integer" in err.inner_text()
    assert page.get_attribute("#mme-model\\.hidden_size", "aria-invalid") == "true"
    assert page.get_attribute(RESULTS, "data-estimate") is None
    assert page.locator(f"{RESULTS} table, {RESULTS} svg").count() == 0
    assert "GiB" not in page.inner_text(RESULTS)
    # A cross-field rule: the message shows next to the field changed (issue 13, point 5), once.
    n = _events(page)
    fill(page, "model.hidden_size", "4096")
    fill(page, "parallelism.tensor_model_parallel_size", "3")
    assert _settle(page, n) == "error"
    err = page.inner_text("#mme-parallelism\\.tensor_model_parallel_size-err")
    assert "divisible by tensor_model_parallel_size (3)" in err and "1, 2, 4, 8" in err
    assert not page.is_visible("#mme-model\\.num_attention_heads-err")
    # Fixing it brings the numbers back.
    n = _events(page)
    fill(page, "parallelism.tensor_model_parallel_size", "1")
    assert _settle(page, n) == "done"
    fixed = load_preset("llama-3-8b").to_dict()
    fixed["parallelism"]["tensor_model_parallel_size"] = 1
    assert _shown(page) == estimate(on_page_gpu(fixed)).to_dict()


def test_url_round_trip_restores_the_state(page, site_url, browser):
    assert _open(page, site_url + "calculator/?preset=mixtral-8x7b") == "done"
    assert page.input_value("#mme-preset") == "mixtral-8x7b"
    assert _shown(page)["config"] == on_page_gpu(load_preset("mixtral-8x7b"))
    n = _events(page)
    page.select_option("#mme-gpu", "H200-141GB")
    fill(page, "training.micro_batch_size", "2")
    assert _settle(page, n) == "done"
    page.wait_for_function("() => location.search.includes('micro_batch_size=2')")
    url, shown, verdict = page.url, _shown(page), page.inner_text(".mme-verdict")
    assert "H200-141GB" in verdict
    context = browser.new_context()
    try:
        other = context.new_page()
        assert _open(other, url) == "done"
        assert _shown(other) == shown
        assert other.input_value("#mme-preset") == "mixtral-8x7b"
        assert other.input_value("#mme-gpu") == "H200-141GB"
        assert other.input_value("#mme-training\\.micro_batch_size") == "2"
        assert other.inner_text(".mme-verdict") == verdict
    finally:
        context.close()


def test_pasted_hf_config_json(page, site_url, reference):
    text = (reference / "hf-configs" / "Qwen3-8B.json").read_text()
    assert _open(page, site_url + "calculator/?preset=llama-3-8b") == "done"
    n = _events(page)
    page.click(".mme-import > summary")                            # the import panel starts closed
    page.fill("#mme-import\\.hf", text)
    page.click("#mme-import\\.hf ~ button")
    assert _settle(page, n) == "done"
    expected = {**load_preset("llama-3-8b").to_dict(), "model": from_hf_config(json.loads(text))}
    shown = _shown(page)
    assert shown == estimate(on_page_gpu(expected)).to_dict()
    assert shown["parameters"]["total"] == 8_190_735_360                # Qwen3-8B, SOURCES.md
    assert page.input_value("#mme-model\\.kv_channels") == "128"
    assert page.input_value("#mme-preset") == ""


def test_exports_match_the_configuration(page, site_url, tmp_path):
    assert _open(page, site_url + "calculator/?preset=tiny&parallelism.pipeline_model_parallel_size=4") == "done"
    page.click(".mme-exports > summary")
    cli = page.inner_text("pre.mme-export-cli")
    assert cli.startswith("python -m estimator estimate tiny") and "--pp 4" in cli
    proc = subprocess.run([sys.executable, "-m", *cli.split()[2:], "--json"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    cli_result = json.loads(proc.stdout)
    shown = _shown(page)
    assert cli_result.pop("fit")["gpu"] == "H100-80GB"                   # the page's GPU went along
    assert {k: v for k, v in cli_result.items() if k != "config"} == {k: v for k, v in shown.items() if k != "config"}
    (tmp_path / "c.yaml").write_text(page.inner_text("pre.mme-export-yaml"))
    proc = subprocess.run([sys.executable, "-m", "estimator", "estimate", str(tmp_path / "c.yaml"), "--json"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stages"] == shown["stages"]
    assert "--pipeline-model-parallel-size 4" in page.inner_text("pre.mme-export-megatron")


def test_no_request_leaves_the_origin(page, site_url):
    """Every runtime file comes from the site, once: Pyodide's own request for its WebAssembly, compiled by the
    worker since the start, used to download those 9.6 MB a second time."""
    assert _open(page, site_url + "calculator/") == "done"
    host = urlparse(site_url).netloc
    assert page.evaluate("document.querySelector('[data-mme-calculator]').calculator.engine.mode") == "module worker"
    runtime = [u for u in page.log.requests if "/assets/calculator/runtime/" in u]
    assert any(u.endswith("pyodide.asm.wasm") for u in runtime)
    names = [u.rsplit("/", 1)[1] for u in runtime]
    assert sorted(names) == sorted(set(names)), names
    assert all(urlparse(u).netloc == host for u in page.log.requests if urlparse(u).scheme in ("http", "https"))


def test_form_is_labelled_and_keyboard_usable(page, site_url):
    assert _open(page, site_url + "calculator/") == "done"
    unlabelled = page.evaluate("""[...document.querySelectorAll('.mme-calc input, .mme-calc select, .mme-calc textarea')]
        .filter((el) => !el.labels.length && !el.getAttribute('aria-label')).map((el) => el.id)""")
    assert unlabelled == []
    n = _events(page)
    page.focus("#mme-q-training\\.global_batch_size")
    page.keyboard.press("Control+A")
    page.keyboard.type("64")
    assert _settle(page, n) == "done"
    assert _shown(page)["config"]["training"]["global_batch_size"] == 64




def test_python_failing_to_start_is_said_plainly(browser, site_url):
    context = browser.new_context()
    try:
        context.route("**/pyodide.asm.wasm", lambda route: route.abort())
        page = context.new_page()
        page.goto(site_url + "calculator/")
        page.wait_for_selector(f"{RESULTS}[data-state=failed]", timeout=60_000)
        assert "could not be loaded" in page.inner_text(".mme-status")
        assert page.get_attribute(RESULTS, "data-estimate") is None
        assert "Python could not start" in page.inner_text(".mme-badge")      # the build-time numbers say so
    finally:
        context.close()


@pytest.fixture(scope="module")
def deployed_url(site_dir):
    """The site served with a sitemap for its address, as when deployed at its site_url: Material's
    instant navigation only follows links the sitemap lists (host, port and path)."""
    from benchmarks.calculator import serve
    url, server, www = serve(site_dir)
    yield url
    server.shutdown()                                   # the server's own process
    shutil.rmtree(www, ignore_errors=True)


@pytest.fixture
def deployed_page(browser, deployed_url):
    """A page of its own context on the deployed copy; the test fails on any page or console error."""
    context = browser.new_context()
    errors: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    yield page
    context.close()
    assert not errors


def test_instant_navigation_reuses_python(deployed_page, deployed_url):
    page = deployed_page
    assert _open(page, deployed_url + "calculator/") == "done"
    # Material starts once Python has drawn its first estimate; its instant navigation once it has read the
    # sitemap (which links are the site's own)
    page.wait_for_function("() => window.document$ !== undefined && performance.getEntriesByType('resource')"
                           ".some((r) => r.name.endsWith('/sitemap.xml'))")
    page.wait_for_timeout(200)
    page.evaluate("window.__mme.marker = 1")                   # survives only without a reload
    find = ("(away) => [...document.querySelectorAll('a.md-nav__link[href]')]"
            ".find((a) => a.href.includes('/calculator/') !== away).click()")
    for _ in range(2):
        page.evaluate(f"({find})(true)")
        page.wait_for_function("() => !document.querySelector('[data-mme-calculator]')")
        n = _events(page)
        page.evaluate(f"({find})(false)")
        assert _wait(page, n) == "done"
    assert page.evaluate("window.__mme.marker") == 1
    assert page.locator("[data-mme-calculator]").count() == 1
    page.wait_for_function("() => document.querySelector('.mme-section')")   # built once Python has answered
    assert page.locator(".mme-section").count() == 5                 # four sections + import, once
    assert page.locator(".mme-quick").count() == 1
    assert _shown(page) == estimate(on_page_gpu(load_preset("qwen3-8b"))).to_dict()


def test_instant_navigation_anywhere_it_is_served(browser, site_url):
    """The test server is not mkdocs.yml's site_url (127.0.0.1:8000/): another port and the sub-path /mme/. Material
    puts the page's host name on its sitemap's addresses but not the port or path, so before site-address.js every
    link there was a full page load that started Python again (the marker below was lost)."""
    assert "127.0.0.1:8000/" not in site_url or not site_url.endswith("127.0.0.1:8000/")
    context = browser.new_context()
    page = context.new_page()
    try:
        assert _open(page, site_url + "calculator/") == "done"
        page.wait_for_function("() => window.document$ !== undefined && performance.getEntriesByType('resource')"
                               ".some((r) => r.name.endsWith('/sitemap.xml'))")
        page.wait_for_timeout(200)
        page.evaluate("window.__mme.marker = 1")
        find = ("(away) => [...document.querySelectorAll('a.md-nav__link[href]')]"
                ".find((a) => a.href.includes('/calculator/') !== away).click()")
        page.evaluate(f"({find})(true)")
        page.wait_for_function("() => !document.querySelector('[data-mme-calculator]')")
        n = _events(page)
        page.evaluate(f"({find})(false)")
        assert _wait(page, n) == "done"
        assert page.evaluate("window.__mme.marker") == 1, "the page was loaded again"
    finally:
        context.close()


# Records, in the page, whether Material's script had started at the page's own DOMContentLoaded and when it
# started later (material-late.js dispatches DOMContentLoaded again once Material's bundle has run).
MATERIAL_LATE = """window.__material = { atLoad: null, late: null };
document.addEventListener("DOMContentLoaded", (ev) => {
  if (ev.isTrusted) window.__material.atLoad = typeof window.document$;
  else window.__material.late = { answers: window.__mme.events.length };
});"""


def test_material_starts_once_python_has_answered(deployed_page, deployed_url):
    """On the calculator page Material's script (about 0.7 s of main-thread CPU on a two-core laptop) and the
    full form start only once Python has drawn its first estimate, so that neither slows Python's start; then
    Material works as on every other page: its search answers and its palette switch changes the scheme."""
    page = deployed_page
    page.add_init_script(MATERIAL_LATE)
    assert _open(page, deployed_url + "calculator/?preset=llama-3-8b") == "done"
    assert page.evaluate("window.__material.atLoad") == "undefined"
    page.wait_for_function("() => window.__material.late !== null")
    assert page.evaluate("window.__material.late.answers") >= 1       # after Python's first answer
    page.wait_for_function("() => document.querySelector('.mme-section')")   # the full form, built by then
    assert page.locator(".mme-section").count() == 5
    scheme = page.get_attribute("body", "data-md-color-scheme")
    page.locator("label.md-header__button[for^='__palette']:visible").click()
    page.wait_for_function(f"() => document.body.getAttribute('data-md-color-scheme') !== '{scheme}'")
    page.locator("input.md-search__input").click()
    page.locator("input.md-search__input").fill("pipeline")
    page.wait_for_selector(".md-search-result__item", timeout=30_000)


def test_material_starts_at_once_when_the_user_reaches_for_it(browser, deployed_url):
    """A click outside the calculator (here the header) starts Material at once, even while Python is still
    loading: the runtime's downloads are held back until Material has started."""
    context = browser.new_context()
    held = []
    try:
        context.route("**/runtime/**", lambda route: held.append(route))
        page = context.new_page()
        page.add_init_script(EVENTS + MATERIAL_LATE)
        page.goto(deployed_url + "calculator/")
        page.wait_for_selector(RESULTS + "[data-state=precomputed]")
        assert page.evaluate("window.__mme.events.length") == 0
        assert page.evaluate("typeof window.document$") == "undefined"
        page.locator(".md-header__title").click()
        page.wait_for_function("() => window.__material.late !== null", timeout=10_000)
        assert page.evaluate("window.__material.late.answers") == 0           # Python had not answered
        for route in held:
            route.continue_()
        context.unroute("**/runtime/**")
        assert _wait(page) == "done"
    finally:
        context.close()


@pytest.fixture(scope="module")
def offline_dir(site_dir, tmp_path_factory) -> Path:
    """The offline bundle as a user gets it: the zip the site links to (hooks/offline_zip.py), unzipped."""
    import zipfile
    out = tmp_path_factory.mktemp("offline")
    with zipfile.ZipFile(site_dir / "downloads" / "megatron-memory-estimator-offline.zip") as zf:
        zf.extractall(out)
    return out / "megatron-memory-estimator-offline"


def test_file_bundle_computes_without_a_server(browser, offline_dir):
    context = browser.new_context()
    errors, requests = [], []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("request", lambda req: requests.append(req.url))
        assert _open(page, (offline_dir / "calculator.html").as_uri()) == "done"
        assert page.evaluate("document.querySelector('[data-mme-calculator]').calculator.engine.mode") == "blob worker"
        assert _shown(page) == estimate(on_page_gpu(load_preset("qwen3-8b"))).to_dict()
        n = _events(page)
        page.select_option("#mme-q-parallelism\\.pipeline_model_parallel_size", label="2")
        assert _settle(page, n) == "done"
        assert len(_shown(page)["stages"]) == 2
    finally:
        context.close()
    assert not errors
    assert [u for u in requests if urlparse(u).scheme in ("http", "https")] == []


def test_file_bundle_restores_the_calculator_after_another_page(browser, offline_dir):
    """Opened from disk every link is a full page load (Material has no instant navigation on file://), so Python
    starts again. Issue 29: the calculator reached again through its navigation link (no query string) shows, before
    Python has answered, the state and numbers this tab last had (Qwen3 8B at PP 2: two stages), then Python's own.
    Before: it opened at the default preset (one stage), the change lost."""
    context = browser.new_context()
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        assert _open(page, (offline_dir / "calculator.html").as_uri()) == "done"
        n = _events(page)
        page.select_option("#mme-q-parallelism\\.pipeline_model_parallel_size", label="2")
        assert _settle(page, n) == "done"
        two = _shown(page)
        assert len(two["stages"]) == 2
        with page.expect_navigation():
            page.click("a.md-nav__link[href='methodology.html']")
        with page.expect_navigation():
            page.click("a.md-nav__link[href='calculator.html']")
        page.wait_for_selector(f"{RESULTS}[data-source]", state="attached")
        # at once, before Python's first answer: this tab's last numbers, said to be restored
        assert page.evaluate("window.__mme.events.length") == 0
        assert page.get_attribute(RESULTS, "data-source") == "restored"
        assert page.locator(f"{RESULTS} .mme-table tbody tr").count() == 2
        assert "Restored from your last visit" in page.inner_text(f"{RESULTS} .mme-badge")
        assert "pipeline_model_parallel_size=2" in page.url
        assert _wait(page) == "done"
        assert numbers(_shown(page)) == numbers(two)
    finally:
        context.close()
    assert not errors


def test_file_bundle_without_workers_runs_on_the_page(browser, offline_dir):
    """Where no worker can be made, Python runs on the page's own thread: slower to type in, same numbers."""
    context = browser.new_context()
    errors: list[str] = []
    try:
        page = context.new_page()
        page.add_init_script("window.Worker = function () { throw new Error('workers are disabled'); };")
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        assert _open(page, (offline_dir / "calculator.html").as_uri() + "?preset=tiny") == "done"
        assert page.evaluate("document.querySelector('[data-mme-calculator]').calculator.engine.mode") == "main thread"
        assert _shown(page) == estimate(on_page_gpu(load_preset("tiny"))).to_dict()
    finally:
        context.close()
    assert not errors


def test_fit_column_says_what_the_core_says(page, site_url):
    """Regression: the per-stage fit cell showed "yes" for every verdict string. llama-3-8b on H100-80GB is amber
    (allocated 75.6 GiB fits 79.65 GiB, the estimate with the 5 % allocator reserve does not: the CLI says so
    too)."""
    from estimator import estimate, fit, get_gpu, load_preset
    expected = [v.verdict for v in fit(estimate(load_preset("llama-3-8b")), get_gpu("H100-80GB"))]
    _open(page, site_url + "calculator/?preset=llama-3-8b&gpu=H100-80GB")
    _settle(page, 0)
    cells = page.eval_on_selector_all(f"{RESULTS} table tbody tr td:last-child", "tds => tds.map(t => t.textContent)")
    words = {"fits": "fits", "tight": "fits within the error band", "no": "does not fit"}
    assert cells == [words[v] for v in expected] == ["fits within the error band"]
