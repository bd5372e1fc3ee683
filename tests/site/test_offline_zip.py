"""``hooks/offline_zip.py``: the offline bundle's zip is reproducible and laid out for unzipping."""

from __future__ import annotations

import importlib.util
import time
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")            # the hook is MkDocs's (not inside Pyodide)

ROOT = Path(__file__).resolve().parents[2]


def _hook():
    spec = importlib.util.spec_from_file_location("offline_zip", ROOT / "hooks" / "offline_zip.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(base: Path) -> Path:
    (base / "assets" / "js").mkdir(parents=True)
    (base / "calculator.html").write_text("<html>calculator</html>")
    (base / "assets" / "js" / "a.js").write_text("let a = 1;\n" * 1000)
    return base


def test_two_zips_of_one_tree_are_identical_and_stamped_with_the_source_date(tmp_path):
    """Entries in sorted order under one folder, each dated SOURCE_DATE_EPOCH (here 2024-05-01 12:00:00 UTC =
    1714564800), files 0644 and folders 0755; a second zip of the same files, written later, is the same bytes."""
    hook = _hook()
    tree = _tree(tmp_path / "site")
    a, b = tmp_path / "a.zip", tmp_path / "b.zip"
    hook.write_zip(tree, a, epoch=1714564800)
    for f in tree.rglob("*"):                          # newer modification times change nothing
        f.touch()
    time.sleep(1)
    hook.write_zip(tree, b, epoch=1714564800)
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as zf:
        infos = zf.infolist()
        assert [i.filename for i in infos] == [
            f"{hook.FOLDER}/assets/", f"{hook.FOLDER}/assets/js/", f"{hook.FOLDER}/assets/js/a.js",
            f"{hook.FOLDER}/calculator.html"]
        assert {i.date_time for i in infos} == {(2024, 5, 1, 12, 0, 0)}
        assert [(i.external_attr >> 16) & 0o777 for i in infos] == [0o755, 0o755, 0o644, 0o644]
        assert zf.read(f"{hook.FOLDER}/calculator.html") == b"<html>calculator</html>"
    # Before 1980 a zip cannot say: the earliest date it can.
    hook.write_zip(tree, a, epoch=0)
    assert zipfile.ZipFile(a).infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)


def test_the_marker_becomes_the_link_and_an_unknown_one_fails():
    from types import SimpleNamespace

    from mkdocs.exceptions import PluginError
    hook = _hook()
    page = SimpleNamespace(url="calculator/", file=SimpleNamespace(src_uri="calculator.md", dest_uri="calculator/index.html"))
    config = SimpleNamespace(plugins={}, use_directory_urls=True)
    out = hook.on_page_content("<p>x</p><!-- offline:download -->", page, config, None)
    assert f'href="../{hook.ZIP_PATH}"' in out and "offline:" not in out
    with pytest.raises(PluginError, match="unknown marker offline:bogus"):
        hook.on_page_content("<!-- offline:bogus -->", page, config, None)
