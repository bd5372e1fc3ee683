"""Megatron-Core training memory estimator: exact parameter counts and the memory of every pipeline stage.

Standard library only, so the same code runs in CPython and in the browser under Pyodide.

    >>> import estimator
    >>> e = estimator.estimate("presets/llama-3-8b.yaml")       # or a dict, YAML text, a Config
    >>> e.peak.device_bytes / 2**30                             # GiB on the busiest GPU

The package is a stack of layers; each imports only the ones above it in this list (``tests/test_package_layout.py``
holds it to that, with no import circles and no imports of another module's private names):

1. :mod:`estimator.config`: the schema, loading, validation (the rules Megatron-Core enforces), errors;
2. :mod:`estimator.model`: derived values resolved, layer kinds, parameter counts;
3. :mod:`estimator.memory`: states, activations, buffers, recipe features, the per-stage assembly, results;
4. :mod:`estimator.formats`: Hugging Face configs and the model catalog, presets, GPUs, Megatron-LM arguments;
5. :mod:`estimator.reference`: the seeds' theoretical-memory API and Megatron-LM's / Megatron-Bridge's formulas;
6. :mod:`estimator.plan`: the layout search, "Make it fit", quick-control advice, sweeps, verdicts;
7. :mod:`estimator.validation`: estimates against measured runs;
8. :mod:`estimator.web` (the calculator's Python side) and :mod:`estimator.cli` (the command line).

This module is the public API (``__all__``). Import paths of the flat layout before November 2026
(``estimator.memory``, ``estimator.hf``, ``estimator.search``, ...) keep working: :mod:`estimator.legacy_paths`.
"""

from __future__ import annotations

from . import legacy_paths as _legacy_paths
from .config.errors import ConfigError, EstimatorError, PresetNotFoundError, Problem, UnsupportedError
from .config.load import load_config
from .config.rules import validate
from .config.schema import (MAX_BATCH, Config, ModelConfig, ParallelismConfig, PrecisionConfig, TrainingConfig,
                            field_specs)
from .formats.gpus import GPUS, fit, get_gpu
from .formats.presets import list_presets, load_preset, preset_info
from .memory.assemble import estimate
from .memory.report import Estimate, StageEstimate
from .model.params import ParameterCounts, count_parameters, count_parameters_of
from .model.resolve import resolve
from .plan.search import search
from .version import __version__

#: Public names imported on first use (PEP 562): the Hugging Face and Megatron-LM argument readers and the seeds'
#: reference formulas are a fifth of the package's import time, which every command line run pays
#: (``python -m estimator search ...`` needs none of them).
_LAZY = {"from_hf_config": "formats.hf", "parse_megatron_args": "formats.megatron_args",
         "to_megatron_args": "formats.megatron_args", "TrainingMemoryEstimate": "reference.results",
         "estimate_training_memory": "reference.theoretical",
         "format_training_memory_estimate": "reference.theoretical"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = globals()[name] = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))

#: The subpackages from the bottom layer up: each imports only its own layer and the ones before it (the two of the
#: last rank not each other). ``tests/test_package_layout.py`` holds the imports to it; the API page draws it.
LAYERS = (("config",), ("model",), ("memory",), ("formats",), ("reference",), ("plan",), ("validation",),
          ("web", "cli"))

__all__ = [
    "Config", "ConfigError", "Estimate", "EstimatorError", "GPUS", "ModelConfig", "ParallelismConfig",
    "ParameterCounts", "PrecisionConfig", "PresetNotFoundError", "Problem", "StageEstimate", "TrainingConfig",
    "TrainingMemoryEstimate", "UnsupportedError", "__version__", "count_parameters_of", "estimate",
    "estimate_training_memory", "field_specs", "fit", "format_training_memory_estimate", "from_hf_config",
    "get_gpu", "list_presets", "load_config", "load_preset", "parse_megatron_args", "preset_info", "search",
    "to_megatron_args", "validate",
]

_legacy_paths.install()
del _legacy_paths
