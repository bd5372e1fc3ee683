"""Layer 8, ``cli``: the command line, ``python -m estimator`` (console script ``megatron-memory``).

- :mod:`.commands`: the parser (every configuration field is a flag, from :mod:`estimator.config.schema`) and the
  sub-commands ``estimate``, ``from-hf``, ``megatron-args``, ``presets``, ``gpus``, ``catalog``;
- :mod:`.search`: the ``search`` sub-command.

Imports: every layer below. Imported by ``estimator.__main__`` and the console script. A new sub-command goes in
:mod:`.commands` (or a module of its own beside :mod:`.search`).
"""

from __future__ import annotations

from .commands import build_parser, main

__all__ = ["build_parser", "main"]
