"""Issue 27, item 4: the calculator's Model box picks a model by its Hugging Face id (or a preset by name), the form
state names it (``state.hf``), and the headline, the pins, the exports and the layout search keep that name.

The model section of a state with ``hf`` is the one ``python -m estimator estimate [PRESET] --hf ID`` imports.
"""

from __future__ import annotations

import json

import pytest

from estimator import estimate, from_hf_config, load_preset
from estimator.web import compute, handle
from estimator.web.compare import compare
from estimator.web.layouts import layout_state
from estimator.web.models import options, pick
from estimator.web.protocol import boot_data

STATE = {"preset": "qwen3-8b", "values": {"training.micro_batch_size": 1, "model.num_layers": 4}, "gpu": "H100-80GB"}


def _answer(request: dict) -> dict:
    return json.loads(handle(json.dumps(request)))


def test_a_hub_id_keeps_the_forms_layout_drops_its_model_edits_and_names_the_model():
    res = _answer({"op": "model", "state": STATE, "name": "Qwen/Qwen3-30B-A3B"})
    assert res["hf"] == "Qwen/Qwen3-30B-A3B"
    assert res["state"] == {"preset": "qwen3-8b", "hf": "Qwen/Qwen3-30B-A3B",
                            "values": {"training.micro_batch_size": 1}, "gpu": "H100-80GB"}
    out = compute(res["state"])
    expected = load_preset("qwen3-8b").to_dict()
    expected["model"] = from_hf_config("Qwen/Qwen3-30B-A3B")
    expected["training"]["micro_batch_size"] = 1
    expected["training"]["gpu_arch"] = "sm_90"                      # the H100's, as --gpu H100-80GB sets it
    assert out["estimate"] == estimate(expected).to_dict()          # the same model as --hf imports
    assert out["view"]["headline"].startswith("Qwen/Qwen3-30B-A3B: ")
    assert out["view"]["model"] == "Qwen/Qwen3-30B-A3B"
    assert out["hf_model"] == from_hf_config("Qwen/Qwen3-30B-A3B")
    assert out["exports"]["cli"] == ("python -m estimator estimate qwen3-8b --hf Qwen/Qwen3-30B-A3B "
                                     "--mbs 1 --gpu H100-80GB")
    cli = _cli_json(out["exports"]["cli"])                          # the command gives the same estimate
    assert {k: v for k, v in cli.items() if k in out["estimate"]} == out["estimate"]


def _cli_json(command: str) -> dict:
    import contextlib
    import io
    import shlex

    from estimator.cli.commands import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        assert main(shlex.split(command)[3:] + ["--json"]) == 0
    return json.loads(buf.getvalue())


def test_a_preset_alone_is_not_named_in_the_headline():
    assert not compute({"preset": "qwen3-8b", "values": {}, "gpu": "H100-80GB"})["view"]["headline"].startswith("qwen")


def test_a_layout_that_does_not_work_for_the_model_gives_way_to_the_catalogs_default():
    """Mixtral's EP 8 on a dense model: the catalog's default layout on the form's 64 GPUs, said in a note."""
    res = pick({"preset": "mixtral-8x7b", "values": {}, "gpu": "H100-80GB"}, "Qwen/Qwen3-8B")
    assert res["state"]["preset"] is None and res["state"]["hf"] == "Qwen/Qwen3-8B"
    assert res["state"]["values"]["training.world_size"] == 64
    assert not any(p.startswith("model.") for p in res["state"]["values"])
    assert "does not work for Qwen/Qwen3-8B" in res["notes"][-1] and "expert" in res["notes"][-1]
    assert "errors" not in compute(res["state"])


def test_a_sibling_id_resolves_with_a_note_and_keeps_its_name():
    res = pick(STATE, "Qwen/Qwen3-8B-Instruct")
    assert res["state"]["hf"] == "Qwen/Qwen3-8B-Instruct"
    assert res["notes"][0].startswith("Using 'Qwen/Qwen3-8B' for 'Qwen/Qwen3-8B-Instruct'")
    assert compute(res["state"])["view"]["headline"].startswith("Qwen/Qwen3-8B-Instruct: ")


def test_the_catalogs_spelling_of_an_id_wins():
    assert pick(STATE, "  qwen/qwen3-30b-a3b ")["state"]["hf"] == "Qwen/Qwen3-30B-A3B"


def test_a_preset_name_is_answered_as_a_preset():
    assert pick(STATE, "LLaMA-3-8B") == {"preset": "llama-3-8b"}


def test_an_unknown_name_gets_the_pages_words_and_the_closest_names():
    res = _answer({"op": "model", "state": STATE, "name": "openai/gpt-oss-12b"})
    (err,) = res["errors"]
    assert err["field"] == "model" and err["value"] == "openai/gpt-oss-12b"
    assert err["message"].startswith("'openai/gpt-oss-12b' is not a preset or a Hugging Face id of the model catalog")
    assert "nothing is downloaded" in err["message"] and "All settings › import" in err["message"]
    assert "python -m" not in err["message"] and "path of its config.json" not in err["message"]
    assert res["closest"][0] == {"name": "openai/gpt-oss-120b", "kind": "hf"}
    assert {"name": "gpt-oss-120b", "kind": "preset"} in res["closest"]


@pytest.mark.parametrize("name", ["", "   ", "x" * 100_000])
def test_an_empty_or_huge_name_is_refused_quickly(name):
    res = pick(STATE, name)
    assert res["errors"][0]["field"] == "model" and res.get("closest", []) == []


def test_a_refused_catalog_model_says_why(monkeypatch):
    """Every catalog model is counted since issue 27; a refused one (the import's reason standing in) still says
    why, in the error of the Model box."""
    from estimator.formats import catalog
    from estimator.web import state
    reason = "model_type 'x' (XForCausalLM): a stand-in reason"
    state._hf_model.cache_clear()
    monkeypatch.setattr(catalog, "status", lambda hf_id: (None, reason))
    try:
        res = pick(STATE, "Qwen/Qwen3-8B")
    finally:
        state._hf_model.cache_clear()
    assert "not supported yet" in res["errors"][0]["message"] and reason in res["errors"][0]["message"]


def test_a_state_with_a_huge_id_is_refused_quickly_and_clipped():
    import time
    t0 = time.perf_counter()
    (err,) = compute({"preset": "tiny", "hf": "Qwen/" + "x" * 1_000_000, "values": {}})["errors"]
    assert time.perf_counter() - t0 < 2 and err["field"] == "hf" and len(err["message"]) < 400


def test_a_state_with_an_unknown_id_is_an_error_on_hf_naming_the_closest():
    out = compute({"preset": None, "hf": "Qwen/Qwen3-30B-A3", "values": {}, "gpu": None})
    (err,) = out["errors"]
    assert err["field"] == "hf" and "Closest: Qwen/Qwen3-30B-A3B" in err["message"]
    assert "is not a Hugging Face id of the model catalog" in err["message"]


@pytest.mark.parametrize("request_, field", [
    ({"op": "model", "state": STATE, "name": 5}, "name"),
    ({"op": "compute", "state": {"hf": ["Qwen/Qwen3-8B"]}}, "state.hf"),
])
def test_the_protocol_stays_strict(request_, field):
    assert _answer(request_)["errors"][0]["field"] == field


def test_pins_and_layouts_keep_the_model():
    state = pick(STATE, "Qwen/Qwen3-30B-A3B")["state"]
    (col,) = compare([state])["pins"]
    assert col["title"] == "Qwen/Qwen3-30B-A3B with 1 change" and "errors" not in col
    cfg = compute(state)["config"]
    cfg["training"]["micro_batch_size"] = 4
    again = layout_state(state, cfg)
    assert again["hf"] == "Qwen/Qwen3-30B-A3B" and not any(p.startswith("model.") for p in again["values"])


def test_the_boxs_list_has_every_preset_and_catalog_id_and_the_page_gets_it_at_build_time():
    from estimator.formats.hf_catalog import ids
    from estimator.formats.presets import list_presets
    names = [o["name"] for o in options()]
    assert names == list_presets() + [m for m in names if "/" in m] and set(names[len(list_presets()):]) == set(ids())
    assert boot_data()["models"] == options()
