"""MkDocs hook: the site's Content-Security-Policy, its footer, and room for wide tables.

- **Content-Security-Policy** (a ``<meta http-equiv>`` tag, so that it holds on any static host and on
  ``file://``): scripts only from the site itself, no inline script and no inline event handler. The few
  inline scripts Material writes into every page (its storage helpers, the palette switch) are moved into
  files under ``assets/javascripts/inline/``, named by their content's hash. The calculator needs
  ``'wasm-unsafe-eval'`` (Pyodide compiles its WebAssembly) and workers from the site (``worker-src 'self'``;
  ``blob:`` where the offline bundle builds its worker from a Blob). Under ``mkdocs serve`` the live-reload
  script MkDocs injects is inline, so that policy also allows inline scripts; built sites never do.
- **Where it is served**: ``site-address.js``, first in every page's head, rewrites the sitemap's addresses
  (written with ``site_url``) to wherever the site is served, as Material's instant navigation reads them:
  Material only puts the page's host name on them, not its port or path, so any other address made every
  link a full page load (and restarted the calculator's Python).
- **Footer**: the package version and, when ``extra.repository`` (or ``repo_url``) names the project's
  repository, a link to it. Material's own ``repo_url`` widget is not used: it asks GitHub's API for
  stars, and this site makes no request to another host.
- **Wide tables**: a page whose generated tables have nine columns or more hides the table-of-contents
  sidebar, so that the answer columns (allocated, reserved, on device; measured, estimated, error) are
  not clipped at laptop widths.
- **Search index**: the generated tables of numbers and the charts (their labels are numbers too) are
  marked ``data-search-exclude``: words are what the site search finds, and those numbers were a third of
  the index, which every page's search worker builds while the calculator starts Python.
"""

from __future__ import annotations

import hashlib
import html
import logging
import posixpath
import re
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
INLINE_DIR = "assets/javascripts/inline"
SITE_ADDRESS = "assets/javascripts/site-address.js"
log = logging.getLogger("mkdocs.hooks.site")

_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.S)
_HANDLER = re.compile(r"<[a-zA-Z][^>]*\son[a-z]+\s*=", re.S)
_WIDE_COLUMNS = 9
#: Generated tables of numbers (``data-table`` kinds), left out of the search index with the charts.
_NUMERIC_TABLES = ("search", "validation-ci", "validation-ci-excluded", "validation", "validation-summary",
                   "validation-project", "stages", "grid", "breakdown", "fit", "params", "published", "compare")
_UNSEARCHED = re.compile(r'<(?:table data-table="(?:' + "|".join(_NUMERIC_TABLES) + r')"|svg)(?=[\s>])')
_state: dict = {"serve": False}


def policy(*, serve: bool = False, offline: bool = False) -> str:
    """The Content-Security-Policy of every page."""
    self_ = "'self' file:" if offline else "'self'"
    script = f"{self_} 'wasm-unsafe-eval'" + (" blob:" if offline else "") + (" 'unsafe-inline'" if serve else "")
    return "; ".join([
        f"default-src {self_}", f"script-src {script}", f"worker-src {self_} blob:", f"connect-src {self_}",
        f"img-src {self_} data:", f"style-src {self_} 'unsafe-inline'", f"font-src {self_} data:",
        "object-src 'none'", "base-uri 'self'", "form-action 'self'",
    ])


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def on_startup(command, dirty):
    _state["serve"] = command == "serve"


def _offline(config) -> bool:
    plugin = config.plugins.get("material/offline") or config.plugins.get("offline")
    return bool(plugin and plugin.config.enabled)


def on_config(config):
    repo = (config.extra or {}).get("repository") or config.repo_url
    parts = [f"Megatron Memory Estimator {html.escape(version())}"]
    if repo:
        parts.append(f'<a href="{html.escape(repo, quote=True)}">source repository</a>')
    parts.append("every number computed by the estimator when this site was built")
    config.copyright = " · ".join(parts)
    _state["offline"] = _offline(config)
    return config


def _wide(content: str) -> bool:
    for head in re.findall(r"<table[^>]*data-table[^>]*>.*?<thead>(.*?)</thead>", content, re.S):
        if head.count("<th") >= _WIDE_COLUMNS:
            return True
    return False


def unsearched(content: str) -> str:
    """``content`` with its generated number tables and its charts marked ``data-search-exclude``."""
    return _UNSEARCHED.sub(lambda m: m.group(0) + " data-search-exclude", content)


def on_page_content(content, page, config, files):
    content = unsearched(content)
    if _wide(content):
        hide = list(page.meta.get("hide") or [])
        if "toc" not in hide:
            page.meta["hide"] = [*hide, "toc"]
    return content


def _externalize(output: str, prefix: str, site_dir: str) -> str:
    """Move each inline script into a file named by its hash; add the policy after <meta charset>."""
    def repl(m: re.Match) -> str:
        attrs, body = m.group("attrs"), m.group("body")
        if "src=" in attrs or "application/json" in attrs or not body.strip():
            return m.group(0)
        name = hashlib.sha256(body.encode()).hexdigest()[:16] + ".js"
        path = Path(site_dir) / INLINE_DIR / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
        return f'<script{attrs} src="{prefix}{INLINE_DIR}/{name}"></script>'
    out = _SCRIPT.sub(repl, output)
    meta = (f'<meta http-equiv="Content-Security-Policy" content="'
            f'{policy(serve=_state["serve"], offline=_state.get("offline", False))}">')
    # The sitemap's addresses made the served copy's own before Material reads them (site-address.js)
    meta += f'\n    <script src="{prefix}{SITE_ADDRESS}"></script>'
    out, n = re.subn(r"(<meta charset=[^>]*>)", lambda m: m.group(1) + "\n    " + meta, out, count=1)
    if not n:
        out = out.replace("<head>", "<head>\n    " + meta, 1)
    if _HANDLER.search(out):
        where = _HANDLER.search(out).group(0)[:80]
        raise PluginError(f"inline event handler in the page ({where}...): the Content-Security-Policy forbids it")
    return out


def on_post_page(output, page, config):
    depth = page.url.count("/") if config.use_directory_urls else posixpath.dirname(page.url).count("/") + bool(
        posixpath.dirname(page.url))
    prefix = "../" * depth
    return _externalize(output, prefix, config.site_dir)


def on_post_template(output_content, template_name, config):
    if not template_name.endswith(".html"):
        return output_content
    base = urlsplit(config.site_url or "/").path or "/"      # the 404 page is served at any depth
    return _externalize(output_content, base if base.endswith("/") else base + "/", config.site_dir)
