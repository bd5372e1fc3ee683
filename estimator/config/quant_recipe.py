"""``precision.quant_recipe``: Megatron-Core's per-module quantisation recipe, as ordered ``GLOB=PRECISION`` rules.

Megatron-Core's ``TransformerConfig.quant_recipe`` (Megatron-LM @ d98e8a64 : megatron/core/quantization/
quant_config.py ``RecipeConfig``) is built from a YAML file (Megatron-LM's ``--te-precision-config-file``,
``megatron/training/argument_utils.py``; Megatron-Bridge's ``load_quantization_recipe(path)``) or a dict
(``RecipeConfig.from_config_dict``) of two parts:

- ``configs``: named precisions, each ``{transformer_engine_config_type: TEQuantizationParams, training_recipe:
  {fp8_quantization_recipe: mxfp8 | tensorwise | blockwise} or {fp4_quantization_recipe: nvfp4} or {} (bf16),
  evaluation_recipe: {...}}`` (extensions/transformer_engine.py ``TEQuantizationParams.parse_from_config``,
  ``TEQuantizationRecipe``);
- ``matchers``: in order, ``{config: NAME, type: glob, pattern: GLOB, enabled: true}``. A module's path in the model
  (``named_modules()``: ``decoder.layers.3.mixer.out_proj``, ``mtp.layers.0.eh_proj``) takes the config of the
  first enabled matcher whose pattern matches it with :func:`fnmatch.fnmatch` (``GlobMatcher``; a matcher without
  ``enabled: true`` is skipped, ``RecipeConfig._build_matchers``); a module no matcher takes keeps the run's own
  recipe (``get_quant_config_or_none``). Only Transformer Engine's linear layers read it (``TELinear``,
  ``TELayerNormColumnParallelLinear``, ``TEGroupedLinear``: ``finish_init``).

The estimator keeps the part that changes memory, the training precision per pattern, as ordered rules
``"GLOB=PRECISION"`` (first match wins), PRECISION one of :data:`PRECISIONS`. :func:`rules_from_recipe` reads a
recipe dict (the YAML file's content, or Bridge's ``model.quant_recipe``) into those rules and names what it cannot
model; :func:`parse_rules` splits validated rules; :func:`precision_of` answers for one module path.

What the rules mean (``_get_fp8_autocast_for_quant_recipe`` with ``TEQuantizationRecipe``'s defaults,
``override_quantized_autocast`` true and ``override_nonquantized_autocast`` false): inside the run's FP8 or NVFP4
autocast a matched linear runs its rule's precision (bf16: autocast off for it); outside it (a run without fp8 or
fp4, the bf16 first/last layers) a rule changes nothing. Its weights are built under ``fp8_model_init(enabled=
fp8_param)``, off by default, so a matched linear keeps weights in params_dtype (and caches the quantised copies of
its own recipe) even under fp8/fp4_param_gather: that combination is refused (:mod:`estimator.config.rules.precision`).
"""

from __future__ import annotations

from fnmatch import fnmatch

from .errors import show

__all__ = ["PRECISIONS", "parse_rules", "precision_of", "recipe_from_rules", "rule_problem", "rules_from_recipe"]

#: The precisions a rule gives: bf16 (no quantisation), Megatron-Core's FP8 recipes that a per-module recipe may
#: name (``Fp8Recipe``: delayed scaling is refused by ``TEQuantizationRecipe.parse_from_config``), and NVFP4.
PRECISIONS = ("bf16", "tensorwise", "blockwise", "mxfp8", "nvfp4")

#: ``TEQuantizationRecipe`` keys without a memory effect (numerics, the amax reduction group).
_NO_EFFECT_KEYS = {"fp8_format", "tp_only_amax_red"}
#: ``TEQuantizationRecipe`` keys, with the value the estimate models and why another is refused.
_REFUSED_KEYS = {
    "override_quantized_autocast": (True, "false keeps the run's own recipe for the matched modules: not modelled"),
    "override_nonquantized_autocast": (False, "true quantises matched modules outside the FP8/NVFP4 autocast (the "
                                       "bf16 first/last layers): not modelled"),
    "fp8_param": (False, "FP8 weights built per module (fp8_model_init per linear) are not modelled"),
    "fp4_param": (False, "NVFP4 weights built per module (fp8_model_init per linear) are not modelled"),
    "custom_recipe_factory": (None, "a custom quantisation recipe factory is not modelled"),
}


def rule_problem(rule) -> str | None:
    """Why ``rule`` is not a valid ``GLOB=PRECISION`` rule, or None."""
    if not isinstance(rule, str) or "=" not in rule:
        return f"{show(rule)} is not GLOB=PRECISION (e.g. '*.linear_qkv=bf16')"
    pattern, _, precision = rule.rpartition("=")
    if not pattern.strip():
        return f"{show(rule)} has an empty glob"
    if precision.strip() not in PRECISIONS:
        extra = (" (Megatron-Core refuses delayed scaling in a per-module recipe)" if precision.strip() == "delayed"
                 else "")
        return f"{show(rule)}: precision {show(precision.strip())} is not one of {', '.join(PRECISIONS)}{extra}"
    return None


def parse_rules(rules) -> tuple[tuple[str, str], ...]:
    """(glob, precision) pairs of validated rules, in order."""
    out = []
    for rule in rules or ():
        pattern, _, precision = rule.rpartition("=")
        out.append((pattern.strip(), precision.strip()))
    return tuple(out)


def precision_of(rules, path: str) -> str | None:
    """The precision the first rule matching module ``path`` gives (``rules``: :func:`parse_rules` pairs), None
    where no rule matches (the module keeps the run's recipe)."""
    for pattern, precision in rules:
        if fnmatch(path, pattern):
            return precision
    return None


def _training_precision(name: str, config) -> tuple[str | None, list[str]]:
    """(precision, why refused) of one named config of a recipe dict."""
    where = f"configs.{name}"
    if not isinstance(config, dict):
        return None, [f"{where}: {show(config)} is not a mapping"]
    kind = config.get("transformer_engine_config_type")
    if kind != "TEQuantizationParams":
        if "kitchen_config_type" in config:
            return None, [f"{where}: kitchen quantisation ({show(config.get('kitchen_config_type'))}) is not modelled"]
        return None, [f"{where}: transformer_engine_config_type {show(kind)} is not TEQuantizationParams, the only "
                      "type Megatron-Core accepts"]
    extra = set(config) - {"transformer_engine_config_type", "training_recipe", "evaluation_recipe"}
    if extra:
        return None, [f"{where}: unknown key(s) {', '.join(sorted(map(str, extra)))}"]
    training = config.get("training_recipe")
    if not isinstance(training, dict):
        return None, [f"{where}.training_recipe: {show(training)} is not a mapping (Megatron-Core requires it)"]
    why = []
    for key, value in training.items():
        if key in ("fp8_quantization_recipe", "fp4_quantization_recipe") or key in _NO_EFFECT_KEYS:
            continue
        if key in _REFUSED_KEYS:
            modelled, reason = _REFUSED_KEYS[key]
            if value != modelled:
                why.append(f"{where}.training_recipe.{key} = {show(value)}: {reason}")
            continue
        why.append(f"{where}.training_recipe.{key}: not a TEQuantizationRecipe field")
    fp8, fp4 = training.get("fp8_quantization_recipe"), training.get("fp4_quantization_recipe")
    if fp8 is not None and fp4 is not None:
        why.append(f"{where}.training_recipe: fp8 and fp4 quantization settings are mutually exclusive")
    elif fp8 is not None and fp8 not in PRECISIONS[1:4]:
        why.append(f"{where}.training_recipe.fp8_quantization_recipe = {show(fp8)}: one of "
                   f"{', '.join(PRECISIONS[1:4])} is modelled" + (" (Megatron-Core refuses delayed scaling here)"
                                                                   if fp8 == "delayed" else ""))
    elif fp4 is not None and fp4 != "nvfp4":
        why.append(f"{where}.training_recipe.fp4_quantization_recipe = {show(fp4)}: only nvfp4 is modelled")
    return (fp8 or fp4 or "bf16"), why


def _matchers(matchers) -> list[tuple[str, str, str]]:
    """(where, pattern, config name) of a recipe's enabled glob matchers, in order; a list holds Bridge's serialised
    ``GlobMatcher`` objects (``pattern``, ``config_key``), a mapping the YAML form (``RecipeConfig._build_matchers``).
    Raises ValueError with the reason for a malformed matcher."""
    if matchers is None:
        return []
    items = (list(matchers.items()) if isinstance(matchers, dict)
             else [(str(i), m) for i, m in enumerate(matchers)] if isinstance(matchers, list) else None)
    if items is None:
        raise ValueError(f"matchers: {show(matchers)} is not a mapping or a list")
    out = []
    for name, m in items:
        where = f"matchers.{name}"
        if not isinstance(m, dict):
            raise ValueError(f"{where}: {show(m)} is not a mapping")
        if isinstance(matchers, dict) and not m.get("enabled", False):
            continue
        kind = m.get("type", "glob" if isinstance(matchers, list) else None)
        target = str(m.get("_target_", ""))
        if kind != "glob" and not target.endswith("GlobMatcher"):
            raise ValueError(f"{where}: match type {show(kind)} is not implemented by Megatron-Core (glob is)")
        pattern, config = m.get("pattern"), m.get("config", m.get("config_key"))
        if not isinstance(pattern, str) or not isinstance(config, str):
            raise ValueError(f"{where}: a glob matcher needs a 'pattern' and a 'config' (got {show(m)})")
        out.append((where, pattern, config))
    return out


def rules_from_recipe(recipe) -> tuple[list[str], list[str], list[str]]:
    """(rules, refused, notes) of a Megatron-Core quant recipe: ``recipe`` is the dict of its YAML file or of
    ``RecipeConfig.from_config_dict`` (``configs`` and ``matchers``), or a list of ``GLOB=PRECISION`` rules already.
    ``refused`` says, per part, what changes memory and is not modelled (or is invalid); ``notes`` what is read
    and has no effect on the training step (the evaluation recipes)."""
    if isinstance(recipe, list):
        bad = [p for p in map(rule_problem, recipe) if p]
        return ([] if bad else list(recipe)), bad, []
    if not isinstance(recipe, dict):
        return [], [f"{show(recipe)} is not a recipe (a mapping with configs and matchers, or a list of "
                    "GLOB=PRECISION rules)"], []
    unknown = set(recipe) - {"configs", "matchers", "_target_"}
    if unknown:
        return [], [f"unknown key(s) {', '.join(sorted(map(str, unknown)))} (a recipe holds configs and matchers)"], []
    configs = recipe.get("configs") or {}
    if not isinstance(configs, dict):
        return [], [f"configs: {show(configs)} is not a mapping"], []
    try:
        matchers = _matchers(recipe.get("matchers"))
    except ValueError as exc:
        return [], [str(exc)], []
    rules, refused, notes = [], [], []
    precisions: dict[str, str] = {}
    for where, pattern, name in matchers:
        if name not in configs:
            refused.append(f"{where}: config {show(name)} is not in configs ({', '.join(map(str, configs)) or 'none'})")
            continue
        if name not in precisions:
            precision, why = _training_precision(name, configs[name])
            refused += why
            precisions[name] = precision
            if not why and configs[name].get("evaluation_recipe") is not None:
                notes.append(f"configs.{name}.evaluation_recipe: the evaluation forward's precision (no effect on "
                             "the training step)")
        rules.append(f"{pattern}={precisions[name]}")
    return (rules if not refused else []), refused, notes


def recipe_from_rules(rules) -> dict:
    """The rules as a recipe dict (``RecipeConfig.from_config_dict``'s and the YAML file's form): one config per
    precision, one enabled glob matcher per rule, in order. :func:`rules_from_recipe` reads it back."""
    configs, matchers = {}, {}
    for i, (pattern, precision) in enumerate(parse_rules(rules)):
        if precision not in configs:
            training = ({} if precision == "bf16" else {"fp4_quantization_recipe": precision} if precision == "nvfp4"
                        else {"fp8_quantization_recipe": precision})
            configs[precision] = {"transformer_engine_config_type": "TEQuantizationParams",
                                  "training_recipe": training}
        matchers[f"rule_{i}"] = {"config": precision, "type": "glob", "pattern": pattern, "enabled": True}
    return {"configs": configs, "matchers": matchers}
