"""Wan's input rules and refusals (estimator/config/rules/wan.py): each names the field, its value and why."""

from __future__ import annotations

import pytest

from estimator.config.errors import ConfigError, UnsupportedError
from estimator.config.load import load_config
from tests.conftest import make_config
from tests.model.layers.test_wan import TINY, _tiny


def test_a_partial_or_untiled_grid_is_an_error():
    with pytest.raises(ConfigError, match="wan_latent_width"):
        load_config(_tiny(wan_latent_frames=4, wan_latent_height=8))
    with pytest.raises(ConfigError, match=r"model.wan_latent_height: \(9\) must be divisible by "
                       r"model.wan_patch_spatial \(2\)"):
        load_config(_tiny(wan_latent_frames=4, wan_latent_height=9, wan_latent_width=8))
    with pytest.raises(ConfigError, match="model_kind"):
        load_config(make_config({**TINY, "model_kind": "gpt", "wan_latent_frames": 4}))


@pytest.mark.parametrize("section, field, value, words", [
    ("parallelism", "pipeline_model_parallel_size", 2, "every pipeline stage"),
    ("training", "recompute_granularity", "selective", "selective"),
    ("precision", "fp8", True, "FP8"),
    ("parallelism", "cp_comm_type", "a2a", "p2p"),
])
def test_refused_settings_name_field_and_reason(section, field, value, words):
    cfg = _tiny()
    cfg[section][field] = value
    if field == "pipeline_model_parallel_size":
        cfg["training"]["world_size"] = 2
    if field == "cp_comm_type":
        cfg["parallelism"]["context_parallel_size"] = 2
        cfg["training"]["world_size"] = 2
    if field == "fp8":
        cfg["precision"]["fp8_recipe"] = "delayed"
    with pytest.raises(UnsupportedError, match=field) as err:
        load_config(cfg)
    assert words in str(err.value) and "model_kind wan" in str(err.value)
