"""Transformer Engine's TP-overlap userbuffers under custom configurations (estimator/config/tp_overlap.py), by
hand from Transformer Engine's initialize_ub / add_ub and comm_gemm_overlap.cpp (TransformerEngine @ d0067d0d).

Throughout: h = 1024, S = seq 2048 x micro-batch 1 / CP 1 = 2048 tokens, TP 2, so one [S, h] buffer holds
S h = 2,097,152 elements: 4,194,304 B in bf16, 2,097,152 B in FP8. A ring-exchange reduce-scatter holds
2 TP - 1 = 3 chunks of [S/TP, h]: 3/2 x [S, h], 6,291,456 B in bf16.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate
from estimator.config.tp_overlap import BRIDGE_CONFIGS, GEMMS, parse_ub_cfgs, userbuffers
from estimator.formats.megatron_args import RefusedFlagsError, read_megatron_args
from tests.conftest import make_config

H, T = 1024, 2048
SH = T * H                          # 2,097,152 elements of one [S, h] buffer
MODEL = dict(num_layers=4, hidden_size=H, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)
FP8 = {"fp8": True, "fp8_recipe": "tensorwise"}


def cfg(ub_cfg=None, precision=None, tp=2):
    par = {"tensor_model_parallel_size": tp, "tp_comm_overlap": True}
    if ub_cfg is not None:
        par["tp_comm_overlap_cfg"] = ub_cfg
    return make_config(MODEL, par, {"seq_length": T, "world_size": 8, "sequence_parallel": True}, precision)


def ub_bytes(ub_cfg=None, precision=None, tp=2) -> int:
    return estimate(cfg(ub_cfg, precision, tp)).stages[0].outside_allocator["tp_comm_overlap_userbuffers"]


def test_default_configuration_is_unchanged():
    """No configuration, an empty one and Megatron-Bridge's bf16 configurations in a bf16 run (only SM counts
    differ from the defaults) all give the twelve [S, h] bf16 buffers: 12 x 4,194,304 = 50,331,648."""
    assert ub_bytes() == ub_bytes("") == ub_bytes("{}") == 50_331_648
    assert ub_bytes("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192") == 50_331_648
    assert ub_bytes(precision=FP8) == 16 * SH == 33_554_432


def test_ring_exchange_reduce_scatter_holds_2tp_minus_1_chunks():
    """Megatron-Bridge's userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192 runs proj_fprop and fc2_fprop as
    ring-exchange reduce-scatters (CommOverlapP2PBase: 2 TP - 1 chunks), fp8_buf False.
    bf16 run: 10 x 4,194,304 + 2 x 6,291,456 = 41,943,040 + 12,582,912 = 54,525,952.
    FP8 run: 8 all-gathers x 2,097,152 (1 B) + qkv/fc1 wgrad 2 x 4,194,304 + the two ring reduce-scatters in bf16
    2 x 6,291,456 = 16,777,216 + 8,388,608 + 12,582,912 = 37,748,736 (the default: 33,554,432)."""
    name = "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192"
    assert ub_bytes(name) == 54_525_952
    assert ub_bytes(name, FP8) == 37_748_736
    same = "proj_fprop: {method: ring_exchange}\nfc2_fprop: {method: ring_exchange}\n"
    assert ub_bytes(same, FP8) == 37_748_736


def test_tp4_chunks():
    """At TP 4 a ring-exchange reduce-scatter holds 7 chunks of [S/4, h]: 4,194,304 / 4 x 7 = 7,340,032 B in bf16
    (the known-to-run note's 7/4 x [S, h]); bf16 run: 10 x 4,194,304 + 2 x 7,340,032 = 56,623,104."""
    assert ub_bytes("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192", tp=4) == 56_623_104


def test_megatron_lm_ci_configuration():
    """Megatron-LM's tests/functional_tests/test_cases/gpt/gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_
    tp_pp_sp_tp_overlap/tp_comm_overlap_cfg.yaml (Megatron-LM @ d98e8a64): proj_fprop pipeline (num_sm 4, no
    fp8_buf), fc2_fprop ring_exchange, the rest at their default methods. FP8 run: 8 all-gathers x 1 B S h,
    proj_fprop 2 B S h, fc2_fprop 2 B x 3/2 S h = 3 S h, qkv/fc1 wgrad 2 x 2 B S h: (8 + 2 + 3 + 4) S h = 17 S h =
    35,651,584."""
    text = ("qkv_fprop:\n  method: ring_exchange\n  aggregate: 1\n\nproj_fprop:\n  method: pipeline\n  num_sm: 4\n"
            "  num_splits: 4\n  set_sm_margin: 0\n\nfc1_fprop:\n  method: ring_exchange\n  aggregate: 0\n\n"
            "fc2_fprop:\n  method: ring_exchange\n  aggregate: 0\n\nfc2_dgrad:\n  method: ring_exchange\n"
            "  aggregate: 0\n\nfc1_dgrad:\n  method: bulk\n  num_sm: 2\n  set_sm_margin: 0\n\nfc1_wgrad:\n"
            "  method: bulk\n  num_sm: 2\n  set_sm_margin: 0\n\nproj_dgrad:\n  method: ring_exchange\n  aggregate: 1\n"
            "\nqkv_dgrad:\n  method: bulk\n  num_sm: 2\n  set_sm_margin: 0\n\nqkv_wgrad:\n  method: bulk\n"
            "  num_sm: 2\n  set_sm_margin: 0\n")
    assert ub_bytes(text, FP8) == 17 * SH == 35_651_584


def test_bridge_pipeline_fp8_buf_is_a_truthy_tuple():
    """Megatron-Bridge's PipelineOverlapCfg declares fp8_buf = (False,), which Transformer Engine reads as true:
    in an FP8 run its pipeline reduce-scatters (proj_fprop, fc2_fprop) get 1-byte buffers. With
    userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192: 8 all-gathers + 2 pipelines at 1 B, qkv/fc1 wgrad at 2 B:
    (10 + 4) S h = 29,360,128. An explicit fp8_buf on a YAML pipeline does the same; on a bulk wgrad it is
    ignored (not of the pipeline group): 16 S h."""
    assert ub_bytes("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192", FP8) == 14 * SH == 29_360_128
    assert ub_bytes("{proj_fprop: {fp8_buf: true}, fc2_fprop: {fp8_buf: 1}}", FP8) == 14 * SH
    assert ub_bytes("{qkv_wgrad: {fp8_buf: true}}", FP8) == 16 * SH


def test_bf16_set_for_bf16_first_last_layers():
    """FP8 with first_last_layers_bf16: a second, bf16 set. userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192:
    FP8 set 37,748,736 (above) + bf16 set 54,525,952 = 92,274,688."""
    pr = {**FP8, "first_last_layers_bf16": True}
    assert ub_bytes("userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192", pr) == 92_274_688


def test_non_bulk_dgrad_reduce_scatters():
    """qkv_dgrad with ring_exchange: the dgrad GEMM reduce-scatters (3/2 S h) and qkv_wgrad keeps a [S, h] bf16
    buffer (still registered, no longer a reduce-scatter). bf16: 11 x 2 S h + 3 S h = 25 S h = 52,428,800.
    FP8: qkv_dgrad leaves the all-gathers, so bf16: 3 S h; seven all-gathers 7 S h; proj/fc2 fprop 4 S h;
    qkv/fc1 wgrad 4 S h: 18 S h = 37,748,736. As a pipeline with fp8_buf: 1 B x S h for qkv_dgrad: 16 S h."""
    assert ub_bytes("{qkv_dgrad: {method: ring_exchange}}") == 25 * SH == 52_428_800
    assert ub_bytes("{qkv_dgrad: {method: ring_exchange}}", FP8) == 18 * SH == 37_748_736
    assert ub_bytes("{qkv_dgrad: {method: pipeline, fp8_buf: true}}", FP8) == 16 * SH
    lora = userbuffers(parse_ub_cfgs("userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora"), (True,))
    assert len(lora) == 12 and {u.gemm for u in lora} == set(GEMMS)


def test_atomic_gemm_counters():
    """atomic_gemm on a pipeline reduce-scatter (FP8 only): counters of num_splits x 2 int32, cudaMalloc'ed:
    4 x 2 x 4 = 32 B beside the default FP8 33,554,432. On a bulk GEMM Transformer Engine turns it off."""
    assert ub_bytes("{proj_fprop: {atomic_gemm: true}}", FP8) == 33_554_432 + 32
    assert ub_bytes("{proj_fprop: {atomic_gemm: true, num_splits: 8}}", FP8) == 33_554_432 + 64
    assert ub_bytes("{qkv_dgrad: {atomic_gemm: true}}", FP8) == 33_554_432


def test_catalogue_entries():
    """The two recipes' configurations as Megatron-Bridge @ 067f987d training/comm_overlap.py defines them."""
    for name in ("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192", "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192"):
        c = BRIDGE_CONFIGS[name]
        assert c["proj_fprop"]["method"] == c["fc2_fprop"]["method"] == "ring_exchange"
        assert not c["proj_fprop"]["fp8_buf"]
        assert [c[g]["method"] for g in ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")] == ["bulk"] * 4
    assert len(BRIDGE_CONFIGS) == 19


@pytest.mark.parametrize("value, words", [
    ("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen819", "did you mean userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"),
    ("{qkv_fprp: {method: bulk}}", "unknown GEMM 'qkv_fprp'"),
    ("{qkv_fprop: {method: ring}}", "qkv_fprop.method must be one of ring_exchange, pipeline, bulk, external"),
    ("{qkv_fprop: {num_sm: two}}", "qkv_fprop.num_sm must be an integer"),
    ("{qkv_fprop: {colour: red}}", "unknown setting 'colour'"),
    ("{qkv_fprop: bulk}", "qkv_fprop: must be a mapping"),
    ("[1, 2]", "must map GEMM names"),
    ("{qkv_fprop: {method: pipeline}}", "pipeline method only for a reduce-scatter"),
    ("{proj_wgrad: {method: bulk}}", "requires external for proj_wgrad"),
    ("{qkv_dgrad: {method: ring_exchange}, qkv_wgrad: {num_sm: 2}}", "refuses settings for it"),
    ("{proj_fprop: {atomic_gemm: true}}", "atomic GEMM overlap only for FP8"),
    ("{proj_fprop: {method: ring_exchange, atomic_gemm: true}}", "atomic GEMM overlap only for FP8"),
])
def test_bad_configurations_name_the_field_the_value_and_the_rule(value, words):
    with pytest.raises(ConfigError) as exc:
        estimate(cfg(value))
    [p] = exc.value.problems
    assert p.field == "parallelism.tp_comm_overlap_cfg" and p.value == value and words in p.message


def test_rules_beside_the_configuration():
    """The atomic ring-exchange pair rule (FP8), the bf16 set with a non-bulk dgrad, fp32 weights, and a
    configuration without tp_comm_overlap."""
    with pytest.raises(ConfigError, match="on both fc1_fprop and fc2_fprop or on neither"):
        estimate(cfg("{fc2_fprop: {method: ring_exchange, atomic_gemm: true}}", FP8))
    with pytest.raises(ConfigError, match="second \\(bf16\\) set"):
        estimate(cfg("{fc1_dgrad: {method: pipeline}}", {**FP8, "first_last_layers_bf16": True}))
    with pytest.raises(ConfigError, match="needs bf16 or fp16 weights"):
        estimate(cfg(precision={"params_dtype": "fp32"}))
    c = cfg("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192")
    c["parallelism"]["tp_comm_overlap"] = False
    with pytest.raises(ConfigError, match="applies only with tp_comm_overlap: true"):
        estimate(c)


def test_atomic_ring_exchange_all_gather_is_refused_as_not_modelled():
    """Transformer Engine runs it (FP8, both GEMMs of the pair), but allocates TP + 1 output chunks with
    cudaMallocAsync during each GEMM: refused, not estimated."""
    both = "{qkv_fprop: {atomic_gemm: true}, proj_fprop: {method: ring_exchange, atomic_gemm: true}}"
    with pytest.raises(UnsupportedError, match="not modelled"):
        estimate(cfg(both, FP8))


def test_megatron_lm_importer_reads_the_file():
    """--tp-comm-overlap-cfg PATH: the file's text (through read_file) becomes the field; without the file the
    flag is refused by name; without --tp-comm-overlap Megatron-LM does not read it (a note)."""
    base = (f"--num-layers 4 --hidden-size {H} --num-attention-heads 8 --seq-length {T} "
            f"--max-position-embeddings {T} --vocab-size 32000 --bf16 --tensor-model-parallel-size 2 "
            "--sequence-parallel --tp-comm-overlap")
    text = "proj_fprop:\n  method: ring_exchange\nfc2_fprop:\n  method: ring_exchange\n"
    imp = read_megatron_args(base + " --tp-comm-overlap-cfg ub.yaml", world_size=8, read_file={"ub.yaml": text}.get)
    assert imp.config["parallelism"]["tp_comm_overlap_cfg"] == text
    assert estimate(imp.config).stages[0].outside_allocator["tp_comm_overlap_userbuffers"] == 54_525_952
    with pytest.raises(RefusedFlagsError, match="--tp-comm-overlap-cfg ub.yaml: the file is not available"):
        read_megatron_args(base + " --tp-comm-overlap-cfg ub.yaml", world_size=8)
    imp = read_megatron_args(base.replace(" --tp-comm-overlap", "") + " --tp-comm-overlap-cfg ub.yaml", world_size=8)
    assert "tp_comm_overlap_cfg" not in imp.config.get("parallelism", {})
    assert any("only with --tp-comm-overlap" in n for n in imp.notes)
