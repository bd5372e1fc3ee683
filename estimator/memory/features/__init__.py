"""Today's recipe features, applied to the per-stage assembly of :mod:`estimator.memory.assemble`.

Each module answers one question for one GPU, with the Megatron-Core / Transformer Engine / Megatron-Bridge
source in its docstring:

- :mod:`.fsdp`: weights, gradients and optimizer states under Megatron-FSDP and PyTorch FSDP2, and the
  gathered unit buffers at the peak;
- :mod:`.peft`: LoRA / DoRA adapters, frozen base weights, their activations;
- :mod:`.fp8_output`: the output layer in MXFP8 (``fp8_output_proj``), applied by the plain assembly itself;
- :mod:`.frozen_language`: a frozen language model (Megatron-Bridge's ``freeze_language_model``), applied by
  the plain assembly itself: weights only, no weight-gradient inputs;
- :mod:`.offload`: optimizer and activation offloading, and the host memory they take;
- :mod:`.paged_stash`: the paged stash of the routed experts' saved tensors (GPU and pinned host buffers);
- :mod:`.cuda_graphs`: static buffers and the graph pool;
- :mod:`.comm_buffers`: TP-overlap userbuffers, DeepEP / HybridEP buffers (outside the allocator);
- :mod:`.schedule`: expert-parallel overlap, deferred output-layer weight gradients, FP8 without the weight
  cache, bf16 first/last layers;
- :mod:`.delayed_wgrad`: delayed weight gradients inside the expert-parallel overlap's combined step;
- :mod:`.optimizers`: Adam, SGD and Muon state bytes and their sharding (partial distributed optimizer);
- :mod:`.muon_step`: the Muon optimizer step (Newton-Schulz working set beside Adam's temporaries);
- :mod:`.gtp`: generalised tensor parallelism's weight sharding (GTP_remat): sharded states, gathered-weight and
  weight-gradient buffers;
- :mod:`estimator.config.rules.features`: the cross-field rules Megatron-Core enforces for them.

:func:`plan` returns ``None`` when none of them is switched on, so the default path does no extra work.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from ...config.derived import recipe_features
from ..activations import held_per_layer, layer_activations, stage_extras
from ..states import stage_fp8_scales
from ..vision import vision_stage
from . import (comm_buffers, cuda_graphs, delayed_wgrad, fsdp, gtp, muon_step, offload, optimizers, paged_stash,
               peft, schedule)
from .assumptions import assumptions

__all__ = ["Plan", "StageAdjustment", "assumptions", "plan", "step_modelled"]


class StageAdjustment(NamedTuple):
    """A stage's figures after the features: states, activations, transient buffers, and what lies outside."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    activation_parts: dict      # extra activation components (negative: moved to the host)
    transient: dict
    outside_allocator: dict     # device bytes not allocated through PyTorch's caching allocator
    host: dict                  # host bytes, by kind
    reserve_exempt: int         # allocated bytes in a pool of their own (no caching-allocator reserve)
    step_own: dict | None = None  # the optimizer step's own buffers where a feature replaces Megatron's step
    step_gradients: int | None = None  # the gradients alive at the step, where not all of them (FSDP2)


def _active(cfg) -> bool:
    return bool(recipe_features(cfg))


def step_modelled(cfg) -> bool:
    """Whether the optimizer step is modelled (estimator/memory/optimizer_step.py): with no feature switched on, or with
    only SGD (its states are plain per-parameter buffers, stepped like Adam's), Muon without FSDP
    (:mod:`.muon_step`), PyTorch FSDP2 (Megatron-Core's Float16Optimizer steps its shards), optimizer CPU offload
    (offload.py: its own step buffers), Megatron-FSDP (:func:`.fsdp.megatron_fsdp_step`, HSDP included), GTP
    (:func:`.gtp.step_own`), the whole-iteration CUDA graph (the step stays eager) and the optimizer step's own graph
    (the same step, replayed).
    Otherwise the forward/backward peak is reported."""
    if not _active(cfg):
        return True
    tr, par = cfg.training, cfg.parallelism
    if tr.optimizer not in ("adam", "sgd", "muon"):
        return False
    if tr.optimizer == "muon" and (par.use_megatron_fsdp or par.use_torch_fsdp2):
        return False
    mfsdp = par.use_megatron_fsdp
    plain = replace(cfg, training=replace(tr, optimizer="adam", sgd_momentum=0.9, optimizer_cpu_offload=False,
                                          optimizer_cuda_graph=False,
                                          optimizer_offload_fraction=1.0, use_layer_wise_param_layout=True,
                                          cuda_graph_impl=("none" if tr.cuda_graph_impl == "full_iteration"
                                                           else tr.cuda_graph_impl)),
                    parallelism=replace(par, use_torch_fsdp2=False, torch_fsdp2_reshard_after_forward=True,
                                        use_megatron_fsdp=False, tensor_parallel_num_weight_shards=None,
                                        expert_tensor_parallel_num_weight_shards=None,
                                        num_distributed_optimizer_instances=(
                                            1 if mfsdp else par.num_distributed_optimizer_instances)))
    return not _active(plain)


def plan(r, bm, layout, acts: dict):
    """The features of a resolved configuration, or ``None`` when it uses none of them."""
    cache = r.cfg.__dict__          # the frozen Config's instance dict: remember the answer on it
    active = cache.get("_features_active")
    if active is None:
        active = cache["_features_active"] = _active(r.cfg)
    return Plan(r, bm, layout, acts) if active else None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Plan:
    """What the features change, prepared once per estimate; :meth:`stage` applies it to one stage."""

    def __init__(self, r, bm, layout, acts: dict):
        cfg = r.cfg
        self.r, self.bm, self.layout = r, bm, layout
        par, tr, pr = cfg.parallelism, cfg.training, cfg.precision
        self.frozen = tr.peft is not None
        self.step_modelled = step_modelled(cfg)
        acts = dict(enumerate(acts))    # layer-kind index (r.kinds) -> LayerActivations
        self.stash = paged_stash.applies(cfg) and any(k.moe for k in r.kinds)
        self.fine_grained = tr.fine_grained_activation_offloading
        if (self.frozen or tr.cuda_graph_impl != "none"
                or tr.overlap_moe_expert_parallel_comm or self.stash or self.fine_grained) \
                and not tr.freeze_language_model:
            # (a frozen language model's layers come with their parts already, their frozen linears' inputs left out:
            # estimator/memory/assemble/per_kind.py kind_activations, frozen_language.py)
            acts = {k: layer_activations(r, r.kinds[k], parts=True) for k in acts}
        if self.frozen:
            acts = {k: peft.peft_activations(r, a, r.kinds[k]) for k, a in acts.items()}
            self.adapters = {k: peft.adapter_params(r, r.kinds[k]) for k in acts}     # (dense, expert) per layer
        self.acts = acts
        self.ep_overlap = ({k: schedule.ep_overlap_layer(r, r.kinds[k], a) for k, a in acts.items()}
                           if tr.overlap_moe_expert_parallel_comm else None)
        self.delay = ({k: delayed_wgrad.kind_windows(r, r.kinds[k], a.parts) for k, a in acts.items()}
                      if self.ep_overlap and tr.delay_wgrad_compute else None)
        if self.ep_overlap or par.use_megatron_fsdp:
            ex = stage_extras(r, None)
            self.loss_act, self.emb_act = ex.output, ex.embedding
        self.ob = optimizers.optimizer_bytes(r, bm)
        self.opt_shards = optimizers.optimizer_shards(r)
        self.ping_pong = (tr.optimizer == "muon" and tr.use_distributed_optimizer
                          and not tr.use_layer_wise_param_layout)
        self.bf16 = schedule.bf16_layers(r)
        if self.bf16:
            rb = schedule.bf16_resolved(r)
            self.acts_bf16 = {k: layer_activations(rb, rb.kinds[k]) for k in acts}
        self.nocache = ((pr.fp8 and not pr.fp8_param_gather) or (pr.fp4 and not pr.fp4_param_gather)) \
            and pr.disable_parameter_transpose_cache
        self.full_recompute = tr.recompute_granularity == "full"
        self.offload_layers = tr.cpu_offloading_num_layers if tr.cpu_offloading else 0
        if self.fine_grained:
            # The offload groups each layer kind opens (offload.py), in forward order.
            B = 4 if cfg.precision.params_dtype == "fp32" else 2
            mods = frozenset(tr.offload_modules or ())
            self.groups = {k: offload.layer_groups(r.kinds[k], a.parts, mods, tr.min_offloaded_tensor_size, B)
                           for k, a in acts.items()}
            self.mtp_groups = {name for k in set(r.mtp_kinds)
                               for name, _ in offload.layer_groups(r.kinds[k], layer_activations(
                                   r, r.kinds[k], parts=True).parts, mods, tr.min_offloaded_tensor_size, B)}
        self.graphs = tr.cuda_graph_impl == "transformer_engine"
        self.full_graph = tr.cuda_graph_impl == "full_iteration"    # the plain peak, a pool beside it (step_outside)
        self.step_graph = tr.optimizer_cuda_graph                  # the optimizer step's graph: the same
        if self.graphs:
            self.graph_work = cuda_graphs.capture_work(r, [(r.kinds[k], a) for k, a in acts.items()])
            self.graph_static = {k: cuda_graphs.static_bytes_per_layer(r, r.kinds[k]) for k in acts}
            self.graph_bytes = {k: cuda_graphs.captured_bytes(r, r.kinds[k], a) for k, a in acts.items()}
        vis = vision_stage(r) if tr.vision_cuda_graph_impl != "none" else None
        self.vision_graphs = vis.graphs if vis is not None else None     # the tower's own graphs (vision.py)
        self.tower_units = fsdp.tower_units(r) if par.use_megatron_fsdp else []
        # Muon: the vision tower's trained 2-D weights on the first stage (estimator/memory/vision.py)
        tower = vision_stage(r) if tr.optimizer == "muon" else None
        self.tower_matrices = tower.matrices if tower is not None else ()
        outside = {}
        tp_ub = comm_buffers.tp_overlap_bytes(r)
        if tp_ub:
            outside["tp_comm_overlap_userbuffers"] = tp_ub
        self.outside = outside
        self.flex = 0
        if r.E and cfg.model.moe_token_dispatcher_type == "flex":
            if cfg.model.moe_flex_dispatcher_backend == "hybridep":
                self.flex = ("hybridep_buffers", comm_buffers.hybridep_bytes(r))
            else:
                self.flex = ("deepep_buffers", comm_buffers.deepep_bytes(r))
        self.deferred = schedule.deferred_wgrad_bytes(r)
        self.dora = peft.dora_transient(r, bm.weight) if self.frozen else 0
        self.gtp = gtp.active(cfg)

    def skips_vocab_wgrad(self, last: bool) -> bool:
        """No per-micro-batch weight gradient of the output layer / embedding on this stage: frozen under PEFT,
        or deferred to the pipeline flush (``defer_embedding_wgrad_compute``) on the last stage."""
        return self.frozen or bool(self.deferred and last)

    def shards(self) -> tuple[int, int]:
        """(dense, expert) shard counts of the optimizer states."""
        par = self.r.cfg.parallelism
        if par.use_megatron_fsdp or par.use_torch_fsdp2:
            return fsdp.fsdp_shards(self.r)[2:]
        return self.opt_shards

    def _fsdp_grads_in_backward(self, q, chunks, flight, first, last, phase, transient, parts, activations,
                                bwd_work) -> int:
        """Megatron-FSDP's unsharded gradient buckets at the peak (:func:`.fsdp.grads_in_backward`), over each
        chunk whose backward pass can run; updates ``transient`` and ``parts``, returns the activations."""
        best, at = None, 0
        # The combined 1F1B step's delayed weight gradients belong to its moment (schedule.py, delayed_wgrad.py).
        together = ("delayed_wgrad",) if phase == "ep_overlap_1f1b_step" else ()
        value = transient[phase] + sum(transient.get(k, 0) for k in together)
        for c_idx in (c for c, k in enumerate(flight) if k):
            # q.units begins with the tower's layers on the first stage (their backward comes after the decoder's)
            start = (len(self.tower_units) if first else 0) + sum(len(c) for c in chunks[:c_idx])
            kinds = self._kinds(chunks[c_idx])
            out = last and c_idx == len(chunks) - 1
            root = q.root if out or (first and c_idx == 0) else 0
            held = held_per_layer(self.r.cfg.training, [self.acts[k] for k in kinds])
            if self.fine_grained:
                # What the backward pass releases of a layer is what stayed on the GPU (offload.py).
                held = [h - sum(b for _, b in self.groups[k]) for h, k in zip(held, kinds)]
            got = fsdp.grads_in_backward(q, q.units[start:start + len(kinds)], held,
                                         q.root if out else 0, root, phase, value, bwd_work,
                                         self.loss_act if out else 0)
            total = got[0] - got[1] + (value if got[2] is None else got[2])
            if best is None or total > at:
                best, at = got, total
        grads, released, work = best
        if work is not None:
            del transient[phase]
            for k in together:
                transient.pop(k, None)
            transient["backward_working_set"] = work
            parts["released_in_backward"] = -released
            activations -= released
        if grads:
            transient["fsdp_unsharded_grads"] = grads
        else:
            transient.pop("fsdp_unsharded_grads", None)
        return activations

    # ------------------------------------------------------------------ per layer and chunk helpers
    def _kinds(self, c: range) -> list:
        """The layer-kind index (``r.kinds``) of each decoder layer of a chunk."""
        kinds = self.r.layer_kinds
        return [kinds[i] for i in c]

    def _layer_params(self, k: int) -> tuple[int, int]:
        """(elements, linear elements) of one decoder layer of kind ``k`` on one GPU."""
        dense, lin, exp = self.layout[0][k]
        return dense + exp, lin + exp

    def _chunk_extra(self, c: range) -> tuple[int, int]:
        """(FP8 weight copies, bf16-layer difference) kept by one micro-batch of one chunk."""
        if self.full_recompute or not (self.nocache or self.bf16):
            return 0, 0
        copies = delta = 0
        for i, k in zip(c, self._kinds(c)):
            if i in self.bf16:
                delta += self.acts_bf16[k].saved - self.acts[k].saved
            elif self.nocache:
                copies += self.bm.fp8_cache * self._layer_params(k)[1] + self.bm.layer_scales(k)
        return copies, delta

    # ------------------------------------------------------------------ one stage
    def step_outside(self, fwd_bwd: int, step: int, kept: int) -> dict:
        """Device bytes outside the allocated peak that follow from both phases' peaks (``kept``: the model states
        and run-long buffers): the private pool of the whole-iteration graph or of the optimizer step's graph
        (cuda_graphs.full_iteration_pool; with both, each pool holds its own phase's working set, the same sum)."""
        if not ((self.full_graph or self.step_graph) and step):
            return {}
        pool = cuda_graphs.full_iteration_pool(fwd_bwd, step, kept)
        key = "cuda_graph_private_pool" if self.full_graph else "optimizer_cuda_graph_pool"
        return {key: pool} if pool else {}

    def stage(self, s_idx: int, chunks: tuple, first: bool, last: bool, dense_p: int, linear_p: int,
              expert_p: int, st, activations: int, flight: tuple, transient: dict, bwd_work: int) -> StageAdjustment:
        """One stage's figures after the features; ``flight[c]``: the micro-batches of chunk c held at the peak."""
        r, bm, cfg = self.r, self.bm, self.r.cfg
        par, tr = cfg.parallelism, cfg.training
        weights, grads, opt = st
        host: dict = {}
        parts: dict = {}
        transient = dict(transient)
        layers = [i for c in chunks for i in c]
        kinds = [k for c in chunks for k in self._kinds(c)]

        # --- model states ----------------------------------------------------------------------
        moments = self.ob.other - self.ob.master
        fp8_lin = linear_p + expert_p
        # The FP8 weights' scale tensors (estimator/model/fp8_scales.py), counted in ``weights`` by state_bytes.
        all_scales = fp8_scales = stage_fp8_scales(r, bm, [kinds.count(k) for k in range(len(r.kinds))],
                                                   r.plan[s_idx].mtp) if bm.fp8_scales else 0
        if self.bf16:
            bf16_lin = sum(self._layer_params(k)[1] for i, k in zip(layers, kinds) if i in self.bf16)
            bf16_scales = sum(bm.layer_scales(k) for i, k in zip(layers, kinds) if i in self.bf16)
            weights += bf16_lin * (bm.weight - (bm.linear_weight or bm.weight) - bm.fp8_cache) - bf16_scales
            fp8_lin -= bf16_lin
            fp8_scales -= bf16_scales
        if self.nocache:
            weights -= bm.fp8_cache * fp8_lin + fp8_scales
        sd, se = self.opt_shards
        step_own = step_grads = queue = None
        if par.use_megatron_fsdp or par.use_torch_fsdp2:
            units = [self._layer_params(k) for k in kinds]
            tower = self.tower_units if first else []       # the vision tower's layers: FSDP units too (below)
            root = dense_p + expert_p - sum(u for u, _ in units) - sum(u for u, _, _ in tower)
            if par.use_megatron_fsdp:
                # (dense, dense linear, expert) per unit, in forward order: the tower's layers run first
                units = tower + [self.layout[0][k] for k in kinds]
                u_scales = [bm.fp8_scales[k] for k in kinds] if bm.fp8_scales else None
                fs = fsdp.megatron_fsdp_states(r, bm, moments, dense_p, linear_p, expert_p, units, root,
                                               all_scales, u_scales)
                step_own = fsdp.megatron_fsdp_step(r, bm, dense_p, expert_p, units, root, first, u_scales)
                queue = fs.grad_queue
                if par.megatron_fsdp_cuda_graph_mode:   # the step's cast gradient shards, kept all run
                    kept = fsdp.graph_mode_grad_copies(step_own)
                    if kept:
                        transient["fsdp_grad_shard_copies"] = kept
            else:
                fs = fsdp.torch_fsdp2_states(r, bm, moments, dense_p, expert_p, units, root)
                # FSDP2's gradients are the parameters' own .grad, which Megatron-Core's Float16Optimizer frees as
                # it copies each to fp32 (optimizer.py _copy_model_grads_to_main_grads: "Safe to deallocate").
                step_grads = 0
            weights, grads, opt = fs.weights, fs.gradients, fs.optimizer
            transient.update(fs.transient)
        elif self.frozen:
            # Dense adapters shard over the data-parallel ranks, expert adapters over the expert data-parallel
            # ranks (peft.py), as the distributed optimizer shards the weights they adapt.
            nd = sum(self.adapters[k][0] for k in kinds)
            ne = sum(self.adapters[k][1] for k in kinds)
            weights += bm.weight * (nd + ne)
            grads = bm.grad * (nd + ne)
            n_sh = _cdiv(nd, sd) + _cdiv(ne, se)
            opt = self.ob.linear * n_sh
        elif tr.optimizer != "adam" or par.num_distributed_optimizer_instances > 1:
            if tr.optimizer == "adam":
                opt = bm.optimizer * (_cdiv(dense_p, sd) + _cdiv(expert_p, se))
            else:
                # Muon: the vision tower's 2-D weights (in dense_p) at Muon's rate too (muon_step.py)
                tower = self.tower_matrices if first else ()
                tl = sum(a * b * n for a, b, n in tower)
                opt = (self.ob.linear * (_cdiv(linear_p + tl, sd) + _cdiv(expert_p, se))
                       + self.ob.other * _cdiv(dense_p - linear_p - tl, sd))
                if self.ping_pong:
                    # Whole tensors in ping-pong order (optimizers.py): the busiest rank holds the largest.
                    moes = [r.kinds[k].moe for k in kinds]
                    opt += optimizers.ping_pong_extra(
                        self.ob, (sd, se), self.layout[2] if first or last else 0,
                        max(optimizers.largest_matrix(r, not all(moes), any(moes)),
                            max((a * b for a, b, _ in tower), default=0)),
                        optimizers.largest_expert_matrix(r) if any(moes) else 0)
            if tr.optimizer == "muon" and not tr.optimizer_cpu_offload:
                # Muon for the matrices, Adam for the rest, stepped one after the other (muon_step.py).
                step_own = muon_step.muon_step_buffers(r, bm, kinds, dense_p, linear_p, expert_p, (sd, se),
                                                       self.layout[2] if first or last else 0, self.ping_pong,
                                                       self.tower_matrices if first else ())
        gtp_stage = None
        if self.gtp:
            # GTP (gtp.py): the sharded weights' states over GTP_remat, the optimizer over the replicate group, and
            # the gathered-weight and weight-gradient buffers held for the run. Refused with the branches above.
            gtp_stage = gtp.stage(r, bm, r.plan[s_idx].chunks, dense_p, expert_p, (weights, grads), (sd, se))
            weights, grads, opt = gtp_stage.weights, gtp_stage.gradients, gtp_stage.optimizer
            transient.update(gtp_stage.buffers)
            if "te_dummy_wgrad" in transient:
                transient["te_dummy_wgrad"] = gtp_stage.dummy_wgrads
            if step_own is None:
                step_own = gtp.step_own(r, bm, gtp_stage, (sd, se))
        if tr.optimizer_cpu_offload:
            # HybridDeviceOptimizer (offload.py): fp32 copies and Adam on the GPU part, whole tensors to the CPU.
            oo = offload.stage_optimizer_offload(r, kinds, r.plan[s_idx].chunks, first or last, dense_p, expert_p,
                                                 (sd, se), n_sh if self.frozen else None)
            opt = oo.gpu
            host["optimizer_pinned"] = oo.pinned
            host["optimizer_states"] = oo.pageable
            step_own = {"optimizer_offload_staging": oo.staging} if oo.staging else {}

        # --- activations -----------------------------------------------------------------------
        copies = delta = 0
        for c_idx, k in enumerate(flight):
            if k:
                a, b = self._chunk_extra(chunks[c_idx])
                copies += k * a
                delta += k * b
        if copies:
            parts["fp8_weight_copies"] = copies
        if delta:
            parts["bf16_layers"] = delta
        activations += copies + delta
        moved = 0
        if self.offload_layers:
            moved = sum(flight) * sum(self.acts[k].saved for k in kinds[:self.offload_layers])
            host["activations_pinned"] = moved
        if self.fine_grained:
            # Fine-grained activation offloading (offload.py): the listed groups of the handlers in flight on the
            # host, but what Megatron-Core's policy keeps, and the two groups reloaded at once in the backward pass.
            fg = offload.fine_grained_offload(
                [[g for k in self._kinds(c.layers) for g in self.groups[k]] for c in r.plan[s_idx].chunks],
                [self.mtp_groups if len(c.mtp) else frozenset() for c in r.plan[s_idx].chunks], flight, last,
                s_idx, tr.activation_offload_fraction, tr.delta_offload_bytes_across_pp_ranks)
            moved = fg.moved
            if moved:
                host["activations_pinned"] = moved
            if fg.reloaded:
                parts["offload_reloaded"] = fg.reloaded
                activations += fg.reloaded
        if moved:
            parts["offloaded"] = -moved
            activations -= moved
        if self.stash:
            # The paged stash (paged_stash.py): the experts' saved tensors of the MoE layer micro-batches in flight
            # leave for its buffers; one layer's come back at a time.
            n = sum(k * sum(1 for j in self._kinds(chunks[c_idx]) if r.kinds[j].moe)
                    for c_idx, k in enumerate(flight) if k)
            moe_parts = max((self.acts[j].parts for j in range(len(r.kinds)) if r.kinds[j].moe),
                            key=lambda p: sum(p.get(x, 0) for x in paged_stash.STASHED))
            T = r.s * r.b // r.cp
            ps = paged_stash.stash(r, T, T // r.t if r.sp else T, moe_parts, n)
            if ps:
                parts["paged_stash_moved"] = -ps.moved
                parts["paged_stash_reload"] = ps.reload
                activations += ps.reload - ps.moved
                transient["paged_stash_buffers"] = ps.buffer
                if ps.host:
                    host["paged_stash_pinned"] = ps.host

        # --- transient buffers -----------------------------------------------------------------
        if self.frozen:
            transient.pop("te_dummy_wgrad", None)
            if self.dora:
                transient["dora_weight_norm"] = self.dora
        if self.deferred and last:
            transient["deferred_output_wgrad"] = self.deferred
        if self.full_graph:
            transient["cuda_graph_capture_workspaces"] = cuda_graphs.capture_workspaces(cfg)
        step_kinds = sorted(set(kinds) | (set(r.mtp_kinds) if r.plan[s_idx].mtp else set()))
        if self.ep_overlap and step_kinds:
            # Combined 1F1B (schedule.py): a forward layer's pre-dispatch part and its permuted tokens beside a
            # backward layer's MLP backward, whose callers hold its gradients. Without pipelining the backward
            # micro-batch's loss chunk is gone by then; the step replaces the phase that was the peak when larger.
            ep_layers = [self.ep_overlap[k] for k in step_kinds]
            phase = next(k for k in schedule.PEAK_PHASES if k in transient)
            step = schedule.ep_overlap_peak(ep_layers, bwd_work, self.loss_act if last and r.v == 1 else 0,
                                            self.emb_act if first else 0,
                                            r.cfg.training.ep_overlap_early_attn_memory_release)
            # Delayed weight gradients (delayed_wgrad.py): two later moments of the step.
            delayed = (delayed_wgrad.step_extra([(self.delay[k], self.ep_overlap[k]) for k in step_kinds],
                                                bwd_work) if self.delay else 0)
            if step + delayed > transient[phase]:
                del transient[phase]
                transient["ep_overlap_1f1b_step"] = step
                if delayed:
                    transient["delayed_wgrad"] = delayed
            # Every backward layer step, combined or not, runs through TransformerLayerSchedulePlan.run: its
            # callers hold the same gradients beside the working set (Megatron-FSDP's walk below).
            bwd_work += schedule.ep_overlap_backward(ep_layers)

        phase = next((k for k in schedule.PEAK_PHASES if k in transient), None)
        if queue and phase:
            activations = self._fsdp_grads_in_backward(queue, chunks, flight, first, last, phase, transient, parts,
                                                       activations, bwd_work)

        # --- outside the allocator, and pools of their own ------------------------------------
        outside = dict(self.outside)
        vg = self.vision_graphs if first and flight and flight[0] else None
        if self.graphs or vg is not None:
            # Eager warm-up, capture and steady state peak apart (cuda_graphs.py): keep the largest.
            held = [(n, k) for c_idx, n in enumerate(flight) if n for k in self._kinds(chunks[c_idx])] \
                if self.graphs else []
            if self.graphs and r.mtp and cfg.model.hybrid_layer_pattern is None:
                # A GPT model's MTP layers are graphed too (cuda_graphs.py: TECudaGraphHelper takes each chunk's
                # mtp.layers[i].mtp_model_layer, a TransformerLayer); a hybrid model's are HybridStack blocks.
                pc = r.plan[s_idx].chunks
                held += [(n, k) for c_idx, n in enumerate(flight) if n and len(pc[c_idx].mtp)
                         for _ in range(len(pc[c_idx].mtp)) for k in r.mtp_kinds]
            vision = (0, 0, 0, 0)
            if vg is not None:
                # The tower's graphs (vision.py): the first chunk's micro-batches in flight; the helper's static inputs
                # of every micro-batch of the step before Transformer Engine reuses them (one with PP 1).
                k0, step_mbs = flight[0], (r.m or flight[0]) if r.p > 1 else 1
                vision = (k0 * vg.captured, k0 * vg.static, max(step_mbs, k0) * vg.created, vg.work)
            gp = cuda_graphs.peak(r, weights + grads + opt, activations, transient,
                                  sum(c * self.graph_bytes[k] for c, k in held),
                                  sum(c * self.graph_static[k] for c, k in held),
                                  self.graph_work if self.graphs else 0, vision)
            activations, transient = gp.activations, gp.transient
            parts.update(gp.parts)
            if gp.pool_outside:
                outside["cuda_graph_private_pool"] = gp.pool_outside
        if self.flex and any(r.kinds[k].moe for k in kinds):
            outside[self.flex[0]] = self.flex[1]
        exempt = 0
        if par.nccl_ub and not (par.use_megatron_fsdp or par.use_torch_fsdp2):
            exempt = grads + (weights if tr.use_distributed_optimizer else 0)
        if gtp_stage is not None:
            exempt += gtp_stage.own_pool
        return StageAdjustment(weights, grads, opt, activations, parts, transient, outside, host, exempt, step_own,
                               step_grads)
