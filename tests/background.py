"""The suite's three long processes, started as soon as it is collected so that they run beside the other tests.

pytest runs one test at a time in one process; on a two-core machine (CI's) the second core sat idle while the
site was built, the core's suite ran inside Pyodide and the site was built again elsewhere, one after the other,
each for one to five minutes. Each of them is now a *job*: a process started when the session is collected (by
``tests/conftest.py``, only when a selected test uses its fixture) and waited for by the fixture that hands its
result to the tests:

- ``site``: ``mkdocs build --strict`` of this checkout, once per session (fixture ``site_dir``; the site tests and
  the browser tests read the same build);
- ``pyodide``: the core's test suite inside Pyodide under Node.js (fixture ``pyodide_suite``,
  ``tests/site/test_pyodide.py``);
- ``rebuild``: the second build of ``test_two_builds_are_identical`` (fixture ``second_build``): a fresh clone
  elsewhere, in another time zone, locale and hash seed, with an empty cache.

``tests/conftest.py`` runs the tests that wait for a job after the others, and the browser tests (whose waits are
timed) last, when every job has ended. A job's output goes to files, not pipes (a full pipe would stop it), and
its result is a :class:`subprocess.CompletedProcess`, as ``subprocess.run`` gives. ``result`` starts a job that was
not started, so a test that asks for one always gets it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE_BUILD_TIMEOUT = 1800           # seconds; a build takes one to two minutes on two cores
PYODIDE_TIMEOUT = 3000              # seconds; tests/pyodide_run.py's own limit


def mkdocs_env(seed: str = "0", extra: dict | None = None) -> dict:
    """The environment of a site build: Material's banner off and a fixed hash seed (the snapshot must not depend
    on it; the second build of ``test_two_builds_are_identical`` gives another)."""
    return {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONHASHSEED": seed, **(extra or {})}


def mkdocs_build_argv(site_dir: Path, config: Path | None = None) -> list[str]:
    argv = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)]
    return argv + ["--config-file", str(config)] if config is not None else argv


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _other_zone() -> str:
    """A time zone nine hours from UTC, and not the one this process runs in."""
    return "America/Los_Angeles" if os.environ.get("TZ", "") == "Asia/Tokyo" else "Asia/Tokyo"


class Job:
    """One process running in the background; ``result`` waits for it (at most ``timeout`` seconds)."""

    def __init__(self, name: str, argv: list[str], *, cwd: Path, env: dict, work: Path, timeout: int,
                 keep: Path | None = None):
        self.name, self.argv, self.work, self.timeout, self.keep = name, argv, work, timeout, keep
        self._out = open(work / f"{name}.stdout", "w+", encoding="utf-8", errors="replace")
        self._err = open(work / f"{name}.stderr", "w+", encoding="utf-8", errors="replace")
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=self._out, stderr=self._err, text=True)
        self._result: subprocess.CompletedProcess | None = None

    def result(self) -> subprocess.CompletedProcess:
        if self._result is None:
            try:
                self.proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
            finally:
                texts = []
                for f in (self._out, self._err):
                    f.seek(0)
                    texts.append(f.read())
                    f.close()
            self._result = subprocess.CompletedProcess(self.argv, self.proc.returncode, *texts)
        return self._result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self._out, self._err):
            f.close()


def _start_site(work: Path) -> Job:
    out = work / "site"
    return Job("site", mkdocs_build_argv(out), cwd=ROOT, env=mkdocs_env(), work=work, timeout=SITE_BUILD_TIMEOUT,
               keep=out)


def _start_pyodide(work: Path) -> Job:
    from tests import pyodide_run
    tmp = work / "pyodide-run"
    tmp.mkdir()
    argv, env = pyodide_run.command(["-q", "tests"], tmp)
    return Job("pyodide", argv, cwd=tmp, env=env, work=work, timeout=PYODIDE_TIMEOUT)


def _start_rebuild(work: Path) -> Job:
    """The second build of ``test_two_builds_are_identical`` (its docstring says what it proves): a fresh ``git
    clone`` at another path (a copy of the files ``git ls-files`` lists, dated like this checkout, when this one has
    uncommitted changes), in another time zone, a Japanese locale, another hash seed and an empty cache; the
    Pyodide runtime from this checkout's download, as an air-gapped build takes it, so its memory snapshot is made
    anew."""
    repro = _load("check_reproducible", ROOT / "scripts" / "check_reproducible.py")
    elsewhere = work / "elsewhere" / "checkout"
    env = {"MME_CACHE_DIR": str(work / "empty-cache"), "TZ": _other_zone(), "LANG": "ja_JP.UTF-8", "LC_ALL": ""}
    if repro.clean(ROOT):
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(elsewhere)], check=True)
    else:
        repro.copy_tree(ROOT, elsewhere)
        env["SOURCE_DATE_EPOCH"] = str(_load("build_date_hook", ROOT / "hooks" / "build_date.py").source_date_epoch())
    tarball = ROOT / ".cache" / "npm" / "pyodide-314.0.7.tgz"
    if tarball.is_file():
        env["MME_PYODIDE_TARBALL"] = str(tarball)
    shim = ROOT / ".cache" / "npm" / "iframe-worker-1.0.4.tgz"       # the offline bundle's (hooks/offline_zip.py)
    if shim.is_file():
        env["MME_IFRAME_WORKER_TARBALL"] = str(shim)
    out = work / "again"
    return Job("rebuild", mkdocs_build_argv(out), cwd=elsewhere, env=mkdocs_env("12345", env), work=work,
               timeout=SITE_BUILD_TIMEOUT, keep=out)


STARTERS = {"site": _start_site, "pyodide": _start_pyodide, "rebuild": _start_rebuild}

_jobs: dict[str, Job] = {}
_failed: dict[str, BaseException] = {}
_work: Path | None = None


def start(name: str) -> None:
    """Start job ``name`` unless it runs already; a failure to start is kept and raised by ``result``."""
    global _work
    if name in _jobs or name in _failed:
        return
    if _work is None:
        _work = Path(tempfile.mkdtemp(prefix="mme-tests-"))
    work = _work / name
    work.mkdir()
    try:
        _jobs[name] = STARTERS[name](work)
    except Exception as exc:            # raised again, in the test that needs the job
        _failed[name] = exc


def result(name: str) -> subprocess.CompletedProcess:
    """The finished process of job ``name`` (started now if it was not); the job's folder is ``output(name)``."""
    start(name)
    if name in _failed:
        raise _failed[name]
    return _jobs[name].result()


def output(name: str) -> Path:
    """What job ``name`` wrote (the site it built)."""
    return _jobs[name].keep


def stop_all() -> None:
    """End the jobs still running and remove their files (the end of the session)."""
    global _work
    for job in _jobs.values():
        job.stop()
    _jobs.clear()
    _failed.clear()
    if _work is not None:
        shutil.rmtree(_work, ignore_errors=True)
        _work = None
