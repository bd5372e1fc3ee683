"""A total that includes multi-token-prediction layers says so (issue 29: "682.64 B parameters" for DeepSeek-V3).

Expected figures from the preset's data file: DeepSeek-V3's published count without the MTP layer is
671,026,419,200 (``published_total``, ``published_total_excludes: mtp``), so the MTP layer holds the difference
between the estimator's total and that figure: 682,636,487,424 - 671,026,419,200 = 11,610,068,224.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from estimator import web
from estimator.formats.presets import preset_info


def _published() -> int:
    info = preset_info("deepseek-v3")
    assert info["published_total_excludes"] == "mtp"
    return int(str(info["published_total"]).replace(",", ""))


@pytest.mark.subprocess
def test_cli_says_the_total_includes_the_mtp_layer():
    out = subprocess.run([sys.executable, "-m", "estimator", "estimate", "deepseek-v3"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    m = re.search(r"Parameters: ([\d,]+) total \(incl\. ([\d,]+) in the MTP layer\)", out.stdout)
    assert m, out.stdout[:300]
    total, mtp = (int(g.replace(",", "")) for g in m.groups())
    assert total - mtp == _published() == 671_026_419_200 and mtp == 11_610_068_224


def test_calculator_headline_says_so_and_a_model_without_mtp_does_not():
    def words(preset):
        res = web.compute({"preset": preset})
        found = []

        def walk(d):
            if isinstance(d, dict):
                for k, v in d.items():
                    found.append(v) if k == "parameters" and isinstance(v, str) else walk(v)
            elif isinstance(d, list):
                for v in d:
                    walk(v)
        walk(res)
        return found[0]
    assert words("deepseek-v3").startswith("682.64 B parameters (incl. 11.61 B in the MTP layer; ")
    assert "MTP" not in words("llama-3-8b")
