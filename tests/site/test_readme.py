"""The README a newcomer reads first: the two set-up commands, the one line on pyodide-build, and short.

House rules: two commands from the README set everything up (one builds and serves the site, one runs the whole
suite), the README says in one line why ``pyodide-build`` is not used, and it reads top to bottom in under two
minutes. At a reading speed of about 250 words a minute that is 500 words of prose; code blocks are skimmed, so the
whole file, code included, is held under 700 words (612 when this test was written).
"""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_names_the_two_commands_and_why_pyodide_build_is_not_used():
    text = README.read_text(encoding="utf-8")
    assert "bash scripts/serve.sh" in text and "bash scripts/test.sh" in text
    line = next((ln for ln in text.splitlines() if "pyodide-build" in ln), "")
    assert "not used" in line, "the README must say in one line that pyodide-build is not used, and why"


def test_the_readme_reads_in_two_minutes():
    assert len(README.read_text(encoding="utf-8").split()) <= 700
