"""The layer kinds beyond a plain GPT layer (estimator/model/layers/, estimator/config/hybrid_pattern.py, estimator/config/rules/):
parameters and their tensor-parallel split, activations by hand, hybrid patterns and their pipeline split, and the
importers (Hugging Face config.json, Megatron-LM flags) for them.

Small models are counted by hand in each docstring from the tensors Megatron-Core builds (the module cited);
latent MoE against Megatron-LM's own unit-test vector.
"""

from __future__ import annotations

import pytest

from estimator import (ConfigError, UnsupportedError, count_parameters_of, estimate, from_hf_config, list_presets,
                       load_config, load_preset)
from estimator.memory.activations import layer_activations
from estimator.model.layers import LayerKind
from estimator.formats.megatron_args import read_megatron_args, to_megatron_args
from estimator.model.resolve import resolve
from tests.conftest import make_config

#: A two-layer hybrid (Mamba-2 then MLP): h 64, Mamba 8 heads of 16 (inner width 128), 2 groups, state 8.
HYBRID = dict(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256,
              hybrid_layer_pattern="M-", mamba_num_heads=8, mamba_head_dim=16, mamba_num_groups=2, mamba_state_dim=8,
              activation_func="squared_relu", gated_linear_unit=False, position_embedding_type="none")
#: A two-layer GPT model whose first layer is a gated delta net: 2 key heads of 16, 4 value heads of 8.
GDN = dict(num_layers=2, hidden_size=64, num_attention_heads=4, kv_channels=16, ffn_hidden_size=128, vocab_size=256,
           experimental_attention_variant="gdn", linear_attention_freq=[1, 0], linear_num_key_heads=2,
           linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8)


def _acts(model: dict, kind: LayerKind, **training):
    r = resolve(load_config(make_config(model, training={"seq_length": 256, **training})))
    return layer_activations(r, kind)


# --- Mamba-2 ------------------------------------------------------------------------------------------------

def test_mamba_mixer_parameters_and_their_tensor_parallel_split():
    """MambaMixer (mamba_mixer.py): in_proj 64 x (2*128 + 2*2*8 + 8) = 18,944; conv1d (128 + 32) x 4 = 640 and its
    bias 160; dt_bias, A_log, D 3 x 8 = 24; the gated norm 128; out_proj 128 x 64 = 8,192: 28,088, all split over
    the tensor-parallel ranks (heads and groups are); the fused input norm 64 is replicated. The gated norm's 128
    weights count under norms. The MLP layer: 2 x 64 x 128 + norm 64; the embedding (tied) 256 x 64; final norm."""
    c = count_parameters_of(make_config(HYBRID))
    assert c.mamba == 28_088 - 128 and c.layer_kinds == {"Mamba": 1, "MLP": 1}
    assert c.total == 28_088 + 64 + 2 * 64 * 128 + 64 + 256 * 64 + 64
    one = estimate(make_config(HYBRID, training={"seq_length": 256})).stages[0].parameters
    two = estimate(make_config(HYBRID, {"tensor_model_parallel_size": 2}, {"seq_length": 256, "world_size": 2})
                   ).stages[0].parameters
    # At TP 2 (vocabulary 256 pads to 256): Mamba 28,088 / 2 + 64, MLP 16,384 / 2 + 64, embedding 16,384 / 2,
    # final norm 64.
    assert one - two == 28_088 // 2 + 16_384 // 2 + 16_384 // 2
    assert two == 14_044 + 64 + 8_192 + 64 + 8_192 + 64


def test_mamba_activations_by_hand():
    """s 256, b 1, TP 1, bf16 (2 B), no dropout, widths from HYBRID (in_proj output 296, inner 128, 2 groups):
    input norm 2*256*64 in + 2*256*64 out = 65,536; zxBCdt 2*256*296 = 151,552 (saved by
    mamba_split_conv1d_scan_combined); out_x 2*256*128 = 65,536; gated norm input 65,536 and rstd 4*256*2 = 2,048;
    out_proj input 65,536: 415,744 B. Backward working set: zxBCdt gradient 151,552 + recomputed convolution
    output 2*256*160 = 81,920 + chunk states and gradients 8*1*2 chunks*8 heads*16*8 = 16,384 + C B^T
    4*1*2*2 groups*128^2 = 262,144 + dt and cumsum 8*1*8*256 = 16,384 = 528,384 B."""
    a = _acts(HYBRID, LayerKind("mamba", ""))
    assert a.attention == 415_744 and a.mlp == 0
    assert a.backward_peak == 528_384
    assert a.checkpoint == 2 * 256 * 64


def test_mamba_without_the_fused_scan_by_hand():
    """use_mamba_mem_eff_path false (--disable-mamba-mem-eff-path; Megatron-LM @ d98e8a64 : mamba_mixer.py
    MambaMixer._static_prefill), the case above (s 256, b 1, TP 1, bf16, di 128, g 2, N 8, nh 8, 2 chunks of 128):
    input norm in and out 65,536; the convolution's input, xBC transposed, 2*256*160 = 81,920 (causal_conv1d saves
    it); the chunked scan's x 2*256*128 = 65,536, B and C 2*2*256*16 = 16,384, dt 2*256*8 = 4,096 and fp32
    dA_cumsum 4*1*8 heads*2*128 = 8,192; its output 65,536; the gated norm's input y 65,536, gate z 65,536 and rstd
    4*256*2 = 2,048; out_proj's input 65,536: 505,856 B, 90,112 more than the fused path's 415,744. Each rule and
    the Megatron-LM flag: context parallelism needs the gated norm on this path (MambaMixer asserts it)."""
    a = _acts(dict(HYBRID, use_mamba_mem_eff_path=False), LayerKind("mamba", ""))
    assert a.attention == 505_856 == 415_744 + 90_112
    with pytest.raises(ConfigError, match="use_mamba_mem_eff_path"):
        load_config(make_config(dict(HYBRID, use_mamba_mem_eff_path=False, mamba_gated_norm=False),
                                {"context_parallel_size": 2}, {"world_size": 2}))
    imp = read_megatron_args("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 256 "
                             "--max-position-embeddings 256 --vocab-size 256 --hybrid-layer-pattern M- --bf16 "
                             "--mamba-num-heads 8 --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 8 "
                             "--disable-mamba-mem-eff-path", world_size=1)
    assert imp.config["model"]["use_mamba_mem_eff_path"] is False
    assert "--disable-mamba-mem-eff-path" in to_megatron_args(imp.config)


def test_mamba_rules_follow_mamba_mixer():
    """MambaMixer asserts heads and groups divide by TP and groups divide heads."""
    bad = dict(HYBRID, mamba_num_groups=3)
    with pytest.raises(ConfigError, match="mamba_num_groups"):
        load_config(make_config(bad))
    with pytest.raises(ConfigError, match=r"Mamba heads \(8\) must be divisible by tensor_model_parallel_size"):
        load_config(make_config(HYBRID, {"tensor_model_parallel_size": 16}, {"world_size": 16}))


# --- gated delta net ------------------------------------------------------------------------------------------

def test_gated_delta_net_parameters():
    """GatedDeltaNet (gated_delta_net/common.py): in_proj 64 x (2*32 + 2*32 + 2*4) = 8,704, conv1d (2*32 + 32) x 4
    = 384 (no bias), dt_bias and A_log 2 x 4, out_proj 32 x 64 = 2,048: 11,144 split over TP; the input norm 64 and
    the out norm over one value head (8) replicated. The attention layer: QKV 64 x (4 + 8) x 16 + out 64 x 64 + norm."""
    c = count_parameters_of(make_config(GDN))
    assert c.linear_attention == 11_144
    assert c.attention == 64 * 12 * 16 + 64 * 64
    assert c.layer_kinds == {"gated delta net + MLP": 1, "attention + MLP": 1}
    assert c.norms == (64 + 8) + 64 + 2 * 64 + 64     # GDN norms, attention input norm, 2 pre-MLP norms, final


def test_gated_delta_net_activations_by_hand():
    """s 256, TP 1, bf16 (widths qk 32, v 32, 4 value heads of 8, keys of 16): input norm 65,536; in_proj output
    2*256*136 = 69,632; convolution output 2*256*96 = 49,152; q, k repeated to 4 heads and v 2*256*(2*4*16 + 32) =
    81,920; g 4*256*4 = 4,096 and beta 2*256*4 = 2,048; WY factors 2*256*4*64 = 131,072; rule output and gate
    2*2*256*32 = 32,768; norm rstd 4,096; out_proj input 2*256*32 = 16,384: 456,704 B."""
    assert _acts(GDN, LayerKind("gdn", "")).attention == 456_704


def test_linear_attention_freq_int_and_list_agree():
    """Megatron-Core's get_linear_attention_pattern: freq 4 makes layers 3, 7, ... full attention."""
    m = dict(GDN, num_layers=8, linear_attention_freq=4)
    r = resolve(load_config(make_config(m)))
    assert [r.kinds[k].mixer for k in r.layer_kinds] == ["gdn"] * 3 + ["attention"] + ["gdn"] * 3 + ["attention"]
    lst = dict(m, linear_attention_freq=[1, 1, 1, 0] * 2)
    assert count_parameters_of(make_config(m)) == count_parameters_of(make_config(lst))
    with pytest.raises(ConfigError, match="linear_attention_freq.*required"):
        load_config(make_config(dict(GDN, linear_attention_freq=None)))
    with pytest.raises(ConfigError, match="linear_num_value_heads"):
        load_config(make_config(dict(GDN, linear_num_value_heads=3)))


# --- attention variants, MoE variants -------------------------------------------------------------------------

BASE = dict(num_layers=2, hidden_size=64, num_attention_heads=4, kv_channels=16, ffn_hidden_size=128, vocab_size=256)


def test_learned_sinks_are_one_logit_per_head_split_over_tp():
    """TEDotProductAttention.softmax_offset: a per layer, [a / t] on each tensor-parallel rank."""
    plain = count_parameters_of(make_config(BASE))
    sinks = count_parameters_of(make_config(dict(BASE, softmax_type="learnable")))
    assert sinks.attention - plain.attention == 2 * 4
    tp = {"tensor_model_parallel_size": 2}
    a = estimate(make_config(BASE, tp, {"world_size": 2})).stages[0].parameters
    b = estimate(make_config(dict(BASE, softmax_type="learnable"), tp, {"world_size": 2})).stages[0].parameters
    assert b - a == 2 * 4 // 2


def test_attention_output_gate_parameters_and_activations():
    """attention.py: linear_qkv grows by a x kv_channels outputs (64 x 4 x 16 per layer); _apply_output_gate keeps
    the contiguous gate and its output is a new tensor the output projection saves: 2 x 2 B x 256 x 4 x 16."""
    gated = dict(BASE, attention_output_gate=True)
    assert count_parameters_of(make_config(gated)).attention - count_parameters_of(make_config(BASE)).attention \
        == 2 * 64 * 4 * 16
    kind = LayerKind("attention", "dense")
    assert _acts(gated, kind).attention - _acts(BASE, kind).attention == 2 * 2 * 256 * 4 * 16


def test_router_bias_with_add_bias_linear():
    """TopKRouter (moe/router.py) has an E-element bias when add_bias_linear; experts have fc1 (2 x fm when gated)
    and fc2 (h) biases each."""
    moe = dict(BASE, num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=32)
    a, b = count_parameters_of(make_config(moe)), count_parameters_of(make_config(dict(moe, add_bias_linear=True)))
    assert b.moe_router - a.moe_router == 2 * 4
    assert b.moe_experts - a.moe_experts == 2 * 4 * (2 * 32 + 64)


def test_latent_moe_matches_megatron_lm_unit_test():
    """Megatron-LM tests/unit_tests/training/test_weight_and_optimizer_memory.py accounts_for_latent_moe_experts
    (shared/reference/formula-vectors.md 3.1): h 8, 2 heads of 4, ffn and expert width 16, 4 experts, shared 8,
    layers [dense, MoE], vocabulary 32 tied, RMSNorm, no gating or biases, TP 2, EP 2, expert TP 4, latent 4.
    Routed experts 4 x (4 x 16 + 16 x 4) = 512 (1,024 without the latent), 512 / 8 = 64 per GPU; latent
    projections 2 x 8 x 4 = 64, replicated; dense per GPU (512 + 384 + 256) / 2 + 16 + (16 + 64 + 32) + 8 = 712."""
    model = dict(num_layers=2, hidden_size=8, num_attention_heads=2, kv_channels=4, ffn_hidden_size=16,
                 moe_ffn_hidden_size=16, num_experts=4, moe_router_topk=1, moe_shared_expert_intermediate_size=8,
                 moe_layer_freq=[0, 1], vocab_size=32, make_vocab_size_divisible_by=1, activation_func="gelu",
                 gated_linear_unit=False, moe_latent_size=4)
    c = count_parameters_of(make_config(model))
    assert (c.moe_experts, c.moe_latent) == (512, 64)
    cfg = make_config(model, {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2,
                              "expert_tensor_parallel_size": 4}, {"world_size": 32, "seq_length": 64,
                                                                  "sequence_parallel": True})
    st = estimate(cfg).stages[0]
    assert (st.parameters - st.expert_parameters, st.expert_parameters) == (712, 64)


def test_gemma_post_norms_and_final_softcapping():
    """Megatron-Bridge's TERowParallelLinearLayerNorm: one more norm (h) after the attention output and after fc2,
    each keeping its input (2 B x 256 x 64) and rstd (4 x 256). Gemma2OutputLayer's soft-capping keeps tanh's
    output: one bf16 logits tensor, 2 x 256 x 256 (vocabulary 256 padded to 256)."""
    post = dict(BASE, post_layernorm=True)
    assert count_parameters_of(make_config(post)).norms - count_parameters_of(make_config(BASE)).norms == 2 * 2 * 64
    kind = LayerKind("attention", "dense")
    a, b = _acts(BASE, kind), _acts(post, kind)
    assert (b.attention - a.attention, b.mlp - a.mlp) == (2 * 256 * 64 + 4 * 256,) * 2
    cap = estimate(make_config(dict(BASE, final_logit_softcapping=30.0), training={"seq_length": 256}))
    plain = estimate(make_config(BASE, training={"seq_length": 256}))
    assert cap.stages[0].activations["output"] - plain.stages[0].activations["output"] \
        == 2 * 256 * 256


# --- hybrid patterns and the pipeline -------------------------------------------------------------------------

PIPED = dict(HYBRID, num_layers=12, hybrid_layer_pattern="MM*|M-M|*MM|-MM")


def test_hybrid_pipe_segments_are_the_pipeline_chunks():
    """select_pipeline_segment: segment k is virtual stage k // p of stage k % p; 4 segments over PP 2 = VPP 2;
    the embedding sits with segment 0, the output layer with segment 3."""
    est = estimate(make_config(PIPED, {"pipeline_model_parallel_size": 2}, {"world_size": 2, "seq_length": 256}))
    assert est.parallel["vpp"] == 2
    assert [[list(c.layers) for c in s.chunks] for s in est.stages] == [[[0, 1, 2], [6, 7, 8]],
                                                                        [[3, 4, 5], [9, 10, 11]]]
    assert (est.stages[0].chunks[0].embedding, est.stages[1].chunks[1].output_layer) == (True, True)


def test_hybrid_mtp_parts_are_mtp_layers_on_the_last_stage():
    """'/M-' twice: two MTP depths, each a Mamba and an MLP layer with the MTP block's own parts (enorm, hnorm,
    eh_proj 2h x h, final norm): 2 x (3 x 64 + 2 x 64 x 64 + Mamba 28,088 + 64 + MLP 16,384 + 64)."""
    c = count_parameters_of(make_config(dict(HYBRID, hybrid_layer_pattern="M-/M-/M-")))
    assert c.mtp == 2 * (3 * 64 + 2 * 64 * 64 + 28_088 + 64 + 2 * 64 * 128 + 64)
    est = estimate(make_config(dict(HYBRID, hybrid_layer_pattern="M-/M-/M-"), {"pipeline_model_parallel_size": 2},
                               {"world_size": 2, "seq_length": 256}))
    assert [s.mtp_layers for s in est.stages] == [0, 2]


@pytest.mark.parametrize("change, field, words", [
    ({"model": {"num_layers": 5}}, "model.num_layers", "must equal the number of layers"),
    ({"parallelism": {"pipeline_model_parallel_size": 3}, "training": {"world_size": 3}},
     "model.hybrid_layer_pattern", "not a multiple of pipeline_model_parallel_size"),
    ({"parallelism": {"pipeline_model_parallel_size": 2, "num_layers_in_first_pipeline_stage": 3}},
     "parallelism.num_layers_in_first_pipeline_stage", "not allowed"),
    ({"parallelism": {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2}},
     "parallelism.virtual_pipeline_model_parallel_size", "not allowed"),
    ({"parallelism": {"pipeline_model_parallel_size": 2, "account_for_loss_in_pipeline_split": True}},
     "parallelism.account_for_loss_in_pipeline_split", "not allowed"),
    ({"model": {"mtp_num_layers": 1}}, "model.mtp_num_layers", "'/PATTERN' parts"),
    ({"model": {"hybrid_layer_pattern": "MM*|M-M|*MX|-MM"}}, "model.hybrid_layer_pattern", "not a layer symbol"),
    ({"model": {"hybrid_layer_pattern": "MM+|M-M|*MM|-MM"}}, "model.hybrid_layer_pattern", "not modelled"),
    ({"model": {"hybrid_layer_pattern": "MM*|M-M|*ME|-MM"}}, "model.hybrid_layer_pattern", "need num_experts"),
])
def test_hybrid_rules_follow_megatron_lm(change, field, words):
    cfg = make_config(dict(PIPED, **change.get("model", {})), {"pipeline_model_parallel_size": 2,
                                                               **change.get("parallelism", {})},
                      {"world_size": 2, "seq_length": 256, **change.get("training", {})})
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert any(p.field == field and words in p.message for p in exc.value.problems), exc.value


def test_hybrid_without_pipes_splits_evenly_or_unevenly_without_virtual_stages():
    """A pattern without '|' over PP 2: an even split (6 + 6) or the uneven first/last stage (4 + 8)."""
    flat = dict(PIPED, hybrid_layer_pattern=PIPED["hybrid_layer_pattern"].replace("|", ""))
    even = estimate(make_config(flat, {"pipeline_model_parallel_size": 2}, {"world_size": 2, "seq_length": 256}))
    assert [len(s.layers[0]) for s in even.stages] == [6, 6]
    first = estimate(make_config(flat, {"pipeline_model_parallel_size": 2, "num_layers_in_first_pipeline_stage": 4},
                                 {"world_size": 2, "seq_length": 256}))
    assert [len(s.layers[0]) for s in first.stages] == [4, 8]


def test_layer_kinds_are_resolved_once_per_model():
    cfg = load_config(make_config(PIPED, {"pipeline_model_parallel_size": 2}, {"world_size": 2}))
    assert resolve(cfg).layer_kinds is resolve(cfg).layer_kinds


# --- importers ------------------------------------------------------------------------------------------------

def test_megatron_lm_hybrid_flags():
    """arguments.py: the pattern sets num_layers; the legacy MTP pattern joins it once per MTP layer."""
    imp = read_megatron_args("--num-layers 9 --hidden-size 64 --num-attention-heads 4 --vocab-size 256 "
                             "--seq-length 256 --hybrid-override-pattern M*M- --mtp-num-layers 2 "
                             "--mtp-hybrid-override-pattern M- --mamba-num-heads 8 --mamba-head-dim 16 "
                             "--mamba-num-groups 2 --mamba-state-dim 8 --bf16",
                             world_size=1)
    m = imp.config["model"]
    assert (m["hybrid_layer_pattern"], m["num_layers"]) == ("M*M-/M-/M-", 4) and "mtp_num_layers" not in m
    assert any("takes the layer count from the pattern" in n for n in imp.notes)
    assert count_parameters_of(imp.config).layer_kinds == {"Mamba": 2, "attention": 1, "MLP": 1}
    with pytest.raises(ConfigError, match="cannot both be given"):
        read_megatron_args("--hybrid-override-pattern M- --hybrid-layer-pattern M-", world_size=1)


def test_megatron_lm_refuses_what_is_not_modelled():
    from estimator.formats.megatron_args import RefusedFlagsError
    # --disable-mamba-mem-eff-path is modelled since mhc29 (test_mamba_without_the_fused_scan_by_hand)
    with pytest.raises(RefusedFlagsError, match="experimental-attention-variant gdn2"):
        read_megatron_args("--experimental-attention-variant gdn2", world_size=1)


NEMOTRON = {"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "num_hidden_layers": 2,
            "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 128, "vocab_size": 256, "hybrid_override_pattern": "M*", "ssm_state_size": 8,
            "mamba_head_dim": 16, "mamba_num_heads": 8, "n_groups": 2, "conv_kernel": 4, "mlp_hidden_act": "relu2",
            "use_conv_bias": True, "tie_word_embeddings": False}


def test_hf_nemotron_h_import_and_its_refusals():
    m = from_hf_config(NEMOTRON)
    assert (m["hybrid_layer_pattern"], m["mamba_num_heads"], m["position_embedding_type"]) == ("M*", 8, "none")
    for change, words in (({"conv_kernel": 8}, "conv_kernel"), ({"mlp_hidden_act": "silu"}, "mlp_hidden_act"),
                          ({"hybrid_override_pattern": "MX"}, "not a layer symbol"),
                          ({"residual_in_fp32": True}, "residual_in_fp32"),
                          ({"use_conv_bias": False}, "use_conv_bias")):
        with pytest.raises(UnsupportedError, match=words):
            from_hf_config({**NEMOTRON, **change})
    mtp = from_hf_config({**NEMOTRON, "num_nextn_predict_layers": 2, "mtp_hybrid_override_pattern": "*",
                          "mtp_use_repeated_layer": False})
    assert mtp["hybrid_layer_pattern"] == "M*/*/*" and not mtp.get("mtp_use_repeated_layer")
    repeated = from_hf_config({**NEMOTRON, "num_nextn_predict_layers": 2, "mtp_hybrid_override_pattern": "*"})
    assert repeated["hybrid_layer_pattern"] == "M*/*/*" and repeated["mtp_use_repeated_layer"] is True
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        from_hf_config({**NEMOTRON, "num_hidden_layers": 3})


def test_hf_qwen3_moe_repository_keys_must_say_what_the_model_does():
    """Hugging Face's Qwen3MoeConfig ignores qkv_bias / use_qk_norm / shared_expert_intermediate_size (the model
    always has q/k norms, no QKV bias, no shared expert): accepted when they agree, refused otherwise."""
    base = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 2,
            "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
            "vocab_size": 256}
    assert from_hf_config({**base, "qkv_bias": False, "use_qk_norm": True, "shared_expert_intermediate_size": 0}) \
        == from_hf_config(base)
    with pytest.raises(UnsupportedError, match="qkv_bias"):
        from_hf_config({**base, "qkv_bias": True})


# --- linear-weight shapes (FP8 scales are per tensor) --------------------------------------------------------

@pytest.mark.parametrize("name", list_presets())
def test_linear_shapes_are_the_linear_weights(name):
    """Each layer module's ``linear_shapes`` (the per-tensor list the FP8 scales are computed from,
    estimator/model/fp8_scales.py) holds exactly its ``linear_weights`` elements and its ``weight_shapes``; the routed
    experts' shapes hold the routed-expert parameters one GPU holds (without biases)."""
    from estimator.model.layers import kind_linear_shapes, kind_linear_weights, kind_params, kind_weight_shapes
    r = resolve(load_preset(name))
    for kind in r.kinds:
        dense, experts = kind_linear_shapes(r, kind)
        assert sum(o * i * n for o, i, n in dense) == kind_linear_weights(r, kind), (name, kind)
        assert {(o, i) for o, i, _ in dense + experts} == kind_weight_shapes(r, kind), (name, kind)
        if kind.moe and not r.cfg.model.add_bias_linear:
            exp = kind_params(r, kind)[1]
            assert sum(o * i * n for o, i, n in experts) == exp.sharded // (r.ep * r.etp) + exp.replicated // r.ep
        else:
            assert experts == () or r.cfg.model.add_bias_linear


def test_hybrid_mtp_hidden_state_mixing():
    """A hybrid pattern's MTP depths count for mtp_hsm: 'M-/M-/M-' has 2 depths, the second keeps the draw, 9 B per
    token (int64 gather index + bool where condition; multi_token_prediction.py _mix_hidden_state_history) x 256
    tokens = 2304 B; 'M-/M-' has one depth, nothing to mix: an error naming the field."""
    def mtp(pattern, hsm):
        cfg = make_config(dict(HYBRID, hybrid_layer_pattern=pattern, mtp_hsm=hsm), training={"seq_length": 256})
        return estimate(cfg).stages[-1].activations["mtp"]
    assert mtp("M-/M-/M-", True) - mtp("M-/M-/M-", False) == 9 * 256 == 2304
    with pytest.raises(ConfigError, match="mtp_hsm"):
        load_config(make_config(dict(HYBRID, hybrid_layer_pattern="M-/M-", mtp_hsm=True)))
