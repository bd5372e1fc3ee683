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
