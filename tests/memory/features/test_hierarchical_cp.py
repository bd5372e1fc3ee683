"""Hierarchical context parallelism (cp_comm_type a2a+p2p with hierarchical_context_parallel_sizes).

Sources: Transformer Engine @ d0067d0 : transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py, AttnFuncWithCPAndKVP2P with cp_size_a2a > 1: q, k, v go through the all-to-all over heads
(each rank keeps heads / a2a of a sequence a2a times as long: the same number of elements), the ring runs over the
p2p group, and the context saves q, the last key/value buffer and ``out_part``, the output before the all-to-all
back; the output after it is a new tensor (the projection's input). So a rank saves what the a2a type saves, one
output more than p2p, whatever the split. Megatron-LM @ d98e8a64 : megatron/core/parallel_state.py creates one
more process group per level (create_hierarchical_groups): each level of more than one rank is a communicator of
its own, 128 MiB of NCCL buffers in this model (NCCL_BYTES_PER_COMMUNICATOR).
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.megatron_args import read_megatron_args, to_megatron_args
from tests.conftest import make_config

MIB = 2 ** 20
H, A, S = 1024, 8, 4096
MODEL = dict(num_layers=2, hidden_size=H, num_attention_heads=A, ffn_hidden_size=4096, vocab_size=32000,
             activation_func="gelu", gated_linear_unit=False)


def est(cp_comm_type, sizes=None, cp=4, model=None):
    par = {"context_parallel_size": cp, "cp_comm_type": cp_comm_type}
    if sizes is not None:
        par["hierarchical_context_parallel_sizes"] = sizes
    return estimate(make_config({**MODEL, **(model or {})}, par, {"seq_length": S, "world_size": cp}))


def test_saved_tensors_are_the_a2a_ones_and_the_split_adds_its_groups():
    """CP 4, sizes [2, 2] against a2a at CP 4: the same activations (the output before the all-to-all is saved
    either way: 1 micro-batch x 4,096 / 4 = 1,024 tokens x 8 heads x 128 x 2 B = 2 MiB a layer more than p2p,
    4 MiB over the two layers). Against plain a2a the device total grows by two communicators, the a2a group and
    the p2p group (each of 2 ranks): 2 x 128 MiB = 256 MiB; [4, 1] adds one (the p2p level of one rank needs
    none): 128 MiB."""
    a2a, hier, flat = est("a2a").stages[0], est("a2a+p2p", [2, 2]).stages[0], est("a2a+p2p", [4, 1]).stages[0]
    p2p = est("p2p").stages[0]
    assert hier.allocated_bytes == a2a.allocated_bytes == flat.allocated_bytes
    assert a2a.allocated_bytes - p2p.allocated_bytes == 2 * 1024 * A * 128 * 2   # 4 MiB: one output a layer
    assert hier.device_bytes - a2a.device_bytes == 256 * MIB
    assert flat.device_bytes - a2a.device_bytes == 128 * MIB


@pytest.mark.parametrize("sizes, cp_type, field, words", [
    ([2, 4], "a2a+p2p", "parallelism.hierarchical_context_parallel_sizes", "must equal context_parallel_size (4)"),
    (None, "a2a+p2p", "parallelism.hierarchical_context_parallel_sizes", "is required with cp_comm_type a2a+p2p"),
])
def test_rules(sizes, cp_type, field, words):
    """Megatron-LM's arguments.py and Bridge's _validate_cp_comm_type: the product is the CP size (2 x 4 = 8, not
    4), and a2a+p2p needs the sizes."""
    with pytest.raises(ConfigError) as exc:
        est(cp_type, sizes)
    assert any(p.field == field and words in p.message for p in exc.value.problems), exc.value.problems


def test_a2a_group_must_divide_the_heads():
    """8 heads and 4 key/value groups at TP 1; an a2a group of 8 splits the 4 key/value heads: refused (4 % 8);
    [4, 1] splits 8 query and 4 key/value heads into 2 and 1: fine."""
    with pytest.raises(ConfigError) as exc:
        est("a2a+p2p", [8, 1], cp=8, model={"num_query_groups": 4})
    assert any("key/value heads (4 per tensor-parallel rank)" in p.message for p in exc.value.problems)
    est("a2a+p2p", [4, 1], cp=4, model={"num_query_groups": 4})


def test_entry_must_be_positive_integers():
    with pytest.raises(ConfigError) as exc:
        est("a2a+p2p", [2, 0])
    assert any(p.field == "parallelism.hierarchical_context_parallel_sizes" for p in exc.value.problems)


BASE = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 4096 "
        "--max-position-embeddings 4096 --vocab-size 32000 --micro-batch-size 1 --bf16 --context-parallel-size 4 ")


def test_megatron_lm_flags_round_trip():
    """--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2 reads into the schema's fields and writes
    back out."""
    cfg = read_megatron_args(BASE + "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2",
                             world_size=4).config
    assert cfg["parallelism"]["hierarchical_context_parallel_sizes"] == [2, 2]
    assert cfg["parallelism"]["cp_comm_type"] == "a2a+p2p"
    out = to_megatron_args(cfg)
    assert "--hierarchical-context-parallel-sizes 2 2" in " ".join(out)


def test_bridge_field_is_read():
    """Bridge's model.hierarchical_context_parallel_sizes (ModelParallelConfig's field) is the same setting."""
    cfg = read_bridge_config({"model": {"num_layers": 2, "hidden_size": 1024, "num_attention_heads": 8,
                                        "ffn_hidden_size": 4096, "vocab_size": 32000, "seq_length": 4096,
                                        "context_parallel_size": 4, "cp_comm_type": "a2a+p2p",
                                        "hierarchical_context_parallel_sizes": [2, 2]},
                              "train": {"micro_batch_size": 1}}, world_size=4).config
    assert cfg["parallelism"]["hierarchical_context_parallel_sizes"] == [2, 2]
