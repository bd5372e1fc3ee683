"""The short answer on accuracy: a handful of held-out figures, computed from the validation data files.

One place computes the figures that Home, the Validation page and the README print in their accuracy box,
so they are recomputed at every site build (``hooks/``) and checked against the README by a test; none is
typed by hand.

- **Megatron-LM CI goldens** (``megatron_ci.yaml``), the cases in the target set: signed error of the
  estimate's allocated bytes against ``mem-max-allocated-bytes``, median and worst (largest |error|);
- **the project's own GPU runs** (``project_runs.yaml``), every run, each predicted before it ran;
- **known-to-run recipes** (``known_to_run.yaml``): how many are estimated, and the verdicts on the GPU each
  runs on (a "does not fit" there is a false out-of-memory verdict).

Errors are signed percentages, (estimated - measured) / measured x 100: negative is an under-estimate.
``keep_free_pct`` is the largest held-out under-estimate rounded up to a whole percent: the share of the GPU to
leave beyond the estimate so that no held-out run would have been judged to fit when it did not.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..formats.error_bands import band_for
from .calibration import stats

__all__ = ["Figures", "Headline", "headline"]


@dataclass(frozen=True)
class Figures:
    """Signed errors (%) of one held-out source."""

    cases: int
    median_pct: float        # median signed error
    worst_pct: float         # the signed error of largest magnitude
    under: int               # cases under-estimated (error < 0)


@dataclass(frozen=True)
class Headline:
    ci: Figures              # Megatron-LM CI goldens, target set
    project: Figures         # this project's own GPU runs, all batches
    project_batches: int     # batches of those runs
    project_batches_used: int  # batches used afterwards to improve the model (``developed_against``)
    recipes: int             # known-to-run recipes
    recipes_estimated: int
    recipes_fit: int         # verdict "fits" on the GPU the recipe runs on
    recipes_tight: int
    recipes_false_oom: int   # verdict "does not fit" although the recipe runs
    keep_free_pct: int       # the largest held-out under-estimate, rounded up (%)
    band_dense_pct: float    # the verdict's error band of a dense model (estimator.formats.error_bands), %
    band_moe_pct: float      # ... of an MoE model
    band_max_pct: float      # the widest band of any class

    def to_dict(self) -> dict:
        return asdict(self)


def _figures(rows) -> Figures:
    s = stats(rows)
    worst = s.worst_under_pct if -s.worst_under_pct >= s.worst_over_pct else s.worst_over_pct
    return Figures(s.cases, s.median_error_pct, worst, s.under)


def headline() -> Headline:
    """The figures of the accuracy box, from the data files and the estimator as it is now."""
    from .known_to_run import recipe_cases
    from .megatron_ci import ci_cases
    from .project_runs import load_data, project_cases

    ci = [c.comparison for c in ci_cases() if c.status == "compared" and c.in_target]
    project = [c.comparison for c in project_cases()]
    batches = load_data()["batches"]
    recipes = recipe_cases()
    verdicts = [r.verdict for r in recipes if r.status == "estimated"]
    worst_under = min(min(r.error_pct for r in ci), min(r.error_pct for r in project), 0.0)
    return Headline(
        ci=_figures(ci), project=_figures(project), project_batches=len(batches),
        project_batches_used=sum(1 for b in batches if b.get("developed_against")), recipes=len(recipes), recipes_estimated=len(verdicts),
        recipes_fit=verdicts.count("fits"), recipes_tight=verdicts.count("tight"),
        recipes_false_oom=verdicts.count("no"), keep_free_pct=math.ceil(-worst_under),
        band_dense_pct=100 * band_for({}).fraction,
        band_moe_pct=100 * band_for({"model": {"num_experts": 8}}).fraction,
        band_max_pct=100 * band_for({"model": {"num_experts": 8}, "training": {"cuda_graph_impl": "full_iteration"},
                                     "parallelism": {"use_torch_fsdp2": True}}).fraction,
    )
