"""Wan (``model.model_kind: wan``, Megatron-Bridge's WanModel): its input rules, and what of it is not modelled.

:func:`wan_problems` names invalid Wan input (a partial latent grid, a grid the patches do not tile);
:func:`wan_not_modelled` the settings the estimator does not model together with Wan, one sentence each, each naming
the field, its value and why. The Wan layers themselves: :mod:`estimator.model.layers.wan`.
"""

from __future__ import annotations

from ..errors import Problem

__all__ = ["wan_not_modelled", "wan_problems"]

_GRID = ("wan_latent_frames", "wan_latent_height", "wan_latent_width")


def wan_problems(cfg) -> list[Problem]:
    """Invalid Wan input: a latent grid given in part, or one the patches do not tile."""
    m = cfg.model
    given = [k for k in _GRID if getattr(m, k) is not None]
    if not given:
        return []
    if m.model_kind != "wan":
        return [Problem(f"model.{given[0]}", getattr(m, given[0]), "is a Wan field: set model.model_kind to wan, "
                        "or leave it null")]
    if len(given) < 3:
        missing = [k for k in _GRID if k not in given]
        return [Problem(f"model.{missing[0]}", None, "give all three of wan_latent_frames, wan_latent_height and "
                        "wan_latent_width (the latent grid of one sample), or none (training.seq_length is then the "
                        "latent tokens)")]
    out = []
    for name, patch, patch_name in (("wan_latent_frames", m.wan_patch_temporal, "wan_patch_temporal"),
                                    ("wan_latent_height", m.wan_patch_spatial, "wan_patch_spatial"),
                                    ("wan_latent_width", m.wan_patch_spatial, "wan_patch_spatial")):
        value = getattr(m, name)
        if value % patch:
            out.append(Problem(f"model.{name}", value, f"({value}) must be divisible by model.{patch_name} "
                               f"({patch}): the patch embedding (a Conv3d with stride = kernel) tiles the latents"))
    return out


def wan_not_modelled(cfg) -> list[str]:
    """Settings not modelled with ``model_kind: wan`` (an empty list for a GPT model)."""
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    if m.model_kind != "wan":
        return []
    out = []

    def no(field: str, value, why: str) -> None:
        out.append(f"{field} {value} with model.model_kind wan: {why}")

    gpt_only = "Megatron-Bridge's WanModel has dense Wan layers only; this GPT layer kind is not part of it"
    for name in ("num_experts", "hybrid_layer_pattern", "experimental_attention_variant", "mtp_num_layers",
                 "heterogeneous_layers_config", "vision_num_layers", "global_attention_freq"):
        if getattr(m, name, None):
            no(f"model.{name}", getattr(m, name), gpt_only)
    for name in ("multi_latent_attention", "enable_hyper_connections", "attention_output_gate"):
        if getattr(m, name):
            no(f"model.{name}", True, gpt_only)
    if par.pipeline_model_parallel_size > 1:
        no("parallelism.pipeline_model_parallel_size", par.pipeline_model_parallel_size,
           "WanModel builds its text and timestep embedders on every pipeline stage and passes the text embeddings "
           "and modulations beside the hidden states; that split is not modelled (Bridge's Wan recipes use 1)")
    if par.context_parallel_size > 1 and par.cp_comm_type != "p2p":
        no("parallelism.cp_comm_type", par.cp_comm_type, "only p2p (the default Bridge's Wan recipes use) is "
           "modelled for Wan's self- and cross-attention")
    if par.use_megatron_fsdp or par.use_torch_fsdp2:
        no("parallelism.use_megatron_fsdp / use_torch_fsdp2", True, "FSDP of Wan's layers is not modelled")
    if par.tp_comm_overlap:
        no("parallelism.tp_comm_overlap", True, "Bridge notes that its cross-attention cannot reuse the query's "
           "userbuffers; not modelled")
    if tr.recompute_granularity == "selective":
        no("training.recompute_granularity", "selective", "Wan's layers keep their own tensors (adaLN, q/k norms "
           "over all heads, cross-attention); which of them selective recompute drops is not modelled: use full "
           "recompute or none")
    if tr.attention_backend in ("unfused", "local") or tr.transformer_impl == "local":
        no("training.attention_backend", tr.attention_backend, "Wan is modelled with Transformer Engine's fused "
           "attention only")
    for name in ("cpu_offloading", "fine_grained_activation_offloading", "optimizer_cpu_offload",
                 "freeze_language_model"):
        if getattr(tr, name):
            no(f"training.{name}", True, "not modelled for Wan")
    if tr.peft is not None:
        no("training.peft", tr.peft, "adapters (training.peft) on Wan's layers are not modelled")
    if tr.cuda_graph_impl != "none":
        no("training.cuda_graph_impl", tr.cuda_graph_impl, "CUDA graphs of Wan's layers are not modelled")
    if tr.rl_algorithm != "none":
        no("training.rl_algorithm", tr.rl_algorithm, "Wan is a diffusion model, not a policy")
    if pr.fp8 or pr.fp4:
        no("precision.fp8" if pr.fp8 else "precision.fp4", True, "FP8 / NVFP4 copies of Wan's linear layers are "
           "not modelled (Bridge's Wan recipes train in bf16)")
    return out
