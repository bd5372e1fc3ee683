"""Per-stage memory: the assembly of parameters, model states, activations and transient buffers.

For each pipeline stage this module finds the layers it holds (per virtual chunk), the parameters one
of its GPUs keeps, the micro-batches in flight at the peak of the pipeline schedule, and the transient
buffers alive at that peak; then the three totals:

- ``allocated_bytes``: weights + gradients + optimizer states + activations + transient buffers, what
  ``torch.cuda.max_memory_allocated()`` reports;
- ``reserved_bytes``: plus the PyTorch caching allocator's reserve (:data:`ALLOCATOR_RESERVE_FRACTION`);
- ``device_bytes``: plus the CUDA context and NCCL communicator buffers, the figure to hold against a
  GPU's capacity.

Where the layers, the embedding, the output layer and the MTP layers sit comes from
:mod:`estimator.pipeline_layout` (per virtual chunk); the micro-batches in flight from
:mod:`estimator.schedule` (Megatron-Core ``pipeline_parallel/schedules.py``): with 1F1B stage r holds
min(p - r, m) micro-batches at its peak; with the interleaved schedule rank r runs 2 (p - r - 1) +
(v - 1) N warm-up forwards (N = ``microbatch_group_size_per_vp_stage``), so it holds that many
chunk-micro-batches plus one, capped at m v, in the heaviest mix of chunks the schedule produces.
"""

from __future__ import annotations

from . import features
from .activations import layer_activations, stage_extras
from .loss import loss_buffers
from .params import Count, attention, count_parameters, dense_mlp, embedding, final_norm, linear_weights, \
    moe_experts, moe_router, mtp_extra, output_layer, shared_expert
from .report import ChunkReport, Estimate, Peak, StageEstimate
from .resolve import DTYPE_BYTES, Resolved
from .schedule import first_chunks, held_counts, warmup
from .states import byte_model, state_bytes
from .workspaces import global_buffer_bytes, workspace_bytes

__all__ = ["ALLOCATOR_RESERVE_FRACTION", "CUDA_CONTEXT_BYTES", "NCCL_BYTES_PER_COMMUNICATOR", "in_flight",
           "stage_memory"]

MIB = 2 ** 20

#: The caching allocator keeps freed blocks for reuse, so max_memory_reserved exceeds max_memory_allocated.
#: On the 19 SimuMax B200 runs of validation/measured.yaml the excess is 2.8-9.3 % (median 4.7 %); we use 5 %.
ALLOCATOR_RESERVE_FRACTION = 0.05

#: CUDA context with cuBLAS/cuDNN/NCCL kernels loaded, outside PyTorch's allocator. nvidia-smi shows
#: roughly 500-700 MiB per process on Hopper with CUDA 12; we take 600 MiB.
CUDA_CONTEXT_BYTES = 600 * MIB

#: NCCL's own buffers per communicator a rank uses (NCCL_BUFFSIZE 4 MiB x channels x peers), an
#: order-of-magnitude figure: 128 MiB per process group of more than one rank.
NCCL_BYTES_PER_COMMUNICATOR = 128 * MIB


def in_flight(r: Resolved, stage: int, extra: int = 0) -> list[int]:
    """Virtual-chunk index of every (chunk-)micro-batch whose activations stage ``stage`` holds before its first
    backward pass, in the order of their forward passes. That is the peak when all chunks weigh the same;
    :func:`stage_memory` takes the heaviest mix the schedule ever holds (:func:`estimator.schedule.held_counts`).

    ``extra`` more warm-up (chunk-)micro-batches run before the steady state (no feature adds any today:
    the expert-parallel overlap holds the plain set, features/schedule.py)."""
    p, v, m = r.p, r.v, r.m
    if v == 1:
        n = p - stage + extra
        if m is not None:
            n = min(n, m)
        return [0] * n
    if m is None:
        m = r.group * (v + 4)
    return first_chunks(v, r.group, m, min(warmup(p, stage, v, r.group, m) + 1 + extra, m * v))


def _linear_shapes(r: Resolved, moe: bool) -> set:
    """Distinct weight shapes of one layer's linear layers on one GPU (Transformer Engine caches one dummy
    weight-gradient tensor per shape when gradients accumulate straight into main_grad)."""
    t, h, a = r.t, r.h, r.a
    up = 2 if r.gated else 1
    if r.mla:
        qk = r.qk_dim + r.rope_dim
        shapes = {(r.kv_lora + r.rope_dim, h), (a // t * (r.qk_dim + r.v_dim), r.kv_lora), (h, a // t * r.v_dim)}
        shapes |= {(r.q_lora, h), (a // t * qk, r.q_lora)} if r.q_lora else {(a // t * qk, h)}
    else:
        shapes = {((a + 2 * r.g) // t * r.dh, h), (h, a // t * r.dh)}
    if moe:
        fm = r.fm // r.etp
        shapes |= {(fm * up, h), (h, fm)}
        if r.fs:
            shapes |= {(r.fs // t * up, h), (h, r.fs // t)}
    else:
        shapes |= {(r.f // t * up, h), (h, r.f // t)}
    return shapes


def _chunk_activations(r: Resolved, layers: range, acts: dict) -> tuple[int, int, int, int]:
    """(saved bytes, attention part, mlp part, recompute working set) of one chunk for one micro-batch."""
    tr = r.cfg.training
    if not len(layers):
        return 0, 0, 0, 0
    if tr.recompute_granularity != "full":
        n_moe = sum(r.moe_layers[layers.start:layers.stop]) if r.E else 0
        n_dense = len(layers) - n_moe
        d = acts[False]
        att = n_dense * d.attention
        mlp = n_dense * d.mlp
        rec = d.recompute_peak if n_dense else 0
        if n_moe:
            e = acts[True]
            att += n_moe * e.attention
            mlp += n_moe * e.mlp
            rec = max(rec, e.recompute_peak)
        return att + mlp, att, mlp, rec
    kinds = [acts[r.moe_layers[i]] for i in layers]
    n = tr.recompute_num_layers if tr.recompute_num_layers is not None else 1
    if tr.recompute_method == "block":
        rec, keep = kinds[:n], kinds[n:]
        att = sum(k.attention for k in keep)
        mlp = sum(k.mlp for k in keep)
        ckpt = sum(k.checkpoint for k in rec)
        work = max((k.full - k.checkpoint for k in rec), default=0)
        return att + mlp + ckpt, att + ckpt, mlp, work
    # uniform (the default method): groups of n layers keep only the group's input
    n = max(n, 1)
    groups = [kinds[i:i + n] for i in range(0, len(kinds), n)]
    ckpt = sum(g[0].checkpoint for g in groups)
    work = max(sum(k.full for k in g) - g[0].checkpoint for g in groups)
    return ckpt, ckpt, 0, work


_LAYOUT_CACHE: dict = {}


def _parameter_layout(r: Resolved) -> tuple:
    """Parameters one GPU holds per layer kind, per MTP layer and for the vocabulary parts, and the linear
    weight shapes.

    They depend only on the model's shape and on TP/EP/ETP, so they are memoised on exactly those values
    (the layout search evaluates thousands of layouts of one model)."""
    m = r.cfg.model
    key = (r.h, r.a, r.g, r.dh, r.f, r.gated, r.norm_w, r.Vp, r.E, r.fm, r.fs, r.mla, r.q_lora, r.kv_lora,
           r.qk_dim, r.rope_dim, r.v_dim, r.mtp, r.mtp_is_moe, r.t, r.ep, r.etp,
           m.add_bias_linear, m.add_qkv_bias, m.qk_layernorm, m.moe_shared_expert_gate,
           m.moe_router_enable_expert_bias, m.position_embedding_type, m.max_position_embeddings or r.s)
    hit = _LAYOUT_CACHE.get(key)
    if hit is not None:
        return hit
    t = r.t
    att = attention(r)
    per_kind = {}
    for moe in ((False, True) if r.E else (False,)):
        dense = att + (moe_router(r) + shared_expert(r) if moe else dense_mlp(r))
        exp = moe_experts(r) if moe else Count()
        per_kind[moe] = (dense.per_rank(t), linear_weights(r, moe),
                         exp.sharded // (r.ep * r.etp) + exp.replicated // r.ep)
    d_dense, d_lin, _ = per_kind[False]
    m_dense, m_lin, m_exp = per_kind.get(True, (0, 0, 0))
    emb = embedding(r).per_rank(t)              # the input embedding (with learned positions)
    vocab_weight = output_layer(r).per_rank(t)  # one vocabulary-sized weight matrix on one GPU
    norm = final_norm(r).per_rank(t)
    mtp_dense = mtp_lin = mtp_exp = 0
    if r.mtp:
        dd, lin, e = per_kind[r.mtp_is_moe]
        x = mtp_extra(r)
        mtp_dense, mtp_lin, mtp_exp = dd + x.per_rank(t), lin + x.sharded // t, e
    shapes_by_kind = {moe: _linear_shapes(r, moe) for moe in per_kind}
    out = (d_dense, d_lin, m_dense, m_lin, m_exp, emb, vocab_weight, norm, mtp_dense, mtp_lin, mtp_exp,
           shapes_by_kind)
    if len(_LAYOUT_CACHE) > 4096:
        _LAYOUT_CACHE.clear()
    _LAYOUT_CACHE[key] = out
    return out


_MOE_COUNTS: dict = {}


def _moe_counts(r: Resolved) -> tuple:
    """MoE layers of every chunk of every stage (memoised on the placement and the MoE pattern, both of which
    resolve() takes from caches, checked by identity)."""
    key = (id(r.plan), id(r.moe_layers))
    hit = _MOE_COUNTS.get(key)
    if hit is not None and hit[0] is r.plan and hit[1] is r.moe_layers:
        return hit[2]
    moe = r.moe_layers
    counts = tuple(tuple(sum(moe[c.start:c.stop]) for c in plan.layers) for plan in r.plan)
    if len(_MOE_COUNTS) > 4096:
        _MOE_COUNTS.clear()
    _MOE_COUNTS[key] = (r.plan, r.moe_layers, counts)
    return counts


def _chunk_parameters(r: Resolved, c, layout: tuple) -> tuple[int, int, int]:
    """(dense, linear, routed-expert) parameters one GPU holds for the non-decoder parts of chunk ``c``.

    GPTModel (``megatron/core/models/gpt/gpt_model.py``) builds per chunk: the embedding where pre_process;
    the final norm and the output layer where post_process (its weight is the embedding itself only when
    both sit in one chunk and are tied); for MTP layers their own parts and a copy of the embedding unless
    the chunk already has it (LanguageModule.setup_embeddings_and_output_layer keeps the copies in sync)."""
    (_, _, _, _, _, emb, vocab_weight, norm, mtp_dense, mtp_lin, mtp_exp, _) = layout
    dense = lin = exp = 0
    if c.embedding:
        dense += emb
    if c.loss:
        dense += norm + (0 if (r.tied and c.embedding) else vocab_weight)
    k = len(c.mtp)
    if k:
        dense += k * mtp_dense + (0 if c.embedding else emb)
        lin += k * mtp_lin
        exp += k * mtp_exp
    return dense, lin, exp


def stage_memory(r: Resolved) -> Estimate:
    """The estimate for every pipeline stage of a resolved configuration."""
    cfg = r.cfg
    tr, pr = cfg.training, cfg.precision
    t, p = r.t, r.p
    bm = byte_model(r)
    acts = {False: layer_activations(r, False)}
    if r.E:
        acts[True] = layer_activations(r, True)
    layout = _parameter_layout(r)
    feat = features.plan(r, bm, layout, acts)   # None unless a recipe feature (FSDP, PEFT, offload, ...) is on
    if feat is not None:
        acts = feat.acts
    x_flight = feat.extra_in_flight if feat is not None else 0
    mtp_act = acts[r.mtp_is_moe] if r.mtp else None
    extras = stage_extras(r, mtp_act)
    loss = loss_buffers(r)

    d_dense, d_lin, m_dense, m_lin, m_exp, shapes_by_kind = layout[:5] + layout[-1:]
    vocab_weight = layout[6]
    wbytes = DTYPE_BYTES[pr.params_dtype]
    te_dummies = tr.transformer_impl == "transformer_engine" and tr.gradient_accumulation_fusion
    dummy_cache: dict = {}
    dense_shard = r.dp * r.cp
    overhead = CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_COMMUNICATOR * _communicators(r)
    full_recompute = tr.recompute_granularity == "full"
    vocab_wgrad = wbytes * vocab_weight
    loss_act = extras.output + r.mtp * extras.mtp_logits
    stages = []
    static: dict = {}
    moe_counts = _moe_counts(r) if r.E else None
    for s_idx, plan in enumerate(r.plan):
        chunks = plan.chunks
        sig = (plan.sig, moe_counts[s_idx]) if r.E else plan.sig
        if sig in static and not full_recompute:
            dense_p, linear_p, expert_p, st, chunk_acts, work, n_dense, n_moe = static[sig]
        else:
            n_layers = n_moe = dense_p = linear_p = expert_p = 0
            chunk_acts = []
            work = 0
            dense_layer = acts[False]
            for (n, c_emb, c_loss, n_mtp), c in zip(plan.sig, chunks):
                n_layers += n
                if c_emb or c_loss or n_mtp:
                    dp_, lp_, ep_ = _chunk_parameters(r, c, layout)
                    dense_p += dp_
                    linear_p += lp_
                    expert_p += ep_
                # Activations of one micro-batch of this chunk.
                if full_recompute or r.E:
                    saved, a_part, m_part, rec = _chunk_activations(r, c.layers, acts)
                else:
                    a_part, m_part = n * dense_layer.attention, n * dense_layer.mlp
                    rec = dense_layer.recompute_peak if n else 0
                    saved = a_part + m_part
                e_part = extras.embedding if c_emb else 0
                o_part = loss_act if c_loss else 0
                t_part = n_mtp * extras.mtp if n_mtp else 0
                chunk_acts.append((saved + e_part + o_part + t_part, a_part, m_part, e_part, o_part, t_part))
                if rec > work:
                    work = rec
            if r.E:
                n_moe = sum(moe_counts[s_idx])
            n_dense = n_layers - n_moe
            dense_p += n_dense * d_dense + n_moe * m_dense
            linear_p += n_dense * d_lin + n_moe * m_lin
            expert_p += n_moe * m_exp
            st = state_bytes(bm, dense_p, linear_p, expert_p, dense_shard, r.edp)
            static[sig] = (dense_p, linear_p, expert_p, st, chunk_acts, work, n_dense, n_moe)
        if r.v == 1:
            n_flight = p - s_idx + x_flight
            if r.m is not None and r.m < n_flight:
                n_flight = r.m
            ca = chunk_acts[0]
            counts = (n_flight,)
            activations, att_total, mlp_total, emb_act, out_act, mtp_act_total = (
                n_flight * ca[0], n_flight * ca[1], n_flight * ca[2], n_flight * ca[3], n_flight * ca[4],
                n_flight * ca[5])
        else:
            counts = max(held_counts(p, s_idx, r.v, r.group, r.m, x_flight),
                         key=lambda cnt: sum(k * ca[0] for k, ca in zip(cnt, chunk_acts)))
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
        has_dense = n_dense > 0 or (n_mtp > 0 and not r.mtp_is_moe)
        has_moe = n_moe > 0 or (n_mtp > 0 and r.mtp_is_moe)
        bwd = max(acts[False].backward_peak if has_dense else 0, acts[True].backward_peak if has_moe else 0)
        transient = {}
        if has_dense or has_moe:
            key = (has_dense, has_moe, n_mtp > 0)
            if key not in dummy_cache:
                shapes = set()
                if has_dense:
                    shapes |= shapes_by_kind[False]
                if has_moe:
                    shapes |= shapes_by_kind[True]
                if key[2]:
                    shapes.add((r.h, 2 * r.h // t))
                dummy_cache[key] = (wbytes * sum(a * b for a, b in shapes), wbytes * max(a * b for a, b in shapes))
            dummies, biggest = dummy_cache[key]
            if te_dummies:
                transient["te_dummy_wgrad"] = dummies
            else:
                # Without fused accumulation each linear's weight gradient exists in the weight dtype until
                # it is added to main_grad: the largest one is the peak.
                bwd += biggest
        name, value = "backward_working_set", bwd + work
        no_wgrad = feat is not None and feat.skips_vocab_wgrad(has_loss)
        if has_loss and out_act:
            # The loss chunk passes through the loss before its layers' backward (estimator/loss.py): the
            # loss's own buffers at the end of its forward and during its backward; then the output
            # layer's backward (the bf16 gradient of the logits, and the weight gradient Megatron's
            # ColumnParallelLinear allocates even when it accumulates into main_grad); the layers'
            # backward starts once the loss has freed what it kept.
            value -= min(loss.saved, out_act)
            for phase, size in (("loss_forward", loss.forward_extra), ("loss_backward", loss.backward_extra),
                                ("output_layer_wgrad", (0 if no_wgrad else vocab_wgrad) + loss.output_backward)):
                if size > value:
                    name, value = phase, size
        for c_idx in () if no_wgrad else plan.vocab_chunks:
            if counts[c_idx] and vocab_wgrad - chunk_acts[c_idx][0] > value:
                # Embedding backward (the input embedding or an MTP stage's copy): a dense weight gradient,
                # when this micro-batch's activations of the chunk are gone.
                name, value = "embedding_wgrad", vocab_wgrad - chunk_acts[c_idx][0]
        transient[name] = value if value > 0 else 0
        transient["workspaces"] = workspace_bytes(r, has_moe)
        buffer = global_buffer_bytes(r, has_moe, has_loss)
        if buffer:
            transient["global_memory_buffer"] = buffer
        acts_by = {"attention": att_total, "mlp": mlp_total, "embedding": emb_act, "output": out_act}
        if r.mtp:
            acts_by["mtp"] = mtp_act_total
        reports = plan.reports.get(counts) or _chunk_reports(plan, counts)
        if feat is None:
            transient_bytes = sum(transient.values())
            allocated = st.weights + st.gradients + st.optimizer + activations + transient_bytes
            reserved = allocated + int(ALLOCATOR_RESERVE_FRACTION * allocated)
            stages.append(StageEstimate(
                s_idx, plan.layers, plan.embedding, has_loss, n_mtp, dense_p + expert_p,
                expert_p, n_flight, st.weights, st.gradients, st.optimizer, activations, transient_bytes, allocated,
                reserved, reserved + overhead, acts_by, transient, reports))
            continue
        # Recipe features (estimator/features): states, activations, buffers, and what lies outside the allocator.
        flight = [c for c, k in enumerate(counts) for _ in range(k)]
        adj = feat.stage(s_idx, [c.layers for c in chunks], plan.embedding, has_loss, dense_p, linear_p, expert_p,
                         st, activations, flight, transient, bwd + work)
        acts_by.update(adj.activation_parts)
        transient_bytes = sum(adj.transient.values())
        allocated = adj.weights + adj.gradients + adj.optimizer + adj.activations + transient_bytes
        reserved = allocated + int(ALLOCATOR_RESERVE_FRACTION * (allocated - adj.reserve_exempt))
        stages.append(StageEstimate(
            s_idx, plan.layers, plan.embedding, has_loss, n_mtp, dense_p + expert_p, expert_p, n_flight,
            adj.weights, adj.gradients, adj.optimizer, adj.activations, transient_bytes, allocated, reserved,
            reserved + overhead + sum(adj.outside_allocator.values()), acts_by, adj.transient, reports,
            sum(adj.host.values()), adj.host, adj.outside_allocator))
    peak_stage = max(stages, key=lambda s: s.device_bytes)
    peak = Peak(stage=peak_stage.stage, allocated_bytes=peak_stage.allocated_bytes,
                reserved_bytes=peak_stage.reserved_bytes, device_bytes=peak_stage.device_bytes)
    parallel = {"tp": t, "pp": p, "dp": r.dp, "cp": r.cp, "ep": r.ep, "etp": r.etp, "edp": r.edp,
                "vpp": r.v, "sequence_parallel": r.sp, "num_microbatches": r.m, "seq_length": r.s,
                "micro_batch_size": r.b, "world_size": r.world, "padded_vocab_size": r.Vp,
                "microbatch_group_size": r.group if r.v > 1 else None,
                "pipeline_layout": cfg.parallelism.pipeline_model_parallel_layout,
                "dense_optimizer_shards": feat.shards()[0] if feat else (dense_shard if bm.distributed else 1),
                "expert_optimizer_shards": ((feat.shards()[1] if feat else (r.edp if bm.distributed else 1))
                                            if r.E else None),
                "bytes_per_parameter": {"weights": bm.weight, "linear_weights": bm.linear_weight,
                                        "fp8_cache": bm.fp8_cache, "gradients": bm.grad,
                                        "optimizer_unsharded": bm.optimizer}}
    return Estimate(_parameters=lambda: count_parameters(r), stages=tuple(stages), peak=peak, parallel=parallel,
                    _assumptions=lambda: tuple(_assumptions(r, bm)), _config=cfg)


def _chunk_reports(plan, counts: tuple) -> tuple:
    """Per chunk of a stage: its layers, the embedding / output layer / MTP layers it holds and its
    micro-batches in flight at the stage's peak (memoised on the stage plan: the search builds many alike)."""
    hit = tuple(ChunkReport(c.layers, c.embedding, c.loss, len(c.mtp), k) for c, k in zip(plan.chunks, counts))
    if len(plan.reports) > 256:
        plan.reports.clear()
    plan.reports[counts] = hit
    return hit


def _communicators(r: Resolved) -> int:
    """Process groups of more than one rank that a GPU talks through."""
    sizes = [r.t, r.p, r.dp * r.cp, r.cp]
    if r.E:
        sizes += [r.ep, r.etp, r.edp]
    return sum(1 for s in sizes if s > 1)


def _assumptions(r: Resolved, bm) -> list[str]:
    cfg = r.cfg
    tr, pr = cfg.training, cfg.precision
    plain = not (cfg.parallelism.use_megatron_fsdp or cfg.parallelism.use_torch_fsdp2) and tr.optimizer == "adam"
    out = [
        f"Weights {bm.weight} B, gradients {bm.grad} B and optimizer states {bm.optimizer} B per parameter "
        + (f"(the optimizer part sharded over {r.dp * r.cp} data x context-parallel ranks"
           + (f", {r.edp} expert-data-parallel ranks for routed experts" if r.E else "") + ")"
           if bm.distributed else "(no distributed optimizer: nothing sharded)") + "."
        if plain else "Model states as the FSDP / optimizer lines below say.",
        ("Adam optimizer (two moments per parameter); " if tr.optimizer == "adam" else "")
        + "Megatron-Core with Transformer Engine layers.",
        f"Vocabulary padded from {r.V} to {r.Vp} (multiple of {cfg.model.make_vocab_size_divisible_by} x TP {r.t}).",
    ]
    if r.m is None:
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
        c = cfg.model.moe_expert_capacity_factor
        out.append("MoE routing assumed balanced: every expert receives its average share of tokens"
                   + (f", capped by capacity factor {c}" if c else " (dropless)") + ".")
    if tr.cross_entropy_loss_fusion and tr.cross_entropy_fusion_impl == "te":
        out.append("Fused cross-entropy (te): only the bf16 logits are kept; the gradient is computed in place.")
    elif tr.cross_entropy_loss_fusion:
        out.append("Fused cross-entropy (native): keeps an fp32 softmax of the logits; torch.compile adds one "
                   "more fp32 buffer of that size while it runs.")
    else:
        out.append("Cross-entropy keeps an fp32 softmax of the logits; the bf16 logits live until the loss is "
                   "computed.")
    if tr.transformer_impl == "transformer_engine" and tr.gradient_accumulation_fusion and not tr.peft:
        out.append("Transformer Engine keeps one dummy weight-gradient tensor per distinct linear weight "
                   "shape (gradients accumulate straight into the fp32 main_grad buffer).")
    if pr.fp8 and pr.fp8_param_gather:
        out.append(f"FP8 ({pr.fp8_recipe or 'delayed'} recipe) with fp8_param_gather: linear-layer weights are held "
                   "in FP8 (1 B) with a transposed FP8 copy (1 B); embedding, output layer, norms and router stay "
                   f"in {pr.params_dtype}; linear-layer inputs are saved in 1 byte.")
    elif pr.fp8:
        out.append(f"FP8 ({pr.fp8_recipe or 'delayed'} recipe): FP8 copies of the linear weights are cached and "
                   "linear-layer inputs are saved in 1 byte.")
    ws = workspace_bytes(r, bool(r.E))
    out.append(f"Transient buffers include {ws / MIB:.0f} MiB of GEMM workspaces (Transformer Engine and "
               "PyTorch, Hopper sizes, held all run) and the largest buffer alive at the backward peak.")
    out.append(f"reserved = allocated x {1 + ALLOCATOR_RESERVE_FRACTION:.2f} (caching allocator); device adds "
               f"{CUDA_CONTEXT_BYTES // MIB} MiB CUDA context and {NCCL_BYTES_PER_COMMUNICATOR // MIB} MiB per "
               f"NCCL communicator ({_communicators(r)} here).")
    out.extend(features.assumptions(r))
    out.append("Not modelled: routing imbalance and the memory of a failed allocation retry.")
    return out
