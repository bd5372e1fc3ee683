"""Manifold-constrained hyper-connections (mHC, DeepSeek-V4): n residual streams around every attention and MLP.

Megatron-Core ``megatron/core/transformer/hyper_connection.py`` ``HyperConnectionModule`` as the ``dev`` branch
builds it (Megatron-LM @ d48bd6be, where Megatron-Bridge's DeepSeek-V4 runs), used by ``transformer_layer.py`` with
``enable_hyper_connections``: one module before the
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

With hidden dropout the bias-dropout-add after the H_post merge runs on the n-stream sum (dev's
``_fused_h_res_h_post_bda_native`` falls back to ``get_bias_dropout_add`` on [s, b, n h]; main's does the same), so
its mask is n h bytes per token, not h: ``+ (n - 1) Tn h`` per module over the layer's own mask.

Selective recompute ``mhc`` (``MHCCheckpointManager``, output-discarding checkpoints: Megatron-LM @ d48bd6be (dev) :
hyper_connection.py ``_forward_with_checkpoint``, ``_fused_h_res_h_post_bda_with_checkpoint``, transformer_layer.py)
discards the H_res/H_post merge's output, the next module's streams (- B T n h), and the aggregation's output, the
norm's input the mixer and MLP modules count (- B T h), recomputing both in the backward pass; the norm outputs go
too (its checkpoints of input_layernorm and pre_mlp_layernorm: ``layernorm``'s rule,
:mod:`estimator.memory.activations`), and so does the merge's dropout mask (the bias-dropout-add runs inside the
checkpoint). The checkpoints share one manager per recompute group (``MHCCheckpointManager``; groups of
``mhc_recompute_layer_num`` layers of the chunk's transformer block, one group by default: transformer_block.py
``_build_mhc_recompute_layer_plan``), and the group's last layer leaves its MLP-side merge unchecked, registering a
hook on its output that replays every checkpoint of the group at once
(``discard_all_outputs_and_register_unified_recompute``; dev's ``MHCRecomputePhase`` admits every checkpoint at
``BEFORE_COMBINE_BWD``). So per chunk of L
layers with groups of k (:func:`recompute_groups`)::

    kept  = ceil(L / k) (B T n h + n mask)     each group's input streams (the embedding's expansion, the previous
                                               group's last output), and its last merge's dropout mask
    work  = min(k, L) x 2 (B T n h + 2 B T h + n mask)
                                               what the replay restores at once when the group's backward starts:
                                               per module the streams, the aggregation's and the norm's outputs,
                                               and the dropout mask the replayed merge saves again

Left out: the fp32 mapping logits of the unfused path (4 T m, under ``torch.compile``), the decoder's output
contraction (once per stage, not per layer), and the other modules' rematerialisation (core_attn, moe_act) of the
first layer to run its backward inside a replayed group.

Megatron-LM ``main`` @ d98e8a64 has its own ``HyperConnectionModule`` (bf16 parameters under ``Float16Module``, the
projection, aggregation and merges under ``torch.compile``, the streams averaged at the decoder's end with no
parameters), but its ``pretrain_gpt.py`` cannot build it: no layer spec in ``megatron/core/models`` builds
``HyperConnectionTransformerLayer``, and ``TransformerLayer`` raises ``ValueError`` with ``enable_mhc_connections``.
So ``--enable-mhc-connections`` stays refused (:mod:`estimator.formats.megatron_flag_classes`).
"""

from __future__ import annotations

from .base import Count, Ctx, Part

__all__ = ["activations", "head_params", "params", "recompute_groups"]


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
    # the merge's dropout mask is n h wide (the layer counts h of it), or inside the mhc checkpoint (none kept)
    mask = -c.mask if "mhc" in c.modules else (n - 1) * c.mask
    return Part(2 * (one + mask), 2 * rec, 0, 0, named)


def recompute_groups(r, c: Ctx, layers: int) -> tuple[int, int]:
    """(kept, work) bytes of a chunk of ``layers`` decoder layers under ``mhc`` recompute, for one micro-batch: the
    streams each recompute group keeps at its start (and its last merge's dropout mask), and what the group's replay
    restores at once when its backward pass starts (the module docstring). (0, 0) without mhc recompute."""
    if not (r.hc and layers and "mhc" in c.modules):
        return 0, 0
    n, B, T, h = r.hc, c.B, c.Tn, r.h
    k = min(r.cfg.training.mhc_recompute_layer_num or layers, layers)
    groups = -(-layers // k)
    kept = groups * (B * T * n * h + n * c.mask)
    work = k * 2 * (B * T * n * h + 2 * B * T * h + n * c.mask)
    return kept, work
