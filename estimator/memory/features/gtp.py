"""Generalised tensor parallelism's weight sharding (GTP_remat): model states and gathered-weight buffers on one GPU.

Megatron-LM @ d98e8a64 : megatron/core/tensor_parallel/generalized_tensor_parallelism.py (``GTPShardedParam``,
``GTPWeightCache``, ``_wgrad_buf_pool``), extensions/transformer_engine.py (``_gtp_pre_init``), tensor_parallel/
layers.py (``wrap_module_params_gtp``), model_parallel_config.py, training/arguments.py, and
docs/api-guide/core/generalized_tensor_parallel.md. G is the dense GTP_remat size
(``tensor_parallel_num_weight_shards`` / TP), Ge the routed experts' (``expert_tensor_parallel_num_weight_shards`` /
ETP); they are further axes of the rank grid (world = TP x GTP_remat x CP x DP x PP), and each GTP_remat rank trains
on its own micro-batches, so the estimator's data-parallel size (world / (TP x PP x CP)) counts them and the
micro-batch count is unchanged.

Which weights. Every Transformer Engine column- and row-parallel linear (QKV, output projection, MLP and shared-expert
fc1/fc2, Mamba's in_proj/out_proj) resolves the GTP_remat group; the routed experts' grouped linears the expert one;
the vocabulary-parallel embedding and the output layer (Megatron's own linears) are wrapped too
(``wrap_module_params_gtp``). The MoE latent projections (duplicated ``TELinear``) only with
``gtp_remat_opt_in_modules: [moe_latent_proj]``. Norms, biases, the router and other small tensors stay whole.

How. GTP_remat always cuts dim 0 (out_features) of the TP-local weight, whatever TP cut: an N x K TP-local weight is
padded to N' = up(N, 16 G) rows (``gtp_remat_shard_dim0``, ``pad_for_alignment`` 16 for bf16) and each rank keeps
N'/G x K. The shard is an ordinary DDP parameter: its gradient slice in the gradient buffer is N'/G x K as well,
and the distributed optimizer shards the buffer over the replicate group only (the data x context-parallel ranks
without GTP_remat: DP x CP / G; experts: expert-DP / Ge). So per GPU, for a sharded weight,

    weights, gradients:  N'/G x K elements instead of N x K
    optimizer states:    the buffer / (DP x CP / G)   (the same total over the world as without GTP)

and for a whole (replicated) one the optimizer shard grows G times. Before each use a weight is all-gathered into a
buffer of the ticket cache ``GTPWeightCache``, whose buffers stay allocated for the run (``release`` keeps
``slot.buf``): same-shape weights share one buffer per scheduling domain (chain and process group), bf16 forward and
backward gathers share it (the key has no direction for a torch dtype), and a weight whose chain neighbour has its
shape takes a second one (``_ensure_no_shared_buffer_with``). The routed experts run on their own one-block-ahead
chains, one per role (fc1, fc2), keyed per local expert with a parity bit that alternates the MoE layers: two
buffers per local expert and role where a GPU holds two MoE layers or more (``moe_grouped_gemm``; the sequential
experts' linears all have ``expert_idx`` 0, so their chain alternates two buffers per role in all). In the backward
pass each weight's gradient is computed whole (Transformer Engine @ d0067d0 : module/linear.py, with Megatron's
gradient accumulation fusion: ``main_grad_func = weight.grad_buffer``) into a buffer of ``_wgrad_buf_pool`` (logical
N x K, gradient-buffer dtype; ``get_wgrad_tensor``), reduce-scattered asynchronously into a shard-sized output
ticket (the cache again), and returned to the pool only when the next weight's reduce-scatter has started
(``wgrad_reduce_scatter``: the deferred wait): the pool keeps one buffer per shape, two where neighbours share a
shape, two sets per routed-expert role. With ``gtp_remat_reduce_scatter_with_fp32_accumulation`` on a group of more
than 2 ranks each in-flight reduce-scatter takes a second pool buffer of the padded shape (the all-to-all output).
With ``gtp_remat_nccl_ub`` (``gtp_expert_remat_nccl_ub``) the gradient buffers come instead from the group's
NCCL-registered pool (gtp_symmetric_memory.py ``symmetric_wgrad_pool``), padded to N' rows, in a memory pool of
their own. Where N' > N the plain path pads a copy of the gradient (``F.pad``) for the reduce-scatter; two of the
largest are counted.

The output layer's gradient comes from the pool only when it is fp32 (gradient buffer fp32, layers.py's
``_wgrad_gemm(sharded_weight.get_wgrad_tensor(), ...)``), and then replaces the bf16 one the estimate counts in the
output layer's backward (:func:`output_wgrad_pooled`); otherwise it is a fresh tensor like that one. The embedding's
gradient (``GTPEmbeddingWeight``) is reduce-scattered synchronously and freed.

The dummy weight gradients handed back to autograd (``_handle_megatron_grad_accum``: ``get_dummy_wgrad`` of
``main_grad``'s shape; Transformer Engine's module/linear.py: "the param's local shape (sharded under GTP)"), cached
per shape in the weights' dtype, take the shards' shapes instead of the weights': they replace the estimate's
``te_dummy_wgrad`` (one per distinct shape on the stage, the vocabulary shard included).

All these buffers are allocated in the first iteration and held from then on: they are counted beside the model
states on every stage, in the optimizer step too (``PERSISTENT_BUFFERS``), whose own buffers follow the GTP shards
(:func:`step_own`). Not modelled (refused, estimator/config/rules/features.py): FP8 and
NVFP4 weights (quantised gathers), CUDA graphs, recomputed linears, MTP, FSDP, PEFT, optimizers other than Adam,
gradient accumulation fusion off, layer kinds whose linears are not named (MLA, sparse and linear attention,
heterogeneous blocks).
"""

from __future__ import annotations

from typing import NamedTuple

from ...config.derived import grad_reduce_in_fp32
from ...config.errors import ConfigError, Problem
from ...config.rules.features import gtp_degrees
from ...model.quant_recipe import named_shapes
from ..optimizer_step import FP32, step_buffers

__all__ = ["BUFFERS", "GtpStage", "active", "gathered_rows", "output_wgrad_pooled", "stage", "step_own"]

#: ``GTPRematConfig.pad_for_alignment`` for bf16 weights (the only weights modelled with GTP).
PAD_FOR_ALIGNMENT = 16
#: The transient entries GTP adds; held for the run (estimator/memory/optimizer_step.py PERSISTENT_BUFFERS).
BUFFERS = ("gtp_gathered_weights", "gtp_wgrad_pool", "gtp_reduce_scatter_outputs", "gtp_symmetric_wgrad_pool",
           "gtp_padded_wgrad_copies")
_LATENT = ("mlp.fc1_latent_proj", "mlp.fc2_latent_proj")


def active(cfg) -> bool:
    """Whether GTP shards any weight (GTP_remat or expert GTP_remat above 1)."""
    g, ge = gtp_degrees(cfg)
    return g > 1 or ge > 1


def output_wgrad_pooled(cfg) -> bool:
    """Whether the output layer's weight gradient is a buffer of GTP's pool (fp32 gradient buffer under bf16/fp16
    weights: layers.py ``_wgrad_gemm(sharded_weight.get_wgrad_tensor(), ...)``), so the estimate's bf16 copy of it in
    the output layer's backward does not exist."""
    return gtp_degrees(cfg)[0] > 1 and grad_reduce_in_fp32(cfg.precision) and cfg.precision.params_dtype != "fp32"


def gathered_rows(rows: int, g: int) -> int:
    """Rows of the gathered (padded) weight: up(rows, 16 g) (``gtp_remat_shard_dim0``); each rank keeps 1/g."""
    align = PAD_FOR_ALIGNMENT * g
    return -(-rows // align) * align


def _kind_weights(r, kind, opt_in: bool) -> tuple[list, list, list]:
    """([(out, in)] of the GTP-sharded dense linears of one layer of ``kind``, in their named order; [(out, in, n)]
    of its routed experts' weights (n local experts); [(out, in)] of its linears GTP leaves whole). Refused where
    the layer has linears the estimate does not name (:func:`estimator.model.quant_recipe.named_shapes`)."""
    shapes, unnamed = named_shapes(r, kind)
    if unnamed:
        raise ConfigError(Problem("parallelism.tensor_parallel_num_weight_shards",
                                  r.cfg.parallelism.tensor_parallel_num_weight_shards,
                                  f"GTP with {kind.mixer or kind.mlp} layers is not modelled (which of their linears "
                                  "GTP shards is not followed; attention, Mamba, dense MLP and MoE layers are)"))
    dense, experts, whole = [], [], []
    for name, (o, i, n), expert in shapes:
        if expert:
            experts.append((o, i, n))
        elif name not in _LATENT or opt_in:
            dense.extend([(o, i)] * n)
        else:
            whole.append((o, i))
    return dense, experts, whole


class GtpStage(NamedTuple):
    """One stage's model states under GTP and the buffers it adds (bytes)."""

    weights: int
    gradients: int
    optimizer: int
    buffers: dict
    own_pool: int          # bytes of ``buffers`` in a memory pool of their own (NCCL-registered)
    dummy_wgrads: int      # the cached dummy weight gradients, one per distinct shard shape (weights' dtype)
    dense_params: int      # the dense and routed-expert elements one GPU holds under GTP (shards and whole ones)
    expert_params: int


def _distinct(seq: list) -> list:
    """One entry per distinct shape, plus one for every neighbour pair in ``seq`` (chain order) that shares one."""
    out = list(dict.fromkeys(seq))
    out += [b for a, b in zip(seq, seq[1:]) if a == b]
    return out


def stage(r, bm, chunks, dense_p: int, expert_p: int, st, shards: tuple[int, int]) -> GtpStage:
    """States and GTP buffers of one stage: ``chunks`` its :class:`~estimator.config.pipeline_layout.Chunk` s in
    forward order, ``dense_p``/``expert_p`` its parameters without GTP, ``st`` its (weights, gradients) without
    GTP, ``shards`` the (dense, expert) shard counts of the distributed optimizer without GTP (module docstring)."""
    cfg = r.cfg
    par = cfg.parallelism
    g, ge = gtp_degrees(cfg)
    opt_in = "moe_latent_proj" in (par.gtp_remat_opt_in_modules or ())
    wb = bm.weight
    gb = 4 if grad_reduce_in_fp32(cfg.precision) else wb
    vocab = (r.Vp // r.t, r.h)
    chain: list = []            # dense weights in forward (chain) order, (out, in); "vocab" marks Megatron's linears
    te_chain: list = []         # the Transformer Engine ones (their gradients come from the pool)
    role_layers: dict = {}      # (role, (out, in, n)) -> MoE layers on the stage
    loss = False
    dummies: set = set()        # the weight-gradient dummies' shapes: the shards' (main_grad's) shapes
    for c in chunks:
        if c.embedding:
            chain.append(vocab)
        for i in c.layers:
            dense, experts, whole = _kind_weights(r, r.kinds[r.layer_kinds[i]], opt_in)
            dummies |= {(gathered_rows(o, g) // g, i_) if g > 1 else (o, i_) for o, i_ in dense}
            dummies |= {(gathered_rows(o, ge) // ge, i_) if ge > 1 else (o, i_) for o, i_, _ in experts}
            dummies |= set(whole)
            chain += dense
            te_chain += dense
            for role, s in enumerate(experts):
                role_layers[(role, s)] = role_layers.get((role, s), 0) + 1
        if c.loss:
            loss = True
            chain.append(vocab)
    gsz = g if g > 1 else 1
    full_d = shard_d = 0
    if g > 1:
        # The tied output layer of a chunk that holds the embedding reuses its weight (no parameter of its own).
        params = list(chain)
        for c in chunks:
            if c.loss and c.embedding and r.tied:
                params.remove(vocab)
        full_d = sum(o * i for o, i in params)
        shard_d = sum(gathered_rows(o, g) // g * i for o, i in params)
    full_e = shard_e = 0
    if ge > 1:
        for (_, (o, i, n)), layers in role_layers.items():
            full_e += layers * n * o * i
            shard_e += layers * n * gathered_rows(o, ge) // ge * i
    dd, de = shard_d - full_d, shard_e - full_e
    weights = st[0] + wb * (dd + de)
    grads = st[1] + bm.grad * (dd + de)
    sd, se = shards
    if bm.distributed:
        opt = bm.optimizer * (-(-(dense_p + dd) // max(sd // gsz, 1)) + -(-(expert_p + de) // max(se // ge, 1)))
    else:
        opt = bm.optimizer * (dense_p + dd + expert_p + de)

    buffers: dict = {}
    gathered = wgrad = rs_out = symm = padded = 0
    if g > 1:
        gathered += wb * sum(gathered_rows(o, g) * i for o, i in _distinct(chain))
        ub = par.gtp_remat_nccl_ub
        te = _distinct(te_chain)
        if ub:
            symm += gb * sum(gathered_rows(o, g) * i for o, i in te)
        else:
            wgrad += gb * sum(o * i for o, i in te)
            if par.gtp_remat_reduce_scatter_with_fp32_accumulation and g > 2:
                wgrad += gb * sum(gathered_rows(o, g) * i for o, i in te)
            pads = sorted((gathered_rows(o, g) * i for o, i in te if gathered_rows(o, g) != o), reverse=True)
            padded += gb * sum(pads[:2])
        rs_out += gb * sum(gathered_rows(o, g) // g * i for o, i in te)
        if loss:
            rs_out += gb * gathered_rows(vocab[0], g) // g * vocab[1]
            if output_wgrad_pooled(cfg):
                wgrad += gb * vocab[0] * vocab[1]
    if ge > 1:
        ub = par.gtp_expert_remat_nccl_ub
        grouped = cfg.model.moe_grouped_gemm
        for (_, (o, i, n)), layers in role_layers.items():
            # grouped GEMM: per local expert (expert_idx in the key), parity 0 and 1 over the MoE layers; the
            # sequential experts' linears (expert_idx 0 each) alternate between two buffers per role
            sets = n * min(layers, 2) if grouped else min(n * layers, 2)
            rows = gathered_rows(o, ge)
            gathered += wb * sets * rows * i
            rs_out += gb * sets * rows // ge * i
            if ub:
                symm += gb * sets * rows * i
            else:
                wgrad += gb * sets * o * i
                if par.gtp_remat_reduce_scatter_with_fp32_accumulation and ge > 2:
                    wgrad += gb * sets * rows * i
                if rows != o:
                    padded += gb * sets * rows * i
    for name, value in zip(BUFFERS, (gathered, wgrad, rs_out, symm, padded)):
        if value:
            buffers[name] = value
    if g > 1 and (loss or any(c.embedding for c in chunks)):
        dummies.add((gathered_rows(vocab[0], g) // g, vocab[1]))
    return GtpStage(weights, grads, opt, buffers, symm, wb * sum(o * i for o, i in dummies), dense_p + dd,
                    expert_p + de)


def step_own(r, bm, gs: GtpStage, shards: tuple[int, int]) -> dict:
    """The optimizer step's own buffers (estimator/memory/optimizer_step.py) over GTP's shards: the distributed
    optimizer steps ``up(dense / (d / G))`` and ``up(expert / (e / Ge))`` elements of the GPU's buffers, ``d`` and ``e``
    the (dense, expert) shard counts without GTP (``shards``); without it every element the GPU holds."""
    g, ge = gtp_degrees(r.cfg)
    d, e = max(shards[0] // g, 1), max(shards[1] // ge, 1)
    dense, expert = gs.dense_params, gs.expert_params
    # step_buffers divides the experts by the expert-data-parallel size: hand it as many elements as give the shard
    sb = step_buffers(r, bm, dense, -(-expert // e) * r.edp if bm.distributed else expert, d)
    scratch = 0
    if r.cfg.parallelism.reduce_scatter_with_fp32_accumulation and bm.distributed:
        gb = 4 if grad_reduce_in_fp32(r.cfg.precision) else bm.weight
        scratch = max(n * gb + -(-n // k) * FP32 for n, k in ((dense, d), (expert, e)))
    if scratch > sb.grad_copies + sb.temporaries:       # the reduction's moment, before the step's own buffers
        return {"grad_reduce_fp32_scratch": scratch}
    return {k: v for k, v in (("optimizer_fp32_grad_copies", sb.grad_copies),
                              ("optimizer_temporaries", sb.temporaries)) if v}
