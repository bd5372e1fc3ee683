"""Pipeline schedules: which (chunk-)micro-batches a pipeline rank holds activations for at its peak.

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
  peak is the heaviest mix, so :func:`held_counts` returns every distinct mix.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["first_chunks", "held_counts", "warmup"]


def warmup(p: int, rank: int, v: int, group: int, m: int) -> int:
    """Warm-up forward passes of pipeline rank ``rank`` (capped at all ``m v`` chunk-micro-batches)."""
    if v == 1:
        return min(p - rank - 1, m)
    return min(2 * (p - rank - 1) + (v - 1) * group, m * v)


def _prefix(n: int, c: int, group: int, v: int, full: int, last: int) -> int:
    """How many of the first n schedule-table entries run chunk c (``full`` complete groups, then one group
    of ``last`` micro-batches)."""
    period = group * v
    if n <= full * period:
        q, rem = divmod(n, period)
        return q * group + min(max(rem - c * group, 0), group)
    rem = n - full * period
    return full * group + min(max(rem - c * last, 0), last)


def first_chunks(v: int, group: int, m: int, n: int) -> list[int]:
    """The chunk of each of the first n entries of Megatron's schedule table (``get_schedule_table``)."""
    full = -(-m // group) - 1
    last = m - full * group
    period = group * v
    return [(k % period) // group if k < full * period else (k - full * period) // last for k in range(n)]


@lru_cache(maxsize=4096)
def held_counts(p: int, rank: int, v: int, group: int, m: int | None) -> tuple:
    """Every distinct per-chunk count of the chunk-micro-batches rank ``rank`` holds before one of its
    backward passes (a tuple of v-tuples). ``m`` None means enough micro-batches in whole groups."""
    if v == 1:
        n = p - rank if m is None else min(p - rank, m)
        return ((n,),)
    if m is None:
        m = group * (v + 4)          # long enough for the steady state to repeat (W < 2 group v)
    total = m * v
    W = warmup(p, rank, v, group, m)
    if W >= total:
        return ((m,) * v,)
    full = -(-m // group) - 1
    last = m - full * group
    period = group * v
    J = total - W                     # backward passes while forwards remain, plus the first of the rest
    # The held mix repeats with the period of the table while both prefixes stay inside whole groups, so
    # the first period and the tail (from where the forward prefix leaves the whole groups) cover them all.
    js = set(range(min(period, J))) | set(range(max(0, full * period - W), J))
    out = set()
    for j in sorted(js):
        nf, nb = W + j + 1, j
        out.add(tuple(_prefix(nf, c, group, v, full, last) - _prefix(nb, v - 1 - c, group, v, full, last)
                      for c in range(v)))
    return tuple(sorted(out))
