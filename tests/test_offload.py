"""Optimizer and activation offloading (estimator/features/offload.py) against hand calculations.

The small model of tests/test_memory.py (L=4, h=1024, 8 MHA heads of 128, GeLU f=4096, untied, vocabulary
32000, bf16), sequence T = 2048, one GPU: n = 115,876,864 parameters.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate
from estimator.megatron_args import read_megatron_args
from tests.conftest import make_config

H, F, V, L, T = 1024, 4096, 32000, 4, 2048
N = L * (4 * H * H + H + 2 * H * F + H) + 2 * V * H + H
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)
PAO = {"use_precision_aware_optimizer": True}


def est(training=None, parallelism=None, precision=None):
    tr = {"seq_length": T, "world_size": 1}
    tr.update(training or {})
    return estimate(make_config(MODEL, parallelism, tr, precision)).stages[0]


def test_full_optimizer_offload_leaves_no_optimizer_state_on_the_gpu():
    """Fraction 1: every parameter is stepped on the CPU. Host: fp32 copy + fp32 gradient copy pinned (8 n),
    Adam's two fp32 moments pageable (8 n). Weights and the gradient buffer stay on the GPU."""
    base = est(precision=PAO)
    s = est({"optimizer_cpu_offload": True}, precision=PAO)
    assert s.optimizer_bytes == 0
    assert (s.weights_bytes, s.gradients_bytes) == (base.weights_bytes, base.gradients_bytes)
    assert s.host == {"optimizer_pinned": 8 * N, "optimizer_states": 8 * N} and s.host_bytes == 16 * N
    assert s.device_bytes < base.device_bytes


def test_half_offload_keeps_torch_adam_on_fp32_copies_of_the_rest():
    """Fraction 0.5 of n = 115,876,864 (even): the GPU half has an fp32 copy and two fp32 moments, 12 B each
    (torch's Adam, whatever the precision-aware dtypes); the host half 8 + 8 B."""
    s = est({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5}, precision=PAO)
    assert s.optimizer_bytes == 12 * (N // 2)
    assert s.host_bytes == 16 * (N // 2)


def test_layer_offloading_moves_the_first_layers_activations():
    """cpu_offloading_num_layers 2 of 4: at the end of the forward pass layers 0 and 1 are on the host, so the
    GPU keeps 2 of the 4 layers' activations (all four layers save the same bytes)."""
    base = est()
    per_layer = base.activations["attention"] // L + base.activations["mlp"] // L
    s = est({"cpu_offloading": True, "cpu_offloading_num_layers": 2})
    assert base.activations_bytes - s.activations_bytes == 2 * per_layer
    assert s.host == {"activations_pinned": 2 * per_layer}


def test_fine_grained_activation_offloading_is_refused():
    """Regression: offloading every listed saved tensor but one layer's gave -25 % on Megatron-LM's CI case
    gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_no_mtp_no_a2a_ovlp_fine_grained_offloading: Megatron-Core keeps more on
    the GPU at run time (margins, reload ahead) than can be modelled with confidence, so the setting is refused,
    in the configuration and in the launch-argument importer."""
    with pytest.raises(ConfigError, match="fine-grained activation offloading is not modelled"):
        est({"fine_grained_activation_offloading": True})
    cmd = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings "
           "1024 --micro-batch-size 1 --vocab-size 32000 --bf16 --fine-grained-activation-offloading "
           "--offload-modules core_attn")
    with pytest.raises(UnsupportedError, match="--fine-grained-activation-offloading: fine-grained activation "
                                               "offloading is not modelled"):
        read_megatron_args(cmd)


def test_offload_rules():
    with pytest.raises(ConfigError, match="use_precision_aware_optimizer"):
        est({"optimizer_cpu_offload": True})
    with pytest.raises(ConfigError, match="pipeline parallelism"):
        est({"cpu_offloading": True, "cpu_offloading_num_layers": 1, "world_size": 2},
            {"pipeline_model_parallel_size": 2})
    with pytest.raises(ConfigError, match="less than num_layers"):
        est({"cpu_offloading": True, "cpu_offloading_num_layers": 4})
    with pytest.raises(ConfigError, match="set it to true"):
        est({"cpu_offloading_num_layers": 2})
