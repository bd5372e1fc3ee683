"""Held-out validation data (validation/megatron_ci.yaml, validation/known_to_run.yaml) and what the estimator
makes of it.

The measured values are Megatron-LM's own CI goldens (mem-max-allocated-bytes of the last rank, H100 and
GB200, NVIDIA/Megatron-LM @ d98e8a64), independent of this code. The targets asserted are the project's:
on the cases with complete configurations and no documented gap, median |error| <= 2 % and max <= 6 %.
Measured when this test was written (figures from the data file against the estimator of this commit):
239 goldens with memory, 173 read by the importer, 162 in the target set, median |error| 1.47 %, largest
4.55 %, 142 of the 162 under-estimates (the largest -3.9 %). After the recipe features became estimable and
their CI cases were checked against Megatron-Core's source (expert-parallel overlap, CUDA graph capture, Muon's
ping-pong assignment; fine-grained activation offloading refused): 193 in the target set, median |error|
1.36 %, largest 5.54 % (a GB200 dist_muon case whose logged rank is not the busiest one the estimate reports).
"""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

from estimator import load_config
from estimator.config import yamlio
from estimator.formats.gpus import get_gpu
from estimator.formats.presets import list_presets
from estimator.model.resolve import resolve
from estimator.validation.calibration import stats
from estimator.validation.megatron_ci import ci_cases, load_data, load_notes
from estimator.validation.known_to_run import load_recipes, recipe_cases, recipe_config

ROOT = Path(__file__).resolve().parents[2]
DATA = load_data()
CASES = ci_cases()
BY_ID = {c.id: c for c in CASES}


def _tool():
    spec = importlib.util.spec_from_file_location("megatron_ci_tool", ROOT / "validation" / "megatron_ci.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_golden_with_memory_is_a_case_or_listed_with_a_reason():
    assert DATA["source"]["revision"].startswith("d98e8a64")
    assert len(DATA["cases"]) >= 60
    for s in DATA["skipped"]:
        assert s["case"] and s["reason"]
    for c in DATA["cases"]:
        assert c["sources"]["golden"].startswith("NVIDIA/Megatron-LM @ ")
        if c.get("world_size") is None:
            assert c["world_size_reason"]
        else:
            assert c["logged_rank"] == c["world_size"] - 1
            assert c["sources"]["recipe"].endswith(".yaml")


def test_peak_is_the_largest_logged_peak():
    for c in DATA["cases"]:
        m = c["measured"]
        runs = m["max_allocated_bytes_runs"]
        assert m["peak_allocated_bytes"] == max(v for v in runs["bytes"] if v is not None)
        assert runs["from_step"] == sorted(runs["from_step"]) and runs["from_step"][0] == m["logged_steps"]["first"]


def test_stored_importer_outcome_is_current():
    """The data file records what the importer made of each case; after an importer change run
    `python validation/megatron_ci.py refresh` (no mirror needed)."""
    for c in DATA["cases"]:
        live = BY_ID[c["id"]].status
        assert c["importer"]["status"] == ("estimable" if live == "compared" else live), c["id"]


def test_at_least_sixty_cases_are_estimated_and_every_other_says_why():
    compared = [c for c in CASES if c.status == "compared"]
    assert len(compared) >= 60
    for c in CASES:
        if c.status != "compared":
            assert c.reason, c.id


def test_megatron_ci_target_on_complete_configurations():
    """Median |error| <= 2 %, max <= 6 % on the logged (last) rank, over the cases in the target set."""
    target = [c.comparison for c in CASES if c.in_target]
    assert len(target) >= 60
    s = stats(target)
    assert s.median_abs_error_pct <= 2.0, s
    assert s.max_abs_error_pct <= 6.0, s


def test_cases_left_out_of_the_target_carry_their_cause():
    notes = load_notes()
    kinds = {n["kind"] for n in notes}
    assert kinds <= {"incomplete", "gap", "info"}
    for c in CASES:
        if c.status == "compared" and not c.in_target:
            assert c.note_kind in ("incomplete", "gap") and c.reason, c.id


def test_every_note_explains_some_case():
    used = {c.reason for c in CASES if c.reason}
    for n in load_notes():
        assert n["cause"] in used, n["cause"][:60]


def test_launch_tokens_follow_the_ci_argv_rules():
    """tests/functional_tests/shell_test_utils/_run_training.sh: true -> the bare flag, [a b] -> its words."""
    tool = _tool()
    assert tool.launch_tokens({"--bf16": True, "--lr": 1.0e-5, "--recompute-modules": "[core_attn mlp]",
                               "--moe-layer-freq": "([0]*1+[1]*3)", "--x": False}) == [
        "--bf16", "--lr", "1e-05", "--recompute-modules", "core_attn", "mlp", "--moe-layer-freq", "([0]*1+[1]*3)",
        "--x", "false"]


def test_runs_are_lossless():
    tool = _tool()
    runs = tool._runs([1, 2, 3, 4], [5, 5, 7, 7])
    assert runs == {"from_step": [1, 3], "bytes": [5, 7]}


def test_cases_carry_the_files_their_flags_name():
    """--tp-comm-overlap-cfg names a file of the Megatron-LM repository: the data file carries its text (read at the
    data file's revision by `validation/megatron_ci.py extract`) and the importer reads it from there instead of
    refusing the flag. The two tp2_pp2 TP-overlap cases then meet Megatron-LM's own rule at this revision:
    --deterministic-mode refuses --tp-comm-overlap (megatron/training/determinism.py, added in 3ab71eeb, after their
    goldens were measured at 4828d651), so they are invalid rather than compared."""
    with_files = [c for c in DATA["cases"] if c.get("files")]
    assert {c["test_case"] for c in with_files} == {
        "gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap"}
    for c in with_files:
        [(path, text)] = c["files"].items()
        assert path in c["megatron_args"] and "fc2_fprop:\n  method: ring_exchange" in text
        case = BY_ID[c["id"]]
        assert case.status == "invalid" and "--deterministic-mode requires it off" in case.reason


# --- known-to-run recipes ---------------------------------------------------------------------------

RECIPES = load_recipes()


def test_recipes_name_their_source_preset_and_gpu():
    presets = set(list_presets())
    for r in RECIPES:
        assert r["source"].startswith("NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/perf_recipes/")
        assert r["preset"] in presets
        get_gpu(r["gpu"])
        assert isinstance(r.get("unmodelled"), list)


RECIPE_CASES = recipe_cases()


@pytest.mark.parametrize("case", RECIPE_CASES, ids=lambda c: c.id)
def test_no_false_out_of_memory_verdict(case):
    """Each recipe ran on its GPU: an estimated one must not be judged "does not fit"; one that cannot be
    estimated yet says why. A false verdict whose cause has been traced in Megatron-Core's source (the data
    file's false_oom_cause) is an expected failure that names the over-counted component until it is fixed."""
    if case.status == "not_estimable":
        assert case.reasons
    elif case.false_oom and case.known_cause:
        pytest.xfail(f"{case.device_gib:.1f} of {case.capacity_gib:.1f} GiB: {case.known_cause}")
    else:
        assert case.verdict in ("fits", "tight"), (case.device_gib, case.capacity_gib)


def test_recipe_data_says_what_the_estimator_cannot_state():
    """The data file, not the estimator, says why a recipe is not estimable: one with an empty unmodelled list
    loads without a refusal (a refused setting goes into unmodelled with its refusal message), a lower bound is
    claimed only over listed settings, and a traced false-OOM cause sits on a recipe that has that verdict."""
    by_id = {c.id: c for c in RECIPE_CASES}
    for r in RECIPES:
        case = by_id[r["id"]]
        if not r["unmodelled"]:
            assert case.status == "estimated" and not case.lower_bound, (r["id"], case.reasons)
        if r.get("unmodelled_only_adds"):
            assert r["unmodelled"], r["id"]
        if r.get("false_oom_cause"):
            assert case.false_oom, r["id"]


def test_recipes_carry_their_allocator_setting():
    """Each benchmark function of Bridge @ 067f987d replaces the recipe's env_vars with {**COMMON_PERF_ENV_VARS
    (TORCH_NCCL_HIGH_PRIORITY only), ...its own}; 26 of the 27 set PYTORCH_CUDA_ALLOC_CONF, among them
    llama3_8b_pretrain_8gpu_b200_bf16_config and llama3_70b_pretrain_64gpu_b200_bf16_config with
    graph_capture_record_stream_reuse:True beside expandable_segments:True, and
    llama3_70b_pretrain_64gpu_gb200_bf16_config sets none. It is training.pytorch_cuda_alloc_conf, no longer a
    run note. The default (fraction) reserve ignores it; the replay follows it: Llama 3 8B on 8 H100, expandable
    segments map what is allocated in 2 MiB pages, so the replayed reserve is below the one under PyTorch's default
    segments, with the same allocated bytes."""
    from estimator import estimate
    from estimator.formats.gpus import with_gpu_arch
    confs = {r["id"]: recipe_config(r)["training"].get("pytorch_cuda_alloc_conf") for r in RECIPES}
    assert not any("PYTORCH_CUDA_ALLOC_CONF" in (r.get("run") or {}) for r in RECIPES)
    both = "expandable_segments:True,graph_capture_record_stream_reuse:True"
    assert sorted(k for k, v in confs.items() if v == both) == ["bridge-llama3-70b-64gpu-b200-bf16",
                                                                "bridge-llama3-8b-8gpu-b200-bf16"]
    assert [k for k, v in confs.items() if not v] == ["bridge-llama3-70b-64gpu-gb200-bf16"]
    assert sum(v == "expandable_segments:True" for v in confs.values()) == 24
    r = next(r for r in RECIPES if r["id"] == "bridge-llama3-8b-8gpu-h100-bf16")
    cfg = with_gpu_arch(recipe_config(r), get_gpu(r["gpu"]))
    peaks = {}
    for conf in ("expandable_segments:True", ""):
        for model in ("fraction", "replay"):
            tr = {**cfg["training"], "pytorch_cuda_alloc_conf": conf, "reserved_memory_model": model}
            c = {**cfg, "training": tr}
            peaks[conf, model] = estimate(c).peak
    assert peaks["", "fraction"].reserved_bytes == peaks["expandable_segments:True", "fraction"].reserved_bytes
    assert peaks["", "replay"].allocated_bytes == peaks["expandable_segments:True", "replay"].allocated_bytes
    assert peaks["expandable_segments:True", "replay"].reserved_bytes < peaks["", "replay"].reserved_bytes


def test_a_recipes_model_settings_lay_over_its_preset():
    """DeepSeek-V3's recipe sets the dispatcher and the router dtype its model bridge sets (models/deepseek/
    deepseek_v3_bridge.py: moe_router_dtype fp32); the rest of the model is the preset's (61 layers, as
    DeepSeek-V3's config.json says)."""
    r = next(r for r in RECIPES if r["id"] == "bridge-deepseek-v3-1024gpu-h100-bf16")
    model = recipe_config(r)["model"]
    assert (model["moe_router_dtype"], model["moe_token_dispatcher_type"], model["num_layers"]) == ("fp32", "flex", 61)


def test_nemotronh_recipe_takes_the_null_tokenizers_vocabulary():
    """NemotronH 56B's canonical recipe (NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/recipes/
    nemotronh/h100/nemotronh.py nemotronh_56b_pretrain_8gpu_h100_bf16_config) builds its HybridModelProvider
    without a vocab_size and a NullTokenizer of DEFAULT_NULL_TOKENIZER_VOCAB_SIZE = 32,000
    (recipes/utils/tokenizer_utils.py), so training/setup.py _validate_and_set_vocab_size gives the model the
    tokenizer's 32,000, padded to a multiple of 128 x TP 8 = 1,024: 32,768 rows, not the published checkpoint's
    131,072; the layers stay the preset's (118)."""
    r = next(r for r in RECIPES if r["id"] == "bridge-nemotronh-56b-64gpu-h100-fp8cs")
    cfg = load_config(recipe_config(r))
    assert (cfg.model.vocab_size, cfg.model.num_layers) == (32000, 118)
    assert resolve(cfg).Vp == 32768


def test_llama_recipes_keep_the_vocabulary_unpadded():
    """The Llama benchmarks set the tokenizer's vocab_size to the model's 128,256 (perf_recipes/llama/*/llama31.py),
    so training/setup.py _validate_and_set_vocab_size returns should_pad_vocab False and the model keeps 128,256
    rows; the 405B GB200 recipe says so with make_vocab_size_divisible_by 1 (128,256 = 4 x 32,064, so TP 4 adds
    none), where Megatron's default 128 x 4 = 512 would pad to 128,512."""
    r = next(r for r in RECIPES if r["id"] == "bridge-llama31-405b-256gpu-gb200-fp8cs")
    assert resolve(load_config(recipe_config(r))).Vp == 128256


_MOE_KEYS = ("moe_permute_fusion", "moe_router_fusion", "moe_grouped_gemm", "moe_token_dispatcher_type",
             "moe_flex_dispatcher_backend", "moe_router_dtype", "moe_router_pre_softmax",
             "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_router_enable_expert_bias")


@pytest.mark.parametrize("rid, want", [
    ("bridge-qwen3-30b-a3b-16gpu-h100-bf16", (True, True, True, "flex", "hybridep", None, False, "aux_loss", 1e-3,
                                              False)),
    ("bridge-qwen3-235b-a22b-256gpu-h100-bf16", (True, True, True, "alltoall", None, None, False, "aux_loss", 1e-3,
                                                 False)),
    ("bridge-deepseek-v3-1024gpu-h100-bf16", (True, True, True, "flex", "hybridep", "fp32", True, "seq_aux_loss",
                                              1e-4, True)),
    ("bridge-deepseek-v3-256gpu-b200-bf16", (True, True, True, "flex", "hybridep", "fp32", True, "seq_aux_loss",
                                             1e-4, True)),
    ("bridge-deepseek-v3-256gpu-gb200-bf16", (True, True, True, "flex", "hybridep", "fp32", True, "seq_aux_loss",
                                              1e-4, True)),
    ("bridge-qwen3-30b-a3b-8gpu-b200-bf16", (True, True, True, "flex", "hybridep", None, False, "aux_loss", 1e-3,
                                             False)),
    ("bridge-qwen3-235b-a22b-64gpu-gb200-bf16", (True, True, True, "flex", "hybridep", None, False, "aux_loss", 1e-3,
                                                 False)),
    ("bridge-gpt-oss-120b-64gpu-h100-bf16", (True, True, True, "alltoall", None, None, False, "none", 0.9, False)),
    ("bridge-gpt-oss-120b-64gpu-gb200-bf16", (True, True, True, "alltoall", None, None, False, "none", 0.9, False)),
    ("bridge-kimi-k2-1024gpu-h100-bf16", (True, True, True, "alltoall", None, "fp32", True, "seq_aux_loss", 1e-3,
                                          True)),
    ("bridge-nemotron-3-nano-16gpu-h100-bf16", (True, False, True, "flex", "hybridep", "fp32", False, "seq_aux_loss",
                                                1e-4, True)),
])
def test_moe_recipes_run_their_moe_kernels(rid, want):
    """The MoE settings each benchmark really runs, read by hand from NVIDIA-NeMo/Megatron-Bridge @ 067f987d
    (src/megatron/bridge/...): permute fusion and grouped GEMM from the canonical recipes' kernel selections
    (recipes/qwen/h100/qwen3_moe.py, recipes/deepseek/h100/deepseek_v3.py, recipes/gpt_oss/h100/gpt_oss.py,
    recipes/kimi/h100/kimi_k2.py, recipes/nemotronh/h100/nemotron_3_nano.py) and the model bridges
    (models/qwen/qwen3_moe_bridge.py: aux_loss 1e-3, no router dtype, pre-softmax off as norm_topk_prob is true;
    models/deepseek/deepseek_v3_bridge.py: fp32 router, pre-softmax, seq_aux_loss 1e-4, expert bias;
    models/gpt_oss/gpt_oss_bridge.py: no load-balancing loss, pre-softmax off, the config.json's
    router_aux_loss_coef 0.9 kept as the unused coefficient; models/kimi/kimi_bridge.py: fp32 router,
    pre-softmax, seq_aux_loss 1e-3, expert bias; nemotron_3_nano.py's HybridModelProvider: fp32 sigmoid router
    with expert bias, seq_aux_loss 1e-4, no router fusion); router fusion from
    recipes/qwen/h100/qwen3_moe.py qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config, the perf_recipes/qwen
    benchmark functions, perf_recipes/deepseek/common.py _deepseek_v3_common and the GPT-OSS and Kimi K2
    benchmark functions; the dispatcher as the benchmark sets it (DeepSeek-V3's through the canonical recipe's
    apply_flex_dispatcher_backend 'hybridep', which the B200 and GB200 benchmarks keep)."""
    r = next(r for r in RECIPES if r["id"] == rid)
    cfg = load_config(recipe_config(r))
    got = tuple(getattr(cfg.model, k) for k in _MOE_KEYS)
    flex = cfg.model.moe_token_dispatcher_type == "flex"
    assert got[:4] + (got[4] if flex else None,) + got[5:] == want


def test_recipes_divide_their_gpus_and_batches():
    """Each recipe can start: its GPUs split into whole tensor x pipeline x context-parallel groups (and, for MoE,
    expert-tensor x expert x pipeline-parallel groups), and its global batch into whole micro-batches per
    data-parallel rank (Megatron-Core's parallel_state and the micro-batch calculator assert both). Checked on the
    data file's own numbers, not through the estimator, so that a recipe the estimator does not load (one with
    an unmodelled setting) is checked too. (NemotronH 56B's 256-GPU B200 BF16 recipe, global batch 192 over 128
    data-parallel ranks, would fail here; it is not transcribed.)"""
    for r in RECIPES:
        cfg = recipe_config(r)
        par, tr = cfg.get("parallelism", {}), cfg["training"]
        t, p = par.get("tensor_model_parallel_size", 1), par.get("pipeline_model_parallel_size", 1)
        cp, ws = par.get("context_parallel_size", 1), tr["world_size"]
        assert ws % (t * p * cp) == 0, r["id"]
        dp = ws // (t * p * cp)
        assert tr["global_batch_size"] % (tr.get("micro_batch_size", 1) * dp) == 0, r["id"]
        if cfg["model"].get("num_experts"):
            ep, etp = par.get("expert_model_parallel_size", 1), par.get("expert_tensor_parallel_size") or t
            assert ws % (etp * ep * p) == 0, r["id"]


def test_recipes_cover_the_families_and_gpus_transcribed():
    """27 recipes, counted from the data file's ids by hand: Llama 3 8B (5: 8 and 64 H100 in BF16 and FP8, 8 B200),
    Llama 3 70B (5: 64 H100 BF16 and FP8, 64 B200 BF16 and MXFP8, 64 GB200), Llama 3.1 405B (3: 1024 and 512 H100,
    256 GB200 FP8), Qwen3-30B-A3B (2: 16 H100, 8 B200), Qwen3-235B-A22B (2: 256 H100, 64 GB200), DeepSeek-V3
    (3: 1024 H100, 256 B200, 256 GB200), GPT-OSS 120B (3: 64 H100, B200, GB200), Kimi K2 (1: 1024 H100),
    Nemotron 3 Nano (2: 16 H100, 8 B200), NemotronH 56B (1: 64 H100); by GPU 15 H100, 7 B200, 5 GB200. Each id is
    written once."""
    ids = [r["id"] for r in RECIPES]
    assert len(ids) == len(set(ids)) == 27
    by_preset, by_gpu = {}, {}
    for r in RECIPES:
        by_preset[r["preset"]] = by_preset.get(r["preset"], 0) + 1
        by_gpu[r["gpu"]] = by_gpu.get(r["gpu"], 0) + 1
    assert by_preset == {"llama-3-8b": 5, "llama-3-70b": 5, "llama-3.1-405b": 3, "qwen3-30b-a3b": 2,
                         "qwen3-235b-a22b": 2, "deepseek-v3": 3, "gpt-oss-120b": 3, "kimi-k2": 1,
                         "nemotron-3-nano-30b-a3b": 2, "nemotron-h-56b": 1}
    assert by_gpu == {"H100-80GB": 15, "B200-180GB": 7, "GB200": 5}


@pytest.mark.parametrize("rid, domain", [("bridge-qwen3-30b-a3b-16gpu-h100-bf16", 8),
                                         ("bridge-deepseek-v3-1024gpu-h100-bf16", 8),
                                         ("bridge-deepseek-v3-256gpu-gb200-bf16", 64)])
def test_hybridep_recipes_state_their_topology(rid, domain):
    """The HybridEP recipes whose expert group is not one 8-GPU node run with 32 SMs and the NVLink domain their
    environment names, read by hand from NVIDIA-NeMo/Megatron-Bridge @ 067f987d: perf_recipes/_common.py
    _benchmark_common (moe_hybridep_num_sms 32, which Megatron-Core's TransformerConfig routes to
    moe_flex_dispatcher_num_sms) and the recipes' env_vars (perf_recipes/qwen/h100/qwen3_moe.py,
    perf_recipes/deepseek/h100/deepseek_v3.py: NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN 8, USE_MNNVL 0, so 16 and
    64 ranks make 2 and 8 domains; perf_recipes/deepseek/gb200/deepseek_v3.py: 64, USE_MNNVL 1, one domain of a
    GB200 NVL72 rack). All are estimated with HybridEP's buffers for that topology, no longer as lower bounds."""
    r = next(r for r in RECIPES if r["id"] == rid)
    m = load_config(recipe_config(r)).model
    assert (m.moe_flex_dispatcher_num_sms, m.moe_hybridep_ranks_per_nvlink_domain) == (32, domain)
    case = next(c for c in RECIPE_CASES if c.id == rid)
    assert case.status == "estimated" and not case.lower_bound


def test_data_files_are_read_by_our_yaml_reader():
    for name in ("megatron_ci.yaml", "megatron_ci_notes.yaml", "known_to_run.yaml"):
        assert yamlio.load((ROOT / "validation" / name).read_text(encoding="utf-8"))


def test_medians_are_medians():
    rows = [c.comparison for c in CASES if c.in_target]
    assert stats(rows).median_error_pct == statistics.median(r.error_pct for r in rows)


# ------------------------------------------------------------------ the CI goldens on their GPU, in their environment

def _case(case_id: str) -> dict:
    return next(c for c in DATA["cases"] if c["id"] == case_id)


def test_each_golden_is_estimated_for_its_platforms_gpu():
    """A GB200 golden is estimated as Blackwell (sm_100), an H100 one as Hopper (sm_90), as --gpu would set them."""
    for c in CASES:
        if c.status == "compared":
            want = {"dgx_gb200": "sm_100", "dgx_h100": "sm_90"}[c.platform]
            assert c.comparison.config["training"]["gpu_arch"] == want, c.id


def test_env_vars_reach_the_estimate_as_the_launch_lines_environment():
    """ENV_VARS go in front of the flags as NAME=value words, so the importer reads CUBLAS_WORKSPACE_CONFIG (and
    PYTORCH_CUDA_ALLOC_CONF) the way it would from a user's launch line."""
    for c in CASES:
        if c.status != "compared":
            continue
        case = _case(c.id)
        env = {**(case.get("env") or {}), **(case.get("supplied_env") or {})}
        training = c.comparison.config["training"]
        assert training.get("cublas_workspace_config", "") == env.get("CUBLAS_WORKSPACE_CONFIG", ""), c.id
        assert training.get("pytorch_cuda_alloc_conf", "") == env.get("PYTORCH_CUDA_ALLOC_CONF", ""), c.id


def test_older_pytorchs_blackwell_default_is_supplied_by_the_recording_container():
    """A GB200 golden without CUBLAS_WORKSPACE_CONFIG recorded under NGC PyTorch 26.02 or older ran before
    pytorch/pytorch PR #175344, with the :4096:2:16:8 default; one recorded under 26.04 or later with 32 MiB. Every
    such golden says which (its `recorded` container), and exactly the older ones carry the supplied default."""
    tool = _tool()
    for case in DATA["cases"]:
        env, rec = case.get("env") or {}, case.get("recorded") or {}
        assert rec.get("commit") and rec.get("date"), case["id"]
        older = (case["platform"] == "dgx_gb200" and "CUBLAS_WORKSPACE_CONFIG" not in env
                 and not tool.BLACKWELL_32MIB_CUBLAS[rec["container"]])
        assert (case.get("supplied_env") or {}) == ({"CUBLAS_WORKSPACE_CONFIG": ":4096:2:16:8"} if older else {}), \
            case["id"]
        assert bool(case.get("supplied_env_reason")) == older, case["id"]


def test_twin_goldens_differ_by_the_workspaces_the_older_pytorch_left_out():
    """gpt3_mcore_te_tp2_pp2_cp2_etp4_nondeterministic_dp_last runs the same flags and ENV_VARS (no
    CUBLAS_WORKSPACE_CONFIG) on H100 and on GB200. Its GB200 golden, recorded under NGC PyTorch 26.02, peaks at
    885,707,776 B, the H100 one at 935,777,792 B: 50,070,016 B apart. By hand, two cuBLAS handles of 32 MiB on Hopper
    against 8 MiB + 128 KiB on that PyTorch's Blackwell: 2 x (33,554,432 - 8,519,680) = 50,069,504 B, 512 B (one
    allocator block unit) from the measured step. The estimates (sm_90, and sm_100 with :4096:2:16:8 supplied) differ
    by exactly that; nothing else in this bf16 model depends on the GPU."""
    name = "mlm-gpt-gpt3_mcore_te_tp2_pp2_cp2_etp4_nondeterministic_dp_last"
    h100, gb200 = _case(name + "-h100"), _case(name + "-gb200")
    assert h100["megatron_args"] == gb200["megatron_args"] and h100["env"] == gb200["env"]
    assert "CUBLAS_WORKSPACE_CONFIG" not in gb200["env"]
    assert gb200["recorded"]["container"] == "nvcr.io/nvidia/pytorch:26.02-py3"
    measured = h100["measured"]["peak_allocated_bytes"] - gb200["measured"]["peak_allocated_bytes"]
    assert measured == 50_070_016
    by_hand = 2 * (33_554_432 - 8_519_680)
    assert by_hand == 50_069_504 and abs(measured - by_hand) <= 512
    gib = 2 ** 30
    est = (BY_ID[name + "-h100"].comparison.estimated_gib - BY_ID[name + "-gb200"].comparison.estimated_gib) * gib
    assert round(est) == by_hand


def test_fine_grained_offloading_goldens():
    """Issue 28: the three Megatron-LM CI goldens with fine-grained activation offloading
    (gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_fine_grained_offloading on GB200 and H100, 8,285,769,216 B and
    8,320,577,024 B peak allocated on the last rank; ..._no_mtp_no_a2a_ovlp_fine_grained_offloading on H100,
    7,156,871,168 B) are estimated from Megatron-Core's policy (estimator/memory/features/offload.py) and compared
    here. The policy read from the source brackets the two MTP goldens from above (0 to +6 %) but misses the case
    without MTP by 13 to 14.5 % low, the lagging device-to-host copies; a gap note keeps all three out of the
    accuracy target, and the error-band class of the feature takes them (tests/validation/test_error_bands.py)."""
    base = "mlm-moe-gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_"
    mtp = [BY_ID[base + "fine_grained_offloading-gb200"], BY_ID[base + "fine_grained_offloading-h100"]]
    no_mtp = BY_ID[base + "no_mtp_no_a2a_ovlp_fine_grained_offloading-h100"]
    for c in (*mtp, no_mtp):
        assert c.status == "compared" and c.note_kind == "gap" and "record_stream" in c.reason, c.id
    assert [c.comparison.measured_gib * 2**30 for c in (*mtp, no_mtp)] == [8_285_769_216, 8_320_577_024,
                                                                            7_156_871_168]
    assert all(0.0 < c.comparison.error_pct < 6.0 for c in mtp)
    assert -14.5 < no_mtp.comparison.error_pct < -13.0
