"""Issue 27, famD: pure Mamba-2 (and, below, Falcon-H1) through the Hugging Face import.

Counts by hand in the docstrings, from Megatron-Core's MambaMixer shapes (estimator/model/layers/mamba.py writes
them out) and the published figures named there. The configs are test inputs: no repository vendoring a genuine
config.json of these models whole and citable was found.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, count_parameters_of
from estimator.config.errors import EstimatorError
from estimator.formats.hf import from_hf_config
from tests.conftest import make_config

#: mistralai/Mamba-Codestral-7B-v0.1's shapes and keys (Hugging Face Mamba2Config), time_step_limit's infinity
#: written as a large number.
CODESTRAL = {"architectures": ["Mamba2ForCausalLM"], "bos_token_id": 0, "chunk_size": 256, "conv_kernel": 4,
             "eos_token_id": 0, "expand": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 4096,
             "initializer_range": 0.1, "intermediate_size": 8192, "layer_norm_epsilon": 1e-05, "model_type": "mamba2",
             "n_groups": 8, "norm_before_gate": True, "num_heads": 128, "num_hidden_layers": 64, "pad_token_id": 0,
             "rescale_prenorm_residual": False, "residual_in_fp32": True, "rms_norm": True, "state_size": 128,
             "tie_word_embeddings": False, "time_step_floor": 0.0001, "time_step_init_scheme": "random",
             "time_step_limit": [0.0, 1e30], "time_step_max": 0.1, "time_step_min": 0.001, "time_step_rank": 256,
             "time_step_scale": 1.0, "torch_dtype": "bfloat16", "transformers_version": "4.44.0.dev0",
             "use_bias": False, "use_cache": True, "use_conv_bias": True, "vocab_size": 32768}


def test_mamba_codestral_counts_by_hand_and_equals_mistrals_figure():
    """h 4096, 64 Mamba-2 layers of 128 heads of 64 (di 8192), 8 groups, state 128, vocabulary 32,768 untied.
    Per layer: in_proj 4096 x (2 x 8192 + 2 x 8 x 128 + 128) = 4096 x 18,560 = 76,021,760; conv1d over
    8192 + 2048 = 10,240 channels, width 4 with bias: 51,200; dt_bias, A_log, D 3 x 128; gated norm 8192; out_proj
    8192 x 4096 = 33,554,432; input norm 4096: 109,640,064. 64 x that + 2 x 32,768 x 4096 + 4096 =
    7,285,403,648, the count Mistral AI published for Codestral Mamba ("an instructed model, with 7,285,403,648
    parameters", mistral.ai/news/codestral-mamba)."""
    per = 4096 * 18_560 + 10_240 * 5 + 3 * 128 + 8192 + 8192 * 4096 + 4096
    assert per == 109_640_064
    assert count_parameters_of(make_config(from_hf_config(CODESTRAL))).total == 64 * per + 2 * 32_768 * 4096 + 4096 \
        == 7_285_403_648


def test_mamba2_is_an_all_mamba_hybrid_model():
    m = from_hf_config(CODESTRAL)
    assert (m["hybrid_layer_pattern"], m["mamba_num_heads"], m["mamba_num_groups"], m["mamba_state_dim"],
            m["position_embedding_type"]) == ("M" * 64, 128, 8, 128, "none")
    assert "activation_func" not in m and "ffn_hidden_size" not in m


@pytest.mark.parametrize("key, value, error, words", [
    ("use_bias", True, UnsupportedError, "biases"),
    ("use_conv_bias", False, UnsupportedError, "convolution bias"),
    ("rms_norm", False, UnsupportedError, "gated RMSNorm"),
    ("conv_kernel", 3, UnsupportedError, "width at 4"),
    ("num_heads", 64, ConfigError, "inner width"),
    ("intermediate_size", 4096, ConfigError, "inner width"),
    ("n_groups", 3, ConfigError, "must divide num_heads"),
])
def test_mamba2_refuses_what_megatron_does_not_build(key, value, error, words):
    with pytest.raises(error, match=words):
        from_hf_config(dict(CODESTRAL, **{key: value}))


@pytest.mark.parametrize("hf", [CODESTRAL], ids=["mamba2"])
def test_a_wrong_value_for_any_key_is_an_error_that_names_it(hf):
    """As tests/formats/hf/test_hf_types.py does for the catalogued families; a wrong head_dim or intermediate_size
    may be named by the rule that ties them to num_heads (heads x head_dim = expand x hidden_size)."""
    for key in hf:
        for wrong in [[1], ["silu"], {"a": 1}, "abc", True, False, -1, 0, 1.5, float("nan"), float("inf"), 10 ** 30,
                      None]:
            try:
                from_hf_config({**hf, key: wrong})
            except ConfigError as exc:
                tied = {"config.json:num_heads"} if key in ("head_dim", "hidden_size") else set()
                assert {p.field for p in exc.problems} <= {f"config.json:{key}", "config.json:num_hidden_layers",
                                                           "config.json:hybrid_override_pattern"} | tied, \
                    (key, wrong, exc)
            except EstimatorError:
                pass


# --- Falcon-H1 ---------------------------------------------------------------------------------------------------

#: Falcon-H1-Tiny-90M's shapes as two public quotes of its config.json give them (intermediate_size 768 and the
#: dimensions from an evaluation harness's "model's published config" contract, the Mamba and multiplier keys from
#: mlx-community's Falcon-H1-Tiny-90M-Instruct-4bit config in a test): h 512, 24 layers, 8 query heads of 64 and 2
#: key/value heads, MLP 768, Mamba-2 of 24 heads of 32 (d_ssm 768), one group, state 64, no gated norm
#: (mamba_rms_norm false), vocabulary 32,768 tied. The multipliers scale activations only.
FALCON_TINY = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "vocab_size": 32768,
               "hidden_size": 512, "intermediate_size": 768, "num_hidden_layers": 24, "num_attention_heads": 8,
               "num_key_value_heads": 2, "head_dim": 64, "rms_norm_eps": 1e-05, "rope_theta": 100000000000.0,
               "max_position_embeddings": 262144, "mamba_d_conv": 4, "mamba_d_ssm": 768, "mamba_d_state": 64,
               "mamba_d_head": 32, "mamba_n_heads": 24, "mamba_n_groups": 1, "mamba_chunk_size": 128,
               "mamba_conv_bias": True, "mamba_proj_bias": False, "mamba_rms_norm": False,
               "mamba_norm_before_gate": False, "embedding_multiplier": 0.11083984375,
               "lm_head_multiplier": 0.078125, "attention_in_multiplier": 1.0, "attention_out_multiplier": 1.0,
               "key_multiplier": 1.0, "ssm_in_multiplier": 1.0, "ssm_out_multiplier": 1.0,
               "mlp_multipliers": [1.0, 1.0], "ssm_multipliers": [1.0, 1.0, 1.0, 1.0, 1.0],
               "tie_word_embeddings": True, "attention_bias": False, "projectors_bias": False, "hidden_act": "silu"}


def _falcon(**over):
    return from_hf_config(dict(FALCON_TINY, **over))


def test_falcon_h1_tiny_counts_by_hand():
    """Per layer: one input RMSNorm 512; attention q 512 x 512 + k, v 2 x 512 x 128 + o 512 x 512 = 655,360; Mamba-2
    in_proj 512 x (2 x 768 + 2 x 64 + 24) = 512 x 1688 = 864,256, conv1d over 768 + 128 = 896 channels of width 4
    with bias 4480, dt_bias, A_log, D 3 x 24, no gated norm, out_proj 768 x 512 = 393,216: 1,262,024; the MLP's
    norm 512 and SwiGLU 3 x 512 x 768 = 1,179,648. Layer: 512 + 655,360 + 1,262,024 + 512 + 1,179,648 = 3,098,056.
    24 x that + the tied embedding 32,768 x 512 (16,777,216) + final norm 512 = 91,131,072: the parameter count
    llama.cpp reports for tiiuae/Falcon-H1-Tiny-90M-Instruct-GGUF (AlexsJones/llmfit @
    3f44fd30a43d2619146f7bc0aa66c90aa54d78e6 : llmfit-core/data/benchmark_cache.json, "GGUF-reported parameters:
    91131072")."""
    layer = 512 + 655_360 + 512 * 1688 + 896 * 5 + 72 + 768 * 512 + 512 + 3 * 512 * 768
    assert layer == 3_098_056
    p = count_parameters_of(make_config(_falcon()))
    assert p.total == 24 * layer + 32_768 * 512 + 512 == 91_131_072
    assert (p.attention, p.mamba, p.norms) == (24 * 655_360, 24 * 1_262_024, 24 * 1024 + 512)


def test_falcon_h1_gated_norm_adds_the_inner_width():
    """mamba_rms_norm true: MambaMixer's gated RMSNorm, 768 weights more per layer."""
    assert (count_parameters_of(make_config(_falcon(mamba_rms_norm=True))).total
            - count_parameters_of(make_config(_falcon())).total) == 24 * 768


def test_falcon_h1_d_head_auto_and_expand():
    """mamba_d_head "auto" is mamba_d_ssm / mamba_n_heads; without mamba_d_ssm the inner width is mamba_expand x h."""
    m = _falcon(mamba_d_head="auto")
    assert (m["mamba_head_dim"], m["mamba_num_heads"]) == (32, 24)
    m = from_hf_config({k: v for k, v in FALCON_TINY.items() if k != "mamba_d_ssm"} | {"mamba_d_head": "auto",
                                                                                        "mamba_n_heads": 32})
    assert (m["mamba_head_dim"], m["mamba_num_heads"]) == (32, 32)        # 2 x 512 / 32


def test_falcon_h1_activations_share_one_norm_and_keep_the_scaled_gate():
    """A Falcon-H1 layer keeps a Mamba layer's and an attention layer's activations less one norm input (B Tn h), and
    its MLP two more f-wide tensors (2 B T f / t) than Megatron-Core's fused SwiGLU. s 4096, b 1, bf16 (B 2), TP 1:
    the norm input 2 x 4096 x 512 = 4,194,304 bytes less; 2 x 2 x 4096 x 768 = 12,582,912 bytes more. The MLP keeps
    its norm's input and output (2 x 2 x 4096 x 512), fc1's output (2 x 4096 x 2 x 768), the scaled gate and silu's
    output (2 x 2 x 4096 x 768) and the product fc2 keeps (2 x 4096 x 768): 39,845,888 bytes."""
    from estimator.config.load import load_config
    from estimator.memory.activations import context, layer_activations
    from estimator.model.layers import LayerKind, attention, mamba, mlp
    from estimator.model.resolve import resolve
    r = resolve(load_config(make_config(_falcon(), training={"seq_length": 4096, "micro_batch_size": 1})))
    kind = r.kinds[0]
    assert kind == LayerKind("mamba_attention", "dense") and len(r.kinds) == 1
    c = context(r)
    la = layer_activations(r, kind)
    assert la.attention - c.mask == (attention.activations(r, c).saved + mamba.activations(r, c).saved
                                     - 2 * 4096 * 512)
    assert mlp.activations(r, c).saved == (2 * 2 * 4096 * 512 + 2 * 4096 * 2 * 768 + 2 * 2 * 4096 * 768
                                           + 2 * 4096 * 768) == 39_845_888


def test_falcon_h1_refusals():
    for key, value, error, words in [("projectors_bias", True, UnsupportedError, "biases"),
                                     ("mamba_proj_bias", True, UnsupportedError, "biases"),
                                     ("mamba_conv_bias", False, UnsupportedError, "convolution bias"),
                                     ("mamba_d_conv", 3, UnsupportedError, "width 4"),
                                     ("mamba_chunk_size", 256, UnsupportedError, "chunks of 128"),
                                     ("mamba_d_head", 16, ConfigError, "inner width"),
                                     ("mamba_n_groups", 5, ConfigError, "must divide"),
                                     ("attn_layer_indices", [0, 2], UnsupportedError, "every layer"),
                                     ("mamba_use_mlp", False, UnsupportedError, "MLP in every layer")]:
        with pytest.raises(error, match=words):
            _falcon(**{key: value})


def test_falcon_h1_rules_refuse_what_the_layer_is_not_modelled_with():
    """parallel_mamba_attention with MoE, CUDA graphs or a virtual pipeline: an error naming the field."""
    from estimator.config.load import load_config
    with pytest.raises(ConfigError, match="parallel_mamba_attention"):
        load_config(make_config(dict(_falcon(), num_experts=8, moe_router_topk=2)))
    with pytest.raises(ConfigError, match="CUDA graphs"):
        load_config(make_config(_falcon(), training={"cuda_graph_impl": "local"}))


def test_falcon_h1_wrong_values_name_the_key():
    for key in FALCON_TINY:
        for wrong in [[1], "abc", True, -1, 0, 1.5, float("nan"), 10 ** 30, None]:
            try:
                from_hf_config({**FALCON_TINY, key: wrong})
            except ConfigError as exc:
                tied = {"config.json:mamba_d_head"} if key in ("mamba_d_ssm", "mamba_n_heads") else set()
                assert {p.field for p in exc.problems} <= {f"config.json:{key}"} | tied, (key, wrong, exc)
            except EstimatorError:
                pass
