"""Schedules and buffers inside the allocator (estimator/memory/features/schedule.py, and the router dtype in
estimator/memory/activations.py), by hand.

The small model of tests/memory/test_memory.py (L=4, h=1024, 8 MHA heads of 128, GeLU f=4096, untied, vocabulary
32000, bf16), sequence T = 2048. Linear weights per layer 4h^2 + 2hf = 12,582,912.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.memory.activations import layer_activations
from estimator.config.load import load_config
from estimator.memory.features.schedule import ep_overlap_layer, ep_overlap_moments
from estimator.model.resolve import resolve
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
    own peak, one layer's pre-dispatch part and permuted tokens, the backward layer's held gradients and the MoE
    backward working set (100,777,984, see the next test), less the backward micro-batch's loss chunk, gone by
    then (logits 2 B x 2048 x 32000 = 131,072,000 and more), stays below the loss's own phase, so the estimate
    is the same as without overlap."""
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
    combined step, in the backward layer's MLP backward (schedule.py, moment 3).

    Pre-dispatch part of the forward MoE layer, T = 2048 tokens, h = 1024, 8 heads of 128, 8 experts, bf16:
        attention  norm in + out 2 x 2 B x T x h = 8,388,608; q, k, v 2 B x T x 3 x 1024 = 12,582,912;
                   output 2 B x T x 1024 = 4,194,304; softmax statistics 4 B x T x 8 = 65,536  -> 25,231,360
        pre-MLP norm in + out 2 x 2 B x T x h                                                 ->  8,388,608
        router (softmax after top-2): int64 indices 8 B x T x 2 + fp32 softmax 4 B x T x 2   ->     49,152
                                                                                       total   33,669,120
    its permuted tokens waiting for the dispatch (P = T k = 4096 rows): 2 B x 4096 x 1024       =  8,388,608
    the backward layer's output gradient G and the residual's .grad copy: 2 x 2 B x T x h       =  8,388,608
    the experts' output gradient X the caller holds through the MLP backward: 2 B x 4096 x 1024 =  8,388,608
    the MoE backward working set (GeLU experts of width 4096): 2 B x 4096 x (4096 + 1024)       = 41,943,040
    so the backward working set phase (41,943,040) becomes the step, 33,669,120 + 3 x 8,388,608 + 41,943,040 =
    100,777,984. Stage 1 peaks at the loss's forward (131,072,000), which stays."""
    par = {"expert_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
           "virtual_pipeline_model_parallel_size": 2}
    tr = {"world_size": 4}
    base = est(MOE, par, tr).stages
    s = est(MOE, par, {**tr, "overlap_moe_expert_parallel_comm": True}).stages
    assert [x.microbatches_in_flight for x in s] == [x.microbatches_in_flight for x in base] == [5, 3]
    assert base[0].transient["backward_working_set"] == 41_943_040
    assert "backward_working_set" not in s[0].transient
    assert s[0].transient["ep_overlap_1f1b_step"] == 100_777_984
    assert s[0].allocated_bytes - base[0].allocated_bytes == 100_777_984 - 41_943_040
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
    two norm outputs (QKV's and fc1's inputs) and the activation output (fc2's) in 2 B instead of 1 B; the
    projection keeps no FP8 copy in either (tensorwise: save_original_input): 2 T h + T f = 4,194,304 + 8,388,608
    = 12,582,912 more bytes per layer."""
    pr = {"fp8": True, "fp8_recipe": "tensorwise"}
    base = est(precision=pr).stages[0]
    s = est(precision={**pr, "first_last_layers_bf16": True}).stages[0]
    assert base.weights_bytes - s.weights_bytes == 2 * 2 * LIN
    assert s.activations_bytes - base.activations_bytes == 2 * (2 * T * H + T * F) == 2 * 12_582_912
    assert s.activations["bf16_layers"] == 2 * (2 * T * H + T * F)


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


def test_expert_parallel_overlap_step_figures_of_one_moe_layer():
    """TP 2 with sequence parallelism (T = 2048, Tn = 1024), EP 2 (4 local experts), expert TP 2 (the default: TP),
    8 GeLU experts of width 4096, top-2, a shared expert of width 1024, bf16 (schedule.py, the combined step's
    figures); P = Tn k = 2048 rows leave and reach a rank, R = P x expert TP = 4096 rows reach its experts:

        waiting      the permuted tokens 2 B x 2048 x 1024                                  = 4,194,304
        output       the forward layer's output 2 B x Tn x h                                = 2,097,152
        held         G, the residual's and the shared experts' .grad copies 3 x 2,097,152   = 6,291,456
        X            the experts' output gradient, the P rows before the expert-TP gather    = 4,194,304
        MLP forward  the node's input (P) 4,194,304 + fc2's output (R) 8,388,608 + its re-sorted copy (R)
                     8,388,608 + the expert-TP reduce-scatter's output (P) 4,194,304         = 25,165,824
        token grad   the permuted tokens' gradient 2 B x 2048 x 1024                        = 4,194,304

    With the flex dispatcher (DeepEP) the permutation's input is a view of the pre-MLP norm's output (nothing
    waits), X is bounded by the routed rows, 2 B x 4096 x 1024 = 8,388,608, the MLP forward (received tokens,
    fc2's output, restored tokens) by three times that, 25,165,824, and the tokens' gradient is the Tn local
    tokens', 2 B x 1024 x 1024 = 2,097,152; HybridEP's MLP forward holds only fc2's output, 8,388,608. The pre-dispatch part
    includes the shared experts' output the schedule keeps, 2 B x Tn x h = 2,097,152.

    Moment 3 holds waiting + X + the working set B max(R (fm + d), 2 R d) = 2 x 4096 x max(2048 + 1024, 2048) =
    25,165,824 beside the pre-dispatch part and the held gradients: 33,554,432; moment 6 the MLP forward and the
    tokens' gradient, 29,360,128: moment 3 is the peak. With fine-grained SwiGLU experts of width 512 (256 per
    expert-TP rank) the working set is 2 R d = 16,777,216, moment 3 25,165,824 and moment 6 (the same
    forward figures) 29,360,128: with expert TP and several local experts the forward's MLP node is the peak."""
    model = {**MOE, "moe_shared_expert_intermediate_size": 1024}
    fine = {**model, "activation_func": "swiglu", "gated_linear_unit": True, "moe_ffn_hidden_size": 512}
    for m, dispatcher, figures, work, peak in (
            (model, "alltoall", (4_194_304, 2_097_152, 6_291_456, 4_194_304, 25_165_824, 4_194_304), 25_165_824,
             33_554_432),
            (model, "flex", (0, 2_097_152, 6_291_456, 8_388_608, 25_165_824, 2_097_152), None, None),
            ({**model, "moe_flex_dispatcher_backend": "hybridep"}, "flex",
             (0, 2_097_152, 6_291_456, 8_388_608, 8_388_608, 2_097_152), None, None),
            (fine, "alltoall", (4_194_304, 2_097_152, 6_291_456, 4_194_304, 25_165_824, 4_194_304), 16_777_216,
             29_360_128)):
        r = resolve(load_config(make_config(
            {**m, "moe_token_dispatcher_type": dispatcher},
            {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2},
            {"seq_length": T, "world_size": 4, "sequence_parallel": True, "overlap_moe_expert_parallel_comm": True})))
        kind = r.kinds[0]
        a = layer_activations(r, kind, parts=True)
        layer = ep_overlap_layer(r, kind, a)
        assert layer[1:] == figures
        assert a.parts["shared_out"] == 2_097_152
        p = a.parts
        assert layer.pre == (a.attention + p["mlp_norm_in"] + p["mlp_norm_out"] + p["router"] + p["permute_map"]
                             + p["shared"] + 2_097_152)
        if work is not None:
            assert a.backward_peak == work
            assert ep_overlap_moments([layer], work) == layer.pre + 6_291_456 + peak


def test_expert_parallel_overlap_keeps_the_shared_experts_output_and_single_experts_rows():
    """Tensors the schedule nodes keep per micro-batch from the forward to the backward pass (layers/moe.py):

    - with shared experts their output, held by the pre-dispatch node's ``before_detached``
      (models/common/utils.py TransformerLayerNode.detach): 2 B x T x h = 4,194,304 per layer; 4 MoE layers, one
      micro-batch (no pipelining): 16,777,216;
    - alltoall with one local expert (8 experts, EP 8) and expert TP 2 (TP 2, SP: Tn = 1024), bf16: the dispatched
      rows P = Tn k = 2048, which should_free_input leaves to the dispatch node's output and the MLP node's input
      while the experts save the gathered copy: 2 B x 2048 x 1024 = 4,194,304 per layer, 16,777,216 for 4; not with
      FP8 (should_free_input frees them)."""
    ovl = {"overlap_moe_expert_parallel_comm": True}
    shared = {**MOE, "moe_shared_expert_intermediate_size": 1024}
    par = {"expert_model_parallel_size": 2}
    base = est(shared, par, {"world_size": 2}).stages[0]
    s = est(shared, par, {"world_size": 2, **ovl}).stages[0]
    assert s.activations_bytes - base.activations_bytes == 16_777_216
    par = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8, "expert_tensor_parallel_size": 2}
    tr = {"world_size": 16, "sequence_parallel": True}
    for precision, extra in ((None, 16_777_216), ({"fp8": True}, 0)):
        base = est(MOE, par, tr, precision).stages[0]
        s = est(MOE, par, {**tr, **ovl}, precision).stages[0]
        assert s.activations_bytes - base.activations_bytes == extra


def test_expert_parallel_overlap_under_megatron_fsdp():
    """Megatron-FSDP (optim_grads, DP 4, EP 2) without pipelining, a vocabulary of 1024 so that the combined step
    is the peak: the SwiGLU model of tests/memory/features/test_delayed_wgrad.py, step = 33,669,120 (pre-dispatch part)
    + 3 x 8,388,608 (waiting tokens, held gradients, X) + 16,777,216 (working set) - 16,777,216 (the backward
    micro-batch's loss chunk, gone: final norm in and out 2 x 2 B x T x h + the fp32 softmax 4 B x T x 1024)
    = 58,834,944. The step's backward fetches a gradient bucket per unit as it passes the layers, while the forward
    regrows what it frees: at the chunk's last layer step every unit's bucket and the root's (fetched by the
    output layer's weight gradient) are there, below the queue's 1e9 elements: all the rank's parameters in
    bf16, 2 B x parameters. It used to be left at that figure without asking (the step was no listed peak phase).
    With the interleaved schedule Megatron-Core asserts no FSDP (combined_1f1b.py)."""
    fine = {**MOE, "vocab_size": 1024, "activation_func": "swiglu", "gated_linear_unit": True,
            "moe_ffn_hidden_size": 512}
    par = {"expert_model_parallel_size": 2, "use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads"}
    s = est(fine, par, {"world_size": 4, "overlap_moe_expert_parallel_comm": True}).stages[0]
    assert s.transient["ep_overlap_1f1b_step"] == 58_834_944
    assert s.transient["fsdp_unsharded_grads"] == 2 * s.parameters
    with pytest.raises(ConfigError, match="Megatron-FSDP runs without pipeline parallelism only"):
        est(fine, {**par, "pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2},
            {"world_size": 8, "overlap_moe_expert_parallel_comm": True})


def test_expert_parallel_overlap_needs_a_gpt_model():
    """Only GPTModel builds the combined schedule plan (models/gpt/gpt_model.py build_schedule_plan)."""
    hybrid = dict(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
                  hybrid_layer_pattern="ME", mamba_num_heads=8, mamba_head_dim=16, mamba_num_groups=2,
                  mamba_state_dim=8, num_experts=4, moe_router_topk=2, position_embedding_type="none")
    with pytest.raises(ConfigError, match="combined 1F1B schedule plan for GPTModel only"):
        est(hybrid, {"expert_model_parallel_size": 2}, {"world_size": 2, "overlap_moe_expert_parallel_comm": True})


def test_early_attention_release_moves_moment_six():
    """flagsA28: --ep-overlap-early-attn-memory-release (model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run
    runs b's pre-dispatch backward before f's MLP forward). The fine-grained SwiGLU case above (TP 2 + SP, EP 2,
    expert TP 2), where moment 6 is the peak: moment 6 = pre + MLP forward 25,165,824 + held 6,291,456 + tokens'
    gradient 4,194,304 = pre + 35,651,584, moment 3 = pre + 6,291,456 + 25,165,824 = pre + 31,457,280. Early: b has
    freed its pre-dispatch tensors and consumed the tokens' gradient, keeping its held gradients and its input's
    gradient 2 B x Tn x h = 2,097,152: moment 6 = pre + 25,165,824 + 6,291,456 + 2,097,152 - pre = 33,554,432,
    below moment 3, which is the step now: 4,194,304 B lower."""
    fine = {**MOE, "moe_shared_expert_intermediate_size": 1024, "activation_func": "swiglu", "gated_linear_unit": True,
            "moe_ffn_hidden_size": 512, "vocab_size": 1024}     # a small vocabulary: the step is the stage's peak
    par = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2}
    tr = {"seq_length": T, "world_size": 4, "sequence_parallel": True, "overlap_moe_expert_parallel_comm": True}
    r = resolve(load_config(make_config(fine, par, tr)))
    kind = r.kinds[0]
    a = layer_activations(r, kind, parts=True)
    layer = ep_overlap_layer(r, kind, a)
    assert ep_overlap_moments([layer], a.backward_peak) == layer.pre + 35_651_584
    assert ep_overlap_moments([layer], a.backward_peak, early=True) == layer.pre + 31_457_280
    assert layer.pre > 2_097_152
    plain = est(fine, par, tr).stages[0].transient["ep_overlap_1f1b_step"]
    early = est(fine, par, {**tr, "ep_overlap_early_attn_memory_release": True}).stages[0]
    assert plain - early.transient["ep_overlap_1f1b_step"] == 4_194_304
    assert est(fine, par, tr).stages[0].allocated_bytes - early.allocated_bytes == 4_194_304
    with pytest.raises(ConfigError, match="needs overlap_moe_expert_parallel_comm"):
        est(fine, par, {**tr, "overlap_moe_expert_parallel_comm": False, "ep_overlap_early_attn_memory_release": True})
    with pytest.raises(ConfigError, match="delay_wgrad_compute is not modelled"):
        est(fine, par, {**tr, "delay_wgrad_compute": True, "ep_overlap_early_attn_memory_release": True})
