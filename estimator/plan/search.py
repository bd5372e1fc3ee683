"""Strategy search: every valid parallel layout of a model on N GPUs, the ones that fit, ranked.

The seeds' parallelism guide walks users through a manual loop (TP 2, 4, 8, then PP, then EP, then
memory optimizations). :func:`search` does it exhaustively: it enumerates every layout Megatron-Core
accepts (TP, PP with even and uneven splits, VPP, CP, EP, ETP, sequence parallelism, the distributed
optimizer, recompute none / selective / full, the micro-batch size; :mod:`estimator.plan.space`),
keeps those whose peak ``device_bytes`` (:func:`estimator.estimate`) is at most ``(1 - headroom)`` of the
GPU memory, and ranks them by relative step time (:mod:`estimator.plan.cost`, which documents the
cost model and its constants, re-exported here). Every reported layout holds a complete configuration
that ``estimate`` reproduces exactly.

Speed (DeepSeek-V3 has 143,406 layouts on 1,024 GPUs; ``benchmarks/search.py``): a lower bound of the
model states rules out whole families before any estimate, one layout that does not fit rules out the
heavier ones of its shape (both in :mod:`estimator.plan.space`), and the cost of a layout is known
before its memory, so shapes are visited best first and the search stops once ``top`` layouts fit and
nothing left can beat them (:func:`_run`).

The reverse questions (:func:`min_gpus`, :func:`max_micro_batch`, :func:`max_seq_length`) bisect over
the world size, the micro-batch size or the sequence length, since memory per GPU is monotone in each.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Iterable

from ..config.errors import show
from ..config.load import load_config
from ..config.rules import interleaving_problem
from ..config.schema import MAX_MICRO_BATCH, MAX_TOKENS
from ..memory.assemble import stage_memory
from ..memory.report import GIB, to_plain
from ..memory.states import byte_model
from ..model.resolve import resolve
from .cost import (DEFAULT_TOKENS_PER_STEP, DP_OVERLAPPED_EXPOSED, FULL_RECOMPUTE, GPU_FLOPS, LAUNCH_SECONDS,
                   NETWORK_BYTES_PER_S, NVLINK_BYTES_PER_S, SELECTIVE_MODULE_COST, Shape, why_ranked)
from .space import (RECOMPUTE_GRANULARITIES, SPLIT_NOT_SEARCHED, gpu_capacity, SearchEngine, no_fit_implied,
                    positive_ints, option_error, source_dict, world_sizes)

#: Most layouts one search returns with ``top=None``: the best of them, with a note giving how many fit.
MAX_LAYOUTS = 10_000

__all__ = ["Answer", "Layout", "SearchResult", "max_micro_batch", "max_seq_length", "min_gpus", "search",
           "GPU_FLOPS", "NVLINK_BYTES_PER_S", "NETWORK_BYTES_PER_S", "LAUNCH_SECONDS", "FULL_RECOMPUTE",
           "SELECTIVE_MODULE_COST", "DP_OVERLAPPED_EXPOSED", "DEFAULT_TOKENS_PER_STEP"]


@dataclass(frozen=True)
class Layout:
    """One parallel layout that fits, with its complete configuration and why it ranks where it does."""

    rank: int
    label: str               # "TP8 PP2 VPP2 CP1 EP8 ETP1 DP4 mbs1 full"
    config: dict             # complete four-section configuration; estimate(config) reproduces the numbers
    num_gpus: int
    tp: int
    pp: int
    vpp: int                 # 1 = plain 1F1B
    cp: int
    ep: int
    etp: int
    dp: int
    edp: int
    first_stage_layers: int | None
    last_stage_layers: int | None
    sequence_parallel: bool
    distributed_optimizer: bool
    recompute: str           # none | selective | full
    micro_batch_size: int
    global_batch_size: int | None   # None: the configuration leaves it unset (reverse questions only)
    num_microbatches: int | None
    peak_stage: int
    peak_allocated_bytes: int
    peak_device_bytes: int
    capacity_bytes: int
    headroom_bytes: int      # capacity - peak device bytes
    headroom_fraction: float  # headroom_bytes / capacity
    bubble: float            # (p - 1) / (m * v)
    cost: float              # relative step time, 1.0 = the bare matmul compute
    costs: dict              # cost breakdown: term -> share of the bare compute time
    why: str

    def to_dict(self) -> dict:
        return to_plain(self)


@dataclass(frozen=True)
class SearchResult:
    """The layouts that fit, best first, and what the search looked at."""

    layouts: tuple
    num_gpus: tuple
    gpu: dict                # name, memory_bytes, source
    capacity_bytes: int
    headroom: float
    seq_length: int
    global_batch_size: int | None   # None: each layout takes about DEFAULT_TOKENS_PER_STEP tokens per step
    enumerated: int          # layouts enumerated (every combination the divisibility rules allow)
    evaluated: int           # layouts whose memory was computed (the rest were pruned or ranked out)
    fitting: int | None      # layouts that fit; None when the search stopped once ``top`` were certain
    elapsed_s: float
    notes: tuple = field(default=())

    @property
    def best(self) -> Layout | None:
        return self.layouts[0] if self.layouts else None

    def summary(self) -> str:
        """One sentence: how many layouts were enumerated, evaluated, fit and shown."""
        counts = ", ".join(f"{n:,}" for n in self.num_gpus)
        head = (f"{self.enumerated:,} layouts enumerated on {counts} GPUs, {self.evaluated:,} evaluated "
                f"(the rest ruled out by a memory lower bound or outranked)")
        if not self.layouts:
            return head + "; none fits."
        if self.fitting is not None:
            return head + f"; {self.fitting:,} fit, {len(self.layouts):,} shown."
        return head + f"; the best {len(self.layouts):,} shown (the search stops once nothing left can beat them)."

    def to_dict(self) -> dict:
        d = to_plain(self)
        d["best"] = self.best.to_dict() if self.best else None
        d["summary"] = self.summary()
        return d


@dataclass(frozen=True)
class Answer:
    """The answer to a reverse question, with the layout that achieves it (None when nothing fits)."""

    question: str            # min_gpus | max_micro_batch | max_seq_length
    value: int | None
    layout: Layout | None
    tried: tuple             # (value, fits) pairs, in the order tried
    reason: str

    def to_dict(self) -> dict:
        return to_plain(self)


# --------------------------------------------------------------------------------------------------
# Search


def _run(engine: SearchEngine, worlds: tuple, top: int | None, distinct: bool):
    """Best-first search: shapes in order of a lower bound of their cost, the layouts of a shape in cost
    order, stopping once ``top`` layouts fit and nothing left can beat them. With ``distinct`` a layout
    only competes with the others of its (GPUs, TP, PP, VPP, CP, EP, ETP) key for one place."""
    engine.evaluated = engine.invalid = 0
    enumerated = 0
    cands = []
    base_lb = 1 + min(engine.rc_cost[rc] for rc in engine.recompute)
    max_b = max(engine.mbs)
    for n in worlds:
        floors = {}
        nvar = {}
        for sh in engine.shapes(n):
            if sh.dp not in nvar:
                nvar[sh.dp] = sum(1 for _ in engine.variants(sh))
            enumerated += nvar[sh.dp]
            if not nvar[sh.dp]:
                continue
            ok = []
            for d in engine.dist:
                key = (n, sh.t, sh.p, sh.first, sh.last, sh.v, sh.ep, sh.etp, d)
                if key not in floors:
                    floors[key] = engine.state_floor(sh, d)
                if floors[key][0] <= engine.usable:
                    ok.append((d, floors[key]))
            if not ok:
                continue
            cands.append((base_lb + engine.traffic_bound(sh, max_b), len(cands), sh, ok))
    cands.sort(key=lambda c: (c[0], c[1]))
    exhaustive = top is None and not distinct
    best: dict = {}           # key -> entry (cost, peak, seq, shape, d, rc, b, gbs, estimate, terms)
    inf = float("inf")
    thr = inf                 # cost of the top-th best key: nothing costlier can enter
    fits = 0
    complete = True
    for lb, seq, sh, ok in cands:
        if lb > thr:
            complete = False
            break
        tr = engine.traffic(sh)
        sc = {d: dict(tr, data_parallel_s=engine.dp_seconds(sh, d, fl)) for d, fl in ok}
        key = (sh.n, sh.t, sh.p, sh.v, sh.cp, sh.ep, sh.etp) if distinct else None
        rows = []
        for d, rc, b, gbs in engine.variants(sh):
            if d in sc:
                cost, terms = engine.cost(sh, sc[d], engine.rc_cost[rc], b, gbs)
                rows.append((cost, engine.rc_cost[rc], b, not d, rc, d, gbs, terms))
        # Cost order finds the best first; listing everything, memory order lets a failure rule out more.
        rows.sort(key=(lambda x: (x[2], -x[1], x[3])) if exhaustive else (lambda x: x[:4]))
        failed = []
        for cost, _, b, _, rc, d, gbs, terms in rows:
            mine = best.get(key) if distinct else None
            if cost > thr or (mine is not None and cost > mine[0]):
                complete = False
                break
            if no_fit_implied(failed, d, rc, b):
                continue
            est = engine.evaluate(sh, d, rc, b, gbs)
            if est is None:
                continue
            if est.peak.device_bytes > engine.usable:
                failed.append((d, rc, b))
                continue
            fits += 1
            # The peak only (not the estimate): listing every fitting layout keeps one small entry for each.
            entry = (cost, est.peak.device_bytes, (seq, len(failed), b), sh, d, rc, b, gbs, est.peak, terms)
            k = key if distinct else (seq, rc, b, d)
            if k not in best or entry[:3] < best[k][:3]:
                best[k] = entry
                if top and len(best) >= top:
                    thr = heapq.nsmallest(top, (e[0] for e in best.values()))[-1]
    found = sorted(best.values(), key=lambda e: e[:3])
    if top:
        found = found[:top]
    return found, enumerated, (fits if complete else None)


def _label(sh: Shape, rc: str, b: int, d: bool, moe: bool) -> str:
    """A layout's name, e.g. "TP8 PP2 VPP2 EP8 ETP1 DP4 mbs1 full"."""
    parts = [f"TP{sh.t}", f"PP{sh.p}"]
    if sh.first is not None or sh.last is not None:
        parts[-1] += f"[{sh.first if sh.first is not None else '-'}/{sh.last if sh.last is not None else '-'}]"
    if sh.v > 1:
        parts.append(f"VPP{sh.v}")
    if sh.cp > 1:
        parts.append(f"CP{sh.cp}")
    if moe:
        parts += [f"EP{sh.ep}", f"ETP{sh.etp}"]
    parts += [f"DP{sh.dp}", f"mbs{b}", rc if rc != "none" else "no-recompute"]
    if not d:
        parts.append("no-distopt")
    return " ".join(parts)


def _layouts(engine: SearchEngine, found: list, configs: list | None = None) -> tuple:
    out = []
    best_terms = found[0][9] if found else None
    for rank, (cost, peak, _, sh, d, rc, b, gbs, pk, terms) in enumerate(found, 1):
        config = configs[rank - 1] if configs else engine.config_dict(sh, d, rc, b, gbs)
        given = gbs
        if gbs is None:                    # a configuration without a global batch: cost it at the default
            gbs = engine.auto_gbs(b, sh.dp, sh.p, sh.v)
        m = gbs // (b * sh.dp)
        free = engine.capacity - peak
        why = why_ranked(rank=rank, count=len(found), cost=cost, terms=terms, best_terms=best_terms, sh=sh, rc=rc, b=b,
                   m=m, gbs=gbs, given=given, peak=peak, capacity=engine.capacity, gpn=engine.gpn)
        out.append(Layout(
            rank=rank, label=_label(sh, rc, b, d, engine.moe), config=config,
            num_gpus=sh.n, tp=sh.t, pp=sh.p, vpp=sh.v, cp=sh.cp, ep=sh.ep, etp=sh.etp, dp=sh.dp,
            edp=sh.edp if engine.moe else sh.dp * sh.cp, first_stage_layers=sh.first, last_stage_layers=sh.last,
            sequence_parallel=sh.sp, distributed_optimizer=d, recompute=rc, micro_batch_size=b,
            global_batch_size=given, num_microbatches=m if given else None, peak_stage=pk.stage,
            peak_allocated_bytes=pk.allocated_bytes, peak_device_bytes=peak, capacity_bytes=engine.capacity,
            headroom_bytes=free, headroom_fraction=free / engine.capacity,
            bubble=(sh.p - 1) / (m * sh.v) if sh.p > 1 else 0.0, cost=cost,
            costs={k: round(x, 6) for k, x in terms.items()}, why=why))
    return tuple(out)


def _engine(model_or_config, num_gpus, gpu, seq_length, global_batch_size, micro_batch_sizes, headroom, max_tp,
            gpus_per_node, recompute, distributed_optimizer, fixed):
    worlds = world_sizes(num_gpus)
    capacity, gpu_info = gpu_capacity(gpu)
    data = source_dict(model_or_config)
    if isinstance(recompute, str) or recompute is None:
        recompute = (recompute,)
    elif isinstance(recompute, (list, set, frozenset)):
        recompute = tuple(recompute)              # anything else: SearchEngine names it
    eng = SearchEngine(data, seq_length=seq_length, global_batch_size=global_batch_size,
                  micro_batch_sizes=micro_batch_sizes, capacity=capacity, headroom=headroom, max_tp=max_tp,
                  gpus_per_node=gpus_per_node, recompute=recompute, distributed_optimizer=distributed_optimizer,
                  fixed=fixed, world0=worlds[0])
    return eng, worlds, gpu_info


def search(model_or_config, *, num_gpus: int | Iterable[int], gpu: str | int, seq_length: int | None = None,
           global_batch_size: int | None = None, micro_batch_sizes: Iterable[int] = (1, 2, 4),
           headroom: float = 0.05, max_tp: int = 8, gpus_per_node: int = 8,
           recompute: Iterable[str] = ("none", "selective", "full"),
           distributed_optimizer: Iterable[bool] = (True,), top: int | None = 10, distinct: bool = True,
           **fixed) -> SearchResult:
    """Every valid layout of ``model_or_config`` on ``num_gpus`` GPUs of type ``gpu`` that fits, best first.

    ``model_or_config``: a preset name, a configuration (path, YAML/JSON text, dict or Config; its
    parallelism and layout fields are replaced, its other fields kept; a pipeline_model_parallel_layout,
    account_for_*_in_pipeline_split or microbatch_group_size_per_vp_stage (or a hybrid pattern's '|' pipeline
    segments) is dropped with a note, as the
    search places layers by its own even and uneven splits) or a bare model section (dict).
    ``num_gpus``: one world size or several. ``gpu``: a name known to :mod:`estimator.formats.gpus`
    (``"H100-80GB"``) or the memory in bytes. A layout fits when its peak ``device_bytes`` is at most
    ``(1 - headroom)`` of the GPU memory. ``seq_length`` and ``global_batch_size`` default to the
    configuration's; without a global batch size each layout takes the multiple of micro-batch x DP
    nearest above :data:`DEFAULT_TOKENS_PER_STEP` tokens. ``max_tp``: the largest TP (and expert TP) size,
    by default one node. ``recompute``: which of none / selective / full to try. ``distributed_optimizer``:
    (True,) by default, since without it a layout needs more memory for the same traffic.
    ``top``: how many layouts to return (None: all that fit; at most :data:`MAX_LAYOUTS`, the best, with a
    note saying how many fit). ``distinct``: one layout per (GPUs, TP, PP,
    VPP, CP, EP, ETP), the best of its stage splits, recompute options and micro-batch sizes; False lists
    every variant that fits (with ``top=None``: every fitting layout, each computed, slower).
    ``fixed``: fields pinned to a value or a list of values, by schema name or alias (tp, pp, vpp, cp, ep,
    etp, mbs), e.g. ``tp=8`` or ``cp=[1, 2]``; other training/precision fields (``fp8=True``) are applied
    to every layout.
    """
    t0 = time.perf_counter()
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise option_error("top", show(top), "must be a positive integer or None (all layouts)")
    eng, worlds, gpu_info = _engine(model_or_config, num_gpus, gpu, seq_length, global_batch_size,
                                    micro_batch_sizes, headroom, max_tp, gpus_per_node, recompute,
                                    distributed_optimizer, fixed)
    if not isinstance(distinct, bool):
        raise option_error("distinct", distinct, "must be true or false")
    found, enumerated, fitting = _run(eng, worlds, top, distinct)
    notes = []
    if len(found) > MAX_LAYOUTS:
        notes.append(f"{len(found):,} layouts fit; the best {MAX_LAYOUTS:,} are listed.")
        found = found[:MAX_LAYOUTS]
    layouts = _layouts(eng, found)
    if eng.gbs is None:
        seqs = max(1, DEFAULT_TOKENS_PER_STEP // eng.s)
        notes.append(f"global_batch_size not given: each layout takes about {DEFAULT_TOKENS_PER_STEP:,} tokens "
                     f"per step (the multiple of micro-batch x DP at or above {seqs} sequences).")
    if eng.dropped:
        notes.append("not searched, dropped from the input: " + ", ".join(f"{k} {v}" for k, v in eng.dropped.items())
                     + " (the search places layers by even and uneven first/last splits; estimate a fixed "
                     "pipeline layout as written).")
    if "selective" in eng.recompute:
        notes.append("selective recompute = " + ", ".join(eng.selective_modules) + ".")
    if not layouts:
        notes.append(f"no layout fits {gpu_info['name']} with {eng.headroom:.0%} headroom; try more GPUs, a "
                     "shorter sequence or fp8, or see min_gpus().")
    return SearchResult(layouts=layouts, num_gpus=worlds, gpu=gpu_info, capacity_bytes=eng.capacity,
                        headroom=eng.headroom, seq_length=eng.s, global_batch_size=eng.gbs, enumerated=enumerated,
                        evaluated=eng.evaluated, fitting=fitting, elapsed_s=time.perf_counter() - t0,
                        notes=tuple(notes))


# --------------------------------------------------------------------------------------------------
# Reverse questions


def fixed_layout(config, gpu, headroom, gpus_per_node):
    """The engine and validated Config of a complete configuration whose layout stays as written."""
    capacity, _ = gpu_capacity(gpu)
    data = source_dict(config)
    cfg = load_config(data)
    eng = SearchEngine(data, seq_length=None, global_batch_size=None, micro_batch_sizes=(1,), capacity=capacity,
                  headroom=headroom, max_tp=cfg.parallelism.tensor_model_parallel_size, gpus_per_node=gpus_per_node,
                  recompute=RECOMPUTE_GRANULARITIES, distributed_optimizer=(True, False), fixed={}, world0=cfg.training.world_size)
    return eng, data, cfg


def describe_layout(eng: SearchEngine, data: dict, est) -> Layout:
    """The Layout of one complete configuration (as written) and its estimate."""
    cfg = load_config(data)
    r = resolve(cfg)
    par, tr = cfg.parallelism, cfg.training
    sh = Shape(r.world, r.t, r.p, par.num_layers_in_first_pipeline_stage, par.num_layers_in_last_pipeline_stage,
                r.v, r.cp, r.ep, r.etp, r.sp)
    if any(getattr(par, k) not in (None, False) for k in SPLIT_NOT_SEARCHED[:3]):
        # A layout string or account_for slots: the cost model's stage sizes are this configuration's own.
        eng._kinds[(sh.p, sh.first, sh.last, sh.v)] = tuple(eng.stage_kind_counts(st.layers) for st in r.plan)
    d = tr.use_distributed_optimizer
    eng.bm.setdefault(d, byte_model(r))
    rc, rc_cost = eng.recompute_of(tr, sh)
    gbs = tr.global_batch_size or eng.auto_gbs(r.b, r.dp, r.p, r.v)
    cost, terms = eng.cost(sh, eng.shape_costs(sh, d, eng.state_floor(sh, d)), rc_cost, r.b, gbs)
    entry = (cost, est.peak.device_bytes, 0, sh, d, rc, r.b, tr.global_batch_size, est.peak, terms)
    return _layouts(eng, [entry], [data])[0]


def largest_fitting(cands: list, fits) -> tuple[int | None, list]:
    """The largest candidate that fits, by bisection (memory grows with the value), checked against its
    successor: (index or None, [(value, fits), ...] in the order tried)."""
    tried, memo = [], {}

    def ok(i):
        if i not in memo:
            memo[i] = fits(cands[i])
            tried.append((cands[i], memo[i]))
        return memo[i]
    if not cands or not ok(0):
        return None, tried
    lo, hi = 0, len(cands) - 1            # ok(lo) holds; find the last index that fits
    if ok(hi):
        return hi, tried
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    while lo + 1 < len(cands) and ok(lo + 1):   # guard against a non-monotone step
        lo += 1
    return lo, tried


def _largest_training_value(eng, data: dict, field: str, cands: list) -> tuple:
    """(index of the largest candidate value of ``training.<field>`` that fits, values tried, {value: (config
    dict, estimate)}) for a fixed layout."""
    import copy
    results = {}

    def fits(value):
        d = copy.deepcopy(data)
        d.setdefault("training", {})[field] = value
        est = stage_memory(resolve(load_config(d)))
        results[value] = (d, est)
        return est.peak.device_bytes <= eng.usable
    i, tried = largest_fitting(cands, fits)
    return i, tried, results


def max_micro_batch(config, *, gpu: str | int, headroom: float = 0.05, limit: int = 1024,
                    gpus_per_node: int = 8) -> Answer:
    """The largest micro-batch size with which this layout (a complete configuration) still fits.

    With a global batch size only the micro-batch sizes that divide global_batch_size / DP are tried."""
    positive_ints("limit", limit, top=MAX_MICRO_BATCH)
    eng, data, cfg = fixed_layout(config, gpu, headroom, gpus_per_node)
    r = resolve(cfg)
    dp, gbs = r.dp, cfg.training.global_batch_size
    cands = [b for b in range(1, limit + 1)
             if gbs is None or (gbs % (b * dp) == 0 and not interleaving_problem(r.p, r.v, gbs // (b * dp), r.group))]
    i, tried, results = _largest_training_value(eng, data, "micro_batch_size", cands)
    if i is None:
        return Answer("max_micro_batch", None, None, tuple(tried), "even micro-batch size 1 does not fit "
                      f"{eng.capacity / GIB:.1f} GiB with {eng.headroom:.0%} headroom")
    b = cands[i]
    nxt = f"; {cands[i + 1]} does not" if i + 1 < len(cands) else f" (the largest candidate, limit {limit})"
    rule = f" (micro-batch sizes dividing global_batch_size / DP = {gbs // dp})" if gbs else ""
    return Answer("max_micro_batch", b, describe_layout(eng, *results[b]), tuple(tried),
                  f"micro-batch size {b} fits{rule}{nxt}")


def max_seq_length(config, *, gpu: str | int, headroom: float = 0.05, multiple: int | None = None,
                   limit: int | None = None, gpus_per_node: int = 8) -> Answer:
    """The longest sequence with which this layout (a complete configuration) still fits.

    Sequence lengths are multiples of ``multiple`` (128 by default) and of what the layout needs (2 x CP,
    and TP x CP with sequence parallelism), up to ``limit`` and the model's max_position_embeddings."""
    eng, data, cfg = fixed_layout(config, gpu, headroom, gpus_per_node)
    r = resolve(cfg)
    step = math.lcm(2 * r.cp if r.cp > 1 else 1, r.t * r.cp if r.sp else 1,
                    positive_ints("multiple", multiple, top=MAX_TOKENS)[0] if multiple is not None else 128)
    cap = cfg.model.max_position_embeddings
    upper = min(x for x in (limit and positive_ints("limit", limit, top=MAX_TOKENS)[0], cap, 2 ** 21) if x)
    cands = [k * step for k in range(1, upper // step + 1)]
    i, tried, results = _largest_training_value(eng, data, "seq_length", cands)
    if i is None:
        return Answer("max_seq_length", None, None, tuple(tried), f"even {step} tokens do not fit "
                      f"{eng.capacity / GIB:.1f} GiB with {eng.headroom:.0%} headroom")
    s = cands[i]
    if i + 1 < len(cands):
        why = f"{s} tokens fit; {cands[i + 1]} do not (multiples of {step})"
    else:
        by = "max_position_embeddings" if upper == cap else "the limit"
        why = f"{s} tokens fit, capped by {by} ({upper}); longer sequences were not tried"
    return Answer("max_seq_length", s, describe_layout(eng, *results[s]), tuple(tried), why)


def min_gpus(model_or_config, *, gpu: str | int, seq_length: int | None = None,
             candidates: Iterable[int] | None = None, **kwargs) -> Answer:
    """The fewest GPUs (powers of two up to 131,072 by default) on which some layout fits.

    ``kwargs`` go to :func:`search` (global_batch_size, headroom, max_tp, recompute, pinned fields...).
    More GPUs never need more memory per GPU for the same layout, so the counts are bisected; the answer
    is checked against the candidate below it."""
    cands = list(positive_ints("candidates", candidates)) if candidates is not None else [2 ** k for k in range(18)]
    kwargs.setdefault("top", 1)
    found = {}

    def fits(n):
        res = search(model_or_config, num_gpus=n, gpu=gpu, seq_length=seq_length, **kwargs)
        found[n] = res
        return bool(res.layouts)
    # The smallest count that fits is the largest fitting one in descending order.
    desc = cands[::-1]
    i, tried = largest_fitting(desc, fits)
    if i is None:
        return Answer("min_gpus", None, None, tuple(tried), f"no layout fits even on {desc[0]} GPUs")
    n = desc[i]
    res = found[n]
    below = f"; on {desc[i + 1]} nothing fits" if i + 1 < len(desc) else ""
    return Answer("min_gpus", n, res.best, tuple(tried), f"{n} GPUs: best layout {res.best.label}{below}")
