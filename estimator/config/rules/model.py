"""Megatron-Core's rules for the model beyond a plain GPT layer: :func:`model_problems` collects those of the layer
kinds (hybrid and linear attention, DSA and DeepSeek-V4, Kimi K3, the vision tower, Gemma 4, MiMo-V2-Flash,
heterogeneous layers, K-EXAONE, Falcon-H1: each in its own module beside this one) and checks the generic ones
itself: latent MoE, the placement of the norms, q/k norms, the attention output gate, the softmax and the router.

Each rule is reported as a :class:`~estimator.config.errors.Problem` naming the field, the value and the rule;
:func:`estimator.config.rules.check.cross_field_problems` collects them with the other cross-field rules.
"""

from __future__ import annotations

from ..errors import Problem
from .attention import dsa_problems, dsv4_problems
from .families import (falcon_h1_problems, gemma4_moe_problems, global_attention_problems, k_exaone_problems,
                       kimi_problems, mimo_problems, te_full_layer_problems)
from .hetero import hetero_problems
from .hybrid import hybrid_problems
from .media import media_problems
from .moe import router_rules
from .vision import vision_problems
from .wan import wan_problems

__all__ = ["model_problems"]


def model_problems(cfg) -> list[Problem]:
    """Every model rule the configuration breaks: the layer kinds' own (hybrid, DSA, DeepSeek-V4, Kimi K3, the
    vision tower, Gemma 4, MiMo-V2-Flash, heterogeneous layers, K-EXAONE, Falcon-H1) and the generic ones below,
    in that order."""
    m, par = cfg.model, cfg.parallelism
    t = par.tensor_model_parallel_size
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem("model." + field, value, msg))

    pattern = m.hybrid_layer_pattern
    variant = m.experimental_attention_variant
    dsa, v4, kda = variant == "dsa", variant == "dsv4_hybrid", variant == "kda"
    out += hybrid_problems(cfg)
    if not v4:       # DeepSeek-V4's layers use the indexer fields and the kernel backend their own way
        out += dsa_problems(cfg, dsa and pattern is None)
    out += dsv4_problems(cfg)
    out += kimi_problems(cfg)
    out += vision_problems(cfg)
    out += wan_problems(cfg)
    out += media_problems(cfg)      # omni28: Nemotron Omni's sound tower and video frames
    if m.moe_latent_size is not None and m.num_experts is None:
        add("moe_latent_size", m.moe_latent_size, "applies only to MoE models (set num_experts)")
    if m.post_layernorm and (m.multi_latent_attention or pattern is not None
                             or m.experimental_attention_variant is not None):
        add("post_layernorm", True, "modelled for the attention + MLP / MoE layers of Megatron-Bridge's Gemma "
            "specs only (not with MLA, gated delta nets or a hybrid pattern)")
    out += gemma4_moe_problems(cfg)
    out += global_attention_problems(m, t, pattern)
    out += mimo_problems(cfg, pattern)
    out += hetero_problems(m, t, pattern)
    if not m.pre_layernorm and not m.post_layernorm:
        add("pre_layernorm", False, "only OLMo 2's placement is modelled without the pre-norms: set "
            "post_layernorm true (norms after attention and after the MLP)")
    if m.qk_layernorm_full_dim and (not m.qk_layernorm or m.multi_latent_attention or m.normalization != "RMSNorm"):
        add("qk_layernorm_full_dim", True, "needs qk_layernorm true with self-attention (not multi-latent "
            "attention) and normalization RMSNorm: Megatron-Bridge's full-width q/k norm is an RMSNorm")
    out += k_exaone_problems(m)
    out += falcon_h1_problems(cfg)
    out += te_full_layer_problems(cfg)
    if m.qk_l2_norm and (m.qk_layernorm or m.multi_latent_attention):
        add("qk_l2_norm", True, "Megatron-Core uses either the L2 norm or qk_layernorm on queries and keys, and "
            "not with multi-latent attention")
    if m.attention_output_gate and m.multi_latent_attention and not kda:
        add("attention_output_gate", True, "the output gate exists only in SelfAttention, not with multi-latent "
            "attention")
    if m.softmax_type != "vanilla" and m.multi_latent_attention:
        add("softmax_type", m.softmax_type, "modelled only for self-attention, not multi-latent attention")
    if m.num_experts is not None:
        router_rules(m, add)
    return out
