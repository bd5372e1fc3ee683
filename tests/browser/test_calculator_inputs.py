"""The calculator's full form takes what the command line takes, and says what a change implies (issue 31), in
Chromium. Each test failed on the page before the fix; expected figures come from the core in CPython."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimator import estimate  # noqa: E402
from estimator.formats.presets import load_preset  # noqa: E402

from _calc import events, field, fill, open_page, reveal, settle, shown  # noqa: E402


def _preset(name: str, drop=(), **training) -> dict:
    cfg = json.loads(json.dumps(load_preset(name).to_dict()))
    for key in drop:
        del cfg["training"][key]
    cfg["training"].update(training)
    return cfg


def test_recompute_none_in_the_full_form_drops_the_presets_method_with_a_note(page, site_url):
    """Item 9: on DeepSeek-V2-Lite (full recompute, uniform, 1 layer) the full form's "null (none)" was refused on
    recompute_method, a field the user had not touched; now it is dropped, as by the CLI's --recompute none."""
    assert open_page(page, f"{site_url}calculator/?preset=deepseek-v2-lite") == "done"
    reveal(page, "training.recompute_granularity")
    n = events(page)
    page.select_option(field("training.recompute_granularity"), "null")
    assert settle(page, n) == "done"
    want = estimate(_preset("deepseek-v2-lite", drop=("recompute_granularity", "recompute_method",
                                                      "recompute_num_layers"))).to_dict()
    assert shown(page)["stages"] == want["stages"]
    note = page.inner_text(".mme-implied")
    assert "training.recompute_method dropped: it does not apply with recompute_granularity none" in note


def test_tp_1_turns_off_the_presets_sequence_parallelism_with_the_clis_note(page, site_url):
    """Item 8: Qwen3-30B-A3B's recipe runs TP 4 with sequence parallelism; TP 1 typed in the full form was refused
    (the CLI turned sequence parallelism off with a note); now both turn it off and say so."""
    assert open_page(page, f"{site_url}calculator/?preset=qwen3-30b-a3b&training.world_size=8"
                           "&parallelism.expert_model_parallel_size=4") == "done"
    n = events(page)
    fill(page, "parallelism.tensor_model_parallel_size", "1")
    assert settle(page, n) == "done"
    assert shown(page)["parallel"]["sequence_parallel"] is False
    assert "sequence parallelism turned off (training.sequence_parallel: false)" in page.inner_text(".mme-implied")


def test_a_megatron_pattern_expression_in_the_form(page, site_url):
    """Item 1: the field refused ([0]*1+[1]*26), which --moe-layer-freq takes; it is DeepSeek-V2-Lite's own list."""
    assert open_page(page, f"{site_url}calculator/?preset=deepseek-v2-lite") == "done"
    before = shown(page)
    n = events(page)
    fill(page, "model.moe_layer_freq", "([0]*1+[1]*26)")
    assert settle(page, n) == "done"
    assert shown(page)["stages"] == before["stages"]
    assert page.is_hidden(".mme-implied")


def test_an_unknown_preset_chosen_over_changes_is_an_error_not_a_crash(page, site_url):
    """Issue 31: an injection run logged "Cannot read properties of undefined (reading 'title')": the model picker,
    with changes pending, looked the new preset's title up without checking it exists. A hostile name typed in the
    Model box (issue 27: a text box, no longer a list a script adds to) must give Python's error naming it, as
    text, with the changes kept and no page error."""
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
    n = events(page)
    fill(page, "training.micro_batch_size", "2")
    assert settle(page, n) == "done"
    hostile = "<img src=x onerror=alert(1)>"
    page.fill("#mme-preset", hostile)
    page.press("#mme-preset", "Enter")
    page.wait_for_selector("#mme-preset-err:not([hidden])", timeout=10_000)
    assert f"'{hostile}' is not a preset" in page.inner_text("#mme-preset-err")
    assert "micro_batch_size=2" in page.url and page.is_hidden(".mme-confirm")
    assert errors == [] and page.locator("img[src=x]").count() == 0
