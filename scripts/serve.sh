#!/usr/bin/env bash
# Build and serve the documentation site with the in-browser calculator on http://127.0.0.1:8000/
# (installs what it needs first). Extra arguments go to `mkdocs serve`, e.g. `-a 0.0.0.0:8000`.
set -euo pipefail
cd "$(dirname "$0")/.."
export NO_MKDOCS_2_WARNING=1   # Material 9.8 prints a banner about MkDocs 2.0 on every build
bash scripts/setup.sh
exec .venv/bin/python -m mkdocs serve -a 127.0.0.1:8000 "$@"
