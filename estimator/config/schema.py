"""The configuration schema: the single source of truth for every configuration field.

Four frozen dataclasses, one per YAML section (``model``, ``parallelism``, ``training``,
``precision``), under one root :class:`Config`. Each field carries its metadata: type, default,
allowed values, unit, the Megatron-LM argument it mirrors and its help text. The YAML/JSON loader,
the validation, the CLI flags, the calculator form and the configuration reference in the docs are
all generated from these declarations, so a field is described exactly once.

Names and meanings follow Megatron-Core (``TransformerConfig`` and ``megatron/training/arguments.py``).
Where the seed documents disagree with Megatron-Core, Megatron-Core wins; the help text says so.
``None`` always means "derive the value", and the help text says how.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

__all__ = ["Config", "FieldSpec", "ModelConfig", "ParallelismConfig", "PrecisionConfig", "SECTIONS",
           "TrainingConfig", "field_specs", "section_specs"]

#: Sentinel meaning "this field must be given".
REQUIRED = None

# Upper bounds: far above any real training run, and checked (with the type) before any arithmetic, so that
# absurd input gets an error naming the field, the value and the limit instead of an overflow, a hang or
# a memory blow-up. The loader, the CLI help, the calculator form and the docs read them from each field.
MAX_LAYERS = 10_000          # decoder layers (the largest published models have about 130)
MAX_WIDTH = 10 ** 6          # hidden size, head widths, low-rank dimensions
MAX_FFN = 10 ** 7            # MLP and expert widths
MAX_HEADS = 10 ** 5          # attention heads, query groups
MAX_EXPERTS = 10 ** 5        # routed experts
MAX_VOCAB = 10 ** 8          # vocabulary entries
MAX_TOKENS = 10 ** 8         # sequence length, position embeddings
MAX_GPUS = 10 ** 7           # world size and every parallel size but the pipeline's
MAX_STAGES = 1_024           # pipeline stages (a 1T-parameter model trains with 64; each stage is reported)
MAX_MICRO_BATCH = 10 ** 6    # sequences per micro-batch
MAX_BATCH = 10 ** 9          # sequences per optimizer step

#: GPU architectures ``training.gpu_arch`` takes: NVIDIA's CUDA compute capabilities (sm_80 A100, sm_86 A10/A40/RTX 30,
#: sm_89 L40S/RTX 40, sm_90 H100/H200, sm_100 B200/GB200, sm_103 B300/GB300, sm_120 RTX 50/RTX PRO Blackwell, sm_121
#: DGX Spark) and AMD's gfx targets (gfx942 MI300X/MI325X, gfx950 MI350X/MI355X). Their capability is read from the
#: name (:func:`estimator.config.derived.compute_capability`).
GPU_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120", "sm_121", "gfx942", "gfx950")


def _f(default, help: str, *, type: str, choices: tuple | None = None, unit: str | None = None,
       required: bool = False, nullable: bool = False, flag: str | None = None, cli: str | None = None,
       min: float | None = None, max: float | None = None, derived: str | None = None):
    """Declare one field with its metadata (see :class:`FieldSpec`)."""
    meta = dict(help=help, type=type, choices=choices, unit=unit, required=required,
                nullable=nullable or required or default is None, flag=flag, cli=cli, min=min, max=max,
                derived=derived)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the GPT-style model (Megatron-Core TransformerConfig and GPTModel)."""

    num_layers: int = _f(REQUIRED, "Number of transformer layers (decoder blocks), not counting MTP layers.",
                         type="int", required=True, min=1, max=MAX_LAYERS, flag="--num-layers")
    hidden_size: int = _f(REQUIRED, "Hidden dimension h of the residual stream.", type="int", required=True,
                          min=1, max=MAX_WIDTH, flag="--hidden-size")
    num_attention_heads: int = _f(REQUIRED, "Number of attention (query) heads a.", type="int", required=True,
                                  min=1, max=MAX_HEADS, flag="--num-attention-heads")
    num_query_groups: int | None = _f(None, "Key/value heads g for grouped-query attention; g < a is GQA, "
                                      "g = 1 is MQA. A multiple or a divisor of tensor_model_parallel_size: with fewer than "
                                      "the TP ranks each rank gathers the QKV output and attends with one key/value "
                                      "head (the weights still split evenly). Ignored with multi-latent attention.",
                                      type="int", min=1,
                                      max=MAX_HEADS,
                                      derived="num_attention_heads (plain multi-head attention)",
                                      flag="--num-query-groups")
    kv_channels: int | None = _f(None, "Width of one attention head (head_dim). Not required to equal "
                                 "hidden_size / num_attention_heads (Qwen3, Gemma).", type="int", min=1, max=MAX_WIDTH,
                                 derived="hidden_size // num_attention_heads", flag="--kv-channels")
    ffn_hidden_size: int | None = _f(None, "Width of the dense MLP. For SwiGLU models the 8/3 ratio comes from "
                                     "the gated activation, not from MoE.", type="int", min=1, max=MAX_FFN,
                                     derived="int(4 * hidden_size * 2/3 / 64) * 64 with swiglu, else 4 * hidden_size "
                                     "(Megatron-LM's arguments.py)", flag="--ffn-hidden-size")
    num_experts: int | None = _f(None, "Routed experts per MoE layer; null for a dense model.", type="int", min=1,
                                 max=MAX_EXPERTS,
                                 flag="--num-experts")
    moe_router_topk: int | None = _f(None, "Routed experts each token is sent to (top-k).", type="int", min=1,
                                     max=MAX_EXPERTS,
                                     derived="2 (Megatron's default) for MoE models", flag="--moe-router-topk")
    moe_ffn_hidden_size: int | None = _f(None, "Width of one routed expert's MLP.", type="int", min=1, max=MAX_FFN,
                                         derived="ffn_hidden_size", flag="--moe-ffn-hidden-size")
    moe_shared_expert_intermediate_size: int | None = _f(
        None, "Total width of the shared expert(s) that every token passes through (Megatron sums several "
        "shared experts into one); null for none.", type="int", min=1, max=MAX_FFN,
        flag="--moe-shared-expert-intermediate-size")
    moe_shared_expert_gate: bool = _f(False, "A sigmoid gate (h weights) on the shared expert output, as in "
                                      "Qwen2-MoE.", type="bool", flag="--moe-shared-expert-gate")
    moe_latent_size: int | None = _f(None, "Latent MoE (Nemotron 3 Super): the routed experts work in a latent space "
                                     "of this width; fc1_latent_proj (h x latent) before the dispatch and "
                                     "fc2_latent_proj after the combine, replicated over the tensor-parallel ranks. "
                                     "Null: experts take the hidden size.", type="int", min=1, max=MAX_WIDTH,
                                     flag="--moe-latent-size")
    moe_layer_freq: int | list[int] = _f(1, "Which layers are MoE: an int k makes every k-th layer MoE "
                                         "(1 = all); a 0/1 list of length num_layers gives the pattern, e.g. "
                                         "[0, 0, 0, 1, ...] for first-k-dense, or Megatron-LM's list expression "
                                         "such as ([0]*3+[1]*58); null means 1.", type="int_or_list", nullable=True,
                                         flag="--moe-layer-freq")
    moe_router_enable_expert_bias: bool = _f(False, "Per-expert routing bias (DeepSeek-V3 aux-loss-free "
                                             "balancing). Kept as an fp32 buffer, counted as parameters as "
                                             "Hugging Face does (e_score_correction_bias).", type="bool",
                                             flag="--moe-router-enable-expert-bias")
    moe_token_dispatcher_type: str = _f("alltoall", "How tokens reach their experts. Megatron's own default "
                                        "is allgather; alltoall is what MoE recipes use. Both keep the same routed "
                                        "rows (allgather's gathered tokens live only during the forward pass); flex "
                                        "adds the DeepEP or HybridEP communication buffers "
                                        "(moe_flex_dispatcher_backend).", type="str",
                                        choices=("alltoall", "allgather", "flex"),
                                        flag="--moe-token-dispatcher-type")
    moe_router_dtype: str | None = _f(None, "Dtype of the router logits and routing probabilities "
                                      "(Megatron-Core TransformerConfig.moe_router_dtype): fp32 4 B or fp64 8 B per "
                                      "token and expert where the backward pass keeps them (the logits with the "
                                      "z-loss, the allgather dispatcher's probabilities); the scores are fp32 "
                                      "either way.", type="str",
                                      choices=("fp32", "fp64"), derived="the activations' dtype (bf16: 2 B)",
                                      flag="--moe-router-dtype")
    moe_router_score_function: str = _f("softmax", "Score function for MoE routing (softmax, sigmoid or "
                                        "sqrtsoftplus). sigmoid and sqrtsoftplus keep fp32 scores for every token "
                                        "and expert (4 B each) for the backward pass; softmax after top-k keeps "
                                        "only the k selected.", type="str",
                                        choices=("softmax", "sigmoid", "sqrtsoftplus"),
                                        flag="--moe-router-score-function")
    moe_router_pre_softmax: bool = _f(False, "Enable pre-softmax (pre-sigmoid) routing: the softmax runs over all "
                                      "experts before the top-k selection and keeps its fp32 output for every "
                                      "token and expert. By default softmax is done after top-k.", type="bool",
                                      flag="--moe-router-pre-softmax")
    moe_router_num_groups: int | None = _f(None, "Number of groups to divide experts into for group-limited "
                                           "routing (DeepSeek-V3: 8, node-limited). null means no groups.",
                                           type="int", min=1, max=MAX_EXPERTS, flag="--moe-router-num-groups")
    moe_router_group_topk: int | None = _f(None, "Number of selected groups for group-limited routing (needs "
                                           "moe_router_num_groups). Without expert bias it keeps a 1-byte mask per "
                                           "token and expert.", type="int", min=1, max=MAX_EXPERTS,
                                           flag="--moe-router-group-topk")
    moe_router_load_balancing_type: str = _f("aux_loss", "The load balancing strategy for the router: aux_loss "
                                             "(GShard, Switch Transformer; per micro-batch), seq_aux_loss (DeepSeek-V2/"
                                             "V3; per sample), global_aux_loss (per global batch), sinkhorn (S-BASE) "
                                             "or none. The aux losses apply only with moe_aux_loss_coeff > 0.",
                                             type="str", choices=("aux_loss", "seq_aux_loss", "global_aux_loss",
                                                                  "sinkhorn", "none"),
                                             flag="--moe-router-load-balancing-type")
    moe_aux_loss_coeff: float = _f(0.0, "Scaling coefficient for the aux loss (a starting value of 1e-2 is "
                                   "recommended). Above 0 the router computes its scores a second time over all "
                                   "experts and keeps them in fp32 (4 B per token and expert). Megatron's default "
                                   "0.0 turns the aux loss off.", type="float", min=0.0, max=1e6,
                                   flag="--moe-aux-loss-coeff")
    moe_z_loss_coeff: float | None = _f(None, "Scaling coefficient for the z-loss (a starting value of 1e-3 is "
                                        "recommended); its logsumexp keeps the router logits. null means no "
                                        "z-loss.", type="float", min=0.0, max=1e6, flag="--moe-z-loss-coeff")
    moe_router_fusion: bool = _f(False, "Fuse the top-k routing and aux-loss score computation (Transformer "
                                 "Engine's fused router kernels): each keeps one fp32 intermediate per token and "
                                 "expert, the top-k also its bool routing map.", type="bool",
                                 flag="--moe-router-fusion")
    moe_permute_fusion: bool = _f(False, "Permute and unpermute the tokens with Transformer Engine's fused kernels: "
                                  "each MoE layer keeps an int32 row map of 2 E + 1 entries per token (E experts; "
                                  "the local experts with allgather) for the backward pass. Not counted for the "
                                  "flex dispatcher, whose received-token count is data-dependent.", type="bool",
                                  flag="--moe-permute-fusion")
    moe_flex_dispatcher_backend: str = _f("deepep", "Communication library of the flex dispatcher: deepep "
                                          "(DeepEP's NVLink/RDMA buffers) or hybridep (HybridEP's buffers sized for "
                                          "the worst-case token count). Both are allocated outside PyTorch's "
                                          "allocator.", type="str", choices=("deepep", "hybridep"),
                                          flag="--moe-flex-dispatcher-backend")
    moe_flex_dispatcher_num_sms: int | None = _f(None, "Streaming multiprocessors of the flex dispatcher's kernels "
                                                 "(Megatron-Bridge's moe_hybridep_num_sms sets it too). DeepEP's "
                                                 "buffer has one channel per two SMs; HybridEP across NVLink domains "
                                                 "opens one RDMA queue pair per SM and remote domain for dispatch "
                                                 "and one for combine.", type="int", min=2,
                                                 max=1024, derived="DeepEP: 20 (Megatron-Core's default); HybridEP: "
                                                 "8 across NVLink domains (24 within one, where no buffer depends "
                                                 "on it)", flag="--moe-flex-dispatcher-num-sms")
    moe_hybridep_ranks_per_nvlink_domain: int | None = _f(
        None, "HybridEP: ranks of the flex dispatcher's expert group (expert x expert-tensor parallel, G ranks) "
        "that share one NVLink domain. HybridEP takes it from the environment variable "
        "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN, else counts the ranks whose memory it can map (the same host; "
        "with multi-node NVLink, USE_MNNVL, the whole rack: up to 72 on GB200/GB300 NVL72). A group of more than "
        "one domain adds RDMA staging buffers and queue pairs; G must be a multiple of it. Megatron-Bridge's "
        "launcher sets min(EP, 8) on H100/B200/B300 and EP on GB200/GB300.", type="int", min=1, max=MAX_GPUS,
        derived="min(G, 8): eight GPUs per host, without multi-node NVLink")
    moe_expert_capacity_factor: float | None = _f(None, "Capacity factor per expert; null means dropless "
                                                  "(every expert takes exactly its balanced share).",
                                                  type="float", min=0.0, max=1e4, flag="--moe-expert-capacity-factor")
    moe_pad_expert_input_to_capacity: bool = _f(False, "Pad every expert's input to its full capacity "
                                                "(needs moe_expert_capacity_factor).", type="bool",
                                                flag="--moe-pad-expert-input-to-capacity")
    moe_expert_rank_capacity_factor: float | None = _f(
        None, "Per-rank token budget of the HybridEP flex dispatcher (moe_flex_dispatcher_backend hybridep): each "
        "micro-batch's receive buffer and the experts' tensors get a fixed int(local tokens x moe_router_topk x "
        "factor) rows, rounded up to 256 (the alignment of Transformer Engine's op-fuser / grouped-tensor experts, "
        "which Megatron-Core requires with it), whatever the routing. A step whose busiest rank receives more "
        "(training.moe_overload_factor above the budget) drops tokens, and Megatron-LM's PagedStashRunner reruns "
        "it dropless (receive size from the routing) with the paged stash off: the estimate takes the larger of "
        "the budget and the overload factor's rows. Null: dynamic receive size (the overload factor alone).",
        type="float", min=0.0, max=1e4, flag="--moe-expert-rank-capacity-factor")
    moe_grouped_gemm: bool = _f(True, "Run the local experts as one grouped GEMM (Transformer Engine's "
                                "GroupedLinear), which keeps a cuBLAS workspace per compute stream. (Megatron's "
                                "own default is false, a loop over the experts; MoE recipes turn it on.)",
                                type="bool", flag="--moe-grouped-gemm")
    vocab_size: int = _f(REQUIRED, "Tokenizer vocabulary size before padding.", type="int", required=True, min=1,
                         max=MAX_VOCAB,
                         flag="--vocab-size")
    make_vocab_size_divisible_by: int = _f(128, "Megatron pads the vocabulary to a multiple of this value "
                                           "times tensor_model_parallel_size.", type="int", min=1, max=MAX_WIDTH,
                                           flag="--make-vocab-size-divisible-by")
    max_position_embeddings: int | None = _f(None, "Longest sequence the position embedding supports; must "
                                             "be >= seq_length.", type="int", min=1, max=MAX_TOKENS, unit="tokens",
                                             derived="seq_length", flag="--max-position-embeddings")
    position_embedding_type: str = _f("rope", "Position embedding: rope and none add no parameters; "
                                      "learned_absolute adds max_position_embeddings x hidden_size. "
                                      "(Megatron's own default is learned_absolute.)", type="str",
                                      choices=("rope", "learned_absolute", "none", "yarn", "mrope"),
                                      flag="--position-embedding-type")
    normalization: str = _f("RMSNorm", "Norm layers: RMSNorm has a weight, LayerNorm a weight and a bias.",
                            type="str", choices=("RMSNorm", "LayerNorm"), flag="--normalization")
    layernorm_epsilon: float = _f(1e-5, "Epsilon of the norm layers (no effect on memory).", type="float",
                                  min=0.0, max=1.0, flag="--norm-epsilon")
    activation_func: str = _f("swiglu", "MLP activation. swiglu and geglu are gated (three projections); "
                              "quick_gelu with gated_linear_unit is GPT-OSS's quick-GeGLU (--quick-geglu); situ is "
                              "Kimi K3's gated SiTU, computed in fp32 by unfused PyTorch operations.",
                              type="str", choices=("swiglu", "geglu", "gelu", "silu", "relu", "squared_relu",
                                                   "quick_gelu", "situ"),
                              flag="--swiglu")
    gated_linear_unit: bool = _f(True, "Gated MLP (SwiGLU/GeGLU): fc1 produces 2 x ffn_hidden_size.",
                                 type="bool")
    qk_layernorm: bool = _f(False, "Norm on queries and keys per head (Qwen3, OLMo 2); with MLA, the q/kv "
                            "latent norms.", type="bool", flag="--qk-layernorm")
    qk_l2_norm: bool = _f(False, "Llama 4: a parameter-free L2 norm of queries and keys (Megatron-Core's L2Norm) "
                          "in every attention layer; keeps the QKV output and one fp32 statistic per head.",
                          type="bool", flag="--qk-l2-norm")
    post_layernorm: bool = _f(False, "Gemma 2/3: a norm after the attention output projection and one after fc2 "
                              "(Hugging Face's post_attention_layernorm and post_feedforward_layernorm), as "
                              "Megatron-Bridge's Gemma layer spec builds them (TERowParallelLinearLayerNorm, its "
                              "post_layernorm). Megatron-LM has no flag for it.", type="bool")
    pre_layernorm: bool = _f(True, "A norm before attention and before the MLP (Megatron-Core's input_layernorm "
                             "and pre_mlp_layernorm). False with post_layernorm: OLMo 2's placement, which "
                             "normalises only the attention and MLP outputs. Megatron-LM has no flag for it.",
                             type="bool")
    qk_layernorm_full_dim: bool = _f(False, "With qk_layernorm: one RMSNorm over all query heads and one over all "
                                     "key heads (weights a x kv_channels and g x kv_channels, split over tensor "
                                     "parallel ranks) instead of one per head (OLMo 2, MiniMax-M2; "
                                     "Megatron-Bridge's FullDimQNorm / FullDimKNorm). Megatron-LM has no flag "
                                     "for it.", type="bool")
    final_logit_softcapping: float | None = _f(None, "Gemma 2: logits capped as c tanh(logits / c) "
                                               "(Megatron-Bridge's Gemma2OutputLayer), which keeps one more "
                                               "logits-sized tensor for the backward pass. Null: no capping. "
                                               "Megatron-LM has no flag for it.", type="float", min=0.0,
                                               max=1e6)
    global_attention_freq: int | list[int] | None = _f(
        None, "Gemma 4: sliding-window layers interleaved with global-attention layers whose heads have their own "
        "width (global_kv_channels) and key/value heads (num_global_query_groups). An int k makes every k-th layer "
        "global (layer i, from 0, when (i + 1) % k == 0: Megatron-Bridge's interleaved_attn_pattern (5, 1) is 6); a "
        "0/1 list of length num_layers gives the pattern (1 global). Null: every layer alike. Megatron-LM has no "
        "flag for it.", type="int_or_list")
    global_kv_channels: int | None = _f(None, "Gemma 4: head width of the global-attention layers "
                                        "(global_attention_freq; Hugging Face global_head_dim, 512).", type="int",
                                        min=1, max=MAX_WIDTH, derived="kv_channels")
    num_global_query_groups: int | None = _f(None, "Gemma 4: key/value heads of the global-attention layers "
                                             "(Hugging Face num_global_key_value_heads, 2). With K = V sharing "
                                             "(attention_k_eq_v) Megatron-Bridge still builds the value "
                                             "projection (loaded as a copy of the keys), so it is counted.",
                                             type="int", min=1, max=MAX_HEADS, derived="num_query_groups")
    heterogeneous_layers_config: str | None = _f(
        None, "Heterogeneous layers (Llama-Nemotron, DeciLM's block_configs): the JSON text Megatron-Core's "
        "HeterogeneousTransformerConfig reads, {\"block_configs\": [one block per layer]}, each block "
        "{\"attention\": {...}, \"mlp\" (or \"ffn\"): {...}}: attention no_op (no attention, no input norm), "
        "replace_with_linear (one h x h linear with its norm) or num_query_groups (Hugging Face n_heads_in_group: "
        "heads per group); MLP no_op, replace_with_linear or ffn_hidden_size (Hugging Face ffn_mult: "
        "int(2 ffn_mult h / 3) rounded up to 256). Null: every layer alike.", type="str",
        flag="--heterogeneous-layers-config-encoded-json")
    softmax_type: str = _f("vanilla", "Attention softmax. learnable (GPT-OSS's attention sinks) adds one learned "
                           "logit per head and attention layer (split over the tensor-parallel ranks); off-by-one "
                           "adds a fixed one and no parameters.", type="str",
                           choices=("vanilla", "off-by-one", "learnable"), flag="--softmax-type")
    attention_output_gate: bool = _f(False, "Gated attention (Qwen3-Next): the QKV projection also produces a "
                                     "per-head gate (a x kv_channels more outputs), and the attention output is "
                                     "multiplied by its sigmoid before the output projection.", type="bool",
                                     flag="--attention-output-gate")
    add_bias_linear: bool = _f(False, "Biases on every linear layer. Megatron's own default is true "
                               "(--disable-bias-linear turns it off).", type="bool", flag="--add-bias-linear")
    add_qkv_bias: bool = _f(False, "Bias on the QKV projection only (Qwen2/Qwen2.5).", type="bool",
                            flag="--add-qkv-bias")
    untie_embeddings_and_output_weights: bool = _f(False, "Separate output-layer weights; false ties them to "
                                                   "the input embedding (Megatron's default).", type="bool",
                                                   flag="--untie-embeddings-and-output-weights")
    multi_latent_attention: bool = _f(False, "Multi-latent attention (DeepSeek-V2/V3, Kimi-K2, Moonlight).",
                                      type="bool", flag="--multi-latent-attention")
    q_lora_rank: int | None = _f(None, "MLA query compression rank; null means no query compression "
                                 "(DeepSeek-V2-Lite, Moonlight).", type="int", min=1, max=MAX_WIDTH,
                                 flag="--q-lora-rank")
    kv_lora_rank: int | None = _f(None, "MLA key/value compression rank.", type="int", min=1, max=MAX_WIDTH,
                                  derived="512 when multi_latent_attention", flag="--kv-lora-rank")
    qk_head_dim: int | None = _f(None, "MLA per-head query/key width without the rotary part.", type="int",
                                 min=1, max=MAX_WIDTH, derived="128 when multi_latent_attention", flag="--qk-head-dim")
    qk_pos_emb_head_dim: int | None = _f(None, "MLA per-head rotary width (shared key part).", type="int",
                                         min=1, max=MAX_WIDTH, derived="64 when multi_latent_attention",
                                         flag="--qk-pos-emb-head-dim")
    v_head_dim: int | None = _f(None, "MLA per-head value width.", type="int", min=1, max=MAX_WIDTH,
                                derived="128 when multi_latent_attention", flag="--v-head-dim")
    mtp_num_layers: int | None = _f(None, "Multi-token-prediction layers (DeepSeek-V3: 1). They run on the "
                                    "last pipeline stage and share the embedding and output layer.",
                                    type="int", min=0, max=MAX_LAYERS, flag="--mtp-num-layers")
    mtp_use_repeated_layer: bool = _f(False, "Build one MTP layer and apply it at every MTP depth (Nemotron 3 "
                                      "Super): the weights, gradients and optimizer states of one MTP layer, the "
                                      "activations of every depth.", type="bool", flag="--mtp-use-repeated-layer")
    mtp_hsm: bool = _f(False, "MTP hidden-state mixing (needs mtp_num_layers >= 2): every MTP depth after the first "
                       "takes each token's input from the main model's or an earlier depth's hidden state, drawn at "
                       "random; each such depth keeps 9 B per token (the draw's int64 indices and a bool mask) for "
                       "the backward pass.", type="bool", flag="--mtp-hsm")
    # famA (issue 27): K-EXAONE (EXAONE MoE)
    mtp_dense_mlp: bool = _f(False, "K-EXAONE: the MTP layers hold a dense MLP of ffn_hidden_size where the last "
                             "decoder layer holds an MoE (Megatron-Bridge's build_exaone_moe_layer_spec gives Megatron-"
                             "Core's MTP block a dense layer spec); with global_attention_freq, the attention of the "
                             "non-global layers (MiMo-V2-Flash: sliding-window MTP layers, Megatron-Bridge's "
                             "mimov2flash_mtp_block_spec). False: MTP layers are built like the last "
                             "decoder layer. Megatron-LM has no flag for it.", type="bool")
    # famC (MiMo-V2-Flash): asymmetric value heads, sinks on the sliding-window layers only (its dense MTP layers are
    # mtp_dense_mlp's).
    # Megatron-Bridge @ 067f987d : src/megatron/bridge/models/mimo_v2_flash/ (provider, bridge, modelling file).
    v_channels: int | None = _f(None, "Self-attention: width of one value head where it differs from kv_channels "
                                "(the query/key head width). MiMo-V2-Flash: 128 with kv_channels 192; the QKV "
                                "projection then has a (kv_channels) + g (kv_channels + v_channels) outputs and the "
                                "output projection a v_channels inputs (Megatron-Bridge's MiMoV2FlashSelfAttention, "
                                "its provider's v_head_dim, handed to Transformer Engine as v_channels). Megatron-LM "
                                "has no flag for it (its --v-head-dim is multi-latent attention's).", type="int",
                                min=1, max=MAX_WIDTH, derived="kv_channels")
    global_softmax_type: str | None = _f(None, "Softmax of the global-attention layers (global_attention_freq) "
                                         "where it differs from softmax_type. MiMo-V2-Flash: learnable sinks on its "
                                         "sliding-window layers, vanilla on its global ones (Megatron-Bridge's "
                                         "MiMoV2FlashTEDotProductAttention). Megatron-LM has no flag for it.",
                                         type="str", choices=("vanilla", "off-by-one", "learnable"),
                                         derived="softmax_type")
    # famE (issue 27): Step 3.5 Flash. Megatron-Bridge @ 067f987d : src/megatron/bridge/models/stepfun/
    # (step35_provider.py Step35DecoderLayer, step35_bridge.py provider_bridge).
    num_global_attention_heads: int | None = _f(None, "Step 3.5 Flash: query heads of the global-attention layers "
                                                "(global_attention_freq) where they differ from num_attention_heads "
                                                "(64 there, 96 in its sliding-window layers: Megatron-Bridge's "
                                                "Step35DecoderLayer builds each layer kind with its own head count). "
                                                "Megatron-LM has no flag for it.", type="int", min=1, max=MAX_HEADS,
                                                derived="num_attention_heads")
    # famD (issue 27): Falcon-H1
    parallel_mamba_attention: bool = _f(False, "Falcon-H1: every decoder layer runs a Mamba-2 mixer (the mamba_* "
                                        "fields) and self-attention side by side on one shared RMSNorm, adds their "
                                        "outputs, then a dense MLP (Megatron-Bridge's FalconH1Layer). Megatron-LM has "
                                        "no flag for it.", type="bool")
    use_mamba_mem_eff_path: bool = _f(True, "Mamba-2: the fused scan (mamba_split_conv1d_scan_combined), which keeps "
                                      "the in_proj output and recomputes the rest. False (Megatron-LM "
                                      "--disable-mamba-mem-eff-path): the unfused convolution and chunked scan, which "
                                      "keep their own copies of x, B, C, dt, the convolution input and the fp32 "
                                      "decay cumsum (about (di + 2 g N) x 2 B + nh x 4 B more per token and layer, "
                                      "widths per TP rank).", type="bool")
    mamba_gated_norm: bool = _f(True, "The Mamba-2 mixer's gated RMSNorm over its inner width (Megatron-Core "
                                "MambaMixer rmsnorm; Falcon-H1's mamba_rms_norm). False: the scan output is gated by "
                                "z with no norm weights. Megatron-LM has no flag for it.", type="bool")
    hybrid_layer_pattern: str | None = _f(
        None, "Hybrid models (Nemotron-H, Nemotron 3): one symbol per layer, M Mamba-2 mixer, * self-attention, "
        "- MLP, E MoE, G gated delta net; each symbol is a whole layer with its own norm. | splits the layers "
        "into pipeline chunks (their number a multiple of pipeline_model_parallel_size; more chunks than stages "
        "make virtual stages); /PATTERN after the main pattern adds one multi-token-prediction layer of that "
        "pattern, e.g. M*M-/M-/M- for two. Null: a GPT model (attention and MLP in every layer).", type="str",
        flag="--hybrid-layer-pattern")
    mamba_state_dim: int = _f(128, "Hybrid models: SSM state size N of the Mamba-2 mixer (Hugging Face "
                              "ssm_state_size).", type="int", min=1, max=MAX_WIDTH, flag="--mamba-state-dim")
    mamba_head_dim: int = _f(64, "Hybrid models: width of one Mamba-2 head.", type="int", min=1, max=MAX_WIDTH,
                             flag="--mamba-head-dim")
    mamba_num_groups: int = _f(8, "Hybrid models: groups of the Mamba-2 B and C projections (Hugging Face "
                               "n_groups); must divide the heads and be divisible by the tensor-parallel size.",
                               type="int", min=1, max=MAX_HEADS, flag="--mamba-num-groups")
    mamba_num_heads: int | None = _f(None, "Hybrid models: Mamba-2 heads; the inner width is heads x "
                                     "mamba_head_dim.", type="int", min=1, max=MAX_HEADS,
                                     derived="2 x hidden_size / mamba_head_dim (Megatron-Core's expand of 2)",
                                     flag="--mamba-num-heads")
    experimental_attention_variant: str | None = _f(
        None, "Linear attention (Qwen3-Next): gdn puts a gated delta net in the layers linear_attention_freq "
        "names, full attention in the others. Megatron-Core's deprecated alias gated_delta_net is accepted. "
        "dsa: DeepSeek sparse attention (DeepSeek-V3.2, GLM-5) in every layer: multi-latent attention in its "
        "absorbed form plus a lightning indexer that picks dsa_indexer_topk keys per query. dsv4_hybrid: "
        "DeepSeek-V4's hybrid attention in every layer (one shared key/value head, grouped low-rank output "
        "projection; per layer a sliding window, plus compressed keys where csa_compress_ratios says so). kda: Kimi "
        "K3's Kimi delta attention (Megatron-Bridge's KimiK3Attention) in the layers linear_attention_freq names, "
        "with linear_num_key_heads heads of linear_key_head_dim; multi-latent attention (no RoPE, with "
        "attention_output_gate's sigmoid gate) in the others.",
        type="str", choices=("gdn", "gated_delta_net", "dsa", "dsv4_hybrid", "kda"),
        flag="--experimental-attention-variant")
    dsa_indexer_n_heads: int | None = _f(None, "DeepSeek sparse attention: indexer heads (DeepSeek-V3.2: 64, "
                                         "GLM-5: 32; Hugging Face index_n_heads). Required with dsa.", type="int",
                                         min=1, max=MAX_HEADS, flag="--dsa-indexer-n-heads")
    dsa_indexer_head_dim: int | None = _f(None, "DeepSeek sparse attention: width of one indexer head (128; "
                                          "Hugging Face index_head_dim); at least qk_pos_emb_head_dim, its rotary "
                                          "part. Required with dsa.", type="int", min=1, max=MAX_WIDTH,
                                          flag="--dsa-indexer-head-dim")
    dsa_indexer_topk: int | None = _f(None, "DeepSeek sparse attention: keys each query attends to (2048; "
                                      "Hugging Face index_topk). Required with dsa.", type="int", min=1,
                                      max=MAX_TOKENS, flag="--dsa-indexer-topk")
    dsa_indexer_loss_coeff: float | None = _f(None, "DeepSeek sparse attention: weight of the indexer's KL loss "
                                              "against the attention scores; above 0 the indexer runs with "
                                              "autograd and keeps its q, k, weights and inputs for the backward "
                                              "pass (Megatron-Bridge's GLM-5: 0.001). null or 0: no indexer loss.",
                                              type="float", min=0.0, max=1e6, flag="--dsa-indexer-loss-coeff")
    # famB (issue 27): GLM-5.2's shared DSA indexers (cross-layer top-k sharing, Megatron-Core's IndexShare)
    dsa_indexer_topk_freq: int = _f(1, "DeepSeek sparse attention: cross-layer top-k sharing. 1: every layer runs "
                                    "its own indexer. k > 1: after the first dsa_indexer_skip_topk_offset layers "
                                    "(each with its own), one layer in k builds an indexer and computes the top-k; "
                                    "the k - 1 after it reuse that top-k and hold no indexer weights or "
                                    "activations (GLM-5.2: 4; Hugging Face index_topk_freq).", type="int", min=1,
                                    max=MAX_LAYERS, flag="--dsa-indexer-topk-freq")
    dsa_indexer_skip_topk_offset: int = _f(0, "DeepSeek sparse attention with dsa_indexer_topk_freq > 1: the "
                                           "leading layers that each compute their own top-k before sharing starts "
                                           "(0 counts as 1; GLM-5.2: 3; Hugging Face index_skip_topk_offset).",
                                           type="int", min=0, max=MAX_LAYERS, flag="--dsa-indexer-skip-topk-offset")
    dsa_indexer_use_sparse_loss: bool = _f(False, "DeepSeek sparse attention with the indexer loss: compute its KL "
                                           "over the selected top-k keys only (Megatron-Bridge's GLM-5: true). With "
                                           "shared top-k and dsa_kernel_backend cudnn the fused kernel then keeps "
                                           "only the indexer's precomputed gradients (no int64 top-k, no detached "
                                           "query, no s x s index scores in the backward pass).", type="bool",
                                           flag="--dsa-indexer-use-sparse-loss")
    dsa_kernel_backend: str = _f("none", "DeepSeek sparse attention kernels (DeepSeek-V4's too): none "
                                 "(Megatron-Core's PyTorch reference path, which builds the dense s x s scores of "
                                 "every head in fp32), "
                                 "tilelang or cudnn (fused sparse MLA over the top-k keys only).", type="str",
                                 choices=("none", "tilelang", "cudnn"), flag="--dsa-kernel-backend")
    csa_compress_ratios: list[int] | None = _f(
        None, "DeepSeek-V4 (dsv4_hybrid): each layer's key compression ratio, decoder layers then MTP layers: 0 a "
        "sliding-window layer, 4 compressed sparse attention (an overlapping compressor plus an indexer that picks "
        "dsa_indexer_topk compressed keys), 128 heavily compressed attention (a compressor, all compressed keys). "
        "DeepSeek-V4-Flash: [0, 0, 4, 128, 4, 128, ..., 4, 0]. Required with dsv4_hybrid; at least "
        "num_layers + mtp_num_layers entries (Megatron-Core ignores the rest).", type="int_list", min=0,
        max=MAX_TOKENS)
    csa_window_size: int = _f(128, "DeepSeek-V4 (dsv4_hybrid): the sliding window of uncompressed keys every query "
                              "attends to (Hugging Face sliding_window).", type="int", min=1, max=MAX_TOKENS)
    o_groups: int = _f(8, "DeepSeek-V4 (dsv4_hybrid): groups of the grouped low-rank output projection (wo_a); "
                       "num_attention_heads x v_head_dim must divide by it.", type="int", min=1, max=MAX_HEADS)
    o_lora_rank: int = _f(1024, "DeepSeek-V4 (dsv4_hybrid): low-rank width of each output-projection group (wo_a "
                          "maps a group's heads to it, wo_b maps o_groups x o_lora_rank to the hidden size).",
                          type="int", min=1, max=MAX_WIDTH)
    enable_hyper_connections: bool = _f(False, "Manifold-constrained hyper-connections (mHC, DeepSeek-V4): the "
                                        "residual stream is num_residual_streams copies of the hidden state, mixed "
                                        "before and after attention and the MLP by learned per-token weights.",
                                        type="bool")
    num_residual_streams: int = _f(4, "mHC: residual streams n (Hugging Face hc_mult).", type="int", min=1,
                                   max=MAX_HEADS)
    use_fused_mhc: bool = _f(False, "mHC: fused kernels; the projection then reads the bf16 streams instead of "
                             "an fp32 copy of them, which the unfused path keeps for the backward pass.",
                             type="bool")
    moe_n_hash_layers: int = _f(0, "Leading MoE layers routed by a fixed token-to-expert table (DeepSeek-V4: 3; "
                                "Hugging Face num_hash_layers): their router has no expert bias.", type="int", min=0,
                                max=MAX_LAYERS)
    linear_attention_freq: int | list[int] | None = _f(
        None, "Gated delta net: which layers are linear attention; an int k makes every k-th layer full "
        "attention and the others linear (Qwen3-Next: 4); a 0/1 list of length num_layers gives the pattern "
        "(1 linear, 0 full), or Megatron-LM's list expression such as ([1]*3+[0])*12.", type="int_or_list",
        flag="--linear-attention-freq")
    linear_conv_kernel_dim: int = _f(4, "Gated delta net: width of the causal convolution on q, k and v.",
                                     type="int", min=1, max=MAX_WIDTH, flag="--linear-conv-kernel-dim")
    linear_key_head_dim: int = _f(128, "Gated delta net: width of one query/key head.", type="int", min=1, max=MAX_WIDTH,
                                  flag="--linear-key-head-dim")
    linear_value_head_dim: int = _f(128, "Gated delta net: width of one value (and output gate) head.",
                                    type="int", min=1, max=MAX_WIDTH, flag="--linear-value-head-dim")
    linear_num_key_heads: int = _f(16, "Gated delta net: query/key heads.", type="int", min=1, max=MAX_HEADS,
                                   flag="--linear-num-key-heads")
    linear_num_value_heads: int = _f(32, "Gated delta net: value heads (a multiple of the key heads).",
                                     type="int", min=1, max=MAX_HEADS, flag="--linear-num-value-heads")
    # Kimi K3 (issue 27): Megatron-Bridge @ 067f987d : src/megatron/bridge/models/kimi/kimi_k3_layers.py
    attn_res_block_size: int | None = _f(
        None, "Kimi K3's attention residuals (AttnRes; Hugging Face attn_res_block_size, 12): every layer replaces "
        "the residual stream by a softmax-weighted mix of a bank of snapshots, one taken every this many layers, "
        "and the running sum; each layer adds two RMSNorms and two h -> 1 score projections (4 h parameters), the "
        "last one two more, and the bank travels with the hidden state between pipeline stages. Needs "
        "experimental_attention_variant kda. Null: a plain residual stream.", type="int", min=1, max=MAX_LAYERS)
    moe_latent_norm: bool = _f(False, "Kimi K3's routed-expert norm (Hugging Face latent_moe_use_norm): an RMSNorm "
                               "of moe_latent_size weights on the combined routed-expert output before "
                               "fc2_latent_proj. Needs moe_latent_size.", type="bool")
    vision_num_layers: int | None = _f(None, "Vision tower (of the kind vision_model_type): transformer layers "
                                       "(Hugging Face vision_config.depth). It sits on the first pipeline stage, "
                                       "without sequence or context parallelism. null: no vision tower.",
                                       type="int", min=1, max=MAX_LAYERS)
    vision_hidden_size: int | None = _f(None, "Vision tower: hidden width (vision_config.hidden_size). Required with "
                                        "vision_num_layers.", type="int", min=1, max=MAX_WIDTH)
    vision_num_attention_heads: int | None = _f(None, "Vision tower: attention heads "
                                                "(vision_config.num_heads). Required with vision_num_layers.", type="int", min=1, max=MAX_HEADS)
    # towers27 (issue 27): EXAONE 4.5's tower has grouped-query attention (Megatron-Bridge @ 067f987d :
    # models/exaone/exaone45/modelling_exaone45/transformer_config.py get_vision_model_config: num_query_groups
    # = vision_config.num_key_value_heads).
    vision_num_query_groups: int | None = _f(None, "Vision tower: key-value head groups of its grouped-query "
                                             "attention (vision_config.num_key_value_heads; the exaone45 tower "
                                             "only). null: one per head, no GQA.", type="int", min=1, max=MAX_HEADS,
                                             derived="vision_num_attention_heads")
    vision_ffn_hidden_size: int | None = _f(None, "Vision tower: MLP width, gated or not by vision_model_type "
                                            "(vision_config.intermediate_size). Required with vision_num_layers.",
                                            type="int", min=1, max=MAX_FFN)
    vision_patch_size: int = _f(16, "Vision tower: patch side in pixels (the Conv3d patch embedding's kernel).",
                                type="int", min=1, max=MAX_WIDTH, unit="pixels")
    vision_temporal_patch_size: int = _f(2, "Vision tower: frames per patch (an image is repeated to fill them).",
                                         type="int", min=1, max=MAX_WIDTH)
    vision_in_channels: int = _f(3, "Vision tower: input channels of the patch embedding.", type="int", min=1,
                                 max=MAX_WIDTH)
    vision_spatial_merge_size: int = _f(2, "Vision tower: the patch merger joins merge x merge patches into one "
                                        "language-model token.", type="int", min=1, max=MAX_WIDTH)
    vision_num_position_embeddings: int = _f(2304, "Vision tower: learned position embeddings (a square grid, "
                                             "interpolated to each image; qwen3_vl only).", type="int", min=1,
                                             max=MAX_TOKENS)
    vision_out_hidden_size: int | None = _f(None, "Vision tower: the patch merger's output width, the language "
                                            "model's hidden size (vision_config.out_hidden_size).", type="int", min=1,
                                            max=MAX_WIDTH, derived="hidden_size")
    vision_deepstack_mergers: int = _f(0, "Vision tower: Qwen3-VL's deepstack mergers (how many entries "
                                       "vision_config.deepstack_visual_indexes holds): each is a patch merger of its "
                                       "own, fed by one tower layer, whose output is added to one of the first "
                                       "language-model layers; they are part of the projection "
                                       "(freeze_vision_projection). 0: none (Qwen3.5).", type="int", min=0,
                                       max=MAX_LAYERS)
    # vlm (issue 27): the kind of vision tower, its per-kind differences in estimator/model/vision.py (KINDS).
    vision_model_type: str = _f("qwen3_vl", "Vision tower: its kind, as Megatron-Bridge builds it. qwen3_vl "
                                "(Qwen3-VL, Qwen3.5): Megatron-Core ViT layers split over the language model's "
                                "tensor-parallel ranks, LayerNorm, tanh-GELU MLP not gated, learned positions, "
                                "deepstack mergers. qwen2_5_vl (Qwen2.5-VL): Hugging Face's module, whole on every "
                                "tensor-parallel rank, RMSNorm, gated SiLU MLP, no patch-embedding bias, rotary "
                                "positions (vision_num_position_embeddings unused), window attention. gemma3_vl "
                                "(Gemma 3): Hugging Face's SigLIP, whole on every tensor-parallel rank, Conv2d "
                                "patches (vision_temporal_patch_size 1), learned positions fixing the image side, "
                                "and a projector that average-pools merge x merge patches, RMS-normalises and "
                                "projects them with one linear split over TP. kimi_k25 (Kimi K2.5's MoonViT): "
                                "the checkpoint's own module, whole on every tensor-parallel rank, SigLIP-shaped "
                                "layers, Conv2d patches, learned positions interpolated to each image, a final "
                                "LayerNorm, and a patch merger (LayerNorm, fc1, GELU, fc2), replicated too. "
                                "glm4v (GLM-4.5V): Hugging Face's module, whole on every tensor-parallel rank, "
                                "RMSNorm, gated SiLU MLP and attention without biases, learned positions, a "
                                "strided-convolution downsample and a gated patch merger; Megatron-Bridge's "
                                "freeze leaves its positions, outer norms and downsample trained. radio (Nemotron "
                                "Nano VL's RADIO ViT): Megatron-Core ViT layers split like the language model's, "
                                "never recomputed, a linear patch embedder without bias (vision_temporal_patch_size "
                                "1), 16 class tokens, (2048 / patch)^2 learned positions, 512-pixel image tiles, and "
                                "a pixel-shuffle projector that is the language model's MLP of width "
                                "vision_projector_ffn_hidden_size. ernie45_vl (ERNIE-4.5-VL's ViT): Hugging "
                                "Face's module, whole on every tensor-parallel rank, LayerNorm, quick-GELU MLP, "
                                "a linear patch embedding without bias (vision_temporal_patch_size 1), rotary "
                                "positions, a final LayerNorm that freeze_vision_model leaves trained, and the "
                                "variable-resolution resampler (spatial and temporal MLPs, a linear, an RMSNorm). "
                                "exaone45 (EXAONE 4.5): Megatron-Core ViT layers split like the language model's, "
                                "RMSNorm, gated SiLU MLP, grouped-query attention (vision_num_query_groups), no "
                                "patch-embedding bias, rotary positions, window attention, Qwen2.5-VL's merger. "
                                "step37 (Step 3.7's Perception-Encoder): plain PyTorch modules, whole on every "
                                "tensor-parallel rank, LayerNorm with LayerScale, quick-GELU MLP, a Conv2d without "
                                "bias (vision_temporal_patch_size 1), a LayerNorm before the layers, learned and "
                                "2-D rotary positions, two stride-2 convolutions (vision_spatial_merge_size 4) and "
                                "one linear without bias. gemma4 (Gemma 4): Hugging Face's module, whole on every "
                                "tensor-parallel rank, RMSNorm before and after attention and the MLP, q / k norms, "
                                "gated tanh-GELU MLP and attention without biases, a linear patch embedding "
                                "(vision_temporal_patch_size 1), x and y position tables of "
                                "vision_num_position_embeddings rows each, a merge x merge average pool and one "
                                "linear without bias. pixtral (Mistral 3, Magistral, Ministral 3): Hugging Face's "
                                "Pixtral module, whole on every tensor-parallel rank, RMSNorm, gated SiLU MLP and "
                                "attention without biases, a Conv2d without bias (vision_temporal_patch_size 1), an "
                                "RMSNorm before the layers, 2-D rotary positions over a square of "
                                "vision_num_position_embeddings patches (the largest image), and a projector "
                                "(RMSNorm, a merge x merge patch merger, two linears around a GELU).",
                                type="str", choices=("qwen3_vl", "qwen2_5_vl", "gemma3_vl", "kimi_k25", "glm4v",
                                                     "radio", "ernie45_vl", "exaone45", "step37", "gemma4",
                                                     "pixtral"))
    vision_projector_ffn_hidden_size: int | None = _f(None, "Vision tower: the projector's MLP width: GLM-4.5V's "
                                                      "gated patch merger (vision_config.intermediate_size; the "
                                                      "tower's own layers are vision_ffn_hidden_size wide) or "
                                                      "Nemotron Nano VL's projector (projector_hidden_size). "
                                                      "Required with vision_model_type glm4v or radio; null for "
                                                      "the other kinds.",
                                                      type="int", min=1, max=MAX_FFN)
    # omni28 (issues 27/28): Nemotron Omni's RADIO video embedder and class tokens, and its Parakeet sound tower
    # (estimator/model/audio.py). Megatron-Bridge @ 067f987d : models/nemotron_omni/nemotron_omni_provider.py.
    vision_separate_video_embedder: bool = _f(False, "Radio vision tower: Nemotron Omni's separate video patch "
                                              "embedder (Megatron-Bridge's separate_video_embedder): images keep "
                                              "the one-frame embedder (3 x patch^2 inputs) and frame groups of "
                                              "vision_temporal_patch_size get a second one (RADIOViTModel."
                                              "video_embedder, 3 x temporal x patch^2 inputs). Needs "
                                              "vision_model_type radio and vision_temporal_patch_size above 1.",
                                              type="bool")
    vision_class_token_len: int | None = _f(None, "Radio vision tower: class tokens RADIOViTModel prepends to "
                                            "each image (learned, class_token_len x vision_hidden_size; dropped "
                                            "before the projector). 10 for Nemotron Omni (vision_class_token_len"
                                            "). null: 16, Nemotron Nano VL's (use_vision_backbone_fp8_arch).",
                                            type="int", min=1, max=1024)
    sound_num_layers: int | None = _f(None, "Sound tower (Nemotron Omni's Parakeet / FastConformer encoder, "
                                      "Hugging Face's ParakeetEncoder): conformer blocks (sound_config."
                                      "num_hidden_layers). It sits on the first pipeline stage beside the vision "
                                      "tower, whole on every tensor-parallel rank. null: no sound tower.",
                                      type="int", min=1, max=MAX_LAYERS)
    sound_hidden_size: int = _f(1024, "Sound tower: hidden width (sound_config.hidden_size).", type="int", min=1,
                                max=MAX_WIDTH)
    sound_num_attention_heads: int = _f(8, "Sound tower: attention heads, no GQA (sound_config."
                                        "num_attention_heads). No effect on memory as modelled: the parameters "
                                        "do not depend on it (bias_u and bias_v are heads x head width = "
                                        "sound_hidden_size) and clips are modelled with the encoder frozen, "
                                        "which keeps no activations.", type="int", min=1, max=MAX_HEADS)
    sound_ffn_hidden_size: int = _f(4096, "Sound tower: width of each of the two macaron feed-forward modules "
                                    "(sound_config.intermediate_size).", type="int", min=1, max=MAX_FFN)
    sound_conv_kernel_size: int = _f(9, "Sound tower: kernel of the depthwise convolution in each block "
                                     "(sound_config.conv_kernel_size; odd).", type="int", min=1, max=1024)
    sound_num_mel_bins: int = _f(128, "Sound tower: mel bins of its input features (sound_config.num_mel_bins).",
                                 type="int", min=1, max=MAX_WIDTH)
    sound_subsampling_factor: int = _f(8, "Sound tower: time subsampling of the convolutional front end "
                                       "(sound_config.subsampling_factor, a power of 2: log2 of it stride-2 "
                                       "convolutions).", type="int", min=2, max=1024)
    sound_subsampling_conv_channels: int = _f(256, "Sound tower: channels of the subsampling convolutions "
                                              "(sound_config.subsampling_conv_channels).", type="int", min=1,
                                              max=MAX_WIDTH)
    sound_bias: bool = _f(False, "Sound tower: biases on the blocks' linears and convolutions (Megatron-Bridge "
                          "passes sound_config.convolution_bias to both attention_bias and convolution_bias; "
                          "false for Nemotron Omni).", type="bool")
    sound_projector_ffn_hidden_size: int = _f(4096, "Sound tower: the sound projection's MLP width (sound_config."
                                              "projection_hidden_size): the language model's MLP from "
                                              "sound_hidden_size to hidden_size.", type="int", min=1, max=MAX_FFN)
    # ERNIE-VL (issue 27): ERNIE-4.5-VL's second, vision expert pool. Megatron-Bridge @ 067f987d :
    # src/megatron/bridge/models/ernie_vl/modeling_ernie45_vl/ernie_moe_layer.py ErnieMultiTypeMoE (text_moe_layer
    # and vision_moe_layer, each a Megatron-Core MoELayer of config.moe_intermediate_size [text, vision]).
    moe_vision_ffn_hidden_size: int | None = _f(None, "ERNIE-4.5-VL: width of the vision expert pool every MoE "
                                                "layer holds beside its text experts (config.json "
                                                "moe_intermediate_size [text, vision]: 512 in ERNIE-4.5-VL-28B-A3B, "
                                                "whose text experts are 1536 wide). The pool has its own router "
                                                "and the text pool's expert count, top-k and router options, and "
                                                "is split over expert-parallel x expert-tensor-parallel ranks like "
                                                "them (Megatron-Bridge's ErnieMultiTypeMoE). Image tokens, with each "
                                                "image's start and end tokens, go to it (training.images_per_sample),"
                                                " text tokens to the text pool; the shared experts see both. Null: "
                                                "one expert pool. Megatron-LM has no flag for it.", type="int",
                                                min=1, max=MAX_FFN)
    # wan28 (issues 27, 28): Wan, the video diffusion transformer Megatron-Bridge trains (WanModelProvider).
    # Megatron-Bridge @ 067f987d : src/megatron/bridge/diffusion/models/wan/ (wan_provider.py, wan_model.py,
    # wan_layer_spec.py); its layers are counted in estimator/model/layers/wan.py.
    model_kind: str = _f("gpt", "What Megatron-Core model the layers belong to. gpt: GPTModel (and the hybrid and "
                         "vision-language models built on it). wan: Megatron-Bridge's WanModel, a video diffusion "
                         "transformer: every layer is adaLN-modulated self-attention over the latent video tokens, "
                         "cross-attention to the text embeddings and a GELU MLP; no vocabulary (vocab_size is "
                         "unused), a patch embedding, text and timestep embedders and a patch head instead. The "
                         "sequence is the latent video tokens of one micro-batch (training.seq_length, or the "
                         "wan_latent_* grid).", type="str", choices=("gpt", "wan"))
    wan_text_tokens: int = _f(512, "Wan: text tokens of one micro-batch, the cross-attention keys and values "
                              "(umT5 embeddings, precomputed: Bridge's task encoder pads each sample's to 512).",
                              type="int", min=1, max=MAX_TOKENS, unit="tokens")
    wan_text_dim: int = _f(4096, "Wan: width of the precomputed text embeddings (umT5-XXL: 4096), the input of "
                           "the text embedder (WanModelProvider.text_dim).", type="int", min=1, max=MAX_WIDTH)
    wan_crossattn_emb_size: int | None = _f(None, "Wan: width of the text embedder's output, the input of every "
                                            "cross-attention's key/value projection (crossattn_emb_size).",
                                            type="int", min=1, max=MAX_WIDTH, derived="hidden_size")
    wan_in_channels: int = _f(16, "Wan: latent channels of the VAE (the patch embedding's input channels).",
                              type="int", min=1, max=MAX_WIDTH)
    wan_out_channels: int = _f(16, "Wan: latent channels the head predicts.", type="int", min=1, max=MAX_WIDTH)
    wan_patch_spatial: int = _f(2, "Wan: patch height and width, in latent pixels.", type="int", min=1,
                                max=MAX_WIDTH)
    wan_patch_temporal: int = _f(1, "Wan: patch length, in latent frames.", type="int", min=1, max=MAX_WIDTH)
    wan_freq_dim: int = _f(256, "Wan: width of the sinusoidal timestep features (the timestep embedder's input).",
                           type="int", min=1, max=MAX_WIDTH)
    wan_latent_frames: int | None = _f(None, "Wan: latent frames of one sample (Wan 2.1's VAE: 1 + (video "
                                       "frames - 1) / 4). With wan_latent_height and wan_latent_width it sets the "
                                       "sequence: frames / patch_temporal x height / patch_spatial x width / "
                                       "patch_spatial tokens, padded to a multiple of 2 x context_parallel_size. "
                                       "Null: the sequence is training.seq_length.", type="int", min=1,
                                       max=MAX_TOKENS, derived="training.seq_length is the latent tokens")
    wan_latent_height: int | None = _f(None, "Wan: latent height of one sample (Wan 2.1's VAE: pixels / 8).",
                                       type="int", min=1, max=MAX_TOKENS,
                                       derived="training.seq_length is the latent tokens")
    wan_latent_width: int | None = _f(None, "Wan: latent width of one sample (Wan 2.1's VAE: pixels / 8).",
                                      type="int", min=1, max=MAX_TOKENS,
                                      derived="training.seq_length is the latent tokens")
    hidden_dropout: float = _f(0.0, "Dropout after attention and MLP; > 0 keeps a 1-byte mask per element. "
                               "(Megatron's own default is 0.1; pretraining recipes use 0.)", type="float",
                               min=0.0, max=1.0, flag="--hidden-dropout")
    attention_dropout: float = _f(0.0, "Dropout on attention probabilities; costs memory only with unfused "
                                  "attention. (Megatron's own default is 0.1.)", type="float", min=0.0, max=1.0,
                                  flag="--attention-dropout")
    # --- flagsA28: refused Megatron-LM arguments now modelled (issue 28 item 7) ---
    moe_apply_probs_on_input: bool = _f(False, "Scale the routed experts' input by the routing probabilities "
                                        "before fc1 instead of their activation output (Megatron-LM "
                                        "--moe-apply-probs-on-input, TransformerConfig.moe_apply_probs_on_input; "
                                        "top-1 routing only): the product keeps the unscaled input for its "
                                        "gradient, one more copy of the experts' input rows (2 B per element in "
                                        "bf16), and its backward holds three such row tensors at once.",
                                        type="bool", flag="--moe-apply-probs-on-input")


@dataclass(frozen=True)
class ParallelismConfig:
    """How the model is split over GPUs. Dense layers use tp*cp*dp*pp = world_size; expert layers fold
    etp*ep*edp*pp = world_size over the same ranks: EP does not multiply the world size."""

    tensor_model_parallel_size: int = _f(1, "Tensor parallel size t: splits every linear layer's weights and "
                                         "the attention heads.", type="int", min=1, max=MAX_GPUS, cli="--tp",
                                         flag="--tensor-model-parallel-size")
    pipeline_model_parallel_size: int = _f(1, "Pipeline parallel size p: splits the layers into p stages.",
                                           type="int", min=1, max=MAX_STAGES, cli="--pp",
                                           flag="--pipeline-model-parallel-size")
    expert_model_parallel_size: int = _f(1, "Expert parallel size: splits the routed experts of each MoE layer.",
                                         type="int", min=1, max=MAX_GPUS, cli="--ep",
                                         flag="--expert-model-parallel-size")
    expert_tensor_parallel_size: int | None = _f(None, "Tensor parallel size inside each routed expert.",
                                                 type="int", min=1, max=MAX_GPUS, cli="--etp",
                                                 derived="tensor_model_parallel_size (Megatron-Core's rule; "
                                                 "the seeds' default of 1 is wrong)",
                                                 flag="--expert-tensor-parallel-size")
    context_parallel_size: int = _f(1, "Context parallel size: splits the sequence. Works without sequence "
                                    "parallelism and without TP.", type="int", min=1, max=MAX_GPUS, cli="--cp",
                                    flag="--context-parallel-size")
    cp_comm_type: str = _f("p2p", "How context-parallel attention exchanges keys and values: p2p (ring), a2a "
                           "(all-to-all over heads), allgather (Transformer Engine's all_gather), or a2a+p2p.",
                           type="str",
                           choices=("p2p", "a2a", "allgather", "a2a+p2p"), flag="--cp-comm-type")
    hierarchical_context_parallel_sizes: list[int] | None = _f(
        None, "Sizes of the levels of hierarchical context parallelism, inner first: with cp_comm_type a2a+p2p "
        "[a2a group, p2p group], e.g. [8, 2] for CP 16 over two 8-GPU nodes. Their product must be "
        "context_parallel_size; each level of more than one rank is a process group of its own (its NCCL "
        "buffers). Required with a2a+p2p.", type="int_list", min=1, max=MAX_GPUS,
        flag="--hierarchical-context-parallel-sizes")
    hybrid_context_parallel: bool = _f(
        False, "Dynamic (hybrid) context parallelism for packed variable-length samples: each sequence of L tokens "
        "runs as a micro-batch of its own over 2^ceil(log2(L / max_seqlen_per_dp_cp_rank)) of the data x "
        "context-parallel ranks, forward then backward before the next. The estimate is that of the busiest "
        "rank's largest shard: min(seq_length, max_seqlen_per_dp_cp_rank) tokens, one sequence, under the largest "
        "group such a shard runs in. seq_length is the longest sequence. Needs pipeline parallel size 1.",
        type="bool", flag="--hybrid-context-parallel")
    max_seqlen_per_dp_cp_rank: int | None = _f(
        None, "With hybrid_context_parallel: the most tokens of one sequence a data x context-parallel rank holds "
        "(Megatron-Core splits a longer sequence over the next power of two of ranks). Required with it.",
        type="int", min=1, max=MAX_TOKENS, unit="tokens", flag="--max-seqlen-per-dp-cp-rank")
    virtual_pipeline_model_parallel_size: int | None = _f(None, "Model chunks per pipeline rank for the "
                                                          "interleaved 1F1B schedule; null for plain 1F1B "
                                                          "(or the layout's chunks / PP with a layout).",
                                                          type="int", min=1, max=MAX_LAYERS, cli="--vpp",
                                                          flag="--num-virtual-stages-per-pipeline-rank")
    num_layers_in_first_pipeline_stage: int | None = _f(None, "Layers on the first stage for an uneven "
                                                        "split; the rest are spread evenly (with VPP each "
                                                        "chunk of a stage holds its count / VPP).", type="int",
                                                        min=0, max=MAX_LAYERS,
                                                        flag="--decoder-first-pipeline-num-layers")
    num_layers_in_last_pipeline_stage: int | None = _f(None, "Layers on the last stage for an uneven split.",
                                                       type="int", min=0, max=MAX_LAYERS,
                                                       flag="--decoder-last-pipeline-num-layers")
    account_for_embedding_in_pipeline_split: bool = _f(
        False, "Count the embedding as one layer slot of the split: num_layers + 1 (+ 1 with the loss slot) "
        "slots are spread evenly over every stage and virtual chunk, and the first chunk of stage 0 builds one "
        "decoder layer fewer (Llama-3.1-405B: 126 + 2 slots over PP 8).", type="bool",
        flag="--account-for-embedding-in-pipeline-split")
    account_for_loss_in_pipeline_split: bool = _f(
        False, "Count the loss (final norm and output layer) as one layer slot: the last chunk of the last stage "
        "builds one decoder layer fewer.", type="bool", flag="--account-for-loss-in-pipeline-split")
    pipeline_model_parallel_layout: str | None = _f(
        None, "Megatron-Core's layout string, every chunk listed: E embedding, t decoder layer, m MTP layer, L loss, "
        "| ends a chunk, (...)*n and x*n repeat, commas ignored; chunk k is virtual stage k // PP of stage k % PP, "
        "e.g. DeepSeek-V3's Et|(tt|)*30mL over PP 8 x VPP 4. m in a stage before the last is a standalone MTP "
        "stage. Excludes the uneven first/last and account_for options.", type="str",
        derived="the even split, or the one those options give", flag="--pipeline-model-parallel-layout")
    microbatch_group_size_per_vp_stage: int | None = _f(
        None, "Interleaved schedule: micro-batches run through one virtual stage in a row before the next; "
        "between pipeline_model_parallel_size and the number of micro-batches. Larger groups keep more "
        "micro-batches in flight: warm-up = 2 (PP - rank - 1) + (VPP - 1) x group.", type="int", min=1,
        max=MAX_BATCH,
        derived="pipeline_model_parallel_size (Megatron's depth-first default)",
        flag="--microbatch-group-size-per-virtual-pipeline-stage")
    use_megatron_fsdp: bool = _f(False, "Megatron-FSDP (v1): weights, gradients and optimizer states held in "
                                 "data-parallel buffers sharded as data_parallel_sharding_strategy says; each "
                                 "transformer layer is an FSDP unit gathered when it runs.", type="bool",
                                 flag="--use-megatron-fsdp")
    use_torch_fsdp2: bool = _f(False, "PyTorch FSDP2 (fully_shard on every transformer layer, the embedding and the "
                               "output layer): weights, gradients and optimizer states sharded over the data x "
                               "context-parallel ranks.", type="bool", flag="--use-torch-fsdp2")
    data_parallel_sharding_strategy: str = _f("optim_grads_params", "What Megatron-FSDP shards over the data x "
                                              "context-parallel ranks: no_shard (nothing, like DDP), optim (optimizer "
                                              "states, ZeRO-1), optim_grads (and gradients, ZeRO-2), "
                                              "optim_grads_params (and weights, ZeRO-3).", type="str",
                                              choices=("no_shard", "optim", "optim_grads", "optim_grads_params"),
                                              flag="--data-parallel-sharding-strategy")
    outer_dp_sharding_strategy: str = _f("no_shard", "With Megatron-FSDP and num_distributed_optimizer_instances > "
                                         "1 (HSDP): no_shard replicates over the outer data-parallel groups, optim "
                                         "also shards the optimizer states over them (needs optim_grads_params).",
                                         type="str", choices=("no_shard", "optim"),
                                         flag="--outer-dp-sharding-strategy")
    num_distributed_optimizer_instances: int = _f(1, "Copies of the distributed optimizer over the data-parallel "
                                                  "ranks: states are sharded over data x context-parallel / this "
                                                  "many ranks (partial distributed optimizer); with Megatron-FSDP it "
                                                  "is the outer (replicated) size of HSDP.", type="int", min=1,
                                                  max=65536, flag="--num-distributed-optimizer-instances")
    fsdp_double_buffer: bool = _f(False, "Megatron-FSDP: two persistent unit-sized buffers for gathered weights and "
                                  "two for unsharded gradients, instead of allocating per unit (forced on by "
                                  "nccl_ub).", type="bool", flag="--fsdp-double-buffer")
    suggested_communication_unit_size: int | None = _f(None, "Megatron-FSDP's communication unit (elements): it "
                                                       "prefetches gathered weights up to half of it and lets "
                                                       "unsharded gradients wait for their reduce-scatter up to it.",
                                                       type="int", min=1, max=10 ** 13,
                                                       derived="max(1e9, 2 x the elements of an average layer)",
                                                       flag="--suggested-communication-unit-size")
    torch_fsdp2_reshard_after_forward: bool = _f(True, "PyTorch FSDP2: free each layer's gathered weights after its "
                                                 "forward (false keeps every layer gathered until its backward, "
                                                 "--torch-fsdp2-no-reshard-after-forward).", type="bool")
    tp_comm_overlap: bool = _f(False, "Transformer Engine's tensor-parallel communication overlap: twelve "
                               "userbuffers of [seq_length x micro_batch_size / CP, hidden_size] registered outside "
                               "PyTorch's allocator (needs sequence parallelism and bf16 or fp16 weights), and a "
                               "cuBLAS workspace of 3 x 32 MiB for the overlapped GEMMs.", type="bool",
                               flag="--tp-comm-overlap")
    tp_comm_overlap_cfg: str | None = _f(
        None, "Transformer Engine's userbuffer configuration with tp_comm_overlap: the name of one of Megatron-"
        "Bridge's published configurations (userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192, ...; "
        "training/comm_overlap.py), or the YAML of a Megatron-LM --tp-comm-overlap-cfg file: GEMM name "
        "(qkv_fprop, qkv_dgrad, qkv_wgrad, proj_fprop, ..., fc2_wgrad) -> its settings (method: ring_exchange, "
        "pipeline, bulk or external; fp8_buf, atomic_gemm, num_sm, ...). Only the method, fp8_buf, "
        "is_reduce_scatter and atomic_gemm change memory: a ring-exchange reduce-scatter holds 2 TP - 1 chunks of "
        "[S/TP, h] instead of [S, h].", type="str",
        derived="Transformer Engine's defaults (ring_exchange qkv/fc1 fprop and proj/fc2 dgrad, pipeline proj/fc2 "
        "fprop, bulk qkv/fc1 dgrad and wgrad, external proj/fc2 wgrad)")
    nccl_ub: bool = _f(False, "Register the data-parallel gradient and parameter buffers with NCCL (user buffers): "
                       "they are allocated in NCCL's own memory pool; with Megatron-FSDP it turns on "
                       "fsdp_double_buffer.", type="bool", cli="--use-nccl-ub", flag="--use-nccl-ub")
    # ---- flagsB28: Megatron-LM flags and Bridge fields that were refused (issue 28 item 7) ----
    create_all_gather_group: bool = _f(False, "A second data x context-parallel communicator (and, with expert "
                                       "parallelism, a second expert-data-parallel one) for Megatron-FSDP's weight "
                                       "all-gathers, so they overlap the gradient reduce-scatters "
                                       "(--create-all-gather-group): one more NCCL communicator per group of more "
                                       "than one rank; without Megatron-FSDP the groups are never used and NCCL "
                                       "never sets them up.", type="bool", flag="--create-all-gather-group")
    keep_fp8_transpose_cache: bool = _f(False, "Megatron-FSDP with FP8 weights (fp8_param_gather, ZeRO-3): keep "
                                        "every FP8 weight's transposed (column-wise) copy for the whole run instead "
                                        "of dropping it when the unit is resharded (--keep-fp8-transpose-cache): 1 B "
                                        "per linear weight element, unsharded, where the recipe has such a copy "
                                        "(delayed and tensorwise on Hopper, blockwise).", type="bool",
                                        flag="--keep-fp8-transpose-cache")
    megatron_fsdp_cuda_graph_mode: bool = _f(False, "Megatron-FSDP keeps the optimizer's gradient shards between "
                                             "steps so a CUDA graph can replay them (Megatron-Bridge's "
                                             "ddp.megatron_fsdp_cuda_graph_mode; Megatron-LM has no flag): where "
                                             "the shard is a copy cast to the master weights' dtype (no "
                                             "precision-aware optimizer, gradients not in that dtype) the copy is "
                                             "held all run, master bytes per parameter of the shard.", type="bool")
    reduce_scatter_with_fp32_accumulation: bool = _f(False, "The distributed optimizer's gradient reduce-scatter as "
                                                     "an all-to-all in the gradient dtype with fp32 sums "
                                                     "(--ddp-reduce-scatter-with-fp32-accumulation): after the "
                                                     "backward pass, per buffer, a receive copy of the whole "
                                                     "buffer and the fp32 sum of its shard; only without "
                                                     "overlap_grad_reduce (one bucket per buffer).", type="bool",
                                                     flag="--ddp-reduce-scatter-with-fp32-accumulation")
    fp32_local_grad_accumulation: bool = _f(False, "Accumulate every parameter's gradient in its own fp32 tensor "
                                            "beside a bf16 gradient buffer (Megatron-LM's "
                                            "--ddp-param-name-patterns-for-fp32-local-accumulation all, DDP's "
                                            "param_name_patterns_for_fp32_local_accumulation: ['all']): 4 B more "
                                            "per parameter, held for the whole run; only with "
                                            "grad_reduce_in_fp32 off (other name patterns are refused).",
                                            type="bool")
    # ---- gtp29: generalised tensor parallelism's weight sharding (GTP_remat; issue 28 item 7) ----
    tensor_parallel_num_weight_shards: int | None = _f(
        None, "Generalised tensor parallelism (GTP): the shards each dense linear weight (QKV, projection, MLP, "
        "shared experts, Mamba projections, embedding, output layer) is split into over the tensor-parallel and "
        "GTP_remat ranks. GTP_remat = this / tensor_model_parallel_size ranks each hold 1/GTP_remat of the TP "
        "slice (its rows), with its gradient and optimizer state, and all-gather it before every use into a "
        "buffer kept for the run; they take distinct micro-batches, so the data-parallel size (world / (TP x PP x "
        "CP)) counts them and must be divisible by GTP_remat. Must be a multiple of tensor_model_parallel_size.",
        type="int", min=1, max=MAX_GPUS, derived="tensor_model_parallel_size (no GTP)",
        flag="--tensor-parallel-num-weight-shards")
    expert_tensor_parallel_num_weight_shards: int | None = _f(
        None, "GTP for the routed experts: the shards each expert weight is split into over the expert-tensor-"
        "parallel and expert GTP_remat ranks (EGTP_remat = this / expert_tensor_parallel_size, a factor of the "
        "expert-data-parallel size). Must be a multiple of expert_tensor_parallel_size.", type="int", min=1,
        max=MAX_GPUS, derived="expert_tensor_parallel_size (no expert GTP)",
        flag="--expert-tensor-parallel-num-weight-shards")
    gtp_remat_opt_in_modules: list[str] | None = _f(
        None, "Modules GTP shards beyond its defaults: moe_latent_proj shards the MoE latent projections "
        "(fc1_latent_proj, fc2_latent_proj), which otherwise stay whole on every GTP_remat rank.", type="str_list",
        choices=("moe_latent_proj",), derived="[] (none)", flag="--gtp-remat-opt-in-modules")
    gtp_remat_reduce_scatter_with_fp32_accumulation: bool = _f(
        False, "GTP's weight-gradient reduce-scatter as an all-to-all with fp32 sums on GTP_remat groups of more "
        "than 2 ranks: one more unsharded weight-gradient buffer per weight shape in GTP's pool.", type="bool",
        flag="--gtp-remat-reduce-scatter-with-fp32-accumulation")
    gtp_remat_nccl_ub: bool = _f(
        False, "GTP: the dense weights' gradient reduce-scatter send buffers come from an NCCL-registered "
        "(symmetric) memory pool of their own, padded to the gathered shape, instead of GTP's plain pool.",
        type="bool", flag="--gtp-remat-nccl-ub")
    gtp_expert_remat_nccl_ub: bool = _f(
        False, "As gtp_remat_nccl_ub, for the routed experts' expert GTP_remat group.", type="bool",
        flag="--gtp-expert-remat-nccl-ub")


@dataclass(frozen=True)
class TrainingConfig:
    """Batch, sequence, optimizer sharding and activation recomputation."""

    micro_batch_size: int = _f(1, "Sequences per GPU per forward pass (b).", type="int", min=1, max=MAX_MICRO_BATCH,
                               cli="--mbs",
                               unit="sequences", flag="--micro-batch-size")
    global_batch_size: int | None = _f(None, "Sequences per optimizer step; sets the number of micro-batches "
                                       "m = global_batch_size / (micro_batch_size x data-parallel size).",
                                       type="int", min=1, max=MAX_BATCH, cli="--gbs", unit="sequences",
                                       derived="enough micro-batches to fill the pipeline",
                                       flag="--global-batch-size")
    seq_length: int | None = _f(None, "Training sequence length s. With flash or fused attention activation "
                                "memory grows linearly with s, not quadratically.", type="int", min=1, max=MAX_TOKENS,
                                unit="tokens", derived="max_position_embeddings", flag="--seq-length")
    world_size: int = _f(REQUIRED, "Total number of GPUs.", type="int", required=True, min=1, max=MAX_GPUS,
                         cli="--num-gpus",
                         unit="GPUs")
    use_distributed_optimizer: bool = _f(True, "Shard fp32 master weights and Adam states over the data-"
                                         "parallel (x context-parallel) ranks: 18 -> 6 + 12/d bytes per "
                                         "parameter with bf16 weights and fp32 gradients.", type="bool",
                                         flag="--use-distributed-optimizer")
    sequence_parallel: bool = _f(False, "Shard norms, dropout and residual activations over the TP ranks "
                                 "(needs tensor_model_parallel_size > 1).", type="bool",
                                 flag="--sequence-parallel")
    recompute_granularity: str | None = _f(None, "Activation recomputation: null (none), selective (the "
                                           "modules in recompute_modules) or full (whole layers).", type="str",
                                           choices=("selective", "full"), flag="--recompute-granularity")
    recompute_method: str | None = _f(None, "With full recompute: uniform (groups of recompute_num_layers "
                                      "layers keep only their input) or block (the first recompute_num_layers "
                                      "layers of each pipeline stage are recomputed, the rest keep "
                                      "everything).", type="str", choices=("uniform", "block"),
                                      flag="--recompute-method")
    recompute_num_layers: int | None = _f(None, "With full recompute: the group size (uniform) or the number "
                                          "of recomputed layers per stage (block). Not the number of layers "
                                          "kept.", type="int", min=0, max=MAX_LAYERS, derived="1 with full recompute",
                                          flag="--recompute-num-layers")
    mhc_recompute_layer_num: int | None = _f(None, "With the mhc recompute module: layers per mHC recompute group. "
                                             "Each group discards its hyper-connections' streams and replays "
                                             "them all at once when its backward pass starts, keeping only the "
                                             "streams between groups. Null: one group per pipeline chunk.",
                                             type="int", min=1, max=MAX_LAYERS,
                                             derived="every layer of the chunk")
    recompute_modules: list[str] | None = _f(None, "With selective recompute: the modules recomputed "
                                             "(core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, "
                                             "shared_experts; mhc: the hyper-connections' streams and the norms "
                                             "after them, with enable_hyper_connections).", type="str_list",
                                             choices=("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp",
                                                      "moe", "shared_experts", "mhc"),
                                             derived="[core_attn] with selective recompute when null; an "
                                             "explicit [] recomputes nothing, as Megatron-Core keeps it (a "
                                             "Megatron-Bridge recipe can set it)",
                                             flag="--recompute-modules")
    distribute_saved_activations: bool = _f(
        False, "With full recompute: each checkpoint keeps only this rank's 1/TP of the layer input it saves, "
        "gathered back before the layer is recomputed. Needs tensor_model_parallel_size > 1 and full recompute "
        "with a recompute_method, and sequence_parallel off (Megatron-Core).", type="bool",
        flag="--distribute-saved-activations")
    attention_backend: str = _f("auto", "Attention kernel: flash, fused (cuDNN) and auto keep no s x s "
                                "score matrix; unfused (and local) materialise it.", type="str",
                                choices=("auto", "flash", "fused", "unfused", "local"), flag="--attention-backend")
    cross_entropy_loss_fusion: bool = _f(False, "Fused cross-entropy. native (torch.compile) keeps the fp32 "
                                         "softmax, as the unfused loss does, and one more fp32 buffer of the "
                                         "logits' size while it runs; te keeps an fp32 gradient of the logits' "
                                         "size instead of the softmax, the unfused loss's bytes (Transformer Engine "
                                         "2.18 and later; before, only the bf16 logits: see precision."
                                         "transformer_engine_version).", type="bool",
                                         flag="--cross-entropy-loss-fusion")
    cross_entropy_fusion_impl: str = _f("native", "Implementation of the fused cross-entropy.", type="str",
                                        choices=("native", "te"), flag="--cross-entropy-fusion-impl")
    transformer_impl: str = _f("transformer_engine", "Layer implementation. Transformer Engine keeps one "
                               "cached dummy weight-gradient tensor per distinct weight shape.", type="str",
                               choices=("transformer_engine", "local"), flag="--transformer-impl")
    transformer_engine_full_layer_spec: bool = _f(False, "Megatron-Bridge's use_transformer_engine_full_layer_spec: "
                                                  "each decoder layer is Transformer Engine's own TransformerLayer "
                                                  "(Bridge's TETransformerLayerAutocast) instead of Megatron-Core's "
                                                  "layer of TE modules. No effect on memory: it builds the same "
                                                  "fused LayerNorm-linears, attention and GELU MLP, which save the "
                                                  "same tensors. Accepted only for the layer it builds (LayerNorm, "
                                                  "GELU not gated, biases, multi-head attention, no MoE) without "
                                                  "selective recompute, FP8 or CUDA graphs.", type="bool")
    gradient_accumulation_fusion: bool = _f(True, "Accumulate weight gradients straight into the fp32 "
                                            "main_grad buffer.", type="bool",
                                            flag="--gradient-accumulation-fusion")
    masked_softmax_fusion: bool = _f(True, "Megatron's fused scale-mask-softmax kernel in the local implementation's "
                                     "unfused attention (used for bf16/fp16 scores with 16 < s <= 4096); without it "
                                     "(--no-masked-softmax-fusion, or outside those sizes) PyTorch masks the scores in "
                                     "place and autograd's CopySlices holds four b x a x s x s tensors in the "
                                     "attention backward instead of one.", type="bool",
                                     flag="--no-masked-softmax-fusion")
    create_attention_mask_in_dataloader: bool = _f(True, "The dataloader builds a b x s x s boolean causal mask per "
                                                   "micro-batch, which the local implementation's unfused attention "
                                                   "keeps for the backward pass on the first and last pipeline stage; "
                                                   "without it (--no-create-attention-mask-in-dataloader), and on "
                                                   "other stages, every layer builds an s x s mask and keeps it.",
                                                   type="bool", flag="--no-create-attention-mask-in-dataloader")
    optimizer_implementation: str = _f("te_fused", "Which Adam runs. Megatron-Core has no flag for it: it imports "
                                       "Transformer Engine's FusedAdam if Transformer Engine is installed (always with "
                                       "transformer_engine layers), else Apex's FusedAdam, else falls back to "
                                       "torch.optim.AdamW. The fused ones update in place; PyTorch's foreach AdamW "
                                       "allocates 4 B per parameter during the optimizer step, which can then hold "
                                       "the iteration's peak.", type="str", choices=("te_fused", "apex_fused", "torch"))
    deterministic_mode: bool = _f(False, "Megatron's --deterministic-mode (torch.use_deterministic_algorithms): "
                                  "the unfused MoE unpermute then adds the rows back with index_add_, whose "
                                  "autograd node keeps its source (one row-sized tensor per MoE layer) for the "
                                  "backward pass; scatter_add_ keeps only its indices. It also sets "
                                  "CUBLAS_WORKSPACE_CONFIG=:4096:8 when cublas_workspace_config is empty: 32 MiB "
                                  "cuBLAS workspaces on every GPU (PyTorch's default is that from Hopper on).", type="bool",
                                  flag="--deterministic-mode")
    cublas_workspace_config: str = _f("", "The run's CUBLAS_WORKSPACE_CONFIG environment variable: the size of "
                                      "PyTorch's cuBLAS workspace, one per cuBLAS handle and stream (two in a "
                                      "training step, two more for a whole-iteration CUDA graph's capture), SIZE "
                                      "KiB x COUNT summed over its :SIZE:COUNT pairs. :4096:8 is 32 MiB and :16:8 "
                                      "128 KiB, the two settings NVIDIA documents as deterministic (deterministic_mode "
                                      "accepts only these). Empty: PyTorch's default, 32 MiB on Hopper and Blackwell "
                                      "(sm_90 to sm_121), 8 MiB + 128 KiB on A100 and L40S, 128 MiB on AMD gfx942/"
                                      "gfx950; deterministic_mode sets :4096:8 when it is empty. PyTorch 2.10 and older "
                                      "(NGC containers before 26.04) gave Blackwell 8 MiB + 128 KiB: say :4096:2:16:8 "
                                      "for such a run. Read from a launch line's environment by the Megatron-LM "
                                      "importer.", type="str",
                                      cli="--cublas-workspace-config")
    gpu_arch: str | None = _f(None, "GPU architecture (CUDA compute capability sm_XY, or the AMD gfx target), "
                              "which decides what Transformer Engine and PyTorch allocate: on sm_100 and sm_103 "
                              "(B200, GB200, B300) FP8 with delayed or tensorwise scaling keeps no transposed copy of "
                              "the weights (1 B per linear weight instead of 2 B); before sm_90 (A100, L40S) the "
                              "GEMM workspaces are smaller; fp8_recipe mxfp8 needs sm_100 or sm_103 and fp4 sm_100 or newer. Naming "
                              "the GPU (--gpu, the calculator's GPU) sets it; give it for a custom GPU capacity.",
                              type="str", choices=GPU_ARCHS,
                              derived="the named GPU's; with none named sm_90 (Hopper), or sm_100 (Blackwell) for "
                              "fp8_recipe mxfp8 and fp4, which run only there")
    overlap_grad_reduce: bool = _f(False, "Overlap the gradient reduce-scatter with the backward pass. No effect "
                                   "on memory (it works in the existing buffers); the layout search counts it "
                                   "in the step time.", type="bool", flag="--overlap-grad-reduce")
    overlap_param_gather: bool = _f(False, "Overlap the parameter all-gather with the forward pass. No effect "
                                    "on memory (it works in the existing buffers).", type="bool",
                                    flag="--overlap-param-gather")
    optimizer: str = _f("adam", "Optimizer: adam (fp32 master + two moments), sgd (fp32 master + one momentum "
                        "buffer when sgd_momentum > 0) or muon (fp32 master + one momentum for the 2-D linear "
                        "weights, Adam for embeddings, output layer, norms and biases). With the distributed "
                        "optimizer Muon's states are sharded layer-wise over the data-parallel ranks (Megatron-Core's "
                        "LayerWiseDistributedOptimizer, Megatron-Bridge's dist_muon).", type="str",
                        choices=("adam", "sgd", "muon"), flag="--optimizer")
    sgd_momentum: float = _f(0.9, "SGD momentum; 0 keeps no momentum buffer.", type="float", min=0.0, max=1.0,
                             flag="--sgd-momentum")
    use_layer_wise_param_layout: bool = _f(True, "Muon with the distributed optimizer: true (Megatron-LM's default) "
                                           "gives the Muon matrices a shard-aligned buffer layout and shards the "
                                           "other parameters byte-wise, about evenly; false "
                                           "(--no-use-layer-wise-param-layout) hands whole tensors to the "
                                           "data-parallel ranks in ping-pong order of size, so one rank holds the "
                                           "largest tensor (usually the embedding) whole.", type="bool")
    muon_fp32_matmul_prec: str = _f("medium", "Muon: PyTorch's fp32 matmul precision for the Newton-Schulz "
                                     "iterations. medium (Megatron-LM's default) runs them on bf16 copies; high "
                                     "(Megatron-LM's flag) and highest (Megatron-Bridge's DeepSeek-V4 recipes) keep "
                                     "the iterates in fp32, which doubles their bytes in the optimizer step. low "
                                     "(accepted by Megatron-LM's flag) is not a PyTorch precision: PyTorch ignores it "
                                     "with a warning and the iterations run at the process's precision, PyTorch's "
                                     "default highest (Megatron-LM does not change it), so fp32 as well.",
                                     type="str", choices=("medium", "high", "highest", "low"),
                                     flag="--muon-fp32-matmul-prec")
    muon_tp_mode: str = _f("duplicated", "Muon: how a tensor-parallel matrix is orthogonalized in the optimizer "
                           "step. duplicated (Megatron-LM's default) all-gathers the momentum over the "
                           "tensor-parallel group and orthogonalizes the whole matrix on every rank; blockwise "
                           "orthogonalizes each rank's shard alone (no gather, even at TP 1); distributed keeps "
                           "the shard and all-reduces the Gram matrix of its unsharded side.", type="str",
                           choices=("duplicated", "blockwise", "distributed"), flag="--muon-tp-mode")
    muon_nesterov: bool = _f(False, "Muon: Nesterov momentum. The step then orthogonalizes a new fp32 mix of the "
                             "gradient and the momentum (4 B per element of the matrix being stepped) instead of "
                             "the momentum itself; no state is added.", type="bool", flag="--muon-nesterov")
    muon_split_qkv: bool = _f(True, "Muon: orthogonalize the fused QKV weight in its query, (gate,) key and value "
                              "blocks (Megatron-LM's default); false (--muon-no-split-qkv) orthogonalizes it "
                              "whole.", type="bool")
    optimizer_cpu_offload: bool = _f(False, "Run the optimizer step of a fraction of the parameters on the CPU "
                                     "(Megatron-Core HybridDeviceOptimizer): their fp32 master weights, gradients "
                                     "and Adam states live in host memory (needs the precision-aware optimizer).",
                                     type="bool", flag="--optimizer-cpu-offload")
    optimizer_offload_fraction: float = _f(1.0, "Fraction of the optimizer's parameters (by element count) "
                                           "offloaded to the CPU; whole tensors move, in the optimizer's order, "
                                           "until the fraction is reached.", type="float", min=0.0, max=1.0,
                                           flag="--optimizer-offload-fraction")
    cpu_offloading: bool = _f(False, "Layer-wise activation offloading (Transformer Engine's CPU offload context): "
                              "the activations of the first cpu_offloading_num_layers layers move to pinned host "
                              "memory during the forward pass. Megatron-LM sets it when "
                              "cpu_offloading_num_layers > 0.", type="bool")
    cpu_offloading_num_layers: int = _f(0, "Layers whose activations are offloaded with cpu_offloading (fewer than "
                                        "num_layers; no pipeline parallelism, no recompute).", type="int", min=0,
                                        max=100000, flag="--cpu-offloading-num-layers")
    fine_grained_activation_offloading: bool = _f(
        False, "Megatron-Core's fine-grained activation offloading: the tensors the modules in offload_modules save "
        "for the backward pass go to pinned host memory at the end of each module's forward and come back one "
        "group ahead in the backward pass; the last layer's groups of the first backward chunk stay (the offload "
        "margin). The estimate carries its own error band (estimator/memory/features/offload.py).", type="bool",
        flag="--fine-grained-activation-offloading")
    offload_modules: list[str] | None = _f(
        None, "With fine_grained_activation_offloading: the modules whose saved tensors are offloaded, one group "
        "per module and layer (attn_norm: the attention norm's input where the norm is its own module, as with "
        "MLA; qkv_linear: the QKV projection, MLA's down/up projections; core_attn: the core attention, the s x s "
        "probabilities of unfused attention; attn_proj: the output projection's input; mlp_norm: an MoE layer's "
        "pre-MLP norm input; expert_fc1: the routed experts' fc1 input; moe_act: their activation's input). "
        "fused_group_mlp and gdp_qkv are not modelled.", type="str_list",
        choices=("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
                 "fused_group_mlp", "gdp_qkv"), flag="--offload-modules")
    min_offloaded_tensor_size: int = _f(
        1048576, "With fine_grained_activation_offloading: saved tensors of fewer elements than this stay on the "
        "GPU (elements, not bytes; Megatron-Core's default 1024 x 1024).", type="int", unit="elements", min=0,
        max=10**15, flag="--min-offloaded-tensor-size")
    activation_offload_fraction: float = _f(
        1.0, "With fine_grained_activation_offloading: the fraction of each model chunk's offloadable groups that "
        "is offloaded; the later groups of the chunk (int(n x (1 - fraction)) of them) stay on the GPU.",
        type="float", min=0.0, max=1.0, flag="--activation-offload-fraction")
    delta_offload_bytes_across_pp_ranks: int = _f(
        0, "With fine_grained_activation_offloading: pipeline rank p keeps p x this many bytes of groups on the "
        "GPU (whole groups, from the first model chunks to run their backward pass), to even out memory across "
        "the pipeline ranks.", type="int", unit="bytes", min=0, max=10**15,
        flag="--delta-offload-bytes-across-pp-ranks")
    use_transformer_engine_op_fuser: bool = _f(
        False, "Run the routed experts through Transformer Engine's operation fuser (Megatron-Core's TEGroupedMLP "
        "fused path). With an mxfp8 FP8 recipe and grouped GEMM it is TE's fused grouped MLP, the one whose saved "
        "tensors moe_paged_stash pages; otherwise the estimate keeps the same tensors as without it.", type="bool",
        flag="--use-transformer-engine-op-fuser")
    moe_paged_stash: bool = _f(
        False, "Paged stash of the routed experts' saved tensors (Megatron-Core moe/paged_stash.py; needs "
        "moe_expert_rank_capacity_factor). Each MoE layer's fc1 input, activation input and fc2 input, kept at "
        "the static budget's rows, are packed page by page (only the rows received) into one GPU buffer per dtype "
        "and width, sized once from the first step's average rows in flight x "
        "moe_paged_stash_buffer_size_factor_cuda, plus a pinned host buffer x ..._cpu for what does not fit; "
        "they come back one layer at a time in the backward pass. Acts only where Transformer Engine's fused "
        "grouped MLP runs (use_transformer_engine_op_fuser, fp8_recipe mxfp8, moe_grouped_gemm; at run time also "
        "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 and a compute-capability-10 GPU, B200 / GB200 / B300 / GB300, which the "
        "estimate assumes); a step that overflows both buffers is rerun without it.", type="bool", flag="--moe-paged-stash")
    moe_paged_stash_page_size: int = _f(64, "Token rows per page of the paged stash: each buffer holds a whole "
                                        "number of pages.", type="int", unit="tokens", min=1, max=MAX_TOKENS,
                                        flag="--moe-paged-stash-page-size")
    moe_paged_stash_buffer_size_factor_cuda: float = _f(
        1.10, "Size of the paged stash's GPU buffer: positive, this x the rows the first step holds in flight at "
        "balanced load (the budget / moe_expert_rank_capacity_factor per layer and micro-batch); negative, |this| "
        "x the rows actually received (training.moe_overload_factor's).", type="float", min=-1e4, max=1e4,
        flag="--moe-paged-stash-buffer-size-factor-cuda")
    moe_paged_stash_buffer_size_factor_cpu: float = _f(
        0.0, "Size of the paged stash's pinned host buffer, taking the rows the GPU buffer cannot: same sign "
        "convention as moe_paged_stash_buffer_size_factor_cuda; 0 allocates none.", type="float", min=-1e4,
        max=1e4, flag="--moe-paged-stash-buffer-size-factor-cpu")
    cuda_graph_impl: str = _f("none", "CUDA graphs: local (Megatron-Core's CudaGraphManager) and transformer_engine "
                              "(TE make_graphed_callables) capture each layer (or the modules in cuda_graph_modules); "
                              "full_iteration captures the whole forward-backward step.", type="str",
                              choices=("none", "local", "transformer_engine", "full_iteration"),
                              flag="--cuda-graph-impl")
    cuda_graph_modules: list[str] | None = _f(None, "Parts of each layer captured by the per-layer CUDA graphs: "
                                              "attn, mlp (dense layers), moe (whole MoE block, drop-and-pad only), "
                                              "moe_router, moe_preprocess, mamba (a hybrid model's Mamba layers, "
                                              "whole). Megatron-Bridge calls it cuda_graph_scope.", type="str_list",
                                              choices=("attn", "mlp", "moe", "moe_router", "moe_preprocess",
                                                       "mamba"),
                                              derived="the whole layer", flag="--cuda-graph-modules")
    cuda_graph_warmup_steps: int = _f(3, "Eager training steps before the CUDA graphs are captured. With 0 the "
                                      "capture comes first, before the optimizer's first step; otherwise the "
                                      "eager steps' peak counts too.", type="int", unit="steps", min=0,
                                      max=MAX_BATCH, flag="--cuda-graph-warmup-steps")
    # ---- flagsB28: the optimizer step's CUDA graph (issue 28 item 7) ----
    optimizer_cuda_graph: bool = _f(False, "Capture the optimizer step in a CUDA graph at training step "
                                    "cuda_graph_warmup_steps (--optimizer-cuda-graph; Adam, made capturable): its "
                                    "working set (fp32 gradient copies, norms, the parameter copies) stays reserved "
                                    "in the graph's private pool beside the forward/backward pass, so the device "
                                    "figure holds both phases' working sets.", type="bool",
                                    flag="--optimizer-cuda-graph")
    reserved_memory_model: str = _f("fraction", "How the reserved memory (torch.cuda.max_memory_reserved) is "
                                    "estimated. fraction: allocated x 1.05. replay: one training step per stage "
                                    "replayed tensor by tensor through a simulation of PyTorch's caching allocator "
                                    "under pytorch_cuda_alloc_conf (the methodology page gives both models' errors on "
                                    "the project's GPU runs: the replay is closer on them, lower than fraction on "
                                    "multi-GPU Transformer Engine runs; 5-75 ms per estimate). The layout search "
                                    "ranks with fraction either way.", type="str", choices=("fraction", "replay"))
    pytorch_cuda_alloc_conf: str = _f("", "The run's PYTORCH_CUDA_ALLOC_CONF environment variable (key:value pairs "
                                      "separated by commas, e.g. expandable_segments:True, which Megatron-Bridge's "
                                      "recipes set): how PyTorch's caching allocator cuts and caches segments, so "
                                      "the reserved memory. Empty is PyTorch's default. Read from a launch line's "
                                      "environment by the Megatron-LM importer. Used by reserved_memory_model replay.", type="str",
                                      cli="--pytorch-cuda-alloc-conf")
    empty_unused_memory_level: int = _f(0, "When Megatron's training step calls torch.cuda.empty_cache() "
                                        "(--empty-unused-memory-level; Megatron-Bridge's "
                                        "train.empty_unused_memory_level). 0: never. 1: after the forward-backward "
                                        "passes, before the optimizer step. 2: after the optimizer step too. It "
                                        "gives cached blocks back to the driver: reserved memory, never allocated. "
                                        "Used by reserved_memory_model replay.", type="int", min=0, max=2,
                                        flag="--empty-unused-memory-level")
    eval_interval: int | None = _f(None, "Iterations between evaluations (Megatron-LM's --eval-interval). When set "
                                   "(and eval_iters > 0) the evaluation's forward-only steps count as a phase of the "
                                   "run: model states, the optimizer step's fp32 gradient copies still alive, and "
                                   "one layer's forward. None: no evaluation during training.", type="int", min=1,
                                   max=MAX_BATCH, unit="iterations", flag="--eval-interval")
    eval_iters: int = _f(100, "Forward-only iterations per evaluation (Megatron-LM's --eval-iters); 0 turns "
                         "evaluation off. Their number does not change memory.", type="int", min=0, max=MAX_BATCH,
                         unit="iterations", flag="--eval-iters")
    eval_micro_batch_size: int | None = _f(None, "Sequences per GPU per forward pass of evaluation (Megatron-LM's "
                                           "--eval-micro-batch-size); its forward holds that many sequences' "
                                           "tensors. None: micro_batch_size, as in Megatron-LM.", type="int", min=1,
                                           max=MAX_MICRO_BATCH, unit="sequences", flag="--eval-micro-batch-size",
                                           derived="micro_batch_size")
    save_interval: int | None = _f(None, "Iterations between checkpoint saves (Megatron-LM's --save-interval). When "
                                   "set, saving and loading a checkpoint count as phases of the run (what "
                                   "ckpt_format's state-dict preparation adds on the GPU). None: no checkpoints.",
                                   type="int", min=1, max=MAX_BATCH, unit="iterations", flag="--save-interval")
    ckpt_format: str = _f("torch_dist", "Checkpoint format (Megatron-LM's --ckpt-format). torch_dist, torch_dcp and "
                          "fsdp_dtensor build the whole sharded state dict before writing (with the precision-aware "
                          "optimizer, an fp32 copy of every non-fp32 optimizer state); torch (legacy) gathers the "
                          "distributed optimizer's state through CPU buffers, one bucket at a time. --async-save "
                          "changes nothing on the GPU (the tensors reach pinned host memory before training "
                          "resumes).", type="str",
                          choices=("torch_dist", "torch_dcp", "fsdp_dtensor", "torch"), flag="--ckpt-format")
    # RL training with the Megatron backend (verl, NeMo-RL, slime): the training side of one RL step as phases
    # (estimator/memory/phases.py, "RL training" in docs/methodology.md). Inert while rl_algorithm is "none".
    rl_algorithm: str = _f("none", "Reinforcement-learning step around the training step (verl, NeMo-RL or slime "
                           "with the Megatron backend): ppo or grpo adds the phases of one RL step beside the "
                           "policy update (a normal training step with the RL loss): the actor's and the reference "
                           "model's log-probability passes (forward only, with their full-vocabulary logits) and "
                           "the rollout, while the inference engine holds the GPU. The actor side only: a PPO "
                           "critic or reward model on the same GPUs is not counted. none: plain training.",
                           type="str", choices=("none", "ppo", "grpo"), cli="--rl-algorithm")
    rl_reference_model: str = _f("none", "The reference policy of a KL penalty or KL loss: none; resident (its own "
                                 "weights stay on the GPU all step: verl with ref param_offload false); offloaded "
                                 "(its own weights come to the GPU only for its log-probability pass: verl with ref "
                                 "param_offload true); swapped (its weights, kept in host memory, are copied into "
                                 "the actor's own parameters for that pass: NeMo-RL's use_reference_model, slime's "
                                 "--ref-load): no second set of weights on the GPU.", type="str",
                                 choices=("none", "resident", "offloaded", "swapped"), cli="--rl-reference-model")
    rl_logprob_micro_batch_size: int | None = _f(None, "Sequences per GPU per forward pass of the log-probability "
                                                 "passes (verl's log_prob_micro_batch_size_per_gpu, NeMo-RL's "
                                                 "logprob_batch_size). None: micro_batch_size.", type="int", min=1,
                                                 max=MAX_MICRO_BATCH, unit="sequences", derived="micro_batch_size",
                                                 cli="--rl-logprob-micro-batch-size")
    rl_response_length: int | None = _f(None, "Tokens of the response in each sequence (verl's "
                                        "data.max_response_length); seq_length is prompt plus response. Sizes the "
                                        "per-token log-probabilities, advantages and masks kept for the batch. "
                                        "None: seq_length.", type="int", min=1, max=MAX_TOKENS, unit="tokens",
                                        derived="seq_length", cli="--rl-response-length")
    rl_entropy: bool = _f(False, "The policy update computes the per-token entropy (verl's entropy_coeff != 0): "
                          "verl's unfused path clones the logits and its entropy function keeps the logits and "
                          "their softmax for the backward pass.", type="bool", cli="--rl-entropy")
    rl_logprob_entropy: bool = _f(True, "The actor's log-probability pass computes the per-token entropy with the "
                                  "log-probs: verl does (compute_log_prob with calculate_entropy = not LoRA), cloning "
                                  "the logits and keeping the entropies of the batch beside the log-probs. False: "
                                  "log-probs only (a LoRA actor in verl). The reference model's pass never does.",
                                  type="bool", cli="--rl-logprob-entropy")
    rl_offload_params: bool = _f(False, "The actor's weights go to host memory while the rollout engine holds "
                                 "the GPU (verl's actor.megatron.param_offload; NeMo-RL's offload_after_refit and "
                                 "slime's colocated --offload-train move them always).", type="bool",
                                 cli="--rl-offload-params")
    rl_offload_grads: bool = _f(False, "The actor's gradient buffer goes to host memory during rollout and the "
                                "log-probability passes (verl's grad_offload; NeMo-RL's offload_before_refit and "
                                "slime's --offload-train always).", type="bool", cli="--rl-offload-grads")
    rl_offload_optimizer: bool = _f(False, "The actor's optimizer states (master weights, moments) go to host "
                                    "memory outside the policy update (verl's optimizer_offload; NeMo-RL's "
                                    "offload_optimizer_for_refit, slime's --offload-train).", type="bool",
                                    cli="--rl-offload-optimizer")
    rl_rollout_gpu_memory_fraction: float | None = _f(None, "Fraction of the GPU's memory the colocated rollout "
                                                      "engine takes while it generates (vLLM's gpu_memory_utilization, "
                                                      "verl's rollout.gpu_memory_utilization, SGLang's "
                                                      "mem_fraction_static): the rollout phase holds it beside what "
                                                      "the training side leaves resident. None: the rollout engine "
                                                      "is not colocated (no rollout phase).", type="float",
                                                      min=0.0, max=1.0, unit="fraction of GPU memory",
                                                      cli="--rl-rollout-gpu-memory-fraction")
    moe_overload_factor: float = _f(
        1.0, "MoE routing imbalance: the token rows the busiest expert-parallel rank's experts receive, as a "
        "multiple of their balanced share: Megatron-Core's overload factor, logged as moe/max_overload_factor "
        "by log_moe_overload_factor (Megatron-LM's dev branch, pull request #4110). 1.0 is balanced routing, as with --moe-router-force-load-balancing; "
        "real routing runs above it, most early in training (the methodology page gives measured values). It "
        "scales what that rank keeps per routed row (the dispatched tokens, the experts' inputs, fc1 outputs and "
        "activations, the expert output and its gradients), not the router's per-token tensors. At most "
        "expert_model_parallel_size x min(moe_router_topk, local experts) / moe_router_topk (1.0 with one "
        "expert-parallel rank), and max(1, moe_expert_capacity_factor) with token dropping, where padding to "
        "capacity leaves it no effect: a layout receives min(factor, that bound), said in the assumptions, so the "
        "search, the sweeps and \"Make it fit\" keep the factor across layouts. Megatron-LM has no flag for it.", type="float", unit="x balanced",
        min=1.0, max=float(MAX_EXPERTS))
    overlap_moe_expert_parallel_comm: bool = _f(False, "Overlap the expert-parallel all-to-all of one micro-batch "
                                                "with the computation of another (combined 1F1B): the same "
                                                "micro-batches in flight, plus one forward layer's attention and "
                                                "permuted tokens beside a backward layer and the gradients its "
                                                "callers hold.", type="bool",
                                                flag="--overlap-moe-expert-parallel-comm")
    delay_wgrad_compute: bool = _f(False, "Delay the weight-gradient GEMMs of the Transformer Engine linears inside "
                                   "the combined 1F1B step (needs overlap_moe_expert_parallel_comm): each keeps "
                                   "its input and output gradient until its backward_dw, the experts' past the "
                                   "forward layer's dispatch, the attention's to the end of the layer step.",
                                   type="bool", flag="--delay-wgrad-compute")
    overlap_dispatch_backward_with_experts_wgrad: bool = _f(
        False, "In the plain schedule, run the routed experts' weight-gradient GEMMs at the dispatch's backward, on "
        "a side stream: the experts keep fc1's and fc2's output gradients through the re-sorting and the "
        "all-to-all's backward. Excludes overlap_moe_expert_parallel_comm and delay_wgrad_compute.", type="bool",
        flag="--overlap-dispatch-backward-with-experts-wgrad")
    defer_embedding_wgrad_compute: bool = _f(False, "Defer the output layer's weight-gradient GEMMs to the pipeline "
                                             "flush: the last stage keeps each deferred micro-batch's input and "
                                             "logits gradient until then.", type="bool",
                                             flag="--defer-embedding-wgrad-compute")
    wgrad_deferral_limit: int = _f(0, "Micro-batches whose output-layer weight gradient is deferred; 0 means all.",
                                   type="int", min=0, max=1000000, flag="--wgrad-deferral-limit")
    peft: str | None = _f(None, "Parameter-efficient fine-tuning as Megatron-Bridge configures it (no Megatron-LM "
                          "flag): lora or dora adapters on the peft_target_modules; the base weights are frozen "
                          "(no gradients, no optimizer states).", type="str", choices=("lora", "dora"))
    peft_dim: int = _f(32, "Adapter rank r (Megatron-Bridge LoRA.dim): each adapted linear gains r x (in + out) "
                       "weights, split over the tensor-parallel ranks.", type="int", min=1, max=65536)
    peft_alpha: int = _f(32, "Adapter scaling alpha (Megatron-Bridge LoRA.alpha); no effect on memory.", type="int",
                         min=1, max=65536)
    peft_target_modules: list[str] | None = _f(None, "Linear layers that get adapters.", type="str_list",
                                               choices=("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"),
                                               derived="all four (Megatron-Bridge's default)")
    peft_share_expert_adapters: bool = _f(True, "Megatron-Bridge LoRA.share_expert_adapters: one adapter on each "
                                          "grouped-GEMM expert linear, shared by the rank's local experts "
                                          "(replicated over the expert-parallel ranks); false gives each local "
                                          "expert its own (E/ep times the expert adapters).", type="bool")
    peft_sequence_parallel_input_regather: bool = _f(False, "Megatron-Bridge LoRA.sequence_parallel_input_regather:"
                                                     " the LoRA-A of each linear_qkv / linear_fc1 adapter (not "
                                                     "experts) keeps its sequence-parallel local input and "
                                                     "all-gathers it again in backward, instead of keeping the "
                                                     "gathered copy (needs sequence parallelism and TP > 1).",
                                                     type="bool")
    images_per_sample: int = _f(0, "Images in each training sequence, for a model with a vision tower "
                                "(model.vision_num_layers). Their tokens are part of seq_length: the language model's "
                                "activations stay those of seq_length tokens; the vision tower's own activations are "
                                "added on the first pipeline stage.", type="int", min=0, max=MAX_TOKENS,
                                unit="images")
    image_resolution: int = _f(448, "Side of each (square) image in pixels, after the processor's resize: a multiple "
                               "of vision_patch_size x vision_spatial_merge_size. An image gives (side / patch)^2 "
                               "patches to the vision tower and that / merge^2 tokens to the language model.",
                               type="int", min=1, max=MAX_TOKENS, unit="pixels")
    freeze_vision_model: bool = _f(False, "Megatron-Bridge's freeze_vision_model: the vision tower's patch "
                                   "embedding, positions and transformer layers keep no gradients and no optimizer "
                                   "states, and save no activations (the patch merger stays trained unless "
                                   "freeze_vision_projection).", type="bool")
    freeze_vision_projection: bool = _f(False, "Megatron-Bridge's freeze_vision_projection: the patch merger (the "
                                        "projector into the language model) keeps no gradients and no optimizer "
                                        "states.", type="bool")
    vision_cuda_graph_impl: str = _f("none", "Megatron-Bridge's vision_cuda_graph_impl: transformer_engine captures "
                                     "each layer of a qwen3_vl vision tower in Transformer Engine CUDA graphs "
                                     "(Megatron-Core's VisionTECudaGraphHelper, at training step "
                                     "cuda_graph_warmup_steps). The tower then pads each micro-batch's patches to "
                                     "max_vision_cuda_graph_seq_length and runs its layers over them as one "
                                     "sequence; static buffers per tower layer and micro-batch in flight, and the "
                                     "captured layers' saved tensors in the graphs' private pool.", type="str",
                                     choices=("none", "transformer_engine"))
    vision_cuda_graph_modules: list[str] | None = _f(None, "Megatron-Bridge's vision_cuda_graph_scope: the parts of "
                                                     "each vision-tower layer its CUDA graphs capture, attn and/or "
                                                     "mlp (the rest runs eagerly).", type="str_list",
                                                     choices=("attn", "mlp"), derived="the whole layer")
    max_vision_cuda_graph_seq_length: int | None = _f(None, "Megatron-Bridge's max_vision_cuda_graph_seq_length: the "
                                                      "patches every micro-batch's images are padded to when the "
                                                      "vision tower's CUDA graphs are on; all of a micro-batch's "
                                                      "patches must fit.", type="int", min=1, max=MAX_TOKENS,
                                                      unit="patches",
                                                      derived="vision_num_position_embeddings // "
                                                              "vision_spatial_merge_size^2 (Megatron-Core's "
                                                              "get_vision_cuda_graph_seq_length)")
    freeze_language_model: bool = _f(False, "Megatron-Bridge's freeze_language_model: the whole language model "
                                     "(embedding, decoder layers, output layer) keeps its weights but no "
                                     "gradients and no optimizer states; its linear layers save no inputs for "
                                     "weight gradients, while the backward pass still runs through it to the "
                                     "trained vision tower or projector (needs a vision tower with a trained "
                                     "part).", type="bool")
    freeze_mtp: bool = _f(False, "Megatron-Bridge's freeze_mtp_model (EXAONE 4.5's provider): the multi-token-"
                          "prediction layers keep their weights but no gradients and no optimizer states, and "
                          "their linear layers (eh_proj, the transformer layer's) save no inputs for weight "
                          "gradients; the MTP loss's backward still runs through them into the decoder. Needs MTP "
                          "layers.", type="bool")
    # --- flagsA28: refused Megatron-LM arguments now modelled (issue 28 item 7) ---
    mlp_chunks_for_training: int = _f(1, "Run each dense MLP on this many chunks along the sequence (Megatron-LM "
                                      "--mlp-chunks-for-training, TransformerConfig.mlp_chunks_for_training; "
                                      "Megatron-Core takes at most one chunk per local sequence row). The saved "
                                      "activations stay the same (each chunk saves its share); only the MLP's "
                                      "backward working set shrinks: fc1's output gradient is that of the largest "
                                      "chunk, the two residual-sized gradients remain. Not with recompute of mlp "
                                      "(which takes precedence) or MoE layers.", type="int", min=1, max=MAX_TOKENS,
                                      flag="--mlp-chunks-for-training")
    ep_overlap_early_attn_memory_release: bool = _f(
        False, "In the combined 1F1B step (overlap_moe_expert_parallel_comm), run the backward layer's attention "
        "backward right after its dispatch backward, before the forward layer's MLP (Megatron-LM "
        "--ep-overlap-early-attn-memory-release): the forward's MLP node then sits beside the backward layer's input "
        "gradient instead of its attention activations and permuted tokens' gradient. Modelled with the alltoall "
        "dispatcher, without delay_wgrad_compute.", type="bool",
        flag="--ep-overlap-early-attn-memory-release")
    # omni28 (issues 27/28): Nemotron Omni's video frames and audio clips (estimator/model/audio.py).
    video_frames_per_sample: int = _f(0, "Video frames in each training sequence, for the radio vision tower "
                                      "(Nemotron Omni): every model.vision_temporal_patch_size consecutive frames, "
                                      "each of image_resolution, pass the tower as one image (through the video "
                                      "embedder with model.vision_separate_video_embedder) and give the language "
                                      "model one image's tokens. A multiple of vision_temporal_patch_size; the "
                                      "tokens are part of seq_length.", type="int", min=0, max=MAX_TOKENS,
                                      unit="frames")
    audio_clips_per_sample: int = _f(0, "Audio clips in each training sequence, for a model with a sound tower "
                                     "(model.sound_num_layers). Each clip of audio_clip_seconds gives the sound "
                                     "tower seconds x 100 mel frames (16 kHz, hop 160) and the language model "
                                     "those frames subsampled by sound_subsampling_factor as tokens, part of "
                                     "seq_length.", type="int", min=0, max=MAX_TOKENS, unit="clips")
    audio_clip_seconds: float = _f(10.0, "Length of each audio clip in seconds (Megatron-Bridge's Nemotron Omni "
                                   "recipes cap clips at max_audio_duration 10.0). The micro-batch's clips are "
                                   "padded to the longest, which this is.", type="float", min=0.01, max=36000.0,
                                   unit="seconds")
    freeze_sound_encoder: bool = _f(False, "Megatron-Bridge's freeze_sound_encoder: the sound tower's encoder "
                                    "keeps no gradients, no optimizer states and (with its input a spectrogram) "
                                    "saves no activations.", type="bool")
    freeze_sound_projection: bool = _f(False, "Megatron-Bridge's freeze_sound_projection: the sound projection "
                                       "(the MLP into the language model) keeps no gradients and no optimizer "
                                       "states.", type="bool")
    # --- distill29: offline distillation from cached teacher logits (issue 28 item 7) ---
    distillation_cached_logits: bool = _f(
        False, "Offline knowledge distillation from cached teacher logits (Megatron-LM --logits-load-dir, "
        "megatron/training/distillation/cached_logits_loss.py): on the last pipeline stage a KL loss on the main "
        "head's logits beside the cross entropy. It keeps exp(logits) and the fp32 log-softmax (8 B per logit "
        "element) and per token the teacher's top-K terms (18 B per K) until the backward pass; while it runs, "
        "the captured logits and their fp32 copy too. Needs distillation_top_k. The teacher files' indices are "
        "17-bit: a padded vocabulary of at most 131,072.", type="bool", flag="--logits-load-dir")
    distillation_top_k: int | None = _f(None, "Log-probabilities per token in the cached teacher files: the "
                                        "--logits-save-top-k of the run that wrote them (with --logits-save-top-p "
                                        "the most any micro-batch kept); the student's flags do not say it. "
                                        "Required with distillation_cached_logits; a K above the padded "
                                        "vocabulary counts as the vocabulary (the saver keeps min(K, V)).",
                                        type="int", min=1, max=MAX_VOCAB, unit="per token",
                                        cli="--distillation-top-k")
    distillation_logprobs_dtype: str = _f("fp16", "Dtype of the cached teacher log-probabilities: the "
                                          "--logits-save-dtype of the run that wrote them (Megatron-LM's default "
                                          "fp16). Sizes their GPU copy while the KL loss runs.", type="str",
                                          choices=("fp16", "bf16", "fp32"), cli="--distillation-logprobs-dtype")


@dataclass(frozen=True)
class PrecisionConfig:
    """Number formats of weights, gradients and optimizer states."""

    params_dtype: str = _f("bf16", "Dtype of the model weights (--bf16, --fp16, or fp32).", type="str",
                           choices=("bf16", "fp16", "fp32"), flag="--bf16")
    fp8: bool = _f(False, "FP8 compute through Transformer Engine (Hopper or newer).", type="bool", cli="--fp8",
                   flag="--fp8-format")
    fp8_recipe: str | None = _f(None, "FP8 scaling recipe.", type="str",
                                choices=("delayed", "tensorwise", "mxfp8", "blockwise"),
                                derived="delayed when fp8 (Megatron's default)", flag="--fp8-recipe")
    fp8_param_gather: bool = _f(False, "Keep the linear-layer weights themselves in FP8 (--fp8-param-gather), "
                                "1 B plus Transformer Engine's 1 B transposed copy; the embedding, output layer, "
                                "norms and router stay in params_dtype, and the distributed optimizer keeps the "
                                "master weights.", type="bool",
                                flag="--fp8-param-gather")
    fp4: bool = _f(False, "NVFP4 compute through Transformer Engine (Blackwell or newer): linear-layer GEMMs "
                   "on 4-bit E2M1 values with an E4M3 scale per 16 elements and an fp32 scale per tensor. "
                   "Excludes fp8 (Megatron-LM's rule); needs bf16 weights.", type="bool", cli="--fp4",
                   flag="--fp4-format")
    fp4_recipe: str | None = _f(None, "FP4 recipe: nvfp4 (Transformer Engine's NVFP4BlockScaling), the only one "
                                "modelled, so setting it does not change the estimate (Megatron-Core's custom "
                                "quantizer factories are not modelled).", type="str", choices=("nvfp4",),
                                derived="nvfp4 when fp4 (Megatron's default)", flag="--fp4-recipe")
    fp4_param_gather: bool = _f(False, "Keep the linear-layer weights themselves in NVFP4 (--fp4-param-gather; "
                                "Megatron-Core TransformerConfig.fp4_param): a row-wise and a column-wise copy, "
                                "0.5 B each, with their E4M3 scales, instead of params_dtype weights plus cached "
                                "NVFP4 copies; the embedding, output layer, norms and router stay in params_dtype.",
                                type="bool", flag="--fp4-param-gather")
    accumulate_allreduce_grads_in_fp32: bool | None = _f(
        None, "Keep the DDP gradient buffer in fp32 (Megatron-Core DistributedDataParallelConfig."
        "grad_reduce_in_fp32): 4 B per parameter; false keeps it in the weights' dtype, 2 B with bf16 (Megatron-LM "
        "--grad-reduce-in-bf16). Megatron-Core sets it independently of main_grads_dtype, as Megatron-Bridge does.",
        type="bool", derived="Megatron-LM's rule (arguments.py): true for bf16 weights unless main_grads_dtype is "
        "bf16, false for fp16; fp32 weights always have fp32 gradients",
        flag="--accumulate-allreduce-grads-in-fp32")
    use_precision_aware_optimizer: bool = _f(False, "Let Transformer Engine's FusedAdam keep the master weights and "
                                             "Adam moments in the dtypes below (Megatron-Core OptimizerConfig). "
                                             "With optimizer_cpu_offload it selects HybridDeviceOptimizer, which "
                                             "keeps fp32 states whatever the dtypes and needs no Transformer "
                                             "Engine.",
                                             type="bool", flag="--use-precision-aware-optimizer")
    main_grads_dtype: str = _f("fp32", "Optimizer's main-gradient dtype (needs the precision-aware optimizer). "
                               "Megatron-Core allocates no buffer for it: the optimizer reads the DDP gradient "
                               "buffer, whose dtype accumulate_allreduce_grads_in_fp32 sets; bf16 only changes "
                               "that field's default.", type="str", choices=("fp32", "bf16"),
                               flag="--main-grads-dtype")
    main_params_dtype: str = _f("fp32", "Dtype of the optimizer's master weights (fp16 needs the precision-"
                                "aware optimizer).", type="str", choices=("fp32", "fp16"),
                                flag="--main-params-dtype")
    store_param_remainders: bool = _f(True, "With the precision-aware optimizer, bf16 weights and fp32 master "
                                      "weights, keep only the low 16 bits of each fp32 master weight (its high 16 "
                                      "bits are the bf16 weight): 2 B instead of 4 B. Megatron-Core OptimizerConfig's "
                                      "default; no effect with fp16 weights, fp16 master weights, or FP8 recipes "
                                      "other than delayed (Megatron-Core then keeps the fp32 master itself). "
                                      "Megatron-LM has no flag for it.", type="bool")
    exp_avg_dtype: str = _f("fp32", "Dtype of Adam's first moment.", type="str",
                            choices=("fp32", "fp16", "bf16", "fp8"), flag="--exp-avg-dtype")
    exp_avg_sq_dtype: str = _f("fp32", "Dtype of Adam's second moment.", type="str",
                               choices=("fp32", "fp16", "bf16", "fp8"), flag="--exp-avg-sq-dtype")
    megatron_fsdp_main_params_dtype: str = _f("fp32", "Megatron-FSDP's master weights (main weight buffer); auto "
                                              "keeps none (the model weights are the master weights).", type="str",
                                              choices=("fp32", "bf16", "fp16", "auto"),
                                              flag="--megatron-fsdp-main-params-dtype")
    megatron_fsdp_main_grads_dtype: str = _f("auto", "Megatron-FSDP's gradient buffer; auto means the weights' "
                                             "dtype (bf16: 2 B per parameter).", type="str",
                                             choices=("auto", "fp32", "bf16", "fp16"),
                                             flag="--megatron-fsdp-main-grads-dtype")
    megatron_fsdp_grad_comm_dtype: str = _f("auto", "Megatron-FSDP's gradient communication dtype; auto means the "
                                            "gradient buffer's. Sharded gradients are reduce-scattered from "
                                            "unsharded buckets of this dtype; another dtype than the buffer's "
                                            "adds an unsharded copy of each gradient bucket while it is reduced.",
                                            type="str", choices=("auto", "fp32", "bf16", "fp16"),
                                            flag="--megatron-fsdp-grad-comm-dtype")
    disable_parameter_transpose_cache: bool = _f(False, "FP8 without Transformer Engine's cached weight copies "
                                                 "(Megatron-Core TransformerConfig; no Megatron-LM flag): the FP8 "
                                                 "weights are quantised anew each micro-batch and each in-flight "
                                                 "micro-batch keeps its own copy for the backward pass.",
                                                 type="bool")
    reuse_grad_buf_for_mxfp8_param_ag: bool = _f(
        False, "With fp8_recipe mxfp8 and fp8_param_gather under the distributed optimizer: all-gather the updated "
        "weights (bf16) through the gradient buffer, which Megatron-Core shares with the parameter buffer for MXFP8 "
        "weights, and quantize them into Transformer Engine's own MXFP8 storage. It is what the estimate counts "
        "for such a run (row-wise and column-wise FP8 copies, no parameter buffer of their own) and what Megatron-"
        "Core needs to run it: without it Transformer Engine cannot move MXFP8 weights into the parameter buffer.",
        type="bool", flag="--reuse-grad-buf-for-mxfp8-param-ag")
    first_last_layers_bf16: bool = _f(False, "In an FP8 or NVFP4 run, keep the first num_layers_at_start_in_bf16 "
                                      "and the last num_layers_at_end_in_bf16 decoder layers in bf16 (no quantized "
                                      "weight copies, bf16 activations).", type="bool", flag="--first-last-layers-bf16")
    num_layers_at_start_in_bf16: int = _f(1, "Decoder layers at the start kept in bf16 with "
                                          "first_last_layers_bf16.", type="int", min=0, max=100000,
                                          flag="--num-layers-at-start-in-bf16")
    num_layers_at_end_in_bf16: int = _f(1, "Decoder layers at the end kept in bf16 with first_last_layers_bf16.",
                                        type="int", min=0, max=100000, flag="--num-layers-at-end-in-bf16")
    fp8_output_proj: bool = _f(False, "Run the output layer (the LM head) in MXFP8 too (Megatron-Core "
                               "TransformerConfig.fp8_output_proj; needs fp8 with fp8_recipe mxfp8): Transformer "
                               "Engine's Linear keeps MXFP8 row-wise and column-wise copies of the vocabulary-sized "
                               "weight beside the bf16 one, saves its input in MXFP8 and quantizes the logits' "
                               "gradient in its backward pass.", type="bool", flag="--fp8-output-proj")
    # quant28 (issue 28): Megatron-Core's per-module quantisation recipe (estimator/config/quant_recipe.py).
    quant_recipe: list[str] | None = _f(
        None, "Per-module precision in an FP8 or NVFP4 run (Megatron-Core TransformerConfig.quant_recipe; Megatron-"
        "LM's --te-precision-config-file YAML, Megatron-Bridge's model.quant_recipe): ordered GLOB=PRECISION rules, "
        "the first whose glob matches a Transformer Engine linear's module path (decoder.layers.N.mixer.out_proj, "
        "mtp.layers.0.eh_proj) gives it its precision, bf16, tensorwise, blockwise, mxfp8 or nvfp4 (its quantised "
        "weight copies, their scales and its saved input); a linear no rule matches keeps the run's recipe, and the "
        "bf16 first/last layers stay bf16. E.g. ['*.linear_qkv=bf16', '*mixer.out_proj=mxfp8']. Null: one recipe "
        "for the whole model.", type="str_list")
    # --- flagsA28: refused Megatron-LM arguments now modelled (issue 28 item 7) ---
    logit_dtype: str | None = _f(None, "Dtype of the logits the output layer writes (Megatron-LM "
                                 "--output-logit-dtype, GPTModel logit_dtype; Megatron-Bridge model.logit_dtype). "
                                 "fp32 under bf16 weights: the GEMM writes fp32 logits (Transformer Engine's "
                                 "general_gemm), the loss works in them in place (4 B per logit, no bf16 copy), and the "
                                 "output layer's backward casts their gradient to bf16 (+ 2 B per logit beside it).",
                                 type="str", choices=("bf16", "fp32"), derived="the output layer's input dtype "
                                 "(params_dtype)", flag="--output-logit-dtype")
    # --- distill29: the fp32 residual stream (issue 28 item 7) ---
    fp32_residual_connection: bool = _f(
        False, "The residual stream in fp32 (Megatron-Core fp32_residual_connection): the embedding's output and "
        "every layer's output are fp32 and the pipeline sends fp32. Transformer Engine's norms take bf16 copies of "
        "their input and save those, so a layer keeps the same bytes; what grows is a full-recompute checkpoint "
        "(4 B per element of the layer input), the received input a later pipeline stage keeps per micro-batch "
        "(4 B, beside its first layer's bf16 copy) and the residual gradient in the backward working set (4 B). "
        "Needs bf16 or fp16 weights.", type="bool", flag="--fp32-residual-connection")
    # --- tever29: the installed Transformer Engine, where its memory behaviour changed between releases ---
    transformer_engine_version: str = _f(
        "2.18", "The Transformer Engine release the run uses, \"MAJOR.MINOR\" (\"2.11\"; what "
        "transformer_engine.__version__ prints, such as \"2.11.0+c188b533\", reads as 2.11). Megatron-LM's flags "
        "and Megatron-Bridge's configuration do not record it: give it when the run's is older. It changes only the "
        "fused cross entropy (training.cross_entropy_fusion_impl te): before 2.18 the kernel writes the logits' "
        "gradient into the bf16 logits in place and keeps only them (2 B per logit); from 2.18 (TE commit 01bbe3e) "
        "it keeps an fp32 gradient instead (4 B per logit, the bf16 logits alive until the forward returns). "
        "Default: 2.18, the newest release, which Megatron-Bridge @ 067f987d pins.", type="str")


@dataclass(frozen=True)
class Config:
    """A whole configuration: the four sections of the YAML file."""

    model: ModelConfig
    parallelism: ParallelismConfig
    training: TrainingConfig
    precision: PrecisionConfig
    #: What the user wrote (sections and keys as given), returned by ``to_dict()``.
    source: dict = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict:
        """The configuration as the user wrote it (only the keys given, in their order)."""
        return plain_copy(self.source)

    def to_full_dict(self) -> dict:
        """Every field of every section, defaults filled in (derived values stay null)."""
        return {name: {f.name: _plain(getattr(getattr(self, name), f.name)) for f in dataclasses.fields(cls)}
                for name, cls in SECTIONS.items()}


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def plain_copy(obj):
    """A deep copy of plain data (mappings, lists and scalars, as YAML or JSON gives them): new mappings and
    lists, the same scalars. Five times faster than ``copy.deepcopy``, which the calculator paid on every
    request."""
    if isinstance(obj, dict):
        return {k: plain_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain_copy(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(plain_copy(v) for v in obj)
    return obj


#: Section name -> dataclass, in YAML order.
SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "parallelism": ParallelismConfig,
    "training": TrainingConfig,
    "precision": PrecisionConfig,
}


@dataclass(frozen=True)
class FieldSpec:
    """Everything the loader, the CLI, the calculator form and the docs need to know about one field."""

    section: str
    name: str
    type: str          # int | float | bool | str | int_or_list | str_list | int_list
    default: object
    help: str
    required: bool
    nullable: bool
    choices: tuple | None
    unit: str | None
    flag: str | None   # the Megatron-LM argument it mirrors
    cli: str | None    # the estimator CLI flag (derived from the name when None)
    min: float | None
    max: float | None
    derived: str | None

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def cli_flag(self) -> str:
        return self.cli or "--" + self.name.replace("_", "-")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["choices"] = list(self.choices) if self.choices else None
        d["path"] = self.path
        d["cli_flag"] = self.cli_flag
        return d


#: Section name -> its specs, built on first use: the loader, the field checks, the search options and the CLI parser
#: each ask at import, and building the 290 frozen specs anew for each took a tenth of ``import estimator``.
_SECTION_SPECS: dict[str, tuple[FieldSpec, ...]] = {}


def section_specs(section: str) -> list[FieldSpec]:
    """The field specs of one section, in declaration order (a new list; the specs are frozen and shared)."""
    specs = _SECTION_SPECS.get(section)
    if specs is None:
        cls = SECTIONS[section]
        specs = _SECTION_SPECS[section] = tuple(
            FieldSpec(section=section, name=f.name, type=m["type"], default=f.default, help=m["help"],
                      required=m["required"], nullable=m["nullable"], choices=m["choices"], unit=m["unit"],
                      flag=m["flag"], cli=m["cli"], min=m["min"], max=m["max"], derived=m["derived"])
            for f in dataclasses.fields(cls) for m in (f.metadata,))
    return list(specs)


_SPECS: list[FieldSpec] | None = None


def field_specs() -> list[FieldSpec]:
    """Every field of every section, in YAML order."""
    global _SPECS
    if _SPECS is None:
        _SPECS = [s for sec in SECTIONS for s in section_specs(sec)]
    return list(_SPECS)
