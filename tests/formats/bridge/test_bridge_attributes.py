"""Names Bridge's recipes set outside the catalogued dataclasses (estimator/formats/bridge/field_classes.py
ATTRIBUTES), and the model providers refused by name (NOT_GPT_PROVIDERS).

Source facts from NVIDIA-NeMo/Megatron-Bridge @ 067f987d: ``_pipeline_model_parallel_layout_builder`` is called only
by scripts/training/recipe_runner.py ``sync_model_pipeline_layout``; ``moe_a2a_overlap`` (perf_recipes/qwen/*/
qwen3_moe.py),
``mtp_eval_in_bf16`` (recipes/deepseek/*/deepseek_v4.py) and ``optimizer.offload_optimizer_states``
(perf_recipes/deepseek/gb200/deepseek_v4.py) are assigned and read nowhere in Bridge or in Megatron-LM @ 2a75ac12;
``WanModelProvider`` (diffusion/models/wan/wan_provider.py) subclasses TransformerConfig and builds a VisionModule.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate
from estimator.formats.bridge.catalog import SECTIONS
from estimator.formats.bridge.config import BridgeRefusedError, read_bridge_config
from estimator.formats.bridge.field_classes import ATTRIBUTES, classify, rows
# The two-layer SwiGLU model of the Bridge config tests, its parameters (P = 2,622,720) counted by hand there.
from tests.formats.bridge.test_bridge_config import MODEL, P, TRAIN

NO_EFFECT = {"_pipeline_model_parallel_layout_builder": {"_target_": "megatron.bridge.recipes.deepseek.h100."
                                                         "deepseek_v3._get_deepseek_v3_pipeline_layout",
                                                         "_call_": False},
             "moe_a2a_overlap": True, "mtp_eval_in_bf16": True, "fp8_param_gather": True,
             "cp_partition_mode": "contiguous"}


def _stage(imp):
    return estimate(imp.config).to_dict()["stages"][0]


def test_attributes_are_outside_the_catalogue_and_classified():
    """An ATTRIBUTES entry names something the dataclasses do not declare (else it belongs in OWN), and the docs'
    table (rows) lists it."""
    assert [k for k in ATTRIBUTES if k[1] in SECTIONS[k[0]]] == []
    listed = {(r["section"], r["field"]) for r in rows()}
    assert set(ATTRIBUTES) <= listed
    for section, name in ATTRIBUTES:
        assert classify(section, name)[0] in ("modelled", "no_effect", "refused")


def test_plain_attributes_change_nothing():
    """The two-layer model above (P = 2,622,720 parameters) keeps BF16 weights, 2 B x P = 5,245,440 B, and every
    other figure of the stage, with or without the attributes. The model's fp8_param_gather = true does not turn on
    FP8 weights: Megatron-Core reads it from the DDP config."""
    imp = read_bridge_config({"model": {**MODEL, **NO_EFFECT}, "train": TRAIN,
                              "optimizer": {"offload_optimizer_states": False}}, world_size=1)
    st = _stage(imp)
    assert st["weights_bytes"] == 2 * P == 5_245_440
    assert st == _stage(read_bridge_config({"model": MODEL, "train": TRAIN}, world_size=1))
    assert not imp.config.get("precision", {}).get("fp8_param_gather")
    said = " ".join(f for f, _ in imp.no_effect)
    for name in NO_EFFECT:
        assert f"model.{name}" in said


def test_attributes_as_overrides():
    """Bridge's dotted overrides reach the attributes as they reach dataclass fields."""
    imp = read_bridge_config({"model": MODEL, "train": TRAIN}, world_size=1,
                             overrides=["model.moe_a2a_overlap=true", "model.mtp_eval_in_bf16=true"])
    assert _stage(imp)["weights_bytes"] == 2 * P


def test_frozen_mtp_is_read_as_training_freeze_mtp():
    """Exaone 4.5's provider field (Exaone45Model.freeze: requires_grad off on the parameters named mtp) is the
    estimator's training.freeze_mtp (worked by hand in tests/memory/features/test_frozen_language.py); it needs MTP
    layers, and false is the default."""
    imp = read_bridge_config({"model": {**MODEL, "mtp_num_layers": 1, "freeze_mtp_model": True}, "train": TRAIN},
                             world_size=1)
    assert imp.config["training"]["freeze_mtp"] is True
    with pytest.raises(ConfigError, match="needs multi-token-prediction layers"):
        estimate(read_bridge_config({"model": {**MODEL, "freeze_mtp_model": True}, "train": TRAIN},
                                    world_size=1).config)
    plain = read_bridge_config({"model": {**MODEL, "freeze_mtp_model": False}, "train": TRAIN}, world_size=1)
    assert "freeze_mtp" not in plain.config["training"]


def test_diffusion_provider_is_refused_once_by_name():
    """A FLUX configuration holds the provider's own fields (in_channels, ...): one refusal names the provider, not
    each field as unknown. (Wan's provider is read as model_kind wan: tests/formats/bridge/test_bridge_wan.py.)"""
    model = {**MODEL, "_target_": "megatron.bridge.diffusion.models.flux.flux_provider.FluxProvider",
             "in_channels": 64, "z_dim": 16}
    with pytest.raises(BridgeRefusedError) as err:
        read_bridge_config({"model": model, "train": TRAIN}, world_size=1)
    problems = err.value.to_problems()
    assert [(p.field, p.value) for p in problems] == [("model._target_", "FluxProvider")]
    assert "not a Megatron-Core GPT model" in problems[0].message


def test_unknown_name_still_stops():
    """An attribute the table does not hold is still an unknown field, with the section named."""
    with pytest.raises(ConfigError) as err:
        read_bridge_config({"model": {**MODEL, "moe_a2a_overlapp": True}, "train": TRAIN}, world_size=1)
    assert "model.moe_a2a_overlapp" in str(err.value)


def test_frozen_mtp_exports_as_bridge_and_not_as_megatron_lm():
    """training.freeze_mtp is written back as model.freeze_mtp_model (read back to the same estimate); Megatron-LM
    has no flag for it, so its export says so rather than write a run that trains the MTP layers."""
    from estimator.config.errors import UnsupportedError
    from estimator.formats.bridge.export import to_bridge_overrides
    from estimator.formats.megatron_export import to_megatron_args
    from tests.conftest import make_config
    cfg = make_config({"num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 1000,
                       "mtp_num_layers": 1}, None, {"freeze_mtp": True})
    overrides = to_bridge_overrides(cfg)
    assert "model.freeze_mtp_model=true" in overrides
    back = read_bridge_config({}, world_size=1, overrides=overrides).config
    assert estimate(back).to_dict()["stages"] == estimate(cfg).to_dict()["stages"]
    with pytest.raises(UnsupportedError, match="training.freeze_mtp"):
        to_megatron_args(cfg)
