"""The vision tower of a vision-language model: Qwen3.5's and Qwen3-VL's ViT, patch merger and (Qwen3-VL) deepstack
mergers, as Megatron-Bridge builds them.

Sources: NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/
``vision_model.py`` (``Qwen3VLVisionModel``: patch_embed, pos_embed, decoder, merger), ``utils.py``
(``Qwen3VLVisionPatchEmbed``: a Conv3d with bias; ``Qwen3VLVisionPatchMerger``), ``transformer_config.py``
(``get_vision_model_config``: LayerNorm, biases on every linear, no GQA, tanh-GELU MLP not gated, the language
model's tensor-parallel size and recompute granularity / method / layer count, no sequence or context parallelism,
pipeline size 1), ``model.py`` (``Qwen3VLModel``: the tower is built where ``pre_process``, the first pipeline
stage; ``freeze``); the layer spec is Megatron-Core's ``get_vit_layer_with_transformer_engine_spec``
(Megatron-LM @ d98e8a64 : megatron/core/models/vision/vit_layer_specs.py: TELayerNormColumnParallelLinear qkv and
fc1 with the norms fused in, TERowParallelLinear proj and fc2). Symbols: hv hidden width, fv MLP width, Lv layers,
P patch side, Pt frames per patch, C channels, Np position embeddings, M spatial merge, ho output width (the
language model's hidden size), t tensor-parallel size.

Parameters::

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

``freeze_vision_model`` freezes the patch embedding, the positions and the layers (``Qwen3VLModel.freeze`` turns
the merger and the deepstack mergers back on unless ``freeze_vision_projection``, which freezes both); frozen
parameters keep their weights only. D is ``vision_deepstack_mergers``.

Tokens: an image of side R pixels (a multiple of P M) gives (R / P)^2 patches to the tower (one temporal patch:
the processor repeats an image to Pt frames) and (R / P)^2 / M^2 tokens to the language model.
"""

from __future__ import annotations

from typing import NamedTuple

from .layers.base import Count

__all__ = ["VisionParams", "has_vision", "image_patches", "image_tokens", "vision_params"]


def has_vision(m) -> bool:
    """Whether a model section has a vision tower."""
    return m.vision_num_layers is not None


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

    @property
    def projection(self) -> Count:
        """The patch merger and the deepstack mergers: what freeze_vision_projection freezes."""
        return self.merger + self.deepstack

    @property
    def encoder(self) -> Count:
        """Patch embedding, positions and layers: what freeze_vision_model freezes."""
        return self.patch_embed + self.pos_embed + Count(self.layers * self.layer.sharded,
                                                         self.layers * self.layer.replicated)

    @property
    def total(self) -> int:
        return self.encoder.total + self.projection.total


def vision_params(m) -> VisionParams | None:
    """The vision tower's parameters (None without one); see the module docstring."""
    if not has_vision(m):
        return None
    hv, fv, M = m.vision_hidden_size, m.vision_ffn_hidden_size, m.vision_spatial_merge_size
    ho = m.vision_out_hidden_size or m.hidden_size
    patch = Count(0, m.vision_in_channels * m.vision_temporal_patch_size * m.vision_patch_size ** 2 * hv + hv)
    pos = Count(0, m.vision_num_position_embeddings * hv)
    lin = 3 * hv * hv + hv * hv + hv * fv + fv * hv
    layer = Count(lin + 3 * hv + fv, 4 * hv + hv + hv)
    wide = M * M * hv
    merger = Count(wide * wide + wide + wide * ho, 2 * hv + ho)
    D = m.vision_deepstack_mergers
    deep = Count(D * (wide * wide + wide + wide * ho), D * (2 * wide + ho))
    return VisionParams(patch, pos, layer, m.vision_num_layers, merger, lin, wide * wide + wide * ho, deep)
