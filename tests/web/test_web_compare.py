"""``estimator.web.compare``: pinned configurations side by side, with the fields that differ."""

from __future__ import annotations

import json

from estimator import estimate
from estimator import web
from estimator.formats.gpus import GPUS, fit
from estimator.memory.report import GIB
from estimator.web.compare import MAX_PINS, compare

BASE = {"preset": "qwen3-8b", "values": {}, "gpu": "H100-80GB"}
TP2 = {"preset": "qwen3-8b", "values": {"parallelism.tensor_model_parallel_size": "2"}, "gpu": "A100-40GB"}


def test_columns_are_the_estimates_and_only_real_differences_are_listed():
    # The second pin sets TP 2 on an A100; the third writes the preset's own TP (4) and the default of
    # sequence parallelism (off): neither differs from the first.
    same = {"preset": "qwen3-8b", "values": {"parallelism.tensor_model_parallel_size": 4,
                                             "training.sequence_parallel": False}, "gpu": "H100-80GB"}
    res = compare([BASE, TP2, same])
    assert [d["field"] for d in res["differs"]] == ["gpu", "parallelism.tensor_model_parallel_size"]
    assert res["differs"][1]["values"] == ["4", "2", "4"]
    for pin, col in zip([BASE, TP2, same], res["pins"]):
        cfg = web.merged_config(pin)[0]
        est = estimate(cfg)
        fits = fit(est, GPUS[pin["gpu"]])
        assert col["peak"] == f"{est.peak.device_bytes / GIB:.2f} GiB"
        assert [s["gib"] for s in col["stages"]] == [f"{s.device_bytes / GIB:.2f}" for s in est.stages]
        assert col["verdict"] == min(fits, key=lambda f: f.headroom_bytes).verdict
        s = est.peak_stage
        assert [p["gib"] for p in col["parts"]] == [f"{b / GIB:.2f}" for b in (
            s.weights_bytes, s.gradients_bytes, s.optimizer_bytes, s.activations_bytes, s.transient_bytes)]
    assert res["pins"][1]["word"] == "does not fit" and res["pins"][0]["word"] == "fits"
    assert res["pins"][1]["title"] == "Qwen3 8B with 1 change"


def test_an_invalid_pin_gets_its_errors_and_bad_requests_are_named():
    res = compare([BASE, {"preset": "qwen3-8b", "values": {"model.num_layers": "x"}, "gpu": "H100-80GB"}])
    assert res["pins"][1]["errors"][0]["field"] == "model.num_layers" and "peak" not in res["pins"][1]
    assert compare([BASE] * (MAX_PINS + 1))["errors"][0]["field"] == "pins"
    assert compare([])["errors"][0]["field"] == "pins"
    res = json.loads(web.handle(json.dumps({"op": "compare", "pins": [{"values": [1]}]})))
    assert res["errors"][0]["field"] == "pins[0].state.values"
