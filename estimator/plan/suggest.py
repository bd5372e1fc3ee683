"""Make it fit: the cheapest changes after which a configuration that does not fit a GPU (or is tight) fits.

:func:`estimator.plan.advice.levers` names a few single changes that fit; this module goes further, for the
calculator's "Make it fit" list and ``estimate ... --suggest``. Each lever below is a family of changes
ordered from the weakest (cheapest) to the strongest; for each lever the weakest change after which every
stage fits by the one rule of :func:`estimator.formats.gpus.fit` (its upper bound, with the caller's keep_free: the
estimate at most :func:`estimator.formats.gpus.usable_bytes`) is kept, re-estimated by the core:

- ``sequence_parallel``: sequence parallelism on (TP > 1);
- ``distributed_optimizer``: shard the fp32 master weights and Adam moments over the data-parallel ranks;
- ``grads_bf16``: ``precision.accumulate_allreduce_grads_in_fp32: false`` with bf16 weights (Megatron-LM
  ``--grad-reduce-in-bf16``): 2 instead of 4 bytes of gradient buffer per parameter;
- ``selective``: selective recomputation of the modules that free memory for this model, the cheapest set
  (by :data:`estimator.plan.cost.SELECTIVE_MODULE_COST`) that fits;
- ``full``: full recomputation of the fewest layers per virtual chunk (``recompute_method: block``), then
  of every layer in uniform groups of ``recompute_num_layers`` (the groups' inputs only are kept);
- ``micro_batch``: a smaller micro-batch (the global batch kept, so more micro-batches);
- ``tp``, ``pp``, ``cp``, ``ep``: a larger tensor, pipeline, context or expert parallel size, among the
  values the model allows (:func:`estimator.plan.advice.choices`, with their pipeline-split companions), on the
  same GPUs where the world size allows it, else with the data-parallel size kept (more GPUs);
- ``gpus``: more data-parallel ranks to shard the optimizer over (the layout kept; needs the distributed
  optimizer), the fewest GPUs that fit.
- ``fsdp``: weights, gradients and optimizer states sharded over the data x context-parallel ranks
  (Megatron-FSDP with the distributed optimizer, then PyTorch FSDP2).

- ``optimizer_offload``, ``activation_offload``: where the schema has the fields (optimizer CPU offload with
  the precision-aware optimizer, a growing fraction; layer-wise activation offloading of the fewest layers) and
  the configuration allows them (the validation decides: no pipeline parallelism or recompute for layer-wise
  offloading, ...).
  The cost model leaves out host transfers, so these carry no step time and come after the costed changes.
  Without those fields (an estimator that does not model offloading) nothing is offloaded. Fine-grained
  activation offloading is not offered: the estimator refuses it (what stays on the GPU depends on
  Megatron-Core's run-time policy).

When no single change fits on the same GPUs, pairs are tried: a change that keeps the layout
(recomputation, a smaller micro-batch, sequence parallelism, the distributed optimizer, bf16 gradients)
with any other lever, each as weak as still fits.

When single changes fit but none of them is sequence parallelism, which the verdict names whenever it is off with
TP > 1, sequence parallelism is tried with each other lever as well. :func:`suggest_with_reasons` also says, in
words, why each lever the verdict can name (sequence parallelism, expert parallelism, recomputation, offloading,
FSDP) is not in the list: not applicable (a dense model, TP 1, DP 1, already on) or, at its strongest, not enough.

Every suggestion carries the relative step time of the changed configuration from the layout search's
cost model (:mod:`estimator.plan.cost`, 1.0 = the configuration as it is): ``step_time`` per token of
wall-clock time and ``gpu_time`` per token of GPU time (they differ only when the GPU count changes).
Suggestions are sorted cheapest first: those on the same GPUs by ``gpu_time``, then those that need more
GPUs, each suggestion also saying how much memory it saves at the peak (device bytes). ``set`` holds the
fields to change (dotted paths, as the calculator's form) and ``cli_flags`` the ``estimate`` flags that
apply it, spelled as the CLI spells them (:attr:`estimator.config.schema.FieldSpec.cli_flag`).

Each candidate change is tried, memoised, pruned and bisected by :mod:`estimator.plan.candidates` (its docstring
says what is not estimated, and how ``benchmarks/make_it_fit.py`` checks that a speed change keeps every answer).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..config.derived import recomputed_modules
from ..config.errors import ConfigError, EstimatorError, n_gpus
from ..formats.error_bands import band_for
from ..formats.gpus import KEEP_FREE, check_keep_free, usable_bytes
from ..config.load import config_from_dict
from ..config.schema import field_specs
from ..memory.report import GIB, to_plain
from .advice import (CP, EP, MBS, PP, RC_METHOD, RC_MODULES, RC_NUM, RECOMPUTE, SP, TP, WORLD, get_field, mbs_choices,
                     with_changes)
from .candidates import Candidates, first_fit, lowest_peak
from .cost import SELECTIVE_MODULE_COST

__all__ = ["Suggestion", "cli_flags", "suggest", "suggest_with_reasons"]

DISTOPT = "training.use_distributed_optimizer"
GRADS32 = "precision.accumulate_allreduce_grads_in_fp32"
#: The world sizes the ``gpus`` lever tries, as multiples of the current one (the layout kept).
_GPU_FACTORS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
_SPECS = {s.path: s for s in field_specs()}

#: Offloading fields (used where the schema has them).
OPT_OFF, OPT_FRAC, PAO = ("training.optimizer_cpu_offload", "training.optimizer_offload_fraction",
                          "precision.use_precision_aware_optimizer")
CPU_OFF, CPU_N = "training.cpu_offloading", "training.cpu_offloading_num_layers"
#: Levers whose cost the layout search's cost model does not see (host transfers).
_UNCOSTED = ("optimizer_offload", "activation_offload")
#: Levers that keep the parallel layout: the first half of a pair.
_IN_PLACE = ("sequence_parallel", "distributed_optimizer", "grads_bf16", "selective", "full", "micro_batch",
             *_UNCOSTED)


@dataclass(frozen=True)
class Suggestion:
    """One change after which every stage fits, re-estimated."""

    label: str               # what to change, in words
    levers: tuple            # the lever(s) it uses, e.g. ("full",) or ("full", "pp")
    set: dict                # dotted field path -> new value (companion fields included)
    cli_flags: tuple         # the `estimate` flags that apply it, as argv tokens
    peak_bytes: int          # peak device bytes once applied
    peak_stage: int
    saved_bytes: int         # peak device bytes before - after
    headroom_bytes: int      # the smallest capacity - device bytes over the stages, once applied
    num_gpus: int            # world size once applied
    step_time: float | None  # relative wall-clock time per token (cost model), 1.0 = as it is
    gpu_time: float | None   # relative GPU time per token, 1.0 = as it is

    def cost_text(self, world: int | None = None) -> str:
        """The cost in words: "step time x1.305", with the GPU time and the GPU count when they change."""
        if self.step_time is None:
            text = ("step time not costed (host transfers are not in the cost model)"
                    if set(self.levers) & set(_UNCOSTED) else "step time not costed")
            return text + (f", {n_gpus(self.num_gpus)} instead of {world:,}" if world and self.num_gpus != world else "")
        text = f"step time x{self.step_time:.3f}"
        if self.gpu_time is not None and abs(self.gpu_time - self.step_time) > 5e-4:
            text += f", GPU time x{self.gpu_time:.3f}"
        if world is not None and self.num_gpus != world:
            text += f", {n_gpus(self.num_gpus)} instead of {world:,}"
        return text

    def to_dict(self, world: int | None = None) -> dict:
        """Plain data; with the current ``world`` size, ``cost`` says when the GPU count changes."""
        d = to_plain(self)
        d["peak"] = f"{self.peak_bytes / GIB:.2f} GiB"
        d["saved"] = f"{self.saved_bytes / GIB:.2f} GiB"
        d["cost"] = self.cost_text(world)
        return d


# ---------------------------------------------------------------- the CLI spelling of a change


def cli_flags(changes: dict, current: dict | None = None) -> tuple:
    """The ``estimate`` flags that set ``changes`` (dotted path -> value), as argv tokens; fields whose value
    in ``current`` (the configuration as written, defaults for absent fields) is already the new one are left
    out. Bools are ``--flag`` / ``--no-flag``, null is ``none``, lists are comma-separated."""
    out = []
    for path, v in changes.items():
        spec = _SPECS[path]
        if current is not None and get_field(current, path, spec.default) == v:
            continue
        if spec.type == "bool" and isinstance(v, bool):
            out.append(spec.cli_flag if v else "--no-" + spec.cli_flag[2:])
            continue
        text = "none" if v is None else ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
        out += [spec.cli_flag, text]
    return tuple(out)


# ---------------------------------------------------------------- levers: (label, changes), weakest first


def _modules(r) -> list[str]:
    """The selective-recompute modules that can free memory for this model (Megatron-Core's names)."""
    tr = r.cfg.training
    mods = [] if (r.post_norm and r.E) else ["layernorm"]     # refused for Gemma 4's MoE block (config/rules/families)
    if tr.attention_backend in ("unfused", "local") or tr.transformer_impl == "local":
        mods.append("core_attn")
    if r.mla:
        mods.append("mla_up_proj")
    if r.E:
        mods += ["moe_act", "moe"] + (["shared_experts"] if r.fs else [])
    if not r.E or not all(r.moe_layers):
        mods.append("mlp")
    return mods


def _selective(ctx) -> list:
    tr = ctx.r.cfg.training
    if tr.recompute_granularity == "full":
        return []
    now = set(recomputed_modules(tr))
    base = ctx.peak(ctx.cfg)
    # Modules that free nothing here (a module already recomputed, core_attn with flash attention) are dropped.
    useful = [m for m in _modules(ctx.r) if m not in now
              and ctx.peak(with_changes(ctx.cfg, _sel(now | {m}))) not in (None, base)]
    sets = [set(c) for n in range(1, len(useful) + 1) for c in itertools.combinations(useful, n)]
    sets.sort(key=lambda s: (sum(SELECTIVE_MODULE_COST.get(m, 0.0) for m in s), len(s), sorted(s)))
    return [(f"selective recomputation of {', '.join(_ordered(now | s))}", _sel(now | s)) for s in sets]


def _ordered(mods) -> list[str]:
    order = _SPECS[RC_MODULES].choices
    return sorted(mods, key=order.index)


def _sel(mods) -> dict:
    return {RECOMPUTE: "selective", RC_METHOD: None, RC_NUM: None, RC_MODULES: _ordered(mods)}


def _full(ctx) -> list:
    tr = ctx.r.cfg.training
    chunk = max(len(rng) for st in ctx.r.stages for rng in st)
    out = []
    full = lambda method, n: {RECOMPUTE: "full", RC_METHOD: method, RC_NUM: n, RC_MODULES: None}
    block_now = tr.recompute_num_layers if tr.recompute_num_layers is not None else 1
    if tr.recompute_granularity != "full" or tr.recompute_method == "block":
        start = block_now + 1 if tr.recompute_granularity == "full" else 1
        where = "virtual pipeline stage" if ctx.r.v > 1 else "pipeline stage"
        out += [(f"full recomputation of {n} layer{'s' if n > 1 else ''} per {where} (recompute_method block)",
                 full("block", n)) for n in range(start, chunk)]
        start = 1
    else:
        start = block_now + 1
    out += [("full recomputation of every layer" + (f", in groups of {n} layers (recompute_method uniform)"
                                                    if n > 1 else " (recompute_method uniform)"), full("uniform", n))
            for n in range(start, chunk + 1)]
    return out


def _micro_batch(ctx) -> list:
    b = ctx.r.b
    return [(f"micro-batch size {x['value']}", {MBS: x["value"]})
            for x in sorted(mbs_choices(ctx.cfg), key=lambda x: -x["value"]) if x["value"] < b]


def _dims(ctx, path: str, name: str) -> list:
    opts = ctx.choices.get(path) or []
    now = get_field(ctx.cfg, path, 1)
    out = []
    for o in opts:
        if o["value"] is None or o["value"] <= now:
            continue
        change = {path: o["value"], **o.get("set", {})}
        if path == TP and now == 1 and not ctx.r.sp:
            change[SP] = True           # the usual companion of TP: it shards the norms' activations too
        label = f"{name} {o['label']}" + (" with sequence parallelism" if SP in change and path == TP else "")
        out.append((label, change))
    return out


def _gpus(ctx) -> list:
    if not ctx.r.cfg.training.use_distributed_optimizer:
        return []
    r = ctx.r
    dense = r.t * r.p * r.cp
    return [(f"{k * r.world:,} GPUs (data-parallel {k * r.world // dense}: the optimizer states sharded further)",
             {WORLD: k * r.world}) for k in _GPU_FACTORS]


def _offload(ctx) -> dict:
    """The offloading levers the schema has (see the module docstring); the validation rules out the others."""
    tr, out = ctx.r.cfg.training, {}
    if OPT_OFF in _SPECS and not getattr(tr, "optimizer_cpu_offload", True):
        out["optimizer_offload"] = [
            (f"optimizer step on the CPU for {f:.0%} of the parameters (optimizer_cpu_offload, with the "
             "precision-aware optimizer)", {OPT_OFF: True, OPT_FRAC: f, PAO: True}) for f in (0.25, 0.5, 0.75, 1.0)]
    if CPU_OFF in _SPECS and not getattr(tr, "cpu_offloading", True) and ctx.r.p == 1:
        out["activation_offload"] = [
            (f"activations of the first {n} layer{'s' if n > 1 else ''} offloaded to the host (cpu_offloading)",
             {CPU_OFF: True, CPU_N: n}) for n in range(1, ctx.r.L)]
    return out


FSDP1, FSDP2 = "parallelism.use_megatron_fsdp", "parallelism.use_torch_fsdp2"


def _fsdp(ctx) -> list:
    """Weights, gradients and optimizer states sharded over the data x context-parallel ranks: Megatron-FSDP (with
    the distributed optimizer, which Megatron-LM turns on for it), then PyTorch FSDP2. Nothing to shard over one
    rank."""
    par = ctx.r.cfg.parallelism
    if par.use_megatron_fsdp or par.use_torch_fsdp2 or ctx.r.dp * ctx.r.cp <= 1:
        return []
    return [("Megatron-FSDP (use_megatron_fsdp, optim_grads_params: weights, gradients and optimizer states "
             "sharded)", {FSDP1: True, DISTOPT: True}),
            ("PyTorch FSDP2 (use_torch_fsdp2)", {FSDP2: True})]


def notes() -> list[str]:
    """What the list leaves out, in words."""
    if CPU_OFF in _SPECS or OPT_OFF in _SPECS:
        return ["Offloading moves memory to the host: its transfers are not in the cost model, so those changes "
                "carry no step time and come after the others."]
    return ["CPU offloading is not modelled, so it is not suggested."]


def _levers(ctx) -> dict:
    r, pr, tr = ctx.r, ctx.r.cfg.precision, ctx.r.cfg.training
    out = {}
    if r.t > 1 and not r.sp:
        out["sequence_parallel"] = [("sequence parallelism on", {SP: True})]
    if not tr.use_distributed_optimizer:
        out["distributed_optimizer"] = [("the distributed optimizer", {DISTOPT: True})]
    if pr.params_dtype == "bf16" and ctx.est.parallel["bytes_per_parameter"]["gradients"] == 4:
        out["grads_bf16"] = [("bf16 gradient buffer (accumulate_allreduce_grads_in_fp32: false, Megatron-LM "
                              "--grad-reduce-in-bf16)", {GRADS32: False})]
    out["selective"] = _selective(ctx)
    out["full"] = _full(ctx)
    out["micro_batch"] = _micro_batch(ctx)
    out["tp"] = _dims(ctx, TP, "TP")
    out["pp"] = _dims(ctx, PP, "PP")
    out["cp"] = _dims(ctx, CP, "CP")
    if r.E:
        out["ep"] = _dims(ctx, EP, "EP")
    out["gpus"] = _gpus(ctx)
    out["fsdp"] = _fsdp(ctx)
    out.update(_offload(ctx))
    return {k: v for k, v in out.items() if v}


# ---------------------------------------------------------------- suggest


def suggest(config: dict, capacity: int, *, keep_free: float = KEEP_FREE, limit: int = 8,
            num_microbatches: int | None = None, headroom: float | None = None) -> list[Suggestion]:
    """The suggestions of :func:`suggest_with_reasons`, without its reasons."""
    return suggest_with_reasons(config, capacity, keep_free=keep_free, limit=limit,
                                num_microbatches=num_microbatches, headroom=headroom)[0]


def suggest_with_reasons(config: dict, capacity: int, *, keep_free: float = KEEP_FREE, limit: int = 8,
                         num_microbatches: int | None = None,
                         headroom: float | None = None) -> tuple[list[Suggestion], list[str]]:
    """The cheapest changes after which every stage of ``config`` (a configuration as written, plain data)
    *fits* ``capacity`` bytes by the one rule of :func:`estimator.formats.gpus.fit`: its upper bound (the estimate
    plus its measured error band) with ``keep_free`` (a fraction of the capacity; ``headroom`` is its old name)
    to spare. Cheapest first; empty when it fits already or is invalid. At most ``limit`` suggestions."""
    keep_free = check_keep_free(headroom if headroom is not None else keep_free,
                                "headroom" if headroom is not None else "keep_free")
    try:
        ctx = Candidates(config, capacity, keep_free, num_microbatches)
    except (EstimatorError, ValueError, ArithmeticError):
        return [], []
    if ctx.fits(config):
        return [], []
    levers = _levers(ctx)
    found = []                                   # (levers, label, change, config)
    for name, options in levers.items():
        hit = first_fit(ctx, name, {}, options)
        if hit:
            found.append(((name,), *hit))
    if not any(get_field(cfg, WORLD) == ctx.r.world for *_, cfg in found):
        found += _pairs(ctx, levers)
    elif "sequence_parallel" in levers and not any("sequence_parallel" in n for n, *_ in found):
        # The verdict names sequence parallelism (off with TP > 1): when it does not fit alone, with the weakest
        # other change that then fits (nearly free in step time, it often makes a cheaper change enough).
        found += _pairs(ctx, levers, first="sequence_parallel")
    base_cost = ctx.cost(config)
    out = []
    seen = set()
    for names, label, change, cfg in found:
        key = repr(sorted(change.items()))
        if key in seen:
            continue
        seen.add(key)
        pk = ctx.estimate(cfg)
        cost = ctx.cost(cfg) if not set(names) & set(_UNCOSTED) else None
        step = gpu = None
        if base_cost and cost and not set(names) & set(_UNCOSTED):
            gpu = cost[0] / base_cost[0]
            step = gpu * base_cost[1] / cost[1]
        world = get_field(cfg, WORLD)
        change = _effective(cfg, change, ctx.r.world)
        out.append(Suggestion(
            label=label, levers=names, set=change, cli_flags=cli_flags(change, config),
            peak_bytes=pk.device_bytes, peak_stage=pk.stage, saved_bytes=ctx.est.peak.device_bytes - pk.device_bytes,
            headroom_bytes=capacity - pk.device_bytes, num_gpus=world,       # the peak stage: the least headroom
            step_time=step, gpu_time=gpu))
    world = ctx.r.world
    out.sort(key=lambda s: (s.num_gpus > world, s.gpu_time if s.gpu_time is not None else math.inf,
                            -s.saved_bytes, s.label))
    out = out[:limit]
    return out, _not_proposed(ctx, levers, {n for s in out for n in s.levers})


def _refusal(ctx, change: dict) -> str | None:
    """Why ``change`` makes the configuration invalid (the first rule it breaks), or None when it is valid."""
    try:
        config_from_dict(with_changes(ctx.cfg, change))
        return None
    except ConfigError as exc:
        return exc.problems[0].message if exc.problems else str(exc)
    except (EstimatorError, ValueError, TypeError) as exc:
        return str(exc)


def _short(ctx, options: list, what: str, lever: str = "") -> str:
    """"<what> alone saves X GiB at most (peak Y GiB): not enough", from the strongest valid option of ``lever``, or
    why none is valid."""
    best = lowest_peak(ctx, lever, options)
    if best is None:
        why = _refusal(ctx, options[-1][1]) if options else None
        return f"{what}: not valid here" + (f" ({why})" if why else "") + "."
    return (f"{what} saves at most {(ctx.est.peak.device_bytes - best) / GIB:.2f} GiB (peak {best / GIB:.2f} GiB "
            f"against {ctx.usable / GIB:.2f} GiB usable): not enough alone, nor with one other change listed.")


def _not_proposed(ctx, levers: dict, used: set) -> list[str]:
    """Why each lever the verdict can name (sequence parallelism, expert parallelism, recomputation, offloading,
    FSDP) is not in the list, in words (GiB = 2^30 bytes)."""
    r, tr, par = ctx.r, ctx.r.cfg.training, ctx.r.cfg.parallelism
    out = []
    if "sequence_parallel" not in used:
        if r.t == 1:
            out.append("Sequence parallelism: needs TP > 1 (Megatron-LM turns it off at TP 1).")
        elif r.sp:
            out.append("Sequence parallelism: already on.")
        else:
            out.append(_short(ctx, levers.get("sequence_parallel", []), "Sequence parallelism on"))
    if "ep" not in used:
        if not r.E:
            out.append("Expert parallelism: a dense model has no experts to shard.")
        elif not levers.get("ep"):
            out.append(f"Expert parallelism: EP {r.ep} is already the largest the model's {r.E} experts allow here.")
        else:
            out.append(_short(ctx, levers["ep"], "A larger EP"))
    if not used & {"selective", "full"}:
        if tr.recompute_granularity == "full" and not levers.get("full"):
            out.append("Recomputation: every layer is already recomputed in full.")
        elif levers.get("full") or levers.get("selective"):
            lever = "full" if levers.get("full") else "selective"
            out.append(_short(ctx, levers[lever], "Recomputation", lever))
    if not used & set(_UNCOSTED):
        if CPU_OFF not in _SPECS and OPT_OFF not in _SPECS:
            out.append("Offloading: not modelled by this estimator.")
        elif not (levers.get("activation_offload") or levers.get("optimizer_offload")):
            why = []
            if getattr(tr, "cpu_offloading", False):
                why.append("activations are already offloaded")
            elif r.p > 1:
                why.append("layer-wise activation offloading does not run with pipeline parallelism")
            if getattr(tr, "optimizer_cpu_offload", False):
                why.append("the optimizer step already runs on the CPU")
            out.append("Offloading: " + ("; ".join(why) or "not available with this configuration") + ".")
        else:
            lever = "activation_offload" if levers.get("activation_offload") else "optimizer_offload"
            out.append(_short(ctx, levers[lever], "Offloading", lever))
    if "fsdp" not in used:
        if par.use_megatron_fsdp or par.use_torch_fsdp2:
            out.append("FSDP: already on.")
        elif r.dp * r.cp <= 1:
            out.append(f"FSDP: nothing to shard over with data-parallel x context-parallel size {r.dp * r.cp}.")
        else:
            out.append(_short(ctx, levers.get("fsdp", []), "FSDP"))
    return out


def _effective(cfg: dict, change: dict, world: int) -> dict:
    """The change as applied: with the world size a layout change brought along (more GPUs)."""
    if WORLD in change or get_field(cfg, WORLD) == world:
        return dict(change)
    return {**change, WORLD: get_field(cfg, WORLD)}


def _strongest(ctx, lever: str, options: list) -> dict:
    """The option of a lever that saves the most memory, or near it: the last one (the options grow in
    strength), but for full recomputation the uniform group (of 1, 2 or 4 layers) with the lowest peak."""
    if lever != "full":
        return options[-1][1]
    uniform = [ch for _, ch in options if ch["training.recompute_method"] == "uniform"
               and ch["training.recompute_num_layers"] in (1, 2, 4)] or [options[-1][1]]
    return min(uniform, key=lambda ch: ctx.peak(ctx.valid(ch) or ctx.cfg) or math.inf)


def _pairs(ctx, levers: dict, first: str | None = None) -> list:
    """Two changes together, when no single one fits: a change that keeps the layout (the first lever) with
    any other lever, each as weak as still fits. ``first``: only pairs that include that lever (any order)."""
    out = []
    for a, b in itertools.permutations(levers, 2):
        if first is not None and first not in (a, b):
            continue
        if a not in _IN_PLACE or (a in ("selective", "full") and b in ("selective", "full")):
            continue
        if b in _IN_PLACE and _IN_PLACE.index(b) < _IN_PLACE.index(a):
            continue                             # each unordered pair of in-place levers once
        strongest = _strongest(ctx, a, levers[a])
        both = ctx.valid({**strongest, **_strongest(ctx, b, levers[b])})
        if both is None or not ctx.fits(both):
            continue                             # not even both at their strongest: no pair of these fits
        hit_b = first_fit(ctx, b, strongest, levers[b])
        if not hit_b:
            continue
        alone = ctx.valid(hit_b[1])
        if alone is not None and ctx.fits(alone):
            continue                             # b alone fits: listed as a single change already
        hit_a = first_fit(ctx, a, hit_b[1], levers[a])
        if not hit_a:
            continue
        change = {**hit_a[1], **hit_b[1]}
        cfg = ctx.valid(change)
        if cfg is None or not ctx.fits(cfg):
            continue
        out.append(((a, b), f"{hit_a[0]} and {hit_b[0]}", change, cfg))
    return out


def target_text(config: dict, capacity: int, keep_free: float = KEEP_FREE) -> str:
    """What "Make it fit" aims at, in words: the largest estimate whose upper bound fits (GiB = 2^30 bytes)."""
    band = band_for(config)
    return (f"each estimate at most {usable_bytes(capacity, keep_free, band.fraction) / GIB:.2f} GiB, so that its "
            f"upper bound (+{100 * band.fraction:.1f} %: {band.reason}) fits")


def render(suggestions: list, gpu_label: str, capacity: int, config: dict | None = None,
           keep_free: float = KEEP_FREE, not_proposed: list[str] | None = None) -> str:
    """The suggestions as text for the CLI (``estimate ... --suggest``), GiB = 2^30 bytes; ``not_proposed`` (the
    reasons of :func:`suggest_with_reasons`) listed under them, as the calculator lists them."""
    import shlex
    head = (f"Make it fit on {gpu_label} ({capacity / GIB:.2f} GiB; {target_text(config or {}, capacity, keep_free)}): "
            "the cheapest changes first, each re-estimated; step time per token from the layout search's cost model, "
            "x1.000 = as it is")
    why = ["Not proposed:", *(f"  - {w}" for w in not_proposed)] if not_proposed else []
    if not suggestions:
        return "\n".join([head + "\n  no single change, nor two together, makes every stage fit; `python -m estimator "
                          "search ... --min-gpus` finds the fewest GPUs on which some layout fits", *why])
    lines = [head, "  " + " ".join(notes())]
    for i, s in enumerate(suggestions, 1):
        lines.append(f"  {i}. {s.label}")
        lines.append(f"     peak {s.peak_bytes / GIB:.2f} GiB on stage {s.peak_stage} (saves "
                     f"{s.saved_bytes / GIB:.2f} GiB), {s.cost_text()}, {n_gpus(s.num_gpus)}")
        lines.append(f"     {shlex.join(s.cli_flags)}")
    return "\n".join(lines + why)
