"""Megatron-Bridge configurations in: the ``config.yaml`` a Bridge run writes, with Bridge's own semantics.

A Bridge run saves its whole ``ConfigContainer`` as YAML (``ConfigContainer.to_yaml()``): sections ``model``
(``GPTModelProvider``, a Megatron-Core ``TransformerConfig``), ``train``, ``optimizer``, ``ddp``, ``dataset``,
``mixed_precision``, ``comm_overlap``, ``peft``, ``checkpoint``, ``logger``, ... Objects that are not plain values
are written as ``{_target_: dotted.name, _call_: false}`` (functions, torch dtypes) or, for enums,
``{_target_: ..., _call_: true, _args_: [value], _name_: name}`` (Megatron-LM @ 2a75ac12 :
megatron/training/config/yaml_utils.py).

:func:`read_bridge_config` reads it in three steps:

1. Bridge's own rules, read at NVIDIA-NeMo/Megatron-Bridge @ 067f987d (the catalogue's :data:`REVISION`):
   the mixed-precision preset (``training/mixed_precision.py``: ``MixedPrecisionConfig.setup`` copies *every* field
   of the preset onto the model, optimizer and DDP configs that have a field of that name, so ``bf16_mixed``'s
   ``grad_reduce_in_fp32: true`` wins over ``ddp.grad_reduce_in_fp32``), and the ``CommOverlapConfig``
   (``training/comm_overlap.py``: TP overlap off below TP 2 or without sequence parallelism; with the distributed
   optimizer and more than one data-parallel rank, ``overlap_grad_reduce`` and ``overlap_param_gather`` on unless
   the ``comm_overlap`` section sets them; the model's ``defer_embedding_wgrad_compute``, ``wgrad_deferral_limit``,
   ``overlap_moe_expert_parallel_comm`` and ``delay_wgrad_compute`` taken from it, off where it leaves them unset).
2. Every field is classified (:mod:`estimator.formats.bridge.field_classes`): a refused field set away from its
   default stops the import, naming ``section.field``; fields without memory effect are listed. The Megatron-Core
   dev-branch fields Bridge's DeepSeek-V4 sets, which the catalogue's pinned TransformerConfig lacks, are classified
   by :data:`DEV_MODEL_FIELDS` and the modelled ones set on the model afterwards; a vision-language provider's tower
   (``vision_config``) and own fields by :mod:`estimator.formats.bridge.providers`, its freeze fields
   by :mod:`estimator.formats.bridge.multimodal`. Names Bridge's recipes set outside the catalogued dataclasses
   (``field_classes.ATTRIBUTES``) are classified the same way; a model provider that builds no GPT model (a diffusion
   transformer) is refused by its name first.
3. The fields Megatron-Core receives are written as the Megatron-LM flags of the same destinations and read by
   :func:`estimator.formats.megatron_args.read_megatron_args`, so both frontends give one estimate wherever
   Megatron-Core receives the same settings. What Megatron-LM cannot express is set afterwards: the gradient
   buffer's dtype from ``grad_reduce_in_fp32``, ``recompute_modules: []`` (recompute nothing), BF16 master-weight
   remainders, and the PEFT adapters.
"""

from __future__ import annotations

import difflib

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from ...config.hybrid_pattern import pattern_from_ratios
from ...config.input_size import size_problem
from ...config.quant_recipe import rules_from_recipe
from ...config.yamlio import YamlError, dump, load
from .catalog import REVISION, SECTIONS
from .field_classes import ATTRIBUTES, NO_EFFECT_SECTIONS, classify, not_gpt_provider
from .multimodal import MULTIMODAL, TRAINING_FIELD, OmniRefused, is_off, judge as judge_multimodal, omni_media
from .presets import MIXED_PRECISION_PRESETS
from . import wan
from .providers import PROVIDER_FIELDS, PROVIDER_TOWERS, judge_provider_field, provider_spec, provider_tower
from ..megatron_args import HANDLED, MegatronImport, RefusedFlagsError, read_megatron_args
from ..megatron_catalog import ARGUMENTS

__all__ = ["BridgeRefusedError", "DEV_MODEL_FIELDS", "apply_overrides", "bridge_dict", "default_gaps",
           "read_bridge_config"]

#: The order in which a field given in two sections is read (Bridge keeps them equal; the model's wins).
_ORDER = ("model", "ddp", "optimizer", "train", "dataset", "checkpoint", "comm_overlap", "mixed_precision")

#: Bridge fields written as another Megatron-LM argument destination (the flags differ only in name).
_RENAMED = {"num_moe_experts": "num_experts",
            "virtual_pipeline_model_parallel_size": "num_virtual_stages_per_pipeline_rank",
            "num_layers_in_first_pipeline_stage": "decoder_first_pipeline_num_layers",
            "num_layers_in_last_pipeline_stage": "decoder_last_pipeline_num_layers",
            "use_custom_fsdp": "use_megatron_fsdp", "cuda_graph_scope": "cuda_graph_modules",
            "sequence_length": "seq_length",
            "param_name_patterns_for_fp32_local_accumulation": "ddp_param_name_patterns_for_fp32_local_accumulation",
            "reduce_scatter_with_fp32_accumulation": "ddp_reduce_scatter_with_fp32_accumulation"}

#: Fields the steps above read themselves (not through a flag of their own name).
_BY_HAND = {"activation_func", "gated_linear_unit", "share_embeddings_and_output_weights", "params_dtype",
            "pipeline_dtype", "grad_reduce_in_fp32", "fp8_param", "fp4_param", "store_param_remainders", "fp32",
            "disable_parameter_transpose_cache", "cpu_offloading", "cpu_offloading_activations",
            "cpu_offloading_weights", "dim", "alpha", "target_modules", "batch_p2p_comm",
            "megatron_fsdp_cuda_graph_mode", "use_transformer_engine_full_layer_spec",
            "use_layer_wise_distributed_optimizer", "freeze_mtp_model",
            "gtp_weight_remat_size", "expert_gtp_weight_remat_size"}

#: Megatron-Core fields of the ``dev`` branch that Megatron-Bridge's DeepSeek-V4 provider and recipes set, and that the
#: catalogue's TransformerConfig (Megatron-LM @ 2a75ac12) lacks: read at Megatron-LM @ d48bd6be (dev) :
#: megatron/core/transformer/transformer_config.py with Megatron-Bridge @ 067f987d :
#: src/megatron/bridge/models/deepseek/deepseek_v4_bridge.py and recipes/deepseek/{h100,gb200,gb300}/deepseek_v4.py.
#: name -> (kind, reason, the schema field a modelled one sets).
DEV_MODEL_FIELDS = {
    "csa_compress_ratios": ("modelled", "DeepSeek-V4: each layer's key compression ratio", "csa_compress_ratios"),
    "csa_window_size": ("modelled", "DeepSeek-V4: the sliding window of keys", "csa_window_size"),
    "o_groups": ("modelled", "DeepSeek-V4: the grouped output projection's groups", "o_groups"),
    "o_lora_rank": ("modelled", "DeepSeek-V4: the grouped output projection's rank", "o_lora_rank"),
    "enable_hyper_connections": ("modelled", "mHC: n residual streams", "enable_hyper_connections"),
    "num_residual_streams": ("modelled", "mHC: the residual streams", "num_residual_streams"),
    "use_fused_mhc": ("modelled", "mHC: the fused kernels keep no fp32 copy of the streams", "use_fused_mhc"),
    "moe_n_hash_layers": ("modelled", "hash-routed MoE layers (no expert bias)", "moe_n_hash_layers"),
    "apply_dsa_kernel_fusion": ("modelled", "with dsv4_hybrid Megatron-Core's deprecated switch for "
                                "dsa_kernel_backend: true cudnn, false none (TransformerConfig.__post_init__); "
                                "ignored otherwise", "dsa_kernel_backend"),
    "csa_compress_rotary_base": ("no_effect", "a RoPE base: no tensor is added or resized", None),
    "rotary_base_per_layer": ("no_effect", "per-layer RoPE bases: no tensor is added or resized", None),
    "cp_partition_mode": ("no_effect", "which rows each context-parallel rank holds (contiguous or zigzag): as "
                          "many per rank either way", None),
    "mhc_sinkhorn_iterations": ("no_effect", "Sinkhorn iterations: SinkhornKnopp saves only its input and "
                                "recomputes them in the backward pass", None),
    "mhc_init_gating_factor": ("no_effect", "an initial value", None),
    "actual_vocab_size": ("no_effect", "the hash routing table's vocabulary (a buffer, not trained)", None),
    "csa_dense_mode": ("refused", "dense compressed attention without the indexer is not modelled", None),
    "mhc_recompute_layer_num": ("modelled", "mHC: layers per recompute group (each keeps its input streams and "
                                "replays at once)", "mhc_recompute_layer_num"),
}


def _switch_value(flag: str) -> str:
    """The Bridge value a Megatron-LM switch stands for: false for a store_false flag (its argument defaults to
    True, as --no-fp8-wgrad's fp8_wgrad does), else true."""
    for flags, _, default in ARGUMENTS.values():
        if flag in flags:
            return "false" if default is True else "true"
    return "true"


_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.half": "fp16", "torch.float32": "fp32",
           "torch.float": "fp32"}
_ACTIVATIONS = {("silu", True): "--swiglu", ("gelu", False): None, ("squared_relu", False): "--squared-relu",
                ("quick_gelu", True): "--quick-geglu"}
_PEFT = {"LoRA": "lora", "DoRA": "dora"}


class BridgeRefusedError(UnsupportedError):
    """Bridge fields whose memory effect is not modelled; ``refused`` holds (``section.field = value``, reason)."""

    def __init__(self, refused: list[tuple[str, str]]):
        self.refused = tuple(refused)
        lines = "\n".join(f"  - {field}: {why}" for field, why in refused)
        super().__init__(f"not modelled, so no estimate (set these fields to their defaults to estimate without "
                         f"them):\n{lines}")

    def to_problems(self) -> list[Problem]:
        return [Problem(field.split(" = ")[0], field.partition(" = ")[2] or None, why) for field, why in self.refused]


def _plain(value):
    """A YAML value with Bridge's object encoding undone: an enum is its name, a function or dtype its dotted name."""
    if isinstance(value, dict) and "_target_" in value:
        if "_name_" in value:
            return value["_name_"]
        if value.get("_call_") is False or value.get("_partial_"):
            return value["_target_"]
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def bridge_dict(data) -> dict:
    """The ``ConfigContainer`` as a dict of sections from YAML text or a dict, every section name checked."""
    if isinstance(data, str):
        too_large = size_problem(len(data), "bridge_config", "the Megatron-Bridge configuration")
        if too_large:
            raise ConfigError(too_large)
        try:
            data = load(data)
        except YamlError as exc:
            raise ConfigError(Problem("bridge_config", None, f"not YAML this reader understands: {exc}")) from None
    if not isinstance(data, dict):
        raise ConfigError(Problem("bridge_config", type(data).__name__, "expected a mapping of sections (model, "
                                  "train, optimizer, ddp, ...), as ConfigContainer.to_yaml() writes"))
    known = set(SECTIONS) | set(NO_EFFECT_SECTIONS) | {"_target_"}
    problems = []
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            problems.append(Problem(str(key), None, f"not a section of Megatron-Bridge's ConfigContainer @ "
                                    f"{REVISION[:8]}{hint}"))
        elif key != "_target_" and data[key] is not None and key not in ("mixed_precision", "peft", "env_vars") \
                and not isinstance(data[key], dict):
            problems.append(Problem(str(key), show(data[key]), "a section must be a mapping of fields"))
    if problems:
        raise ConfigError(problems)
    return {k: (_plain(v) if isinstance(v, dict) else v) for k, v in data.items() if k != "_target_"}


def apply_overrides(cfg: dict, overrides) -> dict:
    """``cfg`` with Bridge's dotted ``section.field=value`` overrides applied (values read as YAML scalars: ``4``,
    ``true``, ``null``, ``[a, b]``), as ``scripts/training/run_recipe.py`` takes them. Returns a new dict."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in cfg.items()}
    problems = []
    for text in overrides:
        key, eq, raw = str(text).partition("=")
        section, dot, name = key.strip().partition(".")
        if eq and not dot and section in ("mixed_precision", "peft"):     # a preset or adapter by name
            out[section] = raw.strip() if section == "mixed_precision" else _peft(raw.strip())
            continue
        if eq and dot and section == "env_vars":
            out["env_vars"] = {**(out.get("env_vars") or {}), name: raw.strip()}
            continue
        if not eq or not dot or not name or "." in name:
            problems.append(Problem(str(text), None, "an override is section.field=value (e.g. "
                                    "model.tensor_model_parallel_size=4)"))
            continue
        if section == "tokenizer" and name in _TOKENIZER_FIELDS:     # read by _apply_tokenizer_vocab
            try:
                value = load(f"v: {raw.strip()}")["v"] if raw.strip() else None
            except YamlError as exc:
                problems.append(Problem(key, raw, f"not a value: {exc}"))
                continue
            out["tokenizer"] = {**(out.get("tokenizer") or {}), name: value}
            continue
        if section not in SECTIONS:
            close = difflib.get_close_matches(section, sorted(SECTIONS), n=1)
            problems.append(Problem(key, raw, f"{section!r} is not a section of Megatron-Bridge's ConfigContainer"
                                    + (f"; did you mean {close[0]}?" if close else "")))
            continue
        if name not in SECTIONS[section] and (section, name) not in ATTRIBUTES and \
                not (section == "mixed_precision" and name == "_preset_") and \
                not (section == "model" and (name in DEV_MODEL_FIELDS or name in MULTIMODAL
                                             or name in PROVIDER_FIELDS)) and \
                not (wan.is_wan((out.get("model") or {}).get("_target_"))      # Wan's own (bridge/wan.py)
                     and name in {"model": wan.MODEL_FIELDS, "dataset": wan.DATASET_FIELDS}.get(section, ())):
            close = difflib.get_close_matches(name, sorted(SECTIONS[section]), n=1)
            problems.append(Problem(key, raw, f"{name!r} is not a field of {section} at Megatron-Bridge @ "
                                    f"{REVISION[:8]}" + (f"; did you mean {section}.{close[0]}?" if close else "")))
            continue
        try:
            value = load(f"v: {raw.strip()}")["v"] if raw.strip() else None
        except YamlError as exc:
            problems.append(Problem(key, raw, f"not a value: {exc}"))
            continue
        sec = out.get(section)
        if section == "mixed_precision" and isinstance(sec, str):
            sec = _preset(sec)
        out[section] = {**(sec if isinstance(sec, dict) else {}), name: value}
    if problems:
        raise ConfigError(problems)
    return out


#: TokenizerConfig fields an override may set (Bridge @ 067f987d : training/tokenizers/config.py): those that decide
#: the model's vocabulary (training/setup.py _validate_and_set_vocab_size); the section has no other memory effect.
_TOKENIZER_FIELDS = ("tokenizer_type", "tokenizer_model", "vocab_size", "use_tokenizer_vocab_size")


def _peft(name: str) -> dict:
    """Bridge's PEFT schemes by name (recipes' ``peft="lora"``): the adapter class, its defaults from the catalogue."""
    if name not in ("lora", "dora"):
        raise ConfigError(Problem("peft", name, "a PEFT scheme is lora or dora (megatron/bridge/peft/lora.py, "
                                  "dora.py)"))
    return {"_target_": "megatron.bridge.peft." + ("lora.LoRA" if name == "lora" else "dora.DoRA")}


def _preset(name: str) -> dict:
    if name not in MIXED_PRECISION_PRESETS:
        close = difflib.get_close_matches(name, sorted(MIXED_PRECISION_PRESETS), n=3)
        raise ConfigError(Problem("mixed_precision", name, "not a mixed-precision preset of Megatron-Bridge "
                                  f"(training/mixed_precision.py); known: {', '.join(close or sorted(MIXED_PRECISION_PRESETS)[:6])}"))
    return dict(MIXED_PRECISION_PRESETS[name])


def _apply_precision(cfg: dict, notes: list) -> None:
    """MixedPrecisionConfig.setup: every preset field overwrites the same-named field of model, optimizer and ddp."""
    mp = cfg.get("mixed_precision")
    if mp is None:
        return
    if isinstance(mp, dict) and "_preset_" in mp:        # to_bridge_dict's form: a preset and what differs from it
        mp = {**(_preset(mp["_preset_"]) if mp["_preset_"] else {}), **{k: v for k, v in mp.items() if k != "_preset_"}}
    full = {**SECTIONS["mixed_precision"], **(_preset(mp) if isinstance(mp, str) else mp)}
    for param in ("fp8_param", "fp4_param"):     # MixedPrecisionConfig.finalize: from *_param_gather when unset
        if full.get(param) is None:
            full[param] = full.get(param + "_gather")
    for section in ("model", "optimizer", "ddp"):
        sec = cfg.setdefault(section, {})
        for k, v in full.items():
            if k in SECTIONS[section]:
                if k in sec and sec[k] != v and sec[k] is not None and (
                        sec[k] != SECTIONS[section].get(k) or k == "grad_reduce_in_fp32"):
                    notes.append(f"{section}.{k} = {show(sec[k])} is overwritten by mixed_precision "
                                 f"({show(v)}), as Bridge's MixedPrecisionConfig.setup does")
                sec[k] = v
    cfg["mixed_precision"] = full


def _sync_distributed_optimizer(cfg: dict, notes: list) -> None:
    """training/config.py _validate_and_sync_distributed_optimizer_settings: the distributed optimizer set on either
    the DDP or the optimizer configuration is turned on for both."""
    ddp, opt = cfg.get("ddp") or {}, cfg.get("optimizer") or {}
    if bool(ddp.get("use_distributed_optimizer")) != bool(opt.get("use_distributed_optimizer")) and (
            ddp.get("use_distributed_optimizer") or opt.get("use_distributed_optimizer")):
        notes.append("use_distributed_optimizer set on only one of ddp and optimizer: Bridge turns it on for both")
        cfg["ddp"] = {**ddp, "use_distributed_optimizer": True}
        cfg["optimizer"] = {**opt, "use_distributed_optimizer": True}


def _layer_wise_optimizer(cfg: dict, notes: list, no_effect: list) -> None:
    """``optimizer.use_layer_wise_distributed_optimizer`` (Megatron-LM @ 2a75ac12 : megatron/core/optimizer/
    __init__.py): only ``_get_megatron_emerging_optimizer`` reads it, where a ``dist_`` prefix on the optimizer's
    name does nothing but set it; Bridge (training/optim.py setup_optimizer) sends muon and soap there and adam and
    sgd to ``get_megatron_optimizer``, which never reads it. So muon with it is dist_muon."""
    opt = cfg.get("optimizer") or {}
    on = opt.get("use_layer_wise_distributed_optimizer")
    if on in (None, False):
        return
    if not isinstance(on, bool):
        raise ConfigError(Problem("optimizer.use_layer_wise_distributed_optimizer", show(on), "must be true or false"))
    name = opt.get("optimizer", SECTIONS["optimizer"].get("optimizer"))
    if name == "muon":
        cfg["optimizer"] = {**opt, "optimizer": "dist_muon"}
        notes.append("optimizer.use_layer_wise_distributed_optimizer = true with optimizer muon: Megatron-Core's "
                     "LayerWiseDistributedOptimizer, read as dist_muon (the dist_ prefix only sets this flag)")
    elif name in ("adam", "sgd"):
        no_effect.append(("optimizer.use_layer_wise_distributed_optimizer = true", f"read only for emerging "
                          f"optimizers (Muon, SOAP); Megatron-Core's get_megatron_optimizer builds {name} without it"))


def _apply_comm_overlap(cfg: dict, world_size: int | None) -> None:
    """CommOverlapConfig.setup (training/comm_overlap.py), for the fields that change what a GPU holds."""
    co = cfg.get("comm_overlap")
    if not isinstance(co, dict):
        return
    m, ddp = cfg.setdefault("model", {}), cfg.setdefault("ddp", {})
    tp = m.get("tensor_model_parallel_size") or 1
    tp_overlap = bool(co.get("tp_comm_overlap")) and tp >= 2 and bool(m.get("sequence_parallel"))
    m["tp_comm_overlap"] = tp_overlap
    for k, off in (("defer_embedding_wgrad_compute", False), ("wgrad_deferral_limit", -1),
                   ("overlap_moe_expert_parallel_comm", False), ("delay_wgrad_compute", False)):
        m[k] = co[k] if co.get(k) is not None else off
    if ddp.get("use_distributed_optimizer"):
        dp = co.get("data_parallel_size")
        if dp is None and world_size:
            per = tp * (m.get("pipeline_model_parallel_size") or 1) * (m.get("context_parallel_size") or 1)
            dp = world_size // per if per else None
        on = bool(dp and dp > 1)
        for k in ("overlap_grad_reduce", "overlap_param_gather"):
            ddp[k] = co[k] if co.get(k) is not None else on


def _apply_tokenizer_vocab(cfg: dict, notes: list) -> None:
    """training/setup.py ``_validate_and_set_vocab_size``: with ``tokenizer.use_tokenizer_vocab_size`` (set by every
    library pretrain recipe's ``_pretrain_common``) or without a model ``vocab_size``, the model takes the
    tokenizer's vocabulary and pads it (``should_pad_vocab``: to a multiple of ``make_vocab_size_divisible_by`` x TP).
    ``config.yaml`` is written before that step (``setup`` saves it first), so its ``model.vocab_size`` is still the
    model's own. The size is known here only for the ``NullTokenizer``, whose vocabulary is the ``vocab_size`` it is
    given (Megatron-LM @ 2a75ac12 : megatron/core/tokenizers/text/libraries/null_tokenizer.py); a Hugging Face
    tokenizer's length is not in the file, so the model's ``vocab_size`` is counted and a note says so."""
    tok, m = cfg.get("tokenizer"), cfg.get("model") or {}
    if not isinstance(tok, dict) or not (tok.get("use_tokenizer_vocab_size") or m.get("vocab_size") is None):
        _keep_model_vocab(m, notes)
        return
    size = tok.get("vocab_size")
    if tok.get("tokenizer_type") == "NullTokenizer" and size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(Problem("tokenizer.vocab_size", show(size), "a NullTokenizer's vocabulary must be a "
                                      "positive integer"))
        if m.get("vocab_size") not in (None, size):
            notes.append(f"model.vocab_size = {m['vocab_size']} is replaced by the NullTokenizer's {size} tokens "
                         "(tokenizer.use_tokenizer_vocab_size), padded, as Bridge's training/setup.py does")
        cfg.setdefault("model", {})["vocab_size"] = size
    elif m.get("vocab_size") is not None:
        notes.append(f"tokenizer.use_tokenizer_vocab_size: Bridge trains with the tokenizer's vocabulary "
                     f"({tok.get('tokenizer_type')}), whose size config.yaml does not hold; model.vocab_size = "
                     f"{m['vocab_size']} is counted instead (set model.vocab_size to the tokenizer's length)")


def _keep_model_vocab(m: dict, notes: list) -> None:
    """The other branch of ``_validate_and_set_vocab_size``: a model ``vocab_size`` without
    ``use_tokenizer_vocab_size`` is kept as it is (``should_pad_vocab`` False; the function refuses one smaller than
    the tokenizer's), so Megatron-Core gets the unpadded size. Where padding to ``make_vocab_size_divisible_by`` x TP
    would add rows (Gemma 3's 262,208), the multiple becomes 1 (a multiple of TP only), with a note. A
    ``model.should_pad_vocab`` true (a configuration saved after setup) keeps the padding."""
    size, div = m.get("vocab_size"), m.get("make_vocab_size_divisible_by", 128)
    tp = m.get("tensor_model_parallel_size") or 1
    if m.get("should_pad_vocab") is True:       # a config.yaml saved after setup: Bridge pads
        return
    if (isinstance(size, bool) or not isinstance(size, int) or isinstance(div, bool) or not isinstance(div, int)
            or not isinstance(tp, int) or div < 1 or tp < 1 or size % (div * tp) == 0):
        return
    m["make_vocab_size_divisible_by"] = 1
    notes.append(f"model.vocab_size = {size} is kept unpadded (tokenizer.use_tokenizer_vocab_size false: Bridge's "
                 "training/setup.py sets should_pad_vocab False), not padded to a multiple of "
                 f"make_vocab_size_divisible_by {div} x TP {tp}")


def _packed_sequence_size(cfg: dict) -> int | None:
    """The tokens of one micro-batch of offline-packed SFT data, or None without packing.

    Bridge @ 067f987d: ``GPTSFTDatasetConfig.enable_offline_packing`` with ``offline_packing_specs``
    (data/builders/gpt_sft.py, data/packing/config.py ``PackedSequenceSpecs``) packs variable-length samples into
    packs of at most ``packed_sequence_size`` tokens (each sample padded to ``pad_seq_to_mult``; the recipes'
    ``dataset_kwargs.pad_to_max_length`` pads every pack to the full size), and training/config.py refuses a
    ``micro_batch_size`` above 1 with packing. Megatron-Core then runs each pack as one sequence in the THD layout
    (``cu_seqlens`` marking the samples), so a micro-batch holds the longest pack's ``packed_sequence_size``
    tokens: the activations are those of one sequence that long (attention with ``cu_seqlens`` keeps no s x s
    matrix, as with one sequence)."""
    ds = cfg.get("dataset") or {}
    if not isinstance(ds, dict) or not ds.get("enable_offline_packing"):
        return None
    specs = ds.get("offline_packing_specs")
    size = specs.get("packed_sequence_size") if isinstance(specs, dict) else None
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ConfigError(Problem("dataset.offline_packing_specs.packed_sequence_size", show(size),
                                  "must be a positive integer with dataset.enable_offline_packing (Bridge's "
                                  "GPTSFTDatasetConfig.validate)"))
    mbs = (cfg.get("train") or {}).get("micro_batch_size", 1)
    if mbs not in (None, 1):
        raise ConfigError(Problem("train.micro_batch_size", show(mbs), f"must be 1 with packed sequences, as Bridge "
                                  f"requires: give packed_sequence_size {size} x {mbs} instead"))
    return size


def _dev_field(name: str, value, m: dict, dev: dict, refused: list, no_effect: list) -> None:
    """A field of :data:`DEV_MODEL_FIELDS` (or experimental_attention_variant dsv4_hybrid): into ``dev`` (the schema's
    field), ``no_effect`` or ``refused``."""
    where = f"model.{name} = {show(value)}"
    if name == "experimental_attention_variant":
        dev[name] = value
        return
    kind, why, field = DEV_MODEL_FIELDS[name]
    if kind == "refused":
        if value not in (None, False, 0, [], ""):
            refused.append((where, why))
    elif kind == "no_effect" or (name == "apply_dsa_kernel_fusion" and
                                 m.get("experimental_attention_variant") != "dsv4_hybrid"):
        if value not in (None, False, [], ""):
            no_effect.append((where, why))
    elif name == "apply_dsa_kernel_fusion":
        if value is not None:
            dev[field] = "cudnn" if value else "none"
    elif value is not None:
        dev[field] = list(value) if isinstance(value, (list, tuple)) else value


def _fused_qkv_rope_problems(m: dict) -> list[Problem]:
    """``model.fused_single_qkv_rope`` with fewer key/value groups than tensor-parallel ranks: Megatron-Core's fused
    path cannot run it. NVIDIA/Megatron-LM @ 2a75ac12 (Bridge's pin; the same @ d98e8a64) :
    megatron/core/transformer/attention.py: ``forward`` asks ``get_query_key_value_tensors`` for the unsplit QKV
    (``split_qkv`` False), which, with num_query_groups < TP, gathers the QKV output and keeps the rank's whole group
    (num_attention_heads / num_query_groups query heads) and returns it before the step that cuts the queries to the
    rank's num_attention_heads / TP heads; the split path alone takes that step."""
    if m.get("fused_single_qkv_rope") in (None, False) or m.get("multi_latent_attention"):
        return []
    tp, heads = m.get("tensor_model_parallel_size") or 1, m.get("num_attention_heads")
    groups = m.get("num_query_groups") or heads
    if not (isinstance(tp, int) and isinstance(groups, int) and groups < tp):
        return []
    return [Problem("model.fused_single_qkv_rope", m["fused_single_qkv_rope"], "Megatron-Core's fused QKV + RoPE "
                    "path does not cut the queries to num_attention_heads / TP heads when num_query_groups "
                    f"({groups}) is below tensor_model_parallel_size ({tp}) (transformer/attention.py "
                    "get_query_key_value_tensors with split_qkv False); allowed: false, or num_query_groups >= "
                    "tensor_model_parallel_size")]


def _hybrid_ratio_problems(m: dict) -> list[Problem]:
    """``hybrid_attention_ratio`` / ``hybrid_mlp_ratio`` above 0 without a pattern. HybridModelProvider (Bridge @
    067f987d : models/hybrid/hybrid_provider.py ``provide``) hands Megatron-Core's HybridModel only
    ``hybrid_layer_pattern`` (or ``hybrid_override_pattern``, copied there by ``finalize``); HybridModel turns ratios
    into a pattern only when given them itself, and with no pattern builds no decoder layer (hybrid_layer_allocation.py
    ``select_pipeline_segment`` on an empty pattern). With a pattern the ratios have no effect."""
    ratios = {k: m.get(k) for k in ("hybrid_attention_ratio", "hybrid_mlp_ratio")}
    if not any(ratios.values()) or m.get("hybrid_layer_pattern") or m.get("hybrid_override_pattern") \
            or "FalconH1" in str(m.get("_target_") or ""):      # Falcon-H1's own block reads them (not modelled)
        return []
    for k, v in ratios.items():
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 1):
            return [Problem(f"model.{k}", show(v), "must be a number from 0 to 1")]
    attention, mlp = (float(v or 0) for v in ratios.values())
    layers = m.get("num_layers")
    try:
        meant = (f"; Megatron-Core's pattern_from_ratios({layers}, {attention:g}, {mlp:g}) gives "
                 f"{pattern_from_ratios(layers, attention, mlp)!r}") if isinstance(layers, int) else ""
    except ValueError as exc:
        meant = f"; Megatron-Core's pattern_from_ratios refuses them too ({exc})"
    name = "hybrid_attention_ratio" if attention else "hybrid_mlp_ratio"
    return [Problem(f"model.{name}", show(ratios[name]), "Megatron-Bridge's HybridModelProvider hands Megatron-"
                    "Core's HybridModel only hybrid_layer_pattern, so these ratios alone build a model without "
                    "decoder layers; give model.hybrid_layer_pattern" + meant)]


def _partial_checkpoint_problems(m: dict) -> list[Problem]:
    """``num_microbatches_with_partial_activation_checkpoints`` N with pipeline parallelism. Megatron-Core's 1F1B
    schedules (Megatron-LM @ 2a75ac12 : megatron/core/pipeline_parallel/schedules.py) mark micro-batch k
    ``k % (warmup + 1) >= N`` and hand the mark to the forward step as its third positional argument, which Bridge's
    forward steps (training/gpt_step.py ``forward_step``) take as ``return_schedule_plan``: a marked micro-batch asserts
    ``overlap_moe_expert_parallel_comm`` (and with it pipeline_parallel/combined_1f1b.py asserts the mark is None).
    No layer reads the mark, so with nothing marked the field has no effect. The window warmup + 1 is at most
    p without interleaving and 2 (p - 1) + (v - 1) g + 1 with v virtual stages of groups of g
    (``get_pp_rank_microbatches``, the first pipeline rank; one more with the expert-parallel overlap); with PP 1
    the schedule does not read the field."""
    n = m.get("num_microbatches_with_partial_activation_checkpoints")
    p = m.get("pipeline_model_parallel_size") or 1
    if n is None or not isinstance(p, int) or p < 2:
        return []
    where = "model.num_microbatches_with_partial_activation_checkpoints"
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return [Problem(where, show(n), "must be null or a whole number >= 0")]
    v = m.get("virtual_pipeline_model_parallel_size") or 1
    g = m.get("microbatch_group_size_per_vp_stage") or p
    window = p if v == 1 else 2 * (p - 1) + (v - 1) * g + 1 + bool(m.get("overlap_moe_expert_parallel_comm"))
    if n >= window:
        return []
    return [Problem(where, n, "Megatron-Core's pipeline schedules pass each micro-batch's checkpoint mark to the "
                    "forward step, which Bridge's forward_step takes as return_schedule_plan, so the first marked "
                    f"micro-batch stops the run (no layer reads the mark); allowed: null, or at least {window} "
                    f"with pipeline_model_parallel_size {p}" + (f" and {v} virtual stages" if v > 1 else "")
                    + " (then nothing is marked: no effect)")]


def _default(section: str, name: str):
    return SECTIONS.get(section, {}).get(name)


def _is_off(section: str, name: str, value) -> bool:
    return value in (None, False, 0, [], "", {}) or value == _default(section, name)


def _flag_tokens(dest: str, value, where: str) -> list[str]:
    flags, arity, default = ARGUMENTS[dest]
    flag = flags[0]
    if value is None:
        return []
    if arity == 0:
        if not isinstance(value, bool):
            raise ConfigError(Problem(where, show(value), "must be true or false"))
        return [flag] if value != bool(default) else []
    if arity in ("+", "*"):
        items = value if isinstance(value, list) else [value]
        return [flag, *map(str, items)] if items else []
    if isinstance(value, list):             # a layer pattern such as moe_layer_freq: Megatron-LM reads "[0,1,1]"
        return [flag, "[" + ",".join(map(str, value)) + "]"]
    if isinstance(value, dict):
        raise ConfigError(Problem(where, show(value), "expected a single value"))
    if isinstance(value, bool):
        value = str(value).lower()
    return [flag, str(value)]


def read_bridge_config(data, *, world_size: int | None = None, overrides=(), vision_model=None) -> MegatronImport:
    """The estimator's configuration of a Megatron-Bridge run, with what each field means for memory.

    ``data`` is the YAML text of a ``config.yaml`` (or its dict); ``overrides`` Bridge's dotted ``section.field=value``
    strings; ``world_size`` the number of GPUs (a Bridge configuration does not hold it). Raises
    :class:`ConfigError` naming ``section.field`` for a bad or unknown value and :class:`BridgeRefusedError` naming
    every field whose memory effect is not modelled. ``vision_model``: the ``model.vision_*`` fields of the tower,
    given by a recipe (from its preset or Hugging Face model); without it a vision-language provider's tower is read
    from the configuration's ``model.vision_config`` (:mod:`estimator.formats.bridge.providers`).
    """
    cfg = apply_overrides(bridge_dict(data), overrides)
    wan_fields, wan_notes = wan.take(cfg) if wan.is_wan((cfg.get("model") or {}).get("_target_")) else (None, [])
    provider = not_gpt_provider((cfg.get("model") or {}).get("_target_"))
    if provider:            # refused once, by name, before its own fields (latents, patches) are read
        raise BridgeRefusedError([(f"model._target_ = {provider[0]}", provider[1])])
    refused, no_effect, notes = [], [], []
    _apply_precision(cfg, notes)
    _sync_distributed_optimizer(cfg, notes)
    _layer_wise_optimizer(cfg, notes, no_effect)
    _apply_comm_overlap(cfg, world_size)
    _apply_tokenizer_vocab(cfg, notes)
    packed = _packed_sequence_size(cfg)
    m = cfg.get("model") or {}
    values: dict[str, tuple[str, object]] = {}          # Megatron-LM dest -> (section.field, value)
    dev: dict = {}                                      # schema field -> value, of DEV_MODEL_FIELDS
    vision: dict[str, tuple[str, object]] = {}          # training field -> (model.field, value): multimodal.py
    problems = []
    quant = None
    for section in [*_ORDER, *[s for s in cfg if s not in _ORDER]]:
        sec = cfg.get(section)
        if not isinstance(sec, dict) or section in NO_EFFECT_SECTIONS:
            if sec not in (None, {}) and section in NO_EFFECT_SECTIONS and \
                    not (section == "env_vars" and isinstance(sec, dict) and set(sec) <= set(_ENV_FIELDS)):
                no_effect.append((section, NO_EFFECT_SECTIONS[section]))
            continue
        for name, value in sec.items():
            where = f"{section}.{name}"
            if name in ("_target_", "_call_"):
                if section == "model":
                    notes.append(f"model: {value} (Bridge's model provider)")
                continue
            if section == "model" and (name in DEV_MODEL_FIELDS or (name == "experimental_attention_variant"
                                                                   and value == "dsv4_hybrid")):
                _dev_field(name, value, m, dev, refused, no_effect)
                continue
            if section == "model" and name == "quant_recipe":
                quant = _quant_recipe(value, where, refused, notes)
                continue
            if section == "model" and name in PROVIDER_FIELDS and name not in SECTIONS[section]:
                kind, why = judge_provider_field(name, value, m)    # a vision-language provider's own field
                if kind == "refused":
                    refused.append((f"{where} = {show(value)}", why))
                elif kind == "no_effect":
                    no_effect.append((f"{where} = {show(value)}", why))
                continue
            if section == "model" and name in MULTIMODAL and name not in SECTIONS[section]:
                kind, why = judge_multimodal(name, value, m.get("vision_cuda_graph_impl", "none"))
                if kind == "refused":
                    refused.append((f"{where} = {show(value)}", why))
                elif kind == "modelled" and name in TRAINING_FIELD and not is_off(name, value):
                    vision[TRAINING_FIELD[name]] = (where, value)       # no_effect: at its default
                elif kind == "no_effect" and value not in (MULTIMODAL[name][0], None, [], ()):
                    no_effect.append((f"{where} = {show(value)}", why))
                continue
            if name not in SECTIONS[section] and (section, name) not in ATTRIBUTES:
                close = difflib.get_close_matches(name, sorted(SECTIONS[section]), n=1)
                problems.append(Problem(where, show(value), f"not a field of {section} at Megatron-Bridge @ "
                                        f"{REVISION[:8]}" + (f"; did you mean {section}.{close[0]}?" if close else "")))
                continue
            kind, why = classify(section, name)
            if kind == "refused":
                copied = isinstance(cfg.get("mixed_precision"), dict) and name in cfg["mixed_precision"] and \
                    section in ("model", "optimizer", "ddp")    # said once, as the mixed_precision field
                if not copied and not _is_off(section, name, value):
                    refused.append((f"{where} = {show(value)}", why))
                continue
            dest = _RENAMED.get(name, name)
            if kind == "no_effect":
                if not _is_off(section, name, value):
                    no_effect.append((f"{where} = {show(value)}", why))
                if dest in HANDLED and dest not in values and (section, name) not in ATTRIBUTES:
                    # kept in the configuration all the same (an attribute outside the dataclasses: read nowhere)
                    values[dest] = (where, value)
                continue
            if name in _BY_HAND or section == "mixed_precision":
                continue
            if dest in ARGUMENTS and dest not in values:
                values[dest] = (where, value)
    problems += _fused_qkv_rope_problems(m) + _hybrid_ratio_problems(m) + _partial_checkpoint_problems(m)
    env = cfg.get("env_vars") or {}
    if m.get("cpu_offloading") and str(env.get("NVTE_CPU_OFFLOAD_V1", "")).strip() == "1":
        refused.append(("env_vars.NVTE_CPU_OFFLOAD_V1 = 1", "Transformer Engine's old CPU offloading path (Transformer "
                        "Engine @ d0067d0d : transformer_engine/pytorch/cpu_offload_v1.py, with its own reload "
                        "buffers, double-buffered with cpu_offloading_double_buffering) is not modelled; the estimate "
                        "follows the default path (cpu_offload.py)"))
    if problems:
        raise ConfigError(problems)
    if refused:
        raise BridgeRefusedError(refused)
    if vision_model is None and (m.get("_target_") in PROVIDER_TOWERS or "vision_config" in m):
        vision_model = provider_tower(m.get("_target_"), m)          # a config.yaml: the provider's own tower
        notes.append(f"model.vision_config: the vision tower of {m['_target_'].rsplit('.', 1)[1]}, read as the "
                     "Hugging Face importer reads a config.json's vision_config; the images of a sample are the "
                     "dataset's, not in the config.yaml: give training.images_per_sample (--images-per-sample) and "
                     "image_resolution")
    spec = provider_spec(m.get("_target_"), m)          # Gemma 3 VL's layer spec: set after the flags are read
    filled = _bridge_defaults(cfg, values)
    tokens, origin = _tokens(cfg, m, values)
    try:
        imp = read_megatron_args(tokens, world_size=world_size, argparse_rules=False)
    except RefusedFlagsError as exc:
        raise BridgeRefusedError([(f"{origin.get(text.split()[0], text.split()[0])} = "
                                   f"{' '.join(text.split()[1:]) or _switch_value(text.split()[0])}", why)
                                  for text, why in exc.refused]) from None
    except ConfigError as exc:       # name the Bridge field a Megatron-LM flag came from
        raise ConfigError([Problem(origin.get(p.field, p.field), p.value,
                                   p.message + (f" (Megatron-LM's {p.field})" if p.field in origin else ""))
                           for p in exc.problems]) from None
    config = imp.config
    if "mhc_recompute_layer_num" in dev:     # a recompute setting: the schema's training section
        config.setdefault("training", {})["mhc_recompute_layer_num"] = dev.pop("mhc_recompute_layer_num")
    config.setdefault("model", {}).update(dev)
    if quant is not None:
        config.setdefault("precision", {})["quant_recipe"] = quant
    if wan_fields is not None:          # Megatron-Bridge's Wan provider and data (bridge/wan.py)
        config["model"].update(wan_fields)
        notes += wan_notes
    _after(cfg, config, notes)
    config["model"].update(spec)
    try:                                                  # omni28: Nemotron Omni's towers (multimodal.py)
        omni_tower, sound, freeze_sound = omni_media(m)
    except OmniRefused as exc:
        raise BridgeRefusedError([exc.args[0]]) from None
    _apply_vision(config, vision, vision_model or omni_tower)
    _peft_freezes_hf_tower(config, notes)
    config["model"].update(sound)
    config.setdefault("training", {}).update(freeze_sound)
    if packed:
        config.setdefault("training", {})["seq_length"] = packed
        notes.append(f"dataset.offline_packing_specs.packed_sequence_size = {packed}: packed SFT, one pack of "
                     f"{packed} tokens per micro-batch (THD layout), counted as the sequence length")
    quiet = {flag for flag, where in origin.items() if where in filled}    # a default nobody set: no remark on it
    said = [n for n in imp.notes if n.split(":")[0].split(" ")[0] not in quiet]
    return MegatronImport(config, tuple(no_effect), (*said, *notes))


def _quant_recipe(value, where: str, refused: list, notes: list) -> list[str] | None:
    """``model.quant_recipe`` (Megatron-Core's RecipeConfig: the dict ``RecipeConfig.from_config_dict`` takes, a
    serialised RecipeConfig with its configs and GlobMatchers, or GLOB=PRECISION rules) as
    ``precision.quant_recipe`` rules (estimator/config/quant_recipe.py); what it cannot model is refused by name."""
    if value is None:
        return None
    rules, why, said = rules_from_recipe(value)
    if why:
        refused.append((f"{where} = {show(value)}", "a per-module quantisation recipe the estimate does not model: "
                        + "; ".join(why)))
        return None
    notes.extend(f"{where}: {n}" for n in said)
    return rules


def _apply_vision(config: dict, vision: dict, vision_model) -> None:
    """The vision tower (``vision_model``: model.vision_* fields) and the multimodal providers' freeze fields that
    were turned on; without a tower those are refused by name rather than dropped."""
    if vision_model:
        config.setdefault("model", {}).update(vision_model)
    if not vision:
        return
    for field, (where, value) in vision.items():
        if field.startswith("freeze_") and not isinstance(value, bool):
            raise ConfigError(Problem(where, show(value), "must be true or false"))
    if not vision_model:
        raise BridgeRefusedError([(f"{where} = {show(value)}", "no vision tower the estimator models (model._target_ "
                                   "is not a vision-language provider whose tower it reads: estimator/formats/"
                                   "bridge/providers.py); estimate the model with --hf and "
                                   "training.freeze_vision_model / freeze_vision_projection / freeze_language_model "
                                   "instead")
                                  for where, value in vision.values()])
    tr = config.setdefault("training", {})
    for field, (_, value) in vision.items():
        tr[field] = value


def _peft_freezes_hf_tower(config: dict, notes: list) -> None:
    """PEFT beside the qwen2_5_vl tower: Bridge's ``PEFT.__call__`` freezes every parameter (peft/base.py
    ``freeze_model``) and adapts only modules whose name is a target, which no module of Hugging Face's Qwen2.5-VL
    tower is (estimator/config/rules/unsupported.py ``_peft_beside_hf_qwen25_tower``); the provider's
    ``freeze_vision_*`` False does not unfreeze them. So the tower and its merger are frozen, with a note."""
    m, tr = config.get("model") or {}, config.get("training") or {}
    if not (tr.get("peft") and m.get("vision_model_type") == "qwen2_5_vl" and m.get("vision_num_layers")):
        return
    fields = [f for f in ("freeze_vision_model", "freeze_vision_projection") if not tr.get(f)]
    if fields:
        tr.update(dict.fromkeys(fields, True))
        notes.append("peft: Bridge's PEFT freezes the whole model and adapts no module of the Qwen2.5-VL tower "
                     "(Hugging Face's, its linears not named linear_*), so " + " and ".join(
                         "training." + f for f in fields) + " are set true")


#: Fields whose dataclass default is a placeholder to be filled in (a model's shape), never a setting.
_PLACEHOLDERS = {"num_layers", "hidden_size", "num_attention_heads", "seq_length", "cuda_graph_scope",
                 "cuda_graph_modules"}


def default_gaps() -> list[tuple[str, str, str, object, object]]:
    """(section, field, Megatron-LM destination, Bridge's dataclass default, Megatron-LM's argparse default) of every
    modelled field whose two defaults differ (TransformerConfig's cross_entropy_loss_fusion True against argparse's
    False; OptimizerConfig's optimizer_offload_fraction 0.0 against 1.0, ...): a field a YAML leaves out means the
    former, a flag a launch leaves out the latter."""
    out = []
    for section in ("model", "ddp", "optimizer", "train"):
        for name, default in SECTIONS[section].items():
            dest = _RENAMED.get(name, name)
            if default is None or name in _PLACEHOLDERS or name in _BY_HAND or dest not in HANDLED \
                    or dest not in ARGUMENTS or ARGUMENTS[dest][2] == default:
                continue
            if (classify(section, name) or ("refused",))[0] != "refused":
                out.append((section, name, dest, default, ARGUMENTS[dest][2]))
    return out


def _bridge_defaults(cfg: dict, values: dict) -> set:
    """A field the YAML leaves out has its Bridge dataclass default, not Megatron-LM's argparse default. Returns the
    fields filled in (``section.field``)."""
    filled = set()
    mla = bool((cfg.get("model") or {}).get("multi_latent_attention"))
    for section, name, dest, default, _ in default_gaps():
        if name in ("q_lora_rank", "kv_lora_rank") and not mla:
            continue                    # MLATransformerConfig's defaults: read only with multi-latent attention
        if name not in (cfg.get(section) or {}) and dest not in values:
            values[dest] = (f"{section}.{name}", default)
            filled.add(f"{section}.{name}")
    return filled


def _tokens(cfg: dict, m: dict, values: dict) -> tuple[list[str], dict]:
    """The Megatron-LM flags of the fields Megatron-Core receives, and flag -> the Bridge field it came from."""
    tokens: list[str] = []
    origin: dict[str, str] = {}
    act = str(m.get("activation_func") or "torch.nn.functional.gelu").rsplit(".", 1)[-1]
    glu = bool(m.get("gated_linear_unit"))
    if (act, glu) not in _ACTIVATIONS:
        raise BridgeRefusedError([(f"model.activation_func = {act}, model.gated_linear_unit = {str(glu).lower()}",
                                   "this activation is not modelled (silu with the gated linear unit, gelu, squared "
                                   "relu and gated quick-gelu are)")])
    if _ACTIVATIONS[(act, glu)]:
        tokens.append(_ACTIVATIONS[(act, glu)])
        origin[_ACTIVATIONS[(act, glu)]] = "model.activation_func"
    if m.get("share_embeddings_and_output_weights") is False:
        tokens.append("--untie-embeddings-and-output-weights")
        origin[tokens[-1]] = "model.share_embeddings_and_output_weights"
    dtype = _DTYPES.get(str(m.get("params_dtype")), None)
    if dtype in ("bf16", "fp16") and not m.get(dtype):
        values.setdefault(dtype, ("model.params_dtype", True))
    if m.get("num_query_groups") and m.get("num_query_groups") != m.get("num_attention_heads"):
        tokens.append("--group-query-attention")
    if m.get("position_embedding_type") == "learned_absolute" and m.get("seq_length"):
        tokens += ["--max-position-embeddings", str(m["seq_length"])]   # GPTModelProvider: max_sequence_length
    # gtp29: Megatron-Core derives the shard counts from gtp_weight_remat_size when they are null
    # (model_parallel_config.py resolve_tensor_parallel_weight_shards: shards = TP x gtp_weight_remat_size)
    tp = m.get("tensor_model_parallel_size") or 1
    for dest, size_field, base in (("tensor_parallel_num_weight_shards", "gtp_weight_remat_size", tp),
                                   ("expert_tensor_parallel_num_weight_shards", "expert_gtp_weight_remat_size",
                                    m.get("expert_tensor_parallel_size") or tp)):
        size = m.get(size_field)
        if isinstance(size, int) and not isinstance(size, bool) and size > 1 \
                and values.get(dest, (None, None))[1] is None:
            values[dest] = (f"model.{size_field}", base * size)
    # gtp29: ddp.average_in_collective and model.calculate_per_token_loss have no memory effect, but Megatron-Core's
    # DDP asserts the former off with GTP and with the latter; the flags carry them to the importer's rules
    # (megatron_args._average_in_collective_rule, _gtp_flag_rules), which name these fields through origin.
    for dest, section, name in (("ddp_average_in_collective", "ddp", "average_in_collective"),
                                ("calculate_per_token_loss", "model", "calculate_per_token_loss")):
        toks = _flag_tokens(dest, (cfg.get(section) or {}).get(name), f"{section}.{name}")
        if toks:
            tokens += toks
            origin[toks[0]] = f"{section}.{name}"
    if m.get("fp8_param") and "fp8_param_gather" not in values:
        values["fp8_param_gather"] = ("model.fp8_param", True)
    if m.get("fp4_param") and "fp4_param_gather" not in values:
        values["fp4_param_gather"] = ("model.fp4_param", True)
    if m.get("cpu_offloading"):
        values.setdefault("cpu_offloading_num_layers", ("model.cpu_offloading", m.get("cpu_offloading_num_layers")
                                                        or 1))
    else:
        values.pop("cpu_offloading_num_layers", None)
    values.pop("tp_comm_overlap_cfg", None)       # a dict or a Bridge name, not a file: set in _after
    # A config.yaml holds every TransformerConfig field: the MoE ones of a dense model and the MLA ones of a model
    # without multi-latent attention are defaults Megatron-Core does not read.
    if not m.get("num_moe_experts"):
        for dest in [d for d in values if d.startswith("moe_") or d == "num_experts"]:
            values.pop(dest)
    if str(m.get("cuda_graph_impl") or "none") == "none":
        values.pop("cuda_graph_modules", None)
    if not m.get("multi_latent_attention"):
        for dest in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            values.pop(dest, None)
    opt = values.get("optimizer", (None, None))
    if opt[1] == "dist_muon" and not (cfg.get("ddp") or {}).get("use_distributed_optimizer"):
        # Megatron-Core takes dist_ as the layer-wise distributed optimizer (optimizer/muon.py); without the
        # distributed-optimizer DDP buffers every parameter sits in its ping-pong shards: Megatron-LM's
        # --optimizer muon --use-distributed-optimizer --no-use-layer-wise-param-layout
        values["optimizer"] = (opt[0], "muon")
        values["use_distributed_optimizer"] = ("optimizer.optimizer", True)
        tokens.append("--no-use-layer-wise-param-layout")
    if "logit_dtype" in values:     # flagsA28: a torch dtype in Bridge (models/logit_dtype.py), a name for the flag
        where, v = values["logit_dtype"]
        values["logit_dtype"] = (where, _DTYPES.get(str(v), v))
    if values.get("recompute_modules", (None, None))[1] == []:
        values.pop("recompute_modules")          # Megatron-LM cannot write [] (nargs='+'): set in _after
    fp4 = values.get("fp4", (None, None))[1]
    if not values.get("fp8", (None, None))[1]:     # FP8-only fields of the preset's defaults: not read without FP8
        for dest in ("fp8_recipe", "fp8_param_gather", "fp8_margin", "fp8_amax_history_len", "fp8_amax_compute_algo",
                     "fp8_wgrad") + (() if fp4 else ("first_last_layers_bf16", "num_layers_at_start_in_bf16",
                                                     "num_layers_at_end_in_bf16")):
            values.pop(dest, None)
    if not fp4:     # FP4-only fields: not read without FP4 (fp4_utils.py)
        for dest in ("fp4_recipe", "fp4_param_gather"):
            values.pop(dest, None)
    if not values.get("defer_embedding_wgrad_compute", (None, None))[1]:
        values.pop("wgrad_deferral_limit", None)
    for dest, (where, value) in values.items():
        toks = _flag_tokens(dest, value, where)
        if toks:
            origin[toks[0]] = where
        tokens += toks
    return tokens, origin


def _after(cfg: dict, config: dict, notes: list) -> None:
    """What Megatron-LM's flags cannot say, set on the imported configuration."""
    m, ddp, opt = cfg.get("model") or {}, cfg.get("ddp") or {}, cfg.get("optimizer") or {}
    pr, tr = config.setdefault("precision", {}), config.setdefault("training", {})
    if ddp.get("grad_reduce_in_fp32") is not None and pr.get("params_dtype", "fp32") != "fp32":
        pr["accumulate_allreduce_grads_in_fp32"] = bool(ddp["grad_reduce_in_fp32"])
    if opt.get("store_param_remainders") is not None:
        pr["store_param_remainders"] = bool(opt["store_param_remainders"])
    if m.get("disable_parameter_transpose_cache") is not None:
        if pr.get("fp8") or pr.get("fp4"):
            pr["disable_parameter_transpose_cache"] = bool(m["disable_parameter_transpose_cache"])
        elif m["disable_parameter_transpose_cache"]:
            notes.append("model.disable_parameter_transpose_cache: no effect without FP8 or NVFP4 (no weight "
                         "transposes kept)")
    if m.get("freeze_mtp_model") not in (None, False):      # Exaone45Model.freeze (bridgeref29)
        if not isinstance(m["freeze_mtp_model"], bool):
            raise ConfigError(Problem("model.freeze_mtp_model", show(m["freeze_mtp_model"]), "must be true or false"))
        tr["freeze_mtp"] = True
    if ddp.get("megatron_fsdp_cuda_graph_mode"):     # a DDP field Megatron-LM has no flag for (flagsB28)
        config.setdefault("parallelism", {})["megatron_fsdp_cuda_graph_mode"] = True
    if m.get("use_transformer_engine_full_layer_spec"):      # no Megatron-LM flag either (vgraph29)
        tr["transformer_engine_full_layer_spec"] = True
    if m.get("recompute_modules") == [] and m.get("recompute_granularity") == "selective":
        tr["recompute_modules"] = []
        notes.append("model.recompute_modules = []: selective recompute of nothing, as Megatron-Core keeps it")
    co = cfg.get("comm_overlap") or {}
    ub = co.get("tp_comm_overlap_cfg") or m.get("tp_comm_overlap_cfg")
    if ub and m.get("tp_comm_overlap"):
        config.setdefault("parallelism", {})["tp_comm_overlap_cfg"] = ub if isinstance(ub, str) else dump(ub)
    env = cfg.get("env_vars") or {}
    for var, field in _ENV_FIELDS.items():
        if env.get(var) not in (None, ""):
            # ConfigContainer.env_vars: Bridge @ 067f987d : src/megatron/bridge/training/config.py
            # apply_environment_variables sets them (os.environ.setdefault) first thing in runtime_config_update,
            # before pretrain() sets up CUDA, so the caching allocator and cuBLAS see them
            tr[field] = str(env[var])
            notes.append(f"env_vars.{var}={env[var]}: read as training.{field}")
    if env.get("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN") not in (None, ""):
        ranks = str(env["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"])
        if not ranks.isdigit():
            raise ConfigError(Problem("env_vars.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", ranks, "must be a "
                                      "positive integer"))
        config.setdefault("model", {})["moe_hybridep_ranks_per_nvlink_domain"] = int(ranks)
    peft = cfg.get("peft")
    if isinstance(peft, str):
        peft = _peft(peft)
    if isinstance(peft, dict) and peft:
        target = str(peft.get("_target_", "megatron.bridge.peft.lora.LoRA")).rsplit(".", 1)[-1]
        if target not in _PEFT:
            raise BridgeRefusedError([(f"peft._target_ = {target}", "only LoRA and DoRA adapters are modelled")])
        tr["peft"] = _PEFT[target]
        if peft.get("dim") is not None:
            tr["peft_dim"] = peft["dim"]
        if peft.get("alpha") is not None:
            tr["peft_alpha"] = peft["alpha"]
        if peft.get("target_modules"):
            tr["peft_target_modules"] = list(peft["target_modules"])
        if m.get("multi_latent_attention"):
            _mla_targets(peft, tr, notes)
        # LoRA's MoE and sequence-parallel options (megatron/bridge/peft/lora.py LoRA; DoRA has neither field).
        for key in ("share_expert_adapters", "sequence_parallel_input_regather"):
            if peft.get(key) is not None:
                tr["peft_" + key] = peft[key]


#: Environment variables of ``env_vars`` with a memory effect -> the training field that holds them (the Megatron-LM
#: importer reads the same two from a launch line's environment, estimator/formats/megatron_args.py).
_ENV_FIELDS = {"PYTORCH_CUDA_ALLOC_CONF": "pytorch_cuda_alloc_conf",
               "CUBLAS_WORKSPACE_CONFIG": "cublas_workspace_config"}


#: LoRA's and DoRA's default target_modules (Bridge @ 067f987d : src/megatron/bridge/peft/lora.py LoRA).
_DEFAULT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


def _mla_targets(peft: dict, tr: dict, notes: list) -> None:
    """``linear_qkv`` adapts nothing in multi-latent attention: Bridge's ``ModuleMatcher.match`` (peft/
    module_matcher.py) takes a module whose name equals the target or whose full name matches it as a wildcard
    pattern (peft/utils.py ``wildcard_match``: ``^pattern$``, ``*`` for any substring), and MLA's projections are
    ``linear_q_proj``, ``linear_q_down_proj``, ``linear_q_up_proj``, ``linear_kv_down_proj``, ``linear_kv_up_proj``
    and ``linear_proj`` (Megatron-LM @ 2a75ac12 : megatron/core/transformer/multi_latent_attention.py), so Bridge
    warns and adds no adapter there. The target is dropped, with a note."""
    targets = list(peft.get("target_modules") or _DEFAULT_TARGETS)
    if "linear_qkv" in targets:
        tr["peft_target_modules"] = [t for t in targets if t != "linear_qkv"]
        notes.append("peft.target_modules: linear_qkv matches no module of multi-latent attention (its projections "
                     "are linear_q_*/linear_kv_*), so Bridge adds no adapter there; adapters counted on "
                     + ", ".join(tr["peft_target_modules"]))
