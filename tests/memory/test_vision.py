"""The vision tower in the memory estimate (estimator/memory/vision.py): on the first pipeline stage only, trained
(weights, gradients, optimizer states) or frozen (weights only), and the activations of the images of a
micro-batch; the expected values are worked out by hand in each docstring.

Model: a small GPT (4 layers, h 512) with a tower of 2 layers, hv 64, 4 heads, MLP 128, patch 16, 2 frames,
3 channels, 2304 positions, merge 2, output 512 (the language model's h). Its parameters by hand:
patch embedding 3 x 2 x 16^2 x 64 + 64 = 98,368; positions 2304 x 64 = 147,456 (both replicated);
each layer: LayerNorms 4 x 64 = 256 and the replicated biases of proj and fc2 2 x 64 = 128 (replicated),
qkv 3 x 64^2 + 3 x 64 = 12,480, proj 64^2 = 4096, fc1 64 x 128 + 128 = 8320, fc2 128 x 64 = 8192 (sharded, 33,088);
merger: LayerNorm 2 x 64 and fc2's bias 512 replicated (640), fc1 256^2 + 256 = 65,792 and fc2 256 x 512 = 131,072
sharded (196,864). Encoder: 98,368 + 147,456 + 2 x (33,088 + 384) = 312,768; merger 197,504; tower 510,272.
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError, UnsupportedError
from tests.conftest import make_config

MODEL = dict(num_layers=4, hidden_size=512, num_attention_heads=8, vocab_size=1000)
VIT = {**MODEL, "vision_num_layers": 2, "vision_hidden_size": 64, "vision_num_attention_heads": 4,
       "vision_ffn_hidden_size": 128}
ENCODER, MERGER = 312_768, 197_504


def _est(model=VIT, parallelism=None, **training):
    return estimate(make_config(model, parallelism, training))


def test_the_tower_is_counted_and_sits_on_the_first_stage():
    """PP 2: stage 0 holds the 510,272 tower parameters more, stage 1 nothing of it."""
    base = _est(MODEL, {"pipeline_model_parallel_size": 2}, world_size=2)
    vit = _est(VIT, {"pipeline_model_parallel_size": 2}, world_size=2)
    assert vit.parameters.total - base.parameters.total == vit.parameters.vision == ENCODER + MERGER
    assert vit.stages[0].parameters - base.stages[0].parameters == ENCODER + MERGER
    assert vit.stages[1].parameters == base.stages[1].parameters
    assert vit.stages[1].device_bytes == base.stages[1].device_bytes


def test_tensor_parallelism_splits_the_sharded_part():
    """TP 2: per GPU the replicated 98,368 + 147,456 + 2 x 384 + 640 = 247,232 and half of the sharded
    2 x 33,088 + 196,864 = 263,040: 247,232 + 131,520 = 378,752."""
    base = _est(MODEL, {"tensor_model_parallel_size": 2}, world_size=2)
    vit = _est(VIT, {"tensor_model_parallel_size": 2}, world_size=2)
    assert vit.stages[0].parameters - base.stages[0].parameters == 378_752


def test_frozen_parts_keep_their_weights_only():
    """bf16 weights, fp32 gradients, Adam with fp32 masters, one data-parallel rank: a trained parameter costs
    2 + 4 + 12 bytes, a frozen one 2. Frozen encoder (freeze_vision_model): the merger trained. Both frozen: the
    whole tower 2 bytes a parameter, no gradients or optimizer states."""
    base, trained = _est(MODEL).stages[0], _est(VIT).stages[0]
    enc = _est(VIT, freeze_vision_model=True).stages[0]
    both = _est(VIT, freeze_vision_model=True, freeze_vision_projection=True).stages[0]
    n = ENCODER + MERGER
    assert (trained.weights_bytes - base.weights_bytes, trained.gradients_bytes - base.gradients_bytes,
            trained.optimizer_bytes - base.optimizer_bytes) == (2 * n, 4 * n, 12 * n)
    assert (enc.weights_bytes - base.weights_bytes, enc.gradients_bytes - base.gradients_bytes,
            enc.optimizer_bytes - base.optimizer_bytes) == (2 * n, 4 * MERGER, 12 * MERGER)
    assert (both.weights_bytes - base.weights_bytes, both.gradients_bytes, both.optimizer_bytes) == (
        2 * n, base.gradients_bytes, base.optimizer_bytes)


def test_images_add_the_merger_activations_when_only_the_merger_trains():
    """2 images of 448 pixels: (448 / 16)^2 = 784 patches each, N = 1568 patches, 392 merged tokens. With the
    encoder frozen the merger keeps its LayerNorm input and output 2 x 2 B x 1568 x 64 = 401,408, the fp32
    statistics 8 x 1568 = 12,544, fc1's output and the GELU's 2 x 2 B x 392 x 256 = 401,408: 815,360 bytes for one
    micro-batch (one in flight). Both frozen: nothing."""
    frozen = dict(freeze_vision_model=True)
    no_images = _est(VIT, **frozen).stages[0].activations_bytes
    images = _est(VIT, images_per_sample=2, **frozen).stages[0].activations_bytes
    assert images - no_images == 815_360
    both = dict(freeze_vision_model=True, freeze_vision_projection=True)
    assert _est(VIT, images_per_sample=2, **both).stages[0].activations_bytes == no_images


def test_a_trained_tower_keeps_much_more_and_recompute_cuts_it():
    """The trained tower keeps the patch embedding's input (2 B x 1568 x 3 x 2 x 256 = 4,816,896 bytes) and both
    layers' tensors on top of the merger's; full recompute (uniform, 1 layer) keeps each layer's input instead."""
    merger_only = _est(VIT, images_per_sample=2, freeze_vision_model=True).stages[0].activations_bytes
    trained = _est(VIT, images_per_sample=2).stages[0].activations_bytes
    assert trained - merger_only > 4_816_896 + 2 * (12 * 2 * 1568 * 64)
    full = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    no_img = _est(VIT, **full).stages[0].activations_bytes
    with_img = _est(VIT, images_per_sample=2, **full).stages[0].activations_bytes
    assert with_img - no_img == 815_360 + 4_816_896 + 2 * (2 * 1568 * 64)


def test_more_images_more_activations():
    one = _est(VIT, images_per_sample=1).stages[0].activations_bytes
    four = _est(VIT, images_per_sample=4).stages[0].activations_bytes
    assert four > one > _est(VIT).stages[0].activations_bytes


@pytest.mark.parametrize("model, training, parallelism, words", [
    (MODEL, {"images_per_sample": 1}, None, "training.images_per_sample"),
    (MODEL, {"freeze_vision_model": True}, None, "training.freeze_vision_model"),
    ({**MODEL, "vision_num_layers": 2}, {}, None, "model.vision_hidden_size"),
    (VIT, {"images_per_sample": 1, "image_resolution": 500}, None, "training.image_resolution"),
    (VIT, {"images_per_sample": 30}, None, "must fit in the sequence"),
    ({**VIT, "vision_num_attention_heads": 3}, {"world_size": 2}, {"tensor_model_parallel_size": 2},
     "model.vision_num_attention_heads"),
])
def test_bad_vision_settings_name_the_field(model, training, parallelism, words):
    with pytest.raises(ConfigError, match=words):
        estimate(make_config(model, parallelism, training))


def test_recipe_features_with_a_tower_are_refused_by_name():
    with pytest.raises(UnsupportedError, match="vision tower"):
        estimate(make_config(VIT, None, {"peft": "lora"}))


def test_the_tower_stays_bf16_in_an_fp8_run():
    """Megatron-Bridge's vision config copies no fp8 setting (modelling_qwen3_vl/transformer_config.py
    ``get_vision_model_config``): in an FP8 run the tower's 510,272 parameters still cost 2 bytes of weights each,
    with no FP8 copies, as in a bf16 run."""
    fp8 = {"fp8": True}
    base = estimate(make_config(MODEL, None, None, fp8)).stages[0]
    vit = estimate(make_config(VIT, None, None, fp8)).stages[0]
    assert vit.weights_bytes - base.weights_bytes == 2 * (ENCODER + MERGER)


def test_the_exports_refuse_the_tower_by_name():
    """pretrain_gpt.py builds no vision tower: the Megatron-LM export (and the Bridge export written from it) names
    the field rather than describe another model."""
    from estimator.formats.bridge.export import to_bridge_overrides
    from estimator.formats.megatron_export import to_megatron_args
    for export in (to_megatron_args, to_bridge_overrides):
        with pytest.raises(UnsupportedError, match="model.vision_num_layers"):
            export(make_config(VIT))


def test_the_assumptions_describe_the_tower_and_the_images():
    """2 images of 448 pixels: 784 patches and 196 language-model tokens each."""
    text = " ".join(_est(VIT, images_per_sample=2, freeze_vision_model=True).assumptions)
    assert "Vision tower (2 ViT layers, 510,272 parameters a GPU, encoder frozen, merger trained)" in text
    assert "784 patches and 196 tokens each" in text


# Qwen3-VL's deepstack mergers (vision_deepstack_mergers): each a patch merger whose LayerNorm spans the merged
# width M^2 hv = 256 (use_postshuffle_norm): LayerNorm 2 x 256 = 512 and fc2's bias 512 replicated (1024),
# fc1 256^2 + 256 = 65,792 and fc2 256 x 512 = 131,072 sharded (196,864); 197,888 each.
DEEP = {**VIT, "vision_deepstack_mergers": 2}
DEEPSTACK = 197_888


def test_deepstack_mergers_are_counted_with_the_tower():
    """Two deepstack mergers: 510,272 + 2 x 197,888 = 906,048 tower parameters, all on the first stage."""
    base = _est(MODEL)
    deep = _est(DEEP)
    assert deep.parameters.vision == ENCODER + MERGER + 2 * DEEPSTACK == 906_048
    assert deep.stages[0].parameters - base.stages[0].parameters == 906_048


def test_deepstack_mergers_split_over_tensor_parallel_ranks():
    """TP 2: 378,752 per GPU for the tower without them (above), plus per merger 1024 replicated and
    196,864 / 2 = 98,432 sharded: 378,752 + 2 x 99,456 = 577,664."""
    base = _est(MODEL, {"tensor_model_parallel_size": 2}, world_size=2)
    deep = _est(DEEP, {"tensor_model_parallel_size": 2}, world_size=2)
    assert deep.stages[0].parameters - base.stages[0].parameters == 577_664


def test_freeze_vision_projection_freezes_the_deepstack_mergers_too():
    """Megatron-Bridge's Qwen3VLModel.freeze: freeze_vision_model leaves the merger and the deepstack mergers
    trained (gradients 4 B x (197,504 + 2 x 197,888) = 4 x 593,280); freeze_vision_projection freezes them all
    (no gradient, no optimizer state for the tower; its weights 2 B x 906,048 stay)."""
    base = _est(MODEL).stages[0]
    enc = _est(DEEP, freeze_vision_model=True).stages[0]
    both = _est(DEEP, freeze_vision_model=True, freeze_vision_projection=True).stages[0]
    assert enc.gradients_bytes - base.gradients_bytes == 4 * 593_280
    assert enc.optimizer_bytes - base.optimizer_bytes == 12 * 593_280
    assert (both.weights_bytes - base.weights_bytes, both.gradients_bytes, both.optimizer_bytes) == (
        2 * 906_048, base.gradients_bytes, base.optimizer_bytes)


def test_deepstack_merger_activations_by_hand():
    """2 images of 448 pixels: N = 1568 patches, 392 merged rows, B = 2 bytes.

    Encoder frozen (its layers keep nothing), so each deepstack merger keeps its LayerNorm's input and output
    2 x 2 x 1568 x 64 = 401,408, its fp32 statistics 8 x 392 = 3,136 and fc1's and the GELU's outputs
    2 x 2 x 392 x 256 = 401,408: 805,952 each; with the final merger's 815,360: 815,360 + 2 x 805,952 = 2,427,264.
    Encoder trained, no recompute: the LayerNorm's input is the next tower layer's input, kept already, so each
    adds 200,704 + 3,136 + 401,408 = 605,248 over the tower without deepstack mergers (1,210,496 for two).
    Full recompute: they run inside the checkpointed layers and keep nothing."""
    frozen = dict(freeze_vision_model=True)
    assert (_est(DEEP, images_per_sample=2, **frozen).stages[0].activations_bytes
            - _est(DEEP, **frozen).stages[0].activations_bytes) == 2_427_264
    assert (_est(DEEP, images_per_sample=2).stages[0].activations_bytes
            - _est(VIT, images_per_sample=2).stages[0].activations_bytes) == 1_210_496
    full = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    assert (_est(DEEP, images_per_sample=2, **full).stages[0].activations_bytes
            == _est(VIT, images_per_sample=2, **full).stages[0].activations_bytes)


@pytest.mark.parametrize("model, words", [
    ({**MODEL, "vision_deepstack_mergers": 1}, "model.vision_deepstack_mergers"),
    ({**VIT, "vision_deepstack_mergers": 3}, "at most vision_num_layers"),
])
def test_bad_deepstack_settings_name_the_field(model, words):
    with pytest.raises(ConfigError, match=words):
        estimate(make_config(model))


# The qwen2_5_vl tower (Qwen2.5-VL: Hugging Face's module, whole on every tensor-parallel rank) of the same shape.
# Its parameters by hand: patch embedding without bias 3 x 2 x 16^2 x 64 = 98,304; no learned positions; each
# layer: RMSNorms 2 x 64 = 128, qkv 3 x 64^2 + 3 x 64 = 12,480, proj 64^2 + 64 = 4160, gate and up
# 2 x (64 x 128 + 128) = 16,640, down 128 x 64 + 64 = 8256: 41,664; merger: RMSNorm 64, fc1 256^2 + 256 = 65,792,
# fc2 256 x 512 + 512 = 131,584: 197,440. Encoder 98,304 + 2 x 41,664 = 181,632; tower 379,072.
VIT25 = {**VIT, "vision_model_type": "qwen2_5_vl"}
ENCODER25, MERGER25 = 181_632, 197_440


def test_the_qwen2_5_vl_tower_is_counted_by_hand():
    vit = _est(VIT25)
    assert vit.parameters.vision == ENCODER25 + MERGER25 == 379_072
    assert vit.stages[0].parameters - _est(MODEL).stages[0].parameters == 379_072


def test_the_qwen2_5_vl_tower_is_whole_on_every_tensor_parallel_rank():
    """TP 2 splits the language model but not this tower: each GPU holds all 379,072 of its parameters (where a
    qwen3_vl tower of the same widths holds 378,752 of its 510,272)."""
    base = _est(MODEL, {"tensor_model_parallel_size": 2}, world_size=2)
    vit = _est(VIT25, {"tensor_model_parallel_size": 2}, world_size=2)
    assert vit.stages[0].parameters - base.stages[0].parameters == 379_072


def test_the_qwen2_5_vl_tower_needs_no_tensor_parallel_divisibility():
    """4 heads and TP 8: refused for the split qwen3_vl tower, accepted for the replicated one."""
    par = {"tensor_model_parallel_size": 8}
    with pytest.raises(ConfigError, match="vision_num_attention_heads"):
        _est({**VIT, "num_attention_heads": 8}, par, world_size=8)
    _est({**VIT25, "num_attention_heads": 8}, par, world_size=8)


def test_qwen2_5_vl_frozen_parts_keep_their_weights_only():
    """As for the qwen3_vl tower: trained 2 + 4 + 12 bytes a parameter, frozen 2 (bf16 weights, fp32 gradients,
    Adam with fp32 masters, one data-parallel rank)."""
    base, enc = _est(MODEL).stages[0], _est(VIT25, freeze_vision_model=True).stages[0]
    n = ENCODER25 + MERGER25
    assert (enc.weights_bytes - base.weights_bytes, enc.gradients_bytes - base.gradients_bytes,
            enc.optimizer_bytes - base.optimizer_bytes) == (2 * n, 4 * MERGER25, 12 * MERGER25)


def test_qwen2_5_vl_activations_by_hand():
    """2 images of 448 pixels: N = 1568 patches, B = 2 bytes, hv 64, fv 128, 4 heads (head width 16).

    Each layer keeps (8 + 11 B) N hv + 4 B N fv + 8 N + 4 N heads = 30 x 1568 x 64 + 8 x 1568 x 128 + 8 x 1568
    + 16 x 1568 = 3,010,560 + 1,605,632 + 12,544 + 25,088 = 4,653,824, two layers 9,307,648; the patch embedding's
    input 2 x 1568 x 3 x 2 x 256 = 4,816,896; the rotary cos and sin 2 x 4 x 1568 x 16 = 200,704; the merger
    (4 + 4 B) N hv + 4 N = 1,204,224 + 6,272 = 1,210,496. Total 15,535,744 bytes for one micro-batch. The same at
    TP 2 (every rank runs the whole tower on every image) and under full recompute (the language model's recompute
    does not reach Hugging Face's module). Encoder frozen: the merger's 4 B N hv = 802,816."""
    def added(par=None, **training):
        world = {"world_size": (par or {}).get("tensor_model_parallel_size", 1)}
        return (_est(VIT25, par, images_per_sample=2, **world, **training).stages[0].activations_bytes
                - _est(VIT25, par, **world, **training).stages[0].activations_bytes)
    assert added() == 15_535_744
    assert added({"tensor_model_parallel_size": 2}) == 15_535_744
    assert added(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1) == 15_535_744
    assert added(freeze_vision_model=True) == 802_816
    assert added(freeze_vision_model=True, freeze_vision_projection=True) == 0


@pytest.mark.parametrize("model, words", [
    ({**VIT25, "vision_deepstack_mergers": 1}, "applies only to the qwen3_vl tower"),
    ({**VIT25, "vision_num_position_embeddings": 1024}, "positions are rotary"),
    ({**MODEL, "vision_model_type": "qwen2_5_vl"}, "model.vision_model_type"),
    ({**VIT, "vision_model_type": "siglip9"}, "vision_model_type"),
    ({**VIT, "vision_model_type": "gemma3_vl"}, "must be 1 for the gemma3_vl tower"),
    ({**VIT, "vision_model_type": "gemma3_vl", "vision_temporal_patch_size": 1,
      "vision_num_position_embeddings": 1000}, "square of the patches per image side"),
])
def test_bad_tower_kind_settings_name_the_field(model, words):
    with pytest.raises(ConfigError, match=words):
        estimate(make_config(model))


# The kimi_k25 tower (Kimi K2.5's MoonViT: the checkpoint's own module, whole on every tensor-parallel rank, with its
# PatchMergerMLP) of the same widths, one frame a patch. By hand: Conv2d with bias 3 x 16^2 x 64 + 64 = 49,216;
# positions 2304 x 64 = 147,456; each layer as qwen3_vl's, 33,472, two 66,944; final LayerNorm 128: encoder 263,744;
# merger as qwen3_vl's 197,504, all replicated. Tower 461,248.
VITK = {**VIT, "vision_model_type": "kimi_k25", "vision_temporal_patch_size": 1}


def test_the_kimi_k25_tower_by_hand_whole_on_every_rank():
    assert _est(VITK).parameters.vision == 263_744 + 197_504 == 461_248
    base = _est(MODEL, {"tensor_model_parallel_size": 2}, world_size=2)
    vit = _est(VITK, {"tensor_model_parallel_size": 2}, world_size=2)
    assert vit.stages[0].parameters - base.stages[0].parameters == 461_248


def test_kimi_k25_activations_by_hand():
    """2 images of 448 pixels: N = 1568 patches, B = 2, hv 64, fv 128, 4 heads. Each layer keeps
    10 B N hv + 2 B N fv + 16 N + 4 N heads = 2,007,040 + 802,816 + 25,088 + 25,088 = 2,860,032, two 5,720,064; the
    Conv2d's input 2 x 1568 x 3 x 256 = 2,408,448; the complex64 rotary table 4 x 1568 x 16 = 100,352;
    final_layernorm's input and statistics 200,704 + 12,544 = 213,248; the merger 4 B N hv + 8 N = 815,360.
    9,257,472 bytes, the same at TP 2; the merger's 815,360 with the tower frozen."""
    def added(par=None, **training):
        world = {"world_size": (par or {}).get("tensor_model_parallel_size", 1)}
        return (_est(VITK, par, images_per_sample=2, **world, **training).stages[0].activations_bytes
                - _est(VITK, par, **world, **training).stages[0].activations_bytes)
    assert added() == added({"tensor_model_parallel_size": 2}) == 9_257_472
    assert added(freeze_vision_model=True) == 815_360


def test_tp_comm_overlap_userbuffers_are_the_language_models():
    """The qwen3_vl tower's config sets tp_comm_overlap False (Megatron-Bridge @ 067f987d : modelling_qwen3_vl/
    transformer_config.py get_vision_model_config), so with TP 2 and sequence parallelism the userbuffers are the
    language model's alone: the same bytes with the tower as without it."""
    par = {"tensor_model_parallel_size": 2, "tp_comm_overlap": True}
    plain = _est(MODEL, par, world_size=2, sequence_parallel=True).stages[0]
    vit = _est(VIT, par, world_size=2, sequence_parallel=True, images_per_sample=2).stages[0]
    assert vit.outside_allocator["tp_comm_overlap_userbuffers"] \
        == plain.outside_allocator["tp_comm_overlap_userbuffers"] > 0


def test_expert_parallel_overlap_with_a_tower_is_refused_by_name():
    """Megatron-Core's combined 1F1B schedule asks the model for build_schedule_plan, which no Megatron-Bridge
    vision-language model defines: refused by name, not estimated as a text model's."""
    moe = {**VIT, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 256}
    with pytest.raises(UnsupportedError, match="overlap_moe_expert_parallel_comm.*build_schedule_plan"):
        _est(moe, {"expert_model_parallel_size": 2}, world_size=2, overlap_moe_expert_parallel_comm=True)


def test_other_recipe_features_with_a_tower_stay_refused():
    """The radio tower copies the language model's config, overlap included: tp_comm_overlap is refused with it."""
    radio = {**VIT, "vision_model_type": "radio", "vision_temporal_patch_size": 1, "vision_patch_size": 16,
             "vision_num_position_embeddings": 16_384, "vision_projector_ffn_hidden_size": 256}
    with pytest.raises(UnsupportedError, match="a recipe feature .*parallelism.tp_comm_overlap"):
        _est(radio, {"tensor_model_parallel_size": 2, "tp_comm_overlap": True}, world_size=2, sequence_parallel=True)


def test_the_flex_dispatchers_buffers_are_the_language_models():
    """The flex dispatcher serves MoE layers and a tower has none (get_vision_model_config sets num_moe_experts
    None): HybridEP's buffers are the same with the tower as without it."""
    moe = {"num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 256, "moe_token_dispatcher_type": "flex",
           "moe_flex_dispatcher_backend": "hybridep"}
    par = {"expert_model_parallel_size": 2}
    plain = _est({**MODEL, **moe}, par, world_size=2).stages[0]
    vit = _est({**VIT, **moe}, par, world_size=2, images_per_sample=2).stages[0]
    assert vit.outside_allocator["hybridep_buffers"] == plain.outside_allocator["hybridep_buffers"] > 0
