"""Per-stage memory against hand calculations.

A small GPT-style model is used throughout: L=4 layers, h=1024, a=8 heads of 128 (MHA), GeLU MLP of
f=4096 (not gated), RMSNorm, untied embeddings, vocabulary 32000 (a multiple of 128 and of 256, so no
padding at TP 1 or 2), no biases, bf16 weights.

Parameters by hand: per layer attention 4*h^2 + h = 4,195,328, MLP 2*h*f + h = 8,389,632, so 12,584,960
per layer; embedding = output = 32000*1024 = 32,768,000; final norm 1024.
"""

from __future__ import annotations

import itertools

import pytest

from estimator import ConfigError, estimate
from estimator.memory.assemble import in_flight
from estimator.model.resolve import resolve
from estimator import load_config
from tests.conftest import make_config

H, F, V, L = 1024, 4096, 32000, 4
LAYER = 4 * H * H + H + 2 * H * F + H     # 12,584,960
EMB = V * H                               # 32,768,000
GIB = 2 ** 30

MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def est(parallelism=None, training=None, precision=None, model=None, **kw):
    tr = {"seq_length": 2048, "world_size": 1}
    tr.update(training or {})
    return estimate(make_config({**MODEL, **(model or {})}, parallelism, tr, precision), **kw)


def test_model_states_without_distributed_optimizer_are_18_bytes_per_parameter():
    """bf16 weights 2 B + fp32 grads 4 B + fp32 master 4 B + Adam 8 B = 18 B, nothing sharded."""
    s = est(training={"use_distributed_optimizer": False, "world_size": 8}).stages[0]
    n = L * LAYER + 2 * EMB + H
    assert s.parameters == n
    assert (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes) == (2 * n, 4 * n, 12 * n)


def test_distributed_optimizer_shards_over_data_times_context_parallel():
    """6 + 12/d bytes per parameter with d = DP x CP = 2 x 2 (world 4, CP 2): optimizer 12*n/4."""
    s = est(parallelism={"context_parallel_size": 2}, training={"world_size": 8}).stages[0]
    n = L * LAYER + 2 * EMB + H
    assert s.optimizer_bytes == 12 * -(-n // 8)


def test_tensor_parallel_splits_linears_but_not_norms():
    """TP 2: linear weights and the vocabulary halve, the two norms per layer (2h) and the final norm do not.
    Per layer on one rank: (4h^2 + 2hf)/2 + 2h."""
    s = est(parallelism={"tensor_model_parallel_size": 2}, training={"world_size": 2}).stages[0]
    per_layer = (4 * H * H + 2 * H * F) // 2 + 2 * H
    assert s.parameters == L * per_layer + 2 * EMB // 2 + H


def test_pipeline_stages_hold_embedding_first_and_output_last():
    """PP 2: stage 0 = 2 layers + embedding; stage 1 = 2 layers + final norm + output layer."""
    e = est(parallelism={"pipeline_model_parallel_size": 2}, training={"world_size": 2})
    assert [s.parameters for s in e.stages] == [2 * LAYER + EMB, 2 * LAYER + H + EMB]
    assert [list(map(list, s.layers)) for s in e.stages] == [[[0, 1]], [[2, 3]]]


def test_tied_embeddings_keep_a_copy_on_the_last_stage():
    """Tied embeddings with PP 2: the last stage holds a copy of the embedding as its output layer; the unique
    parameter count does not include it twice."""
    e = est(model={"untie_embeddings_and_output_weights": False}, parallelism={"pipeline_model_parallel_size": 2},
            training={"world_size": 2})
    assert [s.parameters for s in e.stages] == [2 * LAYER + EMB, 2 * LAYER + H + EMB]
    assert e.parameters.total == L * LAYER + EMB + H


def test_one_f_one_b_in_flight_microbatches():
    """1F1B: stage r holds min(p - r, m) micro-batches; p = 4."""
    cfg = make_config({**MODEL, "num_layers": 8}, {"pipeline_model_parallel_size": 4},
                      {"world_size": 4, "global_batch_size": 16})
    r = resolve(load_config(cfg))
    assert [len(in_flight(r, s)) for s in range(4)] == [4, 3, 2, 1]
    cfg["training"]["global_batch_size"] = 2   # m = 2 < p
    r = resolve(load_config(cfg))
    assert [len(in_flight(r, s)) for s in range(4)] == [2, 2, 2, 1]


def test_interleaved_in_flight_microbatches():
    """Interleaved 1F1B (Megatron's schedule): rank r runs (p - r - 1)*2 + (v - 1)*p warm-up forwards, then one
    more before its first backward. p = 4, v = 2: rank 0 -> 6 + 4 + 1 = 11, rank 3 -> 0 + 4 + 1 = 5 chunk-micro-
    batches; the first p go through chunk 0, the next p through chunk 1, then chunk 0 again."""
    cfg = make_config({**MODEL, "num_layers": 8}, {"pipeline_model_parallel_size": 4,
                      "virtual_pipeline_model_parallel_size": 2}, {"world_size": 4, "global_batch_size": 64})
    r = resolve(load_config(cfg))
    assert [len(in_flight(r, s)) for s in range(4)] == [11, 9, 7, 5]
    assert in_flight(r, 0) == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0]
    assert [list(c) for c in r.stages[0]] == [[0], [4]]
    assert [[in_flight(r, s).count(c) for c in (0, 1)] for s in range(4)] == [[7, 4], [5, 4], [4, 3], [4, 1]]


def test_deep_interleaved_pipeline_without_a_global_batch():
    """Listing every in-flight micro-batch cost O(p^2 v) (PP 512 x VPP 8 took seconds). With PP 1,024, VPP 8
    and no global batch, stage 0 holds (p - 1) * 2 + (v - 1) * p + 1 = 2046 + 7168 + 1 = 9215 chunk-micro-
    batches, the last stage (v - 1) * p + 1 = 7169."""
    cfg = make_config({**MODEL, "num_layers": 8192}, {"pipeline_model_parallel_size": 1024,
                      "virtual_pipeline_model_parallel_size": 8}, {"world_size": 1024})
    e = estimate(cfg)
    assert (e.stages[0].microbatches_in_flight, e.stages[-1].microbatches_in_flight) == (9215, 7169)


def test_dense_layer_activations_by_hand():
    """One layer, one micro-batch, s=2048, b=1, TP 1, flash attention, no dropout, bf16 (bytes per token):
    attention: norm input + norm output 4h, q k v 2*3h, output 2h, log-sum-exp 4*a  -> 12h + 4a
    GeLU MLP: norm input + output 4h, fc1 output 2f, activation output 2f            -> 4h + 4f
    total per token = 16*1024 + 32 + 4*4096 = 32,800; x 2048 tokens = 67,174,400 bytes."""
    e = est(training={"global_batch_size": 1})
    s = e.stages[0]
    assert s.activations["attention"] + s.activations["mlp"] == 4 * 67_174_400


def test_sequence_parallel_shards_norm_activations():
    """TP 2 with SP: every term divides by 2 (norm terms by SP, the others by TP): half the TP-1 layer bytes."""
    e = est(parallelism={"tensor_model_parallel_size": 2}, training={"sequence_parallel": True, "world_size": 2})
    s = e.stages[0]
    assert s.activations["attention"] + s.activations["mlp"] == 4 * 67_174_400 // 2


def test_full_recompute_keeps_only_layer_inputs():
    """Full recompute, uniform, 1 layer per group: each layer keeps its input, 2*s*h = 4 MiB. The working set
    adds one layer's full activations (67,174,400 B) minus its checkpoint while that layer is recomputed."""
    s = est(training={"recompute_granularity": "full", "recompute_method": "uniform",
                      "recompute_num_layers": 1}).stages[0]
    assert s.activations["attention"] + s.activations["mlp"] == 4 * 2 * 2048 * H


def test_block_recompute_first_n_layers_of_each_stage():
    """Block method with N = 1: the first layer of the stage keeps only its input (4 MiB), the other 3 keep all
    activations: 2*2048*1024 + 3 * 67,174,400."""
    s = est(training={"recompute_granularity": "full", "recompute_method": "block",
                      "recompute_num_layers": 1}).stages[0]
    assert s.activations["attention"] + s.activations["mlp"] == 2 * 2048 * H + 3 * 67_174_400


def test_activations_are_linear_in_sequence_with_flash_and_quadratic_unfused():
    """Flash attention: doubling s doubles the layer activations. Unfused attention adds 2*a*s^2 bytes per
    layer for the stored softmax (no attention dropout) plus K and V expanded to all heads (here MHA: 0)."""
    a = est(training={"seq_length": 1024}).stages[0]
    b = est(training={"seq_length": 2048}).stages[0]
    layer = lambda s: s.activations["attention"] + s.activations["mlp"]
    assert layer(b) == 2 * layer(a)
    u = est(training={"seq_length": 1024, "attention_backend": "unfused"}).stages[0]
    assert layer(u) - layer(a) == L * 2 * 8 * 1024 * 1024


def test_local_implementation_attention_is_unfused_whatever_the_backend():
    """Megatron-Core's own DotProductAttention (transformer_impl local) materialises the scores: the same 2*a*s^2
    bytes per layer as the unfused backend, and the scores themselves go to the global buffer (2*b*a*s^2).
    Multi-head attention with RoPE also keeps q and k as new tensors while the value, a view of the QKV output,
    keeps all of that output (estimator/model/local_attention.py): 2 x 2 B x 1,024 tokens x 8 heads x 128 = 4 MiB more
    per layer than q, k, v alone."""
    a = est(training={"seq_length": 1024}).stages[0]
    loc = est(training={"seq_length": 1024, "transformer_impl": "local"}).stages[0]
    layer = lambda s: s.activations["attention"] + s.activations["mlp"]
    assert layer(loc) - layer(a) == L * (2 * 8 * 1024 * 1024 + 2 * 2 * 1024 * 8 * 128)
    assert loc.transient["global_memory_buffer"] == 2 * 8 * 1024 * 1024


def test_assumptions_name_the_layer_implementation_in_use():
    """The assumptions say which layers the numbers assume: Transformer Engine's by default, Megatron-Core's local
    ones with transformer_impl local (which keeps no Transformer Engine workspace: 2 x 32 MiB of PyTorch's cuBLAS
    workspaces, against 2 x 32 MiB + 32 MiB + 1 KiB with Transformer Engine, estimator/memory/workspaces.py)."""
    te = est().assumptions
    loc = est(training={"transformer_impl": "local"}).assumptions
    assert any("Transformer Engine layers" in a for a in te)
    assert not any("Transformer Engine layers" in a for a in loc)
    assert any("local layers" in a and "no Transformer Engine" in a for a in loc)
    assert any("64 MiB of GEMM workspaces (PyTorch's" in a for a in loc)
    assert any("96 MiB of GEMM workspaces (Transformer Engine and PyTorch" in a for a in te)


def test_num_microbatches_override():
    e = est(parallelism={"pipeline_model_parallel_size": 2}, training={"world_size": 2}, num_microbatches=1)
    assert [s.microbatches_in_flight for s in e.stages] == [1, 1]


def test_peak_stage_and_totals_are_consistent():
    e = est(parallelism={"pipeline_model_parallel_size": 2}, training={"world_size": 2})
    for s in e.stages:
        assert s.allocated_bytes == (s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + s.activations_bytes
                                     + s.transient_bytes)
        assert s.allocated_bytes < s.reserved_bytes < s.device_bytes
    assert e.peak.device_bytes == max(s.device_bytes for s in e.stages)


def test_to_dict_contract_keys():
    d = est().to_dict()
    assert {"total", "active"} <= set(d["parameters"])
    keys = {"stage", "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
            "allocated_bytes", "reserved_bytes", "device_bytes"}
    assert keys <= set(d["stages"][0])
    assert {"stage", "allocated_bytes", "device_bytes"} <= set(d["peak"])
    import json
    assert json.loads(json.dumps(d)) == d
    assert d["assumptions"] and all(isinstance(a, str) for a in d["assumptions"])
    assert d["config"]["model"]["hidden_size"] == H


def test_moe_expert_states_shard_over_expert_data_parallel():
    """MoE with 8 experts, EP 4, world 8, TP 1, PP 1: each rank holds 2 experts; expert-data-parallel size is
    8 / (etp 1 * ep 4 * pp 1) = 2, so expert optimizer states are 12 B / 2 per parameter, dense ones 12 B / 8."""
    model = {**MODEL, "num_experts": 8, "moe_router_topk": 2}
    s = est(model=model, parallelism={"expert_model_parallel_size": 4}, training={"world_size": 8}).stages[0]
    expert = 2 * H * F               # one GeLU expert: fc1 h*f + fc2 f*h
    assert s.expert_parameters == L * 2 * expert
    dense = L * (4 * H * H + H + 8 * H + H) + 2 * EMB + H   # attention, router, pre-MLP norm
    assert s.optimizer_bytes == 12 * -(-dense // 8) + 12 * -(-(L * 2 * expert) // 2)


def test_invalid_configuration_lists_every_problem():
    with pytest.raises(ConfigError) as exc:
        est(parallelism={"tensor_model_parallel_size": 3, "pipeline_model_parallel_size": 3},
            training={"world_size": 8, "sequence_parallel": True})
    fields = {p.field for p in exc.value.problems}
    assert {"model.num_attention_heads", "training.world_size", "model.num_layers"} <= fields


def test_moe_routing_weights_applied_unfused_keep_one_more_activation():
    """Megatron-Core applies the routing probabilities in the experts (moe/experts.py): fused with SwiGLU
    (weighted_bias_swiglu_impl saves only its input), otherwise act(x) * probs, which keeps act(x) too.
    MoE layer, s 256, b 1, top-2: R = 512 routed rows; expert width fm 128, h 256, bf16, no dropout, by hand
    from what the backward reads:
      pre-MLP norm input and output (the router's gating linear saves the output): 2 * 2*256*256
      router, Megatron's default softmax after top-k without aux loss (moe_utils.py
      topk_routing_with_score_function): topk's int64 indices 8*256*2 and the fp32 softmax of the 2 selected
      logits 4*256*2; the logits themselves are not saved (router_gating_linear saves its input)
      the permuted tokens fc1 saves as its input: 2*R*h
      fc1 output (saved by the activation): 2*R*fm*up; fc2 input (the weighted activation output): 2*R*fm
      gelu only: the unweighted act(x) that act(x) * probs keeps for the probabilities' gradient: 2*R*fm
    and nothing of the experts' output (fc2's output is concatenated, re-sorted and scattered back by
    moe_utils.unpermute, whose scatter_add_ keeps only its indices)."""
    from estimator.memory.activations import layer_activations
    from estimator.model.layers import LayerKind
    moe_layer = LayerKind("attention", "moe")
    moe = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000, "num_experts": 4,
           "moe_router_topk": 2, "moe_ffn_hidden_size": 128}
    R, fm, h = 512, 128, 256
    base = 2 * 2 * 256 * h + (8 + 4) * 256 * 2 + 2 * R * h + 2 * R * fm
    gelu = resolve(load_config(make_config({**moe, "activation_func": "gelu", "gated_linear_unit": False},
                                           training={"seq_length": 256})))
    swiglu = resolve(load_config(make_config({**moe, "activation_func": "swiglu", "gated_linear_unit": True},
                                             training={"seq_length": 256})))
    assert layer_activations(gelu, moe_layer).mlp == base + 2 * R * fm + 2 * R * fm
    assert layer_activations(swiglu, moe_layer).mlp == base + 2 * R * 2 * fm


def test_moe_backward_working_set_by_hand():
    """The MoE layer's backward working set above what it keeps (estimator/model/layers/moe.py docstring), s 256,
    b 1, h 256, 4 experts of fm 128 (gelu, up = 1), top-2: R = 512 rows, bf16, one GPU.
    All-to-all: unpermute's backward gathers the expert-output gradient (R x h) and the backward of
    sort_chunks_by_idxs over the 4 local experts cats it into a second R x h tensor while the first is alive:
    2 * 2*R*h = 524,288 B, above fc1's backward (its output gradient R x fm and data gradient R x h:
    2*R*(fm + h) = 393,216 B). All-gather on one GPU: nothing is gathered (Tg = 256 tokens), the rows' gradient
    beside the layer output's: 2*h*(R + 256) = 393,216 B, equal to fc1's. With fm 1024 fc1 wins:
    2*R*(1024 + 256) = 1,310,720 B."""
    from estimator.memory.activations import layer_activations
    from estimator.model.layers import LayerKind
    moe_layer = LayerKind("attention", "moe")
    moe = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000, "num_experts": 4,
           "moe_router_topk": 2, "moe_ffn_hidden_size": 128, "activation_func": "gelu", "gated_linear_unit": False}

    def work(**m):
        r = resolve(load_config(make_config({**moe, **m}, training={"seq_length": 256})))
        return layer_activations(r, moe_layer).backward_peak

    assert work(moe_token_dispatcher_type="alltoall") == 524_288
    assert work(moe_token_dispatcher_type="allgather") == 393_216
    assert work(moe_token_dispatcher_type="alltoall", moe_ffn_hidden_size=1024) == 1_310_720


def test_moe_backward_working_set_follows_expert_parallelism_in_any_order():
    """The all-gather dispatcher's backward holds the gradient of the tokens gathered from the expert-parallel
    ranks beside the rows' (estimator/model/layers/moe.py), so the working set grows with EP, and an estimate must not
    reuse another EP's layer activations. 4 layers, h 1024, s 1024, b 1, 8 experts of fm 256 (gelu), top-1,
    bf16, PP 2 x DP 8 (16 GPUs), no TP; the first stage has no loss, so its backward_working_set is the MoE
    layer's (above flash attention's backward). Balanced rows R = 1024 tokens x top-1 = 1024 at any EP:
      EP 1: gathered Tg = 1024 tokens: 2 B x h x (R + Tg) = 2*1024*2048 = 4,194,304 B
            (fc1's backward, 2 B x R x (fm + h) = 2*1024*1280 = 2,621,440 B, is smaller)
      EP 8: gathered Tg = 1024 x 8 = 8192 tokens: 2*1024*(1024 + 8192) = 18,874,368 B.
    Asked for in the order 1, 8, 1: each answer is its own EP's."""
    model = {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "vocab_size": 1024, "num_experts": 8,
             "moe_router_topk": 1, "moe_ffn_hidden_size": 256, "activation_func": "gelu", "gated_linear_unit": False,
             "moe_token_dispatcher_type": "allgather"}

    def work(ep):
        cfg = make_config(model, {"expert_model_parallel_size": ep, "pipeline_model_parallel_size": 2},
                          {"seq_length": 1024, "world_size": 16})
        return estimate(cfg).stages[0].transient["backward_working_set"]

    assert [work(1), work(8), work(1)] == [4_194_304, 18_874_368, 4_194_304]


def test_qk_layernorm_keeps_input_copies_and_outputs_of_q_and_k():
    """Per-head q/k norms (Transformer Engine's norm op: input_.contiguous() saved, new output, rstd per row):
    s 2048, 8 query + 8 key heads of 128, RMSNorm, bf16: 2*2*2048*16*128 + 4*2048*16 = 16,908,288 B per layer."""
    a = est(training={"global_batch_size": 1}).stages[0]
    q = est(training={"global_batch_size": 1}, model={"qk_layernorm": True}).stages[0]
    assert q.activations["attention"] - a.activations["attention"] == L * 16_908_288


def test_layout_with_a_standalone_mtp_stage_by_hand():
    """Layout ``Ett|tt|m|L`` on PP 2 (VPP 2), the model above with 1 MTP layer, s = 2048, b = 1, m = 4 (global
    batch 4, DP 1), TP 1, flash attention, no dropout, no fused cross-entropy.

    Parameters. Stage 0: chunk (0, 0) = embedding + layers 0-1; chunk (0, 1) = the MTP layer (one decoder layer
    + eh_proj 2h^2 + enorm, hnorm, final norm 3h) and its own embedding copy (a separate GPTModel chunk without
    pre_process builds one): 3 * 12,584,960 + 2 * 32,768,000 + 2,097,152 + 3,072 = 105,391,104.
    Stage 1: layers 2-3 + final norm + output layer: 2 * 12,584,960 + 1,024 + 32,768,000 = 57,938,944.

    Activations of one micro-batch (bytes): a decoder layer 67,174,400 (test above); the MTP chunk: enorm/hnorm
    inputs and outputs 4*2*s*h = 16,777,216, eh_proj input 8,388,608, its layer 67,174,400, final norm 8,388,608
    -> 100,728,832; the loss chunk: final norm 8,388,608 + logits in bf16 and fp32 6*s*V = 393,216,000, plus the
    MTP head's logits 393,216,000 -> 794,820,608.

    In flight (group N = p = 2; tests/memory/test_schedule.py works the mixes): rank 0 holds (3, 2) or (4, 1) of (chunk
    0, chunk 1): 4 * 134,348,800 + 100,728,832 = 638,124,032 is the heavier; rank 1 holds (2, 1) or (3, 0):
    2 * 134,348,800 + 532,676,608 = 801,374,208."""
    e = est(model={"mtp_num_layers": 1}, training={"world_size": 2, "global_batch_size": 4},
            parallelism={"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Ett|tt|m|L"})
    assert [s.parameters for s in e.stages] == [105_391_104, 57_938_944]
    assert [s.activations_bytes for s in e.stages] == [638_124_032, 801_374_208]
    assert [[c.microbatches_in_flight for c in s.chunks] for s in e.stages] == [[4, 1], [2, 1]]
    assert e.stages[0].activations["mtp"] == 100_728_832 and e.stages[1].activations["output"] == 532_676_608
    d = e.stages[0].to_dict()["chunks"]
    assert d == [{"layers": [0, 1], "embedding": True, "output_layer": False, "mtp_layers": 0,
                  "microbatches_in_flight": 4},
                 {"layers": [], "embedding": False, "output_layer": False, "mtp_layers": 1,
                  "microbatches_in_flight": 1}]


def test_mtp_hidden_state_mixing_keeps_its_draw_per_depth_after_the_first():
    """mtp_hsm with 3 MTP layers, s 2048, b 1, TP 1, PP 1 (one micro-batch in flight): Megatron-LM @ d98e8a64 :
    multi_token_prediction.py _mix_hidden_state_history, at MTP depths 2 and 3 (depth 1 has nothing to mix):
    torch.gather keeps its index, the clamped int64 draw, 8 B x 2048 tokens = 16,384 B, and torch.where its bool
    condition, 1 B x 2048 = 2,048 B: 18,432 B a depth, 36,864 B for the two. stack, permute/reshape and roll save
    nothing; the mixed state the MTP layer's hnorm saves replaces the previous depth's output (same size). Under
    sequence parallelism at TP 2 the MTP block holds 1,024 tokens: 18,432 B for the two depths."""
    def mtp_act(hsm, tp=1):
        e = est(model={"mtp_num_layers": 3, "mtp_hsm": hsm}, parallelism={"tensor_model_parallel_size": tp},
                training={"world_size": tp, "sequence_parallel": tp > 1})
        return e.stages[-1].activations["mtp"]
    assert mtp_act(True) - mtp_act(False) == 2 * (8 + 1) * 2048 == 36_864
    assert mtp_act(True, 2) - mtp_act(False, 2) == 2 * 9 * 1024 == 18_432
    with pytest.raises(ConfigError, match=r"mtp_hsm.*needs mtp_num_layers >= 2"):
        est(model={"mtp_num_layers": 1, "mtp_hsm": True})


def test_mtp_on_the_last_stage_keeps_an_embedding_copy_even_when_tied():
    """Tied embeddings, PP 2, 1 MTP layer on the last stage: GPTModel builds the MTP's embedding (mtp_process)
    and the output layer's own weight (not pre_process), two vocabulary matrices: 2 * LAYER + h + 2 * EMB + the
    MTP layer (LAYER + 2h^2 + 3h)."""
    e = est(model={"mtp_num_layers": 1, "untie_embeddings_and_output_weights": False},
            parallelism={"pipeline_model_parallel_size": 2}, training={"world_size": 2})
    assert e.stages[1].parameters == 2 * LAYER + H + 2 * EMB + LAYER + 2 * H * H + 3 * H


def test_an_empty_recompute_modules_list_recomputes_nothing():
    """Megatron-Core replaces only a null recompute_modules by [core_attn] (Megatron-LM @ d98e8a64 :
    megatron/core/transformer/transformer_config.py __post_init__); a Megatron-Bridge recipe may set [] and then
    selective recompute recomputes no module: every stage keeps what it keeps without recompute. With unfused
    attention core_attn recompute drops at least the softmax output of each of the L = 2 layers for the one
    micro-batch in flight (PP 1): b x heads x s x s x 2 bytes = 1 x 4 x 256 x 256 x 2 = 524,288 bytes a layer."""
    model = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1024,
             "max_position_embeddings": 256}
    def peak(**tr):
        cfg = make_config(model, {}, {"seq_length": 256, "micro_batch_size": 1, "global_batch_size": 4,
                                      "attention_backend": "unfused", **tr})
        return [s.allocated_bytes for s in estimate(cfg).stages]

    none = peak()
    empty = peak(recompute_granularity="selective", recompute_modules=[])
    core = peak(recompute_granularity="selective", recompute_modules=["core_attn"])
    default = peak(recompute_granularity="selective")
    assert empty == none
    assert default == core
    assert empty[0] - core[0] >= 2 * 524_288


def test_distribute_saved_activations_keeps_one_tp_share_of_each_checkpoint():
    """--distribute-saved-activations (Megatron-LM @ d98e8a64 : megatron/core/tensor_parallel/random.py
    CheckpointFunction): a full-recompute checkpoint keeps numel // TP elements of its layer input and gathers the
    whole input back before recomputing. 4 layers, h 256, s 256, b 1, TP 4 without sequence parallelism, uniform
    groups of 1: each layer input is 1 x 256 x 256 x 2 = 131,072 bytes, kept as 32,768. The activations held drop
    by 4 x (131,072 - 32,768) = 393,216 bytes; the peak (while the last layer's group is recomputed, the three
    other checkpoints held, its own gathered back to full size) by 3 x 98,304 = 294,912 bytes. Refused with
    sequence parallelism, at TP 1 and without full recompute, naming the field."""
    model = {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1024,
             "max_position_embeddings": 256}
    def stage(**tr):
        cfg = make_config(model, {"tensor_model_parallel_size": 4}, {
            "world_size": 4, "seq_length": 256, "micro_batch_size": 1, "global_batch_size": 4,
            "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1, **tr})
        (s,) = estimate(cfg).stages
        return s

    kept, split = stage(), stage(distribute_saved_activations=True)
    assert kept.activations_bytes - split.activations_bytes == 393_216
    assert kept.allocated_bytes - split.allocated_bytes == 294_912
    for bad in ({"sequence_parallel": True}, {"recompute_granularity": "selective", "recompute_method": None,
                                              "recompute_num_layers": None}):
        with pytest.raises(ConfigError, match="training.distribute_saved_activations"):
            stage(distribute_saved_activations=True, **bad)
    with pytest.raises(ConfigError, match="needs tensor_model_parallel_size > 1"):
        estimate(make_config(model, {}, {"distribute_saved_activations": True, "recompute_granularity": "full",
                                         "recompute_method": "uniform", "recompute_num_layers": 1}))


@pytest.mark.parametrize("preset,par,tr", [
    # DeepSeek-V3 (3 dense layers, then MoE; MTP on the last stage), 1F1B over 16 stages (1 layer, then 4 each: stage 1
    # holds 2 dense and 2 MoE layers): full recompute in uniform groups and in blocks reads each chunk's layer order
    ("deepseek-v3", {"pipeline_model_parallel_size": 16, "pipeline_model_parallel_layout": None,
                     "num_layers_in_first_pipeline_stage": 1, "expert_model_parallel_size": 8},
     {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 2,
      "recompute_modules": None}),
    ("deepseek-v3", {"pipeline_model_parallel_size": 16, "pipeline_model_parallel_layout": None,
                     "num_layers_in_first_pipeline_stage": 1, "expert_model_parallel_size": 8},
     {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 3,
      "recompute_modules": None}),
    ("deepseek-v3", {"pipeline_model_parallel_size": 16, "pipeline_model_parallel_layout": None,
                     "num_layers_in_first_pipeline_stage": 1, "expert_model_parallel_size": 8}, {}),
    # Llama 3 70B over 8 stages with 2 micro-batches: stages 0-6 hold 2 each, a tie the first stage wins
    ("llama-3-70b", {"pipeline_model_parallel_size": 8, "virtual_pipeline_model_parallel_size": None},
     {"global_batch_size": 2, "world_size": 64}),
    ("llama-3-70b", {"pipeline_model_parallel_size": 8, "virtual_pipeline_model_parallel_size": None},
     {"world_size": 64}),
    ("qwen3-30b-a3b", {"pipeline_model_parallel_size": 4}, {"world_size": 16,
     "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1,
                                                       "recompute_modules": None}),
])
def test_peak_memory_is_the_peak_of_stage_memory(preset, par, tr):
    """peak_memory (the layout search's call) leaves out stages that cannot hold the peak: its peak and peak stage
    are stage_memory's, tie to the first stage included (regression guard for the speed-up of issue 26)."""
    from estimator.formats.presets import preset_text
    from estimator.memory.assemble import peak_memory, stage_memory
    from estimator.config import yamlio
    data = yamlio.load(preset_text(preset))
    data["parallelism"].update(par)
    data["training"].update(tr)
    r = resolve(load_config({k: {kk: vv for kk, vv in v.items() if vv is not None} for k, v in data.items()}))
    est = stage_memory(r, replay=False)
    assert r.v == 1 and r.p > 2
    assert peak_memory(r) == (est.peak, est.stages[est.peak.stage])
