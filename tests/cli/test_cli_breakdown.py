"""``estimate ... --breakdown``: what is in the peak, by module, as text and in ``--json``."""

from __future__ import annotations

import json

from estimator import estimate, load_preset
from estimator.cli.commands import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_breakdown_text_lists_the_peak_stage_rows(capsys):
    code, out, err = run(capsys, "estimate", "tiny", "--breakdown")
    assert code == 0 and not err
    e = estimate(load_preset("tiny"))
    assert f"What is in the peak of stage {e.peak.stage} (peak)" in out
    for label in ("GEMM workspaces", "Optimizer states", "Attention (activations)", "Dense MLP (activations)"):
        assert label in out
    assert "What is in the peak" not in run(capsys, "estimate", "tiny")[1]


def test_breakdown_json_has_every_stage_adding_up_to_its_peak(capsys):
    code, out, _ = run(capsys, "estimate", "tiny", "--tp", "2", "--breakdown", "--json")
    assert code == 0
    d = json.loads(out)
    assert [b["stage"] for b in d["breakdown"]] == [s["stage"] for s in d["stages"]]
    for b, s in zip(d["breakdown"], d["stages"]):
        assert sum(r["bytes"] for r in b["rows"]) == s["allocated_bytes"] == b["total_bytes"]
    assert "breakdown" not in json.loads(run(capsys, "estimate", "tiny", "--json")[1])
