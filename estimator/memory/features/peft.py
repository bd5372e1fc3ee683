"""LoRA and DoRA as Megatron-Bridge configures them: adapter parameters, frozen base weights, activations.

Source: Megatron-Bridge @ 067f987d ``src/megatron/bridge/peft/`` (``lora.py`` ``LoRA.transform``, ``dora.py``,
``dora_layers.py``, ``lora_layers.py`` ``LoRALinear``, ``module_matcher.py``, ``utils.py``:
``ParallelLinearAdapter``, ``GroupedExpertLinearAdapter``, ``get_adapter_attributes_from_linear``,
``is_expert_linear``, ``is_grouped_expert_linear``) and Transformer Engine @ d0067d0d
``transformer_engine/pytorch/module/linear.py`` and ``grouped_linear.py`` (a linear or grouped linear layer saves
its input only when its weight needs a gradient: ``backward_needs_input = is_grad_enabled and
weight.requires_grad``; ``inputmats = [None] * num_gemms`` otherwise).

Which linears. A target name matches every module of that name (``ModuleMatcher.match``: ``name == pattern``), so
``linear_fc1`` / ``linear_fc2`` match the dense MLP's, the shared experts' and the routed experts' linears
(``mlp.experts.linear_fc1``, TE grouped GEMM; ``mlp.experts.local_experts.<i>.linear_fc1`` without grouped GEMM).
``is_expert_linear`` makes the routed experts' linears expert adapters (expert tensor-parallel group, expert
process groups); the shared experts (``.shared_experts.`` in the name) are adapted like a dense MLP. The router is
not a target of these names.

Parameters. Each adapted linear layer (in -> out) gains ``linear_in`` (r x in) and ``linear_out`` (out x r);
both split over the tensor-parallel ranks (a column-parallel base: linear_in column-parallel over r, linear_out
over out; a row-parallel base: linear_in row-parallel over in, linear_out over out), so one GPU holds

    r * (in + out) / t        qkv: in h, out (a + 2g) dh;  proj: a dh -> h;  fc1: h -> f (2f gated);  fc2: f -> h

and DoRA adds a magnitude vector of out/t (column-parallel bases) or out (row-parallel bases). Routed experts
(fc1: h -> fm up, fc2: fm -> h) split over the expert tensor-parallel ranks etp instead. By default
(``LoRA.share_expert_adapters = True``) a grouped-GEMM expert linear gets ONE ``ParallelLinearAdapter`` shared by
the rank's local experts, replicated over the expert-parallel ranks (broadcast from EP rank 0, its gradient
all-reduced over the EP group: ``_synchronize_shared_expert_parameters``, ``_allreduce_shared_expert_grad``):
r (in + out) / etp per GPU. With ``share_expert_adapters = False`` (``GroupedExpertLinearAdapter``: weights
[E/ep, r/etp, in] and [E/ep, out/etp, r]), or without grouped GEMM (``SequentialMLP``: one adapter per
``local_experts.<i>`` linear), each local expert has its own: E/ep x r (in + out) / etp. Expert adapters are
expert-parallel parameters (``allreduce = False`` in Megatron-Core's ``ColumnParallelLinear`` /
``RowParallelLinear`` with ``is_expert`` and EP > 1 or ETP != TP), so the distributed optimizer shards their
states over the expert data-parallel group as it does the experts' weights.

Only the adapters are trained: the frozen base weights have no gradient buffer and no optimizer state
(Megatron-Core's DDP and optimizer take only parameters with ``requires_grad``), and no Transformer Engine dummy
weight-gradient tensor, no output-layer or embedding weight gradient.

Activations of one layer, relative to full training (B bytes per activation element, T tokens, Tn = T/t under
sequence parallelism, R the routed rows of the local experts):

- a frozen QKV / fc1 linear no longer saves its input (the norm output, lin_in*Tn*h bytes); an adapter on it
  saves that input itself, gathered over the sequence-parallel ranks (``return_layernorm_output_gathered``):
  B*T*h; with ``sequence_parallel_input_regather`` (below) only the local B*Tn*h;
- a frozen fc2 no longer saves the activation output (lin_in*T*f/t); an adapter on it saves it in B bytes;
- the attention output stays saved (flash attention keeps it); its FP8 copy goes with a frozen projection;
- each adapter keeps its bottleneck (linear_out's input) of B*T*r;
- MoE: the pre-MLP norm output stays saved (the router's ``RouterGatingLinearFunction`` saves its input whatever
  needs a gradient). A frozen grouped fc1 no longer saves the permuted tokens (lin_in*R*d), a frozen fc2 not the
  activation output (lin_in*R*fm/etp; the unweighted activation output of non-SwiGLU experts stays, kept for the
  routing probabilities); an expert adapter on fc1 saves the permuted tokens in B bytes (B*R*h), on fc2 the
  activation output (B*R*fm/etp), each its bottleneck B*R*r (linear_in's output gathered to the full rank). The
  shared experts as a dense MLP of width fs, except that their fc1 is a plain column-parallel linear: its adapter
  gathers the norm output itself under sequence parallelism (B*T*h, a new tensor) or, without it, saves the norm
  output the router keeps already (nothing new);
- DoRA keeps the pre-magnitude output (base + adapter) for the magnitude's gradient: B*T*out/t for column-,
  B*Tn*out for row-parallel bases, and computes ``||W + s*B*A||`` each forward (a transient copy of the
  largest adapted weight). Bridge's DoRA has no expert path (``DoRA.transform`` passes no ``is_expert``), so DoRA
  on the MLP of an MoE model is refused (estimator/config/rules/features.py).

``sequence_parallel_input_regather`` (``LoRA``, default False; ``ParallelLinearAdapter.forward`` and
``_sequence_parallel_input_regather_eligibility``): the LoRA-A projection of a column-parallel, non-expert adapter
on ``linear_qkv`` or ``linear_fc1`` runs Megatron-Core's sequence-parallel ``ColumnParallelLinear`` path: it keeps
its local input (B*Tn*h) and all-gathers it into Megatron-Core's "mpu" global memory buffer (B*T*h, forward and
again in backward: megatron/core/tensor_parallel/layers.py ``LinearWithGradAccumulationAndAsyncCommunication``)
instead of keeping the gathered copy; ``TELayerNormColumnParallelLinear`` then returns its local norm output
(``return_layernorm_output_gathered = not sequence_parallel_input_regather``). It applies only with sequence
parallelism and TP > 1, outside full recompute, selective ``mlp`` recompute (fc1), CUDA graphs and CPU activation
offloading; expert and row-parallel adapters keep their path.
"""

from __future__ import annotations

from ...model.layers import view
from ..activations import LayerActivations

__all__ = ["TARGETS", "adapter_params", "adapter_total", "peft_activations", "dora_transient", "regathered"]

#: Megatron-Bridge's default target modules (LoRA.target_modules).
TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
ATTENTION = ("linear_qkv", "linear_proj")
MLP = ("linear_fc1", "linear_fc2")


def _shapes(r) -> dict:
    """(in, out, column-parallel) of each adaptable linear layer of attention and a dense MLP, unsplit (with
    multi-latent attention linear_proj takes the heads' values, a x v_head_dim; MLA has no linear_qkv)."""
    up = 2 if r.gated else 1
    return {"linear_qkv": (r.h, (r.a + r.g) * r.dh + r.g * (r.dv or r.dh), True),
            "linear_proj": (r.a * (r.v_dim if r.mla else r.dv or r.dh), r.h, False),
            "linear_fc1": (r.h, r.f * up, True), "linear_fc2": (r.f, r.h, False)}


def _moe_shapes(r, width: int) -> dict:
    """(in, out, column-parallel) of an MoE MLP's fc1 / fc2 of ``width`` (a routed expert's fm, the shared
    experts' fs), unsplit."""
    up = 2 if r.gated else 1
    return {"linear_fc1": (r.h, width * up, True), "linear_fc2": (width, r.h, False)}


def targets(r) -> tuple:
    """The adapted linear names; none without PEFT (a frozen language model without adapters:
    estimator/memory/features/frozen_language.py)."""
    if r.cfg.training.peft is None:
        return ()
    tm = r.cfg.training.peft_target_modules
    return tuple(tm) if tm is not None else TARGETS


def per_expert(r) -> bool:
    """Whether each local expert has an adapter of its own (``share_expert_adapters`` off, or no grouped GEMM:
    ``SequentialMLP``'s experts are matched one by one), rather than one shared by the rank's local experts."""
    return not (r.cfg.training.peft_share_expert_adapters and r.cfg.model.moe_grouped_gemm)


def _one(rank: int, shape: tuple, split: int, dora: bool) -> int:
    i, o, column = shape
    n = rank * (i + o) // split
    if dora:
        n += o // split if column else o
    return n


def adapter_params(r, kind) -> tuple[int, int]:
    """(dense, expert) trainable adapter parameters of one decoder layer of ``kind`` on one GPU."""
    r = view(r, kind)            # the layer's own head shapes and MLP width
    rank = r.cfg.training.peft_dim
    dora = r.cfg.training.peft == "dora"
    tg = targets(r)
    dense = expert = 0
    if kind.mixer and kind.mixer != "linear":
        shapes = _shapes(r)
        dense += sum(_one(rank, shapes[n], r.t, dora) for n in ATTENTION if n in tg)
    if kind.mlp == "dense":
        shapes = _shapes(r)
        dense += sum(_one(rank, shapes[n], r.t, dora) for n in MLP if n in tg)
    elif kind.mlp == "moe":
        if r.fs:
            shapes = _moe_shapes(r, r.fs)
            dense += sum(_one(rank, shapes[n], r.t, dora) for n in MLP if n in tg)
        shapes = _moe_shapes(r, r.fm)
        copies = r.E // r.ep if per_expert(r) else 1
        expert += copies * sum(_one(rank, shapes[n], r.etp, False) for n in MLP if n in tg)
    return dense, expert


def adapter_total(r) -> int:
    """Trainable adapter parameters of the whole model (every decoder layer, unsplit; a shared expert adapter,
    replicated over the expert-parallel ranks, counts once per layer): r x (in + out) per adapted linear, and
    DoRA's magnitude vector of ``out``. Llama 3 70B, LoRA rank 16 on all four: 80 x 16 x ((8192 + 10240)
    + (8192 + 8192) + (8192 + 57344) + (28672 + 8192)) = 175,636,480."""
    rank, dora = r.cfg.training.peft_dim, r.cfg.training.peft == "dora"
    tg = targets(r)

    def layer(shapes, names, copies=1):
        return copies * sum(rank * (shapes[n][0] + shapes[n][1]) + (shapes[n][1] if dora else 0)
                            for n in names if n in tg)

    total = 0
    base = r
    for kind, count in zip(base.kinds, _kind_counts(base)):
        r = view(base, kind)
        n = layer(_shapes(r), ATTENTION) if kind.mixer and kind.mixer != "linear" else 0
        if kind.mlp == "dense":
            n += layer(_shapes(r), MLP)
        elif kind.mlp == "moe":
            if r.fs:
                n += layer(_moe_shapes(r, r.fs), MLP)
            n += layer(_moe_shapes(r, r.fm), MLP, r.E if per_expert(r) else 1)
        total += count * n
    return total


def _kind_counts(r) -> list:
    return [list(r.layer_kinds).count(k) for k in range(len(r.kinds))]


def regathered(r) -> tuple:
    """The adapted surfaces whose LoRA-A keeps only its sequence-local input (``sequence_parallel_input_regather``,
    module docstring): a subset of (linear_qkv, linear_fc1); () when the option is off or falls back."""
    tr = r.cfg.training
    if (tr.peft != "lora" or not tr.peft_sequence_parallel_input_regather or not r.sp or r.t <= 1
            or tr.recompute_granularity == "full" or tr.cuda_graph_impl != "none" or tr.cpu_offloading):
        return ()
    out = [n for n in ("linear_qkv", "linear_fc1") if n in targets(r)]
    if not (r.fs or any(k.mlp == "dense" for k in r.kinds)):
        out = [n for n in out if n != "linear_fc1"]         # no dense linear_fc1: only experts', which keep theirs
    if tr.recompute_granularity == "selective" and "mlp" in (tr.recompute_modules or ()):
        out = [n for n in out if n != "linear_fc1"]
    return tuple(out)


def peft_activations(r, a: LayerActivations, kind) -> LayerActivations:
    """One layer's activations with frozen base weights and adapters on the target modules."""
    p = a.parts
    r = view(r, kind)
    T = r.s * r.b // r.cp
    Tn = T // r.t if r.sp else T
    B = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    rank, t = r.cfg.training.peft_dim, r.t
    tg = set(targets(r))
    dora = r.cfg.training.peft == "dora"
    gathered = set(regathered(r))
    att = mlp = 0
    if kind.mixer and kind.mixer != "linear" and "norm_out" in p:     # (no named parts: Mamba, gated delta net)
        shapes = _shapes(r)
        # Inputs of the frozen linears are no longer saved; adapters save theirs.
        att -= p["norm_out"] + p.get("proj_in_fp8", 0)
        if "linear_qkv" in tg and p["norm_out"]:
            att += B * (Tn if "linear_qkv" in gathered else T) * r.h
        for name in ATTENTION:
            if name in tg:
                att += _bottleneck(B, T, Tn, rank, t, shapes[name], dora)
    if kind.mlp == "dense":
        shapes = _shapes(r)
        mlp -= p["mlp_norm_out"] + p["act_out"]
        if "linear_fc1" in tg and p["mlp_norm_out"]:
            mlp += B * (Tn if "linear_fc1" in gathered else T) * r.h
        if "linear_fc2" in tg and p["act_out"]:
            mlp += B * T * (r.f // t)
        for name in MLP:
            if name in tg:
                mlp += _bottleneck(B, T, Tn, rank, t, shapes[name], dora)
    elif kind.mlp == "moe" and (p["expert_in"] or p["expert_fc1_out"] or p["expert_act_out"]):
        mlp += _moe_changes(r, p, B, T, Tn, tg, gathered)
    return a._replace(attention=a.attention + att, mlp=a.mlp + mlp, full=a.full + att + mlp)


def _bottleneck(B: int, T: int, Tn: int, rank: int, t: int, shape: tuple, dora: bool) -> int:
    """What one dense adapter keeps besides its input: its bottleneck, DoRA's pre-magnitude output."""
    extra = B * T * rank
    if dora:
        _, o, column = shape
        extra += B * T * (o // t) if column else B * Tn * o
    return extra


def _moe_changes(r, p: dict, B: int, T: int, Tn: int, tg: set, gathered: set) -> int:
    """Bytes an MoE MLP keeps more (negative: less) with frozen experts and adapters (module docstring). Nothing
    changes when selective recompute of ``moe`` drops the whole block (then its parts are zero)."""
    from ...model.fp8_scales import lin_saved
    from ...model.layers.moe import pools, routed_rows
    from ..activations import context
    rank = r.cfg.training.peft_dim
    c = context(r)
    out = 0
    # Routed experts: the frozen grouped fc1 drops the permuted tokens, fc2 its input (not the unweighted
    # activation output of non-SwiGLU experts, which the probabilities' multiplication keeps). ERNIE-VL's two pools
    # each on their share of the tokens (estimator/model/layers/moe.py ``pools``).
    if p["expert_in"]:
        out -= p["expert_in"]
    if p["expert_act_out"]:
        out -= p["expert_act_out"]
    for rp, Tp, Tnp in pools(r, T, Tn):
        rows = routed_rows(rp, Tp, Tnp)
        fm = rp.fm // rp.etp
        if p["expert_in"] and "linear_fc1" in tg:
            out += B * rows * r.h
        if p["expert_act_out"]:
            out += 0 if (r.gated and r.cfg.model.activation_func == "swiglu") else B * rows * fm
            if "linear_fc2" in tg:
                out += B * rows * fm
        out += sum(B * rows * rank for n in MLP if n in tg)
    # Shared experts, tensor-parallel like a dense MLP; their fc1 input (the norm output) the router keeps.
    if r.fs and p["shared"]:
        fs = r.fs // r.t
        out -= lin_saved(c, T, fs)
        if "linear_fc2" in tg:
            out += B * T * fs
        if "linear_fc1" in tg and r.sp and r.t > 1 and "linear_fc1" not in gathered:
            out += B * T * r.h
        out += sum(B * T * rank for n in MLP if n in tg)
    return out


def dora_transient(r, wbytes: int) -> int:
    """DoRA's weight-norm computation: W + s*B@A of the largest adapted weight on one GPU, in the weights' dtype
    (attention and dense MLP weights only: DoRA on experts is refused)."""
    if r.cfg.training.peft != "dora":
        return 0
    names = [n for n in targets(r) if n in ATTENTION or not r.E]
    return max((wbytes * shapes[n][0] * shapes[n][1] // r.t for shapes in (_shapes(view(r, k)) for k in r.kinds)
                for n in names), default=0)
