"""ERNIE-VL's two expert pools with image tokens (estimator/model/layers/moe.py ``pools``), by hand from
Megatron-Bridge @ 067f987d : src/megatron/bridge/models/ernie_vl/modeling_ernie45_vl/ernie_moe_layer.py
``ErnieMultiTypeMoE.forward``: the tokens marked vision in ``moe_mm_token_type_ids`` (each image's tokens and its
image start and end tokens: huggingface/transformers @ 06053b84 : processing_ernie4_5_vl_moe.py) run through the
vision pool's MoELayer (its router, dispatcher and experts of width fv), the others through the text pool's (width
fm); the shared experts see every token once.

The model of these tests: one dense and one MoE layer, h 256, 8 experts per pool, top-2, text experts 128 wide,
vision experts 64, shared experts 256, SwiGLU (fc1 twice the width), sigmoid router with expert bias, bf16 (2 B),
no dropout; sequence 256, micro-batch 1, TP 1. A small ernie45_vl tower of patch 14 and merge 2: an image of 112
pixels is (112 / 14)^2 = 64 patches, 64 / 2^2 = 16 tokens, 18 with its start and end tokens. Two images a sample:
36 of the 256 tokens go to the vision pool, 220 to the text pool.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate, load_config
from estimator.memory.activations import layer_activations
from estimator.memory.assemble import kind_activations
from estimator.model.layers import LayerKind
from estimator.model.resolve import resolve
from tests.conftest import make_config

MODEL = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=128, normalization="RMSNorm",
             gated_linear_unit=True, hidden_dropout=0.0, attention_dropout=0.0, ffn_hidden_size=512,
             num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=128, moe_vision_ffn_hidden_size=64,
             moe_shared_expert_intermediate_size=256, moe_layer_freq=[0, 1], moe_router_score_function="sigmoid",
             moe_router_enable_expert_bias=True,
             vision_model_type="ernie45_vl", vision_num_layers=1, vision_hidden_size=64, vision_num_attention_heads=4,
             vision_ffn_hidden_size=128, vision_patch_size=14, vision_temporal_patch_size=1)
KIND = LayerKind("attention", "moe")
TRAINING = {"seq_length": 256, "image_resolution": 112}


def _mlp(images, par=None, **tr):
    r = resolve(load_config(make_config(MODEL, par, {**TRAINING, "images_per_sample": images, **tr})))
    return layer_activations(r, KIND, parts=True)


def test_one_moe_layer_with_two_images_by_hand():
    """The MoE block of one layer, one micro-batch (bytes, 2 B per element, T = 256 tokens, h = 256):

    - the pre-MLP norm's input and output, 2 x 2 x 256 x 256 = 262,144;
    - the pools' input rows, index copies the routers keep: 36 + 220 = 256 rows, 2 x 256 x 256 = 131,072;
    - the routers (sigmoid, expert bias, top-2; estimator/model/layers/router.py): per token 8 x 2 int64 indices
      + 4 x 8 fp32 scores + 4 x 2 top-k scores + 4 their sum = 60 B, over both pools' 256 tokens 15,360;
    - text experts, 220 x 2 = 440 rows each keeping its input (256), fc1's output (2 x 128) and the SwiGLU's
      output (128): 2 x 640 = 1,280 B a row, 563,200;
    - vision experts, 36 x 2 = 72 rows of 2 x (256 + 2 x 64 + 64) = 896 B, 64,512;
    - the shared experts on all 256 tokens: fc1's output 2 x 256 x 512 = 262,144 and fc2's input 2 x 256 x 256 =
      131,072: 393,216.

    In all 1,429,504. Without images every token is a text token: 512 rows x 1,280 = 655,360 in place of 563,200 +
    64,512, 27,648 more (72 rows x the 384 B a text row keeps more than a vision row); nothing per token changes."""
    two, none = _mlp(2), _mlp(0)
    assert two.mlp == 1_429_504
    assert (two.parts["expert_in"], two.parts["expert_fc1_out"], two.parts["expert_act_out"]) == (
        2 * 256 * (440 + 72), 2 * (440 * 256 + 72 * 128), 2 * (440 * 128 + 72 * 64))
    assert two.parts["router"] == 15_360 == none.parts["router"]
    assert none.mlp - two.mlp == 27_648
    assert two.attention == none.attention


def test_the_backward_working_set_is_one_pool_at_a_time():
    """Each pool's backward runs on its own rows. The text pool's 440 rows: fc1's data gradient beside its output
    gradient 2 x 440 x (256 + 256) = 450,560, or two re-sorted copies of the expert-output gradient (8 local experts)
    2 x 2 x 440 x 256 = 450,560; the vision pool's 72 rows less (73,728). The larger, 450,560, not their sum; with
    no image, 512 text rows: 2 x 2 x 512 x 256 = 524,288."""
    assert _mlp(2).backward_peak == 450_560
    assert _mlp(0).backward_peak == 524_288


def test_routing_imbalance_applies_to_each_pools_busiest_rank():
    """training.moe_overload_factor 1.5 with EP 4 (4 GPUs, 2 local experts a pool): each pool's dispatcher sends its
    busiest rank 1.5 x its balanced rows, rounded down: text int(440 x 1.5) = 660, vision int(72 x 1.5) = 108, both
    taken on one rank (a bound: the two busiest ranks may differ). Experts 660 x 1,280 + 108 x 896 = 941,568, against
    627,712 balanced: 313,856 more; the per-token tensors stay."""
    par = {"expert_model_parallel_size": 4}
    one, more = _mlp(2, par, world_size=4), _mlp(2, par, world_size=4, moe_overload_factor=1.5)
    experts = lambda a: a.parts["expert_in"] + a.parts["expert_fc1_out"] + a.parts["expert_act_out"]
    assert (experts(one), experts(more)) == (627_712, 941_568)
    assert more.mlp - one.mlp == 313_856


def test_moe_recompute_keeps_what_is_outside_the_pools_checkpoints():
    """recompute_modules [moe]: each pool's MoELayer checkpoints itself (MoELayer.forward, moe_layer_recompute) and
    keeps its input, the index copies (131,072); the shared experts, outside both pools, keep their 393,216 and the
    norm output their fc1 reads (131,072): 655,360. shared_experts recompute is MoELayer's (shared_experts_compute),
    which ErnieMultiTypeMoE never calls: nothing changes."""
    tr = {"recompute_granularity": "selective"}
    assert _mlp(2, **tr, recompute_modules=["moe"]).mlp == 655_360
    assert _mlp(2, **tr, recompute_modules=["shared_experts"]).mlp == _mlp(2).mlp


def test_an_estimate_with_images_runs_and_grows_with_them():
    """The whole estimate: one image more moves 18 tokens a sequence from the text pool to the vision pool and adds
    the tower's activations on the first stage."""
    runs = [estimate(make_config(MODEL, None, {**TRAINING, "images_per_sample": n})) for n in (0, 1, 2)]
    assert runs[0].stages[0].activations_bytes < runs[1].stages[0].activations_bytes \
        < runs[2].stages[0].activations_bytes


def test_image_tokens_with_their_start_and_end_tokens_must_fit():
    """15 images of 16 tokens fit in 256 (240), not with their 2 x 15 start and end tokens (270): the error names
    the field, the value and the count."""
    with pytest.raises(ConfigError) as exc:
        estimate(make_config(MODEL, None, {**TRAINING, "images_per_sample": 15}))
    p = {p.field: p for p in exc.value.problems}["training.images_per_sample"]
    assert p.value == 15 and "270" in str(exc.value)


def test_expert_parallel_overlap_is_refused_by_name():
    """Megatron-LM @ d98e8a64 : megatron/core/models/common/fine_grained_callables.py builds the schedule nodes of a
    layer whose MLP is not an MoELayer as a dense layer's; ErnieMultiTypeMoE is not one. Refused even text-only (the
    language model alone, no tower)."""
    lm = {k: v for k, v in MODEL.items() if not k.startswith("vision_")}
    with pytest.raises(UnsupportedError, match="ERNIE-VL's two-pool MoE block"):
        estimate(make_config(lm, {"expert_model_parallel_size": 2},
                             {**TRAINING, "world_size": 2, "overlap_moe_expert_parallel_comm": True}))


def test_the_assumptions_say_how_the_tokens_are_split():
    """The estimate names the split (36 of 256 tokens: 2 images x (16 + 2)) and that Megatron-Bridge's generic VLM
    step, which passes no moe_mm_token_type_ids, leaves every token in the text pool."""
    text = " ".join(estimate(make_config(MODEL, None, {**TRAINING, "images_per_sample": 2})).assumptions)
    assert "36 tokens of each 256-token sequence" in text and "GenericVisualInputs" in text
    text = " ".join(estimate(make_config(MODEL, None, TRAINING)).assumptions)
    assert "no image tokens, every token routed to the text pool" in text


def test_hybridep_budget_with_images_is_refused_by_name():
    """HybridEP's per-rank budget (and its paged stash) would be one budget per pool: not modelled with images."""
    model = {**MODEL, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
             "moe_expert_rank_capacity_factor": 1.5}
    with pytest.raises(UnsupportedError, match="moe_expert_rank_capacity_factor with model.moe_vision_ffn_hidden_size"):
        estimate(make_config(model, {"expert_model_parallel_size": 2},
                             {**TRAINING, "world_size": 2, "images_per_sample": 1}))


def test_sequence_parallel_ranks_take_an_even_share_of_the_image_tokens():
    """TP 2 with sequence parallelism (expert TP 2): a rank holds 128 of the 256 tokens, 128 x 36 / 256 = 18 of
    them vision tokens, 110 text. Expert TP gathers its 2 ranks' rows: text 110 x 2 x 2 = 440, vision 18 x 2 x 2 =
    72, each expert's widths halved: a text row keeps 2 x (256 + 2 x 64 + 64) = 896 B, a vision row 2 x (256 + 2 x 32
    + 32) = 704 B: 394,240 + 50,688 = 444,928."""
    a = _mlp(2, {"tensor_model_parallel_size": 2}, world_size=2, sequence_parallel=True)
    assert a.parts["expert_in"] + a.parts["expert_fc1_out"] + a.parts["expert_act_out"] == 444_928


def test_a_frozen_language_model_drops_each_pools_weight_gradient_inputs():
    """training.freeze_language_model (the tower trained): frozen linears keep no input for a weight gradient
    (estimator/memory/features/frozen_language.py), per pool. Of the 1,429,504 B of test_one_moe_layer_with_two_images
    the experts' inputs go, 2 x 256 x (440 + 72) = 262,144, and their SwiGLU outputs (fc2's inputs), 2 x (440 x 128 +
    72 x 64) = 121,856, and the shared experts' fc2 input, 2 x 256 x 256 = 131,072: 914,432 stay. Text-only, 512
    text rows: 1,457,152 - 262,144 - 2 x 512 x 128 - 131,072 = 932,864."""
    def frozen(images):
        r = resolve(load_config(make_config(MODEL, None, {**TRAINING, "images_per_sample": images,
                                                          "freeze_language_model": True})))
        return kind_activations(r)[list(r.kinds).index(KIND)].mlp

    assert (frozen(2), frozen(0)) == (914_432, 932_864)
