"""Every field at each value it allows, one at a time, through the calculator's ``compute``: a result or a clear
error, never an internal one.

The fuzz suite (tests/test_fuzz.py) draws hostile values at random; this walks the schema instead, so that a field
added later is covered the day it lands. Two internal errors it found when it was written, both in the "copy as
Megatron-Bridge overrides" export that every answer carries: ``training.peft: lora`` without ``peft_dim`` in the
state (KeyError 'peft_dim': the export read the Config's dict, which leaves defaults out) and any checkpoint field
(``save_interval``, ``ckpt_format``: KeyError 'checkpoint', a Bridge section the export did not open).

Values: each choice of a field with choices, true and false for a flag, the smallest and largest number the
schema admits. Presets: a dense model, an MoE model, a multi-latent-attention MoE with MTP, and a LoRA one.
"""

from __future__ import annotations

import json

import pytest

from estimator.config.schema import field_specs
from estimator.web import handle

PRESETS = ("llama-3-8b", "qwen3-30b-a3b", "deepseek-v3", "llama-3-70b-lora")


def _values(spec) -> list[str]:
    """The values the calculator's form can send for ``spec`` (as text, the way the form sends them)."""
    if spec.choices:
        return [str(c) for c in spec.choices]
    if spec.type == "bool":
        return ["true", "false"]
    if spec.type in ("int", "float"):
        return [str(int(v)) if spec.type == "int" else repr(float(v)) for v in (spec.min, spec.max) if v is not None]
    return []


@pytest.mark.parametrize("preset", PRESETS)
def test_every_field_value_gets_a_result_or_a_clear_error(preset):
    internal = []
    for spec in field_specs():
        for value in _values(spec):
            req = {"op": "compute", "state": {"preset": preset, "values": {spec.path: value}}}
            answer = json.loads(handle(json.dumps(req)))
            for err in answer.get("errors") or []:
                if err["field"] == "internal":
                    internal.append(f"{spec.path}={value}: {err['message']}")
                else:
                    assert err["message"], (spec.path, value, err)
            if not answer.get("errors"):
                assert answer["exports"]["bridge"] and answer["exports"]["megatron"], (spec.path, value)
    assert not internal, f"{len(internal)} internal errors on {preset}:\n" + "\n".join(internal[:20])
