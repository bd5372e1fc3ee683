"""The memory timeline of one training step (estimator/memory/timeline.py): hand-checked events, and its peak equal
to the estimate's peak for every stage of every preset and of many layouts.

The hand-checked cases use the small GPT model of tests/memory/test_memory.py: L=4, h=1024, a=8 heads (MHA), GeLU
MLP f=4096, vocabulary 32000, s=2048, b=1, bf16, flash attention. One decoder layer keeps 67,174,400 bytes
of activations per micro-batch (worked out in test_memory.test_dense_layer_activations_by_hand).
"""

from __future__ import annotations

import pytest

from estimator import estimate, list_presets, load_preset
from estimator.memory import timeline
from estimator.memory.timeline import PERSISTENT, stage_timelines
from estimator.web.charts import timeline_view as view
from tests.conftest import make_config

LAYER_ACTS = 67_174_400
MODEL = dict(num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def est(parallelism=None, training=None, model=None, precision=None):
    tr = {"seq_length": 2048, "world_size": 1, "micro_batch_size": 1}
    tr.update(training or {})
    return estimate(make_config({**MODEL, **(model or {})}, parallelism, tr, precision))


def heights(line) -> list[tuple[str, int]]:
    base = line["points"][0]["bytes"]
    return [(p["phase"], p["bytes"] - base) for p in line["points"]]


def test_one_f_one_b_first_stage_by_hand():
    """PP 2, 4 micro-batches, 2 GPUs. Stage 0 holds layers 0-1 and the embedding (no dropout: no activations
    of its own), so one micro-batch leaves a = 2 x 67,174,400 = 134,348,800 bytes. Rank 0 runs p - 0 - 1 = 1
    warm-up forward, then F2 B1 F3 B2 F4 B3, then B4. Above the base (model states + persistent buffers):
    F1 a, F2 2a, B1 2a + w, after a, F3 2a, B2 2a + w, after a, F4 2a, B3 2a + w, after a, B4 a + w, after 0,
    and the optimizer step at the base; w is the stage's backward working set."""
    e = est({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 4})
    line = stage_timelines(e)[0]
    a = 2 * LAYER_ACTS
    w = line["working_set_bytes"]
    assert line["activations_per_microbatch"] == [a]
    assert heights(line) == [("start", 0), ("forward", a), ("forward", 2 * a), ("backward", 2 * a + w), ("after", a),
                             ("forward", 2 * a), ("backward", 2 * a + w), ("after", a),
                             ("forward", 2 * a), ("backward", 2 * a + w), ("after", a),
                             ("backward", a + w), ("after", 0), ("optimizer", 0)]
    s = e.stages[0]
    assert line["base_bytes"] == s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + sum(
        s.transient.get(k, 0) for k in PERSISTENT)
    assert line["peak_bytes"] == s.allocated_bytes
    assert line["points"][line["peak_index"]]["phase"] == "backward"


def test_last_stage_runs_forward_then_backward():
    """Stage 1 of the same run has no warm-up: F1 B1 F2 B2 ... Each micro-batch leaves its 2 layers plus the
    output activations (final norm input and output 4 T h = 8,388,608 and the fp32 logits 4 T V = 262,144,000,
    T = 2048 tokens), so a = 134,348,800 + 270,532,608 = 404,881,408, and it never holds more than one."""
    e = est({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 4})
    line = stage_timelines(e)[1]
    a = 2 * LAYER_ACTS + 270_532_608
    w = line["working_set_bytes"]
    assert line["activations_per_microbatch"] == [a]
    assert heights(line)[:4] == [("start", 0), ("forward", a), ("backward", a + w), ("after", 0)]
    assert max(b for _, b in heights(line)) == a + w


def test_long_steady_state_is_drawn_once_with_what_was_left_out():
    """128 micro-batches on PP 2: the 1F1B cycles of the steady state repeat exactly; all but the first few
    are left out, and the passes left out plus those drawn are all 2 x 128 passes."""
    e = est({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 128})
    for line in stage_timelines(e):
        pts = line["points"]
        assert len(pts) < 40
        drawn = sum(p["phase"] in ("forward", "backward") for p in pts)
        assert drawn + sum(p.get("skipped", 0) for p in pts) == 2 * 128


def test_interleaved_chunks_follow_megatrons_table():
    """PP 2, VPP 2, 4 micro-batches, group 2 (the default p): rank 0 runs 2 (p - 1) + (v - 1) 2 = 4 warm-up
    forwards, in the table's order (mb 1, 2 on chunk 0, then mb 1, 2 on chunk 1), so the first points are the
    forwards of micro-batches 1, 2 of chunk 0 and 1, 2 of chunk 1, then forward 3 of chunk 0 and the first
    backward, which runs chunk 1 (v - 1 - 0)."""
    e = est({"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2},
            {"world_size": 2, "global_batch_size": 4})
    labels = [p["label"] for p in stage_timelines(e)[0]["points"][1:7]]
    assert labels == ["forward micro-batch 1, chunk 0", "forward micro-batch 2, chunk 0",
                      "forward micro-batch 1, chunk 1", "forward micro-batch 2, chunk 1",
                      "forward micro-batch 3, chunk 0", "backward micro-batch 1, chunk 1 (+ backward working set)"]


LAYOUTS = [
    ({"pipeline_model_parallel_size": 4}, {"world_size": 4, "global_batch_size": 16}),
    ({"pipeline_model_parallel_size": 4}, {"world_size": 4, "global_batch_size": 2}),   # fewer micro-batches
    ({"pipeline_model_parallel_size": 4}, {"world_size": 4}),                            # no global batch
    ({"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2},
     {"world_size": 2, "global_batch_size": 6}),                                          # a partial last group
    ({"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2},
     {"world_size": 2}),
    ({"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2,
      "microbatch_group_size_per_vp_stage": 3}, {"world_size": 2, "global_batch_size": 9}),
    ({"pipeline_model_parallel_size": 2, "num_layers_in_first_pipeline_stage": 1},
     {"world_size": 2, "global_batch_size": 8}),
    ({"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Ett|t|t|L"},
     {"world_size": 2, "global_batch_size": 8}),
    ({"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "E|tt|t|tL"},
     {"world_size": 2, "global_batch_size": 12}),
    ({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 8,
                                          "recompute_granularity": "full", "recompute_method": "uniform",
                                          "recompute_num_layers": 1}),
    ({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 8,
                                          "recompute_granularity": "full", "recompute_method": "block",
                                          "recompute_num_layers": 1}),
    ({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 8,
                                          "recompute_granularity": "selective",
                                          "recompute_modules": ["core_attn", "mlp", "layernorm"]}),
]


@pytest.mark.parametrize("par,tr", LAYOUTS)
def test_timeline_peak_is_the_estimate_peak_across_layouts(par, tr):
    e = est(par, tr)
    for line, s in zip(stage_timelines(e), e.stages):
        assert line["peak_bytes"] == s.allocated_bytes, s.stage


MOE = dict(num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=1024, moe_shared_expert_intermediate_size=1024,
           moe_layer_freq=[0, 1, 1, 1], mtp_num_layers=1)


@pytest.mark.parametrize("par,tr", [
    ({"pipeline_model_parallel_size": 2, "expert_model_parallel_size": 2}, {"world_size": 4, "global_batch_size": 8}),
    ({"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2,
      "pipeline_model_parallel_layout": "Et|t|t|tmL"}, {"world_size": 2, "global_batch_size": 4}),
    ({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 8,
                                          "recompute_granularity": "selective",
                                          "recompute_modules": ["moe_act", "shared_experts"]}),
])
def test_timeline_peak_is_the_estimate_peak_with_moe_and_mtp(par, tr):
    e = est(par, tr, MOE)
    for line, s in zip(stage_timelines(e), e.stages):
        assert line["peak_bytes"] == s.allocated_bytes, s.stage


@pytest.mark.parametrize("name", list_presets())
def test_timeline_peak_is_the_estimate_peak_for_every_preset(name):
    e = estimate(load_preset(name))
    v = view(e, capacity=80 * 2 ** 30, gpu="H100")
    for line, s in zip(v["stages"], e.stages):
        assert line["peak_bytes"] == s.allocated_bytes, (name, s.stage)
        assert line["points"][line["peak_index"]]["bytes"] == line["peak_bytes"]
        assert line["points"][0]["phase"] == "start" and line["points"][-1]["phase"] == "optimizer"
    assert v["peak_stage"] == e.peak.stage
    assert v["peak_bytes"] == e.peak.allocated_bytes


def test_optimizer_step_is_the_last_segment_and_can_be_the_peak():
    """bf16 gradients (accumulate_allreduce_grads_in_fp32: false), full recompute, short sequences: the
    optimizer step's fp32 gradient copies (4 B per parameter) make the step the peak (estimator/memory/optimizer_step.py).
    The timeline's last point is the step at the estimate's optimizer_step_bytes, its peak; the forward/backward
    part still rises to the estimate's forward_backward_bytes."""
    e = est(training={"seq_length": 128, "global_batch_size": 1, "recompute_granularity": "full"},
            precision={"accumulate_allreduce_grads_in_fp32": False})
    s = e.stages[0]
    assert s.peak_phase == "optimizer_step" and s.activations_bytes == 0
    line = stage_timelines(e)[0]
    assert line["points"][-1]["phase"] == "optimizer" and line["points"][-1]["bytes"] == s.optimizer_step_bytes
    assert line["peak_bytes"] == s.allocated_bytes == s.optimizer_step_bytes
    assert max(p["bytes"] for p in line["points"][:-1]) == s.forward_backward_bytes


def test_recipe_features_keep_the_peak():
    """With a recipe feature adjusting the activations (FSDP with activation offloading, LoRA), the timeline's
    peak is still the estimate's for every stage."""
    for name in ("llama-3-70b-fsdp", "llama-3-70b-lora"):
        e = estimate(load_preset(name))
        for line, s in zip(stage_timelines(e), e.stages):
            assert line["peak_bytes"] == s.allocated_bytes, (name, s.stage)


def _full_walk(p, v, N, m, rank):
    """Megatron's order written out pass by pass, independently of estimator.memory.timeline: the schedule table
    (groups of N micro-batches through chunk 0, 1, ..., the last group taking the rest), W warm-up forwards,
    then forward W + j and backward j (on chunk v - 1 - chunk(j)), then the remaining backwards."""
    table = []
    for g0 in range(0, m, N):
        size = min(N, m - g0)
        for c in range(v):
            table += [(g0 + i, c) for i in range(size)]
    W = min(2 * (p - rank - 1) + (v - 1) * N, m * v) if v > 1 else min(p - rank - 1, m)
    out = [("F", *table[k]) for k in range(W)]
    for j in range(m * v):
        if W + j < m * v:
            out.append(("F", *table[W + j]))
        mb, c = table[j]
        out.append(("B", mb, v - 1 - c))
    return out


@pytest.mark.parametrize("p,v,N,m", [(4, 1, 4, 64), (4, 2, 4, 64), (4, 3, 5, 47), (2, 4, 2, 30), (8, 2, 8, 100),
                                     (3, 2, 4, 9)])
def test_left_out_window_changes_nothing_it_keeps(p, v, N, m):
    """The walk leaves out a window of steady-state steps (see timeline._passes). Against the full walk, with
    chunks of very different weights (1, 10, 100, ...) so that every mix of chunks has its own total: each
    pass kept is the same pass of the full walk, the activations held after it are the same, and the highest
    point of the full walk is kept."""
    from types import SimpleNamespace
    from estimator.memory.timeline import _passes
    act = [10 ** c for c in range(v)]
    for rank in range(p):
        full = _full_walk(p, v, N, m, rank)
        kept = _passes(SimpleNamespace(p=p, v=v, group=N, m=m), rank)
        held, k, highest = 0, 0, 0
        full_held = []
        for kind, _, c in full:
            held += act[c] if kind == "F" else -act[c]
            full_held.append(held)
        held = 0
        for kind, mb, c, gap in kept:
            k += gap
            assert full[k] == (kind, mb, c)
            held += act[c] if kind == "F" else -act[c]
            assert held == full_held[k]
            highest = max(highest, held)
            k += 1
        assert k == len(full) == 2 * m * v
        assert highest == max(full_held)
        if m >= 30:
            assert any(gap for *_, gap in kept), "nothing left out"


def test_runs_drawn_by_their_ends_by_hand(monkeypatch):
    """The 1F1B case of test_one_f_one_b_first_stage_by_hand, with every run drawn by its first and last step (as a
    stage of more than timeline.EXACT_PASSES passes is). Rank 0 of PP 2 with 4 micro-batches: a warm-up run (F1),
    a steady run of 3 steps (F2 B1, F3 B2, F4 B3: each adds a and frees a) and a cool-down run (B4). The steady run
    is drawn by its first step and its last, the 2 passes between (F3, B2) counted on F4: F1 a, F2 2a, B1 2a + w,
    after a, F4 2a (2 left out), B3 2a + w, after a, B4 a + w, after 0, optimizer 0."""
    monkeypatch.setattr(timeline, "EXACT_PASSES", 0)
    e = est({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 4})
    line = stage_timelines(e)[0]
    a, w = 2 * LAYER_ACTS, line["working_set_bytes"]
    assert heights(line) == [("start", 0), ("forward", a), ("forward", 2 * a), ("backward", 2 * a + w), ("after", a),
                             ("forward", 2 * a), ("backward", 2 * a + w), ("after", a),
                             ("backward", a + w), ("after", 0), ("optimizer", 0)]
    assert line["points"][5]["label"] == "forward micro-batch 4" and line["points"][5]["skipped"] == 2
    assert line["peak_bytes"] == e.stages[0].allocated_bytes


def _passes_drawn(line) -> int:
    return sum(p["phase"] in ("forward", "backward") for p in line["points"]) + sum(
        p.get("skipped", 0) for p in line["points"])


@pytest.mark.parametrize("max_runs", [1024, 3])
@pytest.mark.parametrize("par,tr", LAYOUTS)
def test_runs_drawn_by_their_ends_keep_the_peak_and_count_every_pass(monkeypatch, par, tr, max_runs):
    """Drawn by the ends of its runs (and with only 3 runs drawn, evenly spaced, plus the one holding the most
    before a backward pass), every stage still peaks at the estimate's allocated bytes, and the passes drawn plus
    those left out are all 2 m v passes of the step (m = the estimate's micro-batches, or the p (1F1B) or
    N (v + 4) it assumes without a global batch)."""
    monkeypatch.setattr(timeline, "EXACT_PASSES", 0)
    monkeypatch.setattr(timeline, "MAX_RUNS", max_runs)
    e = est(par, tr)
    m = e.parallel["num_microbatches"] or (e.parallel["pp"] if e.parallel["vpp"] == 1
                                           else e.parallel["microbatch_group_size"] * (e.parallel["vpp"] + 4))
    for line, s in zip(stage_timelines(e), e.stages):
        assert line["peak_bytes"] == s.allocated_bytes, s.stage
        assert _passes_drawn(line) == 2 * m * e.parallel["vpp"]


def test_huge_pipelines_are_drawn_in_bounded_points():
    """PP 1,024 x VPP 9 of the tiny model (9,216 layers, 4,096 micro-batches): rank 0 alone runs 2 * 4,096 * 9 =
    73,728 passes, 10,238 of them warm-up forwards. Each stage drawn has at most timeline.MAX_POINTS points (thinned:
    the lowest and highest of equal slices), its highest point is still the estimate's peak, and the passes drawn
    plus those left out are still all 73,728. A 1F1B step of 10**8 micro-batches on PP 2 likewise."""
    cfg = make_config({**load_preset("tiny").to_dict()["model"], "num_layers": 9216},
                      {"pipeline_model_parallel_size": 1024, "virtual_pipeline_model_parallel_size": 9},
                      {"world_size": 1024, "global_batch_size": 2 * 1024 * 4, "micro_batch_size": 2, "seq_length": 256})
    e = estimate(cfg)
    for line in stage_timelines(e, [0, 511, 1023]):
        s = e.stages[line["stage"]]
        assert len(line["points"]) <= timeline.MAX_POINTS
        assert any(p.get("thinned") for p in line["points"]) or line["stage"]
        assert line["peak_bytes"] == s.allocated_bytes
        assert _passes_drawn(line) == 2 * 4096 * 9
    e = est({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 10**8})
    for line, s in zip(stage_timelines(e), e.stages):
        assert len(line["points"]) <= 16 and line["peak_bytes"] == s.allocated_bytes
        assert _passes_drawn(line) == 2 * 10**8
