"""The calculator's Megatron-Bridge import box and export (issue 28): the page shows what the Bridge reader
(estimator/formats/bridge) gives on the command line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("playwright")
sys.path.insert(0, str(Path(__file__).parent))

from estimator import estimate  # noqa: E402
from estimator.formats.bridge.config import read_bridge_config  # noqa: E402

from _calc import events as _events, open_page as _open, settle as _settle, shown as _shown  # noqa: E402

CONFIG = """\
model:
  num_layers: 4
  hidden_size: 256
  num_attention_heads: 4
  vocab_size: 1024
  seq_length: 512
  normalization: RMSNorm
  position_embedding_type: rope
  activation_func:
    _call_: false
    _target_: torch.nn.functional.silu
  gated_linear_unit: true
train:
  micro_batch_size: 1
  global_batch_size: 8
ddp:
  grad_reduce_in_fp32: false
mixed_precision: bf16_mixed
"""


def test_pasted_bridge_config_and_its_overrides(page, site_url):
    assert _open(page, site_url + "calculator/?preset=tiny") == "done"
    n = _events(page)
    page.click(".mme-import > summary")
    page.fill("#mme-import\\.bridge", CONFIG)
    page.click("#mme-import\\.bridge ~ button")
    assert _settle(page, n) == "done"
    world = int(page.input_value("#mme-training\\.world_size"))
    want = estimate(read_bridge_config(CONFIG, world_size=world).config).to_dict()
    assert _shown(page)["stages"] == want["stages"]
    page.click(".mme-exports > summary")
    assert page.inner_text("pre.mme-export-bridge").startswith("mixed_precision=bf16_mixed")
