"""Hybrid layer patterns (``hybrid_layer_pattern``): the layers of a Mamba-attention hybrid, its pipeline
chunks and its multi-token-prediction layers, as Megatron-Core reads them.

Megatron-Core ``megatron/core/models/hybrid/hybrid_layer_allocation.py`` (``Symbols``, ``parse_hybrid_pattern``,
``select_pipeline_segment``) and Megatron-LM ``megatron/training/arguments.py`` (its hybrid-pattern checks):

- one symbol per layer: ``M`` Mamba-2, ``*`` self-attention, ``-`` MLP, ``E`` MoE, ``G`` gated delta net
  (``+`` MLA and ``D`` DeepSeek sparse attention exist too and are refused here); the layer count is the
  number of symbols, which overrides ``--num-layers``;
- ``|`` splits the main pattern into pipeline segments: segment ``k`` is virtual stage ``k // p`` of pipeline
  stage ``k % p``, their number a multiple of ``p`` (more segments than stages make virtual stages). No
  ``--decoder-first/last-pipeline-num-layers``, ``--pipeline-model-parallel-layout``, virtual-stage flag or
  account-for-embedding/loss flag may come with a pattern (the segments say it all), except that a pattern
  without ``|`` split over ``p > 1`` stages takes an even split or the uneven first/last-stage split, and no
  virtual stages;
- ``/`` starts a multi-token-prediction pattern; each ``/PATTERN`` is one MTP depth, all identical
  (``M*M*/MM/MM``: two MTP layers, each a Mamba and an attention layer). They sit with the output layer.

Megatron-Core's deprecated ``hybrid_attention_ratio`` / ``hybrid_mlp_ratio`` become a pattern by
``pattern_from_ratios`` (same file), deterministic and written again here as :func:`pattern_from_ratios`; only a
caller handing the ratios to ``HybridModel`` itself gets it (neither Megatron-LM's ``HybridModelBuilder`` nor
Megatron-Bridge's ``HybridModelProvider`` does), so the importers use it to say which pattern was meant.

The embedding is built on the first segment and the output layer on the last one (HybridModel's
pre_process / post_process), so a pattern with ``|`` is the pipeline layout ``E<segment 0>|...|<last>mL``
(:func:`layout_of`), which :mod:`estimator.config.pipeline_layout` places like any other layout.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

__all__ = ["KINDS", "ParsedPattern", "SYMBOLS", "layout_of", "parse", "pattern_from_ratios", "pattern_problems"]

#: Layer symbol -> (token mixer, MLP), the parts of that layer (estimator.model.layers.LayerKind).
KINDS = {"M": ("mamba", ""), "*": ("attention", ""), "G": ("gdn", ""), "-": ("", "dense"), "E": ("", "moe")}
#: What each symbol is, for messages and docs.
SYMBOLS = {"M": "Mamba-2", "*": "self-attention", "-": "MLP", "E": "MoE", "G": "gated delta net"}
_REFUSED = {"+": "multi-latent attention", "D": "DeepSeek sparse attention"}


class ParsedPattern(NamedTuple):
    """A hybrid layer pattern split into its parts."""

    segments: tuple        # the main pattern's pipeline segments ('|'-separated)
    layers: str            # the main pattern without '|'
    mtp: str               # the pattern of one MTP depth ("" for none)
    mtp_depths: int        # MTP layers (number of '/PATTERN' parts)


@lru_cache(maxsize=256)
def parse(pattern: str) -> ParsedPattern:
    """Split a pattern (assumed valid, see :func:`pattern_problems`)."""
    main, *mtp = pattern.split("/")
    mtp = [p for p in mtp if p]
    segments = tuple(main.split("|"))
    return ParsedPattern(segments, "".join(segments), mtp[0] if mtp else "", len(mtp))


def pattern_problems(pattern: str) -> list[str]:
    """What is wrong with the pattern's symbols and MTP parts (empty when Megatron-Core would parse it)."""
    main, *mtp = pattern.split("/")
    out = []
    for part, allowed in ((main, set(KINDS) | {"|"}), *((p, set(KINDS)) for p in mtp)):
        bad = sorted({ch for ch in part if ch not in allowed})
        for ch in bad:
            if ch in _REFUSED:
                out.append(f"'{ch}' ({_REFUSED[ch]}) layers are not modelled")
            elif ch == "|":
                out.append("'|' may split only the main pattern, not an MTP pattern")
            else:
                out.append(f"'{ch}' is not a layer symbol; use M (Mamba-2), * (self-attention), - (MLP), E (MoE), "
                           "G (gated delta net), | (pipeline segments) and / (MTP layers)")
    if not main.replace("|", ""):
        out.append("the main pattern has no layers")
    elif any(not seg for seg in main.split("|")):
        out.append("every '|'-separated pipeline segment needs at least one layer")
    depths = [p for p in mtp if p]
    if len(depths) != len(mtp) and depths:
        out.append("every '/'-separated MTP pattern needs at least one layer")
    if len(set(depths)) > 1:
        out.append(f"all MTP patterns must be identical (Megatron-Core), got {', '.join(depths)}")
    return out


def pattern_from_ratios(num_layers: int, attention_ratio: float = 0.0, mlp_ratio: float = 0.0) -> str:
    """The layer pattern Megatron-Core makes of the deprecated ratios (Megatron-LM @ 2a75ac12 :
    megatron/core/models/hybrid/hybrid_layer_allocation.py ``pattern_from_ratios``, the same at d98e8a64).

    With L layers, a = round(L x attention_ratio) attention layers split the L - a Mamba layers into a + 1 runs
    of about s = (L - a) / (a + 1): walking the layers with a counter x that starts at s and loses 1 per Mamba
    layer, a layer becomes attention when x < 0.5 (and x gains s). Then d = round(L x mlp_ratio) MLP layers
    replace Mamba layers the same way, with r = (L - a - d) / d, skipping the attention layers. ``round`` is
    Python's (halves to even), as there. Raises ValueError where Megatron-Core asserts: L < 1, a ratio outside
    [0, 1], or the two above 1 together.
    """
    if num_layers < 1 or not (0.0 <= attention_ratio <= 1.0 and 0.0 <= mlp_ratio <= 1.0) \
            or attention_ratio + mlp_ratio > 1.0:
        raise ValueError("needs num_layers >= 1, both ratios in [0, 1] and their sum at most 1")
    attention = round(num_layers * attention_ratio)
    mamba = num_layers - attention
    run = mamba / (attention + 1)
    kinds = ["M"] * num_layers
    x = run
    for i in range(num_layers):
        if x < 0.5:
            kinds[i], x = "*", x + run
        else:
            x -= 1
    mlp = round(num_layers * mlp_ratio)
    if mlp > 0:
        step = (mamba - mlp) / mlp
        x = step
        for i in range(num_layers):
            if kinds[i] == "M":
                if x < 0.5:
                    kinds[i], x = "-", x + step
                else:
                    x -= 1
    return "".join(kinds)


def layout_of(pattern: str) -> str | None:
    """The pipeline layout a pattern with ``|`` stands for (None without ``|``): one chunk per segment, the
    embedding in the first, the MTP layers and the loss in the last."""
    p = parse(pattern)
    if len(p.segments) == 1:
        return None
    chunks = ["t" * len(s) for s in p.segments]
    chunks[0] = "E" + chunks[0]
    chunks[-1] += "m" * p.mtp_depths + "L"
    return "|".join(chunks)


def split_problems(m, par) -> list[tuple[str, object, str]]:
    """Megatron-LM's checks of a hybrid pattern against the model and the pipeline fields, as
    (field, value, message); empty when the pattern, the layer count and the split agree."""
    F, P = "model.", "parallelism."
    pattern = m.hybrid_layer_pattern
    bad = pattern_problems(pattern)
    if bad:
        return [(F + "hybrid_layer_pattern", pattern, msg) for msg in bad]
    p = parse(pattern)
    out = []
    if m.num_layers != len(p.layers):
        out.append((F + "num_layers", m.num_layers, f"must equal the number of layers in hybrid_layer_pattern "
                    f"({len(p.layers)}; Megatron-LM takes the layer count from the pattern)"))
    if m.mtp_num_layers is not None and m.mtp_num_layers != p.mtp_depths:
        out.append((F + "mtp_num_layers", m.mtp_num_layers, f"a hybrid model's MTP layers are its pattern's "
                    f"'/PATTERN' parts ({p.mtp_depths} here); leave mtp_num_layers null or equal to that"))
    why = "the pattern's '|' segments define the pipeline split (Megatron-LM's rule)"
    for name in ("pipeline_model_parallel_layout", "virtual_pipeline_model_parallel_size"):
        if getattr(par, name) is not None:
            out.append((P + name, getattr(par, name), f"not allowed with hybrid_layer_pattern: {why}"))
    for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(par, name):
            out.append((P + name, True, f"not allowed with hybrid_layer_pattern: {why}"))
    pp = par.pipeline_model_parallel_size
    if len(p.segments) > 1:
        for name in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"):
            if getattr(par, name) is not None:
                out.append((P + name, getattr(par, name), f"not allowed with a pattern that has '|' segments: {why}"))
        if len(p.segments) % pp:
            out.append((F + "hybrid_layer_pattern", pattern, f"has {len(p.segments)} '|'-separated pipeline "
                        f"segments, not a multiple of pipeline_model_parallel_size ({pp})"))
        elif len(p.segments) > pp == 1:
            out.append((F + "hybrid_layer_pattern", pattern, f"{len(p.segments)} segments on one pipeline stage "
                        "would be virtual stages; the interleaved schedule needs pipeline_model_parallel_size > 1"))
    return out
