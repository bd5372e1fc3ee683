"""Never a traceback, never a hang, one answer: seeded hostile inputs through every way into the estimator.

Each case comes from ``tests/fuzz_inputs.py`` (huge and negative numbers, NaN and infinities, wrong types,
deep nesting, byte-order marks, null bytes, 50,000 unknown keys, damaged YAML/JSON, Hugging Face configs
with wrong value types, malformed calculator requests) and runs in a worker process under a CPU and a
memory limit. The surfaces: the CLI (every sub-command and flag family), the public Python API, every request of
the calculator's ``web.handle``, the configuration loader (YAML and JSON files and text, encodings, duplicated keys,
oversized inputs), the Hugging Face importer (each key of each catalogued config perturbed in turn), the Megatron-LM
argument importer (layer patterns, huge and tiny numbers), and ``agree``: one configuration through the CLI, the API
and ``web.handle``, which must give the same verdict and the same numbers. A case passes with a result or with the
clear error the project promises (a field, what is wrong); a traceback, an internal error, more than 5 s of CPU,
more than 512 MiB of memory, a crash, non-strict JSON or a disagreement between surfaces fails it. The ids name
``surface-index``: ``python tests/fuzz_inputs.py --surface SURFACE --cases N --seed S`` reproduces them.

``MME_FUZZ_CASES`` (cases per surface, default 200) and ``MME_FUZZ_SEED`` (default 15) widen the net.
"""

from __future__ import annotations

import os

import pytest

from tests import fuzz_inputs as fuzz

pytestmark = pytest.mark.subprocess

CASES = int(os.environ.get("MME_FUZZ_CASES", "200"))
SEED = int(os.environ.get("MME_FUZZ_SEED", "15"))


@pytest.fixture(scope="module")
def runner():
    r = fuzz.Runner()
    yield r
    r.close()


def _cases(surface: str) -> int:
    """Cases per surface: every catalogued config for the Hugging Face importer, ``CASES`` for the others."""
    return len(fuzz.hf_configs()) if surface == "hf" else CASES


@pytest.mark.parametrize("surface, index", [(s, i) for s in fuzz.SURFACES for i in range(_cases(s))],
                         ids=lambda x: str(x))
def test_hostile_input_gets_a_result_or_a_clear_error(runner, surface, index):
    outcome, detail = runner.run(surface, SEED, index)
    assert outcome not in fuzz.BAD_OUTCOMES, f"{surface} case {index} (seed {SEED}): {outcome}:\n{detail}"
