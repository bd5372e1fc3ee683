"""Megatron-Core training memory estimator: exact parameter counts and the memory of every pipeline stage.

Standard library only, so the same code runs in CPython and in the browser under Pyodide.
"""

from __future__ import annotations

from .config import load_config, validate
from .errors import ConfigError, EstimatorError, PresetNotFoundError, Problem, UnsupportedError
from .params import ParameterCounts, count_parameters
from .resolve import resolve
from .schema import Config, ModelConfig, ParallelismConfig, PrecisionConfig, TrainingConfig, field_specs

__version__ = "0.1.0"


def count_parameters_of(config) -> ParameterCounts:
    """Exact parameter counts of a configuration (path, dict or Config)."""
    return count_parameters(resolve(load_config(config)))


__all__ = [
    "Config", "ConfigError", "EstimatorError", "ModelConfig", "ParallelismConfig", "ParameterCounts",
    "PrecisionConfig", "PresetNotFoundError", "Problem", "TrainingConfig", "UnsupportedError",
    "__version__", "count_parameters_of", "field_specs", "load_config", "validate",
]

from .memory import stage_memory as _stage_memory  # noqa: E402
from .report import Estimate, StageEstimate  # noqa: E402


def estimate(config, *, num_microbatches: int | None = None) -> Estimate:
    """Estimate the memory of every pipeline stage of a configuration (path, dict, text or Config).

    ``num_microbatches`` overrides the number derived from ``training.global_batch_size``.
    """
    r = resolve(load_config(config))
    if num_microbatches is not None:
        from dataclasses import replace
        r = replace(r, m=num_microbatches)
    return _stage_memory(r)


__all__ += ["Estimate", "StageEstimate", "estimate"]

from .theoretical import TrainingMemoryEstimate, estimate_training_memory, format_training_memory_estimate  # noqa: E402

__all__ += ["TrainingMemoryEstimate", "estimate_training_memory", "format_training_memory_estimate"]
