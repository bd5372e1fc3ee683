"""The upstream formulas reproduced exactly: every vector of shared/reference/formula-vectors.md.

Section 3.1 (Megatron-LM, ``tests/unit_tests/training/test_weight_and_optimizer_memory.py``) and
section 3.2 (Megatron-Bridge, ``tests/unit_tests/training/utils/test_theoretical_memory_utils.py``),
snapshots of 2026-08-22. Bold values there are asserted by the upstream tests; the others were produced
by running the upstream functions. Inputs are the upstream tests' own argument namespaces.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from estimator.reference import upstream as compat

TIGHT = dict(rel_tol=1e-12, abs_tol=0.0)


def close(a, b) -> bool:
    return math.isclose(a, b, **TIGHT)


# --- 3.1 Megatron-LM -------------------------------------------------------------------------------

def mlm_args(**overrides) -> SimpleNamespace:
    """The base ``_make_args`` of Megatron-LM's test: per layer attention 256, dense MLP 256, shared expert
    128, routed experts 1024, norms 16, router 32; final norm 8; h*V = 256."""
    args = dict(add_bias_linear=False, data_parallel_size=16, expert_model_parallel_size=2,
                expert_tensor_parallel_size=4, ffn_hidden_size=16, group_query_attention=False, hidden_size=8,
                kv_channels=4, moe_ffn_hidden_size=16, moe_latent_size=None, moe_layer_freq=[0, 1],
                moe_router_topk=1, moe_shared_expert_gate=False, moe_shared_expert_intermediate_size=8,
                mtp_num_layers=None, multi_latent_attention=False, normalization="RMSNorm", num_attention_heads=2,
                num_experts=4, num_layers=2, padded_vocab_size=32, pipeline_model_parallel_size=1, swiglu=False,
                tensor_model_parallel_size=2, untie_embeddings_and_output_weights=False,
                use_distributed_optimizer=True, world_size=32)
    args.update(overrides)
    return SimpleNamespace(**args)


def test_mlm_accounts_for_expert_parallelism():
    """Upstream test_weight_and_optimizer_memory_accounts_for_expert_parallelism (asserted, bold): pp=2,
    world=64: ((896/2 + 256)/2 + 72/2) * (6 + 12/16) + (1024/2/8) * (6 + 12/4) = 388*6.75 + 64*9 = 3195."""
    assert close(compat.megatron_lm_weight_and_optimizer_bytes(
        mlm_args(pipeline_model_parallel_size=2, world_size=64)), 3195.0)


def test_mlm_accounts_for_latent_moe_experts():
    """Upstream test_weight_and_optimizer_memory_accounts_for_latent_moe_experts (asserted, bold):
    moe_latent_size=4: TP part (512+384+256)/2 = 576, replicated 16+(16+64+32)+8 = 136, experts 512/8 = 64:
    712*6.75 + 64*9 = 5382."""
    assert close(compat.megatron_lm_weight_and_optimizer_bytes(mlm_args(moe_latent_size=4)), 5382.0)
    # The same through an override keyword and through a plain dict of upstream names.
    assert close(compat.megatron_lm_weight_and_optimizer_bytes(mlm_args(), moe_latent_size=4), 5382.0)
    assert close(compat.megatron_lm_weight_and_optimizer_bytes(vars(mlm_args(moe_latent_size=4))), 5382.0)


def test_mlm_decreases_with_tensor_parallelism():
    """Upstream test_weight_and_optimizer_memory_decreases_with_tensor_parallelism asserts the order;
    the values 40464, 30096, 24912 come from running the upstream function (formula-vectors.md 3.1)."""
    got = [compat.megatron_lm_weight_and_optimizer_bytes(mlm_args(
        data_parallel_size=16, expert_model_parallel_size=1, expert_tensor_parallel_size=1,
        tensor_model_parallel_size=t, use_distributed_optimizer=False, world_size=16 * t)) for t in (1, 2, 4)]
    assert got[0] > got[1] > got[2]
    assert all(close(g, e) for g, e in zip(got, (40464.0, 30096.0, 24912.0))), got


def test_mlm_decreases_with_expert_parallelism():
    """Upstream test_weight_and_optimizer_memory_decreases_with_expert_parallelism asserts the order; the
    values 10902, 7830, 6294, 5526 for (ep, etp) = (1,1), (2,1), (2,2), (4,2) come from running upstream."""
    got = [compat.megatron_lm_weight_and_optimizer_bytes(mlm_args(expert_model_parallel_size=ep,
                                                                  expert_tensor_parallel_size=etp))
           for ep, etp in ((1, 1), (2, 1), (2, 2), (4, 2))]
    assert got[0] > got[1] > got[2] > got[3]
    assert all(close(g, e) for g, e in zip(got, (10902.0, 7830.0, 6294.0, 5526.0))), got


def test_mlm_missing_argument_is_named():
    """Bad input names the missing upstream argument instead of raising AttributeError."""
    args = vars(mlm_args())
    del args["padded_vocab_size"]
    with pytest.raises(ValueError, match="padded_vocab_size"):
        compat.megatron_lm_weight_and_optimizer_bytes(args)


def test_mlm_rejects_a_pattern_of_the_wrong_length():
    with pytest.raises(ValueError, match="moe_layer_freq has 3 entries; num_layers is 2"):
        compat.megatron_lm_weight_and_optimizer_bytes(mlm_args(moe_layer_freq=[0, 1, 1]))


# --- 3.2 Megatron-Bridge ---------------------------------------------------------------------------

def bridge_config(data_parallel_size: int = 4, **model_overrides) -> SimpleNamespace:
    """The base ``_make_config`` of Bridge's test: attention 1024, norms 64, dense MLP 2048 per layer
    (3136), final norm 32, h*V = 512."""
    model = dict(num_layers=4, hidden_size=16, seq_length=8, ffn_hidden_size=64, num_attention_heads=4,
                 num_query_groups=None, kv_channels=4, vocab_size=32, make_vocab_size_divisible_by=1,
                 should_pad_vocab=False, share_embeddings_and_output_weights=True, tensor_model_parallel_size=2,
                 pipeline_model_parallel_size=2, num_layers_in_first_pipeline_stage=None,
                 num_layers_in_last_pipeline_stage=None, virtual_pipeline_model_parallel_size=None,
                 context_parallel_size=1, expert_model_parallel_size=1, expert_tensor_parallel_size=1,
                 num_moe_experts=None, moe_layer_freq=1, moe_router_topk=1, moe_ffn_hidden_size=None,
                 moe_shared_expert_intermediate_size=None, moe_latent_size=None, mtp_num_layers=None,
                 gated_linear_unit=False, activation_func=None, sequence_parallel=True,
                 recompute_granularity="selective")
    unknown = set(model_overrides) - set(model)
    assert not unknown, unknown
    model.update(model_overrides)
    return SimpleNamespace(model=SimpleNamespace(**model), train=SimpleNamespace(micro_batch_size=2),
                           optimizer=SimpleNamespace(use_distributed_optimizer=True),
                           data_parallel_size=data_parallel_size)


UNEVEN = dict(num_layers=8, tensor_model_parallel_size=1, pipeline_model_parallel_size=4,
              num_layers_in_first_pipeline_stage=1, num_layers_in_last_pipeline_stage=3,
              share_embeddings_and_output_weights=False)

# Rows of the 3.2 table: (id, dp, model overrides, num_microbatches, dense (count, per_gpu, bpp, bytes),
# routed (count, per_gpu, bpp, bytes) or None, activation bytes, total parameters, weight and optimizer).
BRIDGE = [
    ("1-dense-legacy", 4, {}, None, (13088, 3400, 9, 30600), None, 17792, 13088, 30600),
    ("2-uneven-dense", 4, UNEVEN, None, (26144, 9952, 9, 89568), None, 71168, 26144, 89568),
    ("3-uneven-moe", 4, dict(UNEVEN, num_moe_experts=2, moe_layer_freq=[0, 1, 0, 0, 1, 0, 1, 1],
                             moe_ffn_hidden_size=32), None,
     (17952, 5856, 9, 52704), (8192, 4096, 9, 36864), 62976, 26144, 89568),
    ("4-ep-sharding", 8, dict(pipeline_model_parallel_size=1, context_parallel_size=2, num_moe_experts=8,
                              moe_layer_freq=2, moe_ffn_hidden_size=32, expert_model_parallel_size=4), None,
     (8992, 4496, 6.75, 30348), (16384, 4096, 7.5, 30720), 8544, 25376, 61068),
    ("5-activation-tp-cp", 4, dict(pipeline_model_parallel_size=1, context_parallel_size=2), 1,
     (13088, 6544, 7.5, 49080), None, 9568, 13088, 49080),
    ("6-list-shared-latent-mtp", 4, dict(pipeline_model_parallel_size=1, num_moe_experts=4,
                                         moe_layer_freq=[0, 1, 0, 1], moe_ffn_hidden_size=32,
                                         moe_shared_expert_intermediate_size=8, moe_latent_size=4,
                                         mtp_num_layers=1), None,
     (11232, 5616, 9, 50544), (3072, 3072, 7.5, 23040), 21184, 14304, 73584),
    ("7-vpp-penalty", 4, dict(virtual_pipeline_model_parallel_size=2), 4,
     (13088, 3400, 9, 30600), None, 22240, 13088, 30600),
]


@pytest.mark.parametrize("row", BRIDGE, ids=[r[0] for r in BRIDGE])
def test_bridge_vectors(row):
    """Every number of formula-vectors.md 3.2 rows #1-#7 (bold ones asserted upstream, the rest from running
    upstream). Hand checks from that file: #6 dense = 2*3136 + 3*(1088+256+128) + 32 + 512 = 11232 and routed
    3*(2*4*32*4) = 3072 (MTP layer copies the last, MoE, layer); #7 activation (8*2*16*(18+4*4)*4 + 8*8*2*2 +
    256*2) * 1.25 / 2 = 22240; #5 activation (34816 + 128 + 256 + 256*4*(1+2)) / (2*2) = 9568."""
    _, dp, overrides, nmb, dense, routed, act, total_params, w_and_o = row
    est = compat.megatron_bridge_estimate(bridge_config(dp, **overrides), num_microbatches=nmb)
    comps = est.model_state_components
    assert len(comps) == (1 if routed is None else 2)
    expected = [dense] + ([routed] if routed else [])
    for c, (count, per_gpu, bpp, nbytes) in zip(comps, expected):
        assert close(c.parameter_count, count), (c.name, c.parameter_count)
        assert close(c.parameter_count_per_gpu, per_gpu), (c.name, c.parameter_count_per_gpu)
        assert close(c.bytes_per_parameter, bpp), (c.name, c.bytes_per_parameter)
        assert close(c.memory_bytes, nbytes), (c.name, c.memory_bytes)
    assert comps[0].name == "dense parameters and optimizer"
    assert close(est.activation.memory_bytes, act)
    assert close(est.total_parameters, total_params)
    assert close(est.weight_and_optimizer_bytes, w_and_o)
    assert close(est.total_memory_bytes, w_and_o + act)


def test_bridge_without_activation():
    """Bridge's include_activation=False (row #1's model state, 30600 B) leaves the activation out."""
    est = compat.megatron_bridge_estimate(bridge_config(), include_activation=False)
    assert est.activation is None
    assert close(est.total_memory_bytes, 30600)


def test_bridge_format_gb():
    """#8 (asserted): the GB line of row #1 without activation contains "dense parameters and optimizer=0.00
    GB" and "total=0.00 GB" (30600 B / 2^30 rounds to 0.00)."""
    line = compat.megatron_bridge_format(compat.megatron_bridge_estimate(bridge_config(), include_activation=False),
                                         unit="GB")
    assert line == "Theoretical memory footprints: dense parameters and optimizer=0.00 GB, total=0.00 GB"


def test_bridge_format_rejects_unknown_unit():
    """#8 (asserted): unit "bytes" raises ValueError "Unsupported memory unit"."""
    est = compat.megatron_bridge_estimate(bridge_config(), include_activation=False)
    with pytest.raises(ValueError, match="Unsupported memory unit"):
        compat.megatron_bridge_format(est, unit="bytes")


def test_bridge_format_mb_default_lists_every_component():
    """Row #4 in MB (Bridge's default unit): 30348 B = 0.03 MB dense, 30720 B = 0.03 MB routed, activation
    8544 B = 0.01 MB, total 69612 B = 0.07 MB (1 MB = 2^20 B)."""
    est = compat.megatron_bridge_estimate(bridge_config(8, **BRIDGE[3][2]))
    assert compat.megatron_bridge_format(est) == (
        "Theoretical memory footprints: dense parameters and optimizer=0.03 MB, routed expert parameters and "
        "optimizer=0.03 MB, activation=0.01 MB, total=0.07 MB")


def test_bridge_report_line():
    """#9 (asserted): report_theoretical_memory(defaults, nmb=4) prints "weight and optimizer=0.03 MB",
    "activation=0.02 MB", "total=0.05 MB" (30600 B, 17792 B, 48392 B)."""
    assert compat.megatron_bridge_report(bridge_config(), num_microbatches=4) == (
        "Theoretical memory footprints: weight and optimizer=0.03 MB, activation=0.02 MB, total=0.05 MB")


def test_bridge_report_without_sequence_parallel_omits_activation():
    """Bridge's report prints activation only with SP and selective recompute; otherwise the weight and
    optimizer part alone (row #1: 30600 B = 0.03 MB)."""
    line = compat.megatron_bridge_report(bridge_config(sequence_parallel=False), num_microbatches=4)
    assert line == "Theoretical memory footprints: weight and optimizer=0.03 MB"


def test_bridge_accepts_plain_dicts_and_overrides():
    """The same row #4 from dicts of upstream names, with the container arguments given as overrides."""
    ns = bridge_config(8, **BRIDGE[3][2])
    plain = {"model": vars(ns.model)}
    est = compat.megatron_bridge_estimate(plain, data_parallel_size=8, micro_batch_size=2,
                                          use_distributed_optimizer=True)
    assert close(est.weight_and_optimizer_bytes, 61068)
    assert close(est.activation_bytes, 8544)


def test_bridge_errors_name_the_argument():
    with pytest.raises(ValueError, match="context_parallel_size must be positive"):
        compat.megatron_bridge_estimate(bridge_config(context_parallel_size=0))
    with pytest.raises(ValueError, match="model.kv_channels"):
        compat.megatron_bridge_estimate({"model": {k: v for k, v in vars(bridge_config().model).items()
                                                   if k != "kv_channels"}})
    with pytest.raises(ValueError, match="remaining layers do not divide"):
        compat.megatron_bridge_estimate(bridge_config(**dict(UNEVEN, num_layers_in_first_pipeline_stage=2)))
