#!/usr/bin/env bash
# Installs everything the site and the tests need: a virtual environment in .venv with the pinned
# Python packages, Debian's Chromium for the browser tests and Debian's Node.js for the Pyodide test run.
# Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import mkdocs, material, pytest, playwright, yaml, jinja2" 2>/dev/null \
   || [ requirements-test.txt -nt .venv/.installed ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-test.txt
  touch .venv/.installed
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
  || .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
# Debian packages: chromium for the browser tests, nodejs to run the core's tests inside Pyodide (and to
# make the calculator's memory snapshot).
missing=""
[ -x /usr/bin/chromium ] || missing="$missing chromium"
command -v node >/dev/null 2>&1 || command -v nodejs >/dev/null 2>&1 || missing="$missing nodejs"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi
