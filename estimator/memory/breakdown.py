"""What is in the peak, by module: one stage's allocated memory at its peak, split into the parts that fill it.

Rows, in bytes, that add up exactly to the stage's ``allocated_bytes`` (:mod:`estimator.memory.assemble`):

- model states by kind: weights (with their FP8 copies), gradients, optimizer states;
- activations held at the peak, by module: the decoder layers' token mixers (attention, MLA, Mamba-2,
  gated delta nets), dense MLP, MoE experts, router and shared experts, their layer norms (the named
  tensors of :func:`estimator.memory.activations.layer_activations` with ``parts=True`` split them), the
  embedding, the MTP layers, and the output layer with the loss (final norm and logits).
  Each decoder layer counts once per micro-batch of its chunk in flight at the peak (the chunk's
  ``microbatches_in_flight``). Under full recompute a layer keeps its input (or, in the block method, the
  layers left out keep everything), so the decoder layers form one row;
- transient buffers by name: GEMM workspaces, Megatron's global buffer, Transformer Engine's dummy
  weight gradients and the working set of the backward pass (or the loss's buffers, the output layer's
  or embedding's weight gradient, whichever the estimate found largest).

Where an estimate says its peak is the optimizer step (``peak_phase == "optimizer_step"``), the rows are
the model states, the persistent buffers and the step's own buffers (no activations are alive then). Where
a recipe feature adjusts the activations (offloading, PEFT, ...), its parts of ``StageEstimate.activations``
are rows of their own (negative where activations leave the GPU).
"""

from __future__ import annotations

from .activations import layer_activations
from .assemble import layer_kind_counts
from .report import GIB
from .timeline import stage_inputs, resolved_of

__all__ = ["LABELS", "stage_breakdown", "breakdown", "format_breakdown", "view"]

#: Row keys and their labels, in the order of the groups.
LABELS = {
    "weights": "Weights", "gradients": "Gradients", "optimizer": "Optimizer states",
    "attention": "Attention (activations)", "mla": "Multi-latent attention (activations)",
    "dsa": "DeepSeek sparse attention (activations)",
    "mamba": "Mamba-2 mixers (activations)", "gdn": "Gated delta nets (activations)",
    "mamba_attention": "Mamba-2 mixers beside attention (activations)",
    "dense_mlp": "Dense MLP (activations)", "moe_experts": "MoE experts (activations)",
    "shared_experts": "Shared experts (activations)", "router": "MoE router and routing maps (activations)",
    "norms": "Layer norms (activations)",
    "decoder_layers": "Decoder layers under full recompute (activations)",
    "embedding": "Embedding (activations)", "mtp": "MTP layers (activations)",
    "output": "Output layer and loss: final norm, logits (activations)",
    "workspaces": "GEMM workspaces", "global_memory_buffer": "Megatron global memory buffer",
    "te_dummy_wgrad": "Transformer Engine dummy weight gradients",
    "backward_working_set": "Backward working set (one layer's gradients)",
    "loss_forward": "Loss buffers (end of the loss forward)", "loss_backward": "Loss buffers (loss backward)",
    "output_layer_wgrad": "Output layer weight gradient", "embedding_wgrad": "Embedding weight gradient",
    "optimizer_fp32_grad_copies": "Optimizer step: fp32 gradient copies",
    "optimizer_grad_copies": "Optimizer step: gradient copies in the master weights' dtype",
    "optimizer_temporaries": "Optimizer step: the optimizer's temporaries",
    "muon_newton_schulz": "Optimizer step: Muon's Newton-Schulz working set (its largest matrix)",
    "recompute_retained_inputs": "Optimizer step: recomputed MoE inputs and gradients kept from the backward",
    "optimizer_offload_staging": "Optimizer step: fp32 buffer of the copy back from the CPU (offload)",
    "offloaded": "Activations offloaded to the host (taken off)",
    "offload_reloaded": "Offloaded activations reloaded in the backward pass (two groups at once)",
    "paged_stash_moved": "MoE experts' saved tensors moved into the paged stash (taken off)",
    "paged_stash_reload": "MoE experts' saved tensors of one layer outside the paged stash (forward, reload)",
    "paged_stash_buffers": "MoE paged stash: GPU buffers",
    "released_in_backward": "Activations freed earlier in the backward pass (taken off)",
    "fp8_weight_copies": "FP8 weight copies kept for the backward (activations)",
    "fsdp_gathered_root": "FSDP: gathered root parameters", "fsdp_gathered_units": "FSDP: gathered parameter units",
    "fsdp_recomputed_rowwise_copy": "FSDP: a recomputed unit's row-wise MXFP8 weights, gathered again",
    "fsdp_unsharded_grads": "FSDP: unsharded gradients", "cuda_graph_pool": "CUDA graphs: memory pool",
    "cuda_graph_static_buffers": "CUDA graphs: static buffers",
    "cuda_graph_capture_workspaces": "CUDA graphs: cuBLAS workspaces of the capture stream",
    "deferred_output_wgrad": "Deferred output-layer weight gradients", "dora_weight_norm": "DoRA weight norms",
    "ep_overlap_1f1b_step": "Combined 1F1B step: a forward layer's pre-dispatch part and permuted tokens, a "
                            "backward layer's held gradients and working set",
    "delayed_wgrad": "Delayed weight gradients: kept inputs and output gradients (combined 1F1B step)",
    "bf16_layers": "Layers kept in bf16 under FP8 (extra activations)",
}
_GROUP = {"weights": "model states", "gradients": "model states", "optimizer": "model states"}


def _layer_rows(r, stage, acts) -> dict:
    """Activations of the decoder layers held at the peak, by module: each layer kind's token mixer and MLP
    (``acts``, as the estimate takes them), split by the named tensors of
    :func:`estimator.memory.activations.layer_activations` (``parts=True``): the norms, the router, the shared
    expert; the rest stays with its module."""
    a = stage.activations
    if r.cfg.training.recompute_granularity == "full":
        return {"decoder_layers": a["attention"] + a["mlp"]}
    kind_counts = layer_kind_counts(r) if len(r.kinds) > 1 else None
    n = [0] * len(r.kinds)                       # layer-micro-batches of each kind held at the peak
    for c_idx, c in enumerate(stage.chunks):
        counts = kind_counts[stage.stage][c_idx] if kind_counts else (len(c.layers),)
        for k, cnt in enumerate(counts):
            n[k] += cnt * c.microbatches_in_flight
    rows: dict = {}
    mixer_total = 0

    def add(key, b):
        rows[key] = rows.get(key, 0) + b

    for k, cnt in enumerate(n):
        if not cnt:
            continue
        kind, la = r.kinds[k], acts[k]
        named = layer_activations(r, kind, parts=True).parts or {}
        if kind.mixer:
            norm = min(named.get("norm_in", 0) + named.get("norm_out", 0), la.attention)
            add("norms", cnt * norm)
            add(kind.mixer, cnt * (la.attention - norm))
            mixer_total += cnt * la.attention
        if kind.mlp:
            norm = min(named.get("mlp_norm_in", 0) + named.get("mlp_norm_out", 0), la.mlp)
            add("norms", cnt * norm)
            rest = la.mlp - norm
            if kind.moe:
                router = min(named.get("router", 0) + named.get("permute_map", 0), rest)   # routing metadata
                shared = min(named.get("shared", 0) + named.get("shared_out", 0), rest - router)
                add("router", cnt * router)
                add("shared_experts", cnt * shared)
                add("moe_experts", cnt * (rest - router - shared))
            else:
                add("dense_mlp", cnt * rest)
    # What the estimate adds to the mixers' part besides the layers (local attention's masks).
    add("attention", a["attention"] - mixer_total)
    return rows


def stage_breakdown(r, stage, acts=None) -> list[dict]:
    """The rows of one stage (see the module docstring), largest first, each with its share of the total."""
    acts = acts if acts is not None else stage_inputs(r).acts
    parts = {"weights": stage.weights_bytes, "gradients": stage.gradients_bytes, "optimizer": stage.optimizer_bytes}
    total = stage.allocated_bytes
    groups = {}
    if stage.activations_bytes:
        rows = _layer_rows(r, stage, acts)
        for k, b in stage.activations.items():      # the embedding, output, MTP, and what features add
            if k not in ("attention", "mlp"):
                rows[k] = rows.get(k, 0) + b
        if sum(rows.values()) != stage.activations_bytes:
            raise RuntimeError(f"breakdown of stage {stage.stage}: the modules' activations add up to "
                               f"{sum(rows.values())} bytes, the estimate's to {stage.activations_bytes} (a bug)")
        parts.update(rows)
        groups.update(dict.fromkeys(rows, "activations"))
    for k, b in stage.transient.items():
        parts[k] = parts.get(k, 0) + b
        groups[k] = "transient"
    if sum(parts.values()) != total:
        raise RuntimeError(f"breakdown of stage {stage.stage}: rows add up to {sum(parts.values())} bytes, "
                           f"the estimate's peak is {total} (a bug)")
    rows = [{"key": k, "label": LABELS.get(k, k.replace("_", " ").capitalize()),
             "group": _GROUP.get(k) or groups[k], "bytes": b, "share": b / total if total else 0.0}
            for k, b in parts.items() if b]
    rows.sort(key=lambda row: -row["bytes"])
    return rows


def breakdown(est, stages=None) -> list[dict]:
    """Every stage's breakdown at its peak, or the listed stages': ``{"stage", "total_bytes", "rows"}``."""
    r = resolved_of(est)
    acts = stage_inputs(r).acts
    chosen = est.stages if stages is None else [est.stages[s] for s in stages]
    return [{"stage": s.stage, "total_bytes": s.allocated_bytes, "rows": stage_breakdown(r, s, acts)}
            for s in chosen]


def view(est, stages=None) -> dict:
    """What the pages show: each stage's rows (or the listed stages') with GiB strings (2^30 bytes) and
    percentages; the peak stage."""
    stages = breakdown(est, stages)
    for st in stages:
        st["total"] = f"{st['total_bytes'] / GIB:.2f}"
        for row in st["rows"]:
            row["gib"] = f"{row['bytes'] / GIB:.2f}"
            row["pct"] = f"{row['share'] * 100:.1f} %"
    return {"unit": "GiB (2^30 bytes)", "peak_stage": est.peak.stage, "stages": stages}


def format_breakdown(est, stages: str = "peak") -> str:
    """The breakdown as text, for the CLI: the peak stage (``stages="peak"``) or every stage (``"all"``)."""
    v = view(est, None if stages == "all" else [est.peak.stage])
    out = []
    for st in v["stages"]:
        tag = " (peak)" if st["stage"] == v["peak_stage"] else ""
        out.append(f"What is in the peak of stage {st['stage']}{tag}: {st['total']} GiB allocated (GiB = 2^30 bytes)")
        width = max(len(row["label"]) for row in st["rows"])
        for row in st["rows"]:
            out.append(f"  {row['label']:<{width}}  {row['gib']:>9} GiB  {row['pct']:>7}")
    return "\n".join(out)
