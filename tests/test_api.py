"""The public API is short and explicit: __all__ is guarded, and every name in it exists."""

from __future__ import annotations

import estimator

EXPECTED = {
    "Config", "ConfigError", "Estimate", "EstimatorError", "GPUS", "ModelConfig", "ParallelismConfig",
    "ParameterCounts", "PrecisionConfig", "PresetNotFoundError", "Problem", "StageEstimate", "TrainingConfig",
    "TrainingMemoryEstimate", "UnsupportedError", "__version__", "count_parameters_of", "estimate",
    "estimate_training_memory", "field_specs", "fit", "format_training_memory_estimate", "from_hf_config",
    "get_gpu", "list_presets", "load_config", "load_preset", "parse_megatron_args", "preset_info", "search",
    "to_megatron_args", "validate",
}


def test_all_is_the_documented_api():
    assert set(estimator.__all__) == EXPECTED
    for name in estimator.__all__:
        assert hasattr(estimator, name), name


def test_exceptions_subclass_builtins():
    assert issubclass(estimator.ConfigError, ValueError)
    assert issubclass(estimator.UnsupportedError, ValueError)
    assert issubclass(estimator.PresetNotFoundError, LookupError)
    for cls in (estimator.ConfigError, estimator.UnsupportedError, estimator.PresetNotFoundError):
        assert issubclass(cls, estimator.EstimatorError)


def test_every_schema_field_is_documented():
    for spec in estimator.field_specs():
        assert spec.help and spec.help.endswith((".", ")")), spec.path
        assert spec.type in {"int", "float", "bool", "str", "int_or_list", "str_list"}
        if spec.default is None and not spec.required:
            assert spec.nullable


def test_num_microbatches_must_be_positive():
    import pytest
    cfg = {"model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 128},
           "training": {"world_size": 1, "seq_length": 32}}
    with pytest.raises(estimator.ConfigError):
        estimator.estimate(cfg, num_microbatches=0)
