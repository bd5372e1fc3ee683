"""The catalogue of Megatron-Bridge's configuration fields and their classification (modelled / no effect / refused).

The catalogue is read from Bridge's dataclasses by ``scripts/bridge_fields.py`` at a pinned revision; the recipe
catalogue is generated from ``validation/known_to_run.yaml`` and ``scripts/bridge_recipes.yaml`` by
``scripts/bridge_recipes.py``. Neither test needs the network.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from estimator.formats.bridge import catalog as bridge_catalog
from estimator.formats.bridge.catalog import MEGATRON_LM_REVISION, REVISION, SECTIONS
from estimator.formats.bridge.field_classes import OWN, classify, counts, rows
from estimator.formats.bridge.presets import MIXED_PRECISION_PRESETS

ROOT = Path(__file__).resolve().parents[3]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pinned_revisions():
    """Bridge @ 067f987d pins Megatron-LM 2a75ac12 as its 3rdparty/Megatron-LM submodule (git ls-tree)."""
    assert REVISION == "067f987df03b8355b03192d88d70f1709fedf51a"
    assert MEGATRON_LM_REVISION == "2a75ac12c54ba6a42b34024756820bf819a2e25f"


def test_every_field_is_classified():
    assert counts()["unclassified"] == 0, [r for r in rows() if r["kind"] == "unclassified"]
    assert all(r["reason"] for r in rows())


def test_hand_table_names_only_catalogued_fields():
    """An OWN entry for a field the catalogue does not hold is a typo (it would classify nothing)."""
    assert [k for k in OWN if k[1] not in SECTIONS[k[0]]] == []


def test_mixed_precision_fields_match_the_source():
    """MixedPrecisionConfig @ 067f987d (training/mixed_precision.py) declares 31 fields, grad_reduce_in_fp32 True
    and fp8_recipe "tensorwise" by default (read off the class body)."""
    mp = SECTIONS["mixed_precision"]
    assert len(mp) == 31
    assert mp["grad_reduce_in_fp32"] is True and mp["fp8_recipe"] == "tensorwise" and mp["fp4_recipe"] == "nvfp4"


def test_bridge_fields_and_megatron_fields_both_present():
    """GPTModelProvider adds share_embeddings_and_output_weights (default True) to Megatron-Core's TransformerConfig
    (num_moe_experts, ...); Bridge's DDP config adds param_name_patterns_for_fp32_local_accumulation."""
    assert SECTIONS["model"]["share_embeddings_and_output_weights"] is True
    assert "num_moe_experts" in SECTIONS["model"] and "tensor_model_parallel_size" in SECTIONS["model"]
    assert "param_name_patterns_for_fp32_local_accumulation" in SECTIONS["ddp"]


def test_classification_follows_megatron_lm_for_shared_names():
    """A field named like a Megatron-LM argument takes its class: tensor_model_parallel_size is modelled there."""
    assert classify("model", "tensor_model_parallel_size")[0] == "modelled"
    assert classify("optimizer", "lr")[0] == "no_effect"
    assert classify("logger", "anything")[0] == "no_effect"
    assert classify("model", "fp4_param")[0] == "modelled"
    assert classify("model", "fp4")[0] == "modelled"                  # Megatron-LM's --fp4-format
    assert classify("model", "fp4_quantizer_factory")[0] == "refused"


def test_catalogue_file_is_what_the_script_writes():
    """The generated module is not edited by hand: rendering its own data reproduces it byte for byte."""
    gen = _script("bridge_fields")
    text = Path(bridge_catalog.__file__).read_text()
    assert gen.render(REVISION, MEGATRON_LM_REVISION, SECTIONS, bridge_catalog.SOURCES) == text


def test_recipe_catalogue_is_current():
    """The recipe catalogue is what scripts/bridge_recipes.py writes from known_to_run.yaml and bridge_recipes.yaml."""
    from estimator.formats.bridge import recipe_catalog as bridge_recipe_catalog
    assert _script("bridge_recipes").render() == Path(bridge_recipe_catalog.__file__).read_text()


def test_presets_transcribed_from_the_source():
    """training/mixed_precision.py @ 067f987d: bf16_mixed keeps an fp32 gradient buffer, fp16_mixed does not;
    bf16_with_fp8_current_scaling_mixed is hybrid tensorwise with the first and last layer in BF16; every name is
    also registered with hyphens."""
    assert MIXED_PRECISION_PRESETS["bf16_mixed"]["grad_reduce_in_fp32"] is True
    assert MIXED_PRECISION_PRESETS["fp16_mixed"]["grad_reduce_in_fp32"] is False
    cs = MIXED_PRECISION_PRESETS["bf16-with-fp8-current-scaling-mixed"]
    assert (cs["fp8"], cs["fp8_recipe"], cs["first_last_layers_bf16"], cs["num_layers_at_start_in_bf16"]) == \
        ("hybrid", "tensorwise", True, 1)
    assert set(MIXED_PRECISION_PRESETS["bf16_mixed"]) <= set(SECTIONS["mixed_precision"])
