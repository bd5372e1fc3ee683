"""Shared fixtures: paths to the reference data beside the checkout, a tiny config builder, and the suite's long
processes (the site build, the core's suite inside Pyodide, the second build), started in the background as soon
as the session is collected (``tests/background.py``).

Order: the tests that wait for one of those processes run after the others, so that the processes run beside
them, and the browser tests run last, once every process has ended (their waits are timed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Inside Pyodide (tests/pyodide_run.py) there are no processes to start, and no mkdocs or Playwright.
PYODIDE = sys.platform == "emscripten"
collect_ignore = ["site/test_site.py", "site/test_site_timeline.py", "site/test_runtime.py", "site/test_pyodide.py",
                  "test_fuzz.py", "browser"] if PYODIDE else []


#: The fixtures that hand a background job's result to the tests, and their jobs (tests/background.py).
JOB_FIXTURES = {"site_dir": "site", "pyodide_suite": "pyodide", "second_build": "rebuild"}
BROWSER = ROOT / "tests" / "browser"


def pytest_collection_modifyitems(config, items):
    if PYODIDE:
        skip = pytest.mark.skip(reason="starts a process: not possible inside Pyodide")
        for item in items:
            if item.get_closest_marker("subprocess"):
                item.add_marker(skip)
        return

    def late(item) -> tuple[bool, bool]:
        waits = any(name in JOB_FIXTURES for name in getattr(item, "fixturenames", ()))
        return BROWSER in Path(item.path).parents, waits
    items.sort(key=late)                # stable: the order of the files within each of the three groups


def pytest_collection_finish(session):
    """Start the jobs the selected tests will wait for (not for --collect-only, not inside Pyodide)."""
    if PYODIDE or session.config.option.collectonly:
        return
    from tests import background
    used = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    for fixture, job in JOB_FIXTURES.items():
        if fixture in used:
            background.start(job)


def pytest_sessionfinish(session):
    if not PYODIDE:
        from tests import background
        background.stop_all()


@pytest.fixture(scope="session")
def site_dir() -> Path:
    """The site built by ``mkdocs build --strict`` (hash seed 0), once per session; a warning fails it."""
    from tests import background
    proc = background.result("site")
    if proc.returncode != 0:
        pytest.fail("mkdocs build --strict failed:\n" + proc.stdout[-4000:] + proc.stderr[-4000:])
    assert "WARNING" not in proc.stderr, proc.stderr[-4000:]
    return background.output("site")


@pytest.fixture(scope="session")
def pyodide_suite():
    """The Node.js process that ran the core's suite inside Pyodide (``tests/pyodide_run.py``)."""
    from tests import background
    try:
        return background.result("pyodide")
    except FileNotFoundError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def second_build():
    """The site built a second time, elsewhere (``test_two_builds_are_identical``): the process and its folder."""
    from tests import background
    return background.result("rebuild"), background.output("rebuild")


def _find_reference() -> Path | None:
    for base in (ROOT.parent / "shared" / "reference", ROOT / "shared" / "reference"):
        if base.is_dir():
            return base
    return None


REFERENCE = _find_reference()


@pytest.fixture(scope="session")
def reference() -> Path:
    if REFERENCE is None:
        pytest.skip("../shared/reference is not present beside this checkout")
    return REFERENCE


def make_config(model: dict, parallelism: dict | None = None, training: dict | None = None,
                precision: dict | None = None) -> dict:
    """A config dict with a default single-GPU training section."""
    tr = {"world_size": 1, "seq_length": 4096}
    tr.update(training or {})
    return {"model": model, "parallelism": parallelism or {}, "training": tr, "precision": precision or {}}
