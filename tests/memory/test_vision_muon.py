"""Muon beside a vision tower of Hugging Face remote code (the ``kimi_k25`` tower: estimator/model/vision.py
``muon_matrices``, estimator/memory/vision.py, estimator/memory/features/muon_step.py): Megatron-Core's Muon takes
the tower's 2-D weights, Adam the rest (Megatron-LM @ d98e8a64 : megatron/core/optimizer/layer_wise_optimizer.py
``is_managed_by_layer_wise_optimizer``: not 2-D, or tagged ``use_muon = False`` or
``is_embedding_or_output_parameter``, goes to Adam; MoonViT's modules set no tag). Expected values by hand.

The toy tower (tests/memory/test_vision.py's ``VITK``): 2 layers, hv 64, 4 heads, fv 128, patch 16, one frame, 3
channels, 2304 positions, merge 2, output 512 (the language model's h). Its 2-D weights, whole on every rank:

    each layer  qkv 192 x 64 = 12,288, out 64 x 64 = 4,096, fc0 128 x 64 = 8,192, fc1 64 x 128 = 8,192   32,768
    two layers                                                                                          65,536
    merger      fc1 256 x 256 = 65,536, fc2 512 x 256 = 131,072                                        196,608
    Muon's                                                                                             262,144

and Adam's the rest of its 461,248 parameters: the Conv2d 3 x 16 x 16 x 64 + 64 = 49,216 (its weight is 4-D), the
position grid 2304 x 64 = 147,456 (3-D in MoonViT), per layer two LayerNorms 256 and the biases 192 + 64 + 128 + 64,
704, twice 1,408, the final LayerNorm 128 and the merger's LayerNorm 128 and biases 256 + 512: 896; 199,104 in all.
"""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.errors import UnsupportedError
from estimator.config.load import load_config
from estimator.memory.features import muon_step
from estimator.memory.states import byte_model
from estimator.memory.vision import vision_stage
from estimator.model.resolve import resolve
from tests.conftest import make_config

MODEL = dict(num_layers=4, hidden_size=512, num_attention_heads=8, vocab_size=1000)
VITK = {**MODEL, "vision_num_layers": 2, "vision_hidden_size": 64, "vision_num_attention_heads": 4,
        "vision_ffn_hidden_size": 128, "vision_model_type": "kimi_k25", "vision_temporal_patch_size": 1}
MUON = {"optimizer": "muon", "use_distributed_optimizer": True}
MATRICES, ADAM = 262_144, 199_104
MERGER_MATRICES, MERGER_ADAM = 196_608, 896


def _est(model=VITK, parallelism=None, **training):
    return estimate(make_config(model, parallelism, {**MUON, **training}))


def test_the_toy_towers_matrices_by_hand():
    r = resolve(load_config(make_config(VITK, None, MUON)))
    vs = vision_stage(r)
    assert vs.trained_matrices == MATRICES and vs.trained - vs.trained_matrices == ADAM
    assert MATRICES + ADAM == 461_248


def test_muon_states_for_the_towers_matrices_adam_for_the_rest():
    """bf16 weights, one data-parallel rank: Muon keeps an fp32 master and one momentum, 8 B a parameter; Adam an
    fp32 master and two moments, 12 B: 8 x 262,144 + 12 x 199,104 = 2,097,152 + 2,389,248 = 4,486,400 more on
    stage 0 than without the tower (12 x 461,248 = 5,534,976 if all of it were Adam's). Weights and fp32 gradients as
    with Adam: 2 and 4 B a parameter."""
    base, vit = _est(MODEL).stages[0], _est().stages[0]
    assert vit.optimizer_bytes - base.optimizer_bytes == 8 * MATRICES + 12 * ADAM == 4_486_400
    assert vit.gradients_bytes - base.gradients_bytes == 4 * 461_248
    assert vit.weights_bytes - base.weights_bytes == 2 * 461_248


def test_data_parallel_ranks_share_the_towers_states():
    """DP 2 (the tower replicated over them, its states sharded with the distributed optimizer): half, 2,243,200."""
    base = _est(MODEL, world_size=2).stages[0]
    vit = _est(world_size=2).stages[0]
    assert vit.optimizer_bytes - base.optimizer_bytes == 4_486_400 // 2 == 2_243_200


def test_a_frozen_encoder_leaves_the_mergers_matrices_to_muon():
    """freeze_vision_model: only the merger trains, its 196,608 matrix elements at 8 B and 896 others at 12 B:
    1,572,864 + 10,752 = 1,583,616."""
    base = _est(MODEL).stages[0]
    vit = _est(freeze_vision_model=True).stages[0]
    assert vit.optimizer_bytes - base.optimizer_bytes == 8 * MERGER_MATRICES + 12 * MERGER_ADAM == 1_583_616


def test_the_towers_newton_schulz_working_set_by_hand():
    """No partition_dim on the tower's weights: each is orthogonalized alone, whatever muon_tp_mode (blockwise
    bound, bf16 iterates) beside the update of the matrix before, bounded by the largest (4 x 131,072 = 524,288).
    The merger's fc2, 512 x 256, n 131,072, smaller side 256: max(12 n, 4 n + 4 x 256^2) = max(1,572,864, 786,432)
    = 1,572,864; with the bound 2,097,152. Its fc1 (256 x 256): max(786,432, 262,144 + 262,144) + 524,288 = 1,310,720,
    less. With Nesterov + 4 n: 2,621,440. With fp32 iterates (muon_fp32_matmul_prec high): max(12 n, 8 n + 8 x 256^2
    = 1,572,864) = 1,572,864, the same."""
    def ws(**training):
        r = resolve(load_config(make_config(VITK, {"tensor_model_parallel_size": 2},
                                            {**MUON, "world_size": 2, **training})))
        return muon_step.tower_working_set(r, vision_stage(r).matrices)
    assert ws() == ws(muon_tp_mode="duplicated") == ws(muon_tp_mode="distributed") == 2_097_152
    assert ws(muon_nesterov=True) == 2_621_440
    assert ws(muon_fp32_matmul_prec="high") == 2_097_152
    assert muon_step.tower_working_set(None, ()) == 0


def test_adams_temporaries_leave_out_the_towers_matrices():
    """torch.optim.AdamW (foreach) keeps 4 B per Adam-managed parameter in its step. A stage of 100,000,000
    parameters, 8,000,000 of them language-model matrices, plus the tower's 461,248: Adam steps
    92,000,000 + 199,104, 4 x 92,199,104 = 368,796,416 B, above Muon's working set (the language model's fc1,
    2048 x 512: 14 x 1,048,576 + 4 x 1,048,576 = 18,874,368 at most); without the tower's matrices in Muon's part it
    would be 4 x 92,461,248."""
    r = resolve(load_config(make_config(VITK, None, {**MUON, "optimizer_implementation": "torch",
                                                                 "transformer_impl": "local"})))
    vs = vision_stage(r)
    own = muon_step.muon_step_buffers(r, byte_model(r), range(len(r.kinds)), 100_000_000 + vs.trained, 8_000_000, 0,
                                      (1, 1), tower=vs.matrices)
    assert 4 * (92_000_000 + ADAM) == 368_796_416
    assert own == {"optimizer_temporaries": 368_796_416}


def test_muon_beside_other_towers_stays_refused():
    """Only the kimi_k25 tower's 2-D weights are read: Muon beside the qwen3_vl tower (Megatron-Core layers split
    over TP, its QKV tagged per its own heads) stays refused, and so does Muon with a frozen language model."""
    with pytest.raises(UnsupportedError, match="training.optimizer"):
        _est({**VITK, "vision_model_type": "qwen3_vl", "vision_temporal_patch_size": 2})
    with pytest.raises(UnsupportedError, match="training.optimizer"):
        _est(freeze_language_model=True)
