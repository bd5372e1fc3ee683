"""The accuracy box's figures (estimator.validation.headline), recomputed here from the data files.

The project runs are recomputed from ``validation/project_runs.yaml`` with PyYAML and the public
``estimator.estimate``: the signed error of each run is (stage 0's allocated bytes - the measured
``peak_allocated_bytes``) / measured x 100, and the median, worst and count of under-estimates are taken here
with ``statistics``. The CI goldens are the per-case comparisons of ``megatron_ci.ci_cases()`` (the launch-argument
importer is the thing under test there), aggregated here. The README's box must be the one the data gives today.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import estimator
from estimator.validation.headline import headline

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def figures():
    return headline()


def _project_errors() -> list[float]:
    data = yaml.safe_load((ROOT / "validation" / "project_runs.yaml").read_text(encoding="utf-8"))
    errors = []
    for case in data["cases"]:
        measured = case["measured"]["peak_allocated_bytes"]
        est = estimator.estimate(case["config"])
        errors.append((est.stages[0].allocated_bytes - measured) / measured * 100.0)
    return errors


def test_project_runs_figures_recomputed_from_the_data_file(figures):
    errors = _project_errors()
    assert len(errors) == figures.project.cases == 80          # 80 runs in project_runs.yaml, 9 batches
    assert figures.project.median_pct == pytest.approx(statistics.median(errors))
    assert figures.project.worst_pct == pytest.approx(max(errors, key=abs))
    assert figures.project.under == sum(e < 0 for e in errors)
    data = yaml.safe_load((ROOT / "validation" / "project_runs.yaml").read_text(encoding="utf-8"))
    assert figures.project_batches == len(data["batches"])
    assert figures.project_batches_used == sum(bool(b.get("developed_against")) for b in data["batches"])


def test_ci_and_recipe_figures_and_the_margin(figures):
    from estimator.validation.known_to_run import recipe_cases
    from estimator.validation.megatron_ci import ci_cases
    errors = [c.comparison.error_pct for c in ci_cases() if c.status == "compared" and c.in_target]
    assert figures.ci.cases == len(errors)
    assert figures.ci.median_pct == pytest.approx(statistics.median(errors))
    assert figures.ci.worst_pct == pytest.approx(max(errors, key=abs))
    assert figures.ci.under == sum(e < 0 for e in errors)
    verdicts = [r.verdict for r in recipe_cases()]
    assert (figures.recipes, figures.recipes_fit, figures.recipes_tight, figures.recipes_false_oom) == (
        len(verdicts), verdicts.count("fits"), verdicts.count("tight"), verdicts.count("no"))
    worst_under = min(errors + _project_errors())
    assert figures.keep_free_pct == math.ceil(-worst_under)
    # Held-out errors are mostly under-estimates: the box says so, so the data must.
    assert figures.ci.under > figures.ci.cases / 2 and figures.project.under > figures.project.cases / 2


@pytest.mark.subprocess
def test_readme_box_is_current(figures):
    """The README's box is regenerated from the data: it prints today's figures (one decimal, signed)."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_accuracy.py"), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    box = readme[readme.index("<!-- accuracy-box"):readme.index("<!-- /accuracy-box -->")]
    assert len(box.strip().splitlines()) <= 10
    for value in (figures.ci.median_pct, figures.ci.worst_pct, figures.project.median_pct, figures.project.worst_pct):
        assert f"**{value:+.1f} %**" in box
    assert f"fits ({figures.band_dense_pct:.1f} % for a dense model, {figures.band_moe_pct:.1f} % for MoE" in box
