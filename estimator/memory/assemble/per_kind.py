"""Memoised building blocks per layer kind: the parameters one GPU holds, one micro-batch's activations, and how
many layers of each kind every chunk of every stage holds.

The caches (``_LAYOUT_CACHE``, ``_ACTS_CACHE``, ``_KIND_COUNTS``) live here only, keyed on objects that
:func:`estimator.model.resolve.resolve` takes from its own caches; :mod:`estimator.memory.assemble.stage`,
:mod:`estimator.memory.timeline` and :mod:`estimator.memory.breakdown` read the same ones.
"""

from __future__ import annotations

from ...model.layers import hyper_connection, kimi, kind_linear_weights, kind_params, kind_weight_shapes
from ...model.params import embedding, final_norm, mtp_built, mtp_extra, output_layer
from ...model.resolve import Resolved
from ..activations import LayerActivations, context, held_per_layer, layer_activations
from ..features import frozen_language


def chunk_activations(r: Resolved, layers: range, counts: tuple, acts) -> tuple[int, int, int, int]:
    """(saved bytes, attention part, mlp part, recompute working set) of one chunk for one micro-batch;
    ``counts`` holds the chunk's layers of each kind, ``acts`` (a list or a dict) the activations of each."""
    tr = r.cfg.training
    if not len(layers):
        return 0, 0, 0, 0
    if tr.recompute_granularity != "full":
        att = mlp = rec = 0
        for k, n in enumerate(counts):
            if n:
                a = acts[k]
                att += n * a.attention
                mlp += n * a.mlp
                if a.recompute_peak > rec:
                    rec = a.recompute_peak
        if r.attn_res:      # Kimi K3: the packed prefix and AttnRes bank a later stage receives
            att += kimi.boundary_bytes(r, layers.start, context(r))
        if r.hc:            # mHC recompute groups: their input streams, and the replay of a whole group
            kept, work = hyper_connection.recompute_groups(r, context(r), len(layers))
            att, rec = att + kept, max(rec, work)
        return att + mlp, att, mlp, rec
    kinds = [acts[r.layer_kinds[i]] for i in layers]
    held = sum(held_per_layer(tr, kinds))
    n = tr.recompute_num_layers if tr.recompute_num_layers is not None else 1
    if tr.recompute_method == "block":
        rec, keep = kinds[:n], kinds[n:]
        mlp = sum(k.mlp for k in keep)
        work = max((k.full - k.shared_input for k in rec), default=0)
        return held, held - mlp, mlp, work
    # uniform (the default method): groups of n layers keep only the group's input
    n = max(n, 1)
    groups = [kinds[i:i + n] for i in range(0, len(kinds), n)]
    work = max(sum(k.full for k in g) - g[0].shared_input for g in groups)
    return held, held, 0, work


_LAYOUT_CACHE: dict = {}


def parameter_layout(r: Resolved) -> tuple:
    """Parameters one GPU holds per layer kind (dense-parallel, linear-layer weights, routed experts), per MTP
    layer and for the vocabulary parts, and the linear weight shapes per kind.

    They depend only on the model's shape and on TP/EP/ETP, so they are memoised on exactly those values
    (the layout search evaluates thousands of layouts of one model)."""
    # Everything here follows from the model section (r.shape: one object per distinct section), TP/EP/ETP and,
    # for learned positions without max_position_embeddings, s.
    key = (id(r.shape), r.t, r.ep, r.etp, r.s)
    hit = _LAYOUT_CACHE.get(key)
    if hit is not None and hit[0] is r.shape:
        return hit[1]
    t = r.t
    per_kind = []
    for kind in r.kinds:
        dense, exp = kind_params(r, kind)
        per_kind.append((dense.per_rank(t), kind_linear_weights(r, kind),
                         exp.sharded // (r.ep * r.etp) + exp.replicated // r.ep))
    per_kind = tuple(per_kind)
    emb = embedding(r).per_rank(t)              # the input embedding (with learned positions)
    vocab_weight = output_layer(r).per_rank(t)  # one vocabulary-sized weight matrix on one GPU
    norm = final_norm(r).per_rank(t)
    mtp_dense = mtp_lin = mtp_exp = 0
    if r.mtp:
        x = mtp_extra(r)
        mtp_dense, mtp_lin = x.per_rank(t), x.sharded // t
        for k in r.mtp_kinds:
            dd, lin, e = per_kind[k]
            mtp_dense, mtp_lin, mtp_exp = mtp_dense + dd, mtp_lin + lin, mtp_exp + e
    shapes = tuple(frozenset(kind_weight_shapes(r, kind)) for kind in r.kinds)
    out = (per_kind, emb, vocab_weight, norm, mtp_dense, mtp_lin, mtp_exp, shapes)
    if len(_LAYOUT_CACHE) > 4096:
        _LAYOUT_CACHE.clear()
    _LAYOUT_CACHE[key] = (r.shape, out)
    return out


_ACTS_CACHE: dict = {}


def kind_activations(r: Resolved) -> list:
    """Activations of one layer of each kind for one micro-batch, memoised on the model section (``r.shape``) and
    everything else they read: the tokens per rank, the tensor and expert-tensor split, the dtypes and the
    recompute (with distribute_saved_activations), the fp32 residual stream, attention and deterministic-mode
    settings, the expert-parallel
    size (the MoE backward working set depends on it: the all-gather dispatcher's gathered tokens, the local experts' re-sort), expert-parallel overlap
    (its schedule nodes keep MoE tensors of their own: estimator/model/layers/moe.py), the MoE overload factor
    (the busiest rank's routed rows) and ERNIE-VL's image tokens (``r.vis``: their split between the expert pools).
    The layout search varies the pipeline and data-parallel sizes, which they do
    not read."""
    cfg = r.cfg
    tr, pr = cfg.training, cfg.precision
    key = (id(r.shape), r.t, r.cp, r.s, r.b, r.sp, r.etp, r.ep, pr.fp8, pr.fp8_recipe, pr.fp4, pr.params_dtype,
           pr.quant_recipe, tr.recompute_granularity,
           tr.recompute_modules, tr.attention_backend, tr.transformer_impl, cfg.parallelism.cp_comm_type,
           tr.deterministic_mode, tr.overlap_moe_expert_parallel_comm, tr.moe_overload_factor,
           tr.distribute_saved_activations, tr.overlap_dispatch_backward_with_experts_wgrad,
           tr.gradient_accumulation_fusion, tr.freeze_language_model, r.vis, tr.mlp_chunks_for_training,
           pr.fp32_residual_connection)
    hit = _ACTS_CACHE.get(key)
    if hit is not None and hit[0] is r.shape:
        return hit[1]
    ctx = context(r)
    if tr.freeze_language_model:         # frozen linears save no inputs (features/frozen_language.py)
        acts = [frozen_language.frozen_layer(r, layer_activations(r, kind, ctx, parts=True), kind)
                for kind in r.kinds]
    else:
        acts = [layer_activations(r, kind, ctx) for kind in r.kinds]
    if len(_ACTS_CACHE) > 4096:
        _ACTS_CACHE.clear()
    _ACTS_CACHE[key] = (r.shape, acts)
    return acts


_KIND_COUNTS: dict = {}


def layer_kind_counts(r: Resolved) -> tuple:
    """Layers of each kind in every chunk of every stage (memoised on the placement and the kind sequence, both
    of which resolve() takes from caches, checked by identity)."""
    key = (id(r.plan), id(r.layer_kinds))
    hit = _KIND_COUNTS.get(key)
    if hit is not None and hit[0] is r.plan and hit[1] is r.layer_kinds:
        return hit[2]
    seq, n = r.layer_kinds, len(r.kinds)
    out = []
    for plan in r.plan:
        stage = []
        for c in plan.layers:
            cnt = [0] * n
            for k in seq[c.start:c.stop]:
                cnt[k] += 1
            stage.append(tuple(cnt))
        out.append(tuple(stage))
    counts = tuple(out)
    if len(_KIND_COUNTS) > 4096:
        _KIND_COUNTS.clear()
    _KIND_COUNTS[key] = (r.plan, r.layer_kinds, counts)
    return counts


def chunk_parameters(r: Resolved, c, layout: tuple) -> tuple[int, int, int]:
    """(dense, linear, routed-expert) parameters one GPU holds for the non-decoder parts of chunk ``c``.

    GPTModel (``megatron/core/models/gpt/gpt_model.py``) builds per chunk: the embedding where pre_process;
    the final norm and the output layer where post_process (its weight is the embedding itself only when
    both sit in one chunk and are tied); for MTP layers their own parts and a copy of the embedding unless
    the chunk already has it (LanguageModule.setup_embeddings_and_output_layer keeps the copies in sync)."""
    (_, emb, vocab_weight, norm, mtp_dense, mtp_lin, mtp_exp, _) = layout
    dense = lin = exp = 0
    if c.embedding:
        dense += emb
    if c.loss:
        dense += norm + (0 if (r.tied and c.embedding) else vocab_weight)
    k = mtp_built(r, len(c.mtp))     # layers built: one for every depth with mtp_use_repeated_layer
    if k:
        dense += k * mtp_dense + (0 if c.embedding else emb)
        lin += k * mtp_lin
        exp += k * mtp_exp
    return dense, lin, exp


def mtp_parameters(r: Resolved, chunks, layout: tuple) -> tuple[int, int]:
    """(dense, routed-expert) parameters one GPU holds in the MTP layers built in ``chunks`` (their norms, eh_proj
    and transformer layers; not the embedding copy), the ones ``training.freeze_mtp`` freezes."""
    mtp_dense, mtp_exp = layout[4], layout[6]
    k = sum(mtp_built(r, len(c.mtp)) for c in chunks)
    return k * mtp_dense, k * mtp_exp


def trained_parameters(r: Resolved, chunks, layout: tuple, dense_p: int, expert_p: int) -> tuple[int, int]:
    """The stage's parameters the optimizer steps with its MTP layers frozen."""
    fd, fe = mtp_parameters(r, chunks, layout)
    return dense_p - fd, expert_p - fe


def positive(*sizes: int) -> tuple:
    return tuple(x for x in sizes if x > 0)


def sum_activations(parts: list) -> LayerActivations:
    """The activations of several layers run one after the other (the layers of one MTP depth)."""
    return LayerActivations(*(sum(x) for x in zip(*(p[:6] for p in parts))), None,
                            sum(p.attention_backward_peak for p in parts))
