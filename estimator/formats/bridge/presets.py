"""Megatron-Bridge's mixed-precision presets, as data: what each named preset sets on a ``MixedPrecisionConfig``.

Transcribed by hand (ours) from NVIDIA-NeMo/Megatron-Bridge @ 067f987df03b8355b03192d88d70f1709fedf51a :
src/megatron/bridge/training/mixed_precision.py, the ``@register`` functions. Fields a preset leaves alone keep the
dataclass's defaults (:data:`estimator.formats.bridge.catalog.SECTIONS` ``["mixed_precision"]``); Bridge registers
every name also with hyphens (``bf16-mixed``). Torch dtypes are written as Bridge's YAML writes them.
"""

from __future__ import annotations

__all__ = ["MIXED_PRECISION_PRESETS"]

_BF16 = {"bf16": True, "params_dtype": "torch.bfloat16", "pipeline_dtype": "torch.bfloat16",
         "autocast_enabled": False, "grad_reduce_in_fp32": True}
_FP16 = {"fp16": True, "params_dtype": "torch.float16", "pipeline_dtype": "torch.float16",
         "autocast_enabled": False, "grad_reduce_in_fp32": False}
_DELAYED = {"fp8": "hybrid", "fp8_recipe": "delayed", "fp8_margin": 0, "fp8_amax_history_len": 1024,
            "fp8_amax_compute_algo": "max", "fp8_param_gather": True}
_MXFP8 = {"fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True}
_CURRENT = {"fp8": "hybrid", "fp8_recipe": "tensorwise", "first_last_layers_bf16": True,
            "num_layers_at_start_in_bf16": 1, "num_layers_at_end_in_bf16": 1, "fp8_param_gather": True}
_SUBCHANNEL = {"fp8": "hybrid", "fp8_recipe": "blockwise", "fp8_param_gather": False}
_NVFP4 = {"fp8": None, "fp4": "e2m1", "fp4_recipe": "nvfp4", "fp8_param_gather": False, "fp4_param_gather": True}

_BY_NAME = {
    "bf16_mixed": _BF16,
    "fp16_mixed": _FP16,
    "bf16_with_fp8_delayed_scaling_mixed": {**_BF16, **_DELAYED},
    "fp16_with_fp8_delayed_scaling_mixed": {**_FP16, **_DELAYED},
    "bf16_with_mxfp8_mixed": {**_BF16, **_MXFP8},
    "fp16_with_mxfp8_mixed": {**_FP16, **_MXFP8},
    "bf16_with_fp8_current_scaling_mixed": {**_BF16, **_CURRENT},
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": {**_BF16, **_CURRENT, "num_layers_at_start_in_bf16": 2,
                                                       "num_layers_at_end_in_bf16": 2},
    "nanov2_bf16_with_fp8_current_scaling_mixed": {**_BF16, **_CURRENT, "fp8_recipe": "blockwise",
                                                   "num_layers_at_start_in_bf16": 2, "num_layers_at_end_in_bf16": 2},
    "fp16_with_fp8_current_scaling_mixed": {**_FP16, **_CURRENT},
    "bf16_with_fp8_subchannel_scaling_mixed": {**_BF16, **_SUBCHANNEL},
    "fp16_with_fp8_subchannel_scaling_mixed": {**_FP16, **_SUBCHANNEL},
    "bf16_with_nvfp4_mixed": {**_BF16, **_NVFP4},
    "nemotron_3_super_bf16_with_nvfp4_mixed": {**_BF16, **_NVFP4, "first_last_layers_bf16": True,
                                               "num_layers_at_end_in_bf16": 14},
}

#: Preset name (with underscores or hyphens) -> the fields it sets.
MIXED_PRECISION_PRESETS = {**_BY_NAME, **{k.replace("_", "-"): v for k, v in _BY_NAME.items()}}
