"""Layouts on the calculator page: the layout search as the page asks for it, a search result in words, the form
state of a chosen layout, and the key that says when a search is stale.
"""

from __future__ import annotations

import json

from ..config.errors import ConfigError, EstimatorError, Problem, n_gpus, show
from ..config.schema import MAX_GPUS
from ..memory.report import GIB
from .state import (CUSTOM_GPU, FIELD_SPECS, base_config, error_answer, errors_answer, flatten, gpu_table,
                    merged_config, preset_config, state_capacity)

__all__ = ["NOTATION", "find_layouts", "layout_state", "layout_words", "search_key"]

#: Fields the layout search chooses: a change to any other field makes its results stale.
_SEARCHED = frozenset({
    "parallelism.tensor_model_parallel_size", "parallelism.pipeline_model_parallel_size",
    "parallelism.virtual_pipeline_model_parallel_size", "parallelism.context_parallel_size",
    "parallelism.expert_model_parallel_size", "parallelism.expert_tensor_parallel_size",
    "parallelism.num_layers_in_first_pipeline_stage", "parallelism.num_layers_in_last_pipeline_stage",
    "parallelism.pipeline_model_parallel_layout", "parallelism.account_for_embedding_in_pipeline_split",
    "parallelism.account_for_loss_in_pipeline_split", "parallelism.microbatch_group_size_per_vp_stage",
    "training.micro_batch_size", "training.use_distributed_optimizer", "training.sequence_parallel",
    "training.recompute_granularity", "training.recompute_method", "training.recompute_num_layers",
    "training.recompute_modules"})



def search_key(cfg: dict, state: dict) -> str:
    """What a layout search depends on: the configuration without the fields it chooses, and the GPU."""
    rest = {p: v for p, v in flatten(cfg).items() if p not in _SEARCHED}
    return json.dumps([rest, state.get("gpu"), state.get("gpu_gib") if state.get("gpu") == CUSTOM_GPU else None],
                      sort_keys=True, default=str)


def layout_state(state: dict, config: dict) -> dict:
    """The form state whose configuration is ``config`` (complete, e.g. a search result): the preset kept,
    only the fields that differ from it set. A field the preset sets and ``config`` leaves out (an uneven
    split, the interleaved schedule, recompute settings of another layout) is set to its default, so the
    state gives exactly ``config``'s estimate."""
    preset = state.get("preset") or None
    base = flatten(preset_config(preset)) if preset else {}
    if state.get("hf"):                       # the catalog model in place of the preset's (estimator.web.state)
        base = flatten(base_config({**state, "gpu": None})[0])
    target = flatten(config)
    # The architecture of the state's catalog GPU is the GPU's to set (estimator.web.state.base_config), not a value.
    g = gpu_table().get(state.get("gpu")) if isinstance(state.get("gpu"), str) else None
    if getattr(g, "arch", None) is not None and target.get("training.gpu_arch") in (None, g.arch):
        target.pop("training.gpu_arch", None)
        base.pop("training.gpu_arch", None)
    values = {}
    for path, v in target.items():
        if path in base:
            if base[path] != v:
                values[path] = v
        elif v != FIELD_SPECS[path].default:
            values[path] = v
    for path in base:
        if path not in target:
            values[path] = FIELD_SPECS[path].default
    out = {"preset": preset, "values": values, "gpu": state.get("gpu")}
    if state.get("hf"):
        out["hf"] = state["hf"]
    if state.get("gpu") == CUSTOM_GPU:
        out["gpu_gib"] = state.get("gpu_gib")
    return out


#: How to read a layout label, shown beside the search results.
NOTATION = ("How to read a layout: TP tensor, PP pipeline, VPP virtual pipeline (interleaved schedule), CP "
            "context, EP expert, ETP expert tensor and DP data-parallel size; mbs the micro-batch size, then the "
            "recomputation. PP16[1/-] means 16 pipeline stages whose first holds 1 layer and whose last holds "
            "the even share of the rest (-): the numbers in brackets are num_layers_in_first_pipeline_stage / "
            "num_layers_in_last_pipeline_stage. PP8[E/L]: the embedding (E) and the loss (L) each count as a "
            "layer slot of the split (account_for_embedding/loss_in_pipeline_split); PP16[layout]: the "
            "configuration's own pipeline_model_parallel_layout. full: full recomputation of every layer; "
            "full-uniform2: in groups of 2 layers; full-block3: of the first 3 layers of each virtual chunk. "
            "no-distopt: without the distributed optimizer.")


def _recompute_words(lay) -> str:
    if lay.recompute == "none":
        return "no recomputation"
    if lay.recompute == "selective":
        return "selective recomputation"
    n = lay.recompute_num_layers or 1
    if lay.recompute_method == "block":
        return f"full recomputation of the first {n} layer{'s' if n > 1 else ''} of each chunk"
    return "full recomputation" + (f" in groups of {n} layers" if n > 1 else "")


def layout_words(lay) -> str:
    """A search layout in words, e.g. "TP 2, 16 pipeline stages (first 1 layer), EP 32, ..."."""
    pp = f"{lay.pp} pipeline stage{'s' if lay.pp > 1 else ''}"
    split = [f"{which} stage {n} layer{'s' if n != 1 else ''}" for which, n in
             (("first", lay.first_stage_layers), ("last", lay.last_stage_layers)) if n is not None]
    if lay.account_for_embedding or lay.account_for_loss:
        split.append(" and ".join(x for x, on in (("embedding", lay.account_for_embedding),
                                                  ("loss", lay.account_for_loss)) if on) + " as layer slots")
    if lay.pipeline_layout:
        split.append("the configuration's pipeline layout")
    if split:
        pp += " (" + ", ".join(split) + ")"
    parts = [f"TP {lay.tp}", pp]
    if lay.vpp > 1:
        parts.append(f"{lay.vpp} virtual stages each")
    if lay.cp > 1:
        parts.append(f"CP {lay.cp}")
    if lay.ep > 1 or lay.etp != lay.tp:
        parts.append(f"EP {lay.ep}, ETP {lay.etp}")
    parts.append(f"DP {lay.dp}")
    parts.append(f"micro-batch {lay.micro_batch_size}")
    parts.append(_recompute_words(lay))
    if lay.sequence_parallel:
        parts.append("sequence parallel")
    return ", ".join(parts)


def _gpu_count(cfg: dict):
    """The form's GPU count, read alone: the search replaces the layout, so a layout the count refuses (a global
    batch DP does not divide, ...) does not stop it. (count, problems)."""
    n = (cfg.get("training") or {}).get("world_size")
    if n is None:
        return None, [Problem("training.world_size", None, "set the number of GPUs to search for layouts")]
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_GPUS:
        return None, [Problem("training.world_size", show(n), f"must be a whole number of GPUs from 1 to {MAX_GPUS:,}, "
                              f"got {show(n)}")]
    return n, []


def find_layouts(state: dict, top: int = 10, **options) -> dict:
    """The best parallel layouts of this model on ``training.world_size`` GPUs of the chosen GPU; ``options``
    go to :func:`estimator.plan.search.search` (``num_gpus``, ``headroom``, pinned fields: see
    :func:`estimator.web.plan.search_options`). The form's own layout need not be valid on that count: the search
    chooses the layout, and the answer's ``current`` says whether the form's layout has to change, or where it
    ranks."""
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = state_capacity(state)
    if problems or gpu_problems:
        return errors_answer(problems + gpu_problems)
    if not capacity:
        return error_answer("gpu", None, "choose a GPU to search for layouts that fit")
    try:
        from ..plan.search import search
        n = options.pop("num_gpus", None)
        if not n:
            n, bad = _gpu_count(cfg)
            if bad:
                return errors_answer(bad)
        result = search(cfg, num_gpus=n, gpu=gpu if state.get("gpu") != CUSTOM_GPU else capacity, top=top, **options)
    except ConfigError as exc:
        return errors_answer(exc.problems)
    except (EstimatorError, ValueError, NotImplementedError) as exc:
        return error_answer("search", None, str(exc) or "the layout search is not available in this version")
    several = len(result.num_gpus) > 1
    layouts = [{"label": lay.label, "words": (f"{n_gpus(lay.num_gpus)}: " if several else "") + layout_words(lay),
                "why": lay.why, "config": lay.config, "num_gpus": lay.num_gpus,
                "peak": f"{lay.peak_device_bytes / GIB:.2f} GiB", "peak_bytes": lay.peak_device_bytes,
                "headroom": f"{lay.headroom_bytes / GIB:.2f} GiB ({100 * lay.headroom_fraction:.0f} %)"}
               for lay in result.layouts]
    cur = result.current
    return {"layouts": layouts, "summary": result.summary(), "notes": list(result.notes), "notation": NOTATION,
            "current": cur.to_dict() if cur else None, "why_none": result.why_none,
            "gpus": n if not several else ", ".join(f"{g:,}" for g in result.num_gpus), "gpu": gpu,
            "elapsed_s": round(result.elapsed_s, 3), "search_key": search_key(cfg, state)}
