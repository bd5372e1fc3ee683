"""Dense MLP, with its pre-MLP norm.

Megatron-Core ``megatron/core/transformer/mlp.py`` ``MLP`` with ``TELayerNormColumnParallelLinear`` (fused norm
and fc1) and ``TERowParallelLinear`` (fc2); in a hybrid model the same MLP makes a ``-`` layer
(``megatron/core/ssm/mlp_layer.py`` ``MLPLayer``). Symbols: h hidden size, f ffn_hidden_size, up = 2 for a
gated activation (SwiGLU, GeGLU, quick-GeGLU) else 1, t tensor-parallel size.

Parameters: fc1 h f up (+ f up bias), fc2 f h (+ h bias, replicated), norm nw h (replicated), and with
post_layernorm (Gemma) one more norm nw h after fc2; with pre_layernorm false (OLMo 2) no norm before fc1.

Activations per micro-batch on one GPU, in bytes: ``4 Tn h + B T f up / t + B T f / t``, the norm's input
and output, fc1's output (the activation's input; with Kimi K3's SiTU instead its six fp32 intermediates,
``24 T f / t``) and the activation's output (fc2's input); with
post_layernorm also the post-norm's input and statistics (``B Tn h + 4 Tn``). With pre_layernorm false fc1
(TEColumnParallelLinear) keeps the layer input in place of the norm's input and output (``B Tn h``), which
recomputing layernorm cannot drop. Under FP8 and NVFP4 the norm output is fc1's saved quantized input (FP8: 1 B per
element plus the column-wise scales of mxfp8 and blockwise; NVFP4: 0.5 B + 1/16 B per element column-wise, and the
row-wise copy too under sequence parallelism), as is the layer input without the pre-MLP norm. Recomputing mlp keeps only the
input; the backward working set is the fc1-output gradient and two residual-sized tensors. Falcon-H1's MLP
(parallel_mamba_attention: Megatron-Bridge's FalconH1MLP, the unfused activation path its mlp_multipliers need)
also keeps the scaled gate and the activation's output, ``2 B T f / t`` more.

``training.mlp_chunks_for_training`` N > 1 (Megatron-LM @ d98e8a64 : megatron/core/transformer/transformer_layer.py
``_run_mlp``, training only, not with recompute of mlp, which takes precedence): the pre-MLP norm's input
``[S, b, h]`` (S = s / cp, / t under sequence parallelism) is cut by ``torch.chunk`` into pieces of ceil(S / n)
rows, n = min(N, S), and the MLP runs on each; the outputs are concatenated. Each piece saves its share of the
tensors above, so the saved activations are unchanged; the backward runs the pieces one at a time, so fc1's output
gradient is that of the largest piece, ``B ceil(S / n) b (t under SP) f up / t``, while the two residual-sized
gradients (the output's, and the pieces' input gradients that ``chunk``'s backward gathers) remain.
"""

from __future__ import annotations

from ..fp8_scales import lin_saved
from .base import Count, Ctx, Part

__all__ = ["SITU_BYTES", "act_input_saved", "activations", "components", "linear_shapes", "linear_weights",
           "mlp_count", "params", "weight_shapes"]


def mlp_count(h: int, f: int, gated: bool, bias: bool) -> Count:
    """fc1 h f (2 if gated) (+ bias), fc2 f h (+ h bias, replicated): one MLP without its norm."""
    up = f * (2 if gated else 1)
    return Count(h * up + f * h + (up if bias else 0), h if bias else 0)


#: Bytes Kimi K3's SiTU keeps per element of its output (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/kimi/
#: kimi_k3_ops.py ``situ_and_mul``, unfused PyTorch on the fp32 copy of fc1's output, which itself is not kept):
#: tanh(gate / 4), 4 tanh(gate / 4), sigmoid(gate), their product, tanh(up / 25) and 25 tanh(up / 25), six fp32 tensors.
SITU_BYTES = 24


def act_input_saved(r, B: int, n: int) -> int:
    """Bytes the activation keeps of fc1's output for ``n`` activation-output elements: fc1's output itself
    (``B n up``), or SiTU's six fp32 intermediates (:data:`SITU_BYTES` n)."""
    if r.cfg.model.activation_func == "situ":
        return SITU_BYTES * n
    return B * n * (2 if r.gated else 1)


def params(r) -> Count:
    return mlp_count(r.h, r.f, r.gated, r.cfg.model.add_bias_linear) + Count(0, _norms(r))


def _norms(r) -> int:
    return r.norm_w * r.h * ((1 if r.pre_norm else 0) + (1 if r.post_norm else 0))


def components(r) -> dict:
    n = _norms(r)
    return {"mlp": params(r).total - n, "norms": n}


def linear_weights(r) -> int:
    width = r.f // r.t
    return r.h * width * (2 if r.gated else 1) + width * r.h


def weight_shapes(r) -> set:
    return {(o, i) for o, i, _ in linear_shapes(r)}


def linear_shapes(r) -> tuple:
    """(out, in, count) of each linear-layer weight on one tensor-parallel rank: fc1, fc2."""
    f = r.f // r.t
    return ((f * (2 if r.gated else 1), r.h, 1), (r.h, f, 1))


def activations(r, c: Ctx) -> Part:
    """Bytes one micro-batch keeps, and the backward working set (see the module docstring)."""
    B, T, Tn, h = c.B, c.T, c.Tn, r.h
    up = 2 if r.gated else 1
    if r.pre_norm:
        # fc1 is a LayerNormLinear: with FP8 or NVFP4 Transformer Engine quantizes the norm output inside the
        # norm kernel and saves that (TransformerEngine @ d0067d0 : module/layernorm_linear.py with_quantized_norm,
        # ln_out_to_save), not a bf16 copy, as for QKV.
        norm2_in = B * Tn * h
        norm2_out = 0 if "layernorm" in c.modules else lin_saved(c, Tn, h, gathered=True, module="mlp.linear_fc1")
    else:       # no pre-MLP norm: fc1 (a Linear) keeps the layer input, quantized with FP8 or NVFP4
        norm2_in, norm2_out = 0, lin_saved(c, Tn, h, module="mlp.linear_fc1")
    norm2 = norm2_in + norm2_out
    f = r.f // r.t
    fc1_out, act_out = act_input_saved(r, B, T * f), lin_saved(c, T, f, module="mlp.linear_fc2")
    if r.cfg.model.parallel_mamba_attention:
        # Falcon-H1's FalconH1MLP scales the gate by mlp_multipliers before the activation, in eager code: the
        # scaled gate (kept by silu) and silu's output (kept by the product) are kept as well.
        fc1_out += 2 * B * T * f
    saved = norm2 + fc1_out + act_out
    if r.post_norm:
        saved += B * Tn * h + (8 if r.norm_w == 2 else 4) * Tn
    recompute = 0
    if "mlp" in c.modules:
        recompute = saved
        saved = B * Tn * h
        fc1_out = act_out = 0
        norm2_out = 0 if r.pre_norm else norm2_out      # the input kept is the norm's input, or fc1's
    named = None
    if c.parts:
        named = {"fc1_out": fc1_out, "act_out": act_out, "mlp_norm_in": norm2_in, "mlp_norm_out": norm2_out}
    return Part(saved, recompute, B * _chunk_rows(r, c, T) * f * up + 2 * B * Tn * h, 0, named)


def _chunk_rows(r, c: Ctx, T: int) -> int:
    """Token rows of fc1's output in the largest MLP piece (module docstring): T without chunking."""
    n = r.cfg.training.mlp_chunks_for_training
    if n <= 1 or "mlp" in c.modules:
        return T
    gather = r.t if r.sp else 1
    seq = r.s // r.cp // gather                  # pre_mlp_layernorm_output.shape[0]
    return -(-seq // min(n, seq)) * gather * r.b
