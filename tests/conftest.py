"""Shared fixtures: paths to the reference data beside the checkout and a tiny config builder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


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
