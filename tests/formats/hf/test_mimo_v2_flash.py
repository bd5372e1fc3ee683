"""Issue 27: MiMo-V2-Flash (XiaomiMiMo/MiMo-V2-Flash) as Megatron-Bridge builds it.

Hand counts from Megatron-Bridge @ 067f987d : src/megatron/bridge/models/mimo_v2_flash/ (the bridge's tensor mapping:
q/k/v/o projections, ``self_attn.attention_sink_bias`` as the core attention's ``softmax_offset`` of the
sliding-window layers only, the dense MLP and the experts with their ``gate.e_score_correction_bias``;
``MiMoV2FlashSelfAttention``: value heads of v_head_dim) and the catalog's config.json; the published figure is the
README's "309B total parameters and 15B active parameters", the main model without the MTP blocks, which the README
counts apart ("0.33B params/block").
"""

from __future__ import annotations

import copy
import json

import pytest

from estimator import ConfigError, UnsupportedError, count_parameters_of, from_hf_config, load_config
from estimator.cli.commands import main
from estimator.formats import catalog, hf_catalog
from estimator.memory.activations import layer_activations
from estimator.model.resolve import resolve
from tests.conftest import make_config

HF_ID = "XiaomiMiMo/MiMo-V2-Flash"
#: The global-attention layers of hybrid_layer_pattern (its 0 entries): the first, then the last of every six.
GLOBAL = (0, 5, 11, 17, 23, 29, 35, 41, 47)


def _cfg(model=None, **par):
    par = {"tensor_model_parallel_size": 4, "expert_model_parallel_size": 8, "expert_tensor_parallel_size": 1,
           **par}
    return {"model": model or from_hf_config(HF_ID), "parallelism": par,
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, "world_size": 8,
                         "sequence_parallel": True}}


def test_mimo_v2_flash_mapping():
    """Sliding-window layers are the model's own (8 key/value heads, learnable sinks), the nine global layers its
    global-attention layers (4 key/value heads, vanilla softmax); q/k heads 192 wide, v heads 128; layer 0 dense."""
    m = from_hf_config(HF_ID)
    assert (m["num_query_groups"], m["num_global_query_groups"], m["kv_channels"], m["v_channels"]) == (8, 4, 192, 128)
    assert (m["softmax_type"], m["global_softmax_type"]) == ("learnable", "vanilla")
    assert [i for i, x in enumerate(m["global_attention_freq"]) if x] == list(GLOBAL)
    assert m["moe_layer_freq"] == [0] + [1] * 47
    assert (m["num_experts"], m["moe_router_topk"], m["moe_ffn_hidden_size"], m["ffn_hidden_size"]) \
        == (256, 8, 2048, 16384)
    assert (m["moe_router_score_function"], m["moe_router_enable_expert_bias"], m["moe_router_pre_softmax"],
            m["moe_router_load_balancing_type"]) == ("sigmoid", True, True, "none")
    assert m["untie_embeddings_and_output_weights"] is True and m["layernorm_epsilon"] == 1e-5
    assert "mtp_num_layers" not in m          # the config.json does not state the checkpoint's three MTP blocks


def test_mimo_v2_flash_by_hand_matches_the_published_total():
    """h 4096, 48 layers, 64 query heads of 192, values 128 wide; vocabulary 152,576 untied.

    Global attention (4 KV heads): q 64 x 192 x 4096 = 50,331,648, k 4 x 192 x 4096 = 3,145,728, v 4 x 128 x 4096
    = 2,097,152, o 64 x 128 x 4096 = 33,554,432: 89,128,960. Sliding-window attention (8 KV heads): k 6,291,456,
    v 4,194,304, sinks 64: 94,371,904. Dense MLP (layer 0) 3 x 4096 x 16,384 = 201,326,592. MoE: 256 experts
    3 x 4096 x 2048 = 6,442,450,944, router 256 x 4096 + expert bias 256 = 1,048,832. Norms: 2 per layer and the
    final one, 97 x 4096 = 397,312. Embedding and output layer 2 x 152,576 x 4096 = 1,249,902,592.

    9 x 89,128,960 + 39 x 94,371,904 + 201,326,592 + 47 x (6,442,450,944 + 1,048,832) + 397,312 + 1,249,902,592
    = 308,778,780,864, the README's 309B. Active: 8 of 256 experts, 47 x 248 x 25,165,824 fewer = 15,445,936,320
    (the README's 15B)."""
    full = 64 * 192 * 4096 + 4 * 192 * 4096 + 4 * 128 * 4096 + 64 * 128 * 4096
    swa = 64 * 192 * 4096 + 8 * 192 * 4096 + 8 * 128 * 4096 + 64 * 128 * 4096 + 64
    expert, router = 3 * 4096 * 2048, 256 * 4096 + 256
    assert (full, swa, 256 * expert, router) == (89_128_960, 94_371_904, 6_442_450_944, 1_048_832)
    total = (9 * full + 39 * swa + 3 * 4096 * 16384 + 47 * (256 * expert + router) + 97 * 4096
             + 2 * 152_576 * 4096)
    assert total == 308_778_780_864 and round(total / 1e9) == 309
    active = total - 47 * 248 * expert
    assert active == 15_445_936_320 and round(active / 1e9) == 15
    c = count_parameters_of(_cfg())
    assert (c.total, c.active) == (total, active)
    assert c.layer_kinds == {"attention + MLP (query groups 4, no attention sinks)": 1, "attention + MoE": 39,
                             "attention + MoE (query groups 4, no attention sinks)": 8}
    row = catalog.describe(HF_ID)
    assert row["parameters"]["total"] == total and row["published"]["matches"] is True


def test_mimo_v2_flash_mtp_blocks_are_dense_sliding_window_layers():
    """README: "a dense FFN (instead of MoE) and SWA (instead of GA) ... (0.33B per block)", three blocks in the
    checkpoint. One block: eh_proj 2 x 4096 x 4096 = 33,554,432, sliding-window attention 94,371,904, dense MLP
    201,326,592, five norms (enorm, hnorm, input, pre-MLP, final) 5 x 4096 = 20,480: 329,273,408."""
    m = {**from_hf_config(HF_ID), "mtp_num_layers": 3, "mtp_dense_mlp": True}
    c = count_parameters_of(_cfg(m))
    block = 2 * 4096 * 4096 + 94_371_904 + 3 * 4096 * 16384 + 5 * 4096
    assert block == 329_273_408 and round(block / 1e9, 2) == 0.33
    assert c.mtp == 3 * block and c.total == 308_778_780_864 + 3 * block
    # Megatron-Core's default (an MTP layer built like the decoder's last: global attention and MoE) differs.
    assert count_parameters_of(_cfg({**m, "mtp_dense_mlp": False})).mtp != c.mtp


def test_mimo_v2_flash_attention_activations_by_hand():
    """One micro-batch of 4096 tokens, TP 4 with sequence parallelism, bf16. The attention part keeps the norm's
    input and output (4 x 4096 x 4096 / 4), q, k, v as flash attention saves them (2 x 4096 x (16 x 192 +
    g/4 x 192 + g/4 x 128)), the attention output (2 x 4096 x 16 x 128) and the fp32 log-sum-exp (4 x 4096 x 16).
    The sliding-window layer (g 8, two key/value heads per rank) keeps 2 x 4096 x (192 + 128) = 2,621,440 bytes
    more than the global one (g 4, one per rank); the value heads 128 wide instead of 192 save 2 x 4096 x (16 + 2) x 64
    bytes on the sliding-window layer against kv_channels-wide values."""
    r = resolve(load_config(_cfg()))
    local, glob = (r.kinds[r.layer_kinds[i]] for i in (1, 0))
    assert glob.var == (("g", 4), ("sinks", False)) and local.var == ()
    a_local, a_glob = (layer_activations(r, k).attention for k in (local, glob))
    norm = 4 * 4096 * 4096 // 4
    assert a_local == norm + 2 * 4096 * (16 * 192 + 2 * 192 + 2 * 128) + 2 * 4096 * 16 * 128 + 4 * 4096 * 16
    assert a_local - a_glob == 2 * 4096 * (192 + 128) == 2_621_440
    wide = resolve(load_config(_cfg({**from_hf_config(HF_ID), "v_channels": None})))
    assert layer_activations(wide, wide.kinds[wide.layer_kinds[1]]).attention - a_local == 2 * 4096 * 18 * 64


def test_mimo_v2_flash_estimates_end_to_end(capsys):
    """``estimate --hf XiaomiMiMo/MiMo-V2-Flash --num-gpus 64 --json``: the catalog id gives a per-stage answer with
    the hand count above."""
    assert main(["estimate", "--hf", HF_ID, "--num-gpus", "64", "--seq-length", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parameters"]["total"] == 308_778_780_864 and out["stages"]


@pytest.mark.parametrize("key, value, match", [
    ("swa_num_attention_heads", 32, "swa_num_attention_heads"),
    ("swa_head_dim", 128, "swa_head_dim"),
    ("attention_bias", True, "attention_bias"),
    ("n_shared_experts", 1, "shared expert"),
    ("hybrid_block_size", 6, "hybrid_block_size"),
    ("topk_method", "greedy", "noaux_tc"),
])
def test_mimo_v2_flash_refuses_what_bridge_does_not_build(key, value, match):
    cfg = copy.deepcopy(hf_catalog.get(HF_ID).config())
    cfg[key] = value
    with pytest.raises(UnsupportedError, match=match):
        from_hf_config(cfg)


def test_mimo_v2_flash_bad_patterns_are_named():
    cfg = copy.deepcopy(hf_catalog.get(HF_ID).config())
    cfg["hybrid_layer_pattern"] = [0, 1, 2]
    with pytest.raises(ConfigError, match="config.json:hybrid_layer_pattern"):
        from_hf_config(cfg)
    cfg = copy.deepcopy(hf_catalog.get(HF_ID).config())
    cfg["moe_layer_freq"] = True
    with pytest.raises(ConfigError, match="config.json:moe_layer_freq"):
        from_hf_config(cfg)


def test_mimo_v2_flash_rules():
    """Context parallelism is refused (Bridge's provider asserts it), as are the new fields where they mean nothing:
    v_channels with multi-latent attention or unfused local attention, global_softmax_type without global layers."""
    with pytest.raises(ConfigError, match="context parallelism"):
        load_config(_cfg(context_parallel_size=2))
    base = dict(num_layers=4, hidden_size=512, num_attention_heads=8, vocab_size=1000)
    with pytest.raises(ConfigError, match="model.v_channels"):
        load_config(make_config({**base, "multi_latent_attention": True, "v_channels": 32}))
    with pytest.raises(ConfigError, match="model.global_softmax_type"):
        load_config(make_config({**base, "global_softmax_type": "vanilla"}))
    with pytest.raises(ConfigError, match="training.transformer_impl"):
        load_config(make_config({**base, "v_channels": 32}, None, {"transformer_impl": "local"}))
