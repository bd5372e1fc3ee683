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
        assert spec.type in {"int", "float", "bool", "str", "int_or_list", "str_list", "int_list"}
        if spec.default is None and not spec.required:
            assert spec.nullable


def test_num_microbatches_must_be_positive():
    import pytest
    cfg = {"model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 128},
           "training": {"world_size": 1, "seq_length": 32}}
    with pytest.raises(estimator.ConfigError):
        estimator.estimate(cfg, num_microbatches=0)


# --- every public function with arguments of the wrong kind (issue 31, item 6) --------------------------------

WRONG = [None, 1, -1, 1.5, float("nan"), True, [], {}, b"x", object(), "", "no-such", {"model": 1}, 10 ** 400]


def _calls(tiny, est, tme, bad):
    """One call per public function and argument, ``bad`` in that argument's place."""
    return {
        "estimate": lambda: estimator.estimate(bad), "estimate(num_microbatches)": lambda: estimator.estimate(
            tiny, num_microbatches=bad),
        "load_config": lambda: estimator.load_config(bad), "validate": lambda: estimator.validate(bad),
        "fit(estimate)": lambda: estimator.fit(bad, 80 * 2 ** 30), "fit(capacity)": lambda: estimator.fit(est, bad),
        "fit(headroom)": lambda: estimator.fit(est, 80 * 2 ** 30, headroom=bad),
        "get_gpu": lambda: estimator.get_gpu(bad),
        "from_hf_config": lambda: estimator.from_hf_config(bad),
        "parse_megatron_args": lambda: estimator.parse_megatron_args(bad),
        "parse_megatron_args(world_size)": lambda: estimator.parse_megatron_args(
            "--num-layers 2 --hidden-size 8 --num-attention-heads 2 --vocab-size 8", world_size=bad),
        "parse_megatron_args(read_file)": lambda: estimator.parse_megatron_args("--num-layers 2", read_file=bad),
        "to_megatron_args": lambda: estimator.to_megatron_args(bad), "load_preset": lambda: estimator.load_preset(bad),
        "preset_info": lambda: estimator.preset_info(bad),
        "count_parameters_of": lambda: estimator.count_parameters_of(bad),
        "estimate_training_memory": lambda: estimator.estimate_training_memory(bad),
        "estimate_training_memory(formula)": lambda: estimator.estimate_training_memory(tiny, formula=bad),
        "estimate_training_memory(num_microbatches)": lambda: estimator.estimate_training_memory(
            tiny, num_microbatches=bad),
        "format_training_memory_estimate": lambda: estimator.format_training_memory_estimate(bad),
        "format_training_memory_estimate(unit)": lambda: estimator.format_training_memory_estimate(tme, unit=bad),
        "search(config)": lambda: estimator.search(bad, num_gpus=4, gpu="H100-80GB"),
        "search(num_gpus)": lambda: estimator.search(tiny, num_gpus=bad, gpu="H100-80GB"),
        "search(gpu)": lambda: estimator.search(tiny, num_gpus=4, gpu=bad),
    }


def test_every_public_function_refuses_the_wrong_kind_with_an_estimator_error():
    """Each public function, each argument, each value of WRONG: a result or an EstimatorError with a message, never
    a bare AttributeError or TypeError (fit(None, ...) and validate({...}) raised AttributeError)."""
    tiny = estimator.load_preset("tiny")
    est, tme = estimator.estimate(tiny), estimator.estimate_training_memory(tiny)
    for bad in WRONG:
        for name, call in _calls(tiny, est, tme, bad).items():
            try:
                call()
            except estimator.EstimatorError as exc:
                assert str(exc), (name, bad)


def test_an_object_of_the_wrong_kind_is_a_type_error():
    from estimator.config.errors import InputTypeError
    assert issubclass(InputTypeError, TypeError) and issubclass(InputTypeError, estimator.EstimatorError)
    for call, text in ((lambda: estimator.fit(None, 80 * 2 ** 30), "fit() takes an Estimate as estimate, got "
                        "NoneType None; estimator.estimate(config) makes one"),
                       (lambda: estimator.validate({"model": {}}), "validate() takes a Config as cfg, got dict "
                        "{'model': {}}"),
                       (lambda: estimator.format_training_memory_estimate(None), "format_training_memory_estimate() "
                        "takes a TrainingMemoryEstimate as estimate, got NoneType None")):
        try:
            call()
        except InputTypeError as exc:
            assert str(exc).startswith(text), str(exc)
        else:
            raise AssertionError(text)
