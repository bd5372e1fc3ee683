"""``--deterministic-mode`` and the MoE unpermute (estimator/model/layers/moe.py ``unpermute_source``), by hand from
Megatron-LM @ d98e8a64 : megatron/training/determinism.py (``apply_determinism_to_args`` calls
``torch.use_deterministic_algorithms(True)``) and megatron/core/transformer/moe/moe_utils.py ``unpermute``: with
deterministic algorithms on, the unfused unpermute adds the rows back with ``index_add_``, whose autograd node
keeps its source for the backward pass (PyTorch tools/autograd/derivatives.yaml, ``index_add``: ``source:
grad.index_select(dim, index).expand_as(source)``); ``scatter_add_`` keeps only its index. The source is the
local experts' output (allgather, token_dispatcher.py ``combine_preprocess``) or the rank's own tokens' routed
copies back from the all-to-all (alltoall, ``combine_postprocess``).

One micro-batch of seq 4096, micro-batch 1, h 256, bf16 (2 B), 256 experts, top-8.
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
DET = {"deterministic_mode": True}


def _moe(model, parallelism=None, training=None):
    """The MoE layer's saved bytes and its named parts for one micro-batch."""
    r = resolve(load_config(make_config(model, parallelism, training)))
    a = layer_activations(r, KIND, parts=True)
    return a.mlp, a.parts


def test_alltoall_keeps_the_returned_rows():
    """alltoall on one GPU: the unpermute's source is the 4096 tokens' 8 routed copies, [32768, 256] bf16 =
    2 x 32768 x 256 = 16,777,216 B; the layer keeps exactly that much more than without deterministic mode."""
    off, parts_off = _moe(MOE)
    on, parts = _moe(MOE, training=DET)
    assert parts_off["unpermute_source"] == 0
    assert parts["unpermute_source"] == 16_777_216
    assert on - off == 16_777_216


def test_alltoall_source_is_the_local_tokens_not_the_expert_tp_gathered_rows():
    """alltoall, TP 2 with sequence parallelism, EP 2, expert TP 2 on 4 GPUs: a rank holds 4096 / 2 = 2048 tokens
    and gets back their 8 routed copies after the all-to-all (the expert-TP gather and reduce-scatter happen
    before): [16384, 256] bf16 = 2 x 16384 x 256 = 8,388,608 B, half the experts' 2048 x 8 x 2 = 32768 rows."""
    par = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2, "expert_tensor_parallel_size": 2}
    _, parts = _moe(MOE, par, {"world_size": 4, "sequence_parallel": True, **DET})
    assert parts["unpermute_source"] == 8_388_608


def test_allgather_keeps_the_local_experts_output():
    """allgather, TP 2 with sequence parallelism, EP 2, expert TP 2 on 4 GPUs: 2048 tokens per rank gathered over
    the expert-TP x EP group (4 ranks) = 8192 tokens, 8 routes each = 65536 rows, of which the 128 local experts
    of 256 get half: 32768 rows of the experts' output, [32768, 256] bf16 = 16,777,216 B."""
    model = {**MOE, "moe_token_dispatcher_type": "allgather"}
    par = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2, "expert_tensor_parallel_size": 2}
    _, parts = _moe(model, par, {"world_size": 4, "sequence_parallel": True, **DET})
    assert parts["unpermute_source"] == 16_777_216


def test_capacity_factor_with_padding():
    """alltoall with capacity factor 1.5 and padding: capacity = ceil(4096 x 8 / 256 x 1.5) = 192 rows per expert,
    num_out_tokens = 192 x 256 = 49152 rows: 2 x 49152 x 256 = 25,165,824 B."""
    model = {**MOE, "moe_expert_capacity_factor": 1.5, "moe_pad_expert_input_to_capacity": True}
    _, parts = _moe(model, training=DET)
    assert parts["unpermute_source"] == 25_165_824


def test_fused_unpermute_and_flex_are_unchanged():
    """Transformer Engine's moe_unpermute is the same kernel in both modes; the flex dispatcher's count is
    data-dependent (left out)."""
    for model in ({**MOE, "moe_permute_fusion": True}, {**MOE, "moe_token_dispatcher_type": "flex"}):
        off, _ = _moe(model)
        on, parts = _moe(model, training=DET)
        assert parts["unpermute_source"] == 0 and on == off


def test_moe_recompute_drops_the_source():
    """Recomputing the whole MoE layer keeps only its input."""
    tr = {"recompute_granularity": "selective", "recompute_modules": ["moe"]}
    off, _ = _moe(MOE, training=tr)
    on, parts = _moe(MOE, training={**tr, **DET})
    assert parts["unpermute_source"] == 0 and on == off


BASE = ("pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 1 --vocab-size 1000 --bf16 --num-experts 256 "
        "--moe-router-topk 8")


def test_megatron_flag_round_trips():
    """--deterministic-mode reaches the configuration, and the exporter writes it back."""
    cfg = read_megatron_args(BASE + " --deterministic-mode", world_size=1).config
    assert cfg["training"]["deterministic_mode"] is True
    assert "--deterministic-mode" in to_megatron_args(cfg)
    off = read_megatron_args(BASE, world_size=1).config
    assert not (off.get("training") or {}).get("deterministic_mode")


def test_deterministic_mode_refuses_what_megatron_refuses():
    """Megatron-LM's --deterministic-mode asserts cross_entropy_loss_fusion and tp_comm_overlap are off
    (Megatron-LM @ d98e8a64 : megatron/training/determinism.py ARG_VALUES_REQUIRED_FOR_DETERMINISM): such a run
    never starts, so the estimator names the field instead of estimating it."""
    import pytest

    from estimator.config.errors import ConfigError
    base = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000)
    with pytest.raises(ConfigError) as exc:
        load_config(make_config(base, training={**DET, "cross_entropy_loss_fusion": True}))
    assert [p.field for p in exc.value.problems] == ["training.cross_entropy_loss_fusion"]
    with pytest.raises(ConfigError) as exc:
        load_config(make_config(base, {"tensor_model_parallel_size": 2, "tp_comm_overlap": True},
                                {**DET, "world_size": 2, "sequence_parallel": True}))
    assert [p.field for p in exc.value.problems] == ["parallelism.tp_comm_overlap"]
    load_config(make_config(base, training=DET))              # on its own it is fine
