"""Cross-field rules of the recipe features, as Megatron-LM (``megatron/training/arguments.py``), Megatron-Core
(``TransformerConfig.__post_init__``, ``DistributedDataParallelConfig``) and Megatron-Bridge enforce them, plus
the combinations the estimator does not model (refused by name rather than estimated wrongly)."""

from __future__ import annotations

from . import tp_overlap
from .derived import compute_capability, is_amd, virtual_stages
from .errors import Problem
from .limits import (DEEPEP_GROUP_SIZES, HYBRIDEP_MAX_DOMAINS, HYBRIDEP_MAX_RDMA_TOKENS, hybridep_domains,
                     hybridep_tokens)

__all__ = ["feature_problems"]


def feature_problems(cfg) -> list[Problem]:
    """Every rule broken by the features of a configuration."""
    P: list[Problem] = []
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    t, p, ep, cp = (par.tensor_model_parallel_size, par.pipeline_model_parallel_size,
                    par.expert_model_parallel_size, par.context_parallel_size)
    etp = par.expert_tensor_parallel_size or t
    ws = tr.world_size
    moe = m.num_experts is not None
    dp = ws // (t * p * cp) if ws % (t * p * cp) == 0 else None
    edp = ws // (etp * ep * p) if moe and ws % (etp * ep * p) == 0 else None

    def add(field, value, msg):
        P.append(Problem(field, value, msg))

    def only_with(field, value, default, what):
        if value != default:
            add(field, list(value) if isinstance(value, tuple) else value, f"applies only with {what}")

    fsdp = par.use_megatron_fsdp or par.use_torch_fsdp2
    # Layers other than attention + MLP / MoE (estimator/model/layers): the features below name the tensors of
    # attention and MLP layers only (Transformer Engine's per-layer CUDA graphs also those of Mamba layers).
    other_layers = m.hybrid_layer_pattern or m.experimental_attention_variant
    if other_layers:
        for field, value, on in (("training.peft", tr.peft, tr.peft is not None),
                                 ("training.fine_grained_activation_offloading", True,
                                  tr.fine_grained_activation_offloading)):
            if on:
                add(field, value, "not modelled for hybrid (Mamba), linear-attention (gated delta net) or DeepSeek "
                    "sparse attention layers yet: the estimator names the saved tensors of attention and MLP layers "
                    "only")
        if tr.cuda_graph_impl == "full_iteration":
            add("training.cuda_graph_impl", "full_iteration", "the whole-iteration CUDA graph is not modelled for "
                "hybrid (Mamba) or linear-attention (gated delta net) models yet (its model was checked on "
                "attention + MLP runs only); transformer_engine per-layer graphs of Mamba and attention layers are")
    # FSDP ----------------------------------------------------------------------------------------
    if par.use_megatron_fsdp and par.use_torch_fsdp2:
        add("parallelism.use_torch_fsdp2", True, "use_megatron_fsdp and use_torch_fsdp2 exclude each other")
    if par.use_megatron_fsdp:
        if not tr.use_distributed_optimizer:
            add("training.use_distributed_optimizer", False, "Megatron-FSDP (v1) runs with the distributed optimizer; "
                "set it to true (Megatron-LM turns it on)")
        if tr.optimizer not in ("adam", "sgd"):
            add("training.optimizer", tr.optimizer, "Megatron-FSDP supports only adam and sgd")
        if par.outer_dp_sharding_strategy == "optim" and par.data_parallel_sharding_strategy != "optim_grads_params":
            add("parallelism.outer_dp_sharding_strategy", "optim", "needs data_parallel_sharding_strategy: "
                "optim_grads_params")
    else:
        for name, default in (("data_parallel_sharding_strategy", "optim_grads_params"),
                              ("outer_dp_sharding_strategy", "no_shard"), ("fsdp_double_buffer", False),
                              ("suggested_communication_unit_size", None)):
            only_with(f"parallelism.{name}", getattr(par, name), default, "use_megatron_fsdp: true")
        for name, default in (("megatron_fsdp_main_params_dtype", "fp32"), ("megatron_fsdp_main_grads_dtype", "auto"),
                              ("megatron_fsdp_grad_comm_dtype", "auto")):
            only_with(f"precision.{name}", getattr(pr, name), default, "parallelism.use_megatron_fsdp: true")
    if par.outer_dp_sharding_strategy == "optim" and par.num_distributed_optimizer_instances < 2:
        add("parallelism.outer_dp_sharding_strategy", "optim", "needs num_distributed_optimizer_instances > 1 (HSDP)")
    if par.use_torch_fsdp2:
        for cond, field, value, msg in (
                (p > 1, "parallelism.pipeline_model_parallel_size", p, "PyTorch FSDP2 is not supported with pipeline "
                 "parallelism (Megatron-LM's rule)"),
                (ep > 1, "parallelism.expert_model_parallel_size", ep, "PyTorch FSDP2 is not supported with expert "
                 "parallelism"),
                (tr.use_distributed_optimizer, "training.use_distributed_optimizer", True, "PyTorch FSDP2 is not "
                 "supported with Megatron-Core's distributed optimizer"),
                (tr.gradient_accumulation_fusion, "training.gradient_accumulation_fusion", True, "PyTorch FSDP2 needs "
                 "gradient_accumulation_fusion: false"),
                (not m.untie_embeddings_and_output_weights, "model.untie_embeddings_and_output_weights", False,
                 "PyTorch FSDP2 needs untied embeddings"),
                (pr.params_dtype == "fp16", "precision.params_dtype", "fp16", "PyTorch FSDP2 is not supported with "
                 "fp16"),
                (par.num_distributed_optimizer_instances > 1, "parallelism.num_distributed_optimizer_instances",
                 par.num_distributed_optimizer_instances, "PyTorch FSDP2 has no outer data-parallel group")):
            if cond:
                add(field, value, msg)
    elif not par.torch_fsdp2_reshard_after_forward:
        add("parallelism.torch_fsdp2_reshard_after_forward", False, "applies only with use_torch_fsdp2: true")
    n_inst = par.num_distributed_optimizer_instances
    if n_inst > 1:
        if not (tr.use_distributed_optimizer or par.use_megatron_fsdp):
            add("parallelism.num_distributed_optimizer_instances", n_inst, "needs the distributed optimizer "
                "(training.use_distributed_optimizer: true) or Megatron-FSDP")
        if dp is not None and (dp * cp) % n_inst:
            add("parallelism.num_distributed_optimizer_instances", n_inst, f"data x context-parallel size "
                f"({dp * cp}) must be divisible by num_distributed_optimizer_instances ({n_inst})")
        if edp is not None and edp % n_inst:
            add("parallelism.num_distributed_optimizer_instances", n_inst, f"expert-data-parallel size ({edp}) "
                f"must be divisible by num_distributed_optimizer_instances ({n_inst})")

    # Optimizers ------------------------------------------------------------------------------------
    if pr.use_precision_aware_optimizer and tr.optimizer != "adam":
        add("precision.use_precision_aware_optimizer", True, "works only with optimizer: adam")
    if tr.optimizer == "sgd" and tr.use_distributed_optimizer and not tr.optimizer_cpu_offload:
        # Megatron-LM @ d98e8a64 : megatron/core/optimizer/distrib_optimizer.py (DistributedOptimizer.__init__,
        # also Megatron-FSDP's optimizer) asserts Adam, HybridDeviceOptimizer or a state initializer, and torch's
        # SGD has none: the run stops at start-up (seen on one H100, this project's batch 4).
        add("training.optimizer", "sgd", "sgd does not run with the distributed optimizer (Megatron-Core's "
            "DistributedOptimizer takes only Adam): set training.use_distributed_optimizer: false, or use adam")
    if tr.optimizer != "sgd":
        only_with("training.sgd_momentum", tr.sgd_momentum, 0.9, "optimizer: sgd")
    if not (tr.optimizer == "muon" and tr.use_distributed_optimizer):
        only_with("training.use_layer_wise_param_layout", tr.use_layer_wise_param_layout, True,
                  "optimizer: muon and use_distributed_optimizer: true")
    if tr.optimizer_cpu_offload:
        if fsdp:
            add("training.optimizer_cpu_offload", True, "with FSDP is not modelled")
        if tr.optimizer == "muon":
            add("training.optimizer_cpu_offload", True, "supports only adam and sgd")
        if pr.fp8_param_gather:
            # Megatron-LM allows it only with --fp8-recipe delayed (arguments.py); the FP8 parameters' shards
            # through HybridDeviceOptimizer are not modelled.
            add("training.optimizer_cpu_offload", True, "true with precision.fp8_param_gather: true is not modelled "
                "(Megatron-LM allows it only with fp8_recipe: delayed); set fp8_param_gather: false")
        if pr.fp4_param_gather:
            add("training.optimizer_cpu_offload", True, "true with precision.fp4_param_gather: true is not modelled "
                "(NVFP4 parameters through HybridDeviceOptimizer); set fp4_param_gather: false")
    else:
        only_with("training.optimizer_offload_fraction", tr.optimizer_offload_fraction, 1.0,
                  "optimizer_cpu_offload: true")

    # PEFT -----------------------------------------------------------------------------------------
    if tr.peft is None:
        for name, default in (("peft_dim", 32), ("peft_alpha", 32), ("peft_target_modules", None),
                              ("peft_share_expert_adapters", True), ("peft_sequence_parallel_input_regather", False)):
            only_with(f"training.{name}", getattr(tr, name), default, "peft: lora or dora")
    else:
        targets = set(tr.peft_target_modules or ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"))
        mlp_targets = targets & {"linear_fc1", "linear_fc2"}
        if moe and mlp_targets:
            # Megatron-Bridge @ 067f987d : src/megatron/bridge/peft/ (estimator/memory/features/peft.py).
            if tr.peft == "dora":
                add("training.peft_target_modules", sorted(targets), "DoRA on an MoE model's linear_fc1 / "
                    "linear_fc2 is not modelled: Megatron-Bridge's DoRA has no expert adapter path (dora.py "
                    "DoRA.transform passes no is_expert); target linear_qkv / linear_proj only, or use lora")
            if m.moe_latent_size:
                add("training.peft_target_modules", sorted(targets), "adapters on latent MoE experts "
                    "(moe_latent_size) are not modelled; target linear_qkv / linear_proj only")
            if "linear_fc1" in mlp_targets and tr.peft_dim % etp:
                add("training.peft_dim", tr.peft_dim, f"the adapter rank ({tr.peft_dim}) must be divisible by "
                    f"expert_tensor_parallel_size ({etp}) for the experts' column-parallel linear_fc1")
        if moe and tr.overlap_moe_expert_parallel_comm:
            add("training.peft", tr.peft, "PEFT on an MoE model with overlap_moe_expert_parallel_comm is not "
                "modelled (what the combined schedule's nodes keep of frozen experts and adapters)")
        if moe and tr.cuda_graph_impl != "none":
            add("training.peft", tr.peft, f"PEFT on an MoE model with cuda_graph_impl {tr.cuda_graph_impl} is not "
                "modelled (the captured tensors of frozen experts and adapters)")
        if tr.peft == "dora" and tr.peft_sequence_parallel_input_regather:
            add("training.peft_sequence_parallel_input_regather", True, "is a LoRA option: Megatron-Bridge's DoRA "
                "has no sequence_parallel_input_regather")
        if not moe:
            only_with("training.peft_share_expert_adapters", tr.peft_share_expert_adapters, True,
                      "an MoE model (num_experts)")
        if m.multi_latent_attention and "linear_qkv" in targets:
            add("training.peft_target_modules", sorted(targets), "multi-latent attention has no linear_qkv (its "
                "projections are named differently); adapters on MLA are not modelled")
        if m.mtp_num_layers:
            add("training.peft", tr.peft, "PEFT with MTP layers is not modelled")
        if fsdp:
            add("training.peft", tr.peft, "PEFT with FSDP is not modelled")
        freq = m.moe_layer_freq
        dense_fc1 = (not moe or bool(m.moe_shared_expert_intermediate_size)
                     or not (freq == 1 or (isinstance(freq, list) and all(freq))))   # dense MLPs or shared experts
        column = {"linear_qkv", "linear_fc1"} if dense_fc1 else {"linear_qkv"}
        if targets & column and tr.peft_dim % t:
            add("training.peft_dim", tr.peft_dim, f"the adapter rank ({tr.peft_dim}) must be divisible by "
                f"tensor_model_parallel_size ({t}) for column-parallel targets ({', '.join(sorted(column))})")

    # Activation offloading --------------------------------------------------------------------------
    if tr.cpu_offloading_num_layers and not tr.cpu_offloading:
        add("training.cpu_offloading", False, "set it to true with cpu_offloading_num_layers > 0 (Megatron-LM does)")
    if tr.cpu_offloading:
        if tr.cpu_offloading_num_layers >= m.num_layers:
            add("training.cpu_offloading_num_layers", tr.cpu_offloading_num_layers, f"must be less than num_layers "
                f"({m.num_layers})")
        if p > 1:
            add("training.cpu_offloading", True, "Megatron-Core does not support CPU offloading with pipeline "
                "parallelism")
        if tr.recompute_granularity is not None:
            add("training.cpu_offloading", True, "Megatron-Core does not support CPU offloading with activation "
                "recomputation")
    P.extend(_fine_grained_offload_problems(cfg))

    # CUDA graphs ----------------------------------------------------------------------------------
    mods = set(tr.cuda_graph_modules or ())
    if tr.cuda_graph_impl == "none":
        only_with("training.cuda_graph_modules", tr.cuda_graph_modules, None, "a cuda_graph_impl")
    elif tr.cuda_graph_impl == "full_iteration":
        if mods:
            add("training.cuda_graph_modules", sorted(mods), "must be empty with cuda_graph_impl: full_iteration")
        static = (m.moe_token_dispatcher_type == "flex" and m.moe_flex_dispatcher_backend == "hybridep"
                  and m.moe_expert_rank_capacity_factor is not None)
        if moe and not (m.moe_pad_expert_input_to_capacity or static):
            # Without drop-and-pad the all-to-all dispatcher copies the tokens per expert and split sizes to the
            # host and waits for them inside the forward pass (Megatron-LM @ d98e8a64 : moe/token_dispatcher.py
            # _maybe_dtoh_and_synchronize), which a stream capture cannot contain. HybridEP with a per-rank budget
            # needs no such copy: the receive size is the budget (_HybridEPManager.setup_metadata) and the counts
            # stay on the GPU (the static-shape, "CUDA-graph capturable" mode of TransformerConfig's docstring).
            add("training.cuda_graph_impl", "full_iteration", "capturing the whole iteration of an MoE model needs "
                "drop-and-pad routing (moe_pad_expert_input_to_capacity with moe_expert_capacity_factor) or "
                "HybridEP's static per-rank budget (moe_expert_rank_capacity_factor): dropless routing reads the "
                "tokens per expert on the host inside the forward pass")
    else:
        if tr.cuda_graph_impl == "local":
            add("training.cuda_graph_impl", "local", "Megatron-Core's local CUDA graphs (CudaGraphManager: graphs "
                "recorded during a training step, a memory pool per micro-batch) are not modelled; "
                "transformer_engine and full_iteration are")
        if tr.recompute_granularity == "full":
            add("training.recompute_granularity", "full", "full recompute works with CUDA graphs only with "
                "cuda_graph_impl: full_iteration (Megatron-Core's rule)")
        if "moe_preprocess" in mods and "moe_router" not in mods:
            add("training.cuda_graph_modules", sorted(mods), "moe_preprocess must be used together with moe_router")
        main_layers = (m.hybrid_layer_pattern or "").split("/")[0]
        if "mamba" in mods and "M" not in main_layers:
            add("training.cuda_graph_modules", sorted(mods), "mamba captures Mamba layers and applies only to a "
                "hybrid model with M layers in hybrid_layer_pattern")
        if m.experimental_attention_variant == "dsa" and (not mods or "attn" in mods):
            add("training.cuda_graph_modules", sorted(mods) or None, "CUDA graphs of DeepSeek sparse attention layers (captured "
                "whole or with attn) are not modelled (the indexer's top-k and the sparse attention's masks are "
                "data-dependent); capture only mlp or MoE parts, or no graphs")
        elif ("G" in main_layers or m.experimental_attention_variant in ("gdn", "gated_delta_net")) and (not mods or "attn" in mods):
            # Megatron-Core (cuda_graphs.py _layer_is_graphable) captures a gated delta net layer, a TransformerLayer
            # whose self-attention is GatedDeltaNet, with attn or the whole layer.
            add("training.cuda_graph_modules", sorted(mods) or None, "CUDA graphs of gated delta net layers (captured "
                "whole or with attn) are not modelled yet: what their graphs hold (the chunked gated delta rule "
                "inside a capture, the static inputs of such a layer) has not been established; capture only mamba, "
                "mlp or MoE parts, or no graphs")
        if moe and (not mods or "moe" in mods) and not m.moe_pad_expert_input_to_capacity:
            add("training.cuda_graph_modules", sorted(mods) or None, "capturing whole MoE layers needs drop-and-pad "
                "routing (moe_pad_expert_input_to_capacity); capture attn and moe_router instead")

    # Communication --------------------------------------------------------------------------------
    if par.tp_comm_overlap and (t == 1 or not tr.sequence_parallel):
        add("parallelism.tp_comm_overlap", True, "needs tensor_model_parallel_size > 1 and sequence_parallel: true")
    if par.tp_comm_overlap:
        if pr.params_dtype == "fp32":
            # Megatron-LM and Megatron-Bridge pass no dtype to initialize_ub: its buffers are bf16, and
            # CommOverlapP2PBase::copy_into_buffer refuses 4-byte activations (Transformer Engine @ d0067d0d).
            add("parallelism.tp_comm_overlap", True, "needs bf16 or fp16 weights: Transformer Engine's userbuffers "
                "are bf16 (Megatron passes no dtype to initialize_ub) and refuse fp32 activations")
        P.extend(tp_overlap.problems(cfg))
    else:
        only_with("parallelism.tp_comm_overlap_cfg", par.tp_comm_overlap_cfg, None, "tp_comm_overlap: true")
    if m.moe_token_dispatcher_type == "flex" and moe:
        g = ep * etp
        if m.moe_flex_dispatcher_backend == "deepep" and g > 1 and g not in DEEPEP_GROUP_SIZES:
            add("parallelism.expert_model_parallel_size", ep, f"DeepEP supports expert x expert-tensor parallel "
                f"groups of {', '.join(map(str, DEEPEP_GROUP_SIZES))} ranks, got {g}")
        sms = m.moe_flex_dispatcher_num_sms
        if m.moe_flex_dispatcher_backend == "deepep" and sms is not None and sms % 2:
            add("model.moe_flex_dispatcher_num_sms", sms, "DeepEP needs an even number of SMs (two per channel)")
        # HybridEP with a bf16 router is accepted: Megatron-Core (moe/token_dispatcher.py, the HybridEP
        # dispatch) warns and casts the top-k probabilities to fp32 ([tokens, top-k], under 1 MiB), it does not
        # refuse; the router's saved logits and probabilities stay in the dtype moe_router_dtype gives them.
        lpd = m.moe_hybridep_ranks_per_nvlink_domain
        if m.moe_flex_dispatcher_backend == "hybridep" and g > 1:
            seq = tr.seq_length or m.max_position_embeddings or 0
            _hybridep_rules(add, ep, g, lpd, seq, seq * tr.micro_batch_size // cp // (t if tr.sequence_parallel else 1))
        else:
            only_with("model.moe_hybridep_ranks_per_nvlink_domain", lpd, None,
                      "moe_flex_dispatcher_backend: hybridep over more than one rank")
    else:
        only_with("model.moe_hybridep_ranks_per_nvlink_domain", m.moe_hybridep_ranks_per_nvlink_domain, None,
                  "moe_token_dispatcher_type: flex")
        only_with("model.moe_flex_dispatcher_backend", m.moe_flex_dispatcher_backend, "deepep",
                  "moe_token_dispatcher_type: flex")
        only_with("model.moe_flex_dispatcher_num_sms", m.moe_flex_dispatcher_num_sms, None,
                  "moe_token_dispatcher_type: flex")
    if not moe:
        only_with("model.moe_router_dtype", m.moe_router_dtype, None, "MoE models (set num_experts)")
    # HybridEP's static per-rank budget and the paged stash: Megatron-LM @ d98e8a64 :
    # megatron/core/transformer/transformer_config.py ``__post_init__``. Megatron-Core also wants
    # use_transformer_engine_op_fuser or moe_use_grouped_tensor with the budget; the second is not a field here (both
    # give the 256-row alignment the estimate takes), so that rule is left to Megatron-Core.
    c = m.moe_expert_rank_capacity_factor
    if c is not None:
        if not moe:
            add("model.moe_expert_rank_capacity_factor", c, "applies only to MoE models (set num_experts)")
        elif m.moe_token_dispatcher_type != "flex" or m.moe_flex_dispatcher_backend != "hybridep":
            add("model.moe_expert_rank_capacity_factor", c, "needs moe_token_dispatcher_type flex with "
                "moe_flex_dispatcher_backend hybridep (Megatron-Core accepts hybridep or ncclep; the ncclep backend "
                "is not modelled)")
    if tr.moe_paged_stash:
        if tr.cpu_offloading:
            add("training.moe_paged_stash", True, "cannot be enabled with cpu_offloading (Megatron-Core)")
        if c is None:
            add("training.moe_paged_stash", True, "needs moe_expert_rank_capacity_factor (Megatron-Core: paged "
                "stashing is of no use without the static budget)")

    # Schedules ------------------------------------------------------------------------------------
    if tr.overlap_moe_expert_parallel_comm:
        if not moe or ep == 1:
            add("training.overlap_moe_expert_parallel_comm", True, "needs an MoE model with "
                "expert_model_parallel_size > 1")
        elif m.moe_token_dispatcher_type not in ("alltoall", "flex"):
            add("training.overlap_moe_expert_parallel_comm", True, "needs the alltoall or flex dispatcher")
        if p > 1 and virtual_stages(par) == 1:   # a layout string sets the virtual stages too (arguments.py)
            add("training.overlap_moe_expert_parallel_comm", True, "with pipeline parallelism needs "
                "virtual_pipeline_model_parallel_size (the interleaved schedule)")
        if tr.recompute_granularity == "full":
            add("training.overlap_moe_expert_parallel_comm", True, "does not work with full recompute")
        # Megatron-LM @ d98e8a64 : transformer/transformer_config.py __post_init__, the asserts under
        # overlap_moe_expert_parallel_comm.
        if tr.recompute_granularity == "selective" and "moe" in (tr.recompute_modules or ()):
            add("training.recompute_modules", list(tr.recompute_modules), "moe cannot be recomputed with "
                "overlap_moe_expert_parallel_comm (Megatron-Core's rule); drop moe from the list")
        if pr.params_dtype == "fp32":
            add("precision.params_dtype", "fp32", "overlap_moe_expert_parallel_comm needs bf16 or fp16 weights "
                "(Megatron-Core's rule)")
        if (m.mtp_num_layers or 0) > 1:
            add("model.mtp_num_layers", m.mtp_num_layers, "overlap_moe_expert_parallel_comm allows at most one MTP "
                "layer (Megatron-Core's rule)")
        if tr.cuda_graph_impl == "transformer_engine" and {"moe", "mlp"} & mods:
            add("training.cuda_graph_modules", sorted(mods), "capturing moe or mlp does not work with "
                "overlap_moe_expert_parallel_comm (Megatron-Core's rule)")
        # Megatron-LM @ d98e8a64 : pipeline_parallel/combined_1f1b.py combined_1f1b_schedule_for_interleaved_
        # pipelining asserts "EP overlap 1F1B with FSDP is not supported for interleaved pipeline parallelism".
        if par.use_megatron_fsdp and p > 1:
            add("parallelism.use_megatron_fsdp", True, "overlap_moe_expert_parallel_comm with Megatron-FSDP runs "
                "without pipeline parallelism only (Megatron-Core asserts it for the interleaved schedule)")
        # Only GPTModel builds the combined schedule plan (models/gpt/gpt_model.py build_schedule_plan; the
        # hybrid model has none, and fine_grained_callables.py build_layer_callables takes TransformerLayers).
        if m.hybrid_layer_pattern:
            add("training.overlap_moe_expert_parallel_comm", True, "needs a GPT model: Megatron-Core builds the "
                "combined 1F1B schedule plan for GPTModel only, not for hybrid (Mamba) models")
    if tr.delay_wgrad_compute:
        # Megatron-LM @ d98e8a64 : transformer/transformer_config.py __post_init__ ("overlap_moe_expert_parallel_comm
        # must be enabled when enabling delay_wgrad_compute") and training/arguments.py (Transformer Engine only).
        if not tr.overlap_moe_expert_parallel_comm:
            add("training.delay_wgrad_compute", True, "needs overlap_moe_expert_parallel_comm: true "
                "(Megatron-Core's rule)")
        if tr.transformer_impl != "transformer_engine":
            add("training.delay_wgrad_compute", True, "needs transformer_impl: transformer_engine (Megatron-LM's rule)")
    if tr.overlap_dispatch_backward_with_experts_wgrad:
        # Megatron-LM @ d98e8a64 : megatron/core/transformer/transformer_config.py __post_init__.
        if tr.overlap_moe_expert_parallel_comm:
            add("training.overlap_dispatch_backward_with_experts_wgrad", True, "must be false with "
                "overlap_moe_expert_parallel_comm (Megatron-Core's rule)")
        if tr.delay_wgrad_compute:
            add("training.overlap_dispatch_backward_with_experts_wgrad", True, "and delay_wgrad_compute exclude "
                "each other (Megatron-Core's rule: use only one)")
    if tr.defer_embedding_wgrad_compute:
        if p == 1:
            add("training.defer_embedding_wgrad_compute", True, "needs pipeline_model_parallel_size > 1")
        if not tr.gradient_accumulation_fusion:
            add("training.defer_embedding_wgrad_compute", True, "needs gradient_accumulation_fusion: true")
    else:
        only_with("training.wgrad_deferral_limit", tr.wgrad_deferral_limit, 0, "defer_embedding_wgrad_compute: true")
    P += _recipe_arch_problems(pr, tr.gpu_arch)
    if pr.disable_parameter_transpose_cache and not (pr.fp8 or pr.fp4):
        add("precision.disable_parameter_transpose_cache", True, "applies only with fp8: true or fp4: true")
    if pr.first_last_layers_bf16:
        if not (pr.fp8 or pr.fp4):
            add("precision.first_last_layers_bf16", True, "applies only with fp8: true or fp4: true")
        elif pr.fp8 and (pr.fp8_recipe or "delayed") == "delayed":
            add("precision.first_last_layers_bf16", True, "delayed scaling does not support bf16 first/last layers "
                "(Megatron-Core's rule); set fp8_recipe")
        per_stage = m.num_layers // p
        # Megatron-Core checks the counts against the layers per stage only in an FP8 run (TransformerConfig.
        # __post_init__, under ``if self.fp8``); fp4_utils.py get_fp4_context takes any count.
        for name in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16") if pr.fp8 else ():
            if getattr(pr, name) > per_stage:
                add(f"precision.{name}", getattr(pr, name), f"must be at most the layers per pipeline stage "
                    f"({per_stage})")
    else:
        only_with("precision.num_layers_at_start_in_bf16", pr.num_layers_at_start_in_bf16, 1,
                  "first_last_layers_bf16: true")
        only_with("precision.num_layers_at_end_in_bf16", pr.num_layers_at_end_in_bf16, 1,
                  "first_last_layers_bf16: true")
    P.extend(_fp8_output_problems(cfg))
    return P


def _fp8_output_problems(cfg) -> list[Problem]:
    """``precision.fp8_output_proj`` (estimator/memory/features/fp8_output.py). Megatron-LM @ d98e8a64 :
    ``TransformerConfig.__post_init__`` requires fp8 with the mxfp8 recipe; ``TELMHeadColumnParallelLinear`` raises
    on a shared embedding weight (tied embeddings with the embedding on the same stage) and on
    ``defer_embedding_wgrad_compute``. The combinations whose output-layer tensors another part of the estimate
    re-plans are refused by name."""
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    if not pr.fp8_output_proj:
        return []
    out: list[Problem] = []

    def add(msg):
        out.append(Problem("precision.fp8_output_proj", True, msg))

    if not pr.fp8 or pr.fp8_recipe != "mxfp8":
        add(f"needs fp8 with fp8_recipe mxfp8 (Megatron-Core's TransformerConfig refuses it otherwise; here fp8 "
            f"{pr.fp8}, fp8_recipe {pr.fp8_recipe or ('delayed' if pr.fp8 else None)})")
    if not m.untie_embeddings_and_output_weights and par.pipeline_model_parallel_size == 1:
        add("with tied embeddings on one pipeline stage: Megatron-Core's TELMHeadColumnParallelLinear does not take "
            "the embedding's weight (skip_weight_param_allocation); set untie_embeddings_and_output_weights")
    if tr.defer_embedding_wgrad_compute:
        add("with defer_embedding_wgrad_compute: Megatron-Core's TELMHeadColumnParallelLinear refuses it")
    for on, what in ((par.use_megatron_fsdp or par.use_torch_fsdp2, "FSDP"),
                     (pr.disable_parameter_transpose_cache, "disable_parameter_transpose_cache"),
                     (tr.freeze_language_model, "freeze_language_model"),
                     (tr.reserved_memory_model == "replay", "reserved_memory_model replay")):
        if on:
            add(f"with {what} is not modelled (the MXFP8 output layer's weight copies and saved input there)")
    return out



def _recipe_arch_problems(pr, arch: str | None) -> list[Problem]:
    """The quantization recipes the GPU architecture ``arch`` (``training.gpu_arch``, set or from the GPU named)
    cannot run. Transformer Engine raises at its autocast rather than fall back, and Megatron-Core does not check
    first (TransformerEngine @ d0067d0d : transformer_engine/pytorch/quantization.py ``check_recipe_support`` and the
    ``_compute_*_support`` functions): FP8 needs compute capability 8.9, blockwise scaling 9.0, MXFP8 10.x or 11.x
    ("not supported on 12.0+ architectures yet"), NVFP4 10.0. Nothing is refused with no architecture given (the
    estimate then assumes one that runs the recipe, :func:`estimator.config.derived.gpu_arch`) nor for AMD targets,
    whose Transformer Engine is ROCm's fork, not read here."""
    if arch is None or is_amd(arch) or not (pr.fp8 or pr.fp4):
        return []
    cc = compute_capability(arch)
    where = f"training.gpu_arch is {arch} (compute capability {cc[0]}.{cc[1]}, set or from the GPU named)"
    if pr.fp4:
        if cc < (10, 0):
            return [Problem("precision.fp4", True, f"NVFP4 needs a Blackwell GPU (sm_100 or newer): Transformer "
                            f"Engine refuses it below compute capability 10.0, and {where}; use fp8 on this GPU")]
        return []
    recipe = pr.fp8_recipe or "delayed"
    if cc < (8, 9):
        return [Problem("precision.fp8", True, f"FP8 needs compute capability 8.9 or newer (Ada, Hopper, Blackwell); "
                        f"{where}; set fp8: false")]
    if recipe == "mxfp8" and not (10, 0) <= cc < (12, 0):
        return [Problem("precision.fp8_recipe", "mxfp8", f"MXFP8 needs sm_100 or sm_103 (B200, GB200, B300): "
                        f"Transformer Engine runs it only on compute capability 10.x and 11.x, and {where}; use "
                        f"tensorwise or {'blockwise' if cc >= (9, 0) else 'delayed'} here")]
    if recipe == "blockwise" and cc < (9, 0):
        return [Problem("precision.fp8_recipe", "blockwise", f"blockwise FP8 scaling needs compute capability 9.0 "
                        f"or newer (Hopper, Blackwell); {where}; use tensorwise or delayed")]
    return []


def _hybridep_rules(add, ep: int, group: int, setting: int | None, seq: int, tokens: int) -> None:
    """What HybridEP (deepseek-ai/DeepEP @ 34152ae) refuses of an expert group of ``group`` ranks: a group that is
    not a whole number of NVLink domains (``hybrid_ep_buffer.py``'s assert), more domains than one warp serves
    (``hybrid_ep_backend.cuh``'s static_assert) and, across domains, a send queue of 65,536 entries or more
    (``internode.cu`` ``setup_qp_init_attr``'s assert)."""
    L, N = hybridep_domains(group, setting)
    field, value = (("model.moe_hybridep_ranks_per_nvlink_domain", setting) if setting
                    else ("parallelism.expert_model_parallel_size", ep))
    if group % L:
        add(field, value, f"HybridEP needs the expert x expert-tensor parallel group ({group} ranks) to be whole "
            f"NVLink domains of {L} ranks (moe_hybridep_ranks_per_nvlink_domain, "
            f"{'as set' if setting else 'min(G, 8) unless set'})")
    elif N > HYBRIDEP_MAX_DOMAINS:
        add(field, value, f"HybridEP reaches at most {HYBRIDEP_MAX_DOMAINS} NVLink domains; {group} ranks in "
            f"domains of {L} make {N}")
    elif N > 1 and hybridep_tokens(tokens) > HYBRIDEP_MAX_RDMA_TOKENS:
        add("training.seq_length", seq, f"HybridEP across NVLink domains takes at most "
            f"{HYBRIDEP_MAX_RDMA_TOKENS:,} tokens per rank (its RDMA send queue holds 3 x tokens + 1 entries, "
            f"under 65,536); this layout gives {tokens:,} (sequence x micro-batch / CP, / TP with sequence "
            "parallelism)")


#: The offload groups estimator/memory/features/offload.py models (Megatron-Core's other two are refused).
FINE_GRAINED_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")


def _fine_grained_offload_problems(cfg) -> list[Problem]:
    """Fine-grained activation offloading: Megatron-Core's own checks (Megatron-LM @ d98e8a64 :
    megatron/core/transformer/transformer_config.py ``__post_init__``, megatron/training/arguments.py) and the
    combinations estimator/memory/features/offload.py does not model, each named."""
    m, tr = cfg.model, cfg.training
    P: list[Problem] = []
    fgo = tr.fine_grained_activation_offloading
    mods = tuple(tr.offload_modules or ())

    def add(field, value, msg):
        P.append(Problem(field, list(value) if isinstance(value, tuple) else value, msg))

    if not fgo:
        for name in ("offload_modules", "min_offloaded_tensor_size", "activation_offload_fraction",
                     "delta_offload_bytes_across_pp_ranks"):
            value, default = getattr(tr, name), type(tr).__dataclass_fields__[name].default     # the schema's
            if value != default and not (name == "offload_modules" and not value):   # [] as Bridge's recipes set it
                shown = list(value) if isinstance(value, tuple) else value
                add(f"training.{name}", value, f"{shown} applies only with fine_grained_activation_offloading: true")
        return P
    if not mods:
        add("training.offload_modules", tr.offload_modules, f"is {list(mods)}: fine_grained_activation_offloading "
            f"needs at least one module to offload (from {', '.join(FINE_GRAINED_MODULES)})")
    if "attn_proj" in mods and "core_attn" not in mods:
        add("training.offload_modules", mods, f"{list(mods)}: attn_proj needs core_attn too (Megatron-Core: the output "
            "projection's input is the core attention's output, which core_attn's backward needs)")
    if tr.cpu_offloading:
        add("training.cpu_offloading", True, "cannot be enabled with fine_grained_activation_offloading "
            "(Megatron-Core)")
    if tr.transformer_impl != "transformer_engine":
        add("training.transformer_impl", tr.transformer_impl, f"is {tr.transformer_impl}; fine-grained activation "
            "offloading runs only with transformer_engine (Megatron-LM's arguments.py)")
    recomputed = tuple(tr.recompute_modules or ()) if tr.recompute_granularity == "selective" else ()
    inside_moe = sorted({"moe_act", "expert_fc1"} & set(mods))
    if "moe" in recomputed and inside_moe:
        add("training.offload_modules", mods, f"{list(mods)}: {', '.join(inside_moe)} cannot be offloaded while the "
            "whole MoE layer is recomputed (recompute_modules has moe; Megatron-Core)")
    if "mhc" in recomputed:
        add("training.recompute_modules", list(recomputed), "mhc recompute with fine_grained_activation_offloading "
            "is not supported by Megatron-Core")
    # Not modelled: refused by name rather than estimated wrongly.
    for mod in ("fused_group_mlp", "gdp_qkv"):
        if mod in mods:
            add("training.offload_modules", mods, f"{list(mods)}: offloading {mod} is not modelled (the groups "
                f"modelled: {', '.join(FINE_GRAINED_MODULES)})")
    for cond, field, value, what in (
            (tr.recompute_granularity == "full", "training.recompute_granularity", "full",
             "full recompute (the checkpointed layer's tensors inside the offload groups)"),
            (tr.cuda_graph_impl != "none", "training.cuda_graph_impl", tr.cuda_graph_impl,
             "CUDA graphs (the offload inside captured modules, delay_offload_until_cuda_graph)"),
            (tr.peft is not None, "training.peft", tr.peft, "PEFT adapters' saved inputs"),
            (tr.moe_paged_stash, "training.moe_paged_stash", True, "the paged stash of the experts' saved tensors"),
            (bool(m.enable_hyper_connections), "model.enable_hyper_connections", True,
             "hyper-connection streams")):
        if cond:
            add(field, value, f"{value} is not modelled with fine_grained_activation_offloading: {what} (the "
                "offload groups are modelled for plain attention, MLA, dense MLP and MoE layers)")
    return P
