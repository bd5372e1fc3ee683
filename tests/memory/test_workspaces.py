"""GEMM workspaces held for the whole run (estimator/memory/workspaces.py)."""

from __future__ import annotations

import pytest

from tests.conftest import make_config

from estimator import estimate
from estimator.config.load import load_config
from estimator.model.resolve import resolve
from estimator.memory.workspaces import workspace_bytes

MIB = 2 ** 20
DENSE = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000}
MOE = {**DENSE, "num_experts": 4, "moe_router_topk": 2, "moe_ffn_hidden_size": 128}


def _r(model, training=None):
    return resolve(load_config(make_config(model, training={"seq_length": 256, **(training or {})})))


def test_dense_transformer_engine_run():
    """Transformer Engine's workspace (32 MiB + 1 KiB) and two PyTorch cuBLAS workspaces (2 x 32 MiB)."""
    assert workspace_bytes(_r(DENSE), False) == 96 * MIB + 1024


def test_local_implementation_has_no_transformer_engine_workspace():
    assert workspace_bytes(_r(DENSE, {"transformer_impl": "local"}), False) == 64 * MIB


def test_grouped_gemm_adds_one_workspace_per_stream():
    """4 compute streams x (32 MiB + 1 KiB), only on a stage that holds MoE layers and with grouped GEMM."""
    r = _r(MOE)
    assert workspace_bytes(r, True) == 96 * MIB + 1024 + 4 * (32 * MIB + 1024)
    assert workspace_bytes(r, False) == 96 * MIB + 1024
    r = _r({**MOE, "moe_grouped_gemm": False})
    assert workspace_bytes(r, True) == 96 * MIB + 1024


def test_matches_the_persistent_memory_of_a_megatron_ci_run():
    """Megatron-LM CI, gpt3_mcore_te_tp1_pp1_resume_torch_dist_dist_optimizer on H100 (validation/megatron_ci.yaml):
    mem-allocated-bytes after every step is 581,489,664 B. By hand, its model states are

        parameters: embedding 50,304 x 512 + positions 1,024 x 512 + 12 layers x 3,152,384 + final norm 1,024
                    = 64,109,568   (layer: QKV 786,432 + 1,536, proj 262,144 + 512, fc1 1,048,576 + 2,048,
                    fc2 1,048,576 + 512, two LayerNorms 2,048)
        bf16 weights + fp32 grads: 6 B x 64,109,568 = 384,657,408
        distributed optimizer over DP 8: 12 B x ceil(64,109,568 / 8) = 96,164,352

    = 480,821,760 B, so the run holds 100,667,904 B (96.003 MiB) besides them: the workspaces, to 4 KiB."""
    measured_rest = 581_489_664 - 480_821_760
    assert abs(workspace_bytes(_r(DENSE), False) - measured_rest) < 4096
    e = estimate(make_config(DENSE, training={"seq_length": 256}))
    assert e.stages[0].transient["workspaces"] == 96 * MIB + 1024


def test_global_buffer_holds_the_largest_of_its_users():
    """Megatron-Core's "mpu" buffer (megatron/core/utils.py GlobalMemoryBuffer), bf16:
    local attention scores b 1 x a 4 x s 256 x s 256 x 2 B = 524,288 B; the output layer's
    sequence-parallel all-gather on the last stage T 256 x h 256 x 2 B = 131,072 B."""
    from estimator.memory.workspaces import global_buffer_bytes
    assert global_buffer_bytes(_r(DENSE), False, True) == 0
    assert global_buffer_bytes(_r(DENSE, {"transformer_impl": "local"}), False, False) == 524_288
    r = resolve(load_config(make_config(DENSE, {"tensor_model_parallel_size": 2},
                                        {"seq_length": 256, "world_size": 2, "sequence_parallel": True})))
    assert global_buffer_bytes(r, False, True) == 131_072
    assert global_buffer_bytes(r, False, False) == 0


def test_allgather_dispatcher_keeps_the_gathered_tokens():
    """MoE all-gather dispatcher over TP x EP = 1 x 4: 256 tokens x 4 ranks x h 256 x 2 B = 524,288 B."""
    from estimator.memory.workspaces import global_buffer_bytes
    r = resolve(load_config(make_config({**MOE, "moe_token_dispatcher_type": "allgather"},
                                        {"expert_model_parallel_size": 4}, {"seq_length": 256, "world_size": 4})))
    assert global_buffer_bytes(r, True, False) == 524_288
    assert global_buffer_bytes(r, False, False) == 0


@pytest.mark.parametrize("arch, te, torch_each", [
    ("sm_90", 32 * MIB + 1024, 32 * MIB),                       # Hopper: both 32 MiB
    ("sm_100", 32 * MIB + 1024, 32 * MIB),                      # Blackwell: 32 MiB too since PyTorch PR #175344
    ("sm_103", 32 * MIB + 1024, 32 * MIB),
    ("sm_120", 32 * MIB + 1024, 32 * MIB),
    ("sm_89", 4 * MIB, 8 * MIB + 128 * 1024),                   # before Hopper: Transformer Engine's 4 MiB,
    ("sm_80", 4 * MIB, 8 * MIB + 128 * 1024),                   # PyTorch's :4096:2:16:8
    ("gfx942", 32 * MIB + 1024, 128 * MIB),                     # ROCm: hipBLAS 128 MiB on gfx94x/gfx95x
])
def test_workspaces_by_gpu_architecture(arch, te, torch_each):
    """Transformer Engine's workspace is 32 MiB + 1 KiB from compute capability 9.0 on, 4 MiB before
    (cpp_extensions/gemm.py get_cublas_workspace_size_bytes); PyTorch's per (handle, stream) with
    CUBLAS_WORKSPACE_CONFIG unset is 4096 KiB x 8 = 32 MiB for compute capability major 9, 10, 11 and 12 (pytorch/pytorch
    PRs #175344 and #189312; sm_90 alone before), 4096 KiB x 2 + 16 KiB x 8 = 8 MiB + 128 KiB on older NVIDIA GPUs,
    128 MiB on gfx94x/gfx95x (CublasHandlePool.cpp parseChosenWorkspaceSize). Two handles: an A100 holds 4 MiB +
    2 x 8.125 MiB = 20.25 MiB against Hopper's 96 MiB + 1 KiB; local layers (no Transformer Engine) 16.25 MiB
    against 64 MiB."""
    assert workspace_bytes(_r(DENSE, {"gpu_arch": arch}), False) == te + 2 * torch_each
    assert workspace_bytes(_r(DENSE, {"gpu_arch": arch, "transformer_impl": "local"}), False) == 2 * torch_each
    r = _r(MOE, {"gpu_arch": arch})
    assert workspace_bytes(r, True) == te + 2 * torch_each + 4 * te


def test_blackwell_on_an_older_pytorch_holds_47_75_mib_less():
    """Before PyTorch PR #175344 a Blackwell GPU had the :4096:2:16:8 default: given as CUBLAS_WORKSPACE_CONFIG, the
    two handles hold 2 x (32 MiB - 8.125 MiB) = 47.75 MiB less than with today's default."""
    today, older = (workspace_bytes(_r(DENSE, {"gpu_arch": "sm_100", **extra}), False)
                    for extra in ({}, {"cublas_workspace_config": ":4096:2:16:8"}))
    assert today - older == 47 * MIB + 768 * 1024


def test_mxfp8_and_nvfp4_without_a_gpu_assume_blackwell():
    """No GPU named: Hopper, but Blackwell for the recipes that run only there (MXFP8, NVFP4); both hold the same
    GEMM workspaces, 96 MiB + 1 KiB."""
    assert workspace_bytes(_r(DENSE), False) == 96 * MIB + 1024
    mx = resolve(load_config(make_config(DENSE, training={"seq_length": 256},
                                         precision={"fp8": True, "fp8_recipe": "mxfp8"})))
    assert workspace_bytes(mx, False) == 96 * MIB + 1024


def test_deterministic_mode_sets_hoppers_workspace_everywhere():
    """Megatron-LM's --deterministic-mode sets CUBLAS_WORKSPACE_CONFIG=:4096:8 (megatron/training/determinism.py),
    8 x 4096 KiB = 32 MiB per cuBLAS handle whatever the GPU: on an A100 2 x 32 MiB + Transformer Engine's 4 MiB."""
    r = _r(DENSE, {"gpu_arch": "sm_80", "deterministic_mode": True})
    assert workspace_bytes(r, False) == 68 * MIB


@pytest.mark.parametrize("arch, value, torch_each", [
    ("sm_90", ":16:8", 128 * 1024),                       # 8 x 16 KiB: the small deterministic setting
    ("sm_80", ":4096:8", 32 * MIB),                       # 8 x 4096 KiB: Hopper's size on an A100
    ("sm_90", ":4096:2:16:8", 8 * MIB + 128 * 1024),      # pairs add up: 2 x 4096 KiB + 8 x 16 KiB
    ("gfx942", ":16:8", 128 * 1024),                      # ROCm reads the same variable first
])
def test_cublas_workspace_config_sets_pytorchs_workspace(arch, value, torch_each):
    """CUBLAS_WORKSPACE_CONFIG (training.cublas_workspace_config) replaces PyTorch's default on every GPU: the sum of
    SIZE KiB x COUNT over its :SIZE:COUNT pairs (CublasHandlePool.cpp parseChosenWorkspaceSize), per handle, two
    handles; Transformer Engine's own workspace does not change (32 MiB + 1 KiB from sm_90 on, 4 MiB on sm_80).
    Hopper with :16:8: 32 MiB + 1 KiB + 2 x 128 KiB = 33,817,600 B."""
    te = 4 * MIB if arch == "sm_80" else 32 * MIB + 1024
    r = _r(DENSE, {"gpu_arch": arch, "cublas_workspace_config": value})
    assert workspace_bytes(r, False) == te + 2 * torch_each
    assert workspace_bytes(_r(DENSE, {"cublas_workspace_config": ":16:8"}), False) == 33_817_600


def test_cublas_workspace_config_wins_over_deterministic_modes_default():
    """--deterministic-mode only fills CUBLAS_WORKSPACE_CONFIG when it is unset (determinism.py setdefault): with
    :16:8 the handles keep 128 KiB each."""
    r = _r(DENSE, {"deterministic_mode": True, "cublas_workspace_config": ":16:8"})
    assert workspace_bytes(r, False) == 32 * MIB + 1024 + 2 * 128 * 1024


@pytest.mark.parametrize("training, words", [
    ({"cublas_workspace_config": "4096:8"}, "no pair"),                   # PyTorch would warn and ignore it
    ({"cublas_workspace_config": ":99999999:99999"}, "more than any GPU holds"),
    ({"cublas_workspace_config": ":4096:2:16:8", "deterministic_mode": True}, ":4096:8 or :16:8"),
])
def test_bad_cublas_workspace_config_is_an_error_naming_the_field(training, words):
    from estimator import ConfigError
    with pytest.raises(ConfigError, match="training.cublas_workspace_config") as exc:
        estimate(make_config(DENSE, training={"seq_length": 256, **training}))
    assert words in str(exc.value)


def test_megatron_importer_reads_cublas_workspace_config_from_the_launch_line():
    from estimator.formats.megatron_args import read_megatron_args
    imp = read_megatron_args("CUBLAS_WORKSPACE_CONFIG=:16:8 torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 "
                             "--hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
                             "--micro-batch-size 1 --vocab-size 1000")
    assert imp.config["training"]["cublas_workspace_config"] == ":16:8"
    assert any(n.startswith("CUBLAS_WORKSPACE_CONFIG=:16:8") for n in imp.notes)
