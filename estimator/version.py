"""The package's version: one place, read by the public API (``estimator.__version__``), the CLI's ``--version``
and the calculator's build data. Imports nothing, so every layer may read it."""

__version__ = "0.1.0"
