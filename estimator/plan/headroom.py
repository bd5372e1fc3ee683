"""How much MoE routing imbalance a layout can take: the largest overload factor at which it still fits a GPU.

The estimate of an MoE model is that of the busiest expert-parallel rank receiving ``training.moe_overload_factor``
times its balanced share of routed token rows (:mod:`estimator.model.layers.moe`; 1.0 balanced). Real routing is
less even than balanced, above all early in training, and a layout that fits balanced may run out of memory at
step N when one rank's experts receive more (the methodology page gives measured factors).
:func:`overload_headroom` answers "up to which factor does every stage still fit?":

    factor = max { f on a 0.01 grid in [1, F] : device_bytes(f) <= usable for every stage }
    usable = capacity x (1 - keep_free) / (1 + band)     (the one fit rule, estimator.formats.gpus.usable_bytes)

where F is the layout's physical bound (:func:`estimator.config.derived.max_overload_factor`: every token's rows on
one rank, or the capacity factor with token dropping), reported exactly when the layout fits even there, and
``device_bytes(f)`` is the estimate with the factor set to f, the same figure :func:`estimator.formats.gpus.fit`
holds against the GPU. The factor is rounded down, so the layout fits at the factor given.

The search relies on ``device_bytes`` not decreasing in f: every tensor the factor scales is counted with a
positive sign in every phase whose maximum makes the peak, and the tensors freed in a window (delayed weight
gradients, the embedding's weight gradient) are subtracted from a total that holds them. One exception, guarded:
with the paged stash (``training.moe_paged_stash``, :mod:`estimator.memory.features.paged_stash`) the figure drops
(by up to tens of MB) where the routing overflows the budget or the stash buffers and the step is rerun without the
stash. The search then first finds, by bisection on whether any stage holds stash buffers, the last grid point g
where the stash applies; if g does not fit, the answer lies in [1, g), where the figure is monotone; if it fits, so
does all of [1, g], and the search goes on above g, monotone again. So the factor reported is one up to which every
factor fits. It is piecewise linear
and convex in f up to the rounding of rows to whole numbers (a maximum over stages and phases of terms linear in
the routed rows), so a secant step from the fitting end lands on a fitting point and the search usually closes
after two or three estimates beyond the two ends; a bisection step follows any secant step that fails to halve
the bracket, so at most about log2(100 F) + 2 estimates are taken. Each is the per-stage assembly alone
(:func:`estimator.memory.assemble.stage_memory` on the resolved configuration, resolved once): 0.3 to 2.4 ms in
CPython for the MoE presets; ``evaluations`` says how many were taken. The calculator computes it with every answer
for an MoE model on a GPU: on DeepSeek-V3 over 1,024 H100s (benchmarks/calculator.py's input-change measure, Pyodide
in headless Chromium on 2 shared cores) Python's part of an answer went from 8-9 ms to 12 ms (median), the change
to the rendered table from 28-33 ms to 33-37 ms, under its 50 ms target.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..formats.error_bands import band_for
from ..formats.gpus import usable_bytes
from ..config.derived import max_overload_factor
from ..config.errors import ConfigError, Problem, show
from ..config.load import load_config
from ..config.schema import Config
from ..formats.gpus import GPU, MAX_CAPACITY_BYTES
from ..memory.assemble import stage_memory
from ..memory.report import Estimate
from ..model.resolve import resolve

__all__ = ["GRID", "Headroom", "MEASURED_UNBALANCED", "describe", "overload_headroom"]

#: The factors reported: hundredths (1.00, 1.01, ...), rounded down.
GRID = 100

#: Overload factors measured without forced balancing or per-micro-batch rebalancing: the inter-rank imbalance of
#: MoE models of 106B to 671B parameters in training and prefill, 1.30 to 4.01 (Wei et al., "UltraEP: Unleash MoE
#: Training and Inference on Rack-Scale Nodes with Near-Optimal Load Balancing", arXiv 2606.04101, abstract). The
#: methodology page gives the rest of the evidence.
MEASURED_UNBALANCED = (1.30, 4.01)


@dataclass(frozen=True)
class Headroom:
    """The largest MoE overload factor at which every stage fits a capacity."""

    factor: float | None   # largest fitting factor (a hundredth, rounded down; the bound itself when at_bound);
                           # None when the layout does not fit even with balanced routing
    bound: float           # the layout's physical maximum (estimator.config.derived.max_overload_factor)
    at_bound: bool         # fits even at the bound: no routing can make it run out of memory
    stage: int | None      # the stage that overflows first just above ``factor`` (None when at_bound)
    capacity_bytes: int
    evaluations: int       # estimates taken (the one at the configured factor included when it was passed in)

    def to_dict(self) -> dict:
        return {"factor": self.factor, "bound": self.bound, "at_bound": self.at_bound, "stage": self.stage,
                "capacity_bytes": self.capacity_bytes}


def describe(h: Headroom) -> tuple[str, str]:
    """(the answer in one sentence, the evidence to compare it with) for the CLI and the calculator."""
    lo, hi = MEASURED_UNBALANCED
    evidence = (f"Balanced routing is 1.0 (--moe-router-force-load-balancing); runs without forced balancing measure "
                f"{lo:.1f} to {hi:.1f} on the busiest expert-parallel rank, most early in training (the methodology "
                f"page). This layout cannot exceed {h.bound:g}.")
    if h.factor is None:
        return "MoE routing headroom: none, it does not fit even with balanced routing.", evidence
    if h.at_bound:
        return (f"MoE routing headroom: fits at any routing imbalance, up to this layout's maximum overload factor "
                f"{h.bound:g}.", evidence)
    risk = (f" That is below the {lo:.1f} measured in runs without forced balancing: this layout needs balanced "
            "routing." if h.factor < lo else "")
    return (f"MoE routing headroom: fits up to an overload factor of {h.factor:.2f}, the busiest expert-parallel "
            f"rank receiving {h.factor:.2f} x its balanced token rows; above it stage {h.stage} no longer fits."
            + risk, evidence)


def _fullest(est) -> tuple[int, int, bool]:
    """(device bytes, stage) of the fullest stage, and whether any stage holds paged-stash buffers."""
    s = max(est.stages, key=lambda s: s.device_bytes)
    return s.device_bytes, s.stage, any(x.transient.get("paged_stash_buffers") for x in est.stages)


def overload_headroom(config, capacity_bytes, headroom: float = 0.0, *, estimate: Estimate | None = None,
                      num_microbatches: int | None = None) -> Headroom | None:
    """The largest ``training.moe_overload_factor`` at which every stage of ``config`` fits ``capacity_bytes``
    (module docstring), or None for a model without routed experts.

    ``config`` is anything :func:`estimator.estimate` takes (its own overload factor is replaced); ``capacity_bytes``
    a byte count or a :class:`~estimator.formats.gpus.GPU`; ``headroom`` the fraction of the capacity that must stay
    free, as for :func:`estimator.formats.gpus.fit`. ``estimate``: the configuration's estimate when the caller has
    it (one estimate fewer); ``num_microbatches`` as for :func:`estimator.estimate` (already checked there). Raises
    :class:`~estimator.config.errors.ConfigError` for an invalid configuration, capacity or headroom."""
    cfg = config if isinstance(config, Config) else load_config(config)
    cap = capacity_bytes.memory_bytes if isinstance(capacity_bytes, GPU) else capacity_bytes
    if isinstance(cap, bool) or not isinstance(cap, int) or not 0 < cap <= MAX_CAPACITY_BYTES:
        raise ConfigError(Problem("gpu_memory", show(cap), "the GPU capacity must be a positive number of bytes, "
                                  f"at most {MAX_CAPACITY_BYTES:,} (1 PiB), got {show(cap)}"))
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0.0 <= headroom < 1.0:
        raise ConfigError(Problem("headroom", show(headroom), "must be a fraction in [0, 1)"))
    if not cfg.model.num_experts:
        return None
    limit = usable_bytes(cap, headroom, band_for(cfg).fraction)   # the one rule of fit(): upper bound + kept free
    bound = max_overload_factor(cfg.model, cfg.parallelism)
    r = resolve(cfg)
    if num_microbatches is not None:
        r.m = num_microbatches
    evaluations = 0
    memo: dict = {}

    def device(f: float) -> tuple[int, int, bool]:
        nonlocal evaluations
        if f not in memo:
            tr = dataclasses.replace(cfg.training, moe_overload_factor=f)
            evaluations += 1
            memo[f] = _fullest(stage_memory(dataclasses.replace(r, cfg=dataclasses.replace(cfg, training=tr))))
        return memo[f]

    if estimate is not None:
        memo[float(cfg.training.moe_overload_factor)] = _fullest(estimate)
    d1, stage1, stashed = device(1.0)
    if d1 > limit:
        return Headroom(None, bound, False, stage1, cap, evaluations)
    # Grid points lo / GRID; off the grid, the bound stands for the point after the grid's last one.
    last = int(bound * GRID + 1e-9)
    top = last if abs(last - bound * GRID) < 1e-6 else last + 1

    def at(i: int) -> tuple[int, int, bool]:
        return device(bound if i >= top else i / GRID)

    lo, d_lo = GRID, d1
    dmax, stage_max, stashed_max = at(top)
    if stashed and not stashed_max:
        # The paged stash stops where the routing overflows its budget or its buffers (the step is rerun without
        # it), and the device figure may drop there: the one place it is not monotone. Find the last grid point
        # g where it applies; on [1, g] the figure is monotone, so it all fits when g does, and the rest of the
        # search runs above g, where it is monotone again.
        on, off = GRID, top
        while off - on > 1:
            mid = (on + off) // 2
            if at(mid)[2]:
                on = mid
            else:
                off = mid
        d_g, s_g, _ = at(on)
        if d_g > limit:
            lo, s_hi = _largest_fitting(at, limit, lo, d_lo, on, on / GRID, d_g, s_g)
            return Headroom(lo / GRID, bound, False, s_hi, cap, evaluations)
        lo, d_lo = on, d_g
    if dmax <= limit:
        return Headroom(bound, bound, True, None, cap, evaluations)
    lo, s_hi = _largest_fitting(at, limit, lo, d_lo, top, bound, dmax, stage_max)
    return Headroom(lo / GRID, bound, False, s_hi, cap, evaluations)


def _largest_fitting(at, limit: int, lo: int, d_lo: int, hi: int, x_hi: float, d_hi: int, s_hi: int) -> tuple[int, int]:
    """(the largest grid point in [lo, hi) whose device figure fits ``limit``, the stage that overflows just above
    it), given that ``lo`` and everything below it fit, ``hi`` (at factor ``x_hi``) does not, and the figure does
    not decrease on [lo, hi]. ``at(i)``: (device bytes, stage, stashed) at grid point i."""
    halve = False
    while hi - lo > 1:
        width = hi - lo
        if halve or d_hi == d_lo:
            u = (lo + hi) // 2
        else:        # the secant from the fitting end: on or below the curve where it is convex
            x = lo / GRID + (limit - d_lo) * (x_hi - lo / GRID) / (d_hi - d_lo)
            u = min(max(int(x * GRID + 1e-9), lo + 1), hi - 1)
        d, s, _ = at(u)
        if d <= limit:
            lo, d_lo = u, d
            if u + 1 < hi:                          # the next grid point usually closes the bracket
                d, s, _ = at(u + 1)
                if d <= limit:
                    lo, d_lo = u + 1, d
                else:
                    hi, x_hi, d_hi, s_hi = u + 1, (u + 1) / GRID, d, s
        else:
            hi, x_hi, d_hi, s_hi = u, u / GRID, d, s
        halve = hi - lo > width // 2
    return lo, s_hi
