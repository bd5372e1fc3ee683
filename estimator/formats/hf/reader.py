"""Typed access to the keys of one ``config.json`` (:class:`Reader`): every key read is type-checked and held to
the bound of the schema field it becomes, so an error names the key. Also the small helpers every family shares
(the gated activations, MoE layer patterns, refusing a true flag, Phi-3's dropouts)."""

from __future__ import annotations

import math

from ...config.errors import ConfigError, Problem, UnsupportedError, show
from ...config.schema import MAX_EXPERTS, MAX_LAYERS, MAX_WIDTH, section_specs


GATED_ACT = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_new": "geglu",
              "gelu_pytorch_tanh": "geglu", "gelu_fast": "geglu"}


MODEL_ORDER = {s.name: i for i, s in enumerate(section_specs("model"))}


MODEL_SPECS = {s.name: s for s in section_specs("model")}


#: config.json key -> the model field it becomes (its bounds apply to the key), or the bound itself.
_BOUND_OF = {"num_hidden_layers": "num_layers", "hidden_size": "hidden_size",
             "num_attention_heads": "num_attention_heads", "num_key_value_heads": "num_query_groups",
             "head_dim": "kv_channels", "intermediate_size": "ffn_hidden_size", "vocab_size": "vocab_size",
             "max_position_embeddings": "max_position_embeddings", "num_local_experts": "num_experts",
             "num_experts": "num_experts", "n_routed_experts": "num_experts", "num_experts_per_tok": "moe_router_topk",
             "moe_intermediate_size": "moe_ffn_hidden_size", "q_lora_rank": "q_lora_rank",
             "shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
             "kv_lora_rank": "kv_lora_rank", "qk_nope_head_dim": "qk_head_dim", "qk_rope_head_dim": "qk_pos_emb_head_dim",
             "v_head_dim": "v_head_dim", "num_nextn_predict_layers": "mtp_num_layers", "rms_norm_eps": "layernorm_epsilon",
             "attention_dropout": "attention_dropout", "hidden_dropout": "hidden_dropout",
             "decoder_sparse_step": MAX_LAYERS, "first_k_dense_replace": MAX_LAYERS, "moe_layer_freq": MAX_LAYERS,
             "n_shared_experts": MAX_EXPERTS, "aux_loss_alpha": "moe_aux_loss_coeff",
             "n_group": "moe_router_num_groups", "topk_group": "moe_router_group_topk",
             # the families with their own mapping
             "layer_norm_epsilon": "layernorm_epsilon", "norm_eps": "layernorm_epsilon",
             "embd_pdrop": "hidden_dropout", "resid_pdrop": "hidden_dropout",
             "final_logit_softcapping": "final_logit_softcapping", "ssm_state_size": "mamba_state_dim",
             "mamba_head_dim": "mamba_head_dim", "n_groups": "mamba_num_groups", "mamba_num_heads": "mamba_num_heads",
             "moe_latent_size": "moe_latent_size", "attention_head_dim": "kv_channels",
             "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size", "expand": MAX_WIDTH,
             "conv_kernel": MAX_WIDTH, "full_attention_interval": MAX_LAYERS,
             "linear_conv_kernel_dim": "linear_conv_kernel_dim",
             "linear_key_head_dim": "linear_key_head_dim", "linear_value_head_dim": "linear_value_head_dim",
             "linear_num_key_heads": "linear_num_key_heads", "linear_num_value_heads": "linear_num_value_heads",
             "moe_num_experts": "num_experts", "moe_k": "moe_router_topk", "experts_per_token": "moe_router_topk",
             "intermediate_size_mlp": "ffn_hidden_size", "interleave_moe_layer_step": MAX_LAYERS,
             "moe_layer_start_index": MAX_LAYERS, "moe_layer_interval": MAX_LAYERS, "moe_layer_end_index": MAX_LAYERS,
             "num_shared_experts": MAX_EXPERTS, "moe_num_shared_experts": MAX_EXPERTS,
             "index_n_heads": "dsa_indexer_n_heads", "index_head_dim": "dsa_indexer_head_dim",
             "index_topk": "dsa_indexer_topk", "index_topk_freq": MAX_LAYERS,
             "o_groups": "o_groups", "o_lora_rank": "o_lora_rank", "hc_mult": "num_residual_streams",
             "num_hash_layers": "moe_n_hash_layers", "sliding_window": "csa_window_size",
             "index_skip_topk_offset": MAX_LAYERS, "qk_head_dim": MAX_WIDTH,
             "global_head_dim": "global_kv_channels", "num_global_key_value_heads": "num_global_query_groups",
             "top_k_experts": "moe_router_topk", "hidden_size_per_layer_input": MAX_WIDTH,
             "num_kv_shared_layers": MAX_LAYERS, "vocab_size_per_layer_input": "vocab_size",
             "mtp_num_hidden_layers": "mtp_num_layers", "mtp_num_speculative_steps": "mtp_num_layers",
             "kv_channels": "kv_channels",
             "layernorm_epsilon": "layernorm_epsilon", "swa_num_attention_heads": "num_attention_heads",
             "swa_num_key_value_heads": "num_query_groups", "swa_head_dim": "kv_channels",
             "swa_v_head_dim": "v_channels",
             # famD (issue 27)
             "expert_hidden_dim": "moe_ffn_hidden_size", "state_size": "mamba_state_dim",
             "num_heads": "mamba_num_heads", "mamba_d_state": "mamba_state_dim", "mamba_n_heads": "mamba_num_heads",
             "mamba_d_head": "mamba_head_dim", "mamba_n_groups": "mamba_num_groups", "mamba_d_ssm": MAX_WIDTH,
             "mamba_expand": MAX_WIDTH, "mamba_d_conv": MAX_WIDTH, "mamba_chunk_size": MAX_WIDTH,
             # famE (issue 27): Step 3.5 Flash
             "num_attention_groups": "num_query_groups", "moe_top_k": "moe_router_topk",
             "share_expert_dim": "moe_shared_expert_intermediate_size",
             "share_expert_dims": "moe_shared_expert_intermediate_size"}


#: Keys whose 0 means "none" in published configs, though the field they become starts at 1.
_ZERO_IS_NONE = frozenset({"q_lora_rank", "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
                           "moe_latent_size", "max_position_embeddings", "n_group", "topk_group", "num_experts"})


#: What a key whose 0 is refused stands for (the hint of the error).
_ZERO_HINT = {"n_routed_experts": "null or absent for a model without routed experts",
              "num_local_experts": "the number of experts of every MoE layer"}


#: Unknown keys named in the error; the rest are counted.
LISTED_KEYS = 20


class Reader:
    """Typed access to the keys of one config.json, with errors that name the key."""

    def __init__(self, hf: dict, mt: str):
        self.hf, self.mt = hf, mt

    @staticmethod
    def bound(key: str):
        b = _BOUND_OF.get(key)
        return MODEL_SPECS[b].max if isinstance(b, str) else b

    @staticmethod
    def least(key: str) -> int:
        """The smallest value of a key: that of the field it becomes (0 where published configs write 0 for none)."""
        b = _BOUND_OF.get(key)
        return int(MODEL_SPECS[b].min or 0) if isinstance(b, str) and key not in _ZERO_IS_NONE else 0

    def int(self, key: str, default=None, *, required: bool = True):
        v = self.hf.get(key)
        if v is None:
            if default is not None or not required:
                return default
            raise ConfigError(Problem(f"config.json:{key}", None, f"is required for {self.mt} and missing"))
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be a non-negative integer, got {show(v)}"))
        least = self.least(key)
        if v < least:
            hint = f" ({_ZERO_HINT[key]})" if key in _ZERO_HINT else ""
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be >= {least}{hint}, got {show(v)}"))
        top = self.bound(key)
        if top is not None and v > top:
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be <= {top:,}, got {show(v)}"))
        return v

    def number(self, key: str, default: float | None) -> float | None:
        """A finite number within the bounds of the field it becomes (true/false is not a number)."""
        v = self.hf.get(key)
        if v is None:
            return default
        spec = MODEL_SPECS[_BOUND_OF[key]]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be a finite number, got {show(v)}"))
        if not spec.min <= v <= spec.max:
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be between {spec.min:g} and {spec.max:g}, "
                                      f"got {show(v)}"))
        return float(v)

    def name(self, key: str, default: str | None, allowed=()) -> str | None:
        """A string key; ``allowed``, when given, is what the error lists (the caller refuses other names)."""
        v = self.hf.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            also = f"; allowed: {', '.join(allowed)}" if allowed else ""
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be a name (a string), got {show(v)}{also}"))
        return v

    def flag(self, key: str, default: bool = False) -> bool:
        v = self.hf.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be true or false, got {show(v)}"))
        return v


def pattern_value(pattern: list[int]):
    """A 0/1 MoE pattern as this schema writes it: omitted when every layer is MoE."""
    return None if all(pattern) else pattern


def refuse_true(r: Reader, *keys: str, why: str) -> None:
    for key in keys:
        if r.flag(key):
            raise UnsupportedError(f"config.json:{key} = true for {r.mt}: {why}")


def positive_dropouts(r: Reader, m: dict, *keys: str) -> None:
    """Phi-3's embd_pdrop / resid_pdrop: dropout on the embedding and the residual branches, Megatron's
    hidden_dropout (which it applies to both)."""
    vals = {k: r.number(k, 0.0) for k in keys}
    if len(set(vals.values())) > 1:
        raise UnsupportedError(f"config.json:{', '.join(keys)} = {vals} for {r.mt}: Megatron applies one "
                               "hidden_dropout to the embedding and the residual branches alike")
    p = next(iter(vals.values()))
    if p > 0:
        m["hidden_dropout"] = float(p)


def layer_flags(r: Reader, key: str, L: int) -> list[int]:
    """A list of num_hidden_layers 0/1 entries (MiMo-V2-Flash's hybrid_layer_pattern and moe_layer_freq, MiniMax-M3's moe_layer_freq)."""
    v = r.hf.get(key)
    if not isinstance(v, list) or len(v) != L or any(type(x) is not int or x not in (0, 1) for x in v):
        raise ConfigError(Problem(f"config.json:{key}", v, f"must be a list of num_hidden_layers ({L}) entries, "
                                  "each 0 or 1"))
    return v
