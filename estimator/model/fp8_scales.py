"""FP8 scaling factors: the scale tensors Transformer Engine keeps beside every FP8 tensor, by recipe.

Each FP8 tensor of Transformer Engine carries its scales (``scale_inv``), allocated with its data by the
recipe's quantizer (TransformerEngine @ d0067d0d : transformer_engine/pytorch/csrc/quantizer.cpp
``create_tensor`` and ``get_scale_shape`` of each quantizer; the Python mirrors in
transformer_engine/pytorch/tensor/mxfp8_tensor.py and float8_blockwise_tensor.py ``get_scale_shape``). For a
tensor of M x K elements (M the product of the leading dimensions, K the last one), with ``up(x, m)`` x rounded
up to a multiple of m:

    recipe      quantizer                        row-wise scales                     column-wise scales
    delayed     Float8Quantizer                  one fp32 per tensor, shared by the data and its transpose
    tensorwise  Float8CurrentScalingQuantizer    one fp32 per tensor, shared by the data and its transpose
    mxfp8       MXFP8Quantizer (E8M0, 1 B)       up(M, 128) x up(K/32, 4)            up(M/32, 4) x up(K, 128)
    blockwise   Float8BlockQuantizer (fp32, 4 B)
                  weights, 128 x 128 blocks      ceil(M/128) x up(ceil(K/128), 4)    ceil(K/128) x up(ceil(M/128), 4)
                  inputs, 1 x 128 blocks         ceil(K/128) x up(M, 4)              ceil(M/128) x up(K, 4)

MXFP8 keeps one scale byte per 32 elements of each copy (the padding of its scale tensors to 128 x 4 tiles, as
cuBLAS reads them swizzled, adds bytes only where M or K is not a multiple of 128); blockwise one fp32 per 128
elements of an input copy (1/32 B per element too) and per 128 x 128 block of a weight copy. The blockwise
recipe uses 2-D blocks for weights and 1-D blocks for inputs (transformer_engine/common/recipe/__init__.py
``Float8BlockScaling``: ``w_block_scaling_dim = 2``, ``x_block_scaling_dim = 1``; quantization.py
``Float8BlockScalingRecipeState.make_quantizers``).

Which copies exist, and so which scales:

- a linear-layer weight in FP8 (Transformer Engine's cached weight without ``fp8_param_gather``, the FP8
  parameter itself with it): row-wise for the forward GEMM and column-wise for the data-gradient GEMM, both
  kept (module/linear.py ``_linear_forward``: ``weight_quantizer.set_usage(rowwise=True,
  columnwise=is_grad_enabled and inp.requires_grad)``; module/base.py ``reset_parameters``: FP8 parameters are
  created with ``columnwise=torch.is_grad_enabled()``). With ``fp8_param_gather`` Megatron-Core moves only the
  data into its buffers (Megatron-LM @ d98e8a64 : megatron/core/distributed/param_and_grad_buffer.py
  ``modify_underlying_storage``; with MXFP8 and ``reuse_grad_buf_for_mxfp8_param_ag`` not even that), so the
  scales stay in the parameter's own tensors, whole on every GPU, also under Megatron-FSDP (its buffers
  take the raw data: megatron_fsdp/param_and_grad_buffer.py ``fp8_set_raw_data``);
- a linear layer's input saved for the weight-gradient GEMM: column-wise only with mxfp8 and blockwise
  (module/linear.py: ``inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)``;
  layernorm_linear.py: ``ln_out.update_usage(rowwise_usage=False)`` for MXFP8 and blockwise tensors, also under
  sequence parallelism, where they are gathered column-wise in the backward pass; grouped_linear.py: each
  expert's input ``update_usage(rowwise_usage=False, columnwise_usage=True)``, one tensor per local expert from
  ``_split_quantize``, each with its own padded scales; Megatron-Core does not use Transformer Engine's
  ``LayerNormMLP``, which would keep the fc2 input both ways).

Which copies a delayed or tensorwise (per-tensor) FP8 tensor holds depends on the GPU (``training.gpu_arch``,
:func:`per_tensor_transpose`). Hopper's FP8 GEMMs take only the TN layout, so column-wise usage there is a second,
transposed tensor (``_transpose``) beside the row-wise data; from sm_100 on (B200, GB200, B300; 10.x, 11.x and
13.0+, not the 12.x RTX parts) cuBLAS takes any layout and the one data tensor serves both usages
(TransformerEngine @ d0067d0d : transformer_engine/pytorch/utils.py ``is_non_tn_fp8_gemm_supported``, the same test
in transformer_engine/common/transformer_engine.cpp ``nvte_is_non_tn_fp8_gemm_supported``; csrc/quantizer.cpp
``Float8Quantizer::create_tensor`` and ``Float8CurrentScalingQuantizer::create_tensor``: ``with_data = rowwise_usage
|| is_non_tn_fp8_gemm_supported``, ``with_transpose = columnwise_usage && !is_non_tn_fp8_gemm_supported``). So a
cached FP8 weight is 2 B per element on Hopper and 1 B on Blackwell, and an FP8 parameter (``fp8_param_gather``)
1 B with a 1 B transpose on Hopper (tensor/utils.py ``post_all_gather_processing``: ``_create_transpose()`` only
without non-TN GEMMs) and 1 B alone on Blackwell. A saved input is 1 B on both: column-wise only, the transpose on
Hopper, the data on Blackwell (and row-wise only where a sequence-parallel norm output is gathered, as per-tensor
FP8 is all-gathered row-wise: layernorm_linear.py, ``supports_only_rowwise_all_gather``). MXFP8, blockwise and NVFP4
keep their row-wise and column-wise copies on every GPU: theirs are differently scaled data, not a transpose
(blockwise GEMMs on Blackwell convert the scales to MXFP8's per GEMM, csrc/extensions/gemm.cpp, a transient not
counted). AMD targets follow Hopper's rule here (the capability HIP reports, 9.4 or 9.5, is below 10.0).

Delayed and tensorwise scaling keep a single fp32 per tensor (4 B, a 512-byte block of PyTorch's caching
allocator; a few dozen per layer): counted as 0 here, as is each recipe's per-module state (the delayed
recipe's amax history). Routed experts' rows are split evenly over the local experts (balanced routing, as
:func:`estimator.model.layers.moe.routed_rows` assumes); Transformer Engine's bulk allocation of the experts' tensors
aligns each one to 256 B (data) and 16 B (scales) inside one buffer, not counted (under 300 B per expert).

NVFP4 (``precision.fp4``; Transformer Engine's ``NVFP4BlockScaling`` recipe, TransformerEngine @ d0067d0d :
transformer_engine/common/recipe/__init__.py) is the fifth recipe here, ``"nvfp4"``. Its quantizer
(transformer_engine/pytorch/tensor/nvfp4_tensor.py ``NVFP4Quantizer.inner_tensor_specs`` and ``get_scale_shape``;
csrc/quantizer.cpp ``NVFP4Quantizer::create_tensor`` and ``get_scale_shape``) allocates, per usage of an M x K
tensor:

    usage        data (uint8, two E2M1 values a byte)   scales (E4M3 as uint8, 1 B)        amax
    row-wise     M x K/2                                up(M, 128) x up(K/16, 4)           1 fp32
    column-wise  K x M/2 (the transpose)                up(K, 128) x up(M/16, 4)           1 fp32

so 0.5 B + 1/16 B per element and copy when M and K are multiples of 128 (M and K must be multiples of 16;
Transformer Engine checks it). The recipe quantizes weights with 16 x 16 blocks (``fp4_2d_quantization``), but
the scale tensors keep the 1 x 16 shape above (``get_scale_shape`` does not depend on it), and the random Hadamard
transform of inputs and gradients and the stochastic rounding of gradients change values, not sizes (the 16 x 16
bf16 Hadamard matrix, 512 B, is cached once per device; the unfused Hadamard path's bf16 transposed copy of the
input is freed inside the quantization call: neither is counted). The two fp32 amaxes per tensor are counted as 0,
as the FP8 per-tensor scales are. Which copies exist:

- weights: row-wise (forward GEMM) and column-wise (data-gradient GEMM), 0.5 + 0.5 B per element plus both scale
  tensors, cached beside the bf16 weight, or, with ``fp4_param_gather``, the NVFP4 parameter itself (the same two
  copies, no bf16 weight);
- a linear layer's input saved for the weight gradient: column-wise only (module/linear.py: ``update_usage(
  rowwise_usage=False, columnwise_usage=True)``, since ``NVFP4Quantizer`` does not restrict all-gathers to row-wise
  data: quantized_tensor.py ``supports_only_rowwise_all_gather`` is False), except the norm output of a
  ``LayerNormLinear`` under sequence parallelism, which keeps both copies: layernorm_linear.py drops the row-wise
  copy only for MXFP8 and blockwise tensors or when the input is not gathered (``ctx.ln_out_needs_gather``).
"""

from __future__ import annotations

from ..config.derived import compute_capability

__all__ = ["NVFP4", "RECIPES", "lin_saved", "module_recipe", "nvfp4_data_bytes", "per_tensor_transpose", "quantized",
           "recipe_of", "saved_scale_bytes", "tensor_scale_bytes", "weight_scale_bytes"]

#: FP8 recipes (``precision.fp8_recipe``; None means delayed, Megatron's default).
RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")
#: The NVFP4 recipe (``precision.fp4``), the only FP4 recipe modelled.
NVFP4 = "nvfp4"
#: Recipes whose scale tensors are counted (block scales); the others keep one fp32 per tensor.
BLOCK_SCALED = ("mxfp8", "blockwise", NVFP4)

MXFP8_BLOCK = 32        # transformer_engine/pytorch/constants.py MXFP8_BLOCK_SCALING_SIZE: elements per E8M0 scale
NVFP4_BLOCK = 16        # transformer_engine/pytorch/constants.py NVFP4_BLOCK_SCALING_SIZE: elements per E4M3 scale
BLOCK_LEN = 128         # float8_blockwise_tensor.py Float8BlockQuantizer.block_len: 1 x 128 and 128 x 128 blocks
_E8M0, _FP32 = 1, 4     # bytes per scale: MXFP8's E8M0 (uint8 storage), blockwise's fp32


def per_tensor_transpose(arch: str) -> bool:
    """Whether delayed and tensorwise FP8 tensors with column-wise usage keep a separate transposed copy on the GPU
    architecture ``arch`` (a ``training.gpu_arch`` name): True where FP8 GEMMs are TN-only, everywhere but compute
    capability 10.x, 11.x and 13.0+ (Transformer Engine's ``is_non_tn_fp8_gemm_supported``, module docstring)."""
    cc = compute_capability(arch)
    return not ((10, 0) <= cc < (12, 0) or cc >= (13, 0))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _up(x: int, m: int) -> int:
    return _cdiv(x, m) * m


def tensor_scale_bytes(recipe: str, m: int, k: int, rowwise: bool, columnwise: bool, weight: bool) -> int:
    """Bytes of the scale tensors of one FP8 tensor of m x k elements under ``recipe`` with the usages asked for
    (``weight``: quantized by the recipe's weight quantizer, which for blockwise means 128 x 128 blocks).

    MXFP8 needs m and k divisible by 32, NVFP4 by 16 (Transformer Engine checks it); the divisions round up here,
    which never counts less."""
    if recipe == "mxfp8":
        n = 0
        if rowwise:
            n += _up(m, 128) * _up(_cdiv(k, MXFP8_BLOCK), 4)
        if columnwise:
            n += _up(_cdiv(m, MXFP8_BLOCK), 4) * _up(k, 128)
        return _E8M0 * n
    if recipe == NVFP4:     # E4M3 scales, 1 B, the same shapes for 1 x 16 and 16 x 16 (weight) blocks
        n = 0
        if rowwise:
            n += _up(m, 128) * _up(_cdiv(k, NVFP4_BLOCK), 4)
        if columnwise:
            n += _up(k, 128) * _up(_cdiv(m, NVFP4_BLOCK), 4)
        return n
    if recipe == "blockwise":
        n = 0
        if weight:
            bm, bk = _cdiv(m, BLOCK_LEN), _cdiv(k, BLOCK_LEN)
            if rowwise:
                n += bm * _up(bk, 4)
            if columnwise:
                n += bk * _up(bm, 4)
        else:
            if rowwise:
                n += _cdiv(k, BLOCK_LEN) * _up(m, 4)
            if columnwise:
                n += _cdiv(m, BLOCK_LEN) * _up(k, 4)
        return _FP32 * n
    return 0    # delayed, tensorwise: one fp32 per tensor (module docstring)


def weight_scale_bytes(recipe: str, shapes) -> int:
    """Scale bytes of FP8 linear weights, row-wise and column-wise copies: ``shapes`` holds (out_features,
    in_features, count) triples (a weight is out x in in Transformer Engine)."""
    return sum(n * tensor_scale_bytes(recipe, o, i, True, True, True) for o, i, n in shapes)


def nvfp4_data_bytes(m: int, k: int) -> int:
    """Bytes of one NVFP4 copy (row-wise or column-wise) of an m x k tensor: two 4-bit values a byte, rounded up."""
    return _cdiv(m * k, 2)


def _split(rows: int, tensors: int):
    """(rows, how many) of ``rows`` split into ``tensors`` near-equal tensors."""
    tensors = max(1, min(tensors, rows))
    q, extra = divmod(rows, tensors)
    return ((q, tensors - extra), (q + 1, extra))


def saved_scale_bytes(recipe: str, rows: int, cols: int, tensors: int = 1, rowwise: bool = False) -> int:
    """Scale bytes of a linear layer's quantized input saved for the backward pass (column-wise, and row-wise too
    with ``rowwise``; see the module docstring): ``rows`` x ``cols`` elements, split by rows into ``tensors``
    near-equal tensors (one per local expert of a grouped linear layer)."""
    if recipe not in BLOCK_SCALED or rows <= 0 or cols <= 0:
        return 0
    return sum(n * tensor_scale_bytes(recipe, q, cols, rowwise, True, False) for q, n in _split(rows, tensors) if n)


def module_recipe(c, module: str) -> str:
    """The recipe of the linear ``module`` (a module suffix of :mod:`estimator.model.quant_recipe`, '' for one not
    named) in the micro-batch context ``c``: its ``precision.quant_recipe`` rule's, else ``c.fp8``."""
    for name, recipe in c.quant or ():
        if name == module:
            return recipe
    return c.fp8


def lin_saved(c, rows: int, cols: int, tensors: int = 1, gathered: bool = False, module: str = "") -> int:
    """Bytes a linear layer keeps of its rows x cols input for the weight gradient (``c`` a
    :class:`estimator.model.layers.base.Ctx`): ``c.lin_in`` per element (1 B with FP8) and, with FP8, the input's
    column-wise scales; with NVFP4 its column-wise copy (0.5 B per element) and scales, and also the row-wise copy
    and scales when ``gathered`` (the norm output of a ``LayerNormLinear`` under sequence parallelism, see the
    module docstring). ``module``: the linear's name, whose own recipe (``precision.quant_recipe``) counts."""
    recipe = module_recipe(c, module) if module else c.fp8
    if recipe != c.fp8:
        c = c._replace(fp8=recipe, lin_in=1 if recipe else c.B)
    if c.fp8 == NVFP4:
        if rows <= 0 or cols <= 0:
            return 0
        both = gathered and c.Tn != c.T
        out = (2 if both else 1) * sum(n * nvfp4_data_bytes(q, cols) for q, n in _split(rows, tensors) if n)
        return out + saved_scale_bytes(NVFP4, rows, cols, tensors, rowwise=both)
    out = c.lin_in * rows * cols
    if c.fp8:
        out += saved_scale_bytes(c.fp8, rows, cols, tensors)
    return out


def quantized(pr) -> bool:
    """Whether a precision section runs the linear layers' GEMMs quantized (FP8 or NVFP4)."""
    return bool(pr.fp8 or getattr(pr, "fp4", False))


def recipe_of(pr) -> str:
    """The quantization recipe of a precision section: its FP8 recipe, ``"nvfp4"`` with FP4 compute, '' without
    either."""
    if getattr(pr, "fp4", False):
        return NVFP4
    return (pr.fp8_recipe or "delayed") if pr.fp8 else ""
