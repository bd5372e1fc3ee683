"""The hybrid and linear-attention rules: a hybrid layer pattern (Mamba, attention, MoE and gated delta net layers)
against the other model fields, the Mamba mixer's heads and groups, and the gated delta net's heads.

Each rule is checked where Megatron-Core checks it (cited per rule). The pattern's own grammar is
:func:`estimator.config.hybrid_pattern.pattern_problems`'s and its pipeline split
:func:`estimator.config.hybrid_pattern.split_problems`' (through
:func:`estimator.config.rules.check.layer_split_problems`).
"""

from __future__ import annotations

from ..errors import Problem
from ..hybrid_pattern import parse, pattern_problems

__all__ = ["hybrid_problems"]


def hybrid_problems(cfg) -> list[Problem]:
    """The hybrid layer pattern against the MoE and attention fields, the Mamba mixer's heads and groups over the
    tensor- and context-parallel ranks, and the linear-attention (gated delta net) fields."""
    m, par = cfg.model, cfg.parallelism
    t, cp = par.tensor_model_parallel_size, par.context_parallel_size
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem("model." + field, value, msg))

    pattern = m.hybrid_layer_pattern
    symbols = ""
    if pattern is not None and not pattern_problems(pattern):
        p = parse(pattern)
        symbols = p.layers + p.mtp
        if m.mtp_hsm and p.mtp_depths < 2:
            # transformer_config.py __post_init__: mtp_num_layers (the pattern's MTP depths) >= 2
            add("mtp_hsm", True, f"needs at least 2 MTP depths in hybrid_layer_pattern (got {p.mtp_depths}): with "
                "one there is nothing to mix (TransformerConfig)")
        # arguments.py and hybrid_layer_allocation.py: the pattern decides every layer's kind.
        if m.num_experts is not None and "E" not in symbols:
            add("num_experts", m.num_experts, "a hybrid model has MoE layers only where its pattern has E")
        if m.num_experts is None and "E" in symbols:
            add("hybrid_layer_pattern", pattern, "E (MoE) layers need num_experts")
        if m.moe_layer_freq not in (1, None):
            add("moe_layer_freq", m.moe_layer_freq if isinstance(m.moe_layer_freq, int) else list(m.moe_layer_freq),
                "does not apply to a hybrid model (its pattern's E symbols are the MoE layers)")
        if m.multi_latent_attention:
            add("multi_latent_attention", True, "not modelled in a hybrid model (its '+' layers)")
        for name in ("experimental_attention_variant", "linear_attention_freq"):
            if getattr(m, name) is not None:
                add(name, getattr(m, name), "does not apply to a hybrid model: its G symbols are the gated delta "
                    "net layers")
    if "M" in symbols:
        # mamba_mixer.py MambaMixer.__init__: heads and groups are split over the tensor-parallel ranks.
        heads = m.mamba_num_heads
        if heads is None:
            if (2 * m.hidden_size) % m.mamba_head_dim:
                add("mamba_head_dim", m.mamba_head_dim, f"must divide the inner width 2 x hidden_size "
                    f"({2 * m.hidden_size}) when mamba_num_heads is null (MambaMixer)")
            heads = 2 * m.hidden_size // m.mamba_head_dim
        if heads % t:
            add("mamba_num_heads", heads, f"Mamba heads ({heads}) must be divisible by tensor_model_parallel_size "
                f"({t}) (MambaMixer)")
        if m.mamba_num_groups % t:
            add("mamba_num_groups", m.mamba_num_groups, f"must be divisible by tensor_model_parallel_size ({t}) "
                "(MambaMixer)")
        if heads % m.mamba_num_groups:
            add("mamba_num_groups", m.mamba_num_groups, f"must divide the Mamba heads ({heads}) (MambaMixer)")
        if cp > 1 and (heads % (t * cp) or m.mamba_num_groups % (t * cp) and (t * cp) % m.mamba_num_groups):
            add("mamba_num_heads", heads, f"Mamba heads ({heads}) and groups ({m.mamba_num_groups}) must split "
                f"over tensor x context parallel ranks ({t * cp}) (MambaContextParallel)")
    if not m.use_mamba_mem_eff_path and cp > 1 and not m.mamba_gated_norm:
        # mamba_mixer.py MambaMixer._static_prefill: the unfused scan's own gated norm would run on a CP rank's heads
        add("use_mamba_mem_eff_path", False, f"false needs mamba_gated_norm true with context_parallel_size {cp} "
            "(MambaMixer: context parallelism is not supported without the fused scan and without the gated norm)")
    variant = m.experimental_attention_variant
    dsa = variant == "dsa"
    v4 = variant == "dsv4_hybrid"
    kda = variant == "kda"
    gdn = (variant is not None and not dsa and not v4 and not kda) or "G" in symbols
    if pattern is None:
        if variant is not None and not dsa and not v4 and m.linear_attention_freq is None:
            add("linear_attention_freq", None, "is required with experimental_attention_variant gdn "
                "(TransformerConfig: which layers are linear attention)")
        if m.linear_attention_freq is not None and (variant is None or dsa or v4):
            add("linear_attention_freq", m.linear_attention_freq if isinstance(m.linear_attention_freq, int)
                else list(m.linear_attention_freq), "applies only with experimental_attention_variant: gdn or kda")
        if isinstance(m.linear_attention_freq, tuple) and len(m.linear_attention_freq) != m.num_layers:
            add("linear_attention_freq", list(m.linear_attention_freq), f"a pattern list must have num_layers "
                f"({m.num_layers}) entries, got {len(m.linear_attention_freq)}")
    if gdn:
        # transformer_config.py __post_init__ (gated delta net checks).
        nk, nv = m.linear_num_key_heads, m.linear_num_value_heads
        if nv % nk:
            add("linear_num_value_heads", nv, f"must be a multiple of linear_num_key_heads ({nk})")
        for name, n in (("linear_num_key_heads", nk), ("linear_num_value_heads", nv)):
            if n % (t * cp):
                add(name, n, f"must be a multiple of tensor x context parallel size ({t * cp})")
    return out
