"""Kimi K3's layers as Megatron-Bridge builds them: Kimi delta attention (KDA), the gated no-RoPE MLA, and the
attention-residual (AttnRes) banks every layer aggregates.

NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/models/kimi/kimi_k3_layers.py (``KimiK3Attention``
picks KDA or MLA by the 1-based layer number in ``kimi_kda_layers``; ``KimiK3TransformerLayer`` the AttnRes
bank), kimi_k3_ops.py (``kda`` calls fla's ``chunk_kda``; ``KimiRMSNorm``; ``attn_res_aggregate``) and
kimi_k3_spec.py (input and pre-MLP norms are ``TENorm``). fla is read at fla-org/flash-linear-attention @ bc3b101d :
fla/ops/kda/chunk.py, chunk_fwd.py, fla/modules/conv/triton/ops.py, fla/modules/fused_norm_gate.py. Symbols: h hidden
size, n KDA heads and d their width (linear_num_key_heads, linear_key_head_dim), P = n d, K the convolution width,
a / q_lora / kv_lora / qk / rope / v the MLA shape, nw weights per norm element, t tensor-parallel size (n' = n / t,
P' = P / t, a' = a / t).

Parameters (``KimiK3Attention._init_kda`` / ``_init_mla``; the layer's input ``TENorm`` is counted here)::

    KDA  q, k, v, g   4 h P      column-parallel          MLA  as multi-latent attention (:mod:`.mla`)
         conv1d       3 P K      q/k/v short convolutions      g_proj  h a v   column-parallel output gate
         f_a, f_b     h d + d P  f_a replicated ("duplicated")  (q/kv down-projections replicated)
         b_proj       h n        beta                          input norm nw h
         A_log, dt_bias  n + P   (fp32, split over TP)
         o_norm       d          gated RMSNorm over one head (replicated)
         o_proj       P h        row-parallel
         input norm   nw h
    AttnRes, every layer: two KimiRMSNorm weights and two h -> 1 score projections, 4 h (replicated); the last layer
    also its output aggregation, 2 h (counted with the final norm).

The convolution weights, A_log and dt_bias (3 P K + n + P per KDA layer, 159,840 in Kimi K3) stay fp32 under the
bf16 wrapper (``_keep_in_float32_parameter_names``, model_provider.py): their weights are counted at the model's
parameter width, 2 B short each (22 MB over Kimi K3's 69 KDA layers, before the TP split).

Activations per micro-batch on one GPU, in bytes (T tokens per rank; the attention gathers the sequence-parallel
input and runs on all T tokens; Tn = T / t under sequence parallelism; B bytes per element)::

    KDA  B Tn h + 4 Tn            input TENorm: its input and rstd
         + B T h                  the (gathered) norm output every projection saves
         + 3 B T P'               q/k/v projection outputs (the short convolutions save their input)
         + B T d                  f_a output (f_b's input)
         + 2 B T P' + 8 T n'      chunk_kda: l2-normed q and k and their fp32 rstd
         + B T P' + B T P'        v (convolution output) and the raw forget gate g (the gate runs in the kernel)
         + 4 T n'                 beta, the fp32 sigmoid of b_proj
         + 2 B T n' 64            the intra-chunk Aqk and Akk (chunks of 64, bf16)
         + 2 B T P' + 4 T n'      FusedRMSNormGated: kda output, gate, fp32 rstd per head row
         + B T P'                 the gated output, o_proj's input
    MLA  B Tn h + 4 Tn + B T h    input TENorm, the gathered input of q_a, kv_a and g_proj
         + (4 + 2 B) T q_lora + 4 T   KimiRMSNorm on q: fp32 copy of its input, rstd, normalised tensor, output
         + (4 + 2 B) T kv_lora + 4 T  the same on the kv latent
         + B T a' (2 (qk + rope) + v) + B T a' v + 4 T a'   q, k, v, output, log-sum-exp of fused attention
         + 2 B T a' v             sigmoid(g_proj) and the gated output (o_proj's input)
    AttnRes aggregation of R rows (the bank and the running prefix): 8 R Tn h + 8 R Tn + 12 h; ``rows.float()`` is
         kept for the square and the weighted sum, the normalised rows for the score product (both fp32), the
         rsqrt and softmax outputs per row (fp32), and the fp32 score weight with the two fp32 weight copies
         whose product it is.

``chunk_kda`` runs with fla's default ``disable_recompute=False`` and ``use_gate_in_kernel=True``: w, u, qg, kg,
v_new, the chunk states and the gate's cumulative sum are dropped after the forward pass and recomputed in the
backward pass, whose working set is the fp32 gate cumsum, those five P'-wide tensors, the states and their gradients
2 B b ceil(s / 64) n' d d, and the four input gradients (fla/ops/kda/chunk_bwd.py ``chunk_kda_bwd``; the chunk-local
gradients dAqk and dAkk, T n' 64 elements each, whose dtype was not traced, are left out). The MLP input's
aggregation feeds the pre-MLP TENorm, which the MLP module counts (its input and output).
"""

from __future__ import annotations

from . import mla
from .base import Count, Ctx, Part

__all__ = ["CHUNK", "KDA", "MLA", "attn_res_activations", "attn_res_params", "attn_res_rows", "boundary_bytes",
           "output_attn_res_params"]

#: fla's chunk_kda chunk length (chunk_size=64 in ChunkKDAFunction.forward).
CHUNK = 64


def _kda(r) -> tuple[int, int, int, int]:
    """(n heads, d head width, P = n d, K convolution width)."""
    n, d = r.kda.key_heads, r.kda.key_dim
    return n, d, n * d, r.kda.conv


class _KDA:
    """Kimi delta attention: the layers ``linear_attention_freq`` marks (``experimental_attention_variant: kda``)."""

    @staticmethod
    def params(r) -> Count:
        n, d, P, K = _kda(r)
        h = r.h
        sharded = 4 * h * P + 3 * P * K + d * P + h * n + n + P + P * h
        return Count(sharded, h * d + d + r.norm_w * h)

    def components(self, r) -> dict:
        n = r.norm_w * r.h + r.kda.key_dim
        return {"linear_attention": self.params(r).total - n, "norms": n}

    @staticmethod
    def linear_weights(r) -> int:
        return sum(o * i * c for o, i, c in _KDA.linear_shapes(r))

    @staticmethod
    def linear_shapes(r) -> tuple:
        """q, k, v, g (P' x h), f_a (d x h, replicated), f_b (P' x d), b_proj (n' x h), o_proj (h x P')."""
        n, d, P, _ = _kda(r)
        t, h = r.t, r.h
        return ((P // t, h, 4), (d, h, 1), (P // t, d, 1), (n // t, h, 1), (h, P // t, 1))

    def weight_shapes(self, r) -> set:
        return {(o, i) for o, i, _ in self.linear_shapes(r)}

    @staticmethod
    def activations(r, c: Ctx) -> Part:
        n, d, P, _ = _kda(r)
        B, T, Tn, h, t = c.B, c.T, c.Tn, r.h, r.t
        Pt, nt = P // t, n // t
        named = {"norm_in": B * Tn * h + 4 * Tn, "norm_out": B * T * h, "qkv_proj": 3 * B * T * Pt,
                 "f_a": B * T * d, "chunk_kda": 4 * B * T * Pt + 12 * T * nt + 2 * B * T * nt * CHUNK,
                 "gated_norm": 2 * B * T * Pt + 4 * T * nt, "attn_out": B * T * Pt}
        saved = sum(named.values())
        chunks = -(-r.s // CHUNK)
        work = 4 * T * Pt + 9 * B * T * Pt + 2 * B * r.b * chunks * nt * d * d
        return Part(saved, 0, work, 0, named if c.parts else None)


class _MLA:
    """Kimi K3's no-RoPE multi-latent attention with a sigmoid output gate (the other layers)."""

    @staticmethod
    def params(r) -> Count:
        return mla.params(r) + Count(r.h * r.a * r.v_dim, 0)

    def components(self, r) -> dict:
        n = mla.norms(r)
        return {"attention": self.params(r).total - n, "norms": n}

    @staticmethod
    def linear_weights(r) -> int:
        return mla.linear_weights(r) + r.h * r.a * r.v_dim // r.t

    @staticmethod
    def linear_shapes(r) -> tuple:
        return mla.linear_shapes(r) + ((r.a // r.t * r.v_dim, r.h, 1),)

    def weight_shapes(self, r) -> set:
        return {(o, i) for o, i, _ in self.linear_shapes(r)}

    @staticmethod
    def activations(r, c: Ctx) -> Part:
        B, T, Tn, h = c.B, c.T, c.Tn, r.h
        at = r.a // r.t
        per = 4 + 2 * B       # KimiRMSNorm: fp32 copy of the input, bf16 normalised tensor and output
        latent = (per * T * r.q_lora + 4 * T if r.q_lora else 0) + per * T * r.kv_lora + 4 * T
        qkv = B * T * at * (2 * (r.qk_dim + r.rope_dim) + r.v_dim)
        named = {"norm_in": B * Tn * h + 4 * Tn, "norm_out": B * T * h, "latent": latent, "qkv": qkv,
                 "attn_out": B * T * at * r.v_dim, "lse": 4 * T * at, "gate": 2 * B * T * at * r.v_dim}
        return Part(sum(named.values()), 0, 0, 0, named if c.parts else None)


KDA = _KDA()
MLA = _MLA()


def attn_res_params(r) -> Count:
    """One layer's AttnRes modules: self_attention_res_norm and _proj, mlp_res_norm and _proj (4 h, replicated)."""
    return Count(0, 4 * r.h) if r.attn_res else Count()


def output_attn_res_params(r) -> Count:
    """The last layer's output_attn_res_norm and _proj (2 h, replicated), which sit beside the final norm."""
    return Count(0, 2 * r.h) if r.attn_res else Count()


def attn_res_rows(L: int, S: int) -> tuple:
    """Rows each layer's aggregations read, per decoder layer: (before attention, before the MLP, output), 0 for
    none. Layer i (0-based) finds ceil(i / S) snapshots in the bank (kimi_k3_pipeline.py ``bank_num_rows``) and
    aggregates them with the running prefix (one more row); layer 0 has an empty bank and normalises its input
    directly. A layer with i % S == 0 appends its input to the bank before the MLP's aggregation. The last layer
    aggregates once more for the output."""
    out = []
    for i in range(L):
        n = -(-i // S)
        attn = n + 1 if n else 0
        n_after = n + (1 if i % S == 0 else 0)
        out.append((attn, n_after + 1, n_after + 1 if i == L - 1 else 0))
    return tuple(out)


def _aggregate(Tn: int, h: int, rows: int) -> int:
    return 8 * rows * Tn * h + 8 * rows * Tn + 12 * h if rows else 0


def attn_res_activations(r, c: Ctx) -> tuple[int, int]:
    """(before attention, before the MLP and for the output) bytes one layer's AttnRes aggregations keep for one
    micro-batch (module docstring); the layer's rows are its kind's ``ar`` override."""
    if not r.attn_res:
        return 0, 0
    a, m, o = r.ar
    return _aggregate(c.Tn, r.h, a), _aggregate(c.Tn, r.h, m) + _aggregate(c.Tn, r.h, o)


def boundary_bytes(r, layer: int, c: Ctx) -> int:
    """Bytes of the stage-boundary tensor a pipeline stage whose first decoder layer is ``layer`` (0-based, > 0)
    receives, which the pipeline schedule keeps for the backward pass of each micro-batch in flight: the running
    prefix and the ceil(layer / S) snapshots of the AttnRes bank packed side by side, (1 + ceil(layer / S)) B Tn h
    (kimi_k3_pipeline.py ``pack_stage_boundary``, ``bank_num_rows``). The first layer unpacks it into copies that
    only feed its aggregations, whose fp32 rows are counted there. In a model without AttnRes the received tensor is
    the first layer's norm input, counted with the layer."""
    if not r.attn_res or layer <= 0:
        return 0
    return (1 + -(-layer // r.attn_res)) * c.B * c.Tn * r.h
