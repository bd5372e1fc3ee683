"""CUDA graphs (estimator/memory/features/cuda_graphs.py): eager, capture and steady peaks, by hand.

The small model of tests/memory/test_memory.py (L=4, h=1024, 8 MHA heads of 128, GeLU f=4096, untied, vocabulary
32000), sequence T = 2048, bf16, flash attention. Per layer and micro-batch:

    attention  norm in + out 2 x 2 B x T x h 8,388,608 + q, k, v 2 B x T x 3h 12,582,912
               + output 2 B x T x h 4,194,304 + softmax statistics 4 B x T x 8 65,536        = 25,231,360
    MLP        norm in + out 8,388,608 + fc1 output 2 B x T x f 16,777,216 + GeLU output 16,777,216
                                                                                          = 41,943,040
    static     a static input and output of hidden states 2 x 2 B x T x h                  =  8,388,608
    mask       with the attention in the graph, its boolean causal mask [b 1, 1, T, T]     =  4,194,304
               (Megatron-LM @ d98e8a64 transformer_layer.py TransformerLayer.get_layer_static_inputs)
    backward working set of a layer 2 B x T x f + 2 x 2 B x T x h                          = 25,165,824
    q/k/v gradients of the attention 2 B x T x 3h                                          = 12,582,912
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from tests.conftest import make_config

H, F, V, L, T = 1024, 4096, 32000, 4, 2048
ATTN, MLP, STATIC, WORK, QKV = 25_231_360, 41_943_040, 2 * 2 * T * H, 25_165_824, 2 * T * 3 * H
MASK = T * T                    # one byte an element
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)
TE = {"cuda_graph_impl": "transformer_engine"}


def est(training=None, parallelism=None, model=None):
    tr = {"seq_length": T, "world_size": 1}
    tr.update(training or {})
    return estimate(make_config({**MODEL, **(model or {})}, parallelism, tr))


def _states(s):
    return s.weights_bytes + s.gradients_bytes + s.optimizer_bytes


def test_hand_figures_match_the_plain_activations():
    s = est().stages[0]
    assert (s.activations["attention"], s.activations["mlp"]) == (L * ATTN, L * MLP)


def test_capture_before_any_eager_step_is_the_peak():
    """Regression: the graphs' pool and static buffers were added on top of the eager peak (+18 % on
    Megatron-LM's CI case gpt3_mcore_te_tp2_pp2_ep4_etp1_resume_torch_dist_attn_cudagraph, whose
    max-allocated is the same from step 1: the capture's). PP 2, stage 0: 2 layers, 2 micro-batches in flight,
    whole layers captured, cuda_graph_warmup_steps 0. At the capture the 4 (layer, micro-batch) graphs hold
    4 x (25,231,360 + 41,943,040) = 268,697,600 of saved tensors, 4 static sets 4 x (8,388,608 + 4,194,304)
    = 50,331,648 (hidden states and the attention's mask) and one layer's
    backward working set 25,165,824; the eager transients (Transformer Engine's dummy weight gradients, the
    layers' backward working set) do not exist yet. In the steady state the saved tensors are in the private
    pool (not allocated), so the capture is the larger."""
    tr, par = {**TE, "cuda_graph_warmup_steps": 0, "world_size": 2}, {"pipeline_model_parallel_size": 2}
    base = est({"world_size": 2}, par).stages[0]
    s = est(tr, par).stages[0]
    assert s.activations_bytes == base.activations_bytes == 4 * (ATTN + MLP)
    ws = base.transient["workspaces"]
    assert 4 * (STATIC + MASK) == 50_331_648
    assert s.transient == {"cuda_graph_static_buffers": 4 * (STATIC + MASK), "cuda_graph_capture_working_set": WORK,
                           "workspaces": ws}
    assert s.allocated_bytes == _states(base) + 4 * (ATTN + MLP) + 4 * (STATIC + MASK) + WORK + ws
    # afterwards the pool (268,697,600 + 25,165,824) is reserved beside the steady state's allocations
    steady = _states(base) + base.transient["te_dummy_wgrad"] + base.transient["backward_working_set"] + ws \
        + 4 * (STATIC + MASK)
    assert s.outside_allocator["cuda_graph_private_pool"] == steady + 4 * (ATTN + MLP) + WORK - s.allocated_bytes


def test_eager_warm_up_steps_keep_the_plain_peak():
    """cuda_graph_warmup_steps 3 (Megatron's default): the eager steps reach the plain peak first. One GPU, whole
    layers: the steady state (states + the eager transients + 4 static sets) plus the private pool (all
    4 x 67,174,400 saved bytes + 25,165,824) exceeds that peak by 4 x (8,388,608 + 4,194,304) + 25,165,824
    = 75,497,472, which the device figure adds."""
    base = est().stages[0]
    s = est(TE).stages[0]
    assert s.allocated_bytes == base.allocated_bytes and s.transient == base.transient
    assert s.outside_allocator["cuda_graph_private_pool"] == 4 * (STATIC + MASK) + WORK == 75_497_472
    assert s.device_bytes == base.device_bytes + 4 * (STATIC + MASK) + WORK


def test_attention_capture_in_the_steady_state():
    """One GPU, attention captured, no eager step first: the steady state (the MLP's 4 x 41,943,040 and the
    loss chunk allocated, the attention's 4 x 25,231,360 in the pool, 4 static sets of 8,388,608 + the mask
    4,194,304) is above the capture (the attention, static sets, q/k/v gradients 12,582,912). The pool
    100,925,440 + 12,582,912 = 113,508,352 is reserved beside it."""
    base = est().stages[0]
    s = est({**TE, "cuda_graph_warmup_steps": 0, "cuda_graph_modules": ["attn"]}).stages[0]
    assert s.activations_bytes == base.activations_bytes - 4 * ATTN
    assert s.activations["cuda_graph_private_pool"] == -4 * ATTN
    assert s.allocated_bytes == base.allocated_bytes - 4 * ATTN + 4 * (STATIC + MASK)
    assert s.outside_allocator["cuda_graph_private_pool"] == 4 * ATTN + QKV


def test_the_attention_mask_static_input_follows_the_micro_batch_and_context_parallelism():
    """Regression: the boolean causal mask Megatron-Core builds for each captured attention's (layer, micro-batch)
    sample (transformer_layer.py get_layer_static_inputs: [b, 1, s / cp, s], kept by Transformer Engine among the
    graph's static inputs) was not counted. Its size follows the micro-batch and context parallelism, not tensor
    parallelism (sequence parallelism splits the hidden states only). attn captured, one micro-batch in flight,
    4 layers:

        TP 2 + SP, CP 2: hidden states 2 x 2 B x (2048 / 2 / 2) x 1024 = 2,097,152, mask 2048 / 2 x 2048 = 2,097,152
                         4 x 4,194,304 = 16,777,216
        b 2:             hidden states 2 x 2 B x 2 x 2048 x 1024 = 16,777,216, mask 2 x 2048 x 2048 = 8,388,608
                         4 x 25,165,824 = 100,663,296"""
    tr = {**TE, "cuda_graph_warmup_steps": 0, "cuda_graph_modules": ["attn"]}
    s = est({**tr, "world_size": 4, "sequence_parallel": True},
            {"tensor_model_parallel_size": 2, "context_parallel_size": 2}).stages[0]
    assert s.transient["cuda_graph_static_buffers"] == 16_777_216
    s = est({**tr, "micro_batch_size": 2}).stages[0]
    assert s.transient["cuda_graph_static_buffers"] == 100_663_296
    # an MLP captured alone has no mask: hidden states only, 4 x 8,388,608
    s = est({**tr, "cuda_graph_modules": ["mlp"]}).stages[0]
    assert s.transient["cuda_graph_static_buffers"] == 33_554_432


def test_mhc_layers_take_the_residual_streams_as_static_input():
    """Regression: with mHC (enable_hyper_connections, n = 4 residual streams) a captured layer's static hidden
    states are the n streams, [s, b, n x h] (Megatron-LM @ d98e8a64 transformer_layer.py
    HyperConnectionTransformerLayer.get_layer_static_inputs), and so its output; they were counted as [s, b, h].
    Whole layers, one micro-batch in flight: 4 layers x (2 x 2 B x 2048 x 4 x 1024 + the mask 2048 x 2048)
    = 4 x 37,748,736 = 150,994,944."""
    s = est({**TE, "cuda_graph_warmup_steps": 0}, model={"enable_hyper_connections": True}).stages[0]
    assert s.transient["cuda_graph_static_buffers"] == 4 * (2 * 2 * T * 4 * H + MASK) == 150_994_944


def test_a_gpt_models_mtp_layer_is_graphed_like_a_decoder_layer():
    """Regression: Megatron-LM @ d98e8a64 transformer/cuda_graphs.py TECudaGraphHelper takes each chunk's
    mtp.layers[i].mtp_model_layer (a TransformerLayer, _layer_is_graphable as a decoder layer) among its callables,
    but the estimate graphed the decoder layers only. One MTP depth, attn captured, no eager step: 5 graphed layers,
    so 5 static sets (8,388,608 + the mask 4,194,304) = 62,914,560, and the 5 attentions' 25,231,360 in the pool
    with the q/k/v gradients: 126,156,800 + 12,582,912 = 138,739,712 (the steady peak holds the pool beside it).
    A repeated MTP layer over 2 depths would replay its one graph at every depth (module.py _te_cuda_graph_replay
    picks the graph by micro-batch): refused."""
    s = est({**TE, "cuda_graph_warmup_steps": 0, "cuda_graph_modules": ["attn"]}, model={"mtp_num_layers": 1}).stages[0]
    assert s.transient["cuda_graph_static_buffers"] == 5 * (STATIC + MASK) == 62_914_560
    assert s.activations["cuda_graph_private_pool"] == -5 * ATTN
    assert s.outside_allocator["cuda_graph_private_pool"] == 5 * ATTN + QKV == 138_739_712
    with pytest.raises(ConfigError, match="replay that graph at every depth"):
        est(TE, model={"mtp_num_layers": 2, "mtp_use_repeated_layer": True})
    est(TE, model={"mtp_num_layers": 2})


def test_unfused_attention_capture_holds_the_probabilities_gradient():
    """Unfused attention keeps the softmax output, 2 B x 8 heads x T x T = 67,108,864 per layer, and its backward
    adds a gradient of that size (the fused softmax backward works in place) to the q/k/v gradients."""
    s = est({**TE, "cuda_graph_warmup_steps": 0, "cuda_graph_modules": ["attn"], "attention_backend": "unfused"})
    probs = 2 * 8 * T * T
    assert s.stages[0].outside_allocator["cuda_graph_private_pool"] == 4 * (ATTN + probs) + QKV + probs


def test_full_iteration_adds_the_capture_workspaces_and_holds_its_pool_beside_the_step():
    """The whole-iteration graph: the captured forward/backward allocates what the eager one does plus PyTorch's
    cuBLAS workspaces for the capture stream, 2 x 32 MiB = 67,108,864 B held all run (so in the step too); the step
    stays eager and is modelled. With torch's AdamW the step adds 4 B per parameter of temporaries; the private
    pool keeps the captured working set beside them, so the GPU holds, beyond the allocated peak (the
    forward/backward one here), min(forward/backward, step) - (states + run-long buffers) = the step's own 4 B x N.
    (Local layers: torch's AdamW runs only without Transformer Engine.) With Transformer Engine's FusedAdam the step
    allocates nothing of its own and nothing is added."""
    tr = {"optimizer_implementation": "torch", "transformer_impl": "local"}
    base = est(tr).stages[0]
    s = est({**tr, "cuda_graph_impl": "full_iteration"}).stages[0]
    ws = 2 * 32 * 2 ** 20
    assert s.transient == {**base.transient, "cuda_graph_capture_workspaces": ws}
    assert s.allocated_bytes == base.allocated_bytes + ws
    assert s.optimizer_step_bytes == base.optimizer_step_bytes + ws
    assert s.peak_phase == "forward_backward"
    n = est().parameters.total
    assert s.outside_allocator == {"cuda_graph_private_pool": 4 * n}
    assert abs(s.device_bytes - (base.device_bytes + 1.05 * ws + 4 * n)) <= 1      # the 5 % reserve, rounded
    fused = est({"cuda_graph_impl": "full_iteration"}).stages[0]
    assert not fused.outside_allocator


def test_full_iteration_against_the_measured_run():
    """This project's batch 7, b7_dense_full_iter_graph (one H100, held out; validation/project_runs.yaml): dense_base
    (508,594,176 parameters, local layers, torch AdamW) with --cuda-graph-impl full_iteration, captured at step 2.
    Measured: allocated peak 12,049,204,736 B (the capture step), PyTorch's peak reserved 14,732,492,800 B (after the
    capture, in the step: the pool beside the step's 2,034,237,440 B of temporaries); the same run without the graph
    reserved 13,182,697,472 B. The estimate's reserved figure plus the pool (the device figure without the CUDA
    context) must come within 1 % of the measured reserved."""
    from estimator.validation.project_runs import load_data
    case = next(c for c in load_data()["cases"] if c["run"] == "b7_dense_full_iter_graph")
    m = case["measured"]
    assert (m["peak_allocated_bytes"], m["peak_reserved_bytes"]) == (12_049_204_736, 14_732_492_800)
    s = estimate(case["config"]).stages[0]
    assert abs(s.allocated_bytes / m["peak_allocated_bytes"] - 1) < 0.002
    held = s.reserved_bytes + sum(s.outside_allocator.values())
    assert abs(held / m["peak_reserved_bytes"] - 1) < 0.01


def test_cuda_graph_rules():
    with pytest.raises(ConfigError, match="must be empty"):
        est({"cuda_graph_impl": "full_iteration", "cuda_graph_modules": ["attn"]})
    with pytest.raises(ConfigError, match="drop-and-pad"):          # the dispatcher waits on the host
        est({"cuda_graph_impl": "full_iteration"}, model={"num_experts": 4})
    est({"cuda_graph_impl": "full_iteration"}, model={"num_experts": 4, "moe_expert_capacity_factor": 1.0,
                                                       "moe_pad_expert_input_to_capacity": True})
    with pytest.raises(ConfigError, match="drop-and-pad"):
        est(TE, model={"num_experts": 4})
    with pytest.raises(ConfigError, match="local CUDA graphs"):
        est({"cuda_graph_impl": "local", "cuda_graph_modules": ["attn"]})
    with pytest.raises(ConfigError, match="full_iteration"):
        est({**TE, "recompute_granularity": "full"})
    est({**TE, "cuda_graph_modules": ["attn", "moe_router", "moe_preprocess"]}, model={"num_experts": 4})


# --- hybrid (Mamba) models ------------------------------------------------------------------------------------
#
# Megatron-LM @ d98e8a64 transformer/cuda_graphs.py _layer_is_graphable: a MambaLayer has a graph with mamba (or
# with no cuda_graph_modules), a TransformerLayer with attn only when its self-attention is not an IdentityOp (a
# hybrid model's '-' MLPLayer and 'E' MoETransformerLayer have none), an MoE layer with moe_router. A Mamba layer is
# captured whole (GraphableMegatronModule._te_cuda_graph_capture = forward) with one static input, the hidden
# states (get_layer_static_inputs), and returns the hidden states.
#
# The hybrid of tests/model/layers/test_layers.py (h 64, 4 heads of 16, Mamba 8 heads of 16, 2 groups, state 8, MLP 128
# squared ReLU), s 256, b 1, one GPU, bf16, no dropout. Per layer and micro-batch:
#
#     Mamba      input norm in + out 2 x 2 B x 256 x 64 65,536 + zxBCdt 2 B x 256 x 296 151,552 + out_x
#                2 B x 256 x 128 65,536 + gated norm input 65,536 and rstd 4 B x 256 x 2 2,048 + out_proj input
#                65,536                                                                              = 415,744
#     its backward working set: zxBCdt gradient 151,552 + convolution output 2 B x 256 x 160 81,920 + chunk
#                states and gradients 8 x 2 chunks x 8 heads x 16 x 8 16,384 + C B^T 4 x 2 x 2 x 128^2 262,144
#                + dt and cumsum 8 x 8 x 256 16,384                                                  = 528,384
#     attention  norm in + out 65,536 + q, k, v 2 B x 256 x 192 98,304 + output 2 B x 256 x 64 32,768
#                + softmax statistics 4 B x 256 x 4 heads 4,096                                      = 200,704
#     its q/k/v gradients                                                                            =  98,304
#     static     a static input and output of hidden states 2 x 2 B x 256 x 64                       =  65,536
#     mask       the attention layer's boolean causal mask [1, 1, 256, 256] (no mask for a Mamba layer) =  65,536

HYB = dict(num_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
           hybrid_layer_pattern="M*M-", mamba_num_heads=8, mamba_head_dim=16, mamba_num_groups=2, mamba_state_dim=8,
           activation_func="squared_relu", gated_linear_unit=False, position_embedding_type="none")
MAMBA, MAMBA_WORK, HATTN, HQKV, HSTATIC, HMASK = 415_744, 528_384, 200_704, 98_304, 2 * 2 * 256 * 64, 256 * 256


def hyb(training=None, parallelism=None, model=None):
    return estimate(make_config({**HYB, **(model or {})}, parallelism, {"seq_length": 256, **(training or {})}))


def test_mamba_layers_alone_captured_first():
    """cuda_graph_modules [mamba] (Megatron-Bridge's NemotronH 56B recipe), no eager step first: the two Mamba
    layers' graphs hold 2 x 415,744 = 831,488 of saved tensors, 2 static sets 131,072 and one Mamba layer's backward
    working set 528,384 at the capture; the attention and MLP layers run eagerly later. The capture
    (831,488 + 131,072 + 528,384 = 1,490,944 above the states and workspaces) is above the steady state (from the
    plain estimate: the other activations 1,556,480 - 831,488 = 724,992 and the eager transients 103,424 + 266,240;
    with the static sets 131,072: 1,225,728)."""
    base = hyb().stages[0]
    assert base.activations["attention"] == 2 * MAMBA + HATTN      # the hand figures
    s = hyb({**TE, "cuda_graph_modules": ["mamba"], "cuda_graph_warmup_steps": 0}).stages[0]
    ws = base.transient["workspaces"]
    assert s.activations_bytes == 2 * MAMBA
    assert s.transient == {"cuda_graph_static_buffers": 2 * HSTATIC, "cuda_graph_capture_working_set": MAMBA_WORK,
                           "workspaces": ws}
    assert s.allocated_bytes == _states(base) + 2 * MAMBA + 2 * HSTATIC + MAMBA_WORK + ws
    # afterwards the pool (831,488 + 528,384) is reserved beside the steady state's allocations
    steady = _states(base) + base.activations_bytes - 2 * MAMBA + sum(base.transient.values()) + 2 * HSTATIC
    assert s.outside_allocator["cuda_graph_private_pool"] == steady + 2 * MAMBA + MAMBA_WORK - s.allocated_bytes


def test_mamba_and_attention_captured_after_eager_steps():
    """cuda_graph_modules [attn, mamba] (Nemotron 3 Nano's recipes) with Megatron's 3 eager warm-up steps: the eager
    peak stays; the steady state holds 3 static sets (two Mamba layers, the attention layer; the MLP layer has no
    graph), the attention layer's mask 65,536, and the pool all captured saved tensors and the larger working set,
    max(528,384, 98,304): beyond the eager peak 3 x 65,536 + 65,536 + 528,384 = 790,528."""
    base = hyb().stages[0]
    s = hyb({**TE, "cuda_graph_modules": ["attn", "mamba"]}).stages[0]
    assert s.allocated_bytes == base.allocated_bytes and s.transient == base.transient
    assert s.outside_allocator["cuda_graph_private_pool"] == 3 * HSTATIC + HMASK + MAMBA_WORK == 790_528
    assert s.device_bytes == base.device_bytes + 790_528
    # attn alone: the attention layer's graph only (MambaLayer needs mamba): 65,536 + 65,536 + 98,304
    s = hyb({**TE, "cuda_graph_modules": ["attn"]}).stages[0]
    assert s.outside_allocator["cuda_graph_private_pool"] == HSTATIC + HMASK + HQKV
    # No modules: every layer whole. The MLP layer keeps its norm's input and output 65,536, fc1 output
    # 2 B x 256 x 128 = 65,536 and squared-ReLU output 65,536: 196,608, so the graphs hold 2 x 415,744 + 200,704
    # + 196,608 = 1,228,800, with 4 static sets 262,144, the attention layer's mask 65,536 and the largest
    # working set, the Mamba layer's (the MLP
    # layer's is 2 B x 256 x 128 + 2 x 2 B x 256 x 64 = 131,072). That capture (2,019,328 above the states and
    # workspaces) passes the eager peak, which adds only the output chunk and the eager transients to the same
    # saved tensors.
    s = hyb(TE).stages[0]
    ws = base.transient["workspaces"]
    assert s.allocated_bytes == _states(base) + 1_228_800 + 4 * HSTATIC + HMASK + MAMBA_WORK + ws \
        > base.allocated_bytes


def test_mamba_attention_and_router_captured_first():
    """Nemotron 3 Nano on B200 captures attn, mamba and moe_router. Pattern M*E, 4 experts of 64, top-2, softmax
    after top-k, alltoall, no shared expert: the MoE layer's graph holds its pre-MLP norm's input and output
    2 x 2 B x 256 x 64 = 65,536 and the router's top-k indices 8 B x 256 x 2 = 4,096 and softmax output
    4 B x 256 x 2 = 2,048 (71,680); the Mamba and attention layers' graphs 415,744 + 200,704. At the capture:
    688,128 + 3 static sets 196,608 + the attention layer's mask 65,536 + the Mamba working set 528,384."""
    model = dict(num_layers=3, hybrid_layer_pattern="M*E", num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=64,
                 moe_token_dispatcher_type="alltoall")
    s = hyb({**TE, "cuda_graph_modules": ["attn", "mamba", "moe_router"], "cuda_graph_warmup_steps": 0},
            model=model).stages[0]
    assert s.activations_bytes == MAMBA + HATTN + 71_680
    assert (s.transient["cuda_graph_static_buffers"], s.transient["cuda_graph_capture_working_set"]) \
        == (3 * HSTATIC + HMASK, MAMBA_WORK)
    # without moe_router the MoE layer has no graph: 2 static sets and the mask beyond the eager peak
    s = hyb({**TE, "cuda_graph_modules": ["attn", "mamba"]}, model=model).stages[0]
    assert s.outside_allocator["cuda_graph_private_pool"] == 2 * HSTATIC + HMASK + MAMBA_WORK


def test_mamba_graphs_of_the_micro_batches_in_flight():
    """PP 2, pattern M*|M-: stage 0 holds the Mamba and attention layers for 2 micro-batches in flight, one graph
    each (Megatron-LM _get_sample_arguments: a static input per layer and micro-batch until its backward is done):
    at the capture 2 x (415,744 + 200,704) = 1,232,896 saved, 4 static sets 262,144 and the attention layer's 2
    masks 131,072, the Mamba working set."""
    s = hyb({**TE, "cuda_graph_modules": ["attn", "mamba"], "cuda_graph_warmup_steps": 0, "world_size": 2},
            {"pipeline_model_parallel_size": 2}, {"hybrid_layer_pattern": "M*|M-"}).stages[0]
    assert s.activations_bytes == 2 * (MAMBA + HATTN)
    assert (s.transient["cuda_graph_static_buffers"], s.transient["cuda_graph_capture_working_set"]) \
        == (4 * HSTATIC + 2 * HMASK, MAMBA_WORK)


def test_hybrid_cuda_graph_rules():
    """Refused with the reason: the whole-iteration graph of a hybrid model, mamba without Mamba layers, and any
    capture of a gated delta net layer (whole, or with attn); capturing only the Mamba layers of a hybrid with gated
    delta net layers is modelled."""
    with pytest.raises(ConfigError, match="whole-iteration CUDA graph is not modelled for hybrid"):
        hyb({"cuda_graph_impl": "full_iteration"})
    with pytest.raises(ConfigError, match="mamba captures Mamba layers and applies only"):
        est({**TE, "cuda_graph_modules": ["attn", "mamba"]})
    gdn = {"num_layers": 2, "hybrid_layer_pattern": "MG", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
           "linear_key_head_dim": 16, "linear_value_head_dim": 8}
    for mods in (["attn", "mamba"], None):
        with pytest.raises(ConfigError, match="gated delta net layers"):
            hyb({**TE, "cuda_graph_modules": mods}, model=gdn)
    s = hyb({**TE, "cuda_graph_modules": ["mamba"]}, model=gdn).stages[0]
    assert s.outside_allocator["cuda_graph_private_pool"] == HSTATIC + MAMBA_WORK
    with pytest.raises(ConfigError, match="gated delta net layers"):
        est(TE, model={"experimental_attention_variant": "gdn", "linear_attention_freq": 2, "kv_channels": 128,
                       "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
                       "linear_value_head_dim": 8})


def test_megatron_lm_flags_capture_mamba_layers():
    """--cuda-graph-modules attn mamba (Megatron-LM arguments.py) reaches the same estimate as the schema fields:
    beyond the eager peak, 3 static sets, the attention layer's mask and the Mamba working set,
    3 x 65,536 + 65,536 + 528,384 = 790,528."""
    from estimator.formats.megatron_args import read_megatron_args
    imp = read_megatron_args("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 256 "
                             "--seq-length 256 --hybrid-layer-pattern M*M- --mamba-num-heads 8 --mamba-head-dim 16 "
                             "--mamba-num-groups 2 --mamba-state-dim 8 --bf16 --cuda-graph-impl transformer_engine "
                             "--cuda-graph-modules attn mamba", world_size=1)
    assert imp.config["training"]["cuda_graph_modules"] == ["attn", "mamba"]
    assert estimate(imp.config).stages[0].outside_allocator == {"cuda_graph_private_pool": 790_528}
