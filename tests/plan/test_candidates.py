"""``estimator.plan.candidates``: the pruning and bisection of "Make it fit"'s candidates find what trying every option
finds.

Each test compares the pruned answer with the one every option, estimated, gives (an in-order scan, a bisection of
every valid option, the least peak of every valid option), on GPUs whose usable memory lies anywhere from below the
lightest to above the heaviest option's peak (``_holding``: the capacity whose usable memory is a given number of
bytes). The levers themselves are :mod:`estimator.plan.suggest`'s.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from estimator.formats.gpus import GPUS
from estimator.formats.presets import load_preset
from estimator.plan.candidates import Candidates, _bisect, _first_fit, _first_fit_monotone, lowest_peak
from estimator.plan.suggest import _full, _levers

from tests.plan.test_suggest import _holding

H100 = GPUS["H100-80GB"].memory_bytes


@settings(max_examples=16, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["qwen3-8b", "llama-3-8b", "gpt-oss-20b", "llama-3.1-405b"]),
       st.sampled_from([{}, {"training.micro_batch_size": 1}, {"parallelism.tensor_model_parallel_size": 8}]),
       st.floats(-0.1, 1.1))
def test_full_recompute_pruning_never_removes_the_answer(preset, base, where):
    """The full-recompute lever skips block options that provably do not fit (``_block_start``: block n keeps at
    least what block m > n keeps, so when block m does not fit with its peak in the forward/backward passes no block
    n < m does). Its first fitting option must be the one an in-order scan of every option finds, on GPUs whose
    usable memory lies anywhere from below the lightest to above the heaviest option's peak (so the answer is any
    block, a uniform group, or none), over changes of the layout the pairs put under it."""
    cfg = load_preset(preset).to_dict()
    probe = Candidates(cfg, H100, 0.0, None)
    options = _full(probe)
    peaks = [p for _, ch in options if (c := probe.valid({**base, **ch})) is not None and (p := probe.peak(c))]
    assume(peaks)
    device = int(min(peaks) + where * (max(peaks) - min(peaks)))
    cap = _holding(max(device, 1), cfg)
    pruned = _first_fit(Candidates(cfg, cap, 0.0, None), base, options, "full")
    scanned = _first_fit(Candidates(cfg, cap, 0.0, None), base, options)
    assert (pruned and pruned[:2]) == (scanned and scanned[:2])


@settings(max_examples=16, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["qwen3-8b", "llama-3-8b", "qwen2.5-7b", "deepseek-v3"]),
       st.sampled_from(["activation_offload", "gpus"]), st.sampled_from([{}, {"parallelism.context_parallel_size": 2}]),
       st.floats(-0.1, 1.1))
def test_monotone_levers_find_what_the_bisection_of_every_valid_option_finds(preset, lever, base, where):
    """More GPUs and more layers offloaded are bisected (``_first_fit_monotone``), estimating only the options probed
    (earlier every option was estimated to know which are valid, then the valid ones bisected). On GPUs anywhere from
    below the lightest to above the heaviest option's peak, over no change and over a larger CP, both find the same
    option (offloading's options are all valid or all invalid; of the GPU counts, those the global batch does not
    divide by are invalid)."""
    cfg = load_preset(preset).to_dict()
    probe = Candidates(cfg, H100, 0.0, None)
    options = _levers(probe).get(lever)
    assume(options)
    peaks = [p for _, ch in options if (c := probe.valid({**base, **ch})) is not None and (p := probe.peak(c))]
    assume(peaks)
    cap = _holding(max(int(min(peaks) + where * (max(peaks) - min(peaks))), 1), cfg)
    lazy = _first_fit_monotone(Candidates(cfg, cap, 0.0, None), base, options)
    ctx = Candidates(cfg, cap, 0.0, None)
    ok = [(lab, ch, c) for lab, ch in options if (c := ctx.valid({**base, **ch})) is not None]
    every = _bisect(ok, ctx.fits) if ctx.fits(ok[-1][2]) else None
    assert (lazy and lazy[:2]) == (every and every[:2])


@pytest.mark.parametrize("preset, lever", [("qwen3-8b", "full"), ("llama-3-8b", "full"), ("gpt-oss-20b", "full"),
                                           ("llama-3.1-405b", "full"), ("qwen3-8b", "activation_offload"),
                                           ("llama-3-8b", "activation_offload"), ("qwen2.5-7b", "activation_offload")])
def test_not_enough_names_the_lowest_peak_of_every_option(preset, lever):
    """"<lever> saves at most X GiB" estimates only the options that can hold the lowest peak (``lowest_peak``: the
    last layer-wise offloading option, the strongest recompute block when it peaks in the forward/backward passes):
    the figure is the least peak over every valid option, each estimated."""
    cfg = load_preset(preset).to_dict()
    ctx = Candidates(cfg, H100, 0.0, None)
    options = _levers(ctx)[lever]
    every = [p for _, ch in options if (c := ctx.valid(ch)) is not None and (p := ctx.peak(c)) is not None]
    assert every and lowest_peak(Candidates(cfg, H100, 0.0, None), lever, options) == min(every)


@pytest.mark.parametrize("preset, gib", [("qwen3-8b", 16), ("qwen2.5-72b", 40), ("deepseek-v3", 40),
                                         ("llama-3.1-405b", 80), ("gpt-oss-20b", 16)])
def test_one_engine_costs_every_candidate_as_its_own_engine_does(preset, gib):
    """``Candidates.cost`` builds the cost model's engine once per :meth:`SearchEngine.inputs_key` (once for the
    configuration and every change of its layout, recompute, micro-batch, optimizer sharding or world size) instead
    of once per candidate. Each candidate's cost must be the one an engine built for that candidate alone gives
    (``fixed_layout`` and ``describe_layout``, as before the reuse): here the weakest and the strongest valid option
    of every lever, alone and with the strongest micro-batch change under it."""
    from types import SimpleNamespace

    from estimator.plan.search import describe_layout, fixed_layout
    cfg = load_preset(preset).to_dict()
    ctx = Candidates(cfg, gib * 2**30, 0.0, None)
    levers = _levers(ctx)
    under = levers["micro_batch"][-1][1] if levers.get("micro_batch") else {}
    found = [cfg] + [c for name, options in levers.items() if name not in ("optimizer_offload", "activation_offload")
                     for base in ({}, under) for _, ch in (options[0], options[-1])
                     if (c := ctx.valid({**base, **ch})) is not None]
    assert len(found) > 10
    for c in found:
        eng, data, config = fixed_layout(c, ctx.capacity, 0.0, 8)
        alone = describe_layout(eng, data, SimpleNamespace(peak=ctx.estimate(c))).cost
        assert ctx.cost(c) == (alone, config.training.world_size)
    assert len(ctx._engines) < len(found) / 3
