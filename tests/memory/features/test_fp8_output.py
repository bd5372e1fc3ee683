"""The output layer in MXFP8 (precision.fp8_output_proj, estimator/memory/features/fp8_output.py), by hand.

Model: a GPT of 4 layers, h 512, 8 heads, untied embeddings, sequence 4096, micro-batch 1, one GPU, bf16 weights,
FP8 with the mxfp8 recipe (a Blackwell run). MXFP8 keeps 1 B per element of each copy and one E8M0 byte per 32
elements, its scale tensors padded to 128 x 4 tiles (row-wise up(M, 128) x up(K/32, 4), column-wise
up(M/32, 4) x up(K, 128)).
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from tests.conftest import make_config

MXFP8 = {"fp8": True, "fp8_recipe": "mxfp8"}
ON = {**MXFP8, "fp8_output_proj": True}


def _model(vocab: int) -> dict:
    return dict(num_layers=4, hidden_size=512, num_attention_heads=8, vocab_size=vocab,
                untie_embeddings_and_output_weights=True)


def _stage(vocab: int, precision: dict, **training):
    return estimate(make_config(_model(vocab), None, {"gpu_arch": "sm_100", **training}, precision)).stages[0]


def test_weight_copies_saved_input_and_dummy_by_hand():
    """Vocabulary 1000, padded to 1024 (a multiple of 128). Weights: the two MXFP8 copies of the 1024 x 512 weight,
    2 x 524,288 = 1,048,576 B, and their scales, row-wise 1024 x 16 = 16,384 and column-wise 32 x 512 = 16,384:
    1,081,344 B more. The output layer saves its 4096 x 512 input column-wise in MXFP8, 2,097,152 B and 128 x 512 =
    65,536 B of scales, instead of 2 B x 2,097,152 = 4,194,304 in bf16: 2,031,616 B less. Transformer Engine's dummy
    weight gradient of the 1024 x 512 shape, 2 B each: 1,048,576 B more."""
    off, on = _stage(1000, MXFP8), _stage(1000, ON)
    assert on.weights_bytes - off.weights_bytes == 1_081_344
    assert off.activations["output"] - on.activations["output"] == 2_031_616
    assert on.transient["te_dummy_wgrad"] - off.transient["te_dummy_wgrad"] == 1_048_576


def test_the_output_layer_backward_holds_the_quantized_logits_gradient():
    """Vocabulary 32,000 (a multiple of 128): the 4096 x 32,000 logits gradient is quantized both ways, 2 x
    131,072,000 B, with scales row-wise 4096 x 1000 = 4,096,000 and column-wise 128 x 32,000 = 4,096,000:
    270,336,000 B beside the bf16 gradient the loss hands over.

    Transformer Engine's fused cross entropy (TE 2.18+, estimator/memory/loss.py) saves an fp32 gradient, 4 B x
    131,072,000 = 524,288,000, beside the bf16 logits until the forward returns (262,144,000: the transient, the
    loss's forward moment), and hands the output layer its bf16 cast (as much again, during the loss's backward).
    The output layer's backward then holds, against the
    saved 524,288,000: without the flag the bf16 gradient and Megatron's bf16 weight gradient, 2 B x 32,000 x 512 =
    32,768,000 (-262,144,000 + 32,768,000 < 0); with it no weight gradient (Transformer Engine accumulates into
    main_grad) and the quantized copies (-262,144,000 + 270,336,000 = 8,192,000): below the loss's moment either way
    (before TE 2.18 the loss kept the bf16 logits alone and the output layer's backward was the peak)."""
    from estimator.config.load import load_config
    from estimator.memory.features.fp8_output import backward_extra
    from estimator.model.resolve import resolve
    fused = {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}
    r = resolve(load_config(make_config(_model(32000), None, {"gpu_arch": "sm_100", **fused}, ON)))
    assert backward_extra(r) == 270_336_000
    for precision in (MXFP8, ON):
        t = _stage(32000, precision, **fused).transient
        assert t["loss_forward"] == 262_144_000 and "output_layer_wgrad" not in t


@pytest.mark.parametrize("precision, model, training, words", [
    ({"fp8": True, "fp8_output_proj": True}, {}, {}, "mxfp8"),
    (ON, {"untie_embeddings_and_output_weights": False}, {}, "tied embeddings"),
    (ON, {}, {"defer_embedding_wgrad_compute": True}, "defer_embedding_wgrad_compute"),
    (ON, {}, {"reserved_memory_model": "replay"}, "replay"),
])
def test_refusals_name_the_field(precision, model, training, words):
    with pytest.raises(ConfigError, match=words) as err:
        estimate(make_config({**_model(1000), **model}, None, {"gpu_arch": "sm_100", **training}, precision))
    assert "precision.fp8_output_proj" in str(err.value)


def test_the_assumptions_say_so():
    text = " ".join(estimate(make_config(_model(1000), None, {"gpu_arch": "sm_100"}, ON)).assumptions)
    assert "Output layer in MXFP8" in text
    assert "Output layer in MXFP8" not in " ".join(
        estimate(make_config(_model(1000), None, {"gpu_arch": "sm_100"}, MXFP8)).assumptions)
