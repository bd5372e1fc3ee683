"""The calculator's ``timeline`` request (estimator/web/charts.py): the timeline and breakdown of a form state,
through :func:`estimator.web.handle` as the page sends it, and its errors."""

from __future__ import annotations

import json

from estimator import estimate, load_preset
from estimator import web

GIB = 2 ** 30


def ask(state: dict) -> dict:
    return json.loads(web.handle(json.dumps({"op": "timeline", "state": state})))


def test_timeline_request_answers_the_charts_of_the_form_state():
    res = ask({"preset": "tiny", "values": {"training.global_batch_size": "8"}, "gpu": "H100-80GB"})
    cfg = load_preset("tiny").to_dict()
    cfg["training"]["global_batch_size"] = 8
    e = estimate(cfg)
    tl, bd = res["timeline"], res["breakdown"]
    assert [s["stage"] for s in tl["stages"]] == [s.stage for s in e.stages]
    assert [s["peak_bytes"] for s in tl["stages"]] == [s.allocated_bytes for s in e.stages]
    assert tl["peak_stage"] == e.peak.stage and tl["peak_label"] == f"{e.peak.allocated_bytes / GIB:.2f} GiB"
    assert tl["capacity_label"].startswith("H100-80GB ") and tl["capacity_bytes"] > 0
    assert tl["ticks"][0]["label"] == "0" and tl["scale_bytes"] >= tl["capacity_bytes"] >= tl["peak_bytes"]
    for b, s in zip(bd["stages"], e.stages):
        assert sum(r["bytes"] for r in b["rows"]) == s.allocated_bytes
        assert b["total"] == f"{s.allocated_bytes / GIB:.2f}"


def test_timeline_request_without_a_gpu_has_no_capacity_line():
    tl = ask({"preset": "tiny", "gpu": None})["timeline"]
    assert tl["capacity_bytes"] is None and tl["capacity_label"] is None


def test_timeline_request_names_the_invalid_field():
    res = ask({"preset": "tiny", "values": {"parallelism.tensor_model_parallel_size": "3"}})
    assert "timeline" not in res
    assert any(e["field"] == "model.num_attention_heads" for e in res["errors"])
