"""The Muon optimizer step: what one GPU allocates while Megatron-Core's Muon (``training.optimizer: muon``) runs.

Sources: NVIDIA-NeMo/Emerging-Optimizers @ v0.3.0 (b309e2f0, the version Megatron-LM's pyproject.toml pins;
``orthogonalized_optimizers/orthogonalized_optimizer.py`` ``OrthogonalizedOptimizer.step``, ``muon_utils.py``
``newton_schulz``, ``newton_schulz_tp``, ``newton_schulz_step``) and Megatron-LM @ d98e8a64 (``megatron/core/optimizer/
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

**Adam's temporaries** are those of :mod:`estimator.memory.optimizer_step` over the Adam-managed parameters only:
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
4 m^2 each and X' 4 N at once, 16 N + 8 m^2. Megatron-LM's flag also accepts low (``arguments.py``: low, medium,
high), which is no PyTorch precision: ``utils.fp32_matmul_precision`` hands it to
``torch.set_float32_matmul_precision``, and ATen (``Context::setFloat32MatmulPrecision``) only warns and leaves
the precision as it was; Megatron-LM sets none, so PyTorch's default highest applies and the iterates are fp32 as
with high.

**The other options** (Megatron-LM @ d98e8a64 ``arguments.py``, ``OptimizerConfig``, ``TensorParallelMuon``). None
adds persistent state: the momentum buffer is Muon's one state (``OrthogonalizedOptimizer._init_group``); each
changes only the step's working set, n below being the matrix's elements on this GPU.

``--muon-tp-mode`` (``training.muon_tp_mode``). *duplicated* (the default) is the gather above. *blockwise*:
``TensorParallelMuon.orthogonalize`` sets ``partition_dim`` to None, so ``newton_schulz_tp`` runs ``newton_schulz``
on this GPU's shard alone, with no gather even at TP 1 (where duplicated still gathers over one rank). Transposed to
its smaller side m: the normalized fp32 copy 4 n, its bf16 cast 2 n, each iteration's X 2 n + A 2 m^2 + B 2 m^2 +
X' 2 n, the fp32 result 4 n, then ``scaled_orthogonalize_fn``'s two products 4 n each beside that result:

    max(6 n, 4 n + 4 m^2, 12 n) = 12 n      (m^2 <= n; fp32 iterates: max(12 n, 8 n + 8 m^2))

*distributed*: ``newton_schulz`` on the shard with the tensor-parallel group, transposed by ``partition_dim`` so that
the Gram matrix A is that of the side that is not partitioned (d: the columns of a column-parallel weight, the rows of
a row-parallel one, whether or not it is the smaller side), A all-reduced in place; ``distributed_normalize_p2``
squares the shard into a temporary (4 n, freed by the sum) before dividing (4 n):

    max(12 n, 4 n + 4 d^2)                  (fp32 iterates: max(12 n, 8 n + 8 d^2))

``--muon-nesterov`` (``training.muon_nesterov``): ``OrthogonalizedOptimizer.step`` orthogonalizes
``grad.lerp(momentum_buffer, momentum)``, a new fp32 tensor of the matrix's n elements, instead of the momentum
buffer; the loop's ``grad`` holds it until the next matrix rebinds it, so + 4 n through the whole orthogonalization.

``--muon-no-split-qkv`` (``training.muon_split_qkv`` false): the fused QKV weight is orthogonalized whole, as the
column-parallel matrix it is (no block copies, no concatenation).

**A vision tower of Hugging Face remote code** (``kimi_k25``: MoonViT and its projector, whole on every
tensor-parallel rank; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/kimi_vl/modeling_kimi_k25_vl.py)
gives Muon its 2-D weights (estimator/model/vision.py ``muon_matrices``) and Adam the rest. Its parameters carry
no ``partition_dim`` of their own, so the optimizer's copies get the default -1 (Megatron-LM @ d98e8a64 :
megatron/core/tensor_parallel/layers.py ``_MODEL_PARALLEL_ATTRIBUTE_DEFAULTS``), which
``TensorParallelMuon.orthogonalize`` turns into None, and no ``is_qkv`` tag (no split): ``newton_schulz_tp``
runs ``newton_schulz`` on the matrix alone (Emerging-Optimizers @ v0.3.0 : muon_utils.py, "partition_dim is None"),
whatever ``muon_tp_mode``: the blockwise bound, max(12 n, 4 n + 4 m^2) (fp32 iterates: max(12 n, 8 n + 8 m^2)), with
n the whole matrix and m its smaller side, + 4 n with Nesterov (:func:`tower_working_set`). The matrix stepped before
it is bounded by the tower's largest (``KimiK25VLModel`` registers vision_tower, then mm_projector, before the
language model; the order inside the remote-code layers is not read), and the language model's first matrix after
the projector's last keeps the language model's own bound.

``--muon-use-syrk`` is not a field: its kernel (``newton_schulz_step_tsyrk``, at medium only) gets A and B from
``triton_kernels.tsyrk_ex``, which allocates each (m, m) bf16 output as the matmul does, so the bytes are the same.
It needs emerging_optimizers 0.4.0 or later (Megatron-LM's ``_SYRK_MIN_EO_VERSION``: with the pinned 0.3.0
``TensorParallelMuon`` raises ValueError), whose ``muon_utils`` allocates nothing else differently at these settings
(``normalize_in_double`` off; its c = 0 branch serves only the cubic5 coefficients).
"""

from __future__ import annotations

from ...model.layers import LayerKind, kind_weight_shapes, view
from ..optimizer_step import FP32, fp32_copies_per_state, step_buffers

__all__ = ["assumption", "matrix_working_set", "muon_step_buffers", "muon_working_set", "orthogonalize_bytes",
           "qkv_working_set", "tower_working_set"]

#: ``--muon-tp-mode`` values (Megatron-LM @ d98e8a64 arguments.py).
TP_MODES = ("duplicated", "blockwise", "distributed")


def _newton_schulz(big: int, m: int, fp32: bool) -> int:
    """Bytes of one gathered N-element matrix's orthogonalization (module docstring): with bf16 iterates
    max(14 N, 12 N + 4 m^2); with fp32 ones (``--muon-fp32-matmul-prec`` high or highest: no bf16 copy, and X, A,
    B, X' four bytes an element) gathered 8 N + X 4 N + A 4 m^2 + B 4 m^2 + X' 4 N = 16 N + 8 m^2."""
    return 16 * big + 8 * m * m if fp32 else max(14 * big, 12 * big + 4 * m * m)


def _shard_newton_schulz(n: int, d: int, fp32: bool) -> int:
    """Bytes of the orthogonalization of an n-element shard that is not gathered (blockwise and distributed modes,
    module docstring), d the side of its Gram matrix: the scaled update's 12 n, or the iterations' X + A + B + X',
    4 n + 4 d^2 with bf16 iterates and 8 n + 8 d^2 with fp32 ones (the normalization's 4 n and the casts' 6 n are
    less)."""
    return max(12 * n, 8 * n + 8 * d * d if fp32 else 4 * n + 4 * d * d)


def orthogonalize_bytes(rows: int, cols: int, gather: int, row_parallel: bool, mode: str = "duplicated",
                        fp32: bool = False) -> int:
    """Bytes of ``TensorParallelMuon``'s orthogonalization of one matrix held on this GPU as ``rows`` x ``cols``,
    partitioned over ``gather`` ranks along its columns (``row_parallel``, partition_dim 1) or rows (partition_dim 0),
    with ``--muon-tp-mode`` ``mode`` (module docstring):

        duplicated   max(14 N, 12 N + 4 m^2)   N = gather x n, m the smaller side of the gathered matrix
        blockwise    max(12 n, 4 n + 4 m^2)    m the smaller side of the shard
        distributed  max(12 n, 4 n + 4 d^2)    d the side that is not partitioned

    (16 N + 8 m^2, and 8 n + 8 m^2 or 8 d^2 in place of the second terms, with fp32 iterates), n = rows x cols."""
    n = rows * cols
    if mode == "duplicated":
        m = min(rows, cols * gather) if row_parallel else min(rows * gather, cols)
        return _newton_schulz(gather * n, m, fp32)
    if mode == "blockwise":
        return _shard_newton_schulz(n, min(rows, cols), fp32)
    if mode == "distributed":
        return _shard_newton_schulz(n, rows if row_parallel else cols, fp32)
    raise ValueError(f"muon_tp_mode {mode!r}: expected one of {', '.join(TP_MODES)}")


def matrix_working_set(rows: int, cols: int, gather: int, row_parallel: bool, prev: int | None = None,
                       fp32: bool = False, mode: str = "duplicated", nesterov: bool = False) -> int:
    """Bytes Muon allocates while stepping one matrix held on this GPU as ``rows`` x ``cols`` (module docstring):
    its orthogonalization (:func:`orthogonalize_bytes`; by default all-gathered over ``gather`` tensor-parallel
    ranks: max(14 N, 12 N + 4 m^2), 16 N + 8 m^2 with ``fp32`` iterates), + 4 n for the Nesterov mix with
    ``nesterov``, + 4 n_prev for the update of the matrix stepped before, still referenced (``prev`` elements on
    this GPU; by default bounded by this one's n = rows x cols)."""
    n = rows * cols
    return (orthogonalize_bytes(rows, cols, gather, row_parallel, mode, fp32) + (FP32 * n if nesterov else 0)
            + FP32 * (n if prev is None else prev))


def _fp32_iterates(r) -> bool:
    """Whether the Newton-Schulz iterates stay fp32: only ``medium`` casts them to bf16 (``newton_schulz``); low
    leaves PyTorch's default highest (module docstring)."""
    return r.cfg.training.muon_fp32_matmul_prec != "medium"


def _options(r) -> dict:
    """The configuration's Muon options as :func:`matrix_working_set` takes them."""
    tr = r.cfg.training
    return dict(fp32=_fp32_iterates(r), mode=tr.muon_tp_mode, nesterov=tr.muon_nesterov)


def _qkv_blocks(r) -> list:
    """Rows of the fused QKV weight per query group: q (a/g x dh), the output gate (as q, with
    attention_output_gate), k (dh), v (dh, or v_channels)."""
    q = r.a // r.g * r.dh
    return [q, q, r.dh, r.dh] if r.gate else [q, r.dh, r.dv or r.dh]


def _qkv_elements(r) -> int:
    """Elements of the fused QKV weight on this GPU (g/t query groups)."""
    return r.g * sum(_qkv_blocks(r)) * r.h // r.t


def qkv_working_set(r, prev: int | None = None) -> int:
    """Bytes Muon allocates while stepping one fused QKV weight (module docstring), n elements on this GPU.

    Split (``muon_split_qkv``, the default): per query group the rows are [q (a/g x dh), gate (same, with
    attention_output_gate), k (dh), v (dh)]; on this GPU g/t groups, block i holding n_i = g/t x rows_i x h. The
    blocks are copied out of the strided view (4 n for them all; views when one group), then each block is
    orthogonalized as a column-parallel matrix (:func:`orthogonalize_bytes`: gathered to N_i = g x rows_i x h with
    the duplicated mode) beside the copies and the earlier blocks' updates:

        max_i(copies + 4 sum_{j<i} n_j + orthogonalize_i),  then 8 n for the concatenation.

    Whole (``muon_split_qkv: false``): the orthogonalization of the (g/t) (q + k + v) x h matrix. Then + 4 n for the
    Nesterov mix (``muon_nesterov``) and the update of the matrix stepped before (``prev`` elements; by default
    bounded by 4 n)."""
    t, g, h = r.t, r.g, r.h
    o = _options(r)
    blocks = _qkv_blocks(r)
    n = _qkv_elements(r)
    # Megatron-LM @ d98e8a64 : megatron/core/optimizer/__init__.py splits the local QKV weight per group only when
    # its rows are a whole number of groups; with fewer key/value heads than TP ranks (part of one group per
    # rank) it skips the split and steps the whole matrix.
    if r.cfg.training.muon_split_qkv and g >= t:
        copies = FP32 * n if g // t > 1 else 0
        peak = 2 * FP32 * n
        done = 0
        for rows in blocks:
            local = g // t * rows
            peak = max(peak, copies + FP32 * done + orthogonalize_bytes(local, h, t, False, o["mode"], o["fp32"]))
            done += local * h
    else:
        peak = orthogonalize_bytes(n // h, h, t, False, o["mode"], o["fp32"])
    return peak + (FP32 * n if o["nesterov"] else 0) + FP32 * (n if prev is None else prev)


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
    r = view(r, kind)            # the layer's own head shapes and MLP width
    out_rows = {r.h, r.lat or r.h}
    o = _options(r)
    seq = []

    def add(rows, cols, gather):
        seq.append((matrix_working_set(rows, cols, gather, rows in out_rows, prev=0, **o), rows * cols, True))

    if kind.mixer == "attention":
        add(r.h, r.a // r.t * (r.dv or r.dh), r.t)
        seq.append((qkv_working_set(r, prev=0), _qkv_elements(r), True))
    elif kind.mixer:
        for a, b in sorted(_mixer_shapes(r, kind.mixer)):
            seq.append((matrix_working_set(a, b, r.t, a in out_rows, **o), a * b, False))
    up = 2 if r.gated else 1
    if kind.mlp == "dense":
        add(r.f // r.t * up, r.h, r.t)
        add(r.h, r.f // r.t, r.t)
    elif kind.mlp == "moe":
        if r.lat:
            for a, b in ((r.lat, r.h), (r.h, r.lat)):
                seq.append((matrix_working_set(a, b, r.t, a in out_rows, **o), a * b, False))
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
    (``expert_tp``), with the duplicated ``muon_tp_mode``; row-parallel weights (partition_dim 1) are those that
    write the hidden state (h rows, the latent width for latent experts)."""
    seqs = [_stepped(r, r.kinds[k]) for k in set(kinds)]
    last = max((q[-1][1] for q in seqs if q), default=0)
    best = 0
    for q in seqs:
        prev = last
        for ws, n, ordered in q:
            best = max(best, ws + FP32 * prev if ordered else ws)
            prev = n
    return best


def tower_working_set(r, matrices) -> int:
    """Bytes of Muon's working set over a vision tower's 2-D weights ``matrices`` ((rows, cols, how many) on this
    GPU, whole: estimator/memory/vision.py ``VisionStage.matrices``; 0 without any), module docstring: each matrix
    orthogonalized alone (no gather, no QKV split) beside the update of the matrix stepped before, bounded by the
    tower's largest:

        max over the matrices of  max(12 n, 4 n + 4 m^2) (+ 4 n Nesterov) + 4 n_max"""
    if not matrices:
        return 0
    o = _options(r)
    biggest = max(a * b for a, b, _ in matrices)
    return max(matrix_working_set(a, b, 1, False, prev=biggest, fp32=o["fp32"], mode="blockwise",
                                  nesterov=o["nesterov"]) for a, b, _ in matrices)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def muon_step_buffers(r, bm, kinds, dense_p: int, linear_p: int, expert_p: int, shards: tuple,
                      vocab: int = 0, ping_pong: bool = False, tower: tuple = ()) -> dict:
    """The Muon step's own buffers on one GPU, by name (module docstring): fp32 gradient copies, then the larger
    of Adam's temporaries over the Adam-managed parameters and Muon's working set.

    ``dense_p``, ``linear_p``, ``expert_p``: the stage's parameters, its dense 2-D linear weights, its routed-expert
    parameters (Muon). ``shards``: (dense, expert) optimizer shard counts. With the ping-pong layout the rank
    that holds the stage's embedding or output layer (``vocab`` elements) whole steps it with Adam. ``tower``: the
    vision tower's trained 2-D weights on this stage (:func:`tower_working_set`), part of ``dense_p`` and stepped
    by Muon."""
    sd, _ = shards
    adam = _cdiv(dense_p - linear_p - sum(a * b * k for a, b, k in tower), sd)
    if ping_pong and vocab:
        adam += vocab - vocab // sd
    out = {}
    copies = step_buffers(r, bm, dense_p, expert_p, sd).grad_copies
    if copies:
        out["optimizer_fp32_grad_copies"] = copies
    adam_tmp = FP32 * fp32_copies_per_state(r) * adam
    muon = max(muon_working_set(r, kinds), tower_working_set(r, tower))
    if muon > adam_tmp:
        out["muon_newton_schulz"] = muon
    elif adam_tmp:
        out["optimizer_temporaries"] = adam_tmp
    return out


_ADAM_NAMES = {"te_fused": "Transformer Engine's FusedAdam", "apex_fused": "Apex's FusedAdam",
               "torch": "torch.optim.AdamW (foreach)"}


def _working_set_text(r) -> str:
    """The largest working set's formula, in words, for the configuration's Muon options."""
    tr = r.cfg.training
    fp32 = _fp32_iterates(r)
    iterates = (f"the fp32 Newton-Schulz iterates (muon_fp32_matmul_prec {tr.muon_fp32_matmul_prec})" if fp32
                else "the bf16 Newton-Schulz iterates")
    nesterov = " + 4 n for the Nesterov mix (muon_nesterov)" if tr.muon_nesterov else ""
    if tr.muon_tp_mode == "duplicated":
        return ("the momentum gathered over the tensor-parallel group, or the expert one, into two fp32 copies, "
                f"{iterates} and m x m products, the fp32 result and its scaled update: "
                + ("16 N + 8 m^2" if fp32 else "max(14 N, 12 N + 4 m^2)") + nesterov
                + " + 4 n' bytes for an N-element gathered matrix with smaller side m, n elements on this GPU and n' "
                "the elements of the matrix stepped before it")
    if tr.muon_tp_mode == "blockwise":
        what, side = "each GPU's shard orthogonalized alone (muon_tp_mode blockwise, no gather)", "m its smaller side"
    else:
        what, side = ("each GPU's shard with the Gram matrix of its unsharded side all-reduced (muon_tp_mode "
                      "distributed)", "m its side that is not partitioned")
    return (f"{what}: {iterates} and m x m products, the fp32 result and two scaled copies: "
            + ("max(12 n, 8 n + 8 m^2)" if fp32 else "max(12 n, 4 n + 4 m^2)") + nesterov
            + f" + 4 n' bytes for a shard of n elements, {side}, and n' the elements of the matrix stepped before it")


def assumption(r, bm) -> str:
    """One sentence for the estimate's assumptions: how the Muon step is counted."""
    tr = r.cfg.training
    per = FP32 * fp32_copies_per_state(r)
    adam = f"{per} B per parameter" if per else "nothing, updating in place"
    copies = step_buffers(r, bm, 1, 0, 1).grad_copies
    return ("Optimizer step (Muon): the matrices are orthogonalized one at a time ("
            + ("QKV in its query, key and value blocks" if tr.muon_split_qkv else "QKV whole (muon_split_qkv false)")
            + f"); the largest working set ({_working_set_text(r)}) or, stepped apart, "
            f"{_ADAM_NAMES[tr.optimizer_implementation]}'s temporaries over the embedding, output-layer, norm and bias "
            f"parameters ({adam}), whichever is larger"
            + (", on top of fp32 copies of the bf16 gradients (4 B per parameter)" if copies else "")
            + "; the stage's peak is the larger of the forward/backward and the step (peak_phase).")
