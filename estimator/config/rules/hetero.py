"""Heterogeneous layers: the per-layer block configurations of Llama-Nemotron (DeciLM) models, read as
Megatron-Core reads them (:func:`parse_blocks`), and their rules (:func:`hetero_problems`).

Megatron-LM @ d98e8a64 : megatron/core/transformer/heterogeneous/heterogeneous_config.py
(``HeterogeneousTransformerConfig``, ``AttentionConfig.build_config_from_dict``,
``MLPConfig.build_config_from_dict``, ``MLPConfig.ffn_mult_to_intermediate_size``) takes the JSON text of a
Hugging Face DeciLM ``config.json`` (``--heterogeneous-layers-config-path`` / ``-encoded-json``) and reads its
``block_configs``, one block per decoder layer:

- ``attention``: ``no_op`` (the layer has no attention and, with Transformer Engine, no input norm),
  ``replace_with_linear`` (one h x h column-parallel linear with its fused norm, gathered back:
  linear_replacements.py ``TELayerNormColumnParallelLinearGathered``), else self-attention with
  ``num_query_groups`` key/value heads, or Hugging Face's ``n_heads_in_group`` (heads per group: groups =
  num_attention_heads / n_heads_in_group, which must divide), or the model's own when null;
- ``mlp`` (or Hugging Face's ``ffn``): ``no_op``, ``replace_with_linear``, else a gated MLP of width
  ``ffn_hidden_size``, or Hugging Face's ``ffn_mult``: int(2 ffn_mult h / 3) rounded up to a multiple of 256,
  or the model's own when null.

Megatron-Core keeps only these fields of a block and drops every other key (DeciLM's ``sparsify``,
``window_length``, ``num_sink_tokens``, ...); they are accepted here when they are null, true/false or a number,
and change nothing. :func:`parse_blocks` returns one :class:`Block` per layer or raises :class:`HeteroError` with
the reason (the caller names the field).
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple

from ..errors import Problem

__all__ = ["Block", "HeteroError", "MAX_CHARS", "ffn_mult_to_size", "hetero_problems", "parse_blocks"]


#: Keys of a DeciLM block that Megatron-Core drops (no tensor of the Megatron model depends on them).
_DROPPED = frozenset({"sparsify", "window_length", "num_sink_tokens", "unshifted_sink",
                      "use_prefill_window_in_sink_attention", "llama4", "mamba", "moe"})
#: The longest JSON text accepted (an 80-layer DeciLM config.json is about 30 KB).
MAX_CHARS = 2_000_000


class HeteroError(ValueError):
    """A block configuration Megatron-Core would refuse or that this module cannot read."""


class Block(NamedTuple):
    """One decoder layer: ``mixer`` "attention", "linear" or "" (no-op); ``groups`` its key/value heads (None:
    the model's); ``mlp`` "dense", "linear" or ""; ``ffn`` its MLP width (None: the model's)."""

    mixer: str
    groups: int | None
    mlp: str
    ffn: int | None


def ffn_mult_to_size(mult: float, hidden: int) -> int:
    """MLPConfig.ffn_mult_to_intermediate_size: int(2 mult h / 3), rounded up to a multiple of 256."""
    n = int(2 * mult * hidden / 3)
    return n if n % 256 == 0 else n + 256 - n % 256


def _flag(d: dict, key: str, where: str) -> bool:
    v = d.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise HeteroError(f"{where}.{key} must be true or false, got {v!r}")
    return v


def _count(v, where: str, top: int) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
        raise HeteroError(f"{where} must be an integer between 1 and {top:,} or null, got {v!r}")
    return v


def _others(d: dict, known: set, where: str) -> None:
    for k, v in d.items():
        if k in known:
            continue
        if k not in _DROPPED:
            raise HeteroError(f"{where} has the key {k!r}, which Megatron-Core's heterogeneous config does not read "
                              f"and this estimator does not know; known: {', '.join(sorted(known))}")
        if v is not None and not isinstance(v, (bool, int, float, str)):
            raise HeteroError(f"{where}.{k} must be null, true/false, a number or a name, got {v!r}")


def _attention(d, i: int, heads: int) -> tuple[str, int | None]:
    where = f"block_configs[{i}].attention"
    if not isinstance(d, dict):
        raise HeteroError(f"{where} must be an object, got {d!r}")
    _others(d, {"no_op", "replace_with_linear", "num_query_groups", "n_heads_in_group"}, where)
    no_op, linear = _flag(d, "no_op", where), _flag(d, "replace_with_linear", where)
    if "num_query_groups" in d:
        groups = _count(d["num_query_groups"], f"{where}.num_query_groups", heads)
    else:
        per = _count(d.get("n_heads_in_group"), f"{where}.n_heads_in_group", heads)
        if per is not None and heads % per:
            raise HeteroError(f"{where}.n_heads_in_group {per} must divide num_attention_heads ({heads})")
        groups = heads // per if per is not None else None
    if groups is not None and (no_op or linear):
        raise HeteroError(f"{where}: key/value heads are given for a block whose attention is "
                          f"{'no_op' if no_op else 'replace_with_linear'} (Megatron-Core asserts against it)")
    if no_op and linear:
        raise HeteroError(f"{where}: no_op and replace_with_linear are both true")
    if groups is not None and heads % groups:
        raise HeteroError(f"{where}: {groups} key/value heads must divide num_attention_heads ({heads})")
    return ("" if no_op else "linear" if linear else "attention"), groups


def _mlp(block: dict, i: int, hidden: int, top: int) -> tuple[str, int | None]:
    key = "ffn" if block.get("ffn") is not None else "mlp"
    d = block.get(key)
    where = f"block_configs[{i}].{key}"
    if not isinstance(d, dict):
        raise HeteroError(f"block_configs[{i}] needs an 'ffn' or 'mlp' object, got {d!r}")
    _others(d, {"no_op", "replace_with_linear", "ffn_hidden_size", "ffn_mult"}, where)
    no_op, linear = _flag(d, "no_op", where), _flag(d, "replace_with_linear", where)
    if "ffn_hidden_size" in d:
        ffn = _count(d["ffn_hidden_size"], f"{where}.ffn_hidden_size", top)
    else:
        mult = d.get("ffn_mult")
        if mult is not None and (isinstance(mult, bool) or not isinstance(mult, (int, float))
                                 or not math.isfinite(mult) or not 0 < mult <= 1e4):
            raise HeteroError(f"{where}.ffn_mult must be a positive number or null, got {mult!r}")
        ffn = ffn_mult_to_size(mult, hidden) if mult is not None else None
        if ffn is not None and ffn > top:
            raise HeteroError(f"{where}.ffn_mult {mult} makes an MLP of width {ffn:,}, above {top:,}")
    if ffn is not None and (no_op or linear):
        raise HeteroError(f"{where}: an MLP width is given for a block whose MLP is "
                          f"{'no_op' if no_op else 'replace_with_linear'} (Megatron-Core asserts against it)")
    if no_op and linear:
        raise HeteroError(f"{where}: no_op and replace_with_linear are both true")
    return ("" if no_op else "linear" if linear else "dense"), ffn


def parse_blocks(text: str, num_layers: int, heads: int, hidden: int,
                 max_ffn: int = 10 ** 7) -> tuple[Block, ...]:
    """One :class:`Block` per decoder layer of the JSON text (see the module docstring)."""
    if not isinstance(text, str):
        raise HeteroError(f"must be the JSON text of an object with block_configs, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise HeteroError(f"the JSON text is {len(text):,} characters, above {MAX_CHARS:,}")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HeteroError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("block_configs"), list):
        raise HeteroError("must be a JSON object with a block_configs list (one block per layer)")
    blocks = data["block_configs"]
    if len(blocks) != num_layers:
        raise HeteroError(f"block_configs has {len(blocks):,} blocks; num_layers is {num_layers:,} (one block per "
                          "layer)")
    out = []
    for i, b in enumerate(blocks):
        if not isinstance(b, dict):
            raise HeteroError(f"block_configs[{i}] must be an object with attention and ffn (or mlp), got {b!r}")
        extra = set(b) - {"attention", "ffn", "mlp"}
        if extra:
            raise HeteroError(f"block_configs[{i}] has the key(s) {', '.join(sorted(map(str, extra)))}; a block "
                              "holds attention and ffn (or mlp)")
        mixer, groups = _attention(b.get("attention"), i, heads)
        mlp, ffn = _mlp(b, i, hidden, max_ffn)
        out.append(Block(mixer, groups, mlp, ffn))
    return tuple(out)


def hetero_problems(m, t: int, pattern) -> list[Problem]:
    """Heterogeneous layers (:func:`parse_blocks`): readable blocks, one per layer, for a dense GPT
    model (Megatron-LM @ d98e8a64 : megatron/core/models/gpt/heterogeneous/heterogeneous_layer_specs.py builds
    self-attention, linear replacements and dense MLPs only); each block's key/value heads split over the
    tensor-parallel ranks."""
    text = m.heterogeneous_layers_config
    if text is None:
        return []
    from ..schema import MAX_FFN
    field = "model.heterogeneous_layers_config"
    shown = text if len(text) <= 80 else text[:77] + "..."
    try:
        blocks = parse_blocks(text, m.num_layers, m.num_attention_heads, m.hidden_size, MAX_FFN)
    except HeteroError as exc:
        return [Problem(field, shown, str(exc))]
    out: list[Problem] = []
    if (m.num_experts is not None or m.multi_latent_attention or pattern is not None
            or m.experimental_attention_variant is not None or m.post_layernorm):
        out.append(Problem(field, shown, "Megatron-Core's heterogeneous layer spec builds self-attention, linear "
                           "replacements and dense MLPs only (not with MoE, MLA, DSA, gated delta nets, a hybrid "
                           "pattern or post_layernorm)"))
    for i, b in enumerate(blocks):
        if b.groups is not None and b.groups % t and t % b.groups:
            out.append(Problem(field, shown, f"block {i}: {b.groups} key/value heads must be a multiple or a "
                               f"divisor of tensor_model_parallel_size ({t}) (Megatron-Core's TransformerConfig "
                               "check, each block's configuration)"))
            break
    return out
