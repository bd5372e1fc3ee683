"""The calculator's Megatron-Bridge import (``import`` with ``kind: bridge``) and export (``exports["bridge"]``): the
same readers as the command line (estimator/formats/bridge)."""

from __future__ import annotations

from estimator import estimate
from estimator.formats.bridge.config import read_bridge_config
from estimator import web

CONFIG = """\
model:
  num_layers: 2
  hidden_size: 64
  num_attention_heads: 4
  vocab_size: 128
  seq_length: 128
  normalization: RMSNorm
  position_embedding_type: rope
train:
  micro_batch_size: 1
  global_batch_size: 2
optimizer:
  lr: 0.0001
  use_distributed_optimizer: true
mixed_precision: bf16_mixed
"""


def test_import_bridge_config_says_what_each_field_does():
    res = web.import_text({"preset": "tiny", "values": {"training.world_size": "2"}}, "bridge", CONFIG)
    assert "errors" not in res, res
    assert {"flag": "optimizer.lr = 0.0001", "reason": res["flags"]["no_effect"][0]["reason"]} == \
        res["flags"]["no_effect"][0]
    assert res["state"]["values"]["training.use_distributed_optimizer"] is True


def test_import_bridge_refusal_names_the_field():
    bad = web.import_text({"preset": "tiny"}, "bridge", CONFIG + "peft:\n  _target_: megatron.bridge.peft.lora.LoRA\n"
                          "  normalize_moe_lora: true\n")
    assert bad["refused"][0]["flag"] == "peft.normalize_moe_lora = True"


def test_bridge_export_reads_back():
    res = web.compute({"preset": "qwen3-8b", "values": {"parallelism.tensor_model_parallel_size": "2"}})
    text = res["exports"]["bridge"]
    assert text.startswith("mixed_precision=bf16_mixed")
    cfg = read_bridge_config({}, world_size=res["config"]["training"]["world_size"],
                             overrides=text.split(" \\\n")).config
    assert estimate(cfg).to_dict()["stages"] == res["estimate"]["stages"]
