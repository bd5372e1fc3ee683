"""The MoE presets run the MoE settings of the public recipe their header names.

Expected values transcribed by hand from the recipe sources (ours, not the estimator's output), following each
recipe function through its helpers and the model bridge/provider it builds on:

- NVIDIA-NeMo/Megatron-Bridge @ 067f987d (src/megatron/bridge/...):
  models/deepseek/deepseek_v2_bridge.py, deepseek_v3_bridge.py, models/kimi/kimi_bridge.py,
  models/gpt_oss/gpt_oss_bridge.py, models/qwen/qwen3_moe_bridge.py, qwen3_next_bridge.py,
  models/nemotronh/nemotron_h_bridge.py (provider_bridge: moe_permute_fusion True, router dtype, load balancing);
  models/conversion/model_bridge.py CONFIG_MAPPING (config.json aux_loss_alpha / router_aux_loss_coef ->
  moe_aux_loss_coeff); recipes/deepseek/h100/deepseek_v2.py, recipes/deepseek/h100/deepseek_v3.py,
  recipes/gpt_oss/h100/gpt_oss.py, recipes/kimi/h100/kimi_k2.py, recipes/moonlight/h100/moonlight_16b.py,
  recipes/nemotronh/h100/nemotron_3_nano.py (HybridModelProvider arguments), recipes/qwen/h100/qwen3_moe.py,
  recipes/qwen/h100/qwen3_next.py (kernel selections: moe_router_fusion False, moe_permute_fusion True,
  moe_grouped_gemm True); perf_recipes/deepseek/common.py _deepseek_v3_common and
  perf_recipes/kimi/h100/kimi_k2.py (moe_router_fusion True); training/flex_dispatcher_backend.py
  apply_flex_dispatcher_backend (flex on Hopper where a recipe calls it).
- NVIDIA/NeMo @ 8cfedd72 (Mixtral): nemo/collections/llm/gpt/model/mixtral.py MixtralConfig (aux_loss 0.01,
  alltoall) on Megatron-Core's TransformerConfig defaults (moe_grouped_gemm False, no fusions).

Deliberate deviations, stated in the presets' notes: where the recipe runs the flex dispatcher (DeepSeek-V3 and
Nemotron 3 Nano: HybridEP; the Qwen3 recipes: DeepEP through apply_flex_dispatcher_backend on H100) the preset
keeps alltoall. Fields left out of a row take the schema default.
"""

from __future__ import annotations

import pytest

from estimator.formats.presets import load_preset

_DEEPSEEK = dict(moe_permute_fusion=True, moe_router_dtype="fp32", moe_router_pre_softmax=True,
                 moe_router_load_balancing_type="seq_aux_loss")
EXPECTED = {
    # recipes/deepseek/h100/deepseek_v2.py deepseek_v2_lite_pretrain_8gpu_h100_bf16_config + DeepSeekV2Bridge;
    # aux_loss_alpha 0.001: DeepseekV2Config's default (transformers), mapped by model_bridge.py CONFIG_MAPPING
    "deepseek-v2-lite": dict(_DEEPSEEK, moe_aux_loss_coeff=1e-3),
    # perf_recipes/deepseek/h100/deepseek_v3.py (+ _deepseek_v3_common: router fusion) + DeepSeekV3Bridge
    "deepseek-v3": dict(_DEEPSEEK, moe_aux_loss_coeff=1e-4, moe_router_fusion=True, moe_router_enable_expert_bias=True,
                        moe_router_score_function="sigmoid"),
    # perf_recipes/kimi/h100/kimi_k2.py (router fusion) on recipes/kimi/h100/kimi_k2.py + KimiK2Bridge
    "kimi-k2": dict(_DEEPSEEK, moe_aux_loss_coeff=1e-3, moe_router_fusion=True, moe_router_enable_expert_bias=True,
                    moe_router_score_function="sigmoid"),
    # recipes/moonlight/h100/moonlight_16b.py, model through DeepSeekV3Bridge (sigmoid, expert bias)
    "moonlight-16b-a3b": dict(_DEEPSEEK, moe_aux_loss_coeff=1e-3, moe_router_enable_expert_bias=True,
                              moe_router_score_function="sigmoid"),
    # recipes/gpt_oss/h100/gpt_oss.py + GptOssBridge: load balancing none; router_aux_loss_coef 0.9 is mapped
    # but unused without a load-balancing loss
    "gpt-oss-120b": dict(moe_permute_fusion=True, moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.9),
    "gpt-oss-20b": dict(moe_permute_fusion=True, moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.9),
    # recipes/nemotronh/h100/nemotron_3_nano.py HybridModelProvider(...)
    "nemotron-3-nano-30b-a3b": dict(moe_permute_fusion=True, moe_router_dtype="fp32", moe_aux_loss_coeff=1e-4,
                                    moe_router_load_balancing_type="seq_aux_loss", moe_router_score_function="sigmoid",
                                    moe_router_enable_expert_bias=True),
    # recipes/qwen/h100/qwen3_moe.py + Qwen3MoEBridge (aux_loss 1e-3, pre-softmax off: norm_topk_prob true)
    "qwen3-30b-a3b": dict(moe_permute_fusion=True, moe_aux_loss_coeff=1e-3),
    "qwen3-235b-a22b": dict(moe_permute_fusion=True, moe_aux_loss_coeff=1e-3),
    # recipes/qwen_vl/h100/qwen3_vl.py qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config + Qwen3VLMoEModelProvider
    # (moe_router_dtype fp32, aux_loss 1e-3, permute fusion; the recipe: grouped GEMM, alltoall)
    "qwen3-vl-30b-a3b": dict(moe_permute_fusion=True, moe_aux_loss_coeff=1e-3, moe_router_dtype="fp32"),
    # recipes/qwen/h100/qwen3_next.py + Qwen3NextBridge
    "qwen3-next-80b-a3b": dict(moe_permute_fusion=True, moe_router_dtype="fp32", moe_aux_loss_coeff=1e-3,
                               moe_router_load_balancing_type="global_aux_loss"),
    # recipes/deepseek/gb200/deepseek_v4.py + DeepSeekV4Bridge (sqrtsoftplus with expert bias, noaux_tc with no aux
    # loss coefficient, fp32 router, fused permutation; the preset keeps alltoall instead of the recipe's HybridEP)
    "deepseek-v4-flash": dict(moe_permute_fusion=True, moe_router_dtype="fp32", moe_router_enable_expert_bias=True,
                              moe_router_score_function="sqrtsoftplus"),
    # recipes/olmoe/h100/olmoe_7b.py + OlMoEModelProvider (olmoe_provider.py: pre-softmax, seq_aux_loss 1e-2, fp32
    # router, fused permutation; the recipe: grouped GEMM, alltoall, no router fusion)
    "olmoe-1b-7b": dict(moe_permute_fusion=True, moe_router_dtype="fp32", moe_router_pre_softmax=True,
                        moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-2),
    # NeMo 2.0 MixtralConfig on Megatron-Core defaults
    "mixtral-8x7b": dict(moe_grouped_gemm=False, moe_aux_loss_coeff=1e-2),
    "mixtral-8x22b": dict(moe_grouped_gemm=False, moe_aux_loss_coeff=1e-2),
}
# What every recipe above runs unless its row says otherwise (Megatron-Bridge MoE recipes: grouped GEMM, no
# router fusion, alltoall as the preset's dispatcher, bf16 router, dropless).
COMMON = dict(moe_permute_fusion=False, moe_router_fusion=False, moe_grouped_gemm=True,
              moe_token_dispatcher_type="alltoall", moe_router_dtype=None, moe_router_pre_softmax=False,
              moe_router_score_function="softmax", moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=0.0,
              moe_z_loss_coeff=None, moe_router_enable_expert_bias=False, moe_expert_capacity_factor=None,
              moe_pad_expert_input_to_capacity=False)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_moe_settings_are_the_recipes(name):
    model = load_preset(name).model
    assert model.num_experts, name
    got = {k: getattr(model, k) for k in COMMON}
    assert got == {**COMMON, **EXPECTED[name]}


def test_every_preset_with_experts_is_covered():
    from estimator.formats.presets import list_presets
    with_experts = {n for n in list_presets() if load_preset(n).model.num_experts}
    assert with_experts == set(EXPECTED)
