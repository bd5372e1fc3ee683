"""The interleaved schedule's micro-batches in flight, against Megatron-Core's schedule worked by hand.

Megatron-Core (d98e8a64) ``pipeline_parallel/schedules.py``: ``get_pp_rank_microbatches`` gives rank r
``W = 2 (p - r - 1) + (v - 1) N`` warm-up forwards (N = microbatch_group_size_per_vp_stage, default p), capped at
m v; ``get_schedule_table`` orders the forwards in groups of N micro-batches, each group through chunk 0, 1, ...
(the last group takes the remaining micro-batches); in the steady state forward W + j runs before backward j, and
backward j runs chunk v - 1 - chunk(j).
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_config
from estimator.memory.assemble import in_flight
from estimator.model.resolve import resolve
from estimator.memory.schedule import first_chunks, heaviest_mix, held_counts, steps, warmup
from tests.conftest import make_config


def test_warmup_counts_by_hand():
    """p 4, v 2, N 4 (default): rank 0 runs 2*3 + 1*4 = 10, rank 3 runs 0 + 4 = 4. N 8: rank 0 runs 6 + 8 = 14.
    1F1B (v 1): p - r - 1. DeepSeek-V3's recipe, p 8, v 4, N 8: rank 0 runs 14 + 24 = 38, rank 7 runs 24."""
    assert [warmup(4, r, 2, 4, 64) for r in range(4)] == [10, 8, 6, 4]
    assert warmup(4, 0, 2, 8, 64) == 14
    assert [warmup(4, r, 1, 4, 64) for r in range(4)] == [3, 2, 1, 0]
    assert (warmup(8, 0, 4, 8, 256), warmup(8, 7, 4, 8, 256)) == (38, 24)
    assert warmup(4, 0, 2, 4, 3) == 6          # capped at m v = 3 * 2


def test_schedule_table_order():
    """Megatron's docstring example, PP 2, N 3, M 5, VP 2: chunk ids 0 0 0 1 1 1 0 0 1 1."""
    assert first_chunks(2, 3, 5, 10) == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_held_mix_by_hand():
    """p 2, v 2, N 2, m 4: table chunks 0 0 1 1 0 0 1 1.

    Rank 0: W = 2 + 2 = 4. Before backward j it holds forwards 0..4+j minus backwards 0..j-1 (chunks 1 1 0 0 ...):
    j=0: 0 0 1 1 0 -> (3, 2); j=1: + 0, - 1 -> (4, 1); j=2: + 1, - 1 -> (4, 1); j=3: + 1, - 0 -> (3, 2).
    Rank 1: W = 2: j=0: 0 0 1 -> (2, 1); j=1: + 1, - 1 -> (2, 1); j=2: + 0, - 1 -> (3, 0); j=3: + 0, - 0 -> (3, 0);
    j=4: + 1, - 0 -> (2, 1); j=5: + 1, - 1 -> (2, 1)."""
    assert held_counts(2, 0, 2, 2, 4) == ((3, 2), (4, 1))
    assert held_counts(2, 1, 2, 2, 4) == ((2, 1), (3, 0))
    assert held_counts(4, 0, 1, 4, 64) == ((4,),) and held_counts(4, 3, 1, 4, 2) == ((1,),)


def _simulate(p, r, v, N, m):
    """Megatron's schedule table and steady state, step by step (an independent transcription of the rules)."""
    table = []
    for g0 in range(0, m, N):
        size = m - g0 if g0 + N >= m else N
        table += [c for c in range(v) for _ in range(size)]
    W = min(2 * (p - r - 1) + (v - 1) * N, m * v)
    if W >= m * v:
        return {(m,) * v}
    out = set()
    for j in range(m * v - W):
        held = [0] * v
        for k in range(W + j + 1):
            held[table[k]] += 1
        for k in range(j):
            held[v - 1 - table[k]] -= 1
        out.add(tuple(held))
    return out


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("v", [2, 3])
def test_held_mixes_equal_a_step_by_step_simulation(p, v):
    for N in range(p, p + 4):
        for m in range(1, 3 * N + 2):
            for r in range(p):
                assert set(held_counts(p, r, v, N, m)) == _simulate(p, r, v, N, m), (p, r, v, N, m)


def test_in_flight_follows_the_group_size():
    """p 4, v 2, m 16: with the default group N = 4 rank 0 holds 11 (chunks 0 x4, 1 x4, 0 x3); with N 8 it holds
    2*3 + 8 + 1 = 15 (chunk 0 x8, then chunk 1 x7)."""
    model = dict(num_layers=8, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256)
    par = {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2}
    r = resolve(load_config(make_config(model, par, {"world_size": 4, "global_batch_size": 16})))
    assert in_flight(r, 0) == [0] * 4 + [1] * 4 + [0] * 3
    par["microbatch_group_size_per_vp_stage"] = 8
    cfg = load_config(make_config(model, par, {"world_size": 4, "global_batch_size": 16}))
    assert in_flight(resolve(cfg), 0) == [0] * 8 + [1] * 7
    assert [s.microbatches_in_flight for s in estimate(cfg).stages] == [15, 13, 11, 9]


@pytest.mark.parametrize("group, gbs, words", [
    (2, 16, "must be >= pipeline_model_parallel_size (4)"),
    (32, 16, "16 micro-batches per step; the interleaved schedule"),
    (6, 16, "the last group holds 4"),   # 16 % 6 = 4 >= p: allowed, checked below
    (5, 16, "leave a last group of 1"),
])
def test_group_size_rules(group, gbs, words):
    """schedules.py: N in [p, m], and m % N is 0 or at least p."""
    model = dict(num_layers=8, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256)
    cfg = make_config(model, {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2,
                              "microbatch_group_size_per_vp_stage": group}, {"world_size": 4, "global_batch_size": gbs})
    if group == 6:
        load_config(cfg)
        return
    with pytest.raises(ConfigError, match="microbatch_group_size_per_vp_stage"):
        load_config(cfg)
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_config(cfg)


def _full_walk_mixes(p, r, v, N, m):
    """Every pass of the step, in order, with the held mix updated pass by pass (O(m v)): Megatron's schedule table
    written out entry by entry (groups of N micro-batches through chunk 0, 1, ..., the last group taking the rest),
    W warm-up forwards, then forward W + j before backward j (on chunk v - 1 - chunk(j)) while forwards remain."""
    table = []
    for g0 in range(0, m, N):
        size = m - g0 if g0 + N >= m else N
        table += [c for c in range(v) for _ in range(size)]
    W = min(2 * (p - r - 1) + (v - 1) * N, m * v)
    held = [0] * v
    for k in range(W):
        held[table[k]] += 1
    if W == m * v:
        return {tuple(held)}
    out = set()
    for j in range(m * v - W):
        held[table[W + j]] += 1
        out.add(tuple(held))
        held[v - 1 - table[j]] -= 1
    return out


@pytest.mark.parametrize("m", [8, 16, 1000])
def test_periodic_shortcut_holds_the_mixes_of_the_full_walk(m):
    """PP 4, VPP 2, N 4: the table is chunk 0 x 4, chunk 1 x 4, repeated. Rank 0 runs W = 2*3 + 4 = 10 warm-up
    forwards (chunks 0000 1111 00: 7 and 3), then forward 10 (chunk 0): (7, 4) before backward 0. Forward 11 is
    chunk 0, backward 0 runs chunk 1 - 0 = 1: (8, 3); forwards 12-15 are chunk 1 and backwards 1-3 free chunk 1:
    (8, 3) each; backward 4 frees chunk 0 (entry 4 is chunk 1): (7, 4). Rank 3: W = 4 (chunks 0000), forward 4
    (chunk 1): (4, 1); forwards 5-7 (chunk 1) against backwards 0-2 (chunk 1): (4, 1); forward 8 (chunk 0) against
    backward 3 (chunk 1): (5, 0); forwards 9-11 (chunk 0) against backwards 4-6 (chunk 0): (5, 0); then back to
    (4, 1). The table repeats every 8 entries, so 8, 16 and 1,000 micro-batches hold the same mixes, which the
    shortcut finds walking one period and the tail (steps: the same runs for 1,000 as for 10**9 micro-batches)."""
    assert held_counts(4, 0, 2, 4, m) == ((7, 4), (8, 3))
    assert held_counts(4, 3, 2, 4, m) == ((4, 1), (5, 0))
    for r in range(4):
        assert set(held_counts(4, r, 2, 4, m)) == _full_walk_mixes(4, r, 2, 4, m)
    assert [run.count for run in steps(4, 0, 2, 4, 1000)[2]] == [run.count for run in steps(4, 0, 2, 4, 8 * 10**8)[2]]


def test_heaviest_mix_by_hand():
    """Rank 0 of PP 4, VPP 2, N 4 holds (7, 4) or (8, 3) (above). Chunk weights (1, 10): 47 against 38, so (7, 4);
    (10, 1): 74 against 83, so (8, 3); equal weights tie at 55 and Python's max over the sorted mixes takes the
    smaller tuple, (7, 4). The same with 8 * 10**8 micro-batches: the mixes do not depend on m."""
    for m in (16, 8 * 10**8):
        assert heaviest_mix(4, 0, 2, 4, m, (1, 10)) == (7, 4)
        assert heaviest_mix(4, 0, 2, 4, m, (10, 1)) == (8, 3)
        assert heaviest_mix(4, 0, 2, 4, m, (5, 5)) == (7, 4)
    assert heaviest_mix(4, 0, 1, 4, 64, (3,)) == (4,) and heaviest_mix(4, 3, 1, 4, None, (3,)) == (1,)


@pytest.mark.parametrize("p", [2, 3, 5])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_heaviest_mix_is_the_heaviest_of_the_full_walk(p, v):
    """Against max(full walk, key=weight) over the sorted mixes (ties: the smallest tuple), with weights that tie
    (all equal, zeros) and weights that do not (powers of 10), for every rank and group sizes and micro-batch counts
    Megatron accepts."""
    weights = [(1,) * v, tuple(10 ** c for c in range(v)), tuple(10 ** (v - c) for c in range(v)),
               (0,) * (v - 1) + (7,), (7,) + (0,) * (v - 2) + (7,)]
    for N in (p, p + 1, 2 * p + 1):
        for m in sorted({N, 2 * N, 3 * N + p, 5 * N, 7 * N + p + 1}):
            if 0 < m % N < p:
                continue
            for r in range(p):
                mixes = sorted(_full_walk_mixes(p, r, v, N, m))
                for w in weights:
                    expected = max(mixes, key=lambda cnt: sum(k * x for k, x in zip(cnt, w)))
                    assert heaviest_mix(p, r, v, N, m, w) == expected, (p, r, v, N, m, w)


def test_the_work_does_not_grow_with_micro_batches_or_groups():
    """PP 1,024, VPP 9 (an estimate that took minutes): one rank's walk is O(v) runs whatever m and N. Rank 0's
    warm-up is W = 2*1023 + 8 N forwards: the table changes chunk every N entries, so at most v + 1 = 10 runs; the
    cool-down's W backwards as many. The steady state walks at most four periods of N v steps (one before the
    periods left out; the last one, one more and the tail after them): in each period the forward's chunk and the
    backward's chunk change v times each, at most 2 v = 18 runs. In all at most 10 + 4 * 18 + 10 = 92 runs, with
    4,096 or 10**8 micro-batches, groups of 1,024 or 10**6."""
    for m, N in ((4096, 1024), (1024 * 10**5, 1024), (2 * 10**6, 10**6)):
        W, t, runs = steps(1024, 0, 9, N, m)
        assert W == 2 * 1023 + 8 * N
        assert len(runs) <= 92, (m, N)
        # the passes the runs stand for: all 2 m v of them, or a whole number of periods fewer
        passes = sum(run.count * (2 if run.kind == "FB" else 1) + run.skipped for run in runs)
        assert passes == 2 * m * 9
