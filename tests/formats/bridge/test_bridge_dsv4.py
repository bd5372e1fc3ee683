"""Megatron-Bridge's DeepSeek-V4 fields (estimator/formats/bridge/config.py ``DEV_MODEL_FIELDS``): the Megatron-Core
dev-branch fields Bridge's DeepSeek-V4 provider and recipes set (Megatron-Bridge @ 067f987d :
src/megatron/bridge/models/deepseek/deepseek_v4_bridge.py, recipes/deepseek/{h100,gb200,gb300}/deepseek_v4.py) are
modelled, listed without effect or refused by name, instead of stopping the import as unknown fields."""

from __future__ import annotations

import pytest

from estimator import count_parameters_of, load_config
from estimator.formats.bridge.config import BridgeRefusedError, apply_overrides, read_bridge_config

SILU = {"_target_": "torch.nn.functional.silu", "_call_": False}
BF16 = {"_target_": "torch.bfloat16", "_call_": False}

#: A three-layer DeepSeek-V4-style model (tests/model/layers/test_dsv4.py's TINY, with 4 experts), as Bridge writes it.
MODEL = {"num_layers": 3, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 128, "vocab_size": 1000,
         "seq_length": 16, "activation_func": SILU, "gated_linear_unit": True, "add_bias_linear": False,
         "normalization": "RMSNorm", "position_embedding_type": "rope", "share_embeddings_and_output_weights": False,
         "params_dtype": BF16, "bf16": True, "multi_latent_attention": True, "q_lora_rank": 16,
         "qk_pos_emb_head_dim": 8, "v_head_dim": 32, "num_moe_experts": 4, "moe_router_topk": 2,
         "moe_ffn_hidden_size": 32, "moe_router_enable_expert_bias": True, "moe_grouped_gemm": True,
         "dsa_indexer_n_heads": 2, "dsa_indexer_head_dim": 16, "dsa_indexer_topk": 4,
         "experimental_attention_variant": "dsv4_hybrid", "csa_compress_ratios": [0, 4, 128], "csa_window_size": 8,
         "o_groups": 2, "o_lora_rank": 8, "enable_hyper_connections": True, "num_residual_streams": 2,
         "use_fused_mhc": True, "moe_n_hash_layers": 1, "mhc_sinkhorn_iterations": 20,
         "csa_compress_rotary_base": 40000.0, "cp_partition_mode": "contiguous", "actual_vocab_size": 1000}
TRAIN = {"micro_batch_size": 1, "global_batch_size": 1}


def _read(**model):
    return read_bridge_config({"model": {**MODEL, **model}, "train": dict(TRAIN)}, world_size=1)


def test_the_fields_reach_the_model():
    """Each modelled field lands in the schema's field of the same name; apply_dsa_kernel_fusion true is
    dsa_kernel_backend cudnn (TransformerConfig.__post_init__ at Megatron-LM @ d48bd6be, dev); the RoPE base, the
    Sinkhorn iterations, the CP partition mode and the hash table's vocabulary are listed without effect."""
    imp = _read(apply_dsa_kernel_fusion=True)
    m = imp.config["model"]
    assert m["experimental_attention_variant"] == "dsv4_hybrid" and m["csa_compress_ratios"] == [0, 4, 128]
    assert (m["o_groups"], m["o_lora_rank"], m["csa_window_size"]) == (2, 8, 8)
    assert (m["enable_hyper_connections"], m["num_residual_streams"], m["use_fused_mhc"]) == (True, 2, True)
    assert m["moe_n_hash_layers"] == 1 and m["dsa_kernel_backend"] == "cudnn"
    said = " ".join(w for w, _ in imp.no_effect)
    for name in ("csa_compress_rotary_base", "mhc_sinkhorn_iterations", "cp_partition_mode", "actual_vocab_size"):
        assert f"model.{name}" in said
    assert _read(apply_dsa_kernel_fusion=False).config["model"]["dsa_kernel_backend"] == "none"


def test_the_count_matches_the_hf_importer_path():
    """The same model through Bridge's fields counts as tests/model/layers/test_dsv4.py builds it: the attention of
    the three layers 7284 + 20,644 + 15,508 = 43,436; mHC (n = 2) 3 x 2070 + 259 = 6469; MoE per layer norm 64 +
    router 4 x 64 + experts 4 x 3 x 64 x 32 = 24,896, + 4 expert bias on the two layers not hash-routed: 3 x 24,896 +
    8 = 74,696; embedding and output over the vocabulary, 2 x 1000 x 64 = 128,000 (a model vocab_size without
    tokenizer.use_tokenizer_vocab_size reaches Megatron-Core unpadded: Bridge @ 067f987d : training/setup.py
    _validate_and_set_vocab_size sets should_pad_vocab False; the importer path pads to 1024); final norm 64.
    Total 252,665."""
    c = count_parameters_of(load_config(_read().config))
    assert c.total == 43_436 + 6469 + 74_696 + 128_000 + 64 == 252_665


def test_refused_fields_are_named():
    with pytest.raises(BridgeRefusedError) as e:
        _read(csa_dense_mode=True)
    assert "model.csa_dense_mode" in str(e.value)


def test_mhc_recompute_groups_reach_the_training_section():
    """model.mhc_recompute_layer_num (refused before mhc29) is the schema's training.mhc_recompute_layer_num, a
    recompute setting; without mhc recompute it is an error naming the field."""
    imp = _read(recompute_granularity="selective", recompute_modules=["mhc"], mhc_recompute_layer_num=2)
    assert imp.config["training"]["mhc_recompute_layer_num"] == 2
    load_config(imp.config)
    with pytest.raises(Exception, match="mhc_recompute_layer_num"):
        load_config(_read(mhc_recompute_layer_num=2).config)


def test_overrides_accept_the_fields():
    out = apply_overrides({"model": {}}, ["model.use_fused_mhc=false", "model.csa_compress_ratios=[0, 4, 128]"])
    assert out["model"] == {"use_fused_mhc": False, "csa_compress_ratios": [0, 4, 128]}
