"""Run the core's test suite inside Pyodide, under Node.js, with the runtime the site ships.

The calculator runs ``estimator`` in the browser through the pinned npm ``pyodide`` package; this runs the
same tests as CPython does, in that same interpreter (WebAssembly, Python 3.14), so that "the core runs in
the browser" is checked, not assumed. ``tests/site/test_pyodide.py`` calls it from the suite;
``python tests/pyodide_run.py [pytest args]`` runs it alone.

- The runtime comes from ``hooks/runtime.py`` (``fetch_package``: pinned version and integrity, cached
  under ``.cache/npm``; no other download).
- Node.js is Debian's ``nodejs`` (``scripts/setup.sh`` installs it); ``MME_NODE`` names another binary.
- The checkout is mounted at its own path (Emscripten's NODEFS), the reference data beside it too, and
  pytest, hypothesis and their pure-Python dependencies come from the test virtual environment (the
  pinned versions of ``requirements-test.txt``), so nothing is installed inside Pyodide.
- Inside, ``tests/conftest.py`` sees ``sys.platform == "emscripten"`` and skips what cannot run there:
  tests marked ``subprocess`` and the site and browser tests (mkdocs, Playwright).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Pure-Python distributions the tests import inside Pyodide, taken from the test virtual environment
#: (with their metadata: pytest finds its plugins and versions there).
DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments", "hypothesis", "sortedcontainers",
                 "pyyaml")

_RUN_JS = r"""
import { pathToFileURL } from "node:url";
const env = process.env;
const { loadPyodide } = await import(pathToFileURL(env.MME_INDEX + "pyodide.mjs").href);
const py = await loadPyodide({ indexURL: env.MME_INDEX, lockFileContents: env.MME_LOCK });
py.setStdout({ write: (buf) => { process.stdout.write(buf); return buf.length; } });
py.setStderr({ write: (buf) => { process.stderr.write(buf); return buf.length; } });
for (const [inside, host] of JSON.parse(env.MME_MOUNTS)) {
  py.FS.mkdirTree(inside);
  py.FS.mount(py.FS.filesystems.NODEFS, { root: host }, inside);
}
py.globals.set("mme_args", py.toPy(JSON.parse(env.MME_ARGS)));
const code = py.runPython(env.MME_MAIN);
process.exit(code);
"""

_MAIN_PY = """
import os, sys
root = os.environ.get("MME_ROOT") or "{root}"
sys.path[:0] = [root, "/mme-site-packages"]
os.chdir(root)
os.environ.setdefault("MME_HYPOTHESIS_EXAMPLES", "{examples}")
import pytest
int(pytest.main(["-p", "no:cacheprovider", *mme_args]))
"""


def _runtime_hook():
    spec = importlib.util.spec_from_file_location("mme_runtime_hook_for_pyodide_tests", ROOT / "hooks" / "runtime.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def node_binary() -> str | None:
    return os.environ.get("MME_NODE") or shutil.which("node") or shutil.which("nodejs")


def _site_packages(tmp: Path) -> Path:
    """A directory with only the pure-Python packages the tests need (compiled modules of this CPython
    would not load in WebAssembly, and the rest of the virtual environment is not wanted there)."""
    from importlib.metadata import distribution
    src = Path(sysconfig.get_paths()["purelib"]).resolve()
    out = tmp / "site-packages"
    out.mkdir()
    for name in DISTRIBUTIONS:
        dist = distribution(name)
        for f in dist.files or ():
            # resolved: a console script is listed as ../../../bin/pytest, under purelib only in its spelling
            path = Path(dist.locate_file(f)).resolve()
            if path.suffix in (".so", ".pyd", ".pyc") or not path.is_file() or src not in path.parents:
                continue
            dest = out / path.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
    return out


def command(args: list[str], tmp: Path, *, examples: int = 20) -> tuple[list[str], dict]:
    """The Node.js command line and its environment that run pytest with ``args`` inside Pyodide, to be run in
    ``tmp`` (which holds the runtime's files until the process ends; ``tests/background.py`` starts it early)."""
    node = node_binary()
    if node is None:
        raise FileNotFoundError("Node.js not found (scripts/setup.sh installs Debian's nodejs; MME_NODE names one)")
    hook = _runtime_hook()
    cache = Path(os.environ.get("MME_CACHE_DIR") or ROOT / ".cache")
    files = hook.fetch_package(hook.PYODIDE, cache)
    info = json.loads(files.pop("pyodide-lock.json"))["info"]
    lock = json.dumps({"info": info, "packages": {}}, separators=(",", ":"))
    index = tmp / "pyodide"
    index.mkdir()
    for name, data in files.items():
        (index / name).write_bytes(data)
    mounts = [[str(ROOT), str(ROOT.resolve())], ["/mme-site-packages", str(_site_packages(tmp))]]
    shared = ROOT.parent / "shared"          # the reference data beside the checkout (tests/conftest.py)
    if shared.is_dir():
        mounts.append([str(shared), str(shared.resolve())])
    env = {**os.environ, "MME_INDEX": f"{index}/", "MME_LOCK": lock, "MME_MOUNTS": json.dumps(mounts),
           "MME_ARGS": json.dumps(args), "MME_MAIN": _MAIN_PY.format(root=ROOT, examples=examples)}
    return [node, "--input-type=module", "-e", _RUN_JS], env


def run(args: list[str], *, examples: int = 20, timeout: int = 3000) -> subprocess.CompletedProcess:
    """Run pytest with ``args`` inside Pyodide; the completed Node.js process (its output captured)."""
    with tempfile.TemporaryDirectory(prefix="mme-pyodide-tests-") as tmp_name:
        argv, env = command(args, Path(tmp_name), examples=examples)
        return subprocess.run(argv, env=env, cwd=tmp_name, capture_output=True, text=True, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    proc = run(list(sys.argv[1:] if argv is None else argv) or ["-q", "tests"])
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
