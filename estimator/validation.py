"""Comparison of estimates with measured peak memory of real Megatron runs.

The cases live in ``validation/measured.yaml`` (a copy of the project's calibration set with full
configurations and sources). Each case's ``config:`` block loads as it is; the ``run_flags:`` that have
a field in the schema (dropout, cross-entropy fusion, MoE dispatcher settings, CP communication type)
are applied on top, and ``run_flags.num_microbatches`` sets the micro-batch count of the memory run.
Cases whose source carries many assumptions (every id not starting with ``smx-``) are reported but
flagged ``precise: false``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from . import yamlio
from .config import load_config
from .memory import stage_memory
from .report import GIB
from .resolve import resolve
from .schema import field_specs

__all__ = ["Comparison", "compare_case", "default_cases_path", "load_cases", "summary"]


def default_cases_path() -> Path:
    return Path(__file__).resolve().parent.parent / "validation" / "measured.yaml"


def load_cases(path: str | Path | None = None) -> list[dict]:
    text = Path(path or default_cases_path()).read_text(encoding="utf-8")
    return yamlio.load(text)["cases"]


@dataclass(frozen=True)
class Comparison:
    id: str
    source: str
    gpu: str
    precise: bool
    measured_gib: float          # peak allocated, as the source reports it (GiB = 2^30 B)
    estimated_gib: float
    error_pct: float
    measured_reserved_gib: float | None
    estimated_reserved_gib: float
    measured_stages_gib: tuple   # (first stage, last stage) where the source gives per-rank numbers
    estimated_stages_gib: tuple
    config: dict


def case_config(case: dict) -> tuple[dict, int | None]:
    """The case's configuration with its schema-known run flags applied, and its micro-batch count."""
    names = {s.name: s.section for s in field_specs()}
    cfg = {sec: dict(v or {}) for sec, v in case["config"].items()}
    flags = case.get("run_flags") or {}
    for key, value in flags.items():
        if key in names:
            cfg.setdefault(names[key], {})[key] = value
    return cfg, flags.get("num_microbatches")


def compare_case(case: dict) -> Comparison:
    cfg, nmb = case_config(case)
    r = resolve(load_config(cfg))
    if nmb is not None:
        from dataclasses import replace
        r = replace(r, m=nmb)
    est = stage_memory(r)
    meas = case["measured"]
    measured = float(meas["peak_allocated_gib"])
    estimated = est.peak.allocated_bytes / GIB
    per_rank = meas.get("per_rank_peak_allocated_mib")
    m_stages: tuple = ()
    if per_rank and r.p > 1:
        m_stages = (per_rank[0] / 1024, per_rank[-1] / 1024)
    e_stages = tuple(s.allocated_bytes / GIB for s in est.stages)
    return Comparison(
        id=case["id"], source=case.get("source", ""), gpu=case.get("gpu", ""),
        precise=case["id"].startswith("smx-"), measured_gib=measured, estimated_gib=estimated,
        error_pct=(estimated - measured) / measured * 100.0,
        measured_reserved_gib=meas.get("peak_reserved_gib"), estimated_reserved_gib=est.peak.reserved_bytes / GIB,
        measured_stages_gib=m_stages, estimated_stages_gib=(e_stages[0], e_stages[-1]) if m_stages else (),
        config=cfg,
    )


def summary(rows: list[Comparison]) -> dict:
    """Median and max absolute error (%) over the precise cases and over all cases."""
    out = {}
    for name, sel in (("precise", [r for r in rows if r.precise]), ("all", rows)):
        errs = [abs(r.error_pct) for r in sel]
        out[name] = {"cases": len(sel), "median_abs_error_pct": statistics.median(errs) if errs else None,
                     "max_abs_error_pct": max(errs) if errs else None}
    return out
