"""The fp32 residual stream (precision.fp32_residual_connection, estimator/memory/activations.py), by hand.

Megatron-LM @ d98e8a64: the embedding's ``embeddings.float()``, ``TransformerLayer``'s ``residual.float()`` and the
bias-dropout-add's ``x.to(residual.dtype)`` make every layer's input and output fp32; Transformer Engine's norms
save bf16 copies of it (``TELayerNormColumnParallelLinear.forward`` casts the input; TransformerEngine @ d0067d0 :
ops/basic/rmsnorm.py converts it to the weight's dtype and saves that).

Model: GPT layers of h 256, 4 heads, a SwiGLU MLP of f = 640 (Megatron-LM's int(4h x 2/3 / 64) x 64), vocabulary 1000
(1024 padded), sequence 256, micro-batch 1, bf16, TP 1: T = Tn = 256 tokens, Tn h = 65,536 elements.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.config.load import load_config
from estimator.memory.activations import layer_activations
from estimator.model.resolve import resolve
from tests.conftest import make_config

MODEL = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000}
TN_H = 256 * 256
FP32 = {"fp32_residual_connection": True}
FULL = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}


def _layer(precision=None, **training):
    r = resolve(load_config(make_config(MODEL, training={"seq_length": 256, **training}, precision=precision)))
    return layer_activations(r, r.kinds[0])


def test_one_layer_by_hand():
    """Saved: the same bytes. The QKV and fc1 LayerNormLinears save their bf16 copy of the fp32 input (2 B per
    element, as the bf16 stream's input itself), the rest of the layer is bf16 either way: attention 4 Tn h + q, k, v
    + output + softmax statistics, MLP 4 Tn h + fc1 output + SwiGLU output, unchanged.

    Checkpoint (full recompute): the fp32 layer input, 4 x 65,536 = 262,144 B instead of 131,072; the recomputation
    shares none of it (its norm makes a bf16 copy), so nothing of the checkpoint is subtracted from what it makes.

    Backward working set: the MLP's, fc1's output gradient 2 B x 256 x 640 x 2 = 655,360 and two residual-sized
    tensors 2 x 2 x 65,536 = 262,144 (917,504 in bf16); with the fp32 stream the residual gradient is 4 B: + 2 x
    65,536 = 1,048,576, above the moment fc1's norm input gradient (bf16, 2 B) is cast back to fp32 (4 B) beside the
    residual gradient (4 B): 10 x 65,536 = 655,360."""
    bf16, fp32 = _layer(), _layer(FP32)
    assert (fp32.attention, fp32.mlp, fp32.full) == (bf16.attention, bf16.mlp, bf16.full)
    assert (bf16.checkpoint, fp32.checkpoint) == (2 * TN_H, 4 * TN_H) == (131_072, 262_144)
    assert (bf16.shared_input, fp32.shared_input) == (131_072, 0)
    assert (bf16.backward_peak, fp32.backward_peak) == (917_504, 1_048_576)


def test_the_assumptions_say_so():
    text = " ".join(estimate(make_config(MODEL, training={"seq_length": 256}, precision=FP32)).assumptions)
    assert "FP32 residual stream" in text


def test_one_stage_without_recompute_is_unchanged():
    """One GPU, every layer kept whole: no received input, no checkpoint; the larger backward working set
    (1,048,576 B) stays below the loss's moment at the peak (the bf16 logits beside the saved fp32 softmax)."""
    base = {"seq_length": 256, "global_batch_size": 1}
    (plain,) = estimate(make_config(MODEL, training=base)).stages
    (fp32,) = estimate(make_config(MODEL, training=base, precision=FP32)).stages
    assert fp32.allocated_bytes == plain.allocated_bytes


def test_full_recompute_keeps_fp32_checkpoints():
    """Two layers, uniform full recompute of one: two checkpoints of 262,144 B (524,288, against 262,144 in bf16).
    The recompute working set of a layer is its whole rematerialisation, ``full`` (in bf16 ``full`` - 131,072, the
    checkpoint its norm reads), 131,072 more, and the backward working set 131,072 more: 262,144 more at the peak."""
    base = {"seq_length": 256, "global_batch_size": 1, **FULL}
    (plain,) = estimate(make_config(MODEL, training=base)).stages
    (fp32,) = estimate(make_config(MODEL, training=base, precision=FP32)).stages
    assert (plain.activations["attention"], fp32.activations["attention"]) == (262_144, 524_288)
    assert fp32.transient["backward_working_set"] - plain.transient["backward_working_set"] == 262_144


def test_a_later_stage_keeps_its_received_fp32_input():
    """PP 2, four layers, four micro-batches: the last stage holds one micro-batch in flight. Its input comes from
    the first stage in fp32 (TransformerConfig.pipeline_dtype) and the schedule keeps it to the backward beside the
    first layer's bf16 copy: 4 x 65,536 = 262,144 B more. The first stage (the embedding's) keeps nothing more. With
    full recompute the first layer's checkpoint is that received tensor (counted at 4 B already); with block
    recompute of no layer (recompute_num_layers 0) it is not, and the 262,144 B come back."""
    def stages(precision=None, **training):
        tr = {"seq_length": 256, "global_batch_size": 4, "world_size": 2, **training}
        model = {**MODEL, "num_layers": 4}
        return estimate(make_config(model, {"pipeline_model_parallel_size": 2}, tr, precision)).stages

    plain, fp32 = stages(), stages(FP32)
    assert fp32[0].activations == plain[0].activations
    assert fp32[1].activations["attention"] - plain[1].activations["attention"] == 262_144
    full_plain, full_fp32 = stages(**FULL), stages(FP32, **FULL)
    assert full_fp32[1].activations["attention"] == 2 * 262_144 == 2 * full_plain[1].activations["attention"]
    none = {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 0}
    assert stages(FP32, **none)[1].activations["attention"] - stages(**none)[1].activations["attention"] == 262_144


@pytest.mark.parametrize("model, training, precision, words", [
    ({}, {}, {"params_dtype": "fp32"}, "bf16 or fp16"),
    ({}, {"transformer_impl": "local"}, {}, "local layer implementation"),
    ({"mtp_num_layers": 1}, {}, {}, "MTP layers"),
    ({}, {"recompute_granularity": "selective", "recompute_modules": ["layernorm"]}, {}, "recomputed norms"),
    ({}, {"cuda_graph_impl": "transformer_engine"}, {}, "CUDA graphs"),
])
def test_refusals_name_the_field(model, training, precision, words):
    with pytest.raises(ConfigError, match=words) as err:
        estimate(make_config({**MODEL, **model}, None, {"seq_length": 256, **training}, {**FP32, **precision}))
    assert "precision.fp32_residual_connection" in str(err.value)


@pytest.mark.parametrize("training", [
    {},
    {"virtual_pipeline_model_parallel_size": 2},
    {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 1},
])
def test_the_step_timeline_peaks_at_the_estimate(training):
    """The timeline (estimator/memory/timeline.py) counts the received fp32 input per chunk as the estimate does."""
    from estimator.memory.timeline import stage_timelines
    par, training = {"pipeline_model_parallel_size": 2}, dict(training)
    if "virtual_pipeline_model_parallel_size" in training:
        par["virtual_pipeline_model_parallel_size"] = training.pop("virtual_pipeline_model_parallel_size")
    e = estimate(make_config({**MODEL, "num_layers": 8}, par, {"seq_length": 256, "global_batch_size": 8,
                                                                "world_size": 2, **training}, FP32))
    for line, s in zip(stage_timelines(e), e.stages):
        assert line["peak_bytes"] == s.allocated_bytes, s.stage
