"""Wan: the video diffusion transformer Megatron-Bridge trains, its layers, embedders and head.

Megatron-Bridge @ 067f987d : src/megatron/bridge/diffusion/models/wan/ builds ``WanModel`` (``wan_model.py``) from
``WanModelProvider`` (``wan_provider.py``, a Megatron-Core ``TransformerConfig``) with the layer spec of
``wan_layer_spec.py``: a Megatron-Core ``TransformerBlock`` of ``WanLayerWithAdaLN`` layers, each

- adaLN modulation: one learned ``modulation`` (6 h) added to the timestep embedding gives shift, scale and gate
  for the self-attention and for the MLP;
- self-attention (``DiTSelfAttention``, ``common/dit_attention.py``): a LayerNorm without weights (``norm1``),
  modulated, then Megatron-Core's ``SelfAttention`` with biases, RMSNorm q/k norms over all heads
  (``layernorm_across_heads``: the heads are gathered over the tensor-parallel group for the norm and scattered
  back), 3D rotary positions, Transformer Engine's flash attention, the output gated into the residual stream;
- cross-attention (``DiTCrossAttention``) to the text: a LayerNorm with weight and bias (``norm3``), a query
  projection of the video tokens, a key/value projection of the text embeddings (``crossattn_emb_size`` wide), the
  same q/k norms, no rotary positions, the output added to the residual stream;
- the MLP: a weightless LayerNorm (``norm2``), modulated, fc1 and fc2 with biases and GELU between, gated in.

Outside the layers (``wan_model.py``): the patch embedding (a Conv3d over patches of ``patch_temporal`` x
``patch_spatial``^2 latent pixels, the first pipeline stage's), the text embedder (Linear, tanh-GELU, Linear, from the
precomputed umT5 embeddings), the timestep embedder (diffusers' ``TimestepEmbedding``: two Linears) and the
projection to the six modulations (SiLU, Linear h -> 6 h), and the head (a weightless LayerNorm, its own
``modulation`` 2 h, a Linear to the patch's latent pixels). These are plain PyTorch modules, whole on every
tensor-parallel rank. The text encoder (umT5) and the VAE are not on the training GPU: Bridge's Wan data
(``diffusion/data/wan/``) carries the VAE latents and the text embeddings precomputed, and the flow-matching step
(``flow_matching/flow_matching_pipeline_wan.py``) only adds noise to the latents and takes a mean squared error on
the head's output. Symbols: h hidden size, a heads, g key/value heads (a: Wan has no GQA), dh = h / a, f
ffn_hidden_size, C crossattn_emb_size, D the text embeddings' width (umT5: 4096), c_in / c_out latent channels,
P = patch_temporal x patch_spatial^2, F freq_dim, t tensor-parallel size.

Parameters::

    self-attention   QKV h (a + 2g) dh + (a + 2g) dh bias, output a dh h (sharded) + h bias,
                     q/k norms a dh + g dh (replicated)
    cross-attention  Q h a dh + a dh bias, KV C 2 g dh + 2 g dh bias, output a dh h (sharded) + h bias,
                     q/k norms a dh + g dh, norm3 2 h (replicated)
    modulation       6 h (replicated)
    MLP              fc1 h f + f, fc2 f h (sharded) + h bias (replicated); norm1 and norm2 have no weights
    per layer        8 h^2 + 2 h f + f + 21 h with a = g, C = h
    embedders        patch c_in P h + h; text D C + C + C^2 + C; timestep F h + h + h^2 + h; modulations 6 h^2 + 6 h
    head             h c_out P + c_out P + 2 h

Wan2.1-T2V-1.3B (h 1536, f 8960, 30 layers) has 1,418,996,800 parameters and Wan2.1-T2V-14B (h 5120, f 13824,
40 layers) 14,288,491,584, as the Hugging Face checkpoints hold them (tests/model/layers/test_wan.py writes both out).

Activations per micro-batch on one GPU, in bytes: T = s b / cp latent tokens per rank (the sequence is split over
the context-parallel ranks, padded to a multiple of 2 cp by Bridge's task encoder), Tn = T / t under sequence
parallelism, Tk = text tokens b / cp (the text is split over the context-parallel ranks too), Tkv = Tk t under
sequence parallelism (the key/value projection is a Transformer Engine column-parallel linear, which all-gathers its
input over the tensor-parallel group; the text embeddings are not scattered first, so every rank projects t copies),
else Tk; B bytes per element. ``normalize_modulate`` and ``scale_add`` are Megatron-Core's ``jit_fuser``
(``torch.compile`` with PyTorch >= 2.2, Megatron-LM @ d98e8a64 : megatron/core/jit.py), whose partition keeps the
norm's input and statistics and recomputes the norm and the modulation in the backward pass::

    attention part (self + cross):
      B Tn h + 8 Tn         layer input (norm1's input) and its fp32 mean and rstd
      + B Tn h              the modulated norm output, the QKV linear's input
      + B T (a + 2g) dh / t the QKV output (flash attention's v is a view of it)
      + B T (a + g) dh + 8 T q/k norm inputs over all heads (gathered over TP) and their fp32 rstd
      + B T (a + g) dh / t  q and k after rotary positions, as flash attention saves them
      + B T a dh / t + 4 T a / t    attention output (the output projection's input) and its log-sum-exp
      + B Tn h              the projection's output with its bias, kept by the gated residual add
      + 2 B Tn h + 8 Tn     norm3's input, statistics and output (the query projection's input)
      + B T a dh + 4 T + B T a dh / t   the query norm's input over all heads, its rstd, the normalised query
      + B Tkv 2 g dh / t + B Tkv g dh + 4 Tkv + B Tkv g dh / t
                            the key/value output (v a view of it), the key norm's input and rstd, the normalised key
      + B T a dh / t + 4 T a / t    cross-attention output and its log-sum-exp
    MLP part:
      B Tn h + 8 Tn + B Tn h        norm2's input and statistics, the modulated output (fc1's input)
      + 2 B T f / t         fc1's output (the fused bias-GELU's input) and GELU's output (fc2's input)
      + B Tn h              fc2's output with its bias, kept by the gated residual add

Once per micro-batch (the first stage): the patch embedding's input, B T c_in P; the text embedder's input and its
GELU's input and output, B Tk (D + 2 C); the text embeddings every layer's key/value projection keeps, B Tk C; and
the 3D rotary angles every self-attention's rotary embedding keeps, fp32 over the whole sequence (``rope_utils.py``
``Wan3DRopeEmbeddings`` builds them from the unsplit cu_seqlens; Transformer Engine's fused rotary embedding picks
each context-parallel rank's part), 4 s b dh.
On the last stage the head keeps the decoder's output, the norm's statistics and output and the modulated output
(3 B Tn h + 8 Tn), and its output B T c_out P (gathered under sequence parallelism); the flow-matching loss works
on c_out P = 64 values per token (fp32 MSE), about 1 / 24 of one h-wide tensor for Wan 1.3B, not counted. The
timestep embeddings (b x 7 h) are not counted either.

Full recompute keeps each checkpointed group's input (B Tn h). Selective recompute, FP8 / NVFP4, context
parallelism other than p2p, pipeline parallelism and the GPT-only recipe features are refused for Wan
(:mod:`estimator.config.rules.wan`).
"""

from __future__ import annotations

from .base import Count, Ctx, Part

__all__ = ["ATTENTION", "MLP", "embedder_params", "head_params", "latent_tokens", "model_params", "stage_activations",
           "text_tokens"]


def _dims(r) -> tuple[int, int, int, int]:
    """(query width a dh, key/value width g dh, C, f) of one Wan layer."""
    m = r.cfg.model
    return r.a * r.dh, r.g * r.dh, m.wan_crossattn_emb_size or r.h, r.f


def latent_tokens(m, seq_length: int, cp: int) -> int:
    """Latent video tokens of one sample: the wan_latent_* grid in patches (else ``seq_length``), padded to a
    multiple of 2 cp when cp > 1 (Megatron-Bridge @ 067f987d : src/megatron/bridge/diffusion/data/wan/
    wan_taskencoder.py ``encode_sample``: Transformer Engine's context parallelism needs each rank's share even)."""
    if m.wan_latent_frames and m.wan_latent_height and m.wan_latent_width:
        s = ((m.wan_latent_frames // m.wan_patch_temporal) * (m.wan_latent_height // m.wan_patch_spatial)
             * (m.wan_latent_width // m.wan_patch_spatial))
    else:
        s = seq_length
    if cp > 1:
        s = -(-s // (2 * cp)) * 2 * cp
    return s


def text_tokens(r) -> int:
    """Text tokens (cross-attention keys and values) of one micro-batch on one context-parallel rank."""
    return -(-r.cfg.model.wan_text_tokens * r.b // r.cp)


class _Attention:
    """Self-attention, cross-attention, their norms and the layer's adaLN modulation."""

    def params(self, r) -> Count:
        q, kv, C, _ = _dims(r)
        h = r.h
        self_attn = Count(h * (q + 2 * kv) + (q + 2 * kv) + q * h, h + q + kv)
        cross = Count(h * q + q + C * 2 * kv + 2 * kv + q * h, h + q + kv + 2 * h)
        return self_attn + cross + Count(0, 6 * h)

    def components(self, r) -> dict:
        q, kv, _, _ = _dims(r)
        norms = 2 * (q + kv) + 2 * r.h + 6 * r.h        # q/k norms of both attentions, norm3, the modulation
        return {"attention": self.params(r).total - norms, "norms": norms}

    def linear_shapes(self, r) -> tuple:
        q, kv, C, _ = _dims(r)
        t = r.t
        return (((q + 2 * kv) // t, r.h, 1), (r.h, q // t, 2), (q // t, r.h, 1), (2 * kv // t, C, 1))

    def linear_weights(self, r) -> int:
        return sum(o * i * n for o, i, n in self.linear_shapes(r))

    def weight_shapes(self, r) -> set:
        return {(o, i) for o, i, _ in self.linear_shapes(r)}

    def activations(self, r, c: Ctx) -> Part:
        q, kv, _, _ = _dims(r)
        B, T, Tn, h, t = c.B, c.T, c.Tn, r.h, r.t
        Tk = text_tokens(r)
        Tkv = Tk * t if r.sp else Tk
        lse = 4 * T * r.a // t
        self_attn = (2 * B * Tn * h + 8 * Tn + B * T * (q + 2 * kv) // t + B * T * (q + kv) + 8 * T
                     + B * T * (q + kv) // t + B * T * q // t + lse + B * Tn * h)
        cross = (2 * B * Tn * h + 8 * Tn + B * T * q + 4 * T + B * T * q // t
                 + B * Tkv * 2 * kv // t + B * Tkv * kv + 4 * Tkv + B * Tkv * kv // t + B * T * q // t + lse)
        work = B * T * (q + 2 * kv) // t + 2 * B * Tn * h
        return Part(self_attn + cross, 0, work)


class _MLP:
    """The adaLN-modulated GELU MLP (norm2 has no weights)."""

    def params(self, r) -> Count:
        return Count(2 * r.h * r.f + r.f, r.h)

    def components(self, r) -> dict:
        return {"mlp": self.params(r).total}

    def linear_shapes(self, r) -> tuple:
        f = r.f // r.t
        return ((f, r.h, 1), (r.h, f, 1))

    def linear_weights(self, r) -> int:
        return 2 * r.h * (r.f // r.t)

    def weight_shapes(self, r) -> set:
        return {(o, i) for o, i, _ in self.linear_shapes(r)}

    def activations(self, r, c: Ctx) -> Part:
        B, T, Tn, h = c.B, c.T, c.Tn, r.h
        f = r.f // r.t
        saved = 3 * B * Tn * h + 8 * Tn + 2 * B * T * f
        return Part(saved, 0, B * T * f + 2 * B * Tn * h)


ATTENTION = _Attention()
MLP = _MLP()


def embedder_params(r) -> Count:
    """The patch embedding, text embedder, timestep embedder and modulation projection: all replicated."""
    m = r.cfg.model
    h, C, P = r.h, m.wan_crossattn_emb_size or r.h, m.wan_patch_temporal * m.wan_patch_spatial ** 2
    patch = m.wan_in_channels * P * h + h
    text = m.wan_text_dim * C + C + C * C + C
    time = m.wan_freq_dim * h + h + h * h + h + 6 * h * h + 6 * h
    return Count(0, patch + text + time)


def head_params(r) -> Count:
    """The head: Linear h -> c_out P with bias, and its modulation 2 h; replicated."""
    m = r.cfg.model
    out = m.wan_out_channels * m.wan_patch_temporal * m.wan_patch_spatial ** 2
    return Count(0, r.h * out + out + 2 * r.h)


def model_params(r) -> int:
    """Every parameter of the model (layers, embedders, head)."""
    return (r.L * (ATTENTION.params(r) + MLP.params(r)).total + embedder_params(r).total
            + head_params(r).total)


def stage_activations(r, c: Ctx) -> tuple[int, int]:
    """(first stage, last stage) bytes one micro-batch keeps outside the layers (see the module docstring)."""
    m = r.cfg.model
    B, T, Tn = c.B, c.T, c.Tn
    C, P = m.wan_crossattn_emb_size or r.h, m.wan_patch_temporal * m.wan_patch_spatial ** 2
    Tk = text_tokens(r)
    first = (B * T * m.wan_in_channels * P + B * Tk * (m.wan_text_dim + 2 * C) + B * Tk * C
             + 4 * r.s * r.b * r.dh)
    last = 3 * B * Tn * r.h + 8 * Tn + B * T * m.wan_out_channels * P
    return first, last
