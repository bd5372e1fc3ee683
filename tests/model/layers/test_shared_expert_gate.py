"""The shared-expert gate (``moe_shared_expert_gate``), by hand from Megatron-LM @ d98e8a64 :
megatron/core/transformer/moe/shared_experts.py ``SharedExpertMLP.forward``: ``output = output * gate_score`` with
``gate_score = sigmoid(linear(hidden_states, gate_weight))``. The product keeps both operands for the backward
pass: the shared expert's output ([tokens on the rank, h], the activations' dtype) and the [tokens, 1] score.
The score and the gate's logits are h times smaller and are not counted. Measured on one H100 (this project's
batch 5: the gate added 60 MiB to the forward/backward peak of an 8-layer model, h 2048, 2048 tokens, against
8 x 8 MiB here).

One micro-batch of seq 2048, micro-batch 1, h 256, bf16 (2 B), 4 experts top-2, a shared expert of 512.
"""

from __future__ import annotations

from estimator import load_config
from estimator.memory.activations import layer_activations
from estimator.model.layers import LayerKind
from estimator.model.resolve import resolve
from tests.conftest import make_config

MOE = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000, num_experts=4, moe_router_topk=2,
           moe_ffn_hidden_size=64, moe_shared_expert_intermediate_size=512)
KIND = LayerKind("attention", "moe")


def _shared(model, parallelism=None, training=None):
    r = resolve(load_config(make_config(model, parallelism, {"seq_length": 2048, **(training or {})})))
    a = layer_activations(r, KIND, parts=True)
    return a.mlp, a.parts["shared"]


def test_the_gate_keeps_the_shared_experts_output():
    """One GPU: 2048 tokens x 256 x 2 B = 1,048,576 B more, all of it in the shared expert's part."""
    off, shared_off = _shared(MOE)
    on, shared_on = _shared({**MOE, "moe_shared_expert_gate": True})
    assert on - off == shared_on - shared_off == 2048 * 256 * 2


def test_with_sequence_parallelism_the_output_is_the_ranks_tokens():
    """TP 2 with sequence parallelism: the shared expert's output is reduce-scattered back to the rank's
    2048 / 2 = 1024 tokens before the gate: 1024 x 256 x 2 B = 524,288 B."""
    par = {"tensor_model_parallel_size": 2}
    tr = {"world_size": 2, "sequence_parallel": True}
    off, _ = _shared(MOE, par, tr)
    on, _ = _shared({**MOE, "moe_shared_expert_gate": True}, par, tr)
    assert on - off == 1024 * 256 * 2


def test_shared_expert_recompute_drops_it():
    """``recompute_modules: [shared_experts]`` checkpoints SharedExpertMLP.forward, the gate included: nothing of
    the shared expert is kept."""
    tr = {"recompute_granularity": "selective", "recompute_modules": ["shared_experts"]}
    _, shared = _shared({**MOE, "moe_shared_expert_gate": True}, training=tr)
    assert shared == 0
