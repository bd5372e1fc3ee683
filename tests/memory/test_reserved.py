"""Reserved memory from a replayed allocation trace (estimator/memory/reserved.py).

Small traces whose segments are worked out by hand from PyTorch's rules (pytorch/pytorch @ 001074d2 :
c10/cuda/CUDACachingAllocator.cpp; MiB = 2^20 bytes): a request of more than 1 MiB and less than 10 MiB gets a
20 MiB segment, a request of at most 1 MiB a 2 MiB small-pool segment; a large block is split when more than 1 MiB
would remain; a freed block merges with its free neighbours; a CUDA graph's private pool has segments of its own.
"""

from __future__ import annotations

import statistics

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from estimator.config.load import load_config
from estimator.formats.megatron_args import read_megatron_args
from estimator.memory.allocator import CachingAllocator, parse_alloc_conf
from estimator.memory.reserved import (LayerTensors, StageTrace, build, events, layer_tensors, parameter_tensors,
                                       recording, replay, schedule_passes, scaled)
from estimator.validation.project_runs import project_cases
from tests.conftest import ROOT

MIB = 2 ** 20


def _one_layer(**kw) -> StageTrace:
    """One 2 MiB parameter, its 2 MiB gradient buffer, one 1 MiB optimizer state, one layer saving one 3 MiB tensor,
    one micro-batch per step."""
    base = dict(params=(2 * MIB,), grad_buffers=(2 * MIB,), param_buffer=0, masters=(), states=(MIB,),
                persistent=(), chunks=(((), (LayerTensors((3 * MIB,), (), (), ()),), (), False, False),),
                loss=((), (), (), ()), embedding_wgrad=0, counts=(1,), microbatches=1, step=())
    base.update(kw)
    return StageTrace(**base)


def test_trace_of_one_layer_in_order():
    """Setup: the parameter, the gradient buffer. Forward: the saved tensor. Backward: its gradient (autograd makes
    it, then frees the tensor, then the gradient). The first optimizer step makes the state; the second iteration
    repeats the pass."""
    ev = events(_one_layer())
    assert ev == [
        ("mark", "setup"), ("+", 1, 2 * MIB, None), ("+", 2, 2 * MIB, None),
        ("mark", "fwd_bwd"), ("+", 3, 3 * MIB, None), ("+", 4, 3 * MIB, None), ("-", 3), ("-", 4),
        ("mark", "optimizer"), ("+", 5, MIB, None),
        ("mark", "fwd_bwd"), ("+", 6, 3 * MIB, None), ("+", 7, 3 * MIB, None), ("-", 6), ("-", 7),
        ("mark", "optimizer"),
    ]


def test_step_lists_per_parameter_in_order():
    """The step's per-parameter lists: a kept one (fp32 gradient copies, 3 MiB) is made first in the step, before
    the first step's state, and freed by the next iteration's zero_grad inside its forward/backward phase; a
    temporary one (foreach sqrt, 1 + 2 MiB) is made in parameter order after the states and freed in reverse (a
    Python list is released from its last item)."""
    ev = events(_one_layer(step_lists=(((MIB, 2 * MIB), False), ((3 * MIB,), True))))
    assert ev == [
        ("mark", "setup"), ("+", 1, 2 * MIB, None), ("+", 2, 2 * MIB, None),
        ("mark", "fwd_bwd"), ("+", 3, 3 * MIB, None), ("+", 4, 3 * MIB, None), ("-", 3), ("-", 4),
        ("mark", "optimizer"), ("+", 5, 3 * MIB, None), ("+", 6, MIB, None),
        ("+", 7, MIB, None), ("+", 8, 2 * MIB, None), ("-", 8), ("-", 7),
        ("mark", "fwd_bwd"), ("-", 5), ("+", 9, 3 * MIB, None), ("+", 10, 3 * MIB, None), ("-", 9), ("-", 10),
        ("mark", "optimizer"), ("+", 11, 3 * MIB, None), ("+", 12, MIB, None), ("+", 13, 2 * MIB, None),
        ("-", 13), ("-", 12),
    ]


def test_build_cuts_step_lists_per_parameter():
    """Parameters of 3 and 1 elements, no distributed optimizer: a 16 B list is 12 + 4 B, an 8 B one 6 + 2 B; the
    kept list (fp32 gradient copies) in ``step_lists``, the temporaries with the one parameter group's 4 states
    (2 per parameter). With separate dense and expert optimizers (dense 3 + 1, experts 8 elements) the estimate's
    32 B list is the larger optimizer's, 4 B per element: stepped group by group, the dense group makes its 4
    states and a 12 + 4 B list, then the experts' group its 2 states and a 32 B list."""
    kw = dict(weight_bytes=2, weights=8, gradients=16, optimizer=96, master_bytes=4, state_count=2, dense_shard=1,
              expert_shard=1, distributed=False, persistent=(), chunks=(), loss=((), (), (), ()), embedding_wgrad=0,
              counts=(), microbatches=1, step=())
    t = build(dense=[3, 1], experts=[], step_per_param=((16, False), (8, True)), **kw)
    assert t.step_lists == (((6, 2), True),) and t.step_groups == ((4, ((12, 4),)),)
    t = build(dense=[3, 1], experts=[8], step_per_param=((32, False),), separate_experts=True, **kw)
    assert t.step_lists == () and t.step_groups == ((4, ((12, 4),)), (2, ((32,),)))


def test_per_parameter_temporaries_fill_the_holes_a_lump_cannot():
    """Why the step's temporaries are cut per parameter. A 36 MiB segment (one 36 MiB request, freed) is split into
    three 12 MiB activations; the first and last freed around the middle one (kept, as a state made in the cached
    blocks would be) leave two 12 MiB holes. Foreach temporaries of 12 + 12 MiB fill the holes: reserved stays
    36 MiB. The same 24 MiB as one tensor fits neither hole: a new 24 MiB segment, 60 MiB reserved."""
    def holes():
        a = CachingAllocator()
        a.free(a.malloc(36 * MIB))
        x, _, z = a.malloc(12 * MIB), a.malloc(12 * MIB), a.malloc(12 * MIB)
        a.free(x)
        a.free(z)
        return a
    a = holes()
    a.malloc(12 * MIB), a.malloc(12 * MIB)
    assert a.reserved == 36 * MIB
    a = holes()
    a.malloc(24 * MIB)
    assert a.reserved == 60 * MIB


def test_fsdp2_unit_gradients_live_from_the_first_backward_to_their_copy():
    """PyTorch FSDP2 (no gradient buffer): the layer's 1 MiB gradient (its reduce-scatter output) is made at the end
    of the step's first backward and kept; the second micro-batch's output is made and freed (added into it). In
    the step, Megatron's Float16Optimizer makes the 2 MiB fp32 copy, then the unit's gradient is dropped; the copy
    lives to the next zero_grad."""
    layer = LayerTensors((3 * MIB,), (), (), (), unit_grad=MIB)
    ev = events(_one_layer(grad_buffers=(), states=(), microbatches=2, chunks=(((), (layer,), (), False, False),),
                           step_lists=(((2 * MIB,), True),)))
    rs = "reduce_scatter"
    first = [("+", 2, 3 * MIB, None), ("+", 3, 3 * MIB, None), ("-", 2), ("-", 3), ("+", 4, MIB, rs),
             ("+", 5, 3 * MIB, None), ("+", 6, 3 * MIB, None), ("-", 5), ("-", 6), ("+", 7, MIB, rs), ("-", 7)]
    assert ev[:17] == [("mark", "setup"), ("+", 1, 2 * MIB, None), ("mark", "fwd_bwd")] + first + [
        ("mark", "optimizer"), ("+", 8, 2 * MIB, None), ("-", 4)]
    assert ev[17:20] == [("mark", "fwd_bwd"), ("-", 8), ("+", 9, 3 * MIB, None)]


def test_fsdp2_reduce_scatter_output_has_its_own_pool():
    """FSDP2's reduce-scatter output is allocated on the reduce-scatter stream, whose pool the default stream's
    blocks never serve (pytorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py ``foreach_reduce``;
    c10/cuda/CUDACachingAllocator.cpp: a block is reused only on its own stream). The 2 MiB parameter takes a
    20 MiB segment (request of 1-10 MiB), 18 MiB cached; the 3 MiB saved tensor and its 3 MiB gradient come from
    it and go back (18 MiB free again). The layer's 3 MiB reduce-scatter output cannot take that block: a 20 MiB
    segment of the reduce-scatter stream. Peak allocated 2 + 3 + 3 = 8 MiB, reserved 20 + 20 = 40 MiB; the second
    iteration reuses both segments (on one stream the output would have fitted the cached 18 MiB: 20 MiB)."""
    layer = LayerTensors((3 * MIB,), (), (), (), unit_grad=3 * MIB)
    r = replay(events(_one_layer(grad_buffers=(), states=(), chunks=(((), (layer,), (), False, False),))))
    assert (r.peak_allocated, r.peak_reserved, r.segments) == (8 * MIB, 40 * MIB, 2)


def test_loss_gradient_in_place_lives_through_the_output_layer_backward():
    """fp32 logits, or Transformer Engine's fused cross entropy: the loss writes the logits' gradient into the tensor
    it kept (Megatron-Core tensor_parallel/cross_entropy.py: ``grad_input = softmax``, then in-place updates), and
    the output layer's backward reads it, so the kept 12 MiB logits are freed only after the 12 MiB weight gradient.
    By hand: the 2 MiB parameter takes a 20 MiB segment; the 3 MiB saved tensor and the 12 MiB logits are cut from
    it (3 MiB left); the 12 MiB weight gradient needs a 12 MiB segment of its own: 2 + 3 + 12 + 12 = 29 MiB allocated
    (the logits freed first, the gradient would have taken their block: 17 MiB). The layer's 3 MiB gradient takes
    the best fit, that 12 MiB block; all freed: 18 MiB free in the first segment, 12 MiB in the second. Iteration 2:
    the saved 3 MiB takes the 12 MiB block (9 left), the logits 12 of the 18 MiB (6 left), and the weight gradient
    fits neither: a third segment. Reserved 20 + 12 + 12 = 44 MiB. With a backward buffer of its own (bf16 logits:
    the 6 MiB bf16 gradient) the kept tensor goes before the output layer's backward."""
    chunks = (((), (LayerTensors((3 * MIB,), (), (), ()),), (), False, True),)
    r = replay(events(_one_layer(grad_buffers=(), states=(), chunks=chunks, loss=((), (12 * MIB,), (), (12 * MIB,)))))
    assert (r.peak_allocated, r.peak_reserved, r.segments) == (29 * MIB, 44 * MIB, 3)
    ev = events(_one_layer(grad_buffers=(), states=(), chunks=chunks, loss=((), (12 * MIB,), (6 * MIB,),
                                                                            (12 * MIB,))))
    i = ev.index(("+", 4, 6 * MIB, None))
    assert ev[i:i + 5] == [("+", 4, 6 * MIB, None), ("-", 3), ("+", 5, 12 * MIB, None), ("-", 5), ("-", 4)]


def test_replay_of_one_layer_by_hand():
    """2 MiB parameter: a 20 MiB segment (request of 1-10 MiB), split, 18 MiB cached. Gradient buffer 2 MiB, saved
    3 MiB and its gradient 3 MiB: taken from the cached block (16, 13, then 10 MiB left); 10 MiB allocated at the
    peak. Both freed: merged back into one 16 MiB block. The 1 MiB state is a small request: a 2 MiB small-pool
    segment. Iteration 2 takes its 3 + 3 MiB from the cached 16 MiB block, the state alive: 11 MiB allocated.
    Reserved: 20 + 2 = 22 MiB."""
    r = replay(events(_one_layer()))
    assert (r.peak_allocated, r.peak_reserved, r.segments) == (11 * MIB, 22 * MIB, 2)
    assert r.phases == (("setup@1", 4 * MIB, 20 * MIB, 4 * MIB), ("fwd_bwd@1", 10 * MIB, 20 * MIB, 4 * MIB),
                        ("optimizer@1", 5 * MIB, 22 * MIB, 5 * MIB), ("fwd_bwd@2", 11 * MIB, 22 * MIB, 5 * MIB),
                        ("optimizer@2", 5 * MIB, 22 * MIB, 5 * MIB))


def test_recording_collects_each_replay_with_its_phases_by_hand():
    """``recording()`` hands out every replay run inside it, phase by phase. By hand: a 3 MiB request cuts a 20 MiB
    segment (1-10 MiB requests), a 5 MiB one splits its 17 MiB rest (8 MiB allocated, 20 reserved), the 3 MiB freed
    (5 MiB allocated after). The step's 1 MiB request is a small one: a 2 MiB small-pool segment, 6 MiB allocated,
    22 MiB reserved. Outside the block nothing is collected."""
    trace = [("mark", "fwd_bwd"), ("+", 1, 3 * MIB, None), ("+", 2, 5 * MIB, None), ("-", 1),
             ("mark", "optimizer"), ("+", 3, MIB, None)]
    with recording() as seen:
        r = replay(trace)
    replay(trace)
    assert seen == [r]
    assert r.phases == (("fwd_bwd@1", 8 * MIB, 20 * MIB, 5 * MIB), ("optimizer@1", 6 * MIB, 22 * MIB, 6 * MIB))


def test_empty_cache_after_the_passes_by_hand():
    """Megatron-LM's --empty-unused-memory-level 1 (training.py train_step: torch.cuda.empty_cache() after the
    forward-backward passes). One 2 MiB parameter and its gradient buffer (a 20 MiB segment, 16 MiB cached), a
    layer saving 30 MiB, one 20 MiB optimizer state.

    Level 0: the saved tensor and its gradient get 30 MiB segments A and B (reserved 80 MiB), both cached once freed;
    the first step's 20 MiB state takes the best fit, A (lowest address of the two), split 20 + 10. Iteration 2: the
    saved tensor takes B, its gradient fits no cached block (16, 10): a third 30 MiB segment. Peak 20 + 3 x 30 +
    0 = 110 MiB.

    Level 1: A and B, wholly free after the passes, are given back (reserved 20 MiB); the state gets a 20 MiB segment
    of its own (40 MiB); iteration 2 cuts two 30 MiB segments again: peak 40 + 60 = 100 MiB. Level 2 empties the
    cache after the step too, when nothing is wholly free: 100 MiB. Allocated is the same: 2 + 2 + 20 + 30 + 30 =
    84 MiB."""
    one = dict(chunks=(((), (LayerTensors((30 * MIB,), (), (), ()),), (), False, False),), states=(20 * MIB,))
    runs = [replay(events(_one_layer(**one, empty_cache_level=level))) for level in (0, 1, 2)]
    assert [r.peak_reserved for r in runs] == [110 * MIB, 100 * MIB, 100 * MIB]
    assert {r.peak_allocated for r in runs} == {84 * MIB}
    ev = events(_one_layer(empty_cache_level=2))
    marks = [e for e in ev if e[0] in ("mark", "empty_cache")]
    assert marks == [("mark", "setup"), ("mark", "fwd_bwd"), ("empty_cache",), ("mark", "optimizer"),
                     ("empty_cache",), ("mark", "fwd_bwd"), ("empty_cache",), ("mark", "optimizer"),
                     ("empty_cache",)]


def test_empty_unused_memory_level_is_read_from_both_launchers():
    """Megatron-LM's flag and Megatron-Bridge's train.empty_unused_memory_level (training/train.py: the same two
    empty_cache calls) set the field; allocated memory does not move."""
    args = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
            "--micro-batch-size 1 --vocab-size 1000 --bf16")
    imp = read_megatron_args(args + " --empty-unused-memory-level 2")
    assert imp.config["training"]["empty_unused_memory_level"] == 2
    from estimator.formats.bridge.config import read_bridge_config
    bridge = read_bridge_config({"model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                           "seq_length": 128, "vocab_size": 1000},
                                 "train": {"micro_batch_size": 1, "global_batch_size": 1,
                                           "empty_unused_memory_level": 1}}, world_size=1)
    assert bridge.config["training"]["empty_unused_memory_level"] == 1
    with pytest.raises(ConfigError, match="empty_unused_memory_level"):
        load_config({**_tiny(), "training": {**_tiny()["training"], "empty_unused_memory_level": 3}})
    a = estimate(_tiny(reserved_memory_model="replay"))
    b = estimate(_tiny(reserved_memory_model="replay", empty_unused_memory_level=2))
    assert a.peak.allocated_bytes == b.peak.allocated_bytes


def test_experts_in_the_dense_buffer_are_in_model_order():
    """One MoE layer, linear weights qkv (6 x 4) and proj (4 x 4), 3 elements of norms and router, two experts of
    fc1 (8 x 4) and fc2 (4 x 4); the embedding (40) first, the output layer (40) last. With the experts in the dense
    buffer (no expert parallelism): 40, 24, 16, 3, then expert 0's 32 and 16, expert 1's 32 and 16, then 40. Apart:
    the fc1 weights of both experts, then the fc2 weights, in a list of their own."""
    layer = [(((6, 4, 1), (4, 4, 1)), ((8, 4, 2), (4, 4, 2)), 3)]
    assert parameter_tensors(layer, [40], 2, (40,), interleave=True) == ([40, 24, 16, 3, 32, 16, 32, 16, 40], [])
    assert parameter_tensors(layer, [40], 2, (40,)) == ([40, 24, 16, 3, 40], [32, 32, 16, 16])


def test_sequential_experts_save_their_own_tensors():
    """SequentialMLP without grouped GEMM: 4 local experts on balanced routing. The routed fc1 output (8 MiB for all
    experts) and activation output (4 MiB) become 2 MiB and 1 MiB per expert, expert by expert, where the MLP's
    tensors stand; the router's and the experts' input stay whole. With grouped GEMM (experts=0) one tensor each."""
    parts = {"qkv": 6 * MIB, "router": MIB, "expert_in": 8 * MIB, "expert_fc1_out": 8 * MIB,
             "expert_act_out": 4 * MIB, "mlp_norm_in": 2 * MIB}
    acts = type("A", (), dict(attention=6 * MIB, mlp=23 * MIB, backward_peak=0, attention_backward_peak=0,
                              recompute_peak=0, checkpoint=0))()
    lt = layer_tensors(acts, parts, None, experts=4)
    assert lt.saved == (6 * MIB, MIB, 8 * MIB) + (2 * MIB, MIB) * 4 + (2 * MIB,)
    assert lt.n_mlp == 11
    assert layer_tensors(acts, parts, None).saved == (6 * MIB, MIB, 8 * MIB, 8 * MIB, 4 * MIB, 2 * MIB)


def test_whole_iteration_graph_has_a_private_pool():
    """cuda_graph_impl full_iteration, one eager step first: as above (22 MiB), then torch.cuda.graph empties the
    cache (no segment is wholly free: the 20 MiB one holds the parameter and the gradients, the small one the
    state) and captures the forward-backward in its private pool: the 3 MiB saved tensor and its gradient get a
    20 MiB segment of their own although the regular pool caches 16 MiB. Reserved: 22 + 20 = 42 MiB."""
    r = replay(events(_one_layer(full_graph=True, warmup_steps=1)))
    assert (r.peak_reserved, r.segments) == (42 * MIB, 3)


def test_expandable_segments_map_pages():
    """expandable_segments:True: the large pool is one segment mapped in 20 MiB pages; 2 + 2 + 3 + 3 = 10 MiB live
    at the peak fit in the first page; the state's small pool maps one 2 MiB page. Reserved 22 MiB, one segment
    per pool."""
    r = replay(events(_one_layer()), parse_alloc_conf("expandable_segments:True"))
    assert (r.peak_reserved, r.segments) == (22 * MIB, 2)


def test_build_scales_optimizer_tensors_to_the_estimate():
    """Two parameters of 3 and 1 elements (no distributed optimizer), master 4 B and two states of 4 B each per
    parameter: 12 B per parameter, 48 B in all; the estimate's 96 B doubles each (the states per parameter in
    turn, exp_avg then exp_avg_sq). Weights 8 B spread as 6 and 2; the 16 B gradient buffer is one allocation."""
    t = build(dense=[3, 1], experts=[], weight_bytes=2, weights=8, gradients=16, optimizer=96, master_bytes=4,
              state_count=2, dense_shard=1, expert_shard=1, distributed=False, persistent=(), chunks=(),
              loss=((), (), (), ()), embedding_wgrad=0, counts=(), microbatches=1, step=())
    assert (t.params, t.grad_buffers, t.param_buffer) == ((6, 2), (16,), 0)
    assert t.masters == (24, 8) and t.states == (24, 24, 8, 8)


def test_distributed_optimizer_takes_parameters_in_buffer_order():
    """DDP lays its buffer out from the last parameter to the first, and the distributed optimizer walks the buffer:
    parameters of 3 and 1 elements (model order) give main parameters, states and step lists for 1, then 3. Two
    ranks shard each: ceil(1/2) = 1 and ceil(3/2) = 2 elements; master 4 B and two 4 B states: 12 B per element, 36 B
    in all; the estimate's 72 B doubles each."""
    t = build(dense=[3, 1], experts=[], weight_bytes=2, weights=8, gradients=16, optimizer=72, master_bytes=4,
              state_count=2, dense_shard=2, expert_shard=1, distributed=True, persistent=(), chunks=(),
              loss=((), (), (), ()), embedding_wgrad=0, counts=(), microbatches=1, step=(),
              step_per_param=((12, False),))
    assert t.masters == (8, 16) and t.states == (8, 8, 16, 16)
    assert t.step_lists == () and t.step_groups == ((4, ((4, 8),)),)


def test_distributed_optimizer_copies_weights_into_the_buffer():
    """With the distributed optimizer DDP allocates param_data (the weights' bytes) and frees each weight's own
    tensor after copying it: the parameters' 6 MiB stay cached. Two 3 MiB parameters: one 20 MiB segment (3 + 3,
    14 MiB cached); 6 MiB grad buffer and 6 MiB param buffer from the cache (2 MiB left); the parameters freed
    (6 MiB free at the segment's start): the segment holds 12 MiB allocated of 20 MiB."""
    t = _one_layer(params=(3 * MIB, 3 * MIB), grad_buffers=(6 * MIB,), param_buffer=6 * MIB, chunks=(), counts=(),
                   states=())
    r = replay(events(t))
    assert r.phases[0] == ("setup@1", 18 * MIB, 20 * MIB, 12 * MIB)


def test_layer_tensors_from_named_parts():
    """Attention saves 100 B of which the named parts are 30 + 50: the rest is one more tensor of 20. The MLP
    saves 40 B, named 60: scaled down to 40. Backward working set 200 B beyond the two gradients the mirror holds
    (2 x 50): 100 B, in pieces of at most the largest saved tensor (50)."""
    from estimator.memory.activations import LayerActivations
    a = LayerActivations(attention=100, mlp=40, full=140, checkpoint=10, backward_peak=200, recompute_peak=0)
    lt = layer_tensors(a, {"norm_in": 30, "qkv": 50, "fc1_out": 60}, None)
    assert lt.saved == (30, 50, 20, 40) and lt.n_mlp == 1
    assert lt.work == (50, 50)
    full = layer_tensors(a, {"norm_in": 30, "qkv": 50, "fc1_out": 60}, "full")
    assert full.saved == (10,) and full.forward_temp == full.remat == (30, 50, 20, 40)
    assert scaled([3, 1], 2) == (1,)      # 3 * 2 // 4 = 1, 1 * 2 // 4 = 0 (dropped)


def test_unfused_attention_backward_keeps_its_score_tensors_whole():
    """Unfused attention, scores U = 64 B kept. Its backward (estimator/model/local_attention.py) needs 4U - U = 192 B
    of score tensors plus the residual gradient 10 B, less the MLP's 40 B freed by then: attention_backward_peak =
    162 B above everything kept. The trace itself frees the MLP's saved tensors (30 + 10) and still holds the 30 B
    gradient its mirror made last (of the MLP's first tensor, standing for the residual gradient), so the working
    set it allocates is 162 + 40 - 30 = 172 B: three whole 64 B score tensors would be 192, here 64, 64 and 44 (pieces
    of at most the largest saved tensor); without the correction the 162 B would count the MLP and the residual
    gradient twice. A full-recompute layer keeps its MLP rematerialised through the backward: 162 B as it is."""
    from estimator.memory.activations import LayerActivations
    a = LayerActivations(attention=100, mlp=40, full=140, checkpoint=10, backward_peak=0, recompute_peak=0,
                         attention_backward_peak=162)
    parts = {"norm_in": 36, "scores": 64, "mlp_norm_in": 30, "fc1_out": 10}
    lt = layer_tensors(a, parts, None)
    assert lt.saved == (36, 64, 30, 10) and lt.n_mlp == 2
    assert lt.attn_work == (64, 64, 44)
    assert layer_tensors(a, parts, "full").attn_work == (64, 64, 34)


def test_unfused_attention_score_backward_in_order():
    """Kept: softmax output p = saved[1], dropout's output d = saved[2], its mask m = saved[3]. The second matmul's
    backward makes g0 and frees d; dropout's backward makes g1, frees g0 and m; PyTorch's softmax backward makes g2,
    frees g1 and p; CopySlices makes the base copy g3, the clone g4, masked_fill's g5, frees g5, g4, g2; g3 goes once
    the first matmul's backward has run. Score tensors alive: p d m g0 (3.5), p m g0 g1 (3.5), p g1 g2 (3),
    g2 g3 g4 g5 (4). With Megatron's fused kernel the softmax gradient is written in place into g1: p freed."""
    from estimator.memory.reserved import _score_backward
    u = 8
    assert _score_backward(1, 3, u, True) == (
        ("a", u), ("s", 2), ("a", u), ("t", 0), ("s", 3), ("a", u), ("t", 1), ("s", 1),
        ("a", u), ("a", u), ("a", u), ("t", 5), ("t", 4), ("t", 2), ("t", 3))
    assert _score_backward(1, 3, u, False) == (("a", u), ("s", 2), ("a", u), ("t", 0), ("s", 3), ("s", 1), ("t", 1))
    assert _score_backward(0, 1, u, False) == (("a", u), ("s", 0), ("t", 0))


def test_scores_before_the_softmax_live_to_the_end_of_the_core_attention():
    """DotProductAttention.forward holds the baddbmm output in its local ``matmul_result`` until it returns: made
    before the softmax output (saved[1]), freed after the last kept score tensor (dropout's mask, saved[3]), so it
    is alive beside dropout's output and mask. Keys: 1 the parameter, 2 the gradient buffer, then 3 the first saved
    tensor, 4 the scores, 5-7 the softmax output, dropout's output and mask; the scores freed after 7, then the
    backward's first gradient (of the mask's size)."""
    layer = LayerTensors((2 * MIB, 8 * MIB, 8 * MIB, 4 * MIB), (), (), (), before=((1, 8 * MIB, 3),))
    ev = events(_one_layer(chunks=(((), (layer,), (), False, False),)))
    i = ev.index(("mark", "fwd_bwd"))
    assert ev[i + 1:i + 8] == [("+", 3, 2 * MIB, None), ("+", 4, 8 * MIB, None), ("+", 5, 8 * MIB, None),
                               ("+", 6, 8 * MIB, None), ("+", 7, 4 * MIB, None), ("-", 4), ("+", 8, 4 * MIB, None)]
    from estimator.memory.activations import LayerActivations
    a = LayerActivations(attention=22, mlp=0, full=22, checkpoint=2, backward_peak=0, recompute_peak=0)
    assert layer_tensors(a, {"norm_in": 2, "scores": 20}, None, scores_input=8).before == ((1, 8, 3),)


def test_replay_of_unfused_attention_backward_by_hand():
    """One layer keeping only its 12 MiB softmax output, PyTorch's softmax, no dropout. The 2 MiB parameter takes a
    20 MiB segment; the output is cut from it (6 MiB left). Backward: g0 and g2 (12 MiB each) need segments of their
    own (B, C); g0 and the output freed (B free; the first segment 18 MiB free again); g3 takes B (best fit), g4 12 of
    the 18 MiB, g5 a fourth segment D. Peak 2 + 4 x 12 = 50 MiB allocated, 20 + 3 x 12 = 56 MiB reserved; the
    second iteration finds every block it needs: still 56 MiB, 4 segments."""
    from estimator.memory.reserved import _score_backward
    layer = LayerTensors((12 * MIB,), (), (), (), score_ops=_score_backward(0, 1, 12 * MIB, True))
    r = replay(events(_one_layer(grad_buffers=(), states=(), chunks=(((), (layer,), (), False, False),))))
    assert (r.peak_allocated, r.peak_reserved, r.segments) == (50 * MIB, 56 * MIB, 4)


def test_forward_temporaries_share_a_tensor_free_at_once_or_close_the_layer():
    """``LayerTensors.before`` entries, in their order: (1, 8 MiB, 0) is made and freed before saved[1]; (1, 6 MiB)
    is made before saved[1] and freed after it; (3, 5 MiB), 3 being past the last saved tensor, is made and freed
    at the layer's end. Keys: 1 the parameter, 2 saved[0], 3 the 8 MiB, 4 the 6 MiB, 5 saved[1], 6 saved[2], 7 the
    5 MiB."""
    layer = LayerTensors((2 * MIB, 3 * MIB, 4 * MIB), (), (), (), before=((1, 8 * MIB, 0), (1, 6 * MIB), (3, 5 * MIB)))
    ev = events(_one_layer(grad_buffers=(), states=(), chunks=(((), (layer,), (), False, False),)))
    i = ev.index(("mark", "fwd_bwd"))
    assert ev[i + 1:i + 11] == [("+", 2, 2 * MIB, None), ("+", 3, 8 * MIB, None), ("-", 3), ("+", 4, 6 * MIB, None),
                                ("+", 5, 3 * MIB, None), ("-", 4), ("+", 6, 4 * MIB, None), ("+", 7, 5 * MIB, None),
                                ("-", 7), ("+", 8, 4 * MIB, None)]


def test_sequence_parallel_communication_tensors_in_layer_order():
    """Transformer Engine under sequence parallelism (TransformerEngine @ d0067d0d module/layernorm_linear.py,
    module/linear.py): the QKV linear's all-gathered input (G) made before its output (saved[2]) and freed after it;
    the output projection's whole-sequence output (F) made and freed before the MLP's first tensor (saved[4]); fc1's
    gathered input held while fc1's output (saved[4]) is made; fc2's whole-sequence output at the layer's end
    (index 6 = len(saved)). Megatron's local linears gather into the global buffer: G = 0 leaves only the outputs."""
    from estimator.memory.reserved import _sequence_parallel
    names, mlp = ["norm_in", "norm_out", "qkv", "attn_out"], ["fc1_out", "act_out"]
    assert _sequence_parallel(names, 4, mlp, 64, 128) == ((2, 64, 2), (4, 128, 3), (4, 64, 4), (6, 128))
    assert _sequence_parallel(names, 4, mlp, 0, 128) == ((4, 128, 3), (6, 128))


def test_replay_of_a_gathered_input_by_hand():
    """The 2 MiB parameter takes a 20 MiB segment (request of 1-10 MiB), 18 MiB cached. saved[0] (3 MiB) from it,
    15 MiB left. The 24 MiB gathered input fits no cached block: a segment of its own (over 10 MiB: the request
    rounded to 2 MiB, 24 MiB). saved[1] (3 MiB) from the first segment's 15 MiB (best fit), 12 left; the gathered
    input freed: 24 MiB cached. Peak allocated 2 + 3 + 24 + 3 = 32 MiB. The backward's two 3 MiB gradients are cut
    from the first segment, which is whole again at the end; iteration 2 takes the same blocks (the 24 MiB request
    its own cached 24 MiB block). Reserved 20 + 24 = 44 MiB. Without the gathered input: one segment, 20 MiB,
    allocated at most 2 + 3 + 3 + 3 = 11 MiB (the first gradient beside both saved tensors)."""
    def run(before):
        layer = LayerTensors((3 * MIB, 3 * MIB), (), (), (), before=before)
        return replay(events(_one_layer(grad_buffers=(), states=(), chunks=(((), (layer,), (), False, False),))))
    r = run(((1, 24 * MIB, 1),))
    assert (r.peak_allocated, r.peak_reserved, r.segments) == (32 * MIB, 44 * MIB, 2)
    r = run(())
    assert (r.peak_allocated, r.peak_reserved, r.segments) == (11 * MIB, 20 * MIB, 1)


def test_context_parallel_all_to_all_has_its_own_pool_by_hand():
    """Context parallelism's all-to-all reorders q, k, v on Transformer Engine's CP stream (TransformerEngine @
    d0067d0d attention/dot_product_attention/context_parallel.py ``flash_attn_a2a_communicate``): a 3 MiB copy, then
    the 3 MiB tensor attention keeps, the copy freed; the backward's gradient from the same stream. The CP stream's
    pool has no block: a 20 MiB segment of its own ([copy 3][kept 3][14 free], the copy's 3 MiB freed); the
    gradient takes the freed 3 MiB (best fit), then all merge back to 20 MiB free. The 2 MiB parameter's 20 MiB
    segment of the default stream, 18 MiB free, serves none of them. Peak allocated 2 + 3 + 3 = 8 MiB, reserved
    20 + 20 = 40 MiB; iteration 2 reuses both. On one stream: 20 MiB."""
    cp = "context_parallel"
    layer = LayerTensors((3 * MIB,), (), (), (), side=((0, 1),))
    ev = events(_one_layer(grad_buffers=(), states=(), chunks=(((), (layer,), (), False, False),)))
    i = ev.index(("mark", "fwd_bwd"))
    assert ev[i + 1:i + 7] == [("+", 2, 3 * MIB, cp), ("+", 3, 3 * MIB, cp), ("-", 2), ("+", 4, 3 * MIB, cp),
                               ("-", 3), ("-", 4)]
    r = replay(ev)
    assert (r.peak_allocated, r.peak_reserved, r.segments) == (8 * MIB, 40 * MIB, 2)
    plain = LayerTensors((3 * MIB,), (), (), ())
    r = replay(events(_one_layer(grad_buffers=(), states=(), chunks=(((), (plain,), (), False, False),))))
    assert (r.peak_reserved, r.segments) == (20 * MIB, 1)


def test_layer_tensors_with_tensor_and_context_parallel_communication():
    """Saved: norm_in 30, qkv 50, attn_out 20 (attention 100 B), fc1_out 40. With the all-to-all: q, k, v (saved[1],
    after one copy) and the attention output (saved[2]) on the CP stream, each after two default-stream temporaries
    of its size (the exchange's inputs and outputs). With sequence parallelism (G = 64, F = 128): the entries of
    :func:`_sequence_parallel` at saved[1], before the MLP (3) and at the end (4). Scaled-down parts (attention
    saving less than its named tensors) or routed experts get none."""
    from estimator.memory.activations import LayerActivations
    a = LayerActivations(attention=100, mlp=40, full=140, checkpoint=10, backward_peak=0, recompute_peak=0)
    parts = {"norm_in": 30, "qkv": 50, "attn_out": 20, "fc1_out": 40}
    cp = layer_tensors(a, parts, None, cp_a2a=True)
    assert cp.saved == (30, 50, 20, 40)
    assert cp.side == ((1, 1), (2, 0))
    assert cp.before == ((1, 50, 1), (1, 50, 1), (2, 20, 2), (2, 20, 2))
    sp = layer_tensors(a, parts, None, sp_comm=(64, 128))
    assert sp.side == () and sp.before == ((1, 64, 1), (3, 128, 2), (3, 64, 3), (4, 128))
    small = a._replace(attention=50)
    assert layer_tensors(small, parts, None, sp_comm=(64, 128), cp_a2a=True).before == ()
    assert layer_tensors(a, parts, None, experts=4, sp_comm=(64, 128)).before == ()


def test_alltoall_dispatcher_tensors_in_megatron_order():
    """MoELayer.custom_forward (Megatron-LM @ d98e8a64 moe_layer.py) holds the permuted tokens and the all-to-all's
    output to its end: with 4 local experts both are made before the sorted experts' input (saved[2]) and freed
    after the layer's last saved tensor (index 4 = len(saved): after the end ops). At the end: the experts' output
    (t0), its un-sorted copy (t1), t0 dropped, the all-to-all back (t2), t1 dropped, the layer's output (t3, 3 B),
    t2 dropped, t3 handed on. One local expert: no sorted copy (the all-to-all's output is the experts' input) and
    no un-sorting."""
    from estimator.memory.reserved import _alltoall_dispatch
    assert _alltoall_dispatch(2, 4, 10, 3, 4) == (
        ((2, 10, 4), (2, 10, 4)),
        (("a", 10), ("a", 10), ("t", 0), ("a", 10), ("t", 1), ("a", 3), ("t", 2), ("t", 3)))
    assert _alltoall_dispatch(2, 4, 10, 3, 1) == (
        ((2, 10, 4),), (("a", 10), ("a", 10), ("t", 0), ("a", 3), ("t", 1), ("t", 2)))


def test_end_ops_run_before_the_held_temporaries_go():
    """Keys: 1 the parameter, 2 saved[0] (2 MiB), 3 the 5 MiB held to the layer's end, 4 saved[1] (3 MiB); the end
    ops make 5 (4 MiB) and 6 (6 MiB) and free them; then 3 goes; the backward's first gradient (3 MiB) follows."""
    layer = LayerTensors((2 * MIB, 3 * MIB), (), (), (), before=((1, 5 * MIB, 2),),
                         end_ops=(("a", 4 * MIB), ("a", 6 * MIB), ("t", 0), ("t", 1)))
    ev = events(_one_layer(grad_buffers=(), states=(), chunks=(((), (layer,), (), False, False),)))
    i = ev.index(("mark", "fwd_bwd"))
    assert ev[i + 1:i + 10] == [("+", 2, 2 * MIB, None), ("+", 3, 5 * MIB, None), ("+", 4, 3 * MIB, None),
                                ("+", 5, 4 * MIB, None), ("+", 6, 6 * MIB, None), ("-", 5), ("-", 6), ("-", 3),
                                ("+", 7, 3 * MIB, None)]


def test_layer_tensors_with_the_alltoall_dispatcher():
    """Saved: norm_in 30, qkv 50 (attention 80), expert_in 40, expert_fc1_out 60 (MLP 100): the dispatcher's entries
    at the experts' input (saved[2]), held to index 4. Run one by one (SequentialMLP) or with expert-parallel
    overlap's kept dispatched tokens: none."""
    from estimator.memory.activations import LayerActivations
    a = LayerActivations(attention=80, mlp=100, full=180, checkpoint=10, backward_peak=0, recompute_peak=0)
    parts = {"norm_in": 30, "qkv": 50, "expert_in": 40, "expert_fc1_out": 60}
    lt = layer_tensors(a, parts, None, dispatch=(16, 8, 4))
    assert lt.saved == (30, 50, 40, 60)
    assert lt.before == ((2, 16, 4), (2, 16, 4))
    assert lt.end_ops == (("a", 16), ("a", 16), ("t", 0), ("a", 16), ("t", 1), ("a", 8), ("t", 2), ("t", 3))
    kept = layer_tensors(a._replace(mlp=105), {**parts, "dispatched": 5}, None, dispatch=(16, 8, 4))
    assert kept.saved == (30, 50, 40, 60, 5) and kept.end_ops == () and kept.before == ()
    assert layer_tensors(a, parts, None, experts=4, dispatch=(16, 8, 4)).end_ops == ()


def test_schedule_passes_lump_all_but_the_last_forwards():
    """Three micro-batches in flight of eight, two replayed tensor by tensor: the first forward is one tensor; two
    steady backward-forward cycles; the three backwards."""
    assert schedule_passes(1, (3,), 8, 2) == (
        ("F", 0, 1), ("F", 0, 0), ("F", 0, 0), ("B", 0, 0), ("F", 0, 0), ("B", 0, 0),
        ("F", 0, 0), ("B", 0, 0), ("B", 0, 0), ("B", 0, 0))
    # 40 in flight, 2 detailed: 38 lumped into 16 tensors (6 of 3 micro-batches, 10 of 2), one backward each
    passes = schedule_passes(1, (40,), None, 2)
    lumps = [p[2] for p in passes if p[0] == "F" and p[2]]
    assert lumps == [3] * 6 + [2] * 10 and sum(p[0] == "B" for p in passes) == 16 + 2 + 2


def _tiny(**training) -> dict:
    cfg = load_config(ROOT / "presets" / "tiny.yaml").to_dict()
    cfg["training"].update(training)
    return cfg


def test_tiny_config_replay_keeps_allocated_and_reserves_whole_segments():
    """The tiny preset with the replay: every stage's allocated is the fraction model's; reserved is at least
    allocated and, where the simulator's peak is above it, a sum of segments, each a multiple of 2 MiB (small
    segments are 2 MiB, large ones 20 MiB or the request rounded up to 2 MiB)."""
    plain = estimate(_tiny())
    rep = estimate(_tiny(reserved_memory_model="replay"))
    assert [s.allocated_bytes for s in rep.stages] == [s.allocated_bytes for s in plain.stages]
    for s in rep.stages:
        assert s.reserved_bytes >= s.allocated_bytes
        assert s.reserved_bytes == s.allocated_bytes or s.reserved_bytes % (2 * MIB) == 0
        assert s.device_bytes - s.reserved_bytes == plain.stages[s.stage].device_bytes - \
            plain.stages[s.stage].reserved_bytes
    assert any("simulation of PyTorch's caching allocator" in a for a in rep.assumptions)


def test_long_pipeline_replays_a_bounded_number_of_stages():
    """PP 16: at most 8 stages are replayed, the others take the nearest replayed stage's reserved / allocated
    ratio; every stage keeps reserved >= allocated."""
    cfg = _tiny(reserved_memory_model="replay", world_size=16, global_batch_size=64)
    cfg["model"]["num_layers"] = 32
    cfg["parallelism"]["pipeline_model_parallel_size"] = 16
    est = estimate(cfg)
    assert len(est.stages) == 16
    assert all(s.reserved_bytes >= s.allocated_bytes for s in est.stages)


def test_alloc_conf_is_checked_when_replayed():
    with pytest.raises(ConfigError, match="pytorch_cuda_alloc_conf"):
        estimate(_tiny(reserved_memory_model="replay", pytorch_cuda_alloc_conf="expandable_segment:True"))
    est = estimate(_tiny(reserved_memory_model="replay", pytorch_cuda_alloc_conf="expandable_segments:True"))
    assert any("PYTORCH_CUDA_ALLOC_CONF expandable_segments:True" in a for a in est.assumptions)


def test_megatron_launch_line_environment():
    imp = read_megatron_args("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun --nproc-per-node 8 "
                             "pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                             "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --vocab-size 1000")
    assert imp.config["training"]["pytorch_cuda_alloc_conf"] == "expandable_segments:True"
    assert any(n.startswith("PYTORCH_CUDA_ALLOC_CONF=") for n in imp.notes)


CASES = project_cases()


def _errors(replayed: bool) -> list[float]:
    return [c.reserved_replay_error_pct if replayed else c.reserved_error_pct for c in CASES]


def test_reserved_on_the_project_runs():
    """max_memory_reserved of the project's 80 one-GPU runs (validation/project_runs.yaml) against both models.
    allocated x 1.05 is low in 71 runs (median |error| 4.85 %, worst -17.84 %, whole-iteration CUDA graphs). The
    replay, with the optimizer step's temporaries one tensor per parameter as PyTorch's foreach Adam makes them,
    FSDP2's per-unit gradients, the optimizer's parameters in DDP's buffer order (routed experts in the dense buffer
    without expert parallelism), one saved tensor per local expert (SequentialMLP) and Megatron's empty_cache calls,
    is low in 60 (median |error| 0.98 %, worst -11.50 %: the fp32 run; worst over +3.39 %: 16 experts of width 352;
    78 of 80 within 5 %). The issue's target (median <= 2 %, max <= 5 %) is met but for the fp32 run and the
    sequence-8192 run (-9.40 %); these bounds hold the figures reached."""
    frac, rep = _errors(False), _errors(True)
    assert len(frac) == 80
    assert statistics.median(abs(e) for e in frac) == pytest.approx(4.85, abs=0.01)
    assert max(abs(e) for e in frac) == pytest.approx(17.84, abs=0.01)
    assert statistics.median(abs(e) for e in rep) <= 1.0
    assert max(abs(e) for e in rep) <= 11.55
    assert max(rep) <= 3.4
    assert sum(abs(e) <= 5.0 for e in rep) >= 78
    # the replay beats the fixed fraction on both
    assert statistics.median(abs(e) for e in rep) < statistics.median(abs(e) for e in frac)
    assert max(abs(e) for e in rep) < max(abs(e) for e in frac)


def test_reserved_on_the_simumax_runs():
    """max_memory_reserved of the 19 SimuMax B200 runs (validation/measured.yaml: 8 GPUs, Transformer Engine; the
    busiest rank's figure) against the replay. Transformer Engine's sequence-parallel gathers and whole-sequence
    outputs, context parallelism's all-to-all on its own stream's pool and the MoE all-to-all dispatcher's tokens
    took the median |error| from 2.27 % to 1.76 % with Transformer Engine 2.18's fused cross entropy; with the
    release the runs used (2.11, validation/measured.yaml: the loss writes its gradient into the bf16 logits) the
    median is 2.20 %, worst -5.62 % (Llama 3 70B, CP8 at sequence 32768, whose eight ranks allocate the same bytes to
    3 MiB and reserve 107.43-111.94 GiB: -1.65 % against the least-reserving one). Seen while the rules were written;
    these bounds hold the figures reached."""
    from dataclasses import replace
    from estimator.memory.assemble import stage_memory
    from estimator.model.resolve import resolve
    from estimator.validation.calibration import case_config, load_cases
    errs = []
    for case in load_cases():
        if not case["id"].startswith("smx-"):
            continue
        cfg, nmb = case_config(case)
        r = replace(resolve(load_config(cfg)), m=nmb)
        m = case["measured"]["peak_reserved_gib"] * 2 ** 30
        errs.append((stage_memory(r, replay=True).peak.reserved_bytes - m) / m * 100)
    assert len(errs) == 19
    assert statistics.median(abs(e) for e in errs) <= 2.21
    assert max(abs(e) for e in errs) <= 5.65


def test_empty_cache_run_is_replayed_as_it_ran():
    """prj-b6-b6-dense-log-flags ran with --empty-unused-memory-level 2: measured 12,400,459,776 B reserved, 5.0 %
    below the same model run without it on the same GPU type (prj-b4-b4-dense-det, 13,048,479,744 B). Without the
    empty_cache calls the replay read +5.26 %; with them it is within 1 % (-0.66 %)."""
    c = next(c for c in CASES if c.id == "prj-b6-b6-dense-log-flags")
    assert abs(c.reserved_replay_error_pct) < 1.0


def test_replay_holds_whole_iteration_graphs():
    """The whole-iteration CUDA graph runs keep the captured step in a private pool: allocated x 1.05 misses it by
    14-18 %; the replay, which models that pool, is within 6 % (-1.58 % and -5.49 %)."""
    graphs = [c for c in CASES if "full-iter-graph" in c.id]
    assert len(graphs) == 2
    for c in graphs:
        assert abs(c.reserved_error_pct) > 14
        assert abs(c.reserved_replay_error_pct) < 6


def test_allocated_does_not_move_with_the_replay():
    assert all(abs(c.comparison.error_pct) < 1.6 for c in CASES)
    assert statistics.median(abs(c.comparison.error_pct) for c in CASES) == pytest.approx(0.19, abs=0.01)


def test_phase_table_locates_each_miss(capsys):
    """``benchmarks/accuracy.py --phases``: one row per project run whose replayed reserved peak is off by more than
    3 %, each phase's measured reserved peak taken from validation/project_runs.yaml. The fp32 run's first
    forward/backward measured 8,724,152,320 B (8.72 GB), its second 11,446,255,616 B (11.45 GB); the replay reads
    below both by more than 2 % of them, so the gap opens at the first pass."""
    from benchmarks.accuracy import _phase_gaps

    _phase_gaps(CASES, 3.0)
    table = capsys.readouterr().out.split("\n== first forward/backward")[0]   # the listings after it: tests below
    rows = [line for line in table.splitlines() if line.startswith("prj-")]
    assert len(rows) == sum(abs(c.reserved_replay_error_pct) > 3.0 for c in CASES)
    fp32 = next(line for line in rows if line.startswith("prj-b1-dense-fp32 "))
    assert "opens fwd_bwd@1" in fp32
    assert "fwd_bwd@1   8.72/" in fp32 and "fwd_bwd@2  11.45/" in fp32


def test_twins_show_the_reserved_spread_of_the_same_allocations(capsys):
    """``benchmarks/accuracy.py --phases``: runs whose measured allocated peaks agree phase by phase are grouped.
    The dense base model was measured three times (batch 1 on an H200; batches 4 and 7, with --deterministic-mode
    and --calculate-per-token-loss, on an H100), every phase's allocated peak the same (first forward/backward
    7,913,163,264 B). Reserved, from validation/project_runs.yaml: first forward/backward 9,393,143,808 B against
    8,325,693,440 B twice, a spread of 1,067,450,368 B = 1.07 GB; whole run 13,233,029,120, 13,048,479,744 and
    13,182,697,472 B, a spread of 184,549,376 B = 0.18 GB, 1.4 % of 13,048,479,744 B."""
    from benchmarks.accuracy import _twins
    from estimator.validation.project_runs import load_data

    _twins({c["id"]: c for c in load_data()["cases"]})
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("prj-b1-dense-base "))
    assert "prj-b4-b4-dense-det (batch 4) 8.33 / 13.05" in line
    assert "prj-b7-b7-dense-per-token-loss (batch 7) 8.33 / 13.18" in line
    assert line.endswith("spread 1.07 / 0.18 GB (1.4 % of the peak)")


def test_first_pass_excess_names_one_of_two_identical_allocations(capsys):
    """The first forward/backward of ``prj-b1-dense-base`` and ``prj-b4-b4-dense-det`` allocated the same
    7,913,163,264 B at their peaks but reserved 9,393,143,808 and 8,325,693,440 B, 1.07 GB apart: whatever the replay
    reads for that model, at most one of them can be within 0.5 GB of it, so the listing (runs more than 0.5 GB above
    the replay) holds the batch-1 run and not the batch-4 one; the fp32 run's excess (8,724,152,320 B measured) is
    listed in GiB."""
    from benchmarks.accuracy import _first_pass
    from estimator.validation.project_runs import load_data

    _first_pass({c["id"]: c for c in load_data()["cases"]})
    rows = [x for x in capsys.readouterr().out.splitlines() if x.startswith("prj-")]
    names = [x.split()[0] for x in rows]
    assert "prj-b1-dense-base" in names and "prj-b4-b4-dense-det" not in names
    fp32 = next(x for x in rows if x.startswith("prj-b1-dense-fp32 "))
    assert "batch 1 NVIDIA H200" in fp32 and " GiB" in fp32
