"""Mixture of experts, with its pre-MLP norm: router, routed experts, shared expert, latent projections.

Megatron-Core ``megatron/core/transformer/moe/moe_layer.py`` ``MoELayer`` with ``router.py`` ``TopKRouter``,
``experts.py`` ``TEGroupedMLP`` and ``shared_experts.py`` ``SharedExpertMLP``; in a hybrid model the same layer
makes an ``E`` layer. Symbols: h hidden size, E routed experts, k top-k, fm expert width, fs shared-expert
width, l moe_latent_size, up = 2 for a gated activation else 1, nw weights per norm element.

Parameters::

    router     E h (fp32 weight)  + E bias with add_bias_linear (GPT-OSS)
               + E expert bias (moe_router_enable_expert_bias, an fp32 buffer counted as Hugging Face does;
                 not on hash-routed layers)
               + h shared-expert gate (moe_shared_expert_gate)
    experts    E (d fm up + fm d) + E (fm up + d) biases with add_bias_linear, d = l with latent MoE else h
    shared     h fs up + fs h (+ biases), tensor-parallel like a dense MLP
    latent     h l + l h (fc1_latent_proj, fc2_latent_proj: TELinear "duplicated", replicated over the
               tensor-parallel ranks) + l + h biases with add_bias_linear
    norm       nw h
    ERNIE-VL   a second, vision pool of width fv (moe_vision_ffn_hidden_size): its own router (E h fp32 weight
               + E expert bias) and E (d fv up + fv d) experts, split like the text experts (Megatron-Bridge @
               067f987d : src/megatron/bridge/models/ernie_vl/modeling_ernie45_vl/ernie_moe_layer.py
               ``ErnieMultiTypeMoE`` builds text_moe_layer and vision_moe_layer from copies of one config that
               differ only in moe_ffn_hidden_size; the shared experts sit outside both, once)
    Gemma 4    h router input scale + E per-expert scale (Gemma4TopKRouter) + 4 nw h norms (the shared
               expert's input norm, the routed and shared outputs' norms, the layer output's norm): the MoE
               block of Megatron-Bridge's gemma4_block_spec, which post_layernorm selects in an MoE model

The routed experts are split over expert-parallel x expert-tensor-parallel ranks (their fc2 biases over the
expert-parallel ranks only); the router, the gate, the latent projections and the norm are replicated.

Activations per micro-batch on one GPU, in bytes, with R routed rows (:func:`routed_rows`) and d = l (latent
MoE) or h::

    4 Tn h + router                    norm input and output; the router's saved tensors (:mod:`.router`: e.g.
                                       12 Tn k for Megatron's default softmax after top-k, 4 Tn E + 12 Tn k
                                       + 4 Tn for sigmoid with expert bias, + 4 Tn E (+ 4 Tn) with an aux loss)
    + R (B d + B fm up + B fm)         the experts' input, fc1 output and activation output (fm = expert width
      + R B fm                         / expert TP); the unweighted activation output unless SwiGLU (below);
                                       Kimi K3's SiTU keeps six fp32 intermediates, 24 R fm, for fc1's output
    + B T fs up / t + B T fs / t       the shared expert, like a dense MLP of width fs
      + B Tn h                         with moe_shared_expert_gate: its output, kept by ``output * gate_score``
                                       for the gate's gradient (shared_experts.py ``SharedExpertMLP.forward``)
    + B Tn l                           latent MoE: fc2_latent_proj's input (the combined latent output)
      + (4 + B) Tn l + 4 Tn            with moe_latent_norm (Kimi K3): the norm's fp32 input copy, its
                                       normalised tensor and fp32 rstd
    + B U d                            deterministic mode, unfused permutation: the unpermute's source rows
                                       (:func:`unpermute_source`: U = R with allgather, Tn k with alltoall)

What the backward pass reads of the routed part (Megatron-LM @ d98e8a64): fc1 keeps its input, the permuted
tokens (local ``ColumnParallelLinear``, Transformer Engine's ``Linear`` and ``GroupedLinear``, whose inputs
are ``torch.split`` views of the one permuted tensor: transformer_engine/pytorch/module/_split_quantization.py
``_split_quantize``); the activation keeps fc1's output; fc2 keeps its input. Megatron-Core applies the routing
probabilities inside the experts (experts.py ``bias_act_func``, mlp.py ``MLP.forward``): in one fused kernel for
SwiGLU (fusions/fused_bias_swiglu.py ``WeightedSwiGLUFunction`` saves its input and the R probabilities),
otherwise as act(x) * probs, which keeps the unweighted activation output for the probabilities' gradient.
Nothing of the experts' output is kept (outside deterministic mode, below): fc2's output is concatenated (SequentialMLP ``torch.cat``), re-sorted
(moe_utils.py ``sort_chunks_by_idxs``: split and cat), sent back (``all_to_all``, reduce-scatter) and
scattered into the token order (moe_utils.py ``unpermute``: ``scatter_add_`` keeps only its indices; Transformer
Engine's ``moe_unpermute`` without merging probabilities keeps only its row map), and none of these saves its
input; the permutation itself (``index_select``, ``moe_permute``) keeps indices only. What the dispatcher keeps
besides is per token and expert or per row (indices), not per hidden element; of it the allgather dispatcher's
saved probabilities and mask are counted with the router (:mod:`.router`). moe_act, shared_experts and moe
recompute drop their parts.

``moe_apply_probs_on_input`` (Megatron's ``--moe-apply-probs-on-input``, top-1 only; experts.py ``TEGroupedMLP`` and
``SequentialMLP``) scales the experts' input by the probabilities before fc1 and hands the activation ones: fc1 keeps
the product, the product keeps the unscaled input, ``+ B R d``, and its backward holds three such row tensors
(:func:`probs_on_input`).

Deterministic mode (``deterministic_mode``, Megatron's ``--deterministic-mode``, which calls
``torch.use_deterministic_algorithms(True)``: Megatron-LM @ d98e8a64 : megatron/training/determinism.py
``apply_determinism_to_args``) changes the unfused unpermute: moe_utils.py ``unpermute`` adds the rows back with
``index_add_`` instead of ``scatter_add_`` when ``torch.are_deterministic_algorithms_enabled()``. PyTorch's
derivative of ``index_add`` (tools/autograd/derivatives.yaml: ``source: grad.index_select(dim, index)
.expand_as(source)``) reads ``source``, so its autograd node saves the source tensor itself until the backward
pass, where ``scatter_add_``'s (``src: grad.gather(dim, index)``) saves only its index. The source is what is
unpermuted, in the activations' dtype, per micro-batch::

    + B R d                            allgather: the local experts' output rows (combine_preprocess)
    + B Tn k d                         alltoall: the rank's own tokens' k routed copies, back from the
                                       all-to-all (combine_postprocess); capacity factor as for R

The fused unpermute (Transformer Engine's ``moe_unpermute``) is the same in both modes, and the flex
dispatcher's received-token count is data-dependent (left out, as above).

ERNIE-VL's two pools (``moe_vision_ffn_hidden_size``; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/
ernie_vl/modeling_ernie45_vl/ernie_moe_layer.py ``ErnieMultiTypeMoE.forward``): the layer flattens the norm output
and splits it by ``moe_mm_token_type_ids``, which model.py ``Ernie45VLModel.forward`` slices to the rank's
sequence-parallel chunk. The vision tokens are each image's tokens (the resampler's (side / patch)^2 / M^2, as
:func:`estimator.model.vision.image_tokens`) and its image start and end tokens, which the processor marks vision too
(huggingface/transformers @ 06053b84 : src/transformers/models/ernie4_5_vl_moe/processing_ernie4_5_vl_moe.py): per
sequence V = images_per_sample x (tokens per image + 2) (``r.vis``). Each pool's rows are picked by index (a copy)
and run through that pool's own MoELayer, router, dispatcher and experts of its width; the outputs are scattered
back into zeros and the shared experts' output (on the norm output itself, every token) is added. So, per
micro-batch on one rank, with Tv = T V / s vision tokens (Tnv = Tn V / s; rounded down, the text pool takes the
rest) and the pool widths fm (text) and fv (vision)::

    + B Tn h                             both pools' input rows, the index copies their routers
                                         (``router_gating_linear``) save in place of the norm output
    router(Tn - Tnv) + router(Tnv)       each pool's router on its tokens (linear in them: the same sum as one
                                         router on all Tn) and likewise the fused permutation's row map
    experts(Rt, fm) + experts(Rv, fv)    each pool's experts, as above, on its routed rows Rt = (T - Tv) k and
                                         Rv = Tv k (:func:`routed_rows` of each pool's tokens)
    work = max(work_text, work_vision)   the backward working sets, one pool's backward at a time

The index, scatter, reshape and addition keep only indices. The routing needs ``moe_mm_token_type_ids`` in the
model's forward; Megatron-Bridge @ 067f987d's generic VLM training step does not pass it (training/vlm_step.py hands
the model the fields of training/utils/visual_inputs.py ``GenericVisualInputs``, which has none such), and without it
``ErnieMultiTypeMoE`` sends every token to the text pool: that run's layers are the images_per_sample 0 figures (the
estimate's assumptions say so). The split per rank is each rank's even share of the
image tokens: exact without sequence or context parallelism (a rank holds whole sequences); with them a rank's chunk
may hold more or fewer image tokens, which its experts' rows average over the expert-parallel group that sends them,
and the overload factor bounds. Routing imbalance (``training.moe_overload_factor`` f, below) applies to each pool's
dispatcher: each pool's busiest rank receives f times its balanced rows, and both are taken on the same rank (a bound:
the two busiest ranks may differ). A pool with no token on a rank (every pool but the text one with images_per_sample
0) runs one dummy token through its router and dispatcher with expert parallelism, for the collectives: a few rows of
h, not counted. The shared experts sit outside both pools' MoELayers, so selective recompute of ``shared_experts``
(MoELayer's ``shared_experts_compute``) leaves them as they are, and recompute of ``moe`` checkpoints each pool's
MoELayer (keeping its input, the index copy) but not the shared experts nor the norm output their fc1 keeps::

    moe recompute: B Tn h + B Tn h + shared     norm output, the pools' index copies, the shared experts' tensors

Expert-parallel overlap (``overlap_moe_expert_parallel_comm``) runs the layer as schedule nodes
(Megatron-LM @ d98e8a64 : megatron/core/models/gpt/fine_grained_callables.py, models/common/utils.py
``TransformerLayerNode``), which keep two more tensors per micro-batch from the forward to the backward pass::

    + B Tn h                           with shared experts: their output. ``submodule_pre_dispatch_forward`` hands
                                       it to the combine node through ``node.detach(shared_expert_output)``, which
                                       keeps the original in ``before_detached`` (the root of that node's backward)
                                       until the node is deleted after its backward (``__del__``); the plain layer
                                       adds it and lets it go. With ``moe_shared_expert_gate`` it is the gated
                                       product, a tensor besides the one the gate keeps
    + B P d                            alltoall with one local expert and expert TP > 1, unless FP8 or NVFP4: the
                                       dispatched tokens (P = Tn k rows, capacity factor as for R).
                                       ``should_free_input`` frees the MLP node's input only with FP8 or FP4
                                       (models/common/utils.py ``free_mlp``), several local experts or another
                                       dispatcher, so the dispatch node's output and the MLP node's input keep the
                                       rows until their backward, while the experts save the expert-TP gathered
                                       copy (with one expert TP rank the rows are the experts' input itself)

Fused permutation (``moe_permute_fusion``) adds Transformer Engine's row map, per micro-batch::

    + 4 Tn (2 E + 1)                   alltoall: int32 row_id_map [tokens, 2 E + 1] of the local tokens
    + 4 Tg (2 El + 1)                  allgather: the same over the gathered tokens Tg and the El = E / ep local
                                       experts (``local_map``)

Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/moe_utils.py ``permute`` / ``unpermute`` with
``fused=True`` call Transformer Engine's ``moe_permute_with_probs`` (alltoall, probabilities permuted with the
tokens), ``moe_permute`` (allgather, no probabilities) and ``moe_unpermute`` without merging probabilities;
token_dispatcher.py passes ``fused=config.moe_permute_fusion`` in both dispatchers. TransformerEngine @ d0067d0d
: transformer_engine/pytorch/triton/permutation.py ``make_row_id_map`` allocates the map as int32
[num_tokens, 2 num_experts + 1] (destination rows, their experts, the count); transformer_engine/pytorch/
permutation.py saves it in the permute's autograd context (``save_for_backward(row_id_map, pad_offsets)``)
and the unpermute saves the same tensor again (counted once; ``pad_offsets`` is None without
``moe_permute_and_pad_with_probs``). The fused ``moe_sort_chunks_by_index`` keeps an int32 map of one entry per
row, and the unfused path keeps int64 indices per routed row (``index_select``, ``scatter_add_``): per-row
indices are not counted, like the router's (:mod:`.router`). Left out: the flex dispatcher, whose deepep
permute runs over the tokens this rank receives, a data-dependent count (hybridep follows
``moe_permute_fusion_into_hybridep`` instead). MoE recompute drops the map with the rest of the layer.

The backward working set above what is kept: fc1's data gradient (R d) while its output gradient (R fm up) is
alive; before it, the expert-output gradient (R d) that ``unpermute``'s backward gathers is copied into another
R x d tensor by each step that re-orders or moves the rows (the backward of ``sort_chunks_by_idxs`` with more
than one local expert, of the expert-parallel all-to-all and of the expert tensor-parallel gather): 2 R d. The
all-gather dispatcher gathers instead, and its backward holds the gathered tokens' gradient (Tg = the tokens
of the expert tensor- and expert-parallel ranks) beside the rows': (R + Tg) d::

    work = B max(R (fm up + d), 2 R d)     all-to-all and flex dispatchers (R (fm up + d) with nothing to re-order;
                                           (P + R) d when only the all-to-all moves the rows: one local expert)
         = B max(R (fm up + d), (R + Tg) d)     all-gather dispatcher

Routing imbalance (``training.moe_overload_factor`` f, Megatron-Core's overload factor; 1.0 balanced): every
figure above is that of the busiest expert-parallel rank, which receives f times its balanced rows (rounded down;
under a capacity factor c at most c times, and exactly c times with padding: :func:`received`). The rows a rank
receives are the sum of its local experts' counts over the group (Megatron-LM @ d98e8a64 :
megatron/core/transformer/moe/token_dispatcher.py ``MoEAlltoAllTokenDispatcher.preprocess``: ``output_splits``,
``num_tokens_per_local_expert``; ``token_dispatch``'s ``all_to_all`` output, ``dispatch_postprocess``'s expert-TP
gather and ``sort_chunks_by_idxs``, ``combine_preprocess`` and ``token_combine``'s input, all sized by them;
``MoEAllGatherTokenDispatcher.dispatch_postprocess`` permutes ``tokens_per_expert.sum()`` rows of the
gathered tokens; experts.py ``TEGroupedMLP`` splits its rows by ``tokens_per_expert``). So f scales, per
micro-batch:

- R and what is kept per routed row: the experts' input, fc1's output, the activation's output (and the
  unweighted one), the deterministic all-gather unpermute's source rows;
- the all-to-all's received rows (P f before the expert-TP gather): the dispatched tokens expert-parallel overlap's
  schedule nodes keep, the MLP node's input and output and the experts' output gradient
  (:mod:`estimator.memory.features.schedule`, :mod:`estimator.memory.features.delayed_wgrad`);
- the backward working set's row terms.

and leaves as they are: the norm and the layer's input and output, the router's tensors (per token and expert),
the fused permutation's row map and the all-gather dispatcher's gathered tokens and probabilities (per token), the
rank's own tokens' routed copies (P: the permuted tokens before the dispatch, the combine's output and their
gradients, the deterministic all-to-all unpermute's source), the shared expert, the latent projections, and
outside this module the GEMM workspaces (fixed sizes) and the DeepEP / HybridEP buffers (sized for the worst
case). Per-row indices and probabilities, not counted (above), would scale too. One f for every MoE layer and
micro-batch bounds what Megatron-Core's ``moe/max_cum_overload_factor`` (the retained rows) measures by its
``moe/max_overload_factor`` (Megatron-LM pull request #4110).

HybridEP's per-rank budget (``moe_expert_rank_capacity_factor`` c, flex dispatcher with the hybridep backend:
:func:`rank_budget`) makes the routed rows static: every micro-batch's dispatched tokens, the experts' input and
what the experts keep have budget = int(Tn k c) rows rounded up to 256, however many arrive; so R = budget while
f x the balanced share fits in it (f below the budget changes nothing). A micro-batch that receives more drops
tokens in the first attempt, and Megatron-LM's ``PagedStashRunner`` reruns the whole step dropless: R = f x the
balanced share. The estimate is that of the worst step the run goes through, R = max(budget, f x balanced share).
Unlike moe_expert_capacity_factor (per expert, tokens really dropped) it bounds neither f nor what the backward
pass reads. What the paged stash (``moe_paged_stash``) does with the experts' saved tensors is
:mod:`estimator.memory.features.paged_stash`.
"""

from __future__ import annotations

from dataclasses import replace

from ...config.derived import effective_overload_factor
from ..fp8_scales import lin_saved, quantized
from .base import Count, Ctx, Part
from .mlp import act_input_saved, mlp_count
from .router import gather_ranks, saved as router_saved

__all__ = ["activations", "arriving_rows", "components", "dispatch_rows", "expert_params", "expert_shapes",
           "linear_shapes", "linear_weights", "overlap_retained", "params", "permute_map", "pools", "rank_budget",
           "received", "received_rows", "routed_rows", "unpermute_source", "weight_shapes"]

#: Bytes of one row-map entry: Transformer Engine's permutation maps are int32.
_I32 = 4

#: Rows HybridEP's static budget is rounded up to: Transformer Engine's grouped-tensor alignment (Megatron-LM @
#: d98e8a64 : megatron/core/transformer/moe/moe_utils.py ``get_align_size_for_quantization``).
_RANK_BUDGET_ALIGN = 256


def gemma4_norms(r) -> int:
    """Gemma 4's MoE block (post_layernorm with MoE): the norm weights beside the pre-MLP norm, the shared expert's
    input norm and the routed and shared outputs' norms and the layer's output norm, 4 nw h (Megatron-Bridge @
    067f987d : src/megatron/bridge/models/gemma/modeling_gemma4.py ``Gemma4TransformerLayer``
    pre_shared_expert_layernorm and post_ffn_layernorm, ``Gemma4MoELayer`` post_moe_layernorm and
    post_shared_expert_layernorm)."""
    return 4 * r.norm_w * r.h if r.post_norm else 0


def router_count(r) -> Count:
    """Router, its biases, the shared-expert gate and the pre-MLP norm (all replicated); with Gemma 4's block
    (post_layernorm) also ``Gemma4TopKRouter``'s input scale (h) and per-expert scale (E) and the norms of
    :func:`gemma4_norms`. A hash-routed layer (``moe_n_hash_layers``, DeepSeek-V4) has no expert bias (Megatron-LM
    @ d48bd6be (dev) : megatron/core/transformer/moe/router.py ``TopKRouter.__init__``, ``enable_expert_bias``)."""
    m = r.cfg.model
    bias = m.moe_router_enable_expert_bias and not r.hash_route
    pools = 2 if r.fmv else 1           # ERNIE-VL: the vision pool's router, a copy of the text pool's
    return Count(0, pools * (r.E * r.h + (r.E if m.add_bias_linear else 0) + (r.E if bias else 0))
                 + r.norm_w * r.h + (r.h if m.moe_shared_expert_gate and r.fs else 0)
                 + ((r.h + r.E) if r.post_norm else 0) + gemma4_norms(r))


def shared_count(r) -> Count:
    return mlp_count(r.h, r.fs, r.gated, r.cfg.model.add_bias_linear) if r.fs else Count()


def latent_count(r) -> Count:
    if not r.lat:
        return Count()
    bias = r.cfg.model.add_bias_linear
    return Count(0, 2 * r.h * r.lat + ((r.lat + r.h) if bias else 0) + _lat_norm(r))


def _lat_norm(r) -> int:
    """Kimi K3's routed_expert_norm: an RMSNorm of l weights on the combined latent output (Megatron-Bridge @
    067f987d : src/megatron/bridge/models/kimi/kimi_k3_layers.py ``KimiK3MoELayer``), replicated."""
    return r.lat if r.lat_norm else 0


def expert_params(r) -> Count:
    """All routed experts of one MoE layer, ERNIE-VL's vision pool included; ``sharded`` splits over
    expert-parallel x expert-TP ranks."""
    d, bias = r.lat or r.h, r.cfg.model.add_bias_linear
    vision = mlp_count(d, r.fmv, r.gated, bias) * r.E if r.fmv else Count()
    return mlp_count(d, r.fm, r.gated, bias) * r.E + vision


def params(r) -> Count:
    """The dense-parallel part of one MoE layer (everything but the routed experts)."""
    return router_count(r) + shared_count(r) + latent_count(r)


def components(r) -> dict:
    n = r.norm_w * r.h + gemma4_norms(r)
    return {"moe_router": router_count(r).total - n, "moe_shared_experts": shared_count(r).total,
            "moe_latent": latent_count(r).total - _lat_norm(r), "moe_experts": expert_params(r).total,
            "norms": n + _lat_norm(r)}


def active_experts(r) -> int:
    """Routed-expert parameters one token passes through: k of the E experts (of the text pool with ERNIE-VL's
    two pools: a text token never reaches the vision experts)."""
    return mlp_count(r.lat or r.h, r.fm, r.gated, r.cfg.model.add_bias_linear).total * r.k


def linear_weights(r) -> int:
    """Shared-expert and latent-projection weights on one tensor-parallel rank (the routed experts are counted
    apart, the router is not a Transformer Engine linear layer)."""
    width = r.fs // r.t
    return r.h * width * (2 if r.gated else 1) + width * r.h + 2 * r.h * r.lat


def weight_shapes(r) -> set:
    return {(o, i) for o, i, _ in linear_shapes(r) + expert_shapes(r)}


def linear_shapes(r) -> tuple:
    """(out, in, count) of the shared expert's and the latent projections' weights on one tensor-parallel rank
    (the routed experts: :func:`expert_shapes`)."""
    up = 2 if r.gated else 1
    shapes = ()
    if r.fs:
        shapes += ((r.fs // r.t * up, r.h, 1), (r.h, r.fs // r.t, 1))
    if r.lat:
        shapes += ((r.lat, r.h, 1), (r.h, r.lat, 1))
    return shapes


def expert_shapes(r) -> tuple:
    """(out, in, count) of the routed experts' fc1 and fc2 weights on one GPU: E / ep local experts, each split
    over the expert-tensor-parallel ranks."""
    up = 2 if r.gated else 1
    fm, d, n = r.fm // r.etp, r.lat or r.h, r.E // r.ep
    fv = r.fmv // r.etp                 # ERNIE-VL's vision pool
    return ((fm * up, d, n), (d, fm, n)) + (((fv * up, d, n), (d, fv, n)) if fv else ())


def routed_rows(r, T: int, Tn: int) -> int:
    """Token rows the local experts process for one micro-batch on the busiest expert-parallel rank.

    Each of the Tn local tokens is sent to k experts; balanced over the expert-parallel group, a rank's
    experts receive Tn*k rows, and expert tensor parallelism gathers the rows of its etp ranks. The busiest rank
    receives ``training.moe_overload_factor`` times that (:func:`received`). A capacity factor c caps each
    expert at c times its share (and padding fills it up to that). HybridEP's per-rank budget
    (``moe_expert_rank_capacity_factor``, :func:`rank_budget`) fixes the rows at the budget, or at the received
    rows where they exceed it (the step Megatron-LM reruns dropless)."""
    rows = arriving_rows(r, T, Tn)
    budget = rank_budget(r, Tn if r.sp else T)
    return rows if budget is None else max(budget, rows)


def arriving_rows(r, T: int, Tn: int) -> int:
    """The rows the routing sends the busiest rank's experts for one micro-batch (:func:`routed_rows` without
    HybridEP's static budget): the balanced share x the overload factor (:func:`received`)."""
    tokens = Tn if r.sp else T
    return received(r, tokens * r.k * (r.etp if (r.sp and r.etp > 1) else 1))


def rank_budget(r, tokens: int) -> int | None:
    """HybridEP's static receive budget for one micro-batch (``moe_expert_rank_capacity_factor`` c; None without
    it): int(tokens x k x c) rows, rounded up to 256, ``tokens`` this rank's tokens.

    Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/token_dispatcher.py ``_HybridEPManager.setup_metadata``
    (``budget = int(padded_num_tokens * moe_router_topk * moe_expert_rank_capacity_factor)``, rounded up to
    ``get_align_size_for_quantization``, which is 256 with ``use_transformer_engine_op_fuser`` or
    ``moe_use_grouped_tensor``: moe_utils.py, and ``TransformerConfig.__post_init__`` requires one of them with the
    budget) hands it to HybridEP as ``num_permuted_tokens``: the dispatched rows, the experts' input and every
    tensor the experts make have that many rows, however many arrive (``tokens_per_expert`` tells the grouped GEMM
    which are real). Rows beyond it are dropped and flagged (``over_budget``); megatron/core/transformer/moe/
    paged_stash.py ``PagedStashRunner`` (wrapped around every training step when the factor is set, megatron/
    training/training.py) then reruns the step with the factor cleared (dropless, the rows the routing sends) and
    the paged stash off. So the busiest rank holds max(budget, the overload factor's rows). The top-k is not
    multiplied by the expert-tensor-parallel size here, as the other flex backends do."""
    c = r.cfg.model.moe_expert_rank_capacity_factor
    if c is None:
        return None
    budget = int(tokens * r.k * c)
    return budget + (-budget % _RANK_BUDGET_ALIGN)


def received(r, rows: int) -> int:
    """Rows the busiest expert-parallel rank receives when ``rows`` is its balanced share: rows x f, f the overload
    factor (``training.moe_overload_factor``, 1.0 balanced), rounded down; under a capacity factor c at most
    rows x c (each expert capped at c times its share; padding fills every expert up to it, whatever f). Checked:
    f capped at the layout's bound (:func:`estimator.config.derived.effective_overload_factor`)."""
    c = r.cfg.model.moe_expert_capacity_factor
    f = effective_overload_factor(r.cfg.model, r.cfg.parallelism, r.cfg.training.moe_overload_factor)
    if c is not None:
        return int(rows * c) if r.cfg.model.moe_pad_expert_input_to_capacity else int(rows * min(c, f))
    return rows if f == 1 else int(rows * f)


def _capped(r, rows: int) -> int:
    """Rows a rank sends of its own tokens (balanced share, not the busiest rank's): under a capacity factor c each
    expert capped at c times its share (padding fills it up)."""
    c = r.cfg.model.moe_expert_capacity_factor
    if c is not None:
        rows = int(rows * c) if r.cfg.model.moe_pad_expert_input_to_capacity else int(rows * min(c, 1.0))
    return rows


def unpermute_source(r, T: int, Tn: int) -> int:
    """Rows the deterministic unpermute keeps for one micro-batch (module docstring): the local experts' rows
    (allgather) or the rank's own tokens' k routed copies after the return all-to-all (alltoall); 0 without
    ``deterministic_mode``, with ``moe_permute_fusion`` or with the flex dispatcher."""
    m = r.cfg.model
    if not r.cfg.training.deterministic_mode or m.moe_permute_fusion:
        return 0
    if m.moe_token_dispatcher_type == "allgather":
        return routed_rows(r, T, Tn)
    if m.moe_token_dispatcher_type == "alltoall":
        return _capped(r, (Tn if r.sp else T) * r.k)
    return 0


def dispatch_rows(r, T: int, Tn: int) -> int:
    """Rows the all-to-all dispatcher's permutation sends for one micro-batch, P = Tn k (capacity factor as for
    :func:`routed_rows`): the rank's own tokens' routed copies, before the dispatch and after the combine, which no
    routing imbalance changes."""
    return _capped(r, (Tn if r.sp else T) * r.k)


def received_rows(r, T: int, Tn: int) -> int:
    """Rows the all-to-all dispatcher's dispatch delivers to the busiest rank for one micro-batch, before the
    expert-TP gather: P x the overload factor (:func:`received`; P under balanced routing), which the combine's
    all-to-all sends back."""
    return received(r, (Tn if r.sp else T) * r.k)


def overlap_retained(r, B: int, T: int, Tn: int) -> tuple[int, int]:
    """(shared-expert output, dispatched tokens) that expert-parallel overlap's schedule nodes keep per micro-batch
    from the forward to the backward pass (module docstring); (0, 0) without ``overlap_moe_expert_parallel_comm``."""
    cfg = r.cfg
    if not cfg.training.overlap_moe_expert_parallel_comm:
        return 0, 0
    shared_out = B * Tn * r.h if r.fs else 0
    dispatched = 0
    if (cfg.model.moe_token_dispatcher_type == "alltoall" and r.E // r.ep == 1 and r.etp > 1
            and not quantized(cfg.precision)):
        dispatched = B * received_rows(r, T, Tn) * (r.lat or r.h)
    return shared_out, dispatched


def permute_map(r, Tn: int) -> int:
    """Bytes of Transformer Engine's fused-permutation row map for one micro-batch (module docstring): int32
    [tokens, 2 E + 1] over the local tokens (alltoall) or over the gathered tokens and local experts
    (allgather); 0 without ``moe_permute_fusion`` or with the flex dispatcher."""
    m = r.cfg.model
    if not m.moe_permute_fusion:
        return 0
    if m.moe_token_dispatcher_type == "alltoall":
        return _I32 * Tn * (2 * r.E + 1)
    if m.moe_token_dispatcher_type == "allgather":
        ranks = gather_ranks(r)
        return _I32 * Tn * ranks * (2 * (r.E // r.ep) + 1)
    return 0


def _backward_work(r, B: int, T: int, Tn: int, rows: int, fc1_out: int, d: int) -> int:
    """The backward working set above the kept tensors (module docstring): fc1's data gradient beside its output
    gradient, or two row-sized copies of the expert-output gradient (all-to-all, flex) or the gathered tokens'
    gradient beside the rows' (all-gather). With only the all-to-all to undo (one local expert, no expert-TP gather)
    the pair is the rank's own tokens' copies (P) beside the rows it received, which differ under imbalance.
    With ``overlap_dispatch_backward_with_experts_wgrad`` the experts' weight gradients wait for the dispatch's
    backward: :func:`dispatch_wgrad_window`."""
    fc1 = B * rows * (fc1_out + d)
    tokens = Tn if r.sp else T
    ranks = gather_ranks(r)
    if r.cfg.model.moe_token_dispatcher_type == "allgather":
        moved = B * d * (rows + tokens * ranks)
    else:
        resort = r.E // r.ep > 1 or ranks > r.ep   # sort_chunks_by_idxs over local experts, expert-TP gather
        if not resort and r.ep == 1:
            moved = B * rows * d                   # nothing to undo: fc1's data gradient is the layer's
        else:
            moved = B * d * (rows + (rows if resort else dispatch_rows(r, T, Tn)))  # else P beside its rows
    work = max(fc1, moved)
    tr = r.cfg.training
    # Only TEGroupedLinear delays its weight gradients for it (the grouped GEMM of Transformer Engine).
    if tr.overlap_dispatch_backward_with_experts_wgrad and tr.transformer_impl == "transformer_engine" \
            and r.cfg.model.moe_grouped_gemm:
        work = max(work, dispatch_wgrad_window(r, B, rows, fc1_out, d, moved))
    return work


def dispatch_wgrad_window(r, B: int, rows: int, fc1_out: int, d: int, moved: int) -> int:
    """The working set while the routed experts' weight gradients wait for the dispatch's backward
    (``overlap_dispatch_backward_with_experts_wgrad``; Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/
    moe_layer.py ``dispatch`` wraps the dispatch input in ``_RegisterDelayedWgradForExperts`` and
    ``routed_experts_compute`` the dispatched tokens in ``_RecordExpertDgradCompletion``; extensions/
    transformer_engine.py ``TEGroupedLinear`` turns on Transformer Engine's ``delay_wgrad_compute``). The experts'
    backward computes only data gradients and keeps fc1's and fc2's output gradients, B R (fm up + d), in their
    ``WeightGradStore`` (with their inputs, which the saved tensors count already); they stay through the
    re-sorting and the all-to-all's backward (``moved``, the same pair of row copies as the plain path), until
    ``_RegisterDelayedWgradForExperts.backward`` runs ``backward_dw`` on a side stream and the main stream waits
    for it. Without gradient-accumulation fusion the packed [experts, out, in] gradients allocated in the
    backward and their .grad copies are alive too (as in :mod:`estimator.memory.features.delayed_wgrad`)."""
    window = B * rows * (fc1_out + d) + moved
    if not r.cfg.training.gradient_accumulation_fusion:
        fm = r.fm // r.etp
        window += 2 * B * (r.E // r.ep) * (d * fc1_out + fm * d)
    return window


def pools(r, T: int, Tn: int) -> tuple:
    """(view, T, Tn) of each expert pool for one micro-batch on one rank: ``r`` with every token, or ERNIE-VL's text
    pool (``r``) and vision pool (``r`` with the vision experts' width) with their shares of the tokens (module
    docstring: each rank's even share of the ``r.vis`` image tokens of each sequence, rounded down; the text pool
    takes the rest). A pool with no token is left out (its dummy token with expert parallelism is not counted)."""
    if not r.fmv:
        return ((r, T, Tn),)
    Tv, Tnv = T * r.vis // r.s, Tn * r.vis // r.s
    out = ((r, T - Tv, Tn - Tnv),)
    if Tnv:
        out += ((replace(r, fm=r.fmv), Tv, Tnv),)
    return out


def _experts(r, c: Ctx, T: int, Tn: int) -> tuple:
    """(routed rows, expert input, fc1 output, activation output) bytes one pool's routed experts keep for one
    micro-batch on ``T`` / ``Tn`` tokens (module docstring)."""
    rows = routed_rows(r, T, Tn)
    fm = r.fm // r.etp
    # Megatron-Core applies the routing probabilities inside the experts (experts.py bias_act_func): in one
    # fused kernel for SwiGLU (weighted_bias_swiglu_impl, which saves only its input), otherwise as
    # act(x) * probs, which keeps the unweighted activation output for the probabilities' gradient. Nothing of
    # the experts' output is kept (module docstring).
    weighted = 0 if (r.gated and r.cfg.model.activation_func == "swiglu") else c.B * rows * fm
    # Each local expert's input is a tensor of its own (GroupedLinear), with its own FP8 scales.
    local = r.E // r.ep
    return (rows, lin_saved(c, rows, r.lat or r.h, local, module="mlp.experts.linear_fc1"),
            act_input_saved(r, c.B, rows * fm), lin_saved(c, rows, fm, local, module="mlp.experts.linear_fc2") + weighted)


def probs_on_input(r, c: Ctx, rows: int) -> tuple[int, int]:
    """(saved, backward working set) bytes of ``moe_apply_probs_on_input`` for one pool's ``rows`` routed rows.

    Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/experts.py ``TEGroupedMLP.forward`` and
    ``SequentialMLP.forward`` (top-1 only) compute ``permuted_probs * permuted_local_hidden_states`` before fc1 and
    pass ones as the probabilities to the activation. With probabilities in the activations' dtype (no
    ``moe_router_dtype``) the product is a new tensor of the input's size, which fc1 saves in place of the input,
    and the product's backward (autograd ``MulBackward0``) keeps the unscaled input for the probabilities' gradient:
    B R d more. Its backward holds the incoming gradient, the input's gradient (grad x probs) and grad x input
    before its reduction over d: 3 B R d. The per-row tensors (the probabilities, the ones) are not counted, as
    elsewhere."""
    if not r.cfg.model.moe_apply_probs_on_input:
        return 0, 0
    rows_d = c.B * rows * (r.lat or r.h)
    return rows_d, 3 * rows_d


def activations(r, c: Ctx) -> Part:
    """Bytes one micro-batch keeps, and the backward working set (see the module docstring)."""
    cfg = r.cfg
    B, T, Tn, h = c.B, c.T, c.Tn, r.h
    up = 2 if r.gated else 1
    d = r.lat or h
    norm2_out = 0 if "layernorm" in c.modules else B * Tn * h
    norm2 = B * Tn * h + norm2_out
    # Each pool's router, dispatcher and experts on its tokens (one pool but ERNIE-VL's two): what the router's
    # autograd graph (and the allgather dispatcher's masked_select) saves, derived from Megatron-LM @ d98e8a64 :
    # megatron/core/transformer/moe/router.py and moe_utils.py (estimator.model.layers.router); the fused
    # permutation's row map; the experts' tensors; the deterministic unpermute's source rows; the dispatched tokens
    # expert-parallel overlap keeps; the backward working set, one pool's at a time.
    router = pmap = e_in = e_fc1 = act_out = unpermute = dispatched = work = unscaled = 0
    for rp, Tp, Tnp in pools(r, T, Tn):
        rows, p_in, p_fc1, p_act = _experts(rp, c, Tp, Tnp)
        e_in, e_fc1, act_out = e_in + p_in, e_fc1 + p_fc1, act_out + p_act
        p_unscaled, p_mul_work = probs_on_input(rp, c, rows)     # moe_apply_probs_on_input
        unscaled += p_unscaled
        work = max(work, p_mul_work)
        router += sum(router_saved(rp, B, Tp, Tnp).values())
        pmap += permute_map(rp, Tnp)
        unpermute += B * unpermute_source(rp, Tp, Tnp) * d   # --deterministic-mode: index_add_ keeps its source
        dispatched += overlap_retained(rp, B, Tp, Tnp)[1]
        work = max(work, _backward_work(rp, B, Tp, Tnp, rows, rp.fm // r.etp * up, d))
    experts = e_in + e_fc1 + act_out + unscaled
    recompute = 0
    if "moe_act" in c.modules:
        experts -= act_out
        recompute = act_out
        act_out = 0
    shared = 0
    if r.fs:
        fs = r.fs // r.t
        shared = act_input_saved(r, B, T * fs) + lin_saved(c, T, fs, module="mlp.shared_experts.linear_fc2")
        if cfg.model.moe_shared_expert_gate:
            shared += B * Tn * h          # output * sigmoid(gate): the product keeps the shared expert's output
        # ERNIE-VL's shared experts run outside both pools' MoELayer, whose shared_experts_compute is what
        # recomputes them: shared_experts recompute leaves them as they are (module docstring).
        if "shared_experts" in c.modules and not r.fmv:
            recompute += shared
            shared = 0
    latent = lin_saved(c, Tn, r.lat, module="mlp.fc2_latent_proj") if r.lat else 0
    if r.lat_norm:
        # Kimi K3's routed_expert_norm (a KimiRMSNorm on the combined latent output): the fp32 copy of its input, the
        # fp32 rstd and the normalised tensor (its output is fc2_latent_proj's input, counted above).
        latent += (4 + B) * Tn * r.lat + 4 * Tn
    shared_out = overlap_retained(r, B, T, Tn)[0]
    outside = inside = 0
    if r.post_norm:
        outside, inside = gemma4_block(r, c)
        norm2 = norm2_out = 0           # the eager pre-MLP norm replaces Transformer Engine's (in ``outside``)
    # ERNIE-VL's ErnieMultiTypeMoE hands each pool its tokens as an index copy (flat_hidden[text_indices]), which
    # the pool's router_gating_linear saves in place of the norm output (module docstring): Tn rows in all.
    pooled = B * Tn * h if r.fmv else 0
    saved = (norm2 + router + pmap + experts + unpermute + shared + latent + shared_out + dispatched + inside
             + pooled)
    if "moe" in c.modules:
        if r.fmv:
            # Each pool's MoELayer checkpoints itself and keeps its input (the index copy); the shared experts and
            # the norm output their fc1 keeps stay outside the checkpoints (module docstring).
            recompute = saved - B * Tn * h - pooled - shared
            saved = B * Tn * h + pooled + shared
        else:
            recompute = saved
            saved = B * Tn * h
            shared = 0
        norm2_out = router = pmap = e_in = e_fc1 = act_out = unpermute = shared_out = dispatched = unscaled = 0
    named = None
    if c.parts:
        named = {"router": router, "permute_map": pmap, "expert_in": e_in, "expert_fc1_out": e_fc1, "expert_act_out": act_out,
                 "unpermute_source": unpermute, "shared": shared, "mlp_norm_in": B * Tn * h, "mlp_norm_out": norm2_out,
                 "shared_out": shared_out, "dispatched": dispatched}
    return Part(saved + outside, recompute, work, 0, named)


def gemma4_block(r, c: Ctx) -> tuple[int, int]:
    """(outside, inside the MoE recompute checkpoint) bytes Gemma 4's MoE block keeps beyond a plain MoE layer, per
    micro-batch (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma/modeling_gemma4.py). Its norms are
    eager fp32 RMSNorms (``_gemma4_rms_norm``: ``x.float() * pow(x.float().pow(2).mean(-1) + eps, -0.5)``, then
    times ``weight.float()``), which keep two fp32 copies of the input (for ``pow`` and for the product) and, with
    a weight, the fp32 normalised tensor (for the weight's product): 12 Tn h bytes and two fp32 values per token
    (8 Tn); 8 Tn h without a weight. ``Gemma4TransformerLayer._forward_mlp`` normalises the layer input twice
    (the routed experts' input, replacing Transformer Engine's pre-MLP norm; the shared expert's, which its fc1
    keeps besides: B Tn h) and ``_forward_post_mlp`` the summed output once: outside the checkpoint. Inside it:
    ``Gemma4TopKRouter.gating``'s scaleless norm and its product with the learned scale (which keeps the bf16
    normalised input, B Tn h), and ``Gemma4MoELayer.postprocess``'s two output norms."""
    Tn, h, B = c.Tn, r.h, c.B
    eager, scaleless = 12 * Tn * h + 8 * Tn, 8 * Tn * h + 8 * Tn
    shared_in = lin_saved(c, Tn, h, module="mlp.shared_experts.linear_fc1") if r.fs else 0
    shared = 1 if r.fs else 0
    outside = (2 + shared) * eager + shared_in
    inside = scaleless + B * Tn * h + (1 + shared) * eager
    return outside, inside
