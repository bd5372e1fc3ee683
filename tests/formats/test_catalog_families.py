"""Issue 27: the families whose layers the estimator has and whose model_type was refused (OLMo 2, MiniMax-M2,
GLM-4.5 / 4.7-Flash, Kimi K2.5, Mistral 3 / Magistral), the two layer variants they need (q/k norms over all heads,
OLMo 2's norms after attention and MLP only), and Hub ids that differ from a catalogued one only by -Instruct,
-Base, -it or -Chat.

Parameter counts are by hand in each docstring from the Hugging Face modules' tensor shapes; published figures
are the catalog's (each with its source in the data file).
"""

from __future__ import annotations

import json

import pytest

from estimator import ConfigError, UnsupportedError, count_parameters_of, from_hf_config, load_config
from estimator.formats import catalog, hf_catalog
from estimator.memory.activations import layer_activations
from estimator.model.layers import LayerKind
from estimator.model.resolve import resolve
from tests.conftest import ROOT, make_config

#: ai-dynamo/aiconfigurator @ 19d098add98ab8ba2366c94795e9e886cdcc915c :
#: src/aiconfigurator/model_configs/zai-org--GLM-4.7-Flash_config.json, byte for byte: a trimmed copy (architecture
#: keys only), kept as a test input since issue 27 left it out of the catalog.
TRIMMED_GLM_4_7_FLASH = ROOT / "tests" / "formats" / "data" / "zai-org--GLM-4.7-Flash_config.json"


def _trimmed_glm_4_7_flash() -> dict:
    return json.loads(TRIMMED_GLM_4_7_FLASH.read_text(encoding="utf-8"))


BASE = dict(num_layers=2, hidden_size=64, num_attention_heads=4, kv_channels=16, ffn_hidden_size=128, vocab_size=256)


def _acts(model: dict, kind: LayerKind, par=None, **training):
    r = resolve(load_config(make_config(model, par, training={"seq_length": 256, **training})))
    return layer_activations(r, kind)


# --- the layer variants --------------------------------------------------------------------------------------

def test_full_width_qk_norms_count_every_head_and_split_over_tp():
    """Megatron-Bridge minimax_m2_provider.py FullDimQNorm / FullDimKNorm: one RMSNorm weight per element of all
    query heads (4 x 16 = 64) and all key heads (2 x 16 = 32) instead of 2 x 16 per-head weights; sharded with
    the heads (TP 2: 32 + 16 per rank). Two layers: (96 - 32) x 2 = 128 more parameters."""
    gqa = dict(BASE, num_query_groups=2, qk_layernorm=True)
    per_head = count_parameters_of(make_config(gqa))
    full = count_parameters_of(make_config(dict(gqa, qk_layernorm_full_dim=True)))
    assert full.total - per_head.total == 2 * (64 + 32 - 2 * 16)


def test_full_width_qk_norm_activations_by_hand():
    """The eager _FullDimRMSNorm keeps an fp32 copy of q (k) (4 bytes), the normalised bf16 tensor (2), the output
    (2, as the per-head norm's is counted) per element, and one fp32 rsqrt per token and norm. T 256 tokens, 4
    query + 2 key heads of 16: (4 + 2 + 2) x 256 x 6 x 16 + 8 x 256 = 198,656 bytes. The per-head norms keep
    2 x 2 x 256 x 6 x 16 + 4 x 256 x 6 = 104,448."""
    gqa = dict(BASE, num_query_groups=2, qk_layernorm=True)
    kind = LayerKind("attention", "dense")
    plain = _acts(dict(BASE, num_query_groups=2), kind).attention
    assert _acts(gqa, kind).attention - plain == 2 * 2 * 256 * 6 * 16 + 4 * 256 * 6 == 104_448
    assert _acts(dict(gqa, qk_layernorm_full_dim=True), kind).attention - plain == 8 * 256 * 6 * 16 + 8 * 256


def test_olmo2_norm_placement_parameters_and_activations():
    """pre_layernorm false + post_layernorm: no norm before attention or fc1 (2 x 64 weights fewer per layer than
    Gemma's four norms). Activations, T 256, h 64, bf16: the fused norm + QKV linear kept the norm's input and
    output (2 x 2 x 256 x 64); without the norm the QKV linear keeps the layer input only (2 x 256 x 64): 32,768
    bytes less in attention and the same in the MLP; recomputing layernorm drops nothing more there."""
    gemma = dict(BASE, post_layernorm=True)
    olmo = dict(gemma, pre_layernorm=False)
    assert count_parameters_of(make_config(gemma)).total - count_parameters_of(make_config(olmo)).total == 2 * 2 * 64
    kind = LayerKind("attention", "dense")
    a, b = _acts(gemma, kind), _acts(olmo, kind)
    assert (a.attention - b.attention, a.mlp - b.mlp) == (2 * 256 * 64,) * 2
    rec = dict(recompute_granularity="selective", recompute_modules=["layernorm"])
    assert _acts(olmo, kind, **rec).attention == b.attention and _acts(olmo, kind, **rec).mlp == b.mlp


@pytest.mark.parametrize("model, field", [
    (dict(BASE, pre_layernorm=False), "model.pre_layernorm"),
    (dict(BASE, qk_layernorm_full_dim=True), "model.qk_layernorm_full_dim"),
    (dict(BASE, qk_layernorm=True, qk_layernorm_full_dim=True, normalization="LayerNorm"),
     "model.qk_layernorm_full_dim"),
])
def test_the_variants_refuse_what_is_not_modelled(model, field):
    with pytest.raises(ConfigError) as exc:
        load_config(make_config(model))
    assert field in str(exc.value)


# --- the families ----------------------------------------------------------------------------------------------

def test_olmo2_counts_by_hand():
    """Olmo2DecoderLayer: q, k, v, o (no bias), q_norm a dh, k_norm g dh, post_attention_layernorm h, SwiGLU MLP
    3 h f, post_feedforward_layernorm h; untied embedding and head of 100,352 tokens; final norm.
    7B: h 4096, 32 layers, 32 heads (MHA): 4 x 4096^2 + 2 x 4096 + 4096 + 3 x 4096 x 11008 + 4096 = 202,391,552
    per layer; 32 x that + 2 x 100,352 x 4096 + 4096 = 7,298,617,344.
    13B: h 5120, 40 layers, 40 heads: 4 x 5120^2 + 3 x 5120 + 3 x 5120 x 13824 + 5120 = 317,214,720 per layer;
    40 x that + 2 x 100,352 x 5120 + 5120 = 13,716,198,400.
    32B: h 5120, 64 layers, 40 heads and 8 KV heads of 128: 2 x 5120^2 + 2 x 5120 x 1024 + 5120 + 1024 + 5120 +
    3 x 5120 x 27648 + 5120 = 487,604,224 per layer; 64 x that + 1,027,604,480 + 5120 = 32,234,279,936.
    The model cards name them 7B, 13B and 32B."""
    counts = {h: catalog.describe(h)["parameters"]["total"] for h in
              ("allenai/OLMo-2-1124-7B", "allenai/OLMo-2-1124-13B", "allenai/OLMo-2-0325-32B")}
    assert 4 * 4096 ** 2 + 3 * 4096 + 3 * 4096 * 11008 + 4096 == 202_391_552
    assert 32 * 202_391_552 + 2 * 100_352 * 4096 + 4096 == 7_298_617_344
    assert counts == {"allenai/OLMo-2-1124-7B": 7_298_617_344, "allenai/OLMo-2-1124-13B": 13_716_198_400,
                      "allenai/OLMo-2-0325-32B": 32_234_279_936}
    assert 40 * 317_214_720 + 2 * 100_352 * 5120 + 5120 == 13_716_198_400
    assert 64 * 487_604_224 + 2 * 100_352 * 5120 + 5120 == 32_234_279_936
    m = from_hf_config("allenai/OLMo-2-1124-7B")
    assert (m["pre_layernorm"], m["post_layernorm"], m["qk_layernorm"], m["qk_layernorm_full_dim"]) == \
        (False, True, True, True)


def test_magistral_text_model_plus_the_vision_tower_is_the_published_total():
    """Hugging Face API safetensors total 24,011,361,280 (catalog source) counts Mistral3ForConditionalGeneration
    whole. The language model (text_config, a Mistral: h 5120, 40 layers, 32 heads and 8 KV heads of 128, MLP
    32768, vocabulary 131,072 untied): 40 x (5120 x 6144 + 4096 x 5120 + 3 x 5120 x 32768 + 2 x 5120) +
    2 x 131,072 x 5120 + 5120 = 23,572,403,200. The Pixtral vision encoder (h 1024, 24 layers, MLP 4096, patch 14,
    3 channels): patch conv 3 x 14 x 14 x 1024 = 602,112, ln_pre 1024, 24 x (4 x 1024^2 + 3 x 1024 x 4096 +
    2 x 1024) = 402,702,336; the projector: norm 1024, patch merger 4096 x 1024, linear_1 1024 x 5120, linear_2
    5120 x 5120 = 35,652,608. Vision: 438,958,080, which the import counts (the pixtral tower,
    tests/memory/test_vision_pixtral.py)."""
    row = catalog.describe("mistralai/Magistral-Small-2509")
    text = 40 * (5120 * 6144 + 4096 * 5120 + 3 * 5120 * 32768 + 2 * 5120) + 2 * 131_072 * 5120 + 5120
    vision = 602_112 + 1024 + 24 * (4 * 1024 ** 2 + 3 * 1024 * 4096 + 2 * 1024) + 1024 + 4096 * 1024 \
        + 1024 * 5120 + 5120 * 5120
    assert text == 23_572_403_200 and vision == 438_958_080
    assert row["parameters"]["total"] == text + vision == 24_011_361_280
    assert row["published"]["compared"] == 24_011_361_280 and row["published"]["matches"] is True


def test_minimax_m2_by_hand():
    """MiniMaxM2 (Megatron-Bridge minimax_m2_bridge.py, MTP not mapped): h 3072, 62 layers, 48 heads and 8 KV heads
    of 128, q/k norms over all heads (6144 + 1024), 256 experts of 1536 (3 x 3072 x 1536 each), router 256 x 3072
    with the expert bias 256, two norms; untied vocabulary of 200,064. Per layer: 3072 x 8192 + 6144 x 3072 +
    7168 + 256 x 14,155,776 + 786,432 + 256 + 2 x 3072 = 3,668,718,848; total 62 x that + 2 x 200,064 x 3072 +
    3072 = 228,689,764,864."""
    per = 3072 * 8192 + 6144 * 3072 + 7168 + 256 * 3 * 3072 * 1536 + 256 * 3072 + 256 + 2 * 3072
    assert per == 3_668_718_848
    for hf_id in ("MiniMaxAI/MiniMax-M2.5", "MiniMaxAI/MiniMax-M2.7"):
        assert catalog.describe(hf_id)["parameters"]["total"] == 62 * per + 2 * 200_064 * 3072 + 3072 \
            == 228_689_764_864
    m = from_hf_config("MiniMaxAI/MiniMax-M2.5")
    assert m["qk_layernorm_full_dim"] and m["moe_router_score_function"] == "sigmoid"
    assert m["moe_router_enable_expert_bias"] and "mtp_num_layers" not in m


def test_minimax_refuses_lightning_attention_layers():
    cfg = hf_catalog.get("MiniMaxAI/MiniMax-M2.7").config()
    cfg["attn_type_list"][0] = 0
    with pytest.raises(UnsupportedError, match="attn_type_list"):
        from_hf_config(cfg)


def test_kimi_k25_is_kimi_k2s_language_model():
    """Kimi K2.5's text_config is Kimi-K2's architecture (Megatron-Bridge kimi_vl/kimi_k25_vl_bridge.py); the
    language model counts exactly as Kimi-K2-Instruct's, and the estimate adds the MoonViT tower and its projector
    (471,143,920, by hand in tests/formats/hf/test_kimi_k25_vision.py)."""
    k25, k2 = from_hf_config("moonshotai/Kimi-K2.5"), from_hf_config("moonshotai/Kimi-K2-Instruct")
    assert (k25.pop("max_position_embeddings"), k2.pop("max_position_embeddings")) == (262_144, 131_072)
    assert (k25.pop("layernorm_epsilon"), k2.pop("layernorm_epsilon")) == (1e-5, 1e-6)
    assert {k: v for k, v in k25.items() if not k.startswith("vision_")} == k2
    assert catalog.describe("moonshotai/Kimi-K2.5")["parameters"]["total"] == \
        catalog.describe("moonshotai/Kimi-K2-Instruct")["parameters"]["total"] + 471_143_920


def test_glm_4_7_flash_by_hand():
    """Glm4MoeLite (Megatron-Bridge glm47_flash_bridge.py): h 2048, 47 layers, MLA with 20 heads, q_lora 768,
    kv_lora 512, qk 192 + rope 64, v 256. Attention: q down 2048 x 768 + norm 768 + q up 768 x 20 x 256 +
    kv down 2048 x (512 + 64) + norm 512 + kv up 512 x 20 x (192 + 256) + o 20 x 256 x 2048 + input norm 2048
    = 21,761,280. Layer 0 dense MLP 3 x 2048 x 10240 + norm; 46 MoE layers: 64 experts + 1 shared of 1536
    (3 x 2048 x 1536 each), router 64 x 2048 + expert bias 64, norm. Untied vocabulary 154,880."""
    attn = 2048 * 768 + 768 + 768 * 20 * 256 + 2048 * 576 + 512 + 512 * 20 * 448 + 20 * 256 * 2048 + 2048
    assert attn == 21_761_280
    moe = 65 * 3 * 2048 * 1536 + 64 * 2048 + 64 + 2048
    total = 47 * attn + 3 * 2048 * 10240 + 2048 + 46 * moe + 2 * 154_880 * 2048 + 2048
    cfg = {**_trimmed_glm_4_7_flash(), "num_nextn_predict_layers": 0}
    c = count_parameters_of(catalog.default_layout(from_hf_config(cfg), gpus=1))
    assert c.total - c.vocab_padding == total
    # One MTP layer (Megatron-Bridge's GLM-4.7-Flash test config states num_nextn_predict_layers 1) adds
    # Megatron-Core's MTP block: enorm, hnorm, eh_proj 2h x h, an MLA + MoE layer and its final norm.
    m = from_hf_config({**cfg, "num_nextn_predict_layers": 1})
    assert m["mtp_num_layers"] == 1
    c1 = count_parameters_of(catalog.default_layout(m, gpus=1))
    assert c1.total - c.total == 2 * 2048 + 2 * 2048 * 2048 + attn + moe + 2048


def test_glm_4_5_air_by_hand():
    """Glm4Moe (Megatron-Bridge glm45_bridge.py): h 4096, 46 layers, 96 heads and 8 KV heads of 128 with q/k/v
    biases, no q/k norm. Attention: 4096 x (96 + 16) x 128 + bias 14,336 + o 96 x 128 x 4096 + input norm 4096
    = 109,070,336. Layer 0: dense MLP 3 x 4096 x 10944 + norm. 45 MoE layers: 128 experts and one shared expert of
    1408 (3 x 4096 x 1408 = 17,301,504 each), router 128 x 4096 + expert bias 128, norm. Untied vocabulary
    151,552; final norm. One MTP layer: enorm, hnorm, eh_proj 2 x 4096 x 4096, an attention + MoE layer, final
    norm. README: "106 billion total parameters" (the MTP layer left out)."""
    attn = 4096 * 112 * 128 + 112 * 128 + 96 * 128 * 4096 + 4096
    assert attn == 109_070_336
    moe = 129 * 17_301_504 + 128 * 4096 + 128 + 4096
    main = 46 * attn + 3 * 4096 * 10944 + 4096 + 45 * moe + 2 * 151_552 * 4096 + 4096
    mtp = 2 * 4096 + 2 * 4096 * 4096 + attn + moe + 4096
    row = catalog.describe("zai-org/GLM-4.5-Air")
    assert row["parameters"]["total"] == main + mtp == 109_227_310_848
    assert row["parameters"]["mtp"] == mtp and row["published"]["compared"] == main == 106_852_251_264
    assert row["published"]["matches"] is True
    m = from_hf_config("zai-org/GLM-4.5-Air")
    assert m["add_qkv_bias"] and "qk_layernorm" not in m and m["moe_router_score_function"] == "sigmoid"


def test_a_trimmed_glm_copy_is_refused_naming_the_key():
    """aiconfigurator's GLM-4.7-Flash copy (architecture keys only; TRIMMED_GLM_4_7_FLASH) has no
    num_nextn_predict_layers; Hugging Face's default (no MTP layer) would count the checkpoint short, so the import
    names the key. Issue 27 took that copy out of the catalog: only complete config.json files are catalogued."""
    with pytest.raises(UnsupportedError, match="num_nextn_predict_layers is missing"):
        from_hf_config(_trimmed_glm_4_7_flash())
    assert "zai-org/GLM-4.7-Flash" not in hf_catalog.ids()


# --- the catalog's added dense families (issue 27, item 3) ----------------------------------------------------

def test_phi3_medium_by_hand():
    """Phi-3-medium (4k and 128k: the same shapes; the 128k file's LongRoPE factors have no weights): h 5120, 40
    layers, 40 heads and 10 KV heads of 128, f 17920 (SwiGLU), 32,064 tokens untied. Per layer: fused qkv
    5120 x (40 + 2 x 10) x 128 = 39,321,600, o 5120^2 = 26,214,400, MLP 3 x 5120 x 17920 = 275,251,200, two norms
    10,240: 340,797,440. Total 40 x 340,797,440 + 2 x 32,064 x 5120 + 5120 = 13,960,238,080 (the model card's
    "14B")."""
    layer = 5120 * 60 * 128 + 5120 ** 2 + 3 * 5120 * 17920 + 2 * 5120
    assert layer == 340_797_440
    want = 40 * layer + 2 * 32_064 * 5120 + 5120
    assert want == 13_960_238_080
    for hf_id in ("microsoft/Phi-3-medium-4k-instruct", "microsoft/Phi-3-medium-128k-instruct"):
        assert catalog.describe(hf_id)["parameters"]["total"] == want, hf_id


def test_smollm_mistral_nemo_and_yi_by_hand():
    """Llama-style layers: q h x (a dh), k and v h x (g dh) each, o (a dh) x h, SwiGLU 3 h f, two RMSNorms; then the
    embedding (and an untied head) and the final norm.
    SmolLM-135M-Instruct: h 576, 30 layers, 9 heads and 3 KV heads of 64, f 1536, 49,152 tokens tied:
    2 x 576^2 + 2 x 576 x 192 + 3 x 576 x 1536 + 1152 = 3,540,096 per layer; 30 x that + 49,152 x 576 + 576.
    Mistral-Nemo-Instruct-2407: h 5120, 40 layers, 32 heads and 8 KV heads of 128 (head_dim 128, so q is 4096
    wide), f 14336, 131,072 tokens untied: 2 x 5120 x 4096 + 2 x 5120 x 1024 + 3 x 5120 x 14336 + 10,240 =
    272,640,000 per layer; 40 x that + 2 x 131,072 x 5120 + 5120.
    Yi-34B: h 7168, 60 layers, 56 heads and 8 KV heads of 128, f 20480, 64,000 tokens untied: 2 x 7168^2 +
    2 x 7168 x 1024 + 3 x 7168 x 20480 + 14,336 = 557,856,768 per layer; 60 x that + 2 x 64,000 x 7168 + 7168 =
    34,388,917,248, which is also the Hub's safetensors total of dphn/dolphin-2.9.1-yi-1.5-34b (Yi-1.5-34B's
    shapes; catalog source)."""
    smol = 2 * 576 ** 2 + 2 * 576 * 192 + 3 * 576 * 1536 + 1152
    nemo = 2 * 5120 * 4096 + 2 * 5120 * 1024 + 3 * 5120 * 14336 + 10_240
    yi = 2 * 7168 ** 2 + 2 * 7168 * 1024 + 3 * 7168 * 20480 + 14_336
    assert (smol, nemo, yi) == (3_540_096, 272_640_000, 557_856_768)
    total = lambda hf_id: catalog.describe(hf_id)["parameters"]["total"]
    assert total("HuggingFaceTB/SmolLM-135M-Instruct") == 30 * smol + 49_152 * 576 + 576 == 134_515_008
    assert total("mistralai/Mistral-Nemo-Instruct-2407") == 40 * nemo + 2 * 131_072 * 5120 + 5120 == 12_247_782_400
    assert total("01-ai/Yi-34B") == 60 * yi + 2 * 64_000 * 7168 + 7168 == 34_388_917_248
    assert total("dphn/dolphin-2.9.1-yi-1.5-34b") == 34_388_917_248 == \
        catalog.describe("dphn/dolphin-2.9.1-yi-1.5-34b")["published"]["compared"]


def test_transformers_bookkeeping_keys_change_nothing():
    """Red Hat's FP8 Llama-4-Scout config.json carries _attn_implementation_autoset (transformers records that it
    picked the attention kernel; no tensor) and a quantization_config: the model section is Meta's own."""
    assert "_attn_implementation_autoset" in hf_catalog.get("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic") \
        .config()["text_config"]
    assert from_hf_config("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic") == \
        from_hf_config("meta-llama/Llama-4-Scout-17B-16E-Instruct")


def test_nemotron_layers_block_type_is_the_hybrid_pattern():
    """transformers 5's NemotronHConfig states the layers as layers_block_type (mamba M, attention *, moe E, mlp -;
    num_hidden_layers is its length) and the MTP block as mtp_layers_block_type. Nemotron 3.5 Lightning's
    config.json writes them so; its 52 layers are Nemotron 3 Nano's pattern, so the model without its MTP block
    (attention + MoE, counted as Megatron-Core builds it) counts exactly Nano's 31,577,940,288
    (test_catalog.py::test_hybrid_nemotron_counts_by_hand)."""
    light = hf_catalog.get("nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4").config()
    nano = hf_catalog.get("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").config()
    m = from_hf_config(light)
    assert m["hybrid_layer_pattern"] == nano["hybrid_override_pattern"] + "/*E" and m["num_layers"] == 52
    row = catalog.describe("nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4")["parameters"]
    assert row["total"] - row["mtp"] == 31_577_940_288
    ultra = from_hf_config("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16")
    assert ultra["num_layers"] == len(hf_catalog.get("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16")
                                      .config()["layers_block_type"])


@pytest.mark.parametrize("change, key", [
    ({"layers_block_type": ["mamba", "conv"]}, "config.json:layers_block_type"),
    ({"layers_block_type": "MEME"}, "config.json:layers_block_type"),
    ({"num_hidden_layers": 51}, "config.json:num_hidden_layers"),
    ({"hybrid_override_pattern": "ME"}, "config.json:hybrid_override_pattern"),
])
def test_a_wrong_layers_block_type_is_refused_naming_the_key(change, key):
    cfg = {**hf_catalog.get("nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4").config(), **change}
    with pytest.raises(ConfigError) as exc:
        from_hf_config(cfg)
    assert key in str(exc.value)


def test_glm5_per_layer_lists_that_agree_are_read():
    """NVIDIA's GLM-5.1 NVFP4 config.json adds transformers' per-layer lists: mlp_layer_types (3 dense, 75 sparse:
    what first_k_dense_replace 3 says) and indexer_types (78 x full: every layer its own indexer). The model section
    is zai-org/GLM-5.1's. A list that disagrees with index_topk_freq (1 here: no shared layer) or with
    first_k_dense_replace is refused (GLM-5.2's shared layers: tests/model/layers/test_dsa.py)."""
    cfg = hf_catalog.get("nvidia/GLM-5.1-NVFP4").config()
    assert cfg["mlp_layer_types"] == ["dense"] * 3 + ["sparse"] * 75 and set(cfg["indexer_types"]) == {"full"}
    assert from_hf_config(cfg) == from_hf_config("zai-org/GLM-5.1")
    shared = {**cfg, "indexer_types": ["full", "shared"] * 39}
    with pytest.raises(UnsupportedError, match="indexer_types"):
        from_hf_config(shared)
    with pytest.raises(UnsupportedError, match="mlp_layer_types"):
        from_hf_config({**cfg, "mlp_layer_types": ["dense"] + ["sparse"] * 77})
    with pytest.raises(ConfigError, match="indexer_types"):
        from_hf_config({**cfg, "indexer_types": ["full"] * 3})


# --- sibling ids ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("asked, found", [
    ("allenai/OLMo-2-1124-7B-Instruct", "allenai/OLMo-2-1124-7B"),
    ("Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-14B"),
    ("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
    ("google/gemma-2-9b-it", "google/gemma-2-9b"),
    ("google/gemma-2-2b", "google/gemma-2-2b-it"),
    ("Qwen/Qwen1.5-1.8B", "Qwen/Qwen1.5-1.8B-Chat"),
    ("XiaomiMiMo/MiMo-7B", "XiaomiMiMo/MiMo-7B-Base"),
])
def test_an_id_differing_only_by_its_tuning_suffix_resolves_to_its_sibling(asked, found):
    entry, note = hf_catalog.resolve(asked)
    assert entry.hf_id == found
    assert (note is None) == (asked == found)
    if note:
        assert asked in note and found in note and "same architecture" in note
    assert from_hf_config(asked) == from_hf_config(found)


def test_a_sibling_is_never_a_different_size_and_unknown_ids_still_name_the_closest():
    with pytest.raises(ConfigError) as exc:
        from_hf_config("Qwen/Qwen2.5-9B-Instruct")
    assert "not in the model catalog" in str(exc.value) and "Qwen/Qwen2.5-7B" in str(exc.value)


def test_the_base_id_of_an_instruct_only_entry_resolves_to_it():
    """Issue 27: meta-llama/Llama-4-Scout-17B-16E (the base id) was "not found"; the catalog holds the -Instruct
    config.json, whose language model has the same shapes."""
    entry, note = hf_catalog.resolve("meta-llama/Llama-4-Scout-17B-16E")
    assert entry.hf_id == "meta-llama/Llama-4-Scout-17B-16E-Instruct" and "sibling" in note and "tuning suffix" in note


def test_cli_and_page_say_which_sibling_they_used(capsys):
    from estimator.cli.commands import main
    from estimator import web
    import json
    assert main(["estimate", "--hf", "Qwen/Qwen2.5-14B-Instruct", "--num-gpus", "8", "--json"]) == 0
    err = capsys.readouterr().err
    assert "note: using 'Qwen/Qwen2.5-14B' for 'Qwen/Qwen2.5-14B-Instruct'" in err
    state = {"preset": "llama-3-8b", "values": {}, "gpu": None}
    res = json.loads(web.handle(json.dumps({"op": "import", "kind": "hf", "text": "google/gemma-2-9b-it",
                                            "state": state})))
    assert "errors" not in res or not res["errors"]
    assert any("using 'google/gemma-2-9b' for 'google/gemma-2-9b-it'" in n for n in res["notes"]), res["notes"]
