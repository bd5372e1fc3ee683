"""The error band of an estimate: how far below the measurement the estimator has been for this kind of configuration.

The fit verdict (:func:`estimator.formats.gpus.fit`) holds an upper bound against the GPU:

    upper_bound = point x (1 + band)

where ``point`` is a stage's ``device_bytes`` and ``band`` the worst measured under-estimate of the classes the
configuration belongs to (:func:`band_for`). The figures per class are measured, not chosen: they live in
:mod:`.error_bands_data`, generated from the data files under ``validation/`` by
:mod:`estimator.validation.bands` (which says which runs and which figure of each) and checked against them by
``tests/validation/test_error_bands.py``. A class with fewer than :data:`MIN_RUNS` measured runs takes the overall
worst.

The bound is one multiplication, so the layout search applies it to thousands of layouts at no cost. It does not
include MoE routing imbalance beyond ``training.moe_overload_factor``: the point already counts that factor, and
the verdict states the largest factor that still fits (:mod:`estimator.plan.headroom`).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import error_bands_data as _data

__all__ = ["Band", "CLASSES", "MIN_RUNS", "band_for", "classes_of"]

#: Fewer measured runs than this and a class takes the overall worst under-estimate.
MIN_RUNS = 5

#: Feature classes: name -> what drives the band, in words.
CLASSES = {
    "dense": "a dense model",
    "moe": "MoE routing and expert buffers",
    "fp8": "FP8",
    "nvfp4": "NVFP4 (no run measured: it needs a Blackwell GPU)",
    "fsdp": "FSDP",
    "cuda_graphs_full_iteration": "full-iteration CUDA graphs",
    "cuda_graphs_per_layer": "per-layer CUDA graphs",
}


def _get(cfg, section: str, name: str, default=None):
    """A field of a Config (attributes) or of a configuration dict (sections), ``default`` when absent."""
    if isinstance(cfg, dict):
        return (cfg.get(section) or {}).get(name, default)
    return getattr(getattr(cfg, section, None), name, default)


def classes_of(config) -> tuple:
    """The classes of a configuration (a :class:`~estimator.config.schema.Config` or its dict), in :data:`CLASSES` order.

    ``dense`` / ``moe`` only without FSDP and CUDA graphs, whose runs miss by more; ``fp8`` or ``nvfp4`` beside any
    of them (``nvfp4`` has no measured run, so it takes the overall worst)."""
    out = []
    graphs = _get(config, "training", "cuda_graph_impl", "none") or "none"
    fsdp = bool(_get(config, "parallelism", "use_torch_fsdp2") or _get(config, "parallelism", "use_megatron_fsdp"))
    if graphs == "none" and not fsdp:
        out.append("moe" if _get(config, "model", "num_experts") else "dense")
    if _get(config, "precision", "fp8"):
        out.append("fp8")
    if _get(config, "precision", "fp4"):
        out.append("nvfp4")
    if fsdp:
        out.append("fsdp")
    if graphs == "full_iteration":
        out.append("cuda_graphs_full_iteration")
    elif graphs != "none":
        out.append("cuda_graphs_per_layer")
    return tuple(out)


@dataclass(frozen=True)
class Band:
    """The error band of one configuration: the class that drives it and its measured figures."""

    fraction: float        # upper bound = point x (1 + fraction)
    drivers: tuple         # the configuration's classes (CLASSES keys)
    driver: str            # the class whose figure is used, or "overall" where it has too few runs
    worst_error_pct: float  # the measured worst signed error (%) behind the fraction
    runs: int              # measured runs behind that figure
    worst_run: str

    @property
    def reason(self) -> str:
        """What drives the band, in one phrase: "MoE routing and expert buffers: measured worst -10.9 % on 90 runs"."""
        if self.driver == "given":
            return f"a band of {100 * self.fraction:.1f} % given by the caller"
        what = ", ".join(CLASSES[c] for c in self.drivers)
        if self.driver == "overall":
            return (f"{what}: too few measured runs of this class, so the overall worst applies, "
                    f"{self.worst_error_pct:+.1f} % on {self.runs} runs")
        return f"{what}: measured worst {self.worst_error_pct:+.1f} % on {self.runs} runs of this class"

    def to_dict(self) -> dict:
        return {"fraction": self.fraction, "pct": round(100 * self.fraction, 2), "classes": list(self.drivers),
                "driver": self.driver, "worst_error_pct": self.worst_error_pct, "runs": self.runs,
                "worst_run": self.worst_run, "reason": self.reason}


def _figure(name: str) -> tuple:
    row = _data.CLASSES.get(name)
    if row is None or row["runs"] < MIN_RUNS:
        return "overall", _data.OVERALL
    return name, row


def band_for(config) -> Band:
    """The band of a configuration: the largest of its classes' measured worst under-estimates (0 when none was
    under). ``config``: a Config or a configuration dict; an empty one is a dense model."""
    drivers = classes_of(config or {})
    name, row = max((_figure(c) for c in drivers), key=lambda nr: -nr[1]["worst_error_pct"])
    return Band(fraction=max(0.0, -row["worst_error_pct"]) / 100.0, drivers=drivers, driver=name,
                worst_error_pct=row["worst_error_pct"], runs=row["runs"], worst_run=row["worst_run"])
