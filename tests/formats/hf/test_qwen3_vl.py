"""Qwen3-VL from its Hub id (issue 27): the Qwen3 / Qwen3-MoE language model of text_config and the vision tower
with its deepstack mergers, as Megatron-Bridge's Qwen3VL bridges build them (NVIDIA-NeMo/Megatron-Bridge @ 067f987d :
src/megatron/bridge/models/qwen_vl/qwen3_vl_bridge.py, modelling_qwen3_vl/transformer_block.py). Expected values are
worked out by hand in each docstring.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from estimator import estimate, from_hf_config
from estimator.config.errors import ConfigError
from estimator.formats import hf_catalog
from estimator.model.params import count_parameters_of
from estimator.model.vision import vision_params

ID = "Qwen/Qwen3-VL-30B-A3B-Instruct"


def test_the_30b_a3b_counts_by_hand():
    """Qwen3-VL-30B-A3B: h 2048, vocabulary 151,936 (untied), 48 layers, every layer MoE (128 experts of 768, top 8).

    Embedding and output layer: 2 x 151,936 x 2048 = 622,329,856.
    Attention (32 heads, 4 groups, head 128): q 4096 x 2048 = 8,388,608; k, v 2 x 512 x 2048 = 2,097,152;
    o 2048 x 4096 = 8,388,608; q/k norms 256; input norm 2048: 18,876,672.
    MoE: router 128 x 2048 = 262,144; experts 128 x 3 x 2048 x 768 = 603,979,776; pre-MLP norm 2048: 604,243,968.
    Layers 48 x 623,120,640 = 29,909,790,720; final norm 2048. Language model: 30,532,122,624.
    Vision tower (hv 1152, 27 layers, MLP 4304, out 2048, 3 deepstack mergers): patch embedding
    3 x 2 x 16 x 16 x 1152 + 1152 = 1,770,624; positions 2304 x 1152 = 2,654,208; layers 27 x 15,239,504 =
    411,466,608; merger 2 x 1152 + 4608^2 + 4608 + 4608 x 2048 + 2048 = 30,679,808; each deepstack merger (its
    LayerNorm over 4 x 1152 = 4608) 2 x 4608 + 4608^2 + 4608 + 4608 x 2048 + 2048 = 30,686,720, three 92,060,160.
    Tower 538,631,408. Total 31,070,754,032 (the checkpoint's 882 safetensors tensors hold the same count)."""
    m = from_hf_config(ID)
    assert m["vision_deepstack_mergers"] == 3 and m["vision_num_layers"] == 27
    c = count_parameters_of({"model": m, "training": {"world_size": 8}})
    assert c.vision == 538_631_408
    assert c.total == 31_070_754_032
    assert c.total - c.vision == 30_532_122_624


def test_the_dense_4b_counts_by_hand():
    """Qwen3-VL-4B (qwen3_vl: a Qwen3 dense language model, tied embeddings): the language model is Qwen3-4B's
    4,022,468,096 (KerasHub's qwen3_4b_en count, in the catalog). Tower (hv 1024, 24 layers, MLP 4096, out 2560,
    deepstack mergers at layers 5, 11, 17): patch embedding 3 x 2 x 16 x 16 x 1024 + 1024 = 1,573,888; positions
    2304 x 1024 = 2,359,296; each layer 4 x 1024 (LayerNorms) + 3 x 1024^2 + 3 x 1024 + 1024^2 + 1024 + 2 x 1024 x
    4096 + 4096 + 1024 = 12,596,224, 24 of them 302,309,376; merger 2 x 1024 + 4096^2 + 4096 + 4096 x 2560 + 2560 =
    27,271,680; each deepstack merger 2 x 4096 + 4096^2 + 4096 + 4096 x 2560 + 2560 = 27,277,824, three 81,833,472.
    Tower 415,347,712; total 4,437,815,808."""
    m = from_hf_config("Qwen/Qwen3-VL-4B-Instruct")
    c = count_parameters_of({"model": m, "training": {"world_size": 1}})
    assert c.vision == 415_347_712
    assert c.total - c.vision == 4_022_468_096
    assert c.total == 4_437_815_808


def test_tensor_parallelism_splits_the_tower_by_hand():
    """Replicated per GPU: patch embedding 1,770,624, positions 2,654,208, per layer the LayerNorms and the proj and
    fc2 biases 6 x 1152 = 6912 (27 layers: 186,624), the merger's LayerNorm and fc2 bias 2304 + 2048 = 4352, each
    deepstack merger's 9216 + 2048 = 11,264 (33,792): 4,649,600. Sharded: 538,631,408 - 4,649,600 = 533,981,808.
    TP 2: 266,990,904 + 4,649,600 = 271,640,504 a GPU."""
    vp = vision_params(_model())
    assert vp.encoder.per_rank(2) + vp.projection.per_rank(2) == 271_640_504


def _model():
    from estimator.config.load import load_config
    return load_config({"model": from_hf_config(ID), "training": {"world_size": 8, "seq_length": 4096}}).model


def _est(**training):
    cfg = {"model": from_hf_config(ID), "parallelism": {"expert_model_parallel_size": 8},
           "training": {"world_size": 8, "seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 8,
                        **training}}
    return estimate(cfg)


def test_frozen_tower_and_projection_keep_weights_only():
    """bf16 weights, fp32 gradients, Adam with fp32 masters and distributed optimizer over 8 data-parallel ranks
    (the tower's parameters are dense: replicated over the data-parallel ranks). Freezing the encoder and the
    projection (538,631,408 parameters) removes 4 B of gradient per parameter on stage 0: 2,154,525,632 bytes."""
    trained = _est().stages[0]
    frozen = _est(freeze_vision_model=True, freeze_vision_projection=True).stages[0]
    assert trained.weights_bytes == frozen.weights_bytes
    assert trained.gradients_bytes - frozen.gradients_bytes == 4 * 538_631_408
    assert trained.optimizer_bytes > frozen.optimizer_bytes


def test_more_images_keep_more_tower_activations():
    """448-pixel images: (448 / 16)^2 = 784 patches, 196 language-model tokens each; 4 images take 784 of the
    4096-token sequence. With the tower and projection frozen they keep nothing."""
    none, two, four = (_est(images_per_sample=n).stages[0].activations_bytes for n in (0, 2, 4))
    assert four > two > none
    frozen = dict(freeze_vision_model=True, freeze_vision_projection=True)
    assert _est(images_per_sample=4, **frozen).stages[0].activations_bytes == none


@pytest.mark.parametrize("bad", [[8, 99], [[8], 16], [{"a": 1}], [8, 8], "8,16", [True]])
def test_bad_deepstack_indexes_name_the_key(bad):
    """Out of range, unhashable items (a traceback before: set() ran before the item check; found by
    tests/fuzz_inputs.py --seed 16), repeats, a string, a bool: each the clear error naming the key."""
    hf = hf_catalog.get(ID).config()
    hf["vision_config"]["deepstack_visual_indexes"] = bad
    with pytest.raises(ConfigError, match="deepstack_visual_indexes"):
        from_hf_config(hf)


@pytest.mark.subprocess
def test_the_cli_estimates_the_hub_id():
    """``estimate --hf Qwen/Qwen3-VL-30B-A3B-Instruct --num-gpus 8 --json`` works and counts the tower."""
    out = subprocess.run([sys.executable, "-m", "estimator", "estimate", "--hf", ID, "--num-gpus", "8", "--json",
                          "--seq-length", "4096"], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert data["parameters"]["total"] == 31_070_754_032
    assert data["parameters"]["vision"] == 538_631_408
