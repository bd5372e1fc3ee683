"""An MLP chunked along the sequence (training.mlp_chunks_for_training, Megatron-LM --mlp-chunks-for-training),
estimator/model/layers/mlp.py, by hand.

Megatron-LM @ d98e8a64 : megatron/core/transformer/transformer_layer.py ``_run_mlp`` cuts the pre-MLP norm's input
with ``torch.chunk(min(N, S))`` along the sequence (S rows on this rank) and runs the MLP on each piece: the saved
activations are each piece's share (the same total), and the backward runs one piece at a time.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_config
from estimator.formats.megatron_args import read_megatron_args, to_megatron_args
from estimator.memory.activations import layer_activations
from estimator.model.layers import LayerKind
from estimator.model.resolve import resolve
from tests.conftest import make_config

#: h 256, SwiGLU MLP of width 1024 (fc1 writes 2 x 1024), bf16, s 256, b 1.
MODEL = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024, "vocab_size": 1024}
DENSE = LayerKind("attention", "dense")


def _acts(par=None, **training):
    cfg = make_config(MODEL, par, {"seq_length": 256, **training})
    return layer_activations(resolve(load_config(cfg)), DENSE)


def test_four_pieces_shrink_only_the_fc1_gradient():
    """One GPU, T = 256 tokens. The MLP saves the norm's input and output 2 x 2 B x 256 x 256 = 262,144, fc1's
    output 2 B x 256 x 2048 = 1,048,576 and the activation's output 2 B x 256 x 1024 = 524,288: 1,835,008, with or
    without pieces. Its backward working set, the layer's here (the attention's is smaller), is fc1's output
    gradient 1,048,576 plus two residual-sized gradients 2 x 2 B x 256 x 256 = 262,144: 1,310,720; with 4 pieces of
    64 rows 2 B x 64 x 2048 = 262,144 + 262,144 = 524,288."""
    plain, four = _acts(), _acts(mlp_chunks_for_training=4)
    assert plain.mlp == four.mlp == 1_835_008
    assert (plain.attention, plain.full) == (four.attention, four.full)
    assert (plain.backward_peak, four.backward_peak) == (1_310_720, 524_288)


def test_the_mlp_working_set_by_hand():
    """The MLP part alone (the attention's working set set aside): 256 rows in 3 pieces are torch.chunk's
    ceil(256 / 3) = 86, 86, 84 rows; the largest: 2 B x 86 x 2048 = 352,256, + 262,144 = 614,400. More pieces
    than rows: min(N, S) = 256 pieces of one row: 2 x 1 x 2048 + 262,144 = 266,240."""
    from estimator.model.layers import mlp
    from estimator.memory.activations import context
    for n, want in ((1, 1_310_720), (3, 614_400), (4, 524_288), (1000, 266_240)):
        r = resolve(load_config(make_config(MODEL, None, {"seq_length": 256, "mlp_chunks_for_training": n})))
        assert mlp.activations(r, context(r)).work == want, n


def test_sequence_parallel_pieces_are_gathered_rows():
    """TP 2 with sequence parallelism: each rank holds S = 128 rows of the norm's input; 4 pieces of 32 rows, which
    fc1 gathers to 64 rows of width 2048 / 2: 2 B x 64 x 1024 = 131,072, + 2 x 2 B x 128 x 256 = 131,072:
    262,144 (unchunked: 2 x 256 x 1024 + 131,072 = 655,360)."""
    from estimator.model.layers import mlp
    from estimator.memory.activations import context
    for n, want in ((1, 655_360), (4, 262_144)):
        cfg = make_config(MODEL, {"tensor_model_parallel_size": 2},
                          {"seq_length": 256, "world_size": 2, "sequence_parallel": True, "mlp_chunks_for_training": n})
        r = resolve(load_config(cfg))
        assert mlp.activations(r, context(r)).work == want, n


def test_recompute_of_mlp_takes_precedence():
    """_run_mlp checks recompute_mlp first: no pieces then."""
    from estimator.model.layers import mlp
    from estimator.memory.activations import context
    tr = {"seq_length": 256, "recompute_granularity": "selective", "recompute_modules": ["mlp"]}
    works = []
    for n in (1, 4):
        r = resolve(load_config(make_config(MODEL, None, {**tr, "mlp_chunks_for_training": n})))
        works.append(mlp.activations(r, context(r)).work)
    assert works[0] == works[1] == 1_310_720


def test_the_flag_is_read_and_written_back():
    cmd = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 --swiglu "
           "--seq-length 256 --max-position-embeddings 256 --vocab-size 1024 --micro-batch-size 1 --bf16 "
           "--mlp-chunks-for-training 4")
    cfg = read_megatron_args(cmd, world_size=1).config
    assert cfg["training"]["mlp_chunks_for_training"] == 4
    flags = to_megatron_args(cfg)
    assert flags[flags.index("--mlp-chunks-for-training") + 1] == "4"


@pytest.mark.parametrize("extra,what", [
    ({"model": {"num_experts": 4}}, "MoE layers"),
    ({"precision": {"fp4": True}}, "NVFP4"),
    ({"training": {"cuda_graph_impl": "transformer_engine"}}, "CUDA graphs"),
    ({"precision": {"fp8": True, "fp8_recipe": "tensorwise", "quant_recipe": ["*.linear_fc2=mxfp8"]}},
     "quant_recipe rule"),
])
def test_combinations_not_modelled_are_refused_by_name(extra, what):
    cfg = make_config(MODEL, None, {"seq_length": 256, "mlp_chunks_for_training": 2})
    for section, values in extra.items():
        cfg[section].update(values)
    with pytest.raises(ConfigError, match=f"mlp_chunks_for_training.*{what}|{what}.*mlp_chunks"):
        estimate(cfg)


def test_the_stage_peak_moves_by_three_quarters_of_the_fc1_gradient():
    """Megatron-LM flags, h 512, GeLU MLP of width 16384, s 1024, b 1, one GPU's stage: the peak is the backward
    working set, which 4 pieces lower by 3/4 of fc1's output gradient, 3/4 x 2 B x 1024 x 16384 = 25,165,824 B."""
    cmd = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
           "--vocab-size 1000 --micro-batch-size 1 --bf16 --ffn-hidden-size 16384")
    plain, four = (estimate(read_megatron_args(cmd + x, world_size=8).config).stages[0]
                   for x in ("", " --mlp-chunks-for-training 4"))
    assert plain.transient["backward_working_set"] - four.transient["backward_working_set"] == 25_165_824
    assert plain.allocated_bytes - four.allocated_bytes == 25_165_824
