"""Manifold-constrained hyper-connections (mHC, DeepSeek-V4): n residual streams around every attention and MLP.

Megatron-Core ``megatron/core/transformer/hyper_connection.py`` ``HyperConnectionModule`` (on ``main`` @ d98e8a64
and ``dev`` @ d48bd6be), used by ``transformer_layer.py`` with ``enable_hyper_connections``: one module before the
attention (``self_attention_hyper_connection``) and one before the MLP (``mlp_hyper_connection``). Each reads the n
streams x [T, n h], computes per-token weights H_pre [n], H_post [n] and H_res [n x n] (Sinkhorn-projected) from a
projection of x, feeds the sub-layer sum_j H_pre_j x_j and writes back H_res^T x + H_post * output. Symbols: h
hidden size, n = num_residual_streams, m = n^2 + 2 n mapping outputs.

Parameters of one module (two per layer, all fp32 and replicated)::

    mapping_proj   m n h          (nn.Linear, no bias; Hugging Face hc_attn_fn / hc_ffn_fn)
    bias           m              (hc_*_base)
    alpha          3              (alpha_pre, alpha_post, alpha_res; hc_*_scale)

and once after the last layer of the decoder and of each MTP layer the learned output contraction
(``transformer_block.py`` and ``multi_token_prediction.py``: hc_head_fn n x n h, hc_head_base n, hc_head_scale 1),
counted by :mod:`estimator.model.params` beside the final norm.

Activations of one module per micro-batch, in bytes (B = 2, T tokens on the rank)::

    B T n h                  the streams, one tensor its three consumers share (``BroadcastTensorFused``):
                             H_pre's aggregation and the H_res/H_post merge save it
    + 4 T n h                unfused only: the fp32 copy of the streams the projection saves (``native_proj_rms``);
                             the fused kernel (``use_fused_mhc``, ``fused_proj_rms_compute_h``) saves the bf16 streams
    + B T h                  the sub-layer's output, which the H_post merge saves (``native_h_post_bda``,
                             ``FusedHPostBDA``)
    + B T (2 n + n^2)        H_pre, H_post, H_res in the activations' dtype
    + 4 T n^2                the Sinkhorn input (fp32, ``SinkhornKnopp`` saves only it and recomputes the iterations)

So the iterations (``mhc_sinkhorn_iterations``) cost time, not memory.

Selective recompute ``mhc`` (``MHCCheckpointManager``, output-discarding checkpoints: Megatron-LM @ d48bd6be (dev) :
hyper_connection.py ``_forward_with_checkpoint``, ``_fused_h_res_h_post_bda_with_checkpoint``, transformer_layer.py)
discards the H_res/H_post merge's output, the next module's streams (- B T n h), and the aggregation's output, the
norm's input the mixer and MLP modules count (- B T h), recomputing both in the backward pass; the norm outputs go
too (its checkpoints of input_layernorm and pre_mlp_layernorm: ``layernorm``'s rule,
:mod:`estimator.memory.activations`).
Left out: the fp32 mapping logits of the unfused path (4 T m, under ``torch.compile``), the decoder's expansion of
the embedding into n streams and its output contraction (once per stage, not per layer), and with ``mhc`` the last
layer of each recompute group, whose MLP-side output is kept (one layer per chunk with the default group).
"""

from __future__ import annotations

from .base import Count, Ctx, Part

__all__ = ["activations", "head_params", "params"]


def _module(r) -> int:
    n = r.hc
    m = n * n + 2 * n
    return m * n * r.h + m + 3


def params(r) -> Count:
    """The two modules of one layer (attention side and MLP side)."""
    return Count(0, 2 * _module(r)) if r.hc else Count()


def head_params(r) -> int:
    """The output contraction after the decoder's last layer (and after each MTP layer)."""
    n = r.hc
    return n * n * r.h + n + 1 if n else 0


def activations(r, c: Ctx, fused: bool) -> Part:
    """The two modules of one layer, for one micro-batch (see the module docstring)."""
    if not r.hc:
        return Part()
    n, B, T, h = r.hc, c.B, c.Tn, r.h
    one = B * T * n * h + (0 if fused else 4 * T * n * h) + B * T * h + B * T * (2 * n + n * n) + 4 * T * n * n
    rec = 0
    if "mhc" in c.modules:
        rec = B * T * n * h + B * T * h          # the streams and the aggregation's output (the norm's input)
        one -= rec
    named = {"mhc": 2 * one} if c.parts else None
    return Part(2 * one, 2 * rec, 0, 0, named)
