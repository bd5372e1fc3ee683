"""Memory over one training step, per pipeline stage: the estimate's peak, unrolled along the schedule.

For every pipeline stage this module walks the stage's pipeline schedule (:mod:`estimator.memory.schedule`,
after Megatron-Core ``pipeline_parallel/schedules.py``) and lists the memory one GPU of the stage has
allocated after each event, built from the very figures the estimate (:mod:`estimator.memory.assemble`) adds up:

- start: the model states (weights, gradients, optimizer states) plus the buffers held for the whole
  run (GEMM workspaces, Megatron's global buffer, Transformer Engine's dummy weight gradients). The
  timeline shows a step after the first, when those buffers exist already;
- forward of a (chunk-)micro-batch: plus the activations that micro-batch leaves on that chunk,
  ``a_c`` (its decoder layers, and the embedding, output layer and loss, MTP layers the chunk holds);
- backward of a (chunk-)micro-batch: the activations held, plus the stage's working set of a
  backward pass (the largest transient buffer the estimate names for the stage: the layers' gradient
  working set, the loss's buffers, the output layer's or the embedding's weight gradient); then, once
  it is done, minus ``a_c``;
- optimizer step: after the last backward the activations are gone; the step's height is the
  estimate's ``optimizer_step_bytes`` where the estimate has that figure, else the model states and the
  persistent buffers.

The order of the passes is Megatron-Core's: 1F1B runs ``min(p - r - 1, m)`` warm-up forwards on rank r;
the interleaved schedule ``2 (p - r - 1) + (v - 1) N`` (N = ``microbatch_group_size_per_vp_stage``), its
forwards in the order of ``get_schedule_table`` and backward j on chunk ``v - 1 - chunk(j)``; then one
forward and one backward in turn, then the remaining backwards. Before each backward the stage holds one
of the mixes :func:`estimator.memory.schedule.held_counts` lists, so the highest point of the timeline is the
estimate's peak: ``states + persistent + max over mixes (sum_c k_c a_c) + working set`` is exactly how
:func:`estimator.memory.stage_memory` assembles ``allocated_bytes``. The estimate assumes the working
set of a backward pass may meet the heaviest mix; the timeline places it at every backward pass.

Long steps repeat themselves: a steady state of identical cycles is drawn once, with the number of
passes left out marked on the point after it (``skipped``). Only exact repeats are left out (whole
periods of Megatron's schedule table, which add and free the same activations), so the maximum of every
stage is kept. x is the order of events, not time: a pass is one step of the axis.

The size and the cost are bounded whatever the number of micro-batches m and the group size N. A stage with
at most :data:`EXACT_PASSES` passes (after the repeats left out) has every pass drawn. Beyond it, each run of
passes over the same chunks (:func:`estimator.memory.schedule.steps`: O(v) runs, N or ``last`` passes long) is
drawn by its first and its last step, the passes between counted in ``skipped`` (the held activations change
by the same amount at every step of a run, so its highest and lowest points are at its ends); of more than
:data:`MAX_RUNS` runs, evenly spaced ones and the one holding the most before a backward pass. And a stage
never has more than :data:`MAX_POINTS` points: past that, of each of equal slices of the points only the lowest
and the highest are kept (``thinned``: true on the point after them), the peak among them. The walk of one
stage costs O(v) whatever m and N; the calculator and the model pages draw at most 32 stages of a pipeline
(``estimator/web/charts.py``).
"""

from __future__ import annotations

from typing import NamedTuple

from ..model.local_attention import chunk_mask_bytes
from ..model.resolve import Resolved, resolve
from . import features
from .activations import received_input_bytes, stage_extras
from .assemble import chunk_activations, layer_kind_counts, kind_activations, parameter_layout, sum_activations
from .optimizer_step import PERSISTENT_BUFFERS
from .schedule import Table, entry, steps
from .states import byte_model
from .vision import vision_stage

__all__ = ["MAX_POINTS", "PERSISTENT", "StageInputs", "chunk_activation_bytes", "resolved_of", "stage_inputs", "stage_timeline",
           "stage_timelines"]

#: Transient buffers of the estimate that live for the whole run (allocated once, never freed): the
#: optimizer step's run-long buffers (:data:`estimator.memory.optimizer_step.PERSISTENT_BUFFERS`) and CUDA graphs'.
PERSISTENT = PERSISTENT_BUFFERS + ("cuda_graph_pool", "cuda_graph_static_buffers")
_PHASES = ("start", "forward", "backward", "after", "optimizer", "evaluation", "checkpoint_save", "checkpoint_load")


def resolved_of(est) -> Resolved:
    """The resolved configuration behind an estimate (with its number of micro-batches)."""
    r = resolve(est._config)
    r.m = est.parallel.get("num_microbatches")
    return r


class StageInputs(NamedTuple):
    """What :func:`estimator.memory.stage_memory` computes once for all stages and the timeline reuses."""

    acts: object          # LayerActivations per layer kind (adjusted by the recipe features where they act)
    extras: object        # activations outside the decoder layers (StageExtras)
    features: bool        # a recipe feature (FSDP, PEFT, offloading, CUDA graphs, ...) adjusts the totals


def stage_inputs(r: Resolved) -> StageInputs:
    """The per-kind layer activations and the stage extras, as the estimate takes them."""
    acts = kind_activations(r)
    feat = features.plan(r, byte_model(r), parameter_layout(r), acts)
    if feat is not None:
        acts = feat.acts
    mtp_act = sum_activations([acts[k] for k in r.mtp_kinds]) if r.mtp else None
    return StageInputs(acts, stage_extras(r, mtp_act), feat is not None)


def chunk_activation_bytes(r: Resolved, stage: int, inputs: StageInputs | None = None) -> list[int]:
    """Activation bytes one micro-batch leaves on each virtual chunk of ``stage``: its decoder layers (as
    :func:`estimator.memory.assemble.chunk_activations` counts them, with local attention's masks), plus the
    embedding's, the output layer and loss's and the MTP layers' where the chunk holds them
    (:func:`estimator.memory.activations.stage_extras`)."""
    inputs = inputs or stage_inputs(r)
    acts, extras = inputs.acts, inputs.extras
    loss_act = extras.output + r.mtp * extras.mtp_logits
    kind_counts = layer_kind_counts(r) if len(r.kinds) > 1 else None
    vis = vision_stage(r)
    emb = extras.embedding + (vis.activations if vis is not None else 0)     # the vision tower's images too
    out = []
    for c_idx, c in enumerate(r.plan[stage].chunks):
        counts = kind_counts[stage][c_idx] if kind_counts else (len(c.layers),)
        a = chunk_activations(r, c.layers, counts, acts)[0]
        a += chunk_mask_bytes(r, bool(c.embedding or c.loss), len(c.layers))[0] + received_input_bytes(r, c)
        a += (emb if c.embedding else 0) + (loss_act if c.loss else 0) + len(c.mtp) * extras.mtp
        a += max(len(c.mtp) - 1, 0) * extras.mtp_hsm      # mtp_hsm: each depth after the chunk's first
        out.append(a)
    return out


#: A stage's passes are listed one by one up to this many (after whole steady-state periods are left out);
#: beyond it each run of passes that repeat the same chunks is drawn by its first and last step.
EXACT_PASSES = 2_048
#: Runs drawn per stage at most (a stage has O(v) of them): beyond it, evenly spaced runs and the run where the
#: stage holds the most activations before a backward pass (its peak).
MAX_RUNS = 1_024
#: Points drawn per stage at most: beyond it the points are thinned to the lowest and highest of equal slices.
MAX_POINTS = 256


def _chunk(t: Table, kind: str, k: int) -> int:
    """The chunk a forward ("F") or backward ("B") pass of table entry k runs."""
    c = entry(t, k)[1]
    return t.v - 1 - c if kind == "B" else c


def _passes(r: Resolved, stage: int) -> list[tuple[str, int, int, int]]:
    """The stage's passes in schedule order: ("F" or "B", micro-batch, chunk, passes left out before it), the
    runs of :func:`estimator.memory.schedule.steps` written out pass by pass.

    Megatron's schedule table repeats itself every P = N v entries while it runs through whole groups of N
    micro-batches (every P entries there hold N of each chunk), so a window of steady-state steps (one
    forward, one backward each) K P long, with both its forwards and its backwards inside the whole groups,
    adds and frees the same activations: the stage holds exactly the same before and after it. Such a
    window (all whole periods but one on either side) is left out here; the values of the passes kept are
    those of the full walk."""
    _, t, _ = steps(r.p, stage, r.v, r.group, r.m)
    return [(kind, entry(t, k)[0], c, gap) for kind, k, c, gap, *_ in _walk(r, stage, None, True)[1]]


def _walk(r: Resolved, stage: int, act: list[int] | None, every: bool | None = None) -> tuple[bool, list[tuple]]:
    """Whether every pass is listed, and the stage's passes as (kind, table entry, chunk, passes left out before
    it, activations held before, after, whether some of those were thinned away rather than repeats).

    Every pass while there are at most :data:`EXACT_PASSES` of them (or ``every``), otherwise the first and the
    last step of each run, of at most :data:`MAX_RUNS` runs. The held activations change by the same amount at
    every step of a run, so what a step holds follows from the run's start and a run's highest and lowest points
    are at its ends; the runs drawn are evenly spaced, with the first run whose backward pass holds the most."""
    W, t, runs = steps(r.p, stage, r.v, r.group, r.m)
    if every is None:
        every = sum(run.count * (2 if run.kind == "FB" else 1) for run in runs) <= EXACT_PASSES
    act = act or [0] * r.v
    # Per run: the chunk of its forwards and of its backwards, and the activations held when it starts.
    ends, starts, held, top, top_run = [], [], 0, -1, 0
    for idx, run in enumerate(runs):
        f = _chunk(t, "F", W + run.start if run.kind == "FB" else run.start) if run.kind != "B" else None
        b = _chunk(t, "B", run.start) if run.kind != "F" else None
        step = (act[f] if f is not None else 0) - (act[b] if b is not None else 0)
        ends.append((f, b, step))
        starts.append(held)
        if b is not None:              # the most held before a backward of this run: at one of its ends
            before = held + (act[f] if f is not None else 0) + max(0, (run.count - 1) * step)
            if before > top:
                top, top_run = before, idx
        held += run.count * step
    n = len(runs)
    keep = (range(n) if every or n <= MAX_RUNS
            else sorted({n - 1, top_run} | {n * i // MAX_RUNS for i in range(MAX_RUNS)}))
    out, prev = [], -1
    for idx in keep:
        run = runs[idx]
        # runs thinned away just before this one: their passes, and what they had left out
        lost = sum(runs[x].skipped + runs[x].count * (2 if runs[x].kind == "FB" else 1) for x in range(prev + 1, idx))
        prev = idx
        f, b, step = ends[idx]
        count, per = run.count, 2 if run.kind == "FB" else 1
        for i in (range(count) if every or count < 3 else (0, count - 1)):
            h = starts[idx] + i * step
            gap = run.skipped + lost if i == 0 else (0 if every or count < 3 else per * (count - 2))
            thin = bool(lost) and i == 0
            if f is not None:
                out.append(("F", W + run.start + i if run.kind == "FB" else run.start + i, f, gap, h, h + act[f],
                            thin))
                h += act[f]
                gap, thin = 0, False
            if b is not None:
                out.append(("B", run.start + i, b, gap, h, h - act[b], thin))
    return every, out


def _compress(keys: list, period: int) -> list[tuple[int, int]]:
    """Which points to keep of a run whose ``keys`` (height, phase) repeat exactly with ``period``: whole
    periods after the first are left out. Returns (index, points left out just before it) per kept point."""
    n = len(keys)
    if period <= 0 or n < 3 * period:
        return [(i, 0) for i in range(n)]
    out, i = [], 0
    while i < n:
        j = i
        while j + period < n and keys[j] == keys[j + period]:
            j += 1
        q = (j - i) // period           # points i .. j + period - 1 repeat with the period
        if q >= 3:
            out.extend((k, 0) for k in range(i, i + period))
            out.append((i + q * period, (q - 1) * period))
            i += q * period + 1
        else:                           # no run starts at i .. j (each ends at j): keep them
            out.extend((k, 0) for k in range(i, max(j, i + 1)))
            i = max(j, i + 1)
    return out


def _thin(heights: list[int], kept: list[tuple[int, int]], limit: int) -> list[int]:
    """Which of the ``kept`` points (index into ``heights``, passes left out before it) to draw, at most ``limit``:
    the first and the last, and of each of equal slices of the rest its lowest and highest point (in order;
    the first highest, so the peak stays). Returns positions in ``kept``."""
    n = len(kept)
    if n <= limit:
        return [(i, left, False) for i, left in kept]
    slices = (limit - 2) // 2
    keep = [0]
    for s in range(slices):
        lo, hi = 1 + (n - 2) * s // slices, 1 + (n - 2) * (s + 1) // slices
        if lo < hi:
            low = high = lo
            for x in range(lo + 1, hi):
                h = heights[kept[x][0]]
                if h < heights[kept[low][0]]:
                    low = x
                if h > heights[kept[high][0]]:
                    high = x
            keep += (low, high) if low < high else (high, low) if high < low else (low,)
    keep.append(n - 1)
    return keep


def stage_timeline(est, r: Resolved, stage, inputs: StageInputs | None = None) -> dict:
    """One stage's timeline: ``points`` (label, bytes, phase; ``skipped`` passes before it, ``thinned`` where
    some of those were thinned away to keep at most :data:`MAX_POINTS` points) in order, and where the peak is.

    The forward/backward part rises to the estimate's ``forward_backward_bytes``: the model states, the
    run-long buffers, the activations held (the schedule's heaviest mix is the estimate's activations) and
    the backward working set, which is what is left of ``forward_backward_bytes``. Where a recipe feature
    adjusts the stage's activations (offloading, PEFT, ...), the activations held along the step are those
    of the schedule scaled to the estimate's (exact at the peak)."""
    inputs = inputs or stage_inputs(r)
    s = stage.stage
    states = stage.weights_bytes + stage.gradients_bytes + stage.optimizer_bytes
    persistent = sum(stage.transient.get(k, 0) for k in PERSISTENT)
    base = states + persistent
    in_fb = getattr(stage, "peak_phase", "forward_backward") == "forward_backward"
    moments = {k: b for k, b in stage.transient.items() if k not in PERSISTENT} if in_fb else {}
    working_name = max(moments, key=moments.get).replace("_", " ") if moments else "backward working set"
    act = chunk_activation_bytes(r, s, inputs)
    every, passes = _walk(r, s, act)
    held = passes[-1][5] if passes else 0
    max_held = max((ps[4] for ps in passes if ps[0] == "B"), default=0)
    if in_fb and not inputs.features and max_held != stage.activations_bytes or held != 0:
        raise RuntimeError(f"timeline of stage {s}: the schedule holds at most {max_held} bytes of activations, "
                           f"the estimate {stage.activations_bytes} (a bug: please report it)")
    A = stage.activations_bytes if in_fb else max_held
    fb_bytes = getattr(stage, "forward_backward_bytes", 0) or stage.allocated_bytes
    working = fb_bytes - base - A
    if working < 0:
        raise RuntimeError(f"timeline of stage {s}: the forward/backward peak {fb_bytes} is below its parts (a bug)")

    def shown(x: int) -> int:          # the schedule's activations, scaled to the estimate's where they differ
        return x if A == max_held or not max_held else x * A // max_held

    # Events: the pass each belongs to and its phase (0 start, 1 forward, 2 backward, 3 after, 4 optimizer),
    # and the height after each.
    which, phases, heights, skips = [0], [0], [base], [0]
    for k, (kind, _, c, gap, before, after, _) in enumerate(passes):
        if kind == "F":
            which.append(k)
            phases.append(1)
            heights.append(base + shown(after))
            skips.append(gap)
        else:
            which += (k, k)
            phases += (2, 3)
            heights += (base + shown(before) + working, base + shown(after))
            skips += (gap, 0)
    opt = getattr(stage, "optimizer_step_bytes", 0) or None    # 0: not modelled apart (recipe features)
    which.append(0)
    phases.append(4)
    heights.append(opt if opt is not None else base)
    skips.append(0)
    beyond = getattr(stage, "peak_phase", "")
    if beyond in _PHASES[5:]:          # a moment of the run beyond the step holds the peak (estimator/memory/phases.py)
        which.append(0)
        phases.append(_PHASES.index(beyond))
        heights.append(stage.allocated_bytes)
        skips.append(0)
    # Leave out exact repeats: per pass (3 points), per round of chunks, per round of micro-batch groups (where
    # every pass is listed: runs drawn by their ends are thinned below instead).
    kept = [(i, 0) for i in range(len(heights))]
    for period in sorted({3, 3 * r.v, 3 * r.group * r.v}, reverse=True):
        if not every or len(kept) < 3 * period:
            continue
        keys = [(heights[i], phases[i], skips[i] > 0) for i, _ in kept]
        sel = _compress(keys, period)
        merged = []
        for k, gap in sel:
            i, before = kept[k]
            # points left out: those of this pass, plus what earlier passes had left out inside them
            lost = sum(kept[x][1] + 1 for x in range(k - gap, k)) if gap else 0
            merged.append((i, before + lost))
        kept = merged
    # Passes left out before each kept point: its own gap, and the points the compression left out before it.
    kept = [(i, skips[i] + (sum(skips[x] + (phases[x] in (1, 2)) for x in range(i - gap, i)) if gap else 0))
            for i, gap in kept]
    keep = _thin(heights, kept, MAX_POINTS) if len(kept) > MAX_POINTS else range(len(kept))
    _, t, _ = steps(r.p, s, r.v, r.group, r.m)
    multi = r.v > 1
    points, prev = [], -1
    for x in keep:
        i, left_out = kept[x]
        thinned = x > prev + 1 or (phases[i] in (1, 2) and passes[which[i]][6])
        if thinned:                     # points thinned away just before: their passes and what they left out
            left_out += sum(kept[y][1] + (phases[kept[y][0]] in (1, 2)) for y in range(prev + 1, x))
        prev = x
        phase = _PHASES[phases[i]]
        _, k, c, *_ = passes[which[i]]
        name = f"micro-batch {entry(t, k)[0] + 1}" + (f", chunk {c}" if multi else "")
        label = {"start": "start: model states and persistent buffers", "forward": f"forward {name}",
                 "backward": f"backward {name} (+ {working_name})", "after": f"after backward {name}",
                 "optimizer": "optimizer step", "evaluation": "evaluation (between steps)",
                 "checkpoint_save": "checkpoint save (between steps)",
                 "checkpoint_load": "checkpoint load (on resume)"}[phase]
        pt = {"label": label, "bytes": heights[i], "phase": phase}
        if left_out:
            pt["skipped"] = left_out
        if thinned:
            pt["thinned"] = True
        points.append(pt)
    peak = max(range(len(points)), key=lambda k: points[k]["bytes"])
    return {"stage": s, "points": points, "peak_index": peak, "peak_bytes": points[peak]["bytes"],
            "base_bytes": base, "working_set": working_name, "working_set_bytes": working,
            "activations_per_microbatch": act}


def stage_timelines(est, stages=None) -> list[dict]:
    """The timeline of every pipeline stage of an estimate (plain data, bytes), or of the stages listed."""
    r = resolved_of(est)
    inputs = stage_inputs(r)
    chosen = est.stages if stages is None else [est.stages[s] for s in stages]
    return [stage_timeline(est, r, s, inputs) for s in chosen]
