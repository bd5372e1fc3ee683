"""The calculator's verdict carries the MoE routing headroom (estimator/web/view.py, estimator/plan/headroom.py):
for an MoE model on a GPU, the largest overload factor that fits, its words and the evidence; nothing for a dense
model; an impossible factor is refused by name, as on the command line."""

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


def test_an_impossible_factor_is_refused_by_name():
    out = json.loads(web.handle(json.dumps({"op": "compute", "state": {
        "preset": "qwen3-30b-a3b", "values": {"training.moe_overload_factor": "4.5"}, "gpu": "H100-80GB"}})))
    (err,) = out["errors"]
    assert err["field"] == "training.moe_overload_factor" and err["message"].startswith("must be <= 4")


def test_the_field_is_hidden_for_dense_models():
    assert "training.moe_overload_factor" in hidden_fields({"model": {"num_layers": 2}})
    assert "training.moe_overload_factor" not in hidden_fields({"model": {"num_experts": 8}})
