"""The seeds' theoretical-memory API: formulas, our configuration mapped onto upstream names, formatting.

Expected values are upstream's asserted test vectors (shared/reference/formula-vectors.md) reached from
this project's own configuration format, or hand calculations written in each docstring.
"""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import pytest

from estimator import count_parameters_of, estimate
from estimator.reference.theoretical import (FORMULAS, estimate_training_memory, format_training_memory_estimate,
                                             megatron_bridge_config, megatron_lm_args)
from tests.reference.test_upstream import bridge_config, mlm_args

TIGHT = dict(rel_tol=1e-12, abs_tol=0.0)
LINE = re.compile(r"^Theoretical memory footprints: weight and optimizer=\d+\.\d\d GB, activation=\d+\.\d\d GB, "
                  r"total=\d+\.\d\d GB$")


def cfg(model: dict, parallelism: dict | None = None, training: dict | None = None) -> dict:
    return {"model": model, "parallelism": parallelism or {}, "training": training or {}, "precision": {}}


# Megatron-LM's test model (formula-vectors.md 3.1) written in our format: h 8, 2 heads of 4, ffn 16,
# 4 experts of width 16 (top-1), shared expert 8, layers [dense, MoE], vocabulary 32 (16 x TP 2 = 32,
# no padding), RMSNorm, no biases, tied, non-gated MLP, tp 2, ep 2, etp 4.
MLM_MODEL = dict(num_layers=2, hidden_size=8, num_attention_heads=2, ffn_hidden_size=16, vocab_size=32,
                 make_vocab_size_divisible_by=16, activation_func="gelu", gated_linear_unit=False, num_experts=4,
                 moe_router_topk=1, moe_ffn_hidden_size=16, moe_shared_expert_intermediate_size=8,
                 moe_layer_freq=[0, 1])
MLM_PAR = dict(tensor_model_parallel_size=2, expert_model_parallel_size=2, expert_tensor_parallel_size=4)
MLM_TRAIN = dict(seq_length=8, sequence_parallel=True)

# Megatron-Bridge's test model (3.2 defaults) in our format: 4 layers, h 16, 4 heads of 4, ffn 64,
# vocabulary 32 (16 x TP 2), tied, non-gated, tp 2, pp 2, dp 4 (world 16), micro-batch 2, SP, selective.
BRIDGE_MODEL = dict(num_layers=4, hidden_size=16, num_attention_heads=4, ffn_hidden_size=64, vocab_size=32,
                    make_vocab_size_divisible_by=16, activation_func="gelu", gated_linear_unit=False)
BRIDGE_PAR = dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
BRIDGE_TRAIN = dict(world_size=16, seq_length=8, micro_batch_size=2, sequence_parallel=True,
                    recompute_granularity="selective")

# A tiny dense model on one GPU: h 8, 2 heads of 4, ffn 16 (non-gated), vocabulary 32, 2 layers, s 8.
# Per layer: QKV 8 x (2 + 2 + 2) x 4 = 192 and output 8 x 8 = 64 (attention 256) + input norm 8, MLP
# 8 x 16 + 16 x 8 = 256 + pre-MLP norm 8: 528; x 2 layers = 1056, + embedding 32 x 8 = 256 + final norm 8
# = 1320 parameters (tied).
TINY = cfg(dict(num_layers=2, hidden_size=8, num_attention_heads=2, ffn_hidden_size=16, vocab_size=32,
                make_vocab_size_divisible_by=32, activation_func="gelu", gated_linear_unit=False),
           training=dict(world_size=1, seq_length=8))


def test_our_config_reproduces_megatron_lm_expert_parallelism_vector():
    """MLM's asserted 3195.0 B (accounts_for_expert_parallelism: pp 2, world 64) from our configuration."""
    e = estimate_training_memory(cfg(MLM_MODEL, dict(MLM_PAR, pipeline_model_parallel_size=2),
                                     dict(MLM_TRAIN, world_size=64)), formula="megatron-lm")
    assert math.isclose(e.weight_and_optimizer_bytes, 3195.0, **TIGHT)


def test_our_config_with_override_reproduces_megatron_lm_latent_vector():
    """MLM's asserted 5382.0 B (accounts_for_latent_moe_experts) from our configuration plus the upstream
    argument moe_latent_size=4, which our schema lacks."""
    e = estimate_training_memory(cfg(MLM_MODEL, MLM_PAR, dict(MLM_TRAIN, world_size=32)), formula="megatron-lm",
                                 overrides={"moe_latent_size": 4})
    assert math.isclose(e.weight_and_optimizer_bytes, 5382.0, **TIGHT)


def test_megatron_lm_args_mapping():
    """data_parallel_size = world // (tp*pp*cp) = 64 // 4 = 16; etp stays 4; vocabulary padded to 32."""
    a = megatron_lm_args(cfg(MLM_MODEL, dict(MLM_PAR, pipeline_model_parallel_size=2), dict(MLM_TRAIN, world_size=64)))
    assert (a.data_parallel_size, a.expert_tensor_parallel_size, a.padded_vocab_size) == (16, 4, 32)
    assert a.swiglu is False and a.moe_layer_freq == [0, 1] and a.virtual_pipeline_model_parallel_size is None


def test_our_config_reproduces_bridge_vectors():
    """Bridge row #1 from our configuration: dense 13088 parameters, 3400 per GPU, 9 B each = 30600 B,
    activation 17792 B; and #9's report line (0.03 MB, 0.02 MB, 0.05 MB)."""
    from estimator.reference.upstream import megatron_bridge_report
    c = cfg(BRIDGE_MODEL, BRIDGE_PAR, BRIDGE_TRAIN)
    e = estimate_training_memory(c, formula="megatron-bridge")
    (dense,) = e.model_state_components
    assert (dense.parameter_count, dense.parameter_count_per_gpu, dense.bytes_per_parameter) == (13088, 3400, 9)
    assert math.isclose(e.weight_and_optimizer_bytes, 30600, **TIGHT)
    assert math.isclose(e.activation_bytes, 17792, **TIGHT)
    assert megatron_bridge_report(megatron_bridge_config(c), num_microbatches=4) == (
        "Theoretical memory footprints: weight and optimizer=0.03 MB, activation=0.02 MB, total=0.05 MB")


def test_num_microbatches_comes_from_global_batch_size():
    """Bridge row #1 with global_batch_size 8: m = 8 / (micro-batch 2 x dp 4) = 1 < pp 2, so the 1F1B
    discount min(1, 1/2) halves the layer and embedding terms: (34816 + 256 + 512) / 2 / tp 2 = 8896 B."""
    c = cfg(BRIDGE_MODEL, BRIDGE_PAR, dict(BRIDGE_TRAIN, global_batch_size=8))
    assert math.isclose(estimate_training_memory(c, formula="megatron-bridge").activation_bytes, 8896, **TIGHT)
    assert math.isclose(estimate_training_memory(c, 2, formula="megatron-bridge").activation_bytes, 17792, **TIGHT)


def test_megatron_lm_tiny_dense_without_sp():
    """Hand calculation for TINY (tp 1, so no sequence parallelism): weight and optimizer 1320 x 18 = 23760 B;
    activation (compute_activation_memory_without_sp) with sbh = 64: 64*(10 + 24)*2 + 8*8 + 64 = 4480,
    + 2*(8*32 + 64) = 640 for logits and final norm, x 1.05 = 5376 B. Line: 23760 B = 0.02 MB,
    5376 B = 0.01 MB, total 29136 B = 0.03 MB."""
    e = estimate_training_memory(TINY, formula="megatron-lm")
    assert math.isclose(e.weight_and_optimizer_bytes, 23760, **TIGHT)
    assert math.isclose(e.total_parameters, 1320, **TIGHT)
    assert math.isclose(e.activation_bytes, 5376, **TIGHT)
    assert e.details["activation_formula"] == "without_sp"
    assert format_training_memory_estimate(e, unit="MB") == (
        "Theoretical memory footprints: weight and optimizer=0.02 MB, activation=0.01 MB, total=0.03 MB")


def test_megatron_lm_tiny_with_sp():
    """TINY on tp 2 with sequence parallelism and selective recompute (vocabulary 32 is a multiple of 16 x 2):
    activation 64*(18 + 4*16/8)*2 + 64 + 64 = 3456, + 64*4*(1 + 32/8) = 1280 (pp 1), / tp 2 = 2368 B.
    Weight and optimizer: (2*512/1 + 256)/2 = 640 TP-sharded + 2*16 + 8 = 40 norms, x (6 + 12/1) = 12240 B."""
    c = cfg(dict(TINY["model"], make_vocab_size_divisible_by=16), dict(tensor_model_parallel_size=2),
            dict(world_size=2, seq_length=8, sequence_parallel=True, recompute_granularity="selective"))
    e = estimate_training_memory(c, formula="megatron-lm")
    assert e.details["activation_formula"] == "with_sp"
    assert math.isclose(e.activation_bytes, 2368, **TIGHT)
    assert math.isclose(e.weight_and_optimizer_bytes, 12240, **TIGHT)


def test_swiglu_maps_to_three_projections():
    """A gated SiLU MLP is MLM's swiglu (x 3/2) and Bridge's gated SiLU (3 projections): TINY with SwiGLU has
    MLP 3*8*16 = 384 per layer, so 2*(256 + 384 + 16) + 8 + 256 = 1576 parameters, as our own count says.
    (Bridge counts norms as 4h per layer and 2h final: 2*(256 + 384 + 32) + 16 + 256 = 1616.)"""
    c = cfg(dict(TINY["model"], activation_func="swiglu", gated_linear_unit=True), training=TINY["training"])
    assert megatron_lm_args(c).swiglu is True
    assert math.isclose(estimate_training_memory(c, formula="megatron-lm").total_parameters, 1576, **TIGHT)
    assert count_parameters_of(c).total == 1576
    assert math.isclose(estimate_training_memory(c, formula="megatron-bridge").total_parameters, 1616, **TIGHT)


def test_estimator_formula_tiny_dense():
    """TINY on one GPU with the distributed optimizer over 1 rank: 1320 parameters x (2 + 4 + 12) = 23760 B of
    weights, gradients and optimizer states; the total is what the peak stage allocates."""
    e = estimate_training_memory(TINY)
    (dense,) = e.model_state_components
    assert e.formula == "estimator"
    assert dense.parameter_count_per_gpu == 1320 and e.total_parameters == 1320
    assert e.weight_and_optimizer_bytes == 23760
    peak = estimate(TINY).peak_stage
    assert e.activation_bytes == peak.activations_bytes + peak.transient_bytes
    assert e.total_memory_bytes == peak.allocated_bytes == e.details["allocated_bytes"]
    assert LINE.match(format_training_memory_estimate(e))


def test_estimator_formula_splits_routed_experts():
    """Tiny MoE, layers [dense, MoE], 4 experts of width 16 (non-gated), ep 2 on 2 GPUs (tp 1, etp 1).
    Routed experts per GPU: 2 experts x (8*16 + 16*8) = 512 parameters; edp = 2 // (1*2*1) = 1, so
    2 + 4 + 12 = 18 B each: 9216 B. Dense per GPU: layer 0 528, layer 1 attention 264 + router 32 + norm 8,
    embedding 256, final norm 8 = 1096 parameters at 2 + 4 + 12/2 (dp 2) = 12 B: 13152 B.
    Globally 2 x 512 = 1024 routed and 1096 dense parameters."""
    c = cfg(dict(TINY["model"], num_experts=4, moe_router_topk=1, moe_layer_freq=[0, 1]),
            dict(expert_model_parallel_size=2, expert_tensor_parallel_size=1), dict(world_size=2, seq_length=8))
    dense, routed = estimate_training_memory(c).model_state_components
    assert (routed.parameter_count, routed.parameter_count_per_gpu, routed.memory_bytes) == (1024, 512, 9216)
    assert routed.bytes_per_parameter == 18
    assert (dense.parameter_count, dense.parameter_count_per_gpu, dense.memory_bytes) == (1096, 1096, 13152)
    assert dense.bytes_per_parameter == 12


@pytest.mark.parametrize("formula", FORMULAS)
def test_cli_call_shape_and_json(formula, tmp_path):
    """What `estimate --formula NAME` calls, from a YAML file; the result is plain JSON."""
    path = tmp_path / "bridge.yaml"
    path.write_text(json.dumps(cfg(BRIDGE_MODEL, BRIDGE_PAR, BRIDGE_TRAIN)), encoding="utf-8")
    e = estimate_training_memory(str(path), formula=formula)
    line = format_training_memory_estimate(e)
    assert line.startswith("Theoretical memory footprints: ") and line.endswith(" GB")
    d = json.loads(json.dumps(e.to_dict()))
    assert d["formula"] == formula and d["total_memory_bytes"] == pytest.approx(e.total_memory_bytes)
    assert d["model_state_components"][0]["name"] == "dense parameters and optimizer"
    assert d["assumptions"]


def test_format_per_formula():
    """Bridge names its components; MLM prints weight and optimizer / activation / total. Row #1's 30600 B
    and 17792 B are 0.00 in units of 2^30 B; "gib" is accepted and labelled GiB."""
    c = cfg(BRIDGE_MODEL, BRIDGE_PAR, BRIDGE_TRAIN)
    bridge = format_training_memory_estimate(estimate_training_memory(c, formula="megatron-bridge"))
    assert bridge == ("Theoretical memory footprints: dense parameters and optimizer=0.00 GB, activation=0.00 GB, "
                      "total=0.00 GB")
    mlm = format_training_memory_estimate(estimate_training_memory(c, formula="megatron-lm"), unit="gib")
    assert re.match(r"^Theoretical memory footprints: weight and optimizer=0\.00 GiB, activation=0\.00 GiB, "
                    r"total=0\.00 GiB$", mlm)


def test_upstream_names_accepted_directly():
    """The upstream tests' own namespaces fed to the seeds' API: Bridge row #1's asserted 30600 B and 17792 B,
    MLM's asserted 5382.0 B (latent vector) with moe_latent_size as an override."""
    e = estimate_training_memory(bridge_config(), formula="megatron-bridge")
    assert math.isclose(e.weight_and_optimizer_bytes, 30600, **TIGHT)
    assert math.isclose(e.activation_bytes, 17792, **TIGHT)
    args = mlm_args(seq_length=8, micro_batch_size=1, sequence_parallel=True, recompute_granularity="selective")
    e = estimate_training_memory(vars(args), formula="megatron-lm", overrides={"moe_latent_size": 4})
    assert math.isclose(e.weight_and_optimizer_bytes, 5382.0, **TIGHT)


def test_errors():
    with pytest.raises(ValueError, match=r"Unknown formula 'mlm'; allowed: estimator, megatron-lm, megatron-bridge"):
        estimate_training_memory(TINY, formula="mlm")
    with pytest.raises(ValueError, match="Unsupported memory unit: 'bytes'"):
        format_training_memory_estimate(estimate_training_memory(TINY), unit="bytes")
    with pytest.raises(ValueError, match="num_microbatches must be a positive integer"):
        estimate_training_memory(TINY, num_microbatches=0)
    with pytest.raises(ValueError, match="needs a configuration"):
        estimate_training_memory(SimpleNamespace(hidden_size=8))
    with pytest.raises(ValueError, match="apply only to the megatron-lm and megatron-bridge"):
        estimate_training_memory(TINY, overrides={"moe_latent_size": 4})
    with pytest.raises(ValueError, match="missing upstream argument"):
        estimate_training_memory({"hidden_size": 8}, formula="megatron-lm")


def test_bad_arguments_are_config_errors_naming_the_argument():
    """Issue 15: an unknown formula was a bare ValueError; a list was the same; upstream arguments of absurd
    size reached the arithmetic (num_layers 10**30 built a list per layer)."""
    from estimator import ConfigError
    for kwargs, field in ((dict(formula="x"), "formula"), (dict(formula=[]), "formula"),
                          (dict(num_microbatches=0), "num_microbatches"), (dict(num_microbatches=1.5),
                                                                          "num_microbatches")):
        with pytest.raises(ConfigError) as exc:
            estimate_training_memory(TINY, **kwargs)
        assert exc.value.problems[0].field == field
    args = vars(mlm_args(seq_length=8, micro_batch_size=1))
    for name, value in (("num_layers", 10 ** 30), ("hidden_size", float("nan")), ("seq_length", float("inf"))):
        with pytest.raises(ConfigError) as exc:
            estimate_training_memory({**args, name: value}, formula="megatron-lm")
        assert exc.value.problems[0].field == f"megatron-lm.{name}"
    with pytest.raises(ConfigError) as exc:
        estimate_training_memory({**args, "hidden_size": "wide"}, formula="megatron-lm")
    assert exc.value.problems[0].field == "megatron-lm"
