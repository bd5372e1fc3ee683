"""The vision tower of a vision-language model: its parameters by tower kind (``model.vision_model_type``), the
patch merger and (Qwen3-VL) deepstack mergers, as Megatron-Bridge builds them.

Symbols: hv hidden width, fv MLP width, Lv layers, P patch side, Pt frames per patch, C channels, Np position
embeddings, M spatial merge, ho output width (the language model's hidden size), t tensor-parallel size, n(hv) the
parameters of one norm over hv (LayerNorm 2 hv, RMSNorm hv).

The kinds (:data:`KINDS`) differ in

==================  ============================  ============================  ============================
                    ``qwen3_vl`` (Qwen3-VL,       ``qwen2_5_vl`` (Qwen2.5-VL)   ``gemma3_vl`` (Gemma 3)
                    Qwen3.5)
==================  ============================  ============================  ============================
built as            Megatron-Core ViT layers      Hugging Face's module         Hugging Face's SigLIP
tensor parallelism  split like the language       whole on every TP rank        whole on every TP rank;
                    model                                                       the projector's linear split
norms               LayerNorm (weight, bias)      RMSNorm (weight)              LayerNorm, and one after
                                                                                the last layer
MLP                 tanh-GELU, not gated          SiLU, gated                   tanh-GELU, not gated
biases              every linear                  every linear                  every linear of the tower
patch embedding     Conv3d with bias              Conv3d without bias           Conv2d with bias
positions           Np x hv learned               2-D rotary (no weights)       Np x hv learned
attention           full                          windows, full every few       full
                                                  layers
projector           merger: norm over hv, fc1     the same, RMSNorm             average pool M x M, RMSNorm
                    (M^2 hv)^2, GELU, fc2                                       over hv, one linear hv x ho
                    M^2 hv x ho                                                 without bias
deepstack mergers   D (deepstack_visual_indexes)  none                          none
==================  ============================  ============================  ============================

``kimi_k25`` (Kimi K2.5's MoonViT) is built as ``gemma3_vl``'s tower (Hugging Face's module, whole on every TP rank,
LayerNorm, tanh-GELU MLP, biases, a Conv2d with bias, learned positions interpolated to each image, a final
LayerNorm) with ``qwen3_vl``'s merger (LayerNorm over hv, fc1, GELU, fc2), replicated too.

``qwen3_vl`` (NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/
``vision_model.py`` ``Qwen3VLVisionModel``: patch_embed, pos_embed, decoder, merger; ``utils.py``
``Qwen3VLVisionPatchEmbed``, ``Qwen3VLVisionPatchMerger``; ``transformer_config.py`` ``get_vision_model_config``:
LayerNorm, biases on every linear, no GQA, tanh-GELU MLP not gated, the language model's tensor-parallel size and
recompute granularity / method / layer count, no sequence or context parallelism, pipeline size 1; ``model.py``
``Qwen3VLModel``: the tower is built where ``pre_process``, the first pipeline stage; ``freeze``; the layer spec is
Megatron-Core's ``get_vit_layer_with_transformer_engine_spec``, Megatron-LM @ d98e8a64 :
megatron/core/models/vision/vit_layer_specs.py: TELayerNormColumnParallelLinear qkv and fc1 with the norms fused
in, TERowParallelLinear proj and fc2)::

    patch_embed   C Pt P^2 hv + hv                       Conv3d with bias, replicated
    pos_embed     Np hv                                  nn.Embedding, replicated
    each layer    4 hv                                   the two LayerNorms (weight and bias), replicated
                  3 hv^2 + 3 hv                          linear_qkv, column-parallel (bias split too)
                  hv^2 + hv                              linear_proj, row-parallel (bias replicated)
                  hv fv + fv                             linear_fc1, column-parallel
                  fv hv + hv                             linear_fc2, row-parallel (bias replicated)
    merger        2 hv                                   patch_norm LayerNorm over hv (use_postshuffle_norm false)
                  (M^2 hv)^2 + M^2 hv                    linear_fc1, column-parallel
                  M^2 hv ho + ho                         linear_fc2, row-parallel (bias replicated)
    deepstack     D x (2 M^2 hv + merger's fc1 and fc2)  Qwen3-VL's deepstack mergers (transformer_block.py
                                                         ``Qwen3VLVisionTransformerBlock.deepstack_merger_list``:
                                                         one Qwen3VLVisionPatchMerger per deepstack_visual_indexes
                                                         entry, use_postshuffle_norm true, so its LayerNorm spans
                                                         the merged width M^2 hv)

``qwen2_5_vl`` (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/qwen_vl/modeling_qwen25_vl.py
``Qwen25VLModel``: ``self.visual`` is transformers' ``Qwen2_5_VisionTransformerPretrainedModel`` built from the
checkpoint's vision_config where ``pre_process``, every parameter marked ``average_gradients_across_tp_domain``
by ``hook_hf_module_setattr_for_tp_grad_sync`` (utils/common_utils.py): the whole tower on every tensor-parallel
rank of the first stage, its gradients averaged over them; ``freeze``: patch_embed and blocks, or the merger.
The module: huggingface/transformers @ 00b676f8 : src/transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py
``Qwen2_5_VisionPatchEmbed`` (Conv3d, bias=False), ``Qwen2_5_VLVisionBlock`` (norm1, norm2 Qwen2RMSNorm;
``Qwen2_5_VLVisionAttention`` qkv and proj with bias; ``Qwen2_5_VLMLP`` gate_proj, up_proj, down_proj with bias),
``Qwen2_5_VLPatchMerger`` (ln_q Qwen2RMSNorm over hv, Linear(M^2 hv, M^2 hv), GELU, Linear(M^2 hv, ho)); the
positions are rotary, without weights)::

    patch_embed   C Pt P^2 hv                            every part replicated
    each layer    2 hv                                   norm1, norm2
                  3 hv^2 + 3 hv + hv^2 + hv              qkv, proj
                  2 (hv fv + fv) + fv hv + hv            gate_proj, up_proj, down_proj
    merger        hv + (M^2 hv)^2 + M^2 hv + M^2 hv ho + ho

``gemma3_vl`` (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma_vl/modeling_gemma3_vl.py
``Gemma3VLModel``: ``vision_tower`` is transformers' ``SiglipVisionModel``'s ``vision_model`` built from the
vision_config with ``vision_use_head`` false, where ``pre_process``, marked for TP gradient averaging like
Qwen2.5-VL's; ``Gemma3VLMultimodalProjector``: ``nn.AvgPool2d`` of side sqrt(Np) / sqrt(mm_tokens_per_image), a
TENorm RMSNorm over hv and a ColumnParallelLinear hv x ho without bias, gather_output, split over TP;
``freeze``: the whole vision_tower, or the projector. The tower: huggingface/transformers @ 008f5c8c :
src/transformers/models/siglip/modeling_siglip.py ``SiglipVisionEmbeddings`` (Conv2d with bias, an nn.Embedding of
num_patches positions), ``SiglipEncoderLayer`` (layer_norm1, q/k/v/out_proj with bias, layer_norm2, fc1 / fc2 with
bias), ``post_layernorm``)::

    patch_embed   C P^2 hv + hv                          Pt = 1 (vision_temporal_patch_size 1)
    pos_embed     Np hv                                  Np = (image_size / P)^2
    each layer    4 hv + 4 hv^2 + 4 hv + hv fv + fv + fv hv + hv   (the qwen3_vl layer's count), replicated
    post norm     2 hv                                   part of the tower (freeze_vision_model freezes it)
    projector     hv                                     mm_soft_embed_norm, replicated
                  hv ho                                  proj, column-parallel

``kimi_k25`` (Kimi K2.5's MoonViT; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/kimi_vl/
modeling_kimi_k25_vl.py ``KimiK25VLModel``: ``vision_tower`` is the checkpoint's own ``MoonViT3dPretrainedModel`` and
``mm_projector`` its ``PatchMergerMLP``, both loaded from the repository's remote code and both marked for TP
gradient averaging: whole on every tensor-parallel rank. The tensors, as sgl-project/sglang @ 00a239e5 :
python/sglang/srt/models/kimi_k25.py rebuilds them for the checkpoint: ``MoonVision3dPatchEmbed`` a Conv2d with bias
and a learned init_pos_emb_height x init_pos_emb_width x hv grid, interpolated to each image (the time table is a
buffer); ``MoonViTEncoderLayer`` norm0 / norm1 LayerNorms, qkv and out projections with bias, an MLP fc0 / fc1 with
bias and the tanh GELU; ``final_layernorm``; ``PatchMergerMLP`` a LayerNorm over hv, then M^2 hv -> M^2 hv, GELU,
M^2 hv -> ho, with biases): the qwen3_vl layer and merger counts, with Pt = 1, the final LayerNorm 2 hv, and every
part replicated.

Of these, Megatron-Core's Muon takes the 2-D weights (:func:`muon_matrices`): each layer's packed qkv (3 hv x hv),
out projection (hv x hv), fc0 (fv x hv) and fc1 (hv x fv), and the merger's two linears (M^2 hv x M^2 hv,
ho x M^2 hv). The Conv2d's weight (hv x C x P x P) and the position grid (init_pos_emb_height x init_pos_emb_width x
hv) are not 2-D, and the norms and biases are 1-D: Adam takes them (Megatron-LM @ d98e8a64 :
megatron/core/optimizer/layer_wise_optimizer.py ``is_managed_by_layer_wise_optimizer``, emerging_optimizers.py
``_is_muon_excluded``: no ``use_muon`` or ``is_embedding_or_output_parameter`` tag is set on the remote-code modules).

``glm4v`` (GLM-4.5V; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/glm_vl/modeling_glm_45v.py
``GLM45VModel``: ``self.visual`` is transformers' ``Glm4vVisionModel`` from the vision_config, marked for TP
gradient averaging, whole on every tensor-parallel rank; huggingface/transformers @ 005612ef :
src/transformers/models/glm4v/modeling_glm4v.py: ``Glm4vVisionPatchEmbed`` a Conv3d with bias,
``post_conv_layernorm`` an RMSNorm, ``Glm4vVisionEmbeddings`` (image_size / patch)^2 learned positions resampled to
each image, ``Glm4vVisionBlock`` RMSNorms, qkv (bias only with attention_bias, refused) and proj without bias, a
gated SiLU ``Glm4VisionMlp`` of width out_hidden_size without biases, ``post_layernorm``, ``downsample`` a Conv2d of
kernel and stride M from hv to ho with bias, ``Glm4vVisionPatchMerger`` proj ho x ho, a LayerNorm, gate / up / down
of width c = intermediate_size (vision_projector_ffn_hidden_size), no biases)::

    patch_embed   C Pt P^2 hv + hv
    each layer    2 hv + 4 hv^2 + 3 hv fv                fv = out_hidden_size
    merger        ho^2 + 2 ho + 3 ho c                   what freeze_vision_projection freezes
    unfrozen      Np hv + 2 hv + M^2 hv ho + ho          positions, post_conv_layernorm and post_layernorm, the
                                                         downsample: ``GLM45VModel.freeze`` freezes patch_embed and
                                                         blocks, or the merger, never these

``radio`` (Nemotron Nano VL's RADIO ViT; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/nemotron_vl/
nemotron_vl_provider.py ``NemotronVLModelProvider.provide``: Megatron-Core's ``LLaVAModel`` with
``vision_model_type`` "radio", the ViT layer spec, a vision config copied from the language model's (so the
language model's tensor-parallel size; sequence and context parallelism off, recompute None) with 32 layers of
1280, 16 heads, MLP 5120 not gated, fast_gelu, biases on every linear, LayerNorm; a projection config copied from
the language model's with ffn_hidden_size 20480 and the language model's MLP spec (Nemotron-H's: a
TELayerNormColumnParallelLinear fc1 with its RMSNorm fused in, squared ReLU, no biases), ``pixel_shuffle`` true,
img_h = img_w = 512, patch_dim 16, ``use_vision_backbone_fp8_arch`` true. Megatron-LM @ d98e8a64 :
megatron/core/models/multimodal/llava_model.py: for "radio" max_img_h = max_img_w = 2048, no embedder bias, no
ln_post, class_token_len 16 under ``use_vision_backbone_fp8_arch`` (8 otherwise), the projector's input width
4 hv with pixel shuffle; megatron/core/models/vision/radio.py ``RADIOViTModel``: class_token (class_token_len x hv),
position_embeddings ((2048 / P)^2 x hv, cropped or interpolated to each image), embedder a ColumnParallelLinear
C P^2 -> hv with gather_output, the TransformerBlock without a final norm (post_process false);
multimodal_projector.py ``MultimodalProjector`` "mlp": the MLP of the projection config over the input width)::

    embedder      C P^2 hv                               column-parallel, no bias (C Pt P^2 hv when Pt > 1)
    video embed.  C Pt P^2 hv                            Nemotron Omni's separate video embedder (omni28:
                                                         model.vision_separate_video_embedder; the image
                                                         embedder then stays C P^2 hv)
    class tokens  16 hv                                  replicated (counted with the positions; 10 for Nemotron
                                                         Omni, model.vision_class_token_len)
    positions     Np hv                                  replicated, Np = (2048 / P)^2
    each layer    the qwen3_vl layer                     split like the language model
    projector     n(M^2 hv) of the language model's      the norm fused into fc1, replicated
                  norm
                  M^2 hv x c (2c if the language model   fc1, column-parallel (M = 2: pixel shuffle joins 2 x 2
                  is gated) (+ bias)                     patches), c = vision_projector_ffn_hidden_size
                  c x ho (+ ho bias)                     fc2, row-parallel; biases as the language model's
                                                         add_bias_linear (none for Nemotron-H)

``NemotronVLModel.freeze`` freezes the whole ``vision_model`` (freeze_vision_model) or the ``vision_projection``
(freeze_vision_projection). An image is one 512-pixel tile (R fixed at :data:`RADIO_TILE`: a tiled image is
several images here); the tower's sequence per tile is its (R / P)^2 patches and the 16 class tokens, dropped
before the projector.

``ernie45_vl`` (ERNIE-4.5-VL's DFN ViT and variable-resolution resampler; Megatron-Bridge @ 067f987d :
src/megatron/bridge/models/ernie_vl/modeling_ernie45_vl/model.py ``Ernie45VLModel``: with ``use_mg_vit`` false
(the provider's default) ``vision_tower`` is transformers' ``Ernie4_5_VL_MoeVisionTransformerPretrainedModel`` and
``resampler_model`` its ``Ernie4_5_VL_MoeVariableResolutionResamplerModel``, both marked for TP gradient averaging:
whole on every tensor-parallel rank; ``freeze``: patch_embed and blocks, or the resampler. huggingface/transformers @
4f2fa85a : src/transformers/models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py: ``Ernie4_5_VL_MoePatchEmbed`` a
Linear C P^2 -> hv without bias over pre-flattened patches, 2-D rotary positions without weights,
``Ernie4_5_VL_MoeVisionBlock`` LayerNorms, qkv and proj with biases, an MLP fc1 / fc2 with biases and quick_gelu,
the final LayerNorm ``ln``; the resampler over W = M^2 hv: ``spatial_linear`` and ``temporal_linear`` (each fc1,
GELU, fc2 W -> W, LayerNorm over W, biases; temporal fc1 reads 2 W, its temporal_merge_size hard-coded 2: an image
is duplicated), ``mlp`` W -> ho with bias, ``after_norm`` an RMSNorm over ho)::

    patch_embed   C P^2 hv                               every part replicated
    each layer    the qwen3_vl layer's count             LayerNorm, biases, quick_gelu MLP not gated
    final norm    2 hv                                   never frozen (``freeze`` reaches patch_embed and blocks)
    resampler     2 (W^2 + W) + 2 W                      spatial_linear
                  (2 W^2 + W) + (W^2 + W) + 2 W          temporal_linear
                  W ho + ho + ho                         mlp, after_norm

``exaone45`` (EXAONE 4.5; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/exaone/exaone45/modelling_exaone45/
``model.py`` ``Exaone45Model``: the tower is built where ``pre_process`` from Megatron-Core's
``get_vit_layer_with_transformer_engine_spec`` and a ``PatchMergerSubmodules`` of TENorm, TEColumnParallelLinear
fc1 and TERowParallelLinear fc2; ``transformer_config.py`` ``get_vision_model_config``: depth layers of hidden_size,
num_heads heads in num_key_value_heads groups (``num_query_groups``), a gated SiLU MLP of intermediate_size, RMSNorm,
biases on every linear (add_bias_linear, add_qkv_bias), the language model's tensor-parallel size and recompute
settings, no sequence or context parallelism; ``utils.py`` ``Exaone45VisionPatchEmbed`` a Conv3d without bias,
``Exaone45VisionRotaryEmbedding`` 2-D rotary positions without weights, ``Exaone45VisionPatchMerger`` with
use_postshuffle_norm false; ``vision_model.py``: windows of window_size pixels, full attention in the
fullatt_block_indexes layers, the same weights either way). With g = vision_num_query_groups and d = hv / heads::

    patch_embed   C Pt P^2 hv                            replicated
    each layer    2 hv                                   the two RMSNorms fused into qkv and fc1, replicated
                  (hv + 2 g d) (hv + 1)                  linear_qkv, column-parallel (bias split too)
                  hv^2 + hv                              linear_proj, row-parallel (bias replicated)
                  2 hv fv + 2 fv                         linear_fc1 (gate and up), column-parallel
                  fv hv + hv                             linear_fc2, row-parallel (bias replicated)
    merger        hv + (M^2 hv)^2 + M^2 hv + M^2 hv ho + ho   RMSNorm over hv, fc1 and fc2 with biases, split like
                                                         qwen3_vl's merger

``Exaone45Model.freeze``: freeze_vision_model the whole ``vision_model``, then its ``merger`` back on unless
freeze_vision_projection, which freezes the merger (as ``Qwen3VLModel.freeze``).

``step37`` (Step 3.7's Perception-Encoder G/14; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/stepfun/
``modelling_step37/vision_model.py`` ``Step37VisionModel`` and ``utils.py``, plain ``torch.nn`` modules, not
Megatron-Core layers, built where ``pre_process`` (``modelling_step37/model.py`` ``Step37Model``) and not split
over the tensor-parallel ranks: ``conv1`` a Conv2d of patch_size without bias, ``positional_embedding``
(image_size / patch_size)^2 x hv learned positions (bilinearly resampled for a smaller grid), ``ln_pre`` a LayerNorm
(use_ln_pre), ``resblocks``: ln_1, a fused in_proj of 3 hv with bias, 2-D rotary q / k (a buffer), out_proj with
bias, LayerScale ``ls_1``, ln_2, c_fc / c_proj with biases around quick-GELU (width int(hv mlp_ratio)), ``ls_2``;
no ``ln_post`` (use_ln_post false); ``vit_downsampler1`` Conv2d(hv, 2 hv, 3, stride 2, padding 1) and
``vit_downsampler2`` Conv2d(2 hv, 4 hv, 3, stride 2, padding 1) with biases; ``image_insert_embedding.py``
``ImageInsertEmbedding.align_projector`` (Hugging Face's ``vit_large_projector``) Linear(4 hv, ho) without bias
(projector_bias false), built where ``pre_process``)::

    patch_embed   C P^2 hv                               every part replicated
    pos_embed     Np hv
    each layer    4 hv + 2 hv                            ln_1, ln_2 (weight and bias), ls_1, ls_2
                  3 hv^2 + 3 hv + hv^2 + hv              in_proj, out_proj
                  hv fv + fv + fv hv + hv                c_fc, c_proj
    downsample    2 hv + 18 hv^2 + 2 hv + 72 hv^2 + 4 hv  ln_pre and the two convolutions: part of the tower
    projector     4 hv ho                                align_projector (freeze_vision_projection)

The two stride-2 convolutions make a merge of M = 4 patches a side: an image of side R gives (R / P)^2 patches and
(R / 4P)^2 tokens (a 728-pixel image: 2,704 patches, 169 tokens). ``Step37Model.freeze``: freeze_vision_model the
whole ``vision_model`` (convolutions included), freeze_vision_projection the align_projector.

``gemma4`` (Gemma 4; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma_vl/modeling_gemma4_vl.py
``Gemma4VLModel``: ``vision_tower`` is transformers' ``Gemma4VisionModel`` built by ``AutoModel.from_config`` from
the vision_config where ``pre_process`` and marked for TP gradient averaging, ``embed_vision`` transformers'
``Gemma4MultimodalEmbedder``: both whole on every tensor-parallel rank; ``freeze``: the whole vision_tower, or
embed_vision. huggingface/transformers @ 0246b4f3 : src/transformers/models/gemma4/modeling_gemma4.py:
``Gemma4VisionPatchEmbedder`` a Linear 3 P^2 -> hv without bias and ``position_embedding_table`` of 2 x Np x hv (an
x and a y table of position_embedding_size rows, summed); ``Gemma4VisionEncoderLayer`` four ``Gemma4RMSNorm``
(input, post-attention, pre- and post-feedforward; weight hv each), ``Gemma4VisionAttention`` q / k / v / o without
bias (``Gemma4ClippableLinear``), q_norm and k_norm over the head width d (weights), v_norm without a scale, 2-D
rotary positions (a buffer); ``Gemma4VisionMLP`` gate / up / down without bias, tanh GELU;
``Gemma4VisionPooler`` an average pool of M x M patches (pooling_kernel_size), no weights; the ``std_bias`` /
``std_scale`` of ``standardize`` are buffers; the embedder an RMSNorm without a scale and a Linear hv -> ho
without bias)::

    patch_embed   C P^2 hv                               every part replicated
    pos_embed     2 Np hv                                Np = position_embedding_size
    each layer    4 hv + 2 d                             the four norms, q_norm and k_norm
                  4 hv^2 + 3 hv fv                       q, k, v, o (as many key-value heads as heads), gate /
                                                         up / down
    projector     hv ho                                  embedding_projection (freeze_vision_projection)

Gemma 4's image side is free (its positions are looked up per patch): an image of side R (a multiple of P M) gives
(R / P)^2 patches and (R / P)^2 / M^2 tokens (M = 3: a 768-pixel image, 2,304 patches, 256 tokens; the processor's
default budget is vision_soft_tokens_per_image 280 tokens).

``pixtral`` (Mistral 3, Magistral, Ministral 3; Megatron-Bridge @ 067f987d : src/megatron/bridge/models/ministral3/
modeling_ministral3.py ``Ministral3Model``: ``vision_tower`` is transformers' ``PixtralVisionModel`` built by
``AutoModel.from_config`` from the vision_config and ``multi_modal_projector`` transformers'
``Mistral3MultiModalProjector``, both where ``pre_process`` and marked for TP gradient averaging: whole on every
tensor-parallel rank; ``freeze``: the whole vision_tower, or the projector. huggingface/transformers @ 0233e509 :
src/transformers/models/pixtral/modeling_pixtral.py: ``patch_conv`` a Conv2d without bias, ``ln_pre`` an RMSNorm,
``PixtralAttentionLayer`` attention_norm and ffn_norm RMSNorms, q / k / v / o without bias, a gated SiLU MLP without
bias, 2-D rotary positions (a buffer of (image_size / P)^2 rows: model.vision_num_position_embeddings, no weights);
models/mistral3/modeling_mistral3.py ``Mistral3MultiModalProjector``: an RMSNorm over hv, ``Mistral3PatchMerger``'s
merging_layer M^2 hv -> hv, linear_1 hv -> ho, GELU, linear_2 ho -> ho, without biases
(multimodal_projector_bias false))::

    patch_embed   C P^2 hv                               every part replicated
    ln_pre        hv                                     part of the tower (freeze_vision_model)
    each layer    2 hv + 4 hv^2 + 3 hv fv
    projector     hv + M^2 hv^2 + hv ho + ho^2

An image of side R (a multiple of P M, at most image_size) gives (R / P)^2 patches and (R / P M)^2 image tokens; the
processor also puts an [IMG_BREAK] token after each row and [IMG_END] after the last, text tokens of the sequence.

The language model's modality-specific experts (a second, vision expert pool in every MoE layer) are counted with
the language model's MoE layers (model.moe_vision_ffn_hidden_size, estimator/model/layers/moe.py).

``freeze_vision_model`` freezes the patch embedding, the positions, the layers and (Gemma 3, Kimi K2.5) the final
norm: the whole tower (``Qwen3VLModel.freeze`` turns the merger and the deepstack mergers back on unless
``freeze_vision_projection``, which freezes both; ``Qwen25VLModel.freeze``: patch_embed and blocks;
``Gemma3VLModel.freeze``, ``Gemma4VLModel.freeze``, ``Ministral3Model.freeze`` and ``KimiK25VLModel.freeze``: the
whole vision_tower, and the projector with ``freeze_vision_projection``); frozen parameters keep their weights only.
D is ``vision_deepstack_mergers``.

Tokens: an image of side R pixels (a multiple of P M) gives (R / P)^2 patches to the tower (one temporal patch:
the processor repeats an image to Pt frames) and (R / P)^2 / M^2 tokens to the language model. Gemma 3's side is
fixed by its positions (R = P sqrt(Np)); the other towers interpolate or rotate positions to any side.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.rules.vision import MUON_TOWERS, RADIO_CLASS_TOKENS, RADIO_MAX_SIDE, RADIO_TILE
from .layers.base import Count

__all__ = ["KINDS", "RADIO_CLASS_TOKENS", "RADIO_MAX_SIDE", "RADIO_TILE", "TowerKind", "VisionParams", "has_vision", "image_patches", "image_tokens", "tower_kind",
           "MUON_TOWERS", "muon_matrices", "radio_class_tokens", "vision_params"]


class TowerKind(NamedTuple):
    """What one kind of vision tower is built of (the table in the module docstring)."""

    norm: str               # "LayerNorm" (weight and bias) or "RMSNorm" (weight)
    gated: bool             # gated MLP (gate, up, down) or plain (fc1, fc2)
    activation: str         # the MLP's activation, as the language model's activation_func names it
    patch_bias: bool        # the patch embedding has a bias
    learned_positions: bool # vision_num_position_embeddings x hv learned positions (else rotary, no weights)
    tp_split: bool          # the tower split over the language model's tensor-parallel ranks (else whole on each)
    hugging_face: bool      # Hugging Face's (or plain PyTorch: step37) modules with their own autograd graph, not
                            # Megatron-Core layers
    deepstack: bool         # may have deepstack mergers
    projector: str = "merger"   # "merger" (norm, fc1, GELU, fc2 over M^2 hv), "pool" (average pool, norm, linear),
                                # "glm" (strided-convolution downsample, then a gated merger) or "mlp" (pixel
                                # shuffle, then the language model's MLP of width vision_projector_ffn_hidden_size)
                                # or "resampler" (ERNIE-4.5-VL's spatial and temporal MLPs, a linear, an RMSNorm)
                                # or "linear" (Step 3.7: strided convolutions in the tower, then one linear)
                                # or "embedder" (Gemma 4: a parameter-free pool and RMSNorm, then one linear)
                                # or "pixtral" (Mistral 3: RMSNorm, patch merger, linear, GELU, linear)
    post_norm: bool = False     # a LayerNorm after the last layer (SigLIP's post_layernorm)
    linear_bias: bool = True    # the layers' linears have biases
    layer_scale: bool = False   # two LayerScale vectors of hv a layer (Step 3.7's ls_1, ls_2)
    sandwich_norms: bool = False    # four norms a layer (before and after attention and the MLP) and q / k RMSNorms
                                    # over the head width (Gemma 4)
    position_tables: int = 1    # learned position tables of vision_num_position_embeddings x hv (Gemma 4: x and y)


#: model.vision_model_type -> its tower kind.
KINDS: dict[str, TowerKind] = {
    "qwen3_vl": TowerKind("LayerNorm", False, "gelu", True, True, True, False, True),
    "qwen2_5_vl": TowerKind("RMSNorm", True, "silu", False, False, False, True, False),
    "gemma3_vl": TowerKind("LayerNorm", False, "gelu", True, True, False, True, False, "pool", True),
    "kimi_k25": TowerKind("LayerNorm", False, "gelu", True, True, False, True, False, "merger", True),
    "glm4v": TowerKind("RMSNorm", True, "silu", True, True, False, True, False, "glm", False, False),
    "radio": TowerKind("LayerNorm", False, "gelu", False, True, True, False, False, "mlp"),
    "ernie45_vl": TowerKind("LayerNorm", False, "quick_gelu", False, False, False, True, False, "resampler"),
    "exaone45": TowerKind("RMSNorm", True, "silu", False, False, True, False, False, "merger"),
    "step37": TowerKind("LayerNorm", False, "quick_gelu", False, True, False, True, False, "linear",
                        layer_scale=True),
    "gemma4": TowerKind("RMSNorm", True, "gelu", False, True, False, True, False, "embedder", linear_bias=False,
                        sandwich_norms=True, position_tables=2),
    "pixtral": TowerKind("RMSNorm", True, "silu", False, False, False, True, False, "pixtral", linear_bias=False),
}


def radio_class_tokens(m) -> int:
    """Class tokens the radio tower prepends to each image: model.vision_class_token_len (Nemotron Omni's 10), else
    Nemotron Nano VL's :data:`RADIO_CLASS_TOKENS`."""
    return m.vision_class_token_len or RADIO_CLASS_TOKENS


def has_vision(m) -> bool:
    """Whether a model section has a vision tower."""
    return m.vision_num_layers is not None


def tower_kind(m) -> TowerKind:
    """The kind of a model section's vision tower."""
    return KINDS[m.vision_model_type]


def image_patches(m, resolution: int) -> int:
    """Patches one square image of ``resolution`` pixels gives the vision tower."""
    side = resolution // m.vision_patch_size
    return side * side


def image_tokens(m, resolution: int) -> int:
    """Language-model tokens one image gives (its patches, merged M x M)."""
    return image_patches(m, resolution) // (m.vision_spatial_merge_size ** 2)


class VisionParams(NamedTuple):
    """Parameters of the vision tower by part, each split by tensor parallelism (:class:`Count`)."""

    patch_embed: Count
    pos_embed: Count
    layer: Count         # one transformer layer
    layers: int          # how many
    merger: Count
    linear_layer: int    # linear-layer weights of one layer (sharded: qkv, proj, fc1, fc2)
    linear_merger: int   # linear-layer weights of the merger (fc1, fc2)
    deepstack: Count = Count(0, 0)   # every deepstack merger together (Qwen3-VL)
    post_norm: Count = Count(0, 0)   # the norm after the last layer (SigLIP)
    unfrozen: Count = Count(0, 0)    # parts neither freeze field reaches (GLM-4.5V: positions, outer norms, downsample)
    downsample: Count = Count(0, 0)  # tower parts besides these that freeze_vision_model freezes (Step 3.7: ln_pre and
                                     # its two stride-2 convolutions)

    @property
    def projection(self) -> Count:
        """The patch merger and the deepstack mergers: what freeze_vision_projection freezes."""
        return self.merger + self.deepstack

    @property
    def encoder(self) -> Count:
        """Patch embedding, positions, layers, the final norm and (Step 3.7) ln_pre and the strided convolutions: what
        freeze_vision_model freezes."""
        return (self.patch_embed + self.pos_embed + self.post_norm + self.downsample
                + Count(self.layers * self.layer.sharded, self.layers * self.layer.replicated))

    @property
    def total(self) -> int:
        return self.encoder.total + self.projection.total + self.unfrozen.total


def _replicated(c: Count) -> Count:
    return Count(0, c.total)


def vision_params(m) -> VisionParams | None:
    """The vision tower's parameters (None without one); see the module docstring."""
    if not has_vision(m):
        return None
    k = tower_kind(m)
    hv, fv, M = m.vision_hidden_size, m.vision_ffn_hidden_size, m.vision_spatial_merge_size
    ho = m.vision_out_hidden_size or m.hidden_size
    norm = 2 * hv if k.norm == "LayerNorm" else hv
    patch = Count(0, m.vision_in_channels * m.vision_temporal_patch_size * m.vision_patch_size ** 2 * hv
                  + (hv if k.patch_bias else 0))      # Conv3d (Conv2d when Pt is 1)
    pos = Count(0, k.position_tables * m.vision_num_position_embeddings * hv if k.learned_positions else 0)
    mlp_in = 2 if k.gated else 1                 # gate and up, or fc1
    heads = m.vision_num_attention_heads
    qkv = hv + 2 * (m.vision_num_query_groups or heads) * (hv // heads)     # q, then k and v of the head groups
    lin = qkv * hv + hv * hv + mlp_in * hv * fv + fv * hv
    # column-parallel biases (qkv, fc1 / gate and up) split; the norms and the row-parallel biases (proj, fc2) not
    bias = k.linear_bias
    norms = 4 * norm + 2 * (hv // heads) if k.sandwich_norms else 2 * norm     # Gemma 4: q_norm, k_norm over d
    layer = Count(lin + (qkv + mlp_in * fv if bias else 0),
                  norms + (hv + hv if bias else 0) + (2 * hv if k.layer_scale else 0))
    wide = M * M * hv
    unfrozen = downsample = Count(0, 0)
    if k.projector == "linear":     # Step 3.7: ln_pre, conv hv -> 2 hv and 2 hv -> 4 hv (3 x 3, bias), 4 hv x ho
        downsample = Count(0, 2 * hv + (9 * 2 * hv * hv + 2 * hv) + (9 * 4 * hv * 2 * hv + 4 * hv))
        merger, linear_merger = Count(0, 4 * hv * ho), 4 * hv * ho
    elif k.projector == "mlp":        # RADIO: embedder without bias split over TP, class tokens, the language MLP
        patch = Count(patch.replicated, 0)
        if m.vision_separate_video_embedder:     # omni28: the image embedder over one frame, the video one over Pt
            patch = Count(m.vision_in_channels * m.vision_patch_size ** 2 * hv + patch.sharded, 0)
        pos = Count(0, pos.replicated + radio_class_tokens(m) * hv)
        c, up = m.vision_projector_ffn_hidden_size, 2 if m.gated_linear_unit else 1
        lnorm = 2 * wide if m.normalization == "LayerNorm" else wide
        b = m.add_bias_linear
        merger = Count(wide * c * up + c * ho + (c * up if b else 0), lnorm + (ho if b else 0))
        linear_merger = wide * c * up + c * ho
    elif k.projector == "resampler":     # ERNIE-4.5-VL: Hugging Face's modules, all replicated
        W = wide
        spatial, temporal = 2 * (W * W + W) + 2 * W, (2 * W * W + W) + (W * W + W) + 2 * W
        merger, linear_merger = Count(0, spatial + temporal + W * ho + ho + ho), 5 * W * W + W * ho
        unfrozen = Count(0, 2 * hv)         # the tower's final LayerNorm: Ernie45VLModel.freeze never reaches it
    elif k.projector == "glm":        # downsample Conv2d (M^2 hv x ho + ho) and the gated merger of width c
        c = m.vision_projector_ffn_hidden_size
        merger, linear_merger = Count(0, ho * ho + 2 * ho + 3 * ho * c), ho * ho + 3 * ho * c
        unfrozen = Count(0, pos.replicated + 2 * hv + wide * ho + ho)   # positions, the two norms, downsample
        pos = Count(0, 0)
    elif k.projector == "embedder":     # Gemma 4: a parameter-free RMSNorm, one linear hv x ho without bias
        merger, linear_merger = Count(0, hv * ho), hv * ho
    elif k.projector == "pixtral":      # Mistral 3: RMSNorm over hv, merging_layer M^2 hv x hv, linear_1, linear_2
        linear_merger = wide * hv + hv * ho + ho * ho
        merger = Count(0, hv + linear_merger)
        downsample = Count(0, hv)       # ln_pre, part of the vision_tower
    elif k.projector == "pool":     # RMSNorm over hv (replicated), one linear hv x ho without bias (column-parallel)
        merger, linear_merger = Count(hv * ho, hv), hv * ho
    else:
        merger, linear_merger = Count(wide * wide + wide + wide * ho, norm + ho), wide * wide + wide * ho
    D = m.vision_deepstack_mergers
    deep = Count(D * (wide * wide + wide + wide * ho), D * (2 * wide + ho))
    if not k.tp_split:
        layer, deep = _replicated(layer), _replicated(deep)
        if k.projector != "pool":   # Qwen2.5-VL's merger is part of Hugging Face's module
            merger = _replicated(merger)
    post = Count(0, 2 * hv if k.post_norm else 0)
    return VisionParams(patch, pos, layer, m.vision_num_layers, merger, lin, linear_merger, deep, post, unfrozen,
                        downsample)


def muon_matrices(m) -> tuple[tuple, tuple] | None:
    """The tower's 2-D weights that Megatron-Core's Muon takes, as (rows, cols, how many) on one GPU: (the encoder's,
    the projection's), what freeze_vision_model and freeze_vision_projection freeze. None for a tower whose parameter
    shapes are not read for it here (only :data:`MUON_TOWERS`).

    ``kimi_k25`` (module docstring), whole on every tensor-parallel rank::

        encoder     Lv x (qkv 3 hv x hv, out hv x hv, fc0 fv x hv, fc1 hv x fv)     (qkv: hv + 2 g d rows)
        projection  M^2 hv x M^2 hv, ho x M^2 hv

    The Conv2d's 4-D weight, the 3-D position grid and every norm and bias go to Adam."""
    if not has_vision(m) or m.vision_model_type not in MUON_TOWERS:
        return None
    hv, fv, M, Lv = m.vision_hidden_size, m.vision_ffn_hidden_size, m.vision_spatial_merge_size, m.vision_num_layers
    ho = m.vision_out_hidden_size or m.hidden_size
    heads = m.vision_num_attention_heads
    qkv = hv + 2 * (m.vision_num_query_groups or heads) * (hv // heads)
    wide = M * M * hv
    return ((qkv, hv, Lv), (hv, hv, Lv), (fv, hv, Lv), (hv, fv, Lv)), ((wide, wide, 1), (ho, wide, 1))
