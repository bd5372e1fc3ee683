"""Strategy search: every valid parallel layout of a model on N GPUs, the ones that fit, ranked.

The seeds' parallelism guide walks users through a manual loop (TP 2, 4, 8, then PP, then EP, then
memory optimizations). :func:`search` does it exhaustively. It enumerates every layout Megatron-Core
accepts (the rules of :func:`estimator.config.validate`, which every evaluated layout passes): tensor
parallel size t (a divisor of the world size up to ``max_tp``, one node by default, dividing heads, query
groups and FFN widths), pipeline size p with the even split and the uneven first/last-stage splits,
virtual pipeline size v (dividing every stage's layers), context parallel size cp (sequence divisible by
2 cp), expert parallel size ep (dividing the experts) and expert tensor parallel size etp, sequence
parallelism whenever t > 1, the distributed optimizer, recompute none / selective / full and the
micro-batch size. It keeps the layouts whose peak ``device_bytes`` (:func:`estimator.estimate`) is at
most ``(1 - headroom)`` of the GPU memory and ranks them with the cost model below. Every reported
layout holds a complete configuration that ``estimate`` reproduces exactly (its numbers come from the
same ``validate``, ``resolve`` and ``stage_memory`` calls).

Uneven splits: the middle stages hold ceil(L / p) layers and the first and/or last stage between 1 and
that many (they carry the embedding and the output layer, and stage 0 holds the most micro-batches).
Selective recompute recomputes the cheap modules that free memory: layernorm, plus moe_act (MoE), plus
mla_up_proj (MLA), plus core_attn with unfused attention (with flash attention core_attn frees nothing).
Full recompute is uniform, one layer per group.

Speed (DeepSeek-V3 has 143,406 layouts on 1,024 GPUs; ``benchmarks/search.py``): the model states of a
stage do not depend on cp, the recompute option or the micro-batch size, so a lower bound of them
(decoder layers only) rules out whole families before any estimate; memory grows with the micro-batch
size, none needs at least what selective or full needs, and the distributed optimizer needs less, so one
layout that does not fit rules out the heavier ones of its shape (``tests/test_search.py`` checks the
pruned search against a brute force); and the cost of a layout is known before its memory, so shapes
are visited best first and the search stops once ``top`` layouts fit and nothing left can beat them.

Cost model (relative step time; 1.0 = the step's matmul FLOPs at :data:`GPU_FLOPS` per GPU)::

    cost = (1 + recompute + tp + cp + ep + launch) * (1 + bubble) + dp + pp_p2p

- compute: 6 x active parameters (without the embedding lookup) + 3 L s a (d_qk + d_v) FLOPs per token
  (causal flash attention, forward and backward);
- recompute: full re-runs the forward pass (+1/3, :data:`FULL_RECOMPUTE`); selective the modules of
  :data:`SELECTIVE_MODULE_COST`;
- bubble = (p - 1) / (m v) with m micro-batches: the 1F1B (v = 1) and interleaved schedules; it scales
  the work repeated per micro-batch;
- tp: per layer and micro-batch 8 transfers of (t - 1)/t x tokens x h x 2 B (all-gather and
  reduce-scatter around attention and MLP, forward and backward);
- cp: ring attention passes its K and V chunk to cp - 1 peers, three times with the backward pass;
- ep: per MoE layer and micro-batch 4 all-to-alls of tokens x top-k x h x 2 B x (ep - 1)/ep, and with
  etp > 1 the routed tokens gathered and scattered over the expert-TP group;
- launch: :data:`LAUNCH_SECONDS` per layer and micro-batch (small micro-batches cost more);
- dp: once per step, gradients reduce-scattered and weights all-gathered (or gradients all-reduced) for
  the parameters of the fullest stage, :data:`DP_OVERLAPPED_EXPOSED` of it when overlap_grad_reduce is on;
- pp_p2p: activations and their gradients crossing each stage boundary, once per virtual chunk.

Traffic runs at :data:`NVLINK_BYTES_PER_S` inside a node and :data:`NETWORK_BYTES_PER_S` between nodes.
Megatron-Core orders ranks tp-cp-dp-pp for dense layers and etp-ep-edp-pp for experts, so a group of
size n with stride k has min(n, gpus_per_node // k) members per node. A ring (TP, CP, DP, PP) leaving
the node runs at network speed; an all-to-all (EP) sends its off-node share at network speed. Ties go
to the layout with the lower peak memory. The constants are round figures for an H100-class cluster
with one 400 Gb/s NIC per GPU: they order layouts, they do not predict throughput.

What this says about the seeds' workflow ("TP up to 8, then PP, then EP, then memory optimizations";
Megatron-Core wins where they differ): the distributed optimizer comes first, not last: it moves the
same bytes as the all-reduce it replaces and takes 18 -> 6 + 12/d bytes per parameter, so layouts
without it are only listed on request. TP is cheap inside a node and expensive across nodes; PP costs
the bubble (p - 1)/(m v), which interleaving and more micro-batches shrink; EP does not multiply the
world size (experts fold over the same ranks as TP x CP x DP) and its all-to-all is cheap only inside a
node; CP needs neither TP nor sequence parallelism and pays for itself only on long sequences; full
recompute costs a third more compute, so a layout that fits without it ranks higher.
"""

from __future__ import annotations

import functools
import heapq
import math
import time
from dataclasses import dataclass, field, replace
from typing import Iterable

from .config import load_config, validate
from .errors import ConfigError, PresetNotFoundError, Problem
from .memory import stage_memory
from .params import attention, dense_mlp, moe_experts, moe_router, shared_expert
from .report import GIB, to_plain
from .resolve import resolve, stage_layers
from .schema import Config, ParallelismConfig, section_specs
from .states import byte_model, state_bytes

__all__ = ["Answer", "Layout", "SearchResult", "max_micro_batch", "max_seq_length", "min_gpus", "search",
           "GPU_FLOPS", "NVLINK_BYTES_PER_S", "NETWORK_BYTES_PER_S", "LAUNCH_SECONDS", "FULL_RECOMPUTE",
           "SELECTIVE_MODULE_COST", "DP_OVERLAPPED_EXPOSED", "DEFAULT_TOKENS_PER_STEP"]

#: Effective bf16 matmul throughput per GPU (about 40 % of an H100's 989 TFLOP/s dense peak).
GPU_FLOPS = 400e12
#: Collective bandwidth per GPU inside an NVLink node (NCCL bus bandwidth on 8 x H100 is 350-450 GB/s).
NVLINK_BYTES_PER_S = 300e9
#: Bandwidth per GPU between nodes: one 400 Gb/s InfiniBand/RoCE NIC per GPU at about 80 % efficiency.
NETWORK_BYTES_PER_S = 40e9
#: Fixed cost per layer and micro-batch, forward plus backward (about 60 kernel launches and syncs).
LAUNCH_SECONDS = 3e-4
#: Full recompute runs every forward pass twice: 2 of the 6 FLOPs per parameter and token again.
FULL_RECOMPUTE = 1 / 3
#: Selective recompute cost per module, as a fraction of the step's compute: norms and activations are
#: memory-bound elementwise kernels; the MLA up-projections and unfused attention are matmuls; the MLP or
#: MoE block holds about 2/3 of a layer's FLOPs, so re-running its forward costs about 2/3 x 1/3.
SELECTIVE_MODULE_COST = {"layernorm": 0.01, "moe_act": 0.01, "mla_up_proj": 0.04, "core_attn": 0.05,
                         "shared_experts": 0.03, "mlp": 0.22, "moe": 0.22}
#: Share of the data-parallel traffic left on the critical path with overlap_grad_reduce.
DP_OVERLAPPED_EXPOSED = 0.2
#: Tokens per optimizer step when no global batch size is given (4 Mi, a common pretraining batch).
DEFAULT_TOKENS_PER_STEP = 2 ** 22

_RECOMPUTE = ("none", "selective", "full")
_ALIASES = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
            "vpp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
            "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size", "mbs": "micro_batch_size",
            "first_stage_layers": "num_layers_in_first_pipeline_stage",
            "last_stage_layers": "num_layers_in_last_pipeline_stage"}
#: Fields the search chooses; pinning one restricts that dimension.
_SEARCHED = {"tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
             "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
             "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage", "micro_batch_size",
             "use_distributed_optimizer", "recompute_granularity", "sequence_parallel"}
_OWN_ARGS = {"world_size": "num_gpus", "seq_length": "seq_length", "global_batch_size": "global_batch_size",
             "recompute_method": "recompute", "recompute_num_layers": "recompute",
             "recompute_modules": "recompute"}


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
# Inputs


def _problem(name: str, value, message: str) -> ConfigError:
    return ConfigError(Problem(f"search.{name}", value, message))


def _source_dict(model_or_config) -> dict:
    """The user's configuration as plain data (not yet validated: world_size and layout may be missing)."""
    import copy
    import os
    from pathlib import Path

    from .config import parse_text
    if isinstance(model_or_config, Config):
        data = model_or_config.to_dict()
    elif isinstance(model_or_config, dict):
        data = copy.deepcopy(model_or_config)
        if "model" not in data and "num_layers" in data:
            data = {"model": data}
    elif isinstance(model_or_config, (str, os.PathLike)):
        s = os.fspath(model_or_config)
        path = Path(s)
        if "\n" in s or s.lstrip().startswith("{"):
            data = parse_text(s)
        elif path.suffix.lower() in (".yaml", ".yml", ".json") or path.exists():
            if not path.is_file():
                raise ConfigError(Problem("config", s, f"file not found: {s}"))
            data = parse_text(path.read_text(encoding="utf-8"), path.suffix.lower())
        else:
            try:
                from .presets import load_preset
            except ImportError:
                raise _problem("model", s, "not a file, and presets are not available") from None
            try:
                data = load_preset(s).to_dict()
            except PresetNotFoundError as exc:
                raise _problem("model", s, f"neither a configuration file nor a preset ({exc})") from None
    else:
        raise _problem("model", type(model_or_config).__name__, "expected a preset name, a configuration "
                       "(path, YAML/JSON text, dict or Config) or a model section (dict)")
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ConfigError(Problem("model", None, "the configuration needs a 'model' section"))
    return data


def _capacity(gpu) -> tuple[int, dict]:
    """GPU memory in bytes and a description, from a GPU name, a GPU object or a number of bytes."""
    if isinstance(gpu, bool) or gpu is None:
        raise _problem("gpu", gpu, "expected a GPU name (e.g. H100-80GB) or a memory size in bytes")
    if isinstance(gpu, int):
        if gpu <= 0:
            raise _problem("gpu", gpu, "the GPU memory must be a positive number of bytes")
        return gpu, {"name": f"{gpu / GIB:.2f} GiB", "memory_bytes": gpu, "source": "given"}
    if hasattr(gpu, "memory_bytes"):
        return int(gpu.memory_bytes), {"name": getattr(gpu, "name", "GPU"), "memory_bytes": int(gpu.memory_bytes),
                                       "source": getattr(gpu, "source", "")}
    if isinstance(gpu, str):
        try:
            from .gpus import get_gpu
        except ImportError:
            raise _problem("gpu", gpu, "GPU names need estimator.gpus; give the memory in bytes") from None
        try:
            g = get_gpu(gpu)
        except ConfigError as exc:
            raise _problem("gpu", gpu, "; ".join(p.message for p in exc.problems)) from None
        except (LookupError, ValueError) as exc:
            raise _problem("gpu", gpu, str(exc) or "unknown GPU") from None
        return _capacity(g)
    raise _problem("gpu", gpu, "expected a GPU name (e.g. H100-80GB) or a memory size in bytes")


def _positive_ints(name: str, values, *, allow_empty: bool = False) -> tuple:
    vals = (values,) if isinstance(values, int) else tuple(values)
    if not vals and not allow_empty:
        raise _problem(name, list(vals), "needs at least one value")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _problem(name, v, "must be a positive integer")
    return tuple(sorted(set(vals)))


def _fixed_fields(fixed: dict) -> tuple[dict, dict]:
    """Split ``fixed`` into pinned searched dimensions (name -> allowed values) and plain field overrides."""
    sections = {s.name: sec for sec in ("parallelism", "training", "precision") for s in section_specs(sec)}
    model_fields = {s.name for s in section_specs("model")}
    pins, overrides = {}, {}
    for key, value in fixed.items():
        name = _ALIASES.get(key, key)
        if name in _OWN_ARGS:
            raise _problem(key, value, f"set it with the {_OWN_ARGS[name]} argument of search()")
        if name in _SEARCHED:
            pins[name] = tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else (value,)
        elif name in sections:
            overrides[name] = (sections[name], value)
        elif name in model_fields:
            raise _problem(key, value, "model fields belong in the model, not in the search's fixed fields")
        else:
            allowed = sorted(set(_ALIASES) | _SEARCHED | set(sections) - set(_OWN_ARGS))
            raise _problem(key, value, "unknown field; allowed: " + ", ".join(allowed))
    return pins, overrides


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


def _node_share(size: int, stride: int, gpus_per_node: int) -> float:
    """Fraction of a group's members on the same node as a given member (ranks placed contiguously)."""
    return min(size, max(1, gpus_per_node // stride)) / size


@dataclass(frozen=True, slots=True)
class _Shape:
    n: int
    t: int
    p: int
    first: int | None
    last: int | None
    v: int
    cp: int
    ep: int
    etp: int
    sp: bool

    @property
    def dp(self) -> int:
        return self.n // (self.t * self.p * self.cp)

    @property
    def edp(self) -> int:
        return self.n // (self.etp * self.ep * self.p)


class _Engine:
    """The enumeration, the pruning and the cost model for one model on one GPU type."""

    def __init__(self, data: dict, *, seq_length, global_batch_size, micro_batch_sizes, capacity, headroom,
                 max_tp, gpus_per_node, recompute, distributed_optimizer, fixed, world0):
        import copy
        pins, overrides = _fixed_fields(fixed)
        self.pins = pins
        model_d = data["model"]
        par_d = data.get("parallelism") or {}
        tr_d = {k: v for k, v in (data.get("training") or {}).items()
                if k not in _SEARCHED and k not in _OWN_ARGS}
        pr_d = dict(data.get("precision") or {})
        for name, (sec, value) in overrides.items():
            {"parallelism": par_d, "training": tr_d, "precision": pr_d}[sec][name] = value
        self.par_keep = {k: par_d[k] for k in ("cp_comm_type",) if k in par_d}
        s = seq_length or (data.get("training") or {}).get("seq_length") or model_d.get("max_position_embeddings")
        if s is None:
            raise _problem("seq_length", None, "is required (the model sets no max_position_embeddings)")
        _positive_ints("seq_length", s)
        self.s = s
        gbs = global_batch_size if global_batch_size is not None else (data.get("training") or {}).get(
            "global_batch_size")
        if gbs is not None:
            _positive_ints("global_batch_size", gbs)
        self.gbs = gbs
        self.tr_keep = tr_d
        self.data = {"model": copy.deepcopy(model_d), "parallelism": dict(self.par_keep),
                     "training": {**tr_d, "world_size": world0, "seq_length": s}, "precision": pr_d}
        self.base = load_config(self.data)            # raises ConfigError naming any bad field
        self.r0 = resolve(self.base)
        self.capacity = capacity
        if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 <= headroom < 1:
            raise _problem("headroom", headroom, "must be a fraction in [0, 1), e.g. 0.05 for 5 %")
        self.headroom = float(headroom)
        self.usable = int(capacity * (1 - self.headroom))
        self.max_tp = _positive_ints("max_tp", max_tp)[0]
        self.gpn = _positive_ints("gpus_per_node", gpus_per_node)[0]
        self.mbs = _positive_ints("micro_batch_sizes", pins.pop("micro_batch_size", micro_batch_sizes))
        rc = tuple("none" if x is None else x for x in pins.pop("recompute_granularity", recompute))
        bad = [x for x in rc if x not in _RECOMPUTE]
        if bad or not rc:
            raise _problem("recompute", list(rc), "allowed: " + ", ".join(_RECOMPUTE))
        self.recompute = tuple(x for x in _RECOMPUTE if x in rc)
        dist = pins.pop("use_distributed_optimizer", distributed_optimizer)
        dist = (dist,) if isinstance(dist, bool) else tuple(dist)
        if not dist or any(not isinstance(x, bool) for x in dist):
            raise _problem("distributed_optimizer", list(dist), "must be true and/or false")
        self.dist = tuple(sorted(set(dist), reverse=True))
        for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                     "expert_model_parallel_size", "expert_tensor_parallel_size"):
            if name in pins:
                pins[name] = _positive_ints(name, pins[name])
        self._setup_model()

    # -- model constants ------------------------------------------------------------------------
    def _setup_model(self):
        r, cfg = self.r0, self.base
        self.moe = bool(r.E)
        mods = ["layernorm"] + (["moe_act"] if r.E else []) + (["mla_up_proj"] if r.mla else [])
        if cfg.training.attention_backend in ("unfused", "local"):
            mods.insert(0, "core_attn")
        self.selective_modules = tuple(mods)
        self.rc_cost = {"none": 0.0, "full": FULL_RECOMPUTE,
                        "selective": sum(SELECTIVE_MODULE_COST[m] for m in mods)}
        att = attention(r)
        self.dense_layer = att + dense_mlp(r)
        self.moe_dense = att + moe_router(r) + shared_expert(r)
        self.experts = moe_experts(r) if r.E else None
        from .params import count_parameters
        pc = count_parameters(r)
        flops_params = pc.active - (0 if r.tied else pc.embedding)
        att_width = r.a * ((r.qk_dim + r.rope_dim + r.v_dim) if r.mla else 2 * r.dh)
        self.flops_per_token = 6 * flops_params + 3 * r.L * self.s * att_width
        self.kv_elems = r.a * (r.qk_dim + r.rope_dim + r.v_dim) if r.mla else 2 * r.g * r.dh
        self.bm = {}
        for d in self.dist:
            tr = replace(cfg.training, use_distributed_optimizer=d)
            self.bm[d] = byte_model(resolve(replace(cfg, training=tr)))
        self.dp_exposed = DP_OVERLAPPED_EXPOSED if cfg.training.overlap_grad_reduce else 1.0
        self._kinds = {}
        self._per_layer = {}
        self._bw_cache = {}
        self._max_cache = {}

    def _stage_kinds(self, p, first, last, v) -> tuple:
        key = (p, first, last, v)
        if key not in self._kinds:
            moe = self.r0.moe_layers
            self._kinds[key] = tuple(
                (sum(len(c) for c in chunks), sum(sum(moe[c.start:c.stop]) for c in chunks))
                for chunks in stage_layers(self.r0.L, p, v, first, last))
        return self._kinds[key]

    def _layer_params(self, t, ep, etp) -> tuple[int, int, int]:
        key = (t, ep, etp)
        if key not in self._per_layer:
            e = self.experts
            self._per_layer[key] = (self.dense_layer.per_rank(t), self.moe_dense.per_rank(t),
                                    e.sharded // (ep * etp) + e.replicated // ep if e else 0)
        return self._per_layer[key]

    def state_floor(self, sh: _Shape, d: bool) -> tuple[int, int, int]:
        """A lower bound of the model-state bytes of the fullest stage (decoder layers only: no embedding,
        output layer or MTP), with the dense and expert parameters of the stage holding the most."""
        dense_l, moe_d, moe_e = self._layer_params(sh.t, sh.ep, sh.etp)
        bm = self.bm[d]
        worst = (-1, 0, 0)
        for n_layers, n_moe in self._stage_kinds(sh.p, sh.first, sh.last, sh.v):
            dense_p = (n_layers - n_moe) * dense_l + n_moe * moe_d
            exp_p = n_moe * moe_e
            st = state_bytes(bm, dense_p, 0, exp_p, sh.n // (sh.t * sh.p), max(sh.edp, 1))
            total = st.weights + st.gradients + st.optimizer
            if total > worst[0]:
                worst = (total, dense_p, exp_p)
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
            for p in self._allowed("pipeline_model_parallel_size", [p for p in _divisors(n // t) if p <= L]):
                for first, last in _splits(L, p):
                    if first_pin is not None and first not in first_pin:
                        continue
                    if last_pin is not None and last not in last_pin:
                        continue
                    counts = [c for c in self._counts(L, p, first, last)]
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
                                    yield _Shape(n, t, p, first, last, v, cp, 1, t, sp)
                                    continue
                                for etp in self._allowed("expert_tensor_parallel_size",
                                                         [e for e in _divisors(n // p)
                                                          if e <= etp_cap and r.fm % e == 0]):
                                    for ep in self._allowed("expert_model_parallel_size",
                                                            [e for e in _divisors(r.E) if (n // p) % (etp * e) == 0]):
                                        if t > 1 and ep > 1 and not sp:
                                            continue
                                        yield _Shape(n, t, p, first, last, v, cp, ep, etp, sp)

    @staticmethod
    def _counts(L, p, first, last) -> list[int]:
        if first is None and last is None:
            return [L // p] * p
        mid = p - (first is not None) - (last is not None)
        each = (L - (first or 0) - (last or 0)) // mid
        counts = [each] * p
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        return counts

    def variants(self, sh: _Shape):
        """(distributed optimizer, recompute, micro-batch size, global batch size) of a shape."""
        dp = sh.dp
        for d in self.dist:
            for rc in self.recompute:
                for b in self.mbs:
                    if self.gbs is not None:
                        if self.gbs % (b * dp):
                            continue
                        gbs = self.gbs
                    else:
                        gbs = self.auto_gbs(b, dp)
                    yield d, rc, b, gbs

    # -- cost model -----------------------------------------------------------------------------
    def _bw(self, size: int, stride: int, ring: bool) -> float:
        """Seconds per byte for a group: a ring leaving the node runs at network speed; an all-to-all sends
        its off-node share at network speed."""
        key = (size, stride, ring)
        if key not in self._bw_cache:
            share = _node_share(size, stride, self.gpn)
            if ring:
                self._bw_cache[key] = 1 / NVLINK_BYTES_PER_S if share >= 1 else 1 / NETWORK_BYTES_PER_S
            else:
                self._bw_cache[key] = share / NVLINK_BYTES_PER_S + (1 - share) / NETWORK_BYTES_PER_S
        return self._bw_cache[key]

    def _stage_max(self, p, first, last, v) -> tuple[int, int]:
        """(layers, MoE layers) of the fullest stage: the slowest stage sets the pipeline's pace."""
        key = (p, first, last, v)
        if key not in self._max_cache:
            kinds = self._stage_kinds(p, first, last, v)
            self._max_cache[key] = (max(c for c, _ in kinds), max(m for _, m in kinds))
        return self._max_cache[key]

    def traffic(self, sh: _Shape) -> dict:
        """Cost terms that depend on neither the micro-batch size nor the optimizer: seconds of traffic per
        token of the step over seconds of compute per token (both scale with the tokens per step)."""
        r = self.r0
        t, p, cp, ep, etp, n, dp = sh.t, sh.p, sh.cp, sh.ep, sh.etp, sh.n, sh.dp
        layers, moe_layers = self._stage_max(p, sh.first, sh.last, sh.v)
        tok = 1 / (dp * cp)                          # share of the step's tokens one GPU's stage processes
        compute = self.flops_per_token / (n * GPU_FLOPS)
        h2 = r.h * 2
        tp = 8 * (t - 1) / t * h2 * layers * tok * self._bw(t, 1, True) if t > 1 else 0.0
        cpc = (3 * (cp - 1) * self.kv_elems / t * 2 * layers * tok * self._bw(cp, t, True)) if cp > 1 else 0.0
        epc = 0.0
        if moe_layers:
            routed = (tok / t if sh.sp else tok) * r.k * h2 * moe_layers
            if ep > 1:
                epc = 4 * routed * (ep - 1) / ep * self._bw(ep, etp, False)
            if etp > 1:
                epc += 4 * (etp - 1) * routed * self._bw(etp, 1, True)
        pp = 2 * sh.v * tok * h2 / (t if sh.sp else 1) * self._bw(p, t * cp * dp, True) if p > 1 else 0.0
        launch = layers * LAUNCH_SECONDS / (dp * self.s)         # per token of the step, times 1/b later
        return {"compute": compute, "tensor_parallel": tp / compute, "context_parallel": cpc / compute,
                "expert_all_to_all": epc / compute, "pipeline_p2p": pp / compute, "launch": launch / compute}

    def dp_seconds(self, sh: _Shape, d: bool, floor: tuple) -> float:
        """Exposed seconds of data-parallel traffic per step: gradients reduce-scattered and weights
        all-gathered (the distributed optimizer) or gradients all-reduced, for the fullest stage's parameters."""
        bm = self.bm[d]
        per_param = bm.grad + bm.weight if bm.distributed else 2 * bm.grad
        _, dense_p, exp_p = floor
        dd, ed = sh.dp * sh.cp, sh.edp
        sec = 0.0
        if dd > 1:
            sec += per_param * dense_p * (dd - 1) / dd * self._bw(dd, sh.t, True)
        if exp_p and ed > 1:
            sec += per_param * exp_p * (ed - 1) / ed * self._bw(ed, sh.etp * sh.ep, True)
        return sec * self.dp_exposed

    def shape_costs(self, sh: _Shape, d: bool, floor: tuple) -> dict:
        return dict(self.traffic(sh), data_parallel_s=self.dp_seconds(sh, d, floor))

    def auto_gbs(self, b: int, dp: int) -> int:
        """The global batch of a layout when none is given: DEFAULT_TOKENS_PER_STEP, rounded up."""
        target = max(1, DEFAULT_TOKENS_PER_STEP // self.s)
        return -(-target // (b * dp)) * b * dp

    def recompute_of(self, tr, sh: _Shape) -> tuple[str, float]:
        """Name and cost of any configuration's recompute settings (the search only makes three)."""
        g = tr.recompute_granularity
        if g == "selective":
            mods = tr.recompute_modules or ("core_attn",)
            return "selective", sum(SELECTIVE_MODULE_COST.get(m, 0.0) for m in mods)
        if g == "full" and tr.recompute_method == "block":
            n = tr.recompute_num_layers if tr.recompute_num_layers is not None else 1
            chunk = max(max(c for c, _ in self._stage_kinds(sh.p, sh.first, sh.last, sh.v)) // sh.v, 1)
            return f"full-block{n}", FULL_RECOMPUTE * min(n, chunk) / chunk
        return ("full", FULL_RECOMPUTE) if g == "full" else ("none", 0.0)

    def cost(self, sh: _Shape, sc: dict, rc_cost: float, b: int, gbs: int) -> tuple[float, dict]:
        """Relative step time of one layout and its terms (shares of the bare compute time)."""
        m = gbs // (b * sh.dp)
        bubble = (sh.p - 1) / (m * sh.v) if sh.p > 1 else 0.0
        launch = sc["launch"] / b
        per_mb = 1 + rc_cost + sc["tensor_parallel"] + sc["context_parallel"] + \
            sc["expert_all_to_all"] + launch
        dp = sc["data_parallel_s"] / (sc["compute"] * gbs * self.s)
        total = per_mb * (1 + bubble) + dp + sc["pipeline_p2p"]
        terms = {"compute": 1.0, "recompute": rc_cost, "tensor_parallel": sc["tensor_parallel"],
                 "context_parallel": sc["context_parallel"], "expert_all_to_all": sc["expert_all_to_all"],
                 "kernel_launch": launch, "pipeline_bubble": per_mb * bubble, "pipeline_p2p": sc["pipeline_p2p"],
                 "data_parallel": dp}
        return total, terms

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

    def config(self, sh: _Shape, d: bool, rc: str, b: int, gbs: int) -> Config:
        """The layout as a Config, built without re-parsing (the hot path); equal to config_dict's."""
        par = ParallelismConfig(
            tensor_model_parallel_size=sh.t, pipeline_model_parallel_size=sh.p, expert_model_parallel_size=sh.ep,
            expert_tensor_parallel_size=sh.etp if self.moe else None, context_parallel_size=sh.cp,
            cp_comm_type=self.base.parallelism.cp_comm_type,
            virtual_pipeline_model_parallel_size=sh.v if sh.v > 1 else None,
            num_layers_in_first_pipeline_stage=sh.first, num_layers_in_last_pipeline_stage=sh.last)
        tr = replace(self.base.training, world_size=sh.n, micro_batch_size=b, global_batch_size=gbs,
                     sequence_parallel=sh.sp, use_distributed_optimizer=d, **self._rc_fields(rc))
        return Config(model=self.base.model, parallelism=par, training=tr, precision=self.base.precision)

    def config_dict(self, sh: _Shape, d: bool, rc: str, b: int, gbs: int) -> dict:
        """The layout as a complete four-section configuration (what the user would write)."""
        import copy
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

    def evaluate(self, sh: _Shape, d: bool, rc: str, b: int, gbs: int):
        """The estimate of one layout, or None when Megatron-Core would reject it."""
        cfg = self.config(sh, d, rc, b, gbs)
        if validate(cfg):
            self.invalid += 1
            return None
        self.evaluated += 1
        return stage_memory(resolve(cfg))


# --------------------------------------------------------------------------------------------------
# Search

#: Memory order of the recompute options: a layout needs at least as much memory as the one it
#: dominates here, at the same or a smaller micro-batch (selective and full are not ordered).
_HEAVIER = {"none": ("none", "selective", "full"), "selective": ("selective",), "full": ("full",)}


def _no_fit_implied(failed: list, d: bool, rc: str, b: int) -> bool:
    """True when a layout needing no more memory than (d, rc, b) already failed on the same shape."""
    for fd, frc, fb in failed:
        if fb <= b and frc in _HEAVIER[rc] and (fd == d or (fd and not d)):
            return True
    return False


def _run(engine: _Engine, worlds: tuple, top: int | None, distinct: bool):
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
            tr = engine.traffic(sh)
            lb = (base_lb + tr["tensor_parallel"] + tr["context_parallel"] + tr["expert_all_to_all"]
                  + tr["launch"] / max_b + tr["pipeline_p2p"])
            cands.append((lb, len(cands), sh, (tr, ok)))
    cands.sort(key=lambda c: (c[0], c[1]))
    exhaustive = top is None and not distinct
    best: dict = {}           # key -> entry (cost, peak, seq, shape, d, rc, b, gbs, estimate, terms)
    inf = float("inf")
    thr = inf                 # cost of the top-th best key: nothing costlier can enter
    fits = 0
    complete = True
    for lb, seq, sh, (tr, ok) in cands:
        if lb > thr:
            complete = False
            break
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
            if _no_fit_implied(failed, d, rc, b):
                continue
            est = engine.evaluate(sh, d, rc, b, gbs)
            if est is None:
                continue
            if est.peak.device_bytes > engine.usable:
                failed.append((d, rc, b))
                continue
            fits += 1
            entry = (cost, est.peak.device_bytes, (seq, len(failed), b), sh, d, rc, b, gbs, est, terms)
            k = key if distinct else (seq, rc, b, d)
            if k not in best or entry[:3] < best[k][:3]:
                best[k] = entry
                if top and len(best) >= top:
                    thr = heapq.nsmallest(top, (e[0] for e in best.values()))[-1]
    found = sorted(best.values(), key=lambda e: e[:3])
    if top:
        found = found[:top]
    return found, enumerated, (fits if complete else None)


_TERM_NAMES = {"recompute": "recompute", "tensor_parallel": "TP traffic", "context_parallel": "CP ring",
               "expert_all_to_all": "EP all-to-all", "kernel_launch": "per-micro-batch overhead",
               "pipeline_bubble": "pipeline bubble", "pipeline_p2p": "PP send/receive",
               "data_parallel": "DP gradient sync"}


def _term_text(name: str, x: float, sh: _Shape, rc: str, b: int, m: int, gpn: int) -> str:
    nodes = lambda size, stride: "inside a node" if _node_share(size, stride, gpn) >= 1 else "across nodes"
    detail = {"recompute": f"{rc}",
              "tensor_parallel": f"TP{sh.t} {nodes(sh.t, 1)}",
              "context_parallel": f"CP{sh.cp} {nodes(sh.cp, sh.t)}",
              "expert_all_to_all": f"EP{sh.ep} {nodes(sh.ep, sh.etp)}",
              "kernel_launch": f"mbs {b}",
              "pipeline_bubble": f"(p-1)/(m*v) with p={sh.p}, m={m}, v={sh.v}",
              "pipeline_p2p": f"PP{sh.p}" + (f" x VPP{sh.v}" if sh.v > 1 else ""),
              "data_parallel": f"DP{sh.dp}" + (f" x CP{sh.cp}" if sh.cp > 1 else "")}[name]
    return f"{_TERM_NAMES[name]} +{x:.1%} ({detail})"


def _label(sh: _Shape, rc: str, b: int, d: bool, moe: bool) -> str:
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


def _layouts(engine: _Engine, found: list, configs: list | None = None) -> tuple:
    out = []
    best_terms = found[0][9] if found else None
    for rank, (cost, peak, _, sh, d, rc, b, gbs, est, terms) in enumerate(found, 1):
        config = configs[rank - 1] if configs else engine.config_dict(sh, d, rc, b, gbs)
        given = gbs
        if gbs is None:                    # a configuration without a global batch: cost it at the default
            gbs = engine.auto_gbs(b, sh.dp)
        m = gbs // (b * sh.dp)
        shown = sorted(((x, k) for k, x in terms.items() if k != "compute" and x >= 0.0005), reverse=True)
        head = ", ".join(_term_text(k, x, sh, rc, b, m, engine.gpn) for x, k in shown[:4]) or "no overheads"
        free = engine.capacity - peak
        why = (f"step time x{cost:.3f} of bare compute: {head}; peak {peak / GIB:.1f} GiB of "
               f"{engine.capacity / GIB:.1f} GiB ({free / engine.capacity:.0%} free)")
        if given is None:
            why += f"; no global batch size: costed at {gbs} sequences ({m} micro-batches)"
        if rank > 1:
            diffs = sorted(((terms[k] - best_terms[k], k) for k in terms if k != "compute"), reverse=True)
            worse = [f"{_TERM_NAMES[k]} +{x:.1%}" for x, k in diffs[:2] if x >= 0.0005]
            if worse:
                why += "; behind #1 on " + ", ".join(worse)
        elif len(found) > 1:
            why += "; best of the layouts that fit"
        out.append(Layout(
            rank=rank, label=_label(sh, rc, b, d, engine.moe), config=config,
            num_gpus=sh.n, tp=sh.t, pp=sh.p, vpp=sh.v, cp=sh.cp, ep=sh.ep, etp=sh.etp, dp=sh.dp,
            edp=sh.edp if engine.moe else sh.dp * sh.cp, first_stage_layers=sh.first, last_stage_layers=sh.last,
            sequence_parallel=sh.sp, distributed_optimizer=d, recompute=rc, micro_batch_size=b,
            global_batch_size=given, num_microbatches=m if given else None, peak_stage=est.peak.stage,
            peak_allocated_bytes=est.peak.allocated_bytes, peak_device_bytes=peak, capacity_bytes=engine.capacity,
            headroom_bytes=free, headroom_fraction=free / engine.capacity,
            bubble=(sh.p - 1) / (m * sh.v) if sh.p > 1 else 0.0, cost=cost,
            costs={k: round(x, 6) for k, x in terms.items()}, why=why))
    return tuple(out)


def _worlds(num_gpus) -> tuple:
    if isinstance(num_gpus, bool) or num_gpus is None:
        raise _problem("num_gpus", num_gpus, "must be a positive integer or a list of them")
    try:
        return _positive_ints("num_gpus", num_gpus)
    except TypeError:
        raise _problem("num_gpus", num_gpus, "must be a positive integer or a list of them") from None


def _engine(model_or_config, num_gpus, gpu, seq_length, global_batch_size, micro_batch_sizes, headroom, max_tp,
            gpus_per_node, recompute, distributed_optimizer, fixed):
    worlds = _worlds(num_gpus)
    capacity, gpu_info = _capacity(gpu)
    data = _source_dict(model_or_config)
    recompute = (recompute,) if isinstance(recompute, str) or recompute is None else tuple(recompute)
    eng = _Engine(data, seq_length=seq_length, global_batch_size=global_batch_size,
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
    parallelism and layout fields are replaced, its other fields kept) or a bare model section (dict).
    ``num_gpus``: one world size or several. ``gpu``: a name known to :mod:`estimator.gpus`
    (``"H100-80GB"``) or the memory in bytes. A layout fits when its peak ``device_bytes`` is at most
    ``(1 - headroom)`` of the GPU memory. ``seq_length`` and ``global_batch_size`` default to the
    configuration's; without a global batch size each layout takes the multiple of micro-batch x DP
    nearest above :data:`DEFAULT_TOKENS_PER_STEP` tokens. ``max_tp``: the largest TP (and expert TP) size,
    by default one node. ``recompute``: which of none / selective / full to try. ``distributed_optimizer``:
    (True,) by default, since without it a layout needs more memory for the same traffic.
    ``top``: how many layouts to return (None: all that fit). ``distinct``: one layout per (GPUs, TP, PP,
    VPP, CP, EP, ETP), the best of its stage splits, recompute options and micro-batch sizes; False lists
    every variant that fits (with ``top=None``: every fitting layout, each computed, slower).
    ``fixed``: fields pinned to a value or a list of values, by schema name or alias (tp, pp, vpp, cp, ep,
    etp, mbs), e.g. ``tp=8`` or ``cp=[1, 2]``; other training/precision fields (``fp8=True``) are applied
    to every layout.
    """
    t0 = time.perf_counter()
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise _problem("top", top, "must be a positive integer or None (all layouts)")
    eng, worlds, gpu_info = _engine(model_or_config, num_gpus, gpu, seq_length, global_batch_size,
                                    micro_batch_sizes, headroom, max_tp, gpus_per_node, recompute,
                                    distributed_optimizer, fixed)
    if not isinstance(distinct, bool):
        raise _problem("distinct", distinct, "must be true or false")
    found, enumerated, fitting = _run(eng, worlds, top, distinct)
    layouts = _layouts(eng, found)
    notes = []
    if eng.gbs is None:
        seqs = max(1, DEFAULT_TOKENS_PER_STEP // eng.s)
        notes.append(f"global_batch_size not given: each layout takes about {DEFAULT_TOKENS_PER_STEP:,} tokens "
                     f"per step (the multiple of micro-batch x DP at or above {seqs} sequences).")
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


def _fixed_layout(config, gpu, headroom, gpus_per_node):
    """The engine and validated Config of a complete configuration whose layout stays as written."""
    capacity, _ = _capacity(gpu)
    data = _source_dict(config)
    cfg = load_config(data)
    eng = _Engine(data, seq_length=None, global_batch_size=None, micro_batch_sizes=(1,), capacity=capacity,
                  headroom=headroom, max_tp=cfg.parallelism.tensor_model_parallel_size, gpus_per_node=gpus_per_node,
                  recompute=_RECOMPUTE, distributed_optimizer=(True, False), fixed={}, world0=cfg.training.world_size)
    return eng, data, cfg


def _describe(eng: _Engine, data: dict, est) -> Layout:
    """The Layout of one complete configuration (as written) and its estimate."""
    cfg = load_config(data)
    r = resolve(cfg)
    par, tr = cfg.parallelism, cfg.training
    sh = _Shape(r.world, r.t, r.p, par.num_layers_in_first_pipeline_stage, par.num_layers_in_last_pipeline_stage,
                r.v, r.cp, r.ep, r.etp, r.sp)
    d = tr.use_distributed_optimizer
    eng.bm.setdefault(d, byte_model(r))
    rc, rc_cost = eng.recompute_of(tr, sh)
    gbs = tr.global_batch_size or eng.auto_gbs(r.b, r.dp)
    cost, terms = eng.cost(sh, eng.shape_costs(sh, d, eng.state_floor(sh, d)), rc_cost, r.b, gbs)
    entry = (cost, est.peak.device_bytes, 0, sh, d, rc, r.b, tr.global_batch_size, est, terms)
    return _layouts(eng, [entry], [data])[0]


def _largest(cands: list, fits) -> tuple[int | None, list]:
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


def max_micro_batch(config, *, gpu: str | int, headroom: float = 0.05, limit: int = 1024,
                    gpus_per_node: int = 8) -> Answer:
    """The largest micro-batch size with which this layout (a complete configuration) still fits.

    With a global batch size only the micro-batch sizes that divide global_batch_size / DP are tried."""
    import copy
    _positive_ints("limit", limit)
    eng, data, cfg = _fixed_layout(config, gpu, headroom, gpus_per_node)
    dp, gbs = resolve(cfg).dp, cfg.training.global_batch_size
    cands = [b for b in range(1, limit + 1) if gbs is None or gbs % (b * dp) == 0]
    results = {}

    def fits(b):
        d = copy.deepcopy(data)
        d.setdefault("training", {})["micro_batch_size"] = b
        est = stage_memory(resolve(load_config(d)))
        results[b] = (d, est)
        return est.peak.device_bytes <= eng.usable
    i, tried = _largest(cands, fits)
    if i is None:
        return Answer("max_micro_batch", None, None, tuple(tried), "even micro-batch size 1 does not fit "
                      f"{eng.capacity / GIB:.1f} GiB with {eng.headroom:.0%} headroom")
    b = cands[i]
    nxt = f"; {cands[i + 1]} does not" if i + 1 < len(cands) else f" (the largest candidate, limit {limit})"
    rule = f" (micro-batch sizes dividing global_batch_size / DP = {gbs // dp})" if gbs else ""
    return Answer("max_micro_batch", b, _describe(eng, *results[b]), tuple(tried),
                  f"micro-batch size {b} fits{rule}{nxt}")


def max_seq_length(config, *, gpu: str | int, headroom: float = 0.05, multiple: int | None = None,
                   limit: int | None = None, gpus_per_node: int = 8) -> Answer:
    """The longest sequence with which this layout (a complete configuration) still fits.

    Sequence lengths are multiples of ``multiple`` (128 by default) and of what the layout needs (2 x CP,
    and TP x CP with sequence parallelism), up to ``limit`` and the model's max_position_embeddings."""
    import copy
    eng, data, cfg = _fixed_layout(config, gpu, headroom, gpus_per_node)
    r = resolve(cfg)
    step = math.lcm(2 * r.cp if r.cp > 1 else 1, r.t * r.cp if r.sp else 1,
                    _positive_ints("multiple", multiple)[0] if multiple is not None else 128)
    cap = cfg.model.max_position_embeddings
    upper = min(x for x in (limit and _positive_ints("limit", limit)[0], cap, 2 ** 21) if x)
    cands = [k * step for k in range(1, upper // step + 1)]
    results = {}

    def fits(s):
        d = copy.deepcopy(data)
        d.setdefault("training", {})["seq_length"] = s
        est = stage_memory(resolve(load_config(d)))
        results[s] = (d, est)
        return est.peak.device_bytes <= eng.usable
    i, tried = _largest(cands, fits)
    if i is None:
        return Answer("max_seq_length", None, None, tuple(tried), f"even {step} tokens do not fit "
                      f"{eng.capacity / GIB:.1f} GiB with {eng.headroom:.0%} headroom")
    s = cands[i]
    if i + 1 < len(cands):
        why = f"{s} tokens fit; {cands[i + 1]} do not (multiples of {step})"
    else:
        by = "max_position_embeddings" if upper == cap else "the limit"
        why = f"{s} tokens fit, capped by {by} ({upper}); longer sequences were not tried"
    return Answer("max_seq_length", s, _describe(eng, *results[s]), tuple(tried), why)


def min_gpus(model_or_config, *, gpu: str | int, seq_length: int | None = None,
             candidates: Iterable[int] | None = None, **kwargs) -> Answer:
    """The fewest GPUs (powers of two up to 131,072 by default) on which some layout fits.

    ``kwargs`` go to :func:`search` (global_batch_size, headroom, max_tp, recompute, pinned fields...).
    More GPUs never need more memory per GPU for the same layout, so the counts are bisected; the answer
    is checked against the candidate below it."""
    cands = list(_positive_ints("candidates", candidates)) if candidates is not None else [2 ** k for k in range(18)]
    kwargs.setdefault("top", 1)
    found = {}

    def fits(n):
        res = search(model_or_config, num_gpus=n, gpu=gpu, seq_length=seq_length, **kwargs)
        found[n] = res
        return bool(res.layouts)
    # Bisection for the smallest count that fits (fits(n) is assumed to hold from some count on).
    tried, memo = [], {}

    def ok(i):
        if i not in memo:
            memo[i] = fits(cands[i])
            tried.append((cands[i], memo[i]))
        return memo[i]
    if not ok(len(cands) - 1):
        return Answer("min_gpus", None, None, tuple(tried), f"no layout fits even on {cands[-1]} GPUs")
    lo, hi = -1, len(cands) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    while hi > 0 and ok(hi - 1):                  # guard against a non-monotone step
        hi -= 1
    n = cands[hi]
    res = found[n]
    below = f"; on {cands[hi - 1]} nothing fits" if hi > 0 else ""
    return Answer("min_gpus", n, res.best, tuple(tried), f"{n} GPUs: best layout {res.best.label}{below}")
