"""Megatron-Core's cross-field rules: what makes a configuration invalid, and what is valid but not modelled.

:func:`validate` collects every broken rule (field, value, rule) of a configuration whose fields each passed the
schema (:mod:`estimator.config.load` checks those); :func:`not_modelled` lists the valid configurations Megatron-LM
runs that the estimator does not model, which :func:`refuse_not_modelled` raises as an
:class:`~estimator.config.errors.UnsupportedError`. One module per concern:

- :mod:`.check`: the entry point (:func:`validate`, :func:`cross_field_problems`), the attention shape, world size,
  sequence, context-parallel, batch and recompute rules, the pipeline split and the interleaved schedule's groups;
- :mod:`.unsupported`: the valid configurations not modelled;
- :mod:`.moe`: the MoE rules, the router's, HybridEP's and the overload factor a layout receives;
- :mod:`.precision`: FP8 / NVFP4 recipes, the precision-aware optimizer, deterministic mode, the GPU's recipes;
- :mod:`.model`: the generic model rules, which call the layer kinds' own: :mod:`.hybrid` (Mamba and gated delta
  net layers), :mod:`.attention` (DSA, DeepSeek-V4), :mod:`.vision` (the vision towers), :mod:`.media` (Nemotron
  Omni's sound tower and video frames), :mod:`.hetero` (Llama-Nemotron's heterogeneous layers), :mod:`.families`
  (Gemma 4, MiMo-V2-Flash, K-EXAONE, Falcon-H1, Kimi K3), :mod:`.wan` (Megatron-Bridge's Wan diffusion transformer:
  its latent grid, and what is not modelled with it);
- :mod:`.features`: the recipe features (FSDP, optimizers, PEFT, CUDA graphs, communication, schedules), with
  activation offloading in :mod:`.offload`.

Imports: the rest of :mod:`estimator.config` (schema, errors, derived values, grammars, limits). Imported by
:mod:`estimator.config.load` and the layers above. The names below are re-exported for the callers of the former
``estimator.config.rules``, ``model_rules`` and ``feature_rules`` modules.
"""

from __future__ import annotations

from .attention import dsa_shared_topk, dsa_split_problems
from .check import cross_field_problems, interleaving_problem, layer_split_problems, validate
from .features import feature_problems
from .hetero import Block, HeteroError, ffn_mult_to_size, parse_blocks
from .model import model_problems
from .moe import overload_cap
from .unsupported import not_modelled, refuse_not_modelled

__all__ = ["Block", "HeteroError", "cross_field_problems", "dsa_shared_topk", "dsa_split_problems",
           "feature_problems", "ffn_mult_to_size", "interleaving_problem", "layer_split_problems", "model_problems",
           "not_modelled", "overload_cap", "parse_blocks", "refuse_not_modelled", "validate"]
