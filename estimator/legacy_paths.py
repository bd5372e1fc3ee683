"""Import paths of the flat layout (before November 2026), kept working.

The package was one folder of modules (``estimator/memory.py``, ``estimator/hf.py``, ``estimator/search.py``, ...);
it is now a stack of subpackages (see :mod:`estimator`). Code written against the old paths keeps working: an
old module path imports the module that now holds that code, the same module object, not a copy::

    from estimator.memory import stage_memory        # estimator/memory/ re-exports it (estimator.memory.assemble)
    from estimator.hf import from_hf_config          # -> estimator.formats.hf
    from estimator.search import max_micro_batch     # -> estimator.plan.search (estimator.search stays the function)
    import estimator.layers.moe                      # -> estimator.model.layers.moe

:data:`MOVED` lists every old path and its new home. ``estimator.config``, ``estimator.memory``,
``estimator.validation``, ``estimator.web`` and ``estimator.cli`` are packages now; each re-exports the old
module's public names. New code should import from the new paths.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

__all__ = ["MOVED", "new_path", "install"]

#: Old module path (under ``estimator.``) -> the module that holds that code now.
MOVED = {
    "errors": "config.errors", "yamlio": "config.yamlio", "schema": "config.schema",
    "model_rules": "config.rules", "hybrid_pattern": "config.hybrid_pattern",
    "pipeline_layout": "config.pipeline_layout",
    "resolve": "model.resolve", "params": "model.params", "fp8_scales": "model.fp8_scales",
    "local_attention": "model.local_attention", "layers": "model.layers",
    "states": "memory.states", "activations": "memory.activations", "loss": "memory.loss",
    "workspaces": "memory.workspaces", "optimizer_step": "memory.optimizer_step", "schedule": "memory.schedule",
    "report": "memory.report", "breakdown": "memory.breakdown", "timeline": "memory.timeline",
    "features": "memory.features", "features.rules": "config.rules",
    "features.userbuffers": "config.tp_overlap",
    "hf": "formats.hf", "hf_catalog": "formats.hf_catalog", "catalog": "formats.catalog",
    "presets": "formats.presets", "gpus": "formats.gpus", "megatron_args": "formats.megatron_args",
    "megatron_export": "formats.megatron_export", "megatron_catalog": "formats.megatron_catalog",
    "megatron_flag_classes": "formats.megatron_flag_classes",
    "theoretical": "reference.theoretical", "compat": "reference.upstream",
    "search": "plan.search", "search_space": "plan.space", "search_cost": "plan.cost", "suggest": "plan.suggest",
    "advice": "plan.advice", "sweep": "plan.sweep", "verdicts": "plan.verdicts",
    "validation_ci": "validation.megatron_ci", "validation_project": "validation.project_runs",
    "validation_recipes": "validation.known_to_run",
    "web_plan": "web.plan", "web_compare": "web.compare", "web_charts": "web.charts", "web_view": "web.view",
    "web_checks": "web.checks", "form": "web.form",
    "cli_search": "cli.search",
    # Split into estimator/config/rules/ (November 2026); the package re-exports their public names.
    "config.model_rules": "config.rules", "config.feature_rules": "config.rules",
}
#: Old packages whose submodules moved with them.
_PACKAGES = ("layers", "features", "hf_catalog")
#: Old modules whose name is also a function of the public API (``estimator.search()``): aliased at once, so that
#: importing the old path never replaces the function with the module on the package.
_EAGER = ("search", "resolve")


def new_path(old: str) -> str | None:
    """The module that holds what ``old`` (a full old path such as ``estimator.hf``) held, or None."""
    if not old.startswith("estimator."):
        return None
    rel = old[len("estimator."):]
    if rel in MOVED:
        return "estimator." + MOVED[rel]
    head, _, tail = rel.partition(".")
    if head in _PACKAGES and tail:
        return f"estimator.{MOVED[head]}.{tail}"
    return None


class _Alias:
    """Finds an old path and loads it as the new module itself (first on ``sys.meta_path``, so that a submodule of
    an old package path is never loaded a second time from the file under the old name).

    A meta-path finder and loader by protocol (``find_spec``; ``create_module``, ``exec_module``), not by subclassing
    :mod:`importlib.abc`: importing that module imports :mod:`importlib.resources` and with it ``tempfile``,
    ``shutil``, ``random`` and the compression modules, which every ``import estimator`` paid for nothing."""

    def find_spec(self, fullname, path=None, target=None):
        new = new_path(fullname)
        if new is None:
            return None
        try:
            importlib.util.find_spec(new)
        except ModuleNotFoundError:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(new_path(spec.name))
        self._specs = getattr(self, "_specs", {})
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # The import system set the alias's spec on the module: give it back its own.
        for name, spec in list(getattr(self, "_specs", {}).items()):
            if spec is not None and spec.name == module.__name__:
                module.__spec__ = spec
                del self._specs[name]


_FINDER = _Alias()


def install() -> None:
    """Make the old paths importable (``import estimator`` calls this)."""
    # (one finder only, also when the package is imported afresh, as `mkdocs serve` does on every rebuild)
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != __name__]
    sys.meta_path.insert(0, _FINDER)
    for old in _EAGER:
        sys.modules.setdefault(f"estimator.{old}", importlib.import_module(new_path(f"estimator.{old}")))
