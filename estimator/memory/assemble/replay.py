"""Reserved bytes from the allocator replay: the link from the stage assembly to :mod:`estimator.memory.reserved`.

With ``training.reserved_memory_model: replay`` each stage's allocation trace (its states, the activations
of its micro-batches in flight, the passes' transient buffers and the optimizer step's) runs through the
simulated PyTorch caching allocator; of more than :data:`MAX_REPLAYED_STAGES` stages only some are replayed.
"""

from __future__ import annotations

from ...model.fp8_scales import quantized
from ...model.layers import kind_linear_shapes
from ...model.layers.moe import routed_rows
from ...model.local_attention import torch_softmax
from ...model.resolve import DTYPE_BYTES, Resolved
from .. import reserved
from ..activations import layer_activations
from ..allocator import parse_alloc_conf
from ..optimizer_step import PERSISTENT_BUFFERS, separate_expert_optimizer
from .per_kind import positive


#: Stages of a pipeline replayed through the allocator at most (the first, the last, the fullest, evenly spaced).
MAX_REPLAYED_STAGES = 8


def with_replayed_reserve(stages: list, pending: list) -> list:
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
        loss=(positive(loss.forward_extra), positive(loss.saved), positive(loss.backward_extra),
              positive(vocab_wgrad, B * Tn * r.h)),
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
