"""Strategy search: every valid parallel layout of a model on N GPUs, the ones that fit, ranked.

The seeds' parallelism guide walks users through a manual loop (TP 2, 4, 8, then PP, then EP, then
memory optimizations). :func:`search` does it exhaustively: it enumerates every layout Megatron-Core
accepts (TP, PP with every way of placing the layers, VPP, CP, EP, ETP, sequence parallelism, the distributed
optimizer, recompute none / selective / full in uniform groups and blocks of any size, the micro-batch size;
:mod:`estimator.plan.space`), keeps those whose peak ``device_bytes`` (:func:`estimator.estimate`) is at most
the usable memory of the one fit rule (upper bound plus what is kept free, :func:`estimator.formats.gpus.fit`), and ranks them by relative step time (:mod:`estimator.plan.cost`, which
documents the cost model and its constants, re-exported here). Every reported layout holds a complete
configuration that ``estimate`` reproduces exactly. The result also says where the configuration's own layout
stands (:attr:`SearchResult.current`: refused on these GPUs and why, outside the searched space and why, or its
rank) and, when nothing is listed, why (:attr:`SearchResult.why_none`: no valid layout, with the rule and its
numbers, or valid ones that do not fit; :mod:`estimator.plan.explain`).

Speed (DeepSeek-V3 on 1,024 GPUs; ``benchmarks/search.py``): a lower bound of the model states rules out whole
families before any estimate, one layout that does not fit rules out the heavier ones of its shape (both in
:mod:`estimator.plan.space`), and the cost of a layout is known before its memory, so shapes are visited best
first and the search stops once ``top`` layouts fit and nothing left can beat them (:class:`_Walk`). The shapes that
differ only in EP and ETP share their cost bound but for the expert all-to-all; an estimate computes only the
stages that can hold the peak (:func:`estimator.memory.assemble.peak_memory`); the walk that ranks the
configuration's own layout reuses the first walk's estimates and costed variants.

Bounds: a search enumerates at most :data:`MAX_SHAPES` parallel shapes (more is refused, naming the option to
narrow) and computes at most :data:`MAX_EVALUATIONS` estimates (then it stops and says so: the list is the best of
those evaluated); it lists at most :data:`MAX_LAYOUTS` layouts (``top=None``: the best ones, found best first).
So every accepted search answers in bounded time and memory (``benchmarks/search.py`` prints the worst case).

The reverse questions (:func:`min_gpus`, :func:`max_micro_batch`, :func:`max_seq_length`) bisect over the world
size, the micro-batch size or the sequence length, since memory per GPU is (nearly: see :func:`min_gpus`)
monotone in each.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Iterable

from ..config.errors import ConfigError, Problem, n_gpus, show
from ..formats.gpus import KEEP_FREE, get_gpu, with_gpu_arch
from ..config.load import load_config
from ..config.rules import interleaving_problem
from ..config.schema import MAX_MICRO_BATCH, MAX_TOKENS
from ..memory.assemble import stage_memory
from ..memory.report import GIB, to_plain
from ..memory.states import byte_model
from ..model.resolve import resolve
from .cost import (DEFAULT_TOKENS_PER_STEP, DP_OVERLAPPED_EXPOSED, FULL_RECOMPUTE, GPU_FLOPS, HBM_BYTES_PER_S,
                   LAUNCH_SECONDS, NETWORK_BYTES_PER_S, NVLINK_BYTES_PER_S, SELECTIVE_MODULE_COST, Shape, why_ranked)
from .explain import (Current, current_text, label_of, no_fit_reason, no_valid_reason, place_current, rule_text,
                      space_text)
from .space import (RECOMPUTE_GRANULARITIES, SearchEngine, gpu_capacity, no_fit_implied, option_error, positive_ints,
                    rc_parts, source_dict, world_sizes)

#: Most layouts one search returns with ``top=None``: the best of them, found best first.
MAX_LAYOUTS = 10_000
#: Most estimates one search computes (each ~0.3-1 ms in CPython, a few times that under Pyodide): past it the
#: search stops and says so.
MAX_EVALUATIONS = 10_000
#: Most estimates spent, after the search itself, counting the layouts that beat the configuration's own layout (its
#: rank); past it the rank is given as a bound ("#k or lower").
RANK_EVALUATIONS = 100
#: Most parallel shapes (GPUs, TP, PP and split, VPP, CP, EP, ETP) one search enumerates; more is refused.
MAX_SHAPES = 250_000

__all__ = ["Answer", "Current", "Layout", "SearchResult", "max_micro_batch", "max_seq_length", "min_gpus", "search",
           "GPU_FLOPS", "HBM_BYTES_PER_S", "NVLINK_BYTES_PER_S", "NETWORK_BYTES_PER_S", "LAUNCH_SECONDS",
           "FULL_RECOMPUTE", "SELECTIVE_MODULE_COST", "DP_OVERLAPPED_EXPOSED", "DEFAULT_TOKENS_PER_STEP",
           "MAX_EVALUATIONS", "MAX_LAYOUTS", "MAX_SHAPES", "RANK_EVALUATIONS"]


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
    recompute: str           # none | selective | full | full-uniform<n> | full-block<n>
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
    account_for_embedding: bool = False    # the embedding counted as a layer slot of the pipeline split
    account_for_loss: bool = False         # the loss counted as a layer slot
    pipeline_layout: str | None = None     # the configuration's own pipeline_model_parallel_layout
    recompute_method: str | None = None    # uniform | block (full recompute)
    recompute_num_layers: int | None = None

    def to_dict(self) -> dict:
        return to_plain(self)


@dataclass(frozen=True)
class SearchResult:
    """The layouts that fit, best first, and what the search looked at."""

    layouts: tuple
    num_gpus: tuple
    gpu: dict                # name, memory_bytes, source, arch (its training.gpu_arch; None for a capacity)
    capacity_bytes: int
    headroom: float
    seq_length: int
    global_batch_size: int | None   # None: each layout takes about DEFAULT_TOKENS_PER_STEP tokens per step
    enumerated: int          # layouts enumerated (every combination the rules allow)
    evaluated: int           # layouts whose memory was computed (the rest were pruned or ranked out)
    fitting: int | None      # layouts that fit; None when the search stopped once ``top`` were certain
    elapsed_s: float
    notes: tuple = field(default=())
    complete: bool = True    # False: stopped at MAX_EVALUATIONS; the list is the best of those evaluated
    space: str = ""          # the bounds of the searched space, in words
    current: Current | None = None   # the configuration's own layout (None for a bare model)
    why_none: str | None = None      # why nothing is listed (no valid layout, with the rule; or none fits)

    usable_bytes: int = 0    # the largest peak device bytes that fits by the one rule (formats.gpus.usable_bytes)
    rule: str = ""           # that rule in words: capacity, kept free, error band and what drives it

    @property
    def best(self) -> Layout | None:
        return self.layouts[0] if self.layouts else None

    def summary(self) -> str:
        """How many layouts were enumerated, evaluated, fit and shown, and the bounds of the searched space."""
        counts = ", ".join(f"{n:,}" for n in self.num_gpus)
        space = self.space[:1].upper() + self.space[1:] if self.space else ""
        if not self.enumerated and self.why_none:          # nothing valid: the rule that stops every layout
            return self.why_none[:1].upper() + self.why_none[1:] + "." + (f" {space}." if space else "")
        gpus = "GPU" if tuple(self.num_gpus) == (1,) else "GPUs"
        head = (f"{self.enumerated:,} layouts enumerated on {counts} {gpus}, {self.evaluated:,} evaluated "
                f"(the rest ruled out by a memory lower bound or outranked)")
        if not self.complete:
            head += (f"; stopped at the limit of {MAX_EVALUATIONS:,} evaluated layouts, so not every layout was "
                     "looked at")
        if not self.layouts:
            head += f"; none fits: {self.why_none}" if self.why_none else "; none fits"
        elif self.fitting is not None:
            head += f"; {self.fitting:,} fit, {len(self.layouts):,} shown"
        elif self.complete:
            head += (f"; the best {len(self.layouts):,} shown (the search stops once nothing left can beat them)")
        else:
            head += f"; the best {len(self.layouts):,} of those evaluated shown"
        return head + "." + (f" {space}." if space else "")

    def to_dict(self) -> dict:
        d = to_plain(self)
        d["best"] = self.best.to_dict() if self.best else None
        d["summary"] = self.summary()
        d["current"] = self.current.to_dict() if self.current else None
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

_STOP = object()


class _Walk:
    """Best-first walk of one search's layouts: the shapes in order of a lower bound of their cost (built once),
    the layouts of a shape in cost order, each estimate memoised (a second walk, to rank the configuration's own
    layout, costs no estimate twice) and counted against :data:`MAX_EVALUATIONS`."""

    def __init__(self, eng: SearchEngine, worlds: tuple):
        self.eng = eng
        eng.evaluated = eng.invalid = 0
        self.memo = {}
        self.rows = {}                # (candidate, distinct) -> the shape's variants in walk order (_rows)
        self.lightest = None          # (device bytes, label) of the lightest layout evaluated
        self.stopped = False
        self.budget = MAX_EVALUATIONS
        enumerated = shapes = 0
        cands = []
        base_lb = 1.0 if "none" in eng.recompute or "full" in eng.recompute else 1.0 + eng.rc_cost_selective
        max_b = max(eng.mbs)
        self.floors = {}
        self.floor_values = {}
        nd = len(eng.dist)
        for n in worlds:
            # Shapes that differ only in EP and ETP share their micro-batch sizes, recompute options and all cost
            # bounds but the expert all-to-all.
            for group in eng.shape_groups(n):
                shapes += len(group)
                if shapes > MAX_SHAPES:
                    raise option_error("num_gpus", list(worlds), f"the search space holds more than {MAX_SHAPES:,} "
                                       "parallel shapes (TP x PP split x VPP x CP x EP x ETP) on these GPU counts; "
                                       "pin a dimension (e.g. tp=8, pp=16, ep=8), lower max_tp or search fewer "
                                       "GPU counts")
                sh = group[0]
                bs = eng.batches(sh)
                nrc = len(eng.rc_options(sh))
                if not bs or not nrc:
                    continue
                enumerated += nd * nrc * len(bs) * len(group)
                parts = None
                floors, split = self.floors, (sh.n, sh.t, sh[2:9])
                for sh in group:
                    # the model states alone leave room (memoised per floor key: fitting_optimizers)
                    ok = floors.get(split + (sh.ep, sh.etp))
                    if ok is None:
                        ok = self.fitting_optimizers(sh)
                    if ok:
                        if parts is None:
                            parts = eng.bound_parts(sh, max_b)
                        cands.append((base_lb + eng.bound_of(sh, parts), len(cands), sh))
        cands.sort()                  # by (bound, enumeration order): the order numbers are unique
        self.cands = cands
        self.enumerated = enumerated

    def fitting_optimizers(self, sh: Shape) -> list:
        """(distributed optimizer, state floor) of the choices whose model-state lower bound fits (memoised: the
        floor depends on the GPUs, TP, the split, EP and ETP only)."""
        eng = self.eng
        key = (sh.n, sh.t, sh[2:9], sh.ep, sh.etp)
        ok = self.floors.get(key)
        if ok is None:
            ok = self.floors[key] = []
            for d in eng.dist:
                fl = self.floor_values[key + (d,)] = eng.state_floor(sh, d)
                if fl[0] <= eng.usable:
                    ok.append((d, fl))
        return ok

    def floor_min(self) -> int | None:
        """The least model-state lower bound over the shapes (for the reason nothing fits)."""
        return min((fl[0] for fl in self.floor_values.values()), default=None)

    def _evaluate(self, sh, d, rc, b, gbs):
        """(device bytes, peak, failed in the forward/backward passes) of a layout, None when it is invalid, or
        _STOP at the evaluation limit."""
        key = (sh, d, rc, b, gbs)
        if key in self.memo:
            return self.memo[key]
        eng = self.eng
        if eng.evaluated + eng.invalid >= self.budget:
            self.stopped = True
            return _STOP
        est = eng.evaluate(sh, d, rc, b, gbs)
        if est is None:
            out = None
        else:
            pk, stage = est
            out = (pk.device_bytes, pk, stage.peak_phase == "forward_backward")
            if self.lightest is None or pk.device_bytes < self.lightest[0]:
                self.lightest = (pk.device_bytes, label_of(sh, rc, b, d, eng.moe))
        self.memo[key] = out
        return out

    def _rows(self, seq: int, sh: Shape, distinct: bool) -> tuple[list, dict]:
        """The variants of candidate shape ``seq`` with their costs, in the order the walk tries them, and the cost
        terms per optimizer choice (memoised: the walk that ranks the configuration's own layout asks again)."""
        hit = self.rows.get((seq, distinct))
        if hit is not None:
            return hit
        eng = self.eng
        ok = self.fitting_optimizers(sh)
        tr = eng.traffic(sh)
        sc = {d: dict(tr, data_parallel_s=eng.dp_seconds(sh, d, fl), d=d, floor=fl) for d, fl in ok}
        rows = []
        for i, (d, rc, b, gbs) in enumerate(eng.variants(sh)):
            if d in sc:
                cost, terms = eng.cost(sh, sc[d], eng.rc_cost(sh, rc), b, gbs)
                rows.append((cost, b, not d, i, rc, d, gbs, terms))
        # One layout per key: cost order finds the key's best first. Every variant: the lightest first, so that
        # a failure rules out the most (no_fit_implied); costs are then checked one by one.
        rows.sort(key=(lambda x: x[:4]) if distinct else (lambda x: (x[1], _heaviness(x[4]), x[2])))
        self.rows[(seq, distinct)] = rows, sc
        return rows, sc

    def run(self, top: int | None, distinct: bool, below: float | None = None) -> tuple[list, bool]:
        """The layouts that fit, best first (entries (cost, peak bytes, tie, shape, d, rc, b, gbs, peak, terms)),
        and whether the walk saw every layout that could enter them. ``top``: stop once that many are certain;
        ``below``: only layouts costing at most that (the count that ranks the configuration's own layout).
        With ``distinct`` one entry per (GPUs, TP, PP, VPP, CP, EP, ETP), its best variant."""
        eng = self.eng
        best: dict = {}
        thr = float("inf") if below is None else below
        complete = True
        self.stopped = False
        for lb, seq, sh in self.cands:
            if lb > thr:
                complete = complete and below is not None
                break
            key = (sh.n, sh.t, sh.p, sh.v, sh.cp, sh.ep, sh.etp) if distinct else None
            rows, sc = self._rows(seq, sh, distinct)
            failed = []
            probed = set()
            b_min = min(eng.batches(sh))
            c = eng.chunk_max(sh)
            for cost, b, _, _, rc, d, gbs, terms in rows:
                mine = best.get(key) if distinct else None
                if cost > thr:
                    complete = complete and below is not None
                    if distinct:
                        break
                    continue
                if mine is not None and cost >= mine[0]:
                    break
                if no_fit_implied(failed, d, rc, b):
                    continue
                # Probe the lightest member of this row's family first (the smallest micro-batch, the distributed
                # optimizer, for block the most layers): if it does not fit, no member does (no_fit_implied).
                probe = (d or True in sc, _probe_rc(rc, c), b_min[0])
                if probe != (d, rc, b) and probe not in probed and probe[0] in sc:
                    probed.add(probe)
                    res = self._evaluate(sh, probe[0], probe[1], *b_min)
                    if res is _STOP:
                        break
                    if res is not None and res[0] > eng.usable:
                        failed.append((*probe, res[2]))
                        if no_fit_implied(failed, d, rc, b):
                            continue
                res = self._evaluate(sh, d, rc, b, gbs)
                if res is _STOP:
                    break
                if res is None:
                    continue
                dev, pk, fwd = res
                if dev > eng.usable:
                    failed.append((d, rc, b, fwd))
                    continue
                entry = (cost, dev, (seq, len(failed), b), sh, d, rc, b, gbs, pk, terms)
                k = key if distinct else (seq, rc, b, d)
                if k not in best or entry[:3] < best[k][:3]:
                    best[k] = entry
                    if top and len(best) >= top and below is None:
                        thr = heapq.nsmallest(top, (e[0] for e in best.values()))[-1]
            if self.stopped:
                break
        found = sorted(best.values(), key=lambda e: e[:3])
        if top:
            found = found[:top]
        return found, complete and not self.stopped


def _probe_rc(rc: str, chunk: int) -> str:
    """The recompute option whose failure says the most about ``rc``'s family: block of the most layers (C - 1)
    for block, the option itself otherwise."""
    return f"full-block{chunk - 1}" if rc.startswith("full-block") else rc


def _heaviness(rc: str) -> int:
    """Memory order of the recompute options, lightest first: uniform groups, block of more to fewer layers,
    selective, none (an order for the walk, not a claim: no_fit_implied holds what is proven)."""
    g, method, n = rc_parts(rc)
    if g == "full":
        return 0 if method == "uniform" else 1_000_000 - n
    return 2_000_000 if g == "selective" else 3_000_000


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
        why = why_ranked(rank=rank, count=len(found), cost=cost, terms=terms, best_terms=best_terms, sh=sh, rc=rc,
                         b=b, m=m, gbs=gbs, given=given, peak=peak, capacity=engine.capacity, gpn=engine.gpn)
        _, method, n = rc_parts(rc)
        out.append(Layout(
            rank=rank, label=label_of(sh, rc, b, d, engine.moe), config=config,
            num_gpus=sh.n, tp=sh.t, pp=sh.p, vpp=sh.v, cp=sh.cp, ep=sh.ep, etp=sh.etp, dp=sh.dp,
            edp=sh.edp if engine.moe else sh.dp * sh.cp, first_stage_layers=sh.first, last_stage_layers=sh.last,
            sequence_parallel=sh.sp, distributed_optimizer=d, recompute=rc, micro_batch_size=b,
            global_batch_size=given, num_microbatches=m if given else None, peak_stage=pk.stage,
            peak_allocated_bytes=pk.allocated_bytes, peak_device_bytes=peak, capacity_bytes=engine.capacity,
            headroom_bytes=free, headroom_fraction=free / engine.capacity,
            bubble=(sh.p - 1) / (m * sh.v) if sh.p > 1 else 0.0, cost=cost,
            costs={k: round(x, 6) for k, x in terms.items()}, why=why, account_for_embedding=sh.acc_e,
            account_for_loss=sh.acc_l, pipeline_layout=sh.layout, recompute_method=method, recompute_num_layers=n))
    return tuple(out)


def _for_gpu(data: dict, gpu, gpu_info: dict) -> dict:
    """The configuration for a named GPU: its architecture in ``training.gpu_arch`` (estimator.formats.gpus
    ``with_gpu_arch``), so that every layout is estimated as on that GPU; as given for a capacity in bytes."""
    if gpu_info.get("arch") is None:
        return data
    return with_gpu_arch(data, get_gpu(gpu) if isinstance(gpu, str) else gpu)


def _engine(model_or_config, num_gpus, gpu, seq_length, global_batch_size, micro_batch_sizes, headroom, max_tp,
            gpus_per_node, recompute, distributed_optimizer, fixed):
    worlds = world_sizes(num_gpus)
    capacity, gpu_info = gpu_capacity(gpu)
    data = _for_gpu(source_dict(model_or_config), gpu, gpu_info)
    if isinstance(recompute, str) or recompute is None:
        recompute = (recompute,)
    elif isinstance(recompute, (list, set, frozenset)):
        recompute = tuple(recompute)              # anything else: SearchEngine names it
    eng = SearchEngine(data, seq_length=seq_length, global_batch_size=global_batch_size,
                       micro_batch_sizes=micro_batch_sizes, capacity=capacity, headroom=headroom, max_tp=max_tp,
                       gpus_per_node=gpus_per_node, recompute=recompute, distributed_optimizer=distributed_optimizer,
                       fixed=fixed, world0=worlds[0])
    return eng, worlds, gpu_info


def _current(walk: _Walk, worlds: tuple, found: list, complete: bool, cap: int, distinct: bool) -> Current | None:
    """Where the configuration's own layout stands: refused, outside the space, or its rank among those that fit."""
    eng = walk.eng
    placed = place_current(eng, worlds)
    if placed is None:
        return None
    if placed.problem is not None:
        c = Current(placed.label, placed.num_gpus, False, placed.problem, False, None, None, None, None, None,
                    False, "")
        return Current(**{**c.__dict__, "text": current_text(c, eng.usable, eng.capacity, eng.headroom)})
    dev = placed.estimate.peak.device_bytes
    fits = dev <= eng.usable
    rank, exact = None, True
    if fits:
        mark = (placed.cost, dev)
        # The walk is best first: every layout costing at most the last of a full list was seen, and with the
        # walk complete every layout that fits was.
        certain = not walk.stopped and (complete or (len(found) >= cap and found[-1][0] >= placed.cost))
        entries = found
        if not certain:
            main = walk.stopped
            walk.budget = min(MAX_EVALUATIONS, eng.evaluated + eng.invalid + RANK_EVALUATIONS)
            entries, exact = walk.run(None, distinct, below=placed.cost)
            walk.stopped = main
        rank = 1 + sum(1 for e in entries if e[:2] < mark)
    c = Current(placed.label, placed.num_gpus, True, None, placed.excluded is None, placed.excluded, fits, dev,
                placed.cost, rank, exact, "")
    return Current(**{**c.__dict__, "text": current_text(c, eng.usable, eng.capacity, eng.headroom)})


def _search(model_or_config, num_gpus, gpu, seq_length, global_batch_size, micro_batch_sizes, headroom, max_tp,
            gpus_per_node, recompute, distributed_optimizer, top, distinct, fixed, want_current) -> SearchResult:
    t0 = time.perf_counter()
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise option_error("top", show(top), "must be a positive integer or None (all layouts)")
    eng, worlds, gpu_info = _engine(model_or_config, num_gpus, gpu, seq_length, global_batch_size,
                                    micro_batch_sizes, headroom, max_tp, gpus_per_node, recompute,
                                    distributed_optimizer, fixed)
    if not isinstance(distinct, bool):
        raise option_error("distinct", distinct, "must be true or false")
    walk = _Walk(eng, worlds)
    cap = top if top is not None else MAX_LAYOUTS
    found, complete = walk.run(cap, distinct)
    # Every layout that fits was seen when the walk ran to its end without reaching ``cap`` listed.
    fitting = len(found) if complete and len(found) < cap else None
    notes = []
    if top is None and len(found) >= MAX_LAYOUTS:
        notes.append(f"more than {MAX_LAYOUTS:,} layouts fit; the best {MAX_LAYOUTS:,} are listed (found best first).")
    if walk.stopped:
        notes.append(f"the search stopped at its limit of {MAX_EVALUATIONS:,} evaluated layouts: "
                     "the layouts listed are the best of those evaluated; pin a dimension or ask for fewer to search "
                     "all of them.")
    layouts = _layouts(eng, found)
    if eng.gbs is None:
        seqs = max(1, DEFAULT_TOKENS_PER_STEP // eng.s)
        notes.append(f"global_batch_size not given: each layout takes about {DEFAULT_TOKENS_PER_STEP:,} tokens "
                     f"per step (the multiple of micro-batch x DP at or above {seqs} sequences).")
    if eng.dropped:
        notes.append("not searched: " + ", ".join(f"the {k.replace('hybrid_layer_pattern ', '')} ('|') of the layer "
                                                  f"pattern {v}" for k, v in eng.dropped.items())
                     + ", because the search chooses where the pipeline splits the layers; estimate the pattern's own "
                       "split as written to see it.")
    if eng.group is not None:
        notes.append(f"microbatch_group_size_per_vp_stage {eng.group} kept on the layouts with virtual stages and "
                     f"PP <= {eng.group}; the others use Megatron's default groups of PP.")
    if "selective" in eng.recompute:
        notes.append("selective recompute = " + ", ".join(eng.selective_modules) + ".")
    why_none = None
    if not layouts and not walk.stopped:
        if not walk.enumerated:
            why_none = "; ".join(no_valid_reason(eng, n) for n in worlds)
        else:
            why_none = no_fit_reason(eng, walk.enumerated, walk.lightest, walk.floor_min())
    current = _current(walk, worlds, found, complete, cap, distinct) if want_current else None
    return SearchResult(layouts=layouts, num_gpus=worlds, gpu=gpu_info, capacity_bytes=eng.capacity,
                        headroom=eng.headroom, seq_length=eng.s, global_batch_size=eng.gbs,
                        enumerated=walk.enumerated, evaluated=eng.evaluated, fitting=fitting,
                        elapsed_s=time.perf_counter() - t0, notes=tuple(notes), complete=not walk.stopped,
                        space=space_text(eng), current=current, why_none=why_none, usable_bytes=eng.usable,
                        rule=rule_text(eng))


#: The keyword arguments of search() after seq_length, with their defaults, in _search's order.
_DEFAULTS = {"global_batch_size": None, "micro_batch_sizes": (1, 2, 4), "headroom": KEEP_FREE, "max_tp": 8,
             "gpus_per_node": 8, "recompute": ("none", "selective", "full"), "distributed_optimizer": (True,),
             "top": 10, "distinct": True}


def search(model_or_config, *, num_gpus: int | Iterable[int], gpu: str | int, seq_length: int | None = None,
           global_batch_size: int | None = None, micro_batch_sizes: Iterable[int] = (1, 2, 4),
           keep_free: float = KEEP_FREE, max_tp: int = 8, gpus_per_node: int = 8,
           recompute: Iterable[str] = ("none", "selective", "full"),
           distributed_optimizer: Iterable[bool] = (True,), top: int | None = 10, distinct: bool = True,
           headroom: float | None = None, **fixed) -> SearchResult:
    """Every valid layout of ``model_or_config`` on ``num_gpus`` GPUs of type ``gpu`` that fits, best first.

    ``model_or_config``: a preset name, a configuration (path, YAML/JSON text, dict or Config; its
    parallelism and layout fields are replaced, its other fields kept; its own pipeline split (first/last stage
    counts, embedding/loss slots, layout string) is one of the splits searched, and its
    microbatch_group_size_per_vp_stage is kept where it applies) or a bare model section (dict).
    ``num_gpus``: one world size or several. ``gpu``: a name known to :mod:`estimator.formats.gpus`
    (``"H100-80GB"``) or the memory in bytes. A layout fits when its peak ``device_bytes`` is at most
    :func:`estimator.formats.gpus.usable_bytes`: by the one rule of :func:`estimator.formats.gpus.fit`, its upper
    bound (``device_bytes`` x (1 + the configuration's measured error band)) plus ``keep_free`` (a fraction of the
    GPU memory, default 0; ``headroom`` is its old name) fits the GPU. ``seq_length`` and ``global_batch_size`` default to the
    configuration's; without a global batch size each layout takes the multiple of micro-batch x DP
    nearest above :data:`DEFAULT_TOKENS_PER_STEP` tokens. ``max_tp``: the largest TP (and expert TP) size,
    by default one node. ``recompute``: which of none / selective / full to try (full: uniform groups of any
    size and block of any number of layers). ``distributed_optimizer``:
    (True,) by default, since without it a layout needs more memory for the same traffic.
    ``top``: how many layouts to return (None: all that fit, at most :data:`MAX_LAYOUTS`, the best). ``distinct``:
    one layout per (GPUs, TP, PP, VPP, CP, EP, ETP), the best of its stage splits, recompute options and micro-batch
    sizes; False lists every variant that fits.
    ``fixed``: fields pinned to a value or a list of values, by schema name or alias (tp, pp, vpp, cp, ep,
    etp, mbs, first_stage_layers, last_stage_layers, layout, account_for_embedding, account_for_loss), e.g.
    ``tp=8``, ``cp=[1, 2]``, ``recompute_method="uniform"``, ``recompute_num_layers=[1, 2]``; other
    training/precision fields (``fp8=True``) are applied to every layout.

    The result's ``current`` says where the configuration's own layout stands on the searched GPU count (its own
    count when searched): refused there and why (it has to change), outside the searched space and why, and its
    rank among the layouts that fit. ``why_none`` says why nothing is listed. A search computes at most
    :data:`MAX_EVALUATIONS` estimates and enumerates at most :data:`MAX_SHAPES` shapes (more is refused).
    """
    if headroom is not None:                     # the old name of keep_free, named in its own errors
        if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 <= headroom < 1:
            raise option_error("headroom", headroom, "must be a fraction in [0, 1), e.g. 0.05 for 5 %")
        keep_free = headroom
    return _search(model_or_config, num_gpus, gpu, seq_length, global_batch_size, micro_batch_sizes, keep_free,
                   max_tp, gpus_per_node, recompute, distributed_optimizer, top, distinct, fixed, True)


# --------------------------------------------------------------------------------------------------
# Reverse questions


def fixed_layout(config, gpu, headroom, gpus_per_node):
    """The engine and validated Config of a complete configuration whose layout stays as written."""
    capacity, gpu_info = gpu_capacity(gpu)
    data = _for_gpu(source_dict(config), gpu, gpu_info)
    cfg = load_config(data)
    eng = SearchEngine(data, seq_length=None, global_batch_size=None, micro_batch_sizes=(1,), capacity=capacity,
                       headroom=headroom, max_tp=cfg.parallelism.tensor_model_parallel_size,
                       gpus_per_node=gpus_per_node, recompute=RECOMPUTE_GRANULARITIES,
                       distributed_optimizer=(True, False), fixed={}, world0=cfg.training.world_size)
    return eng, data, cfg


def describe_layout(eng: SearchEngine, data: dict, est) -> Layout:
    """The Layout of one complete configuration (as written) and its estimate."""
    cfg = load_config(data)
    cost, terms, sh, d, rc, b = _costed(eng, cfg)
    entry = (cost, est.peak.device_bytes, 0, sh, d, rc, b, cfg.training.global_batch_size, est.peak, terms)
    return _layouts(eng, [entry], [data])[0]


def layout_cost(eng: SearchEngine, cfg) -> float:
    """The relative step time (the cost model's) of one complete, validated Config, its layout as written:
    ``describe_layout(eng, data, est).cost`` without the estimate and the Layout around it. ``eng``: a
    :func:`fixed_layout` engine of any configuration with the same :meth:`SearchEngine.inputs_key`."""
    return _costed(eng, cfg)[0]


def _costed(eng: SearchEngine, cfg) -> tuple:
    """(cost, cost terms, Shape, distributed optimizer, recompute name, micro-batch size) of a complete Config, its
    layout as written."""
    r = resolve(cfg, sub_sample=False)          # the layout as written
    par, tr = cfg.parallelism, cfg.training
    sh = Shape(n=r.world, t=r.t, p=r.p, first=par.num_layers_in_first_pipeline_stage,
               last=par.num_layers_in_last_pipeline_stage, acc_e=bool(par.account_for_embedding_in_pipeline_split),
               acc_l=bool(par.account_for_loss_in_pipeline_split), layout=par.pipeline_model_parallel_layout, v=r.v,
               cp=r.cp, ep=r.ep, etp=r.etp, sp=r.sp)
    d = tr.use_distributed_optimizer
    if d not in eng.bm:
        eng.bm[d] = byte_model(r)
    rc, rc_cost = eng.recompute_of(tr, sh)
    gbs = tr.global_batch_size or eng.auto_gbs(r.b, r.dp, r.p, r.v)
    cost, terms = eng.cost(sh, eng.shape_costs(sh, d, eng.state_floor(sh, d)), rc_cost, r.b, gbs)
    return cost, terms, sh, d, rc, r.b


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


def max_micro_batch(config, *, gpu: str | int, keep_free: float = KEEP_FREE, limit: int = 1024,
                    gpus_per_node: int = 8, headroom: float | None = None) -> Answer:
    """The largest micro-batch size with which this layout (a complete configuration) still fits.

    With a global batch size only the micro-batch sizes that divide global_batch_size / DP are tried."""
    positive_ints("limit", limit, top=MAX_MICRO_BATCH)
    eng, data, cfg = fixed_layout(config, gpu, keep_free if headroom is None else headroom, gpus_per_node)
    r = resolve(cfg, sub_sample=False)
    dp, gbs = r.dp, cfg.training.global_batch_size
    cands = [b for b in range(1, limit + 1)
             if gbs is None or (gbs % (b * dp) == 0 and not interleaving_problem(r.p, r.v, gbs // (b * dp), r.group))]
    i, tried, results = _largest_training_value(eng, data, "micro_batch_size", cands)
    if i is None:
        return Answer("max_micro_batch", None, None, tuple(tried), "even micro-batch size 1 does not fit "
                      f"{rule_text(eng)}")
    b = cands[i]
    nxt = f"; {cands[i + 1]} does not" if i + 1 < len(cands) else f" (the largest candidate, limit {limit})"
    rule = f" (micro-batch sizes dividing global_batch_size / DP = {gbs // dp})" if gbs else ""
    return Answer("max_micro_batch", b, describe_layout(eng, *results[b]), tuple(tried),
                  f"micro-batch size {b} fits{rule}{nxt}")


def max_seq_length(config, *, gpu: str | int, keep_free: float = KEEP_FREE, multiple: int | None = None,
                   limit: int | None = None, gpus_per_node: int = 8, headroom: float | None = None) -> Answer:
    """The longest sequence with which this layout (a complete configuration) still fits.

    Sequence lengths are multiples of ``multiple`` (128 by default) and of what the layout needs (2 x CP,
    and TP x CP with sequence parallelism), up to ``limit`` and the model's max_position_embeddings."""
    eng, data, cfg = fixed_layout(config, gpu, keep_free if headroom is None else headroom, gpus_per_node)
    if cfg.model.model_kind == "wan" and cfg.model.wan_latent_frames:
        # Wan's sequence is its latent grid, not seq_length (estimator/model/layers/wan.py latent_tokens)
        raise ConfigError(Problem("model.wan_latent_frames", cfg.model.wan_latent_frames, "the latent grid "
                                  "(model.wan_latent_frames x wan_latent_height x wan_latent_width) sets Wan's "
                                  "sequence, not training.seq_length: clear the three wan_latent_* fields to search "
                                  "the longest sequence"))
    r = resolve(cfg, sub_sample=False)
    step = math.lcm(2 * r.cp if r.cp > 1 else 1, r.t * r.cp if r.sp else 1,
                    positive_ints("multiple", multiple, top=MAX_TOKENS)[0] if multiple is not None else 128)
    cap = cfg.model.max_position_embeddings
    upper = min(x for x in (limit and positive_ints("limit", limit, top=MAX_TOKENS)[0], cap, 2 ** 21) if x)
    cands = [k * step for k in range(1, upper // step + 1)]
    i, tried, results = _largest_training_value(eng, data, "seq_length", cands)
    if i is None:
        return Answer("max_seq_length", None, None, tuple(tried), f"even {step} tokens do not fit "
                      f"{rule_text(eng)}")
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

    ``kwargs`` go to :func:`search` (global_batch_size, keep_free, max_tp, recompute, pinned fields...).
    More GPUs need no more memory per GPU for the same layout, with one exception: where the data-parallel size
    grows from 1, NCCL sets up a communicator for the new group (:data:`estimator.memory.NCCL_BYTES_PER_COMMUNICATOR`
    per group), which outweighs the optimizer states it shards only for a model of a few hundred MiB of them. So
    the counts are bisected, and the answer is checked against the candidates below it, walking down while they
    fit."""
    cands = list(positive_ints("candidates", candidates)) if candidates is not None else [2 ** k for k in range(18)]
    kwargs.setdefault("top", 1)
    if "keep_free" in kwargs:                    # the one "keep free" setting; headroom is its old name
        kwargs["headroom"] = kwargs.pop("keep_free")
    options = {k: kwargs.pop(k, v) for k, v in _DEFAULTS.items()}
    found = {}

    def fits(n):
        res = _search(model_or_config, n, gpu, seq_length, *options.values(), dict(kwargs), False)
        found[n] = res
        return bool(res.layouts)
    # The smallest count that fits is the largest fitting one in descending order.
    desc = cands[::-1]
    i, tried = largest_fitting(desc, fits)
    if (i is None or desc[i] != desc[-1]) and desc[-1] not in found:
        # The fewest candidate (one GPU by default) has no process group at all: fitting there says nothing of
        # twice as many, which need at least one NCCL communicator. It is asked on its own.
        ok = fits(desc[-1])
        tried.append((desc[-1], ok))
        if ok:
            i = len(desc) - 1
    if i is None:
        return Answer("min_gpus", None, None, tuple(tried), f"no layout fits even on {n_gpus(desc[0])}")
    n = desc[i]
    res = found[n]
    below = f"; on {desc[i + 1]} nothing fits" if i + 1 < len(desc) else ""
    return Answer("min_gpus", n, res.best, tuple(tried), f"{n_gpus(n)}: best layout {res.best.label}{below}")
