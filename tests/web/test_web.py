"""``estimator.web``, the calculator's Python side, run in CPython: form state in, JSON out.

The browser tests check that Pyodide gives the same answers; these check the answers themselves against
the CLI (a separate path through argument parsing), published parameter counts and hand-written values.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from estimator import estimate
from estimator import web
from estimator.formats.presets import list_presets, load_preset

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "estimator", *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("path, raw, value", [
    ("model.hidden_size", " 4096 ", 4096),
    ("model.layernorm_epsilon", "1e-6", 1e-6),
    ("training.sequence_parallel", "True", True),
    ("training.sequence_parallel", False, False),                 # JSON values pass through
    ("model.moe_layer_freq", "[0, 1, 1]", [0, 1, 1]),
    ("model.moe_layer_freq", "0,1,1", [0, 1, 1]),
    ("model.moe_layer_freq", "2", 2),
    ("training.recompute_modules", "core_attn, mlp", ["core_attn", "mlp"]),
    ("model.num_query_groups", "null", None),
    ("model.q_lora_rank", None, None),                            # JSON null stays null
    ("model.hidden_size", "4k", "4k"),                            # left for the loader to reject by name
])
def test_parse_value(path, raw, value):
    assert web.parse_value(path, raw) == value


def test_cleared_field_keeps_the_preset_value():
    """Regression (issue 13, point 4): clearing CP on llama-3-8b fell back to the schema default (CP 1),
    which flipped the verdict; a cleared field is "not changed", so the preset's CP 2 stays."""
    assert web.parse_value("model.hidden_size", "") is web.UNSET
    cfg, problems = web.merged_config({"preset": "llama-3-8b", "values": {"parallelism.context_parallel_size": ""}})
    assert problems == [] and cfg["parallelism"]["context_parallel_size"] == 2
    cleared = web.compute({"preset": "llama-3-8b", "values": {"parallelism.context_parallel_size": " "}}, False)
    assert cleared["estimate"] == estimate(load_preset("llama-3-8b")).to_dict()


def test_preset_state_gives_the_core_estimate():
    res = web.compute({"preset": "llama-3-8b", "values": {}, "gpu": None})
    assert res["estimate"] == estimate(load_preset("llama-3-8b")).to_dict()
    assert res["estimate"]["parameters"]["total"] == 8_030_261_248      # Meta-Llama-3-8B, HF safetensors.total
    assert res["fit"] is None and res["view"]["verdict"] is None
    assert [r["peak"] for r in res["view"]["rows"]] == [True]


def test_errors_name_their_field():
    res = web.compute({"preset": "llama-3-8b", "values": {"model.hidden_size": "4k"}})
    assert "estimate" not in res
    assert res["errors"] == [{"field": "model.hidden_size", "value": "4k", "message": "must be an integer, got '4k'"}]
    res = web.compute({"preset": "llama-3-8b", "values": {"parallelism.tensor_model_parallel_size": "3"}})
    assert {"field": "model.num_attention_heads", "value": 32,
            "message": "num_attention_heads (32) must be divisible by tensor_model_parallel_size (3)"} in res["errors"]
    assert web.compute({"values": {"model.hiden_size": "1"}})["errors"][0]["field"] == "model.hiden_size"
    assert web.compute({"preset": "no-such-model"})["errors"][0]["field"] == "preset"
    assert web.compute({"preset": "tiny", "gpu": "Z100"})["errors"][0]["field"] == "gpu"
    assert web.compute({"values": {}})["errors"][0]["message"] == "is required"


def test_fit_verdict_follows_the_gpu():
    # tiny on an A100-40GB: a few GiB against 40,960 MiB (nvidia-smi), so it fits on every stage.
    res = web.compute({"preset": "tiny", "gpu": "A100-40GB"})
    assert [f["verdict"] for f in res["fit"]] == ["fits", "fits"]
    assert res["view"]["verdict"]["fits"] and res["view"]["verdict"]["text"].startswith("Fits on A100-40GB (40.00 GiB")
    assert res["view"]["verdict"]["word"] == "fits" and res["view"]["verdict"]["why"] == []
    # Llama-3-8B on 8 GPUs without CP, DP 8: weights alone are 8.03e9 x 2 B = 14.96 GiB, gradients
    # 29.92 GiB (fp32): with activations of 8K tokens the peak is far above an L40S's 45 GiB.
    res = web.compute({"preset": "llama-3-8b", "gpu": "L40S-48GB"})
    assert res["view"]["rows"][0]["cells"]["weights"] == "14.96"
    assert res["view"]["rows"][0]["cells"]["gradients"] == "29.92"
    assert res["view"]["verdict"]["verdict"] == "no" and res["view"]["verdict"]["text"].startswith("Does not fit")
    assert res["view"]["verdict"]["word"] == "does not fit"


@pytest.mark.subprocess
def test_cli_export_reproduces_the_estimate():
    state = {"preset": "llama-3-8b", "gpu": "H100-80GB",
             "values": {"parallelism.context_parallel_size": "", "parallelism.pipeline_model_parallel_size": "2",
                        "training.overlap_grad_reduce": "false", "training.recompute_granularity": "full",
                        "training.recompute_method": "block", "training.recompute_num_layers": "4"}}
    res = web.compute(state)
    cmd = res["exports"]["cli"]
    assert cmd.startswith("python -m estimator estimate llama-3-8b ") and "--no-overlap-grad-reduce" in cmd
    cli = _cli(*shlex.split(cmd)[3:], "--json")
    assert cli.pop("fit")["gpu"] == "H100-80GB"
    assert {k: v for k, v in cli.items() if k != "config"} == {k: v for k, v in res["estimate"].items() if k != "config"}


@pytest.mark.subprocess
def test_yaml_export_round_trips(tmp_path):
    res = web.compute({"preset": "mixtral-8x7b", "values": {"parallelism.expert_model_parallel_size": "4"}})
    (tmp_path / "c.yaml").write_text(res["exports"]["yaml"])
    assert _cli("estimate", str(tmp_path / "c.yaml"), "--json") == res["estimate"]


def test_megatron_export_reads_back():
    from estimator.formats.megatron_args import parse_megatron_args
    res = web.compute({"preset": "qwen3-8b", "values": {"parallelism.tensor_model_parallel_size": "2"}})
    text = res["exports"]["megatron"]
    cfg, _ = parse_megatron_args(text.replace("\\\n", " "), world_size=res["config"]["training"]["world_size"])
    assert estimate(cfg).to_dict()["stages"] == res["estimate"]["stages"]


def test_import_hf_config(reference):
    text = (reference / "hf-configs" / "Qwen3-8B.json").read_text()
    res = web.import_text({"preset": "tiny", "values": {}, "gpu": "H100-80GB"}, "hf", text)
    assert res["state"]["preset"] is None and res["state"]["gpu"] == "H100-80GB"
    assert res["state"]["values"]["model.kv_channels"] == 128
    assert res["state"]["values"]["training.world_size"] == 4                 # kept from the tiny preset
    out = web.compute(res["state"])
    assert out["estimate"]["parameters"]["total"] == 8_190_735_360            # Qwen3-8B, SOURCES.md
    bad = web.import_text({"preset": "tiny"}, "hf", "{not json")
    assert bad["errors"][0]["field"] == "import.hf" and "invalid JSON" in bad["errors"][0]["message"]
    other = web.import_text({"preset": "tiny"}, "hf", json.dumps({"model_type": "rwkv7",
                                                                  "architectures": ["Rwkv7ForCausalLM"]}))
    assert other["errors"][0]["field"] == "import.hf" and "unknown architecture" in other["errors"][0]["message"]


def test_import_yaml_and_megatron():
    res = web.import_text({"preset": "tiny"}, "yaml", "model: {num_layers: 2}\ntraining: {world_size: 1}\n")
    assert res["state"]["values"] == {"model.num_layers": 2, "training.world_size": 1}
    args = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
            "--seq-length 128 --max-position-embeddings 128 --vocab-size 1000 --bf16 --lr 3e-4")
    res = web.import_text({"preset": "tiny"}, "megatron", args)
    v = res["state"]["values"]
    assert v["model.num_layers"] == 4 and v["training.world_size"] == 4       # the GPU count is not a flag
    assert v["model.activation_func"] == "gelu"                               # Megatron-LM's default, not ours
    assert any("--lr" in n for n in res["notes"])
    assert "errors" not in web.compute(res["state"])


def test_layout_state_keeps_only_differences():
    cfg = load_preset("tiny").to_dict()
    cfg["parallelism"] = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2}
    cfg["model"]["normalization"] = "RMSNorm"                                 # the default: not repeated
    state = web.layout_state({"preset": "tiny", "gpu": "H100-80GB"}, cfg)
    assert state == {"preset": "tiny", "values": {"parallelism.tensor_model_parallel_size": 2}, "gpu": "H100-80GB"}


def test_layout_state_drops_the_preset_split_the_layout_does_not_have():
    """Regression (issue 13, point 1): deepseek-v3 sets its pipeline split (today the layout string
    Et|(tt|)*30mL on PP 8; when this test was written, num_layers_in_first/last_pipeline_stage 8/5) and a
    recompute setting; a search layout without them (PP 16 with 1 layer on the first stage, here written by
    hand: 1 + 15 x 4 = 61 layers) kept the preset's split, which is no split of 61 layers over 16 stages."""
    cfg = load_preset("deepseek-v3").to_dict()
    cfg["parallelism"] = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 16,
                          "num_layers_in_first_pipeline_stage": 1, "expert_model_parallel_size": 32,
                          "expert_tensor_parallel_size": 1}
    cfg["training"]["world_size"] = 1024
    cfg["training"]["gpu_arch"] = "sm_90"      # the H100's, as a search layout for it carries it
    for key in ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules"):
        cfg["training"].pop(key, None)
    state = web.layout_state({"preset": "deepseek-v3", "gpu": "H100-80GB"}, cfg)
    assert state["values"]["parallelism.pipeline_model_parallel_layout"] is None
    assert state["values"]["training.recompute_granularity"] is None
    merged, _ = web.merged_config(state)
    assert merged["parallelism"]["num_layers_in_first_pipeline_stage"] == 1
    assert _numbers(web.compute(state, False)["estimate"]) == _numbers(estimate(cfg).to_dict())


PRESETS = list_presets()


def _numbers(est: dict) -> dict:
    """An estimate without its configuration as written (null fields the form sets explicitly, an equal one)."""
    return {k: v for k, v in est.items() if k != "config"}


@pytest.mark.parametrize("name", PRESETS)
def test_every_search_result_applies_to_its_own_estimate(name):
    """Issue 13, point 1: each of the top 10 layouts the page lists, put into the form ("Use this layout"),
    gives a valid configuration whose estimate is the core's estimate of the layout's configuration and
    whose peak is the one the search showed."""
    state = {"preset": name, "values": {}, "gpu": "H100-80GB"}
    res = web.find_layouts(state, 10)
    if not res["layouts"]:   # gemma-3-1b on its one GPU: the page says none fits, and why
        assert "none fits: " in res["summary"] and res["why_none"] in res["summary"], res["summary"]
        return
    for lay in res["layouts"]:
        applied = web.compute(web.layout_state(state, lay["config"]), False)
        assert "errors" not in applied, (lay["label"], applied.get("errors"))
        expected = estimate(lay["config"])
        assert _numbers(applied["estimate"]) == _numbers(expected.to_dict()), lay["label"]
        assert lay["peak"] == f"{expected.peak.device_bytes / 2 ** 30:.2f} GiB"


def test_search_summary_says_what_the_cli_says():
    """Regression (issue 13, point 2): a search that stops early has fitting=None, printed as "None of N
    layouts fit" above a list of layouts that fit."""
    from estimator.plan.search import search
    state = {"preset": "deepseek-v3", "values": {"training.world_size": "1024"}, "gpu": "H100-80GB"}
    res = web.find_layouts(state, 10)
    cfg, _ = web.merged_config(state)
    assert res["summary"] == search(cfg, num_gpus=1024, gpu="H100-80GB", top=10).summary()
    assert "None" not in res["summary"] and res["layouts"]
    assert "PP16[1/-]" in res["notation"]                        # the label notation is explained
    assert res["gpus"] == 1024


def test_search_goes_stale_when_anything_but_the_layout_changes():
    base = {"preset": "llama-3-8b", "values": {}, "gpu": "H100-80GB"}
    key = web.compute(base, False)["search_key"]
    assert web.find_layouts(base, 3)["search_key"] == key
    layout = {**base, "values": {"parallelism.tensor_model_parallel_size": "2", "training.micro_batch_size": "2"}}
    assert web.compute(layout, False)["search_key"] == key                 # what the search chooses
    for values in ({"training.world_size": "16"}, {"training.seq_length": "4096"}):
        assert web.compute({**base, "values": values}, False)["search_key"] != key
    assert web.compute({**base, "gpu": "H200-141GB"}, False)["search_key"] != key


def test_custom_gpu_capacity():
    """A GPU given by its memory in GiB: 96 GiB = 103,079,215,104 bytes."""
    res = web.compute({"preset": "tiny", "gpu": "custom", "gpu_gib": "96"}, True)
    assert res["fit"][0]["capacity_bytes"] == 96 * 2 ** 30
    assert "--gpu-memory 96" in res["exports"]["cli"]
    bad = web.compute({"preset": "tiny", "gpu": "custom", "gpu_gib": "lots"})
    assert bad["errors"][0]["field"] == "gpu_gib"


def test_errors_sit_on_the_field_changed_with_the_nearest_valid_values():
    """Issue 13, point 5. DeepSeek-V3 (TP 2, PP 8, EP 32, ETP 1, global batch 4096) on 1,000 GPUs: the world
    size must be a multiple of TP x PP x CP = 16 and of ETP x EP x PP = 256, and 4096 must divide by the
    data-parallel size. 1,024 = 4 x 256 (DP 64, 64 micro-batches) and 512 (DP 32) work; 768 (DP 48) does not."""
    state = {"preset": "deepseek-v3", "values": {"training.world_size": "1000"}, "gpu": "H100-80GB"}
    notes = web.compute(state, changed="training.world_size")["notes"]
    assert [n["field"] for n in notes] == ["training.world_size"]
    assert [f["set"] for f in notes[0]["fixes"]] == [{"training.world_size": 1024}, {"training.world_size": 512}]
    # TP 3 on Llama 3 8B: 32 heads, 8 KV heads, MLP 14,336 = 2^11 x 7 and 8 GPUs: one note, on TP, listing
    # the valid sizes 1, 2, 4, 8, 16 and 32 (the divisors of the 32 heads that are divisors or multiples of the 8 KV
    # heads and divide the rest).
    state = {"preset": "llama-3-8b", "values": {"parallelism.tensor_model_parallel_size": "3"}}
    notes = web.compute(state, changed="parallelism.tensor_model_parallel_size")["notes"]
    assert [n["field"] for n in notes] == ["parallelism.tensor_model_parallel_size"]
    assert len(notes[0]["messages"]) == 4 and notes[0]["hint"] == "valid for this model: 1, 2, 4, 8, 16, 32"
    for fix in notes[0]["fixes"]:                               # each offered fix gives a valid configuration
        assert "errors" not in web.compute({**state, "values": fix["set"]}, False)
    # Mixtral 8x7B with TP 2 and EP 8 but no sequence parallelism: Megatron-Core requires it. The note is on TP, the
    # field changed (issue 29), and its first fix keeps TP 2 and turns sequence parallelism on.
    state = {"preset": "mixtral-8x7b", "values": {"parallelism.tensor_model_parallel_size": "2",
                                                   "training.world_size": "128"}}
    notes = web.compute(state, changed="parallelism.tensor_model_parallel_size")["notes"]
    assert [n["field"] for n in notes] == ["parallelism.tensor_model_parallel_size"]
    assert notes[0]["fixes"][0] == {"label": "keep 2: sequence parallelism on", "set": {"training.sequence_parallel": True}}
    # changed by another field (or by no field: an import), it stays on the switch, whose fix turns it on
    notes = web.compute(state)["notes"]
    sp = [n for n in notes if n["field"] == "training.sequence_parallel"]
    assert sp and sp[0]["fixes"] == [{"label": "turn sequence parallelism on", "set": {"training.sequence_parallel": True}}]


def test_every_preset_is_precomputed_at_build_time():
    """Issue 13, point 11: the page holds every preset's estimate on the default GPU, as Python computes it."""
    boot = web.boot_data()
    gpu = boot["default"]["state"]["gpu"]
    assert gpu == "H100-80GB"
    assert {p["name"] for p in boot["presets"]} == set(PRESETS)
    for p in boot["presets"]:
        now = web.compute({"preset": p["name"], "values": {}, "gpu": gpu}, False)
        assert p["precomputed"]["view"] == now["view"], p["name"]
        assert p["precomputed"]["choices"] == web.advise({"preset": p["name"], "gpu": gpu})["choices"]


def test_default_preset_is_a_clean_answer_and_every_other_verdict_says_why():
    """Issue 13, point 7: the page opens on a preset that fits the default GPU with room to spare; a preset
    that comes out tight or does not fit says why, in figures."""
    boot = web.boot_data()
    default = next(p for p in boot["presets"] if p["name"] == boot["default"]["state"]["preset"])
    verdict = default["precomputed"]["view"]["verdict"]
    assert verdict["verdict"] == "fits" and verdict["headroom_bytes"] > 0.2 * 79.65 * 2 ** 30
    for p in boot["presets"]:
        v = p["precomputed"]["view"]["verdict"]
        assert v["word"] in ("fits", "fits within the error band", "does not fit")
        assert bool(v["why"]) == (v["verdict"] != "fits"), p["name"]
    # Llama 3 8B on an H100: the estimate (reserve included) is over, what PyTorch allocates with the CUDA context
    # and NCCL buffers is not: amber, and the why says the allocated part fits and the reserve takes it over.
    over = web.compute({"preset": "llama-3-8b", "values": {}, "gpu": "H100-80GB"}, False)["view"]["verdict"]
    assert over["verdict"] == "tight" and "caching allocator's reserve" in over["why"][0]


def test_levers_make_it_fit():
    """Qwen2.5-72B as its recipe trains it (TP 8 without sequence parallelism, micro-batch 2) does not fit an
    H100; each lever offered, applied alone, gives a configuration whose every stage fits."""
    from estimator.formats.gpus import GPUS, fit
    res = web.advise({"preset": "qwen2.5-72b", "gpu": "H100-80GB"})
    assert [lv["label"] for lv in res["levers"]][0] == "sequence parallelism on"
    cfg, _ = web.merged_config({"preset": "qwen2.5-72b"})
    for lv in res["levers"]:
        changed = web.merged_config({"preset": "qwen2.5-72b", "values": lv["set"]})[0]
        assert all(f.fits for f in fit(estimate(changed), GPUS["H100-80GB"]))
    assert web.advise({"preset": "qwen3-8b", "gpu": "H100-80GB"})["levers"] == []   # it fits already


def test_find_layouts_returns_configurations_that_fit():
    from estimator.formats.gpus import GPUS
    res = web.find_layouts({"preset": "llama-3-8b", "gpu": "H100-80GB"}, top=3)
    assert 1 <= len(res["layouts"]) <= 3 and "layouts enumerated on 8 GPUs" in res["summary"]
    for lay in res["layouts"]:
        est = estimate(lay["config"])
        assert est.peak.device_bytes <= GPUS["H100-80GB"].memory_bytes
        assert lay["peak"] == f"{est.peak.device_bytes / 2**30:.2f} GiB"
    state = web.layout_state({"preset": "llama-3-8b", "gpu": "H100-80GB"}, res["layouts"][0]["config"])
    assert web.compute(state)["estimate"]["stages"] == estimate(res["layouts"][0]["config"]).to_dict()["stages"]
    assert web.find_layouts({"preset": "llama-3-8b"})["errors"][0]["field"] == "gpu"


def test_find_layouts_searches_a_gpu_count_the_form_layout_does_not_take():
    """Regression: llama-3-8b (CP 2, global batch 512) with the GPUs field at 96 stopped on its own layout's
    refusal (512 is not divisible by DP 96 / 2 = 48). The search replaces the layout, so it runs, lists what the
    core lists for 96 GPUs, and says the form's layout has to change; a GPU count that is not a number is named."""
    from estimator.plan.search import search
    state = {"preset": "llama-3-8b", "values": {"training.world_size": "96"}, "gpu": "H100-80GB"}
    res = web.find_layouts(state, 10)
    assert "errors" not in res and res["gpus"] == 96
    assert [lay["label"] for lay in res["layouts"]] == [lay.label for lay in search("llama-3-8b", num_gpus=96,
                                                                                        gpu="H100-80GB").layouts]
    assert res["current"]["valid"] is False and "has to change" in res["current"]["text"]
    bad = web.find_layouts({**state, "values": {"training.world_size": "ninety"}}, 10)
    assert bad["errors"][0]["field"] == "training.world_size"


def test_search_options_pin_expert_parallelism():
    """The page's search options take EP: Qwen3-30B-A3B on 16 GPUs with TP 4 and EP 4 kept lists only TP 4 x EP 4
    layouts; an EP the model cannot take is named, an EP of a word too."""
    from estimator.web import plan as web_plan
    state = {"preset": "qwen3-30b-a3b", "values": {"training.world_size": "16"}, "gpu": "H100-80GB"}
    res = web_plan.search_with_options(state, 10, {"tp": "4", "ep": "4", "num_gpus": None, "headroom": "5"})
    assert res["layouts"] and all(" EP4 " in lay["label"] and lay["label"].startswith("TP4 ")
                                  for lay in res["layouts"])
    assert web_plan.search_with_options(state, 10, {"ep": "three"})["errors"][0]["field"] == "options.ep"
    dense = web_plan.search_with_options({"preset": "llama-3-8b", "gpu": "H100-80GB"}, 10, {"ep": "2"})
    assert dense["errors"][0]["field"] == "search.expert_model_parallel_size"


def test_handle_answers_json_and_never_raises():
    out = json.loads(web.handle(json.dumps({"op": "compute", "state": {"preset": "tiny"}})))
    assert out["estimate"]["parameters"]["total"] == 3_213_568                 # tiny: hand count in its header
    assert json.loads(web.handle("{oops"))["errors"][0]["field"] == "request"       # invalid JSON: a clear error
    assert json.loads(web.handle(json.dumps({"op": "fly"})))["errors"][0]["field"] == "op"


@pytest.mark.subprocess
def test_import_adds_nothing_to_the_package():
    """The browser imports estimator.web before its first result: it must not pull in more than the
    package itself does (the optional modules it uses are imported where they are needed)."""
    code = ("import sys; import estimator; a = set(sys.modules); import estimator.web; "
            "print(sorted(set(sys.modules) - a))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    page = {"estimator.plan", "estimator.plan.advice", "estimator.web.form", "estimator.plan.verdicts", "estimator.web",
            "estimator.web.protocol", "estimator.web.state", "estimator.web.layouts", "estimator.web.checks",
            "estimator.web.view"}
    assert set(eval(out.stdout)) <= page                    # the page's own small modules, nothing else


def test_import_megatron_args_says_what_each_flag_does():
    """The import panel gets the same information as the CLI: flags without effect with their reason (in the
    notes and as data), refused flags as one error each with the reason."""
    model = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 128 --bf16"
    res = web.import_text({"preset": "tiny"}, "megatron", model + " --lr 1e-4 --log-interval 10")
    assert res["flags"]["no_effect"][0] == {"flag": "--lr 1e-4",
                                            "reason": "optimizer hyper-parameters and loss scaling: scalars"}
    assert any(n.startswith("No effect on memory: --lr 1e-4") for n in res["notes"])
    bad = web.import_text({"preset": "tiny"}, "megatron", model + " --moe-use-upcycling --optimizer lion")
    assert [e["message"].split(":")[0] for e in bad["errors"]] == ["--moe-use-upcycling", "--optimizer"]
    assert bad["refused"][1] == {"flag": "--optimizer lion", "reason": "the states of Lion, SOAP and adaptive Muon "
                                 "are not modelled (adam, sgd, muon and dist_muon are)"}


def test_a_choice_spelled_none_is_a_value_not_null():
    """Regression: a hybrid model imported by Hub id has position_embedding_type "none" (Nemotron-H has no
    position embedding); the form must not read that choice as null."""
    state = {"preset": "tiny", "values": {}, "gpu": None}
    res = web.import_text(state, "hf", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert res["state"]["values"]["model.position_embedding_type"] == "none"
    out = web.compute(res["state"])
    assert not out.get("errors") and out["estimate"]["parameters"]["total"] == 31_577_940_288


# --- hostile requests (issue 15): strict JSON out, a clear error for anything malformed ---------------------

def _strict(text: str):
    def refuse(constant):
        raise AssertionError(f"non-standard JSON constant {constant} (the page's JSON.parse throws)")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("request_text, field", [
    ("null", "request"), ("5", "request"), ("[1]", "request"), ('"compute"', "request"),     # were internal errors
    ("{oops", "request"), ("[" * 100_000, "request"),
    ('{"op": 5}', "op"), ('{"op": "compute", "state": [1]}', "state"),
    ('{"op": "compute", "state": {"values": [1]}}', "state.values"),
    ('{"op": "compute", "state": {"preset": ["tiny"]}}', "state.preset"),
    ('{"op": "compute", "state": {"preset": "tiny", "gpu": 80}}', "state.gpu"),
    ('{"op": "search", "state": {"preset": "tiny"}, "top": "abc"}', "top"),
    ('{"op": "import", "kind": "yaml", "text": 5}', "text"),
    ('{"op": "layout", "state": {}, "config": {"model": {"hiden_size": 1}}}', "config.model.hiden_size"),
    ('{"op": "compute", "state": {"preset": "tiny", "values": {"model.hidden_dropout": Infinity}}}',
     "model.hidden_dropout"),
    ('{"op": "compute", "state": {"preset": "tiny", "values": {"model.hidden_dropout": "inf"}}}',
     "model.hidden_dropout"),                                                 # the answer held Infinity
    ('{"op": "import", "kind": "yaml", "text": "model:\\n  hidden_dropout: .nan\\n"}', "model.hidden_dropout"),
    ('{"op": "compute", "state": {"preset": "tiny", "values": {"model.num_layers": ' + "9" * 5000 + "}}}",
     "request"),
    ('{"op": "compute", "state": {"preset": "tiny", "values": {"parallelism.pipeline_model_parallel_size": '
     '"100000"}}}', "parallelism.pipeline_model_parallel_size"),             # froze the tab (a 134 MB answer)
])
def test_malformed_requests_get_strict_json_errors_naming_the_field(request_text, field):
    out = _strict(web.handle(request_text))
    assert [e["field"] for e in out["errors"]][:1] == [field], out["errors"]
    assert all(e["message"] for e in out["errors"])


def test_every_answer_is_strict_json():
    for values in ({"model.hidden_dropout": "nan"}, {"model.layernorm_epsilon": "-inf"}, {"training.world_size": "8"}):
        request = json.dumps({"op": "compute", "state": {"preset": "tiny", "values": values}})
        _strict(web.handle(request))
    hf = '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, ' \
         '"vocab_size": 10, "intermediate_size": 8, "rms_norm_eps": NaN}'
    out = _strict(web.handle(json.dumps({"op": "import", "kind": "hf", "text": hf})))
    assert out["errors"][0]["message"] == "config.json:rms_norm_eps: must be a finite number, got nan"


def test_imports_and_layouts_of_the_wrong_shape_are_refused():
    """Sections that are not mappings reached the form as values (AttributeError: no attribute 'items')."""
    for text, field in (("model: 3\n", "import.yaml.model"), ("modle: {}\n", "import.yaml.modle"),
                        ("model: {hiden_size: 1}\n", "import.yaml.model.hiden_size")):
        out = _strict(web.handle(json.dumps({"op": "import", "kind": "yaml", "text": text})))
        assert out["errors"][0]["field"] == field, out
    out = _strict(web.handle(json.dumps({"op": "layout", "state": {}, "config": {"training": "x"}})))
    assert out["errors"][0]["field"] == "config.training"


def test_the_gpu_chosen_sets_the_architecture_on_every_surface():
    """One GPU, one number: the calculator's estimate for a catalog GPU is the Python API's for that GPU's
    architecture (estimator.formats.gpus.with_gpu_arch, as the CLI's --gpu), the layout search estimates its layouts
    on it too, and "Use this layout" gives the same estimate without writing the architecture into the form (the GPU
    select keeps deciding it). Llama 3 70B's B200 FP8 recipe (tensorwise, fp8_param_gather): B200 < H100."""
    from estimator.formats.gpus import with_gpu_arch
    preset = load_preset("llama-3-70b-fsdp").to_dict()
    peaks = {}
    for gpu, arch in (("H100-80GB", "sm_90"), ("B200-180GB", "sm_100")):
        state = {"preset": "llama-3-70b-fsdp", "values": {}, "gpu": gpu}
        got = web.compute(state, False)
        assert got["estimate"]["gpu_arch"] == {"arch": arch, "compute_capability": arch[3:-1] + "." + arch[-1],
                                               "assumed": False}
        assert _numbers(got["estimate"]) == _numbers(estimate(with_gpu_arch(preset, gpu)).to_dict())
        peaks[gpu] = got["estimate"]["peak"]["device_bytes"]
    assert peaks["B200-180GB"] < peaks["H100-80GB"]
    state = {"preset": "llama-3-70b-fsdp", "values": {}, "gpu": "B200-180GB"}
    res = web.find_layouts(state, 3)
    for lay in res["layouts"]:
        assert lay["config"]["training"]["gpu_arch"] == "sm_100"
        form = web.layout_state(state, lay["config"])
        assert "training.gpu_arch" not in form["values"]
        assert lay["peak"] == f"{estimate(lay['config']).peak.device_bytes / 2 ** 30:.2f} GiB"
        assert _numbers(web.compute(form, False)["estimate"]) == _numbers(estimate(lay["config"]).to_dict())


def test_a_typed_architecture_the_gpu_contradicts_is_an_error():
    """The GPU select sets the architecture; a typed other one is refused naming the field (a custom capacity takes
    any architecture)."""
    state = {"preset": "tiny", "values": {"training.gpu_arch": "sm_100"}, "gpu": "H100-80GB"}
    (err,) = web.compute(state, False)["errors"]
    assert err["field"] == "training.gpu_arch" and "H100-80GB, is sm_90" in err["message"]
    state = {"preset": "tiny", "values": {"training.gpu_arch": "sm_100"}, "gpu": "custom", "gpu_gib": 180}
    assert web.compute(state, False)["estimate"]["gpu_arch"]["arch"] == "sm_100"
    state = {"preset": "tiny", "values": {"precision.fp8": "true", "precision.fp8_recipe": "mxfp8"}, "gpu": "H100-80GB"}
    assert [e["field"] for e in web.compute(state, False)["errors"]] == ["precision.fp8_recipe"]
