"""How every field of a Megatron-Bridge configuration bears on the memory estimate: modelled, no effect, or refused.

Each field of :data:`estimator.formats.bridge.catalog.SECTIONS` (``section.field``) is classified by
:func:`classify`, in this order:

1. whole sections without memory effect (logging, RNG, process-group setup, profiling, the scheduler, ...);
2. the hand-kept table :data:`OWN` below: Bridge's own fields and the Megatron-Core fields that have no Megatron-LM
   flag of the same name (read at the catalogue's revisions, NVIDIA-NeMo/Megatron-Bridge and the Megatron-LM commit
   its ``3rdparty/Megatron-LM`` pins);
   then :data:`ATTRIBUTES`: names Bridge's recipes set on a section that its catalogued dataclasses do not declare (a
   plain attribute such as ``cfg.model.moe_a2a_overlap``, a callable such as
   ``_pipeline_model_parallel_layout_builder``, a field of one model provider or dataset provider subclass), so
   that ``--bridge-recipe`` overrides and a ``config.yaml`` holding them are read instead of stopping as unknown;
3. a field named like a Megatron-LM argument destination takes that argument's class
   (:mod:`estimator.formats.megatron_flag_classes`): Megatron-LM builds those arguments from the same dataclasses
   (``ArgumentGroupFactory(TransformerConfig)``, ...), so Megatron-Core receives the same setting either way.

:func:`rows` lists them all for the docs, with the vision-language and multimodal providers' own ``model`` fields
(:func:`provider_rows`, classified in :mod:`.providers` and :mod:`.multimodal`).

A test fails when a catalogued field falls through all three, so a new Bridge revision cannot slip an unclassified
field through.

:data:`NOT_GPT_PROVIDERS` names the model providers that do not build a Megatron-Core GPT model (Bridge's diffusion
transformers): a configuration whose ``model._target_`` is one of them is refused once, by the provider's name,
before any of its own fields is read.
"""

from __future__ import annotations

from .catalog import SECTIONS
from ..megatron_catalog import ARGUMENTS
from ..megatron_flag_classes import classify as classify_flag

__all__ = ["ATTRIBUTES", "NOT_GPT_PROVIDERS", "NO_EFFECT_SECTIONS", "OWN", "classify", "counts", "rows",
           "not_gpt_provider", "provider_rows"]

#: Sections whose every field leaves what one GPU allocates for training unchanged.
NO_EFFECT_SECTIONS = {
    "logger": "logging and experiment tracking", "rng": "random seeds", "dist": "process-group setup and timeouts",
    "profiling": "profiler ranges and memory snapshots (taken after the fact)",
    "rerun_state_machine": "result re-checking", "scheduler": "learning-rate and weight-decay schedules",
    "tokenizer": "the tokenizer (its vocabulary is read where use_tokenizer_vocab_size makes it the model's)", "ft": "fault tolerance",
    "straggler": "straggler detection", "nvrx_straggler": "straggler detection", "inprocess_restart":
    "in-process restart", "tensor_inspect": "tensor statistics", "env_vars": "environment variables (the two "
    "with a memory effect, PYTORCH_CUDA_ALLOC_CONF and CUBLAS_WORKSPACE_CONFIG, are read into the training fields "
    "of the same names)", "optimizer_config_override_provider": "per-parameter optimizer overrides "
    "(learning rate, weight decay)",
}

#: (section, field) -> (kind, reason), for the fields the Megatron-LM catalogue does not name.
OWN: dict[tuple[str, str], tuple[str, str]] = {}


#: (section, name) -> (kind, reason), for names Bridge's recipes set that no catalogued dataclass declares.
ATTRIBUTES: dict[tuple[str, str], tuple[str, str]] = {}


def _put(kind: str, section: str, names: str, reason: str, table: dict | None = None) -> None:
    table = OWN if table is None else table
    for name in names.split():
        if (section, name) in OWN or (section, name) in ATTRIBUTES:
            raise ValueError(f"{section}.{name} classified twice")
        table[(section, name)] = (kind, reason)


# --------------------------------------------------------------------------------------------- model
_put("modelled", "model", "activation_func gated_linear_unit", "the MLP's activation: silu with the gated linear "
     "unit is SwiGLU (the MLP's width and activations)")
_put("modelled", "model", "num_moe_experts", "the number of experts (Megatron-LM's --num-experts)")
_put("modelled", "model", "share_embeddings_and_output_weights", "tied embedding and output weights (Megatron-LM's "
     "--untie-embeddings-and-output-weights, inverted)")
_put("modelled", "model", "params_dtype pipeline_dtype", "the weights' dtype (set by the mixed-precision preset)")
_put("modelled", "model", "virtual_pipeline_model_parallel_size", "interleaved pipeline stages per rank")
_put("modelled", "model", "num_layers_in_first_pipeline_stage num_layers_in_last_pipeline_stage",
     "uneven pipeline stages (Megatron-LM's --decoder-first/last-pipeline-num-layers)")
_put("modelled", "model", "cpu_offloading cpu_offloading_activations cpu_offloading_weights",
     "activation/weight CPU offloading: read as Megatron-LM's --cpu-offloading-num-layers (refused there when on)")
_put("modelled", "model", "cuda_graph_scope", "the modules CUDA graphs capture (Megatron-LM's --cuda-graph-modules)")
_put("modelled", "model", "disable_parameter_transpose_cache", "FP8 weights' transposes kept or not")
_put("modelled", "model", "fp8_param", "FP8 weights (kept in sync with fp8_param_gather by Bridge)")
_put("modelled", "model", "fp4_param", "NVFP4 weights (kept in sync with fp4_param_gather by Bridge)")
_put("no_effect", "model", "moe_token_dropping", "declared by Megatron-Core's TransformerConfig (\"currently "
     "unsupported so should remain False\") and read nowhere: neither Megatron-LM @ 2a75ac12 nor @ d98e8a64 nor "
     "Bridge @ 067f987d uses it; dropping and padding tokens per expert is moe_expert_capacity_factor with "
     "moe_pad_expert_input_to_capacity, which are modelled")
_put("refused", "model", "heterogeneous_block_specs hetereogenous_dist_checkpoint", "heterogeneous layers (per-"
     "layer shapes) are not modelled")
_put("no_effect", "model", "cpu_offloading_double_buffering", "passed by Megatron-Core's TransformerBlock to "
     "Transformer Engine's get_cpu_offload_context, whose default path ignores it (Transformer Engine @ d0067d0d : "
     "transformer_engine/pytorch/cpu_offload.py: \"Deprecated\", an unused argument since the offloading rewrite "
     "c5257605, #1762); only the old path that NVTE_CPU_OFFLOAD_V1=1 selects (cpu_offload_v1.py) allocates its two "
     "sets of reload buffers, and the estimate follows the default path (env_vars.NVTE_CPU_OFFLOAD_V1=1 with "
     "cpu_offloading is refused by name)")
_put("modelled", "model", "use_transformer_engine_full_layer_spec", "Transformer Engine's own TransformerLayer "
     "(training.transformer_engine_full_layer_spec: the same tensors as Megatron-Core's TE spec for the LayerNorm, "
     "GELU, bias, multi-head-attention layer it builds; refused for another model shape)")
_put("refused", "model", "use_kitchen", "another layer implementation: its buffers are not modelled")
_put("modelled", "model", "quant_recipe", "a per-module quantisation recipe (Megatron-Core's RecipeConfig: glob "
     "matchers on module paths, first match wins): each matched Transformer Engine linear's training precision, bf16, "
     "FP8 or NVFP4, its quantised weight copies, scales and saved input (precision.quant_recipe, "
     "estimator/config/quant_recipe.py and estimator/model/quant_recipe.py); what it cannot model (fp8_param or "
     "fp4_param per module, custom recipes, rules by layer number, the linears of layer kinds it does not name) is "
     "refused by name")
_put("no_effect", "model", "activation_func_fp8_input_store", "numerics of FP8 activation inputs (the estimate "
     "keeps the activation input in the activation dtype either way)")
_put("no_effect", "model", "autocast_dtype enable_autocast", "autocast is off in Bridge's presets; weights keep "
     "params_dtype")
_put("no_effect", "model", "batch_p2p_comm batch_p2p_sync deallocate_pipeline_outputs", "pipeline communication "
     "calls (the estimate assumes Megatron-Core's default of freeing sent outputs)")
_put("no_effect", "model", "beta_fast beta_slow rope_scaling seq_len_interpolation_factor yarn_mscale "
     "yarn_mscale_all_dim yarn_rotary_scaling_factor original_max_position_embeddings softmax_scale",
     "rotary scaling and softmax scale: numerics only")
_put("no_effect", "model", "bias_activation_fusion persist_layer_norm memory_efficient_layer_norm "
     "dense_grouped_gemm use_te_rng_tracker tp_only_amax_red parallel_output "
     "scatter_embedding_sequence_parallel", "kernel choices that keep the same saved tensors")
_put("no_effect", "model", "fused_single_qkv_rope", "a kernel choice that keeps the same saved tensors (refused with "
     "num_query_groups below tensor_model_parallel_size: Megatron-Core's fused path does not cut the queries to the "
     "rank's heads there)")
_put("no_effect", "model", "cuda_graph_retain_backward_graph cuda_graph_use_single_mempool", "CUDA graph capture "
     "details (the captured modules are what the estimate follows)")
_put("no_effect", "model", "init_method output_layer_init_method embedding_init_method", "weight initialisation")
_put("no_effect", "model", "finalize_model_grads_func grad_scale_func grad_sync_func no_sync_func param_sync_func "
     "moe_grad_scale_func mtp_grad_scale_func timers experimental_attention_variant_loss_scale_func",
     "callables Bridge sets at run time")
_put("modelled", "model", "should_pad_vocab", "whether the model's vocab_size is padded to a multiple of "
     "make_vocab_size_divisible_by x TP: training/setup.py sets it (true with tokenizer.use_tokenizer_vocab_size), so a "
     "config.yaml saved before setup says false and the import follows the tokenizer section (config.py)")
_put("no_effect", "model", "hf_model_id hf_model_revision restore_modelopt_state transformer_layer_spec "
     "inference_sampling_seed use_inference_optimized_layers", "where the model comes from, and inference-only "
     "settings (vocab_size is what is counted)")
_put("no_effect", "model", "mtp_enabled", "derived from mtp_num_layers, which is what is counted")
_put("no_effect", "model", "fp8_dot_product_attention fp8_multi_head_attention", "FP8 attention numerics: the "
     "estimate keeps attention's saved tensors in the activation dtype (a slight over-estimate)")
_put("no_effect", "model", "moe_router_topk_limited_devices", "device-limited routing: same tensors")
_put("no_effect", "model", "tp_comm_atomic_ag tp_comm_atomic_rs tp_comm_overlap_disable_fc1 "
     "tp_comm_overlap_disable_qkv", "which TP overlap kernels run: the userbuffers follow tp_comm_overlap")
_put("no_effect", "model", "use_arbitrary_attention_mask variable_seq_lengths", "data layout flags of the input")
_put("no_effect", "model", "num_microbatches_with_partial_activation_checkpoints", "no layer reads it: Megatron-"
     "Core's pipeline schedules (Megatron-LM @ 2a75ac12 : megatron/core/pipeline_parallel/schedules.py) only pass "
     "each micro-batch's checkpoint decision to the forward step function as its third positional argument, and "
     "neither GPTModel nor TransformerBlock takes one; Bridge's forward steps (training/gpt_step.py forward_step) "
     "read that argument as return_schedule_plan (an error where a micro-batch would be marked: with "
     "pipeline_model_parallel_size above 1 and a value below the schedule's window, the run stops there)")
_put("modelled", "model", "gtp_weight_remat_size expert_gtp_weight_remat_size", "GTP_remat sizes: with "
     "tensor_parallel_num_weight_shards (expert_...) null Megatron-Core sets the shards to TP (ETP) x this "
     "(model_parallel_config.py resolve_tensor_parallel_weight_shards), else derives this from them "
     "(estimator/memory/features/gtp.py)")
_put("no_effect", "model", "hybrid_attention_ratio hybrid_mlp_ratio", "deprecated: HybridModelProvider (Bridge @ "
     "067f987d models/hybrid/hybrid_provider.py provide) hands Megatron-Core's HybridModel hybrid_layer_pattern "
     "only, which is what is counted (an error when above 0 without a hybrid_layer_pattern: HybridModel then builds "
     "no decoder layer; the message gives the pattern Megatron-Core's pattern_from_ratios makes of them)")
_put("no_effect", "model", "keep_mtp_spec_in_bf16", "set by the Nemotron-H bridge (models/nemotronh/"
     "nemotron_h_bridge.py) but read nowhere: neither Bridge @ 067f987d nor Megatron-LM @ 2a75ac12 uses it")
_put("no_effect", "model", "hybrid_stack_spec", "the module spec (the layers follow hybrid_layer_pattern)")
_put("no_effect", "model", "mamba_chunk_size", "the SSD scan's chunk length: the mixer's saved tensors are counted "
     "per token")
# ----------------------------------------------------------------------------------------------- ddp
_put("modelled", "ddp", "grad_reduce_in_fp32", "the gradient buffer's dtype (overridden by the mixed-precision "
     "preset; Megatron-LM's --accumulate-allreduce-grads-in-fp32)")
_put("modelled", "ddp", "use_custom_fsdp", "Megatron-FSDP (its old name)")
_put("modelled", "ddp", "param_name_patterns_for_fp32_local_accumulation", "['all']: an fp32 main_grad beside "
     "every parameter's slice of a bf16 gradient buffer, 4 B per parameter (Megatron-LM's "
     "--ddp-param-name-patterns-for-fp32-local-accumulation; other patterns refused by value)")
_put("modelled", "ddp", "reduce_scatter_with_fp32_accumulation", "the gradient reduce-scatter as an all-to-all "
     "with fp32 sums: a receive copy of the buffer and the fp32 sum of its shard after the backward pass "
     "(Megatron-LM's --ddp-reduce-scatter-with-fp32-accumulation; refused with overlap_grad_reduce)")
_put("no_effect", "ddp", "average_in_collective", "where the gradients are divided by the data-parallel size: the "
     "same buffers; refused with GTP and with model.calculate_per_token_loss, which Megatron-Core's DDP asserts "
     "against (the importer's rules)")
_put("no_effect", "ddp", "check_for_nan_in_grad "
     "pad_buckets_for_high_nccl_busbw num_buckets bucket_size "
     "fsdp_all_gather_in_start_param_sync", "how gradients are bucketed and reduced: the gradient buffer's size "
     "is the same")
_put("modelled", "ddp", "megatron_fsdp_cuda_graph_mode", "Megatron-FSDP keeps the optimizer's cast gradient "
     "shards between steps (parallelism.megatron_fsdp_cuda_graph_mode)")
_put("refused", "ddp", "megatron_fsdp_use_decoupled_grad", "Megatron-FSDP's decoupled gradients apart from the "
     "precision-aware optimizer are not modelled (Bridge and Megatron-LM set them with it)")
# Dynamic (hybrid) context parallelism: Megatron-Bridge @ 067f987d passes model.hybrid_context_parallel to
# parallel_state (training/initialize.py) but has no data path for it: its step functions call
# get_batch_on_this_cp_rank(..., is_hybrid_cp=False) and nothing wraps the iterator in Megatron-Core's
# HybridCPDataLoaderWrapper, whose (sub-samples, groups) pairs hybrid_context_parallel_forward_backward reads.
# Its two other fields belong to it (the per-rank length, the dataset's divisibility check) and are refused with it.
_HYBRID_CP = ("dynamic context parallelism does not run under Megatron-Bridge: Megatron-Core's per-sequence schedule "
              "reads the (sub-samples, groups) pairs of its HybridCPDataLoaderWrapper, which Bridge's training loop "
              "never builds (Megatron-LM's --hybrid-context-parallel and --max-seqlen-per-dp-cp-rank are modelled)")
_put("refused", "model", "hybrid_context_parallel max_seqlen_per_dp_cp_rank", _HYBRID_CP)
_put("refused", "dataset", "hybrid_context_parallel", _HYBRID_CP)
# ----------------------------------------------------------------------------------------- optimizer
_put("modelled", "optimizer", "params_dtype", "the weights' dtype (the model's params_dtype is what is counted)")
_put("modelled", "optimizer", "store_param_remainders", "BF16 master weights kept as 16-bit remainders")
_put("no_effect", "optimizer", "decoupled_weight_decay grad_norm_skip_threshold timers", "update rule and "
     "numerics")
_put("refused", "optimizer", "adaptive_muon_beta2 adaptive_muon_eps adaptive_muon_moment2_method "
     "soap_precondition_frequency soap_shampoo_beta soap_use_kl_shampoo", "adaptive Muon's and SOAP's states "
     "are not modelled (take effect only with those optimizers)")
_put("modelled", "optimizer", "use_layer_wise_distributed_optimizer", "with optimizer muon, Megatron-Core's "
     "LayerWiseDistributedOptimizer, read as dist_muon (Megatron-LM @ 2a75ac12 : megatron/core/optimizer/"
     "__init__.py _get_megatron_emerging_optimizer: the dist_ prefix only sets this flag); with adam or sgd "
     "get_megatron_optimizer never reads it (no effect)")
# ---------------------------------------------------------------------------------------------- train
_put("no_effect", "train", "check_optimizer_step_success num_epochs skip_sync_grad_norm_across_mp",
     "loop control")
# ----------------------------------------------------------------------------------------- validation
# eval_interval, eval_iters and eval_micro_batch_size take Megatron-LM's class (the evaluation phase, estimator/memory/phases.py).
_put("no_effect", "validation", "eval_global_batch_size full_validation multiple_validation_sets skip_train "
     "start_eval_at_iter test_mode validation_set_names", "evaluation cadence and data")
# ----------------------------------------------------------------------------------------- checkpoint
_put("no_effect", "checkpoint", "also_save_hf_checkpoint async_write_results_mp_mode custom_manager_class "
     "fully_parallel_load fully_parallel_save hf_distributed_save hf_save_every_n_ranks hf_source_path "
     "hf_trust_remote_code load_optim load_rng most_recent_k save_optim save_rng storage_writers_per_rank",
     "checkpoint paths and writers: the training step's peak is counted without a save in flight")
# ----------------------------------------------------------------------------------- mixed_precision
_put("modelled", "mixed_precision", "grad_reduce_in_fp32", "copied onto ddp and optimizer by Bridge "
     "(training/mixed_precision.py update_config_with_precision_overrides)")
_put("modelled", "mixed_precision", "params_dtype pipeline_dtype fp32", "the weights' dtype, copied onto the model")
_put("modelled", "mixed_precision", "fp8_param", "FP8 weights (kept in sync with fp8_param_gather)")
_put("modelled", "mixed_precision", "fp4_param", "NVFP4 weights (kept in sync with fp4_param_gather)")
_put("no_effect", "mixed_precision", "autocast_dtype autocast_enabled fp8_dot_product_attention "
     "fp8_multi_head_attention", "numerics (see the model fields of the same names)")
# ------------------------------------------------------------------------------------- comm_overlap
_put("modelled", "comm_overlap", "batch_p2p_comm", "pipeline p2p calls (no memory effect), copied onto the model")
_put("no_effect", "comm_overlap", "bucket_size data_parallel_size", "bucket sizing; the data-parallel size is "
     "derived from the world size")
# --------------------------------------------------------------------------------------------- peft
_put("modelled", "peft", "dim alpha target_modules share_expert_adapters sequence_parallel_input_regather",
     "LoRA/DoRA adapters (on attention, dense MLPs, shared and routed experts): their weights, gradients, "
     "optimizer states and saved inputs; LoRA's shared or per-expert adapters and its re-gathered "
     "sequence-parallel input")
_put("no_effect", "peft", "dropout dropout_position lora_A_init_method lora_B_init_method a2a_experimental",
     "numerics and initialisation of the adapters")
_put("no_effect", "peft", "lora_dtype", "Bridge @ 067f987d passes it only to LinearAdapter, the adapter of a plain "
     "torch.nn.Linear (peft/lora.py LoRA.transform, peft/lora_layers.py); the adapters on Megatron-Core's linears, "
     "the only ones the estimate places (linear_qkv, linear_proj, linear_fc1, linear_fc2, the experts'), are "
     "ParallelLinearAdapter (model's params_dtype) and the grouped expert adapters (the base weight's dtype), "
     "whatever lora_dtype says")
_put("refused", "peft", "normalize_moe_lora experts_shared_outer_loras", "expert adapters of rank dim / "
     "moe_router_topk (normalize_moe_lora) and SharedOuterGroupedExpertAdapter's half-shared expert adapters "
     "(experts_shared_outer_loras) are not modelled")
# ------------------------------------------------------------------------------------------- dataset
_put("modelled", "dataset", "sequence_length", "the sequence length (Megatron-LM's --seq-length)")
_put("no_effect", "dataset", "add_extra_token_to_sequence blend blend_per_split create_attention_mask "
     "data_parallel_size dataloader_load dataloader_save defer_npy_index_mmap drop_last "
     "drop_last_partial_validation_sequence fast_cache_load inter_document_masking mock path_to_cache "
     "persistent_workers pin_memory random_seed sequence_parallel_size sequences_per_dataset split_matrix "
     "token_dtype_code tokenizer", "where the data comes from and how it is loaded (host memory)")
_put("modelled", "dataset", "enable_offline_packing offline_packing_specs", "SFT with offline-packed sequences "
     "(GPTSFTDatasetConfig, THD layout): a micro-batch is one pack, so the tokens per micro-batch are "
     "offline_packing_specs.packed_sequence_size (the longest pack; micro_batch_size must be 1)")
_put("no_effect", "dataset", "enable_in_batch_packing defer_in_batch_packing_to_step pad_to_max_length "
     "pad_to_multiple_of in_batch_packing_pad_to_multiple_of dataset_kwargs", "how SFT samples are padded or "
     "packed within a micro-batch: at most micro_batch_size x seq_length tokens, the length the estimate counts "
     "(the longest micro-batch)")
_put("no_effect", "dataset", "blend_seed dataset_root do_test do_validation hf_dataset hf_output_root "
     "hf_processor_kwargs hf_processor_path hf_rewrite hf_test_dataset hf_validation_dataset "
     "hf_validation_proportion max_train_samples memmap_workers preprocessing seed "
     "skip_getting_attention_mask_from_dataset source source_weights test_source validation_source",
     "where the SFT data come from and how they are prepared (host memory)")


# ------------------------------------------------------------- attributes outside the catalogued dataclasses
# Read at Megatron-Bridge @ 067f987d and Megatron-LM @ 2a75ac12 (the commit Bridge pins); "read nowhere" means a
# search of both source trees finds no reader.
_put("no_effect", "model", "_pipeline_model_parallel_layout_builder", "a callable (e.g. recipes/deepseek/h100/"
     "deepseek_v3.py _get_deepseek_v3_pipeline_layout) that scripts/training/recipe_runner.py "
     "sync_model_pipeline_layout calls with (pipeline_model_parallel_size, virtual_pipeline_model_parallel_size) "
     "to rebuild model.pipeline_model_parallel_layout after a PP or VP override; the layout is what is counted "
     "(give model.pipeline_model_parallel_layout with a PP or VP override)", ATTRIBUTES)
_put("no_effect", "model", "moe_a2a_overlap", "a plain attribute the Qwen3 MoE and Qwen3-VL performance recipes "
     "set; read nowhere (the overlap of the expert all-to-all is comm_overlap.overlap_moe_expert_parallel_comm)",
     ATTRIBUTES)
_put("no_effect", "model", "mtp_eval_in_bf16", "a plain attribute the DeepSeek-V4 recipes set; read nowhere",
     ATTRIBUTES)
_put("no_effect", "model", "fp8_param_gather", "Megatron-Core and Bridge read fp8_param_gather from the DDP "
     "configuration (ddp.fp8_param_gather, set from mixed_precision); on the model it is a plain attribute "
     "(declared only by ExaoneMoEModelProvider) read nowhere", ATTRIBUTES)
_put("no_effect", "model", "cp_partition_mode", "how DeepSeek-V4's packed sequences are split across "
     "context-parallel ranks (zigzag or contiguous; models/deepseek/deepseek_v4_step.py): each rank keeps "
     "1/context_parallel_size of the tokens either way", ATTRIBUTES)
_put("modelled", "model", "freeze_mtp_model", "a frozen multi-token-prediction module (Exaone 4.5's provider, "
     "models/exaone/exaone45/modelling_exaone45/model.py Exaone45Model.freeze: requires_grad off on the parameters "
     "named mtp): training.freeze_mtp, weights only for the MTP layers and no weight-gradient inputs saved in "
     "them (estimator/memory/features/frozen_language.py)", ATTRIBUTES)
_put("no_effect", "optimizer", "offload_optimizer_states", "a plain attribute a DeepSeek-V4 performance recipe "
     "sets (to False); read nowhere (Megatron-Core's optimizer offload is optimizer_cpu_offload)", ATTRIBUTES)
_put("no_effect", "dataset", "sample_count repo_id cache_dir dataset_sampling fixed_pack_idx "
     "tokenizer_path oversize_policy seqlen_divisible_by prompt max_packing_seqlen",
     "fields of a dataset provider outside the catalogue (e.g. models/stepfun/data/flickr8k.py "
     "Step37Flickr8kSFTDataProvider): which samples are loaded and how (host memory); the tokens per "
     "micro-batch are train.micro_batch_size x the sequence length", ATTRIBUTES)

# Megatron-Bridge's WanModelProvider (a diffusion transformer) is read by estimator/formats/bridge/wan.py, which
# takes its own fields and WanDatasetConfig's out before the catalogued sections are judged.
#: Model providers that do not build a Megatron-Core GPT model: class name -> why refused.
NOT_GPT_PROVIDERS = {
    name: f"Megatron-Bridge's {name} (diffusion/models/{path}) is a diffusion transformer built on "
          "TransformerConfig and VisionModule, not a Megatron-Core GPT model: its latents, patches and "
          "cross-attention are not modelled"
    for name, path in (("FluxProvider", "flux/flux_provider.py"),)}


def classify(section: str, name: str) -> tuple[str, str] | None:
    """("modelled" | "no_effect" | "refused", reason) of the field ``section.name``, or None when unclassified."""
    if section in NO_EFFECT_SECTIONS:
        return "no_effect", NO_EFFECT_SECTIONS[section]
    if (section, name) in OWN:
        return OWN[(section, name)]
    if (section, name) in ATTRIBUTES:
        return ATTRIBUTES[(section, name)]
    if name in ARGUMENTS:
        found = classify_flag(name)
        if found:
            return found[0], f"as the Megatron-LM argument of the same name: {found[1]}"
    return None


def not_gpt_provider(target) -> tuple[str, str] | None:
    """(class name, reason) when ``model._target_`` names a provider of :data:`NOT_GPT_PROVIDERS`, else None."""
    name = str(target or "").rsplit(".", 1)[-1]
    return (name, NOT_GPT_PROVIDERS[name]) if name in NOT_GPT_PROVIDERS else None


def rows() -> list[dict]:
    """Every catalogued field as ``{kind, section, field, reason}``, in the catalogue's order, then the
    :data:`ATTRIBUTES` (for the docs)."""
    out = []
    for section, fields in SECTIONS.items():
        for name in fields:
            kind, reason = classify(section, name) or ("unclassified", "")
            out.append({"kind": kind, "section": section, "field": name, "reason": reason})
    for (section, name), (kind, reason) in ATTRIBUTES.items():
        out.append({"kind": kind, "section": section, "field": name, "reason": reason})
    return out + provider_rows()


def provider_rows() -> list[dict]:
    """The vision-language and multimodal providers' own ``model`` fields that the catalogued ``GPTModelProvider``
    does not declare (:mod:`.providers`, :mod:`.multimodal`), as rows of :func:`rows`; a refused one is refused only
    away from its harmless value, which the reason names."""
    from .multimodal import MULTIMODAL, NO_EFFECT, SOUND_FIELD, TRAINING_FIELD, VIDEO_FIELD
    from .providers import PROVIDER_FIELDS
    out = []
    for name, (kind, off, why) in PROVIDER_FIELDS.items():
        if name not in SECTIONS["model"]:
            when = f" (at {off!r}: no effect)" if kind == "refused" and off is not None else ""
            out.append({"kind": kind, "section": "model", "field": name, "reason": why + when})
    for name, (off, why) in MULTIMODAL.items():
        if name in SECTIONS["model"] or name in PROVIDER_FIELDS:
            continue
        if name in TRAINING_FIELD:
            out.append({"kind": "modelled", "section": "model", "field": name,
                        "reason": f"training.{TRAINING_FIELD[name]} (needs a vision tower in the model)"})
        elif name in NO_EFFECT:
            out.append({"kind": "no_effect", "section": "model", "field": name, "reason": NO_EFFECT[name]})
        elif name in SOUND_FIELD:
            out.append({"kind": "modelled", "section": "model", "field": name, "reason": "Nemotron Omni's Parakeet "
                        "sound tower (model.sound_*, training.freeze_sound_*: estimator/model/audio.py)"})
        elif name in VIDEO_FIELD:
            out.append({"kind": "modelled", "section": "model", "field": name, "reason": "Nemotron Omni's RADIO "
                        "tower and its video frames (model.vision_*: estimator/model/vision.py)"})
        else:
            out.append({"kind": "refused", "section": "model", "field": name, "reason": f"{why} (at {off!r}: no "
                        "effect)"})
    return out


def counts() -> dict[str, int]:
    """How many catalogued fields are modelled, without effect, refused (and unclassified: 0 when complete)."""
    out = {"modelled": 0, "no_effect": 0, "refused": 0, "unclassified": 0}
    for row in rows():
        out[row["kind"]] += 1
    return out
