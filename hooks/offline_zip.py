"""MkDocs hook: the offline bundle as a download, a zip the calculator page links to ("use it without network").

The offline bundle is the whole site built for ``file://`` (``mkdocs.offline.yml``: no server, no network, no
browser flags; see ``hooks/runtime.py``). After the site is built, :func:`on_post_build` builds that bundle
in a child process (``python -m mkdocs build -f mkdocs.offline.yml``, as strict as this build, the same
caches) and writes it as one zip, :data:`ZIP_PATH` under the site, with every entry under one folder
(:data:`FOLDER`): unzip it and open ``calculator.html``.

The zip is reproducible: entries in sorted order, each stamped with the build's ``SOURCE_DATE_EPOCH`` (the
last commit's time, set by ``hooks/build_date.py``; at least 1980-01-01, the first date a zip can hold),
mode 0644 (0755 for folders), deflated at a fixed level, no extra fields; so two builds of one commit give
the same bytes.

The ``<!-- offline:download -->`` marker of a page becomes the link to the zip (its size in MB, 10^6 bytes).
In the offline bundle itself, and under ``mkdocs serve`` (which does not build the bundle: it takes half a
minute, on every rebuild), it becomes a sentence saying so. ``MME_OFFLINE_ZIP=0`` skips the bundle (the marker
says how to build it), ``MME_OFFLINE_ZIP=1`` builds it under ``mkdocs serve`` too. Any other ``offline:`` marker
fails the build.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!--\s*offline:(?P<name>[\w-]*)\s*-->")
FOLDER = "megatron-memory-estimator-offline"
ZIP_PATH = f"downloads/{FOLDER}.zip"
#: The earliest time a zip entry can carry (1980-01-01 00:00:00 UTC).
ZIP_EPOCH = 315532800
BUILD_HINT = "mkdocs build -f mkdocs.offline.yml --site-dir site-offline"
_state: dict = {"serve": False}


class OfflineBundleError(PluginError):
    """The offline bundle could not be built or zipped: the site build stops."""


def _offline(config) -> bool:
    plugin = config.plugins.get("material/offline") or config.plugins.get("offline")
    return bool(plugin and plugin.config.enabled)


def _wanted(config) -> bool:
    """Whether this build makes the zip: not the offline bundle itself; ``MME_OFFLINE_ZIP`` decides when set,
    else every build but ``mkdocs serve``'s."""
    if _offline(config):
        return False
    flag = os.environ.get("MME_OFFLINE_ZIP")
    return flag != "0" if flag is not None else not _state["serve"]


def on_startup(command, dirty):
    _state["serve"] = command == "serve"


def on_page_content(content, page, config, files):
    names = [m.group("name") for m in MARKER.finditer(content)]
    if not names:
        return content
    unknown = sorted(set(names) - {"download"})
    if unknown:
        raise PluginError(f"{page.file.src_uri}: unknown marker offline:{unknown[0]} (known: offline:download)")
    if _offline(config):
        text = ("<p class=\"mme-offline-note\">This is the offline bundle: it runs from disk, with no network.</p>")
    elif not _wanted(config):
        text = (f"<p class=\"mme-offline-note\">The offline bundle is not part of this build; build it with "
                f"<code>{BUILD_HINT}</code> and open <code>site-offline/calculator.html</code>.</p>")
    else:
        depth = page.url.count("/")          # "calculator/": one folder down
        text = (f'<p class="mme-offline"><a class="md-button" href="{"../" * depth}{ZIP_PATH}" download>'
                f'Download the offline bundle</a> <span data-offline-size></span></p>')
        _state["pages"] = _state.get("pages", []) + [page.file.dest_uri]
    return MARKER.sub(lambda m: text, content)


def source_epoch() -> int:
    """The time every zip entry carries: SOURCE_DATE_EPOCH, no earlier than 1980."""
    try:
        epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    except ValueError:
        epoch = 0
    return max(epoch, ZIP_EPOCH)


def write_zip(tree: Path, out: Path, folder: str = FOLDER, epoch: int | None = None) -> int:
    """Zip every file of ``tree`` under ``folder/`` into ``out``, reproducibly (see the module docstring);
    returns the zip's size in bytes."""
    stamp = time.gmtime(source_epoch() if epoch is None else max(epoch, ZIP_EPOCH))[:6]
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = sorted(p for p in tree.rglob("*") if p.is_file() or p.is_dir())
    with zipfile.ZipFile(out, "w") as zf:
        for path in paths:
            rel = path.relative_to(tree).as_posix()
            if path.is_dir():
                info = zipfile.ZipInfo(f"{folder}/{rel}/", date_time=stamp)
                info.external_attr = (0o40755 << 16) | 0x10
                zf.writestr(info, b"")
                continue
            info = zipfile.ZipInfo(f"{folder}/{rel}", date_time=stamp)
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            zf.writestr(info, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)
    return out.stat().st_size


def build_bundle(into: Path, strict: bool) -> None:
    """Build the offline bundle into ``into`` with ``mkdocs.offline.yml`` in a child process."""
    cmd = [sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(ROOT / "mkdocs.offline.yml"),
           "--site-dir", str(into)] + (["--strict"] if strict else [])
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise OfflineBundleError("the offline bundle's build failed:\n" + (proc.stdout + proc.stderr)[-3000:])


def on_post_build(config):
    if not _wanted(config):
        return
    site = Path(config.site_dir)
    with tempfile.TemporaryDirectory(prefix="mme-offline-") as tmp:
        build_bundle(Path(tmp) / "site", bool(config.strict))
        size = write_zip(Path(tmp) / "site", site / ZIP_PATH)
    # The link says how large the download is (the page was written before the zip existed).
    for dest in _state.pop("pages", []):
        page = site / dest
        if page.is_file():
            html = page.read_text(encoding="utf-8")
            page.write_text(html.replace("<span data-offline-size></span>",
                                         f"<span data-offline-size>({size / 1e6:.0f} MB zip)</span>"), encoding="utf-8")
