"""What the layout search says besides its list: the space it searched, where the configuration's own layout stands
in it, and why nothing is listed.

- :func:`space_text`: the bounds of the space in words (TP up to ``max_tp``, the micro-batch sizes, the optimizer
  choice, the recompute options, the pinned fields, what was dropped from the input), so that a summary never reads
  as exhaustive beyond them;
- :func:`place_current`: the configuration's own layout on the searched GPU count: refused by Megatron-Core's rules
  (then it has to change, and why), outside the searched space (and which bound leaves it out), or one of the
  enumerated layouts; with its estimate and its relative step time, which :func:`estimator.plan.search.search`
  turns into a rank;
- :func:`no_valid_reason`: when no layout passes the rules on a GPU count, the rule that stops them, with its
  numbers (a global batch that cannot be split over that many GPUs, a pinned size the model refuses, ...);
- :func:`no_fit_reason`: when valid layouts exist but none fits, how far the lightest is from the GPU, and whether
  the model states alone are already too many.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..config.errors import ConfigError, n_gpus
from ..config.load import load_config
from ..memory.assemble import stage_memory
from ..memory.report import GIB, to_plain
from ..memory.states import byte_model
from ..model.resolve import resolve
from .cost import Shape
from .space import SearchEngine, Split, rc_parts

__all__ = ["Current", "Placed", "current_text", "label_of", "no_fit_reason", "no_valid_reason", "place_current",
           "space_text"]


@dataclass(frozen=True)
class Current:
    """Where the configuration's own layout stands on the searched GPU count."""

    label: str               # its name in the search's notation
    num_gpus: int
    valid: bool              # Megatron-Core accepts it on this many GPUs
    problem: str | None      # why it does not (then it has to change)
    in_space: bool           # one of the layouts the search enumerates
    excluded: str | None     # which bound of the search leaves it out (None when it is in the space)
    fits: bool | None
    peak_device_bytes: int | None
    cost: float | None       # relative step time (the search's cost model)
    rank: int | None         # 1 + the layouts of the listing that fit and cost less; None when it does not fit
    rank_exact: bool         # False: at least ``rank`` (counting stopped at the evaluation limit)
    text: str                # the above in one sentence

    def to_dict(self) -> dict:
        return to_plain(self)


class Placed(NamedTuple):
    """The configuration's own layout, read: its shape and variant when Megatron-Core accepts it."""

    label: str
    num_gpus: int
    problem: str | None
    excluded: str | None
    shape: Shape | None
    d: bool | None
    rc: str | None
    b: int | None
    gbs: int | None
    estimate: object
    cost: float | None
    terms: dict | None


# ---------------------------------------------------------------- names


def label_of(sh: Shape, rc: str, b: int, d: bool, moe: bool) -> str:
    """A layout's name, e.g. "TP8 PP2 VPP2 EP8 ETP1 DP4 mbs1 full"."""
    parts = [f"TP{sh.t}", f"PP{sh.p}"]
    if sh.layout is not None:
        parts[-1] += "[layout]"
    elif sh.acc_e or sh.acc_l:
        parts[-1] += f"[{'E' if sh.acc_e else '-'}/{'L' if sh.acc_l else '-'}]"
    elif sh.first is not None or sh.last is not None:
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


def _raw_label(par: dict, tr: dict, n: int, moe: bool) -> str:
    """The name of a layout Megatron-Core refuses (its data-parallel size may not be whole)."""
    t, p, cp = (par.get(k) or 1 for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                          "context_parallel_size"))
    parts = [f"TP{t}", f"PP{p}"]
    if par.get("virtual_pipeline_model_parallel_size"):
        parts.append(f"VPP{par['virtual_pipeline_model_parallel_size']}")
    if cp > 1:
        parts.append(f"CP{cp}")
    if moe:
        parts += [f"EP{par.get('expert_model_parallel_size') or 1}",
                  f"ETP{par.get('expert_tensor_parallel_size') or t}"]
    dp = n / (t * p * cp) if isinstance(t, int) and isinstance(p, int) and isinstance(cp, int) and t * p * cp else 0
    parts.append(f"DP{dp:g}" if dp == int(dp) else f"DP {n:,}/{t * p * cp:,}")      # not whole: the layout is invalid
    parts.append(f"mbs{tr.get('micro_batch_size') or 1}")
    parts.append(tr.get("recompute_granularity") or "no-recompute")
    return " ".join(str(x) for x in parts)


def space_text(eng: SearchEngine) -> str:
    """The bounds of the searched space in words."""
    bits = [f"TP and expert TP up to {eng.max_tp}", "micro-batch " + ", ".join(map(str, eng.mbs)),
            {(True,): "the distributed optimizer", (False,): "no distributed optimizer"}.get(
                eng.dist, "with and without the distributed optimizer")]
    rc = [x if x != "selective" else f"selective ({', '.join(eng.selective_modules)})" for x in eng.recompute]
    if "full" in eng.recompute:
        rc[rc.index("full")] = "full (" + " and ".join(
            {"uniform": "uniform groups", "block": "block"}[m] for m in eng.rc_methods) + (
            f", {', '.join(map(str, eng.rc_layers))} layers" if eng.rc_layers else ", any number of layers") + ")"
    bits.append("recompute " + ", ".join(rc))
    pins = [f"{k} {', '.join(map(str, v))}" for k, v in eng.pins.items()]
    if pins:
        bits.append("pinned " + "; ".join(pins))
    out = "searched: " + "; ".join(bits)
    if eng.dropped:
        out += "; not searched: " + ", ".join("the layer pattern's " + k.replace("hybrid_layer_pattern ", "")
                                              for k in eng.dropped)
    return out


# ---------------------------------------------------------------- the configuration's own layout


def _own_data(eng: SearchEngine, n: int) -> dict:
    """The configuration as given, on ``n`` GPUs, with the search's sequence length, global batch and field
    overrides (the layout fields stay as written)."""
    src = eng.source
    data = {"model": copy.deepcopy(src["model"]), "parallelism": copy.deepcopy(src.get("parallelism") or {}),
            "training": copy.deepcopy(src.get("training") or {}), "precision": copy.deepcopy(src.get("precision") or {})}
    for name, (sec, value) in eng.overrides.items():
        data[sec][name] = value
    data["training"].update(world_size=n, seq_length=eng.s)
    if eng.gbs is not None:
        data["training"]["global_batch_size"] = eng.gbs
    return data


def _excluded(eng: SearchEngine, sh: Shape, d: bool, rc: str, b: int) -> str | None:
    """Which bound of the search leaves this (valid) layout out, or None."""
    pins = eng.pins
    tp_cap = max((eng.max_tp,) + pins.get("tensor_model_parallel_size", ()))
    etp_cap = max((eng.max_tp,) + pins.get("expert_tensor_parallel_size", ()))
    names = (("tensor_model_parallel_size", "TP", sh.t), ("pipeline_model_parallel_size", "PP", sh.p),
             ("virtual_pipeline_model_parallel_size", "VPP", sh.v), ("context_parallel_size", "CP", sh.cp),
             ("expert_model_parallel_size", "EP", sh.ep), ("expert_tensor_parallel_size", "ETP", sh.etp))
    for name, short, value in names:
        if name in pins and value not in pins[name]:
            return f"{short} {value} is not among the pinned values ({', '.join(map(str, pins[name]))})"
    if sh.t > tp_cap:
        return f"TP {sh.t} is above max_tp {eng.max_tp}"
    if eng.moe and sh.etp > etp_cap:
        return f"expert TP {sh.etp} is above max_tp {eng.max_tp}"
    if eng.hybrid and "hybrid_layer_pattern pipeline segments" in eng.dropped:
        return "its hybrid_layer_pattern's '|' pipeline segments are not searched"
    split = Split(sh.first, sh.last, sh.acc_e, sh.acc_l, sh.layout)
    if (split, sh.v) not in eng.pipeline_splits(sh.p):
        return "its pipeline split is not among the pinned ones"
    sps = pins.get("sequence_parallel", (sh.t > 1,))
    if sh.sp not in sps:
        return (f"sequence parallelism is {'on' if sh.sp else 'off'} with TP {sh.t}; the search turns it on exactly "
                "when TP > 1 (pin sequence_parallel to search both)")
    if d not in eng.dist:
        return ("it runs without the distributed optimizer; the search uses it (search with "
                "use_distributed_optimizer true and false to compare)" if not d else
                "it uses the distributed optimizer; the search was told not to")
    if b not in eng.mbs:
        return f"micro-batch size {b} is not among those tried ({', '.join(map(str, eng.mbs))})"
    if rc not in eng.rc_options(sh):
        g, method, n = rc_parts(rc)
        if g == "selective":
            return (f"its selective recompute ({rc.removeprefix('selective[').rstrip(']') or 'core_attn'}) is not the "
                    f"search's ({', '.join(eng.selective_modules)})" if "selective" in eng.recompute else
                    "selective recompute is not among the recompute options tried")
        if g not in eng.recompute:
            return f"{g} recompute is not among the recompute options tried ({', '.join(eng.recompute)})"
        if method not in eng.rc_methods or (eng.rc_layers and n not in eng.rc_layers):
            return f"full recompute {method} {n} is not among the pinned recompute methods and layer counts"
        return (f"full recompute {method} of {n} layers is beyond the {eng.chunk_max(sh)} layers of its largest "
                "virtual chunk (the same as fewer)")
    return None


def place_current(eng: SearchEngine, worlds: tuple) -> Placed | None:
    """The configuration's own layout on the searched GPU count (its own when searched, else the first); None when
    the input is a bare model (no layout of its own)."""
    src = eng.source
    if not src.get("parallelism") and not src.get("training"):
        return None
    own = (src.get("training") or {}).get("world_size")
    n = own if own in worlds else worlds[0]
    data = _own_data(eng, n)
    try:
        cfg = load_config(data)
    except ConfigError as exc:
        problem = "; ".join(str(p) for p in exc.problems[:3])
        return Placed(_raw_label(data["parallelism"], data["training"], n, eng.moe), n, problem, None,
                      *(None,) * 8)
    r = resolve(cfg, sub_sample=False)          # the layout as written
    par, tr = cfg.parallelism, cfg.training
    sh = Shape(n=r.world, t=r.t, p=r.p, first=par.num_layers_in_first_pipeline_stage,
               last=par.num_layers_in_last_pipeline_stage, acc_e=bool(par.account_for_embedding_in_pipeline_split),
               acc_l=bool(par.account_for_loss_in_pipeline_split), layout=par.pipeline_model_parallel_layout, v=r.v,
               cp=r.cp, ep=r.ep, etp=r.etp, sp=r.sp)
    d = tr.use_distributed_optimizer
    if d not in eng.bm:
        eng.bm[d] = byte_model(resolve(replace(eng.base, training=replace(eng.base.training,
                                                                            use_distributed_optimizer=d))))
    rc, rc_cost = eng.recompute_of(tr, sh)
    gbs = tr.global_batch_size or eng.auto_gbs(r.b, r.dp, r.p, r.v)
    est = stage_memory(resolve(cfg) if cfg.parallelism.hybrid_context_parallel else r)
    cost, terms = eng.cost(sh, eng.shape_costs(sh, d, eng.state_floor(sh, d)), rc_cost, r.b, gbs)
    return Placed(label_of(sh, rc, r.b, d, eng.moe), n, None, _excluded(eng, sh, d, rc, r.b), sh, d, rc, r.b,
                  tr.global_batch_size, est, cost, terms)


def current_text(c: Current, usable: int, capacity: int, keep_free: float = 0.0) -> str:
    """One sentence on the configuration's own layout, in the verdict's words (a peak within the capacity but above
    ``usable`` fits only within the error band)."""
    head = f"Your layout ({c.label}) on {n_gpus(c.num_gpus)}"
    if not c.valid:
        return f"{head} is not valid: {c.problem}. It has to change."
    peak = f"peak {c.peak_device_bytes / GIB:.1f} GiB"
    if not c.fits:
        if c.peak_device_bytes <= capacity * (1 - keep_free):
            out = (f"{head} fits only within the error band: {peak} fits {capacity / GIB:.1f} GiB but not the "
                   f"{usable / GIB:.1f} GiB usable (its upper bound would not fit)")
        else:
            out = f"{head} does not fit: {peak} > {usable / GIB:.1f} GiB usable of {capacity / GIB:.1f} GiB"
    else:
        where = f"#{c.rank}" if c.rank_exact else f"#{c.rank} or lower (counting stopped at its limit of estimates)"
        out = f"{head} fits ({peak}, step time x{c.cost:.3f}) and ranks {where} of the layouts that fit"
        if c.rank == 1 and c.rank_exact:
            out += ": it is the best"
    if c.excluded:
        out += f"; the search does not enumerate it: {c.excluded}"
    return out + "."


# ---------------------------------------------------------------- why nothing is listed


def no_valid_reason(eng: SearchEngine, n: int) -> str:
    """Why no layout on ``n`` GPUs passes Megatron-Core's rules, with the numbers."""
    r = eng.r0
    shapes = list(eng.shapes(n))
    if not shapes:
        for name, values in list(eng.pins.items()):
            freed = eng.shape_without_pin(n, name)
            if freed is not None:
                return (f"no valid layout on {n_gpus(n)} with {name} pinned to {', '.join(map(str, values))}: the model "
                        f"or the GPU count refuses it (without the pin, e.g. TP{freed.t} PP{freed.p} CP{freed.cp})")
        return (f"no valid layout on {n_gpus(n)}: TP must divide the attention heads ({r.a}), query groups and FFN "
                f"width and be at most max_tp ({eng.max_tp}); PP at most {eng.pp_cap}; TP x PP x CP must divide "
                f"{n:,}")
    if any(eng.count_variants(sh) for sh in shapes):
        return f"no layout on {n_gpus(n)} passes every rule"
    if not any(eng.rc_options(sh) for sh in shapes):
        return f"no valid layout on {n_gpus(n)}: the pinned recompute settings fit no layout's virtual chunks"
    gbs = eng.gbs
    dps = sorted({sh.dp for sh in shapes})
    mbs = ", ".join(map(str, eng.mbs))
    shown = ", ".join(f"{x:,}" for x in dps[:6]) + (", ..." if len(dps) > 6 else "")
    if any(gbs % (b * dp) == 0 for dp in dps for b in eng.mbs):
        return (f"no valid layout on {n_gpus(n)}: global_batch_size ({gbs}) / (micro-batch x DP) is never a number of "
                "micro-batches the interleaved schedule takes (a multiple of PP) on the layouts that divide it")
    need = -(-n // gbs)
    return (f"no valid layout on {n_gpus(n)}: global_batch_size ({gbs:,}) must be divisible by micro-batch size "
            f"({mbs}) x data-parallel size, and DP = {n:,} / (TP x PP x CP) is {shown} on the layouts the model "
            f"allows (TP <= {eng.max_tp}, PP <= {eng.pp_cap}); a DP dividing {gbs:,} needs TP x PP x CP >= {need:,} "
            f"dividing {n:,}, which none is")


def rule_text(eng) -> str:
    """The usable memory of the one fit rule in words: "71.9 GiB (79.6 GiB less 0 % kept free, leaving room for the
    estimate's 10.7 % error band: a dense model: measured worst -10.7 % on 200 runs of this class)"."""
    return (f"{eng.usable / GIB:.1f} GiB ({eng.capacity / GIB:.1f} GiB less {100 * eng.headroom:g} % kept free, leaving room "
            f"for the estimate's {100 * eng.band.fraction:.1f} % error band: {eng.band.reason})")


def no_fit_reason(eng: SearchEngine, n_valid: int, lightest, floor_min: int | None) -> str:
    """Why none of ``n_valid`` valid layouts fits: the lightest evaluated (``lightest``: (device bytes, label) or
    None) against the usable memory, and the model states' lower bound (``floor_min`` bytes, or None)."""
    usable = eng.usable
    head = f"{n_valid:,} valid layouts, none fits {rule_text(eng)}"
    if floor_min is not None and floor_min > usable:
        return (f"{head}: the model states alone (weights, gradients, optimizer) need at least "
                f"{floor_min / GIB:.1f} GiB per GPU on every layout: more GPUs (to shard them further), a lighter "
                "optimizer or fp8 weights would help")
    if lightest is not None:
        return (f"{head}: the lightest evaluated, {lightest[1]}, peaks at {lightest[0] / GIB:.1f} GiB; try more GPUs, "
                "a shorter sequence or recompute settings outside the search's")
    return head
