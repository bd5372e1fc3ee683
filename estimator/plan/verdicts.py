"""Fit verdicts in words, one vocabulary for the site, the calculator and the CLI, and why a run is tight.

:func:`estimator.formats.gpus.fit` gives every pipeline stage one of three verdicts against a GPU's capacity:
``fits``, ``tight`` or ``no``. This module holds the words and the one-line meaning of each (the static
pages and the calculator print the same ones), and :func:`explain` says in figures why a configuration
that does not fit comes out where it does: which part of the memory takes it over the capacity, and which
assumptions of the estimate a published recipe may not share. Every figure comes from the estimate; no
arithmetic on memory happens here beyond differences of its own byte counts.
"""

from __future__ import annotations

from ..memory.assemble import ALLOCATOR_RESERVE_FRACTION
from ..memory.report import GIB

__all__ = ["MEANINGS", "WORDS", "explain", "worst", "word"]

#: The verdict of :attr:`estimator.formats.gpus.StageFit.verdict` in words.
WORDS = {"fits": "fits", "tight": "tight", "no": "does not fit"}

#: What each verdict means, for a legend beside every fit table and the calculator.
MEANINGS = {
    "fits": "the stage's memory on the device (what PyTorch allocates, its caching allocator's reserve, the "
            "CUDA context and the NCCL buffers) is within the GPU's capacity.",
    "tight": "what PyTorch allocates (with the CUDA context and NCCL buffers) fits, but not the caching "
             "allocator's usual reserve on top: such runs usually train, with allocator retries and some "
             "slowdown (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True makes it likelier).",
    "no": "even what PyTorch allocates exceeds the GPU: the run stops with an out-of-memory error.",
}


def word(verdict: str) -> str:
    """``fits`` | ``tight`` | ``does not fit`` for a verdict code (fits, tight, no)."""
    return WORDS[verdict]


def worst(fits) -> object:
    """The stage verdict with the least headroom (a StageFit or its ``to_dict()``)."""
    key = (lambda f: f["headroom_bytes"]) if fits and isinstance(fits[0], dict) else (lambda f: f.headroom_bytes)
    return min(fits, key=key)


def _g(b: int) -> str:
    return f"{b / GIB:.2f} GiB"


def explain(est, fits, config: dict) -> list[str]:
    """Why the fullest stage of ``est`` does not fit (``fits``: :func:`estimator.formats.gpus.fit` of it), in sentences.

    Empty when every stage fits. ``config`` is the configuration as written (for the settings a recipe
    states that the estimate reads differently)."""
    w = worst(fits)
    if w.verdict == "fits":
        return []
    s = est.stages[w.stage]
    cap = w.capacity_bytes
    reserve, runtime = s.reserved_bytes - s.allocated_bytes, s.device_bytes - s.reserved_bytes
    out = []
    if w.verdict == "tight":
        out.append(f"Stage {s.stage} allocates {_g(s.allocated_bytes)} at its peak, which fits {_g(cap)} with the "
                   f"CUDA context and NCCL buffers ({_g(runtime)}); the caching allocator's reserve on top "
                   f"({_g(reserve)}: " + (f"{ALLOCATOR_RESERVE_FRACTION:.0%} of the allocated memory, about what "
                                          "measured runs keep" if _fraction(est) else "from the simulated allocator's "
                                          "replay of the step") + f") takes it {_g(-w.headroom_bytes)} over. A published recipe that runs on this GPU "
                   "can land here: PyTorch frees its cached blocks and retries an allocation before it reports "
                   "out-of-memory, so such runs usually train, somewhat slower.")
    else:
        parts = [("weights", s.weights_bytes), ("gradients", s.gradients_bytes),
                 ("optimizer states", s.optimizer_bytes), ("activations", s.activations_bytes)]
        big = sorted(parts, key=lambda x: -x[1])[:2]
        out.append(f"Stage {s.stage} allocates {_g(s.allocated_bytes)} at its peak against {_g(cap)}: "
                   + " and ".join(f"{n} {_g(b)}" for n, b in big) + " are the largest parts.")
    per = est.parallel.get("bytes_per_parameter") or {}
    prec = config.get("precision") or {}
    if (prec.get("accumulate_allreduce_grads_in_fp32") is False and per.get("gradients") == 4
            and per.get("weights") == 2 and s.gradients_bytes):
        out.append(f"Gradients are counted in fp32 (4 bytes per parameter, {_g(s.gradients_bytes)} here) although the "
                   "configuration sets accumulate_allreduce_grads_in_fp32: false: Megatron-LM's arguments.py turns "
                   "fp32 accumulation back on for bf16 weights unless --grad-reduce-in-bf16 is given, while a "
                   f"Megatron-Bridge recipe that reduces in bf16 keeps half of it ({_g(s.gradients_bytes // 2)} "
                   "less).")
    train = config.get("training") or {}
    par = est.parallel
    if par.get("tp", 1) > 1 and not par.get("sequence_parallel") and s.activations_bytes:
        out.append("Sequence parallelism is off with tensor parallelism: every tensor-parallel rank keeps the full "
                   "activations of the norms, dropout and residual stream.")
    if train.get("recompute_granularity") is None and s.activations_bytes > s.allocated_bytes // 4:
        out.append(f"No activation recomputation: activations take {_g(s.activations_bytes)} of the stage.")
    return out


def _fraction(est) -> bool:
    """Whether the estimate's reserve is the fixed fraction (``training.reserved_memory_model: fraction``)."""
    cfg = est._config
    return getattr(getattr(cfg, "training", None), "reserved_memory_model", "fraction") != "replay"
