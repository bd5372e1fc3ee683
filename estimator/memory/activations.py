"""Activation memory of one micro-batch, per layer, as Megatron-Core with Transformer Engine keeps it.

The accounting follows Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models" (2022), re-derived for the modules Megatron-Core actually runs (TE fused norm+linear, flash or
cuDNN fused attention, SwiGLU, MoE with token permutation, MLA, Mamba-2's fused scan, the gated delta rule).
Each part of a layer is counted by its module in :mod:`estimator.model.layers` (each docstring gives its formula),
with T = s*b/cp tokens per rank, Tn = T/t under sequence parallelism (else T), activations in bf16 (2 B);
in short, in bytes:

    attention  = 4*Tn*h + 2*T*(a + 2g)*dh/t + 2*T*a*dh/t + 4*T*a/t
                 norm input and output, q/k/v as flash attention saves them, its output, softmax statistics
    dense MLP  = 4*Tn*h + 2*T*f*(2 if gated)/t + 2*T*f/t     norm, fc1 output, activation output
    MoE        = 4*Tn*h + router + R*(2h + 2*fm*(3 if gated else 2)/etp) (+ R*2*fm/etp unless SwiGLU)
                 + shared expert like a dense MLP of width fs; R = routed rows (the experts' input, fc1 and
                 activation outputs; nothing of the experts' output); router = what the router's autograd
                 graph saves (estimator.model.layers.router: 12*Tn*k by Megatron's default, + 4*Tn*E per fp32
                 score tensor of sigmoid scores or an aux loss)
    MLA        = 4*Tn*h + 4*Tn*q_lora + 4*Tn*kv_lora + 2*T*a*(2*(qk+rope) + v)/t + 2*T*a*v/t
    DSA        = absorbed MLA with a lightning indexer: see estimator.model.layers.dsa (the reference path
                 keeps ~13 B per query x key x head; the fused kernels a copy of q and k and the top-k indices)
    Mamba-2    = 4*Tn*h + 2*T*(2di + 2gN + nh)/t + 6*T*di/t + 4*T*g/t
    gated delta net = see estimator.model.layers.gated_delta_net
    Kimi K3 (KDA, gated MLA, AttnRes aggregations) = see estimator.model.layers.kimi

A layer holds a token mixer, an MLP, or both (:class:`estimator.model.layers.LayerKind`); each part that is present
adds one bias-dropout-add mask (1 byte per residual element) when hidden_dropout > 0. Unfused attention adds
the s x s scores; FP8 saves linear-layer inputs in 1 byte, with mxfp8 and blockwise plus their column-wise scales
(1/32 B per element, padded per tensor: :mod:`estimator.model.fp8_scales` ``lin_saved``; one tensor per local routed
expert); NVFP4 saves them column-wise in 0.5 B plus an E4M3 scale per 16 elements (1/16 B), and a LayerNormLinear's
norm output under sequence parallelism row-wise too. Selective recompute drops the pieces of the modules it names; full recompute keeps only each checkpointed
group's input (2*Tn*h).

With an fp32 residual stream (``precision.fp32_residual_connection``; Megatron-LM @ d98e8a64 : the embedding's
``embeddings.float()``, ``TransformerLayer``'s ``residual.float()``, the bias-dropout-add's ``x.to(residual.dtype)``)
every layer's input and output are fp32, and Transformer Engine's norms save bf16 copies of their input
(``TELayerNormColumnParallelLinear.forward`` casts it, the RMSNorm/LayerNorm ops and ``MambaLayer`` convert it): the
same bytes as above, the fp32 input itself kept by no layer. A full-recompute checkpoint keeps the fp32 input
(4*Tn*h) and shares nothing with the bf16 copies the recomputation makes; a chunk without the embedding keeps its
received fp32 input (4*Tn*h) beside its first norm's copy (:func:`received_input_bytes`); the residual gradient of
the backward pass is fp32 (:func:`fp32_residual_backward`).
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.derived import recomputed_modules
from ..model.fp8_scales import quantized, recipe_of
from ..model.layers import MIXERS, MLPS, LayerKind, hyper_connection, kimi, view, wan
from ..model.layers.base import Ctx
from ..model.quant_recipe import KindQuant, kind_quant, mtp_quant
from ..model.resolve import Resolved
from .loss import lm_loss_buffers, loss_buffers

__all__ = ["LayerActivations", "context", "fp32_residual_backward", "held_per_layer", "hsm_bytes",
           "layer_activations", "mtp_activations", "received_input_bytes", "stage_extras", "with_quant"]


class LayerActivations(NamedTuple):
    """Activation bytes of one layer for one micro-batch."""

    attention: int       # the token mixer (attention, MLA, gated delta net, Mamba), after selective recompute
    mlp: int             # dense MLP or MoE block, after selective recompute
    full: int            # everything, as a full-recompute group rematerialises it
    checkpoint: int      # the layer input a full-recompute checkpoint keeps
    backward_peak: int   # gradient working set while this layer runs its backward
    recompute_peak: int  # what selective recompute rematerialises at once during backward
    parts: dict | None = None  # with parts=True: named saved tensors, for PEFT and offloading
    attention_backward_peak: int = 0  # unfused attention's backward working set, the layer's MLP already freed
    stored: int | None = None  # what the checkpoint stores of ``checkpoint``: 1/TP of it with
    #                            distribute_saved_activations (None: all of it)
    fp32_input: bool = False   # precision.fp32_residual_connection: the layer's input is fp32, its norms copy it

    @property
    def kept_input(self) -> int:
        """Bytes a full-recompute checkpoint keeps of the layer input until the backward pass: all of it, or this
        rank's 1/TP with ``training.distribute_saved_activations`` (Megatron-LM @ d98e8a64 :
        megatron/core/tensor_parallel/random.py ``CheckpointFunction.forward`` replaces the input's data by
        ``split_tensor_into_1d_equal_chunks(..., new_buffer=True)``, numel // TP elements; ``backward`` gathers it
        back to the full input before recomputing)."""
        return self.checkpoint if self.stored is None else self.stored

    @property
    def shared_input(self) -> int:
        """Bytes of the checkpoint that the rematerialised tensors (``full``) reuse: the kept input, which the
        layer's first norm saves as it is; none with an fp32 residual stream, whose norms save bf16 copies."""
        return 0 if self.fp32_input else self.kept_input

    @property
    def saved(self) -> int:
        return self.attention + self.mlp


def _tokens(r: Resolved) -> tuple[int, int]:
    T = r.s * r.b // r.cp
    return T, (T // r.t if r.sp else T)


def _act_bytes(r: Resolved) -> int:
    return 4 if r.cfg.precision.params_dtype == "fp32" else 2


_NONE: frozenset = frozenset()


def context(r: Resolved) -> Ctx:
    """The micro-batch as every layer module sees it (:class:`estimator.model.layers.base.Ctx`)."""
    cfg, tr = r.cfg, r.cfg.training
    T, Tn = _tokens(r)
    B = _act_bytes(r)
    modules = frozenset(recomputed_modules(tr)) if tr.recompute_granularity == "selective" else _NONE
    if "mhc" in modules:
        # mHC recompute also checkpoints both norms after the hyper-connections, discarding their outputs
        # (Megatron-LM @ d48bd6be (dev) : transformer_layer.py mhc_checkpoint_input_layernorm / _pre_mlp_layernorm)
        modules = modules | {"layernorm"}
    unfused = tr.attention_backend in ("unfused", "local") or tr.transformer_impl == "local"
    # Wan's layers add their residuals without dropout (WanLayerWithAdaLN: scale_add, add_residual): no masks.
    drop = cfg.model.hidden_dropout > 0 and cfg.model.model_kind != "wan"
    return Ctx(T, Tn, B, 1 if quantized(cfg.precision) else B, modules, Tn * r.h if drop else 0,
               unfused, fp8=recipe_of(cfg.precision))


def with_quant(c: Ctx, q: KindQuant) -> Ctx:
    """The context ``c`` with a layer's per-module recipes (``precision.quant_recipe``, :mod:`estimator.model.
    quant_recipe`): its unnamed linears' recipe as ``fp8`` (and ``lin_in``), the named ones that differ in
    ``quant``."""
    if q.other != c.fp8:
        c = c._replace(fp8=q.other, lin_in=1 if q.other else c.B)
    return c._replace(quant=tuple((n, p) for n, p in q.named if p != q.other))


def layer_activations(r: Resolved, kind: LayerKind, ctx: Ctx | None = None, parts: bool = False) -> LayerActivations:
    """Activations of one decoder layer of ``kind`` for one micro-batch on one GPU: its token mixer and its MLP
    (each from its module in :mod:`estimator.model.layers`), each with its bias-dropout-add mask.

    With ``parts``, ``LayerActivations.parts`` names the saved tensors (bytes, after selective recompute) that
    PEFT and activation offloading act on (attention and MLA, dense MLP and MoE only): ``norm_in``/``norm_out``
    (the attention norm's input and output, the QKV linear's input), ``latent`` (MLA), ``qkv``, ``attn_out``
    (also the output projection's input), ``lse``, ``scores``, ``proj_in_fp8``, ``mlp_norm_in``/``mlp_norm_out``,
    ``fc1_out``, ``act_out`` (the fc2 input), ``router``, ``permute_map``, ``expert_in``, ``expert_fc1_out``, ``expert_act_out``,
    ``shared``, and what expert-parallel overlap's schedule nodes keep of an MoE layer: ``shared_out`` (the shared
    experts' output) and ``dispatched`` (the dispatched tokens, one local expert)."""
    c = ctx or context(r)
    if parts and not c.parts:
        c = c._replace(parts=True)
    if c.quant is None:
        c = with_quant(c, kind_quant(r, kind))
    r = view(r, kind)
    a = MIXERS[kind.mixer].activations(r, c) if kind.mixer else None
    m = MLPS[kind.mlp].activations(r, c) if kind.mlp else None
    attn = a.saved + c.mask if a else 0
    mlp = m.saved + c.mask if m else 0
    hc = hyper_connection.activations(r, c, r.cfg.model.use_fused_mhc)
    if hc.saved:
        # one hyper-connection module before the mixer, one before the MLP (estimator/model/layers/hyper_connection.py)
        attn += hc.saved // 2
        mlp += hc.saved - hc.saved // 2
    if r.attn_res:
        # Kimi K3's AttnRes aggregations before the mixer and before the MLP (estimator/model/layers/kimi.py)
        ar_a, ar_m = kimi.attn_res_activations(r, c)
        attn += ar_a
        mlp += ar_m
    rec_a, rec_m = (a.recompute if a else 0) + hc.recompute // 2, (m.recompute if m else 0) + hc.recompute // 2
    attn_bwd = a.backward if a else 0
    if attn_bwd:
        # It runs after the layer's MLP backward freed the MLP's activations; the residual stream's gradient
        # is alive meanwhile (estimator/model/local_attention.py).
        attn_bwd += c.B * c.Tn * r.h - mlp
    named = None
    if parts:
        named = {}
        for p in (a, m, hc):
            if p is not None and p.named:
                named.update(p.named)
    fp32 = r.cfg.precision.fp32_residual_connection
    # a layer's input: n residual streams with hyper-connections; 4 B per element with an fp32 residual stream
    inp = (4 if fp32 else c.B) * c.Tn * r.h * max(r.hc, 1)
    stored = inp // r.t if r.cfg.training.distribute_saved_activations else None
    bwd = max(a.work if a else 0, m.work if m else 0)
    if fp32:
        bwd, attn_bwd = fp32_residual_backward(c, r.h, bwd), fp32_residual_backward(c, r.h, attn_bwd)
    return LayerActivations(attention=attn, mlp=mlp, full=attn + rec_a + mlp + rec_m, checkpoint=inp, stored=stored,
                            backward_peak=bwd, recompute_peak=max(rec_a, rec_m), parts=named,
                            attention_backward_peak=max(attn_bwd, 0), fp32_input=fp32)


def fp32_residual_backward(c: Ctx, h: int, work: int) -> int:
    """A part's backward working set with an fp32 residual stream (``precision.fp32_residual_connection``): the
    residual stream's gradient, alive through the part's backward, is fp32, (4 - B) Tn h more than the module's own
    count; and when the part's norm has run its backward, its bf16 input gradient (B Tn h) is cast back to fp32
    (4 Tn h, the cast ``TELayerNormColumnParallelLinear.forward`` or the norm op made) beside the residual's (4 Tn h)
    before they are added: (8 + B) Tn h at that moment. Megatron-LM @ d98e8a64 : megatron/core/transformer/
    transformer_layer.py (``residual.float()``), megatron/core/fusions/fused_bias_dropout.py (``x.to(residual.dtype)``
    before the add)."""
    if work <= 0:
        return work
    return max(work + (4 - c.B) * c.Tn * h, (8 + c.B) * c.Tn * h)


def received_input_bytes(r: Resolved, chunk) -> int:
    """Bytes of the input a model chunk of ``r.plan`` (its ``embedding`` and ``layers``) receives from the previous pipeline stage and keeps per micro-batch until its backward, beyond what its
    layers count: with an fp32 residual stream the received fp32 tensor (4 Tn h; Megatron-Core sends fp32 then,
    ``TransformerConfig.pipeline_dtype``), kept by the schedule's ``input_tensors`` beside the bf16 copy its first
    norm saves. Nothing for the embedding's chunk, when the chunk's first layer is a full-recompute checkpoint (which
    keeps that very tensor: uniform groups start there, block's first ``recompute_num_layers``), or without the fp32
    stream (the first norm saves the received bf16 tensor itself)."""
    tr = r.cfg.training
    if not r.cfg.precision.fp32_residual_connection or chunk.embedding:
        return 0
    if tr.recompute_granularity == "full" and len(chunk.layers) and (
            tr.recompute_method != "block" or tr.recompute_num_layers is None or tr.recompute_num_layers > 0):
        return 0
    return 4 * _tokens(r)[1] * r.h


def mtp_activations(r: Resolved, acts, parts: bool = False) -> list:
    """The LayerActivations of one MTP layer's transformer layer(s), one per kind of ``r.mtp_kinds``: the decoder
    layers' (``acts``, by kind index), or with ``precision.quant_recipe`` their own, as the rules give MTP paths
    (``mtp.*``) their own precisions (estimator/model/quant_recipe.py). ``parts``: computed afresh with their named
    parts (for frozen MTP layers, estimator/memory/features/frozen_language.py)."""
    recipe = r.cfg.precision.quant_recipe and quantized(r.cfg.precision)
    if not (recipe or parts):
        return [acts[k] for k in r.mtp_kinds]
    c = context(r)
    return [layer_activations(r, r.kinds[k], ctx=with_quant(c, mtp_quant(r, r.kinds[k])[0]) if recipe else c,
                              parts=parts) for k in r.mtp_kinds]


class StageExtras(NamedTuple):
    """Activations outside the decoder layers for one micro-batch."""

    embedding: int       # the embedding's chunk: embedding output dropout mask
    output: int          # the loss chunk: final norm and logits of the main head
    logits_peak: int     # the loss chunk: logits the loss keeps for its backward
    mtp: int             # the MTP chunk, per MTP layer: its norms, eh_proj input, transformer layer, final norm
    mtp_logits: int      # the loss chunk, per MTP layer: its logits (process_mtp_loss runs the output layer)
    mtp_hsm: int = 0     # the MTP chunk, per MTP depth after its first: hidden-state mixing's draw (hsm_bytes)


def hsm_bytes(r: Resolved) -> int:
    """What MTP hidden-state mixing (``mtp_hsm``) keeps for the backward pass at one MTP depth after the first, for
    one micro-batch: ``9 Tn`` bytes.

    Megatron-LM @ d98e8a64 : megatron/core/transformer/multi_token_prediction.py ``MultiTokenPredictionBlock.forward``
    and ``_mix_hidden_state_history``, in training with 2+ MTP layers. At depth k >= 1 it stacks the k earlier hidden
    states (the main model's and depths 1..k-1), rolls them one token on (``roll_tensor``: ``torch.roll``, zeroed
    last slot; no saved tensor), draws one index in 0..k per local token (int64) and picks that state per token:
    ``torch.gather`` saves its index (the clamped draw, 8 B per token; the index is an expanded view of it) and
    ``torch.where`` its condition (``use_newest``, 1 B per token). The picked state replaces the previous depth's
    output as the MTP layer's input, the same size, which the MTP layer's norm saves as before. Tokens: the rank's
    Tn = s b / cp (/ t under sequence parallelism), as the MTP block's hidden states are sharded.

    Not counted: the forward transients (the stacked copy, its permuted contiguous copy and the rolled copy, 3 k x
    2 B per token and hidden element at depth k, and a k-byte-per-token "all zero" mask), freed when the MTP block's
    forward returns, before the output layer computes the logits."""
    if not (r.mtp > 1 and r.cfg.model.mtp_hsm):
        return 0
    return 9 * _tokens(r)[1]


def stage_extras(r: Resolved, mtp_layer: LayerActivations | None) -> StageExtras:
    cfg = r.cfg
    T, Tn = _tokens(r)
    B = _act_bytes(r)
    h = r.h
    drop = cfg.model.hidden_dropout > 0 and cfg.model.model_kind != "wan"     # Wan: no embedding dropout
    emb = Tn * h if drop else 0
    logits = loss_buffers(r).saved                     # what the loss keeps of the logits (estimator/memory/loss.py)
    out = 2 * B * Tn * h + logits                      # final norm input and output, logits
    mtp_logits = lm_loss_buffers(r).saved              # an MTP head's: the cross entropy alone, no distillation
    if cfg.model.model_kind == "wan":   # Wan's embedders and head instead (estimator/model/layers/wan.py)
        first, last = wan.stage_activations(r, context(r))
        return StageExtras(embedding=emb + first, output=last, logits_peak=0, mtp=0, mtp_logits=0)
    mtp = 0
    if r.mtp and mtp_layer is not None:
        # Each MTP layer: enorm/hnorm inputs and outputs, the concatenation fed to eh_proj, a transformer
        # layer, its final norm, and the embedding's dropout mask; its logits count on the loss chunk.
        mtp = 4 * B * Tn * h + 2 * B * Tn * h + mtp_layer.saved + 2 * B * Tn * h + emb
    return StageExtras(embedding=emb, output=out, logits_peak=logits, mtp=mtp, mtp_logits=mtp_logits if mtp else 0,
                       mtp_hsm=hsm_bytes(r) if mtp else 0)


def held_per_layer(tr, acts: list) -> list:
    """Bytes each decoder layer of a chunk keeps for one micro-batch until its backward pass (``acts``: the layers'
    LayerActivations, in order; ``tr``: the training section). Without full recomputation its attention and MLP
    tensors; with it, block: the checkpointed input of the first ``recompute_num_layers`` layers and everything of
    the rest; uniform: the checkpointed input of the first layer of each group of ``recompute_num_layers``."""
    if tr.recompute_granularity != "full":
        return [a.attention + a.mlp for a in acts]
    n = tr.recompute_num_layers if tr.recompute_num_layers is not None else 1
    if tr.recompute_method == "block":
        return [a.kept_input if i < n else a.attention + a.mlp for i, a in enumerate(acts)]
    n = max(n, 1)
    return [a.kept_input if i % n == 0 else 0 for i, a in enumerate(acts)]
