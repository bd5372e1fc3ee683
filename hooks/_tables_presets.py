"""Views of the preset pages: model summary, parameter breakdown, per-stage memory, layout grid, fit.

Everything comes from the estimator: :mod:`estimator.formats.presets` for the configurations and their
provenance, :func:`estimator.estimate` for every memory figure, :mod:`estimator.formats.gpus` for capacities
and the fit verdicts, and :func:`estimator.plan.search.search` for the best layouts (see
:func:`best_layouts`). The layouts of the grid are data (``hooks/layouts.yaml``); this module only applies them to a
preset's configuration and lets the estimator reject the ones that do not apply.
"""

from __future__ import annotations

import functools
import importlib

import yaml

import estimator
from estimator.formats import gpus as _gpus
from estimator.formats import presets as _presets
from estimator.plan import verdicts
from estimator.model.resolve import resolve

from _tables_base import HOOKS, MarkerError, merge
import _tables_svg as svg
import _tables_timeline

PARAM_COMPONENTS = (
    ("embedding", "Word embedding"), ("position_embedding", "Position embedding"), ("attention", "Attention"),
    ("mamba", "Mamba-2 mixers"), ("linear_attention", "Gated delta nets (linear attention)"),
    ("mlp", "Dense MLP"), ("moe_router", "MoE routers (and shared-expert gates)"),
    ("moe_experts", "Routed experts"), ("moe_shared_experts", "Shared experts"),
    ("moe_latent", "Latent MoE projections"), ("norms", "Norms"),
    ("hyper_connections", "Hyper-connections (mHC)"), ("output_layer", "Output layer (untied)"),
    ("mtp", "Multi-token prediction"), ("vision", "Vision tower and projectors"),
)
RECOMPUTE = {
    "none": {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
             "recompute_modules": None},
    "selective": {"recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None,
                  "recompute_modules": None},
    "full": {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1,
             "recompute_modules": None},
}
ACTIVATIONS = {"swiglu": "SwiGLU", "geglu": "GeGLU", "gelu": "GELU", "silu": "SiLU", "relu": "ReLU",
               "squared_relu": "squared ReLU", "quick_gelu": "quick GELU"}
LAYOUT_KEYS = {"tp", "pp", "cp", "ep", "etp", "sp", "recompute"}


# --- presets and GPUs ----------------------------------------------------------------------------

@functools.cache
def _names() -> tuple[str, ...]:
    names = tuple(_presets.list_presets())
    if not names:
        raise MarkerError("estimator.formats.presets.list_presets() is empty")
    return names


def _check(name: str) -> None:
    if name not in _names():
        raise MarkerError(f"unknown preset {name!r}; presets: {', '.join(_names())}")


@functools.cache
def info(name: str) -> dict:
    _check(name)
    return dict(_presets.preset_info(name))


def title(name: str) -> str:
    return info(name).get("title") or name


def titles() -> list[tuple[str, str]]:
    return [(n, title(n)) for n in _names()]


def config_dict(name: str) -> dict:
    """The preset's configuration as written (four sections)."""
    _check(name)
    return _presets.load_preset(name).to_dict()


def gpu(name: str) -> dict:
    try:
        g = _gpus.get_gpu(name)
    except (KeyError, LookupError, ValueError) as exc:
        raise MarkerError(f"unknown GPU {name!r}: {exc}") from None
    return {"key": name, "label": g.name, "memory_bytes": g.memory_bytes, "source": g.source}


def fit_peak(est, g: dict) -> dict:
    """Whether the fullest stage fits on GPU ``g``, by the one rule of estimator.formats.gpus.fit (the upper bound,
    nothing kept free by default), with the verdict in the calculator's words (fits, fits within the error band,
    does not fit) and ``attr`` for data-fits (yes, tight, no)."""
    fits = _gpus.fit(est, g["memory_bytes"])
    v = verdicts.worst_verdict(fits)
    return {"gpu": g, "fits": v.fits, "verdict": v.verdict, "word": verdicts.word(v.verdict),
            "attr": {"fits": "yes"}.get(v.verdict, v.verdict), "headroom_bytes": v.headroom_bytes,
            "device_bytes": v.device_bytes, "upper_bound_bytes": v.upper_bound_bytes, "reason": v.band.reason,
            "stage": v.stage, "all": fits}


# --- tables of one estimate ----------------------------------------------------------------------

def stage_rows(est) -> list[dict]:
    rows = []
    for s in est.stages:
        extra = [x for x, on in (("embedding", s.has_embedding), ("output layer", s.has_output_layer),
                                 (f"{s.mtp_layers} MTP", s.mtp_layers)) if on]
        if len(s.chunks) > 1:
            extra.append("in flight per chunk: " + ", ".join(str(c.microbatches_in_flight) for c in s.chunks))
        rows.append({"stage": s.stage, "layers": s.label, "extra": "; ".join(extra),
                     "in_flight": s.microbatches_in_flight, "s": s, "peak": s.stage == est.peak.stage})
    return rows


def stage_segments(est) -> list[dict]:
    """The parts of each stage's device memory, for the stacked bar chart."""
    return [{"label": f"Stage {s.stage}", "weights": s.weights_bytes, "gradients": s.gradients_bytes,
             "optimizer": s.optimizer_bytes, "activations": s.activations_bytes, "transient": s.transient_bytes,
             "reserve": s.reserved_bytes - s.allocated_bytes, "runtime": s.device_bytes - s.reserved_bytes}
            for s in est.stages]


def _attention_label(r) -> str:
    if r.mla:
        q = f"query rank {r.q_lora}" if r.q_lora else "no query compression"
        return (f"Multi-latent attention: {r.a} heads, {q}, key/value rank {r.kv_lora}, "
                f"head width {r.qk_dim} + {r.rope_dim} rotary, value width {r.v_dim}")
    kind = "Multi-head" if r.g == r.a else ("Multi-query" if r.g == 1 else "Grouped-query")
    extra = "".join(x for x, on in ((", output gate", r.gate), (", learned attention sinks", r.sinks)) if on)
    return f"{kind} attention: {r.a} query heads, {r.g} key/value heads, head width {r.dh}{extra}"


def _layers_label(r, p) -> str:
    if len(p.layer_kinds) > 1 and (r.cfg.model.hybrid_layer_pattern or any(k.mixer == "gdn" for k in r.kinds)):
        kinds = "; ".join(f"{n} {label}" for label, n in p.layer_kinds.items())
        return f"{r.L} ({kinds})"
    return f"{r.L}" + (f" ({p.dense_layers} dense, {p.moe_layers} MoE)" if r.E else "")


def model_summary(cfg, r, p) -> list[tuple[str, str]]:
    m = cfg.model
    rows = [("Layers", _layers_label(r, p) + (f" + {r.mtp} multi-token-prediction" if r.mtp else "")),
            ("Hidden size", f"{r.h:,}"), ("Attention", _attention_label(r))]
    if r.mamba:
        mb = r.mamba
        rows.append(("Mamba-2", f"{mb.heads} heads of {mb.head_dim}, {mb.groups} groups, state {mb.state}"))
    if r.gdn:
        g = r.gdn
        rows.append(("Gated delta net", f"{g.key_heads} key heads of {g.key_dim}, {g.value_heads} value heads of "
                     f"{g.value_dim}, convolution {g.conv}"))
    act = ACTIVATIONS.get(m.activation_func, m.activation_func)
    act += " (gated)" if r.gated and m.activation_func not in ("swiglu", "geglu") else ""
    if r.E:
        rows.append(("Experts", f"{r.E} routed, top-{r.k}, expert width {r.fm:,}"
                     + (f", latent width {r.lat:,}" if r.lat else "")
                     + (f"; shared expert width {r.fs:,}" if r.fs else "; no shared expert")))
        if p.dense_layers:
            rows.append(("Dense MLP", f"{act}, width {r.f:,} (the {p.dense_layers} dense layers)"))
        else:
            rows.append(("Expert MLP", act))
    else:
        rows.append(("MLP", f"{act}, width {r.f:,}"))
    rows += [("Vocabulary", f"{r.V:,} (padded to {r.Vp:,} at TP {r.t})"),
             ("Position embedding", m.position_embedding_type), ("Normalization", m.normalization
                                                                 + (", query/key norm" if m.qk_layernorm else "")
                                                                 + (", post-attention and post-MLP norms"
                                                                    if m.post_layernorm else "")),
             ("Embeddings", "untied (separate output layer)" if not r.tied else "tied to the output layer"),
             ("Sequence length", f"{r.s:,} tokens")]
    return rows


def param_rows(p) -> list[dict]:
    rows = [{"key": k, "label": label, "count": getattr(p, k), "share": getattr(p, k) / p.total * 100}
            for k, label in PARAM_COMPONENTS if getattr(p, k)]
    if sum(r["count"] for r in rows) != p.total:
        raise MarkerError(f"parameter components sum to {sum(r['count'] for r in rows):,}, "
                          f"not to the total {p.total:,}")
    return rows


def published(name: str, p) -> list[dict]:
    """The owner's published counts next to ours, with estimator.formats.presets.published_bounds' verdict."""
    i = info(name)
    rows = []
    for kind, ours in (("total", p.total), ("active", p.active)):
        text = i.get(f"published_{kind}_text")
        if not text:
            continue
        notes = []
        if p.vocab_padding:
            ours -= p.vocab_padding
            notes.append(f"without the {p.vocab_padding:,} parameters of Megatron's vocabulary padding")
        if i.get("published_total_excludes") == "mtp" and p.mtp:
            ours -= p.mtp if kind == "total" else p.mtp_active
            notes.append("without the MTP layer, as the owner counts it")
        if kind == "active" and i.get("published_active_excludes") == "embedding":
            ours -= p.embedding - p.vocab_padding // (2 if p.output_layer else 1)   # the unpadded embedding
            notes.append("without the input embedding, as the owner counts it")
        note = f" ({'; '.join(notes)})" if notes else ""
        lo, hi = _presets.published_bounds(text)
        exact = bool(i.get(f"published_{kind}_exact"))
        if lo <= ours <= hi:
            verdict = "equal" if exact else "consistent with the rounded figure"
        else:
            verdict = f"differs by {ours - (lo if ours < lo else hi):+,}" + (" (see below)" if i.get(
                "published_note") else "")
        rows.append({"kind": kind, "text": text, "ours": ours, "note": note, "ok": lo <= ours <= hi,
                     "verdict": verdict})
    return rows


# --- the layout grid -----------------------------------------------------------------------------

@functools.cache
def grid_data() -> dict:
    path = HOOKS / "layouts.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key in ("fit_gpus", "search_gpu", "classes"):
        if key not in data:
            raise MarkerError(f"{path.name}: missing {key!r}")
    for c in data["classes"]:
        for kind in ("dense", "moe"):
            for lay in c.get(kind) or []:
                bad = set(lay) - LAYOUT_KEYS
                if bad or lay.get("recompute", "none") not in RECOMPUTE:
                    raise MarkerError(f"{path.name}: bad layout {lay} (keys: {', '.join(sorted(LAYOUT_KEYS))}; "
                                      f"recompute: {', '.join(RECOMPUTE)})")
    return data


def fit_gpus() -> list[dict]:
    return [gpu(n) for n in grid_data()["fit_gpus"]]


def layout_overrides(layout: dict, world: int, num_layers: int) -> dict:
    """The fields one grid row sets on top of the preset (every parallelism field it depends on)."""
    tp, pp = layout.get("tp", 1), layout.get("pp", 1)
    last = None
    if num_layers % pp:
        each = -(-num_layers // pp)
        last = num_layers - each * (pp - 1)
    par = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
           "context_parallel_size": layout.get("cp", 1), "expert_model_parallel_size": layout.get("ep", 1),
           "expert_tensor_parallel_size": layout.get("etp"), "virtual_pipeline_model_parallel_size": None,
           "num_layers_in_first_pipeline_stage": None, "num_layers_in_last_pipeline_stage": last,
           "pipeline_model_parallel_layout": None, "account_for_embedding_in_pipeline_split": False,
           "account_for_loss_in_pipeline_split": False, "microbatch_group_size_per_vp_stage": None}
    tr = {"world_size": world, "global_batch_size": None, "micro_batch_size": 1,
          "sequence_parallel": bool(layout.get("sp", False)), **RECOMPUTE[layout.get("recompute", "none")]}
    return {"parallelism": par, "training": tr}


def grid(name: str, base: dict, total_params: int, is_moe: bool) -> list[dict]:
    data = grid_data()
    cls = next((c for c in data["classes"] if total_params <= float(c["max_total_params"])), None)
    if cls is None:
        raise MarkerError(f"layouts.yaml has no size class for {total_params:,} parameters")
    layouts = cls.get("moe" if is_moe else "dense") or []
    gpus = fit_gpus()
    groups = []
    for world in cls["gpu_counts"]:
        rows = []
        for lay in layouts:
            over = layout_overrides(lay, world, base["model"]["num_layers"])
            try:
                est = estimator.estimate(merge(base, over))
            except (estimator.ConfigError, estimator.UnsupportedError):
                continue           # this layout does not apply to this model at this GPU count, or is not modelled
                #                    for it (Wan: selective recompute, pipeline parallelism)
            par = est.parallel
            rows.append({"overrides": over, "est": est, "par": par, "layout": lay,
                         "recompute": lay.get("recompute", "none"),
                         "fits": [fit_peak(est, g) for g in gpus]})
        groups.append({"world": world, "rows": rows})
    if not any(g["rows"] for g in groups):
        raise MarkerError(f"no layout of layouts.yaml applies to preset {name!r}")
    return groups


def best_layouts(name: str, counts: list[int]) -> list[dict]:
    """HOOK FOR THE LAYOUT SEARCH (issue 6): the three best layouts on ``search_gpu`` at each GPU count,
    as :func:`estimator.plan.search.search` ranks them (every layout carries the configuration it was
    estimated with)."""
    search = importlib.import_module("estimator.plan.search").search   # the module, not the package's re-export
    g = grid_data()["search_gpu"]
    return [{"world": n, "layouts": list(search(name, num_gpus=n, gpu=g, top=3).layouts)} for n in counts]


# --- pages ---------------------------------------------------------------------------------------

def page(name: str) -> dict:
    _check(name)
    cfg = _presets.load_preset(name)
    base = cfg.to_dict()
    est = estimator.estimate(cfg)
    r = resolve(cfg)
    p = est.parameters
    gpus = fit_gpus()
    groups = grid(name, base, p.total, bool(r.E))
    target = gpu(grid_data()["search_gpu"])
    chart = svg.stage_bars("chart-stages", f"Memory per GPU of each pipeline stage, {title(name)} preset",
                           stage_segments(est), [(g["label"], g["memory_bytes"]) for g in gpus],
                           selected=target["label"])
    target_fit = fit_peak(est, target)
    timeline = _tables_timeline.timeline_chart("chart-timeline", f"Memory of each pipeline stage over one training "
                                               f"step, {title(name)} preset", est, target)
    return {
        "name": name, "title": title(name), "info": info(name), "summary": model_summary(cfg, r, p),
        "vocab_size": r.V, "params": p, "param_rows": param_rows(p), "published": published(name, p),
        "mtp_layers": r.mtp,
        "est": est, "stages": stage_rows(est), "chart": chart, "timeline": timeline,
        "breakdown": _tables_timeline.peak_breakdown(est), "fits": [fit_peak(est, g) for g in gpus],
        "target": target_fit, "why": verdicts.explain(est, target_fit["all"], base),
        "gpus": gpus, "groups": groups, "moe": bool(r.E),
        "search": best_layouts(name, [gr["world"] for gr in groups]),
        "search_gpu": gpu(grid_data()["search_gpu"]), "config_yaml": estimator.config.yamlio.dump(base).rstrip(),
    }


def index() -> dict:
    rows = []
    for name in _names():
        cfg = _presets.load_preset(name)
        r = resolve(cfg)
        p = estimator.count_parameters_of(cfg)
        rows.append({"name": name, "title": title(name), "total": p.total, "active": p.active, "layers": r.L,
                     "hidden": r.h, "experts": f"{r.E} (top-{r.k})" if r.E else "dense",
                     "attention": "MLA" if r.mla else ("MHA" if r.g == r.a else ("MQA" if r.g == 1 else "GQA")),
                     "source": info(name).get("source", "")})
    return {"rows": rows}
