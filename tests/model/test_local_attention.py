"""Megatron-Core's own unfused DotProductAttention (estimator/model/local_attention.py), by hand.

Model: 2 layers, h 256, 4 heads of 64, 2 query groups (GQA), s 128, b 1, bf16 (B = 2), local implementation,
PyTorch's softmax (--no-masked-softmax-fusion). One unit B*T*d = 2 x 128 x 64 = 16,384 B; one score tensor
U = 2 x b 1 x 4 heads x 128 x 128 = 131,072 B; one s x s boolean mask 16,384 B.
"""

from __future__ import annotations

from estimator import estimate
from estimator.memory.activations import layer_activations
from estimator.config.load import load_config
from estimator.model.local_attention import chunk_mask_bytes, local_core_attention, torch_softmax
from estimator.model.resolve import resolve
from tests.conftest import make_config

GQA = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "num_query_groups": 2, "ffn_hidden_size": 512,
       "vocab_size": 1024}
LOCAL = {"seq_length": 128, "transformer_impl": "local", "gradient_accumulation_fusion": False,
         "masked_softmax_fusion": False, "create_attention_mask_in_dataloader": False}
UNIT, U, MASK = 16_384, 131_072, 16_384


def _r(model=GQA, training=None, parallelism=None, precision=None):
    return resolve(load_config(make_config(model, parallelism, {**LOCAL, **(training or {})}, precision)))


def test_grouped_queries_keep_q_and_the_expanded_keys_and_values():
    """q (a copy: 4 heads) and K, V expanded to 4 heads: 3 x 4 units = 196,608 B, plus the softmax output U."""
    a = local_core_attention(_r(), 2, U, True)
    assert a.kept == 3 * 4 * UNIT + U == 327_680
    # core_attn recompute keeps the checkpoint's inputs: q (4 heads), k after RoPE (2) and the value, a view
    # that keeps the whole QKV output (4 + 2 + 2 = 8 heads): 14 units; it rematerialises K, V expanded and U.
    assert a.checkpoint == (4 + 2 + 8) * UNIT == 229_376
    assert a.recomputed == 2 * 4 * UNIT + U


def test_multi_head_attention_keeps_the_whole_qkv_output_through_the_value_view():
    """MHA (4 groups of 1): nothing is expanded, so the second matmul keeps the value, a view of the QKV output
    (12 units); RoPE makes q and k new tensors (4 + 4 units): 20 units. Without RoPE all three are views: 12."""
    mha = {**GQA, "num_query_groups": 4}
    assert local_core_attention(_r(mha), 2, U, True).kept == 20 * UNIT + U
    assert local_core_attention(_r(mha), 2, U, False).kept == 12 * UNIT + U


def test_pytorch_softmax_backward_holds_four_score_tensors():
    """PyTorch's path: CopySlices and masked_fill hold 4U when the kept probabilities are already freed: 3U above
    what is kept. With the fused kernel only the probabilities' gradient: U."""
    assert local_core_attention(_r(), 2, U, True).backward_extra == 3 * U
    fused = _r(training={"masked_softmax_fusion": True})
    assert not torch_softmax(fused)
    assert local_core_attention(fused, 2, U, True).backward_extra == U


def test_layer_backward_peak_frees_the_mlp_first():
    """At s 512 (U = 2 x 4 x 512 x 512 = 2,097,152): the layer's attention backward holds 3U above what is kept,
    the residual gradient (2 x 512 x 256 = 262,144) and one attention-output gradient (2 x 512 x 4 x 64 =
    262,144), less the layer's MLP activations, already freed: norm input and output 2 x 262,144, fc1 output
    2 x 512 x 1,024 = 1,048,576, SwiGLU output 2 x 512 x 512 = 524,288, together 2,097,152. So
    6,291,456 + 524,288 - 2,097,152 = 4,718,592 B."""
    r = _r(training={"seq_length": 512})
    acts = layer_activations(r, r.kinds[0])
    assert acts.mlp == 2_097_152
    assert acts.attention_backward_peak == 4_718_592


def test_fused_kernel_only_where_megatron_uses_it():
    """is_kernel_available: bf16/fp16 scores, 16 < s <= 4096, s and b x heads multiples of 4."""
    fused = {"masked_softmax_fusion": True}
    assert not torch_softmax(_r(training=fused))
    assert torch_softmax(_r(training={**fused, "seq_length": 8192}))
    assert torch_softmax(_r(training=fused, precision={"params_dtype": "fp32"}))
    assert torch_softmax(_r(model={**GQA, "num_attention_heads": 2, "num_query_groups": 2}, training=fused))


def test_causal_masks_per_layer_or_per_batch():
    """Built per layer (no dataloader mask): s x s per layer kept; the dataloader's b x s x s mask instead where the
    chunk receives the batch; core_attn or full recompute rebuilds a layer's mask in its recomputation."""
    assert chunk_mask_bytes(_r(), True, 2) == (2 * MASK, 0)
    with_batch = _r(training={"create_attention_mask_in_dataloader": True, "micro_batch_size": 2})
    assert chunk_mask_bytes(with_batch, True, 2) == (2 * MASK, 0)          # b 2 x s x s, once
    assert chunk_mask_bytes(with_batch, False, 2) == (2 * MASK, 0)         # a middle stage builds its own
    assert chunk_mask_bytes(_r(training={"recompute_granularity": "selective"}), True, 2) == (0, MASK)
    full = {"recompute_granularity": "full", "recompute_method": "uniform"}
    assert chunk_mask_bytes(_r(training=full), True, 2) == (0, MASK)
    assert chunk_mask_bytes(_r(training={**full, "recompute_method": "block", "recompute_num_layers": 1}), True,
                            2) == (MASK, MASK)
    assert chunk_mask_bytes(_r(training={"masked_softmax_fusion": True}), True, 2) == (0, 0)


def test_stage_keeps_the_masks_and_the_backward_working_set():
    """The whole stage on one GPU: with the masks built per layer, the layers keep 2 masks more than with the
    dataloader's single mask (b 1): 2 x 16,384 - 16,384 = 16,384 B."""
    per_layer = estimate(make_config(GQA, None, LOCAL)).stages[0]
    batch = estimate(make_config(GQA, None, {**LOCAL, "create_attention_mask_in_dataloader": True})).stages[0]
    assert per_layer.activations["attention"] - batch.activations["attention"] == MASK
