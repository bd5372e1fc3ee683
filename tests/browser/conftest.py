"""Browser-test harness: build the site once, serve it on loopback, drive Debian's Chromium.

Fixtures (session-scoped unless noted):

- ``site_dir`` (``tests/conftest.py``): the site built by ``mkdocs build --strict``, once per session for the
  site tests and these (started in the background when the session is collected: ``tests/background.py``).
- ``site_url``: the site served by a local HTTP server under a sub-path (``http://127.0.0.1:PORT/sub/``),
  as a static host would serve it.
- ``browser``: Playwright's Chromium, launched from ``/usr/bin/chromium`` (never ``playwright install``).
- ``page`` (function-scoped): a fresh page that records console errors and every request; the test
  fails if a page logged an error or asked any host other than the local server.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SUBPATH = "mme"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".mjs": "text/javascript", ".js": "text/javascript"}

    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def site_url(site_dir, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("www")
    shutil.copytree(site_dir, root / SUBPATH)
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{SUBPATH}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: run scripts/setup.sh (installs Debian's chromium)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


class PageLog:
    def __init__(self):
        self.errors: list[str] = []
        self.requests: list[str] = []


@pytest.fixture
def page(browser, site_url):
    context = browser.new_context()
    pg = context.new_page()
    log = PageLog()
    pg.on("console", lambda msg: log.errors.append(msg.text) if msg.type == "error" else None)
    pg.on("pageerror", lambda exc: log.errors.append(str(exc)))
    pg.on("request", lambda req: log.requests.append(req.url))
    pg.log = log
    yield pg
    host = urlparse(site_url).netloc
    foreign = [u for u in log.requests if urlparse(u).scheme in ("http", "https") and urlparse(u).netloc != host]
    context.close()
    assert not foreign, f"requests left the site's origin: {foreign[:5]}"
    assert not log.errors, f"console errors: {log.errors[:5]}"
