"""The layout search's inputs, read and checked: the model or configuration, the GPU, the GPU counts and the fields
the caller pins.

:class:`estimator.plan.space.SearchEngine` takes what these functions return; a bad input raises
:class:`estimator.config.errors.ConfigError` naming ``search.<option>`` (or the configuration's own field), the value
and what is allowed, never a traceback.

Which fields the search chooses (:data:`SEARCHED`), which it keeps as the user set them while it varies the layout
(:data:`PAR_KEPT`), and which are the search's own arguments (:data:`OWN_ARGS`) are listed here once.
"""

from __future__ import annotations

import copy
import itertools
import os
from pathlib import Path

from ..config.errors import ConfigError, PresetNotFoundError, Problem, clip, show
from ..config.load import parse_text, path_kind, read_text_file, too_deep
from ..config.schema import MAX_GPUS, MAX_LAYERS, Config, section_specs
from ..memory.report import GIB

__all__ = ["MAX_CHOICES", "MAX_GPU_BYTES", "OPTION_ALIASES", "OWN_ARGS", "PAR_KEPT", "RECOMPUTE_GRANULARITIES",
           "RECOMPUTE_METHODS", "SEARCHED", "SPLIT_FIELDS", "fixed_fields", "gpu_capacity", "option_error",
           "pinned_layers", "positive_ints", "source_dict", "world_sizes"]

RECOMPUTE_GRANULARITIES = ("none", "selective", "full")
#: Full recomputation's methods (Megatron-Core's ``recompute_method``): ``uniform`` groups of
#: ``recompute_num_layers`` layers keep only each group's input; ``block`` recomputes the first
#: ``recompute_num_layers`` layers of every virtual chunk and keeps everything of the rest.
RECOMPUTE_METHODS = ("uniform", "block")
OPTION_ALIASES = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
                  "vpp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
                  "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size", "mbs": "micro_batch_size",
                  "first_stage_layers": "num_layers_in_first_pipeline_stage",
                  "last_stage_layers": "num_layers_in_last_pipeline_stage",
                  "layout": "pipeline_model_parallel_layout",
                  "account_for_embedding": "account_for_embedding_in_pipeline_split",
                  "account_for_loss": "account_for_loss_in_pipeline_split"}
#: Pipeline-split fields: how the decoder layers are placed on the stages (Megatron-Core's four ways,
#: :mod:`estimator.config.pipeline_layout`). The search enumerates the even split, the uneven first/last ones,
#: the embedding/loss layer slots, and the configuration's own layout string; pinning one restricts the splits.
SPLIT_FIELDS = ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
                "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                "pipeline_model_parallel_layout")
#: Fields the search chooses; pinning one restricts that dimension.
SEARCHED = frozenset({"tensor_model_parallel_size", "pipeline_model_parallel_size",
                      "virtual_pipeline_model_parallel_size", "context_parallel_size", "expert_model_parallel_size",
                      "expert_tensor_parallel_size", "micro_batch_size", "use_distributed_optimizer",
                      "recompute_granularity", "recompute_method", "recompute_num_layers", "sequence_parallel",
                      *SPLIT_FIELDS})
#: Parallelism fields the search keeps as the user set them while it varies the layout (FSDP, HSDP, buffers).
#: ``microbatch_group_size_per_vp_stage`` is kept on the layouts that can take it (virtual stages, PP <= it).
PAR_KEPT = ("cp_comm_type", "use_megatron_fsdp", "use_torch_fsdp2", "data_parallel_sharding_strategy",
            "outer_dp_sharding_strategy", "num_distributed_optimizer_instances", "fsdp_double_buffer",
            "suggested_communication_unit_size", "torch_fsdp2_reshard_after_forward", "tp_comm_overlap",
            "tp_comm_overlap_cfg", "nccl_ub", "hybrid_context_parallel", "max_seqlen_per_dp_cp_rank")
#: Fields set by the search's own arguments, and the argument that sets each.
OWN_ARGS = {"world_size": "num_gpus", "seq_length": "seq_length", "global_batch_size": "global_batch_size",
            "recompute_modules": "recompute"}
#: Most values a list-valued search option (GPU counts, micro-batch sizes, pinned sizes) may hold.
MAX_CHOICES = 64
#: Largest GPU memory accepted, in bytes (1 PiB).
MAX_GPU_BYTES = 2 ** 50
_BOOL_PINS = ("sequence_parallel", "use_distributed_optimizer", "account_for_embedding_in_pipeline_split",
              "account_for_loss_in_pipeline_split")


def option_error(name: str, value, message: str) -> ConfigError:
    return ConfigError(Problem(f"search.{name}", value, message))


def positive_ints(name: str, values, *, allow_empty: bool = False, top: int = MAX_GPUS) -> tuple:
    """One positive integer or an iterable of at most :data:`MAX_CHOICES` of them, each <= ``top``: sorted,
    without repeats. Anything else is a ConfigError naming ``search.<name>``."""
    if isinstance(values, (str, bytes, dict)):
        raise option_error(name, show(values), "must be a positive integer or a list of them")
    try:
        vals = (values,) if isinstance(values, int) else tuple(itertools.islice(values, MAX_CHOICES + 1))
    except TypeError:
        raise option_error(name, show(values), "must be a positive integer or a list of them") from None
    if not vals and not allow_empty:
        raise option_error(name, list(vals), "needs at least one value")
    if len(vals) > MAX_CHOICES:
        raise option_error(name, show(values), f"takes at most {MAX_CHOICES} values")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise option_error(name, show(v), f"must be a positive integer, got {show(v)}")
        if v > top:
            raise option_error(name, show(v), f"must be <= {top:,}, got {show(v)}")
    return tuple(sorted(set(vals)))


def pinned_layers(name: str, values) -> tuple:
    """Pinned first/last stage layer counts: non-negative integers or null (the even split)."""
    vals = tuple(values) if isinstance(values, (list, tuple, set, frozenset)) else (values,)
    if len(vals) > MAX_CHOICES or not vals:
        raise option_error(name, show(values), f"takes 1 to {MAX_CHOICES} values")
    for v in vals:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_LAYERS):
            raise option_error(name, show(v), f"must be null or an integer in 0..{MAX_LAYERS:,}, got {show(v)}")
    return vals


def fixed_fields(fixed: dict) -> tuple[dict, dict]:
    """Split ``fixed`` into pinned searched dimensions (name -> tuple of allowed values) and plain field overrides
    (name -> (section, value))."""
    sections = {s.name: sec for sec in ("parallelism", "training", "precision") for s in section_specs(sec)}
    model_fields = {s.name for s in section_specs("model")}
    pins, overrides = {}, {}
    for key, value in fixed.items():
        name = OPTION_ALIASES.get(key, key)
        if name in OWN_ARGS:
            raise option_error(key, show(value), f"set it with the {OWN_ARGS[name]} argument of search()")
        if name in SEARCHED:
            pins[name] = tuple(itertools.islice(value, MAX_CHOICES + 1)) \
                if isinstance(value, (list, tuple, set, frozenset)) else (value,)
            if not pins[name] or len(pins[name]) > MAX_CHOICES:
                raise option_error(key, show(value), f"takes 1 to {MAX_CHOICES} values, got {show(value)}")
            if name in _BOOL_PINS and not all(isinstance(x, bool) for x in pins[name]):
                raise option_error(key, show(value), f"must be true and/or false (as YAML spells them: true, True, "
                                   f"TRUE, false, ...), got {show(value)}")
            if name == "pipeline_model_parallel_layout" and not all(x is None or isinstance(x, str)
                                                                    for x in pins[name]):
                raise option_error(key, show(value), f"must be layout strings (e.g. 'Et|(tt|)*30mL') or null, got "
                                   f"{show(value)}")
        elif name in sections:
            overrides[name] = (sections[name], value)
        elif name in model_fields:
            raise option_error(key, show(value), "model fields belong in the model, not in the search's fixed fields")
        else:
            allowed = sorted(set(OPTION_ALIASES) | SEARCHED | set(sections) - set(OWN_ARGS))
            raise option_error(clip(str(key)), show(value), "unknown field; allowed: " + ", ".join(allowed))
    return pins, overrides


def source_dict(model_or_config) -> dict:
    """The user's configuration as plain data (not yet validated: world_size and layout may be missing)."""
    if isinstance(model_or_config, Config):
        data = model_or_config.to_dict()
    elif isinstance(model_or_config, dict):
        if too_deep(model_or_config):
            raise ConfigError(Problem("config", None, "nested deeper than a configuration can be"))
        data = copy.deepcopy(model_or_config)
        if "model" not in data and "num_layers" in data:
            data = {"model": data}
    elif isinstance(model_or_config, (str, os.PathLike)):
        s = os.fspath(model_or_config)
        path = Path(s)
        if "\n" in s or s.lstrip().startswith("{"):
            data = parse_text(s)
        elif path.suffix.lower() in (".yaml", ".yml", ".json") or path_kind(path) is not None:
            data = parse_text(read_text_file(path), path.suffix.lower())
        else:
            try:
                from ..formats.presets import load_preset
            except ImportError:
                raise option_error("model", s, "not a file, and presets are not available") from None
            try:
                data = load_preset(s).to_dict()
            except PresetNotFoundError as exc:
                raise option_error("model", clip(s), f"neither a configuration file nor a preset ({exc})") from None
    else:
        raise option_error("model", type(model_or_config).__name__, "expected a preset name, a configuration "
                           "(path, YAML/JSON text, dict or Config) or a model section (dict)")
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ConfigError(Problem("model", None, "the configuration needs a 'model' section"))
    bad = [Problem(sec, data[sec], f"must be a mapping of field: value, got {show(data[sec])}")
           for sec in ("parallelism", "training", "precision") if not isinstance(data.get(sec), (dict, type(None)))]
    if bad:
        raise ConfigError(bad)
    return data


def gpu_capacity(gpu) -> tuple[int, dict]:
    """GPU memory in bytes and a description (name, memory_bytes, source, arch: its ``training.gpu_arch``, None for a
    number of bytes), from a GPU name, a GPU object or a number of bytes."""
    if isinstance(gpu, bool) or gpu is None:
        raise option_error("gpu", gpu, "expected a GPU name (e.g. H100-80GB) or a memory size in bytes")
    if isinstance(gpu, int):
        if not 0 < gpu <= MAX_GPU_BYTES:
            raise option_error("gpu", show(gpu), f"the GPU memory must be a positive number of bytes, at most "
                               f"{MAX_GPU_BYTES:,} (1 PiB), got {show(gpu)}")
        return gpu, {"name": f"{gpu / GIB:.2f} GiB", "memory_bytes": gpu, "source": "given", "arch": None}
    if hasattr(gpu, "memory_bytes"):
        return int(gpu.memory_bytes), {"name": getattr(gpu, "name", "GPU"), "memory_bytes": int(gpu.memory_bytes),
                                       "source": getattr(gpu, "source", ""), "arch": getattr(gpu, "arch", None)}
    if isinstance(gpu, str):
        try:
            from ..formats.gpus import get_gpu
        except ImportError:
            raise option_error("gpu", gpu, "GPU names need estimator.formats.gpus; give the memory in bytes") from None
        try:
            g = get_gpu(gpu)
        except ConfigError as exc:
            raise option_error("gpu", clip(gpu), "; ".join(p.message for p in exc.problems)) from None
        except (LookupError, ValueError) as exc:
            raise option_error("gpu", clip(gpu), str(exc) or "unknown GPU") from None
        return gpu_capacity(g)
    raise option_error("gpu", show(gpu), "expected a GPU name (e.g. H100-80GB) or a memory size in bytes")


def world_sizes(num_gpus) -> tuple:
    if isinstance(num_gpus, bool) or num_gpus is None:
        raise option_error("num_gpus", num_gpus, "must be a positive integer or a list of them")
    try:
        return positive_ints("num_gpus", num_gpus)
    except TypeError:
        raise option_error("num_gpus", num_gpus, "must be a positive integer or a list of them") from None
