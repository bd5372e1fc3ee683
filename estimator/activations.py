"""Activation memory of one micro-batch, per layer, as Megatron-Core with Transformer Engine keeps it.

The accounting follows Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models" (2022), re-derived for the modules Megatron-Core actually runs (TE fused norm+linear, flash or
cuDNN fused attention, SwiGLU, MoE with token permutation, MLA). Bytes per token of one layer, with
T = s*b/cp tokens per rank, Tn = T/t under sequence parallelism (else T), activations in bf16 (2 B):

    attention  = 4*Tn*h               norm input + norm output (saved by the fused QKV linear)
               + 2*T*(a + 2g)*dh/t    q, k, v as flash attention saves them (GQA-sized k, v)
               + 2*T*a*dh/t           attention output (also the output projection's input)
               + 4*T*a/t              softmax log-sum-exp (fp32)
    dense MLP  = 4*Tn*h + 2*T*f*(2 if gated)/t + 2*T*f/t     norm, fc1 output, activation output
    MoE        = 4*Tn*h + 2*Rb*Tn*E   norm, router logits and probabilities (Rb = 2 B, or 4/8 B with
                                      moe_router_dtype fp32/fp64)
               + R*(4h + 2*fm*(3 if gated else 2)/etp)       R = routed rows: permuted input, fc1 out,
                                                             activation out, an expert-output-sized term
               + R*2*fm/etp unless SwiGLU                    activation out before the routing weights
               + shared expert like a dense MLP of width fs
    qk norms   + 2*2*T*(a + g)*dh/t + (8 or 4)*T*(a + g)/t    q/k input copies and outputs, statistics
    MLA        = 4*Tn*h + 4*Tn*q_lora + 4*Tn*kv_lora + 2*T*a*(2*(qk+rope) + v)/t + 2*T*a*v/t

Unfused attention (MHA, GQA and MLA alike) adds the s x s scores (softmax output 2 B, dropout mask 1 B
and output 2 B per element when attention_dropout > 0); hidden_dropout > 0 adds a 1-byte mask per residual element twice per layer.
FP8 saves linear-layer inputs in 1 byte. Selective recompute drops the pieces of the modules it names;
full recompute keeps only each checkpointed group's input (2*Tn*h).
"""

from __future__ import annotations

from typing import NamedTuple

from .local_attention import attention_backward_extra, local_core_attention
from .loss import loss_buffers
from .resolve import Resolved

__all__ = ["LayerActivations", "layer_activations", "stage_extras"]

#: Bytes per element of the router's logits and probabilities (Megatron-Core ``TopKRouter.gating``: the
#: activations' dtype unless ``moe_router_dtype`` says fp32 or fp64).
_ROUTER_BYTES = {"fp32": 4, "fp64": 8}


class LayerActivations(NamedTuple):
    """Activation bytes of one layer for one micro-batch."""

    attention: int       # kept for backward, after selective recompute
    mlp: int             # dense MLP or MoE block, after selective recompute
    full: int            # everything, as a full-recompute group rematerialises it
    checkpoint: int      # the layer input a full-recompute checkpoint keeps
    backward_peak: int   # gradient working set while this layer runs its backward
    recompute_peak: int  # what selective recompute rematerialises at once during backward
    parts: dict | None = None  # with parts=True: named saved tensors, for PEFT and offloading
    attention_backward_peak: int = 0  # unfused attention's backward working set, the layer's MLP already freed

    @property
    def saved(self) -> int:
        return self.attention + self.mlp


def _tokens(r: Resolved) -> tuple[int, int]:
    T = r.s * r.b // r.cp
    return T, (T // r.t if r.sp else T)


def _act_bytes(r: Resolved) -> int:
    return 4 if r.cfg.precision.params_dtype == "fp32" else 2


def layer_activations(r: Resolved, moe: bool, parts: bool = False) -> LayerActivations:
    """Activations of one decoder layer (dense or MoE) for one micro-batch on one GPU.

    With ``parts``, ``LayerActivations.parts`` names the saved tensors (bytes, after selective recompute) that
    PEFT and activation offloading act on: ``norm_in``/``norm_out`` (the attention norm's input and output,
    the QKV linear's input), ``latent`` (MLA), ``qkv``, ``attn_out`` (also the output projection's input),
    ``lse``, ``scores``, ``proj_in_fp8``, ``mlp_norm_in``/``mlp_norm_out``, ``fc1_out``, ``act_out`` (the fc2
    input), ``router``, ``expert_in``, ``expert_fc1_out``, ``expert_act_out``, ``expert_out``, ``shared``.
    """
    cfg, tr = r.cfg, r.cfg.training
    T, Tn = _tokens(r)
    t, h = r.t, r.h
    B = _act_bytes(r)
    lin_in = 1 if cfg.precision.fp8 else B         # FP8 linears save their inputs as FP8
    modules = set(tr.recompute_modules or ("core_attn",)) if tr.recompute_granularity == "selective" else set()
    drop = cfg.model.hidden_dropout > 0
    mask = Tn * h if drop else 0                   # one bias-dropout-add mask (1 B per element)

    # --- attention -----------------------------------------------------------------------------
    norm_in = B * Tn * h
    norm_out = 0 if "layernorm" in modules else lin_in * Tn * h
    norm_keep = norm_in + norm_out
    heads = r.a // t
    recompute_attn = 0
    scores = latent = 0
    unfused = tr.attention_backend in ("unfused", "local") or tr.transformer_impl == "local"
    attn_bwd = 0                                   # unfused attention's backward working set
    if r.mla:
        qk = r.qk_dim + r.rope_dim
        latent = (2 * B * Tn * r.q_lora if r.q_lora else 0) + 2 * B * Tn * r.kv_lora
        qkv = B * T * heads * (2 * qk + r.v_dim)
        out = B * T * heads * r.v_dim
        if "mla_up_proj" in modules:
            recompute_attn = qkv
            qkv = 0
        attn = norm_keep + latent + qkv + out + 4 * T * heads
        if unfused:
            # Megatron's own DotProductAttention: the softmax output (and dropout mask and output) per head,
            # s x s per sequence; q and k are already per head, so nothing is expanded.
            sc = _scores(r, heads)
            if "core_attn" in modules:
                recompute_attn += sc
            else:
                attn += sc
                scores = sc
            attn_bwd = _attention_backward(r, B, sc) + B * T * heads * r.v_dim
    else:
        dh, g = r.dh, r.g
        qkv = B * T * (heads + 2 * (g // t)) * dh
        out = B * T * heads * dh
        attn = norm_keep + qkv + out + 4 * T * heads
        if cfg.model.qk_layernorm:
            # Per-head norms of q and k (Transformer Engine's norm op): each saves a contiguous copy of its
            # input (the q/k slices of the fused QKV output are strided) and produces a new output, plus
            # fp32 statistics per row (mean and rstd for LayerNorm, rstd for RMSNorm).
            rows = T * (heads + g // t)
            attn += 2 * B * rows * dh + (8 if r.norm_w == 2 else 4) * rows
        if unfused and tr.transformer_impl == "local":
            # Megatron's own DotProductAttention (estimator/local_attention.py): q, k, v as it keeps them
            # (views of the QKV output keep all of it), replacing the generic count above.
            sc = _scores(r, heads)
            rotary = cfg.model.position_embedding_type in ("rope", "yarn", "mrope")
            la = local_core_attention(r, B, sc, rotary or cfg.model.qk_layernorm)
            attn -= qkv
            if "core_attn" in modules:
                attn += la.checkpoint
                recompute_attn = la.recomputed
            else:
                attn += la.kept
                scores = sc
            attn_bwd = la.backward_extra + B * T * heads * dh
        elif unfused:
            sc = _scores(r, heads)
            # Unfused attention also keeps K and V expanded to all heads for the two batched matmuls.
            expanded = 2 * B * T * (heads - g // t) * dh
            if "core_attn" in modules:
                recompute_attn = sc + expanded
            else:
                attn += sc + expanded
                scores = sc + expanded
            attn_bwd = _attention_backward(r, B, sc) + B * T * heads * dh
    proj_fp8 = 0
    if cfg.precision.fp8:
        proj_fp8 = T * heads * (r.v_dim if r.mla else r.dh)  # FP8 copy of the projection input
        attn += proj_fp8
    cp_type = cfg.parallelism.cp_comm_type
    if r.cp > 1 and cp_type in ("a2a", "a2a+p2p"):
        attn += B * T * heads * (r.v_dim if r.mla else r.dh)       # output before and after the all-to-all
    elif r.cp > 1 and cp_type == "allgather" and not r.mla:
        attn += 2 * B * T * (r.cp - 1) * (r.g // t) * r.dh       # gathered keys and values
    attn += mask

    # --- MLP or MoE ----------------------------------------------------------------------------
    up = 2 if r.gated else 1
    norm2_out = 0 if "layernorm" in modules else B * Tn * h
    norm2 = B * Tn * h + norm2_out
    recompute_mlp = 0
    if moe:
        rows = _routed_rows(r, T, Tn)
        fm = r.fm // r.etp
        act_out = lin_in * rows * fm
        # Megatron-Core applies the routing probabilities inside the experts (experts.py bias_act_func): in
        # one fused kernel for SwiGLU (weighted_bias_swiglu_impl, which saves only its input), otherwise as
        # act(x) * probs, which keeps the unweighted activation output for the probabilities' gradient.
        # The last term, one expert-output-sized tensor, was "the expert output kept for the unpermute"; since
        # the probabilities moved into the experts unpermute keeps none (moe_utils.unpermute), yet the
        # measured runs (SimuMax DeepSeek, Megatron-LM CI MoE tests) need that much: kept, not yet attributed.
        weighted = 0 if (r.gated and cfg.model.activation_func == "swiglu") else B * rows * fm
        e_in, e_fc1, e_out = lin_in * rows * h, B * rows * fm * up, B * rows * h
        act_out += weighted
        experts = e_in + e_fc1 + act_out + e_out
        if "moe_act" in modules:
            experts -= act_out
            recompute_mlp = act_out
            act_out = 0
        shared = 0
        if r.fs:
            fs = r.fs // t
            shared = B * T * fs * up + lin_in * T * fs
            if "shared_experts" in modules:
                recompute_mlp += shared
                shared = 0
        router = 2 * _ROUTER_BYTES.get(cfg.model.moe_router_dtype, B) * Tn * r.E   # logits + probabilities
        mlp = norm2 + router + experts + shared
        if "moe" in modules:
            recompute_mlp = mlp
            mlp = B * Tn * h
            norm2_out = router = e_in = e_fc1 = act_out = e_out = shared = 0
        work = B * rows * fm * up + B * rows * h
        named = {"router": router, "expert_in": e_in, "expert_fc1_out": e_fc1, "expert_act_out": act_out,
                 "expert_out": e_out, "shared": shared} if parts else None
    else:
        f = r.f // t
        fc1_out, act_out = B * T * f * up, lin_in * T * f
        mlp = norm2 + fc1_out + act_out
        if "mlp" in modules:
            recompute_mlp = mlp
            mlp = B * Tn * h
            norm2_out = fc1_out = act_out = 0
        work = B * T * f * up + 2 * B * Tn * h
        named = {"fc1_out": fc1_out, "act_out": act_out} if parts else None
    mlp += mask
    full = attn + recompute_attn + mlp + recompute_mlp
    if attn_bwd:
        # It runs after the layer's MLP backward freed the MLP's activations; the residual stream's gradient
        # is alive meanwhile (estimator/local_attention.py).
        attn_bwd += B * Tn * h - mlp
    if parts:
        named.update(norm_in=norm_in, norm_out=norm_out, latent=latent, qkv=qkv, attn_out=out, lse=4 * T * heads,
                     scores=scores, proj_in_fp8=proj_fp8, mlp_norm_in=B * Tn * h, mlp_norm_out=norm2_out)
    return LayerActivations(attention=attn, mlp=mlp, full=full, checkpoint=B * Tn * h, backward_peak=work,
                            recompute_peak=max(recompute_attn, recompute_mlp), parts=named,
                            attention_backward_peak=max(attn_bwd, 0))


def _scores(r: Resolved, heads: int) -> int:
    """Unfused attention's s x s tensors kept for the backward pass: softmax output (B bytes), and with
    attention dropout its 1-byte mask and B-byte output, for ``heads`` heads of b sequences."""
    B = _act_bytes(r)
    per = B + ((1 + B) if r.cfg.model.attention_dropout > 0 else 0)
    return per * r.b * heads * r.s * r.s


def _attention_backward(r: Resolved, B: int, scores: int) -> int:
    """Unfused attention's backward working set above what it keeps: the local implementation's
    (estimator/local_attention.py); Transformer Engine's unfused attention masks inside its fused softmax
    kernel, so there it is the probabilities' gradient, one score tensor."""
    if r.cfg.training.transformer_impl == "local":
        return attention_backward_extra(r, B, scores)
    return B * r.b * (r.a // r.t) * r.s * r.s


def _routed_rows(r: Resolved, T: int, Tn: int) -> int:
    """Token rows the local experts process for one micro-batch (balanced routing).

    Each of the Tn local tokens is sent to k experts; balanced over the expert-parallel group, a rank's
    experts receive Tn*k rows, and expert tensor parallelism gathers the rows of its etp ranks. A capacity
    factor c caps each expert at c times its share (and padding fills it up to that)."""
    tokens = Tn if r.sp else T
    rows = tokens * r.k * (r.etp if (r.sp and r.etp > 1) else 1)
    c = r.cfg.model.moe_expert_capacity_factor
    if c is not None:
        rows = int(rows * c) if r.cfg.model.moe_pad_expert_input_to_capacity else int(rows * min(c, 1.0))
    return rows


class StageExtras(NamedTuple):
    """Activations outside the decoder layers for one micro-batch."""

    embedding: int       # the embedding's chunk: embedding output dropout mask
    output: int          # the loss chunk: final norm and logits of the main head
    logits_peak: int     # the loss chunk: logits the loss keeps for its backward
    mtp: int             # the MTP chunk, per MTP layer: its norms, eh_proj input, transformer layer, final norm
    mtp_logits: int      # the loss chunk, per MTP layer: its logits (process_mtp_loss runs the output layer)


def stage_extras(r: Resolved, mtp_layer: LayerActivations | None) -> StageExtras:
    cfg = r.cfg
    T, Tn = _tokens(r)
    B = _act_bytes(r)
    h = r.h
    drop = cfg.model.hidden_dropout > 0
    emb = Tn * h if drop else 0
    logits = loss_buffers(r).saved                     # what the loss keeps of the logits (estimator/loss.py)
    out = 2 * B * Tn * h + logits                      # final norm input and output, logits
    mtp = 0
    if r.mtp and mtp_layer is not None:
        # Each MTP layer: enorm/hnorm inputs and outputs, the concatenation fed to eh_proj, a transformer
        # layer, its final norm, and the embedding's dropout mask; its logits count on the loss chunk.
        mtp = 4 * B * Tn * h + 2 * B * Tn * h + mtp_layer.saved + 2 * B * Tn * h + emb
    return StageExtras(embedding=emb, output=out, logits_peak=logits, mtp=mtp, mtp_logits=logits if mtp else 0)
