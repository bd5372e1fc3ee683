#!/usr/bin/env bash
# The whole test suite: set-up, then pytest: unit, CLI, property (Hypothesis), fuzz, site (a strict build)
# and browser tests, and the core's tests once more inside Pyodide under Node.js (tests/site/test_pyodide.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export NO_MKDOCS_2_WARNING=1   # Material 9.8 prints a banner about MkDocs 2.0 on every build
bash scripts/setup.sh
.venv/bin/python -m pytest "$@"
