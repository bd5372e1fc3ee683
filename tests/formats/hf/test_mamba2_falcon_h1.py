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
