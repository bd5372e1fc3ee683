"""Megatron-FSDP and PyTorch FSDP2 (estimator/memory/features/fsdp.py) against hand calculations.

The small model of tests/memory/test_memory.py: L=4 layers, h=1024, 8 heads of 128 (MHA), GeLU MLP f=4096, RMSNorm,
untied embeddings, vocabulary 32000, bf16 weights, sequence 2048, one micro-batch.

Per layer: attention 4h^2 + h = 4,195,328, MLP 2hf + h = 8,389,632, so U = 12,584,960 elements, of which
4h^2 + 2hf = 12,582,912 are linear weights. Embedding = output layer = 32000 x 1024 = 32,768,000; final norm
1024. One GPU (TP 1, PP 1) holds n = 4U + 2 x 32,768,000 + 1024 = 115,876,864 parameters; the root module
(embedding, output layer, final norm) holds 65,537,024 of them.
"""

from __future__ import annotations

from estimator import ConfigError, estimate
from estimator.memory.features import fsdp
from tests.conftest import make_config

import pytest

H, F, V, L = 1024, 4096, 32000, 4
U = 4 * H * H + H + 2 * H * F + H          # 12,584,960
N = L * U + 2 * V * H + H                  # 115,876,864
ROOT = 2 * V * H + H                       # 65,537,024
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def est(parallelism=None, training=None, precision=None):
    tr = {"seq_length": 2048, "world_size": 8}
    tr.update(training or {})
    return estimate(make_config(MODEL, parallelism, tr, precision)).stages[0]


FSDP = {"use_megatron_fsdp": True}


def _states_args(parallelism, training=None, precision=None):
    """megatron_fsdp_states' arguments for the one stage of the small model (no moments needed: 8 B)."""
    from estimator.config.load import load_config
    from estimator.model.resolve import resolve
    from estimator.memory.states import byte_model
    tr = {"seq_length": 2048, "world_size": 8}
    tr.update(training or {})
    r = resolve(load_config(make_config(MODEL, parallelism, tr, precision)))
    return r, byte_model(r), 8, N, 4 * 12_582_912, 0, [(U, 12_582_912, 0)] * 4, ROOT


def test_zero3_shards_weights_gradients_and_optimizer_over_data_parallel():
    """optim_grads_params over DP 8: bf16 weights 2n/8, bf16 gradients (auto = the weights' dtype) 2n/8,
    fp32 master + Adam moments 12 x n/8 (n/8 = 14,484,608 exactly)."""
    s = est(FSDP)
    assert (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes) == (2 * N // 8, 2 * N // 8, 12 * (N // 8))


def test_zero3_gathered_units_root_and_unsharded_gradients():
    """Without double buffering Megatron-FSDP prefetches units until 5e8 elements (half its 1e9-element
    communication unit): ceil(5e8 / U) = 40 > the 3 units left, so all 4 layers are gathered, 4 x 2 B x U.
    The root module stays gathered: 2 B x 65,537,024. The unsharded gradient buckets exist only during a backward
    pass (fetched as each unit's gradients arrive, all freed by its end: ``_root_post_backward`` ->
    ``grad_reduce_pipeline.reset()``), and this stage's peak is the loss's forward (its fp32 logits,
    2048 x 32000 x 4 B = 262,144,000 B kept): no bucket then. Even at the end of the backward pass, where all
    n elements wait (1e9 + U > n), 2 B x n = 231,753,728 B is less than the 539,230,208 B of activations freed
    by then."""
    s = est(FSDP)
    t = s.transient
    assert t["fsdp_gathered_units"] == 4 * 2 * U
    assert t["fsdp_gathered_root"] == 2 * ROOT
    assert "loss_forward" in t and "fsdp_unsharded_grads" not in t


def test_double_buffer_holds_two_units_of_weights_and_of_gradients():
    t = est({**FSDP, "fsdp_double_buffer": True}).transient
    assert t["fsdp_gathered_units"] == 2 * 2 * U
    assert t["fsdp_unsharded_grads"] == 2 * 2 * U


def test_nccl_ub_turns_on_double_buffering():
    assert est({**FSDP, "nccl_ub": True}).transient == est({**FSDP, "fsdp_double_buffer": True}).transient


def test_suggested_communication_unit_size_bounds_prefetch_and_gradient_queue():
    """A unit of 2U elements: prefetch up to U (one unit: 1 + 1 gathered), gradients wait up to 2U + U."""
    t = est({**FSDP, "suggested_communication_unit_size": 2 * U}).transient
    assert t["fsdp_gathered_units"] == 2 * 2 * U
    q = fsdp.megatron_fsdp_states(*_states_args({**FSDP, "suggested_communication_unit_size": 2 * U})).grad_queue
    assert (q.cap, q.units, q.root, q.elem) == (3 * U, [U] * 4, ROOT, 2)


@pytest.mark.parametrize("strategy,weights,grads,opt", [
    ("no_shard", 2 * N, 2 * N, 12 * N),
    ("optim", 2 * N, 2 * N, 12 * (N // 8)),
    ("optim_grads", 2 * N, 2 * N // 8, 12 * (N // 8)),
])
def test_sharding_strategies(strategy, weights, grads, opt):
    """What each strategy shards (Megatron-FSDP's _init_each_parameter_group_buffers)."""
    s = est({**FSDP, "data_parallel_sharding_strategy": strategy})
    assert (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes) == (weights, grads, opt)
    if strategy == "optim":
        assert "fsdp_unsharded_grads" not in s.transient and "fsdp_gathered_units" not in s.transient
    if strategy == "optim_grads":
        assert "fsdp_gathered_units" not in s.transient and "fsdp_unsharded_grads" not in s.transient  # loss peak


def test_fp32_gradient_and_bf16_master_dtypes():
    """megatron_fsdp_main_grads_dtype fp32: 4 B gradients; main params bf16: 2 + 8 = 10 B of optimizer."""
    s = est(FSDP, precision={"megatron_fsdp_main_grads_dtype": "fp32", "megatron_fsdp_main_params_dtype": "bf16"})
    assert (s.gradients_bytes, s.optimizer_bytes) == (4 * N // 8, 10 * (N // 8))


def test_hsdp_shards_inside_the_replica_and_optim_outer_sharding_over_all():
    """Two instances over DP 8: weights and gradients over the inner 4 ranks; optimizer over 4, or over all 8
    with outer_dp_sharding_strategy optim."""
    s = est({**FSDP, "num_distributed_optimizer_instances": 2})
    assert (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes) == (2 * N // 4, 2 * N // 4, 12 * (N // 4))
    s = est({**FSDP, "num_distributed_optimizer_instances": 2, "outer_dp_sharding_strategy": "optim"})
    assert s.optimizer_bytes == 12 * (N // 8)


def test_torch_fsdp2():
    """FSDP2 over DP 8: bf16 weights and gradients 2n/8, fp32 master + moments 12 x n/8. The running and
    prefetched layer are gathered and two layers' unsharded gradients exist: 4 x 2 B x U, which beats the
    gathered root module (2 B x 65,537,024 = 131,074,048 > 100,679,680, so the root is the larger moment)."""
    s = est({"use_torch_fsdp2": True}, {"use_distributed_optimizer": False, "gradient_accumulation_fusion": False})
    assert (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes) == (2 * N // 8, 2 * N // 8, 12 * (N // 8))
    assert s.transient["fsdp_gathered_units"] == max(4 * 2 * U, 2 * ROOT) == 2 * ROOT
    s = est({"use_torch_fsdp2": True, "torch_fsdp2_reshard_after_forward": False},
            {"use_distributed_optimizer": False, "gradient_accumulation_fusion": False})
    assert s.transient["fsdp_gathered_units"] == 2 * (4 * U + 2 * U)


def test_fsdp_rules():
    with pytest.raises(ConfigError, match="distributed optimizer"):
        est(FSDP, {"use_distributed_optimizer": False})
    with pytest.raises(ConfigError, match="pipeline parallelism"):
        est({"use_torch_fsdp2": True, "pipeline_model_parallel_size": 2},
            {"use_distributed_optimizer": False, "gradient_accumulation_fusion": False})
    with pytest.raises(ConfigError, match="only with use_megatron_fsdp"):
        est({"data_parallel_sharding_strategy": "optim"})
    with pytest.raises(ConfigError, match="divisible by num_distributed_optimizer_instances"):
        est({**FSDP, "num_distributed_optimizer_instances": 3})


def test_torch_fsdp2_optimizer_step():
    """FSDP2 has no gradient buffer: the gradients are the bf16 parameter shards' own .grad, and Megatron-Core's
    Float16OptimizerWithFloat16Params copies each to fp32 and frees it (optimizer.py
    _copy_model_grads_to_main_grads). With the full-recompute model of this file the step holds weights
    2n/8 + master and moments 12 x n/8 + fp32 gradient copies 4 x n/8 (no bf16 gradients) + the run-long GEMM
    workspaces (32 MiB + 1 KiB + 2 x 32 MiB; FSDP2 needs gradient_accumulation_fusion off, so Transformer Engine
    keeps no dummy weight gradients); FusedAdam adds nothing."""
    s = est({"use_torch_fsdp2": True}, {"use_distributed_optimizer": False, "gradient_accumulation_fusion": False,
                                        "recompute_granularity": "full", "recompute_method": "uniform",
                                        "recompute_num_layers": 1})
    n8 = N // 8
    assert s.optimizer_step_bytes == 2 * n8 + 12 * n8 + 4 * n8 + 96 * 2 ** 20 + 1024


REC = {"gradient_accumulation_fusion": False, "recompute_granularity": "full", "recompute_method": "uniform",
       "recompute_num_layers": 1}


def test_megatron_fsdp_optimizer_step_over_data_parallel_8():
    """optim_grads_params over DP 8, the full-recompute model of the FSDP2 step test. Megatron-LM @ d98e8a64,
    megatron/core/distributed/fsdp/src/megatron_fsdp/:

    - update_main_grads (param_and_grad_buffer.py) casts each gradient shard to the fp32 main weights' dtype:
      4 B x n/8 = 4 x 14,484,608 = 57,938,432 B, alive until the next zero_grad;
    - the root module's buckets are kept (AllGatherPipeline.reset(preserve_non_fsdp_units=True)):
      2 B x 65,537,024 = 131,074,048 B;
    - FusedAdam (te_fused) adds nothing; after it, DistributedOptimizer.step_with_ready_grads calls
      start_param_sync, which gathers the first parameter (the embedding, in the root) and prefetches units up
      to P = 1e9 / 2 elements: ceil(5e8 / U) = 40 > 4, so all 4 layers, 4 x 2 B x U = 100,679,680 B.

    The step then holds weights 2n/8 + gradients 2n/8 + master and moments 12 n/8 + those three + the run-long
    workspaces (96 MiB + 1 KiB, as in the FSDP2 test). The backward holds 2n of unsharded gradients instead
    (module docstring), so the peak stays there."""
    s = est(FSDP, REC)
    n8 = N // 8
    assert s.optimizer_step_bytes == (2 * n8 + 2 * n8 + 12 * n8 + 4 * n8 + 2 * ROOT + 4 * 2 * U
                                      + 96 * 2 ** 20 + 1024)
    assert s.peak_phase == "forward_backward"
    # torch's AdamW: exp_avg_sq.sqrt() for the shard, 4 B x n/8 = 57,938,432 < the prefetched 100,679,680, which
    # it precedes: the step is the same as with Apex's in-place FusedAdam (both need the local implementation).
    local = {**REC, "transformer_impl": "local"}
    assert (est(FSDP, {**local, "optimizer_implementation": "torch"}).optimizer_step_bytes
            == est(FSDP, {**local, "optimizer_implementation": "apex_fused"}).optimizer_step_bytes)


def test_megatron_fsdp_at_one_rank_gathers_nothing_and_steps_full_copies():
    """DP 1: every buffer's group has one rank, so DataParallelBuffer.fetch_bucket hands out the buffer itself:
    no gathered units, no root copy, no unsharded gradient buckets (measured: project batch 6). The step holds
    the full fp32 gradient copies, 4 B x n (FusedAdam adds nothing), over weights 2n + gradients 2n + master and
    moments 12n + the workspaces; torch's AdamW (local implementation) adds its sqrt temporaries, 4 B x n."""
    s = est(FSDP, {**REC, "world_size": 1})
    assert not any(k.startswith("fsdp_") for k in s.transient)
    assert s.peak_phase == "optimizer_step"
    assert s.transient["optimizer_fp32_grad_copies"] == 4 * N
    assert s.allocated_bytes == 2 * N + 2 * N + 12 * N + 4 * N + 96 * 2 ** 20 + 1024
    local = {**REC, "world_size": 1, "transformer_impl": "local"}
    torch, apex = (est(FSDP, {**local, "optimizer_implementation": i}) for i in ("torch", "apex_fused"))
    assert torch.transient["optimizer_temporaries"] == 4 * N
    assert torch.optimizer_step_bytes - apex.optimizer_step_bytes == 4 * N


@pytest.mark.parametrize("strategy,copies", [("no_shard", 4 * N), ("optim", 4 * (N // 8)),
                                             ("optim_grads", 4 * (N // 8))])
def test_megatron_fsdp_step_gradient_copies_follow_the_optimizer_shard(strategy, copies):
    """update_main_grads takes get_item(only_shard = strategy != no_shard): the optimizer's shard, n/8, or all
    n with no_shard; nothing is gathered after the step (weights not sharded), and FusedAdam adds nothing."""
    s = est({**FSDP, "data_parallel_sharding_strategy": strategy}, REC)
    weights, grads = 2 * N, (2 * N // 8 if strategy == "optim_grads" else 2 * N)
    opt = 12 * (N if strategy == "no_shard" else N // 8)
    assert s.optimizer_step_bytes == weights + grads + opt + copies + 96 * 2 ** 20 + 1024


def test_megatron_fsdp_decoupled_or_fp32_gradients_are_not_copied():
    """With the precision-aware optimizer Megatron-LM sets megatron_fsdp_use_decoupled_grad: the gradient is
    handed over as decoupled_grad, no cast; fp32 gradients already have the main weights' dtype."""
    for precision in ({"use_precision_aware_optimizer": True}, {"megatron_fsdp_main_grads_dtype": "fp32"}):
        s = est(FSDP, {**REC, "world_size": 1}, precision)
        assert "optimizer_fp32_grad_copies" not in s.transient, precision


# --------------------------------------------------------------------- gradient communication dtype
def test_grad_comm_dtype_is_the_dtype_of_the_unsharded_gradient_buckets():
    """optim_grads_params over DP 8, bf16 gradient buffer (auto), megatron_fsdp_grad_comm_dtype fp32, full
    recomputation (one 2048 x 1024 x 2 B = 4,194,304 B checkpoint a layer). The sharded buffer stays bf16
    (2n/8), but ``main_grad_getter`` fetches each unit's unsharded bucket in the communication dtype
    (``fetch_bucket(dtype=grad_comm_dtype)``), 4 B an element. Backward, by hand: the loss chunk's activations
    (final norm in/out 2 x 2048 x 1024 x 2 B + fp32 logits 262,144,000 B = 270,532,608 B) are gone before the
    layers' backward; the root bucket (the output layer's gradient arrives first) and each unit's bucket then
    wait, all n elements by the first layer's backward (1e9 + U > n): 4 B x n = 463,507,456 B beside the one
    checkpoint left, 4,194,304 B. That beats the loss's forward (+131,072,000 B of transient, with all
    287,309,824 B of activations and no bucket): 463,507,456 - 283,115,520 > 131,072,000 even before the layer's
    working set."""
    s = est(FSDP, REC, {"megatron_fsdp_grad_comm_dtype": "fp32"})
    assert s.gradients_bytes == 2 * N // 8
    assert s.transient["fsdp_unsharded_grads"] == 4 * N
    assert s.activations_bytes == 2048 * 1024 * 2 and "loss_forward" not in s.transient
    assert est(FSDP, REC, {"megatron_fsdp_grad_comm_dtype": "bf16"}) == est(FSDP, REC)


def test_gradient_buckets_at_the_peak_of_the_backward_pass():
    """fsdp.grads_in_backward by hand: three units of 10 elements, a root bucket of 20 (the output layer's),
    queue capacity 35 elements, 2 B each; one micro-batch saves 5 B a layer, the loss chunk 30 B (freed first);
    a layer's backward working set 50 B.

        moment                         buckets (elements)   bytes   activations freed   total
        loss forward (phase, 100 B)    0                    0       0                   100
        last layer's backward          20 + 10 = 30         60      30                  50 + 60 - 30 = 80
        middle layer's backward        min(35, 40) = 35     70      35                  50 + 70 - 35 = 85
        first layer's backward         min(35, 50) = 35     70      40                  80
        end of the backward pass       35                   70      45                  70 - 45 = 25

    The phase stays the peak (no bucket); with a phase of 60 B the middle layer's backward is (85 > 60):
    70 B of buckets, 35 B of activations released, the layer's 50 B working set instead of the phase's. In the
    first layer's backward (phase backward_working_set, 50 B) the root and the running unit are fetched:
    2 B x 30 = 60 B, 110 B in all, the peak."""
    q = fsdp.GradQueue([10, 10, 10], 20, 35, 2)
    args = ([10, 10, 10], [5, 5, 5], 20, 20)
    assert fsdp.grads_in_backward(q, *args, "loss_forward", 100, 50, 30) == (0, 0, None)
    assert fsdp.grads_in_backward(q, *args, "loss_forward", 60, 50, 30) == (70, 35, 50)
    assert fsdp.grads_in_backward(q, *args, "backward_working_set", 50, 50, 30) == (60, 0, None)


def test_grad_comm_dtype_equal_to_the_buffer_adds_nothing():
    """The CI runs' setting, --megatron-fsdp-main-grads-dtype fp32 --megatron-fsdp-grad-comm-dtype fp32: "No
    additional memory is allocated when grad_comm_dtype == main_grads_dtype" (MixedPrecisionPolicy): the same
    estimate as without the flag, and at one rank (buffers used in place) still no bucket."""
    fp32 = {"megatron_fsdp_main_grads_dtype": "fp32"}
    both = {**fp32, "megatron_fsdp_grad_comm_dtype": "fp32"}
    assert est(FSDP, precision=both) == est(FSDP, precision=fp32)
    assert not any(k.startswith("fsdp_") for k in est(FSDP, {**REC, "world_size": 1}, both).transient)


def test_another_grad_comm_dtype_copies_unsharded_buffers_while_they_are_reduced():
    """A gradient buffer that is not sharded (no_shard, or one rank) is reduced in place, unless the
    communication dtype differs: ``_bucket_group_gradient_reduce`` then copies each bucket into a new unsharded
    bucket of that dtype (``allocate_bucket_storage(dtype=grad_comm_dtype, init_values=...)``), freed with the
    reduce. no_shard reduces during the backward pass only with overlap_grad_reduce (else ``all_reduce_gradients``
    in place, in the buffer's dtype): 4 B x min(1e9 + U, n) = 4 B x n of fp32 copies, beside the 2 B x n bf16
    buffer. At one rank optim_grads_params copies the same way."""
    comm = {"megatron_fsdp_grad_comm_dtype": "fp32"}
    no_shard = {**FSDP, "data_parallel_sharding_strategy": "no_shard"}
    s = est(no_shard, {**REC, "overlap_grad_reduce": True}, comm)
    assert (s.gradients_bytes, s.transient["fsdp_unsharded_grads"]) == (2 * N, 4 * N)   # as in the test above
    assert "fsdp_unsharded_grads" not in est(no_shard, REC, comm).transient
    assert "fsdp_unsharded_grads" not in est(no_shard, {**REC, "overlap_grad_reduce": True}).transient
    one = {**REC, "world_size": 1}
    assert est(FSDP, one, comm).forward_backward_bytes > est(FSDP, one).forward_backward_bytes
    q = fsdp.megatron_fsdp_states(*_states_args(FSDP, {"world_size": 1}, comm)).grad_queue
    assert (q.units, q.root, q.elem) == ([U] * 4, ROOT, 4)
    t = est({**FSDP, "fsdp_double_buffer": True}, None, comm).transient
    assert t["fsdp_unsharded_grads"] == 2 * 4 * U       # FixedPoolAllocator: two units, in the comm dtype


def test_grad_comm_dtype_rules():
    """Only with Megatron-FSDP; with HSDP another dtype than the buffer's allocates the outer reduction's
    hsdp_comm_gbuf buckets: Megatron runs it, the estimator does not model it (refused by name, not called
    invalid)."""
    from estimator import UnsupportedError
    with pytest.raises(ConfigError, match="megatron_fsdp_grad_comm_dtype.*only with"):
        est(None, None, {"megatron_fsdp_grad_comm_dtype": "fp32"})
    with pytest.raises(UnsupportedError, match="Megatron-FSDP runs it.*not modelled") as e:
        est({**FSDP, "num_distributed_optimizer_instances": 2}, None, {"megatron_fsdp_grad_comm_dtype": "fp32"})
    assert not isinstance(e.value, ConfigError)
    est({**FSDP, "num_distributed_optimizer_instances": 2}, None, {"megatron_fsdp_grad_comm_dtype": "bf16"})


def test_megatron_ci_fsdp_dtensor_case_gradient_buckets():
    """Megatron-LM's CI run gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor (8 GPUs: TP 2, DP 4; optim_grads_params,
    --megatron-fsdp-main-grads-dtype fp32 --megatron-fsdp-grad-comm-dtype fp32), by hand. GPT, 12 layers,
    h = 512, 8 heads, GeLU MLP 2048, biases, LayerNorm, learned positions (1024), tied embeddings, vocabulary
    50257 padded to a multiple of 128 x TP = 256: 50432. Per TP rank:

        layer: QKV 512 x 768 + 768, projection 256 x 512 + 512, fc1 512 x 1024 + 1024, fc2 1024 x 512 + 512,
               two LayerNorms 2 x 1024                                     = 1,577,728; x 12 = 18,932,736
        root:  word embedding 25216 x 512 = 12,910,592, positions 1024 x 512 = 524,288, final norm 1024
                                                                           = 13,435,904
        n = 32,368,640

    The unit buckets are fetched in the communication dtype, fp32, which is the buffer's: 4 B a parameter, and
    with Megatron-FSDP's 1e9-element queue all of them wait by the end of a backward pass: 4 x 32,368,640 =
    129,474,560 B (123.48 MiB, 2^20 B); the sharded fp32 buffer is 4 B x n / 4 = 32,368,640 B. Same estimate
    with the flag as without. The peak is the loss's forward pass (GPT-2 vocabulary, micro-batch 4 x 1024: its
    fp32 logits), before any bucket of the micro-batch exists; at the end of the backward pass, where the 123.48
    MiB wait, the micro-batch's activations are gone. So the gradient buckets add nothing to the peak; summed
    with it regardless, the estimate was 10.6 % over this run's H100 golden, phase-aware it is 1.8 % over."""
    import shlex

    from estimator.formats.megatron_args import parse_megatron_args
    from estimator.validation.megatron_ci import load_data
    case = next(c for c in load_data()["cases"]
                if c["id"] == "mlm-gpt-gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor-h100")
    tokens = shlex.split(case["megatron_args"]) + list(case.get("supplied_args") or [])   # + the GPT-2 vocabulary
    cfg, _ = parse_megatron_args(tokens, world_size=case["world_size"])
    s = estimate(cfg).stages[0]
    n = 12 * 1_577_728 + 25216 * 512 + 1024 * 512 + 1024
    assert (n, s.parameters) == (32_368_640, 32_368_640)
    from estimator.config.load import load_config
    from estimator.memory.assemble import parameter_layout
    from estimator.model.resolve import resolve
    from estimator.memory.states import byte_model
    r = resolve(load_config(cfg))
    units = [parameter_layout(r)[0][k] for k in r.layer_kinds]
    root = n - sum(d + e for d, _, e in units)
    assert [d + e for d, _, e in units] == [1_577_728] * 12 and root == 13_435_904
    q = fsdp.megatron_fsdp_states(r, byte_model(r), 8, n, 0, 0, units, root).grad_queue
    assert 4 * (sum(q.units) + q.root) == 4 * n == 129_474_560 and q.elem == 4
    assert "loss_forward" in s.transient and "fsdp_unsharded_grads" not in s.transient
    assert s.gradients_bytes == 4 * n // 4
    cfg["precision"]["megatron_fsdp_grad_comm_dtype"] = "auto"
    assert estimate(cfg).stages[0] == s


FP8_PARAMS = {"fp8": True, "fp8_recipe": "delayed", "fp8_param_gather": True}
LIN = 12_582_912                           # linear weight elements of one layer (4h^2 + 2hf)


@pytest.mark.parametrize("unit_size, gathered", [(None, 4), (2 * U, 2)])
def test_keep_fp8_transpose_cache_holds_every_transpose_all_run(unit_size, gathered):
    """flagsB28: delayed FP8 weights (fp8_param_gather) on Hopper, ZeRO-3 over DP 8. A gathered unit holds its FP8
    weights (1 B x LIN) and their transposes (1 B x LIN) and the bf16 norms (2 B x 2,048): 25,169,920 B.
    --keep-fp8-transpose-cache keeps the transposes of all 4 layers whole instead, 4 x 12,582,912 = 50,331,648 B more
    weights, and a gathered unit then holds 12,587,008 B. With all 4 units gathered at the peak (the default
    communication unit) the total is the same; with suggested_communication_unit_size 2U (prefetch U: 2 units
    gathered) the peak grows by the 2 transposes no longer gathered-and-dropped: 2 x 12,582,912 = 25,165,824 B."""
    par = {**FSDP, **({"suggested_communication_unit_size": unit_size} if unit_size else {})}
    base = est(par, {"use_distributed_optimizer": True}, FP8_PARAMS)
    kept = est({**par, "keep_fp8_transpose_cache": True}, {"use_distributed_optimizer": True}, FP8_PARAMS)
    assert kept.weights_bytes - base.weights_bytes == 4 * LIN == 50_331_648
    assert base.transient["fsdp_gathered_units"] == gathered * (2 * 2048 + 2 * LIN)
    assert kept.transient["fsdp_gathered_units"] == gathered * (2 * 2048 + LIN)
    assert kept.allocated_bytes - base.allocated_bytes == (4 - gathered) * LIN


def test_keep_fp8_transpose_cache_changes_nothing_without_transposes():
    """On B200 (sm_100) delayed FP8 keeps no transpose, and MXFP8's column-wise copy is Megatron-FSDP's own gathered
    transpose buffer: the flag leaves both estimates as they are. Without Megatron-FSDP it is a rule error."""
    for pr, tr in ((FP8_PARAMS, {"gpu_arch": "sm_100"}),
                   ({**FP8_PARAMS, "fp8_recipe": "mxfp8", "reuse_grad_buf_for_mxfp8_param_ag": False},
                    {"gpu_arch": "sm_100"})):
        tr = {"use_distributed_optimizer": True, **tr}
        assert est({**FSDP, "keep_fp8_transpose_cache": True}, tr, pr).allocated_bytes == est(FSDP, tr, pr).allocated_bytes
    with pytest.raises(ConfigError, match="use_megatron_fsdp"):
        est({"keep_fp8_transpose_cache": True})


#: The two-layer model the Bridge-config tests below read (Bridge's model section).
_BRIDGE_MODEL = {"num_layers": 2, "hidden_size": 1024, "num_attention_heads": 8, "ffn_hidden_size": 4096,
                 "vocab_size": 32000, "seq_length": 4096}


def test_keep_fp8_transpose_cache_from_bridge_and_megatron_lm():
    """Bridge's ddp.keep_fp8_transpose_cache is DDP's field itself, Megatron-LM's --keep-fp8-transpose-cache fills it."""
    from estimator.formats.bridge.config import read_bridge_config
    from estimator.formats.megatron_args import read_megatron_args
    bridge = read_bridge_config(
        {"model": _BRIDGE_MODEL, "train": {"micro_batch_size": 1},
         "mixed_precision": "bf16_with_fp8_delayed_scaling_mixed",
         "ddp": {"use_megatron_fsdp": True, "use_distributed_optimizer": True, "keep_fp8_transpose_cache": True},
         "optimizer": {"use_distributed_optimizer": True}}, world_size=8).config
    lm = read_megatron_args("--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --seq-length 4096 "
                            "--max-position-embeddings 4096 --vocab-size 32000 --micro-batch-size 1 --bf16 "
                            "--fp8-format hybrid --fp8-param-gather --use-distributed-optimizer --use-megatron-fsdp "
                            "--keep-fp8-transpose-cache", world_size=8).config
    assert bridge["parallelism"]["keep_fp8_transpose_cache"] is lm["parallelism"]["keep_fp8_transpose_cache"] is True


def test_cuda_graph_mode_keeps_the_cast_gradient_shards_all_run():
    """flagsB28, Bridge's ddp.megatron_fsdp_cuda_graph_mode: bf16 gradients (auto) and fp32 master weights, so the
    step's gradient shards are fp32 copies, 4 B x n/8 = 4 x 14,484,608 = 57,938,432 B; kept between steps they are
    beside the forward/backward peak too, and the step (which held them anyway) is unchanged. With fp32 gradients
    the shards are views of the buffer: nothing kept."""
    tr = {"use_distributed_optimizer": True}
    base, graph = est(FSDP, tr), est({**FSDP, "megatron_fsdp_cuda_graph_mode": True}, tr)
    assert graph.transient["fsdp_grad_shard_copies"] == 4 * (N // 8) == 57_938_432
    assert graph.allocated_bytes - base.allocated_bytes == 57_938_432
    assert graph.optimizer_step_bytes == base.optimizer_step_bytes
    fp32 = {"megatron_fsdp_main_grads_dtype": "fp32"}
    assert est({**FSDP, "megatron_fsdp_cuda_graph_mode": True}, tr, fp32).allocated_bytes == est(FSDP, tr, fp32).allocated_bytes


def test_cuda_graph_mode_from_bridge_and_back():
    from estimator.formats.bridge.config import read_bridge_config
    from estimator.formats.bridge.export import to_bridge_dict
    cfg = read_bridge_config(
        {"model": _BRIDGE_MODEL, "train": {"micro_batch_size": 1}, "mixed_precision": "bf16_mixed",
         "ddp": {"use_megatron_fsdp": True, "use_distributed_optimizer": True, "megatron_fsdp_cuda_graph_mode": True},
         "optimizer": {"use_distributed_optimizer": True}}, world_size=8).config
    assert cfg["parallelism"]["megatron_fsdp_cuda_graph_mode"] is True
    assert to_bridge_dict(cfg)["ddp"]["megatron_fsdp_cuda_graph_mode"] is True


# vgraph29: Megatron-FSDP beside a qwen3_vl vision tower (tests/memory/test_vision.py's toy: 2 tower layers of
# 33,088 sharded + 384 replicated elements, 510,272 tower parameters in all).
_VIT_MODEL = dict(num_layers=4, hidden_size=512, num_attention_heads=8, vocab_size=1000)
_VIT = {**_VIT_MODEL, "vision_num_layers": 2, "vision_hidden_size": 64, "vision_num_attention_heads": 4,
        "vision_ffn_hidden_size": 128}


def test_a_vision_towers_layers_are_fsdp_units_and_the_rest_joins_the_root():
    """Megatron-LM @ d98e8a64 mcore_fsdp_adapter.py: fsdp_unit_modules default to TransformerLayer (and MoE / Mamba
    layers) anywhere in the chunk, so the tower's 2 ViT layers are units; its patch embedding, positions and merger
    belong to the root module, whose weights stay gathered. optim_grads_params over 2 ranks, bf16 weights and
    gradients, fp32 master and moments (12 B): the tower adds 2 x 510,272 / 2 = 510,272 bytes of weights and of
    gradients and 12 x 510,272 / 2 = 3,061,632 of optimizer states; the gathered root grows by the tower less its
    layers, 2 B x (510,272 - 2 x 33,472) = 886,656."""
    def stage(model):
        return estimate(make_config(model, {**FSDP, "data_parallel_sharding_strategy": "optim_grads_params"},
                                    {"world_size": 2, "use_distributed_optimizer": True,
                                     "images_per_sample": 1 if model is _VIT else 0})).stages[0]
    base, vit = stage(_VIT_MODEL), stage(_VIT)
    assert (vit.weights_bytes - base.weights_bytes, vit.gradients_bytes - base.gradients_bytes,
            vit.optimizer_bytes - base.optimizer_bytes) == (510_272, 510_272, 3_061_632)
    assert vit.transient["fsdp_gathered_root"] - base.transient["fsdp_gathered_root"] == 886_656


def test_a_frozen_tower_with_megatron_fsdp_is_refused_by_name():
    from estimator import UnsupportedError
    with pytest.raises(UnsupportedError, match="use_megatron_fsdp with a frozen vision tower"):
        estimate(make_config(_VIT, FSDP, {"world_size": 2, "use_distributed_optimizer": True,
                                          "images_per_sample": 1, "freeze_vision_model": True}))


def test_fine_grained_param_gather_gathers_the_same_buckets():
    """Megatron-LM's --megatron-fsdp-enable-fine-grained-param-gather (Bridge's ddp field of the same name) has no
    memory effect. Megatron-LM @ d98e8a64 : megatron_fsdp/param_and_grad_buffer.py ``_get_parameter_groups`` makes
    one bucket per FSDP unit, dtype and expert/dense kind (its step 3 keeps every parameter of a group in one
    bucket), and ``AllGatherPipeline.all_gather_params`` gathers whole buckets, then prefetches the following ones
    until P = 1e9 / 2 elements (here ``suggested_communication_unit_size`` 2U: P = U). A submodule's hook
    (megatron_fsdp.py ``_param_list_for_submodule_unshard``, ``recurse=False``) thus gathers its layer's bucket and
    prefetches from there, as the layer's own hook does; the backward hooks stay per unit. So in both runs a layer
    of U = 12,584,960 elements and the prefetched next one are gathered: 2 x 2 B x U = 50,339,840 B."""
    from estimator.formats.bridge.config import read_bridge_config
    from estimator.formats.megatron_args import read_megatron_args

    def bridge(fine):
        return estimate(read_bridge_config(
            {"model": {**{k: v for k, v in MODEL.items() if k not in ("activation_func", "gated_linear_unit",
                                                                       "untie_embeddings_and_output_weights")},
                       "share_embeddings_and_output_weights": False, "gated_linear_unit": False,
                       "activation_func": "gelu", "normalization": "RMSNorm", "add_bias_linear": False,
                       "seq_length": 2048},
             "train": {"micro_batch_size": 1}, "mixed_precision": "bf16_mixed",
             "ddp": {"use_megatron_fsdp": True, "use_distributed_optimizer": True,
                     "data_parallel_sharding_strategy": "optim_grads_params", "suggested_communication_unit_size": 2 * U,
                     "megatron_fsdp_enable_fine_grained_param_gather": fine},
             "optimizer": {"use_distributed_optimizer": True}}, world_size=8).config).stages[0]
    plain, fine = bridge(False), bridge(True)
    assert plain.transient["fsdp_gathered_units"] == fine.transient["fsdp_gathered_units"] == 2 * 2 * U == 50_339_840
    assert plain.allocated_bytes == fine.allocated_bytes
    flags = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --max-position-embeddings "
             "2048 --vocab-size 32000 --micro-batch-size 1 --bf16 --use-distributed-optimizer --use-megatron-fsdp")
    lm = read_megatron_args(flags + " --megatron-fsdp-enable-fine-grained-param-gather", world_size=8)
    assert lm.config == read_megatron_args(flags, world_size=8).config
    assert any("--megatron-fsdp-enable-fine-grained-param-gather" in str(x) for x in lm.no_effect)


MXFP8_PARAMS = {"fp8": True, "fp8_recipe": "mxfp8", "fp8_param_gather": True,
                "reuse_grad_buf_for_mxfp8_param_ag": False}
LIN = 4 * H * H + 2 * H * F                # 12,582,912 linear weight elements a layer


def test_mxfp8_weights_keep_two_shards_and_gather_one_copy_a_unit():
    """MXFP8 weights (fp8_param_gather) under ZeRO-3 over DP 8. Megatron-LM @ d98e8a64 megatron_fsdp/
    param_and_grad_buffer.py gives an MXFP8 parameter group a transpose_weight_buffer beside its model_weight_buffer,
    sharded alike; the forward pass gathers the row-wise bucket, the backward pass the column-wise one.

    Weights on one GPU: (norms 4 x 2 x 1024 x 2 B 16,384 + root 65,537,024 x 2 B 131,074,048 + linear 4 x 12,582,912
    x 1 B 50,331,648) / 8 = 22,677,760, the column-wise shards 50,331,648 / 8 = 6,291,456, and the MXFP8 scales,
    kept whole: one byte per 32 elements, row-wise and column-wise, 2 x 50,331,648 / 32 = 3,145,728: 32,114,944.
    Gathered units: 1 + min(ceil(5e8 / 12,584,960), 3) = 4, each 12,582,912 x 1 B + 2,048 x 2 B = 12,587,008:
    50,348,032 (counted at 2 B a linear element before, as if both copies were gathered: 100,679,680)."""
    s = est(FSDP, {"use_distributed_optimizer": True}, MXFP8_PARAMS)
    assert s.weights_bytes == 22_677_760 + 6_291_456 + 3_145_728 == 32_114_944
    assert s.transient["fsdp_gathered_units"] == 4 * (LIN + 2 * 2 * H) == 50_348_032
    assert "fsdp_recomputed_rowwise_copy" not in s.transient


@pytest.mark.parametrize("training, again", [
    ({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}, LIN),
    ({"recompute_granularity": "selective", "recompute_modules": ["mlp"]}, LIN),
    ({"recompute_granularity": "selective", "recompute_modules": ["core_attn", "layernorm"]}, 0),
    ({"recompute_granularity": "selective"}, 0),                                  # core_attn: no weights
])
def test_mxfp8_recompute_gathers_the_row_wise_copy_again(training, again):
    """A unit whose backward pass recomputes FP8 linear layers gathers its row-wise bucket again beside the
    column-wise ones (megatron_fsdp.py _pre_forward_param_unshard in the PRE_BACKWARD state; the per-submodule hooks
    are on for MXFP8 with fp8_param_gather, mcore_fsdp_adapter.py), released only with the unit after its backward
    pass: one layer's 12,582,912 linear elements at 1 B. Recomputing modules without FP8 weights adds nothing."""
    s = est(FSDP, {"use_distributed_optimizer": True, **training}, MXFP8_PARAMS)
    assert s.transient.get("fsdp_recomputed_rowwise_copy", 0) == again
    assert s.transient["fsdp_gathered_units"] == 50_348_032


def test_mxfp8_recompute_copy_follows_the_recomputed_buckets():
    """Which buckets the recomputed modules touch, on one unit of 100 dense elements (80 linear) and 400 expert
    elements: full recompute both (480); moe the experts (400) and, with shared experts, the dense FP8 bucket too
    (480); mla_up_proj the dense one (80); an expert buffer over one rank is not gathered (0)."""
    from types import SimpleNamespace as NS

    def copy(granularity, modules=None, shared=None, dist_expert=True):
        cfg = NS(training=NS(recompute_granularity=granularity, recompute_modules=modules),
                 model=NS(moe_shared_expert_intermediate_size=shared),
                 precision=NS(fp8=True, fp8_param_gather=True, fp8_recipe="mxfp8"))
        return fsdp._recompute_copy(NS(cfg=cfg), [(100, 80, 400)], True, dist_expert)

    assert copy("full") == 480
    assert copy("selective", ["moe"]) == 400
    assert copy("selective", ["moe"], shared=64) == 480
    assert copy("selective", ["mla_up_proj"]) == 80
    assert copy("selective", ["moe"], dist_expert=False) == 0
    assert copy(None) == 0


def test_mxfp8_double_buffering_keeps_two_units_of_both_copies():
    """With fsdp_double_buffer the column-wise buckets have a fixed pool of their own (param_and_grad_buffer.py
    transpose_weight_alloc, a FixedPoolAllocator beside weight_alloc, each of two unit-sized buffers kept in the global
    memory buffer): 2 units x (12,582,912 x (1 + 1) B + 2,048 x 2 B) = 50,339,840, full recompute or not (the
    recomputed unit's row-wise copy takes a slot of its pool)."""
    for tr in ({}, {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}):
        s = est({**FSDP, "fsdp_double_buffer": True}, {"use_distributed_optimizer": True, **tr}, MXFP8_PARAMS)
        assert s.transient["fsdp_gathered_units"] == 2 * (2 * LIN + 2 * 2 * H) == 50_339_840
        assert "fsdp_recomputed_rowwise_copy" not in s.transient
