"""Megatron-Core training memory estimator: exact parameter counts and the memory of every pipeline stage.

Standard library only, so the same code runs in CPython and in the browser under Pyodide.

    >>> import estimator
    >>> e = estimator.estimate("presets/llama-3-8b.yaml")       # or a dict, YAML text, a Config
    >>> e.peak.device_bytes / 2**30                             # GiB on the busiest GPU
"""

from __future__ import annotations

from .config import interleaving_problem, load_config, validate
from .errors import ConfigError, EstimatorError, PresetNotFoundError, Problem, UnsupportedError
from .gpus import GPUS, get_gpu, fit
from .hf import from_hf_config
from .megatron_args import parse_megatron_args, to_megatron_args
from .memory import stage_memory as _stage_memory
from .params import ParameterCounts, count_parameters
from .presets import list_presets, load_preset, preset_info
from .report import Estimate, StageEstimate
from .resolve import resolve
from .schema import MAX_BATCH, Config, ModelConfig, ParallelismConfig, PrecisionConfig, TrainingConfig, field_specs
from .search import search
from .theoretical import TrainingMemoryEstimate, estimate_training_memory, format_training_memory_estimate

__version__ = "0.1.0"

__all__ = [
    "Config", "ConfigError", "Estimate", "EstimatorError", "GPUS", "ModelConfig", "ParallelismConfig",
    "ParameterCounts", "PrecisionConfig", "PresetNotFoundError", "Problem", "StageEstimate", "TrainingConfig",
    "TrainingMemoryEstimate", "UnsupportedError", "__version__", "count_parameters_of", "estimate",
    "estimate_training_memory", "field_specs", "fit", "format_training_memory_estimate", "from_hf_config",
    "get_gpu", "list_presets", "load_config", "load_preset", "parse_megatron_args", "preset_info", "search",
    "to_megatron_args", "validate",
]


def estimate(config, *, num_microbatches: int | None = None) -> Estimate:
    """Estimate the memory of every pipeline stage of a configuration (path, dict, YAML/JSON text or Config).

    ``num_microbatches`` overrides the number derived from ``training.global_batch_size``.
    Raises :class:`ConfigError` listing every problem of an invalid configuration.
    """
    r = resolve(load_config(config))
    if num_microbatches is not None:
        if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
            raise ConfigError(Problem("num_microbatches", num_microbatches, "must be a positive integer"))
        if num_microbatches > MAX_BATCH:
            raise ConfigError(Problem("num_microbatches", num_microbatches, f"must be <= {MAX_BATCH:,}"))
        problem = interleaving_problem(r.p, r.v, num_microbatches, r.group)
        if problem:
            raise ConfigError(Problem("num_microbatches", num_microbatches, problem))
        r.m = num_microbatches
    return _stage_memory(r)


def count_parameters_of(config) -> ParameterCounts:
    """Exact parameter counts of a configuration (path, dict or Config)."""
    return count_parameters(resolve(load_config(config)))

