"""The result types of the theoretical-memory API and its printed units, shared by the seeds' API
(:mod:`estimator.reference.theoretical`) and the upstream formulas (:mod:`estimator.reference.upstream`).

The result has the shape Megatron-Bridge gives it (``theoretical_memory_utils.py``). Memory is in bytes; the printed
"MB"/"GB" are 2^20/2^30 bytes, as Megatron prints them ("MiB"/"GiB" give the same numbers with honest labels).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.errors import ConfigError, Problem, show
from ..memory.report import GIB, to_plain

__all__ = ["MemoryComponent", "TrainingMemoryEstimate", "memory_unit"]

#: Units of the printed line: upstream's "MB" and "GB" are binary (2^20, 2^30 bytes); MiB/GiB say so.
_UNITS = {"MB": (2 ** 20, "MB"), "GB": (GIB, "GB"), "MIB": (2 ** 20, "MiB"), "GIB": (GIB, "GiB")}


def memory_unit(unit: str) -> tuple[int, str]:
    """(bytes per unit, label) of ``unit``: MB/GB as upstream prints them (2^20/2^30 bytes), or MiB/GiB."""
    key = unit.strip().upper() if isinstance(unit, str) else None
    if key not in _UNITS:
        raise ConfigError(Problem("unit", show(unit), f"Unsupported memory unit: {show(unit)}; allowed: MB, GB "
                                  "(binary, 2^20 and 2^30 bytes, as Megatron prints them), MiB, GiB"))
    return _UNITS[key]


@dataclass(frozen=True, slots=True)
class MemoryComponent:
    """One memory component on the most-loaded GPU shard (counts may be fractional, as upstream's are)."""

    name: str
    parameter_count: float = 0.0          # global parameters covered
    parameter_count_per_gpu: float = 0.0  # on the most-loaded shard
    bytes_per_parameter: float = 0.0      # weights + gradients + optimizer states, per parameter
    memory_bytes: float = 0.0

    def to_dict(self) -> dict:
        return to_plain(self)


@dataclass(frozen=True, slots=True)
class TrainingMemoryEstimate:
    """A theoretical per-GPU training memory estimate: model states by component, activations, assumptions."""

    formula: str                   # one of theoretical.FORMULAS
    model_state_components: tuple  # MemoryComponent: dense + embedding first, then routed experts if any
    activation: MemoryComponent | None
    total_parameters: float        # global parameter count covered by the formula
    assumptions: tuple
    details: dict = field(default_factory=dict)  # formula-specific facts (activation path, peak stage, ...)

    @property
    def weight_and_optimizer_bytes(self) -> float:
        return sum(c.memory_bytes for c in self.model_state_components)

    @property
    def activation_bytes(self) -> float:
        return 0.0 if self.activation is None else self.activation.memory_bytes

    @property
    def total_memory_bytes(self) -> float:
        return self.weight_and_optimizer_bytes + self.activation_bytes

    def to_dict(self) -> dict:
        d = to_plain(self)
        d.update(weight_and_optimizer_bytes=self.weight_and_optimizer_bytes,
                 activation_bytes=self.activation_bytes, total_memory_bytes=self.total_memory_bytes)
        return d

    def __repr__(self) -> str:
        return (f"TrainingMemoryEstimate({self.formula}: weight and optimizer="
                f"{self.weight_and_optimizer_bytes / GIB:.2f} GiB, activation={self.activation_bytes / GIB:.2f} GiB)")
