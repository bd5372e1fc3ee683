"""RL training's phases (estimator/memory/phases.py, "RL training"): the actor's and the reference model's
log-probability passes, the policy update and the rollout residency, with the rollout engine's share in the verdict.

Expected values are derived by hand in each docstring from the framework code estimator/memory/phases.py cites
(verl @ b178a3cd5, NeMo-RL @ 7ea279abf, slime @ 624b824a8, Megatron-LM @ d98e8a64). The example run is Qwen2.5-7B
trained with GRPO on 8 GPUs, TP 2 (DP 4), sequence 8192 (prompt 1024 + response 7168), 256 sequences per step:

    padded vocabulary: 152,064 is a multiple of 128 x TP 2 = 256 (152,064 = 594 x 256): V = 152,064, V / TP = 76,032
    weights per GPU (bf16), TP 2:
      embedding 152,064 x 3,584 / 2 = 272,498,688; output layer the same (untied); final norm 3,584
      layer: QKV (3,584 x 4,608 + 4,608 bias) / 2 = 8,259,840; proj 3,584^2 / 2 = 6,422,528;
             fc1 3,584 x 37,888 / 2 = 67,895,296; fc2 18,944 x 3,584 / 2 = 33,947,648; two norms 7,168
             = 116,532,480; x 28 = 3,262,909,440
      total 3,262,909,440 + 2 x 272,498,688 + 3,584 = 3,807,910,400 parameters -> 7,615,820,800 B
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from estimator.formats.gpus import GPU, fit
from estimator.memory.phases import logprob_bytes_per_logit
from tests.conftest import make_config

QWEN25_7B = {"num_layers": 28, "hidden_size": 3584, "num_attention_heads": 28, "num_query_groups": 4,
             "ffn_hidden_size": 18944, "vocab_size": 152064, "max_position_embeddings": 131072,
             "position_embedding_type": "rope", "normalization": "RMSNorm", "activation_func": "swiglu",
             "gated_linear_unit": True, "add_qkv_bias": True, "untie_embeddings_and_output_weights": True}
GRPO = {"world_size": 8, "micro_batch_size": 2, "global_batch_size": 256, "seq_length": 8192,
        "sequence_parallel": True, "use_distributed_optimizer": True, "rl_algorithm": "grpo",
        "rl_reference_model": "offloaded", "rl_response_length": 7168, "rl_logprob_micro_batch_size": 4,
        "rl_offload_params": True, "rl_offload_grads": True, "rl_offload_optimizer": True,
        "rl_rollout_gpu_memory_fraction": 0.6}
WEIGHTS = 7_615_820_800
LOGITS_MB4 = 4 * 8192 * 76_032          # logit elements of one log-prob micro-batch of 4 on one GPU: 2,491,416,576
H100 = 85_520_809_984                   # H100 80GB as the GPU table gives it


def _stage(**training):
    return estimate(make_config(QWEN25_7B, {"tensor_model_parallel_size": 2}, {**GRPO, **training})).stages[0]


def test_bytes_per_logit_of_a_log_prob_pass():
    """verl's logits_processor (no_grad): bf16 logits 2 B + the fp32 copy of Megatron's vocab_parallel_cross_entropy
    (``.float()``) 4 B = 6; with the entropy, the clone 2 B besides, and _VocabParallelEntropy's shifted exponentials
    2 B (freed before the cross entropy): max(2+2+2, 2+2+4) = 8. fp32 logits: ``.float()`` returns them, 4; with the
    entropy max(3 x 4, 2 x 4) = 12."""
    assert logprob_bytes_per_logit(2, False) == 6
    assert logprob_bytes_per_logit(2, True) == 8
    assert logprob_bytes_per_logit(4, False) == 4
    assert logprob_bytes_per_logit(4, True) == 12


def test_weights_per_gpu_by_hand():
    assert _stage().weights_bytes == WEIGHTS


def test_rl_phases_are_reported_only_for_an_rl_run():
    """Plain training reports the five phases; GRPO with a reference model and a colocated engine adds four."""
    plain = estimate(make_config(QWEN25_7B, {"tensor_model_parallel_size": 2},
                                 {k: v for k, v in GRPO.items() if not k.startswith("rl_")})).stages[0]
    assert "actor_logprob" not in plain.phase_bytes
    s = _stage()
    assert {"actor_logprob", "reference_logprob", "policy_update", "rollout"} <= set(s.phase_bytes)
    assert "reference_logprob" not in _stage(rl_reference_model="none").phase_bytes
    assert "rollout" not in _stage(rl_rollout_gpu_memory_fraction=None).phase_bytes


def test_log_prob_logits_per_micro_batch_by_hand():
    """Without the entropy (rl_logprob_entropy false), log-prob micro-batch 4 vs 2: the logits of 2 more sequences, 2 x 8,192 x 76,032 = 1,245,708,288 elements
    x 6 B = 7,474,249,728 B (the logits are far above one layer's forward at these sizes). With the entropy, 2 B
    more per element of the micro-batch of 4: 2,491,416,576 x 2 = 4,982,833,152 B, and the entropies kept beside
    the log-probs: 64 sequences (256 / DP 4) x 7,168 response tokens x 4 B (fp32) x 2 (list and torch.cat)
    = 3,670,016 B."""
    mb4, mb2 = _stage(rl_logprob_entropy=False), _stage(rl_logprob_entropy=False, rl_logprob_micro_batch_size=2)
    assert mb4.phase_bytes["actor_logprob"] - mb2.phase_bytes["actor_logprob"] == 7_474_249_728
    ent = _stage()     # verl's default: the actor's pass computes the entropy
    assert ent.phase_bytes["actor_logprob"] - mb4.phase_bytes["actor_logprob"] == 4_982_833_152 + 3_670_016


def test_log_prob_pass_holds_weights_logits_and_batch_buffers():
    """Everything offloaded (verl's param_offload frees the gradient buffer; optimizer_offload), no entropy: the
    actor's pass holds its weights (loaded back, load_grad=False), the run-long buffers, the logits of one micro-batch of 4
    (2,491,416,576 x 6 B = 14,948,499,456 B = 13.92 GiB) and the log-probs of the batch (64 x 7,168 x 4 B x 2 =
    3,670,016 B). The run-long buffers are what the rollout phase holds with nothing else resident. The reference
    pass never computes the entropy (verl: calculate_entropy=False), so it holds the same even when the actor's
    pass computes it."""
    s = _stage(rl_logprob_entropy=False)
    persistent = s.phase_bytes["rollout"]
    assert s.phase_bytes["actor_logprob"] == WEIGHTS + persistent + 14_948_499_456 + 3_670_016
    # An offloaded reference brings its own weights for its pass while the actor's are on the host: the same bytes.
    assert s.phase_bytes["reference_logprob"] == s.phase_bytes["actor_logprob"]
    # Swapped (NeMo-RL, slime): the reference's weights are copied into the actor's parameters: the same again.
    assert (_stage(rl_reference_model="swapped", rl_logprob_entropy=False).phase_bytes["reference_logprob"]
            == s.phase_bytes["actor_logprob"])
    assert _stage().phase_bytes["reference_logprob"] == s.phase_bytes["actor_logprob"]


def test_entropy_in_the_update_keeps_the_logits_and_softmax():
    """rl_entropy (verl's entropy_coeff != 0): _VocabParallelEntropy saves the logits and their softmax, 2 + 2 B per
    logit element of one micro-batch of 2: 2 x 8,192 x 76,032 = 1,245,708,288 elements x 4 B = 4,982,833,152 B on
    top of the update's forward/backward peak (above its optimizer step here)."""
    assert (_stage(rl_entropy=True).phase_bytes["policy_update"] - _stage().phase_bytes["policy_update"]
            == 4_982_833_152)


def test_resident_reference_and_rollout_residency():
    """A resident reference keeps 7,615,820,800 B of weights all step; in the policy update it adds those and the
    reference log-probs of the micro-batch in flight (PP 1: one micro-batch of 2 x 7,168 tokens x 4 B = 57,344 B).
    The rollout holds the actor's weights when rl_offload_params is off: 7,615,820,800 B more."""
    none, res = _stage(rl_reference_model="none"), _stage(rl_reference_model="resident")
    assert res.phase_bytes["policy_update"] - none.phase_bytes["policy_update"] == WEIGHTS + 57_344
    assert res.phase_bytes["rollout"] - none.phase_bytes["rollout"] == WEIGHTS
    assert _stage(rl_offload_params=False).phase_bytes["rollout"] - _stage().phase_bytes["rollout"] == WEIGHTS


def test_offloaded_states_are_not_counted_in_a_log_prob_peak():
    """With nothing offloaded and the logits of 64 sequences in one pass (log-prob micro-batch 64: 64 x 8,192 x
    76,032 = 39,862,665,216 elements x 6 B = 239,175,991,296 B), the actor's pass is the stage's peak and holds weights, gradients and optimizer
    states; with them offloaded, the stage reports only the weights. (No reference model here: an offloaded one's pass
    would hold the actor's resident weights and its own, above the actor's.)"""
    on = _stage(rl_offload_params=False, rl_offload_grads=False, rl_offload_optimizer=False,
                rl_logprob_micro_batch_size=64, rl_reference_model="none", rl_logprob_entropy=False)
    assert on.peak_phase == "actor_logprob" and on.phase_name == "actor log-prob pass"
    assert on.transient["logprob_forward"] == 239_175_991_296
    assert on.allocated_bytes == on.phase_bytes["actor_logprob"]
    off = _stage(rl_logprob_micro_batch_size=64, rl_reference_model="none", rl_logprob_entropy=False)
    assert off.peak_phase == "actor_logprob"
    assert (off.weights_bytes, off.gradients_bytes, off.optimizer_bytes) == (WEIGHTS, 0, 0)
    assert off.allocated_bytes == off.phase_bytes["actor_logprob"]


def test_rollout_engine_share_sets_the_verdict():
    """Nothing offloaded: the training side keeps W + G + O (about 32 GiB) beside vLLM's 0.6 x 85,520,809,984 =
    51,312,485,990 B: over the H100's capacity, so the stage does not fit at its rollout, though its training step
    alone fits within the band. The point is the training side's resident bytes with the CUDA context and NCCL
    buffers, plus the engine's share. Everything offloaded: the training step sets the verdict again."""
    e = estimate(make_config(QWEN25_7B, {"tensor_model_parallel_size": 2},
                             {**GRPO, "rl_offload_params": False, "rl_offload_grads": False,
                              "rl_offload_optimizer": False}))
    s = e.stages[0]
    f = fit(e, H100)[0]
    assert f.phase == "rollout" and f.verdict == "no"
    assert f.device_bytes == s.phase_bytes["rollout"] + (s.device_bytes - s.reserved_bytes) + 51_312_485_990
    off = estimate(make_config(QWEN25_7B, {"tensor_model_parallel_size": 2}, GRPO))
    assert fit(off, H100)[0].phase == "policy update"


@pytest.mark.parametrize("training, field", [
    ({"rl_entropy": True}, "training.rl_entropy"),
    ({"rl_logprob_entropy": False}, "training.rl_logprob_entropy"),
    ({"rl_rollout_gpu_memory_fraction": 0.5}, "training.rl_rollout_gpu_memory_fraction"),
    ({"rl_algorithm": "grpo", "rl_response_length": 9000}, "training.rl_response_length"),
    ({"rl_algorithm": "grpo", "rl_rollout_gpu_memory_fraction": 1.0}, "training.rl_rollout_gpu_memory_fraction"),
    ({"rl_algorithm": "dpo"}, "training.rl_algorithm"),
])
def test_bad_rl_input_names_the_field(training, field):
    with pytest.raises(ConfigError, match=field.split(".")[1]):
        estimate(make_config(QWEN25_7B, None, {"seq_length": 8192, **training}))
