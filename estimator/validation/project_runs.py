"""Validation against this project's own GPU measurements (``validation/project_runs.yaml``).

Small Megatron-LM ``pretrain_gpt.py`` trainings on one GPU, measured by the project's kit: every run records
the allocator's peak per phase, so the estimate is held against the measurement three times: the overall
peak (``torch.cuda.max_memory_allocated()`` over the run against the stage's ``allocated_bytes``), the
forward/backward peak (against ``forward_backward_bytes``) and the optimizer step's peak (against
``optimizer_step_bytes``), and the phase that holds the peak is compared too; the reserved peak
(``max_memory_reserved``) against ``reserved_bytes`` of both reserved-memory models (allocated x 1.05, and the
simulated caching allocator's replay).

Each case's ``config:`` block is the estimator configuration written for the run and loads as it is. A
batch marked ``developed_against`` was seen while parts of the model were written (batch 1: the optimizer
step and the local implementation's attention), so it is reported apart from held-out batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import yamlio
from ..config.load import load_config
from ..memory.assemble import stage_memory
from ..memory.report import GIB
from ..model.resolve import resolve
from .calibration import Comparison

__all__ = ["ProjectCase", "data_path", "load_data", "project_cases"]

#: Phase names of the measurement (``fwd_bwd@2``, ``optimizer@2``) -> the estimate's ``peak_phase``.
PHASES = {"fwd_bwd": "forward_backward", "optimizer": "optimizer_step"}


def data_path() -> Path:
    return Path(__file__).resolve().parents[2] / "validation" / "project_runs.yaml"


def load_data(path: str | Path | None = None) -> dict:
    return yamlio.load(Path(path or data_path()).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class ProjectCase:
    """One measured run against its estimate (memory in GiB = 2^30 bytes; errors signed, in percent)."""

    id: str
    batch: int
    run: str
    developed_against: bool          # seen while the model was developed (not held-out)
    comparison: Comparison           # overall peak allocated
    measured_phase: str              # forward_backward | optimizer_step
    estimated_phase: str
    measured_fwd_bwd_gib: float
    estimated_fwd_bwd_gib: float
    measured_step_gib: float
    estimated_step_gib: float
    estimated_reserved_replay_gib: float = 0.0   # reserved with training.reserved_memory_model: replay

    @property
    def reserved_error_pct(self) -> float:
        """Reserved (max_memory_reserved) as the configuration's reserved-memory model estimates it."""
        c = self.comparison
        return (c.estimated_reserved_gib - c.measured_reserved_gib) / c.measured_reserved_gib * 100.0

    @property
    def reserved_replay_error_pct(self) -> float:
        """Reserved from the simulated caching allocator's replay (:mod:`estimator.memory.reserved`)."""
        m = self.comparison.measured_reserved_gib
        return (self.estimated_reserved_replay_gib - m) / m * 100.0

    @property
    def fwd_bwd_error_pct(self) -> float:
        return (self.estimated_fwd_bwd_gib - self.measured_fwd_bwd_gib) / self.measured_fwd_bwd_gib * 100.0

    @property
    def step_error_pct(self) -> float:
        return (self.estimated_step_gib - self.measured_step_gib) / self.measured_step_gib * 100.0

    @property
    def phase_matches(self) -> bool:
        return self.measured_phase == self.estimated_phase


def _evaluate(case: dict, batch: dict) -> ProjectCase:
    cfg = case["config"]
    r = resolve(load_config(cfg))
    st = stage_memory(r).stages[0]
    replayed = stage_memory(r, replay=True).stages[0]
    meas = case["measured"]
    measured = meas["peak_allocated_bytes"] / GIB
    cmp = Comparison(
        id=case["id"], source=batch.get("label", ""), gpu=case.get("gpu", ""), precise=True,
        measured_gib=measured, estimated_gib=st.allocated_bytes / GIB,
        error_pct=(st.allocated_bytes / GIB - measured) / measured * 100.0,
        measured_reserved_gib=meas["peak_reserved_bytes"] / GIB, estimated_reserved_gib=st.reserved_bytes / GIB,
        measured_stages_gib=(), estimated_stages_gib=(), config=cfg, source_key=f"project-b{case['batch']}",
        calibration=bool(batch.get("developed_against")), truncated=False,
        note="; ".join(case.get("patches") or []),
    )
    return ProjectCase(
        id=case["id"], batch=case["batch"], run=case["run"], developed_against=bool(batch.get("developed_against")),
        comparison=cmp, measured_phase=PHASES[meas["peak_allocated_phase"].split("@")[0]],
        estimated_phase=st.peak_phase,
        measured_fwd_bwd_gib=meas["fwd_bwd_peak_allocated_bytes"] / GIB,
        estimated_fwd_bwd_gib=st.forward_backward_bytes / GIB,
        measured_step_gib=meas["optimizer_step_peak_allocated_bytes"] / GIB,
        estimated_step_gib=st.optimizer_step_bytes / GIB,
        estimated_reserved_replay_gib=replayed.reserved_bytes / GIB,
    )


def project_cases(path: str | Path | None = None) -> list[ProjectCase]:
    """Every case of the data file, evaluated with the estimator as it is now."""
    data = load_data(path)
    batches = {b["batch"]: b for b in data["batches"]}
    return [_evaluate(c, batches[c["batch"]]) for c in data["cases"]]
