"""What is in the peak, by module (estimator/memory/breakdown.py): hand-checked rows, and rows that add up exactly to
the estimate's peak for every stage of every preset.

The dense case uses the small GPT model of tests/memory/test_memory.py on one GPU: L=4, h=1024, a=8 heads of 128
(MHA), GeLU MLP f=4096, untied vocabulary V=32000, s=2048, b=1, one micro-batch, bf16, flash attention,
Adam with the distributed optimizer over 1 rank. T = 2048 tokens. By hand, in bytes:

- parameters: 4 layers x 12,584,960 + embedding 32,768,000 + output layer 32,768,000 + final norm 1,024
  = 115,876,864; weights 2 B each = 231,753,728, fp32 gradients 4 B = 463,507,456, optimizer 12 B
  (fp32 master + two moments) = 1,390,522,368;
- per layer and token: the two norms keep input and output, 2 x (2h + 2h) = 8h = 8,192 B; attention without
  its norm q, k, v 6h + output 2h + fp32 log-sum-exp 4a = 8,224 B; the MLP without its norm fc1 output 2f +
  activation output 2f = 16,384 B. Times T and 4 layers: norms 67,108,864, attention 67,371,008,
  dense MLP 134,217,728 (together 4 x 67,174,400, test_memory's hand figure);
- output layer and loss: final norm input and output 4 T h = 8,388,608 plus the fp32 logits the unfused
  loss keeps, 4 T V = 262,144,000: 270,532,608;
- GEMM workspaces: 2 PyTorch cuBLAS workspaces of 32 MiB + Transformer Engine's 32 MiB + 1 KiB = 100,664,320.
"""

from __future__ import annotations

import pytest

from estimator import estimate, list_presets, load_preset
from estimator.memory.breakdown import breakdown, format_breakdown, view
from tests.conftest import make_config

MODEL = dict(num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def est(parallelism=None, training=None, model=None, precision=None):
    tr = {"seq_length": 2048, "world_size": 1, "micro_batch_size": 1, "global_batch_size": 1}
    tr.update(training or {})
    return estimate(make_config({**MODEL, **(model or {})}, parallelism, tr, precision))


def rows(e, stage=0) -> dict:
    return {r["key"]: r["bytes"] for r in breakdown(e)[stage]["rows"]}


def test_dense_rows_by_hand():
    got = rows(est())
    assert got["weights"] == 231_753_728
    assert got["gradients"] == 463_507_456
    assert got["optimizer"] == 1_390_522_368
    assert got["norms"] == 67_108_864
    assert got["attention"] == 67_371_008
    assert got["dense_mlp"] == 134_217_728
    assert got["output"] == 270_532_608
    assert got["workspaces"] == 100_664_320
    assert "embedding" not in got and "moe_experts" not in got      # no dropout mask; no MoE layers


def test_rows_add_up_to_the_peak_and_are_sorted_with_shares():
    e = est()
    b = breakdown(e)[0]
    assert sum(r["bytes"] for r in b["rows"]) == e.stages[0].allocated_bytes == b["total_bytes"]
    assert [r["bytes"] for r in b["rows"]] == sorted((r["bytes"] for r in b["rows"]), reverse=True)
    assert sum(r["share"] for r in b["rows"]) == pytest.approx(1.0)
    assert b["rows"][0]["key"] == "optimizer"       # 1.39 GB of 2.7 GB: the largest part


def test_two_micro_batches_in_flight_count_each_layer_twice():
    """PP 2, 4 micro-batches: stage 0 holds min(p - 0, m) = 2 micro-batches of its 2 layers, so its attention
    row is 2 x 2 x 8,224 x 2048 = 67,371,008 (the four-layer single-GPU figure again)."""
    e = est({"pipeline_model_parallel_size": 2}, {"world_size": 2, "global_batch_size": 4})
    assert rows(e)["attention"] == 67_371_008


def test_moe_router_and_shared_expert_by_hand():
    """Layers 1-3 MoE (8 experts, top 2, expert width 1024, shared expert 1024, GeLU), one micro-batch of
    T = 2048 tokens: the router with Megatron's defaults (softmax after top-k, no aux loss; moe_utils.py
    topk_routing_with_score_function) keeps topk's int64 indices 8 T k and the fp32 softmax of the k selected
    logits 4 T k: 12 x 2048 x 2 = 49,152 B per layer, x 3 = 147,456;
    shared expert fc1 output 2 T fs + activation output 2 T fs = 8,388,608 per layer, x 3 = 25,165,824; the
    dense layer's MLP as above, 33,554,432."""
    e = est(model=dict(num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=1024,
                       moe_shared_expert_intermediate_size=1024, moe_layer_freq=[0, 1, 1, 1]))
    got = rows(e)
    assert got["router"] == 147_456
    assert got["shared_experts"] == 25_165_824
    assert got["dense_mlp"] == 33_554_432
    assert got["norms"] == 67_108_864                # four layers' norms, dense or MoE alike
    assert sum(got.values()) == e.stages[0].allocated_bytes


def test_full_recompute_is_one_decoder_layer_row():
    """Full recompute, uniform, one layer per group: each layer keeps its input, 2 T h = 4,194,304 B; x 4."""
    e = est(training={"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1})
    got = rows(e)
    assert got["decoder_layers"] == 4 * 4_194_304
    assert "attention" not in got


def test_optimizer_step_peak_has_no_activations_and_names_the_step_buffers():
    """bf16 gradients: the optimizer step is the peak (4 B per parameter of fp32 gradient copies, 115,876,864
    parameters = 463,507,456 B); no activations are alive then."""
    e = est(training={"seq_length": 128, "recompute_granularity": "full"},
            precision={"accumulate_allreduce_grads_in_fp32": False})
    got = rows(e)
    assert got["optimizer_fp32_grad_copies"] == 463_507_456
    assert not {"attention", "dense_mlp", "norms", "output", "decoder_layers"} & set(got)
    assert sum(got.values()) == e.stages[0].allocated_bytes


def test_hybrid_and_feature_presets_split_by_their_modules():
    """Mamba-2 mixers (Nemotron-H), gated delta nets (Qwen3-Next), MLA (DeepSeek-V3) have rows of their own;
    activation offloading (the FSDP preset) is a negative row, and every stage still adds up to its peak."""
    keys = {name: {r["key"] for b in breakdown(estimate(load_preset(name))) for r in b["rows"]}
            for name in ("nemotron-h-56b", "qwen3-next-80b-a3b", "deepseek-v3", "llama-3-70b-fsdp")}
    assert "mamba" in keys["nemotron-h-56b"]
    assert "gdn" in keys["qwen3-next-80b-a3b"]
    assert {"mla", "router", "shared_experts", "moe_experts", "mtp"} <= keys["deepseek-v3"]
    assert "offloaded" in keys["llama-3-70b-fsdp"]


@pytest.mark.parametrize("name", list_presets())
def test_rows_add_up_to_every_stage_of_every_preset(name):
    e = estimate(load_preset(name))
    for b, s in zip(breakdown(e), e.stages):
        assert sum(r["bytes"] for r in b["rows"]) == s.allocated_bytes, (name, s.stage)
        assert all(r["bytes"] > 0 or r["key"] == "offloaded" for r in b["rows"])


def test_view_and_text_show_the_peak_stage():
    e = estimate(load_preset("tiny"))
    v = view(e)
    assert v["peak_stage"] == e.peak.stage
    text = format_breakdown(e)
    assert f"stage {e.peak.stage} (peak)" in text
    assert "GEMM workspaces" in text and "GiB" in text
    assert format_breakdown(e, "all").count("What is in the peak") == len(e.stages)
