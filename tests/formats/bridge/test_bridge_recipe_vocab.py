"""Library recipes as Bridge runs them: the tokenizer's vocabulary and the precision preset over the DDP field.

Source facts from NVIDIA-NeMo/Megatron-Bridge @ 067f987d: recipes/common.py ``_pretrain_common`` sets
``tokenizer.use_tokenizer_vocab_size`` True and ``mixed_precision`` "bf16_mixed"; training/setup.py
``_validate_and_set_vocab_size`` then takes the tokenizer's vocabulary, padded to a multiple of 128 x TP;
recipes/utils/tokenizer_utils.py ``DEFAULT_NULL_TOKENIZER_VOCAB_SIZE`` is 32,000.
"""

from __future__ import annotations

from estimator import count_parameters_of, estimate, load_config
from estimator.model.resolve import resolve
from estimator.formats.bridge.recipes import read_bridge_recipe


def test_llama3_70b_library_recipe_uses_the_null_tokenizer_vocabulary():
    """Meta's published count for Llama 3 70B is 70,553,706,496 with 128,256 rows in the untied embedding and output
    layer (h 8192). The recipe's NullTokenizer has 32,000 tokens, padded to a multiple of 128 x TP 4 = 512: 32,256.
    By hand: 70,553,706,496 - 2 x (128,256 - 32,256) x 8,192 = 70,553,706,496 - 1,572,864,000 = 68,980,842,496."""
    imp = read_bridge_recipe("llama3_70b_pretrain_32gpu_h100_bf16_config")
    assert imp.config["model"]["vocab_size"] == 32000 and resolve(load_config(imp.config)).Vp == 32256
    assert count_parameters_of(imp.config).total == 68_980_842_496


def test_qwen25_72b_library_recipe_keeps_fp32_gradients():
    """The recipe sets ddp.grad_reduce_in_fp32 False, but bf16_mixed (grad_reduce_in_fp32 True) overwrites it: an
    fp32 gradient buffer, 4 B per parameter against the weights' 2 B, on every stage (DP 1, no FSDP)."""
    imp = read_bridge_recipe("qwen25_72b_pretrain_32gpu_h100_bf16_config")
    assert imp.config["precision"]["accumulate_allreduce_grads_in_fp32"] is True
    for st in estimate(imp.config).to_dict()["stages"]:
        assert st["gradients_bytes"] == 2 * st["weights_bytes"]
    # vocabulary: 32,000 padded to a multiple of 128 x TP 8 = 1,024: 32,768
    assert imp.config["model"]["vocab_size"] == 32000 and resolve(load_config(imp.config)).Vp == 32768
