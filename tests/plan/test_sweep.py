"""``estimator.plan.sweep``: memory against sequence length, micro-batch size and GPU count, with the fit boundaries
of the CLI's reverse questions; and the calculator's ``sweep`` request (``estimator.web.plan``)."""

from __future__ import annotations

import json

import pytest

from estimator import web
from estimator.formats.gpus import GPUS
from estimator.formats.presets import load_preset
from estimator.plan.search import max_micro_batch, max_seq_length, min_gpus
from estimator.plan.sweep import sweep, sweep_view

from estimator.formats.error_bands import band_for
from estimator.formats.gpus import usable_bytes
from tests.plan.test_suggest import TINY, TINY_PARAMS, RESERVE, _holding

H100 = GPUS["H100-80GB"].memory_bytes


def test_more_data_parallel_ranks_shard_the_optimizer_states():
    """The tiny model with the distributed optimizer, its layout kept: from 2 to 4 data-parallel ranks each GPU
    keeps 12 B x (ceil(3,213,568 / 2) - ceil(3,213,568 / 4)) = 12 x (1,606,784 - 803,392) = 9,640,704 B less of
    fp32 master weights and Adam moments, 10,122,739.2 B less on the device with the allocator's 5 % reserve."""
    cfg = {**TINY, "training": {**TINY["training"], "use_distributed_optimizer": True}}
    gpus = {p.x: p.peak_bytes for p in sweep(cfg, 2 ** 30)[2].points}
    assert set(gpus) >= {2, 4, 8}
    allocated = 12 * (-(-TINY_PARAMS // 2) - -(-TINY_PARAMS // 4))
    assert allocated == 9_640_704
    assert abs(gpus[2] - gpus[4] - allocated * (1 + RESERVE)) <= 1


def test_one_data_parallel_rank_can_fit_where_two_do_not():
    """From DP 1 to DP 2 NCCL sets up the data-parallel communicator: 128 MiB = 134,217,728 B more on the device
    (estimator.memory.NCCL_BYTES_PER_COMMUNICATOR), while the distributed optimizer sheds only 12 B x (3,213,568 -
    1,606,784) = 19,281,408 B of the tiny model's states (20,245,478.4 B with the allocator's reserve). So at a
    capacity holding one GPU's peak by the fit rule (the peak x (1 + band)) the layout fits on 1 GPU and on no larger count of the sweep (DP 64 sheds less than
    12 B x 3,213,568 = 38.6 MB): the fewest GPUs is 1. Bisecting from the largest count, as before, found none."""
    from estimator import estimate
    cfg = {**TINY, "training": {**TINY["training"], "world_size": 1, "global_batch_size": 8,
                                "use_distributed_optimizer": True}}
    one = _holding(estimate(cfg).peak.device_bytes, cfg)
    gpus = sweep(cfg, one)[2]
    peaks = {p.x: p.peak_bytes for p in gpus.points}
    assert peaks[2] - peaks[1] == pytest.approx(134_217_728 - 19_281_408 * (1 + RESERVE), abs=2)
    assert [p.x for p in gpus.points if p.fits] == [1] and gpus.boundary == 1
    assert min_gpus(cfg, gpu=one, headroom=0.0).value == 1     # every layout on 2+ GPUs has a group to talk over


@pytest.mark.parametrize("name", ["qwen3-8b", "qwen2.5-72b", "llama-3.1-405b", "deepseek-v3", "mixtral-8x7b"])
def test_boundaries_are_the_reverse_questions_and_the_points_agree(name):
    cfg = load_preset(name).to_dict()
    seq, mbs, gpus = sweep(cfg, H100)
    usable = usable_bytes(H100, 0.0, band_for(cfg).fraction)       # the one rule: the upper bound fits
    assert seq.boundary == max_seq_length(cfg, gpu=H100, headroom=0.0).value
    assert mbs.boundary == max_micro_batch(cfg, gpu=H100, headroom=0.0, limit=1024).value
    for s in (seq, mbs, gpus):
        xs = [p.x for p in s.points]
        assert xs == sorted(xs) and s.current in xs
        for p in s.points:
            assert p.fits == (p.peak_bytes <= usable)
        if s.boundary_kind == "max":            # everything up to the boundary fits, nothing beyond it
            assert all(p.fits == (s.boundary is not None and p.x <= s.boundary) for p in s.points), s.name
        else:
            assert all(p.fits == (s.boundary is not None and p.x >= s.boundary) for p in s.points), s.name
    assert gpus.boundary == (min((p.x for p in gpus.points if p.fits), default=None))


def test_view_positions_and_labels():
    cfg = load_preset("qwen3-8b").to_dict()
    v = sweep_view(sweep(cfg, H100), H100, band=band_for(cfg).fraction)
    assert [s["name"] for s in v["series"]] == ["seq_length", "micro_batch_size", "num_gpus"]
    for s in v["series"]:
        pos = [p["pos"] for p in s["points"]]
        assert pos == sorted(pos) and pos[0] == 0.0 and pos[-1] == 1.0
        assert all(p["bytes"] <= v["scale_bytes"] for p in s["points"])
    seq = v["series"][0]
    longest = max_seq_length(cfg, gpu=H100).value
    assert seq["current"]["label"] == "4,096" and seq["boundary"]["label"] == f"at most {longest:,}"
    assert seq["boundary_text"] == f"largest that fits: {longest:,} tokens"
    assert v["usable_bytes"] == usable_bytes(H100, 0.0, band_for(cfg).fraction) < H100


def test_web_sweep_and_fewest_gpus():
    state = {"preset": "qwen3-8b", "values": {}, "gpu": "H100-80GB"}
    res = json.loads(web.handle(json.dumps({"op": "sweep", "state": state})))
    assert [s["name"] for s in res["series"]] == ["seq_length", "micro_batch_size", "num_gpus"]
    res = json.loads(web.handle(json.dumps({"op": "sweep", "state": state, "min_gpus": True})))
    want = min_gpus(load_preset("qwen3-8b").to_dict(), gpu=H100, headroom=0.0)
    assert res["min_gpus"]["value"] == want.value and res["min_gpus"]["label"] == want.layout.label
    res = json.loads(web.handle(json.dumps({"op": "sweep", "state": {**state, "gpu": None}})))
    assert res["errors"][0]["field"] == "gpu"
    res = json.loads(web.handle(json.dumps({"op": "sweep", "state": state, "min_gpus": "yes"})))
    assert res["errors"][0]["field"] == "min_gpus"


def test_web_suggest_request():
    res = json.loads(web.handle(json.dumps({"op": "suggest", "state": {"preset": "qwen2.5-72b", "gpu": "H100-80GB"}})))
    assert res["suggestions"] and res["gpu"] == "H100-80GB"
    first = res["suggestions"][0]
    assert {"label", "set", "cli_flags", "peak", "saved", "cost"} <= set(first)
    res = json.loads(web.handle(json.dumps({"op": "suggest", "state": {"preset": "qwen3-8b", "gpu": "H100-80GB"}})))
    assert res["suggestions"] == []
    res = json.loads(web.handle(json.dumps({"op": "suggest", "state": {"preset": "qwen3-8b", "gpu": "H100-80GB",
                                                                         "values": {"model.num_layers": "x"}}})))
    assert res["errors"][0]["field"] == "model.num_layers"


def test_search_options_of_the_page():
    from estimator.plan.search import search
    from estimator.web.plan import search_options, search_with_options
    assert search_options({"num_gpus": "16, 8,8", "tp": "4", "keep_free": "10"}) == (
        {"num_gpus": [8, 16], "tensor_model_parallel_size": 4, "max_tp": 8, "keep_free": 0.1}, [])
    assert search_options({"num_gpus": None, "tp": None, "headroom": "10"})[0] == {"keep_free": 0.1}   # old name
    assert search_options({"num_gpus": None, "tp": None, "keep_free": None}) == ({}, [])
    _, bad = search_options({"num_gpus": "8, 0", "tp": True, "keep_free": "-1", "fix": 1})
    assert [p.field for p in bad] == ["options.fix", "options.num_gpus", "options.tp", "options.keep_free"]
    state = {"preset": "qwen3-8b", "values": {}, "gpu": "H100-80GB"}
    res = search_with_options(state, 5, {"num_gpus": "8, 16", "tp": 2, "keep_free": 10})
    want = search(load_preset("qwen3-8b").to_dict(), num_gpus=[8, 16], gpu="H100-80GB", top=5, keep_free=0.1,
                  tensor_model_parallel_size=2)
    assert [lay["label"] for lay in res["layouts"]] == [lay.label for lay in want.layouts]
    assert res["gpus"] == "8, 16" and res["keep_free"] == "10 %"
    assert all(lay["words"].startswith(f"{lay['num_gpus']:,} GPUs: ") for lay in res["layouts"])
