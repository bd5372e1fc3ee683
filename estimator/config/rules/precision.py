"""The precision rules: FP8 and NVFP4 recipes, parameter gathers, the precision-aware optimizer, deterministic mode
and the cuBLAS workspace, the Transformer Engine version, the recipes a GPU architecture cannot run, the MXFP8 output layer, and the logits' side of
the loss: cached-logits distillation (:func:`distillation_problems`), and the fp32 residual stream
(:func:`fp32_residual_problems`).

:func:`precision_problems` is the precision part of :func:`estimator.config.rules.check.cross_field_problems`;
:func:`recipe_arch_problems` and :func:`fp8_output_problems` are called by the recipe features' rules
(:mod:`estimator.config.rules.features`), where they stood before.
"""

from __future__ import annotations

from ..derived import compute_capability, cublas_workspace_config_bytes, is_amd, te_version
from ..errors import Problem, show
from ..quant_recipe import parse_rules, precision_of, rule_problem

__all__ = ["DETERMINISTIC_CUBLAS_WORKSPACE_CONFIGS", "DISTILLATION_MAX_VOCAB", "MAX_CUBLAS_WORKSPACE_BYTES",
           "distillation_problems", "fp32_residual_problems", "fp8_output_problems", "precision_problems",
           "quant_recipe_problems", "recipe_arch_problems"]


def precision_problems(cfg) -> list[Problem]:
    """The precision fields against each other and the optimizer (FP8 and NVFP4 recipes, parameter gathers,
    MXFP8 buffer reuse, the precision-aware optimizer), deterministic mode, and the cuBLAS workspace."""
    P: list[Problem] = []
    par, tr, pr = cfg.parallelism, cfg.training, cfg.precision

    def add(field, value, msg):
        P.append(Problem(field, value, msg))

    # Precision.
    if pr.fp8_recipe is not None and not pr.fp8:
        add("precision.fp8_recipe", pr.fp8_recipe, "applies only with fp8: true")
    # Megatron-LM @ d98e8a64 : megatron/training/arguments.py validate_args (FP4 and FP8 are mutually exclusive;
    # --fp4-param-gather needs --fp4-format) and transformer_config.py __post_init__ (the same two rules).
    if pr.fp4 and pr.fp8:
        add("precision.fp4", True, "excludes fp8: true (Megatron-LM: --fp4-format and --fp8-format cannot be used "
            "together)")
    if pr.fp4 and tr.transformer_impl != "transformer_engine":
        add("precision.fp4", True, "needs training.transformer_impl: transformer_engine (NVFP4 is Transformer "
            "Engine's NVFP4BlockScaling recipe; Megatron-Core's local layers do not quantize)")
    if pr.fp4_recipe is not None and not pr.fp4:
        add("precision.fp4_recipe", pr.fp4_recipe, "applies only with fp4: true")
    if pr.fp4_param_gather and not pr.fp4:
        add("precision.fp4_param_gather", True, "needs fp4: true (Megatron-LM: --fp4-param-gather must be used "
            "together with --fp4-format)")
    if pr.fp8_param_gather and not pr.fp8:
        add("precision.fp8_param_gather", True, "applies only with fp8: true")
    elif pr.fp8_param_gather and not tr.use_distributed_optimizer:
        add("precision.fp8_param_gather", True, "needs training.use_distributed_optimizer: true (Megatron-LM's rule)")
    # MXFP8 weights under the distributed optimizer (Megatron-LM @ d98e8a64 : megatron/core/distributed/
    # param_and_grad_buffer.py, _ParamAndGradBuffer.__init__): the parameter buffer is a view of the gradient
    # buffer; without reuse_grad_buf_for_mxfp8_param_ag the weights are moved into it with Transformer Engine's
    # replace_raw_data, which raises NotImplementedError for MXFP8Tensor (TransformerEngine @ d0067d0d :
    # transformer_engine/pytorch/tensor/utils.py).
    mxfp8_gather = (pr.fp8 and pr.fp8_param_gather and pr.fp8_recipe == "mxfp8" and tr.use_distributed_optimizer
                    and not par.use_megatron_fsdp)
    if pr.reuse_grad_buf_for_mxfp8_param_ag:
        if not pr.fp8_param_gather:
            add("precision.reuse_grad_buf_for_mxfp8_param_ag", True, "needs fp8_param_gather: true (Megatron-Core's "
                "DistributedDataParallelConfig: reuse the gradient buffer only when keeping the weights in MXFP8)")
        elif par.use_megatron_fsdp:
            add("precision.reuse_grad_buf_for_mxfp8_param_ag", True, "applies only without use_megatron_fsdp "
                "(Megatron-LM turns it off for Megatron-FSDP)")
    elif mxfp8_gather:
        add("precision.reuse_grad_buf_for_mxfp8_param_ag", False, "must be true with fp8_recipe mxfp8, "
            "fp8_param_gather and the distributed optimizer: Transformer Engine cannot move MXFP8 weights into "
            "Megatron-Core's parameter buffer (replace_raw_data is not supported for MXFP8Tensor); Megatron-Bridge's "
            "bf16_with_mxfp8_mixed sets it")
    if not pr.use_precision_aware_optimizer:
        for name, default in (("main_grads_dtype", "fp32"), ("main_params_dtype", "fp32"),
                              ("exp_avg_dtype", "fp32"), ("exp_avg_sq_dtype", "fp32")):
            if getattr(pr, name) != default:
                add(f"precision.{name}", getattr(pr, name), "needs use_precision_aware_optimizer: true")
    elif not tr.use_distributed_optimizer:
        add("precision.use_precision_aware_optimizer", True, "needs training.use_distributed_optimizer: true")
    if tr.optimizer_implementation != "te_fused" and tr.transformer_impl == "transformer_engine":
        add("training.optimizer_implementation", tr.optimizer_implementation, "Megatron-Core uses Transformer "
            "Engine's FusedAdam whenever Transformer Engine is installed (transformer_impl: transformer_engine "
            "needs it); apex_fused and torch need transformer_impl: local")
    elif (tr.optimizer_implementation != "te_fused" and pr.use_precision_aware_optimizer
          and not tr.optimizer_cpu_offload):
        # Megatron-LM @ d98e8a64 : megatron/core/optimizer/optimizer_config.py (__post_init__): only Transformer
        # Engine's FusedAdam and HybridDeviceOptimizer (optimizer CPU offload) take the precision-aware optimizer.
        add("training.optimizer_implementation", tr.optimizer_implementation, f"{tr.optimizer_implementation} "
            "does not take the precision-aware optimizer: it needs Transformer Engine's FusedAdam "
            "(optimizer_implementation: te_fused), or the optimizer offloaded (training.optimizer_cpu_offload: "
            "true, HybridDeviceOptimizer, which runs without Transformer Engine)")

    # Deterministic mode refuses these (Megatron-LM @ d98e8a64 : megatron/training/determinism.py
    # ARG_VALUES_REQUIRED_FOR_DETERMINISM).
    if tr.deterministic_mode:
        if tr.cross_entropy_loss_fusion:
            add("training.cross_entropy_loss_fusion", True, "Megatron-LM's --deterministic-mode requires it off")
        if par.tp_comm_overlap:
            add("parallelism.tp_comm_overlap", True, "Megatron-LM's --deterministic-mode requires it off")
    P.extend(_cublas_workspace_problems(tr))
    P.extend(_te_version_problems(cfg))
    P.extend(quant_recipe_problems(cfg))
    P.extend(distillation_problems(cfg))
    P.extend(fp32_residual_problems(cfg))
    return P


def fp32_residual_problems(cfg) -> list[Problem]:
    """distill29: ``precision.fp32_residual_connection`` (estimator/memory/activations.py): Megatron-LM's rule, and
    the layers and features whose tensors the fp32 residual stream would change in ways not modelled, by name. It is
    modelled for Transformer Engine layers with pre-norms, whose norms save bf16 copies of the fp32 input."""
    m, tr, pr = cfg.model, cfg.training, cfg.precision
    if not pr.fp32_residual_connection:
        return []
    field = "precision.fp32_residual_connection"
    if pr.params_dtype == "fp32":
        # Megatron-LM @ d98e8a64 : megatron/training/arguments.py validate_args
        return [Problem(field, True, "needs bf16 or fp16 weights (Megatron-LM: 'residual connection in fp32 only "
                        "supported when using fp16 or bf16')")]
    if m.enable_hyper_connections:
        # megatron/core/transformer/transformer_config.py __post_init__
        return [Problem(field, True, "excludes enable_hyper_connections (Megatron-Core refuses the pair)")]
    mods = set(tr.recompute_modules or ()) if tr.recompute_granularity == "selective" else set()
    out = []
    for on, what in (
            (tr.transformer_impl != "transformer_engine", "the local layer implementation (its norms take the fp32 "
             "input themselves)"),
            (not m.pre_layernorm or m.post_layernorm, "layers without a pre-norm or with post-norms (a linear or a "
             "post-norm meets the fp32 stream)"),
            (bool(m.mtp_num_layers), "MTP layers (the MTP block concatenates the decoder's and each depth's fp32 "
             "hidden states)"),
            (m.model_kind == "wan", "Wan"),
            (m.vision_num_layers is not None, "a vision tower"),
            (m.attn_res_block_size is not None, "Kimi K3's AttnRes aggregations"),
            ("layernorm" in mods, "recomputed norms (their checkpoints keep the fp32 input)"),
            (tr.fine_grained_activation_offloading or tr.cpu_offloading or tr.cpu_offloading_num_layers > 0,
             "activation offloading"),
            (tr.cuda_graph_impl != "none", "CUDA graphs (their static input and output buffers)"),
            (tr.overlap_moe_expert_parallel_comm, "overlap_moe_expert_parallel_comm (its schedule nodes' residual "
             "tensors)"),
            (tr.moe_paged_stash, "the paged stash"),
            (tr.peft is not None, "PEFT adapters")):
        if on:
            out.append(Problem(field, True, f"with {what} is not modelled"))
    return out


#: The largest padded vocabulary cached-logits distillation stores: 17-bit token indices (Megatron-LM @ d98e8a64 :
#: megatron/training/distillation/logits_saver.py ``_MAX_VOCAB_SIZE``, asserted when the files are written;
#: utils_logits.py ``pack_indices`` / ``unpack_indices``).
DISTILLATION_MAX_VOCAB = 2 ** 17


def distillation_problems(cfg) -> list[Problem]:
    """distill29: offline distillation from cached teacher logits (``training.distillation_cached_logits``,
    estimator/memory/loss.py): its fields together, the cached files' 17-bit vocabulary, and the settings it is not
    modelled with, refused by name."""
    m, tr, pr = cfg.model, cfg.training, cfg.precision
    if not tr.distillation_cached_logits:
        out = []
        for name, default in (("distillation_top_k", None), ("distillation_logprobs_dtype", "fp16")):
            if getattr(tr, name) != default:
                out.append(Problem(f"training.{name}", getattr(tr, name), "applies only with "
                                   "distillation_cached_logits: true (Megatron-LM --logits-load-dir)"))
        return out
    field = "training.distillation_cached_logits"
    if m.model_kind == "wan":
        return [Problem(field, True, "needs a language model's logits; Wan (model_kind wan) has no output layer")]
    out = []
    if tr.distillation_top_k is None:
        out.append(Problem("training.distillation_top_k", None, "is required with distillation_cached_logits: the "
                           "log-probabilities per token in the cached teacher files (the --logits-save-top-k of "
                           "the run that wrote them; the student's flags do not say it)"))
    mult = m.make_vocab_size_divisible_by * cfg.parallelism.tensor_model_parallel_size
    padded = -(-m.vocab_size // mult) * mult
    if padded > DISTILLATION_MAX_VOCAB:
        out.append(Problem("model.vocab_size", m.vocab_size, f"padded to {padded:,} entries, above the "
                           f"{DISTILLATION_MAX_VOCAB:,} that cached-logits distillation stores (17-bit token "
                           "indices: Megatron-LM's LogitsSaverHooks asserts it)"))
    if (pr.logit_dtype or pr.params_dtype) == "fp32":
        out.append(Problem(field, True, "with fp32 logits is not modelled: .float() returns the logits themselves "
                           "and topk_kl_div subtracts their maximum from them in place, in the tensor the unfused "
                           "and native cross entropies have turned into their softmax"))
    for on, what in ((m.final_logit_softcapping is not None, "final_logit_softcapping (Megatron-Bridge's Gemma 2 "
                      "output layer; the distillation loss is Megatron-LM's pretrain_gpt.py)"),
                     (tr.rl_algorithm != "none", f"RL training (rl_algorithm {tr.rl_algorithm})")):
        if on:
            out.append(Problem(field, True, f"with {what} is not modelled"))
    return out


#: Module suffixes whose precision a rule naming layer numbers could change from one layer to the next.
_PROBE_SUFFIXES = ("self_attention.linear_qkv", "self_attention.linear_proj", "mixer.in_proj", "mixer.out_proj",
                   "mlp.linear_fc1", "mlp.linear_fc2", "mlp.experts.linear_fc1", "mlp.experts.linear_fc2")


def quant_recipe_problems(cfg) -> list[Problem]:
    """``precision.quant_recipe`` (estimator/config/quant_recipe.py): each rule GLOB=PRECISION, a quantised run
    (Megatron-Core applies a rule only inside the FP8/NVFP4 autocast), and the combinations not modelled."""
    pr, tr, par = cfg.precision, cfg.training, cfg.parallelism
    rules = pr.quant_recipe
    if rules is None:
        return []
    field = "precision.quant_recipe"
    bad = [p for p in map(rule_problem, rules) if p]
    if bad:
        return [Problem(field, list(rules), "; ".join(bad))]
    out = []
    if not (pr.fp8 or pr.fp4):
        out.append(Problem(field, list(rules), "applies only with fp8: true or fp4: true (Megatron-Core applies a "
                           "module's rule only inside the FP8/NVFP4 autocast: override_nonquantized_autocast is "
                           "false)"))
    combos = [("precision.fp8_param_gather", pr.fp8_param_gather), ("precision.fp4_param_gather", pr.fp4_param_gather),
              ("precision.disable_parameter_transpose_cache", pr.disable_parameter_transpose_cache),
              ("precision.fp8_output_proj", pr.fp8_output_proj), ("parallelism.use_megatron_fsdp",
                                                                   par.use_megatron_fsdp)]
    for name, on in combos:
        if on and rules:
            out.append(Problem(field, list(rules), f"together with {name} is not modelled (a matched linear builds "
                               "its weights in params_dtype under fp8_model_init(enabled=fp8_param), and keeps its "
                               "own recipe's copies; Megatron-LM @ d98e8a64 : extensions/transformer_engine.py "
                               "_get_fp8_model_init_for_quant_recipe)"))
    if tr.transformer_impl != "transformer_engine" and rules:
        out.append(Problem(field, list(rules), "needs training.transformer_impl: transformer_engine (only Transformer "
                           "Engine's linears read the recipe)"))
    # A rule naming layer numbers would give layers of one kind different precisions, which the estimate, per
    # layer kind, does not follow (module paths number the layers of each pipeline chunk from 0).
    parsed = parse_rules(rules)
    n = min(cfg.model.num_layers, 1000)
    for suffix in _PROBE_SUFFIXES:
        seen = {precision_of(parsed, f"decoder.layers.{i}.{suffix}") for i in range(n)}
        if len(seen) > 1:
            out.append(Problem(field, list(rules), f"gives decoder layers' {suffix} different precisions by layer "
                               f"number ({', '.join(sorted(str(p or 'the run') for p in seen))}): per-layer rules are "
                               "not modelled (the estimate follows one precision per module and layer kind; use "
                               "first_last_layers_bf16 for bf16 first and last layers)"))
            break
    return out


#: The CUBLAS_WORKSPACE_CONFIG values Megatron-LM's --deterministic-mode accepts (Megatron-LM @ d98e8a64 :
#: megatron/training/determinism.py ``ACCEPTED_ENV_VAR_VALUES``: NVIDIA's two deterministic workspace settings).
DETERMINISTIC_CUBLAS_WORKSPACE_CONFIGS = (":4096:8", ":16:8")
#: The largest cuBLAS workspace accepted (1 TiB per handle and stream): far above any GPU's memory.
MAX_CUBLAS_WORKSPACE_BYTES = 2 ** 40


def _cublas_workspace_problems(tr) -> list[Problem]:
    """``training.cublas_workspace_config``: a value PyTorch reads (``:SIZE:COUNT`` pairs, SIZE in KiB), of a
    size a GPU can hold, and under deterministic mode one of the two Megatron-LM accepts."""
    text = tr.cublas_workspace_config
    if not text.strip():
        return []
    size = cublas_workspace_config_bytes(text)
    field = "training.cublas_workspace_config"
    if size is None:
        return [Problem(field, text, f"must be :SIZE:COUNT pairs, SIZE in KiB, such as :4096:8 (32 MiB) or :16:8 "
                        f"(128 KiB), got {show(text)}: PyTorch finds no pair in it and ignores it with a warning "
                        "(leave it empty for PyTorch's default)")]
    if size > MAX_CUBLAS_WORKSPACE_BYTES:
        return [Problem(field, text, f"asks for {size:,} bytes per cuBLAS handle, more than any GPU holds (at most "
                        f"{MAX_CUBLAS_WORKSPACE_BYTES:,} = 1 TiB)")]
    if tr.deterministic_mode and text not in DETERMINISTIC_CUBLAS_WORKSPACE_CONFIGS:
        return [Problem(field, text, "Megatron-LM's --deterministic-mode accepts only "
                        f"{' or '.join(DETERMINISTIC_CUBLAS_WORKSPACE_CONFIGS)} (megatron/training/determinism.py), "
                        f"got {show(text)}")]
    return []


def _te_version_problems(cfg) -> list[Problem]:
    """tever29: ``precision.transformer_engine_version``: a release number, and one whose fused cross entropy
    Megatron-Core can call. Transformer Engine's ``parallel_cross_entropy`` arrived in 2.2 (TransformerEngine
    commit 8ca2caf8a, "Parallel Cross Entropy using online softmax"); without it Megatron-Core's
    ``compute_language_model_loss`` raises "Trying to use a TE block when it's not present", and with full-iteration
    CUDA graphs it asks for 2.7 (Megatron-LM @ d98e8a64 : megatron/core/models/common/language_module/
    language_module.py)."""
    pr, tr = cfg.precision, cfg.training
    field, text = "precision.transformer_engine_version", pr.transformer_engine_version
    version = te_version(text)
    if version is None or version < (1, 0):
        return [Problem(field, text, f"must be a Transformer Engine release, \"MAJOR.MINOR\" from 1.0 (such as "
                        f"\"2.11\", or \"2.11.0+c188b533\" as transformer_engine.__version__ prints it), got "
                        f"{show(text)}")]
    if not (tr.cross_entropy_loss_fusion and tr.cross_entropy_fusion_impl == "te"):
        return []
    if version < (2, 2):
        return [Problem(field, text, "is older than 2.2, the first Transformer Engine with the fused cross entropy "
                        "training.cross_entropy_fusion_impl te calls (Megatron-Core raises \"Trying to use a TE block "
                        "when it's not present\"); use cross_entropy_fusion_impl native")]
    if version < (2, 7) and tr.cuda_graph_impl == "full_iteration":
        return [Problem(field, text, "is older than 2.7: Megatron-Core's fused cross entropy (te) under "
                        "training.cuda_graph_impl full_iteration needs Transformer Engine 2.7 or later")]
    return []


def recipe_arch_problems(pr, arch: str | None) -> list[Problem]:
    """The quantization recipes the GPU architecture ``arch`` (``training.gpu_arch``, set or from the GPU named)
    cannot run. Transformer Engine raises at its autocast rather than fall back, and Megatron-Core does not check
    first (TransformerEngine @ d0067d0d : transformer_engine/pytorch/quantization.py ``check_recipe_support`` and the
    ``_compute_*_support`` functions): FP8 needs compute capability 8.9, blockwise scaling 9.0, MXFP8 10.x or 11.x
    ("not supported on 12.0+ architectures yet"), NVFP4 10.0. Nothing is refused with no architecture given (the
    estimate then assumes one that runs the recipe, :func:`estimator.config.derived.gpu_arch`) nor for AMD targets,
    whose Transformer Engine is ROCm's fork, not read here."""
    if arch is None or is_amd(arch) or not (pr.fp8 or pr.fp4):
        return []
    cc = compute_capability(arch)
    where = f"training.gpu_arch is {arch} (compute capability {cc[0]}.{cc[1]}, set or from the GPU named)"
    # precision.quant_recipe: a module's own recipe needs the GPU as the run's does.
    needs = {"nvfp4": ((10, 0), (99, 0), "sm_100 or newer"), "mxfp8": ((10, 0), (12, 0), "sm_100 or sm_103"),
             "blockwise": ((9, 0), (99, 0), "compute capability 9.0 or newer")}
    for pattern, precision in parse_rules(pr.quant_recipe):
        low, high, text = needs.get(precision, ((0, 0), (99, 0), ""))
        if not low <= cc < high:
            return [Problem("precision.quant_recipe", list(pr.quant_recipe), f"rule '{pattern}={precision}' needs "
                            f"{text} (Transformer Engine refuses {precision} below it), and {where}")]
    if pr.fp4:
        if cc < (10, 0):
            return [Problem("precision.fp4", True, f"NVFP4 needs a Blackwell GPU (sm_100 or newer): Transformer "
                            f"Engine refuses it below compute capability 10.0, and {where}; use fp8 on this GPU")]
        return []
    recipe = pr.fp8_recipe or "delayed"
    if cc < (8, 9):
        return [Problem("precision.fp8", True, f"FP8 needs compute capability 8.9 or newer (Ada, Hopper, Blackwell); "
                        f"{where}; set fp8: false")]
    if recipe == "mxfp8" and not (10, 0) <= cc < (12, 0):
        return [Problem("precision.fp8_recipe", "mxfp8", f"MXFP8 needs sm_100 or sm_103 (B200, GB200, B300): "
                        f"Transformer Engine runs it only on compute capability 10.x and 11.x, and {where}; use "
                        f"tensorwise or {'blockwise' if cc >= (9, 0) else 'delayed'} here")]
    if recipe == "blockwise" and cc < (9, 0):
        return [Problem("precision.fp8_recipe", "blockwise", f"blockwise FP8 scaling needs compute capability 9.0 "
                        f"or newer (Hopper, Blackwell); {where}; use tensorwise or delayed")]
    return []


def fp8_output_problems(cfg) -> list[Problem]:
    """``precision.fp8_output_proj`` (estimator/memory/features/fp8_output.py). Megatron-LM @ d98e8a64 :
    ``TransformerConfig.__post_init__`` requires fp8 with the mxfp8 recipe; ``TELMHeadColumnParallelLinear`` raises
    on a shared embedding weight (tied embeddings with the embedding on the same stage) and on
    ``defer_embedding_wgrad_compute``. The combinations whose output-layer tensors another part of the estimate
    re-plans are refused by name."""
    m, par, tr, pr = cfg.model, cfg.parallelism, cfg.training, cfg.precision
    if not pr.fp8_output_proj:
        return []
    out: list[Problem] = []

    def add(msg):
        out.append(Problem("precision.fp8_output_proj", True, msg))

    if not pr.fp8 or pr.fp8_recipe != "mxfp8":
        add(f"needs fp8 with fp8_recipe mxfp8 (Megatron-Core's TransformerConfig refuses it otherwise; here fp8 "
            f"{pr.fp8}, fp8_recipe {pr.fp8_recipe or ('delayed' if pr.fp8 else None)})")
    if not m.untie_embeddings_and_output_weights and par.pipeline_model_parallel_size == 1:
        add("with tied embeddings on one pipeline stage: Megatron-Core's TELMHeadColumnParallelLinear does not take "
            "the embedding's weight (skip_weight_param_allocation); set untie_embeddings_and_output_weights")
    if tr.defer_embedding_wgrad_compute:
        add("with defer_embedding_wgrad_compute: Megatron-Core's TELMHeadColumnParallelLinear refuses it")
    if pr.logit_dtype is not None:     # flagsA28: TELMHeadColumnParallelLinear.__init__ raises on output_dtype
        add(f"with logit_dtype {pr.logit_dtype}: Megatron-Core's TELMHeadColumnParallelLinear refuses an output "
            "dtype ('TE MXFP8 output projection does not support output_dtype')")
    for on, what in ((par.use_megatron_fsdp or par.use_torch_fsdp2, "FSDP"),
                     (pr.disable_parameter_transpose_cache, "disable_parameter_transpose_cache"),
                     (tr.freeze_language_model, "freeze_language_model"),
                     (tr.reserved_memory_model == "replay", "reserved_memory_model replay")):
        if on:
            add(f"with {what} is not modelled (the MXFP8 output layer's weight copies and saved input there)")
    return out
