"""Reserved memory: one training step per stage as a trace of tensor allocations and frees, replayed through the
simulated caching allocator (:mod:`estimator.memory.allocator`) under the run's ``PYTORCH_CUDA_ALLOC_CONF``.

``torch.cuda.max_memory_reserved()`` exceeds ``max_memory_allocated()`` by what the allocator caches at its peak:
blocks freed earlier (the per-parameter weights DDP copied into its buffer, the activations of the last backward,
the optimizer step's temporaries) that the tensors alive at the peak could not reuse, and the rest of segments
cut for smaller requests. This module writes the step as the tensors Megatron-Core creates, in its order, and takes
the simulator's peak of reserved segments. Sources (sizes from this package's own per-layer byte breakdown):

- setup: the model's parameters one tensor per weight (``kind_linear_shapes``; norms, biases and the router in
  one tensor per layer); Megatron-LM @ d98e8a64 ``megatron/core/distributed/param_and_grad_buffer.py``
  (``_ParamAndGradBuffer``: one ``grad_data`` per buffer, dense and routed experts apart, and with the
  distributed optimizer one ``param_data`` into which every weight is copied and its own tensor freed);
  ``megatron/core/optimizer/{optimizer,distrib_optimizer}.py``: the fp32 main parameters, one ``clone().float()``
  per parameter (its shard with the distributed optimizer; the clone in the weights' dtype is freed once cast)
  when the optimizer is built; the Adam or momentum
  states one tensor per parameter and state at the first ``step()`` (``torch.optim.adamw``
  ``_init_group``, Transformer Engine's ``FusedAdam.initialize_state``);
- each forward pass: per layer, the tensors :func:`estimator.memory.activations.layer_activations` names
  (``parts``), the rest of the layer's saved bytes as one tensor, the unfused attention's scores before the
  softmax (made before the softmax output it keeps, freed after); a full-recompute layer allocates them and keeps
  only its checkpoint; the loss chunk's norm, logits and the loss's own buffers (:mod:`estimator.memory.loss`);
- each backward pass, layers in reverse: the rematerialised tensors, the layer's gradient working set (in pieces no
  larger than its largest saved tensor), unfused attention's score-sized tensors made and freed in the order of its
  autograd nodes (the kept softmax output, dropout output and mask one tensor each; :func:`_score_backward`), its saved tensors freed in reverse; the output layer's and the
  embedding's weight gradients; the loss's kept tensor freed before the output layer's backward where the loss
  makes a gradient buffer of its own (bf16 logits: the fp32 gradient cast back), after it where the gradient is
  written in place into it and read by the output layer (fp32 logits: Megatron-Core
  ``tensor_parallel/cross_entropy.py`` ``grad_input = softmax``; Transformer Engine's fused cross entropy, whose saved
  fp32 gradient is handed on as it is); the run-long buffers (workspaces, Megatron's global buffer) at first use;
- the optimizer step (:mod:`estimator.memory.optimizer_step`): the fp32 gradient copies, one ``model_grad.float()``
  per main parameter (Megatron-LM @ d98e8a64 ``megatron/core/optimizer/optimizer.py``
  ``_copy_model_grads_to_main_grads``), made before the first step's states and kept to the next iteration's
  ``zero_grad`` (``megatron/training/training.py`` ``train_step``, inside its forward/backward phase); then the
  implementation's temporaries, one tensor per main parameter in parameter order, freed in reverse (pytorch
  ``torch/optim/adam.py`` ``_multi_tensor_adam``: ``exp_avg_sq_sqrt = torch._foreach_sqrt(...)``, a list released
  from its last item; Transformer Engine's FusedAdam unscaled state copies likewise); a list of at most
  :data:`MAX_STEP_TENSORS` tensors (consecutive parameters merged beyond);
- PyTorch FSDP2 (``megatron/core/distributed/torch_fully_sharded_data_parallel.py``: ``fully_shard`` per decoder
  layer and embedding, the rest in the root unit): no gradient buffer; each unit's gradient, the reduce-scatter
  output its parameters' ``.grad`` are views of (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``
  ``foreach_reduce``), made at the end of the unit's first backward of the step (the root's at the end of the
  pass) on the reduce-scatter stream, so in that stream's own pool (its cached blocks serve no default-stream
  request), a later micro-batch's output added into it and freed; Float16Optimizer drops each as it copies it to
  fp32.

Two iterations are replayed (the first creates the optimizer states among the cached blocks of its activations;
the second is the steady state every later one repeats). The pipeline schedule is cut to its warm-up forwards and
at most :data:`STEADY_CYCLES` steady 1F1B cycles (later cycles repeat the allocator's state), and a stage whose
trace would pass :data:`MAX_EVENTS` merges runs of consecutive layers into one (their tensors summed), so the cost
is bounded whatever the model. A whole-iteration CUDA graph (``cuda_graph_impl: full_iteration``) replays the
eager warm-up steps, then ``torch.cuda.graph``'s ``empty_cache`` and the captured forward-backward in a private
pool that stays reserved (pytorch @ 001074d2 ``torch/cuda/graphs.py``). Megatron-LM's ``--empty-unused-memory-level``
(``training.empty_unused_memory_level``; Megatron-LM @ d98e8a64 ``megatron/training/training.py`` ``train_step``,
Megatron-Bridge @ 067f987d ``src/megatron/bridge/training/train.py`` alike) empties the cache after the
forward-backward passes (1) and after the optimizer step too (2): the segments then wholly free are given back.

Routed experts: without expert parallelism (and with the expert tensor-parallel size equal to the dense one) their
weights sit in the dense gradient buffer and optimizer, in model order (:func:`parameter_tensors` ``interleave``);
without grouped GEMM each local expert saves its own fc1 and activation outputs (:func:`_expert_parts`, balanced
routing assumed).

Multi-GPU layouts (:func:`_sequence_parallel`, :func:`_context_parallel_a2a`): with tensor parallelism and
sequence parallelism, Transformer Engine's forward all-gathers the input of each column-parallel linear and
reduce-scatters the whole-sequence output of each row-parallel one, four tensors of ``tp`` times a hidden-sized one
per layer, made and freed inside the layer's forward (the backward's gathers, tried the same way, move no replayed peak:
they fit the blocks the forward cached); with context parallelism's all-to-all, q, k, v and the attention output
(and their gradients) are cut on Transformer Engine's CP stream, from that stream's own pool; with expert
parallelism, the all-to-all token dispatcher's permuted and dispatched tokens are held through the MoE layer's
forward and its combine's tokens made one after another at its end (:func:`_alltoall_dispatch`).

Not modelled, stated: the per-layer CUDA graphs' private pools, ``record_stream`` (no call on the paths replayed:
Megatron-LM @ d98e8a64 calls it only with overlapped MoE dispatch, activation offloading and the combined 1F1B
schedule; recent PyTorch's ProcessGroupNCCL keeps a collective's tensors alive instead), the kernels' own
temporaries inside one autograd node (only the estimate's working sets), uneven routing (each expert's tensors are
cut equal); NCCL's own buffers (``cudaMalloc`` outside the caching allocator, not in ``max_memory_reserved``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import NamedTuple

from .allocator import AllocatorConfig, CachingAllocator

__all__ = ["DETAILED_PASSES", "LayerTensors", "MAX_EVENTS", "MAX_LUMPS", "MAX_PARAM_TENSORS", "MAX_STEP_TENSORS", "MIN_STAGE_EVENTS", "Replay", "STEADY_CYCLES", "StageTrace", "build", "events",
           "layer_tensors", "parameter_tensors", "recording", "replay", "scaled", "schedule_passes", "split"]

#: Allocations and frees of one estimate's traces (all stages together) beyond which consecutive layers are merged:
#: about 2 us each in the simulator, so an estimate's replays stay near 15 ms (a stage gets at least
#: :data:`MIN_STAGE_EVENTS`).
MAX_EVENTS = 6000
MIN_STAGE_EVENTS = 800
#: In-flight micro-batches of a chunk replayed tensor by tensor (the others as one tensor each) ...
DETAILED_PASSES = 2
#: ... in at most this many tensors per chunk (several micro-batches to one where there are more).
MAX_LUMPS = 16
#: Steady 1F1B cycles replayed after the warm-up forwards (more repeat the allocator's state).
STEADY_CYCLES = 2
#: ``pool`` of a trace event allocated on a side stream: the caching allocator keeps one pair of pools per stream
#: and reuses a freed block only on the stream that allocated it (FSDP2's reduce-scatter and all-gather copy-in
#: streams, pytorch ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``).
REDUCE_SCATTER_STREAM = "reduce_scatter"
ALL_GATHER_STREAM = "all_gather"
#: Transformer Engine's context-parallel stream (``cp_stream``), on which the all-to-all's results are reordered
#: (:func:`_context_parallel_a2a`).
CONTEXT_PARALLEL_STREAM = "context_parallel"
_STREAM_IDS = {REDUCE_SCATTER_STREAM: 1, ALL_GATHER_STREAM: 2, CONTEXT_PARALLEL_STREAM: 3}


class LayerTensors(NamedTuple):
    """One decoder layer (or a run of merged layers) for one micro-batch, in bytes."""

    saved: tuple          # kept from its forward to its backward, in allocation order
    forward_temp: tuple   # allocated in its forward and freed at its end (full recompute: all but the checkpoint)
    remat: tuple          # rematerialised at the start of its backward (recompute), freed at its end
    work: tuple           # its backward's gradient working set, freed at its end
    attn_work: tuple = ()  # unfused attention's backward, after the MLP's saved tensors are freed
    n_mlp: int = 0        # how many of ``saved`` (the last ones) belong to the MLP
    wgrads: tuple = ()    # weight gradients made and freed one by one in its backward (no gradient-accumulation fusion)
    before: tuple = ()    # (i, bytes[, j]): a forward temporary made just before saved[i], freed just after saved[j]
    #                       (j = i when absent; j < i: freed at once, before saved[i]; i = len(saved): made and
    #                       freed at the layer's end); several may share an i, made in their order
    unit_grad: int = 0    # PyTorch FSDP2: the layer's reduce-scattered gradient, made at the end of its backward
    side: tuple = ()      # (i, copies): saved[i] and its gradient cut from the context-parallel stream's pool, made
    #                       after ``copies`` temporaries of its size on that stream (:func:`_context_parallel_a2a`)
    end_ops: tuple = ()   # at the end of its forward, after the saved tensors: ("a", bytes) makes a temporary, ("t", k)
    #                       frees the k-th; then the ``before`` temporaries held to the end (j = len(saved)) go
    score_ops: tuple = () # unfused attention's backward through its kept score tensors, in order: ("a", bytes) makes
    #                       a temporary, ("t", j) frees the j-th temporary, ("s", i) frees saved[i] (then not mirrored)


class StageTrace(NamedTuple):
    """What one stage's trace is built from (bytes; see the module docstring)."""

    params: tuple             # the stage's parameter tensors as the model builds them (weight dtype)
    grad_buffers: tuple       # DDP's grad_data, one per buffer
    param_buffer: int         # DDP's param_data (distributed optimizer), 0 without
    masters: tuple            # fp32 main parameters, one per parameter (shard), made when the optimizer is built
    #                           (``shard_model_param.clone().float()``: a copy in the weights' dtype first, freed)
    states: tuple             # optimizer states, one per parameter (shard) and state, made at the first step
    persistent: tuple         # run-long buffers, made at the first forward
    chunks: tuple             # per virtual chunk: (head tensors, layers: tuple[LayerTensors], tail tensors, embedding?,
                              # loss?)
    loss: tuple               # (forward temporaries, saved, backward temporaries, output-layer backward temporaries)
    embedding_wgrad: int      # the embedding's weight gradient, per backward of the embedding chunk
    counts: tuple             # (chunk-)micro-batches of each chunk in flight at the stage's peak
    microbatches: int | None  # micro-batches per step (None: enough to fill the pipeline)
    step: tuple               # the optimizer step's temporaries
    extra: tuple = ()         # other transient buffers of the estimate, alive from the first forward to the last backward
    full_graph: bool = False  # whole-iteration CUDA graph: the forward-backward in a private pool after warm-up
    warmup_steps: int = 0     # eager steps before the graph is captured
    clone_bytes: int = 0      # bytes per element of the copy a master is cast from (0: none, the optimizer makes it)
    root_grad: int = 0        # PyTorch FSDP2: the root unit's (embedding, output layer, final norm) gradient, made at
    #                           the end of the backward pass
    step_lists: tuple = ()    # the step's per-parameter tensor lists: (sizes, kept), made in parameter order; ``kept``
    #                           lists (fp32 gradient copies) live to the next iteration's zero_grad, the others
    #                           (foreach temporaries) are freed in reverse order once the update has run
    step_groups: tuple = ()   # the step per parameter group, in order: (how many of ``states`` it makes at the first
    #                           step, its temporaries' lists); with it ``step_lists`` holds only the kept lists
    empty_cache_level: int = 0  # Megatron-LM's --empty-unused-memory-level: 1 empties the cache after the
    #                           forward-backward passes, 2 after the optimizer step too


def split(total: int, piece: int) -> tuple:
    """``total`` bytes as tensors of at most ``piece`` bytes (the last one the remainder)."""
    if total <= 0:
        return ()
    if piece <= 0 or piece >= total:
        return (total,)
    n, rest = divmod(total, piece)
    return (piece,) * n + ((rest,) if rest else ())


def _ballast(layers: tuple, keep: int) -> tuple[int, tuple]:
    """(bytes, layers): all but the last ``keep`` layers of a chunk as one tensor of their saved bytes together."""
    if len(layers) <= keep:
        return 0, layers
    return sum(sum(lt.saved) for lt in layers[:len(layers) - keep]), layers[len(layers) - keep:]


def _layer_events(lt: LayerTensors) -> int:
    # unfused attention's score_ops (at most 15 a layer) are left out: counting them would cut the layers replayed
    # one by one (the trace's fidelity) for a bounded few more events
    return 2 * (2 * len(lt.saved) + len(lt.forward_temp) + len(lt.remat) + len(lt.work) + len(lt.attn_work)
                + len(lt.wgrads))


def events(t: StageTrace, budget: int = MAX_EVENTS) -> list:
    """The stage's trace: ``("+", key, bytes, pool)`` allocations and ``("-", key)`` frees, in order (``pool`` None
    for the regular pools, 1 for a CUDA graph's private pool), ``("mark", phase)`` where a phase begins (``setup``,
    ``fwd_bwd``, ``optimizer``) and ``("empty_cache",)``.

    Bounded by ``budget`` (about): of a chunk's in-flight micro-batches all but :data:`DETAILED_PASSES` are
    replayed as one tensor each (what that micro-batch keeps on the chunk; several to a tensor beyond
    :data:`MAX_LUMPS`), and of the detailed ones' layers all but
    the last few as one tensor (their saved bytes together, made at the forward's start, freed at the backward's
    end). Tensor sizes are never merged into larger ones but there: the cache's blocks stay the sizes PyTorch sees."""
    out: list = []
    counter = [0]

    def alloc(size: int, pool=None):
        if size <= 0:
            return None
        counter[0] += 1
        key = counter[0]
        out.append(("+", key, size, pool))
        return key

    def free(key):
        if key is not None:
            out.append(("-", key))

    passes = schedule_passes(len(t.chunks), t.counts, t.microbatches, DETAILED_PASSES)
    detailed = sum(1 for p in passes if not p[2])
    per_layer = max((_layer_events(lt) for ch in t.chunks for lt in ch[1][:1]), default=2)
    keep = max(budget // (2 * max(detailed, 1) * per_layer), 1)
    chunks = []
    for head, layers, tail, has_emb, has_loss in t.chunks:
        ballast, layers = _ballast(tuple(layers), keep)
        whole = sum(head) + sum(sum(lt.saved) for lt in layers) + ballast + sum(tail) + (sum(t.loss[1]) if has_loss
                                                                                           else 0)
        chunks.append((head + ((ballast,) if ballast else ()), layers, tail, has_emb, has_loss, whole))

    out.append(("mark", "setup"))
    params = [alloc(s) for s in t.params]
    for s in t.grad_buffers:
        alloc(s)
    if t.param_buffer:
        alloc(t.param_buffer)
        for k in params:
            free(k)
    for s in t.masters:
        clone = alloc(s * t.clone_bytes // 4) if t.clone_bytes else None
        alloc(s)
        free(clone)
    persistent_made = [False]

    unit_grads: dict = {}     # FSDP2: (chunk, layer) -> key of its gradient, alive from its first backward to the step

    def unit_grad(key, size, pool):
        # FSDP2 foreach_reduce: the reduce-scatter output, allocated on the reduce-scatter stream (its own pool:
        # its cached blocks serve only later reduce-scatter outputs), becomes the sharded .grad at the unit's first
        # backward of the step; a later micro-batch's output is added into it and freed
        if not size:
            return
        pool = REDUCE_SCATTER_STREAM if pool is None else pool
        if key in unit_grads:
            free(alloc(size, pool))
        else:
            unit_grads[key] = (alloc(size, pool), size)

    def iteration(pool=None):
        out.append(("mark", "fwd_bwd"))
        zero_grad()
        held: dict = {}
        extra = []
        for kind, c, lumped in passes:
            head, layers, tail, has_emb, has_loss, whole = chunks[c]
            if kind == "F":
                if not persistent_made[0]:
                    for s in t.persistent:
                        alloc(s)
                    persistent_made[0] = True
                if not extra and t.extra:
                    extra = [alloc(s, pool) for s in t.extra]
                if lumped:
                    held.setdefault(c, []).append(([alloc(whole * lumped, pool)], None, 0, 0))
                    continue
                keys = [alloc(s, pool) for s in head]
                for lt in layers:
                    before: dict = {}
                    for b in lt.before:
                        before.setdefault(b[0], []).append(b)
                    pending: dict = {}
                    side = dict(lt.side)
                    for i, s in enumerate(lt.saved):
                        for b in before.get(i, ()):
                            j = b[2] if len(b) > 2 else i
                            k = alloc(b[1], pool)
                            if j < i:          # made and freed before saved[i]
                                free(k)
                            else:
                                pending.setdefault(j, []).append(k)
                        if i in side and pool is None:
                            copies = [alloc(s, CONTEXT_PARALLEL_STREAM) for _ in range(side[i])]
                            keys.append(alloc(s, CONTEXT_PARALLEL_STREAM))
                            for k in reversed(copies):
                                free(k)
                        else:
                            keys.append(alloc(s, pool))
                        for k in pending.pop(i, ()):
                            free(k)
                    ends = []
                    for op, x in lt.end_ops:
                        if op == "a":
                            ends.append(alloc(x, pool))
                        else:
                            free(ends[x])
                    for k in pending.pop(len(lt.saved), ()):
                        free(k)
                    for b in before.get(len(lt.saved), ()):     # at the layer's end
                        free(alloc(b[1], pool))
                    temp = [alloc(s, pool) for s in lt.forward_temp]
                    for k in reversed(temp):
                        free(k)
                keys += [alloc(s, pool) for s in tail]
                n_tail = len(tail)
                if has_loss:       # the loss: its temporaries made first (the bf16 logits), freed once it has run
                    tmp = [alloc(s, pool) for s in t.loss[0]]
                    saved = [alloc(s, pool) for s in t.loss[1]]
                    for k in reversed(tmp):
                        free(k)
                    keys += saved
                    n_tail += len(saved)
                held.setdefault(c, []).append((keys, len(head), n_tail, 1))
                continue
            keys, n_head, n_tail, _ = held[c].pop(0)
            if n_head is None:           # a micro-batch replayed whole
                free(keys[0])
                continue
            if has_loss:
                # The loss's backward: with a backward buffer of its own (bf16 logits: the fp32 gradient cast
                # back to bf16) the kept fp32 tensor goes before the output layer's backward; without one (fp32
                # logits: the gradient written in place into the kept tensor, or Transformer Engine's kept fp32
                # gradient handed on) the output layer's backward reads the kept tensor: freed after it
                tmp = [alloc(s, pool) for s in t.loss[2]]
                kept = list(reversed(keys[len(keys) - len(t.loss[1]):] if t.loss[1] else []))
                if tmp:
                    for k in kept:
                        free(k)
                for s in t.loss[3]:
                    free(alloc(s, pool))
                if not tmp:
                    for k in kept:
                        free(k)
                for k in reversed(tmp):
                    free(k)
            for k in reversed(keys[len(keys) - n_tail:len(keys) - (len(t.loss[1]) if has_loss else 0)]):
                free(k)
            keys = keys[:len(keys) - n_tail]
            pos = len(keys)
            for j, lt in zip(range(len(layers) - 1, -1, -1), reversed(layers)):
                mine = keys[pos - len(lt.saved):pos]
                pos -= len(lt.saved)
                remat = [alloc(s, pool) for s in lt.remat]
                work = [alloc(s, pool) for s in lt.work]
                n_att = len(mine) - lt.n_mlp
                grad = None
                wg = list(lt.wgrads)

                side = dict(lt.side)

                def mirror(idx):
                    # autograd: the gradient of a saved tensor (its size) is made, the tensor and the gradient
                    # before it freed; a linear's weight gradient comes and goes on the way
                    nonlocal grad
                    for i in reversed(idx):
                        new = alloc(lt.saved[i], CONTEXT_PARALLEL_STREAM if i in side and pool is None else pool)
                        if wg:
                            free(alloc(wg.pop(), pool))
                        free(mine[i])
                        free(grad)
                        grad = new
                mirror(range(n_att, len(mine)))
                aw = [alloc(s, pool) for s in lt.attn_work]
                temps, done = [], set()
                for op, x in lt.score_ops:
                    if op == "a":
                        temps.append(alloc(x, pool))
                    elif op == "t":
                        free(temps[x])
                    else:
                        free(mine[x])
                        done.add(x)
                for k in reversed(aw):
                    free(k)
                mirror([i for i in range(n_att) if i not in done])
                while wg:
                    free(alloc(wg.pop(), pool))
                free(grad)
                for k in reversed(work):
                    free(k)
                for k in reversed(remat):
                    free(k)
                unit_grad((c, j), lt.unit_grad, pool)
            if has_emb and t.embedding_wgrad:
                free(alloc(t.embedding_wgrad, pool))
            for k in reversed(keys[:n_head]):
                free(k)
            if has_emb:
                unit_grad("root", t.root_grad, pool)
        for k in reversed(extra):
            free(k)

    kept_lists: list = []

    def step(first: bool):
        out.append(("mark", "optimizer"))
        # in the optimizer's parameter order: the layers from the first, the root unit (output layer last) at the end
        grads = [unit_grads[k] for k in sorted(unit_grads, key=lambda k: (1, 0, 0) if k == "root" else (0,) + k)]
        unit_grads.clear()
        kept = []
        made, dropped = 0, 0
        g_total = sum(g for _, g in grads)
        for sizes, keep in t.step_lists:
            if not keep:
                continue
            k_total = sum(sizes)
            for s in sizes:
                kept.append(alloc(s))
                made += s
                # Float16Optimizer: each gradient dropped once copied; a unit's storage goes with its last one
                while grads and (dropped + grads[0][1]) * k_total <= made * g_total:
                    key, g = grads.pop(0)
                    dropped += g
                    free(key)
        for key, _ in grads:
            free(key)
        # torch.optim's step (and Megatron's ChainedOptimizer) goes group by group: a group's states are made
        # (``_init_group``) just before its update, whose foreach temporaries are freed before the next group's
        groups = t.step_groups or ((len(t.states), tuple(sizes for sizes, keep in t.step_lists if not keep)),)
        done, tmp = 0, None
        for n_states, lists in groups:
            if first:
                for s in t.states[done:done + n_states]:
                    alloc(s)
            done += n_states
            if tmp is None:
                tmp = [alloc(s) for s in t.step]
            for sizes in lists:
                lst = [alloc(s) for s in sizes]
                for k in reversed(lst):
                    free(k)
        for k in reversed(tmp or ()):
            free(k)
        kept_lists.append(kept)

    def zero_grad():
        # Megatron's train_step: optimizer.zero_grad() before the forward drops the last step's gradient copies
        for k in kept_lists.pop() if kept_lists else ():
            free(k)

    def emptied(level: int):
        # Megatron-LM's train_step: torch.cuda.empty_cache() after the forward-backward passes at
        # --empty-unused-memory-level 1 and 2, after the optimizer step at 2
        if t.empty_cache_level >= level:
            out.append(("empty_cache",))

    if t.full_graph:
        for i in range(max(t.warmup_steps, 0)):
            iteration()
            emptied(1)
            step(i == 0)
            emptied(2)
        out.append(("empty_cache",))
        iteration(pool=1)     # the capture; its replays allocate nothing
        emptied(1)
        step(t.warmup_steps == 0)
        emptied(2)
        zero_grad()
        emptied(1)
        step(False)
        emptied(2)
    else:
        for i in range(2):
            iteration()
            emptied(1)
            step(i == 0)
            emptied(2)
    return out


class Replay(NamedTuple):
    """The simulator's counters after a trace: peak allocated and peak reserved bytes, segments cudaMalloc'd, and per
    phase (``fwd_bwd@1``, ``optimizer@1``, ...: the peaks since the phase began, as the project's measurement kit
    resets them, and what is allocated when it ends) ``(name, peak allocated, peak reserved, allocated after)``."""

    peak_allocated: int
    peak_reserved: int
    segments: int
    phases: tuple = ()


#: Lists that :func:`recording` opened: each takes every :class:`Replay` run while it is open.
_RECORDERS: list = []


@contextmanager
def recording():
    """Collect the :class:`Replay` of every trace replayed inside the block, in order (one per replayed stage), with
    its per-phase peaks, for diagnostics: ``with recording() as seen: stage_memory(r, replay=True)``. The estimate
    keeps only the peak; this shows which phase of which iteration holds it (``benchmarks/accuracy.py --phases``
    sets them beside the measured per-iteration peaks)."""
    seen: list = []
    _RECORDERS.append(seen)
    try:
        yield seen
    finally:
        _RECORDERS.remove(seen)


def replay(trace: list, config: AllocatorConfig | None = None) -> Replay:
    """Run a trace (:func:`events`) through :class:`~estimator.memory.allocator.CachingAllocator`."""
    a = CachingAllocator(config)
    handles: dict = {}
    phases: list = []
    seen: dict = {}
    peak_a = peak_r = 0
    name = None
    malloc, release, pop = a.malloc, a.free, handles.pop      # bound once: the loop runs thousands of times
    for ev in trace:
        op = ev[0]
        if op == "+":
            pool = ev[3]
            if pool is None:
                handles[ev[1]] = malloc(ev[2])
            elif isinstance(pool, str):          # a side stream's own pool
                handles[ev[1]] = malloc(ev[2], _STREAM_IDS[pool])
            else:
                handles[ev[1]] = malloc(ev[2], 0, pool)
            if a.allocated > peak_a:
                peak_a = a.allocated
            if a.reserved > peak_r:
                peak_r = a.reserved
        elif op == "-":
            release(pop(ev[1]))
        elif op == "mark":
            if name is not None:
                phases.append((name, peak_a, peak_r, a.allocated))
            seen[ev[1]] = seen.get(ev[1], 0) + 1
            name = f"{ev[1]}@{seen[ev[1]]}"
            peak_a, peak_r = a.allocated, a.reserved
        else:
            a.empty_cache()
    if name is not None:
        phases.append((name, peak_a, peak_r, a.allocated))
    out = Replay(a.peak_allocated, a.peak_reserved, a.segments, tuple(phases))
    for seen in _RECORDERS:
        seen.append(out)
    return out


# ---------------------------------------------------------------------------------------------- building a trace

#: Saved tensors of ``layer_activations(parts=True)`` that belong to the token mixer (the rest are the MLP's).
_MIXER_PARTS = ("norm_in", "norm_out", "latent", "qkv", "scores", "lse", "attn_out", "proj_in_fp8")
#: Saved tensors of ``layer_activations(parts=True)`` each routed expert makes for itself (the fc1 output and the
#: activation's output, the fc2 input).
_PER_EXPERT = ("expert_fc1_out", "expert_act_out")
#: Parameter tensors of a stage beyond which consecutive ones are merged (thousands of routed experts).
MAX_PARAM_TENSORS = 512
#: Tensors of one per-parameter list of the optimizer step beyond which consecutive parameters are merged.
MAX_STEP_TENSORS = 128


def scaled(sizes: list, total: int) -> tuple:
    """``sizes`` (named tensors) completed or scaled to ``total`` bytes: a remainder tensor where they fall short."""
    sizes = [s for s in sizes if s > 0]
    have = sum(sizes)
    if total <= 0:
        return ()
    if have > total:
        return tuple(s * total // have for s in sizes if s * total // have > 0)
    return tuple(sizes) + ((total - have,) if total - have else ())


def _before(parts: dict, saved: tuple, scores_input: int, pieces: int = 1) -> tuple:
    """The unfused attention's ``baddbmm`` output (``scores_input`` bytes), made just before the softmax output that
    the layer keeps and freed after the last of its ``pieces`` kept score tensors (dropout's output and mask):
    Megatron-LM @ d98e8a64 ``megatron/core/transformer/dot_product_attention.py`` holds it in the local
    ``matmul_result`` (and its view ``attention_scores``) until ``forward`` returns; the softmax keeps its output, not
    its input. As ``(index of the softmax output in saved, bytes, index of the last score tensor)``."""
    if not scores_input or not parts.get("scores"):
        return ()
    names = [k for k in _MIXER_PARTS if parts.get(k)]
    i = names.index("scores")
    return ((i, scores_input, min(i + max(pieces, 1) - 1, len(saved) - 1)),) if i < len(saved) else ()


def _sequence_parallel(names: list, n_att: int, mlp_names: list, gathered: int, full_out: int) -> tuple:
    """Transformer Engine's tensor-parallel communication tensors of one layer's forward under sequence
    parallelism, as :data:`LayerTensors.before` entries (``names``: the mixer's saved tensors in order, ``n_att``
    of them; ``mlp_names`` the MLP's, after them). Transformer Engine @ d0067d0d
    ``transformer_engine/pytorch/module/layernorm_linear.py`` ``forward``: a column-parallel linear keeps its
    rank's share of the norm output (``ln_out``), all-gathers it into ``ln_out_total`` (``gathered`` bytes: the
    sequence x micro-batch x hidden of the context-parallel rank; 1 B an element with FP8, 0.5 with NVFP4, scales
    left out), runs the GEMM into its output
    and frees ``ln_out_total`` (``clear_tensor_data``); a row-parallel linear (``linear.py``) runs its GEMM into an
    output of the whole sequence (``full_out`` bytes, the activation dtype), reduce-scatters it into the rank's
    share and drops it. So per attention layer and dense MLP four tensors of ``tp`` times a hidden-sized saved
    tensor: the QKV linear's gathered input, held while its output is made; the output projection's full output,
    made and freed before the MLP's first tensor; fc1's gathered input, held while fc1's output is made; fc2's full
    output at the layer's end. Megatron's local linears (``megatron/core/tensor_parallel/layers.py``
    ``LinearWithGradAccumulationAndAsyncCommunication``) gather into the run-long global buffer (``gathered`` 0)
    and reduce-scatter a whole-sequence output alike; a zero size gives no entry."""
    out = []
    if gathered and "qkv" in names:
        i = names.index("qkv")
        out.append((i, gathered, i))
    if full_out and "attn_out" in names:
        out.append((n_att, full_out, n_att - 1))
    if gathered and "fc1_out" in mlp_names:
        i = n_att + mlp_names.index("fc1_out")
        out.append((i, gathered, i))
    if full_out and "fc1_out" in mlp_names:
        out.append((n_att + len(mlp_names), full_out))
    return tuple(out)


def _alltoall_dispatch(i: int, n_saved: int, tokens: int, out: int, local: int) -> tuple[tuple, tuple]:
    """The all-to-all token dispatcher's tensors of one MoE layer's forward around its experts, as
    (:data:`LayerTensors.before` entries, :data:`LayerTensors.end_ops`): ``i`` the index of the experts' input in
    the saved tensors (``n_saved`` of them), ``tokens`` the bytes of the routed rows x hidden (balanced routing),
    ``out`` the layer's output (tokens x hidden), ``local`` the local experts. Megatron-LM @ d98e8a64
    ``megatron/core/transformer/moe/moe_layer.py`` ``custom_forward`` holds the permuted tokens (``hidden_states``,
    from ``dispatch_preprocess``'s ``permute``) and the all-to-all's output (``dispatched_input``) in locals until it
    returns; ``token_dispatcher.py`` ``dispatch_postprocess`` sorts the tokens by local expert into a new tensor
    (the experts' input, saved; with one local expert the all-to-all's output is that input). After the experts:
    their output; ``combine_preprocess`` un-sorts it into a new tensor (several local experts), the output dropped
    when ``routed_experts_compute`` returns; ``token_combine``'s all-to-all back, the un-sorted tensor dropped as
    ``output`` is rebound; ``combine_postprocess``'s ``unpermute`` into the layer's output, the all-to-all's
    dropped; then the permuted tokens and the dispatched ones. ``megatron/core/tensor_parallel/mappings.py``
    ``all_to_all`` returns its input unchanged on a group of one: the caller gives no expert parallelism here."""
    if local > 1:
        before = ((i, tokens, n_saved), (i, tokens, n_saved))
        ends = (("a", tokens), ("a", tokens), ("t", 0), ("a", tokens), ("t", 1), ("a", out), ("t", 2), ("t", 3))
    else:
        before = ((i, tokens, n_saved),)
        ends = (("a", tokens), ("a", tokens), ("t", 0), ("a", out), ("t", 1), ("t", 2))
    return before, ends


def _context_parallel_a2a(names: list) -> tuple:
    """The saved tensors that context parallelism's all-to-all (``cp_comm_type`` a2a, a2a+p2p) cuts from its own
    stream's pool, as :data:`LayerTensors.side`. Transformer Engine @ d0067d0d
    ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``
    ``flash_attn_a2a_communicate``: each all-to-all's output is reordered ``with torch.cuda.stream(cp_stream)``, so
    the tensors made there come from that stream's pool (the caching allocator serves a stream only from the blocks
    it cached for that stream, and a block freed goes back to the stream that allocated it: pytorch
    ``c10/cuda/CUDACachingAllocator.cpp``, pools keyed by stream). Before attention q, k and v
    (``reorder_seq_chunks_for_a2a_before_attn``: a ``contiguous`` copy, then ``index_select`` into the tensor the
    attention keeps, the copy freed): the ``qkv`` tensor after one copy of its size. After attention the output
    (``movedim(...).contiguous()``, the projection's saved input): ``attn_out``, no copy. Their gradients in the
    backward come from the same all-to-alls (``dq``, ``dk``, ``dv`` and the output's gradient), so from the same
    pool. On the default stream each exchange holds its inputs (a ``contiguous`` copy of each tensor) and its outputs
    (``torch.empty_like``) until the reordered tensors are made: two temporaries of the tensor's size, made before
    it and freed after (the caller's :data:`LayerTensors.before` entries)."""
    out = []
    if "qkv" in names:
        out.append((names.index("qkv"), 1))
    if "attn_out" in names:
        out.append((names.index("attn_out"), 0))
    return tuple(out)


def _score_backward(first: int, pieces: int, u: int, torch_path: bool) -> tuple:
    """The backward of unfused attention through its kept score tensors (each ``u`` bytes: ``saved[first]`` the
    softmax output, then with attention dropout its output and its mask), as :data:`LayerTensors.score_ops`.
    Megatron-LM @ d98e8a64 ``megatron/core/transformer/dot_product_attention.py`` and
    ``megatron/core/fusions/fused_softmax.py``, autograd's nodes in reverse: the second matmul's backward makes the
    gradient of the probabilities its input (``bmm``), then frees what it kept (dropout's output); dropout's
    backward makes a new gradient (``native_dropout_backward``: grad x mask x scale) and frees the mask; PyTorch's
    softmax backward makes one more and frees the softmax output, then, the causal mask having been applied in
    place to a view of the scores, autograd's ``CopySlices`` copies the gradient into a new base tensor, clones the
    slice and ``masked_fill`` writes one more (four score tensors at once); Megatron's fused kernel writes its
    gradient in place. What is left is the first matmul's (``baddbmm``) input gradient, freed once it has run."""
    ops = [("a", u)]
    g, n = 0, 1
    if pieces >= 2:
        ops += [("s", first + 1), ("a", u), ("t", g)] + ([("s", first + 2)] if pieces >= 3 else [])
        g, n = n, n + 1
    if torch_path:
        ops += [("a", u), ("t", g), ("s", first)]
        g, n = n, n + 1
        ops += [("a", u), ("a", u), ("a", u), ("t", n + 2), ("t", n + 1), ("t", g)]
        g = n
    else:
        ops.append(("s", first))
    return tuple(ops) + (("t", g),)


def _expert_parts(parts: dict, experts: int) -> list:
    """The MLP's saved tensors in order, each routed expert's own tensors (``_PER_EXPERT``) cut into ``experts``
    equal pieces, expert by expert: Megatron-LM @ d98e8a64 ``megatron/core/transformer/moe/experts.py``
    ``SequentialMLP.forward`` runs the local experts one after the other on ``torch.split`` views of the permuted
    tokens, each expert's MLP making its own fc1 output and activation output (saved for its backward), and
    concatenates the outputs. Balanced routing is assumed (equal pieces). Grouped GEMM makes one tensor each."""
    mlp = [(k, v) for k, v in parts.items() if k not in _MIXER_PARTS and v]
    per = [v for k, v in mlp if k in _PER_EXPERT]
    if experts <= 1 or not per:
        return [v for _, v in mlp]
    out, placed = [], False
    for k, v in mlp:
        if k not in _PER_EXPERT:
            out.append(v)
        elif not placed:
            for e in range(experts):
                out += [x // experts + (e < x % experts) for x in per]
            placed = True
    return out


def layer_tensors(acts, parts: dict | None, recompute: str | None, wgrads: tuple = (),
                  scores_input: int = 0, torch_softmax: bool = False, experts: int = 0,
                  sp_comm: tuple = (0, 0), cp_a2a: bool = False, dispatch: tuple = ()) -> LayerTensors:
    """The tensors of one decoder layer for one micro-batch: ``acts`` its LayerActivations (after selective recompute
    and the recipe features), ``parts`` its named saved tensors (``layer_activations(parts=True).parts``, None where
    its modules name none); ``recompute`` None, ``"full"`` (keeps its checkpoint) or ``"dropped"`` (a full-recompute
    layer that keeps nothing); ``wgrads`` its weight gradients when they are not accumulated in place;
    ``scores_input`` the unfused attention's score tensor before its softmax (0 with fused attention); ``experts``
    the local routed experts run one by one (SequentialMLP: their saved tensors per expert, :func:`_expert_parts`;
    0 with grouped GEMM); ``sp_comm`` (gathered input, full output) bytes of Transformer Engine's sequence-parallel
    communication tensors (:func:`_sequence_parallel`; zeros without); ``cp_a2a`` whether context parallelism's
    all-to-all cuts q, k, v and the attention output from its own stream's pool (:func:`_context_parallel_a2a`);
    ``dispatch`` (routed rows x hidden bytes, layer output bytes, local experts) of the all-to-all token
    dispatcher with expert parallelism (:func:`_alltoall_dispatch`; empty without)."""
    parts = parts or {}
    mixer = []
    first, pieces = 0, 0
    for k in _MIXER_PARTS:
        v = parts.get(k)
        if v and k == "scores" and scores_input and v >= scores_input:
            # the kept score tensors one by one: the softmax output, then attention dropout's output and its
            # 1-byte mask (``native_dropout`` makes the output, then the mask), each of the scores' shape
            first, cut = len(mixer), split(v, scores_input)
            pieces = len(cut)
            mixer += cut
        elif v:
            mixer.append(v)
    mlp = _expert_parts(parts, experts)
    att = scaled(mixer, acts.attention)
    mlp_t = scaled(mlp, acts.mlp)
    saved = att + mlp_t
    piece = max(saved, default=0)
    work = split(acts.backward_peak - 2 * piece, piece)   # beyond the two gradients the backward mirror holds
    attn_work = split(acts.attention_backward_peak, piece)
    if recompute is None:
        ops: tuple = ()
        if acts.attention_backward_peak:
            # attention_backward_peak is counted above everything kept, less the MLP's saved tensors (freed by
            # then) and with the residual stream's gradient; the trace frees those tensors itself and still holds
            # the gradient its backward mirror made last (of the MLP's first saved tensor): both added back
            total = acts.attention_backward_peak + (sum(mlp_t) - mlp_t[0] if mlp_t else 0)
            if pieces and tuple(att[first:first + pieces]) == tuple(mixer[first:first + pieces]):
                # the score tensors as the backward makes and frees them (_score_backward), the rest beside them
                kept = sum(att[first:first + pieces])
                ops = _score_backward(first, pieces, att[first], torch_softmax)
                total -= (4 * att[first] - kept) if torch_softmax else att[first]
            attn_work = split(max(total, 0), piece)
        before = _before(parts, saved, scores_input, pieces)
        side: tuple = ()
        # the named tensors keep their places in ``saved`` unless scaled down (then no communication tensors)
        names = [k for k in _MIXER_PARTS if parts.get(k)]
        if pieces:
            i = names.index("scores")
            names[i:i + 1] = ["scores"] * pieces
        placed = tuple(att[:len(mixer)]) == tuple(mixer)
        if cp_a2a and placed:
            side = _context_parallel_a2a(names)
            # the all-to-alls' inputs (contiguous copies, held to the end of the exchange) and outputs
            # (``torch.empty_like``) on the default stream, made before each side tensor and freed after it
            before += tuple((i, att[i], i) for i, _ in side for _ in range(2))
        if any(sp_comm) and placed and not experts and "expert_fc1_out" not in parts and not parts.get("latent") \
                and tuple(mlp_t[:len(mlp)]) == tuple(mlp):
            mlp_names = [k for k, v in parts.items() if k not in _MIXER_PARTS and v]
            before += _sequence_parallel(names, len(att), mlp_names, *sp_comm)
        ends: tuple = ()
        if dispatch and parts.get("expert_in") and not parts.get("dispatched") and placed \
                and tuple(mlp_t[:len(mlp)]) == tuple(mlp):
            mlp_names = [k for k, v in parts.items() if k not in _MIXER_PARTS and v]
            if "expert_in" in mlp_names and not experts:
                extra, ends = _alltoall_dispatch(len(att) + mlp_names.index("expert_in"), len(saved), *dispatch)
                before += extra
        return LayerTensors(saved, (), split(acts.recompute_peak, piece), work, attn_work, len(mlp_t), wgrads,
                            before, score_ops=ops, side=side, end_ops=ends)
    keep = (acts.checkpoint,) if recompute == "full" else ()
    return LayerTensors(keep, saved, saved, work, attn_work, 0, wgrads)


def _merge_sizes(sizes: list, limit: int) -> list:
    if len(sizes) <= limit:
        return sizes
    g = -(-len(sizes) // limit)
    return [sum(sizes[i:i + g]) for i in range(0, len(sizes), g)]


def parameter_tensors(dense_shapes_by_layer: list, other: list, weight_bytes: int,
                      first: tuple = (), interleave: bool = False) -> tuple[list, list]:
    """(dense, routed-expert) parameter tensors of a stage, in elements, in the order the model builds them:
    ``first`` (the embedding), per layer its linear weights (``kind_linear_shapes``: (out, in, count)), then
    ``other`` (elements: final norm, output layer, MTP layers).

    ``interleave``: the routed experts share the dense parameters' gradient buffer and optimizer (their
    ``allreduce`` attribute is True: no expert parallelism and the expert tensor-parallel size equal to the dense one;
    Megatron-LM @ d98e8a64 ``megatron/core/tensor_parallel/layers.py`` ``use_expert_pgs``,
    ``megatron/core/distributed/distributed_data_parallel.py`` groups the buffers by it): returned as one list in
    model order, each layer's experts after its other weights, expert by expert (``local_experts.0.linear_fc1``,
    ``local_experts.0.linear_fc2``, ``local_experts.1...``), and no expert list."""
    dense, experts = [x for x in first if x > 0], []
    for lin, exp, rest in dense_shapes_by_layer:
        for o, i, n in lin:
            dense += [o * i] * n
        if rest > 0:
            dense.append(rest)
        if interleave and exp:
            for e in range(max(n for _, _, n in exp)):
                dense += [o * i for o, i, n in exp if e < n]
        else:
            for o, i, n in exp:
                experts += [o * i] * n
    dense += [x for x in other if x > 0]
    return dense, experts


def build(*, dense: list, experts: list, weight_bytes: int, weights: int, gradients: int, optimizer: int,
          master_bytes: int, state_count: int, dense_shard: int, expert_shard: int, distributed: bool,
          persistent: tuple, chunks: tuple, loss: tuple, embedding_wgrad: int, counts: tuple, microbatches: int | None,
          step: tuple,
          extra: tuple = (), full_graph: bool = False, warmup_steps: int = 0, clone_bytes: int = 0,
          step_per_param: tuple = (), separate_experts: bool = False, root_grad: int = 0,
          empty_cache_level: int = 0, experts_in_dense: bool = False) -> StageTrace:
    """A :class:`StageTrace` from the stage's figures. ``dense`` / ``experts``: parameter tensors in elements;
    ``master_bytes`` the bytes per parameter of the fp32 main copy (0 without one), ``state_count`` the optimizer
    states per parameter (2 for Adam) made at the first step; the optimizer tensors are scaled so that they add up
    to ``optimizer`` (the estimate's figure) and the gradient buffers to ``gradients``. ``step_per_param``:
    ``(bytes, kept)`` of the step's per-parameter lists (:data:`StageTrace.step_lists`), each cut into one tensor
    per main parameter (its shard), in proportion to the shards; with ``separate_experts`` (dense and routed
    experts in two optimizers, stepped one after the other) the list is the larger optimizer's. ``experts_in_dense``:
    ``dense`` holds the routed experts too (:func:`parameter_tensors` ``interleave``), merged beyond
    :data:`MAX_PARAM_TENSORS` rather than half of it."""
    dense = _merge_sizes(dense, MAX_PARAM_TENSORS // 2 if experts or not experts_in_dense else MAX_PARAM_TENSORS)
    experts = _merge_sizes(experts, MAX_PARAM_TENSORS // 2)
    n_d, n_e = sum(dense), sum(experts)
    total = n_d + n_e
    # The weights as the estimate counts them (FP8 copies included, FSDP's shard): the tensors scaled to that sum.
    params = tuple(weights * x // total for x in dense + experts) if total else ()
    if total and gradients:
        g_e = gradients * n_e // total
        grad_buffers = tuple(x for x in (gradients - g_e, g_e) if x)
    else:
        grad_buffers = (gradients,) if gradients else ()
    shard_d, shard_e = (dense_shard, expert_shard) if distributed else (1, 1)
    if distributed:
        # The distributed optimizer takes its parameters in the gradient buffer's order, which DDP lays out in
        # reverse (param_and_grad_buffer.py: ``for param in params[::-1]``; distrib_optimizer.py
        # ``_build_optimizer_group_ranges`` walks each buffer's param_map), dense buffers before expert ones: the
        # main parameters, states and step lists follow it.
        shards = [-(-x // shard_d) for x in reversed(dense)] + [-(-x // shard_e) for x in reversed(experts)]
    else:
        shards = [x for x in dense] + [x for x in experts]
    per_param = master_bytes + 4 * state_count
    unit = sum(shards) * per_param
    masters: tuple = ()
    states: tuple = ()
    if unit and optimizer:
        scale = optimizer / unit
        if master_bytes:
            masters = tuple(int(x * master_bytes * scale) for x in shards)
        if state_count:
            states = tuple(int(x * 4 * scale) for x in shards for _ in range(state_count))
    elif optimizer:
        states = (optimizer,)
    n_sd = len(dense)
    group = shards
    if separate_experts and n_e:
        group = max(shards[:n_sd], shards[n_sd:], key=sum)
    unit_elems = sum(group)
    group = _merge_sizes(group, MAX_STEP_TENSORS)
    lists = tuple((_proportional(group, total), kept) for total, kept in step_per_param if total > 0 and kept)
    # With ``separate_experts`` the routed experts have an optimizer of their own (Megatron-Core
    # ``get_megatron_optimizer``: a ChainedOptimizer steps the dense one, then the experts'), stepped after the
    # dense one; the temporaries' bytes per element are those of the estimate's list
    parts = [g for g in ((shards[:n_sd], states[:n_sd * state_count]), (shards[n_sd:], states[n_sd * state_count:]))
             if g[0]] if separate_experts and n_e and len(states) == len(shards) * state_count else [(shards, states)]
    step_groups = tuple(
        (len(st), tuple(_proportional(_merge_sizes(g, MAX_STEP_TENSORS), total * sum(g) // max(unit_elems, 1))
                        for total, kept in step_per_param if total > 0 and not kept))
        for g, st in parts)
    if not states and len(step_groups) == 1 and not step_groups[0][1]:
        step_groups = ()
    return StageTrace(params, grad_buffers, weights if distributed else 0, masters, states, persistent, chunks, loss,
                      embedding_wgrad, counts, microbatches, step, extra, full_graph, warmup_steps,
                      clone_bytes if masters else 0, root_grad, lists, step_groups, empty_cache_level)


def _proportional(weights: list, total: int) -> tuple:
    """``total`` bytes as one tensor per entry of ``weights`` (elements), in proportion (the last takes the rest)."""
    have = sum(weights)
    if not have:
        return (total,)
    out = [total * w // have for w in weights]
    out[-1] += total - sum(out)
    return tuple(x for x in out if x > 0)


def schedule_passes(n_chunks: int, counts: tuple, m: int | None, detailed: int | None = None) -> tuple:
    """The passes replayed for one iteration, ``(kind, chunk, lumped)``: the in-flight forwards of each chunk
    (``counts``), at most :data:`STEADY_CYCLES` steady backward-forward cycles of the last chunk, then the
    backwards, chunks in reverse; a backward frees the oldest forward of its chunk. With ``detailed``, all but that
    many of a chunk's in-flight forwards are lumped: ``lumped`` micro-batches as one tensor (what they keep on the
    chunk), at most :data:`MAX_LUMPS` such passes per chunk; 0 for a pass replayed tensor by tensor."""
    held = sum(counts)
    fwd, bwd = [], []
    for c in range(n_chunks):
        lumps = 0 if detailed is None else max(counts[c] - detailed, 0)
        k = min(lumps, MAX_LUMPS)
        q, rest = divmod(lumps, k) if k else (0, 0)
        fwd += [("F", c, q + (i < rest)) for i in range(k)] + [("F", c, 0)] * (counts[c] - lumps)
        bwd = [("B", c, 0)] * (k + counts[c] - lumps) + bwd
    last = max((c for c in range(n_chunks) if counts[c]), default=0)
    left = STEADY_CYCLES if m is None else min(STEADY_CYCLES, max(m * n_chunks - held, 0))
    steady = [p for _ in range(left) for p in (("B", last, 0), ("F", last, 0))]
    return tuple(fwd + steady + bwd)
