"""The MoE router's saved tensors (estimator/model/layers/router.py), by hand from Megatron-LM @ d98e8a64 :
megatron/core/transformer/moe/router.py and moe_utils.py, and TransformerEngine @ d0067d0d :
transformer_engine/pytorch/router.py (the fused kernels' autograd functions).

One micro-batch of Tn = 4096 tokens (seq 4096, micro-batch 1, one GPU), E = 256 experts, top-8, h 256, bf16.
A tensor two operations save is counted once.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, load_config
from estimator.memory.activations import layer_activations
from estimator.model.layers import LayerKind
from estimator.model.layers.router import saved
from estimator.formats.megatron_args import read_megatron_args
from estimator.model.resolve import resolve
from tests.conftest import make_config

TN, E, K = 4096, 256, 8
MOE = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000, num_experts=E, moe_router_topk=K,
           moe_ffn_hidden_size=64)
#: DeepSeek-V3's router as Megatron-Bridge's DeepSeekV3Bridge sets it (models/deepseek/deepseek_v3_bridge.py, with
#: n_group / topk_group from the generic CONFIG_MAPPING): sigmoid scores, expert bias, 8 groups of which 4 are
#: picked, a sequence-level aux loss with a small coefficient, fp32 router.
V3 = dict(MOE, moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True, moe_router_num_groups=8,
          moe_router_group_topk=4, moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-4,
          moe_router_dtype="fp32", moe_router_pre_softmax=True)


def _resolved(model, parallelism=None, training=None):
    return resolve(load_config(make_config(model, parallelism, training)))


def _router(model, parallelism=None, training=None) -> int:
    r = _resolved(model, parallelism, training)
    return sum(saved(r, 2, TN, TN).values())


def test_megatron_defaults_keep_only_the_selected_scores():
    """TransformerConfig's defaults: softmax after top-k, aux_loss with moe_aux_loss_coeff 0.0 (so no aux-loss
    path), no z-loss, no fusion. topk(logits) saves its int64 indices [Tn, k] (the scatter into the dense
    probabilities saves the same tensor), softmax(dtype=fp32) over the k selected logits saves its output:
    8 x 4096 x 8 + 4 x 4096 x 8 = 262,144 + 131,072 = 393,216 B. The logits are not saved (router_gating_linear
    saves its input and the weight)."""
    assert _router(MOE) == 393_216


def test_deepseek_v3_router_unfused():
    """sigmoid(logits.float()) saves its fp32 output [4096, 256] = 4,194,304 B (gather, with expert bias, saves
    the same tensor as its input); the top-k over the biased, group-masked scores is discarded (only its indices
    are kept: no group mask); gather's int64 indices 262,144; probs = s / (s.sum + 1e-20) saves the 8 gathered
    fp32 scores 131,072 and their sum 4 x 4096 = 16,384. The seq aux loss computes sigmoid again (4,194,304) and
    normalises it (its sum, 16,384); the loss reduces over tokens and keeps per-expert vectors only.
    Total 4,194,304 x 2 + 262,144 + 131,072 + 16,384 x 2 = 8,814,592 B."""
    assert _router(V3) == 8_814_592


def test_deepseek_v3_router_fused():
    """moe_router_fusion: TE FusedTopkScoreFunction saves its routing map (bool [4096, 256] = 1,048,576 B) and an
    fp32 intermediate (4,194,304); FusedComputeScoresForMoEAuxLoss saves one more fp32 intermediate (4,194,304);
    FusedAuxLoss saves two floats and the per-expert counts. Total 9,437,184 B."""
    assert _router({**V3, "moe_router_fusion": True}) == 9_437_184


def test_pre_softmax_group_limited_with_aux_loss_and_z_loss():
    """Softmax before top-k: softmax(logits, fp32) saves its output 4,194,304; group-limited top-k without expert
    bias: masked_fill saves its bool mask [4096, 256] 1,048,576 and topk its int64 indices 262,144; the aux loss
    (coefficient 1e-2) computes its own softmax over all experts: 4,194,304. The z-loss: logsumexp saves its
    input, the bf16 logits 2 x 4096 x 256 = 2,097,152, and its output 2 x 4096 = 8,192 (square saves the same).
    Total 11,804,672 B."""
    cfg = dict(MOE, moe_router_pre_softmax=True, moe_router_num_groups=8, moe_router_group_topk=4,
               moe_aux_loss_coeff=1e-2, moe_z_loss_coeff=1e-3)
    assert _router(cfg) == 4_194_304 + 1_048_576 + 262_144 + 4_194_304 + 2_097_152 + 8_192


def test_allgather_dispatcher_keeps_the_local_probabilities():
    """Allgather dispatcher, EP 2 (no sequence parallelism): the probabilities and the routing map are gathered
    over the 2 ranks (8192 tokens) and cut to the 128 local experts; masked_select saves its input (the bf16
    probabilities, 2 x 8192 x 128 = 2,097,152) and its bool mask (8192 x 128 = 1,048,576), besides the
    default top-k's 393,216 B. Total 3,538,944 B."""
    got = _router({**MOE, "moe_token_dispatcher_type": "allgather"}, {"expert_model_parallel_size": 2},
                  {"world_size": 2})
    assert got == 2_097_152 + 1_048_576 + 393_216


def test_the_layer_breakdown_names_the_router():
    """The MoE layer's `router` part is the sum above (Megatron's defaults: 393,216 B)."""
    r = _resolved(MOE)
    parts = layer_activations(r, LayerKind("attention", "moe"), parts=True).parts
    assert parts["router"] == 393_216


def test_router_rules():
    with pytest.raises(ConfigError, match="moe_router_num_groups"):
        load_config(make_config({**MOE, "moe_router_group_topk": 4}))
    with pytest.raises(ConfigError, match="divisible"):
        load_config(make_config({**MOE, "moe_router_num_groups": 3, "moe_router_group_topk": 1}))
    with pytest.raises(ConfigError, match="fp64"):
        load_config(make_config({**MOE, "moe_router_fusion": True, "moe_router_dtype": "fp64"}))
    with pytest.raises(ConfigError, match="Sinkhorn"):
        load_config(make_config({**MOE, "moe_router_load_balancing_type": "sinkhorn", "moe_aux_loss_coeff": 0.1}))


BASE = ("pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 1 --vocab-size 1000 --bf16 --num-experts 256 "
        "--moe-router-topk 8")


def test_megatron_router_flags():
    """The router flags reach the configuration; the load balancing types and coefficients pair by position."""
    m = read_megatron_args(BASE + " --moe-router-score-function sigmoid --moe-router-num-groups 8 "
                           "--moe-router-group-topk 4 --moe-router-load-balancing-type seq_aux_loss "
                           "--moe-aux-loss-coeff 1e-4 --moe-z-loss-coeff 1e-3 --moe-router-fusion "
                           "--moe-router-pre-softmax", world_size=1).config["model"]
    assert (m["moe_router_score_function"], m["moe_router_num_groups"], m["moe_router_group_topk"],
            m["moe_router_load_balancing_type"], m["moe_aux_loss_coeff"], m["moe_z_loss_coeff"],
            m["moe_router_fusion"], m["moe_router_pre_softmax"]) == ("sigmoid", 8, 4, "seq_aux_loss", 1e-4, 1e-3,
                                                                     True, True)
    both = read_megatron_args(BASE + " --moe-router-load-balancing-type aux_loss seq_aux_loss "
                              "--moe-aux-loss-coeff 0 1e-3", world_size=1)
    assert (both.config["model"]["moe_router_load_balancing_type"],
            both.config["model"]["moe_aux_loss_coeff"]) == ("seq_aux_loss", 1e-3)
    default = read_megatron_args(BASE, world_size=1).config["model"]
    assert (default["moe_router_load_balancing_type"], default["moe_aux_loss_coeff"]) == ("aux_loss", 0.0)
    with pytest.raises(ConfigError, match="--moe-aux-loss-coeff"):
        read_megatron_args(BASE + " --moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 1",
                           world_size=1)
