"""Search space of the layout search: every parallel layout Megatron-Core accepts, memory lower bounds, pruning.

:func:`estimator.plan.search.search` walks the layouts enumerated here. They are those Megatron-Core accepts
(the rules of :func:`estimator.config.rules.validate`, which every evaluated layout passes):

- tensor parallel size t (a divisor of the world size up to ``max_tp``, one node by default, dividing heads,
  query groups and FFN widths), sequence parallelism whenever t > 1;
- pipeline size p with every way Megatron-Core places the layers (:mod:`estimator.config.pipeline_layout`): the
  even split, the uneven first/last-stage splits whose middle stages hold ceil(L / p) layers (the first and/or
  last stage between 1 and that many), the embedding and/or the loss counted as a layer slot
  (``account_for_*_in_pipeline_split``), the configuration's own first/last counts and its own
  ``pipeline_model_parallel_layout`` string (on every p dividing its chunks, v = chunks / p), and any split the
  caller pins; two splits that place every layer alike are one layout (the configuration's own spelling kept);
- virtual pipeline size v (dividing every stage's layers, or its layer slots), with the configuration's
  ``microbatch_group_size_per_vp_stage`` kept on the layouts that can take it (v > 1, p <= the group);
- context parallel size cp (sequence divisible by 2 cp), expert parallel size ep (dividing the experts) and
  expert tensor parallel size etp;
- the distributed optimizer, the micro-batch size, and recomputation: none, selective (the cheap modules that
  free memory: layernorm, plus moe_act (MoE), plus mla_up_proj (MLA), plus core_attn with unfused attention),
  and full in every form Megatron-Core has: ``uniform`` groups of n = 1 .. C layers (C the most layers of a
  virtual chunk) keeping each group's input, and ``block``, the first n = 1 .. C - 1 layers of every chunk.

Every layout becomes a complete configuration that :func:`estimator.estimate` reproduces exactly (its numbers
come from the same ``validate`` and ``resolve`` calls and from ``peak_memory``, ``stage_memory``'s peak). The
inputs are read and checked by :mod:`estimator.plan.options`.

Pruning (``tests/plan/test_search.py`` checks the pruned search against a brute force), on the peak
``device_bytes`` only, never on one column of it:

- the model states of a stage do not depend on cp, the recompute option or the micro-batch size, and every phase
  of a step holds them, so a lower bound of them (decoder layers only, :meth:`SearchEngine.state_floor`) rules
  out whole families before any estimate;
- within one shape (same GPUs, sizes and split, so the same process groups and NCCL communicators), a layout
  that does not fit rules out (:func:`no_fit_implied`) the same recompute option with a larger micro-batch or
  without the distributed optimizer, and, when it failed in the forward and backward passes, the options that
  keep more there: none keeps the most, and ``block`` n keeps more than ``block`` m > n and uniform groups of 1.
  A failure at the optimizer step implies nothing across recompute options: the activations column is 0 there,
  and a full-recompute MoE layer keeps its recomputed input alive through the step, which no recompute does
  not (:func:`estimator.memory.optimizer_step.recompute_retained`).

Nothing is pruned across world sizes: one more data-parallel rank can add an NCCL communicator (DP 1 -> 2 creates
the data-parallel group, 128 MiB), so more GPUs may need more memory per GPU (:func:`estimator.plan.search.min_gpus`
copes with it).
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import re
from dataclasses import fields, replace
from typing import NamedTuple

from ..formats.error_bands import band_for
from ..formats.gpus import usable_bytes
from ..config.errors import ConfigError, Problem, show
from ..config.load import load_config
from ..config.rules.attention import dsa_split_problems
from ..config.pipeline_layout import expand_layout, layout_problems, placement, stage_counts
from ..config.rules import interleaving_problem, validate
from ..config.schema import (MAX_BATCH, MAX_LAYERS, MAX_MICRO_BATCH, MAX_STAGES, MAX_TOKENS, Config,
                             ParallelismConfig, TrainingConfig)
from ..memory.assemble import peak_memory
from ..memory.states import byte_model, state_bytes
from ..model.layers import kind_params
from ..model.resolve import resolve
from .cost import FULL_RECOMPUTE, CostModel, Shape
from .options import (MAX_CHOICES, MAX_GPU_BYTES, OPTION_ALIASES, OWN_ARGS, PAR_KEPT, RECOMPUTE_GRANULARITIES,
                      RECOMPUTE_METHODS, SEARCHED, SPLIT_FIELDS, fixed_fields, gpu_capacity, option_error,
                      pinned_layers, positive_ints, source_dict, world_sizes)

__all__ = ["MAX_CHOICES", "MAX_GPU_BYTES", "OPTION_ALIASES", "RECOMPUTE_GRANULARITIES", "SearchEngine", "Split",
           "gpu_capacity", "no_fit_implied", "option_error", "positive_ints", "rc_fields", "rc_parts", "source_dict",
           "world_sizes"]

#: (kept for the tests and callers of the layout before this module's split; see estimator.plan.options)
_PAR_KEPT = PAR_KEPT
_GROUP = "microbatch_group_size_per_vp_stage"


class Split(NamedTuple):
    """How the layers are placed on the pipeline stages, besides p and v: Megatron-Core's four ways."""

    first: int | None = None      # num_layers_in_first_pipeline_stage
    last: int | None = None       # num_layers_in_last_pipeline_stage
    acc_e: bool = False           # account_for_embedding_in_pipeline_split
    acc_l: bool = False           # account_for_loss_in_pipeline_split
    layout: str | None = None     # pipeline_model_parallel_layout


class _Par(NamedTuple):
    """The fields :func:`estimator.config.pipeline_layout.layout_problems` reads."""

    pipeline_model_parallel_size: int
    virtual_pipeline_model_parallel_size: int | None
    num_layers_in_first_pipeline_stage: int | None
    num_layers_in_last_pipeline_stage: int | None
    account_for_embedding_in_pipeline_split: bool
    account_for_loss_in_pipeline_split: bool
    pipeline_model_parallel_layout: str | None


# --------------------------------------------------------------------------------------------------
# Recompute options: "none", "selective", "full" (uniform groups of 1), "full-uniform<n>", "full-block<n>"


_FULL = re.compile(r"full-(uniform|block)([0-9]+)")


@functools.lru_cache(maxsize=4096)
def rc_parts(rc: str) -> tuple[str, str | None, int | None]:
    """(granularity, method, layers) of a recompute option's name (memoised: the walk asks about 5,000 times per
    search, for a few dozen names)."""
    if rc == "full":
        return "full", "uniform", 1
    m = _FULL.fullmatch(rc)
    if m:
        return "full", m.group(1), int(m.group(2))
    return ("none" if rc == "none" else "selective"), None, None


def rc_name(method: str, n: int) -> str:
    return "full" if method == "uniform" and n == 1 else f"full-{method}{n}"


def rc_fields(rc: str, selective_modules) -> dict:
    """The training fields of a recompute option."""
    g, method, n = rc_parts(rc)
    if g == "full":
        return {"recompute_granularity": "full", "recompute_method": method, "recompute_num_layers": n,
                "recompute_modules": None}
    if g == "selective":
        return {"recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None,
                "recompute_modules": tuple(selective_modules)}
    return {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
            "recompute_modules": None}


# --------------------------------------------------------------------------------------------------
# Enumeration


@functools.lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def _uneven(L: int, p: int) -> list[tuple]:
    """The uneven (first, last) splits whose middle stages hold ceil(L / p) layers and whose first/last stages hold
    between 1 and that many."""
    if p == 1 or L % p == 0 or L < p:
        return []
    e = -(-L // p)
    f = L - (p - 1) * e
    out = [(f, None), (None, f)] if 1 <= f <= e else []
    if p >= 3:
        rest = L - (p - 2) * e
        out += [(f, rest - f) for f in range(max(1, rest - e), min(e, rest - 1) + 1)]
    return out


class SearchEngine(CostModel):
    """The enumeration, the pruning and (from :class:`estimator.plan.cost.CostModel`) the cost model
    for one model on one GPU type."""

    def __init__(self, data: dict, *, seq_length, global_batch_size, micro_batch_sizes, capacity, headroom,
                 max_tp, gpus_per_node, recompute, distributed_optimizer, fixed, world0):
        pins, overrides = fixed_fields(fixed)
        self.pins = pins
        self.overrides = overrides
        self.source = data
        model_d = data["model"]
        par_d = dict(data.get("parallelism") or {})
        tr_d = {k: v for k, v in (data.get("training") or {}).items() if k not in SEARCHED and k not in OWN_ARGS}
        pr_d = dict(data.get("precision") or {})
        for name, (sec, value) in overrides.items():
            {"parallelism": par_d, "training": tr_d, "precision": pr_d}[sec][name] = value
        self.par_keep = {k: par_d[k] for k in PAR_KEPT if k in par_d}
        self.group = par_d.get(_GROUP)
        if self.group is not None and (isinstance(self.group, bool) or not isinstance(self.group, int)
                                       or not 1 <= self.group <= MAX_MICRO_BATCH):
            raise ConfigError(Problem("parallelism." + _GROUP, show(self.group), "must be a positive integer or null"))
        self.dropped = {}
        self.own_split = self._own_split(par_d)
        pattern = model_d.get("hybrid_layer_pattern")
        self.hybrid = isinstance(pattern, str)
        if self.hybrid and "|" in pattern.split("/")[0]:
            # A hybrid pattern's '|' segments fix the pipeline split: the search chooses the split, so it drops them
            # (the layers stay as written).
            main, *mtp = pattern.split("/")
            model_d = dict(model_d, hybrid_layer_pattern="/".join([main.replace("|", ""), *mtp]))
            self.dropped["hybrid_layer_pattern pipeline segments"] = pattern
        s = seq_length or (data.get("training") or {}).get("seq_length") or model_d.get("max_position_embeddings")
        if s is None:
            raise option_error("seq_length", None, "is required (the model sets no max_position_embeddings)")
        if isinstance(s, bool) or not isinstance(s, int):
            raise option_error("seq_length", show(s), f"must be a positive integer, got {show(s)}")
        positive_ints("seq_length", s, top=MAX_TOKENS)
        self.s = s
        gbs = global_batch_size if global_batch_size is not None else (data.get("training") or {}).get(
            "global_batch_size")
        if gbs is not None:
            if isinstance(gbs, bool) or not isinstance(gbs, int):
                raise option_error("global_batch_size", show(gbs), f"must be a positive integer, got {show(gbs)}")
            positive_ints("global_batch_size", gbs, top=MAX_BATCH)
        self.gbs = gbs
        self.tr_keep = tr_d
        self.data = {"model": copy.deepcopy(model_d), "parallelism": dict(self.par_keep),
                     "training": {**tr_d, "world_size": world0, "seq_length": s}, "precision": pr_d}
        self.base = load_config(self.data)            # raises ConfigError naming any bad field
        self.par_fixed = {k: getattr(self.base.parallelism, k) for k in PAR_KEPT}
        self.tr_fields = {f.name: getattr(self.base.training, f.name) for f in fields(TrainingConfig)}
        self.r0 = resolve(self.base)
        self.capacity = capacity
        if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 <= headroom < 1:
            raise option_error("keep_free", headroom, "must be a fraction in [0, 1), e.g. 0.05 for 5 %")
        self.headroom = float(headroom)                   # the "keep free" setting of the one rule
        self.band = band_for(self.base)                   # the configuration's measured error band
        # The one rule of estimator.formats.gpus.fit: a layout fits when its upper bound plus what is kept free fits.
        self.usable = usable_bytes(capacity, self.headroom, self.band.fraction)
        for name, value in (("max_tp", max_tp), ("gpus_per_node", gpus_per_node)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise option_error(name, show(value), f"must be a positive integer, got {show(value)}")
        self.max_tp = positive_ints("max_tp", max_tp)[0]
        self.gpn = positive_ints("gpus_per_node", gpus_per_node)[0]
        self.mbs = positive_ints("micro_batch_sizes", pins.pop("micro_batch_size", micro_batch_sizes),
                                 top=MAX_MICRO_BATCH)
        self._read_recompute(pins, recompute)
        dist = pins.pop("use_distributed_optimizer", distributed_optimizer)
        dist = (dist,) if isinstance(dist, bool) else tuple(dist) if isinstance(dist, (list, tuple, set,
                                                                                       frozenset)) else None
        if not dist or len(dist) > 2 or any(not isinstance(x, bool) for x in dist):
            raise option_error("distributed_optimizer", show(dist), "must be true and/or false")
        self.dist = tuple(sorted(set(dist), reverse=True))
        for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                     "expert_model_parallel_size", "expert_tensor_parallel_size"):
            if name in pins:
                pins[name] = positive_ints(name, pins[name])
        if "virtual_pipeline_model_parallel_size" in pins:      # null: plain 1F1B, as 1
            vpp = tuple(1 if x is None else x for x in pins["virtual_pipeline_model_parallel_size"])
            pins["virtual_pipeline_model_parallel_size"] = positive_ints("virtual_pipeline_model_parallel_size",
                                                                         vpp, top=MAX_LAYERS)
        for name in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"):
            if name in pins:
                pins[name] = pinned_layers(name, pins[name])
        self._setup_model()

    @staticmethod
    def inputs_key(data: dict) -> str:
        """What an engine without pins, ``seq_length`` or ``global_batch_size`` arguments reads of the configuration
        ``data`` (as written) to cost a given layout, as text: the model, the kept parallelism fields (:data:`PAR_KEPT`
        and the micro-batch group), the training fields it neither searches nor sets itself, the sequence length and
        global batch, and the precision. Two configurations with one key get engines that cost a layout alike ("Make
        it fit" builds one for all its candidates with that key). Left out:

        - the searched fields (:data:`SEARCHED`): read only to enumerate layouts and to check the types of the
          configuration's own pipeline split, which a valid configuration has right; ``max_tp``: enumeration only;
        - the world size (``world0``): the world size of the base configuration, which it only has to make valid. The
          cost reads the base's resolved model constants and byte model, and neither :mod:`estimator.model` (parameter
          counts, layer kinds, the placement of the layers) nor :func:`estimator.memory.states.byte_model` reads its
          dp, edp, world or micro-batch count, the only fields of :func:`estimator.model.resolve.resolve` that the
          world size sets."""
        par, tr = data.get("parallelism") or {}, data.get("training") or {}
        own = ("world_size", "recompute_modules")
        return repr((data.get("model"), [(k, par[k]) for k in (*PAR_KEPT, _GROUP) if k in par],
                     sorted((k, v) for k, v in tr.items() if k not in SEARCHED and k not in own),
                     sorted((data.get("precision") or {}).items())))

    @staticmethod
    def _own_split(par: dict) -> Split | None:
        """The configuration's own pipeline split, when it is not the even one (checked for its types here; its
        rules when it is placed)."""
        first, last = par.get("num_layers_in_first_pipeline_stage"), par.get("num_layers_in_last_pipeline_stage")
        acc_e = par.get("account_for_embedding_in_pipeline_split") or False
        acc_l = par.get("account_for_loss_in_pipeline_split") or False
        layout = par.get("pipeline_model_parallel_layout")
        for name, v, ok in (("num_layers_in_first_pipeline_stage", first, first is None or (
                                isinstance(first, int) and not isinstance(first, bool))),
                            ("num_layers_in_last_pipeline_stage", last, last is None or (
                                isinstance(last, int) and not isinstance(last, bool))),
                            ("account_for_embedding_in_pipeline_split", acc_e, isinstance(acc_e, bool)),
                            ("account_for_loss_in_pipeline_split", acc_l, isinstance(acc_l, bool)),
                            ("pipeline_model_parallel_layout", layout, layout is None or isinstance(layout, str))):
            if not ok:
                raise ConfigError(Problem("parallelism." + name, show(v), "has the wrong type for a pipeline split"))
        split = Split(first, last, acc_e, acc_l, layout)
        return None if split == Split() else split

    def _read_recompute(self, pins: dict, recompute):
        rc = pins.pop("recompute_granularity", recompute)
        rc = tuple("none" if x is None else x for x in itertools.islice(rc, MAX_CHOICES)) \
            if isinstance(rc, (list, tuple, set, frozenset)) else rc
        if not isinstance(rc, tuple) or not rc or not all(isinstance(x, str) and x in RECOMPUTE_GRANULARITIES
                                                          for x in rc):
            raise option_error("recompute", show(rc), "allowed: " + ", ".join(RECOMPUTE_GRANULARITIES))
        self.recompute = tuple(x for x in RECOMPUTE_GRANULARITIES if x in rc)
        methods = pins.pop("recompute_method", RECOMPUTE_METHODS)
        if not all(isinstance(m, str) and m in RECOMPUTE_METHODS for m in methods):
            raise option_error("recompute_method", show(list(methods)), "allowed: uniform, block")
        self.rc_methods = tuple(m for m in RECOMPUTE_METHODS if m in methods)
        layers = pins.pop("recompute_num_layers", None)
        self.rc_layers = positive_ints("recompute_num_layers", layers, top=MAX_LAYERS) if layers is not None else None
        self._rc_lists = {}

    # -- model constants and the memory lower bound ---------------------------------------------
    def _setup_model(self):
        r, cfg = self.r0, self.base
        self.moe = bool(r.E)
        if not self.moe:        # a dense model has no expert sizes: a pin of one would be silently ignored
            for name, short in (("expert_model_parallel_size", "ep"), ("expert_tensor_parallel_size", "etp")):
                if name in self.pins and self.pins[name] != (1,):
                    raise option_error(name, list(self.pins[name]), f"the model has no experts (num_experts is "
                                       f"not set), so {short} does not apply; got {list(self.pins[name])}")
        # Megatron-Bridge refuses layernorm recompute for Gemma 4's MoE block (post_layernorm with MoE:
        # estimator.config.rules.families).
        gemma4_moe = r.post_norm and bool(r.E)
        mods = ([] if gemma4_moe else ["layernorm"]) + (["moe_act"] if r.E else []) + (["mla_up_proj"] if r.mla else [])
        if cfg.training.attention_backend in ("unfused", "local"):
            mods.insert(0, "core_attn")
        self.selective_modules = tuple(mods)
        self.kind_params = [kind_params(r, kind) for kind in r.kinds]
        tr, par = cfg.training, cfg.parallelism
        self.states_may_shrink = (par.use_megatron_fsdp or par.use_torch_fsdp2 or tr.peft is not None
                                  or tr.freeze_language_model or tr.freeze_mtp or tr.optimizer_cpu_offload
                                  or tr.optimizer != "adam"
                                  or ((cfg.precision.fp8 or cfg.precision.fp4)
                                      and cfg.precision.first_last_layers_bf16))
        self.bm = {}
        for d in self.dist:
            tr = replace(cfg.training, use_distributed_optimizer=d)
            self.bm[d] = byte_model(resolve(replace(cfg, training=tr)))
        self._kinds = {}
        self._distinct = {}
        self._per_layer = {}
        self._splits = {}
        self._chunk = {}
        self._batches = {}
        # Stages hold at least one layer slot: a decoder layer, or the embedding / loss counted as one.
        self.pp_cap = min(r.L + (0 if self.hybrid else 2), MAX_STAGES)
        if cfg.model.model_kind == "wan":      # one pipeline stage, no selective recompute (config/rules/wan.py)
            self.pp_cap = 1
            self.recompute = tuple(x for x in self.recompute if x != "selective")
        self._setup_cost()

    def _plans(self, sh: Shape) -> tuple:
        """The stage plans of a shape's split (:func:`estimator.config.pipeline_layout.placement`)."""
        return placement(self.r0.L, sh.p, sh.v, sh.first, sh.last, sh.acc_e, sh.acc_l, sh.layout,
                         self.r0.mtp if sh.layout else 0)[0]

    def _stage_kinds(self, sh: Shape) -> tuple:
        """Per stage: (layers, MoE layers, layers of each kind)."""
        key = sh.split
        if key not in self._kinds:
            self._kinds[key] = tuple(self.stage_kind_counts(plan.layers) for plan in self._plans(sh))
        return self._kinds[key]

    def _distinct_kinds(self, sh: Shape) -> tuple:
        """The distinct (layers, MoE layers, layers of each kind) of the stages, in stage order (most stages
        are alike)."""
        key = sh.split
        if key not in self._distinct:
            self._distinct[key] = tuple(dict.fromkeys(self._stage_kinds(sh)))
        return self._distinct[key]

    def chunk_max(self, sh: Shape) -> int:
        """The most decoder layers of one virtual chunk (C: full recompute's groups run from 1 to C layers)."""
        key = sh.split
        if key not in self._chunk:
            self._chunk[key] = max((len(rng) for plan in self._plans(sh) for rng in plan.layers), default=0)
        return self._chunk[key]

    def stage_kind_counts(self, chunks) -> tuple:
        """(layers, MoE layers, layers of each kind) of one stage holding the decoder-layer ranges ``chunks``."""
        r = self.r0
        counts = [0] * len(r.kinds)
        for c in chunks:
            for k in r.layer_kinds[c.start:c.stop]:
                counts[k] += 1
        return (sum(counts), sum(n for n, kind in zip(counts, r.kinds) if kind.moe), tuple(counts))

    def _layer_params(self, t, ep, etp) -> tuple:
        """Per kind: (dense parameters, routed-expert parameters) one GPU holds of one such layer."""
        key = (t, ep, etp)
        if key not in self._per_layer:
            self._per_layer[key] = tuple((d.per_rank(t), e.sharded // (ep * etp) + e.replicated // ep)
                                         for d, e in self.kind_params)
        return self._per_layer[key]

    def state_floor(self, sh: Shape, d: bool) -> tuple[int, int, int]:
        """A lower bound of the model-state bytes of the fullest stage (decoder layers only: no embedding,
        output layer or MTP), with the dense and expert parameters of the stage holding the most."""
        per_kind = self._layer_params(sh.t, sh.ep, sh.etp)
        bm = self.bm[d]
        worst = (-1, 0, 0)
        for _, _, counts in self._distinct_kinds(sh):
            dense_p = sum(n * dd for n, (dd, _) in zip(counts, per_kind))
            exp_p = sum(n * e for n, (_, e) in zip(counts, per_kind))
            st = state_bytes(bm, dense_p, 0, exp_p, sh.n // (sh.t * sh.p), max(sh.edp, 1))
            total = st.weights + st.gradients + st.optimizer
            if total > worst[0]:
                worst = (total, dense_p, exp_p)
        if self.states_may_shrink:
            # FSDP, PEFT, offloading or a lighter optimizer hold less than this plain-Adam bound: no pruning by it.
            worst = (0,) + worst[1:]
        return worst

    # -- enumeration ----------------------------------------------------------------------------
    def _allowed(self, name, values):
        pin = self.pins.get(name)
        return [x for x in values if x in pin] if pin is not None else list(values)

    def _split_pinned_out(self, sp: Split) -> bool:
        pins = self.pins
        return any(name in pins and value not in pins[name] for name, value in zip(SPLIT_FIELDS, (
            sp.first, sp.last, sp.acc_e, sp.acc_l, sp.layout)))

    def pipeline_splits(self, p: int) -> tuple:
        """Every (split, v) Megatron-Core accepts for p stages, each placement once: the configuration's own split
        first, then the pinned ones, the even, the uneven first/last and the embedding/loss-slot splits."""
        if p in self._splits:
            return self._splits[p]
        r = self.r0
        L, mtp = r.L, r.mtp
        cands = [self.own_split] if self.own_split is not None else []
        for layout in self.pins.get("pipeline_model_parallel_layout", ()):
            if layout is not None:
                cands.append(Split(layout=layout))
        firsts = self.pins.get("num_layers_in_first_pipeline_stage", (None,))
        lasts = self.pins.get("num_layers_in_last_pipeline_stage", (None,))
        cands += [Split(f, la) for f in firsts for la in lasts if f is not None or la is not None]
        cands.append(Split())
        cands += [Split(f, la) for f, la in _uneven(L, p)]
        if not self.hybrid:       # a hybrid model's split comes from its pattern (hybrid_pattern.split_problems)
            cands += [Split(acc_e=e, acc_l=lo) for e, lo in ((True, False), (False, True), (True, True))]
        vpins = self.pins.get("virtual_pipeline_model_parallel_size")
        out, seen = [], set()
        for sp in dict.fromkeys(cands):
            if self._split_pinned_out(sp) or (self.hybrid and sp.layout is not None):
                continue
            if sp.layout is not None:
                try:
                    chunks = len(expand_layout(sp.layout))
                except ValueError:
                    continue
                vs = [chunks // p] if chunks % p == 0 else []
            elif p == 1:
                vs = [1]
            elif sp.acc_e or sp.acc_l:
                slots = L + sp.acc_e + sp.acc_l
                vs = [1] + [v for v in _divisors(slots // p) if v > 1] if slots % p == 0 else [1]
            else:
                counts = stage_counts(L, p, sp.first, sp.last)
                vs = [1] + [v for v in _divisors(functools.reduce(math.gcd, counts)) if v > 1] \
                    if counts and min(counts) > 0 else [1]
            for v in vs:
                if vpins is not None and v not in vpins:
                    continue
                par = _Par(p, v if v > 1 and sp.layout is None else None, *sp)
                if layout_problems(par, L, mtp):
                    continue
                plans = placement(L, p, v, sp.first, sp.last, sp.acc_e, sp.acc_l, sp.layout, mtp)[0]
                if dsa_split_problems(self.base.model, plans):     # a chunk starting on a shared-top-k layer
                    continue
                sig = tuple(pl.sig for pl in plans)
                if sig not in seen:
                    seen.add(sig)
                    out.append((sp, v))
        self._splits[p] = tuple(out)
        return self._splits[p]

    def shapes(self, n: int):
        """Every parallel shape on n GPUs that the divisibility rules allow (before any memory check)."""
        for group in self.shape_groups(n):
            yield from group

    def shape_groups(self, n: int):
        """The shapes of :meth:`shapes`, in its order, as lists that differ only in EP and ETP (so they share the
        micro-batch sizes, the recompute options and every cost term but the expert all-to-all)."""
        r = self.r0
        cfg = self.base
        L, s = r.L, self.s
        ffn = r.f
        unfused = cfg.training.attention_backend in ("unfused", "local")
        tp_cap = max((self.max_tp,) + self.pins.get("tensor_model_parallel_size", ()))
        tps = [t for t in _divisors(n) if t <= tp_cap and r.a % t == 0 and ffn % t == 0
               and (r.mla or r.g % t == 0 or t % r.g == 0) and (not r.fs or r.fs % t == 0)]
        etp_cap = max((self.max_tp,) + self.pins.get("expert_tensor_parallel_size", ()))
        pp_cap = self.pp_cap
        for t in self._allowed("tensor_model_parallel_size", tps):
            sps = self.pins.get("sequence_parallel", (t > 1,))
            for p in self._allowed("pipeline_model_parallel_size", [p for p in _divisors(n // t) if p <= pp_cap]):
                # (etp, ep) pairs, ETP outermost: they depend on the GPUs per pipeline stage only
                experts = [(etp, ep) for etp in self._allowed("expert_tensor_parallel_size",
                                                              [e for e in _divisors(n // p)
                                                               if e <= etp_cap and r.fm % e == 0])
                           for ep in self._allowed("expert_model_parallel_size",
                                                   [e for e in _divisors(r.E) if (n // p) % (etp * e) == 0])
                           ] if self.moe else []
                for split, v in self.pipeline_splits(p):
                    for cp in self._allowed("context_parallel_size", _divisors(n // (t * p))):
                        if cp > 1 and (s % (2 * cp) or unfused):
                            continue
                        for sp in sps:
                            if (sp and t == 1) or (sp and (s // cp) % t):
                                continue
                            if not self.moe:
                                yield [Shape(n, t, p, *split, v, cp, 1, t, sp)]
                                continue
                            group = [Shape(n, t, p, *split, v, cp, ep, etp, sp) for etp, ep in experts
                                     if not (t > 1 and ep > 1 and not sp)]
                            if group:
                                yield group

    def shape_without_pin(self, n: int, name: str) -> Shape | None:
        """A shape on n GPUs the rules allow once the pin on ``name`` is lifted (None: none either)."""
        saved = self.pins.pop(name)
        self._splits.clear()
        try:
            return next(self.shapes(n), None)
        finally:
            self.pins[name] = saved
            self._splits.clear()

    def group_of(self, sh: Shape) -> int | None:
        """The configuration's microbatch_group_size_per_vp_stage where this layout can take it, else None."""
        g = self.group
        return g if g is not None and sh.v > 1 and g >= sh.p else None

    def rc_options(self, sh: Shape) -> tuple:
        """The recompute options of a shape, in the order none, selective, block 1 .. C - 1, uniform 1 .. C."""
        c = self.chunk_max(sh)
        if c not in self._rc_lists:
            out = [rc for rc in ("none", "selective") if rc in self.recompute]
            if "full" in self.recompute:
                ok = (lambda n: True) if self.rc_layers is None else (lambda n: n in self.rc_layers)
                if "block" in self.rc_methods:
                    out += [rc_name("block", n) for n in range(1, c) if ok(n)]
                if "uniform" in self.rc_methods:
                    out += [rc_name("uniform", n) for n in range(1, max(c, 1) + 1) if ok(n)]
            self._rc_lists[c] = tuple(out)
        return self._rc_lists[c]

    def batches(self, sh: Shape) -> tuple:
        """(micro-batch size, global batch size) pairs of a shape that the batch rules allow."""
        dp = sh.dp
        key = (dp, sh.p, sh.v, self.group_of(sh))
        hit = self._batches.get(key)
        if hit is not None:
            return hit
        out = []
        for b in self.mbs:
            if self.gbs is not None:
                if self.gbs % (b * dp) or interleaving_problem(sh.p, sh.v, self.gbs // (b * dp), self.group_of(sh)):
                    continue
                gbs = self.gbs
            else:
                gbs = self.auto_gbs(b, dp, sh.p, sh.v)
                if gbs > MAX_BATCH:        # a configuration the loader would refuse
                    continue
            out.append((b, gbs))
        self._batches[key] = tuple(out)
        return self._batches[key]

    def count_variants(self, sh: Shape) -> int:
        return len(self.dist) * len(self.rc_options(sh)) * len(self.batches(sh))

    def variants(self, sh: Shape):
        """(distributed optimizer, recompute, micro-batch size, global batch size) of a shape."""
        bs = self.batches(sh)
        for d in self.dist:
            for rc in self.rc_options(sh):
                for b, gbs in bs:
                    yield d, rc, b, gbs

    def rc_cost(self, sh: Shape, rc: str) -> float:
        """Relative cost of a recompute option on this shape (block recomputes a share of the layers)."""
        if rc == "none":
            return 0.0
        if rc == "selective":
            return self.rc_cost_selective
        g, method, n = rc_parts(rc)
        if method == "block":
            return FULL_RECOMPUTE * self.block_share(sh, n)
        return FULL_RECOMPUTE

    # -- configurations and evaluation ----------------------------------------------------------
    def _split_par(self, sh: Shape) -> dict:
        par = {"tensor_model_parallel_size": sh.t, "pipeline_model_parallel_size": sh.p}
        if sh.v > 1 and sh.layout is None:
            par["virtual_pipeline_model_parallel_size"] = sh.v
        if sh.first is not None:
            par["num_layers_in_first_pipeline_stage"] = sh.first
        if sh.last is not None:
            par["num_layers_in_last_pipeline_stage"] = sh.last
        if sh.acc_e:
            par["account_for_embedding_in_pipeline_split"] = True
        if sh.acc_l:
            par["account_for_loss_in_pipeline_split"] = True
        if sh.layout is not None:
            par["pipeline_model_parallel_layout"] = sh.layout
        group = self.group_of(sh)
        if group is not None:
            par[_GROUP] = group
        return par

    def config(self, sh: Shape, d: bool, rc: str, b: int, gbs: int) -> Config:
        """The layout as a Config, built without re-parsing (the hot path); equal to config_dict's."""
        par = ParallelismConfig(
            expert_model_parallel_size=sh.ep, expert_tensor_parallel_size=sh.etp if self.moe else None,
            context_parallel_size=sh.cp, **self._split_par(sh), **self.par_fixed)
        # dataclasses.replace, without its per-field getattr and frozen __setattr__ (a field-for-field copy: the
        # schema's dataclasses have no __post_init__; tests/plan/test_search.py holds it equal to replace's)
        tr = object.__new__(TrainingConfig)
        tr.__dict__.update(self.tr_fields, world_size=sh.n, micro_batch_size=b, global_batch_size=gbs,
                           sequence_parallel=sh.sp, use_distributed_optimizer=d,
                           **rc_fields(rc, self.selective_modules))
        return Config(model=self.base.model, parallelism=par, training=tr, precision=self.base.precision)

    def config_dict(self, sh: Shape, d: bool, rc: str, b: int, gbs: int) -> dict:
        """The layout as a complete four-section configuration (what the user would write)."""
        par = self._split_par(sh)
        par["context_parallel_size"] = sh.cp
        if self.moe:
            par["expert_model_parallel_size"] = sh.ep
            par["expert_tensor_parallel_size"] = sh.etp
        par.update(self.par_keep)
        tr = dict(copy.deepcopy(self.tr_keep), world_size=sh.n, seq_length=self.s, global_batch_size=gbs,
                  micro_batch_size=b, sequence_parallel=sh.sp, use_distributed_optimizer=d)
        for k, v in rc_fields(rc, self.selective_modules).items():
            if v is not None:
                tr[k] = list(v) if isinstance(v, tuple) else v
        return {"model": copy.deepcopy(self.data["model"]), "parallelism": par, "training": tr,
                "precision": copy.deepcopy(self.data["precision"])}

    def evaluate(self, sh: Shape, d: bool, rc: str, b: int, gbs: int):
        """The peak of one layout's estimate and the stage that holds it
        (:func:`estimator.memory.assemble.peak_memory`: ``stage_memory``'s numbers, allocated x 1.05 for reserved,
        without the stages that cannot hold the peak), or None when Megatron-Core would reject it."""
        cfg = self.config(sh, d, rc, b, gbs)
        if validate(cfg):
            self.invalid += 1
            return None
        self.evaluated += 1
        return peak_memory(resolve(cfg))


# --------------------------------------------------------------------------------------------------
# Pruning by monotonicity


def _keeps_more(frc: str, rc: str) -> bool:
    """True when recompute option ``rc`` keeps at least what ``frc`` keeps in the forward and backward passes (at a
    micro-batch at least as large): none keeps everything; block n keeps more than block m > n and than uniform
    groups of one layer. (Selective, uniform groups of more layers and block are not ordered.)"""
    if rc == frc or rc == "none":
        return True
    if rc.startswith("full-block"):
        if frc == "full":
            return True
        if frc.startswith("full-block"):
            return rc_parts(frc)[2] >= rc_parts(rc)[2]
    return False


def no_fit_implied(failed: list, d: bool, rc: str, b: int) -> bool:
    """True when a layout needing no more memory than (d, rc, b) already failed on the same shape. ``failed`` holds
    (distributed optimizer, recompute, micro-batch, failed in the forward/backward passes) of the failures."""
    for fd, frc, fb, fwd in failed:
        if fb <= b and (fd == d or (fd and not d)) and (frc == rc or (fwd and _keeps_more(frc, rc))):
            return True
    return False
