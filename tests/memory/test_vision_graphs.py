"""The vision tower's own CUDA graphs (training.vision_cuda_graph_impl, estimator/memory/vision.py and
estimator/memory/features/cuda_graphs.py): the padded length, the static buffers, the private pool and the capture
moment, worked out by hand.

Model (tests/memory/test_vision.py): a small GPT (4 layers, h 512, sequence 4096) with a qwen3_vl tower of 2 layers,
hv 64, 4 heads, MLP 128, patch 16, merge 2, 2304 positions; one 448-pixel image a sample: (448 / 16)^2 = 784
patches. B = 2 bytes (bf16).

One tower layer keeps per token (the language model's layer formulas for the tower's shape, no recompute):
qkv's fused LayerNorm input and output 2 x 2 x 64 = 256, q, k and v 3 x 2 x 64 = 384, attention's output (proj's
input) 2 x 64 = 128 and its fp32 log-sum-exp 4 x 4 heads = 16, fc1's fused LayerNorm input and output 256, fc1's
output (the GELU's input) 2 x 128 = 256 and the GELU's output (fc2's input) 256: 1,552 bytes.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from estimator.memory.features.cuda_graphs import peak
from tests.conftest import make_config

MODEL = dict(num_layers=4, hidden_size=512, num_attention_heads=8, vocab_size=1000)
VIT = {**MODEL, "vision_num_layers": 2, "vision_hidden_size": 64, "vision_num_attention_heads": 4,
       "vision_ffn_hidden_size": 128}
GRAPHS = dict(vision_cuda_graph_impl="transformer_engine", max_vision_cuda_graph_seq_length=1024)
PER_TOKEN = 1552                    # one tower layer, bytes per token (module docstring)
CAPTURED = 2 * 1024 * PER_TOKEN     # both layers over the 1024 padded patches: 3,178,496
STATIC = 2 * (2 * 1024 * 64 + 2 * 1024 * 64 + 1024 * 1024)     # 2,621,440
WORK = 2 * 1024 * 128 + 2 * 2 * 1024 * 64                        # 524,288


def _stage(parallelism=None, **training):
    return estimate(make_config(VIT, parallelism, dict(images_per_sample=1, **training))).stages[0]


def test_the_graphed_tower_runs_over_the_padded_length():
    """Megatron-Bridge @ 067f987d : modelling_qwen3_vl/vision_model.py pads the micro-batch's 784 patches to
    max_vision_cuda_graph_seq_length 1024 before the layers (also in the eager warm-up steps, where the graphs are
    already on): both layers keep 240 tokens more, 2 x 240 x 1,552 = 744,960 bytes at the warm-up peak; the patch
    embedding and the merger see the 784 real patches. Padded to 784 exactly, nothing changes."""
    plain = _stage().activations_bytes
    assert _stage(**GRAPHS).activations_bytes - plain == 2 * 240 * PER_TOKEN == 744_960
    assert _stage(vision_cuda_graph_impl="transformer_engine",
                  max_vision_cuda_graph_seq_length=784).activations_bytes == plain


def test_static_buffers_and_private_pool_by_hand():
    """cuda_graph_warmup_steps 0: the graphs are captured before the first step, so the peak is the steady one.
    Static buffers (Megatron-LM @ d98e8a64 : transformer_layer.py get_layer_static_inputs, one per layer and
    micro-batch in flight; Transformer Engine's graphs keep their output): per layer the bf16 input and the output
    2 x 2 x 1024 x 64 and the boolean 1024 x 1024 attention mask, 2 x 1,310,720 = 2,621,440. The captured layers'
    saved tensors (3,178,496) leave the allocated figure for the graphs' private pool, which also keeps one
    layer's backward working set (fc1's output gradient 2 x 1024 x 128 and two residual-sized gradients
    2 x 2 x 1024 x 64: 524,288): 3,702,784 on the device beyond the allocated peak."""
    eager = _stage(**GRAPHS)
    steady = _stage(cuda_graph_warmup_steps=0, **GRAPHS)
    assert steady.transient["cuda_graph_static_buffers"] == STATIC == 2_621_440
    assert eager.activations_bytes - steady.activations_bytes == CAPTURED == 3_178_496
    assert steady.outside_allocator["cuda_graph_private_pool"] == CAPTURED + WORK == 3_702_784


def test_pipeline_parallelism_holds_the_first_stage_micro_batches_in_flight():
    """PP 2: stage 0 holds 2 micro-batches in flight under 1F1B, so twice the static buffers (5,242,880) and twice
    the captured tensors in the pool with one working set: 2 x 3,178,496 + 524,288 = 6,881,280. Stage 1 holds
    no tower and no tower graph."""
    par = {"pipeline_model_parallel_size": 2}
    steady = _stage(par, cuda_graph_warmup_steps=0, world_size=2, global_batch_size=8, **GRAPHS)
    assert steady.transient["cuda_graph_static_buffers"] == 2 * STATIC
    assert steady.outside_allocator["cuda_graph_private_pool"] == 2 * CAPTURED + WORK == 6_881_280
    est = estimate(make_config(VIT, par, dict(images_per_sample=1, cuda_graph_warmup_steps=0, world_size=2,
                                              global_batch_size=8, **GRAPHS)))
    assert "cuda_graph_private_pool" not in est.stages[1].outside_allocator


def test_the_capture_moment_of_the_tower():
    """cuda_graphs.peak with integers: states 100, activations 30, an eager transient 10, no language-model graphs;
    the tower's graphs hold (captured 20, static 5, created 40, work 3). No warm-up step: the eager peak does not
    happen. The helper first allocates the sample inputs of every micro-batch of the step (40) before Transformer
    Engine keeps only those in flight; that moment, 100 + 40 = 140, beats the capture proper (100 + 5 + 20 + 3)
    and the steady step (100 + 30 - 20 + 10 + 5 = 125); the pool (20 + 3) lies 125 + 23 - 140 = 8 beyond it."""
    r = SimpleNamespace(cfg=SimpleNamespace(training=SimpleNamespace(cuda_graph_warmup_steps=0)))
    gp = peak(r, 100, 30, {"x": 10}, 0, 0, 0, (20, 5, 40, 3))
    assert (gp.phase, gp.activations, gp.transient, gp.pool_outside) == (
        "vision_capture", 0, {"cuda_graph_static_buffers": 40}, 8)
    gp = peak(r, 100, 30, {"x": 10}, 0, 0, 0, (20, 5, 10, 3))     # the capture proper: 100 + 5 + 20 + 3 = 128
    assert (gp.phase, gp.activations, gp.transient) == (
        "vision_capture", 20, {"cuda_graph_static_buffers": 5, "cuda_graph_capture_working_set": 3})


@pytest.mark.parametrize("training, model, parallelism, words", [
    ({"vision_cuda_graph_impl": "transformer_engine"}, VIT, None,
     r"pads each micro-batch's patches to 576.*784 patches"),
    ({**GRAPHS, "max_vision_cuda_graph_seq_length": 700}, VIT, None, "training.max_vision_cuda_graph_seq_length"),
    ({**GRAPHS, "freeze_vision_model": True}, VIT, None, "freeze_vision_model"),
    ({**GRAPHS, "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}, VIT,
     None, "recompute_granularity full"),
    ({"max_vision_cuda_graph_seq_length": 1024}, VIT, None, "applies only with training.vision_cuda_graph_impl"),
    ({"vision_cuda_graph_modules": ["attn"]}, VIT, None, "applies only with training.vision_cuda_graph_impl"),
    (GRAPHS, {**VIT, "vision_model_type": "qwen2_5_vl"}, None, "only to the qwen3_vl tower"),
    (GRAPHS, MODEL, None, "needs a model with a vision tower"),
])
def test_what_the_tower_graphs_do_not_model_is_refused_by_name(training, model, parallelism, words):
    """The default length without max_vision_cuda_graph_seq_length is 2304 // 2^2 = 576 patches
    (get_vision_cuda_graph_seq_length), fewer than a 448-pixel image's 784: Megatron-Bridge raises ValueError."""
    tr = dict(training)
    if model is not MODEL:
        tr["images_per_sample"] = 1
    with pytest.raises(ConfigError, match=words):
        estimate(make_config(model, parallelism, tr))


def test_capturing_attention_only_keeps_the_mlp_eager():
    """vision_cuda_graph_modules [attn]: the graphs hold each layer's attention part, 2 x 1024 x (256 + 384 + 128
    + 16) = 1,605,632 bytes (the MLP's 768 a token stays allocated), with the same static buffers; the pool adds the
    attention region's working set, q, k and v's gradients 3 x 2 x 1024 x 64 = 393,216."""
    steady = _stage(cuda_graph_warmup_steps=0, vision_cuda_graph_modules=["attn"], **GRAPHS)
    assert steady.transient["cuda_graph_static_buffers"] == STATIC
    assert steady.outside_allocator["cuda_graph_private_pool"] == 1_605_632 + 393_216
