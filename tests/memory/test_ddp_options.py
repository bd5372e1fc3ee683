"""Data-parallel options that were refused before issue 28 (branch flagsB28): Megatron-LM's
--create-all-gather-group, --ddp-param-name-patterns-for-fp32-local-accumulation all (Bridge's
ddp.param_name_patterns_for_fp32_local_accumulation: ['all']) and --ddp-reduce-scatter-with-fp32-accumulation
(Bridge's ddp.reduce_scatter_with_fp32_accumulation; megatron/core/distributed/reduce_scatter_with_fp32_accumulation.py:
an all-to-all into a receive copy of the bucket, then the fp32 sum of the shard).

Sources, Megatron-LM @ d98e8a64:

- megatron/core/distributed/param_and_grad_buffer.py ``_ParamAndGradBuffer.__init__``: a parameter whose name
  matches a pattern ('all' matches every one) gets ``param.main_grad = torch.empty_like(param.main_grad,
  dtype=torch.float32)``, kept in ``self.extra_main_grads`` for the whole run, beside its slice of the gradient
  buffer; distributed_data_parallel_config.py asserts ``grad_reduce_in_fp32`` is off.
- megatron/core/parallel_state.py ``create_all_gather_groups`` (called by megatron/training/training.py
  ``get_model``): copies of the data x context-parallel group and, with EP > 1, of the expert-data-parallel
  group, used only by Megatron-FSDP's weight all-gathers (mcore_fsdp_adapter.py ``fsdp_group_ag``); each used
  group of more than one rank is one more NCCL communicator, 128 MiB in this model (NCCL_BYTES_PER_COMMUNICATOR).

The model below: 2 layers, h 1,024, 8 heads, FFN 4,096 (gelu, no gate), vocabulary 32,000, tied, RMSNorm, no
biases: embedding 32,000 x 1,024 = 32,768,000; a layer's QKV 1,024 x 3,072 = 3,145,728, projection 1,048,576,
MLP 2 x 1,024 x 4,096 = 8,388,608, two norms 2,048; final norm 1,024. Total 32,768,000 + 2 x 12,584,960 + 1,024 =
57,938,944 parameters, all on one GPU (no TP or PP).
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.formats.bridge.config import BridgeRefusedError, read_bridge_config
from estimator.formats.bridge.export import to_bridge_dict
from estimator.formats.megatron_args import RefusedFlagsError, read_megatron_args, to_megatron_args
from tests.conftest import make_config

MIB = 2 ** 20
PARAMS = 57_938_944
MODEL = dict(num_layers=2, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
             activation_func="gelu", gated_linear_unit=False)
BF16_GRADS = {"accumulate_allreduce_grads_in_fp32": False}
FSDP = {"use_megatron_fsdp": True}


def est(par=None, pr=None, world=2, model=None):
    return estimate(make_config({**MODEL, **(model or {})}, par,
                                {"world_size": world, "use_distributed_optimizer": True}, pr)).stages[0]


def test_fp32_local_accumulation_adds_an_fp32_gradient_per_parameter():
    """bf16 gradient buffer (2 B) + the fp32 main_grad of every parameter (4 B): 4 x 57,938,944 = 231,755,776 B
    (221.0 MiB) more gradients, held for the whole run, so the allocated peak grows by the same."""
    base, local = est(pr=BF16_GRADS), est({"fp32_local_grad_accumulation": True}, BF16_GRADS)
    assert base.gradients_bytes == 2 * PARAMS
    assert local.gradients_bytes == 6 * PARAMS
    assert local.allocated_bytes - base.allocated_bytes == 4 * PARAMS == 231_755_776


@pytest.mark.parametrize("par, pr, rule", [
    ({}, {}, "grad_reduce_in_fp32"),                     # bf16 weights: Megatron-LM's default is an fp32 buffer
    (FSDP, BF16_GRADS, "Megatron-FSDP and PyTorch FSDP2 do not read it"),
])
def test_fp32_local_accumulation_rules(par, pr, rule):
    with pytest.raises(ConfigError, match=rule) as exc:
        est({**par, "fp32_local_grad_accumulation": True}, pr)
    assert any(p.field == "parallelism.fp32_local_grad_accumulation" for p in exc.value.problems)


def test_all_gather_group_is_one_communicator_more_with_megatron_fsdp():
    """Megatron-FSDP over 2 data-parallel ranks: the all-gather copy of that group, 128 MiB of NCCL buffers on the
    device, nothing in PyTorch's allocator. Without Megatron-FSDP, or with no_shard (no weight all-gather), the
    group is never used: 0 B."""
    base, ag = est(FSDP), est({**FSDP, "create_all_gather_group": True})
    assert ag.allocated_bytes == base.allocated_bytes
    assert ag.device_bytes - base.device_bytes == 128 * MIB
    assert est({"create_all_gather_group": True}).device_bytes == est().device_bytes
    no_shard = {**FSDP, "data_parallel_sharding_strategy": "no_shard"}
    assert est({**no_shard, "create_all_gather_group": True}).device_bytes == est(no_shard).device_bytes


def test_all_gather_group_with_experts_adds_the_expert_data_parallel_copy():
    """8 experts, EP 2 on 4 GPUs: data x context-parallel group 4 ranks, expert-data-parallel 4 / 2 = 2 ranks, so
    two communicators more: 2 x 128 MiB = 256 MiB."""
    moe = {"num_experts": 8, "moe_router_topk": 2}
    par = {**FSDP, "expert_model_parallel_size": 2}
    base = est(par, world=4, model=moe)
    ag = est({**par, "create_all_gather_group": True}, world=4, model=moe)
    assert ag.device_bytes - base.device_bytes == 256 * MIB


BASE = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 4096 "
        "--max-position-embeddings 4096 --vocab-size 32000 --micro-batch-size 1 --bf16 --use-distributed-optimizer ")


def test_megatron_lm_flags_are_read_and_written():
    cfg = read_megatron_args(BASE + "--grad-reduce-in-bf16 --ddp-param-name-patterns-for-fp32-local-accumulation all",
                             world_size=2).config
    assert cfg["parallelism"]["fp32_local_grad_accumulation"] is True
    assert "--ddp-param-name-patterns-for-fp32-local-accumulation all" in " ".join(to_megatron_args(cfg))
    cfg = read_megatron_args(BASE + "--use-megatron-fsdp --create-all-gather-group", world_size=2).config
    assert cfg["parallelism"]["create_all_gather_group"] is True
    assert "--create-all-gather-group" in to_megatron_args(cfg)


def test_other_name_patterns_are_refused_by_value():
    """The estimator does not match parameter names, so only 'all' is modelled."""
    with pytest.raises(RefusedFlagsError, match="'all'") as exc:
        read_megatron_args(BASE + "--grad-reduce-in-bf16 --ddp-param-name-patterns-for-fp32-local-accumulation "
                           "'*router*'", world_size=2)
    assert exc.value.refused[0][0].startswith("--ddp-param-name-patterns-for-fp32-local-accumulation")
    with pytest.raises(BridgeRefusedError, match="ddp.param_name_patterns_for_fp32_local_accumulation"):
        read_bridge_config({**BRIDGE, "ddp": {"param_name_patterns_for_fp32_local_accumulation": ["*router*"]}},
                           world_size=2)


BRIDGE = {"model": {"num_layers": 2, "hidden_size": 1024, "num_attention_heads": 8, "ffn_hidden_size": 4096,
                    "vocab_size": 32000, "seq_length": 4096},
          "train": {"micro_batch_size": 1}, "mixed_precision": "bf16_mixed"}


def test_bridge_field_gives_the_same_configuration():
    """Bridge's ddp.param_name_patterns_for_fp32_local_accumulation is DDP's field itself (Megatron-LM's flag
    fills it); Bridge's bf16_mixed preset sets grad_reduce_in_fp32, so the recipe turns it off to use it."""
    data = {**BRIDGE, "mixed_precision": {"_preset_": "bf16_mixed", "grad_reduce_in_fp32": False},
            "ddp": {"use_distributed_optimizer": True, "param_name_patterns_for_fp32_local_accumulation": ["all"]},
            "optimizer": {"use_distributed_optimizer": True}}
    cfg = read_bridge_config(data, world_size=2).config
    assert cfg["parallelism"]["fp32_local_grad_accumulation"] is True
    assert to_bridge_dict(cfg)["ddp"]["param_name_patterns_for_fp32_local_accumulation"] == ["all"]


FULL = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1, "seq_length": 256}


def test_fp32_reduce_scatter_holds_a_receive_copy_and_the_fp32_shard_sum():
    """--ddp-reduce-scatter-with-fp32-accumulation, distributed optimizer over DP 2, bf16 gradient buffer, no
    overlap_grad_reduce (one bucket): after the backward pass the all-to-all's receive copy of the buffer,
    2 B x 57,938,944 = 115,877,888 B, and the fp32 sum of the shard, 4 B x 28,969,472 = 115,877,888 B: 231,755,776 B
    beside the states. The step's own buffers (the fp32 copies of the shard's gradients, 115,877,888 B) come after
    it is freed, so the step phase holds the larger: 231,755,776 B, 115,877,888 B more. With full recompute and
    256 tokens that phase is the peak."""
    tr = {"use_distributed_optimizer": True, "world_size": 2, **FULL}
    base = estimate(make_config(MODEL, None, tr, BF16_GRADS)).stages[0]
    rs = estimate(make_config(MODEL, {"reduce_scatter_with_fp32_accumulation": True}, tr, BF16_GRADS)).stages[0]
    assert base.transient["optimizer_fp32_grad_copies"] == 4 * PARAMS // 2
    assert rs.peak_phase == "optimizer_step"
    assert rs.transient["grad_reduce_fp32_scratch"] == 2 * PARAMS + 4 * (PARAMS // 2) == 231_755_776
    assert "optimizer_fp32_grad_copies" not in rs.transient
    assert rs.optimizer_step_bytes - base.optimizer_step_bytes == 115_877_888


def test_fp32_reduce_scatter_without_the_distributed_optimizer_or_with_overlap():
    """Without the distributed optimizer DDP all-reduces (the flag changes nothing); with overlap_grad_reduce the
    buckets follow bucket_size, which is not laid out: a rule error naming the field."""
    tr = {"world_size": 2, "use_distributed_optimizer": False, **FULL}
    assert estimate(make_config(MODEL, {"reduce_scatter_with_fp32_accumulation": True}, tr)).stages[0] \
        .allocated_bytes == estimate(make_config(MODEL, None, tr)).stages[0].allocated_bytes
    with pytest.raises(ConfigError) as exc:
        estimate(make_config(MODEL, {"reduce_scatter_with_fp32_accumulation": True},
                             {**tr, "use_distributed_optimizer": True, "overlap_grad_reduce": True}))
    assert any(p.field == "training.overlap_grad_reduce" for p in exc.value.problems)


def test_fp32_reduce_scatter_from_both_frontends():
    lm = read_megatron_args(BASE + "--ddp-reduce-scatter-with-fp32-accumulation", world_size=2).config
    assert lm["parallelism"]["reduce_scatter_with_fp32_accumulation"] is True
    data = {**BRIDGE, "ddp": {"use_distributed_optimizer": True, "reduce_scatter_with_fp32_accumulation": True,
                              "overlap_grad_reduce": False},
            "optimizer": {"use_distributed_optimizer": True}}
    cfg = read_bridge_config(data, world_size=2).config
    assert cfg["parallelism"]["reduce_scatter_with_fp32_accumulation"] is True
    assert to_bridge_dict(cfg)["ddp"]["reduce_scatter_with_fp32_accumulation"] is True
