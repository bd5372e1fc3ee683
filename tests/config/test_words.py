"""GPU counts in words (issue 29: "1 GPUs" in the CLI and the calculator)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from estimator.config.errors import n_gpus
from estimator.web.view import parallel_text


def test_n_gpus_is_singular_for_one():
    assert (n_gpus(1), n_gpus(2), n_gpus(1024)) == ("1 GPU", "2 GPUs", "1,024 GPUs")


@pytest.mark.subprocess
def test_cli_and_calculator_say_1_gpu():
    """The tiny preset on one GPU (TP = PP = 1, world size 1): the CLI's layout line and the calculator's
    layout sentence say "1 GPU"."""
    out = subprocess.run([sys.executable, "-m", "estimator", "estimate", "tiny", "--pp", "1", "--num-gpus", "1"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert " on 1 GPU;" in out.stdout and "1 GPUs" not in out.stdout
    text = parallel_text({"world_size": 1, "tp": 1, "pp": 1, "cp": 1, "dp": 1})
    assert text.startswith("1 GPU: ") and "GPUs" not in text
