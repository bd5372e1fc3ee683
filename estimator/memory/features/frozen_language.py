"""A frozen language model (Megatron-Bridge's ``freeze_language_model``): its weights stay, its gradients, optimizer
states and weight-gradient inputs go, while the backward pass still runs through it.

What freezes. Megatron-Bridge @ 067f987d : src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/model.py
``Qwen3VLModel.freeze`` (and the other vision-language models' ``freeze``: gemma_vl/modeling_gemma3_vl.py,
glm_vl/modeling_glm_45v.py, kimi_vl/modeling_kimi_k25_vl.py, ...) sets ``requires_grad = False`` on every parameter
of ``self.language_model``, the whole ``GPTModel``: embedding, decoder layers (MTP layers included), final norm and
output layer. The vision tower and its projection keep theirs unless ``freeze_vision_model`` /
``freeze_vision_projection`` (estimator/memory/vision.py).

Model states, per GPU. Megatron-LM @ d98e8a64 : megatron/core/distributed/distributed_data_parallel.py builds its
gradient buffers from the parameters with ``requires_grad`` only (``if param.requires_grad`` when it groups them
into buffers), and megatron/core/optimizer/__init__.py skips the others (``if not param.requires_grad: continue``),
so the distributed optimizer holds master weights and moments for the trained parameters only. A frozen parameter
keeps its weight, in the same format as a trained one (with FP8 its FP8 copy too: the forward pass and the
input-gradient GEMM both read it):

    weights    unchanged: every parameter of the stage
    gradients  bm.grad x (trained vision parameters on the stage)          0 on a stage without the tower
    optimizer  bm.optimizer x ceil(trained vision parameters / shards)

Activations. The images' embeddings, the trained projector's output, are scattered into the decoder's input (and,
with Qwen3-VL's deepstack mergers, added to the hidden states of its first layers), so the loss depends on them
through every decoder layer: the backward pass runs through the whole language model for the input gradients
only. Each frozen linear then saves no input for a weight gradient (Transformer Engine @ d0067d0d :
transformer_engine/pytorch/module/linear.py, layernorm_linear.py, grouped_linear.py: ``backward_needs_input =
is_grad_enabled and weight.requires_grad``): the same saved tensors as PEFT's frozen base without adapters
(:func:`estimator.memory.features.peft.peft_activations` with no target: the QKV and fc1 inputs, the FP8 copy of
the projection's input, the fc2 input, the routed experts' permuted tokens and activation outputs, the shared
experts' linear inputs). Everything the input gradients need stays: the norms' inputs and statistics, the core
attention's q, k, v, output and softmax statistics, the activation functions' inputs, the router's input
(``RouterGatingLinearFunction`` saves it whatever needs a gradient). The gated delta net's and Mamba's mixers are
counted as trained (an over-estimate: their named saved tensors are not broken down).

The output layer is Megatron-Core's ``ColumnParallelLinear``, whose frozen path
(megatron/core/tensor_parallel/layers.py ``linear_with_frozen_weight``, ``LinearWithFrozenWeight``) saves the weight
only: the final norm's output, B x Tn x h, is not kept (:func:`output_input`). No Transformer Engine dummy
weight-gradient tensor, no output-layer or embedding weight gradient is made for a frozen weight.

Frozen multi-token-prediction layers (``training.freeze_mtp``, Megatron-Bridge's ``freeze_mtp_model``: Megatron-Bridge
@ 067f987d : models/exaone/exaone45/modelling_exaone45/model.py ``Exaone45Model.freeze`` sets ``requires_grad =
False`` on every language-model parameter whose name holds ``mtp``). The same two rules apply to those parameters
alone: the MTP layers built on a stage (their norms, eh_proj and transformer layers; not the embedding copy an MTP
stage holds, named ``embedding``) keep their weights and lose gradients and optimizer states (:func:`mtp_states`);
the optimizer steps the rest. Their linears save no input for a weight gradient (:func:`mtp_layers`; eh_proj's input,
the concatenation of the two normed halves, 2 B x Tn x h, :func:`eh_proj_input`, is not kept). The MTP loss's
backward still runs through them into the decoder's hidden states and the embedding, so the norms' inputs, the core
attention's tensors and the activation functions' inputs stay; the shared output layer stays trained.
"""

from __future__ import annotations

from ..activations import LayerActivations, mtp_activations
from ..states import StateBytes, state_bytes
from .peft import peft_activations

__all__ = ["eh_proj_input", "frozen_layer", "mtp_layers", "mtp_states", "output_input", "stage_states"]


def frozen_layer(r, a: LayerActivations, kind) -> LayerActivations:
    """One decoder layer's activations with every weight frozen (``a`` from ``layer_activations(..., parts=True)``;
    module docstring). Without PEFT, :func:`~estimator.memory.features.peft.peft_activations` adds no adapter."""
    return peft_activations(r, a, kind)


def output_input(r) -> int:
    """Bytes of the output layer's input (the final norm's output, B x Tn x h) that a frozen ``ColumnParallelLinear``
    does not save; the final norm keeps its own input."""
    B = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    T = r.s * r.b // r.cp
    return B * (T // r.t if r.sp else T) * r.h


def stage_states(bm, st: StateBytes, trained: int, dense_shard: int, expert_shard: int) -> StateBytes:
    """A stage's states with the language model frozen: ``st``'s weights (every parameter), and gradients and
    optimizer states of the ``trained`` (vision-tower) parameters only, sharded like dense parameters."""
    own = state_bytes(bm, trained, 0, 0, dense_shard, expert_shard)
    return StateBytes(st.weights, own.gradients, own.optimizer)


def mtp_layers(r) -> list[LayerActivations]:
    """The transformer layer of one frozen MTP layer, one per kind of ``r.mtp_kinds`` (module docstring)."""
    return [frozen_layer(r, a, r.kinds[k]) for a, k in zip(mtp_activations(r, None, parts=True), r.mtp_kinds)]


def eh_proj_input(r) -> int:
    """Bytes of a frozen eh_proj's input that are not saved: the two normed halves concatenated, 2 B x Tn x h."""
    return 2 * output_input(r)


def mtp_states(bm, st: StateBytes, trained_dense: int, trained_expert: int, dense_shard: int,
               expert_shard: int) -> StateBytes:
    """A stage's states with its MTP layers frozen: ``st``'s weights (every parameter), and gradients and optimizer
    states of the ``trained_dense`` and ``trained_expert`` parameters (the stage's others) only."""
    own = state_bytes(bm, trained_dense, 0, trained_expert, dense_shard, expert_shard)
    return StateBytes(st.weights, own.gradients, own.optimizer)
