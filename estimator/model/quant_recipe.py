"""Per-module precision (``precision.quant_recipe``): which recipe each Transformer Engine linear of a layer runs.

The rules (:mod:`estimator.config.quant_recipe`) match module paths as Megatron-Core's ``named_modules()`` names them
(Megatron-LM @ d98e8a64 : megatron/core/models/gpt/gpt_model.py and models/hybrid/hybrid_model.py call
``finish_init(get_quant_config_or_none(name, quant_recipe))`` for every module with ``finish_init``). A decoder
layer's linears are ``decoder.layers.N.`` followed by (transformer/attention.py ``SelfAttention``, ssm/mamba_mixer.py
``MambaMixer``, transformer/mlp.py ``MLP``, transformer/moe/moe_layer.py ``MoELayer``, experts.py ``TEGroupedMLP``,
shared_experts.py ``SharedExpertMLP``)::

    attention   self_attention.linear_qkv, self_attention.linear_proj
    Mamba       mixer.in_proj, mixer.out_proj
    dense MLP   mlp.linear_fc1, mlp.linear_fc2
    MoE         mlp.experts.linear_fc1, mlp.experts.linear_fc2 (routed experts, one grouped linear each),
                mlp.shared_experts.linear_fc1, mlp.shared_experts.linear_fc2, mlp.fc1_latent_proj, mlp.fc2_latent_proj

and an MTP layer's ``mtp.layers.J.eh_proj`` and ``mtp.layers.J.mtp_model_layer.`` + its layer's (the hybrid MTP
block's ``mtp_model_layer.layers.K.``: the estimate tests both and requires one answer). The linears of the other
layer kinds (MLA, DSA, DeepSeek-V4 attention, gated delta nets, Kimi's layers, the heterogeneous blocks' linear
replacements, ERNIE-VL's vision pool) are not named here: they take a rule only when the first rule that could
match them matches every module of the layer (``*``, ``decoder.*``), else the configuration is refused by name.

Each layer kind thus gets a :class:`KindQuant`: the recipe of each named linear that a rule sets, and the recipe of
the layer's other linears (the run's recipe unless a catch-all rule sets one). Recipes are the estimator's names
(:mod:`estimator.model.fp8_scales`: an FP8 recipe, ``nvfp4``, or ``''`` for bf16). Which layers take the rules at all:
the quantised ones; the bf16 first/last layers run outside the FP8/NVFP4 autocast and stay bf16
(``override_nonquantized_autocast`` false).
"""

from __future__ import annotations

from fnmatch import fnmatch
from typing import NamedTuple

from ..config.errors import ConfigError, Problem
from ..config.quant_recipe import parse_rules
from .fp8_scales import quantized, recipe_of
from .layers import MIXERS, MLPS, moe, view

__all__ = ["KindQuant", "NAMED_PARTS", "kind_quant", "mtp_quant", "named_shapes"]

#: The token mixers and MLPs whose linears are named (module docstring), by LayerKind part name.
NAMED_PARTS = {"attention": ("self_attention.linear_qkv", "self_attention.linear_proj"),
               "mamba": ("mixer.in_proj", "mixer.out_proj"),
               "dense": ("mlp.linear_fc1", "mlp.linear_fc2")}
_SHARED = ("mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2")
_LATENT = ("mlp.fc1_latent_proj", "mlp.fc2_latent_proj")
_EXPERTS = ("mlp.experts.linear_fc1", "mlp.experts.linear_fc2")


class KindQuant(NamedTuple):
    """The recipes of one layer kind's linears: ``named`` (module suffix, recipe) pairs for the linears a rule
    sets, ``other`` the recipe of the rest (the run's, or a catch-all rule's)."""

    named: tuple = ()
    other: str = ""

    def of(self, module: str) -> str:
        """The recipe of the linear ``module`` (a suffix of :data:`NAMED_PARTS`, or '' for an unnamed one)."""
        for name, recipe in self.named:
            if name == module:
                return recipe
        return self.other


def _recipe(precision: str) -> str:
    """A rule's precision as a recipe name of :mod:`estimator.model.fp8_scales` (bf16: '')."""
    return "" if precision == "bf16" else precision


def named_shapes(r, kind) -> tuple[list, bool]:
    """([(module suffix, (out, in, count), routed expert?)] of the named linears of one layer of ``kind`` on one
    GPU, whether the layer has linears that are not named). Shapes as :func:`estimator.model.layers.
    kind_linear_shapes` gives them, in the order of each part's ``linear_shapes`` (``expert_shapes``)."""


    r = view(r, kind)
    out, unnamed = [], False
    for part in (kind.mixer, kind.mlp):
        if not part:
            continue
        if part in NAMED_PARTS:
            mod = MIXERS[part] if part == kind.mixer else MLPS[part]
            out += [(n, s, False) for n, s in zip(NAMED_PARTS[part], mod.linear_shapes(r))]
        elif part == "moe" and part == kind.mlp:
            names = (_SHARED if r.fs else ()) + (_LATENT if r.lat else ())
            out += [(n, s, False) for n, s in zip(names, moe.linear_shapes(r))]
            experts = moe.expert_shapes(r)
            out += [(n, s, True) for n, s in zip(_EXPERTS, experts)]
            unnamed |= len(experts) > 2                 # ERNIE-VL's vision pool
        else:
            unnamed = True
    return out, unnamed


def _could_match(pattern: str, prefix: str) -> bool:
    """Whether ``pattern`` may match some module path under ``prefix``: its literal head (up to the first
    wildcard) agrees with the prefix."""
    head = pattern
    for ch in "*?[":
        head = head.split(ch, 1)[0]
    return prefix.startswith(head) or head.startswith(prefix)


def _catch_all(pattern: str, prefix: str) -> bool:
    """Whether ``pattern`` matches every module path under ``prefix`` (a trailing ``*`` absorbs any suffix once
    the prefix matches)."""
    return pattern.endswith("*") and fnmatch(prefix, pattern)


def _quant(r, kind, prefixes: tuple, where: str) -> KindQuant:
    rules = parse_rules(r.cfg.precision.quant_recipe)
    run = recipe_of(r.cfg.precision)
    shapes, unnamed = named_shapes(r, kind)
    named = []
    for name, _, _ in shapes:
        got = {next((p for g, p in rules if fnmatch(pre + name, g)), None) for pre in prefixes}
        if len(got) > 1:
            raise ConfigError(Problem("precision.quant_recipe", list(r.cfg.precision.quant_recipe),
                                      f"gives the {where} {name} different precisions in the hybrid and the GPT "
                                      f"MTP block's paths ({', '.join(sorted(str(p) for p in got))}): not modelled"))
        p = got.pop()
        if p is not None:
            named.append((name, _recipe(p)))
    other = run
    if unnamed:
        for pattern, precision in rules:
            if all(_catch_all(pattern, pre) for pre in prefixes):
                other = _recipe(precision)
                break
            if any(_could_match(pattern, pre) for pre in prefixes):
                raise ConfigError(Problem(
                    "precision.quant_recipe", list(r.cfg.precision.quant_recipe),
                    f"rule '{pattern}={precision}' may match linears of the {where} ({kind.label}), whose "
                    "Transformer Engine linears the estimate does not name per module (it names those of "
                    "attention, Mamba, dense MLP and MoE layers: estimator/model/quant_recipe.py); only a rule "
                    "matching every module of such a layer ('*', 'decoder.*') before any other that could match "
                    "them is modelled"))
    return KindQuant(tuple(named), other)


def kind_quant(r, kind) -> KindQuant:
    """The recipes of a decoder layer of ``kind`` in the quantised layers (module docstring); the run's recipe
    throughout without ``quant_recipe``."""
    if not (r.cfg.precision.quant_recipe and quantized(r.cfg.precision)):
        return KindQuant((), recipe_of(r.cfg.precision))
    return _quant(r, kind, ("decoder.layers.0.",), "decoder layers'")


def mtp_quant(r, kind) -> tuple[KindQuant, str]:
    """(the recipes of an MTP layer's transformer layer of ``kind``, the recipe of its eh_proj)."""
    run = recipe_of(r.cfg.precision)
    if not (r.cfg.precision.quant_recipe and quantized(r.cfg.precision)):
        return KindQuant((), run), run
    q = _quant(r, kind, ("mtp.layers.0.mtp_model_layer.", "mtp.layers.0.mtp_model_layer.layers.0."), "MTP layers'")
    rules = parse_rules(r.cfg.precision.quant_recipe)
    eh = next((p for g, p in rules if fnmatch("mtp.layers.0.eh_proj", g)), None)
    return q, (run if eh is None else _recipe(eh))
