"""A vision-language run's config.yaml (estimator/formats/bridge/providers.py): the tower read from the provider's
``vision_config`` (either form Bridge writes) and its kind from ``model._target_``; the provider's own fields mapped,
listed as without memory effect, or refused by name. Before, ``model.vision_config`` stopped the import as "not a
field". The fixtures (tests/formats/bridge/fixtures/*.yaml) say where each value comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from estimator import estimate, from_hf_config, load_config
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.config.yamlio import load
from estimator.formats.bridge.config import BridgeRefusedError, read_bridge_config
from estimator.formats.bridge.recipes import read_bridge_recipe, recipe_config
from estimator.formats.presets import preset_text

FIXTURES = Path(__file__).parent / "fixtures"
P = "megatron.bridge.models."
#: fixture -> the recipe it was written from.
RUNS = {"qwen3_vl_30b_a3b": "qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config",
        "qwen3_vl_8b": "qwen3_vl_8b_pretrain_4gpu_h100_bf16_mock_config",
        "qwen25_vl_3b": "qwen25_vl_3b_sft_1gpu_h100_bf16_config",
        "qwen35_vl_27b": "qwen35_vl_27b_sft_16gpu_h100_bf16_config",
        "gemma3_vl_4b": "gemma3_vl_4b_sft_1gpu_h100_bf16_config"}
#: Fields the recipe's transcription leaves at their default that the provider fixes: Gemma3VLModelProvider's
#: attention_backend fused (init=False), the kernel the default picks here too.
_PROVIDER_FIXED = {"gemma3_vl_4b": {("training", "attention_backend"): "fused"}}


@pytest.mark.parametrize("fixture", sorted(RUNS))
def test_the_config_yaml_and_the_recipe_give_one_estimate(fixture):
    """The same run through --bridge-config and --bridge-recipe: one configuration, one estimate. The images of a
    sample are the dataset's, in neither the config.yaml nor Bridge's sections, so the recipe's are given to both.
    Gemma 3 VL's layer spec (norms after attention and the MLP) and GeGLU come from the provider's
    transformer_layer_spec and activation_func, which no Megatron-LM flag says."""
    recipe = RUNS[fixture]
    tr = recipe_config(recipe).get("training", {})
    imp = read_bridge_config((FIXTURES / f"{fixture}.yaml").read_text(), world_size=tr.get("world_size"))
    imp.config.setdefault("training", {}).update({k: tr[k] for k in ("images_per_sample", "image_resolution")
                                                  if k in tr})
    by_recipe = read_bridge_recipe(recipe)
    for (section, field), value in _PROVIDER_FIXED.get(fixture, {}).items():
        assert imp.config[section].pop(field) == value
    assert imp.config == by_recipe.config
    assert estimate(imp.config).peak.device_bytes == estimate(by_recipe.config).peak.device_bytes


def test_the_tower_is_the_vision_config_of_the_run():
    """Qwen3-VL-8B-Instruct's vision_config (config.json as published): depth 27, hidden_size 1152, num_heads 16,
    intermediate_size 4304, patch 16, temporal patch 2, 2304 positions, out_hidden_size 4096, three deepstack
    mergers (indexes 8, 16, 24)."""
    m = read_bridge_config((FIXTURES / "qwen3_vl_8b.yaml").read_text(), world_size=4).config["model"]
    assert (m["vision_num_layers"], m["vision_hidden_size"], m["vision_num_attention_heads"],
            m["vision_ffn_hidden_size"], m["vision_patch_size"], m["vision_temporal_patch_size"],
            m["vision_num_position_embeddings"], m["vision_out_hidden_size"], m["vision_deepstack_mergers"]) == \
        (27, 1152, 16, 4304, 16, 2, 2304, 4096, 3)


def _fixture(name="qwen3_vl_8b") -> dict:
    return load((FIXTURES / f"{name}.yaml").read_text())


@pytest.mark.parametrize("field, value, words", [
    ("use_hf_vision_model", True, "transformers' vision tower"),
    ("vision_dp_when_cp", True, "context-parallel"),
    ("add_encoder", False, "without the tower"),
    ("dist_train", {"use_dist_train": True}, "separate GPUs"),
])
def test_a_provider_field_that_changes_the_tower_is_refused_by_name(field, value, words):
    data = _fixture()
    data["model"][field] = value
    with pytest.raises(BridgeRefusedError, match=f"model.{field}") as exc:
        read_bridge_config(data, world_size=4)
    assert words in str(exc.value)


def test_a_vision_config_key_the_reader_refuses_is_named():
    data = _fixture()
    data["model"]["vision_config"]["intermediate_size"] = 0
    with pytest.raises(ConfigError, match="model.vision_config.intermediate_size"):
        read_bridge_config(data, world_size=4)
    data = _fixture()
    data["model"]["vision_config"]["window_size"] = 112       # a Qwen2.5-VL key, not Qwen3-VL's
    with pytest.raises(UnsupportedError, match="window_size"):
        read_bridge_config(data, world_size=4)


def test_a_tower_provider_without_its_vision_config_is_named():
    data = _fixture()
    del data["model"]["vision_config"]
    with pytest.raises(ConfigError, match="model.vision_config"):
        read_bridge_config(data, world_size=4)


SMALL = {"num_layers": 2, "hidden_size": 2560, "num_attention_heads": 8, "seq_length": 1024, "vocab_size": 1000}
#: google/gemma-3-4b-it's vision_config as published (Gemma3ForConditionalGeneration, SiglipVisionConfig).
SIGLIP = {"_target_": "transformers.models.siglip.configuration_siglip.SiglipVisionConfig", "hidden_size": 1152,
          "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
          "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False,
          "return_dict": True, "output_hidden_states": False, "dtype": None}


def _gemma(**model):
    return read_bridge_config({"model": {"_target_": P + "gemma_vl.gemma3_vl_provider.Gemma3VLModelProvider",
                                         **SMALL, "vision_config": SIGLIP, "mm_tokens_per_image": 256,
                                         "is_vision_language": True, **model},
                               "train": {"micro_batch_size": 1, "global_batch_size": 8}}, world_size=1)


def test_gemma3_vl_tower_equals_the_preset():
    """Gemma3VLModelProvider's SigLIP vision_config gives the tower of presets/gemma-3-4b-it.yaml (written from the
    same published config.json): 27 layers of 1152, 16 heads, MLP 4304, patch 14, 64 x 64 = 4096 positions, a 4 x 4
    pool to 256 tokens."""
    preset = load(preset_text("gemma-3-4b-it"))["model"]
    m = _gemma().config["model"]
    assert {k: v for k, v in m.items() if k.startswith("vision_")} == \
        {k: v for k, v in preset.items() if k.startswith("vision_")}
    assert (m["vision_num_position_embeddings"], m["vision_spatial_merge_size"]) == (4096, 4)


def test_gemma3_vl_projector_that_disagrees_is_refused_by_name():
    proj = {"_target_": P + "gemma_vl.modeling_gemma3_vl.Gemma3VLMultimodalProjectorConfig", "input_size": 1152,
            "hidden_size": 2560, "image_size": 896, "patch_dim": 14, "tokens_per_image": 256}
    assert _gemma(vision_projector_config=proj).config["model"]["vision_hidden_size"] == 1152
    with pytest.raises(ConfigError, match="model.vision_projector_config.input_size"):
        _gemma(vision_projector_config={**proj, "input_size": 1024})


def test_glm45v_tower_equals_the_hugging_face_import():
    """GLM45VModelProvider's vision_config (Megatron-Bridge's toy GLM-4.5V, tests/formats/hf/test_glm45v.py) gives
    the tower the Hugging Face importer reads from the same config.json."""
    from tests.formats.hf.test_glm45v import TOY, VISION
    imp = read_bridge_config({"model": {"_target_": P + "glm_vl.glm_45v_provider.GLM45VModelProvider", **SMALL,
                                        "vision_config": {"_target_": "transformers.models.glm4v.configuration_glm4v."
                                                          "Glm4vVisionConfig", **VISION},
                                        "image_start_token_id": 151339, "image_token_id": 151363},
                              "train": {"micro_batch_size": 1, "global_batch_size": 8}}, world_size=1)
    want = {k: v for k, v in from_hf_config(TOY).items() if k.startswith("vision_")}
    assert {k: v for k, v in imp.config["model"].items() if k.startswith("vision_")} == want


def test_nemotron_vl_tower_comes_from_the_provider_class():
    """NemotronVLModelProvider writes no vision_config: provide() hard-codes the RADIO tower (32 layers of 1280, 16
    heads, MLP 5120, patch 16, (2048 / 16)^2 = 16384 positions, projector MLP 20480), the tower of
    tests/memory/test_vision_radio.py. Another vision_model_type is refused."""
    data = {"model": {"_target_": P + "nemotron_vl.nemotron_vl_provider.NemotronVLModelProvider", **SMALL,
                      "vision_model_type": "radio", "language_model_type": "nemotron5-hybrid-12b",
                      "freeze_vision_model": True},
            "train": {"micro_batch_size": 1, "global_batch_size": 8}}
    imp = read_bridge_config(data, world_size=1)
    m = imp.config["model"]
    assert (m["vision_model_type"], m["vision_num_layers"], m["vision_hidden_size"], m["vision_ffn_hidden_size"],
            m["vision_num_position_embeddings"], m["vision_projector_ffn_hidden_size"]) == \
        ("radio", 32, 1280, 5120, 16384, 20480)
    assert imp.config["training"]["freeze_vision_model"] is True
    load_config(imp.config)
    data["model"]["vision_model_type"] = "siglip"
    with pytest.raises(UnsupportedError, match="model.vision_model_type"):
        read_bridge_config(data, world_size=1)


def test_every_provider_field_is_in_the_catalogue():
    """The field catalogue (docs/bridge.md, field_classes.rows) lists each vision-language provider field the
    catalogued GPTModelProvider lacks, with its class and a reason."""
    from estimator.formats.bridge.catalog import SECTIONS
    from estimator.formats.bridge.field_classes import rows
    from estimator.formats.bridge.providers import PROVIDER_FIELDS
    listed = {r["field"]: r for r in rows() if r["section"] == "model"}
    for name, (kind, _, _) in PROVIDER_FIELDS.items():
        if name not in SECTIONS["model"]:
            assert listed[name]["kind"] == kind and listed[name]["reason"], name
    assert listed["use_hf_vision_model"]["kind"] == "refused"
    assert listed["image_token_id"]["kind"] == "no_effect"


def test_provider_fields_without_effect_are_listed_and_harmless_values_are_silent():
    imp = read_bridge_config((FIXTURES / "qwen3_vl_8b.yaml").read_text(), world_size=4)
    said = [where for where, _ in imp.no_effect]
    assert "model.image_token_id = 151655" in said and "model.mrope_section = [24, 20, 20]" in said
    assert not any(w.startswith(("model.dist_train", "model.use_hf_vision_model", "model.add_encoder"))
                   for w in said)


def test_a_vision_config_of_a_provider_whose_tower_is_not_modelled_is_refused():
    """Gemma 4's tower is not modelled: its vision_config stops the import by name instead of being dropped."""
    with pytest.raises(UnsupportedError, match="model.vision_config of model._target_ .*Gemma4VLModelProvider"):
        read_bridge_config({"model": {"_target_": P + "gemma_vl.gemma4_vl_provider.Gemma4VLModelProvider", **SMALL,
                                      "vision_config": {"_target_": "transformers.Gemma4VisionConfig"}}},
                           world_size=1)


def test_glm45v_config_yaml_and_the_hugging_face_import_give_one_estimate():
    """The toy GLM-4.5V run (tests/formats/bridge/fixtures/glm45v_toy.yaml: TP 2, EP 2, SP, 4 GPUs) read from its
    config.yaml and the same run built from the toy's config.json through --hf's import: one configuration of the
    model and the tower, one estimate (one image a sample given to both)."""
    from tests.formats.hf.test_glm45v import TOY
    imp = read_bridge_config((FIXTURES / "glm45v_toy.yaml").read_text(), world_size=4)
    imp.config["training"]["images_per_sample"] = 1
    by_hf = {"model": from_hf_config(TOY),
             "parallelism": {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2},
             "training": {"world_size": 4, "seq_length": 2048, "micro_batch_size": 1, "global_batch_size": 8,
                          "sequence_parallel": True, "images_per_sample": 1}}
    assert {k: v for k, v in imp.config["model"].items() if k.startswith("vision_")} == \
        {k: v for k, v in by_hf["model"].items() if k.startswith("vision_")}
    assert estimate(imp.config).peak.device_bytes == estimate(by_hf).peak.device_bytes


def test_nemotron_nano_vl_config_yaml_holds_the_radio_tower():
    """tests/formats/bridge/fixtures/nemotron_nano_vl.yaml: the provider class gives the RADIO tower, whose parameters
    tests/memory/test_vision_radio.py counts by hand: 861,373,440 (tower and projector)."""
    imp = read_bridge_config((FIXTURES / "nemotron_nano_vl.yaml").read_text(), world_size=8)
    assert imp.config["model"]["num_layers"] == 62 and imp.config["model"]["vision_model_type"] == "radio"
    assert estimate(imp.config).parameters.vision == 861_373_440


def test_a_vision_config_without_its_provider_class_is_named():
    data = _fixture()
    del data["model"]["_target_"]
    with pytest.raises(ConfigError, match="model._target_"):
        read_bridge_config(data, world_size=4)


def test_gemma3_text_layer_pattern_is_refused_and_another_spec_is_read_as_written():
    """interleaved_attn_pattern has no memory effect only in Gemma 3 VL (every layer drops its window for the
    attention bias); for the text model it is refused. A config.yaml naming another layer spec gets no Gemma fields
    (its fast_gelu then stops the import by name)."""
    data = _fixture("gemma3_vl_4b")
    data["model"]["is_vision_language"] = False
    with pytest.raises(BridgeRefusedError, match="model.interleaved_attn_pattern"):
        read_bridge_config(data, world_size=1)
    data = _fixture("gemma3_vl_4b")
    data["model"]["transformer_layer_spec"]["_target_"] = "megatron.core.models.gpt.gpt_layer_specs.other"
    with pytest.raises(BridgeRefusedError, match="model.activation_func"):
        read_bridge_config(data, world_size=1)


def test_a_qwen25_vl_peft_run_freezes_the_tower_as_bridge_does():
    """The Qwen2.5-VL SFT run's config.yaml with peft=lora (LoRA dim 32 on the four default targets): Bridge's PEFT
    freezes every parameter and adds no adapter to Hugging Face's Qwen2.5-VL tower (peft/base.py, peft/
    module_matcher.py: its linears are qkv, proj, gate/up/down_proj, merger mlp.0 / mlp.2), although the provider
    says freeze_vision_* false. The import sets both freezes, says so, and gives the PEFT recipe's estimate (the
    two recipes differ in nothing else with a memory effect: qwen_vl/h100/qwen25_vl.py)."""
    imp = read_bridge_config((FIXTURES / "qwen25_vl_3b.yaml").read_text(), world_size=1, overrides=["peft=lora"])
    imp.config["training"].update(images_per_sample=1, image_resolution=448)
    tr = imp.config["training"]
    assert (tr["peft"], tr["freeze_vision_model"], tr["freeze_vision_projection"]) == ("lora", True, True)
    assert any("adapts no module of the Qwen2.5-VL tower" in n for n in imp.notes)
    by_recipe = read_bridge_recipe("qwen25_vl_3b_peft_1gpu_h100_bf16_config").config
    assert estimate(imp.config).peak.device_bytes == estimate(by_recipe).peak.device_bytes
