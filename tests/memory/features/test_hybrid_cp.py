"""Dynamic (hybrid) context parallelism: parallelism.hybrid_context_parallel with max_seqlen_per_dp_cp_rank.

Sources, Megatron-LM @ d98e8a64: megatron/core/pipeline_parallel/hybrid_cp_schedule.py (``gpus_needed``: a sequence
of L tokens runs over 2^ceil(log2(L / M)) of the data x context-parallel ranks; ``hybrid_context_parallel_forward_
backward`` calls ``forward_step`` then ``backward_step`` for each sub-sample, so one is in flight), megatron/core/
datasets/data_schedule.py (the packed samples are split into their sequences before scheduling), megatron/core/
parallel_state.py ``create_hybrid_dp_cp_groups`` (one group per power of two from 2 below dp x cp),
megatron/training/arguments.py (no pipeline parallelism, no CUDA graph, no Megatron-FSDP).

The small model of tests/memory/test_memory.py: 4 layers, h = 1024, 8 heads of 128, GeLU MLP f = 4096, no biases,
RMSNorm, flash attention, bf16. Its layer keeps 32,800 B per token (12h + 4a attention, 4h + 4f MLP,
test_dense_layer_activations_by_hand).
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate
from estimator.config.derived import hybrid_cp_group, hybrid_cp_groups, hybrid_cp_shard
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.megatron_args import read_megatron_args, to_megatron_args
from tests.conftest import make_config

MIB = 2 ** 20
H, F, V, L = 1024, 4096, 32000, 4
PER_TOKEN = 12 * H + 4 * 8 + 4 * H + 4 * F          # 32,800 B a layer
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True,
             max_position_embeddings=32768)


def est(par=None, seq=32768, world=8, mbs=1, **tr):
    return estimate(make_config(MODEL, par, {"seq_length": seq, "world_size": world, "micro_batch_size": mbs,
                                             "global_batch_size": 64, **tr}))


def hybrid(m, **par):
    return {"hybrid_context_parallel": True, "max_seqlen_per_dp_cp_rank": m, **par}


def layers(e):
    s = e.stages[0]
    return s.activations["attention"] + s.activations["mlp"]


def test_group_and_shard_by_hand():
    """gpus_needed by hand: 32,768 / 4,096 = 8 -> 8 ranks; 10,000 / 4,096 = 2.44 -> 4; 4,097 -> 2; 4,096 -> 1.
    The largest shard: 4,096 tokens, over 8 ranks when sequences reach 32,768 tokens, over 2 when they reach
    10,000 (8,192 = 2 x 4,096 is the longest sequence that fills its shards; 10,000 tokens over 4 ranks is 2,500
    each); sequences no longer than M run whole on one rank. Groups: dp x cp 8 -> sizes 2 and 4 (8 is the data x
    context-parallel group itself); 16 -> 2, 4, 8; 2 -> none."""
    assert [hybrid_cp_group(n, 4096) for n in (32768, 10000, 4097, 4096, 1)] == [8, 4, 2, 1, 1]
    assert [hybrid_cp_shard(n, 4096) for n in (32768, 10000, 6000, 2048)] == [(8, 32768), (2, 8192), (1, 4096),
                                                                              (1, 2048)]
    assert (hybrid_cp_groups(8), hybrid_cp_groups(16), hybrid_cp_groups(2)) == ([2, 4], [2, 4, 8], [])


def test_one_sequence_of_m_tokens_on_one_rank():
    """seq_length 6,000, M = 4,096, micro-batch size 4: the busiest micro-batch is one sequence of 4,096 tokens on
    one rank (a longer one goes over 2 ranks, 3,000 tokens each): 4 layers x 32,800 B x 4,096 = 537,395,200 B,
    whatever the micro-batch size (a packed sample is split into its sequences, run one at a time)."""
    e = est(hybrid(4096), seq=6000, mbs=4)
    assert layers(e) == L * PER_TOKEN * 4096 == 537_395_200


def test_sequences_shorter_than_m_run_whole():
    """seq_length 2,048 <= M = 4,096: one rank per sequence, 2,048 tokens: 4 x 32,800 x 2,048 = 268,697,600 B, the
    plain run's layers at micro-batch size 1 (here asked for 2)."""
    assert layers(est(hybrid(4096), seq=2048, mbs=2)) == L * PER_TOKEN * 2048 == layers(est(seq=2048))


def test_long_sequences_are_a_context_parallel_run_of_m_tokens_a_rank():
    """seq_length 32,768 over dp 8 (cp 1), M = 4,096: the busiest shard is 4,096 tokens of a 32,768-token sequence
    over 8 ranks: the activations and model states of plain CP 8 at 32,768 tokens (dp x cp = 8 either way, so the
    distributed optimizer shards alike). Communicators of more than one rank: the data x context-parallel group and
    the hybrid groups of 2 and 4 ranks, against plain CP 8's data x context-parallel group and CP group: one more,
    128 MiB."""
    h, cp8 = est(hybrid(4096)).stages[0], est({"context_parallel_size": 8}).stages[0]
    assert h.activations == cp8.activations and h.allocated_bytes == cp8.allocated_bytes
    assert (h.weights_bytes, h.optimizer_bytes) == (cp8.weights_bytes, cp8.optimizer_bytes)
    assert h.device_bytes - cp8.device_bytes == 128 * MIB


def test_configured_cp_keeps_the_product():
    """dp 4 x cp 2 (world 8), M = 8,192, seq_length 32,768: 32,768 / 8,192 = 4 ranks, 8,192 tokens each: plain CP 4
    at 32,768 tokens (dp 2 x cp 4 = 8). Communicators: the data x context-parallel group, the configured CP group of
    2 and the hybrid groups of 2 and 4, against plain CP 4's data x context-parallel group and CP group of 4: two
    more, 256 MiB."""
    h, cp4 = est(hybrid(8192, context_parallel_size=2)).stages[0], est({"context_parallel_size": 4}).stages[0]
    assert h.allocated_bytes == cp4.allocated_bytes
    assert h.device_bytes - cp4.device_bytes == 256 * MIB


@pytest.mark.parametrize("par, world, seq, field, words", [
    ({"hybrid_context_parallel": True}, 8, 32768, "parallelism.max_seqlen_per_dp_cp_rank", "is required"),
    ({"max_seqlen_per_dp_cp_rank": 4096}, 8, 32768, "parallelism.max_seqlen_per_dp_cp_rank",
     "applies only with hybrid_context_parallel"),
    (hybrid(4096, pipeline_model_parallel_size=2), 16, 32768, "parallelism.pipeline_model_parallel_size",
     "must be 1"),
    (hybrid(4096), 6, 16384, "parallelism.hybrid_context_parallel", "power of two, at least 2 (got 6)"),
    (hybrid(4096), 1, 4096, "parallelism.hybrid_context_parallel", "(got 1)"),
    # 32,768 / 2,048 = 16 ranks > dp x cp 8: never scheduled; 32,768 / 8 = 4,096 is the least M
    (hybrid(2048), 8, 32768, "parallelism.max_seqlen_per_dp_cp_rank", "it would need 16 ranks, more than the "
     "data x context-parallel size 8; use at least 4096"),
])
def test_rules(par, world, seq, field, words):
    with pytest.raises(ConfigError) as exc:
        est(par, seq=seq, world=world)
    assert any(p.field == field and words in p.message for p in exc.value.problems), exc.value.problems


def test_megatron_core_refusals():
    """Megatron-LM's arguments.py: no CUDA graph, no Megatron-FSDP; MLA asserts it is off."""
    for par, tr, field in ((hybrid(4096), {"cuda_graph_impl": "transformer_engine"}, "training.cuda_graph_impl"),
                           (hybrid(4096, use_megatron_fsdp=True), {}, "parallelism.use_megatron_fsdp")):
        with pytest.raises(ConfigError) as exc:
            est(par, **tr)
        assert any(p.field == field for p in exc.value.problems), exc.value.problems


@pytest.mark.parametrize("par, words", [
    (hybrid(4096, cp_comm_type="allgather"), "cp_comm_type allgather"),
    (hybrid(4096, tensor_model_parallel_size=2, tp_comm_overlap=True), "tp_comm_overlap"),
    ({**hybrid(4096), "rl": "grpo"}, "rl_algorithm grpo"),
])
def test_not_modelled(par, words):
    par = dict(par)
    tr = {"rl_algorithm": par.pop("rl")} if "rl" in par else {}
    with pytest.raises(UnsupportedError) as exc:
        est(par, world=16, sequence_parallel=par.get("tensor_model_parallel_size", 1) > 1, **tr)
    assert words in str(exc.value)


FLAGS = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 32768 "
         "--max-position-embeddings 32768 --vocab-size 32000 --micro-batch-size 1 --bf16 --use-distributed-optimizer "
         "--calculate-per-token-loss")


def test_megatron_lm_flags_and_back():
    """--hybrid-context-parallel --max-seqlen-per-dp-cp-rank 4096 become the two fields and are written back,
    with the configured --seq-length (not the sub-sample's)."""
    cfg = read_megatron_args(FLAGS + " --hybrid-context-parallel --max-seqlen-per-dp-cp-rank 4096",
                             world_size=8).config
    assert cfg["parallelism"] == {"hybrid_context_parallel": True, "max_seqlen_per_dp_cp_rank": 4096}
    back = " ".join(to_megatron_args(cfg))
    assert "--hybrid-context-parallel --max-seqlen-per-dp-cp-rank 4096" in back and "--seq-length 32768" in back
    assert "--context-parallel-size" not in back


def test_bridge_refuses_it():
    """Megatron-Bridge @ 067f987d passes model.hybrid_context_parallel to parallel_state but never wraps its data
    iterator in Megatron-Core's HybridCPDataLoaderWrapper (its steps call get_batch_on_this_cp_rank with
    is_hybrid_cp=False), so the per-sequence schedule has no sub-samples to read: refused by name, with the two
    fields that belong to it."""
    from estimator.formats.bridge.config import BridgeRefusedError
    base = {"model": {"num_layers": 2, "hidden_size": 1024, "num_attention_heads": 8, "ffn_hidden_size": 4096,
                      "vocab_size": 32000, "seq_length": 16384},
            "train": {"micro_batch_size": 1}, "mixed_precision": "bf16_mixed",
            "optimizer": {"use_distributed_optimizer": True}}
    for section, fields in (("model", {"hybrid_context_parallel": True, "max_seqlen_per_dp_cp_rank": 4096}),
                            ("dataset", {"hybrid_context_parallel": True})):
        cfg = {**base, section: {**base.get(section, {}), **fields}}
        with pytest.raises(BridgeRefusedError) as exc:
            read_bridge_config(cfg, world_size=8)
        assert {f.split(" = ")[0] for f, _ in exc.value.refused} == {f"{section}.{k}" for k in fields}
        assert all("HybridCPDataLoaderWrapper" in why for _, why in exc.value.refused)
    from estimator.formats.bridge.export import to_bridge_dict
    with pytest.raises(UnsupportedError, match="HybridCPDataLoaderWrapper"):
        to_bridge_dict(make_config(MODEL, hybrid(4096), {"seq_length": 32768, "world_size": 8}))


def test_the_report_and_the_layout_tools_see_the_layout_as_written():
    """The estimate is the sub-sample's (CP 8 over 32,768 tokens), but the report's layout and the sweeps keep the
    configured one: dp 8, cp 1, seq_length 32,768, micro-batch size 2. The micro-batch sweep tries the sizes that
    divide 64 / DP 8 = 8 (1, 2, 4, 8) and every one estimates alike: each sequence runs alone."""
    from estimator.plan.sweep import sweep
    cfg = make_config(MODEL, hybrid(4096), {"seq_length": 32768, "world_size": 8, "micro_batch_size": 2,
                                            "global_batch_size": 64})
    par = estimate(cfg).to_dict()["parallel"]
    assert (par["dp"], par["cp"], par["seq_length"], par["micro_batch_size"]) == (8, 1, 32768, 2)
    _, mbs, _ = sweep(cfg, 80 * 2 ** 30)
    assert [p.x for p in mbs.points] == [1, 2, 4, 8] and len({p.peak_bytes for p in mbs.points}) == 1


def test_evaluation_runs_one_sequence_at_a_time_too():
    """Megatron-LM @ d98e8a64 : schedules.py forward_backward_no_pipelining sends evaluation (forward_only) through
    hybrid_context_parallel_forward_backward as well: --eval-micro-batch-size 4 changes nothing, where plain CP 8 at
    the same sub-sample size holds 4 sequences in its evaluation forward (tests/memory/test_phases.py)."""
    tr = {"recompute_granularity": "full", "eval_interval": 10}
    one, four = est(hybrid(4096), **tr).stages[0], est(hybrid(4096), eval_micro_batch_size=4, **tr).stages[0]
    assert four.phase_bytes == one.phase_bytes
    cp8 = {"context_parallel_size": 8}
    assert est(cp8, **tr).stages[0].phase_bytes["evaluation"] == one.phase_bytes["evaluation"]
    assert est(cp8, eval_micro_batch_size=4, **tr).stages[0].phase_bytes["evaluation"] > one.phase_bytes["evaluation"]
