"""MoE routing imbalance, ``training.moe_overload_factor`` (estimator/model/layers/moe.py ``received``), by hand from
Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/token_dispatcher.py: ``MoEAlltoAllTokenDispatcher.preprocess``
sizes the rows a rank receives as the sum of its local experts' counts over the group (``output_splits``,
``num_tokens_per_local_expert``), and everything after the dispatch (``dispatch_postprocess``, the experts,
``combine_preprocess``) holds that many rows; the rank's own tokens' copies before the dispatch and after the
combine stay ``tokens x topk``.

The model of most tests: 2 layers, h 256, 4 heads, 16 experts of width 64, top-4, SwiGLU (fc1 is 2 x 64 wide),
bf16 (2 B), sequence 4096, micro-batch 1, EP 4 on 4 GPUs (TP 1, so a rank holds 4096 tokens and 16 / 4 = 4 local
experts). Balanced, a rank's experts receive 4096 x 4 = 16,384 rows; at factor 1.5, 24,576: 8,192 more.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_config
from estimator.config.derived import max_overload_factor
from estimator.memory.activations import layer_activations
from estimator.memory.features.delayed_wgrad import kind_windows
from estimator.memory.features.schedule import ep_overlap_layer
from estimator.model.layers import LayerKind
from estimator.model.layers.moe import dispatch_rows, received_rows, routed_rows
from estimator.model.resolve import resolve
from tests.conftest import make_config

MOE = dict(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=128, num_experts=16, moe_router_topk=4,
           moe_ffn_hidden_size=64)
EP4 = {"expert_model_parallel_size": 4}
KIND = LayerKind("attention", "moe")


def _resolved(f=1.0, model=None, par=None, tr=None):
    return resolve(load_config(make_config(model or MOE, EP4 if par is None else par,
                                           {"world_size": 4, "moe_overload_factor": f, **(tr or {})})))


def _acts(f, **kw):
    return layer_activations(_resolved(f, **kw), KIND, parts=True)


def test_what_scales_at_factor_1_5():
    """Per MoE layer and micro-batch, 8,192 more rows at factor 1.5, each keeping (bf16):

    - the experts' input (fc1's saved input), h = 256 wide:        2 x 256 = 512 B  -> 4,194,304 B more
    - fc1's output (the SwiGLU's saved input), 2 x 64 wide:        2 x 128 = 256 B  -> 2,097,152 B more
    - the SwiGLU's output (fc2's saved input), 64 wide:            2 x 64  = 128 B  -> 1,048,576 B more

    7,340,032 B more in all (896 B a row); the norm's input and output, the router's tensors and everything else
    per token stay as they are. The backward working set, two row-sized copies of the expert-output gradient (4
    local experts re-sort their rows): 2 x 2 x 256 = 1,024 B a row, 8,388,608 B more (16,777,216 -> 25,165,824)."""
    one, more = _acts(1.0), _acts(1.5)
    grown = {k: more.parts[k] - one.parts[k] for k in one.parts if more.parts[k] != one.parts[k]}
    assert grown == {"expert_in": 4_194_304, "expert_fc1_out": 2_097_152, "expert_act_out": 1_048_576}
    assert more.mlp - one.mlp == 7_340_032
    assert more.attention == one.attention
    assert (one.backward_peak, more.backward_peak) == (16_777_216, 25_165_824)


def test_rows_round_down_and_factor_one_changes_nothing():
    """16,384 x 1.26 = 20,643.84: the busiest rank holds 20,643 rows (at most 1.26 x its share). The rows the rank
    sends (its own tokens' 4 copies, 16,384) do not change; the rows it receives before any expert-TP gather do."""
    r = _resolved(1.26)
    assert (routed_rows(r, 4096, 4096), received_rows(r, 4096, 4096), dispatch_rows(r, 4096, 4096)) == \
        (20_643, 20_643, 16_384)
    r1 = _resolved(1.0)
    assert routed_rows(r1, 4096, 4096) == received_rows(r1, 4096, 4096) == dispatch_rows(r1, 4096, 4096) == 16_384


def test_one_local_expert_moves_its_rows_only_through_the_all_to_all():
    """4 experts on EP 4, top-2: one local expert, no expert-TP gather, so the backward's only move is the
    all-to-all: the rank's own 4096 x 2 = 8,192 copies (P) beside the rows it received (R). At factor 1.5,
    R = 12,288: (8,192 + 12,288) x 256 x 2 = 10,485,760 B, above fc1's pair 12,288 x (128 + 256) x 2 = 9,437,184.
    Balanced, 2 x 8,192 x 256 x 2 = 8,388,608 B, as before."""
    model = {**MOE, "num_experts": 4, "moe_router_topk": 2}
    assert _acts(1.0, model=model).backward_peak == 8_388_608
    assert _acts(1.5, model=model).backward_peak == 10_485_760


def test_expert_parallel_overlap_scales_the_received_rows_only():
    """The combined 1F1B step (estimator/memory/features/schedule.py): the tokens waiting for the dispatch and
    their gradient are the rank's own 16,384 copies, 16,384 x 256 x 2 = 8,388,608 B at any factor; the experts'
    output gradient X holds the received rows, 24,576 x 256 x 2 = 12,582,912 B at factor 1.5. The delayed weight
    gradients' dispatch output likewise (estimator/memory/features/delayed_wgrad.py)."""
    r = _resolved(1.5)
    a = layer_activations(r, KIND, parts=True)
    x = ep_overlap_layer(r, KIND, a)
    assert (x.waiting, x.token_grad, x.expert_grad) == (8_388_608, 8_388_608, 12_582_912)
    assert kind_windows(r, KIND, a.parts).dispatch == 12_582_912


def test_deterministic_unpermute_source():
    """--deterministic-mode (estimator/model/layers/moe.py ``unpermute_source``): with alltoall the source is the
    rank's own tokens' copies back from the all-to-all, 16,384 x 256 x 2 = 8,388,608 B at any factor; with
    allgather it is the local experts' output rows, 24,576 x 256 x 2 = 12,582,912 B at factor 1.5."""
    det = {"deterministic_mode": True}
    assert _acts(1.5, tr=det).parts["unpermute_source"] == 8_388_608
    gather = {**MOE, "moe_token_dispatcher_type": "allgather"}
    assert _acts(1.5, model=gather, tr=det).parts["unpermute_source"] == 12_582_912


def test_capacity_factor_caps_the_factor():
    """Token dropping with capacity factor 1.25: an expert keeps at most 1.25 x its share, so factor 1.25 gives
    16,384 x 1.25 = 20,480 rows. Padding to capacity fills every expert to it whatever the routing: factor 1.0
    and 1.25 both give 20,480 rows."""
    drop = {**MOE, "moe_expert_capacity_factor": 1.25}
    assert routed_rows(_resolved(1.25, model=drop), 4096, 4096) == 20_480
    pad = {**drop, "moe_pad_expert_input_to_capacity": True}
    assert routed_rows(_resolved(1.0, model=pad), 4096, 4096) == routed_rows(_resolved(1.25, model=pad), 4096, 4096) \
        == 20_480


@pytest.mark.parametrize("model, par, bound", [
    (MOE, EP4, 4.0),                                                      # 4 x min(4, 4) / 4
    ({**MOE, "moe_router_topk": 8}, {"expert_model_parallel_size": 8}, 2.0),   # 8 x min(8, 2) / 8 = 16 / 8
    ({**MOE, "moe_router_topk": 2}, EP4, 4.0),                            # 4 x min(2, 4) / 2
    ({**MOE, "moe_expert_capacity_factor": 1.25}, EP4, 1.25),             # min(4, max(1, 1.25))
    ({**MOE, "moe_expert_capacity_factor": 0.5}, EP4, 1.0),               # min(4, max(1, 0.5))
    (MOE, {}, 1.0),                                                       # one expert-parallel rank
])
def test_the_physical_bound(model, par, bound):
    """The busiest rank can receive at most every token of its group for each of its experts a token picks:
    EP x min(top-k, local experts) / top-k times its share; a capacity factor c caps it at max(1, c)."""
    cfg = load_config(make_config(model, par, {"world_size": 8}))
    assert max_overload_factor(cfg.model, cfg.parallelism) == bound


def test_a_factor_past_the_bound_is_capped_with_the_reason():
    """The factor describes the routing; a layout receives at most its bound (EP x min(k, local) / k = 4 here, 1
    with one expert-parallel rank, max(1, c) under token dropping). A factor past it estimates exactly as the bound
    and says so in the assumptions, so a layout-changing tool (search, sweeps, "Make it fit") can keep it as
    written."""
    def bytes_and_note(model, par, tr):
        est = estimate(make_config(model, par, tr))
        (note,) = [a for a in est.assumptions if "moe_overload_factor" in a]
        return [s.allocated_bytes for s in est.stages], note

    past, note = bytes_and_note(MOE, EP4, {"world_size": 4, "moe_overload_factor": 4.5})
    at, _ = bytes_and_note(MOE, EP4, {"world_size": 4, "moe_overload_factor": 4})
    assert past == at
    assert "capped by the layout" in note and "at most 4 x" in note and "expert_model_parallel_size (4)" in note
    one, note = bytes_and_note(MOE, {}, {"moe_overload_factor": 1.1})
    assert one == bytes_and_note(MOE, {}, {})[0] and "one rank holds every expert" in note
    drop = {**MOE, "moe_expert_capacity_factor": 1.25}
    past, note = bytes_and_note(drop, EP4, {"world_size": 4, "moe_overload_factor": 1.5})
    assert past == bytes_and_note(drop, EP4, {"world_size": 4, "moe_overload_factor": 1.25})[0]
    assert "moe_expert_capacity_factor 1.25 drops" in note
    with pytest.raises(ConfigError, match="applies only to MoE models"):
        load_config(make_config({k: v for k, v in MOE.items() if not k.startswith(("num_experts", "moe_"))}, {},
                                {"moe_overload_factor": 1.5}))
    with pytest.raises(ConfigError, match="must be >= 1, got 0.9"):        # below balanced: the schema's minimum
        load_config(make_config(MOE, EP4, {"world_size": 4, "moe_overload_factor": 0.9}))


def test_factor_one_is_the_balanced_estimate():
    """1.0, the default, is what the estimate always assumed: given or not, the same bytes."""
    base = make_config(MOE, EP4, {"world_size": 4})
    given = make_config(MOE, EP4, {"world_size": 4, "moe_overload_factor": 1.0})
    assert estimate(base).to_dict()["stages"] == estimate(given).to_dict()["stages"]
