"""Presets: every required model, provenance in the header, counts equal to the published ones.

Published counts come from each preset's header (owner's figures and SOURCES.md exact counts, cited
there); the model sections must equal what the importer makes of the reference config.json.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from estimator import PresetNotFoundError, count_parameters_of, estimate, load_config
from estimator.formats.hf import from_hf_config
from estimator.formats.presets import list_presets, load_preset, preset_info, preset_path, preset_text, published_bounds
from tests.conftest import ROOT, make_config

REQUIRED = ["llama-2-7b", "llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mixtral-8x7b", "mixtral-8x22b",
            "deepseek-v2-lite", "deepseek-v3", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-30b-a3b",
            "qwen3-235b-a22b", "moonlight-16b-a3b", "kimi-k2", "tiny",
            # issue 11: hybrid Mamba, gpt-oss, Qwen3-Next, Gemma 3
            "nemotron-h-56b", "nemotron-3-nano-30b-a3b", "gpt-oss-20b", "gpt-oss-120b", "qwen3-next-80b-a3b",
            "gemma-3-1b",
            # issue 27: DeepSeek-V4; a vision-language model (Qwen3-VL's tower with deepstack mergers)
            "deepseek-v4-flash", "qwen3-vl-30b-a3b",
            # issues 27 / 28: the models of Bridge recipes without a catalogued Hugging Face id (OLMoE's own
            # OlMoEModelProvider; Gemma 3 4B with its SigLIP tower)
            "olmoe-1b-7b", "gemma-3-4b-it"]


def test_every_required_preset_exists():
    assert set(REQUIRED) <= set(list_presets())
    assert list_presets() == sorted(list_presets())


@pytest.mark.parametrize("name", REQUIRED)
def test_preset_loads_estimates_and_has_provenance(name):
    cfg = load_preset(name)
    assert load_config(preset_text(name)) == cfg          # the file is a plain configuration
    est = estimate(cfg)
    assert est.peak.device_bytes > 0 and len(est.stages) == cfg.parallelism.pipeline_model_parallel_size
    info = preset_info(name)
    for key in ("title", "source", "recipe", "published_total_text", "published_note"):
        assert info[key], (name, key)


WITH_CONFIG = [n for n in REQUIRED if preset_info(n)["hf_config"]]

# The MoE settings a training recipe chooses (kernels, dispatcher, router precision, load balancing); a
# config.json states the architecture, and test_moe_settings_are_the_recipes checks these against the recipe.
RECIPE_MOE = ("moe_permute_fusion", "moe_router_fusion", "moe_grouped_gemm", "moe_token_dispatcher_type",
              "moe_flex_dispatcher_backend", "moe_router_dtype", "moe_router_pre_softmax",
              "moe_router_score_function", "moe_router_load_balancing_type", "moe_aux_loss_coeff",
              "moe_z_loss_coeff", "moe_router_enable_expert_bias", "moe_expert_capacity_factor",
              "moe_pad_expert_input_to_capacity")


#: Kernel choices a recipe makes for the hardware (DeepSeek-V4's fused sparse attention and mHC kernels on Blackwell),
#: not the checkpoint's architecture.
RECIPE_KERNELS = ("use_fused_mhc", "dsa_kernel_backend")


def _without_recipe_moe(model: dict) -> dict:
    return {k: v for k, v in model.items() if k not in RECIPE_MOE and k not in RECIPE_KERNELS}


@pytest.mark.parametrize("name", WITH_CONFIG)
def test_model_section_equals_the_import_of_its_config_json(name, reference):
    """The MoE kernel and router settings are the recipe's (test_moe_settings_are_the_recipes), not the
    checkpoint's, so both sides leave them out."""
    model = _without_recipe_moe(load_preset(name).to_dict()["model"])
    assert model == _without_recipe_moe(from_hf_config(reference / "hf-configs" / preset_info(name)["hf_config"]))


def test_presets_without_a_reference_config_cite_their_card():
    """Ten presets have a reference config.json; the others say where their values come from (a model card, the
    Hugging Face model page, or the model catalog's config.json). No preset cites the project's internal reference
    folder (issue 29: the public pages showed "shared/reference/hf-configs" and "SOURCES.md")."""
    assert len(WITH_CONFIG) == 10
    for name in set(REQUIRED) - set(WITH_CONFIG) - {"tiny"}:
        source = preset_info(name)["source"]
        assert "model card" in source or "https://huggingface.co/" in source or "model catalog" in source, name
    for name in REQUIRED:
        text = " ".join(str(v) for v in preset_info(name).values())
        assert "shared/" not in text and "SOURCES.md" not in text, name


FROM_CATALOG = [n for n in REQUIRED if preset_info(n)["hf_id"]]


@pytest.mark.parametrize("name", FROM_CATALOG)
def test_model_section_equals_the_import_of_its_catalog_config(name):
    """The catalog's config.json imported as is; the MTP layers are the recipe's choice (Qwen3-Next's
    checkpoint holds one that its config.json does not state; DeepSeek-V4's states it), so both sides leave them out."""
    model = {k: v for k, v in load_preset(name).to_dict()["model"].items() if k != "mtp_num_layers"}
    imported = {k: v for k, v in from_hf_config(preset_info(name)["hf_id"]).items() if k != "mtp_num_layers"}
    assert _without_recipe_moe(model) == _without_recipe_moe(imported)


def _counts(name: str):
    """Counts of the preset's model at TP 1 (no extra vocabulary padding) and without MTP layers, as owners
    publish them."""
    model = {k: v for k, v in load_preset(name).to_dict()["model"].items() if k != "mtp_num_layers"}
    return count_parameters_of(make_config(model, training={"seq_length": model["max_position_embeddings"]}))


@pytest.mark.parametrize("name", REQUIRED)
def test_total_and_active_match_the_published_counts(name):
    info, c = preset_info(name), _counts(name)
    lo, hi = published_bounds(info["published_total_text"])
    assert lo <= c.total <= hi, (name, c.total, info["published_total_text"])
    if info["published_active_text"]:
        active = c.active - (c.embedding if info["published_active_excludes"] == "embedding" else 0)
        lo, hi = published_bounds(info["published_active_text"])
        assert lo <= active <= hi, (name, active, info["published_active_text"])


def test_tiny_by_hand():
    """Per layer: attention qkv 256*(4+2*2)*64 = 131,072 + proj 4*64*256 = 65,536 + norm 256 = 196,864;
    SwiGLU MLP 3*256*704 = 540,672 + norm 256 = 540,928. Vocabulary 1000 padded to 1024 (128 x TP 1):
    262,144 tied embedding; final norm 256. Total 4 * 737,792 + 262,144 + 256 = 3,213,568."""
    assert count_parameters_of(load_preset("tiny")).total == 3_213_568
    assert preset_info("tiny")["published_total"] == 3_213_568


def test_exact_counts_where_sources_gives_them():
    """SOURCES.md exact counts are exact in the headers, and equal the model without MTP."""
    assert preset_info("llama-3-8b")["published_total"] == 8_030_261_248
    assert preset_info("llama-3-8b")["published_total_exact"] is True
    assert _counts("deepseek-v3").total == 671_026_419_200
    assert _counts("llama-3-70b").total == 70_553_706_496


def test_published_bounds():
    """Rounded figures stand for the counts that round or truncate to them; exact ones for themselves."""
    assert published_bounds("8,030,261,248") == (8_030_261_248, 8_030_261_248)
    assert published_bounds("72.7B") == (72_650_000_000, 72_799_999_999)
    assert published_bounds("37B") == (36_500_000_000, 37_999_999_999)
    with pytest.raises(ValueError):
        published_bounds("many")


def test_unknown_preset_suggests_the_nearest():
    with pytest.raises(PresetNotFoundError, match="did you mean 'llama-3-8b'"):
        load_preset("llama-3-8")
    with pytest.raises(LookupError):
        preset_path("nope")


@pytest.mark.subprocess
def test_presets_are_found_when_installed(tmp_path):
    """pyproject.toml maps presets/ to the package estimator._presets: build that layout outside the checkout
    and load a preset from it."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "estimator", site / "estimator", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "presets", site / "estimator" / "_presets", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("from estimator.formats.presets import list_presets, preset_path, load_preset;"
            "print(len(list_presets()), preset_path('tiny'), load_preset('tiny').training.world_size)")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert int(out[0]) == len(list_presets())
    assert Path(out[1]).parent == site / "estimator" / "_presets" and out[2] == "4"


PEAK_NOTE = re.compile(r"peaks at (?:about )?([0-9]+(?:\.[0-9]+)?) GiB on the device")


@pytest.mark.parametrize("name", [n for n in list_presets() if PEAK_NOTE.search(preset_info(n)["notes"] or "")])
def test_a_peak_stated_in_the_notes_is_the_presets_own(name):
    """The notes a preset page shows beside its table must not contradict it: a figure written as "the preset
    peaks at N GiB on the device" is the estimate's peak, to the digits written. DeepSeek-V3's notes said
    79.1 GiB (does not fit with headroom) and Kimi K2's about 40 GiB after model fixes had brought both
    presets to about 62 and 33 GiB."""
    said = PEAK_NOTE.search(preset_info(name)["notes"])[1]
    digits = len(said.split(".")[1]) if "." in said else 0
    gib = estimate(load_preset(name)).peak.device_bytes / 2**30
    assert abs(gib - float(said)) <= 0.5 * 10 ** -digits + 1e-9, \
        f"{name}: notes say {said} GiB, the estimate is {gib:.2f}"


def test_every_package_of_the_core_is_installed():
    """``pip install .`` installs the packages pyproject.toml lists, not what is on disk: estimator.layers was
    missing, so an installed estimator failed at its first import of a layer module. Every folder of estimator/
    holding Python modules (or data it loads, hf_catalog) must be listed, and presets/ as estimator._presets."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    on_disk = {".".join(d.relative_to(ROOT).parts) for d in [ROOT / "estimator", *(ROOT / "estimator").rglob("*")]
               if d.is_dir() and d.name != "__pycache__" and any(f.suffix in (".py", ".json") for f in d.iterdir())}
    assert listed == on_disk | {"estimator._presets"}
