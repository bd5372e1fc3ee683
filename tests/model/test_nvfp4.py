"""NVFP4 (precision.fp4) against Transformer Engine's allocations and Megatron-LM's rules, by hand.

TransformerEngine @ d0067d0d : transformer_engine/pytorch/tensor/nvfp4_tensor.py ``NVFP4Quantizer`` and
csrc/quantizer.cpp ``NVFP4Quantizer::create_tensor`` / ``get_scale_shape``, for an M x K tensor (up(x, m): x rounded up
to a multiple of m):

    row-wise     data M x K/2 uint8 (two E2M1 values a byte)   scales up(M, 128) x up(K/16, 4) E4M3 (1 B)
    column-wise  data K x M/2 uint8                            scales up(K, 128) x up(M/16, 4) E4M3 (1 B)

plus one fp32 amax per copy (counted as 0, as FP8's per-tensor scales are). So a weight with both copies is
1 B + 1/8 B per element when M and K are multiples of 128, a saved input (column-wise only) 0.5 B + 1/16 B.

The estimates use tests/model/test_fp8_scales.py's model: L=4, h=1024, 8 heads (MHA), GeLU MLP f=4096, untied
vocabulary 32000, s=2048, b=1, one GPU. N = 115,876,864 parameters, of which LIN = 50,331,648 are linear-layer
weights (per layer QKV 3072 x 1024, projection 1024 x 1024, fc1 4096 x 1024, fc2 1024 x 4096).
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate
from estimator.config.load import load_config
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.megatron_args import RefusedFlagsError, parse_megatron_args
from estimator.memory.activations import layer_activations
from estimator.memory.breakdown import breakdown
from estimator.model.fp8_scales import (lin_saved, nvfp4_data_bytes, saved_scale_bytes, tensor_scale_bytes,
                                        weight_scale_bytes)
from estimator.model.layers import LayerKind
from estimator.model.layers.base import Ctx
from estimator.model.resolve import resolve
from tests.conftest import make_config
from tests.model.test_fp8_scales import LIN, MODEL, N, stage

NV = {"fp4": True}
NVP = {"fp4": True, "fp4_param_gather": True}


# --- one tensor ---------------------------------------------------------------------------------------------

def test_weight_copies_and_their_e4m3_scales():
    """A 4096 x 1024 weight: each copy 4096 x 1024 / 2 = 2,097,152 B of data; scales row-wise 4096 x (1024/16 = 64)
    = 262,144 B, column-wise 1024 x (4096/16 = 256) = 262,144 B: 524,288 B = 4096 x 1024 / 8."""
    assert nvfp4_data_bytes(4096, 1024) == 2_097_152
    assert tensor_scale_bytes("nvfp4", 4096, 1024, True, False, True) == 262_144
    assert tensor_scale_bytes("nvfp4", 4096, 1024, False, True, True) == 262_144
    assert weight_scale_bytes("nvfp4", [(4096, 1024, 2)]) == 2 * 524_288


def test_scale_tensors_are_padded_to_128_by_4_tiles():
    """DeepSeek-V3's kv down-projection, 576 x 7168: row-wise up(576, 128) = 640 x (7168/16 = 448) = 286,720 B,
    column-wise 7168 x up(576/16 = 36, 4) = 36 -> 258,048 B: 544,768 B, not 576 x 7168 / 8 = 516,096. A 96 x 96
    weight: 128 x up(6, 4) = 8 each way, 1,024 + 1,024 = 2,048 B (not 1,152)."""
    assert tensor_scale_bytes("nvfp4", 576, 7168, True, True, True) == 544_768
    assert tensor_scale_bytes("nvfp4", 96, 96, True, True, True) == 2_048


def test_two_dimensional_weight_blocks_keep_the_one_dimensional_scale_shape():
    """The recipe quantizes weights in 16 x 16 blocks, but get_scale_shape has no 2-D case: the same bytes as an
    input of that shape with both copies (a weight or not)."""
    assert (tensor_scale_bytes("nvfp4", 3072, 1024, True, True, True)
            == tensor_scale_bytes("nvfp4", 3072, 1024, True, True, False) == 3072 * 1024 // 8)


def test_saved_input_is_column_wise_unless_a_norm_linear_gathers_it():
    """An 8192 x 4096 input saved column-wise: 8192 x 4096 / 2 = 16,777,216 B + scales 4096 x (8192/16 = 512) =
    2,097,152 B = 18,874,368 B. The same rows as a LayerNormLinear's norm output under sequence parallelism (T = 2 Tn
    here) keep the row-wise copy too: 2 x 16,777,216 + 8192 x 256 + 2,097,152 = 37,748,736 B."""
    plain = Ctx(8192, 8192, 2, 1, frozenset(), 0, False, fp8="nvfp4")
    sp = Ctx(16384, 8192, 2, 1, frozenset(), 0, False, fp8="nvfp4")
    assert saved_scale_bytes("nvfp4", 8192, 4096) == 2_097_152
    assert lin_saved(plain, 8192, 4096) == 18_874_368
    assert lin_saved(plain, 8192, 4096, gathered=True) == 18_874_368     # nothing gathered without SP
    assert lin_saved(sp, 8192, 4096) == 18_874_368                        # a plain Linear keeps column-wise only
    assert lin_saved(sp, 8192, 4096, gathered=True) == 37_748_736


def test_each_expert_input_is_padded_on_its_own():
    """128 rows x 128 over 4 local experts: four 32 x 128 tensors, each 32 x 128 / 2 = 2,048 B of data and
    128 x up(2, 4) = 512 B of column-wise scales: 4 x 2,560 = 10,240 B (one tensor: 8,192 + 128 x 8 = 9,216)."""
    c = Ctx(128, 128, 2, 1, frozenset(), 0, False, fp8="nvfp4")
    assert lin_saved(c, 128, 128, tensors=4) == 10_240
    assert lin_saved(c, 128, 128) == 9_216


# --- weights ------------------------------------------------------------------------------------------------

def test_weights_with_cached_nvfp4_copies():
    """Without fp4_param_gather: bf16 weights 2 N, both NVFP4 copies 0.5 + 0.5 B x LIN, scales LIN / 8 (every
    dimension a multiple of 128): 231,753,728 + 50,331,648 + 6,291,456 = 288,376,832 B."""
    assert stage(NV).weights_bytes == 2 * N + LIN + LIN // 8 == 288_376_832


def test_nvfp4_weights_and_the_model_states_total():
    """fp4_param_gather: the linear weights are the NVFP4 copies themselves, 1 B + 1/8 B x LIN; the rest bf16,
    2 (N - LIN) = 131,090,432: weights 131,090,432 + 50,331,648 + 6,291,456 = 187,713,536 B. Gradients stay
    fp32 per element of every parameter (the gradient buffer keeps the full count): 4 N = 463,507,456. Adam with
    fp32 masters on one GPU: 12 N = 1,390,522,368. Model states 2,041,743,360 B (bf16 weights: 18 N = 2,085,783,552)."""
    s = stage(NVP)
    assert s.weights_bytes == 187_713_536
    assert s.gradients_bytes == 4 * N == 463_507_456
    assert s.optimizer_bytes == 12 * N == 1_390_522_368
    assert s.weights_bytes + s.gradients_bytes + s.optimizer_bytes == 2_041_743_360
    bf16 = stage({})
    assert bf16.weights_bytes + bf16.gradients_bytes + bf16.optimizer_bytes == 18 * N == 2_085_783_552


def test_bf16_first_and_last_layers_have_no_nvfp4_copies():
    """first_last_layers_bf16 with one layer at each end: two of the four layers are plain bf16, so half of the
    copies and scales go: 2 N + LIN / 2 + LIN / 16 = 231,753,728 + 25,165,824 + 3,145,728 B. With fp4_param_gather
    those two layers hold bf16 weights instead: 2 N - LIN / 2 + LIN / 16 = 209,733,632 B."""
    pr = dict(first_last_layers_bf16=True, num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=1)
    assert stage({**NV, **pr}).weights_bytes == 2 * N + LIN // 2 + LIN // 16 == 260_065_280
    assert stage({**NVP, **pr}).weights_bytes == 2 * N - LIN // 2 + LIN // 16 == 209_733_632


def test_without_the_weight_cache_each_micro_batch_keeps_its_copies():
    """disable_parameter_transpose_cache: the NVFP4 copies and scales are made per micro-batch and saved for its
    backward (one here): weights 2 N; fp8_weight_copies LIN + LIN / 8 = 56,623,104 B."""
    s = stage({**NV, "disable_parameter_transpose_cache": True})
    assert s.weights_bytes == 2 * N
    assert s.activations["fp8_weight_copies"] == LIN + LIN // 8 == 56_623_104


# --- activations --------------------------------------------------------------------------------------------

def test_saved_inputs_in_nvfp4():
    """Per layer (T = 2048, no sequence parallelism). FP8 (tensorwise) saves QKV's and fc1's inputs (the two norm
    outputs, which Transformer Engine's LayerNormLinear quantizes) 2048 x 1024 each and fc2's 2048 x 4096 in 1 B:
    2,097,152 x 2 + 8,388,608 = 12,582,912 B, and no copy of the projection's input (save_original_input, as below).
    NVFP4 saves the inputs of QKV, fc1 and fc2 column-wise, 0.5 B + scales (1024 x 128, 1024 x 128, 4096 x 128):
    1,048,576 x 2 + 4,194,304 + 131,072 x 2 + 524,288 = 7,077,888 B, and no copy of the projection's input either:
    Megatron-Core @ d98e8a64 (transformer/attention.py) sets save_original_input on linear_proj with fp4, which then
    keeps the bf16 attention output core attention already saves. 5,505,024 B less per layer, 22,020,096 B for
    four."""
    assert stage({"fp8": True, "fp8_recipe": "tensorwise"}).activations_bytes - stage(NV).activations_bytes \
        == 4 * 5_505_024 == 22_020_096
    r = resolve(load_config(make_config(MODEL, None, {"seq_length": 2048}, NV)))
    parts = layer_activations(r, LayerKind("attention", "dense"), parts=True).parts
    assert parts["proj_in_fp8"] == 0
    assert parts["mlp_norm_out"] == 1_048_576 + 131_072


def test_qkv_norm_output_under_sequence_parallelism_keeps_both_copies():
    """TP 2: the QKV LayerNormLinear's saved norm output. Without sequence parallelism 2048 x 1024 column-wise:
    1,048,576 B + scales 1024 x (2048/16) = 131,072 B. With it the local 1024 rows keep both copies:
    2 x 524,288 B + row-wise 1024 x 64 + column-wise 1024 x 64 = 1,179,648 B, the same total here, while FP8's
    tensorwise copy halves (2,097,152 -> 1,048,576 B)."""
    def norm_out(sp: bool) -> int:
        r = resolve(load_config(make_config(MODEL, {"tensor_model_parallel_size": 2},
                                            {"seq_length": 2048, "world_size": 2, "sequence_parallel": sp}, NV)))
        return layer_activations(r, LayerKind("attention", "dense"), parts=True).parts["norm_out"]
    assert norm_out(False) == norm_out(True) == 1_179_648


def test_breakdown_rows_still_add_up():
    """A DeepSeek-style MoE with MLA over 2 pipeline stages, NVFP4 weights: the breakdown's rows add up to the
    allocated peak of every stage."""
    model = dict(num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
                 num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=512, moe_shared_expert_intermediate_size=512,
                 multi_latent_attention=True, q_lora_rank=256, kv_lora_rank=128, qk_head_dim=64,
                 qk_pos_emb_head_dim=32, v_head_dim=64)
    e = estimate(make_config(model, {"pipeline_model_parallel_size": 2},
                             {"seq_length": 1024, "world_size": 2, "use_distributed_optimizer": True}, NVP))
    for b, s in zip(breakdown(e), e.stages):
        assert sum(row["bytes"] for row in b["rows"]) == s.allocated_bytes


# --- rules --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision, field", [
    ({"fp4": True, "fp8": True}, "precision.fp4"),
    ({"fp4_param_gather": True}, "precision.fp4_param_gather"),
    ({"fp4_recipe": "nvfp4"}, "precision.fp4_recipe"),
    ({"fp4": True, "fp4_recipe": "custom"}, "precision.fp4_recipe"),
])
def test_megatron_lm_rules_name_the_field(precision, field):
    """arguments.py validate_args: --fp4-format and --fp8-format exclude each other, --fp4-param-gather needs
    --fp4-format; the recipe applies only with fp4 and only nvfp4 is modelled."""
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        estimate(make_config(MODEL, None, {"seq_length": 2048}, precision))


def test_nvfp4_needs_transformer_engine_layers():
    with pytest.raises(ConfigError, match=r"precision\.fp4.*transformer_engine"):
        estimate(make_config(MODEL, None, {"seq_length": 2048, "transformer_impl": "local"}, NV))


@pytest.mark.parametrize("precision, parallelism, what", [
    ({"fp4": True, "params_dtype": "fp16"}, {}, "bfloat16|bf16"),
    ({"fp4": True}, {"use_megatron_fsdp": True}, "FSDP"),
    ({"fp4": True}, {"tensor_model_parallel_size": 2, "tp_comm_overlap": True}, "userbuffers"),
])
def test_what_is_not_modelled_is_refused(precision, parallelism, what):
    tr = {"seq_length": 2048, "world_size": 2, "use_distributed_optimizer": True,
          "sequence_parallel": bool(parallelism.get("tp_comm_overlap"))}
    with pytest.raises(UnsupportedError, match=what):
        estimate(make_config(MODEL, parallelism, tr, precision))


# --- importers ----------------------------------------------------------------------------------------------

BASE = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
        "--vocab-size 1000 --micro-batch-size 1 --bf16 --use-distributed-optimizer")


def test_megatron_lm_flags():
    cfg = parse_megatron_args(f"{BASE} --fp4-format e2m1 --fp4-recipe nvfp4 --fp4-param-gather")[0]["precision"]
    assert cfg["fp4"] is True and cfg["fp4_recipe"] == "nvfp4" and cfg["fp4_param_gather"] is True
    with pytest.raises(ConfigError, match="--fp4-format"):
        parse_megatron_args(f"{BASE} --fp4-format e4m3")
    with pytest.raises(RefusedFlagsError, match="--fp4-recipe custom"):
        parse_megatron_args(f"{BASE} --fp4-format e2m1 --fp4-recipe custom")
    both = parse_megatron_args(f"{BASE} --fp4-format e2m1 --fp8-format hybrid")[0]
    both["training"]["world_size"] = 1
    with pytest.raises(ConfigError, match=r"precision\.fp4"):
        estimate(both)


def test_bridge_presets():
    """Megatron-Bridge @ 067f987d training/mixed_precision.py: bf16_with_nvfp4_mixed sets fp4 e2m1, recipe nvfp4 and
    fp4_param_gather (fp4_param follows it); the Nemotron 3 Super preset keeps the last 14 layers in bf16."""
    model = {"num_layers": 16, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024,
             "vocab_size": 1024, "seq_length": 256}
    for name, end in (("bf16_with_nvfp4_mixed", None), ("nemotron_3_super_bf16_with_nvfp4_mixed", 14)):
        pr = read_bridge_config({"model": model, "train": {"micro_batch_size": 1, "global_batch_size": 1},
                                 "ddp": {"use_distributed_optimizer": True}, "mixed_precision": name},
                                world_size=1).config["precision"]
        assert pr["fp4"] is True and pr["fp4_recipe"] == "nvfp4" and pr["fp4_param_gather"] is True
        assert pr.get("num_layers_at_end_in_bf16") == end and bool(pr.get("first_last_layers_bf16")) == bool(end)


@pytest.mark.parametrize("precision", [NV, NVP, {**NV, "first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 0,
                                                 "num_layers_at_end_in_bf16": 2}])
def test_exports_read_back_to_the_same_estimate(precision):
    """Written as Megatron-LM flags (--fp4-format e2m1 --fp4-recipe nvfp4 [--fp4-param-gather]) and as Bridge
    sections (bf16_with_nvfp4_mixed), the configuration reads back to the same bytes."""
    from estimator.formats.bridge.export import to_bridge_dict
    from estimator.formats.megatron_export import to_megatron_args
    from estimator.formats.megatron_args import read_megatron_args
    cfg = make_config(MODEL, None, {"seq_length": 2048, "world_size": 1, "use_distributed_optimizer": True}, precision)
    words = to_megatron_args(cfg)
    assert "--fp4-format" in words and ("--fp4-param-gather" in words) == bool(precision.get("fp4_param_gather"))
    want = estimate(cfg).stages[0].allocated_bytes
    assert estimate(read_megatron_args(" ".join(words), world_size=1).config).stages[0].allocated_bytes == want
    bridge = to_bridge_dict(cfg)
    assert bridge["mixed_precision"]["_preset_"] == "bf16_with_nvfp4_mixed"
    assert estimate(read_bridge_config(bridge, world_size=1).config).stages[0].allocated_bytes == want


def test_an_nvfp4_run_takes_the_overall_error_band():
    """No NVFP4 run was measured (no Blackwell GPU), so its class has no figure and the verdict holds the overall
    worst under-estimate against the GPU."""
    from estimator.formats import error_bands_data
    from estimator.formats.error_bands import band_for
    band = band_for({"precision": {"fp4": True}})
    assert band.drivers == ("dense", "nvfp4") and band.driver == "overall"
    assert band.worst_error_pct == error_bands_data.OVERALL["worst_error_pct"]


def test_one_llama_3_8b_layer():
    """Llama 3 8B (h 4096, 32 heads, 8 KV groups of 128, SwiGLU 14336), one GPU: QKV 6144 x 4096, projection
    4096 x 4096, fc1 28672 x 4096, fc2 4096 x 14336, 218,103,808 linear elements. Scales, row-wise + column-wise:
    QKV 6144 x 256 + 4096 x 384 = 3,145,728; projection 2 x 4096 x 256 = 2,097,152; fc1 28672 x 256 + 4096 x 1792
    = 14,680,064; fc2 4096 x 896 + 14336 x 256 = 7,340,032; 27,262,976 B in all (1/8 B per element). So the layer's
    linear weights take 436,207,616 B in bf16 (416 MiB), 245,366,784 B as NVFP4 weights (234 MiB) and
    681,574,400 B as bf16 weights with cached NVFP4 copies (650 MiB)."""
    from estimator.memory.states import byte_model
    from estimator.model.layers import kind_linear_weights
    llama = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
                 vocab_size=128256)
    for pr, lin_bytes in ((NVP, 245_366_784), (NV, 681_574_400), ({}, 436_207_616)):
        r = resolve(load_config(make_config(llama, None, {"seq_length": 8192, "use_distributed_optimizer": True}, pr)))
        bm, n = byte_model(r), kind_linear_weights(r, r.kinds[0])
        assert n == 218_103_808
        assert (bm.linear_weight or bm.weight) * n + bm.fp8_cache * n + bm.layer_scales(0) == lin_bytes
