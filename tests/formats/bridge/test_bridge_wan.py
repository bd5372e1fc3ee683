"""Megatron-Bridge's Wan recipes and configurations (estimator/formats/bridge/wan.py): every Wan recipe of Bridge @
067f987d imports by name, a Wan config.yaml reads back to the same estimate, and the mock data sets the sequence."""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.bridge.export import to_bridge_dict
from estimator.formats.bridge.recipes import read_bridge_recipe
from estimator.formats.presets import load_preset
from estimator.model.resolve import resolve
from estimator.config.load import load_config

#: The eight Wan recipes (recipes/wan/h100/wan.py, perf_recipes/wan/{h100,gb200}/wan.py) -> (parameters, TP, CP,
#: GPUs): Wan2.1-T2V-1.3B 1,418,996,800 and 14B 14,288,491,584 parameters (tests/model/layers/test_wan.py).
WAN_RECIPES = {
    "wan_1_3b_pretrain_8gpu_h100_bf16_config": (1_418_996_800, 1, 8, 8),
    "wan_1_3b_sft_8gpu_h100_bf16_config": (1_418_996_800, 1, 8, 8),
    "wan_1_3b_text2image_pretrain_1gpu_h100_bf16_config": (1_418_996_800, 1, 1, 1),
    "wan_1_3b_text2video_pretrain_4gpu_h100_bf16_config": (1_418_996_800, 1, 4, 4),
    "wan_14b_pretrain_8gpu_h100_bf16_config": (14_288_491_584, 2, 4, 8),
    "wan_14b_sft_8gpu_h100_bf16_config": (14_288_491_584, 2, 4, 8),
    "wan_14b_pretrain_32gpu_h100_bf16_config": (14_288_491_584, 2, 4, 32),
    "wan_14b_pretrain_16gpu_gb200_bf16_config": (14_288_491_584, 1, 4, 16),
}


@pytest.mark.parametrize("name", WAN_RECIPES)
def test_every_wan_recipe_imports(name):
    total, tp, cp, world = WAN_RECIPES[name]
    imp = read_bridge_recipe(name)
    e = estimate(imp.config)
    assert e.parameters.total == total
    par = imp.config["parallelism"]
    assert (par.get("tensor_model_parallel_size", 1), par.get("context_parallel_size", 1)) == (tp, cp)
    assert imp.config["training"]["world_size"] == world
    assert imp.config["model"]["model_kind"] == "wan"


def test_text2image_runs_one_latent_frame():
    """wan_1_3b_text2image_pretrain_1gpu_h100_bf16_config sets dataset.F_latents = 1: 1 x 52 x 30 = 1,560 tokens a
    micro-batch (the other recipes' mock samples: 24 x 52 x 30 = 37,440)."""
    assert resolve(load_config(read_bridge_recipe("wan_1_3b_text2image_pretrain_1gpu_h100_bf16_config").config)).s \
        == 1_560
    assert resolve(load_config(read_bridge_recipe("wan_1_3b_pretrain_8gpu_h100_bf16_config").config)).s == 37_440


def test_a_dataset_override_changes_the_sequence():
    """dataset.H_latents=52 halves the mock sample: 24 x 26 x 30 = 18,720 tokens."""
    imp = read_bridge_recipe("wan_1_3b_pretrain_8gpu_h100_bf16_config", ["dataset.H_latents=52"])
    assert resolve(load_config(imp.config)).s == 18_720


def test_a_wan_config_yaml_reads_back_to_the_same_estimate():
    cfg = load_preset("wan-14b")
    imp = read_bridge_config(to_bridge_dict(cfg), world_size=8)
    assert estimate(imp.config).to_dict()["stages"] == estimate(cfg).to_dict()["stages"]


def test_real_data_packs_to_seq_length():
    """With dataset.path Bridge packs samples up to seq_length latent tokens: the sequence is seq_length, and a note
    says one sample's text is counted."""
    d = to_bridge_dict(load_preset("wan-1.3b"))
    d["dataset"]["path"] = "/data/wds"
    imp = read_bridge_config(d, world_size=8)
    assert resolve(load_config(imp.config)).s == 1_024
    assert any("packs samples up to seq_length" in n for n in imp.notes)


def test_several_mock_samples_a_micro_batch_are_refused_by_name():
    d = to_bridge_dict(load_preset("wan-1.3b"))
    d["dataset"]["number_packed_samples"] = 2
    with pytest.raises(ConfigError, match=r"dataset.number_packed_samples: \(2\) is not modelled: only 1"):
        read_bridge_config(d, world_size=8)


#: What a Wan run's config.yaml holds beside the recipe's settings: WanModelProvider's own defaults
#: (diffusion/models/wan/wan_provider.py) and WanDatasetConfig's (diffusion/data/wan/wan_energon_datamodule.py).
PROVIDER_DEFAULTS = {"rotary_interleaved": True, "apply_rope_fusion": True, "bias_activation_fusion": True,
                     "qkv_format": "thd", "layernorm_across_heads": True, "text_len": 512, "in_channels": 16,
                     "out_channels": 16, "patch_spatial": 2, "patch_temporal": 1, "freq_dim": 256, "text_dim": 4096,
                     "fp16_lm_cross_entropy": False, "parallel_output": True, "normalization": "RMSNorm"}
DATASET_DEFAULTS = {"packing_buffer_size": 200, "num_workers": 16, "dataloader_type": "external",
                    "number_packed_samples": 1, "context_embeddings_dim": 4096, "patch_spatial": 2,
                    "patch_temporal": 1, "micro_batch_size": 1, "global_batch_size": 2}


def test_a_full_wan_config_yaml_reads():
    """Every field of the provider and the data config is read, modelled or said to have no effect: the estimate is
    the preset's."""
    d = to_bridge_dict(load_preset("wan-1.3b"))
    d["model"].update(PROVIDER_DEFAULTS)
    d["dataset"].update(DATASET_DEFAULTS)
    imp = read_bridge_config(d, world_size=8)
    assert estimate(imp.config).to_dict()["stages"] == estimate(load_preset("wan-1.3b")).to_dict()["stages"]
    d["dataset"]["micro_batch_size"] = 2
    with pytest.raises(ConfigError, match=r"dataset.micro_batch_size: \(2\) differs from train.micro_batch_size \(1\)"):
        read_bridge_config(d, world_size=8)
