"""Cross-field rules of the recipe features, as Megatron-LM (``megatron/training/arguments.py``), Megatron-Core
(``TransformerConfig.__post_init__``, ``DistributedDataParallelConfig``) and Megatron-Bridge enforce them, plus
the combinations the estimator does not model (refused by name rather than estimated wrongly): FSDP, optimizers,
PEFT, CUDA graphs, communication (TP overlap, DeepEP / HybridEP), schedules, dynamic (hybrid) context
parallelism. Activation offloading is :mod:`estimator.config.rules.offload`'s; the quantization recipes' GPU and
output-layer rules :mod:`estimator.config.rules.precision`'s; HybridEP's group rules
:mod:`estimator.config.rules.moe`'s."""

from __future__ import annotations

from .. import tp_overlap
from ..derived import grad_reduce_in_fp32, hybrid_cp_group, virtual_stages
from ..quant_recipe import parse_rules
from ..errors import Problem
from ..limits import DEEPEP_GROUP_SIZES
from .moe import hybridep_rules
from .offload import offload_problems
from .precision import fp8_output_problems, recipe_arch_problems

__all__ = ["feature_problems", "gtp_degrees", "gtp_problems"]


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
                              ("suggested_communication_unit_size", None), ("keep_fp8_transpose_cache", False),
                              ("megatron_fsdp_cuda_graph_mode", False)):
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
    # flagsB28: DDP's fp32 local gradient accumulation (distributed_data_parallel_config.py __post_init__ asserts
    # grad_reduce_in_fp32 is off; only DDP's _ParamAndGradBuffer reads the patterns, FSDP never does)
    if par.fp32_local_grad_accumulation:
        if grad_reduce_in_fp32(pr):
            add("parallelism.fp32_local_grad_accumulation", True, "needs a gradient buffer in the weights' dtype: "
                "Megatron-Core refuses it with grad_reduce_in_fp32 (precision.accumulate_allreduce_grads_in_fp32: "
                "false, Megatron-LM's --grad-reduce-in-bf16)")
        if fsdp:
            add("parallelism.fp32_local_grad_accumulation", True, "applies only to Megatron-Core's DDP gradient "
                "buffer; Megatron-FSDP and PyTorch FSDP2 do not read it")
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

    # Activation offloading (estimator/config/rules/offload.py) ---------------------------------------------
    P.extend(offload_problems(cfg))

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
        if m.mtp_use_repeated_layer and (m.mtp_num_layers or 0) > 1 and m.hybrid_layer_pattern is None:
            # Megatron-LM @ d98e8a64 transformer/module.py _te_cuda_graph_replay picks a layer's graph by
            # current_microbatch; a repeated MTP layer runs once per depth in each micro-batch.
            add("model.mtp_use_repeated_layer", True, "with transformer_engine CUDA graphs and more than one MTP depth "
                "is not modelled: Megatron-Core graphs the one MTP layer once per micro-batch and would replay that "
                "graph at every depth")

    # flagsB28: the reduce-scatter with fp32 accumulation (megatron/core/distributed/param_and_grad_buffer.py asserts
    # one distributed-optimizer instance; the estimate lays out no buckets, so one bucket per buffer only)
    if par.reduce_scatter_with_fp32_accumulation:
        for cond, field, value, msg in (
                (tr.overlap_grad_reduce, "training.overlap_grad_reduce", True, "with "
                 "parallelism.reduce_scatter_with_fp32_accumulation the buckets follow bucket_size cut at parameter "
                 "edges, which is not modelled: the fp32 reduce-scatter is modelled without overlap_grad_reduce "
                 "(one bucket per buffer)"),
                (n_inst > 1, "parallelism.num_distributed_optimizer_instances", n_inst, "must be 1 with "
                 "parallelism.reduce_scatter_with_fp32_accumulation (Megatron-Core's assertion)"),
                (fsdp or tr.optimizer_cpu_offload or tr.optimizer != "adam" or pr.fp8_param_gather
                 or pr.fp4_param_gather, "parallelism.reduce_scatter_with_fp32_accumulation", True,
                 "modelled only for Adam on Megatron-Core's DDP buffers, without FSDP, optimizer CPU offload or "
                 "FP8/NVFP4 parameter buffers (their own buckets)")):
            if cond:
                add(field, value, msg)

    # flagsB28: the optimizer step's CUDA graph (Megatron-LM @ d98e8a64 : megatron/core/optimizer/__init__.py passes
    # capturable=optimizer_cuda_graph to Adam only; Transformer Engine @ d0067d0d optimizers/fused_adam.py refuses
    # capturable with BF16 remainders, non-fp32 master weights, or moments not both fp32 or both bf16)
    if tr.optimizer_cuda_graph:
        if tr.optimizer != "adam" or tr.optimizer_cpu_offload or fsdp:
            what = ("optimizer " + tr.optimizer if tr.optimizer != "adam" else
                    "optimizer_cpu_offload" if tr.optimizer_cpu_offload else "FSDP")
            add("training.optimizer_cuda_graph", True, f"a CUDA graph of the optimizer step with {what} is not "
                "modelled (Megatron-Core makes only Adam capturable; modelled with Adam, with or without the "
                "distributed optimizer)")
        elif pr.use_precision_aware_optimizer:
            te_master = pr.main_params_dtype != "fp32" or not pr.fp8 or (pr.fp8_recipe or "delayed") == "delayed"
            if te_master and pr.main_params_dtype != "fp32":
                add("precision.main_params_dtype", pr.main_params_dtype, "must be fp32 with "
                    "training.optimizer_cuda_graph: Transformer Engine's capturable FusedAdam supports only fp32 "
                    "master weights")
            elif te_master and pr.store_param_remainders:
                add("precision.store_param_remainders", True, "must be false with training.optimizer_cuda_graph: "
                    "Transformer Engine's capturable FusedAdam refuses BF16 remainders (Megatron-Core passes "
                    "store_param_remainders through)")
            if {pr.exp_avg_dtype, pr.exp_avg_sq_dtype} not in ({"fp32"}, {"bf16"}):
                add("precision.exp_avg_dtype", pr.exp_avg_dtype, "with training.optimizer_cuda_graph exp_avg_dtype "
                    "and exp_avg_sq_dtype must be both fp32 or both bf16 (Transformer Engine's capturable FusedAdam)")
        if tr.reserved_memory_model == "replay":
            add("training.optimizer_cuda_graph", True, "the replayed reserve does not model the optimizer step's "
                "private pool: use reserved_memory_model: fraction")

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
            hybridep_rules(add, ep, g, lpd, seq, seq * tr.micro_batch_size // cp // (t if tr.sequence_parallel else 1))
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
    P += recipe_arch_problems(pr, tr.gpu_arch)
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
    P.extend(fp8_output_problems(cfg))
    P.extend(_chunked_mlp_problems(cfg))
    P.extend(_probs_on_input_problems(cfg))
    P.extend(_early_release_problems(cfg))
    P.extend(gtp_problems(cfg))
    P.extend(_hybrid_cp_problems(cfg))
    return P


def _hybrid_cp_problems(cfg) -> list[Problem]:
    """Dynamic (hybrid) context parallelism. Megatron-LM @ d98e8a64 : megatron/training/arguments.py (no pipeline
    parallelism, no CUDA graph, no Megatron-FSDP), megatron/core/transformer/multi_latent_attention.py (not with
    MLA), megatron/core/parallel_state.py ``create_hybrid_dp_cp_groups`` (groups of powers of two only; the
    schedule's ``fill_empty_gpus`` widens groups by doubling), megatron/core/datasets/data_schedule.py
    (``max_seqlen_per_dp_cp_rank`` sizes every sub-sample's group); megatron/core/pipeline_parallel/
    hybrid_cp_schedule.py ``next_hdp_group`` places a sequence only on as many ranks as it needs, so a sequence of
    seq_length tokens needing more than the data x context-parallel size is never scheduled."""
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    P: list[Problem] = []
    if not par.hybrid_context_parallel:
        if par.max_seqlen_per_dp_cp_rank is not None:
            P.append(Problem("parallelism.max_seqlen_per_dp_cp_rank", par.max_seqlen_per_dp_cp_rank,
                             "applies only with hybrid_context_parallel: true"))
        return P
    t, p, cp = par.tensor_model_parallel_size, par.pipeline_model_parallel_size, par.context_parallel_size
    ws = tr.world_size
    n = ws // (t * p * cp) * cp if ws % (t * p * cp) == 0 else None

    def add(field, value, msg):
        P.append(Problem(field, value, msg))

    if par.max_seqlen_per_dp_cp_rank is None:
        add("parallelism.max_seqlen_per_dp_cp_rank", None, "is required with hybrid_context_parallel: true (the most "
            "tokens of one sequence a rank holds), e.g. seq_length / context_parallel_size")
    if p > 1:
        add("parallelism.pipeline_model_parallel_size", p, "must be 1 with hybrid_context_parallel (Megatron-LM's "
            "rule)")
    if tr.cuda_graph_impl != "none":
        add("training.cuda_graph_impl", tr.cuda_graph_impl, "must be none with hybrid_context_parallel "
            "(Megatron-LM's rule)")
    if par.use_megatron_fsdp:
        add("parallelism.use_megatron_fsdp", True, "must be false with hybrid_context_parallel (Megatron-LM's rule)")
    if m.multi_latent_attention:
        add("model.multi_latent_attention", True, "does not run with hybrid_context_parallel (Megatron-Core "
            "asserts it in MLA)")
    if n is not None and (n < 2 or n & (n - 1)):
        add("parallelism.hybrid_context_parallel", True, f"needs a data x context-parallel size that is a power of "
            f"two, at least 2 (got {n}): Megatron-Core builds sub-sample groups of powers of two only and widens "
            f"them by doubling, so another size has no group to run in")
    s = tr.seq_length or m.max_position_embeddings
    if n is not None and par.max_seqlen_per_dp_cp_rank and s and n >= 2 and not n & (n - 1):
        need = hybrid_cp_group(s, par.max_seqlen_per_dp_cp_rank)
        if need > n:
            add("parallelism.max_seqlen_per_dp_cp_rank", par.max_seqlen_per_dp_cp_rank, f"too small for a sequence of "
                f"seq_length {s} tokens: it would need {need} ranks, more than the data x context-parallel size "
                f"{n}; use at least {-(-s // n)}")
    return P


def _early_release_problems(cfg) -> list[Problem]:
    """flagsA28: ``training.ep_overlap_early_attn_memory_release`` (estimator/memory/features/schedule.py). Megatron-Core
    asserts overlap_moe_expert_parallel_comm (TransformerConfig.__post_init__); modelled with the alltoall dispatcher
    and without delayed weight gradients."""
    tr = cfg.training
    if not tr.ep_overlap_early_attn_memory_release:
        return []
    field = "training.ep_overlap_early_attn_memory_release"
    if not tr.overlap_moe_expert_parallel_comm:
        return [Problem(field, True, "needs overlap_moe_expert_parallel_comm (Megatron-Core asserts it)")]
    out = []
    if cfg.model.moe_token_dispatcher_type == "flex":
        out.append(Problem(field, True, "with the flex dispatcher is not modelled (the attention backward's moment "
                           "can exceed the MLP backward's there)"))
    if tr.delay_wgrad_compute:
        out.append(Problem(field, True, "with delay_wgrad_compute is not modelled (the attention's delayed window "
                           "moves with it)"))
    return out


def _probs_on_input_problems(cfg) -> list[Problem]:
    """flagsA28: ``model.moe_apply_probs_on_input`` (estimator/model/layers/moe.py ``probs_on_input``). Megatron-Core
    asserts top-1 routing (experts.py); the combinations whose expert tensors another part of the estimate re-plans,
    or where the probabilities are not in the activations' dtype, are refused by name."""
    m, tr = cfg.model, cfg.training
    if not m.moe_apply_probs_on_input:
        return []
    field = "model.moe_apply_probs_on_input"
    if m.num_experts is None:
        return [Problem(field, True, "applies only to MoE models (num_experts)")]
    out = []
    if (m.moe_router_topk or 2) != 1:
        out.append(Problem(field, True, f"needs moe_router_topk 1 (Megatron-Core asserts it in experts.py), got "
                           f"{m.moe_router_topk or 2}"))
    for on, what in ((m.moe_router_dtype is not None, f"moe_router_dtype {m.moe_router_dtype} (fp32 probabilities "
                      "promote the product to fp32)"),
                     (m.moe_token_dispatcher_type == "flex", "the flex dispatcher"),
                     (tr.use_transformer_engine_op_fuser, "use_transformer_engine_op_fuser (Megatron-Core falls "
                      "back to the unfused experts)"),
                     (tr.moe_paged_stash, "the paged stash"),
                     (tr.fine_grained_activation_offloading or tr.cpu_offloading, "activation offloading"),
                     (tr.peft is not None, "PEFT adapters"),
                     (tr.overlap_moe_expert_parallel_comm, "overlap_moe_expert_parallel_comm"),
                     (tr.cuda_graph_impl != "none", "CUDA graphs")):
        if on:
            out.append(Problem(field, True, f"with {what} is not modelled"))
    return out


def _chunked_mlp_problems(cfg) -> list[Problem]:
    """flagsA28: ``training.mlp_chunks_for_training`` is modelled for dense MLPs in bf16, fp16, fp32 and the
    per-tensor FP8 recipes; the rest is refused by name (estimator/model/layers/mlp.py)."""
    m, tr, pr = cfg.model, cfg.training, cfg.precision
    n = tr.mlp_chunks_for_training
    if n <= 1:
        return []
    why = []
    if m.num_experts is not None:
        why.append("MoE layers (each piece is routed, dispatched and padded on its own)")
    if (pr.fp8 and pr.fp8_recipe in ("mxfp8", "blockwise")) or pr.fp4:
        why.append("block-scaled FP8 or NVFP4 (each piece's saved input gets its own padded scales)")
    elif any(p in ("mxfp8", "blockwise", "nvfp4") for _, p in parse_rules(pr.quant_recipe)):
        why.append("a quant_recipe rule giving a module block-scaled FP8 or NVFP4 (each piece's saved input gets "
                   "its own padded scales)")
    if tr.cuda_graph_impl != "none":
        why.append("CUDA graphs (captured on the whole layer's shapes)")
    if tr.fine_grained_activation_offloading or tr.cpu_offloading:
        why.append("activation offloading")
    if tr.peft is not None:
        why.append("PEFT adapters")
    return [Problem("training.mlp_chunks_for_training", n, f"a chunked MLP with {w} is not modelled") for w in why]


def gtp_degrees(cfg) -> tuple[int, int]:
    """(GTP_remat, expert GTP_remat): the weight-shard counts over the tensor-parallel (expert-tensor-parallel)
    size, 1 where unset, as Megatron-Core's resolve_tensor_parallel_weight_shards derives them (Megatron-LM @
    d98e8a64 : megatron/core/model_parallel_config.py). Call on a configuration whose counts divide (gtp_problems)."""
    par = cfg.parallelism
    t = par.tensor_model_parallel_size
    etp = par.expert_tensor_parallel_size or t
    g = (par.tensor_parallel_num_weight_shards or t) // t
    ge = (par.expert_tensor_parallel_num_weight_shards or etp) // etp if cfg.model.num_experts is not None else 1
    return max(g, 1), max(ge, 1)


def gtp_problems(cfg) -> list[Problem]:
    """gtp29: generalised tensor parallelism's weight sharding (estimator/memory/features/gtp.py). Megatron-LM @
    d98e8a64 enforces the shard counts (model_parallel_config.py resolve_tensor_parallel_weight_shards), the world
    size (arguments.py: world_size % (TP x PP x CP x GTP_remat)), the checkpoint format, one distributed-optimizer
    instance (parallel_state.py) and NVFP4's native gather; the combinations whose buffers the estimate does not
    follow are refused by name."""
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    t, p, cp, ep = (par.tensor_model_parallel_size, par.pipeline_model_parallel_size, par.context_parallel_size,
                    par.expert_model_parallel_size)
    etp = par.expert_tensor_parallel_size or t
    out = []
    bad = False
    for name, n, base, base_name in (("tensor_parallel_num_weight_shards", par.tensor_parallel_num_weight_shards, t,
                                      "tensor_model_parallel_size"),
                                     ("expert_tensor_parallel_num_weight_shards",
                                      par.expert_tensor_parallel_num_weight_shards, etp,
                                      "expert_tensor_parallel_size")):
        if n is not None and n % base:
            out.append(Problem(f"parallelism.{name}", n, f"must be a multiple of {base_name} ({base}): {base}, "
                               f"{2 * base}, {3 * base}, ... (Megatron-Core's resolve_tensor_parallel_weight_shards)"))
            bad = True
    if bad:
        return out
    g, ge = gtp_degrees(cfg)
    if g == 1 and ge == 1:
        return out
    field = "parallelism.tensor_parallel_num_weight_shards" if g > 1 else \
        "parallelism.expert_tensor_parallel_num_weight_shards"
    value = par.tensor_parallel_num_weight_shards if g > 1 else par.expert_tensor_parallel_num_weight_shards
    ws = tr.world_size
    if g > 1 and ws % (t * p * cp * g):
        out.append(Problem(field, value, f"world_size ({ws}) must be divisible by TP x PP x CP x GTP_remat "
                           f"({t} x {p} x {cp} x {g}; Megatron-LM's arguments.py)"))
    if ge > 1 and ws % (etp * ep * p * ge):
        out.append(Problem("parallelism.expert_tensor_parallel_num_weight_shards",
                           par.expert_tensor_parallel_num_weight_shards, f"world_size ({ws}) must be divisible by "
                           f"ETP x EP x PP x expert GTP_remat ({etp} x {ep} x {p} x {ge}; Megatron-Core's expert "
                           "rank grid)"))
    if tr.ckpt_format not in ("torch", "torch_dist"):
        out.append(Problem("training.ckpt_format", tr.ckpt_format, "must be torch or torch_dist with GTP "
                           "(Megatron-LM's arguments.py)"))
    if par.num_distributed_optimizer_instances > 1:
        out.append(Problem("parallelism.num_distributed_optimizer_instances", par.num_distributed_optimizer_instances,
                           "must be 1 with GTP (Megatron-Core's parallel_state.py asserts it)"))
    if pr.fp4 and not pr.fp4_param_gather:
        out.append(Problem("precision.fp4_param_gather", False, "GTP with NVFP4 needs fp4_param_gather "
                           "(Megatron-LM's arguments.py: the weights are all-gathered as native NVFP4)"))
    why = []
    for on, what in (
            (pr.fp8 or pr.fp4 or bool(pr.quant_recipe), "FP8 or NVFP4 weights (GTP gathers the quantised row-wise "
             "and column-wise copies into buffers of their own, forward and backward)"),
            (par.use_megatron_fsdp or par.use_torch_fsdp2, "FSDP (GTP shards DDP's parameters)"),
            (tr.cuda_graph_impl != "none", "CUDA graphs (GTP's graphed chains, wgrad rings and capture pools)"),
            (tr.recompute_granularity == "full" or bool(set(tr.recompute_modules or ())
                                                        & {"mlp", "moe", "shared_experts", "mla_up_proj"}),
             "recomputation of linear layers (the recompute chain gathers into buffers of its own)"),
            (bool(m.mtp_num_layers), "MTP layers (their shared embedding and output layer are gathered once per "
             "depth)"),
            (m.vision_num_layers is not None or m.sound_num_layers is not None or m.model_kind == "wan",
             "vision, sound or Wan models"),
            (tr.peft is not None, "PEFT adapters"),
            (tr.optimizer != "adam", f"optimizer {tr.optimizer}"),
            (tr.optimizer_cpu_offload, "optimizer CPU offload"),
            (tr.overlap_moe_expert_parallel_comm, "overlap_moe_expert_parallel_comm (its schedule changes the "
             "order GTP's prefetch chains follow)"),
            (par.fp32_local_grad_accumulation, "fp32_local_grad_accumulation"),
            (par.tp_comm_overlap, "tp_comm_overlap"),
            (tr.transformer_impl == "local", "transformer_impl local (Megatron's own linears take their weight "
             "gradients outside GTP's pool)"),
            (not tr.gradient_accumulation_fusion, "gradient_accumulation_fusion off (Transformer Engine then "
             "computes each weight gradient as a fresh tensor, held until its deferred reduce-scatter, instead of "
             "in GTP's pool: module/linear.py main_grad_func)")):
        if on:
            why.append(what)
    out += [Problem(field, value, f"GTP with {w} is not modelled") for w in why]
    return out
