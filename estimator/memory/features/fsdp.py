"""Model states under Megatron-FSDP and PyTorch FSDP2: what each sharding strategy shards, the gathered
unit buffers alive at the peak, and Megatron-FSDP's optimizer step.

Megatron-FSDP (v1; Megatron-LM @ d98e8a64 ``megatron/core/distributed/fsdp/src/megatron_fsdp/``,
``param_and_grad_buffer.py`` ``_init_each_parameter_group_buffers``). Every transformer layer is an FSDP unit
(``mcore_fsdp_adapter.py``: ``fsdp_unit_modules`` defaults to TransformerLayer, MoETransformerLayer and MambaLayer
instances anywhere in the wrapped chunk); the embedding, output layer and final norm belong to the root module. A
qwen3_vl vision tower's layers are Megatron-Core TransformerLayers (vit_layer_specs.py), so they are units as well,
first in forward order on the first stage (:func:`tower_units`), while its patch embedding, positions and mergers
join the root module (Megatron-Bridge @ 067f987d : the VLM is wrapped whole by Megatron-LM's
``megatron/training/models/dist_utils.py`` ``_ddp_wrap``, which passes no ``fsdp_unit_modules``). The tower's own
backward comes after the decoder's, with only its own tensors left: the gradient buckets are walked over the
decoder's layers. With N the
data x context-parallel size divided by ``num_distributed_optimizer_instances`` M (the HSDP inner size; routed
experts: expert-data-parallel size / M), per parameter:

    strategy             weights      gradients (dtype g)   master weights + optimizer moments
    no_shard             w            g                     m + s
    optim                w            g                     (m + s) / N
    optim_grads          w            g / N                 (m + s) / N
    optim_grads_params   w / N        g / N                 (m + s) / N   (/ (N*M) with outer_dp_sharding optim)

g is ``megatron_fsdp_main_grads_dtype`` (auto: the weights' dtype), m ``megatron_fsdp_main_params_dtype``
(fp32 4 B; auto none), s the optimizer moments. At the backward peak, beside these:

- optim_grads_params gathers the running unit and prefetches the next ones until the prefetched elements reach
  P = max(1e9, 2*U_avg) / 2 (``megatron_fsdp.py``: ``suggested_communication_unit_size``, at least 1e9
  elements; ``AllGatherPipeline.all_gather_params``): (1 + ceil(P / U)) units of U weights, and the root
  module's weights stay gathered for the whole step;
- optim_grads and optim_grads_params keep unsharded gradient buckets of the units waiting for their
  reduce-scatter, up to C = max(1e9, 2*U_avg) elements (``GradReducePipeline.wait_for_previous_grad_reduce``),
  plus the unit being accumulated;
- with ``fsdp_double_buffer`` (forced by ``nccl_ub``) both are exactly two unit-sized buffers
  (``FixedPoolAllocator``, size 2).
- with FP8 weights (``fp8_param_gather``) a gathered unit carries its weights' column-wise FP8 copies, made at the
  gather and dropped at the reshard; ``keep_fp8_transpose_cache`` (Megatron-LM's --keep-fp8-transpose-cache)
  keeps them instead, 1 B per linear weight element of the stage, unsharded, all run (:func:`_kept_transposes`).
  MXFP8 weights are different (:func:`_mxfp8_buffers`): their column-wise data is a second sharded buffer, gathered
  instead of the row-wise one in the backward pass, so a gathered unit holds one 1-B copy, and a unit whose
  backward pass recomputes FP8 linear layers gathers its row-wise copy again beside it (:func:`_recompute_copy`).
  With double buffering each of the two buffers has its own pool of two units (``transpose_weight_alloc``, a
  ``FixedPoolAllocator`` beside ``weight_alloc``, its buffers kept in the global memory buffer), so two units of
  both copies stay allocated, and the recomputed unit's row-wise copy takes a slot of its pool.
- ``megatron_fsdp_cuda_graph_mode`` (Bridge's DDP field) keeps the optimizer step's cast gradient shards (below)
  between steps, so they are beside the forward/backward pass too (:func:`graph_mode_grad_copies`).

Megatron-LM's ``--megatron-fsdp-enable-fine-grained-param-gather`` (``enable_fine_grained_param_gather_hook``)
changes none of this. Its forward hooks sit on every submodule and gather the buckets of the submodule's own
parameters, but a bucket holds all of one unit's parameters of one dtype and kind (``_get_parameter_groups``: one
per unit, dtype, expert or not, requires_grad), and ``all_gather_params`` prefetches from the last bucket asked for
until P, as the unit's hook does: the same buckets are gathered. The backward hooks stay per unit (per submodule
only with ``overlap_moe_expert_parallel_comm``), and a submodule recomputed in the backward pass asks for a bucket
its unit's backward hook already holds, except for MXFP8 weights, whose row-wise copy is a buffer of its own;
Megatron-Core turns the hooks on itself there (``mcore_fsdp_adapter.py``: MXFP8 with ``fp8_param_gather``), and
:func:`_recompute_copy` counts that copy.

When the gradient buckets exist. A unit's bucket is fetched when its first gradient arrives in the backward pass
(``_grad_acc`` -> ``param.get_main_grad()``), queued for its reduce-scatter once all its gradients are in, and freed
when the queue exceeds C elements (``wait_for_previous_grad_reduce``, before the next bucket is queued) or at
the end of that backward pass (``_root_post_backward`` -> ``grad_reduce_pipeline.reset()``, queued by
``_root_pre_backward`` for every backward pass). So none exists during a forward pass or the loss, and while they
pile up the micro-batch's activations go: the root bucket (one bucket for the embedding, output layer and final
norm) is fetched by the output layer's weight gradient and waits until the embedding's, at the end. The peak is
the largest of the stage's peak moment without them (the loss: none; the output layer's weight gradient: the
root bucket; the first layer's backward: the root bucket and that unit's; expert-parallel overlap's combined 1F1B
step: the root bucket fetched first and every unit's, as its backward passes all the layers while its forward
regrows the activations, ``combined_1f1b.py`` calling ``pre_backward`` / ``post_backward`` around each step) and
each layer's backward and the end of the pass, with min(C + U, the buckets fetched so far) beside the activations
not yet freed (the loss chunk's go before the layers' backward; full recomputation frees each group's
checkpoint). ``grads_in_backward`` walks it; double buffering's two fixed buckets are always there.

The gradient buckets are in ``megatron_fsdp_grad_comm_dtype`` c (auto: g; ``MixedPrecisionPolicy.grad_comm_dtype``).
A sharded gradient buffer hands ``param.main_grad`` out of an unsharded bucket fetched in c
(``main_grad_getter``: ``fetch_bucket(dtype=grad_comm_dtype)``), reduce-scatters it and adds the shard into the
g-typed buffer, so c only changes those buckets' bytes. An unsharded buffer (no_shard, optim, or a group of one
rank) is reduced in place, unless c differs from g: ``_bucket_group_gradient_reduce`` then copies each bucket into
a new unsharded bucket of dtype c (``allocate_bucket_storage(dtype=c, init_values=...)``), queued and freed like
the others. no_shard and optim reduce during the backward pass only with ``overlap_grad_reduce`` (on the last
micro-batch); otherwise ``all_reduce_gradients`` / ``reduce_scatter_gradients`` work in place in g. With HSDP a
c other than g also allocates the outer reduction's ``hsdp_comm_gbuf`` buckets: not modelled (refused).
Megatron-LM's ``--grad-reduce-in-bf16`` / ``--accumulate-allreduce-grads-in-fp32`` set DDP's
``grad_reduce_in_fp32``, which Megatron-FSDP does not read.

A buffer is sharded only over a group of more than one rank (``DataParallelBuffer(is_data_distributed=...
and group.size() > 1)``); otherwise ``fetch_bucket`` hands out the buffer itself, so at N = 1 (and for the
routed experts at an expert-data-parallel size of 1) nothing is gathered and no gradient bucket is allocated
(measured on one H100, this project's batch 6: the allocation trace holds only the persistent buffers).

The optimizer step (``MegatronFSDP.finish_grad_sync`` -> ``ParamAndGradBuffer.update_main_grads``, then
``DistributedOptimizer.step_with_ready_grads``). The gradient reduce-scatters are waited for and their
buckets freed; the unit buckets are released, the root module's kept (``AllGatherPipeline.reset
(preserve_non_fsdp_units=True)``). ``update_main_grads`` hands the optimizer the gradient of its shard
(``get_item(only_shard = strategy != no_shard)``: n/N_opt elements, all n with ``no_shard``) cast to the main
weights' dtype (``.to(param.dtype)``): a new tensor of m bytes per element when the gradient dtype differs from
m, none with the precision-aware optimizer (Megatron-LM sets ``megatron_fsdp_use_decoupled_grad``) or without
main weights (m auto); it lives until the next ``zero_grad``. Then the Adam (SGD) implementation's temporaries
for the shard, as ``estimator/memory/optimizer_step.py`` counts them (torch's in the main weights' dtype). After
``optimizer.step()`` returns, ``start_param_sync`` (optim_grads_params forces ``overlap_param_gather``)
gathers the module's first parameter with prefetch: on the stage holding the embedding the root bucket and
ceil(P / U) units, else 1 + ceil(P / U) units (two at most with double buffering, none after the root),
all capped at the stage's units. That comes after the temporaries are freed, so the step holds, beside the
states and the run-long buffers,

    grad copies + gathered root + max(optimizer temporaries, units gathered after the step)

PyTorch FSDP2 (``megatron/core/distributed/torch_fully_sharded_data_parallel.py``): ``fully_shard`` on every
transformer layer, the embedding and the output layer, over the data x context-parallel group N: weights w/N,
gradients reduce-scattered in the weights' dtype w/N, and Megatron's mixed-precision optimizer keeps fp32
master weights and moments of the local shards, (m + s)/N. At the peak the running layer and the prefetched
next one are gathered, and the running and the previous layer's unsharded gradients exist (4 units of w);
``torch_fsdp2_reshard_after_forward: false`` keeps every layer gathered from its forward to its backward.
"""

from __future__ import annotations

from typing import NamedTuple

from ...config.derived import grad_comm_dtype, grad_dtype
from ...model.resolve import DTYPE_BYTES
from ...model.vision import vision_params
from ..optimizer_step import fp32_copies_per_state, separate_expert_optimizer

__all__ = ["FsdpStates", "fsdp_shards", "graph_mode_grad_copies", "megatron_fsdp_states", "megatron_fsdp_step",
           "torch_fsdp2_states", "tower_units"]

#: Megatron-FSDP's floor on the communication unit (elements): prefetch P = this / 2, reduce-scatter queue C.
COMMUNICATION_UNIT_FLOOR = 1_000_000_000


class GradQueue(NamedTuple):
    """The unsharded gradient buckets of one backward pass: elements of each unit (the stage's layers in
    order), of the root module's bucket, the queue capacity C + U (elements) and the bytes of an element."""
    units: list
    root: int
    cap: int
    elem: int


class FsdpStates(NamedTuple):
    weights: int
    gradients: int
    optimizer: int
    transient: dict
    grad_queue: GradQueue | None = None   # when the buckets come and go with the backward pass (not double-buffered)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def fsdp_shards(r) -> tuple[int, int, int, int]:
    """(dense, expert) shard counts of weights/gradients and (dense, expert) of the optimizer states."""
    par = r.cfg.parallelism
    if par.use_torch_fsdp2:
        n = r.dp * r.cp
        return n, n, n, n
    m = par.num_distributed_optimizer_instances
    nd, ne = max(r.dp * r.cp // m, 1), max(r.edp // m, 1)
    if par.data_parallel_sharding_strategy == "no_shard":
        return nd, ne, 1, 1
    outer = m if par.outer_dp_sharding_strategy == "optim" else 1
    return nd, ne, nd * outer, ne * outer


def grad_bytes(r) -> int:
    return DTYPE_BYTES[grad_dtype(r.cfg.precision)]


def _grad_buckets(r, nd: int, ne: int) -> tuple[bool, bool]:
    """(dense, expert): whether reducing a unit's gradients allocates an unsharded bucket during the backward
    pass (``GradReducePipeline._bucket_group_gradient_reduce``): a sharded gradient buffer (optim_grads,
    optim_grads_params over more than one rank) fetches one, in the communication dtype; an unsharded one
    is reduced in place unless the communication dtype differs, which copies the bucket into that dtype. No_shard
    and optim reduce during the backward pass only with ``overlap_grad_reduce`` (else after it, in place, in
    the buffer's dtype: ``all_reduce_gradients``)."""
    par, pr = r.cfg.parallelism, r.cfg.precision
    sharded = par.data_parallel_sharding_strategy in ("optim_grads", "optim_grads_params")
    if not (sharded or r.cfg.training.overlap_grad_reduce):
        return False, False
    custom = grad_comm_dtype(pr) != grad_dtype(pr)
    return (sharded and nd > 1) or custom, (sharded and ne > 1) or custom


def master_bytes(r) -> int:
    mp = r.cfg.precision.megatron_fsdp_main_params_dtype
    return 0 if mp == "auto" else DTYPE_BYTES[mp]


def _gathered(bm, units: list, dist_dense: bool, dist_expert: bool, scales: list | None = None,
              kept_copy: bool = False) -> tuple[int, int]:
    """(bytes, elements) of the largest unit, counting only the parameters whose buffers are sharded: a buffer
    over a group of one rank is used in place (``DataParallelBuffer.fetch_bucket``), nothing is gathered.
    ``scales``: per unit, the (dense, expert) bytes of FP8 weight scales that come with its gathered FP8 copies;
    ``kept_copy``: no column-wise FP8 copy is made per gathered unit: they are kept all run (:func:`_kept_transposes`),
    or, MXFP8's, gathered instead of the row-wise copy (:func:`_mxfp8_buffers`)."""
    w, lw = bm.weight, bm.linear_weight or bm.weight
    cache = 0 if kept_copy else bm.fp8_cache
    best = (0, 0)
    for i, (dense, lin, exp) in enumerate(units):
        d, li = (dense, lin) if dist_dense else (0, 0)
        e = exp if dist_expert else 0
        sd, se = scales[i] if scales else (0, 0)
        extra = (sd if dist_dense else 0) + (se if dist_expert else 0)
        best = max(best, (w * (d - li) + (lw + cache) * (li + e) + extra, d + e))
    return best


def _kept_transposes(r, bm) -> bool:
    """Whether ``keep_fp8_transpose_cache`` keeps the column-wise copies of the FP8 weights all run.

    Megatron-LM @ d98e8a64 : megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py: under
    optim_grads_params a unit's FP8 parameters get their column-wise copy when gathered for the backward pass
    (``fp8_create_transpose_cache`` -> Transformer Engine's ``post_all_gather_processing``: a Float8Tensor's
    transpose where FP8 GEMMs are TN-only, a blockwise tensor's column-wise data; an MXFP8 tensor's lives in
    Megatron-FSDP's own transpose buffer, gathered like the weights), and ``release_module_parameters`` drops it
    (``fp8_discard_transpose_cache``) unless ``keep_fp8_transpose_cache``. Kept, each is rewritten in place at the
    next gather (Transformer Engine @ d0067d0d float8_tensor_storage.py ``_create_transpose``:
    ``out=self._transpose``), so every FP8 weight holds one unsharded column-wise copy from its first backward pass
    on: ``bm.fp8_cache`` bytes per linear weight element (0 on Blackwell for per-tensor recipes)."""
    pr = r.cfg.precision
    return (r.cfg.parallelism.keep_fp8_transpose_cache and pr.fp8 and pr.fp8_param_gather
            and (pr.fp8_recipe or "delayed") != "mxfp8" and bm.fp8_cache > 0)


def _mxfp8_buffers(r) -> bool:
    """Whether the FP8 parameters are MXFP8 tensors, which Megatron-FSDP keeps in two buffers of their own.

    Megatron-LM @ d98e8a64 : megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py
    ``_init_each_parameter_group_buffers``: a parameter group of MXFP8 tensors (mixed_precision.py
    ``fp8_need_transpose_data``: MXFP8Tensor only) gets a ``transpose_weight_buffer`` beside its
    ``model_weight_buffer``, sharded the same way (1 B an element each), and the parameters' ``_columnwise_data``
    is a slice of it. The all-gather pipeline keys every bucket by (group, backward) (``get_bucket_key``): the
    forward pass gathers the row-wise bucket, the pre-backward hook the column-wise one (``bwd=True``), and each is
    released on its own (``release_bucket``). So the persistent weights hold both shards, 2 B / N an element, and a
    gathered unit one 1-B copy at a time."""
    pr = r.cfg.precision
    return bool(pr.fp8 and pr.fp8_param_gather and pr.fp8_recipe == "mxfp8")


def _recompute_copy(r, units: list, dist_dense: bool, dist_expert: bool) -> int:
    """Bytes of the row-wise MXFP8 copy a unit gathers again when its backward pass recomputes FP8 linear layers,
    held beside the column-wise buckets of the backward pass: the largest unit's row-wise bucket(s).

    Megatron-LM @ d98e8a64 : megatron_fsdp.py ``_pre_forward_param_unshard`` runs for a recomputed module in the
    PRE_BACKWARD state (no prefetch) and gathers the row-wise buckets (``bwd=False``) that hold its parameters; a
    bucket holds all of one unit's parameters of one dtype and kind, so the whole unit's FP8 (or expert FP8) row-wise
    bucket. Megatron-Core turns the per-submodule hooks on itself for MXFP8 with ``fp8_param_gather``
    (``mcore_fsdp_adapter.py`` ``enable_fine_grained_param_gather_hook``), so a recomputed submodule (selective
    ``mlp``, ``shared_experts``, ``mla_up_proj``, ``moe``) gathers it as a recomputed layer (full recompute) does.
    ``_post_forward`` releases it only lazily inside the backward pass and only on a unit (``lazy_release``), and
    ``_post_backward_release_module`` releases it with the unit's column-wise bucket. Recomputed modules without FP8
    weights (``core_attn``, ``moe_act``, ``layernorm``: their norms are in a bucket without a transpose buffer, the same
    in both passes) gather nothing new. Counted at the stage's peak whatever its moment, like the gathered units."""
    tr, m = r.cfg.training, r.cfg.model
    if not _mxfp8_buffers(r) or not units:
        return 0
    if tr.recompute_granularity == "full":
        dense = expert = True
    elif tr.recompute_granularity == "selective":
        mods = set(tr.recompute_modules if tr.recompute_modules is not None else ("core_attn",))
        expert = "moe" in mods
        dense = bool(mods & {"mlp", "shared_experts", "mla_up_proj"}) or (expert and bool(
            m.moe_shared_expert_intermediate_size))
    else:
        return 0
    lw = 1      # an MXFP8 element
    return max(lw * ((lin if dense and dist_dense else 0) + (exp if expert and dist_expert else 0))
               for _, lin, exp in units)


def _unit_scales(r, unit_scales: list | None) -> list | None:
    """The FP8 scales that come and go with a gathered unit: those of Transformer Engine's weight cache, made from
    the gathered weights; FP8 parameters (``fp8_param_gather``) keep theirs whole all run (counted with the
    weights, :mod:`estimator.model.fp8_scales`)."""
    return None if r.cfg.precision.fp8_param_gather else unit_scales


def _comm_unit(r, units: list) -> int:
    """Megatron-FSDP's communication unit C (elements): ``suggested_communication_unit_size``, else twice the
    average unit, at least 1e9 (``MegatronFSDP.__init__``); prefetch P = C / 2, reduce-scatter queue C."""
    u_avg = sum(d + e for d, _, e in units) // len(units)
    return r.cfg.parallelism.suggested_communication_unit_size or max(COMMUNICATION_UNIT_FLOOR, 2 * u_avg)


def tower_units(r) -> list:
    """(dense elements, dense linear elements, 0) of each layer of a qwen3_vl vision tower on one GPU of the first
    stage: FSDP units like the decoder's layers (module docstring), before them in forward order; none without a
    tower."""
    m = r.cfg.model
    vp = vision_params(m) if m.vision_model_type == "qwen3_vl" else None
    if vp is None:
        return []
    return [(vp.layer.per_rank(r.t), vp.linear_layer // r.t, 0)] * vp.layers


def megatron_fsdp_states(r, bm, moments: int, n_dense: int, n_linear: int, n_expert: int, units: list,
                         root: int, fp8_scales: int = 0, unit_scales: list | None = None) -> FsdpStates:
    """States of one GPU holding ``n_dense`` non-expert parameters (``n_linear`` of them linear weights) and
    ``n_expert`` routed-expert parameters; ``units`` lists (dense elements, dense linear elements, expert
    elements) of each FSDP unit (transformer layer) on the stage, ``root`` the elements of the root module
    (embedding, output layer). The gathered and unsharded buffers exist only for parameters sharded over more
    than one rank. FP8 weight scales (:mod:`estimator.model.fp8_scales`): ``fp8_scales`` bytes on the stage,
    ``unit_scales`` (dense, expert) bytes per unit; they go where the FP8 copies they scale are."""
    par = r.cfg.parallelism
    strat = par.data_parallel_sharding_strategy
    nd, ne, od, oe = fsdp_shards(r)
    w, lw = bm.weight, bm.linear_weight or bm.weight
    dense_w = w * (n_dense - n_linear) + lw * n_linear
    expert_w = lw * n_expert
    g = grad_bytes(r)
    per_opt = master_bytes(r) + moments
    transient = {}
    if strat == "optim_grads_params":
        weights = _cdiv(dense_w, nd) + _cdiv(expert_w, ne) + (fp8_scales if r.cfg.precision.fp8_param_gather else 0)
    else:
        weights = dense_w + expert_w + bm.fp8_cache * (n_linear + n_expert) + fp8_scales
    if strat in ("optim_grads", "optim_grads_params"):
        grads = _cdiv(g * n_dense, nd) + _cdiv(g * n_expert, ne)
    else:
        grads = g * (n_dense + n_expert)
    optimizer = per_opt * (_cdiv(n_dense, od) + _cdiv(n_expert, oe))
    double = par.fsdp_double_buffer or par.nccl_ub
    kept = strat == "optim_grads_params" and _kept_transposes(r, bm)
    if kept:        # the column-wise copies of the sharded FP8 weights, whole, all run (_kept_transposes)
        weights += bm.fp8_cache * ((n_linear if nd > 1 else 0) + (n_expert if ne > 1 else 0))
    mx = strat == "optim_grads_params" and _mxfp8_buffers(r)
    if mx:          # the column-wise buffer's shards beside the row-wise ones (_mxfp8_buffers)
        weights += _cdiv(n_linear, nd) + _cdiv(n_expert, ne)
    if units and strat == "optim_grads_params":
        # Double buffering keeps two units of each MXFP8 buffer (two pools), so both copies there.
        unit_bytes, u_max = _gathered(bm, units, nd > 1, ne > 1, _unit_scales(r, unit_scales),
                                      kept or (mx and not double))
        comm = _comm_unit(r, units)
        if u_max:
            if double:
                n_gathered = min(2, len(units))
            else:
                n_gathered = 1 + min(_cdiv(comm // 2, u_max), len(units) - 1)
            transient["fsdp_gathered_units"] = n_gathered * unit_bytes
            again = 0 if double else _recompute_copy(r, units, nd > 1, ne > 1)
            if again:
                transient["fsdp_recomputed_rowwise_copy"] = again
        if root and nd > 1:
            transient["fsdp_gathered_root"] = w * root
    bd, be = _grad_buckets(r, nd, ne) if units else (False, False)
    per_unit = [(d if bd else 0) + (e if be else 0) for d, _, e in units]
    u_grad = max(per_unit, default=0)
    queue = None
    if u_grad:
        elem = DTYPE_BYTES[grad_comm_dtype(r.cfg.precision)]
        if double:
            pending = min(2, len(units)) * u_grad
        else:
            queue = GradQueue(per_unit, root if bd else 0, _comm_unit(r, units) + u_grad, elem)
            pending = min(queue.cap, sum(per_unit) + queue.root)
        transient["fsdp_unsharded_grads"] = elem * pending
    return FsdpStates(weights, grads, optimizer, transient, queue)


def grads_in_backward(q: GradQueue, units: list, acts: list, root_first: int, root: int, phase: str,
                      phase_value: int, bwd_work: int, freed_first: int) -> tuple[int, int, int | None]:
    """The unsharded gradient buckets at the peak of one chunk's backward pass (module docstring, "When the
    gradient buckets exist"): ``units`` / ``acts`` are the chunk's units' gradient elements and one micro-batch's
    saved activation bytes per layer (forward order), ``root_first`` the root bucket fetched before the layers'
    backward (the output layer's), ``root`` the root bucket by the end, ``phase`` / ``phase_value`` the
    stage's peak moment without FSDP, ``bwd_work`` one layer's backward working set, ``freed_first`` the
    activations freed before the layers' backward (the loss chunk's). Returns (gradient bytes, activation bytes
    released, working set replacing the phase's or ``None`` when the phase's moment stays the peak)."""
    at_phase = {"loss_forward": 0, "loss_backward": 0, "output_layer_wgrad": root_first,
                "backward_working_set": root_first + (units[-1] if units else 0),
                "ep_overlap_1f1b_step": root_first + sum(units)}.get(phase, root + sum(units))
    best, best_total = (q.elem * min(q.cap, at_phase), 0, None), phase_value + q.elem * min(q.cap, at_phase)
    pending, released = root_first, freed_first
    for u, a in zip(reversed(units), reversed(acts)):
        pending += u
        g = q.elem * min(q.cap, pending)
        if bwd_work + g - released > best_total:
            best, best_total = (g, released, bwd_work), bwd_work + g - released
        released += a
    g = q.elem * min(q.cap, pending + root - root_first)
    if g - released > best_total:
        best = (g, released, 0)
    return best


def megatron_fsdp_step(r, bm, n_dense: int, n_expert: int, units: list, root: int, first: bool,
                       unit_scales: list | None = None) -> dict:
    """The optimizer step's own buffers under Megatron-FSDP (module docstring, "The optimizer step"), by name;
    arguments as :func:`megatron_fsdp_states`, ``first``: the stage holds the input embedding."""
    par, pr, tr = r.cfg.parallelism, r.cfg.precision, r.cfg.training
    strat = par.data_parallel_sharding_strategy
    nd, ne, od, oe = fsdp_shards(r)
    n_d, n_e = _cdiv(n_dense, od), _cdiv(n_expert, oe)
    main = master_bytes(r)
    out = {}
    if main and main != grad_bytes(r) and not pr.use_precision_aware_optimizer:
        out["optimizer_fp32_grad_copies" if main == 4 else "optimizer_grad_copies"] = main * (n_d + n_e)
    per_state = fp32_copies_per_state(r)
    elem = 4 if tr.optimizer_implementation == "te_fused" else (main or DTYPE_BYTES[pr.params_dtype])
    temporaries = elem * per_state * (max(n_d, n_e) if separate_expert_optimizer(r) else n_d + n_e)
    prefetch = 0
    if strat == "optim_grads_params":
        if root and nd > 1:
            out["fsdp_gathered_root"] = bm.weight * root
        one_copy = _mxfp8_buffers(r) and not (par.fsdp_double_buffer or par.nccl_ub)
        unit_bytes, u_max = (_gathered(bm, units, nd > 1, ne > 1, _unit_scales(r, unit_scales), one_copy)
                             if units else (0, 0))
        if u_max:
            base = 0 if first else 1      # the first parameter: the embedding (root), else the first unit
            if par.fsdp_double_buffer or par.nccl_ub:
                n = 0 if first else min(2, len(units))
            else:
                n = min(len(units), base + _cdiv(_comm_unit(r, units) // 2, u_max))
            prefetch = n * unit_bytes
    if prefetch > temporaries:
        out["fsdp_gathered_units"] = prefetch
    elif temporaries:
        out["optimizer_temporaries"] = temporaries
    return out


def graph_mode_grad_copies(step_own: dict) -> int:
    """``megatron_fsdp_cuda_graph_mode``: the bytes of the step's cast gradient shards, moved out of ``step_own``
    into a run-long buffer (they are the same tensors, alive through the step too).

    Megatron-LM @ d98e8a64 : megatron_fsdp/param_and_grad_buffer.py ``update_main_grads`` installs each shard as
    ``param.grad`` (``.to(param.dtype)``: a new tensor where the gradient buffer's dtype is not the master weights',
    without the precision-aware optimizer's ``decoupled_grad``), and ``zero_grad`` drops the references only
    ``if not megatron_fsdp_cuda_graph_mode`` ("a persistent casted-copy of the accumulated gradient" otherwise).
    At the next step each shard's new copy replaces the old one parameter by parameter, so the step holds them once.
    """
    kept = 0
    for name in ("optimizer_fp32_grad_copies", "optimizer_grad_copies"):
        kept += step_own.pop(name, 0)
    return kept


def torch_fsdp2_states(r, bm, moments: int, n_dense: int, n_expert: int, units: list, root: int) -> FsdpStates:
    """States of one GPU under PyTorch FSDP2 (no expert parallelism, no pipeline parallelism)."""
    n = r.dp * r.cp
    w = bm.weight
    total = n_dense + n_expert
    master = 0 if r.cfg.precision.params_dtype == "fp32" else 4
    layers = 0
    if units:
        u_max = max(e for e, _ in units)
        if r.cfg.parallelism.torch_fsdp2_reshard_after_forward:
            gathered = min(2, len(units)) * u_max
        else:
            gathered = sum(e for e, _ in units)
        layers = w * (gathered + min(2, len(units)) * u_max)
    # The embedding and the output layer are units of their own, gathered only while they run (the output
    # layer's backward, beside its gradient): the larger of the two moments is the peak.
    transient = {"fsdp_gathered_units": max(layers, w * root)} if (layers or root) else {}
    return FsdpStates(_cdiv(w * total, n), _cdiv(w * total, n), (master + moments) * _cdiv(total, n), transient)
