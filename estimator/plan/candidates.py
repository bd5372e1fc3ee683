"""Trying candidate changes for "Make it fit" (:mod:`estimator.plan.suggest`): each candidate's memoised estimate,
the pruning of candidates that cannot change the answer, and the bisection of the levers whose memory falls along
their options.

A candidate is the configuration with a few fields changed (:meth:`Candidates.valid`); the levers
(:mod:`estimator.plan.suggest`) list them weakest first, and :func:`first_fit` finds the weakest that fits by the one
rule of :func:`estimator.formats.gpus.fit` (the estimate at most :func:`estimator.formats.gpus.usable_bytes`).

Speed (the calculator's "Make it fit" is one request; ``benchmarks/make_it_fit.py`` times it in CPython and checks
that a change leaves every answer as it was, ``benchmarks/calculator.py`` in the page): each candidate is read with
only its changed fields checked (:func:`estimator.config.with_fields`), estimated without a second validation and for
the stages that can hold the peak only (:func:`estimator.memory.assemble.peak_memory`), memoised. Not estimated: a
larger TP, PP, CP or EP that breaks the world-size rule on the same GPUs; full-recompute blocks weaker than one that
does not fit with its peak in the forward/backward passes (the layout search's rule,
:func:`estimator.plan.space.no_fit_implied`); the options of a bisected lever that the bisection does not probe; for
"saves at most", the options that cannot hold the lowest peak. Qwen3 8B on a 16 GiB GPU: 219 estimates of 242
configurations read, from 405 of 648. The step time of each suggestion (:meth:`Candidates.cost`) comes from one cost
model engine for the configuration and all its candidates that keep its precision and kept parallelism fields, not
one per candidate, and reads the Config its estimate read (Qwen3 8B on 16 GiB: 3 engines for 13 costs, 4 instead of
18 to 21 ms of CPU).
"""

from __future__ import annotations

import math

from ..config.errors import EstimatorError
from ..config.load import config_from_dict, with_fields
from ..formats.error_bands import band_for
from ..formats.gpus import usable_bytes
from ..model.resolve import resolve
from .advice import CP, EP, ETP, PP, RC_METHOD, TP, WORLD, choices, get_field, with_changes

__all__ = ["Candidates", "first_fit", "lowest_peak"]

_ABSENT = object()
#: Levers whose memory falls as their options grow: bisected.
_MONOTONE = ("gpus", "activation_offload")


class Candidates:
    """The configuration, its estimate, and memoised outcomes of changed configurations.

    Every candidate is the configuration with a few fields changed (:meth:`valid`): it is read with only those fields
    coerced and checked again (config.with_fields), its estimate is not validated a second time, and only the
    stages that can hold the peak are computed (:func:`_peak`). Outcomes are memoised by content, and by the
    candidate dict itself (the dicts :meth:`valid` returns are never changed), which the callers ask again at once."""

    def __init__(self, cfg: dict, capacity: int, headroom: float, num_microbatches: int | None):
        from ..memory.assemble import estimate
        self.cfg, self.capacity, self.headroom, self.m = cfg, capacity, headroom, num_microbatches
        self.base = config_from_dict(cfg)
        self.est = estimate(self.base, num_microbatches=num_microbatches)
        self.r = resolve(self.base, sub_sample=False)      # the layout as written
        self.usable = usable_bytes(capacity, headroom, band_for(self.base).fraction)   # the one rule (formats.gpus)
        self._memo = {}              # content key -> outcome
        self._seen = {}              # id(candidate dict) -> (that dict, its outcome): held, so the id stays its own
        self._valid = {}             # the change, as text -> valid()'s answer
        self._choices = None
        self._engines = {}           # SearchEngine.inputs_key -> the cost model's engine for it

    @property
    def choices(self) -> dict:
        """:func:`estimator.plan.advice.choices` of the configuration (asked once for TP, PP, CP and EP)."""
        if self._choices is None:
            self._choices = choices(self.cfg)
        return self._choices

    def outcome(self, cfg: dict) -> tuple | None:
        """(peak, whether the peak stage peaks in the forward/backward passes, whether it fits, the Config) of ``cfg``,
        None when it is invalid; memoised. The peak is the :class:`~estimator.memory.report.Peak` of
        :func:`estimator.estimate` (the stage with the most device bytes); it fits by the one rule
        (:func:`estimator.formats.gpus.usable_bytes`, with ``cfg``'s error band)."""
        seen = self._seen.get(id(cfg))
        if seen is not None and seen[0] is cfg:
            return seen[1]
        key = repr(sorted((s, sorted(v.items())) for s, v in cfg.items() if isinstance(v, dict)))
        hit = self._memo.get(key, _ABSENT)
        if hit is _ABSENT:
            try:
                c = self._config(cfg)
                peak, fwd = _peak(c, self.m)
                hit = (peak, fwd, peak.device_bytes <= usable_bytes(self.capacity, self.headroom,
                                                                    band_for(cfg).fraction), c)
            except (EstimatorError, ValueError, ArithmeticError):
                hit = None
            self._memo[key] = hit
        self._seen[id(cfg)] = (cfg, hit)
        return hit

    def _config(self, cfg: dict):
        """``cfg`` as a Config: a candidate that only sets fields of the configuration has only those read again
        (config.with_fields); anything else is read whole."""
        if any(not vals.keys() <= (cfg.get(sec) or {}).keys()
               for sec, vals in self.cfg.items() if isinstance(vals, dict)):
            return config_from_dict(cfg)
        changed = {f"{sec}.{name}": v for sec, vals in cfg.items() if isinstance(vals, dict)
                   for name, v in vals.items() if get_field(self.cfg, f"{sec}.{name}", _ABSENT) != v}
        return with_fields(self.base, changed, cfg)

    def cost(self, cfg: dict) -> tuple[float, int] | None:
        """(relative step time of the layout search's cost model, world size) of ``cfg``: the configuration as written
        or a valid candidate; None when the cost model cannot take it. The engine of
        :func:`estimator.plan.search.fixed_layout` is built once for all candidates that keep what it reads
        (:meth:`estimator.plan.space.SearchEngine.inputs_key`: all but the layout and the world size, which are read
        from the candidate's Config), not once per candidate: one for the configuration and every change but the
        bf16 gradients (the precision) and FSDP (a kept parallelism field), which get their own. An engine that
        cannot be built is tried again for the next candidate."""
        from .search import fixed_layout, layout_cost
        from .space import SearchEngine
        try:
            if cfg is self.cfg:
                c = self.base
            else:
                hit = self.outcome(cfg)      # memoised: the candidates costed have been estimated, so read already
                c = hit[3] if hit else self._config(cfg)
            key = SearchEngine.inputs_key(cfg)
            eng = self._engines.get(key)
            if eng is None:
                eng = self._engines[key] = fixed_layout(cfg, self.capacity, 0.0, 8)[0]
            return layout_cost(eng, c), c.training.world_size
        except (EstimatorError, ValueError, ArithmeticError, KeyError):
            return None

    def estimate(self, cfg: dict):
        """The peak of ``cfg``'s estimate, None when it is invalid."""
        hit = self.outcome(cfg)
        return hit[0] if hit else None

    def peak(self, cfg: dict) -> int | None:
        hit = self.outcome(cfg)
        return hit[0].device_bytes if hit else None

    def fits(self, cfg: dict) -> bool:
        hit = self.outcome(cfg)
        return hit is not None and hit[2]

    def valid(self, change: dict) -> dict | None:
        """``cfg`` with ``change`` applied, on more GPUs (the data-parallel size kept) if the world size does
        not divide by the new layout; None when neither is valid. Memoised: the same change gives the same dict."""
        key = repr(sorted(change.items()))
        if key not in self._valid:
            self._valid[key] = self._valid_new(change)
        return self._valid[key]

    def _valid_new(self, change: dict) -> dict | None:
        new = with_changes(self.cfg, change)
        if not _indivisible(new, self.r.E) and self.estimate(new) is not None:
            return new
        if WORLD in change:
            return None
        t, p, c = (get_field(new, TP, 1), get_field(new, PP, 1), get_field(new, CP, 1))
        world = self.r.dp * t * p * c
        if self.r.E:
            world = math.lcm(world, (get_field(new, ETP) or t) * get_field(new, EP, 1) * p)
        if world == self.r.world:
            return None
        new = with_changes(new, {WORLD: world})
        return new if self.estimate(new) is not None else None


def _indivisible(cfg: dict, experts: int) -> bool:
    """True when ``cfg`` (a candidate) is invalid by the world-size rule alone, known without reading it (config/rules/
    check.py: the world size divides by TP x PP x CP, and for an MoE model by ETP x EP x PP): "Make it fit" first tries
    a larger TP, PP, CP or EP on the same GPUs, which most often breaks that rule. False when unsure (a value not a
    positive integer: the loader names it)."""
    ws, t, p, c = (get_field(cfg, WORLD), get_field(cfg, TP, 1), get_field(cfg, PP, 1), get_field(cfg, CP, 1))
    sizes = [ws, t, p, c]
    if experts:
        sizes += [get_field(cfg, ETP) or t, get_field(cfg, EP, 1)]
    if not all(type(x) is int and x > 0 for x in sizes):
        return False
    return ws % (t * p * c) != 0 or (experts and ws % (sizes[4] * sizes[5] * p) != 0)


def _peak(c, num_microbatches: int | None) -> tuple:
    """(peak, whether the peak stage peaks in the forward/backward passes) of :func:`estimator.estimate` for a Config
    the loader has just built and validated (config_from_dict or with_fields): not validated again, and only the
    stages that can hold the peak computed (:func:`estimator.memory.assemble.peak_memory`: the same Peak) unless the
    reserved memory is replayed through the simulated allocator, which every stage needs. With a
    ``num_microbatches`` override, :func:`estimator.estimate` itself (it checks the override against the layout)."""
    from ..memory.assemble import estimate, peak_memory, stage_memory
    if num_microbatches is None and c.training.reserved_memory_model != "replay":
        peak, stage = peak_memory(resolve(c))
    else:
        est = (estimate(c, num_microbatches=num_microbatches) if num_microbatches is not None
               else stage_memory(resolve(c)))
        peak = est.peak
        stage = next(s for s in est.stages if s.stage == peak.stage)
    return peak, stage.peak_phase == "forward_backward"


def _first_fit(ctx, base: dict, options: list, lever: str = ""):
    """The weakest option of a lever (label, change) that fits once applied over ``base`` changes, with the
    configuration: (label, change, config) or None, the options tried in order (for full recomputation from the
    first that :func:`_block_start` has not ruled out)."""
    start = _block_start(ctx, base, options) if lever == "full" else 0
    for label, change in options[start:]:
        cfg = ctx.valid({**base, **change})
        if cfg is not None and ctx.fits(cfg):
            return label, change, cfg
    return None


def _first_fit_monotone(ctx, base: dict, options: list):
    """:func:`_first_fit` for a lever whose memory falls along its options (more GPUs, more layers offloaded):
    bisected over its valid options. Only the options probed are estimated, the bisection running over every option
    up to the last valid one; should a probe be invalid, it runs again over the valid options alone (each estimated).
    Both are the same bisection when the options up to the last valid one are all valid (offloading's are all valid
    or all invalid), and both find the first valid option that fits when the memory falls along the options."""
    at = lambda i: ctx.valid({**base, **options[i][1]})       # memoised by ctx
    last = len(options) - 1
    while last >= 0 and at(last) is None:
        last -= 1
    if last < 0 or not ctx.fits(at(last)):
        return None
    lo, hi = -1, last                        # options[hi] fits; find the first that fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid) is None:
            return _bisect([(lab, ch, c) for i, (lab, ch) in enumerate(options) if (c := at(i)) is not None], ctx.fits)
        lo, hi = (lo, mid) if ctx.fits(at(mid)) else (mid, hi)
    return (*options[hi], at(hi))


def _bisect(ok: list, fits):
    """The first of ``ok`` ((label, change, config), the last of which fits) that fits, bisected."""
    lo, hi = -1, len(ok) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(ok[mid][2]) else (mid, hi)
    return ok[hi]


def first_fit(ctx, lever: str, base: dict, options: list):
    """The weakest option of ``lever`` (its options: (label, change), weakest first) that fits once applied over the
    ``base`` changes: (label, change, config), or None. Bisected for the levers whose memory falls along their options
    (more GPUs, more layers offloaded); for full recomputation the scan starts where :func:`_block_start` says."""
    if lever in _MONOTONE:
        return _first_fit_monotone(ctx, base, options)
    return _first_fit(ctx, base, options, lever)


def _block_start(ctx, base: dict, options: list) -> int:
    """Where the in-order scan of the full-recompute options over ``base`` can start: every option before that index
    provably does not fit. The options open with ``recompute_method: block`` for 1, 2, ... layers, and block n keeps
    at least what block m > n keeps in the forward and backward passes (the layout search's rule,
    :func:`estimator.plan.space.no_fit_implied`); so when block m does not fit and its peak stage peaks in those
    passes, no block n < m fits (the same configuration but for the recompute fields: the same GPUs, since the
    recompute rules do not involve the world size, and the same error band, which no recompute field drives). The
    strongest block is probed first (when it does not fit so, no block does), then the first block that fits is
    bisected; a probe that proves nothing (invalid, or peaking in the optimizer step) leaves the rest to the scan.
    Not with the allocator replay, whose reserved bytes need not grow with the allocated ones."""
    k = 0
    while k < len(options) and options[k][1].get(RC_METHOD) == "block":
        k += 1
    if k < 2 or ctx.base.training.reserved_memory_model == "replay":
        return 0

    def probe(i: int) -> str:
        cfg = ctx.valid({**base, **options[i][1]})
        hit = ctx.outcome(cfg) if cfg is not None else None
        if hit is None:
            return "unknown"
        if hit[2]:
            return "fits"
        return "rules out" if hit[1] else "unknown"       # peaks in the forward/backward passes: the weaker too

    first = probe(k - 1)
    if first != "fits":
        return k if first == "rules out" else 0
    lo, hi = -1, k - 1               # options <= lo do not fit; option hi fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = probe(mid)
        if got == "unknown":
            return lo + 1
        lo, hi = (mid, hi) if got == "rules out" else (lo, mid)
    return hi


def lowest_peak(ctx, lever: str, options: list) -> int | None:
    """The lowest peak of the valid options of ``lever``, each applied alone; None when none is valid. Only the options
    that can hold it are estimated (not with the allocator replay, whose reserved bytes need not follow the
    allocated ones):

    - layer-wise activation offloading: the last valid option, since offloading more layers keeps no more on the GPU
      (estimator/memory/features: the saved activations of the first n layers leave the device; nothing else
      depends on n);
    - full recomputation: of the blocks the strongest alone when its peak stage peaks in the forward/backward
      passes (block n keeps at least what block m > n keeps there, as in :func:`_block_start`), then every uniform
      group."""
    def peaks(opts):
        return [p for _, ch in opts if (c := ctx.valid(ch)) is not None and (p := ctx.peak(c)) is not None]

    if ctx.base.training.reserved_memory_model != "replay":
        if lever == "activation_offload":
            return next((p for _, ch in reversed(options) if (c := ctx.valid(ch)) is not None
                         and (p := ctx.peak(c)) is not None), None)
        k = sum(1 for _, ch in options if ch.get(RC_METHOD) == "block")    # the blocks open the list (_full)
        if lever == "full" and k >= 2:
            strongest = ctx.valid(options[k - 1][1])
            hit = ctx.outcome(strongest) if strongest is not None else None
            if hit is not None and hit[1]:
                return min(peaks(options[k - 1:]))
    return min(peaks(options), default=None)

