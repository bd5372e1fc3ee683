"""The routed experts' input scaled by the routing probabilities (model.moe_apply_probs_on_input, Megatron-LM
--moe-apply-probs-on-input), estimator/model/layers/moe.py ``probs_on_input``, by hand.

Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/experts.py ``TEGroupedMLP.forward`` (top-1 only):
``permuted_probs * permuted_local_hidden_states`` before fc1, ones passed to the activation as probabilities.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_config
from estimator.formats.megatron_args import read_megatron_args, to_megatron_args
from estimator.memory.activations import context
from estimator.model.layers import moe
from estimator.model.resolve import resolve
from tests.conftest import make_config

#: h 256, 8 experts of width 512 (SwiGLU), top-1, alltoall, bf16, one GPU, s 256: R = 256 rows.
MODEL = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024, "vocab_size": 1024,
         "num_experts": 8, "moe_router_topk": 1, "moe_ffn_hidden_size": 512}


def _part(**model):
    r = resolve(load_config(make_config({**MODEL, **model}, None, {"seq_length": 256})))
    return moe.activations(r, context(r))


def test_one_more_copy_of_the_expert_input_rows():
    """R = 256 tokens x top-1 = 256 rows of h = 256 in bf16: the product's backward keeps the unscaled input,
    2 B x 256 x 256 = 131,072 B more than without the flag (fc1 keeps the product instead of the input: the same
    size). The backward working set: fc1's data gradient beside its output gradient, 2 B x 256 x (2 x 512 + 256) =
    655,360, against the product's backward, 3 x 131,072 = 393,216: unchanged here."""
    plain, scaled = _part(), _part(moe_apply_probs_on_input=True)
    assert scaled.saved - plain.saved == 131_072
    assert scaled.work == plain.work == 655_360


def test_the_product_backward_can_be_the_working_set():
    """Narrow experts (width 32): fc1's pair is 2 B x 256 x (64 + 256) = 163,840 and the re-sorting's two row
    copies 2 x 2 B x 256 x 256 = 262,144, the larger; the product's backward, 3 x 2 B x 256 x 256 = 393,216,
    becomes the working set."""
    plain, scaled = _part(moe_ffn_hidden_size=32), _part(moe_ffn_hidden_size=32, moe_apply_probs_on_input=True)
    assert plain.work == 262_144 and scaled.work == 393_216


def test_recomputing_the_moe_layer_keeps_only_its_input():
    r = resolve(load_config(make_config({**MODEL, "moe_apply_probs_on_input": True}, None,
                                        {"seq_length": 256, "recompute_granularity": "selective",
                                         "recompute_modules": ["moe"]})))
    assert moe.activations(r, context(r)).saved == 2 * 256 * 256


def test_the_flag_is_read_written_back_and_dropped_for_a_dense_model():
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 --swiglu "
            "--seq-length 256 --max-position-embeddings 256 --vocab-size 1024 --micro-batch-size 1 --bf16")
    cfg = read_megatron_args(base + " --num-experts 8 --moe-router-topk 1 --moe-apply-probs-on-input",
                             world_size=1).config
    assert cfg["model"]["moe_apply_probs_on_input"] is True
    assert "--moe-apply-probs-on-input" in to_megatron_args(cfg)
    imp = read_megatron_args(base + " --moe-apply-probs-on-input", world_size=1)
    assert "moe_apply_probs_on_input" not in imp.config["model"]
    assert any(n.startswith("--moe-apply-probs-on-input: only for MoE") for n in imp.notes)


@pytest.mark.parametrize("model,training,what", [
    ({"moe_router_topk": 2}, {}, "moe_router_topk 1"),
    ({"moe_router_dtype": "fp32"}, {}, "moe_router_dtype fp32"),
    ({}, {"peft": "lora"}, "PEFT"),
])
def test_what_is_not_modelled_is_refused_by_name(model, training, what):
    cfg = make_config({**MODEL, "moe_apply_probs_on_input": True, **model}, None, {"seq_length": 256, **training})
    with pytest.raises(ConfigError, match=f"moe_apply_probs_on_input.*{what}|{what}"):
        estimate(cfg)
