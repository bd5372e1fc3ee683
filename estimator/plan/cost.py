"""Cost model of the layout search: the relative step time of a parallel layout, and why it ranks there.

:func:`estimator.plan.search.search` ranks the layouts that fit by this cost, and a layout's ``why`` names
its largest terms. Relative step time; 1.0 = the step's matmul FLOPs at :data:`GPU_FLOPS` per GPU::

    cost = (1 + recompute + tp + cp + ep + launch + weight_reads) * (1 + bubble) + dp + pp_p2p

- compute: 6 x active parameters (without the embedding lookup) + 3 L s a (d_qk + d_v) FLOPs per token
  (causal flash attention, forward and backward);
- recompute: full re-runs the forward pass (+1/3, :data:`FULL_RECOMPUTE`), in uniform groups of any size;
  ``block`` re-runs it for the share of the fullest stage's layers it recomputes; selective the modules of
  :data:`SELECTIVE_MODULE_COST`;
- bubble = (p - 1) / (m v) with m micro-batches: the 1F1B (v = 1) and interleaved schedules; it scales
  the work repeated per micro-batch;
- tp: per TP-sharded part of a layer and micro-batch 4 transfers of (t - 1)/t x tokens x h x 2 B (the
  sequence-parallel all-gather before it and reduce-scatter after it, forward and backward). The parts are
  the token mixer (attention, MLA, Mamba, gated delta net) and a dense MLP or a MoE layer's shared expert; a
  MoE layer's routed experts do no TP collective of their own: their tokens go through the token dispatcher,
  whose all-to-all and expert-TP gathers are the ep term (Megatron-LM @ d98e8a64 :
  megatron/core/transformer/moe/moe_layer.py and token_dispatcher.py, whose ``tp_group`` is the expert-TP
  group; shared_experts.py gathers and scatters over the TP group);
- cp: ring attention passes its K and V chunk to cp - 1 peers, three times with the backward pass;
- ep: per MoE layer and micro-batch 4 all-to-alls of tokens x top-k x h x 2 B x (ep - 1)/ep (the alltoall
  dispatcher sends one row per routed token and expert), and with etp > 1 the routed tokens gathered and
  scattered over the expert-TP group;
- launch: :data:`LAUNCH_SECONDS` per layer and micro-batch (small micro-batches cost more);
- weight_reads: a GEMM takes the longer of its FLOPs at :data:`GPU_FLOPS` and its bytes at
  :data:`HBM_BYTES_PER_S` (the roofline). Per micro-batch every weight a GPU holds is read in the forward pass and
  again for the input gradient, and its gradient is accumulated into the gradient buffer (read and written):
  2 x weight bytes + 2 x gradient bytes = 12 B per parameter in bf16 with fp32 gradients, against 6 FLOPs per
  token that passes through it. A weight seeing fewer than about 300 tokens per micro-batch is bound by memory
  bandwidth: routed experts, which see tokens x top-k x EP x ETP / experts of them (with TP and sequence
  parallelism a GPU's tokens are its 1/TP of the sequence); the term is the time beyond the FLOPs. This is what
  expert parallelism buys besides memory: with EP 1 every GPU streams all experts' weights for a few tokens each;
- dp: once per step, gradients reduce-scattered and weights all-gathered (or gradients all-reduced) for
  the parameters of the fullest stage, :data:`DP_OVERLAPPED_EXPOSED` of it when overlap_grad_reduce is on;
- pp_p2p: activations and their gradients crossing each stage boundary, once per virtual chunk.

Traffic runs at :data:`NVLINK_BYTES_PER_S` inside a node and :data:`NETWORK_BYTES_PER_S` between nodes.
Megatron-Core orders ranks tp-cp-dp-pp for dense layers and etp-ep-edp-pp for experts, so a group of
size n with stride k has min(n, gpus_per_node // k) members per node. A ring (TP, CP, DP, PP) leaving
the node runs at network speed; an all-to-all (EP) sends its off-node share at network speed. Ties go
to the layout with the lower peak memory. Without a global batch size a layout takes about
:data:`DEFAULT_TOKENS_PER_STEP` tokens per step.

The constants are round figures for an H100-class cluster with one 400 Gb/s NIC per GPU: they order
layouts, they do not predict throughput.

- :data:`GPU_FLOPS` = 400e12: effective bf16 matmul throughput per GPU (about 40 % of an H100's
  989 TFLOP/s dense peak);
- :data:`HBM_BYTES_PER_S` = 2.7e12: memory bandwidth per GPU, about 80 % of an H100 SXM's 3.35 TB/s (HBM3);
- :data:`NVLINK_BYTES_PER_S` = 300e9: collective bandwidth per GPU inside an NVLink node (NCCL bus
  bandwidth on 8 x H100 is 350-450 GB/s);
- :data:`NETWORK_BYTES_PER_S` = 40e9: bandwidth per GPU between nodes, one 400 Gb/s InfiniBand/RoCE NIC
  per GPU at about 80 % efficiency;
- :data:`LAUNCH_SECONDS` = 3e-4: fixed cost per layer and micro-batch, forward plus backward (about 60
  kernel launches and syncs);
- :data:`FULL_RECOMPUTE` = 1/3: full recompute runs every forward pass twice, 2 of the 6 FLOPs per
  parameter and token again;
- :data:`SELECTIVE_MODULE_COST`: selective recompute cost per module, as a fraction of the step's
  compute. Norms and activations are memory-bound elementwise kernels; the MLA up-projections and
  unfused attention are matmuls; the MLP or MoE block holds about 2/3 of a layer's FLOPs, so re-running
  its forward costs about 2/3 x 1/3;
- :data:`DP_OVERLAPPED_EXPOSED` = 0.2: share of the data-parallel traffic left on the critical path with
  overlap_grad_reduce;
- :data:`DEFAULT_TOKENS_PER_STEP` = 2^22: tokens per optimizer step when no global batch size is given
  (4 Mi, a common pretraining batch).

What this says about the seeds' workflow ("TP up to 8, then PP, then EP, then memory optimizations";
Megatron-Core wins where they differ): the distributed optimizer comes first, not last: it moves the
same bytes as the all-reduce it replaces and takes 18 -> 6 + 12/d bytes per parameter, so layouts
without it are only listed on request. TP is cheap inside a node and expensive across nodes; PP costs
the bubble (p - 1)/(m v), which interleaving and more micro-batches shrink; EP does not multiply the
world size (experts fold over the same ranks as TP x CP x DP), its all-to-all is cheap only inside a
node, and it gives each expert enough tokens to keep its GEMMs compute-bound; CP needs neither TP nor
sequence parallelism and pays for itself only on long sequences; full recompute costs a third more compute,
so a layout that fits without it ranks higher.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.derived import recomputed_modules
from ..memory.report import GIB
from ..model.params import count_parameters

__all__ = ["CostModel", "Shape", "GPU_FLOPS", "HBM_BYTES_PER_S", "NVLINK_BYTES_PER_S", "NETWORK_BYTES_PER_S",
           "LAUNCH_SECONDS", "FULL_RECOMPUTE", "SELECTIVE_MODULE_COST", "DP_OVERLAPPED_EXPOSED",
           "DEFAULT_TOKENS_PER_STEP"]


class Shape(NamedTuple):
    """One parallel shape (the search builds some 17,000 for DeepSeek-V3 on 1,024 GPUs: a NamedTuple costs
    a fifth of a frozen dataclass to construct, which counts under Pyodide). The fields that place the layers
    come together, so that :attr:`split` is a slice."""

    n: int
    t: int
    p: int
    first: int | None             # num_layers_in_first_pipeline_stage
    last: int | None              # num_layers_in_last_pipeline_stage
    acc_e: bool                   # account_for_embedding_in_pipeline_split
    acc_l: bool                   # account_for_loss_in_pipeline_split
    layout: str | None            # pipeline_model_parallel_layout (the configuration's own)
    v: int
    cp: int
    ep: int
    etp: int
    sp: bool

    @property
    def split(self) -> tuple:
        """Where the layers sit: (p, first, last, embedding slot, loss slot, layout string, v)."""
        return self[2:9]

    @property
    def dp(self) -> int:
        return self.n // (self.t * self.p * self.cp)

    @property
    def edp(self) -> int:
        return self.n // (self.etp * self.ep * self.p)


#: Effective bf16 matmul throughput per GPU (about 40 % of an H100's 989 TFLOP/s dense peak).
GPU_FLOPS = 400e12
#: Memory bandwidth per GPU: about 80 % of an H100 SXM's 3.35 TB/s (HBM3).
HBM_BYTES_PER_S = 2.7e12
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


def _node_share(size: int, stride: int, gpus_per_node: int) -> float:
    """Fraction of a group's members on the same node as a given member (ranks placed contiguously)."""
    return min(size, max(1, gpus_per_node // stride)) / size


#: The keys of :meth:`CostModel.traffic`.
_TRAFFIC = ("compute", "tensor_parallel", "context_parallel", "expert_all_to_all", "pipeline_p2p", "launch")
#: Transfers per TP-sharded part of a layer and micro-batch: all-gather and reduce-scatter, forward and backward.
_TP_TRANSFERS_PER_PART = 4


class CostModel:
    """The cost terms of one model's layouts, mixed into the search engine
    (:class:`estimator.plan.space.SearchEngine`), which supplies ``r0`` (the resolved base configuration),
    ``base``, ``s`` (sequence length), ``gpn`` (GPUs per node), ``bm`` (byte model per distributed-optimizer
    choice), ``selective_modules``, ``_stage_kinds`` and ``_plans``."""

    def _setup_cost(self):
        """The model's cost constants: recompute costs, FLOPs per token, K/V width, exposed DP share, TP-sharded
        parts per layer kind."""
        r, cfg = self.r0, self.base
        self.rc_cost_selective = sum(SELECTIVE_MODULE_COST[m] for m in self.selective_modules)
        pc = count_parameters(r)
        flops_params = pc.active - (0 if r.tied else pc.embedding)
        att_width = r.a * ((r.qk_dim + r.rope_dim + r.v_dim) if r.mla else r.dh + (r.dv or r.dh))
        self.flops_per_token = 6 * flops_params + 3 * r.L * self.s * att_width
        self.kv_elems = r.a * (r.qk_dim + r.rope_dim + r.v_dim) if r.mla else r.g * (r.dh + (r.dv or r.dh))
        # with fewer key/value heads than TP ranks each rank still sends one head (Resolved.kv)
        self.kv_head = 0 if r.mla else r.dh + (r.dv or r.dh)
        self.dp_exposed = DP_OVERLAPPED_EXPOSED if cfg.training.overlap_grad_reduce else 1.0
        # TP-sharded parts with their own all-gather/reduce-scatter: the mixer, a dense MLP, a shared expert.
        self.tp_parts = tuple(bool(k.mixer) + (k.mlp == "dense" or (k.moe and bool(r.fs))) for k in r.kinds)
        self._bw_cache = {}
        self._max_cache = {}
        self._block_cache = {}

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

    def _stage_max(self, sh: Shape) -> tuple[int, int, int]:
        """(layers, MoE layers, TP-sharded parts) of the fullest stage: the slowest stage sets the pipeline's pace."""
        key = sh.split
        if key not in self._max_cache:
            kinds = self._stage_kinds(sh)
            self._max_cache[key] = (max(k[0] for k in kinds), max(k[1] for k in kinds),
                                    max(sum(n * w for n, w in zip(k[2], self.tp_parts)) for k in kinds))
        return self._max_cache[key]

    def block_share(self, sh: Shape, n: int) -> float:
        """Share of the fullest stage's layers that ``block`` recompute of n layers per virtual chunk re-runs."""
        key = (sh.split, n)
        if key not in self._block_cache:
            best = (0, 0.0)
            for plan in self._plans(sh):
                layers = sum(len(rng) for rng in plan.layers)
                if layers > best[0]:
                    best = (layers, sum(min(n, len(rng)) for rng in plan.layers) / layers)
            self._block_cache[key] = best[1]
        return self._block_cache[key]

    def traffic(self, sh: Shape) -> dict:
        """Cost terms that depend on neither the micro-batch size nor the optimizer: seconds of traffic per
        token of the step over seconds of compute per token (both scale with the tokens per step)."""
        return dict(zip(_TRAFFIC, self.traffic_terms(sh)))

    def traffic_bound(self, sh: Shape, max_b: int) -> float:
        """The part of a lower bound of the shape's cost that comes from its traffic (the micro-batch size
        at most ``max_b``): the same terms as :meth:`traffic`, summed (the search bounds every shape and looks at
        few, so this is the hot path)."""
        _, tp, cpc, epc, pp, launch = self.traffic_terms(sh)
        return tp + cpc + epc + launch / max_b + pp

    def bound_parts(self, sh: Shape, max_b: int) -> tuple:
        """The terms of :meth:`traffic_bound` that do not depend on EP or ETP, and what the expert all-to-all term
        needs: (TP + CP traffic, launch / ``max_b``, pipeline p2p, MoE layers, tokens per GPU per second of compute)
        (one per group of shapes that differ only in EP and ETP: :meth:`SearchEngine.shape_groups`)."""
        compute, tp, cpc, _, pp, launch = self.traffic_terms(sh)
        moe_layers = self._stage_max(sh)[1]
        tok = 1 / (sh.n // (sh.t * sh.p * sh.cp) * sh.cp) / compute
        return tp + cpc, launch / max_b, pp, moe_layers, tok

    def bound_of(self, sh: Shape, parts: tuple) -> float:
        """:meth:`traffic_bound` of one shape from its group's :meth:`bound_parts` (the same sum, term by term)."""
        tp_cp, launch, pp, moe_layers, tok = parts
        ep, etp = sh.ep, sh.etp
        epc = 0.0
        if moe_layers and (ep > 1 or etp > 1):
            h2 = self.r0.h * 2
            routed = (tok / sh.t if sh.sp else tok) * self.r0.k * h2 * moe_layers
            if ep > 1:
                epc = 4 * routed * (ep - 1) / ep * self._bw(ep, etp, False)
            if etp > 1:
                epc += 4 * (etp - 1) * routed * self._bw(etp, 1, True)
        return tp_cp + epc + launch + pp

    def traffic_terms(self, sh: Shape) -> tuple:
        """The values of :meth:`traffic`, in the order of :data:`_TRAFFIC`."""
        t, p, cp, ep, etp, n = sh.t, sh.p, sh.cp, sh.ep, sh.etp, sh.n
        dp = n // (t * p * cp)
        layers, moe_layers, parts = self._stage_max(sh)
        bw = self._bw
        compute = self.flops_per_token / (n * GPU_FLOPS)
        tok = 1 / (dp * cp) / compute                # share of the step's tokens one GPU's stage processes, per
        h2 = self.r0.h * 2                           # second of compute
        tp = (_TP_TRANSFERS_PER_PART * (t - 1) / t * h2 * parts * tok * bw(t, 1, True)) if t > 1 else 0.0
        cpc = (3 * (cp - 1) * max(self.kv_elems / t, self.kv_head) * 2 * layers * tok * bw(cp, t, True)) if cp > 1 else 0.0
        epc = 0.0
        if moe_layers and (ep > 1 or etp > 1):
            routed = (tok / t if sh.sp else tok) * self.r0.k * h2 * moe_layers
            if ep > 1:
                epc = 4 * routed * (ep - 1) / ep * bw(ep, etp, False)
            if etp > 1:
                epc += 4 * (etp - 1) * routed * bw(etp, 1, True)
        pp = 2 * sh.v * tok * h2 / (t if sh.sp else 1) * bw(p, t * cp * dp, True) if p > 1 else 0.0
        launch = layers * LAUNCH_SECONDS / (dp * self.s) / compute     # per token of the step, times 1/b later
        return compute, tp, cpc, epc, pp, launch

    def tokens_per_expert(self, sh: Shape, b: int) -> float:
        """Tokens one routed expert on a GPU sees per micro-batch: the GPU's tokens x top-k, pooled over the EP and
        expert-TP groups, over the experts."""
        r = self.r0
        return b * self.s / (sh.cp * (sh.t if sh.sp else 1)) * r.k * sh.ep * sh.etp / r.E

    def weight_seconds(self, sh: Shape, d: bool, floor: tuple, b: int) -> float:
        """Seconds per micro-batch the GEMMs of the fullest stage spend reading weights beyond their FLOPs (the
        roofline: 2 x weight + 2 x gradient bytes per parameter against 6 FLOPs per token through it)."""
        bm = self.bm[d]
        per_param = (2 * bm.weight + 2 * bm.grad) / HBM_BYTES_PER_S
        _, dense_p, exp_p = floor
        sec = dense_p * max(0.0, per_param - 6 * b * self.s / sh.cp / GPU_FLOPS)
        if exp_p:
            sec += exp_p * max(0.0, per_param - 6 * self.tokens_per_expert(sh, b) / GPU_FLOPS)
        return sec

    def dp_seconds(self, sh: Shape, d: bool, floor: tuple) -> float:
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

    def shape_costs(self, sh: Shape, d: bool, floor: tuple) -> dict:
        """The cost terms of a shape with one optimizer choice (``floor``: :meth:`state_floor`'s answer)."""
        return dict(self.traffic(sh), data_parallel_s=self.dp_seconds(sh, d, floor), d=d, floor=floor)

    def auto_gbs(self, b: int, dp: int, p: int = 1, v: int = 1) -> int:
        """The global batch of a layout when none is given: DEFAULT_TOKENS_PER_STEP, rounded up to whole
        micro-batches (with the interleaved schedule, v > 1, to a multiple of p of them)."""
        target = max(1, DEFAULT_TOKENS_PER_STEP // self.s)
        m = -(-target // (b * dp))
        if v > 1 and p > 1:
            m = -(-m // p) * p
        return m * b * dp

    def recompute_of(self, tr, sh: Shape) -> tuple[str, float]:
        """Name and cost of any configuration's recompute settings, in the search's names ("none", "selective",
        "full", "full-uniform<n>", "full-block<n>"; selective recompute of other modules than the search's:
        "selective[<modules>]")."""
        g = tr.recompute_granularity
        if g == "selective":
            mods = recomputed_modules(tr)
            name = "selective" if tuple(mods) == tuple(self.selective_modules) else f"selective[{','.join(mods)}]"
            return name, sum(SELECTIVE_MODULE_COST.get(m, 0.0) for m in mods)
        if g == "full":
            # Past the largest chunk's C layers, block recomputes every layer one by one (uniform groups of 1) and
            # uniform groups are whole chunks (groups of C): the same computation, named as the search names it.
            n = tr.recompute_num_layers if tr.recompute_num_layers is not None else 1
            c = max((len(rng) for plan in self._plans(sh) for rng in plan.layers), default=1) or 1
            if tr.recompute_method == "block" and n < c:
                return f"full-block{n}", FULL_RECOMPUTE * self.block_share(sh, n)
            n = 1 if tr.recompute_method == "block" else min(n, c)
            return ("full" if n == 1 else f"full-uniform{n}"), FULL_RECOMPUTE
        return "none", 0.0

    def cost(self, sh: Shape, sc: dict, rc_cost: float, b: int, gbs: int) -> tuple[float, dict]:
        """Relative step time of one layout and its terms (shares of the bare compute time)."""
        m = gbs // (b * sh.dp)
        bubble = (sh.p - 1) / (m * sh.v) if sh.p > 1 else 0.0
        launch = sc["launch"] / b
        step_compute = sc["compute"] * gbs * self.s
        weights = self.weight_seconds(sh, sc["d"], sc["floor"], b) * m / step_compute
        per_mb = 1 + rc_cost + sc["tensor_parallel"] + sc["context_parallel"] + \
            sc["expert_all_to_all"] + launch + weights
        dp = sc["data_parallel_s"] / step_compute
        total = per_mb * (1 + bubble) + dp + sc["pipeline_p2p"]
        terms = {"compute": 1.0, "recompute": rc_cost, "tensor_parallel": sc["tensor_parallel"],
                 "context_parallel": sc["context_parallel"], "expert_all_to_all": sc["expert_all_to_all"],
                 "kernel_launch": launch, "weight_reads": weights, "pipeline_bubble": per_mb * bubble,
                 "pipeline_p2p": sc["pipeline_p2p"], "data_parallel": dp}
        return total, terms


# --------------------------------------------------------------------------------------------------
# Why a layout ranks where it does

_TERM_NAMES = {"recompute": "recompute", "tensor_parallel": "TP traffic", "context_parallel": "CP ring",
               "expert_all_to_all": "EP all-to-all", "kernel_launch": "launch overhead",
               "weight_reads": "memory-bound GEMMs",
               "pipeline_bubble": "pipeline bubble", "pipeline_p2p": "PP send/receive",
               "data_parallel": "DP gradient sync"}


def _term_text(name: str, x: float, sh: Shape, rc: str, b: int, m: int, gpn: int) -> str:
    nodes = lambda size, stride: "in a node" if _node_share(size, stride, gpn) >= 1 else "across nodes"
    detail = {"recompute": f"{rc}",
              "tensor_parallel": f"TP{sh.t} {nodes(sh.t, 1)}",
              "context_parallel": f"CP{sh.cp} {nodes(sh.cp, sh.t)}",
              "expert_all_to_all": f"EP{sh.ep} {nodes(sh.ep, sh.etp)}",
              "kernel_launch": f"micro-batch {b}",
              "weight_reads": "small GEMMs" if sh.ep * sh.etp == 1 else f"EP{sh.ep} x ETP{sh.etp}",
              "pipeline_bubble": f"PP{sh.p}" + (f" x VPP{sh.v}" if sh.v > 1 else "") + f", {m} micro-batches",
              "pipeline_p2p": f"PP{sh.p}" + (f" x VPP{sh.v}" if sh.v > 1 else ""),
              "data_parallel": f"DP{sh.dp}" + (f" x CP{sh.cp}" if sh.cp > 1 else "")}[name]
    return f"{_TERM_NAMES[name]} +{x:.0%} ({detail})"


def why_ranked(*, rank: int, count: int, cost: float, terms: dict, best_terms: dict | None, sh: Shape, rc: str,
         b: int, m: int, gbs: int, given: int | None, peak: int, capacity: int, gpn: int) -> str:
    """Why layout ``rank`` of ``count`` ranks there, in a few plain words: its step time as a multiple of the
    compute alone (the FLOPs at the GPU's speed) and the two largest costs added to it, its peak memory, and
    (below #1) the cost on which it falls behind the best layout (``best_terms``). The full breakdown is in
    ``costs`` (the JSON) and on the parallelism guide."""
    shown = sorted(((x, k) for k, x in terms.items() if k != "compute" and x >= 0.005), reverse=True)
    head = ", ".join(_term_text(k, x, sh, rc, b, m, gpn) for x, k in shown[:2]) or "nothing added"
    free = capacity - peak
    why = (f"step {cost:.2f}x the compute alone: {head}. "
           f"Peak {peak / GIB:.1f} of {capacity / GIB:.1f} GiB ({free / capacity:.0%} free)")
    if given is None:
        why += f"; costed at {gbs} sequences per step ({m} micro-batches), no global batch size given"
    if rank > 1:
        diffs = sorted(((terms[k] - best_terms[k], k) for k in terms if k != "compute"), reverse=True)
        if diffs and diffs[0][0] >= 0.005:
            why += f"; slower than #1 by its {_TERM_NAMES[diffs[0][1]]} (+{diffs[0][0]:.0%})"
    elif count > 1:
        why += "; the fastest that fits"
    return why + "."
