"""Kimi K3's layers (estimator/model/layers/kimi.py) as Megatron-Bridge @ 067f987d builds them
(src/megatron/bridge/models/kimi/kimi_k3_layers.py, kimi_k3_ops.py, kimi_k3_pipeline.py, kimi_k3_bridge.py), each
figure counted by hand from the module shapes and from what each autograd node saves (fla @ bc3b101d :
fla/ops/kda/chunk.py ``ChunkKDAFunction.forward``'s ``save_for_backward``).

No exact parameter count of Kimi K3 is published (no safetensors total, no model-card figure): the full-model
figure below is a hand count, checked against famB's independent one (2,779,484,476,000 total, about 105.36 B
active).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from estimator import load_config
from estimator.config.errors import ConfigError
from estimator.formats.hf.convert import from_hf_config
from estimator.memory.activations import context, layer_activations
from estimator.memory.assemble import chunk_activations
from estimator.model.layers import LayerKind, kimi, moe, view
from estimator.model.params import count_parameters, count_parameters_of
from estimator.model.resolve import resolve
from tests.conftest import make_config

K3_JSON = Path(__file__).parents[2] / "formats" / "data" / "moonshotai--Kimi-K3_config.json"

#: A small Kimi K3: h 64; KDA 4 heads of 8, convolution 4; MLA 4 heads, q_lora 32, kv_lora 16, qk 8, rope 4, v 8
#: with the output gate; layers 0, 1, 3 KDA and 2 MLA; layer 0 a dense SiTU MLP of 48, the others a latent MoE
#: (4 experts of 16, top-2, latent 32 with its norm, a shared expert of 32); AttnRes every 2 layers; vocabulary 256.
TINY = dict(num_layers=4, hidden_size=64, num_attention_heads=4, vocab_size=256, ffn_hidden_size=48,
            activation_func="situ", multi_latent_attention=True, qk_layernorm=True, q_lora_rank=32, kv_lora_rank=16,
            qk_head_dim=8, qk_pos_emb_head_dim=4, v_head_dim=8, position_embedding_type="none",
            attention_output_gate=True, experimental_attention_variant="kda", linear_attention_freq=[1, 1, 0, 1],
            linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
            linear_conv_kernel_dim=4, attn_res_block_size=2, num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=16,
            moe_shared_expert_intermediate_size=32, moe_latent_size=32, moe_latent_norm=True,
            moe_layer_freq=[0, 1, 1, 1], untie_embeddings_and_output_weights=True)


def _r(model=None, parallelism=None, training=None, precision=None):
    tr = {"seq_length": 64, **(training or {})}
    return resolve(load_config(make_config(model or TINY, parallelism, tr, precision)))


def test_kimi_k3_parameters_from_its_genuine_config_json():
    """moonshotai/Kimi-K3's config.json (ai-dynamo/aiconfigurator @ a77804e3, also catalogued), counted by hand from
    the Bridge module shapes (h 7168, 96 KDA heads of 128, P = 12288, conv 4; MLA 96 heads, q_lora 1536, kv_lora 512,
    qk 128, rope 64, v 128; 896 experts of 3072 in latent 3584, top-16, shared 2 x 3072; dense 33792)::

        KDA, 69 layers   q, k, v, g 4 x 7168 x 12288 = 352,321,536; conv 3 x 12288 x 4 = 147,456;
                         f_a 7168 x 128 = 917,504; f_b 128 x 12288 = 1,572,864; b 7168 x 96 = 688,128;
                         A_log 96; dt_bias 12,288; o_norm 128; o_proj 88,080,384        = 443,740,384
        MLA, 24 layers   q_a 11,010,048 + 1,536; q_b 1536 x 96 x 192 = 28,311,552;
                         kv_a 7168 x 576 = 4,128,768 + 512; kv_b 512 x 96 x 256 = 12,582,912;
                         g 88,080,384; o 88,080,384                                     = 232,196,096
        MoE, 92 layers   router 896 x 7168 = 6,422,528 + expert bias 896; latent 2 x 7168 x 3584 = 51,380,224;
                         routed norm 3,584; experts 896 x 3 x 3584 x 3072 = 29,595,009,024;
                         shared 3 x 7168 x 6144 = 132,120,576                           = 29,784,936,832
        dense MLP, 1     3 x 7168 x 33792                                               = 726,663,168
        per layer        input and pre-MLP norms 14,336; AttnRes 4 x 7168 = 28,672      x 93 = 3,999,744
        once             output AttnRes 14,336; final norm 7,168; embedding and output 2 x 1,174,405,120

    total 30,618,086,496 + 5,572,706,304 + 2,740,214,188,544 + 726,663,168 + 3,999,744 + 21,504 + 2,348,810,240
    = 2,779,484,476,000; active: each MoE layer's 896 experts replaced by 16 (16 x 33,030,144): 105,364,017,760."""
    m = from_hf_config(json.loads(K3_JSON.read_text()))
    p = count_parameters_of(make_config(m, training={"seq_length": 4096}))
    assert p.total == 2_779_484_476_000
    assert p.active == 105_364_017_760
    assert (p.dense_layers, p.moe_layers) == (1, 92)
    assert p.attn_res == 93 * 28_672 + 14_336
    kinds = p.layer_kinds
    assert sum(n for k, n in kinds.items() if k.startswith("Kimi delta attention")) == 69
    assert sum(n for k, n in kinds.items() if k.startswith("gated MLA")) == 24


def test_per_layer_modules_of_kimi_k3():
    """The same per-module figures, without the layer's input norm (7,168) the token-mixer modules carry."""
    m = from_hf_config(json.loads(K3_JSON.read_text()))
    r = resolve(load_config(make_config(m, training={"seq_length": 4096})))
    assert kimi.KDA.params(r).total - 7168 == 443_740_384
    assert kimi.MLA.params(r).total - 7168 == 232_196_096
    assert moe.params(r).total + moe.expert_params(r).total - 7168 == 29_784_936_832


def test_small_model_parameters_by_hand():
    """TINY, by hand::

        KDA    4 x 64 x 32 + 3 x 32 x 4 + 64 x 8 + 8 x 32 + 64 x 4 + 4 + 32 + 8 + 32 x 64 + norm 64 = 11,756
        MLA    64 x 32 + 32 + 32 x 4 x 12 + 64 x 20 + 16 + 16 x 4 x 16 + 64 x 32 + 32 x 64 + norm 64 = 10,096
        dense  64 x 96 + 48 x 64 + norm 64                                                         = 9,280
        MoE    router 256, latent 2 x 2048 + norm 32, shared 64 x 64 + 32 x 64, norm 64 = 10,592;
               experts 4 x (32 x 32 + 16 x 32) = 6,144                                             = 16,736
        AttnRes 4 x 256 + 128; embedding and output 2 x 256 x 64; final norm 64

    3 x 11,756 + 10,096 + 9,280 + 3 x 16,736 + 1,152 + 32,768 + 64 = 138,836; active: 2 of the 4 experts,
    3 x 3,072 fewer = 129,620."""
    p = count_parameters(_r())
    assert p.total == 138_836
    assert p.active == 129_620


def test_tensor_parallel_split_of_kda():
    """TP 2: q/k/v/g, the convolutions, f_b, b_proj, A_log, dt_bias and o_proj split (11,172 / 2 = 5,586); f_a
    ("duplicated"), o_norm and the input norm stay whole (512 + 8 + 64 = 584): 6,170 per rank."""
    r = _r(parallelism={"tensor_model_parallel_size": 2}, training={"world_size": 2})
    assert kimi.KDA.params(r).per_rank(2) == 6_170


def test_kda_activations_per_saved_tensor():
    """One micro-batch of 64 tokens, TP 1, bf16 (B 2), P = 32, n = 4, d = 8::

        input norm       2 x 64 x 64 + 4 x 64 (rstd)                                  = 8,448
        its output       2 x 64 x 64 (every projection's saved input)                 = 8,192
        q/k/v proj out   3 x 2 x 64 x 32 (the convolutions' saved inputs)              = 12,288
        f_a output       2 x 64 x 8                                                    = 1,024
        chunk_kda        q, k (l2-normed), v, g: 4 x 2 x 64 x 32 = 16,384; q_rstd, k_rstd, beta (fp32):
                         3 x 4 x 64 x 4 = 3,072; Aqk, Akk: 2 x 2 x 64 x 4 x 64 = 65,536 = 84,992
        gated norm       output and gate 2 x 2 x 64 x 32 + rstd 4 x 64 x 4             = 9,216
        o_proj input     2 x 64 x 32                                                   = 4,096

    128,256 B."""
    r = _r()
    a = kimi.KDA.activations(r, context(r)._replace(parts=True))
    assert a.named == {"norm_in": 8_448, "norm_out": 8_192, "qkv_proj": 12_288, "f_a": 1_024, "chunk_kda": 84_992,
                       "gated_norm": 9_216, "attn_out": 4_096}
    assert a.saved == 128_256


def test_gated_mla_activations_per_saved_tensor():
    """64 tokens, B 2, 4 heads::

        input norm 8,448 and output 8,192
        KimiRMSNorm q: (4 + 2 x 2) x 64 x 32 + 256 = 16,640; kv: 8 x 64 x 16 + 256 = 8,448   = 25,088
        q, k (12 wide), v (8 wide): 2 x 64 x 4 x 32 = 16,384; output 2 x 64 x 4 x 8 = 4,096; lse 4 x 64 x 4 = 1,024
        gate: sigmoid output and gated product 2 x 2 x 64 x 4 x 8 = 8,192

    71,424 B."""
    r = _r()
    assert kimi.MLA.activations(r, context(r)).saved == 71_424


def test_attn_res_rows_and_aggregation():
    """Block size 2, 4 layers: layer 0 normalises its input (no bank) and writes it (1 row + prefix = 2 for the MLP);
    layer 1 sees 1 snapshot (2, 2); layer 2 sees 1 and writes (2, 3); layer 3 sees ceil(3 / 2) = 2 (3, 3) and
    aggregates the output (3). One aggregation of R rows keeps rows.float() and the normalised rows (fp32,
    8 R Tn h), rsqrt and softmax outputs (8 R Tn), the fp32 score weight and the two fp32 weight copies it is the
    product of (12 h): R = 3, Tn = 64, h = 64: 98,304 + 1,536 + 768 = 100,608 B; layer 3 holds one before attention
    and two after."""
    assert kimi.attn_res_rows(4, 2) == ((0, 2, 0), (2, 2, 0), (2, 3, 0), (3, 3, 3))
    r = _r()
    assert r.kinds[r.layer_kinds[3]].var == (("ar", (3, 3, 3)),)
    assert kimi.attn_res_activations(view(r, r.kinds[r.layer_kinds[3]]), context(r)) == (100_608, 201_216)


def test_situ_keeps_six_fp32_intermediates():
    """The dense SiTU MLP (f 48, 64 tokens): norm input and output 2 x 8,192, SiTU's six fp32 tensors
    24 x 64 x 48 = 73,728 (fc1's output is not kept), fc2's input 2 x 64 x 48 = 6,144: 96,256 B; layer 0's MLP part
    adds its AttnRes aggregation of 2 rows, 2 x 33,280 + 768 = 67,328."""
    r = _r()
    a = layer_activations(r, LayerKind("kda", "dense", (("ar", (0, 2, 0)),)))
    assert a.mlp == 96_256 + 67_328


def test_a_later_stage_keeps_the_packed_bank():
    """PP 2: stage 1 starts at layer 2 and receives the prefix and ceil(2 / 2) = 1 snapshot, (1 + 1) x 2 x 64 x 64
    = 16,384 B per micro-batch, kept by the schedule for the backward pass."""
    r = _r(parallelism={"pipeline_model_parallel_size": 2}, training={"world_size": 2})
    assert kimi.boundary_bytes(r, 2, context(r)) == 16_384
    assert kimi.boundary_bytes(r, 0, context(r)) == 0


@pytest.mark.parametrize("section,field,value,where", [
    ("parallelism", "context_parallel_size", 2, "parallelism.context_parallel_size"),
    ("training", "recompute_granularity", "full", "training.recompute_granularity"),
    ("precision", "fp8", True, "precision.fp8"),
    ("parallelism", "virtual_pipeline_model_parallel_size", 2, "parallelism.virtual_pipeline_model_parallel_size"),
    ("training", "cpu_offloading", True, "training.cpu_offloading"),
    ("training", "cuda_graph_impl", "transformer_engine", "training.cuda_graph_impl"),
])
def test_unmodelled_combinations_are_refused_by_name(section, field, value, where):
    """Megatron-Bridge's own refusals (CP with KDA, VPP) and the combinations whose activations are not derived."""
    cfg = make_config(TINY, training={"seq_length": 64})
    cfg[section][field] = value
    if field == "context_parallel_size":
        cfg["training"]["world_size"] = 2
    if field == "virtual_pipeline_model_parallel_size":
        cfg["parallelism"]["pipeline_model_parallel_size"] = 2
        cfg["training"]["world_size"] = 2
    if field == "fp8":
        cfg["precision"]["fp8_recipe"] = "tensorwise"
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        load_config(cfg)


def test_kimi_fields_need_kimi_delta_attention():
    plain = dict(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=256)
    with pytest.raises(ConfigError, match=r"model\.attn_res_block_size.*needs experimental_attention_variant kda"):
        load_config(make_config({**plain, "attn_res_block_size": 12}))
    with pytest.raises(ConfigError, match=r"model\.activation_func.*situ"):
        load_config(make_config({**plain, "activation_func": "situ"}))
    with pytest.raises(ConfigError, match=r"model\.moe_latent_norm.*moe_latent_size"):
        load_config(make_config({**plain, "moe_latent_norm": True}))


def test_chunk_activations_add_the_boundary_on_later_stages():
    """Stage 1 of PP 2 (layers 2, 3) holds 16,384 B more than its layers' own activations."""
    r = _r(parallelism={"pipeline_model_parallel_size": 2}, training={"world_size": 2})
    acts = [layer_activations(r, kind) for kind in r.kinds]
    counts = tuple(sum(1 for i in (2, 3) if r.layer_kinds[i] == k) for k in range(len(r.kinds)))
    own = sum(n * (acts[k].attention + acts[k].mlp) for k, n in enumerate(counts))
    assert chunk_activations(r, range(2, 4), counts, acts)[0] == own + 16_384


def test_parameters_per_gpu_as_bridge_splits_them():
    """TP 2, EP 2, ETP 1, 2 GPUs, by hand (kimi_k3_bridge.py's mappings: column/row-parallel q, k, v, g, f_b, b,
    conv, A_log, dt_bias, q_b, kv_b, o; replicated f_a, o_norm, q_a, kv_a, their norms, the AttnRes modules, the
    router and the latent projections; experts split over EP)::

        layer 0  KDA 11,172 / 2 + 584 = 6,170; dense MLP 9,216 / 2 + norm 64 = 4,672; AttnRes 256    = 11,098
        layer 1  KDA 6,170; MoE router 256 + latent 4,096 + norm 32 + shared 6,144 / 2 + norm 64 = 7,520;
                 AttnRes 256                                                                     = 13,946
        layer 2  MLA (1,536 + 1,024 + 2,048 + 2,048) / 2 + 2,048 + 32 + 1,280 + 16 + 64 = 6,768; MoE 7,520;
                 AttnRes 256                                                                     = 14,544
        layer 3  as layer 1                                                                      = 13,946
        embedding and output 2 x 256 x 64 / 2 = 16,384; final norm 64 + output AttnRes 128 = 192

    70,110 dense-parallel parameters per GPU, and 3 MoE layers x 6,144 / 2 = 9,216 routed-expert parameters."""
    from estimator.memory.assemble import parameter_layout
    r = _r(parallelism={"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2,
                        "expert_tensor_parallel_size": 1}, training={"world_size": 2, "sequence_parallel": True})
    per_kind, emb, vocab, norm = parameter_layout(r)[:4]
    dense = sum(per_kind[k][0] for k in r.layer_kinds) + emb + vocab + norm
    experts = sum(per_kind[k][2] for k in r.layer_kinds)
    assert (dense, experts) == (70_110, 9_216)
