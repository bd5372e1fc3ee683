"""Megatron-LM's --sft (packed supervised fine-tuning) against Megatron-Bridge's offline-packed SFT (flagsB28).

Megatron-LM @ d98e8a64 : megatron/training/datasets/sft_dataset.py packs conversations into samples of exactly
--seq-length tokens with cu_seqlens, and megatron/core/utils.py flatten_batch_for_packed_sequences runs a
micro-batch of b samples as one THD stream of b x s tokens. Bridge @ 067f987d runs one pack of
packed_sequence_size tokens per micro-batch (b = 1). Megatron-Core receives the same: a THD stream with cu_seqlens.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.megatron_args import read_megatron_args

ARGS = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 --kv-channels 64 "
        "--vocab-size 1024 --seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 "
        "--global-batch-size 1 --bf16 --swiglu --disable-bias-linear --normalization RMSNorm "
        "--position-embedding-type rope --untie-embeddings-and-output-weights ")
SILU = {"_target_": "torch.nn.functional.silu", "_call_": False}
BRIDGE = {"model": {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024,
                    "kv_channels": 64, "vocab_size": 1024, "seq_length": 256, "activation_func": SILU,
                    "gated_linear_unit": True, "add_bias_linear": False, "normalization": "RMSNorm",
                    "position_embedding_type": "rope", "share_embeddings_and_output_weights": False},
          "train": {"micro_batch_size": 1, "global_batch_size": 1}, "mixed_precision": "bf16_mixed",
          "dataset": {"_target_": "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetConfig", "seq_length": 256,
                      "enable_offline_packing": True,
                      "offline_packing_specs": {"packed_sequence_size": 512, "pad_seq_to_mult": 1},
                      "dataset_kwargs": {"pad_to_max_length": True}}}


def _stage(config) -> dict:
    return estimate(config).to_dict()["stages"][0]


def test_sft_is_the_sequence_length_it_gives_and_says_so():
    """--sft adds no tensor of its own beyond the packs: the same estimate as without it, with a note."""
    sft = read_megatron_args(ARGS + "--sft", world_size=1)
    assert _stage(sft.config) == _stage(read_megatron_args(ARGS, world_size=1).config)
    assert any(n.startswith("--sft: packed SFT") for n in sft.notes)


def test_sft_and_bridge_packing_give_one_estimate():
    """Megatron-LM --sft --seq-length 512 --micro-batch-size 1 and Bridge's packed_sequence_size 512: one pack of
    512 tokens a micro-batch either way, so every stage figure is equal (Bridge's provider fuses the cross-entropy
    by default, Megatron-LM needs the flag)."""
    lm = read_megatron_args(ARGS + "--sft --cross-entropy-loss-fusion", world_size=1).config
    bridge = read_bridge_config(BRIDGE, world_size=1).config
    assert bridge["training"]["seq_length"] == lm["training"]["seq_length"] == 512
    assert _stage(lm) == _stage(bridge)


def test_sft_micro_batch_of_two_is_one_stream_of_twice_the_tokens():
    """b = 2 packs of 512 tokens are one THD stream of 1,024 tokens: with flash attention every saved tensor is per
    token, so the activations are those of b = 2 x 512 (what the estimate counts), and of one 1,024-token pack."""
    two = _stage(read_megatron_args(ARGS.replace("--micro-batch-size 1 --global-batch-size 1",
                                                 "--micro-batch-size 2 --global-batch-size 2") + "--sft",
                                    world_size=1).config)
    one = _stage(read_megatron_args(ARGS + "--sft", world_size=1).config)
    assert two["activations_bytes"] == 2 * one["activations_bytes"]


@pytest.mark.parametrize("extra", ["--attention-backend unfused", "--attention-backend local",
                                   "--transformer-impl local"])
def test_sft_with_unfused_attention_is_refused(extra):
    with pytest.raises(ConfigError, match="--sft") as exc:
        read_megatron_args(ARGS + "--sft " + extra, world_size=1)
    assert "flash, fused or auto" in str(exc.value)
