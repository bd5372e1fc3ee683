"""What the calculator page shows of an estimate, formatted: table rows, chart bars, the summary and the verdict.

:func:`view` turns an :class:`~estimator.memory.report.Estimate` and its fit verdicts into plain data the page
renders without arithmetic: GiB strings (2^30 bytes), bar segments in bytes, axis ticks, the capacity
line, the summary sentences and the verdict in the words of :mod:`estimator.plan.verdicts`. The segments and
their colours are those of the build-time charts (``hooks/_tables_svg.py``), so a part of the memory has
one colour on every page.
"""

from __future__ import annotations

import functools

from ..config.errors import n_gpus
from ..memory.report import GB, GIB, gib_ticks
from ..plan.verdicts import MEANINGS, WORDS, explain, worst_verdict

__all__ = ["COLUMNS", "SEGMENTS", "UNIT", "layers_text", "parallel_text", "view"]

UNIT = "GiB (2^30 bytes)"
#: Table columns: (key of StageEstimate.<key>_bytes, header).
COLUMNS = (("weights", "Weights"), ("gradients", "Gradients"), ("optimizer", "Optimizer states"),
           ("activations", "Activations"), ("transient", "Transient"), ("allocated", "Allocated"),
           ("reserved", "Reserved"), ("device", "On device"))
#: Stacked bar segments, bottom to top, with the build-time charts' names (hooks/_tables_svg.STAGE_SEGMENTS).
SEGMENTS = (("weights", "Weights"), ("gradients", "Gradients"), ("optimizer", "Optimizer states"),
            ("activations", "Activations"), ("transient", "Transient buffers"), ("reserve", "Allocator reserve"),
            ("runtime", "CUDA context, NCCL, other"))


def _gib(b: int) -> str:
    return f"{b / GIB:.2f}"


def _peft(config: dict) -> dict | None:
    """The adapters of a PEFT configuration, in words: {short: "LoRA r16", words: "LoRA adapters of rank 16",
    trainable: parameters (whole model)}; None without PEFT."""
    tr = (config or {}).get("training") or {}
    if not tr.get("peft"):
        return None
    from ..config.load import config_from_dict
    from ..memory.features.peft import adapter_total
    from ..model.resolve import resolve
    name = {"lora": "LoRA", "dora": "DoRA"}.get(tr["peft"], tr["peft"])
    r = resolve(config_from_dict(config))
    rank = r.cfg.training.peft_dim
    return {"method": tr["peft"], "rank": rank, "short": f"{name} rank {rank}",
            "words": f"{name} adapters of rank {rank}", "trainable": adapter_total(r)}


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 10 ** 9 else f"{n / 1e6:.2f} M" if n >= 10 ** 6 else f"{n:,}"


def layers_text(chunks) -> str:
    """Global layer indices of a stage, one range per virtual chunk: "0–3, 16–19"."""
    parts = []
    for c in chunks:
        c = list(c)
        parts.append("none" if not c else (f"{c[0]}" if len(c) == 1 else f"{c[0]}–{c[-1]}"))
    return ", ".join(parts)


def parallel_text(par: dict) -> str:
    """The layout in one sentence: GPUs, the dense product, experts, micro-batches per step."""
    dense = f"TP {par['tp']} × PP {par['pp']}" + (f" (VPP {par['vpp']})" if par.get("vpp", 1) > 1 else "") + \
        f" × CP {par['cp']} × DP {par['dp']}"
    parts = [f"{n_gpus(par['world_size'])}: {dense}"]
    if par.get("expert_optimizer_shards") is not None or par.get("ep", 1) > 1:
        parts.append(f"experts: EP {par['ep']} × ETP {par['etp']} × expert-DP {par['edp']}")
    if par.get("sequence_parallel"):
        parts.append("sequence parallel")
    m, b = par.get("num_microbatches"), par.get("micro_batch_size")
    if m:
        parts.append(f"{m:,} micro-batch{'es' if m != 1 else ''} per step (micro-batch size {b})")
    else:
        parts.append(f"micro-batch size {b}, no global batch size (the pipeline assumed full)")
    return "; ".join(parts) + "."


def _overload(h) -> dict | None:
    """The MoE routing headroom as the verdict shows it: the answer, and the evidence folded below it."""
    if h is None:
        return None
    from ..plan.headroom import describe      # lazy: import estimator.web stays small (tests/web/test_web.py)
    answer, evidence = describe(h)
    return {**h.to_dict(), "text": answer, "evidence": evidence}


def view(est, fits, gpu: str | None, capacity: int | None, config: dict, overload=None, model: str | None = None) -> dict:
    """The page's view of an estimate: ``fits`` are :func:`estimator.formats.gpus.fit`'s verdicts (or None);
    ``overload`` the MoE routing headroom on that GPU (:func:`estimator.plan.headroom.overload_headroom`, None for a
    dense model or without a GPU), shown with the verdict; ``model`` the name the headline gives the model (a catalog
    Hub id; None: no name)."""
    rows, bars = [], []
    for s in est.stages:
        cells = {key: _gib(getattr(s, f"{key}_bytes")) for key, _ in COLUMNS}
        extras = [x for x, on in (("embedding", s.has_embedding), ("output layer", s.has_output_layer),
                                  (f"{s.mtp_layers} MTP", s.mtp_layers)) if on]
        chunks = getattr(s, "chunks", ())            # per virtual chunk, where the core reports them
        if len(chunks) > 1:
            extras.append("in flight per chunk: " + ", ".join(str(c.microbatches_in_flight) for c in chunks))
        verdict = fits[s.stage].verdict if fits else None
        rows.append({"stage": s.stage, "layers": getattr(s, "label", None) or layers_text(s.layers),
                     "extras": "; ".join(extras), "cells": cells,
                     "in_flight": s.microbatches_in_flight, "peak": s.stage == est.peak.stage,
                     "fits": verdict, "fits_text": WORDS[verdict] if verdict else None,
                     "phase": getattr(s, "phase_name", "steady step")})
        segs = [(key, getattr(s, f"{key}_bytes")) for key, _ in SEGMENTS[:5]]
        segs += [("reserve", s.reserved_bytes - s.allocated_bytes), ("runtime", s.device_bytes - s.reserved_bytes)]
        bars.append({"stage": s.stage, "device_bytes": s.device_bytes, "label": f"{_gib(s.device_bytes)} GiB",
                     "segments": [{"name": k, "bytes": b, "gib": _gib(b)} for k, b in segs]})
    peak = est.peak
    verdict = None
    if fits:
        w = worst_verdict(fits)
        size = f"{gpu} ({_gib(capacity)} GiB = {capacity / GB:.1f} GB)"
        where = f"stage {w.stage}" if len(fits) > 1 else "each GPU"
        band = f"+{100 * w.band.fraction:.1f} %"
        kept = f" with {_gib(w.keep_free_bytes)} GiB kept free" if w.keep_free_bytes else ""
        if w.verdict == "fits":
            text = (f"Fits on {size}: {_gib(w.headroom_bytes)} GiB ({w.headroom_pct:.1f} %) to spare on the fullest "
                    f"GPU; even the upper bound, {_gib(w.upper_bound_bytes)} GiB ({band}), fits{kept}.")
        elif w.verdict == "tight":
            text = (f"Fits within the error band on {size}: {where} needs {_gib(w.device_bytes)} GiB by the estimate, "
                    f"{_gib(w.upper_bound_bytes)} GiB at the upper bound ({band}){kept}. The band: {w.band.reason}.")
        else:
            text = (f"Does not fit on {size}: {where} needs {_gib(w.device_bytes + w.keep_free_bytes - capacity)} GiB "
                    f"({-w.headroom_pct:.1f} %) more{kept}.")
        lead = WORDS[w.verdict].capitalize()
        verdict = {"verdict": w.verdict, "word": WORDS[w.verdict], "fits": w.verdict == "fits", "text": text,
                   "lead": lead, "rest": text[len(lead):],
                   "meaning": MEANINGS[w.verdict], "headroom_bytes": w.headroom_bytes, "stage": w.stage,
                   "point_bytes": w.device_bytes, "upper_bound_bytes": w.upper_bound_bytes,
                   "keep_free_bytes": w.keep_free_bytes, "band": w.band.to_dict(),
                   "band_text": (f"Estimate {_gib(w.device_bytes)} GiB, upper bound {_gib(w.upper_bound_bytes)} GiB "
                                 f"({band}{kept}): {w.band.reason}."),
                   "why": explain(est, fits, config), "moe_overload_headroom": _overload(overload),
                   "phase": getattr(w, "phase", "steady step")}
    p = est.parameters
    written = est.config                  # (made anew from the configuration on each use: read once)
    mtp_layers = (written.get("model") or {}).get("mtp_num_layers") or 0
    mtp = (f"incl. {_count(p.mtp)} in the {'MTP layer' if mtp_layers == 1 else f'{mtp_layers} MTP layers'}"
           if p.mtp else "")
    notes = [mtp] if mtp else []
    if getattr(p, "vision", 0):
        notes.append(f"incl. {_count(p.vision)} in the vision tower")
    if getattr(p, "sound", 0):          # omni28: Nemotron Omni's sound tower
        notes.append(f"incl. {_count(p.sound)} in the sound tower")
    if p.active != p.total:
        notes.append(f"{_count(p.active)} active per token")
    params = f"{_count(p.total)} parameters" + (f" ({'; '.join(notes)})" if notes else "")
    peft = _peft(written)
    if peft:
        params += f" frozen; {peft['words']} add {_count(peft['trainable'])} trainable"
    top = max([b["device_bytes"] for b in bars] + [capacity or 0])
    ticks = gib_ticks(top)
    return {
        "unit": UNIT, "columns": [{"key": k, "label": lbl} for k, lbl in COLUMNS],
        "segments": [{"name": k, "label": lbl} for k, lbl in SEGMENTS], "rows": rows, "bars": bars,
        "capacity_bytes": capacity, "capacity_label": f"{gpu} {_gib(capacity)} GiB" if capacity else None,
        "scale_bytes": ticks[-1]["bytes"] or top, "ticks": ticks,
        "peak": {"stage": peak.stage, "device": _gib(peak.device_bytes), "allocated": _gib(peak.allocated_bytes),
                 "reserved": _gib(peak.reserved_bytes), "phase": est.peak_phase},
        "model": model,
        "headline": ((f"{model}: " if model else "") + f"{_gib(peak.device_bytes)} GiB per GPU at the peak (stage {peak.stage})"
                     + (f" · {peft['short']}" if peft else "")
                     + (f" · {WORDS[verdict['verdict']]} on {gpu}" if verdict else "")),
        "summary": (f"Peak: stage {peak.stage}, {_gib(peak.device_bytes)} GiB on each GPU "
                    f"({_gib(peak.allocated_bytes)} GiB allocated by PyTorch, {_gib(peak.reserved_bytes)} GiB reserved)"
                    + (f", fine-tuning with {peft['words']}" if peft else "")
                    + (f", at its {est.peak_phase} (above the steady training step)." if est.peak_phase != "steady step"
                       else ".")),
        "peft": peft,
        "verdict": verdict, "parameters": params, "parallel": parallel_text(est.parallel),
        "assumptions": list(est.assumptions),
    }


def _sentences(text: str) -> list[str]:
    import re
    return [s for s in re.split(r"(?<=[.])\s+(?=[A-Z])", " ".join(text.split())) if s]


@functools.lru_cache(maxsize=None)
def _provenance(name: str) -> tuple:
    """(title, recipe, notes) of preset ``name``, read once. Cached: the browser's memory snapshot holds every
    preset's (boot_data estimates each one before the snapshot), since the package's files are unpacked only after
    Python's first answers."""
    from ..formats.presets import preset_info
    info = preset_info(name)
    return info.get("title") or name, info.get("recipe"), info.get("notes")


def preset_about(state: dict, verdict: dict | None, unchanged: bool) -> dict | None:
    """Where the preset of a form state comes from, for the page's "About this preset" link (``name``, ``title``)
    and, when the form holds the preset's published recipe unchanged (``unchanged``: the configuration is the
    preset's, whatever values were typed over it) and that recipe does not fit the GPU, a note
    that says so, short answer first, with the preset's own explanation (the sentence of its notes that says why it
    does not fit). None for a catalog model or no preset."""
    name = state.get("preset")
    if not name or state.get("hf"):
        return None
    try:
        title, recipe, notes = _provenance(name)
    except Exception:                     # an unknown preset (the estimate reports it), or its file not readable yet
        title, recipe, notes = name, None, None
    out = {"name": name, "title": title, "recipe_note": None}
    if recipe and unchanged and verdict and verdict["verdict"] != "fits":
        gpu = state.get("gpu") or "this GPU"
        lead = ("The published recipe does not fit " if verdict["verdict"] == "no"
                else "The published recipe fits only within the error band on ") + f"{gpu} by this estimate."
        why = next((s for s in _sentences(notes or "") if "not fit" in s or "not quite fit" in s
                    or "cannot fit" in s), None)
        out["recipe_note"] = lead + (f" Why, from the preset's notes: {why}" if why else "")
    return out
