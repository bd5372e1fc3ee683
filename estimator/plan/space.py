"""Search space of the layout search: every parallel layout Megatron-Core accepts, memory lower bounds, pruning.

:func:`estimator.plan.search.search` walks the layouts enumerated here. They are those Megatron-Core accepts
(the rules of :func:`estimator.config.rules.validate`, which every evaluated layout passes): tensor parallel
size t (a divisor of the world size up to ``max_tp``, one node by default, dividing heads, query groups
and FFN widths), pipeline size p with the even split and the uneven first/last-stage splits, virtual
pipeline size v (dividing every stage's layers), context parallel size cp (sequence divisible by 2 cp),
expert parallel size ep (dividing the experts) and expert tensor parallel size etp, sequence parallelism
whenever t > 1, the distributed optimizer, recompute none / selective / full and the micro-batch size.
Every layout becomes a complete configuration that :func:`estimator.estimate` reproduces exactly (its
numbers come from the same ``validate``, ``resolve`` and ``stage_memory`` calls). The inputs that define
the space (the model or configuration, the GPU memory, the world sizes and the fields pinned by the
caller) are read and checked here too; a bad one raises :class:`estimator.config.errors.ConfigError`.

Uneven splits: the middle stages hold ceil(L / p) layers and the first and/or last stage between 1 and
that many (they carry the embedding and the output layer, and stage 0 holds the most micro-batches).
Selective recompute recomputes the cheap modules that free memory: layernorm, plus moe_act (MoE), plus
mla_up_proj (MLA), plus core_attn with unfused attention (with flash attention core_attn frees nothing).
Full recompute is uniform, one layer per group.

Pruning (DeepSeek-V3 has 143,406 layouts on 1,024 GPUs; ``benchmarks/search.py``): the model states of
a stage do not depend on cp, the recompute option or the micro-batch size, so a lower bound of them
(decoder layers only, :meth:`SearchEngine.state_floor`) rules out whole families before any estimate; memory
grows with the micro-batch size, none needs at least what selective or full needs, and the distributed
optimizer needs less, so one layout that does not fit rules out the heavier ones of its shape
(:func:`no_fit_implied`; ``tests/plan/test_search.py`` checks the pruned search against a brute force).
The cost of each layout (:mod:`estimator.plan.cost`) orders the walk.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import os
from dataclasses import replace
from pathlib import Path

from ..config.errors import ConfigError, PresetNotFoundError, Problem, clip, show
from ..config.load import load_config, parse_text, path_kind, read_text_file, too_deep
from ..config.rules import interleaving_problem, validate
from ..config.schema import (MAX_BATCH, MAX_GPUS, MAX_LAYERS, MAX_MICRO_BATCH, MAX_STAGES, MAX_TOKENS, Config,
                             ParallelismConfig, section_specs)
from ..memory.assemble import stage_memory
from ..memory.report import GIB
from ..memory.states import byte_model, state_bytes
from ..model.layers import kind_params
from ..model.resolve import resolve, stage_counts, stage_layers
from .cost import CostModel, Shape

# --------------------------------------------------------------------------------------------------
# Inputs: the model, the GPU, the world sizes and the pinned fields

RECOMPUTE_GRANULARITIES = ("none", "selective", "full")
OPTION_ALIASES = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
            "vpp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
            "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size", "mbs": "micro_batch_size",
            "first_stage_layers": "num_layers_in_first_pipeline_stage",
            "last_stage_layers": "num_layers_in_last_pipeline_stage"}
#: Fields the search chooses; pinning one restricts that dimension.
_SEARCHED = {"tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
             "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
             "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage", "micro_batch_size",
             "use_distributed_optimizer", "recompute_granularity", "sequence_parallel"}
#: Pipeline-split fields the search does not enumerate: it drops them from the input (search() says so in a
#: note) and refuses them as pinned fields. A layout string or account_for slots fix the split for one PP x VPP,
#: which is what the search chooses; estimate() evaluates such a configuration as written.
SPLIT_NOT_SEARCHED = ("pipeline_model_parallel_layout", "account_for_embedding_in_pipeline_split",
                      "account_for_loss_in_pipeline_split", "microbatch_group_size_per_vp_stage")
#: Parallelism fields the search keeps as the user set them while it varies the layout (FSDP, HSDP, buffers).
_PAR_KEPT = ("cp_comm_type", "use_megatron_fsdp", "use_torch_fsdp2", "data_parallel_sharding_strategy",
             "outer_dp_sharding_strategy", "num_distributed_optimizer_instances", "fsdp_double_buffer",
             "suggested_communication_unit_size", "torch_fsdp2_reshard_after_forward", "tp_comm_overlap",
             "tp_comm_overlap_cfg", "nccl_ub")
_OWN_ARGS = {"world_size": "num_gpus", "seq_length": "seq_length", "global_batch_size": "global_batch_size",
             "recompute_method": "recompute", "recompute_num_layers": "recompute",
             "recompute_modules": "recompute"}


def option_error(name: str, value, message: str) -> ConfigError:
    return ConfigError(Problem(f"search.{name}", value, message))


#: Most values a list-valued search option (GPU counts, micro-batch sizes, pinned sizes) may hold.
MAX_CHOICES = 64
#: Largest GPU memory accepted, in bytes (1 PiB).
MAX_GPU_BYTES = 2 ** 50


def positive_ints(name: str, values, *, allow_empty: bool = False, top: int = MAX_GPUS) -> tuple:
    """One positive integer or an iterable of at most :data:`MAX_CHOICES` of them, each <= ``top``: sorted,
    without repeats. Anything else is a ConfigError naming ``search.<name>``."""
    if isinstance(values, (str, bytes, dict)):
        raise option_error(name, show(values), "must be a positive integer or a list of them")
    try:
        vals = (values,) if isinstance(values, int) else tuple(itertools.islice(values, MAX_CHOICES + 1))
    except TypeError:
        raise option_error(name, show(values), "must be a positive integer or a list of them") from None
    if not vals and not allow_empty:
        raise option_error(name, list(vals), "needs at least one value")
    if len(vals) > MAX_CHOICES:
        raise option_error(name, show(values), f"takes at most {MAX_CHOICES} values")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise option_error(name, show(v), f"must be a positive integer, got {show(v)}")
        if v > top:
            raise option_error(name, show(v), f"must be <= {top:,}, got {show(v)}")
    return tuple(sorted(set(vals)))


def _pinned_layers(name: str, values) -> tuple:
    """Pinned first/last stage layer counts: non-negative integers or null (the even split)."""
    vals = tuple(values) if isinstance(values, (list, tuple, set, frozenset)) else (values,)
    if len(vals) > MAX_CHOICES or not vals:
        raise option_error(name, show(values), f"takes 1 to {MAX_CHOICES} values")
    for v in vals:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_LAYERS):
            raise option_error(name, show(v), f"must be null or an integer in 0..{MAX_LAYERS:,}, got {show(v)}")
    return vals


def _fixed_fields(fixed: dict) -> tuple[dict, dict]:
    """Split ``fixed`` into pinned searched dimensions (name -> allowed values) and plain field overrides."""
    sections = {s.name: sec for sec in ("parallelism", "training", "precision") for s in section_specs(sec)}
    model_fields = {s.name for s in section_specs("model")}
    pins, overrides = {}, {}
    for key, value in fixed.items():
        name = OPTION_ALIASES.get(key, key)
        if name in _OWN_ARGS:
            raise option_error(key, show(value), f"set it with the {_OWN_ARGS[name]} argument of search()")
        if name in SPLIT_NOT_SEARCHED:
            raise option_error(key, show(value), "the search places layers by its own even and uneven first/last splits "
                           "with Megatron's default micro-batch groups; evaluate a fixed pipeline layout with "
                           "estimate()")
        if name in _SEARCHED:
            pins[name] = tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else (value,)
            if name in ("sequence_parallel", "use_distributed_optimizer") and (
                    not pins[name] or not all(isinstance(x, bool) for x in pins[name])):
                raise option_error(key, show(value), "must be true and/or false")
        elif name in sections:
            overrides[name] = (sections[name], value)
        elif name in model_fields:
            raise option_error(key, show(value), "model fields belong in the model, not in the search's fixed fields")
        else:
            allowed = sorted(set(OPTION_ALIASES) | _SEARCHED | set(sections) - set(_OWN_ARGS))
            raise option_error(clip(str(key)), show(value), "unknown field; allowed: " + ", ".join(allowed))
    return pins, overrides


def source_dict(model_or_config) -> dict:
    """The user's configuration as plain data (not yet validated: world_size and layout may be missing)."""
    if isinstance(model_or_config, Config):
        data = model_or_config.to_dict()
    elif isinstance(model_or_config, dict):
        if too_deep(model_or_config):
            raise ConfigError(Problem("config", None, "nested deeper than a configuration can be"))
        data = copy.deepcopy(model_or_config)
        if "model" not in data and "num_layers" in data:
            data = {"model": data}
    elif isinstance(model_or_config, (str, os.PathLike)):
        s = os.fspath(model_or_config)
        path = Path(s)
        if "\n" in s or s.lstrip().startswith("{"):
            data = parse_text(s)
        elif path.suffix.lower() in (".yaml", ".yml", ".json") or path_kind(path) is not None:
            data = parse_text(read_text_file(path), path.suffix.lower())
        else:
            try:
                from ..formats.presets import load_preset
            except ImportError:
                raise option_error("model", s, "not a file, and presets are not available") from None
            try:
                data = load_preset(s).to_dict()
            except PresetNotFoundError as exc:
                raise option_error("model", clip(s), f"neither a configuration file nor a preset ({exc})") from None
    else:
        raise option_error("model", type(model_or_config).__name__, "expected a preset name, a configuration "
                       "(path, YAML/JSON text, dict or Config) or a model section (dict)")
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ConfigError(Problem("model", None, "the configuration needs a 'model' section"))
    bad = [Problem(sec, data[sec], f"must be a mapping of field: value, got {show(data[sec])}")
           for sec in ("parallelism", "training", "precision") if not isinstance(data.get(sec), (dict, type(None)))]
    if bad:
        raise ConfigError(bad)
    return data


def gpu_capacity(gpu) -> tuple[int, dict]:
    """GPU memory in bytes and a description, from a GPU name, a GPU object or a number of bytes."""
    if isinstance(gpu, bool) or gpu is None:
        raise option_error("gpu", gpu, "expected a GPU name (e.g. H100-80GB) or a memory size in bytes")
    if isinstance(gpu, int):
        if not 0 < gpu <= MAX_GPU_BYTES:
            raise option_error("gpu", show(gpu), f"the GPU memory must be a positive number of bytes, at most "
                           f"{MAX_GPU_BYTES:,} (1 PiB), got {show(gpu)}")
        return gpu, {"name": f"{gpu / GIB:.2f} GiB", "memory_bytes": gpu, "source": "given"}
    if hasattr(gpu, "memory_bytes"):
        return int(gpu.memory_bytes), {"name": getattr(gpu, "name", "GPU"), "memory_bytes": int(gpu.memory_bytes),
                                       "source": getattr(gpu, "source", "")}
    if isinstance(gpu, str):
        try:
            from ..formats.gpus import get_gpu
        except ImportError:
            raise option_error("gpu", gpu, "GPU names need estimator.formats.gpus; give the memory in bytes") from None
        try:
            g = get_gpu(gpu)
        except ConfigError as exc:
            raise option_error("gpu", clip(gpu), "; ".join(p.message for p in exc.problems)) from None
        except (LookupError, ValueError) as exc:
            raise option_error("gpu", clip(gpu), str(exc) or "unknown GPU") from None
        return gpu_capacity(g)
    raise option_error("gpu", show(gpu), "expected a GPU name (e.g. H100-80GB) or a memory size in bytes")



def world_sizes(num_gpus) -> tuple:
    if isinstance(num_gpus, bool) or num_gpus is None:
        raise option_error("num_gpus", num_gpus, "must be a positive integer or a list of them")
    try:
        return positive_ints("num_gpus", num_gpus)
    except TypeError:
        raise option_error("num_gpus", num_gpus, "must be a positive integer or a list of them") from None


# --------------------------------------------------------------------------------------------------
# Enumeration


@functools.lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def _splits(L: int, p: int) -> list[tuple]:
    """(first, last) stage layer counts: the even split, and the uneven ones whose middle stages hold
    ceil(L / p) layers and whose first/last stages hold between 1 and that many."""
    if p == 1:
        return [(None, None)]
    out = [(None, None)] if L % p == 0 else []
    e = -(-L // p)
    if L % p == 0 or L < p:
        return out
    f = L - (p - 1) * e
    if 1 <= f <= e:
        out += [(f, None), (None, f)]
    if p >= 3:
        rest = L - (p - 2) * e
        out += [(f, rest - f) for f in range(max(1, rest - e), min(e, rest - 1) + 1)]
    return out


class SearchEngine(CostModel):
    """The enumeration, the pruning and (from :class:`estimator.plan.cost.CostModel`) the cost model
    for one model on one GPU type."""

    def __init__(self, data: dict, *, seq_length, global_batch_size, micro_batch_sizes, capacity, headroom,
                 max_tp, gpus_per_node, recompute, distributed_optimizer, fixed, world0):
        pins, overrides = _fixed_fields(fixed)
        self.pins = pins
        model_d = data["model"]
        par_d = data.get("parallelism") or {}
        tr_d = {k: v for k, v in (data.get("training") or {}).items()
                if k not in _SEARCHED and k not in _OWN_ARGS}
        pr_d = dict(data.get("precision") or {})
        for name, (sec, value) in overrides.items():
            {"parallelism": par_d, "training": tr_d, "precision": pr_d}[sec][name] = value
        self.par_keep = {k: par_d[k] for k in _PAR_KEPT if k in par_d}
        self.dropped = {k: par_d[k] for k in SPLIT_NOT_SEARCHED if par_d.get(k) not in (None, False)}
        pattern = model_d.get("hybrid_layer_pattern")
        if isinstance(pattern, str) and "|" in pattern.split("/")[0]:
            # A hybrid pattern's '|' segments fix the pipeline split, as a layout string does: the search chooses
            # the split, so it drops them (the layers stay as written).
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
        self.par_fixed = {k: getattr(self.base.parallelism, k) for k in _PAR_KEPT}
        self.r0 = resolve(self.base)
        self.capacity = capacity
        if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 <= headroom < 1:
            raise option_error("headroom", headroom, "must be a fraction in [0, 1), e.g. 0.05 for 5 %")
        self.headroom = float(headroom)
        self.usable = int(capacity * (1 - self.headroom))
        for name, value in (("max_tp", max_tp), ("gpus_per_node", gpus_per_node)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise option_error(name, show(value), f"must be a positive integer, got {show(value)}")
        self.max_tp = positive_ints("max_tp", max_tp)[0]
        self.gpn = positive_ints("gpus_per_node", gpus_per_node)[0]
        self.mbs = positive_ints("micro_batch_sizes", pins.pop("micro_batch_size", micro_batch_sizes),
                                  top=MAX_MICRO_BATCH)
        rc = pins.pop("recompute_granularity", recompute)
        rc = tuple("none" if x is None else x for x in itertools.islice(rc, MAX_CHOICES)) \
            if isinstance(rc, (list, tuple, set, frozenset)) else rc
        if not isinstance(rc, tuple) or not rc or not all(isinstance(x, str) and x in RECOMPUTE_GRANULARITIES for x in rc):
            raise option_error("recompute", show(rc), "allowed: " + ", ".join(RECOMPUTE_GRANULARITIES))
        self.recompute = tuple(x for x in RECOMPUTE_GRANULARITIES if x in rc)
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
                pins[name] = _pinned_layers(name, pins[name])
        self._setup_model()

    # -- model constants and the memory lower bound ---------------------------------------------
    def _setup_model(self):
        r, cfg = self.r0, self.base
        self.moe = bool(r.E)
        mods = ["layernorm"] + (["moe_act"] if r.E else []) + (["mla_up_proj"] if r.mla else [])
        if cfg.training.attention_backend in ("unfused", "local"):
            mods.insert(0, "core_attn")
        self.selective_modules = tuple(mods)
        self.kind_params = [kind_params(r, kind) for kind in r.kinds]
        tr, par = cfg.training, cfg.parallelism
        self.states_may_shrink = (par.use_megatron_fsdp or par.use_torch_fsdp2 or tr.peft is not None
                                  or tr.optimizer_cpu_offload or tr.optimizer != "adam"
                                  or (cfg.precision.fp8 and cfg.precision.first_last_layers_bf16))
        self.bm = {}
        for d in self.dist:
            tr = replace(cfg.training, use_distributed_optimizer=d)
            self.bm[d] = byte_model(resolve(replace(cfg, training=tr)))
        self._kinds = {}
        self._distinct = {}
        self._per_layer = {}
        self._setup_cost()

    def _stage_kinds(self, p, first, last, v) -> tuple:
        """Per stage: (layers, MoE layers, layers of each kind)."""
        key = (p, first, last, v)
        if key not in self._kinds:
            self._kinds[key] = tuple(self.stage_kind_counts(chunks)
                                     for chunks in stage_layers(self.r0.L, p, v, first, last))
        return self._kinds[key]

    def _distinct_kinds(self, p, first, last, v) -> tuple:
        """The distinct (layers, MoE layers, layers of each kind) of the stages, in stage order (most stages
        are alike)."""
        key = (p, first, last, v)
        if key not in self._distinct:
            self._distinct[key] = tuple(dict.fromkeys(self._stage_kinds(p, first, last, v)))
        return self._distinct[key]

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
        for _, _, counts in self._distinct_kinds(sh.p, sh.first, sh.last, sh.v):
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

    def shapes(self, n: int):
        """Every parallel shape on n GPUs that the divisibility rules allow (before any memory check)."""
        r = self.r0
        cfg = self.base
        L, s = r.L, self.s
        ffn = r.f
        unfused = cfg.training.attention_backend in ("unfused", "local")
        tp_cap = max((self.max_tp,) + self.pins.get("tensor_model_parallel_size", ()))
        tps = [t for t in _divisors(n) if t <= tp_cap and r.a % t == 0 and ffn % t == 0
               and (r.mla or r.g % t == 0) and (not r.fs or r.fs % t == 0)]
        etp_cap = max((self.max_tp,) + self.pins.get("expert_tensor_parallel_size", ()))
        first_pin = self.pins.get("num_layers_in_first_pipeline_stage")
        last_pin = self.pins.get("num_layers_in_last_pipeline_stage")
        for t in self._allowed("tensor_model_parallel_size", tps):
            sps = self.pins.get("sequence_parallel", (t > 1,))
            for p in self._allowed("pipeline_model_parallel_size",
                                   [p for p in _divisors(n // t) if p <= min(L, MAX_STAGES)]):
                for first, last in _splits(L, p):
                    if first_pin is not None and first not in first_pin:
                        continue
                    if last_pin is not None and last not in last_pin:
                        continue
                    counts = stage_counts(L, p, first, last)
                    g = 0
                    for c in counts:
                        g = math.gcd(g, c)
                    vs = [1] + ([v for v in _divisors(g) if v > 1] if p > 1 else [])
                    for v in self._allowed("virtual_pipeline_model_parallel_size", vs):
                        for cp in self._allowed("context_parallel_size", _divisors(n // (t * p))):
                            if cp > 1 and (s % (2 * cp) or unfused):
                                continue
                            for sp in sps:
                                if (sp and t == 1) or (sp and (s // cp) % t):
                                    continue
                                if not self.moe:
                                    yield Shape(n, t, p, first, last, v, cp, 1, t, sp)
                                    continue
                                for etp in self._allowed("expert_tensor_parallel_size",
                                                         [e for e in _divisors(n // p)
                                                          if e <= etp_cap and r.fm % e == 0]):
                                    for ep in self._allowed("expert_model_parallel_size",
                                                            [e for e in _divisors(r.E) if (n // p) % (etp * e) == 0]):
                                        if t > 1 and ep > 1 and not sp:
                                            continue
                                        yield Shape(n, t, p, first, last, v, cp, ep, etp, sp)

    def variants(self, sh: Shape):
        """(distributed optimizer, recompute, micro-batch size, global batch size) of a shape."""
        dp = sh.dp
        for d in self.dist:
            for rc in self.recompute:
                for b in self.mbs:
                    if self.gbs is not None:
                        if self.gbs % (b * dp) or interleaving_problem(sh.p, sh.v, self.gbs // (b * dp)):
                            continue
                        gbs = self.gbs
                    else:
                        gbs = self.auto_gbs(b, dp, sh.p, sh.v)
                        if gbs > MAX_BATCH:        # a configuration the loader would refuse
                            continue
                    yield d, rc, b, gbs

    # -- configurations and evaluation ----------------------------------------------------------
    def _rc_fields(self, rc: str) -> dict:
        if rc == "full":
            return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1,
                    "recompute_modules": None}
        if rc == "selective":
            return {"recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None,
                    "recompute_modules": self.selective_modules}
        return {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
                "recompute_modules": None}

    def config(self, sh: Shape, d: bool, rc: str, b: int, gbs: int) -> Config:
        """The layout as a Config, built without re-parsing (the hot path); equal to config_dict's."""
        par = ParallelismConfig(
            tensor_model_parallel_size=sh.t, pipeline_model_parallel_size=sh.p, expert_model_parallel_size=sh.ep,
            expert_tensor_parallel_size=sh.etp if self.moe else None, context_parallel_size=sh.cp,
            virtual_pipeline_model_parallel_size=sh.v if sh.v > 1 else None,
            num_layers_in_first_pipeline_stage=sh.first, num_layers_in_last_pipeline_stage=sh.last,
            **self.par_fixed)
        tr = replace(self.base.training, world_size=sh.n, micro_batch_size=b, global_batch_size=gbs,
                     sequence_parallel=sh.sp, use_distributed_optimizer=d, **self._rc_fields(rc))
        return Config(model=self.base.model, parallelism=par, training=tr, precision=self.base.precision)

    def config_dict(self, sh: Shape, d: bool, rc: str, b: int, gbs: int) -> dict:
        """The layout as a complete four-section configuration (what the user would write)."""
        par = {"tensor_model_parallel_size": sh.t, "pipeline_model_parallel_size": sh.p}
        if sh.v > 1:
            par["virtual_pipeline_model_parallel_size"] = sh.v
        if sh.first is not None:
            par["num_layers_in_first_pipeline_stage"] = sh.first
        if sh.last is not None:
            par["num_layers_in_last_pipeline_stage"] = sh.last
        par["context_parallel_size"] = sh.cp
        if self.moe:
            par["expert_model_parallel_size"] = sh.ep
            par["expert_tensor_parallel_size"] = sh.etp
        par.update(self.par_keep)
        tr = dict(copy.deepcopy(self.tr_keep), world_size=sh.n, seq_length=self.s, global_batch_size=gbs,
                  micro_batch_size=b, sequence_parallel=sh.sp, use_distributed_optimizer=d)
        for k, v in self._rc_fields(rc).items():
            if v is not None:
                tr[k] = list(v) if isinstance(v, tuple) else v
        return {"model": copy.deepcopy(self.data["model"]), "parallelism": par, "training": tr,
                "precision": copy.deepcopy(self.data["precision"])}

    def evaluate(self, sh: Shape, d: bool, rc: str, b: int, gbs: int):
        """The estimate of one layout, or None when Megatron-Core would reject it."""
        cfg = self.config(sh, d, rc, b, gbs)
        if validate(cfg):
            self.invalid += 1
            return None
        self.evaluated += 1
        return stage_memory(resolve(cfg))


# --------------------------------------------------------------------------------------------------
# Pruning by monotonicity

#: Memory order of the recompute options: a layout needs at least as much memory as the one it
#: dominates here, at the same or a smaller micro-batch (selective and full are not ordered).
_HEAVIER = {"none": ("none", "selective", "full"), "selective": ("selective",), "full": ("full",)}


def no_fit_implied(failed: list, d: bool, rc: str, b: int) -> bool:
    """True when a layout needing no more memory than (d, rc, b) already failed on the same shape."""
    for fd, frc, fb in failed:
        if fb <= b and frc in _HEAVIER[rc] and (fd == d or (fd and not d)):
            return True
    return False
