"""overlap_dispatch_backward_with_experts_wgrad: the routed experts' weight gradients delayed to the dispatch's
backward (Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/moe_layer.py ``_RegisterDelayedWgradForExperts``,
``_RecordExpertDgradCompletion``; extensions/transformer_engine.py ``TEGroupedLinear``: delay_wgrad_compute).

The model by hand: 2 layers, h = 1024, 8 experts of width fm = 1024 (GeLU, not gated: up = 1), top-2, EP 2,
4,096 tokens a micro-batch, bf16 (B = 2 bytes). Rows per rank R = 4,096 x 2 = 8,192 (balanced); 4 local experts,
so the backward re-sorts the rows: the plain working set is max(fc1's output gradient and data gradient
B R (fm + d), two row copies 2 B R d) = max(32 MiB, 32 MiB) = 32 MiB. Delayed, fc1's and fc2's output gradients
B R (fm up + d) = 32 MiB stay through the re-sorting and the all-to-all's backward (2 B R d = 32 MiB): 64 MiB, so
32 MiB more at the backward's peak.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.config.errors import UnsupportedError
from estimator.formats.bridge.config import read_bridge_config
from tests.conftest import make_config

MIB = 2 ** 20
MODEL = dict(num_layers=2, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=1024,
             num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=1024, activation_func="gelu",
             gated_linear_unit=False)


def stage(on, training=None, precision=None, model=None):
    tr = {"seq_length": 4096, "world_size": 2, "overlap_dispatch_backward_with_experts_wgrad": on, **(training or {})}
    return estimate(make_config({**MODEL, **(model or {})}, {"expert_model_parallel_size": 2}, tr,
                                precision)).stages[0]


def test_kept_output_gradients_through_the_dispatch_backward():
    """64 - 32 = 32 MiB more (module docstring)."""
    assert stage(True).allocated_bytes - stage(False).allocated_bytes == 32 * MIB


def test_without_gradient_accumulation_fusion_the_packed_gradients_are_alive_too():
    """Without fusion the grouped GEMM's packed [experts, out, in] gradients and their .grad copies are alive in the
    window too: 2 x B x 4 local experts x (1024 x 1024 + 1024 x 1024) = 32 MiB, so 96 - 32 = 64 MiB more."""
    off = {"gradient_accumulation_fusion": False}
    assert stage(True, off).allocated_bytes - stage(False, off).allocated_bytes == 64 * MIB


def test_no_grouped_gemm_no_delay():
    """Only TEGroupedLinear delays its weight gradients for this flag: the sequential experts' do not."""
    m = {"moe_grouped_gemm": False}
    assert stage(True, model=m).allocated_bytes == stage(False, model=m).allocated_bytes


@pytest.mark.parametrize("other", ["overlap_moe_expert_parallel_comm", "delay_wgrad_compute"])
def test_megatron_core_rules(other):
    """transformer_config.py __post_init__: neither expert-parallel overlap nor delay_wgrad_compute with it."""
    extra = {other: True}
    if other == "delay_wgrad_compute":
        extra["overlap_moe_expert_parallel_comm"] = True
    with pytest.raises(ConfigError) as exc:
        stage(True, extra)
    assert any(p.field == "training.overlap_dispatch_backward_with_experts_wgrad" for p in exc.value.problems)


def test_fp8_is_refused_as_not_modelled():
    with pytest.raises(UnsupportedError, match="overlap_dispatch_backward_with_experts_wgrad with FP8"):
        stage(True, {"use_distributed_optimizer": True}, {"fp8": True, "fp8_recipe": "tensorwise"})


def test_bridge_field_is_read():
    cfg = read_bridge_config({"model": {"num_layers": 2, "hidden_size": 1024, "num_attention_heads": 8,
                                        "ffn_hidden_size": 4096, "vocab_size": 1024, "seq_length": 4096,
                                        "num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 1024,
                                        "expert_model_parallel_size": 2,
                                        "overlap_dispatch_backward_with_experts_wgrad": True},
                              "train": {"micro_batch_size": 1}}, world_size=2).config
    assert cfg["training"]["overlap_dispatch_backward_with_experts_wgrad"] is True
