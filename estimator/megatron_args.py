"""Megatron-LM ``pretrain_gpt.py`` arguments, both ways.

:func:`parse_megatron_args` reads the flags of a launch command (a shell text with ``\\`` line breaks,
or a token list; anything before the ``*.py`` script, such as ``torchrun`` and its options, is skipped)
and returns a configuration dict that means what Megatron-LM would run. Flags are matched through the
schema's :attr:`~estimator.schema.FieldSpec.flag` (one source of truth) plus a small table of special
cases; where a flag is absent, Megatron-LM's own default applies, not this project's (GeLU without
gating, biases on, learned absolute positions, LayerNorm, dropout 0.1, fp32 weights, no distributed
optimizer, ...). Megatron-LM's derived values are applied as ``megatron/training/arguments.py`` does
(SwiGLU's ffn_hidden_size = int(8h/3/64)*64, the NullTokenizer's extra EOD token, sequence parallelism
off at TP 1, ``--num-query-groups`` only with ``--group-query-attention``).

Flags without effect on memory (learning rate, data paths, logging, ...) and unknown flags are
returned in a list of ignored flags. Flags that change memory in ways the estimator does not model
(FSDP, CPU offloading, ...) raise :class:`~estimator.errors.UnsupportedError`.
The world size is not a Megatron flag: pass ``world_size`` (the CLI's ``--num-gpus``).

:func:`to_megatron_args` writes a configuration back as flags, ready to paste into a launch script.
"""

from __future__ import annotations

import ast
import shlex

from .config import load_config
from .errors import ConfigError, Problem, UnsupportedError
from .resolve import resolve
from .schema import field_specs

__all__ = ["parse_megatron_args", "pattern_expression", "to_megatron_args"]

#: Fields whose flag is not a plain "--flag value" / store_true in Megatron-LM (handled below).
_SPECIAL_FIELDS = {"model.activation_func", "model.gated_linear_unit", "model.add_bias_linear",
                   "model.num_query_groups", "model.moe_layer_freq", "precision.params_dtype", "precision.fp8",
                   "training.gradient_accumulation_fusion", "training.world_size", "parallelism.cp_comm_type"}
_BY_FLAG = {s.flag: s for s in field_specs() if s.flag and s.path not in _SPECIAL_FIELDS}

#: Flags with no value, besides the schema's booleans.
_BARE = {"--swiglu", "--squared-relu", "--disable-bias-linear", "--bf16", "--fp16", "--group-query-attention",
         "--no-gradient-accumulation-fusion", "--grad-reduce-in-bf16", "--use-flash-attn",
         "--recompute-activations", "--no-position-embedding", "--use-rotary-position-embeddings"}

#: Megatron-LM flags that change memory in ways this estimator does not model, with the reason.
_UNMODELLED = {
    "--use-torch-fsdp2": "FSDP2 sharding of weights and gradients",
    "--use-megatron-fsdp": "Megatron FSDP sharding of weights and gradients",
    "--use-custom-fsdp": "Megatron FSDP sharding of weights and gradients",
    "--num-distributed-optimizer-instances": "partial distributed-optimizer sharding",
    "--cpu-offloading": "activation and weight offloading to the CPU",
    "--fine-grained-activation-offloading": "activation offloading to the CPU",
    "--optimizer-cpu-offload": "optimizer states offloaded to the CPU",
    "--distribute-saved-activations": "saved activations split over the tensor-parallel group",
    "--tp-comm-overlap": "userbuffers for tensor-parallel communication overlap",
    "--enable-cuda-graph": "CUDA graph static buffers",
    "--external-cuda-graph": "CUDA graph static buffers",
    "--hybrid-override-pattern": "Mamba/hybrid layers",
    "--hybrid-layer-pattern": "Mamba/hybrid layers",
    "--spec": "a custom layer spec",
    "--heterogeneous-layers-config-path": "heterogeneous layers",
    "--moe-layer-recompute": "MoE-layer recompute (use --recompute-granularity selective --recompute-modules moe)",
    "--fp4-format": "FP4 training",
    "--encoder-num-layers": "an encoder-decoder model",
}

#: Megatron-LM defaults that differ from this schema's, applied when the flag is absent.
_MEGATRON_MODEL_DEFAULTS = {"activation_func": "gelu", "gated_linear_unit": False, "add_bias_linear": True,
                            "position_embedding_type": "learned_absolute", "normalization": "LayerNorm",
                            "hidden_dropout": 0.1, "attention_dropout": 0.1}
_MEGATRON_MLA_DEFAULTS = {"kv_lora_rank": 32, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128}

_MAX_PATTERN = 100_000


def pattern_expression(pattern) -> str:
    """A 0/1 layer pattern as Megatron's run-length expression: ``[0,0,0,1,1]`` -> ``([0]*3+[1]*2)``."""
    runs: list[list[int]] = []
    for x in pattern:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([int(x), 1])
    return "(" + "+".join(f"[{v}]*{n}" if n > 1 else f"[{v}]" for v, n in runs) + ")"


def _eval_pattern(text: str, flag: str):
    """Megatron's ``moe_freq_type``: an int, or a list expression like ``([0]*3+[1]*58)``, evaluated safely."""
    s = text.strip()
    if "[" not in s:
        try:
            return int(s)
        except ValueError:
            raise ConfigError(Problem(flag, text, "expected an integer or a list expression such as "
                                      "([0]*3+[1]*58)")) from None
    try:
        node = ast.parse(s, mode="eval").body
    except SyntaxError:
        raise ConfigError(Problem(flag, text, "not a valid list expression (e.g. ([0]*3+[1]*58))")) from None

    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.List):
            return [ev(e) for e in n.elts]
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Mult)):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
                out = a + b
            elif isinstance(n.op, ast.Mult) and isinstance(a, list) and isinstance(b, int):
                out = a * b if len(a) * b <= _MAX_PATTERN else None
            elif isinstance(n.op, ast.Mult) and isinstance(a, int) and isinstance(b, list):
                out = b * a if len(b) * a <= _MAX_PATTERN else None
            else:
                out = None
            if out is not None and len(out) <= _MAX_PATTERN:
                return out
        raise ConfigError(Problem(flag, text, "only lists of 0/1, + and * are allowed (e.g. ([0]*3+[1]*58))"))

    value = ev(node)
    if not isinstance(value, list) or not all(isinstance(x, int) and x in (0, 1) for x in value):
        raise ConfigError(Problem(flag, text, "the expression must give a list of 0 (dense) and 1 (MoE)"))
    return value


def _tokens(args) -> list[str]:
    if isinstance(args, str):
        try:
            toks = shlex.split(args.replace("\\\r\n", " ").replace("\\\n", " "), comments=True)
        except ValueError as exc:
            raise ConfigError(Problem("megatron_args", None, f"cannot split the command line: {exc}")) from None
    elif isinstance(args, (list, tuple)) and all(isinstance(t, str) for t in args):
        toks = list(args)
    else:
        raise ConfigError(Problem("megatron_args", type(args).__name__, "expected a command line or a list of "
                                  "strings"))
    script = next((i for i, t in enumerate(toks) if t.endswith(".py") and not t.startswith("-")), None)
    return toks[script + 1:] if script is not None else toks


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


def _convert(spec, flag: str, values: list[str]):
    if spec.type == "bool":
        if values:
            raise ConfigError(Problem(flag, " ".join(values), f"{flag} is a switch and takes no value"))
        return True
    if spec.type == "str_list":
        if not values:
            raise ConfigError(Problem(flag, None, f"{flag} needs at least one value"))
        return list(values)
    v = _one(flag, values)
    try:
        if spec.type == "int":
            return int(v)
        if spec.type == "float":
            return float(v)
    except ValueError:
        raise ConfigError(Problem(flag, v, f"{flag} needs {'an integer' if spec.type == 'int' else 'a number'}, "
                                  f"got {v!r}")) from None
    return v


def parse_megatron_args(args, *, world_size: int | None = None) -> tuple[dict, list[str]]:
    """(configuration dict, ignored flags) for the flags of a ``pretrain_gpt.py`` launch.

    ``args`` is the command text or a token list. ``world_size`` (the number of GPUs) is added to the
    training section when given; Megatron has no flag for it. Raises :class:`ConfigError` for a bad
    value and :class:`UnsupportedError` for a flag whose memory effect is not modelled.
    """
    pairs, stray = _split(_tokens(args))
    sec: dict[str, dict] = {"model": {}, "parallelism": {}, "training": {}, "precision": {}}
    ignored = [f"{t} (stray argument)" for t in stray]
    raw: dict[str, list[str]] = {}
    for flag, values in pairs:
        if flag in _UNMODELLED:
            raise UnsupportedError(f"{flag} is not supported: the estimator does not model "
                                   f"{_UNMODELLED[flag]}. Remove it to estimate without it.")
        if flag == "--cuda-graph-impl" and values and values[0] != "none":
            raise UnsupportedError(f"--cuda-graph-impl {values[0]} is not supported: the estimator does not model "
                                   "CUDA graph static buffers. Remove it to estimate without it.")
        if flag == "--optimizer" and values and values[0] != "adam":
            raise UnsupportedError(f"--optimizer {values[0]} is not supported: the optimizer states are modelled "
                                   "for Adam only")
        if flag in _BARE and values:
            raise ConfigError(Problem(flag, " ".join(values), f"{flag} is a switch and takes no value"))
        spec = _BY_FLAG.get(flag)
        if spec is not None:
            sec[spec.section][spec.name] = _convert(spec, flag, values)
        elif flag in _BARE or flag in ("--num-query-groups", "--moe-layer-freq", "--fp8-format", "--cp-comm-type",
                                       "--num-layers-per-virtual-pipeline-stage", "--tokenizer-type",
                                       "--layernorm-epsilon"):
            raw[flag] = values
        else:
            ignored.append(" ".join([flag, *values]))
    m, par, tr, pr = sec["model"], sec["parallelism"], sec["training"], sec["precision"]

    # Activation, biases, positions (Megatron's defaults where no flag says otherwise).
    if "--swiglu" in raw:
        m["activation_func"], m["gated_linear_unit"] = "swiglu", True
    elif "--squared-relu" in raw:
        m["activation_func"], m["gated_linear_unit"] = "squared_relu", False
    if "--disable-bias-linear" in raw:
        m["add_bias_linear"] = False
    if "--use-rotary-position-embeddings" in raw:
        m["position_embedding_type"] = "rope"
    for k, v in _MEGATRON_MODEL_DEFAULTS.items():
        m.setdefault(k, v)
    if "--no-position-embedding" in raw and m["position_embedding_type"] != "rope":
        raise ConfigError(Problem("--no-position-embedding", None, "Megatron-LM accepts --no-position-embedding "
                                  "only with --position-embedding-type rope"))
    if "--layernorm-epsilon" in raw:
        m["layernorm_epsilon"] = float(_one("--layernorm-epsilon", raw["--layernorm-epsilon"]))
    if "--group-query-attention" in raw and "--num-query-groups" in raw:
        m["num_query_groups"] = int(_one("--num-query-groups", raw["--num-query-groups"]))
    elif "--num-query-groups" in raw:
        ignored.append("--num-query-groups (Megatron-LM ignores it without --group-query-attention)")
    if "--moe-layer-freq" in raw:
        m["moe_layer_freq"] = _eval_pattern(_one("--moe-layer-freq", raw["--moe-layer-freq"]), "--moe-layer-freq")
    if "ffn_hidden_size" not in m and "hidden_size" in m and m.get("gated_linear_unit"):
        m["ffn_hidden_size"] = int((4 * m["hidden_size"] * 2 / 3) / 64) * 64
    if m.get("multi_latent_attention"):
        for k, v in _MEGATRON_MLA_DEFAULTS.items():
            m.setdefault(k, v)
    if m.get("num_experts"):
        m.setdefault("moe_token_dispatcher_type", "allgather")
    tokenizer = raw.get("--tokenizer-type")
    if "vocab_size" in m and tokenizer == ["NullTokenizer"]:
        m["vocab_size"] += 1   # Megatron's NullTokenizer appends an end-of-document token
    elif tokenizer is not None:
        ignored.append(" ".join(["--tokenizer-type", *tokenizer]))
    missing = [f for f, k in (("--num-layers", "num_layers"), ("--hidden-size", "hidden_size"),
                              ("--num-attention-heads", "num_attention_heads")) if k not in m]
    if missing:
        raise ConfigError([Problem(f, None, f"{f} is required to describe the model") for f in missing])
    if "vocab_size" not in m:
        raise ConfigError(Problem("--vocab-size", None, "is required: the vocabulary size cannot be read from a "
                                  "tokenizer here; pass --vocab-size N (the tokenizer's vocabulary size)"))

    # Parallelism.
    if "--cp-comm-type" in raw:
        kinds = set(raw["--cp-comm-type"])
        if len(kinds) != 1:
            raise UnsupportedError(f"--cp-comm-type {' '.join(raw['--cp-comm-type'])}: a different context-"
                                   "parallel communication type per layer is not modelled")
        par["cp_comm_type"] = kinds.pop()
    if "--num-layers-per-virtual-pipeline-stage" in raw:
        per = int(_one("--num-layers-per-virtual-pipeline-stage", raw["--num-layers-per-virtual-pipeline-stage"]))
        if "virtual_pipeline_model_parallel_size" not in par:
            p = par.get("pipeline_model_parallel_size", 1)
            if "num_layers_in_first_pipeline_stage" in par or "num_layers_in_last_pipeline_stage" in par:
                raise ConfigError(Problem("--num-layers-per-virtual-pipeline-stage", per, "with an uneven pipeline "
                                          "split use --num-virtual-stages-per-pipeline-rank (as Megatron-LM "
                                          "requires)"))
            L = m.get("num_layers")
            if L is not None:   # arguments.py: the embedding / loss slots count as layers
                L += bool(par.get("account_for_embedding_in_pipeline_split")) + \
                    bool(par.get("account_for_loss_in_pipeline_split"))
            if L is None or L % p or (L // p) % per:
                raise ConfigError(Problem("--num-layers-per-virtual-pipeline-stage", per, f"num_layers ({L}) / "
                                          f"pipeline size ({p}) must be a multiple of {per}"))
            par["virtual_pipeline_model_parallel_size"] = (L // p) // per
    if "pipeline_model_parallel_layout" in par and ("virtual_pipeline_model_parallel_size" in par
                                                    or "--num-layers-per-virtual-pipeline-stage" in raw):
        raise ConfigError(Problem("--pipeline-model-parallel-layout", par["pipeline_model_parallel_layout"],
                                  "Megatron-LM accepts no --num-virtual-stages-per-pipeline-rank or "
                                  "--num-layers-per-virtual-pipeline-stage with a layout (it sets the virtual "
                                  "stages itself)"))
    if par.get("virtual_pipeline_model_parallel_size") == 1:
        del par["virtual_pipeline_model_parallel_size"]

    # Training.
    tr.setdefault("use_distributed_optimizer", False)
    if "--no-gradient-accumulation-fusion" in raw:
        tr["gradient_accumulation_fusion"] = False
    if "--use-flash-attn" in raw:
        tr.setdefault("attention_backend", "flash")
    if "--recompute-activations" in raw:
        tr.setdefault("recompute_granularity", "selective")
    if tr.get("sequence_parallel") and par.get("tensor_model_parallel_size", 1) == 1:
        del tr["sequence_parallel"]
        ignored.append("--sequence-parallel (Megatron-LM turns it off when the tensor-parallel size is 1)")
    if tr.get("recompute_granularity") == "selective" and tr.get("recompute_modules") is None:
        tr.pop("recompute_modules", None)
    if world_size is not None:
        tr["world_size"] = world_size

    # Precision.
    if "--bf16" in raw and "--fp16" in raw:
        raise ConfigError(Problem("--bf16", None, "--bf16 and --fp16 exclude each other"))
    pr["params_dtype"] = "bf16" if "--bf16" in raw else "fp16" if "--fp16" in raw else "fp32"
    if "--fp8-format" in raw:
        fmt = _one("--fp8-format", raw["--fp8-format"])
        if fmt not in ("e4m3", "hybrid"):
            raise ConfigError(Problem("--fp8-format", fmt, "must be e4m3 or hybrid"))
        pr["fp8"] = True
    if "--grad-reduce-in-bf16" in raw:
        pr["accumulate_allreduce_grads_in_fp32"] = False
    return {k: v for k, v in sec.items() if v}, ignored


def _num(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def to_megatron_args(config) -> list[str]:
    """The ``pretrain_gpt.py`` flags of a configuration (anything :func:`estimator.load_config` takes).

    Derived values are written out (ffn size, sequence length, max positions, ...) so that Megatron-LM's
    own defaults cannot change the meaning. The world size is not a flag (``torchrun --nproc-per-node``
    x ``--nnodes``); the tokenizer flags stay the launch script's. Raises :class:`UnsupportedError` for a
    setting with no ``pretrain_gpt.py`` flag.
    """
    cfg = load_config(config)
    r = resolve(cfg)
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    out: list[str] = []

    def add(flag, value=None):
        out.append(flag)
        if value is not None:
            out.append(value if isinstance(value, str) else _num(value))

    add("--num-layers", m.num_layers)
    add("--hidden-size", m.hidden_size)
    add("--ffn-hidden-size", r.f)
    add("--num-attention-heads", m.num_attention_heads)
    if not m.multi_latent_attention:
        if m.kv_channels is not None:
            add("--kv-channels", m.kv_channels)
        if r.g != r.a:
            add("--group-query-attention")
            add("--num-query-groups", r.g)
    add("--seq-length", r.s)
    add("--max-position-embeddings", m.max_position_embeddings or r.s)
    add("--position-embedding-type", m.position_embedding_type)
    add("--normalization", m.normalization)
    add("--norm-epsilon", m.layernorm_epsilon)
    if m.activation_func == "swiglu" and m.gated_linear_unit:
        add("--swiglu")
    elif m.activation_func == "squared_relu" and not m.gated_linear_unit:
        add("--squared-relu")
    elif not (m.activation_func == "gelu" and not m.gated_linear_unit):
        raise UnsupportedError(f"model.activation_func {m.activation_func} (gated: {m.gated_linear_unit}) has no "
                               "pretrain_gpt.py flag; Megatron-LM offers gelu (default), --swiglu and --squared-relu")
    if not m.add_bias_linear:
        add("--disable-bias-linear")
    for name in ("add_qkv_bias", "qk_layernorm", "untie_embeddings_and_output_weights"):
        if getattr(m, name):
            add(_flag(name))
    add("--hidden-dropout", m.hidden_dropout)
    add("--attention-dropout", m.attention_dropout)
    add("--vocab-size", m.vocab_size)
    add("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by)
    if m.multi_latent_attention:
        add("--multi-latent-attention")
        if m.q_lora_rank is not None:
            add("--q-lora-rank", m.q_lora_rank)
        add("--kv-lora-rank", r.kv_lora)
        add("--qk-head-dim", r.qk_dim)
        add("--qk-pos-emb-head-dim", r.rope_dim)
        add("--v-head-dim", r.v_dim)
    if m.num_experts is not None:
        add("--num-experts", m.num_experts)
        add("--moe-router-topk", r.k)
        add("--moe-ffn-hidden-size", r.fm)
        if m.moe_shared_expert_intermediate_size:
            add("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size)
        freq = m.moe_layer_freq
        if isinstance(freq, tuple):
            add("--moe-layer-freq", pattern_expression(freq))
        elif freq not in (None, 1):
            add("--moe-layer-freq", freq)
        for name in ("moe_shared_expert_gate", "moe_router_enable_expert_bias", "moe_pad_expert_input_to_capacity"):
            if getattr(m, name):
                add(_flag(name))
        add("--moe-token-dispatcher-type", m.moe_token_dispatcher_type)
        if m.moe_expert_capacity_factor is not None:
            add("--moe-expert-capacity-factor", m.moe_expert_capacity_factor)
    if m.mtp_num_layers:
        add("--mtp-num-layers", m.mtp_num_layers)

    add("--tensor-model-parallel-size", r.t)
    add("--pipeline-model-parallel-size", r.p)
    if par.pipeline_model_parallel_layout is not None:
        add("--pipeline-model-parallel-layout", par.pipeline_model_parallel_layout)   # it sets VPP itself
    elif r.v > 1:
        add("--num-virtual-stages-per-pipeline-rank", r.v)
    for name in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"):
        if getattr(par, name) is not None:
            add(_flag(name), getattr(par, name))
    for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(par, name):
            add(_flag(name))
    if par.microbatch_group_size_per_vp_stage is not None:
        add(_flag("microbatch_group_size_per_vp_stage"), par.microbatch_group_size_per_vp_stage)
    if r.cp > 1:
        add("--context-parallel-size", r.cp)
        add("--cp-comm-type", par.cp_comm_type)
    if m.num_experts is not None:
        add("--expert-model-parallel-size", r.ep)
        add("--expert-tensor-parallel-size", r.etp)

    add("--micro-batch-size", tr.micro_batch_size)
    if tr.global_batch_size is not None:
        add("--global-batch-size", tr.global_batch_size)
    if tr.use_distributed_optimizer:
        add("--use-distributed-optimizer")
    if tr.sequence_parallel:
        add("--sequence-parallel")
    if tr.recompute_granularity == "full":
        add("--recompute-granularity", "full")
        add("--recompute-method", tr.recompute_method or "uniform")
        add("--recompute-num-layers", 1 if tr.recompute_num_layers is None else tr.recompute_num_layers)
    elif tr.recompute_granularity == "selective":
        add("--recompute-granularity", "selective")
        if tr.recompute_modules is not None:
            out.extend(["--recompute-modules", *tr.recompute_modules])
    if tr.attention_backend != "auto":
        add("--attention-backend", tr.attention_backend)
    if tr.cross_entropy_loss_fusion:
        add("--cross-entropy-loss-fusion")
        add("--cross-entropy-fusion-impl", tr.cross_entropy_fusion_impl)
    if tr.transformer_impl != "transformer_engine":
        add("--transformer-impl", tr.transformer_impl)
    if not tr.gradient_accumulation_fusion:
        add("--no-gradient-accumulation-fusion")
    for name in ("overlap_grad_reduce", "overlap_param_gather"):
        if getattr(tr, name):
            add(_flag(name))

    if pr.params_dtype != "fp32":
        add("--" + pr.params_dtype)
    if pr.fp8:
        add("--fp8-format", "hybrid")
        add("--fp8-recipe", pr.fp8_recipe or "delayed")
        if pr.fp8_param_gather:
            add("--fp8-param-gather")
    if pr.accumulate_allreduce_grads_in_fp32 is False and pr.params_dtype == "bf16":
        add("--grad-reduce-in-bf16")
    elif pr.accumulate_allreduce_grads_in_fp32 and pr.params_dtype != "bf16":
        add("--accumulate-allreduce-grads-in-fp32")
    if pr.use_precision_aware_optimizer:
        add("--use-precision-aware-optimizer")
        for name in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            add(_flag(name), getattr(pr, name))
    return out


def _flag(name: str) -> str:
    return next(s.flag for s in field_specs() if s.name == name)
