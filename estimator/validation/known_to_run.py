"""Held-out validation: known-to-run configurations (``validation/known_to_run.yaml``).

Megatron-Bridge's performance recipes run on the GPUs they name, so each is a measurement "this fits".
A recipe is estimated from its preset's model and the parallelism, training and precision it sets, and the
largest ``device_bytes`` of its stages, estimated for that GPU's architecture (``training.gpu_arch``, as ``--gpu``
sets it), is held against the GPU's capacity (:func:`estimator.formats.gpus.fit`):
"no" (the point estimate is over the GPU) is a false out-of-memory verdict, "tight" (fits within the error band:
the point fits, its upper bound does not) is not.

A false out-of-memory verdict whose cause has been traced (the data file's ``false_oom_cause``: which
component is over-estimated, from Megatron-Core's source) is reported with that cause, so it stays visible
until the model is fixed.

A recipe whose settings include one the estimator does not model yet (the data file's ``unmodelled`` list,
a setting the estimator refuses, with its refusal message, or the BF16 gradient buffer while the estimator
still counts fp32 gradients) is listed as not yet estimable, with the reason, instead of being estimated
without it. One exception: where the data file says every unmodelled setting only adds memory
(``unmodelled_only_adds``), the estimate without them is a lower bound, shown as such; if even that lower
bound does not fit, the recipe counts as estimated, with a false out-of-memory verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import yamlio
from ..config.errors import ConfigError
from ..config.load import load_config
from ..formats.gpus import fit, get_gpu, with_gpu_arch
from ..formats.presets import preset_text
from ..memory.assemble import stage_memory
from ..memory.report import GIB
from ..model.resolve import resolve

__all__ = ["RecipeCase", "data_path", "evaluate", "load_recipes", "recipe_cases"]


def data_path() -> Path:
    return Path(__file__).resolve().parents[2] / "validation" / "known_to_run.yaml"


def load_recipes(path: str | Path | None = None) -> list[dict]:
    return yamlio.load(Path(path or data_path()).read_text(encoding="utf-8"))["recipes"]


@dataclass(frozen=True)
class RecipeCase:
    """One known-to-run recipe: estimable or not (and why), and the verdict against its GPU."""

    id: str
    source: str
    gpu: str
    world_size: int
    status: str                   # estimated | not_estimable
    reasons: tuple                # why not estimable (or, with lower_bound, what the estimate leaves out)
    device_gib: float | None      # largest device_bytes over the stages, GiB (2^30 B)
    capacity_gib: float | None
    verdict: str | None           # fits | tight (within the error band) | no (a false out-of-memory verdict)
    headroom_pct: float | None
    known_cause: str | None = None  # a false out-of-memory verdict whose cause is known (the data file says it)
    lower_bound: bool = False     # device_gib leaves out unmodelled settings that only add memory

    @property
    def false_oom(self) -> bool:
        return self.verdict == "no"


def recipe_config(recipe: dict) -> dict:
    """The recipe's configuration: its preset's model section, with the recipe's own ``model`` settings laid over
    it (a dispatcher, the router dtype a model bridge sets), and the other sections the recipe sets."""
    model = yamlio.load(preset_text(recipe["preset"]))["model"]
    cfg = {"model": dict(model)}
    for sec, values in (recipe.get("config") or {}).items():
        if sec == "model":
            cfg["model"].update(values or {})
        else:
            cfg[sec] = dict(values or {})
    return cfg


def _unmodelled_now(cfg: dict, est) -> list[str]:
    """Settings of the configuration the estimator accepts but does not honour yet (checked on the estimate)."""
    out = []
    pr = cfg.get("precision") or {}
    if (pr.get("accumulate_allreduce_grads_in_fp32") is False and pr.get("params_dtype", "bf16") == "bf16"
            and est.parallel["bytes_per_parameter"]["gradients"] == 4):
        out.append("grad_reduce_in_fp32 False: the BF16 gradient buffer (2 B per parameter) is not modelled yet; "
                   "the estimator would count fp32 gradients")
    return out


def evaluate(recipe: dict) -> RecipeCase:
    gpu = get_gpu(recipe["gpu"])
    cfg = with_gpu_arch(recipe_config(recipe), gpu)     # estimated as on its GPU, as --gpu does
    base = dict(id=recipe["id"], source=recipe["source"], gpu=gpu.name,
                world_size=cfg["training"]["world_size"], known_cause=recipe.get("false_oom_cause"))
    listed = list(recipe.get("unmodelled") or [])
    # With unmodelled settings that only add memory the estimate is a lower bound: a "does not fit" verdict is
    # then a false out-of-memory verdict all the same, a "fits" one says nothing.
    lower_bound = bool(listed) and recipe.get("unmodelled_only_adds") is True
    reasons, worst = listed, None
    if not listed or lower_bound:   # (a recipe that needs an unmodelled setting may not even load without it)
        try:
            est = stage_memory(resolve(load_config(cfg)))
        except ConfigError as e:
            reasons = listed + [f"refused by the estimator: {p}" for p in e.problems]
        else:
            reasons = listed + _unmodelled_now(cfg, est)
            worst = min(fit(est, gpu), key=lambda f: f.headroom_bytes)
    figures = {} if worst is None else dict(device_gib=worst.device_bytes / GIB,
                                            capacity_gib=worst.capacity_bytes / GIB, headroom_pct=worst.headroom_pct)
    if worst is not None and (not reasons or (lower_bound and reasons == listed and worst.verdict == "no")):
        return RecipeCase(status="estimated", reasons=tuple(reasons), verdict=worst.verdict,
                          lower_bound=bool(reasons), **figures, **base)
    figures = figures if lower_bound and reasons == listed else {}
    return RecipeCase(status="not_estimable", reasons=tuple(reasons), verdict=None, lower_bound=bool(figures),
                      **{"device_gib": None, "capacity_gib": None, "headroom_pct": None, **figures}, **base)


def recipe_cases(path: str | Path | None = None) -> list[RecipeCase]:
    return [evaluate(r) for r in load_recipes(path)]
