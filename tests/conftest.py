"""Shared fixtures: paths to the reference data beside the checkout and a tiny config builder."""

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


def pytest_collection_modifyitems(config, items):
    if PYODIDE:
        skip = pytest.mark.skip(reason="starts a process: not possible inside Pyodide")
        for item in items:
            if item.get_closest_marker("subprocess"):
                item.add_marker(skip)


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
