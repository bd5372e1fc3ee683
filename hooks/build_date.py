"""MkDocs hook: the site's date is the last commit's, so that two builds of one commit are identical.

MkDocs stamps every page's ``update_date`` (the ``<lastmod>`` of ``sitemap.xml``) and the header of
``sitemap.xml.gz`` with the time of the build, unless ``SOURCE_DATE_EPOCH`` is set
(https://reproducible-builds.org/specs/source-date-epoch/). :func:`on_config` sets it, when the
environment does not, to the commit time of ``HEAD``; without git (an unpacked ``git archive``, which
keeps the commit time on every file) to the newest modification time of the sources.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("docs", "estimator", "hooks", "presets", "validation", "mkdocs.yml", "pyproject.toml")


def source_date_epoch(root: Path = ROOT) -> int:
    """Seconds since 1970 of the last commit of ``root``, or of its newest source file."""
    try:
        proc = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%ct"], capture_output=True,
                              text=True, timeout=30)
        if proc.returncode == 0 and proc.stdout.strip().isdigit():
            return int(proc.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    newest = 0.0
    for name in SOURCES:
        path = root / name
        for f in ([path] if path.is_file() else path.rglob("*") if path.is_dir() else []):
            if f.is_file() and "__pycache__" not in f.parts:
                newest = max(newest, f.stat().st_mtime)
    return int(newest)


def on_config(config):
    os.environ.setdefault("SOURCE_DATE_EPOCH", str(source_date_epoch()))
    return config
