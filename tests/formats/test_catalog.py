"""The model catalog: every model estimates on a default layout or is refused with a named reason, exact
parameter counts equal the published ones, and Hub ids resolve offline, unknown ones with the closest ids.

The published figures live in the catalog's data files, each with its source (the Hugging Face API's
safetensors total, a KerasHub preset's parameter count, or the owner's README), never taken from this
code's output. An exact figure must equal the estimator's count; a rounded one ("671B", "16B") must be
what the count rounds or truncates to (``published_bounds``: from half a unit of its last digit below to
one unit above), after leaving out what the figure excludes (DeepSeek's "671B" leaves out the MTP module).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import estimator
from estimator.formats import catalog, hf_catalog
from estimator import estimate, from_hf_config
from estimator import web
from estimator.cli.commands import main
from estimator.config.errors import ConfigError, UnsupportedError
from estimator.formats.presets import published_bounds
from tests.conftest import ROOT

IDS = hf_catalog.ids()
ENTRIES = {e.hf_id: e for e in hf_catalog.entries()}
WITH_PUBLISHED = [e.hf_id for e in hf_catalog.entries() if e.published]


def test_the_catalog_has_at_least_50_models_of_the_popular_families():
    assert len(IDS) >= 50
    families = {e.family for e in hf_catalog.entries()}
    for family in ("Llama 2", "Llama 3", "Llama 3.1", "Llama 3.2", "Llama 3.3", "Llama 4", "Mistral", "Mixtral",
                   "Qwen2.5", "Qwen3", "Qwen3-MoE", "Qwen3-Next", "DeepSeek-V2", "DeepSeek-V3", "Kimi-K2",
                   "GLM", "Gemma 2", "Gemma 3", "Phi-3", "gpt-oss", "Nemotron-H", "Nemotron 3", "MiniMax",
                   "OLMo 2"):
        assert family in families, family


@pytest.mark.parametrize("hf_id", IDS)
def test_every_entry_names_its_source_and_keeps_a_config(hf_id):
    e = ENTRIES[hf_id]
    path = hf_catalog.DIRECTORY / (hf_id.replace("/", "--") + ".json")
    assert path.is_file(), path
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", e.source["repo"]) and re.fullmatch(r"[0-9a-f]{40}", e.source["commit"])
    assert e.source["path"] and e.source["copy"] in ("file", "quoted", "python-dict")
    cfg = e.config()
    assert cfg.get("model_type") and cfg.get("architectures"), hf_id
    if e.published:
        assert e.published["source"] and e.published["of"], hf_id
        # the kinds the hf_catalog docstring defines (and the catalog page names: hooks/_tables_views.CATALOG_KINDS)
        assert e.published["kind"] in ("safetensors", "keras-hub", "model-card", "checkpoint"), hf_id
        published_bounds(e.published["total"] if isinstance(e.published["total"], str) else f"{e.published['total']}")


def test_copies_shared_with_the_reference_configs_are_identical(reference):
    """The catalog and shared/reference/hf-configs read several files from the same public copies."""
    pairs = {"meta-llama/Llama-2-7b-hf": "Llama-2-7b-hf", "meta-llama/Llama-3.1-405B": "Llama-3.1-405B",
             "mistralai/Mixtral-8x7B-v0.1": "Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x22B-v0.1": "Mixtral-8x22B-v0.1",
             "Qwen/Qwen2.5-7B": "Qwen2.5-7B", "Qwen/Qwen3-8B": "Qwen3-8B", "Qwen/Qwen3-30B-A3B": "Qwen3-30B-A3B",
             "Qwen/Qwen3-235B-A22B": "Qwen3-235B-A22B", "deepseek-ai/DeepSeek-V3": "DeepSeek-V3",
             "openai/gpt-oss-120b": "gpt-oss-120b"}
    for hf_id, name in pairs.items():
        ref = json.loads((reference / "hf-configs" / f"{name}.json").read_text())
        assert ENTRIES[hf_id].config() == ref, hf_id


@pytest.mark.parametrize("hf_id", IDS)
def test_every_model_estimates_on_the_default_layout_or_is_refused_with_a_named_reason(hf_id):
    model, reason = catalog.status(hf_id)
    cfg = ENTRIES[hf_id].config()
    if model is None:
        # The reason names what cannot be mapped: the model_type, or the config.json keys.
        assert reason and (f"model_type '{cfg['model_type']}'" in reason or "config.json key" in reason), reason
        with pytest.raises(UnsupportedError):
            from_hf_config(hf_id)
        return
    layout = catalog.default_layout(model)
    est = estimate(layout)
    assert est.parallel["world_size"] == catalog.DEFAULT_GPUS and len(est.stages) == 1
    assert est.peak_stage.device_bytes > est.peak_stage.weights_bytes > 0
    assert model == from_hf_config(hf_id) == from_hf_config(cfg)


def test_the_default_layout_shards_whole_heads_and_experts():
    """TP 8 where the heads and query groups allow it; Qwen2.5-1.5B (12 heads, 2 KV heads) gets TP 2;
    Qwen1.5-MoE's 60 experts take EP 4 (60 is not a multiple of 8)."""
    par = lambda hf_id: catalog.default_layout(catalog.status(hf_id)[0])["parallelism"]
    assert par("meta-llama/Llama-3.1-70B")["tensor_model_parallel_size"] == 8
    assert par("Qwen/Qwen2.5-1.5B-Instruct")["tensor_model_parallel_size"] == 2
    assert par("Qwen/Qwen1.5-MoE-A2.7B-Chat")["expert_model_parallel_size"] == 4
    assert par("deepseek-ai/DeepSeek-V3")["expert_model_parallel_size"] == 8


#: Models of the architectures issue 11 added: hybrid Mamba, gpt-oss, Qwen3-Next, Gemma 2/3, Kimi-K2, the Qwen3-MoE
#: repositories' extra keys, Phi-3/4, ERNIE 4.5, Ling 2.0, MiMo.
NEWLY_SUPPORTED = ("nvidia/Nemotron-H-56B-Base-8K", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "openai/gpt-oss-20b",
                   "openai/gpt-oss-120b", "Qwen/Qwen3-Next-80B-A3B-Instruct", "google/gemma-2-2b-it",
                   "google/gemma-2-9b", "google/gemma-2-27b", "google/gemma-3-1b-it", "moonshotai/Kimi-K2-Instruct",
                   "moonshotai/Kimi-K2-Thinking", "Alibaba-NLP/Tongyi-DeepResearch-30B-A3B",
                   "Qwen/Qwen3-Coder-480B-A35B-Instruct", "microsoft/Phi-3-mini-4k-instruct",
                   "microsoft/Phi-3.5-mini-instruct", "microsoft/Phi-4-mini-instruct",
                   "baidu/ERNIE-4.5-21B-A3B-Thinking", "inclusionAI/Ling-flash-2.0", "XiaomiMiMo/MiMo-7B-Base",
                   "meta-llama/Llama-4-Scout-17B-16E-Instruct", "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
                   "deepseek-ai/DeepSeek-V3.2", "zai-org/GLM-5")
#: Still refused: none. (Issue 27 mapped Kimi-K2.5, Magistral, OLMo 2, MiniMax-M2.x and GLM-4.7-Flash:
#: tests/formats/test_catalog_families.py; the sparse-attention indexers of DeepSeek-V3.2 and GLM-5:
#: tests/model/layers/test_dsa.py; Gemma 4 and the heterogeneous Llama-Nemotron: tests/formats/hf/test_gemma4.py,
#: tests/formats/hf/test_nemotron_nas.py; Qwen3.5 with its vision tower: tests/formats/hf/test_qwen35.py. It took out
#: aiconfigurator's trimmed GLM-4.7-Flash copy, which the import refuses for its missing num_nextn_predict_layers:
#: only complete config.json files are catalogued.)
STILL_REFUSED = ()
#: A trimmed config.json (architecture keys only), kept as a test input: the import refuses it naming the key.
TRIMMED = ROOT / "tests" / "formats" / "data" / "zai-org--GLM-4.7-Flash_config.json"


def test_most_models_estimate_and_the_refusals_are_the_architectures_not_yet_modelled():
    rows = catalog.listing()
    supported = {r["hf_id"] for r in rows if r["supported"]}
    assert len(supported) >= 55
    assert set(NEWLY_SUPPORTED) <= supported
    assert not set(STILL_REFUSED) & supported


def test_every_catalog_model_is_supported():
    """Issue 27, item 3: the catalog holds complete, published config.json files the estimator counts, of at least
    30 families; none is listed as not supported."""
    rows = catalog.listing()
    assert [r["hf_id"] for r in rows if not r["supported"]] == []
    assert len({r["family"] for r in rows}) >= 30


@pytest.mark.parametrize("hf_id", WITH_PUBLISHED)
def test_parameter_counts_match_the_published_figure(hf_id):
    row = catalog.describe(hf_id)
    if not row["supported"]:      # compared once the architecture is modelled; refused until then
        assert row["reason"] and row["parameters"] is None and row["published"]["matches"] is None
        return
    pub = ENTRIES[hf_id].published
    total = row["parameters"]["total"]
    if "mtp" in (pub.get("excludes") or []):
        total -= row["parameters"]["mtp"]
    if "embeddings" in (pub.get("excludes") or []):      # word embedding and output layer, by their shapes
        cfg = ENTRIES[hf_id].config()
        total -= cfg["vocab_size"] * cfg["hidden_size"] * (1 if cfg.get("tie_word_embeddings") else 2)
    if pub.get("mtp_layers"):      # the figure counts MTP layers config.json leaves out (tested by hand below)
        total = row["published"]["compared"]
    total += pub.get("vision_parameters") or 0     # a vision tower counted by hand (test_catalog_families.py)
    if isinstance(pub["total"], int):
        assert total == pub["total"], (hf_id, total, pub)
    else:
        lo, hi = published_bounds(pub["total"])     # rounded: the count must round or truncate to it
        assert lo <= total <= hi, (hf_id, total, pub["total"])
    assert row["published"]["matches"] is True


def test_most_published_figures_are_exact():
    exact = [h for h in WITH_PUBLISHED if isinstance(ENTRIES[h].published["total"], int)
             and catalog.describe(h)["supported"]]
    assert len(exact) >= 25


def test_deepseek_v3_published_total_leaves_out_the_mtp_layer():
    """README: 671B main model; the estimator's total adds Megatron's MTP layer, 11,610,068,224 here."""
    row = catalog.describe("deepseek-ai/DeepSeek-V3")
    assert row["parameters"]["total"] - row["parameters"]["mtp"] == 671_026_419_200
    assert row["published"]["compared"] == 671_026_419_200 and row["published"]["excludes"] == ["mtp"]


def test_qwen3_next_published_total_includes_the_checkpoints_mtp_layer():
    """Hugging Face API safetensors total 81,324,862,720 (catalog source). By hand, h 2048, 48 layers:
    gated attention (every 4th layer): q+gate 2048*16*256*2 + k,v 2048*2*2*256 + o 4096*2048 + q/k norms 2*256 +
    input norm 2048 = 27,265,536; gated delta net: in_proj 2048*(2*2048 + 2*4096 + 2*32) + conv (2*2048+4096)*4 +
    dt_bias, A_log 2*32 + out norm 128 + out_proj 4096*2048 + input norm 2048 = 33,720,512; MoE: router
    512*2048 + 512 experts 3*2048*512 + shared 3*2048*512 + shared gate 2048 + norm 2048 = 1,614,811,136.
    12*27,265,536 + 36*33,720,512 + 48*1,614,811,136 + embedding and head 2*151,936*2048 + final norm 2048
    = 79,674,391,296. The checkpoint's mtp.* tensors add one MTP layer: fc 2*2048*2048 + two norms 2*2048 +
    an attention + MoE layer 27,265,536 + 1,614,811,136 + final norm 2048 = 1,650,471,424."""
    row = catalog.describe("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert row["parameters"]["total"] == 79_674_391_296
    assert row["published"]["compared"] == 79_674_391_296 + 1_650_471_424 == 81_324_862_720
    assert row["published"]["matches"] is True and row["published"]["mtp_layers"] == 1


def test_gpt_oss_20b_by_hand():
    """KerasHub gpt_oss_20b_en "params" 20,914,757,184. h 2880, 24 layers, 64 heads of 64, 8 KV heads, 32 experts
    top-4 of width 2880, vocabulary 201,088 untied. Attention: qkv 2880*(64+16)*64 + bias 5120 + o 64*64*2880 +
    bias 2880 + sinks 64 + norm 2880 = 26,553,024. MoE: router 32*2880 + bias 32 + experts 32*(2880*5760 + 5760 +
    2880*2880 + 2880) + norm 2880 = 796,633,952. 24*(26,553,024 + 796,633,952) + 2*201,088*2880 + 2880."""
    row = catalog.describe("openai/gpt-oss-20b")
    assert row["parameters"]["total"] == 24 * (26_553_024 + 796_633_952) + 2 * 201_088 * 2880 + 2880 \
        == 20_914_757_184


def test_hybrid_nemotron_counts_by_hand():
    """Nemotron-H-56B: h 8192, pattern of 54 M, 54 -, 10 *. Mamba-2 (256 heads of 64, 8 groups, state 256):
    in_proj 8192*(2*16384 + 2*8*256 + 256) + conv (16384 + 4096)*4 + bias 20480 + dt_bias, A_log, D 3*256 + gated
    norm 16384 + out_proj 16384*8192 + input norm 8192 = 438,432,512; MLP (squared ReLU) 2*8192*32768 + norm 8192;
    attention 8192*(64 + 16)*128 + 64*128*8192 + norm 8192; vocabulary 131,072 untied; final norm.
    Nemotron 3 Nano: h 2688, 23 M (64 heads of 64, 8 groups, state 128), 23 E (128 experts of 1856, shared 3712,
    router with expert bias), 6 * (32 heads, 2 KV heads of 128)."""
    h = 8192
    mamba = h * (2 * 16384 + 2 * 8 * 256 + 256) + 20480 * 4 + 20480 + 3 * 256 + 16384 + 16384 * h + h
    assert mamba == 438_432_512
    total = 54 * mamba + 54 * (2 * h * 32768 + h) + 10 * (h * 80 * 128 + 64 * 128 * h + h) + 2 * 131_072 * h + h
    assert catalog.describe("nvidia/Nemotron-H-56B-Base-8K")["parameters"]["total"] == total == 56_324_350_464
    h = 2688
    mamba = h * (2 * 4096 + 2 * 8 * 128 + 64) + 6144 * 4 + 6144 + 3 * 64 + 4096 + 4096 * h + h
    moe = 128 * 2 * h * 1856 + 2 * h * 3712 + 128 * h + 128 + h
    attention = h * (32 + 4) * 128 + 32 * 128 * h + h
    nano = catalog.describe("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")["parameters"]
    assert nano["total"] == 23 * mamba + 23 * moe + 6 * attention + 2 * 131_072 * h + h == 31_577_940_288
    # "3.2B active (3.6B including embeddings)": 6 of 128 experts per token
    assert round(nano["active"] / 1e9, 1) == 3.6 and round((nano["active"] - 131_072 * h) / 1e9, 1) == 3.2


def test_llama4_text_models_by_hand():
    """The language model of text_config (the vision tower is not counted). h 5120, 48 layers, 40 heads and 8 KV
    heads of 128 (62,914,560 + 2 norms 10,240 per layer), untied 202,048-token vocabulary. Scout: every layer MoE,
    16 experts of 8192 (3*5120*8192 = 125,829,120 each) + one shared expert of 8192 + router 16*5120.
    Maverick: MoE in layers 1, 3, ... (interleave_moe_layer_step 2) with 128 experts, dense layers of
    intermediate_size_mlp 16384. Both are "17B" active (their names): one routed and the shared expert."""
    attention, expert, emb = 62_914_560 + 10_240, 125_829_120, 2 * 202_048 * 5120 + 5120
    scout = catalog.describe("meta-llama/Llama-4-Scout-17B-16E-Instruct")["parameters"]
    assert scout["total"] == 48 * (attention + 17 * expert + 16 * 5120) + emb == 107_769_861_120
    maverick = catalog.describe("meta-llama/Llama-4-Maverick-17B-128E-Instruct")["parameters"]
    assert maverick["total"] == 48 * attention + 24 * 3 * 5120 * 16384 + 24 * (129 * expert + 128 * 5120) + emb \
        == 400_711_848_960
    for row in (scout, maverick):
        assert 17e9 <= row["active"] < 18e9


def test_hub_ids_resolve_case_insensitively_and_unknown_ones_name_the_closest():
    assert from_hf_config("META-LLAMA/llama-3.1-70b") == from_hf_config("meta-llama/Llama-3.1-70B")
    assert estimator.from_hf_config("meta-llama/Llama-3.1-70B")["num_layers"] == 80
    with pytest.raises(ConfigError) as exc:
        from_hf_config("meta-llama/Llama-3-70B")
    text = str(exc.value)
    assert "not in the model catalog" in text and "never downloads" in text
    assert "meta-llama/Meta-Llama-3-70B" in text and "meta-llama/Llama-3.1-70B" in text
    assert hf_catalog.closest("qwen/qwen3-9b")[:2] == ["Qwen/Qwen3-4B", "Qwen/Qwen3-8B"]


def test_a_local_directory_named_like_a_hub_id_wins(tmp_path, monkeypatch):
    d = tmp_path / "meta-llama" / "Llama-3.1-70B"
    d.mkdir(parents=True)
    cfg = ENTRIES["meta-llama/Llama-3.1-8B"].config()
    (d / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    assert from_hf_config("meta-llama/Llama-3.1-70B")["num_layers"] == 32


def cli(*argv):
    return subprocess.run([sys.executable, "-m", "estimator", *argv], cwd=ROOT, capture_output=True, text=True)


def test_cli_takes_a_hub_id_where_it_takes_a_config_path(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ENTRIES["Qwen/Qwen3-30B-A3B"].config()))
    args = ["--tp", "4", "--ep", "8", "--sequence-parallel", "--num-gpus", "32", "--seq-length", "4096", "--json"]
    assert main(["from-hf", "Qwen/Qwen3-30B-A3B", *args]) == 0
    by_id = json.loads(capsys.readouterr().out)
    assert main(["estimate", "--hf", str(path), *args]) == 0
    by_path = json.loads(capsys.readouterr().out)
    assert by_id["peak"] == by_path["peak"] and by_id["parameters"] == by_path["parameters"]


@pytest.mark.subprocess
def test_cli_unknown_id_and_refused_model_exit_2_without_traceback():
    p = cli("from-hf", "meta-llama/Llama-3-70B", "--num-gpus", "8")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "closest: " in p.stderr and "meta-llama/Meta-Llama-3-70B" in p.stderr
    p = cli("estimate", "--hf", str(TRIMMED), "--num-gpus", "8")      # a trimmed copy, refused
    assert p.returncode == 2 and "Traceback" not in p.stderr and "num_nextn_predict_layers" in p.stderr


def test_cli_catalog_lists_every_model(capsys):
    assert main(["catalog", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["hf_id"] for r in rows if r["hf_id"] not in IDS] == [] and len(rows) == len(IDS)
    assert main(["catalog", "--family", "gpt-oss"]) == 0
    out = capsys.readouterr().out
    assert "openai/gpt-oss-20b" in out and "20,914,757,184" in out and "Qwen/Qwen3-8B" not in out
    assert main(["catalog", "--family", "GLM"]) == 0
    out = capsys.readouterr().out
    assert "zai-org/GLM-4.5-Air" in out and "not supported yet" not in out      # every catalog model is counted


def test_web_lists_the_catalog_and_imports_by_id():
    res = json.loads(web.handle(json.dumps({"op": "catalog"})))
    assert len(res["models"]) == len(IDS) and {"hf_id", "family", "supported", "reason"} <= set(res["models"][0])
    state = {"preset": "llama-3-8b", "values": {}, "gpu": None}
    res = json.loads(web.handle(json.dumps({"op": "import", "kind": "hf", "text": "Qwen/Qwen3-8B", "state": state})))
    assert res["state"]["values"]["model.num_layers"] == 36 and res["state"]["values"]["training.world_size"] == 8
    res = json.loads(web.handle(json.dumps({"op": "import", "kind": "hf", "text": "Qwen/Qwen3-9B", "state": state})))
    assert res["errors"][0]["field"] == "import.hf" and "Qwen/Qwen3-8B" in res["errors"][0]["message"]
