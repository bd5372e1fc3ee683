"""The calculator's ``timeline`` request (estimator/web/charts.py): the timeline and breakdown of a form state,
through :func:`estimator.web.handle` as the page sends it, and its errors."""

from __future__ import annotations

import json

from estimator import estimate, load_preset
from estimator import web
from estimator.web.charts import drawn_stages, resolution

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


def test_stages_drawn_by_hand():
    """Up to 32 stages all are drawn; of more, 31 evenly spaced from the first to the last ((p - 1) i // 30 for
    i = 0 .. 30: 0, 34, 68, ..., 1,023 for 1,024) and the peak stage."""
    assert drawn_stages(4, 2) == [0, 1, 2, 3] and len(drawn_stages(32, 0)) == 32
    d = drawn_stages(1024, 40)
    assert d[:4] == [0, 34, 40, 68] and d[-1] == 1023 and len(d) == 32
    assert len(drawn_stages(1024, 34)) == 31
    assert resolution(1024, 40) == "32 of 1,024 stages (0, 34, 68, ..., 1,023 and the peak stage 40), at most 256 " \
                                   "points each"
    assert resolution(4, 0) == "all 4 stages, at most 256 points each"


def test_timeline_answer_is_bounded_for_huge_pipelines():
    """PP 1,024 x VPP 9 (9,216 layers of the tiny model, 4,096 micro-batches): the answer was 2.57 GB (every pass of
    every stage) and the page's worker died. Now at most 32 stages of at most 256 points are drawn: 8,192 points of
    under 130 characters each (label, bytes, phase, skipped) is about 1 MB, and the breakdown covers the stages
    drawn. The estimate's peak stage is among them, with the estimate's peak."""
    res = ask({"preset": "tiny", "values": {"model.num_layers": "9216", "parallelism.pipeline_model_parallel_size":
                                            "1024", "parallelism.virtual_pipeline_model_parallel_size": "9",
                                            "training.world_size": "1024", "training.global_batch_size": "8192"}})
    size = len(json.dumps(res, separators=(",", ":")))
    assert size < 32 * 256 * 130 + 2 ** 18
    tl, bd = res["timeline"], res["breakdown"]
    assert tl["num_stages"] == 1024 and len(tl["stages"]) <= 32
    assert all(len(s["points"]) <= 256 for s in tl["stages"])
    assert [s["stage"] for s in bd["stages"]] == [s["stage"] for s in tl["stages"]]
    assert tl["peak_stage"] in [s["stage"] for s in tl["stages"]]
    assert tl["resolution"].startswith(f"{len(tl['stages'])} of 1,024 stages (0, 34, 68, ..., 1,023")
