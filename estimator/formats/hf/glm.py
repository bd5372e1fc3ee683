"""The GLM MoE families: GLM-4.5 / 4.6 / 4.7 (grouped-query attention), GLM-4.7-Flash (multi-latent attention)
and GLM-5 / 5.1 / 5.2 (multi-latent attention with DeepSeek sparse attention; GLM-5.2 shares each top-k over four
layers), with the router as Megatron-Bridge's GLM bridges build it."""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from ...config.rules.attention import dsa_shared_topk
from .deepseek import dsa_indexer, mla
from .reader import Reader, pattern_value, refuse_true


def _glm_router(r: Reader, m: dict, *, shared_times_count: bool, aux_coeff: float = 1e-3) -> None:
    """The MoE part of Megatron-Bridge's GLM bridges (glm/glm45_bridge.py, glm/glm47_flash_bridge.py @ 067f987d):
    first_k_dense_replace dense layers, then MoE with n_routed_experts of moe_intermediate_size, a shared expert
    (GLM-4.5: moe_intermediate_size; GLM-4.7-Flash: times n_shared_experts), sigmoid routing with the expert
    bias, seq_aux_loss at ``aux_coeff`` (1e-3; GLM-5's bridge sets none, so Megatron-Core's 0.0), and
    num_nextn_predict_layers MTP layers."""
    L = m["num_layers"]
    m["num_experts"] = r.int("n_routed_experts")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    fm = r.int("moe_intermediate_size")
    m["moe_ffn_hidden_size"] = fm
    shared = r.int("n_shared_experts", 1)
    if shared:
        m["moe_shared_expert_intermediate_size"] = fm * (shared if shared_times_count else 1)
    first = r.int("first_k_dense_replace", 1)
    if first >= L:
        raise UnsupportedError(f"{r.mt} config.json makes no layer MoE (first_k_dense_replace {first} >= "
                               f"num_hidden_layers {L})")
    pattern = [int(i >= first) for i in range(L)]
    if pattern_value(pattern) is not None:
        m["moe_layer_freq"] = pattern
    m["moe_router_score_function"] = "sigmoid"
    m["moe_router_enable_expert_bias"] = True
    m["moe_router_load_balancing_type"] = "seq_aux_loss"
    if aux_coeff:
        m["moe_aux_loss_coeff"] = aux_coeff
    groups, topk = r.int("n_group", required=False), r.int("topk_group", required=False)
    if groups and groups > 1 and topk:
        m["moe_router_num_groups"], m["moe_router_group_topk"] = groups, topk
    mtp = r.int("num_nextn_predict_layers")
    if mtp:
        m["mtp_num_layers"] = mtp


def _glm_required(r: Reader, *keys: str) -> None:
    """GLM's published config.json files state these keys; Hugging Face's defaults (no biases, no q/k norm, no MTP
    layer) describe none of the GLM-4.5 / 4.6 / 4.7 checkpoints, so a copy without them (a tool's trimmed copy)
    is refused rather than counted short."""
    for key in keys:
        if key not in r.hf:
            raise UnsupportedError(f"config.json key {key} is missing for {r.mt}: the published GLM config.json states it "
                                   "and it changes the parameter count (Hugging Face's default leaves out what the "
                                   "checkpoint has); this copy looks trimmed, so pass the model's own config.json")


def map_glm4_moe(r: Reader, m: dict) -> None:
    """GLM-4.5 / 4.6 / 4.7 and GLM-4.5-Air (Megatron-Bridge glm/glm45_bridge.py): GQA with head_dim, biases on
    q, k and v (attention_bias: add_qkv_bias, as Bridge's CONFIG_MAPPING), per-head q/k norms where use_qk_norm,
    partial RoPE (no weights), and :func:`_glm_router`'s MoE. attention_bias, use_qk_norm and
    num_nextn_predict_layers must be stated (:func:`_glm_required`)."""
    _glm_required(r, "attention_bias", "use_qk_norm", "num_nextn_predict_layers")
    refuse_true(r, "mlp_bias", why="biases on the MLP have no place in GLM-4.5's layers")
    m["num_query_groups"] = r.int("num_key_value_heads", m["num_attention_heads"])
    head_dim = r.int("head_dim", required=False)
    if head_dim is not None:
        m["kv_channels"] = head_dim
    m["ffn_hidden_size"] = r.int("intermediate_size")
    if r.flag("attention_bias"):
        m["add_qkv_bias"] = True
    if r.flag("use_qk_norm"):
        m["qk_layernorm"] = True
    _glm_router(r, m, shared_times_count=False)


def map_glm4_moe_lite(r: Reader, m: dict) -> None:
    """GLM-4.7-Flash (Megatron-Bridge glm/glm47_flash_bridge.py, an MLA provider): DeepSeek-V3's multi-latent
    attention (q_lora_rank, kv_lora_rank, qk_nope/rope/v head dims, latent norms) and :func:`_glm_router`'s MoE.
    num_key_value_heads and head_dim are Hugging Face bookkeeping for MLA and change no tensor.
    num_nextn_predict_layers must be stated (:func:`_glm_required`)."""
    _glm_required(r, "num_nextn_predict_layers")
    for key in ("attention_bias", "mlp_bias"):
        refuse_true(r, key, why="biases on the MLA or MoE projections have no Megatron-Core equivalent")
    mla(r, m)
    m["ffn_hidden_size"] = r.int("intermediate_size")
    r.int("num_key_value_heads", required=False)
    r.int("head_dim", required=False)
    _glm_router(r, m, shared_times_count=True)


def map_glm_moe_dsa(r: Reader, m: dict) -> None:
    """GLM-5 (Megatron-Bridge @ 067f987d : src/megatron/bridge/models/glm_moe_dsa/glm5_bridge.py, an MLA provider):
    multi-latent attention with DeepSeek sparse attention (:func:`dsa_indexer`; the bridge turns the indexer
    loss on at 0.001, in its sparse form: dsa_indexer_use_sparse_loss), and :func:`_glm_router`'s MoE with the shared expert n_shared_experts x
    moe_intermediate_size and no aux-loss coefficient. qk_head_dim, where given, must be qk_nope_head_dim +
    qk_rope_head_dim (the bridge derives the rotary width from it); num_key_value_heads, head_dim and
    indexer_rope_interleave change no tensor. GLM-5.2's cross-layer top-k sharing: index_topk_freq and
    index_skip_topk_offset become dsa_indexer_topk_freq and dsa_indexer_skip_topk_offset, as the bridge reads them
    (``getattr(hf_config, "index_topk_freq", 1)``); the layers that reuse another's top-k build no indexer.
    index_share_for_mtp_iteration (the MTP layer reusing the main model's top-k while decoding) is an inference
    setting: Megatron-Core's MTP layer computes its own. moe_router_dtype (GLM-5.2: float32) describes the
    checkpoint's router, not the training run's dtype (the model section's moe_router_dtype), and is only checked;
    num_experts, where an export adds it, must repeat n_routed_experts. num_nextn_predict_layers must be
    stated (:func:`_glm_required`)."""
    _glm_required(r, "num_nextn_predict_layers")
    for key in ("attention_bias", "mlp_bias"):
        refuse_true(r, key, why="biases on the MLA or MoE projections have no Megatron-Core equivalent")
    mla(r, m)
    qk = r.int("qk_head_dim", required=False)
    if qk is not None and qk != m["qk_head_dim"] + m["qk_pos_emb_head_dim"]:
        raise ConfigError(Problem("config.json:qk_head_dim", qk, f"must be qk_nope_head_dim + qk_rope_head_dim "
                                  f"({m['qk_head_dim']} + {m['qk_pos_emb_head_dim']})"))
    m["ffn_hidden_size"] = r.int("intermediate_size")
    r.int("num_key_value_heads", required=False)
    r.int("head_dim", required=False)
    r.flag("indexer_rope_interleave")
    dsa_indexer(r, m)
    freq, offset = r.int("index_topk_freq", 1), r.int("index_skip_topk_offset", 0)
    if freq is not None and freq > 1:
        m["dsa_indexer_topk_freq"], m["dsa_indexer_skip_topk_offset"] = freq, offset or 0
    r.flag("index_share_for_mtp_iteration")
    pattern = r.hf.get("index_topk_pattern")
    if pattern is not None:
        raise UnsupportedError(f"config.json:index_topk_pattern {show(pattern)} for {r.mt}: an explicit per-layer "
                               "top-k pattern has no Megatron-Core equivalent (Megatron-Bridge reads only "
                               "index_topk_freq and index_skip_topk_offset); only null is modelled")
    m["dsa_indexer_loss_coeff"] = 0.001
    m["dsa_indexer_use_sparse_loss"] = True
    dtype = r.hf.get("moe_router_dtype")
    if dtype not in (None, "float32"):
        raise ConfigError(Problem("config.json:moe_router_dtype", dtype, "must be float32 where given (GLM-5.2's "
                                  "router; a training setting, like training.moe_router_dtype, not the model's)"))
    _glm_router(r, m, shared_times_count=True, aux_coeff=0.0)
    copy = r.int("num_experts", required=False)
    if copy is not None and copy != m["num_experts"]:
        raise ConfigError(Problem("config.json:num_experts", copy, f"must equal n_routed_experts "
                                  f"({m['num_experts']}), which it repeats (NVIDIA's GLM-5.2-NVFP4 export)"))
    _glm_layer_lists(r, m)


def _glm_layer_lists(r: Reader, m: dict) -> None:
    """GLM-5's per-layer lists (huggingface/transformers @ 008e574 :
    src/transformers/models/glm_moe_dsa/configuration_glm_moe_dsa.py): mlp_layer_types ("dense" / "sparse") must say
    what first_k_dense_replace says; indexer_types ("full": the layer runs its own indexer, "shared": it reuses the
    previous full layer's top-k and has no indexer) must say what index_topk_freq and index_skip_topk_offset say
    (:func:`~estimator.config.rules.attention.dsa_shared_topk`), since Megatron-Bridge builds the layers from those two
    and the checkpoint's indexers from the list; a list that disagrees is refused."""
    L = m["num_layers"]
    first = r.int("first_k_dense_replace", 1)
    want = ["dense"] * first + ["sparse"] * (L - first)
    kinds = r.hf.get("mlp_layer_types")
    if kinds is not None and kinds != want:
        raise UnsupportedError(f"config.json:mlp_layer_types {show(kinds)} for {r.mt}: only the pattern "
                               f"first_k_dense_replace gives ({first} dense, then {L - first} sparse) is modelled")
    kinds = r.hf.get("indexer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != L or any(k not in ("full", "shared") for k in kinds):
            raise ConfigError(Problem("config.json:indexer_types", show(kinds), f"must list num_hidden_layers ({L}) "
                                      "entries, each full or shared"))
        shared = dsa_shared_topk(L, m.get("dsa_indexer_topk_freq", 1), m.get("dsa_indexer_skip_topk_offset", 0))
        if [k == "shared" for k in kinds] != list(shared):
            raise UnsupportedError(f"config.json:indexer_types for {r.mt}: its {kinds.count('shared')} shared layers "
                                   f"are not the {sum(shared)} that index_topk_freq "
                                   f"{m.get('dsa_indexer_topk_freq', 1)} and index_skip_topk_offset "
                                   f"{m.get('dsa_indexer_skip_topk_offset', 0)} make (Megatron-Bridge builds the "
                                   "layers from those two); only a list that agrees with them is modelled")
