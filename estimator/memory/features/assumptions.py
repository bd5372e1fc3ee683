"""The assumptions behind each feature's numbers, as sentences for ``Estimate.assumptions`` (``--assumptions``)."""

from __future__ import annotations

from ...config.derived import grad_comm_dtype
from ...config.limits import hybridep_domains
from ...config.rules.features import gtp_degrees
from ...config.tp_overlap import BRIDGE_CONFIGS
from ...model.resolve import DTYPE_BYTES
from . import comm_buffers, fsdp, paged_stash

__all__ = ["assumptions"]


def bm_weight(r) -> int:
    return DTYPE_BYTES[r.cfg.precision.params_dtype]

GIB = 2 ** 30


def assumptions(r) -> list[str]:
    """One sentence per feature in use (nothing for a configuration that uses none)."""
    cfg = r.cfg
    par, tr, pr, m = cfg.parallelism, cfg.training, cfg.precision, cfg.model
    out = []
    if par.use_megatron_fsdp:
        nd, ne, od, oe = fsdp.fsdp_shards(r)
        s = par.data_parallel_sharding_strategy
        out.append(f"Megatron-FSDP {s}: " + {
            "no_shard": "nothing sharded",
            "optim": f"optimizer states sharded over {od} ranks",
            "optim_grads": f"gradients over {nd} and optimizer states over {od} ranks",
            "optim_grads_params": f"weights and gradients over {nd}, optimizer states over {od} ranks"}[s]
            + (f" (HSDP: {par.num_distributed_optimizer_instances} outer replicas)"
               if par.num_distributed_optimizer_instances > 1 else "")
            + f"; per parameter weights {bm_weight(r)} B, gradients {fsdp.grad_bytes(r)} B "
              f"(megatron_fsdp_main_grads_dtype {pr.megatron_fsdp_main_grads_dtype}; buckets reduced in "
              f"{grad_comm_dtype(pr)}), master weights "
              f"{fsdp.master_bytes(r)} B and optimizer moments. Each transformer layer is a unit: "
            + ("two unit buffers each for gathered weights and unsharded gradients (double buffering)"
               if (par.fsdp_double_buffer or par.nccl_ub) else
               "the running unit plus the units prefetched up to 5e8 elements are gathered, and unsharded "
               "gradients wait for their reduce-scatter up to 1e9 elements")
            + "; the embedding and output layer stay gathered for the step; over a group of one rank nothing "
              "is gathered. Optimizer step: update_main_grads casts the gradient shard to the master weights' "
              "dtype (none with the precision-aware optimizer), then the optimizer's temporaries or, after them, "
              "the units gathered by start_param_sync, whichever is larger.")
    if par.use_torch_fsdp2:
        out.append(f"PyTorch FSDP2: weights, bf16 gradients and the optimizer's fp32 masters and moments sharded over "
                   f"{r.dp * r.cp} ranks; the running and the prefetched layer are gathered and two layers' "
                   "unsharded gradients exist at the peak"
                   + ("" if par.torch_fsdp2_reshard_after_forward else
                      "; without resharding after forward every layer stays gathered until its backward") + ".")
    g, ge = gtp_degrees(cfg)
    if g > 1 or ge > 1:
        out.append(f"GTP: GTP_remat {g} (dense weights, embedding and output layer), expert GTP_remat {ge} (routed "
                   "experts); each rank keeps its share of every such weight's rows (padded to 16 x GTP_remat) with "
                   "their gradients, the distributed optimizer shards over the data x context-parallel ranks / "
                   "GTP_remat; the all-gathered weights (one buffer per distinct shape, two per local expert and "
                   "role), the whole weight gradients and the reduce-scatter outputs stay in GTP's buffers for the "
                   "run. Estimated from Megatron-LM's source, not measured.")
    if par.num_distributed_optimizer_instances > 1 and not par.use_megatron_fsdp and tr.use_distributed_optimizer:
        out.append(f"Partial distributed optimizer: {par.num_distributed_optimizer_instances} instances, states "
                   f"sharded over {r.dp * r.cp // par.num_distributed_optimizer_instances} ranks each.")
    if tr.optimizer == "sgd":
        out.append("SGD: fp32 master weights" + (" and one fp32 momentum buffer" if tr.sgd_momentum > 0 else "")
                   + " per parameter.")
    elif tr.optimizer == "muon":
        out.append("Muon: 2-D linear weights keep an fp32 master and one momentum (8 B); embeddings, output layer, "
                   "norms, biases and router use Adam (12 B)"
                   + (("; sharded layer-wise over the data-parallel ranks (whole tensors, spread evenly here)"
                       if tr.use_layer_wise_param_layout else "; whole tensors handed to the data-parallel ranks in "
                       "ping-pong order of size: the figures are the busiest rank's, which holds the largest tensor "
                       "whole") if tr.use_distributed_optimizer else "; not sharded")
                   + ".")
    if tr.peft:
        tm = ", ".join(tr.peft_target_modules or ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"))
        name = {"lora": "LoRA", "dora": "DoRA"}.get(tr.peft, tr.peft)
        out.append(f"PEFT {name} rank {tr.peft_dim} on {tm}: base weights frozen (no gradients, no "
                   "optimizer states); frozen linears save no input, each adapter saves its input and its "
                   "rank-wide bottleneck" + ("; DoRA also keeps the pre-magnitude output" if tr.peft == "dora" else "")
                   + (("; routed experts' linear_fc1 / linear_fc2 get " + (
                       "one adapter shared by the rank's local experts" if tr.peft_share_expert_adapters
                       and cfg.model.moe_grouped_gemm else "one adapter per local expert")
                       + ", sharded over expert TP and the expert data-parallel group")
                      if cfg.model.num_experts and {"linear_fc1", "linear_fc2"} & set(
                          tr.peft_target_modules or ("linear_fc1",)) else "")
                   + ("; LoRA-A of linear_qkv / linear_fc1 keeps its sequence-local input and re-gathers it in "
                      "backward (sequence_parallel_input_regather)" if tr.peft_sequence_parallel_input_regather
                      else "")
                   + ".")
    if tr.optimizer_cpu_offload:
        out.append(f"Optimizer CPU offload (HybridDeviceOptimizer): whole tensors, in the optimizer's order, until "
                   f"{tr.optimizer_offload_fraction:g} of its parameters are stepped on the CPU (fp32 copy and "
                   "gradient pinned, states in pageable host memory, reported beside the device figures); the rest "
                   "by a fused Adam on fp32 copies on the GPU (in place). " + (
                       "The step adds an fp32 buffer of the largest offloaded tensor (the copy back to the GPU "
                       "converts there)" if cfg.precision.use_precision_aware_optimizer else
                       "Without the precision-aware optimizer (Megatron-Core and Megatron-Bridge take it, "
                       "Megatron-LM's arguments.py does not) the fp32 main copies of every parameter stay on the "
                       "GPU and only the moved parameters' moments leave it") + "; where the order is not "
                   "known tensor by tensor (sharded states, layers other than attention + MLP, MTP, experts) the "
                   "split is taken at the fraction exactly, an upper bound on the GPU part.")
    if tr.cpu_offloading or tr.cpu_offloading_num_layers:
        out.append(f"Layer-wise activation offloading: the activations of the first {tr.cpu_offloading_num_layers} "
                   "layers are in pinned host memory at the end of the forward pass.")
    if tr.fine_grained_activation_offloading:
        out.append("Fine-grained activation offloading (Megatron-Core's policy): the saved tensors of "
                   f"{', '.join(tr.offload_modules or ())} of at least {tr.min_offloaded_tensor_size:,} elements are "
                   "in pinned host memory, except the last layer's groups of the first backward chunk (the offload "
                   "margin), the last layer's groups of the last stage's loss chunk"
                   + (f", the later {1 - tr.activation_offload_fraction:g} of each chunk's groups"
                      if tr.activation_offload_fraction < 1 else "")
                   + (f", {tr.delta_offload_bytes_across_pp_ranks:,} B per pipeline rank"
                      if tr.delta_offload_bytes_across_pp_ranks else "")
                   + "; two groups are back at once in the backward pass. Copies that lag the forward pass are not "
                   "modelled: the error band (measured on Megatron-LM's CI runs) covers them.")
    if tr.moe_paged_stash:
        if paged_stash.applies(cfg):
            out.append(f"MoE paged stash: the experts' fc1 input, activation input and fc2 input of the MoE layers in "
                       f"flight leave for GPU buffers of {tr.moe_paged_stash_buffer_size_factor_cuda:g} x their "
                       "balanced rows (budget / moe_expert_rank_capacity_factor; a negative factor: the received rows)"
                       + (f" and pinned host buffers of {tr.moe_paged_stash_buffer_size_factor_cpu:g} x"
                          if tr.moe_paged_stash_buffer_size_factor_cpu else "")
                       + f", in pages of {tr.moe_paged_stash_page_size} rows; one layer's come back at the budget's "
                       "rows in the backward pass (Transformer Engine's fused grouped MLP assumed: "
                       "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 on a compute-capability-10 GPU). A step whose received rows "
                       "overflow the buffers is rerun without "
                       "the stash: the estimate then keeps the budget's rows, an upper bound on the rerun's. The first "
                       "(capture) step, which stashes nothing, is not estimated apart.")
        else:
            out.append("MoE paged stash: takes nothing here. Only Transformer Engine's fused grouped MLP marks the "
                       "experts' saved tensors for it (use_transformer_engine_op_fuser, moe_grouped_gemm and FP8 "
                       "recipe mxfp8, without full recompute); elsewhere Megatron-Core allocates no stash buffer.")
    if tr.cuda_graph_impl == "transformer_engine":
        out.append("CUDA graphs (transformer_engine"
                   + (f", modules {', '.join(tr.cuda_graph_modules)}" if tr.cuda_graph_modules else "")
                   + f"): the peak is the largest of the eager warm-up steps' ({tr.cuda_graph_warmup_steps}), the "
                   "capture's (model states, the captured parts' saved tensors of the in-flight micro-batches, "
                   "static buffers, one captured region's backward working set) and the steady state's (the "
                   "captured tensors in the private pool, reserved but not allocated: in the device figure). "
                   "The optimizer's moments are counted at the capture even when it precedes the first step.")
    elif tr.cuda_graph_impl == "full_iteration":
        out.append("CUDA graphs (full_iteration): the captured forward/backward allocates what the eager one does, "
                   "plus PyTorch's cuBLAS workspaces for the capture stream (2 x 32 MiB, held all run); the optimizer "
                   "step stays eager. The graph's private pool keeps the captured working set reserved beside the "
                   "step's own memory: the device figure adds the smaller of the two.")
    if par.tp_comm_overlap:
        cfg = par.tp_comm_overlap_cfg
        how = ("the default overlap configuration" if cfg is None else
               f"Megatron-Bridge's {cfg}" if cfg in BRIDGE_CONFIGS else "the given overlap configuration")
        out.append(f"TP communication overlap: twelve Transformer Engine userbuffers of [{r.s * r.b // r.cp}, {r.h}] "
                   f"tokens x hidden ({comm_buffers.tp_overlap_bytes(r) / GIB:.2f} GiB; a ring-exchange reduce-scatter "
                   f"holds 2 TP - 1 chunks of a TP-th) outside PyTorch's allocator, with {how}, and a 3 x 32 MiB "
                   "cuBLAS workspace for the overlapped GEMMs inside it.")
    if r.E and m.moe_token_dispatcher_type == "flex":
        if m.moe_flex_dispatcher_backend == "hybridep":
            G = r.ep * r.etp
            L, N = hybridep_domains(G, m.moe_hybridep_ranks_per_nvlink_domain)
            across = (f"{N} NVLink domains of {L} ranks: the NVLink buffers plus RDMA staging buffers and "
                      f"{2 * (N - 1) * (m.moe_flex_dispatcher_num_sms or 8)} queue pairs" if N > 1 else
                      f"one NVLink domain of {L} ranks, no RDMA buffers")
            out.append(f"Flex dispatcher (HybridEP, DeepEP @ 34152ae): buffers for the worst case of every token of "
                       f"the expert group ({G} ranks) reaching one rank, {comm_buffers.hybridep_bytes(r) / GIB:.2f} "
                       f"GiB outside PyTorch's allocator; {across} (moe_hybridep_ranks_per_nvlink_domain: HybridEP's "
                       "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN, 8 GPUs per host unless set).")
        else:
            out.append(f"Flex dispatcher (DeepEP, {m.moe_flex_dispatcher_num_sms or 20} SMs): DeepEP's NVLink (and, "
                       "beyond 8 ranks, RDMA) buffers from its recommended configurations, outside PyTorch's "
                       "allocator.")
    if par.nccl_ub:
        out.append("NCCL user buffers: the data-parallel buffers live in NCCL's own memory pool (no caching-allocator "
                   "reserve on them); NCCL's registration windows themselves are not counted.")
    if tr.overlap_moe_expert_parallel_comm:
        out.append("Expert-parallel overlap (combined 1F1B): the same (chunk-)micro-batches in flight as without it, "
                   "each MoE layer also keeping its shared experts' output for the backward pass; inside a step one "
                   "forward layer's pre-dispatch part (attention, pre-MLP norm, router) and its permuted tokens "
                   "waiting for the dispatch sit beside a backward layer's MLP backward, whose callers hold its "
                   "output gradient, the experts' output gradient and the .grad copies of its residual and shared "
                   "experts' output (or the forward layer's expert computation, where larger). With interleaving "
                   "the loss chunk is counted as still held then.")
        if tr.delay_wgrad_compute:
            out.append("Delayed weight gradients: inside a combined step the backward layer's experts (or dense MLP) "
                       "keep their output gradients and inputs past the forward layer's dispatch, its attention and "
                       "shared experts theirs to the end of the step; each moment is taken as a working set beside "
                       "the held micro-batches (an upper bound: tensors freed on the way, such as the norms' inputs, "
                       "are not all subtracted); balanced routing as everywhere.")
    if tr.defer_embedding_wgrad_compute:
        out.append("Deferred output-layer weight gradients: the last stage keeps the output layer's input and logits "
                   f"gradient of {'all' if not tr.wgrad_deferral_limit else tr.wgrad_deferral_limit} micro-batches "
                   "until the pipeline flush.")
    if pr.fp8 and pr.disable_parameter_transpose_cache and not pr.fp8_param_gather:
        out.append("FP8 without the weight cache: no FP8 copies kept with the weights; each in-flight micro-batch keeps "
                   "its chunk's row- and column-wise FP8 copies (2 B per linear weight).")
    if pr.fp8 and pr.first_last_layers_bf16:
        out.append(f"First {pr.num_layers_at_start_in_bf16} and last {pr.num_layers_at_end_in_bf16} layers in bf16: no "
                   "FP8 copies, bf16 activations.")
    if m.moe_router_dtype and r.E:
        out.append(f"Router logits and probabilities kept in {m.moe_router_dtype}.")
    return out
