"""Megatron-Bridge's ``model.quant_recipe`` (issue 28): the eight recipes of Megatron-Bridge @ 067f987d that set a
per-module quantisation recipe estimate end to end, and the Megatron-LM flag says the same run.

- DeepSeek-V4 MXFP8 (recipes/deepseek/{h100,gb200,gb300}/deepseek_v4.py ``_deepseek_v4_mxfp8_quant_recipe``: every
  linear, ``*``, MXFP8 in training, bf16 in evaluation): the training step is the whole-model MXFP8 run's;
- Nemotron 3 Super NVFP4 (perf_recipes/nemotronh/{b200,b300,gb200,gb300,vr200}/nemotronh.py with
  perf_recipes/nemotronh/te_quant.cfg): QKV, output projection, latent projections and MTP in bf16, Mamba's out_proj
  in MXFP8, the rest NVFP4.
"""

from __future__ import annotations

import copy

import pytest

from estimator import estimate
from estimator.config.yamlio import dump
from estimator.formats.bridge.config import BridgeRefusedError, read_bridge_config
from estimator.formats.bridge.export import to_bridge_dict
from estimator.formats.bridge.recipes import read_bridge_recipe, recipe_config
from tests.config.test_quant_recipe_rules import NEMOTRON_3_SUPER, RULES

DSV4 = ["deepseek_v4_flash_pretrain_32gpu_h100_fp8mx_config", "deepseek_v4_flash_pretrain_64gpu_gb200_fp8mx_config",
        "deepseek_v4_pro_pretrain_32gpu_gb300_fp8mx_config"]
NEMOTRON = [f"nemotron_3_super_pretrain_64gpu_{g}_nvfp4_config" for g in ("b200", "b300", "gb200", "gb300", "vr200")]

#: perf_recipes/nemotronh/te_quant.cfg at Megatron-Bridge @ 067f987d, the file both frontends name.
TE_QUANT_CFG = """configs:
  mxfp8:
    transformer_engine_config_type: "TEQuantizationParams"
    training_recipe:
      fp8_quantization_recipe: "mxfp8"
  bf16:
    transformer_engine_config_type: "TEQuantizationParams"
    training_recipe: {}

matchers:
  attn_qkv_bf16:
    config: "bf16"
    type: "glob"
    pattern: "*.linear_qkv"
    enabled: true
  attn_proj_bf16:
    config: "bf16"
    type: "glob"
    pattern: "*.linear_proj"
    enabled: true
  latent_bf16:
    config: "bf16"
    type: "glob"
    pattern: "*mlp.fc[12]_latent_proj"
    enabled: true
  mtp_bf16:
    config: "bf16"
    type: "glob"
    pattern: "mtp.*"
    enabled: true
  mamba_outproj_mxfp8:
    config: "mxfp8"
    type: "glob"
    pattern: "*mixer.out_proj"
    enabled: true
"""


def _device(config) -> list[int]:
    return [s["device_bytes"] for s in estimate(config).to_dict()["stages"]]


@pytest.mark.parametrize("name", DSV4 + NEMOTRON)
def test_recipe_estimates_by_name_and_as_config_yaml(name):
    """No refusal; by name, as the schema's configuration and (Nemotron) as the config.yaml text Bridge would write,
    the same peak on every pipeline stage; the recipe's rules reach precision.quant_recipe. (A DeepSeek-V4
    configuration has no Megatron-LM flags to write its Bridge sections through: to_bridge_dict refuses it, and
    read_bridge_recipe carries its dev-branch fields past them, estimator/formats/bridge/recipes.py.)"""
    imp = read_bridge_recipe(name)
    assert imp.config["precision"]["quant_recipe"] == (["*=mxfp8"] if name in DSV4 else RULES)
    by_name = _device(imp.config)
    cfg = recipe_config(name)
    assert _device(cfg) == by_name
    if name in DSV4:
        return
    back = read_bridge_config(dump(to_bridge_dict(cfg)), world_size=cfg["training"]["world_size"]).config
    assert _device(back) == by_name


@pytest.mark.parametrize("name", DSV4)
def test_deepseek_v4_recipe_trains_as_whole_model_mxfp8(name):
    """'*' gives every linear the run's own MXFP8: the training step is the run without the recipe."""
    cfg = read_bridge_recipe(name).config
    plain = copy.deepcopy(cfg)
    del plain["precision"]["quant_recipe"]
    assert _device(cfg) == _device(plain)


def test_nemotron_3_super_recipe_changes_weights_and_saved_inputs():
    """te_quant.cfg against the whole model in NVFP4 (b200: TP 2): Mamba's out_proj in MXFP8 holds more than in NVFP4
    and the bf16 linears hold no quantised copies: the totals differ both ways, so both are compared, not equal."""
    cfg = read_bridge_recipe(NEMOTRON[0]).config
    plain = copy.deepcopy(cfg)
    del plain["precision"]["quant_recipe"]
    a, b = estimate(cfg).stages[0], estimate(plain).stages[0]
    assert a.weights_bytes != b.weights_bytes and a.activations_bytes != b.activations_bytes
    assert (a.gradients_bytes, a.optimizer_bytes) == (b.gradients_bytes, b.optimizer_bytes)


def test_bridge_config_reads_the_recipe_dict_and_refuses_what_it_cannot_model():
    base = to_bridge_dict(recipe_config(NEMOTRON[0]))
    base["model"]["quant_recipe"] = NEMOTRON_3_SUPER
    assert read_bridge_config(base, world_size=64).config["precision"]["quant_recipe"] == RULES
    bad = copy.deepcopy(base)
    bad["model"]["quant_recipe"]["configs"]["mxfp8"]["training_recipe"]["fp8_param"] = True
    with pytest.raises(BridgeRefusedError, match=r"model\.quant_recipe.*fp8_param = True"):
        read_bridge_config(bad, world_size=64)


def test_megatron_lm_flag_and_bridge_field_give_one_estimate():
    """The same run through both frontends: the Bridge recipe, and its pretrain_gpt.py flags with
    --te-precision-config-file naming te_quant.cfg (read through read_file, as the CLI reads a local file).
    HybridEP's ranks per NVLink domain is an environment variable in both launches, carried over."""
    from estimator.formats.megatron_args import read_megatron_args
    from estimator.formats.megatron_export import to_megatron_args
    br = read_bridge_recipe(NEMOTRON[2]).config
    plain = copy.deepcopy(br)
    del plain["precision"]["quant_recipe"]
    args = to_megatron_args(plain) + ["--te-precision-config-file", "te_quant.cfg"]
    lm = read_megatron_args(args, world_size=64, read_file={"te_quant.cfg": TE_QUANT_CFG}.get).config
    lm["model"]["moe_hybridep_ranks_per_nvlink_domain"] = br["model"]["moe_hybridep_ranks_per_nvlink_domain"]
    assert lm["precision"]["quant_recipe"] == RULES
    assert _device(lm) == _device(br)
