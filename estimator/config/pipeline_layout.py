"""Where every layer sits on the pipeline: stages, virtual chunks, embedding, output layer and MTP layers.

Megatron-Core places the decoder layers of a GPT model on ``p`` pipeline stages of ``v`` virtual chunks
each in one of four ways (``megatron/core/transformer/transformer_block.py`` ``get_num_layers_to_build``
and ``transformer_layer.py`` ``get_transformer_layer_offset``):

1. even: every chunk holds ``L / (p v)`` layers;
2. uneven first/last stage (``num_layers_in_first/last_pipeline_stage``): the first (last) stage holds the
   given number, the middle stages share the rest evenly; with virtual stages every chunk of a stage holds
   that stage's count divided by ``v``;
3. ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``: the embedding (the
   loss) counts as one layer slot, so ``L + e + l`` slots split evenly over the ``p v`` chunks and the first
   chunk of the first stage (the last chunk of the last stage) builds one decoder layer fewer;
4. ``pipeline_model_parallel_layout``: a string such as ``Et|(tt|)*30mL`` lists every chunk
   (``megatron/core/transformer/pipeline_parallel_layer_layout.py``): ``E`` the embedding, ``t`` a decoder
   layer, ``m`` a multi-token-prediction layer, ``L`` the loss (output layer), ``|`` ends a chunk; ``(...)*n``
   and ``x*n`` repeat, commas are cosmetic. Chunk ``k`` of the list is virtual stage ``k // p`` of pipeline
   stage ``k % p``, so the number of chunks fixes ``v``.

In every case layer indices run in Megatron's interleaved order: virtual stage 0 of stages 0..p-1, then
virtual stage 1 of stages 0..p-1, and so on. The embedding is built on the first chunk of stage 0 and the
output layer on the last chunk of stage p-1 (GPTModel's pre_process / post_process). MTP layers sit on
the last chunk of stage p-1 unless a layout puts them elsewhere: in the last chunk of an earlier stage
(Megatron's ``mtp_standalone``), which then keeps its own copy of the embedding; their logits are still
computed by the output layer (``process_mtp_loss``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

__all__ = ["Chunk", "LayoutError", "StagePlan", "expand_layout", "layout_problems", "placement", "stage_counts"]

#: Longest layout (characters after expanding repetitions) accepted; DeepSeek-V3's is 95.
MAX_LAYOUT = 100_000
#: Most chunks a layout may have (pipeline stages x virtual stages: PP 1,024 x VPP 16); empty chunks count. Each chunk
#: is estimated and reported, so a 100,000-chunk layout took 2.7 s and a 10 MB calculator answer.
MAX_CHUNKS = 16_384

_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")   # (...)*n, no nesting
_REPEAT = re.compile(r"(.)\*(\d+)")           # x*n, one character
_SYMBOLS = {"E": "embedding", "t": "decoder layer", "m": "MTP layer", "L": "loss"}


class LayoutError(ValueError):
    """A pipeline layout string that Megatron-Core would not parse."""


class Chunk(NamedTuple):
    """One virtual chunk of one pipeline stage: what it builds."""

    layers: range      # decoder layers (global indices)
    embedding: bool    # the input embedding (pre_process)
    loss: bool         # final norm, output layer and loss (post_process)
    mtp: range         # multi-token-prediction layers (depth indices)


class StagePlan(NamedTuple):
    """One pipeline stage: its chunks and what the memory assembly asks of them, worked out once."""

    chunks: tuple      # Chunk per virtual stage
    layers: tuple      # decoder-layer range per virtual stage
    sig: tuple         # (layers, embedding, loss, MTP layers) per chunk: stages alike in it cost the same
    embedding: bool    # a chunk builds the input embedding
    loss: bool         # a chunk builds the output layer and loss
    mtp: int           # MTP layers on the stage
    vocab_chunks: tuple  # chunks holding an input embedding or an MTP stage's copy of it
    reports: dict      # memo for the per-chunk reports (keyed by the micro-batches in flight per chunk)


def _plan(chunks: tuple) -> StagePlan:
    return StagePlan(chunks, tuple(c.layers for c in chunks),
                     tuple((len(c.layers), c.embedding, c.loss, len(c.mtp)) for c in chunks),
                     any(c.embedding for c in chunks), any(c.loss for c in chunks), sum(len(c.mtp) for c in chunks),
                     tuple(i for i, c in enumerate(chunks) if c.embedding or len(c.mtp)), {})


def _unroll(pattern: re.Pattern, text: str) -> str:
    out, pos, size = [], 0, 0
    for mt in pattern.finditer(text):
        n = int(mt.group(2))
        size += mt.start() - pos + len(mt.group(1)) * n
        if size > MAX_LAYOUT:
            raise LayoutError(f"expands to more than {MAX_LAYOUT:,} characters")
        out += [text[pos:mt.start()], mt.group(1) * n]
        pos = mt.end()
    out.append(text[pos:])
    return "".join(out)


@lru_cache(maxsize=256)
def expand_layout(text: str) -> tuple:
    """The chunks of a layout string, in order, each as a string over ``E t m L``.

    Megatron-Core's grammar: commas are dropped; every ``(group)*n`` is unrolled (one pass, groups do not
    nest), then every ``x*n`` (one character); ``|`` separates chunks, and an empty chunk is allowed.
    ``"Et*3|(tt|)*2,L"`` -> ``("Ettt", "tt", "tt", "L")``.
    """
    s = _unroll(_REPEAT, _unroll(_GROUP, text.replace(",", "")))
    bad = sorted({ch for ch in s if ch not in _SYMBOLS and ch != "|"})
    if bad:
        hint = " (groups do not nest)" if any(ch in "()" for ch in bad) else ""
        raise LayoutError(f"unknown character{'s' if len(bad) > 1 else ''} {', '.join(map(repr, bad))}{hint}; "
                          "allowed: E (embedding), t (decoder layer), m (MTP layer), L (loss), | (chunk end), "
                          "(...)*n and x*n (repeat), commas")
    return tuple(s.split("|"))


def stage_counts(L: int, p: int, first: int | None, last: int | None) -> list[int] | None:
    """Decoder layers per pipeline stage for the even or uneven first/last split, or None when they cannot
    be split (Megatron-Core's TransformerConfig rules: the middle stages share the rest evenly, and there are
    middle layers exactly when there are middle stages)."""
    if p == 1:
        return [L]
    if first is None and last is None:
        return [L // p] * p if L % p == 0 else None
    middle = p - (first is not None) - (last is not None)
    rest = L - (first or 0) - (last or 0)
    if rest < 0 or bool(middle) != bool(rest) or (middle and rest % middle):
        return None
    each = rest // middle if middle else 0
    counts = [each] * p
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return counts


def layout_problems(par, L: int, mtp: int) -> list[tuple[str, object, str]]:
    """(field, value, rule) for every way the pipeline split breaks Megatron-Core's rules (the schema's
    ``parallelism`` section ``par``, ``L`` decoder layers, ``mtp`` MTP layers)."""
    p, vv = par.pipeline_model_parallel_size, par.virtual_pipeline_model_parallel_size
    v = vv or 1
    first, last = par.num_layers_in_first_pipeline_stage, par.num_layers_in_last_pipeline_stage
    acc_e, acc_l = par.account_for_embedding_in_pipeline_split, par.account_for_loss_in_pipeline_split
    layout = par.pipeline_model_parallel_layout
    uneven = first is not None or last is not None
    out = []
    F = "parallelism."
    if layout is not None:
        others = [n for n, on in (("num_layers_in_first_pipeline_stage", first is not None),
                                  ("num_layers_in_last_pipeline_stage", last is not None),
                                  ("account_for_embedding_in_pipeline_split", acc_e),
                                  ("account_for_loss_in_pipeline_split", acc_l)) if on]
        if others:
            return [(F + "pipeline_model_parallel_layout", layout, "cannot be combined with " + ", ".join(others)
                     + " (Megatron-Core: the layout places every layer itself)")]
        return _layout_string_problems(layout, p, vv, L, mtp)
    if uneven and (acc_e or acc_l):
        name = "account_for_embedding_in_pipeline_split" if acc_e else "account_for_loss_in_pipeline_split"
        return [(F + name, True, "cannot be combined with num_layers_in_first/last_pipeline_stage (Megatron-Core)")]
    if uneven and p == 1:
        name = "num_layers_in_first_pipeline_stage" if first is not None else "num_layers_in_last_pipeline_stage"
        return [(F + name, first if first is not None else last,
                 "an uneven pipeline split needs pipeline_model_parallel_size > 1")]
    if vv is not None and p == 1 and v > 1:
        return [(F + "virtual_pipeline_model_parallel_size", v,
                 "the interleaved schedule needs pipeline_model_parallel_size > 1")]
    for name, n in (("num_layers_in_first_pipeline_stage", first), ("num_layers_in_last_pipeline_stage", last)):
        if n is not None and n < 1:
            out.append((F + name, n, "must be > 0 (Megatron-Core); leave it null for an even split"))
    if out:
        return out
    if acc_e or acc_l:
        slots = L + acc_e + acc_l
        if slots % p:
            return [("model.num_layers", L, f"num_layers ({L}) plus the embedding/loss slots ({acc_e + acc_l}) must "
                     f"be divisible by pipeline_model_parallel_size ({p})")]
        if (slots // p) % v:
            return [(F + "virtual_pipeline_model_parallel_size", v, f"the {slots // p} layer slots of each pipeline "
                     f"stage (num_layers + embedding/loss slots) / pipeline size) must be divisible by "
                     f"virtual_pipeline_model_parallel_size ({v})")]
        return []
    counts = stage_counts(L, p, first, last)
    if counts is None:
        if not uneven:
            return [("model.num_layers", L, f"num_layers ({L}) must be divisible by pipeline_model_parallel_size "
                     f"({p}), or set num_layers_in_first/last_pipeline_stage, account_for_embedding/loss_in_"
                     "pipeline_split or pipeline_model_parallel_layout")]
        return [(F + "num_layers_in_first_pipeline_stage" if first is not None
                 else F + "num_layers_in_last_pipeline_stage", first if first is not None else last,
                 f"num_layers ({L}) minus the first ({first}) and last ({last}) stage layers must split evenly over "
                 f"the {p - (first is not None) - (last is not None)} middle stages, at least one layer each")]
    if v > 1 and p == 2 and first is not None and last is not None:
        # get_transformer_layer_offset divides by the number of middle stages (0 here) with VPP.
        return [(F + "num_layers_in_last_pipeline_stage", last, "with PP 2 and virtual stages set only one of "
                 "num_layers_in_first/last_pipeline_stage (Megatron-Core's layer offset divides by the number of "
                 "middle stages, 0 here)")]
    if v > 1 and any(c % v for c in counts):
        return [(F + "virtual_pipeline_model_parallel_size", v, f"the layers of each pipeline stage "
                 f"({', '.join(map(str, counts))}) must be divisible by virtual_pipeline_model_parallel_size ({v})")]
    return []


def _layout_string_problems(layout: str, p: int, vv, L: int, mtp: int) -> list:
    name = "parallelism.pipeline_model_parallel_layout"
    try:
        chunks = expand_layout(layout)
    except LayoutError as exc:
        return [(name, layout, str(exc))]
    n = len(chunks)
    if n > MAX_CHUNKS:
        return [(name, layout, f"has {n:,} chunks ('|'-separated); at most {MAX_CHUNKS:,} (pipeline stages x virtual "
                 "stages, e.g. 1,024 x 16) are estimated")]
    if n % p:
        return [(name, layout, f"has {n} chunks ('|'-separated), not a multiple of pipeline_model_parallel_size "
                 f"({p})")]
    v = n // p
    if vv is not None and vv != v:
        return [("parallelism.virtual_pipeline_model_parallel_size", vv, f"conflicts with the layout's {n} chunks "
                 f"over {p} pipeline stages = {v} virtual stages (leave it null to take it from the layout)")]
    if v > 1 and p == 1:
        return [(name, layout, f"{n} chunks on one pipeline stage would be {n} virtual stages; the interleaved "
                 "schedule needs pipeline_model_parallel_size > 1")]
    flat = "".join(chunks)
    out = []
    count = {ch: flat.count(ch) for ch in _SYMBOLS}
    if count["E"] != 1 or not chunks[0].startswith("E"):
        out.append((name, layout, "needs exactly one E, first in the first chunk (Megatron-Core builds the "
                    "embedding on virtual stage 0 of pipeline stage 0)"))
    if count["L"] != 1 or not chunks[-1].endswith("L"):
        out.append((name, layout, "needs exactly one L, last in the last chunk (Megatron-Core builds the output "
                    f"layer and loss on virtual stage {v - 1} of pipeline stage {p - 1})"))
    if count["t"] != L:
        out.append((name, layout, f"holds {count['t']} decoder layers (t), but num_layers is {L}"))
    if count["m"] != mtp:
        out.append((name, layout, f"holds {count['m']} MTP layers (m), but mtp_num_layers is {mtp}"))
    if count["m"]:
        where = [k for k, c in enumerate(chunks) if "m" in c]
        if "t" in flat[flat.index("m"):]:
            out.append((name, layout, "every decoder layer (t) must come before the MTP layers (m)"))
        if len(where) > 1:
            out.append((name, layout, "all MTP layers (m) must be in one chunk"))
        elif where[0] // p != v - 1:
            out.append((name, layout, f"the MTP layers (m) must be in the last virtual stage ({v - 1}) of their "
                        f"pipeline stage, not in virtual stage {where[0] // p} (Megatron-Core's rule)"))
    return out


@lru_cache(maxsize=1024)
def placement(L: int, p: int, v: int, first: int | None, last: int | None, acc_e: bool, acc_l: bool,
              layout: str | None, mtp: int) -> tuple:
    """Per pipeline stage, its :class:`StagePlan` (the :class:`Chunk` of every virtual stage), and its
    decoder-layer ranges, for a validated configuration's split."""
    if layout is not None:
        flat = expand_layout(layout)
        grid = [[flat[c * p + r] for c in range(v)] for r in range(p)]
        n_t = [[chunk.count("t") for chunk in row] for row in grid]
        n_m = [[chunk.count("m") for chunk in row] for row in grid]
    else:
        if acc_e or acc_l:
            each = (L + acc_e + acc_l) // (p * v)
            n_t = [[each] * v for _ in range(p)]
            n_t[0][0] -= acc_e
            n_t[p - 1][v - 1] -= acc_l
        else:
            n_t = [[c // v] * v for c in stage_counts(L, p, first, last)]
        n_m = [[0] * v for _ in range(p)]
        n_m[p - 1][v - 1] = mtp
    out = [[None] * v for _ in range(p)]
    start = start_m = 0
    for c in range(v):
        for r in range(p):
            k, km = n_t[r][c], n_m[r][c]
            out[r][c] = Chunk(range(start, start + k), r == 0 and c == 0, r == p - 1 and c == v - 1,
                              range(start_m, start_m + km))
            start += k
            start_m += km
    plans = tuple(_plan(tuple(row)) for row in out)
    return plans, tuple(pl.layers for pl in plans)

