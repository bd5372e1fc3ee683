"""The optimizer step's own buffers and the phase that holds a stage's peak (estimator/memory/optimizer_step.py).

Every expected value is derived by hand in the docstring from Megatron-Core's, Transformer Engine's and
PyTorch's code as estimator/memory/optimizer_step.py cites it. The model used throughout:

    DENSE: 2 layers, h 256, 4 heads (MHA, head 64), SwiGLU ffn 512, vocab 1024 (a multiple of 128: no
    padding), untied, RMSNorm, no biases.
      layer: QKV 256 x 768 = 196,608 + proj 256 x 256 = 65,536 + fc1 256 x 1,024 = 262,144
             + fc2 512 x 256 = 131,072 + two norms 512 = 655,872
      N = 2 x 655,872 + embedding 262,144 + output 262,144 + final norm 256 = 1,836,288
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.load import load_config
from estimator.config.errors import ConfigError
from estimator.memory.assemble import kind_activations
from estimator.memory.optimizer_step import recompute_retained, step_buffers
from estimator.model.resolve import resolve
from estimator.memory.states import byte_model
from tests.conftest import make_config

MIB = 2 ** 20
N = 1_836_288
DENSE = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 512,
         "vocab_size": 1024, "untie_embeddings_and_output_weights": True}
LOCAL_TORCH = {"transformer_impl": "local", "optimizer_implementation": "torch", "gradient_accumulation_fusion": False}
#: One GPU's fixed buffers with the local implementation: two PyTorch cuBLAS workspaces (64 MiB) and the local
#: attention's score buffer in Megatron's global buffer, 2 B x b 1 x a 4 x s 128 x s 128 = 131,072 B.
LOCAL_FIXED = 64 * MIB + 131_072


def _stage(training=None, precision=None, model=DENSE, parallelism=None):
    cfg = make_config(model, parallelism, {"seq_length": 128, **(training or {})}, precision)
    return estimate(cfg).stages[0]


def _buffers(training=None, precision=None, model=DENSE, parallelism=None, dense=N, expert=0, shard=1):
    r = resolve(load_config(make_config(model, parallelism, {"seq_length": 128, **(training or {})}, precision)))
    return step_buffers(r, byte_model(r), dense, expert, shard)


def test_parameter_count_by_hand():
    assert estimate(make_config(DENSE, training={"seq_length": 128})).parameters.total == N


def test_fused_adam_with_fp32_gradients_adds_nothing():
    """Transformer Engine's FusedAdam updates in place; an fp32 gradient buffer is read through a view
    (``shard_model_grad.float()`` returns the tensor itself): the step holds only the model states and the
    run-long buffers (GEMM workspaces 32 MiB + 1 KiB + 2 x 32 MiB; Transformer Engine's cached dummy weight
    gradients, bf16, one per distinct weight shape: 768 x 256 + 256 x 256 + 1,024 x 256 + 256 x 512 = 655,360
    elements = 1,310,720 B), less than the forward/backward, which holds activations on top of them."""
    b = _buffers()
    assert (b.grad_copies, b.temporaries) == (0, 0)
    s = _stage()
    assert s.peak_phase == "forward_backward"
    assert s.transient["te_dummy_wgrad"] == 1_310_720 and s.transient["workspaces"] == 96 * MIB + 1024
    assert s.optimizer_step_bytes == 18 * N + 96 * MIB + 1024 + 1_310_720
    assert s.allocated_bytes == s.forward_backward_bytes > s.optimizer_step_bytes


def test_torch_adamw_holds_the_peak_of_a_full_recompute_run():
    """torch.optim.AdamW (foreach) computes exp_avg_sq.sqrt() for the whole group: 4 B x N = 7,345,152 B. With
    bf16 weights, fp32 gradients and Adam on one GPU the states are 18 B x N = 33,053,184 B, so the step holds

        33,053,184 + 7,345,152 + 64 MiB + 131,072 = 107,638,272 B.

    With full recompute the forward/backward holds far less than 7 MiB above the states and fixed buffers:
    two checkpoints of 128 x 256 x 2 B, the logits of 128 x 1,024 tokens (fp32 softmax 512 KiB, bf16 256 KiB)
    and one layer's recomputation (well under 2 MiB). The step is the peak."""
    s = _stage({**LOCAL_TORCH, "recompute_granularity": "full", "recompute_method": "uniform"})
    assert s.peak_phase == "optimizer_step"
    assert s.optimizer_step_bytes == s.allocated_bytes == 107_638_272
    assert s.activations_bytes == 0 and sum(s.activations.values()) == 0
    assert s.transient == {"workspaces": 64 * MIB, "global_memory_buffer": 131_072,
                           "optimizer_temporaries": 4 * N}
    assert s.forward_backward_bytes < s.allocated_bytes
    assert s.allocated_bytes == (s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + s.activations_bytes
                                 + s.transient_bytes)


def test_bf16_gradient_buffer_is_copied_to_fp32_for_the_step():
    """--grad-reduce-in-bf16: ``main_param.grad = shard_model_grad.float()`` allocates 4 B per parameter of the
    optimizer's shard. Distributed optimizer over DP 4: shard ceil(1,836,288 / 4) = 459,072, so the copies are
    1,836,288 B, with Transformer Engine's FusedAdam as with PyTorch's; PyTorch adds 4 B x 459,072 more."""
    tr = {"world_size": 4, "global_batch_size": 4}
    pr = {"accumulate_allreduce_grads_in_fp32": False}
    assert _buffers(tr, pr, shard=4) == (1_836_288, 0)
    assert _buffers({**tr, **LOCAL_TORCH}, pr, shard=4) == (1_836_288, 1_836_288)
    # Without the distributed optimizer (Float16OptimizerWithFloat16Params) nothing is sharded: 4 B x N each.
    assert _buffers({**tr, **LOCAL_TORCH, "use_distributed_optimizer": False}, pr, shard=4) == (4 * N, 4 * N)


def test_bf16_gradients_make_the_step_the_peak_with_fused_adam_too():
    """One GPU, bf16 weights and gradients: states (2 + 2 + 12) x N = 29,380,608 B; the step adds the fp32 copies
    4 x N = 7,345,152 B; Transformer Engine layers keep their GEMM workspaces (32 MiB + 1 KiB + 2 x 32 MiB) and,
    with gradient-accumulation fusion, one cached dummy weight gradient per distinct weight shape (bf16):
    768 x 256 + 256 x 256 + 1,024 x 256 + 256 x 512 = 655,360 elements = 1,310,720 B. Total 138,700,800 B, more
    than the forward/backward with full recompute holds."""
    s = _stage({"recompute_granularity": "full", "recompute_method": "uniform"},
               {"accumulate_allreduce_grads_in_fp32": False})
    assert s.peak_phase == "optimizer_step"
    assert s.transient["optimizer_fp32_grad_copies"] == 4 * N
    assert s.transient["te_dummy_wgrad"] == 1_310_720
    assert s.allocated_bytes == 29_380_608 + 4 * N + 96 * MIB + 1024 + 1_310_720 == 138_700_800


def test_fp32_weights_have_no_copies():
    """fp32 weights: the gradient buffer is fp32 and the distributed optimizer steps the model's own fp32 shards
    (``shard_fp32_groups``): no copy; PyTorch's sqrt temporaries remain (4 B x N on one GPU)."""
    assert _buffers(LOCAL_TORCH, {"params_dtype": "fp32"}) == (0, 4 * N)
    assert _buffers({}, {"params_dtype": "fp32"}) == (0, 0)


def test_fp16_weights_copy_their_fp16_gradients():
    """fp16 weights: Megatron-LM keeps the gradient buffer in fp16 unless --accumulate-allreduce-grads-in-fp32,
    so the step copies it to fp32 (4 B x N on one GPU); with the fp32 buffer there is nothing to copy."""
    assert _buffers({}, {"params_dtype": "fp16"}) == (4 * N, 0)
    assert _buffers({}, {"params_dtype": "fp16", "accumulate_allreduce_grads_in_fp32": True}) == (0, 0)


@pytest.mark.parametrize("exp_avg, exp_avg_sq, main_params, copies", [
    ("fp32", "fp32", "fp32", 0),   # everything fp32: nothing to unscale
    ("bf16", "bf16", "fp32", 0),   # both moments bf16: the kernel unscales them itself (fuse_unscale)
    ("bf16", "fp32", "fp32", 1),   # one bf16 moment alone: get_unscaled_state -> .float()
    ("fp16", "fp16", "fp32", 2),   # fp16 moments: two fp32 copies
    ("fp8", "fp8", "fp32", 2),     # FP8 (uint8) moments: two fp32 copies
    ("fp8", "fp8", "fp16", 3),     # and fp16 master weights, unscaled too
])
def test_precision_aware_fused_adam_unscales_low_precision_states(exp_avg, exp_avg_sq, main_params, copies):
    """Transformer Engine's FusedAdam with master weights (precision-aware optimizer, distributed over DP 2):
    each state not in fp32 gets an fp32 copy for the whole group before the kernel, 4 B x shard
    ceil(1,836,288 / 2) = 918,144; the gradient is read through decoupled_grad (no copy, even from a bf16
    buffer)."""
    pr = {"use_precision_aware_optimizer": True, "exp_avg_dtype": exp_avg, "exp_avg_sq_dtype": exp_avg_sq,
          "main_params_dtype": main_params, "accumulate_allreduce_grads_in_fp32": False}
    assert _buffers({"world_size": 2}, pr, shard=2) == (0, copies * 4 * 918_144)


def test_precision_aware_with_megatron_kept_masters_copies_the_gradient():
    """FP8 with a recipe other than delayed and fp32 master weights: Megatron-Core keeps the masters itself
    (use_precision_aware_optimizer_no_fp8_or_ds_fp8 is false), so a bf16 gradient shard is copied to fp32."""
    pr = {"use_precision_aware_optimizer": True, "fp8": True, "fp8_recipe": "tensorwise",
          "accumulate_allreduce_grads_in_fp32": False}
    assert _buffers({}, pr) == (4 * N, 0)


def test_separate_expert_optimizer_steps_after_the_dense_one():
    """Routed experts have their own inner optimizer when EP > 1 (parameters with allreduce = False); the
    ChainedOptimizer steps them one after the other, so PyTorch's temporaries are those of the larger shard.
    2 GPUs, 1,000 dense and 3,000 expert parameters on a GPU: dense shard over DP 2 = 500; with EP 2 the expert
    data-parallel size is 2 / (ETP 1 x EP 2) = 1, shard 3,000: copies 4 x (500 + 3,000) = 14,000 B (both at
    once), temporaries 4 x max(500, 3,000) = 12,000 B. With EP 1 and ETP = TP one optimizer holds both, expert
    shard 3,000 / 2 = 1,500: copies and temporaries 4 x (500 + 1,500) = 8,000 B."""
    moe = {**DENSE, "num_experts": 4, "moe_ffn_hidden_size": 128}
    tr = {**LOCAL_TORCH, "world_size": 2, "global_batch_size": 2}
    pr = {"accumulate_allreduce_grads_in_fp32": False}
    ep2 = _buffers(tr, pr, model=moe, parallelism={"expert_model_parallel_size": 2}, dense=1_000, expert=3_000,
                   shard=2)
    assert ep2 == (14_000, 12_000)
    assert _buffers(tr, pr, model=moe, dense=1_000, expert=3_000, shard=2) == (8_000, 8_000)


def test_implementation_must_match_what_is_installed():
    """Megatron-Core imports Transformer Engine's FusedAdam whenever Transformer Engine is there, and the
    precision-aware optimizer's dtypes are arguments only it takes."""
    with pytest.raises(ConfigError, match="optimizer_implementation"):
        load_config(make_config(DENSE, training={"optimizer_implementation": "torch"}))
    with pytest.raises(ConfigError, match="optimizer_implementation"):
        load_config(make_config(DENSE, training={"transformer_impl": "local", "optimizer_implementation": "apex_fused"},
                                precision={"use_precision_aware_optimizer": True}))
    load_config(make_config(DENSE, training={"transformer_impl": "local", "optimizer_implementation": "apex_fused"}))


def test_peak_phase_is_in_the_json():
    d = estimate(make_config(DENSE, training={"seq_length": 128, **LOCAL_TORCH, "recompute_granularity": "full",
                                              "recompute_method": "uniform"})).to_dict()
    st = d["stages"][0]
    assert st["peak_phase"] == "optimizer_step"
    assert st["allocated_bytes"] == st["optimizer_step_bytes"] > st["forward_backward_bytes"] > 0


# Recomputed MoE inputs kept through the step (estimator/memory/optimizer_step.py point 3). MOE: DENSE with 4 layers,
# every MLP 4 experts x 256, top-2; s 128, b 1, bf16, TP 1: one layer input is 128 x 256 x 2 B = 65,536 B, and
# each checkpointed group holding a MoE layer keeps that input (a detached leaf) and its gradient: 131,072 B.
MOE = {**DENSE, "num_layers": 4, "num_experts": 4, "moe_router_topk": 2, "moe_ffn_hidden_size": 256}
KEPT = 2 * 128 * 256 * 2


def _kept(training, model=MOE):
    r = resolve(load_config(make_config(model, None, {"seq_length": 128, **training})))
    return recompute_retained(r, r.plan[0].chunks, kind_activations(r))


@pytest.mark.parametrize("training, model, groups", [
    # Selective recompute of "moe": every MoE layer is its own checkpoint: 4 groups.
    ({"recompute_granularity": "selective", "recompute_modules": ["moe"]}, MOE, 4),
    # With moe_layer_freq [0, 1, 0, 1] two layers are MoE: 2 groups.
    ({"recompute_granularity": "selective", "recompute_modules": ["moe"]}, {**MOE, "moe_layer_freq": [0, 1, 0, 1]}, 2),
    # Full recompute, uniform, 2 layers per group: groups (0, 1) and (2, 3), each holding a MoE layer.
    ({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 2},
     {**MOE, "moe_layer_freq": [0, 1, 0, 1]}, 2),
    # Full recompute, uniform, 1 layer per group, MoE layers 1 and 3 only: 2 of the 4 groups.
    ({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
     {**MOE, "moe_layer_freq": [0, 1, 0, 1]}, 2),
    # Full recompute, block, first 3 layers one by one: layers 0, 1, 2, of which MoE 1: 1 group.
    ({"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 3},
     {**MOE, "moe_layer_freq": [0, 1, 0, 1]}, 1),
])
def test_recomputed_moe_inputs_stay_alive_through_the_step(training, model, groups):
    """The step holds 2 x (layer input) per checkpointed group with a MoE layer (the arithmetic above), with the
    alltoall dispatcher (``self.probs``), the allgather one (``self.local_probs``) and the flex one (its
    managers' ``self.token_probs``) alike."""
    assert _kept(training, model) == groups * KEPT
    for dispatcher in ("allgather", "flex"):
        assert _kept(training, {**model, "moe_token_dispatcher_type": dispatcher}) == groups * KEPT


def test_no_recomputed_moe_inputs_without_a_checkpointed_moe_layer():
    """Selective recompute of core_attn only, or a dense model under full recompute: no leaf is kept."""
    assert _kept({"recompute_granularity": "selective", "recompute_modules": ["core_attn"]}) == 0
    assert _kept({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
                 DENSE) == 0


def test_the_kept_inputs_count_in_the_step_of_a_stage():
    """With torch's AdamW (4 B per parameter of temporaries) the step holds the peak of this small model; the
    kept inputs are among its buffers, by name."""
    s = _stage({"recompute_granularity": "selective", "recompute_modules": ["moe"], **LOCAL_TORCH}, model=MOE)
    assert s.peak_phase == "optimizer_step"
    assert s.transient["recompute_retained_inputs"] == 4 * KEPT


def test_torch_sgd_step_adds_the_weight_decayed_gradients():
    """torch.optim.SGD (foreach) with weight decay writes grad + weight_decay x param into new tensors for the
    whole group (``torch._foreach_add``): 4 B x N. States without the distributed optimizer: bf16 weights 2 B,
    fp32 gradient buffer 4 B (no fp32 copy needed), fp32 master 4 B, momentum 4 B = 14 B x N. The step holds
    14 N + 4 N + the local implementation's run-long buffers; Transformer Engine's FusedSGD adds nothing."""
    sgd = {"optimizer": "sgd", "use_distributed_optimizer": False}
    s = _stage({**sgd, **LOCAL_TORCH})
    assert s.optimizer_step_bytes == 18 * N + LOCAL_FIXED
    assert _buffers(sgd).temporaries == 0
