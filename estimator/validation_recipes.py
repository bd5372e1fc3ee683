"""Held-out validation: known-to-run configurations (``validation/known_to_run.yaml``).

Megatron-Bridge's performance recipes run on the GPUs they name, so each is a measurement "this fits".
A recipe is estimated from its preset's model and the parallelism, training and precision it sets, and the
largest ``device_bytes`` of its stages is held against the GPU's capacity (:func:`estimator.gpus.fit`):
"no" is a false out-of-memory verdict, "tight" a run that fits only once PyTorch's allocator gives back its
cache (which these recipes help with ``expandable_segments``).

A recipe whose settings include one the estimator does not model yet (the data file's ``unmodelled`` list,
a setting the estimator refuses, with its refusal message, or the BF16 gradient buffer while the estimator
still counts fp32 gradients) is listed as not yet estimable, with the reason, instead of being estimated
without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import yamlio
from .config import load_config
from .errors import ConfigError
from .gpus import fit, get_gpu
from .memory import stage_memory
from .presets import preset_text
from .report import GIB
from .resolve import resolve

__all__ = ["RecipeCase", "data_path", "evaluate", "load_recipes", "recipe_cases"]


def data_path() -> Path:
    return Path(__file__).resolve().parent.parent / "validation" / "known_to_run.yaml"


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
    reasons: tuple                # why not estimable
    device_gib: float | None      # largest device_bytes over the stages, GiB (2^30 B)
    capacity_gib: float | None
    verdict: str | None           # fits | tight | no (a false out-of-memory verdict)
    headroom_pct: float | None

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
    cfg = recipe_config(recipe)
    base = dict(id=recipe["id"], source=recipe["source"], gpu=gpu.name,
                world_size=cfg["training"]["world_size"])
    reasons = list(recipe.get("unmodelled") or [])
    if not reasons:   # (a recipe that needs an unmodelled setting may not even load without it)
        try:
            est = stage_memory(resolve(load_config(cfg)))
        except ConfigError as e:
            reasons = [f"refused by the estimator: {p}" for p in e.problems]
        else:
            reasons = _unmodelled_now(cfg, est)
    if reasons:
        return RecipeCase(status="not_estimable", reasons=tuple(reasons), device_gib=None, capacity_gib=None,
                          verdict=None, headroom_pct=None, **base)
    worst = min(fit(est, gpu), key=lambda f: f.headroom_bytes)
    return RecipeCase(status="estimated", reasons=(), device_gib=worst.device_bytes / GIB,
                      capacity_gib=worst.capacity_bytes / GIB, verdict=worst.verdict,
                      headroom_pct=worst.headroom_pct, **base)


def recipe_cases(path: str | Path | None = None) -> list[RecipeCase]:
    return [evaluate(r) for r in load_recipes(path)]
