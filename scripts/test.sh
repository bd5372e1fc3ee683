#!/usr/bin/env bash
# The whole test suite: set-up, a strict site build, then pytest (unit, CLI, site and browser tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest "$@"
