"""Short links to a catalog model (``calculator/?hf=ID``, issue 29): the site build gives each catalog id the first
numbers the page's Python will give (:func:`estimator.web.protocol.hf_precomputed`), so that the page shows them
before Python has started, as it does for a preset link.

The build-time result is the Model box's answer for the id over the page's opening state followed by that state's
estimate: the page's own two requests (``model``, then ``compute``). These tests hold every catalog id to having
one, to being those two answers, and one of them to a published parameter count.
"""

from __future__ import annotations

import json

import pytest

from estimator import web
from estimator.formats.catalog import listing
from estimator.formats.hf_catalog import ids
from estimator.web.protocol import catalog_precomputed, hf_precomputed

OPENING = web.boot_data(precompute=False)["default"]["state"]


@pytest.fixture(scope="module")
def catalog():
    return catalog_precomputed()


def test_every_catalog_id_has_first_numbers_or_a_reason(catalog):
    """Every id of the catalog is either precomputed or listed with why not; every model the catalog says the
    estimator counts (``listing()``'s ``supported``) is precomputed, with an estimate (a view), not an error."""
    done, missing = catalog
    assert len(ids()) >= 150
    assert set(done) | set(missing) == set(ids()) and not set(done) & set(missing)
    assert all(isinstance(why, str) and why for why in missing.values())
    supported = {m["hf_id"] for m in listing() if m["supported"]}
    assert supported <= set(done), sorted(supported - set(done))
    for hub_id, res in done.items():
        assert res["hf"] == hub_id and res["state"]["hf"] == hub_id, hub_id
        assert res["view"]["headline"].startswith(hub_id), hub_id
        json.dumps(res, allow_nan=False)            # what the site serves: strict JSON


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-VL-30B-A3B-Instruct",
                                    "deepseek-ai/DeepSeek-V4-Flash"])
def test_first_numbers_are_the_pages_own_two_answers(hub_id):
    """A dense model, a MoE, a VLM and DeepSeek-V4: the build's result is what the page's Python answers to the
    short link: the ``model`` request over the opening state, then ``compute`` (no exports) and ``advice`` of the
    state it gives, each through :func:`estimator.web.handle` as the worker sends them."""
    def ask(req: dict) -> dict:
        return json.loads(web.handle(json.dumps(req)))
    pre = hf_precomputed(hub_id)
    picked = ask({"op": "model", "state": {**OPENING, "hf": hub_id}, "name": hub_id})
    assert (pre["state"], pre["notes"]) == (picked["state"], picked["notes"])
    now = ask({"op": "compute", "state": picked["state"], "exports": False})
    assert pre["view"] == now["view"] and pre["hf_model"] == now["hf_model"]
    assert (pre["hidden"], pre["search_key"]) == (now["hidden"], now["search_key"])
    assert pre["choices"] == ask({"op": "advice", "state": picked["state"]})["choices"]


def test_qwen3_30b_a3b_link_names_its_published_size():
    """The benchmark's link: Qwen3-30B-A3B's precomputed numbers are for that model, whose published size is
    30,532,122,624 parameters (KerasHub preset ``qwen3_moe_30b_a3b_en``, metadata ``params``): 30.53 B."""
    pre = hf_precomputed("Qwen/Qwen3-30B-A3B")
    assert pre["view"]["parameters"].startswith("30.53 B parameters")


def test_an_id_the_model_box_refuses_has_no_first_numbers():
    res = hf_precomputed("no-such-org/no-such-model")
    assert "view" not in res and res["errors"][0]["field"] == "model"
