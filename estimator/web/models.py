"""The calculator's Model box: a model picked by name, a preset or a Hugging Face Hub id of the offline catalog.

:func:`estimator.web.handle` answers ``{"op": "model", "state", "name"}`` with :func:`pick`:

- ``{"preset": name}`` for a preset's name (any case): the page switches to it as it switches presets, asking
  before it drops the user's changes;
- ``{"state", "notes", "hf"}`` for a catalog id, or an id that differs from one only by its tuning suffix (the
  note says which sibling stands in, as ``python -m estimator estimate --hf ID`` does): the form state whose
  model is that one (``state.hf``), resolved by :func:`estimator.web.state.hf_model`, the same import as
  ``--hf``. The layout, training and precision of the form stay, its edits of the old model's fields go; where
  that layout is not valid for the new model (TP 8 over 28 attention heads, experts that EP does not divide),
  the catalog's default layout on the form's number of GPUs takes its place
  (:func:`estimator.formats.catalog.default_layout`), and a note says why;
- ``{"errors", "closest"}`` otherwise: the error names the field (``model``), the value and what is allowed, in
  the page's words; ``closest`` lists the most similar presets and ids (``{name, kind: preset | hf, label}``),
  best first, for the page to offer as buttons.

:func:`options` gives the box's completion list: every preset and every catalog model, each with a label.
"""

from __future__ import annotations

import difflib

from ..config.errors import ConfigError, EstimatorError, Problem, clip
from ..config.load import load_config
from .state import MAX_NAME, NOT_DOWNLOADED, error_answer, merged, preset_names, presets

__all__ = ["MAX_CLOSEST", "closest", "hf_label", "not_found", "options", "pick"]

#: Most names offered for an unknown one, and how alike (difflib ratio, 0..1) a name must be to be offered.
MAX_CLOSEST, CUTOFF = 5, 0.5


def hf_label(m: dict) -> str:
    """One catalog model in the completion list: its family and size, or why it is not supported."""
    if not (m["supported"] and m.get("parameters")):
        return f"{m['family']} · not supported: {m.get('reason') or ''}"
    n = m["parameters"]["total"]
    return f"{m['family']} · {n / 1e9:.1f}B parameters" if n >= 1e9 else f"{m['family']} · {n / 1e6:.0f}M parameters"


def options() -> list[dict]:
    """The Model box's completion list: the presets (``kind: preset``, labelled with their title), then the catalog's
    models (``kind: hf``, labelled with family and size), each ``{name, kind, label}``."""
    from ..formats.catalog import listing
    out = [{"name": p["name"], "kind": "preset", "label": f"preset · {p['title']}"} for p in presets()]
    out += [{"name": m["hf_id"], "kind": "hf", "label": hf_label(m)} for m in listing()]
    return out


def _catalog_ids() -> list[str]:
    from ..formats.hf_catalog import ids
    return ids()


def closest(name: str, n: int = MAX_CLOSEST) -> list[dict]:
    """The presets and catalog ids most like ``name`` (the whole id, or its name after the organisation), best
    first: ``{name, kind}``."""
    q = name.strip().lower()
    if not q or len(q) > MAX_NAME:
        return []
    scored = []
    for kind, names in (("preset", preset_names()), ("hf", _catalog_ids())):
        for known in names:
            low = known.lower()
            ratio = max(difflib.SequenceMatcher(None, q, low).ratio(),
                        difflib.SequenceMatcher(None, q.split("/", 1)[-1], low.split("/", 1)[-1]).ratio())
            if ratio >= CUTOFF:
                scored.append((-ratio, kind != "hf", known, kind))
    return [{"name": known, "kind": kind} for _, _, known, kind in sorted(scored)[:n]]


def not_found(name: str) -> tuple[str, list[dict]]:
    """(the message for a name that is neither a preset nor a catalog id, the closest names)."""
    shown = clip(name.strip()) if isinstance(name, str) else ""
    message = (f"'{shown}' is not a preset or a Hugging Face id of the model catalog ({len(preset_names())} presets, "
               f"{len(_catalog_ids())} Hub ids); {NOT_DOWNLOADED}")
    return message, closest(name) if isinstance(name, str) else []


def _sections_but_model(state: dict) -> dict:
    return {p: v for p, v in (state.get("values") or {}).items() if not p.startswith("model.")}


def _default_layout_values(model: dict, world) -> dict:
    """The values of the catalog's default layout for ``model`` on ``world`` GPUs (8 unless a power of two)."""
    from ..formats.catalog import DEFAULT_GPUS, default_layout
    gpus = world if isinstance(world, int) and not isinstance(world, bool) and 0 < world <= 1 << 20 \
        and world & (world - 1) == 0 else DEFAULT_GPUS
    cfg = default_layout(model, gpus=gpus)
    return {f"{sec}.{k}": v for sec in ("parallelism", "training") for k, v in cfg[sec].items()}


def pick(state: dict, name) -> dict:
    """The answer to the Model box's ``name`` over the form ``state`` (see the module docstring)."""
    from .state import hf_model
    if not isinstance(name, str) or not name.strip():
        return error_answer("model", name, "type a preset name or a Hugging Face id of the model catalog, "
                                           "e.g. Qwen/Qwen3-30B-A3B")
    text = name.strip()
    presets_by_low = {p.lower(): p for p in preset_names()}
    if text.lower() in presets_by_low:
        return {"preset": presets_by_low[text.lower()]}
    try:
        model, shown, sibling = hf_model(text)
    except ConfigError:
        message, near = not_found(text)
        return {**error_answer("model", clip(text), message), "closest": near}
    except EstimatorError as exc:
        return {**error_answer("model", clip(text), str(exc).strip("'\"")), "closest": []}
    notes = [sibling[0].upper() + sibling[1:] + "."] if sibling else []
    new = {"preset": state.get("preset") or None, "hf": shown, "values": _sections_but_model(state),
           "gpu": state.get("gpu")}
    if state.get("gpu_gib") is not None:
        new["gpu_gib"] = state["gpu_gib"]
    cfg, problems, _ = merged(new)
    if not problems:
        try:
            load_config(cfg)
        except ConfigError as exc:
            problems = list(exc.problems)
        except (EstimatorError, ValueError) as exc:
            problems = [Problem("config", None, str(exc))]
    if problems:
        p = problems[0]
        world = (cfg.get("training") or {}).get("world_size")
        values = _default_layout_values(model, world)
        new = {**new, "preset": None, "values": values}
        notes.append(f"The form's layout does not work for {shown} ({p.field}: {p.message}), so the catalog's default "
                     f"layout on {values['training.world_size']} GPUs takes its place.")
    else:
        notes.append(f"{shown} from the model catalog, on the form's layout, training and precision.")
    return {"state": new, "notes": notes, "hf": shown}
