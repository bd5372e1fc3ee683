"""The Muon optimizer step (estimator/features/muon_step.py), against this project's H100 measurements and hand
calculations from emerging_optimizers 0.3.0 and Megatron-LM @ d98e8a64 as the module cites them.

The model of the measurements (this project's batch 7, Megatron-LM @ d98e8a64, one H100, world size 1,
``--transformer-impl local``, bf16, torch AdamW for the non-matrix parameters):

    8 layers, h 2048, 16 heads x 128, 8 query groups, SwiGLU ffn 5632, vocab 32000 (a multiple of 128), untied.
    per layer: QKV (16 + 2 x 8) x 128 = 4096 x 2048 = 8,388,608; proj 2048 x 2048 = 4,194,304;
               fc1 11264 x 2048 = 23,068,672; fc2 2048 x 5632 = 11,534,336; two RMSNorms 4,096
    matrices (Muon): 8 x 47,185,920 = 377,487,360
    embedding + output layer (Adam): 2 x 32000 x 2048 = 131,072,000; norms 8 x 4,096 + final 2,048 = 34,816

Adam's temporaries (torch foreach, ``exp_avg_sq.sqrt()``): 4 B x 131,072,000 = 524,288,000 for the embedding and
output layer, which share a parameter group (weight decay); the norms are a group of their own (no weight decay)
stepped apart, which the estimate counts with the rest, as for Adam (estimator/optimizer_step.py):
4 x (131,072,000 + 34,816) = 524,427,264.

Muon's working set, largest for fc1 (column-parallel, partition_dim 0; gathered over TP 1: N = n = 23,068,672,
smaller side m = 2048):
    two fp32 copies from the gather 8N; during normalize then cast, fp32 4N + bf16 2N, or during an iteration
    X 2N + A 2m^2 + B 2m^2 + X' 2N: max(14 N, 12 N + 4 m^2) = max(322,961,408, 293,601,280) = 322,961,408
    plus the update of the QKV weight, stepped just before it, still referenced: 4 x 8,388,608 = 33,554,432
                                                                                           356,515,840
which is less than Adam's temporaries, as the measurements show: the step adds exactly 524,288,000 B to what is
allocated at its start in all three runs.

QKV (``--muon-split-qkv``, the default) is cut per query group (8 groups of q 256 + k 128 + v 128 rows) into
q 2048 x 2048, k 1024 x 2048, v 1024 x 2048, copied out of the strided view (8 groups: 4 x 8,388,608 = 33,554,432):
    q: copies 33,554,432 + max(14 x 4,194,304, 12 x 4,194,304 + 4 x 2048^2 = 67,108,864)        = 100,663,296
    k: copies + q's update 16,777,216 + max(14 x 2,097,152, 12 x 2,097,152 + 4 x 1024^2) 29,360,128 = 79,691,776
    v: copies + updates 25,165,824 + 29,360,128                                                 = 88,080,384
    torch.cat: 8 x 8,388,608 = 67,108,864
    peak 100,663,296 + the update of the output projection stepped before it, 4 x 4,194,304:    117,440,512
the largest working set of the MoE model, whose experts are 1408 x 2048 and 2048 x 704 (fc1: 14 x 2,883,584 =
40,370,176 < 12 N + 4 x 1408^2 = 42,532,864, + the previous expert's fc2 4 x 1,441,792 = 48,300,032) and whose
output projection is 2048 x 2048 (16 N + the last expert's fc2 = 72,876,032).

The order (batch 8, one H100, 2 layers, h 4096, SwiGLU 16384, vocabulary 4096, so that Muon's part is the step):
the step added 1,979,711,488 B to its start = 14 x 134,217,728 (fc1, 32768 x 4096) + 4 x 25,165,824 (the QKV
weight, 6144 x 4096, stepped before it), with the distributed optimizer and without; with squared ReLU (fc1 and fc2
both 67,108,864) 18 x 67,108,864 = 1,207,959,552 (fc2 after fc1).
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.breakdown import LABELS
from estimator.config import load_config
from estimator.features import muon_step, step_modelled
from estimator.megatron_args import RefusedFlagsError, read_megatron_args
from estimator.resolve import resolve
from estimator.states import byte_model
from tests.conftest import make_config

MODEL = {"num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16, "num_query_groups": 8,
         "kv_channels": 128, "ffn_hidden_size": 5632, "vocab_size": 32000, "make_vocab_size_divisible_by": 128,
         "max_position_embeddings": 2048, "position_embedding_type": "rope", "normalization": "RMSNorm",
         "activation_func": "swiglu", "gated_linear_unit": True, "add_bias_linear": False,
         "untie_embeddings_and_output_weights": True, "hidden_dropout": 0.0, "attention_dropout": 0.0}
MOE = {**MODEL, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 704, "moe_layer_freq": 1,
       "moe_token_dispatcher_type": "alltoall", "moe_router_load_balancing_type": "aux_loss",
       "moe_aux_loss_coeff": 0.01}
TRAINING = {"micro_batch_size": 1, "global_batch_size": 4, "seq_length": 2048, "optimizer": "muon",
            "use_distributed_optimizer": True, "attention_backend": "unfused", "cross_entropy_loss_fusion": False,
            "transformer_impl": "local", "gradient_accumulation_fusion": False, "masked_softmax_fusion": False,
            "optimizer_implementation": "torch"}
MATRICES, ADAM = 377_487_360, 131_072_000 + 34_816
FC1_WORKING_SET = 356_515_840


def _cfg(model=MODEL, training=None, parallelism=None, precision=None):
    return load_config(make_config(model, parallelism, {**TRAINING, **(training or {})}, precision))


def _own(cfg):
    r = resolve(cfg)
    return muon_step.muon_step_buffers(r, byte_model(r), range(len(r.kinds)), MATRICES + ADAM, MATRICES, 0, (1, 1))


@pytest.mark.parametrize("name, model, training, start, peak", [
    ("b7_dense_muon", MODEL, {}, 7_847_126_528, 8_371_414_528),
    ("b7_dense_muon_no_distopt", MODEL, {"use_distributed_optimizer": False}, 7_849_223_680, 8_373_511_680),
    ("b7_moe_muon", MOE, {}, 7_850_142_720, 8_374_430_720),
])
def test_step_peak_matches_the_h100_measurements(name, model, training, start, peak):
    """Measured on one H100 (batch 7): the step's peak is what is allocated at its start + 524,288,000 B (4 B x the
    131,072,000 embedding and output-layer parameters: Adam's temporaries; Muon's working set stays below). The
    overall peak is the forward/backward one (10,471,968,768 B measured for b7_dense_muon)."""
    assert peak - start == 4 * 131_072_000
    s = estimate(_cfg(model, training)).stages[0]
    assert s.optimizer_step_bytes == pytest.approx(peak, rel=0.005)
    assert s.peak_phase == "forward_backward" and s.forward_backward_bytes > s.optimizer_step_bytes


def test_the_step_holds_adams_temporaries_when_they_exceed_the_newton_schulz_working_set():
    """Module docstring: 4 x (131,072,000 + 34,816) = 524,427,264 > 356,515,840 (fc1's working set)."""
    r = resolve(_cfg())
    assert muon_step.muon_working_set(r, range(len(r.kinds))) == FC1_WORKING_SET
    assert _own(_cfg()) == {"optimizer_temporaries": 524_427_264}
    assert step_modelled(_cfg())


def test_qkv_is_orthogonalized_block_by_block():
    """Module docstring: 134,217,728 B for the split QKV weight with the previous update bounded by its own size,
    117,440,512 after the output projection, the MoE model's largest working set; at TP 2 each
    GPU holds 4 groups (n = 4,194,304, copies 16,777,216), the blocks gather back to the same full sizes:
    q 16,777,216 + 67,108,864 = 83,886,080; k 16,777,216 + 8,388,608 + 29,360,128 = 54,525,952; v 16,777,216 +
    12,582,912 + 29,360,128 = 58,720,256; cat 33,554,432; peak 83,886,080 + 16,777,216 = 100,663,296."""
    r = resolve(_cfg(MOE))
    assert muon_step.qkv_working_set(r) == 134_217_728
    assert muon_step.muon_working_set(r, range(len(r.kinds))) == 117_440_512
    r2 = resolve(_cfg(parallelism={"tensor_model_parallel_size": 2}, training={"world_size": 2}))
    assert muon_step.qkv_working_set(r2) == 100_663_296


def test_fused_adam_leaves_muons_working_set_as_the_step():
    """Transformer Engine's FusedAdam updates in place: the step's own buffers are Muon's working set alone, and
    with 128-token sequences (little activation memory) that is the iteration's peak."""
    cfg = _cfg(training={"transformer_impl": "transformer_engine", "optimizer_implementation": "te_fused",
                         "seq_length": 128})
    assert _own(cfg) == {"muon_newton_schulz": FC1_WORKING_SET}
    s = estimate(cfg).stages[0]
    assert s.peak_phase == "optimizer_step"
    assert s.transient["muon_newton_schulz"] == FC1_WORKING_SET and "optimizer_temporaries" not in s.transient
    assert "Newton-Schulz" in LABELS["muon_newton_schulz"]


def test_bf16_gradients_are_copied_to_fp32_before_any_step():
    """With a bf16 gradient buffer each fp32 main parameter gets ``main_grad.float()``, a new fp32 tensor, for every
    inner optimizer before any of them steps: 4 B x 508,594,176 parameters (no distributed optimizer) =
    2,034,376,704 B, beside Adam's temporaries."""
    cfg = _cfg(training={"use_distributed_optimizer": False},
               precision={"accumulate_allreduce_grads_in_fp32": False})
    assert _own(cfg) == {"optimizer_fp32_grad_copies": 2_034_376_704, "optimizer_temporaries": 524_427_264}


def test_tensor_parallel_momentum_is_gathered_whole():
    """TP 2: fc1 is held as 5632 x 2048 (n = 11,534,336) and all-gathered along its rows to 11264 x 2048
    (N = 23,068,672, m = 2048): max(14 N, 12 N + 4 m^2) = 322,961,408, + the QKV weight's update stepped before it
    (4 x 4,194,304 on this GPU) = 339,738,624. The other matrices are smaller (fc2 2048 x 2816 gathered along its
    columns to 2048 x 5632, with its own size as the bound: 14 x 11,534,336 + 4 x 5,767,168 = 184,549,376)."""
    r = resolve(_cfg(parallelism={"tensor_model_parallel_size": 2}, training={"world_size": 2}))
    assert muon_step.muon_working_set(r, range(len(r.kinds))) == 339_738_624
    assert muon_step.matrix_working_set(2048, 2816, 2, True) == 184_549_376


def test_a_square_matrix_is_bounded_by_its_products():
    """2048 x 2048 (the attention output projection) at TP 1: N = m^2 = 4,194,304, so 12 N + 4 m^2 = 16 N =
    67,108,864 exceeds 14 N; plus 4 n = 16,777,216: 83,886,080."""
    assert muon_step.matrix_working_set(2048, 2048, 1, True) == 83_886_080


def test_muon_flags_that_change_the_step_are_refused_off_their_default():
    """--muon-nesterov (a Nesterov copy of each matrix), --muon-tp-mode and --muon-no-split-qkv change the working
    set, which is modelled at Megatron-LM's defaults only; the defaults pass."""
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings "
            "128 --micro-batch-size 1 --bf16 --optimizer muon --vocab-size 1024")
    for flag in ("--muon-nesterov", "--muon-tp-mode distributed", "--muon-no-split-qkv"):
        with pytest.raises(RefusedFlagsError, match=flag.split()[0]):
            read_megatron_args(f"{base} {flag}")
    read_megatron_args(f"{base} --muon-tp-mode duplicated --muon-fp32-matmul-prec medium --muon-num-ns-steps 6")


def test_fp32_iterates_against_the_h100_measurement():
    """This project's batch 9 (one H100, predicted before the run): b8_muon_wide with --muon-fp32-matmul-prec high.
    Hand: 16 x 134,217,728 (fc1) + 8 x 4096^2 + 4 x 25,165,824 (QKV, stepped before it) = 2,382,364,672 B; measured,
    the step's peak minus what stays allocated after it is that + 2 KiB (9,933,010,432 - 7,550,643,712)."""
    from estimator.validation_project import load_data
    case = next(c for c in load_data()["cases"] if c["run"] == "b9_muon_wide_high")
    m = case["measured"]
    assert m["peak_allocated_bytes"] - m["allocated_after_last_iteration_bytes"] - 2_382_364_672 == 2048
    s = estimate(case["config"]).stages[0]
    assert s.peak_phase == "optimizer_step" and s.transient["muon_newton_schulz"] == 2_382_364_672
    assert s.allocated_bytes == pytest.approx(m["peak_allocated_bytes"], rel=1e-4)


def test_fp32_newton_schulz_iterates_double_their_bytes():
    """--muon-fp32-matmul-prec highest (Megatron-Bridge's DeepSeek-V4 recipes): newton_schulz casts to bf16 only at
    medium, so the iterates stay fp32. fc1 of the batch-7 model (N = 23,068,672, m = 2048): gathered 8 N + X 4 N +
    A 4 m^2 + B 4 m^2 + X' 4 N = 16 N + 8 m^2 = 369,098,752 + 33,554,432 = 402,653,184, + the QKV update stepped
    before it 33,554,432 = 436,207,616 (at medium 356,515,840). Read from the flag, and still below Adam's
    524,427,264 with torch's AdamW."""
    cfg = _cfg(training={"muon_fp32_matmul_prec": "highest"})
    r = resolve(cfg)
    assert muon_step.muon_working_set(r, range(len(r.kinds))) == 436_207_616
    parsed = read_megatron_args("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                                "--max-position-embeddings 128 --micro-batch-size 1 --bf16 --optimizer muon "
                                "--vocab-size 1024 --muon-fp32-matmul-prec highest")
    assert parsed.config["training"]["muon_fp32_matmul_prec"] == "highest"


def test_assumption_names_both_parts():
    text = "\n".join(estimate(_cfg()).assumptions)
    assert "Optimizer step (Muon)" in text and "torch.optim.AdamW (foreach)'s temporaries" in text
    assert "not counted" not in text and "not modelled with these features" not in text


@pytest.mark.parametrize("run, after, peak, own", [
    ("b8_muon_wide", 7_550_643_712, 9_530_357_248, 1_979_711_488),
    ("b8_muon_wide_no_distopt", 7_550_643_712, 9_530_357_248, 1_979_711_488),
    ("b8_muon_wide_relu2", 5_671_595_520, 6_879_557_120, 1_207_959_552),
])
def test_muons_own_working_set_matches_the_h100_measurements(run, after, peak, own):
    """This project's batch 8 (one H100): a vocabulary of 4096 leaves Adam 4 x 33,574,912 = 134,299,648 B, so the
    step is Muon's. Hand: 14 x 134,217,728 (fc1) + 4 x 25,165,824 (QKV, stepped before it) = 1,979,711,488; with
    squared ReLU 14 x 67,108,864 (fc2) + 4 x 67,108,864 (fc1) = 1,207,959,552. Measured, the step's peak minus what
    stays allocated after it is that + 2 KiB (the iteration's small tensors, freed at its end). The step is the
    run's peak, and the estimate holds it within 0.01 %."""
    from estimator.validation_project import load_data
    case = next(c for c in load_data()["cases"] if c["run"] == run)
    m = case["measured"]
    assert (m["allocated_after_last_iteration_bytes"], m["peak_allocated_bytes"]) == (after, peak)
    assert peak - after - own == 2048
    s = estimate(case["config"]).stages[0]
    assert s.peak_phase == "optimizer_step" and m["peak_allocated_phase"].startswith("optimizer")
    assert s.transient["muon_newton_schulz"] == own
    assert s.allocated_bytes == pytest.approx(peak, rel=1e-4)
