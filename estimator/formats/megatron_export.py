"""A configuration as Megatron-LM ``pretrain_gpt.py`` flags (the inverse of :mod:`estimator.formats.megatron_args`).

Derived values are written out so that Megatron-LM's own defaults cannot change the meaning; a setting
that has no ``pretrain_gpt.py`` flag raises :class:`~estimator.config.errors.UnsupportedError`.
"""

from __future__ import annotations

from ..config.errors import UnsupportedError
from ..config.load import load_config
from ..config.schema import field_specs
from ..memory.states import grad_reduce_in_fp32
from ..model.resolve import resolve

__all__ = ["CP_TYPES", "pattern_expression", "to_megatron_args"]

#: Context-parallel communication types as Transformer Engine spells them -> the schema's names.
CP_TYPES = {"all_gather": "allgather"}


def pattern_expression(pattern) -> str:
    """A 0/1 layer pattern as Megatron's run-length expression: ``[0,0,0,1,1]`` -> ``([0]*3+[1]*2)``."""
    runs: list[list[int]] = []
    for x in pattern:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([int(x), 1])
    return "(" + "+".join(f"[{v}]*{n}" if n > 1 else f"[{v}]" for v, n in runs) + ")"


def _num(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def to_megatron_args(config) -> list[str]:
    """The ``pretrain_gpt.py`` flags of a configuration (anything :func:`estimator.load_config` takes).

    Derived values are written out (ffn size, sequence length, max positions, ...) so that Megatron-LM's
    own defaults cannot change the meaning. The world size is not a flag (``torchrun --nproc-per-node``
    x ``--nnodes``); the tokenizer flags stay the launch script's. Raises :class:`UnsupportedError` for a
    setting with no ``pretrain_gpt.py`` flag.
    """
    cfg = load_config(config)
    r = resolve(cfg)
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    for name, on in (("experimental_attention_variant", m.experimental_attention_variant == "dsv4_hybrid"),
                     ("enable_hyper_connections", m.enable_hyper_connections),
                     ("moe_n_hash_layers", m.moe_n_hash_layers > 0)):
        if on:
            raise UnsupportedError(f"model.{name} = {getattr(m, name)} (DeepSeek-V4) has no pretrain_gpt.py flag at "
                                   "the pinned Megatron-LM revision: Megatron-Core builds DeepSeek-V4 on its dev "
                                   "branch only, where Megatron-Bridge's DeepSeek-V4 recipes set it")
    if m.experimental_attention_variant == "kda":
        raise UnsupportedError("model.experimental_attention_variant = kda (Kimi K3) has no pretrain_gpt.py flag: "
                               "Megatron-Bridge builds Kimi K3's layers with its own spec (models/kimi/"
                               "kimi_k3_spec.py), which Megatron-LM does not have")
    if m.model_kind == "wan":
        raise UnsupportedError("model.model_kind = wan has no pretrain_gpt.py flag: Megatron-LM's pretrain_gpt.py "
                               "builds a GPT model; Wan is Megatron-Bridge's WanModel (its Wan recipes: use the "
                               "Megatron-Bridge overrides export)")
    if m.vision_num_layers is not None:
        raise UnsupportedError(f"model.vision_num_layers (a {m.vision_model_type} vision tower) has no "
                               "pretrain_gpt.py flag: Megatron-LM's pretrain_gpt.py builds a GPT model without one; "
                               "the vision-language models are Megatron-Bridge's (its VL recipes: use the Megatron-"
                               "Bridge overrides export), which this export does not write")
    if tr.freeze_mtp:
        raise UnsupportedError("training.freeze_mtp (Megatron-Bridge's freeze_mtp_model, EXAONE 4.5's provider) has "
                               "no pretrain_gpt.py flag: Megatron-LM trains every MTP parameter (use the Megatron-"
                               "Bridge overrides export)")
    out: list[str] = []

    def add(flag, value=None):
        out.append(flag)
        if value is not None:
            out.append(value if isinstance(value, str) else _num(value))

    add("--num-layers", m.num_layers)
    add("--hidden-size", m.hidden_size)
    add("--ffn-hidden-size", r.f)
    add("--num-attention-heads", m.num_attention_heads)
    if not m.multi_latent_attention:
        if m.kv_channels is not None:
            add("--kv-channels", m.kv_channels)
        if r.g != r.a:
            add("--group-query-attention")
            add("--num-query-groups", r.g)
    seq = tr.seq_length or m.max_position_embeddings     # r.s is a sub-sample's with hybrid context parallelism
    add("--seq-length", seq)
    add("--max-position-embeddings", m.max_position_embeddings or seq)
    add("--position-embedding-type", m.position_embedding_type)
    add("--normalization", m.normalization)
    add("--norm-epsilon", m.layernorm_epsilon)
    if m.activation_func == "swiglu" and m.gated_linear_unit:
        add("--swiglu")
    elif m.activation_func == "squared_relu" and not m.gated_linear_unit:
        add("--squared-relu")
    elif m.activation_func == "quick_gelu" and m.gated_linear_unit:
        add("--quick-geglu")
    elif not (m.activation_func == "gelu" and not m.gated_linear_unit):
        raise UnsupportedError(f"model.activation_func {m.activation_func} (gated: {m.gated_linear_unit}) has no "
                               "pretrain_gpt.py flag; Megatron-LM offers gelu (default), --swiglu, --squared-relu "
                               "and --quick-geglu")
    if not m.add_bias_linear:
        add("--disable-bias-linear")
    for name in ("add_qkv_bias", "qk_layernorm", "untie_embeddings_and_output_weights"):
        if getattr(m, name):
            add(_flag(name))
    for name in ("post_layernorm", "final_logit_softcapping", "global_attention_freq"):
        if getattr(m, name):
            raise UnsupportedError(f"model.{name} (Megatron-Bridge's Gemma spec) has no pretrain_gpt.py flag")
    for name, on in (("v_channels", m.v_channels is not None),
                     ("global_softmax_type", m.global_softmax_type is not None)):
        if on:
            raise UnsupportedError(f"model.{name} (Megatron-Bridge's MiMo-V2-Flash spec) has no pretrain_gpt.py "
                                   "flag")
    if m.heterogeneous_layers_config is not None:
        # Megatron-LM @ d98e8a64 : megatron/training/arguments.py validate_model_config_args_from_heterogeneous_config
        # reads these keys of the JSON besides block_configs (the Hugging Face config.json's): a text without them
        # (the compact form the Hugging Face importer writes) works in Megatron-Core, not in pretrain_gpt.py.
        import json
        keys = ("hidden_act", "num_hidden_layers", "hidden_size", "num_attention_heads", "tie_word_embeddings",
                "rope_theta", "rope_scaling")
        try:
            data = json.loads(m.heterogeneous_layers_config)
        except ValueError:
            data = None
        missing = [k for k in keys if not isinstance(data, dict) or k not in data]
        if missing:
            raise UnsupportedError("model.heterogeneous_layers_config lacks the keys pretrain_gpt.py checks against "
                                   f"its flags ({', '.join(missing)}: Megatron-LM's arguments.py "
                                   "validate_model_config_args_from_heterogeneous_config): pass the model's own "
                                   "config.json with --heterogeneous-layers-config-path, or give its text as "
                                   "heterogeneous_layers_config")
        add("--heterogeneous-layers-config-encoded-json", m.heterogeneous_layers_config)
    if not m.pre_layernorm or m.qk_layernorm_full_dim or m.mtp_dense_mlp:
        name = ("pre_layernorm" if not m.pre_layernorm else "qk_layernorm_full_dim" if m.qk_layernorm_full_dim
                else "mtp_dense_mlp")
        raise UnsupportedError(f"model.{name} (a Megatron-Bridge layer spec: OLMo 2, MiniMax-M2, K-EXAONE) has no "
                               "pretrain_gpt.py flag")
    if m.parallel_mamba_attention or not m.mamba_gated_norm:
        name = "parallel_mamba_attention" if m.parallel_mamba_attention else "mamba_gated_norm"
        raise UnsupportedError(f"model.{name} (Megatron-Bridge's Falcon-H1 model) has no pretrain_gpt.py or "
                               "pretrain_mamba.py flag")
    if m.softmax_type != "vanilla":
        add("--softmax-type", m.softmax_type)
    if m.attention_output_gate:
        add("--attention-output-gate")
    if m.qk_l2_norm:
        add("--qk-l2-norm")
    add("--hidden-dropout", m.hidden_dropout)
    add("--attention-dropout", m.attention_dropout)
    add("--vocab-size", m.vocab_size)
    add("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by)
    if m.multi_latent_attention:
        add("--multi-latent-attention")
        if m.q_lora_rank is not None:
            add("--q-lora-rank", m.q_lora_rank)
        add("--kv-lora-rank", r.kv_lora)
        add("--qk-head-dim", r.qk_dim)
        add("--qk-pos-emb-head-dim", r.rope_dim)
        add("--v-head-dim", r.v_dim)
    if m.num_experts is not None:
        add("--num-experts", m.num_experts)
        add("--moe-router-topk", r.k)
        add("--moe-ffn-hidden-size", r.fm)
        if m.moe_shared_expert_intermediate_size:
            add("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size)
        freq = m.moe_layer_freq
        if isinstance(freq, tuple):
            add("--moe-layer-freq", pattern_expression(freq))
        elif freq not in (None, 1):
            add("--moe-layer-freq", freq)
        for name in ("moe_shared_expert_gate", "moe_router_enable_expert_bias", "moe_pad_expert_input_to_capacity",
                     "moe_grouped_gemm", "moe_apply_probs_on_input"):
            if getattr(m, name):
                add(_flag(name))
        add("--moe-token-dispatcher-type", m.moe_token_dispatcher_type)
        if m.moe_expert_capacity_factor is not None:
            add("--moe-expert-capacity-factor", m.moe_expert_capacity_factor)
        if m.moe_latent_size is not None:
            add("--moe-latent-size", m.moe_latent_size)
    if m.hybrid_layer_pattern is not None:
        # (pretrain_mamba.py / the hybrid model provider; the pattern's MTP parts set the MTP layers)
        add("--hybrid-layer-pattern", m.hybrid_layer_pattern)
        for name in ("mamba_state_dim", "mamba_head_dim", "mamba_num_groups"):
            add(_flag(name), getattr(m, name))
        if m.mamba_num_heads is not None:
            add("--mamba-num-heads", m.mamba_num_heads)
    elif m.mtp_num_layers:
        add("--mtp-num-layers", m.mtp_num_layers)
    if m.mtp_use_repeated_layer:
        add("--mtp-use-repeated-layer")
    gdn = m.experimental_attention_variant in ("gdn", "gated_delta_net")
    if gdn:
        add("--experimental-attention-variant", "gdn")
        freq = m.linear_attention_freq
        add("--linear-attention-freq", pattern_expression(freq) if isinstance(freq, tuple) else freq)
    elif m.experimental_attention_variant == "dsa":
        add("--experimental-attention-variant", "dsa")
        for name in ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk"):
            add(_flag(name), getattr(m, name))
        if m.dsa_indexer_loss_coeff:
            add("--dsa-indexer-loss-coeff", m.dsa_indexer_loss_coeff)
        if m.dsa_indexer_topk_freq > 1:
            add("--dsa-indexer-topk-freq", m.dsa_indexer_topk_freq)
            add("--dsa-indexer-skip-topk-offset", m.dsa_indexer_skip_topk_offset)
        if m.dsa_indexer_use_sparse_loss:
            add("--dsa-indexer-use-sparse-loss")
        if m.dsa_kernel_backend != "none":
            add("--dsa-kernel-backend", m.dsa_kernel_backend)
    if gdn or (m.hybrid_layer_pattern and "G" in m.hybrid_layer_pattern):
        for name in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                     "linear_num_value_heads"):
            add(_flag(name), getattr(m, name))

    add("--tensor-model-parallel-size", r.t)
    add("--pipeline-model-parallel-size", r.p)
    if par.pipeline_model_parallel_layout is not None:
        add("--pipeline-model-parallel-layout", par.pipeline_model_parallel_layout)   # it sets VPP itself
    elif r.v > 1:
        add("--num-virtual-stages-per-pipeline-rank", r.v)
    for name in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"):
        if getattr(par, name) is not None:
            add(_flag(name), getattr(par, name))
    for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(par, name):
            add(_flag(name))
    if par.microbatch_group_size_per_vp_stage is not None:
        add(_flag("microbatch_group_size_per_vp_stage"), par.microbatch_group_size_per_vp_stage)
    if par.context_parallel_size > 1 or par.hybrid_context_parallel:
        if par.context_parallel_size > 1:
            add("--context-parallel-size", par.context_parallel_size)
        add("--cp-comm-type", {v: k for k, v in CP_TYPES.items()}.get(par.cp_comm_type, par.cp_comm_type))
        if par.hierarchical_context_parallel_sizes:
            out.extend(["--hierarchical-context-parallel-sizes", *map(str, par.hierarchical_context_parallel_sizes)])
    if m.num_experts is not None:
        add("--expert-model-parallel-size", r.ep)
        add("--expert-tensor-parallel-size", r.etp)

    add("--micro-batch-size", tr.micro_batch_size)
    if tr.global_batch_size is not None:
        add("--global-batch-size", tr.global_batch_size)
    if tr.use_distributed_optimizer:
        add("--use-distributed-optimizer")
    if tr.sequence_parallel:
        add("--sequence-parallel")
    if tr.recompute_granularity == "full":
        add("--recompute-granularity", "full")
        add("--recompute-method", tr.recompute_method or "uniform")
        add("--recompute-num-layers", 1 if tr.recompute_num_layers is None else tr.recompute_num_layers)
        if tr.distribute_saved_activations:
            add("--distribute-saved-activations")
    elif tr.recompute_granularity == "selective" and tr.recompute_modules == ():
        pass    # selective recompute of no module recomputes nothing; --recompute-modules takes at least one
    elif tr.recompute_granularity == "selective":
        add("--recompute-granularity", "selective")
        if tr.recompute_modules is not None:
            out.extend(["--recompute-modules", *tr.recompute_modules])
    if tr.attention_backend != "auto":
        add("--attention-backend", tr.attention_backend)
    if tr.cross_entropy_loss_fusion:
        add("--cross-entropy-loss-fusion")
        add("--cross-entropy-fusion-impl", tr.cross_entropy_fusion_impl)
    if tr.transformer_impl != "transformer_engine":
        add("--transformer-impl", tr.transformer_impl)
    if not tr.gradient_accumulation_fusion:
        add("--no-gradient-accumulation-fusion")
    if not tr.masked_softmax_fusion:
        add("--no-masked-softmax-fusion")
    if not tr.create_attention_mask_in_dataloader:
        add("--no-create-attention-mask-in-dataloader")
    if not m.use_mamba_mem_eff_path:
        add("--disable-mamba-mem-eff-path")
    for name in ("overlap_grad_reduce", "overlap_param_gather"):
        if getattr(tr, name):
            add(_flag(name))
    if tr.mlp_chunks_for_training > 1:
        add("--mlp-chunks-for-training", tr.mlp_chunks_for_training)

    if pr.params_dtype != "fp32":
        add("--" + pr.params_dtype)
    if pr.fp8:
        add("--fp8-format", "hybrid")
        add("--fp8-recipe", pr.fp8_recipe or "delayed")
        if pr.fp8_param_gather:
            add("--fp8-param-gather")
        if pr.reuse_grad_buf_for_mxfp8_param_ag and not par.use_megatron_fsdp:
            add("--reuse-grad-buf-for-mxfp8-param-ag")
    if pr.fp4:
        add("--fp4-format", "e2m1")
        add("--fp4-recipe", pr.fp4_recipe or "nvfp4")
        if pr.fp4_param_gather:
            add("--fp4-param-gather")
    if pr.logit_dtype is not None:
        add("--output-logit-dtype", pr.logit_dtype)
    if pr.fp32_residual_connection:
        add("--fp32-residual-connection")
    fp32_grads = grad_reduce_in_fp32(pr)
    if pr.params_dtype == "bf16" and fp32_grads and pr.main_grads_dtype == "bf16":
        raise UnsupportedError("an fp32 gradient buffer with main_grads_dtype bf16 has no pretrain_gpt.py flags: "
                               "Megatron-LM refuses --accumulate-allreduce-grads-in-fp32 with --main-grads-dtype "
                               "bf16 (Megatron-Bridge sets them independently)")
    if pr.params_dtype == "bf16" and not fp32_grads:
        add("--grad-reduce-in-bf16")
    elif pr.params_dtype == "fp16" and fp32_grads:
        add("--accumulate-allreduce-grads-in-fp32")
    if pr.use_precision_aware_optimizer:
        if not pr.store_param_remainders and pr.params_dtype == "bf16" and pr.main_params_dtype == "fp32":
            raise UnsupportedError("precision.store_param_remainders false has no pretrain_gpt.py flag (Megatron-"
                                   "LM always uses Megatron-Core's default, true)")
        add("--use-precision-aware-optimizer")
        for name in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            add(_flag(name), getattr(pr, name))
    _feature_args(cfg, add, out)
    return out


#: Recipe-feature fields written as "--flag value" (or a bare switch for booleans) when not at their default.
_FEATURE_FIELDS = (
    ("model", "moe_router_dtype"), ("model", "moe_flex_dispatcher_backend"), ("model", "moe_flex_dispatcher_num_sms"),
    ("model", "moe_router_score_function"), ("model", "moe_router_pre_softmax"), ("model", "moe_router_num_groups"),
    ("model", "moe_router_group_topk"), ("model", "moe_router_load_balancing_type"), ("model", "moe_aux_loss_coeff"),
    ("model", "moe_z_loss_coeff"), ("model", "moe_router_fusion"), ("model", "moe_permute_fusion"),
    ("model", "moe_expert_rank_capacity_factor"), ("training", "use_transformer_engine_op_fuser"),
    ("training", "moe_paged_stash"), ("training", "moe_paged_stash_page_size"),
    ("training", "moe_paged_stash_buffer_size_factor_cuda"), ("training", "moe_paged_stash_buffer_size_factor_cpu"),
    ("parallelism", "hybrid_context_parallel"), ("parallelism", "max_seqlen_per_dp_cp_rank"),
    ("parallelism", "use_megatron_fsdp"), ("parallelism", "data_parallel_sharding_strategy"),
    ("parallelism", "outer_dp_sharding_strategy"), ("parallelism", "fsdp_double_buffer"),
    ("parallelism", "suggested_communication_unit_size"), ("parallelism", "use_torch_fsdp2"),
    ("parallelism", "num_distributed_optimizer_instances"), ("parallelism", "tp_comm_overlap"),
    ("parallelism", "nccl_ub"), ("parallelism", "create_all_gather_group"), ("parallelism", "keep_fp8_transpose_cache"),
    ("parallelism", "reduce_scatter_with_fp32_accumulation"), ("precision", "megatron_fsdp_main_params_dtype"),
    ("precision", "megatron_fsdp_main_grads_dtype"), ("precision", "megatron_fsdp_grad_comm_dtype"),
    ("training", "optimizer"), ("training", "sgd_momentum"),
    ("training", "optimizer_cpu_offload"), ("training", "optimizer_offload_fraction"),
    ("training", "cpu_offloading_num_layers"), ("training", "fine_grained_activation_offloading"),
    ("training", "offload_modules"), ("training", "min_offloaded_tensor_size"),
    ("training", "activation_offload_fraction"), ("training", "delta_offload_bytes_across_pp_ranks"),
    ("training", "cuda_graph_impl"),
    ("training", "cuda_graph_modules"), ("training", "cuda_graph_warmup_steps"), ("training", "optimizer_cuda_graph"),
    ("training", "overlap_moe_expert_parallel_comm"), ("training", "delay_wgrad_compute"),
    ("training", "ep_overlap_early_attn_memory_release"),
    ("training", "overlap_dispatch_backward_with_experts_wgrad"),
    ("training", "deterministic_mode"),
    ("training", "empty_unused_memory_level"),
    ("training", "eval_interval"), ("training", "eval_iters"), ("training", "eval_micro_batch_size"), ("training", "save_interval"), ("training", "ckpt_format"),
    ("training", "defer_embedding_wgrad_compute"), ("training", "wgrad_deferral_limit"),
    ("precision", "first_last_layers_bf16"), ("precision", "num_layers_at_start_in_bf16"),
    ("precision", "num_layers_at_end_in_bf16"),
)


def _feature_args(cfg, add, out: list) -> None:
    """The flags of the recipe features (FSDP, offloading, CUDA graphs, optimizers, ...)."""
    tr, par, pr = cfg.training, cfg.parallelism, cfg.precision
    if tr.peft is not None:
        raise UnsupportedError("training.peft has no pretrain_gpt.py flag: LoRA and DoRA are Megatron-Bridge "
                               "settings (peft: lora|dora in the recipe)")
    if par.tp_comm_overlap_cfg is not None and par.tp_comm_overlap:
        raise UnsupportedError("parallelism.tp_comm_overlap_cfg has no pretrain_gpt.py value: Megatron-LM reads the "
                               "userbuffer configuration from a YAML file (--tp-comm-overlap-cfg PATH); write the "
                               "GEMMs' settings to a file and add the flag")
    if pr.quant_recipe is not None:
        raise UnsupportedError("precision.quant_recipe has no pretrain_gpt.py value: Megatron-LM reads the per-module "
                               "recipe from a YAML file (--te-precision-config-file PATH); write the rules as its "
                               "configs and matchers to a file and add the flag")
    if cfg.training.transformer_engine_full_layer_spec:
        raise UnsupportedError("training.transformer_engine_full_layer_spec has no pretrain_gpt.py flag (Megatron-"
                               "Bridge's model.use_transformer_engine_full_layer_spec)")
    if tr.distillation_cached_logits:
        # distill29: the directory of the teacher's files is not part of the configuration
        raise UnsupportedError("training.distillation_cached_logits has no pretrain_gpt.py value: Megatron-LM reads "
                               "the cached teacher logits from a directory (--logits-load-dir PATH, written by a run "
                               f"with --logits-save-top-k {tr.distillation_top_k}); add the flag with the path")
    if par.megatron_fsdp_cuda_graph_mode:
        raise UnsupportedError("parallelism.megatron_fsdp_cuda_graph_mode has no pretrain_gpt.py flag (a Megatron-Core "
                               "DDP field Megatron-Bridge sets: ddp.megatron_fsdp_cuda_graph_mode)")
    if pr.disable_parameter_transpose_cache:
        raise UnsupportedError("precision.disable_parameter_transpose_cache has no pretrain_gpt.py flag (a "
                               "Megatron-Core TransformerConfig field Megatron-Bridge sets)")
    specs = {(s.section, s.name): s for s in field_specs()}
    for sec, name in _FEATURE_FIELDS:
        spec, value = specs[(sec, name)], getattr(getattr(cfg, sec), name)
        if value == spec.default or value is None:
            continue
        if spec.type == "bool":
            add(spec.flag)
        elif spec.type == "str_list":
            out.extend([spec.flag, *value])
        else:
            add(spec.flag, value)
    if par.fp32_local_grad_accumulation:
        add("--ddp-param-name-patterns-for-fp32-local-accumulation", "all")
    if par.use_torch_fsdp2 and not par.torch_fsdp2_reshard_after_forward:
        add("--torch-fsdp2-no-reshard-after-forward")
    if not tr.use_layer_wise_param_layout:
        add("--no-use-layer-wise-param-layout")
    if tr.optimizer == "muon":
        if tr.muon_fp32_matmul_prec == "highest":
            raise UnsupportedError("training.muon_fp32_matmul_prec highest has no pretrain_gpt.py value: Megatron-LM's "
                                   "--muon-fp32-matmul-prec takes low, medium or high (high keeps the same fp32 "
                                   "iterates); highest is a Megatron-Bridge setting")
        if tr.muon_fp32_matmul_prec != "medium":
            add("--muon-fp32-matmul-prec", tr.muon_fp32_matmul_prec)
        if tr.muon_tp_mode != "duplicated":
            add("--muon-tp-mode", tr.muon_tp_mode)
        if tr.muon_nesterov:
            add("--muon-nesterov")
        if not tr.muon_split_qkv:
            add("--muon-no-split-qkv")


def _flag(name: str) -> str:
    return next(s.flag for s in field_specs() if s.name == name)
