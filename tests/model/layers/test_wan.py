"""Wan (estimator/model/layers/wan.py): parameters against the published checkpoints, states, and the activations
of a small case worked out by hand."""

from __future__ import annotations

import pytest

from estimator import estimate
from estimator.config.load import load_config
from estimator.formats.presets import load_preset, preset_info
from estimator.memory.activations import layer_activations, stage_extras
from estimator.model.params import count_parameters, count_parameters_of
from estimator.model.resolve import resolve
from tests.conftest import make_config

#: A small Wan: 2 layers, h 64, 4 heads (dh 16), f 256, text embeddings 32 wide, 4 latent channels, 2 x 2 patches.
TINY = {"model_kind": "wan", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 256,
        "vocab_size": 1000, "activation_func": "gelu", "gated_linear_unit": False, "add_bias_linear": True,
        "add_qkv_bias": True, "qk_layernorm": True, "normalization": "LayerNorm", "wan_text_tokens": 8,
        "wan_text_dim": 32, "wan_in_channels": 4, "wan_out_channels": 4, "wan_freq_dim": 16}


def _tiny(parallelism=None, training=None, **model):
    return make_config({**TINY, **model}, parallelism, {"seq_length": 32, **(training or {})},
                       {"params_dtype": "bf16"})


def test_published_counts():
    """Per layer (a = g, dh = h / a, C = h): self-attention QKV 3h^2 + 3h, output h^2 + h, q/k norms 2h: 4h^2 + 6h;
    cross-attention Q h^2 + h, KV 2h^2 + 2h, output h^2 + h, q/k norms 2h: 4h^2 + 6h; norm3 2h; modulation 6h;
    MLP 2hf + f + h. Together 8h^2 + 2hf + f + 21h.

    Wan2.1-T2V-1.3B (h 1536, f 8960, 30 layers): per layer 18,874,368 + 27,525,120 + 8,960 + 32,256 = 46,440,704,
    x 30 = 1,393,221,120. Patch embedding 16 x 4 x 1536 + 1536 = 99,840; text embedder 4096 x 1536 + 1536 +
    1536^2 + 1536 = 8,653,824; timestep embedder 256 x 1536 + 1536 + 1536^2 + 1536 = 2,755,584; modulation
    projection 6 x 1536^2 + 6 x 1536 = 14,164,992; head 1536 x 64 + 64 + 2 x 1536 = 101,440. Total 1,418,996,800,
    the count of the Hugging Face checkpoint (diffusion_pytorch_model.safetensors; Wan-AI: "1.3B").

    Wan2.1-T2V-14B (h 5120, f 13824, 40 layers): per layer 209,715,200 + 141,557,760 + 13,824 + 107,520 =
    351,394,304, x 40 = 14,055,772,160. Patch 332,800; text 47,196,160; timestep 27,535,360; modulations
    157,317,120; head 337,984. Total 14,288,491,584, the checkpoint's count (Wan-AI: "14B"; the same DiT is each
    of Wan2.2-T2V-A14B's two experts)."""
    assert count_parameters_of(load_preset("wan-1.3b")).total == 1_418_996_800
    assert count_parameters_of(load_preset("wan-14b")).total == 14_288_491_584
    assert preset_info("wan-1.3b")["published_total"] == 1_418_996_800
    assert preset_info("wan-14b")["published_total"] == 14_288_491_584


def test_tiny_parameters_by_hand():
    """h 64, f 256: per layer 8 x 4096 + 2 x 64 x 256 + 256 + 21 x 64 = 67,136, x 2 = 134,272. Patch 4 x 4 x 64 +
    64 = 1,088; text 32 x 64 + 64 + 64^2 + 64 = 6,272; timestep 16 x 64 + 64 + 64^2 + 64 = 5,248 and modulation
    projection 6 x 64^2 + 6 x 64 = 24,960; head 64 x 16 + 16 + 128 = 1,168. Total 173,008; no vocabulary."""
    c = count_parameters(resolve(load_config(_tiny())))
    assert c.total == 173_008
    assert c.padded_vocab_size == 0 and c.output_layer == 1_168
    assert c.embedding == 1_088 + 6_272 + 5_248 + 24_960


def test_states_of_the_1_3b_recipe():
    """wan_1_3b_pretrain_8gpu_h100_bf16_config: bf16 weights 2 x 1,418,996,800 = 2,837,993,600 B; bf16 gradients
    (the recipe sets grad_reduce_in_fp32 False) the same; Adam's fp32 master weights and two moments, 12 B per
    parameter, split by the distributed optimizer over DP 1 x CP 8: 12 x 1,418,996,800 / 8 = 2,128,495,200 B."""
    s = estimate(load_preset("wan-1.3b")).stages[0]
    assert (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes) == (2_837_993_600, 2_837_993_600, 2_128_495_200)


def test_states_of_the_14b_recipe_on_tp2():
    """wan_14b_pretrain_8gpu_h100_bf16_config, TP 2. Split over TP per layer (h 5120, f 13824): QKV 3h^2 + 3h, the
    two output projections 2h^2, Q h^2 + h, KV 2h^2 + 2h, fc1 hf + f, fc2 fh: 8h^2 + 6h + 2hf + f = 351,317,504,
    175,658,752 a rank. Whole on every rank: both output biases, both attentions' q/k norms, norm3, the modulation,
    fc2's bias: 15h = 76,800. 40 layers: 40 x 175,735,552 = 7,029,422,080; embedders and head (replicated, plain
    PyTorch modules): 232,719,424. One rank: 7,262,141,504 parameters; bf16 weights and gradients 2 B each:
    14,524,283,008 B; Adam's 12 B over DP 1 x CP 4: 21,786,424,512 B."""
    s = estimate(load_preset("wan-14b")).stages[0]
    assert s.parameters == 7_262_141_504
    assert (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes) == (14_524_283_008, 14_524_283_008,
                                                                        21_786_424_512)


def test_tiny_activations_by_hand():
    """T = Tn = 32 tokens, Tk = Tkv = 8 text tokens, B 2, h = a dh = 64, a 4, f 256, t 1.

    Self-attention: layer input and modulated output 2 B Tn h = 8,192; norm statistics 8 Tn = 256; QKV output
    B T 3h = 12,288; q/k norm inputs B T 2h = 8,192 and rstd 8 T = 256; q, k after rotary positions 8,192; output
    B T h = 4,096; log-sum-exp 4 T a = 512; the gated projection output B Tn h = 4,096: 46,080.
    Cross-attention: norm3 input and output 8,192, statistics 256; query norm input B T h = 4,096, rstd 4 T = 128,
    normalised query 4,096; key/value output B Tk 2h = 2,048, key norm input B Tk h = 1,024, rstd 4 Tk = 32,
    normalised key 1,024; output 4,096; log-sum-exp 512: 25,504. Attention part 71,584.
    MLP: norm2 input, modulated output, gated fc2 output 3 B Tn h = 12,288; statistics 256; fc1 and GELU outputs
    2 B T f = 32,768: 45,312.
    First stage: patch embedding input B T c_in P = 2 x 32 x 16 = 1,024; text embedder B Tk (D + 2C) = 2 x 8 x 160
    = 2,560; the text embeddings B Tk C = 1,024; fp32 rotary angles 4 s b dh = 4 x 32 x 16 = 2,048: 6,656. Last
    stage: head 3 B Tn h + 8 Tn = 12,544, its output
    B T c_out P = 1,024: 13,568."""
    r = resolve(load_config(_tiny()))
    a = layer_activations(r, r.kinds[0])
    assert (a.attention, a.mlp) == (71_584, 45_312)
    assert a.checkpoint == 2 * 32 * 64
    x = stage_extras(r, None)
    assert (x.embedding, x.output, x.logits_peak) == (6_656, 13_568, 0)


def test_tiny_activations_with_tp2_and_sequence_parallelism():
    """t 2 with sequence parallelism: Tn = 16, and the key/value projection all-gathers the (unscattered) text
    embeddings, Tkv = 2 x 8 = 16.

    Self-attention: 2 B Tn h = 4,096; 8 Tn = 128; QKV B T 3h / 2 = 6,144; q/k norm inputs over all heads
    B T 2h = 8,192 and 8 T = 256; q, k B T 2h / 2 = 4,096; output B T h / 2 = 2,048; log-sum-exp 4 T a / 2 = 256;
    gated output B Tn h = 2,048: 27,264. Cross-attention: 4,096 + 128; query norm input B T h = 4,096, 4 T = 128,
    normalised query 2,048; key/value output B Tkv 2h / 2 = 2,048, key norm input B Tkv h = 2,048, 4 Tkv = 64,
    normalised key 1,024; output 2,048; log-sum-exp 256: 17,984. Attention part 45,248.
    MLP: 3 B Tn h = 6,144; 8 Tn = 128; 2 B T f / 2 = 16,384: 22,656."""
    r = resolve(load_config(_tiny({"tensor_model_parallel_size": 2},
                                  {"world_size": 2, "sequence_parallel": True})))
    a = layer_activations(r, r.kinds[0])
    assert (a.attention, a.mlp) == (45_248, 22_656)


def test_latent_grid_sets_the_sequence():
    """Bridge's mock data, 24 x 104 x 60 latents with 1 x 2 x 2 patches: 24 x 52 x 30 = 37,440 tokens (divisible by
    2 x CP 8; Bridge's examples/models/wan/performance-summary.md lists Wan 2.1 14B at "Seq Len 37440"). A
    1 x 52 x 30-patch image (F_latents 1) has 1,560 tokens. With CP 4 Bridge's task encoder pads a
    sample to a multiple of 2 x 4 = 8: 1 x 14 x 446 latents are 7 x 223 = 1,561 patches, padded to 1,568."""
    assert resolve(load_config(load_preset("wan-1.3b"))).s == 37_440
    grid = {"wan_latent_frames": 1, "wan_latent_height": 104, "wan_latent_width": 60}
    assert resolve(load_config(_tiny(**grid))).s == 1_560
    odd = {"wan_latent_frames": 1, "wan_latent_height": 14, "wan_latent_width": 446}
    r = resolve(load_config(_tiny({"context_parallel_size": 4}, {"world_size": 4}, **odd)))
    assert r.s == 1_568


def test_hidden_dropout_keeps_no_mask():
    """WanLayerWithAdaLN adds its residuals with scale_add and add_residual, without dropout, and WanModel applies
    none to the patch embedding: hidden_dropout (a TransformerConfig field Wan's layers never read) keeps no mask."""
    r0 = resolve(load_config(_tiny()))
    r1 = resolve(load_config(_tiny(hidden_dropout=0.1)))
    assert layer_activations(r1, r1.kinds[0]) == layer_activations(r0, r0.kinds[0])
    assert stage_extras(r1, None) == stage_extras(r0, None)
