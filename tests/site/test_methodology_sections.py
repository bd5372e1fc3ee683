"""Every layer kind, vision tower and recipe feature has a methodology section generated from its docstring.

The methodology page (docs/methodology.md) embeds a core module's docstring verbatim with the marker
``<!-- estimator:docstring module=NAME -->`` (hooks/_tables_views.py). The docstring is where each module states
its formulas and sources, so a module that counts memory and is not embedded is a part of the model the page does
not document. This test lists the modules that count a part of the model: every part module of a decoder layer
(``estimator.model.layers``: the token mixers and MLPs a :class:`LayerKind` names, and the router), the vision
tower (parameters and memory), and every recipe feature under ``estimator.memory.features``; each must be
embedded. A new architecture or feature fails here until the page carries its section.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import estimator.memory.features as features
import estimator.model.layers as layers

ROOT = Path(__file__).resolve().parents[2]
#: Helper modules that count nothing of their own (shared types, the list of assumptions shown beside a result).
NOT_A_PART = {"estimator.model.layers.base", "estimator.memory.features.assumptions"}


def _submodules(package) -> set[str]:
    return {f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)} - NOT_A_PART


def _part_modules() -> set[str]:
    names = _submodules(layers) | _submodules(features)
    # Part objects that are not modules (a heterogeneous block's linear replacement) name their module.
    for part in (*layers.MIXERS.values(), *layers.MLPS.values()):
        names.add(part.__name__ if hasattr(part, "__path__") or type(part).__name__ == "module"
                  else type(part).__module__)
    names |= {"estimator.model.vision", "estimator.memory.vision", "estimator.model.audio"}   # omni28: the sound tower
    return names


def test_every_part_module_has_its_docstring_on_the_methodology_page():
    page = (ROOT / "docs" / "methodology.md").read_text(encoding="utf-8")
    embedded = set(re.findall(r"<!-- estimator:docstring module=([\w.]+) -->", page))
    missing = sorted(_part_modules() - embedded)
    assert not missing, f"docs/methodology.md embeds no docstring of: {', '.join(missing)}"


def test_every_embedded_module_exists_and_has_a_docstring():
    page = (ROOT / "docs" / "methodology.md").read_text(encoding="utf-8")
    for name in re.findall(r"<!-- estimator:docstring module=([\w.]+) -->", page):
        assert (importlib.import_module(name).__doc__ or "").strip(), name
