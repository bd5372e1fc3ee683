"""Megatron-LM ``pretrain_gpt.py`` arguments, both ways.

:func:`parse_megatron_args` reads the flags of a launch command (a shell text with ``\\`` line breaks,
or a token list; anything before the ``*.py`` script, such as ``torchrun`` and its options, is skipped)
and returns a configuration dict that means what Megatron-LM would run. Flags are matched through the
schema's :attr:`~estimator.config.schema.FieldSpec.flag` (one source of truth) plus a small table of special
cases; where a flag is absent, Megatron-LM's own default applies, not this project's (GeLU without
gating, biases on, learned absolute positions, LayerNorm, dropout 0.1, fp32 weights, no distributed
optimizer, ...). Megatron-LM's derived values are applied as ``megatron/training/arguments.py`` does
(SwiGLU's ffn_hidden_size = int(8h/3/64)*64, sequence parallelism
off at TP 1, ``--num-query-groups`` only with ``--group-query-attention``).

Flags without effect on memory (learning rate, data paths, logging, ...) and unknown flags are
returned in a list of ignored flags. Flags that change memory in ways the estimator does not model
(FSDP, CPU offloading, ...) raise :class:`~estimator.config.errors.UnsupportedError`.
The world size is not a Megatron flag: pass ``world_size`` (the CLI's ``--num-gpus``).

:func:`to_megatron_args` (from :mod:`estimator.formats.megatron_export`) writes a configuration back as flags, ready to
paste into a launch script.
"""

from __future__ import annotations

import difflib
import re
from typing import NamedTuple

from ..config.errors import ConfigError, Problem, UnsupportedError, show, wrong_type
from ..config.fields import PatternError, coerce, parse_layer_pattern
from ..config.input_size import size_problem
from ..config.quant_recipe import rules_from_recipe
from ..config.yamlio import YamlError, load
from ..config.schema import field_specs
from ..model.layers.router import AUX_TYPES
from .megatron_catalog import ARGUMENTS, REVISION
from .megatron_export import CP_TYPES as _CP_TYPES, pattern_expression, to_megatron_args
from .megatron_flag_classes import classify

__all__ = ["HANDLED", "MegatronImport", "REFUSED_VALUES", "RefusedFlagsError", "grouped_no_effect",
           "parse_megatron_args", "pattern_expression", "read_megatron_args", "shell_words", "to_megatron_args"]

#: Fields whose flag is not a plain "--flag value" / store_true in Megatron-LM (handled below).
_SPECIAL_FIELDS = {"model.activation_func", "model.gated_linear_unit", "model.add_bias_linear",
                   "model.num_query_groups", "model.moe_layer_freq", "precision.params_dtype", "precision.fp8", "precision.fp4",
                   "training.gradient_accumulation_fusion", "training.world_size", "parallelism.cp_comm_type",
                   "training.masked_softmax_fusion", "training.create_attention_mask_in_dataloader",
                   "model.moe_token_dispatcher_type", "training.optimizer", "training.cuda_graph_modules",
                   "model.linear_attention_freq", "model.moe_router_load_balancing_type",
                   "model.moe_aux_loss_coeff", "training.distillation_cached_logits"}
_BY_FLAG = {s.flag: s for s in field_specs() if s.flag and s.path not in _SPECIAL_FIELDS}
_MODEL_SPECS = {s.name: s for s in field_specs() if s.section == "model"}

#: Option string -> argument destination, for every argument Megatron-LM defines.
_DEST = {flag: dest for dest, (flags, _, _) in ARGUMENTS.items() for flag in flags}

#: Destinations read by the special cases below (besides the schema's plain flags in _BY_FLAG).
_SPECIAL_DESTS = {"swiglu", "squared_relu", "quick_geglu", "add_bias_linear", "fp16", "bf16", "fp8", "fp4",
                  "group_query_attention", "num_query_groups", "moe_layer_freq", "tokenizer_type",
                  "gradient_accumulation_fusion", "use_flash_attn", "recompute_activations", "moe_layer_recompute",
                  "grad_reduce_in_bf16", "use_rotary_position_embeddings", "add_position_embedding", "cp_comm_type",
                  "num_layers_per_virtual_pipeline_stage", "padded_vocab_size", "encoder_seq_length", "optimizer",
                  "moe_token_dispatcher_type", "torch_fsdp2_reshard_after_forward",
                  "megatron_fsdp_max_pool_double_buffer", "cuda_graph_modules", "cuda_graph_scope_deprecated",
                  "external_cuda_graph", "moe_enable_deepep", "use_layer_wise_param_layout", "moe_deepep_num_sms",
                  "moe_hybridep_num_sms", "masked_softmax_fusion", "create_attention_mask_in_dataloader",
                  "use_mamba_mem_eff_path", "linear_attention_freq", "hybrid_layer_pattern", "hybrid_override_pattern",
                  "mtp_hybrid_override_pattern", "experimental_attention_variant", "moe_router_load_balancing_type",
                  "moe_aux_loss_coeff", "tp_comm_overlap_cfg", "muon_split_qkv", "fp8_wgrad",
                  "heterogeneous_layers_config_path", "te_precision_config_file",
                  "ddp_param_name_patterns_for_fp32_local_accumulation", "sft", "logits_load_dir"}

#: Destinations the importer turns into configuration fields.
HANDLED = frozenset({_DEST[f] for f in _BY_FLAG if f in _DEST} | _SPECIAL_DESTS)

#: Values of accepted arguments that change memory in ways not modelled: dest -> (allowed values, reason).
REFUSED_VALUES = {
    "optimizer": (("adam", "sgd", "muon", "dist_muon"), "the states of Lion, SOAP and adaptive Muon are not "
                  "modelled (adam, sgd, muon and dist_muon are)"),
    "moe_flex_dispatcher_backend": (("deepep", "hybridep"), "NCCL EP's buffers are not modelled (deepep and "
                                    "hybridep are)"),
    "megatron_fsdp_version": (("1",), "Megatron-FSDP 2 is not modelled (version 1 is)"),
    "fp4_recipe": (("nvfp4",), "only the nvfp4 recipe (NVFP4BlockScaling) is modelled, not custom quantizer "
                   "factories"),
    "ddp_param_name_patterns_for_fp32_local_accumulation": (("all",), "fp32 local accumulation is modelled for "
                                                            "every parameter ('all') only: the estimator does not "
                                                            "match parameter names"),
    "experimental_attention_variant": (("gdn", "gated_delta_net", "dsa"), "only the gated delta net (gdn) and "
                                       "DeepSeek sparse attention (dsa) are modelled; gdn2 is not"),
}

#: Megatron-LM defaults that differ from this schema's, applied when the flag is absent.
_MEGATRON_MODEL_DEFAULTS = {"activation_func": "gelu", "gated_linear_unit": False, "add_bias_linear": True,
                            "position_embedding_type": "learned_absolute", "normalization": "LayerNorm",
                            "hidden_dropout": 0.1, "attention_dropout": 0.1, "moe_grouped_gemm": False}
_MEGATRON_MLA_DEFAULTS = {"kv_lora_rank": 32, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128}


def eval_pattern(text: str, flag: str):
    """Megatron's ``moe_freq_type``: an int, or a list expression like ``([0]*3+[1]*58)``, read by the parser every
    surface uses (:func:`estimator.config.fields.parse_layer_pattern`, with its limits) instead of ``eval``; a
    comma list without brackets is not an integer to Megatron-LM, so it is refused here."""
    try:
        return parse_layer_pattern(text, bare_lists=False)
    except PatternError as exc:
        raise ConfigError(Problem(flag, text, f"not a layer pattern: {exc}")) from None


_SPACE = re.compile(r"[ \t\r\n]*")
_PLAIN = re.compile(r"[^ \t\r\n'\"\\\\#]+")
_IN_DOUBLE = re.compile(r'[^"\\\\]+')


def _line_end(text: str, i: int) -> int:
    j = text.find("\n", i)
    return len(text) if j < 0 else j + 1


def shell_words(text: str) -> list[str]:
    """The words of a shell command line as ``shlex.split(text, comments=True)`` gives them (POSIX quoting: '...'
    literal, "..." with \\" and \\\\ escaped, \\ outside quotes escaping the next character; # starts a comment
    that ends the word and the line), in time linear in the text: shlex adds each character to its token one at a
    time, which took 16 s for a 1 MiB quoted word. Raises ValueError as shlex does ("No closing quotation",
    "No escaped character")."""
    out: list[str] = []
    i, n = 0, len(text)
    while True:
        i = _SPACE.match(text, i).end()
        if i >= n:
            return out
        if text[i] == "#":
            i = _line_end(text, i)
            continue
        parts: list[str] = []
        quoted = False
        while i < n:
            c = text[i]
            if c in " \t\r\n":
                break
            if c == "#":
                i = _line_end(text, i)
                break
            if c == "'":
                j = text.find("'", i + 1)
                if j < 0:
                    raise ValueError("No closing quotation")
                parts.append(text[i + 1:j])
                i, quoted = j + 1, True
            elif c == '"':
                i, quoted = i + 1, True
                while True:
                    m = _IN_DOUBLE.match(text, i)
                    if m:
                        parts.append(m.group())
                        i = m.end()
                    if i >= n:
                        raise ValueError("No closing quotation")
                    if text[i] == '"':
                        i += 1
                        break
                    if i + 1 >= n:
                        raise ValueError("No escaped character")
                    nxt = text[i + 1]
                    parts.append(nxt if nxt in '"\\' else "\\" + nxt)
                    i += 2
            elif c == "\\":
                if i + 1 >= n:
                    raise ValueError("No escaped character")
                parts.append(text[i + 1])
                i += 2
            else:
                m = _PLAIN.match(text, i)
                parts.append(m.group())
                i = m.end()
        if parts or quoted:
            out.append("".join(parts))


def _tokens(args) -> tuple[list[str], dict]:
    """(the tokens after the ``*.py`` script, the environment assignments ``NAME=value`` before it)."""
    too_large = None            # (the text, or the tokens joined by spaces)
    if isinstance(args, str):
        too_large = size_problem(len(args), "megatron_args", "the Megatron-LM argument text")
    elif isinstance(args, (list, tuple)) and all(isinstance(t, str) for t in args):
        too_large = size_problem(sum(len(t) + 1 for t in args), "megatron_args", "the Megatron-LM argument list")
    if too_large:
        raise ConfigError(too_large)
    if isinstance(args, str):
        try:
            toks = shell_words(args.replace("\\\r\n", " ").replace("\\\n", " "))
        except ValueError as exc:
            raise ConfigError(Problem("megatron_args", None, f"cannot split the command line: {exc}")) from None
    elif isinstance(args, (list, tuple)) and all(isinstance(t, str) for t in args):
        toks = list(args)
    else:
        raise ConfigError(Problem("megatron_args", type(args).__name__, "expected a command line or a list of "
                                  "strings"))
    script = next((i for i, t in enumerate(toks) if t.endswith(".py") and not t.startswith("-")), None)
    if script is None:
        return toks, {}
    env = {}
    for t in toks[:script]:
        name, eq, value = t.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            env[name] = value
    return toks[script + 1:], env


def _split(toks: list[str]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(flag, values) pairs in order, and stray positional tokens."""
    out: list[tuple[str, list[str]]] = []
    stray: list[str] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        i += 1
        if not t.startswith("--"):
            stray.append(t)
            continue
        if "=" in t:
            name, value = t.split("=", 1)
            out.append((name, [value]))
            continue
        values = []
        while i < len(toks) and not toks[i].startswith("--"):
            values.append(toks[i])
            i += 1
        out.append((t, values))
    return out, stray


def _one(flag: str, values: list[str]) -> str:
    if len(values) != 1:
        raise ConfigError(Problem(flag, " ".join(values) or None, f"{flag} takes exactly one value, got "
                                  f"{len(values)}"))
    v = values[0]
    if "$" in v:
        raise ConfigError(Problem(flag, v, f"'{v}' is an unexpanded shell variable; paste the command with "
                                  "the values filled in"))
    return v


#: Flags whose argparse ``choices`` in Megatron-LM @ d98e8a64 ``arguments.py`` are narrower than the schema field's
#: (the field also takes what Megatron-Bridge sets through its config object, e.g. Muon's ``highest``).
_ARGPARSE_CHOICES = {"--muon-fp32-matmul-prec": ("low", "medium", "high")}


def _convert(spec, flag: str, values: list[str]):
    if spec.type == "bool":
        if values:
            raise ConfigError(Problem(flag, " ".join(values), f"{flag} is a switch and takes no value"))
        return True
    if spec.type in ("str_list", "int_list"):
        if not values:
            raise ConfigError(Problem(flag, None, f"{flag} needs at least one value"))
        if spec.type == "int_list":
            return [_int(flag, [v]) for v in values]
        return list(values)
    v = _one(flag, values)
    allowed = _ARGPARSE_CHOICES.get(flag)
    if allowed and v not in allowed:
        raise ConfigError(Problem(flag, v, f"{flag} must be one of {', '.join(allowed)} (Megatron-LM's arguments.py), "
                                  f"got {show(v)}"))
    try:
        if spec.type == "int":
            return int(v)
        if spec.type == "float":
            return float(v)
    except ValueError:
        raise ConfigError(Problem(flag, v, f"{flag} needs {'an integer' if spec.type == 'int' else 'a number'}, "
                                  f"got {show(v)}")) from None
    return v


def _checked(m: dict, name: str) -> int:
    """The model field ``name`` read from its flag, held to the field's type and bounds before a default is derived
    from it (``--hidden-size`` of 400 digits made SwiGLU's width an OverflowError)."""
    spec = _MODEL_SPECS[name]
    problems: list[Problem] = []
    coerce(spec, m[name], problems)
    if problems:
        raise ConfigError(Problem(spec.flag, m[name], f"{spec.flag} {problems[0].message}"))
    return m[name]


class MegatronImport(NamedTuple):
    """What a launch command means for the estimate."""

    config: dict                          # the configuration, Megatron-LM's defaults applied
    no_effect: tuple                      # (flag as given, why it does not change memory), in order
    notes: tuple                          # what Megatron-LM itself changes or ignores, one line each


class RefusedFlagsError(UnsupportedError):
    """Flags whose memory effect is not modelled; ``refused`` holds (flag as given, reason) pairs."""

    def __init__(self, refused: list[tuple[str, str]]):
        self.refused = tuple(refused)
        lines = "\n".join(f"  - {flag}: {why}" for flag, why in refused)
        super().__init__(f"not modelled, so no estimate (remove these flags to estimate without them):\n{lines}")

    def to_problems(self) -> list[Problem]:
        return [Problem(flag.split()[0], " ".join(flag.split()[1:]) or None, why) for flag, why in self.refused]


def _is_default(dest: str, values: list[str]) -> bool:
    """Whether the values given equal Megatron-LM's default for the argument (a refused flag is harmless then)."""
    _, arity, default = ARGUMENTS[dest]
    if arity == 0 or default is None:
        return False
    given = values if isinstance(default, tuple) else values[:1] if len(values) == 1 else None
    want = list(default) if isinstance(default, tuple) else [default]
    if given is None or len(given) != len(want):
        return False
    for g, w in zip(given, want):
        if isinstance(w, bool) or isinstance(w, str):
            if str(w) != g:
                return False
        else:
            try:
                if float(g) != float(w):
                    return False
            except ValueError:
                return False
    return True


#: Router fields read from plain flags, dropped (with a note) for a dense model.
_ROUTER_FIELDS = ("moe_router_score_function", "moe_router_pre_softmax", "moe_router_num_groups",
                  "moe_router_group_topk", "moe_z_loss_coeff", "moe_router_fusion",
                  "moe_permute_fusion")

#: Load balancing types of ``--moe-router-load-balancing-type`` (arguments.py): the schema's, and the
#: quantile-balancing router it refuses.
_BALANCING = (*next(s.choices for s in field_specs() if s.path == "model.moe_router_load_balancing_type"),
              "quantile_balancing")


def _load_balancing(raw: dict, m: dict, notes: list) -> None:
    """``--moe-router-load-balancing-type`` and ``--moe-aux-loss-coeff`` (both nargs='+', paired by position).

    What the router keeps depends only on whether it runs Sinkhorn and whether some aux-loss type has a
    positive coefficient (router.py ``is_aux_loss_enabled``); a list of types is kept as its first aux-loss type
    with a positive coefficient (or ``none``), with a note."""
    flag_t, flag_c = "--moe-router-load-balancing-type", "--moe-aux-loss-coeff"
    types = raw.get("moe_router_load_balancing_type", ["aux_loss"])
    coeffs = []
    for v in raw.get("moe_aux_loss_coeff", ["0.0"]):
        try:
            coeffs.append(float(v))
        except ValueError:
            raise ConfigError(Problem(flag_c, v, f"{flag_c} needs a number, got {show(v)}")) from None
    for t in types:
        if t not in _BALANCING:
            raise ConfigError(Problem(flag_t, t, f"{flag_t} must be one of {', '.join(_BALANCING)}, got {show(t)}"))
    if "quantile_balancing" in types:
        raise RefusedFlagsError([(f"{flag_t} {' '.join(types)}", "the quantile-balancing router is not modelled")])
    if len(types) == 1:
        if len(coeffs) != 1:
            raise ConfigError(Problem(flag_c, " ".join(map(str, coeffs)), f"{flag_c} takes one value for one "
                                      f"load balancing type, got {len(coeffs)}"))
        m["moe_router_load_balancing_type"], m["moe_aux_loss_coeff"] = types[0], coeffs[0]
        return
    if len(coeffs) != len(types):
        raise ConfigError(Problem(flag_c, " ".join(map(str, coeffs)), f"{flag_c} needs one value per load "
                                  f"balancing type ({len(types)}), got {len(coeffs)}"))
    if "sinkhorn" in types:
        raise ConfigError(Problem(flag_t, " ".join(types), "sinkhorn cannot be combined with other types"))
    on = [(t, c) for t, c in zip(types, coeffs) if t in AUX_TYPES and c > 0]
    m["moe_router_load_balancing_type"], m["moe_aux_loss_coeff"] = on[0] if on else ("none", 0.0)
    notes.append(f"{flag_t} {' '.join(types)}: the router keeps the same scores for every aux-loss type; "
                 f"estimated as {m['moe_router_load_balancing_type']}")


def _check_arity(flag: str, dest: str, values: list[str]) -> None:
    arity = ARGUMENTS[dest][1]
    if arity == 0 and values:
        raise ConfigError(Problem(flag, " ".join(values), f"{flag} is a switch and takes no value"))
    if (arity == 1 and len(values) != 1) or (arity == "+" and not values) or (arity == "?" and len(values) > 1):
        want = {1: "exactly one value", "+": "at least one value", "?": "at most one value"}[arity]
        raise ConfigError(Problem(flag, " ".join(values) or None, f"{flag} takes {want}, got {len(values)}"))


def _unknown(flag: str) -> Problem:
    close = difflib.get_close_matches(flag, list(_DEST), n=3, cutoff=0.75)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return Problem(flag, None, f"{flag} is not an argument of Megatron-LM's arguments.py (revision "
                   f"{REVISION[:12]}){hint}")


def _int(flag: str, values: list[str]) -> int:
    v = _one(flag, values)
    try:
        return int(v)
    except ValueError:
        raise ConfigError(Problem(flag, v, f"{flag} needs an integer, got {show(v)}")) from None


def read_megatron_args(args, *, world_size: int | None = None, read_file=None,
                       argparse_rules: bool = True) -> MegatronImport:
    """The configuration of a ``pretrain_gpt.py`` launch, with what each flag means for memory.

    ``argparse_rules=False`` skips the checks only Megatron-LM's ``arguments.py`` makes and Megatron-Core does not
    (optimizer CPU offload without the precision-aware optimizer): the Megatron-Bridge importer, which configures
    Megatron-Core directly, reads its fields through this function that way.

    ``args`` is the command text or a token list. ``world_size`` (the number of GPUs) is added to the
    training section when given; Megatron has no flag for it. ``read_file(path)`` gives the text of a file a flag
    names (``--tp-comm-overlap-cfg``), or None where it is not available; without it no file is read and such a
    flag is refused (the CLI reads the local file). Every flag is looked up in the catalogue of
    Megatron-LM's arguments (:mod:`estimator.formats.megatron_catalog`) and its classification
    (:mod:`estimator.formats.megatron_flag_classes`). Raises :class:`ConfigError` for a flag Megatron-LM does not
    define (with the closest known flags) or a bad value, and :class:`RefusedFlagsError` naming every flag
    whose memory effect is not modelled, and :class:`~estimator.config.errors.InputTypeError` (a ``TypeError``) for a
    ``read_file`` that is not a function.
    """
    if read_file is not None and not callable(read_file):
        raise wrong_type("read_megatron_args", "read_file", "a function path -> text or None", read_file)
    toks, env = _tokens(args)
    pairs, stray = _split(toks)
    if stray:
        raise ConfigError([Problem("megatron_args", t, f"{show(t)} is not a flag (and follows no flag that takes a "
                                   "value)") for t in stray])
    unknown = [_unknown(flag) for flag, _ in pairs if flag not in _DEST]
    if unknown:
        raise ConfigError(unknown)
    sec: dict[str, dict] = {"model": {}, "parallelism": {}, "training": {}, "precision": {}}
    no_effect: list[tuple[str, str]] = []
    notes: list[str] = []
    refused: list[tuple[str, str]] = []
    raw: dict[str, list[str]] = {}
    for flag, values in pairs:
        dest = _DEST[flag]
        _check_arity(flag, dest, values)
        text = " ".join([flag, *values])
        kind, why = classify(dest) or ("refused", "not classified")
        allowed = REFUSED_VALUES.get(dest)
        if allowed and values and values[0] not in allowed[0]:
            refused.append((text, allowed[1]))
            continue
        if kind == "refused":
            if _is_default(dest, values) or (dest == "microbatch_group_size_per_vp_stage"
                                              and values == raw.get("pipeline_model_parallel_size", ["1"])):
                notes.append(f"{text}: Megatron-LM's default, no change")
            else:
                refused.append((text, why))
            continue
        if dest not in HANDLED:
            no_effect.append((text, why))
            continue
        spec = _BY_FLAG.get(flag)
        if spec is not None:
            sec[spec.section][spec.name] = _convert(spec, flag, values)
        raw[dest] = values
    if refused:
        raise RefusedFlagsError(refused)
    m, par, tr, pr = sec["model"], sec["parallelism"], sec["training"], sec["precision"]

    # Activation, biases, positions (Megatron's defaults where no flag says otherwise).
    acts = [d for d in ("swiglu", "squared_relu", "quick_geglu") if d in raw]
    if len(acts) > 1:
        raise ConfigError(Problem("--" + acts[1].replace("_", "-"), None, "--swiglu, --squared-relu and "
                                  "--quick-geglu exclude each other"))
    if "swiglu" in raw:
        m["activation_func"], m["gated_linear_unit"] = "swiglu", True
    elif "squared_relu" in raw:
        m["activation_func"], m["gated_linear_unit"] = "squared_relu", False
    elif "quick_geglu" in raw:
        m["activation_func"], m["gated_linear_unit"] = "quick_gelu", True   # argument_utils.py: gated quick_gelu
    if "add_bias_linear" in raw:
        m["add_bias_linear"] = False
    if "use_rotary_position_embeddings" in raw:
        m["position_embedding_type"] = "rope"
    for k, v in _MEGATRON_MODEL_DEFAULTS.items():
        m.setdefault(k, v)
    if "add_position_embedding" in raw and m["position_embedding_type"] != "rope":
        raise ConfigError(Problem("--no-position-embedding", None, "Megatron-LM accepts --no-position-embedding "
                                  "only with --position-embedding-type rope"))
    if "group_query_attention" in raw:   # Megatron-LM's --num-query-groups defaults to 1 (multi-query)
        m["num_query_groups"] = _int("--num-query-groups", raw["num_query_groups"]) if "num_query_groups" in raw else 1
    elif "num_query_groups" in raw:
        notes.append("--num-query-groups: Megatron-LM ignores it without --group-query-attention")
    if "moe_layer_freq" in raw:
        m["moe_layer_freq"] = eval_pattern(_one("--moe-layer-freq", raw["moe_layer_freq"]), "--moe-layer-freq")
    _hybrid_and_linear_attention(raw, m, notes)
    if "ffn_hidden_size" not in m and "hidden_size" in m and m.get("activation_func") == "swiglu":
        m["ffn_hidden_size"] = int((4 * _checked(m, "hidden_size") * 2 / 3) / 64) * 64
    if m.get("multi_latent_attention"):
        for k, v in _MEGATRON_MLA_DEFAULTS.items():
            m.setdefault(k, v)
    if m.get("num_experts"):
        m["moe_token_dispatcher_type"] = _one("--moe-token-dispatcher-type", raw["moe_token_dispatcher_type"]) \
            if "moe_token_dispatcher_type" in raw else "allgather"
        if "moe_enable_deepep" in raw:   # deprecated: TransformerConfig turns it into flex + deepep
            m["moe_token_dispatcher_type"], m["moe_flex_dispatcher_backend"] = "flex", "deepep"
            notes.append("--moe-enable-deepep: deprecated, the flex dispatcher with DeepEP")
        if m["moe_token_dispatcher_type"] != "flex":
            for k in ("moe_flex_dispatcher_backend", "moe_flex_dispatcher_num_sms"):
                if k in m:
                    del m[k]
                    notes.append(f"--{k.replace('_', '-')}: only with --moe-token-dispatcher-type flex")
        elif "moe_flex_dispatcher_num_sms" not in m:
            for dest in ("moe_deepep_num_sms", "moe_hybridep_num_sms"):   # deprecated aliases (TransformerConfig)
                if dest in raw:
                    m["moe_flex_dispatcher_num_sms"] = _int("--" + dest.replace("_", "-"), raw[dest])
        _load_balancing(raw, m, notes)
    else:
        for k in ("moe_router_dtype", "moe_flex_dispatcher_backend", "moe_flex_dispatcher_num_sms",
                  "moe_apply_probs_on_input", *_ROUTER_FIELDS):
            if k in m:
                del m[k]
                notes.append(f"--{k.replace('_', '-')}: only for MoE models")
    tokenizer = raw.get("tokenizer_type")
    if "padded_vocab_size" in raw:
        if "vocab_size" in m:
            notes.append("--vocab-size: --padded-vocab-size takes precedence (argument_utils.py)")
        m["vocab_size"] = _int("--padded-vocab-size", raw["padded_vocab_size"])
        m["make_vocab_size_divisible_by"] = 1
    if tokenizer is not None:
        # At the catalogue's revision the NullTokenizer keeps --vocab-size as given (its end-of-document id is
        # vocab_size - 1, megatron/core/tokenizers/text/libraries/null_tokenizer.py); Megatron-LM before
        # c9dfe34798 appended one more token.
        no_effect.append((" ".join(["--tokenizer-type", *tokenizer]), "the vocabulary size comes from --vocab-size"))
    missing = [f for f, k in (("--num-layers", "num_layers"), ("--hidden-size", "hidden_size"),
                              ("--num-attention-heads", "num_attention_heads")) if k not in m]
    if missing:
        raise ConfigError([Problem(f, None, f"{f} is required to describe the model") for f in missing])
    if "vocab_size" not in m:
        raise ConfigError(Problem("--vocab-size", None, "is required: the vocabulary size cannot be read from a "
                                  "tokenizer here; pass --vocab-size N (the tokenizer's vocabulary size)"))

    # Parallelism.
    if "cp_comm_type" in raw:
        kinds = {_CP_TYPES.get(k, k) for k in raw["cp_comm_type"]}
        if len(kinds) != 1:
            raise RefusedFlagsError([(" ".join(["--cp-comm-type", *raw["cp_comm_type"]]), "a different context-"
                                      "parallel communication type per layer is not modelled")])
        par["cp_comm_type"] = kinds.pop()
    if "num_layers_per_virtual_pipeline_stage" in raw:
        flag = "--num-layers-per-virtual-pipeline-stage"
        per = _int(flag, raw["num_layers_per_virtual_pipeline_stage"])
        if "virtual_pipeline_model_parallel_size" not in par:
            p = par.get("pipeline_model_parallel_size", 1)
            if "num_layers_in_first_pipeline_stage" in par or "num_layers_in_last_pipeline_stage" in par:
                raise ConfigError(Problem(flag, per, "with an uneven pipeline split use "
                                          "--num-virtual-stages-per-pipeline-rank (as Megatron-LM requires)"))
            L = m.get("num_layers")
            if L is not None:   # arguments.py: the embedding / loss slots count as layers
                L += bool(par.get("account_for_embedding_in_pipeline_split")) + \
                    bool(par.get("account_for_loss_in_pipeline_split"))
            if per < 1 or p < 1 or L is None or L % p or (L // p) % per:
                raise ConfigError(Problem(flag, per, f"num_layers ({L}) / pipeline size ({p}) must be a positive "
                                          f"multiple of {per} (a positive integer)"))
            par["virtual_pipeline_model_parallel_size"] = (L // p) // per
    if "pipeline_model_parallel_layout" in par and ("virtual_pipeline_model_parallel_size" in par
                                                    or "num_layers_per_virtual_pipeline_stage" in raw):
        raise ConfigError(Problem("--pipeline-model-parallel-layout", par["pipeline_model_parallel_layout"],
                                  "Megatron-LM accepts no --num-virtual-stages-per-pipeline-rank or "
                                  "--num-layers-per-virtual-pipeline-stage with a layout (it sets the virtual "
                                  "stages itself)"))
    if par.get("virtual_pipeline_model_parallel_size") == 1:
        del par["virtual_pipeline_model_parallel_size"]

    # FSDP, offloading, CUDA graphs, optimizer.
    if "torch_fsdp2_reshard_after_forward" in raw:
        par["torch_fsdp2_reshard_after_forward"] = False
    if "megatron_fsdp_max_pool_double_buffer" in raw:
        par["fsdp_double_buffer"] = True   # Megatron-LM: the max-pool allocator is a double buffer
    if par.get("use_megatron_fsdp"):
        if not tr.get("use_distributed_optimizer"):
            notes.append("--use-megatron-fsdp: Megatron-LM turns on the distributed optimizer (Megatron-FSDP v1)")
        tr["use_distributed_optimizer"] = True
        if par.get("nccl_ub"):
            par["fsdp_double_buffer"] = True
        if pr.pop("reuse_grad_buf_for_mxfp8_param_ag", None):   # arguments.py turns it off for Megatron-FSDP
            notes.append("--reuse-grad-buf-for-mxfp8-param-ag: Megatron-LM turns it off with --use-megatron-fsdp")
    else:
        for k in ("data_parallel_sharding_strategy", "outer_dp_sharding_strategy", "fsdp_double_buffer",
                  "suggested_communication_unit_size"):
            if k in par:
                del par[k]
                notes.append(f"--{k.replace('_', '-')}: only with --use-megatron-fsdp")
        for k in ("megatron_fsdp_main_params_dtype", "megatron_fsdp_main_grads_dtype", "megatron_fsdp_grad_comm_dtype"):
            if k in pr:
                del pr[k]
                notes.append(f"--{k.replace('_', '-')}: only with --use-megatron-fsdp")
    if not par.get("use_torch_fsdp2") and "torch_fsdp2_reshard_after_forward" in par:
        del par["torch_fsdp2_reshard_after_forward"]
        notes.append("--torch-fsdp2-no-reshard-after-forward: only with --use-torch-fsdp2")
    patterns = raw.get("ddp_param_name_patterns_for_fp32_local_accumulation")
    if patterns:
        if set(patterns) != {"all"}:
            raise RefusedFlagsError([(" ".join(["--ddp-param-name-patterns-for-fp32-local-accumulation", *patterns]),
                                      REFUSED_VALUES["ddp_param_name_patterns_for_fp32_local_accumulation"][1])])
        par["fp32_local_grad_accumulation"] = True
    _tp_comm_overlap_cfg(raw, par, notes, read_file)
    _te_precision_config_file(raw, pr, notes, read_file)
    _heterogeneous_config(raw, m, notes, read_file)
    if "optimizer" in raw:
        opt = _one("--optimizer", raw["optimizer"])
        if opt == "dist_muon":   # arguments.py: muon with the layer-wise distributed optimizer
            opt = "muon"
            tr["use_distributed_optimizer"] = True
            notes.append("--optimizer dist_muon: deprecated, Muon with the layer-wise distributed optimizer")
        tr["optimizer"] = opt
    if "use_layer_wise_param_layout" in raw:   # --no-use-layer-wise-param-layout (store_false)
        if tr.get("optimizer") == "muon" and tr.get("use_distributed_optimizer"):
            tr["use_layer_wise_param_layout"] = False
        else:
            notes.append("--no-use-layer-wise-param-layout: only with Muon and the distributed optimizer")
    if "muon_split_qkv" in raw:   # --muon-no-split-qkv (store_false)
        tr["muon_split_qkv"] = False
    if tr.get("optimizer", "adam") != "sgd" and "sgd_momentum" in tr:
        del tr["sgd_momentum"]
        notes.append("--sgd-momentum: only with --optimizer sgd")
    if not tr.get("optimizer_cpu_offload") and "optimizer_offload_fraction" in tr:
        del tr["optimizer_offload_fraction"]
        notes.append("--optimizer-offload-fraction: only with --optimizer-cpu-offload")
    if tr.get("cpu_offloading_num_layers", 0) > 0:
        tr["cpu_offloading"] = True      # arguments.py
    if "external_cuda_graph" in raw:   # deprecated (--enable-cuda-graph, for the local graphs, is refused)
        if tr.get("cuda_graph_impl", "none") != "none":
            raise ConfigError(Problem("--external-cuda-graph", None, "Megatron-LM refuses it together with "
                                      "--cuda-graph-impl"))
        tr["cuda_graph_impl"] = "transformer_engine"
        notes.append("--external-cuda-graph: deprecated, --cuda-graph-impl transformer_engine")
    scopes = raw.get("cuda_graph_modules") or raw.get("cuda_graph_scope_deprecated")
    if "cuda_graph_modules" in raw and "cuda_graph_scope_deprecated" in raw:
        raise ConfigError(Problem("--cuda-graph-scope", None, "--cuda-graph-scope and --cuda-graph-modules cannot be "
                                  "used together"))
    if scopes:
        mods = []
        for v in scopes:
            if v == "full_iteration" and tr.get("cuda_graph_impl", "none") != "none":
                tr["cuda_graph_impl"] = "full_iteration"   # the deprecated scope's migration
                notes.append("--cuda-graph-modules full_iteration: deprecated, --cuda-graph-impl full_iteration")
            elif v in ("full", "full_iteration", "full_iteration_inference"):
                notes.append(f"--cuda-graph-modules {v}: deprecated; " + ("the whole layer" if v == "full" else
                                                                           "no effect on training"))
            elif v not in mods:
                mods.append(v)
        if mods:
            tr["cuda_graph_modules"] = mods
    if tr.get("cuda_graph_impl") == "local":   # after the deprecated full_iteration scope's migration
        raise RefusedFlagsError([("--cuda-graph-impl local", "Megatron-Core's local CUDA graphs (CudaGraphManager) "
                                  "are not modelled (transformer_engine and full_iteration are)")])
    if tr.get("cuda_graph_impl", "none") in ("none", "full_iteration") and "cuda_graph_modules" in tr:
        del tr["cuda_graph_modules"]
        notes.append("--cuda-graph-modules: only with --cuda-graph-impl transformer_engine")
    if not tr.get("defer_embedding_wgrad_compute") and "wgrad_deferral_limit" in tr:
        del tr["wgrad_deferral_limit"]
        notes.append("--wgrad-deferral-limit: only with --defer-embedding-wgrad-compute")

    # Training.
    tr.setdefault("use_distributed_optimizer", False)
    if "encoder_seq_length" in raw and "seq_length" not in tr:
        tr["seq_length"] = _int("--encoder-seq-length", raw["encoder_seq_length"])
    for name in ("gradient_accumulation_fusion", "masked_softmax_fusion", "create_attention_mask_in_dataloader"):
        if name in raw:   # store_false flags (--no-...)
            tr[name] = False
    if "use_mamba_mem_eff_path" in raw:     # --disable-mamba-mem-eff-path (store_false)
        m["use_mamba_mem_eff_path"] = False
    if "use_flash_attn" in raw:
        tr.setdefault("attention_backend", "flash")
    if "sft" in raw:
        _sft(tr, notes)
    if "logits_load_dir" in raw:
        # distill29: pretrain_gpt.py loss_func runs the cached-logits KL loss (estimator/memory/loss.py); the files'
        # top-K and dtype are the teacher run's flags, not the student's
        tr["distillation_cached_logits"] = True
        notes.append("--logits-load-dir: cached-logits distillation; the cached files' top-K is not in the flags: "
                     "give it as training.distillation_top_k (--distillation-top-k, the teacher run's "
                     "--logits-save-top-k) and their dtype as training.distillation_logprobs_dtype if not fp16")
    if "recompute_activations" in raw:
        tr.setdefault("recompute_granularity", "selective")
    if "moe_layer_recompute" in raw:
        # TransformerConfig.__post_init__: selective recompute, "moe" added to the modules (default [core_attn]).
        if tr.get("recompute_granularity") == "full":
            raise ConfigError(Problem("--moe-layer-recompute", None, "Megatron-Core refuses it with "
                                      "--recompute-granularity full"))
        tr["recompute_granularity"] = "selective"
        mods = list(["core_attn"] if tr.get("recompute_modules") is None else tr["recompute_modules"])
        tr["recompute_modules"] = mods + (["moe"] if "moe" not in mods else [])
    if tr.get("sequence_parallel") and par.get("tensor_model_parallel_size", 1) == 1:
        del tr["sequence_parallel"]
        notes.append("--sequence-parallel: Megatron-LM turns it off when the tensor-parallel size is 1")
    if tr.get("recompute_granularity") is None:
        for name in ("recompute_method", "recompute_num_layers", "recompute_modules"):
            if name in tr:   # TransformerConfig checks them only with a recompute granularity
                del tr[name]
                notes.append(f"--{name.replace('_', '-')}: Megatron-Core ignores it without --recompute-granularity")
    if tr.get("recompute_granularity") == "selective" and tr.get("recompute_modules") is None:
        tr.pop("recompute_modules", None)
    if world_size is not None:
        tr["world_size"] = world_size

    # Precision.
    if "bf16" in raw and "fp16" in raw:
        raise ConfigError(Problem("--bf16", None, "--bf16 and --fp16 exclude each other"))
    pr["params_dtype"] = "bf16" if "bf16" in raw else "fp16" if "fp16" in raw else "fp32"
    if argparse_rules and pr["params_dtype"] != "fp16" and any(f == "--fp16-lm-cross-entropy" for f, _ in no_effect):
        raise ConfigError(Problem("--fp16-lm-cross-entropy", None, "Megatron-LM accepts it only with --fp16 "
                                  "(arguments.py: 'lm cross entropy in fp16 only support in fp16 mode')"))
    if "fp8" in raw:
        fmt = _one("--fp8-format", raw["fp8"])
        if fmt not in ("e4m3", "hybrid"):
            raise ConfigError(Problem("--fp8-format", fmt, "must be e4m3 or hybrid"))
        pr["fp8"] = True
    if "fp4" in raw:
        fmt = _one("--fp4-format", raw["fp4"])
        if fmt != "e2m1":
            raise ConfigError(Problem("--fp4-format", fmt, "must be e2m1 (Megatron-Core's only FP4 format)"))
        pr["fp4"] = True
    if "fp8_wgrad" in raw:      # --no-fp8-wgrad (store_false)
        # Megatron-LM @ d98e8a64 : megatron/core/fp8_utils.py get_fp8_recipe reads fp8_wgrad only to build the
        # delayed recipe, as DelayedScaling's override_linear_precision, which TransformerEngine 2.1 removed
        # (TransformerEngine @ d0067d0 : transformer_engine/common/recipe/__init__.py has no such field).
        if pr.get("fp8") and (pr.get("fp8_recipe") or "delayed") == "delayed":
            raise RefusedFlagsError([("--no-fp8-wgrad", "weight gradients in high precision with the delayed recipe "
                                      "(DelayedScaling's override_linear_precision, which Transformer Engine 2.1 "
                                      "and newer no longer have) are not modelled; with the tensorwise, mxfp8 or "
                                      "blockwise recipe the flag changes nothing")])
        notes.append("--no-fp8-wgrad: Megatron-Core reads it only for the delayed FP8 recipe; no effect here")
    if "grad_reduce_in_bf16" in raw and pr["params_dtype"] == "bf16":
        pr["accumulate_allreduce_grads_in_fp32"] = False
    elif "grad_reduce_in_bf16" in raw:
        notes.append("--grad-reduce-in-bf16: Megatron-LM reads it only with --bf16")
    if not pr.get("fp4") and "fp4_recipe" in pr:
        del pr["fp4_recipe"]
        notes.append("--fp4-recipe: Megatron-Core reads it only with --fp4-format")
    if not (pr.get("fp8") or pr.get("fp4")):
        for k in ("first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
            if k in pr:
                del pr[k]
                notes.append(f"--{k.replace('_', '-')}: Megatron-Core reads it only in an FP8 run or an FP4 run")
    elif not pr.get("first_last_layers_bf16"):
        for k in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
            if k in pr:
                del pr[k]
                notes.append(f"--{k.replace('_', '-')}: only with --first-last-layers-bf16")
    if pr["params_dtype"] == "bf16" and pr.get("accumulate_allreduce_grads_in_fp32") and \
            pr.get("main_grads_dtype", "fp32") != "fp32":
        raise ConfigError(Problem("--main-grads-dtype", pr["main_grads_dtype"], "Megatron-LM allows only fp32 with "
                                  "--accumulate-allreduce-grads-in-fp32 (arguments.py)"))
    _average_in_collective_rule(no_effect)
    _gtp_flag_rules(par, no_effect, argparse_rules)
    if argparse_rules and tr.get("optimizer_cpu_offload") and not pr.get("use_precision_aware_optimizer"):
        # Megatron-Core accepts it (Megatron-Bridge recipes run it); Megatron-LM's arguments.py does not.
        raise ConfigError(Problem("--optimizer-cpu-offload", None, "Megatron-LM refuses it without "
                                  "--use-precision-aware-optimizer (arguments.py); Megatron-Core itself accepts it "
                                  "(give the configuration as YAML to estimate that path)"))
    if "PYTORCH_CUDA_ALLOC_CONF" in env:
        # the launch line's environment (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun ...``)
        sec["training"]["pytorch_cuda_alloc_conf"] = env["PYTORCH_CUDA_ALLOC_CONF"]
        notes.append(f"PYTORCH_CUDA_ALLOC_CONF={env['PYTORCH_CUDA_ALLOC_CONF']}: read from the launch line's "
                     "environment (the caching allocator's settings)")
    if "CUBLAS_WORKSPACE_CONFIG" in env:
        # PyTorch sizes its cuBLAS workspaces from it (estimator/memory/workspaces.py)
        sec["training"]["cublas_workspace_config"] = env["CUBLAS_WORKSPACE_CONFIG"]
        notes.append(f"CUBLAS_WORKSPACE_CONFIG={env['CUBLAS_WORKSPACE_CONFIG']}: read from the launch line's "
                     "environment (the size of PyTorch's cuBLAS workspaces)")
    return MegatronImport({k: v for k, v in sec.items() if v}, tuple(no_effect), tuple(notes))


def _sft(tr: dict, notes: list) -> None:
    """--sft: Megatron-LM's packed SFT, read as the sequence length and micro-batch it already gives (flagsB28).

    Megatron-LM @ d98e8a64 : megatron/training/datasets/sft_dataset.py ``SFTDataset.__getitem__`` packs whole
    conversations into one sample of exactly ``--seq-length`` tokens (padding the last, each conversation padded to
    a multiple of 2 x CP), with ``cu_seqlens``; pretrain_gpt.py ``get_batch`` and megatron/core/utils.py
    ``flatten_batch_for_packed_sequences`` then run a micro-batch of b such packs as one THD stream of b x s tokens.
    Megatron-Core so receives what Bridge's offline-packed SFT gives it (one pack of ``packed_sequence_size`` tokens
    a micro-batch, :mod:`estimator.formats.bridge.config`): per-token activations as for b sequences of s tokens,
    and attention with ``cu_seqlens`` keeps no s x s matrix. What differs: Bridge packs up to the size and requires
    b = 1; Megatron-LM pads every pack to s and accepts b > 1. Unfused attention is refused: Megatron-Core's own
    (local) attention asserts ``packed_seq_params is None`` (transformer/dot_product_attention.py), and Transformer
    Engine's unfused kernel pads every conversation to the longest one, a score matrix that depends on the data.
    """
    backend, impl = tr.get("attention_backend", "auto"), tr.get("transformer_impl", "transformer_engine")
    if impl == "local" or backend in ("unfused", "local"):
        what = "--transformer-impl local" if impl == "local" else f"--attention-backend {backend}"
        raise ConfigError(Problem("--sft", None, f"packed sequences (THD with cu_seqlens) with {what} are not "
                                  "modelled: Megatron-Core's own attention refuses packed sequences and Transformer "
                                  "Engine's unfused attention pads each conversation to the longest; use "
                                  "--attention-backend flash, fused or auto"))
    notes.append("--sft: packed SFT, every micro-batch sample one pack of --seq-length tokens (THD, cu_seqlens), "
                 "counted as micro-batch x sequence-length tokens, as Bridge's packed_sequence_size")


def _heterogeneous_config(raw: dict, m: dict, notes: list, read_file) -> None:
    """``--heterogeneous-layers-config-path PATH``: Megatron-LM @ d98e8a64 : megatron/training/arguments.py
    ``validate_model_config_args_from_heterogeneous_config`` reads the file only when
    ``--heterogeneous-layers-config-encoded-json`` is not given (the encoded text wins); its text becomes
    ``model.heterogeneous_layers_config`` (read by :func:`estimator.config.rules.hetero.parse_blocks`)."""
    if "heterogeneous_layers_config_path" not in raw:
        return
    flag = "--heterogeneous-layers-config-path"
    path = _one(flag, raw["heterogeneous_layers_config_path"])
    if "heterogeneous_layers_config_encoded_json" in raw:
        notes.append(f"{flag} {path}: Megatron-LM reads it only without --heterogeneous-layers-config-encoded-json")
        return
    text = read_file(path) if read_file is not None else None
    if text is None:
        raise RefusedFlagsError([(f"{flag} {path}", "the file is not available here, and its block_configs decide "
                                  "every layer's shape: give its JSON as model.heterogeneous_layers_config (or run "
                                  "the CLI where the file is)")])
    m["heterogeneous_layers_config"] = text


def _tp_comm_overlap_cfg(raw: dict, par: dict, notes: list, read_file) -> None:
    """``--tp-comm-overlap-cfg PATH``: Megatron-LM reads the YAML file only with ``--tp-comm-overlap``
    (``megatron/training/initialize.py`` ``_initialize_tp_communicators``); its text becomes
    ``parallelism.tp_comm_overlap_cfg``."""
    if "tp_comm_overlap_cfg" not in raw:
        return
    flag = "--tp-comm-overlap-cfg"
    path = _one(flag, raw["tp_comm_overlap_cfg"])
    if not par.get("tp_comm_overlap"):
        notes.append(f"{flag} {path}: Megatron-LM reads it only with --tp-comm-overlap")
        return
    text = read_file(path) if read_file is not None else None
    if text is None:
        raise RefusedFlagsError([(f"{flag} {path}", "the file is not available here, and its userbuffer methods "
                                  "change the buffers: give its YAML as parallelism.tp_comm_overlap_cfg (or run the "
                                  "CLI where the file is)")])
    par["tp_comm_overlap_cfg"] = text


def _te_precision_config_file(raw: dict, pr: dict, notes: list, read_file) -> None:
    """``--te-precision-config-file PATH``: Megatron-LM loads the YAML file as Megatron-Core's quant_recipe
    (Megatron-LM @ d98e8a64 : megatron/training/argument_utils.py, ``load_quantization_recipe``); its rules become
    ``precision.quant_recipe`` (estimator/config/quant_recipe.py), what it cannot model is refused by name."""
    if "te_precision_config_file" not in raw:
        return
    flag = "--te-precision-config-file"
    path = _one(flag, raw["te_precision_config_file"])
    text = read_file(path) if read_file is not None else None
    if text is None:
        raise RefusedFlagsError([(f"{flag} {path}", "the file is not available here, and its per-module precisions "
                                  "change the weights' copies and saved inputs: give its rules as "
                                  "precision.quant_recipe (GLOB=PRECISION, first match wins), or run the CLI where "
                                  "the file is")])
    try:
        recipe = load(text)
    except YamlError as exc:
        raise ConfigError(Problem("te_precision_config_file", path, f"not YAML this reader understands: {exc}")) \
            from None
    rules, why, said = rules_from_recipe(recipe)
    if why:
        raise RefusedFlagsError([(f"{flag} {path}", "a per-module quantisation recipe the estimate does not model: "
                                  + "; ".join(why))])
    pr["quant_recipe"] = rules
    notes.extend(f"{flag} {path}: {n}" for n in said)


def _hybrid_and_linear_attention(raw: dict, m: dict, notes: list) -> None:
    """--hybrid-layer-pattern (or its deprecated alias --hybrid-override-pattern, with the legacy
    --mtp-hybrid-override-pattern folded in as arguments.py does), --experimental-attention-variant and
    --linear-attention-freq."""
    if "hybrid_layer_pattern" in raw and "hybrid_override_pattern" in raw:
        raise ConfigError(Problem("--hybrid-override-pattern", None, "--hybrid-override-pattern and "
                                  "--hybrid-layer-pattern cannot both be given (Megatron-LM)"))
    key = "hybrid_layer_pattern" if "hybrid_layer_pattern" in raw else "hybrid_override_pattern"
    if key in raw:
        flag = "--" + key.replace("_", "-")
        pattern = _one(flag, raw[key])
        legacy = raw.get("mtp_hybrid_override_pattern")
        mtp = m.get("mtp_num_layers")
        if legacy is not None and mtp and "/" not in pattern:
            pattern += "/" + "/".join([_one("--mtp-hybrid-override-pattern", legacy)] * mtp)
            notes.append("--mtp-hybrid-override-pattern: folded into the pattern as "
                         f"{mtp} MTP part(s), as Megatron-LM does")
        m["hybrid_layer_pattern"] = pattern
        from ..config.hybrid_pattern import parse, pattern_problems
        if not pattern_problems(pattern):
            p = parse(pattern)
            if m.get("num_layers") not in (None, len(p.layers)):
                notes.append(f"--num-layers {m['num_layers']}: Megatron-LM takes the layer count from the pattern "
                             f"({len(p.layers)})")
            m["num_layers"] = len(p.layers)
            if mtp is not None and mtp != p.mtp_depths:
                notes.append(f"--mtp-num-layers {mtp}: Megatron-LM takes the MTP layers from the pattern "
                             f"({p.mtp_depths})")
            m.pop("mtp_num_layers", None)
    elif "mtp_hybrid_override_pattern" in raw:
        notes.append("--mtp-hybrid-override-pattern: Megatron-LM ignores it without a hybrid layer pattern")
    if "experimental_attention_variant" in raw:
        m["experimental_attention_variant"] = _one("--experimental-attention-variant",
                                                   raw["experimental_attention_variant"])
    if "linear_attention_freq" in raw:
        m["linear_attention_freq"] = eval_pattern(_one("--linear-attention-freq", raw["linear_attention_freq"]),
                                                   "--linear-attention-freq")


def grouped_no_effect(no_effect) -> list[tuple[list[str], str]]:
    """(flags, reason) for each reason of a :attr:`MegatronImport.no_effect` list, in order of appearance."""
    groups: dict[str, list[str]] = {}
    for flag, why in no_effect:
        groups.setdefault(why, []).append(flag)
    return [(flags, why) for why, flags in groups.items()]


def parse_megatron_args(args, *, world_size: int | None = None, read_file=None) -> tuple[dict, list[str]]:
    """(configuration dict, flags without effect on memory and notes) for a ``pretrain_gpt.py`` launch.

    See :func:`read_megatron_args`, which also gives the reason of each flag without effect.
    """
    imp = read_megatron_args(args, world_size=world_size, read_file=read_file)
    return imp.config, [flag for flag, _ in imp.no_effect] + list(imp.notes)


def _average_in_collective_rule(no_effect: list) -> None:
    """Two flags without memory effect that Megatron-Core's DDP refuses together: Megatron-LM @ d98e8a64 :
    megatron/core/distributed/distributed_data_parallel.py asserts ``average_in_collective`` off with
    ``calculate_per_token_loss`` ("Cannot average in collective when calculating per-token loss!"), whatever the
    frontend (Megatron-Bridge's gpt_oss recipe sets it off for that reason)."""
    given = {f.split()[0] for f, _ in no_effect}
    if {"--ddp-average-in-collective", "--calculate-per-token-loss"} <= given:
        raise ConfigError(Problem("--ddp-average-in-collective", True, "Megatron-Core refuses it with "
                                  "calculate_per_token_loss (--calculate-per-token-loss): the per-token loss is "
                                  "divided by the token count, not averaged over the data-parallel ranks "
                                  "(distributed_data_parallel.py)"))


def _gtp_flag_rules(par: dict, no_effect: list, argparse_rules: bool) -> None:
    """gtp29: flags without memory effect that GTP forbids (estimator/memory/features/gtp.py). Megatron-Core's DDP
    asserts --ddp-average-in-collective off with GTP (distributed_data_parallel.py, is_gtp_remat_active; arguments.py
    too); arguments.py asserts the NCCL-registered GTP pools without --disable-symmetric-registration."""
    tp = par.get("tensor_model_parallel_size") or 1
    etp = par.get("expert_tensor_parallel_size") or tp
    if (par.get("tensor_parallel_num_weight_shards") or tp) <= tp and \
            (par.get("expert_tensor_parallel_num_weight_shards") or etp) <= etp:
        return
    given = {f.split()[0] for f, _ in no_effect}
    if "--ddp-average-in-collective" in given:
        raise ConfigError(Problem("--ddp-average-in-collective", True, "Megatron-Core refuses it with GTP "
                                  "(tensor_parallel_num_weight_shards / expert_tensor_parallel_num_weight_shards above "
                                  "TP / ETP: --tensor-parallel-num-weight-shards, or Megatron-Bridge's "
                                  "gtp_weight_remat_size > 1): the average would miss the 1/GTP_remat gradient "
                                  "scaling (distributed_data_parallel.py)"))
    if argparse_rules and "--disable-symmetric-registration" in given and \
            (par.get("gtp_remat_nccl_ub") or par.get("gtp_expert_remat_nccl_ub")):
        raise ConfigError(Problem("--disable-symmetric-registration", None, "Megatron-LM refuses it with "
                                  "--gtp-remat-nccl-ub / --gtp-expert-remat-nccl-ub, which need symmetric "
                                  "registration (arguments.py)"))
