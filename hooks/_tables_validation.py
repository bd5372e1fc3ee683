"""Contexts of the Validation page: every source's comparisons, grouped and summarised for the templates.

The estimates and the statistics come from ``estimator.validation*``; this module only groups rows, labels
them and computes chart geometry (through ``_tables_svg``). It evaluates everything once per build.
"""

from __future__ import annotations

import re

import functools
from collections import Counter

import _tables_svg as svg
from _tables_base import MarkerError

#: Groups of the summary table, in order: (key, set, source label, GPUs, models).
GROUPS = (
    ("simumax-b200", "Calibration", "SimuMax B200 logs (every setting documented)", "8 × B200",
     "Llama 3 70B / 405B and DeepSeek-V2 / V3, truncated to 4–12 layers"),
    ("calibration-assumed", "Calibration", "Megatron-LM PR #482 and mbridge README (settings assumed)",
     "8 × H800, 8 × GPU", "Llama 2 7B (full); Mixtral-style MoE truncated to 4 layers"),
    ("megatron-ci-target", "Held-out", "Megatron-LM CI goldens, complete configurations",
     "H100, GB200 (4–8 GPUs)", "test models (hidden 512–1024, 4–16 layers) and a 7B GPT"),
    ("megatron-ci-h100", "Held-out", "… of which measured on H100", "H100 (8 GPUs)", "as above"),
    ("megatron-ci-gb200", "Held-out", "… of which measured on GB200", "GB200 (4–8 GPUs)", "as above"),
    ("megatron-ci-all", "Held-out", "Megatron-LM CI goldens, every estimated case",
     "H100, GB200 (4–8 GPUs)", "as above, with the cases a note sets apart"),
)

#: This project's own runs, one summary row per batch: (set, source) by whether the model was developed
#: against the batch.
PROJECT_SETS = {True: ("Held-out, then used", "This project's {gpu} runs, batch {b}: the optimizer-step and "
                       "local-attention modelling was written after seeing them"),
                False: ("Held-out", "This project's {gpu} runs, batch {b}: measured after the model was written")}

def _short_gpu(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100", as the page names GPUs."""
    m = re.search(r"\b([A-Z]+\d+[A-Z]*)\b", name.replace("NVIDIA", ""))
    return m.group(1) if m else (name or "GPU")


STATUS_LABELS = {
    "refused": "refused by the importer (a flag whose memory effect is not modelled)",
    "invalid": "rejected by the importer or the configuration check",
    "no_world_size": "no CI recipe gives the GPU count",
    "incomplete": "a tokenizer vocabulary not known here",
}


@functools.lru_cache(maxsize=1)
def context() -> dict:
    from estimator.validation import (calibration as validation, megatron_ci as validation_ci,
                                      project_runs as validation_project, known_to_run as validation_recipes)

    calibration = [validation.compare_case(c) for c in validation.load_cases()]
    if not calibration:
        raise MarkerError("validation/measured.yaml has no cases")
    ci = validation_ci.ci_cases()
    compared = [c for c in ci if c.status == "compared"]
    if not compared:
        raise MarkerError("validation/megatron_ci.yaml has no case the estimator can compare")
    recipes = validation_recipes.recipe_cases()
    project = validation_project.project_cases()
    groups = {
        "simumax-b200": [r for r in calibration if r.precise],
        "calibration-assumed": [r for r in calibration if not r.precise],
        "megatron-ci-target": [c.comparison for c in compared if c.in_target],
        "megatron-ci-h100": [c.comparison for c in compared if c.in_target and c.platform == "dgx_h100"],
        "megatron-ci-gb200": [c.comparison for c in compared if c.in_target and c.platform == "dgx_gb200"],
        "megatron-ci-all": [c.comparison for c in compared],
    }
    summary = [{"key": key, "set": set_, "source": label, "gpus": gpus, "models": models,
                "stats": validation.stats(groups[key])} for key, set_, label, gpus, models in GROUPS]
    batches = {b["batch"]: b for b in validation_project.load_data()["batches"]}
    for b in sorted({c.batch for c in project}):
        rows = [c for c in project if c.batch == b]
        set_, label = PROJECT_SETS[rows[0].developed_against]
        gpu = _short_gpu(batches.get(b, {}).get("gpu") or "")
        summary.append({"key": f"project-b{b}", "set": set_, "source": label.format(b=b, gpu=gpu), "gpus": f"1 × {gpu}",
                        "models": "dense, MoE and MLA test models (0.2–0.7 B parameters), Megatron's local "
                                  "implementation", "stats": validation.stats([c.comparison for c in rows])})
    compact = [dict(g) for g in summary if g["key"] in ("megatron-ci-h100", "megatron-ci-gb200")]
    compact.append({"key": "project-all", "set": "Held-out", "source": "This project's own runs, every batch",
                    "gpus": "1 × H200, 1 × H100", "models": "",
                    "stats": validation.stats([c.comparison for c in project])})
    data = validation_ci.load_data()
    not_compared = [c for c in ci if c.status != "compared"]
    reasons = Counter((c.status, c.reason) for c in not_compared)
    excluded = [{"status": STATUS_LABELS.get(s, s), "reason": reason, "count": n,
                 "cases": sorted(c.id for c in not_compared if (c.status, c.reason) == (s, reason))}
                for (s, reason), n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
    skipped = Counter(s["reason"] for s in data["skipped"])
    layouts = {c.id: _layout(c.comparison.config.get("parallelism") or {}) for c in compared}
    return {
        "calibration": calibration,
        "ci": sorted(compared, key=lambda c: c.comparison.error_pct),
        "ci_total": len(data["cases"]),
        "layouts": layouts,
        "ci_revision": data["source"]["revision"],
        "excluded": excluded,
        "skipped": [{"reason": r, "count": n} for r, n in skipped.most_common()],
        "skipped_total": len(data["skipped"]),
        "recipes": recipes,
        "recipes_estimated": sum(1 for r in recipes if r.status == "estimated"),
        "false_ooms": sum(1 for r in recipes if r.false_oom),
        "summary": summary,
        "compact": compact,
        "project": project,
        "project_batches": {b["batch"]: b for b in validation_project.load_data()["batches"]},
        "headline": {g["key"]: g for g in summary},
    }


@functools.lru_cache(maxsize=1)
def headline() -> dict:
    """The accuracy box's figures (``estimator.validation.headline``), once per build."""
    from estimator.validation.headline import headline as figures
    return figures().to_dict()


def _layout(par: dict) -> str:
    """TP · PP [· VPP · CP · EP] of a parsed configuration, as the CI names its tests."""
    parts = [f"TP {par.get('tensor_model_parallel_size', 1)}", f"PP {par.get('pipeline_model_parallel_size', 1)}"]
    for key, label in (("virtual_pipeline_model_parallel_size", "VPP"), ("context_parallel_size", "CP"),
                       ("expert_model_parallel_size", "EP")):
        if (par.get(key) or 1) > 1:
            parts.append(f"{label} {par[key]}")
    return " · ".join(parts)


def chart() -> dict:
    v = context()
    points = [{"x": r.measured_gib, "y": r.estimated_gib, "label": r.id, "cls": "cal", "error": r.error_pct}
              for r in v["calibration"]]
    points += [{"x": c.comparison.measured_gib, "y": c.comparison.estimated_gib, "label": c.id,
                "cls": "ci" if c.in_target else "ci-out", "error": c.comparison.error_pct} for c in v["ci"]]
    points += [{"x": c.comparison.measured_gib, "y": c.comparison.estimated_gib, "label": c.id, "cls": "prj",
                "error": c.comparison.error_pct} for c in v["project"]]
    return svg.log_scatter("chart-validation", "Estimated against measured peak allocated memory per GPU",
                           points)
