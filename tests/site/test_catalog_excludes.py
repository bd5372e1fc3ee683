"""The catalog page names what a published figure leaves out in words (hooks/templates/catalog.md.j2): "(without
the MTP layers)", "(without the embeddings)", both joined by "and". It printed the data's keys in upper case,
"(without EMBEDDINGS)", before."""

from __future__ import annotations

from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")     # the site's templates (not inside Pyodide)

TEMPLATES = Path(__file__).resolve().parents[2] / "hooks" / "templates"


@pytest.mark.parametrize("excludes, words", [
    (["mtp"], "671B (without the MTP layers)"),
    (["embeddings"], "671B (without the embeddings)"),
    (["mtp", "embeddings"], "671B (without the MTP layers and the embeddings)"),
    ([], "671B<br>"),
])
def test_a_published_figure_says_what_it_leaves_out(excludes, words):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined)
    macro = env.get_template("catalog.md.j2").make_module({"kinds": {"model-card": "model card"}, "total": 0, "families": 0,
                                                            "supported": [], "refused": [], "calculator": "",
                                                            "architectures": {}, "refused_types": {}}).published
    html = str(macro({"text": "671B", "excludes": excludes, "source": "a card", "kind": "model-card", "of": None},
                     "org/model"))
    assert words in html and "EMBEDDINGS" not in html and "MTP)" not in html
