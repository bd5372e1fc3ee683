"""Held-out validation: Megatron-LM's functional-test memory goldens (``validation/megatron_ci.yaml``).

Every case is read the way a user would feed it to the estimator: its launch flags (``MODEL_ARGS``), behind its
``ENV_VARS`` as the launch line's environment (the importer reads ``CUBLAS_WORKSPACE_CONFIG`` and
``PYTORCH_CUDA_ALLOC_CONF`` there) with the data file's ``supplied_env`` (what the PyTorch of the container that
recorded the golden defaulted to: a GB200 golden recorded before the 32 MiB Blackwell cuBLAS workspace default has
``CUBLAS_WORKSPACE_CONFIG=:4096:2:16:8``, see validation/megatron_ci.py ``BLACKWELL_32MIB_CUBLAS``), go through :func:`estimator.formats.megatron_args.parse_megatron_args` with the
world size of its CI recipe, for the GPU of its platform as ``--gpu`` names one (:data:`PLATFORM_GPUS`: the golden
``golden_values_dev_dgx_gb200.json`` ran on GB200, so Blackwell's sm_100), and the estimate of the last pipeline
stage (the logged rank is the last one) is held against the largest ``mem-max-allocated-bytes`` the golden records
over all steps.

A case ends in one of these states, each shown with its reason:

- ``compared``: estimated and compared; it counts towards the target unless a note (below) marks it;
- ``refused``: the importer refuses a flag whose memory effect is not modelled (``UnsupportedError``);
- ``invalid``: the importer or the configuration rejects a value (``ConfigError``);
- ``no_world_size``: no CI recipe at the data file's revision runs it, so the GPU count is unknown;
- ``incomplete``: a file it reads (a tokenizer's vocabulary) is not known here.

``validation/megatron_ci_notes.yaml`` (hand-written) explains misses by launch setting, never by case:
``incomplete`` notes mark settings the importer ignores although they change memory (the estimate is of
another run, so the case is left out of the target); ``gap`` notes mark settings the model does not get
right yet (left out of the target, shown with the cause); ``info`` notes only explain.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from ..config import yamlio
from ..config.errors import ConfigError, UnsupportedError
from ..config.load import load_config
from ..formats.gpus import with_gpu_arch
from ..formats.megatron_args import parse_megatron_args
from ..memory.assemble import stage_memory
from ..memory.report import GIB
from ..model.resolve import resolve
from .calibration import Comparison

__all__ = ["PLATFORM_GPUS", "CiCase", "ci_cases", "data_path", "load_data", "load_notes", "notes_path"]

#: The catalog GPU (estimator.formats.gpus) of each CI platform, which sets the estimate's ``training.gpu_arch``: the
#: golden file ``golden_values_{environment}_{platform}.json`` is what the recipes under
#: tests/test_utils/recipes/<h100|gb200>/ run with ``platforms: dgx_h100`` or ``dgx_gb200`` (their
#: ``GOLDEN_VALUES_PATH``), on the clusters .gitlab/stages/04.functional-tests.yml names per platform. Only the
#: architecture matters here (sm_90, sm_100), not the capacity.
PLATFORM_GPUS = {"dgx_h100": "H100-80GB", "dgx_gb200": "GB200"}

_ROOT = Path(__file__).resolve().parents[2] / "validation"


def data_path() -> Path:
    return _ROOT / "megatron_ci.yaml"


def notes_path() -> Path:
    return _ROOT / "megatron_ci_notes.yaml"


_DATA: dict = {}


def load_data(path: str | Path | None = None) -> dict:
    """The data file (parsed once per path: it is large)."""
    p = Path(path or data_path())
    if p not in _DATA:
        _DATA[p] = yamlio.load(p.read_text(encoding="utf-8"))
    return _DATA[p]


def load_notes(path: str | Path | None = None) -> list[dict]:
    return yamlio.load(Path(path or notes_path()).read_text(encoding="utf-8"))["notes"]


@dataclass(frozen=True)
class CiCase:
    """One golden of the Megatron-LM CI: its state, and the comparison when there is one."""

    id: str
    status: str                      # compared | refused | invalid | no_world_size | incomplete
    reason: str                      # why not compared (or the note's cause)
    platform: str
    test_type: str
    world_size: int | None
    comparison: Comparison | None
    note_kind: str = ""              # "", incomplete, gap, info
    ignored_flags: tuple = ()

    @property
    def in_target(self) -> bool:
        """Counts towards the accuracy target: compared, complete and without a known gap."""
        return self.status == "compared" and self.note_kind in ("", "info")


def _matches(note: dict, tokens: list[str], case: dict) -> bool:
    args = set()
    for i, t in enumerate(tokens):
        if t.startswith("--"):
            args.add(t)
            if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                args.add(f"{t} {tokens[i + 1]}")
    if not all(f in args for f in note.get("flags") or []):
        return False
    if any(f in args for f in note.get("without_flags") or []):
        return False
    if note.get("platform") and note["platform"] != case["platform"]:
        return False
    env = case.get("env") or {}
    return not any(k in env for k in note.get("env_absent") or [])


def _note_for(tokens: list[str], case: dict, notes: list[dict]) -> dict | None:
    for note in notes:
        if _matches(note, tokens, case):
            return note
    return None


def launch_line(case: dict, tokens: list[str]) -> list[str]:
    """The case as one launch line: its ``ENV_VARS`` and ``supplied_env`` as ``NAME=value`` words, the training
    script, its flags."""
    env = {**(case.get("env") or {}), **(case.get("supplied_env") or {})}
    return [*(f"{k}={v}" for k, v in env.items()), "pretrain_gpt.py", *tokens]


def _estimate(case: dict, tokens: list[str]):
    files = case.get("files") or {}     # files the flags name, as the data file carries them (--tp-comm-overlap-cfg)
    cfg, ignored = parse_megatron_args(launch_line(case, tokens), world_size=case["world_size"], read_file=files.get)
    cfg = with_gpu_arch(cfg, PLATFORM_GPUS[case["platform"]])
    est = stage_memory(resolve(load_config(cfg)))
    return cfg, ignored, est


def evaluate(case: dict, notes: list[dict], source_rev: str = "") -> CiCase:
    """The state of one case of the data file, its comparison and its note."""
    base = dict(id=case["id"], platform=case["platform"], test_type=case.get("test_type") or "",
                world_size=case.get("world_size"))
    if case.get("world_size") is None:
        return CiCase(status="no_world_size", reason=case.get("world_size_reason", ""), comparison=None, **base)
    if case.get("unsupplied"):
        return CiCase(status="incomplete", reason=case["unsupplied"], comparison=None, **base)
    tokens = shlex.split(case["megatron_args"]) + list(case.get("supplied_args") or [])
    try:
        cfg, ignored, est = _estimate(case, tokens)
    except UnsupportedError as exc:
        return CiCase(status="refused", reason=_one_line(exc), comparison=None, **base)
    except ConfigError as exc:
        return CiCase(status="invalid", reason=_one_line(exc), comparison=None, **base)
    note = _note_for(tokens, case, notes)
    meas = case["measured"]
    measured = meas["peak_allocated_bytes"] / GIB
    last = est.stages[-1]
    cmp = Comparison(
        id=case["id"], source=case["sources"]["golden"], gpu=case["gpu"], precise=True,
        measured_gib=measured, estimated_gib=last.allocated_bytes / GIB,
        error_pct=(last.allocated_bytes / GIB - measured) / measured * 100.0, measured_reserved_gib=None,
        estimated_reserved_gib=last.reserved_bytes / GIB, measured_stages_gib=(), estimated_stages_gib=(),
        config=cfg, source_key="megatron-ci", calibration=False, truncated=False,
        note=note["cause"] if note else "",
    )
    return CiCase(status="compared", reason=note["cause"] if note else "", comparison=cmp,
                  note_kind=note["kind"] if note else "", ignored_flags=tuple(ignored), **base)


def ci_cases(path: str | Path | None = None, notes: list[dict] | None = None) -> list[CiCase]:
    """Every case of the data file, evaluated with the estimator as it is now."""
    data = load_data(path)
    notes = load_notes() if notes is None else notes
    return [evaluate(c, notes) for c in data["cases"]]


def _one_line(exc: Exception) -> str:
    """An error's message on one line (the importer lists several refused flags on lines of their own)."""
    return " ".join(str(exc).replace("\n  - ", "; ").split())
