"""The catalogue of Megatron-LM's arguments and their classification (modelled / no effect / refused).

The catalogue is Megatron-LM's own parser at the pinned revision (scripts/megatron_arguments.py). These
tests keep the classification complete and honest: every argument is classified exactly once, the
importer meets no flag outside the three classes, and every *modelled* flag changes the estimate in a
configuration where Megatron-Core allocates differently because of it.
"""

from __future__ import annotations

import re

import pytest

from estimator import ConfigError, estimate
from estimator.formats.megatron_args import HANDLED, RefusedFlagsError, read_megatron_args
from estimator.formats.megatron_catalog import ARGUMENTS, REVISION
from estimator.formats.megatron_flag_classes import MODELLED, NO_EFFECT, REFUSED, classify
from estimator.config.schema import field_specs

BASE = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
        "--vocab-size 1000 --micro-batch-size 1")
BF16 = BASE + " --bf16"
MOE = BF16 + " --num-experts 8 --moe-router-topk 2"
FULL_RECOMPUTE = " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
PA = (BF16.replace("--hidden-size 512", "--hidden-size 2048") + " --use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 "
      "--exp-avg-sq-dtype bf16" + FULL_RECOMPUTE)
EVAL = BF16 + " --grad-reduce-in-bf16" + FULL_RECOMPUTE
MLA = BF16 + " --multi-latent-attention"
PP2 = BF16 + " --pipeline-model-parallel-size 2"
TP2 = BF16 + " --tensor-model-parallel-size 2"
CP2 = BF16 + " --context-parallel-size 2"
FULL = BF16 + " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
UNFUSED = BF16 + " --attention-backend unfused"
DISTOPT = BF16 + " --use-distributed-optimizer"
PAO = DISTOPT + " --use-precision-aware-optimizer"
FP8 = DISTOPT + " --fp8-format hybrid"
FSDP = DISTOPT + " --use-megatron-fsdp"
FSDP2 = BF16 + " --use-torch-fsdp2 --untie-embeddings-and-output-weights --no-gradient-accumulation-fusion"
EP2 = MOE + " --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall"
FLEX = MOE + " --expert-model-parallel-size 2 --moe-token-dispatcher-type flex"
TEG = BF16 + " --cuda-graph-impl transformer_engine"
DEFER = PP2 + " --global-batch-size 8 --defer-embedding-wgrad-compute"
FP8CS = FP8 + " --fp8-recipe tensorwise"
GDN = BF16 + " --experimental-attention-variant gdn --linear-attention-freq 2"
HYB = BF16 + " --hybrid-layer-pattern M*M-"
DSA = (MLA + " --disable-bias-linear --experimental-attention-variant dsa --dsa-indexer-n-heads 4 "
       "--dsa-indexer-head-dim 64 --dsa-indexer-topk 16")
HYBRIDEP = FLEX + " --moe-router-dtype fp32 --moe-flex-dispatcher-backend hybridep"
BUDGET = HYBRIDEP + " --moe-expert-rank-capacity-factor 1.5"
STASH_NO_FUSER = BUDGET + " --moe-grouped-gemm --use-distributed-optimizer --fp8-format e4m3 --fp8-recipe mxfp8 --moe-paged-stash"
STASH = STASH_NO_FUSER + " --use-transformer-engine-op-fuser"
#: Fine-grained activation offloading: MoE layers with MLA (own attention norm), PP 2 with VPP 2 and 4 micro-batches.
FGO_BASE = (MOE.replace("--num-layers 4", "--num-layers 8") + " --multi-latent-attention --pipeline-model-parallel-size "
            "2 --num-layers-per-virtual-pipeline-stage 2 --global-batch-size 16 --attention-backend unfused")
FGO = FGO_BASE + " --fine-grained-activation-offloading --offload-modules core_attn attn_norm"

#: Four heterogeneous blocks: the second without attention, the third with a narrower MLP.
HETERO = ('{"block_configs": [{"attention": {}, "mlp": {}}, {"attention": {"no_op": true}, "mlp": {}}, '
          '{"attention": {}, "mlp": {"ffn_hidden_size": 256}}, {"attention": {}, "mlp": {}}]}')

#: Modelled argument -> (base command, flags added): Megatron-Core allocates differently with them.
CHANGES = {
    "num_layers": (BF16, "--num-layers 8"),
    # dynamic CP, world 8: 1,024-token sequences at most 256 a rank run over 4 ranks (256 tokens each), against the
    # plain run's 1,024 on one; at most 1,024 a rank they run whole
    "hybrid_context_parallel": (BF16 + " --max-seqlen-per-dp-cp-rank 256", "--hybrid-context-parallel", BF16),
    "max_seqlen_per_dp_cp_rank": (BF16 + " --hybrid-context-parallel", "--max-seqlen-per-dp-cp-rank 256",
                                  BF16 + " --hybrid-context-parallel --max-seqlen-per-dp-cp-rank 1024"),
    "hidden_size": (BF16, "--hidden-size 1024"),
    "num_attention_heads": (BF16, "--num-attention-heads 16"),
    "ffn_hidden_size": (BF16, "--ffn-hidden-size 1024"),
    "kv_channels": (BF16, "--kv-channels 128"),
    "num_query_groups": (BF16 + " --group-query-attention", "--num-query-groups 2"),
    "group_query_attention": (BF16 + " --num-query-groups 2", "--group-query-attention"),
    "vocab_size": (BF16, "--vocab-size 5000"),
    "make_vocab_size_divisible_by": (BF16, "--make-vocab-size-divisible-by 3000"),
    "max_position_embeddings": (BF16, "--max-position-embeddings 4096"),
    "position_embedding_type": (BF16, "--position-embedding-type rope"),
    "use_rotary_position_embeddings": (BF16, "--use-rotary-position-embeddings"),
    "normalization": (BF16, "--normalization RMSNorm"),
    "qk_layernorm": (BF16, "--qk-layernorm"),
    "add_bias_linear": (BF16, "--disable-bias-linear"),
    "add_qkv_bias": (BF16 + " --disable-bias-linear", "--add-qkv-bias"),
    "untie_embeddings_and_output_weights": (BF16, "--untie-embeddings-and-output-weights"),
    "swiglu": (BF16, "--swiglu"),
    "quick_geglu": (BF16, "--quick-geglu"),
    "hidden_dropout": (BF16, "--hidden-dropout 0"),
    "attention_dropout": (UNFUSED, "--attention-dropout 0"),
    "multi_latent_attention": (BF16, "--multi-latent-attention"),
    "q_lora_rank": (MLA, "--q-lora-rank 64"),
    "kv_lora_rank": (MLA, "--kv-lora-rank 64"),
    "qk_head_dim": (MLA, "--qk-head-dim 64"),
    "qk_pos_emb_head_dim": (MLA, "--qk-pos-emb-head-dim 32"),
    "v_head_dim": (MLA, "--v-head-dim 64"),
    "mtp_num_layers": (BF16, "--mtp-num-layers 1"),
    "mtp_use_repeated_layer": (BF16 + " --mtp-num-layers 2", "--mtp-use-repeated-layer"),
    "mtp_hsm": (BF16 + " --mtp-num-layers 2", "--mtp-hsm"),
    "num_experts": (BF16, "--num-experts 8"),
    "moe_layer_freq": (MOE, "--moe-layer-freq 2"),
    "moe_router_topk": (MOE, "--moe-router-topk 4"),
    "moe_ffn_hidden_size": (MOE, "--moe-ffn-hidden-size 256"),
    "moe_shared_expert_intermediate_size": (MOE, "--moe-shared-expert-intermediate-size 512"),
    "moe_shared_expert_gate": (MOE + " --moe-shared-expert-intermediate-size 512", "--moe-shared-expert-gate"),
    "moe_router_enable_expert_bias": (MOE, "--moe-router-enable-expert-bias"),
    "moe_grouped_gemm": (MOE, "--moe-grouped-gemm"),
    "moe_expert_capacity_factor": (MOE, "--moe-expert-capacity-factor 0.5"),
    "moe_pad_expert_input_to_capacity": (MOE + " --moe-expert-capacity-factor 1.5",
                                         "--moe-pad-expert-input-to-capacity"),
    "padded_vocab_size": (BF16, "--padded-vocab-size 2048"),
    "tensor_model_parallel_size": (BF16, "--tensor-model-parallel-size 2"),
    "pipeline_model_parallel_size": (BF16, "--pipeline-model-parallel-size 2"),
    "context_parallel_size": (BF16, "--context-parallel-size 2"),
    "expert_model_parallel_size": (MOE, "--expert-model-parallel-size 2"),
    "expert_tensor_parallel_size": (MOE + " --tensor-model-parallel-size 2", "--expert-tensor-parallel-size 1"),
    "sequence_parallel": (TP2, "--sequence-parallel"),
    "cp_comm_type": (CP2, "--cp-comm-type a2a"),
    "num_layers_per_virtual_pipeline_stage": (PP2, "--num-layers-per-virtual-pipeline-stage 1"),
    "num_virtual_stages_per_pipeline_rank": (PP2, "--num-virtual-stages-per-pipeline-rank 2"),
    "decoder_first_pipeline_num_layers": (PP2, "--decoder-first-pipeline-num-layers 1"),
    "pipeline_model_parallel_layout": (PP2 + " --global-batch-size 8", "--pipeline-model-parallel-layout Et|t|t|tL"),
    # (base, flag, without): 7 layers need an explicit split without the slot; with it, 8 slots split 4 + 4
    "account_for_embedding_in_pipeline_split": (PP2.replace("--num-layers 4", "--num-layers 7"),
                                                "--account-for-embedding-in-pipeline-split",
                                                PP2.replace("--num-layers 4", "--num-layers 7")
                                                + " --decoder-first-pipeline-num-layers 4"),
    "account_for_loss_in_pipeline_split": (PP2.replace("--num-layers 4", "--num-layers 7"),
                                           "--account-for-loss-in-pipeline-split",
                                           PP2.replace("--num-layers 4", "--num-layers 7")
                                           + " --decoder-last-pipeline-num-layers 4"),
    "microbatch_group_size_per_vp_stage": (PP2 + " --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 16",
                                           "--microbatch-group-size-per-virtual-pipeline-stage 4"),
    "decoder_last_pipeline_num_layers": (PP2, "--decoder-last-pipeline-num-layers 1"),
    "micro_batch_size": (BF16, "--micro-batch-size 2"),
    "global_batch_size": (PP2, "--global-batch-size 4"),
    "seq_length": (BF16, "--seq-length 512"),
    "encoder_seq_length": (BF16.replace("--seq-length 1024", ""), "--encoder-seq-length 512"),
    "recompute_granularity": (BF16, "--recompute-granularity full"),
    "recompute_method": (FULL, "--recompute-method block"),
    "recompute_num_layers": (FULL, "--recompute-num-layers 2"),
    "recompute_modules": (BF16 + " --recompute-granularity selective", "--recompute-modules mlp"),
    "distribute_saved_activations": (FULL + " --tensor-model-parallel-size 2", "--distribute-saved-activations"),
    "recompute_activations": (UNFUSED, "--recompute-activations"),
    "moe_layer_recompute": (MOE, "--moe-layer-recompute"),
    "deterministic_mode": (MOE, "--deterministic-mode"),
    "attention_backend": (BF16, "--attention-backend unfused"),
    # the native fusion's torch.compile buffer (Transformer Engine's 2.18+ kernel keeps the unfused loss's bytes)
    "cross_entropy_loss_fusion": (BF16, "--cross-entropy-loss-fusion"),
    "cross_entropy_fusion_impl": (BF16 + " --cross-entropy-loss-fusion", "--cross-entropy-fusion-impl te"),
    "transformer_impl": (BF16, "--transformer-impl local"),
    "gradient_accumulation_fusion": (BF16, "--no-gradient-accumulation-fusion"),
    "masked_softmax_fusion": (BF16 + " --transformer-impl local", "--no-masked-softmax-fusion"),
    "create_attention_mask_in_dataloader": (BF16 + " --transformer-impl local --no-masked-softmax-fusion",
                                            "--no-create-attention-mask-in-dataloader"),
    "use_distributed_optimizer": (BF16, "--use-distributed-optimizer"),
    "fp16": (BASE, "--fp16"),
    "bf16": (BASE, "--bf16"),
    "fp8": (DISTOPT, "--fp8-format hybrid"),
    "fp8_recipe": (FP8 + " --use-precision-aware-optimizer", "--fp8-recipe tensorwise"),
    "fp8_param_gather": (FP8, "--fp8-param-gather"),
    "fp8_output_proj": (FP8 + " --fp8-recipe mxfp8 --untie-embeddings-and-output-weights", "--fp8-output-proj"),
    "logit_dtype": (BF16, "--output-logit-dtype fp32"),
    # distill29: the full-recompute checkpoint keeps the fp32 layer input (4 B per element)
    "fp32_residual_connection": (FULL, "--fp32-residual-connection"),
    "mlp_chunks_for_training": (BF16, "--mlp-chunks-for-training 4"),
    "ep_overlap_early_attn_memory_release": (
        BF16.replace("--vocab-size 1000", "--vocab-size 1024") + " --swiglu --num-experts 8 --moe-router-topk 2 "
        "--moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 512 --tensor-model-parallel-size 2 "
        "--sequence-parallel --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall "
        "--overlap-moe-expert-parallel-comm", "--ep-overlap-early-attn-memory-release"),
    "moe_apply_probs_on_input": (MOE.replace("--moe-router-topk 2", "--moe-router-topk 1"),
                                 "--moe-apply-probs-on-input"),
    "fp4": (DISTOPT, "--fp4-format e2m1"),
    "fp4_param_gather": (DISTOPT + " --fp4-format e2m1", "--fp4-param-gather"),
    "te_precision_config_file": (DISTOPT + " --fp4-format e2m1", "--te-precision-config-file te_quant.yaml"),
    "accumulate_allreduce_grads_in_fp32": (BASE + " --fp16", "--accumulate-allreduce-grads-in-fp32"),
    "grad_reduce_in_bf16": (BF16, "--grad-reduce-in-bf16"),
    "use_precision_aware_optimizer": (DISTOPT, "--use-precision-aware-optimizer"),
    "main_grads_dtype": (PAO, "--main-grads-dtype bf16"),
    "main_params_dtype": (PAO.replace("--bf16", "--fp16"), "--main-params-dtype fp16"),
    "exp_avg_dtype": (PAO, "--exp-avg-dtype bf16"),
    "exp_avg_sq_dtype": (PAO, "--exp-avg-sq-dtype bf16"),
    "use_megatron_fsdp": (DISTOPT, "--use-megatron-fsdp"),
    "use_torch_fsdp2": (FSDP2.replace(" --use-torch-fsdp2", ""), "--use-torch-fsdp2"),
    "data_parallel_sharding_strategy": (FSDP, "--data-parallel-sharding-strategy optim"),
    "outer_dp_sharding_strategy": (FSDP + " --num-distributed-optimizer-instances 2", "--outer-dp-sharding-strategy optim"),
    "fsdp_double_buffer": (FSDP, "--fsdp-double-buffer"),
    "megatron_fsdp_max_pool_double_buffer": (FSDP, "--megatron-fsdp-max-pool-double-buffer"),
    "suggested_communication_unit_size": (FSDP, "--suggested-communication-unit-size 1000"),
    "torch_fsdp2_reshard_after_forward": (FSDP2, "--torch-fsdp2-no-reshard-after-forward"),
    "megatron_fsdp_main_params_dtype": (FSDP, "--megatron-fsdp-main-params-dtype bf16"),
    "megatron_fsdp_main_grads_dtype": (FSDP, "--megatron-fsdp-main-grads-dtype fp32"),
    "megatron_fsdp_grad_comm_dtype": (FSDP, "--megatron-fsdp-grad-comm-dtype fp32"),
    "num_distributed_optimizer_instances": (DISTOPT, "--num-distributed-optimizer-instances 2"),
    "optimizer": (BF16, "--optimizer sgd"),
    "sgd_momentum": (BF16 + " --optimizer sgd", "--sgd-momentum 0"),
    "optimizer_cpu_offload": (PAO, "--optimizer-cpu-offload"),
    "optimizer_offload_fraction": (PAO + " --optimizer-cpu-offload", "--optimizer-offload-fraction 0.5"),
    "cpu_offloading_num_layers": (BF16, "--cpu-offloading-num-layers 2"),
    "fine_grained_activation_offloading": (FGO_BASE, "--fine-grained-activation-offloading --offload-modules "
                                           "core_attn"),
    "offload_modules": (FGO, "--offload-modules core_attn attn_norm expert_fc1", FGO),
    "min_offloaded_tensor_size": (FGO, "--min-offloaded-tensor-size 100000000"),
    "activation_offload_fraction": (FGO, "--activation-offload-fraction 0.5"),
    "delta_offload_bytes_across_pp_ranks": (FGO, "--delta-offload-bytes-across-pp-ranks 100000000"),
    "cuda_graph_impl": (BF16, "--cuda-graph-impl transformer_engine"),
    "cuda_graph_modules": (TEG, "--cuda-graph-modules attn"),
    "cuda_graph_warmup_steps": (TEG + " --cuda-graph-modules attn", "--cuda-graph-warmup-steps 0"),
    "use_layer_wise_param_layout": (DISTOPT + " --optimizer muon", "--no-use-layer-wise-param-layout"),
    "muon_fp32_matmul_prec": (DISTOPT + " --optimizer muon", "--muon-fp32-matmul-prec high"),
    "muon_tp_mode": (DISTOPT + " --optimizer muon", "--muon-tp-mode blockwise"),
    "muon_nesterov": (DISTOPT + " --optimizer muon", "--muon-nesterov"),
    "muon_split_qkv": (DISTOPT + " --optimizer muon --ffn-hidden-size 128", "--muon-no-split-qkv"),
    "cuda_graph_scope_deprecated": (TEG, "--cuda-graph-scope attn"),
    "external_cuda_graph": (BF16, "--external-cuda-graph"),
    "tp_comm_overlap": (TP2 + " --sequence-parallel", "--tp-comm-overlap"),
    "tp_comm_overlap_cfg": (TP2 + " --sequence-parallel --tp-comm-overlap", "--tp-comm-overlap-cfg ub_ring_rs.yaml"),
    "heterogeneous_layers_config_encoded_json": (BF16, "--heterogeneous-layers-config-encoded-json '" + HETERO + "'"),
    "heterogeneous_layers_config_path": (BF16, "--heterogeneous-layers-config-path blocks.json"),
    "nccl_ub": (DISTOPT, "--use-nccl-ub"),
    # flagsB28: one more NCCL communicator (the data-parallel group's all-gather copy) with Megatron-FSDP
    "create_all_gather_group": (FSDP, "--create-all-gather-group"),
    # two of the four layers gathered at the peak: the other two's kept FP8 transposes are new
    "keep_fp8_transpose_cache": (FSDP + " --fp8-format hybrid --fp8-param-gather --suggested-communication-unit-size 100",
                                 "--keep-fp8-transpose-cache"),
    # a bf16 gradient buffer: the step's fp32 gradient copies stay in the graph's pool
    "optimizer_cuda_graph": (DISTOPT + " --grad-reduce-in-bf16", "--optimizer-cuda-graph"),
    # the receive copy and fp32 shard sum after the backward pass outweigh the step's fp32 gradient copies
    "ddp_reduce_scatter_with_fp32_accumulation": (DISTOPT + " --grad-reduce-in-bf16",
                                                  "--ddp-reduce-scatter-with-fp32-accumulation"),
    "ddp_param_name_patterns_for_fp32_local_accumulation": (DISTOPT + " --grad-reduce-in-bf16",
                                                            "--ddp-param-name-patterns-for-fp32-local-accumulation all"),
    "moe_token_dispatcher_type": (EP2, "--moe-token-dispatcher-type flex"),
    "moe_flex_dispatcher_backend": (FLEX + " --moe-router-dtype fp32", "--moe-flex-dispatcher-backend hybridep"),
    "moe_enable_deepep": (EP2, "--moe-enable-deepep"),
    "moe_flex_dispatcher_num_sms": (FLEX, "--moe-flex-dispatcher-num-sms 32"),
    "moe_deepep_num_sms": (FLEX, "--moe-deepep-num-sms 32"),
    "moe_hybridep_num_sms": (FLEX, "--moe-hybridep-num-sms 32"),
    "overlap_moe_expert_parallel_comm": (EP2, "--overlap-moe-expert-parallel-comm"),
    "overlap_dispatch_backward_with_experts_wgrad": (EP2 + " --moe-grouped-gemm",
                                                     "--overlap-dispatch-backward-with-experts-wgrad"),
    # HybridEP's static budget (1.5 x the balanced 2,048 rows: 3,072) and the paged stash (estimator/memory/features/
    # paged_stash.py), which takes the experts' saved tensors only in Transformer Engine's fused grouped MLP (op fuser,
    # mxfp8).
    "moe_expert_rank_capacity_factor": (HYBRIDEP, "--moe-expert-rank-capacity-factor 1.5"),
    "moe_paged_stash": (STASH.replace(" --moe-paged-stash", ""), "--moe-paged-stash"),
    "use_transformer_engine_op_fuser": (STASH_NO_FUSER, "--use-transformer-engine-op-fuser"),
    "moe_paged_stash_page_size": (STASH, "--moe-paged-stash-page-size 4096"),
    "moe_paged_stash_buffer_size_factor_cuda": (STASH, "--moe-paged-stash-buffer-size-factor-cuda 2.0"),
    "moe_paged_stash_buffer_size_factor_cpu": (STASH, "--moe-paged-stash-buffer-size-factor-cpu 1.0"),
    # fine-grained SwiGLU experts without gradient-accumulation fusion: the kept packed expert gradients outgrow
    # the plain combined step (with the fusion the MLP window only matches it: tests/memory/features/test_delayed_wgrad.py)
    "delay_wgrad_compute": (EP2 + " --swiglu --moe-ffn-hidden-size 256 --overlap-moe-expert-parallel-comm"
                            " --no-gradient-accumulation-fusion", "--delay-wgrad-compute"),
    "defer_embedding_wgrad_compute": (PP2 + " --global-batch-size 8", "--defer-embedding-wgrad-compute"),
    "wgrad_deferral_limit": (DEFER, "--wgrad-deferral-limit 1"),
    "first_last_layers_bf16": (FP8CS, "--first-last-layers-bf16"),
    "num_layers_at_start_in_bf16": (FP8CS + " --first-last-layers-bf16", "--num-layers-at-start-in-bf16 2"),
    "num_layers_at_end_in_bf16": (FP8CS + " --first-last-layers-bf16", "--num-layers-at-end-in-bf16 2"),
    "moe_router_dtype": (MOE, "--moe-router-dtype fp32 --moe-z-loss-coeff 0.001", MOE + " --moe-z-loss-coeff 0.001"),
    "moe_router_score_function": (MOE, "--moe-router-score-function sigmoid"),
    "moe_router_pre_softmax": (MOE, "--moe-router-pre-softmax"),
    "moe_router_num_groups": (MOE, "--moe-router-num-groups 4 --moe-router-group-topk 2"),
    "moe_router_group_topk": (MOE, "--moe-router-num-groups 4 --moe-router-group-topk 2"),
    "moe_router_load_balancing_type": (MOE + " --moe-aux-loss-coeff 0.01", "--moe-router-load-balancing-type none"),
    "moe_aux_loss_coeff": (MOE, "--moe-aux-loss-coeff 0.01"),
    "moe_z_loss_coeff": (MOE, "--moe-z-loss-coeff 0.001"),
    "moe_router_fusion": (MOE, "--moe-router-fusion"),
    "moe_permute_fusion": (MOE, "--moe-permute-fusion"),
    "softmax_type": (BF16, "--softmax-type learnable"),
    "attention_output_gate": (BF16, "--attention-output-gate"),
    "qk_l2_norm": (BF16, "--qk-l2-norm"),
    "moe_latent_size": (MOE, "--moe-latent-size 128"),
    "experimental_attention_variant": (BF16 + " --linear-attention-freq 2", "--experimental-attention-variant gdn",
                                       BF16),
    "linear_attention_freq": (GDN, "--linear-attention-freq 4"),
    "dsa_indexer_n_heads": (DSA, "--dsa-indexer-n-heads 8"),
    "dsa_indexer_head_dim": (DSA, "--dsa-indexer-head-dim 128"),
    "dsa_indexer_topk": (DSA + " --dsa-kernel-backend tilelang", "--dsa-indexer-topk 32"),
    "dsa_indexer_loss_coeff": (DSA, "--dsa-indexer-loss-coeff 0.001"),
    "dsa_kernel_backend": (DSA, "--dsa-kernel-backend tilelang"),
    # cross-layer top-k sharing: layers 2 and 4 (of 1-4) reuse a top-k; offset 2 makes layer 3 the only one
    "dsa_indexer_topk_freq": (DSA, "--dsa-indexer-topk-freq 2"),
    "dsa_indexer_skip_topk_offset": (DSA + " --dsa-indexer-topk-freq 2", "--dsa-indexer-skip-topk-offset 2"),
    # the sparse indexer loss: with shared top-k and cuDNN the fused kernel keeps only the indexer's gradients
    "dsa_indexer_use_sparse_loss": (DSA + " --dsa-kernel-backend cudnn --dsa-indexer-topk-freq 2 "
                                    "--dsa-indexer-loss-coeff 0.001", "--dsa-indexer-use-sparse-loss"),
    "linear_conv_kernel_dim": (GDN, "--linear-conv-kernel-dim 8"),
    "linear_key_head_dim": (GDN, "--linear-key-head-dim 64"),
    "linear_value_head_dim": (GDN, "--linear-value-head-dim 64"),
    "linear_num_key_heads": (GDN, "--linear-num-key-heads 8"),
    "linear_num_value_heads": (GDN, "--linear-num-value-heads 16"),
    "hybrid_layer_pattern": (BF16, "--hybrid-layer-pattern M*M-"),
    "hybrid_override_pattern": (BF16, "--hybrid-override-pattern M*M-"),
    "mtp_hybrid_override_pattern": (HYB + " --mtp-num-layers 1", "--mtp-hybrid-override-pattern M-"),
    "mamba_state_dim": (HYB, "--mamba-state-dim 64"),
    "mamba_head_dim": (HYB, "--mamba-head-dim 32"),
    "mamba_num_groups": (HYB, "--mamba-num-groups 4"),
    "mamba_num_heads": (HYB, "--mamba-num-heads 8"),
    "use_mamba_mem_eff_path": (HYB, "--disable-mamba-mem-eff-path"),
    # The phases beyond the steady step (estimator/memory/phases.py): with full recompute the steady step holds
    # little, so the precision-aware optimizer's fp32 state copies at a checkpoint save, or evaluation's forward
    # beside the fp32 gradient copies of a bf16 gradient buffer, hold the peak.
    "save_interval": (PA, "--save-interval 100"),
    "ckpt_format": (PA + " --save-interval 100", "--ckpt-format torch"),
    "eval_interval": (EVAL, "--eval-interval 10"),
    "eval_iters": (EVAL + " --eval-interval 10", "--eval-iters 0"),
    "eval_micro_batch_size": (EVAL + " --eval-interval 10", "--eval-micro-batch-size 4"),
    # gtp29: generalised tensor parallelism (estimator/memory/features/gtp.py); 8 GPUs, DP 8
    "tensor_parallel_num_weight_shards": (DISTOPT, "--tensor-parallel-num-weight-shards 2"),
    "expert_tensor_parallel_num_weight_shards": (MOE, "--expert-tensor-parallel-num-weight-shards 2"),
    "gtp_remat_opt_in_modules": (MOE + " --moe-latent-size 128 --tensor-parallel-num-weight-shards 2",
                                 "--gtp-remat-opt-in-modules moe_latent_proj"),
    "gtp_remat_reduce_scatter_with_fp32_accumulation": (DISTOPT + " --tensor-parallel-num-weight-shards 4",
                                                        "--gtp-remat-reduce-scatter-with-fp32-accumulation"),
    "gtp_remat_nccl_ub": (DISTOPT + " --tensor-parallel-num-weight-shards 2", "--gtp-remat-nccl-ub"),
    "gtp_expert_remat_nccl_ub": (MOE + " --expert-tensor-parallel-num-weight-shards 2", "--gtp-expert-remat-nccl-ub"),
}


#: Modelled flags whose effect is on the reserved memory of the allocator replay only
#: (``training.reserved_memory_model: replay``): (base, flag), the replay's reserved bytes differ.
REPLAY_CHANGES = {
    "empty_unused_memory_level": (BF16.replace("--hidden-size 512", "--hidden-size 2048") + " --swiglu "
                                  "--global-batch-size 32 --use-distributed-optimizer", "--empty-unused-memory-level 1"),
}


#: Files the flags above name (read_megatron_args's read_file): proj_fprop and fc2_fprop as ring-exchange
#: reduce-scatters (larger userbuffers than the default pipeline ones).
FILES = {"ub_ring_rs.yaml": "proj_fprop:\n  method: ring_exchange\nfc2_fprop:\n  method: ring_exchange\n",
         "blocks.json": HETERO,
         # a per-module recipe (Megatron-Core's RecipeConfig YAML): the QKV projections in bf16
         "te_quant.yaml": "configs:\n  bf16:\n    transformer_engine_config_type: TEQuantizationParams\n"
                          "    training_recipe: {}\nmatchers:\n  qkv:\n    config: bf16\n    type: glob\n"
                          "    pattern: '*.linear_qkv'\n    enabled: true\n"}

#: Modelled flags that the configuration needs rather than changes: without them it is refused (base, flag).
ENABLES = {
    "reuse_grad_buf_for_mxfp8_param_ag": (FP8 + " --fp8-recipe mxfp8 --fp8-param-gather",
                                          "--reuse-grad-buf-for-mxfp8-param-ag"),
    # a2a+p2p needs the sizes (Megatron-LM's arguments.py); their groups' NCCL buffers change the device total
    "hierarchical_context_parallel_sizes": (CP2 + " --cp-comm-type a2a+p2p", "--hierarchical-context-parallel-sizes 2 1"),
}


#: Modelled flags whose configuration needs a field the student's flags cannot give (base, flags added, fields set
#: after the import). distill29: the cached teacher files' top-K is the teacher run's --logits-save-top-k.
NEEDS = {
    "logits_load_dir": (BF16, "--logits-load-dir /data/teacher_logprobs", {"training": {"distillation_top_k": 64}}),
}


def _stages(cmd: str, replay: bool = False, fields: dict | None = None) -> list:
    config = read_megatron_args(cmd, world_size=8, read_file=FILES.get).config
    for sec, values in (fields or {}).items():
        config[sec].update(values)
    if replay:
        config["training"]["reserved_memory_model"] = "replay"
    return estimate(config).to_dict()["stages"]


def test_catalogue_is_megatron_lm_at_the_pinned_revision():
    """The revision the project mirrors (helper guide); Megatron-LM's parser has several hundred arguments."""
    assert REVISION == "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
    assert len(ARGUMENTS) > 800
    assert ARGUMENTS["tensor_model_parallel_size"][0] == ("--tensor-model-parallel-size",)
    assert ARGUMENTS["add_bias_linear"][0] == ("--disable-bias-linear",)


def test_every_argument_is_classified_exactly_once():
    unclassified = [d for d in ARGUMENTS if classify(d) is None]
    assert unclassified == []
    tables = (MODELLED, NO_EFFECT, REFUSED)
    for i, a in enumerate(tables):
        for b in tables[i + 1:]:
            assert not set(a) & set(b)
    stale = [d for t in tables for d in t if d not in ARGUMENTS]
    assert stale == [], "classified arguments Megatron-LM no longer defines"
    assert all(reason.strip() for t in tables for reason in t.values())


def test_the_issue_list_is_modelled_or_refused():
    """Issue 9's list of flags that changed memory but were silently ignored: each is now modelled or refused
    (those no longer defined at this revision are unknown flags, an error of their own). --mtp-standalone is
    the one exception: it changes only the pipeline's send/receive shapes; where the MTP layers sit comes
    from the layout, which is modelled."""
    listed = ("microbatch-group-size-per-virtual-pipeline-stage overlap-moe-expert-parallel-comm delay-wgrad-compute "
              "defer-embedding-wgrad-compute wgrad-deferral-limit first-last-layers-bf16 fp8-dot-product-attention "
              "mtp-use-repeated-layer mtp-standalone moe-latent-size experimental-attention-variant "
              "linear-attention-freq enable-mhc-connections attention-output-gate moe-paged-stash "
              "moe-expert-rank-capacity-factor moe-flex-dispatcher-backend moe-router-dtype nccl-ub "
              "hierarchical-context-parallel-sizes offload-modules "
              "num-microbatches-with-partial-activation-checkpoints tensor-parallel-num-weight-shards "
              "disable-parameter-transpose-cache")
    flags = {f: d for d, (fl, _, _) in ARGUMENTS.items() for f in fl}
    for name in listed.split():
        dest = flags.get("--" + name)
        if dest is None:
            with pytest.raises(ConfigError, match="not an argument"):
                read_megatron_args(f"{BF16} --{name} 2")
            continue
        kind = classify(dest)[0]
        assert kind in ("modelled", "refused") or dest == "mtp_standalone", name


def test_schema_flags_are_megatron_flags():
    """Each schema field's Megatron flag exists at the pinned revision (a few fields are set by special flags)."""
    flags = {f for fl, _, _ in ARGUMENTS.values() for f in fl}
    special = {"--swiglu", "--add-bias-linear", "--bf16", "--fp8-format", "--gradient-accumulation-fusion"}
    bad = [s.path for s in field_specs() if s.flag and s.flag not in flags and s.flag not in special]
    assert bad == []


def test_modelled_flags_are_translated_and_refused_ones_never_are():
    assert set(MODELLED) <= HANDLED
    assert not {d for d in HANDLED if classify(d)[0] == "refused"}


@pytest.mark.parametrize("dest", sorted(MODELLED))
def test_a_modelled_flag_changes_the_estimate(dest):
    if dest in ENABLES:     # the estimate needs it: without it the configuration is refused by name
        base, extra = ENABLES[dest]
        with pytest.raises(ConfigError, match=dest):
            _stages(base)
        assert _stages(f"{base} {extra}")
        return
    if dest in REPLAY_CHANGES:
        base, extra = REPLAY_CHANGES[dest]
        assert _stages(base) == _stages(f"{base} {extra}")          # allocated x 1.05: unchanged
        assert _stages(base, replay=True) != _stages(f"{base} {extra}", replay=True)
        return
    if dest in NEEDS:       # the import alone is refused by name until the field is given
        base, extra, fields = NEEDS[dest]
        with pytest.raises(ConfigError, match=next(iter(next(iter(fields.values())))) + ": is required"):
            _stages(f"{base} {extra}")
        assert _stages(base) != _stages(f"{base} {extra}", fields=fields)
        return
    assert dest in CHANGES, f"add a configuration where {dest} changes the estimate"
    base, extra, *without = CHANGES[dest]
    assert _stages(without[0] if without else base) != _stages(f"{base} {extra}")


def _values(arity, default):
    if arity == 0:
        return [[]]
    one = [str(default)] if default is not None and not isinstance(default, tuple) else []
    return [one or ["1"], ["1"], ["x"]] if arity in (1, "?") else [list(map(str, default or ("1",))), ["x"]]


@pytest.mark.parametrize("dest", sorted(ARGUMENTS))
def test_the_importer_meets_no_unclassified_flag(dest):
    """Every option string of every argument, with a plausible and a bad value: the importer either translates
    it, lists it as without effect (or a note), or refuses it by name; a bad value is an error naming the flag.
    Never a raw exception."""
    flags, arity, default = ARGUMENTS[dest]
    for flag in flags:
        for values in _values(arity, default):
            cmd = f"{MOE} {flag} {' '.join(values)}".rstrip()
            try:
                imp = read_megatron_args(cmd, world_size=8)
            except RefusedFlagsError as exc:
                assert any(f.split()[0] == flag for f, _ in exc.refused)
                continue
            except ConfigError as exc:
                assert any(flag in p.field or flag in p.message or "--" in p.field for p in exc.problems), exc
                continue
            listed = any(f.split()[0] == flag for f, _ in imp.no_effect) or any(flag in n for n in imp.notes)
            assert listed or dest in HANDLED, (flag, values)


def test_unknown_flags_are_errors_with_close_matches():
    with pytest.raises(ConfigError) as exc:
        read_megatron_args(BF16 + " --recompute-granularty full --nccl-ub")
    text = str(exc.value)
    assert "--recompute-granularty" in text and "did you mean --recompute-granularity" in text
    assert "--nccl-ub" in text and "--use-nccl-ub" in text


def test_refused_flags_are_all_named_with_their_reason():
    with pytest.raises(RefusedFlagsError) as exc:
        read_megatron_args(BF16 + " --moe-use-upcycling --kitchen-attention-backend fa "
                           "--optimizer lion")
    assert [f for f, _ in exc.value.refused] == ["--moe-use-upcycling",
                                                 "--kitchen-attention-backend fa", "--optimizer lion"]
    assert all(re.search(r"modelled", why) for _, why in exc.value.refused)


def test_refused_flags_at_megatrons_default_are_harmless():
    """--muon-scalar-optimizer adam and --kitchen-attention-backend sdpa are what Megatron-LM does anyway."""
    imp = read_megatron_args(PP2 + " --muon-scalar-optimizer adam --kitchen-attention-backend sdpa")
    assert len(imp.notes) == 2 and all("Megatron-LM's default" in n for n in imp.notes)
    with pytest.raises(RefusedFlagsError, match="kitchen-attention-backend"):
        read_megatron_args(PP2 + " --kitchen-attention-backend fa")


def test_no_effect_flags_come_with_their_reason():
    imp = read_megatron_args(BF16 + " --lr 3e-4 --log-interval 1 --seed 3")
    assert [f for f, _ in imp.no_effect] == ["--lr 3e-4", "--log-interval 1", "--seed 3"]
    assert imp.no_effect[0][1] == NO_EFFECT["lr"]


@pytest.mark.parametrize("recipe", ["tensorwise", "mxfp8", "blockwise"])
def test_no_fp8_wgrad_changes_nothing_but_with_the_delayed_recipe(recipe):
    """Megatron-LM @ d98e8a64 : megatron/core/fp8_utils.py get_fp8_recipe reads fp8_wgrad only for the delayed
    recipe (DelayedScaling's override_linear_precision, which TransformerEngine @ d0067d0 no longer has: removed in
    Transformer Engine 2.1); Float8CurrentScaling, MXFP8BlockScaling and Float8BlockScaling are built without it.
    So --no-fp8-wgrad leaves the estimate as it is with those recipes, and is refused with delayed (the default)."""
    fp8 = f"{BF16} --fp8-format hybrid --fp8-recipe {recipe}"
    imp = read_megatron_args(f"{fp8} --no-fp8-wgrad", world_size=8)
    assert any(n.startswith("--no-fp8-wgrad") for n in imp.notes)
    assert _stages(f"{fp8} --no-fp8-wgrad") == _stages(fp8)
    for delayed in (f"{BF16} --fp8-format hybrid", f"{BF16} --fp8-format e4m3 --fp8-recipe delayed"):
        with pytest.raises(RefusedFlagsError, match="no-fp8-wgrad.*delayed recipe"):
            read_megatron_args(f"{delayed} --no-fp8-wgrad", world_size=8)


# flagsA28: arguments once refused.
def test_output_logit_dtype_is_read_into_the_precision_section():
    """--output-logit-dtype fp32 -> precision.logit_dtype (the bytes: tests/memory/test_loss.py); Megatron-LM's
    choices are bf16 and fp32, and the export writes the flag back."""
    from estimator.formats.megatron_args import to_megatron_args
    cfg = read_megatron_args(f"{BF16} --output-logit-dtype fp32", world_size=8).config
    assert cfg["precision"]["logit_dtype"] == "fp32"
    flags = to_megatron_args(cfg)
    assert flags[flags.index("--output-logit-dtype") + 1] == "fp32"
    with pytest.raises(ConfigError, match="logit_dtype"):
        estimate(read_megatron_args(f"{BF16} --output-logit-dtype fp16", world_size=8).config)


def test_no_pad_vocab_size_keeps_the_padded_vocabulary():
    """Megatron-LM @ d98e8a64: --no-pad-vocab-size only stops the tokenizer from setting padded_vocab_size;
    gpt_config_from_args then passes --vocab-size with should_pad_vocab=True and the provider pads it anyway.
    By hand: vocabulary 1000, --make-vocab-size-divisible-by 128 x TP 2 = 256 -> 1024 rows, 512 per GPU; the
    word embedding holds 512 x 512 = 262,144 parameters per GPU either way."""
    base = read_megatron_args(TP2, world_size=8)
    imp = read_megatron_args(f"{TP2} --no-pad-vocab-size", world_size=8)
    assert imp.config == base.config
    assert imp.no_effect == (("--no-pad-vocab-size", NO_EFFECT["pad_vocab_size"]),)
    assert _stages(f"{TP2} --no-pad-vocab-size") == _stages(TP2)
    from estimator.model.resolve import resolve
    from estimator.config.load import load_config
    r = resolve(load_config(imp.config))
    assert r.Vp == 1024 and r.Vp // r.t * r.h == 262_144


def test_fp16_lm_cross_entropy_changes_nothing_and_needs_fp16():
    """GPTModel stores fp16_lm_cross_entropy and never reads it (compute_language_model_loss picks the loss by
    cross_entropy_loss_fusion); Megatron-LM's arguments.py asserts --fp16 with it."""
    fp16 = BASE + " --fp16"
    imp = read_megatron_args(f"{fp16} --fp16-lm-cross-entropy", world_size=8)
    assert [f for f, _ in imp.no_effect] == ["--fp16-lm-cross-entropy"]
    assert _stages(f"{fp16} --fp16-lm-cross-entropy") == _stages(fp16)
    with pytest.raises(ConfigError, match="only with --fp16"):
        read_megatron_args(f"{BF16} --fp16-lm-cross-entropy")


@pytest.mark.parametrize("flag,source", [
    ("--enable-mhc-connections", "HyperConnectionTransformerLayer"),
])
def test_the_refusals_kept_say_why_from_the_source(flag, source):
    """flagsA28: the one kept refused, with what Megatron-Core does that the estimate does not follow (mhc29:
    --mtp-hsm is modelled now and --enable-mhc-connections cannot build a model in pretrain_gpt.py; distill29:
    --fp32-residual-connection is modelled, test_fp32_residual_connection_is_read below)."""
    with pytest.raises(RefusedFlagsError) as exc:
        read_megatron_args(f"{MOE} {flag}")
    assert [f for f, _ in exc.value.refused] == [flag] and source in exc.value.refused[0][1]


# distill29: offline distillation from cached teacher logits.
def test_logits_load_flags():
    """--logits-load-dir turns on the cached-logits KL loss (training.distillation_cached_logits; the bytes by hand:
    tests/memory/test_loss.py) and notes that the files' top-K must be given; alpha, the reader's threads and
    prefetch, and ignore-errors are without effect on the GPU; the export asks for the directory."""
    from estimator.config.errors import UnsupportedError
    from estimator.formats.megatron_args import to_megatron_args
    cmd = (f"{BF16} --logits-load-dir /data/t --logits-load-kd-loss-alpha 0.3 --logits-load-decode-threads 8 "
           "--logits-load-prefetch-factor 6 --logits-load-msc-prefetch-depth 4 --logits-load-ignore-errors")
    imp = read_megatron_args(cmd, world_size=8)
    assert imp.config["training"]["distillation_cached_logits"] is True
    assert any("--distillation-top-k" in n for n in imp.notes)
    assert sorted(f.split()[0] for f, _ in imp.no_effect) == [
        "--logits-load-decode-threads", "--logits-load-ignore-errors", "--logits-load-kd-loss-alpha",
        "--logits-load-msc-prefetch-depth", "--logits-load-prefetch-factor"]
    cfg = imp.config
    cfg["training"]["distillation_top_k"] = 64
    assert _stages(cmd, fields={"training": {"distillation_top_k": 64}}) == \
        _stages(f"{BF16} --logits-load-dir /data/t", fields={"training": {"distillation_top_k": 64}})
    with pytest.raises(UnsupportedError, match="--logits-load-dir PATH"):
        to_megatron_args(cfg)
    from estimator.formats.bridge.export import to_bridge_overrides
    with pytest.raises(UnsupportedError, match="no Megatron-Bridge field"):
        to_bridge_overrides(cfg)


def test_fp32_residual_connection_is_read():
    """distill29: --fp32-residual-connection -> precision.fp32_residual_connection (the bytes by hand:
    tests/memory/test_fp32_residual.py); Megatron-LM asserts bf16 or fp16 weights, and the export writes it back."""
    from estimator.formats.megatron_args import to_megatron_args
    cfg = read_megatron_args(f"{PP2} --fp32-residual-connection", world_size=8).config
    assert cfg["precision"]["fp32_residual_connection"] is True
    assert "--fp32-residual-connection" in to_megatron_args(cfg)
    with pytest.raises(ConfigError, match="bf16 or fp16"):
        estimate(read_megatron_args(f"{BASE} --fp32-residual-connection", world_size=8).config)
