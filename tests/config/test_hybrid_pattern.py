"""Hybrid layer patterns (estimator/config/hybrid_pattern.py): the deprecated ratios turned into a pattern as
Megatron-Core does (Megatron-LM @ 2a75ac12 : megatron/core/models/hybrid/hybrid_layer_allocation.py
``pattern_from_ratios``)."""

from __future__ import annotations

import pytest

from estimator.config.hybrid_pattern import pattern_from_ratios


def test_attention_ratio_by_hand():
    """10 layers, attention 0.3: a = round(3.0) = 3, 7 Mamba layers in 4 runs of s = 1.75. The counter x starts at
    1.75; per layer: 1.75 M -> 0.75 M -> -0.25 * (+1.75) -> 1.5 M -> 0.5 M (0.5 is not below 0.5) -> -0.5 * ->
    1.25 M -> 0.25 * -> 2.0 M -> 1.0 M: MM*MM*M*MM."""
    assert pattern_from_ratios(10, 0.3) == "MM*MM*M*MM"


def test_mlp_ratio_by_hand():
    """8 layers, attention 0.25 and MLP 0.25. Attention: a = round(2.0) = 2, s = 6 / 3 = 2; x per layer 2 M, 1 M,
    0 * (x = 2), 2 M, 1 M, 0 * (x = 2), 2 M, 1 M: MM*MM*MM. MLP: d = round(2.0) = 2 over the Mamba layers only,
    r = (6 - 2) / 2 = 2; x per Mamba layer 2 (layer 0) M, 1 (layer 1) M, 0 (layer 3) '-' (x = 2), 2 (layer 4) M,
    1 (layer 6) M, 0 (layer 7) '-': MM*-M*M-."""
    assert pattern_from_ratios(8, 0.25, 0.25) == "MM*-M*M-"


def test_megatron_cores_own_cases():
    """Megatron-LM @ 2a75ac12 : tests/unit_tests/ssm/test_hybrid_layer_allocation.py TestPatternFromRatios: pure
    Mamba, one layer each way, and the counts of 10 layers at 0.3 / 0.3 (3 attention, 3 MLP, 4 Mamba)."""
    assert pattern_from_ratios(8) == "MMMMMMMM"
    assert pattern_from_ratios(1, 0.0, 0.0) == "M" and pattern_from_ratios(1, 1.0, 0.0) == "*"
    both = pattern_from_ratios(10, 0.3, 0.3)
    assert (both.count("*"), both.count("-"), both.count("M")) == (3, 3, 4)


@pytest.mark.parametrize("args", [(0, 0.1, 0.0), (4, 1.5, 0.0), (4, 0.6, 0.6), (4, -0.1, 0.0)])
def test_what_megatron_core_asserts_is_a_value_error(args):
    with pytest.raises(ValueError, match="ratios"):
        pattern_from_ratios(*args)
