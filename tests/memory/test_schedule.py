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
from estimator.memory.schedule import first_chunks, held_counts, warmup
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
