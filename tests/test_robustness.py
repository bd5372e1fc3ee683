"""Never a crash, never a silent wrong number: random configurations either estimate or raise ConfigError.

A deterministic sweep over the schema's choices (seeded), checking invariants that hold for any valid
configuration: totals add up, reserved >= allocated, the peak is the largest stage, every byte count is a
non-negative integer, and the result serialises to JSON.
"""

from __future__ import annotations

import json
import random

import pytest

from estimator import ConfigError, estimate

BASES = [
    dict(num_layers=8, hidden_size=1024, num_attention_heads=16, num_query_groups=4, ffn_hidden_size=2816,
         vocab_size=32000),
    dict(num_layers=6, hidden_size=512, num_attention_heads=8, ffn_hidden_size=1024, num_experts=8,
         moe_router_topk=2, moe_ffn_hidden_size=256, moe_shared_expert_intermediate_size=512,
         moe_layer_freq=[0, 1, 1, 1, 1, 1], vocab_size=5000, mtp_num_layers=1),
    dict(num_layers=4, hidden_size=512, num_attention_heads=8, ffn_hidden_size=1024, num_experts=16,
         moe_router_topk=4, moe_ffn_hidden_size=128, multi_latent_attention=True, q_lora_rank=128,
         kv_lora_rank=64, qk_head_dim=32, qk_pos_emb_head_dim=16, v_head_dim=32, vocab_size=3000),
]


def random_config(rng: random.Random) -> dict:
    model = dict(rng.choice(BASES))
    model.update(rng.choice([{}, {"normalization": "LayerNorm"}, {"add_bias_linear": True},
                             {"hidden_dropout": 0.1, "attention_dropout": 0.1},
                             {"position_embedding_type": "learned_absolute", "max_position_embeddings": 4096},
                             {"untie_embeddings_and_output_weights": True}]))
    tp, pp, cp = rng.choice([1, 2, 4]), rng.choice([1, 2]), rng.choice([1, 2])
    ep = rng.choice([1, 2, 4]) if "num_experts" in model else 1
    vpp = rng.choice([None, 2]) if pp > 1 else None
    training = {"world_size": tp * pp * cp * rng.choice([1, 2, 4]) * ep, "seq_length": rng.choice([512, 1024]),
                "micro_batch_size": rng.choice([1, 2]), "sequence_parallel": tp > 1 and rng.random() < 0.8,
                "use_distributed_optimizer": rng.random() < 0.8,
                "attention_backend": rng.choice(["auto", "unfused"]) if cp == 1 else "auto",
                "cross_entropy_loss_fusion": rng.random() < 0.5, "cross_entropy_fusion_impl": "te"}
    rc = rng.choice([None, "selective", "full"])
    if rc:
        training["recompute_granularity"] = rc
    if rc == "full":
        training["recompute_method"] = rng.choice(["uniform", "block"])
        training["recompute_num_layers"] = rng.choice([0, 1, 2])
    if rc == "selective":
        training["recompute_modules"] = rng.sample(["core_attn", "layernorm", "mlp", "moe_act", "mla_up_proj"], 2)
    if rng.random() < 0.5:
        training["global_batch_size"] = training["micro_batch_size"] * (training["world_size"] // (tp * pp * cp)) * 8
    precision = rng.choice([{}, {"params_dtype": "fp16"}, {"fp8": True, "fp8_recipe": "mxfp8"},
                            {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16",
                             "exp_avg_sq_dtype": "bf16", "main_grads_dtype": "bf16"}])
    return {"model": model, "parallelism": {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
            "context_parallel_size": cp, "expert_model_parallel_size": ep,
            "virtual_pipeline_model_parallel_size": vpp}, "training": training, "precision": precision}


@pytest.mark.parametrize("seed", range(300))
def test_random_configuration_estimates_or_explains(seed):
    cfg = random_config(random.Random(seed))
    try:
        e = estimate(cfg)
    except ConfigError as exc:
        assert exc.problems and all(p.field and p.message for p in exc.problems)
        return
    for s in e.stages:
        parts = (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes, s.activations_bytes, s.transient_bytes)
        assert all(isinstance(x, int) and x >= 0 for x in parts)
        assert s.allocated_bytes == sum(parts) < s.reserved_bytes < s.device_bytes
    assert e.peak.device_bytes == max(s.device_bytes for s in e.stages)
    json.dumps(e.to_dict())
