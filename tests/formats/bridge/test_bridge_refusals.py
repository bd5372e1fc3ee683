"""scripts/bridge_refusals.py: the static count of the Bridge recipes the estimator refuses, and docs/bridge.md's
generated block of it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from estimator.formats.bridge.field_classes import NOT_GPT_PROVIDERS, classify
from estimator.formats.bridge.multimodal import MULTIMODAL, TRAINING_FIELD
from estimator.formats.bridge.multimodal import judge as judge_multimodal

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))
import bridge_refusals as br  # noqa: E402

MIRROR = Path(os.environ.get("BRIDGE_GIT_DIR", "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"))


def _block() -> str:
    text = (ROOT / "docs" / "bridge.md").read_text(encoding="utf-8")
    return text[text.index(br.BEGIN) + len(br.BEGIN):text.index(br.END)]


def test_docs_table_names_only_fields_still_refused():
    """Every field in docs/bridge.md's generated table is still refused by the field classes: moving one to
    modelled without rerunning the script fails here, with or without a Bridge clone."""
    rows = re.findall(r"^\| `([a-z_]+)\.([a-z0-9_]+)`", _block(), re.M)
    assert rows, "no table rows in docs/bridge.md's bridge-refusals block"
    for section, field in rows:
        if (section, field) == ("model", "_target_"):       # a provider refused by name
            assert any(name in _block() for name in NOT_GPT_PROVIDERS)
            continue
        if section == "model" and field in MULTIMODAL:      # a multimodal provider's own field: refused when on
            kind = "refused" if field in TRAINING_FIELD else judge_multimodal(field, object(), "transformer_engine")[0]
        elif field in br.TOWER_EXCLUDES:            # refused together with the recipe's vision tower
            assert f"| `{section}.{field}` |" in _block() and br.TOWER_WITH[:40] in _block()
            kind = "refused" if _tower_refuses_recipe_features(field) else "modelled"
        else:
            kind = (classify(section, field) or ("?",))[0]
        assert kind == "refused", f"{section}.{field} is no longer refused: " \
            "rerun python scripts/bridge_refusals.py BRIDGE_GIT_DIR --write"


def _tower_refuses_recipe_features(field: str) -> bool:
    """The estimator still refuses a vision tower together with a recipe feature (estimator/config/rules/
    unsupported.py): the expert-parallel overlap for its own reason, a parallelism field of the table (Megatron-FSDP)
    itself, the others through a stand-in (Megatron-Core's SGD without the distributed optimizer, which the tower's
    states are not planned for)."""
    from estimator import estimate
    from estimator.config.errors import UnsupportedError
    from tests.conftest import make_config
    from tests.memory.test_vision import VIT
    if field in br.TOWER_OWN:
        model, par = {**VIT, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 256}, \
            {"expert_model_parallel_size": 2}
        training = {"world_size": 2, field: True}
    elif field in ("use_megatron_fsdp", "use_torch_fsdp2"):
        model, par, training = VIT, {field: True}, {"world_size": 2}
    else:
        model, par, training = VIT, None, {"optimizer": "sgd", "use_distributed_optimizer": False}
    try:
        estimate(make_config(model, par, training))
    except UnsupportedError as err:
        return "vision tower" in str(err) and (field not in br.TOWER_OWN or field in str(err))
    return False


def test_docs_counts_add_up():
    """The short answer's figures agree with each other: clean + refused = functions read."""
    m = re.search(r"\*\*(\d+) of the (\d+) recipe functions\*\* read set nothing the estimator refuses; (\d+) set",
                  _block())
    assert m
    clean, total, refused = map(int, m.groups())
    assert clean + refused == total


def _git_repo(tmp_path: Path, files: dict[str, str]) -> str:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text), encoding="utf-8")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "recipes"]):
        subprocess.run(["git", "-C", str(tmp_path), *cmd], check=True, env=env, capture_output=True)
    return str(tmp_path)


RECIPES = {
    "src/megatron/bridge/recipes/common.py": """
        from megatron.bridge.training.config import ConfigContainer

        def _pretrain_common() -> ConfigContainer:
            cfg = ConfigContainer()
            cfg.model.use_kitchen = True
            return cfg

        def _precision(kind):
            if kind == "mx":
                cfg = bf16_with_mxfp8_mixed()
            else:
                cfg = bf16_mixed()
                cfg.model_should_not_matter = 1
            return cfg

        def _tune(model):
            model.heterogeneous_block_specs = pick_spec()
    """,
    "src/megatron/bridge/recipes/demo/demo.py": """
        from megatron.bridge.recipes.common import _pretrain_common, _tune
        from megatron.bridge.training.comm_overlap import CommOverlapConfig

        def demo_pretrain_a_config():
            cfg = _pretrain_common()
            cfg.model.use_kitchen = False
            cfg.model.moe_flex_dispatcher_backend = "nccl_ep"
            return cfg

        def demo_pretrain_b_config():
            cfg = _pretrain_common()
            _tune(cfg.model)
            cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)
            return cfg

        def demo_sft_c_config():
            cfg = demo_pretrain_a_config()
            cfg.model.moe_flex_dispatcher_backend = "deepep"
            cfg.model.freeze_language_model = True
            return cfg

        def demo_pretrain_vl_config():
            cfg = _pretrain_common()
            cfg.model.use_kitchen = False
            hf_path = "Qwen/Qwen3-VL-8B-Instruct"
            cfg.model = AutoBridge.from_hf_pretrained(hf_path).to_megatron_provider(load_weights=False)
            cfg.model.freeze_language_model = True
            cfg.model.freeze_vision_model = True
            return cfg

        def demo_pretrain_vl_graphs_config():
            cfg = demo_pretrain_vl_config()
            cfg.model.cuda_graph_impl = "transformer_engine"
            cfg.comm_overlap.tp_comm_overlap = True
            cfg.comm_overlap.overlap_moe_expert_parallel_comm = True
            return cfg

        def _demo_pretrain_private():
            cfg = _pretrain_common()
            return cfg

        def demo_other():
            return None
    """,
}


@pytest.mark.subprocess                 # git and the script run as processes: not inside Pyodide
def test_static_reading_of_a_small_recipe_tree(tmp_path):
    """A hand-made recipe tree, read by hand:

    - ``demo_pretrain_a_config``: ``_pretrain_common`` sets ``use_kitchen = True``, the
      recipe sets it back to False (the default: a later assignment replaces the earlier one, so it does not count),
      and sets ``moe_flex_dispatcher_backend = "nccl_ep"``, a value REFUSED_VALUES refuses (deepep and hybridep
      are modelled): 1 refused setting.
    - ``demo_pretrain_b_config``: ``use_kitchen`` True from ``_pretrain_common`` (refused), and
      ``heterogeneous_block_specs`` (refused) set through ``_tune(cfg.model)`` to a run-time value
      (counts as set): 2 refused settings; ``tp_comm_overlap`` is modelled.
    - ``demo_sft_c_config``: recipe a, then ``moe_flex_dispatcher_backend = "deepep"`` (modelled): 0 refused;
      ``freeze_language_model = True``, a multimodal provider's field (estimator/formats/bridge/multimodal.py) that
      is refused when on: 1 refused setting.
    - ``demo_pretrain_vl_config`` builds its provider from ``Qwen/Qwen3-VL-8B-Instruct`` (a literal id, through a
      variable), which the offline catalog imports with a vision tower: its freeze fields apply, nothing refused.
    - ``demo_pretrain_vl_graphs_config``: the same with ``cuda_graph_impl`` transformer_engine and ``tp_comm_overlap``
      on, which act on the language model alone beside the Qwen3-VL tower (modelled), and
      ``overlap_moe_expert_parallel_comm``, refused with a tower for its own reason (no Bridge vision-language model
      defines build_schedule_plan): 1 refused setting, ``comm_overlap.overlap_moe_expert_parallel_comm``.
    - ``_demo_pretrain_private`` (private) and ``demo_other`` (no kind in its name) are not recipes.

    So 5 recipes read, 1 with nothing refused; ``use_kitchen`` 1 recipe, ``heterogeneous_block_specs`` 1, the dispatcher value 1,
    freeze_language_model 1 (the only refusal of recipe c: its model is no Hugging Face model with a tower),
    overlap_moe_expert_parallel_comm 1.
    """
    result = br.count(_git_repo(tmp_path, RECIPES), "HEAD")
    recs = result["recipes"]
    assert sorted(recs) == ["demo_pretrain_a_config", "demo_pretrain_b_config", "demo_pretrain_vl_config",
                            "demo_pretrain_vl_graphs_config", "demo_sft_c_config"]
    assert recs["demo_pretrain_vl_config"] == []
    assert [w for w, _ in recs["demo_pretrain_vl_graphs_config"]] == ["comm_overlap.overlap_moe_expert_parallel_comm"]
    assert "build_schedule_plan" in recs["demo_pretrain_vl_graphs_config"][0][1]
    assert [w for w, _ in recs["demo_pretrain_a_config"]] == ["model.moe_flex_dispatcher_backend"]
    assert sorted(w for w, _ in recs["demo_pretrain_b_config"]) == [
        "model.heterogeneous_block_specs", "model.use_kitchen"]
    assert [w for w, _ in recs["demo_sft_c_config"]] == ["model.freeze_language_model"]
    assert result["outside"]["demo_sft_c_config"] == []
    block = br.table(result)
    assert "**1 of the 5 recipe functions**" in block
    assert "| `model.freeze_language_model` | 1 | 1 |" in block
    assert "| `model.use_kitchen` | 1 | 0 |" in block
    assert "| `model.moe_flex_dispatcher_backend` | 1 | 1 |" in block


@pytest.mark.subprocess                 # git and the script run as processes: not inside Pyodide
def test_folded_branch_reads_only_the_branch_taken(tmp_path):
    """``_precision("mx")`` folds its condition: only the MXFP8 preset's fields are read, not the else branch."""
    files = dict(RECIPES)
    files["src/megatron/bridge/recipes/demo/demo.py"] = """
        from megatron.bridge.recipes.common import _precision

        def demo_pretrain_mx_config():
            cfg = ConfigContainer()
            cfg.mixed_precision = _precision("mx")
            return cfg
    """
    repo = br.Repo(_git_repo(tmp_path, files), "HEAD")
    (path, name), = br.recipes(repo)
    reader = br.Reader(repo)
    reader.run(path, repo.module(path)["funcs"][name], {})
    assert reader.settings[("mixed_precision", "fp8_recipe")] == "mxfp8"
    assert not any(field == "model_should_not_matter" for _, field in reader.settings)


@pytest.mark.subprocess                 # git and the script run as processes: not inside Pyodide
def test_dataset_provider_and_diffusion_provider(tmp_path):
    """Read by hand:

    - ``demo_sft_data_config`` builds ``Step37Flickr8kSFTDataProvider(repo_id=..., sample_count=...)`` into
      ``cfg.dataset`` (as Bridge's recipes/stepfun/h100/step37.py does): its keywords are dataset fields (the reading
      once put them under ``model.``), and the table of attributes classifies both: nothing refused, nothing
      outside; ``cfg.model.moe_a2a_overlap`` is a plain attribute without effect: not outside either.
    - ``demo_pretrain_flux_config`` builds ``FluxProvider(in_channels=64)``: one refusal, ``model._target_``, and
      the provider's own field is not listed as outside.
    - ``demo_pretrain_wan_config`` builds ``WanModelProvider(crossattn_emb_size=4096)`` and sets
      ``cfg.dataset.F_latents = 1``: read as model_kind wan (estimator/formats/bridge/wan.py), nothing refused,
      nothing outside.
    """
    files = dict(RECIPES)
    files["src/megatron/bridge/recipes/demo/demo.py"] = """
        def demo_sft_data_config():
            cfg = ConfigContainer()
            cfg.dataset = Step37Flickr8kSFTDataProvider(repo_id="intro/flickr8k", sample_count=64)
            cfg.model.moe_a2a_overlap = True
            return cfg

        def demo_pretrain_flux_config():
            model_cfg = FluxProvider(in_channels=64)
            cfg = ConfigContainer(model=model_cfg)
            return cfg

        def demo_pretrain_wan_config():
            model_cfg = WanModelProvider(crossattn_emb_size=4096)
            cfg = ConfigContainer(model=model_cfg)
            cfg.dataset.F_latents = 1
            return cfg
    """
    result = br.count(_git_repo(tmp_path, files), "HEAD")
    assert result["recipes"]["demo_sft_data_config"] == []
    assert result["outside"]["demo_sft_data_config"] == []
    assert [w for w, _ in result["recipes"]["demo_pretrain_flux_config"]] == ["model._target_"]
    assert result["outside"]["demo_pretrain_flux_config"] == []
    assert "FluxProvider" in br.table(result)
    assert result["recipes"]["demo_pretrain_wan_config"] == []
    assert result["outside"]["demo_pretrain_wan_config"] == []


@pytest.mark.subprocess                 # git and the script run as processes: not inside Pyodide
@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-Bridge clone (set BRIDGE_GIT_DIR)")
def test_docs_block_is_what_the_script_writes():
    """Rerun the static reading of Bridge @ 067f987d and compare with docs/bridge.md's block."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bridge_refusals.py"), str(MIRROR), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.subprocess                 # git runs as a process: not inside Pyodide
@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-Bridge clone (set BRIDGE_GIT_DIR)")
def test_the_nemotron_omni_recipes_read_clean():
    """omni28: the five Nemotron Omni recipes (recipes/nemotron_omni/h100/nemotron_omni.py) were refused for
    freeze_sound_encoder / freeze_sound_projection (no sound tower), temporal_patch_dim / separate_video_embedder
    (no video) and the freeze_vision_* fields (no tower for their Hugging Face model). With the sound tower, the
    video frames and the provider's own RADIO tower modelled, the static reading finds nothing refused in them."""
    recs = br.count(MIRROR, "HEAD")["recipes"]
    omni = {name: refused for name, refused in recs.items() if name.startswith("nemotron_omni_")}
    assert sorted(omni) == ["nemotron_omni_cord_v2_long_context_sft_8gpu_h100_bf16_config",
                            "nemotron_omni_cord_v2_peft_4gpu_h100_bf16_config",
                            "nemotron_omni_cord_v2_sft_4gpu_h100_bf16_config",
                            "nemotron_omni_valor32k_peft_4gpu_h100_bf16_config",
                            "nemotron_omni_valor32k_sft_4gpu_h100_bf16_config"]
    assert all(refused == [] for refused in omni.values()), omni
