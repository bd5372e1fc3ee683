"""Megatron-LM pretrain_gpt.py arguments: parsing with Megatron's own defaults, and writing them back.

The independent reference is validation/measured.yaml: its config blocks were written by hand from the
SimuMax launch scripts, whose flags its comments list; parsing those flags must describe the same run.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, UnsupportedError, estimate, load_config
from estimator.megatron_args import parse_megatron_args, pattern_expression, to_megatron_args
from estimator.presets import list_presets, load_preset
from estimator.validation import case_config, load_cases

MODEL = "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 " \
        "--vocab-size 1000 --micro-batch-size 1"


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_round_trips(name):
    cfg = load_preset(name)
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
    for flag in ("--use-torch-fsdp2", "--cpu-offloading"):
        with pytest.raises(UnsupportedError, match=flag):
            parse_megatron_args(f"{MODEL} {flag}")
    with pytest.raises(UnsupportedError, match="Adam"):
        parse_megatron_args(f"{MODEL} --optimizer sgd")


def test_bad_values_name_the_flag():
    with pytest.raises(ConfigError, match="--hidden-size"):
        parse_megatron_args(MODEL.replace("512", "big"))
    with pytest.raises(ConfigError, match="shell variable"):
        parse_megatron_args(MODEL + " --tensor-model-parallel-size $TP")
    with pytest.raises(ConfigError, match="--vocab-size"):
        parse_megatron_args(MODEL.replace("--vocab-size 1000", ""))


def test_simumax_launch_flags_describe_the_measured_config():
    """The SimuMax B200 Llama-3-70B (12 layers, TP 1, PP 2) launch: the common launcher flags listed in
    measured.yaml plus the model flags of that case. NullTokenizer adds one EOD token (128256 + 1)."""
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
    assert parsed["model"]["vocab_size"] == expected["model"]["vocab_size"] == 128257
    ours, theirs = estimate(parsed, num_microbatches=m), estimate(expected, num_microbatches=m)
    assert [s.allocated_bytes for s in ours.stages] == [s.allocated_bytes for s in theirs.stages]
    assert "--use-mcore-models" in ignored and "--mock-data" in ignored
