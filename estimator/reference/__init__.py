"""Layer 5, ``reference``: other people's numbers, reproduced.

- :mod:`.theoretical`: the seeds' API (``estimate_training_memory``, ``format_training_memory_estimate``) over three
  formulas: this estimator's, Megatron-LM's and Megatron-Bridge's;
- :mod:`.upstream`: the "Theoretical memory footprints" Megatron-LM and Megatron-Bridge print, as pure functions;
- :mod:`.results`: the result types both return.

Imports: ``config``, ``model``, ``memory``. Imported by ``cli`` and the package's public API.
"""
