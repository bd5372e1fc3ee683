"""Invariants of the memory model, proven on generated configurations with Hypothesis.

The strategy below draws valid Megatron-Core configurations (dense or MoE, MHA/GQA or MLA, TP, PP with
VPP, CP, DP, EP, recompute, precision, micro- and global batch sizes) small enough to estimate in
milliseconds. For each, the properties compare the estimator with itself under a change whose direction
is known from how Megatron-Core allocates memory:

- nothing is negative; allocated = weights + gradients + optimizer + activations + transient, and
  allocated <= reserved <= device; the peak is the largest stage;
- doubling TP never raises the weights a GPU holds (every linear layer and the vocabulary are split);
- more recompute never raises the saved activations (none >= selective >= full; more modules, larger
  uniform groups, more block-recomputed layers);
- doubling DP never raises a GPU's memory, except by one NCCL communicator (128 MiB) for each process group
  that grows from one rank to two (data x context parallel, expert data parallel) - the rule the docs state;
- doubling the micro-batch at a fixed global batch never lowers the activations of any stage;
- every layout the search reports re-estimates to the peak it printed and passes validation.

Examples are derandomized (the same ones every run, as the fuzz tests are seeded); ``MME_HYPOTHESIS_EXAMPLES``
raises their number.
"""

from __future__ import annotations

import copy
import math
import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from estimator import ConfigError, estimate, load_config
from estimator.memory.assemble import NCCL_BYTES_PER_COMMUNICATOR
from estimator.model.resolve import resolve
from estimator.plan.search import search

EXAMPLES = int(os.environ.get("MME_HYPOTHESIS_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _divisors(n: int, upto: int) -> list[int]:
    return [d for d in range(1, min(n, upto) + 1) if n % d == 0]


@st.composite
def configs(draw) -> dict:
    """A valid configuration (checked by load_config; the few draws Megatron-Core would refuse are
    discarded)."""
    moe = draw(st.booleans())
    mla = moe and draw(st.booleans())
    t = draw(st.sampled_from([1, 2, 4]))
    heads = t * draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([16, 32]))
    h = heads * head_dim * draw(st.sampled_from([1, 2]))
    L = draw(st.sampled_from([2, 4, 6, 8]))
    model = dict(num_layers=L, hidden_size=h, num_attention_heads=heads, kv_channels=head_dim,
                 ffn_hidden_size=64 * t * draw(st.integers(1, 6)), vocab_size=draw(st.integers(100, 5000)),
                 untie_embeddings_and_output_weights=draw(st.booleans()),
                 normalization=draw(st.sampled_from(["RMSNorm", "LayerNorm"])),
                 hidden_dropout=draw(st.sampled_from([0.0, 0.1])))
    if mla:
        model.update(multi_latent_attention=True, kv_channels=None, q_lora_rank=draw(st.sampled_from([None, 64])),
                     kv_lora_rank=32, qk_head_dim=16, qk_pos_emb_head_dim=8, v_head_dim=16)
    else:
        # key/value heads a multiple or a divisor of TP (Megatron-Core's rule; fewer than TP: one a rank)
        model["num_query_groups"] = draw(st.sampled_from([g for g in _divisors(heads, heads)
                                                          if g % t == 0 or t % g == 0]))
    p = draw(st.sampled_from(_divisors(L, 4)))
    v = draw(st.sampled_from([x for x in _divisors(L // p, 4) if x == 1 or p > 1]))
    cp = draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([1, 2, 4]))
    world = t * p * cp * dp
    par = dict(tensor_model_parallel_size=t, pipeline_model_parallel_size=p, context_parallel_size=cp)
    if v > 1:
        par["virtual_pipeline_model_parallel_size"] = v
    sp = t > 1 and draw(st.booleans())
    if moe:
        E = draw(st.sampled_from([4, 8]))
        model.update(num_experts=E, moe_router_topk=draw(st.sampled_from([1, 2])),
                     moe_ffn_hidden_size=32 * t * draw(st.integers(1, 3)),
                     moe_shared_expert_intermediate_size=draw(st.sampled_from([None, 64 * t])),
                     moe_layer_freq=draw(st.sampled_from([1, [0] + [1] * (L - 1)])))
        ep = draw(st.sampled_from([e for e in _divisors(E, E) if (world // p) % (t * e) == 0]))
        par["expert_model_parallel_size"] = ep
        sp = sp or (t > 1 and ep > 1)
    b = draw(st.sampled_from([1, 2, 4]))
    m = draw(st.sampled_from([None, 1, 2, 3, 4, 8]))
    if m is not None and v > 1:
        m = p * max(1, m // p)
    tr = dict(world_size=world, seq_length=2 * cp * t * draw(st.sampled_from([32, 64, 128])), micro_batch_size=b,
              global_batch_size=None if m is None else m * b * dp, sequence_parallel=sp,
              use_distributed_optimizer=draw(st.booleans()),
              cross_entropy_loss_fusion=draw(st.booleans()),
              attention_backend="auto" if cp > 1 else draw(st.sampled_from(["auto", "unfused"])))
    rc = draw(st.sampled_from([None, "selective", "full"]))
    if rc == "selective":
        tr.update(recompute_granularity=rc, recompute_modules=draw(st.lists(st.sampled_from(
            ["core_attn", "layernorm", "mlp"] + (["moe_act", "moe"] if moe else []) + (["mla_up_proj"] if mla else [])),
            min_size=1, max_size=3, unique=True)))
    elif rc == "full":
        tr.update(recompute_granularity=rc, recompute_method=draw(st.sampled_from(["uniform", "block"])),
                  recompute_num_layers=draw(st.integers(0, 2)))
    dtype = draw(st.sampled_from(["bf16", "fp16", "fp32"]))
    prec = dict(params_dtype=dtype, fp8=dtype != "fp32" and draw(st.booleans()))
    cfg = {"model": model, "parallelism": par, "training": tr, "precision": prec}
    try:
        load_config(cfg)
    except ConfigError:
        assume(False)
    return cfg


def _estimate(cfg):
    try:
        return estimate(cfg)
    except ConfigError:
        return None


def _with(cfg: dict, **changes) -> dict:
    out = copy.deepcopy(cfg)
    for path, value in changes.items():
        section, name = path.split("__")
        if value is None:
            out[section].pop(name, None)
        else:
            out[section][name] = value
    return out


@SETTINGS
@given(configs())
def test_memory_is_never_negative_and_the_totals_are_ordered(cfg):
    e = estimate(cfg)
    for s in e.stages:
        parts = (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes, s.activations_bytes, s.transient_bytes)
        assert all(isinstance(x, int) and x >= 0 for x in parts)
        assert all(x >= 0 for x in (*s.activations.values(), *s.transient.values()))
        assert s.allocated_bytes == sum(parts)
        assert s.allocated_bytes <= s.reserved_bytes <= s.device_bytes
    assert e.peak.device_bytes == max(s.device_bytes for s in e.stages)


@SETTINGS
@given(configs())
def test_more_tensor_parallelism_never_raises_the_weights_per_gpu(cfg):
    t = cfg["parallelism"]["tensor_model_parallel_size"]
    wider = _with(cfg, parallelism__tensor_model_parallel_size=2 * t,
                  training__world_size=2 * cfg["training"]["world_size"],
                  training__sequence_parallel=cfg["training"]["sequence_parallel"] or None)
    after = _estimate(wider)
    assume(after is not None)                      # heads, groups or widths not divisible by 2t
    for s0, s1 in zip(estimate(cfg).stages, after.stages):
        assert s1.weights_bytes <= s0.weights_bytes, s0.stage


def _rc(granularity=None, modules=None, method=None, n=None) -> dict:
    return dict(training__recompute_granularity=granularity, training__recompute_modules=modules,
                training__recompute_method=method, training__recompute_num_layers=n)


#: Chains of ever more recompute. Selective and partial block recompute are not ordered against each other
#: (selective on every layer can save more than full recompute of some layers).
RECOMPUTE_CHAINS = [
    [_rc(), _rc("selective", ["layernorm"]), _rc("selective", ["layernorm", "core_attn", "mlp"]),
     _rc("full", None, "uniform", 1), _rc("full", None, "uniform", 2)],
    [_rc(), _rc("full", None, "block", 1), _rc("full", None, "block", 2), _rc("full", None, "block", 10_000),
     _rc("full", None, "uniform", 2)],
]


@SETTINGS
@given(configs(), st.sampled_from(RECOMPUTE_CHAINS))
def test_more_recompute_never_raises_the_activations(cfg, chain):
    """none >= selective (layernorm) >= selective (layernorm, core_attn, mlp) >= full (uniform, groups of 1)
    >= full (uniform, groups of 2); none >= full (block, 1 layer) >= (block, 2) >= (block, all) >= (uniform,
    groups of 2); stage by stage. A stage whose peak is the optimizer step reports no activations there; the
    step itself can be larger with less recompute (a checkpointed MoE layer keeps its recomputed input through
    it, estimator/memory/optimizer_step.py point 3), so such a stage is compared only when both peaks are the step or
    the one with more recompute peaks in the step."""
    runs = [_estimate(_with(cfg, **changes)) for changes in chain]
    assume(all(runs))
    for less, more in zip(runs, runs[1:]):
        for s0, s1 in zip(less.stages, more.stages):
            if s0.peak_phase == "optimizer_step" and s1.peak_phase == "forward_backward":
                continue
            assert s1.activations_bytes <= s0.activations_bytes, s0.stage


@SETTINGS
@given(configs())
def test_more_data_parallelism_never_raises_the_memory_per_gpu(cfg):
    """The documented exception: a process group that grows from one rank to two gets an NCCL communicator
    (NCCL_BYTES_PER_COMMUNICATOR), for data x context parallelism and for expert data parallelism."""
    tr = cfg["training"]
    gbs = tr["global_batch_size"]
    wider = _with(cfg, training__world_size=2 * tr["world_size"])
    if gbs is not None:                            # the same number of micro-batches on twice the ranks
        wider["training"]["global_batch_size"] = 2 * gbs
    before, after = estimate(cfg), _estimate(wider)
    assume(after is not None)
    r0, r1 = resolve(load_config(cfg)), resolve(load_config(wider))
    new_groups = sum(1 for a, b in ((r0.dp * r0.cp, r1.dp * r1.cp), (r0.edp, r1.edp) if r0.E else (2, 2))
                     if a == 1 and b > 1)
    for s0, s1 in zip(before.stages, after.stages):
        assert s1.device_bytes - s0.device_bytes <= new_groups * NCCL_BYTES_PER_COMMUNICATOR, s0.stage
        assert s1.allocated_bytes <= s0.allocated_bytes, s0.stage


@SETTINGS
@given(configs())
def test_a_larger_micro_batch_never_lowers_the_activations(cfg):
    """At a fixed global batch, doubling the micro-batch halves the number of micro-batches; a stage then
    holds fewer of them, each twice as large: never less in total (with the interleaved schedule this needs
    a multiple of PP micro-batches, which validation now requires)."""
    tr = cfg["training"]
    assume(tr["global_batch_size"] is not None)
    after = _estimate(_with(cfg, training__micro_batch_size=2 * tr["micro_batch_size"]))
    assume(after is not None)
    for s0, s1 in zip(estimate(cfg).stages, after.stages):
        assert s1.activations_bytes >= s0.activations_bytes, s0.stage


@settings(max_examples=max(8, EXAMPLES // 5), derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(configs(), st.sampled_from([4, 8, 16]), st.floats(0.2, 0.9), st.booleans())
def test_every_search_result_re_estimates_to_its_peak(cfg, n, fraction, distinct):
    """Each reported layout is a complete configuration that validates and that estimate() reproduces to the
    byte, at a capacity chosen between the smallest and the largest peak so that some layouts fit."""
    model = cfg["model"]
    small = _estimate({"model": model, "parallelism": {"tensor_model_parallel_size": 1},
                       "training": {"world_size": 1, "seq_length": 256}})
    assume(small is not None)
    cap = int(small.peak.device_bytes * (0.3 + fraction))
    res = search({"model": model}, num_gpus=n, gpu=cap, seq_length=256, top=5, distinct=distinct,
                 micro_batch_sizes=(1, 2))
    for lay in res.layouts:
        cfg_out = load_config(lay.config)
        e = estimate(cfg_out)
        assert (e.peak.stage, e.peak.allocated_bytes, e.peak.device_bytes) == \
            (lay.peak_stage, lay.peak_allocated_bytes, lay.peak_device_bytes)
        assert lay.peak_device_bytes <= res.usable_bytes <= (1 - res.headroom) * cap + 1   # the one fit rule
        assert math.isfinite(lay.cost) and lay.cost >= 1


def test_one_to_two_data_parallel_ranks_adds_one_communicator():
    """The exception the DP property allows, by hand: TP 1, PP 1, no distributed optimizer (so nothing is
    sharded over DP), global batch unset: going from 1 GPU to 2 changes nothing but the data-parallel group,
    which now has two ranks and an NCCL communicator: + NCCL_BYTES_PER_COMMUNICATOR (128 MiB) exactly."""
    cfg = {"model": dict(num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=512, vocab_size=1000),
           "training": {"world_size": 1, "seq_length": 256, "use_distributed_optimizer": False}}
    one = estimate(cfg)
    two = estimate(_with(cfg, training__world_size=2))
    assert two.peak.allocated_bytes == one.peak.allocated_bytes
    assert two.peak.device_bytes - one.peak.device_bytes == NCCL_BYTES_PER_COMMUNICATOR == 128 * 2 ** 20


@pytest.mark.parametrize("gbs", [32, 64])
def test_interleaved_micro_batch_doubling_by_hand(gbs):
    """The case the issue found (2.06 GiB of activations became 0.38 GiB when the micro-batch doubled) needed
    fewer micro-batches than PP; with a multiple of PP the last stage's activations double with the
    micro-batch: PP 2, VPP 2, DP 1, global batch 32 or 64 sequences, micro-batch 8 then 16 gives 4/8 then
    2/4 micro-batches, all >= PP, and the last stage holds (v - 1) * p + 1 = 3 chunk-micro-batches either way."""
    cfg = {"model": dict(num_layers=4, hidden_size=256, num_attention_heads=4, ffn_hidden_size=512, vocab_size=1000),
           "parallelism": {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2},
           "training": {"world_size": 2, "seq_length": 256, "micro_batch_size": 8, "global_batch_size": gbs}}
    a = estimate(cfg).stages[-1]
    b = estimate(_with(cfg, training__micro_batch_size=16)).stages[-1]
    assert a.microbatches_in_flight == b.microbatches_in_flight == 3
    assert b.activations_bytes == 2 * a.activations_bytes
