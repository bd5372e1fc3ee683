"""The attention rules: key/value heads over the tensor-parallel ranks (:func:`kv_split_problems`), and the
attention-variant rules: DeepSeek sparse attention (``experimental_attention_variant: dsa``, its indexer
and cross-layer top-k sharing over the pipeline split) and DeepSeek-V4's hybrid attention (``dsv4_hybrid``, with
its hyper-connections and hash-routed MoE layers).

Each rule is checked where Megatron-Core checks it (cited per rule). :func:`dsa_shared_topk` is also the model's
(estimator/model/resolve.py: which layers build an indexer).
"""

from __future__ import annotations

from ..errors import Problem

__all__ = ["dsa_problems", "dsa_shared_topk", "dsa_split_problems", "dsv4_problems", "kv_split_problems"]


def kv_split_problems(field: str, g: int, t: int, qkv_width: int) -> list[Problem]:
    """Key/value heads (query groups) g over t tensor-parallel ranks. Megatron-LM @ d98e8a64 :
    megatron/core/transformer/transformer_config.py ``__post_init__`` raises unless g is a multiple or a divisor of
    t ("num_query_groups (g) must be a multiple or divisor of tensor_model_parallel_size (t)"). With g < t
    (attention.py ``Attention.__init__``, ``SelfAttention.get_query_key_value_tensors``) the fused QKV weight is
    still one column-parallel linear of ``qkv_width`` outputs split evenly over the ranks (``divide`` asserts t
    divides it), and each rank all-gathers the QKV output and attends with one key/value head."""
    if g % t and t % g:
        return [Problem(field, g, f"{field.split('.')[-1]} ({g}) must be a multiple or a divisor of "
                        f"tensor_model_parallel_size ({t}) (Megatron-Core's TransformerConfig check)")]
    if g < t and qkv_width % t:
        return [Problem(field, g, f"with fewer key/value heads ({g}) than tensor_model_parallel_size ({t}) the "
                        f"fused QKV projection's {qkv_width} outputs must still be divisible by {t} (Megatron-Core's "
                        "ColumnParallelLinear splits them evenly)")]
    return []


_DSA_FIELDS = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk")


def dsa_problems(cfg, dsa: bool) -> list[Problem]:
    """DeepSeek sparse attention (Megatron-LM @ d98e8a64): ``experimental_attention_variant_module_specs.py``
    ``get_dsa_module_spec_for_backend`` asserts multi-latent attention; ``transformer_config.py`` ``__post_init__``
    requires add_bias_linear false and, with context parallelism, cp_comm_type allgather;
    ``absorbed_mla.py`` ``AbsorbedMLASelfAttention.__init__`` requires sequence parallelism with TP > 1 and no
    FP8/FP4 with the mla_up_proj recompute; the indexer needs its heads, head width (at least the rotary width it
    splits off) and top-k. FP8 is not modelled. Cross-layer top-k sharing (:func:`dsa_shared_topk`) applies only
    with dsa; its pipeline split is :func:`dsa_split_problems`'s."""
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem(field if "." in field else "model." + field, value, msg))

    if not dsa:
        for name in _DSA_FIELDS + ("dsa_indexer_loss_coeff",):
            if getattr(m, name) is not None:
                add(name, getattr(m, name), "applies only with experimental_attention_variant: dsa")
        for name, default in (("dsa_indexer_topk_freq", 1), ("dsa_indexer_skip_topk_offset", 0),
                              ("dsa_indexer_use_sparse_loss", False)):
            if getattr(m, name) != default:
                add(name, getattr(m, name), "applies only with experimental_attention_variant: dsa")
        return out
    if not m.multi_latent_attention:
        add("experimental_attention_variant", "dsa", "needs multi_latent_attention true (Megatron-Core's DSA is "
            "built on absorbed multi-latent attention only)")
    for name in _DSA_FIELDS:
        if getattr(m, name) is None:
            add(name, None, "is required with experimental_attention_variant dsa (the indexer's shape)")
    rope = m.qk_pos_emb_head_dim or 64
    if m.dsa_indexer_head_dim is not None and m.dsa_indexer_head_dim < rope:
        add("dsa_indexer_head_dim", m.dsa_indexer_head_dim, f"must be at least qk_pos_emb_head_dim ({rope}): the "
            "indexer applies RoPE to that many channels of each head")
    if m.add_bias_linear:
        add("add_bias_linear", True, "must be false with DeepSeek sparse attention (AbsorbedMLASelfAttention)")
    if par.tensor_model_parallel_size > 1 and not tr.sequence_parallel:
        add("training.sequence_parallel", False, "must be true with DeepSeek sparse attention and "
            f"tensor_model_parallel_size {par.tensor_model_parallel_size} (AbsorbedMLASelfAttention)")
    if par.context_parallel_size > 1 and par.cp_comm_type != "allgather":
        add("parallelism.cp_comm_type", par.cp_comm_type, "must be allgather with DeepSeek sparse attention and "
            "context parallelism (DSAttention)")
    if cfg.precision.fp8:
        add("precision.fp8", cfg.precision.fp8, "is not modelled with DeepSeek sparse attention")
    if cfg.precision.fp4:
        add("precision.fp4", cfg.precision.fp4, "is not modelled with DeepSeek sparse attention")
    return out


def dsa_shared_topk(L: int, freq: int, offset: int) -> tuple:
    """Per decoder layer (0-indexed), whether it reuses an earlier layer's DeepSeek-sparse-attention top-k instead of
    building an indexer (Megatron-LM @ d98e8a64 : megatron/core/transformer/experimental_attention_variant/dsa.py
    ``is_dsa_skip_topk_layer``, on the 1-indexed layer number n: with o = max(offset, 1), n reuses when
    max(n - o, 0) mod freq != 0, and then takes the top-k of layer n - ((n - o) mod freq),
    ``source_dsa_compute_layer``). freq 1: no layer reuses. GLM-5.2 (78 layers, freq 4, offset 3): layers 1, 2,
    3, then 7, 11, ..., 75 compute (21), the other 57 reuse."""
    if freq <= 1:
        return (False,) * L
    o = max(offset, 1)
    return tuple(max(n - o, 0) % freq != 0 for n in range(1, L + 1))


def dsa_split_problems(m, plans) -> list[Problem]:
    """Megatron-LM @ d98e8a64 : megatron/core/models/gpt/experimental_attention_variant_module_specs.py
    ``_validate_dsa_index_share_pipeline_split``: a layer that reuses another's top-k must find that layer earlier in
    its own model chunk (pipeline stage, or virtual stage), so every chunk must start on a layer that computes its
    top-k. ``plans``: each stage's :class:`~estimator.config.pipeline_layout.StagePlan`."""
    if m.experimental_attention_variant != "dsa" or m.dsa_indexer_topk_freq <= 1 or m.hybrid_layer_pattern:
        return []
    shared = dsa_shared_topk(m.num_layers, m.dsa_indexer_topk_freq, m.dsa_indexer_skip_topk_offset)
    starts = sorted({c.layers.start for plan in plans for c in plan.chunks if len(c.layers)})
    bad = [i + 1 for i in starts if shared[i]]
    if not bad:
        return []
    return [Problem("model.dsa_indexer_topk_freq", m.dsa_indexer_topk_freq,
                    f"with dsa_indexer_skip_topk_offset {m.dsa_indexer_skip_topk_offset}, every pipeline chunk must "
                    f"start on a layer that computes its own top-k; layer(s) {', '.join(map(str, bad))} (1-indexed) "
                    "start a chunk but reuse an earlier layer's top-k, which does not cross pipeline stages "
                    "(Megatron-Core); change the pipeline split (e.g. num_layers_in_first_pipeline_stage or "
                    "pipeline_model_parallel_layout)")]


def dsv4_problems(cfg) -> list[Problem]:
    """DeepSeek-V4's layers: the hybrid attention (``experimental_attention_variant: dsv4_hybrid``),
    manifold-constrained hyper-connections and hash-routed MoE layers.

    Megatron-LM @ d48bd6be (the ``dev`` branch, where DeepSeek-V4 is built; Megatron-Bridge @ 067f987d calls these
    "MCore-dev-only"): ``megatron/core/transformer/experimental_attention_variant/deepseek_v4_hybrid_attention.py``
    ``DSv4HybridAttention.__init__`` asserts tensor-parallel size 1 and no ``core_attn`` checkpoint, and that
    num_attention_heads x v_head_dim divides by ``o_groups``; it reads the layer's ratio from ``csa_compress_ratios``
    at index (layer - 1), or num_layers + (MTP layer - 1) for an MTP layer; ``transformer_config.py``
    ``__post_init__`` requires at least num_layers + mtp_num_layers ratios, each 0, 4 or 128, and no tilelang backend; ``csa.py`` builds a compressor for a ratio
    above 1 and an indexer for ratio 4 (its heads, head width and top-k from the ``dsa_indexer_*`` fields);
    ``transformer_config.py`` makes ``moe_n_hash_layers`` the leading layers' routing and
    ``hyper_connection.py`` the residual streams."""
    m, par, tr = cfg.model, cfg.parallelism, cfg.training
    out: list[Problem] = []

    def add(field, value, msg):
        out.append(Problem(field if "." in field else "model." + field, value, msg))

    v4 = m.experimental_attention_variant == "dsv4_hybrid"
    mhc = tr.recompute_granularity == "selective" and "mhc" in (tr.recompute_modules or ())
    if mhc and not m.enable_hyper_connections:
        add("training.recompute_modules", list(tr.recompute_modules), "mhc needs enable_hyper_connections true "
            "(TransformerConfig)")
    if mhc and "mlp" in tr.recompute_modules:
        add("training.recompute_modules", list(tr.recompute_modules), "mhc cannot be used with mlp "
            "(TransformerConfig)")
    if tr.mhc_recompute_layer_num is not None and not mhc:
        add("training.mhc_recompute_layer_num", tr.mhc_recompute_layer_num, "applies only with selective "
            "recompute of mhc (training.recompute_modules)")
    if m.enable_hyper_connections and m.hybrid_layer_pattern is not None:
        add("enable_hyper_connections", True, "is modelled for GPT models only (not with hybrid_layer_pattern)")
    if m.moe_n_hash_layers:
        if m.num_experts is None:
            add("moe_n_hash_layers", m.moe_n_hash_layers, "applies only to MoE models (set num_experts)")
        elif m.moe_n_hash_layers > m.num_layers:
            add("moe_n_hash_layers", m.moe_n_hash_layers, f"must be at most num_layers ({m.num_layers})")
    if not v4:
        if m.csa_compress_ratios is not None:
            add("csa_compress_ratios", list(m.csa_compress_ratios),
                "applies only with experimental_attention_variant: dsv4_hybrid")
        return out
    if m.hybrid_layer_pattern is not None:
        add("experimental_attention_variant", "dsv4_hybrid", "is modelled for GPT models only (not with "
            "hybrid_layer_pattern)")
        return out
    if not m.multi_latent_attention:
        add("experimental_attention_variant", "dsv4_hybrid", "needs multi_latent_attention true (Megatron-Bridge "
            "builds DeepSeek-V4 with an MLA provider; q_lora_rank, v_head_dim and qk_pos_emb_head_dim give its shape)")
    if m.q_lora_rank is None:
        add("q_lora_rank", None, "is required with dsv4_hybrid (every layer has a query down-projection)")
    if m.add_bias_linear:
        add("add_bias_linear", True, "must be false with dsv4_hybrid (its projections have no biases)")
    t = par.tensor_model_parallel_size
    if t != 1:
        add("parallelism.tensor_model_parallel_size", t, "must be 1 with dsv4_hybrid (DSv4HybridAttention supports "
            "tensor-parallel size 1 only; use expert, pipeline and data parallelism)")
    if par.context_parallel_size > 1:
        add("parallelism.context_parallel_size", par.context_parallel_size, "context parallelism with dsv4_hybrid "
            "needs packed sequences (THD) split contiguously over the ranks (DSv4HybridAttention.forward, "
            "cp_partition_mode contiguous), which is not modelled; use 1")
    mods = tr.recompute_modules or ()
    if tr.recompute_granularity == "selective" and "core_attn" in mods:
        add("training.recompute_modules", list(mods), "core_attn is refused by DSv4HybridAttention")
    v = m.v_head_dim or 128
    if (m.num_attention_heads * v) % m.o_groups:
        add("o_groups", m.o_groups, f"must divide num_attention_heads x v_head_dim ({m.num_attention_heads} x {v})")
    ratios = m.csa_compress_ratios
    mtp = m.mtp_num_layers or 0
    if ratios is None:
        add("csa_compress_ratios", None, "is required with dsv4_hybrid (each layer's compression ratio)")
        return out
    if len(ratios) < m.num_layers + mtp:
        add("csa_compress_ratios", list(ratios), f"must have at least num_layers + mtp_num_layers ({m.num_layers} "
            f"+ {mtp}) entries, got {len(ratios)}")
    if not set(ratios) <= {0, 4, 128}:
        add("csa_compress_ratios", list(ratios), "every ratio must be 0 (sliding window only), 4 (compressed "
            f"sparse) or 128 (heavily compressed), got {sorted(set(ratios) - {0, 4, 128})}")
    if m.dsa_kernel_backend == "tilelang":
        add("dsa_kernel_backend", "tilelang", "is not supported with dsv4_hybrid: cudnn (fused) or none")
    extra = ratios[m.num_layers:m.num_layers + mtp]
    if len(set(extra)) > 1:
        add("csa_compress_ratios", list(ratios), f"the MTP layers' ratios must be equal (modelled as one kind), "
            f"got {list(extra)}")
    if 4 in ratios:
        for name in _DSA_FIELDS:
            if getattr(m, name) is None:
                add(name, None, "is required with a ratio-4 layer in csa_compress_ratios (the indexer's shape)")
    return out
