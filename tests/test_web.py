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

from estimator import estimate, web
from estimator.presets import load_preset

ROOT = Path(__file__).resolve().parent.parent


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


def test_empty_field_means_not_set():
    assert web.parse_value("model.hidden_size", "") is web.UNSET
    cfg, problems = web.merged_config({"preset": "llama-3-8b", "values": {"parallelism.context_parallel_size": ""}})
    assert problems == [] and "context_parallel_size" not in cfg["parallelism"]
    assert web.compute({"preset": "llama-3-8b", "values": {"parallelism.context_parallel_size": " "}})[
        "estimate"]["parallel"]["cp"] == 1


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
    # Llama-3-8B on 8 GPUs without CP, DP 8: weights alone are 8.03e9 x 2 B = 14.96 GiB, gradients
    # 29.92 GiB (fp32): with activations of 8K tokens the peak is far above an L40S's 45 GiB.
    res = web.compute({"preset": "llama-3-8b", "gpu": "L40S-48GB"})
    assert res["view"]["rows"][0]["cells"]["weights"] == "14.96"
    assert res["view"]["rows"][0]["cells"]["gradients"] == "29.92"
    assert res["view"]["verdict"]["verdict"] == "no" and res["view"]["verdict"]["text"].startswith("Does not fit")


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


def test_yaml_export_round_trips(tmp_path):
    res = web.compute({"preset": "mixtral-8x7b", "values": {"parallelism.expert_model_parallel_size": "4"}})
    (tmp_path / "c.yaml").write_text(res["exports"]["yaml"])
    assert _cli("estimate", str(tmp_path / "c.yaml"), "--json") == res["estimate"]


def test_megatron_export_reads_back():
    from estimator.megatron_args import parse_megatron_args
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
    dsa = web.import_text({"preset": "tiny"}, "hf", json.dumps({"model_type": "deepseek_v32",
                                                                "architectures": ["DeepseekV32ForCausalLM"]}))
    assert dsa["errors"][0]["field"] == "import.hf" and "not supported" in dsa["errors"][0]["message"]


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


def test_find_layouts_returns_configurations_that_fit():
    from estimator.gpus import GPUS
    res = web.find_layouts({"preset": "llama-3-8b", "gpu": "H100-80GB"}, top=3)
    assert 1 <= len(res["layouts"]) <= 3 and "layouts on 8 GPUs fit" in res["summary"]
    for lay in res["layouts"]:
        est = estimate(lay["config"])
        assert est.peak.device_bytes <= GPUS["H100-80GB"].memory_bytes
        assert lay["peak"] == f"{est.peak.device_bytes / 2**30:.2f} GiB"
    state = web.layout_state({"preset": "llama-3-8b", "gpu": "H100-80GB"}, res["layouts"][0]["config"])
    assert web.compute(state)["estimate"]["stages"] == estimate(res["layouts"][0]["config"]).to_dict()["stages"]
    assert web.find_layouts({"preset": "llama-3-8b"})["errors"][0]["field"] == "gpu"


def test_handle_answers_json_and_never_raises():
    out = json.loads(web.handle(json.dumps({"op": "compute", "state": {"preset": "tiny"}})))
    assert out["estimate"]["parameters"]["total"] == 3_213_568                 # tiny: hand count in its header
    assert json.loads(web.handle("{oops"))["errors"][0]["field"] == "internal"
    assert json.loads(web.handle(json.dumps({"op": "fly"})))["errors"][0]["field"] == "op"


def test_import_adds_nothing_to_the_package():
    """The browser imports estimator.web before its first result: it must not pull in more than the
    package itself does (the optional modules it uses are imported where they are needed)."""
    code = ("import sys; import estimator; a = set(sys.modules); import estimator.web; "
            "print(sorted(set(sys.modules) - a))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['estimator.web']"


def test_import_megatron_args_says_what_each_flag_does():
    """The import panel gets the same information as the CLI: flags without effect with their reason (in the
    notes and as data), refused flags as one error each with the reason."""
    model = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 128 --bf16"
    res = web.import_text({"preset": "tiny"}, "megatron", model + " --lr 1e-4 --log-interval 10")
    assert res["flags"]["no_effect"][0] == {"flag": "--lr 1e-4",
                                            "reason": "optimizer hyper-parameters and loss scaling: scalars"}
    assert any(n.startswith("No effect on memory: --lr 1e-4") for n in res["notes"])
    bad = web.import_text({"preset": "tiny"}, "megatron", model + " --use-torch-fsdp2 --optimizer muon")
    assert [e["message"].split(":")[0] for e in bad["errors"]] == ["--use-torch-fsdp2", "--optimizer"]
    assert bad["refused"][1] == {"flag": "--optimizer muon", "reason": "the optimizer states are modelled for Adam only"}


def test_a_choice_spelled_none_is_a_value_not_null():
    """Regression: a hybrid model imported by Hub id has position_embedding_type "none" (Nemotron-H has no
    position embedding); the form must not read that choice as null."""
    state = {"preset": "tiny", "values": {}, "gpu": None}
    res = web.import_text(state, "hf", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert res["state"]["values"]["model.position_embedding_type"] == "none"
    out = web.compute(res["state"])
    assert not out.get("errors") and out["estimate"]["parameters"]["total"] == 31_577_940_288
