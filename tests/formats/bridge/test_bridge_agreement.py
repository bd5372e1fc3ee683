"""The same run through both frontends: Megatron-LM launch flags and a Megatron-Bridge ``config.yaml``.

Wherever Megatron-Core receives the same settings, the two give the same estimate (issue 28). Each run below is
written twice by hand, once as ``pretrain_gpt.py`` flags (Megatron-LM @ d98e8a64 arguments.py) and once as the YAML
Bridge writes (NVIDIA-NeMo/Megatron-Bridge @ 067f987d, ``ConfigContainer.to_yaml()``: torch objects as
``{_target_, _call_: false}``), neither derived from the other or from the code. Then every recipe of the catalogue is
exported as Bridge sections and read back, which must not change its estimate.
"""

from __future__ import annotations

import pytest

from estimator import EstimatorError, estimate
from estimator.formats.bridge.config import read_bridge_config
from estimator.formats.bridge.export import to_bridge_dict, to_bridge_overrides
from estimator.formats.bridge.recipes import read_bridge_recipe, recipe_config, recipe_names
from estimator.formats.megatron_args import read_megatron_args

LLAMA3_8B_FLAGS = """
--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention
--num-query-groups 8 --kv-channels 128 --seq-length 8192 --max-position-embeddings 8192 --position-embedding-type rope
--normalization RMSNorm --norm-epsilon 1e-5 --swiglu --disable-bias-linear --untie-embeddings-and-output-weights
--vocab-size 128256 --hidden-dropout 0 --attention-dropout 0 --context-parallel-size 2 --micro-batch-size 1
--global-batch-size 128 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --bf16
--grad-reduce-in-bf16 --cross-entropy-loss-fusion --cross-entropy-fusion-impl te
"""

LLAMA3_8B_YAML = """
_target_: megatron.bridge.training.config.ConfigContainer
model:
  _target_: megatron.bridge.models.llama.llama_provider.Llama3ModelProvider8B
  num_layers: 32
  hidden_size: 4096
  ffn_hidden_size: 14336
  num_attention_heads: 32
  num_query_groups: 8
  kv_channels: 128
  seq_length: 8192
  vocab_size: 128256
  position_embedding_type: rope
  normalization: RMSNorm
  layernorm_epsilon: 1.0e-05
  activation_func:
    _call_: false
    _target_: torch.nn.functional.silu
  gated_linear_unit: true
  add_bias_linear: false
  share_embeddings_and_output_weights: false
  hidden_dropout: 0.0
  attention_dropout: 0.0
  context_parallel_size: 2
  cross_entropy_loss_fusion: true
  cross_entropy_fusion_impl: te
train:
  micro_batch_size: 1
  global_batch_size: 128
  train_iters: 50
ddp:
  use_distributed_optimizer: true
optimizer:
  optimizer: adam
  lr: 0.0003
  use_distributed_optimizer: true
dataset:
  seq_length: 8192
mixed_precision:
  bf16: true
  params_dtype:
    _call_: false
    _target_: torch.bfloat16
  grad_reduce_in_fp32: false
comm_overlap:
  tp_comm_overlap: false
logger:
  log_interval: 1
"""

#: --make-vocab-size-divisible-by 1: a Bridge model's own vocab_size (no tokenizer.use_tokenizer_vocab_size) reaches
#: Megatron-Core unpadded (Bridge @ 067f987d : training/setup.py _validate_and_set_vocab_size -> should_pad_vocab
#: False, models/gpt_provider.py provide), so 151,936 rows; Megatron-LM pads to a multiple of 128 x TP 2 (152,064)
#: unless the multiple is 1, which gives the same 151,936 (a multiple of TP 2).
QWEN3_30B_FLAGS = """
--make-vocab-size-divisible-by 1 --num-layers 48 --hidden-size 2048 --ffn-hidden-size 6144 --num-attention-heads 32 --group-query-attention
--num-query-groups 4 --kv-channels 128 --qk-layernorm --seq-length 4096 --max-position-embeddings 40960
--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear
--untie-embeddings-and-output-weights --vocab-size 151936 --hidden-dropout 0 --attention-dropout 0
--num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 --moe-grouped-gemm --moe-token-dispatcher-type alltoall
--moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 0.001 --tensor-model-parallel-size 2
--sequence-parallel --expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64
--use-distributed-optimizer --bf16 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
--cross-entropy-loss-fusion
"""

QWEN3_30B_BRIDGE = {
    "model": {"num_layers": 48, "hidden_size": 2048, "ffn_hidden_size": 6144, "num_attention_heads": 32,
              "num_query_groups": 4, "kv_channels": 128, "qk_layernorm": True, "seq_length": 4096,
              "vocab_size": 151936, "position_embedding_type": "rope", "normalization": "RMSNorm",
              "activation_func": {"_target_": "torch.nn.functional.silu", "_call_": False},
              "gated_linear_unit": True, "add_bias_linear": False, "share_embeddings_and_output_weights": False,
              "hidden_dropout": 0.0, "attention_dropout": 0.0, "num_moe_experts": 128, "moe_router_topk": 8,
              "moe_ffn_hidden_size": 768, "moe_grouped_gemm": True, "moe_token_dispatcher_type": "alltoall",
              "moe_router_load_balancing_type": "aux_loss", "moe_aux_loss_coeff": 0.001,
              "tensor_model_parallel_size": 2, "sequence_parallel": True, "expert_model_parallel_size": 8,
              "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
    "train": {"micro_batch_size": 1, "global_batch_size": 64},
    "ddp": {"use_distributed_optimizer": True},
    "optimizer": {"optimizer": "adam", "use_distributed_optimizer": True},
    "mixed_precision": "bf16_mixed",       # fp32 gradient buffer: Megatron-LM's default with --bf16 too
}   # cross_entropy_loss_fusion left out: TransformerConfig's default True (Megatron-LM's flag is off by default)

MOONLIGHT_FLAGS = """
--num-layers 27 --hidden-size 2048 --ffn-hidden-size 11264 --num-attention-heads 16 --multi-latent-attention
--kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --qk-layernorm --seq-length 4096
--max-position-embeddings 8192 --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear
--untie-embeddings-and-output-weights --vocab-size 163840 --hidden-dropout 0 --attention-dropout 0
--num-experts 64 --moe-router-topk 6 --moe-ffn-hidden-size 1408 --moe-shared-expert-intermediate-size 2816
--moe-layer-freq ([0]*1+[1]*26) --moe-grouped-gemm --moe-token-dispatcher-type alltoall
--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 0.001 --pipeline-model-parallel-size 3
--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 32 --use-distributed-optimizer --bf16
--recompute-granularity selective --recompute-modules core_attn --cross-entropy-loss-fusion
"""

MOONLIGHT_BRIDGE = {
    "model": {"num_layers": 27, "hidden_size": 2048, "ffn_hidden_size": 11264, "num_attention_heads": 16,
              "multi_latent_attention": True, "q_lora_rank": None, "kv_lora_rank": 512, "qk_head_dim": 128,
              "qk_pos_emb_head_dim": 64, "v_head_dim": 128, "qk_layernorm": True, "seq_length": 4096,
              "vocab_size": 163840, "position_embedding_type": "rope", "normalization": "RMSNorm",
              "activation_func": {"_target_": "torch.nn.functional.silu", "_call_": False},
              "gated_linear_unit": True, "add_bias_linear": False, "share_embeddings_and_output_weights": False,
              "hidden_dropout": 0.0, "attention_dropout": 0.0, "num_moe_experts": 64, "moe_router_topk": 6,
              "moe_ffn_hidden_size": 1408, "moe_shared_expert_intermediate_size": 2816,
              "moe_layer_freq": [0] + [1] * 26, "moe_grouped_gemm": True, "moe_token_dispatcher_type": "alltoall",
              "moe_router_load_balancing_type": "seq_aux_loss", "moe_aux_loss_coeff": 0.001,
              "pipeline_model_parallel_size": 3, "expert_model_parallel_size": 8,
              "recompute_granularity": "selective", "recompute_modules": ["core_attn"]},
    "train": {"micro_batch_size": 1, "global_batch_size": 32},
    "ddp": {"use_distributed_optimizer": True},
    "mixed_precision": "bf16-mixed",
}


def _peaks(config) -> list[int]:
    return [s["device_bytes"] for s in estimate(config).to_dict()["stages"]]


@pytest.mark.parametrize("flags, bridge, world", [
    (LLAMA3_8B_FLAGS, LLAMA3_8B_YAML, 8),
    (QWEN3_30B_FLAGS, QWEN3_30B_BRIDGE, 16),
    (MOONLIGHT_FLAGS, MOONLIGHT_BRIDGE, 24),
], ids=["llama3-8b-cp2-bf16-grads", "qwen3-30b-a3b-tp2-ep8-full-recompute", "moonlight-mla-pp3-ep8"])
def test_megatron_flags_and_bridge_config_agree(flags, bridge, world):
    lm = read_megatron_args(flags, world_size=world).config
    br = read_bridge_config(bridge, world_size=world).config
    assert _peaks(lm) == _peaks(br)


def test_bridge_defaults_apply_to_fields_left_out():
    """A field the YAML leaves out has Bridge's dataclass default, not argparse's: without the flag Megatron-LM runs
    the unfused loss (its --cross-entropy-loss-fusion is off by default), Bridge the fused one (TransformerConfig
    cross_entropy_loss_fusion = True at Megatron-LM 2a75ac12): the loss keeps different logits copies."""
    lm = read_megatron_args(QWEN3_30B_FLAGS.replace("--cross-entropy-loss-fusion", ""), world_size=16).config
    br = read_bridge_config(QWEN3_30B_BRIDGE, world_size=16).config
    assert br["training"]["cross_entropy_loss_fusion"] is True and not lm["training"].get("cross_entropy_loss_fusion")
    assert _peaks(lm) != _peaks(br)


def test_where_bridge_differs_the_estimate_follows_bridge():
    """bf16_mixed over a DDP config asking for BF16 gradients: Megatron-Core receives fp32 (the preset wins), so the
    Bridge estimate has the larger gradient buffer than the same flags with --grad-reduce-in-bf16."""
    lm = read_megatron_args(LLAMA3_8B_FLAGS, world_size=8).config
    br = read_bridge_config(LLAMA3_8B_YAML.replace("  grad_reduce_in_fp32: false\n", ""), world_size=8).config
    g_lm = estimate(lm).to_dict()["stages"][0]["gradients_bytes"]
    g_br = estimate(br).to_dict()["stages"][0]["gradients_bytes"]
    assert g_br == 2 * g_lm


#: A model bridge's layer-spec fields (Gemma 2 / 3, EXAONE 4.0, OLMoE, OLMo 2, K-EXAONE) away from Megatron-Core's
#: plain GPT spec: no pretrain_gpt.py flag says them, so the Bridge sections cannot either.
_SPEC = {"post_layernorm": False, "final_logit_softcapping": None, "global_attention_freq": None,
         "qk_layernorm_full_dim": False, "pre_layernorm": True, "mtp_dense_mlp": False}


def _carried(model: dict) -> bool:
    """A model the recipe reader carries past the Bridge sections: a vision tower, a layer spec of its own, or
    DeepSeek-V4's dev-branch fields (estimator/formats/bridge/recipes.py ``_dev_parts``)."""
    return bool(model.get("vision_num_layers")) or model.get("activation_func") == "geglu" or \
        any(model.get(k, v) != v for k, v in _SPEC.items()) or \
        model.get("experimental_attention_variant") == "dsv4_hybrid"


@pytest.mark.parametrize("name", recipe_names())
def test_recipe_round_trips_through_bridge_sections(name):
    """Export as Bridge sections, read back: the same estimate, stage by stage (or the same refusal)."""
    cfg = recipe_config(name)
    try:
        want = _peaks(cfg)
    except EstimatorError as exc:
        with pytest.raises(EstimatorError) as again:
            _peaks(read_bridge_recipe(name).config)
        assert str(again.value) == str(exc)
        return
    if _carried(cfg["model"]):      # no Bridge field says them: the recipe reader carries them
        back = read_bridge_recipe(name).config
    else:
        back = read_bridge_config(to_bridge_dict(cfg), world_size=cfg["training"]["world_size"]).config
    assert _peaks(back) == want


def test_overrides_text_reads_back():
    """bridge-overrides' text, given as overrides to an empty container, is the same run."""
    cfg = recipe_config("qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config")
    back = read_bridge_config({}, world_size=16, overrides=to_bridge_overrides(cfg)).config
    assert _peaks(cfg) == _peaks(back)


def test_recipe_with_override():
    """run_recipe.py-style override: model.tensor_model_parallel_size=2 with sequence parallelism."""
    imp = read_bridge_recipe("qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config",
                             ["model.tensor_model_parallel_size=2", "model.sequence_parallel=true"])
    assert imp.config["parallelism"]["tensor_model_parallel_size"] == 2
    assert imp.config["training"]["world_size"] == 16
