"""Kimi K3 (``KimiK3ForConditionalGeneration``, model_type kimi_k3): the language model of its text_config
(model_type kimi_linear) as Megatron-Bridge builds it.

NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/models/kimi/kimi_k3_bridge.py ``provider_bridge``:
multi-latent attention with the q/kv latent norms, no position embedding (``mla_use_nope``) and a sigmoid output gate
(``mla_use_output_gate``), Kimi delta attention in the 1-based ``linear_attn_config.kda_layers``, the AttnRes block
size, a latent MoE (``routed_expert_hidden_size``) with a routed-expert norm, ``num_shared_experts`` of
``moe_intermediate_size`` joined into one shared expert, dense layers before ``first_k_dense_replace``, a sigmoid
fp32 router with expert bias and no load-balancing loss, fused permutation, and SiTU (``hidden_act situ``). The
vision tower and projector pass through the bridge untouched (``_HF_PASSTHROUGH_PREFIXES``): they are not part of
the Megatron model and are not counted. The published weights are MXFP4 (``quantization_config``); the bridge
dequantizes them to bf16 on import.
"""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from .deepseek import mla
from .reader import Reader, pattern_value

__all__ = ["map_kimi_k3"]

_LINEAR_KEYS = frozenset({"full_attn_layers", "kda_layers", "num_heads", "head_dim", "short_conv_kernel_size",
                          "gate_lower_bound", "use_full_rank_gate"})


def _kda_pattern(lin: dict, L: int) -> list[int]:
    """1 for the layers KimiK3Attention builds as KDA (``layer_number in kimi_kda_layers``, 1-based), 0 for MLA;
    full_attn_layers must name exactly the others."""
    kda, full = lin.get("kda_layers"), lin.get("full_attn_layers")
    for key, v in (("kda_layers", kda), ("full_attn_layers", full)):
        if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= L
                                              for i in v):
            raise ConfigError(Problem(f"config.json:text_config.linear_attn_config.{key}", v,
                                      f"must be a list of 1-based layer numbers from 1 to {L}"))
    if sorted(set(kda) | set(full)) != list(range(1, L + 1)) or set(kda) & set(full):
        raise ConfigError(Problem("config.json:text_config.linear_attn_config.kda_layers", kda,
                                  f"with full_attn_layers must name each of the {L} layers exactly once"))
    return [int(i + 1 in kda) for i in range(L)]


def map_kimi_k3(r: Reader, m: dict) -> None:
    """The model section of Kimi K3's text_config (module docstring)."""
    L = m["num_layers"]
    act = r.name("hidden_act", "situ", ("situ",))
    if act != "situ":
        raise UnsupportedError(f"config.json:hidden_act {show(act)} for {r.mt}: Kimi K3's MLPs use situ")
    m["activation_func"], m["gated_linear_unit"] = "situ", True
    if not r.flag("mla_use_nope", False):
        raise UnsupportedError(f"config.json:mla_use_nope false for {r.mt}: Megatron-Bridge builds Kimi K3's MLA "
                               "without RoPE only")
    if not r.flag("mla_use_output_gate", False):
        raise UnsupportedError(f"config.json:mla_use_output_gate false for {r.mt}: Megatron-Bridge's KimiK3Attention "
                               "always builds the output gate")
    mla(r, m)
    m["position_embedding_type"] = "none"
    m["attention_output_gate"] = True
    lin = r.hf.get("linear_attn_config")
    if not isinstance(lin, dict):
        raise ConfigError(Problem("config.json:text_config.linear_attn_config", lin, "is required for Kimi K3 (the "
                                  "Kimi delta attention layers)"))
    unknown = sorted(k for k in lin if k not in _LINEAR_KEYS)
    if unknown:
        raise UnsupportedError("config.json:text_config.linear_attn_config key(s) not understood: "
                               f"{', '.join(unknown)}")
    if lin.get("use_full_rank_gate", True) is not True:
        raise UnsupportedError("config.json:text_config.linear_attn_config.use_full_rank_gate false: Megatron-Bridge "
                               "builds only the full-rank forget gate (f_a_proj, f_b_proj)")
    inner = Reader(lin, r.mt)
    heads, dim = inner.int("num_heads"), inner.int("head_dim")
    m["experimental_attention_variant"] = "kda"
    m["linear_attention_freq"] = _kda_pattern(lin, L)
    m["linear_num_key_heads"] = m["linear_num_value_heads"] = heads
    m["linear_key_head_dim"] = m["linear_value_head_dim"] = dim
    m["linear_conv_kernel_dim"] = inner.int("short_conv_kernel_size")
    block = r.int("attn_res_block_size", required=False)
    if block:
        m["attn_res_block_size"] = block
    m["ffn_hidden_size"] = r.int("intermediate_size")
    m["num_experts"] = r.int("num_experts")
    m["moe_router_topk"] = r.int("num_experts_per_token")
    fm = r.int("moe_intermediate_size")
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("num_shared_experts", 0)
    if shared:
        m["moe_shared_expert_intermediate_size"] = shared * fm
    latent = r.int("routed_expert_hidden_size", required=False)
    if latent:
        m["moe_latent_size"] = latent
        m["moe_latent_norm"] = r.flag("latent_moe_use_norm", False)
    elif r.flag("latent_moe_use_norm", False):
        raise ConfigError(Problem("config.json:latent_moe_use_norm", True, "needs routed_expert_hidden_size"))
    first, freq = r.int("first_k_dense_replace", 0), r.int("moe_layer_freq", 1)
    if freq < 1:
        raise ConfigError(Problem("config.json:moe_layer_freq", freq, "must be >= 1"))
    pattern = [int(i >= first and i % freq == 0) for i in range(L)]
    if pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    fn = r.name("moe_router_activation_func", "sigmoid", ("sigmoid", "softmax"))
    if fn not in ("sigmoid", "softmax"):
        raise UnsupportedError(f"config.json:moe_router_activation_func {show(fn)} for {r.mt}; known: sigmoid, softmax")
    if fn != "softmax":
        m["moe_router_score_function"] = fn
    # provider_bridge sets these whatever the config.json says: expert bias (update rate 0), no load-balancing
    # loss, fp32 router, Transformer Engine's fused permutation (alltoall and grouped GEMM are the defaults here).
    m["moe_router_enable_expert_bias"] = True
    m["moe_router_load_balancing_type"] = "none"
    m["moe_router_dtype"] = "fp32"
    m["moe_permute_fusion"] = True
    groups, topk = r.int("num_expert_group", required=False), r.int("topk_group", required=False)
    if r.flag("use_grouped_topk", False) and groups and groups > 1 and topk:
        m["moe_router_num_groups"], m["moe_router_group_topk"] = groups, topk
    if r.int("num_nextn_predict_layers", 0):
        raise UnsupportedError(f"config.json:num_nextn_predict_layers > 0 for {r.mt}: Megatron-Bridge's Kimi K3 "
                               "builds no MTP layers")
