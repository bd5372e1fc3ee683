"""The valid configurations the estimator does not model: what Megatron-LM runs but no formula here covers.

:func:`not_modelled` lists them, one sentence each; :func:`refuse_not_modelled` raises them as an
:class:`~estimator.config.errors.UnsupportedError` (not as invalid input: Megatron-LM runs them).
"""

from __future__ import annotations

from .. import tp_overlap
from ..derived import grad_comm_dtype, grad_dtype, recipe_features
from ..errors import UnsupportedError
from ..schema import Config
from .wan import wan_not_modelled

__all__ = ["not_modelled", "refuse_not_modelled"]


def not_modelled(cfg: Config) -> list[str]:
    """Valid configurations, ones Megatron-LM runs, that the estimator does not model: one sentence each (an
    empty list when it models the configuration). :func:`config_from_dict` raises them as an
    :class:`~estimator.config.errors.UnsupportedError`, not as invalid input."""
    pr, par = cfg.precision, cfg.parallelism
    out = wan_not_modelled(cfg)          # Wan (model_kind wan): the settings not modelled with it
    if (par.use_megatron_fsdp and par.num_distributed_optimizer_instances > 1
            and grad_comm_dtype(pr) != grad_dtype(pr)):
        # param_and_grad_buffer.py _bucket_group_gradient_reduce: the outer (DP-Outer) reduction copies each bucket
        # into an hsdp_comm_gbuf bucket of the communication dtype.
        out.append(f"precision.megatron_fsdp_grad_comm_dtype {pr.megatron_fsdp_grad_comm_dtype} with HSDP "
                   f"(num_distributed_optimizer_instances {par.num_distributed_optimizer_instances}): Megatron-FSDP "
                   f"runs it, but the outer reduction's copies of the gradient buckets in a dtype other than the "
                   f"gradient buffer's ({grad_dtype(pr)}) are not modelled")
    if pr.fp8 and pr.params_dtype == "fp32":
        # Megatron-LM @ d98e8a64 runs --fp8-format without --bf16/--fp16 (no rule in arguments.py; CI case
        # moe/deepseek_proxy_fsdp_ep2_fsdp2). Then the FP8 weights (--fp8-param-gather) are Float8Tensors of
        # nominal dtype fp32: the distributed optimizer takes them for fp32 parameters (distrib_optimizer.py
        # "fp32 params", no master copy), Megatron-FSDP gives them bf16 gradient buffers beside fp32 ones for the
        # other parameters (param_and_grad_buffer.py _resolve_group_grad_dtype), and the layers run in fp32
        # around FP8 GEMMs; none of it is modelled or measured here.
        out.append("precision.fp8 true with precision.params_dtype fp32: Megatron-LM runs FP8 compute over fp32 "
                   "weights (no --bf16), but the estimator does not model it (fp32 activations around FP8 "
                   "GEMMs; with fp8_param_gather, FP8 weights that Megatron-Core's optimizers treat as fp32 "
                   "parameters and Megatron-FSDP gives bf16 gradient buffers); use bf16 weights to estimate the "
                   "usual FP8 recipe")
    if pr.fp4 and pr.params_dtype != "bf16":
        # TransformerEngine @ d0067d0d : transformer_engine/pytorch/csrc/quantizer.cpp NVFP4Quantizer::quantize_impl
        # ("RHT is only supported for bfloat16 input"): the recipe's random Hadamard transform of inputs and
        # gradients takes only bf16 tensors.
        out.append(f"precision.fp4 true with precision.params_dtype {pr.params_dtype}: NVFP4's random Hadamard "
                   "transform takes only bf16 inputs in Transformer Engine, and NVFP4 over other weights is not "
                   "modelled; use bf16 weights")
    if pr.fp4 and (par.use_megatron_fsdp or par.use_torch_fsdp2):
        # mcore_fsdp_adapter.py refuses FP4 under Megatron-FSDP 2; version 1 and FSDP2 hold NVFP4 weights in ways
        # not read here.
        out.append("precision.fp4 true with " + ("use_megatron_fsdp" if par.use_megatron_fsdp else "use_torch_fsdp2")
                   + ": NVFP4 weights and their copies under FSDP are not modelled")
    if pr.fp4 and par.tp_comm_overlap:
        # Megatron-LM @ d98e8a64 : megatron/training/initialize.py registers FP8 userbuffers only with --fp8-format;
        # Transformer Engine's layers in an NVFP4 autocast ask for them (module/base.py get_ub(name, use_fp8)).
        out.append("precision.fp4 true with parallelism.tp_comm_overlap: Megatron-LM registers only bf16 "
                   "userbuffers without --fp8-format while Transformer Engine's NVFP4 layers ask for quantized "
                   "ones; not modelled")
    if pr.fp4 and pr.fp4_param_gather and pr.use_precision_aware_optimizer:
        # distrib_optimizer.py _build_model_and_main_param_groups: an NVFP4 weight has no shard view
        # (shard_model_param = None). With OptimizerConfig.fp8_recipe None or delayed (Megatron-LM's default) the
        # precision-aware path hands those to Transformer Engine's FusedAdam; with another fp8_recipe (Megatron-
        # Bridge's MixedPrecisionConfig copies its default, tensorwise) Megatron-Core keeps fp32 masters itself.
        # Which one a run takes is not in this configuration.
        out.append("precision.fp4_param_gather true with use_precision_aware_optimizer: Megatron-Core's "
                   "distributed optimizer has no shard of an NVFP4 weight; who keeps the master weights then "
                   "depends on the optimizer's fp8_recipe (Megatron-Core itself with Megatron-Bridge's tensorwise "
                   "default, none with Megatron-LM's delayed), which is not modelled")
    if (pr.reuse_grad_buf_for_mxfp8_param_ag and pr.fp8 and pr.fp8_param_gather and pr.fp8_recipe != "mxfp8"
            and not par.use_megatron_fsdp):
        # param_and_grad_buffer.py: FP8 weights other than MXFP8 still get a uint8 parameter buffer, but with the
        # flag they keep Transformer Engine's own storage too (_param_uses_quantized_storage skips the remap).
        out.append(f"precision.reuse_grad_buf_for_mxfp8_param_ag true with fp8_recipe {pr.fp8_recipe or 'delayed'}: "
                   "Megatron-Core then keeps both its uint8 parameter buffer and Transformer Engine's own storage "
                   "of the FP8 weights, which is not modelled (the setting is meant for mxfp8)")
    out.extend(tp_overlap.not_modelled(cfg))
    out += _delay_wgrad_not_modelled(cfg)
    out += _dispatch_wgrad_not_modelled(cfg)
    if cfg.model.vision_num_layers is not None and recipe_features(cfg):
        out.append("model.vision_num_layers (a vision tower) with a recipe feature that re-plans the model states "
                   "or activations (" + ", ".join(path for path, _ in recipe_features(cfg)) + "): the tower is "
                   "modelled with Megatron-Core's plain distributed optimizer only")
    if cfg.model.vision_num_layers is not None and cfg.model.vision_model_type == "radio" and (pr.fp8 or pr.fp4):
        # Megatron-Bridge @ 067f987d : nemotron_vl/nemotron_vl_provider.py: the vision and projection configs are
        # deep copies of the language model's, FP8 / NVFP4 recipe included (estimator/model/vision.py).
        out.append(f"model.vision_model_type radio with precision.{'fp8' if pr.fp8 else 'fp4'} true: Nemotron Nano "
                   "VL's RADIO tower and projector copy the language model's config, so they run in FP8 / NVFP4 "
                   "too, which is not modelled for a vision tower")
    out += _ernie_vl_not_modelled(cfg)
    return out


def _ernie_vl_not_modelled(cfg: Config) -> list[str]:
    """ERNIE-VL's vision expert pool (model.moe_vision_ffn_hidden_size): its parameters and states are modelled,
    and the activations of a text-only sequence (every token in the text pool: Megatron-Bridge @ 067f987d :
    src/megatron/bridge/models/ernie_vl/modeling_ernie45_vl/ernie_moe_layer.py ``ErnieMultiTypeMoE.forward`` skips
    the empty pool, or sends it one dummy token with expert parallelism, not counted: estimator/model/layers/
    moe.py); not the image tokens' split between the pools, nor the pool with the layer shapes no ERNIE-VL model
    has."""
    m, tr = cfg.model, cfg.training
    if not (m.moe_vision_ffn_hidden_size and m.num_experts):
        return []
    out = []
    if tr.images_per_sample:
        out.append(f"training.images_per_sample {tr.images_per_sample} with model.moe_vision_ffn_hidden_size "
                   f"{m.moe_vision_ffn_hidden_size}: the activations of the image tokens routed to ERNIE-VL's vision "
                   "expert pool (and of the text tokens left in the text pool) are not modelled; the parameters "
                   "and states are, and the activations with images_per_sample 0 (every token in the text pool)")
    for name in ("moe_latent_size", "post_layernorm"):
        if getattr(m, name):
            out.append(f"model.{name} with model.moe_vision_ffn_hidden_size: ERNIE-VL's two expert pools are "
                       "modelled with plain Megatron-Core MoE layers only")
    return out


def _dispatch_wgrad_not_modelled(cfg: Config) -> list[str]:
    """The combinations of ``overlap_dispatch_backward_with_experts_wgrad`` that estimator/model/layers/moe.py
    (``dispatch_wgrad_window``) does not model."""
    m, tr, pr = cfg.model, cfg.training, cfg.precision
    if not (tr.overlap_dispatch_backward_with_experts_wgrad and m.num_experts):
        return []
    what = "training.overlap_dispatch_backward_with_experts_wgrad with "
    out = []
    if pr.fp8 or pr.fp4:
        out.append(what + ("FP8" if pr.fp8 else "NVFP4") + ": the delayed GEMMs keep quantised copies of their "
                   "inputs and output gradients, which are not modelled")
    if tr.peft is not None:
        out.append(what + "PEFT: delayed GEMMs of frozen experts and their adapters are not modelled")
    if tr.cuda_graph_impl != "none":
        out.append(what + f"cuda_graph_impl {tr.cuda_graph_impl}: graphed expert backward is not modelled")
    if tr.cpu_offloading or tr.fine_grained_activation_offloading:
        out.append(what + "activation offloading: not modelled")
    return out


def _delay_wgrad_not_modelled(cfg: Config) -> list[str]:
    """The combinations of ``delay_wgrad_compute`` that estimator/memory/features/delayed_wgrad.py does not model."""
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    if not (tr.delay_wgrad_compute and tr.overlap_moe_expert_parallel_comm):
        return []
    what = "training.delay_wgrad_compute with "
    out = []
    if pr.fp8 or pr.fp4:
        out.append(what + ("FP8" if pr.fp8 else "NVFP4") + ": the delayed GEMMs keep quantised copies of their "
                   "inputs and output gradients, which are not modelled")
    if par.tp_comm_overlap:
        out.append(what + "tp_comm_overlap: Transformer Engine refuses userbuffers' weight-gradient overlap for a "
                   "delayed GEMM (module/_common.py WeightGradStore, module/linear.py), and the combination is not "
                   "modelled")
    if tr.cuda_graph_impl != "none":
        out.append(what + f"cuda_graph_impl {tr.cuda_graph_impl}: graphed backward_dw is not modelled")
    if m.mtp_num_layers:
        out.append(what + "MTP layers: the MTP layer's delayed eh_proj and its pre-dispatch part are not modelled")
    if m.hybrid_layer_pattern or m.experimental_attention_variant:
        out.append(what + "hybrid, linear-attention or DeepSeek sparse attention layers: only attention / MLA with a "
                   "dense MLP or MoE is modelled")
    freq = m.moe_layer_freq
    all_moe = freq == 1 or (isinstance(freq, list) and all(freq))
    if tr.recompute_granularity == "selective" and "mlp" in (tr.recompute_modules or ()) and not all_moe:
        out.append(what + "recompute of mlp: the recomputed dense MLP's delayed inputs are not modelled")
    if tr.peft is not None:
        out.append(what + "PEFT: delayed GEMMs of frozen weights and adapters are not modelled")
    if tr.cpu_offloading or tr.fine_grained_activation_offloading:
        out.append(what + "activation offloading: not modelled")
    return out


def refuse_not_modelled(cfg: Config) -> None:
    reasons = not_modelled(cfg)
    if reasons:
        raise UnsupportedError("not modelled: " + "; ".join(reasons))
