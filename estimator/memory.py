"""Per-stage memory: the assembly of parameters, model states, activations and transient buffers.

For each pipeline stage this module finds the layers it holds (per virtual chunk), the parameters one
of its GPUs keeps, the micro-batches in flight at the peak of the pipeline schedule, and the transient
buffers alive at that peak; then the three totals:

- ``allocated_bytes``: weights + gradients + optimizer states + activations + transient buffers, what
  ``torch.cuda.max_memory_allocated()`` reports;
- ``reserved_bytes``: plus the PyTorch caching allocator's reserve (:data:`ALLOCATOR_RESERVE_FRACTION`);
- ``device_bytes``: plus the CUDA context and NCCL communicator buffers, the figure to hold against a
  GPU's capacity.

Pipeline schedules (Megatron-Core ``pipeline_parallel/schedules.py``): with 1F1B, stage r holds the
activations of min(p - r, m) micro-batches at its peak; with the interleaved schedule (v chunks per
rank) rank r runs (p - r - 1) * 2 + (v - 1) * p warm-up forward passes before its first backward, so
it holds that many chunk-micro-batches plus one, capped at m * v.
"""

from __future__ import annotations

from .activations import layer_activations, stage_extras
from .local_attention import chunk_mask_bytes
from .loss import loss_buffers
from .optimizer_step import assumption as optimizer_step_assumption, optimizer_step_buffers
from .params import Count, attention, count_parameters, dense_mlp, embedding, final_norm, linear_weights, \
    moe_experts, moe_router, mtp_extra, output_layer, shared_expert
from .report import Estimate, Peak, StageEstimate
from .resolve import DTYPE_BYTES, Resolved
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


def in_flight(r: Resolved, stage: int) -> list[int]:
    """Virtual-chunk index of every (chunk-)micro-batch whose activations stage ``stage`` holds at its peak."""
    p, v, m = r.p, r.v, r.m
    if v == 1:
        n = p - stage
        if m is not None:
            n = min(n, m)
        return [0] * n
    n = (p - stage - 1) * 2 + (v - 1) * p + 1
    if m is not None:
        n = min(n, m * v)
    return [(k // p) % v for k in range(n)]


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
    """Parameters one GPU holds per layer kind and on the first/last stage, and the linear weight shapes.

    They depend only on the model's shape and on TP/EP/ETP/PP, so they are memoised on exactly those values
    (the layout search evaluates thousands of layouts of one model)."""
    m = r.cfg.model
    key = (r.h, r.a, r.g, r.dh, r.f, r.gated, r.norm_w, r.Vp, r.E, r.fm, r.fs, r.mla, r.q_lora, r.kv_lora,
           r.qk_dim, r.rope_dim, r.v_dim, r.mtp, r.mtp_is_moe, r.tied, r.t, r.ep, r.etp, r.p > 1,
           m.add_bias_linear, m.add_qkv_bias, m.qk_layernorm, m.moe_shared_expert_gate,
           m.moe_router_enable_expert_bias, m.position_embedding_type, m.max_position_embeddings or r.s)
    hit = _LAYOUT_CACHE.get(key)
    if hit is not None:
        return hit
    t, p = r.t, r.p
    att = attention(r)
    per_kind = {}
    for moe in ((False, True) if r.E else (False,)):
        dense = att + (moe_router(r) + shared_expert(r) if moe else dense_mlp(r))
        exp = moe_experts(r) if moe else Count()
        per_kind[moe] = (dense.per_rank(t), linear_weights(r, moe),
                         exp.sharded // (r.ep * r.etp) + exp.replicated // r.ep)
    d_dense, d_lin, _ = per_kind[False]
    m_dense, m_lin, m_exp = per_kind.get(True, (0, 0, 0))
    # Parameters only the first / last stage holds.
    first_extra = embedding(r).per_rank(t)
    vocab_weight = output_layer(r).per_rank(t)   # one vocabulary-sized weight matrix on one GPU
    last_extra = final_norm(r).per_rank(t) + (vocab_weight if (not r.tied or p > 1) else 0)
    last_lin, last_exp = 0, 0
    if r.mtp:
        dd, lin, e = per_kind[r.mtp_is_moe]
        x = mtp_extra(r)
        last_extra += r.mtp * (dd + x.per_rank(t))
        last_lin = r.mtp * (lin + x.sharded // t)
        last_exp = r.mtp * e
        if p > 1 and not r.tied:
            last_extra += vocab_weight  # MTP looks up embeddings on the last stage
    shapes_by_kind = {moe: _linear_shapes(r, moe) for moe in per_kind}
    out = (d_dense, d_lin, m_dense, m_lin, m_exp, first_extra, vocab_weight, last_extra, last_lin, last_exp,
           shapes_by_kind)
    if len(_LAYOUT_CACHE) > 4096:
        _LAYOUT_CACHE.clear()
    _LAYOUT_CACHE[key] = out
    return out


def stage_memory(r: Resolved) -> Estimate:
    """The estimate for every pipeline stage of a resolved configuration."""
    cfg = r.cfg
    tr, pr = cfg.training, cfg.precision
    t, p = r.t, r.p
    bm = byte_model(r)
    acts = {False: layer_activations(r, False)}
    if r.E:
        acts[True] = layer_activations(r, True)
    mtp_act = acts[r.mtp_is_moe] if r.mtp else None
    extras = stage_extras(r, mtp_act)
    loss = loss_buffers(r)

    (d_dense, d_lin, m_dense, m_lin, m_exp, first_extra, vocab_weight, last_extra, last_lin, last_exp,
     shapes_by_kind) = _parameter_layout(r)
    wbytes = DTYPE_BYTES[pr.params_dtype]
    te_dummies = tr.transformer_impl == "transformer_engine" and tr.gradient_accumulation_fusion
    dummy_cache: dict = {}
    dense_shard = r.dp * r.cp
    overhead = CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_COMMUNICATOR * _communicators(r)
    full_recompute = tr.recompute_granularity == "full"
    vocab_wgrad = wbytes * vocab_weight
    stages = []
    static: dict = {}
    for s_idx, chunks in enumerate(r.stages):
        first, last = s_idx == 0, s_idx == p - 1
        if r.E:
            sig = (first, last, tuple((len(c), sum(r.moe_layers[c.start:c.stop])) for c in chunks))
        else:
            sig = (first, last, tuple(len(c) for c in chunks))
        if sig in static and not full_recompute:
            dense_p, expert_p, st, chunk_acts, work, n_dense, n_moe = static[sig]
        else:
            n_layers = 0
            n_moe = 0
            for c in chunks:
                n_layers += len(c)
                if r.E:
                    n_moe += sum(r.moe_layers[c.start:c.stop])
            n_dense = n_layers - n_moe
            dense_p = n_dense * d_dense + n_moe * m_dense
            linear_p = n_dense * d_lin + n_moe * m_lin
            expert_p = n_moe * m_exp
            if first:
                dense_p += first_extra
            if last:
                dense_p += last_extra
                linear_p += last_lin
                expert_p += last_exp
            st = state_bytes(bm, dense_p, linear_p, expert_p, dense_shard, r.edp)

            # Activations of one micro-batch of each virtual chunk.
            chunk_acts = []
            work = 0
            n_chunks = len(chunks)
            for c_idx, c in enumerate(chunks):
                if full_recompute or r.E:
                    saved, a_part, m_part, rec = _chunk_activations(r, c, acts)
                else:
                    k = acts[False]
                    n = len(c)
                    a_part, m_part, rec = n * k.attention, n * k.mlp, (k.recompute_peak if n else 0)
                    saved = a_part + m_part
                e_part = extras.embedding if (first and c_idx == 0) else 0
                o_part = extras.output if (last and c_idx == n_chunks - 1) else 0
                kept_mask, remat_mask = chunk_mask_bytes(r, (first and c_idx == 0) or (last and c_idx == n_chunks - 1),
                                                         len(c))
                saved, a_part, rec = saved + kept_mask, a_part + kept_mask, rec + remat_mask
                chunk_acts.append((saved + e_part + o_part, a_part, m_part, e_part, o_part))
                if rec > work:
                    work = rec
            static[sig] = (dense_p, expert_p, st, chunk_acts, work, n_dense, n_moe)
        if r.v == 1:
            n_flight = p - s_idx if r.m is None or r.m > p - s_idx else r.m
            ca = chunk_acts[0]
            activations, att_total, mlp_total, emb_act, out_act = (
                n_flight * ca[0], n_flight * ca[1], n_flight * ca[2], n_flight * ca[3], n_flight * ca[4])
        else:
            flight = in_flight(r, s_idx)
            n_flight = len(flight)
            activations = att_total = mlp_total = emb_act = out_act = 0
            for c in flight:
                ca = chunk_acts[c]
                activations += ca[0]
                att_total += ca[1]
                mlp_total += ca[2]
                emb_act += ca[3]
                out_act += ca[4]

        # Transient buffers at the peak.
        has_dense = n_dense > 0 or (last and r.mtp > 0 and not r.mtp_is_moe)
        has_moe = n_moe > 0 or (last and r.mtp > 0 and r.mtp_is_moe)
        bwd = max(acts[False].backward_peak if has_dense else 0, acts[True].backward_peak if has_moe else 0)
        attn_bwd = max(acts[False].attention_backward_peak if has_dense else 0,
                       acts[True].attention_backward_peak if has_moe else 0)
        transient = {}
        if has_dense or has_moe:
            key = (has_dense, has_moe, last and r.mtp > 0)
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
        bwd = max(bwd, attn_bwd)    # unfused attention's backward, after the layer's MLP backward
        name, value = "backward_working_set", bwd + work
        if last and out_act:
            # The last stage passes through the loss before its layers' backward (estimator/loss.py): the
            # loss's own buffers at the end of its forward and during its backward; then the output
            # layer's backward (the bf16 gradient of the logits, and the weight gradient Megatron's
            # ColumnParallelLinear allocates even when it accumulates into main_grad); the layers'
            # backward starts once the loss has freed what it kept.
            value -= min(loss.saved, out_act)
            for phase, size in (("loss_forward", loss.forward_extra), ("loss_backward", loss.backward_extra),
                                ("output_layer_wgrad", vocab_wgrad + loss.output_backward)):
                if size > value:
                    name, value = phase, size
        if first and n_flight and vocab_wgrad - chunk_acts[0][0] > value:
            # Embedding backward: a dense weight gradient, when this micro-batch's activations are gone.
            name, value = "embedding_wgrad", vocab_wgrad - chunk_acts[0][0]
        transient[name] = value if value > 0 else 0
        transient["workspaces"] = workspace_bytes(r, has_moe)
        buffer = global_buffer_bytes(r, has_moe, last)
        if buffer:
            transient["global_memory_buffer"] = buffer
        transient_bytes = sum(transient.values())

        # The optimizer step (estimator/optimizer_step.py): activations freed, its own buffers alive.
        states = st.weights + st.gradients + st.optimizer
        fwd_bwd = states + activations + transient_bytes
        step = optimizer_step_buffers(r, bm, dense_p, expert_p, dense_shard, transient)
        phase, step_total = "forward_backward", states + sum(step.values())
        if step_total > fwd_bwd:
            phase, transient, transient_bytes = "optimizer_step", step, step_total - states
            activations = att_total = mlp_total = emb_act = out_act = 0
        allocated = states + activations + transient_bytes
        reserved = allocated + int(ALLOCATOR_RESERVE_FRACTION * allocated)
        stages.append(StageEstimate(
            s_idx, chunks, first, last, r.mtp if last else 0, dense_p + expert_p, expert_p, n_flight,
            st.weights, st.gradients, st.optimizer, activations, transient_bytes, allocated, reserved,
            reserved + overhead,
            {"attention": att_total, "mlp": mlp_total, "embedding": emb_act, "output": out_act}, transient,
            phase, fwd_bwd, step_total,
        ))
    peak_stage = max(stages, key=lambda s: s.device_bytes)
    peak = Peak(stage=peak_stage.stage, allocated_bytes=peak_stage.allocated_bytes,
                reserved_bytes=peak_stage.reserved_bytes, device_bytes=peak_stage.device_bytes)
    parallel = {"tp": t, "pp": p, "dp": r.dp, "cp": r.cp, "ep": r.ep, "etp": r.etp, "edp": r.edp,
                "vpp": r.v, "sequence_parallel": r.sp, "num_microbatches": r.m, "seq_length": r.s,
                "micro_batch_size": r.b, "world_size": r.world, "padded_vocab_size": r.Vp,
                "dense_optimizer_shards": dense_shard if bm.distributed else 1,
                "expert_optimizer_shards": (r.edp if bm.distributed else 1) if r.E else None,
                "bytes_per_parameter": {"weights": bm.weight, "linear_weights": bm.linear_weight,
                                        "fp8_cache": bm.fp8_cache, "gradients": bm.grad,
                                        "optimizer_unsharded": bm.optimizer}}
    return Estimate(_parameters=lambda: count_parameters(r), stages=tuple(stages), peak=peak, parallel=parallel,
                    _assumptions=lambda: tuple(_assumptions(r, bm)), _config=cfg)


def _communicators(r: Resolved) -> int:
    """Process groups of more than one rank that a GPU talks through."""
    sizes = [r.t, r.p, r.dp * r.cp, r.cp]
    if r.E:
        sizes += [r.ep, r.etp, r.edp]
    return sum(1 for s in sizes if s > 1)


def _assumptions(r: Resolved, bm) -> list[str]:
    cfg = r.cfg
    tr, pr = cfg.training, cfg.precision
    out = [
        f"Weights {bm.weight} B, gradients {bm.grad} B and optimizer states {bm.optimizer} B per parameter "
        + (f"(the optimizer part sharded over {r.dp * r.cp} data x context-parallel ranks"
           + (f", {r.edp} expert-data-parallel ranks for routed experts" if r.E else "") + ")"
           if bm.distributed else "(no distributed optimizer: nothing sharded)") + ".",
        "Adam optimizer (two moments per parameter); Megatron-Core with Transformer Engine layers.",
        f"Vocabulary padded from {r.V} to {r.Vp} (multiple of {cfg.model.make_vocab_size_divisible_by} x TP {r.t}).",
    ]
    if r.m is None:
        out.append("global_batch_size not set: assumed enough micro-batches to fill the pipeline "
                   f"(at least {r.p * r.v}).")
    else:
        out.append(f"{r.m} micro-batches per step (global_batch_size / (micro_batch_size x DP {r.dp})).")
    if r.p > 1:
        sched = "interleaved 1F1B" if r.v > 1 else "1F1B"
        out.append(f"{sched} schedule: stage r holds the activations of its in-flight micro-batches at the peak.")
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
    if tr.transformer_impl == "transformer_engine" and tr.gradient_accumulation_fusion:
        out.append("Transformer Engine keeps one dummy weight-gradient tensor per distinct linear weight "
                   "shape (gradients accumulate straight into the fp32 main_grad buffer).")
    if pr.fp8 and pr.fp8_param_gather:
        out.append(f"FP8 ({pr.fp8_recipe or 'delayed'} recipe) with fp8_param_gather: linear-layer weights are held "
                   "in FP8 (1 B) with a transposed FP8 copy (1 B); embedding, output layer, norms and router stay "
                   f"in {pr.params_dtype}; linear-layer inputs are saved in 1 byte.")
    elif pr.fp8:
        out.append(f"FP8 ({pr.fp8_recipe or 'delayed'} recipe): FP8 copies of the linear weights are cached and "
                   "linear-layer inputs are saved in 1 byte.")
    out.append(optimizer_step_assumption(r, bm))
    ws = workspace_bytes(r, bool(r.E))
    out.append(f"Transient buffers include {ws / MIB:.0f} MiB of GEMM workspaces (Transformer Engine and "
               "PyTorch, Hopper sizes, held all run) and the largest buffer alive at the backward peak.")
    out.append(f"reserved = allocated x {1 + ALLOCATOR_RESERVE_FRACTION:.2f} (caching allocator); device adds "
               f"{CUDA_CONTEXT_BYTES // MIB} MiB CUDA context and {NCCL_BYTES_PER_COMMUNICATOR // MIB} MiB per "
               f"NCCL communicator ({_communicators(r)} here).")
    out.append("Not modelled: CUDA graphs, CPU offloading, FSDP, routing imbalance, memory of a failed "
               "allocation retry, and NCCL user-buffer registration.")
    return out
