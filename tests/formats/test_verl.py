"""The verl importer (estimator/formats/verl.py): a verl Megatron trainer configuration into the estimator's
configuration, each key mapped, without memory effect, or refused; and ``estimate --verl-config FILE``.

Expected values come from the YAML fixture tests/formats/data/verl_grpo_qwen25_7b.yaml, read by hand with verl's
meaning of each key (verl @ b178a3cd5: verl/trainer/config/ppo_megatron_trainer.yaml, verl/workers/megatron_workers.py,
verl/workers/actor/megatron_actor.py):

    ppo_mini_batch_size 64 prompts x rollout.n 4 responses = 256 sequences per optimizer step
    seq_length = max_prompt_length 1,024 + max_response_length 7,168 = 8,192
    world size = n_gpus_per_node 8 x nnodes 1 = 8
    use_kl_loss true -> a reference model; ref.megatron.param_offload true -> offloaded
    actor.megatron.param_offload true -> weights to the host and the gradient buffer freed
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from estimator import estimate
from estimator.cli.commands import main
from estimator.config.errors import ConfigError
from estimator.formats.verl import VerlRefusedError, read_verl_config
from tests.conftest import make_config
from tests.memory.test_rl_phases import GRPO, QWEN25_7B

FIXTURE = Path(__file__).parent / "data" / "verl_grpo_qwen25_7b.yaml"


def _text(**replace) -> str:
    t = FIXTURE.read_text()
    for old, new in replace.items():
        assert old in t
        t = t.replace(old, new)
    return t


def test_fixture_maps_by_hand():
    imp = read_verl_config(FIXTURE.read_text())
    tr, par = imp.config["training"], imp.config["parallelism"]
    assert par["tensor_model_parallel_size"] == 2 and par["pipeline_model_parallel_size"] == 1
    assert tr["global_batch_size"] == 256 and tr["seq_length"] == 8192 and tr["world_size"] == 8
    assert tr["micro_batch_size"] == 2 and tr["rl_logprob_micro_batch_size"] == 4
    assert tr["rl_response_length"] == 7168 and tr["rl_rollout_gpu_memory_fraction"] == 0.6
    assert tr["rl_algorithm"] == "grpo" and tr["rl_reference_model"] == "offloaded"
    assert tr["rl_offload_params"] and tr["rl_offload_grads"] and tr["rl_offload_optimizer"]
    assert tr["sequence_parallel"] and tr["cross_entropy_loss_fusion"] is False
    assert imp.config["precision"] == {"params_dtype": "bf16"}
    keys = [k.split(" = ")[0] for k, _ in imp.no_effect]
    assert "actor_rollout_ref.actor.optim.lr" in keys and "actor_rollout_ref.rollout.name" in keys


def test_import_estimates_as_the_hand_written_configuration():
    """The imported sections with the model give the same RL phases as tests/memory/test_rl_phases.py's GRPO run
    (the same fields written by hand)."""
    imp = read_verl_config(FIXTURE.read_text())
    cfg = {"model": QWEN25_7B, **imp.config}
    got = estimate(cfg).stages[0].phase_bytes
    want = estimate(make_config(QWEN25_7B, {"tensor_model_parallel_size": 2}, GRPO)).stages[0].phase_bytes
    assert got == want


def test_engine_key_not_modelled_is_refused_by_name():
    t = _text(**{"      dtype: bfloat16\n": "      dtype: bfloat16\n      override_ddp_config:\n"
                                              "        grad_reduce_in_fp32: true\n"})
    with pytest.raises(VerlRefusedError, match="override_ddp_config.grad_reduce_in_fp32"):
        read_verl_config(t)


def test_fsdp_strategy_is_refused():
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.strategy"):
        read_verl_config(_text(**{"strategy: megatron": "strategy: fsdp"}))


def test_interpolation_takes_its_target_or_default():
    """${oc.select:KEY,DEFAULT}: the target's value where the file has it, else the default."""
    t = _text(**{"      tensor_model_parallel_size: 2\n      pipeline":
                 "      tensor_model_parallel_size: ${oc.select:trainer.not_there,4}\n      pipeline"})
    assert read_verl_config(t).config["parallelism"]["tensor_model_parallel_size"] == 4
    t = _text(**{"      tensor_model_parallel_size: 2\n      pipeline":
                 "      tensor_model_parallel_size: ${oc.select:trainer.n_gpus_per_node,1}\n      pipeline"})
    assert read_verl_config(t).config["parallelism"]["tensor_model_parallel_size"] == 8


def test_micro_batch_is_required():
    with pytest.raises(ConfigError, match="ppo_micro_batch_size_per_gpu"):
        read_verl_config(_text(**{"ppo_micro_batch_size_per_gpu: 2": "ppo_micro_batch_size_per_gpu: null"}))


def test_cli_verl_config(capsys):
    code = main(["estimate", "qwen2.5-7b", "--verl-config", str(FIXTURE), "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    data = json.loads(out)
    assert data["config"]["training"]["rl_algorithm"] == "grpo"
    assert data["parallel"]["dp"] == 4
    assert "actor_logprob" in data["stages"][0]["phase_bytes"]
    assert "verl settings without effect on memory" in err
