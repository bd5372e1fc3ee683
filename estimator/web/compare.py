"""The calculator's comparison: up to four pinned configurations side by side.

:func:`estimator.web.handle` passes ``{"op": "compare", "pins": [state, ...]}`` here (each pin a form state as in
:mod:`estimator.web`). The answer gives, per pin, what the page prints in its column (a title, the GPU, the
verdict in the words of :mod:`estimator.plan.verdicts`, the peak and every stage's device memory in GiB, and what
the peak stage holds: weights, gradients, optimizer states, activations, transient buffers), and the fields whose values differ between the pins (defaults filled in, so a
field one pin leaves out and another sets to its default does not differ), with their labels. A pin that is
not valid gets its errors in its column. Every figure comes from :func:`estimator.estimate`.
"""

from __future__ import annotations

from ..config.errors import EstimatorError, Problem
from ..config.load import load_config
from ..config.schema import SECTIONS
from ..memory.report import GIB
from .form import label

__all__ = ["MAX_PINS", "compare"]

#: Most configurations compared at once.
MAX_PINS = 4


def _text(v) -> str:
    if v is None:
        return "default"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return f"{v:,}" if isinstance(v, int) else str(v)


def _title(state: dict, cfg: dict) -> str:
    from .state import presets
    name = state.get("preset")
    titles = {p["name"]: p["title"] for p in presets()}
    n = len(state.get("values") or {})
    if state.get("hf"):                       # a catalog model: named by its Hub id
        from .state import hf_model
        try:
            hf = hf_model(state["hf"])[1]
        except EstimatorError:
            hf = str(state["hf"])
        return hf + (f" with {n} change{'s' if n != 1 else ''}" if n and name else "")
    base = titles.get(name, name) if name else "Custom model"
    return base + (f" with {n} change{'s' if n != 1 else ''}" if n and name else "")


def _column(state: dict) -> tuple[dict, dict | None]:
    """(what the page shows of one pin, its full configuration or None when it is invalid)."""
    from ..memory.assemble import estimate
    from ..formats.gpus import fit
    from ..plan.verdicts import WORDS
    from .state import merged_config, state_capacity
    cfg, problems = merged_config(state)
    gpu, capacity, gpu_problems = state_capacity(state)
    col = {"title": _title(state, cfg), "gpu": gpu, "state": state}
    problems += gpu_problems
    if not problems:
        try:
            config = load_config(cfg)
            est = estimate(config)
        except EstimatorError as exc:
            problems = list(getattr(exc, "problems", [])) or [Problem("config", None, str(exc))]
    if problems:
        col["errors"] = [p.to_dict() for p in problems]
        return col, None
    fits = fit(est, capacity) if capacity else None
    worst = min(fits, key=lambda f: f.headroom_bytes) if fits else None
    s = est.peak_stage
    parts = [("Weights", s.weights_bytes), ("Gradients", s.gradients_bytes), ("Optimizer states", s.optimizer_bytes),
             ("Activations", s.activations_bytes), ("Transient buffers", s.transient_bytes)]
    col.update({
        "peak": f"{est.peak.device_bytes / GIB:.2f} GiB", "peak_bytes": est.peak.device_bytes,
        "peak_stage": est.peak.stage,
        "verdict": worst.verdict if worst else None, "word": WORDS[worst.verdict] if worst else "no GPU chosen",
        "headroom": f"{worst.headroom_bytes / GIB:+.2f} GiB" if worst else None,
        "stages": [{"stage": st.stage, "gib": f"{st.device_bytes / GIB:.2f}",
                    "verdict": fits[st.stage].verdict if fits else None} for st in est.stages],
        "parts": [{"name": n, "gib": f"{b / GIB:.2f}"} for n, b in parts],
    })
    return col, config.to_full_dict()


def _gpu_arch(state: dict) -> str | None:
    """The architecture of a pin's catalog GPU (None for a custom capacity or none)."""
    from .state import gpu_table
    g = gpu_table().get(state.get("gpu")) if isinstance(state.get("gpu"), str) else None
    return getattr(g, "arch", None)


def compare(pins) -> dict:
    """Columns for up to :data:`MAX_PINS` form states and the fields that differ between them."""
    if not isinstance(pins, list) or not 1 <= len(pins) <= MAX_PINS or not all(isinstance(p, dict) for p in pins):
        return {"errors": [Problem("pins", None, f"must be a list of 1 to {MAX_PINS} form states").to_dict()]}
    from .checks import request_problem
    for i, p in enumerate(pins):
        bad = request_problem({"op": "compute", "state": p})
        if bad:
            return {"errors": [Problem(f"pins[{i}].{bad.field}", bad.value, bad.message).to_dict()]}
    cols, fulls = zip(*(_column(p) for p in pins))
    differs = []
    valid = [f for f in fulls if f is not None]
    # The GPU's architecture (training.gpu_arch) differs with the GPU, which its own row names.
    archs = [_gpu_arch(p) for p in pins]
    for sec in SECTIONS:
        names = list((valid[0] if valid else {}).get(sec, {}))
        for name in names:
            values = [f[sec][name] if f is not None else None for f in fulls]
            if f"{sec}.{name}" == "training.gpu_arch" and all(
                    f is None or a == v for v, a, f in zip(values, archs, fulls)):
                continue
            if len({repr(v) for v, f in zip(values, fulls) if f is not None}) > 1:
                path = f"{sec}.{name}"
                differs.append({"field": path, "label": label(path),
                                "values": [_text(v) if f is not None else "" for v, f in zip(values, fulls)]})
    gpus = [c.get("gpu") for c in cols]
    if len(set(gpus)) > 1:
        differs.insert(0, {"field": "gpu", "label": "GPU", "values": [g or "none" for g in gpus]})
    return {"pins": list(cols), "differs": differs, "stages": max((len(c.get("stages", [])) for c in cols), default=0)}
