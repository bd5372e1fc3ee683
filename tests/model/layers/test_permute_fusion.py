"""Transformer Engine's fused permutation (``moe_permute_fusion``, estimator/model/layers/moe.py ``permute_map``), by
hand from Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/moe_utils.py (``permute`` / ``unpermute`` with
``fused=True``) and token_dispatcher.py, and TransformerEngine @ d0067d0d : transformer_engine/pytorch/
triton/permutation.py (``make_row_id_map``: int32 [num_tokens, 2 num_experts + 1]) and
transformer_engine/pytorch/permutation.py (the permute and the unpermute save the same map; counted once).

One micro-batch of seq 4096, micro-batch 1, h 256, bf16, top-8.
"""

from __future__ import annotations

from estimator import load_config
from estimator.memory.activations import layer_activations
from estimator.model.layers import LayerKind
from estimator.formats.megatron_args import read_megatron_args
from estimator.formats.megatron_export import to_megatron_args
from estimator.model.resolve import resolve
from tests.conftest import make_config

MOE = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000, num_experts=256, moe_router_topk=8,
           moe_ffn_hidden_size=64)
KIND = LayerKind("attention", "moe")


def _moe(model, parallelism=None, training=None):
    """The MoE layer's saved bytes and its named parts for one micro-batch."""
    r = resolve(load_config(make_config(model, parallelism, training)))
    a = layer_activations(r, KIND, parts=True)
    return a.mlp, a.parts


def test_alltoall_keeps_the_row_map_of_the_local_tokens():
    """alltoall (Megatron's default): moe_permute_with_probs over the 4096 local tokens and 256 experts makes an
    int32 row map [4096, 2 x 256 + 1] = 4 x 4096 x 513 = 8,404,992 B; the unpermute saves the same tensor. The
    layer keeps exactly that much more than without fusion."""
    off, _ = _moe(MOE)
    on, parts = _moe({**MOE, "moe_permute_fusion": True})
    assert parts["permute_map"] == 8_404_992
    assert on - off == 8_404_992


def test_without_fusion_there_is_no_row_map():
    """The unfused path keeps int64 indices per routed row only (not counted, like the router's)."""
    _, parts = _moe(MOE)
    assert parts["permute_map"] == 0


def test_allgather_maps_the_gathered_tokens_to_the_local_experts():
    """allgather, TP 2 with sequence parallelism, EP 2, expert TP 2 on 4 GPUs: each rank holds 4096 / 2 = 2048
    tokens; the dispatcher gathers them over the expert-TP x EP group (4 ranks): 8192 tokens, permuted by
    ``local_map`` over the 256 / 2 = 128 local experts: int32 [8192, 2 x 128 + 1] = 4 x 8192 x 257 = 8,421,376 B."""
    model = {**MOE, "moe_permute_fusion": True, "moe_token_dispatcher_type": "allgather"}
    par = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2, "expert_tensor_parallel_size": 2}
    _, parts = _moe(model, par, {"world_size": 4, "sequence_parallel": True})
    assert parts["permute_map"] == 8_421_376


def test_moe_recompute_drops_the_row_map():
    """Recomputing the whole MoE layer keeps only its input: the row map is rebuilt in the backward pass."""
    tr = {"recompute_granularity": "selective", "recompute_modules": ["moe"]}
    off, _ = _moe(MOE, training=tr)
    on, parts = _moe({**MOE, "moe_permute_fusion": True}, training=tr)
    assert parts["permute_map"] == 0 and on == off


def test_flex_dispatcher_is_left_out():
    """DeepEP permutes the tokens this rank receives, a data-dependent count: not counted."""
    _, parts = _moe({**MOE, "moe_permute_fusion": True, "moe_token_dispatcher_type": "flex"})
    assert parts["permute_map"] == 0


BASE = ("pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 1 --vocab-size 1000 --bf16 --num-experts 256 "
        "--moe-router-topk 8")


def test_megatron_flag_round_trips():
    """--moe-permute-fusion reaches the configuration, and the exporter writes it back."""
    on = read_megatron_args(BASE + " --moe-permute-fusion", world_size=1).config
    assert on["model"]["moe_permute_fusion"] is True
    assert read_megatron_args(BASE, world_size=1).config["model"].get("moe_permute_fusion", False) is False
    assert "--moe-permute-fusion" in to_megatron_args(load_config(on))
