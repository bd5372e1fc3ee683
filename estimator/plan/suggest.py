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

Speed (the calculator's "Make it fit" is one request; ``benchmarks/make_it_fit.py`` times it in CPython and checks
that a change leaves every answer as it was, ``benchmarks/calculator.py`` in the page): each candidate is the
configuration with a few fields changed, read with only those fields checked (:func:`estimator.config.with_fields`),
estimated without a second validation and for the stages that can hold the peak only
(:func:`estimator.memory.assemble.peak_memory`), memoised. Not estimated: a larger TP, PP, CP or EP that breaks the
world-size rule on the same GPUs; full-recompute blocks weaker than one that does not fit with its peak in the
forward/backward passes (the layout search's rule, :func:`estimator.plan.space.no_fit_implied`); the options of a
bisected lever that the bisection does not probe; for "saves at most", the options that cannot hold the lowest
peak. Qwen3 8B on a 16 GiB GPU: 218 estimates of 241 configurations read, from 405 of 648.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from types import SimpleNamespace

from ..config.derived import recomputed_modules
from ..config.errors import ConfigError, EstimatorError, n_gpus
from ..formats.error_bands import band_for
from ..formats.gpus import KEEP_FREE, check_keep_free, usable_bytes
from ..config.load import config_from_dict, with_fields
from ..config.schema import field_specs
from ..memory.report import GIB, to_plain
from ..model.resolve import resolve
from .advice import (CP, EP, ETP, FIRST, LAST, MBS, PP, RECOMPUTE, SP, TP, WORLD, get_field, mbs_choices, with_changes,
                     choices)
from .cost import SELECTIVE_MODULE_COST

__all__ = ["Suggestion", "cli_flags", "suggest", "suggest_with_reasons"]

DISTOPT = "training.use_distributed_optimizer"
GRADS32 = "precision.accumulate_allreduce_grads_in_fp32"
METHOD, NUM, MODULES = "training.recompute_method", "training.recompute_num_layers", "training.recompute_modules"
#: The world sizes the ``gpus`` lever tries, as multiples of the current one (the layout kept).
_GPU_FACTORS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
_SPECS = {s.path: s for s in field_specs()}
_ABSENT = object()

#: Offloading fields (used where the schema has them).
OPT_OFF, OPT_FRAC, PAO = ("training.optimizer_cpu_offload", "training.optimizer_offload_fraction",
                          "precision.use_precision_aware_optimizer")
CPU_OFF, CPU_N = "training.cpu_offloading", "training.cpu_offloading_num_layers"
#: Levers whose cost the layout search's cost model does not see (host transfers).
_UNCOSTED = ("optimizer_offload", "activation_offload")
#: Levers that keep the parallel layout: the first half of a pair.
_IN_PLACE = ("sequence_parallel", "distributed_optimizer", "grads_bf16", "selective", "full", "micro_batch",
             *_UNCOSTED)
#: Levers whose memory falls as their options grow: bisected.
_MONOTONE = ("gpus", "activation_offload")


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
    order = _SPECS[MODULES].choices
    return sorted(mods, key=order.index)


def _sel(mods) -> dict:
    return {RECOMPUTE: "selective", METHOD: None, NUM: None, MODULES: _ordered(mods)}


def _full(ctx) -> list:
    tr = ctx.r.cfg.training
    chunk = max(len(rng) for st in ctx.r.stages for rng in st)
    out = []
    full = lambda method, n: {RECOMPUTE: "full", METHOD: method, NUM: n, MODULES: None}
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


# ---------------------------------------------------------------- trying changes


class _Context:
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

    @property
    def choices(self) -> dict:
        """:func:`estimator.plan.advice.choices` of the configuration (asked once for TP, PP, CP and EP)."""
        if self._choices is None:
            self._choices = choices(self.cfg)
        return self._choices

    def outcome(self, cfg: dict) -> tuple | None:
        """(peak, whether the peak stage peaks in the forward/backward passes, whether it fits) of ``cfg``, None
        when it is invalid; memoised. The peak is the :class:`~estimator.memory.report.Peak` of
        :func:`estimator.estimate` (the stage with the most device bytes); it fits by the one rule
        (:func:`estimator.formats.gpus.usable_bytes`, with ``cfg``'s error band)."""
        seen = self._seen.get(id(cfg))
        if seen is not None and seen[0] is cfg:
            return seen[1]
        key = repr(sorted((s, sorted(v.items())) for s, v in cfg.items() if isinstance(v, dict)))
        hit = self._memo.get(key, _ABSENT)
        if hit is _ABSENT:
            try:
                peak, fwd = _peak(self._config(cfg), self.m)
                hit = (peak, fwd, peak.device_bytes <= usable_bytes(self.capacity, self.headroom,
                                                                    band_for(cfg).fraction))
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


def _fit(ctx, lever: str, base: dict, options: list):
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
    while k < len(options) and options[k][1].get(METHOD) == "block":
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


# ---------------------------------------------------------------- step-time cost


def _cost(cfg: dict, capacity: int, peak=None) -> tuple[float, int] | None:
    """(relative step time of the search's cost model, world size) of a complete configuration; ``peak``: the Peak of
    its estimate when known (the layout's description reads only that: the estimate is not made again)."""
    from ..memory.assemble import estimate
    from .search import describe_layout, fixed_layout
    try:
        eng, data, c = fixed_layout(cfg, capacity, 0.0, 8)
        est = SimpleNamespace(peak=peak) if peak is not None else estimate(data)
        return describe_layout(eng, data, est).cost, c.training.world_size
    except (EstimatorError, ValueError, ArithmeticError, KeyError):
        return None


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
        ctx = _Context(config, capacity, keep_free, num_microbatches)
    except (EstimatorError, ValueError, ArithmeticError):
        return [], []
    if ctx.fits(config):
        return [], []
    levers = _levers(ctx)
    found = []                                   # (levers, label, change, config)
    for name, options in levers.items():
        hit = _fit(ctx, name, {}, options)
        if hit:
            found.append(((name,), *hit))
    if not any(get_field(cfg, WORLD) == ctx.r.world for *_, cfg in found):
        found += _pairs(ctx, levers)
    elif "sequence_parallel" in levers and not any("sequence_parallel" in n for n, *_ in found):
        # The verdict names sequence parallelism (off with TP > 1): when it does not fit alone, with the weakest
        # other change that then fits (nearly free in step time, it often makes a cheaper change enough).
        found += _pairs(ctx, levers, first="sequence_parallel")
    known = ctx.m is None        # the peaks memoised are those of estimate(cfg): no num_microbatches override
    base_cost = _cost(config, capacity, ctx.est.peak if known else None)
    out = []
    seen = set()
    for names, label, change, cfg in found:
        key = repr(sorted(change.items()))
        if key in seen:
            continue
        seen.add(key)
        pk = ctx.estimate(cfg)
        cost = _cost(cfg, capacity, pk if known else None) if not set(names) & set(_UNCOSTED) else None
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
    best = _lowest_peak(ctx, lever, options)
    if best is None:
        why = _refusal(ctx, options[-1][1]) if options else None
        return f"{what}: not valid here" + (f" ({why})" if why else "") + "."
    return (f"{what} saves at most {(ctx.est.peak.device_bytes - best) / GIB:.2f} GiB (peak {best / GIB:.2f} GiB "
            f"against {ctx.usable / GIB:.2f} GiB usable): not enough alone, nor with one other change listed.")


def _lowest_peak(ctx, lever: str, options: list) -> int | None:
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
        k = sum(1 for _, ch in options if ch.get(METHOD) == "block")    # the blocks open the list (_full)
        if lever == "full" and k >= 2:
            strongest = ctx.valid(options[k - 1][1])
            hit = ctx.outcome(strongest) if strongest is not None else None
            if hit is not None and hit[1]:
                return min(peaks(options[k - 1:]))
    return min(peaks(options), default=None)


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
        hit_b = _fit(ctx, b, strongest, levers[b])
        if not hit_b:
            continue
        alone = ctx.valid(hit_b[1])
        if alone is not None and ctx.fits(alone):
            continue                             # b alone fits: listed as a single change already
        hit_a = _fit(ctx, a, hit_b[1], levers[a])
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
