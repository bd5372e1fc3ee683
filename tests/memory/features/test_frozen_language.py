"""A frozen language model (training.freeze_language_model, estimator/memory/features/frozen_language.py): weights
only for the language model, gradients and optimizer states for the trained part of the vision tower, and the
decoder's saved tensors without the frozen linears' inputs. Expected values are worked out by hand in each docstring.

Model (tests/memory/test_vision.py): a GPT of 4 layers, h 512, 8 heads, vocabulary 1000, Megatron's default SwiGLU
width int(4 x 512 x 2/3 / 64) x 64 = 1344, sequence 4096, micro-batch 1, one GPU, bf16 weights, fp32 gradients,
Adam (12 B per trained parameter); a vision tower whose merger has 197,504 parameters and whose encoder 312,768.
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from tests.conftest import make_config
from tests.memory.test_vision import ENCODER, MERGER, MODEL, VIT

#: Qwen3-VL's pretrain recipes: the encoder and the language model frozen, the merger trained.
RECIPE = dict(images_per_sample=2, freeze_vision_model=True, freeze_language_model=True)


def _stage(model=VIT, parallelism=None, **training):
    return estimate(make_config(model, parallelism, training)).stages


def test_only_the_merger_keeps_gradients_and_optimizer_states():
    """Everything but the merger frozen: gradients 4 B x 197,504 = 790,016, optimizer states 12 B x 197,504 =
    2,370,048; the weights stay those of the run with the language model trained (2 B per parameter)."""
    trained = _stage(images_per_sample=2, freeze_vision_model=True)[0]
    frozen = _stage(**RECIPE)[0]
    assert (frozen.gradients_bytes, frozen.optimizer_bytes) == (790_016, 2_370_048)
    assert frozen.weights_bytes == trained.weights_bytes


def test_a_trained_tower_with_a_frozen_language_model():
    """Encoder and merger trained: 4 B and 12 B x (312,768 + 197,504 = 510,272) = 2,041,088 and 6,123,264."""
    s = _stage(images_per_sample=2, freeze_language_model=True)[0]
    assert (s.gradients_bytes, s.optimizer_bytes) == (4 * (ENCODER + MERGER), 12 * (ENCODER + MERGER)) \
        == (2_041_088, 6_123_264)


def test_the_frozen_linears_save_no_inputs():
    """B = 2 bytes, T = 4096 tokens (no tensor or sequence parallelism). Per layer the frozen QKV linear drops its
    input (the attention norm's output, 2 x 4096 x 512 = 4,194,304), fc1 its input (the MLP norm's output, 4,194,304)
    and fc2 its input (the SwiGLU output, 2 x 4096 x 1344 = 11,010,048): 19,398,656 a layer, 77,594,624 for 4; the
    frozen output layer (Megatron-Core's LinearWithFrozenWeight) does not keep the final norm's output,
    2 x 4096 x 512 = 4,194,304. Together 81,788,928 bytes less. The merger's own tensors stay (its inputs come from
    the frozen encoder but its weights train)."""
    trained = _stage(images_per_sample=2, freeze_vision_model=True)[0]
    frozen = _stage(**RECIPE)[0]
    assert trained.activations_bytes - frozen.activations_bytes == 81_788_928
    assert trained.activations["output"] - frozen.activations["output"] == 4_194_304
    assert frozen.activations["embedding"] == trained.activations["embedding"] == 815_360


def test_no_weight_gradient_buffers_for_the_frozen_weights():
    """Transformer Engine makes its dummy weight-gradient tensors only for weights that need a gradient: none is
    left on a stage whose weights are all frozen."""
    assert "te_dummy_wgrad" in _stage(images_per_sample=2, freeze_vision_model=True)[0].transient
    assert "te_dummy_wgrad" not in _stage(**RECIPE)[0].transient


def test_a_stage_without_the_tower_trains_nothing():
    """PP 2: the tower sits on stage 0, so stage 1 (layers 3-4, the output layer) has no gradient and no optimizer
    state; its weights stay."""
    par = {"pipeline_model_parallel_size": 2}
    trained = _stage(VIT, par, world_size=2, images_per_sample=2, freeze_vision_model=True)
    frozen = _stage(VIT, par, world_size=2, **RECIPE)
    assert (frozen[1].gradients_bytes, frozen[1].optimizer_bytes) == (0, 0)
    assert frozen[1].weights_bytes == trained[1].weights_bytes
    assert (frozen[0].gradients_bytes, frozen[0].optimizer_bytes) == (790_016, 2_370_048)


@pytest.mark.parametrize("model, training, words", [
    (MODEL, {"freeze_language_model": True}, "needs a model with a vision tower"),
    (VIT, {"freeze_language_model": True, "freeze_vision_model": True, "freeze_vision_projection": True},
     "nothing trains"),
    (VIT, {"freeze_language_model": True, "peft": "lora"}, "training.peft"),
    (VIT, {"freeze_language_model": True, "reserved_memory_model": "replay"}, "replay"),
])
def test_bad_combinations_name_the_field(model, training, words):
    with pytest.raises(ConfigError, match=words) as err:
        estimate(make_config(model, None, training))
    assert "training.freeze_language_model" in str(err.value)


def test_the_layout_search_does_not_prune_by_trained_states():
    """The search's plain-Adam lower bound on model states does not hold with the language model frozen (its states
    shrink to the weights): on 8 GPUs every layout it returns carries the estimate's own peak."""
    import estimator
    res = estimator.search(make_config(VIT, None, {**RECIPE, "world_size": 8}), num_gpus=8, gpu="H100-80GB")
    assert res.layouts
    for layout in res.layouts[:4]:
        assert layout.peak_device_bytes == estimate(layout.config).peak.device_bytes


GRAPHS = {"cuda_graph_impl": "transformer_engine"}


def test_graphed_layers_hold_the_frozen_layers_tensors():
    """Qwen3-VL's performance recipes graph the language model's layers (Megatron-Core's TECudaGraphHelper takes the
    model's ``decoder``, which Qwen3VLModel exposes as its language model's; the tower gets cuda_graph_impl none) with
    the language model frozen. Whole layers captured (no cuda_graph_modules), one micro-batch in flight: the capture
    peak holds the 4 layers' saved tensors, which frozen are 4 x 19,398,656 = 77,594,624 bytes fewer than trained
    (test_the_frozen_linears_save_no_inputs); the static buffers are a hidden-states input and output per layer,
    2 x 2 B x 4096 x 512 = 8,388,608, and the boolean causal mask [1, 1, 4096, 4096] of its attention, 16,777,216:
    4 layers x 25,165,824 = 100,663,296 bytes, frozen or not; and neither the tower nor the loss runs at the
    capture, so the embedding chunk's 815,360 bytes (the tower's) and the output's are not held then."""
    frozen = _stage(**RECIPE, **GRAPHS)[0]
    trained = _stage(images_per_sample=2, freeze_vision_model=True, **GRAPHS)[0]
    assert frozen.peak_phase == trained.peak_phase
    assert frozen.transient["cuda_graph_static_buffers"] == trained.transient["cuda_graph_static_buffers"] \
        == 100_663_296
    held = {k: v for k, v in frozen.activations.items() if k in ("attention", "mlp")}
    held_trained = {k: v for k, v in trained.activations.items() if k in ("attention", "mlp")}
    assert sum(held_trained.values()) - sum(held.values()) == 77_594_624
    assert frozen.activations["not_run_at_capture"] == -(815_360 + frozen.activations["output"])
    assert frozen.activations["embedding"] == 815_360


def test_graphs_keep_the_frozen_model_states():
    """The graphs change no state: only the merger's 197,504 parameters keep gradients and Adam states
    (790,016 and 2,370,048 bytes) with the graphs on too."""
    s = _stage(**RECIPE, **GRAPHS)[0]
    assert (s.gradients_bytes, s.optimizer_bytes) == (790_016, 2_370_048)


def test_graphed_router_with_frozen_shared_experts_is_refused_by_name():
    """The router region's graph holds the shared experts' saved tensors, counted from the trained layer's parts;
    frozen they keep fewer, which is not modelled: refused by name rather than estimated high."""
    from estimator.config.errors import UnsupportedError
    moe = {**VIT, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 256,
           "moe_shared_expert_intermediate_size": 256}
    with pytest.raises(UnsupportedError, match="frozen shared experts"):
        estimate(make_config(moe, None, {**RECIPE, **GRAPHS, "cuda_graph_modules": ["moe_router"]}))
    assert _stage(moe, None, **RECIPE, **GRAPHS, cuda_graph_modules=["attn"])[0].transient   # no router graph


# ------------------------------------------------- frozen MTP layers (training.freeze_mtp, bridgeref29)
MTP = {**MODEL, "mtp_num_layers": 1}


def test_frozen_mtp_layer_keeps_weights_only():
    """One MTP layer on the 4-layer GPT (h 512, SwiGLU 1344, RMSNorm): eh_proj 2h x h = 524,288, enorm + hnorm +
    final norm 3 x 512 = 1,536, its transformer layer QKV 512 x 1536 = 786,432 + projection 262,144 + fc1
    512 x 2688 = 1,376,256 + fc2 688,128 + two norms 1,024 = 3,113,984: 3,639,808 parameters. Frozen, they lose
    4 B of gradient and 12 B of Adam state each: 14,559,232 and 43,677,696 bytes; the weights stay."""
    trained = _stage(MTP)[0]
    frozen = _stage(MTP, freeze_mtp=True)[0]
    assert trained.gradients_bytes - frozen.gradients_bytes == 4 * 3_639_808 == 14_559_232
    assert trained.optimizer_bytes - frozen.optimizer_bytes == 12 * 3_639_808 == 43_677_696
    assert frozen.weights_bytes == trained.weights_bytes


def test_frozen_mtp_layer_saves_no_weight_gradient_inputs():
    """B = 2, T = 4096 tokens. The frozen MTP layer's transformer layer drops the QKV input (4,194,304), the fc1
    input (4,194,304) and the fc2 input (2 x 4096 x 1344 = 11,010,048), as a frozen decoder layer does; eh_proj
    drops its input, the two normed halves concatenated, 2 x 4096 x 1024 = 8,388,608. Together 27,787,264 bytes
    less; the decoder's own layers are unchanged."""
    trained = _stage(MTP)[0]
    frozen = _stage(MTP, freeze_mtp=True)[0]
    assert trained.activations["mtp"] - frozen.activations["mtp"] == 27_787_264
    assert trained.activations_bytes - frozen.activations_bytes == 27_787_264
    assert frozen.activations["attention"] == trained.activations["attention"]


@pytest.mark.parametrize("model, training, words", [
    (MODEL, {"freeze_mtp": True}, "needs multi-token-prediction layers"),
    (MTP, {"freeze_mtp": True, "peft": "lora"}, "training.peft"),
    (MTP, {"freeze_mtp": True, "reserved_memory_model": "replay"}, "replay"),
])
def test_frozen_mtp_bad_combinations_name_the_field(model, training, words):
    with pytest.raises(ConfigError, match=words) as err:
        estimate(make_config(model, None, training))
    assert "training.freeze_mtp" in str(err.value)


def test_exaone45_frozen_language_model_with_its_mtp_frozen_too():
    """Exaone45Model.freeze keeps the MTP layers trained under freeze_language_model unless freeze_mtp_model: that
    stays refused; with freeze_mtp the whole language model is frozen and only the tower trains, so the gradients and
    optimizer states are those of the same model without an MTP layer and its language model frozen."""
    ex = {**MTP, **{k: v for k, v in VIT.items() if k not in MODEL}, "vision_model_type": "exaone45"}
    with pytest.raises(ConfigError, match="freeze_mtp"):
        estimate(make_config(ex, None, {"images_per_sample": 2, "freeze_language_model": True}))
    both = _stage(ex, images_per_sample=2, freeze_language_model=True, freeze_mtp=True)[0]
    no_mtp = _stage({k: v for k, v in ex.items() if k != "mtp_num_layers"}, images_per_sample=2,
                    freeze_language_model=True)[0]
    assert (both.gradients_bytes, both.optimizer_bytes) == (no_mtp.gradients_bytes, no_mtp.optimizer_bytes)
    assert both.gradients_bytes > 0
