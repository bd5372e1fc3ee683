"""The Muon optimizer step (estimator/memory/features/muon_step.py), against this project's H100 measurements and hand
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
stepped apart, which the estimate counts with the rest, as for Adam (estimator/memory/optimizer_step.py):
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
from estimator.memory.breakdown import LABELS
from estimator.config.load import load_config
from estimator.memory.features import muon_step, step_modelled
from estimator.formats.megatron_args import RefusedFlagsError, read_megatron_args
from estimator.model.resolve import resolve
from estimator.memory.states import byte_model
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


def test_muon_flags_that_change_the_step_are_read_into_the_configuration():
    """--muon-nesterov, --muon-tp-mode and --muon-no-split-qkv (store_false) change the working set and are read
    into training.muon_nesterov / muon_tp_mode / muon_split_qkv; --muon-use-syrk writes the same Gram products
    (emerging_optimizers 0.4.0 tsyrk_ex: a new (m, m) bf16 output, as the matmul) and has no effect on memory;
    --muon-fp32-matmul-prec low (a Megatron-LM choice) is read as given. The defaults stay defaults."""
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings "
            "128 --micro-batch-size 1 --bf16 --optimizer muon --vocab-size 1024")
    imp = read_megatron_args(f"{base} --muon-nesterov --muon-tp-mode blockwise --muon-no-split-qkv --muon-use-syrk "
                             "--muon-fp32-matmul-prec low")
    tr = imp.config["training"]
    assert (tr["muon_nesterov"], tr["muon_tp_mode"], tr["muon_split_qkv"], tr["muon_fp32_matmul_prec"]) == (
        True, "blockwise", False, "low")
    assert [f for f, _ in imp.no_effect] == ["--muon-use-syrk"] and "SYRK" in imp.no_effect[0][1]
    tr = read_megatron_args(f"{base} --muon-tp-mode duplicated --muon-fp32-matmul-prec medium "
                            "--muon-num-ns-steps 6").config["training"]
    assert "muon_nesterov" not in tr and "muon_split_qkv" not in tr and tr["muon_tp_mode"] == "duplicated"


def test_fp32_iterates_against_the_h100_measurement():
    """This project's batch 9 (one H100, predicted before the run): b8_muon_wide with --muon-fp32-matmul-prec high.
    Hand: 16 x 134,217,728 (fc1) + 8 x 4096^2 + 4 x 25,165,824 (QKV, stepped before it) = 2,382,364,672 B; measured,
    the step's peak minus what stays allocated after it is that + 2 KiB (9,933,010,432 - 7,550,643,712)."""
    from estimator.validation.project_runs import load_data
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
    before it 33,554,432 = 436,207,616 (at medium 356,515,840). Read from the flag (Megatron-LM's flag takes high,
    not highest: arguments.py choices low, medium, high), and still below Adam's 524,427,264 with torch's AdamW."""
    cfg = _cfg(training={"muon_fp32_matmul_prec": "highest"})
    r = resolve(cfg)
    assert muon_step.muon_working_set(r, range(len(r.kinds))) == 436_207_616
    parsed = read_megatron_args("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                                "--max-position-embeddings 128 --micro-batch-size 1 --bf16 --optimizer muon "
                                "--vocab-size 1024 --muon-fp32-matmul-prec high")
    assert parsed.config["training"]["muon_fp32_matmul_prec"] == "high"


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
    from estimator.validation.project_runs import load_data
    case = next(c for c in load_data()["cases"] if c["run"] == run)
    m = case["measured"]
    assert (m["allocated_after_last_iteration_bytes"], m["peak_allocated_bytes"]) == (after, peak)
    assert peak - after - own == 2048
    s = estimate(case["config"]).stages[0]
    assert s.peak_phase == "optimizer_step" and m["peak_allocated_phase"].startswith("optimizer")
    assert s.transient["muon_newton_schulz"] == own
    assert s.allocated_bytes == pytest.approx(peak, rel=1e-4)


# --- the options off their defaults (Megatron-LM @ d98e8a64 TensorParallelMuon, emerging_optimizers 0.3.0) -------

def _ws(training=None, parallelism=None, model=MODEL):
    r = resolve(_cfg(model, {**(training or {}), **({"world_size": 2} if parallelism else {})}, parallelism))
    return muon_step.muon_working_set(r, range(len(r.kinds)))


def test_blockwise_orthogonalizes_each_shard_without_a_gather():
    """--muon-tp-mode blockwise: partition_dim None, so newton_schulz runs on the shard alone, with no gather even
    at TP 1. Per n-element shard with smaller side m: normalized fp32 4 n, bf16 cast 2 n; an iteration X 2 n + A 2 m^2
    + B 2 m^2 + X' 2 n; the fp32 result 4 n and the two scale products 4 n each: max(6 n, 4 n + 4 m^2, 12 n) = 12 n.
    Batch-7 model, TP 1, fc1 11264 x 2048 (n = 23,068,672): 12 n = 276,824,064 (4 n + 4 x 2048^2 = 109,051,904 is
    less), + the QKV update stepped before it 4 x 8,388,608 = 310,378,496 (duplicated: 356,515,840). The others are
    less: fc2 12 x 11,534,336 + 4 x 23,068,672 = 230,686,720; the split QKV (8 groups, block copies 33,554,432):
    q 33,554,432 + 12 x 4,194,304 = 83,886,080, k 33,554,432 + 16,777,216 + 12 x 2,097,152 = 75,497,472, v 33,554,432
    + 25,165,824 + 25,165,824 = 83,886,080, cat 67,108,864; + the projection's 16,777,216 = 100,663,296."""
    assert _ws({"muon_tp_mode": "blockwise"}) == 310_378_496
    assert muon_step.orthogonalize_bytes(11264, 2048, 1, False, "blockwise") == 276_824_064
    r = resolve(_cfg(training={"muon_tp_mode": "blockwise"}))
    assert muon_step.qkv_working_set(r, prev=4_194_304) == 100_663_296


def test_distributed_mode_all_reduces_the_gram_of_the_unpartitioned_side():
    """--muon-tp-mode distributed: newton_schulz on the shard, transposed by partition_dim so that the Gram matrix
    is d x d, d the side that is not partitioned (the columns of a column-parallel weight, the rows of a row-parallel
    one): max(12 n, 4 n + 4 d^2).
    TP 2, the batch-7 model's key block (4 groups x 128 = 512 rows x 2048, column-parallel): n = 1,048,576,
    d = 2048: max(12,582,912, 4,194,304 + 16,777,216) = 20,971,520; blockwise on the same shard (m = 512):
    max(12,582,912, 4,194,304 + 1,048,576) = 12,582,912; duplicated (N = 2,097,152, m = 1024):
    max(29,360,128, 25,165,824 + 4,194,304) = 29,360,128.
    A 2048 x 256 shard of a row-parallel weight: d = 2048 rows, 4 x 524,288 + 4 x 2048^2 = 18,874,368 > 12 n =
    6,291,456; the same shard of a column-parallel weight: d = 256 columns, 12 n = 6,291,456.
    The batch-7 model at TP 2: fc1 5632 x 2048 (column-parallel, d = 2048): 12 x 11,534,336 = 138,412,032 >
    4 n + 4 d^2 = 62,914,560; + the QKV update 4 x 4,194,304 = 155,189,248, the largest (fc2 2048 x 2816, d = 2048:
    12 x 5,767,168 + 4 x 11,534,336 = 115,343,360)."""
    ob = muon_step.orthogonalize_bytes
    assert (ob(512, 2048, 2, False, "distributed"), ob(512, 2048, 2, False, "blockwise"),
            ob(512, 2048, 2, False, "duplicated")) == (20_971_520, 12_582_912, 29_360_128)
    assert (ob(2048, 256, 2, True, "distributed"), ob(2048, 256, 2, False, "distributed")) == (18_874_368, 6_291_456)
    assert _ws({"muon_tp_mode": "distributed"}, {"tensor_model_parallel_size": 2}) == 155_189_248


def test_fp32_iterates_in_the_shard_modes():
    """High or highest precision keeps the iterates fp32 without a gather: max(12 n, 8 n + 8 m^2). A square 2048 x
    2048 shard (n = m^2 = 4,194,304): 16 n = 67,108,864 > 12 n = 50,331,648; at medium 12 n."""
    ob = muon_step.orthogonalize_bytes
    assert ob(2048, 2048, 1, True, "blockwise", fp32=True) == 67_108_864
    assert ob(2048, 2048, 1, True, "blockwise") == 50_331_648


def test_nesterov_orthogonalizes_a_new_fp32_mix():
    """--muon-nesterov: OrthogonalizedOptimizer.step orthogonalizes grad.lerp(momentum_buffer, momentum), a new fp32
    tensor of the matrix's n elements held until the next matrix: + 4 n. Batch-7 model, TP 1: fc1 14 x 23,068,672 +
    4 x 23,068,672 + the QKV update 4 x 8,388,608 = 448,790,528 (fc2: 14 x 11,534,336 + 4 x 11,534,336 +
    4 x 23,068,672 = 299,892,736; the split QKV 117,440,512 + 4 x 8,388,608 = 150,994,944). Still below torch
    AdamW's 524,427,264, which stays the step's own buffer; with Transformer Engine's FusedAdam Muon's is."""
    assert _ws({"muon_nesterov": True}) == 448_790_528
    r = resolve(_cfg(MOE, {"muon_nesterov": True}))
    assert muon_step.qkv_working_set(r, prev=4_194_304) == 150_994_944
    assert _own(_cfg(training={"muon_nesterov": True})) == {"optimizer_temporaries": 524_427_264}
    cfg = _cfg(training={"transformer_impl": "transformer_engine", "optimizer_implementation": "te_fused",
                         "seq_length": 128, "muon_nesterov": True})
    assert _own(cfg) == {"muon_newton_schulz": 448_790_528}


def test_qkv_orthogonalized_whole():
    """--muon-no-split-qkv: the QKV weight (4096 x 2048 at TP 1) is one column-parallel matrix, N = 8,388,608,
    m = 2048: max(14 N, 12 N + 4 m^2) = 117,440,512 (both), + its own size as the bound 33,554,432 = 150,994,944
    (split: 134,217,728); after the output projection (16,777,216) 134,217,728. TP 2: held 2048 x 2048, gathered to
    the same 117,440,512, + the projection's 4 x 2048 x 1024 = 8,388,608: 125,829,120."""
    r = resolve(_cfg(MOE, {"muon_split_qkv": False}))
    assert muon_step.qkv_working_set(r) == 150_994_944
    assert muon_step.qkv_working_set(r, prev=4_194_304) == 134_217_728
    r2 = resolve(_cfg(training={"muon_split_qkv": False, "world_size": 2},
                      parallelism={"tensor_model_parallel_size": 2}))
    assert muon_step.qkv_working_set(r2, prev=2_097_152) == 125_829_120


def test_low_precision_leaves_pytorchs_default_highest():
    """--muon-fp32-matmul-prec low: torch.set_float32_matmul_precision('low') only warns (ATen
    Context::setFloat32MatmulPrecision), Megatron-LM sets no precision, so newton_schulz sees PyTorch's default
    highest: fp32 iterates, as with highest: 436,207,616 (test_fp32_newton_schulz_iterates_double_their_bytes)."""
    assert _ws({"muon_fp32_matmul_prec": "low"}) == 436_207_616


def test_the_assumption_names_the_options():
    text = "\n".join(estimate(_cfg(training={"muon_tp_mode": "blockwise", "muon_nesterov": True,
                                             "muon_split_qkv": False})).assumptions)
    assert "muon_tp_mode blockwise" in text and "Nesterov" in text and "QKV whole" in text
    assert "max(12 n, 4 n + 4 m^2)" in text


def test_kimi_k2_dense_fc1_blockwise_with_nesterov():
    """Megatron-Bridge's Kimi K2 recipe (muon_tp_mode blockwise, muon_nesterov True; TP 8): the dense layer's fc1 is
    held as 2 x 18432 / 8 = 4608 x 7168 (n = 33,030,144): 12 n + 4 n = 528,482,304. Duplicated, it would be gathered
    to N = 264,241,152 (m = 7168): max(14 N = 3,699,376,128, 12 N + 4 x 7168^2 = 3,376,414,720)."""
    assert muon_step.matrix_working_set(4608, 7168, 8, False, prev=0, mode="blockwise", nesterov=True) == 528_482_304
    assert muon_step.matrix_working_set(4608, 7168, 8, False, prev=0) == 3_699_376_128
    from estimator.validation.known_to_run import recipe_cases
    case = next(c for c in recipe_cases() if c.id == "bridge-kimi-k2-1024gpu-h100-bf16")
    assert case.status == "estimated" and case.verdict == "fits" and not case.reasons


def test_export_writes_the_muon_flags_back():
    """to_megatron_args writes the options Megatron-LM has flags for; highest has no pretrain_gpt.py value
    (Megatron-LM's choices are low, medium and high)."""
    from estimator.config.errors import UnsupportedError
    from estimator.formats.megatron_export import to_megatron_args
    cfg = _cfg(training={"muon_tp_mode": "distributed", "muon_nesterov": True, "muon_split_qkv": False,
                         "muon_fp32_matmul_prec": "high"})
    args = " ".join(to_megatron_args(cfg))
    for flag in ("--muon-tp-mode distributed", "--muon-nesterov", "--muon-no-split-qkv",
                 "--muon-fp32-matmul-prec high"):
        assert flag in args
    back = read_megatron_args(args, world_size=1).config["training"]
    assert (back["muon_tp_mode"], back["muon_nesterov"], back["muon_split_qkv"]) == ("distributed", True, False)
    with pytest.raises(UnsupportedError, match="highest"):
        to_megatron_args(_cfg(training={"muon_fp32_matmul_prec": "highest"}))


def test_qkv_with_fewer_key_value_heads_than_ranks_is_orthogonalized_whole():
    """At TP 16 over the 8 groups each GPU holds (16 + 2 x 8) x 128 / 16 = 256 rows of the QKV weight, half a
    group's 512 (q 256 + k 128 + v 128): Megatron-LM @ d98e8a64 : megatron/core/optimizer/__init__.py marks the
    weight is_qkv only when its rows are a whole number of groups, so the split is skipped and the matrix is
    stepped whole, as muon_split_qkv false steps it."""
    par, tr = {"tensor_model_parallel_size": 16}, {"world_size": 16}
    split = resolve(_cfg(parallelism=par, training=tr))
    whole = resolve(_cfg(parallelism=par, training={**tr, "muon_split_qkv": False}))
    assert split.kv == 1
    assert muon_step.qkv_working_set(split) == muon_step.qkv_working_set(whole) > 0
