"""Exact parameter counts against the published counts of real models.

The expected totals are the "exact count" column of ../shared/reference/hf-configs/SOURCES.md
(every tensor of the Hugging Face checkpoint), and Meta's published Llama-3 counts. The model
sections are written here by hand from each config.json, in Megatron's names.
"""

from __future__ import annotations

import pytest

from estimator import count_parameters_of, load_config
from tests.conftest import make_config

UNTIED = {"untie_embeddings_and_output_weights": True}

MODELS = {
    # Llama-2-7b-hf: h 4096, 32 layers, 32 heads (MHA), ffn 11008, vocab 32000.
    "Llama-2-7b-hf": (dict(num_layers=32, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=11008,
                           vocab_size=32000, **UNTIED), 6_738_415_616),
    "Llama-3.1-405B": (dict(num_layers=126, hidden_size=16384, num_attention_heads=128, num_query_groups=8,
                            ffn_hidden_size=53248, vocab_size=128256, **UNTIED), 405_853_388_800),
    "Mixtral-8x7B-v0.1": (dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                               ffn_hidden_size=14336, num_experts=8, moe_router_topk=2, vocab_size=32000,
                               **UNTIED), 46_702_792_704),
    "Mixtral-8x22B-v0.1": (dict(num_layers=56, hidden_size=6144, num_attention_heads=48, num_query_groups=8,
                                ffn_hidden_size=16384, num_experts=8, moe_router_topk=2, vocab_size=32000,
                                **UNTIED), 140_620_634_112),
    # Qwen2.5 has a bias on the QKV projection only.
    "Qwen2.5-7B": (dict(num_layers=28, hidden_size=3584, num_attention_heads=28, num_query_groups=4,
                        ffn_hidden_size=18944, add_qkv_bias=True, vocab_size=152064, **UNTIED), 7_615_616_512),
    # Qwen3: head_dim 128 != 4096/32 is fine anyway; per-head QK RMSNorm.
    "Qwen3-8B": (dict(num_layers=36, hidden_size=4096, num_attention_heads=32, num_query_groups=8, kv_channels=128,
                      ffn_hidden_size=12288, qk_layernorm=True, vocab_size=151936, **UNTIED), 8_190_735_360),
    "Qwen3-30B-A3B": (dict(num_layers=48, hidden_size=2048, num_attention_heads=32, num_query_groups=4,
                           kv_channels=128, ffn_hidden_size=6144, moe_ffn_hidden_size=768, num_experts=128,
                           moe_router_topk=8, qk_layernorm=True, vocab_size=151936, **UNTIED), 30_532_122_624),
    "Qwen3-235B-A22B": (dict(num_layers=94, hidden_size=4096, num_attention_heads=64, num_query_groups=4,
                             kv_channels=128, ffn_hidden_size=12288, moe_ffn_hidden_size=1536, num_experts=128,
                             moe_router_topk=8, qk_layernorm=True, vocab_size=151936, **UNTIED), 235_093_634_560),
    # DeepSeek-V3 main model (61 layers, first 3 dense, MLA with q compression, 1 shared expert of 2048,
    # e_score_correction_bias per MoE layer). The MTP layer is counted separately (see below).
    "DeepSeek-V3": (dict(num_layers=61, hidden_size=7168, num_attention_heads=128, ffn_hidden_size=18432,
                         num_experts=256, moe_router_topk=8, moe_ffn_hidden_size=2048,
                         moe_shared_expert_intermediate_size=2048, moe_layer_freq=[0] * 3 + [1] * 58,
                         moe_router_enable_expert_bias=True, multi_latent_attention=True, q_lora_rank=1536,
                         kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
                         qk_layernorm=True, vocab_size=129280, **UNTIED), 671_026_419_200),
    # Meta-Llama-3-8B: HF API safetensors.total (SOURCES.md, "also published").
    "Meta-Llama-3-8B": (dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                             ffn_hidden_size=14336, vocab_size=128256, **UNTIED), 8_030_261_248),
    # Meta-Llama-3-70B: published model card count.
    "Meta-Llama-3-70B": (dict(num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8,
                              ffn_hidden_size=28672, vocab_size=128256, **UNTIED), 70_553_706_496),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_total_matches_published_exact_count(name):
    model, expected = MODELS[name]
    counts = count_parameters_of(load_config(make_config(model)))
    assert counts.total == expected


def test_deepseek_v3_mtp_layer():
    """One MTP layer = enorm + hnorm (2h) + eh_proj (2h*h) + one MoE layer + final norm (h), sharing the
    embedding and output layer. HF's "685B = 671B + 14B MTP" counts the MTP module with its own copies
    of embed_tokens and shared_head.head (2 * 129280 * 7168 = 1,853,358,080):
    MoE layer = attention 187,107,328 + norms 2*7168 + router 256*7168 + bias 256 + 256 experts *
    3*7168*2048 + shared 3*7168*2048, so MTP (Megatron) = 3*7168 + 2*7168^2 + that layer."""
    model, _ = MODELS["DeepSeek-V3"]
    counts = count_parameters_of(load_config(make_config({**model, "mtp_num_layers": 1})))
    h = 7168
    attention = (h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h + h)
    moe_layer = attention + h + 256 * h + 256 + 256 * 3 * h * 2048 + 3 * h * 2048
    assert counts.mtp == 3 * h + 2 * h * h + moe_layer
    assert counts.total - counts.mtp == 671_026_419_200


def test_repeated_mtp_layer_holds_one_layer_runs_every_depth():
    """Megatron-LM @ 2a75ac12 megatron/core/transformer/multi_token_prediction.py: with mtp_use_repeated_layer
    MultiTokenPredictionBlock builds one layer and applies layers[0] at each of the mtp_num_layers depths. DeepSeek-V3
    with 3 MTP depths: the parameters of one MTP layer (the count of the test above, 3h + 2h^2 + one MoE layer),
    not three; without the flag three. On one GPU the weights follow the count (BF16: 2 B per parameter) and the
    activations follow the depths: each depth saves its own, so they are the same with and without the flag."""
    from estimator import estimate
    model, _ = MODELS["DeepSeek-V3"]
    h = 7168
    attention = (h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h + h)
    one = 3 * h + 2 * h * h + attention + h + 256 * h + 256 + 256 * 3 * h * 2048 + 3 * h * 2048
    three = count_parameters_of(load_config(make_config({**model, "mtp_num_layers": 3})))
    shared = count_parameters_of(load_config(make_config({**model, "mtp_num_layers": 3,
                                                          "mtp_use_repeated_layer": True})))
    assert three.mtp == 3 * one and shared.mtp == one
    assert three.total - shared.total == 2 * one
    small = dict(num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=512, vocab_size=1024,
                 mtp_num_layers=3, **UNTIED)
    a = estimate(make_config(small)).to_dict()["stages"][0]
    b = estimate(make_config({**small, "mtp_use_repeated_layer": True})).to_dict()["stages"][0]
    # one MTP layer of this model (SwiGLU, the schema's default): 3 x 256 norms + eh_proj 2 x 256^2 + a layer (QKV
    # 256 x 768, proj 256^2, fc1 256 x 1024, fc2 512 x 256, two norms 512) = 768 + 131,072 + 196,608 + 65,536 +
    # 262,144 + 131,072 + 512 = 787,712; two fewer layers built: 2 x 787,712 x 2 B fewer weight bytes
    assert a["weights_bytes"] - b["weights_bytes"] == 2 * 787_712 * 2
    assert a["activations_bytes"] == b["activations_bytes"]


def test_active_parameters_mixtral():
    """Mixtral-8x7B: 2 of 8 experts active. Each expert is 3*4096*14336 = 176,160,768 parameters, 32 layers:
    active = 46,702,792,704 - 32 * 6 * 176,160,768 = 12,879,925,248 (Mistral: "12.9B active")."""
    model, _ = MODELS["Mixtral-8x7B-v0.1"]
    counts = count_parameters_of(load_config(make_config(model)))
    assert counts.active == 46_702_792_704 - 32 * 6 * 176_160_768


def test_padded_vocab_follows_megatron():
    """Megatron pads to make_vocab_size_divisible_by * TP: 128256 at TP 8 -> multiple of 1024 = 129024."""
    model, _ = MODELS["Meta-Llama-3-8B"]
    cfg = make_config(model, parallelism={"tensor_model_parallel_size": 8}, training={"world_size": 8})
    counts = count_parameters_of(load_config(cfg))
    assert counts.padded_vocab_size == 129024
    assert counts.total == 8_030_261_248 + 2 * (129024 - 128256) * 4096


def test_learned_positions_and_layernorm_biases():
    """GPT-2 small by hand: 12 layers, h 768, 12 heads, ffn 3072, GeLU, LayerNorm, biases, learned positions
    (1024), tied embeddings, vocab 50257 (no padding: divisible_by 1).
    Per layer: qkv 768*2304 + 2304, proj 768*768 + 768, fc1 768*3072 + 3072, fc2 3072*768 + 768, 2 LNs 4*768
    = 7,087,872; embeddings 50257*768 + 1024*768 = 39,383,808; final LN 1536. Total 124,439,808 (the
    well-known GPT-2 small count)."""
    model = dict(num_layers=12, hidden_size=768, num_attention_heads=12, ffn_hidden_size=3072, vocab_size=50257,
                 make_vocab_size_divisible_by=1, max_position_embeddings=1024,
                 position_embedding_type="learned_absolute", normalization="LayerNorm", activation_func="gelu",
                 gated_linear_unit=False, add_bias_linear=True)
    counts = count_parameters_of(load_config(make_config(model, training={"seq_length": 1024})))
    assert counts.total == 124_439_808
