"""Layer kinds: what one decoder layer holds, and the module that counts each part of it.

A decoder layer of a Megatron-Core model is a token mixer followed by an MLP, either of which may be absent:

- GPTModel's ``TransformerLayer`` holds both: self-attention (:mod:`.attention`), multi-latent attention
  (:mod:`.mla`), Kimi K3's Kimi delta attention and gated no-RoPE MLA with its AttnRes banks (:mod:`.kimi`),
  DeepSeek sparse attention (:mod:`.dsa`, multi-latent attention with a lightning indexer),
  DeepSeek-V4's hybrid attention (:mod:`.dsv4`: a sliding window plus compressed keys, one layer's compression
  ratio in its ``var``), a gated delta net (:mod:`.gated_delta_net`, Qwen3-Next's linear-attention layers) or
  Falcon-H1's Mamba-2 mixer beside self-attention (``mamba_attention``, :data:`.mamba.PARALLEL`), then a
  dense MLP (:mod:`.mlp`) or a mixture of experts (:mod:`.moe`); with ``enable_hyper_connections`` every layer also
  holds two hyper-connection modules (:mod:`.hyper_connection`, counted here for any kind);
- HybridModel's layers hold one part each, one layer per symbol of ``hybrid_layer_pattern``: ``M`` a Mamba-2
  mixer (:mod:`.mamba`), ``*`` self-attention, ``G`` a gated delta net, ``-`` a dense MLP, ``E`` a mixture of
  experts;
- Megatron-Bridge's WanModel (``model_kind: wan``) holds Wan's layers (:mod:`.wan`): adaLN-modulated
  self-attention and cross-attention to the text (``wan``), then its modulated GELU MLP (``wan_mlp``).

:class:`LayerKind` names the two parts; :mod:`estimator.model.resolve` gives every decoder layer (and every layer of
a multi-token-prediction depth) the index of its kind in ``r.kinds``. Each part module answers the same
questions (:mod:`.base`): parameters, their breakdown, linear-layer weights, weight shapes, activations.
"""

from __future__ import annotations

from typing import NamedTuple

from . import (attention, dsa, dsv4, gated_delta_net, hyper_connection, kimi, linear_replacement, mamba, mla, mlp, moe,
               wan)
from .base import Count, Ctx, Part

__all__ = ["Count", "Ctx", "LayerKind", "MIXERS", "MLPS", "Part", "kind_components", "kind_params",
           "kind_linear_shapes", "kind_linear_weights", "kind_weight_shapes", "view"]

#: Token-mixer modules by the name a :class:`LayerKind` uses.
MIXERS = {"attention": attention, "mla": mla, "dsa": dsa, "dsv4": dsv4, "gdn": gated_delta_net, "mamba": mamba,
          "linear": linear_replacement.ATTENTION, "mamba_attention": mamba.PARALLEL,
          "kda": kimi.KDA, "kimi_mla": kimi.MLA, "wan": wan.ATTENTION}
#: MLP modules by name ("linear": a heterogeneous block's MLP replaced by one linear layer).
MLPS = {"dense": mlp, "moe": moe, "linear": linear_replacement.MLP, "wan_mlp": wan.MLP}


class LayerKind(NamedTuple):
    """The two parts of a decoder layer: ``mixer`` (attention, mla, dsa, dsv4, gdn, mamba, mamba_attention, linear, or ""
    for none) and
    ``mlp`` (dense, moe, linear, or ""), and ``var``: the resolved values this kind of layer holds differently from
    the model's (name, value) pairs of :class:`~estimator.model.resolve.Resolved` fields, e.g. ``(("dh", 512),
    ("g", 2))`` for Gemma 4's global-attention layers or ``(("f", 7168),)`` for a heterogeneous block's MLP;
    empty for a uniform model. Every part module sees the configuration through :func:`view`."""

    mixer: str
    mlp: str
    var: tuple = ()

    @property
    def moe(self) -> bool:
        return self.mlp == "moe"

    @property
    def label(self) -> str:
        """A short name: "attention + MoE", "Mamba", "MLP"."""
        names = {"attention": "attention", "mla": "MLA", "dsa": "sparse MLA (DSA)", "dsv4": "DeepSeek-V4 attention",
                 "gdn": "gated delta net", "mamba": "Mamba", "mamba_attention": "Mamba beside attention",
                 "kda": "Kimi delta attention", "kimi_mla": "gated MLA",
                 "wan": "Wan self- and cross-attention", "wan_mlp": "Wan MLP",
                 "dense": "MLP", "moe": "MoE", "linear": "linear"}
        label = " + ".join(names[p] for p in (self.mixer, self.mlp) if p) or "no-op"
        if self.var:
            label += " (" + ", ".join(("no " if v is False else "") + _VAR_NAMES.get(k, k)
                                      + ("" if isinstance(v, bool) else f" {v}") for k, v in self.var) + ")"
        return label


#: How a label names the resolved fields a kind overrides.
_VAR_NAMES = {"a": "query heads", "dh": "kv_channels", "g": "query groups", "f": "ffn", "window": "window",
              "cr": "compression", "hash_route": "hash routing", "dsa_skip": "shared top-k",
              "sinks": "attention sinks", "ar": "AttnRes rows"}


def view(r, kind: LayerKind):
    """The resolved configuration as one layer of ``kind`` sees it: ``r`` itself, or a copy with the kind's
    overrides (its ``var``) applied."""
    if not kind.var:
        return r
    from dataclasses import replace
    return replace(r, **dict(kind.var))


def _parts(kind: LayerKind):
    if kind.mixer:
        yield MIXERS[kind.mixer]
    if kind.mlp:
        yield MLPS[kind.mlp]


def kind_params(r, kind: LayerKind) -> tuple[Count, Count]:
    """(dense-parallel part, routed-expert part) of one layer of this kind."""
    r = view(r, kind)
    dense = hyper_connection.params(r) + kimi.attn_res_params(r)
    for part in _parts(kind):
        dense = dense + part.params(r)
    return dense, (moe.expert_params(r) if kind.moe else Count())


def kind_components(r, kind: LayerKind) -> dict:
    """Parameters of one layer of this kind by :class:`~estimator.model.params.ParameterCounts` component."""
    out: dict = {}
    r = view(r, kind)
    if r.hc:
        out["hyper_connections"] = hyper_connection.params(r).total
    if r.attn_res:
        out["attn_res"] = kimi.attn_res_params(r).total
    for part in _parts(kind):
        for k, n in part.components(r).items():
            out[k] = out.get(k, 0) + n
    return out


def kind_linear_weights(r, kind: LayerKind) -> int:
    """Linear-layer weight elements of one layer on one tensor-parallel rank, routed experts excluded."""
    r = view(r, kind)
    return sum(part.linear_weights(r) for part in _parts(kind))


def kind_linear_shapes(r, kind: LayerKind) -> tuple[tuple, tuple]:
    """(out, in, count) of each Transformer Engine linear-layer weight one GPU holds of one layer of this kind:
    (dense-parallel part on one tensor-parallel rank, routed experts on one GPU)."""
    dense: tuple = ()
    r = view(r, kind)
    for part in _parts(kind):
        dense += part.linear_shapes(r)
    return dense, (moe.expert_shapes(r) if kind.moe else ())


def kind_weight_shapes(r, kind: LayerKind) -> set:
    out: set = set()
    r = view(r, kind)
    for part in _parts(kind):
        out |= part.weight_shapes(r)
    return out
