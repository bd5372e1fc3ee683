"""How every Megatron-LM argument bears on the memory estimate: modelled, no effect, or refused.

Each argument of :data:`estimator.formats.megatron_catalog.ARGUMENTS` (by its destination name) is in exactly
one of three tables, each entry with a one-line reason:

- :data:`MODELLED`: the launch-argument importer translates it into the configuration, and the
  estimate follows it (what it becomes is the reason text);
- :data:`NO_EFFECT`: it does not change what one GPU allocates for training (logging, paths,
  learning-rate schedule, numerics, kernel choices that keep the same tensors, inference-only
  settings), or it acts only together with a refused argument;
- :data:`REFUSED`: it changes memory in a way the estimator does not model. The importer stops with an
  error naming the flag and this reason, unless the flag is given at Megatron-LM's own default.

A test fails when the catalogue holds an argument that none of the tables classifies, so a new
Megatron-LM revision cannot slip an unclassified flag through. Read with Megatron-LM's
``megatron/training/arguments.py`` and Megatron-Core at the catalogue's revision.
"""

from __future__ import annotations

__all__ = ["MODELLED", "NO_EFFECT", "REFUSED", "classify", "rows"]

MODELLED: dict[str, str] = {}
NO_EFFECT: dict[str, str] = {}
REFUSED: dict[str, str] = {}


def _put(table: dict, names: str, reason: str) -> None:
    for name in names.split():
        if name in MODELLED or name in NO_EFFECT or name in REFUSED:
            raise ValueError(f"{name} classified twice")
        table[name] = reason


def classify(dest: str) -> tuple[str, str] | None:
    """("modelled" | "no_effect" | "refused", reason) of one argument destination, or None."""
    for kind, table in (("modelled", MODELLED), ("no_effect", NO_EFFECT), ("refused", REFUSED)):
        if dest in table:
            return kind, table[dest]
    return None


def rows() -> list[dict]:
    """Every catalogued argument as ``{kind, dest, flags, reason}``, in the catalogue's order (for the docs)."""
    from .megatron_catalog import ARGUMENTS
    out = []
    for dest, (flags, _, _) in ARGUMENTS.items():
        kind, reason = classify(dest) or ("unclassified", "")
        out.append({"kind": kind, "dest": dest, "flags": list(flags), "reason": reason})
    return out


# --------------------------------------------------------------------------------------- modelled
_M = MODELLED
_put(_M, "num_layers hidden_size num_attention_heads ffn_hidden_size kv_channels num_query_groups "
     "group_query_attention vocab_size make_vocab_size_divisible_by max_position_embeddings "
     "position_embedding_type use_rotary_position_embeddings normalization "
     "qk_layernorm add_bias_linear add_qkv_bias untie_embeddings_and_output_weights swiglu "
     "quick_geglu hidden_dropout attention_dropout multi_latent_attention q_lora_rank kv_lora_rank qk_head_dim "
     "qk_pos_emb_head_dim v_head_dim mtp_num_layers num_experts moe_layer_freq moe_router_topk "
     "moe_ffn_hidden_size moe_shared_expert_intermediate_size moe_shared_expert_gate "
     "moe_router_enable_expert_bias moe_expert_capacity_factor moe_pad_expert_input_to_capacity",
     "the model's shape: parameters and activations")
_put(_M, "softmax_type attention_output_gate qk_l2_norm moe_latent_size experimental_attention_variant "
     "linear_attention_freq linear_conv_kernel_dim linear_key_head_dim linear_value_head_dim linear_num_key_heads "
     "linear_num_value_heads",
     "the model's shape: attention sinks, gated attention, latent MoE and gated-delta-net layers (parameters and "
     "activations)")
_put(_M, "dsa_indexer_n_heads dsa_indexer_head_dim dsa_indexer_topk dsa_indexer_loss_coeff "
     "dsa_kernel_backend", "DeepSeek sparse attention: the lightning indexer's shape (parameters), its top-k, the "
     "indexer loss (its saved tensors) and the sparse attention kernels (the dense reference path's s x s scores "
     "or the fused kernels' top-k indices)")
_put(_M, "dsa_indexer_topk_freq dsa_indexer_skip_topk_offset", "DeepSeek sparse attention's cross-layer top-k "
     "sharing (GLM-5.2): the layers that reuse another's top-k hold no indexer (parameters, activations)")
_put(_M, "dsa_indexer_use_sparse_loss", "DeepSeek sparse attention's sparse indexer loss: with shared top-k and "
     "the cuDNN kernels, the fused top-k-with-loss kernel keeps only the indexer's gradients")
_put(_M, "mtp_use_repeated_layer", "one MTP layer built and applied at every MTP depth")
_put(_M, "mtp_hsm", "hidden-state mixing in the MTP layers (2+ MTP layers): each depth after the first keeps the "
     "draw's int64 indices and a bool mask, 9 B per token, for its backward pass (estimator/memory/activations.py "
     "hsm_bytes); the stacked, rolled copies of the earlier depths its forward makes are freed before the output "
     "layer runs")
_put(_M, "use_mamba_mem_eff_path", "the Mamba-2 path without the fused scan (--disable-mamba-mem-eff-path): the "
     "convolution's input and the fp32 decay cumsum kept besides copies of x, B, C, dt and z "
     "(estimator/model/layers/mamba.py)")
_put(_M, "hybrid_layer_pattern hybrid_override_pattern mtp_hybrid_override_pattern mamba_state_dim mamba_head_dim "
     "mamba_num_groups mamba_num_heads", "the hybrid model's layers (Mamba-2, attention, MLP, MoE, gated delta "
     "net), its pipeline segments and MTP layers")
_put(_M, "moe_expert_rank_capacity_factor", "HybridEP's static per-rank receive budget: the routed rows of every "
     "MoE layer, the larger of the budget and the overload factor's (an over-budget step is rerun dropless)")
_put(_M, "moe_paged_stash moe_paged_stash_page_size moe_paged_stash_buffer_size_factor_cuda "
     "moe_paged_stash_buffer_size_factor_cpu", "the paged stash of the routed experts' saved tensors: a GPU buffer "
     "and a pinned host buffer in their place")
_put(_M, "use_transformer_engine_op_fuser", "Transformer Engine's fused grouped MLP for the experts (with mxfp8), "
     "whose saved tensors the paged stash takes; otherwise the same tensors as without it")
_put(_M, "moe_grouped_gemm", "grouped GEMM keeps Transformer Engine's extra per-stream GEMM workspaces")
_put(_M, "padded_vocab_size", "the padded vocabulary, used as given")
_put(_M, "tensor_model_parallel_size pipeline_model_parallel_size context_parallel_size "
     "expert_model_parallel_size expert_tensor_parallel_size sequence_parallel cp_comm_type "
     "num_layers_per_virtual_pipeline_stage num_virtual_stages_per_pipeline_rank "
     "decoder_first_pipeline_num_layers decoder_last_pipeline_num_layers",
     "the parallel layout: what each GPU holds")
_put(_M, "pipeline_model_parallel_layout account_for_embedding_in_pipeline_split account_for_loss_in_pipeline_split "
     "microbatch_group_size_per_vp_stage",
     "the pipeline layout: which layers, embedding, loss and MTP layers each (virtual) stage holds, and the "
     "interleaved schedule's micro-batches in flight")
_put(_M, "micro_batch_size global_batch_size seq_length encoder_seq_length",
     "batch and sequence: activations and micro-batches in flight")
_put(_M, "recompute_granularity recompute_method recompute_num_layers recompute_modules recompute_activations "
     "moe_layer_recompute distribute_saved_activations", "activation recomputation (--moe-layer-recompute: "
     "selective recompute of moe; --distribute-saved-activations: full-recompute checkpoints split over TP)")
_put(_M, "overlap_dispatch_backward_with_experts_wgrad", "the routed experts' weight-gradient GEMMs delayed to "
     "the dispatch's backward keep fc1's and fc2's output gradients through the re-sorting and the all-to-all's "
     "backward (FP8, NVFP4, PEFT, CUDA graphs and offloading with it are refused)")
_put(_M, "hierarchical_context_parallel_sizes", "hierarchical context parallelism (cp_comm_type a2a+p2p): the "
     "all-to-all's output before and after it, as a2a, and one process group (NCCL buffers) per level of more "
     "than one rank")
_put(_M, "attention_backend", "attention kernel: unfused attention keeps the s x s scores")
_put(_M, "cross_entropy_loss_fusion cross_entropy_fusion_impl", "which logits copies the loss keeps")
_put(_M, "transformer_impl gradient_accumulation_fusion", "Transformer Engine's weight-gradient buffers")
_put(_M, "masked_softmax_fusion create_attention_mask_in_dataloader", "the local implementation's unfused "
     "attention: its backward working set and the causal masks it keeps")
_put(_M, "save_interval ckpt_format", "checkpoint save and load phases: what the state dict's "
     "preparation adds on the GPU (estimator/memory/phases.py)")
_put(_M, "eval_iters eval_interval eval_micro_batch_size", "the evaluation phase: forward-only steps beside the model states")
_put(_M, "use_distributed_optimizer", "optimizer states sharded over the data-parallel ranks")
_put(_M, "empty_unused_memory_level", "torch.cuda.empty_cache() after the forward-backward passes (1) and the "
     "optimizer step (2): reserved memory of the allocator replay, not allocated")
_put(_M, "fp16 bf16 fp8 fp8_recipe fp8_param_gather", "weight dtype, FP8 weight copies and activations")
_put(_M, "fp4 fp4_param_gather", "NVFP4 compute (Transformer Engine's NVFP4BlockScaling): 4-bit weight copies "
     "with E4M3 scales per 16 elements, or NVFP4 weights themselves; linear-layer inputs saved in NVFP4")
_put(_M, "reuse_grad_buf_for_mxfp8_param_ag", "MXFP8 weights all-gathered through the gradient buffer and kept in "
     "Transformer Engine's own storage: what the estimate counts for MXFP8 weights (required for them)")
_put(_M, "accumulate_allreduce_grads_in_fp32 grad_reduce_in_bf16", "the dtype of the gradient buffer")
_put(_M, "use_precision_aware_optimizer main_grads_dtype main_params_dtype exp_avg_dtype exp_avg_sq_dtype",
     "dtypes of the optimizer's master weights and moments")
_put(_M, "use_megatron_fsdp use_torch_fsdp2 data_parallel_sharding_strategy outer_dp_sharding_strategy "
     "fsdp_double_buffer megatron_fsdp_max_pool_double_buffer suggested_communication_unit_size "
     "torch_fsdp2_reshard_after_forward megatron_fsdp_main_params_dtype megatron_fsdp_main_grads_dtype "
     "megatron_fsdp_grad_comm_dtype",
     "FSDP: what is sharded, and the gathered unit buffers at the peak")
_put(_M, "num_distributed_optimizer_instances", "optimizer states sharded over 1/N of the data-parallel ranks "
     "(with Megatron-FSDP: the HSDP outer size)")
_put(_M, "optimizer sgd_momentum", "optimizer state bytes per parameter (Adam, SGD, Muon; dist_muon is Muon with "
     "the layer-wise distributed optimizer)")
_put(_M, "optimizer_cpu_offload optimizer_offload_fraction", "optimizer states and master weights moved to host "
     "memory")
_put(_M, "cpu_offloading_num_layers", "activations moved to pinned host memory")
_put(_M, "fine_grained_activation_offloading offload_modules min_offloaded_tensor_size activation_offload_fraction "
     "delta_offload_bytes_across_pp_ranks", "fine-grained activation offloading: the listed modules' saved tensors "
     "to pinned host memory, but what Megatron-Core's policy keeps on the GPU (the offload margin, the loss "
     "chunk's last layer, the fraction and per-rank delta) and the groups reloaded one ahead in the backward pass; "
     "the fit verdict carries this feature's own error band")
_put(_M, "cuda_graph_impl cuda_graph_modules cuda_graph_scope_deprecated external_cuda_graph",
     "Transformer Engine's per-layer CUDA graphs: static buffers, and the capture's peak apart from the steady "
     "state's (the captured tensors live in a private pool)")
_put(_M, "tp_comm_overlap", "Transformer Engine's userbuffers for tensor-parallel overlap (outside the allocator) "
     "and its cuBLAS workspace for the overlapped GEMMs")
_put(_M, "heterogeneous_layers_config_encoded_json heterogeneous_layers_config_path", "heterogeneous layers "
     "(Llama-Nemotron's block_configs: per-layer attention, no-op or linear blocks, MLP widths); the file is read "
     "when available")
_put(_M, "tp_comm_overlap_cfg", "the userbuffer configuration file (read when available): each GEMM's overlap "
     "method and buffer dtype size its userbuffer")
_put(_M, "optimizer_cuda_graph", "the optimizer step captured in a CUDA graph: its working set (fp32 gradient "
     "copies, ...) stays reserved in the graph's private pool beside the forward/backward pass (Adam only)")
_put(_M, "keep_fp8_transpose_cache", "Megatron-FSDP with FP8 weights: every FP8 weight's column-wise copy kept "
     "whole all run instead of per gathered unit")
_put(_M, "ddp_reduce_scatter_with_fp32_accumulation", "the gradient reduce-scatter as an all-to-all with fp32 sums: "
     "the larger buffer's receive copy and fp32 shard sum after the backward pass (without --overlap-grad-reduce; "
     "with it refused: bucket boundaries)")
_put(_M, "create_all_gather_group", "Megatron-FSDP's all-gather copies of the data x context-parallel and "
     "expert-data-parallel groups: one more NCCL communicator each (none without Megatron-FSDP: never used)")
_put(_M, "ddp_param_name_patterns_for_fp32_local_accumulation", "'all': an fp32 main_grad beside every "
     "parameter's slice of a bf16 gradient buffer, 4 B per parameter (other patterns refused by value)")
_put(_M, "nccl_ub", "data-parallel buffers in NCCL's memory pool; Megatron-FSDP double buffering")
_put(_M, "moe_token_dispatcher_type moe_flex_dispatcher_backend moe_enable_deepep moe_flex_dispatcher_num_sms "
     "moe_deepep_num_sms moe_hybridep_num_sms", "the flex dispatcher's DeepEP / HybridEP buffers (outside the "
     "allocator)")
_put(_M, "muon_fp32_matmul_prec", "Muon's Newton-Schulz iterates: bf16 copies at medium, fp32 at high and highest "
     "(and at low, which PyTorch ignores, leaving its default highest)")
_put(_M, "muon_tp_mode", "Muon's step: the momentum gathered whole over the tensor-parallel group (duplicated), or "
     "each shard orthogonalized alone (blockwise) or with an all-reduced Gram matrix (distributed)")
_put(_M, "muon_nesterov", "Muon's step orthogonalizes a new fp32 Nesterov mix of the gradient and the momentum")
_put(_M, "muon_split_qkv", "Muon's step: the fused QKV weight orthogonalized in blocks or whole")
_put(_M, "use_layer_wise_param_layout", "Muon's layer-wise distributed optimizer: without the layout whole "
     "tensors go to the data-parallel ranks in ping-pong order, the largest (the embedding) to one rank")
_put(_M, "cuda_graph_warmup_steps", "eager steps before the capture: their peak counts; with 0 the capture "
     "precedes the optimizer's first step")
_put(_M, "overlap_moe_expert_parallel_comm", "the combined 1F1B step: one more layer's pre-dispatch part and "
     "permuted tokens beside a backward layer and the gradients its callers hold; the shared experts' output kept")
_put(_M, "delay_wgrad_compute", "inside the combined 1F1B step each delayed linear keeps its input and output "
     "gradient until backward_dw: the experts' past the forward layer's dispatch, the attention's to the end of the "
     "layer step")
_put(_M, "defer_embedding_wgrad_compute wgrad_deferral_limit", "the last stage keeps each deferred micro-batch's "
     "output-layer input and logits gradient")
_put(_M, "first_last_layers_bf16 num_layers_at_start_in_bf16 num_layers_at_end_in_bf16", "bf16 layers in an FP8 "
     "run: no FP8 weight copies, bf16 activations")
_put(_M, "moe_router_dtype", "dtype of the saved router logits and probabilities")
_put(_M, "moe_router_score_function moe_router_pre_softmax moe_router_num_groups moe_router_group_topk "
     "moe_router_load_balancing_type moe_aux_loss_coeff moe_z_loss_coeff moe_router_fusion",
     "which router tensors are saved for the backward pass (fp32 scores, masks, logits per token and expert)")
_put(_M, "moe_permute_fusion", "Transformer Engine's fused permutation keeps an int32 row map [tokens, 2 E + 1] "
     "per MoE layer for the backward pass")
_put(_M, "deterministic_mode", "the unfused MoE unpermute's index_add_ keeps its source rows for the backward pass "
     "(scatter_add_ without it keeps only indices)")

# -------------------------------------------------------------------------------------- no effect
_N = NO_EFFECT
_put(_N, "fp8_wgrad", "--no-fp8-wgrad: Megatron-Core reads it only for the delayed recipe (fp8_utils.py "
     "get_fp8_recipe: DelayedScaling's override_linear_precision), so with tensorwise, mxfp8 and blockwise it changes "
     "nothing; with delayed it is refused (Transformer Engine 2.1 and newer have no override_linear_precision)")
_put(_N, "fp4_recipe", "the FP4 recipe: nvfp4 (Megatron's default) is the only one modelled, and a custom recipe "
     "is refused by value")
# flagsA28: arguments once refused, found without memory effect at the catalogue's revision.
_put(_N, "pad_vocab_size", "--no-pad-vocab-size: the model's vocabulary is padded all the same. Without the flag "
     "the tokenizer sets padded_vocab_size (megatron/core/tokenizers/utils/build_tokenizer.py); with it that stays "
     "unset, so gpt_config_from_args (megatron/training/argument_utils.py) passes --vocab-size with "
     "should_pad_vocab=True and the model provider pads it to a multiple of --make-vocab-size-divisible-by x TP "
     "(megatron/training/vocab_utils.py): the same size (give --padded-vocab-size for another)")
_put(_N, "fp16_lm_cross_entropy", "Megatron-Core's GPTModel stores it and never reads it: the loss's dtypes follow "
     "--cross-entropy-loss-fusion and the logits' dtype (language_module.py compute_language_model_loss); "
     "Megatron-LM accepts it only with --fp16")
_put(_N, "mtp_standalone", "only the pipeline's send/receive shapes change; where MTP layers sit is read from the "
     "layout (a layout string overrides it)")
_put(_N, "tokenizer_type", "the vocabulary size comes from --vocab-size (the NullTokenizer keeps it as given at "
     "this revision; before Megatron-LM c9dfe34798 it appended one end-of-document token)")
_put(_N, "add_position_embedding", "deprecated; accepted only with rope positions, which have no parameters")
_put(_N, "squared_relu", "an ungated activation keeps the same tensors as GeLU")
_put(_N, "use_flash_attn", "flash attention, which the default backend (auto) already picks")
_put(_N, "layernorm_epsilon layernorm_zero_centered_gamma rotary_base rotary_percent rotary_interleaved "
     "rotary_seq_len_interpolation_factor use_rope_scaling rope_scaling_factor no_rope_freq rope_type "
     "yarn_original_max_position_embeddings yarn_beta_fast yarn_beta_slow yarn_correction_range_round_to_int "
     "rotary_scaling_factor mscale mscale_all_dim mrope_section relative_attention_num_buckets "
     "relative_attention_max_distance glu_linear_offset activation_func_clamp_value openai_gelu onnx_safe "
     "apply_query_key_layer_scaling attention_softmax_in_fp32 apply_residual_connection_post_layernorm "
     "qk_clip qk_clip_alpha qk_clip_threshold window_size window_attn_skip_freq",
     "numerics or masking only: no tensor is added or resized")
_put(_N, "init_method_std embedding_init_method_std init_method_xavier_uniform perform_initialization "
     "use_cpu_initialization init_model_with_meta_device data_parallel_random_init seed te_rng_tracker "
     "inference_rng_tracker use_mup mup_width_mult mup_base_hidden_size mup_embedding_mult mup_output_mult "
     "mup_base_head_dim mup_attn_scale_power", "initialisation and scaling only")
_put(_N, "bias_gelu_fusion bias_swiglu_fusion bias_dropout_fusion apply_rope_fusion "
     "no_persist_layer_norm fused_residual_rmsnorm use_te_activation_func "
     "use_fused_weighted_squared_relu mla_down_proj_fusion "
     "use_grouped_gemm_for_dense_mlp use_grouped_gemm_for_shared_expert moe_use_grouped_tensor "
     "moe_single_grouped_weight moe_single_grouped_bias moe_shared_expert_glu_interleave_size "
     "moe_mlp_glu_interleave_size disable_jit_fuser "
     "disable_bf16_reduced_precision_matmul flash_attention_version batch_invariant_mode "
     "batch_invariant_backend clone_scatter_output_in_embedding",
     "kernel choice or fusion: the same tensors are kept for the backward pass")
_put(_N, "moe_router_force_load_balancing",
     "balanced routing (random router logits, for benchmarks): what training.moe_overload_factor 1.0, the default, "
     "assumes; without it give the run's routing imbalance as --moe-overload-factor (Megatron-LM has no flag for it)")
_put(_N, "moe_router_topk_scaling_factor "
     "moe_router_bias_update_rate moe_router_quantile_balancing_ema "
     "moe_input_jitter_eps moe_token_drop_policy moe_per_layer_logging "
     "moe_enable_routing_replay moe_shared_expert_overlap high_priority_a2a_comm_stream "
     "moe_router_padding_for_quantization moe_router_padding_for_fp8",
     "routing decisions and losses: routing is assumed balanced, padding adds under 32 rows per expert (under 128 "
     "with NVFP4: fp4_utils.py get_fp4_align_size)")
_put(_N, "moe_hybridep_num_blocks_permute moe_hybridep_num_blocks_unpermute moe_hybridep_num_sms_preprocessing",
     "thread blocks given to HybridEP's kernels; its buffers keep their size (but for the preprocessing scan's "
     "scratch of 8 B per block, rank of the NVLink domain and local expert: kilobytes, counted at 108 blocks)")
_put(_N, "moe_permute_fusion_into_hybridep moe_hybridep_pad_uneven_dispatch_inputs moe_ncclep_zero_copy "
     "moe_dispatch_fwd_dtype moe_combine_bwd_dtype",
     "flex-dispatcher kernel options: DeepEP sizes its buffers for 2-byte hidden states either way, and the "
     "routed rows stay the same")
_put(_N, "mtp_loss_scaling_factor mtp_detach_heads calculate_per_token_loss",
     "loss weighting and gradient flow only")
_put(_N, "tp_comm_bulk_wgrad tp_comm_bulk_dgrad tp_comm_overlap_ag tp_comm_overlap_rs tp_comm_overlap_rs_dgrad "
     "tp_comm_split_ag tp_comm_split_rs tp_comm_bootstrap_backend",
     "which overlaps run: Transformer Engine allocates all twelve userbuffers either way")
_put(_N, "overlap_grad_reduce overlap_param_gather overlap_param_gather_with_optimizer_step align_grad_reduce "
     "align_param_gather ddp_num_buckets ddp_bucket_size ddp_pad_buckets_for_high_nccl_busbw "
     "ddp_average_in_collective gradient_reduce_div_fusion overlap_p2p_comm overlap_p2p_comm_warmup_flush "
     "use_ring_exchange_p2p pipeline_model_parallel_comm_backend",
     "communication scheduling in the existing gradient and parameter buffers")
_put(_N, "distributed_backend distributed_timeout_minutes distributed_timeout_seconds_after_init local_rank "
     "lazy_mpu_init nccl_communicator_config_path use_tp_pp_dp_mapping use_gloo_process_groups use_sharp "
     "sharp_enabled_group high_priority_stream_groups flight_recorder_dump_path flight_recorder_trace_buffer_size "
     "flight_recorder_dump_on_timeout flight_recorder_include_stack_trace flight_recorder_include_only_active "
     "flight_recorder_extra_dump_on_exec fake_process_group",
     "process-group setup and debugging")
_put(_N, "megatron_fsdp_version", "Megatron-FSDP 1 is modelled; version 2 is refused")
_put(_N, "fsdp_manual_registration fsdp_db_use_persist_buf_on_alloc_fail",
     "Megatron-FSDP buffer registration and fallbacks for asymmetric units: the same buffers")
_put(_N, "disable_symmetric_registration", "how NCCL registers the user buffers: the same buffers")
_put(_N, "use_torch_optimizer_for_cpu_offload overlap_cpu_optimizer_d2h_h2d",
     "which optimizer class and streams the offloaded step uses: the same states")
_put(_N, "pin_cpu_grads pin_cpu_params", "host memory only: pinned or pageable (the host total is the same)")
_put(_N, "muon_momentum muon_scale_mode muon_coefficient_type muon_num_ns_steps muon_extra_scale_factor",
     "Muon hyper-parameters: one momentum buffer either way, and the same Newton-Schulz working set in the step")
_put(_N, "muon_use_syrk", "Muon's Triton SYRK kernel writes the same m x m bf16 Gram products as the matmuls it "
     "replaces (emerging_optimizers 0.4.0 triton_kernels tsyrk_ex: a new (m, m) output each); it needs "
     "emerging_optimizers >= 0.4.0 (with the 0.3.0 that Megatron-LM pins, TensorParallelMuon raises ValueError)")
_put(_N, "lion_beta1 lion_beta2", "only with the Lion optimizer, which is refused")
_put(_N, "weight_decay apply_wd_to_qk_layernorm clip_grad adam_beta1 adam_beta2 adam_eps no_weight_decay_cond_type "
     "lr_decay_style lr_wsd_decay_style lr_decay_iters lr_decay_samples lr_wsd_decay_iters lr_wsd_decay_samples "
     "lr_warmup_fraction lr_warmup_iters lr_warmup_samples lr_warmup_init override_opt_param_scheduler "
     "use_checkpoint_opt_param_scheduler start_weight_decay end_weight_decay weight_decay_incr_style lr warmup "
     "min_lr decoupled_lr decoupled_min_lr freeze_all_layers loss_scale initial_loss_scale min_loss_scale "
     "loss_scale_window hysteresis",
     "optimizer hyper-parameters and loss scaling: scalars")
_put(_N, "fp8_margin fp8_interval fp8_amax_history_len fp8_amax_compute_algo",
     "FP8 scaling-factor bookkeeping: a few floats per tensor")
_put(_N, "mhc_num_residual_streams mhc_sinkhorn_iterations mhc_init_gating_factor mhc_recompute_layer_num",
     "only with --enable-mhc-connections, which is refused")
_put(_N, "delay_offload_until_cuda_graph fine_grained_offloading_max_inflight_offloads",
     "when the offload copies are issued: the same tensors leave the GPU")
_put(_N, "cpu_offloading_retain_pinned_cpu_buffers", "keeps the pinned host buffers between steps: host memory only")
_put(_N, "dsa_indexer_rope_interleaved dsa_indexer_rotate_activation "
     "dsa_indexer_scoring_relu dsa_indexer_k_norm_epsilon dsa_indexer_k_norm_fp32",
     "DeepSeek sparse attention numerics (the RoPE layout, the Hadamard rotation, ReLU scoring, the key norm's "
     "epsilon and dtype): the same saved tensors")
_put(_N, "gdp_num_householder gdp_cutedsl_kernel gdp_num_chunk_states_to_recompute",
     "only with the gated-delta-product layer spec (--spec), which is refused")
_put(_N, "mamba_inference_conv_states_dtype mamba_inference_ssm_states_dtype", "inference (text generation) only")
_put(_N, "mamba_training_ssm_states_dtype", "dtype of the chunk states the Mamba-2 scan recomputes in its backward "
     "pass (the working set takes them in fp32); no saved activation changes")
_put(_N, "is_hybrid_model", "the hybrid model follows from --hybrid-layer-pattern")
_put(_N, "moe_upcycling_granularity", "only with --moe-use-upcycling, which is refused")
_put(_N, "inference_batch_times_seqlen_threshold max_tokens_to_oom output_bert_embeddings bert_embedder_type "
     "use_legacy_static_engine inference_max_requests "
     "inference_max_seq_length inference_dynamic_batching inference_dynamic_batching_buffer_size_gb "
     "inference_dynamic_batching_paused_buffer_size_gb inference_dynamic_batching_mamba_memory_ratio "
     "inference_dynamic_batching_block_size inference_dynamic_batching_max_requests "
     "inference_dynamic_batching_max_tokens inference_dynamic_batching_num_cuda_graphs "
     "inference_dynamic_batching_track_paused_request_events inference_dynamic_batching_track_generated_token_events "
     "decode_only_cuda_graphs inference_cuda_graph_all_prefills inference_cuda_graph_max_tokens "
     "inference_dynamic_batching_unified_memory_level enable_chunked_prefill num_speculative_tokens "
     "inference_dynamic_batching_enable_prefix_caching inference_dynamic_batching_prefix_caching_eviction_policy "
     "inference_dynamic_batching_prefix_caching_coordinator_policy inference_dynamic_batching_prefix_caching_routing_alpha "
     "inference_dynamic_batching_prefix_caching_mamba_gb inference_dynamic_batching_cuda_graph_mixed_prefill_count "
     "inference_dynamic_batching_cuda_graph_sizing_distribution inference_dynamic_batching_sampling_backend "
     "offset_sampling_seed_by_dp_rank inference_dynamic_batching_async_sched_mode inference_dynamic_batching_logprobs_mode "
     "inference_logging_step_interval inference_text_gen_server_logging inference_wandb_logging inference_coordinator_port "
     "inference_use_synchronous_zmq_collectives inference_disable_ep_consensus inference_shards "
     "inference_cuda_graph_scope flash_decode cache_mla_latents mlp_chunks_for_prefill symmetric_ar_type "
     "nccl_all_reduce_for_prefill inference_fuse_tp_communication inference_disable_triton_nvls_kernels "
     "inference_grouped_gemm_backend inference_moe_disable_fused_quant_kernels inference_moe_token_dispatcher_type "
     "moe_pad_experts_for_cuda_graph_inference",
     "inference (text generation) only")
_put(_N, "rl_prompts_per_eval grpo_prompts_per_step grpo_group_size rl_generation_lag rl_max_inflight_requests "
     "rl_submission_granularity rl_consumption_granularity rl_durable_rollout_bank rl_rollout_bank_dir "
     "rl_rollout_bank_max_bytes grpo_iterations grpo_clamp_eps_lower grpo_clamp_eps_upper grpo_kl_beta "
     "grpo_entropy_term_weight grpo_filter_groups_with_same_reward langrl_env_config rl_default_temperature "
     "rl_default_top_p rl_default_top_k rl_offload_optimizer_during_inference rl_kv_cache_management_mode "
     "rl_persist_cuda_graphs rl_partial_rollouts rl_inference_logprobs_is_correction "
     "rl_importance_sampling_truncation_coef rl_use_sequence_packing rl_sequence_packing_max_sequences_per_bin "
     "rl_sequence_packing_algo rl_training_cuda_graphs rl_inference_tensor_model_parallel_size "
     "rl_inference_pipeline_model_parallel_size rl_inference_expert_model_parallel_size "
     "rl_inference_expert_tensor_model_parallel_size rl_inference_model_unified_memory_level "
     "rl_offload_inference_model_weights_when_idle refit_method rl_verify_model_weights_swap rl_skip_bos_token "
     "rl_profile rl_profile_dir rl_inference_parsers",
     "only with --perform-rl-step, which is refused")
_put(_N, "rampup_batch_size step_batch_size_schedule decrease_batch_size_if_needed",
     "batch-size schedules: the peak comes at the full global batch size")
_put(_N, "train_iters train_samples exit_interval exit_duration_in_mins exit_signal_handler exit_signal "
     "exit_signal_handler_for_dataloader exit_signal_handler_for_training manual_gc manual_gc_interval "
     "manual_gc_eval iterations_to_skip check_weight_hash_across_dp_replicas_interval gpu_sniff_test_interval "
     "train_sync_interval check_for_nan_in_loss_and_grad check_for_large_grads result_rejected_tracker_filename "
     "dump_param_to_param_group_map deprecated_use_mcore_models enable_experimental config_logger_dir "
     "error_injection_rate error_injection_type rerun_mode check_for_spiky_loss",
     "run control and sanity checks")
_put(_N, "save save_params_interval save_activations_interval save_tokens_per_expert_interval "
     "save_wgrads_interval save_dgrads_interval save_retain_interval load load_main_params_from_ckpt "
     "non_persistent_save_interval non_persistent_ckpt_type non_persistent_global_ckpt_dir "
     "non_persistent_local_ckpt_dir non_persistent_local_ckpt_algo finetune pretrained_checkpoint ckpt_step "
     "use_checkpoint_args use_mp_args_from_checkpoint_args use_tokenizer_model_from_checkpoint_args "
     "exit_on_missing_checkpoint auto_detect_ckpt_format ckpt_convert_format ckpt_convert_save "
     "ckpt_convert_update_legacy_dist_opt_format ckpt_fully_parallel_save async_strategy "
     "use_persistent_ckpt_worker async_ckpt_cpu_priority async_ckpt_io_priority async_ckpt_use_cpu_shm "
     "ckpt_fully_parallel_load ckpt_fully_parallel_load_exchange_algo ckpt_fully_parallel_load_per_rank_objects "
     "ckpt_fully_parallel_save_process_group ckpt_fully_parallel_load_process_group ckpt_assume_constant_structure "
     "ckpt_pg_tensors_cache_path ckpt_pg_tensors_cache_create ckpt_load_validate_sharding_integrity "
     "strict_fsdp_dtensor_load dist_ckpt_strictness dist_ckpt_save_pre_mcore_014 dist_ckpt_optim_fully_reshardable "
     "distrib_optim_fully_reshardable_mem_efficient save_tokenizer_assets replication replication_jump "
     "replication_factor verify_integrity no_save_optim no_save_rng no_load_optim no_load_rng "
     "override_ckpt_iteration use_dist_ckpt_deprecated dist_ckpt_format_deprecated dist_ckpt_workers "
     "ckpt_fully_parallel_save_deprecated ckpt_drop_redundant_extra_state",
     "checkpoint saving and loading, outside the training step")
_put(_N, "data_path phase_transition_iterations split train_data_path valid_data_path test_data_path data_args_path "
     "per_split_data_args_path per_dataset_sequences_path dataloader_fast_cache_load dataloader_defer_npy_index_mmap "
     "data_cache_path mmap_bin_files mock_data sample_rate mask_prob short_seq_prob num_workers reset_position_ids "
     "reset_attention_mask dataloader_inter_document_masking eod_mask_loss num_dataset_builder_threads "
     "object_storage_cache_path mid_level_dataset_surplus allow_ambiguous_pad_tokens fim_data fim_rate fim_spm_rate "
     "fim_split_sample fim_fragment_rate fim_no_prefix fim_prefix_token fim_middle_token fim_suffix_token "
     "fim_pad_token fim_eod_token dataloader_type decoder_seq_length",
     "data loading on the host")
_put(_N, "vocab_file merge_file vocab_extra_ids tokenizer_model metadata_path special_tokens tiktoken_pattern "
     "tiktoken_num_special_tokens tokenizer_sentencepiece_legacy tokenizer_sentencepiece_ignore_extra_whitespaces "
     "tokenizer_hf_no_use_fast tokenizer_hf_no_include_special_tokens trust_remote_code null_tokenizer_eod_id "
     "null_tokenizer_pad_id chat_template use_gigatoken sft_tokenizer_prompt_format",
     "tokenizer files and options (give --vocab-size)")
_put(_N, "async_save", "an asynchronous save holds on the GPU what a synchronous one holds: the state dict's "
     "tensors reach pinned host memory (preload_tensors) before training resumes")
_put(_N, "start_eval_at_iter skip_train test_mode full_validation multiple_validation_sets "
     "validation_set_names", "evaluation schedule (evaluation keeps no activations for a backward pass)")
_put(_N, "log_interval log_params_norm log_throughput log_progress timing_log_level timing_log_option tensorboard_dir "
     "tensorboard_log_interval tensorboard_queue_size log_timers_to_tensorboard log_loss_scale_to_tensorboard "
     "log_validation_ppl_to_tensorboard log_memory_to_tensorboard log_memory_interval log_device_memory_used "
     "log_num_zeros_in_grad log_max_attention_logit barrier_with_L1_time log_world_size_to_tensorboard wandb_project "
     "wandb_exp_name wandb_save_dir wandb_entity logging_level log_energy moe_routing_trace_path "
     "moe_routing_trace_max_training_iters moe_routing_trace_capture_logits moe_routing_trace_capture_hidden_states "
     "moe_routing_trace_dump_weights log_straggler straggler_ctrlr_port straggler_minmax_count "
     "disable_straggler_on_startup enable_one_logger one_logger_project one_logger_run_name one_logger_async "
     "app_tag_run_name app_tag_run_version otel_enabled otel_service_name otel_span_groups "
     "run_workload_inspector_server profile profile_step_start profile_step_end use_pytorch_profiler "
     "pytorch_profiler_collect_shapes pytorch_profiler_collect_callstack pytorch_profiler_collect_chakra "
     "profile_ranks record_memory_history memory_snapshot_path record_shapes nvtx_ranges",
     "logging, tracing and profiling")
_put(_N, "adlr_autoresume adlr_autoresume_interval inprocess_restart inprocess_max_iterations "
     "inprocess_monitor_thread_interval inprocess_monitor_process_interval inprocess_progress_watchdog_interval "
     "inprocess_heartbeat_interval inprocess_soft_timeout inprocess_hard_timeout inprocess_heartbeat_timeout "
     "inprocess_barrier_timeout inprocess_completion_timeout inprocess_last_call_wait "
     "inprocess_termination_grace_time inprocess_granularity inprocess_active_world_size inprocess_empty_cuda_cache "
     "enable_ft_package calc_ft_timeouts ft_num_warmup_iters enable_msc disable_msc_deprecated fault_injector_ranks "
     "fault_injector_num_ranks fault_injector_fault_types fault_injector_fault_probabilities fault_injector_fault_delay "
     "fault_injector_delay_start_iteration fault_injector_mtti_seconds fault_injector_offset_seconds "
     "fault_injector_seed", "fault tolerance and restarts")
_put(_N, "sft", "packed SFT: each sample is one pack of --seq-length tokens (THD with cu_seqlens) and a micro-batch "
     "one stream of micro-batch x seq-length tokens, which the estimate already counts (as Bridge's offline "
     "packing); with unfused or local attention it is refused")
_put(_N, "enable_full_sharding_in_hsdp", "defined by arguments.py but read nowhere at this revision (no "
     "DistributedDataParallelConfig field of that name): HSDP's outer sharding is --outer-dp-sharding-strategy")
_put(_N, "megatron_fsdp_enable_fine_grained_param_gather", "Megatron-FSDP's per-submodule forward "
     "all-gather hooks gather whole buckets, and a bucket holds an FSDP unit's parameters of one dtype and kind "
     "(param_and_grad_buffer.py _get_parameter_groups), so the same buckets are gathered, with the same prefetch, "
     "as by the unit's own hook; the backward hooks stay per unit (they go per submodule only with "
     "--overlap-moe-expert-parallel-comm), and a recomputed submodule re-gathers a bucket the unit's backward hook "
     "holds (a separate row-wise copy only for MXFP8 weights, where Megatron-Core turns the hooks on itself)")
_put(_N, "num_classes img_h img_w num_channels patch_dim classes_fraction data_per_class_fraction data_sharding "
     "head_lr_mult vision_pretraining vision_pretraining_type vision_backbone_type swin_backbone_type mask_type "
     "mask_factor iter_per_epoch dino_local_img_size dino_local_crops_number dino_head_hidden_size "
     "dino_bottleneck_size dino_freeze_last_layer dino_norm_last_layer dino_warmup_teacher_temp dino_teacher_temp "
     "dino_warmup_teacher_temp_epochs ict_head_size biencoder_projection_dim biencoder_shared_query_context_model "
     "ict_load bert_load titles_data_path query_in_block_prob use_one_sent_docs evidence_data_path "
     "retriever_report_topk_accuracies retriever_score_scaling block_data_path embedding_path indexer_batch_size "
     "indexer_log_interval bert_binary_head eval_global_batch_size",
     "vision, BERT and retrieval scripts or evaluation only; not read by pretrain_gpt.py's training step")

# ---------------------------------------------------------------------------------------- refused
_R = REFUSED
_put(_R, "logits_save_top_k logits_save_top_p logits_save_top_p_min_k logits_save_dir logits_save_dtype",
     "saving the teacher's top-K log-probabilities (Megatron-LM @ d98e8a64 : megatron/training/distillation/"
     "logits_saver.py, attached on the last pipeline stage by training.py) is not modelled: its forward hook makes an "
     "fp32 copy of each micro-batch's logits for the top-K and log-sum-exp, keeps every micro-batch's top-K values "
     "and indices on the GPU until the iteration's last micro-batch, and replaces the language-model loss with a zero "
     "loss over the logits, so the loss's working set and saved tensors are not the cross entropy's")
_put(_R, "muon_scalar_optimizer", "a scalar optimizer other than Adam for Muon's non-matrix parameters is not "
     "modelled")
_put(_M, "tensor_parallel_num_weight_shards expert_tensor_parallel_num_weight_shards",
     "generalised tensor parallelism (GTP_remat = shards / TP, or / ETP for the routed experts): each rank keeps "
     "1/GTP_remat of every TP-local linear weight's rows with their gradients, the distributed optimizer shards over "
     "the replicate ranks (DP x CP / GTP_remat), and the all-gathered weights, the whole weight gradients and the "
     "reduce-scatter outputs live in buffers GTP keeps for the run (estimator/memory/features/gtp.py); refused with "
     "FP8/NVFP4 weights, CUDA graphs, recomputed linears, MTP, FSDP, PEFT and layers other than attention, Mamba, MLP "
     "and MoE")
_put(_M, "gtp_remat_opt_in_modules", "moe_latent_proj shards the MoE latent projections over GTP_remat too "
     "(estimator/memory/features/gtp.py)")
_put(_M, "gtp_remat_reduce_scatter_with_fp32_accumulation", "GTP's weight-gradient reduce-scatter as an all-to-all "
     "with fp32 sums on groups of more than 2 ranks: a second unsharded buffer per in-flight reduce-scatter from GTP's "
     "pool (megatron/core/tensor_parallel/generalized_tensor_parallelism.py _reduce_scatter_fp32_accum)")
_put(_M, "gtp_remat_nccl_ub gtp_expert_remat_nccl_ub", "GTP's weight-gradient send buffers from an NCCL-registered "
     "pool of their own, padded to the gathered shape, instead of GTP's plain pool (gtp_symmetric_memory.py)")
_put(_R, "enable_cuda_graph", "the deprecated switch for Megatron-Core's local CUDA graphs (CudaGraphManager), "
     "which are not modelled")
_put(_M, "logit_dtype", "the logits' dtype (--output-logit-dtype): fp32 logits under bf16 weights are kept in place "
     "by the loss (4 B per logit, no bf16 copy) and their gradient is cast to bf16 in the output layer's backward "
     "(estimator/memory/loss.py)")
_put(_M, "fp32_residual_connection", "the fp32 residual stream (precision.fp32_residual_connection): Transformer "
     "Engine's norms save bf16 copies of the fp32 input, the same bytes; full-recompute checkpoints (4 B per element), "
     "a later stage's received input (fp32, beside its first norm's copy) and the backward's residual gradient grow "
     "(estimator/memory/activations.py; refused with the local layers, MTP, offloading, CUDA graphs and the rest the "
     "rule names)")
# distill29: offline distillation from cached teacher logits (Megatron-LM @ d98e8a64 :
# megatron/training/distillation/cached_logits_loss.py, pretrain_gpt.py loss_func).
_put(_M, "logits_load_dir", "offline distillation from cached teacher logits: the KL loss on the last stage "
     "(training.distillation_cached_logits) keeps exp(logits) and the fp32 log-softmax (8 B per logit element) and "
     "the teacher's top-K terms per token until its backward, the captured logits and their fp32 copy while it runs; "
     "the files' top-K is the teacher run's --logits-save-top-k, given as training.distillation_top_k "
     "(estimator/memory/loss.py)")
_put(_N, "logits_load_kd_loss_alpha", "only weights the two losses ((1 - alpha) LM + alpha KD): both are computed, "
     "with their saved tensors, whatever alpha is")
_put(_N, "logits_load_decode_threads logits_load_prefetch_factor logits_load_msc_prefetch_depth",
     "the teacher files' reader: decode threads, the DataLoader's prefetched iterations (pinned host memory) and "
     "the remote shards fetched ahead (host cache); one micro-batch's top-K reaches the GPU when the loss runs")
_put(_N, "logits_load_ignore_errors", "a failed KL loss falls back to the LM loss (less memory, not more); the "
     "estimate is the run's when it does not fail")
_put(_M, "mlp_chunks_for_training", "a dense MLP run on pieces of the sequence: the same saved activations, fc1's "
     "output gradient only for the largest piece in the backward working set (estimator/model/layers/mlp.py); "
     "refused with MoE layers, block-scaled FP8, NVFP4, CUDA graphs, offloading and PEFT")
_put(_M, "moe_apply_probs_on_input", "the routed experts' input scaled by the top-1 probabilities before fc1: the "
     "product keeps the unscaled input rows, one more copy (estimator/model/layers/moe.py probs_on_input)")
_put(_M, "ep_overlap_early_attn_memory_release", "the combined 1F1B step with the backward layer's attention "
     "backward before the forward layer's MLP: that MLP's moment sits beside the backward layer's input gradient "
     "instead of its attention activations (estimator/memory/features/schedule.py; refused with flex and "
     "delay_wgrad_compute)")
_put(_M, "fp8_output_proj", "the output layer as Transformer Engine's Linear under MXFP8 (Megatron-Core's "
     "TELMHeadColumnParallelLinear): the vocabulary-sized weight's MXFP8 copies and scales, its MXFP8 saved input, "
     "the quantized logits gradient (estimator/memory/features/fp8_output.py)")
_put(_R, "fp8_quantizer_factory", "custom quantizer factories are not modelled")
_put(_M, "te_precision_config_file", "a per-module quantisation recipe (the YAML file, read when available, becomes "
     "Megatron-Core's quant_recipe: glob matchers give each matched Transformer Engine linear its own precision, "
     "bf16, FP8 or NVFP4): precision.quant_recipe (estimator/config/quant_recipe.py); what it cannot model is refused "
     "by name")
_put(_R, "fp4_quantizer_factory", "custom per-module FP4 quantisation is not modelled")
_put(_R, "use_kitchen_attention kitchen_attention_backend kitchen_config_file kitchen_recipe_number",
     "kitchen quantisation is not modelled")
_put(_R, "enable_mhc_connections", "pretrain_gpt.py cannot build a model with Megatron-LM's multi-stream (mHC) "
     "residual connections at this revision: no layer spec in megatron/core/models builds "
     "HyperConnectionTransformerLayer (only Megatron-Core's unit tests assemble one), so the GPT layer spec's "
     "TransformerLayer raises ValueError ('does not implement mHC residual streams'), and a custom --spec is "
     "refused; Megatron-Core main's mHC also rejects pipeline parallelism, MTP, MoE layers, full recompute and fp32 "
     "residuals. The estimator models the dev branch's mHC (model.enable_hyper_connections, which Megatron-Bridge's "
     "DeepSeek-V4 sets)")
_put(_R, "moe_router_force_biased", "a random bias on the router's logits (for benchmarks) makes a routing imbalance "
     "that depends on the draw, so it is not modelled from the flag: remove it and give the overload factor it "
     "makes (moe/max_overload_factor where Megatron-Core logs it) as --moe-overload-factor")
_put(_R, "moe_use_upcycling", "upcycling a dense checkpoint builds two models; not modelled")
_put(_M, "max_seqlen_per_dp_cp_rank hybrid_context_parallel", "dynamic context parallelism "
     "(pipeline_parallel/hybrid_cp_schedule.py): each sequence runs alone, forward then backward, over "
     "2^ceil(log2(L / max_seqlen_per_dp_cp_rank)) data x context-parallel ranks; the estimate is the busiest "
     "rank's largest shard, min(seq_length, max_seqlen_per_dp_cp_rank) tokens of one sequence under the largest "
     "group such a shard runs in, plus a communicator per power-of-two group (estimator/model/resolve.py)")
_put(_R, "spec", "a custom layer spec is not modelled")
_put(_R, "encoder_num_layers decoder_num_layers", "encoder-decoder models are not modelled (use --num-layers)")
_put(_R, "perform_rl_step", "reinforcement-learning steps (generation and training in one job) are not modelled")
_put(_R, "yaml_cfg", "a YAML configuration replaces the flags; paste the flags it holds instead")
_put(_R, "batch_size", "--batch-size is no longer valid in Megatron-LM; use --micro-batch-size")
_put(_R, "model_parallel_size", "--model-parallel-size is no longer valid in Megatron-LM; use "
     "--tensor-model-parallel-size")
_put(_R, "checkpoint_activations", "--checkpoint-activations is no longer valid in Megatron-LM; use "
     "--recompute-activations or --recompute-granularity")
