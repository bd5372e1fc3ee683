"""The Muon optimizer step: what one GPU allocates while Megatron-Core's Muon (``training.optimizer: muon``) runs.

Sources: emerging_optimizers 0.3.0 (the version Megatron-LM pins; ``orthogonalized_optimizers/
orthogonalized_optimizer.py`` ``OrthogonalizedOptimizer.step``, ``muon_utils.py`` ``newton_schulz``,
``newton_schulz_tp``, ``newton_schulz_step``) and Megatron-LM @ d98e8a64 (``megatron/core/optimizer/
emerging_optimizers.py`` ``TensorParallelMuon``, ``__init__.py`` ``_get_megatron_emerging_optimizer``,
``layer_wise_optimizer.py``, ``optimizer.py`` ``Float16OptimizerWithFloat16Params``, ``ChainedOptimizer``).

How the step is built. Megatron-Core chains two optimizers and steps them one after the other
(``ChainedOptimizer._step``): ``TensorParallelMuon`` for the 2-D linear weights and Adam for the rest
(embedding, output layer, norms, biases). With the distributed optimizer the Muon part sits in a
``LayerWiseDistributedOptimizer`` (whole matrices per data-parallel rank) and the Adam part in a byte-sharded
``DistributedOptimizer`` (``use_layer_wise_param_layout``, the default) or, with the legacy ping-pong layout,
inside the layer-wise optimizer as whole tensors; without it each is a ``Float16OptimizerWithFloat16Params``.
Before any of them steps, ``prepare_grads`` gives every fp32 main parameter its gradient
(``main_param.grad = main_grad.float()``: a view of an fp32 gradient buffer, a new fp32 tensor of a bf16 one),
alive until the next ``zero_grad``. So the step holds

    grad copies (4 B per main parameter of this GPU, bf16 gradient buffer only)
    + max(Adam's temporaries, Muon's working set)

**Adam's temporaries** are those of :mod:`estimator.optimizer_step` over the Adam-managed parameters only:
``torch.optim.AdamW`` (foreach) 4 B per parameter of the group; Transformer Engine's and Apex's FusedAdam none.
As for Adam, the norm weights and biases (no weight decay, a parameter group of their own, stepped apart) are
counted with the embedding and output layer (4 B per such parameter too many), and so is the MoE router weight,
which Megatron-Core steps with Muon (it is 2-D) but the states (:mod:`.optimizers`) give to Adam.

**Muon's working set**, one matrix at a time (``OrthogonalizedOptimizer.step`` loops over the parameters):
weight decay and the momentum update run in place, and without Nesterov momentum (``--muon-nesterov`` off, the
default) the momentum buffer itself is orthogonalized. ``TensorParallelMuon.orthogonalize`` hands it to
``newton_schulz_tp`` with the parameter's ``partition_dim``, which Megatron's local and Transformer Engine's
linear layers set on every weight (0 column-, 1 row-parallel, at any TP size) and which the fp32 main parameter
inherits (``copy_tensor_model_parallel_attributes``). With the default ``--muon-tp-mode duplicated`` that path
all-gathers the momentum over the tensor-parallel group into a list of ``empty_like`` shards and concatenates
them (``torch.cat``, a new tensor even for one shard): two fp32 copies of the whole matrix, N elements, alive
until ``newton_schulz_tp`` returns. ``newton_schulz`` then (``--muon-fp32-matmul-prec medium``, the default:
bf16 I/O; no SYRK kernel) normalizes the matrix (a new fp32 tensor, transposed view when rows > cols), casts it
to bf16 and frees the fp32 one, runs each iteration as ``A = X X^T`` (m x m, m the smaller side),
``B = b A + c A A`` and ``X' = a X + B X`` (all bf16, the old X freed when X' is bound), and casts the result
back to fp32. ``scaled_orthogonalize_fn`` multiplies the result by two scale factors (two new tensors of this
rank's n = N / t elements, the first freed after the second), and the update ``p.add_`` runs in place; the
update stays referenced until the next matrix's replaces it. In bytes, for one matrix:

    gathered 8N + max(fp32 4N + bf16 2N,  X 2N + A 2m^2 + B 2m^2 + X' 2N,  bf16 2N + fp32 4N)
      = max(14 N, 12 N + 4 m^2)                 (after the gather is freed: 4N + 4n + 4n, less)

plus the update of the matrix stepped before it (4 B per element of that one), which the loop still references:
in the model's parameter order, the output projection, the QKV weight, fc1, fc2 of an attention layer, and an MoE
block's experts one after the other (:func:`_stepped`; other mixers' matrices keep the bound of their own size).
Measured on one H100 (this project's batch 8: 2 layers, h 4096, SwiGLU 16384, vocabulary 4096, so that Muon's part
is the step): 14 N of fc1 + 4 n of the QKV weight, to the byte. The peak is that
of the matrix with the largest working set; with the layer-wise distributed optimizer it is the working set of
the rank that owns that matrix (an upper bound for the others). Row-parallel weights (``partition_dim`` 1,
gathered along their columns) are told from column-parallel ones by their rows: they write the hidden state.

Megatron-Core tags the fused QKV weight (``is_qkv``, ``qkv_split_shapes``) and the routed experts'
weights (``expert_tp``) before it builds the optimizers, and ``copy_tensor_model_parallel_attributes`` carries
those tags onto the fp32 main parameters (``_MODEL_PARALLEL_ATTRIBUTE_DEFAULTS``). So routed experts gather
over the expert tensor-parallel group, and with ``--muon-split-qkv`` (the default) the QKV weight is viewed as
(groups, q + k + v rows, h) and cut into its query, (gate,) key and value blocks: ``reshape`` copies them out of
the strided view (4 B per QKV element, all blocks at once; views when this GPU holds one group), each block is
orthogonalized as above beside the updates of the blocks before it, and ``torch.cat`` joins the updates
(8 B per element at that moment) (:func:`qkv_working_set`). Mamba's ``in_proj`` (``use_muon = False``) goes
to Adam and is left out; MLA's projections are orthogonalized whole (no QKV split there).

``--muon-fp32-matmul-prec`` (``training.muon_fp32_matmul_prec``) high or highest keeps the iterates in fp32
(only medium casts them to bf16), which Megatron-Bridge's DeepSeek-V4 recipes set: gathered 8 N, then X 4 N, A and B
4 m^2 each and X' 4 N at once, 16 N + 8 m^2. Modelled at Megatron-LM's defaults of ``--muon-nesterov`` (off; on, it
adds 4 B per element of the matrix), ``--muon-split-qkv`` (on), ``--muon-tp-mode`` (duplicated) and
``--muon-use-syrk`` (off), which the configuration does not carry (other values are refused on import:
estimator/megatron_flag_classes.py).
"""

from __future__ import annotations

from ..layers import LayerKind, kind_weight_shapes
from ..optimizer_step import FP32, fp32_copies_per_state, step_buffers

__all__ = ["assumption", "matrix_working_set", "muon_step_buffers", "muon_working_set", "qkv_working_set"]


def _newton_schulz(big: int, m: int, fp32: bool) -> int:
    """Bytes of one gathered N-element matrix's orthogonalization (module docstring): with bf16 iterates
    max(14 N, 12 N + 4 m^2); with fp32 ones (``--muon-fp32-matmul-prec`` high or highest: no bf16 copy, and X, A,
    B, X' four bytes an element) gathered 8 N + X 4 N + A 4 m^2 + B 4 m^2 + X' 4 N = 16 N + 8 m^2."""
    return 16 * big + 8 * m * m if fp32 else max(14 * big, 12 * big + 4 * m * m)


def matrix_working_set(rows: int, cols: int, gather: int, row_parallel: bool, prev: int | None = None,
                       fp32: bool = False) -> int:
    """Bytes Muon allocates while orthogonalizing one matrix held on this GPU as ``rows`` x ``cols`` and
    all-gathered over ``gather`` tensor-parallel ranks along its columns (``row_parallel``, partition_dim 1) or
    its rows (partition_dim 0) (module docstring):

        max(14 N, 12 N + 4 m^2) + 4 n_prev            (16 N + 8 m^2 + 4 n_prev with ``fp32`` iterates)

    with n = rows x cols, N = gather x n, m the smaller side of the gathered matrix, and 4 n_prev the update of
    the matrix stepped before, still referenced (``prev`` elements on this GPU; by default bounded by this one's
    n)."""
    n = rows * cols
    big = gather * n
    m = min(rows, cols * gather) if row_parallel else min(rows * gather, cols)
    return _newton_schulz(big, m, fp32) + FP32 * (n if prev is None else prev)


def _fp32_iterates(r) -> bool:
    """Whether the Newton-Schulz iterates stay fp32: only ``medium`` casts them to bf16 (``newton_schulz``)."""
    return r.cfg.training.muon_fp32_matmul_prec != "medium"


def _qkv_blocks(r) -> list:
    """Rows of the fused QKV weight per query group: q (a/g x dh), the output gate (as q, with
    attention_output_gate), k (dh), v (dh)."""
    q = r.a // r.g * r.dh
    return [q, q, r.dh, r.dh] if r.gate else [q, r.dh, r.dh]


def _qkv_elements(r) -> int:
    """Elements of the fused QKV weight on this GPU (g/t query groups)."""
    return r.g * sum(_qkv_blocks(r)) * r.h // r.t


def qkv_working_set(r, prev: int | None = None) -> int:
    """Bytes Muon allocates while orthogonalizing one fused QKV weight split into its blocks (module docstring).

    Per query group the rows are [q (a/g x dh), gate (same, with attention_output_gate), k (dh), v (dh)]; on this
    GPU g/t groups. The blocks are copied out of the strided view (4 n for them all; views when one group), then
    each block i, gathered to N_i = g x rows_i x h, is orthogonalized beside the copies and the earlier blocks'
    updates:

        max_i(copies + 4 sum_{j<i} n_j + max(14 N_i, 12 N_i + 4 m_i^2)),  then 8 n for the concatenation,

    plus the update of the matrix stepped before (``prev`` elements; by default bounded by 4 n)."""
    t, g, h = r.t, r.g, r.h
    blocks = _qkv_blocks(r)
    n = _qkv_elements(r)
    copies = FP32 * n if g // t > 1 else 0
    peak = 2 * FP32 * n
    done = 0
    for rows in blocks:
        big = g * rows * h
        m = min(g * rows, h)
        peak = max(peak, copies + FP32 * done + _newton_schulz(big, m, _fp32_iterates(r)))
        done += big // t
    return peak + FP32 * (n if prev is None else prev)


def _mixer_shapes(r, mixer: str) -> set:
    """Local shapes of the 2-D weights of a token mixer other than attention that Muon steps (Mamba's ``in_proj``
    goes to Adam)."""
    if mixer == "mamba":                  # out_proj (h, d_inner / t); in_proj (in_w / t, h) is Adam's
        return {s for s in kind_weight_shapes(r, LayerKind("mamba", "")) if s[0] == r.h}
    return kind_weight_shapes(r, LayerKind(mixer, ""))


def _stepped(r, kind: LayerKind) -> list:
    """The matrices Muon steps in one layer of ``kind``, in Megatron-Core's parameter order where it is known, as
    (working set without the previous update, elements on this GPU, previous update known?) triples.

    The loop of ``OrthogonalizedOptimizer.step`` follows the parameter group, which is in the model's parameter
    order: per attention layer the output projection (built by ``Attention.__init__``) before the fused QKV
    (``SelfAttention``), then the MLP's fc1 and fc2; an MoE block's routed experts one after the other (fc1, fc2)
    before its shared expert (fc1, fc2). Measured (this project's batch 8, one H100): the step of a 2-layer
    h 4096 / SwiGLU 16384 model added 14 N of fc1 + 4 n of the QKV weight stepped before it, exactly. The other
    mixers' matrices, in an order not followed here, keep the bound of their own size."""
    out_rows = {r.h, r.lat or r.h}
    fp32 = _fp32_iterates(r)
    seq = []

    def add(rows, cols, gather):
        seq.append((matrix_working_set(rows, cols, gather, rows in out_rows, prev=0, fp32=fp32), rows * cols, True))

    if kind.mixer == "attention":
        add(r.h, r.a // r.t * r.dh, r.t)
        seq.append((qkv_working_set(r, prev=0), _qkv_elements(r), True))
    elif kind.mixer:
        for a, b in sorted(_mixer_shapes(r, kind.mixer)):
            seq.append((matrix_working_set(a, b, r.t, a in out_rows, fp32=fp32), a * b, False))
    up = 2 if r.gated else 1
    if kind.mlp == "dense":
        add(r.f // r.t * up, r.h, r.t)
        add(r.h, r.f // r.t, r.t)
    elif kind.mlp == "moe":
        if r.lat:
            for a, b in ((r.lat, r.h), (r.h, r.lat)):
                seq.append((matrix_working_set(a, b, r.t, a in out_rows, fp32=fp32), a * b, False))
        fm, d = r.fm // r.etp, r.lat or r.h
        for _ in range(2 if r.E // r.ep > 1 else 1):          # one expert's fc1 after another's fc2
            add(fm * up, d, r.etp)
            add(d, fm, r.etp)
        if r.fs:
            add(r.fs // r.t * up, r.h, r.t)
            add(r.h, r.fs // r.t, r.t)
    return seq


def muon_working_set(r, kinds) -> int:
    """Bytes of Muon's working set on a GPU holding layers of the kind indices ``kinds``: the largest over the
    matrices it steps of their own working set plus the update of the matrix stepped before
    (:func:`_stepped`); the first matrix of a layer follows the last of the layer before, of whichever kind.
    Dense matrices gather over the tensor-parallel group, routed experts over the expert tensor-parallel group
    (``expert_tp``); row-parallel weights (partition_dim 1) are those that write the hidden state (h rows, the
    latent width for latent experts)."""
    seqs = [_stepped(r, r.kinds[k]) for k in set(kinds)]
    last = max((q[-1][1] for q in seqs if q), default=0)
    best = 0
    for q in seqs:
        prev = last
        for ws, n, ordered in q:
            best = max(best, ws + FP32 * prev if ordered else ws)
            prev = n
    return best


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def muon_step_buffers(r, bm, kinds, dense_p: int, linear_p: int, expert_p: int, shards: tuple,
                      vocab: int = 0, ping_pong: bool = False) -> dict:
    """The Muon step's own buffers on one GPU, by name (module docstring): fp32 gradient copies, then the larger
    of Adam's temporaries over the Adam-managed parameters and Muon's working set.

    ``dense_p``, ``linear_p``, ``expert_p``: the stage's parameters, its dense 2-D linear weights, its routed-expert
    parameters (Muon). ``shards``: (dense, expert) optimizer shard counts. With the ping-pong layout the rank
    that holds the stage's embedding or output layer (``vocab`` elements) whole steps it with Adam."""
    sd, _ = shards
    adam = _cdiv(dense_p - linear_p, sd)
    if ping_pong and vocab:
        adam += vocab - vocab // sd
    out = {}
    copies = step_buffers(r, bm, dense_p, expert_p, sd).grad_copies
    if copies:
        out["optimizer_fp32_grad_copies"] = copies
    adam_tmp = FP32 * fp32_copies_per_state(r) * adam
    muon = muon_working_set(r, kinds)
    if muon > adam_tmp:
        out["muon_newton_schulz"] = muon
    elif adam_tmp:
        out["optimizer_temporaries"] = adam_tmp
    return out


_ADAM_NAMES = {"te_fused": "Transformer Engine's FusedAdam", "apex_fused": "Apex's FusedAdam",
               "torch": "torch.optim.AdamW (foreach)"}


def assumption(r, bm) -> str:
    """One sentence for the estimate's assumptions: how the Muon step is counted."""
    impl = r.cfg.training.optimizer_implementation
    per = FP32 * fp32_copies_per_state(r)
    adam = f"{per} B per parameter" if per else "nothing, updating in place"
    copies = step_buffers(r, bm, 1, 0, 1).grad_copies
    return ("Optimizer step (Muon): the matrices are orthogonalized one at a time (QKV in its query, key and value "
            "blocks); the largest working set (the momentum gathered over the tensor-parallel group, or the expert "
            + ("one, into two fp32 copies, the fp32 Newton-Schulz iterates and m x m products (muon_fp32_matmul_prec "
               f"{r.cfg.training.muon_fp32_matmul_prec}): 16 N + 8 m^2 "
               if _fp32_iterates(r) else
               "one, into two fp32 copies, the bf16 Newton-Schulz iterates and m x m products, the fp32 result and its "
               "scaled update: max(14 N, 12 N + 4 m^2) ")
            + "+ 4 n' bytes for an N-element gathered matrix with smaller side m and n' the elements of the matrix "
            "stepped before it on this GPU) or, stepped apart, "
            f"{_ADAM_NAMES[impl]}'s temporaries over the embedding, output-layer, norm and bias parameters "
            f"({adam}), whichever is larger"
            + (", on top of fp32 copies of the bf16 gradients (4 B per parameter)" if copies else "")
            + ". At Megatron-LM's defaults for --muon-nesterov (off), --muon-split-qkv (on), --muon-tp-mode "
            "(duplicated) and --muon-use-syrk (off); the stage's peak is the larger of the forward/backward and the "
            "step (peak_phase).")
