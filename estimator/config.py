"""Loading and validating configurations.

:func:`load_config` accepts a YAML or JSON file, YAML/JSON text, a plain dict or a
:class:`~estimator.schema.Config`, checks every field against the schema and every cross-field rule
Megatron-Core enforces, and raises one :class:`~estimator.errors.ConfigError` listing every problem
(field, value, rule). User input is never mutated: derived values are computed separately by
:mod:`estimator.resolve`, and ``Config.to_dict()`` returns exactly what was written.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
from pathlib import Path

from . import yamlio
from .errors import ConfigError, Problem, UnsupportedError, clip, show
from .features.fsdp import grad_comm_dtype, grad_dtype
from .features import userbuffers
from .features.rules import feature_problems
from .schema import MAX_LAYERS, SECTIONS, Config, FieldSpec, field_specs, plain_copy, section_specs

__all__ = ["config_from_dict", "load_config", "not_modelled", "validate"]

#: Unknown keys reported one by one; beyond them one problem says how many more there are.
MAX_UNKNOWN_KEYS = 20


def _spec_index() -> dict[str, dict[str, FieldSpec]]:
    return {sec: {s.name: s for s in section_specs(sec)} for sec in SECTIONS}


_INDEX = _spec_index()
_ALL_NAMES = {s.name: s.section for s in field_specs()}


def too_deep(data, limit: int = yamlio.MAX_DEPTH) -> bool:
    """True when plain data (dicts and lists) nests deeper than ``limit`` levels; iterative, so that a
    100,000-deep structure built in Python is refused before anything recurses into it."""
    stack = [(data, 0)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, dict):
            children = obj.values()
        elif isinstance(obj, (list, tuple)):
            children = obj
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return False


def read_text_file(source: str | os.PathLike, field: str = "config") -> str:
    """The text of a UTF-8 file (a byte-order mark is dropped); a :class:`ConfigError` naming ``field``
    for a missing or unreadable file, a path that cannot name a file, or bytes that are not UTF-8."""
    name = clip(os.fspath(source))
    try:
        return Path(source).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(Problem(field, name, f"file not found: {name}")) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(Problem(field, name, f"{name} is not UTF-8 text (byte {exc.start})")) from None
    except ValueError:          # "embedded null byte"
        raise ConfigError(Problem(field, name, f"not a valid file path: {name}")) from None
    except OSError as exc:
        raise ConfigError(Problem(field, name, f"cannot read {name}: {exc.strerror}")) from None


def path_kind(source: str | os.PathLike) -> str | None:
    """"file", "dir" or None (nothing there, or a string that cannot name a file: too long, a null byte)."""
    try:
        path = Path(source)
        return "file" if path.is_file() else "dir" if path.is_dir() else None
    except (OSError, ValueError):
        return None


def _read_text(source: str | os.PathLike) -> tuple[str, str]:
    return read_text_file(source), Path(source).suffix.lower()


def parse_text(text: str, suffix: str = "") -> dict:
    """Parse YAML or JSON text (JSON is tried first when it looks like JSON). A leading byte-order mark is
    ignored; nesting deeper than :data:`estimator.yamlio.MAX_DEPTH` levels is refused."""
    if not isinstance(text, str):
        raise ConfigError(Problem("config", show(text), "expected YAML or JSON text"))
    text = text.removeprefix("\ufeff")
    stripped = text.lstrip()
    if suffix == ".json" or stripped.startswith("{"):
        try:
            return yamlio.load_json(text)
        except yamlio.YamlError as exc:
            if suffix == ".json":
                raise ConfigError(Problem("config", None, f"invalid JSON: {exc}")) from None
            # else it may be YAML flow style ({a: 1}), which the YAML reader takes, with the same limits
    try:
        return yamlio.load(text)
    except yamlio.YamlError as exc:
        raise ConfigError(Problem("config", None, f"invalid YAML: {exc}")) from None


def load_config(source) -> Config:
    """Load and validate a configuration.

    ``source`` is a :class:`Config` (returned as is), a dict, a path to a ``.yaml``/``.yml``/``.json``
    file, or YAML/JSON text. Raises :class:`ConfigError` listing every problem.
    """
    if isinstance(source, Config):
        return source
    if isinstance(source, dict):
        return config_from_dict(source)
    if isinstance(source, (str, os.PathLike)):
        s = os.fspath(source)
        if not isinstance(s, str):
            raise ConfigError(Problem("config", show(s), "expected a file path, YAML/JSON text, a dict or a Config"))
        if "\n" in s or s.lstrip("\ufeff \t\r").startswith("{"):
            data = parse_text(s)
        else:
            data = parse_text(*_read_text(s))
        return config_from_dict(data)
    raise ConfigError(Problem("config", type(source).__name__,
                              "expected a file path, YAML/JSON text, a dict or a Config"))


#: What 0 and 1 mean in each layer-pattern list field.
_PATTERN_WORDS = {"moe_layer_freq": "0 (dense) and 1 (MoE)",
                  "linear_attention_freq": "0 (full attention) and 1 (linear attention)"}


def _type_name(spec: FieldSpec) -> str:
    return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
            "int_or_list": "an integer or a list of 0/1 integers", "str_list": "a list of names"}[spec.type]


def _limit(x) -> str:
    """A bound as messages print it: 10,000,000 rather than 1e+07."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _coerce(spec: FieldSpec, value, problems: list[Problem]):
    """Check one value against its spec (type, then bounds, before any arithmetic); return the canonical
    value (or None after a problem)."""
    path = spec.path
    if value is None:
        if spec.required:
            problems.append(Problem(path, None, "is required"))
        elif not spec.nullable:
            problems.append(Problem(path, None, f"must not be null; expected {_type_name(spec)}"))
        return None
    t = spec.type
    if t == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                problems.append(Problem(path, value, f"must be an integer, got {show(value)}"))
                return None
    elif t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(Problem(path, value, f"must be a number, got {show(value)}"))
            return None
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(Problem(path, value, f"must be a finite number, got {show(value)}"))
            return None
        if isinstance(value, int) and spec.max is not None and value > spec.max:
            problems.append(Problem(path, value, f"must be <= {_limit(spec.max)}, got {show(value)}"))
            return None
        value = float(value)
    elif t == "bool":
        if not isinstance(value, bool):
            problems.append(Problem(path, value, f"must be true or false, got {show(value)}"))
            return None
    elif t == "str":
        if not isinstance(value, str):
            want = f"one of {', '.join(spec.choices)}" if spec.choices else "a string"
            problems.append(Problem(path, value, f"must be {want}, got {show(value)}"))
            return None
        if spec.choices:
            canon = {c.lower(): c for c in spec.choices}
            if value.lower() not in canon:
                problems.append(Problem(path, value, f"must be one of {', '.join(spec.choices)}, got {show(value)}"))
                return None
            value = canon[value.lower()]
    elif t == "int_or_list":
        if isinstance(value, bool):
            problems.append(Problem(path, value, f"must be {_type_name(spec)}, got {show(value)}"))
            return None
        if isinstance(value, list):
            if len(value) > MAX_LAYERS:
                problems.append(Problem(path, value, f"a pattern list has one entry per layer (at most "
                                        f"{MAX_LAYERS:,}), got {len(value):,} entries"))
                return None
            if not all(isinstance(x, int) and not isinstance(x, bool) and x in (0, 1) for x in value):
                words = _PATTERN_WORDS.get(spec.name, "0 and 1")
                problems.append(Problem(path, value, f"a list must hold only {words}"))
                return None
            return tuple(value)
        if not isinstance(value, int):
            problems.append(Problem(path, value, f"must be {_type_name(spec)}, got {show(value)}"))
            return None
        if value < 1:
            what = "full attention" if spec.name == "linear_attention_freq" else "MoE"
            problems.append(Problem(path, value, f"must be >= 1 (every k-th layer is {what})"))
            return None
        if value > MAX_LAYERS:
            problems.append(Problem(path, value, f"must be <= {MAX_LAYERS:,} (the largest number of layers), "
                                    f"got {show(value)}"))
            return None
        return value
    elif t == "str_list":
        if isinstance(value, str):
            value = [v.strip() for v in value.replace(",", " ").split() if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(Problem(path, value, "must be a list of names"))
            return None
        bad = [v for v in value if spec.choices and v not in spec.choices]
        if bad:
            problems.append(Problem(path, value, f"unknown name(s) {show(bad)}; allowed: "
                                    f"{', '.join(spec.choices)}"))
            return None
        return tuple(value)
    if spec.min is not None and value < spec.min:
        rule = "must be positive" if spec.min == 1 else f"must be >= {_limit(spec.min)}"
        problems.append(Problem(path, value, f"{rule}, got {show(value)}"))
        return None
    if spec.max is not None and value > spec.max:
        problems.append(Problem(path, value, f"must be <= {_limit(spec.max)}, got {show(value)}"))
        return None
    return value


def _unknown_keys(section: str | None, keys: list, problems: list[Problem]) -> None:
    """Report the unknown keys of ``section`` (None: the top level), each with the nearest known name; past
    :data:`MAX_UNKNOWN_KEYS` - 1 of them, one more problem gives the number of the others."""
    listed = keys if len(keys) <= MAX_UNKNOWN_KEYS else keys[:MAX_UNKNOWN_KEYS - 1]
    for key in listed:
        _unknown_key(section, key, problems)
    if len(listed) < len(keys):
        where = f" in '{section}'" if section else ""
        problems.append(Problem(section or "config", None, f"{len(keys) - len(listed):,} more unknown keys{where}"))


def _unknown_key(section: str | None, key, problems: list[Problem]) -> None:
    plain = isinstance(key, str) and len(key) <= 64      # worth comparing with the known names
    text = key if plain else show(key)
    where = f"{section}.{text}" if section else text
    if section and plain and key in _ALL_NAMES:
        problems.append(Problem(where, key, f"unknown key in '{section}'; '{key}' belongs in the "
                                f"'{_ALL_NAMES[key]}' section"))
        return
    names = list(_INDEX[section]) if section else list(SECTIONS)
    close = difflib.get_close_matches(text, names, n=1, cutoff=0.6) if plain else []
    if not close and section and plain:
        close = difflib.get_close_matches(text, list(_ALL_NAMES), n=1, cutoff=0.6)
        if close:
            close = [f"{_ALL_NAMES[close[0]]}.{close[0]}"]
    hint = f"; did you mean '{close[0]}'?" if close else ""
    kind = "section" if section is None else "key"
    problems.append(Problem(where, key, f"unknown {kind}{hint}"))


def config_from_dict(data) -> Config:
    """Build a validated :class:`Config` from plain data (the four YAML sections)."""
    if not isinstance(data, dict):
        raise ConfigError(Problem("config", type(data).__name__,
                                  "the configuration must be a mapping with sections model, parallelism, "
                                  f"training, precision; got {show(data)}"))
    problems: list[Problem] = []
    values: dict[str, dict] = {}
    _unknown_keys(None, [k for k in data if not isinstance(k, str) or k not in SECTIONS], problems)
    for sec, cls in SECTIONS.items():
        raw = data.get(sec)
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            problems.append(Problem(sec, raw, f"must be a mapping of field: value, got {show(raw)}"))
            raw = {}
        _unknown_keys(sec, [k for k in raw if not isinstance(k, str) or k not in _INDEX[sec]], problems)
        vals = {}
        for name, spec in _INDEX[sec].items():
            if name in raw:
                vals[name] = _coerce(spec, raw[name], problems)
            elif spec.required:
                problems.append(Problem(spec.path, None, "is required"))
                vals[name] = None
            else:
                vals[name] = spec.default
        values[sec] = vals
    if problems:
        raise ConfigError(problems)
    cfg = Config(**{sec: SECTIONS[sec](**values[sec]) for sec in SECTIONS},
                 source=json.loads(json.dumps(data)))
    problems = validate(cfg)
    if problems:
        raise ConfigError(problems)
    _refuse_not_modelled(cfg)
    return cfg


def with_fields(cfg: Config, changes: dict, source: dict | None = None) -> Config:
    """``cfg`` (valid) with the fields ``changes`` names (``section.field`` -> value, as written) set: what
    :func:`config_from_dict` gives for the configuration with those values, the same problems raised, but only the
    new values coerced (the search's and "Make it fit"'s candidates differ from a valid configuration in a few
    fields). ``source`` is what ``to_dict()`` returns (default: ``cfg``'s with the changes)."""
    problems: list[Problem] = []
    by_sec: dict[str, dict] = {}
    for path, value in changes.items():
        sec, _, name = path.partition(".")
        if sec not in SECTIONS:
            _unknown_keys(None, [sec], problems)
        elif name not in _INDEX[sec]:
            _unknown_keys(sec, [name], problems)
        else:
            by_sec.setdefault(sec, {})[name] = _coerce(_INDEX[sec][name], value, problems)
    if problems:
        raise ConfigError(problems)
    if source is None:
        source = plain_copy(cfg.source)
        for path, value in changes.items():
            sec, _, name = path.partition(".")
            source.setdefault(sec, {})[name] = value
    new = dataclasses.replace(cfg, **{sec: dataclasses.replace(getattr(cfg, sec), **vals)
                                      for sec, vals in by_sec.items()}, source=source)
    problems = validate(new)
    if problems:
        raise ConfigError(problems)
    _refuse_not_modelled(new)
    return new


def not_modelled(cfg: Config) -> list[str]:
    """Valid configurations, ones Megatron-LM runs, that the estimator does not model: one sentence each (an
    empty list when it models the configuration). :func:`config_from_dict` raises them as an
    :class:`~estimator.errors.UnsupportedError`, not as invalid input."""
    pr, par = cfg.precision, cfg.parallelism
    out = []
    if (par.use_megatron_fsdp and par.num_distributed_optimizer_instances > 1
            and grad_comm_dtype(pr) != grad_dtype(pr)):
        # param_and_grad_buffer.py _bucket_group_gradient_reduce: the outer (DP-Outer) reduction copies each bucket
        # into an hsdp_comm_gbuf bucket of the communication dtype.
        out.append(f"precision.megatron_fsdp_grad_comm_dtype {pr.megatron_fsdp_grad_comm_dtype} with HSDP "
                   f"(num_distributed_optimizer_instances {par.num_distributed_optimizer_instances}): Megatron-FSDP "
                   f"runs it, but the outer reduction's copies of the gradient buckets in a dtype other than the "
                   f"gradient buffer's ({grad_dtype(pr)}) are not modelled")
    if pr.fp8 and pr.params_dtype == "fp32":
        # Megatron-LM @ d98e8a64 runs --fp8-format without --bf16/--fp16 (no rule in arguments.py; CI case
        # moe/deepseek_proxy_fsdp_ep2_fsdp2). Then the FP8 weights (--fp8-param-gather) are Float8Tensors of
        # nominal dtype fp32: the distributed optimizer takes them for fp32 parameters (distrib_optimizer.py
        # "fp32 params", no master copy), Megatron-FSDP gives them bf16 gradient buffers beside fp32 ones for the
        # other parameters (param_and_grad_buffer.py _resolve_group_grad_dtype), and the layers run in fp32
        # around FP8 GEMMs; none of it is modelled or measured here.
        out.append("precision.fp8 true with precision.params_dtype fp32: Megatron-LM runs FP8 compute over fp32 "
                   "weights (no --bf16), but the estimator does not model it (fp32 activations around FP8 "
                   "GEMMs; with fp8_param_gather, FP8 weights that Megatron-Core's optimizers treat as fp32 "
                   "parameters and Megatron-FSDP gives bf16 gradient buffers); use bf16 weights to estimate the "
                   "usual FP8 recipe")
    if (pr.reuse_grad_buf_for_mxfp8_param_ag and pr.fp8 and pr.fp8_param_gather and pr.fp8_recipe != "mxfp8"
            and not par.use_megatron_fsdp):
        # param_and_grad_buffer.py: FP8 weights other than MXFP8 still get a uint8 parameter buffer, but with the
        # flag they keep Transformer Engine's own storage too (_param_uses_quantized_storage skips the remap).
        out.append(f"precision.reuse_grad_buf_for_mxfp8_param_ag true with fp8_recipe {pr.fp8_recipe or 'delayed'}: "
                   "Megatron-Core then keeps both its uint8 parameter buffer and Transformer Engine's own storage "
                   "of the FP8 weights, which is not modelled (the setting is meant for mxfp8)")
    out.extend(userbuffers.not_modelled(cfg))
    out += _delay_wgrad_not_modelled(cfg)
    return out


def _delay_wgrad_not_modelled(cfg: Config) -> list[str]:
    """The combinations of ``delay_wgrad_compute`` that estimator/features/delayed_wgrad.py does not model."""
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    if not (tr.delay_wgrad_compute and tr.overlap_moe_expert_parallel_comm):
        return []
    what = "training.delay_wgrad_compute with "
    out = []
    if pr.fp8:
        out.append(what + "FP8: the delayed GEMMs keep quantised copies of their inputs and output gradients, "
                   "which are not modelled")
    if par.tp_comm_overlap:
        out.append(what + "tp_comm_overlap: Transformer Engine refuses userbuffers' weight-gradient overlap for a "
                   "delayed GEMM (module/_common.py WeightGradStore, module/linear.py), and the combination is not "
                   "modelled")
    if tr.cuda_graph_impl != "none":
        out.append(what + f"cuda_graph_impl {tr.cuda_graph_impl}: graphed backward_dw is not modelled")
    if m.mtp_num_layers:
        out.append(what + "MTP layers: the MTP layer's delayed eh_proj and its pre-dispatch part are not modelled")
    if m.hybrid_layer_pattern or m.experimental_attention_variant:
        out.append(what + "hybrid or linear-attention layers: only attention / MLA with a dense MLP or MoE is "
                   "modelled")
    freq = m.moe_layer_freq
    all_moe = freq == 1 or (isinstance(freq, list) and all(freq))
    if tr.recompute_granularity == "selective" and "mlp" in (tr.recompute_modules or ()) and not all_moe:
        out.append(what + "recompute of mlp: the recomputed dense MLP's delayed inputs are not modelled")
    if tr.peft is not None:
        out.append(what + "PEFT: delayed GEMMs of frozen weights and adapters are not modelled")
    if tr.cpu_offloading:
        out.append(what + "activation offloading: not modelled")
    return out


def _refuse_not_modelled(cfg: Config) -> None:
    reasons = not_modelled(cfg)
    if reasons:
        raise UnsupportedError("not modelled: " + "; ".join(reasons))


def interleaving_problem(p: int, vpp: int | None, m: int, group: int | None = None) -> str | None:
    """Why the interleaved schedule refuses ``m`` micro-batches per step, or None.

    Megatron-Core's ``forward_backward_pipelining_with_interleaving`` (``pipeline_parallel/schedules.py``)
    runs the micro-batches in groups of N = ``microbatch_group_size_per_vp_stage`` per model chunk (default:
    the pipeline size p, ``ModelParallelConfig.__post_init__``); it raises unless N <= m, and unless the last
    group, m mod N, is empty or holds at least p. With the default N = p, m must be a multiple of p.
    (N >= p itself is checked with the field, :func:`estimator.resolve.layer_split_problems`.)
    """
    if vpp is None or vpp <= 1 or p <= 1:
        return None
    n = group or p
    if n == p and m % p:
        return (f"{m} micro-batches per step; with the interleaved schedule (virtual pipeline stages {vpp}) "
                f"Megatron-Core needs a multiple of pipeline_model_parallel_size ({p}), in groups of {p} per "
                "model chunk")
    if n > m:
        return (f"{m} micro-batches per step; the interleaved schedule (virtual pipeline stages {vpp}) runs them in "
                f"groups of {n} (microbatch_group_size_per_vp_stage) per model chunk and Megatron-Core needs at "
                "least one whole group")
    if 0 < m % n < p:
        return (f"{m} micro-batches per step in groups of {n} (microbatch_group_size_per_vp_stage) leave a last "
                f"group of {m % n}; Megatron-Core needs 0 or at least pipeline_model_parallel_size ({p})")
    return None


def validate(cfg: Config) -> list[Problem]:
    """Every cross-field rule of Megatron-Core, each failure naming field, value and rule."""
    from .resolve import layer_split_problems  # local import: resolve depends on this module's output
    P: list[Problem] = []
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    t, p, ep, cp = (par.tensor_model_parallel_size, par.pipeline_model_parallel_size,
                    par.expert_model_parallel_size, par.context_parallel_size)
    etp = par.expert_tensor_parallel_size or t
    ws = tr.world_size
    a = m.num_attention_heads
    moe = m.num_experts is not None

    def add(field, value, msg):
        P.append(Problem(field, value, msg))

    # Attention shape.
    if m.kv_channels is None and not m.multi_latent_attention and m.hidden_size % a:
        add("model.hidden_size", m.hidden_size, f"hidden_size ({m.hidden_size}) must be divisible by "
            f"num_attention_heads ({a}) unless kv_channels is set")
    if a % t:
        add("model.num_attention_heads", a, f"num_attention_heads ({a}) must be divisible by "
            f"tensor_model_parallel_size ({t})")
    if m.multi_latent_attention:
        pass
    else:
        g = m.num_query_groups or a
        if a % g:
            add("model.num_query_groups", g, f"num_attention_heads ({a}) must be divisible by "
                f"num_query_groups ({g})")
        if g % t:
            add("model.num_query_groups", g, f"num_query_groups ({g}) must be divisible by "
                f"tensor_model_parallel_size ({t})")
        for name in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if getattr(m, name) is not None:
                add(f"model.{name}", getattr(m, name), "applies only with multi_latent_attention: true")
    if m.activation_func in ("swiglu", "geglu") and not m.gated_linear_unit:
        add("model.gated_linear_unit", False, f"activation_func {m.activation_func} is gated; "
            "gated_linear_unit must be true")
    from .resolve import default_ffn_hidden_size
    ffn = default_ffn_hidden_size(m)
    if ffn % t:
        add("model.ffn_hidden_size", ffn, f"ffn_hidden_size ({ffn}) must be divisible by "
            f"tensor_model_parallel_size ({t})")

    # World size products.
    if ws % (t * p * cp):
        add("training.world_size", ws, f"world_size ({ws}) must be divisible by tensor ({t}) x pipeline ({p}) x "
            f"context ({cp}) parallel sizes = {t * p * cp}")
    if moe and ws % (etp * ep * p):
        add("training.world_size", ws, f"world_size ({ws}) must be divisible by expert tensor ({etp}) x expert "
            f"({ep}) x pipeline ({p}) parallel sizes = {etp * ep * p}")

    # MoE.
    if moe:
        E = m.num_experts
        k = m.moe_router_topk or 2
        if E % ep:
            add("parallelism.expert_model_parallel_size", ep, f"num_experts ({E}) must be divisible by "
                f"expert_model_parallel_size ({ep})")
        if k > E:
            add("model.moe_router_topk", k, f"moe_router_topk ({k}) must be <= num_experts ({E})")
        fm = m.moe_ffn_hidden_size or ffn
        if fm % etp:
            add("model.moe_ffn_hidden_size", fm, f"moe_ffn_hidden_size ({fm}) must be divisible by "
                f"expert_tensor_parallel_size ({etp})")
        fs = m.moe_shared_expert_intermediate_size
        if fs and fs % t:
            add("model.moe_shared_expert_intermediate_size", fs, f"({fs}) must be divisible by "
                f"tensor_model_parallel_size ({t})")
        if isinstance(m.moe_layer_freq, tuple) and len(m.moe_layer_freq) != m.num_layers:
            add("model.moe_layer_freq", list(m.moe_layer_freq), f"a pattern list must have num_layers "
                f"({m.num_layers}) entries, got {len(m.moe_layer_freq)}")
        if t > 1 and ep > 1 and not tr.sequence_parallel:
            add("training.sequence_parallel", False, "Megatron-Core requires sequence_parallel when both "
                "tensor and expert parallelism are used")
        if m.moe_pad_expert_input_to_capacity and m.moe_expert_capacity_factor is None:
            add("model.moe_pad_expert_input_to_capacity", True, "needs moe_expert_capacity_factor")
    else:
        for name in ("moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                     "moe_expert_capacity_factor"):
            if getattr(m, name) is not None:
                add(f"model.{name}", getattr(m, name), "applies only to MoE models (set num_experts)")
        if m.moe_layer_freq not in (1, None):
            add("model.moe_layer_freq", m.moe_layer_freq if isinstance(m.moe_layer_freq, int)
                else list(m.moe_layer_freq), "applies only to MoE models (set num_experts)")
        for name in ("moe_shared_expert_gate", "moe_router_enable_expert_bias", "moe_pad_expert_input_to_capacity"):
            if getattr(m, name):
                add(f"model.{name}", True, "applies only to MoE models (set num_experts)")
        if ep > 1:
            add("parallelism.expert_model_parallel_size", ep, "expert parallelism needs an MoE model "
                "(set num_experts)")

    # Hybrid (Mamba) layers, gated delta nets, latent MoE, gated attention (estimator/model_rules.py).
    from .model_rules import model_problems
    P.extend(model_problems(cfg))

    # Sequence.
    s = tr.seq_length or m.max_position_embeddings
    if s is None:
        add("training.seq_length", None, "is required (or set model.max_position_embeddings)")
    else:
        if m.max_position_embeddings is not None and s > m.max_position_embeddings:
            add("training.seq_length", s, f"seq_length ({s}) must be <= max_position_embeddings "
                f"({m.max_position_embeddings})")
        if cp > 1 and s % (2 * cp):
            add("training.seq_length", s, f"seq_length ({s}) must be divisible by 2 x context_parallel_size "
                f"= {2 * cp} (load-balanced context parallelism)")
        if tr.sequence_parallel and (s // cp) % t:
            add("training.seq_length", s, f"seq_length / context_parallel_size ({s // cp}) must be divisible "
                f"by tensor_model_parallel_size ({t}) with sequence parallelism")
    if tr.sequence_parallel and t == 1:
        add("training.sequence_parallel", True, "needs tensor_model_parallel_size > 1")
    if cp > 1 and tr.attention_backend in ("unfused", "local"):
        add("training.attention_backend", tr.attention_backend, "context parallelism needs flash or fused "
            "attention (Transformer Engine)")

    # Batch.
    if tr.global_batch_size is not None and ws % (t * p * cp) == 0:
        dp = ws // (t * p * cp)
        gbs, b = tr.global_batch_size, tr.micro_batch_size
        if gbs % (b * dp):
            add("training.global_batch_size", gbs, f"global_batch_size ({gbs}) must be divisible by "
                f"micro_batch_size ({b}) x data-parallel size ({dp}) = {b * dp}")
        else:
            from .resolve import virtual_stages
            problem = interleaving_problem(p, virtual_stages(par), gbs // (b * dp),
                                           par.microbatch_group_size_per_vp_stage)
            if problem:
                add("training.global_batch_size", gbs, f"global_batch_size ({gbs}) / (micro_batch_size ({b}) x "
                    f"data-parallel size ({dp})) = {problem}")

    # Recompute.
    g = tr.recompute_granularity
    if tr.recompute_method is not None and g != "full":
        add("training.recompute_method", tr.recompute_method, "applies only with recompute_granularity: full")
    if tr.recompute_num_layers is not None and g != "full":
        add("training.recompute_num_layers", tr.recompute_num_layers,
            "applies only with recompute_granularity: full")
    if tr.recompute_modules is not None and g != "selective":
        add("training.recompute_modules", list(tr.recompute_modules),
            "applies only with recompute_granularity: selective")
    if g == "full" and tr.recompute_method is None and tr.recompute_num_layers not in (None,):
        add("training.recompute_method", None, "recompute_num_layers needs recompute_method (uniform or block)")

    # Pipeline layout.
    P.extend(layer_split_problems(cfg))

    # Precision.
    if pr.fp8_recipe is not None and not pr.fp8:
        add("precision.fp8_recipe", pr.fp8_recipe, "applies only with fp8: true")
    if pr.fp8_param_gather and not pr.fp8:
        add("precision.fp8_param_gather", True, "applies only with fp8: true")
    elif pr.fp8_param_gather and not tr.use_distributed_optimizer:
        add("precision.fp8_param_gather", True, "needs training.use_distributed_optimizer: true (Megatron-LM's rule)")
    # MXFP8 weights under the distributed optimizer (Megatron-LM @ d98e8a64 : megatron/core/distributed/
    # param_and_grad_buffer.py, _ParamAndGradBuffer.__init__): the parameter buffer is a view of the gradient
    # buffer; without reuse_grad_buf_for_mxfp8_param_ag the weights are moved into it with Transformer Engine's
    # replace_raw_data, which raises NotImplementedError for MXFP8Tensor (TransformerEngine @ d0067d0d :
    # transformer_engine/pytorch/tensor/utils.py).
    mxfp8_gather = (pr.fp8 and pr.fp8_param_gather and pr.fp8_recipe == "mxfp8" and tr.use_distributed_optimizer
                    and not par.use_megatron_fsdp)
    if pr.reuse_grad_buf_for_mxfp8_param_ag:
        if not pr.fp8_param_gather:
            add("precision.reuse_grad_buf_for_mxfp8_param_ag", True, "needs fp8_param_gather: true (Megatron-Core's "
                "DistributedDataParallelConfig: reuse the gradient buffer only when keeping the weights in MXFP8)")
        elif par.use_megatron_fsdp:
            add("precision.reuse_grad_buf_for_mxfp8_param_ag", True, "applies only without use_megatron_fsdp "
                "(Megatron-LM turns it off for Megatron-FSDP)")
    elif mxfp8_gather:
        add("precision.reuse_grad_buf_for_mxfp8_param_ag", False, "must be true with fp8_recipe mxfp8, "
            "fp8_param_gather and the distributed optimizer: Transformer Engine cannot move MXFP8 weights into "
            "Megatron-Core's parameter buffer (replace_raw_data is not supported for MXFP8Tensor); Megatron-Bridge's "
            "bf16_with_mxfp8_mixed sets it")
    if not pr.use_precision_aware_optimizer:
        for name, default in (("main_grads_dtype", "fp32"), ("main_params_dtype", "fp32"),
                              ("exp_avg_dtype", "fp32"), ("exp_avg_sq_dtype", "fp32")):
            if getattr(pr, name) != default:
                add(f"precision.{name}", getattr(pr, name), "needs use_precision_aware_optimizer: true")
    elif not tr.use_distributed_optimizer:
        add("precision.use_precision_aware_optimizer", True, "needs training.use_distributed_optimizer: true")
    if tr.optimizer_implementation != "te_fused" and tr.transformer_impl == "transformer_engine":
        add("training.optimizer_implementation", tr.optimizer_implementation, "Megatron-Core uses Transformer "
            "Engine's FusedAdam whenever Transformer Engine is installed (transformer_impl: transformer_engine "
            "needs it); apex_fused and torch need transformer_impl: local")
    elif (tr.optimizer_implementation != "te_fused" and pr.use_precision_aware_optimizer
          and not tr.optimizer_cpu_offload):
        # Megatron-LM @ d98e8a64 : megatron/core/optimizer/optimizer_config.py (__post_init__): only Transformer
        # Engine's FusedAdam and HybridDeviceOptimizer (optimizer CPU offload) take the precision-aware optimizer.
        add("training.optimizer_implementation", tr.optimizer_implementation, f"{tr.optimizer_implementation} "
            "does not take the precision-aware optimizer: it needs Transformer Engine's FusedAdam "
            "(optimizer_implementation: te_fused), or the optimizer offloaded (training.optimizer_cpu_offload: "
            "true, HybridDeviceOptimizer, which runs without Transformer Engine)")

    # Deterministic mode refuses these (Megatron-LM @ d98e8a64 : megatron/training/determinism.py
    # ARG_VALUES_REQUIRED_FOR_DETERMINISM).
    if tr.deterministic_mode:
        if tr.cross_entropy_loss_fusion:
            add("training.cross_entropy_loss_fusion", True, "Megatron-LM's --deterministic-mode requires it off")
        if par.tp_comm_overlap:
            add("parallelism.tp_comm_overlap", True, "Megatron-LM's --deterministic-mode requires it off")
    P.extend(feature_problems(cfg))
    return P
