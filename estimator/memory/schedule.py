"""Pipeline schedules: the order of a pipeline rank's passes, and which (chunk-)micro-batches it holds at its peak.

Megatron-Core, ``megatron/core/pipeline_parallel/schedules.py``:

- 1F1B (``forward_backward_pipelining_without_interleaving``): rank r runs ``p - r - 1`` warm-up forward
  passes, then alternates one forward and one backward, so it holds ``min(p - r, m)`` micro-batches before
  each backward.
- Interleaved 1F1B (``forward_backward_pipelining_with_interleaving``, ``get_pp_rank_microbatches``): with
  ``v`` chunks per rank and a group size ``N`` (``microbatch_group_size_per_vp_stage``, default ``p``) rank
  r runs ``W = 2 (p - r - 1) + (v - 1) N`` warm-up forwards (at most all ``m v``), then forward ``W + j``
  and backward ``j`` for j = 0, 1, ... The order of the forwards is ``get_schedule_table``: micro-batches
  in groups of N (the last group takes the remainder), each group through chunk 0, then chunk 1, ...; the
  backward of entry j runs chunk ``v - 1 - chunk(j)``. Before backward j the rank holds forwards
  ``0..W + j`` minus backwards ``0..j - 1``: always ``W + 1`` chunk-micro-batches, but a varying mix of
  chunks. When chunks differ (the embedding, the output layer, MTP layers or a layout's uneven chunks) the
  peak is the heaviest mix (:func:`heaviest_mix`); :func:`held_counts` lists every distinct mix.

The cost does not grow with the number of micro-batches m, nor with the group size N:

- the table is periodic: while both the forwards and the backwards run through whole groups, every
  ``P = N v`` entries hold N of each chunk, so step j + P holds the same mix as step j. :func:`steps` walks
  one period, leaves out whole periods of the steady state, and walks the last periods and the tail (the
  last group); the mixes it meets are all the mixes of the step;
- the table changes chunk only every N entries (every ``last`` in the last group), so the passes come in
  *runs* over which both the forward's chunk and the backward's chunk stay the same: :func:`steps` returns
  O(v) runs per rank. Along a run the held mix moves by a fixed vector (one more of the forward's chunk,
  one fewer of the backward's), so its weight changes linearly and its order among tuples is monotone: the
  heaviest mix (ties: the smallest tuple, as ``max`` over the sorted :func:`held_counts` picks it) lies at
  an end of a run. :func:`heaviest_mix` weighs only those: a mix is the difference of two step-shaped count
  vectors (``_counts``), at most five segments of equal counts, so each weighs in O(1) from prefix sums of
  the chunks' bytes, and compares with another in O(1). The ends are found once per (p, rank, v, N, m) and
  remembered (the layout search asks for the same pipelines with other chunk weights).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

__all__ = ["Run", "Table", "entry", "first_chunks", "heaviest_mix", "held_counts", "steps", "table", "warmup"]


def warmup(p: int, rank: int, v: int, group: int, m: int) -> int:
    """Warm-up forward passes of pipeline rank ``rank`` (capped at all ``m v`` chunk-micro-batches)."""
    if v == 1:
        return min(p - rank - 1, m)
    return min(2 * (p - rank - 1) + (v - 1) * group, m * v)


class Table(NamedTuple):
    """Megatron's schedule table of one step (``get_schedule_table``): ``full`` whole groups of ``group``
    micro-batches, each through chunks 0..v-1 (``period = group v`` entries a group, ``whole`` entries in all),
    then the last group of ``last`` micro-batches through every chunk; ``total = m v`` entries. Without virtual
    stages (v = 1) every entry is chunk 0 and the table is periodic with period 1 throughout (``whole = m``)."""

    v: int
    group: int
    m: int
    full: int
    last: int
    period: int
    whole: int
    total: int


def table(v: int, group: int, m: int) -> Table:
    """The schedule table of m micro-batches on v chunks in groups of ``group``."""
    if v == 1:
        return Table(1, 1, m, m, 0, 1, m, m)
    full = -(-m // group) - 1              # whole groups; the last group holds the rest (1 to group)
    return Table(v, group, m, full, m - full * group, group * v, full * group * v, m * v)


def entry(t: Table, k: int) -> tuple[int, int]:
    """(micro-batch, chunk) of entry k of the table."""
    if t.v == 1:
        return k, 0
    if k < t.whole:
        g, rem = divmod(k, t.period)
        c, i = divmod(rem, t.group)
        return g * t.group + i, c
    c, i = divmod(k - t.whole, t.last)
    return t.full * t.group + i, c


def first_chunks(v: int, group: int, m: int, n: int) -> list[int]:
    """The chunk of each of the first n entries of Megatron's schedule table (``get_schedule_table``)."""
    t = table(v, group, m)
    return [entry(t, k)[1] for k in range(n)]


def _boundaries(t: Table, lo: int, hi: int) -> list[int]:
    """The entries k, lo < k < hi, whose chunk differs from entry k - 1's, in order: every multiple of the
    group size up to ``whole``, then every ``last`` entries of the last group."""
    if t.v == 1:
        return []
    n = t.group
    out = list(range((lo // n + 1) * n, min(hi, t.whole + 1), n))
    i_lo, i_hi = max(1, (lo - t.whole) // t.last + 1), min(t.v - 1, (hi - 1 - t.whole) // t.last)
    out += [t.whole + i * t.last for i in range(i_lo, i_hi + 1)]
    return out


class Run(NamedTuple):
    """Consecutive passes of one rank that repeat the same chunks: ``kind`` "F" (warm-up forwards of table
    entries ``start``, ``start + 1``, ...), "FB" (steady steps j = ``start``, ...: forward of entry W + j, then
    backward of entry j) or "B" (cool-down backwards of entries ``start``, ...); ``count`` steps; ``skipped``:
    passes left out just before the run (whole periods of the steady state, which free what they add)."""

    kind: str
    start: int
    count: int
    skipped: int


def _pieces(kind: str, lo: int, hi: int, cuts, skipped: int = 0) -> list[Run]:
    """[lo, hi) cut at ``cuts`` (sorted, inside it) into runs of ``kind``; the first carries ``skipped``."""
    out, at = [], lo
    for c in cuts:
        if at < c:
            out.append(Run(kind, at, c - at, skipped if at == lo else 0))
            at = c
    if at < hi:
        out.append(Run(kind, at, hi - at, skipped if at == lo else 0))
    return out


@lru_cache(maxsize=1024)
def steps(p: int, rank: int, v: int, group: int, m: int | None) -> tuple[int, Table, tuple]:
    """(W, table, runs): rank ``rank``'s warm-up forwards, the schedule table and its passes in schedule order
    as :class:`Run` s, with a window of whole steady-state periods left out (``m`` None: enough micro-batches
    in whole groups, as :func:`held_counts` takes it).

    Megatron's table repeats itself every P = N v entries while it runs through whole groups (every P entries
    hold N of each chunk), so a window of steady-state steps K P long, with both its forwards and its
    backwards inside the whole groups, adds and frees the same activations: the rank holds exactly the same
    before and after it, and every mix it holds inside the window it also holds in the period before. Such a
    window (all whole periods but one on either side) is left out, which keeps the walk O(v) runs, one
    period and the tail, however many micro-batches a step has."""
    if m is None:
        m = p if v == 1 else group * (v + 4)       # long enough for the steady state to repeat (W < 2 N v)
    t = table(v, group, m)
    total, period = t.total, t.period
    W = warmup(p, rank, v, group, m)
    J = total - W                                  # steady steps: forward W + j, backward j
    start = period                                 # one steady period is walked before the window, one after
    K = (t.whole - W - start - period) // period if W + start + 2 * period <= t.whole else 0
    skip_from, skip_to = (start, start + K * period) if K >= 2 else (J, J)
    runs = (_pieces("F", 0, W, _boundaries(t, 0, W)) + _steady(t, W, 0, skip_from)
            + _steady(t, W, skip_to, J, 2 * (skip_to - skip_from)) + _pieces("B", J, total, _boundaries(t, J, total)))
    return W, t, tuple(runs)


def _counts(t: Table, n: int) -> tuple[int, int, int, int]:
    """The entries of each chunk among the first n of the table, as a step: (base, high, b, o) means
    ``base + high`` for chunks c < b, ``base + o`` for chunk b, ``base`` for chunks after it."""
    if n <= t.whole:
        q, rem = divmod(n, t.period)
        b, o = divmod(rem, t.group)
        return q * t.group, t.group, b, o
    b, o = divmod(n - t.whole, t.last)
    return t.full * t.group, t.last, b, o


def _mix(t: Table, nf: int, nb: int) -> tuple:
    """The chunk-micro-batches held after nf forwards and nb backwards (the backward of entry k runs chunk
    v - 1 - chunk(k)), as segments (first chunk, end, count): the forwards' step minus the backwards' step
    reversed, at most five segments."""
    return _segments(t.v, _counts(t, nf), _counts(t, nb))


def _segments(v: int, f: tuple, b: tuple) -> tuple:
    fb, fh, fk, fo = f
    bb, bh, bk, bo = b
    rk = v - 1 - bk                                # the backwards' step, reversed: high above rk, low below
    cuts = sorted({x for x in (0, fk, fk + 1, rk, rk + 1, v) if 0 <= x <= v})
    out = []
    for s, e in zip(cuts, cuts[1:]):
        f = fb + (fh if s < fk else fo if s == fk else 0)
        b = bb + (bh if s > rk else bo if s == rk else 0)
        out.append((s, e, f - b))
    return tuple(out)


def _expand(seg: tuple) -> tuple:
    return tuple(x for s, e, k in seg for x in (k,) * (e - s))


def _less(a: tuple, b: tuple) -> bool:
    """Whether the mix of segments ``a`` is a smaller tuple than ``b``'s."""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][2] != b[j][2]:
            return a[i][2] < b[j][2]
        end = min(a[i][1], b[j][1])
        i += a[i][1] == end
        j += b[j][1] == end
    return False


def _steady(t: Table, W: int, lo: int, hi: int, skipped: int = 0) -> list[Run]:
    """Steady steps j = lo .. hi - 1 (forward of entry W + j, backward of entry j) in runs."""
    if lo >= hi:
        return []
    cuts = sorted(set(_boundaries(t, lo, hi)) | {k - W for k in _boundaries(t, lo + W, hi + W)})
    return _pieces("FB", lo, hi, cuts, skipped)


@lru_cache(maxsize=1024)
def _candidates(p: int, rank: int, v: int, group: int, m: int | None) -> tuple:
    """The mixes rank ``rank`` holds before the backward passes at either end of each steady run of one period
    and of the tail (every mix of the step is one of theirs, the table being periodic in between), as segments
    with no two neighbours of one count (one form per mix), without repeats; the whole step (every micro-batch
    on every chunk) when the warm-up runs every forward."""
    if m is None:
        m = group * (v + 4)
    t = table(v, group, m)
    W = warmup(p, rank, v, group, m)
    J = t.total - W
    lo = max(0, t.whole - W)
    steps_ = {}
    for run in _steady(t, W, 0, min(t.period, J, lo)) + _steady(t, W, lo, J):
        for j in (run.start, run.start + run.count - 1):
            steps_[(_counts(t, W + j + 1), _counts(t, j))] = None
    out = {}
    for f, b in steps_:
        merged = []
        for s, e, k in _segments(v, f, b):
            if merged and merged[-1][2] == k:
                merged[-1] = (merged[-1][0], e, k)
            else:
                merged.append((s, e, k))
        out[tuple(merged)] = None
    return tuple(out) or (((0, v, m),),)


def heaviest_mix(p: int, rank: int, v: int, group: int, m: int | None, weights) -> tuple:
    """The heaviest mix rank ``rank`` holds before one of its backward passes, ``weights[c]`` the bytes one
    micro-batch leaves on chunk c: exactly ``max(held_counts(...), key=weight)`` (ties: the smallest tuple), in
    O(v) whatever m and N (the module docstring says why the ends of the runs suffice)."""
    if v == 1:
        return (p - rank if m is None else min(p - rank, m),)
    pre = [0]
    for w in weights:
        pre.append(pre[-1] + w)
    best = best_w = None
    for seg in _candidates(p, rank, v, group, m):
        w = 0
        for s, e, k in seg:
            w += k * (pre[e] - pre[s])
        if best is None or w > best_w or (w == best_w and seg[0][2] <= best[0][2] and _less(seg, best)):
            best, best_w = seg, w
    return _expand(best)


@lru_cache(maxsize=256)
def held_counts(p: int, rank: int, v: int, group: int, m: int | None) -> tuple:
    """Every distinct per-chunk count of the chunk-micro-batches rank ``rank`` holds before one of its
    backward passes (a sorted tuple of v-tuples). ``m`` None means enough micro-batches in whole groups.
    Their number grows with N v (a mix per step of a period); the estimate needs only :func:`heaviest_mix`."""
    if v == 1:
        return (heaviest_mix(p, rank, v, group, m, (1,)),)
    W, t, runs = steps(p, rank, v, group, m)
    out = set()
    for run in runs:
        if run.kind == "FB":
            for j in range(run.start, run.start + run.count):
                out.add(_expand(_mix(t, W + j + 1, j)))
    return tuple(sorted(out)) or ((t.m,) * v,)
