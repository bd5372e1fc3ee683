"""Model states (estimator/memory/states.py) against Megatron-Core's allocation rules, by hand.

The model is tests/memory/test_memory.py's: L=4, h=1024, 8 heads, GeLU MLP f=4096, RMSNorm, no biases, untied
vocabulary 32000, bf16. Per layer: attention 4h^2 + norm h, MLP 2hf + norm h; linear weights per layer
4h^2 + 2hf = 12,582,912; n = 4 * 12,584,960 + 2 * 32,768,000 + 1024 = 115,876,864 parameters, of which
4 * 12,582,912 = 50,331,648 are linear-layer weights (the rest: embedding, output layer, norms).
One GPU (world 1), so the distributed optimizer's shard count is 1.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate
from tests.conftest import make_config

H, F, V, L = 1024, 4096, 32000, 4
N = L * (4 * H * H + H + 2 * H * F + H) + 2 * V * H + H      # 115,876,864
LIN = L * (4 * H * H + 2 * H * F)                             # 50,331,648
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)


def stage(precision=None, training=None, model=None):
    tr = {"seq_length": 2048, "world_size": 1, "use_distributed_optimizer": True, **(training or {})}
    return estimate(make_config({**MODEL, **(model or {})}, None, tr, precision)).stages[0]


def test_bf16_gradient_buffer():
    """Megatron-Core param_and_grad_buffer.py, group_params_for_buffers: grad_dtype = torch.float if
    grad_reduce_in_fp32 else param.dtype. Megatron-LM's --grad-reduce-in-bf16 (DDP grad_reduce_in_fp32=False)
    gives 2 B per parameter instead of 4 B."""
    assert stage().gradients_bytes == 4 * N
    assert stage({"accumulate_allreduce_grads_in_fp32": False}).gradients_bytes == 2 * N


def test_main_grads_dtype_allocates_nothing_of_its_own():
    """Megatron-Bridge's combination: bf16 gradient buffer (grad_reduce_in_fp32 False) with the precision-aware
    optimizer's main_grads_dtype fp32. distrib_optimizer.py gives FusedAdam a view of the buffer
    (decoupled_grad = shard of main_grad): gradients stay 2 B. Optimizer: int16 master remainders 2 B + fp32
    moments 8 B = 10 B per parameter."""
    pr = {"accumulate_allreduce_grads_in_fp32": False, "use_precision_aware_optimizer": True,
          "main_grads_dtype": "fp32"}
    s = stage(pr)
    assert (s.gradients_bytes, s.optimizer_bytes) == (2 * N, 10 * N)


def test_main_grads_bf16_sets_megatron_lms_default_buffer():
    """arguments.py: with --bf16, accumulate_allreduce_grads_in_fp32 becomes true only when main_grads_dtype is
    fp32; --main-grads-dtype bf16 leaves a bf16 buffer (2 B)."""
    pr = {"use_precision_aware_optimizer": True, "main_grads_dtype": "bf16"}
    assert stage(pr).gradients_bytes == 2 * N
    assert stage({**pr, "accumulate_allreduce_grads_in_fp32": True}).gradients_bytes == 4 * N


def test_fp16_gradients_follow_the_flag():
    """fp16 weights: gradients in fp16 (2 B) unless --accumulate-allreduce-grads-in-fp32 (4 B)."""
    assert stage({"params_dtype": "fp16"}).gradients_bytes == 2 * N
    assert stage({"params_dtype": "fp16", "accumulate_allreduce_grads_in_fp32": True}).gradients_bytes == 4 * N


def test_store_param_remainders():
    """Megatron-Core OptimizerConfig.store_param_remainders (default True) -> TE FusedAdam keeps the master
    weight of a bf16 parameter as an int16 tensor (the low 16 bits; the high 16 are the bf16 weight):
    master 2 B + moments 4 + 4 = 10 B. Off: fp32 master, 12 B. fp16 masters: 2 B + 8 = 10 B either way.
    fp16 weights: FusedAdam stores remainders only for bfloat16 parameters, so 4 + 8 = 12 B."""
    pao = {"use_precision_aware_optimizer": True}
    assert stage(pao).optimizer_bytes == 10 * N
    assert stage({**pao, "store_param_remainders": False}).optimizer_bytes == 12 * N
    assert stage({**pao, "store_param_remainders": False, "main_params_dtype": "fp16"}).optimizer_bytes == 10 * N
    assert stage({**pao, "params_dtype": "fp16"}).optimizer_bytes == 12 * N
    assert stage({**pao, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}).optimizer_bytes == 6 * N


def test_fp8_recipes_other_than_delayed_keep_megatron_core_fp32_masters():
    """OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8 is false for FP8 with a recipe other than
    delayed and fp32 main params: the distributed optimizer keeps fp32 master shards itself (4 B, no
    remainders) and FusedAdam only the moments: 12 B."""
    pr = {"fp8": True, "use_precision_aware_optimizer": True}
    assert stage({**pr, "fp8_recipe": "delayed"}).optimizer_bytes == 10 * N
    assert stage({**pr, "fp8_recipe": "tensorwise"}).optimizer_bytes == 12 * N


def test_fp8_param_gather_keeps_only_linear_weights_in_fp8():
    """FP8 without fp8_param_gather: bf16 weights (2 B) plus row- and column-wise FP8 copies of each linear weight
    (2 B). With it, the linear weights are FP8 (1 B) plus the transposed copy (1 B); the embedding, output layer
    and norms stay bf16 (2 B): 2 * (N - LIN) + 2 * LIN = 2 N. (Before the fix every parameter was 1 B.)"""
    assert stage({"fp8": True}).weights_bytes == 2 * N + 2 * LIN
    assert stage({"fp8": True, "fp8_param_gather": True}).weights_bytes == 2 * N


def test_mla_down_projections_are_linear_layers_for_fp8():
    """MLA's q/kv down-projections are Transformer Engine linears (replicated over TP), so FP8 caches them too.
    MLA with h=1024, a=8, q_lora 256, kv_lora 128, qk 64, rope 32, v 64, per layer linear weights:
    q_down 1024*256 + q_up 256*8*96 + kv_down 1024*160 + kv_up 128*8*128 + proj 8*64*1024
    = 262,144 + 196,608 + 163,840 + 131,072 + 524,288 = 1,277,952; MLP 2*1024*4096 = 8,388,608.
    FP8 cache 2 B each: 4 * 2 * 9,666,560 = 77,332,480 bytes."""
    mla = dict(multi_latent_attention=True, q_lora_rank=256, kv_lora_rank=128, qk_head_dim=64,
               qk_pos_emb_head_dim=32, v_head_dim=64)
    plain, fp8 = stage(model=mla), stage({"fp8": True}, model=mla)
    assert fp8.weights_bytes - plain.weights_bytes == 4 * 2 * (1_277_952 + 8_388_608)


def test_mla_unfused_attention_keeps_the_scores():
    """Megatron's own DotProductAttention (attention_backend unfused) keeps the softmax output, s x s per head
    and sequence, in bf16, for MLA as for MHA: per layer 2 B * b(1) * a(8) * s^2 (2048^2) = 67,108,864 bytes,
    4 layers, one micro-batch in flight (no dropout: no mask)."""
    mla = dict(multi_latent_attention=True, q_lora_rank=256, kv_lora_rank=128, qk_head_dim=64,
               qk_pos_emb_head_dim=32, v_head_dim=64)
    flash = stage(model=mla, training={"attention_backend": "flash"})
    unfused = stage(model=mla, training={"attention_backend": "unfused"})
    assert unfused.activations_bytes - flash.activations_bytes == 4 * 2 * 8 * 2048 * 2048


def test_mxfp8_weights_reuse_the_gradient_buffer():
    """Megatron-Core @ d98e8a64 param_and_grad_buffer.py (_ParamAndGradBuffer.__init__): with MXFP8 weights under
    the distributed optimizer the parameter buffer is a view of the gradient buffer (no buffer of its own), and
    with reuse_grad_buf_for_mxfp8_param_ag the weights keep Transformer Engine's own MXFP8 storage, row-wise and
    column-wise 1 B each, each copy with its E8M0 scales (1 B per 32 elements; every weight here is a multiple of
    128 both ways, so no padding: LIN / 16 = 3,145,728 B): weights (N - LIN) x 2 B + LIN x (1 + 1) B + LIN / 16
    = 2 N + 3,145,728 = 234,899,456; gradients 4 N (fp32 buffer, shared with the all-gather) = 463,507,456.
    Without the setting Transformer Engine's replace_raw_data
    raises for MXFP8Tensor (the run does not start): refused by name, as is the setting without fp8_param_gather.
    With another FP8 recipe Megatron-Core would keep its uint8 parameter buffer beside the weights' own storage:
    refused as not modelled."""
    mx = {"fp8": True, "fp8_recipe": "mxfp8", "fp8_param_gather": True}
    s = stage({**mx, "reuse_grad_buf_for_mxfp8_param_ag": True})
    assert (s.weights_bytes, s.gradients_bytes) == (2 * N + LIN // 16, 4 * N) == (234_899_456, 463_507_456)
    with pytest.raises(ConfigError, match="reuse_grad_buf_for_mxfp8_param_ag: must be true"):
        stage(mx)
    with pytest.raises(ConfigError, match="needs fp8_param_gather: true"):
        stage({"fp8": True, "fp8_recipe": "mxfp8", "reuse_grad_buf_for_mxfp8_param_ag": True})
    with pytest.raises(UnsupportedError, match="uint8 parameter buffer"):
        stage({**mx, "fp8_recipe": "tensorwise", "reuse_grad_buf_for_mxfp8_param_ag": True})


@pytest.mark.parametrize("recipe", ["delayed", "tensorwise"])
def test_per_tensor_fp8_weights_on_hopper_and_blackwell(recipe):
    """Transformer Engine keeps a transposed FP8 copy only where FP8 GEMMs are TN-only (Hopper, sm_90); on sm_100
    the one row-wise tensor serves both GEMMs (TransformerEngine @ d0067d0d : csrc/quantizer.cpp, ``with_transpose =
    columnwise_usage && !is_non_tn_fp8_gemm_supported``). By hand, N = 115,876,864 parameters, LIN = 50,331,648
    linear weights:

        cached copies, H100:  2 N + 2 LIN = 231,753,728 + 100,663,296 = 332,417,024 B
        cached copies, B200:  2 N + 1 LIN = 231,753,728 +  50,331,648 = 282,085,376 B
        fp8_param_gather, H100: 2 (N - LIN) + (1 + 1) LIN = 2 N     = 231,753,728 B
        fp8_param_gather, B200: 2 (N - LIN) + 1 LIN       = 2 N - LIN = 181,422,080 B

    Per linear-layer parameter: 4 B (bf16 + two FP8 copies) on H100 against 3 B on B200, 2 B against 1 B with
    fp8_param_gather. For Llama 3 70B (h 8192, 64 heads, 8 KV groups of 128, SwiGLU MLP 28,672, 80 layers:
    8192 x 10,240 + 8192^2 + 2 x 8192 x 28,672 + 28,672 x 8192 = 855,638,016 linear weights a layer,
    68,451,041,280 in all), the transposes are 68,451,041,280 / TP 8 = 8,556,380,160 B = 7.97 GiB per GPU at TP 8."""
    for arch, cached, gathered in (("sm_90", 2 * N + 2 * LIN, 2 * N), ("sm_100", 2 * N + LIN, 2 * N - LIN)):
        pr = {"fp8": True, "fp8_recipe": recipe}
        assert stage(pr, {"gpu_arch": arch}).weights_bytes == cached
        assert stage({**pr, "fp8_param_gather": True}, {"gpu_arch": arch}).weights_bytes == gathered
    # sm_103 (B300) as sm_100; sm_120 (RTX Blackwell) and AMD's gfx942 are TN-only, as Hopper.
    assert stage({"fp8": True}, {"gpu_arch": "sm_103"}).weights_bytes == 2 * N + LIN
    for arch in ("sm_89", "sm_120", "gfx942"):
        assert stage({"fp8": True}, {"gpu_arch": arch}).weights_bytes == 2 * N + 2 * LIN


def test_llama_3_70b_fp8_transposes_per_gpu_by_hand():
    """The docstring's 70B figure above: the H100 - B200 difference of the weights of Llama 3 70B with FP8
    (tensorwise) at TP 8 is the 1 B transposed copy of its 68,451,041,280 / 8 linear weights per GPU."""
    from estimator.formats.presets import load_preset
    cfg = load_preset("llama-3-70b").to_dict()
    cfg["parallelism"] = {"tensor_model_parallel_size": 8}
    cfg["training"].update(world_size=8, seq_length=1024, global_batch_size=8, micro_batch_size=1)
    cfg["precision"] = {"fp8": True, "fp8_recipe": "tensorwise"}
    weights = {}
    for arch in ("sm_90", "sm_100"):
        cfg["training"]["gpu_arch"] = arch
        weights[arch] = estimate(cfg).stages[0].weights_bytes
    assert weights["sm_90"] - weights["sm_100"] == 68_451_041_280 // 8 == 8_556_380_160


def test_mxfp8_and_blockwise_keep_both_copies_on_blackwell():
    """MXFP8's and blockwise's column-wise copy is its own scaled data, not a transpose: 2 B per linear weight on
    every GPU, plus the scales. MXFP8 on sm_100, every linear weight a multiple of 128 both ways (3072 x 1024, 1024 x
    1024, 4096 x 1024, 1024 x 4096): one E8M0 byte per 32 elements of each copy, LIN / 16 = 3,145,728 B, so
    2 N + 2 LIN + LIN / 16 = 335,562,752 B."""
    assert stage({"fp8": True, "fp8_recipe": "mxfp8"}, {"gpu_arch": "sm_100"}).weights_bytes == \
        2 * N + 2 * LIN + LIN // 16 == 335_562_752
    blockwise = {"fp8": True, "fp8_recipe": "blockwise"}
    on_b200, on_h100 = (stage(blockwise, {"gpu_arch": a}).weights_bytes for a in ("sm_100", "sm_90"))
    assert on_b200 == on_h100
