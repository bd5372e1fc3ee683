"""The error band of an estimate: how far below the measurement the estimator has been for this kind of configuration.

The fit verdict (:func:`estimator.formats.gpus.fit`) holds an upper bound against the GPU:

    upper_bound = point x (1 + band)

where ``point`` is a stage's ``device_bytes`` and ``band`` the worst measured under-estimate of the classes the
configuration belongs to (:func:`band_for`). The figures per class are measured, not chosen: they live in
:mod:`.error_bands_data`, generated from the data files under ``validation/`` by
:mod:`estimator.validation.bands` (which says which runs and which figure of each) and checked against them by
``tests/validation/test_error_bands.py``. A class with fewer than :data:`MIN_RUNS` measured runs is too thinly
measured to stand on its own: it takes the worst of the classes measured on at least :data:`MIN_RUNS` runs, but
never less than its own measured worst (so a class whose few runs miss by more keeps its own figure); a class with
no run at all takes the overall worst.

The bound is one multiplication, so the layout search applies it to thousands of layouts at no cost. It does not
include MoE routing imbalance beyond ``training.moe_overload_factor``: the point already counts that factor, and
the verdict states the largest factor that still fits (:mod:`estimator.plan.headroom`).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import error_bands_data as _data

__all__ = ["Band", "CLASSES", "MIN_RUNS", "band_for", "classes_of"]

#: Fewer measured runs than this and a class takes the worst of the well-measured classes (never less than its own
#: worst; the overall worst where it has no run).
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
    "fine_grained_activation_offloading": "fine-grained activation offloading",
}


def _get(cfg, section: str, name: str, default=None):
    """A field of a Config (attributes) or of a configuration dict (sections), ``default`` when absent."""
    if isinstance(cfg, dict):
        return (cfg.get(section) or {}).get(name, default)
    return getattr(getattr(cfg, section, None), name, default)


def classes_of(config) -> tuple:
    """The classes of a configuration (a :class:`~estimator.config.schema.Config` or its dict), in :data:`CLASSES` order.

    ``dense`` / ``moe`` only without FSDP, CUDA graphs and fine-grained activation offloading, whose runs miss by
    more; ``fp8`` or ``nvfp4`` beside any of them (``nvfp4`` has no measured run, so it takes the overall worst)."""
    out = []
    graphs = _get(config, "training", "cuda_graph_impl", "none") or "none"
    fsdp = bool(_get(config, "parallelism", "use_torch_fsdp2") or _get(config, "parallelism", "use_megatron_fsdp"))
    offload = bool(_get(config, "training", "fine_grained_activation_offloading"))
    if graphs == "none" and not fsdp and not offload:
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
    if offload:
        out.append("fine_grained_activation_offloading")
    return tuple(out)


@dataclass(frozen=True)
class Band:
    """The error band of one configuration: the class that drives it and its measured figures."""

    fraction: float        # upper bound = point x (1 + fraction)
    drivers: tuple         # the configuration's classes (CLASSES keys)
    driver: str            # the class whose figure is used; "measured" (the worst of the well-measured classes) or
    #                        "overall" (no run of the class) where it has too few runs
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
            return (f"{what}: no measured run of this class, so the overall worst applies, "
                    f"{self.worst_error_pct:+.1f} % on {self.runs} runs")
        if self.driver == "measured":
            return (f"{what}: too few measured runs of this class, so the worst of the well-measured classes "
                    f"applies, {self.worst_error_pct:+.1f} % ({self.worst_run})")
        return f"{what}: measured worst {self.worst_error_pct:+.1f} % on {self.runs} runs of this class"

    def to_dict(self) -> dict:
        return {"fraction": self.fraction, "pct": round(100 * self.fraction, 2), "classes": list(self.drivers),
                "driver": self.driver, "worst_error_pct": self.worst_error_pct, "runs": self.runs,
                "worst_run": self.worst_run, "reason": self.reason}


def _well_measured() -> dict:
    """The worst of the classes measured on at least :data:`MIN_RUNS` runs, as a row of the table."""
    rows = [r for r in _data.CLASSES.values() if r["runs"] >= MIN_RUNS]
    return min(rows, key=lambda r: r["worst_error_pct"]) if rows else _data.OVERALL


def _figure(name: str) -> tuple:
    """(driver, row) of one class: its own figure with enough runs; with fewer, the worse of its own worst and the
    well-measured classes' worst; with none, the overall worst."""
    row = _data.CLASSES.get(name)
    if row is None:
        return "overall", _data.OVERALL
    if row["runs"] < MIN_RUNS:
        floor = _well_measured()
        if floor["worst_error_pct"] < row["worst_error_pct"]:
            return "measured", floor
    return name, row


def band_for(config) -> Band:
    """The band of a configuration: the largest of its classes' measured worst under-estimates (0 when none was
    under). ``config``: a Config or a configuration dict; an empty one is a dense model."""
    drivers = classes_of(config or {})
    name, row = max((_figure(c) for c in drivers), key=lambda nr: -nr[1]["worst_error_pct"])
    return Band(fraction=max(0.0, -row["worst_error_pct"]) / 100.0, drivers=drivers, driver=name,
                worst_error_pct=row["worst_error_pct"], runs=row["runs"], worst_run=row["worst_run"])
