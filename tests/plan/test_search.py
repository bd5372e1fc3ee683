"""The layout search (estimator/plan/search.py) and its CLI (estimator/cli/search.py).

Independent references: ``estimate()`` itself run on every combination of a small grid (the brute
force the search must agree with), and hand arithmetic of model states in the docstrings.
"""

from __future__ import annotations

import itertools
import json

import pytest

from estimator import ConfigError, estimate, load_config
from estimator.cli.search import main as cli_main
from estimator.formats.error_bands import band_for
from estimator.formats.gpus import usable_bytes
from estimator.plan.search import Answer, Layout, SearchResult, max_micro_batch, max_seq_length, min_gpus, search

GIB = 2 ** 30

TINY = dict(num_layers=4, hidden_size=256, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=704,
            vocab_size=1000)
TINY_MOE = dict(num_layers=4, hidden_size=256, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=512,
                num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=128, moe_layer_freq=[0, 1, 1, 1],
                vocab_size=1000)

# The hand case: h = 5120, 40 heads of 128 (MHA), L = 48, GeLU MLP f = 4h (not gated), RMSNorm, no biases,
# vocabulary 32000, tied embeddings.
BIG = dict(num_layers=48, hidden_size=5120, num_attention_heads=40, ffn_hidden_size=20480, vocab_size=32000,
           activation_func="gelu", gated_linear_unit=False)
H, L = 5120, 48


def _reproduces(lay: Layout) -> None:
    e = estimate(lay.config)
    assert (e.peak.stage, e.peak.allocated_bytes, e.peak.device_bytes) == \
        (lay.peak_stage, lay.peak_allocated_bytes, lay.peak_device_bytes)
    assert lay.peak_device_bytes <= lay.capacity_bytes
    cfg = load_config(lay.config)                 # valid, and written exactly as reported
    assert cfg.to_dict() == lay.config
    par, tr = cfg.parallelism, cfg.training
    assert (par.tensor_model_parallel_size, par.pipeline_model_parallel_size, par.context_parallel_size,
            tr.world_size, tr.micro_batch_size, tr.global_batch_size) == \
        (lay.tp, lay.pp, lay.cp, lay.num_gpus, lay.micro_batch_size, lay.global_batch_size)
    assert e.parallel["dp"] == lay.dp and e.parallel["vpp"] == lay.vpp and e.parallel["ep"] == lay.ep


@pytest.mark.parametrize("model,n,gpu,kw", [
    ("tiny", 8, 2 * GIB, {}),
    ("mixtral-8x7b", 32, "H100-80GB", {}),
    ("llama-3-70b", 64, "H100-80GB", {"top": 15}),
    ("deepseek-v3", 1024, "H100-80GB", {"top": 5}),
])
def test_every_reported_layout_reproduces_with_estimate(model, n, gpu, kw):
    """Each layout's config, fed to estimate(), gives exactly the reported peak; all are valid configs."""
    res = search(model, num_gpus=n, gpu=gpu, **kw)
    assert res.layouts, res.notes
    for lay in res.layouts:
        _reproduces(lay)
    costs = [lay.cost for lay in res.layouts]
    assert costs == sorted(costs) and [lay.rank for lay in res.layouts] == list(range(1, len(costs) + 1))
    json.dumps(res.to_dict())


def _recompute_options(chunk: int) -> list:
    """Every recompute setting Megatron-Core has for chunks of at most ``chunk`` layers: none, selective, full in
    uniform groups of 1 .. chunk layers, full of the first 1 .. chunk - 1 layers of each chunk (block)."""
    out = [("none", {}), ("selective", {"recompute_granularity": "selective"})]
    out += [("full" if n == 1 else f"full-uniform{n}", {"recompute_granularity": "full", "recompute_method": "uniform",
                                                        "recompute_num_layers": n}) for n in range(1, chunk + 1)]
    out += [(f"full-block{n}", {"recompute_granularity": "full", "recompute_method": "block",
                                "recompute_num_layers": n}) for n in range(1, chunk)]
    return out


#: The grid of each brute force: TP, CP, EP, ETP and micro-batch sizes (the search is pinned to the same).
GRIDS = {False: dict(tp=[1, 2, 4, 8], cp=[1, 2, 4, 8], ep=[1], etp=[None], mbs=[1, 2, 4]),
         True: dict(tp=[1, 2, 4], cp=[1, 2], ep=[1, 2, 4, 8], etp=[1, 2], mbs=[1, 2])}


def _brute_force(model: dict, n: int, s: int, gbs: int, moe: bool) -> dict:
    """Peak device bytes of every valid layout on the grid, straight from estimate(): every TP/PP/VPP/CP/EP/ETP,
    the even split and the embedding/loss layer slots (a split that places the layers as another already does is
    the same layout), every recompute setting and micro-batch size."""
    out, placed = {}, set()
    g = GRIDS[moe]
    for t, p, v, acc, cp, ep, etp in itertools.product(g["tp"], [1, 2, 4], [1, 2, 3, 4],
                                                       [(False, False), (True, False), (False, True), (True, True)],
                                                       g["cp"], g["ep"], g["etp"]):
        par = dict(tensor_model_parallel_size=t, pipeline_model_parallel_size=p, context_parallel_size=cp,
                   account_for_embedding_in_pipeline_split=acc[0], account_for_loss_in_pipeline_split=acc[1])
        if v > 1:
            par["virtual_pipeline_model_parallel_size"] = v
        if moe:
            par.update(expert_model_parallel_size=ep, expert_tensor_parallel_size=etp)
        tr = dict(world_size=n, seq_length=s, global_batch_size=gbs, micro_batch_size=1, sequence_parallel=t > 1)
        try:
            first = estimate({"model": model, "parallelism": par, "training": tr})
        except ConfigError:
            first = None
        if first is not None:
            where = tuple(tuple(len(r) for r in st.layers) for st in first.stages)
            if (t, p, v, cp, ep, etp, where) in placed:
                continue                     # the even split already places the layers so
            placed.add((t, p, v, cp, ep, etp, where))
            chunk = max(len(r) for st in first.stages for r in st.layers)
        else:
            chunk = 4
        for b, (rc, fields) in itertools.product(g["mbs"], _recompute_options(chunk)):
            trb = dict(tr, micro_batch_size=b, **fields)
            if rc == "selective":
                trb["recompute_modules"] = ["layernorm"] + (["moe_act"] if moe else [])
            try:
                e = estimate({"model": model, "parallelism": par, "training": trb})
            except ConfigError:
                continue
            out[(t, p, v, cp, ep, etp or t, acc, b, rc)] = e.peak.device_bytes
    return out


@pytest.mark.parametrize("model,moe", [(TINY, False), (TINY_MOE, True)])
def test_search_finds_exactly_the_layouts_that_fit_by_brute_force(model, moe):
    """Every valid layout of the grid is enumerated, and the pruned search keeps exactly those that fit
    (a capacity at the 40th percentile of the brute-force peaks, so that many fit and many do not). The pruning
    compares peaks only: where the optimizer step holds the peak (the activations column 0) or a MoE layer's
    recomputed input outlives the backward pass, a layout failing with full recompute says nothing of the one
    without, and the brute force checks the search did not assume it did."""
    n, s, gbs = 8, 1024, 32
    brute = _brute_force(model, n, s, gbs, moe)
    cap = sorted(brute.values())[int(0.4 * len(brute))]
    g = GRIDS[moe]
    pins = dict(tp=g["tp"], cp=g["cp"], mbs=g["mbs"], **(dict(ep=g["ep"], etp=g["etp"]) if moe else {}))
    res = search(model, num_gpus=n, gpu=cap, headroom=0, seq_length=s, global_batch_size=gbs, top=None,
                 distinct=False, **pins)
    got = {(lay.tp, lay.pp, lay.vpp, lay.cp, lay.ep, lay.etp, (lay.account_for_embedding, lay.account_for_loss),
            lay.micro_batch_size, lay.recompute) for lay in res.layouts}
    assert res.enumerated == len(brute)
    usable = usable_bytes(cap, 0.0, band_for({"model": model}).fraction)   # the one rule: the upper bound fits
    assert res.usable_bytes == usable
    assert got == {k for k, v in brute.items() if v <= usable}
    assert res.fitting == len(got)
    assert res.evaluated < res.enumerated          # monotonicity pruned some


def test_model_that_cannot_fit_one_gpu_fits_with_tp8():
    """By hand (BIG: h = 5120, L = 48, f = 4h GeLU, vocab 32000 tied, A100-40GB = 40960 MiB, 5 % headroom
    leaves 38.0 GiB = 40,802,189,312 B):

    one layer = 12 h^2 + 2 h (norms) = 314,583,040 parameters; P = 48 x 314,583,040 + 32000 x 5120
    (embedding) + 5120 (final norm) = 15,263,831,040.

    - 1 GPU: nothing to shard, 18 B per parameter = 274,748,958,720 B = 255.9 GiB > 38 GiB: no layout fits.
    - 8 GPUs, PP 1, CP 1, TP 8 (DP 1): per GPU 48 x (12 h^2 / 8 + 2 h) + 32768 x 5120 / 8 (vocabulary padded
      to a multiple of 128 x 8) + 5120 = 1,908,904,960 parameters, 2 + 4 + 12/1 = 18 B each =
      34,360,289,280 B = 32.0 GiB of model states: fits with room for activations.
    - TP 4 (DP 2): 48 x (12 h^2 / 4 + 2 h) + 32256 x 5120 / 4 + 5120 = 3,816,657,920 parameters at
      2 + 4 + 12/2 = 12 B = 45,799,895,040 B = 42.7 GiB > 38 GiB; TP 2 and TP 1 hold more. So TP 8 only.
    """
    assert not search(BIG, num_gpus=1, gpu="A100-40GB", seq_length=1024, global_batch_size=8).layouts
    res = search(BIG, num_gpus=8, gpu="A100-40GB", seq_length=1024, global_batch_size=8, pp=1, cp=1, top=None)
    assert res.layouts and {lay.tp for lay in res.layouts} == {8}
    st = estimate(res.best.config).stages[0]
    assert st.parameters == 1_908_904_960
    assert (st.weights_bytes, st.gradients_bytes, st.optimizer_bytes) == (
        2 * 1_908_904_960, 4 * 1_908_904_960, 12 * 1_908_904_960)
    assert res.best.peak_device_bytes <= 40_802_189_312


def test_min_gpus_fits_and_one_power_fewer_does_not():
    """BIG (see above) on A100-40GB: on 4 GPUs every layout keeps at least 6 P / 4 + 12 P / 4 = 18 P / 4 =
    68,687,239,680 B = 64.0 GiB of model states per GPU (weights and gradients over t x p <= 4, the optimizer
    over all 4), so 4 do not fit; 8 do (TP 8 above)."""
    ans = min_gpus(BIG, gpu="A100-40GB", seq_length=1024, global_batch_size=8)
    assert isinstance(ans, Answer) and ans.value == 8
    _reproduces(ans.layout)
    assert search(BIG, num_gpus=8, gpu="A100-40GB", seq_length=1024, global_batch_size=8).layouts
    assert not search(BIG, num_gpus=4, gpu="A100-40GB", seq_length=1024, global_batch_size=8).layouts
    assert (4, False) in ans.tried and (8, True) in ans.tried


def _gpu_holding(device: int, cfg: dict) -> int:
    """The smallest capacity on which ``device`` bytes fit by the one rule of fit(): upper bound device x (1 + b),
    b the configuration's measured band, nothing kept free."""
    b = band_for(cfg).fraction
    cap = int(device * (1 + b))
    while usable_bytes(cap, 0.0, b) < device:
        cap += 1
    return cap


def _layout(mbs=1, seq=256, **par):
    return {"model": TINY, "parallelism": {"tensor_model_parallel_size": 2, **par},
            "training": {"world_size": 4, "seq_length": seq, "micro_batch_size": mbs, "sequence_parallel": True}}


def test_max_micro_batch_fits_and_the_next_does_not():
    cap = _gpu_holding(estimate(_layout(mbs=6)).peak.device_bytes, _layout())   # 6 fits exactly, 7 cannot
    ans = max_micro_batch(_layout(), gpu=cap, headroom=0)
    assert ans.value == 6
    assert estimate(_layout(mbs=7)).peak.device_bytes > usable_bytes(cap, 0.0, band_for(_layout()).fraction)
    _reproduces(ans.layout)
    assert ans.layout.config["training"]["micro_batch_size"] == 6


def test_max_micro_batch_respects_the_global_batch():
    """global batch 32 over DP 2: only micro-batches dividing 16 are possible (1, 2, 4, 8, 16)."""
    cfg = _layout()
    cfg["training"]["global_batch_size"] = 32
    cap = _gpu_holding(estimate(_layout(mbs=6)).peak.device_bytes, cfg)   # 6 would fit, but does not divide 16
    ans = max_micro_batch(cfg, gpu=cap, headroom=0)
    assert ans.value == 4 and all(v in (1, 2, 4, 8, 16) for v, _ in ans.tried)


def test_max_seq_length_fits_and_the_next_multiple_does_not():
    cap = _gpu_holding(estimate(_layout(seq=384, mbs=8)).peak.device_bytes, _layout())
    ans = max_seq_length(_layout(mbs=8), gpu=cap, headroom=0, limit=512)
    assert ans.value == 384                                    # multiples of 128
    assert estimate(_layout(seq=512, mbs=8)).peak.device_bytes > usable_bytes(cap, 0.0, band_for(_layout()).fraction)
    _reproduces(ans.layout)


def test_max_seq_length_of_wan_needs_the_sequence_from_seq_length():
    """Wan's latent grid (model.wan_latent_*) fixes its sequence, which seq_length then does not change: the
    question is refused by name rather than answered with the limit; without the grid it is answered."""
    from estimator.formats.presets import load_preset
    with pytest.raises(ConfigError, match="model.wan_latent_frames"):
        max_seq_length(load_preset("wan-1.3b"), gpu="H100-80GB")
    cfg = load_preset("wan-1.3b").to_dict()
    for name in ("wan_latent_frames", "wan_latent_height", "wan_latent_width"):
        cfg["model"].pop(name)
    ans = max_seq_length(cfg, gpu="H100-80GB", limit=65_536)
    assert ans.value == 65_536 and ans.layout.cp == 8


def test_max_seq_length_stops_at_max_position_embeddings():
    ans = max_seq_length({**_layout(), "model": {**TINY, "max_position_embeddings": 512}}, gpu=80 * GIB)
    assert ans.value == 512 and "max_position_embeddings" in ans.reason


def test_uneven_pipeline_splits_are_enumerated():
    """5 layers on 2 stages cannot split evenly: the middle-stage rule gives ceil(5/2) = 3 layers to the
    fuller stage and 2 to the first or the last. The embedding (or the loss) as a layer slot makes 6 slots, 3 per
    stage: without virtual stages that is the same placement as 2 + 3 (or 3 + 2), so one layout; with 3 virtual
    stages it is one slot per chunk, the embedding's chunk empty, which no first/last split can place (2 and 3 do
    not divide by 3)."""
    res = search({**TINY, "num_layers": 5}, num_gpus=2, gpu=8 * GIB, seq_length=256, pp=2, top=None,
                 distinct=False)
    splits = {(lay.first_stage_layers, lay.last_stage_layers, lay.account_for_embedding, lay.account_for_loss,
               lay.vpp) for lay in res.layouts}
    assert splits == {(2, None, False, False, 1), (None, 2, False, False, 1), (None, None, True, False, 3),
                      (None, None, False, True, 3)}
    slots = next(lay for lay in res.layouts if lay.account_for_embedding)
    assert [c["layers"] for c in estimate(slots.config).to_dict()["stages"][0]["chunks"]] == [[], [1], [3]]
    for lay in res.layouts[:4]:
        _reproduces(lay)


def test_bubble_and_microbatches_by_hand():
    """TP 1, PP 2, DP 4 on 8 GPUs, global batch 64, micro-batch 2: m = 64 / (2 x 4) = 8 micro-batches,
    bubble (p - 1)/(m v) = 1/8 without interleaving and 1/16 with VPP 2."""
    res = search(TINY, num_gpus=8, gpu=8 * GIB, seq_length=256, global_batch_size=64, tp=1, pp=2, cp=1,
                 mbs=2, vpp=[1, 2], recompute="none", top=None)
    by_v = {lay.vpp: lay for lay in res.layouts}
    assert by_v[1].num_microbatches == 8 and by_v[1].bubble == pytest.approx(1 / 8)
    assert by_v[2].bubble == pytest.approx(1 / 16)
    assert by_v[2].costs["pipeline_bubble"] < by_v[1].costs["pipeline_bubble"]


def test_sequence_parallel_whenever_tp_and_distributed_optimizer_by_default():
    res = search("mixtral-8x7b", num_gpus=32, gpu="H100-80GB", top=10)
    for lay in res.layouts:
        assert lay.sequence_parallel == (lay.tp > 1) and lay.distributed_optimizer


@pytest.mark.parametrize("kwargs,field", [
    (dict(num_gpus=0), "search.num_gpus"),
    (dict(num_gpus="many"), "search.num_gpus"),
    (dict(gpu="H900-1TB"), "search.gpu"),
    (dict(gpu=-5), "search.gpu"),
    (dict(headroom=1.5), "search.headroom"),
    (dict(top=0), "search.top"),
    (dict(recompute="sometimes"), "search.recompute"),
    (dict(warp_size=32), "search.warp_size"),
    (dict(hidden_size=4096), "search.hidden_size"),
    (dict(world_size=8), "search.world_size"),
    (dict(seq_length=100_000), "training.seq_length"),
    # Hostile values (issue 15): each was a TypeError, a hang or an accepted nonsense before.
    (dict(max_tp=float("nan")), "search.max_tp"),
    (dict(num_gpus=10 ** 18), "search.num_gpus"),                 # _divisors() took minutes
    (dict(num_gpus=range(1, 10 ** 9)), "search.num_gpus"),
    (dict(micro_batch_sizes=2.5), "search.micro_batch_sizes"),
    (dict(recompute=1.5), "search.recompute"),
    (dict(distributed_optimizer="yes"), "search.distributed_optimizer"),
    (dict(sequence_parallel="four"), "search.sequence_parallel"),  # was accepted into the layouts' configs
    (dict(vpp="two"), "search.virtual_pipeline_model_parallel_size"),
    (dict(first_stage_layers=-1), "search.num_layers_in_first_pipeline_stage"),
    (dict(gpu=10 ** 100), "search.gpu"),
    (dict(seq_length=10 ** 12), "search.seq_length"),
    (dict(global_batch_size=float("inf")), "search.global_batch_size"),
    (dict(gpus_per_node=float("nan")), "search.gpus_per_node"),
])
def test_bad_input_names_the_field(kwargs, field):
    args = dict(num_gpus=8, gpu="H100-80GB")
    args.update(kwargs)
    with pytest.raises(ConfigError) as info:
        search({**TINY, "max_position_embeddings": 4096}, **args)
    assert field in [p.field for p in info.value.problems]
    assert str(info.value)


def test_cli_table_json_and_errors(capsys):
    assert cli_main(["search", "tiny", "--num-gpus", "8", "--gpu-memory", "4", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "peak GiB" in out and "why ranked" in out
    assert any(line.split()[:2] == ["1", "TP1"] or line.split()[:1] == ["1"] for line in out.splitlines())
    assert cli_main(["search", "tiny", "--num-gpus", "8", "--gpu-memory", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layouts"][0]["rank"] == 1 and estimate(data["layouts"][0]["config"]).peak.device_bytes == \
        data["layouts"][0]["peak_device_bytes"]
    assert cli_main(["search", "tiny", "--gpu-memory", "4", "--min-gpus"]) == 0
    assert capsys.readouterr().out.startswith("min_gpus: ")
    assert cli_main(["search", "tiny", "--gpu-memory", "4", "--max-mbs"]) == 0
    assert "max_micro_batch:" in capsys.readouterr().out
    assert cli_main(["search", "tiny", "--num-gpus", "8", "--gpu", "H900"]) == 2
    err = capsys.readouterr().err
    assert "H900" in err and "Traceback" not in err
    assert cli_main(["search", "tiny", "--gpu", "H100-80GB"]) == 2
    assert "num_gpus" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        cli_main(["search", "tiny", "--num-gpus", "zero", "--gpu", "H100-80GB"])
    assert info.value.code == 2


def test_cli_fix_takes_yaml_spellings_and_names_a_bad_value(capsys):
    """A boolean field pinned to both values (true,false) is searched both ways: without the distributed optimizer a
    layout carries "no-distopt"; "yes" is not a YAML boolean (YAML 1.2) and is refused naming the field."""
    argv = ["search", "tiny", "--num-gpus", "8", "--gpu-memory", "4", "--top", "200", "--variants", "--json"]
    assert cli_main(argv + ["--fix", "use_distributed_optimizer=true,False"]) == 0
    labels = [lay["label"] for lay in json.loads(capsys.readouterr().out)["layouts"]]
    assert any(lab.endswith("no-distopt") for lab in labels) and any(not lab.endswith("no-distopt") for lab in labels)
    assert cli_main(argv + ["--fix", "use_distributed_optimizer=yes"]) == 2
    err = capsys.readouterr().err
    assert "search.use_distributed_optimizer" in err and "'yes'" in err and "Traceback" not in err
    assert cli_main(argv + ["--fix", "ep=2"]) == 2                        # tiny is dense: no expert sizes
    assert "ep" in capsys.readouterr().err.lower()


def test_public_api():
    import importlib
    S = importlib.import_module("estimator.plan.search")   # (the package also exports a search() function)
    assert {"search", "min_gpus", "max_micro_batch", "max_seq_length", "Layout", "SearchResult",
            "Answer"} <= set(S.__all__)
    assert isinstance(search("tiny", num_gpus=4, gpu=8 * GIB), SearchResult)


def test_no_layout_breaks_the_interleaved_micro_batch_rule():
    """Issue 15: on 8 GPUs the tiny preset (global batch 16) was best as TP1 PP2 VPP2 DP4 mbs4, one
    micro-batch per step, which Megatron-Core's interleaved schedule refuses (it needs a multiple of PP).
    Every variant the search lists now passes the same validation as estimate()."""
    res = search("tiny", num_gpus=8, gpu="H100-80GB", top=None, distinct=False)
    assert res.layouts
    for lay in res.layouts:
        if lay.vpp > 1:
            assert lay.num_microbatches % lay.pp == 0, lay.label
        _reproduces(lay)


def test_default_global_batch_fills_interleaved_groups():
    """Without a global batch, a layout takes about 4 Mi tokens (DEFAULT_TOKENS_PER_STEP): at s = 1024 that is
    4096 sequences; TP1 PP4 VPP2 CP1 on 24 GPUs is DP 6, so 4096 / 6 = 682.7 -> 683 micro-batches, rounded up
    to 684 = 171 x PP 4 for the interleaved schedule (global batch 684 x 6 = 4104)."""
    res = search({**TINY, "num_layers": 8}, num_gpus=24, gpu="H100-80GB", seq_length=1024, tp=1, pp=4, vpp=2, cp=1,
                 mbs=1, recompute="none", top=None, distinct=False)
    (lay,) = res.layouts
    assert lay.config["training"]["global_batch_size"] == 4104
    _reproduces(lay)


def test_listing_every_layout_is_capped(monkeypatch):
    """--all --variants kept every fitting estimate in memory (7.8 GiB for DeepSeek-V3 on 4,096 GPUs); the
    search keeps only each layout's peak and returns the best MAX_LAYOUTS, found best first (it stops once
    nothing left can beat them, so it does not count the rest)."""
    import importlib
    S = importlib.import_module("estimator.plan.search")
    full = search("tiny", num_gpus=8, gpu="H100-80GB", top=None, distinct=False)
    assert full.fitting == len(full.layouts) > 5
    monkeypatch.setattr(S, "MAX_LAYOUTS", 5)
    res = search("tiny", num_gpus=8, gpu="H100-80GB", top=None, distinct=False)
    assert [lay.label for lay in res.layouts] == [lay.label for lay in full.layouts[:5]]
    assert "more than 5 layouts fit; the best 5 are listed (found best first)." in res.notes
    assert res.fitting is None and "the best 5 shown" in res.summary()


def test_a_routing_imbalance_travels_across_layouts():
    """training.moe_overload_factor describes the routing; each layout receives min(factor, its bound), so the
    search, the sweeps, min_gpus and "Make it fit" keep it as written. Qwen3-30B-A3B (top-8 of 128 experts) with
    factor 1.5: EP 1 layouts receive exactly their balanced rows (bound 1), EP >= 2 layouts 1.5 x (bound
    EP x 8 / 8 >= 2); every layout listed keeps the factor and reproduces with estimate."""
    from estimator import get_gpu, load_preset
    from estimator.plan.suggest import suggest
    from estimator.plan.sweep import sweep
    data = load_preset("qwen3-30b-a3b").to_dict()
    data["training"]["moe_overload_factor"] = 1.5
    res = search(data, num_gpus=16, gpu="H100-80GB", top=None)
    eps = {l.config["parallelism"].get("expert_model_parallel_size", 1) for l in res.layouts}
    assert 1 in eps and len(eps) > 1
    for layout in res.layouts[:: max(1, len(res.layouts) // 12)]:
        assert layout.config["training"]["moe_overload_factor"] == 1.5
        assert max(s.device_bytes for s in estimate(layout.config).stages) == layout.peak_device_bytes
    assert min_gpus(data, gpu="H100-80GB").value
    cap = get_gpu("H100-80GB").memory_bytes
    assert sweep(data, cap) and suggest(data, cap) is not None


def test_search_notes_speak_the_pages_words():
    """Issue 29: the search's notes named internals ("dropped from the input: hybrid_layer_pattern pipeline segments
    ...", "(MAX_EVALUATIONS)"). A hybrid pattern with '|' pipeline segments is searched without them, and the note says
    so in words."""
    import re as _re

    import yaml

    from estimator import search as _search
    from pathlib import Path
    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "presets" / "nemotron-h-56b.yaml").read_text())
    pattern = data["model"]["hybrid_layer_pattern"]
    half = len(pattern) // 2
    data["model"]["hybrid_layer_pattern"] = pattern[:half] + "|" + pattern[half:]
    data["parallelism"] = {"pipeline_model_parallel_size": 2, "tensor_model_parallel_size": 8}
    res = _search(data, num_gpus=64, gpu="H100-80GB", top=1, micro_batch_sizes=(1,), recompute=("full",))
    text = " ".join(res.notes)
    assert "not searched: the pipeline segments ('|') of the layer pattern" in text
    assert "dropped from the input" not in text and "MAX_EVALUATIONS" not in text and not _re.search(r"\bTrue\b", text)


def test_cli_keep_free_is_the_verdicts_setting(capsys):
    """search --keep-free PCT is estimate's --keep-free (a percent); --headroom keeps its old form (a fraction or a
    percentage). Both give the search's usable memory by the one rule: 4 GiB x (1 - 0.10) / (1 + the dense band)."""
    outs = []
    for flag, value in (("--keep-free", "10"), ("--headroom", "0.1"), ("--headroom", "10%")):
        assert cli_main(["search", "tiny", "--num-gpus", "8", "--gpu-memory", "4", flag, value, "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["layouts"] == outs[1]["layouts"] == outs[2]["layouts"]
    want = usable_bytes(4 * GIB, 0.10, band_for({}).fraction)
    assert outs[0]["usable_bytes"] == want == int(4 * GIB * 0.9 / 1.1073)
    assert all(lay["peak_device_bytes"] <= want for lay in outs[0]["layouts"])


def test_why_is_short_and_plain():
    """Issue 29: the Why column ran ~50 words of cost-model jargon ("x1.315 of bare compute"). Each reason now
    names the step time against the compute alone, at most two added costs, the peak and what is free, and for
    #2 on the one cost that puts it behind #1; at most 45 words. Here, TP 1, PP 2 at VPP 1 and 2 on 8 GPUs
    (bubble 1/8 and 1/16 by hand, above): the pipeline bubble is among the costs named, and VPP 1 is behind #1
    (VPP 2, the smaller bubble) on it."""
    res = search(TINY, num_gpus=8, gpu=8 * GIB, seq_length=256, global_batch_size=64, tp=1, pp=2, cp=1,
                 mbs=2, vpp=[1, 2], recompute="none", top=None)
    for lay in res.layouts:
        assert "bare compute" not in lay.why and "the compute alone" in lay.why, lay.why
        assert len(lay.why.split()) <= 45, lay.why
        assert lay.why.count("+") <= 3, lay.why
    first, *rest = res.layouts
    assert first.vpp == 2 and "the fastest that fits" in first.why
    assert "pipeline bubble" in first.why
    by_v = {lay.vpp: lay for lay in rest}
    assert "slower than #1 by its pipeline bubble" in by_v[1].why, by_v[1].why


def test_the_searchs_shortcuts_give_the_plain_calls_numbers():
    """The search's hot-path shortcuts (speed, issue 26) against the calls they stand for, on Mixtral 8x7B on 32
    GPUs (every TP x PP split x CP x EP x ETP shape): the cost bound shared by the shapes that differ only in EP and
    ETP against CostModel.traffic_bound, shape by shape; the groups against the flat enumeration; and the layout's
    Config, built field by field, against dataclasses.replace."""
    import dataclasses
    from estimator.plan.search import _engine
    from estimator.plan.space import rc_fields
    eng, _, _ = _engine("mixtral-8x7b", 32, "H100-80GB", None, None, (1, 2, 4), 0.0, 8, 8,
                        ("none", "selective", "full"), (True, False), {})
    groups = list(eng.shape_groups(32))
    assert [sh for g in groups for sh in g] == list(eng.shapes(32))
    assert any(len(g) > 1 for g in groups)
    for g in groups:
        parts = eng.bound_parts(g[0], 4)
        assert {(sh.n, sh.t, sh.split, sh.cp, sh.sp) for sh in g} == {(g[0].n, g[0].t, g[0].split, g[0].cp, g[0].sp)}
        for sh in g:
            assert eng.bound_of(sh, parts) == eng.traffic_bound(sh, 4)
    sh = groups[-1][-1]
    for d, rc, b, gbs in itertools.islice(eng.variants(sh), 0, None, 3):
        plain = dataclasses.replace(eng.base.training, world_size=sh.n, micro_batch_size=b, global_batch_size=gbs,
                                    sequence_parallel=sh.sp, use_distributed_optimizer=d,
                                    **rc_fields(rc, eng.selective_modules))
        built = eng.config(sh, d, rc, b, gbs).training
        assert built == plain and vars(built) == vars(plain)
