"""The vision tower's memory on the first pipeline stage: its weights, gradients and optimizer states, and the
activations one micro-batch of images keeps (estimator/model/vision.py for the tower's parameters and sources).

States (the ``qwen3_vl`` tower; the ``qwen2_5_vl`` one is described at the end): the tower's parameters sit on
the first stage (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/model.py
``Qwen3VLModel.__init__`` builds ``vision_model`` only where ``pre_process``), split over the language model's
tensor-parallel ranks (``get_vision_model_config`` copies ``tensor_model_parallel_size``) and replicated over the
data-parallel ones like any dense parameter. Trained parameters hold weights, gradients and optimizer states as the
language model's dense parameters do; frozen ones (``freeze_vision_model``: patch embedding, positions and layers;
``freeze_vision_projection``: the patch merger; ``Qwen3VLModel.freeze`` sets ``requires_grad`` false, and the
distributed optimizer and DDP skip them) hold their weights only, in the weights' dtype. The tower runs in bf16 even
in an FP8 run: ``get_vision_model_config`` builds a fresh ``Qwen3VLTransformerConfig`` and copies no ``fp8`` setting
(Megatron-Core's default None), so its linears keep no FP8 copies and save bf16 inputs; Float16Module casts its
weights to bf16 with the rest of the model. With Muon (``training.optimizer: muon``) the tower's trained 2-D weights
(:attr:`VisionStage.matrices`, the ``kimi_k25`` tower: estimator/model/vision.py ``muon_matrices``) take Muon's
states and the rest of the tower Adam's, as the language model's do (estimator/memory/features/optimizers.py,
muon_step.py).

Activations per micro-batch, with ``N = micro_batch_size x images_per_sample x patches per image`` patches and
``N / M^2`` merged tokens (B bytes per element, hv / fv the tower's widths, t the tensor-parallel size; the tower
runs without sequence or context parallelism, every image a sequence of its own in one packed batch)::

    B N C Pt P^2                   the patch embedding's input (the Conv3d keeps it for its weight gradient)
    + Lv x one ViT layer           the language model's attention and MLP formulas for a layer of the tower's
                                   shape (LayerNorm, biases, MHA, tanh-GELU MLP not gated) over N tokens, under the
                                   language model's recompute granularity, method and layer count
                                   (``get_vision_model_config`` copies them; its recompute_modules stay
                                   Megatron-Core's default, core_attn)
    + 2 B N hv + 8 N               the merger's LayerNorm input and output (fc1's input), and its fp32 statistics
    + 2 B (N / M^2) M^2 hv / t     fc1's output (the GELU's input) and the GELU's output (fc2's input)
    + D x (B N hv + 8 N / M^2      Qwen3-VL's D deepstack mergers (one per vision_config.deepstack_visual_indexes
           + 2 B N hv / t)         entry): the post-shuffle LayerNorm's output (fc1's input; its input is the
                                   tapped layer's output, which the next tower layer keeps already), its fp32
                                   statistics per merged row, fc1's output and the GELU's output

The deepstack mergers run inside the tower's layer loop (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/
qwen_vl/modelling_qwen3_vl/transformer_block.py, ``deepstack_merger_list`` called after layer ``l_no``, also in the
checkpointed ``custom`` forward), so under full recompute of the tower their tensors are rebuilt in the backward pass
and not kept. With the tower frozen its layers keep nothing, so each deepstack merger keeps its LayerNorm's input
too: D x (2 B N hv + 8 N / M^2 + 2 B N hv / t). Where the deepstack outputs join the language model
(``Qwen3VLTransformerBlock._deepstack_process``, in each of its first D layers: a masked gather, ``clone`` and add,
a masked store) the saved tensors are the masks' int64 indices, 32 bytes per image token and layer (not counted:
under 0.1 MiB for a thousand image tokens), and the transposed copies are transient.

With the tower frozen (``freeze_vision_model``) only the mergers' parts are kept (their inputs need no gradient);
with the mergers frozen too nothing is (no tensor on the way needs a gradient). The images' tokens are part of the
language model's sequence (``training.seq_length``), so the language model's own activations do not change.

The ``qwen2_5_vl`` tower (Qwen2.5-VL) is Hugging Face's module, not Megatron-Core layers (Megatron-Bridge @ 067f987d
: src/megatron/bridge/models/qwen_vl/modeling_qwen25_vl.py ``Qwen25VLModel``): every tensor-parallel rank of the
first stage holds all of it (its parameters are replicated, their gradients averaged over the tensor-parallel group:
``hook_hf_module_setattr_for_tp_grad_sync``) and runs it on all the micro-batch's images, so neither its states nor
its activations divide by t; the language model's recompute settings do not reach it (Bridge never turns on its
``gradient_checkpointing``), so every layer keeps its tensors. What its autograd graph saves (huggingface/
transformers @ 00b676f8 : src/transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py, the default ``sdpa``
attention over each window or full-attention chunk, no dropout), per layer over N patches::

    2 x (4 N hv + 4 N + B N hv)     Qwen2RMSNorm norm1 and norm2: the fp32 upcast (kept by ``pow``), the fp32
                                    reciprocal root per row, the normalized input cast back (kept by the weight's
                                    multiply)
    B N hv                          qkv's input (norm1's output)
    3 B N hv                        qkv's output: v is a view of it that attention keeps
    2 B N hv                        q and k after the rotary embedding (cast back from fp32; the rotation's own
                                    multiplies keep only cos and sin, which need no gradient)
    B N hv + 4 N heads              attention's output and its fp32 log-sum-exp per head
    B N hv                          proj's input (the heads joined again)
    B N hv                          the MLP's input (norm2's output; gate_proj and up_proj keep the same tensor)
    4 B N fv                        gate_proj's output (SiLU's input), SiLU's output, up_proj's output (the
                                    product's inputs) and the product (down_proj's input)

that is (8 + 11 B) N hv + 4 B N fv + 8 N + 4 N heads a layer, all Lv of them, plus the patch embedding's input
B N C Pt P^2, the rotary cos and sin shared by every layer 2 x 4 N hv / heads, and the merger (Qwen2_5_VLPatchMerger:
ln_q an RMSNorm over hv as above, fc1's input, the GELU's input and output) (4 + 4 B) N hv + 4 N. With the tower
frozen the merger alone keeps the normalized input, fc1's input and output and the GELU's output: 4 B N hv. The
window reordering's int64 indices (8 bytes a merged token, twice) are not counted. The backward pass's working set
is taken as the MLP's: the product's gradient and the two of its inputs, 3 B N fv (or the merger's 2 B N hv).

The ``gemma3_vl`` tower (Gemma 3) is Hugging Face's SigLIP vision model, whole on every tensor-parallel rank too
(Megatron-Bridge @ 067f987d : src/megatron/bridge/models/gemma_vl/modeling_gemma3_vl.py ``Gemma3VLModel``), each
image a sequence of its own (no mask). Its autograd graph keeps (huggingface/transformers @ 008f5c8c :
src/transformers/models/siglip/modeling_siglip.py ``SiglipEncoderLayer``, ``sdpa`` attention), per layer::

    2 x (B N hv + 8 N)              layer_norm1 and layer_norm2 (nn.LayerNorm): the input, fp32 mean and rstd
    B N hv                          q_proj, k_proj and v_proj's input (layer_norm1's output)
    3 B N hv                        q, k and v, which attention keeps
    B N hv + 4 N heads              attention's output and its fp32 log-sum-exp per head
    B N hv                          out_proj's input (the heads joined again)
    B N hv                          fc1's input (layer_norm2's output)
    2 B N fv                        fc1's output (the tanh GELU's input) and the GELU's output (fc2's input)

that is 9 B N hv + 2 B N fv + 16 N + 4 N heads a layer, all Lv of them; plus the Conv2d's input B N C P^2,
post_layernorm's input and statistics and the average pool's input (the patches regrouped by image side:
``AvgPool2d`` keeps its input) 2 B N hv + 8 N, and the projector (Megatron's ``Gemma3VLMultimodalProjector`` over
the pooled rows R = N / M^2: the RMSNorm's input and fp32 rsigma, the linear's input) 2 B R hv + 4 R, which is all
that is kept when the tower is frozen and the projector trained. Its backward working set is taken as the MLP's,
2 B N fv.

The ``kimi_k25`` tower (Kimi K2.5's MoonViT and its PatchMergerMLP, the checkpoint's own modules; Megatron-Bridge @
067f987d : src/megatron/bridge/models/kimi_vl/modeling_kimi_k25_vl.py) is whole on every tensor-parallel rank too,
every image a packed sequence of its own under flash attention (``_configure_kimi_vision_attention``; without
flash-attn Bridge falls back to eager attention, whose N^2 scores are not modelled). Per layer (norm0, packed qkv,
the complex rotary embedding, flash attention, out projection, norm1, fc0, the tanh GELU, fc1)::

    2 x (B N hv + 8 N)              norm0 and norm1: the input, fp32 mean and rstd
    2 B N hv                        the qkv projection's input (norm0's output) and fc0's input (norm1's output)
    3 B N hv                        the packed qkv output (v is a view of it that attention keeps)
    2 B N hv                        q and k after the rotary embedding (the complex multiply keeps only the table)
    B N hv + 4 N heads              attention's output, also the out projection's input, and its log-sum-exp
    2 B N fv                        fc0's output (the GELU's input) and the GELU's output (fc1's input)

that is 10 B N hv + 2 B N fv + 16 N + 4 N heads a layer; plus the Conv2d's input B N C P^2, the complex64 rotary
table 4 N hv / heads, final_layernorm's input and statistics B N hv + 8 N, and the merger (pre_norm's input and
statistics, fc0's input and output, fc1's input over N / M^2 rows of M^2 hv) 4 B N hv + 8 N, which is also what a
frozen tower leaves. Backward working set: the MLP's, 2 B N fv.

The ``glm4v`` tower (GLM-4.5V, transformers' ``Glm4vVisionModel``, whole on every tensor-parallel rank:
Megatron-Bridge @ 067f987d : src/megatron/bridge/models/glm_vl/modeling_glm_45v.py) has Qwen2.5-VL's layer
(RMSNorms, rotary q / k, ``sdpa`` attention per image, a gated SiLU MLP of width fv), so a trained layer keeps
(8 + 11 B) N hv + 4 B N fv + 8 N + 4 N heads. ``GLM45VModel.freeze`` freezes patch_embed and the blocks, or the
merger, but never the positions, post_conv_layernorm, post_layernorm or the downsample, so gradients flow back
through frozen layers too, which then keep what the input gradient needs and no linear's input:
2 x (4 N hv + 4 N) for the norms' fp32 inputs and statistics, 3 B N hv + 2 B N hv + B N hv + 4 N heads for
attention, 3 B N fv for the SiLU and the gated product; 8 N hv + 8 N + 6 B N hv + 4 N heads + 3 B N fv a layer.
Besides the layers: the Conv3d's input and post_conv_layernorm (4 N hv + 4 N + B N hv; B N hv alone when the patch
embedding is frozen); the fp32 position table the resampling keeps 4 Np hv and its grid 8 N; the rotary cos and sin
8 N hv / heads; post_layernorm 4 N hv + 4 N + B N hv and the downsample's input B N hv; the merger over R = N / M^2
rows (proj's input, the LayerNorm's input and statistics, the GELU's input, gate / up's input, the SiLU's input and
output, up's output and down's input) 4 B R ho + 4 B R c + 8 R, or, frozen, 2 B R ho + 3 B R c + 8 R (the
LayerNorm's and GELU's inputs, the SiLU and the product). Nothing of it goes away with both freeze fields on.

The ``radio`` tower (Nemotron Nano VL, Megatron-Core's ``RADIOViTModel`` inside ``LLaVAModel``: Megatron-Bridge @
067f987d : src/megatron/bridge/models/nemotron_vl/nemotron_vl_provider.py) is split over the tensor-parallel ranks
like the qwen3_vl tower, but its config sets recompute_granularity None, so its layers keep everything whatever the
language model recomputes. Each image is one 512-pixel tile whose (512 / P)^2 patches and 16 class tokens run
through the layers (the layer formulas over ``N + 16 x tiles`` tokens; fast_gelu, like squared_relu, is
``@jit_fuser``, torch.compile since PyTorch 2.2: Megatron-LM @ d98e8a64 : megatron/core/activations.py, jit.py, so it
keeps its input as a fused GELU does); the embedder (a ColumnParallelLinear with gather_output) keeps its input
B N C P^2. The class tokens are dropped and the pixel shuffle regroups R = N / 4 rows of 4 hv (copies that need no
gradient), then the projector, the language model's MLP (a TELayerNormColumnParallelLinear fc1: its norm's input
and output 2 B N hv and fp32 statistics, 4 R for RMSNorm, 8 R for LayerNorm; fc1's output and the activation's
output 2 B R c / t, or 4 B R c / t gated: fc1's 2c-wide output, the activation's output and the product). With the
tower frozen only the projector's part is kept. Backward working set: the projector's 2 B R c / t (twice gated), or
a tower layer's.

The ``ernie45_vl`` tower (ERNIE-4.5-VL, transformers' ``Ernie4_5_VL_MoeVisionTransformerPretrainedModel`` and
``Ernie4_5_VL_MoeVariableResolutionResamplerModel``, whole on every tensor-parallel rank: Megatron-Bridge @ 067f987d
: src/megatron/bridge/models/ernie_vl/modeling_ernie45_vl/model.py; huggingface/transformers @ 4f2fa85a :
src/transformers/models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py), each image a packed sequence of its own
(``sdpa`` or flash attention, no dropout). Per layer::

    2 x (B N hv + 8 N)              norm1 and norm2 (nn.LayerNorm): the input, fp32 mean and rstd
    B N hv                          qkv's input (norm1's output)
    3 B N hv                        qkv's output: v is a view of it that attention keeps
    2 B N hv                        q and k after the rotary embedding, cast back to bf16 (the fp32 products keep only
                                    cos and sin, which need no gradient)
    B N hv + 4 N heads              attention's output and its fp32 log-sum-exp
    B N hv                          proj's input (the heads joined again)
    B N hv                          fc1's input (norm2's output)
    3 B N fv                        fc1's output, quick_gelu's sigmoid (x sigmoid(1.702 x) keeps both) and its
                                    output (fc2's input)

that is 11 B N hv + 3 B N fv + 16 N + 4 N heads a layer, all Lv of them, plus the patch embedding's input
B N C P^2 and the fp32 rotary cos and sin 8 N hv / heads. The final LayerNorm ``ln`` keeps B N hv + 8 N. The
resampler, over R = N / M^2 rows of W = M^2 hv (B R W = B N hv): ``spatial_linear`` fc1's input, the GELU's input,
fc2's input, the LayerNorm's input 4 B N hv + 8 R; the temporal slicing duplicates each image's rows (temporal
fc1's input, 2 W wide) 2 B N hv, the GELU's input and fc2's input 2 B N hv, the LayerNorm's input B N hv + 8 R;
``mlp``'s input B N hv; ``after_norm`` (an RMSNorm in fp32) 4 R ho + 4 R + B R ho. ``Ernie45VLModel.freeze`` freezes
patch_embed and blocks, or the resampler, never ``ln``: with the tower frozen the layers keep nothing but ``ln`` and
the resampler keep their part, and with both frozen the gradient still flows back through the resampler to ``ln``,
whose keeping is taken as the trained resampler's (an upper bound: frozen linears need not keep their inputs).
Backward working set: the MLP's 3 B N fv, or the temporal fc1's 3 B N hv.

The ``exaone45`` tower (EXAONE 4.5: Megatron-Bridge @ 067f987d : src/megatron/bridge/models/exaone/exaone45/
modelling_exaone45/model.py) is Megatron-Core's ViT layers with Transformer Engine modules, split over the
tensor-parallel ranks and under the language model's recompute settings like the ``qwen3_vl`` tower, so its layers
take the same formulas for their shape: RMSNorm, grouped-query attention (k and v of vision_num_query_groups
groups), a gated SiLU MLP, biases; windowed or full attention both keep activations linear in N (flash attention,
``thd`` packed windows). Besides the layers: the Conv3d's input B N C Pt P^2, and the merger (a TENorm RMSNorm over
hv: its input and output 2 B N hv and fp32 rsigma 4 N; fc1's output and the GELU's output 2 B N hv / t). No
deepstack mergers. Frozen, as for ``qwen3_vl``. Like the language model's rotary embedding, the unfused 2-D rotary
embedding's saved cos and sin (in fp32: apply_rotary_pos_emb_in_fp32, modelling_exaone45/rope.py; 16 N d bytes a
layer over the heads' width d, for q and k) are not counted: 28 MiB of the 1.55 GiB a 448-pixel image keeps in
EXAONE 4.5 33B's tower, 1.8%.

The ``step37`` tower (Step 3.7's Perception-Encoder: Megatron-Bridge @ 067f987d : src/megatron/bridge/models/stepfun/
modelling_step37/vision_model.py, utils.py) is plain PyTorch, whole on every tensor-parallel rank, never
recomputed (no checkpointing reaches it), each image encoded on its own (``Step37Model._encode_images_for_insert``),
attention by ``F.scaled_dot_product_attention`` (flash or memory-efficient kernel, no mask). Per layer::

    2 x (B N hv + 8 N)              ln_1 and ln_2 (nn.LayerNorm): the input, fp32 mean and rstd
    B N hv                          in_proj's input (ln_1's output)
    3 B N hv                        in_proj's output: v is a view of it that attention keeps
    2 B N hv                        q and k after the 2-D rotary embedding (the fp32 products cast back)
    16 N d                          the fp32 cos and sin apply_rotary_emb computes for q and again for k (d = hv /
                                    heads), which the products keep
    B N hv + 4 N heads              attention's output and its fp32 log-sum-exp
    B N hv                          out_proj's input (the heads joined again)
    2 B N hv                        ls_1's and ls_2's inputs (out_proj's and c_proj's outputs: the LayerScale
                                    gamma wants them)
    B N hv                          c_fc's input (ln_2's output)
    3 B N fv                        c_fc's output, quick_gelu's sigmoid and its output (c_proj's input)

that is 13 B N hv + 3 B N fv + 16 N + 4 N heads + 16 N d a layer, all Lv of them; plus conv1's input B N C P^2,
ln_pre's input and statistics B N hv + 8 N, the two convolutions' inputs B N hv + B N hv / 2 (N / 4 positions of
2 hv) and align_projector's input B N hv / 4 (N / 16 rows of 4 hv). With the tower frozen only the projector's
input is kept; with the projector frozen (and the tower trained) not that. Backward working set: the MLP's 3 B N fv.

Video frames (omni28, the radio tower of Nemotron Omni): every Pt = ``vision_temporal_patch_size`` frames pass the
tower as one image (Megatron-LM @ d98e8a64 : megatron/core/models/vision/radio.py ``_apply_temporal_grouping``), so
N counts ``video_frames_per_sample / Pt`` images beside ``images_per_sample``; a trained embedder keeps its input,
C Pt P^2 per video patch (the video embedder's, or the one embedder's with Pt > 1).

Nemotron Omni's sound tower (estimator/model/audio.py) sits on the same first stage and is counted here too: the
Parakeet encoder whole on every tensor-parallel rank (trained: weights, gradients, optimizer states; frozen by
``freeze_sound_encoder``: weights only), the sound projection split like the language model's MLP. With the encoder
frozen (every Megatron-Bridge Nemotron Omni recipe) its input, a mel spectrogram, needs no gradient and no
parameter of it does, so its autograd graph keeps nothing; the trained projection then keeps, over the R = b x clips
x W rows the encoder returns (W = :func:`estimator.model.audio.encoder_width`, every clip padded to the longest)::

    2 B R hs + 4 R (8 R)            fc1's fused RMSNorm (LayerNorm): its input and its output, fc1's input, and the
                                    fp32 statistics per row (TELayerNormColumnParallelLinear)
    + B R p / t (2 B R p / t)       fc1's output, the activation's input (gated: both halves)
    + B R p / t                     the activation's output, fc2's input

and its backward working set is 2 B R p / t (twice with a gated MLP). A trained encoder with clips is refused by the
rules (estimator/config/rules/media.py): its conformer blocks' saved tensors are not modelled.

The ``gemma4`` tower (Gemma 4: transformers' ``Gemma4VisionModel`` and ``Gemma4MultimodalEmbedder``, eager PyTorch
modules, not Transformer Engine layers, whole on every tensor-parallel rank and never recomputed: Megatron-Bridge @
067f987d : src/megatron/bridge/models/gemma_vl/modeling_gemma4_vl.py; huggingface/transformers @ 0246b4f3 :
src/transformers/models/gemma4/modeling_gemma4.py) runs the micro-batch's images as one padded batch, ``sdpa``
attention under the padding mask (the memory-efficient kernel: output and fp32 log-sum-exp). Its ``Gemma4RMSNorm``
computes in fp32: the upcast input (kept by ``pow`` and the product), the mean square and its power (4 bytes a
row each), and with a weight the fp32 normalised tensor the weight's product keeps: 8 N hv + 8 N a norm over hv
(4 N hv + 8 N H for v_norm, which has no weight). Per layer over N patches, H heads::

    4 x (8 N hv + 8 N)              input, post-attention, pre- and post-feedforward norms
    B N hv                          q_proj, k_proj and v_proj's input (the input norm's output)
    2 x (8 N hv + 8 N H)            q_norm and k_norm over the head width (N H rows)
    4 N hv + 8 N H                  v_norm (no weight)
    3 B N hv                        q and k after the 2-D rotary embedding (its products keep only cos and sin) and v,
                                    which attention keeps
    B N hv + 4 N H                  attention's output and its fp32 log-sum-exp
    B N hv                          o_proj's input (the heads joined again)
    B N hv                          gate_proj and up_proj's input (the pre-feedforward norm's output)
    4 B N fv                        gate's output (the tanh GELU's input), the GELU's output, up's output and the
                                    product (down_proj's input)

that is 52 N hv + 32 N + 28 N H + 7 B N hv + 4 B N fv a layer, all Lv of them; plus the patch embedding's input
B N 3 P^2 and the one-hot position lookup its matmul keeps, 2 B N Np (both position tables), the rotary cos and sin
2 B N d shared by every layer, the pooler's fp32 copy of the last layer's output 4 N hv and its averaging weights
4 N T (T tokens an image: the pool is a matmul per image), and the embedder over R = N / M^2 rows (its scaleless
RMSNorm's fp32 input and statistics 4 R hv + 8 R, the linear's input B R hv). With the tower frozen only the linear's
input B R hv is kept. Backward working set: the MLP's 3 B N fv.

The ``pixtral`` tower (Mistral 3, Magistral, Ministral 3: transformers' ``PixtralVisionModel`` and
``Mistral3MultiModalProjector``, eager PyTorch, whole on every tensor-parallel rank, never recomputed: Megatron-Bridge
@ 067f987d : src/megatron/bridge/models/ministral3/modeling_ministral3.py; huggingface/transformers @ 0233e509 :
src/transformers/models/pixtral/modeling_pixtral.py) runs all N patches of the micro-batch's images as one sequence
under ``sdpa`` with a block-diagonal additive mask of N x N in the weights' dtype (``generate_block_attention_mask``),
which the memory-efficient kernel keeps for its backward pass: B N^2, once for every layer. Its RMSNorm is
Qwen2.5-VL's (4 N hv + 4 N + B N hv). Per layer::

    2 x (4 N hv + 4 N + B N hv)     attention_norm and ffn_norm
    B N hv                          q_proj, k_proj and v_proj's input
    3 B N hv                        q and k after the rotary embedding, and v_proj's output, which attention keeps
    B N hv + 4 N H                  attention's output and its fp32 log-sum-exp
    B N hv                          o_proj's input
    B N hv                          gate_proj and up_proj's input
    4 B N fv                        gate's output, SiLU's output, up's output and the product (down_proj's input)

that is (8 + 9 B) N hv + 8 N + 4 N H + 4 B N fv a layer; plus patch_conv's input B N C P^2, ln_pre
4 N hv + 4 N + B N hv, the rotary cos and sin 2 B N d, the mask B N^2, and the projector over R = N / M^2 rows: its
RMSNorm 4 N hv + 4 N + B N hv, merging_layer's input B N hv, linear_1's input B R hv, the GELU's input and output
(linear_2's input) 2 B R ho. With the tower frozen the projector keeps all but its norm's fp32 input and statistics:
2 B N hv + B R hv + 2 B R ho. Backward working set: the MLP's 3 B N fv.

The ``qwen3_vl`` tower's own CUDA graphs (``training.vision_cuda_graph_impl: transformer_engine``, Megatron-Bridge's
``vision_cuda_graph_impl`` / ``vision_cuda_graph_scope`` / ``max_vision_cuda_graph_seq_length``; vgraph29).
Megatron-Bridge @ 067f987d : src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/vision_model.py
(``_uses_vision_cuda_graph``: whenever the tower's config has the graphs and is training, so in the eager warm-up
steps too; ``_maybe_pad_vision_sequence_for_cuda_graph``, ``_vision_forward_packed_attention_setup``) pads the
micro-batch's N patches with zeros to S = ``max_vision_cuda_graph_seq_length`` (without it ``num_position_embeddings
// M^2``, as Megatron-LM @ d98e8a64 : megatron/core/transformer/cuda_graphs.py ``get_vision_cuda_graph_seq_length``
gives the capture; N > S raises ValueError, which the rules refuse by name) and runs the layers over one sequence
of S tokens, without the per-image packed-sequence parameters (the ViT spec's ``no_mask`` attention ignores the
padding mask it builds); the deepstack mergers run inside that loop, over S; the merger sees the N real patches
again. So the layer formulas above take S tokens instead of N. training/train.py builds Megatron-Core's
``VisionTECudaGraphHelper`` (cuda_graphs.py: ``TECudaGraphHelper`` with the tower's layers, batch 1, one model
chunk) and captures after the language model's helper, at step ``cuda_graph_warmup_steps``, with Transformer
Engine @ d0067d0d ``make_graphed_callables`` (transformer_engine/pytorch/graph.py) into a pool of its own:

- every tower layer is captured (a ViT layer has attention and an MLP, so any scope of attn / mlp makes it
  graphable: ``_layer_is_graphable``), one graph per layer and micro-batch of the step (one with PP 1:
  ``_get_cuda_graph_input_data``);
- static inputs: the helper's ``_get_sample_arguments`` allocates, for every (micro-batch, layer), the bf16
  hidden states [S, 1, hv] and, with attn captured, the boolean [1, 1, S, S] attention mask
  (transformer_layer.py ``get_layer_static_inputs``) before the capture; Transformer Engine then keeps the ones of
  the micro-batches in flight (``_reuse_graph_input_output_buffers``: a buffer whose backward is done serves a
  later forward), and each graph's output [S, 1, hv]: 2 S hv + B S hv + S^2 bytes a layer and micro-batch in flight,
  kept all run (the capture moment holds 2 S hv + S^2 a layer for every micro-batch of the step first);
- the captured parts' saved tensors (the whole layer, or its attention or MLP part) live in the private pool once
  captured, reserved but not allocated, with one captured region's backward working set; the uncaptured part runs
  eagerly.

The first stage's micro-batches in flight (under 1F1B, the pipeline size) set the counts, as for the language
model's graphs (estimator/memory/features/cuda_graphs.py, whose ``peak`` weighs the warm-up, the two captures and
the steady step). Refused by name: another tower kind, a frozen tower (its graphs are captured with an input that
wants a gradient), full recompute (the tower takes the language model's recompute settings), virtual pipeline
stages (the helper captures in one chunk's order), video frames. With no images the tower does not run and its
graphs are not counted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from ..model.layers import LayerKind
from ..model.resolve import Resolved, resolve
from ..model.audio import encoder_width, sound_params
from ..model.vision import (RADIO_TILE, image_patches, image_tokens, muon_matrices, radio_class_tokens, tower_kind,
                            vision_params)
from ..config.rules.vision import vision_graph_tokens
from .activations import context, held_per_layer, layer_activations

__all__ = ["VisionGraphs", "VisionStage", "vision_stage"]


class VisionGraphs(NamedTuple):
    """The vision tower's own CUDA graphs (``training.vision_cuda_graph_impl``), per micro-batch: see the module
    docstring."""

    captured: int         # saved tensors of the captured parts (in the graphs' private pool once captured)
    static: int           # static inputs and outputs of every captured layer (kept all run)
    created: int          # the static inputs the helper allocates for each micro-batch of the step before capture
    work: int             # the backward working set of the largest captured region


class VisionStage(NamedTuple):
    """The vision tower on one GPU of the first stage."""

    trained: int          # trained parameters (weights, gradients, optimizer states)
    trained_linear: int   # of which linear-layer weights Transformer Engine keeps in FP8 (none: see the docstring)
    frozen: int           # frozen parameters (weights only)
    activations: int      # bytes one micro-batch keeps for the backward pass
    backward_peak: int    # the largest gradient working set of the tower's backward pass
    graphs: VisionGraphs | None = None   # the tower's own CUDA graphs, when on
    matrices: tuple = ()  # the trained 2-D weights Muon takes, (rows, cols, how many) on one GPU (kimi_k25 only:
                          # estimator/model/vision.py muon_matrices); the rest of ``trained`` is Adam's

    @property
    def trained_matrices(self) -> int:
        """Elements of :attr:`matrices`: the trained tower parameters Muon takes on one GPU."""
        return sum(a * b * k for a, b, k in self.matrices)


_CACHE: dict = {}


def _vit_config(r: Resolved, tokens: int):
    """The configuration of a plain GPT layer stack of the tower's shape, for the layer formulas (the radio tower's
    config turns recompute off)."""
    cfg, m = r.cfg, r.cfg.model
    hv, heads = m.vision_hidden_size, m.vision_num_attention_heads
    k = tower_kind(m)       # exaone45: RMSNorm, gated SiLU, grouped-query attention; qwen3_vl, radio: the defaults
    model = replace(m, num_layers=m.vision_num_layers, hidden_size=hv, num_attention_heads=heads,
                    num_query_groups=m.vision_num_query_groups or heads, kv_channels=hv // heads,
                    ffn_hidden_size=m.vision_ffn_hidden_size,
                    num_experts=None, moe_layer_freq=1, moe_shared_expert_intermediate_size=None,
                    activation_func=k.activation, gated_linear_unit=k.gated, normalization=k.norm,
                    add_bias_linear=True, add_qkv_bias=True, qk_layernorm=False, qk_layernorm_full_dim=False,
                    qk_l2_norm=False, attention_output_gate=False, experimental_attention_variant=None,
                    linear_attention_freq=None, multi_latent_attention=False, mtp_num_layers=None,
                    hybrid_layer_pattern=None, post_layernorm=False, pre_layernorm=True, softmax_type="vanilla",
                    hidden_dropout=0.0, attention_dropout=0.0, vision_num_layers=None)
    training = replace(cfg.training, seq_length=tokens, micro_batch_size=1, sequence_parallel=False,
                       recompute_modules=None, global_batch_size=None)
    if m.vision_model_type == "radio":      # NemotronVLModelProvider: recompute_granularity / method / layers None
        training = replace(training, recompute_granularity=None, recompute_method=None, recompute_num_layers=None)
    parallelism = replace(cfg.parallelism, pipeline_model_parallel_size=1, context_parallel_size=1,
                          expert_model_parallel_size=1, expert_tensor_parallel_size=None,
                          virtual_pipeline_model_parallel_size=None, num_layers_in_first_pipeline_stage=None,
                          num_layers_in_last_pipeline_stage=None, pipeline_model_parallel_layout=None,
                          account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False)
    precision = replace(cfg.precision, fp8=False, fp8_param_gather=False, first_last_layers_bf16=False)
    return replace(cfg, model=model, training=training, parallelism=parallelism, precision=precision)


def _step37_activations(m, n: int, B: int, frozen_encoder: bool, frozen_projection: bool) -> tuple[int, int]:
    """(saved bytes, backward working set) of Step 3.7's Perception-Encoder and projector for ``n`` patches: what
    their eager PyTorch autograd graph keeps (see the module docstring)."""
    hv, fv, heads = m.vision_hidden_size, m.vision_ffn_hidden_size, m.vision_num_attention_heads
    projector = 0 if frozen_projection else B * n * hv // 4     # align_projector's input: n / 16 rows of 4 hv
    if frozen_encoder:
        return projector, 2 * B * n * hv // 4
    layer = 13 * B * n * hv + 3 * B * n * fv + 16 * n + 4 * n * heads + 16 * n * (hv // heads)
    front = B * n * m.vision_in_channels * m.vision_patch_size ** 2 + B * n * hv + 8 * n    # conv1's input, ln_pre
    down = B * n * hv + B * n * hv // 2                         # the two convolutions' inputs
    return front + m.vision_num_layers * layer + down + projector, max(2 * B * n * hv, 3 * B * n * fv)


def _hugging_face_activations(m, n: int, B: int, frozen_encoder: bool, resolution: int) -> tuple[int, int]:
    """(saved bytes, backward working set) of a tower that is Hugging Face's module (Qwen2.5-VL's, Gemma 3's
    SigLIP, Gemma 4's) for ``n`` patches of ``resolution``-pixel images: the tensors its autograd graph keeps (see
    the module docstring), on every tensor-parallel rank alike."""
    hv, fv, heads = m.vision_hidden_size, m.vision_ffn_hidden_size, m.vision_num_attention_heads
    patch_in = B * n * m.vision_in_channels * m.vision_temporal_patch_size * m.vision_patch_size ** 2
    if m.vision_model_type == "gemma3_vl":
        rows = n // m.vision_spatial_merge_size ** 2        # the average pool's output rows, the image tokens
        projector = 2 * B * rows * hv + 4 * rows            # the projector's RMSNorm input and rsigma, proj's input
        if frozen_encoder:
            return projector, 2 * B * rows * hv
        layer = 9 * B * n * hv + 2 * B * n * fv + 16 * n + 4 * n * heads
        post = 2 * B * n * hv + 8 * n                       # post_layernorm's input and statistics, the pool's input
        return (patch_in + m.vision_num_layers * layer + post + projector,
                max(2 * B * n * hv, 2 * B * n * fv))
    if m.vision_model_type == "gemma4":
        rows = n // m.vision_spatial_merge_size ** 2        # the pooled rows, the image tokens
        if frozen_encoder:                                  # embedding_projection's input alone wants keeping
            return B * rows * hv, 2 * B * rows * hv
        d, per_image = hv // heads, image_tokens(m, resolution)
        layer = 52 * n * hv + 32 * n + 28 * n * heads + 7 * B * n * hv + 4 * B * n * fv
        front = patch_in + 2 * B * n * m.vision_num_position_embeddings + 2 * B * n * d   # one-hot lookup, cos, sin
        pool = 4 * n * hv + 4 * n * per_image               # the fp32 copy and the averaging weights
        embedder = 4 * rows * hv + 8 * rows + B * rows * hv
        return (front + m.vision_num_layers * layer + pool + embedder,
                max(2 * B * n * hv, 3 * B * n * fv))
    if m.vision_model_type == "pixtral":
        rows, ho = n // m.vision_spatial_merge_size ** 2, m.vision_out_hidden_size or m.hidden_size
        # the projector's norm output (its weight's product), merging_layer's, linear_1's and linear_2's inputs, GELU's
        projector = 2 * B * n * hv + B * rows * hv + 2 * B * rows * ho
        if frozen_encoder:
            return projector, 2 * B * rows * ho
        norm = 4 * n * hv + 4 * n + B * n * hv              # fp32 input, rstd, the normalised bf16 tensor
        layer = (8 + 9 * B) * n * hv + 8 * n + 4 * n * heads + 4 * B * n * fv
        front = patch_in + norm + 2 * B * n * (hv // heads) + B * n * n     # ln_pre, cos and sin, the block mask
        return (front + m.vision_num_layers * layer + 4 * n * hv + 4 * n + projector,
                max(2 * B * n * hv, 3 * B * n * fv))
    if m.vision_model_type == "kimi_k25":
        merger = 4 * B * n * hv + 8 * n     # pre_norm's input and statistics, fc0's input and output, fc1's input
        if frozen_encoder:
            return merger, 2 * B * n * hv
        layer = 10 * B * n * hv + 2 * B * n * fv + 16 * n + 4 * n * heads
        final = B * n * hv + 8 * n          # final_layernorm's input and statistics
        rope = 4 * n * (hv // heads)        # the complex64 rotary table, shared by every layer
        return (patch_in + rope + m.vision_num_layers * layer + final + merger,
                max(2 * B * n * hv, 2 * B * n * fv))
    if frozen_encoder:      # only the merger's weights want gradients: its norm output, fc1 in and out, GELU out
        return 4 * B * n * hv, 2 * B * n * hv
    merger = (4 + 4 * B) * n * hv + 4 * n
    layer = (8 + 11 * B) * n * hv + 4 * B * n * fv + 8 * n + 4 * n * heads
    rope = 2 * 4 * n * (hv // heads)
    return patch_in + rope + m.vision_num_layers * layer + merger, max(2 * B * n * hv, 3 * B * n * fv)


def _glm4v_activations(m, n: int, B: int, frozen_encoder: bool, frozen_projection: bool) -> tuple[int, int]:
    """(saved bytes, backward working set) of GLM-4.5V's tower for ``n`` patches (see the module docstring): its
    positions, outer norms and downsample stay trained, so gradients always flow back through the layers."""
    hv, f, heads = m.vision_hidden_size, m.vision_ffn_hidden_size, m.vision_num_attention_heads
    ho, c = m.vision_out_hidden_size or m.hidden_size, m.vision_projector_ffn_hidden_size
    rows = n // m.vision_spatial_merge_size ** 2
    common = (4 * m.vision_num_position_embeddings * hv + 8 * n      # the fp32 position table and sampling grid
              + 8 * n * (hv // heads)                                 # the rotary cos and sin
              + 4 * n * hv + 4 * n + B * n * hv + B * n * hv)         # post_layernorm, the downsample's input
    if frozen_encoder:      # frozen linears keep no input; the norms keep their fp32 input for the input gradient
        layer = 8 * n * hv + 8 * n + 6 * B * n * hv + 4 * n * heads + 3 * B * n * f
        front = B * n * hv                                            # post_conv_layernorm: its weight's input
    else:
        layer = (8 + 11 * B) * n * hv + 4 * B * n * f + 8 * n + 4 * n * heads
        front = (B * n * m.vision_in_channels * m.vision_temporal_patch_size * m.vision_patch_size ** 2
                 + 4 * n * hv + 4 * n + B * n * hv)                   # the Conv3d's input, post_conv_layernorm
    if frozen_projection:   # the downsample's gradient still flows back through the merger
        merger = 2 * B * rows * ho + 3 * B * rows * c + 8 * rows
    else:
        merger = 4 * B * rows * ho + 4 * B * rows * c + 8 * rows
    return (front + common + m.vision_num_layers * layer + merger,
            max(2 * B * n * hv, 3 * B * n * f, 3 * B * rows * c))


def _ernie_activations(m, n: int, B: int, frozen_encoder: bool) -> tuple[int, int]:
    """(saved bytes, backward working set) of ERNIE-4.5-VL's tower and resampler for ``n`` patches (see the module
    docstring): the final LayerNorm is always trained, so it and the resampler keep their tensors whatever is
    frozen."""
    hv, fv, heads = m.vision_hidden_size, m.vision_ffn_hidden_size, m.vision_num_attention_heads
    ho = m.vision_out_hidden_size or m.hidden_size
    rows = n // m.vision_spatial_merge_size ** 2
    resampler = 10 * B * n * hv + 16 * rows + 4 * rows * ho + 4 * rows + B * rows * ho
    final = B * n * hv + 8 * n                  # the final LayerNorm's input and statistics
    peak = 3 * B * n * hv                       # the temporal fc1's input gradient beside its output's
    if frozen_encoder:
        return final + resampler, peak
    layer = 11 * B * n * hv + 3 * B * n * fv + 16 * n + 4 * n * heads
    front = B * n * m.vision_in_channels * m.vision_patch_size ** 2 + 8 * n * (hv // heads)
    return front + m.vision_num_layers * layer + final + resampler, max(peak, 3 * B * n * fv)


def _radio_activations(r: Resolved, n: int, B: int, frozen_encoder: bool) -> tuple[int, int]:
    """(saved bytes, backward working set) of the radio tower (Nemotron Nano VL) for ``n`` patches: its layers
    over the patches and class tokens, never recomputed, and the pixel-shuffle projector (module docstring)."""
    m, t = r.cfg.model, r.t
    hv, c = m.vision_hidden_size, m.vision_projector_ffn_hidden_size
    rows = n // m.vision_spatial_merge_size ** 2                # image tokens, each of M^2 hv after the shuffle
    stats = 8 * rows if m.normalization == "LayerNorm" else 4 * rows
    act = 4 if m.gated_linear_unit else 2
    acts = 2 * B * n * hv + stats + act * B * rows * c // t     # fc1's norm input and output, the activation's
    peak = 2 * B * rows * c * (2 if m.gated_linear_unit else 1) // t
    if frozen_encoder:
        return acts, peak
    tokens = n + radio_class_tokens(m) * (n // image_patches(m, RADIO_TILE))     # each tile's class tokens
    rv = resolve(_vit_config(r, tokens))
    layer = layer_activations(rv, LayerKind("attention", "dense"), context(rv))
    held = sum(held_per_layer(rv.cfg.training, [layer] * m.vision_num_layers))   # nothing recomputed
    tr, Pt = r.cfg.training, m.vision_temporal_patch_size
    video = r.b * tr.video_frames_per_sample // Pt * image_patches(m, tr.image_resolution)   # omni28: frame groups
    image_in = 1 if m.vision_separate_video_embedder else Pt       # one embedder over Pt frames, images repeated
    embed_in = (n - video) * image_in + video * Pt
    acts += B * embed_in * m.vision_in_channels * m.vision_patch_size ** 2 + held
    return acts, max(peak, layer.backward_peak)


def _graphs(m, tr, layer, S: int, B: int) -> VisionGraphs:
    """The qwen3_vl tower's CUDA graphs for one micro-batch over ``S`` padded patches (module docstring): every layer
    is captured (a ViT layer has attention and an MLP, so either part of ``vision_cuda_graph_modules`` makes it
    graphable); ``layer``: one tower layer's activations with parts."""
    mods = set(tr.vision_cuda_graph_modules or ()) or {"attn", "mlp"}
    Lv, hv = m.vision_num_layers, m.vision_hidden_size
    captured = (layer.attention if "attn" in mods else 0) + (layer.mlp if "mlp" in mods else 0)
    mask = S * S if "attn" in mods else 0           # the boolean [1, 1, S, S] attention mask static input
    work = layer.backward_peak + layer.recompute_peak if "mlp" in mods else 0
    if "attn" in mods:
        p = layer.parts
        work = max(work, p["qkv"] + p["scores"])
    return VisionGraphs(Lv * captured, Lv * (2 * S * hv + B * S * hv + mask), Lv * (2 * S * hv + mask), work)


def vision_stage(r: Resolved) -> VisionStage | None:
    """The vision tower's share of the first stage (None without a vision tower)."""
    cfg = r.cfg
    m, tr = cfg.model, cfg.training
    vp = vision_params(m)
    if vp is None:
        return None
    key = (m, r.t, r.b, tr.images_per_sample, tr.image_resolution, tr.freeze_vision_model,
           tr.freeze_vision_projection, tr.video_frames_per_sample, tr.audio_clips_per_sample, tr.audio_clip_seconds,
           tr.freeze_sound_encoder, tr.freeze_sound_projection, tr.recompute_granularity, tr.recompute_method,
           tr.recompute_num_layers, tr.vision_cuda_graph_impl, tuple(tr.vision_cuda_graph_modules or ()),
           tr.max_vision_cuda_graph_seq_length,
           tr.attention_backend, tr.transformer_impl, cfg.precision)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    t = r.t
    enc, mer = vp.encoder.per_rank(t), vp.projection.per_rank(t)
    fv, fp = tr.freeze_vision_model, tr.freeze_vision_projection
    trained = (0 if fv else enc) + (0 if fp else mer) + vp.unfrozen.per_rank(t)
    trained_linear = 0          # the tower runs in bf16 even in an FP8 run (no FP8 copies of its weights)
    frozen = (enc if fv else 0) + (mer if fp else 0)
    acts = peak = 0
    graphs = None
    groups = tr.video_frames_per_sample // m.vision_temporal_patch_size    # omni28: each group of frames an image
    n = r.b * (tr.images_per_sample + groups) * image_patches(m, tr.image_resolution)
    if n and m.vision_model_type == "ernie45_vl":     # its final LayerNorm stays trained: always activations
        acts, peak = _ernie_activations(m, n, 4 if cfg.precision.params_dtype == "fp32" else 2, fv)
    elif n and m.vision_model_type == "glm4v":      # parts stay trained whatever is frozen: always activations
        acts, peak = _glm4v_activations(m, n, 4 if cfg.precision.params_dtype == "fp32" else 2, fv, fp)
    elif n and not (fv and fp) and m.vision_model_type == "step37":
        acts, peak = _step37_activations(m, n, 4 if cfg.precision.params_dtype == "fp32" else 2, fv, fp)
    elif n and not (fv and fp) and tower_kind(m).hugging_face:
        acts, peak = _hugging_face_activations(m, n, 4 if cfg.precision.params_dtype == "fp32" else 2, fv,
                                               tr.image_resolution)
    elif n and m.vision_model_type == "radio" and not (fv and fp):
        acts, peak = _radio_activations(r, n, 4 if cfg.precision.params_dtype == "fp32" else 2, fv)
    elif n and not (fv and fp):
        B = 4 if cfg.precision.params_dtype == "fp32" else 2
        hv, M = m.vision_hidden_size, m.vision_spatial_merge_size
        wide = (n // (M * M)) * M * M * hv // t
        stats = 4 if tower_kind(m).norm == "RMSNorm" else 8       # the merger norm's fp32 statistics per patch
        merger = 2 * B * n * hv + stats * n + 2 * B * wide
        # vgraph29: with the tower's CUDA graphs its layers (and the deepstack mergers inside their loop) run over
        # the micro-batch's patches padded to S; the patch embedding and the merger see the n real ones.
        graphed = tr.vision_cuda_graph_impl == "transformer_engine"
        nl = vision_graph_tokens(m, tr) if graphed else n
        wide_l = (nl // (M * M)) * M * M * hv // t
        D = m.vision_deepstack_mergers
        rebuilt = not fv and tr.recompute_granularity == "full"      # rebuilt inside the checkpointed layers
        deep = 0 if rebuilt else D * ((2 if fv else 1) * B * nl * hv + 8 * (nl // (M * M)) + 2 * B * wide_l)
        acts, peak = merger + deep, 2 * B * max(wide, wide_l)
        if not fv:
            rv = resolve(_vit_config(r, nl))
            layer = layer_activations(rv, LayerKind("attention", "dense"), context(rv), parts=graphed)
            held = sum(held_per_layer(rv.cfg.training, [layer] * m.vision_num_layers))
            if graphed:
                graphs = _graphs(m, tr, layer, nl, B)
            patch_in = B * n * m.vision_in_channels * m.vision_temporal_patch_size * m.vision_patch_size ** 2
            acts += patch_in + held
            rec = layer.recompute_peak
            if tr.recompute_granularity == "full":      # a checkpointed group is rebuilt in the backward pass
                group = (tr.recompute_num_layers or 1) if tr.recompute_method != "block" else 1
                rec = min(group, m.vision_num_layers) * layer.full - layer.kept_input
            peak = max(peak, layer.backward_peak + rec)
    sp = sound_params(m)
    if sp is not None:          # omni28: Nemotron Omni's sound tower (module docstring)
        enc, proj = sp.encoder.per_rank(t), sp.projection.per_rank(t)
        fe, fp = tr.freeze_sound_encoder, tr.freeze_sound_projection
        trained += (0 if fe else enc) + (0 if fp else proj)
        frozen += (enc if fe else 0) + (proj if fp else 0)
        rows = r.b * tr.audio_clips_per_sample * encoder_width(m, tr.audio_clip_seconds)
        if rows and not fp:     # the encoder is frozen here (a trained one with clips is refused by the rules)
            B = 4 if cfg.precision.params_dtype == "fp32" else 2
            hs, p, gated = m.sound_hidden_size, m.sound_projector_ffn_hidden_size, m.gated_linear_unit
            stats = 8 * rows if m.normalization == "LayerNorm" else 4 * rows
            acts += 2 * B * rows * hs + stats + (3 if gated else 2) * B * rows * p // t
            peak = max(peak, 2 * B * rows * p * (2 if gated else 1) // t)
    mm = muon_matrices(m)
    matrices = (() if fv else mm[0]) + (() if fp else mm[1]) if mm else ()
    out = VisionStage(trained, trained_linear, frozen, acts, peak, graphs, matrices)
    if len(_CACHE) > 1024:
        _CACHE.clear()
    _CACHE[key] = out
    return out
