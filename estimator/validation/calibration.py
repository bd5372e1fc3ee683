"""Comparison of estimates with measured peak memory of real Megatron runs: shared records, and the calibration set.

Three sources, each in its own data file under ``validation/`` and read by its own module:

- **Calibration** (this module, ``validation/measured.yaml``): the runs the model was developed against.
  SimuMax's B200 logs (``smx-*``, launch scripts and memory-logging patch documented, so "precise"), and
  two assumption-heavy sources (Megatron-LM PR #482, mbridge's README) whose missing settings were assumed.
  Each case's ``config:`` block loads as it is; the ``run_flags:`` that have a field in the schema are
  applied on top, and ``run_flags.num_microbatches`` sets the micro-batch count of the memory run.
- **Held-out: Megatron-LM CI** (:mod:`estimator.validation.megatron_ci`): functional-test memory goldens, read
  through the launch-argument importer.
- **Held-out: known-to-run recipes** (:mod:`estimator.validation.known_to_run`): Megatron-Bridge performance
  recipes measured on stated GPUs; "it fits" is the measurement.

Errors are signed, (estimated - measured) / measured: a negative error is an under-estimate, the kind that
lets a run that does not fit pass as fitting.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import yamlio
from ..config.load import load_config
from ..config.schema import field_specs
from ..memory.assemble import stage_memory
from ..memory.report import GIB
from ..model.resolve import resolve

__all__ = ["CALIBRATION_SOURCES", "Comparison", "Stats", "case_config", "compare_case", "default_cases_path",
           "load_cases", "stats", "summary"]

#: Calibration sources, by case-id prefix: (key, label, precisely documented).
CALIBRATION_SOURCES = {
    "smx-": ("simumax-b200", "SimuMax B200 logs", True),
    "pr482-": ("megatron-pr482", "Megatron-LM PR #482", False),
    "mbridge-": ("mbridge-readme", "mbridge README", False),
}

_TRUNCATED = re.compile(r"-l\d+(-|$)")


def default_cases_path() -> Path:
    return Path(__file__).resolve().parents[2] / "validation" / "measured.yaml"


def load_cases(path: str | Path | None = None) -> list[dict]:
    text = Path(path or default_cases_path()).read_text(encoding="utf-8")
    return yamlio.load(text)["cases"]


@dataclass(frozen=True)
class Comparison:
    """One measured run against its estimate (memory in GiB = 2^30 bytes)."""

    id: str
    source: str                  # "repository @ revision : path" of the measurement
    gpu: str
    precise: bool                # every setting documented by the source
    measured_gib: float          # peak allocated, as the source reports it
    estimated_gib: float
    error_pct: float             # signed: (estimated - measured) / measured
    measured_reserved_gib: float | None
    estimated_reserved_gib: float
    measured_stages_gib: tuple   # (first stage, last stage) where the source gives per-rank numbers
    estimated_stages_gib: tuple
    config: dict
    source_key: str = ""         # which source: simumax-b200, megatron-ci, ...
    calibration: bool = True     # used while developing the model (False: held-out)
    truncated: bool = False      # a real model cut to a few layers
    note: str = ""               # why this case misses, where known


def case_config(case: dict) -> tuple[dict, int | None]:
    """The case's configuration with its schema-known run flags applied, and its micro-batch count."""
    names = {s.name: s.section for s in field_specs()}
    cfg = {sec: dict(v or {}) for sec, v in case["config"].items()}
    flags = case.get("run_flags") or {}
    for key, value in flags.items():
        if key in names:
            cfg.setdefault(names[key], {})[key] = value
    return cfg, flags.get("num_microbatches")


def _source_of(case_id: str) -> tuple[str, str, bool]:
    for prefix, value in CALIBRATION_SOURCES.items():
        if case_id.startswith(prefix):
            return value
    return "other", "other", False


def compare_case(case: dict) -> Comparison:
    """A calibration case (validation/measured.yaml) against its estimate."""
    cfg, nmb = case_config(case)
    r = resolve(load_config(cfg))
    if nmb is not None:
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
    key, _, precise = _source_of(case["id"])
    return Comparison(
        id=case["id"], source=case.get("source", ""), gpu=case.get("gpu", ""), precise=precise,
        measured_gib=measured, estimated_gib=estimated, error_pct=(estimated - measured) / measured * 100.0,
        measured_reserved_gib=meas.get("peak_reserved_gib"), estimated_reserved_gib=est.peak.reserved_bytes / GIB,
        measured_stages_gib=m_stages, estimated_stages_gib=(e_stages[0], e_stages[-1]) if m_stages else (),
        config=cfg, source_key=key, calibration=True, truncated=bool(_TRUNCATED.search(case["id"])),
    )


@dataclass(frozen=True)
class Stats:
    """Errors of a group of comparisons, in percent (signed: negative = under-estimate)."""

    cases: int
    median_abs_error_pct: float | None
    max_abs_error_pct: float | None
    median_error_pct: float | None
    worst_under_pct: float | None     # most negative signed error (0 or more when nothing is under)
    worst_over_pct: float | None      # most positive signed error
    under: int                        # cases estimated below the measurement

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def stats(rows: list[Comparison]) -> Stats:
    errs = [r.error_pct for r in rows]
    if not errs:
        return Stats(0, None, None, None, None, None, 0)
    return Stats(len(errs), statistics.median(abs(e) for e in errs), max(abs(e) for e in errs),
                 statistics.median(errs), min(errs), max(errs), sum(1 for e in errs if e < 0))


def summary(rows: list[Comparison]) -> dict:
    """Median and max absolute error (%) over the precise cases and over all cases (calibration set)."""
    out = {}
    for name, sel in (("precise", [r for r in rows if r.precise]), ("all", rows)):
        s = stats(sel)
        out[name] = {"cases": s.cases, "median_abs_error_pct": s.median_abs_error_pct,
                     "max_abs_error_pct": s.max_abs_error_pct}
    return out
