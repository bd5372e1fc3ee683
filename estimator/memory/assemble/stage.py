"""The estimate of every pipeline stage: parameters, model states, activations of the micro-batches in flight and
transient buffers per phase, then allocated, reserved and device bytes and the peak (:func:`assemble`).

The per-kind building blocks come from :mod:`.per_kind`, the overheads from :mod:`.overheads`, the replayed
reserve from :mod:`.replay` and the assumptions' text from :mod:`.assumptions`.
"""

from __future__ import annotations

from ...config.derived import compute_capability, gpu_arch
from ...model.layers import hyper_connection
from ...model.local_attention import chunk_mask_bytes
from ...model.params import count_parameters, mtp_built
from ...model.resolve import DTYPE_BYTES, Resolved
from .. import features, phases, reserved
from ..activations import context, mtp_activations, received_input_bytes, stage_extras
from ..features import fp8_output, frozen_language, gtp
from ..loss import lm_loss_buffers, logit_bytes as loss_logit_bytes, loss_buffers
from ..optimizer_step import PERSISTENT_BUFFERS, optimizer_step_buffers, recompute_retained
from ..report import ChunkReport, Estimate, Peak, StageEstimate
from ..schedule import heaviest_mix
from ..states import byte_model, stage_fp8_scales, state_bytes
from ..vision import vision_stage
from ..workspaces import global_buffer_bytes, workspace_bytes
from .assumptions import assumption_lines
from .overheads import ALLOCATOR_RESERVE_FRACTION, CUDA_CONTEXT_BYTES, NCCL_BYTES_PER_COMMUNICATOR, communicators
from .per_kind import (chunk_activations, chunk_parameters, kind_activations, layer_kind_counts, mtp_parameters,
                       parameter_layout, sum_activations, trained_parameters)
from .replay import with_replayed_reserve


_ONE, _NONE = frozenset((0,)), frozenset()


def assemble(r: Resolved, replay: bool, peak_only: bool):
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
    overhead = CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_COMMUNICATOR * communicators(r)
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
                    dp_, lp_, ep_ = chunk_parameters(r, c, layout)
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
                fd, fe = mtp_parameters(r, chunks, layout)
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
                      else trained_parameters(r, chunks, layout, dense_p, expert_p) if frozen_mtp and n_mtp
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
        stages = with_replayed_reserve(stages, pending)
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
                    _assumptions=lambda: tuple(assumption_lines(r, bm)), _config=cfg)


def _chunk_reports(plan, counts: tuple) -> tuple:
    """Per chunk of a stage: its layers, the embedding / output layer / MTP layers it holds and its
    micro-batches in flight at the stage's peak (memoised on the stage plan: the search builds many alike)."""
    hit = tuple(ChunkReport(c.layers, c.embedding, c.loss, len(c.mtp), k) for c, k in zip(plan.chunks, counts))
    if len(plan.reports) > 256:
        plan.reports.clear()
    plan.reports[counts] = hit
    return hit
