"""DeepSeek sparse attention (experimental_attention_variant: dsa): parameters against the published models,
activations by hand, the configuration rules and the importers.

Sources: Megatron-LM @ d98e8a64 : megatron/core/transformer/experimental_attention_variant/dsa.py (DSAIndexer,
DSAttention), absorbed_mla.py (AbsorbedMLASelfAttention); the indexer's shapes also in huggingface/transformers @
01f8fa55 : src/transformers/models/deepseek_v32/modular_deepseek_v32.py (DeepseekV32Indexer: wq_b q_lora -> n d, wk
h -> d, k_norm LayerNorm(d), weights_proj h -> n, no biases).
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, count_parameters_of, estimate, load_config
from estimator.formats.hf import from_hf_config
from estimator.formats.hf_catalog import get
from estimator.formats.megatron_args import read_megatron_args
from estimator.memory.activations import layer_activations
from estimator.model.layers import LayerKind
from estimator.model.resolve import resolve
from estimator.formats.presets import published_bounds
from tests.conftest import make_config


def _counts(hf_id):
    return count_parameters_of(load_config(make_config(from_hf_config(hf_id))))


def test_deepseek_v32_adds_one_indexer_per_layer_to_deepseek_v3():
    """DeepSeek-V3.2 is DeepSeek-V3 (main model 671,026,419,200 and MTP layer 11,610,068,224, tests/model/
    test_params.py) plus one lightning indexer in each of its 61 layers and in the MTP layer:
    wq_b 1536 x 64 x 128 = 12,582,912, wk 7168 x 128 = 917,504, k_norm weight and bias 2 x 128 = 256,
    weights_proj 7168 x 64 = 458,752: 13,959,424 per layer, all replicated over TP.
    Main model: 671,026,419,200 + 61 x 13,959,424 = 671,877,944,064; MTP: 11,610,068,224 + 13,959,424 =
    11,624,027,648. Published: the inference demo's "config_671B_v3.2.json" (DeepSeek-V3's 671B label, which
    671.88B truncates to)."""
    c = _counts("deepseek-ai/DeepSeek-V3.2")
    assert c.total - c.mtp == 671_877_944_064
    assert c.mtp == 11_624_027_648
    lo, hi = published_bounds("671B")
    assert lo <= c.total - c.mtp <= hi
    r = resolve(load_config(make_config(from_hf_config("deepseek-ai/DeepSeek-V3.2"))))
    assert r.kinds[r.layer_kinds[0]] == LayerKind("dsa", "dense") and r.kinds[r.mtp_kinds[0]].mixer == "dsa"


def test_glm5_total_by_hand():
    """GLM-5 (config.json: h 6144, 78 layers of which the first 3 dense, 64 heads, q_lora 2048, kv_lora 512, qk
    nope 192 + rope 64, v 256, vocab 154,880, ffn 12,288, 256 experts of 2048 + one shared, indexer 32 x 128):
    embedding and output 2 x 154,880 x 6144 = 1,903,165,440; final norm 6144;
    attention per layer: q_down 6144 x 2048 = 12,582,912 + q norm 2048 + q_up 2048 x 64 x 256 = 33,554,432 +
    kv_down 6144 x 576 = 3,538,944 + kv norm 512 + kv_up 512 x 64 x 448 = 14,680,064 + o_proj 64 x 256 x 6144 =
    100,663,296 + input norm 6144 = 165,028,352; indexer 2048 x 4096 + 6144 x 128 + 256 + 6144 x 32 = 9,371,904;
    dense MLP 3 x 6144 x 12,288 + norm 6144 = 226,498,560; MoE router 256 x 6144 + bias 256 + experts
    256 x 3 x 6144 x 2048 + shared 3 x 6144 x 2048 + norm 6144 = 9,703,004,416.
    Main: 1,903,165,440 + 6144 + 78 x 174,400,256 + 3 x 226,498,560 + 75 x 9,703,004,416 = 743,911,218,432, which
    the README's "744B parameters" rounds. MTP: 3 x 6144 + 2 x 6144^2 + 174,400,256 + 9,703,004,416 =
    9,952,920,576.

    Cross-check of the indexer's size: Megatron-Bridge @ 067f987d : examples/model_verification_cards/glm5-2/
    card.yaml gives GLM-5.2's checkpoint (GLM-5's shape, its bridge reading index_topk_freq for cross-layer top-k
    sharing) as 753,329,940,480 elements: GLM-5's 753,864,139,008 less exactly 57 indexers (57 x 9,371,904 = 534,198,528),
    what sharing the top-k every 4th layer from layer 3 leaves without an indexer (78 - 21)."""
    c = _counts("zai-org/GLM-5")
    assert c.total - c.mtp == 743_911_218_432
    assert c.mtp == 9_952_920_576
    lo, hi = published_bounds("744B")
    assert lo <= c.total - c.mtp <= hi
    assert c.total - 57 * 9_371_904 == 753_329_940_480


TINY = dict(num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=512, vocab_size=1000,
            multi_latent_attention=True, q_lora_rank=64, kv_lora_rank=32, qk_head_dim=16, qk_pos_emb_head_dim=8,
            v_head_dim=16, experimental_attention_variant="dsa", dsa_indexer_n_heads=2, dsa_indexer_head_dim=16,
            dsa_indexer_topk=8)


def _dsa_layer(model=None, training=None, **par):
    world = par.get("tensor_model_parallel_size", 1) * par.get("context_parallel_size", 1)
    cfg = make_config({**TINY, **(model or {})}, par, {"seq_length": 64, "world_size": world, **(training or {})})
    r = resolve(load_config(cfg))
    return layer_activations(r, r.kinds[r.layer_kinds[0]])


def test_dsa_layer_activations_by_hand():
    """One micro-batch of 64 tokens (b 1, t 1, cp 1), bf16, TINY's shapes (h 256, 4 heads, q_lora 64, kv_lora 32,
    qk 16, rope 8, v 16; kv_lora + rope = 40), the reference path (dsa_kernel_backend none), no indexer loss:
    input norm input and output 2 x 2 x 64 x 256 = 65,536; latents 2 x 64 x (2 x 64 + 32) = 20,480; q from q_up
    2 x 64 x 4 x 24 = 12,288; the v half of kv_up copied 2 x 4 x 16 x 32 = 4096; latent output 2 x 64 x 4 x 32 =
    16,384; attention output 2 x 64 x 4 x 16 = 8192; fp32 q and key copies and the bf16 key 4 x 64 x 4 x 40 +
    4 x 64 x 40 + 2 x 64 x 40 = 56,320; scores 13 x 4 x 64 x 64 = 212,992. Sum 126,976 + 56,320 + 212,992 =
    396,288 bytes.
    Fused (tilelang): the scores and fp32 copies give way to q copied with 16 heads 2 x 64 x 16 x 40 = 81,920,
    the key 2 x 64 x 40 = 5120 and int32 indices 4 x 64 x 8 = 2048: 126,976 + 89,088 = 216,064. cuDNN: q and
    the key as they are 2 x 64 x 4 x 40 + 5120 = 25,600, the indices 2048 and the fp32 log-sum-exp 4 x 64 x 4 =
    1024: 126,976 + 28,672 = 155,648.
    The indexer loss adds q 2 x 64 x (2 x 16 + 2) + k 2 x 64 x 16 + k_norm input 2 x 64 x 16 + stats 8 x 64 +
    int64 indices 8 x 64 x 8 + the absorbed query 2 x 64 x 4 x 40 = 4352 + 2048 + 2048 + 512 + 4096 + 20,480 =
    33,536."""
    assert _dsa_layer().attention == 396_288
    assert _dsa_layer({"dsa_kernel_backend": "tilelang"}).attention == 216_064
    assert _dsa_layer({"dsa_kernel_backend": "cudnn"}).attention == 155_648
    assert _dsa_layer({"dsa_indexer_loss_coeff": 0.001}).attention == 396_288 + 33_536


def test_dsa_recompute():
    """core_attn checkpoints DSAttention: it keeps its inputs, the absorbed q 2 x 64 x 4 x 40 = 20,480 and the key
    2 x 64 x 40 = 5120, and drops the core (56,320), the scores (212,992), the latent output (16,384) and the v
    copy (4096): 396,288 - 289,792 + 25,600 = 132,096. mla_up_proj (CheckpointWithoutOutput) drops the q from q_up
    (12,288) and frees its outputs where they are kept as they are: the latent key the reference path keeps as the
    value (5120): 396,288 - 17,408 = 378,880; with cuDNN also the absorbed q its kernel keeps a view of (20,480):
    155,648 - 12,288 - 5120 - 20,480 = 117,760."""
    sel = {"recompute_granularity": "selective"}
    assert _dsa_layer(training={**sel, "recompute_modules": ["core_attn"]}).attention == 132_096
    up = {**sel, "recompute_modules": ["mla_up_proj"]}
    assert _dsa_layer(training=up).attention == 378_880
    assert _dsa_layer({"dsa_kernel_backend": "cudnn"}, training=up).attention == 117_760


def test_dsa_scores_are_quadratic_in_the_sequence_and_split_over_tp():
    """The reference path's scores grow with s^2 per head on the rank; TP 2 halves the heads (and needs sequence
    parallelism); the fused kernels keep nothing quadratic."""
    one = _dsa_layer()
    two = _dsa_layer(training={"sequence_parallel": True}, tensor_model_parallel_size=2)
    assert two.attention < one.attention
    long = estimate(make_config({**TINY, "dsa_kernel_backend": "tilelang"}, None, {"seq_length": 128})).to_dict()
    assert long["stages"][0]["activations_bytes"] > 0


@pytest.mark.parametrize("model, field", [
    ({"multi_latent_attention": False}, "model.experimental_attention_variant"),
    ({"dsa_indexer_topk": None}, "model.dsa_indexer_topk"),
    ({"dsa_indexer_head_dim": 4}, "model.dsa_indexer_head_dim"),
    ({"add_bias_linear": True}, "model.add_bias_linear"),
])
def test_dsa_rules_name_the_field(model, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(make_config({**TINY, **model}))


def test_dsa_needs_sequence_parallel_with_tp_and_allgather_with_cp():
    cfg = make_config(TINY)
    cfg["parallelism"] = {"tensor_model_parallel_size": 2}
    cfg["training"]["world_size"] = 2
    with pytest.raises(ConfigError, match=r"training\.sequence_parallel"):
        load_config(cfg)
    cfg = make_config(TINY)
    cfg["parallelism"] = {"context_parallel_size": 2}
    cfg["training"]["world_size"] = 2
    with pytest.raises(ConfigError, match=r"parallelism\.cp_comm_type"):
        load_config(cfg)
    cfg["parallelism"]["cp_comm_type"] = "allgather"
    load_config(cfg)


def test_indexer_fields_need_dsa():
    with pytest.raises(ConfigError, match=r"model\.dsa_indexer_n_heads"):
        load_config(make_config({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
                                 "dsa_indexer_n_heads": 4}))


def test_hf_import_of_the_indexer_keys():
    hf = get("zai-org/GLM-5").config()
    m = from_hf_config(hf)
    assert (m["experimental_attention_variant"], m["dsa_indexer_n_heads"], m["dsa_indexer_head_dim"],
            m["dsa_indexer_topk"], m["dsa_indexer_loss_coeff"]) == ("dsa", 32, 128, 2048, 0.001)
    assert m["moe_shared_expert_intermediate_size"] == 2048 and "moe_aux_loss_coeff" not in m
    shared = from_hf_config({**hf, "index_topk_freq": 4, "index_skip_topk_offset": 3})
    assert (shared["dsa_indexer_topk_freq"], shared["dsa_indexer_skip_topk_offset"]) == (4, 3)
    assert "dsa_indexer_topk_freq" not in m
    with pytest.raises(ConfigError, match="config.json:qk_head_dim"):
        from_hf_config({**hf, "qk_head_dim": 255})
    with pytest.raises(ConfigError, match="config.json:index_head_dim"):
        from_hf_config({**hf, "index_head_dim": 32})
    v32 = get("deepseek-ai/DeepSeek-V3.2").config()
    for key in ("index_n_heads", "index_head_dim", "index_topk"):
        with pytest.raises(ConfigError, match=f"config.json:{key}"):
            from_hf_config({k: v for k, v in v32.items() if k != key})
        with pytest.raises(ConfigError, match=f"config.json:{key}"):
            from_hf_config({**v32, key: "64"})


def test_megatron_lm_flags():
    cmd = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
           "--vocab-size 1000 --micro-batch-size 1 --bf16 --disable-bias-linear --multi-latent-attention "
           "--q-lora-rank 64 --kv-lora-rank 32 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 "
           "--experimental-attention-variant dsa --dsa-indexer-n-heads 2 --dsa-indexer-head-dim 16 "
           "--dsa-indexer-topk 8 --dsa-indexer-loss-coeff 0.001 --dsa-indexer-use-sparse-loss")
    m = read_megatron_args(cmd, world_size=1).config["model"]
    assert (m["experimental_attention_variant"], m["dsa_indexer_n_heads"], m["dsa_indexer_loss_coeff"]) == \
        ("dsa", 2, 0.001)
    m = read_megatron_args(cmd + " --dsa-indexer-topk-freq 2 --dsa-indexer-skip-topk-offset 1",
                           world_size=1).config["model"]
    assert (m["dsa_indexer_topk_freq"], m["dsa_indexer_skip_topk_offset"]) == (2, 1)


def test_bridge_glm5_provider_fields():
    """Megatron-Bridge's GLM-5 provider (glm_moe_dsa/glm5_bridge.py @ 067f987d) sets experimental_attention_variant
    dsa, the indexer's shape, dsa_indexer_loss_coeff 0.001, dsa_indexer_use_sparse_loss, rotate_activation off and
    the key norm's epsilon: the shape and the loss are read, the numerics have no memory effect, and cross-layer
    top-k sharing (GLM-5.2: index_topk_freq 4, index_skip_topk_offset 3) is read."""
    from estimator.formats.bridge.config import BridgeRefusedError, read_bridge_config
    model = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 512,
             "vocab_size": 1000, "seq_length": 64, "add_bias_linear": False, "normalization": "RMSNorm",
             "position_embedding_type": "rope", "multi_latent_attention": True, "q_lora_rank": 64, "kv_lora_rank": 32,
             "qk_head_dim": 16, "qk_pos_emb_head_dim": 8, "v_head_dim": 16, "experimental_attention_variant": "dsa",
             "dsa_indexer_n_heads": 2, "dsa_indexer_head_dim": 16, "dsa_indexer_topk": 8,
             "dsa_indexer_loss_coeff": 0.001, "dsa_indexer_use_sparse_loss": True,
             "dsa_indexer_rotate_activation": False, "dsa_indexer_k_norm_epsilon": 1e-6}
    train = {"micro_batch_size": 1, "global_batch_size": 1}
    m = read_bridge_config({"model": model, "train": train}, world_size=1).config["model"]
    assert (m["experimental_attention_variant"], m["dsa_indexer_topk"], m["dsa_indexer_loss_coeff"]) == \
        ("dsa", 8, 0.001)
    m = read_bridge_config({"model": {**model, "dsa_indexer_topk_freq": 2, "dsa_indexer_skip_topk_offset": 1},
                            "train": train}, world_size=1).config["model"]
    assert (m["dsa_indexer_topk_freq"], m["dsa_indexer_skip_topk_offset"]) == (2, 1)
    assert BridgeRefusedError


def test_megatron_lm_export_round_trip():
    """The exported launch arguments carry the variant, the indexer's shape, the loss and the kernels; read back,
    they give the same model (GLM-5: the same parameter count)."""
    from estimator.formats.megatron_args import to_megatron_args
    cfg = {"model": {**from_hf_config("zai-org/GLM-5"), "dsa_kernel_backend": "tilelang"},
           "training": {"world_size": 8, "seq_length": 4096, "sequence_parallel": True},
           "parallelism": {"tensor_model_parallel_size": 8}}
    back = read_megatron_args(" ".join(to_megatron_args(cfg)), world_size=8).config
    assert {k: v for k, v in back["model"].items() if k.startswith("dsa_")} == {
        "dsa_indexer_n_heads": 32, "dsa_indexer_head_dim": 128, "dsa_indexer_topk": 2048,
        "dsa_indexer_loss_coeff": 0.001, "dsa_indexer_use_sparse_loss": True, "dsa_kernel_backend": "tilelang"}
    assert count_parameters_of(load_config(back)).total == count_parameters_of(load_config(cfg)).total
    cfg52 = {**cfg, "model": {**from_hf_config("zai-org/GLM-5.2"), "dsa_kernel_backend": "tilelang"},
             "parallelism": {"tensor_model_parallel_size": 8}}
    back = read_megatron_args(" ".join(to_megatron_args(cfg52)), world_size=8).config
    assert (back["model"]["dsa_indexer_topk_freq"], back["model"]["dsa_indexer_skip_topk_offset"]) == (4, 3)
    assert count_parameters_of(load_config(back)).total == count_parameters_of(load_config(cfg52)).total


# --- cross-layer top-k sharing (GLM-5.2) -----------------------------------------------------------------------

def test_which_layers_share_their_top_k_is_what_glm52_config_json_lists():
    """GLM-5.2's published config.json (catalog) states both the rule (index_topk_freq 4, index_skip_topk_offset 3)
    and, independently, the per-layer list indexer_types: "full" for layers 0, 1, 2, 6, 10, ..., 74 (21), "shared"
    for the other 57. Megatron-Core's rule (dsa.py is_dsa_skip_topk_layer) gives the same list."""
    from estimator.config.rules.attention import dsa_shared_topk
    cfg = get("zai-org/GLM-5.2").config()
    shared = dsa_shared_topk(78, cfg["index_topk_freq"], cfg["index_skip_topk_offset"])
    assert [k == "shared" for k in cfg["indexer_types"]] == list(shared)
    assert sum(shared) == 57 and [i for i in range(78) if not shared[i]][:5] == [0, 1, 2, 6, 10]
    assert dsa_shared_topk(5, 1, 0) == (False,) * 5
    assert dsa_shared_topk(5, 2, 0) == (False, True, False, True, False)   # offset 0 counts as 1


def test_glm52_total_by_hand():
    """GLM-5.2 has GLM-5's shapes (test_glm5_total_by_hand: main model 743,911,218,432 with 78 indexers of
    9,371,904, MTP layer 9,952,920,576 with its own indexer) less the 57 indexers of the layers that reuse another's
    top-k: 743,911,218,432 - 57 x 9,371,904 = 743,377,019,904; the MTP layer keeps its indexer (Megatron-Core
    numbers an MTP block's layer 1, which always computes). Total 753,329,940,480: exactly the element count
    Megatron-Bridge's verification card gives for the zai-org/GLM-5.2 checkpoint (catalog published_parameters)."""
    c = _counts("zai-org/GLM-5.2")
    assert c.total - c.mtp == 743_911_218_432 - 57 * 9_371_904 == 743_377_019_904
    assert c.mtp == 9_952_920_576
    assert c.total == 753_329_940_480
    r = resolve(load_config(make_config(from_hf_config("zai-org/GLM-5.2"))))
    kinds = [r.kinds[k] for k in r.layer_kinds]
    assert kinds[3] == LayerKind("dsa", "moe", (("dsa_skip", True),)) and kinds[6] == LayerKind("dsa", "moe")
    assert kinds[3].label == "sparse MLA (DSA) + MoE (shared top-k)"
    assert r.kinds[r.mtp_kinds[0]] == LayerKind("dsa", "moe")
    assert from_hf_config("nvidia/GLM-5.2-NVFP4") == from_hf_config("zai-org/GLM-5.2-FP8") == \
        from_hf_config("zai-org/GLM-5.2")


def test_glm52_config_json_checks():
    """indexer_types must say what index_topk_freq and index_skip_topk_offset say (Megatron-Bridge builds from the
    two numbers); an explicit index_topk_pattern has no Megatron-Core equivalent; num_experts repeats
    n_routed_experts."""
    hf = get("zai-org/GLM-5.2").config()
    with pytest.raises(UnsupportedError, match="indexer_types"):
        from_hf_config({**hf, "index_skip_topk_offset": 2})
    with pytest.raises(UnsupportedError, match="indexer_types"):
        from_hf_config({**hf, "index_topk_freq": 1})
    with pytest.raises(UnsupportedError, match="index_topk_pattern"):
        from_hf_config({**hf, "index_topk_pattern": "FFFS"})
    with pytest.raises(ConfigError, match="config.json:num_experts"):
        from_hf_config({**hf, "num_experts": 128})
    with pytest.raises(ConfigError, match="config.json:moe_router_dtype"):
        from_hf_config({**hf, "moe_router_dtype": "bfloat16"})


SHARE = {"num_layers": 2, "dsa_indexer_topk_freq": 2}     # layer 1 computes, layer 2 reuses its top-k


def _both(model=None, training=None):
    cfg = make_config({**TINY, **SHARE, **(model or {})}, {}, {"seq_length": 64, "world_size": 1, **(training or {})})
    r = resolve(load_config(cfg))
    return [layer_activations(r, r.kinds[k]).attention for k in r.layer_kinds]


def test_shared_top_k_activations_by_hand():
    """TINY (test_dsa_layer_activations_by_hand: 396,288 B on the reference path, 216,064 fused with tilelang,
    155,648 with cuDNN, + 33,536 with the indexer loss) with dsa_indexer_topk_freq 2: layer 1 computes the top-k,
    layer 2 reuses it.
    Reference path: the computing layer's int64 top-k stays in the holder for layer 2, 8 x 64 x 8 = 4096:
    400,384; layer 2 builds no indexer and keeps nothing more: 396,288.
    tilelang / cuDNN: each layer's kernel saves its own int32 indices (counted in 216,064 and 155,648: cuDNN's
    _run_sparse_attention_forward makes a new clamped tensor per layer); the computing layer's int32 top-k in the
    holder adds 4 x 64 x 8 = 2048: 218,112 / 216,064 and 157,696 / 155,648.
    Indexer loss: only layer 1 runs the indexer (its int64 top-k is the loss's, counted once): 396,288 + 33,536 =
    429,824; layer 2 has no indexer: 396,288.
    core_attn recompute: 132,096 (test_dsa_recompute) + the held top-k 4096 = 136,192 on layer 1; 132,096 on
    layer 2."""
    assert _both() == [400_384, 396_288]
    assert _both({"dsa_kernel_backend": "tilelang"}) == [218_112, 216_064]
    assert _both({"dsa_kernel_backend": "cudnn"}) == [157_696, 155_648]
    assert _both({"dsa_indexer_loss_coeff": 0.001}) == [429_824, 396_288]
    sel = {"recompute_granularity": "selective", "recompute_modules": ["core_attn"]}
    assert _both(training=sel) == [136_192, 132_096]


def test_shared_top_k_parameters_by_hand():
    """TINY's indexer: wq_b 64 x 2 x 16 = 2048, wk 256 x 16 = 4096, k_norm 2 x 16 = 32, weights_proj 256 x 2 = 512:
    6688. With dsa_indexer_topk_freq 2 the second layer has none: the total drops by exactly 6688."""
    base = count_parameters_of(load_config(make_config({**TINY})))
    shared = count_parameters_of(load_config(make_config({**TINY, **SHARE})))
    assert base.total - shared.total == 64 * 2 * 16 + 256 * 16 + 2 * 16 + 256 * 2 == 6688


def test_shared_top_k_pipeline_split():
    """Megatron-Core (_validate_dsa_index_share_pipeline_split) refuses a pipeline chunk that starts on a layer
    reusing an earlier layer's top-k. 8 layers, freq 4, offset 0: layers 1 and 5 compute. PP 2 (layers 1-4, 5-8)
    is valid; PP 4 (chunks from layers 1, 3, 5, 7) is refused naming layers 3 and 7; the layout search leaves
    such splits out."""
    model = {**TINY, "num_layers": 8, "dsa_indexer_topk_freq": 4}
    load_config(make_config(model, {"pipeline_model_parallel_size": 2}, {"seq_length": 64, "world_size": 2}))
    with pytest.raises(ConfigError, match=r"model\.dsa_indexer_topk_freq.*layer\(s\) 3, 7"):
        load_config(make_config(model, {"pipeline_model_parallel_size": 4}, {"seq_length": 64, "world_size": 4}))
    from estimator import search
    from estimator.config.rules import layer_split_problems
    found = search(model, num_gpus=4, gpu="H100-80GB", seq_length=64, global_batch_size=8, top=None,
                   distinct=False, max_tp=1)
    configs = [load_config(x.config) for x in found.layouts]
    pps = {c.parallelism.pipeline_model_parallel_size for c in configs}
    assert 2 in pps and 4 not in pps
    assert not any(layer_split_problems(c) for c in configs)


def test_topk_sharing_fields_need_dsa():
    with pytest.raises(ConfigError, match=r"model\.dsa_indexer_topk_freq"):
        load_config(make_config({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
                                 "dsa_indexer_topk_freq": 4}))


def test_shared_top_k_sparse_loss_with_cudnn_by_hand():
    """Shared top-k, cuDNN, indexer loss on (TINY, freq 2; n 2 indexer heads of d 16, T = K = 64 rows, B 2).
    Sparse loss (dsa_cudnn_kernels.py FusedQKTopKWithSparseLossFunc): the computing layer keeps the precomputed
    gradients of q 2 x 64 x 2 x 16 = 4096, of the weights 2 x 64 x 2 = 256 and of k 2 x 64 x 16 = 2048, the key norm's
    input 2048 and statistics 8 x 64 = 512 (8960), and the holder's int32 top-k 2048: 155,648 + 2048 + 8960 =
    166,656; no backward working set. Dense loss (the reference FusedDSAIndexerLoss): q, weights, k, key norm as
    above plus its int64 top-k 8 x 64 x 8 = 4096 (cuDNN keeps the query already): 155,648 + 2048 + 13,056 =
    170,752 (and its backward recomputes the fp32 index scores, 4 x 64 x 2 x 64 = 32,768 bytes, which the sparse
    kernel does not). The reusing layer runs no indexer either way: 155,648."""
    def acts(sparse):
        cfg = make_config({**TINY, **SHARE, "dsa_kernel_backend": "cudnn", "dsa_indexer_loss_coeff": 0.001,
                           "dsa_indexer_use_sparse_loss": sparse}, {}, {"seq_length": 64, "world_size": 1})
        r = resolve(load_config(cfg))
        return [layer_activations(r, r.kinds[k]) for k in r.layer_kinds]
    sparse, dense = acts(True), acts(False)
    assert [p.attention for p in sparse] == [166_656, 155_648]
    assert [p.attention for p in dense] == [170_752, 155_648]
