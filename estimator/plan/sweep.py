"""Sweeps: the peak-stage memory of a configuration against its sequence length, micro-batch size and GPU count.

Each sweep changes one setting of a complete configuration, keeps everything else (the parallel layout
included) and re-estimates it (:func:`estimator.estimate`), point by point; the calculator draws the points
(JavaScript only draws: positions and labels come from here). The fit boundary of each sweep is the answer of
the reverse question the CLI already asks (``python -m estimator search CONFIG --max-seq-length / --max-mbs``,
:func:`estimator.plan.search.max_seq_length` and :func:`estimator.plan.search.max_micro_batch`): the longest sequence
and the largest micro-batch with which every stage still fits. For the GPU count the layout is kept and the
data-parallel size grows, which shards the distributed optimizer's states further; the boundary is the fewest
GPUs on which this layout fits, read off the points (every one is estimated to be drawn; from DP 1 to 2 one more NCCL
communicator can make the memory grow, so it is not bisected). The fewest GPUs on
which *some* layout fits is :func:`estimator.plan.search.min_gpus` (a layout search per candidate; the page asks
for it separately, it takes seconds).

A point fits when its peak ``device_bytes`` is at most :func:`estimator.formats.gpus.usable_bytes` (its upper
bound and what is kept free fit), the one rule of :func:`estimator.formats.gpus.fit` and the reverse questions. Positions on the x axis are log2-scaled (each sweep
spans several doublings), from 0 to 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config.errors import EstimatorError, n_gpus
from ..formats.error_bands import band_for
from ..formats.gpus import usable_bytes
from ..config.load import load_config
from ..config.rules import interleaving_problem
from ..memory.report import GIB, to_plain
from ..model.resolve import resolve
from .advice import MBS, SEQ, WORLD, with_changes

__all__ = ["Point", "Series", "sweep", "sweep_view"]

#: Most doublings of the current data-parallel size the GPU sweep goes to.
MAX_DP_DOUBLINGS = 6
#: Largest micro-batch size drawn.
MAX_MICRO_BATCH_DRAWN = 64


@dataclass(frozen=True)
class Point:
    """One re-estimated configuration of a sweep."""

    x: int                   # the swept setting's value
    peak_bytes: int          # device bytes of the fullest stage
    stage: int               # which stage that is
    fits: bool


@dataclass(frozen=True)
class Series:
    """One sweep: its points (ascending x), the current value and the fit boundary."""

    name: str                # seq_length | micro_batch_size | num_gpus
    field: str               # the dotted configuration path it changes
    label: str
    unit: str
    current: int
    points: tuple
    boundary: int | None     # the largest value that fits (seq, mbs) or the fewest GPUs (num_gpus); None: none
    boundary_kind: str       # max | min
    reason: str              # the reverse question's answer in words

    def to_dict(self) -> dict:
        return to_plain(self)


class _Sweeper:
    def __init__(self, config: dict, capacity: int, headroom: float):
        self.cfg, self.capacity, self.headroom = config, capacity, headroom
        self.r = resolve(load_config(config), sub_sample=False)      # the layout as written
        self.usable = usable_bytes(capacity, headroom, band_for(self.r.cfg).fraction)   # the one rule (formats.gpus)
        self._memo = {}

    def point(self, path: str, x: int) -> Point | None:
        """The configuration with ``path`` set to ``x``, re-estimated (None when that is invalid)."""
        from ..memory.assemble import estimate
        if (path, x) not in self._memo:
            try:
                est = estimate(with_changes(self.cfg, {path: x}))
                p = Point(x, est.peak.device_bytes, est.peak.stage, est.peak.device_bytes <= self.usable)
            except (EstimatorError, ValueError, ArithmeticError):
                p = None
            self._memo[(path, x)] = p
        return self._memo[(path, x)]

    def points(self, path: str, xs) -> tuple:
        return tuple(p for x in sorted(set(xs)) if (p := self.point(path, x)) is not None)


def _seq(sw: _Sweeper) -> Series:
    from .search import max_seq_length
    r = sw.r
    ans = max_seq_length(sw.cfg, gpu=sw.capacity, headroom=sw.headroom)
    step = math.lcm(2 * r.cp if r.cp > 1 else 1, r.t * r.cp if r.sp else 1, 128)
    cap = r.cfg.model.max_position_embeddings
    top = min(x for x in (cap, 2 ** 21) if x)
    top = min(top, max(4 * r.s, 2 * (ans.value or 0)))
    xs = [x for x in (step * 2 ** k for k in range(22)) if x <= top and x >= min(r.s, ans.value or r.s) // 64]
    xs += [r.s] + ([ans.value] if ans.value else [])
    return Series("seq_length", SEQ, "Sequence length", "tokens", r.s, sw.points(SEQ, xs), ans.value, "max",
                  ans.reason)


def _mbs(sw: _Sweeper) -> Series:
    from .search import max_micro_batch
    r = sw.r
    gbs = r.cfg.training.global_batch_size
    ans = max_micro_batch(sw.cfg, gpu=sw.capacity, headroom=sw.headroom, limit=MAX_MICRO_BATCH_DRAWN * 16)
    top = min(MAX_MICRO_BATCH_DRAWN, max(8, 2 * r.b, 2 * (ans.value or 0)))
    xs = [b for b in range(1, top + 1) if (gbs is None and b & (b - 1) == 0) or
          (gbs is not None and gbs % (b * r.dp) == 0 and not interleaving_problem(r.p, r.v, gbs // (b * r.dp),
                                                                                   r.group))]
    xs += [r.b] + ([ans.value] if ans.value and ans.value <= MAX_MICRO_BATCH_DRAWN else [])
    return Series("micro_batch_size", MBS, "Micro-batch size", "sequences", r.b, sw.points(MBS, xs), ans.value,
                  "max", ans.reason)


def _gpus(sw: _Sweeper) -> Series:
    r = sw.r
    dense = r.t * r.p * r.cp
    dps = sorted({r.dp, *(2 ** k for k in range((r.dp.bit_length() - 1) + MAX_DP_DOUBLINGS + 1))})
    cands = [d * dense for d in dps if sw.point(WORLD, d * dense) is not None]
    # Every point is drawn, so each is estimated: the fewest GPUs is read off them, not bisected. Memory falls with
    # DP except from DP 1 to 2, where NCCL sets up the data-parallel communicator (and the expert-data-parallel
    # one), which can outweigh the optimizer states it shards.
    fitting = [n for n in cands if sw.point(WORLD, n).fits]
    fewest = fitting[0] if fitting else None
    below = [n for n in cands if fewest is not None and n < fewest]
    if fewest is None:
        reason = f"this layout does not fit on {n_gpus(cands[-1])} (data-parallel {cands[-1] // dense:,}) either"
    elif below:
        reason = (f"{n_gpus(fewest)} (data-parallel {fewest // dense:,}) with this layout; on {below[-1]:,} it does "
                  "not fit")
    else:
        reason = f"{n_gpus(fewest)} (data-parallel {fewest // dense:,}), the fewest this layout runs on"
    return Series("num_gpus", WORLD, "GPUs (this layout, data-parallel size varied)", "GPUs", r.world,
                  sw.points(WORLD, cands), fewest, "min", reason)


def sweep(config: dict, capacity: int, headroom: float = 0.0) -> tuple:
    """The three sweeps of a complete configuration (plain data) against a GPU of ``capacity`` bytes:
    sequence length, micro-batch size, GPU count. Raises :class:`~estimator.config.errors.ConfigError` for an invalid
    configuration."""
    sw = _Sweeper(config, capacity, headroom)
    return _seq(sw), _mbs(sw), _gpus(sw)


def _pos(x: int, lo: int, hi: int) -> float:
    return 0.5 if hi <= lo else (math.log2(x) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))


def sweep_view(series: tuple, capacity: int, headroom: float = 0.0, band: float = 0.0) -> dict:
    """What the page draws: per sweep its points with x positions (0-1, log2), GiB labels and a shared y scale
    (bytes, with ticks), the capacity and usable lines, the current value and the boundary. The usable line is the
    largest estimate that fits by the one rule (:func:`estimator.formats.gpus.usable_bytes`, ``band`` the
    configuration's error band)."""
    from ..memory.report import gib_ticks
    top = max([p.peak_bytes for s in series for p in s.points] + [capacity])
    ticks = gib_ticks(min(top, 4 * capacity))
    out = []
    for s in series:
        xs = [p.x for p in s.points]
        lo, hi = (min(xs), max(xs)) if xs else (1, 1)
        fmt = (lambda v: f"{v:,}")
        out.append({
            "name": s.name, "field": s.field, "label": s.label, "unit": s.unit, "reason": s.reason,
            "current": {"x": s.current, "pos": _pos(s.current, lo, hi), "label": fmt(s.current)},
            "boundary": None if s.boundary is None or not lo <= s.boundary <= hi else {
                "x": s.boundary, "pos": _pos(s.boundary, lo, hi), "kind": s.boundary_kind,
                "label": ("at most " if s.boundary_kind == "max" else "at least ") + fmt(s.boundary)},
            "boundary_text": (("largest that fits: " if s.boundary_kind == "max" else "fewest that fit: ")
                              + (fmt(s.boundary) + f" {s.unit.removesuffix('s') if s.boundary == 1 else s.unit}"
                                 if s.boundary is not None else "none")),
            "points": [{"x": p.x, "pos": _pos(p.x, lo, hi), "label": fmt(p.x), "bytes": min(p.peak_bytes, ticks[-1]["bytes"]),
                        "gib": f"{p.peak_bytes / GIB:.2f}", "stage": p.stage, "fits": p.fits,
                        "clipped": p.peak_bytes > ticks[-1]["bytes"]} for p in s.points],
            "x_ticks": [{"pos": _pos(x, lo, hi), "label": _short(x)} for x in _spread(_x_ticks(xs), lo, hi)],
        })
    return {"series": out, "capacity_bytes": capacity, "usable_bytes": usable_bytes(capacity, headroom, band),
            "capacity_label": f"{capacity / GIB:.2f} GiB", "scale_bytes": ticks[-1]["bytes"], "ticks": ticks,
            "unit": "GiB (2^30 bytes) on the device, fullest stage"}


def _x_ticks(xs: list) -> list:
    """At most five x values to label: the ends and evenly spaced ones between."""
    if len(xs) <= 5:
        return xs
    idx = sorted({round(i * (len(xs) - 1) / 4) for i in range(5)})
    return [xs[i] for i in idx]


def _spread(ticks: list, lo: int, hi: int, gap: float = 0.2) -> list:
    """The ticks at least ``gap`` of the axis apart (the ends kept), so that written out in full (8,192) two labels
    never touch on a phone."""
    if len(ticks) <= 2:
        return ticks
    kept = [ticks[0]]
    for x in ticks[1:-1]:
        if _pos(x, lo, hi) - _pos(kept[-1], lo, hi) >= gap and _pos(ticks[-1], lo, hi) - _pos(x, lo, hi) >= gap:
            kept.append(x)
    return kept + [ticks[-1]]


def _short(x: int) -> str:
    """A tick's label: the number itself, with thousands separators (8,192 tokens, not 8Ki)."""
    return f"{x:,}"
