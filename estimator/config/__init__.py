"""Layer 1, ``config``: what a configuration is and whether it is valid; no memory is computed here.

- :mod:`.schema`: the four sections' fields (name, type, default, unit, help text): the single source the loader,
  the CLI flags, the calculator form and the docs' reference are generated from;
- :mod:`.load`: YAML/JSON files, text and dicts in, a frozen :class:`~.schema.Config` out (:func:`load_config`), and
  what changing some fields implies for the others (:func:`~.load.implied_changes`, the CLI's flags and the
  calculator's form alike); :mod:`.fields` each value against its field (type, bounds, the layer-pattern text);
  :mod:`.input_size` the size limit every surface applies before parsing; :mod:`.yamlio` the standard-library
  YAML reader and writer (and the JSON reader with the same limits); :mod:`.errors` the exception tree;
- :mod:`.rules`: Megatron-Core's cross-field rules (:func:`validate`) and the valid configurations not modelled, a
  subpackage of one module per concern (the entry point, MoE, precision, the model's layer kinds and families, the
  vision tower, recipe features, offloading);
- the grammars and limits the rules need: :mod:`.pipeline_layout` (``pipeline_model_parallel_layout`` and the split
  of layers over stages), :mod:`.hybrid_pattern` (``hybrid_layer_pattern``), :mod:`.tp_overlap`
  (``tp_comm_overlap_cfg``), :mod:`.limits` (DeepEP / HybridEP), :mod:`.derived` (derived defaults).

Imports: the standard library only. Imported by every other layer. A new field goes in :mod:`.schema`; a rule
that makes a configuration invalid in the module of :mod:`.rules` whose concern it is.

The names below are re-exported for the old ``estimator.config`` module's users.
"""

from __future__ import annotations

from .load import config_from_dict, load_config, parse_text, path_kind, read_text_file, too_deep, with_fields
from .rules import interleaving_problem, not_modelled, validate

__all__ = ["config_from_dict", "interleaving_problem", "load_config", "not_modelled", "parse_text", "path_kind",
           "read_text_file", "too_deep", "validate", "with_fields"]
