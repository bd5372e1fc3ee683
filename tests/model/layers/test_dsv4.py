"""DeepSeek-V4 (experimental_attention_variant: dsv4_hybrid, hyper-connections, hash-routed MoE layers): parameters
against the published checkpoint, one layer's parameters and activations by hand, the configuration rules and the
Hugging Face importer.

Sources: Megatron-LM @ d48bd6be (the dev branch): megatron/core/transformer/experimental_attention_variant/
deepseek_v4_hybrid_attention.py (DSv4HybridSelfAttention), csa.py (CompressedSparseAttention, Compressor, CSAIndexer),
megatron/core/transformer/hyper_connection.py (HyperConnectionModule), moe/router.py (hash layers: no expert bias);
Megatron-Bridge @ 067f987d : src/megatron/bridge/models/deepseek/deepseek_v4_bridge.py (the checkpoint's tensor names:
wq_a, wq_b, wkv, wo_a, wo_b, attn_sink, compressor.{wkv, wgate, ape, norm}, indexer.{wq_b, weights_proj, compressor},
hc_{attn,ffn}_{fn,base,scale}, hc_head_{fn,base,scale}, mtp.N.{e_proj, h_proj, enorm, hnorm, norm}).
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, count_parameters_of, load_config
from estimator.formats.hf import from_hf_config
from estimator.formats.presets import published_bounds
from estimator.memory.activations import context, layer_activations
from estimator.model.layers import LayerKind, dsv4, hyper_connection, kind_params, view
from estimator.model.resolve import resolve
from tests.conftest import make_config

# h 64, 4 heads of width 32 (rotary 8), q_lora 16, 2 output groups of rank 8, indexer 2 heads x 16 (top-k 4), window
# 8; layer 0 a sliding-window layer, layer 1 ratio 4, layer 2 ratio 128; a dense gated MLP of 128.
TINY = dict(num_layers=3, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=1000,
            multi_latent_attention=True, q_lora_rank=16, qk_pos_emb_head_dim=8, v_head_dim=32,
            experimental_attention_variant="dsv4_hybrid", csa_compress_ratios=[0, 4, 128], csa_window_size=8,
            o_groups=2, o_lora_rank=8, dsa_indexer_n_heads=2, dsa_indexer_head_dim=16, dsa_indexer_topk=4)


def _resolved(model=None, training=None, **par):
    cfg = make_config({**TINY, **(model or {})}, par, {"seq_length": 16, "world_size": 1, **(training or {})})
    return resolve(load_config(cfg))


def test_flash_matches_the_checkpoint_to_the_parameter():
    """DeepSeek-V4-Flash (config.json: h 4096, 43 layers, 64 heads of 512 with rotary 64, q_lora 1024, o_groups 8 x
    o_lora 1024, indexer 64 x 128, 256 experts of 2048 + one shared, 3 hash layers, hc_mult 4, vocab 129,280, one MTP
    layer; ratios [0, 0, 4, 128, 4, ..., 128, 4] then 0 for the MTP layer):

    attention per layer: norm 4096 + q_down 4096 x 1024 + q_norm 1024 + q_up 1024 x 64 x 512 + wkv 4096 x 512 +
    kv_norm 512 + wo_a 1024 x 64 x 512 + wo_b 8 x 1024 x 4096 + sink 64 = 106,960,448;
    compressor ratio 128: 2 x 4096 x 512 + 128 x 512 + 512 = 4,260,352; ratio 4 (overlapping, 2 x 512 wide):
    2 x 4096 x 1024 + 4 x 1024 + 512 = 8,393,216; indexer: 1024 x 64 x 128 + 4096 x 64 + its compressor
    2 x 4096 x 256 + 4 x 256 + 128 = 10,749,056;
    mHC per layer: 2 x (24 x 4 x 4096 + 24 + 3) = 786,486;
    MoE: norm 4096 + router 256 x 4096 + experts 256 x 3 x 2048 x 4096 + shared 3 x 2048 x 4096 = 6,468,669,440,
    + 256 expert bias on the 40 layers that are not hash-routed.
    Layers: 2 x 6,576,416,374 (window, hash) + 6,595,558,646 (ratio 4, hash) + 20 x 6,580,676,982 (ratio 128) +
    20 x 6,595,558,902 (ratio 4); embedding and head 2 x 129,280 x 4096; final norm 4096; hc_head 16 x 4096 + 4 + 1.
    Main model: 284,332,240,471, which the model card's 284B rounds (AlexsJones/llmfit @ 3f44fd3 quotes it).
    MTP: e_proj + h_proj 2 x 4096^2 + enorm, hnorm, norm 3 x 4096 + hc_head 65,541 + a window layer with expert bias
    6,576,416,630 = 6,610,048,891; in all 290,942,289,362, exactly the checkpoint's tensor-by-tensor count
    (hebo1221/nano-deepseek-v4 @ 4361b02 : references/DeepSeek-V4-Flash-validation.summary.json,
    logical_parameter_count), and its active count 14,118,225,362 (active_parameter_count) too."""
    c = count_parameters_of(load_config(make_config(from_hf_config("deepseek-ai/DeepSeek-V4-Flash"))))
    assert c.total == 290_942_289_362
    assert c.total - c.mtp == 284_332_240_471
    assert c.mtp == 6_610_048_891
    assert c.active == 14_118_225_362
    lo, hi = published_bounds("284B")
    assert lo <= c.total - c.mtp <= hi
    assert c.hyper_connections == 43 * 786_486 + 65_541


def test_one_layer_of_each_ratio_by_hand():
    """TINY (nw = 1, RMSNorm): norm 64 + q_down 64 x 16 = 1024 + q_norm 16 + q_up 16 x 4 x 32 = 2048 + wkv 64 x 32 =
    2048 + kv_norm 32 + wo_a 8 x 4 x 32 = 1024 + wo_b 2 x 8 x 64 = 1024 + sink 4 = 7284 (ratio 0);
    ratio 4: + compressor 2 x 64 x 2 x 32 + 4 x 2 x 32 + 32 = 8480 + indexer 16 x 2 x 16 + 64 x 2 + (2 x 64 x 2 x 16
    + 4 x 2 x 16 + 16) = 4880, 20,644; ratio 128: + 2 x 64 x 32 + 128 x 32 + 32 = 8224, 15,508. The dense MLP adds
    3 x 64 x 128 + 64 = 24,640."""
    r = _resolved()
    want = {0: 7284, 4: 20_644, 128: 15_508}
    for i, ratio in enumerate((0, 4, 128)):
        kind = r.kinds[r.layer_kinds[i]]
        assert kind == LayerKind("dsv4", "dense", (("cr", ratio),))
        assert dsv4.params(view(r, kind)).total == want[ratio]
        assert sum(kind_params(r, kind)[0]) == want[ratio] + 24_640


def test_hyper_connections_by_hand():
    """n = 2 streams on h 64: each module maps 2 x 64 to n^2 + 2n = 8 values: 8 x 128 = 1024 + bias 8 + 3 alphas =
    1035, two per layer, 2070; the decoder's output contraction 2 x 2 x 64 + 2 + 1 = 259."""
    r = _resolved({"enable_hyper_connections": True, "num_residual_streams": 2})
    assert hyper_connection.params(r).total == 2070 and hyper_connection.head_params(r) == 259
    base = count_parameters_of(load_config(make_config(TINY, {}, {"seq_length": 16, "world_size": 1})))
    c = count_parameters_of(load_config(make_config({**TINY, "enable_hyper_connections": True,
                                                     "num_residual_streams": 2}, {},
                                                    {"seq_length": 16, "world_size": 1})))
    assert c.total - base.total == 3 * 2070 + 259 == c.hyper_connections


def test_sliding_window_layer_activations_by_hand():
    """Layer 0 (ratio 0) at s 16, b 1 (T = 16, bf16 B = 2), the reference kernels (dsa_kernel_backend none):
    norm input and output 2 x 2 x 16 x 64 = 4096; q latent before and after its norm 2 x 2 x 16 x 16 = 1024 and kv
    before its norm 2 x 16 x 32 = 1024; q from q_up 2 x 16 x 4 x 32 = 4096 + its fp32 rstd 4 x 16 x 4 = 256; the
    keys (16 window rows, no compressed ones) 2 x 16 x 32 = 1024; the inverse RoPE's output 4096 and wo_a's output
    2 x 16 x 2 x 8 = 512. The reference sparse attention with k = min(8, 16) = 8 keys per query: gathered keys in
    fp32 4 x 16 x 8 x 32 = 16,384, the fp32 query 4 x 16 x 4 x 32 = 8192, exp scores and weights 8 x 16 x 4 x 8 =
    4096, the int64 gather index 8 x 16 x 8 = 1024, the boolean mask 16 x 8 = 128. Nothing keeps its bf16 query or
    output (Megatron-LM @ d48bd6be : csa.py unfused_compressed_sparse_attn saves their fp32 copies; the inverse RoPE
    clones the output). Sum: 45,952. With fused kernels the last five become the int32 indices 4 x 16 x 8 = 512,
    and CSASparseAttnFunc keeps the query 4096 and the output 4096 with its fp32 log-sum-exp 256: 25,088."""
    r = _resolved()
    kind = r.kinds[r.layer_kinds[0]]
    assert dsv4.activations(view(r, kind), context(r)).saved == 45_952
    r = _resolved({"dsa_kernel_backend": "cudnn"})
    assert dsv4.activations(view(r, kind), context(r)).saved == 25_088


def test_ratio_4_layer_activations_by_hand():
    """Layer 1 (ratio 4, with the indexer) at T = 16, reference kernels: the norm 4096, latents 2048, q from q_up
    4352 as layer 0; the query 2 x 16 x 4 x 32 = 4096, which FusedDSAIndexerLoss keeps (query.detach()); keys 16 + 4
    compressed rows, 2 x 20 x 32 = 1280; wo_a's input and output 4608. The compressor (overlapping, w = 2, width 32):
    its windows of kv and bf16 weights 2 x 2 x 16 x 2 x 32 = 4096, the fp32 softmax 4 x 16 x 2 x 32 = 4096, the
    compressed keys before and after norm 2 x 2 x 4 x 32 = 512: 8704. The indexer: its query 2 x 16 x 2 x 16 = 1024,
    fp32 weights 4 x 16 x 2 = 128, its compressor of width 16 (2048 + 2048 + 256 = 4352), the int64 top-k 8 x 16 x
    min(4, 4) = 512, the window's fp32 log-sum-exp 4 x 16 x 4 = 256, the fp32 causal mask 4 x 16 x 4 = 256: 6528.
    The attention reads k = 8 + 4 = 12 keys: 4 x 16 x 12 x 32 = 24,576 + 8192 + 8 x 16 x 4 x 12 = 6144 + 8 x 16 x 12
    = 1536 + 192 = 40,640. Sum: 76,352.
    Fused (cudnn): the output 4096 + 256 comes back, the core is 4 x 16 x 12 = 768 int32 indices, and the indexer
    keeps the gradients FusedCSAIndexerSparseAttnFunc computes in the forward pass instead (its query's 1024, its
    weights' 2 x 16 x 2 = 64, its keys' 2 x 4 x 16 = 128) with its compressor 4352: 5568. Sum: 39,872."""
    r = _resolved()
    kind = r.kinds[r.layer_kinds[1]]
    assert dsv4.activations(view(r, kind), context(r)).saved == 76_352
    r = _resolved({"dsa_kernel_backend": "cudnn"})
    assert dsv4.activations(view(r, kind), context(r)).saved == 39_872


def test_unfused_backward_working_set_by_hand():
    """The reference attention's backward (Part.backward). At s 16 (layer 0, K = 16 rows of kv_full, k = 8) the
    scores matmul's backward is the larger: 8 x 16 x 8 x 32 = 32,768 + 4 x 16 x 4 x 8 = 2048 + 4 x 16 x 4 x 32 = 8192
    = 43,008 against the gather's 2 x 16 x 16 x 32 = 16,384 + 2 x 16 x 8 x 32 = 8192. At s 64 the gather's zero-filled
    gradient of the expanded keys wins: 2 x 64 x 64 x 32 = 262,144 + 2 x 64 x 8 x 32 = 32,768 = 294,912 (the matmul's
    8 x 64 x 8 x 32 + 4 x 64 x 4 x 8 + 4 x 64 x 4 x 32 = 172,032). Fused kernels: none counted here.
    Megatron-LM @ d48bd6be : csa.py unfused_compressed_sparse_attn gathers from kv_flat.unsqueeze(0).expand(rows,
    -1, -1); PyTorch's gather_backward allocates grad.new_zeros(self.sizes()), [rows, K, d].
    DeepSeek-V4-Flash at s 4096, a ratio-4 layer (K = 4096 + 1024, k = 128 + 512, d 512): 2 x 4096 x 5120 x 512 +
    2 x 4096 x 640 x 512 = 24,159,191,040 bytes (22.5 GiB)."""
    r = _resolved()
    kind = r.kinds[r.layer_kinds[0]]
    assert dsv4.activations(view(r, kind), context(r)).backward == 43_008
    r = _resolved(training={"seq_length": 64})
    assert dsv4.activations(view(r, kind), context(r)).backward == 294_912
    la = layer_activations(r, kind)     # it runs after the MLP's backward freed the MLP's tensors, beside the
    assert la.attention_backward_peak == 294_912 + 2 * 64 * 64 - la.mlp    # residual stream's gradient
    r = _resolved({"dsa_kernel_backend": "cudnn"}, {"seq_length": 64})
    assert dsv4.activations(view(r, kind), context(r)).backward == 0
    flash = make_config(from_hf_config("deepseek-ai/DeepSeek-V4-Flash"), {}, {"seq_length": 4096, "world_size": 1})
    flash["model"]["dsa_kernel_backend"] = "none"
    r = resolve(load_config(flash))
    kind = r.kinds[r.layer_kinds[2]]
    assert view(r, kind).cr == 4
    assert dsv4.unfused_backward(view(r, kind), 4096) == 24_159_191_040


def test_hyper_connection_activations_by_hand():
    """n = 2, T = 16, h 64, bf16: per module the streams 2 x 16 x 2 x 64 = 4096, the sub-layer output 2 x 16 x 64 =
    2048, H_pre/H_post/H_res 2 x 16 x (4 + 4) = 256, the fp32 Sinkhorn input 4 x 16 x 4 = 256: 6656 fused; the
    unfused projection adds the fp32 streams 4 x 16 x 2 x 64 = 8192: 14,848. Two modules per layer, and a full
    recompute checkpoint keeps both streams of the layer input, 2 x 16 x 2 x 64 = 4096."""
    for fused, one in ((True, 6656), (False, 14_848)):
        r = _resolved({"enable_hyper_connections": True, "num_residual_streams": 2, "use_fused_mhc": fused})
        assert hyper_connection.activations(r, context(r), fused).saved == 2 * one
        kind = r.kinds[r.layer_kinds[0]]
        plain = _resolved()
        extra = layer_activations(r, kind).saved - layer_activations(plain, kind).saved
        assert extra == 2 * one
        assert layer_activations(r, kind).checkpoint == 4096


def test_mla_up_proj_recomputes_the_query():
    """mla_up_proj recomputes q from q_up (4096 + 256) and the query (4096), 8448 bytes at once. On layer 0 with the
    reference kernels nothing kept the bf16 query, so 4352 fewer bytes are kept; on layer 1 FusedDSAIndexerLoss kept it
    (the checkpoint discards that storage too), and with fused kernels the attention kept it: 8448 fewer."""
    sel = {"recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"]}
    for model, layer, fewer in (({}, 0, 4352), ({}, 1, 8448), ({"dsa_kernel_backend": "cudnn"}, 0, 8448)):
        r0, r1 = _resolved(model), _resolved(model, sel)
        kind = r0.kinds[r0.layer_kinds[layer]]
        a0, a1 = dsv4.activations(view(r0, kind), context(r0)), dsv4.activations(view(r1, kind), context(r1))
        assert a0.saved - a1.saved == fewer
        assert a1.recompute == 8448


def test_hash_layers_drop_the_expert_bias():
    """A hash-routed MoE layer has no expert bias: 4 experts, 2 hash layers of 3, so 2 x 4 fewer parameters."""
    moe = {"num_experts": 4, "moe_router_topk": 2, "moe_ffn_hidden_size": 32, "moe_router_enable_expert_bias": True}
    a = count_parameters_of(load_config(make_config({**TINY, **moe}, {}, {"seq_length": 16, "world_size": 1})))
    b = count_parameters_of(load_config(make_config({**TINY, **moe, "moe_n_hash_layers": 2}, {},
                                                    {"seq_length": 16, "world_size": 1})))
    assert a.total - b.total == 2 * 4


@pytest.mark.parametrize("model, par, field, words", [
    ({}, {"tensor_model_parallel_size": 2}, "parallelism.tensor_model_parallel_size", "must be 1"),
    ({}, {"context_parallel_size": 2}, "parallelism.context_parallel_size", "packed sequences (THD)"),
    ({"csa_compress_ratios": [0, 4]}, {}, "model.csa_compress_ratios", "at least num_layers"),
    ({"csa_compress_ratios": None}, {}, "model.csa_compress_ratios", "is required"),
    ({"csa_compress_ratios": [0, 8, 4]}, {}, "model.csa_compress_ratios", "or 128 (heavily compressed), got [8]"),
    ({"dsa_kernel_backend": "tilelang"}, {}, "model.dsa_kernel_backend", "not supported with dsv4_hybrid"),
    ({"dsa_indexer_topk": None}, {}, "model.dsa_indexer_topk", "ratio-4 layer"),
    ({"o_groups": 3}, {}, "model.o_groups", "must divide"),
    ({"multi_latent_attention": False}, {}, "model.experimental_attention_variant", "multi_latent_attention"),
    ({"experimental_attention_variant": None}, {}, "model.csa_compress_ratios", "applies only"),
    ({"moe_n_hash_layers": 2}, {}, "model.moe_n_hash_layers", "MoE models"),
])
def test_rules_name_the_field(model, par, field, words):
    t = par.get("tensor_model_parallel_size", 1)
    world = t * par.get("context_parallel_size", 1)
    with pytest.raises(ConfigError) as e:
        load_config(make_config({**TINY, **model}, par, {"seq_length": 16, "world_size": world,
                                                         "sequence_parallel": t > 1}))
    hits = [p for p in e.value.problems if p.field == field]
    assert hits and words in hits[0].message, e.value


def test_importer_reads_native_layer_types_and_refuses_kv_heads():
    """Megatron-Bridge's _dsv4_compress_ratios reads layer_types with compress_rates when compress_ratios is absent
    (sliding_attention 0, compressed_sparse_attention 4, heavily_compressed_attention 128), and appends 0 for the MTP
    layer; num_key_value_heads must be 1."""
    from estimator.formats.hf_catalog import get
    hf = get("deepseek-ai/DeepSeek-V4-Flash").config()
    ratios = hf.pop("compress_ratios")[:43]
    names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
    hf["layer_types"] = [names[x] for x in ratios]
    hf["compress_rates"] = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    assert from_hf_config(hf)["csa_compress_ratios"] == ratios + [0]
    hf["num_key_value_heads"] = 8
    with pytest.raises(UnsupportedError, match="one shared key/value head"):
        from_hf_config(hf)


def test_mhc_recompute_discards_the_streams_and_the_aggregate():
    """recompute_modules [mhc], n = 2, T = 16, h 64, fused: each module discards the streams 2 x 16 x 2 x 64 = 4096
    and the aggregation's output 2 x 16 x 64 = 2048, keeping 6656 - 6144 = 512 (H_pre/H_post/H_res and the Sinkhorn
    input); per layer 1024 kept and 12,288 recomputed. The norms' outputs go as with layernorm: the attention norm's
    2 x 16 x 64 = 2048 bytes."""
    hc = {"enable_hyper_connections": True, "num_residual_streams": 2, "use_fused_mhc": True}
    sel = {"recompute_granularity": "selective", "recompute_modules": ["mhc"]}
    r = _resolved(hc, sel)
    part = hyper_connection.activations(r, context(r), True)
    assert (part.saved, part.recompute) == (1024, 12_288)
    kind = r.kinds[r.layer_kinds[0]]
    plain = _resolved(hc, {"recompute_granularity": "selective", "recompute_modules": []})
    assert dsv4.activations(view(plain, kind), context(plain)).saved - \
        dsv4.activations(view(r, kind), context(r)).saved == 2048
    with pytest.raises(ConfigError, match="mhc needs enable_hyper_connections"):
        load_config(make_config(TINY, {}, {"seq_length": 16, "world_size": 1, **sel}))
    with pytest.raises(ConfigError, match="mhc cannot be used with mlp"):
        load_config(make_config({**TINY, **hc}, {}, {"seq_length": 16, "world_size": 1,
                                                     "recompute_granularity": "selective",
                                                     "recompute_modules": ["mhc", "mlp"]}))


def test_hyper_connection_dropout_mask_spans_the_streams():
    """hidden_dropout 0.1, n = 2, T = 16, h 64: the bias-dropout-add after the H_post merge runs on the n-stream sum
    (Megatron-LM @ d48bd6be (dev) : hyper_connection.py _fused_h_res_h_post_bda_native falls back to
    get_bias_dropout_add on [s, b, n h] when dropout is on), so its bool mask is 2 x 16 x 64 = 2048 B per module, not
    the 16 x 64 = 1024 B of a plain layer: 1024 B more per module, 2048 per layer. With mhc recompute the merge runs
    inside the checkpoint and keeps no mask: 1024 B less per module than the plain layer's count."""
    hc = {"enable_hyper_connections": True, "num_residual_streams": 2, "use_fused_mhc": True}
    def hc_saved(dropout, training=None):
        r = _resolved({**hc, "hidden_dropout": dropout}, training)
        return hyper_connection.activations(r, context(r), True).saved
    assert hc_saved(0.1) - hc_saved(0.0) == 2 * 1024
    sel = {"recompute_granularity": "selective", "recompute_modules": ["mhc"]}
    assert hc_saved(0.1, sel) - hc_saved(0.0, sel) == -2 * 1024


@pytest.mark.parametrize("k, kept, work", [(None, 4096, 49_152), (2, 8192, 32_768), (1, 12_288, 16_384)])
def test_mhc_recompute_groups_keep_their_inputs_and_replay_at_once(k, kept, work):
    """recompute_modules [mhc], the three layers of TINY on one chunk, n = 2, T = 16, h 64, bf16, no dropout.
    Megatron-LM @ d48bd6be (dev) : transformer_block.py _build_mhc_recompute_layer_plan makes groups of
    mhc_recompute_layer_num layers (one group of all 3 by default); each group's input streams stay (the expansion
    of the embedding, or the previous group's last MLP-side merge, which is not checkpointed):
    2 x 16 x 2 x 64 = 4096 B per group. The group's last output carries a hook that replays every checkpoint of the
    group at once: per layer, per module, the streams 4096, the aggregation's output 2048 and the norm's output 2048,
    2 x 8192 = 16,384 B; k layers at once. Groups of 3: kept 4096, replay 3 x 16,384 = 49,152; of 2 (2 + 1 layers):
    8192 and 32,768; of 1: 12,288 and 16,384. PP 1, one micro-batch in flight: the stage keeps the difference."""
    hc = {"enable_hyper_connections": True, "num_residual_streams": 2, "use_fused_mhc": True}
    sel = {"recompute_granularity": "selective", "recompute_modules": ["mhc"], "mhc_recompute_layer_num": k}
    r = _resolved(hc, sel)
    assert hyper_connection.recompute_groups(r, context(r), 3) == (kept, work)
    from estimator import estimate
    def acts(kk):
        cfg = make_config({**TINY, **hc}, {}, {"seq_length": 16, "world_size": 1, **sel,
                                               "mhc_recompute_layer_num": kk})
        return estimate(cfg).stages[0].activations_bytes
    assert acts(k) - acts(None) == kept - 4096
