"""Step 3.7 (issue 27): Step 3.5 Flash's decoder under the Perception-Encoder tower and its projector, as
Megatron-Bridge's Step37Bridge builds them (NVIDIA-NeMo/Megatron-Bridge @ 067f987d :
src/megatron/bridge/models/stepfun/step37_bridge.py, step37_provider.py, configuration_step37.py,
modelling_step37/). No genuine Step 3.7 config.json was found in a citable repository (the public ones are test
stubs: a vision_config of one or two keys), so none is catalogued. The input is written from Bridge's
``Step37Config``: text_config Step 3.5 Flash's (tests/formats/hf/test_step3p5.py CONFIG, model_type step3p5),
vision_config ``Step37VisionConfig``'s defaults written out (model_type perception_encoder), and the wrapper's
understand_projector_stride 2, projector_bias false, image_token_id 128001 and the copies of the text model's
hidden_size and max_position_embeddings ``Step37Config.__init__`` makes. Expected values are worked out by hand in
each docstring.
"""

from __future__ import annotations

import pytest

from estimator import estimate, from_hf_config
from estimator.config.errors import ConfigError, EstimatorError, UnsupportedError
from estimator.model.params import count_parameters_of
from tests.formats.hf.test_hf_types import WRONG
from tests.formats.hf.test_step3p5 import CONFIG as TEXT

VISION = {"model_type": "perception_encoder", "width": 1536, "layers": 47, "heads": 16, "num_channels": 3,
          "image_size": 728, "mlp_ratio": 8960 / 1536, "patch_size": 14, "hidden_act": "quick_gelu",
          "layer_norm_eps": 1e-5, "use_cls_token": False, "use_ln_pre": True, "use_ln_post": False,
          "use_abs_posemb": True, "use_rope2d": True, "ls_init_value": 0.1}
CONFIG = {"architectures": ["Step3p7ForConditionalGeneration"], "model_type": "step3p7", "text_config": TEXT,
          "vision_config": VISION, "understand_projector_stride": 2, "projector_bias": False,
          "image_token_id": 128001, "hidden_size": TEXT["hidden_size"],
          "max_position_embeddings": TEXT["max_position_embeddings"]}
TOWER = 1_981_014_784


def _count(hf) -> int:
    return count_parameters_of({"model": from_hf_config(hf), "training": {"world_size": 8}}).total


def test_step3p7_is_step3p5_and_the_tower():
    """The language model is Step 3.5 Flash's, counted exactly as its text_config alone; the tower and projector add
    1,981,014,784 (tests/memory/test_vision_step37.py, by hand: Perception-Encoder 1,955,848,960, align_projector
    6144 x 4096 = 25,165,824)."""
    m = from_hf_config(CONFIG)
    assert {k: m[k] for k in ("vision_model_type", "vision_num_layers", "vision_hidden_size",
                              "vision_ffn_hidden_size", "vision_spatial_merge_size",
                              "vision_num_position_embeddings")} == {
        "vision_model_type": "step37", "vision_num_layers": 47, "vision_hidden_size": 1536,
        "vision_ffn_hidden_size": 8960, "vision_spatial_merge_size": 4, "vision_num_position_embeddings": 2704}
    assert _count(CONFIG) - _count(TEXT) == TOWER


def test_the_defaults_fill_a_short_vision_config():
    """Step37VisionConfig's defaults are the released tower's: a vision_config of model_type alone is the same."""
    short = {**CONFIG, "vision_config": {"model_type": "perception_encoder"}}
    assert from_hf_config(short) == from_hf_config(CONFIG)


def test_images_reach_the_estimate():
    """One 728-pixel image on the first stage: 169 tokens of the sequence, and the tower's activations."""
    cfg = {"model": from_hf_config(CONFIG), "parallelism": {"expert_model_parallel_size": 8},
           "training": {"world_size": 8, "seq_length": 2048}}
    none = estimate(cfg).stages[0].activations_bytes
    cfg["training"] = {**cfg["training"], "images_per_sample": 1, "image_resolution": 728}
    assert estimate(cfg).stages[0].activations_bytes > none


@pytest.mark.parametrize("change, error, match", [
    ({"projector_bias": True}, UnsupportedError, "projector_bias"),
    ({"understand_projector_stride": 4}, UnsupportedError, "understand_projector_stride"),
    ({"vision_config": {**VISION, "use_cls_token": True}}, UnsupportedError, "use_cls_token"),
    ({"vision_config": {**VISION, "use_ln_post": True}}, UnsupportedError, "use_ln_post"),
    ({"vision_config": {**VISION, "hidden_act": "gelu"}}, UnsupportedError, "hidden_act"),
    ({"vision_config": {**VISION, "hidden_size": 1536}}, UnsupportedError, "hidden_size"),
    ({"vision_config": {**VISION, "image_size": 700}}, ConfigError, "image_size"),
    ({"vision_config": {**VISION, "mlp_ratio": -1}}, ConfigError, "mlp_ratio"),
    ({"vision_config": None}, ConfigError, "vision_config"),
])
def test_step3p7_refusals_name_the_key(change, error, match):
    with pytest.raises(error, match=match):
        from_hf_config({**CONFIG, **change})


def test_a_wrong_value_for_any_vision_key_is_an_error_that_names_it():
    for key in VISION:
        for w in WRONG:
            try:
                from_hf_config({**CONFIG, "vision_config": {**VISION, key: w}})
            except ConfigError as exc:
                assert {p.field for p in exc.problems} <= {f"config.json:vision_config.{key}"}, (key, w, exc)
            except EstimatorError:
                pass


def test_step3p7_recipe_figure_to_its_rounding():
    """vllm-project/recipes @ 1f2cec1e : models/stepfun-ai/Step-3.7-Flash.yaml: "~198B total / 11B active
    parameters combining a 196B sparse language backbone with a 1.8B perception encoder". The backbone as
    test_step3p5.py reads Step 3.5's card (without the embedding, output layer and MTP layers, per-head gates):
    195,900,214,336; with the tower and projector 1,981,014,784: 197,881,229,120, 198B. The "1.8B" does not say
    which parts it counts (the trunk and the first convolution are 1,785,973,504; the whole tower 1,955,848,960)."""
    from tests.formats.hf.test_step3p5 import H
    m = {k: v for k, v in from_hf_config(CONFIG).items() if k not in ("mtp_num_layers", "mtp_dense_mlp")}
    c = count_parameters_of({"model": m, "training": {"world_size": 8}})
    gates = 12 * 64 * 127 * H + 33 * 96 * 127 * H
    total = c.total - c.embedding - c.output_layer - gates
    assert total == 195_900_214_336 + TOWER == 197_881_229_120
    assert round(total / 1e9) == 198
