"""Generalised tensor parallelism's weight sharding (estimator/memory/features/gtp.py), by hand from Megatron-LM @
d98e8a64 (megatron/core/tensor_parallel/generalized_tensor_parallelism.py, docs/api-guide/core/
generalized_tensor_parallel.md): each GTP_remat rank keeps 1/G of the rows of every TP-local linear weight (padded to
a multiple of 16 G rows) with its gradient, the distributed optimizer shards over DP x CP / G, and the gathered
weights, whole weight gradients and reduce-scatter outputs stay in buffers for the run."""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.formats.megatron_args import read_megatron_args
from estimator.memory.features.gtp import gathered_rows
from tests.conftest import make_config

#: Two layers, h 512, 8 heads of 64, plain GeLU MLP of 2048, no biases, RMSNorm, untied vocabulary of 1024 (already a
#: multiple of 128: not padded at TP 1). bf16 weights, fp32 gradients, Adam with the distributed optimizer.
DENSE = dict(num_layers=2, hidden_size=512, num_attention_heads=8, vocab_size=1024, ffn_hidden_size=2048,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)
#: The same attention, two MoE layers of 8 experts (top-2, expert width 256, GeLU), EP 2.
MOE = {**DENSE, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 256}
TRAIN = {"world_size": 8, "seq_length": 1024, "use_distributed_optimizer": True}
CMD = ("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 2048 --vocab-size 1024 "
       "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --bf16 --use-distributed-optimizer "
       "--tensor-model-parallel-size 2 --tensor-parallel-num-weight-shards 4")


def _stage(model, par, training=TRAIN):
    return estimate(make_config(model, par, training)).stages[0]


def test_padding_rows_to_sixteen_times_the_group():
    """gtp_remat_shard_dim0: pad to a multiple of pad_for_alignment (16) x G rows."""
    assert gathered_rows(1536, 2) == 1536
    assert gathered_rows(1000, 2) == 1024        # 1000 -> up(1000, 32) = 1024, 512 rows per rank
    assert gathered_rows(100, 8) == 128


def test_dense_model_by_hand():
    """8 GPUs, TP 1, tensor_parallel_num_weight_shards 2: GTP_remat G = 2, replicate DP = 8 / 2 = 4.

    One layer's linears (out x in): QKV 1536 x 512 = 786,432; proj 512 x 512 = 262,144; fc1 2048 x 512 = 1,048,576;
    fc2 512 x 2048 = 1,048,576: 3,145,728, plus two RMSNorm weights (1,024). Embedding and output layer 1024 x 512 =
    524,288 each, final norm 512. All rows are multiples of 32: no padding.
    Sharded: 2 x 3,145,728 + 2 x 524,288 = 7,340,032 -> 3,670,016 per GPU; whole: 2 x 1,024 + 512 = 2,560.
    Per GPU 3,672,576 elements: weights 2 B -> 7,345,152; gradients 4 B -> 14,690,304; optimizer 12 B x
    up(3,672,576 / 4) = 12 x 918,144 = 11,017,728 (without GTP 12 x up(7,342,592 / 8) = 11,013,888).

    Buffers kept for the run. Gathered (bf16), one per distinct shape in the chain embedding, QKV, proj, fc1, fc2,
    QKV, ..., output (fc1 2048 x 512 and fc2 512 x 2048 are different shapes, no neighbours alike): 524,288 + 786,432 +
    262,144 + 1,048,576 + 1,048,576 = 3,670,016 x 2 B = 7,340,032. Weight-gradient pool (fp32, the four Transformer
    Engine shapes, and the output layer's fp32 gradient from the pool): (3,145,728 + 524,288) x 4 = 14,680,064.
    Reduce-scatter outputs (fp32 shards of the four and of the output layer): (1,572,864 + 262,144) x 4 = 7,340,032.
    Dummy weight gradients, one per shard shape (bf16): 768 x 512 + 256 x 512 + 1024 x 512 + 256 x 2048 +
    512 x 512 = 1,835,008 x 2 = 3,670,016 (without GTP the four full shapes: 3,145,728 x 2 = 6,291,456)."""
    base = _stage(DENSE, {})
    assert (base.weights_bytes, base.gradients_bytes, base.optimizer_bytes) == (14_685_184, 29_370_368, 11_013_888)
    assert base.transient["te_dummy_wgrad"] == 6_291_456
    s = _stage(DENSE, {"tensor_parallel_num_weight_shards": 2})
    assert (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes) == (7_345_152, 14_690_304, 11_017_728)
    assert s.transient["gtp_gathered_weights"] == 7_340_032
    assert s.transient["gtp_wgrad_pool"] == 14_680_064
    assert s.transient["gtp_reduce_scatter_outputs"] == 7_340_032
    assert s.transient["te_dummy_wgrad"] == 3_670_016
    assert "gtp_padded_wgrad_copies" not in s.transient
    assert s.activations_bytes == base.activations_bytes       # each GTP_remat rank runs its own micro-batches


def test_dense_model_bf16_gradients_and_fp32_accumulation():
    """--grad-reduce-in-bf16 (gradient buffer bf16): the output layer's gradient is a fresh bf16 tensor, not a
    pool buffer; the pool and the reduce-scatter outputs are bf16: 3,145,728 x 2 = 6,291,456 and (1,572,864 +
    262,144) x 2 = 3,670,016. With G = 4 (shards 4, replicate DP 2) and
    gtp_remat_reduce_scatter_with_fp32_accumulation each shape takes a second pool buffer (the all-to-all's output):
    2 x 3,145,728 x 2 = 12,582,912."""
    pr = {"accumulate_allreduce_grads_in_fp32": False}
    s = estimate(make_config(DENSE, {"tensor_parallel_num_weight_shards": 2}, TRAIN, pr)).stages[0]
    assert s.transient["gtp_wgrad_pool"] == 6_291_456
    assert s.transient["gtp_reduce_scatter_outputs"] == 3_670_016
    par = {"tensor_parallel_num_weight_shards": 4, "gtp_remat_reduce_scatter_with_fp32_accumulation": True}
    s = estimate(make_config(DENSE, par, TRAIN, pr)).stages[0]
    assert s.transient["gtp_wgrad_pool"] == 12_582_912


def test_optimizer_step_steps_the_gtp_shard():
    """--grad-reduce-in-bf16: Megatron-Core's distributed optimizer copies its gradient shard to fp32 for the fp32
    masters (optimizer_step.py). Under GTP the shard is up(3,672,576 / 4) = 918,144 elements (the test above): 4 B
    each, 3,672,576 B beside the states and the buffers GTP holds for the run."""
    from estimator.memory.optimizer_step import PERSISTENT_BUFFERS
    pr = {"accumulate_allreduce_grads_in_fp32": False}
    s = estimate(make_config(DENSE, {"tensor_parallel_num_weight_shards": 2}, TRAIN, pr)).stages[0]
    kept = sum(v for k, v in s.transient.items() if k in PERSISTENT_BUFFERS)
    assert s.optimizer_step_bytes == s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + kept + 3_672_576


def test_nccl_ub_moves_the_pool_to_its_own():
    """--gtp-remat-nccl-ub: the same four shapes (no padding here), from the registered pool of their own."""
    s = _stage(DENSE, {"tensor_parallel_num_weight_shards": 2, "gtp_remat_nccl_ub": True})
    assert s.transient["gtp_symmetric_wgrad_pool"] == 3_145_728 * 4
    assert s.transient["gtp_wgrad_pool"] == 524_288 * 4          # the output layer's (Megatron's own linear)


def test_moe_model_by_hand():
    """8 GPUs, EP 2, ETP 1: expert-DP 4; expert_tensor_parallel_num_weight_shards 2: expert GTP_remat 2, replicate
    expert-DP 2. Each GPU holds 8 / 2 = 4 experts per layer, fc1 256 x 512 and fc2 512 x 256 (131,072 each, rows
    multiples of 32), over 2 MoE layers: 2,097,152 expert elements, halved by GTP: 1,048,576 fewer, so weights
    -2,097,152 B and gradients -4,194,304 B; the optimizer shard is 12 x 1,048,576 / 2 = 12 x 2,097,152 / 4: unchanged.

    Buffers: each role's chain alternates two buffers per local expert (two MoE layers): 4 x 2 = 8 per role.
    Gathered bf16: 8 x (131,072 + 131,072) x 2 = 4,194,304; pool fp32: 8 x 262,144 x 4 = 8,388,608; reduce-scatter
    outputs fp32 (halves): 8 x 131,072 x 4 = 4,194,304. The dense weights stay whole (G = 1): no dense buffers."""
    par = {"expert_model_parallel_size": 2}
    base = _stage(MOE, par)
    s = _stage(MOE, {**par, "expert_tensor_parallel_num_weight_shards": 2})
    assert s.weights_bytes - base.weights_bytes == -2_097_152
    assert s.gradients_bytes - base.gradients_bytes == -4_194_304
    assert s.optimizer_bytes == base.optimizer_bytes
    assert s.transient["gtp_gathered_weights"] == 4_194_304
    assert s.transient["gtp_wgrad_pool"] == 8_388_608
    assert s.transient["gtp_reduce_scatter_outputs"] == 4_194_304


def test_one_moe_layer_on_a_stage_keeps_one_buffer_per_expert():
    """PP 2: one MoE layer per stage, so the parity bit never reaches 1: 4 buffers per role, half of the above."""
    par = {"expert_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
           "expert_tensor_parallel_num_weight_shards": 2}
    s = _stage(MOE, par)
    assert s.transient["gtp_gathered_weights"] == 2_097_152


def test_sequential_experts_alternate_two_buffers_per_role():
    """moe_grouped_gemm off: each local expert is a linear of its own with expert_idx 0, all in the role's chain, so
    consecutive ones alternate two buffers: 2 x (131,072 + 131,072) x 2 B = 1,048,576 gathered."""
    par = {"expert_model_parallel_size": 2, "expert_tensor_parallel_num_weight_shards": 2}
    s = _stage({**MOE, "moe_grouped_gemm": False}, par)
    assert s.transient["gtp_gathered_weights"] == 1_048_576


def test_padding_counts_the_padded_rows():
    """hidden 520 with 8 heads of 64, vocabulary 1024, G = 2: proj (520 x 512) and fc2 (520 x 2048) have 520 rows ->
    up(520, 32) = 544 rows, 272 per rank; the padded copies of the gradients for the reduce-scatter (fp32): the two
    largest, fc2 544 x 2048 and proj 544 x 512: (1,114,112 + 278,528) x 4 = 5,570,560."""
    model = {**DENSE, "hidden_size": 520, "kv_channels": 64}
    s = _stage(model, {"tensor_parallel_num_weight_shards": 2})
    assert s.transient["gtp_padded_wgrad_copies"] == 5_570_560


@pytest.mark.parametrize("par,training,words", [
    ({"tensor_parallel_num_weight_shards": 3, "tensor_model_parallel_size": 2}, {}, "multiple of"),
    ({"tensor_parallel_num_weight_shards": 16}, {}, "divisible by TP x PP x CP x GTP_remat"),
    ({"tensor_parallel_num_weight_shards": 2, "num_distributed_optimizer_instances": 2}, {}, "must be 1 with GTP"),
    ({"tensor_parallel_num_weight_shards": 2}, {"recompute_granularity": "full", "recompute_method": "uniform",
                                                "recompute_num_layers": 1}, "recomputation of linear layers"),
    ({"tensor_parallel_num_weight_shards": 2}, {"ckpt_format": "torch_dcp"}, "torch or torch_dist"),
])
def test_rules(par, training, words):
    with pytest.raises(ConfigError, match=words):
        estimate(make_config(DENSE, par, {**TRAIN, **training}))


def test_without_gradient_accumulation_fusion_it_is_refused():
    """Transformer Engine hands GTP's pool to the weight-gradient GEMM only with fused accumulation."""
    with pytest.raises(ConfigError, match="gradient_accumulation_fusion off"):
        estimate(make_config(DENSE, {"tensor_parallel_num_weight_shards": 2},
                             {**TRAIN, "gradient_accumulation_fusion": False}))


def test_fp8_and_mla_are_refused_by_name():
    with pytest.raises(ConfigError, match="FP8 or NVFP4 weights"):
        estimate(make_config(DENSE, {"tensor_parallel_num_weight_shards": 2}, TRAIN, {"fp8": True}))
    mla = {**DENSE, "multi_latent_attention": True, "q_lora_rank": 64, "kv_lora_rank": 64}
    with pytest.raises(ConfigError, match="GTP with mla layers is not modelled"):
        estimate(make_config(mla, {"tensor_parallel_num_weight_shards": 2}, TRAIN))


def test_megatron_refuses_averaged_collectives_with_gtp():
    """arguments.py and DistributedDataParallel assert --ddp-average-in-collective off with GTP; without GTP the flag
    has no memory effect."""
    with pytest.raises(ConfigError, match="ddp-average-in-collective"):
        read_megatron_args(CMD + " --ddp-average-in-collective", world_size=8)
    read_megatron_args(CMD.replace("--tensor-parallel-num-weight-shards 4", "") + " --ddp-average-in-collective",
                       world_size=8)
    with pytest.raises(ConfigError, match="disable-symmetric-registration"):
        read_megatron_args(CMD + " --gtp-remat-nccl-ub --disable-symmetric-registration", world_size=8)


def test_megatron_flag_sets_the_shards():
    """--tensor-parallel-num-weight-shards 4 at TP 2 is GTP_remat 2."""
    cfg = read_megatron_args(CMD, world_size=8).config
    assert cfg["parallelism"]["tensor_parallel_num_weight_shards"] == 4
    assert estimate(cfg).stages[0].transient["gtp_gathered_weights"] > 0


def test_bridge_gtp_weight_remat_size_gives_the_same_estimate():
    """Megatron-Bridge's gtp_weight_remat_size 2 at TP 2 with tensor_parallel_num_weight_shards null: Megatron-Core
    sets the shards to 2 x 2 = 4 (resolve_tensor_parallel_weight_shards), the flag's setting above."""
    from estimator.formats.bridge.config import read_bridge_config
    bridge = {"model": {"num_layers": 2, "hidden_size": 512, "num_attention_heads": 8, "ffn_hidden_size": 2048,
                        "vocab_size": 1024, "seq_length": 1024, "tensor_model_parallel_size": 2,
                        "gtp_weight_remat_size": 2, "bf16": True, "params_dtype": "torch.bfloat16"},
              "ddp": {"use_distributed_optimizer": True}, "optimizer": {"use_distributed_optimizer": True},
              "train": {"micro_batch_size": 1}}
    got = read_bridge_config(bridge, world_size=8).config
    assert got["parallelism"]["tensor_parallel_num_weight_shards"] == 4


@pytest.mark.parametrize("gtp", [{"gtp_weight_remat_size": 2}, {"tensor_parallel_num_weight_shards": 4}])
def test_bridge_refuses_averaged_collectives_with_gtp(gtp):
    """Regression: Megatron-Bridge's ddp.average_in_collective true with GTP was read as without memory effect, while
    Megatron-Core's DistributedDataParallel asserts it off with GTP (distributed_data_parallel.py: the averaged
    collective would miss the 1/GTP_remat scaling), whatever the frontend. Now refused by the importer's rule,
    naming the Bridge field; without GTP (or with the field off) it stays without memory effect."""
    from estimator.formats.bridge.config import read_bridge_config
    model = {"num_layers": 2, "hidden_size": 512, "num_attention_heads": 8, "ffn_hidden_size": 2048,
             "vocab_size": 1024, "seq_length": 1024, "tensor_model_parallel_size": 2, "bf16": True,
             "params_dtype": "torch.bfloat16"}
    ddp = {"use_distributed_optimizer": True, "average_in_collective": True}
    cfg = {"model": {**model, **gtp}, "ddp": ddp, "optimizer": {"use_distributed_optimizer": True},
           "train": {"micro_batch_size": 1}}
    with pytest.raises(ConfigError, match="Megatron-Core refuses it with GTP") as exc:
        read_bridge_config(cfg, world_size=8)
    assert [p.field for p in exc.value.problems] == ["ddp.average_in_collective"]
    imp = read_bridge_config({**cfg, "model": model}, world_size=8)
    assert "ddp.average_in_collective = True" in {w for w, _ in imp.no_effect}
    read_bridge_config({**cfg, "ddp": {**ddp, "average_in_collective": False}}, world_size=8)


@pytest.mark.parametrize("field", ["gtp_weight_remat_size: 2", "tensor_parallel_num_weight_shards: 2"])
def test_same_run_through_both_frontends(field):
    """tests/formats/bridge/test_bridge_agreement.py's Llama 3 8B run (8 GPUs, CP 2: DP 4) with GTP_remat 2, once as
    --tensor-parallel-num-weight-shards 2 and once as the Bridge model field: the same estimate on every stage."""
    from estimator.formats.bridge.config import read_bridge_config
    from tests.formats.bridge.test_bridge_agreement import LLAMA3_8B_FLAGS, LLAMA3_8B_YAML
    lm = read_megatron_args(LLAMA3_8B_FLAGS + " --tensor-parallel-num-weight-shards 2", world_size=8).config
    yaml = LLAMA3_8B_YAML.replace("  context_parallel_size: 2\n", f"  context_parallel_size: 2\n  {field}\n")
    assert field in yaml
    br = read_bridge_config(yaml, world_size=8).config
    peaks = [[s["device_bytes"] for s in estimate(c).to_dict()["stages"]] for c in (lm, br)]
    assert peaks[0] == peaks[1]
    plain = read_megatron_args(LLAMA3_8B_FLAGS, world_size=8).config
    assert peaks[0] != [s["device_bytes"] for s in estimate(plain).to_dict()["stages"]]
