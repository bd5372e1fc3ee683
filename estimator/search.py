"""Strategy search: every valid parallel layout of a model on N GPUs, the ones that fit, ranked.

(API stub: the body is being written; the signatures and result types below are final.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

__all__ = ["Answer", "Layout", "SearchResult", "max_micro_batch", "max_seq_length", "min_gpus", "search"]


@dataclass(frozen=True)
class Layout:
    """One parallel layout that fits, with its complete configuration and why it ranks where it does."""

    rank: int
    label: str               # "TP8 PP2 VPP2 DP4 EP8 ETP1 mbs1 full"
    config: dict             # complete four-section configuration; estimate(config) reproduces the numbers
    num_gpus: int
    tp: int
    pp: int
    vpp: int                 # 1 = plain 1F1B
    cp: int
    ep: int
    etp: int
    dp: int
    edp: int
    first_stage_layers: int | None
    last_stage_layers: int | None
    sequence_parallel: bool
    distributed_optimizer: bool
    recompute: str           # none | selective | full | block:N
    micro_batch_size: int
    num_microbatches: int
    peak_stage: int
    peak_allocated_bytes: int
    peak_device_bytes: int
    capacity_bytes: int
    headroom_bytes: int      # capacity - peak device bytes
    headroom_fraction: float  # headroom_bytes / capacity
    bubble: float            # (p - 1) / (m * v)
    cost: float              # relative step time, 1.0 = a perfectly efficient layout
    costs: dict              # cost breakdown: name -> fraction of ideal step time
    why: str

    def to_dict(self) -> dict:
        raise NotImplementedError


@dataclass(frozen=True)
class SearchResult:
    """Every layout that fits, best first, and what the search looked at."""

    layouts: tuple
    num_gpus: tuple
    gpu: dict                # name, memory_bytes, source
    capacity_bytes: int
    headroom: float
    seq_length: int
    global_batch_size: int | None
    enumerated: int          # layouts enumerated (valid configurations)
    evaluated: int           # layouts whose memory was computed (the rest were pruned by monotonicity)
    fitting: int             # layouts that fit (before ``top`` cut the list)
    elapsed_s: float
    notes: tuple = field(default=())

    @property
    def best(self) -> Layout | None:
        return self.layouts[0] if self.layouts else None

    def to_dict(self) -> dict:
        raise NotImplementedError


@dataclass(frozen=True)
class Answer:
    """The answer to a reverse question, with the layout that achieves it (None when nothing fits)."""

    question: str            # min_gpus | max_micro_batch | max_seq_length
    value: int | None
    layout: Layout | None
    tried: tuple             # (value, fits) pairs, in the order tried
    reason: str

    def to_dict(self) -> dict:
        raise NotImplementedError


def search(model_or_config, *, num_gpus: int | Iterable[int], gpu: str | int, seq_length: int | None = None,
           global_batch_size: int | None = None, micro_batch_sizes: Iterable[int] = (1, 2, 4),
           headroom: float = 0.05, max_tp: int = 8, gpus_per_node: int = 8,
           recompute: Iterable[str] = ("none", "selective", "full"),
           distributed_optimizer: Iterable[bool] = (True, False), top: int | None = None,
           **fixed) -> SearchResult:
    """Every valid layout of ``model_or_config`` on ``num_gpus`` GPUs of ``gpu`` that fits, best first.

    ``model_or_config``: a preset name, a config (path, YAML/JSON text, dict or Config) or a bare model
    section (dict). ``gpu``: a GPU name known to :mod:`estimator.gpus` or a capacity in bytes.
    ``fixed``: schema field names (or tp/pp/vpp/cp/ep/etp/mbs) pinned to one value.
    """
    raise NotImplementedError


def min_gpus(model_or_config, *, gpu: str | int, seq_length: int | None = None,
             candidates: Iterable[int] | None = None, **kwargs) -> Answer:
    """The fewest GPUs (powers of two by default) on which some layout fits."""
    raise NotImplementedError


def max_micro_batch(config, *, gpu: str | int, headroom: float = 0.05, limit: int = 1024) -> Answer:
    """The largest micro-batch size with which this layout still fits."""
    raise NotImplementedError


def max_seq_length(config, *, gpu: str | int, headroom: float = 0.05, multiple: int | None = None,
                   limit: int | None = None) -> Answer:
    """The longest sequence with which this layout still fits."""
    raise NotImplementedError
