"""``estimator.plan.advice`` (valid values, nearest fixes, levers), ``estimator.web.form`` (labels, hidden fields) and
``estimator.plan.verdicts`` (the one vocabulary). Expected values are worked out by hand from the models' shapes
in each docstring; every offered value is also checked against the core's own validation."""

from __future__ import annotations

import math

import pytest

from estimator.plan import advice, verdicts
from estimator.web import form
from estimator.config.load import load_config
from estimator.formats.presets import list_presets, load_preset
from estimator.config.schema import field_specs

TP, PP, VPP, CP, EP, ETP = advice.TP, advice.PP, advice.VPP, advice.CP, advice.EP, advice.ETP


def _values(cfg: dict, path: str) -> list:
    return [o["value"] for o in advice.choices(cfg)[path]]


def test_tensor_parallel_sizes_divide_heads_groups_and_widths():
    """Qwen2.5-7B: 28 heads, 4 KV heads, MLP 18,944 = 2^8 x 74: TP 1, 2, 4 (7, 14 and 28 are neither
    divisors nor multiples of the 4 KV heads)."""
    assert _values(load_preset("qwen2.5-7b").to_dict(), TP) == [1, 2, 4]
    # Llama 3 8B: 32 heads, 8 KV heads, MLP 14,336 = 2^11 x 7: 1, 2, 4, 8, and 16, 32 (multiples of the 8 KV heads:
    # Megatron-Core gives each rank one, the QKV projection's (32 + 16) x 128 = 6,144 outputs split evenly).
    assert _values(load_preset("llama-3-8b").to_dict(), TP) == [1, 2, 4, 8, 16, 32]


def test_expert_parallel_sizes_divide_the_experts():
    """Mixtral 8x7B has 8 experts: EP 1, 2, 4, 8; a dense model has no EP control."""
    assert _values(load_preset("mixtral-8x7b").to_dict(), EP) == [1, 2, 4, 8]
    assert EP not in advice.choices(load_preset("llama-3-8b").to_dict())


def test_pipeline_sizes_carry_the_split_they_need():
    """DeepSeek-V3 has 61 layers (prime): PP 16 needs an uneven split, 1 layer on the first stage and 4 on
    each other (1 + 15 x 4 = 61); PP 8 keeps the preset's own layout string Et|(tt|)*30mL (which sets the
    virtual stages itself); every other choice drops the layout."""
    opts = {o["value"]: o for o in advice.choices(load_preset("deepseek-v3").to_dict())[PP]}
    plain = {advice.LAYOUT: None, advice.GROUP: None, advice.ACC_E: False, advice.ACC_L: False}
    assert opts[16]["set"] == {advice.FIRST: 1, advice.LAST: None, VPP: None, **plain}
    assert opts[8]["set"] == {advice.FIRST: None, advice.LAST: None, VPP: None, advice.LAYOUT: "Et|(tt|)*30mL",
                              advice.ACC_E: False, advice.ACC_L: False}
    assert opts[61]["set"] == {advice.FIRST: None, advice.LAST: None, VPP: None, **plain}
    assert 7 not in opts                          # 61 = 8 + 5 x 9.6 + 5, and 7 is no power of two


def test_virtual_pipeline_sizes_divide_every_stage():
    """Llama 3 70B: 80 layers on PP 4 = 20 per stage: VPP 2, 4, 5, 10, 20 (and none)."""
    assert _values(load_preset("llama-3-70b").to_dict(), VPP) == [None, 2, 4, 5, 10, 20]


def test_micro_batch_sizes_divide_the_global_batch_per_rank():
    """Qwen3 8B: global batch 32 on DP 2 (8 GPUs / TP 4): 16 sequences per rank: 1, 2, 4, 8, 16."""
    assert _values(load_preset("qwen3-8b").to_dict(), advice.MBS) == [1, 2, 4, 8, 16]


@pytest.mark.parametrize("name", list_presets())
def test_every_offered_value_is_valid_for_the_model(name):
    """Each value the quick controls offer, with its companion fields, on a world size that its product
    divides and without a global batch, passes the core's validation."""
    cfg = load_preset(name).to_dict()
    for path, opts in advice.choices(cfg).items():
        if path in (advice.MBS, advice.RECOMPUTE, advice.SP):      # sequence parallelism: set below
            continue
        for opt in opts:
            peft = {advice.PEFT: "lora"} if path == advice.PEFT_DIM else {}    # a rank applies to adapters only
            c = advice.with_changes(cfg, {path: opt["value"], **opt.get("set", {}), **peft})
            par = c.setdefault("parallelism", {})
            t, p, cp = (par.get("tensor_model_parallel_size", 1), par.get("pipeline_model_parallel_size", 1),
                        par.get("context_parallel_size", 1))
            etp = par.get("expert_tensor_parallel_size") or t
            c["training"]["world_size"] = math.lcm(t * p * cp, etp * par.get("expert_model_parallel_size", 1) * p)
            c["training"].pop("global_batch_size", None)
            c["training"]["sequence_parallel"] = t > 1 and par.get("expert_model_parallel_size", 1) > 1
            load_config(c)                        # raises ConfigError naming the problem


def test_world_size_steps_are_the_nearest_valid():
    """Llama 3 8B (TP 1 x PP 1 x CP 2 = 2, global batch 512) on 8 GPUs: below, 6 GPUs (DP 3) do not divide
    512, 4 (DP 2) do; above, 10, 12 and 14 (DP 5, 6, 7) do not, 16 (DP 8) do."""
    steps = advice.steps(load_preset("llama-3-8b").to_dict())
    assert steps[advice.WORLD] == [4, 16]
    assert steps[advice.GBS] == [508, 516]         # multiples of micro-batch 1 x DP 4 next to 512


def test_hidden_fields_follow_the_model():
    dense, moe, mla = (load_preset(n).to_dict() for n in ("llama-3-8b", "mixtral-8x7b", "deepseek-v3"))
    assert {"model.moe_router_topk", EP, ETP, "model.q_lora_rank"} <= set(form.hidden_fields(dense))
    assert EP not in form.hidden_fields(moe) and "model.q_lora_rank" in form.hidden_fields(moe)
    assert "model.q_lora_rank" not in form.hidden_fields(mla) and "model.num_query_groups" in form.hidden_fields(mla)


def test_every_field_has_words_and_no_label_is_stale():
    paths = {s.path for s in field_specs()}
    assert set(form.LABELS) <= paths
    assert all(form.label(p) for p in paths)
    assert form.label("model.num_query_groups") == "KV heads"
    assert form.label("parallelism.pipeline_model_parallel_layout") == "Pipeline model parallel layout"  # a new field
    assert {p for p, _ in form.QUICK} <= paths


def test_one_vocabulary():
    assert verdicts.WORDS == {"fits": "fits", "tight": "fits within the error band", "no": "does not fit"}
    assert set(verdicts.MEANINGS) == set(verdicts.WORDS)


# ---------------------------------------------------------------- issue 29, item 2: controls that cannot go invalid


def _state_cfg(preset: str, **values) -> dict:
    from estimator.web import merged_config
    cfg, problems = merged_config({"preset": preset, "values": {k.replace("__", "."): str(v) for k, v in values.items()}})
    return cfg


def test_gpus_1000_on_llama_3_8b_lands_on_the_gpu_count_with_1024_or_512():
    """Llama 3 8B (CP 2, micro-batch 1, global batch 512) on 1000 GPUs: DP 500 does not divide 512. The field the
    user changed is the GPU count, so the note is there; the nearest GPU counts whose DP (= GPUs / 2) divides 512
    are 1024 (DP 512) and 512 (DP 256); 988 to 1012 (the 12 nearest multiples of 2) all fail."""
    cfg = _state_cfg("llama-3-8b", training__world_size=1000)
    problems = advice._problems(cfg)
    notes = advice.fixes(cfg, problems, changed=advice.WORLD)
    assert [n["field"] for n in notes] == [advice.WORLD]
    assert [f["set"] for f in notes[0]["fixes"]] == [{advice.WORLD: 1024}, {advice.WORLD: 512}]
    assert advice.steps(cfg)[advice.WORLD] == [512, 1024]     # the steppers lead there, though the form is refused


def test_tp_2_on_mixtral_brings_sequence_parallelism():
    """Mixtral 8x7B's preset (EP 8, PP 4, 64 GPUs, no sequence parallelism): Megatron-Core requires sequence
    parallelism with tensor and expert parallelism together, so TP 2 comes with it, and says why."""
    opts = {o["value"]: o for o in advice.choices(_state_cfg("mixtral-8x7b"), gpus=True)[advice.TP]}
    assert opts[2]["also"] == {advice.SP: True} and opts[2]["set"][advice.SP] is True
    assert "requires sequence_parallel" in opts[2]["why"]
    assert "also" not in opts[1]


def test_ep_on_qwen3_30b_at_16_gpus_offers_only_what_fits_the_gpus():
    """Qwen3-30B-A3B's preset (TP 4, PP 2, EP 4, ETP 1, sequence parallelism) on 16 GPUs: the expert grid is
    ETP 1 x EP x PP 2, which must divide 16, so EP 1, 2, 4, 8 (EP 16 needs 32 GPUs); every one is valid as offered."""
    cfg = _state_cfg("qwen3-30b-a3b", training__world_size=16)
    eps = advice.choices(cfg, gpus=True)[advice.EP]
    assert [o["value"] for o in eps] == [1, 2, 4, 8]
    for o in eps:
        assert not advice._problems(advice.with_changes(cfg, {advice.EP: o["value"], **o.get("set", {})}))


def test_sequence_plus_stops_at_max_position_embeddings():
    """Llama 3 8B at its 8192-token context (max_position_embeddings 8192): no longer sequence above, 4096 below."""
    assert advice.steps(_state_cfg("llama-3-8b"))[advice.SEQ] == [4096, None]


def test_peft_is_offered_where_modelled():
    """LoRA and DoRA on a dense model; on MoE LoRA only (Megatron-Bridge's DoRA has no expert adapters, and the
    default targets include linear_fc1 / linear_fc2); the rank list only with them."""
    dense = advice.choices(_state_cfg("llama-3-70b-lora"), gpus=True)
    assert [o["value"] for o in dense[advice.PEFT]] == [None, "lora", "dora"]
    assert 16 in [o["value"] for o in dense[advice.PEFT_DIM]]
    moe = advice.choices(_state_cfg("mixtral-8x7b"), gpus=True)
    assert [o["value"] for o in moe[advice.PEFT]] == [None, "lora"]
    assert 16 in [o["value"] for o in moe[advice.PEFT_DIM]]


@pytest.mark.parametrize("preset,path,typed,field_fixes", [
    # Llama 3 70B (64 heads, 8 KV heads, MLP 28,672 = 2^12 x 7): TP divides 8 -> 1, 2, 4, 8; nearest 3: 2 and 4.
    ("llama-3-70b", TP, 3, [2, 4]),
    # 80 layers, 32 GPUs = TP 4 x PP 2 x CP 2 x DP 2: PP 3 neither divides 80 nor 32 / (4 x 2); nearest 2 and 4
    # (80 / 4 = 20 layers a stage, 32 = 4 x 4 x 2 x DP 1), then 1.
    ("llama-3-70b", PP, 3, [2, 4, 1]),
    # Mixtral 8x7B: 8 experts, 64 GPUs, PP 4 (ETP 1): EP 3 divides neither; nearest 2 and 4 (8 / 4 = 2), then 1.
    ("mixtral-8x7b", EP, 3, [2, 4, 1]),
    # Llama 3 8B: global batch 512 over DP 4 (8 GPUs / CP 2): micro-batch 3 does not divide 128; 2 and 4 do.
    ("llama-3-8b", advice.MBS, 3, [2, 4, 1]),
    # ... global batch 130 is not a multiple of micro-batch 1 x DP 4 = 4: 128 and 132.
    ("llama-3-8b", advice.GBS, 130, [128, 132]),
    # Llama 3 70B (TP 4, CP 2, sequence parallelism): the sequence must be a multiple of lcm(2 x CP, TP x CP) = 8:
    # 8191 -> 8192 (1 away) and 8184 (7 away).
    ("llama-3-70b", advice.SEQ, 8191, [8192, 8184]),
    # Llama 3 8B's position embeddings end at 8192 tokens: past them, the longest allowed, 8192.
    ("llama-3-8b", advice.SEQ, 1_000_000, [8192]),
])
def test_errors_land_on_the_field_changed_with_its_nearest_valid_values(preset, path, typed, field_fixes):
    """Issue 29 item 2: beyond the GPU count, a refused TP, PP, EP, micro-batch, global batch or sequence length
    is noted on that field, with its nearest valid values (each one valid as offered). On main a sequence past
    max_position_embeddings offered nothing."""
    cfg = _state_cfg(preset, **{path.replace(".", "__"): typed})
    notes = advice.fixes(cfg, advice._problems(cfg), changed=path)
    assert [n["field"] for n in notes] == [path]
    assert [f["set"][path] for f in notes[0]["fixes"]] == field_fixes
    for f in notes[0]["fixes"]:
        assert not advice._problems(advice.with_changes(cfg, f["set"]))


def test_tp_2_typed_on_mixtral_keeps_it_with_sequence_parallelism():
    """Mixtral 8x7B (EP 8, no sequence parallelism) with TP 2 typed in the full form: Megatron-Core requires
    sequence parallelism with tensor and expert parallelism together. The note is on TP (the field changed; on
    main it landed on the sequence-parallelism switch under All settings) and its first fix keeps TP 2 and turns
    sequence parallelism on, instead of undoing the change."""
    cfg = _state_cfg("mixtral-8x7b", parallelism__tensor_model_parallel_size=2)
    notes = advice.fixes(cfg, advice._problems(cfg), changed=TP)
    assert [n["field"] for n in notes] == [TP]
    first = notes[0]["fixes"][0]
    assert first == {"label": "keep 2: sequence parallelism on", "set": {advice.SP: True}}
    assert not advice._problems(advice.with_changes(cfg, first["set"]))


def test_steppers_of_a_refused_form_lead_to_valid_values():
    """A refused form's global-batch and sequence steppers still step to the nearest values that make it valid
    (on main only the GPU steppers did, the others did nothing): Llama 3 8B with global batch 130 (multiple of
    4 needed) -> 128 and 132; with sequence 8191 (TP 1, CP 2: a multiple of 2 x CP = 4) -> 8188 and 8192."""
    assert advice.steps(_state_cfg("llama-3-8b", training__global_batch_size=130))[advice.GBS] == [128, 132]
    assert advice.steps(_state_cfg("llama-3-8b", training__seq_length=8191))[advice.SEQ] == [8188, 8192]
