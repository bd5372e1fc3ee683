"""Fit verdicts in words, one vocabulary for the site, the calculator and the CLI, and why a run is amber.

:func:`estimator.formats.gpus.fit` gives every pipeline stage one of three verdicts against a GPU's capacity, by
one rule (the point estimate, its upper bound from the measured error band, and what is kept free): ``fits``,
``tight`` (*fits within the error band*, amber) or ``no`` (*does not fit*). This module holds the words and the one-line meaning of each (the static
pages and the calculator print the same ones), and :func:`explain` says in figures why a configuration
that does not fit comes out where it does: which part of the memory takes it over the capacity, and which
assumptions of the estimate a published recipe may not share. Every figure comes from the estimate; no
arithmetic on memory happens here beyond differences of its own byte counts.
"""

from __future__ import annotations

from ..memory.assemble import ALLOCATOR_RESERVE_FRACTION
from ..memory.report import GIB

__all__ = ["MEANINGS", "WORDS", "explain", "summary", "worst", "worst_verdict", "word"]

#: The verdict of :attr:`estimator.formats.gpus.StageFit.verdict` in words.
WORDS = {"fits": "fits", "tight": "fits within the error band", "no": "does not fit"}

#: What each verdict means, for a legend beside every fit table and the calculator.
MEANINGS = {
    "fits": "even the upper bound of the stage's memory on the device (the estimate plus the worst under-estimate "
            "measured on runs of its kind) fits the GPU, with what is kept free.",
    "tight": "the estimate fits the GPU (or at least what PyTorch allocates does, without the caching allocator's "
             "usual reserve) but its upper bound does not: runs of this kind have measured up to the band above the "
             "estimate, so it may run out of memory.",
    "no": "even what PyTorch allocates, with the CUDA context and NCCL buffers, exceeds the GPU (with what is kept "
          "free): expect an out-of-memory error.",
}


def word(verdict: str) -> str:
    """``fits`` | ``tight`` | ``does not fit`` for a verdict code (fits, tight, no)."""
    return WORDS[verdict]


def worst(fits) -> object:
    """The stage verdict with the least headroom (a StageFit or its ``to_dict()``)."""
    key = (lambda f: f["headroom_bytes"]) if fits and isinstance(fits[0], dict) else (lambda f: f.headroom_bytes)
    return min(fits, key=key)


_ORDER = {"no": 0, "tight": 1, "fits": 2}


def worst_verdict(fits):
    """The stage with the worst verdict (does not fit, then amber, then fits), least headroom first among equals."""
    return min(fits, key=lambda f: (_ORDER[f.verdict], f.headroom_bytes))


def summary(fits) -> str:
    """The verdict of every stage in one sentence, short answer first (GiB = 2^30 bytes); where the worst stage's
    peak is a moment other than the steady training step (estimator/memory/phases.py), a clause names it."""
    w = worst_verdict(fits)
    phase = getattr(w, "phase", "steady step")
    if phase == "rollout":
        return _summary(fits, w) + (f" Stage {w.stage}'s worst moment is the RL rollout: what the training side "
                                    "keeps on the GPU beside the rollout engine's share.")
    return _summary(fits, w) + (f" Stage {w.stage}'s peak is at its {phase}, above the steady training step."
                                if phase != "steady step" else "")


def _summary(fits, w) -> str:
    kept = f", {_g(w.keep_free_bytes)} kept free" if w.keep_free_bytes else ""
    band = f"+{100 * w.band.fraction:.1f} %"
    if w.verdict == "fits":
        return (f"every stage fits: even the upper bound of the fullest, stage {w.stage}, fits ({_g(w.upper_bound_bytes)}"
                f" = estimate {_g(w.device_bytes)} {band}{kept}).")
    if w.verdict == "tight" and w.device_bytes + w.keep_free_bytes <= w.capacity_bytes:
        return (f"fits within the error band: stage {w.stage}'s estimate {_g(w.device_bytes)} fits, its upper bound "
                f"{_g(w.upper_bound_bytes)} ({band}{kept}) does not. The band: {w.band.reason}.")
    if w.verdict == "tight":
        return (f"fits within the error band: stage {w.stage}'s estimate {_g(w.device_bytes)}{kept} is "
                f"{_g(w.device_bytes + w.keep_free_bytes - w.capacity_bytes)} over, but what PyTorch allocates fits "
                "without the caching allocator's usual reserve; such runs often train, not a launch to bet on.")
    bad = [f.stage for f in fits if f.verdict == "no"]
    return (f"stage{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} do{'es' if len(bad) == 1 else ''} not "
            f"fit: stage {w.stage}'s estimate {_g(w.device_bytes)}{kept} is {_g(w.device_bytes + w.keep_free_bytes - w.capacity_bytes)} over.")


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
    if w.verdict == "tight" and w.device_bytes + w.keep_free_bytes <= cap:
        out.append(f"Stage {s.stage} needs {_g(w.device_bytes)} by the estimate, which fits {_g(cap)}, but its upper "
                   f"bound is {_g(w.upper_bound_bytes)}: {w.band.reason}. Keep {_g(w.upper_bound_bytes - w.device_bytes)}"
                   " more free (or shrink the estimate by that much) to be safe.")
    elif w.verdict == "tight":
        out.append(f"What PyTorch allocates fits ({_g(s.allocated_bytes)} with the CUDA context and NCCL buffers, "
                   f"{_g(runtime)}); the caching allocator's reserve on top ({_g(reserve)}: " + (
                       f"{ALLOCATOR_RESERVE_FRACTION:.0%} of the allocated memory, about what measured runs keep"
                       if _fraction(est) else "from the simulated allocator's replay of the step")
                   + f") takes it {_g(-w.headroom_bytes)} over. Such runs often train (PyTorch frees its cached "
                   "blocks and retries before it reports out-of-memory, and PYTORCH_CUDA_ALLOC_CONF="
                   "expandable_segments:True makes it likelier), but it is not a launch to bet on.")
    if w.verdict == "no":
        parts = [("weights", s.weights_bytes), ("gradients", s.gradients_bytes),
                 ("optimizer states", s.optimizer_bytes), ("activations", s.activations_bytes)]
        big = sorted(parts, key=lambda x: -x[1])[:2]
        out.append(f"Stage {s.stage} allocates {_g(s.allocated_bytes)} at its peak against {_g(cap)}: "
                   + " and ".join(f"{n} {_g(b)}" for n, b in big) + " are the largest parts.")
    if s.phase_name != "steady step":
        own = [(k, v) for k, v in s.transient.items()
               if k.startswith(("checkpoint_", "evaluation_", "logprob_", "reference_", "rl_", "entropy_"))]
        steady = (s.phase_bytes or {}).get("steady_step", 0)
        out.append(f"Stage {s.stage}'s peak is at its {s.phase_name}, {_g(s.allocated_bytes - steady)} above the steady "
                   "training step" + (": " + ", ".join(f"{k.replace('_', ' ')} {_g(v)}" for k, v in own) if own else "")
                   + " (the methodology page, Beyond the steady step).")
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
