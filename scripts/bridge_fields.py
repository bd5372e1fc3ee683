"""Regenerate ``estimator/formats/bridge/catalog.py``: every field of Megatron-Bridge's ``ConfigContainer`` sections.

A Bridge run writes its whole configuration as YAML (``ConfigContainer.to_yaml()``, the ``config.yaml`` saved with
every run). Its sections are dataclasses: some defined in Bridge, most inheriting Megatron-Core's or Megatron-LM's
training dataclasses (``TransformerConfig``, ``DistributedDataParallelConfig``, ``OptimizerConfig``, ...). This script
reads those class bodies with :mod:`ast` (no import of Bridge, torch or Megatron: only the annotated fields and
their literal defaults are needed) at two pinned revisions: Megatron-Bridge, and the Megatron-LM commit Bridge's
``3rdparty/Megatron-LM`` submodule pins at that revision. A field declared twice (a Bridge subclass re-declaring a
Megatron field) keeps the subclass's default, as Python's dataclasses do. The model section is a
``GPTModelProvider``; the fields only ``MLATransformerConfig`` or ``HybridModelProvider`` (Mamba hybrids) declare
are added, without changing a GPT default (:data:`ADD_ONLY`); likewise the dataset section adds the fields of the
SFT dataset configurations (``GPTSFTDatasetConfig``, ``DirectHFSFTDatasetConfig``) to ``GPTDatasetConfig``'s.

Usage (a Bridge and a Megatron-LM checkout or bare clone; no network)::

    python scripts/bridge_fields.py BRIDGE MEGATRON_LM [--rev REVISION]

The classification of each field (modelled, no effect on memory, refused) is kept by hand in
``estimator/formats/bridge/field_classes.py``; the test suite fails when a catalogued field is not classified.
"""

from __future__ import annotations

import argparse
import ast
import pprint
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "estimator" / "formats" / "bridge" / "catalog.py"

B, M = "bridge", "megatron"
_MT = "megatron/training/config/"
#: ConfigContainer section -> the classes whose fields it holds, base classes first: (repo, path, class).
SECTIONS = {
    "model": [(M, "megatron/core/model_parallel_config.py", "ModelParallelConfig"),
              (M, "megatron/core/transformer/transformer_config.py", "TransformerConfig"),
              (M, "megatron/core/transformer/transformer_config.py", "MLATransformerConfig"),
              (B, "src/megatron/bridge/models/transformer_config.py", "TransformerConfig"),
              (B, "src/megatron/bridge/models/gpt_provider.py", "GPTModelProvider"),
              (B, "src/megatron/bridge/models/hybrid/hybrid_provider.py", "HybridModelProvider")],
    "ddp": [(M, "megatron/core/distributed/distributed_data_parallel_config.py", "DistributedDataParallelConfig"),
            (B, "src/megatron/bridge/training/config.py", "DistributedDataParallelConfig")],
    "optimizer": [(M, "megatron/core/optimizer/optimizer_config.py", "OptimizerConfig")],
    "train": [(M, _MT + "training_config.py", "TrainingConfig"),
              (B, "src/megatron/bridge/training/config.py", "TrainingConfig")],
    "validation": [(M, _MT + "training_config.py", "ValidationConfig")],
    "scheduler": [(M, _MT + "training_config.py", "SchedulerConfig"),
                  (B, "src/megatron/bridge/training/config.py", "SchedulerConfig")],
    "dataset": [(M, "megatron/core/datasets/blended_megatron_dataset_config.py", "BlendedMegatronDatasetConfig"),
                (M, "megatron/core/datasets/gpt_dataset.py", "GPTDatasetConfig"),
                (B, "src/megatron/bridge/data/base.py", "DataloaderConfig"),
                (B, "src/megatron/bridge/training/config.py", "GPTDatasetConfig"),
                (B, "src/megatron/bridge/data/builders/gpt_sft.py", "GPTSFTDatasetConfig"),
                (B, "src/megatron/bridge/data/builders/direct_hf_sft.py", "DirectHFSFTDatasetConfig")],
    "checkpoint": [(M, _MT + "training_config.py", "CheckpointConfig"),
                   (B, "src/megatron/bridge/training/config.py", "CheckpointConfig")],
    "logger": [(M, _MT + "training_config.py", "LoggerConfig"),
               (B, "src/megatron/bridge/training/config.py", "LoggerConfig")],
    "rng": [(M, _MT + "common_config.py", "RNGConfig")],
    "dist": [(M, _MT + "common_config.py", "DistributedInitConfig"),
             (B, "src/megatron/bridge/training/config.py", "DistributedInitConfig")],
    "profiling": [(M, _MT + "common_config.py", "ProfilingConfig"),
                  (B, "src/megatron/bridge/training/config.py", "ProfilingConfig")],
    "rerun_state_machine": [(M, _MT + "resilience_config.py", "RerunStateMachineConfig"),
                            (B, "src/megatron/bridge/training/config.py", "RerunStateMachineConfig")],
    "mixed_precision": [(B, "src/megatron/bridge/training/mixed_precision.py", "MixedPrecisionConfig")],
    "comm_overlap": [(B, "src/megatron/bridge/training/comm_overlap.py", "CommOverlapConfig")],
    "peft": [(B, "src/megatron/bridge/peft/lora.py", "LoRA"), (B, "src/megatron/bridge/peft/dora.py", "DoRA")],
}


#: Classes of a chain that only add fields the classes before them do not declare (a sibling provider, not a subclass).
ADD_ONLY = {"HybridModelProvider", "MLATransformerConfig", "GPTSFTDatasetConfig", "DirectHFSFTDatasetConfig"}


def _show(repo: str, rev: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{rev}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def _default(node):
    """The literal default of a field, or None where it is not a literal (a factory, a torch dtype, ...)."""
    if node is None:
        return None
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "field":
        for kw in node.keywords:
            if kw.arg == "default":
                return _default(kw.value)
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None
    return value if isinstance(value, (bool, int, float, str, type(None))) else None


def class_fields(source: str, name: str) -> dict:
    """Field name -> literal default of the annotated class attributes of ``name`` (ClassVar and private ones left
    out: they are not written to the YAML)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            out = {}
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    if stmt.target.id.startswith("_") or "ClassVar" in ast.unparse(stmt.annotation):
                        continue
                    out[stmt.target.id] = _default(stmt.value)
            return out
    raise SystemExit(f"class {name} not found")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bridge")
    ap.add_argument("megatron")
    ap.add_argument("--rev", default="HEAD", help="Megatron-Bridge revision (default HEAD)")
    a = ap.parse_args()
    rev = subprocess.run(["git", "-C", a.bridge, "rev-parse", a.rev], check=True, capture_output=True,
                         text=True).stdout.strip()
    tree = subprocess.run(["git", "-C", a.bridge, "ls-tree", rev, "3rdparty/Megatron-LM"], check=True,
                          capture_output=True, text=True).stdout.split()
    mrev = tree[2]
    repos = {B: (a.bridge, rev), M: (a.megatron, mrev)}
    sections = {}
    for section, chain in SECTIONS.items():
        fields: dict = {}
        for repo, path, cls in chain:
            found = class_fields(_show(repos[repo][0], repos[repo][1], path), cls)
            if cls in ADD_ONLY:
                found = {k: v for k, v in found.items() if k not in fields}
            fields.update(found)
        sections[section] = dict(sorted(fields.items()))
    sources = {s: [f"{'Megatron-Bridge' if r == B else 'Megatron-LM'} : {p} : {c}" for r, p, c in chain]
               for s, chain in SECTIONS.items()}
    OUT.write_text(render(rev, mrev, sections, sources))
    print(f"wrote {OUT} ({sum(map(len, sections.values()))} fields)", file=sys.stderr)


def render(rev: str, mrev: str, sections: dict, sources: dict) -> str:
    return (f'"""Generated by ``scripts/bridge_fields.py``; do not edit. Every field of Megatron-Bridge\'s\n'
            f'``ConfigContainer`` sections, read from the dataclasses at NVIDIA-NeMo/Megatron-Bridge @ {rev}\n'
            f'and NVIDIA/Megatron-LM @ {mrev} (the commit Bridge\'s 3rdparty/Megatron-LM pins).\n"""\n\n'
            f'REVISION = "{rev}"\nMEGATRON_LM_REVISION = "{mrev}"\n\n'
            f'#: Section -> the classes read, base classes first (repository : path : class).\n'
            f'SOURCES = {pprint.pformat(sources, width=118, sort_dicts=False)}\n\n'
            f'#: Section -> {{field: its literal default, or None where the default is not a literal}}.\n'
            f'SECTIONS = {pprint.pformat(sections, width=118, sort_dicts=False)}\n')


if __name__ == "__main__":
    main()
