"""The moments of a run beyond the steady training step (estimator/memory/phases.py): first step, evaluation,
checkpoint save and load, each with its own peak per stage, and the worst counted one in the totals and the verdict.

Expected values are derived by hand in each docstring from Megatron-Core's and Transformer Engine's code as
estimator/memory/phases.py cites it (Megatron-LM @ d98e8a64, TransformerEngine @ d0067d0d). The model:

    DENSE: 2 layers, h 256, 4 heads (MHA, head 64), SwiGLU ffn 512, vocab 1024 (a multiple of 128: no padding),
    untied, RMSNorm, no biases.
      layer: QKV 256 x 768 = 196,608 + proj 256 x 256 = 65,536 + fc1 256 x 1,024 = 262,144
             + fc2 512 x 256 = 131,072 + two norms 512 = 655,872
      N = 2 x 655,872 + embedding 262,144 + output 262,144 + final norm 256 = 1,836,288
"""

from __future__ import annotations

import json

import pytest

from estimator import estimate
from estimator.cli.commands import main
from estimator.config.errors import ConfigError
from estimator.formats.gpus import fit
from estimator.formats.megatron_args import read_megatron_args
from estimator.plan.verdicts import summary
from tests.conftest import make_config

N = 1_836_288
DENSE = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 512,
         "vocab_size": 1024, "untie_embeddings_and_output_weights": True}
#: The precision-aware optimizer with bf16 moments (Transformer Engine's FusedAdam keeps the fp32 master weights).
PA = {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}


def _est(training=None, precision=None):
    return estimate(make_config(DENSE, None, {"seq_length": 128, **(training or {})}, precision))


def test_parameter_count_by_hand():
    assert _est().parameters.total == N


def test_every_phase_is_reported_and_only_the_steady_step_counts_by_default():
    """Without eval_interval and save_interval (Megatron-LM's defaults: no evaluation during training, no
    checkpoints), the totals are the steady step's; every phase's peak is reported all the same."""
    e = _est()
    s = e.stages[0]
    assert set(s.phase_bytes) == {"steady_step", "first_step", "evaluation", "checkpoint_save", "checkpoint_load"}
    assert s.allocated_bytes == s.phase_bytes["steady_step"] == max(s.forward_backward_bytes, s.optimizer_step_bytes)
    assert e.peak_phase == "steady step" and e.to_dict()["peak_phase"] == "steady step"


def test_first_step_lacks_the_moments_in_its_forward_backward():
    """Adam's moments are created at the first optimizer.step() (torch's Adam._init_group, TE's FusedAdam
    _initialize_state), after the first forward/backward. With fp32 moments and no distributed optimizer they are
    2 x 4 B x N = 8 x 1,836,288 = 14,690,304 B. At seq 4096 the forward/backward (activations of 4,096 tokens) is
    above the optimizer step even without them, so the first step's peak is the steady one less exactly that, and
    never above it."""
    s = _est({"seq_length": 4096}).stages[0]
    assert s.peak_phase == "forward_backward"
    assert s.phase_bytes["steady_step"] - s.phase_bytes["first_step"] == 14_690_304


@pytest.mark.parametrize("training", [{}, {"recompute_granularity": "full"}, {"world_size": 4,
                                                                             "use_distributed_optimizer": True}])
def test_first_step_is_never_above_the_steady_step(training):
    """The first step's optimizer step holds exactly the steady one's buffers (states created before the
    temporaries), and its forward/backward holds less: never a peak of its own in allocated bytes."""
    s = _est(training, PA).stages[0]
    assert s.phase_bytes["first_step"] <= s.phase_bytes["steady_step"]


def test_checkpoint_save_with_the_precision_aware_optimizer():
    """torch_dist builds the whole sharded state dict before writing; with the precision-aware optimizer each
    state goes through TE's get_unscaled_state, which returns a new fp32 tensor for a bf16 moment: 2 copies x 4 B
    per main parameter. Distributed optimizer over DP 4: ceil(1,836,288 / 4) = 459,072 main parameters, so
    2 x 4 x 459,072 = 3,672,576 B more than the legacy torch format, which gathers through CPU buffers one
    parameter at a time. With full recompute at seq 128 the steady step holds less than that save: it is the peak,
    and the stage's totals, the fit and the verdict are the save's."""
    base = {"world_size": 4, "use_distributed_optimizer": True, "recompute_granularity": "full",
            "save_interval": 100}
    dist = _est(base, PA)
    legacy = _est({**base, "ckpt_format": "torch"}, PA)
    d, t = dist.stages[0], legacy.stages[0]
    assert d.phase_bytes["checkpoint_save"] - t.phase_bytes["checkpoint_save"] == 3_672_576
    assert d.phase_bytes["checkpoint_load"] - t.phase_bytes["checkpoint_load"] == 3_672_576
    assert d.transient["checkpoint_unscaled_optimizer_states"] == 3_672_576
    assert dist.peak_phase == "checkpoint save" and d.peak_phase == "checkpoint_save"
    assert d.allocated_bytes == d.phase_bytes["checkpoint_save"] > d.phase_bytes["steady_step"]
    assert d.allocated_bytes == d.weights_bytes + d.gradients_bytes + d.optimizer_bytes + d.activations_bytes \
        + d.transient_bytes
    assert legacy.peak_phase == "steady step"
    f = fit(dist, 80 * 2 ** 30)
    assert f[0].phase == "checkpoint save" and f[0].device_bytes == d.device_bytes
    assert "checkpoint save" in summary(f)


def test_checkpoint_save_without_copies_adds_nothing():
    """fp32 moments: get_unscaled_state is never called (Megatron-Core keeps the masters) and the state dict holds
    views: the save holds what lies between iterations, below the steady step."""
    s = _est({"save_interval": 100}).stages[0]
    assert s.phase_bytes["checkpoint_save"] <= s.phase_bytes["steady_step"]
    assert "checkpoint_unscaled_optimizer_states" not in s.transient


def test_evaluation_beside_the_fp32_gradient_copies():
    """With a bf16 gradient buffer the optimizer step makes fp32 copies of the gradients (main_param.grad =
    grad.float(), 4 B x N = 7,345,152 B without the distributed optimizer), freed only by the next train_step's
    zero_grad, so alive during evaluation. TE's FusedAdam has no temporaries: the optimizer step holds the states,
    the run-long buffers and those copies; evaluation holds the same plus one forward under no_grad, here the
    loss stage's logits, at least bf16 logits 2 B x 128 tokens x 1,024 + the loss's fp32 copy 4 B x 128 x 1,024 =
    786,432 B. With full recompute the forward/backward holds less, so evaluation is the peak when counted."""
    prec = {"accumulate_allreduce_grads_in_fp32": False}
    tr = {"recompute_granularity": "full"}
    off = _est(tr, prec).stages[0]
    e = _est({**tr, "eval_interval": 10}, prec)
    s = e.stages[0]
    assert s.transient["optimizer_fp32_grad_copies"] == 7_345_152
    assert s.phase_bytes["evaluation"] - s.phase_bytes["steady_step"] >= 786_432
    assert e.peak_phase == "evaluation" and s.allocated_bytes == s.phase_bytes["evaluation"]
    assert off.allocated_bytes == off.phase_bytes["steady_step"] < s.allocated_bytes
    # eval_iters 0 turns evaluation off (Megatron-LM: the loop runs eval_iters times)
    assert _est({**tr, "eval_interval": 10, "eval_iters": 0}, prec).peak_phase == "steady step"


def test_evaluation_is_below_training_when_activations_dominate():
    """No recompute at seq 4096: the training step holds every layer's activations of a micro-batch; evaluation
    holds one layer's forward at a time."""
    s = _est({"seq_length": 4096, "eval_interval": 10}).stages[0]
    assert s.phase_bytes["evaluation"] < s.phase_bytes["steady_step"] and s.peak_phase == "forward_backward"


def test_megatron_flags_set_the_phase_fields():
    cfg = read_megatron_args("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                             "--max-position-embeddings 128 --vocab-size 1024 --micro-batch-size 1 --bf16 "
                             "--save-interval 500 --ckpt-format torch --eval-interval 100 --eval-iters 10 "
                             "--async-save", world_size=1).config
    tr = cfg["training"]
    assert (tr["save_interval"], tr["ckpt_format"], tr["eval_interval"], tr["eval_iters"]) == (500, "torch", 100, 10)


@pytest.mark.parametrize("field,value", [("ckpt_format", "zarr"), ("save_interval", 0), ("eval_iters", -1)])
def test_bad_phase_inputs_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"training.{field}"):
        _est({field: value})


def test_cli_json_and_text_name_the_phase(capsys, tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(make_config(DENSE, None, {"seq_length": 128, "world_size": 4,
                                                      "use_distributed_optimizer": True,
                                                      "recompute_granularity": "full", "save_interval": 100}, PA)))
    assert main(["estimate", str(p), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["peak_phase"] == "checkpoint save" and d["stages"][0]["phase_bytes"]["checkpoint_save"] > 0
    assert main(["estimate", str(p)]) == 0
    out = capsys.readouterr().out
    assert "The peak is at the checkpoint save" in out


def test_timeline_ends_at_the_phase_that_holds_the_peak():
    """The timeline's highest point stays the stage's allocated bytes: a point after the optimizer step draws the
    checkpoint save that holds the peak."""
    from estimator.memory.timeline import stage_timelines
    e = _est({"world_size": 4, "use_distributed_optimizer": True, "recompute_granularity": "full",
              "save_interval": 100}, PA)
    t = stage_timelines(e)[0]
    assert t["peak_bytes"] == e.stages[0].allocated_bytes
    assert t["points"][-1]["phase"] == "checkpoint_save" and t["points"][-2]["phase"] == "optimizer"


def test_the_verdict_explains_a_phase_peak():
    """On a card just big enough for the steady step's upper bound but not the save's, the explanation names the
    phase and its own buffer (the 3,672,576 B of fp32 state copies, 0.00 GiB at two decimals)."""
    from estimator.plan.verdicts import explain
    e = _est({"world_size": 4, "use_distributed_optimizer": True, "recompute_granularity": "full",
              "save_interval": 100}, PA)
    s = e.stages[0]
    f = fit(e, s.device_bytes)      # the point fits exactly, its upper bound does not: amber
    assert f[0].verdict == "tight"
    assert any("peak is at its checkpoint save" in line and "checkpoint unscaled optimizer states" in line
               for line in explain(e, f, e.config))


@pytest.mark.parametrize("world_size,expected", [(1, 2_621_440), (4, 655_360)])
def test_checkpoint_save_dequantizes_fp8_weights(world_size, expected):
    """FP8 weights (fp8_param_gather) are dequantized for the writer (filesystem_async.py
    _clone_or_dequantize_if_needed) into bf16 copies of the linear weights this rank writes. Linear weights of
    DENSE: 2 x (196,608 + 65,536 + 262,144 + 131,072) = 1,310,720 (embedding, output layer and norms stay bf16).
    Fully parallel save spreads the replicas over the data-parallel ranks: 2 B x 1,310,720 = 2,621,440 B on one
    GPU, 2,621,440 / 4 = 655,360 B at DP 4. The legacy torch format writes through CPU buffers instead."""
    def save(fmt):
        cfg = make_config(DENSE, None, {"seq_length": 128, "save_interval": 10, "world_size": world_size,
                                        "use_distributed_optimizer": True, "ckpt_format": fmt},
                          {"fp8": True, "fp8_param_gather": True})
        return estimate(cfg).stages[0].phase_bytes["checkpoint_save"]
    assert save("torch_dist") - save("torch") == expected


def test_evaluation_micro_batch_scales_its_forward():
    """Megatron-LM's --eval-micro-batch-size: each tensor of the evaluation forward holds that many sequences, so
    its forward bytes are the training micro-batch's times eval_micro_batch_size / micro_batch_size: 4 x here."""
    prec = {"accumulate_allreduce_grads_in_fp32": False}
    tr = {"recompute_granularity": "full", "eval_interval": 10}
    one = _est(tr, prec).stages[0]
    four = _est({**tr, "eval_micro_batch_size": 4}, prec).stages[0]
    assert four.transient["evaluation_forward"] == 4 * one.transient["evaluation_forward"]
    assert four.phase_bytes["evaluation"] - one.phase_bytes["evaluation"] == 3 * one.transient["evaluation_forward"]
