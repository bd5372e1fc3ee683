"""The MoE routing overload factor on the command line: the flag from the schema, the headroom with --gpu (text and
``--json``'s ``fit.moe_overload_headroom``), and a factor past the layout's bound capped with the reason (estimator/plan/headroom.py).

Qwen3-30B-A3B's preset: 128 experts, top-8, EP 4, so 32 local experts; its busiest rank can receive at most
4 x min(8, 32) / 8 = 4 times its balanced rows.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from estimator import get_gpu, load_preset
from estimator.cli.commands import main
from estimator.plan.headroom import overload_headroom
from tests.conftest import ROOT


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_headroom_for_moe_and_null_for_dense(capsys):
    code, out, _ = run(capsys, "estimate", "qwen3-30b-a3b", "--gpu", "H100-80GB", "--json")
    assert code == 0
    h = json.loads(out)["fit"]["moe_overload_headroom"]
    api = overload_headroom(load_preset("qwen3-30b-a3b"), get_gpu("H100-80GB"))
    assert h == api.to_dict() and h["bound"] == 4.0
    code, out, _ = run(capsys, "estimate", "qwen3-8b", "--gpu", "H100-80GB", "--json")
    assert code == 0 and json.loads(out)["fit"]["moe_overload_headroom"] is None


def test_text_says_the_headroom_with_the_evidence(capsys):
    code, out, _ = run(capsys, "estimate", "deepseek-v3", "--gpu", "H100-80GB")
    api = overload_headroom(load_preset("deepseek-v3"), get_gpu("H100-80GB"))
    assert code == 0 and f"MoE routing headroom: fits up to an overload factor of {api.factor:.2f}" in out
    assert "runs without forced balancing measure 1.3 to 4.0" in out
    code, out, _ = run(capsys, "estimate", "qwen3-8b", "--gpu", "H100-80GB")
    assert "MoE routing headroom" not in out
    code, out, _ = run(capsys, "estimate", "qwen3-30b-a3b")                     # no GPU, no headroom
    assert "MoE routing headroom" not in out


def test_the_flag_changes_the_estimate_and_the_assumption_says_so(capsys):
    code, base, _ = run(capsys, "estimate", "deepseek-v3", "--json")
    code, more, _ = run(capsys, "estimate", "deepseek-v3", "--moe-overload-factor", "1.5", "--json")
    base, more = json.loads(base), json.loads(more)
    assert more["peak"]["allocated_bytes"] > base["peak"]["allocated_bytes"]
    assert any("training.moe_overload_factor 1.0" in a for a in base["assumptions"])
    assert any("receives 1.5 x its balanced share" in a for a in more["assumptions"])


@pytest.mark.subprocess
def test_a_factor_past_the_layout_is_capped_and_said():
    """EP 4, top-8 of 128: at most 4 x min(8, 32) / 8 = 4; 4.5 runs as 4 and says why."""
    p = subprocess.run([sys.executable, "-m", "estimator", "estimate", "qwen3-30b-a3b", "--moe-overload-factor", "4.5",
                        "--json"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0 and "Traceback" not in p.stderr
    (note,) = [a for a in json.loads(p.stdout)["assumptions"] if "moe_overload_factor" in a]
    assert "capped by the layout" in note and "expert_model_parallel_size (4)" in note