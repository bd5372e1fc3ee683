"""FP8 scaling factors (estimator/model/fp8_scales.py) against Transformer Engine's allocations, by hand.

TransformerEngine @ d0067d0d : transformer_engine/pytorch/csrc/quantizer.cpp ``MXFP8Quantizer::get_scale_shape``
(row-wise [up(M, 128), up(K/32, 4)], column-wise [up(M/32, 4), up(K, 128)], uint8 E8M0) and
``Float8BlockQuantizer::get_scale_shape`` (fp32; 2-D blocks for weights: row-wise [ceil(M/128),
up(ceil(K/128), 4)], column-wise [ceil(K/128), up(ceil(M/128), 4)]; 1-D blocks for inputs: column-wise
[ceil(M/128), up(K, 4)]), for an M x K tensor; up(x, m) rounds x up to a multiple of m.

The estimates use tests/memory/test_states.py's model: L=4, h=1024, 8 heads (MHA), GeLU MLP f=4096, untied vocabulary
32000, s=2048, b=1, one GPU, one micro-batch in flight. Its linear weights per layer: QKV 3072 x 1024, output
projection 1024 x 1024, fc1 4096 x 1024, fc2 1024 x 4096 (12,582,912 elements; LIN = 4 layers = 50,331,648),
every dimension a multiple of 128, so MXFP8 scales are exactly 1/32 B per element of each copy.
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.memory.activations import layer_activations
from estimator.memory.breakdown import breakdown
from estimator.config.load import load_config
from estimator.model.fp8_scales import saved_scale_bytes, tensor_scale_bytes, weight_scale_bytes
from estimator.model.layers import LayerKind
from estimator.model.resolve import resolve
from estimator.memory.states import byte_model
from tests.conftest import make_config

H, F, V, L = 1024, 4096, 32000, 4
N = L * (4 * H * H + H + 2 * H * F + H) + 2 * V * H + H      # 115,876,864
LIN = L * (4 * H * H + 2 * H * F)                             # 50,331,648
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def stage(precision=None, training=None, parallelism=None, model=None):
    tr = {"seq_length": 2048, "world_size": 1, "use_distributed_optimizer": True, **(training or {})}
    return estimate(make_config({**MODEL, **(model or {})}, parallelism, tr, precision)).stages[0]


def fp8(recipe: str, **more) -> dict:
    return {"fp8": True, "fp8_recipe": recipe, **more}


# --- one tensor ---------------------------------------------------------------------------------------------

def test_mxfp8_weight_keeps_one_scale_byte_per_32_elements_of_each_copy():
    """A 4096 x 1024 weight, both copies: row-wise 4096 x (1024/32 = 32) = 131,072 B, column-wise
    (4096/32 = 128) x 1024 = 131,072 B; 262,144 B = 4096 * 1024 / 16."""
    assert tensor_scale_bytes("mxfp8", 4096, 1024, True, True, True) == 262_144
    assert weight_scale_bytes("mxfp8", [(4096, 1024, 3)]) == 3 * 262_144


def test_mxfp8_scale_tensors_are_padded_to_128_by_4_tiles():
    """DeepSeek-V3's kv down-projection, 576 x 7168: row-wise up(576, 128) = 640 x up(224, 4) = 224 = 143,360 B,
    column-wise up(18, 4) = 20 x 7168 = 143,360 B: 286,720 B, not 576 * 7168 / 16 = 258,048. A 96 x 96 weight:
    128 x up(3, 4) = 4 x 128 = 512 B each way, 1,024 B (not 576)."""
    assert tensor_scale_bytes("mxfp8", 576, 7168, True, True, True) == 286_720
    assert tensor_scale_bytes("mxfp8", 96, 96, True, True, True) == 1_024


def test_blockwise_weight_keeps_fp32_scales_per_128x128_block():
    """4096 x 1024: 32 x 8 blocks; row-wise 32 x up(8, 4) = 256, column-wise 8 x up(32, 4) = 256: 512 fp32 =
    2,048 B (4096 * 1024 / 2048). 1280 x 640: 10 x 5 blocks; row-wise 10 x up(5, 4) = 80, column-wise
    5 x up(10, 4) = 60: 140 fp32 = 560 B."""
    assert tensor_scale_bytes("blockwise", 4096, 1024, True, True, True) == 2_048
    assert tensor_scale_bytes("blockwise", 1280, 640, True, True, True) == 560


def test_saved_inputs_keep_only_their_column_wise_scales():
    """An 8192 x 4096 input, column-wise only: MXFP8 up(256, 4) = 256 x 4096 = 1,048,576 B; blockwise 1 x 128
    blocks ceil(8192/128) = 64 x up(4096, 4) = 4096 fp32 = 1,048,576 B (both 1/32 B per element). Padding: MXFP8
    96 x 224 gives up(3, 4) = 4 x up(224, 128) = 256 = 1,024 B; blockwise 100 x 30 gives 1 x up(30, 4) = 32 fp32
    = 128 B. Delayed and tensorwise keep one fp32 per tensor, counted as 0."""
    assert saved_scale_bytes("mxfp8", 8192, 4096) == 1_048_576
    assert saved_scale_bytes("blockwise", 8192, 4096) == 1_048_576
    assert saved_scale_bytes("mxfp8", 96, 224) == 1_024
    assert saved_scale_bytes("blockwise", 100, 30) == 128
    assert saved_scale_bytes("delayed", 8192, 4096) == saved_scale_bytes("tensorwise", 8192, 4096) == 0


def test_each_expert_input_is_padded_on_its_own():
    """GroupedLinear quantizes each local expert's rows as a tensor of its own (_split_quantize): 128 rows x 128
    over 4 experts are four 32 x 128 tensors, each up(1, 4) = 4 x 128 = 512 B, 2,048 B; as one tensor
    up(4, 4) = 4 x 128 = 512 B."""
    assert saved_scale_bytes("mxfp8", 128, 128, tensors=4) == 2_048
    assert saved_scale_bytes("mxfp8", 128, 128) == 512


# --- weights ------------------------------------------------------------------------------------------------

def test_weight_scales_per_recipe():
    """Per layer (module docstring): MXFP8 (3072 + 1024 + 4096) x 1024 / 16 + 1024 x 4096 / 16 = 786,432 B, four
    layers LIN / 16 = 3,145,728 B. Blockwise, fp32 per 128 x 128 block of each copy: QKV 24 x 8 blocks,
    24 x 8 + 8 x 24 = 384; projection 8 x 8 + 8 x 8 = 128; fc1 32 x 8 + 8 x 32 = 512; fc2 512: 1,536 fp32 = 6,144 B,
    four layers 24,576 B. Tensorwise: per-tensor scales, none counted: 2 N + 2 LIN as before."""
    base = stage(fp8("tensorwise")).weights_bytes
    assert base == 2 * N + 2 * LIN
    assert stage(fp8("mxfp8")).weights_bytes - base == LIN // 16 == 3_145_728
    assert stage(fp8("blockwise")).weights_bytes - base == 24_576


def test_mtp_eh_proj_scales():
    """One MTP layer's eh_proj is a column-parallel 2h -> h linear, 1024 x 2048 on one GPU: MXFP8 1024 x 2048 / 16
    = 131,072 B; its transformer layer counts as a decoder layer (786,432 B)."""
    r = resolve(load_config(make_config({**MODEL, "mtp_num_layers": 1}, None, {"seq_length": 2048},
                                        fp8("mxfp8"))))
    bm = byte_model(r)
    assert bm.fp8_scales_mtp == 131_072
    assert bm.layer_scales(r.mtp_kinds[0]) == 786_432


def test_fp8_without_the_weight_cache_keeps_the_scales_with_each_micro_batch():
    """disable_parameter_transpose_cache: the FP8 copies and their scales are made per micro-batch and saved for its
    backward pass (one here): weights 2 N; fp8_weight_copies 2 LIN + LIN / 16 = 100,663,296 + 3,145,728."""
    s = stage(fp8("mxfp8", disable_parameter_transpose_cache=True))
    assert s.weights_bytes == 2 * N
    assert s.activations["fp8_weight_copies"] == 2 * LIN + LIN // 16 == 103_809_024


def test_bf16_first_and_last_layers_have_no_scales():
    """first_last_layers_bf16 with one layer at each end: two FP8 layers of 786,432 B scales each."""
    pr = dict(first_last_layers_bf16=True, num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=1)
    assert stage(fp8("mxfp8", **pr)).weights_bytes - stage(fp8("tensorwise", **pr)).weights_bytes == 2 * 786_432


def test_megatron_fsdp_keeps_the_scales_with_the_fp8_copies():
    """Megatron-FSDP over 2 GPUs. no_shard: the cache and its scales on every GPU, + LIN / 16. optim_grads_params
    with fp8_param_gather: the FP8 parameters keep their scale tensors whole (Megatron-FSDP's buffers take only
    the raw data): sharded weights + LIN / 16, and MXFP8's column-wise buffer, sharded like the row-wise one, LIN / 2
    (tests/memory/features/test_fsdp.py). optim_grads_params without it: the cache comes with the gathered
    units, all four here (prefetch up to 5e8 elements): + 4 x 786,432 B in fsdp_gathered_units."""
    par = {"use_megatron_fsdp": True}
    tr = {"world_size": 2}
    for strat, pg, shard in (("no_shard", False, 0), ("optim_grads_params", True, LIN // 2)):
        p = {**par, "data_parallel_sharding_strategy": strat}
        mx = stage(fp8("mxfp8", fp8_param_gather=pg), tr, p).weights_bytes
        assert mx - stage(fp8("tensorwise", fp8_param_gather=pg), tr, p).weights_bytes == LIN // 16 + shard
    p = {**par, "data_parallel_sharding_strategy": "optim_grads_params"}
    units = [stage(fp8(rec), tr, p).transient["fsdp_gathered_units"] for rec in ("mxfp8", "tensorwise")]
    assert units[0] - units[1] == 4 * 786_432


# --- activations --------------------------------------------------------------------------------------------

def test_saved_inputs_carry_their_scales():
    """Per layer and micro-batch (T = 2048 tokens, no sequence parallelism): the quantized inputs saved are QKV's
    (its norm output) 2048 x 1024, fc1's (the MLP norm output) 2048 x 1024 and fc2's 2048 x 4096, 1/32 B per element
    column-wise with MXFP8 and blockwise (every dimension a multiple of 128): 65,536 + 65,536 + 262,144 = 393,216 B;
    four layers 1,572,864 B. The output projection saves no FP8 copy but with the delayed recipe (Megatron-Core's
    save_original_input for the others): delayed adds its 2048 x 1024 x 1 B = 2,097,152 B per layer, 8,388,608 B
    for four."""
    base = stage(fp8("tensorwise")).activations_bytes
    assert stage(fp8("mxfp8")).activations_bytes - base == 4 * 393_216
    assert stage(fp8("blockwise")).activations_bytes - base == 4 * 393_216
    assert stage(fp8("delayed")).activations_bytes - base == 8_388_608


@pytest.mark.parametrize("recipe, proj_copy", [("delayed", 2_097_152), ("tensorwise", 0), ("mxfp8", 0),
                                               ("blockwise", 0)])
def test_only_delayed_scaling_saves_an_fp8_copy_of_the_projection_input(recipe, proj_copy):
    """Megatron-LM @ d98e8a64 : megatron/core/transformer/attention.py sets save_original_input on linear_proj when
    fp8_recipe != 'delayed' (TransformerEngine @ d0067d0 : module/linear.py then saves the bf16 input for the
    requantization-safe current-scaling, MXFP8 and blockwise quantizers). T = 2048 tokens, a dh = 8 x 128 = 1024:
    delayed keeps 2048 x 1024 x 1 B = 2,097,152 B (no block scales), the others nothing. The MLP's norm output is
    fc1's quantized input (LayerNormLinear quantizes it): 2048 x 1024 x 1 B = 2,097,152 B, + 2048 x 1024 / 32 =
    65,536 B of column-wise scales with mxfp8 (E8M0) and blockwise (1 x 128 blocks of fp32: 1024 / 128 x 2048 x 4 B)."""
    r = resolve(load_config(make_config(MODEL, None, {"seq_length": 2048}, fp8(recipe))))
    parts = layer_activations(r, LayerKind("attention", "dense"), parts=True).parts
    assert parts["proj_in_fp8"] == proj_copy
    assert parts["mlp_norm_out"] == 2_097_152 + (65_536 if recipe in ("mxfp8", "blockwise") else 0)


MLA = dict(num_layers=2, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
           multi_latent_attention=True, q_lora_rank=256, kv_lora_rank=128, qk_head_dim=64, qk_pos_emb_head_dim=32,
           v_head_dim=64)


@pytest.mark.parametrize("q_lora_rank", [256, None])
def test_mla_down_projections_each_save_a_quantized_copy_of_the_norm_output(q_lora_rank):
    """MLASelfAttention (Megatron-LM @ d98e8a64 : gpt_layer_specs.py, a separate TENorm; multi_latent_attention.py
    _qkv_down_projection): the norm output feeds linear_q_down_proj (linear_q_proj without q_lora_rank) and
    linear_kv_down_proj. In bf16 both save the same tensor, 2048 x 1024 x 2 B = 4,194,304 B; with FP8 each quantizes
    it: 2 x 2048 x 1024 x 1 B = 4,194,304 B (tensorwise), + 2 x 65,536 B of column-wise scales with mxfp8."""
    model = {**MLA, "q_lora_rank": q_lora_rank}
    got = {}
    for name, pr in (("bf16", None), ("tensorwise", fp8("tensorwise")), ("mxfp8", fp8("mxfp8"))):
        r = resolve(load_config(make_config(model, None, {"seq_length": 2048}, pr)))
        got[name] = layer_activations(r, LayerKind("mla", "dense"), parts=True).parts["norm_out"]
    assert got == {"bf16": 4_194_304, "tensorwise": 4_194_304, "mxfp8": 4_194_304 + 131_072}


def test_expert_inputs_are_padded_per_local_expert():
    """8 experts, top-2, s = 768, one GPU: 1536 routed rows, 192 per expert. fc1's input (h = 1024) per expert
    up(6, 4) = 8 x 1024 = 8,192 B of scales: 1536 x 1024 + 8 x 8,192 = 1,572,864 + 65,536 = 1,638,400 B (one
    tensor of 1536 rows would have 49,152). fc2's input (expert width 512, SwiGLU: nothing else kept):
    1536 x 512 + 8 x (8 x 512) = 786,432 + 32,768 = 819,200 B."""
    moe = dict(num_layers=2, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
               num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=512)
    r = resolve(load_config(make_config(moe, None, {"seq_length": 768}, fp8("mxfp8"))))
    parts = layer_activations(r, LayerKind("attention", "moe"), parts=True).parts
    assert parts["expert_in"] == 1_638_400
    assert parts["expert_act_out"] == 819_200


@pytest.mark.parametrize("recipe", ["mxfp8", "blockwise"])
def test_breakdown_rows_still_add_up(recipe):
    """The scales sit inside the named activation parts and the weights: the breakdown's rows add up to the
    allocated peak of every stage (a DeepSeek-style MoE with MLA over 2 pipeline stages)."""
    model = dict(num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
                 num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=512, moe_shared_expert_intermediate_size=512,
                 multi_latent_attention=True, q_lora_rank=256, kv_lora_rank=128, qk_head_dim=64,
                 qk_pos_emb_head_dim=32, v_head_dim=64)
    e = estimate(make_config(model, {"pipeline_model_parallel_size": 2}, {"seq_length": 1024, "world_size": 2},
                             fp8(recipe)))
    for b, s in zip(breakdown(e), e.stages):
        assert sum(row["bytes"] for row in b["rows"]) == s.allocated_bytes
