"""Hugging Face ``config.json`` to a ``model:`` section in Megatron-Core's names.

:func:`from_hf_config` reads a ``config.json`` (a file, a model directory holding one, or the parsed
dict) and returns the model section of an estimator configuration. It maps every key that changes the
parameter count or the training memory, the way Megatron-Bridge's model bridges translate the same
configs (``model_type`` decides the architecture):

=================================  ====================================================================
Hugging Face                       Megatron-Core (this schema)
=================================  ====================================================================
num_hidden_layers                  num_layers
hidden_size                        hidden_size
num_attention_heads                num_attention_heads
num_key_value_heads                num_query_groups (absent: plain multi-head attention)
head_dim                           kv_channels (Qwen3: 128 even where hidden/heads is not)
intermediate_size                  ffn_hidden_size (the dense MLP; Mixtral's experts too)
vocab_size                         vocab_size (Megatron pads it: make_vocab_size_divisible_by)
max_position_embeddings            max_position_embeddings
rms_norm_eps                       layernorm_epsilon (RMSNorm everywhere)
hidden_act silu / gelu             activation_func swiglu / geglu (all supported MLPs are gated)
tie_word_embeddings                untie_embeddings_and_output_weights (negated)
attention_bias + mlp_bias          add_bias_linear (Llama: only both together map exactly)
Qwen2 / Qwen2-MoE                  add_qkv_bias (bias on q, k, v only; hard-wired in the model)
Qwen3 / Qwen3-MoE                  qk_layernorm (per-head RMSNorm of q and k)
num_local_experts / num_experts /  num_experts
n_routed_experts
num_experts_per_tok                moe_router_topk
moe_intermediate_size              moe_ffn_hidden_size
shared_expert_intermediate_size    moe_shared_expert_intermediate_size, with moe_shared_expert_gate
                                   (Qwen2-MoE's sigmoid gate on the shared expert)
n_shared_experts x                 moe_shared_expert_intermediate_size (DeepSeek: Megatron fuses the
moe_intermediate_size              shared experts into one MLP of the summed width)
first_k_dense_replace,             moe_layer_freq as a 0/1 list (layer i is MoE when
moe_layer_freq (DeepSeek)          i >= first_k_dense_replace and i % moe_layer_freq == 0)
decoder_sparse_step,               moe_layer_freq as a 0/1 list (layer i is MoE when i is not in
mlp_only_layers (Qwen MoE)         mlp_only_layers and (i + 1) % decoder_sparse_step == 0)
topk_method noaux_tc               moe_router_enable_expert_bias (e_score_correction_bias)
q_lora_rank (null: no compression) q_lora_rank, with multi_latent_attention and qk_layernorm (the
kv_lora_rank                       MLA latent norms)
qk_nope_head_dim                   qk_head_dim
qk_rope_head_dim                   qk_pos_emb_head_dim
v_head_dim                         v_head_dim
num_nextn_predict_layers           mtp_num_layers
=================================  ====================================================================

Keys without effect on parameters or memory (token ids, RoPE base and scaling, sliding windows, router
loss coefficients and scoring, checkpoint quantization) are accepted and dropped. Any other key stops the
import with :class:`~estimator.errors.UnsupportedError` naming it: a count is never silently wrong. Every
key that is read is type-checked first (an integer, a finite number, true/false, a name) and held to the
bound of the schema field it becomes, so that ``num_hidden_layers: 10**30`` or ``rms_norm_eps: true`` is
an error naming the key, never an overflow, a hang or a silent 1.0.
gpt-oss is refused for the same reason (attention sinks and expert biases have no field here).

Nothing is downloaded: a Hub model id (``meta-llama/Llama-3.1-70B``) is resolved from the offline model
catalog (:mod:`estimator.hf_catalog`); an id not in it is an error naming the closest ids.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from . import yamlio
from .errors import ConfigError, Problem, UnsupportedError, clip, show
from .schema import MAX_EXPERTS, MAX_LAYERS, section_specs

__all__ = ["SUPPORTED", "from_hf_config", "read_hf_config"]

#: model_type -> (architecture class name, a short description), in the order the docs list them.
SUPPORTED: dict[str, tuple[str, str]] = {
    "llama": ("LlamaForCausalLM", "Llama 2, Llama 3, Llama 3.1"),
    "mistral": ("MistralForCausalLM", "Mistral"),
    "mixtral": ("MixtralForCausalLM", "Mixtral"),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2, Qwen2.5"),
    "qwen2_moe": ("Qwen2MoeForCausalLM", "Qwen2-MoE, Qwen1.5-MoE"),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3 dense"),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3-MoE"),
    "deepseek_v2": ("DeepseekV2ForCausalLM", "DeepSeek-V2, DeepSeek-V2-Lite"),
    "deepseek_v3": ("DeepseekV3ForCausalLM", "DeepSeek-V3, DeepSeek-R1, Kimi Moonlight"),
}

#: Refused with the reason: architectures whose parameters this schema cannot describe exactly.
REFUSED: dict[str, str] = {
    "gpt_oss": ("gpt-oss has attention sinks (one learned logit per head and layer), biases on the q/k/v/o "
                "projections, on every expert's projections and on the router, and a clamped SwiGLU; the "
                "configuration schema has no field for attention sinks or router biases, so any count would "
                "be wrong"),
}

_ARCH_TO_TYPE = {arch: mt for mt, (arch, _) in SUPPORTED.items()} | {"GptOssForCausalLM": "gpt_oss"}

#: Keys that change neither the parameter count nor the training memory of any supported architecture.
_INERT = frozenset({
    "_name_or_path", "architectures", "model_type", "auto_map", "transformers_version", "torch_dtype", "dtype",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "use_cache", "initializer_range",
    "pretraining_tp", "tokenizer_class", "rope_theta", "rope_scaling", "rope_parameters", "rope_interleave",
    "partial_rotary_factor", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
    "output_router_logits", "router_aux_loss_coef", "aux_loss_alpha", "seq_aux", "router_jitter_noise",
    "norm_topk_prob", "scoring_func", "routed_scaling_factor", "n_group", "topk_group", "ep_size",
    "quantization_config", "use_mrope", "attention_dropout", "hidden_dropout", "return_dict",
    "output_attentions", "output_hidden_states", "tie_encoder_decoder", "is_encoder_decoder",
    "id2label", "label2id", "torchscript", "use_bfloat16", "bad_words_ids", "unsloth_fixed",
    "max_length", "num_beams", "chunk_size_feed_forward", "attn_implementation",
})

_COMMON = frozenset({"num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps", "hidden_act",
                     "tie_word_embeddings", "head_dim", "attention_bias", "mlp_bias"})
_MOE_QWEN = frozenset({"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                       "mlp_only_layers"})
_DEEPSEEK = frozenset({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                       "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                       "first_k_dense_replace", "moe_layer_freq", "topk_method", "num_nextn_predict_layers"})

#: Keys each architecture understands on top of the common ones.
_KNOWN = {
    "llama": _COMMON,
    "mistral": _COMMON,
    "mixtral": _COMMON | {"num_local_experts", "num_experts_per_tok"},
    "qwen2": _COMMON,
    "qwen2_moe": _COMMON | _MOE_QWEN | {"shared_expert_intermediate_size"},
    "qwen3": _COMMON,
    "qwen3_moe": _COMMON | _MOE_QWEN,
    "deepseek_v2": _COMMON | _DEEPSEEK,
    "deepseek_v3": _COMMON | _DEEPSEEK,
}

_GATED_ACT = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_new": "geglu",
              "gelu_pytorch_tanh": "geglu", "gelu_fast": "geglu"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_MODEL_ORDER = {s.name: i for i, s in enumerate(section_specs("model"))}
_MODEL_SPECS = {s.name: s for s in section_specs("model")}
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
             "n_shared_experts": MAX_EXPERTS}
#: Unknown keys named in the error; the rest are counted.
_LISTED_KEYS = 20


def _supported_list() -> str:
    return "; ".join(f"{desc} ({mt}, {arch})" for mt, (arch, desc) in SUPPORTED.items())


def read_hf_config(source) -> dict:
    """The parsed ``config.json`` of a file, a model directory, a catalog Hub id or a dict (returned as is)."""
    if isinstance(source, dict):
        return source
    if not isinstance(source, (str, os.PathLike)) or not isinstance(os.fspath(source), str):
        raise ConfigError(Problem("hf", type(source).__name__,
                                  "expected a config.json path, a model directory or a dict"))
    from .config import path_kind, read_text_file
    path = Path(source)
    kind = path_kind(path)
    if kind is None:
        text = clip(os.fspath(source))
        if _HUB_ID.match(text) and not text.endswith(".json"):
            from .hf_catalog import get         # a Hub id: the offline catalog's copy, never a download
            return get(text).config()
        raise ConfigError(Problem("hf", text, f"file not found: {text}"))
    if kind == "dir":
        path = path / "config.json"
        if path_kind(path) != "file":
            raise ConfigError(Problem("hf", os.fspath(source), f"directory {source} holds no config.json"))
    try:
        data = yamlio.load_json(read_text_file(path, "hf"))
    except yamlio.YamlError as exc:
        raise ConfigError(Problem("hf", clip(os.fspath(path)), f"invalid JSON in {clip(os.fspath(path))}: "
                                  f"{exc}")) from None
    if not isinstance(data, dict):
        raise ConfigError(Problem("hf", os.fspath(path), "a config.json must hold a JSON object"))
    return data


def _model_type(hf: dict) -> str:
    mt = hf.get("model_type")
    archs = hf.get("architectures") or []
    if mt is not None and not isinstance(mt, str):
        raise ConfigError(Problem("config.json:model_type", mt, f"must be a name such as 'llama', got {show(mt)}"))
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(Problem("config.json:architectures", archs, "must be a list of class names such as "
                                  f"['LlamaForCausalLM'], got {show(archs)}"))
    if mt is None and archs:
        mt = _ARCH_TO_TYPE.get(archs[0])
    if mt in REFUSED:
        raise UnsupportedError(f"{archs[0] if archs else mt} (model_type {mt}) is not supported: {REFUSED[mt]}. "
                               f"Supported: {_supported_list()}.")
    if mt not in SUPPORTED:
        name = archs[0] if archs else (mt or "a config.json without model_type or architectures")
        raise UnsupportedError(f"unknown architecture {show(name)} (model_type {show(mt)}). Supported: "
                               f"{_supported_list()}.")
    return mt


class _Reader:
    """Typed access to the keys of one config.json, with errors that name the key."""

    def __init__(self, hf: dict, mt: str):
        self.hf, self.mt = hf, mt

    def get(self, key: str, default=None):
        v = self.hf.get(key, default)
        return default if v is None else v

    @staticmethod
    def bound(key: str):
        b = _BOUND_OF.get(key)
        return _MODEL_SPECS[b].max if isinstance(b, str) else b

    def int(self, key: str, default=None, *, required: bool = True):
        v = self.hf.get(key)
        if v is None:
            if default is not None or not required:
                return default
            raise ConfigError(Problem(f"config.json:{key}", None, f"is required for {self.mt} and missing"))
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be a non-negative integer, got {show(v)}"))
        top = self.bound(key)
        if top is not None and v > top:
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be <= {top:,}, got {show(v)}"))
        return v

    def number(self, key: str, default: float | None) -> float | None:
        """A finite number within the bounds of the field it becomes (true/false is not a number)."""
        v = self.hf.get(key)
        if v is None:
            return default
        spec = _MODEL_SPECS[_BOUND_OF[key]]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be a finite number, got {show(v)}"))
        if not spec.min <= v <= spec.max:
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be between {spec.min:g} and {spec.max:g}, "
                                      f"got {show(v)}"))
        return float(v)

    def name(self, key: str, default: str) -> str:
        v = self.hf.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be a name (a string), got {show(v)}"))
        return v

    def flag(self, key: str, default: bool = False) -> bool:
        v = self.hf.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(Problem(f"config.json:{key}", v, f"must be true or false, got {show(v)}"))
        return v


def from_hf_config(source, *, strict: bool = True) -> dict:
    """The ``model:`` section for a Hugging Face ``config.json`` (path, model directory, catalog Hub id or dict).

    Raises :class:`UnsupportedError` for an unknown architecture, for gpt-oss, for a value with no exact
    Megatron-Core equivalent, and (with ``strict``) for any key not known to be harmless; raises
    :class:`ConfigError` for a missing file, a Hub id not in the catalog, invalid JSON or a missing required key.
    """
    hf = read_hf_config(source)
    mt = _model_type(hf)
    if strict:
        unknown = sorted(show(k) if not isinstance(k, str) or len(k) > 64 else k for k in hf
                         if k not in _KNOWN[mt] and k not in _INERT)
        if unknown:
            listed = ", ".join(unknown[:_LISTED_KEYS]) + (f" and {len(unknown) - _LISTED_KEYS:,} more"
                                                         if len(unknown) > _LISTED_KEYS else "")
            raise UnsupportedError(
                f"config.json key(s) not understood for {mt}: {listed}. They may change "
                f"the parameter count, so the import stops rather than guess (pass strict=False to ignore them). "
                f"Supported architectures: {_supported_list()}.")
    r = _Reader(hf, mt)
    L = r.int("num_hidden_layers")
    m: dict = {
        "num_layers": L,
        "hidden_size": r.int("hidden_size"),
        "num_attention_heads": r.int("num_attention_heads"),
        "vocab_size": r.int("vocab_size"),
        "normalization": "RMSNorm",
        "layernorm_epsilon": r.number("rms_norm_eps", 1e-6),
        "position_embedding_type": "rope",
        "untie_embeddings_and_output_weights": not r.flag("tie_word_embeddings", False),
    }
    act = r.name("hidden_act", "silu")
    if act not in _GATED_ACT:
        raise UnsupportedError(f"config.json:hidden_act {show(act)} is not supported for {mt}; the gated MLP takes "
                               f"one of {', '.join(sorted(_GATED_ACT))}")
    m["activation_func"], m["gated_linear_unit"] = _GATED_ACT[act], True
    max_pos = r.int("max_position_embeddings", required=False)
    if max_pos:
        m["max_position_embeddings"] = max_pos
    for key in ("attention_dropout", "hidden_dropout"):
        p = r.number(key, 0.0)
        if p > 0:
            m[key] = p
    if mt.startswith("deepseek"):
        _deepseek(r, m)
    else:
        _gqa(r, m)
        if mt in ("mixtral", "qwen2_moe", "qwen3_moe"):
            _moe(r, m)
    return {k: m[k] for k in sorted(m, key=_MODEL_ORDER.__getitem__)}


def _gqa(r: _Reader, m: dict) -> None:
    """Standard attention (MHA/GQA) and the dense MLP of the Llama-style families."""
    mt, hf = r.mt, r.hf
    m["num_query_groups"] = r.int("num_key_value_heads", m["num_attention_heads"])
    head_dim = r.int("head_dim", required=False)
    if mt in ("qwen3", "qwen3_moe") and head_dim is None:
        raise ConfigError(Problem("config.json:head_dim", None, f"is required for {mt}: Qwen3's head width is "
                                  "128 even where hidden_size / num_attention_heads differs, so it must be stated"))
    if head_dim is not None:
        m["kv_channels"] = head_dim
    m["ffn_hidden_size"] = r.int("intermediate_size")
    att_bias, mlp_bias = r.flag("attention_bias"), r.flag("mlp_bias")
    if mt in ("qwen2", "qwen2_moe"):
        if mlp_bias or hf.get("attention_bias") is False:
            raise UnsupportedError(f"{mt} always has biases on q, k and v only; this config.json sets "
                                   f"attention_bias={hf.get('attention_bias')!r}, mlp_bias={mlp_bias!r}, which "
                                   "does not describe that model")
        m["add_qkv_bias"] = True
    elif att_bias and mlp_bias and mt == "llama":
        m["add_bias_linear"] = True
    elif att_bias or mlp_bias:
        what = "attention_bias (q, k, v and o projections)" if att_bias else "mlp_bias"
        raise UnsupportedError(f"config.json:{what} = true for {mt} has no exact Megatron-Core equivalent: "
                               "add_bias_linear puts biases on every linear layer, add_qkv_bias on q, k, v only")
    if mt in ("qwen3", "qwen3_moe"):
        m["qk_layernorm"] = True


def _pattern_value(pattern: list[int]):
    """A 0/1 MoE pattern as this schema writes it: omitted when every layer is MoE."""
    return None if all(pattern) else pattern


def _moe(r: _Reader, m: dict) -> None:
    """Mixtral, Qwen2-MoE and Qwen3-MoE experts."""
    mt, L = r.mt, m["num_layers"]
    if mt == "mixtral":
        m["num_experts"] = r.int("num_local_experts")
        m["moe_ffn_hidden_size"] = m["ffn_hidden_size"]
    else:
        m["num_experts"] = r.int("num_experts")
        m["moe_ffn_hidden_size"] = r.int("moe_intermediate_size")
    m["moe_router_topk"] = r.int("num_experts_per_tok")
    if mt in ("qwen2_moe", "qwen3_moe"):
        step = r.int("decoder_sparse_step", 1)
        only = r.get("mlp_only_layers", [])
        if not isinstance(only, list) or len(only) > L or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < L for i in only):
            raise ConfigError(Problem("config.json:mlp_only_layers", only,
                                      f"must be a list of layer indices in 0..{L - 1}"))
        if step < 1:
            raise ConfigError(Problem("config.json:decoder_sparse_step", step, "must be >= 1"))
        dense = set(only)
        pattern = [int(i not in dense and (i + 1) % step == 0) for i in range(L)]
        if not any(pattern):
            raise UnsupportedError(f"{mt} config.json makes no layer MoE (mlp_only_layers/decoder_sparse_step); "
                                   "import it as its dense counterpart instead")
        freq = _pattern_value(pattern)
        if freq is not None:
            m["moe_layer_freq"] = freq
    if mt == "qwen2_moe":
        shared = r.int("shared_expert_intermediate_size", 0)
        if shared:
            m["moe_shared_expert_intermediate_size"] = shared
            m["moe_shared_expert_gate"] = True


def _deepseek(r: _Reader, m: dict) -> None:
    """DeepSeek-V2/V3 (and Moonlight): multi-latent attention, first-k-dense MoE, shared experts, MTP."""
    mt, L = r.mt, m["num_layers"]
    for key in ("attention_bias", "mlp_bias"):
        if r.flag(key):
            raise UnsupportedError(f"config.json:{key} = true for {mt}: biases on the MLA or MoE projections "
                                   "have no Megatron-Core equivalent")
    m["multi_latent_attention"] = True
    m["qk_layernorm"] = True
    q_lora = r.int("q_lora_rank", required=False)
    if q_lora:
        m["q_lora_rank"] = q_lora
    m["kv_lora_rank"] = r.int("kv_lora_rank")
    m["qk_head_dim"] = r.int("qk_nope_head_dim")
    m["qk_pos_emb_head_dim"] = r.int("qk_rope_head_dim")
    m["v_head_dim"] = r.int("v_head_dim")
    m["ffn_hidden_size"] = r.int("intermediate_size")
    experts = r.int("n_routed_experts", required=False)
    if experts:
        m["num_experts"] = experts
        m["moe_router_topk"] = r.int("num_experts_per_tok")
        fm = r.int("moe_intermediate_size")
        m["moe_ffn_hidden_size"] = fm
        shared = r.int("n_shared_experts", 0)
        if shared:
            m["moe_shared_expert_intermediate_size"] = shared * fm
        first = r.int("first_k_dense_replace", 0)
        freq = r.int("moe_layer_freq", 1)
        if freq < 1:
            raise ConfigError(Problem("config.json:moe_layer_freq", freq, "must be >= 1"))
        pattern = [int(i >= first and i % freq == 0) for i in range(L)]
        if not any(pattern):
            raise UnsupportedError(f"{mt} config.json makes no layer MoE (first_k_dense_replace {first} >= "
                                   f"num_hidden_layers {L})")
        if _pattern_value(pattern) is not None:
            m["moe_layer_freq"] = pattern
        method = r.name("topk_method", "greedy")
        if method == "noaux_tc":
            m["moe_router_enable_expert_bias"] = True
        elif method not in ("greedy", "group_limited_greedy"):
            raise UnsupportedError(f"config.json:topk_method {show(method)} is not supported; known: greedy, "
                                   "group_limited_greedy, noaux_tc (adds the e_score_correction_bias)")
    mtp = r.int("num_nextn_predict_layers", 0)
    if mtp:
        m["mtp_num_layers"] = mtp
