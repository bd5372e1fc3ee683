"""HybridEP's per-rank budget, ``moe_expert_rank_capacity_factor`` (estimator/model/layers/moe.py ``rank_budget``), by
hand from Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/token_dispatcher.py ``_HybridEPManager.setup_metadata``:
``budget = int(padded_num_tokens * moe_router_topk * factor)``, rounded up to ``get_align_size_for_quantization``
(256 with the op fuser or grouped tensors, which TransformerConfig requires with the factor), passed to HybridEP as
the fixed number of permuted rows; and megatron/core/transformer/moe/paged_stash.py ``PagedStashRunner``, which
reruns an over-budget step with the factor cleared (dropless: the rows the routing sends).

The model (as tests/model/layers/test_overload.py): 2 layers, h 256, 4 heads, 16 experts of width 64, top-4, SwiGLU,
bf16, sequence 4096, micro-batch 1, EP 4 on 4 GPUs with the flex dispatcher's hybridep backend. A rank holds 4096
tokens; balanced, its experts receive 4096 x 4 = 16,384 rows. Each routed row keeps 896 B (the experts' input
2 x 256, fc1's output 2 x 128, the SwiGLU's output 2 x 64).
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_config
from estimator.memory.activations import layer_activations
from estimator.model.layers import LayerKind
from estimator.model.layers.moe import arriving_rows, rank_budget, routed_rows
from estimator.model.resolve import resolve
from tests.conftest import make_config

MOE = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=128, num_experts=16, moe_router_topk=4,
           moe_ffn_hidden_size=64, moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep")
EP4 = {"expert_model_parallel_size": 4}
KIND = LayerKind("attention", "moe")


def _resolved(c=None, f=1.0, tr=None):
    return resolve(load_config(make_config({**MOE, "moe_expert_rank_capacity_factor": c}, EP4,
                                           {"world_size": 4, "moe_overload_factor": f, **(tr or {})})))


@pytest.mark.parametrize("c, f, budget, rows", [
    (None, 1.0, None, 16_384),     # no budget: the rows the routing sends
    (None, 1.3, None, 21_299),     # 16,384 x 1.3 = 21,299.2, rounded down
    (1.0, 1.0, 16_384, 16_384),    # int(4096 x 4 x 1.0) = 16,384, already a multiple of 256
    (1.0, 1.3, 16_384, 21_299),    # 21,299 > 16,384: over budget, the step is rerun dropless at 21,299
    (1.5, 1.0, 24_576, 24_576),    # int(16,384 x 1.5) = 24,576 = 96 x 256: the static rows, balanced or not
    (1.5, 1.3, 24_576, 24_576),    # 21,299 fits: still the budget's 24,576
    (1.5, 1.6, 24_576, 26_214),    # 16,384 x 1.6 = 26,214.4 > 24,576: rerun at 26,214
    (1.01, 1.0, 16_640, 16_640),   # int(16,547.84) = 16,547, rounded up to 65 x 256 = 16,640
])
def test_budget_and_routed_rows(c, f, budget, rows):
    """The busiest rank holds max(budget, the overload factor's rows) per MoE layer and micro-batch."""
    r = _resolved(c, f)
    assert rank_budget(r, 4096) == budget
    assert arriving_rows(r, 4096, 4096) == (16_384 if f == 1.0 else int(16_384 * f))
    assert routed_rows(r, 4096, 4096) == rows


def test_capacity_factor_1_5_against_1_0_with_and_without_imbalance():
    """Per MoE layer and micro-batch: at budget 1.5 the layer keeps 24,576 rows whatever the routing up to it, 8,192
    more than at 1.0 (16,384): 8,192 x 896 = 7,340,032 B. Under imbalance 1.3 the budget 1.0 is exceeded and the
    rerun keeps 21,299 rows: 4,915 x 896 = 4,403,840 B above balanced, 3,277 x 896 = 2,936,192 B below budget
    1.5. The backward working set (4 local experts re-sort their rows: two row-sized gradient copies, 2 x 2 x 256 =
    1,024 B a row) follows the same rows: 16,384 x 1,024 = 16,777,216 B at 1.0, 24,576 x 1,024 = 25,165,824 B at
    1.5."""
    def acts(c, f):
        return layer_activations(_resolved(c, f), KIND)
    one, half = acts(1.0, 1.0), acts(1.5, 1.0)
    assert half.mlp - one.mlp == 7_340_032
    assert half.attention == one.attention
    assert (one.backward_peak, half.backward_peak) == (16_777_216, 25_165_824)
    assert acts(1.5, 1.3).mlp == half.mlp                      # within the budget: unchanged
    assert acts(1.0, 1.3).mlp - one.mlp == 4_403_840           # over it: the dropless rerun's rows
    assert half.mlp - acts(1.0, 1.3).mlp == 2_936_192
    assert acts(None, 1.3).mlp == acts(1.0, 1.3).mlp           # the rerun is the plain dropless layer


def test_the_estimate_says_which_case_it_took():
    within = estimate(make_config({**MOE, "moe_expert_rank_capacity_factor": 1.5}, EP4,
                                  {"world_size": 4, "moe_overload_factor": 1.3}))
    (note,) = [a for a in within.assumptions if "per-rank budget" in a]
    assert "24,576 routed rows" in note and "21,299" in note and "Within the budget" in note
    over = estimate(make_config({**MOE, "moe_expert_rank_capacity_factor": 1.0}, EP4,
                                {"world_size": 4, "moe_overload_factor": 1.3}))
    (note,) = [a for a in over.assumptions if "per-rank budget" in a]
    assert "Above the budget" in note and "reruns it dropless" in note


@pytest.mark.parametrize("model, tr, field, words", [
    ({"moe_flex_dispatcher_backend": "deepep"}, {}, "model.moe_expert_rank_capacity_factor", "hybridep"),
    ({"moe_token_dispatcher_type": "alltoall"}, {}, "model.moe_expert_rank_capacity_factor", "hybridep"),
])
def test_the_budget_needs_hybridep(model, tr, field, words):
    """TransformerConfig.__post_init__: the factor needs the flex dispatcher's hybridep (or ncclep, not modelled)
    backend."""
    with pytest.raises(ConfigError) as exc:
        load_config(make_config({**MOE, "moe_expert_rank_capacity_factor": 1.5, **model}, EP4,
                                {"world_size": 4, **tr}))
    assert any(p.field == field and words in p.message and p.value == 1.5 for p in exc.value.problems)


def test_the_budget_applies_only_to_moe_models():
    dense = {k: v for k, v in MOE.items() if not k.startswith(("num_experts", "moe_"))}
    with pytest.raises(ConfigError, match="applies only to MoE models"):
        load_config(make_config({**dense, "moe_expert_rank_capacity_factor": 1.5}, {}, {}))


def test_whole_iteration_graph_with_the_static_budget():
    """Dropless routing reads the tokens per expert on the host (refused under the whole-iteration CUDA graph);
    the static budget does not, and Bridge's MXFP8 Qwen3 and DeepSeek recipes capture it."""
    graph = {"world_size": 4, "cuda_graph_impl": "full_iteration"}
    with pytest.raises(ConfigError, match="moe_expert_rank_capacity_factor"):
        load_config(make_config(MOE, EP4, graph))
    assert load_config(make_config({**MOE, "moe_expert_rank_capacity_factor": 1.5}, EP4, graph))
