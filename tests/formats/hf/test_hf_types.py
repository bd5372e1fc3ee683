"""Every key a family's config.json mapping reads is type-checked (issue 31, item 7): a wrong type is an error naming
``config.json:<key>``, the value and what is allowed, never an internal TypeError, a raw message or a silent value.

The published configs (the model catalog) are the starting points; each key is replaced in turn by values of the
wrong kind, and the import must give a model section or an :class:`EstimatorError`.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError
from estimator.config.errors import EstimatorError
from estimator.formats.hf import SUPPORTED, from_hf_config
from estimator.formats.hf_catalog import entries, get

#: Supported families without a complete config.json in the catalog (issue 27), with why: GLM-4.7-Flash's keys are
#: mapped (Megatron-Bridge's glm47_flash_bridge), but the only public copy found is aiconfigurator's trimmed one,
#: which the import refuses naming the missing key (tests/formats/data/, test_catalog_families.py).
AWAITING_CONFIG = {"glm4_moe_lite": "no complete GLM-4.7-Flash config.json (the trimmed copy has no num_nextn_predict_layers)",
                   "gemma4_text": "no text-only Gemma 4 copy; its keys are the gemma4 entry's text_config (below)",
                   # the catalog's Qwen3.5 ids are the vision-language wrappers; the language model alone is tested
                   # from their text_config (tests/formats/hf/test_qwen35.py)
                   "qwen3_5_text": "no text-only Qwen3.5 config.json in the catalog",
                   "qwen3_5_moe_text": "no text-only Qwen3.5 config.json in the catalog",
                   # famA: no public copy of the published config.json found; their keys are type-checked from the
                   # hand-written configs of tests/formats/hf/test_olmoe_gemma_nemotron_exaone.py
                   "olmoe": "no copy of allenai/OLMoE-1B-7B's config.json found",
                   "nemotron": "no copy of a Nemotron-4 / Minitron config.json found",
                   "exaone_moe": "no copy of a K-EXAONE config.json found",
                   # no genuine Gemma 3 vision-language config.json found in a citable repository: the wrapper's
                   # keys are tested on inputs in the Hub files' shape (tests/formats/hf/test_gemma3_vl.py)
                   "gemma3": "no Gemma 3 vision-language config.json in the catalog",
                   # nor a GLM-4.5V one: tests/formats/hf/test_glm45v.py uses Megatron-Bridge's toy configuration
                   "glm4v_moe": "no GLM-4.5V config.json in the catalog",
                   # famC: the published config.json found is nvidia/MiniMax-M3-NVFP4's, 3 MB with its quantization
                   # entries: its keys are tested without them (tests/formats/hf/test_minimax_m3.py)
                   "minimax_m3_vl": "no MiniMax-M3 config.json under the catalog's 1 MiB input limit",
                   # famD: likewise, from tests/formats/hf/test_hy_v3_sarvam.py (the wrong-value loop runs there)
                   "hy_v3": "no repository vendoring tencent/Hy3's config.json whole found",
                   "sarvam_moe": "no copy of sarvamai/sarvam-30b's config.json found",
                   "sarvam_mla": "no copy of sarvamai/sarvam-105b's config.json found",
                   "mamba2": "no citable copy of a Mamba2Config config.json found (test_mamba2_falcon_h1.py)",
                   "falcon_h1": "no copy of a tiiuae/Falcon-H1 config.json found whole (test_mamba2_falcon_h1.py)",
                   # famE: the wrong-value loop runs on the config written from the bridge and its card
                   "step3p5": "no copy of stepfun-ai/Step-3.5-Flash's config.json found (test_step3p5.py)",
                   # ERNIE-VL: written from transformers' defaults for the 28B-A3B (the wrong-value loop runs there)
                   "ernie4_5_vl_moe": "no copy of an ERNIE-4.5-VL transformers config.json found "
                                      "(test_ernie45_vl.py)",
                   # towers27: written from TensorRT-LLM's test of the checkpoint and from Megatron-Bridge's
                   # Step37Config (the wrong-value loops run in test_exaone45.py and test_step3p7.py)
                   "exaone4_5": "no copy of LGAI-EXAONE/EXAONE-4.5-33B's config.json found (test_exaone45.py)",
                   "step3p7": "no copy of stepfun-ai/Step-3.7-Flash's config.json found (test_step3p7.py)"}

#: One published config per supported family (the first catalog entry of each model_type).
FAMILIES = {}
for _e in entries():
    _mt = _e.config().get("model_type")
    if _mt in SUPPORTED and _mt not in FAMILIES and _mt not in AWAITING_CONFIG:
        FAMILIES[_mt] = _e.hf_id

WRONG = [[1], ["silu"], {"a": 1}, "abc", True, False, -1, 0, 1.5, float("nan"), float("inf"), 10 ** 30, None]


def test_every_supported_family_has_a_published_config():
    assert set(FAMILIES) == set(SUPPORTED) - set(AWAITING_CONFIG)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_wrong_value_for_any_key_is_an_error_that_names_it(model_type):
    """Every key of the family's config.json, replaced by each value of WRONG: a model section, or an EstimatorError
    (a ConfigError names config.json:<key>). Before, a list where a name was read raised TypeError (unhashable),
    a huge integer an OverflowError, a 0 divided."""
    hf = get(FAMILIES[model_type]).config()
    assert from_hf_config(hf)                    # the published config imports as it is
    for key in hf:
        for wrong in WRONG:
            try:
                from_hf_config({**hf, key: wrong})
            except ConfigError as exc:
                fields = {p.field for p in exc.problems}
                assert fields <= {f"config.json:{key}", "config.json:num_hidden_layers",
                                  "config.json:hybrid_override_pattern", "config.json:mtp_hybrid_override_pattern"}, \
                    (key, wrong, exc)
            except EstimatorError:
                pass


def _gemma() -> dict:
    return get(FAMILIES["gemma2"]).config()


def _nemotron() -> dict:
    return get(FAMILIES["nemotron_h"]).config()


@pytest.mark.parametrize("hf, key, message", [
    # was TypeError: unhashable type: 'list' (the activation looked up in a dict)
    ({**_gemma(), "hidden_activation": ["gelu_pytorch_tanh"]}, "hidden_activation",
     "must be a name (a string), got ['gelu_pytorch_tanh']; allowed: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast"),
    ({**_nemotron(), "mlp_hidden_act": ["relu2"]}, "mlp_hidden_act",
     "must be a name (a string), got ['relu2']; allowed: relu2"),
    ({**_nemotron(), "mamba_hidden_act": {"silu": 1}}, "mamba_hidden_act", "must be a name (a string)"),
    # was ValueError: could not convert string to float: 'abc'
    ({**_nemotron(), "layer_norm_epsilon": "abc"}, "layer_norm_epsilon", "must be a finite number, got 'abc'"),
    # was silently 1.0
    ({**_nemotron(), "layer_norm_epsilon": True}, "layer_norm_epsilon", "must be a finite number, got True"),
    ({**_nemotron(), "norm_eps": 2.0}, "norm_eps", "must be between 0 and 1, got 2.0"),
    # a head width of 0 divided the Mamba width (expand x hidden_size / mamba_head_dim)
    ({**{k: v for k, v in _nemotron().items() if k != "mamba_num_heads"}, "mamba_head_dim": 0}, "mamba_head_dim",
     "must be >= 1, got 0"),
    ({**_nemotron(), "use_conv_bias": "no"}, "use_conv_bias", "must be true or false, got 'no'"),
    ({**_gemma(), "final_logit_softcapping": 10 ** 400}, "final_logit_softcapping", "must be between 0 and 1e+06"),
])
def test_newer_families_name_the_key_and_what_is_allowed(hf, key, message):
    with pytest.raises(ConfigError) as exc:
        from_hf_config(hf)
    (p,) = exc.value.problems
    assert p.field == f"config.json:{key}" and message in p.message, p


def test_zero_routed_experts_is_not_a_dense_model():
    """Regression: DeepSeek's n_routed_experts: 0 silently became a dense model. Hugging Face builds MoE layers for
    any non-null n_routed_experts (DeepseekV3DecoderLayer), with no experts to route to: refused, naming the key;
    null (or no key) is the dense model."""
    ds = get("deepseek-ai/DeepSeek-V2-Lite").config()
    with pytest.raises(ConfigError) as exc:
        from_hf_config({**ds, "n_routed_experts": 0})
    (p,) = exc.value.problems
    assert (p.field, p.message) == ("config.json:n_routed_experts", "must be >= 1 (null or absent for a model "
                                    "without routed experts), got 0")
    assert "num_experts" not in from_hf_config({**ds, "n_routed_experts": None})
    # Qwen's MoE families build dense MLPs for num_experts 0 (Qwen2MoeDecoderLayer): the dense counterpart is meant.
    qwen = get("Qwen/Qwen3-30B-A3B").config()
    with pytest.raises(UnsupportedError, match=r"makes no layer MoE \(num_experts 0\)"):
        from_hf_config({**qwen, "num_experts": 0})


def test_llama4_layer_indices_are_integers_not_booleans():
    scout = get("meta-llama/Llama-4-Scout-17B-16E-Instruct").config()
    text = {**scout["text_config"], "moe_layers": [True, 3]}
    with pytest.raises(ConfigError, match="moe_layers"):
        from_hf_config({**scout, "text_config": text})
