"""The optimizer step's CUDA graph (training.optimizer_cuda_graph, Megatron-LM's --optimizer-cuda-graph, Bridge's
optimizer.optimizer_cuda_graph; branch flagsB28).

Megatron-LM @ d98e8a64 : megatron/core/optimizer/optimizer_cuda_graph.py captures optimizer.step once into a private
pool (full_cuda_graph.get_graph_pool: a new pool per capture) and replays it: the step's working set stays reserved
beside the forward/backward pass (estimator/memory/features/cuda_graphs.py).

The model: 2 layers, h 1,024, FFN 4,096, vocabulary 32,000 tied: 57,938,944 parameters (hand count in
tests/memory/test_ddp_options.py). With a bf16 gradient buffer the step's working set is the fp32 copies of the
gradients it steps (``main_param.grad = model_grad.float()``, estimator/memory/optimizer_step.py): 4 B x the
parameters, or x the shard with the distributed optimizer. With an fp32 buffer the copies are views: nothing.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.megatron_args import read_megatron_args, to_megatron_args
from tests.conftest import make_config

PARAMS = 57_938_944
MODEL = dict(num_layers=2, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
             activation_func="gelu", gated_linear_unit=False)
BF16_GRADS = {"accumulate_allreduce_grads_in_fp32": False}


def est(tr=None, pr=None):
    return estimate(make_config(MODEL, None, tr, pr)).stages[0]


@pytest.mark.parametrize("tr, working_set", [
    ({}, 4 * PARAMS),                                          # one GPU: 231,755,776 B, every gradient
    ({"use_distributed_optimizer": True, "world_size": 2}, 4 * PARAMS // 2),   # 115,877,888 B: the shard
])
def test_the_steps_fp32_gradient_copies_stay_in_the_pool(tr, working_set):
    """The forward/backward peak (2.0 GiB) is above the step's, so the allocated peak is unchanged and the device
    figure grows by the step's working set: the fp32 copies of the bf16 gradients it steps."""
    base, graph = est(tr, BF16_GRADS), est({**tr, "optimizer_cuda_graph": True}, BF16_GRADS)
    assert graph.allocated_bytes == base.allocated_bytes
    assert graph.outside_allocator == {"optimizer_cuda_graph_pool": working_set}
    assert graph.device_bytes - base.device_bytes == working_set


def test_an_fp32_gradient_buffer_leaves_nothing_in_the_pool():
    """fp32 gradients: the step reads them through views, Adam runs in place, so its working set is 0 B."""
    assert est({"optimizer_cuda_graph": True}).device_bytes == est().device_bytes


@pytest.mark.parametrize("tr, pr, field", [
    ({"optimizer": "sgd"}, {}, "training.optimizer_cuda_graph"),
    ({"reserved_memory_model": "replay"}, {}, "training.optimizer_cuda_graph"),
    ({"use_distributed_optimizer": True}, {"use_precision_aware_optimizer": True}, "precision.store_param_remainders"),
    ({"use_distributed_optimizer": True}, {"use_precision_aware_optimizer": True, "store_param_remainders": False,
                                          "exp_avg_dtype": "bf16"}, "precision.exp_avg_dtype"),
])
def test_what_megatron_or_transformer_engine_refuses_is_refused(tr, pr, field):
    with pytest.raises(ConfigError) as exc:
        est({**tr, "optimizer_cuda_graph": True}, pr)
    assert any(p.field == field for p in exc.value.problems)


def test_precision_aware_adam_without_remainders_is_estimated():
    """Transformer Engine's capturable FusedAdam with fp32 masters and fp32 moments: accepted, as Megatron-Core runs it."""
    s = est({"use_distributed_optimizer": True, "optimizer_cuda_graph": True},
            {"use_precision_aware_optimizer": True, "store_param_remainders": False})
    assert s.allocated_bytes > 0


ARGS = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 4096 "
        "--max-position-embeddings 4096 --vocab-size 32000 --micro-batch-size 1 --bf16 --use-distributed-optimizer "
        "--grad-reduce-in-bf16 ")


def test_both_frontends_read_it():
    lm = read_megatron_args(ARGS + "--optimizer-cuda-graph", world_size=2).config
    assert lm["training"]["optimizer_cuda_graph"] is True
    assert "--optimizer-cuda-graph" in to_megatron_args(lm)
    bridge = read_bridge_config({"model": {"num_layers": 2, "hidden_size": 1024, "num_attention_heads": 8,
                                           "ffn_hidden_size": 4096, "vocab_size": 32000, "seq_length": 4096},
                                 "train": {"micro_batch_size": 1},
                                 "optimizer": {"optimizer_cuda_graph": True, "use_distributed_optimizer": True},
                                 "ddp": {"use_distributed_optimizer": True}},
                                world_size=2).config
    assert bridge["training"]["optimizer_cuda_graph"] is True
