"""Reading a Megatron-Bridge ``config.yaml`` (estimator/formats/bridge/config.py) with Bridge's own semantics.

Source facts are from NVIDIA-NeMo/Megatron-Bridge @ 067f987d (training/mixed_precision.py, training/comm_overlap.py,
training/config.py, peft/lora.py) and Megatron-LM @ 2a75ac12 (megatron/training/config/yaml_utils.py: how objects
are written to the YAML).
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.formats.bridge.config import BridgeRefusedError, read_bridge_config

SILU = {"_target_": "torch.nn.functional.silu", "_call_": False}      # yaml_utils._function_representer
BF16 = {"_target_": "torch.bfloat16", "_call_": False}                # yaml_utils._torch_dtype_representer

#: A two-layer SwiGLU model. Parameters by hand (h 256, 4 heads of 64, ffn 1024, vocab 1024, untied, RMSNorm):
#: embedding and output layer 2 x 1024 x 256 = 524,288; per layer QKV 256 x 768 = 196,608, projection 65,536,
#: fc1 256 x 2048 = 524,288, fc2 262,144, two norms 512: 1,049,088; two layers 2,098,176; final norm 256.
#: Total 2,622,720.
P = 2_622_720
MODEL = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024, "kv_channels": 64,
         "vocab_size": 1024, "seq_length": 256, "activation_func": SILU, "gated_linear_unit": True,
         "add_bias_linear": False, "normalization": "RMSNorm", "position_embedding_type": "rope",
         "share_embeddings_and_output_weights": False, "params_dtype": BF16, "bf16": True}
TRAIN = {"micro_batch_size": 1, "global_batch_size": 1}


def _read(**sections):
    data = {"model": dict(MODEL), "train": dict(TRAIN), **sections}
    return read_bridge_config(data, world_size=sections.pop("world_size", 1) if "world_size" in sections else 1)


def _stage(imp):
    return estimate(imp.config).to_dict()["stages"][0]


def test_preset_overrides_ddp_grad_reduce():
    """MixedPrecisionConfig.setup copies every preset field onto ddp: bf16_mixed's grad_reduce_in_fp32 True wins
    over ddp.grad_reduce_in_fp32 False, so the gradient buffer is fp32: 4 B x P."""
    imp = _read(ddp={"grad_reduce_in_fp32": False}, mixed_precision="bf16_mixed")
    assert imp.config["precision"]["accumulate_allreduce_grads_in_fp32"] is True
    assert _stage(imp)["gradients_bytes"] == 4 * P
    assert any("overwritten by mixed_precision" in n for n in imp.notes)


def test_without_preset_ddp_grad_reduce_is_kept():
    """With mixed_precision null nothing overwrites the DDP config: a BF16 gradient buffer, 2 B x P."""
    imp = _read(ddp={"grad_reduce_in_fp32": False}, mixed_precision=None)
    assert imp.config["precision"]["accumulate_allreduce_grads_in_fp32"] is False
    assert _stage(imp)["gradients_bytes"] == 2 * P


def test_preset_field_set_in_the_section():
    """A mixed_precision mapping: the fields it leaves out take MixedPrecisionConfig's defaults (grad_reduce_in_fp32
    True), the ones it gives win (False here): 2 B x P."""
    imp = _read(mixed_precision={"bf16": True, "params_dtype": BF16, "grad_reduce_in_fp32": False})
    assert _stage(imp)["gradients_bytes"] == 2 * P


def test_fp8_preset_reaches_the_model():
    """bf16_with_fp8_current_scaling_mixed sets fp8 hybrid, recipe tensorwise, first and last layer in BF16."""
    pr = _read(mixed_precision="bf16_with_fp8_current_scaling_mixed").config["precision"]
    assert pr["fp8"] is True and pr["fp8_recipe"] == "tensorwise" and pr["first_last_layers_bf16"] is True


def test_comm_overlap_turns_on_dp_overlap_only_with_dp_above_one():
    """CommOverlapConfig._get_optimizer_overlap_cfgs: overlap_grad_reduce / overlap_param_gather on when the
    distributed optimizer runs over more than one data-parallel rank, unless comm_overlap sets them."""
    on = read_bridge_config({"model": MODEL, "train": {"micro_batch_size": 1, "global_batch_size": 4},
                             "ddp": {"use_distributed_optimizer": True}, "comm_overlap": {"tp_comm_overlap": False}},
                            world_size=4).config["training"]
    assert on["overlap_grad_reduce"] is True and on["overlap_param_gather"] is True
    off = _read(ddp={"use_distributed_optimizer": True}, comm_overlap={"tp_comm_overlap": False}).config["training"]
    assert not off.get("overlap_grad_reduce") and not off.get("overlap_param_gather")
    kept = read_bridge_config({"model": MODEL, "train": {"micro_batch_size": 1, "global_batch_size": 4},
                               "ddp": {"use_distributed_optimizer": True},
                               "comm_overlap": {"tp_comm_overlap": False, "overlap_param_gather": False}},
                              world_size=4).config["training"]
    assert kept["overlap_grad_reduce"] is True and not kept.get("overlap_param_gather")


def test_tp_comm_overlap_needs_tp2_and_sequence_parallel():
    """_get_model_comm_overlap_cfgs turns tp_comm_overlap off below TP 2 or without sequence parallelism."""
    imp = _read(comm_overlap={"tp_comm_overlap": True})
    assert not imp.config.get("parallelism", {}).get("tp_comm_overlap")


def test_recompute_modules_empty_stays_empty():
    """Selective recompute with recompute_modules [] recomputes nothing in Megatron-Core (issue 28)."""
    m = {**MODEL, "recompute_granularity": "selective", "recompute_modules": []}
    imp = read_bridge_config({"model": m, "train": TRAIN}, world_size=1)
    assert imp.config["training"]["recompute_modules"] == []


def test_enum_and_function_encoding():
    """yaml_utils._enum_representer writes {_target_, _call_: true, _args_: [3], _name_: unfused}."""
    m = {**MODEL, "attention_backend": {"_target_": "megatron.core.transformer.enums.AttnBackend", "_call_": True,
                                        "_args_": [3], "_name_": "unfused"}}
    imp = read_bridge_config({"model": m, "train": TRAIN}, world_size=1)
    assert imp.config["training"]["attention_backend"] == "unfused"
    assert imp.config["model"]["activation_func"] == "swiglu"


def test_peft_lora():
    """peft: a LoRA (peft/lora.py) with dim 16, alpha 32 on linear_qkv only."""
    imp = _read(peft={"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 16, "alpha": 32,
                      "target_modules": ["linear_qkv"]})
    tr = imp.config["training"]
    assert (tr["peft"], tr["peft_dim"], tr["peft_target_modules"]) == ("lora", 16, ["linear_qkv"])


def test_peft_lora_on_moe_imports_and_estimates():
    """Issue 28 item 6: a Bridge LoRA on an MoE model (4 experts of width 512, top-2, SwiGLU) imports, with LoRA's
    share_expert_adapters and sequence_parallel_input_regather. Rank 8 on all four targets, TP 1, EP 1, per layer:
    qkv 8 x (256 + (4 + 2 x 4) x 64) = 8,192; proj 8 x (256 + 256) = 4,096; an expert's fc1 8 x (256 + 2 x 512)
    = 10,240 and fc2 8 x (512 + 256) = 6,144. One adapter shared by the experts (Bridge's default): 28,672 per layer,
    57,344 for two; one per expert (share_expert_adapters false): 8,192 + 4,096 + 4 x 16,384 = 77,824 per layer,
    155,648 for two; also without grouped GEMM, where SequentialMLP's local_experts.<i>.linear_fc1 are matched one
    by one. bf16_mixed reduces gradients in fp32: 4 B each."""
    moe = {**MODEL, "num_moe_experts": 4, "moe_ffn_hidden_size": 512, "moe_router_topk": 2, "moe_grouped_gemm": True}
    lora = {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 8, "alpha": 16}
    shared = read_bridge_config({"model": moe, "train": TRAIN, "peft": lora, "mixed_precision": "bf16_mixed"},
                                world_size=1)
    assert _stage(shared)["gradients_bytes"] == 4 * 57_344
    own = read_bridge_config({"model": moe, "train": TRAIN, "mixed_precision": "bf16_mixed",
                              "peft": {**lora, "share_expert_adapters": False,
                                       "sequence_parallel_input_regather": True}}, world_size=1)
    tr = own.config["training"]
    assert (tr["peft_share_expert_adapters"], tr["peft_sequence_parallel_input_regather"]) == (False, True)
    assert _stage(own)["gradients_bytes"] == 4 * 155_648
    loop = read_bridge_config({"model": {**moe, "moe_grouped_gemm": False}, "train": TRAIN, "peft": lora,
                               "mixed_precision": "bf16_mixed"}, world_size=1)
    assert _stage(loop)["gradients_bytes"] == 4 * 155_648
    with pytest.raises(BridgeRefusedError, match="normalize_moe_lora"):
        read_bridge_config({"model": moe, "train": TRAIN, "peft": {**lora, "normalize_moe_lora": True}}, world_size=1)


def test_refused_field_is_named():
    with pytest.raises(BridgeRefusedError) as err:
        _read(model={**MODEL, "use_kitchen": True})
    assert "model.use_kitchen" in str(err.value)
    assert err.value.to_problems()[0].field == "model.use_kitchen"


def test_refused_field_at_its_default_is_harmless():
    _read(model={**MODEL, "use_kitchen": False})


def test_unknown_field_and_section_suggest():
    with pytest.raises(ConfigError) as err:
        _read(model={**MODEL, "num_layer": 2})
    assert "model.num_layer" in str(err.value) and "num_layers" in str(err.value)
    with pytest.raises(ConfigError) as err:
        read_bridge_config({"modle": {}}, world_size=1)
    assert "did you mean model" in str(err.value)


def test_overrides_use_bridge_names():
    imp = read_bridge_config({"model": MODEL, "train": TRAIN}, world_size=2,
                             overrides=["model.tensor_model_parallel_size=2", "mixed_precision=bf16_mixed",
                                        "mixed_precision.grad_reduce_in_fp32=false"])
    assert imp.config["parallelism"]["tensor_model_parallel_size"] == 2
    assert imp.config["precision"]["accumulate_allreduce_grads_in_fp32"] is False
    with pytest.raises(ConfigError) as err:
        read_bridge_config({"model": MODEL}, world_size=1, overrides=["model.tensor_parallel=2"])
    assert "model.tensor_parallel" in str(err.value)


def test_yaml_as_pyyaml_writes_it():
    """Bridge writes config.yaml with yaml.safe_dump (utils/yaml_utils.py); our reader reads PyYAML's output."""
    yaml = pytest.importorskip("yaml")
    data = {"_target_": "megatron.bridge.training.config.ConfigContainer", "model": MODEL, "train": TRAIN,
            "checkpoint": {"save": "/results/" + "x" * 120}, "mixed_precision": "bf16_mixed",
            "logger": {"log_interval": 10}, "dataset": {"seq_length": 256, "blend": None}}
    text = yaml.safe_dump(data)
    assert read_bridge_config(text, world_size=1).config == read_bridge_config(data, world_size=1).config


def test_distributed_optimizer_on_either_config_turns_on_both():
    """training/config.py _validate_and_sync_distributed_optimizer_settings: optimizer.use_distributed_optimizer
    alone (as _sft_common's distributed_fused_adam leaves it) shards the optimizer states all the same."""
    imp = read_bridge_config({"model": MODEL, "train": {"micro_batch_size": 1, "global_batch_size": 2},
                              "optimizer": {"use_distributed_optimizer": True}}, world_size=2)
    assert imp.config["training"]["use_distributed_optimizer"] is True


def test_a_config_holding_every_field_at_its_default_reads():
    """ConfigContainer.to_yaml() writes every field of every section, the MoE fields of a dense model and the
    defaults of features that are off included: none of them stops the import, and the model is the one given."""
    from estimator.formats.bridge.catalog import SECTIONS
    data = {s: dict(f) for s, f in SECTIONS.items()}
    data["model"].update(MODEL)
    data["train"].update(TRAIN)
    data["mixed_precision"] = "bf16_mixed"
    imp = read_bridge_config(data, world_size=1)
    assert estimate(imp.config).to_dict()["parameters"]["total"] == P
    # defaults the preset overwrites are not news, but for the gradient buffer's dtype (DDP's default False)
    assert [n for n in imp.notes if "overwritten" in n] == [
        "ddp.grad_reduce_in_fp32 = False is overwritten by mixed_precision (True), as Bridge's "
        "MixedPrecisionConfig.setup does"]


def test_optimizer_offload_without_precision_aware_optimizer_keeps_fp32_main_copies_on_the_gpu():
    """Bridge (and Megatron-Core) accept optimizer_cpu_offload without the precision-aware optimizer (issue 28), which
    Megatron-LM's arguments.py refuses: the mixed-precision optimizer keeps fp32 main copies of every parameter on
    the GPU and HybridDeviceOptimizer steps clones of them on the CPU. bf16_mixed (fp32 gradients: no copies),
    fraction 1: 4 B x P on the GPU; 8 B x P pinned (fp32 clone + gradient) and 8 B x P of Adam moments on the
    host."""
    imp = _read(optimizer={"optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0},
                mixed_precision="bf16_mixed")
    st = _stage(imp)
    assert st["optimizer_bytes"] == 4 * P
    assert st["host"] == {"optimizer_pinned": 8 * P, "optimizer_states": 8 * P}


def test_null_tokenizer_vocabulary_replaces_the_models_with_use_tokenizer_vocab_size():
    """training/setup.py _validate_and_set_vocab_size (Bridge @ 067f987d): with tokenizer.use_tokenizer_vocab_size
    (every library pretrain recipe sets it in recipes/common.py _pretrain_common) the model takes the tokenizer's
    vocabulary, padded (should_pad_vocab) to a multiple of make_vocab_size_divisible_by 128 x TP 1. A NullTokenizer
    of 512 tokens: 512 rows, not the model's 1,024. By hand: embedding and output 2 x 512 x 256 = 262,144, so
    P - 2 x 1024 x 256 + 262,144 = 2,622,720 - 524,288 + 262,144 = 2,360,576 parameters; BF16 weights 2 B each."""
    tok = {"tokenizer_type": "NullTokenizer", "vocab_size": 512, "use_tokenizer_vocab_size": True}
    imp = _read(tokenizer=tok, mixed_precision="bf16_mixed")
    assert imp.config["model"]["vocab_size"] == 512
    assert _stage(imp)["weights_bytes"] == 2 * 2_360_576
    assert any("replaced by the NullTokenizer's 512 tokens" in n for n in imp.notes)
    # 500 tokens pad to 512 (a multiple of 128): the same weights
    assert _stage(_read(tokenizer={**tok, "vocab_size": 500}, mixed_precision="bf16_mixed"))["weights_bytes"] \
        == 2 * 2_360_576


def test_tokenizer_vocabulary_left_alone_without_use_tokenizer_vocab_size():
    """Without use_tokenizer_vocab_size a model vocab_size at least the tokenizer's is kept (the perf recipes'
    policy, perf_recipes/_common.py): the model's 1,024 rows, P parameters. A Hugging Face tokenizer's length is not
    in config.yaml: the model's vocabulary is counted and a note says so."""
    kept = _read(tokenizer={"tokenizer_type": "NullTokenizer", "vocab_size": 512}, mixed_precision="bf16_mixed")
    assert kept.config["model"]["vocab_size"] == 1024 and _stage(kept)["weights_bytes"] == 2 * P
    hf = _read(tokenizer={"tokenizer_type": "HuggingFaceTokenizer", "use_tokenizer_vocab_size": True},
               mixed_precision="bf16_mixed")
    assert _stage(hf)["weights_bytes"] == 2 * P
    assert any("whose size config.yaml does not hold" in n for n in hf.notes)
    with pytest.raises(ConfigError, match="tokenizer.vocab_size"):
        _read(tokenizer={"tokenizer_type": "NullTokenizer", "vocab_size": -3, "use_tokenizer_vocab_size": True})


PACKED_SPECS = {"_target_": "megatron.bridge.data.packing.config.PackedSequenceSpecs", "packed_sequence_size": 512,
                "pad_seq_to_mult": 1, "pad_cu_seqlens": False}
SFT_DATASET = {"_target_": "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetConfig", "seq_length": 256,
               "enable_offline_packing": True, "offline_packing_specs": PACKED_SPECS,
               "dataset_kwargs": {"pad_to_max_length": True},
               "hf_dataset": {"_target_": "megatron.bridge.data.builders.hf_dataset.HFDatasetSourceConfig",
                              "dataset_name": "squad"}}


def test_packed_sft_counts_one_pack_per_micro_batch():
    """Bridge @ 067f987d recipes/utils/dataset_utils.py default_squad_config: offline packing into packs of
    packed_sequence_size tokens, padded to the full size (pad_to_max_length); Megatron-Core runs a pack as one THD
    sequence with cu_seqlens. With flash attention every saved tensor is per token (no s x s matrix), and the weights
    do not depend on the length, so a 512-token pack holds exactly twice the activations of one 256-token sequence
    (the model's seq_length here), and the same weights, gradients and optimizer states."""
    packed = _stage(_read(dataset=dict(SFT_DATASET), mixed_precision="bf16_mixed"))
    plain = _stage(_read(mixed_precision="bf16_mixed"))
    assert packed["activations_bytes"] == 2 * plain["activations_bytes"]
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert packed[key] == plain[key]
    imp = _read(dataset=dict(SFT_DATASET), mixed_precision="bf16_mixed")
    assert imp.config["training"]["seq_length"] == 512
    assert any("one pack of 512 tokens per micro-batch" in n for n in imp.notes)
    assert any(f.startswith("dataset.hf_dataset") for f, _ in imp.no_effect)


def test_packed_sft_without_packing_is_the_sequence_length():
    """enable_offline_packing false: SFT samples padded at most to seq_length, the length counted (256)."""
    imp = _read(dataset={**SFT_DATASET, "enable_offline_packing": False, "offline_packing_specs": None},
                mixed_precision="bf16_mixed")
    assert imp.config["training"]["seq_length"] == 256


def test_packed_sft_refuses_micro_batch_above_one_and_a_bad_size():
    """training/config.py: 'Micro batch size should be 1 when training with packed sequence'; PackedSequenceSpecs
    needs packed_sequence_size > 0. Each error names the field."""
    with pytest.raises(ConfigError, match="train.micro_batch_size"):
        read_bridge_config({"model": MODEL, "train": {"micro_batch_size": 2, "global_batch_size": 2},
                            "dataset": SFT_DATASET}, world_size=1)
    with pytest.raises(ConfigError, match="packed_sequence_size"):
        _read(dataset={**SFT_DATASET, "offline_packing_specs": {**PACKED_SPECS, "packed_sequence_size": 0}})


def test_validation_and_checkpoint_fields_set_the_phase_fields():
    """validation.eval_interval / eval_iters and checkpoint.save_interval / ckpt_format reach the fields the phases
    beyond the steady step read (estimator/memory/phases.py); async_save has no effect on the GPU."""
    imp = _read(validation={"eval_interval": 500, "eval_iters": 8, "eval_micro_batch_size": 2},
                checkpoint={"save_interval": 250, "ckpt_format": "torch", "async_save": True})
    tr = imp.config["training"]
    assert (tr["eval_interval"], tr["eval_iters"], tr["save_interval"], tr["ckpt_format"]) == (500, 8, 250, "torch")
    assert tr["eval_micro_batch_size"] == 2
    assert any(where.startswith("checkpoint.async_save") for where, _ in imp.no_effect)


def test_fp8_wgrad_false_changes_nothing_but_with_the_delayed_recipe():
    """Bridge's MixedPrecisionConfig.fp8_wgrad reaches Megatron-Core's fp8_wgrad, which only the delayed recipe
    reads (Megatron-LM @ d98e8a64 : megatron/core/fp8_utils.py get_fp8_recipe). Current scaling: the same estimate
    as with fp8_wgrad True; delayed: refused, naming the field and its value."""
    mp = {"bf16": True, "fp8": "hybrid", "fp8_recipe": "tensorwise"}
    assert _stage(_read(mixed_precision={**mp, "fp8_wgrad": False})) == _stage(_read(mixed_precision=mp))
    with pytest.raises(BridgeRefusedError, match="fp8_wgrad = false"):
        _read(mixed_precision={**mp, "fp8_recipe": "delayed", "fp8_wgrad": False})


def test_logit_dtype_reads_as_the_megatron_flag():
    """flagsA28: Bridge's model.logit_dtype (GPTModelProvider, a torch dtype passed to GPTModel through
    models/logit_dtype.py) is Megatron-LM's --output-logit-dtype: precision.logit_dtype fp32, and the same estimate
    as the flags give (the bytes by hand: tests/memory/test_loss.py)."""
    fp32 = {"_target_": "torch.float32", "_call_": False}
    imp = _read(model={**MODEL, "logit_dtype": fp32})
    assert imp.config["precision"]["logit_dtype"] == "fp32"
    assert _stage(imp) != _stage(_read())


def test_mlp_chunks_for_training_reads_as_the_megatron_flag():
    """flagsA28: TransformerConfig.mlp_chunks_for_training, the same field as Megatron-LM's --mlp-chunks-for-training
    (the bytes by hand: tests/model/layers/test_mlp_chunks.py)."""
    imp = _read(model={**MODEL, "mlp_chunks_for_training": 4})
    assert imp.config["training"]["mlp_chunks_for_training"] == 4


def test_logit_dtype_exports_as_a_torch_dtype_and_has_no_override():
    """flagsA28: the config.yaml form writes model.logit_dtype as Bridge's YAML writes a dtype and reads back; a
    dotted override cannot set it (omegaconf_utils._apply_overrides converts a string only where the field already
    holds a dtype, and logit_dtype's default is None), so the overrides export says so."""
    from estimator import UnsupportedError
    from estimator.formats.bridge.export import to_bridge_dict, to_bridge_overrides
    cfg = {"model": {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1024},
           "parallelism": {}, "training": {"seq_length": 256, "world_size": 1},
           "precision": {"logit_dtype": "fp32"}}
    data = to_bridge_dict(cfg)
    assert data["model"]["logit_dtype"] == {"_target_": "torch.float32", "_call_": False}
    assert read_bridge_config(data, world_size=1).config["precision"]["logit_dtype"] == "fp32"
    with pytest.raises(UnsupportedError, match="model.logit_dtype has no Megatron-Bridge override"):
        to_bridge_overrides(cfg)


def test_fused_single_qkv_rope_with_fewer_kv_groups_than_tp_ranks_is_refused():
    """NVIDIA/Megatron-LM @ 2a75ac12 : megatron/core/transformer/attention.py: with fused_single_qkv_rope the forward
    asks get_query_key_value_tensors for the unsplit QKV (split_qkv False); with num_query_groups 1 below TP 2 it
    returns the gathered group (4 query heads of the 4) before the step that keeps the rank's 4 / 2 = 2 query heads.
    Refused, naming the field; with 2 groups on TP 2 (one a rank, nothing gathered) or with the field off it reads."""
    model = {**MODEL, "num_query_groups": 1, "tensor_model_parallel_size": 2, "sequence_parallel": True}
    with pytest.raises(ConfigError) as err:
        read_bridge_config({"model": {**model, "fused_single_qkv_rope": True}, "train": dict(TRAIN)}, world_size=2)
    [p] = err.value.problems
    assert p.field == "model.fused_single_qkv_rope" and p.value is True
    assert "num_query_groups (1)" in p.message and "tensor_model_parallel_size (2)" in p.message
    read_bridge_config({"model": {**model, "fused_single_qkv_rope": False}, "train": dict(TRAIN)}, world_size=2)
    read_bridge_config({"model": {**model, "num_query_groups": 2, "fused_single_qkv_rope": True},
                        "train": dict(TRAIN)}, world_size=2)


# ------------------------------------------ fields once refused, read from the source (issue 28, bridgeref29)
HYBRID = {**MODEL, "_target_": "megatron.bridge.models.hybrid.hybrid_provider.HybridModelProvider", "num_layers": 10,
          "mamba_num_heads": 8, "mamba_head_dim": 64, "mamba_state_dim": 64, "mamba_num_groups": 2}


def test_hybrid_ratios_without_a_pattern_name_the_pattern_they_mean():
    """Bridge @ 067f987d HybridModelProvider.provide hands HybridModel hybrid_layer_pattern only: ratios alone build
    no decoder layer, so the import stops and says the pattern Megatron-Core's pattern_from_ratios makes of 10
    layers at 0.3 (worked by hand in tests/config/test_hybrid_pattern.py): MM*MM*M*MM."""
    with pytest.raises(ConfigError) as err:
        read_bridge_config({"model": {**HYBRID, "hybrid_attention_ratio": 0.3}, "train": TRAIN}, world_size=1)
    (p,) = err.value.problems
    assert p.field == "model.hybrid_attention_ratio" and "'MM*MM*M*MM'" in p.message
    with pytest.raises(ConfigError, match="number from 0 to 1"):
        read_bridge_config({"model": {**HYBRID, "hybrid_mlp_ratio": "half"}, "train": TRAIN}, world_size=1)


def test_hybrid_ratios_beside_a_pattern_have_no_effect():
    """With hybrid_layer_pattern given the ratios are not read (the same provide): the same estimate, listed as
    without effect."""
    pattern = {**HYBRID, "hybrid_layer_pattern": "MM*MM*M*MM"}
    plain = read_bridge_config({"model": pattern, "train": TRAIN}, world_size=1)
    both = read_bridge_config({"model": {**pattern, "hybrid_attention_ratio": 0.5, "hybrid_mlp_ratio": 0.25},
                               "train": TRAIN}, world_size=1)
    assert _stage(both) == _stage(plain)
    assert [w for w, _ in both.no_effect] == ["model.hybrid_attention_ratio = 0.5", "model.hybrid_mlp_ratio = 0.25"]


def test_partial_checkpoints_with_pipeline_parallelism_stop_where_a_micro_batch_is_marked():
    """PP 2 without interleaving: the first rank's window is warmup + 1 = (2 - 0 - 1) + 1 = 2 micro-batches
    (schedules.py get_pp_rank_microbatches); N = 1 marks micro-batch 1 (1 % 2 >= 1), which Bridge's forward_step
    takes as return_schedule_plan: an error naming the field and the allowed values."""
    two = {**MODEL, "pipeline_model_parallel_size": 2}
    with pytest.raises(ConfigError) as err:
        read_bridge_config({"model": {**two, "num_microbatches_with_partial_activation_checkpoints": 1},
                            "train": TRAIN}, world_size=2)
    (p,) = err.value.problems
    assert p.field == "model.num_microbatches_with_partial_activation_checkpoints" and "at least 2" in p.message


def test_partial_checkpoints_mark_nothing_have_no_effect():
    """N at or above the window marks no micro-batch, and no layer reads the mark: the same estimate. PP 1 never
    reads the field. Interleaved, PP 2 with 2 virtual stages and groups of g = 2 (the default, p): window
    2 (2 - 1) + (2 - 1) 2 + 1 = 5, so 4 stops and 5 passes."""
    two = {**MODEL, "pipeline_model_parallel_size": 2}
    base = read_bridge_config({"model": two, "train": TRAIN}, world_size=2)
    marked = read_bridge_config({"model": {**two, "num_microbatches_with_partial_activation_checkpoints": 2},
                                 "train": TRAIN}, world_size=2)
    assert _stage(marked) == _stage(base)
    assert read_bridge_config({"model": {**MODEL, "num_microbatches_with_partial_activation_checkpoints": 0},
                               "train": TRAIN}, world_size=1).config == _read().config
    vp = {**MODEL, "num_layers": 4, "pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2}
    train = {"micro_batch_size": 1, "global_batch_size": 4}
    with pytest.raises(ConfigError, match="at least 5 with pipeline_model_parallel_size 2 and 2 virtual stages"):
        read_bridge_config({"model": {**vp, "num_microbatches_with_partial_activation_checkpoints": 4},
                            "train": train}, world_size=2)
    read_bridge_config({"model": {**vp, "num_microbatches_with_partial_activation_checkpoints": 5}, "train": train},
                       world_size=2)


def _muon(opt: dict, ddp: dict | None = None):
    return read_bridge_config({"model": dict(MODEL), "train": {"micro_batch_size": 1, "global_batch_size": 2},
                               "optimizer": opt, "ddp": ddp or {}}, world_size=2)


def test_layer_wise_distributed_optimizer_with_muon_is_dist_muon():
    """Megatron-Core's _get_megatron_emerging_optimizer: the dist_ prefix only sets use_layer_wise_distributed_
    optimizer, so muon with the flag is dist_muon. By hand, DP 2, the two-layer model: Muon's 2-D weights
    (2 x (196,608 + 65,536 + 524,288 + 262,144) = 2,097,152) keep master + momentum, 8 B; the rest (525,568:
    embedding, output layer, norms) Adam's 12 B. Unsharded 8 x 2,097,152 + 12 x 525,568 = 23,084,032 B. Layer-wise
    without the DDP's distributed-optimizer buffers (ping-pong layout, estimator/memory/features/optimizers.py) the
    busiest rank holds half, 11,542,016, plus half of the largest tensor, an fc1 of 524,288 x 8 B: 2,097,152;
    13,639,168 B."""
    plain = _stage(_muon({"optimizer": "muon"}))
    wise = _muon({"optimizer": "muon", "use_layer_wise_distributed_optimizer": True})
    assert plain["optimizer_bytes"] == 23_084_032
    assert _stage(wise)["optimizer_bytes"] == 13_639_168
    assert _stage(wise) == _stage(_muon({"optimizer": "dist_muon"}))
    assert any("read as dist_muon" in n for n in wise.notes)


def test_layer_wise_distributed_optimizer_with_adam_has_no_effect():
    """get_megatron_optimizer (adam, sgd) never reads the flag: Adam's 12 B x 2,622,720 = 31,472,640 B unsharded
    either way, and the flag is listed as without effect."""
    adam = _muon({"optimizer": "adam", "use_layer_wise_distributed_optimizer": True})
    assert _stage(adam)["optimizer_bytes"] == 12 * P == _stage(_muon({"optimizer": "adam"}))["optimizer_bytes"]
    assert [w for w, _ in adam.no_effect] == ["optimizer.use_layer_wise_distributed_optimizer = true"]


@pytest.mark.parametrize("section, field, value", [
    ("model", "moe_token_dropping", True),                      # read nowhere
    ("model", "cpu_offloading_double_buffering", True),         # Transformer Engine's default path ignores it
    ("peft", "lora_dtype", {"_target_": "torch.float32", "_call_": False}),   # LinearAdapter (nn.Linear) only
])
def test_fields_read_nowhere_that_matters_change_nothing(section, field, value):
    """Fields once refused that the source shows without effect on the estimate's modules: the same estimate,
    listed as without effect."""
    lora = {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 8, "alpha": 16}
    extra = {"peft": {**lora, field: value}} if section == "peft" else {"model": {**MODEL, field: value}}
    base = read_bridge_config({"model": MODEL, "train": TRAIN, **({"peft": lora} if section == "peft" else {})},
                              world_size=1)
    imp = read_bridge_config({"model": MODEL, "train": TRAIN, **extra}, world_size=1)
    assert _stage(imp) == _stage(base)
    assert [w.split(" = ")[0] for w, _ in imp.no_effect] == [f"{section}.{field}"]


def test_double_buffering_leaves_cpu_offloading_as_it_was():
    """With layer-wise CPU offloading on (one of the two layers), double buffering changes nothing: Transformer
    Engine's default offload path ignores the argument (cpu_offload.py @ d0067d0d: "Deprecated")."""
    off = {**MODEL, "cpu_offloading": True, "cpu_offloading_num_layers": 1}
    base = read_bridge_config({"model": off, "train": TRAIN}, world_size=1)
    dbl = read_bridge_config({"model": {**off, "cpu_offloading_double_buffering": True}, "train": TRAIN}, world_size=1)
    assert base.config["training"]["cpu_offloading"] is True
    assert _stage(dbl) == _stage(base)


def test_transformer_engines_old_offload_path_is_refused_by_name():
    """NVTE_CPU_OFFLOAD_V1=1 selects cpu_offload_v1.py, whose reload buffers (two sets with double buffering) the
    estimate does not model: refused with CPU offloading on, harmless without it."""
    off = {**MODEL, "cpu_offloading": True, "cpu_offloading_num_layers": 1}
    with pytest.raises(BridgeRefusedError) as err:
        read_bridge_config({"model": off, "train": TRAIN, "env_vars": {"NVTE_CPU_OFFLOAD_V1": "1"}}, world_size=1)
    assert err.value.to_problems()[0].field == "env_vars.NVTE_CPU_OFFLOAD_V1"
    read_bridge_config({"model": MODEL, "train": TRAIN, "env_vars": {"NVTE_CPU_OFFLOAD_V1": "1"}}, world_size=1)


def test_fp32_residual_connection_reads_as_the_megatron_flag():
    """distill29: Bridge's model.fp32_residual_connection (a TransformerConfig field, Megatron-LM's
    --fp32-residual-connection) -> precision.fp32_residual_connection, the same estimate as the flag gives (the bytes
    by hand: tests/memory/test_fp32_residual.py); with full recompute the checkpoints grow."""
    imp = _read(model={**MODEL, "fp32_residual_connection": True})
    assert imp.config["precision"]["fp32_residual_connection"] is True


def test_env_vars_alloc_conf_and_cublas_are_read():
    """ConfigContainer.env_vars is applied to the process (training/config.py apply_environment_variables,
    os.environ.setdefault) at the start of runtime_config_update, before CUDA is set up, so PYTORCH_CUDA_ALLOC_CONF
    reaches the caching allocator and CUBLAS_WORKSPACE_CONFIG cuBLAS. Both are read into the training fields the
    Megatron-LM importer fills from a launch line's environment; a section holding only them is not listed as
    without effect. Another variable keeps the section's no-effect entry."""
    imp = _read(env_vars={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    assert imp.config["training"]["pytorch_cuda_alloc_conf"] == "expandable_segments:True"
    assert imp.config["training"]["cublas_workspace_config"] == ":4096:8"
    assert not any(where == "env_vars" for where, _ in imp.no_effect)
    assert any("env_vars.PYTORCH_CUDA_ALLOC_CONF" in n for n in imp.notes)
    other = _read(env_vars={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "NCCL_NVLS_ENABLE": 0})
    assert any(where == "env_vars" for where, _ in other.no_effect)


def test_env_vars_alloc_conf_round_trips_through_the_export():
    """The export writes the two variables back as env_vars (no Megatron-LM flag holds them)."""
    from estimator.formats.bridge.export import to_bridge_dict
    imp = _read(env_vars={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    out = to_bridge_dict(imp.config)
    assert out["env_vars"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert read_bridge_config(out, world_size=1).config["training"]["pytorch_cuda_alloc_conf"] == \
        "expandable_segments:True"


def test_library_recipes_carry_their_expandable_segments():
    """Bridge @ 067f987d's qwen3_next_80b_a3b_pretrain_32gpu_h100_bf16_config ends with cfg.env_vars =
    {**COMMON_RECIPE_ENV_VARS} (recipes/utils/environment_utils.py: PYTORCH_CUDA_ALLOC_CONF
    "expandable_segments:True"); the recipe reads with it, and the replayed reserve follows it: expandable segments
    map what is allocated in 2 MiB pages, so the reserve is no larger than under PyTorch's default segments."""
    from estimator.formats.bridge.recipes import read_bridge_recipe
    name = "qwen3_next_80b_a3b_pretrain_32gpu_h100_bf16_config"
    imp = read_bridge_recipe(name)
    assert imp.config["training"]["pytorch_cuda_alloc_conf"] == "expandable_segments:True"
    replay = {**imp.config, "training": {**imp.config["training"], "reserved_memory_model": "replay"}}
    default = {**replay, "training": {**replay["training"], "pytorch_cuda_alloc_conf": ""}}
    peak, peak_default = estimate(replay).peak, estimate(default).peak
    assert peak.allocated_bytes == peak_default.allocated_bytes
    assert peak.allocated_bytes <= peak.reserved_bytes <= peak_default.reserved_bytes


def _padded_vocab(bridge: dict, world: int = 1, overrides=()) -> int:
    from estimator.model.params import count_parameters_of
    return count_parameters_of(read_bridge_config(bridge, world_size=world, overrides=list(overrides)).config
                               ).padded_vocab_size


_GEMMA_LIKE = {"model": {"num_layers": 2, "hidden_size": 256, "ffn_hidden_size": 512, "num_attention_heads": 4,
                         "seq_length": 512, "vocab_size": 262_208}, "train": {"micro_batch_size": 1,
                                                                               "global_batch_size": 1}}


def test_a_model_vocabulary_is_kept_unpadded():
    """Bridge @ 067f987d : training/setup.py _validate_and_set_vocab_size returns should_pad_vocab False for a model
    vocab_size without tokenizer.use_tokenizer_vocab_size, and models/gpt_provider.py provide() then builds the
    embedding with vocab_size rows as they are: 262,208 (Gemma 3), where Megatron-LM's padding to a multiple of 128
    would give 262,272 (2049 x 128)."""
    assert _padded_vocab(_GEMMA_LIKE) == 262_208


def test_a_config_saved_after_setup_keeps_its_padding():
    """model.should_pad_vocab true is what _validate_and_set_vocab_size sets when it pads (a configuration written
    after setup): the 262,208 rows are padded to 262,272 (2049 x 128)."""
    bridge = {**_GEMMA_LIKE, "model": {**_GEMMA_LIKE["model"], "should_pad_vocab": True}}
    assert _padded_vocab(bridge) == 262_272


def test_the_tokenizer_vocabulary_is_padded():
    """With use_tokenizer_vocab_size the NullTokenizer's 262,208 tokens are padded (should_pad_vocab True) to a
    multiple of make_vocab_size_divisible_by 128 x TP 1: 262,272; the same set as an override."""
    tok = {"tokenizer_type": "NullTokenizer", "vocab_size": 262_208, "use_tokenizer_vocab_size": True}
    assert _padded_vocab({**_GEMMA_LIKE, "tokenizer": tok}) == 262_272
    assert _padded_vocab(_GEMMA_LIKE, overrides=["tokenizer.use_tokenizer_vocab_size=true"]) == 262_272


def test_export_says_how_bridge_pads():
    """A configuration whose vocabulary is padded (Qwen3-8B's 151,936 at TP 2: not a multiple of 256, padded to
    152,064) is written with tokenizer.use_tokenizer_vocab_size=true, the only way Bridge pads; read back, the same
    152,064 rows."""
    from estimator.formats.bridge.export import to_bridge_overrides
    from estimator.formats.presets import preset_text
    from estimator.config.yamlio import load
    cfg = load(preset_text("qwen3-8b"))
    cfg.setdefault("parallelism", {})["tensor_model_parallel_size"] = 2
    cfg.setdefault("training", {})["world_size"] = 2
    text = to_bridge_overrides(cfg)
    assert "tokenizer.use_tokenizer_vocab_size=true" in text
    assert _padded_vocab({}, world=2, overrides=text) == 152_064


def test_average_in_collective_with_per_token_loss_is_refused_by_both_frontends():
    """Megatron-LM @ d98e8a64 : megatron/core/distributed/distributed_data_parallel.py asserts average_in_collective
    off with calculate_per_token_loss (Megatron-Bridge's gpt_oss recipe sets it off for that reason); each alone has
    no memory effect. Refused by the importer's rule, named by the Bridge field on the Bridge path."""
    from estimator.formats.megatron_args import read_megatron_args
    model = {**MODEL, "calculate_per_token_loss": True}
    imp = _read(model=model)
    assert "model.calculate_per_token_loss = True" in {w for w, _ in imp.no_effect}
    with pytest.raises(ConfigError, match="calculate_per_token_loss") as exc:
        _read(model=model, ddp={"average_in_collective": True})
    assert [p.field for p in exc.value.problems] == ["ddp.average_in_collective"]
    _read(ddp={"average_in_collective": True})
    flags = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 256 --vocab-size 1024 --bf16 "
             "--calculate-per-token-loss")
    with pytest.raises(ConfigError, match="calculate_per_token_loss"):
        read_megatron_args(flags + " --ddp-average-in-collective", world_size=1)
    read_megatron_args(flags, world_size=1)
