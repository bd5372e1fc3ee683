"""The logits and the loss on the last stage (estimator/memory/loss.py) and how the last stage's peak uses them."""

from __future__ import annotations

from tests.conftest import make_config

from estimator import estimate
from estimator.config.load import load_config
from estimator.memory.loss import distillation_buffers, loss_buffers
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


def _te(version, **training):
    cfg = make_config(MODEL, training={"seq_length": 256, "cross_entropy_loss_fusion": True,
                                       "cross_entropy_fusion_impl": "te", **training},
                      precision={"transformer_engine_version": version})
    return loss_buffers(resolve(load_config(cfg)))


def test_transformer_engine_before_2_18_keeps_only_the_logits():
    """tever29: TransformerEngine release_v2.11 (the SimuMax runs' 2.11.0) to release_v2.17,
    transformer_engine/pytorch/triton/cross_entropy.py: cross_entropy_forward writes the gradient into ``_input``,
    the bf16 logits, and returns them; CrossEntropyFunction saves them. N = 256 x 1024 = 262,144 logit elements:
    saved 2 B x N = 524,288 B; nothing else of the logits' size at the end of the forward (0) or in the backward
    (0); the output layer reads the gradient where it lies (0). From 2.18 (01bbe3e): saved 4 N = 1,048,576 B, the
    bf16 logits 2 N = 524,288 to the forward's end and the gradient's bf16 cast 2 N in the backward, the output
    layer's backward 2 N - 4 N = -524,288."""
    old = (524_288, 0, 0, 0)
    new = (1_048_576, 524_288, 524_288, -524_288)
    for version, want in (("2.11", old), ("2.11.0", old), ("2.17", old), ("2.18", new), ("2.18.0", new),
                          ("2.20", new), ("3.0", new)):
        assert _te(version) == want, version


def test_transformer_engine_version_changes_only_the_te_loss():
    """The version is read only for cross_entropy_fusion_impl te: the unfused and native losses are the same at
    2.11 and 2.18 (unfused (4 N, 2 N, 2 N, -2 N), native (4 N, 6 N, 6 N, -2 N))."""
    for training in ({"cross_entropy_loss_fusion": False}, {"cross_entropy_fusion_impl": "native"}):
        assert _te("2.11", **training) == _te("2.18", **training)


def test_transformer_engine_before_2_18_with_fp32_logits():
    """--output-logit-dtype fp32 before TE 2.18: the kernel writes the gradient into the fp32 logits and saves
    them (4 N = 1,048,576 B), nothing more in the forward or backward; the output layer's backward casts that fp32
    gradient to bf16 beside it (2 N = 524,288)."""
    cfg = make_config(MODEL, training={"seq_length": 256, "cross_entropy_loss_fusion": True,
                                       "cross_entropy_fusion_impl": "te"},
                      precision={"transformer_engine_version": "2.14", "logit_dtype": "fp32"})
    assert loss_buffers(resolve(load_config(cfg))) == (1_048_576, 0, 0, 524_288)


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


# distill29: offline distillation from cached teacher logits (Megatron-LM --logits-load-dir).
def _kd(**training):
    cfg = make_config(MODEL, training={"seq_length": 256, "distillation_cached_logits": True,
                                       "distillation_top_k": 64, **training})
    r = resolve(load_config(cfg))
    return distillation_buffers(r), loss_buffers(r)


def test_distillation_buffers_by_hand():
    """T = 256 tokens, V/t = 1024, N = 262,144 logit elements, K = 64, fp16 teacher values (2 B), bf16 logits.

    Saved (cached_logits_loss.py topk_kl_div, ghost token on): exp(logits - max) kept by exp's backward, 4 N =
    1,048,576; the fp32 log-softmax kept by gather's backward, 4 N = 1,048,576; per token gather's int64 indices
    8 x 64 = 512, exp of the gathered log-probabilities 4 x 64 = 256, the bool mask it is multiplied by 64, the
    teacher's probabilities over 65 entries kept by the KL product 4 x 65 = 260, the concatenated bool mask 65, and
    four fp32 scalars 16: 1,173 B x 256 = 300,288. Saved: 2,397,440.

    End of its forward, besides that: the captured bf16 logits 2 N = 524,288 and their fp32 copy 4 N = 1,048,576;
    per token the teacher values as loaded 2 x 64 = 128, their int64 indices 512, the masked exponentials 256, the
    student's and the teacher's concatenations, the KL terms and their masked product 4 x 4 x 65 = 1,040: 1,936 B
    x 256 = 495,616. Forward: 2,068,480.

    Backward, besides the saved: gather's zeroed fp32 gradient 4 N = 1,048,576 and its incoming [T, K] gradient
    4 x 256 x 64 = 65,536: 1,114,112."""
    kd, _ = _kd()
    assert kd == (2_397_440, 2_068_480, 1_114_112, 0)


def test_distillation_beside_the_unfused_cross_entropy():
    """Unfused cross entropy (4 N, 2 N, 2 N, -2 N) with the KL loss above: saved 4 N + 2,397,440 = 3,446,016; the
    forward's moment is the KL loss's (2,068,480, its own 2 N of logits included); the backward's the KL loss's
    (1,114,112 against 2 N + 2 N - 2,397,440 for the cross entropy's, the KL gradient waiting); the output layer's
    backward -2 N less the KL loss's saved: -524,288 - 2,397,440 = -2,921,728."""
    _, both = _kd()
    assert both == (4 * N + 2_397_440, 2_068_480, 1_114_112, -2 * N - 2_397_440)


def test_distillation_k_and_dtype():
    """K counts up to the padded vocabulary (LogitsSaverHooks keeps min(K, V)): K = 5,000 is K = 1,024 here, saved
    8 N + 256 x (18 x 1,024 + 21) = 2,097,152 + 4,723,968 = 6,821,120. fp32 teacher values add 2 B per K to the
    forward only: 256 x 64 x 2 = 32,768."""
    assert _kd(distillation_top_k=5000)[0].saved == 6_821_120
    assert _kd(distillation_logprobs_dtype="fp32")[0].forward_extra - _kd()[0].forward_extra == 32_768
    assert _kd(distillation_logprobs_dtype="fp32")[0].saved == _kd()[0].saved


def test_distillation_on_the_last_stage_only_and_not_the_mtp_heads():
    """The KL loss's saved tensors are the loss chunk's; an MTP head's logits get the cross entropy alone."""
    base = {"seq_length": 256, "global_batch_size": 1}
    kd = {**base, "distillation_cached_logits": True, "distillation_top_k": 64}
    (plain,) = estimate(make_config(MODEL, training=base)).stages
    (dist,) = estimate(make_config(MODEL, training=kd)).stages
    assert dist.activations["output"] - plain.activations["output"] == 2_397_440
    assert dist.transient["loss_forward"] == 2_068_480
    mtp = {**MODEL, "mtp_num_layers": 1}
    (p1,) = estimate(make_config(mtp, training=base)).stages
    (d1,) = estimate(make_config(mtp, training=kd)).stages
    assert d1.activations["output"] - p1.activations["output"] == 2_397_440
    pp = estimate(make_config({**MODEL, "num_layers": 4}, {"pipeline_model_parallel_size": 2},
                              {**kd, "world_size": 2, "global_batch_size": 2}))
    ref = estimate(make_config({**MODEL, "num_layers": 4}, {"pipeline_model_parallel_size": 2},
                               {**base, "world_size": 2, "global_batch_size": 2}))
    assert pp.stages[0].to_dict() == ref.stages[0].to_dict()
    assert pp.stages[1].allocated_bytes > ref.stages[1].allocated_bytes


def test_distillation_refusals_name_the_field():
    """Without K; with a vocabulary above 2^17 after padding (17-bit indices); with fp32 logits; K without the
    switch."""
    import pytest
    from estimator import ConfigError
    on = {"seq_length": 256, "distillation_cached_logits": True}
    with pytest.raises(ConfigError, match="distillation_top_k: is required"):
        estimate(make_config(MODEL, training=on))
    with pytest.raises(ConfigError, match="vocab_size.*131,072"):
        estimate(make_config({**MODEL, "vocab_size": 131_073}, training={**on, "distillation_top_k": 8}))
    with pytest.raises(ConfigError, match="fp32 logits"):
        estimate(make_config(MODEL, training={**on, "distillation_top_k": 8}, precision={"logit_dtype": "fp32"}))
    with pytest.raises(ConfigError, match="distillation_top_k: applies only"):
        estimate(make_config(MODEL, training={"seq_length": 256, "distillation_top_k": 8}))
