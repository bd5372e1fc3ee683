"""Import paths of the flat layout (before November 2026) keep working, as the same module objects."""

from __future__ import annotations

import importlib

import pytest

import estimator
from estimator.legacy_paths import MOVED


def test_the_paths_users_wrote_still_import():
    from estimator.hf import from_hf_config
    from estimator.memory import stage_memory
    from estimator.search import max_micro_batch, search
    assert from_hf_config is estimator.from_hf_config and search is estimator.search
    assert stage_memory.__module__ == "estimator.memory.assemble"
    assert max_micro_batch.__module__ == "estimator.plan.search"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_itself(old):
    module = importlib.import_module(f"estimator.{old}")
    assert module is importlib.import_module(f"estimator.{MOVED[old]}")
    assert module.__spec__.name == f"estimator.{MOVED[old]}"          # its own spec, not the alias's


def test_a_submodule_of_an_old_package_is_not_loaded_twice():
    import estimator.layers.moe as old
    import estimator.model.layers.moe as new
    from estimator.features.fsdp import megatron_fsdp_states
    assert old is new and megatron_fsdp_states.__module__ == "estimator.memory.features.fsdp"


def test_the_functions_named_like_old_modules_stay_functions():
    """``estimator.search()`` and ``estimator.resolve()`` are the public API; importing the old modules of the same
    names does not replace them on the package."""
    import estimator.resolve  # noqa: F401
    import estimator.search  # noqa: F401
    from estimator.resolve import Resolved  # noqa: F401
    assert callable(estimator.search) and estimator.search.__module__ == "estimator.plan.search"
    assert callable(estimator.resolve) and estimator.resolve.__module__ == "estimator.model.resolve"


def test_old_modules_that_are_packages_now_re_export_their_names():
    from estimator.cli import build_parser, main  # noqa: F401
    from estimator.config import config_from_dict, load_config, not_modelled, validate  # noqa: F401
    from estimator.validation import Comparison, compare_case, load_cases  # noqa: F401
    from estimator.web import boot_data, compute, handle, warm  # noqa: F401
    assert load_config is estimator.load_config and validate is estimator.validate
