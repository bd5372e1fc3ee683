"""Per-stage memory: the assembly of parameters, model states, activations and transient buffers.

For each pipeline stage this module finds the layers it holds (per virtual chunk), the parameters one
of its GPUs keeps, the micro-batches in flight at the peak of the pipeline schedule, and the transient
buffers alive at that peak; then the three totals:

- ``allocated_bytes``: weights + gradients + optimizer states + activations + transient buffers, what
  ``torch.cuda.max_memory_allocated()`` reports;
- ``reserved_bytes``: plus the PyTorch caching allocator's reserve (:data:`ALLOCATOR_RESERVE_FRACTION`);
- ``device_bytes``: plus the CUDA context and NCCL communicator buffers (one per process group of more than
  one rank, so DP 1 -> 2 adds one, two in an MoE model whose expert-data-parallel group grows too; with
  Megatron-FSDP, ``create_all_gather_group`` (Megatron-LM's --create-all-gather-group) adds the all-gather copies
  of the data x context-parallel and expert-data-parallel groups, Megatron-LM @ d98e8a64 :
  megatron/core/parallel_state.py ``create_all_gather_groups``), the figure to hold against a GPU's capacity.

The totals are those of the phase with the larger peak, forward/backward or the optimizer step
(``peak_phase``); at the optimizer step the activations are 0, freed by the last backward pass before it.

Where the layers, the embedding, the output layer and the MTP layers sit comes from
:mod:`estimator.config.pipeline_layout` (per virtual chunk); the micro-batches in flight from
:mod:`estimator.memory.schedule` (Megatron-Core ``pipeline_parallel/schedules.py``): with 1F1B stage r holds
min(p - r, m) micro-batches at its peak; with the interleaved schedule rank r runs 2 (p - r - 1) +
(v - 1) N warm-up forwards (N = ``microbatch_group_size_per_vp_stage``), so it holds that many
chunk-micro-batches plus one, capped at m v, in the heaviest mix of chunks the schedule produces
(:func:`estimator.memory.schedule.heaviest_mix`, O(v) per stage whatever the number of micro-batches).
"""

from __future__ import annotations

from ..config.errors import ConfigError, Problem
from ..config.derived import (compute_capability, effective_overload_factor, gpu_arch, hybrid_cp_groups, is_amd,
                              te_version)
from ..config.load import load_config
from ..config.rules import interleaving_problem, overload_cap
from ..config.schema import MAX_BATCH
from ..model.layers import hyper_connection, kimi, kind_linear_shapes, kind_linear_weights, kind_params, kind_weight_shapes
from ..model.layers.moe import routed_rows
from ..model.fp8_scales import BLOCK_SCALED, per_tensor_transpose, quantized
from ..model.local_attention import chunk_mask_bytes, torch_softmax
from ..model.params import count_parameters, embedding, final_norm, mtp_built, mtp_extra, output_layer
from ..model.resolve import DTYPE_BYTES, Resolved, resolve
from . import features, phases, reserved
from .features import fp8_output, frozen_language, gtp
from .allocator import parse_alloc_conf
from .activations import (LayerActivations, context, held_per_layer, layer_activations, mtp_activations,
                          received_input_bytes, stage_extras)
from .loss import TE_FP32_CE_GRADIENT, lm_loss_buffers, logit_bytes as loss_logit_bytes, loss_buffers
from .optimizer_step import (PERSISTENT_BUFFERS, assumption as optimizer_step_assumption, optimizer_step_buffers,
                             recompute_retained, separate_expert_optimizer)
from .report import ChunkReport, Estimate, Peak, StageEstimate
from .schedule import first_chunks, heaviest_mix, warmup
from .states import byte_model, stage_fp8_scales, state_bytes
from .vision import vision_stage
from ..model.audio import clip_tokens, sound_params
from ..model.vision import image_patches, image_tokens, tower_kind
from .workspaces import global_buffer_bytes, workspace_bytes

__all__ = ["estimate", "ALLOCATOR_RESERVE_FRACTION", "CUDA_CONTEXT_BYTES", "NCCL_BYTES_PER_COMMUNICATOR", "in_flight",
           "peak_memory", "stage_memory"]

MIB = 2 ** 20

#: The caching allocator keeps freed blocks for reuse, so max_memory_reserved exceeds max_memory_allocated.
#: On the 19 SimuMax B200 runs of validation/measured.yaml the excess is 2.8-9.3 % (median 4.7 %); we use 5 %.
ALLOCATOR_RESERVE_FRACTION = 0.05

#: CUDA context with cuBLAS/cuDNN/NCCL kernels loaded, outside PyTorch's allocator. nvidia-smi shows
#: roughly 500-700 MiB per process on Hopper with CUDA 12; we take 600 MiB.
CUDA_CONTEXT_BYTES = 600 * MIB

#: NCCL's own buffers per communicator a rank uses (NCCL_BUFFSIZE 4 MiB x channels x peers), an
#: order-of-magnitude figure: 128 MiB per process group of more than one rank (so DP 1 -> 2 adds 128 MiB, or
#: 256 MiB where an MoE model's expert-data-parallel group grows from one rank too).
NCCL_BYTES_PER_COMMUNICATOR = 128 * MIB


def in_flight(r: Resolved, stage: int) -> list[int]:
    """Virtual-chunk index of every (chunk-)micro-batch whose activations stage ``stage`` holds before its first
    backward pass, in the order of their forward passes. That is the peak when all chunks weigh the same;
    :func:`stage_memory` takes the heaviest mix the schedule ever holds (:func:`estimator.memory.schedule.heaviest_mix`)."""
    p, v, m = r.p, r.v, r.m
    if v == 1:
        n = p - stage
        if m is not None:
            n = min(n, m)
        return [0] * n
    if m is None:
        m = r.group * (v + 4)
    return first_chunks(v, r.group, m, min(warmup(p, stage, v, r.group, m) + 1, m * v))


def chunk_activations(r: Resolved, layers: range, counts: tuple, acts) -> tuple[int, int, int, int]:
    """(saved bytes, attention part, mlp part, recompute working set) of one chunk for one micro-batch;
    ``counts`` holds the chunk's layers of each kind, ``acts`` (a list or a dict) the activations of each."""
    tr = r.cfg.training
    if not len(layers):
        return 0, 0, 0, 0
    if tr.recompute_granularity != "full":
        att = mlp = rec = 0
        for k, n in enumerate(counts):
            if n:
                a = acts[k]
                att += n * a.attention
                mlp += n * a.mlp
                if a.recompute_peak > rec:
                    rec = a.recompute_peak
        if r.attn_res:      # Kimi K3: the packed prefix and AttnRes bank a later stage receives
            att += kimi.boundary_bytes(r, layers.start, context(r))
        if r.hc:            # mHC recompute groups: their input streams, and the replay of a whole group
            kept, work = hyper_connection.recompute_groups(r, context(r), len(layers))
            att, rec = att + kept, max(rec, work)
        return att + mlp, att, mlp, rec
    kinds = [acts[r.layer_kinds[i]] for i in layers]
    held = sum(held_per_layer(tr, kinds))
    n = tr.recompute_num_layers if tr.recompute_num_layers is not None else 1
    if tr.recompute_method == "block":
        rec, keep = kinds[:n], kinds[n:]
        mlp = sum(k.mlp for k in keep)
        work = max((k.full - k.shared_input for k in rec), default=0)
        return held, held - mlp, mlp, work
    # uniform (the default method): groups of n layers keep only the group's input
    n = max(n, 1)
    groups = [kinds[i:i + n] for i in range(0, len(kinds), n)]
    work = max(sum(k.full for k in g) - g[0].shared_input for g in groups)
    return held, held, 0, work


_LAYOUT_CACHE: dict = {}


def parameter_layout(r: Resolved) -> tuple:
    """Parameters one GPU holds per layer kind (dense-parallel, linear-layer weights, routed experts), per MTP
    layer and for the vocabulary parts, and the linear weight shapes per kind.

    They depend only on the model's shape and on TP/EP/ETP, so they are memoised on exactly those values
    (the layout search evaluates thousands of layouts of one model)."""
    # Everything here follows from the model section (r.shape: one object per distinct section), TP/EP/ETP and,
    # for learned positions without max_position_embeddings, s.
    key = (id(r.shape), r.t, r.ep, r.etp, r.s)
    hit = _LAYOUT_CACHE.get(key)
    if hit is not None and hit[0] is r.shape:
        return hit[1]
    t = r.t
    per_kind = []
    for kind in r.kinds:
        dense, exp = kind_params(r, kind)
        per_kind.append((dense.per_rank(t), kind_linear_weights(r, kind),
                         exp.sharded // (r.ep * r.etp) + exp.replicated // r.ep))
    per_kind = tuple(per_kind)
    emb = embedding(r).per_rank(t)              # the input embedding (with learned positions)
    vocab_weight = output_layer(r).per_rank(t)  # one vocabulary-sized weight matrix on one GPU
    norm = final_norm(r).per_rank(t)
    mtp_dense = mtp_lin = mtp_exp = 0
    if r.mtp:
        x = mtp_extra(r)
        mtp_dense, mtp_lin = x.per_rank(t), x.sharded // t
        for k in r.mtp_kinds:
            dd, lin, e = per_kind[k]
            mtp_dense, mtp_lin, mtp_exp = mtp_dense + dd, mtp_lin + lin, mtp_exp + e
    shapes = tuple(frozenset(kind_weight_shapes(r, kind)) for kind in r.kinds)
    out = (per_kind, emb, vocab_weight, norm, mtp_dense, mtp_lin, mtp_exp, shapes)
    if len(_LAYOUT_CACHE) > 4096:
        _LAYOUT_CACHE.clear()
    _LAYOUT_CACHE[key] = (r.shape, out)
    return out


_ACTS_CACHE: dict = {}


def kind_activations(r: Resolved) -> list:
    """Activations of one layer of each kind for one micro-batch, memoised on the model section (``r.shape``) and
    everything else they read: the tokens per rank, the tensor and expert-tensor split, the dtypes and the
    recompute (with distribute_saved_activations), the fp32 residual stream, attention and deterministic-mode
    settings, the expert-parallel
    size (the MoE backward working set depends on it: the all-gather dispatcher's gathered tokens, the local experts' re-sort), expert-parallel overlap
    (its schedule nodes keep MoE tensors of their own: estimator/model/layers/moe.py), the MoE overload factor
    (the busiest rank's routed rows) and ERNIE-VL's image tokens (``r.vis``: their split between the expert pools).
    The layout search varies the pipeline and data-parallel sizes, which they do
    not read."""
    cfg = r.cfg
    tr, pr = cfg.training, cfg.precision
    key = (id(r.shape), r.t, r.cp, r.s, r.b, r.sp, r.etp, r.ep, pr.fp8, pr.fp8_recipe, pr.fp4, pr.params_dtype,
           pr.quant_recipe, tr.recompute_granularity,
           tr.recompute_modules, tr.attention_backend, tr.transformer_impl, cfg.parallelism.cp_comm_type,
           tr.deterministic_mode, tr.overlap_moe_expert_parallel_comm, tr.moe_overload_factor,
           tr.distribute_saved_activations, tr.overlap_dispatch_backward_with_experts_wgrad,
           tr.gradient_accumulation_fusion, tr.freeze_language_model, r.vis, tr.mlp_chunks_for_training,
           pr.fp32_residual_connection)
    hit = _ACTS_CACHE.get(key)
    if hit is not None and hit[0] is r.shape:
        return hit[1]
    ctx = context(r)
    if tr.freeze_language_model:         # frozen linears save no inputs (features/frozen_language.py)
        acts = [frozen_language.frozen_layer(r, layer_activations(r, kind, ctx, parts=True), kind)
                for kind in r.kinds]
    else:
        acts = [layer_activations(r, kind, ctx) for kind in r.kinds]
    if len(_ACTS_CACHE) > 4096:
        _ACTS_CACHE.clear()
    _ACTS_CACHE[key] = (r.shape, acts)
    return acts


_ONE, _NONE = frozenset((0,)), frozenset()
_KIND_COUNTS: dict = {}


def layer_kind_counts(r: Resolved) -> tuple:
    """Layers of each kind in every chunk of every stage (memoised on the placement and the kind sequence, both
    of which resolve() takes from caches, checked by identity)."""
    key = (id(r.plan), id(r.layer_kinds))
    hit = _KIND_COUNTS.get(key)
    if hit is not None and hit[0] is r.plan and hit[1] is r.layer_kinds:
        return hit[2]
    seq, n = r.layer_kinds, len(r.kinds)
    out = []
    for plan in r.plan:
        stage = []
        for c in plan.layers:
            cnt = [0] * n
            for k in seq[c.start:c.stop]:
                cnt[k] += 1
            stage.append(tuple(cnt))
        out.append(tuple(stage))
    counts = tuple(out)
    if len(_KIND_COUNTS) > 4096:
        _KIND_COUNTS.clear()
    _KIND_COUNTS[key] = (r.plan, r.layer_kinds, counts)
    return counts


def _chunk_parameters(r: Resolved, c, layout: tuple) -> tuple[int, int, int]:
    """(dense, linear, routed-expert) parameters one GPU holds for the non-decoder parts of chunk ``c``.

    GPTModel (``megatron/core/models/gpt/gpt_model.py``) builds per chunk: the embedding where pre_process;
    the final norm and the output layer where post_process (its weight is the embedding itself only when
    both sit in one chunk and are tied); for MTP layers their own parts and a copy of the embedding unless
    the chunk already has it (LanguageModule.setup_embeddings_and_output_layer keeps the copies in sync)."""
    (_, emb, vocab_weight, norm, mtp_dense, mtp_lin, mtp_exp, _) = layout
    dense = lin = exp = 0
    if c.embedding:
        dense += emb
    if c.loss:
        dense += norm + (0 if (r.tied and c.embedding) else vocab_weight)
    k = mtp_built(r, len(c.mtp))     # layers built: one for every depth with mtp_use_repeated_layer
    if k:
        dense += k * mtp_dense + (0 if c.embedding else emb)
        lin += k * mtp_lin
        exp += k * mtp_exp
    return dense, lin, exp


def _mtp_parameters(r: Resolved, chunks, layout: tuple) -> tuple[int, int]:
    """(dense, routed-expert) parameters one GPU holds in the MTP layers built in ``chunks`` (their norms, eh_proj
    and transformer layers; not the embedding copy), the ones ``training.freeze_mtp`` freezes."""
    mtp_dense, mtp_exp = layout[4], layout[6]
    k = sum(mtp_built(r, len(c.mtp)) for c in chunks)
    return k * mtp_dense, k * mtp_exp


def _trained(r: Resolved, chunks, layout: tuple, dense_p: int, expert_p: int) -> tuple[int, int]:
    """The stage's parameters the optimizer steps with its MTP layers frozen."""
    fd, fe = _mtp_parameters(r, chunks, layout)
    return dense_p - fd, expert_p - fe


def stage_memory(r: Resolved, *, replay: bool | None = None) -> Estimate:
    """The estimate for every pipeline stage of a resolved configuration.

    ``replay``: reserved memory from the replay of each stage's allocation trace through the simulated caching
    allocator (:mod:`estimator.memory.reserved`) rather than allocated x (1 + :data:`ALLOCATOR_RESERVE_FRACTION`);
    None follows ``training.reserved_memory_model`` (the layout search passes False: thousands of calls)."""
    if replay is None:
        replay = r.cfg.training.reserved_memory_model == "replay"
    return _assemble(r, replay, False)


def peak_memory(r: Resolved) -> tuple[Peak, StageEstimate]:
    """The peak of :func:`stage_memory` (``replay=False``) and the stage that holds it, the same numbers, without
    the stages that cannot hold it (the layout search asks thousands of times).

    Left out: with the plain 1F1B schedule (v = 1), no recipe feature and no RL phases, a stage holding neither the
    embedding nor the loss whose parameters, model states, one micro-batch's activations per chunk, recompute
    working set, layer kinds, MTP layers, vocabulary chunks and recomputed MoE inputs kept through the step are
    those of an earlier stage with at least as many micro-batches in flight. Its run-long and step buffers are then
    the earlier stage's and its activations no more, so no phase peaks higher: forward/backward = states + n x (one
    micro-batch's activations) + buffers grows with the micro-batches in flight n; the optimizer step, evaluation
    and checkpoint phases do not depend on n; the stage's allocated peak is the largest of them, and its device
    bytes grow with it. Ties go to the first stage, as in :func:`stage_memory` (``tests/memory/test_memory.py``
    holds the two equal)."""
    return _assemble(r, False, True)


def _assemble(r: Resolved, replay: bool, peak_only: bool):
    cfg = r.cfg
    tr, pr = cfg.training, cfg.precision
    t, p = r.t, r.p
    bm = byte_model(r)
    acts = kind_activations(r)
    layout = parameter_layout(r)
    vis = vision_stage(r)      # the vision tower on the first stage (estimator/memory/vision.py), None without one
    feat = features.plan(r, bm, layout, acts)   # None unless a recipe feature (FSDP, PEFT, offload, ...) is on
    if feat is not None:
        acts = feat.acts
    frozen_lm = tr.freeze_language_model     # weights only for the language model (features/frozen_language.py)
    frozen_mtp = tr.freeze_mtp and not frozen_lm and r.mtp     # weights only for the MTP layers (the same module)
    mtp_act = (sum_activations(frozen_language.mtp_layers(r) if frozen_mtp else mtp_activations(r, acts))
               if r.mtp else None)
    extras = stage_extras(r, mtp_act)
    if frozen_mtp:
        extras = extras._replace(mtp=extras.mtp - frozen_language.eh_proj_input(r))
    if frozen_lm:
        extras = extras._replace(output=extras.output - frozen_language.output_input(r))
    fp8_out = fp8_output.active(pr)         # the output layer in MXFP8 (features/fp8_output.py)
    if fp8_out:
        change = fp8_output.saved_input_change(r)      # per call of the output layer: the main head, each MTP depth
        extras = extras._replace(output=extras.output + change, mtp=extras.mtp + change if extras.mtp else 0)
    loss = loss_buffers(r)
    eval_loss = lm_loss_buffers(r) if tr.distillation_cached_logits else loss

    per_kind, shapes_by_kind, vocab_weight = layout[0], layout[-1], layout[2]
    wbytes = DTYPE_BYTES[pr.params_dtype]
    te_dummies = tr.transformer_impl == "transformer_engine" and tr.gradient_accumulation_fusion and not frozen_lm
    dummy_cache: dict = {}
    dense_shard = r.dp * r.cp
    overhead = CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_COMMUNICATOR * _communicators(r)
    full_recompute = tr.recompute_granularity == "full"
    vocab_wgrad = wbytes * vocab_weight
    # MXFP8 output layer: its weight copies, Transformer Engine's dummy weight gradient instead of a bf16 one, and the
    # quantized logits gradient in its backward
    out_copies = fp8_output.weight_copies(r) if fp8_out else 0
    out_dummy = fp8_output.dummy_wgrad(r, wbytes) if fp8_out and te_dummies else 0
    # GTP with an fp32 gradient buffer: the output layer's weight gradient is GTP's pool buffer, counted with it
    out_wgrad = 0 if out_dummy or gtp.output_wgrad_pooled(cfg) else vocab_wgrad
    out_backward = fp8_output.backward_extra(r) if fp8_out else 0
    loss_act = extras.output + r.mtp * extras.mtp_logits
    counted = phases.counted(cfg)
    rl_counted = phases.rl_counted(cfg)     # one RL step's phases (training.rl_algorithm)
    loss_elements = (r.s * r.b // r.cp) * (r.Vp // r.t)      # logit elements of one micro-batch on a loss-stage GPU
    logit_bytes = loss_logit_bytes(pr)                       # as the output layer writes them (memory/loss.py)
    moment_bytes = ((DTYPE_BYTES[pr.exp_avg_dtype] + DTYPE_BYTES[pr.exp_avg_sq_dtype]
                     if pr.use_precision_aware_optimizer else 8) if tr.optimizer == "adam" else 0)
    fp8_written = (pr.fp8 and pr.fp8_param_gather) or (pr.fp4 and pr.fp4_param_gather)   # dequantized for a save
    # dynamic CP runs evaluation through the same per-sequence schedule (schedules.py forward_backward_no_pipelining
    # -> hybrid_context_parallel_forward_backward with forward_only): one sequence per forward whatever its size
    eval_mbs = r.b if cfg.parallelism.hybrid_context_parallel else (tr.eval_micro_batch_size or r.b)
    stages = []
    pending: list = []        # with replay: per stage, (bytes outside the replay, the replay's arguments)
    static: dict = {}
    run_long: dict = {}       # the GEMM workspaces and the global buffer, by (MoE layers, loss) of the stage
    one_kind = len(r.kinds) == 1
    kind_counts = None if one_kind else layer_kind_counts(r)
    # peak_memory: per (parameters, states, one micro-batch's activations per chunk, recompute working set, layer
    # kinds, MTP layers, vocabulary chunks, retained MoE inputs or the signature that fixes them) of the stages
    # without embedding or loss, the most micro-batches in flight computed so far
    skip_lighter = peak_only and feat is None and r.v == 1 and not rl_counted
    most_in_flight: dict = {}
    # With one kind per chunk and the MoE flag a property of the kind, the signature fixes the recomputed MoE inputs
    # kept through the step (recompute_retained): they need not be computed to compare two stages.
    moe_by_kind = skip_lighter and all(bool(r.kinds[k].moe) == bool(m) for k, m in zip(r.layer_kinds, r.moe_layers))
    single: dict = {}         # signature -> every chunk holds layers of one kind
    for s_idx, plan in enumerate(r.plan):
        chunks = plan.chunks
        sig = plan.sig if one_kind else (plan.sig, kind_counts[s_idx])
        # Full recompute reads the order of the kinds in a chunk (its groups, its first n layers): the counts fix
        # it only when every chunk holds one kind (always so for a model of one kind).
        one_per_chunk = single.get(sig)
        if one_per_chunk is None:
            one_per_chunk = single[sig] = one_kind or all(sum(1 for x in cnt if x) <= 1 for cnt in kind_counts[s_idx])
        if sig in static and (not full_recompute or one_per_chunk):
            dense_p, linear_p, expert_p, st, chunk_acts, work, present = static[sig]
        else:
            dense_p = linear_p = expert_p = 0
            chunk_acts = []
            work = 0
            stage_counts = [0] * len(r.kinds)
            for c_idx, ((n, c_emb, c_loss, n_mtp), c) in enumerate(zip(plan.sig, chunks)):
                if one_kind:
                    counts = (n,)
                    stage_counts[0] += n
                else:
                    counts = kind_counts[s_idx][c_idx]
                    for k, cnt in enumerate(counts):
                        stage_counts[k] += cnt
                if c_emb or c_loss or n_mtp:
                    dp_, lp_, ep_ = _chunk_parameters(r, c, layout)
                    dense_p += dp_
                    linear_p += lp_
                    expert_p += ep_
                if c_emb and vis is not None:
                    dense_p += vis.trained
                    linear_p += vis.trained_linear
                # Activations of one micro-batch of this chunk.
                if full_recompute or not one_kind:
                    saved, a_part, m_part, rec = chunk_activations(r, c.layers, counts, acts)
                else:
                    a0 = acts[0]
                    a_part, m_part = n * a0.attention, n * a0.mlp
                    rec = a0.recompute_peak if n else 0
                    if r.hc:    # mHC recompute groups (as chunk_activations)
                        kept, work = hyper_connection.recompute_groups(r, context(r), n)
                        a_part, rec = a_part + kept, max(rec, work)
                    saved = a_part + m_part
                e_part = (extras.embedding + (vis.activations if vis is not None else 0)) if c_emb else 0
                o_part = loss_act if c_loss else 0
                # with mtp_hsm, each MTP depth after the chunk's first keeps the mixing's draw (activations.hsm_bytes)
                t_part = n_mtp * extras.mtp + (n_mtp - 1) * extras.mtp_hsm if n_mtp else 0
                kept_mask, remat_mask = chunk_mask_bytes(r, bool(c_emb or c_loss), n)
                # the received fp32 input of an fp32 residual stream (memory/activations.py received_input_bytes)
                recv = received_input_bytes(r, c)
                saved, a_part, rec = saved + kept_mask + recv, a_part + kept_mask + recv, rec + remat_mask
                chunk_acts.append((saved + e_part + o_part + t_part, a_part, m_part, e_part, o_part, t_part, recv))
                if rec > work:
                    work = rec
            for cnt, (dd, lin, e) in zip(stage_counts, per_kind):
                if cnt:
                    dense_p += cnt * dd
                    linear_p += cnt * lin
                    expert_p += cnt * e
            st = state_bytes(bm, dense_p, linear_p, expert_p, dense_shard, r.edp,
                             stage_fp8_scales(r, bm, stage_counts, mtp_built(r, plan.mtp)) if bm.fp8_scales else 0)
            if plan.embedding and vis is not None and vis.frozen:
                st = st._replace(weights=st.weights + bm.weight * vis.frozen)     # frozen: weights only
            if out_copies and plan.loss:
                st = st._replace(weights=st.weights + out_copies)
            if frozen_lm:
                st = frozen_language.stage_states(bm, st, vis.trained if plan.embedding and vis is not None else 0,
                                                  dense_shard, r.edp)
            elif frozen_mtp and plan.mtp:
                fd, fe = _mtp_parameters(r, chunks, layout)
                st = frozen_language.mtp_states(bm, st, dense_p - fd, expert_p - fe, dense_shard, r.edp)
            if one_kind:
                present = _ONE if stage_counts[0] or plan.mtp else _NONE
            else:
                present = frozenset(k for k, cnt in enumerate(stage_counts) if cnt)
                if plan.mtp:
                    present |= frozenset(r.mtp_kinds)
            static[sig] = (dense_p, linear_p, expert_p, st, chunk_acts, work, present)
        retained = None
        if r.v == 1:
            n_flight = p - s_idx if r.m is None or r.m > p - s_idx else r.m
            if skip_lighter and not plan.embedding and not plan.loss:
                if one_per_chunk and moe_by_kind:
                    fixed = sig
                else:
                    retained = recompute_retained(r, chunks, acts)
                    fixed = ("retained", retained)
                like = (dense_p, linear_p, expert_p, st, tuple(chunk_acts), work, present, plan.mtp,
                        plan.vocab_chunks, fixed)
                if most_in_flight.get(like, -1) >= n_flight:
                    continue          # an earlier stage like it holds at least as much (peak_memory)
                most_in_flight[like] = n_flight
            ca = chunk_acts[0]
            counts = (n_flight,)
            activations, att_total, mlp_total, emb_act, out_act, mtp_act_total = (
                n_flight * ca[0], n_flight * ca[1], n_flight * ca[2], n_flight * ca[3], n_flight * ca[4],
                n_flight * ca[5])
        else:
            counts = heaviest_mix(p, s_idx, r.v, r.group, r.m, [ca[0] for ca in chunk_acts])
            n_flight = sum(counts)
            activations = att_total = mlp_total = emb_act = out_act = mtp_act_total = 0
            for k, ca in zip(counts, chunk_acts):
                if k:
                    activations += k * ca[0]
                    att_total += k * ca[1]
                    mlp_total += k * ca[2]
                    emb_act += k * ca[3]
                    out_act += k * ca[4]
                    mtp_act_total += k * ca[5]

        # Transient buffers at the peak.
        n_mtp = plan.mtp
        has_loss = plan.loss
        transient = {}
        key = (present, n_mtp > 0 and not frozen_mtp)      # eh_proj's weight-gradient dummy: not when frozen
        hit = dummy_cache.get(key)
        if hit is None:
            shapes = set()
            for k in present:
                shapes |= shapes_by_kind[k]
            if key[1]:
                shapes.add((r.h, 2 * r.h // t))
            hit = dummy_cache[key] = (wbytes * sum(a * b for a, b in shapes),
                                      wbytes * max((a * b for a, b in shapes), default=0),
                                      any(r.kinds[k].moe for k in present),
                                      max((acts[k].backward_peak for k in present), default=0),
                                      max((acts[k].attention_backward_peak for k in present), default=0))
        dummies, biggest, has_moe, bwd, attn_bwd = hit
        if out_dummy and has_loss:
            dummies += out_dummy
        if (present or (out_dummy and has_loss)) and not frozen_lm:     # a frozen language model: no weight gradient
            if te_dummies:
                transient["te_dummy_wgrad"] = dummies
            else:
                # Without fused accumulation each linear's weight gradient exists in the weight dtype until
                # it is added to main_grad: the largest one is the peak.
                bwd += biggest
        bwd = max(bwd, attn_bwd)    # unfused attention's backward, after the layer's MLP backward
        if plan.embedding and vis is not None:
            bwd = max(bwd, vis.backward_peak)      # the vision tower's backward runs after the decoder's
        name, value = "backward_working_set", bwd + work
        no_wgrad = frozen_lm or (feat is not None and feat.skips_vocab_wgrad(has_loss))
        if has_loss and out_act:
            # The loss chunk passes through the loss before its layers' backward (estimator/memory/loss.py): the
            # loss's own buffers at the end of its forward and during its backward; then the output
            # layer's backward (the bf16 gradient of the logits, and the weight gradient Megatron's
            # ColumnParallelLinear allocates even when it accumulates into main_grad); the layers'
            # backward starts once the loss has freed what it kept.
            value -= min(loss.saved, out_act)
            for phase, size in (("loss_forward", loss.forward_extra), ("loss_backward", loss.backward_extra),
                                ("output_layer_wgrad",
                                 (0 if no_wgrad else out_wgrad) + loss.output_backward + out_backward)):
                if size > value:
                    name, value = phase, size
        for c_idx in () if no_wgrad else plan.vocab_chunks:
            if counts[c_idx] and vocab_wgrad - chunk_acts[c_idx][0] > value:
                # Embedding backward (the input embedding or an MTP stage's copy): a dense weight gradient,
                # when this micro-batch's activations of the chunk are gone.
                name, value = "embedding_wgrad", vocab_wgrad - chunk_acts[c_idx][0]
        transient[name] = value if value > 0 else 0
        ws = run_long.get(has_moe)
        if ws is None:
            ws = run_long[has_moe] = workspace_bytes(r, has_moe)
        transient["workspaces"] = ws
        buffer = run_long.get((has_moe, has_loss))
        if buffer is None:
            buffer = run_long[(has_moe, has_loss)] = global_buffer_bytes(r, has_moe, has_loss)
        if buffer:
            transient["global_memory_buffer"] = buffer
        acts_by = {"attention": att_total, "mlp": mlp_total, "embedding": emb_act, "output": out_act}
        if r.mtp:
            acts_by["mtp"] = mtp_act_total
        reports = plan.reports.get(counts) or _chunk_reports(plan, counts)
        fb_transient = transient
        if feat is None:
            transient_bytes = sum(transient.values())
            # The optimizer step (estimator/memory/optimizer_step.py): activations freed, its own buffers alive.
            states = st.weights + st.gradients + st.optimizer
            fwd_bwd = states + activations + transient_bytes
            # the parameters the optimizer steps: with a frozen language model the stage's trained vision ones
            td, te = ((vis.trained if plan.embedding and vis is not None else 0, 0) if frozen_lm
                      else _trained(r, chunks, layout, dense_p, expert_p) if frozen_mtp and n_mtp
                      else (dense_p, expert_p))
            step = optimizer_step_buffers(r, bm, td, te, dense_shard, transient,
                                          recompute_retained(r, chunks, acts) if retained is None else retained)
            phase, step_total = "forward_backward", states + sum(step.values())
            fb_activations, fb_acts_by = activations, dict(acts_by)
            if step_total > fwd_bwd:
                phase, transient, transient_bytes = "optimizer_step", step, step_total - states
                activations = 0
                acts_by = dict.fromkeys(acts_by, 0)
            # The other moments of the run (estimator/memory/phases.py): where one of those the run goes through
            # is above the steady step, the stage's totals are that phase's.
            eval_fwd = max((acts[k].full for k in present), default=0)
            if has_loss:    # evaluation computes the cross entropy alone (no distillation: memory/loss.py)
                eval_fwd = max(eval_fwd, eval_loss.saved + eval_loss.forward_extra)
            if eval_mbs != r.b:         # every tensor of a forward holds micro_batch_size sequences
                eval_fwd = eval_fwd * eval_mbs // r.b
            n_main = (-(-td // dense_shard) + -(-te // r.edp)) if bm.distributed else td + te
            # FP8 linear weights this rank writes: fully parallel save spreads the replicas over the data-parallel
            # (x context-parallel) ranks, the experts' over the expert-data-parallel ones, with or without the
            # distributed optimizer
            n_fp8 = -(-linear_p // dense_shard) + -(-expert_p // r.edp)
            ph = phases.phase_bytes(cfg, phases.PhaseInputs(
                states, st.optimizer * moment_bytes // bm.optimizer if bm.optimizer else 0, fwd_bwd, step_total,
                phases.persistent_bytes(fb_transient), phases.kept_after_step(step), eval_fwd, n_main,
                n_fp8 if fp8_written else 0, wbytes))
            parts = ph.pop("_parts")
            held = (st.weights, st.gradients, st.optimizer)      # the actor's states resident at the peak
            if rl_counted:
                # One RL step's phases (estimator/memory/phases.py, "RL training").
                rl = phases.rl_phase_bytes(cfg, phases.RLInputs(
                    st.weights, st.gradients, st.optimizer, phases.persistent_bytes(fb_transient),
                    phases.kept_after_step(step), max((acts[k].full for k in present), default=0),
                    loss_elements if has_loss else 0, fwd_bwd, step_total, n_flight, r.b, r.s,
                    (r.m or 1) * r.b, logit_bytes))
                parts.update(rl.pop("_parts"))
                rl_states = rl.pop("_states")
                ph.update((k, rl[k]) for k in rl_counted)     # the phases this RL step goes through
            worst = max(counted + rl_counted, key=lambda k: ph[k])
            if worst == "policy_update" and ph[worst] > ph["steady_step"]:
                # The steady step with the RL loss's own tensors (its forward/backward) or beside its optimizer step.
                extra = parts[worst]
                ref_w = extra.get("reference_weights", 0)
                if ph[worst] - ref_w > step_total:
                    activations, acts_by, transient = fb_activations, dict(fb_acts_by), dict(fb_transient)
                else:
                    activations, acts_by, transient = 0, dict.fromkeys(acts_by, 0), dict(step)
                    extra = {"reference_weights": ref_w} if ref_w else {}
                phase = worst
                transient.update(extra)
                transient_bytes = sum(transient.values())
            elif worst not in ("steady_step", "first_step") and ph[worst] > ph["steady_step"]:
                phase, activations = worst, 0
                acts_by = dict.fromkeys(acts_by, 0)
                transient = {k: v for k, v in fb_transient.items() if k in PERSISTENT_BUFFERS}
                if worst in phases.RL_PHASES:
                    held = rl_states[worst]     # what is offloaded is on the host; the fp32 copies go with the optimizer
                keeps_copies = (worst != "checkpoint_load" and not
                                (worst in phases.RL_PHASES and cfg.training.rl_offload_optimizer))
                if keeps_copies:
                    transient.update((k, step[k]) for k in ("optimizer_fp32_grad_copies", "recompute_retained_inputs")
                                     if step.get(k))
                elif worst == "checkpoint_load":
                    transient = {}
                transient.update(parts[worst])
                transient_bytes = sum(transient.values())
            allocated = sum(held) + activations + transient_bytes
            reserved = allocated + int(ALLOCATOR_RESERVE_FRACTION * allocated)
            if replay:
                pending.append((0, (r, bm, layout, acts, extras, loss, plan, chunk_acts, counts, fb_transient,
                                    step, st.weights, st.gradients, st.optimizer, dense_shard, no_wgrad, allocated)))
            stages.append(StageEstimate(
                s_idx, plan.layers, plan.embedding, has_loss, n_mtp,
                dense_p + expert_p + (vis.frozen if plan.embedding and vis is not None else 0),
                expert_p, n_flight, *held, activations, transient_bytes, allocated,
                reserved, reserved + overhead, acts_by, transient, reports,
                peak_phase=phase, forward_backward_bytes=fwd_bwd, optimizer_step_bytes=step_total,
                phase_bytes=ph))
            continue
        # Recipe features (estimator/memory/features): states, activations, buffers, and what lies outside the allocator.
        # Their optimizer step is not modelled separately: the forward/backward peak is reported.
        adj = feat.stage(s_idx, [c.layers for c in chunks], plan.embedding, has_loss, dense_p, linear_p, expert_p,
                         st, activations, counts, transient, bwd + work)
        acts_by.update(adj.activation_parts)
        transient, activations, grads = adj.transient, adj.activations, adj.gradients
        transient_bytes = sum(transient.values())
        fwd_bwd = adj.weights + grads + adj.optimizer + activations + transient_bytes
        kept = adj.weights + grads + adj.optimizer + sum(transient.get(k, 0) for k in PERSISTENT_BUFFERS)
        phase, step_total, step = "forward_backward", 0, {}
        if feat.step_modelled:
            step = optimizer_step_buffers(r, bm, dense_p, expert_p, dense_shard, transient,
                                          recompute_retained(r, chunks, acts), own=adj.step_own)
            step_grads = grads if adj.step_gradients is None else adj.step_gradients
            step_bytes = sum(step.values())
            step_total = adj.weights + step_grads + adj.optimizer + step_bytes
            if step_total > fwd_bwd:
                phase, transient, transient_bytes = "optimizer_step", step, step_bytes
                activations, grads = 0, step_grads
                acts_by = dict.fromkeys(acts_by, 0)
        allocated = adj.weights + grads + adj.optimizer + activations + transient_bytes
        reserved = allocated + int(ALLOCATOR_RESERVE_FRACTION * (allocated - adj.reserve_exempt))
        if replay:
            pending.append((adj.reserve_exempt, (
                r, bm, layout, acts, extras, loss, plan, chunk_acts, counts, fb_transient,
                step if feat.step_modelled else {}, adj.weights, grads, adj.optimizer, dense_shard, no_wgrad,
                allocated - adj.reserve_exempt)))
        outside = {**adj.outside_allocator, **feat.step_outside(fwd_bwd, step_total, kept)}
        stages.append(StageEstimate(
            s_idx, plan.layers, plan.embedding, has_loss, n_mtp,
                dense_p + expert_p + (vis.frozen if plan.embedding and vis is not None else 0), expert_p, n_flight,
            adj.weights, grads, adj.optimizer, activations, transient_bytes, allocated, reserved,
            reserved + overhead + sum(outside.values()), acts_by, transient, reports,
            sum(adj.host.values()), adj.host, outside,
            peak_phase=phase, forward_backward_bytes=fwd_bwd, optimizer_step_bytes=step_total))
    if replay:
        stages = _with_replayed_reserve(stages, pending)
    peak_stage = max(stages, key=lambda s: s.device_bytes)
    peak = Peak(stage=peak_stage.stage, allocated_bytes=peak_stage.allocated_bytes,
                reserved_bytes=peak_stage.reserved_bytes, device_bytes=peak_stage.device_bytes)
    if peak_only:
        return peak, peak_stage
    # the layout as configured (with hybrid CP, r holds the busiest sub-sample's sizes: model/resolve.py)
    cp_cfg = cfg.parallelism.context_parallel_size
    seq_cfg = (tr.seq_length or cfg.model.max_position_embeddings) if cfg.parallelism.hybrid_context_parallel else r.s
    parallel = {"tp": t, "pp": p, "dp": r.dp * r.cp // cp_cfg, "cp": cp_cfg, "ep": r.ep, "etp": r.etp, "edp": r.edp,
                "vpp": r.v, "sequence_parallel": r.sp, "num_microbatches": r.m, "seq_length": seq_cfg,
                "micro_batch_size": tr.micro_batch_size, "world_size": r.world, "padded_vocab_size": r.Vp,
                "microbatch_group_size": r.group if r.v > 1 else None,
                "pipeline_layout": cfg.parallelism.pipeline_model_parallel_layout,
                "dense_optimizer_shards": feat.shards()[0] if feat else (dense_shard if bm.distributed else 1),
                "expert_optimizer_shards": ((feat.shards()[1] if feat else (r.edp if bm.distributed else 1))
                                            if r.E else None),
                "bytes_per_parameter": {"weights": bm.weight, "linear_weights": bm.linear_weight,
                                        "fp8_cache": bm.fp8_cache, "gradients": bm.grad,
                                        "optimizer_unsharded": bm.optimizer}}
    arch = gpu_arch(cfg)
    cc = compute_capability(arch)
    return Estimate(_parameters=lambda: count_parameters(r), stages=tuple(stages), peak=peak, parallel=parallel,
                    gpu_arch={"arch": arch, "compute_capability": f"{cc[0]}.{cc[1]}",
                              "assumed": cfg.training.gpu_arch is None},
                    _assumptions=lambda: tuple(_assumptions(r, bm)), _config=cfg)


#: Stages of a pipeline replayed through the allocator at most (the first, the last, the fullest, evenly spaced).
MAX_REPLAYED_STAGES = 8


def _with_replayed_reserve(stages: list, pending: list) -> list:
    """The stages with their reserved (and device) bytes from the allocator replay. Of more than
    :data:`MAX_REPLAYED_STAGES` stages, the first, the last, the one with the most allocated and evenly spaced ones
    are replayed; each other stage takes the reserved / allocated ratio of the nearest replayed one."""
    n = len(stages)
    if n <= MAX_REPLAYED_STAGES:
        chosen = set(range(n))
    else:
        fullest = max(range(n), key=lambda i: stages[i].allocated_bytes)
        chosen = {0, n - 1, fullest}
        k = MAX_REPLAYED_STAGES - len(chosen)
        chosen |= {round(j * (n - 1) / (k + 1)) for j in range(1, k + 1)}
    ratio = {}
    for i in sorted(chosen):
        exempt, args = pending[i]
        ratio[i] = exempt + _replayed(*args)
    out = []
    for i, s in enumerate(stages):
        if i in ratio:
            new = ratio[i]
        else:
            j = min(ratio, key=lambda c: (abs(c - i), c))
            new = max(s.allocated_bytes * ratio[j] // max(stages[j].allocated_bytes, 1), s.allocated_bytes)
        out.append(s._replace(reserved_bytes=new, device_bytes=s.device_bytes - s.reserved_bytes + new))
    return out


#: Step buffers made one tensor per main parameter (estimator/memory/optimizer_step.py): the fp32 gradient copies
#: (``_copy_model_grads_to_main_grads``: ``model_grad.float()`` per parameter, kept to the next ``zero_grad``) and
#: the implementation's temporaries (``torch._foreach_sqrt`` of a group's ``exp_avg_sq`` list, pytorch
#: ``torch/optim/adam.py`` ``_multi_tensor_adam``; Transformer Engine FusedAdam's unscaled copies per state).
_PER_PARAMETER = ("optimizer_fp32_grad_copies", "optimizer_temporaries")

#: Names of ``StageEstimate.transient`` entries the trace places itself (the rest are held across the passes).
_TRACED = ("backward_working_set", "loss_forward", "loss_backward", "output_layer_wgrad", "embedding_wgrad")


def _replayed(r: Resolved, bm, layout: tuple, acts, extras, loss, plan, chunk_acts: list, counts: tuple,
              transient: dict, step: dict, weights: int, gradients: int, optimizer: int, dense_shard: int,
              no_wgrad: bool, allocated: int) -> int:
    """Reserved bytes of one stage from the replay of its allocation trace (:mod:`estimator.memory.reserved`): the
    simulator's peak of reserved segments, never below the estimate's ``allocated`` (the trace's own allocated peak
    differs from the estimate's by the allocator's rounding and the trace's simplifications)."""
    cfg = r.cfg
    tr, pr = cfg.training, cfg.precision
    conf = parse_alloc_conf(tr.pytorch_cuda_alloc_conf)
    per_kind, emb, vocab_weight, norm, mtp_dense = layout[:5]
    parts = [layer_activations(r, kind, parts=True).parts for kind in r.kinds]
    shapes = [kind_linear_shapes(r, kind) for kind in r.kinds]
    B = 4 if pr.params_dtype == "fp32" else 2
    full = tr.recompute_granularity == "full"
    fused = tr.gradient_accumulation_fusion and not tr.peft
    unfused = tr.attention_backend in ("unfused", "local") or tr.transformer_impl == "local"
    # the unfused attention's scores before the softmax: b x a/t x s x s (estimator/model/local_attention.py)
    scores_input = B * r.b * (r.a // r.t) * r.s * r.s if unfused else 0
    soft = unfused and torch_softmax(r)      # PyTorch's softmax rather than Megatron's fused kernel
    # the local routed experts run one by one, each with tensors of its own (SequentialMLP), without grouped GEMM
    sequential = 0 if cfg.model.moe_grouped_gemm or not r.E else r.E // r.ep
    n_rec = tr.recompute_num_layers if tr.recompute_num_layers is not None else 1
    Tn = r.s * r.b // r.cp // (r.t if r.sp else 1)
    # sequence parallelism's all-gathered linear inputs (Transformer Engine; Megatron's local linears gather into
    # the global buffer) and whole-sequence row-parallel outputs (reserved._sequence_parallel): the
    # context-parallel rank's sequence x micro-batch x hidden
    sp_comm = (0, 0)
    if r.t > 1 and r.sp:
        gathered = Tn * r.t * r.h
        sp_comm = (0 if tr.transformer_impl != "transformer_engine" else gathered // 2 if pr.fp4
                   else gathered if quantized(pr) else B * gathered, B * gathered)
    # context parallelism's all-to-all: q, k, v and the attention output from the CP stream's pool
    # (reserved._context_parallel_a2a)
    cp_a2a = r.cp > 1 and cfg.parallelism.cp_comm_type in ("a2a", "a2a+p2p") and \
        tr.transformer_impl == "transformer_engine"
    # the all-to-all dispatcher's permuted, dispatched, sorted-back and returned tokens with expert parallelism
    # (reserved._alltoall_dispatch): one pool's routed rows x hidden (balanced routing), in the activations' dtype
    dispatch: tuple = ()
    if r.E and r.ep > 1 and r.t == 1 and r.etp == 1 and not r.fmv and \
            cfg.model.moe_token_dispatcher_type == "alltoall":
        dispatch = (B * routed_rows(r, r.s * r.b // r.cp, Tn) * (r.lat or r.h), B * Tn * r.h, r.E // r.ep)
    # PyTorch FSDP2: no gradient buffer; each unit's gradient (weights' dtype, its shard over the data x context
    # parallel ranks) is made by its reduce-scatter at the end of its backward (FSDP2 data-parallel size, else 0)
    fsdp2 = r.dp * r.cp if cfg.parallelism.use_torch_fsdp2 else 0
    per_layer_params, other, first = [], [], []
    chunks = []
    for c, ca in zip(plan.chunks, chunk_acts):
        layers = []
        for j, i in enumerate(c.layers):
            k = r.layer_kinds[i]
            lin, exp = shapes[k]
            per_layer_params.append((lin, exp, per_kind[k][0] - sum(o * n_in * n for o, n_in, n in lin)))
            mode = None
            if full:
                if tr.recompute_method == "block":
                    mode = "full" if j < n_rec else None
                else:
                    mode = "full" if j % max(n_rec, 1) == 0 else "dropped"
            wg = tuple(bm.weight * o * n_in for o, n_in, n in lin for _ in range(n)) if not fused else ()
            lt = reserved.layer_tensors(acts[k], parts[k], mode, wg, scores_input, soft, sequential, sp_comm, cp_a2a,
                                        dispatch)
            if fsdp2:
                n_el = sum(o * n_in * n for o, n_in, n in lin + exp) + per_layer_params[-1][2]
                lt = lt._replace(unit_grad=-(-n_el // fsdp2) * B)
            layers.append(lt)
        if c.embedding:
            first.append(emb)
        if c.loss:
            other.append(norm + (0 if (r.tied and c.embedding) else vocab_weight))
        if c.mtp:
            other.append(len(c.mtp) * mtp_dense)
        head = tuple(x for x in (ca[3], ca[6]) if x)     # the embedding's, or an fp32 received input
        tail: tuple = ()
        if ca[4]:
            tail = reserved.scaled([B * Tn * r.h, B * Tn * r.h], ca[4] - loss.saved)   # the final norm's input, output
        if ca[5]:
            tail += (ca[5],)
        chunks.append((head, tuple(layers), tail, bool(c.embedding), bool(ca[4])))
    # routed experts without expert parallelism (and ETP = TP) share the dense gradient buffer and optimizer
    shared = bool(r.E) and not separate_expert_optimizer(r)
    dense, experts = reserved.parameter_tensors(per_layer_params, other, bm.weight, tuple(first), interleave=shared)
    vocab_wgrad = 0 if no_wgrad else bm.weight * vocab_weight
    # byte_model's optimizer bytes are Adam's: the master copy is what they hold beyond the two moments.
    adam_moments = (DTYPE_BYTES[pr.exp_avg_dtype] + DTYPE_BYTES[pr.exp_avg_sq_dtype]
                    if pr.use_precision_aware_optimizer else 8)
    n_states = 2 if tr.optimizer == "adam" else (1 if (tr.optimizer != "sgd" or tr.sgd_momentum > 0) else 0)
    trace = reserved.build(
        dense=dense, experts=experts, weight_bytes=bm.weight, weights=weights, gradients=0 if fsdp2 else gradients,
        optimizer=optimizer, master_bytes=max(bm.optimizer - adam_moments, 0), state_count=n_states,
        dense_shard=dense_shard, expert_shard=r.edp, distributed=bm.distributed,
        persistent=tuple(v for k, v in transient.items() if k in PERSISTENT_BUFFERS and v > 0),
        chunks=tuple(chunks),
        loss=(_positive(loss.forward_extra), _positive(loss.saved), _positive(loss.backward_extra),
              _positive(vocab_wgrad, B * Tn * r.h)),
        embedding_wgrad=vocab_wgrad,
        counts=tuple(counts) if r.v > 1 else (counts[0],), microbatches=r.m,
        step=tuple(v for k, v in step.items() if k not in PERSISTENT_BUFFERS and k not in _PER_PARAMETER and v > 0),
        step_per_param=tuple((step[k], k == "optimizer_fp32_grad_copies") for k in _PER_PARAMETER if step.get(k)),
        separate_experts=separate_expert_optimizer(r),
        root_grad=-(-(sum(other) + sum(first)) // fsdp2) * B if fsdp2 else 0,
        extra=tuple(v for k, v in transient.items() if k not in PERSISTENT_BUFFERS and k not in _TRACED and v > 0),
        full_graph=tr.cuda_graph_impl == "full_iteration", warmup_steps=tr.cuda_graph_warmup_steps,
        clone_bytes=0 if pr.use_precision_aware_optimizer else bm.weight,
        empty_cache_level=tr.empty_unused_memory_level, experts_in_dense=shared)
    budget = max(reserved.MAX_EVENTS // min(r.p, MAX_REPLAYED_STAGES), reserved.MIN_STAGE_EVENTS)
    sim = reserved.replay(reserved.events(trace, budget), conf)
    return max(sim.peak_reserved, allocated)


def _positive(*sizes: int) -> tuple:
    return tuple(x for x in sizes if x > 0)


def sum_activations(parts: list) -> LayerActivations:
    """The activations of several layers run one after the other (the layers of one MTP depth)."""
    return LayerActivations(*(sum(x) for x in zip(*(p[:6] for p in parts))), None,
                            sum(p.attention_backward_peak for p in parts))


def _chunk_reports(plan, counts: tuple) -> tuple:
    """Per chunk of a stage: its layers, the embedding / output layer / MTP layers it holds and its
    micro-batches in flight at the stage's peak (memoised on the stage plan: the search builds many alike)."""
    hit = tuple(ChunkReport(c.layers, c.embedding, c.loss, len(c.mtp), k) for c, k in zip(plan.chunks, counts))
    if len(plan.reports) > 256:
        plan.reports.clear()
    plan.reports[counts] = hit
    return hit


def _communicators(r: Resolved) -> int:
    """Process groups of more than one rank that a GPU talks through (a group of one rank needs none): DP 1 -> 2
    adds the data-parallel group, and in an MoE model the expert-data-parallel group where it grows from one rank;
    hierarchical context parallelism adds one group per level of more than one rank, dynamic (hybrid) context
    parallelism one per power of two from 2 below the data x context-parallel size, ``create_all_gather_group``
    Megatron-FSDP's all-gather copies of the data-parallel groups (:func:`_all_gather_groups`)."""
    par = r.cfg.parallelism
    sizes = [r.t, r.p, r.dp * r.cp, par.context_parallel_size]     # r.cp is a sub-sample's group with hybrid CP
    if r.E:
        sizes += [r.ep, r.etp, r.edp]
    if par.hybrid_context_parallel:
        # Dynamic CP: a group of each power of two below dp x cp (Megatron-LM @ d98e8a64 : megatron/core/
        # parallel_state.py create_hybrid_dp_cp_groups); the schedule may widen any sub-sample to any of them
        # (hybrid_cp_schedule.py fill_empty_gpus), so each is counted as used.
        sizes += hybrid_cp_groups(r.dp * r.cp)
    # Hierarchical CP: one more group per level (Megatron-LM @ d98e8a64 : megatron/core/parallel_state.py
    # initialize_model_parallel, create_hierarchical_groups over the CP ranks), each its own communicator.
    sizes += list(par.hierarchical_context_parallel_sizes or ())
    sizes += _all_gather_groups(r)
    return sum(1 for s in sizes if s > 1)


def _all_gather_groups(r: Resolved) -> list[int]:
    """Sizes of the extra all-gather groups of ``create_all_gather_group`` that a GPU talks through.

    Megatron-LM @ d98e8a64 : megatron/training/training.py ``get_model`` calls
    megatron/core/parallel_state.py ``create_all_gather_groups``: a copy of the data x context-parallel group
    (``dp_cp_ag``) and, with expert parallelism above one, of the expert-data-parallel group (``expt_dp_ag``). Only
    Megatron-FSDP uses them (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py passes them as
    ``fsdp_group_ag``; megatron_fsdp/param_and_grad_buffer.py gathers the model-weight buffer through them), and
    not where HSDP shards over the outer group (``should_create_hfsdp_helper_buffers``) or nothing is sharded
    (no_shard: no weight all-gather). PyTorch sets up a NCCL communicator at a group's first collective
    (Megatron-LM's ``init_process_group`` binds no device), so an unused group costs nothing.
    """
    par = r.cfg.parallelism
    if not (par.create_all_gather_group and par.use_megatron_fsdp) or \
            par.data_parallel_sharding_strategy == "no_shard" or \
            (par.num_distributed_optimizer_instances > 1 and par.outer_dp_sharding_strategy != "no_shard"):
        return []
    return [r.dp * r.cp] + ([r.edp] if r.E and r.ep > 1 else [])


#: Family names of the ``training.gpu_arch`` choices, for the assumptions.
_ARCH_NAMES = {"sm_80": "Ampere", "sm_86": "Ampere", "sm_89": "Ada", "sm_90": "Hopper", "sm_100": "Blackwell",
               "sm_103": "Blackwell Ultra", "sm_120": "Blackwell RTX", "sm_121": "Blackwell GB10",
               "gfx942": "AMD CDNA 3", "gfx950": "AMD CDNA 4"}


def _arch_assumption(cfg, arch: str) -> str:
    """The assumptions' sentence on the GPU architecture (estimator/config/derived.py ``gpu_arch``)."""
    cc = compute_capability(arch)
    name = f"{arch} ({_ARCH_NAMES.get(arch, arch)}, compute capability {cc[0]}.{cc[1]})"
    amd = (" AMD: Transformer Engine's ROCm fork is not modelled; its FP8 copies follow the upstream rule for "
           "capability 9.x (a transposed copy, as on Hopper)." if is_amd(arch) else "")
    if cfg.training.gpu_arch is not None:
        return f"GPU architecture {name}: FP8 weight copies and GEMM workspaces as Transformer Engine and PyTorch " \
               f"allocate them there.{amd}"
    why = ("the recipe (MXFP8 or NVFP4) runs only on Blackwell" if arch != "sm_90" else "the default")
    return (f"No GPU named: {name} assumed ({why}); name the GPU (--gpu, or training.gpu_arch) for another: "
            "on B200/GB200/B300 (sm_100, sm_103) delayed and tensorwise FP8 keep no transposed weight copy; on "
            "A100 and L40S the GEMM workspaces are smaller.")


def _assumptions(r: Resolved, bm) -> list[str]:
    cfg = r.cfg
    tr, pr = cfg.training, cfg.precision
    plain = not (cfg.parallelism.use_megatron_fsdp or cfg.parallelism.use_torch_fsdp2) and tr.optimizer == "adam"
    # With PEFT the per-parameter gradient and optimizer bytes apply to the adapters only: the base is frozen.
    trained = ("of each trainable adapter parameter; the frozen base weights take " f"{bm.weight} B each and nothing "
               "more " if tr.peft else "of each trained vision-tower parameter; the frozen language model "
               "(freeze_language_model) keeps its weights only, and its linear layers save no inputs for weight "
               "gradients " if tr.freeze_language_model else "per parameter ")
    out = [
        f"Weights {bm.weight} B, gradients {bm.grad} B and optimizer states {bm.optimizer} B {trained}"
        + (f"(the optimizer part sharded over {r.dp * r.cp} data x context-parallel ranks"
           + (f", {r.edp} expert-data-parallel ranks for routed experts" if r.E else "") + ")"
           if bm.distributed else "(no distributed optimizer: nothing sharded)") + "."
        if plain else "Model states as the FSDP / optimizer lines below say.",
        ("Adam optimizer (two moments per parameter); " if tr.optimizer == "adam" else "")
        + ("Megatron-Core with Transformer Engine layers." if tr.transformer_impl == "transformer_engine" else
           "Megatron-Core's local layers (transformer_impl local: its own linear layers, PyTorch norms and unfused "
           "attention; no Transformer Engine)."),
        f"Vocabulary padded from {r.V} to {r.Vp} (multiple of {cfg.model.make_vocab_size_divisible_by} x TP {r.t}).",
    ]
    if cfg.parallelism.hybrid_context_parallel:
        pcfg = cfg.parallelism
        out.append(f"Dynamic context parallelism (max_seqlen_per_dp_cp_rank {pcfg.max_seqlen_per_dp_cp_rank:,}): "
                   f"each sequence runs alone, forward then backward; the busiest is one of {r.s:,} tokens over "
                   f"{r.cp} of the {r.dp * r.cp} data x context-parallel ranks, {r.s // r.cp:,} tokens a rank. The "
                   "global batch's token ids, labels, loss masks and positions each rank holds through the step "
                   "(28 B per token received) are not counted.")
    elif r.m is None:
        out.append("global_batch_size not set: assumed enough micro-batches to fill the pipeline "
                   f"(at least {r.p * r.v}" + (f", in whole groups of {r.group}" if r.v > 1 else "") + ").")
    else:
        out.append(f"{r.m} micro-batches per step (global_batch_size / (micro_batch_size x DP {r.dp})).")
    par = cfg.parallelism
    if par.pipeline_model_parallel_layout is not None:
        out.append(f"Pipeline layout {par.pipeline_model_parallel_layout}: layers, embedding, output layer and MTP "
                   f"layers on the chunks it lists ({r.p} stages x {r.v} virtual stages).")
    elif par.account_for_embedding_in_pipeline_split or par.account_for_loss_in_pipeline_split:
        out.append("The " + " and ".join(n for n, on in (("embedding", par.account_for_embedding_in_pipeline_split),
                                                        ("loss", par.account_for_loss_in_pipeline_split)) if on)
                   + " count as layer slots of the pipeline split (one decoder layer fewer on that chunk).")
    if r.p > 1 and r.v > 1:
        out.append(f"Interleaved 1F1B schedule, micro-batch groups of {r.group}: rank r holds 2 (p - r - 1) + "
                   f"(v - 1) x {r.group} + 1 chunk-micro-batches at its peak, in the heaviest mix of chunks "
                   "the schedule holds before a backward pass.")
    elif r.p > 1:
        out.append("1F1B schedule: stage r holds the activations of min(p - r, m) micro-batches at the peak.")
    if tr.attention_backend in ("unfused", "local") or tr.transformer_impl == "local":
        out.append("Unfused attention: the s x s attention scores are stored per head (quadratic in s).")
    else:
        out.append("Flash/fused attention: no s x s score matrix is stored (activations linear in s).")
    if r.E:
        out.append(_routing_assumption(cfg))
        if cfg.model.moe_expert_rank_capacity_factor is not None:
            out.append(_rank_budget_assumption(r))
        if r.fmv:
            out.append(_ernie_pools_assumption(r))
    mixers = {k.mixer for k in r.kinds}
    if "mamba" in mixers:
        out.append("Mamba-2 layers: Megatron-Core's memory-efficient fused scan (mamba_split_conv1d_scan_combined) "
                   "keeps its input projection and ungated output; the chunk states it recomputes in the backward pass "
                   "are counted in the backward working set. Mamba's context-parallel all-to-all buffers are not "
                   "counted.")
    if "dsa" in mixers:
        backend = r.dsa.backend if r.dsa else "none"
        out.append("DeepSeek sparse attention layers: " + (
            "Megatron-Core's PyTorch reference path (dsa_kernel_backend none) scores every key densely in fp32 and "
            "keeps about 13 bytes per query, key and head (quadratic in the sequence length)" if backend == "none"
            else f"the fused {backend} sparse MLA keeps copies of q and the latent key and the top-k indices")
            + "; the indexer's transient forward scores are not counted.")
    if "gdn" in mixers:
        out.append("Gated delta net layers: the tensors GatedDeltaNet.forward and the chunked gated delta rule keep; "
                   "the rule's hidden states, recomputed in the backward pass, are counted in the working set.")
    if tr.cross_entropy_loss_fusion and tr.cross_entropy_fusion_impl == "te":
        v = r.cfg.precision.transformer_engine_version
        if te_version(v) < TE_FP32_CE_GRADIENT:
            out.append(f"Fused cross-entropy (te, Transformer Engine {v}, before 2.18): only the logits are kept; "
                       "the gradient is computed into them in place.")
        else:
            out.append(f"Fused cross-entropy (te, Transformer Engine {v}, 2.18 or later): keeps an fp32 gradient of "
                       "the logits' size (not the softmax); the bf16 logits live until the loss is computed, its "
                       "gradient's bf16 cast through the backward (set precision.transformer_engine_version for an "
                       "older release).")
    elif tr.cross_entropy_loss_fusion:
        out.append("Fused cross-entropy (native): keeps an fp32 softmax of the logits; torch.compile adds one "
                   "more fp32 buffer of that size while it runs.")
    else:
        out.append("Cross-entropy keeps an fp32 softmax of the logits; the bf16 logits live until the loss is "
                   "computed.")
    if pr.fp32_residual_connection:
        out.append("FP32 residual stream: the norms save bf16 copies of the fp32 layer input (the same bytes); "
                   "full-recompute checkpoints, a later stage's received input and the backward's residual gradient "
                   "are fp32.")
    if tr.distillation_cached_logits:
        out.append(f"Cached-logits distillation (top-{tr.distillation_top_k} teacher log-probabilities): the KL loss "
                   "on the main head keeps exp(logits) and the fp32 log-softmax (8 B per logit element) and the "
                   "teacher's top-K terms until its backward pass, and while it runs the captured logits and their "
                   "fp32 copy; the teacher files' prefetch is pinned host memory, not counted.")
    if tr.transformer_impl == "transformer_engine" and tr.gradient_accumulation_fusion and not tr.peft:
        out.append("Transformer Engine keeps one dummy weight-gradient tensor per distinct linear weight "
                   "shape (gradients accumulate straight into the fp32 main_grad buffer).")
    arch = gpu_arch(cfg)
    out.append(_arch_assumption(cfg, arch))
    if fp8_output.active(pr):
        out.append("Output layer in MXFP8 (fp8_output_proj: Transformer Engine's Linear): its bf16 weight with MXFP8 "
                   "row-wise and column-wise copies, its input saved in MXFP8, the logits' gradient quantized both "
                   "ways in its backward (estimator/memory/features/fp8_output.py).")
    recipe = pr.fp8_recipe or "delayed"
    # Per-tensor FP8 (delayed, tensorwise): the column-wise copy is a transpose only where FP8 GEMMs are TN-only.
    transpose = recipe in BLOCK_SCALED or per_tensor_transpose(arch)
    scales = {"mxfp8": " Each FP8 copy carries its E8M0 scales (1 B per 32 elements, padded per tensor), as does "
                       "each saved input (column-wise only).",
              "blockwise": " Each FP8 weight copy carries fp32 scales per 128 x 128 block, each saved input fp32 "
                           "scales per 128 elements (column-wise only), padded per tensor."}.get(recipe, "")
    if pr.fp8 and pr.fp8_param_gather:
        copy = ("with a column-wise FP8 copy (1 B)" if transpose else
                f"with no transposed copy ({arch} runs FP8 GEMMs in any layout, so the one copy serves both)")
        out.append(f"FP8 ({recipe} recipe) with fp8_param_gather: linear-layer weights are held "
                   f"in FP8 (1 B) {copy}; embedding, output layer, norms and router stay "
                   f"in {pr.params_dtype}; linear-layer inputs are saved in 1 byte." + scales)
    elif pr.fp8:
        copies = ("row-wise and column-wise FP8 copies (2 B per weight)" if transpose else
                  f"one FP8 copy (1 B per weight: {arch} runs FP8 GEMMs in any layout, so no transposed copy)")
        out.append(f"FP8 ({recipe} recipe): {copies} of the linear weights are cached and "
                   "linear-layer inputs are saved in 1 byte." + scales)
    if pr.fp4:
        held = (f"held in NVFP4 (fp4_param_gather): a row-wise and a column-wise copy, 0.5 B each, with no "
                f"{pr.params_dtype} weight" if pr.fp4_param_gather else
                f"kept in {pr.params_dtype} with cached row-wise and column-wise NVFP4 copies (0.5 B each)")
        out.append(f"NVFP4 (nvfp4 recipe): linear-layer weights are {held}; each copy carries E4M3 scales (1 B per "
                   "16 elements, padded per tensor to 128 x 4 tiles). Linear-layer inputs are saved column-wise in "
                   "0.5 B with their scales (a fused norm+linear under sequence parallelism keeps the row-wise copy "
                   "too; the attention projection keeps the bf16 attention output instead); embedding, output layer, norms and router stay in " + pr.params_dtype + ". Not measured: "
                   "no Blackwell GPU was available.")
    if not cfg.training.optimizer_cpu_offload:      # the offloaded step: features/assumptions.py
        if not features.step_modelled(cfg):
            out.append("Optimizer step: not modelled with these features (the forward/backward peak is reported).")
        else:
            out.append(features.muon_step.assumption(r, bm) if tr.optimizer == "muon"
                       else optimizer_step_assumption(r, bm))
    out.append(_phases_assumption(cfg))
    if tr.rl_algorithm != "none":
        out.append(_rl_assumption(cfg, r))
    ws = workspace_bytes(r, bool(r.E))
    out.append(f"Transient buffers include {ws / MIB:.0f} MiB of GEMM workspaces ("
               + ("Transformer Engine and PyTorch" if tr.transformer_impl == "transformer_engine" else "PyTorch's")
               + f", {arch}'s sizes with CUBLAS_WORKSPACE_CONFIG "
               + (tr.cublas_workspace_config if tr.cublas_workspace_config.strip() else
                  "set to :4096:8 by deterministic mode" if tr.deterministic_mode else "unset")
               + ", held all run) and the largest buffer alive at the backward peak.")
    if tr.reserved_memory_model == "replay":
        out.append("reserved: one training step per stage (two iterations: the first makes the optimizer states) "
                   "replayed tensor by tensor through a simulation of PyTorch's caching allocator ("
                   + (f"PYTORCH_CUDA_ALLOC_CONF {tr.pytorch_cuda_alloc_conf}" if tr.pytorch_cuda_alloc_conf.strip()
                      else "PyTorch's default settings") + "): its peak of reserved segments (estimator/memory/"
                   "reserved.py). The trace holds the saved tensors, gradients, buffers and optimizer-step "
                   "temporaries this estimate counts, not every kernel's temporaries, so it tends to read a little "
                   "low." + ("" if not tr.empty_unused_memory_level else
                             " torch.cuda.empty_cache() is replayed after the forward-backward passes"
                             + (" and after the optimizer step" if tr.empty_unused_memory_level >= 2 else "")
                             + f" (empty_unused_memory_level {tr.empty_unused_memory_level})."))
    out.append((f"reserved = allocated x {1 + ALLOCATOR_RESERVE_FRACTION:.2f} (caching allocator); device"
                if tr.reserved_memory_model != "replay" else "Device") + " adds "
               f"{CUDA_CONTEXT_BYTES // MIB} MiB CUDA context and {NCCL_BYTES_PER_COMMUNICATOR // MIB} MiB per "
               f"NCCL communicator ({_communicators(r)} here).")
    out.extend(features.assumptions(r))
    vis = vision_stage(r)
    if vis is not None:
        m = cfg.model
        state = {(False, False): "trained", (True, False): "encoder frozen, merger trained",
                 (False, True): "encoder trained, merger frozen", (True, True): "frozen"}[
            (tr.freeze_vision_model, tr.freeze_vision_projection)]
        images = (f"{tr.images_per_sample} image(s) of {tr.image_resolution} pixels a sequence, "
                  f"{image_patches(m, tr.image_resolution):,} patches and {image_tokens(m, tr.image_resolution):,} "
                  "tokens each (part of the sequence); their activations are counted with the embedding's"
                  if tr.images_per_sample else "no images (training.images_per_sample 0): no vision activations")
        kind = tower_kind(m)
        split = (f"split over TP {r.t}" if kind.tp_split
                 else "not split: " + ("plain PyTorch modules" if m.vision_model_type == "step37"
                                       else "Hugging Face's module") + f", whole on every tensor-parallel rank (TP {r.t})"
                 + (", its projector's linear split" if kind.projector == "pool" else ""))
        sp = sound_params(m)        # omni28: Nemotron Omni's sound tower shares the first stage's count
        sound = sp.encoder.per_rank(r.t) + sp.projection.per_rank(r.t) if sp else 0
        if tr.video_frames_per_sample:
            images = ("" if not tr.images_per_sample else images + "; ") + (
                f"{tr.video_frames_per_sample} video frame(s) of {tr.image_resolution} pixels a sequence, "
                f"{m.vision_temporal_patch_size} a patch, each group one image's patches and tokens")
        out.append(f"Vision tower ({m.vision_num_layers} ViT layers, {vis.trained + vis.frozen - sound:,} parameters a "
                   f"GPU, {state}) on the first stage, {split}, in bf16; {images} (estimator/memory/vision.py).")
        if sp:
            frozen = {(False, False): "trained", (True, False): "encoder frozen, projection trained",
                      (False, True): "encoder trained, projection frozen", (True, True): "frozen"}[
                (tr.freeze_sound_encoder, tr.freeze_sound_projection)]
            clips = (f"{tr.audio_clips_per_sample} clip(s) of {tr.audio_clip_seconds:g} s a sequence, "
                     f"{clip_tokens(m, tr.audio_clip_seconds):,} tokens each (part of the sequence)"
                     if tr.audio_clips_per_sample else "no audio (training.audio_clips_per_sample 0)")
            out.append(f"Sound tower (Parakeet, {m.sound_num_layers} conformer blocks, {sound:,} parameters a GPU, "
                       f"{frozen}) on the first stage, the encoder whole on every tensor-parallel rank; {clips} "
                       "(estimator/model/audio.py).")
    out.append("Not modelled: the memory of a failed allocation retry.")
    return out


def _phases_assumption(cfg) -> str:
    """One sentence: which moments of the run beyond the steady step count in the totals (estimator/memory/phases.py)."""
    tr = cfg.training
    on = phases.counted(cfg)
    parts = [("evaluation (eval_interval " + str(tr.eval_interval) + ")") if "evaluation" in on else
             "no evaluation (eval_interval not set" + (", or eval_iters 0)" if tr.eval_interval else ")"),
             (f"checkpoint save and load in {tr.ckpt_format} (save_interval {tr.save_interval})")
             if "checkpoint_save" in on else "no checkpoints (save_interval not set)"]
    return ("Phases beyond the steady step (phase_bytes per stage): the first step never holds more (Adam's moments "
            "are created at its optimizer step); counted where they hold more than the steady step: "
            + "; ".join(parts) + ". Recipe features (FSDP, offloading, PEFT, ...) report the steady step only.")


def _rl_assumption(cfg, r) -> str:
    """One sentence: the RL step's phases and what they assume (estimator/memory/phases.py, "RL training")."""
    tr = cfg.training
    lb = tr.rl_logprob_micro_batch_size or r.b
    off = [w for w, on in (("weights", tr.rl_offload_params), ("gradients", tr.rl_offload_grads),
                           ("optimizer states", tr.rl_offload_optimizer)) if on]
    share = (f"the rollout engine holds {tr.rl_rollout_gpu_memory_fraction:g} of the GPU beside the training side's "
             "resident states (in the verdict)" if tr.rl_rollout_gpu_memory_fraction is not None
             else "no colocated rollout engine")
    return (f"RL step ({tr.rl_algorithm}, the actor's side; a critic or reward model is not counted): forward-only "
            f"log-prob passes of {lb} sequences per micro-batch with verl's logits processing (bf16 logits and "
            f"Megatron's fp32 copy{', the entropy' if tr.rl_logprob_entropy else ''}); entropy in the update: "
            f"{'yes' if tr.rl_entropy else 'no'}; reference model "
            f"{tr.rl_reference_model}; offloaded outside the update: {', '.join(off) or 'nothing'}; {share}. "
            "Features that change the model states (FSDP, offloading, PEFT) report the steady step only.")


def _rank_budget_assumption(r) -> str:
    """HybridEP's static per-rank budget and what the estimate takes for it (estimator/model/layers/moe.py)."""
    from ..model.layers.moe import arriving_rows, rank_budget
    T = r.s * r.b // r.cp
    Tn = T // r.t if r.sp else T
    budget, rows = rank_budget(r, Tn if r.sp else T), arriving_rows(r, T, Tn)
    c = r.cfg.model.moe_expert_rank_capacity_factor
    head = (f"HybridEP per-rank budget (moe_expert_rank_capacity_factor {c:g}): {budget:,} routed rows per "
            f"micro-batch, int(tokens x top-k x {c:g}) rounded up to 256; the routing sends the busiest rank "
            f"{rows:,}. ")
    if rows > budget:
        return head + ("Above the budget: the step drops tokens and Megatron-LM's PagedStashRunner reruns it dropless "
                       "with the paged stash off; the estimate is that rerun's, at the rows the routing sends.")
    return head + ("Within the budget: every MoE layer keeps the budget's rows, whatever the routing below it (a "
                   "routing above it would rerun the step dropless at its own rows).")


def _ernie_pools_assumption(r) -> str:
    """How ERNIE-VL's tokens are split between its two expert pools (estimator/model/layers/moe.py ``pools``)."""
    m, tr = r.cfg.model, r.cfg.training
    if not r.vis:
        return (f"ERNIE-VL's expert pools: no image tokens, every token routed to the text pool's experts "
                f"({r.fm:,} wide); the vision pool ({r.fmv:,} wide) holds its weights only.")
    per = image_tokens(m, tr.image_resolution)
    f = float(tr.moe_overload_factor)
    return (f"ERNIE-VL's expert pools: {r.vis:,} tokens of each {r.s:,}-token sequence ({tr.images_per_sample} "
            f"image(s) x ({per:,} tokens + the image start and end tokens)) routed to the vision pool's experts "
            f"({r.fmv:,} wide), the rest to the text pool's ({r.fm:,} wide), each rank holding an even share, as "
            "moe_mm_token_type_ids routes them (Megatron-Bridge's Ernie45VLModel)"
            + (f"; the overload factor {f:g} applies to each pool's busiest rank, both taken on one rank" if f != 1
               else "")
            + ". Megatron-Bridge @ 067f987d's generic VLM training step passes no moe_mm_token_type_ids "
            "(training/utils/visual_inputs.py GenericVisualInputs has no such field): run through it, every token "
            "goes to the text pool, whose language-model activations are those of the estimate with "
            "images_per_sample 0" + (" (more: the text experts are wider)." if r.fm > r.fmv else "."))


def _routing_assumption(cfg) -> str:
    """The MoE routing the estimate assumes: the overload factor it used (estimator/model/layers/moe.py)."""
    m, f = cfg.model, float(cfg.training.moe_overload_factor)
    c = m.moe_expert_capacity_factor
    if c is not None and m.moe_pad_expert_input_to_capacity:
        return (f"MoE routing: every expert's input padded to capacity factor {c} x its balanced share of routed "
                "token rows, whatever the routing (training.moe_overload_factor has no effect).")
    cap = f", capped by capacity factor {c}" if c is not None else " (dropless)"
    if f == 1:
        return ("MoE routing balanced (training.moe_overload_factor 1.0, as with --moe-router-force-load-balancing): "
                f"every expert-parallel rank receives its balanced share of routed token rows{cap}. Real routing is "
                "less even, most early in training (the methodology page); with a GPU, the verdict gives the "
                "largest factor this layout fits.")
    capped = overload_cap(m, cfg.parallelism, f)
    if capped:
        return (f"MoE routing imbalance (training.moe_overload_factor {f}) capped by the layout: {capped}; the "
                f"estimate uses {effective_overload_factor(m, cfg.parallelism, f):g} x its balanced share of routed "
                f"token rows{cap}.")
    return (f"MoE routing imbalance (training.moe_overload_factor {f}): the busiest expert-parallel rank receives "
            f"{f} x its balanced share of routed token rows{cap}; with a GPU, the verdict gives the largest factor "
            "this layout fits.")



def estimate(config, *, num_microbatches: int | None = None) -> Estimate:
    """Estimate the memory of every pipeline stage of a configuration (path, dict, YAML/JSON text or Config).

    ``num_microbatches`` overrides the number derived from ``training.global_batch_size``.
    Raises :class:`~estimator.config.errors.ConfigError` listing every problem of an invalid configuration.
    """
    r = resolve(load_config(config))
    if num_microbatches is not None:
        if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
            raise ConfigError(Problem("num_microbatches", num_microbatches, "must be a positive integer"))
        if num_microbatches > MAX_BATCH:
            raise ConfigError(Problem("num_microbatches", num_microbatches, f"must be <= {MAX_BATCH:,}"))
        problem = interleaving_problem(r.p, r.v, num_microbatches, r.group)
        if problem:
            raise ConfigError(Problem("num_microbatches", num_microbatches, problem))
        r.m = num_microbatches
    return stage_memory(r)
