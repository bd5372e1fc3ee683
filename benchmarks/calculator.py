"""Speed of the in-page calculator, measured in headless Chromium.

Builds the site (or takes ``--site DIR``), serves it on loopback under a sub-path as a static host
would (a process of its own sending files with sendfile), and drives Debian's Chromium (``/usr/bin/chromium``) with Playwright. Each cold load is a fresh
browser context (empty caches). It prints, with medians over the runs:

- **first numbers for a preset link**: a fresh context opening ``calculator/?preset=deepseek-v3`` (not the
  default preset), from navigation start until the browser paints that preset's numbers (Element Timing's
  render time of the first number cell; precomputed when the site was built, before Python has started);
- **first numbers for a catalog model link**: the same for ``calculator/?hf=Qwen/Qwen3-30B-A3B`` (a Hub id of the
  offline catalog, no preset: its numbers computed when the site was built, one small file per id that the page
  fetches; checked to be that model's: the headline names it when they are painted);
- **Python ready**: from navigation start until Python has started in the page's worker (its "ready"
  message), and **cold start**: until the first result Python computed is rendered (``estimate:done``);
- **warm navigation**: from a click on the "Calculator" link on another page of the same tab (Material's
  instant navigation, Python already running) to the next ``estimate:done``;
- **change to render**: from an input event on a quick control until the frame showing the updated table
  has been rendered (style, layout and paint included: the task after that frame), median and 90th
  percentile, and the part spent in Python;
- **timeline**: the memory timeline and module breakdown (issue 14) of Kimi K2 (PP 16 x VPP 2, 1,024
  micro-batches) and of DeepSeek-V3 (PP 8 x VPP 4): the time to draw them (timeline.js, to the next frame,
  target <= 100 ms) and, apart, the time of their Python request;
- **find layouts**: "Find layouts that fit" for DeepSeek-V3 on 1,024 H100-80GB GPUs, from the click to the
  rendered results (the search runs in the worker: the page stays responsive, and the longest main-thread
  task during the search is printed too);
- **Python ready on a bare page**: the same runtime started by a page that does nothing else (no Material, no
  form, launched at once; written into the served copy as ``bare-boot.html``): the floor that the calculator
  page's own "Python ready" can approach on this machine;
- **make it fit** and **sweep** (issue 14): the "suggest" and "sweep" requests (estimator/web/plan.py) for a
  few configurations that do not fit, from the request to Python's answer on the page (target <= 500 ms each).

Targets (issues 13 and 29, on a 2-core machine): numbers for any preset link <= 0.5 s, for a catalog model link
<= 0.8 s, Python ready <= 1.5 s,
change to render p90 <= 50 ms, find layouts <= 1 s. ``--no-snapshot`` builds the site without the
build-time Pyodide memory snapshot, to measure what that lever is worth.

    .venv/bin/python benchmarks/calculator.py [--site DIR] [--runs 10] [--changes 40] [--no-snapshot] [--cold-only]

``--cold-only`` prints the cold-start figures alone (first numbers for a preset link and for a catalog model link,
Python ready, first Python result).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update"]
TARGETS = {"preset": 500.0, "catalog": 800.0, "ready": 1500.0, "warm": 300.0, "change_p90": 50.0, "search": 1000.0, "timeline": 100.0,
           "plan": 500.0}
#: How often Playwright checks, in the page, whether what a measure waits for has happened. Its default polls on
#: every animation frame, which keeps the page drawing a frame every 16 ms as no visitor's browser does: on two
#: cores those frames took main-thread time from the start being measured. The times themselves are recorded by
#: the page (event listeners, Element Timing), so the polling interval only decides when they are read.
POLL_MS = 50
#: (label, form state) of the "Make it fit" and sweep measurements: configurations that do not fit.
PLAN_CASES = (("Qwen2.5-72B recipe on H100-80GB", {"preset": "qwen2.5-72b", "values": {}, "gpu": "H100-80GB"}),
              ("Llama 3.1 405B at 128K tokens on H100-80GB", {"preset": "llama-3.1-405b", "values": {},
                                                              "gpu": "H100-80GB"}),
              ("DeepSeek-V3 recipe on A100-40GB", {"preset": "deepseek-v3", "values": {}, "gpu": "A100-40GB"}),
              ("Qwen3 8B on a 16 GiB GPU", {"preset": "qwen3-8b", "values": {}, "gpu": "custom", "gpu_gib": "16"}))

# Records, in the page, when the first numbers were shown, when each Python-computed estimate was
# rendered, and the longest task on the main thread.
INIT_SCRIPT = """
window.__mme = { done: [], shown: null, searches: 0, longest: 0 };
document.addEventListener("estimate:done", () => window.__mme.done.push(performance.now()), true);
document.addEventListener("search:done", () => window.__mme.searches++, true);
// Numbers are "shown" when the browser paints them: Element Timing's renderTime of the first number cell
// (marked the moment it is inserted, before any paint), or where that API is missing the task after the
// frame that holds it.
let seen = false;
try {
  new PerformanceObserver((list) => { for (const e of list.getEntries()) {
    if (e.identifier === "mme-first-numbers" && window.__mme.shown === null) window.__mme.shown = e.renderTime || e.loadTime;
  } }).observe({ type: "element", buffered: true });
} catch (err) {}
new MutationObserver(() => {
  const cell = !seen && document.querySelector(".mme-results td[data-col=device]");
  if (!cell) return;
  seen = true;
  cell.setAttribute("elementtiming", "mme-first-numbers");
  window.__mme.headline = document.querySelector(".mme-sticky").textContent;   // whose numbers they are
  if (!("PerformanceElementTiming" in window)) {
    requestAnimationFrame(() => setTimeout(() => { window.__mme.shown = performance.now(); }, 0));
  }
}).observe(document, { subtree: true, childList: true });
try {
  new PerformanceObserver((list) => { for (const e of list.getEntries())
    window.__mme.longest = Math.max(window.__mme.longest, e.duration); }).observe({ type: "longtask" });
} catch (err) {}
"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".mjs": "text/javascript", ".js": "text/javascript"}

    def log_message(self, *args):
        pass

    def copyfile(self, source, outputfile):
        """The body with sendfile(2), as static hosts send files (the kernel copies; no Python loop)."""
        try:
            self.wfile.flush()
            self.connection.sendfile(source)
        except ConnectionError:                      # a page left while loading: not news
            pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _serve_forever(directory: str, port_file: str) -> None:
    """The static server's own process (``--serve-dir``): it shares no interpreter lock with Playwright."""
    server = _Server(("127.0.0.1", 0), functools.partial(_Handler, directory=directory))
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


def build_site(out: Path, snapshot: bool) -> None:
    env = {**os.environ, "MME_PYODIDE_SNAPSHOT": "1" if snapshot else "0", "NO_MKDOCS_2_WARNING": "1",
           "MME_OFFLINE_ZIP": "0"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("mkdocs build failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])


class _Process:
    """The server process, stopped like an in-process server."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    def shutdown(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def serve(site: Path) -> tuple[str, _Process, Path]:
    """Serve a copy of ``site`` under ``/sub/`` from a process of its own, its sitemap rewritten as if
    ``site_url`` were that address.

    Material's instant navigation only follows links listed in ``sitemap.xml``, matched by host, port and
    path, so a site deployed at its ``site_url`` navigates instantly; the copy served here does too. The
    files go out with sendfile(2) from a separate process, as a static host sends them: a server sharing
    Playwright's interpreter would add its own delays to every download (about 1 s for the 20 MB runtime).
    """
    www = Path(tempfile.mkdtemp(prefix="mme-bench-"))
    shutil.copytree(site, www / "sub")
    port_file = www / "port"
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve-dir", str(www),
                             "--port-file", str(port_file)])
    for _ in range(200):
        if port_file.is_file() and port_file.read_text():
            break
        time.sleep(0.05)
    else:
        proc.kill()
        sys.exit("the static server did not start")
    url = f"http://127.0.0.1:{port_file.read_text()}/sub/"
    pages = sorted(p.parent.relative_to(www / "sub").as_posix() for p in (www / "sub").rglob("index.html"))
    locs = "".join(f"<url><loc>{url}{'' if p == '.' else p + '/'}</loc></url>" for p in pages)
    (www / "sub" / "sitemap.xml").write_text('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns='
                                           f'"http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>')
    _bare_page(www / "sub")
    return url, _Process(proc), www


def _bare_page(site: Path) -> None:
    """``bare-boot.html``: the calculator page's engine (its script tag, with the runtime's manifest) started at
    once by a page that does nothing else, for the "Python ready on a bare page" floor."""
    calc = (site / "calculator" / "index.html").read_text(encoding="utf-8")
    m = re.search(r"<script src=\"\.\./(assets/calculator/engine\.js)\" (data-mme-runtime='[^']*')></script>", calc)
    if not m:
        return
    (site / "bare-boot.html").write_text(
        f"<!doctype html><html><body><script src=\"{m[1]}\" {m[2]}></script><script>\n"
        "const e = window.mmeEngine.current.launch();\n"
        "e.listeners.add(() => { if (e.ready && !window.__ready) window.__ready = e.boot.readyAt; });\n"
        "</script></body></html>", encoding="utf-8")


def bare(browser, url: str) -> float | None:
    """Python ready (ms from navigation start) on ``bare-boot.html``, a fresh context."""
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        if page.goto(url + "bare-boot.html").status != 200:
            return None
        page.wait_for_function("() => window.__ready", timeout=90_000, polling=POLL_MS)
        return page.evaluate("window.__ready")
    finally:
        ctx.close()


def _wait_done(page, count: int) -> float:
    page.wait_for_function(f"() => window.__mme && window.__mme.done.length >= {count}", timeout=90_000,
                           polling=POLL_MS)
    return page.evaluate(f"window.__mme.done[{count - 1}]")


def _calc(page, expr: str):
    return page.evaluate(f"(() => {{ const c = document.querySelector('[data-mme-calculator]').calculator; "
                         f"return {expr}; }})()")


def cold(browser, url: str) -> dict:
    """One cold load of a non-default preset link: first numbers, Python ready, first Python result (ms)."""
    ctx = browser.new_context()
    page = ctx.new_page()
    page.add_init_script(INIT_SCRIPT)
    page.goto(url + "calculator/?preset=deepseek-v3")
    page.wait_for_function("() => window.__mme.shown !== null", timeout=30_000, polling=POLL_MS)
    first = _wait_done(page, 1)
    boot = _calc(page, "c.engine.boot")
    return {"shown": page.evaluate("window.__mme.shown"), "ready": boot["readyAt"], "first": first,
            "boot": boot, "page": page, "ctx": ctx}


#: The catalog model link measured: a Hub id of the offline catalog that is no preset's.
CATALOG_ID = "Qwen/Qwen3-30B-A3B"


def catalog(browser, url: str) -> float:
    """One cold load of a catalog model link (``?hf=ID``): ms from navigation start to its first numbers painted."""
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.add_init_script(INIT_SCRIPT)
        page.goto(url + f"calculator/?hf={CATALOG_ID}")
        page.wait_for_function("() => window.__mme.shown !== null && window.__mme.done.length > 0", timeout=90_000,
                               polling=POLL_MS)
        # The first numbers painted are the catalog model's (precomputed, then Python's), not the default preset's.
        assert page.evaluate("window.__mme.headline").startswith(CATALOG_ID + ":"), "not the catalog model's numbers"
        assert CATALOG_ID in page.inner_text(".mme-sticky"), "the catalog model is not the one in the headline"
        return page.evaluate("window.__mme.shown")
    finally:
        ctx.close()


def warm(page, url: str) -> float:
    """Navigate away with an instant-navigation link, then click back to the calculator."""
    page.wait_for_function("() => window.document$ !== undefined && performance.getEntriesByType('resource')"
                           ".some((r) => r.name.endsWith('/sitemap.xml'))", timeout=30_000)  # Material has started
    find = "(away) => [...document.querySelectorAll('a.md-nav__link[href]')].find((a) => " \
           "a.href.includes('/calculator/') !== away)"
    page.evaluate(f"({find})(true).click()")
    page.wait_for_function("() => !document.querySelector('[data-mme-calculator]')", timeout=30_000)
    n = page.evaluate("window.__mme.done.length")
    t0 = page.evaluate(f"() => {{ const t = performance.now(); ({find})(false).click(); return t; }}")
    return _wait_done(page, n + 1) - t0


def per_change(page, changes: int) -> list[tuple[float, float]]:
    """Change the global batch size (a quick control) and time it to the rendered table."""
    script = """async (value) => {
      const input = document.getElementById("mme-q-training.global_batch_size");
      const res = document.querySelector(".mme-results");
      const done = new Promise((ok) => {
        res.addEventListener("estimate:done", ok, { once: true });
        res.addEventListener("estimate:error", ok, { once: true });
      });
      const t0 = performance.now();
      input.value = String(value);
      input.dispatchEvent(new Event("input", { bubbles: true }));
      await done;
      await new Promise((ok) => requestAnimationFrame(() => setTimeout(ok, 0)));   // that frame rendered
      const python = document.querySelector("[data-mme-calculator]").calculator.engine.pythonMs;
      return [performance.now() - t0, python];
    }"""
    out = []
    for i in range(changes):
        out.append(page.evaluate(script, (4096, 8192, 2048, 16384)[i % 4]))    # all valid for deepseek-v3
        page.wait_for_timeout(150)                      # let the follow-up advice request finish
    return out


def find_layouts(page) -> tuple[float, float, str]:
    """'Find layouts that fit' for DeepSeek-V3 on 1,024 H100s: (ms to rendered results, longest main-thread
    task in ms during the search, the summary shown)."""
    page.evaluate("window.__mme.longest = 0")
    n = page.evaluate("window.__mme.searches")
    t0 = page.evaluate("() => { const t = performance.now(); document.querySelector('button.mme-find').click(); return t; }")
    page.wait_for_function(f"() => window.__mme.searches > {n}", timeout=120_000)
    t1 = page.evaluate("performance.now()")
    return t1 - t0, page.evaluate("window.__mme.longest"), page.inner_text(".mme-layouts p")


def timeline(page, presets=("kimi-k2", "deepseek-v3"), repeats: int = 5) -> list[tuple[str, float, float, int]]:
    """Per preset: (name, median ms to draw the timeline and breakdown to the next frame, median ms of the
    Python "timeline" request, points drawn). DeepSeek-V3 last: the page is left as the cold load opened it."""
    out = []
    for name in presets:
        _calc(page, f"c.setState({{ preset: {name!r}, values: {{}}, gpu: c.state.gpu }})")
        page.wait_for_function(f"""() => {{ const c = document.querySelector('[data-mme-calculator]').calculator;
            return c.state.preset === {name!r} && c.timelineBox && c.timelineBox.dataset.state === 'done'; }}""",
                               timeout=120_000)
        draws, calls = [], []
        for _ in range(repeats):
            draws.append(page.evaluate("""async () => { const c = document.querySelector('[data-mme-calculator]').calculator;
                const t0 = performance.now(); window.mmeTimeline.draw(c); c.timelineBox.getBoundingClientRect();
                await new Promise((ok) => requestAnimationFrame(() => ok())); return performance.now() - t0; }"""))
            calls.append(page.evaluate("""async () => { const c = document.querySelector('[data-mme-calculator]').calculator;
                const t0 = performance.now(); await c.engine.call({ op: "timeline", state: c.state });
                return performance.now() - t0; }"""))
        points = _calc(page, "c.timeline.timeline.stages.reduce((n, s) => n + s.points.length, 0)")
        out.append((name, _med(draws), _med(calls), points))
    return out


def plan(page, runs: int = 3) -> list[tuple[str, str, float, int]]:
    """The "suggest" and "sweep" requests for each of PLAN_CASES, timed on the page from the request to Python's
    answer (median of ``runs``, after one untimed call): (case, request, ms, suggestions or points)."""
    script = """async (req) => {
      const e = document.querySelector("[data-mme-calculator]").calculator.engine;
      await e.call(req);
      const ms = [];
      let res;
      for (let i = 0; i < %d; i++) { const t0 = performance.now(); res = await e.call(req); ms.push(performance.now() - t0); }
      ms.sort((a, b) => a - b);
      const n = res.suggestions ? res.suggestions.length : (res.series || []).reduce((a, s) => a + s.points.length, 0);
      return [ms[Math.floor(ms.length / 2)], n];
    }""" % runs
    out = []
    for label, state in PLAN_CASES:
        for op in ("suggest", "sweep"):
            ms, n = page.evaluate(script, {"op": op, "state": state})
            out.append((label, op, ms, n))
            print(f"{op} {label}: {ms:.0f} ms", file=sys.stderr, flush=True)
    return out


def _fmt(ms: float, target: float) -> str:
    return f"{ms:8.1f} ms   (target <= {target:.0f} ms: {'ok' if ms <= target else 'MISSED'})"


def _med(xs) -> float:
    return statistics.median(xs)


def _cold_report(runs: list, catalogs: list, boot: dict, bares: list) -> None:
    shown, ready, first = ([r[k] for r in runs] for k in ("shown", "ready", "first"))
    print(f"Calculator speed, headless {CHROMIUM}, {os.cpu_count()} CPUs; snapshot: {boot.get('snapshot')}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"first numbers, ?preset=deepseek-v3 link (median of {len(shown)}):  {_fmt(_med(shown), TARGETS['preset'])}"
          f"   max {max(shown):.0f} ms")
    print(f"first numbers, ?hf={CATALOG_ID} link (median of {len(catalogs)}): "
          f"{_fmt(_med(catalogs), TARGETS['catalog'])}   max {max(catalogs):.0f} ms")
    print(f"Python ready (median of {len(ready)}):                          {_fmt(_med(ready), TARGETS['ready'])}"
          f"   runs: {', '.join(f'{x:.0f}' for x in ready)}")
    print(f"  boot inside the worker {boot.get('ms')} ms: {boot.get('phases')}")
    if bares:
        print(f"  Python ready on a bare page (the runtime alone, median of {len(bares)}): {_med(bares):8.1f} ms")
    print(f"cold start to first Python result (median of {len(first)}):    {_med(first):8.1f} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, help="an already built site (default: build one now)")
    ap.add_argument("--runs", type=int, default=10, help="cold loads to measure (median reported)")
    ap.add_argument("--changes", type=int, default=40, help="input changes to measure")
    ap.add_argument("--searches", type=int, default=5, help="layout searches to measure, one after another")
    ap.add_argument("--no-snapshot", action="store_true", help="build without the Pyodide memory snapshot")
    ap.add_argument("--cold-only", action="store_true", help="measure the cold starts only")
    ap.add_argument("--serve-dir", help=argparse.SUPPRESS)        # the server process (see serve())
    ap.add_argument("--port-file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_dir:
        _serve_forever(args.serve_dir, args.port_file)
        return 0
    tmp = None
    site = args.site
    if site is None:
        tmp = Path(tempfile.mkdtemp(prefix="mme-site-"))
        site = tmp / "site"
        build_site(site, snapshot=not args.no_snapshot)
    url, server, www = serve(site)
    from playwright.sync_api import sync_playwright
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            bares = [x for x in (bare(browser, url) for _ in range(args.runs)) if x is not None]
            runs, last = [], None
            for _ in range(args.runs):
                if last:
                    last["ctx"].close()
                last = cold(browser, url)
                runs.append(last)
                print(f"cold load: numbers at {last['shown']:.0f} ms, Python ready at {last['ready']:.0f} ms, "
                      f"first Python result at {last['first']:.0f} ms", file=sys.stderr, flush=True)
            catalogs = []
            for _ in range(args.runs):
                catalogs.append(catalog(browser, url))
                print(f"cold load of ?hf={CATALOG_ID}: numbers at {catalogs[-1]:.0f} ms", file=sys.stderr, flush=True)
            boot = last["boot"] or {}
            page = last["page"]
            if args.cold_only:
                last["ctx"].close()
                browser.close()
                _cold_report(runs, catalogs, boot, bares)
                return 0
            timelines = timeline(page)
            page.select_option("#mme-gpu", "H100-80GB")
            page.fill("#mme-q-training\\.world_size", "1024")
            page.wait_for_timeout(1000)
            searches = []
            for _ in range(args.searches):
                searches.append(find_layouts(page))
                print(f"find layouts: {searches[-1][0]:.0f} ms", file=sys.stderr, flush=True)
            planned = plan(page)
            timed = per_change(page, args.changes)
            warms = []
            for _ in range(3):
                warms.append(warm(page, url))
                print(f"warm navigation: {warms[-1]:.0f} ms", file=sys.stderr, flush=True)
            last["ctx"].close()
            browser.close()
    finally:
        server.shutdown()
        shutil.rmtree(www, ignore_errors=True)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    changes, python = [t for t, _ in timed], [p for _, p in timed]
    q = statistics.quantiles(changes, n=10) if len(changes) > 1 else changes
    _cold_report(runs, catalogs, boot, bares)
    print(f"change to render (median of {len(changes)}):                     {_med(changes):8.1f} ms   "
          f"p90 {_fmt(q[-1], TARGETS['change_p90'])}")
    print(f"  of which in Python (estimator.web.handle in the worker): median {_med(python):.1f} ms")
    s = [x[0] for x in searches]
    print(f"find layouts, DeepSeek-V3 on 1,024 H100s (median of {len(s)}):   {_fmt(_med(s), TARGETS['search'])}"
          f"   runs in order: {', '.join(f'{x:.0f}' for x in s)} (WebAssembly tiers up as it runs)")
    print(f"  longest main-thread task during the searches: {max(x[1] for x in searches):.0f} ms (the page stays responsive)")
    print(f"  {searches[-1][2]}")
    print(f"warm navigation back to the page (median of {len(warms)}):    {_fmt(_med(warms), TARGETS['warm'])}")
    for name, draw, call, points in timelines:
        print(f"draw the timeline and breakdown, {name} ({points:,} points):  {_fmt(draw, TARGETS['timeline'])}"
              f"   its Python request {call:.0f} ms")
    for label, op, ms, n in planned:
        what = f"{n} suggestions" if op == "suggest" else f"{n} points"
        print(f"{'make it fit' if op == 'suggest' else 'sweep':>11}, {label} ({what}): {_fmt(ms, TARGETS['plan'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
