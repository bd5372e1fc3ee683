"""The model catalog as the estimator sees it: which models it counts, their exact parameters, and why
the others are refused.

The catalog's data (:mod:`estimator.formats.hf_catalog`) holds each model's ``config.json`` exactly as published.
:func:`status` imports one with :func:`estimator.formats.hf.from_hf_config`, the same import the CLI's ``--hf`` and
the calculator use: either a ``model:`` section comes back, or the import refuses the configuration and
says why (an architecture, ``model_type``, or ``config.json`` key that the schema cannot state exactly).
A refused model stays in the catalog, listed as not yet supported with that reason.

:func:`describe` adds the exact parameter count of a supported model (every parameter once, the
vocabulary as published, i.e. without Megatron's padding) beside the published figure, and whether the two
agree: an exact figure must equal the count; a rounded one (``671B``) must be what the count rounds or
truncates to (:func:`estimator.formats.presets.published_bounds`), after leaving out what the figure excludes
(``mtp``: the multi-token-prediction layers; ``embeddings``: the word embedding and the output layer, as model
cards that count "parameters without embeddings" do) and adding the MTP layers a checkpoint holds beyond its
``config.json`` (``mtp_layers``, Qwen3-Next) and, for a multimodal checkpoint whose figure counts its vision encoder and
projector, their parameters counted by hand (``vision_parameters``; the estimate covers the language model).
:func:`default_layout` gives a parallel layout every catalog
model can be estimated on.
"""

from __future__ import annotations

import copy
from functools import lru_cache

from ..config.errors import EstimatorError
from . import hf_catalog
from .hf import REFUSED, SUPPORTED, from_hf_config
from .presets import published_bounds

__all__ = ["DEFAULT_GPUS", "DEFAULT_SEQ_LENGTH", "default_layout", "describe", "listing", "status"]

#: The default layout: this many GPUs, tensor and expert parallel sizes up to it, sequences of this length.
DEFAULT_GPUS = 8
DEFAULT_SEQ_LENGTH = 4096


def _model_type(config: dict) -> tuple[str | None, str | None]:
    archs = config.get("architectures") or [None]
    return config.get("model_type"), archs[0]


def status(hf_id: str) -> tuple[dict | None, str | None]:
    """(model section, None) for a model the estimator counts; (None, the reason) for a refused one."""
    entry = hf_catalog.get(hf_id)
    config = entry.config()
    try:
        return from_hf_config(config), None
    except EstimatorError as exc:
        mt, arch = _model_type(config)
        if mt not in SUPPORTED:
            why = REFUSED.get(mt, "no mapping of this architecture to Megatron-Core's fields yet")
            return None, f"model_type '{mt}' ({arch}): {why}"
        return None, str(exc).split(" Supported architectures:")[0]   # the list is beside the point here


def _largest_divisor(limit: int, *values: int) -> int:
    """The largest power of two up to ``limit`` that divides every value."""
    size = 1
    while size * 2 <= limit and all(v % (size * 2) == 0 for v in values):
        size *= 2
    return size


def default_layout(model: dict, gpus: int = DEFAULT_GPUS, seq_length: int = DEFAULT_SEQ_LENGTH) -> dict:
    """A complete configuration for a ``model:`` section on ``gpus`` GPUs (a power of two).

    Tensor parallel: the largest power of two up to ``gpus`` that divides the attention heads and the
    query groups (Megatron shards whole heads and groups), and the Mamba heads and groups or gated-delta-net
    heads of a model that has them. Expert parallel: the largest that divides the
    routed experts, with expert tensor parallel 1. Pipeline 1, data parallel the rest; micro-batch 1, one
    micro-batch per step; sequence parallel on when TP > 1; sequences of ``seq_length`` tokens, or
    ``max_position_embeddings`` where that is shorter.
    """
    heads = model["num_attention_heads"]
    groups = model.get("num_query_groups") or heads
    split = [heads, groups]               # and what Megatron-Core splits the same way in other layer kinds
    if model.get("num_global_query_groups"):
        split.append(model["num_global_query_groups"])      # Gemma 4's global-attention layers
    if model.get("num_global_attention_heads"):
        split.append(model["num_global_attention_heads"])   # Step 3.5 Flash's global-attention layers
    if "M" in (model.get("hybrid_layer_pattern") or ""):
        split += [model.get("mamba_num_groups") or 8, model.get("mamba_num_heads") or 1]
    if model.get("experimental_attention_variant") in ("gdn", "gated_delta_net") or "G" in (model.get("hybrid_layer_pattern") or ""):
        split += [model.get("linear_num_key_heads") or 16, model.get("linear_num_value_heads") or 32]
    # DeepSeek-V4's hybrid attention runs on tensor-parallel size 1 only (DSv4HybridAttention)
    tp = 1 if model.get("experimental_attention_variant") == "dsv4_hybrid" else _largest_divisor(gpus, *split)
    par = {"tensor_model_parallel_size": tp}
    if model.get("num_experts"):
        par["expert_model_parallel_size"] = _largest_divisor(gpus, model["num_experts"])
        par["expert_tensor_parallel_size"] = 1
    dp = gpus // tp
    seq = min(seq_length, model.get("max_position_embeddings") or seq_length)
    return {"model": model, "parallelism": par,
            "training": {"world_size": gpus, "micro_batch_size": 1, "global_batch_size": dp,
                         "seq_length": seq, "sequence_parallel": tp > 1}}


def _published(entry, counts, embeddings: int = 0) -> dict | None:
    pub = entry.published
    if not pub:
        return None
    total = pub["total"]
    text = f"{total:,}" if isinstance(total, int) else str(total)
    lo, hi = published_bounds(text)
    out = {"text": text, "exact": isinstance(total, int), "low": lo, "high": hi, "of": pub.get("of"),
           "kind": pub.get("kind"), "source": pub.get("source"), "excludes": pub.get("excludes") or [],
           "note": pub.get("note"), "compared": None, "matches": None}
    out["mtp_layers"] = pub.get("mtp_layers") or 0
    out["vision_parameters"] = pub.get("vision_parameters") or 0
    if counts is not None:
        compared = counts["total"] - (counts["mtp"] if "mtp" in out["excludes"] else 0) \
            - (embeddings if "embeddings" in out["excludes"] else 0)
        if out["mtp_layers"]:
            compared = counts["with_published_mtp"]
        compared += out["vision_parameters"]       # a multimodal checkpoint's vision tower and projector
        out["compared"], out["matches"] = compared, lo <= compared <= hi
    return out


@lru_cache(maxsize=None)
def _describe(key: str) -> dict:
    from ..model.params import count_parameters_of
    entry = hf_catalog.get(key)
    model, reason = status(entry.hf_id)
    mt, arch = _model_type(entry.config())
    counts, embeddings = None, 0
    if model is not None:
        c = count_parameters_of(default_layout(model, gpus=1))
        counts = {"total": c.total - c.vocab_padding, "active": c.active - c.vocab_padding,
                  "mtp": c.mtp, "moe_layers": c.moe_layers}
        embeddings = c.embedding + c.output_layer - c.vocab_padding
        extra = (entry.published or {}).get("mtp_layers")
        if extra and not c.mtp:
            # The published figure counts MTP layers the config.json leaves out: compare it with the model plus
            # that many MTP layers (Megatron-Core builds them like the last decoder layer).
            w = count_parameters_of(default_layout({**model, "mtp_num_layers": extra}, gpus=1))
            counts["with_published_mtp"] = w.total - w.vocab_padding
    return {"hf_id": entry.hf_id, "family": entry.family, "model_type": mt, "architecture": arch,
            "supported": model is not None, "reason": reason, "parameters": counts,
            "published": _published(entry, counts, embeddings), "source": entry.source_text(),
            "source_note": entry.source.get("note"), "dropped_keys": entry.source.get("dropped_keys") or []}


def describe(hf_id: str) -> dict:
    """One catalog model in plain JSON types: id, family, model_type, architecture, ``supported`` and the
    refusal ``reason``; ``parameters`` (total, active per token, MTP, MoE layers; vocabulary unpadded) of a
    supported model; ``published`` (the figure, its bounds, source, and ``matches``); the config's source."""
    return copy.deepcopy(_describe(hf_catalog.get(hf_id).hf_id.lower()))


def listing() -> list[dict]:
    """:func:`describe` of every catalog model, sorted by family, then Hub id."""
    rows = [describe(hf_id) for hf_id in hf_catalog.ids()]
    return sorted(rows, key=lambda r: (r["family"].lower(), r["hf_id"].lower()))
