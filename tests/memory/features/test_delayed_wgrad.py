"""Delayed weight gradients in the combined 1F1B step (estimator/memory/features/delayed_wgrad.py), by hand.

The small model of tests/memory/features/test_features_schedule.py (L=4, h=1024, 8 MHA heads of 128, untied, vocabulary 32000,
bf16, T = 2048 tokens), made a fine-grained SwiGLU MoE: 8 experts of width 512, top-2, expert parallelism 2
(4 local experts), the all-to-all dispatcher. Routed rows per rank R = T k = 4096, d = h = 1024, fm up = 1024.

The plain combined step's backward working set (estimator/model/layers/moe.py) is
B max(R (fm up + d), 2 R d) = 2 x max(4096 x 2048, 4096 x 2048) = 16,777,216 B, and the forward layer's
pre-dispatch part 33,669,120 B (tests/memory/features/test_features_schedule.py: attention 25,231,360, pre-MLP norm
8,388,608, router 49,152). Beside them in the plain step's peak (estimator/memory/features/schedule.py, moment 3): the
forward layer's permuted tokens waiting for the dispatch, 2 B x P x d with P = T k = 4096 rows, 8,388,608; the
backward layer's output gradient and the residual's .grad copy, 2 x 2 B x T x h = 8,388,608; the experts' output
gradient the caller holds, 2 B x P x d = 8,388,608: the plain step is 33,669,120 + 3 x 8,388,608 + 16,777,216 =
75,612,160 B.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate
from estimator.memory.activations import layer_activations
from estimator.config.load import load_config
from estimator.memory.features.delayed_wgrad import DelayWindows, kind_windows, step_extra
from estimator.memory.features.schedule import EpOverlapLayer
from estimator.formats.megatron_args import read_megatron_args
from estimator.model.resolve import resolve
from tests.conftest import make_config

H, F, V, T = 1024, 4096, 32000, 2048
MODEL = dict(num_layers=4, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)
FINE = {**MODEL, "num_experts": 8, "moe_router_topk": 2, "activation_func": "swiglu", "gated_linear_unit": True,
        "moe_ffn_hidden_size": 512}
INTERLEAVED = {"expert_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
               "virtual_pipeline_model_parallel_size": 2}
OVERLAP = {"world_size": 4, "overlap_moe_expert_parallel_comm": True}
WORK = 16_777_216
PRE = 33_669_120
ROWS = 8_388_608            # 2 B x 4096 x 1024: the permuted tokens, X, the held gradients (2 x 2 B x T x h)
STEP = PRE + 3 * ROWS + WORK


def est(model=FINE, parallelism=INTERLEAVED, training=None, precision=None):
    tr = {"seq_length": T, **OVERLAP}
    tr.update(training or {})
    return estimate(make_config(model, parallelism, tr, precision))


def test_the_experts_kept_gradients_and_the_forward_dispatch_match_the_plain_step():
    """PP 2 x VPP 2, stage 0 peaks inside a combined step (tests/memory/features/test_features_schedule.py). Between the backward
    layer's expert backward and its backward_dw the forward layer dispatches (model_chunk_schedule_plan.py
    TransformerLayerSchedulePlan.run). The experts' output gradient X is gone by then (its caller let it go when
    the MLP backward returned), and beside the held set, the pre-dispatch part, the waiting tokens and the held
    gradients there are:

        fc1's and fc2's kept output gradients  2 B x R x (fm up + d) = 2 x 4096 x 2048 = 16,777,216
        the experts' input gradient            2 B x P x d           = 2 x 4096 x 1024 =  8,388,608
        fc1's output, freed by the SwiGLU backward                                   = -8,388,608
        the forward's all-to-all output        2 B x P x d           = 2 x 4096 x 1024 =  8,388,608
                                                                               total   25,165,824

    exactly what the plain step's peak holds there, X + the working set = 8,388,608 + 16,777,216: delaying adds
    nothing in this model (the pre-dispatch window is smaller still, test below); stage 1 still peaks at the
    loss's forward (131,072,000 B of logits)."""
    base = est().stages
    s = est(training={"delay_wgrad_compute": True}).stages
    assert base[0].transient["ep_overlap_1f1b_step"] == STEP
    assert s[0].transient["ep_overlap_1f1b_step"] == STEP
    assert "delayed_wgrad" not in s[0].transient
    assert s[0].allocated_bytes == base[0].allocated_bytes
    assert s[1].allocated_bytes == base[1].allocated_bytes and "loss_forward" in s[1].transient


def test_the_windows_of_one_moe_layer():
    """The MLP window (previous test) 16,777,216 and the dispatch's output 8,388,608. The pre-dispatch window at the
    end of the backward layer's attention backward:

        QKV's output gradient          2 B x T x 3 x 1024 = 12,582,912
        the output projection's        2 B x T x 1024     =  4,194,304
        QKV's input beyond the saved norm output (no SP)  =          0
        the layer input's gradient     2 B x T x 1024     =  4,194,304
        freed: q, k, v 12,582,912, softmax statistics 4 B x T x 8 = 65,536, router 49,152   -12,697,600
                                                                                   total   8,273,920

    step_extra over one kind with the layer's step figures and no working set: the plain step PRE + 8,388,608
    (waiting) + 2 x 8,388,608 (held gradients, X) = PRE + 25,165,824; the MLP window PRE + 8,388,608 + 8,388,608
    (dispatch output) + 8,388,608 (held gradients) + 16,777,216 = PRE + 41,943,040; the pre-dispatch window PRE +
    4,194,304 (the forward's output 2 B x T x h) + 8,388,608 + 8,273,920 = PRE + 20,856,832: 16,777,216 more."""
    r = resolve(load_config(make_config(FINE, INTERLEAVED, {"seq_length": T, **OVERLAP,
                                                             "delay_wgrad_compute": True})))
    kind = r.kinds[0]
    w = kind_windows(r, kind, layer_activations(r, kind, parts=True).parts)
    assert w == DelayWindows(mlp=16_777_216, dispatch=8_388_608, pre=8_273_920)
    layer = EpOverlapLayer(pre=PRE, waiting=ROWS, output=4_194_304, held_grads=ROWS, expert_grad=ROWS)
    assert step_extra([(w, layer)], 0) == 16_777_216
    assert step_extra([(w, layer)], WORK) == 0          # the working set of this model hides both windows


def test_without_gradient_accumulation_fusion_the_grouped_gemms_keep_their_gradients():
    """Transformer Engine's GroupedLinear allocates its packed [experts, out, in] weight gradient in the backward
    and keeps it in the store until backward_dw; autograd copies the not-yet-computed tensors into each expert
    weight's .grad meanwhile. 4 local experts, fc1 1024 x 1024 and fc2 1024 x 512 elements, 2 B each, twice:
    2 x 2 x 4 x (1,048,576 + 524,288) = 25,165,824 more in the MLP window: 25,165,824 + 25,165,824 = 50,331,648
    beside the pre-dispatch part, the waiting tokens and the held gradients. The plain working set gains the
    largest weight gradient (QKV, 2 B x 3072 x 1024 = 6,291,456): X + working set = 8,388,608 + 23,068,672 =
    31,457,280. The step grows by 50,331,648 - 31,457,280 = 18,874,368."""
    tr = {"gradient_accumulation_fusion": False}
    base = est(training=tr).stages[0]
    s = est(training={**tr, "delay_wgrad_compute": True}).stages[0]
    assert base.transient["ep_overlap_1f1b_step"] == STEP + 6_291_456
    assert s.transient["delayed_wgrad"] == 18_874_368
    assert s.allocated_bytes - base.allocated_bytes == 18_874_368


def test_without_pipelining_the_loss_stays_the_peak():
    """One stage (EP 2, world 2): the backward micro-batch's loss chunk is gone inside a combined step, and the
    delayed GEMMs of the chunk's first layer run before the forward's loss (TransformerModelChunkSchedulePlan
    .run: backward_dw, then post_process.forward), so the loss's forward stays the peak and nothing changes."""
    par, tr = {"expert_model_parallel_size": 2}, {"world_size": 2}
    base = est(parallelism=par, training=tr).stages[0]
    s = est(parallelism=par, training={**tr, "delay_wgrad_compute": True}).stages[0]
    assert s.allocated_bytes == base.allocated_bytes and "loss_forward" in s.transient
    assert "delayed_wgrad" not in s.transient


def test_the_windows_of_a_dense_layer_under_sequence_parallelism():
    """TP 2 with sequence parallelism, the GeLU dense model (f = 4096): T = 2048, Tn = 1024, heads per rank 4.

    Pre-dispatch window: QKV's output gradient 2 B x T x 3072 / 2 = 6,291,456; the output projection's, all-gathered
    2 B x T x 1024 = 4,194,304; QKV's all-gathered input 4,194,304 beyond the saved norm output 2 B x Tn x 1024 =
    2,097,152; the input gradient 2 B x Tn x 1024 = 2,097,152; freed q, k, v 2 B x T x 12 x 128 = 6,291,456 and
    the statistics 4 B x T x 4 = 32,768: 6,291,456 + 4,194,304 + 2,097,152 + 2,097,152 - 6,324,224 = 8,355,840.
    MLP window: fc1's output gradient 2 B x T x 2048 = 8,388,608, fc2's (gathered) 4,194,304, fc1's gathered input
    beyond the saved norm output 2,097,152, the input gradient 2,097,152, less fc1's output 8,388,608: 8,388,608."""
    r = resolve(load_config(make_config(MODEL, {"tensor_model_parallel_size": 2},
                                        {"seq_length": T, "world_size": 2, "sequence_parallel": True})))
    kind = r.kinds[0]
    w = kind_windows(r, kind, layer_activations(r, kind, parts=True).parts)
    assert w == DelayWindows(mlp=8_388_608, dispatch=0, pre=8_355_840)


def test_rules_and_refusals():
    """Megatron-Core asserts overlap_moe_expert_parallel_comm (transformer_config.py) and Megatron-LM Transformer
    Engine (arguments.py); combinations the model leaves out are refused with the reason."""
    with pytest.raises(ConfigError, match="delay_wgrad_compute.*needs overlap_moe_expert_parallel_comm"):
        est(training={"overlap_moe_expert_parallel_comm": False, "delay_wgrad_compute": True})
    with pytest.raises(UnsupportedError, match="delay_wgrad_compute with FP8"):
        est(training={"delay_wgrad_compute": True}, precision={"fp8": True})
    with pytest.raises(UnsupportedError, match="delay_wgrad_compute with MTP"):
        est(model={**FINE, "mtp_num_layers": 1}, training={"delay_wgrad_compute": True})
    mlp = {"delay_wgrad_compute": True, "recompute_granularity": "selective", "recompute_modules": ["mlp"]}
    with pytest.raises(UnsupportedError, match="recompute of mlp"):
        est(model={**FINE, "moe_layer_freq": [0, 1, 1, 1]}, training=mlp)
    est(training=mlp)       # without a dense layer the dense MLP's recompute changes nothing


def test_the_megatron_flag_is_read():
    cmd = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings "
           "1024 --vocab-size 1000 --micro-batch-size 1 --bf16 --num-experts 8 --moe-router-topk 2 "
           "--expert-model-parallel-size 2 --overlap-moe-expert-parallel-comm --delay-wgrad-compute")
    assert read_megatron_args(cmd, world_size=8).config["training"]["delay_wgrad_compute"] is True
    with pytest.raises(ConfigError, match="needs overlap_moe_expert_parallel_comm"):
        estimate(read_megatron_args(cmd.replace(" --overlap-moe-expert-parallel-comm", ""), world_size=8).config)
