"""Issues 27 / 28, "what Bridge can train, we estimate": one pretrain and one SFT or PEFT recipe of each family the
estimator models, by name.

The expected sizes are read off the recipe functions at NVIDIA-NeMo/Megatron-Bridge @ 067f987d, never from the
catalogue or the estimator: (TP, PP, VP, CP, EP, world, micro-batch, global batch, sequence) as the function and
the common helper it starts from set them (recipes/common.py _pretrain_common: mbs 2, gbs 32, seq 4096;
_sft_common / _peft_common: mbs 1, gbs 128, seq 2048; _sft_common_vlm / _peft_common_vlm: mbs 2, gbs 32,
seq 4096). VP None is written 1; EP unset is 1.
"""

from __future__ import annotations

import pytest

from estimator import EstimatorError, estimate
from estimator.config.pipeline_layout import expand_layout
from estimator.formats.bridge.recipes import read_bridge_recipe

R = "src/megatron/bridge/recipes/"
#: recipe -> (file, (TP, PP, VP, CP, EP, GPUs, mbs, gbs, seq)).
SIZES = {
    # qwen_vl/h100/qwen25_vl.py: TP 1, PP 1, CP 1 on _sft_common_vlm / _peft_common_vlm (mbs 2, gbs 32, seq 4096)
    "qwen25_vl_3b_sft_1gpu_h100_bf16_config": (R + "qwen_vl/h100/qwen25_vl.py", (1, 1, 1, 1, 1, 1, 2, 32, 4096)),
    # glm/h100/glm5.py: TP 1, PP 13, VP 2, CP 1, EP 32, mbs 1, gbs 1024, seq 4096
    "glm52_pretrain_416gpu_h100_bf16_config": (R + "glm/h100/glm5.py", (1, 13, 2, 1, 32, 416, 1, 1024, 4096)),
    # perf_recipes/glm_moe_dsa/h100/glm5.py (the benchmark wins the bare name): CP 32, seq 131072, gbs 520
    "glm52_sft_416gpu_h100_bf16_config": ("src/megatron/bridge/perf_recipes/glm_moe_dsa/h100/glm5.py",
                                          (1, 13, 2, 32, 32, 416, 1, 520, 131072)),
    # exaone/h100/exaone4.py _apply_exaone4_common: TP 1, PP 1, CP 1; SFT seq 2048, gbs 128
    "exaone4_1p2b_pretrain_1gpu_h100_bf16_config": (R + "exaone/h100/exaone4.py", (1, 1, 1, 1, 1, 1, 2, 32, 4096)),
    "exaone4_1p2b_sft_1gpu_h100_bf16_config": (R + "exaone/h100/exaone4.py", (1, 1, 1, 1, 1, 1, 1, 128, 2048)),
    # gemma/h100/gemma2.py: pretrain TP 8; SFT TP 4, seq 2048, gbs 128, mbs 1
    "gemma2_9b_pretrain_8gpu_h100_bf16_config": (R + "gemma/h100/gemma2.py", (8, 1, 1, 1, 1, 8, 2, 32, 4096)),
    "gemma2_9b_sft_4gpu_h100_bf16_config": (R + "gemma/h100/gemma2.py", (4, 1, 1, 1, 1, 4, 1, 128, 2048)),
    # gemma/h100/gemma3.py: TP 1, seq SEQUENCE_LENGTH_32K (32768), gbs 512, mbs 1
    "gemma3_1b_pretrain_1gpu_h100_bf16_config": (R + "gemma/h100/gemma3.py", (1, 1, 1, 1, 1, 1, 1, 512, 32768)),
    # qwen/h100/qwen3_next.py: pretrain PP 4, EP 8 (common batch); SFT PP 2, EP 8, seq 2048, gbs 64, mbs 1
    "qwen3_next_80b_a3b_pretrain_32gpu_h100_bf16_config": (R + "qwen/h100/qwen3_next.py",
                                                           (1, 4, 1, 1, 8, 32, 2, 32, 4096)),
    "qwen3_next_80b_a3b_sft_16gpu_h100_bf16_config": (R + "qwen/h100/qwen3_next.py", (1, 2, 1, 1, 8, 16, 1, 64, 2048)),
    # qwen_vl/h100/qwen35_vl.py: TP 4, PP 4; SFT mbs 4
    "qwen35_vl_27b_pretrain_16gpu_h100_bf16_mock_config": (R + "qwen_vl/h100/qwen35_vl.py",
                                                           (4, 4, 1, 1, 1, 16, 2, 32, 4096)),
    "qwen35_vl_27b_sft_16gpu_h100_bf16_config": (R + "qwen_vl/h100/qwen35_vl.py", (4, 4, 1, 1, 1, 16, 4, 32, 4096)),
    # nemotronh/h100/nemotron_3_nano.py _nemotron_3_nano_finetune_model: TP 1, PP 1, EP 8; seq 2048 (_sft_common)
    "nemotron_3_nano_sft_8gpu_h100_bf16_config": (R + "nemotronh/h100/nemotron_3_nano.py",
                                                  (1, 1, 1, 1, 8, 8, 1, 128, 2048)),
    # gemma3_vl/h100/gemma3_vl.py: TP 1, PP 1, CP 1 on _sft_common_vlm (mbs 2, gbs 32, seq 4096)
    "gemma3_vl_4b_sft_1gpu_h100_bf16_config": (R + "gemma3_vl/h100/gemma3_vl.py", (1, 1, 1, 1, 1, 1, 2, 32, 4096)),
    # gemma4_vl/h100/gemma4_vl.py: TP 4, PP 1, CP 1, EP 8 on 8 GPUs; _apply_gemma4_vl_common mbs 1, gbs 32, seq 4096
    "gemma4_vl_26b_sft_8gpu_h100_bf16_config": (R + "gemma4_vl/h100/gemma4_vl.py", (4, 1, 1, 1, 8, 8, 1, 32, 4096)),
    # olmoe/h100/olmoe_7b.py: TP 1, PP 1, EP 8; pretrain gbs 2048, mbs 1; SFT seq 4096 (packed), gbs 128
    "olmoe_7b_pretrain_8gpu_h100_bf16_config": (R + "olmoe/h100/olmoe_7b.py", (1, 1, 1, 1, 8, 8, 1, 2048, 4096)),
    "olmoe_7b_sft_8gpu_h100_bf16_config": (R + "olmoe/h100/olmoe_7b.py", (1, 1, 1, 1, 8, 8, 1, 128, 4096)),
    # kimi_vl/h100/kimi_k25_vl.py: TP 2, PP 16 (its layout, no VP), EP 32, ETP 1 on 512 GPUs; mbs 1, gbs 4096, seq
    # 4096; distributed_muon_with_cosine_annealing beside the MoonViT tower (test_kimi_k25_vl_... below)
    "kimi_k25_vl_sft_512gpu_h100_bf16_config": (R + "kimi_vl/h100/kimi_k25_vl.py",
                                                (2, 16, 1, 1, 32, 512, 1, 4096, 4096)),
}

def test_qwen25_vl_peft_recipe_estimates_with_the_tower_frozen():
    """qwen25_vl_3b_peft_1gpu_h100_bf16_config: LoRA (default_peft_config("lora"): dim 32 on linear_qkv,
    linear_proj, linear_fc1, linear_fc2) on Qwen2.5-VL 3B, TP 1 on 1 GPU. Bridge's PEFT freezes every parameter and
    adapts only modules of those names; the Hugging Face tower's linears (qkv, proj, gate/up/down_proj, the
    merger's mlp.0 / mlp.2) are none of them, so the tower and merger are frozen whole although the recipe sets
    freeze_vision_* False (Bridge @ 067f987d : peft/base.py, peft/module_matcher.py, models/qwen_vl/
    modeling_qwen25_vl.py). By hand (Qwen2.5-VL-3B-Instruct config.json: h 2048, 36 layers, 16 heads and 2 KV heads
    of 128, SwiGLU 11,008): a layer's adapters are 32 x (2048 + 2560) qkv + 32 x (2048 + 2048) proj
    + 32 x (2048 + 2 x 11,008) fc1 + 32 x (11,008 + 2048) fc2 = 1,466,368; 36 layers: 52,789,248 trained
    parameters, with fp32 gradients (bf16_mixed: grad_reduce_in_fp32) 211,156,992 B and fp32 master copy and two
    Adam moments (DP 1) 633,470,976 B; the 3,754,622,976 base parameters (tower included) keep their bf16
    weights only: 2 x (3,754,622,976 + 52,789,248) = 7,614,824,448 B."""
    cfg = read_bridge_recipe("qwen25_vl_3b_peft_1gpu_h100_bf16_config").config
    assert _sizes(cfg) == (1, 1, 1, 1, 1, 1, 2, 32, 4096)
    tr = cfg["training"]
    assert (tr["peft"], tr["freeze_vision_model"], tr["freeze_vision_projection"]) == ("lora", True, True)
    adapters = 36 * (32 * (2048 + 2560) + 32 * (2048 + 2048) + 32 * (2048 + 2 * 11_008) + 32 * (11_008 + 2048))
    assert adapters == 52_789_248
    stage = estimate(cfg).to_dict()["stages"][0]
    assert stage["gradients_bytes"] == 4 * adapters == 211_156_992
    assert stage["optimizer_bytes"] == 12 * adapters == 633_470_976
    assert stage["weights_bytes"] == 2 * (3_754_622_976 + adapters) == 7_614_824_448


def test_gemma3_vl_sft_recipe_keeps_the_model_vocabulary_unpadded():
    """gemma3_vl_4b_sft_1gpu_h100_bf16_config trains with _sft_common_vlm's NullTokenizer (use_tokenizer_vocab_size
    False), smaller than the model's 262,208 rows, so Bridge's training/setup.py _validate_and_set_vocab_size keeps
    the provider's vocab_size and does not pad it (should_pad_vocab False). Expected from KerasHub's count of Gemma 3
    4B instruct, 4,299,915,632 parameters with its 262,144-row tied vocabulary (keras-team/keras-hub @ 71453d08 :
    keras_hub/src/models/gemma3/gemma3_presets.py), plus Hugging Face's 64 more rows of 2560: 4,300,079,472 (padded
    to 262,272 rows it was 163,840 more)."""
    cfg = read_bridge_recipe("gemma3_vl_4b_sft_1gpu_h100_bf16_config").config
    total = estimate(cfg).to_dict()["parameters"]["total"]
    assert total == 4_299_915_632 + (262_208 - 262_144) * 2560 == 4_300_079_472


def test_peft_beside_a_trained_qwen25_vl_tower_is_refused_with_the_fix():
    """The same recipe with the tower said trained: Bridge would freeze it anyway (PEFT freezes the whole model), so
    the configuration contradicts the run; the refusal names the fields to set."""
    cfg = read_bridge_recipe("qwen25_vl_3b_peft_1gpu_h100_bf16_config").config
    cfg["training"]["freeze_vision_model"] = False
    with pytest.raises(EstimatorError, match="freeze_vision_model false") as err:
        estimate(cfg)
    assert "set training.freeze_vision_model and freeze_vision_projection true" in str(err.value)
    assert "re-plans" not in str(err.value)


def _sizes(cfg: dict) -> tuple:
    """With a layout the virtual stages are its segments over PP (Megatron-Core's PipelineParallelLayerLayout
    derives VP from it; the configuration read keeps the layout only)."""
    par, tr = cfg["parallelism"], cfg["training"]
    pp, layout = par.get("pipeline_model_parallel_size", 1), par.get("pipeline_model_parallel_layout")
    vp = len(expand_layout(layout)) // pp if layout else par.get("virtual_pipeline_model_parallel_size") or 1
    return (par.get("tensor_model_parallel_size", 1), pp, vp, par.get("context_parallel_size", 1),
            par.get("expert_model_parallel_size", 1), tr["world_size"], tr["micro_batch_size"],
            tr["global_batch_size"], tr["seq_length"])


@pytest.mark.parametrize("name", sorted(SIZES))
def test_recipe_estimates_with_its_parallel_sizes(name):
    """The recipe's sizes reach the configuration, and it estimates: one stage per pipeline rank, each with a
    positive peak."""
    source, want = SIZES[name]
    cfg = read_bridge_recipe(name).config
    assert _sizes(cfg) == want, source
    stages = estimate(cfg).to_dict()["stages"]
    assert len(stages) == want[1] and all(s["device_bytes"] > 0 for s in stages)


def test_glm52_sft_is_the_benchmark_recipe_with_its_layout():
    """perf_recipes/glm_moe_dsa/h100/glm5.py glm52_sft_416gpu_h100_bf16_config: the layout string written in the
    function, 26 virtual stages of PP 13 x VP 2 (25 '|'), 78 decoder layers ('t') and the MTP layer ('m');
    416 GPUs = PP 13 x CP 32, so DP 1, and EP 32 within CP 32 x DP 1."""
    cfg = read_bridge_recipe("glm52_sft_416gpu_h100_bf16_config").config
    chunks = expand_layout(cfg["parallelism"]["pipeline_model_parallel_layout"])
    assert len(chunks) == 13 * 2 and "".join(chunks).count("t") == 78 and chunks[0] == "Et" and chunks[-1] == "ttttmL"
    assert cfg["parallelism"]["cp_comm_type"] == "allgather"


def test_olmoe_recipe_keeps_the_full_width_qk_norms():
    """OLMoESelfAttention's q and k norms span all 16 heads of 128 (olmoe_provider.py): the recipe path keeps
    qk_layernorm_full_dim, which no pretrain_gpt.py flag says. By hand, with it: per layer q, k, v, o 4 x 2048^2 =
    16,777,216, q/k norms 2 x 2048, 64 experts 64 x 3 x 2048 x 1024 = 402,653,184, router 64 x 2048, two norms
    2 x 2048: 419,569,664; 16 layers + 2 x 50,304 x 2048 + 2048 = 6,919,161,856."""
    est = estimate(read_bridge_recipe("olmoe_7b_pretrain_8gpu_h100_bf16_config").config)
    assert est.to_dict()["parameters"]["total"] == 16 * 419_569_664 + 2 * 50_304 * 2048 + 2048 == 6_919_161_856


def test_gemma2_recipe_keeps_the_gemma_spec():
    """gemma-2-9b through gemma2_9b_pretrain_8gpu_h100_bf16_config: post-norms, GeGLU and logit soft-capping survive
    the Bridge sections. By hand (config.json: h 3584, 42 layers, 16 heads and 8 KV heads of 256, GeGLU 14,336,
    tied 256,000 vocabulary): q 3584 x 4096 + k, v 2 x 3584 x 2048 + o 4096 x 3584 = 44,040,192; MLP 3 x 3584 x
    14,336 = 154,140,672; four norms 4 x 3584 = 14,336: 198,195,200 a layer; 42 x that + 256,000 x 3584 + 3584 =
    9,241,705,984."""
    cfg = read_bridge_recipe("gemma2_9b_pretrain_8gpu_h100_bf16_config").config
    m = cfg["model"]
    assert (m["post_layernorm"], m["activation_func"], m["final_logit_softcapping"]) == (True, "geglu", 30.0)
    per = 3584 * 4096 + 2 * 3584 * 2048 + 4096 * 3584 + 3 * 3584 * 14_336 + 4 * 3584
    assert per == 198_195_200
    assert estimate(cfg).to_dict()["parameters"]["total"] == 42 * per + 256_000 * 3584 + 3584 == 9_241_705_984


def test_gemma4_vl_recipe_keeps_the_global_layers_and_the_frozen_tower():
    """gemma4_vl_26b_sft_8gpu_h100_bf16_config on google/gemma-4-26B-A4B-it: the global-attention layers' own
    width and key/value heads (config.json text_config: global_head_dim 512, num_global_key_value_heads 2, every
    sixth layer full_attention) survive the Bridge sections beside post-norms, GeGLU and soft-capping 30.0; the
    27-layer Gemma 4 tower (vision_config.num_hidden_layers) is frozen (cfg.model.freeze_vision_model = True), the
    projection and language model trained; TP 4 with sequence parallelism and full uniform recompute of 1 layer."""
    cfg = read_bridge_recipe("gemma4_vl_26b_sft_8gpu_h100_bf16_config").config
    m, tr = cfg["model"], cfg["training"]
    assert (m["global_attention_freq"], m["global_kv_channels"], m["num_global_query_groups"]) == (6, 512, 2)
    assert (m["post_layernorm"], m["activation_func"], m["final_logit_softcapping"]) == (True, "geglu", 30.0)
    assert (m["vision_model_type"], m["vision_num_layers"]) == ("gemma4", 27)
    assert tr["freeze_vision_model"] is True and not tr.get("freeze_vision_projection")
    assert not tr.get("freeze_language_model")
    assert (tr["sequence_parallel"], tr["recompute_granularity"], tr["recompute_method"],
            tr["recompute_num_layers"]) == (True, "full", "uniform", 1)


def test_kimi_k25_vl_sft_recipe_gives_moonvits_matrices_to_muon():
    """kimi_k25_vl_sft_512gpu_h100_bf16_config trains Kimi K2.5 with distributed Muon (ping-pong layout: Bridge's
    distributed_muon_with_cosine_annealing leaves use_layer_wise_param_layout off) beside the MoonViT tower, Hugging
    Face remote code whose 2-D weights Muon takes and the rest Adam (Megatron-LM @ d98e8a64 :
    megatron/core/optimizer/layer_wise_optimizer.py is_managed_by_layer_wise_optimizer). By hand from Kimi K2.5's
    vision_config (hv 1152, 16 heads, fv 4304, 27 layers, patch 14, merge 2; projector out 7168):
    each layer qkv 3456 x 1152 + out 1152 x 1152 + fc0 4304 x 1152 + fc1 1152 x 4304 = 15,224,832, 27 of them
    411,070,464; the projector 4608 x 4608 + 7168 x 4608 = 54,263,808; Muon's 465,334,272. Adam's rest of the
    encoder: the Conv2d 3 x 14 x 14 x 1152 + 1152 = 678,528, the position grid 64 x 64 x 1152 = 4,718,592, per layer
    two LayerNorms 4,608 and biases 3456 + 1152 + 4304 + 1152 = 10,064 (27 x 14,672 = 396,144), the final LayerNorm
    2,304: 5,795,568. Freezing the encoder takes its optimizer states off stage 0's 16 data-parallel ranks
    (512 / (TP 2 x PP 16)): (8 x 411,070,464 + 12 x 5,795,568) / 16 = 205,535,232 + 4,346,676 = 209,881,908 B
    (at Adam's 12 B for all of it, 12 x 416,866,032 / 16 = 312,649,524)."""
    from estimator.memory.vision import vision_stage
    from estimator.model.resolve import resolve
    from estimator.config.load import load_config
    cfg = read_bridge_recipe("kimi_k25_vl_sft_512gpu_h100_bf16_config").config
    tr = cfg["training"]
    assert (tr["optimizer"], tr["use_distributed_optimizer"], tr["use_layer_wise_param_layout"]) == ("muon", True,
                                                                                                      False)
    per = 3456 * 1152 + 1152 * 1152 + 4304 * 1152 + 1152 * 4304
    assert per == 15_224_832
    vs = vision_stage(resolve(load_config(cfg)))
    assert vs.trained_matrices == 27 * per + 4608 * 4608 + 7168 * 4608 == 465_334_272
    trained = estimate(cfg).stages[0].optimizer_bytes
    cfg["training"]["freeze_vision_model"] = True
    frozen = estimate(cfg).stages[0].optimizer_bytes
    assert trained - frozen == (8 * 411_070_464 + 12 * 5_795_568) // 16 == 209_881_908
