"""Schedules and buffers inside the allocator (estimator/features/schedule.py, and the router dtype in
estimator/activations.py), by hand.

The small model of tests/test_memory.py (L=4, h=1024, 8 MHA heads of 128, GeLU f=4096, untied, vocabulary
32000, bf16), sequence T = 2048. Linear weights per layer 4h^2 + 2hf = 12,582,912.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from tests.conftest import make_config

H, F, V, L, T = 1024, 4096, 32000, 4, 2048
LIN = 4 * H * H + 2 * H * F
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)
MOE = {**MODEL, "num_experts": 8, "moe_router_topk": 2}


def est(model=MODEL, parallelism=None, training=None, precision=None):
    tr = {"seq_length": T, "world_size": 1}
    tr.update(training or {})
    return estimate(make_config(model, parallelism, tr, precision))


def test_expert_parallel_overlap_without_pipelining_holds_one_micro_batch():
    """Regression: the combined 1F1B schedule was counted as two whole micro-batches in flight (+58 % on
    Megatron-LM's CI case gpt3_mcore_te_tp2_pp1_te_a2a_ovlp_8experts_etp1_ep4). The forward of micro-batch i+1
    runs layer by layer beside the backward of micro-batch i, which frees each layer as it goes
    (combined_1f1b.py, model_chunk_schedule_plan.py): one micro-batch is held, as without overlap. The step's
    own peak is one layer's pre-dispatch part (33,685,504, see the next test) + the MoE backward working set
    (41,943,040) after the backward micro-batch's loss chunk (logits 2 B x 2048 x 32000 = 131,072,000 and more)
    is gone: below the loss's own phase, so the estimate is the same as without overlap."""
    par, tr = {"expert_model_parallel_size": 2}, {"world_size": 2}
    base = est(MOE, par, tr).stages[0]
    s = est(MOE, par, {**tr, "overlap_moe_expert_parallel_comm": True}).stages[0]
    assert (base.microbatches_in_flight, s.microbatches_in_flight) == (1, 1)
    assert s.activations_bytes == base.activations_bytes
    assert s.allocated_bytes == base.allocated_bytes
    assert "ep_overlap_1f1b_step" not in s.transient


def test_expert_parallel_overlap_step_peak_with_interleaving():
    """PP 2 x VPP 2, EP 2, world 4: the interleaved schedule's extra warm-up forward leaves the held set as it is
    (5 chunk-micro-batches on stage 0, 3 on stage 1, as without overlap). Stage 0 (no loss) peaks inside a
    combined step: the forward layer's pre-dispatch part beside the backward layer's working set.

    Pre-dispatch part of an MoE layer, T = 2048 tokens, h = 1024, 8 heads of 128, 8 experts, bf16:
        attention  norm in + out 2 x 2 B x T x h = 8,388,608; q, k, v 2 B x T x 3 x 1024 = 12,582,912;
                   output 2 B x T x 1024 = 4,194,304; softmax statistics 4 B x T x 8 = 65,536  -> 25,231,360
        pre-MLP norm in + out 2 x 2 B x T x h                                                 ->  8,388,608
        router (softmax after top-2): int64 indices 8 B x T x 2 + fp32 softmax 4 B x T x 2   ->     49,152
                                                                                       total   33,669,120
    so the backward working set phase (41,943,040) becomes the step, 41,943,040 + 33,669,120 = 75,612,160.
    Stage 1 peaks at the loss's forward (131,072,000), which stays."""
    par = {"expert_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
           "virtual_pipeline_model_parallel_size": 2}
    tr = {"world_size": 4}
    base = est(MOE, par, tr).stages
    s = est(MOE, par, {**tr, "overlap_moe_expert_parallel_comm": True}).stages
    assert [x.microbatches_in_flight for x in s] == [x.microbatches_in_flight for x in base] == [5, 3]
    assert base[0].transient["backward_working_set"] == 41_943_040
    assert "backward_working_set" not in s[0].transient
    assert s[0].transient["ep_overlap_1f1b_step"] == 41_943_040 + 33_669_120
    assert s[0].allocated_bytes - base[0].allocated_bytes == 33_669_120
    assert s[1].allocated_bytes == base[1].allocated_bytes and "loss_forward" in s[1].transient


def test_deferred_output_layer_weight_gradients():
    """PP 2, global batch 8 -> 8 micro-batches. The last stage keeps, per micro-batch, the output layer's input
    2 B x T x h = 4,194,304 and its logits gradient 2 B x T x 32000 = 131,072,000: 8 x 135,266,304 =
    1,082,130,432 bytes, and computes no per-micro-batch weight gradient of the output layer."""
    par, tr = {"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 8}
    base = est(parallelism=par, training=tr).stages[1]
    s = est(parallelism=par, training={**tr, "defer_embedding_wgrad_compute": True}).stages[1]
    assert "output_layer_wgrad" not in s.transient and "deferred_output_wgrad" not in base.transient
    assert s.transient["deferred_output_wgrad"] == 8 * (2 * T * H + 2 * T * V)
    s = est(parallelism=par, training={**tr, "defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 3})
    assert s.stages[1].transient["deferred_output_wgrad"] == 3 * (2 * T * H + 2 * T * V)


def test_fp8_without_the_weight_cache():
    """PP 2, stage 0: 2 layers, 2 micro-batches in flight. No cached FP8 copies (2 B x 2 x LIN less in the
    weights); each in-flight micro-batch keeps its own row- and column-wise copies, 2 x 2 B x 2 x LIN."""
    par, tr = {"pipeline_model_parallel_size": 2}, {"world_size": 2}
    base = est(parallelism=par, training=tr, precision={"fp8": True}).stages[0]
    s = est(parallelism=par, training=tr, precision={"fp8": True, "disable_parameter_transpose_cache": True}).stages[0]
    assert base.weights_bytes - s.weights_bytes == 2 * 2 * LIN
    assert s.activations_bytes - base.activations_bytes == 2 * 2 * 2 * LIN
    assert s.activations["fp8_weight_copies"] == 2 * 2 * 2 * LIN


def test_first_and_last_layer_in_bf16():
    """Layers 0 and 3 in bf16: their linear weights lose the 2 B of FP8 copies (2 x 2 B x LIN); they save the
    norm output and the activation output in 2 B instead of 1 B and keep no FP8 copy of the projection input:
    T x h + T x f - T x h = 8,388,608 more bytes per layer."""
    pr = {"fp8": True, "fp8_recipe": "tensorwise"}
    base = est(precision=pr).stages[0]
    s = est(precision={**pr, "first_last_layers_bf16": True}).stages[0]
    assert base.weights_bytes - s.weights_bytes == 2 * 2 * LIN
    assert s.activations_bytes - base.activations_bytes == 2 * T * F
    assert s.activations["bf16_layers"] == 2 * T * F


def test_router_dtype():
    """The router keeps tensors in its dtype only where the logits themselves are saved (moe_utils.py
    z_loss_func: logsumexp saves its input, the T x 8 logits, and its T outputs): 2 B by default, 4 B in fp32,
    (4 - 2) x (T x 8 + T) more per layer. With Megatron's default softmax after top-k and no z-loss the saved
    scores are fp32 either way and the dtype changes nothing."""
    assert est({**MOE, "moe_router_dtype": "fp32"}).stages[0].activations_bytes == est(MOE).stages[0].activations_bytes
    z = {**MOE, "moe_z_loss_coeff": 1e-3}
    base = est(z).stages[0]
    s = est({**z, "moe_router_dtype": "fp32"}).stages[0]
    assert s.activations_bytes - base.activations_bytes == L * (4 - 2) * (T * 8 + T)


def test_schedule_rules():
    with pytest.raises(ConfigError, match="virtual_pipeline"):
        est(MOE, {"expert_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
            {"world_size": 4, "overlap_moe_expert_parallel_comm": True})
    layout = {"expert_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
              "pipeline_model_parallel_layout": "Et|t|t|tL"}       # a layout of 2 chunks per rank: interleaved
    est(MOE, layout, {"world_size": 4, "overlap_moe_expert_parallel_comm": True})
    with pytest.raises(ConfigError, match="capturing moe or mlp"):
        est({**MOE, "moe_pad_expert_input_to_capacity": True, "moe_expert_capacity_factor": 1.0},
            {"expert_model_parallel_size": 2},
            {"world_size": 2, "overlap_moe_expert_parallel_comm": True, "cuda_graph_impl": "transformer_engine",
             "cuda_graph_modules": ["attn", "moe"]})
    ovl = {"world_size": 2, "overlap_moe_expert_parallel_comm": True}
    # Megatron-LM @ d98e8a64 transformer_config.py asserts: "disable moe in recompute_modules ...", "... only
    # supported with bf16 or fp16 model", "MTP supports at most one layer ...".
    with pytest.raises(ConfigError, match="training.recompute_modules.*moe cannot be recomputed"):
        est(MOE, {"expert_model_parallel_size": 2},
            {**ovl, "recompute_granularity": "selective", "recompute_modules": ["core_attn", "moe"]})
    with pytest.raises(ConfigError, match="precision.params_dtype.*bf16 or fp16"):
        est(MOE, {"expert_model_parallel_size": 2}, ovl, {"params_dtype": "fp32"})
    with pytest.raises(ConfigError, match="model.mtp_num_layers.*at most one MTP"):
        est({**MOE, "mtp_num_layers": 2}, {"expert_model_parallel_size": 2}, ovl)
    est(MOE, {"expert_model_parallel_size": 2}, {**ovl, "recompute_granularity": "selective",
                                                 "recompute_modules": ["core_attn", "moe_act"]})
    with pytest.raises(ConfigError, match="pipeline_model_parallel_size > 1"):
        est(training={"defer_embedding_wgrad_compute": True})
    with pytest.raises(ConfigError, match="delayed scaling"):
        est(precision={"fp8": True, "first_last_layers_bf16": True})
