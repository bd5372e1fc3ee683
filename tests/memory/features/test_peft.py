"""LoRA and DoRA as Megatron-Bridge configures them (estimator/memory/features/peft.py), against hand calculations.

The small model of tests/memory/test_memory.py (L=4, h=1024, 8 MHA heads of 128, GeLU f=4096, untied, vocabulary
32000, bf16), sequence T = 2048, TP 1 (no sequence parallelism), adapter rank r = 8.

Adapter parameters per layer, r x (in + out): qkv 8 x (1024 + 3072) = 32,768; proj 8 x (1024 + 1024) = 16,384;
fc1 8 x (1024 + 4096) = 40,960; fc2 8 x (4096 + 1024) = 40,960; together 131,072, so A = 524,288 for 4 layers.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_preset
from tests.conftest import make_config

H, F, V, L, T, R = 1024, 4096, 32000, 4, 2048, 8
N = L * (4 * H * H + H + 2 * H * F + H) + 2 * V * H + H
A = L * (R * (H + 3 * H) + R * (H + H) + R * (H + F) + R * (F + H))     # 524,288
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def est(training=None, parallelism=None, model=None, precision=None):
    tr = {"seq_length": T, "world_size": 1, "peft_dim": R}
    tr.update(training or {})
    return estimate(make_config({**MODEL, **(model or {})}, parallelism, tr, precision)).stages[0]


def test_lora_states_frozen_base_trainable_adapters():
    """Weights: everything in bf16, 2 (N + A). Gradients only for the adapters, in the fp32 gradient buffer
    (4 A); optimizer only for the adapters, fp32 master + two moments (12 A)."""
    s = est({"peft": "lora"})
    assert (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes) == (2 * (N + A), 4 * A, 12 * A)


def test_lora_on_all_four_adds_only_the_bottlenecks():
    """Every frozen linear's input is saved by its adapter instead (norm output 2Th, attention output, norm
    output 2Th, activation output 2Tf): the same bytes. Each adapter adds its bottleneck 2 x T x r:
    4 adapters x 4 layers x 2 x 2048 x 8 = 524,288 bytes."""
    full = est({"peft_dim": 32}).activations_bytes          # no PEFT (peft_dim at its default)
    assert est({"peft": "lora"}).activations_bytes - full == L * 4 * 2 * T * R


def test_lora_on_qkv_only_drops_the_frozen_mlp_inputs():
    """Only linear_qkv adapted: fc1 and fc2 are frozen, so neither the pre-MLP norm output (2Th) nor the
    activation output (2Tf) is saved; the qkv adapter adds its bottleneck 2Tr. Per layer 2Tr - 2Th - 2Tf."""
    full = est({"peft_dim": 32}).activations_bytes
    lora = est({"peft": "lora", "peft_target_modules": ["linear_qkv"]}).activations_bytes
    assert lora - full == L * (2 * T * R - 2 * T * H - 2 * T * F)


def test_frozen_base_needs_no_weight_gradient_buffers():
    """No Transformer Engine dummy weight gradients, no output-layer or embedding weight gradient. The largest
    transient buffer is then the loss forward's bf16 logits, 2 x T x V = 131,072,000 bytes (the fp32 softmax
    is counted with the activations), above a layer's backward working set 2 x T x f + 2 x 2 x T x h."""
    t = est({"peft": "lora"}).transient
    assert "te_dummy_wgrad" not in t and "output_layer_wgrad" not in t and "embedding_wgrad" not in t
    assert t["loss_forward"] == 2 * T * V


def test_dora_magnitudes_activations_and_weight_norm():
    """DoRA adds a magnitude per output: qkv 3072 + proj 1024 + fc1 4096 + fc2 1024 = 9216 per layer; keeps each
    adapted layer's pre-magnitude output, 2 x T x 9216 per layer; and forms W + sBA of the largest adapted weight
    (fc1 or fc2, 1024 x 4096 x 2 B) while computing the norm."""
    lora, dora = est({"peft": "lora"}), est({"peft": "dora"})
    assert dora.gradients_bytes - lora.gradients_bytes == 4 * L * 9216
    assert dora.activations_bytes - lora.activations_bytes == L * 2 * T * 9216
    assert dora.transient["dora_weight_norm"] == 2 * H * F


def test_llama3_70b_lora_trainable_states():
    """Megatron-Bridge's llama3_70b_peft_8gpu_h100_bf16_config: TP 8, rank 16, all four targets, bf16 gradient
    buffer (grad_reduce_in_fp32 False), no distributed optimizer. Adapters per layer on one GPU, 16 x (in + out)/8:
    qkv 16 x (8192 + 10240)/8 = 36,864; proj 16 x 16384/8 = 32,768; fc1 16 x (8192 + 57344)/8 = 131,072;
    fc2 16 x (28672 + 8192)/8 = 73,728; 274,432 per layer, 21,954,560 for 80 layers."""
    s = estimate(load_preset("llama-3-70b-lora")).stages[0]
    n = 80 * 274_432
    assert (s.gradients_bytes, s.optimizer_bytes) == (2 * n, 12 * n)


def test_peft_rules():
    with pytest.raises(ConfigError, match="no expert adapter path"):
        est({"peft": "dora"}, model={"num_experts": 4})
    with pytest.raises(ConfigError, match="overlap_moe_expert_parallel_comm is not modelled"):
        est({"peft": "lora", "world_size": 2, "overlap_moe_expert_parallel_comm": True},
            {"expert_model_parallel_size": 2}, model={"num_experts": 4})
    with pytest.raises(ConfigError, match="is a LoRA option"):
        est({"peft": "dora", "peft_sequence_parallel_input_regather": True})
    with pytest.raises(ConfigError, match="applies only with an MoE model"):
        est({"peft": "lora", "peft_share_expert_adapters": False})
    with pytest.raises(ConfigError, match="applies only with peft"):
        est({"peft_sequence_parallel_input_regather": True})
    with pytest.raises(ConfigError, match="divisible by tensor_model_parallel_size"):
        est({"peft": "lora", "peft_dim": 3, "world_size": 2}, {"tensor_model_parallel_size": 2})
    with pytest.raises(ConfigError, match="applies only with peft"):
        est({"peft_target_modules": ["linear_qkv"]})


def test_trainable_adapter_count_of_llama_3_70b_lora():
    """Issue 29 item 4: the whole model's trainable adapters, as the preset's note counts them by hand: LoRA rank 16
    on qkv (8192 -> 10240), proj (8192 -> 8192), fc1 (8192 -> 2 x 28672) and fc2 (28672 -> 8192) of 80 layers:
    80 x 16 x (18432 + 16384 + 65536 + 36864) = 175,636,480. DoRA adds each linear's output-sized magnitude:
    80 x (10240 + 8192 + 57344 + 8192) = 6,717,440 more."""
    from estimator.config.load import config_from_dict
    from estimator.formats.presets import load_preset
    from estimator.memory.features.peft import adapter_total
    from estimator.model.resolve import resolve
    cfg = load_preset("llama-3-70b-lora").to_dict()
    assert adapter_total(resolve(config_from_dict(cfg))) == 175_636_480
    cfg["training"]["peft"] = "dora"
    assert adapter_total(resolve(config_from_dict(cfg))) == 175_636_480 + 6_717_440


def test_lora_view_says_lora_and_its_assumptions_agree():
    """Issue 29 item 4: with the LoRA preset the headline and summary say LoRA rank 16, the parameters line gives the
    175.64 M trainable adapters, and no assumption says the frozen base has gradients or optimizer states."""
    import json
    from estimator import web
    res = json.loads(web.handle(json.dumps({"op": "compute", "state": {"preset": "llama-3-70b-lora", "values": {}}})))
    v = res["view"]
    assert "LoRA rank 16" in v["headline"]
    assert "LoRA adapters of rank 16" in v["summary"]
    assert "175.64 M trainable" in v["parameters"]
    first = v["assumptions"][0]
    assert "of each trainable adapter parameter" in first and "frozen base weights take 2 B each" in first
    assert not any(a.endswith("per parameter (no distributed optimizer: nothing sharded).") for a in v["assumptions"])


# --- MoE (issue 28 item 6): Qwen3-30B-A3B and GPT-OSS-120B as Megatron-Bridge adapts them ---------------------------
#
# Qwen3-30B-A3B: 48 layers, h 2048, 32 heads of 128 in 4 groups, 128 experts top-8 of width 768 (SwiGLU), no shared
# experts. Adapted linears (in -> out): qkv 2048 -> (32 + 2 x 4) x 128 = 5120; proj 4096 -> 2048; an expert's fc1
# 2048 -> 2 x 768 = 1536; fc2 768 -> 2048. LoRA rank 32, per layer r x (in + out):
#   attention  32 x (2048 + 5120) + 32 x (4096 + 2048) = 229,376 + 196,608 = 425,984
#   experts    32 x (2048 + 1536) + 32 x (768 + 2048)  = 114,688 +  90,112 = 204,800 (one adapter shared by the
#              local experts, Bridge's share_expert_adapters default)

QWEN_ATT, QWEN_EXP = 425_984, 204_800


def qwen(training=None, parallelism=None):
    """Qwen3-30B-A3B as Bridge's PEFT recipe lays it out (TP 4, EP 4, expert TP 1, sequence parallel, seq 2048,
    micro-batch 1, no recompute, distributed optimizer, fp32 gradient reduction), LoRA rank 32."""
    from estimator.config.load import config_from_dict
    cfg = load_preset("qwen3-30b-a3b").to_dict()
    tr = cfg["training"]
    for k in ("recompute_granularity", "recompute_method", "recompute_num_layers"):
        tr.pop(k, None)
    tr.update({"micro_batch_size": 1, "seq_length": 2048, "world_size": 4, "peft": "lora", "peft_dim": 32,
               **(training or {})})
    cfg["parallelism"].update({"tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 1,
                               "expert_model_parallel_size": 4, "expert_tensor_parallel_size": 1, **(parallelism or {})})
    return config_from_dict(cfg)


def test_qwen3_30b_a3b_lora_trainable_parameters():
    """The whole model's adapters: attention only 48 x 425,984 = 20,447,232; with the experts' shared adapters
    48 x (425,984 + 204,800) = 30,277,632; one adapter per expert (share_expert_adapters false)
    48 x (425,984 + 128 x 204,800) = 1,278,738,432."""
    from estimator.memory.features.peft import adapter_total
    from estimator.model.resolve import resolve
    att = ["linear_qkv", "linear_proj"]
    assert adapter_total(resolve(qwen({"peft_target_modules": att}))) == 48 * QWEN_ATT == 20_447_232
    assert adapter_total(resolve(qwen())) == 48 * (QWEN_ATT + QWEN_EXP) == 30_277_632
    assert adapter_total(resolve(qwen({"peft_share_expert_adapters": False}))) == 1_278_738_432


def test_qwen3_30b_a3b_lora_states_shard_dense_and_expert_adapters_apart():
    """Per GPU at TP 4, EP 2, expert TP 1 on 8 GPUs: attention adapters split over TP, 425,984 / 4 = 106,496 per
    layer, 5,111,808 for 48; the shared expert adapters are whole on every GPU (expert TP 1, replicated over EP):
    204,800 per layer, 9,830,400. Weights +2 B each, fp32 gradients 4 B each; the distributed optimizer's 12 B shard
    the attention adapters over dp = 8 / 4 = 2 and the expert adapters over the expert data-parallel group,
    8 / (2 x 1) = 4: 12 x (5,111,808 / 2 + 9,830,400 / 4) = 12 x 5,013,504 = 60,162,048."""
    att, exp = 48 * QWEN_ATT // 4, 48 * QWEN_EXP
    s = estimate(qwen({"world_size": 8}, {"expert_model_parallel_size": 2})).stages[0]
    base = estimate(qwen({"world_size": 8, "peft_target_modules": ["linear_qkv", "linear_proj"]},
                         {"expert_model_parallel_size": 2})).stages[0]
    assert s.gradients_bytes == 4 * (att + exp) == 59_768_832
    assert s.optimizer_bytes == 12 * (att // 2 + exp // 4) == 60_162_048
    assert s.weights_bytes - base.weights_bytes == 2 * exp


def test_qwen3_30b_a3b_lora_attention_only_activations():
    """Frozen experts and attention adapters against full training, per layer, T = 2048, Tn = 512 (TP 4 sequence
    parallel), R = 512 x 8 = 4096 routed rows: the frozen grouped fc1 drops the permuted tokens 2 x 4096 x 2048 and
    fc2 the activation output 2 x 4096 x 768 (SwiGLU: nothing else); the frozen QKV drops the norm output
    2 x 512 x 2048, its adapter keeps the gathered input 2 x 2048 x 2048 and, with proj's, two bottlenecks of
    2 x 2048 x 32. The router still saves the pre-MLP norm output. 48 x (8,388,608 - 2,097,152 + 262,144
    - 16,777,216 - 6,291,456) = -792,723,456 bytes."""
    full = estimate(qwen({"peft": None, "peft_dim": 32})).stages[0].activations_bytes
    lora = estimate(qwen({"peft_target_modules": ["linear_qkv", "linear_proj"]})).stages[0].activations_bytes
    per_layer = 2 * 2048 * 2048 - 2 * 512 * 2048 + 2 * 2 * 2048 * 32 - 2 * 4096 * 2048 - 2 * 4096 * 768
    assert lora - full == 48 * per_layer == -792_723_456


def test_qwen3_30b_a3b_lora_expert_adapters_keep_their_inputs():
    """Adding linear_fc1 / linear_fc2: each expert adapter keeps its input, in bf16 (fc1: the permuted tokens,
    2 x 4096 x 2048 = 16,777,216; fc2: the activation output, 2 x 4096 x 768 = 6,291,456) and its bottleneck of the
    full rank, 2 x 4096 x 32 = 262,144 each: 23,592,960 per layer, 1,132,462,080 for 48 layers."""
    att = estimate(qwen({"peft_target_modules": ["linear_qkv", "linear_proj"]})).stages[0].activations_bytes
    assert estimate(qwen()).stages[0].activations_bytes - att == 48 * 23_592_960 == 1_132_462_080


def test_sequence_parallel_input_regather_keeps_the_local_input():
    """sequence_parallel_input_regather: the qkv adapter's LoRA-A keeps its sequence-local input, 2 x 512 x 2048,
    instead of the gathered 2 x 2048 x 2048 (Qwen3-30B-A3B has no dense linear_fc1; the experts' adapters keep
    theirs): 48 x 2 x (2048 - 512) x 2048 = 301,989,888 bytes less. The gather goes through Megatron-Core's "mpu"
    buffer, 2 x 2048 x 2048 = 8,388,608 bytes, which the last stage holds anyway for the output layer; with two
    pipeline stages the first holds it too."""
    plain, regather = (estimate(qwen({"peft_sequence_parallel_input_regather": v})).stages[0] for v in (False, True))
    assert plain.activations_bytes - regather.activations_bytes == 301_989_888
    two = {"pipeline_model_parallel_size": 2}
    first = [estimate(qwen({"world_size": 8, "peft_sequence_parallel_input_regather": v}, two)).stages[0].transient
             for v in (False, True)]
    assert "global_memory_buffer" not in first[0] and first[1]["global_memory_buffer"] == 8_388_608


def test_gpt_oss_120b_lora_recipe_estimates():
    """Megatron-Bridge's gpt_oss_120b_peft_8gpu_h100_bf16_config (TP 1, EP 8, LoRA rank 32 on all four targets, no
    distributed optimizer, fp32 gradient reduction from bf16_mixed). GPT-OSS-120B: 36 layers, h 2880, 64 heads of
    64 in 8 groups (qkv out (64 + 16) x 64 = 5120, proj in 4096), 128 experts of width 2880 (gated: fc1 out 5760).
    Per layer 32 x ((2880 + 5120) + (4096 + 2880) + (2880 + 5760) + (2880 + 2880)) = 940,032; 33,841,152 for 36,
    whole on each GPU: gradients 4 B each = 135,364,608, optimizer 12 B each = 406,093,824; it fits an 80 GB H100."""
    from estimator.formats.bridge.recipes import read_bridge_recipe
    s = estimate(read_bridge_recipe("gpt_oss_120b_peft_8gpu_h100_bf16_config").config).stages[0]
    assert (s.gradients_bytes, s.optimizer_bytes) == (135_364_608, 406_093_824)
    assert s.allocated_bytes < 80 * 10 ** 9


def test_dora_on_moe_attention_only_is_modelled():
    """DoRA on an MoE model's attention (Bridge's DoRA adapts any matched linear; only experts lack a path): the
    magnitudes add qkv 5120 / 4 + proj 2048 (row-parallel: whole) = 3328 per layer to LoRA's adapters."""
    att = {"peft_target_modules": ["linear_qkv", "linear_proj"]}
    lora, dora = (estimate(qwen({**att, "peft": v})).stages[0] for v in ("lora", "dora"))
    assert dora.gradients_bytes - lora.gradients_bytes == 4 * 48 * 3328


def test_shared_experts_adapted_like_a_dense_mlp():
    """An MoE model with shared experts (h 512, 8 heads of 64, 8 experts of width 256 top-2, shared width 512,
    SwiGLU; 4 layers), TP 2 with sequence parallelism, EP 2, expert TP 1, seq 1024, LoRA rank 16. Adding linear_fc1 /
    linear_fc2 to attention-only adapters, per layer (T = 1024, Tn = 512, R = 512 x 2 = 1024 routed rows):
    routed experts: fc1's adapter keeps the permuted tokens 2 x 1024 x 512 = 1,048,576, fc2's the activation output
    2 x 1024 x 256 = 524,288, bottlenecks 2 x 2 x 1024 x 16 = 65,536; shared experts (is_expert_linear excludes
    them: dense adapters): fc2's adapter keeps the activation output 2 x 1024 x 512 / 2 = 524,288, fc1's gathers the
    norm output itself, 2 x 1024 x 512 = 1,048,576, bottlenecks 65,536. 3,276,800 per layer, 13,107,200 for 4.
    Trainable per GPU and layer: shared fc1 16 x (512 + 1024) / 2 = 12,288, fc2 16 x (512 + 512) / 2 = 8,192; routed
    fc1 16 x (512 + 512) = 16,384, fc2 16 x (256 + 512) = 12,288: 49,152 x 4 = 196,608 more fp32 gradients."""
    model = {**MODEL, "hidden_size": 512, "ffn_hidden_size": 1024, "num_experts": 8, "moe_ffn_hidden_size": 256,
             "moe_router_topk": 2, "moe_shared_expert_intermediate_size": 512, "activation_func": "swiglu",
             "gated_linear_unit": True}
    par = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2, "expert_tensor_parallel_size": 1}
    tr = {"world_size": 4, "sequence_parallel": True, "seq_length": 1024, "peft": "lora", "peft_dim": 16}
    att = estimate(make_config(model, par, {**tr, "peft_target_modules": ["linear_qkv", "linear_proj"]})).stages[0]
    all4 = estimate(make_config(model, par, tr)).stages[0]
    assert all4.activations_bytes - att.activations_bytes == 4 * 3_276_800
    assert all4.gradients_bytes - att.gradients_bytes == 4 * 4 * 49_152


def test_moonlight_lora_on_proj_and_mlps_counts_every_adapted_linear():
    """Moonlight-16B-A3B (27 layers, h 2048, MLA with 16 heads of value width 128, the first layer dense of width
    11264, then 26 MoE layers: 64 experts of width 1408, shared experts of width 2816, SwiGLU), LoRA rank 32 on
    linear_proj, linear_fc1, linear_fc2. proj 32 x (16 x 128 + 2048) = 131,072 x 27 = 3,538,944; dense layer
    32 x (2048 + 22528) + 32 x (11264 + 2048) = 1,212,416; each MoE layer: shared 32 x (2048 + 5632)
    + 32 x (2816 + 2048) = 401,408, routed 32 x (2048 + 2816) + 32 x (1408 + 2048) = 266,240, x 26 = 17,358,848.
    Together 22,110,208."""
    from estimator.config.load import config_from_dict
    from estimator.memory.features.peft import adapter_total
    from estimator.model.resolve import resolve
    cfg = load_preset("moonlight-16b-a3b").to_dict()
    cfg["training"].update(peft="lora", peft_target_modules=["linear_proj", "linear_fc1", "linear_fc2"])
    assert adapter_total(resolve(config_from_dict(cfg))) == 22_110_208
