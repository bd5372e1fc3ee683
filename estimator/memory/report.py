"""Result types: frozen dataclasses with a recursive ``to_dict()`` of plain JSON types.

The keys of ``Estimate.to_dict()`` listed in the README are a stable contract (the CLI's ``--json``,
the calculator's ``data-estimate`` and the site's tables all read them): ``parameters.total``,
``parameters.active``, ``stages[i].stage``, ``stages[i].weights_bytes``, ``stages[i].gradients_bytes``,
``stages[i].optimizer_bytes``, ``stages[i].activations_bytes``, ``stages[i].allocated_bytes``,
``stages[i].reserved_bytes``, ``stages[i].device_bytes``, ``peak.stage``, ``peak.allocated_bytes``,
``peak.device_bytes``. All memory is in bytes; conversion to GiB happens only when printing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import NamedTuple

from ..model.params import ParameterCounts

__all__ = ["ChunkReport", "Estimate", "Peak", "StageEstimate", "GIB", "GB", "gib_ticks", "to_plain"]

GIB = 2 ** 30
GB = 10 ** 9


def to_plain(obj):
    """Recursively convert dataclasses, tuples and dicts to plain JSON types."""
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: to_plain(getattr(obj, f.name)) for f in fields(obj) if not f.name.startswith("_")}
    if isinstance(obj, (list, tuple)):
        return [to_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    return obj


class ChunkReport(NamedTuple):
    """One virtual chunk of a pipeline stage: what it holds and how many of its micro-batches are in flight."""

    layers: range                # global decoder-layer indices
    embedding: bool              # the input embedding (Megatron's pre_process)
    output_layer: bool           # final norm, output layer and loss (post_process)
    mtp_layers: int              # multi-token-prediction layers
    microbatches_in_flight: int  # its micro-batches whose activations the stage holds at its peak

    def to_dict(self) -> dict:
        return {"layers": list(self.layers), "embedding": self.embedding, "output_layer": self.output_layer,
                "mtp_layers": self.mtp_layers, "microbatches_in_flight": self.microbatches_in_flight}

    @property
    def label(self) -> str:
        """In the letters of Megatron's layout strings: ``E+0-2``, ``3-4``, ``60+m+L``, ``-`` when empty."""
        parts = ["E"] if self.embedding else []
        if len(self.layers):
            a, b = self.layers[0], self.layers[-1]
            parts.append(f"{a}-{b}" if b > a else str(a))
        if self.mtp_layers:
            parts.append("m" if self.mtp_layers == 1 else f"m*{self.mtp_layers}")
        if self.output_layer:
            parts.append("L")
        return "+".join(parts) or "-"


class StageEstimate(NamedTuple):
    """Memory of one GPU of one pipeline stage (the most loaded rank of that stage), in bytes.

    Immutable like the other result types; a NamedTuple rather than a frozen dataclass because the layout
    search builds hundreds of thousands of them and a frozen dataclass costs ten times more to construct.
    """

    stage: int
    layers: tuple            # global decoder-layer indices held, one range per virtual chunk
    has_embedding: bool      # the input embedding (on a chunk of this stage)
    has_output_layer: bool   # final norm, output layer and loss
    mtp_layers: int          # multi-token-prediction layers
    parameters: int          # parameters held by one GPU of this stage
    expert_parameters: int   # of which routed-expert parameters
    microbatches_in_flight: int  # (chunk) micro-batches whose activations are held at the peak
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int   # 0 when peak_phase is "optimizer_step": the activations are freed before the step
    transient_bytes: int
    allocated_bytes: int     # what torch.cuda.max_memory_allocated() reports on this rank
    reserved_bytes: int      # plus the caching allocator's reserve (max_memory_reserved)
    device_bytes: int        # plus CUDA context and communication buffers: hold this against the GPU
    activations: dict        # activations by component
    transient: dict          # transient buffers by component
    chunks: tuple = ()       # ChunkReport per virtual chunk, in order
    host_bytes: int = 0      # pinned and pageable host memory (offloading), not part of any device figure
    host: dict | None = None              # host memory by kind
    outside_allocator: dict | None = None  # device bytes beyond the allocated peak (userbuffers, DeepEP, graph pools)
    # The components above are those alive in the phase that holds the peak (estimator/memory/optimizer_step.py):
    # "forward_backward" or "optimizer_step" (the steady step: activations freed, the step's buffers alive), or a
    # phase of the run beyond it that holds more (estimator/memory/phases.py): "evaluation", "checkpoint_save",
    # "checkpoint_load" (activations 0; transient: the run-long buffers and that phase's own)
    peak_phase: str = "forward_backward"
    forward_backward_bytes: int = 0        # allocated at the peak of the forward and backward passes
    optimizer_step_bytes: int = 0          # allocated at the peak of the optimizer step
    # Allocated peak of every phase of the run (steady_step, first_step, evaluation, checkpoint_save,
    # checkpoint_load), counted in the totals or not (estimator/memory/phases.py); None where not modelled
    phase_bytes: dict | None = None

    @property
    def model_state_bytes(self) -> int:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    def to_dict(self) -> dict:
        d = self._asdict()
        d["layers"] = [list(c) for c in self.layers]
        d["num_layers"] = sum(len(c) for c in self.layers)
        d["activations"] = dict(self.activations)
        d["transient"] = dict(self.transient)
        d["chunks"] = [c.to_dict() for c in self.chunks]
        d["host"] = dict(self.host or {})
        d["outside_allocator"] = dict(self.outside_allocator or {})
        d["phase_bytes"] = dict(self.phase_bytes or {})
        return d

    @property
    def phase_name(self) -> str:
        """The phase holding this stage's totals in words: steady step, evaluation, checkpoint save or load."""
        return _PHASE_WORDS.get(self.peak_phase, "steady step")

    @property
    def label(self) -> str:
        """The chunks in layout letters, comma-separated: ``E+0, 15-16, 31-32, 47-48``."""
        return ", ".join(c.label for c in self.chunks)

    def __repr__(self) -> str:
        return (f"StageEstimate(stage={self.stage}, allocated={self.allocated_bytes / GIB:.2f} GiB, "
                f"device={self.device_bytes / GIB:.2f} GiB)")


_PHASE_WORDS = {"evaluation": "evaluation", "checkpoint_save": "checkpoint save", "checkpoint_load": "checkpoint load",
                "first_step": "first step", "actor_logprob": "actor log-prob pass",
                "reference_logprob": "reference log-prob pass", "policy_update": "policy update", "rollout": "rollout"}


class Peak(NamedTuple):
    """The stage with the largest device footprint and its totals, in bytes."""

    stage: int
    allocated_bytes: int
    reserved_bytes: int
    device_bytes: int


@dataclass(frozen=True)
class Estimate:
    """The estimate for a whole configuration: every pipeline stage, the peak, and the assumptions."""

    stages: tuple
    peak: Peak
    parallel: dict           # resolved sizes: tp, pp, dp, cp, ep, etp, edp, vpp, num_microbatches, ...
    #: The GPU architecture the figures are for: ``arch`` (a training.gpu_arch name), ``compute_capability``
    #: ("9.0") and ``assumed`` (true when no GPU was named: the estimator's default, said in the assumptions).
    gpu_arch: dict = field(default_factory=dict)
    _parameters: object = field(repr=False, compare=False, default=None)    # built on first use
    _assumptions: object = field(repr=False, compare=False, default=None)   # built on first use
    _config: object = field(repr=False, compare=False, default=None)

    @cached_property
    def parameters(self) -> ParameterCounts:
        """Exact parameter counts of the whole model."""
        p = self._parameters
        return p() if callable(p) else p

    @cached_property
    def assumptions(self) -> tuple:
        """Every assumption behind the numbers, as sentences."""
        a = self._assumptions
        return tuple(a() if callable(a) else (a or ()))

    @property
    def config(self) -> dict:
        """The configuration as the user wrote it."""
        c = self._config
        return c.to_dict() if hasattr(c, "to_dict") else dict(c or {})

    @property
    def peak_stage(self) -> "StageEstimate":
        return self.stages[self.peak.stage]

    @property
    def peak_phase(self) -> str:
        """Where the overall peak is: "steady step", "first step", "evaluation", "checkpoint save" or
        "checkpoint load" (estimator/memory/phases.py)."""
        return self.peak_stage.phase_name

    def to_dict(self) -> dict:
        return {
            "parameters": self.parameters.to_dict(),
            "stages": [s.to_dict() for s in self.stages],
            "peak": self.peak._asdict(),
            "peak_phase": self.peak_phase,
            "parallel": dict(self.parallel),
            "gpu_arch": dict(self.gpu_arch),
            "assumptions": list(self.assumptions),
            "config": self.config,
        }

    def __repr__(self) -> str:
        return (f"Estimate(params={self.parameters.total / 1e9:.2f}B, stages={len(self.stages)}, "
                f"peak=stage {self.peak.stage}: {self.peak.allocated_bytes / GIB:.2f} GiB allocated, "
                f"{self.peak.device_bytes / GIB:.2f} GiB device)")


def gib_ticks(top: int) -> list[dict]:
    """Axis ticks from 0 GiB to at least ``top`` bytes, steps of 1, 2 or 5 x 10^k GiB."""
    t = top / GIB
    if t <= 0:
        return [{"bytes": 0, "label": "0"}]
    raw = t / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    n = math.ceil(t / step - 1e-9)
    return [{"bytes": round(i * step * GIB), "label": f"{i * step:g}"} for i in range(n + 1)]
