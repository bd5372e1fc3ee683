"""Speed of the in-page calculator, measured in headless Chromium.

Builds the site (or takes ``--site DIR``), serves it on loopback under a sub-path as a static host
would, and drives Debian's Chromium (``/usr/bin/chromium``) with Playwright. It prints:

- **cold start**: a fresh browser context (empty caches) opening the calculator page, from navigation
  start to the first result computed by Python in the browser (the ``estimate:done`` event);
- **warm navigation**: from a click on the "Calculator" link on another page of the same tab (Material's
  instant navigation, Python already running) to the next ``estimate:done``;
- **per change**: from an input event on a form field to the next animation frame after the updated
  table was rendered (and the part of it spent in Python).

Targets (issue 5): cold <= 2.5 s, warm <= 0.3 s, per change <= 50 ms. ``--no-snapshot`` builds the
site without the build-time Pyodide memory snapshot, to measure what that lever is worth.

    .venv/bin/python benchmarks/calculator.py [--site DIR] [--runs 3] [--changes 20] [--no-snapshot]
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update"]
TARGETS = {"cold": 2500.0, "warm": 300.0, "change": 50.0}

# Records, in the page, when each Python-computed estimate was rendered.
INIT_SCRIPT = """
window.__mme = { done: [] };
document.addEventListener("estimate:done", (e) => window.__mme.done.push(performance.now()), true);
"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".mjs": "text/javascript", ".js": "text/javascript"}

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):     # a page left while loading: not news
            super().handle_error(request, client_address)


def build_site(out: Path, snapshot: bool) -> None:
    env = {**os.environ, "MME_PYODIDE_SNAPSHOT": "1" if snapshot else "0", "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("mkdocs build failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])


def serve(site: Path) -> tuple[str, http.server.ThreadingHTTPServer, Path]:
    """Serve a copy of ``site`` under ``/sub/``, its sitemap rewritten as if ``site_url`` were that address.

    Material's instant navigation only follows links listed in ``sitemap.xml``, matched by host, port and
    path, so a site deployed at its ``site_url`` navigates instantly; the copy served here does too.
    """
    www = Path(tempfile.mkdtemp(prefix="mme-bench-"))
    shutil.copytree(site, www / "sub")
    server = _Server(("127.0.0.1", 0), functools.partial(_Handler, directory=str(www)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/sub/"
    pages = sorted(p.parent.relative_to(www / "sub").as_posix() for p in (www / "sub").rglob("index.html"))
    locs = "".join(f"<url><loc>{url}{'' if p == '.' else p + '/'}</loc></url>" for p in pages)
    (www / "sub" / "sitemap.xml").write_text('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns='
                                           f'"http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>')
    return url, server, www


def _wait_done(page, count: int) -> float:
    page.wait_for_function(f"() => window.__mme && window.__mme.done.length >= {count}", timeout=60_000)
    return page.evaluate(f"window.__mme.done[{count - 1}]")


def cold(browser, url: str) -> tuple[float, dict]:
    ctx = browser.new_context()
    page = ctx.new_page()
    page.add_init_script(INIT_SCRIPT)
    page.goto(url + "calculator/")
    t = _wait_done(page, 1)
    boot = page.evaluate("document.querySelector('[data-mme-calculator]').calculator.engine.boot")
    return t, {"page": page, "ctx": ctx, "boot": boot}


def warm(page, url: str) -> float:
    """Navigate away with an instant-navigation link, then click back to the calculator."""
    find = "(away) => [...document.querySelectorAll('a.md-nav__link[href]')].find((a) => " \
           "a.href.includes('/calculator/') !== away)"
    page.evaluate(f"({find})(true).click()")
    page.wait_for_function("() => !document.querySelector('[data-mme-calculator]')", timeout=30_000)
    n = page.evaluate("window.__mme.done.length")
    t0 = page.evaluate(f"() => {{ const t = performance.now(); ({find})(false).click(); return t; }}")
    return _wait_done(page, n + 1) - t0


def per_change(page, changes: int) -> list[float]:
    script = """async (value) => {
      const input = document.getElementById("mme-training.micro_batch_size");
      const res = document.querySelector(".mme-results");
      const done = new Promise((ok) => {
        res.addEventListener("estimate:done", ok, { once: true });
        res.addEventListener("estimate:error", ok, { once: true });
      });
      const t0 = performance.now();
      input.value = String(value);
      input.dispatchEvent(new Event("input", { bubbles: true }));
      await done;
      await new Promise((ok) => requestAnimationFrame(() => ok()));
      const python = document.querySelector("[data-mme-calculator]").calculator.engine.pythonMs;
      return [performance.now() - t0, python];
    }"""
    return [page.evaluate(script, (1, 2, 4, 8)[i % 4]) for i in range(changes)]   # all valid for the default


def _fmt(ms: float, target: float) -> str:
    return f"{ms:8.1f} ms   (target <= {target:.0f} ms: {'ok' if ms <= target else 'MISSED'})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, help="an already built site (default: build one now)")
    ap.add_argument("--runs", type=int, default=3, help="cold starts to measure (median reported)")
    ap.add_argument("--changes", type=int, default=20, help="input changes to measure")
    ap.add_argument("--no-snapshot", action="store_true", help="build without the Pyodide memory snapshot")
    args = ap.parse_args(argv)
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
            colds, last = [], None
            for _ in range(args.runs):
                if last:
                    last["ctx"].close()
                t, last = cold(browser, url)
                colds.append(t)
                print(f"cold start: {t:.0f} ms", file=sys.stderr, flush=True)
            boot = last["boot"] or {}
            warms = []
            for _ in range(3):
                warms.append(warm(last["page"], url))
                print(f"warm navigation: {warms[-1]:.0f} ms", file=sys.stderr, flush=True)
            timed = per_change(last["page"], args.changes)
            changes, python = [t for t, _ in timed], [p for _, p in timed]
            last["ctx"].close()
            browser.close()
    finally:
        server.shutdown()
        shutil.rmtree(www, ignore_errors=True)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"Calculator speed, headless {CHROMIUM}, {os.cpu_count()} CPUs; snapshot: {boot.get('snapshot')}")
    print(f"cold start to first Python result (median of {len(colds)}):  {_fmt(statistics.median(colds), TARGETS['cold'])}"
          f"   runs: {', '.join(f'{c:.0f}' for c in colds)}")
    print(f"  worker created at {boot.get('created', 0):.0f} ms, Python ready at {boot.get('readyAt', 0):.0f} ms "
          f"(boot inside the worker {boot.get('ms')} ms: {boot.get('phases')})")
    print(f"warm navigation back to the page (median of {len(warms)}):  {_fmt(statistics.median(warms), TARGETS['warm'])}"
          f"   runs: {', '.join(f'{w:.0f}' for w in warms)}")
    q = statistics.quantiles(changes, n=10) if len(changes) > 1 else changes
    print(f"input change to updated table (median of {len(changes)}):   {_fmt(statistics.median(changes), TARGETS['change'])}"
          f"   p90 {q[-1]:.1f} ms, max {max(changes):.1f} ms")
    print(f"  of which in Python (estimator.web.handle in the worker): median {statistics.median(python):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
