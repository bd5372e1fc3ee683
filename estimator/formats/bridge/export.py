"""A configuration as Megatron-Bridge overrides (the inverse of :mod:`estimator.formats.bridge.config`).

:func:`to_bridge_overrides` writes ``section.field=value`` strings, as ``scripts/training/run_recipe.py`` of
NVIDIA-NeMo/Megatron-Bridge @ 067f987d takes them after ``--recipe NAME``, and :func:`to_bridge_dict` the same as a
``ConfigContainer``-shaped dict (what :func:`~estimator.formats.bridge.config.read_bridge_config` reads back).
The fields Megatron-Core receives are taken from the Megatron-LM flags of the configuration
(:func:`~estimator.formats.megatron_export.to_megatron_args`), so the two exports say the same run; the precision is
written as Bridge's preset (``mixed_precision=bf16_mixed``, ...) with the fields that differ from it, since a preset
overwrites the model's, the optimizer's and the DDP configuration's fields of the same names.
"""

from __future__ import annotations

import json

from ...config.errors import UnsupportedError
from ...config.fields import parse_layer_pattern
from ...config.load import load_config
from ...config.quant_recipe import recipe_from_rules
from ...memory.states import grad_reduce_in_fp32
from .catalog import SECTIONS
from .config import default_gaps
from .presets import MIXED_PRECISION_PRESETS
from . import wan
from ..megatron_catalog import ARGUMENTS
from ..megatron_export import to_megatron_args

__all__ = ["to_bridge_dict", "to_bridge_overrides"]

_FLAG_DEST = {flag: dest for dest, (flags, _, _) in ARGUMENTS.items() for flag in flags}

#: precision.logit_dtype -> the torch dtype Bridge's model.logit_dtype holds.
_TORCH_DTYPES = {"fp32": "torch.float32", "bf16": "torch.bfloat16"}

#: Megatron-LM destinations whose Bridge field has another name (the inverse of bridge_config's renames).
_FIELD = {"num_experts": "num_moe_experts", "num_virtual_stages_per_pipeline_rank":
          "virtual_pipeline_model_parallel_size", "decoder_first_pipeline_num_layers":
          "num_layers_in_first_pipeline_stage", "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage",
          "use_megatron_fsdp": "use_megatron_fsdp", "cuda_graph_modules": "cuda_graph_scope",
          "ddp_param_name_patterns_for_fp32_local_accumulation": "param_name_patterns_for_fp32_local_accumulation",
          "ddp_reduce_scatter_with_fp32_accumulation": "reduce_scatter_with_fp32_accumulation"}

#: Flags the precision preset says (written through mixed_precision instead).
_PRECISION = {"bf16", "fp16", "fp8", "fp8_recipe", "fp8_param_gather", "fp4", "fp4_recipe", "fp4_param_gather",
              "grad_reduce_in_bf16",
              "accumulate_allreduce_grads_in_fp32", "first_last_layers_bf16", "num_layers_at_start_in_bf16",
              "num_layers_at_end_in_bf16", "reuse_grad_buf_for_mxfp8_param_ag"}

#: (params dtype, fp8 recipe, "nvfp4" or None) -> Bridge's preset (training/mixed_precision.py).
_PRESET = {("bf16", None): "bf16_mixed", ("fp16", None): "fp16_mixed",
           ("bf16", "delayed"): "bf16_with_fp8_delayed_scaling_mixed",
           ("bf16", "tensorwise"): "bf16_with_fp8_current_scaling_mixed",
           ("bf16", "mxfp8"): "bf16_with_mxfp8_mixed", ("bf16", "blockwise"): "bf16_with_fp8_subchannel_scaling_mixed",
           ("fp16", "delayed"): "fp16_with_fp8_delayed_scaling_mixed",
           ("fp16", "tensorwise"): "fp16_with_fp8_current_scaling_mixed",
           ("fp16", "mxfp8"): "fp16_with_mxfp8_mixed", ("fp16", "blockwise"): "fp16_with_fp8_subchannel_scaling_mixed",
           ("bf16", "nvfp4"): "bf16_with_nvfp4_mixed"}


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _pairs(args: list[str]) -> list[tuple[str, list[str]]]:
    out, i = [], 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        out.append((args[i], args[i + 1:j]))
        i = j
    return out


def _sections_of(name: str) -> list[str]:
    held = [s for s in ("model", "ddp", "optimizer") if name in SECTIONS[s]]
    return held or [next((s for s in ("train", "dataset", "checkpoint") if name in SECTIONS[s]), "model")]


def to_bridge_dict(config) -> dict:
    """The configuration (anything :func:`estimator.load_config` takes) as Bridge ``ConfigContainer`` sections."""
    cfg = load_config(config)
    if cfg.parallelism.create_all_gather_group:
        raise UnsupportedError("parallelism.create_all_gather_group has no Megatron-Bridge field: Bridge @ 067f987d "
                               "never creates Megatron-FSDP's all-gather groups (Megatron-LM's "
                               "--create-all-gather-group)")
    if cfg.parallelism.hybrid_context_parallel:
        raise UnsupportedError("parallelism.hybrid_context_parallel does not run under Megatron-Bridge @ 067f987d: "
                               "its training loop never builds Megatron-Core's HybridCPDataLoaderWrapper, whose "
                               "sub-samples the per-sequence schedule reads (Megatron-LM's --hybrid-context-parallel)")
    if cfg.training.distillation_cached_logits:
        raise UnsupportedError("training.distillation_cached_logits has no Megatron-Bridge field: Bridge @ 067f987d "
                               "has no cached-logits distillation (Megatron-LM's pretrain_gpt.py --logits-load-dir)")
    data = cfg.to_dict()
    wan_model = None
    if cfg.model.model_kind == "wan":   # Megatron-Core's fields through the GPT flags, Wan's own after (bridge/wan.py)
        wan_model = {k: v for k, v in data["model"].items()}
        data["model"] = {k: v for k, v in data["model"].items() if k != "model_kind" and not k.startswith("wan_")}
    tr = data.setdefault("training", {})      # to_dict() holds only the sections given
    peft = tr.get("peft")
    empty_recompute = tr.get("recompute_granularity") == "selective" and tr.get("recompute_modules") == []
    data["training"] = {k: v for k, v in tr.items()            # no Megatron-LM flag: written below
                        if not k.startswith("peft") and k != "freeze_mtp"}
    par = data.setdefault("parallelism", {})
    ub_cfg, par["tp_comm_overlap_cfg"] = par.get("tp_comm_overlap_cfg"), None   # a name or YAML: no flag value
    quant = data.get("precision", {}).pop("quant_recipe", None)     # Megatron-LM's is a file: Bridge's own field
    graph_mode = par.pop("megatron_fsdp_cuda_graph_mode", False)                   # a DDP field with no flag
    te_layer = data["training"].pop("transformer_engine_full_layer_spec", False)   # a model field with no flag
    hybridep = data["model"].get("moe_hybridep_ranks_per_nvlink_domain")
    out: dict = {"model": {}, "ddp": {}, "optimizer": {}, "train": {}, "dataset": {}}
    dtype, fp8 = cfg.precision.params_dtype, None
    for flag, values in _pairs(to_megatron_args(data)):
        dest = _FLAG_DEST[flag]
        _, arity, default = ARGUMENTS[dest]
        if flag in ("--swiglu", "--quick-geglu"):
            out["model"].update(activation_func="torch.nn.functional." + ("silu" if flag == "--swiglu" else
                                                                          "quick_gelu"), gated_linear_unit=True)
        elif flag == "--squared-relu":
            out["model"].update(activation_func="squared_relu", gated_linear_unit=False)
        elif dest == "untie_embeddings_and_output_weights":
            out["model"]["share_embeddings_and_output_weights"] = False
        elif dest in ("group_query_attention", "max_position_embeddings"):
            continue        # Bridge reads num_query_groups directly; the model's positions are its seq_length
        elif dest == "fp8_recipe":
            fp8 = values[0]
        elif dest == "logit_dtype":     # flagsA28: a torch dtype in Bridge, written as config.yaml writes one
            out["model"]["logit_dtype"] = {"_target_": _TORCH_DTYPES[values[0]], "_call_": False}
        elif dest in _PRECISION:
            continue
        else:
            if arity == 0:
                value = not bool(default)
            elif arity in ("+", "*"):
                value = [_value(v) for v in values]
                if dest == "cp_comm_type" and len(value) == 1:    # Bridge's field takes one type for every layer
                    value = value[0]
            elif dest in ("moe_layer_freq", "linear_attention_freq") and values[0].startswith("("):
                value = list(parse_layer_pattern(values[0], bare_lists=False))
            else:
                value = _value(values[0])
            name = _FIELD.get(dest, dest)
            for section in _sections_of(name):
                out.setdefault(section, {})[name] = value
            if dest == "seq_length":
                out["dataset"]["seq_length"] = value
    for section, name, dest, _, flag_default in default_gaps():     # what an absent flag meant, said explicitly
        if name in ("q_lora_rank", "kv_lora_rank") and not cfg.model.multi_latent_attention:
            continue
        if name not in out[section]:
            out[section][name] = list(flag_default) if isinstance(flag_default, tuple) else flag_default
    if out["model"].get("cpu_offloading_num_layers"):
        out["model"]["cpu_offloading"] = True
    if graph_mode:
        out["ddp"]["megatron_fsdp_cuda_graph_mode"] = True
    if te_layer:
        out["model"]["use_transformer_engine_full_layer_spec"] = True
    if ub_cfg:
        out["comm_overlap"] = {"tp_comm_overlap": True, "tp_comm_overlap_cfg": ub_cfg}
    if quant is not None:   # RecipeConfig.from_config_dict's form (estimator/config/quant_recipe.py)
        out["model"]["quant_recipe"] = recipe_from_rules(quant)
    if hybridep:            # HybridEP reads it from the environment (the launcher sets it), Bridge's env_vars
        out["env_vars"] = {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": hybridep}
    for var, field in (("PYTORCH_CUDA_ALLOC_CONF", "pytorch_cuda_alloc_conf"),
                       ("CUBLAS_WORKSPACE_CONFIG", "cublas_workspace_config")):
        if tr.get(field):   # no Megatron-LM flag: the environment, which Bridge's env_vars sets
            out.setdefault("env_vars", {})[var] = tr[field]
    if out["optimizer"].get("optimizer") == "muon" and tr.get("use_layer_wise_param_layout") is False:
        # Bridge: dist_muon without the distributed-optimizer DDP buffers (optimizer/muon.py, optim.py) is what
        # Megatron-LM's --use-distributed-optimizer --no-use-layer-wise-param-layout says
        out["optimizer"].update(optimizer="dist_muon", use_distributed_optimizer=False)
        out["ddp"]["use_distributed_optimizer"] = False
        out["model"].pop("use_layer_wise_param_layout", None)
    if empty_recompute:
        out["model"].update(recompute_granularity="selective", recompute_modules=[])
    out["model"].setdefault("gated_linear_unit", False)
    if "activation_func" not in out["model"]:
        out["model"]["activation_func"] = "torch.nn.functional.gelu"
    out["model"].setdefault("share_embeddings_and_output_weights", True)
    if wan_model is not None:
        wan.write({"hidden_size": cfg.model.hidden_size, **wan_model}, out)
    if cfg.precision.fp4:
        fp8 = "nvfp4"
    preset = _PRESET.get((dtype, fp8 if cfg.precision.fp8 or cfg.precision.fp4 else None))
    mp = dict(MIXED_PRECISION_PRESETS[preset]) if preset else {"fp32": True, "params_dtype": "torch.float32"}
    want = {"grad_reduce_in_fp32": bool(grad_reduce_in_fp32(cfg.precision))}
    if cfg.precision.fp4:       # fp4_param follows fp4_param_gather (MixedPrecisionConfig.finalize)
        want.update(fp4_param_gather=cfg.precision.fp4_param_gather)
    if cfg.precision.fp8:
        want.update(fp8_param_gather=cfg.precision.fp8_param_gather,
                    reuse_grad_buf_for_mxfp8_param_ag=cfg.precision.reuse_grad_buf_for_mxfp8_param_ag)
    if cfg.precision.fp8 or cfg.precision.fp4:
        want.update(first_last_layers_bf16=cfg.precision.first_last_layers_bf16)
        if cfg.precision.first_last_layers_bf16:
            want.update(num_layers_at_start_in_bf16=cfg.precision.num_layers_at_start_in_bf16,
                        num_layers_at_end_in_bf16=cfg.precision.num_layers_at_end_in_bf16)
    out["mixed_precision"] = {"_preset_": preset, **{k: v for k, v in want.items() if mp.get(k,
                              SECTIONS["mixed_precision"].get(k)) != v}}
    if cfg.training.freeze_mtp:     # EXAONE 4.5's provider field (Exaone45Model.freeze), read back as freeze_mtp
        out["model"]["freeze_mtp_model"] = True
    if peft:
        out["peft"] = {"_target_": "megatron.bridge.peft." + ("lora.LoRA" if peft == "lora" else "dora.DoRA"),
                       "dim": cfg.training.peft_dim, "alpha": cfg.training.peft_alpha}
        if cfg.training.peft_target_modules:        # the Config's own values: to_dict() leaves defaults out
            out["peft"]["target_modules"] = list(cfg.training.peft_target_modules)
        for key, default in (("share_expert_adapters", True), ("sequence_parallel_input_regather", False)):
            if getattr(cfg.training, "peft_" + key) != default:
                out["peft"][key] = getattr(cfg.training, "peft_" + key)
    m, tp = cfg.model, cfg.parallelism.tensor_model_parallel_size
    if m.vocab_size and m.vocab_size % (m.make_vocab_size_divisible_by * tp):
        # Bridge pads only the tokenizer's vocabulary (training/setup.py _validate_and_set_vocab_size: should_pad_vocab
        # with use_tokenizer_vocab_size or no model vocab_size); a model vocab_size alone reaches Megatron-Core
        # unpadded (config.py _keep_model_vocab).
        out["tokenizer"] = {"use_tokenizer_vocab_size": True}
    return {k: v for k, v in out.items() if v}


def _text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):         # model.quant_recipe: a flow mapping (JSON is one)
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def to_bridge_overrides(config) -> list[str]:
    """The configuration as Bridge's dotted overrides: ``mixed_precision=PRESET`` first (when one matches), then
    ``section.field=value`` in section order. The world size is the launcher's, not a Bridge field."""
    data = to_bridge_dict(config)
    if isinstance(data["model"].get("logit_dtype"), dict):
        # Megatron-Bridge @ 067f987d : training/utils/omegaconf_utils.py _apply_overrides turns a string back into a
        # dtype only where the field already holds one; logit_dtype's default is None, so the string would reach
        # models/logit_dtype.py, which refuses it.
        raise UnsupportedError("model.logit_dtype has no Megatron-Bridge override (its default None is not a torch "
                               "dtype, so Bridge would keep the text): set it in the recipe or the config.yaml")
    mp = dict(data.get("mixed_precision", {}))
    preset = mp.pop("_preset_", None)
    out = [f"mixed_precision={preset}"] if preset else []
    peft = dict(data.get("peft", {}))
    if peft:
        out.append("peft=" + ("lora" if peft.pop("_target_").endswith("LoRA") else "dora"))
    for section, fields in data.items():
        fields = {"mixed_precision": mp, "peft": peft}.get(section, fields)
        for name, value in fields.items():
            out.append(f"{section}.{name}={_text(value)}")
    return out
