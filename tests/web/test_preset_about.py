"""The calculator's "About this preset" data (estimator.web.view.preset_about through compute): a published recipe
that does not fit its GPU says so and why; a changed one, a fitting one and a catalog model do not."""

from estimator.web.protocol import compute


def _about(preset, values=None, gpu="H100-80GB", **extra):
    return compute({"preset": preset, "values": values or {}, "gpu": gpu, **extra}, False)["view"]["preset"]


def test_recipes_that_do_not_fit_say_why():
    for name in ("gemma-3-1b", "llama-3.1-405b", "qwen2.5-72b"):
        note = _about(name)["recipe_note"]
        assert note.startswith("The published recipe does not fit H100-80GB by this estimate.")
        assert "Why, from the preset's notes:" in note and "fit" in note.split("Why")[1]


def test_retyped_values_keep_the_recipe_and_a_change_drops_the_note():
    assert _about("gemma-3-1b", {"training.micro_batch_size": "1"})["recipe_note"]
    assert _about("gemma-3-1b", {"training.micro_batch_size": "2"})["recipe_note"] is None


def test_a_fitting_recipe_has_only_its_link():
    about = _about("qwen3-8b")
    assert about == {"name": "qwen3-8b", "title": about["title"], "recipe_note": None}
