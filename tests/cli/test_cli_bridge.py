"""The command line's Megatron-Bridge inputs and output: ``estimate --bridge-config`` / ``--bridge-recipe``,
``bridge-overrides`` and ``bridge-recipes``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from estimator import estimate
from estimator.cli.commands import main
from estimator.formats.bridge.recipes import recipe_config
from tests.conftest import ROOT

CONFIG = """\
model:
  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider
  num_layers: 2
  hidden_size: 256
  num_attention_heads: 4
  ffn_hidden_size: 1024
  kv_channels: 64
  vocab_size: 1024
  seq_length: 256
  activation_func:
    _call_: false
    _target_: torch.nn.functional.silu
  gated_linear_unit: true
  add_bias_linear: false
  share_embeddings_and_output_weights: false
train:
  micro_batch_size: 1
  global_batch_size: 2
ddp:
  use_distributed_optimizer: true
mixed_precision: bf16_mixed
logger:
  log_interval: 1
"""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_bridge_config_estimates(capsys, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    code, out, err = run(capsys, "estimate", "--bridge-config", str(path), "--num-gpus", "2", "--json")
    assert code == 0
    data = json.loads(out)
    # By hand: 2,622,720 with RMSNorm and rope (tests/formats/bridge/test_bridge_config.py); this YAML leaves both
    # out, so Bridge's defaults apply: TransformerConfig's LayerNorm (+ a bias in each of 5 norms: 1,280) and
    # GPTModelProvider's learned_absolute positions over seq_length 256 (256 x 256 = 65,536): 2,689,536.
    assert data["parameters"]["total"] == 2_689_536
    assert "without effect on memory" in err and "logger" in err


def test_bridge_config_overrides(capsys, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    code, out, _ = run(capsys, "estimate", "--bridge-config", str(path), "model.tensor_model_parallel_size=2",
                       "--num-gpus", "2", "--json")
    assert code == 0 and json.loads(out)["config"]["parallelism"]["tensor_model_parallel_size"] == 2


def test_bridge_recipe_matches_the_catalogue(capsys):
    name = "llama3_8b_pretrain_8gpu_h100_bf16_config"
    code, out, _ = run(capsys, "estimate", "--bridge-recipe", name, "--json")
    assert code == 0
    want = estimate(recipe_config(name)).to_dict()["peak"]["device_bytes"]
    assert json.loads(out)["peak"]["device_bytes"] == want


def test_wan_recipe_estimates(capsys):
    """Megatron-Bridge's Wan 1.3B recipe (model_kind wan): the checkpoint's 1,418,996,800 parameters (tests/model/
    layers/test_wan.py), on the recipe's 8 GPUs with CP 8, and a PP override refused by name."""
    code, out, _ = run(capsys, "estimate", "--bridge-recipe", "wan_1_3b_pretrain_8gpu_h100_bf16_config", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["parameters"]["total"] == 1_418_996_800
    assert d["config"]["model"]["model_kind"] == "wan" and d["config"]["parallelism"]["context_parallel_size"] == 8
    code, _, err = run(capsys, "estimate", "--bridge-recipe", "wan_1_3b_pretrain_8gpu_h100_bf16_config",
                       "model.pipeline_model_parallel_size=2", "--num-gpus", "16")
    assert code == 2 and "pipeline_model_parallel_size 2 with model.model_kind wan" in err


def test_bridge_overrides_command(capsys):
    code, out, _ = run(capsys, "bridge-overrides", "llama-3-8b", "--num-gpus", "8", "--tp", "2", "--oneline")
    assert code == 0
    assert out.startswith("mixed_precision=bf16_mixed ") and "model.tensor_model_parallel_size=2" in out


def test_bridge_recipes_lists(capsys):
    code, out, _ = run(capsys, "bridge-recipes")
    assert code == 0 and "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config" in out


@pytest.mark.parametrize("argv, says", [
    (["--bridge-recipe", "qwen3_30b_a3b_pretrain_config"], "did you mean"),
    (["--bridge-recipe", "llama3_8b_pretrain_8gpu_h100_bf16_config", "model.use_kitchen=true"],
     "model.use_kitchen"),
    (["--bridge-recipe", "llama3_8b_pretrain_8gpu_h100_bf16_config", "modle.x=1"], "did you mean model"),
    (["--bridge-recipe", "moonlight_16b_sft_8gpu_h100_bf16_config", "model.pipeline_model_parallel_size=4",
      "--num-gpus", "16"], "model.pipeline_model_parallel_layout"),
])
@pytest.mark.subprocess
def test_bad_bridge_input_is_one_clear_error(argv, says):
    p = subprocess.run([sys.executable, "-m", "estimator", "estimate", *argv], cwd=ROOT, capture_output=True,
                       text=True)
    assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr


def test_bridge_recipe_and_its_config_yaml_agree_on_the_command_line(capsys, tmp_path):
    """A MoE PEFT recipe with multi-latent attention (Moonlight-16B LoRA, 2 H100): `--bridge-recipe NAME` and
    `--bridge-config` on the YAML of the same Bridge sections give one peak."""
    from estimator.config.yamlio import dump
    from estimator.formats.bridge.export import to_bridge_dict
    name = "moonlight_16b_peft_2gpu_h100_bf16_config"
    code, out, _ = run(capsys, "estimate", "--bridge-recipe", name, "--json")
    assert code == 0
    path = tmp_path / "config.yaml"
    path.write_text(dump(to_bridge_dict(recipe_config(name))))
    code2, out2, _ = run(capsys, "estimate", "--bridge-config", str(path), "--num-gpus", "2", "--json")
    assert code2 == 0
    assert json.loads(out2)["peak"]["device_bytes"] == json.loads(out)["peak"]["device_bytes"]
