"""Model states per GPU: weights, gradients and optimizer states, by Megatron-Core's rules.

Per parameter, with bf16 weights, an fp32 gradient buffer and Adam (Megatron-LM's default for bf16):

    weights 2 B + gradients 4 B + (fp32 master weights 4 B + exp_avg 4 B + exp_avg_sq 4 B) / d

where ``d`` is the shard count of the distributed optimizer: the data-parallel x context-parallel size for
dense parameters, the expert-data-parallel size (world / (etp * ep * pp)) for routed experts, and 1
without the distributed optimizer (18 B per parameter). Shards are rounded up, as the distributed
optimizer pads its buffers to equal shards. Megatron-Core at the pinned revision decides the rest:

- Gradient buffer (``distributed/param_and_grad_buffer.py``, ``group_params_for_buffers``): fp32 when
  DDP's ``grad_reduce_in_fp32`` is set, else the parameter's dtype. Megatron-LM sets it for bf16 weights
  unless ``--grad-reduce-in-bf16`` or ``--main-grads-dtype bf16`` (``arguments.py``); Megatron-Bridge sets
  it on its own. The optimizer's ``main_grads_dtype`` allocates nothing: the precision-aware optimizer
  reads the buffer through ``decoupled_grad`` (a view), the plain one through ``.grad = shard.float()``,
  a copy that exists only during the optimizer step, when the activations are gone (not counted).
  With ``fp32_local_grad_accumulation`` (DDP's ``param_name_patterns_for_fp32_local_accumulation: ['all']``,
  ``_ParamAndGradBuffer.__init__``) every parameter's ``main_grad`` becomes its own fp32 tensor
  (``torch.empty_like(..., dtype=torch.float32)``, kept in ``extra_main_grads`` for the whole run) beside its slice
  of the gradient buffer, which keeps the weights' dtype (Megatron-Core asserts ``grad_reduce_in_fp32`` is off): 2 B +
  4 B per parameter with bf16 weights.
- Master weights: fp32 (4 B) for bf16/fp16 weights, none for fp32 weights. With the precision-aware
  optimizer Transformer Engine's FusedAdam keeps them in ``main_params_dtype``, and with bf16 weights,
  fp32 masters and ``store_param_remainders`` (Megatron-Core's default) only their low 16 bits (an int16
  tensor, 2 B). FusedAdam keeps them only when ``main_params_dtype`` is not fp32 or the FP8 recipe is
  delayed (or FP8 is off): ``OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8``. Otherwise
  Megatron-Core's distributed optimizer keeps fp32 masters itself (4 B, no remainders).
- FP8 (Transformer Engine): each linear-layer weight has FP8 copies for the GEMMs, a row-wise and a column-wise
  one, 2 B. With ``fp8_param_gather`` the linear weights themselves are FP8 (1 B) plus the column-wise copy (1 B);
  embedding, output layer, norms, router and biases stay in the weights' dtype. With delayed or tensorwise scaling the
  column-wise copy is a transpose that exists only where FP8 GEMMs are TN-only: on Hopper (``training.gpu_arch``
  sm_90, the default), not on sm_100/sm_103 (B200, GB200, B300), where the one row-wise tensor serves both GEMMs: 1 B
  per linear weight, cached beside the weight or, with ``fp8_param_gather``, the FP8 parameter alone
  (:func:`estimator.model.fp8_scales.per_tensor_transpose`, whose module docstring cites Transformer Engine). MXFP8
  and blockwise keep both copies on every GPU. The copies carry their scaling factors
  (:mod:`estimator.model.fp8_scales`, per tensor, from its shape): with ``mxfp8`` one E8M0 byte per 32 elements of
  each copy, 2/32 B per weight element (``up(N, 128) up(K/32, 4) + up(N/32, 4) up(K, 128)`` bytes for an N x K weight,
  N/16 K when both are multiples of 128); with ``blockwise`` one fp32 per 128 x 128 block of each copy (``4
  (ceil(N/128) up(ceil(K/128), 4) + ceil(K/128) up(ceil(N/128), 4))``, about 1/2048 B per element); ``delayed`` and
  ``tensorwise`` one fp32 per tensor (4 B; counted as 0, see :mod:`estimator.model.fp8_scales`). They are the same
  with and without ``fp8_param_gather`` (the FP8 parameter keeps both copies and their scales; Megatron-Core moves
  only its data into its buffers), held whole on every GPU. MXFP8 weights under the distributed optimizer
  (``fp8_recipe: mxfp8`` with ``fp8_param_gather``) have no parameter buffer of their own: Megatron-Core makes it a
  view of the gradient buffer (``_ParamAndGradBuffer.__init__``), and with ``reuse_grad_buf_for_mxfp8_param_ag``
  (required: Transformer Engine cannot move MXFP8 weights into a buffer) the updated weights are all-gathered in bf16
  through it and quantized into the weights' own row-wise and column-wise storage, 1 B + 1 B and their scales as
  above.
- NVFP4 (``fp4``, :mod:`estimator.model.fp8_scales`): the same two copies at 4 bits, 0.5 B + 0.5 B = 1 B per
  linear-weight element, each with an E4M3 scale per 16 elements (``up(N, 128) up(K/16, 4) + up(K, 128)
  up(N/16, 4)`` bytes for an N x K weight, N K / 8 when both are multiples of 128). Without ``fp4_param_gather``
  they are cached beside the weight in params_dtype (``fp8_cache`` 1 B); with it the NVFP4 parameter is the weight
  (``linear_weight`` 1 B for both copies, no cache): Megatron-Core moves only the packed row-wise bytes into the
  distributed optimizer's uint8 parameter buffer, half the element count (``_ParamAndGradBuffer.__init__``,
  ``_compute_nvfp4_packed_layout``; the gradient buffer keeps the full count), and Transformer Engine rebuilds the
  column-wise copy after each all-gather (tensor/utils.py ``post_all_gather_processing``), so both are held whole
  on every GPU. The master weights are as without NVFP4 (``fp8_recipe`` stays Megatron-LM's default, delayed, so
  FusedAdam keeps them under the precision-aware optimizer).
- Per-module precision (``precision.quant_recipe``, :mod:`estimator.model.quant_recipe`): each linear of the
  quantised layers caches the copies of its own recipe (:func:`cache_bytes`: none in bf16, 1 B with NVFP4, 1 or
  2 B with FP8) with that recipe's scales; the difference to the run's ``fp8_cache`` is added per layer kind with the
  scales (``ByteModel.fp8_scales``), so the bf16 first/last layers, which drop both, stay plain bf16.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.derived import gpu_arch, grad_reduce_in_fp32
from ..model.fp8_scales import BLOCK_SCALED, NVFP4, per_tensor_transpose, recipe_of, weight_scale_bytes
from ..model.layers import kind_linear_shapes
from ..model.quant_recipe import kind_quant, mtp_quant, named_shapes
from ..model.resolve import DTYPE_BYTES, Resolved

__all__ = ["StateBytes", "ByteModel", "byte_model", "cache_bytes", "grad_reduce_in_fp32", "stage_fp8_scales",
           "state_bytes"]


class ByteModel(NamedTuple):
    """Bytes per parameter of each model state, before sharding."""

    weight: int
    fp8_cache: int      # bytes of the extra FP8/NVFP4 copies Transformer Engine keeps of each linear weight (by GPU)
    grad: int
    optimizer: int      # master weights + both Adam moments, divided by the shard count
    distributed: bool
    linear_weight: int = 0   # a linear-layer weight itself (1 with fp8_param_gather or fp4_param_gather, else
    #                          ``weight``; with NVFP4 that 1 B is its 0.5 B row-wise and 0.5 B column-wise copies)
    # Bytes (not per parameter) of the FP8 scale tensors of one layer of each kind on one GPU, in ``r.kinds`` order:
    # (dense-parallel part, routed experts); empty without FP8 scales to count (estimator.model.fp8_scales). With
    # precision.quant_recipe also the difference each linear's own recipe makes to ``fp8_cache`` (may be negative).
    fp8_scales: tuple = ()
    fp8_scales_mtp: int = 0  # one MTP layer's eh_proj (its transformer layer counts by its kind; with quant_recipe
    #                          also the difference its own recipes make to its kinds' decoder figures)

    def layer_scales(self, k: int) -> int:
        """FP8 scale bytes of one decoder layer of kind ``k`` on one GPU."""
        return sum(self.fp8_scales[k]) if self.fp8_scales else 0


def _master_bytes(r: Resolved) -> int:
    """Bytes of one master weight (see the module docstring)."""
    pr = r.cfg.precision
    if pr.use_precision_aware_optimizer:
        te_keeps = pr.main_params_dtype != "fp32" or not pr.fp8 or (pr.fp8_recipe or "delayed") == "delayed"
        if te_keeps:
            if pr.main_params_dtype == "fp32" and pr.params_dtype == "bf16" and pr.store_param_remainders:
                return 2     # FusedAdam's int16 remainders
            return DTYPE_BYTES[pr.main_params_dtype]
        return 4
    return 0 if pr.params_dtype == "fp32" else 4


def cache_bytes(recipe: str, arch: str) -> int:
    """Bytes per linear-weight element of the quantised copies Transformer Engine caches beside a weight in
    params_dtype under ``recipe`` (no fp8/fp4_param_gather; see the module docstring): none for bf16 (''), 1 for
    NVFP4's two 0.5 B copies, 1 + 1 for FP8's row-wise and column-wise copies (the column-wise one only where the
    recipe keeps one on ``arch``)."""
    if not recipe:
        return 0
    if recipe == NVFP4:
        return 1
    return 1 + (1 if recipe in BLOCK_SCALED or per_tensor_transpose(arch) else 0)


def _module_extra(r: Resolved, shapes, recipe_of_shape, run_cache: int) -> int:
    """Bytes one GPU's linears ``shapes`` ((name, (out, in, count)) pairs) hold beyond ``run_cache`` per element:
    each one's scales under its own recipe and the difference its recipe's cached copies make (``precision.
    quant_recipe``; the module docstring)."""
    arch = gpu_arch(r.cfg)
    out = 0
    for name, (o, i, n) in shapes:
        recipe = recipe_of_shape(name)
        out += (cache_bytes(recipe, arch) - run_cache) * o * i * n
        if recipe in BLOCK_SCALED:
            out += weight_scale_bytes(recipe, ((o, i, n),))
    return out


def _quant_scales(r: Resolved, run_cache: int) -> tuple[tuple, int]:
    """:func:`_fp8_scales` under ``precision.quant_recipe``: per layer kind, and per MTP layer beyond its kinds'
    decoder figures, the scale bytes of each linear's own recipe and the difference its cached copies make to
    ``run_cache`` per element (estimator/model/quant_recipe.py)."""
    kinds = []
    for kind in r.kinds:
        q = kind_quant(r, kind)
        named, _ = named_shapes(r, kind)
        kinds.append(_kind_extra(r, kind, q, named, run_cache))
    mtp = 0
    if r.mtp:
        for k in r.mtp_kinds:
            q, _ = mtp_quant(r, r.kinds[k])
            mtp += sum(_kind_extra(r, r.kinds[k], q, named_shapes(r, r.kinds[k])[0], run_cache)) - sum(kinds[k])
        _, eh = mtp_quant(r, r.kinds[r.mtp_kinds[0]]) if r.mtp_kinds else (None, recipe_of(r.cfg.precision))
        mtp += _module_extra(r, (("eh_proj", (r.h // r.t, 2 * r.h, 1)),), lambda _: eh, run_cache)
    return tuple(kinds), mtp


def _kind_extra(r: Resolved, kind, q, named, run_cache: int) -> tuple[int, int]:
    """(dense part, routed experts) of :func:`_quant_scales` for one layer of ``kind`` with recipes ``q``: its named
    linears by name, the rest of its linear shapes (kind_linear_shapes) at ``q.other``."""
    dense, experts = kind_linear_shapes(r, kind)
    named_dense = [(n, s) for n, s, e in named if not e]
    named_exp = [(n, s) for n, s, e in named if e]
    rest_dense = list(dense)
    for _, s in named_dense:
        rest_dense.remove(s)
    rest_exp = list(experts)
    for _, s in named_exp:
        rest_exp.remove(s)
    d = _module_extra(r, named_dense + [("", s) for s in rest_dense], q.of, run_cache)
    e = _module_extra(r, named_exp + [("", s) for s in rest_exp], q.of, run_cache)
    return d, e


def _fp8_scales(r: Resolved, run_cache: int = 0) -> tuple[tuple, int]:
    """Per layer kind (dense part, routed experts), and one MTP layer's eh_proj: the scale bytes of their FP8 or
    NVFP4 linear weights on one GPU (see the module docstring); ((), 0) where the recipe's scales are per tensor.
    With ``precision.quant_recipe``, :func:`_quant_scales`."""
    recipe = recipe_of(r.cfg.precision)
    if r.cfg.precision.quant_recipe and recipe:
        return _quant_scales(r, run_cache)
    if recipe not in BLOCK_SCALED:
        return (), 0
    kinds = []
    for kind in r.kinds:
        dense, experts = kind_linear_shapes(r, kind)
        kinds.append((weight_scale_bytes(recipe, dense), weight_scale_bytes(recipe, experts)))
    # eh_proj: a column-parallel linear 2h -> h, h/t x 2h on one GPU.
    mtp = weight_scale_bytes(recipe, ((r.h // r.t, 2 * r.h, 1),)) if r.mtp else 0
    return tuple(kinds), mtp


def byte_model(r: Resolved) -> ByteModel:
    pr = r.cfg.precision
    w = DTYPE_BYTES[pr.params_dtype]
    grad = 4 if grad_reduce_in_fp32(pr) else w
    if r.cfg.parallelism.fp32_local_grad_accumulation:
        grad += 4                       # the fp32 main_grad of every parameter, beside the buffer's slice
    if pr.use_precision_aware_optimizer:
        moments = DTYPE_BYTES[pr.exp_avg_dtype] + DTYPE_BYTES[pr.exp_avg_sq_dtype]
    else:
        moments = 8
    linear, fp8_cache = w, 0
    if pr.fp4:
        if pr.fp4_param_gather:
            linear = 1                  # NVFP4 weight: row-wise and column-wise copies, 0.5 B each
        else:
            fp8_cache = 1               # row-wise and column-wise NVFP4 copies (0.5 B each) beside the weight
    elif pr.fp8:
        # The column-wise copy: MXFP8's and blockwise's own data everywhere; delayed and tensorwise a transpose,
        # only where FP8 GEMMs are TN-only (Hopper), else the row-wise tensor serves both GEMMs.
        columnwise = 1 if recipe_of(pr) in BLOCK_SCALED or per_tensor_transpose(gpu_arch(r.cfg)) else 0
        if pr.fp8_param_gather:
            linear, fp8_cache = 1, columnwise     # FP8 weight + its column-wise copy for the backward pass
        else:
            fp8_cache = 1 + columnwise            # row-wise (and column-wise) FP8 copies beside the weight
    scales, scales_mtp = _fp8_scales(r, fp8_cache)
    return ByteModel(weight=w, fp8_cache=fp8_cache, grad=grad, optimizer=_master_bytes(r) + moments,
                     distributed=r.cfg.training.use_distributed_optimizer, linear_weight=linear,
                     fp8_scales=scales, fp8_scales_mtp=scales_mtp)


class StateBytes(NamedTuple):
    weights: int
    gradients: int
    optimizer: int


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def state_bytes(bm: ByteModel, dense_params: int, dense_linear: int, expert_params: int, dense_shard: int,
                expert_shard: int, fp8_scales: int = 0) -> StateBytes:
    """States of one GPU holding ``dense_params`` (of which ``dense_linear`` are linear-layer weights, which
    FP8 holds in its own format) and ``expert_params`` routed-expert parameters (all linear weights);
    ``fp8_scales``: the bytes of those FP8 weights' scale tensors (:attr:`ByteModel.fp8_scales` of its layers)."""
    linear = dense_linear + expert_params
    weights = bm.weight * (dense_params - dense_linear) + (bm.linear_weight or bm.weight) * linear \
        + bm.fp8_cache * linear + fp8_scales
    grads = bm.grad * (dense_params + expert_params)
    if bm.distributed:
        opt = bm.optimizer * (_ceil_div(dense_params, dense_shard) + _ceil_div(expert_params, expert_shard))
    else:
        opt = bm.optimizer * (dense_params + expert_params)
    return StateBytes(weights, grads, opt)


def stage_fp8_scales(r: Resolved, bm: ByteModel, counts, n_mtp: int) -> int:
    """Bytes of the FP8 or NVFP4 weight scales one GPU of a stage holds (estimator/model/fp8_scales.py): ``counts`` decoder
    layers of each kind and ``n_mtp`` MTP layers (each its eh_proj and a layer of each of its kinds)."""
    out = sum(cnt * bm.layer_scales(k) for k, cnt in enumerate(counts) if cnt)
    if n_mtp:
        out += n_mtp * (bm.fp8_scales_mtp + sum(bm.layer_scales(k) for k in r.mtp_kinds))
    return out
