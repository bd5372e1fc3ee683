"""The core's test suite, run again inside Pyodide under Node.js (``tests/pyodide_run.py``).

The calculator runs ``estimator`` in the browser with the pinned npm ``pyodide`` runtime; this test runs the
unit, CLI (in-process), web, property and regression tests in that same runtime (Python 3.14 compiled to
WebAssembly) and fails if any of them fails there. Tests that start processes are skipped inside (marked
``subprocess``), and so are the site and browser tests, which need mkdocs and Playwright. The run starts in the
background when the session is collected (fixture ``pyodide_suite``, ``tests/background.py``) and takes 4-5 minutes
on two cores, beside the other tests.
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.subprocess


def test_the_core_suite_passes_inside_pyodide(pyodide_suite):
    proc = pyodide_suite
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    summary = re.search(r"(\d+) passed", proc.stdout)
    assert summary and int(summary.group(1)) >= 500, tail       # the suite ran, not just collected
    assert "not possible inside Pyodide" in proc.stdout, tail       # conftest saw sys.platform == "emscripten"
