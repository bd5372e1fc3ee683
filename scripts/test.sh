#!/usr/bin/env bash
# The whole test suite: set-up, a strict site build, then pytest (unit, CLI, site and browser tests).
set -euo pipefail
cd "$(dirname "$0")/.."
export NO_MKDOCS_2_WARNING=1   # Material 9.8 prints a banner about MkDocs 2.0 on every build
bash scripts/setup.sh
.venv/bin/python -m pytest "$@"
