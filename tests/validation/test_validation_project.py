"""This project's own GPU runs (validation/project_runs.yaml) against the estimate.

Expected values are the measured bytes of the data file (PyTorch's allocator on one NVIDIA H200, Megatron-LM
@ d98e8a64 pretrain_gpt.py, --transformer-impl local, torch.optim.AdamW). Batch 1 was seen while the
optimizer-step and local-attention modelling was written (docs/validation.md says so); the targets asserted
here are the accuracy reached on it: every run within 1 % overall and in each phase, and the phase holding
the peak named right. Batch 2 is held out (predictions written before the runs): within 1 % overall, its
peak phase named right and within 1 %. Batch 3 (one H100, ten MoE variants, predictions written before the
run, so held out when it ran): every peak phase named right, every peak and every optimizer step within 1 %.
Its forward/backward peaks were over by up to 3.4 %, growing with top-k, until estimator/model/layers/moe.py
stopped keeping an expert-output-sized activation that Megatron-Core does not save; that change was checked
against it, so it is marked as seen while developing now. Batch 4 (one H100, twelve single changes, predictions
written before the run) is held out: eleven of twelve were within 0.7 % as predicted; the twelfth (selective
recompute of ``moe``, whose step keeps a recomputed input alive) was -1.42 % with the phase named wrong until
estimator/memory/optimizer_step.py counted that input from Megatron-Core's code; the SGD run's step (not modelled
then) is modelled since from PyTorch's code. Batch 5 (one H100, eleven runs, predicted with those changes) is
held out: nine within 0.83 % with the phase right as predicted; the gated shared expert (-1.21 %) and FSDP2's
optimizer step (-0.60 %, phase wrong) are modelled since from Megatron-Core's code. Batch 6 (one H100, eleven
runs, predicted with those changes) is held out: the eight runs the estimator stated (MTP, recompute of
``mla_up_proj`` and ``shared_experts``, MQA, kv_channels, logging flags) were within 0.81 % with the phase right
as predicted. Its Megatron-FSDP run (DP 1) was +4.62 % with the phase wrong (gathered buffers counted that a
one-rank group never allocates, and no step); it is modelled since from Megatron-FSDP's code
(estimator/memory/features/fsdp.py): -0.01 %, phase right. Its two optimizer CPU offload runs were refused (the
precision-aware optimizer without Transformer Engine, which Megatron-Core accepts when offloading); they are
modelled since from HybridDeviceOptimizer's code (estimator/memory/features/offload.py): -0.29 % and -0.21 %.
Batch 7 (one H100, nine runs: Muon, a whole-iteration CUDA graph, 64 experts top-8, MTP under full recompute,
FSDP2 on MoE, interleaved MoE layers, per-token loss; predicted with those changes) is held out: eight within
0.86 % with the phase right as predicted; the 64 small experts -1.53 % (phase right), the caching allocator's
block tails of per-parameter optimizer tensors, checked against the measured tails below. The CUDA graph run's
capture-stream workspaces and private pool are modelled since (-0.70 -> -0.14 %; tests/memory/features/test_cuda_graphs.py).
Batch 8 (one H100, four runs) made Muon's own step working set the peak; the Muon step model was fixed against it
(the order in which the matrices are stepped), so it is marked as seen while developing: within 0.01 %
(tests/memory/features/test_muon_step.py); its whole-iteration CUDA graph run on a drop-and-pad MoE model was predicted: -0.68 %.
Batch 9 (one H100, held out): Muon with fp32 Newton-Schulz iterates, predicted to the byte (-0.005 %).
"""

from __future__ import annotations

import shlex

import pytest

from estimator.config.load import load_config
from estimator.formats.megatron_args import parse_megatron_args
from estimator.validation.project_runs import load_data, project_cases

DATA = load_data()
CASES = {c.id: c for c in project_cases()}
IDS = sorted(CASES)
MIB = 2 ** 20


def _case(run: str, batch: int = 1) -> dict:
    return next(c for c in DATA["cases"] if c["run"] == run and c["batch"] == batch)


def test_batch_one_is_marked_as_seen_while_developing():
    b1 = next(b for b in DATA["batches"] if b["batch"] == 1)
    assert b1["developed_against"] is True and b1["gpu"] == "NVIDIA H200"
    assert b1["megatron_lm_revision"] == "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
    assert len([c for c in DATA["cases"] if c["batch"] == 1]) == 12


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_config_is_what_the_importer_reads_from_the_launch_flags(case):
    """The hand-written configuration means the same as the exact flags, except which Adam runs: that is the
    environment (no Transformer Engine, no Apex), not a flag."""
    parsed, _ = parse_megatron_args(shlex.split(case["megatron_args"]), world_size=case["world_size"])
    mine = load_config(case["config"]).to_full_dict()
    theirs = load_config(parsed).to_full_dict()
    mine["training"].pop("optimizer_implementation")
    assert theirs["training"].pop("optimizer_implementation") == "te_fused"
    assert mine == theirs


#: Held-out runs whose gap is the caching allocator's block rounding, which the estimator does not model; each is
#: checked in a test of its own against that measured rounding instead of the 1 % bound.
ALLOCATOR_ROUNDING = {"prj-b7-b7-moe-64x176-top8"}


@pytest.mark.parametrize("cid", sorted(set(IDS) - ALLOCATOR_ROUNDING))
def test_overall_peak_within_1_percent(cid):
    c = CASES[cid]
    assert abs(c.comparison.error_pct) <= 1.0, (cid, c.comparison.measured_gib, c.comparison.estimated_gib)


SEEN = {c["id"] for c in DATA["cases"] if c["batch"] == 1}


@pytest.mark.parametrize("cid", sorted(SEEN))
def test_each_phase_within_1_percent_and_the_peak_phase_named_right(cid):
    """Batch 1 (seen while developing): both phases within 1 %."""
    c = CASES[cid]
    assert abs(c.fwd_bwd_error_pct) <= 1.0, (cid, c.measured_fwd_bwd_gib, c.estimated_fwd_bwd_gib)
    assert abs(c.step_error_pct) <= 1.0, (cid, c.measured_step_gib, c.estimated_step_gib)
    assert c.phase_matches, (cid, c.measured_phase, c.estimated_phase)


@pytest.mark.parametrize("cid", sorted(set(IDS) - SEEN - ALLOCATOR_ROUNDING))
def test_held_out_runs_name_the_peak_phase_and_hold_it_within_1_percent(cid):
    """Batch 2 (held out: predictions written before the runs): the phase holding the peak is named right and
    estimated within 1 %. The phase below the peak is not asserted: on the held-out runs it is off by up to
    13 % (the forward/backward phase of a full-recompute run without the distributed optimizer and with a bf16
    gradient buffer, whose peak is the optimizer step), which docs/validation.md reports."""
    c = CASES[cid]
    assert c.phase_matches, (cid, c.measured_phase, c.estimated_phase)
    err = c.step_error_pct if c.measured_phase == "optimizer_step" else c.fwd_bwd_error_pct
    assert abs(err) <= 1.0, (cid, c.measured_phase, err)


def test_many_small_experts_gap_is_the_allocators_block_rounding():
    """b7_moe_64x176_top8 (batch 7, held out): 64 experts of 176 x 2048 in each of 8 layers, 786,466,816
    parameters, 1,024 expert weights of 2.75 MiB (fc1, fp32) and 1.375 MiB (fc2). The distributed optimizer keeps
    one fp32 master tensor per parameter and Adam two moments per parameter, each its own allocation; tensors of
    1 to 10 MiB come out of 20 MiB segments of PyTorch's caching allocator, which leaves a segment's last tail of
    at most 1 MiB inside the block it hands out (it splits a large-pool block only when more than 1 MiB would be
    left), and max_memory_allocated counts whole blocks. Measured, beyond the model states' bytes:

        after setup:     7,948,032,512 - 10 B x 786,466,816 (bf16 weight, fp32 gradient, fp32 master)
                         = 83,364,352 B (the masters' tails; dense_base, whose tensors are all > 10 MiB: 2 KiB)
        after the steps: 14,543,069,696 - (18 B x 786,466,816 + 64 MiB cuBLAS workspaces + 128 MiB global buffer)
                         = 185,340,416 B (masters and both moments)

    The estimate counts bytes, not blocks: -1.53 % at the peak (the optimizer step, phase right). Adding the
    measured tails of the states to it leaves -0.49 %, the rest being the same rounding of torch AdamW's
    per-tensor temporaries during the step. Not modelled: the tails depend on every tensor's size and on the
    order of allocation."""
    cid = "prj-b7-b7-moe-64x176-top8"
    c, m = CASES[cid], _case("b7_moe_64x176_top8", batch=7)["measured"]
    N = 786_466_816
    assert m["allocated_after_setup_bytes"] - 10 * N == 83_364_352
    tails = m["allocated_after_last_iteration_bytes"] - (18 * N + 192 * MIB)
    assert tails == 185_340_416
    assert c.phase_matches and c.measured_phase == "optimizer_step"
    assert -2.0 < c.comparison.error_pct < -1.0
    est = c.comparison.estimated_gib * 2 ** 30
    assert abs(est + tails - m["peak_allocated_bytes"]) / m["peak_allocated_bytes"] < 0.006


def test_moe_batch_on_an_h100_names_every_peak_phase():
    """Batch 3: ten MoE runs on one H100, predictions written before the run; every peak phase named right and
    every optimizer-step peak within 1 %. The MoE change made after it was checked against it: it is marked as
    seen while developing (no longer held out)."""
    b3 = next(b for b in DATA["batches"] if b["batch"] == 3)
    assert b3["developed_against"] is True and b3["gpu"].startswith("NVIDIA H100")
    cases = [CASES[c["id"]] for c in DATA["cases"] if c["batch"] == 3]
    assert len(cases) == 10
    assert all(c.phase_matches for c in cases)
    assert max(abs(c.step_error_pct) for c in cases) <= 1.0


def test_model_states_by_hand_match_the_measured_allocator():
    """dense_base, 508,594,176 parameters, bf16, fp32 gradient buffer, distributed optimizer on one GPU:

        after setup:  bf16 weights 2 + fp32 gradients 4 + fp32 master weights 4 = 10 B x N = 5,085,941,760
                      (PyTorch's Adam creates its moments at the first step), measured 5,085,943,808 (+2 KiB);
        after a step: + exp_avg 4 + exp_avg_sq 4 = 18 B x N = 9,154,695,168, + two cuBLAS workspaces
                      (64 MiB) + Megatron's global buffer for the scores (2 B x 16 heads x 2048^2 = 128 MiB)
                      = 9,356,021,760, measured 9,357,073,408 (+1 MiB).
    """
    m = _case("dense_base")["measured"]
    N = 508_594_176
    assert m["allocated_after_setup_bytes"] - 10 * N == 2048
    assert 0 <= m["allocated_after_last_iteration_bytes"] - (18 * N + 192 * MIB) <= 2 * MIB


def test_torch_adamw_temporaries_by_hand():
    """During optimizer.step() PyTorch's foreach AdamW computes exp_avg_sq.sqrt() for a whole parameter group:
    the step's peak minus what stays allocated after it is 4 B per parameter of the largest group. Megatron
    steps the parameters without weight decay (norm weights: 8 layers x 2 x 2048 + 2048 = 34,816) as a group
    of their own, so the measurement is 4 x (508,594,176 - 34,816) = 2,034,237,440 B (+ 2 KiB); the estimate
    counts all parameters, 4 x 508,594,176 = 2,034,376,704 B, 139 KiB (0.007 %) more."""
    m = _case("dense_base")["measured"]
    it = m["per_iteration"][-1]
    assert it["optimizer_allocated_bytes"] - it["allocated_after_bytes"] == 4 * (508_594_176 - 34_816) + 2048
    from estimator import estimate
    from estimator.memory.optimizer_step import step_buffers
    from estimator.model.resolve import resolve
    from estimator.memory.states import byte_model
    r = resolve(load_config(_case("dense_base")["config"]))
    assert step_buffers(r, byte_model(r), 508_594_176, 0, 1).temporaries == 4 * 508_594_176
    assert estimate(_case("dense_full_recompute")["config"]).stages[0].transient["optimizer_temporaries"] == \
        4 * 508_594_176


def test_bf16_gradients_are_copied_to_fp32_for_the_step_by_hand():
    """--grad-reduce-in-bf16: Megatron-Core's ``main_param.grad = shard_model_grad.float()`` keeps an fp32 copy
    of the gradients from the step to the next zero_grad: after a step 2 (weights) + 2 (bf16 gradients) +
    12 (Adam) + 4 (copies) = 20 B per parameter, 1,017,188,352 B more than dense_base's 18 B (measured:
    1,017,188,352 B more)."""
    grad_bf16 = _case("dense_grad_bf16")["measured"]["allocated_after_last_iteration_bytes"]
    base = _case("dense_base")["measured"]["allocated_after_last_iteration_bytes"]
    assert grad_bf16 - base == 2 * 508_594_176


def test_optimizer_cpu_offload_split_and_staging_by_hand():
    """Batch 6, dense_base with --use-precision-aware-optimizer --optimizer-cpu-offload (HybridDeviceOptimizer,
    no Transformer Engine). Fraction 0.5 of 508,594,176: threshold 254,297,088; whole tensors move in the
    distributed optimizer's order: the output layer (65,536,000), then each layer from the last (fc2 11,534,336,
    fc1 23,068,672, QKV 8,388,608, proj 4,194,304: 47,185,920), 4 layers -> 254,279,680 (17,408 below), layer
    3's fc2 -> 265,814,016 moved; 242,780,160 stay on the GPU with an fp32 copy made at setup (4 B) and two fp32
    moments from the first step (8 B). The step adds an fp32 buffer of the largest moved tensor, the output
    layer: 4 x 65,536,000 = 262,144,000 B (+ 2,560 B of small tensors) at both fractions."""
    full, half = _case("b6_dense_optim_offload", 6)["measured"], _case("b6_dense_optim_offload_half", 6)["measured"]
    on_gpu = 508_594_176 - (65_536_000 + 4 * 47_185_920 + 11_534_336)
    assert on_gpu == 242_780_160
    assert half["allocated_after_setup_bytes"] - full["allocated_after_setup_bytes"] == 4 * on_gpu
    for m in (full, half):
        it = m["per_iteration"][-1]
        assert it["optimizer_allocated_bytes"] - it["allocated_after_bytes"] == 4 * 65_536_000 + 2560
    from estimator import estimate
    s = estimate(_case("b6_dense_optim_offload_half", 6)["config"]).stages[0]
    assert s.optimizer_bytes == 12 * on_gpu
    persistent = s.transient["workspaces"] + s.transient["global_memory_buffer"]
    assert s.optimizer_step_bytes - (s.weights_bytes + s.gradients_bytes + s.optimizer_bytes) - persistent == \
        4 * 65_536_000
