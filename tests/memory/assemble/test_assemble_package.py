"""The ``estimator.memory.assemble`` package: its public names, its overheads and its one copy of each memo cache.

The package was one module (``estimator/memory/assemble.py``); the names other modules and tests import from it
stay importable from the package, the memo caches stay single objects that every reader shares, and the device
overheads keep their documented figures. The model is the small GPT of ``tests/memory/test_memory.py``: L=4 layers,
h=1024, 8 heads, GeLU MLP of 4096, vocabulary 32000, untied embeddings.
"""

from __future__ import annotations

import estimator.memory.assemble as assemble
from estimator.memory import breakdown, timeline
from estimator.memory.assemble import per_kind
from tests.conftest import make_config

MIB = 2 ** 20
MODEL = dict(num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def _estimate(parallelism=None, world_size=1):
    tr = {"seq_length": 2048, "world_size": world_size, "reserved_memory_model": "fraction"}
    return assemble.estimate(make_config(MODEL, parallelism, tr, None))


def test_the_names_other_modules_import_stay_on_the_package():
    """Every name imported ``from estimator.memory.assemble`` in estimator/, tests/, benchmarks/ (grep, at the split)."""
    for name in ("estimate", "stage_memory", "peak_memory", "in_flight", "ALLOCATOR_RESERVE_FRACTION",
                 "CUDA_CONTEXT_BYTES", "NCCL_BYTES_PER_COMMUNICATOR", "chunk_activations", "kind_activations",
                 "layer_kind_counts", "parameter_layout", "sum_activations", "_assemble"):
        assert hasattr(assemble, name), name
    assert assemble.stage_memory.__module__ == "estimator.memory.assemble"
    assert sorted(assemble.__all__) == sorted(["estimate", "ALLOCATOR_RESERVE_FRACTION", "CUDA_CONTEXT_BYTES",
                                               "NCCL_BYTES_PER_COMMUNICATOR", "in_flight", "peak_memory",
                                               "stage_memory"])


def test_the_overheads_keep_their_documented_figures():
    """600 MiB of CUDA context = 629,145,600 B; 128 MiB per NCCL communicator = 134,217,728 B; a 5 % reserve."""
    assert assemble.CUDA_CONTEXT_BYTES == 629_145_600
    assert assemble.NCCL_BYTES_PER_COMMUNICATOR == 134_217_728
    assert assemble.ALLOCATOR_RESERVE_FRACTION == 0.05


def test_device_bytes_add_the_context_and_one_nccl_buffer_per_group_of_more_than_one_rank():
    """World 1: no group of more than one rank, so device - reserved = 600 MiB. TP 2 x PP 2 on 8 GPUs (DP 2, CP 1):
    the tensor-, pipeline- and data-parallel groups have 2 ranks each, 3 communicators:
    600 + 3 x 128 = 984 MiB = 1,031,798,784 B on every stage."""
    one = _estimate().stages[0]
    assert one.device_bytes - one.reserved_bytes == 600 * MIB
    split = _estimate({"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2}, world_size=8)
    assert [s.device_bytes - s.reserved_bytes for s in split.stages] == [1_031_798_784] * 2


def test_the_memo_caches_are_one_object_each():
    """The timeline and the breakdown read the per-kind blocks through the package: the very functions (so the very
    caches) the stage assembly fills."""
    for name in ("parameter_layout", "kind_activations", "layer_kind_counts", "chunk_activations", "sum_activations"):
        assert getattr(assemble, name) is getattr(per_kind, name)
    assert timeline.parameter_layout is per_kind.parameter_layout and timeline.kind_activations is per_kind.kind_activations
    assert breakdown.layer_kind_counts is per_kind.layer_kind_counts
    per_kind._LAYOUT_CACHE.clear()
    _estimate()
    assert len(per_kind._LAYOUT_CACHE) >= 1
