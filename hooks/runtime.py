"""MkDocs hook: the calculator's Python runtime, built into the site.

The calculator page (``docs/calculator.md``) runs the very ``estimator`` package the CLI runs, in the
browser, through Pyodide. This hook puts everything it needs into the built site, under
``assets/calculator/runtime/``, and nothing else:

- the Pyodide runtime from the ``pyodide`` package of the npm registry, fetched with ``urllib``,
  pinned by version and by npm's ``dist.integrity`` (sha512 of the tarball), cached outside the
  tracked tree (``<repo>/.cache/npm/``), verified on every build, and cut down to the four files a
  stdlib-only interpreter needs (``pyodide.mjs``, ``pyodide.asm.mjs``, ``pyodide.asm.wasm``,
  ``python_stdlib.zip``; the package lock is replaced by an empty inline one);
- the ``estimator`` package as a real wheel built from the source tree (presets included as
  ``estimator._presets``, as ``pyproject.toml`` maps them), installed in the browser by unpacking it
  into site-packages, without micropip;
- a Pyodide memory snapshot taken after ``import estimator.web`` (made with Node.js when it is on the
  PATH; without it the page boots Python from scratch, slower but the same), byte for byte the same on
  every build: it is made with a fixed clock and a fixed entropy stream. Half of Python's memory is zero
  pages, so the file holds only the others (``sparse_snapshot``), gzipped: the page inflates 16 MB instead
  of 31 and writes them into a zeroed buffer;
- the first numbers of every short link to a catalog model (``calculator/?hf=ID``), as the page's Python will
  give them (:func:`estimator.web.protocol.catalog_precomputed`), one small file per id under
  ``assets/calculator/hf/`` named as the catalog names its files (``Qwen--Qwen3-30B-A3B.json``), which the page
  fetches only for such a link and shows, marked as precomputed, until Python has answered (about 12 kB each,
  4 kB gzipped; computed once per change of the estimator: cached like the snapshot). The offline bundle has
  them as classic scripts (``.js``), which ``file://`` allows where it refuses ``fetch()``;
- for an offline bundle (Material's ``offline`` plugin, ``mkdocs.offline.yml``): the same files as
  gzip+base64 classic scripts, because Chromium refuses ``fetch()`` and module workers on ``file://``,
  and the ``iframe-worker`` shim the offline plugin would otherwise load from unpkg.com.

The ``<!-- calculator:app -->`` marker of a page becomes the calculator's root element holding the
boot data as JSON: the form schema, the presets, the GPUs and the default preset's estimate, all
computed here by ``estimator.web`` (no field list is written by hand). A failed or tampered download
is a build error; nothing else touches the network.

Environment variables:

``MME_PYODIDE_TARBALL`` / ``MME_PYODIDE_DIR``
    a local ``pyodide-<version>.tgz`` (checked against the pinned integrity) or a directory holding
    the unpacked runtime files (each checked against its pinned sha256): air-gapped builds.
``MME_IFRAME_WORKER_TARBALL`` / ``MME_IFRAME_WORKER_DIR``
    the same for the offline bundle's ``iframe-worker`` shim.
``MME_CACHE_DIR``  the download and snapshot cache (default ``<repo>/.cache``).
``MME_PYODIDE_SNAPSHOT=0``  no memory snapshot. ``MME_NODE``: the Node.js binary that makes it.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import logging
import os
import posixpath
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:            # the working tree's estimator, installed or not
    sys.path.insert(0, str(ROOT))

log = logging.getLogger("mkdocs.hooks.runtime")


@dataclass(frozen=True)
class NpmPin:
    """One npm package pinned by version and integrity, and the files the site takes from it (sha256)."""

    name: str
    version: str
    integrity: str                 # npm's dist.integrity of the tarball: "sha512-<base64>"
    files: dict                    # path inside the package -> sha256 hex

    @property
    def url(self) -> str:
        return f"https://registry.npmjs.org/{self.name}/-/{self.name}-{self.version}.tgz"

    @property
    def env(self) -> str:
        return "MME_" + re.sub(r"\W", "_", self.name).upper()


# `npm view pyodide@314.0.7 dist`: Python 3.14.2 (inside the core's 3.11-3.14), whose stdlib zip holds
# every module the core imports.
PYODIDE = NpmPin("pyodide", "314.0.7",
                 "sha512-0YvXxEhfEdpLfb/XkM2BFAeMROq0iMUX2bzzH9pOttyMcWkwq+HbE5uyuGD82LN7y2q+SNvi/6V5JEsOlD2R1A==", {
                     "pyodide.mjs": "6f1d60f7bf529beb300f0f47983c921d3982363640ba20af0e38efdddbc66109",
                     "pyodide.asm.mjs": "f7cdc8ece80678ceb712f8e65ebe6d3a83203a180c399865f49612a051693635",
                     "pyodide.asm.wasm": "cc36e3cab04fdfc9a63ff13eb52eae2b911bf46c025cc7b281f394bd3de1d5e6",
                     "python_stdlib.zip": "fa1957e5777068fc4f7437f96d860ae2fbe9c19732ba06c84e004ec16dd7dd7a",
                     "pyodide-lock.json": "5dc2fc119108bc148c7457dc86e7675b5c87e1cafd420b9c34c1eaef7b36c010",
                 })
# Material's offline plugin runs the search worker in an iframe on file:// with this shim.
IFRAME_WORKER = NpmPin("iframe-worker", "1.0.4",
                       "sha512-roeaaI+Lg1LJNfgpCjoRe/+WzEjy9+Z08LoEvu85MCPbBjwm+qXz8Ag5U05lHa6V1CysZyGzE0SOkAtSUA5q7Q==",
                       {"shim/index.js": "e8e412dbcfea9b7e31b5ffa288d7b6035915e714c542f4176a0cdbe262fc9609"})

RUNTIME_DIR = "assets/calculator/runtime"
#: The short links' first numbers, one file per catalog id (:func:`hf_files`).
HF_DIR = "assets/calculator/hf"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
SHIM_PATH = "assets/vendor/iframe-worker/shim.js"
NATIVE_WORKER_JS = "assets/calculator/native-worker.js"
#: The page's scripts, in load order: the link to Python, the results, the form, the calculator.
SCRIPTS = ("assets/calculator/engine.js", "assets/calculator/render.js", "assets/calculator/form.js",
           "assets/calculator/timeline.js", "assets/calculator/suggest.js", "assets/calculator/sweep.js",
           "assets/calculator/search_options.js", "assets/calculator/compare.js", "assets/calculator/calculator.js")
STYLE = "assets/calculator/calculator.css"
#: Material's search worker, started on the calculator page by this stand-in only once Python runs.
SEARCH_WORKER_JS = "assets/calculator/search-worker.js"
#: Material's own script, loaded on the calculator page by this one once Python has drawn its first estimate.
MATERIAL_LATE_JS = "assets/calculator/material-late.js"
_MATERIAL_BUNDLE = re.compile(r'<script src="(?P<src>(?:\.\./)*assets/javascripts/bundle\.[\w.]+\.js)"></script>')
_MATERIAL_SEARCH = re.compile(r'"search": "(?P<prefix>(?:\.\./)*)(?P<path>assets/javascripts/workers/search\.[\w.]+\.js)"')
MARKER = re.compile(r"<!--\s*calculator:(?P<name>[\w-]*)\s*-->")
# Python run in the browser and by Node for the snapshot: unpack the wheel into site-packages (no
# micropip); then, for the snapshot only, import everything a request may need so that the snapshot holds it.
INSTALL_PY = ("import sys, zipfile\nzipfile.ZipFile('/tmp/estimator.whl').extractall("
              "next(p for p in sys.path if p.endswith('site-packages')))\n")
WARM_PY = "import estimator.web\nestimator.web.warm()\n"


class RuntimeBuildError(PluginError):
    """The runtime could not be fetched, verified or built: the site build stops."""


# ---------------------------------------------------------------- fetch and verify


def check_integrity(data: bytes, integrity: str, what: str) -> None:
    """Raise unless ``data`` matches an npm ``sha512-<base64>`` integrity string."""
    algo, _, expected = integrity.partition("-")
    if algo != "sha512" or not expected:
        raise RuntimeBuildError(f"{what}: unsupported integrity {integrity!r} (expected sha512-<base64>)")
    actual = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if actual != expected:
        raise RuntimeBuildError(f"{what} failed its integrity check: expected sha512-{expected}, got "
                                f"sha512-{actual}. The download is corrupt or was tampered with; nothing "
                                "was used.")


def _check_file(pin: NpmPin, name: str, data: bytes, where: str) -> bytes:
    actual = hashlib.sha256(data).hexdigest()
    if actual != pin.files[name]:
        raise RuntimeBuildError(f"{where}: {name} of {pin.name} {pin.version} has sha256 {actual}, expected "
                                f"{pin.files[name]} (wrong version or tampered file)")
    return data


def _download(pin: NpmPin, urlopen) -> bytes:
    try:
        with urlopen(pin.url, timeout=120) as resp:
            return resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeBuildError(f"could not download {pin.url}: {exc}. For an air-gapped build, set "
                                f"{pin.env}_TARBALL to a local copy of {pin.name}-{pin.version}.tgz (or "
                                f"{pin.env}_DIR to a directory holding its files).") from None


def _unpack(pin: NpmPin, tarball: bytes, where: str) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        for name in pin.files:
            member = tar.extractfile("package/" + name)
            if member is None:
                raise RuntimeBuildError(f"{where}: package/{name} missing from {pin.name} {pin.version}")
            out[name] = _check_file(pin, name, member.read(), where)
    return out


def fetch_package(pin: NpmPin, cache_dir: Path, *, env=os.environ, urlopen=urllib.request.urlopen) -> dict:
    """The pinned files of ``pin`` as bytes: from ``<ENV>_DIR``, ``<ENV>_TARBALL``, the cache or npm."""
    local_dir, local_tgz = env.get(pin.env + "_DIR"), env.get(pin.env + "_TARBALL")
    if local_dir:
        base = Path(local_dir)
        out = {}
        for name in pin.files:
            path = base / name if (base / name).is_file() else base / "package" / name
            if not path.is_file():
                raise RuntimeBuildError(f"{pin.env}_DIR={local_dir}: {name} not found there")
            out[name] = _check_file(pin, name, path.read_bytes(), f"{pin.env}_DIR={local_dir}")
        return out
    if local_tgz:
        path = Path(local_tgz)
        if not path.is_file():
            raise RuntimeBuildError(f"{pin.env}_TARBALL={local_tgz}: no such file")
        data = path.read_bytes()
        check_integrity(data, pin.integrity, f"{pin.env}_TARBALL={local_tgz}")
        return _unpack(pin, data, str(path))
    cached = cache_dir / "npm" / f"{pin.name}-{pin.version}.tgz"
    if cached.is_file():
        data = cached.read_bytes()
        try:
            check_integrity(data, pin.integrity, f"cached {cached}")
            return _unpack(pin, data, str(cached))
        except RuntimeBuildError as exc:
            log.warning("%s; downloading it again", exc)
            cached.unlink()
    data = _download(pin, urlopen)
    check_integrity(data, pin.integrity, f"download of {pin.url}")
    files = _unpack(pin, data, pin.url)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(cached)
    return files


# ---------------------------------------------------------------- the estimator wheel

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def build_wheel(root: Path = ROOT) -> tuple[str, bytes]:
    """A py3-none-any wheel of ``estimator`` (presets as ``estimator._presets``), byte-for-byte reproducible."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    name, version = project["name"], project["version"]
    dist = re.sub(r"[-_.]+", "_", name)
    entries: list[tuple[str, bytes]] = []
    for src, dest in (("estimator", "estimator"), ("presets", "estimator/_presets")):
        for path in sorted((root / src).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".yaml", ".json"):
                entries.append((f"{dest}/{path.relative_to(root / src).as_posix()}", path.read_bytes()))
    info = f"{dist}-{version}.dist-info"
    entries.append((f"{info}/METADATA", (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                          f"Summary: {project.get('description', '')}\n"
                                          f"Requires-Python: {project.get('requires-python', '')}\n").encode()))
    entries.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: hooks/runtime.py\nRoot-Is-Purelib: true\n"
                                     b"Tag: py3-none-any\n"))
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},"
                     f"{len(d)}\n" for n, d in entries) + f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in entries:
            zi = zipfile.ZipInfo(n, _ZIP_DATE)
            zi.compress_type, zi.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            zf.writestr(zi, d)
    return f"{dist}-{version}-py3-none-any.whl", buf.getvalue()


# ---------------------------------------------------------------- memory snapshot (Node.js)

# The snapshot is a copy of Python's whole memory, so it is reproducible only if everything Python reads
# while it is made is: the clock (a fixed epoch, one millisecond per reading) and the entropy (a fixed
# pseudo-random stream, which also fixes the hash seed). The page restores it with its own clock and entropy.
_SNAPSHOT_JS = r"""
import nodeCrypto from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
let ticks = 0;
Date.now = () => 946684800000 + ++ticks;
performance.now = () => ++ticks;
let state = 0x9e3779b9;
const fill = (view) => {
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  for (let i = 0; i < bytes.length; i++) { state = (Math.imul(state, 1664525) + 1013904223) >>> 0; bytes[i] = state >>> 24; }
  return view;
};
globalThis.crypto.getRandomValues = fill;
nodeCrypto.randomFillSync = fill;
const env = process.env;
const { loadPyodide } = await import(pathToFileURL(env.MME_INDEX + "pyodide.mjs").href);
const py = await loadPyodide({ indexURL: env.MME_INDEX, lockFileContents: env.MME_LOCK, _makeSnapshot: true,
                               stdout: () => {}, stderr: (s) => console.error(s) });
py.FS.writeFile("/tmp/estimator.whl", readFileSync(env.MME_WHEEL));
py.runPython(env.MME_INSTALL);
py.runPython(env.MME_WARM);
writeFileSync(env.MME_OUT, py.makeMemorySnapshot());
"""


#: The snapshot file's layout (``sparse_snapshot``), part of the cache key.
SNAPSHOT_MAGIC = b"MMS1"
SNAPSHOT_PAGE = 4096


def sparse_snapshot(memory: bytes) -> bytes:
    """Python's memory without its zero pages: ``MMS1``, the memory's size, the number of runs, each run's
    offset and length (all u32, little-endian), then the runs' bytes one after the other. A run is a stretch of
    consecutive 4 KiB pages that are not all zero; everything outside the runs is zero. The page's worker
    (``worker.js``) reads it back as it inflates."""
    zero = bytes(SNAPSHOT_PAGE)
    runs, start = [], None
    for at in range(0, len(memory), SNAPSHOT_PAGE):
        page = memory[at:at + SNAPSHOT_PAGE]
        if page != zero[:len(page)]:
            start = at if start is None else start
        elif start is not None:
            runs.append((start, at - start))
            start = None
    if start is not None:
        runs.append((start, len(memory) - start))
    head = struct.pack(f"<4sII{2 * len(runs)}I", SNAPSHOT_MAGIC, len(memory), len(runs),
                       *(n for run in runs for n in run))
    return head + b"".join(memory[at:at + n] for at, n in runs)


def snapshot_size(snapshot_gz: bytes) -> int:
    """The memory size a gzipped sparse snapshot restores (its header's second field)."""
    head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(snapshot_gz, 8)
    magic, size = struct.unpack("<4sI", head)
    if magic != SNAPSHOT_MAGIC:
        raise RuntimeBuildError(f"memory snapshot: not a {SNAPSHOT_MAGIC.decode()} file (header {magic!r})")
    return size


def _node(env) -> str | None:
    if env.get("MME_PYODIDE_SNAPSHOT", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    return env.get("MME_NODE") or shutil.which("node")


def make_snapshot(files: dict, wheel: bytes, lock: str, cache_dir: Path, *, env=os.environ) -> bytes | None:
    """The gzipped memory snapshot of Pyodide with ``estimator.web`` imported, or None without Node.js."""
    node = _node(env)
    if not node:
        log.info("runtime: no memory snapshot (Node.js not found or MME_PYODIDE_SNAPSHOT=0): the calculator "
                 "boots Python from scratch")
        return None
    key = hashlib.sha256(b"\0".join([PYODIDE.integrity.encode(), wheel, lock.encode(), _SNAPSHOT_JS.encode(),
                                     INSTALL_PY.encode(), WARM_PY.encode(), SNAPSHOT_MAGIC])).hexdigest()[:24]
    cached = cache_dir / "snapshots" / f"{key}.bin.gz"
    if cached.is_file():
        os.utime(cached)                           # most recently used: kept by prune_snapshots
        return cached.read_bytes()
    with tempfile.TemporaryDirectory(prefix="mme-snapshot-") as tmp:
        index = Path(tmp) / "pyodide"
        index.mkdir()
        for name, data in files.items():
            (index / name).write_bytes(data)
        (Path(tmp) / "estimator.whl").write_bytes(wheel)
        out = Path(tmp) / "snapshot.bin"
        # The snapshot is Python's whole memory, so what Python reads of its environment while it is made must not
        # depend on the machine: Emscripten's tzset takes the time zone from Node's Date (TZ), and the locale
        # reaches it through LANG / LC_*. Both are fixed (UTC, C) so that a build in Tokyo gives the same bytes.
        run_env = {**{k: v for k, v in os.environ.items() if not k.startswith("LC_")}, "TZ": "UTC", "LANG": "C",
                   "LC_ALL": "C", "MME_INDEX": f"{index}/", "MME_LOCK": lock,
                   "MME_WHEEL": str(Path(tmp) / "estimator.whl"), "MME_INSTALL": INSTALL_PY, "MME_WARM": WARM_PY,
                   "MME_OUT": str(out)}
        try:
            proc = subprocess.run([node, "--input-type=module", "-e", _SNAPSHOT_JS], env=run_env, cwd=tmp,
                                  capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("runtime: memory snapshot not made (%s); set MME_PYODIDE_SNAPSHOT=0 to build without "
                        "it (the calculator then boots Python from scratch, ~5 s slower)", exc)
            return None
        if proc.returncode != 0 or not out.is_file():
            log.warning("runtime: memory snapshot failed (%s exited %s; Pyodide needs Node.js >= 18): %s. Set "
                        "MME_PYODIDE_SNAPSHOT=0 to build without it.", node, proc.returncode,
                        proc.stderr.strip()[-2000:])
            return None
        data = gzip.compress(sparse_snapshot(out.read_bytes()), 6, mtime=0)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.with_suffix(".part").write_bytes(data)
    cached.with_suffix(".part").replace(cached)
    prune_snapshots(cached.parent)
    return data


#: Snapshots kept in the cache: one is made for every change of the estimator (about 7 MB each), so without a
#: bound a developer's cache grows by hundreds of MB; a few let branches be switched back and forth.
SNAPSHOT_CACHE_KEEP = 4


def prune_snapshots(folder: Path, keep: int = SNAPSHOT_CACHE_KEEP) -> None:
    """Delete all but the ``keep`` most recently used snapshots of the cache folder."""
    files = sorted(folder.glob("*.bin.gz"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[keep:]:
        old.unlink(missing_ok=True)


# ---------------------------------------------------------------- the runtime, assembled


@dataclass(frozen=True)
class Runtime:
    """Every file the hook adds under ``assets/calculator/runtime/`` and the manifest the page reads."""

    files: dict        # file name -> bytes
    manifest: dict


def build_runtime(cache_dir: Path, *, env=os.environ, root: Path = ROOT) -> Runtime:
    pyodide = fetch_package(PYODIDE, cache_dir, env=env)
    info = json.loads(pyodide.pop("pyodide-lock.json"))["info"]
    lock = json.dumps({"info": info, "packages": {}}, separators=(",", ":"))
    wheel_name, wheel = build_wheel(root)
    snapshot = make_snapshot(pyodide, wheel, lock, cache_dir, env=env)
    files = {**pyodide, wheel_name: wheel}
    if snapshot:
        files["snapshot.bin.gz"] = snapshot
    manifest = {"pyodide": PYODIDE.version, "python": info.get("python"), "lock": lock, "wheel": wheel_name,
                "snapshot": "snapshot.bin.gz" if snapshot else None, "install_py": INSTALL_PY, "offline": None,
                "sizes": download_sizes(files),
                # the memory the snapshot restores (its header says it too; the worker reads that)
                "snapshot_bytes": snapshot_size(snapshot) if snapshot else None}
    return Runtime(files, manifest)


def download_sizes(files: dict) -> dict:
    """Bytes of each runtime file, for the page's download progress bar."""
    return {name: len(data) for name, data in sorted(files.items())}


def offline_payloads(files: dict) -> dict:
    """``offline/<name>.js`` classic scripts carrying each runtime file as base64 of its gzip."""
    out = {}
    for name, data in files.items():
        packed = data if name.endswith(".gz") else gzip.compress(data, 6, mtime=0)
        out[f"offline/{name}.js"] = (f'(self.MME_PAYLOAD=self.MME_PAYLOAD||{{}})[{json.dumps(name)}]='
                                     f'"{base64.b64encode(packed).decode()}";\n').encode()
    return out


# ---------------------------------------------------------------- the catalog's short links

#: Results kept in the cache, one file per change of the estimator (about 0.5 MB each).
HF_CACHE_KEEP = 4


def catalog_results(wheel: bytes, cache_dir: Path) -> tuple[dict, dict]:
    """:func:`estimator.web.protocol.catalog_precomputed` (every catalog id's first numbers, and the ids without
    them with the reason), cached by the wheel's bytes: the offline bundle's build and ``mkdocs serve``'s rebuilds
    reuse them (computing them takes some 8 s of one core)."""
    key = hashlib.sha256(b"hf-precomputed\0" + wheel).hexdigest()[:24]
    cached = cache_dir / "hf-precomputed" / f"{key}.json.gz"
    if cached.is_file():
        os.utime(cached)
        done, missing = json.loads(gzip.decompress(cached.read_bytes()))
        return done, missing
    from estimator.web.protocol import catalog_precomputed
    done, missing = catalog_precomputed()
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.with_suffix(".part").write_bytes(gzip.compress(json.dumps([done, missing]).encode(), 6, mtime=0))
    cached.with_suffix(".part").replace(cached)
    files = sorted(cached.parent.glob("*.json.gz"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[HF_CACHE_KEEP:]:
        old.unlink(missing_ok=True)
    return done, missing


def hf_file(hub_id: str) -> str:
    """The file of a catalog id's first numbers, named as the catalog names its files (``org--name``)."""
    if not _HUB_ID.fullmatch(hub_id):
        raise RuntimeBuildError(f"catalog id {hub_id!r}: not of the form org/name with letters, digits, '.', '-' "
                                "and '_' (the page could not name its file)")
    return hub_id.replace("/", "--")


def hf_files(done: dict, offline: bool) -> dict:
    """``{name: bytes}`` under :data:`HF_DIR`: each id's result as JSON, or in the offline bundle as a classic
    script that hands it to the page (``self.MME_HF[id]``), since ``file://`` refuses ``fetch()``."""
    out = {}
    for hub_id, res in sorted(done.items()):
        text = json.dumps(res, separators=(",", ":"))
        if offline:
            out[f"{hf_file(hub_id)}.js"] = f"(self.MME_HF=self.MME_HF||{{}})[{json.dumps(hub_id)}]={text};\n".encode()
        else:
            out[f"{hf_file(hub_id)}.json"] = text.encode()
    return out


def _catalog(config) -> tuple[dict, dict]:
    wheel_name, wheel = build_wheel(ROOT)
    got = _state.get("catalog")
    if got is None or got[0] != wheel:
        got = _state["catalog"] = (wheel, catalog_results(wheel, _cache_dir(config)))
    return got[1]


# ---------------------------------------------------------------- MkDocs events

_state: dict = {}


def _cache_dir(config) -> Path:
    base = os.environ.get("MME_CACHE_DIR")
    return Path(base) if base else Path(config.config_file_path).resolve().parent / ".cache"


def _offline(config) -> bool:
    plugin = config.plugins.get("material/offline") or config.plugins.get("offline")
    return bool(plugin and plugin.config.enabled)


def on_config(config):
    present = [str(s) for s in config.extra_javascript]
    for script in SCRIPTS:                           # classic scripts: module scripts fail on file://
        if script not in present:
            config.extra_javascript.append(script)
    if STYLE not in config.extra_css:
        config.extra_css.append(STYLE)
    offline = _offline(config)
    if offline:                          # vendor the offline plugin's shim; keep the native Worker first
        polyfills = [p for p in config.extra.get("polyfills", []) if "iframe-worker" not in str(p)]
        config.extra["polyfills"] = [NATIVE_WORKER_JS, *polyfills, SHIM_PATH]
        # Instant navigation cannot work on file://, and with it enabled Material completes document$
        # there before the page loads, so none of its components (search included) would start.
        features = config.theme.get("features") or []
        config.theme["features"] = [f for f in features if f != "navigation.instant"]
    key = (str(_cache_dir(config)), offline)
    if _state.get("key") != key:
        _state.clear()
        _state["key"] = key
    _state["offline"] = offline
    return config


def _runtime(config) -> Runtime:
    wheel_name, wheel = build_wheel(ROOT)
    rt = _state.get("runtime")
    if rt is None or rt.files.get(wheel_name) != wheel:
        rt = _state["runtime"] = build_runtime(_cache_dir(config))
    return rt


def on_page_content(content, page, config, files):
    names = [m.group("name") for m in MARKER.finditer(content)]
    if not names:
        return content
    unknown = sorted(set(names) - {"app"})
    if unknown:
        raise PluginError(f"{page.file.src_uri}: unknown marker calculator:{unknown[0]} (known: calculator:app)")
    from estimator import web
    rt = _runtime(config)
    manifest = dict(rt.manifest)
    if _state.get("offline"):
        manifest["offline"] = [f"offline/{name}.js" for name in sorted(rt.files)]
    boot = {**web.boot_data(), "runtime": manifest}
    # The catalog ids whose short link has no first numbers of the build's (usually none): the page waits for Python.
    boot["hf_not_precomputed"] = sorted(_catalog(config)[1])
    # Each preset's model page, relative to this page (works on any host and in the file:// bundle, where pages
    # end in .html): the calculator's "About this preset" link.
    pages = {p["name"]: files.get_file_from_path(f"models/{p['name']}.md") for p in boot["presets"]}
    boot["model_pages"] = {name: f.url_relative_to(page.file) for name, f in pages.items() if f is not None}
    root = (f'<div class="mme-calc" data-mme-calculator data-mme-boot=\'{boot_attribute(boot)}\'><noscript><p>The '
            'calculator runs Python in your browser and needs JavaScript; <code>python -m estimator estimate</code> '
            'gives the same numbers, and each model page shows them for its preset.</p></noscript></div>')
    # The page's own scripts right after its root: the precomputed numbers show as soon as the parser gets
    # here, before Material's scripts at the end of the page have loaded (they load there too, for instant
    # navigation from other pages; each script runs once).
    prefix = "../" * page.url.count("/")
    root += "".join(f'<script src="{prefix}{s}"></script>' for s in SCRIPTS[1:])
    return MARKER.sub(lambda m: root, content)


_SHIM_INLINE = ('<script>postMessage=${c};importScripts=${d};addEventListener("error",({error})=>{parent.dispatchEvent('
                'new ErrorEvent("error",{filename:"${e}",error}))})<\\/script>')


def csp_shim(shim: bytes) -> bytes:
    """The iframe-worker shim with its one inline script (the worker's globals, written into the iframe) loaded
    from a Blob URL instead, so that the offline bundle's Content-Security-Policy needs no 'unsafe-inline'."""
    text = shim.decode()
    if text.count(_SHIM_INLINE) != 1:
        raise RuntimeBuildError(f"{SHIM_PATH}: the iframe-worker shim changed; its inline script was not found")
    body = _SHIM_INLINE[len("<script>"):-len("<\\/script>")]
    blob = '<script src="${URL.createObjectURL(new Blob([`' + body + '`],{type:"text/javascript"}))}"><\\/script>'
    return text.replace(_SHIM_INLINE, blob).encode()


def boot_attribute(boot: dict) -> str:
    """The boot data as the value of a single-quoted HTML attribute. An attribute, not a <script
    type="application/json">: instant navigation re-creates scripts without their type and would run the
    JSON (and the site's Content-Security-Policy allows no inline script). Single quotes keep the JSON's
    many double quotes unescaped, about a third smaller than html.escape."""
    text = json.dumps(boot, separators=(",", ":"))
    return text.replace("&", "&amp;").replace("'", "&#39;").replace("<", "&lt;").replace(">", "&gt;")


def on_post_page(output, page, config):
    """On the calculator page, load engine.js in the head with the runtime's manifest, so that the worker
    starts downloading and booting Python before the rest of the page (Material's scripts) has loaded, and
    preload the page's other scripts."""
    if "data-mme-calculator" not in output or "</head>" not in output:
        return output
    manifest = dict(_runtime(config).manifest)
    if _state.get("offline"):
        manifest["offline"] = [f"offline/{name}.js" for name in sorted(_runtime(config).files)]
    prefix = "../" * page.url.count("/")                    # "calculator/" or "calculator.html"
    tag = f'<script src="{prefix}{SCRIPTS[0]}" data-mme-runtime=\'{boot_attribute(manifest)}\'></script>\n'
    # The page's other scripts, fetched now and all at once: the parser meets them only after the boot data
    # (some 400 kB), and would otherwise fetch them one after another.
    tag += "".join(f'<link rel="preload" as="script" href="{prefix}{s}">\n' for s in SCRIPTS[1:])
    output = output.replace("</head>", tag + "</head>", 1)
    # A keyboard user's first Tab: straight to the Model box (calculator.js focuses it), then Material's own link.
    output = output.replace('<div data-md-component="skip">',
                            '<div data-md-component="skip">\n<a href="#mme-preset" class="md-skip mme-skip">'
                            'Skip to the Model box</a>', 1)
    output = defer_material(output, prefix)
    return output if _state.get("offline") else defer_search(output)


def defer_material(output: str, prefix: str) -> str:
    """Replace Material's bundle on this page by ``material-late.js``, which loads it once Python has drawn its
    first estimate, or at once when the user reaches for the header, search or navigation: evaluating and
    starting Material takes about 0.7 s of main-thread CPU that a two-core laptop would otherwise take from
    Python's start. Left as it is if Material's page looks different (then the page is only slower)."""
    def late(m: re.Match) -> str:
        return f'<script src="{prefix}{MATERIAL_LATE_JS}" data-src="{m["src"]}"></script>'
    return _MATERIAL_BUNDLE.sub(late, output, count=1)


def defer_search(output: str) -> str:
    """Point Material's search worker on this page at ``search-worker.js``, which starts the real one only
    once Python has answered (or the user searches): building the search index takes about 1.5 s of CPU
    that a two-core laptop would otherwise take from Python's start. Not on file:// (the offline bundle
    runs the search worker in an iframe), and left as it is if Material's configuration looks different."""
    def point(m: re.Match) -> str:
        real = posixpath.relpath(m["path"], posixpath.dirname(SEARCH_WORKER_JS))
        return f'"search": "{m["prefix"]}{SEARCH_WORKER_JS}?worker={real}"'
    return _MATERIAL_SEARCH.sub(point, output, count=1)


def on_post_build(config):
    site = Path(config.site_dir)
    rt = _runtime(config)
    out = site / RUNTIME_DIR
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    files = dict(rt.files)
    if _state.get("offline"):
        if _state.get("payloads", (None,))[0] is not rt:
            _state["payloads"] = (rt, offline_payloads(rt.files))
        files.update(_state["payloads"][1])
        shim = csp_shim(fetch_package(IFRAME_WORKER, _cache_dir(config))["shim/index.js"])
        (site / SHIM_PATH).parent.mkdir(parents=True, exist_ok=True)
        (site / SHIM_PATH).write_bytes(shim)
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    hf = site / HF_DIR
    if hf.exists():
        shutil.rmtree(hf)
    hf.mkdir(parents=True)
    for name, data in hf_files(_catalog(config)[0], bool(_state.get("offline"))).items():
        (hf / name).write_bytes(data)

