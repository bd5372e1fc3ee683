"""CUDA graphs (estimator/features/cuda_graphs.py): static buffers and graph pool, by hand.

The small model of tests/test_memory.py (L=4, h=1024, 8 MHA heads of 128, GeLU f=4096), sequence T = 2048,
bf16. One static input and one static output of hidden states per captured callable and micro-batch:
2 x 2 B x T x h = 8,388,608 bytes. A layer's backward working set: 2 B x T x f + 2 x 2 B x T x h =
16,777,216 + 8,388,608 = 25,165,824; the attention's q/k/v gradients 2 B x T x 3h = 12,582,912.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from tests.conftest import make_config

H, F, V, L, T = 1024, 4096, 32000, 4, 2048
STATIC = 2 * 2 * T * H
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def est(training=None, parallelism=None, model=None):
    tr = {"seq_length": T, "world_size": 1}
    tr.update(training or {})
    return estimate(make_config({**MODEL, **(model or {})}, parallelism, tr))


def test_whole_layer_capture():
    """Four layers, one micro-batch in flight: 4 static sets; the pool holds one layer's backward working set."""
    t = est({"cuda_graph_impl": "transformer_engine"}).stages[0].transient
    assert t["cuda_graph_static_buffers"] == 4 * STATIC
    assert t["cuda_graph_pool"] == 2 * T * F + 2 * 2 * T * H


def test_attention_only_and_attention_plus_mlp():
    t = est({"cuda_graph_impl": "local", "cuda_graph_modules": ["attn"]}).stages[0].transient
    assert (t["cuda_graph_static_buffers"], t["cuda_graph_pool"]) == (4 * STATIC, 2 * T * 3 * H)
    t = est({"cuda_graph_impl": "local", "cuda_graph_modules": ["attn", "mlp"]}).stages[0].transient
    assert (t["cuda_graph_static_buffers"], t["cuda_graph_pool"]) == (8 * STATIC, 2 * T * F + 2 * 2 * T * H)


def test_static_buffers_per_in_flight_micro_batch():
    """PP 2: stage 0 holds 2 layers for 2 micro-batches in flight, stage 1 2 layers for 1."""
    st = est({"cuda_graph_impl": "transformer_engine", "world_size": 2}, {"pipeline_model_parallel_size": 2}).stages
    assert [s.transient["cuda_graph_static_buffers"] for s in st] == [4 * STATIC, 2 * STATIC]


def test_full_iteration_has_a_pool_and_no_per_layer_buffers():
    t = est({"cuda_graph_impl": "full_iteration"}).stages[0].transient
    assert "cuda_graph_static_buffers" not in t and t["cuda_graph_pool"] == 2 * T * F + 2 * 2 * T * H


def test_cuda_graph_rules():
    with pytest.raises(ConfigError, match="must be empty"):
        est({"cuda_graph_impl": "full_iteration", "cuda_graph_modules": ["attn"]})
    with pytest.raises(ConfigError, match="drop-and-pad"):
        est({"cuda_graph_impl": "local"}, model={"num_experts": 4})
    est({"cuda_graph_impl": "local", "cuda_graph_modules": ["attn", "moe_router", "moe_preprocess"]},
        model={"num_experts": 4})
