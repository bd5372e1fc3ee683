"""The calculator's verdict shows the MoE routing headroom (estimator/plan/headroom.py, estimator/web/view.py): for
Qwen3-30B-A3B on an H100-80GB the largest overload factor at which it fits, the same the command line prints, with
the evidence folded below it; nothing of the kind for a dense model.

Qwen3-30B-A3B's preset runs EP 4 with 128 experts and top-8 (32 local experts), so its busiest rank can receive at
most 4 x min(8, 32) / 8 = 4 times its balanced rows: the headroom the page shows is at most 4.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from estimator import get_gpu, load_preset  # noqa: E402
from estimator.plan.headroom import describe, overload_headroom  # noqa: E402

from _calc import open_page as _open, settle as _settle  # noqa: E402


def test_verdict_shows_the_moe_routing_headroom(page, site_url):
    expected = overload_headroom(load_preset("qwen3-30b-a3b"), get_gpu("H100-80GB"))
    assert expected.bound == 4.0
    assert _open(page, site_url + "calculator/?preset=qwen3-30b-a3b&gpu=H100-80GB") == "done"
    _settle(page, 0)
    box = page.locator(".mme-verdict .mme-overload")
    assert box.count() == 1
    assert box.locator("summary").inner_text().strip() == describe(expected)[0]
    assert float(box.get_attribute("data-overload")) == expected.factor
    assert not box.locator("p").is_visible()                 # the evidence is folded
    box.locator("summary").click()
    assert "1.3 to 4.0" in box.locator("p").inner_text()


def test_dense_verdict_has_no_routing_headroom(page, site_url):
    assert _open(page, site_url + "calculator/?preset=qwen3-8b&gpu=H100-80GB") == "done"
    _settle(page, 0)
    assert page.locator(".mme-verdict").count() == 1
    assert page.locator(".mme-verdict .mme-overload").count() == 0
