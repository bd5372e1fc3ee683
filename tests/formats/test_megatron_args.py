"""Megatron-LM pretrain_gpt.py arguments: parsing with Megatron's own defaults, and writing them back.

The independent reference is validation/measured.yaml: its config blocks were written by hand from the
SimuMax launch scripts, whose flags its comments list; parsing those flags must describe the same run.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate, load_config
from estimator.formats.megatron_args import parse_megatron_args, pattern_expression, to_megatron_args
from estimator.formats.presets import list_presets, load_preset
from estimator.validation.calibration import case_config, load_cases

MODEL = "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 " \
        "--vocab-size 1000 --micro-batch-size 1"


#: Presets built with Megatron-Bridge layer specs that Megatron-LM has no flags for (Gemma's post-norms, GeGLU; a
#: vision tower).
NO_MEGATRON_LM_FLAGS = {"gemma-3-1b": "geglu", "qwen3-vl-30b-a3b": "model.vision_num_layers",
                        # DeepSeek-V4's fields are Megatron-Core dev-branch ones, without flags at the pinned revision
                        "deepseek-v4-flash": "DeepSeek-V4",
                        # Megatron-Bridge layer specs and towers (the Bridge recipes of issue 27)
                        "gemma-3-4b-it": "model.vision_num_layers", "olmoe-1b-7b": "qk_layernorm_full_dim",
                        # Megatron-Bridge's Wan diffusion transformer (issues 27 / 28)
                        "wan-1.3b": "model_kind = wan", "wan-14b": "model_kind = wan"}


@pytest.mark.parametrize("name", [n for n in list_presets() if load_preset(n).training.peft is None])
def test_every_preset_round_trips(name):
    """Every preset with Megatron-LM flags (PEFT is a Megatron-Bridge setting: tests/formats/test_recipe_presets.py)."""
    cfg = load_preset(name)
    if name in NO_MEGATRON_LM_FLAGS:
        with pytest.raises(UnsupportedError, match=NO_MEGATRON_LM_FLAGS[name]):
            to_megatron_args(cfg)
        return
    parsed, ignored = parse_megatron_args(to_megatron_args(cfg), world_size=cfg.training.world_size)
    assert ignored == []
    assert estimate(parsed).to_dict()["stages"] == estimate(cfg).to_dict()["stages"]


def test_megatron_defaults_apply_where_no_flag_is_given():
    """Megatron-LM, unlike this schema: GeLU without gating, biases, learned absolute positions, LayerNorm,
    dropout 0.1, fp32 weights, no distributed optimizer."""
    cfg, ignored = parse_megatron_args(MODEL, world_size=1)
    m = cfg["model"]
    assert (m["activation_func"], m["gated_linear_unit"], m["add_bias_linear"]) == ("gelu", False, True)
    assert (m["position_embedding_type"], m["normalization"]) == ("learned_absolute", "LayerNorm")
    assert (m["hidden_dropout"], m["attention_dropout"]) == (0.1, 0.1)
    assert cfg["precision"]["params_dtype"] == "fp32"
    assert cfg["training"]["use_distributed_optimizer"] is False
    assert "num_query_groups" not in m and ignored == []
    load_config(cfg)


def test_swiglu_derives_megatrons_ffn_size():
    """arguments.py: ffn_hidden_size = int(4 * h * 2 / 3 / 64) * 64 with --swiglu: h 512 -> 1365.3 / 64 = 21.3
    -> 21 * 64 = 1344."""
    cfg, _ = parse_megatron_args(MODEL + " --swiglu --disable-bias-linear --bf16", world_size=1)
    assert (cfg["model"]["ffn_hidden_size"], cfg["model"]["activation_func"]) == (1344, "swiglu")
    assert cfg["model"]["add_bias_linear"] is False and cfg["precision"]["params_dtype"] == "bf16"


def test_moe_layer_freq_expressions():
    def freq(text):
        return parse_megatron_args(f"{MODEL} --num-experts 4 --moe-layer-freq {text}")[0]["model"]["moe_layer_freq"]
    assert freq("'([0]*3+[1]*58)'") == [0] * 3 + [1] * 58
    assert freq("'[1,0,1,0]'") == [1, 0, 1, 0]
    assert freq("'([1]*3+[0]*2)*2'") == [1, 1, 1, 0, 0] * 2
    assert freq("2") == 2
    for bad in ("'__import__(\"os\").getcwd()'", "'[2]*4'", "'[0]*10**9'"):
        with pytest.raises(ConfigError, match="moe-layer-freq"):
            freq(bad)
    assert pattern_expression([0, 0, 0, 1, 1, 0]) == "([0]*3+[1]*2+[0])"


def test_group_query_attention_and_virtual_stages():
    """--num-query-groups counts only with --group-query-attention; 32 layers / PP 4 = 8 per stage, 2 per
    virtual stage -> 4 virtual stages."""
    base = MODEL.replace("--num-layers 4", "--num-layers 32")
    cfg, ignored = parse_megatron_args(base + " --num-query-groups 2")
    assert "num_query_groups" not in cfg["model"] and ignored[0].startswith("--num-query-groups")
    cfg, _ = parse_megatron_args(base + " --group-query-attention --num-query-groups 2 "
                                 "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2")
    assert cfg["model"]["num_query_groups"] == 2
    assert cfg["parallelism"]["virtual_pipeline_model_parallel_size"] == 4


def test_launch_script_text():
    """Launcher and script are skipped, backslash line breaks and comments understood, unknown flags listed."""
    text = ("CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node 8 pretrain_gpt.py \\\n"
            f"    {MODEL} \\\n    --lr 3e-4 --data-path 1.0 /data/a 1.0 /data/b \\\n"
            "    --sequence-parallel  # tensor parallel size 1: Megatron drops it\n")
    cfg, ignored = parse_megatron_args(text, world_size=8)
    assert cfg["training"]["world_size"] == 8 and "sequence_parallel" not in cfg["training"]
    assert ignored[:2] == ["--lr 3e-4", "--data-path 1.0 /data/a 1.0 /data/b"]
    assert ignored[2].startswith("--sequence-parallel")


def test_unmodelled_memory_flags_are_errors():
    for flag in ("--enable-cuda-graph", "--moe-use-upcycling"):
        with pytest.raises(UnsupportedError, match=flag):
            parse_megatron_args(f"{MODEL} {flag}")
    # Modelled since issue 28 (dynamic context parallelism), with the per-rank length it needs.
    with pytest.raises(ConfigError, match="max_seqlen_per_dp_cp_rank"):
        load_config(parse_megatron_args(f"{MODEL} --hybrid-context-parallel", world_size=8)[0])
    # Modelled now, but only as Megatron-Core allows it: the paged stash needs the per-rank budget.
    with pytest.raises(ConfigError, match="moe_paged_stash"):
        load_config(parse_megatron_args(f"{MODEL} --moe-paged-stash", world_size=1)[0])
    with pytest.raises(ConfigError, match="ep_overlap_early_attn_memory_release"):
        load_config(parse_megatron_args(f"{MODEL} --ep-overlap-early-attn-memory-release", world_size=1)[0])
    with pytest.raises(UnsupportedError, match="Lion"):
        parse_megatron_args(f"{MODEL} --optimizer lion")


def test_bad_values_name_the_flag():
    with pytest.raises(ConfigError, match="--hidden-size"):
        parse_megatron_args(MODEL.replace("512", "big"))
    with pytest.raises(ConfigError, match="shell variable"):
        parse_megatron_args(MODEL + " --tensor-model-parallel-size $TP")
    with pytest.raises(ConfigError, match="--vocab-size"):
        parse_megatron_args(MODEL.replace("--vocab-size 1000", ""))


def test_simumax_launch_flags_describe_the_measured_config():
    """The SimuMax B200 Llama-3-70B (12 layers, TP 1, PP 2) launch: the common launcher flags listed in
    measured.yaml plus the model flags of that case.

    SimuMax ran Megatron-LM 23e00ed0 (2025-10), whose NullTokenizer appended one end-of-document token, so
    the measured configuration has vocab_size 128256 + 1 = 128257. The importer follows the pinned revision
    (d98e8a64), where the NullTokenizer keeps --vocab-size as given (128256); with that one difference
    the imported configuration estimates what the measured one does."""
    case = next(c for c in load_cases() if c["id"] == "smx-b200-llama3-70b-l12-tp1-pp2-dp4")
    text = ("--bf16 --transformer-impl transformer_engine --use-mcore-models --use-distributed-optimizer "
            "--use-flash-attn --sequence-parallel --recompute-granularity full --recompute-method block "
            "--recompute-num-layers 0 --attention-softmax-in-fp32 --no-masked-softmax-fusion "
            "--accumulate-allreduce-grads-in-fp32 --no-bias-dropout-fusion --attention-dropout 0 --hidden-dropout 0 "
            "--disable-bias-linear --position-embedding-type rope --no-position-embedding --swiglu "
            "--normalization RMSNorm --untie-embeddings-and-output-weights --tokenizer-type NullTokenizer "
            "--mock-data --cross-entropy-loss-fusion --cross-entropy-fusion-impl te "
            "--num-layers 12 --hidden-size 8192 --num-attention-heads 64 --group-query-attention "
            "--num-query-groups 8 --ffn-hidden-size 28672 --vocab-size 128256 --seq-length 4096 "
            "--max-position-embeddings 4096 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 "
            "--micro-batch-size 1 --global-batch-size 16")
    parsed, ignored = parse_megatron_args(text, world_size=8)
    expected, m = case_config(case)
    assert parsed["model"]["vocab_size"] == 128256 and expected["model"]["vocab_size"] == 128257
    parsed["model"]["vocab_size"] = 128257
    ours, theirs = estimate(parsed, num_microbatches=m), estimate(expected, num_microbatches=m)
    assert [s.allocated_bytes for s in ours.stages] == [s.allocated_bytes for s in theirs.stages]
    assert "--use-mcore-models" in ignored and "--mock-data" in ignored


def test_quick_geglu_keeps_three_projections():
    """GPT-OSS's --quick-geglu: Megatron-LM's argument_utils.py sets gated_linear_unit with quick_gelu, so fc1 is
    h x 2f. ffn_hidden_size defaults to 4h (the 8h/3 rule is --swiglu's only): h 512 -> f 2048. Biases are on
    (Megatron's default): per layer MLP = h*2f + 2f + f*h + h = 3*512*2048 + 2*2048 + 512 = 3,150,336."""
    cfg, _ = parse_megatron_args(MODEL + " --quick-geglu", world_size=1)
    m = cfg["model"]
    assert (m["activation_func"], m["gated_linear_unit"]) == ("quick_gelu", True)
    assert estimate(cfg).parameters.mlp == 4 * 3_150_336
    back, _ = parse_megatron_args(to_megatron_args(cfg), world_size=1)
    assert back["model"]["activation_func"] == "quick_gelu"


def test_cp_comm_type_all_gather_is_transformer_engines_spelling():
    """Transformer Engine spells it all_gather (context_parallel.py); Megatron's help text says allgather."""
    base = MODEL + " --bf16 --context-parallel-size 2"
    cfg, _ = parse_megatron_args(base + " --cp-comm-type all_gather", world_size=2)
    assert cfg["parallelism"]["cp_comm_type"] == "allgather"
    assert "all_gather" in to_megatron_args(cfg)
    assert parse_megatron_args(base + " --cp-comm-type allgather", world_size=2)[0] == cfg


def test_moe_layer_recompute_is_selective_recompute_of_moe():
    """TransformerConfig.__post_init__: recompute_modules defaults to [core_attn], then 'moe' is appended and the
    granularity becomes selective; with full granularity it is an error."""
    cfg, _ = parse_megatron_args(MODEL + " --num-experts 4 --moe-layer-recompute")
    assert cfg["training"]["recompute_granularity"] == "selective"
    assert cfg["training"]["recompute_modules"] == ["core_attn", "moe"]
    with pytest.raises(ConfigError, match="moe-layer-recompute"):
        parse_megatron_args(MODEL + " --num-experts 4 --moe-layer-recompute --recompute-granularity full")


def test_group_query_attention_alone_is_multi_query():
    """Megatron-LM's --num-query-groups defaults to 1: --group-query-attention alone means one KV head."""
    cfg, _ = parse_megatron_args(MODEL + " --group-query-attention")
    assert cfg["model"]["num_query_groups"] == 1


@pytest.mark.parametrize("extra, flag", [
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 0",
     "--num-layers-per-virtual-pipeline-stage"),
    ("--pipeline-model-parallel-size 0 --num-layers-per-virtual-pipeline-stage 1",
     "--num-layers-per-virtual-pipeline-stage"),
    ("--group-query-attention --num-query-groups eight", "--num-query-groups"),
    ("--num-layers-per-virtual-pipeline-stage two", "--num-layers-per-virtual-pipeline-stage"),
    ("--padded-vocab-size big", "--padded-vocab-size"),
    ("--lr", "--lr"),
    ("--bf16 yes", "--bf16"),
    ("--use-distributed-optimizer stray", "--use-distributed-optimizer"),
])
def test_bad_launch_arguments_are_errors_naming_the_flag(extra, flag):
    """Regression (issues 9 and 15): these raised ZeroDivisionError or a bare 'invalid literal for int()'."""
    with pytest.raises(ConfigError) as exc:
        parse_megatron_args(f"{MODEL} {extra}")
    assert flag in str(exc.value)


def test_a_leading_stray_word_is_an_error():
    with pytest.raises(ConfigError, match="'stray' is not a flag"):
        parse_megatron_args("stray " + MODEL)


def test_bf16_grad_reduce_and_main_grads_dtype_follow_megatron_lm():
    """arguments.py: --grad-reduce-in-bf16 turns accumulate_allreduce_grads_in_fp32 off; --main-grads-dtype bf16
    leaves it off (our derived default does the same); --accumulate-allreduce-grads-in-fp32 with
    --main-grads-dtype bf16 is refused by Megatron-LM."""
    cfg, _ = parse_megatron_args(MODEL + " --bf16 --grad-reduce-in-bf16")
    assert cfg["precision"]["accumulate_allreduce_grads_in_fp32"] is False
    assert "--grad-reduce-in-bf16" in to_megatron_args({**cfg, "training": {**cfg["training"], "world_size": 1}})
    with pytest.raises(ConfigError, match="main-grads-dtype"):
        parse_megatron_args(MODEL + " --bf16 --use-distributed-optimizer --use-precision-aware-optimizer "
                            "--accumulate-allreduce-grads-in-fp32 --main-grads-dtype bf16")


def test_recompute_details_without_a_granularity_are_ignored_as_megatron_does():
    """TransformerConfig.__post_init__ validates recompute_num_layers / recompute_method only when
    recompute_granularity is set; without it they change nothing (Megatron-LM's reruns functional test)."""
    cfg, ignored = parse_megatron_args(MODEL + " --recompute-num-layers 1")
    assert "recompute_num_layers" not in cfg["training"]
    assert ignored == ["--recompute-num-layers: Megatron-Core ignores it without --recompute-granularity"]


def test_recipe_feature_flags_translate_as_megatron_lm_does():
    """dist_muon is Muon with the layer-wise distributed optimizer; --use-megatron-fsdp turns the distributed
    optimizer on and, with --use-nccl-ub, double buffering; --moe-enable-deepep is the flex dispatcher with DeepEP;
    the deprecated --cuda-graph-scope full means the whole layer and full_iteration the full-iteration graph."""
    cfg = parse_megatron_args(f"{MODEL} --optimizer dist_muon")[0]
    assert cfg["training"]["optimizer"] == "muon" and cfg["training"]["use_distributed_optimizer"] is True
    cfg = parse_megatron_args(f"{MODEL} --use-megatron-fsdp --use-nccl-ub")[0]
    assert cfg["training"]["use_distributed_optimizer"] and cfg["parallelism"]["fsdp_double_buffer"]
    moe = f"{MODEL} --num-experts 8 --expert-model-parallel-size 8"
    cfg = parse_megatron_args(f"{moe} --moe-enable-deepep --moe-deepep-num-sms 24")[0]
    assert (cfg["model"]["moe_token_dispatcher_type"], cfg["model"]["moe_flex_dispatcher_backend"],
            cfg["model"]["moe_flex_dispatcher_num_sms"]) == ("flex", "deepep", 24)
    cfg, notes = parse_megatron_args(f"{MODEL} --cuda-graph-impl transformer_engine --cuda-graph-scope full")
    assert cfg["training"]["cuda_graph_impl"] == "transformer_engine" and "cuda_graph_modules" not in cfg["training"]
    with pytest.raises(UnsupportedError, match="local CUDA graphs"):
        parse_megatron_args(f"{MODEL} --cuda-graph-impl local --cuda-graph-scope attn")
    with pytest.raises(UnsupportedError, match="--enable-cuda-graph"):
        parse_megatron_args(f"{MODEL} --enable-cuda-graph")
    # Megatron-LM @ d98e8a64 arguments.py: --muon-fp32-matmul-prec choices=['low', 'medium', 'high'] (batch 9's run
    # with highest did not start); the schema field also takes highest, which Megatron-Bridge sets in its config.
    with pytest.raises(ConfigError, match="--muon-fp32-matmul-prec must be one of low, medium, high.*'highest'"):
        parse_megatron_args(f"{MODEL} --optimizer muon --muon-fp32-matmul-prec highest")
    assert parse_megatron_args(f"{MODEL} --optimizer muon --muon-fp32-matmul-prec high")[0]["training"][
        "muon_fp32_matmul_prec"] == "high"
    cfg = parse_megatron_args(f"{MODEL} --optimizer muon --use-distributed-optimizer "
                              "--no-use-layer-wise-param-layout")[0]
    assert cfg["training"]["use_layer_wise_param_layout"] is False
    cfg, notes = parse_megatron_args(f"{MODEL} --no-use-layer-wise-param-layout")
    assert "use_layer_wise_param_layout" not in cfg["training"] and any("only with Muon" in n for n in notes)
    cfg = parse_megatron_args(f"{MODEL} --cuda-graph-impl local --cuda-graph-scope full_iteration")[0]
    assert cfg["training"]["cuda_graph_impl"] == "full_iteration"
    cfg = parse_megatron_args(f"{MODEL} --cpu-offloading-num-layers 1")[0]
    assert cfg["training"]["cpu_offloading"] is True
    cfg, notes = parse_megatron_args(f"{MODEL} --first-last-layers-bf16")
    assert "first_last_layers_bf16" not in cfg["precision"] and any("FP8 run" in n for n in notes)


def test_mxfp8_weights_and_tp_overlap_files_round_trip():
    """--reuse-grad-buf-for-mxfp8-param-ag is the precision field, written back beside --fp8-param-gather; Megatron-LM
    turns it off with Megatron-FSDP (arguments.py), a note. A userbuffer configuration has no flag value (Megatron-LM
    reads it from a file): writing it back is refused with the reason."""
    mx = MODEL + " --bf16 --use-distributed-optimizer --fp8-format hybrid --fp8-recipe mxfp8 --fp8-param-gather " \
                 "--reuse-grad-buf-for-mxfp8-param-ag"
    cfg, _ = parse_megatron_args(mx, world_size=2)
    assert cfg["precision"]["reuse_grad_buf_for_mxfp8_param_ag"] is True
    assert "--reuse-grad-buf-for-mxfp8-param-ag" in to_megatron_args(cfg)
    cfg, notes = parse_megatron_args(mx + " --use-megatron-fsdp", world_size=2)
    assert "reuse_grad_buf_for_mxfp8_param_ag" not in cfg["precision"]
    assert any("turns it off with --use-megatron-fsdp" in n for n in notes)
    tp = {"model": load_config(parse_megatron_args(MODEL + " --bf16", world_size=2)[0]).to_dict()["model"],
          "parallelism": {"tensor_model_parallel_size": 2, "tp_comm_overlap": True,
                          "tp_comm_overlap_cfg": "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192"},
          "training": {"world_size": 2, "sequence_parallel": True}}
    with pytest.raises(UnsupportedError, match="--tp-comm-overlap-cfg PATH"):
        to_megatron_args(tp)


def test_kimi_k3_has_no_megatron_lm_flags():
    """Kimi K3's layers are Megatron-Bridge's own spec (models/kimi/kimi_k3_spec.py): pretrain_gpt.py cannot build
    them, and the export says so by name instead of writing a command that builds another model."""
    from tests.conftest import make_config
    from tests.model.layers.test_kimi import TINY
    with pytest.raises(UnsupportedError, match="experimental_attention_variant = kda"):
        to_megatron_args(make_config(TINY, training={"seq_length": 64}))
