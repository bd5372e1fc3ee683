"""Optimizers beyond Adam and partial distributed-optimizer sharding (estimator/features/optimizers.py).

The small model of tests/test_memory.py: one GPU holds n = 115,876,864 parameters, of which
4 x (4h^2 + 2hf) = 50,331,648 are 2-D linear weights; the other 65,545,216 are the embedding, output layer and
norms.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from tests.conftest import make_config

H, F, V, L = 1024, 4096, 32000, 4
N = L * (4 * H * H + H + 2 * H * F + H) + 2 * V * H + H
LIN = L * (4 * H * H + 2 * H * F)
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def est(training=None, parallelism=None, precision=None):
    tr = {"seq_length": 2048, "world_size": 8}
    tr.update(training or {})
    return estimate(make_config(MODEL, parallelism, tr, precision)).stages[0]


def test_sgd_keeps_a_master_and_a_momentum():
    assert est({"optimizer": "sgd", "use_distributed_optimizer": False}).optimizer_bytes == 8 * N
    assert est({"optimizer": "sgd", "sgd_momentum": 0.0, "use_distributed_optimizer": False}).optimizer_bytes == 4 * N


def test_muon_one_momentum_for_matrices_adam_for_the_rest():
    """Unsharded: 8 B x 50,331,648 + 12 B x 65,545,216. Layer-wise sharded over DP 8: 8 B x 6,291,456 +
    12 B x 8,193,152."""
    assert est({"optimizer": "muon", "use_distributed_optimizer": False}).optimizer_bytes == 8 * LIN + 12 * (N - LIN)
    assert est({"optimizer": "muon"}).optimizer_bytes == 8 * (LIN // 8) + 12 * ((N - LIN) // 8)


def test_partial_distributed_optimizer():
    """Two instances over DP 8: the states of each are sharded over 4 ranks, 12 x n/4."""
    s = est(parallelism={"num_distributed_optimizer_instances": 2})
    assert s.optimizer_bytes == 12 * (N // 4)
    assert est().optimizer_bytes == 12 * (N // 8)


def test_optimizer_rules():
    with pytest.raises(ConfigError, match="only with optimizer: adam"):
        est({"optimizer": "sgd"}, precision={"use_precision_aware_optimizer": True})
    with pytest.raises(ConfigError, match="needs the distributed optimizer"):
        est({"use_distributed_optimizer": False}, {"num_distributed_optimizer_instances": 2})
    with pytest.raises(ConfigError, match="applies only with optimizer: sgd"):
        est({"sgd_momentum": 0.5})
