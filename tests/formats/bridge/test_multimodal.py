"""The multimodal providers' own fields in a Megatron-Bridge configuration
(estimator/formats/bridge/multimodal.py): freeze_vision_model / freeze_vision_projection / freeze_language_model
become the training fields when the model holds a vision tower, are refused by name without one; the others are
silent at their defaults and refused by name when set."""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import ConfigError
from estimator.formats.bridge.config import BridgeRefusedError, read_bridge_config

BASE = {"model": {"num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "seq_length": 1024,
                  "vocab_size": 1000},
        "train": {"micro_batch_size": 1, "global_batch_size": 8}}
VIT = {"vision_num_layers": 2, "vision_hidden_size": 64, "vision_num_attention_heads": 4,
       "vision_ffn_hidden_size": 128}


def _read(vision_model=None, **model):
    return read_bridge_config({**BASE, "model": {**BASE["model"], **model}}, world_size=1, vision_model=vision_model)


def test_freeze_fields_map_to_the_training_fields():
    """With the tower given, freeze_vision_model true is training.freeze_vision_model; the estimate then keeps
    no gradient for the encoder (tests/memory/test_vision.py: encoder 312,768 parameters, 4 B of fp32 gradient
    each): 1,251,072 bytes fewer than with the tower trained."""
    trained = _read(VIT, freeze_vision_model=False, freeze_language_model=False)
    frozen = _read(VIT, freeze_vision_model=True)
    assert frozen.config["training"]["freeze_vision_model"] is True
    assert "freeze_vision_model" not in trained.config.get("training", {})
    diff = (estimate(trained.config).stages[0].gradients_bytes - estimate(frozen.config).stages[0].gradients_bytes)
    assert diff == 4 * 312_768


@pytest.mark.parametrize("field", ["freeze_vision_model", "freeze_language_model"])
def test_freeze_without_a_tower_is_refused_by_name(field):
    with pytest.raises(BridgeRefusedError, match=f"model.{field} = True"):
        _read(**{field: True})


def test_freeze_language_model_maps_to_the_training_field():
    """With the tower given, freeze_language_model true is training.freeze_language_model: the language model's
    gradients go, the tower's stay (tests/memory/test_vision.py: 510,272 tower parameters, 4 B each)."""
    imp = _read(VIT, freeze_language_model=True)
    assert imp.config["training"]["freeze_language_model"] is True
    assert estimate(imp.config).stages[0].gradients_bytes == 4 * 510_272


def test_a_non_boolean_freeze_names_the_field():
    with pytest.raises(ConfigError, match="model.freeze_vision_projection"):
        _read(VIT, freeze_vision_projection="yes")


@pytest.mark.parametrize("field, value, words", [
    ("vision_cuda_graph_impl", "local", "CUDA graphs other than transformer_engine"),
    ("vit_gradient_checkpointing", True, "Qwen3-Omni"),
    ("temporal_patch_dim", 2, "NemotronOmniModelProvider only"),       # omni28: any other provider
    ("freeze_sound_encoder", True, "NemotronOmniModelProvider only"),
    ("has_sound", True, "NemotronOmniModelProvider only"),
    ("separate_video_embedder", True, "NemotronOmniModelProvider only"),
    ("freeze_audio_model", True, "Qwen-Omni"),
    ("multimodal_attn_impl", "sdpa", "Qwen3-Omni"),
])
def test_what_is_not_modelled_is_refused_by_name(field, value, words):
    with pytest.raises(BridgeRefusedError, match=f"model.{field}.*{words}"):
        _read(VIT, **{field: value})


def test_the_vision_graphs_companions_are_read_only_with_them():
    """vision_cuda_graph_scope and max_vision_cuda_graph_seq_length are read only when vision_cuda_graph_impl is
    transformer_engine (Megatron-Bridge @ 067f987d : modelling_qwen3_vl/transformer_config.py
    get_vision_model_config, vision_model.py _uses_vision_cuda_graph; qwen35_vl_35b_a3b_sft_16gpu_h100_bf16_config
    leaves max_vision_cuda_graph_seq_length at 784 with the graphs off): without effect then, named as such, the
    estimate unchanged; with the graphs on (vgraph29) all three become the training fields."""
    off = _read(VIT, vision_cuda_graph_impl="none", vision_cuda_graph_scope=["attn", "mlp"],
                max_vision_cuda_graph_seq_length=784)
    assert {w for w, _ in off.no_effect} >= {"model.vision_cuda_graph_scope = ['attn', 'mlp']",
                                              "model.max_vision_cuda_graph_seq_length = 784"}
    assert estimate(off.config).peak.device_bytes == estimate(_read(VIT).config).peak.device_bytes
    on = _read(VIT, vision_cuda_graph_impl="transformer_engine", vision_cuda_graph_scope=["attn", "mlp"],
               max_vision_cuda_graph_seq_length=784)
    assert {k: on.config["training"][k] for k in ("vision_cuda_graph_impl", "vision_cuda_graph_modules",
                                                   "max_vision_cuda_graph_seq_length")} == {
        "vision_cuda_graph_impl": "transformer_engine", "vision_cuda_graph_modules": ["attn", "mlp"],
        "max_vision_cuda_graph_seq_length": 784}


def test_the_vision_graphs_without_a_tower_are_refused_by_name():
    with pytest.raises(BridgeRefusedError, match="model.vision_cuda_graph_impl = 'transformer_engine'"):
        _read(vision_cuda_graph_impl="transformer_engine")


def test_a_checkpoint_loading_hook_has_no_effect_at_any_value():
    """Nemotron Omni's temporal_ckpt_compat only registers RADIOViTModel's state-dict pre-hook (Megatron-LM @
    d98e8a64 : megatron/core/models/vision/radio.py): read at any value, the estimate is the one without it."""
    on, off = _read(VIT, temporal_ckpt_compat=True), _read(VIT)
    assert estimate(on.config).peak.device_bytes == estimate(off.config).peak.device_bytes


def test_defaults_are_silent():
    imp = _read(freeze_language_model=False, vision_cuda_graph_impl="none", vision_cuda_graph_scope=[],
                max_vision_cuda_graph_seq_length=None, temporal_patch_dim=1, has_sound=False,
                freeze_audio_model=False)
    assert not any("vision_cuda_graph" in w or "freeze_" in w for w, _ in imp.no_effect)


RECIPE = "qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config"


def test_the_qwen3_vl_sft_recipe_reads_with_its_tower():
    """Qwen3-VL-30B-A3B's SFT recipe (TP 1, EP 8, 8 GPUs) keeps the tower trained; overriding
    model.freeze_vision_model frees the encoder's fp32 gradients, 4 B x (patch embedding 1,770,624 + positions
    2,654,208 + 27 layers 411,466,608 = 415,891,440) = 1,663,565,760 bytes; freezing the projection too frees
    4 B x (merger 30,679,808 + deepstack mergers 92,060,160 = 122,739,968) = 490,959,872 more."""
    from estimator.formats.bridge.recipes import read_bridge_recipe

    def grads(*overrides):
        return estimate(read_bridge_recipe(RECIPE, overrides).config).stages[0].gradients_bytes

    trained = grads()
    encoder = grads("model.freeze_vision_model=true")
    both = grads("model.freeze_vision_model=true", "model.freeze_vision_projection=true")
    assert trained - encoder == 1_663_565_760
    assert encoder - both == 490_959_872


def test_the_recipe_with_its_language_model_and_encoder_frozen():
    """The Qwen3-VL pretrain recipes' freeze settings (Megatron-Bridge @ 067f987d : recipes/qwen_vl/h100/qwen3_vl.py
    ``freeze_language_model = True``, ``freeze_vision_model = True``) on the SFT recipe's layout: only the merger
    and the deepstack mergers train, 30,679,808 + 92,060,160 = 122,739,968 parameters on the first (only) stage:
    fp32 gradients 4 B x 122,739,968 = 490,959,872 bytes, Adam's 12 B sharded over the 8 data-parallel ranks,
    12 x 122,739,968 / 8 = 184,109,952 bytes."""
    from estimator.formats.bridge.recipes import read_bridge_recipe
    imp = read_bridge_recipe(RECIPE, ["model.freeze_language_model=true", "model.freeze_vision_model=true"])
    s = estimate(imp.config).stages[0]
    assert (s.gradients_bytes, s.optimizer_bytes) == (490_959_872, 184_109_952)


def test_the_tower_of_a_recipe_comes_from_its_hugging_face_model():
    """hf_tower reads the tower through the offline catalog: Qwen3-VL-8B-Instruct's 27 layers of width 1152 and
    three deepstack mergers into the language model's 4096; a text model and an id outside the catalog give none."""
    from estimator.formats.bridge.multimodal import hf_tower
    tower = hf_tower("Qwen/Qwen3-VL-8B-Instruct")
    assert (tower["vision_num_layers"], tower["vision_hidden_size"], tower["vision_out_hidden_size"],
            tower["vision_deepstack_mergers"]) == (27, 1152, 4096, 3)
    assert hf_tower("Qwen/Qwen3-8B") is None
    assert hf_tower("nobody/not-a-model") is None


def test_a_pretrain_recipe_without_a_preset_takes_model_and_tower_from_hugging_face():
    """qwen3_vl_8b_pretrain_4gpu_h100_bf16_mock_config (Megatron-Bridge @ 067f987d : recipes/qwen_vl/h100/qwen3_vl.py:
    AutoBridge.from_hf_pretrained("Qwen/Qwen3-VL-8B-Instruct"), TP 4 on 4 GPUs, language model and encoder frozen).
    Only the merger and the three deepstack mergers train. Merged width 4 x 1152 = 4608. Merger: fc1 4608^2 + 4608 =
    21,238,272 and fc2 4608 x 4096 = 18,874,368 split over TP 4 (10,028,160 a GPU), its LayerNorm 2 x 1152 and fc2's
    bias 4096 replicated (6,400): 10,034,560. A deepstack merger: the same linears, a LayerNorm over 4608
    (9,216) and fc2's bias replicated: 10,028,160 + 13,312 = 10,041,472, three of them 30,124,416. Trained a GPU:
    40,158,976 parameters; fp32 gradients 4 B each = 160,635,904 bytes; Adam 12 B, DP 1: 481,907,712 bytes."""
    from estimator.formats.bridge.recipes import RECIPES, read_bridge_recipe
    name = "qwen3_vl_8b_pretrain_4gpu_h100_bf16_mock_config"
    assert RECIPES[name]["preset"] is None and RECIPES[name]["hf"] == "Qwen/Qwen3-VL-8B-Instruct"
    s = estimate(read_bridge_recipe(name).config).stages[0]
    assert (s.gradients_bytes, s.optimizer_bytes) == (160_635_904, 481_907_712)


#: The Qwen3-VL recipes on Bridge's mock VLM data: the library pretrain recipes and the performance recipes built on
#: them (which set only the dataset's seq_length).
MOCK_IMAGES = ["qwen3_vl_8b_pretrain_4gpu_h100_bf16_mock_config",
               "qwen3_vl_30b_a3b_pretrain_8gpu_h100_bf16_mock_config",
               "qwen3_vl_30b_a3b_pretrain_8gpu_b200_bf16_config",
               "qwen3_vl_235b_a22b_pretrain_64gpu_b200_bf16_config",
               "qwen3_vl_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"]


def test_the_mock_pretrain_recipes_draw_256_pixel_images():
    """Megatron-Bridge @ 067f987d : recipes/qwen_vl/h100/qwen3_vl.py builds MockVLMSFTDatasetConfig without
    image_size or num_images, whose defaults (data/builders/mock_vlm_sft.py) are (256, 256) and 1: one 256 x 256
    image a sample (perf_recipes/qwen_vl/{b200,gb200}/qwen3_vl.py keep that dataset). The catalogue said 448 pixels.
    On qwen3_vl_8b_pretrain_4gpu_h100_bf16_mock_config (TP 4, mbs 2, tower frozen, merger and D = 3 deepstack
    mergers trained; Qwen3-VL-8B's tower hv 1152, patch 16, merge M = 2) only the mergers' tensors keep anything
    (estimator/memory/vision.py), per patch with B = 2 bytes and t = 4:
    merger 2 B hv + 8 + 2 B hv / t = 4,608 + 8 + 1,152 = 5,768; a deepstack merger 2 B hv + 8 / M^2 + 2 B hv / t =
    4,608 + 2 + 1,152 = 5,762, three 17,286: 23,054 bytes a patch. 448 pixels are (448 / 16)^2 = 784 patches, 256
    pixels (256 / 16)^2 = 256: 528 fewer an image, 1,056 a micro-batch of 2, so 1,056 x 23,054 = 24,345,024 bytes
    fewer activations (0.02 GiB); the language model's sequence is seq_length either way (pad_to_max_length)."""
    from estimator.formats.bridge.recipes import RECIPES, read_bridge_recipe
    for name in MOCK_IMAGES:
        tr = RECIPES[name]["config"]["training"]
        assert (tr["images_per_sample"], tr["image_resolution"]) == (1, 256), name
    name = MOCK_IMAGES[0]
    now = read_bridge_recipe(name).config
    before = read_bridge_recipe(name).config
    before["training"]["image_resolution"] = 448
    assert (estimate(before).stages[0].activations_bytes - estimate(now).stages[0].activations_bytes
            == 1_056 * 23_054 == 24_345_024)


PERF = "qwen3_vl_30b_a3b_pretrain_8gpu_b200_bf16_config"


def test_the_qwen3_vl_performance_recipe_graphs_the_language_model():
    """Qwen3-VL-30B-A3B's B200 performance recipe (TP 1, EP 8, mbs 1, seq 4096): the language model and the encoder
    frozen, TE CUDA graphs of the MoE router and preprocess of the language model's layers. Qwen3-VL-30B-A3B's text
    model (config.json: hidden_size 2048, 48 layers, every one MoE) has one static hidden-states input and output per
    graphed layer and micro-batch in flight (one without pipelining): 2 x 2 B x 4096 x 2048 x 48 = 1,610,612,736
    bytes (1.5 GiB), at the steady or capture peak (with cuda_graph_warmup_steps 0; after eager warm-up steps the eager
    peak is above them). The tower is not graphed and counts as in the library recipe."""
    from estimator.formats.bridge.recipes import read_bridge_recipe
    imp = read_bridge_recipe(PERF, ["model.cuda_graph_warmup_steps=0"])
    tr = imp.config["training"]
    assert (tr["cuda_graph_impl"], tr["cuda_graph_modules"]) == ("transformer_engine", ["moe_router",
                                                                                        "moe_preprocess"])
    assert tr["freeze_language_model"] and tr["freeze_vision_model"] and not tr.get("freeze_vision_projection")
    est = estimate(imp.config)
    s = est.stages[0]
    assert s.transient["cuda_graph_static_buffers"] == 2 * 2 * 4096 * 2048 * 48 == 1_610_612_736
    assert est.parameters.vision > 0


@pytest.mark.subprocess
@pytest.mark.parametrize("name", [PERF, "qwen3_vl_235b_a22b_pretrain_64gpu_b200_bf16_config",
                                  "qwen3_vl_30b_a3b_pretrain_8gpu_gb200_fp8mx_config",
                                  "qwen35_vl_35b_a3b_sft_16gpu_h100_bf16_config"])
def test_the_newly_accepted_recipes_run_end_to_end(name):
    """``estimate --bridge-recipe NAME --json`` answers for the Qwen3-VL performance recipes (refused before: their
    tower with cuda_graph_impl and tp_comm_overlap; the GB200 one with MXFP8 and HybridEP too) and the Qwen3.5-VL SFT recipe (refused before: its
    max_vision_cuda_graph_seq_length, and the flex dispatcher beside its tower)."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "estimator", "estimate", "--bridge-recipe", name, "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["peak"]["device_bytes"] > 0


def test_the_qwen35_vl_sft_recipe_leaves_the_vision_graph_length_without_effect():
    """qwen35_vl_35b_a3b_sft_16gpu_h100_bf16_config turns the vision encoder's graphs off and leaves
    max_vision_cuda_graph_seq_length at 784 (the override below puts it back, as Bridge's config.yaml holds it): the
    estimate is the one without it, the field listed as without effect; the flex dispatcher (HybridEP) beside the
    tower is the language model's."""
    from estimator.formats.bridge.recipes import read_bridge_recipe
    name = "qwen35_vl_35b_a3b_sft_16gpu_h100_bf16_config"
    on = read_bridge_recipe(name, ["model.max_vision_cuda_graph_seq_length=784"])
    assert "model.max_vision_cuda_graph_seq_length = 784" in {w for w, _ in on.no_effect}
    est = estimate(on.config)
    assert est.peak.device_bytes == estimate(read_bridge_recipe(name).config).peak.device_bytes
    assert est.parameters.vision > 0 and "hybridep_buffers" in est.stages[1].outside_allocator


# omni28: Nemotron Omni's provider fields (estimator/formats/bridge/multimodal.py omni_media).
OMNI = "megatron.bridge.models.nemotron_omni.nemotron_omni_provider.NemotronOmniModelProvider"
#: Nemotron-3-Nano-Omni's sound_config as Megatron-Bridge stores it in config.yaml (the Hugging Face keys).
SOUND_CONFIG = {"model_type": "parakeet", "hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 24,
                "intermediate_size": 4096, "conv_kernel_size": 9, "subsampling_factor": 8,
                "subsampling_conv_channels": 256, "subsampling_conv_kernel_size": 3, "subsampling_conv_stride": 2,
                "num_mel_bins": 128, "projection_hidden_size": 4096, "sampling_rate": 16000}
#: The valor32k recipes' media settings (Megatron-Bridge @ 067f987d : recipes/nemotron_omni/h100/nemotron_omni.py
#: ``_nemotron_omni_base`` and ``nemotron_omni_valor32k_sft_4gpu_h100_bf16_config``) and provider fields a
#: config.yaml carries.
VALOR = dict(_target_=OMNI, has_sound=True, sound_config=SOUND_CONFIG, temporal_patch_dim=2,
             separate_video_embedder=True, temporal_ckpt_compat=True, freeze_vision_model=True,
             freeze_vision_projection=False, freeze_sound_encoder=True, freeze_sound_projection=False,
             vision_class_token_len=10, image_token_index=18, dynamic_resolution=True, radio_force_eval_mode=True,
             use_vision_backbone_fp8_arch=False, nemotron_omni_contract="expanded_sequence_v1",
             sound_context_token_id=27)


def test_a_nemotron_omni_config_yaml_brings_both_towers():
    """The provider fixes its RADIO tower in code, so the importer reads it from the model section: 32 layers of
    1280, frame pairs through the separate video embedder, 10 class tokens; the sound tower from sound_config.
    Parameters (tests/model/test_audio.py): the encoder 608,879,616; the projection into this small language model's
    512 (LayerNorm over 1024: 2,048; fc1 with bias 4,194,304 + 4,096; fc2 with bias 2,097,152 + 512):
    6,298,112."""
    imp = _read(**VALOR)
    m, tr = imp.config["model"], imp.config["training"]
    assert (m["vision_num_layers"], m["vision_model_type"], m["vision_temporal_patch_size"],
            m["vision_separate_video_embedder"], m["vision_class_token_len"]) == (32, "radio", 2, True, 10)
    assert (m["sound_num_layers"], m["sound_hidden_size"], m["sound_bias"]) == (24, 1024, False)
    assert tr["freeze_vision_model"] is True and tr["freeze_sound_encoder"] is True
    assert estimate(imp.config).parameters.sound == 608_879_616 + 6_298_112


def test_without_sound_the_sound_freeze_fields_do_nothing():
    """The CORD v2 recipes set has_sound false: the provider builds no sound module and NemotronOmniModel.freeze
    skips missing modules, so freeze_sound_encoder / freeze_sound_projection true change nothing."""
    cord = {**VALOR, "has_sound": False, "temporal_patch_dim": 1, "separate_video_embedder": False,
            "freeze_sound_projection": True}
    imp = _read(**cord)
    assert "sound_num_layers" not in imp.config["model"]
    assert "freeze_sound_encoder" not in imp.config["training"]
    assert estimate(imp.config).parameters.sound == 0


@pytest.mark.parametrize("change, field", [
    ({"sound_config": None}, "model.sound_config"),
    ({"sound_model_type": "whisper"}, "model.sound_model_type"),
    ({"sound_config": {**SOUND_CONFIG, "subsampling_conv_channels": 512}}, "model.sound_config.subsampling_conv"),
    ({"sound_hidden_size": 2048}, "model.sound_hidden_size"),
])
def test_what_the_parakeet_encoder_does_not_describe_is_refused_by_name(change, field):
    with pytest.raises(BridgeRefusedError, match=field):
        _read(**{**VALOR, **change})


def test_the_omni_checkpoint_s_tower_for_the_recipes():
    """The Omni recipes build their provider from nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16 (Bridge's
    verification card: architecture NemotronH_Nano_Omni_Reasoning_V3, NemotronOmniBridge): hf_tower gives the
    provider's RADIO tower, so the static reading takes their freeze_vision_* fields as modelled."""
    from estimator.formats.bridge.multimodal import hf_tower
    tower = hf_tower("nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16")
    assert (tower["vision_num_layers"], tower["vision_projector_ffn_hidden_size"]) == (32, 20480)


def test_the_qwen35_vl_execution_policy_vision_graphs_by_hand():
    """vgraph29: the tower graphs of _apply_qwen35_vl_35b_a3b_16gpu_h100_execution_config (Megatron-Bridge @
    067f987d recipes/qwen_vl/h100/qwen35_vl.py: vision_cuda_graph_impl transformer_engine, scope [attn, mlp],
    max_vision_cuda_graph_seq_length 784) on the SFT recipe with its recompute off (the graphs are refused with full
    recompute). Qwen3.5-35B-A3B's tower: 27 layers, hv 1152, MLP 4304; one 448-pixel image a micro-batch is
    (448 / 16)^2 = 784 patches, so nothing is padded and the warm-up peak (allocated 63.61 GiB) is unchanged. On the
    device the steady step adds, beside it, the static buffers of the first stage's 2 micro-batches in flight (PP 2):
    2 x 27 x (2 x 784 x 1152 bf16 input + 2 x 784 x 1152 output + 784^2 boolean mask) = 2 x 27 x 4,227,328 =
    228,275,712, and one layer's backward working set in the pool, fc1's output gradient 2 x 784 x 4304 and two
    residual-sized gradients 2 x 2 x 784 x 1152: 6,748,672 + 3,612,672 = 10,361,344; 238,637,056 bytes. The
    pretrain recipe's own policy also captures the language model's attn, refused on Qwen3.5's gated delta net
    layers."""
    from estimator.formats.bridge.recipes import read_bridge_recipe
    name = "qwen35_vl_35b_a3b_sft_16gpu_h100_bf16_config"
    off = ["model.recompute_granularity=null", "model.recompute_method=null", "model.recompute_num_layers=null"]
    graphs = off + ["model.vision_cuda_graph_impl=transformer_engine", "model.vision_cuda_graph_scope=[attn,mlp]",
                    "model.max_vision_cuda_graph_seq_length=784"]
    plain, on = (estimate(read_bridge_recipe(name, o).config).stages[0] for o in (off, graphs))
    assert on.allocated_bytes == plain.allocated_bytes
    assert on.outside_allocator["cuda_graph_private_pool"] == 2 * 27 * 4_227_328 + 10_361_344 == 238_637_056
    assert on.device_bytes > plain.device_bytes
    lm = graphs + ["model.cuda_graph_impl=transformer_engine",
                   "model.cuda_graph_scope=[attn,moe_router,moe_preprocess]"]
    with pytest.raises(ConfigError, match="gated delta net"):
        estimate(read_bridge_recipe(name, lm).config)
