"""Issue 27 (famE): Step 3.5 Flash (stepfun-ai/Step-3.5-Flash) as Megatron-Bridge builds it.

No genuine config.json of stepfun-ai/Step-3.5-Flash was found in a public repository (searched: aiconfigurator,
vLLM, SGLang, inference-sim, llmfit, Megatron-Bridge's tests, which all write small or partial ones), so it is not
in the offline catalog. :data:`CONFIG` is written here from what the sources state, every key named as the
published config.json names it (the bridge's comments say so: model_type step3p5, Step3p5ForCausalLM):

- Megatron-Bridge @ 067f987d : src/megatron/bridge/models/stepfun/configuration_step35.py (``Step35Config``'s
  defaults: hidden 4096, intermediate 11264, 64 heads, 8 groups, 45 layers, head_dim 128, 288 experts, top-8,
  expert width 1280, shared expert 1280, MoE layers 3..44, three MTP layers) and step35_bridge.py
  (``provider_bridge``: sliding layers 96 heads, 8 groups, head_dim 128, window 512; the MTP layers dense;
  ``mapping_registry``: q/k norms, g_proj, router bias);
- the bridge's ``_MTPDenseLayerSpecsList`` docstring ("MTP layers 45-47 are NOT in moe_layers_enum") and the
  provider's "full-attention layers (num_attention_heads=64) interleave with sliding-attention layers
  (num_attention_heads=96)", three sliding per global one (sgl-project/sgl-cookbook @ 459699ab :
  docs/autoregressive/StepFun/Step3.5.md, "SWA and GA with a 3:1 ratio"). The full-attention layers are put at
  every fourth layer from 0, as the Step-family test configs found publicly write them; the count does not depend
  on where they are, only on how many: the card's total holds with 12 full-attention layers and 33 + 3 (MTP)
  sliding ones and with no other split (each layer moved between the kinds changes it by 4096 x 32 x 128 x 3 =
  50,331,648: query, gate and output widths);
- vocabulary 128,896: the verification card below, whose three exported MTP output heads occupy 3,167,748,096
  bytes = 3 x 2 x 4096 x 128,896.

The published figure is Megatron-Bridge @ 067f987d : examples/model_verification_cards/step35-flash/card.yaml
(hf_to_megatron_cpu: "constructed 199,997,706,240 parameters"; hf_to_megatron_gpu at TP1/PP1/EP8/ETP1:
"33,525,780,480 parameters per rank"; megatron_to_hf_cpu: "398,768,626,944 serialized bytes" over "804 source
tensors").
"""

from __future__ import annotations

import copy
import json

import pytest

from estimator import ConfigError, EstimatorError, UnsupportedError, count_parameters_of, from_hf_config, load_config
from estimator.cli.commands import main
from estimator.memory.activations import layer_activations
from estimator.model.resolve import resolve
from tests.conftest import make_config

L, MTP, H = 45, 3, 4096
#: layer_types over the 45 decoder layers and the 3 MTP layers: full attention at every fourth layer from 0.
LAYER_TYPES = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(L + MTP)]
CONFIG = {
    "architectures": ["Step3p5ForCausalLM"], "model_type": "step3p5",
    "hidden_size": H, "intermediate_size": 11264, "num_attention_heads": 64, "num_attention_groups": 8,
    "head_dim": 128, "num_hidden_layers": L, "vocab_size": 128896, "rms_norm_eps": 1e-5,
    "max_position_embeddings": 262144, "tie_word_embeddings": False,
    "moe_num_experts": 288, "moe_top_k": 8, "moe_intermediate_size": 1280, "share_expert_dim": 1280,
    "moe_layers_enum": ",".join(str(i) for i in range(3, L)), "moe_router_activation": "sigmoid",
    "use_moe_router_bias": True, "need_fp32_gate": True, "norm_expert_weight": True,
    "layer_types": LAYER_TYPES, "sliding_window": 512,
    "attention_other_setting": {"attention_type": "sliding_attention", "num_attention_heads": 96,
                                "num_attention_groups": 8, "head_dim": 128},
    "use_head_wise_attn_gate": True, "use_qk_norm": True, "zero_centered": True, "num_nextn_predict_layers": MTP,
}
CARD_TOTAL = 199_997_706_240
#: The expert bias (288 per MoE layer): Megatron-Core registers it as a buffer (Megatron-LM @ d98e8a64 :
#: megatron/core/transformer/moe/router.py ``register_buffer('expert_bias', ...)``), so the card's count of
#: parameters leaves it out; the estimator counts it, as Hugging Face's checkpoint holds it (router_bias).
EXPERT_BIAS = 42 * 288


def _cfg(model=None, **par):
    par = {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8, "expert_tensor_parallel_size": 1,
           **par}
    return {"model": model or from_hf_config(CONFIG), "parallelism": par,
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 8, "world_size": 8,
                         "sequence_parallel": par["tensor_model_parallel_size"] > 1}}


def test_step3p5_mapping():
    """Sliding-window layers are the model's own (96 query heads, 8 key/value heads of 128), the twelve
    full-attention layers its global-attention layers (64 query heads); the full-width output gate (Bridge's
    fallback on Megatron-Core without head_wise_attn_gate); layers 0-2 dense; three dense MTP layers."""
    m = from_hf_config(CONFIG)
    assert (m["num_attention_heads"], m["num_global_attention_heads"], m["num_query_groups"], m["kv_channels"]) \
        == (96, 64, 8, 128)
    assert "num_global_query_groups" not in m and "global_kv_channels" not in m
    assert [i for i, x in enumerate(m["global_attention_freq"]) if x] == list(range(0, L, 4))
    assert m["attention_output_gate"] is True and m["qk_layernorm"] is True
    assert m["moe_layer_freq"] == [0, 0, 0] + [1] * 42
    assert (m["num_experts"], m["moe_router_topk"], m["moe_ffn_hidden_size"], m["moe_shared_expert_intermediate_size"],
            m["ffn_hidden_size"]) == (288, 8, 1280, 1280, 11264)
    assert (m["moe_router_score_function"], m["moe_router_enable_expert_bias"], m["moe_router_dtype"],
            m["moe_router_load_balancing_type"], m["moe_aux_loss_coeff"]) == ("sigmoid", True, "fp32", "aux_loss", 1e-3)
    assert (m["mtp_num_layers"], m["mtp_dense_mlp"]) == (3, True)
    assert m["untie_embeddings_and_output_weights"] is True


def test_step3p5_by_hand_matches_the_verification_card():
    """h 4096, head width 128, 8 key/value heads; vocabulary 128,896 untied.

    Attention with the full-width gate (QKV h (2a x 128 + 2 x 8 x 128), output a x 128 x h, q/k norms 2 x 128, input
    norm h): global (a 64) 4096 x 18,432 + 8192 x 4096 + 256 + 4096 = 109,056,256; sliding (a 96) 4096 x 26,624 +
    12,288 x 4096 + 4352 = 159,387,904. Dense MLP 3 x 4096 x 11,264 + norm 4096 = 138,416,128. MoE: 288 experts
    3 x 4096 x 1280 = 4,529,848,320, shared expert 15,728,640, router 288 x 4096 = 1,179,648, norm 4096:
    4,546,760,704. MTP layer: enorm, hnorm 2 x 4096, eh_proj 2 x 4096 x 4096, sliding attention, dense MLP, final
    norm 4096: 331,370,752. Embedding and output 2 x 128,896 x 4096 = 1,055,916,032, final norm 4096.

    12 x 109,056,256 + 33 x 159,387,904 + 3 x 138,416,128 + 42 x 4,546,760,704 + 3 x 331,370,752 + 1,055,920,128
    = 199,997,706,240, the card's "constructed 199,997,706,240 parameters". At EP 8 one rank holds 1/8 of the
    routed experts (42 x 4,529,848,320 = 190,253,629,440): 9,744,076,800 + 23,781,703,680 = 33,525,780,480, the
    card's "33,525,780,480 parameters per rank". The estimator adds the 42 x 288 expert-bias buffers."""
    glob = H * (2 * 64 * 128 + 2 * 8 * 128) + 64 * 128 * H + 2 * 128 + H
    slide = H * (2 * 96 * 128 + 2 * 8 * 128) + 96 * 128 * H + 2 * 128 + H
    dense = 3 * H * 11264 + H
    experts = 288 * 3 * H * 1280
    moe = experts + 3 * H * 1280 + 288 * H + H
    mtp = 2 * H + 2 * H * H + slide + dense + H
    assert (glob, slide, dense, moe, mtp) == (109_056_256, 159_387_904, 138_416_128, 4_546_760_704, 331_370_752)
    total = 12 * glob + 33 * slide + 3 * dense + 42 * moe + 3 * mtp + 2 * 128_896 * H + H
    assert total == CARD_TOTAL
    assert total - 42 * experts + 42 * experts // 8 == 33_525_780_480
    c = count_parameters_of(_cfg())
    assert c.total == CARD_TOTAL + EXPERT_BIAS and c.mtp == 3 * mtp
    assert c.total - c.moe_experts * 7 // 8 == 33_525_780_480 + EXPERT_BIAS
    assert c.layer_kinds == {"attention + MLP (query heads 64)": 1, "attention + MLP": 2, "attention + MoE": 31,
                             "attention + MoE (query heads 64)": 11}


def test_step3p5_checkpoint_bytes_confirm_the_layer_shapes():
    """The card's export wrote 398,768,626,944 bytes: Hugging Face's tensors, whose gate (g_proj) has one row per
    head (a x h, not a x 128 x h), whose 42 router biases are fp32 (4 bytes each), and which hold one output head
    per MTP layer (3 x 128,896 x 4096). From the Megatron count: minus the gates' 127 of every 128 rows (12 global
    layers of 64 heads, 33 + 3 sliding ones of 96), plus the MTP heads, times 2 bytes, plus 4 bytes per router bias.
    This holds only with the MTP layers' 96-head sliding attention."""
    gates = 12 * 64 * 127 * H + 36 * 96 * 127 * H
    assert 2 * (CARD_TOTAL - gates + 3 * 128_896 * H) + 4 * EXPERT_BIAS == 398_768_626_944
    full_gate_mtp = 2 * (CARD_TOTAL - 12 * 64 * 127 * H - 33 * 96 * 127 * H - 3 * 64 * 127 * H + 3 * 128_896 * H)
    assert full_gate_mtp + 4 * EXPERT_BIAS != 398_768_626_944


def test_step3p5_model_card_figures_to_their_rounding():
    """vllm-project/recipes @ aac225ac : StepFun/Step-3.5-Flash.md: "only 11B active parameters out of 196B
    parameters", the model card's figures: Hugging Face's decoder with its per-head gates (g_proj a x h), without
    the embedding and output layer and without the MTP layers. From the estimate without MTP layers: minus the
    embedding and output layer (2 x 128,896 x 4096 = 1,055,916,032), minus the full-width gate's 127 of every 128
    rows (12 x 64 x 127 x 4096 + 33 x 96 x 127 x 4096 = 2,047,475,712): 195,900,214,336, 196B; active, minus 280
    of 288 experts in 42 layers (42 x 280 x 15,728,640 = 184,968,806,400): 10,931,407,936, 11B. With the full-width
    gate the total would round to 198B: the card's figure is the bridge's fallback, the model card's the head-wise
    gate."""
    m = {k: v for k, v in from_hf_config(CONFIG).items() if k not in ("mtp_num_layers", "mtp_dense_mlp")}
    c = count_parameters_of(_cfg(m))
    gates = 12 * 64 * 127 * H + 33 * 96 * 127 * H
    assert gates == 2_047_475_712 and c.embedding + c.output_layer == 1_055_916_032
    total = c.total - c.embedding - c.output_layer - gates
    active = total - 42 * 280 * 3 * H * 1280
    assert (total, active) == (195_900_214_336, 10_931_407_936)
    assert (round(total / 1e9), round(active / 1e9)) == (196, 11)
    assert round((total + gates) / 1e9) == 198

def test_step3p5_attention_activations_by_hand():
    """One micro-batch of 4096 tokens at TP 8 with sequence parallelism (512 tokens per rank outside attention),
    bf16. Per rank a sliding layer has 12 query heads, a global one 8, and one key/value head of 128.

    Sliding: norm input and output 2 x 2 x 512 x 4096 = 8,388,608; q, k, v 2 x 4096 x (13 x 128 + 128) =
    14,680,064; attention output 2 x 4096 x 12 x 128 = 12,582,912; log-sum-exp 4 x 4096 x 12 = 196,608; q/k norms
    (4096 x 13 rows) 2 x 2 x 53,248 x 128 + 4 x 53,248 = 27,475,968; the gate and the gated output
    2 x 2 x 4096 x 12 x 128 = 25,165,824: 88,489,984 bytes.
    Global: 8,388,608 + 2 x 4096 x 1280 + 2 x 4096 x 1024 + 4 x 4096 x 8 + (4 x 36,864 x 128 + 4 x 36,864)
    + 4 x 4096 x 1024 = 63,193,088 bytes."""
    r = resolve(load_config(_cfg(tensor_model_parallel_size=8)))
    slide, glob = (r.kinds[r.layer_kinds[i]] for i in (1, 0))
    assert glob.var == (("a", 64),) and slide.var == ()
    sliding = 8_388_608 + 14_680_064 + 12_582_912 + 196_608 + 27_475_968 + 25_165_824
    rows = 4096 * 9
    global_ = (8_388_608 + 2 * 4096 * 1280 + 2 * 4096 * 1024 + 4 * 4096 * 8 + (4 * rows * 128 + 4 * rows)
               + 4 * 4096 * 1024)
    assert (sliding, global_) == (88_489_984, 63_193_088)
    assert layer_activations(r, slide).attention == sliding
    assert layer_activations(r, glob).attention == global_
    mtp = r.kinds[r.mtp_kinds[0]]
    assert (mtp.mixer, mtp.mlp, mtp.var) == ("attention", "dense", ())      # sliding-window attention, dense MLP


def test_step3p5_estimates_end_to_end(tmp_path, capsys):
    """``estimate --hf <config.json> --num-gpus 64 --json`` gives a per-stage answer with the count above."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    assert main(["estimate", "--hf", str(path), "--num-gpus", "64", "--seq-length", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parameters"]["total"] == CARD_TOTAL + EXPERT_BIAS and out["stages"]


@pytest.mark.parametrize("change, error, match", [
    ({"sink": True}, UnsupportedError, "sink"),
    ({"att_impl_type": "MLA"}, UnsupportedError, "att_impl_type"),
    ({"attention_other_setting": None}, UnsupportedError, "attention_other_setting is missing"),
    ({"attention_other_setting": {"num_attention_heads": 48}}, UnsupportedError, "attention_type"),
    ({"attention_other_setting": {"attention_type": "sliding_attention", "rope": 1}}, UnsupportedError, "rope"),
    ({"attention_other_setting": {"attention_type": "sliding_attention", "num_attention_heads": 0}}, ConfigError,
     "attention_other_setting.num_attention_heads"),
    ({"layer_types": LAYER_TYPES[:L] + ["full_attention"] * MTP}, UnsupportedError, "MTP layers full attention"),
    ({"layer_types": LAYER_TYPES[:10]}, ConfigError, "config.json:layer_types"),
    ({"moe_layers_enum": "3,4,99"}, ConfigError, "config.json:moe_layers_enum"),
    ({"moe_layers_enum": "3,x"}, ConfigError, "config.json:moe_layers_enum"),
    ({"share_expert_dims": 2048}, UnsupportedError, "share_expert_dims"),
    ({"moe_router_activation": "relu"}, UnsupportedError, "moe_router_activation"),
    ({"use_head_wise_attn_gate": None}, ConfigError, "config.json:use_head_wise_attn_gate"),
    ({"mystery_key": 1}, UnsupportedError, "mystery_key"),
])
def test_step3p5_refusals_name_the_key(change, error, match):
    cfg = copy.deepcopy(CONFIG)
    for k, v in change.items():
        if v is None:
            del cfg[k]
        else:
            cfg[k] = v
    with pytest.raises(error, match=match):
        from_hf_config(cfg)


def test_step3p5_without_sliding_layers_is_plain_gqa():
    """No layer_types: every layer full attention with the top-level shape (Bridge's Step35DecoderLayer finds no
    sliding_attention entry), so no global-attention pattern and no sliding shape needed."""
    cfg = {k: v for k, v in CONFIG.items() if k not in ("layer_types", "attention_other_setting")}
    m = from_hf_config(cfg)
    assert (m["num_attention_heads"], m["num_query_groups"], m["kv_channels"]) == (64, 8, 128)
    assert "global_attention_freq" not in m and "num_global_attention_heads" not in m


def test_num_global_attention_heads_rules():
    """The field applies only with global-attention layers, and its heads must split over the tensor-parallel ranks
    and into the key/value heads."""
    base = dict(num_layers=4, hidden_size=768, num_attention_heads=12, num_query_groups=4, vocab_size=1000)
    with pytest.raises(ConfigError, match="model.num_global_attention_heads"):
        load_config(make_config({**base, "num_global_attention_heads": 8}))
    with pytest.raises(ConfigError, match="divisible by tensor_model_parallel_size"):
        load_config(make_config({**base, "global_attention_freq": 2, "num_global_attention_heads": 6}, {
            "tensor_model_parallel_size": 4}))
    with pytest.raises(ConfigError, match="divisible by num_query_groups"):
        load_config(make_config({**base, "global_attention_freq": 2, "num_global_attention_heads": 6}))
    load_config(make_config({**base, "global_attention_freq": 2, "num_global_attention_heads": 8}))


WRONG = [[1], ["silu"], {"a": 1}, "abc", True, False, -1, 0, 1.5, float("nan"), float("inf"), 10 ** 30, None]


def test_step3p5_a_wrong_value_for_any_key_is_an_error_that_names_it():
    """Every key of CONFIG (and of attention_other_setting) replaced by each WRONG value: a model section or an
    EstimatorError; a ConfigError names the key (or num_hidden_layers, which layer_types is measured against)."""
    cases = [({**CONFIG, key: w}, key) for key in CONFIG for w in WRONG]
    cases += [({**CONFIG, "attention_other_setting": {**CONFIG["attention_other_setting"], key: w}},
               f"attention_other_setting.{key}") for key in CONFIG["attention_other_setting"] for w in WRONG]
    for hf, key in cases:
        try:
            from_hf_config(hf)
        except ConfigError as exc:
            fields = {p.field for p in exc.problems}
            assert fields <= {f"config.json:{key}", "config.json:num_hidden_layers", "config.json:layer_types",
                              "config.json:moe_layers_enum"}, (key, hf.get(key), exc)
        except EstimatorError:
            pass
