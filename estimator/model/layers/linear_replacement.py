"""A heterogeneous block's attention or MLP replaced by one linear layer (``replace_with_linear``).

Megatron-LM @ d98e8a64 : megatron/core/transformer/heterogeneous/linear_replacements.py
``TELayerNormColumnParallelLinearGathered`` (the Transformer Engine spec of
megatron/core/models/gpt/heterogeneous/heterogeneous_layer_specs.py): a ``TELayerNormColumnParallelLinear`` of
input and output width h with its fused input norm, its output gathered back over the tensor-parallel ranks
(with sequence parallelism: padded and reduce-scattered). Parameters::

    linear    h h              split over the t tensor-parallel ranks (+ h bias with add_bias_linear, split too)
    norm      nw h             replicated

Activations per micro-batch on one GPU, in bytes: the norm's input (B Tn h), its output as the linear layer
saves it (B Tn h, 1 byte per element with FP8) and the norm's fp32 statistics (4 Tn, 8 Tn for LayerNorm);
the gather keeps nothing (``F.pad`` and the collectives save no tensor).
"""

from __future__ import annotations

from ..fp8_scales import lin_saved
from .base import Count, Ctx, Part

__all__ = ["ATTENTION", "MLP", "LinearReplacement"]


class LinearReplacement:
    """The linear layer replacing a block's attention (``component`` "attention") or MLP ("mlp")."""

    def __init__(self, component: str):
        self.component = component

    @staticmethod
    def params(r) -> Count:
        bias = r.cfg.model.add_bias_linear
        return Count(r.h * r.h + (r.h if bias else 0), r.norm_w * r.h)

    def components(self, r) -> dict:
        n = r.norm_w * r.h
        return {self.component: self.params(r).total - n, "norms": n}

    @staticmethod
    def linear_weights(r) -> int:
        return r.h * r.h // r.t

    @staticmethod
    def linear_shapes(r) -> tuple:
        return ((r.h // r.t, r.h, 1),)

    def weight_shapes(self, r) -> set:
        return {(o, i) for o, i, _ in self.linear_shapes(r)}

    @staticmethod
    def activations(r, c: Ctx) -> Part:
        B, Tn, h = c.B, c.Tn, r.h
        norm_in = B * Tn * h
        norm_out = 0 if "layernorm" in c.modules else lin_saved(c, Tn, h)
        stats = (8 if r.norm_w == 2 else 4) * Tn
        named = {"norm_in": norm_in, "norm_out": norm_out} if c.parts else None
        return Part(norm_in + norm_out + stats, 0, 2 * B * Tn * h, 0, named)


ATTENTION = LinearReplacement("attention")
MLP = LinearReplacement("mlp")
