"""The MoE routing headroom (estimator/plan/headroom.py): the largest overload factor at which a layout still fits.

The hand-worked case: 2 MoE layers, h 256, 4 heads, vocabulary 128, 16 experts of width 64, top-4, SwiGLU, bf16,
sequence 4096, micro-batch 1, EP 4 on 4 GPUs, one pipeline stage. Balanced, a rank's experts receive
4096 x 4 = 16,384 rows. Each more row keeps 896 B in each of the 2 layers' saved activations (the experts'
input 512 B, fc1's output 256 B, the SwiGLU's output 128 B: tests/model/layers/test_overload.py) and 1,024 B more
backward working set (two row-sized copies of the expert-output gradient, 2 x 256 x 2 B), which is the stage's
transient peak here (the loss keeps only 4096 x 128 x 4 B = 2 MiB of fp32 logits). So the stage allocates
2 x 896 + 1,024 = 2,816 B more per row: at factor 1.25 (20,480 rows, 4,096 more) 11,534,336 B more. The device
figure adds the caching allocator's 5 % of it: int(0.05 x allocated) grows by 576,716 or 576,717 B (the rounding
of the balanced figure decides), so with the capacity set to the balanced device figure + 11,534,336 + 576,717 B
the layout fits at 1.25 and not at 1.26 (20,643 rows: 2,816 x 4,259 = 11,993,344 B more allocated).

"Fits" is the verdict's one rule (estimator.formats.gpus.fit): the upper bound, device x (1 + b) with b the MoE
class's measured band, must fit. So each capacity here is the device figure it must hold x (1 + b), rounded up
(:func:`_cap`): the hand-worked byte counts above are unchanged.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import estimator
from estimator import ConfigError, estimate
from estimator.formats.error_bands import band_for
from estimator.formats.gpus import GPUS, usable_bytes
from estimator.plan.headroom import Headroom, describe, overload_headroom
from estimator.validation.known_to_run import load_recipes, recipe_config
from tests.conftest import make_config

MOE = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=128, num_experts=16, moe_router_topk=4,
           moe_ffn_hidden_size=64)
CFG = make_config(MOE, {"expert_model_parallel_size": 4}, {"world_size": 4})


def _cap(device: int, cfg: dict = CFG) -> int:
    """The smallest capacity on which a stage of ``device`` bytes fits by the one rule (nothing kept free)."""
    b = band_for(cfg).fraction
    cap = int(device * (1 + b))
    while usable_bytes(cap, 0.0, b) < device:
        cap += 1
    return cap


def _with(cfg: dict, f: float) -> dict:
    return {**cfg, "training": {**cfg["training"], "moe_overload_factor": f}}


def _device(cfg: dict, f: float) -> int:
    return max(s.device_bytes for s in estimate(_with(cfg, f)).stages)


def test_hand_worked_headroom():
    balanced = estimate(CFG).stages[0]
    at = estimate(_with(CFG, 1.25)).stages[0]
    assert at.allocated_bytes - balanced.allocated_bytes == 11_534_336
    cap = _cap(balanced.device_bytes + 11_534_336 + 576_717)
    h = overload_headroom(CFG, cap)
    assert (h.factor, h.bound, h.at_bound, h.stage) == (1.25, 4.0, False, 0)
    assert overload_headroom(CFG, _cap(balanced.device_bytes)).factor == 1.0          # fits balanced, no more
    assert overload_headroom(CFG, _cap(balanced.device_bytes) - 1).factor is None     # not even balanced
    big = overload_headroom(CFG, 2 ** 50)                                           # 1 PiB: any routing
    assert (big.factor, big.at_bound, big.stage) == (4.0, True, None)


def test_the_headroom_keeps_the_margin_fit_keeps():
    """``headroom`` as in fit(): with half of twice the capacity above kept free, the same 1.25."""
    cap = _cap(estimate(CFG).stages[0].device_bytes + 11_534_336 + 576_717)
    assert overload_headroom(CFG, 2 * cap, 0.5).factor == 1.25


def test_dense_models_have_none_and_bad_input_is_refused():
    dense = make_config(dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=128))
    assert overload_headroom(dense, 2 ** 40) is None
    with pytest.raises(ConfigError, match="gpu_memory"):
        overload_headroom(CFG, 0)
    with pytest.raises(ConfigError, match="headroom"):
        overload_headroom(CFG, 2 ** 40, 1.5)


def test_the_words():
    answer, evidence = describe(Headroom(1.57, 32.0, False, 2, 1, 3))
    assert answer.startswith("MoE routing headroom: fits up to an overload factor of 1.57")
    assert "stage 2" in answer and "1.3 to 4.0" in evidence and "cannot exceed 32" in evidence
    assert "below" not in answer                                   # 1.57: above the least imbalance measured
    assert "below the 1.3 measured" in describe(Headroom(1.22, 16.0, False, 0, 1, 3))[0]
    assert "any routing imbalance" in describe(Headroom(4.0, 4.0, True, None, 1, 1))[0]
    assert "none" in describe(Headroom(None, 4.0, False, 0, 1, 1))[0]


def _moe_cases():
    for name in estimator.list_presets():
        cfg = estimator.load_preset(name)
        if cfg.model.num_experts:
            yield name, cfg.to_dict()
    for rec in load_recipes():
        cfg = recipe_config(rec)
        if (cfg.get("model") or {}).get("num_experts"):
            yield rec["id"], cfg


def test_device_bytes_never_fall_as_the_factor_grows_and_the_answer_is_the_largest_fitting():
    """The search rests on the estimate not decreasing in the factor: checked on 21 points from 1 to the bound for
    every MoE preset and every MoE recipe of validation/known_to_run.yaml (EP overlap, delayed weight gradients,
    the flex dispatcher, CUDA graphs, recompute), and the answer against the estimates either side of it on an
    H100-80GB and a B200-180GB."""
    checked = 0
    for name, cfg in _moe_cases():
        for gpu in ("H100-80GB", "B200-180GB"):
            h = overload_headroom(cfg, GPUS[gpu].memory_bytes)
            cap = usable_bytes(GPUS[gpu].memory_bytes, 0.0, band_for(cfg).fraction)   # the one rule
            prev = 0
            for i in range(21):
                d = _device(cfg, 1 + i * (h.bound - 1) / 20)
                assert d >= prev, (name, i)
                prev = d
            if h.factor is None:
                assert _device(cfg, 1.0) > cap, name
            elif h.at_bound:
                assert _device(cfg, h.bound) <= cap, name
            else:
                assert _device(cfg, h.factor) <= cap < _device(cfg, round(h.factor + 0.01, 2)), name
                assert h.evaluations <= 16
            checked += 1
    assert checked >= 2 * 20


# ------------------------------------------------------------------------------------------------ the paged stash

def _stash_cfg(cuda: float, cpu: float, budget: float) -> dict:
    """tests/memory/features/test_paged_stash.py's model (2 MoE layers, 16 experts, EP 4, HybridEP, MXFP8 with the
    op fuser: Transformer Engine's fused grouped MLP, whose saved tensors the paged stash takes)."""
    from tests.memory.features.test_paged_stash import _cfg
    return _cfg({"moe_paged_stash_buffer_size_factor_cuda": cuda, "moe_paged_stash_buffer_size_factor_cpu": cpu},
                model={"moe_expert_rank_capacity_factor": budget})


def _stashed(cfg: dict, f: float) -> bool:
    return any(s.transient.get("paged_stash_buffers") for s in estimate(_with(cfg, f)).stages)


def _scanned(cfg: dict, limit: int, bound: float) -> float | None:
    """The answer by brute force: the grid point before the first one (from 1.00 up) that does not fit."""
    last = None
    for i in range(100, int(bound * 100 + 1e-9) + 1):
        if _device(cfg, i / 100) > limit:
            return last
        last = i / 100
    return bound


def test_the_paged_stash_makes_the_figure_drop_and_the_search_steps_over_it():
    """GPU stash buffers of 1.2 x the arriving rows (factor -1.2), no host buffer, budget 1.5 x balanced. Up to 1.50
    the stash applies and its buffers grow with the rows: 1,303,160,756 B at 1.00, 1,321,893,160 B at 1.50 (on
    Blackwell, sm_100, which MXFP8 needs; the GEMM workspaces are Hopper's there too). At 1.51
    the routing overflows the budget, the step is rerun without the stash (stage_memory's figure for that rerun) and
    the device figure drops to 1,289,560,552 B, rising again from there (1,321,321,422 B at 2.16, 1,321,806,337 B at
    2.17). With 1,321,800,000 B usable, 1.50 does not fit but 1.51 to 2.16 do: the secant from 1.00 to the bound
    (4.00) lands at 1.51, and the search without the guard answered 2.16. The largest factor up to which every
    factor fits is 1.49 (brute force over the grid)."""
    cfg = _stash_cfg(-1.2, 0.0, 1.5)
    assert (_device(cfg, 1.0), _device(cfg, 1.5), _device(cfg, 1.55)) == (1_303_160_756, 1_321_893_160, 1_291_513_115)
    assert _stashed(cfg, 1.5) and not _stashed(cfg, 1.51)
    cap = _cap(1_321_800_000, cfg)
    usable = usable_bytes(cap, 0.0, band_for(cfg).fraction)
    h = overload_headroom(cfg, cap)
    assert h.factor == _scanned(cfg, usable, h.bound) == 1.49
    assert _device(cfg, 2.16) <= usable < _device(cfg, 1.5)


@settings(max_examples=8, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from((-2.0, -1.2, -0.5, 0.5, 1.0, 1.2, 2.0)), st.sampled_from((0.0, 0.3, 1.0)),
       st.sampled_from((1.5, 3.0)), st.floats(0.0, 1.0))
def test_with_the_paged_stash_every_factor_up_to_the_answer_fits(cuda, cpu, budget, where):
    """Property: whatever the stash's buffer factors and budget, the figure is monotone where the stash applies and
    where it does not (the guard's premise), and the headroom equals the brute-force scan: every grid factor up to
    it fits and the next one does not. The capacity is drawn between the figures at 1.0 and at the bound."""
    cfg = _stash_cfg(cuda, cpu, budget)
    bound = overload_headroom(cfg, GPUS["B200-180GB"].memory_bytes).bound
    xs = [1 + i * (bound - 1) / 40 for i in range(41)]
    points = [(_device(cfg, x), _stashed(cfg, x)) for x in xs]
    for (d0, s0), (d1, s1) in zip(points, points[1:]):
        assert s1 <= s0                          # the stash, once off, stays off as the rows grow
        if s0 == s1:
            assert d1 >= d0                      # monotone on each stretch
    lo, hi = min(d for d, _ in points), max(d for d, _ in points)
    limit = int(lo + where * (hi - lo))
    cap = _cap(limit, cfg)
    usable = usable_bytes(cap, 0.0, band_for(cfg).fraction)
    h = overload_headroom(cfg, cap)
    assert h.factor == _scanned(cfg, usable, bound), (cuda, cpu, budget, limit)
