#!/usr/bin/env bash
# Installs everything the site and the tests need: a virtual environment in .venv with the pinned
# Python packages, and Debian's Chromium for the browser tests. Idempotent; safe to re-run.
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
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi
