"""The paged stash (``moe_paged_stash``, estimator/memory/features/paged_stash.py), by hand from Megatron-LM @ d98e8a64 :
megatron/core/transformer/moe/paged_stash.py (``allocate_stash_buffers``, ``PagedStashBuffer``: whole pages of
``page_size`` rows, GPU rows int(rows x factor) from the balanced record ``budget // factor`` for a positive factor)
and experts.py ``_fused_forward`` (``avg_num_tokens = int(max_num_tokens // cap_factor)``).

The model: 2 MoE layers, h 256, 4 heads, 16 experts of width 128, top-4, SwiGLU, sequence 4096, micro-batch 1, EP 4
on 4 GPUs, HybridEP with budget 1.5, MXFP8 with the op fuser and grouped GEMM (Transformer Engine's fused grouped
MLP). A rank holds 4096 tokens: balanced 16,384 routed rows, budget int(16,384 x 1.5) = 24,576 rows (96 x 256),
6,144 per local expert. Each stashed tensor, per row and in all (24,576 rows):

- the experts' input, MXFP8 column-wise: 256 B of data + scales ceil(6,144 / 32) = 192 rows x 256 columns per
  expert (1 B each) = 4 x 49,152 = 196,608 B: 6,291,456 + 196,608 = 6,488,064 B (264 B a row);
- fc1's output (the SwiGLU's input), bf16 2 x 128 wide: 512 B a row, 12,582,912 B;
- fc2's input, MXFP8: 128 B + 4 x 192 x 128 = 98,304 B of scales: 3,145,728 + 98,304 = 3,244,032 B (132 B a row).

One layer-micro-batch: 22,315,008 B (908 B a row). One pipeline stage, one micro-batch in flight: N = 2.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_config
from estimator.memory.activations import layer_activations
from estimator.memory.features import paged_stash
from estimator.memory.timeline import stage_timelines
from estimator.model.layers import LayerKind
from estimator.model.resolve import resolve
from tests.conftest import make_config

MOE = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=128, num_experts=16, moe_router_topk=4,
           moe_ffn_hidden_size=128, moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep",
           moe_expert_rank_capacity_factor=1.5, moe_grouped_gemm=True)
EP4 = {"expert_model_parallel_size": 4}
STASH = {"world_size": 4, "use_transformer_engine_op_fuser": True, "moe_paged_stash": True,
         "moe_paged_stash_buffer_size_factor_cuda": 1.2, "moe_paged_stash_buffer_size_factor_cpu": 1.0}
MXFP8 = {"fp8": True, "fp8_recipe": "mxfp8"}
KIND = LayerKind("attention", "moe")
LAYER = 22_315_008


def _cfg(tr=None, pr=MXFP8, model=None):
    return make_config({**MOE, **(model or {})}, EP4, {**STASH, **(tr or {})}, pr)


def _stash(tr=None, n=2):
    r = resolve(load_config(_cfg(tr)))
    parts = layer_activations(r, KIND, parts=True).parts
    return paged_stash.stash(r, 4096, 4096, parts, n)


def test_the_stashed_tensors_of_one_layer():
    r = resolve(load_config(_cfg()))
    p = layer_activations(r, KIND, parts=True).parts
    assert (p["expert_in"], p["expert_fc1_out"], p["expert_act_out"]) == (6_488_064, 12_582_912, 3_244_032)


def test_buffers_from_the_balanced_rows():
    """Balanced rows per layer int(24,576 // 1.5) = 16,384; two layers in flight: 32,768.

    GPU   int(32,768 x 1.2) = 39,321 rows -> ceil(39,321 / 64) = 615 pages = 39,360 rows
          x (264 + 512 + 132) B = 35,738,880 B
    host  int(32,768 x 1.0) = 32,768 rows = 512 pages -> 32,768 x 908 = 29,753,344 B
    moved 2 x 22,315,008 = 44,630,016 B; reloaded: one layer, 22,315,008 B."""
    s = _stash()
    assert s == paged_stash.PagedStash(moved=2 * LAYER, buffer=35_738_880, host=29_753_344, reload=LAYER)


def test_page_size_rounds_each_buffer_up():
    """Pages of 4,096 rows: 39,321 -> 10 pages = 40,960 rows x 908 = 37,191,680 B; the host's 32,768 = 8 pages."""
    s = _stash({"moe_paged_stash_page_size": 4096})
    assert (s.buffer, s.host) == (37_191_680, 29_753_344)


def test_a_negative_factor_sizes_from_the_rows_received():
    """Factor -1.2 at overload 1.25: each layer receives int(16,384 x 1.25) = 20,480 rows (within the budget);
    int(2 x 20,480 x 1.2) = 49,152 rows = 768 pages, x 908 B = 44,630,016 B."""
    s = _stash({"moe_paged_stash_buffer_size_factor_cuda": -1.2, "moe_overload_factor": 1.25})
    assert s.buffer == 44_630_016


def test_overflow_reruns_without_the_stash():
    """At overload 1.45 each layer receives int(16,384 x 1.45) = 23,756 rows, within the budget (24,576); the two
    layers' 47,512 rows fit the GPU's 39,360 with the host's 32,768 behind them, but not the GPU's alone (factor_cpu
    0): PagedStashRunner reruns the step without the stash, and the estimate has none. Over the budget (overload
    1.6: 26,214 rows) the step is rerun dropless either way."""
    assert _stash({"moe_overload_factor": 1.45}) is not None
    assert _stash({"moe_overload_factor": 1.45, "moe_paged_stash_buffer_size_factor_cpu": 0.0}) is None
    assert _stash({"moe_overload_factor": 1.6}) is None


def test_the_estimate_moves_the_tensors_into_the_buffers():
    """Against the same run without the stash: activations -44,630,016 + 22,315,008 B, the GPU buffers +35,738,880 B
    (kept through the optimizer step), 29,753,344 B of pinned host memory beside the device figures."""
    on, off = estimate(_cfg()).stages[0], estimate(_cfg({"moe_paged_stash": False})).stages[0]
    assert on.activations["paged_stash_moved"] == -2 * LAYER and on.activations["paged_stash_reload"] == LAYER
    assert on.transient["paged_stash_buffers"] == 35_738_880
    assert on.host == {"paged_stash_pinned": 29_753_344} and on.host_bytes == 29_753_344
    assert on.activations_bytes - off.activations_bytes == LAYER - 2 * LAYER
    assert on.peak_phase == off.peak_phase == "forward_backward"
    assert on.allocated_bytes - off.allocated_bytes == 35_738_880 - LAYER    # two layers in flight: the stash costs
    e = estimate(_cfg())
    assert [line["peak_bytes"] for line in stage_timelines(e)] == [s.allocated_bytes for s in e.stages]


@pytest.mark.parametrize("tr, pr", [
    ({"use_transformer_engine_op_fuser": False}, MXFP8),     # the unfused experts: nothing is marked
    ({}, {"fp8": True, "fp8_recipe": "tensorwise"}),         # no fused grouped MLP outside mxfp8 / nvfp4
    ({}, {}),                                                # bf16
])
def test_nothing_is_stashed_outside_the_fused_grouped_mlp(tr, pr):
    """Only Transformer Engine's fused grouped MLP (ops/fused/grouped_mlp.py ``mark_grouped_tensor``) marks its saved
    tensors; elsewhere the stash takes nothing and allocates no buffer: the estimate is the budget's alone."""
    on = estimate(_cfg(tr, pr))
    off = estimate(_cfg({**tr, "moe_paged_stash": False}, pr))
    assert [s.allocated_bytes for s in on.stages] == [s.allocated_bytes for s in off.stages]
    assert any("takes nothing here" in a for a in on.assumptions)


@pytest.mark.parametrize("model, tr, words", [
    ({"moe_expert_rank_capacity_factor": None}, {}, "needs moe_expert_rank_capacity_factor"),
    ({}, {"cpu_offloading": True, "cpu_offloading_num_layers": 1}, "cannot be enabled with cpu_offloading"),
])
def test_megatron_core_rules(model, tr, words):
    with pytest.raises(ConfigError) as exc:
        load_config(_cfg(tr, model=model))
    assert any(p.field == "training.moe_paged_stash" and words in p.message for p in exc.value.problems)
