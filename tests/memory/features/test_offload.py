"""Optimizer and activation offloading (estimator/memory/features/offload.py) against hand calculations.

The small model of tests/memory/test_memory.py (L=4, h=1024, 8 MHA heads of 128, GeLU f=4096, untied, vocabulary
32000, bf16), sequence T = 2048, one GPU: n = 115,876,864 parameters.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate
from estimator.memory.features import offload
from estimator.formats.megatron_args import read_megatron_args
from tests.conftest import make_config

H, F, V, L, T = 1024, 4096, 32000, 4, 2048
N = L * (4 * H * H + H + 2 * H * F + H) + 2 * V * H + H
MODEL = dict(num_layers=L, hidden_size=H, num_attention_heads=8, ffn_hidden_size=F, vocab_size=V,
             activation_func="gelu", gated_linear_unit=False, untie_embeddings_and_output_weights=True)
PAO = {"use_precision_aware_optimizer": True}


def est(training=None, parallelism=None, precision=None):
    tr = {"seq_length": T, "world_size": 1}
    tr.update(training or {})
    return estimate(make_config(MODEL, parallelism, tr, precision)).stages[0]


def test_full_optimizer_offload_leaves_no_optimizer_state_on_the_gpu():
    """Fraction 1: every parameter is stepped on the CPU. Host: fp32 copy + fp32 gradient copy pinned (8 n),
    Adam's two fp32 moments pageable (8 n). Weights and the gradient buffer stay on the GPU. The estimate's
    assumptions say so."""
    base = est(precision=PAO)
    s = est({"optimizer_cpu_offload": True}, precision=PAO)
    assert s.optimizer_bytes == 0
    assert (s.weights_bytes, s.gradients_bytes) == (base.weights_bytes, base.gradients_bytes)
    assert s.host == {"optimizer_pinned": 8 * N, "optimizer_states": 8 * N} and s.host_bytes == 16 * N
    assert s.device_bytes < base.device_bytes
    e = estimate(make_config(MODEL, None, {"seq_length": T, "world_size": 1, "optimizer_cpu_offload": True}, PAO))
    assert any(a.startswith("Optimizer CPU offload (HybridDeviceOptimizer)") for a in e.assumptions)
    assert not any(a.startswith("Optimizer step:") for a in e.assumptions)


# One layer's weight-decayed tensors, in HybridDeviceOptimizer's order (reverse of registration): fc2, fc1, QKV,
# output projection; the vocabulary tensors are V h = 32,768,000 each.
LAYER = (F * H, H * F, 3 * H * H, H * H)


def test_half_offload_moves_whole_tensors_in_the_optimizer_order():
    """Fraction 0.5: threshold 0.5 x 115,876,864 = 57,938,432. Megatron-Core's HybridDeviceOptimizer moves a
    tensor while the elements moved before it are below the threshold, in the distributed optimizer's order:
    output layer 32,768,000; layer 3 (fc2 4,194,304, fc1 4,194,304, QKV 3,145,728, proj 1,048,576) -> 45,350,912;
    layer 2 -> 57,933,824 (still 4,608 below); layer 1's fc2 -> 62,128,128, and it stops. So 62,128,128
    elements on the host (8 B pinned + 8 B pageable each) and 115,876,864 - 62,128,128 = 53,748,736 on the GPU
    at 12 B (fp32 copy + two fp32 moments, whatever the precision-aware dtypes)."""
    s = est({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5}, precision=PAO)
    assert s.optimizer_bytes == 12 * 53_748_736
    assert s.host == {"optimizer_pinned": 8 * 62_128_128, "optimizer_states": 8 * 62_128_128}


def test_offloaded_step_adds_the_largest_moved_tensor_in_fp32():
    """The copy of each updated fp32 CPU tensor into its bf16 GPU parameter (non-blocking) is converted on the
    GPU, through an fp32 tensor of its size: at fraction 1 the largest is the output layer (or the embedding),
    4 x 32,768,000 = 131,072,000 B above the states and the run-long buffers during the step. The GPU part is
    stepped in place (fused Adam): nothing else. Fraction 0 moves nothing: no buffer, all 12 B on the GPU."""
    s = est({"optimizer_cpu_offload": True}, precision=PAO)
    persistent = sum(s.transient.get(k, 0) for k in ("workspaces", "global_memory_buffer", "te_dummy_wgrad"))
    states = s.weights_bytes + s.gradients_bytes + s.optimizer_bytes
    assert s.optimizer_step_bytes - states - persistent == 4 * V * H
    z = est({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.0}, precision=PAO)
    assert z.optimizer_bytes == 12 * N and z.host_bytes == 0
    assert z.optimizer_step_bytes - (z.weights_bytes + z.gradients_bytes + z.optimizer_bytes) == persistent


def test_bf16_gradients_keep_fp32_copies_for_the_gpu_part():
    """main_grads_dtype bf16 (a bf16 gradient buffer): HybridDeviceOptimizer gives each fp32 GPU copy
    ``grad.to(fp32)``, a new tensor replaced at the next step and never freed by zero_grad: 4 + 8 + 4 = 16 B
    per GPU element, 16 x 53,748,736 at fraction 0.5 (same split as above)."""
    s = est({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5},
            precision={**PAO, "main_grads_dtype": "bf16"})
    assert s.optimizer_bytes == 16 * 53_748_736


def test_sharded_states_split_at_the_fraction_an_upper_bound():
    """Two data-parallel ranks: each optimizer shard holds ceil(N / 2) = 57,938,432 elements whose tensor pieces
    are not laid out here; the split is taken at ceil(0.5 x 57,938,432) = 28,969,216 moved, the fewest a rank
    can move (whole pieces move past the threshold), so 12 x 28,969,216 B on the GPU is an upper bound."""
    s = est({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5, "world_size": 2,
             "global_batch_size": 2}, precision=PAO)
    assert s.optimizer_bytes == 12 * 28_969_216
    assert s.host_bytes == 16 * 28_969_216


def test_split_walks_whole_tensors():
    """Tensors 10, 5, 7 then 3 elements of unknown boundaries (n = 25). f = 0.5: threshold 12.5; 10 moves
    (0 < 12.5), 5 moves (10 < 12.5), 7 stays (15 >= 12.5): 15 moved, largest 10. f = 1: all 22, then the rest
    up to ceil(25 - 22) = 3. f = 0: nothing moves (0 < 0 is false). f = 0.3 with no known tensors: ceil(7.5)."""
    assert offload.split([10, 5, 7], 3, 0.5, 3) == (10, 15, 10)
    assert offload.split([10, 5, 7], 3, 1.0, 3) == (0, 25, 10)
    assert offload.split([10, 5, 7], 3, 0.0, 3) == (25, 0, 0)
    assert offload.split([], 25, 0.3, 4) == (17, 8, 4)


def test_order_is_reversed_per_chunk_and_stage():
    """Two pipeline stages of two layers: stage 0 holds layers 1, 0 then the embedding; stage 1 the output
    layer, then layers 3, 2 (the last stage of an untied model keeps its own output layer)."""
    from estimator.config.load import load_config
    from estimator.model.resolve import resolve
    r = resolve(load_config(make_config(MODEL, {"pipeline_model_parallel_size": 2},
                                        {"seq_length": T, "world_size": 2, "optimizer_cpu_offload": True}, PAO)))
    assert offload.hdo_order(r, r.plan[0].chunks) == [*LAYER, *LAYER, V * H]
    assert offload.hdo_order(r, r.plan[1].chunks) == [V * H, *LAYER, *LAYER]


def test_precision_aware_optimizer_without_transformer_engine_needs_offload():
    """Megatron-Core's OptimizerConfig takes the precision-aware optimizer from Transformer Engine's FusedAdam or,
    with --optimizer-cpu-offload, HybridDeviceOptimizer (no Transformer Engine needed)."""
    tr = {"transformer_impl": "local", "optimizer_implementation": "torch"}
    with pytest.raises(ConfigError, match="optimizer_implementation.*te_fused.*optimizer_cpu_offload: true"):
        est(tr, precision=PAO)
    assert est({**tr, "optimizer_cpu_offload": True}, precision=PAO).optimizer_bytes == 0
    with pytest.raises(ConfigError, match="fp8_param_gather"):
        est({"optimizer_cpu_offload": True, "world_size": 1},
            precision={**PAO, "fp8": True, "fp8_param_gather": True})


def test_layer_offloading_moves_the_first_layers_activations():
    """cpu_offloading_num_layers 2 of 4: at the end of the forward pass layers 0 and 1 are on the host, so the
    GPU keeps 2 of the 4 layers' activations (all four layers save the same bytes)."""
    base = est()
    per_layer = base.activations["attention"] // L + base.activations["mlp"] // L
    s = est({"cpu_offloading": True, "cpu_offloading_num_layers": 2})
    assert base.activations_bytes - s.activations_bytes == 2 * per_layer
    assert s.host == {"activations_pinned": 2 * per_layer}


FGO = {"attention_backend": "unfused", "fine_grained_activation_offloading": True,
       "offload_modules": ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"]}


def test_fine_grained_groups_of_one_layer():
    """One layer of the small model (plain attention, dense MLP, T = 2048, bf16, unfused attention, no recompute),
    by hand. attn_norm and mlp_norm open no group: with Transformer Engine both norms are fused into the next
    linear (LayerNormLinear; input_layernorm / pre_mlp_layernorm are IdentityOp, transformer_layer.py
    _set_offload_modules). The groups, in forward order:
    qkv_linear: the layer input and the norm's output the fused linear keeps, 2 x 2048 x 1024 x 2 B = 8,388,608 B
    (2,097,152 elements each, above min_offloaded_tensor_size = 1,048,576);
    core_attn: q, k, v 3 x 2048 x 1024 x 2 B = 12,582,912 B + the softmax output 2048 x 2048 x 8 heads x 2 B =
    67,108,864 B = 79,691,776 B (the softmax's fp32 row statistics, 2048 x 8 = 16,384 elements, stay: under the
    limit); attn_proj: the output projection's input, 2048 x 1024 x 2 B = 4,194,304 B.
    Per layer 92,274,688 B leave; the MLP's 2 x 16,777,216 B (fc1 output, GeLU output) and its norm's 2 x
    4,194,304 B stay. A limit of 4,000,000 elements offloads only q, k, v (taken as one tensor of 6,291,456
    elements) and the probabilities (33,554,432 elements): the 2,097,152-element tensors of qkv_linear and attn_proj
    stay, their groups empty."""
    from estimator.config.load import load_config
    from estimator.memory.activations import layer_activations
    from estimator.model.resolve import resolve
    r = resolve(load_config(make_config(MODEL, None, {"seq_length": T, "world_size": 1, **FGO})))
    kind = r.kinds[0]
    parts = layer_activations(r, kind, parts=True).parts
    mods = frozenset(FGO["offload_modules"])
    assert offload.layer_groups(kind, parts, mods, 1_048_576, 2) == (
        ("qkv_linear", 8_388_608), ("core_attn", 12_582_912 + 67_108_864), ("attn_proj", 4_194_304))
    assert offload.layer_groups(kind, parts, mods, 4_000_000, 2) == (
        ("qkv_linear", 0), ("core_attn", 79_691_776), ("attn_proj", 0))


def test_fine_grained_offloading_on_one_gpu():
    """One GPU, one micro-batch in flight, 4 layers in one chunk (groups as above, 92,274,688 B per layer). The
    offload margin keeps the last layer's three groups (the first backward chunk's last group of each name), and so
    does the last-stage rule (its backward follows at once): layers 0-2 leave, 3 x 92,274,688 = 276,824,064 B to
    pinned host memory. In the backward pass the core_attn group being differentiated and the qkv_linear group
    reloaded after it are back together: 79,691,776 + 8,388,608 = 88,080,384 B (the larger of the consecutive
    pairs; attn_proj + core_attn is 83,886,080 B). So the activations drop by 276,824,064 - 88,080,384 =
    188,743,680 B; the host holds the 276,824,064 B, counted in no device figure."""
    base = est({"attention_backend": "unfused"})
    s = est(FGO)
    assert base.activations_bytes - s.activations_bytes == 276_824_064 - 88_080_384 == 188_743_680
    assert s.host == {"activations_pinned": 276_824_064}
    assert s.activations["offloaded"] == -276_824_064 and s.activations["offload_reloaded"] == 88_080_384
    assert s.device_bytes < base.device_bytes
    e = estimate(make_config(MODEL, None, {"seq_length": T, "world_size": 1, **FGO}))
    assert any(a.startswith("Fine-grained activation offloading (Megatron-Core's policy)") for a in e.assumptions)


def test_fine_grained_policy_on_a_pipeline_with_virtual_stages():
    """Megatron-Core's keep rules on a PP 2 x VPP 2 stage, by hand: each chunk has two layers of groups core_attn
    (10 B) and attn_proj (1 B), so a micro-batch of a chunk offers 22 B; chunk 1 has 2 micro-batches in flight,
    chunk 0 three. Handlers in backward order: chunk 1's two, then chunk 0's three (110 B in all).
    - first stage: the margin keeps the second layer's groups of chunk 1's first handler (11 B): 99 B leave. The
      largest reloaded pair is attn_proj + core_attn of one layer, 11 B.
    - last stage (chunk 1 holds the loss): the last layer's groups of both its handlers stay: 88 B leave.
    - pipeline rank 1 with delta 15 B: 15 B to keep, whole groups from the first backward handler in forward order:
      its core_attn (10) and attn_proj (1) of layer 0, then the next handler's first core_attn (10): 21 B besides
      the margin's 11, so 110 - 32 = 78 B leave.
    - fraction 0.5: each handler keeps the later int(n x 0.5) of its n offloaded groups: the margin's handler 1 of
      its remaining 2 (attn_proj, 1 B), the other four 2 of 4 (the second layer's, 11 B): 110 - 11 - 1 - 44 = 54 B."""
    layer = [("core_attn", 10), ("attn_proj", 1)]
    chunks = [layer * 2, layer * 2]
    none = [frozenset(), frozenset()]
    first = offload.fine_grained_offload(chunks, none, (3, 2), False, 0, 1.0, 0)
    assert (first.moved, first.kept, first.reloaded) == (99, 11, 11)
    assert offload.fine_grained_offload(chunks, none, (3, 2), True, 1, 1.0, 0).moved == 88
    assert offload.fine_grained_offload(chunks, none, (3, 2), False, 1, 1.0, 15).moved == 78
    assert offload.fine_grained_offload(chunks, none, (3, 2), False, 0, 0.5, 0).moved == 54
    # An MTP layer in the last chunk takes the margin and the last-stage rule: it is never offloaded.
    mtp = offload.fine_grained_offload(chunks, [frozenset(), frozenset({"core_attn", "attn_proj"})], (3, 2), True,
                                       1, 1.0, 0)
    assert mtp.moved == 110


def test_fine_grained_offloading_refusals():
    """Megatron-Core's own checks, and the combinations not modelled, each named with the field and value."""
    with pytest.raises(ConfigError, match=r"training.offload_modules: is \[\]: fine_grained_activation_offloading needs"):
        est({"fine_grained_activation_offloading": True})
    with pytest.raises(ConfigError, match="attn_proj needs core_attn"):
        est({**FGO, "offload_modules": ["attn_proj"]})
    with pytest.raises(ConfigError, match=r"training.offload_modules: \['core_attn'\] applies only with fine_grained"):
        est({"offload_modules": ["core_attn"]})
    assert est({"offload_modules": []}).activations_bytes == est().activations_bytes   # as Bridge's recipes write it
    with pytest.raises(ConfigError, match="training.activation_offload_fraction: 0.5 applies only with"):
        est({"activation_offload_fraction": 0.5})
    with pytest.raises(ConfigError, match="offloading fused_group_mlp is not modelled"):
        est({**FGO, "offload_modules": ["fused_group_mlp"]})
    with pytest.raises(ConfigError, match="training.transformer_impl: is local; fine-grained activation "
                                          "offloading runs only with transformer_engine"):
        est({**FGO, "transformer_impl": "local"})
    with pytest.raises(ConfigError, match="training.cuda_graph_impl: transformer_engine is not modelled with "
                                          "fine_grained_activation_offloading"):
        est({**FGO, "cuda_graph_impl": "transformer_engine"})
    with pytest.raises(ConfigError, match="training.recompute_granularity: full is not modelled with"):
        est({**FGO, "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1})
    with pytest.raises(ConfigError, match="cannot be enabled with fine_grained_activation_offloading"):
        est({**FGO, "cpu_offloading": True, "cpu_offloading_num_layers": 1})
    with pytest.raises(ConfigError, match="training.fine_grained_activation_offloading: not modelled for "
                                          "hybrid"):
        estimate(make_config({**MODEL, "hybrid_layer_pattern": "M*M*"}, None,
                             {"seq_length": T, "world_size": 1, **FGO}))


def test_fine_grained_offloading_from_the_launchers():
    """The Megatron-LM flags and the Megatron-Bridge fields set the same configuration and the same estimate;
    the Megatron export writes the flags back."""
    from estimator.formats.bridge.config import read_bridge_config
    from estimator.formats.megatron_export import to_megatron_args
    cmd = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 2048 "
           "--max-position-embeddings 2048 --micro-batch-size 1 --vocab-size 32000 --bf16 --attention-backend "
           "unfused --fine-grained-activation-offloading --offload-modules core_attn attn_proj "
           "--min-offloaded-tensor-size 2000000 --activation-offload-fraction 0.5")
    imp = read_megatron_args(cmd, world_size=1)
    tr = imp.config["training"]
    assert tr["fine_grained_activation_offloading"] is True and tr["offload_modules"] == ["core_attn", "attn_proj"]
    assert tr["min_offloaded_tensor_size"] == 2_000_000 and tr["activation_offload_fraction"] == 0.5
    words = to_megatron_args(imp.config)
    for flag in ("--fine-grained-activation-offloading", "--offload-modules core_attn attn_proj",
                 "--min-offloaded-tensor-size 2000000", "--activation-offload-fraction 0.5"):
        assert flag in " ".join(words)
    back = read_megatron_args(words, world_size=1).config
    assert estimate(back).stages[0].allocated_bytes == estimate(imp.config).stages[0].allocated_bytes
    bridge = {"model": {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "ffn_hidden_size": 4096,
                        "seq_length": 2048, "vocab_size": 32000, "fine_grained_activation_offloading": True,
                        "offload_modules": ["core_attn", "attn_proj"], "min_offloaded_tensor_size": 2000000,
                        "activation_offload_fraction": 0.5, "delta_offload_bytes_across_pp_ranks": 0},
              "train": {"micro_batch_size": 1, "global_batch_size": 1}}
    b = read_bridge_config(bridge, world_size=1).config["training"]
    for name in ("fine_grained_activation_offloading", "offload_modules", "min_offloaded_tensor_size",
                 "activation_offload_fraction"):
        assert b[name] == tr[name], name


def test_offload_rules():
    with pytest.raises(ConfigError, match="pipeline parallelism"):
        est({"cpu_offloading": True, "cpu_offloading_num_layers": 1, "world_size": 2},
            {"pipeline_model_parallel_size": 2})
    with pytest.raises(ConfigError, match="less than num_layers"):
        est({"cpu_offloading": True, "cpu_offloading_num_layers": 4})
    with pytest.raises(ConfigError, match="set it to true"):
        est({"cpu_offloading_num_layers": 2})


def test_cli_takes_offload_without_transformer_engine_and_names_the_refusal(capsys):
    """The command line: precision-aware optimizer with torch's Adam exits 2 naming the field, the value and what
    is allowed; with --optimizer-cpu-offload the same configuration is estimated, host memory beside it."""
    import json

    from estimator.cli.commands import main
    flags = ["estimate", "tiny", "--use-precision-aware-optimizer", "--transformer-impl", "local",
             "--optimizer-implementation", "torch"]
    assert main(flags) == 2
    err = capsys.readouterr().err
    assert "training.optimizer_implementation: torch does not take the precision-aware optimizer" in err
    assert "optimizer_cpu_offload: true" in err and "Traceback" not in err
    assert main([*flags, "--optimizer-cpu-offload", "--optimizer-offload-fraction", "0.5", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert all(s["host_bytes"] > 0 for s in d["stages"])


def test_fine_grained_offloading_ci_layer_parts():
    """The per-layer figures the offload docstring's analysis of the CI cases rests on (one MoE layer of
    gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_*: s = 4096, b = 1, TP 2 with sequence parallelism, 32 heads, h = 1024,
    top-4 of 32 experts of width 1024 (SwiGLU), a shared expert of width 1024, unfused attention, layernorm,
    mla_up_proj and moe_act recomputed), by hand:
    the unfused softmax output (core_attn) 4096^2 x 16 heads x 2 B = 536,870,912 B; the layer input (attn_norm)
    and the pre-MLP norm input (mlp_norm) 2048 x 1024 x 2 B = 4,194,304 B each (2,097,152 elements, above
    min_offloaded_tensor_size = 1,048,576); expert_fc1's input 8,192 rows (2,048 tokens x top-4) x 1024 x 2 B =
    16,777,216 B, moe_act's input (fc1 output) 8,192 x 2,048 x 2 B = 33,554,432 B; the shared expert (no group)
    4096 x 1024 x 2 B (fc1 output) + 4096 x 512 x 2 B (activation output) = 12,582,912 B."""
    from estimator.memory.activations import layer_activations
    from estimator.config.load import load_config
    from estimator.formats.megatron_args import parse_megatron_args
    from estimator.model.resolve import resolve
    cmd = ("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 4 "
           "--expert-tensor-parallel-size 1 --use-distributed-optimizer --attention-backend unfused "
           "--sequence-parallel --disable-bias-linear --micro-batch-size 1 --global-batch-size 8 "
           "--recompute-granularity selective --recompute-modules layernorm mla_up_proj mlp moe_act "
           "--transformer-impl transformer_engine --seq-length 4096 --num-layers 15 "
           "--moe-layer-freq ([0]*3+[1]*12) --pipeline-model-parallel-layout Et*3|(tt|)*6L --hidden-size 1024 "
           "--ffn-hidden-size 4096 --num-attention-heads 32 --kv-channels 128 --max-position-embeddings 4096 "
           "--position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights "
           "--multi-latent-attention --attention-dropout 0.0 --hidden-dropout 0.0 --qk-layernorm --num-experts 32 "
           "--moe-ffn-hidden-size 1024 --moe-shared-expert-intermediate-size 1024 --moe-router-topk 4 "
           "--moe-token-dispatcher-type alltoall --moe-grouped-gemm --q-lora-rank 1536 --kv-lora-rank 512 "
           "--qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --bf16 --vocab-size 50257")
    cfg, _ = parse_megatron_args(cmd.split(), world_size=8)
    r = resolve(load_config(cfg))
    moe = next(k for k in r.kinds if k.mlp == "moe")
    p = layer_activations(r, moe, parts=True).parts
    assert p["scores"] == 4096 * 4096 * 16 * 2 == 536_870_912
    assert p["norm_in"] == p["mlp_norm_in"] == 2048 * 1024 * 2 == 4_194_304
    assert p["expert_in"] == 8192 * 1024 * 2 == 16_777_216
    assert p["expert_fc1_out"] == 8192 * 2048 * 2 == 33_554_432
    assert p["shared"] == 4096 * 1024 * 2 + 4096 * 512 * 2 == 12_582_912


def test_offload_without_the_precision_aware_optimizer_keeps_the_fp32_main_copies_on_the_gpu():
    """Megatron-Core and Megatron-Bridge take optimizer_cpu_offload without the precision-aware optimizer: the
    distributed optimizer keeps fp32 main copies of every parameter on the GPU (shard_fp32_from_float16_groups)
    and hands those to HybridDeviceOptimizer, which clones the moved ones to pinned CPU memory and steps them
    there. fp32 gradients (the default main gradients) need no copy. Fraction 0.5 moves the same 62,128,128
    elements as above (the order is the same): GPU 4 B x 115,876,864 (all main copies) + 8 B x 53,748,736 (Adam's
    moments of the GPU part) = 893,497,344 B; host 8 B pinned + 8 B pageable per moved element, as with the
    precision-aware optimizer. Fraction 1: 4 n on the GPU. Megatron-LM's arguments.py refuses the combination, so
    its importer does, naming the flag."""
    half = est({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5})
    assert half.optimizer_bytes == 4 * N + 8 * 53_748_736 == 893_497_344
    assert half.host == {"optimizer_pinned": 8 * 62_128_128, "optimizer_states": 8 * 62_128_128}
    assert est({"optimizer_cpu_offload": True}).optimizer_bytes == 4 * N
    with pytest.raises(ConfigError, match="--use-precision-aware-optimizer"):
        read_megatron_args("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 256 "
                           "--max-position-embeddings 256 --vocab-size 1000 --micro-batch-size 1 --bf16 "
                           "--use-distributed-optimizer --optimizer-cpu-offload", world_size=1)
