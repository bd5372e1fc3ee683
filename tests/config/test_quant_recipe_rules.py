"""estimator/config/quant_recipe.py: Megatron-Core's RecipeConfig read into GLOB=PRECISION rules, and back.

Megatron-LM @ d98e8a64 : megatron/core/quantization/quant_config.py (``RecipeConfig._build_matchers``: matchers in
order, a matcher without ``enabled: true`` skipped, only ``glob``) and extensions/transformer_engine.py
(``TEQuantizationParams`` / ``TEQuantizationRecipe``: ``training_recipe`` {} is bf16; delayed scaling refused)."""

from __future__ import annotations

import pytest

from estimator.config.quant_recipe import (parse_rules, precision_of, recipe_from_rules, rule_problem,
                                           rules_from_recipe)

TE = "TEQuantizationParams"
#: Megatron-Bridge @ 067f987d : src/megatron/bridge/perf_recipes/nemotronh/te_quant.cfg, as its YAML loads.
NEMOTRON_3_SUPER = {
    "configs": {"mxfp8": {"transformer_engine_config_type": TE, "training_recipe": {"fp8_quantization_recipe": "mxfp8"}},
                "bf16": {"transformer_engine_config_type": TE, "training_recipe": {}}},
    "matchers": {"attn_qkv_bf16": {"config": "bf16", "type": "glob", "pattern": "*.linear_qkv", "enabled": True},
                 "attn_proj_bf16": {"config": "bf16", "type": "glob", "pattern": "*.linear_proj", "enabled": True},
                 "latent_bf16": {"config": "bf16", "type": "glob", "pattern": "*mlp.fc[12]_latent_proj",
                                 "enabled": True},
                 "mtp_bf16": {"config": "bf16", "type": "glob", "pattern": "mtp.*", "enabled": True},
                 "mamba_outproj_mxfp8": {"config": "mxfp8", "type": "glob", "pattern": "*mixer.out_proj",
                                         "enabled": True}}}
RULES = ["*.linear_qkv=bf16", "*.linear_proj=bf16", "*mlp.fc[12]_latent_proj=bf16", "mtp.*=bf16",
         "*mixer.out_proj=mxfp8"]


def test_nemotron_3_super_recipe_reads_as_rules_in_order():
    assert rules_from_recipe(NEMOTRON_3_SUPER) == (RULES, [], [])


def test_first_match_wins_and_unmatched_paths_keep_the_run():
    """mtp.layers.0.mtp_model_layer.layers.0.mixer.out_proj meets mtp.* before *mixer.out_proj: bf16."""
    rules = parse_rules(RULES)
    assert precision_of(rules, "decoder.layers.3.mixer.out_proj") == "mxfp8"
    assert precision_of(rules, "mtp.layers.0.mtp_model_layer.layers.0.mixer.out_proj") == "bf16"
    assert precision_of(rules, "decoder.layers.5.mlp.fc2_latent_proj") == "bf16"
    assert precision_of(rules, "decoder.layers.5.mlp.experts.linear_fc1") is None


def test_round_trip_through_the_recipe_dict():
    assert rules_from_recipe(recipe_from_rules(RULES))[0] == RULES


def test_a_disabled_matcher_is_skipped_and_the_evaluation_recipe_noted():
    """DeepSeek-V4's recipe (recipes/deepseek/h100/deepseek_v4.py _deepseek_v4_mxfp8_quant_recipe): every linear
    MXFP8 in training, bf16 in evaluation (a note: no effect on the training step)."""
    recipe = {"configs": {"m": {"transformer_engine_config_type": TE,
                                "training_recipe": {"fp8_quantization_recipe": "mxfp8"}, "evaluation_recipe": {}}},
              "matchers": {"off": {"config": "m", "type": "glob", "pattern": "*.linear_qkv"},
                           "all_te_linears": {"config": "m", "type": "glob", "pattern": "*", "enabled": True}}}
    rules, refused, notes = rules_from_recipe(recipe)
    assert (rules, refused) == (["*=mxfp8"], [])
    assert "evaluation_recipe" in notes[0]


@pytest.mark.parametrize("training, words", [
    ({"fp8_quantization_recipe": "delayed"}, "refuses delayed scaling"),
    ({"fp8_quantization_recipe": "mxfp8", "fp8_param": True}, "fp8_param = True"),
    ({"fp4_quantization_recipe": "custom", "custom_recipe_factory": "x.y"}, "custom"),
    ({"fp8_quantization_recipe": "mxfp8", "fp4_quantization_recipe": "nvfp4"}, "mutually exclusive"),
    ({"override_nonquantized_autocast": True}, "override_nonquantized_autocast"),
    ({"fp8_quantisation_recipe": "mxfp8"}, "not a TEQuantizationRecipe field"),
])
def test_what_is_not_modelled_is_named(training, words):
    recipe = {"configs": {"c": {"transformer_engine_config_type": TE, "training_recipe": training}},
              "matchers": {"m": {"config": "c", "type": "glob", "pattern": "*", "enabled": True}}}
    rules, refused, _ = rules_from_recipe(recipe)
    assert rules == [] and any(words in r for r in refused), refused


def test_malformed_recipes_say_what_is_wrong():
    assert "regex" in rules_from_recipe({"matchers": {"m": {"config": "c", "type": "regex", "pattern": "x",
                                                              "enabled": True}}})[1][0]
    assert "not in configs" in rules_from_recipe({"matchers": {"m": {"config": "c", "type": "glob", "pattern": "*",
                                                                     "enabled": True}}})[1][0]
    assert "kitchen" in rules_from_recipe({"configs": {"d": {"kitchen_config_type": "QLinearParams", "recipe_idx": 1}},
                                           "matchers": {"m": {"config": "d", "type": "glob", "pattern": "*",
                                                              "enabled": True}}})[1][0]
    assert rule_problem("*=fp6") and rule_problem("=bf16") and rule_problem("*") and rule_problem(3)
    assert rule_problem("*mixer.out_proj=mxfp8") is None
