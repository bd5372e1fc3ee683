"""The GPU architecture of a configuration (``training.gpu_arch``, estimator/config/derived.py) and the quantization
recipes Transformer Engine refuses on it (estimator/config/rules/precision.py), by TransformerEngine @ d0067d0d :
transformer_engine/pytorch/quantization.py ``_compute_fp8_support`` (8.9), ``_compute_fp8_block_scaling_support``
(9.0), ``_compute_mxfp8_support`` (10.x, 11.x) and ``_compute_nvfp4_support`` (10.0): its autocast raises, so a
refusal, not a warning."""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_config
from estimator.config.derived import compute_capability, gpu_arch
from tests.conftest import make_config

MODEL = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1024}


def _cfg(arch=None, **precision):
    return make_config(MODEL, training={"seq_length": 256, **({"gpu_arch": arch} if arch else {})},
                       precision=precision)


def test_compute_capability_read_from_the_name():
    assert [compute_capability(a) for a in ("sm_80", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120", "gfx942",
                                            "gfx950")] == [(8, 0), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0), (9, 4),
                                                           (9, 5)]


def test_without_a_gpu_hopper_is_assumed_and_said():
    """Hopper by default; Blackwell for MXFP8 and NVFP4, the recipes that need it. The estimate says which and that it
    was assumed (to_dict's gpu_arch, and a sentence of the assumptions)."""
    assert gpu_arch(load_config(_cfg())) == "sm_90"
    assert gpu_arch(load_config(_cfg(fp8=True, fp8_recipe="mxfp8"))) == "sm_100"
    assert gpu_arch(load_config(_cfg(fp4=True))) == "sm_100"
    assert gpu_arch(load_config(_cfg("sm_103"))) == "sm_103"
    e = estimate(_cfg())
    assert e.to_dict()["gpu_arch"] == {"arch": "sm_90", "compute_capability": "9.0", "assumed": True}
    assert any(a.startswith("No GPU named: sm_90 (Hopper") for a in e.assumptions)
    e = estimate(_cfg("sm_100"))
    assert e.to_dict()["gpu_arch"] == {"arch": "sm_100", "compute_capability": "10.0", "assumed": False}


@pytest.mark.parametrize("arch, precision, field, words", [
    ("sm_90", {"fp8": True, "fp8_recipe": "mxfp8"}, "precision.fp8_recipe", "MXFP8 needs sm_100 or sm_103"),
    ("sm_120", {"fp8": True, "fp8_recipe": "mxfp8"}, "precision.fp8_recipe", "MXFP8 needs sm_100 or sm_103"),
    ("sm_90", {"fp4": True}, "precision.fp4", "NVFP4 needs a Blackwell GPU"),
    ("sm_80", {"fp8": True}, "precision.fp8", "FP8 needs compute capability 8.9"),
    ("sm_89", {"fp8": True, "fp8_recipe": "blockwise"}, "precision.fp8_recipe", "blockwise FP8 scaling needs"),
])
def test_recipes_the_gpu_cannot_run_are_refused(arch, precision, field, words):
    with pytest.raises(ConfigError) as exc:
        load_config(_cfg(arch, **precision))
    (p,) = [p for p in exc.value.problems if p.field == field]
    assert words in p.message and arch in p.message


@pytest.mark.parametrize("arch, precision", [
    ("sm_100", {"fp8": True, "fp8_recipe": "mxfp8"}), ("sm_103", {"fp8": True, "fp8_recipe": "mxfp8"}),
    ("sm_120", {"fp4": True}), ("sm_89", {"fp8": True, "fp8_recipe": "tensorwise"}),
    ("sm_90", {"fp8": True, "fp8_recipe": "blockwise"}), (None, {"fp8": True, "fp8_recipe": "mxfp8"}),
    ("gfx950", {"fp8": True, "fp8_recipe": "mxfp8"}),      # ROCm's Transformer Engine is not checked
])
def test_recipes_the_gpu_runs_are_accepted(arch, precision):
    load_config(_cfg(arch, **precision))
