"""The documentation site: built with ``mkdocs build --strict``, its generated numbers checked.

The site's tables must never state a number the estimator did not compute. These tests build the site
once, parse the generated HTML (standard library ``html.parser``) and recompute every figure of every
preset page, worked example and comparison with :func:`estimator.estimate` for the configuration the
page says it used: the expected values are the estimator's, the numbers under test are the page's.
They also check that the configuration reference covers every schema field, that each preset has a
page, that a bad marker fails the build, and that two builds are identical.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest

import estimator
from estimator.formats import gpus, presets
from estimator.config.schema import field_specs
from estimator.validation.calibration import compare_case, load_cases
from tests import background

ROOT = Path(__file__).resolve().parents[2]
GIB = 2 ** 30


def build(site_dir: Path, *, config: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(background.mkdocs_build_argv(site_dir, config), cwd=ROOT, capture_output=True, text=True,
                          env=background.mkdocs_env())


@pytest.fixture(scope="module")
def site(site_dir) -> Path:
    """The session's build (``tests/conftest.py``: ``mkdocs build --strict``, no warning), shared with the browser
    tests."""
    return site_dir


# --- a small HTML table reader --------------------------------------------------------------------

class Tables(HTMLParser):
    """Every <table> of a page: its attributes and rows; each row its attributes and cells (attrs, text)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tables: list[dict] = []
        self._stack: list[dict] = []
        self._cell: dict | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._stack.append({"attrs": a, "rows": []})
        elif tag == "tr" and self._stack:
            self._stack[-1]["rows"].append({"attrs": a, "cells": []})
        elif tag in ("td", "th") and self._stack and self._stack[-1]["rows"]:
            self._cell = {"attrs": a, "text": ""}
            self._stack[-1]["rows"][-1]["cells"].append(self._cell)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = None
        elif tag == "table" and self._stack:
            self.tables.append(self._stack.pop())

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data

    def find(self, kind: str) -> list[dict]:
        return [t for t in self.tables if t["attrs"].get("data-table") == kind]


def page(site: Path, path: str) -> str:
    return (site / path / "index.html").read_text(encoding="utf-8")


def keyed(row: dict) -> dict[str, str]:
    return {c["attrs"]["data-key"]: c["text"].strip() for c in row["cells"] if "data-key" in c["attrs"]}


def gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def merged(base: dict, overrides: dict) -> dict:
    out = json.loads(json.dumps(base))
    for section, values in overrides.items():
        out.setdefault(section, {}).update(values)
    return out


BYTE_KEYS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "transient_bytes",
             "allocated_bytes", "reserved_bytes", "device_bytes")


def check_stage_table(table: dict) -> int:
    """Every byte cell of a per-stage table equals the estimate of the table's data-config."""
    est = estimator.estimate(json.loads(table["attrs"]["data-config"]))
    rows = [r for r in table["rows"] if "data-stage" in r["attrs"]]
    assert len(rows) == len(est.stages)
    n = 0
    for row in rows:
        stage = est.stages[int(row["attrs"]["data-stage"])]
        cells = keyed(row)
        for key, text in cells.items():
            assert text == gib(getattr(stage, key)), (key, stage.stage)
            n += 1
    return n


def check_peak_row(row: dict, est) -> int:
    """Every byte cell of a one-row-per-configuration table equals the peak stage of ``est``."""
    n = 0
    for key, text in keyed(row).items():
        if key in BYTE_KEYS:
            assert text == gib(getattr(est.peak_stage, key)), key
            n += 1
    return n


PRESETS = presets.list_presets()


# --- preset pages ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_has_a_page_listed_in_the_index_and_the_nav(site, name):
    html = page(site, f"models/{name}")
    title = presets.preset_info(name)["title"]
    assert f">{title}<" in html
    index = Tables(page(site, "models"))
    listed = [r["attrs"].get("data-preset") for t in index.find("presets") for r in t["rows"]]
    assert name in listed
    home = (site / "index.html").read_text(encoding="utf-8")
    assert f'href="models/{name}/"' in home      # the navigation of every page links it


@pytest.mark.parametrize("name", PRESETS)
def test_preset_page_numbers_equal_estimate(site, name):
    html = page(site, f"models/{name}")
    tables = Tables(html)
    cfg = presets.load_preset(name)
    est = estimator.estimate(cfg)

    # Parameters: exact counts by component.
    (params,) = tables.find("params")
    counts = est.parameters
    for row in params["rows"]:
        key = row["attrs"].get("data-key")
        if key:
            (value,) = [c["attrs"]["data-value"] for c in row["cells"] if "data-value" in c["attrs"]]
            assert int(value) == getattr(counts, key), key

    # The preset's own configuration, stage by stage.
    (stages,) = tables.find("stages")
    assert json.loads(stages["attrs"]["data-config"]) == cfg.to_dict()
    assert check_stage_table(stages) == 8 * len(est.stages)

    # The fit of its peak stage on each GPU.
    (fit,) = tables.find("fit")
    for row in fit["rows"][1:]:
        verdict = gpus.fit(est, gpus.get_gpu(row["attrs"]["data-gpu"]))[est.peak.stage]
        assert (row["cells"][-1]["attrs"]["data-fits"] == "yes") == verdict.fits
        assert row["cells"][3]["text"] == gib(verdict.upper_bound_bytes)      # the one rule's upper bound
        assert row["cells"][4]["text"] == gib(verdict.headroom_bytes)

    # The layout grid: every row's layout, peak and fit, recomputed from its overrides of the preset.
    grids = tables.find("grid")
    assert grids and any(len(t["rows"]) > 1 for t in grids)
    for table in grids:
        world = int(table["attrs"]["data-world"])
        header = [c["text"] for c in table["rows"][0]["cells"]]
        for row in table["rows"][1:]:
            overrides = json.loads(row["attrs"]["data-overrides"])
            assert overrides["training"]["world_size"] == world
            row_est = estimator.estimate(merged(cfg.to_dict(), overrides))
            cells = keyed(row)
            for key in ("tp", "pp", "cp", "dp") + (("ep", "etp") if counts.moe_layers else ()):
                assert cells[key] == str(row_est.parallel[key]), key
            assert cells["sequence_parallel"] == ("yes" if row_est.parallel["sequence_parallel"] else "no")
            assert cells["peak_stage"] == str(row_est.peak.stage)
            assert check_peak_row(row, row_est) == 2
            for cell in row["cells"]:
                if "data-gpu" in cell["attrs"]:
                    g = gpus.get_gpu(cell["attrs"]["data-gpu"])
                    assert g.name in header
                    assert (cell["attrs"]["data-fits"] == "yes") == gpus.fit(row_est, g)[row_est.peak.stage].fits

    # The layouts found by the search: each one's configuration reproduces its peak.
    assert 'id="best-layouts-on-' in html
    for table in tables.find("search"):
        for row in table["rows"][1:]:
            row_est = estimator.estimate(json.loads(row["attrs"]["data-config"]))
            assert keyed(row)["device_bytes"] == gib(row_est.peak.device_bytes)


def test_preset_page_counts_are_the_published_ones(site):
    """Llama 3 8B: 8,030,261,248 parameters (Hugging Face API safetensors.total, reference SOURCES.md)."""
    tables = Tables(page(site, "models/llama-3-8b"))
    (params,) = tables.find("params")
    total = [r for r in params["rows"] if r["attrs"].get("data-key") == "total"][0]
    assert total["cells"][1]["attrs"]["data-value"] == "8030261248"


# --- guides ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["parallelism", "getting-started", "methodology", "validation", ""])
def test_guide_tables_equal_estimate(site, path):
    """Worked examples and comparisons: every number equals the estimate of the configuration shown."""
    tables = Tables(page(site, path) if path else (site / "index.html").read_text(encoding="utf-8"))
    for table in tables.find("stages"):
        assert check_stage_table(table) > 0
    for table in tables.find("compare"):
        for row in table["rows"][1:]:
            assert check_peak_row(row, estimator.estimate(json.loads(row["attrs"]["data-config"]))) == 6


def test_parallelism_guide_computes_the_three_examples(site):
    html = page(site, "parallelism")
    tables = Tables(html)
    examples = [t for t in tables.find("stages")]
    assert len(examples) == 3
    for ident in ("example-dense-7b", "example-mixtral", "example-deepseek-v2-lite"):
        assert f'data-example="{ident}"' in html
    assert "~30 GB/GPU" in html          # the claim is quoted, next to the computed figure


def test_catalog_page_lists_every_model_with_the_estimators_count(site):
    """Each supported model's exact count as estimator.formats.catalog computes it, beside the published figure;
    each refused model with the reason the import gives."""
    from estimator.formats import catalog
    html = page(site, "models/catalog")
    tables = Tables(html)
    (ok,), (refused,) = tables.find("catalog"), tables.find("catalog-refused")
    rows = {r["attrs"]["data-hf-id"]: keyed(r) for t in (ok, refused) for r in t["rows"] if "data-hf-id" in r["attrs"]}
    listing = catalog.listing()
    assert set(rows) == {r["hf_id"] for r in listing}
    for r in listing:
        cells = rows[r["hf_id"]]
        if r["supported"]:
            assert cells["total"] == f"{r['parameters']['total']:,}" and cells["active"] == f"{r['parameters']['active']:,}"
            if r["published"]:
                assert cells["published"].startswith(r["published"]["text"]) and cells["agrees"] == "✓"
        else:
            assert cells["reason"] == r["reason"]
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="models/catalog/"' in home      # listed in the navigation


def test_validation_page_lists_every_case(site):
    tables = Tables(page(site, "validation"))
    (table,) = tables.find("validation")
    rows = {r["attrs"]["data-case"]: keyed(r) for r in table["rows"][1:]}
    cases = load_cases()
    assert set(rows) == {c["id"] for c in cases}
    for case in cases:
        cmp = compare_case(case)
        assert rows[case["id"]]["measured"] == f"{cmp.measured_gib:.2f}"
        assert rows[case["id"]]["estimated"] == f"{cmp.estimated_gib:.2f}"
    html = page(site, "validation")
    assert "<svg" in html and 'role="img"' in html and "<title" in html


def test_validation_page_keeps_calibration_apart_from_held_out(site):
    """Every compared Megatron-LM CI case is in the CI table with the core's numbers; the summary has a row per
    source and set, and every not-compared case is named with its reason."""
    from estimator.validation.calibration import stats
    from estimator.validation.megatron_ci import ci_cases
    tables = Tables(page(site, "validation"))
    (ci_table,) = tables.find("validation-ci")
    rows = {r["attrs"]["data-case"]: keyed(r) for r in ci_table["rows"][1:]}
    cases = ci_cases()
    compared = [c for c in cases if c.status == "compared"]
    assert set(rows) == {c.id for c in compared}
    for c in compared:
        assert rows[c.id]["estimated"] == f"{c.comparison.estimated_gib:.2f}"
        assert rows[c.id]["target"].startswith("yes" if c.in_target else "no")
    (summary,) = tables.find("validation-summary")
    keys = {r["attrs"].get("data-key"): keyed(r) for r in summary["rows"][1:]}
    from estimator.validation.project_runs import project_cases
    assert set(keys) == {"simumax-b200", "calibration-assumed", "megatron-ci-target", "megatron-ci-h100",
                         "megatron-ci-gb200", "megatron-ci-all", "known-to-run"} | {
                             f"project-b{c.batch}" for c in project_cases()}
    target = stats([c.comparison for c in compared if c.in_target])
    assert int(keys["megatron-ci-h100"]["cases"]) + int(keys["megatron-ci-gb200"]["cases"]) == target.cases
    assert keys["megatron-ci-target"]["cases"] == str(target.cases)
    assert keys["megatron-ci-target"]["median-abs"] == f"{target.median_abs_error_pct:.1f} %"
    html = page(site, "validation")
    for c in cases:
        if c.status != "compared":
            assert c.id in html
    assert "Held-out" in page(site, "")


def test_accuracy_box_on_home_and_validation(site):
    """Home and Validation open with the short answer: the held-out figures of the data today (signed, one
    decimal), in a box of at most 10 list lines; Home's table keeps held-out sources only, each CI row's cases
    adding up to the target set's."""
    import html as htmllib
    from estimator.validation.headline import headline
    h = headline()
    for name in ("", "validation"):
        text = htmllib.unescape(re.sub(r"<[^>]+>", "", page(site, name)))
        start = text.index("How accurate is it? The short answer")
        box = text[start:start + 1500]
        for value in (h.ci.median_pct, h.ci.worst_pct, h.project.median_pct, h.project.worst_pct):
            assert f"{value:+.1f} %" in box, (name, value)
        assert f"({h.band_dense_pct:.1f} % for a dense model, {h.band_moe_pct:.1f} % for MoE" in box
        assert f"{h.ci.under} of {h.ci.cases} CI cases" in box
    home = page(site, "")
    box_html = home[home.index('class="admonition abstract"'):]
    box_html = box_html[:box_html.index("</div>")]
    assert box_html.count("<li>") <= 9
    (compact,) = Tables(home).find("validation-compact")
    keys = {r["attrs"].get("data-key"): keyed(r) for r in compact["rows"][1:]}
    assert set(keys) == {"megatron-ci-h100", "megatron-ci-gb200", "project-all"}
    assert int(keys["megatron-ci-h100"]["cases"]) + int(keys["megatron-ci-gb200"]["cases"]) == h.ci.cases
    assert int(keys["project-all"]["cases"]) == h.project.cases
    assert not Tables(home).find("validation-summary")


def test_validation_page_shows_the_project_runs_per_phase(site):
    """This project's own runs: one table per batch, every case with the core's overall, forward/backward and
    optimizer-step figures and both peak phases; batch 1 is labelled as seen while the model was written."""
    from estimator.validation.project_runs import project_cases
    tables = Tables(page(site, "validation"))
    found = tables.find("validation-project")
    cases = project_cases()
    assert len(found) == len({c.batch for c in cases})
    rows = {r["attrs"]["data-case"]: keyed(r) for t in found for r in t["rows"][1:]}
    assert set(rows) == {c.id for c in cases}
    for c in cases:
        row = rows[c.id]
        assert row["estimated"] == f"{c.comparison.estimated_gib:.3f}"
        assert row["step"].startswith(f"{c.measured_step_gib:.3f}")
        assert row["phase"] == " / ".join("step" if p == "optimizer_step" else "fwd/bwd"
                                          for p in (c.measured_phase, c.estimated_phase))
    assert "written after seeing them" in page(site, "validation")


# --- references -----------------------------------------------------------------------------------

def test_configuration_reference_lists_every_schema_field(site):
    tables = Tables(page(site, "configuration"))
    rows = {r["attrs"]["data-field"]: r for t in tables.find("config") for r in t["rows"][1:]}
    specs = field_specs()
    assert set(rows) == {s.path for s in specs}
    for s in specs:
        text = " ".join(c["text"] for c in rows[s.path]["cells"])
        assert s.name in text
        if s.flag:
            assert s.flag in text
        assert s.cli_flag in text
        if s.derived:
            assert s.derived in text


def test_cli_reference_lists_every_subcommand(site):
    from estimator import cli
    html = page(site, "cli")
    import argparse
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in sub.choices:
        assert f'id="{name}"' in html
    overrides = Tables(html).find("cli-overrides")
    assert {r["attrs"]["data-field"] for r in overrides[0]["rows"][1:]} == {s.path for s in field_specs()}


def test_api_reference_lists_the_public_api(site):
    html = page(site, "api")
    for name in estimator.__all__:
        assert f'data-api="estimator.{name}"' in html


# --- the site as a whole --------------------------------------------------------------------------

def test_links_are_relative_and_nothing_loads_from_another_host(site):
    """Every page works from any sub-path. (404.html is the exception MkDocs makes by design: a host serves
    it at any depth, so its links are rooted at site_url.)"""
    for f in site.rglob("*.html"):
        if f.name == "404.html":
            continue
        html = f.read_text(encoding="utf-8")
        for attr in ('src="http', "src='http", 'href="/', "url(http"):
            assert attr not in html.replace('href="//', ""), (f, attr)
        for tag in ('<link rel="stylesheet" href="http', '<script src="http'):
            assert tag not in html, (f, tag)


def test_two_builds_are_identical(site, second_build):
    """Same commit, same bytes: the session's build (here, in this process's time zone, with the usual cache)
    against a second build of a fresh ``git clone`` at another path, in Asia/Tokyo with a Japanese locale, another
    hash seed and an empty cache (the Pyodide runtime from the first build's download, as an air-gapped build takes
    it, so its memory snapshot is made anew). Every file byte for byte: the calculator's memory snapshot, the
    sitemap and the offline zip included. The snapshot used to differ on every fresh build (Python's memory holds
    the clock and the hash seed) and in another time zone (Emscripten's tzset read the build machine's zone into
    Python's memory); the sitemap carried the build date, and now carries the last commit's.

    In a checkout with uncommitted changes (a developer's) the second tree is a copy of the files ``git ls-files``
    lists, dated like the first (``SOURCE_DATE_EPOCH``: a copy has no commit). ``scripts/check_reproducible.py``
    does the same with two fresh caches, for a build outside the suite. The second build runs in the background
    from the start of the session (``tests/background.py``, job ``rebuild``)."""
    proc, again = second_build
    assert proc.returncode == 0, proc.stderr[-4000:]
    first = sorted(p.relative_to(site) for p in site.rglob("*") if p.is_file())
    second = sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert first == second
    assert any(rel.name == "snapshot.bin.gz" for rel in first) or shutil.which("node") is None
    assert any(rel.suffix == ".zip" for rel in first)
    differ = [str(rel) for rel in first if (site / rel).read_bytes() != (again / rel).read_bytes()]
    assert not differ, f"{len(differ)} files differ between the two builds: {differ[:10]}"


def test_the_sitemap_dates_are_the_last_commits(site):
    """<lastmod> is the date (UTC) of the last commit, so a build tomorrow gives the same sitemap."""
    import datetime
    import re
    spec = importlib.util.spec_from_file_location("build_date_hook", ROOT / "hooks" / "build_date.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    epoch = hook.source_date_epoch()
    proc = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    if proc.returncode == 0:
        assert epoch == int(proc.stdout)
    day = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).date().isoformat()
    dates = set(re.findall(r"<lastmod>([^<]*)</lastmod>", (site / "sitemap.xml").read_text(encoding="utf-8")))
    assert dates == {day}


# --- markers ----------------------------------------------------------------------------------------

def load_hook():
    spec = importlib.util.spec_from_file_location("tables_hook_under_test", ROOT / "hooks" / "tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "hooks"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "hooks"))
    return module


@pytest.mark.parametrize("markdown, message", [
    ("<!-- estimator:no-such-marker -->", "unknown marker 'no-such-marker'"),
    ("<!-- estimator:config-reference colour=red -->", "unknown argument(s) colour"),
    ("<!-- estimator:preset-page -->", "missing argument(s) name"),
    ("<!-- estimator:preset-page name=no-such-model -->", "unknown preset 'no-such-model'"),
    ("<!-- estimator:value preset=tiny key=parameters.nothing -->", "has no 'parameters.nothing'"),
    ("<!-- estimator:example id=x preset=tiny gpu=H100-80GB\ntraining: {world_size: 3, seq_length: 1024}\n-->",
     "world_size"),
    ("<!-- estimator:example id=x preset=tiny gpu=H100-80GB\ntraining: [1, 2\n-->", "YAML body"),
    ("<!-- estimator:example id=x preset=tiny gpu=no-such-gpu\ntraining: {micro_batch_size: 1}\n-->", "unknown GPU"),
    ("<!-- estimator: -->", "unknown marker ''"),
    ("<!--estimator:config-reference", "malformed estimator marker"),
])
def test_bad_markers_raise(markdown, message):
    from mkdocs.exceptions import PluginError
    hook = load_hook()
    with pytest.raises(PluginError) as err:
        hook.render_markers(markdown, "test.md")
    assert message in str(err.value)


def test_unknown_marker_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Test\n\n<!-- estimator:no-such-marker -->\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text(textwrap.dedent(f"""\
        site_name: test
        docs_dir: {docs}
        theme: {{name: mkdocs}}
        hooks: [{ROOT / 'hooks' / 'tables.py'}]
        """), encoding="utf-8")
    proc = build(tmp_path / "site", config=config)
    assert proc.returncode != 0
    assert "unknown marker 'no-such-marker'" in proc.stdout + proc.stderr


def test_number_tables_and_charts_stay_out_of_the_search_index(site):
    """The search index holds the site's words, not its generated numbers: a preset page's stage, fit and
    layout tables and its charts are marked data-search-exclude and none of their text reaches
    search_index.json (Material's indexer writes a table as its cells' text run together, so the first 40
    characters of a table's text would be found there), while the architecture table, words, is indexed."""
    import re
    page = (site / "models" / "deepseek-v3" / "index.html").read_text(encoding="utf-8")
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    indexed = " ".join(d["text"] for d in index["docs"] if d["location"].startswith("models/deepseek-v3/"))

    def text(kind: str) -> str:
        table = re.search(rf'<table data-table="{kind}"[^>]*>(.*?)</table>', page, re.S)
        assert table, kind
        return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", table.group(1))).strip()[:40]

    for kind in ("stages", "fit", "grid", "search", "breakdown", "params"):
        assert f'<table data-table="{kind}" data-search-exclude' in page, kind
        assert text(kind) not in indexed, kind
    article = page[page.index("<article"):page.index("</article>")]        # the page's content, not the theme's
    assert "<svg" in article and not re.search(r"<svg(?![^>]*data-search-exclude)", article)
    assert text("model")[:20] in indexed.replace("  ", " ") or "multi-latent" in indexed.lower()


def test_calculator_page_preloads_its_scripts(site):
    """The calculator's scripts follow some 400 kB of boot data: the head preloads each of them, so that the
    browser fetches them at once instead of one after another as the parser reaches them."""
    sys.path.insert(0, str(ROOT / "hooks"))
    try:
        spec = importlib.util.spec_from_file_location("runtime_hook_scripts", ROOT / "hooks" / "runtime.py")
        hook = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = hook               # dataclasses look their module up while it loads
        spec.loader.exec_module(hook)
    finally:
        sys.path.remove(str(ROOT / "hooks"))
    page = (site / "calculator" / "index.html").read_text(encoding="utf-8")
    head = page[:page.index("</head>")]
    for script in hook.SCRIPTS[1:]:
        assert f'<link rel="preload" as="script" href="../{script}">' in head, script
    assert head.index(hook.SCRIPTS[0]) < head.index('rel="preload"')     # Python's engine first


def test_calculator_page_starts_material_late(site):
    """On the calculator page Material's bundle is not a script of the page: material-late.js loads it (its
    address in data-src) once Python has answered, so that its 0.7 s of main-thread CPU does not slow Python's
    start. Every other page loads the bundle itself."""
    bundle = re.compile(r'<script src="((?:\.\./)*assets/javascripts/bundle\.[\w.]+\.js)"></script>')
    calc = (site / "calculator" / "index.html").read_text(encoding="utf-8")
    assert not bundle.search(calc)
    late = re.findall(r'<script src="([^"]*material-late\.js)" data-src="([^"]+)"></script>', calc)
    assert len(late) == 1
    loader, real = late[0]
    assert loader == "../assets/calculator/material-late.js"
    assert (site / "calculator" / loader).resolve().is_file()
    assert (site / "calculator" / real).resolve().is_file() and "/javascripts/bundle." in real
    for other in (site / "index.html", site / "methodology" / "index.html"):
        html = other.read_text(encoding="utf-8")
        assert len(bundle.findall(html)) == 1 and "material-late" not in html


def test_calculator_page_starts_material_search_late(site):
    """On the calculator page Material's search worker is search-worker.js, which loads the real worker (named
    in its query, relative to itself) once Python has answered: building the index takes about 1.5 s of CPU
    that a two-core laptop would otherwise take from Python's start. Every other page keeps the real worker."""
    def search_of(page: Path) -> str:
        html = page.read_text(encoding="utf-8")
        config = json.loads(re.search(r'<script id="__config" type="application/json">(.*?)</script>', html, re.S)[1])
        return config["search"]

    calc = search_of(site / "calculator" / "index.html")
    stand_in, _, query = calc.partition("?worker=")
    assert stand_in == "../assets/calculator/search-worker.js"
    assert (site / "calculator" / stand_in).resolve().is_file()
    real = (site / "assets" / "calculator" / query).resolve()
    assert real.is_file() and real.parent == (site / "assets" / "javascripts" / "workers").resolve()
    assert search_of(site / "index.html") == "assets/javascripts/workers/" + real.name
    assert search_of(site / "methodology" / "index.html") == "../assets/javascripts/workers/" + real.name


def test_public_pages_cite_public_sources_and_say_what_the_total_holds(site):
    """Issue 29: the pages cited an internal path ("shared/reference/hf-configs", "SOURCES.md") and DeepSeek-V3's
    "682.64 billion parameters" did not say it includes the MTP layer. The MTP share is the total less the preset's
    published count without it (671,026,419,200, presets/deepseek-v3.yaml)."""
    for f in site.rglob("*.html"):
        text = f.read_text(encoding="utf-8")
        assert "shared/reference" not in text and "SOURCES.md" not in text, f
    html = page(site, "models/deepseek-v3")
    assert "https://huggingface.co/deepseek-ai/DeepSeek-V3" in html
    est = estimator.estimate(presets.load_preset("deepseek-v3"))
    mtp = est.parameters.total - 671_026_419_200
    assert f"incl. {mtp / 1e9:.2f} billion in the MTP layer" in html
    assert f"incl. {mtp:,} in the MTP layer" in html
