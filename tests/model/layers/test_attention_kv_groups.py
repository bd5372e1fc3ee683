"""Fewer key/value heads than tensor-parallel ranks (t a multiple of g), as Megatron-Core runs it.

Megatron-LM @ d98e8a64 : megatron/core/transformer/transformer_config.py ``__post_init__`` accepts g a multiple or
a divisor of t; megatron/core/transformer/attention.py builds the fused QKV weight as one column-parallel linear of
(a + 2g) dh outputs split evenly over t (nothing replicated), and with g < t each rank all-gathers the QKV output,
takes its group's slice and attends with its a / t query heads and one key/value head.

The model of every test: h 256, a 8 query heads in g 2 groups, head width dh 32, SwiGLU ffn 512, vocabulary
1024, 2 layers, RMSNorm, no biases, bf16, s 128, b 1 (T = 128 tokens), TP 4, no sequence parallelism.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_config
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.megatron_args import read_megatron_args
from estimator.memory.activations import context, layer_activations
from estimator.model.layers import attention
from estimator.model.resolve import resolve
from tests.conftest import make_config

MODEL = dict(num_layers=2, hidden_size=256, num_attention_heads=8, num_query_groups=2, ffn_hidden_size=512,
             vocab_size=1024, max_position_embeddings=512)
TRAIN = dict(world_size=4, micro_batch_size=1, global_batch_size=1, seq_length=128, sequence_parallel=False,
             use_distributed_optimizer=False)


def _cfg(t=4, model=None, **training):
    return make_config({**MODEL, **(model or {})}, {"tensor_model_parallel_size": t}, {**TRAIN, "world_size": t,
                       **training}, {"params_dtype": "bf16"})


def test_per_rank_weights_gradients_and_optimizer_states_by_hand():
    """Per rank at TP 4: QKV (8 + 2 + 2) x 32 = 384 outputs / 4 = 96 rows x 256 = 24,576; output projection
    256 x (8 / 4 x 32 = 64) = 16,384; MLP 3 x 256 x 512 / 4 = 98,304; per layer 139,264, two layers 278,528;
    embedding (tied) 1024 / 4 x 256 = 65,536; norms (replicated) 2 x 2 x 256 + 256 = 1,280. Total
    345,344 parameters: bf16 weights 690,688 bytes, fp32 gradients 1,381,376 bytes, Adam (fp32 master, two
    moments, no distributed optimizer) 12 x 345,344 = 4,144,128 bytes. The whole model is unchanged by TP:
    embedding 262,144 + attention 2 x (98,304 + 65,536) = 327,680 + MLP 786,432 + norms 1,280 = 1,377,536."""
    d = estimate(_cfg()).to_dict()
    s = d["stages"][0]
    assert d["parameters"]["total"] == 1_377_536
    assert d["parameters"]["attention"] == 327_680
    assert s["parameters"] == 345_344
    assert (s["weights_bytes"], s["gradients_bytes"], s["optimizer_bytes"]) == (690_688, 1_381_376, 4_144_128)
    r = resolve(load_config(_cfg()))
    assert attention.linear_shapes(r) == ((96, 256, 1), (256, 64, 1))


def test_per_rank_attention_activations_by_hand():
    """B 2 bytes, T 128. Each rank attends with 8 / 4 = 2 query heads and one key/value head (Resolved.kv):
    norm input 2 x 128 x 256 = 65,536, norm output (kept by the fused QKV linear) 65,536; q, k, v as flash
    attention saves them 2 x 128 x (2 + 1 + 1) x 32 = 32,768; attention output 2 x 128 x 2 x 32 = 16,384;
    log-sum-exp 4 x 128 x 2 = 1,024. Total 181,248 bytes. The backward's working set: the gradient of the
    all-gathered QKV output 2 x 128 x 384 = 98,304, the reduce-scatter's torch.cat copy of it (98,304) and the
    reduce-scattered share 2 x 128 x 96 = 24,576, beside the residual stream's gradient 2 x 128 x 256 = 65,536:
    286,720 bytes, above the MLP's (fc1 output gradient 2 x 128 x 2 x 128 = 65,536 and two residual-sized
    2 x 2 x 128 x 256 = 131,072: 196,608), so the layer's."""
    r = resolve(load_config(_cfg()))
    assert r.kv == 1
    la = layer_activations(r, r.kinds[0], parts=True)
    assert la.attention == 181_248
    assert (la.parts["qkv"], la.parts["attn_out"], la.parts["lse"]) == (32_768, 16_384, 1_024)
    part = attention.activations(r, context(r))
    assert part.work == 286_720
    assert la.backward_peak == 286_720


def test_at_tp_equal_to_groups_nothing_is_gathered():
    """TP 2 (g = t): one key/value head per rank from its own columns, no all-gather and no extra working set;
    q, k, v 2 x 128 x (4 + 1 + 1) x 32 = 49,152 bytes."""
    r = resolve(load_config(_cfg(t=2)))
    part = attention.activations(r, context(r))
    assert r.kv == 1 and part.work == 0
    assert layer_activations(r, r.kinds[0], parts=True).parts["qkv"] == 49_152


@pytest.mark.parametrize("t", [4, 8])
def test_tp_a_multiple_of_the_groups_is_accepted(t):
    load_config(_cfg(t=t))


def test_megatron_core_refusals_stay():
    """g neither a multiple nor a divisor of t: Megatron-Core's TransformerConfig raises; a QKV width t does not
    divide: ColumnParallelLinear's divide asserts ((16 + 2 x 2) x 2 = 40 outputs over 16 ranks)."""
    with pytest.raises(ConfigError, match=r"num_query_groups \(3\) must be a multiple or a divisor of "
                                          r"tensor_model_parallel_size \(4\)"):
        load_config(_cfg(t=4, model={"num_attention_heads": 12, "num_query_groups": 3, "hidden_size": 384}))
    with pytest.raises(ConfigError, match=r"fused QKV projection's 40 outputs must still be divisible by 16"):
        load_config(_cfg(t=16, model={"num_attention_heads": 16, "kv_channels": 2}))


def test_mimo_value_heads_refuse_fewer_kv_heads_than_ranks():
    """MiMo-V2-Flash's attention (v_channels) splits the rank's own QKV output without the all-gather."""
    with pytest.raises(ConfigError, match="v_channels: MiMo-V2-Flash's attention"):
        load_config(_cfg(t=4, model={"v_channels": 16}))


FLAGS = """--num-layers 2 --hidden-size 256 --ffn-hidden-size 512 --num-attention-heads 8 --group-query-attention
--num-query-groups 2 --swiglu --disable-bias-linear --normalization RMSNorm --position-embedding-type rope
--vocab-size 1024 --max-position-embeddings 512 --seq-length 128 --micro-batch-size 1 --global-batch-size 1
--tensor-model-parallel-size 4 --bf16 --cross-entropy-loss-fusion"""

BRIDGE = {"model": {"num_layers": 2, "hidden_size": 256, "ffn_hidden_size": 512, "num_attention_heads": 8,
                    "num_query_groups": 2, "gated_linear_unit": True, "add_bias_linear": False,
                    "activation_func": {"_target_": "torch.nn.functional.silu", "_call_": False},
                    "normalization": "RMSNorm", "position_embedding_type": "rope", "vocab_size": 1024,
                    "seq_length": 128, "tensor_model_parallel_size": 4},
          "train": {"micro_batch_size": 1, "global_batch_size": 1},
          "mixed_precision": "bf16_mixed"}


def test_megatron_flags_and_bridge_config_accept_it_and_agree():
    """Megatron-LM's flags and a Megatron-Bridge configuration of the same run (TP 4 over 2 key/value heads)
    both import and give the same per-stage device bytes."""
    lm = read_megatron_args(FLAGS, world_size=4).config
    br = read_bridge_config(BRIDGE, world_size=4).config
    assert lm["model"]["num_query_groups"] == br["model"]["num_query_groups"] == 2
    assert lm["parallelism"]["tensor_model_parallel_size"] == br["parallelism"]["tensor_model_parallel_size"] == 4
    peaks = [[s["device_bytes"] for s in estimate(c).to_dict()["stages"]] for c in (lm, br)]
    assert peaks[0] == peaks[1]


def test_layout_search_offers_tp_above_the_key_value_heads():
    """The layout search's TP candidates include TP 4 and 8 over 2 key/value heads (8 query heads), and each layout
    it reports estimates to its reported peak."""
    from estimator.plan.search import search
    res = search(MODEL, num_gpus=8, gpu="H100-80GB", seq_length=128, global_batch_size=8, top=None, pp=1, cp=1,
                 mbs=1)
    tps = {lay.tp for lay in res.layouts}
    assert {4, 8} <= tps
    for lay in res.layouts:
        if lay.tp in (4, 8):
            assert estimate(lay.config).peak.device_bytes == lay.peak_device_bytes


def test_hugging_face_import_at_tp_16_over_8_key_value_heads():
    """Meta-Llama-3-8B (32 query heads, 8 key/value heads of 128, h 4096, SwiGLU 14336, 32 layers, untied
    vocabulary 128,256) at TP 16. Published total 8,030,261,248 parameters; the vocabulary pads to 129,024 (a
    multiple of 128 x 16), 6,291,456 more. Per rank: per layer QKV 4096 x (32 + 2 x 8) x 128 / 16 = 1,572,864,
    output projection 4096 x 4096 / 16 = 1,048,576, MLP 3 x 4096 x 14336 / 16 = 11,010,048, norms 2 x 4096 =
    8,192: 13,639,680, x 32 = 436,469,760; embedding and output layer 2 x 129,024 x 4096 / 16 = 66,060,288;
    final norm 4,096. Total 502,534,144."""
    from estimator.formats.hf.convert import from_hf_config
    m = from_hf_config("meta-llama/Meta-Llama-3-8B")
    d = estimate(make_config(m, {"tensor_model_parallel_size": 16},
                             {"world_size": 16, "seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 1,
                              "sequence_parallel": True})).to_dict()
    assert d["parameters"]["total"] - d["parameters"]["vocab_padding"] == 8_030_261_248
    assert d["stages"][0]["parameters"] == 502_534_144


def test_gemma4_global_layers_at_tp_above_their_key_value_heads():
    """Gemma 4's global layers are Megatron-Core SelfAttention with their own key/value heads (Megatron-Bridge @
    067f987d : gemma/modeling_gemma4.py slices the gathered queries the same way): TP 4 over 2 global key/value
    heads is accepted, 3 is refused by Megatron-Core's rule. Per rank the global layers' QKV weight is
    64 x (4 + 2 x 2) x 32 / 4 = 4,096 elements (heads 32 wide); the sliding layers' (4 groups of 16)
    64 x (4 + 2 x 4) x 16 / 4 = 3,072."""
    base = dict(num_layers=4, hidden_size=64, num_attention_heads=4, kv_channels=16, ffn_hidden_size=128,
                vocab_size=256, global_attention_freq=2, global_kv_channels=32)
    par, tr = {"tensor_model_parallel_size": 4}, {"world_size": 4, "sequence_parallel": False}
    cfg = load_config(make_config({**base, "num_global_query_groups": 2}, par, tr))
    r = resolve(cfg)
    from estimator.model.layers import view
    widths = sorted({attention.linear_shapes(view(r, k))[0][0] * 64 for k in r.kinds})
    assert widths == [3_072, 4_096]
    with pytest.raises(ConfigError, match=r"num_global_query_groups \(3\) must be a multiple or a divisor of "
                                          r"tensor_model_parallel_size \(4\)"):
        load_config(make_config({**base, "num_attention_heads": 12, "hidden_size": 192,
                                 "num_global_query_groups": 3}, par, tr))
