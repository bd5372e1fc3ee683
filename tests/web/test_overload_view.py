"""The calculator's verdict carries the MoE routing headroom (estimator/web/view.py, estimator/plan/headroom.py):
for an MoE model on a GPU, the largest overload factor that fits, its words and the evidence; nothing for a dense
model; a factor past the layout's bound is capped and said, as on the command line."""

from __future__ import annotations

import json

from estimator import get_gpu, load_preset
from estimator import web
from estimator.plan.headroom import overload_headroom
from estimator.web.form import hidden_fields


def test_the_verdict_has_the_headroom_of_an_moe_model_only():
    res = web.compute({"preset": "deepseek-v3", "values": {}, "gpu": "H100-80GB"}, with_exports=False)
    h = res["view"]["verdict"]["moe_overload_headroom"]
    api = overload_headroom(load_preset("deepseek-v3"), get_gpu("H100-80GB"))
    assert {k: h[k] for k in ("factor", "bound", "at_bound", "stage")} == \
        {"factor": api.factor, "bound": 32.0, "at_bound": False, "stage": api.stage}   # 64 x min(8, 4) / 8 = 32
    assert h["text"].startswith("MoE routing headroom: fits up to an overload factor of") and h["evidence"]
    dense = web.compute({"preset": "qwen3-8b", "values": {}, "gpu": "H100-80GB"}, with_exports=False)
    assert dense["view"]["verdict"]["moe_overload_headroom"] is None
    no_gpu = web.compute({"preset": "deepseek-v3", "values": {}, "gpu": None}, with_exports=False)
    assert no_gpu["view"]["verdict"] is None


def test_a_factor_past_the_layout_is_capped_and_said():
    """Qwen3-30B-A3B's preset (EP 4, top-8 of 128): at most 4 x min(8, 32) / 8 = 4; 4.5 estimates as 4, with the
    reason in the assumptions, as on the command line."""
    def compute(f):
        out = json.loads(web.handle(json.dumps({"op": "compute", "state": {
            "preset": "qwen3-30b-a3b", "values": {"training.moe_overload_factor": f}, "gpu": "H100-80GB"}})))
        assert not out.get("errors")
        return out

    past, at = compute("4.5"), compute("4")
    assert [s["allocated_bytes"] for s in past["estimate"]["stages"]] == \
        [s["allocated_bytes"] for s in at["estimate"]["stages"]]
    assert any("capped by the layout" in a and "at most 4 x" in a for a in past["estimate"]["assumptions"])


def test_the_field_is_hidden_for_dense_models():
    assert "training.moe_overload_factor" in hidden_fields({"model": {"num_layers": 2}})
    assert "training.moe_overload_factor" not in hidden_fields({"model": {"num_experts": 8}})
