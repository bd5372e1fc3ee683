"""Issue 28's "Done when" for recipes: every Megatron-Bridge performance recipe of validation/known_to_run.yaml and
Bridge's Moonlight, Qwen3-30B-A3B, DeepSeek-V3 and Llama 3 70B pretrain / SFT / PEFT recipes estimate, both by name
(``--bridge-recipe``) and as the ``config.yaml`` text Bridge would write, with one estimate.

Which recipes exist is read from NVIDIA-NeMo/Megatron-Bridge @ 067f987d: recipes/moonlight/h100/moonlight_16b.py
(pretrain, sft, peft), recipes/qwen/h100/qwen3_moe.py (pretrain, sft, peft), recipes/llama/h100/llama3.py
(pretrain, sft, peft) and recipes/deepseek/h100/deepseek_v3.py (pretrain only: Bridge has no DeepSeek-V3 SFT or
PEFT recipe at this revision).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from estimator import ConfigError, estimate
from estimator.config.yamlio import dump, load
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.bridge.export import to_bridge_dict
from estimator.formats.bridge.recipes import read_bridge_recipe, recipe_config, recipe_names

ROOT = Path(__file__).resolve().parents[3]
KNOWN = [r["source"].rsplit(":", 1)[-1].strip()
         for r in load((ROOT / "validation" / "known_to_run.yaml").read_text(encoding="utf-8"))["recipes"]]
#: One pretrain, SFT and PEFT recipe of each family, where Bridge has one (library recipes, recipes/.../h100/).
FAMILY = ["moonlight_16b_pretrain_8gpu_h100_bf16_config", "moonlight_16b_sft_8gpu_h100_bf16_config",
          "moonlight_16b_peft_2gpu_h100_bf16_config",
          "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", "qwen3_30b_a3b_sft_8gpu_h100_bf16_config",
          "qwen3_30b_a3b_peft_4gpu_h100_bf16_config",
          "deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config",
          "llama3_70b_pretrain_32gpu_h100_bf16_config", "llama3_70b_sft_32gpu_h100_bf16_config",
          "llama3_70b_peft_8gpu_h100_bf16_config"]


def test_catalogue_holds_every_recipe_asked_for():
    assert len(KNOWN) == 27
    assert [n for n in KNOWN + FAMILY if n not in recipe_names()] == []


@pytest.mark.parametrize("name", sorted(set(KNOWN + FAMILY)))
def test_recipe_estimates_by_name_and_as_config_yaml(name):
    """No refusal; the recipe read by name and its Bridge sections written as YAML text and read back give the same
    peak on every pipeline stage."""
    imp = read_bridge_recipe(name)
    by_name = [s["device_bytes"] for s in estimate(imp.config).to_dict()["stages"]]
    cfg = recipe_config(name)
    text = dump(to_bridge_dict(cfg))
    back = read_bridge_config(text, world_size=cfg["training"]["world_size"]).config
    assert [s["device_bytes"] for s in estimate(back).to_dict()["stages"]] == by_name


def test_pp_override_of_a_recipe_layout_asks_for_the_layout():
    """moonlight_16b_sft_8gpu_h100_bf16_config's layout 'Et*14|t*13L' is _get_moonlight_pipeline_layout(2, 1); with
    PP 4 Bridge's run_recipe.py rebuilds it from the builder ((4, 1): the embedding and 7 layers, 7, 7, then 6 and
    the loss). Without that layout the override is refused naming the field; with it, four stages."""
    name = "moonlight_16b_sft_8gpu_h100_bf16_config"
    with pytest.raises(ConfigError) as err:
        read_bridge_recipe(name, ["model.pipeline_model_parallel_size=4"], world_size=16)
    assert err.value.problems[0].field == "model.pipeline_model_parallel_layout"
    imp = read_bridge_recipe(name, ["model.pipeline_model_parallel_size=4",
                                    "model.pipeline_model_parallel_layout=Et*7|t*7|t*7|t*6L"], world_size=16)
    assert len(estimate(imp.config).to_dict()["stages"]) == 4


def test_default_lora_on_multi_latent_attention_adapts_what_bridge_matches():
    """LoRA's default targets on an MLA model: linear_qkv matches no MLA module (peft/module_matcher.py compares
    names exactly), so adapters sit on linear_proj, linear_fc1 and linear_fc2 only. By hand, rank 8, h 256, 4 heads
    of v_head_dim 64, SwiGLU ffn 1024, two layers: linear_proj 8 x (256 + 256) = 4,096; fc1 8 x (256 + 2,048) =
    18,432; fc2 8 x (1,024 + 256) = 10,240; 32,768 a layer, 65,536 in all; FP32 gradients (ddp.grad_reduce_in_fp32)
    4 B each: 262,144 B."""
    silu = {"_target_": "torch.nn.functional.silu", "_call_": False}
    model = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024,
             "vocab_size": 1024, "seq_length": 256, "activation_func": silu, "gated_linear_unit": True,
             "add_bias_linear": False, "normalization": "RMSNorm", "position_embedding_type": "rope",
             "share_embeddings_and_output_weights": False, "bf16": True,
             "params_dtype": {"_target_": "torch.bfloat16", "_call_": False},
             "multi_latent_attention": True, "q_lora_rank": None, "kv_lora_rank": 128, "qk_head_dim": 64,
             "qk_pos_emb_head_dim": 32, "v_head_dim": 64}
    imp = read_bridge_config({"model": model, "train": {"micro_batch_size": 1, "global_batch_size": 1},
                              "ddp": {"grad_reduce_in_fp32": True}, "mixed_precision": None,
                              "peft": {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 8}}, world_size=1)
    assert imp.config["training"]["peft_target_modules"] == ["linear_proj", "linear_fc1", "linear_fc2"]
    assert any(re.search(r"linear_qkv matches no module", n) for n in imp.notes)
    assert estimate(imp.config).to_dict()["stages"][0]["gradients_bytes"] == 4 * 65_536


MOE_NO_PEFT = [n for n in sorted(set(KNOWN + FAMILY)) if recipe_config(n)["model"].get("num_experts")
                and not recipe_config(n).get("training", {}).get("peft")]


@pytest.mark.parametrize("name", MOE_NO_PEFT)
def test_moe_recipe_as_megatron_lm_flags_gives_the_bridge_estimate(name):
    """The same MoE run through both frontends: the recipe read as Bridge sections, and the pretrain_gpt.py flags
    written for it (``bridge-overrides``' counterpart, estimator/formats/megatron_export.py) read back as a
    Megatron-LM launch. Bridge's env_vars NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN is an environment variable, not a
    flag: a launch sets it the same way, so it is carried over. PEFT recipes have no pretrain_gpt.py flag."""
    from estimator.formats.megatron_args import read_megatron_args
    from estimator.formats.megatron_export import to_megatron_args
    br = read_bridge_recipe(name).config
    lm = read_megatron_args(to_megatron_args(br), world_size=br["training"]["world_size"]).config
    ranks = br["model"].get("moe_hybridep_ranks_per_nvlink_domain")
    if ranks is not None:
        lm["model"]["moe_hybridep_ranks_per_nvlink_domain"] = ranks
    assert [s["device_bytes"] for s in estimate(lm).to_dict()["stages"]] == \
        [s["device_bytes"] for s in estimate(br).to_dict()["stages"]]
