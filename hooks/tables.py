"""MkDocs hook: every number on the site is computed by ``estimator`` at build time.

A page asks for generated content with a marker, an HTML comment that is invisible if the hook is
missing::

    <!-- estimator:config-reference -->
    <!-- estimator:preset-page name=llama-3-8b -->
    <!-- estimator:example preset=llama-2-7b gpu=a100-40gb
    parallelism: {tensor_model_parallel_size: 2}
    training: {world_size: 8}
    -->

The first line holds the marker name and ``key=value`` arguments; the lines after it (if any) are a
YAML body. Each marker has a view in ``_tables_views`` that calls the estimator and returns the context
of a Jinja2 template in ``templates/``. An unknown marker, an unknown argument, a configuration the
estimator rejects or a leftover ``estimator:`` comment fails the build.

Besides the markers, :func:`on_files` adds one generated page per preset (``models/<name>.md``) and the
model catalog (``models/catalog.md``), and :func:`on_config` lists them in the navigation under the
``models/index.md`` entry.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:            # the working tree's estimator, installed or not
    sys.path.insert(0, str(ROOT))
# `mkdocs serve` re-executes this hook on every rebuild: drop the modules it imported last time, so
# edits to the helpers below (and, when serving, to the estimator) show up without a restart.
_SERVING = sys.argv[1:2] == ["serve"]
for _name in [n for n in sys.modules if n.startswith("_tables_")
              or (_SERVING and (n == "estimator" or n.startswith("estimator.")))]:
    del sys.modules[_name]

import _tables_views as views  # noqa: E402  (helper beside this hook)

MARKER = re.compile(r"<!--\s*estimator:(?P<name>[A-Za-z0-9_-]*)(?P<args>[^\n]*?)(?:\n(?P<body>.*?))?-->", re.S)
ARG = re.compile(r'\s*([a-z_]+)=("[^"]*"|\S+)')
LEFTOVER = re.compile(r"<!--\s*estimator\b|\{\{\s*estimator")
MODELS_INDEX = "models/index.md"
CATALOG = "models/catalog.md"
log = logging.getLogger("mkdocs.hooks.tables")
_stats = {"markers": 0, "seconds": 0.0}


def _parse_args(name: str, text: str, page: str) -> dict[str, str]:
    args, pos = {}, 0
    text = text.rstrip()
    while pos < len(text):
        m = ARG.match(text, pos)
        if not m:
            raise PluginError(f"{page}: marker estimator:{name}: cannot parse arguments {text[pos:].strip()!r} "
                              "(expected key=value pairs)")
        value = m.group(2)
        args[m.group(1)] = value[1:-1] if value.startswith('"') else value
        pos = m.end()
    return args


def render_markers(markdown: str, page: str) -> str:
    """Replace every marker of a page's Markdown with its rendered template (raises PluginError)."""

    def replace(m: re.Match) -> str:
        name = m.group("name")
        args = _parse_args(name, m.group("args") or "", page)
        body = m.group("body")
        _stats["markers"] += 1
        try:
            out = views.render(name, args, body)
        except views.MarkerError as exc:
            raise PluginError(f"{page}: marker estimator:{name}: {exc}") from None
        # A marker alone on a line indented inside a block (a folded `???` section) indents its output alike.
        line_start = markdown.rfind("\n", 0, m.start()) + 1
        indent = markdown[line_start:m.start()]
        if indent and not indent.strip():
            out = "\n".join(indent + line if line.strip() and i else line for i, line in enumerate(out.split("\n")))
        return out

    out = MARKER.sub(replace, markdown)
    left = LEFTOVER.search(out)
    if left:
        line = out.count("\n", 0, left.start()) + 1
        raise PluginError(f"{page}: line {line}: malformed estimator marker {out[left.start():left.start() + 60]!r}")
    return out


def on_config(config):
    """List the catalog and the generated preset pages in the navigation, under the entry of models/index.md."""
    pages = [{"Model catalog": CATALOG}] + [{title: f"models/{name}.md"} for name, title in views.preset_titles()]

    def expand(items):
        out = []
        for item in items or []:
            if isinstance(item, dict):
                (title, value), = item.items()
                if value == MODELS_INDEX:
                    item = {title: [{"Overview": MODELS_INDEX}] + pages}
                elif isinstance(value, list):
                    item = {title: expand(value)}
            out.append(item)
        return out

    config.nav = expand(config.nav)
    return config


def on_files(files, config):
    """Add one page per preset and the catalog page: each is one marker, rendered like any other."""
    generated = [(f"models/{name}.md", f"preset-page name={name}") for name, _ in views.preset_titles()]
    for uri, marker in generated + [(CATALOG, "catalog-page")]:
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} exists, but it is a generated page: remove the file")
        files.append(File.generated(config, uri, content=f"<!-- estimator:{marker} -->\n"))
    return files


def on_page_markdown(markdown, page, config, files):
    start = time.perf_counter()
    out = render_markers(markdown, page.file.src_uri)
    if views.CALCULATOR_URL in out:           # a generated table's links to the calculator, relative to this page
        from mkdocs.utils import get_relative_url
        calculator = files.get_file_from_path("calculator.md")
        if calculator is None:
            raise PluginError(f"{page.file.src_uri}: links to the calculator, but docs/calculator.md is missing")
        out = out.replace(views.CALCULATOR_URL, get_relative_url(calculator.url, page.url) or "./")
    _stats["seconds"] += time.perf_counter() - start
    return out


def on_post_build(config):
    log.info("estimator tables: %d markers rendered in %.2f s", _stats["markers"], _stats["seconds"])
    _stats.update(markers=0, seconds=0.0)
