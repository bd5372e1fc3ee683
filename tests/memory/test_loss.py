"""The logits and the loss on the last stage (estimator/memory/loss.py) and how the last stage's peak uses them."""

from __future__ import annotations

from tests.conftest import make_config

from estimator import estimate
from estimator.config.load import load_config
from estimator.memory.loss import loss_buffers
from estimator.model.resolve import resolve

MODEL = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000}
N = 256 * 1024          # logit elements: s 256 x b 1 tokens, vocabulary 1000 padded to 1024 (128 x TP 1)


def _buffers(**training):
    return loss_buffers(resolve(load_config(make_config(MODEL, training={"seq_length": 256, **training}))))


def test_unfused_cross_entropy():
    """fp32 softmax saved (4 B/element); the bf16 logits live until the loss is computed (2 B), the bf16
    gradient while it runs backward (2 B); the output layer then holds the bf16 gradient only."""
    assert _buffers() == (4 * N, 2 * N, 2 * N, 2 * N - 4 * N)


def test_native_fusion_adds_one_fp32_buffer():
    """torch.compile computes in-place updates into a new buffer: one more fp32 copy while the loss runs."""
    b = _buffers(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="native")
    assert b == (4 * N, 6 * N, 6 * N, -2 * N)


def test_transformer_engine_fusion_keeps_an_fp32_gradient():
    """TransformerEngine @ d0067d0 (TE 2.18+): cross_entropy_forward writes the gradient into
    ``torch.empty_like(_input, dtype=torch.float32)``, which CrossEntropyFunction saves (4 N), not the logits; the
    bf16 logits live until the model's forward returns (2 N); the backward returns the fp32 gradient and autograd
    casts it to bf16 beside it (2 N); the output layer then holds the bf16 gradient, the fp32 one freed (2 N - 4 N).
    Before TE 2.18 the kernel wrote it into the bf16 logits in place: (2 N, 0, 0, 0)."""
    assert _buffers(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te") == (4 * N, 2 * N, 2 * N, -2 * N)


def test_tensor_and_context_parallel_split_the_logits():
    r = resolve(load_config(make_config(MODEL, {"tensor_model_parallel_size": 2, "context_parallel_size": 2},
                                        {"seq_length": 256, "world_size": 4})))
    # 128 tokens per rank x (1024 padded to a multiple of 256 = 1024) / 2 ranks
    assert loss_buffers(r).saved == 4 * 128 * 512


def test_last_stage_peak_is_the_loss_not_loss_plus_the_layer_backward():
    """One GPU, one micro-batch: the peak is the layers' activations + the saved softmax + the bf16 logits at
    the end of the loss forward; the layers' backward working set comes after the loss freed its buffers."""
    e = estimate(make_config(MODEL, training={"seq_length": 256, "global_batch_size": 1}))
    (s,) = e.stages
    assert s.activations["output"] == 4 * N + 2 * 2 * 256 * 256   # softmax + final norm input and output
    assert "loss_forward" in s.transient and s.transient["loss_forward"] == 2 * N
    assert "backward_working_set" not in s.transient


def test_native_fusion_against_megatron_ci():
    """Megatron-LM CI on H100 (validation/megatron_ci.yaml): gpt3_mcore_te_tp2_pp2_cross_entropy_loss_fusion
    (native fusion) peaks at 1,837,640,192 B and gpt3_mcore_te_tp2_pp2_resume_torch_dist, the same model and
    layout with the unfused loss, at 1,428,171,264 B: 409,468,928 B apart. One fp32 buffer of the last
    stage's logits is 4 B x 4,096 tokens x 25,216 (50,257 padded to 50,432, over TP 2) = 413,138,944 B."""
    measured = 1_837_640_192 - 1_428_171_264
    model = {**MODEL, "num_layers": 12, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 50257}
    par = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2}
    tr = {"seq_length": 1024, "micro_batch_size": 4, "world_size": 8}
    plain = estimate(make_config(model, par, tr)).stages[-1].allocated_bytes
    fused = estimate(make_config(model, par, {**tr, "cross_entropy_loss_fusion": True})).stages[-1].allocated_bytes
    assert fused - plain == 413_138_944
    assert abs(fused - plain - measured) / measured < 0.01


# flagsA28: precision.logit_dtype (Megatron-LM --output-logit-dtype).
def _logit_buffers(logit_dtype, params_dtype="bf16", **training):
    cfg = make_config(MODEL, training={"seq_length": 256, **training},
                      precision={"params_dtype": params_dtype, "logit_dtype": logit_dtype})
    return loss_buffers(resolve(load_config(cfg)))


def test_fp32_logits_under_bf16_weights_unfused():
    """--output-logit-dtype fp32 with bf16 weights, unfused loss, N = 256 x 1024 logit elements:
    the GEMM writes fp32 logits (4 N); ``.float()`` returns them as they are and the loss turns them into the
    softmax in place, so saved = 4 N and no bf16 copy lives to the end of the forward (0); nothing else during the
    loss backward (0); the output layer's backward casts the fp32 gradient (still the saved 4 N buffer) to bf16:
    + 2 N beside it. Against bf16 logits (4 N, 2 N, 2 N, -2 N): the forward end is 2 N lower, the output layer's
    backward 4 N higher."""
    assert _logit_buffers("fp32") == (4 * N, 0, 0, 2 * N)


def test_fp32_logits_under_bf16_weights_fused():
    """Native fusion adds torch.compile's out-of-place fp32 buffer (4 N) in the loss forward and backward:
    (4 N, 4 N, 4 N, 2 N). Transformer Engine's kernel keeps its own fp32 gradient (saved 4 N) beside the fp32 logits
    until the forward returns (4 N), returns it without a cast (0), and the output layer casts it to bf16 (2 N)."""
    assert _logit_buffers("fp32", cross_entropy_loss_fusion=True) == (4 * N, 4 * N, 4 * N, 2 * N)
    assert _logit_buffers("fp32", cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te") == \
        (4 * N, 4 * N, 0, 2 * N)


def test_logits_in_the_weights_own_dtype_change_nothing():
    """bf16 logits under bf16 weights and fp32 under fp32 weights: _linear_forward takes the plain matmul."""
    assert _logit_buffers("bf16") == _logit_buffers(None) == (4 * N, 2 * N, 2 * N, -2 * N)
    assert _logit_buffers("fp32", "fp32") == _logit_buffers(None, "fp32") == (4 * N, 0, 0, 0)


def test_bf16_logits_under_fp32_weights():
    """fp32 weights, bf16 logits: the fp32 copy is saved (4 N), the bf16 logits live to the forward's end (2 N)
    and the loss backward's bf16 gradient (2 N); the output layer holds that gradient (2 N) and its fp32 cast
    (4 N) once the saved 4 N is gone: 2 N + 4 N - 4 N = 2 N."""
    assert _logit_buffers("bf16", "fp32") == (4 * N, 2 * N, 2 * N, 2 * N)


def test_fp32_logits_move_the_last_stage_peak():
    """One GPU, one micro-batch (the test above's last-stage peak): with fp32 logits the loss forward's transient
    (the bf16 logits, 2 N) is gone."""
    cfg = make_config(MODEL, training={"seq_length": 256, "global_batch_size": 1},
                      precision={"logit_dtype": "fp32"})
    (s,) = estimate(cfg).stages
    assert s.activations["output"] == 4 * N + 2 * 2 * 256 * 256
    assert s.transient.get("loss_forward", 0) == 0


def test_logit_dtype_with_the_mxfp8_output_layer_is_refused():
    """Megatron-LM @ d98e8a64 : TELMHeadColumnParallelLinear raises on output_dtype."""
    import pytest
    from estimator import ConfigError
    cfg = make_config({**MODEL, "untie_embeddings_and_output_weights": True}, training={"seq_length": 256},
                      precision={"fp8": True, "fp8_recipe": "mxfp8", "fp8_output_proj": True, "logit_dtype": "fp32"})
    with pytest.raises(ConfigError, match="logit_dtype fp32.*output dtype"):
        estimate(cfg)

