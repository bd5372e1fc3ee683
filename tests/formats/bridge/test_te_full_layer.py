"""Megatron-Bridge's ``model.use_transformer_engine_full_layer_spec`` (training.transformer_engine_full_layer_spec,
estimator/config/rules/families.py ``te_full_layer_problems``): Transformer Engine's own TransformerLayer, as Bridge @
067f987d models/gpt_full_te_layer_autocast_spec.py builds it, holds the parameters and saves the tensors of
Megatron-Core's TE spec for a LayerNorm, GELU, bias, multi-head-attention model (GPT-3 175B's recipe), so the
estimate is the same; any other model shape, selective recompute, FP8 and CUDA graphs are refused by name."""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.bridge.export import to_bridge_dict
from estimator.formats.megatron_export import to_megatron_args

#: GPT-3's layer at a small size: LayerNorm, GELU not gated, biases, multi-head attention, learned positions, no
#: dropout (gpt3_175b_pretrain_32gpu_h100_bf16_config's GPTModelProvider with its widths cut down), TP 2 + SP.
GPT3 = {"model": {"num_layers": 4, "hidden_size": 512, "ffn_hidden_size": 2048, "num_attention_heads": 8,
                  "seq_length": 1024, "vocab_size": 1024, "normalization": "LayerNorm",
                  "activation_func": "gelu", "gated_linear_unit": False, "add_bias_linear": True,
                  "position_embedding_type": "learned_absolute", "hidden_dropout": 0.0, "attention_dropout": 0.0,
                  "layernorm_zero_centered_gamma": True, "tensor_model_parallel_size": 2, "sequence_parallel": True},
        "train": {"micro_batch_size": 2, "global_batch_size": 16}}


def _read(**model):
    return read_bridge_config({**GPT3, "model": {**GPT3["model"], **model}}, world_size=2)


def test_the_full_te_layer_is_megatron_cores_te_layer_for_gpt3():
    """Same parameters (LayerNormLinear qkv, Linear proj, LayerNormMLP fc1 / fc2 with biases: the TE spec's
    TELayerNormColumnParallelLinear and TERowParallelLinear) and the same saved tensors (LayerNormMLP keeps the
    input, ln_out, fc1's output and the GELU's, as LayerNormLinear, bias_gelu and fc2's Linear do): every stage's
    figures equal, the field read into the configuration."""
    on, off = _read(use_transformer_engine_full_layer_spec=True), _read()
    assert on.config["training"]["transformer_engine_full_layer_spec"] is True
    assert estimate(on.config).to_dict()["stages"] == estimate(off.config).to_dict()["stages"]


@pytest.mark.parametrize("change, words", [
    ({"activation_func": "silu", "gated_linear_unit": True}, "activation_func swiglu gated"),
    ({"normalization": "RMSNorm"}, "normalization RMSNorm"),
    ({"num_query_groups": 2}, "num_query_groups 2"),
    ({"add_bias_linear": False}, "add_bias_linear false"),
    ({"recompute_granularity": "selective"}, "selective recompute"),
])
def test_another_layer_is_refused_by_name(change, words):
    """TETransformerLayerAutocast passes widths, heads, dropouts and parallel sizes only, so Bridge builds the
    LayerNorm / GELU / bias / MHA layer whatever the model says; and its forward drops checkpoint_core_attention."""
    with pytest.raises(ConfigError, match=f"training.transformer_engine_full_layer_spec.*{words}"):
        estimate(_read(use_transformer_engine_full_layer_spec=True, **change).config)


def test_the_exports_carry_it():
    """Bridge's overrides write it back; Megatron-LM's pretrain_gpt.py has no flag for it."""
    cfg = _read(use_transformer_engine_full_layer_spec=True).config
    assert to_bridge_dict(cfg)["model"]["use_transformer_engine_full_layer_spec"] is True
    with pytest.raises(UnsupportedError, match="transformer_engine_full_layer_spec"):
        to_megatron_args(cfg)
