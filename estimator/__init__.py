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
