"""The assumptions an estimate lists: one sentence per modelling choice that bears on this configuration.

:func:`assumption_lines` is called lazily (``Estimate.assumptions``), so the layout search that asks
thousands of estimates never builds the text.
"""

from __future__ import annotations

from ...config.derived import compute_capability, effective_overload_factor, gpu_arch, is_amd, te_version
from ...config.rules import overload_cap
from ...model.audio import clip_tokens, sound_params
from ...model.fp8_scales import BLOCK_SCALED, per_tensor_transpose
from ...model.resolve import Resolved
from ...model.vision import image_patches, image_tokens, tower_kind
from .. import features, phases
from ..features import fp8_output
from ..loss import TE_FP32_CE_GRADIENT
from ..optimizer_step import assumption as optimizer_step_assumption
from ..vision import vision_stage
from ..workspaces import workspace_bytes
from .overheads import (ALLOCATOR_RESERVE_FRACTION, CUDA_CONTEXT_BYTES, MIB, NCCL_BYTES_PER_COMMUNICATOR,
                        communicators)


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


def assumption_lines(r: Resolved, bm) -> list[str]:
    """The assumptions' sentences for this configuration, in the order the estimate lists them."""
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
               f"NCCL communicator ({communicators(r)} here).")
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
    from ...model.layers.moe import arriving_rows, rank_budget
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
