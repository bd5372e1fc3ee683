"""No schema field is read and then ignored: each changes the estimate where Megatron-Core allocates differently,
or its help text says it has no effect on memory.

Fields with a Megatron-LM flag are covered by tests/formats/test_megatron_flags.py (the importer sets exactly that
field from the flag, and each modelled flag must change the estimate); the others are listed here.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.formats.megatron_args import _BY_FLAG, _DEST
from estimator.config.schema import field_specs
from tests.conftest import make_config
from tests.formats.test_megatron_flags import CHANGES, ENABLES, REPLAY_CHANGES

MODEL = dict(num_layers=4, hidden_size=512, num_attention_heads=8, vocab_size=1000)
MOE = {**MODEL, "num_experts": 8}
#: A small model with a vision tower (Qwen3.5's tower shape, narrowed), and a training section with images.
VIT = {**MODEL, "vision_num_layers": 2, "vision_hidden_size": 64, "vision_num_attention_heads": 4,
       "vision_ffn_hidden_size": 128}
IMAGES = {"images_per_sample": 2}
#: A small Wan (Megatron-Bridge's video diffusion transformer, estimator/model/layers/wan.py).
WAN = {**MODEL, "model_kind": "wan", "activation_func": "gelu", "gated_linear_unit": False, "add_bias_linear": True}
WAN_GRID = {"wan_latent_frames": 2, "wan_latent_height": 8, "wan_latent_width": 8}
_OMNI = {**MODEL, "normalization": "RMSNorm", "vision_model_type": "radio", "vision_num_layers": 2,
         "vision_hidden_size": 64, "vision_num_attention_heads": 4, "vision_ffn_hidden_size": 128,
         "vision_patch_size": 16, "vision_temporal_patch_size": 2, "vision_num_position_embeddings": 16384,
         "vision_projector_ffn_hidden_size": 256}       # omni28: a small Nemotron Omni (radio tower, frame pairs)
_SOUND = {**_OMNI, "sound_num_layers": 2}
_FROZEN = {"freeze_vision_model": True, "freeze_sound_encoder": True, "image_resolution": 512}
#: A small DeepSeek-V4 model: hybrid attention (a window layer, ratio 4, ratio 128) and MoE layers.
V4 = {**MOE, "multi_latent_attention": True, "q_lora_rank": 64, "v_head_dim": 64, "qk_pos_emb_head_dim": 16,
      "experimental_attention_variant": "dsv4_hybrid", "csa_compress_ratios": [0, 4, 128, 0],
      "dsa_indexer_n_heads": 4, "dsa_indexer_head_dim": 32, "dsa_indexer_topk": 16, "o_groups": 4, "o_lora_rank": 32}
V4HC = {**V4, "enable_hyper_connections": True}
#: A small Kimi K3 (tests/model/layers/test_kimi.py's TINY, narrowed): KDA and gated MLA, latent MoE, SiTU.
K3 = {**MOE, "multi_latent_attention": True, "qk_layernorm": True, "q_lora_rank": 64, "position_embedding_type": "none",
      "attention_output_gate": True, "experimental_attention_variant": "kda", "linear_attention_freq": [1, 1, 0, 1],
      "linear_num_key_heads": 4, "linear_num_value_heads": 4, "activation_func": "situ", "moe_latent_size": 64}

#: Fields whose help text says they do not change the estimate, with why.
NO_MEMORY_EFFECT = {
    "model.layernorm_epsilon": "numerics only",
    "training.peft_alpha": "the adapter scaling is a scalar",
    "training.overlap_grad_reduce": "communication scheduling in the existing buffers",
    "training.overlap_param_gather": "communication scheduling in the existing buffers",
    "precision.fp4_recipe": "nvfp4 is the only FP4 recipe modelled",
    "model.sound_num_attention_heads": "the encoder's parameters do not depend on it; its activations are modelled "
                                       "only frozen (omni28)",
    "training.transformer_engine_full_layer_spec": "the same layer as Megatron-Core's TE spec for the models it "
                                                   "accepts (tests/formats/bridge/test_te_full_layer.py)",
}

#: Field -> (base configuration, the field's changed value), for fields not covered by a flag test.
VARIANTS = {
    "model.attn_res_block_size": (make_config(K3), {"model": {"attn_res_block_size": 2}}),
    "model.moe_latent_norm": (make_config(K3), {"model": {"moe_latent_norm": True}}),
    "model.csa_compress_ratios": (make_config(V4), {"model": {"csa_compress_ratios": [0, 4, 4, 0]}}),
    "model.csa_window_size": (make_config(V4), {"model": {"csa_window_size": 64}}),
    "model.o_groups": (make_config(V4), {"model": {"o_groups": 8}}),
    "model.o_lora_rank": (make_config(V4), {"model": {"o_lora_rank": 64}}),
    "model.enable_hyper_connections": (make_config(V4), {"model": {"enable_hyper_connections": True}}),
    "model.num_residual_streams": (make_config(V4HC), {"model": {"num_residual_streams": 2}}),
    "model.use_fused_mhc": (make_config(V4HC), {"model": {"use_fused_mhc": True}}),
    "training.mhc_recompute_layer_num": (make_config(V4HC, {}, {"recompute_granularity": "selective",
                                                                "recompute_modules": ["mhc"]}),
                                         {"training": {"mhc_recompute_layer_num": 1}}),
    "model.moe_n_hash_layers": (make_config({**V4, "moe_router_enable_expert_bias": True}),
                                {"model": {"moe_n_hash_layers": 2}}),
    "model.activation_func": (make_config(MODEL), {"model": {"activation_func": "gelu", "gated_linear_unit": False}}),
    "model.gated_linear_unit": (make_config({**MODEL, "activation_func": "gelu", "gated_linear_unit": False}),
                                {"model": {"gated_linear_unit": True}}),
    "model.add_bias_linear": (make_config(MODEL), {"model": {"add_bias_linear": True}}),
    "model.num_query_groups": (make_config(MODEL), {"model": {"num_query_groups": 2}}),
    "model.moe_layer_freq": (make_config(MOE), {"model": {"moe_layer_freq": [0, 1, 1, 1]}}),
    "model.linear_attention_freq": (make_config({**MODEL, "experimental_attention_variant": "gdn",
                                                 "linear_attention_freq": 2}),
                                    {"model": {"linear_attention_freq": [1, 1, 1, 0]}}),
    "model.moe_router_load_balancing_type": (make_config({**MOE, "moe_aux_loss_coeff": 0.01}),
                                             {"model": {"moe_router_load_balancing_type": "none"}}),
    "model.moe_aux_loss_coeff": (make_config(MOE), {"model": {"moe_aux_loss_coeff": 0.01}}),
    "parallelism.cp_comm_type": (make_config(MODEL, {"context_parallel_size": 2}, {"world_size": 2}),
                                 {"parallelism": {"cp_comm_type": "allgather"}}),
    "precision.params_dtype": (make_config(MODEL), {"precision": {"params_dtype": "fp32"}}),
    # Blackwell: no transposed FP8 weight copy, smaller PyTorch cuBLAS workspaces (estimator/memory/states.py).
    "training.gpu_arch": (make_config(MODEL, {}, {}, {"fp8": True}), {"training": {"gpu_arch": "sm_100"}}),
    "model.post_layernorm": (make_config(MODEL), {"model": {"post_layernorm": True}}),
    "model.pre_layernorm": (make_config({**MODEL, "post_layernorm": True}), {"model": {"pre_layernorm": False}}),
    "model.qk_layernorm_full_dim": (make_config({**MODEL, "qk_layernorm": True}),
                                    {"model": {"qk_layernorm_full_dim": True}}),
    "model.final_logit_softcapping": (make_config(MODEL), {"model": {"final_logit_softcapping": 30.0}}),
    "model.mtp_dense_mlp": (make_config({**MOE, "mtp_num_layers": 1}), {"model": {"mtp_dense_mlp": True}}),
    "model.parallel_mamba_attention": (make_config(MODEL), {"model": {"parallel_mamba_attention": True}}),
    "model.use_mamba_mem_eff_path": (make_config({**MODEL, "parallel_mamba_attention": True}),
                                     {"model": {"use_mamba_mem_eff_path": False}}),
    "model.mamba_gated_norm": (make_config({**MODEL, "parallel_mamba_attention": True}),
                               {"model": {"mamba_gated_norm": False}}),
    "model.global_attention_freq": (make_config(MODEL), {"model": {"global_attention_freq": 2,
                                                                   "global_kv_channels": 128}}),
    "model.global_kv_channels": (make_config({**MODEL, "global_attention_freq": 2}),
                                 {"model": {"global_kv_channels": 128}}),
    "model.num_global_query_groups": (make_config({**MODEL, "global_attention_freq": 2}),
                                      {"model": {"num_global_query_groups": 2}}),
    # MiMo-V2-Flash: narrower value heads, no sinks in the global layers.
    "model.v_channels": (make_config(MODEL), {"model": {"v_channels": 32}}),
    "model.global_softmax_type": (make_config({**MODEL, "global_attention_freq": 2, "softmax_type": "learnable"}),
                                  {"model": {"global_softmax_type": "vanilla"}}),
    # Step 3.5 Flash: fewer query heads in the global-attention layers.
    "model.num_global_attention_heads": (make_config({**MODEL, "global_attention_freq": 2}),
                                         {"model": {"num_global_attention_heads": 4}}),
    "precision.fp8": (make_config(MODEL), {"precision": {"fp8": True}}),
    "precision.fp4": (make_config(MODEL), {"precision": {"fp4": True}}),
    # tever29: before 2.18 Transformer Engine's fused cross entropy keeps the bf16 logits, not an fp32 gradient
    "precision.transformer_engine_version": (
        make_config(MODEL, training={"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}),
        {"precision": {"transformer_engine_version": "2.11"}}),
    "precision.quant_recipe": (make_config(MODEL, precision={"fp4": True}),
                               {"precision": {"quant_recipe": ["*.linear_qkv=bf16"]}}),
    "precision.store_param_remainders": (
        make_config(MODEL, None, None, {"use_precision_aware_optimizer": True}),
        {"precision": {"store_param_remainders": False}}),
    "training.masked_softmax_fusion": (make_config(MODEL, None, {"transformer_impl": "local"}),
                                       {"training": {"masked_softmax_fusion": False}}),
    "training.create_attention_mask_in_dataloader": (
        make_config(MODEL, None, {"transformer_impl": "local", "masked_softmax_fusion": False}),
        {"training": {"create_attention_mask_in_dataloader": False}}),
    "training.optimizer_implementation": (make_config(MODEL, None, {"transformer_impl": "local"}),
                                          {"training": {"optimizer_implementation": "torch"}}),
    "training.gradient_accumulation_fusion": (make_config(MODEL), {"training": {"gradient_accumulation_fusion": False}}),
    "training.world_size": (make_config(MODEL, None, {"world_size": 2}), {"training": {"world_size": 4}}),
    "model.moe_token_dispatcher_type": (make_config(MOE, {"expert_model_parallel_size": 2}, {"world_size": 2}),
                                        {"model": {"moe_token_dispatcher_type": "flex"}}),
    "model.moe_hybridep_ranks_per_nvlink_domain": (
        make_config({**MOE, "num_experts": 16, "moe_token_dispatcher_type": "flex",
                     "moe_flex_dispatcher_backend": "hybridep"}, {"expert_model_parallel_size": 16},
                    {"world_size": 16}),
        {"model": {"moe_hybridep_ranks_per_nvlink_domain": 16}}),
    "parallelism.torch_fsdp2_reshard_after_forward": (
        make_config({**MODEL, "untie_embeddings_and_output_weights": True}, {"use_torch_fsdp2": True},
                    {"world_size": 2, "gradient_accumulation_fusion": False, "use_distributed_optimizer": False}),
        {"parallelism": {"torch_fsdp2_reshard_after_forward": False}}),
    "training.optimizer": (make_config(MODEL), {"training": {"optimizer": "muon"}}),
    "training.moe_overload_factor": (make_config(MOE, {"expert_model_parallel_size": 2}, {"world_size": 2}),
                                     {"training": {"moe_overload_factor": 1.5}}),
    "training.muon_fp32_matmul_prec": (make_config(MODEL, None, {"optimizer": "muon"}),
                                       {"training": {"muon_fp32_matmul_prec": "highest"}}),
    "training.muon_split_qkv": (make_config({**MODEL, "ffn_hidden_size": 128}, None, {"optimizer": "muon"}),
                                {"training": {"muon_split_qkv": False}}),
    "training.cpu_offloading": (make_config(MODEL), {"training": {"cpu_offloading": True,
                                                                  "cpu_offloading_num_layers": 2}}),
    "training.cuda_graph_modules": (make_config(MODEL, None, {"cuda_graph_impl": "transformer_engine",
                                                              "cuda_graph_warmup_steps": 0}),
                                    {"training": {"cuda_graph_modules": ["attn"]}}),
    "training.use_layer_wise_param_layout": (make_config(MODEL, None, {"optimizer": "muon", "world_size": 4,
                                                                       "use_distributed_optimizer": True}),
                                             {"training": {"use_layer_wise_param_layout": False}}),
    "model.moe_vision_ffn_hidden_size": (make_config(MOE), {"model": {"moe_vision_ffn_hidden_size": 256}}),
    "training.peft": (make_config(MODEL), {"training": {"peft": "lora"}}),
    "training.peft_dim": (make_config(MODEL, None, {"peft": "lora"}), {"training": {"peft_dim": 8}}),
    "training.peft_target_modules": (make_config(MODEL, None, {"peft": "lora"}),
                                     {"training": {"peft_target_modules": ["linear_qkv"]}}),
    "training.peft_share_expert_adapters": (make_config({**MOE, "moe_ffn_hidden_size": 256}, None, {"peft": "lora"}),
                                            {"training": {"peft_share_expert_adapters": False}}),
    "training.peft_sequence_parallel_input_regather": (
        make_config(MODEL, {"tensor_model_parallel_size": 2},
                    {"peft": "lora", "world_size": 2, "sequence_parallel": True}),
        {"training": {"peft_sequence_parallel_input_regather": True}}),
    "parallelism.tp_comm_overlap_cfg": (
        make_config(MODEL, {"tensor_model_parallel_size": 2, "tp_comm_overlap": True},
                    {"world_size": 2, "sequence_parallel": True}),
        {"parallelism": {"tp_comm_overlap_cfg": "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192"}}),
    "training.reserved_memory_model": (make_config(MODEL), {"training": {"reserved_memory_model": "replay"}}),
    # PyTorch's cuBLAS workspaces, 2 x 32 MiB on Hopper, 2 x 128 KiB with :16:8 (estimator/memory/workspaces.py).
    "training.cublas_workspace_config": (make_config(MODEL), {"training": {"cublas_workspace_config": ":16:8"}}),
    "training.pytorch_cuda_alloc_conf": (make_config(MODEL, None, {"reserved_memory_model": "replay"}),
                                         {"training": {"pytorch_cuda_alloc_conf": "expandable_segments:True"}}),
    "model.vision_num_layers": (make_config(MODEL), {"model": {k: v for k, v in VIT.items() if k not in MODEL}}),
    "model.vision_hidden_size": (make_config(VIT), {"model": {"vision_hidden_size": 128}}),
    "model.vision_num_attention_heads": (make_config(VIT, None, IMAGES), {"model": {"vision_num_attention_heads": 8}}),
    "model.vision_ffn_hidden_size": (make_config(VIT), {"model": {"vision_ffn_hidden_size": 256}}),
    "model.vision_patch_size": (make_config(VIT), {"model": {"vision_patch_size": 14},
                                                   "training": {"image_resolution": 448}}),
    "model.vision_temporal_patch_size": (make_config(VIT), {"model": {"vision_temporal_patch_size": 1}}),
    "model.vision_in_channels": (make_config(VIT), {"model": {"vision_in_channels": 1}}),
    "model.vision_spatial_merge_size": (make_config(VIT), {"model": {"vision_spatial_merge_size": 1}}),
    "model.vision_num_position_embeddings": (make_config(VIT), {"model": {"vision_num_position_embeddings": 1024}}),
    "model.vision_out_hidden_size": (make_config(VIT), {"model": {"vision_out_hidden_size": 256}}),
    "model.vision_deepstack_mergers": (make_config(VIT), {"model": {"vision_deepstack_mergers": 1}}),
    "model.vision_model_type": (make_config(VIT), {"model": {"vision_model_type": "qwen2_5_vl"}}),
    "model.vision_projector_ffn_hidden_size": (
        make_config({**VIT, "vision_model_type": "glm4v", "vision_projector_ffn_hidden_size": 256}),
        {"model": {"vision_projector_ffn_hidden_size": 512}}),
    "model.vision_num_query_groups": (make_config({**VIT, "vision_model_type": "exaone45"}),
                                      {"model": {"vision_num_query_groups": 2}}),
    "training.images_per_sample": (make_config(VIT), {"training": IMAGES}),
    "model.model_kind": (make_config(MODEL), {"model": {"model_kind": "wan"}}),
    "model.wan_text_tokens": (make_config(WAN), {"model": {"wan_text_tokens": 256}}),
    "model.wan_text_dim": (make_config(WAN), {"model": {"wan_text_dim": 1024}}),
    "model.wan_crossattn_emb_size": (make_config(WAN), {"model": {"wan_crossattn_emb_size": 256}}),
    "model.wan_in_channels": (make_config(WAN), {"model": {"wan_in_channels": 4}}),
    "model.wan_out_channels": (make_config(WAN), {"model": {"wan_out_channels": 4}}),
    "model.wan_patch_spatial": (make_config({**WAN, **WAN_GRID}), {"model": {"wan_patch_spatial": 4}}),
    "model.wan_patch_temporal": (make_config({**WAN, **WAN_GRID}), {"model": {"wan_patch_temporal": 2}}),
    "model.wan_freq_dim": (make_config(WAN), {"model": {"wan_freq_dim": 128}}),
    "model.wan_latent_frames": (make_config({**WAN, **WAN_GRID}), {"model": {"wan_latent_frames": 4}}),
    "model.wan_latent_height": (make_config({**WAN, **WAN_GRID}), {"model": {"wan_latent_height": 16}}),
    "model.wan_latent_width": (make_config({**WAN, **WAN_GRID}), {"model": {"wan_latent_width": 16}}),
    "training.image_resolution": (make_config(VIT, None, IMAGES), {"training": {"image_resolution": 224}}),
    "training.freeze_vision_model": (make_config(VIT, None, IMAGES), {"training": {"freeze_vision_model": True}}),
    "training.freeze_vision_projection": (make_config(VIT, None, IMAGES),
                                          {"training": {"freeze_vision_projection": True}}),
    "training.freeze_language_model": (make_config(VIT, None, IMAGES),
                                       {"training": {"freeze_language_model": True}}),
    # vgraph29: the vision tower's own CUDA graphs (tests/memory/test_vision_graphs.py).
    "training.vision_cuda_graph_impl": (make_config(VIT, None, IMAGES),
                                        {"training": {"vision_cuda_graph_impl": "transformer_engine",
                                                      "max_vision_cuda_graph_seq_length": 4096}}),
    "training.vision_cuda_graph_modules": (
        make_config(VIT, None, {**IMAGES, "vision_cuda_graph_impl": "transformer_engine",
                                "max_vision_cuda_graph_seq_length": 4096, "cuda_graph_warmup_steps": 0}),
        {"training": {"vision_cuda_graph_modules": ["attn"]}}),
    "training.max_vision_cuda_graph_seq_length": (
        make_config(VIT, None, {**IMAGES, "vision_cuda_graph_impl": "transformer_engine",
                                "max_vision_cuda_graph_seq_length": 4096}),
        {"training": {"max_vision_cuda_graph_seq_length": 8192}}),
    "training.freeze_mtp": (make_config({**MODEL, "mtp_num_layers": 1}), {"training": {"freeze_mtp": True}}),
    # omni28: Nemotron Omni's RADIO video embedder and Parakeet sound tower (tests/memory/test_vision_omni.py).
    "model.vision_separate_video_embedder": (make_config(_OMNI), {"model": {"vision_separate_video_embedder": True}}),
    "model.vision_class_token_len": (make_config(_OMNI), {"model": {"vision_class_token_len": 10}}),
    "model.sound_num_layers": (make_config(_OMNI), {"model": {"sound_num_layers": 2}}),
    **{f"model.{k}": (make_config(_SOUND), {"model": {k: v}}) for k, v in (
        ("sound_hidden_size", 512), ("sound_ffn_hidden_size", 1024),
        ("sound_conv_kernel_size", 7), ("sound_num_mel_bins", 64), ("sound_subsampling_factor", 4),
        ("sound_subsampling_conv_channels", 128), ("sound_bias", True), ("sound_projector_ffn_hidden_size", 2048))},
    "training.video_frames_per_sample": (make_config(_OMNI, None, {"freeze_vision_model": True,
                                                                   "image_resolution": 512}),
                                         {"training": {"video_frames_per_sample": 8}}),
    "training.audio_clips_per_sample": (make_config(_SOUND, None, _FROZEN),
                                        {"training": {"audio_clips_per_sample": 1}}),
    "training.audio_clip_seconds": (make_config(_SOUND, None, {**_FROZEN, "audio_clips_per_sample": 1}),
                                    {"training": {"audio_clip_seconds": 5.0}}),
    "training.freeze_sound_encoder": (make_config(_SOUND), {"training": {"freeze_sound_encoder": True}}),
    "training.freeze_sound_projection": (make_config(_SOUND), {"training": {"freeze_sound_projection": True}}),
    "precision.disable_parameter_transpose_cache": (
        make_config(MODEL, {"pipeline_model_parallel_size": 2}, {"world_size": 2}, {"fp8": True}),
        {"precision": {"disable_parameter_transpose_cache": True}}),
    # RL training (estimator/memory/phases.py): each rl_* field changes the phases of one RL step.
    "training.rl_algorithm": (make_config(MODEL), {"training": {"rl_algorithm": "grpo"}}),
    "training.rl_reference_model": (make_config(MODEL, None, {"rl_algorithm": "grpo"}),
                                    {"training": {"rl_reference_model": "resident"}}),
    "training.rl_logprob_micro_batch_size": (make_config(MODEL, None, {"rl_algorithm": "grpo"}),
                                             {"training": {"rl_logprob_micro_batch_size": 4}}),
    "training.rl_response_length": (make_config(MODEL, None, {"rl_algorithm": "grpo"}),
                                    {"training": {"rl_response_length": 1024}}),
    "training.rl_entropy": (make_config(MODEL, None, {"rl_algorithm": "grpo"}), {"training": {"rl_entropy": True}}),
    "training.rl_logprob_entropy": (make_config(MODEL, None, {"rl_algorithm": "grpo"}),
                                    {"training": {"rl_logprob_entropy": False}}),
    "training.rl_offload_params": (make_config(MODEL, None, {"rl_algorithm": "grpo",
                                                             "rl_rollout_gpu_memory_fraction": 0.5}),
                                   {"training": {"rl_offload_params": True}}),
    "parallelism.megatron_fsdp_cuda_graph_mode": (make_config(MODEL, {"use_megatron_fsdp": True},
                                                              {"use_distributed_optimizer": True, "world_size": 2}),
                                                  {"parallelism": {"megatron_fsdp_cuda_graph_mode": True}}),
    "parallelism.fp32_local_grad_accumulation": (make_config(MODEL, None, None,
                                                             {"accumulate_allreduce_grads_in_fp32": False}),
                                                 {"parallelism": {"fp32_local_grad_accumulation": True}}),
    "training.rl_offload_grads": (make_config(MODEL, None, {"rl_algorithm": "grpo"}),
                                  {"training": {"rl_offload_grads": True}}),
    "training.rl_offload_optimizer": (make_config(MODEL, None, {"rl_algorithm": "grpo"}),
                                      {"training": {"rl_offload_optimizer": True}}),
    "training.rl_rollout_gpu_memory_fraction": (make_config(MODEL, None, {"rl_algorithm": "grpo"}),
                                                {"training": {"rl_rollout_gpu_memory_fraction": 0.5}}),
    # distill29: cached-logits distillation (estimator/memory/loss.py; the bytes: tests/memory/test_loss.py)
    "training.distillation_cached_logits": (make_config(MODEL), {"training": {"distillation_cached_logits": True,
                                                                          "distillation_top_k": 64}}),
    "training.distillation_top_k": (make_config(MODEL, None, {"distillation_cached_logits": True,
                                                              "distillation_top_k": 64}),
                                    {"training": {"distillation_top_k": 512}}),
    "training.distillation_logprobs_dtype": (make_config(MODEL, None, {"distillation_cached_logits": True,
                                                                       "distillation_top_k": 64}),
                                             {"training": {"distillation_logprobs_dtype": "fp32"}}),
}


def _covered_by_a_flag(spec) -> bool:
    f = _BY_FLAG.get(spec.flag) if spec.flag else None
    return f is not None and f.path == spec.path and _DEST.get(spec.flag) in {**CHANGES, **ENABLES, **REPLAY_CHANGES}


def _merge(base: dict, change: dict) -> dict:
    return {k: {**base.get(k, {}), **change.get(k, {})} for k in ("model", "parallelism", "training", "precision")}


#: Fields whose setting is refused as not modelled (the configuration names them and says why).
REFUSED_SETTINGS: dict = {}


@pytest.mark.parametrize("spec", field_specs(), ids=lambda s: s.path)
def test_every_field_changes_the_estimate_or_says_it_does_not(spec):
    if spec.path in REFUSED_SETTINGS:
        assert "not modelled" in spec.help.lower()
        with pytest.raises(ConfigError, match="not modelled"):
            estimate(_merge(make_config(MODEL), REFUSED_SETTINGS[spec.path]))
        return
    if spec.path in NO_MEMORY_EFFECT:
        assert "no effect on memory" in spec.help.lower() or "does not change the estimate" in spec.help
        return
    if _covered_by_a_flag(spec):
        return
    assert spec.path in VARIANTS, f"{spec.path}: add a configuration where it changes the estimate"
    base, change = VARIANTS[spec.path]
    if spec.path == "training.world_size":
        base = _merge(base, {"training": {"use_distributed_optimizer": True}})
    assert estimate(base).to_dict()["stages"] != estimate(_merge(base, change)).to_dict()["stages"]


def test_plain_copy_is_a_deep_copy_of_plain_data():
    """Config.to_dict (and the calculator's presets) copy with plain_copy: new mappings and lists at every
    level, tuples kept as tuples, scalars shared; changing the copy leaves the original as it was."""
    from estimator.config.schema import plain_copy
    src = {"model": {"num_layers": 4, "pattern": ["M", "*"], "pair": (1, [2])}, "training": None}
    out = plain_copy(src)
    assert out == src and out is not src
    out["model"]["pattern"].append("-")
    out["model"]["pair"][1].append(3)
    assert src == {"model": {"num_layers": 4, "pattern": ["M", "*"], "pair": (1, [2])}, "training": None}
    assert isinstance(out["model"]["pair"], tuple)
