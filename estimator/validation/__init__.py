"""Layer 7, ``validation``: estimates held against measured runs, one module per data file under ``validation/``.

- :mod:`.calibration`: the runs the model was developed against (``measured.yaml``) and the shared records;
- :mod:`.megatron_ci`: Megatron-LM's functional-test memory goldens (``megatron_ci.yaml``), held out;
- :mod:`.project_runs`: the project's own GPU runs (``project_runs.yaml``), predicted before they were measured;
- :mod:`.known_to_run`: Megatron-Bridge recipes that run on the GPUs they name (``known_to_run.yaml``);
- :mod:`.bands`: the worst measured under-estimate per feature class over the sources above, the fit verdict's
  error bands (stored in ``estimator/formats/error_bands_data.py``).

Imports: ``config``, ``model``, ``memory``, ``formats``. Imported by the tests, ``benchmarks/accuracy.py`` and the
site's Validation page (``hooks/``). A new source of measurements is a new module here beside its data file.

The names below are re-exported for the old ``estimator.validation`` module's users.
"""

from __future__ import annotations

from .calibration import (CALIBRATION_SOURCES, Comparison, Stats, case_config, compare_case, default_cases_path,
                          load_cases, stats, summary)

__all__ = ["CALIBRATION_SOURCES", "Comparison", "Stats", "case_config", "compare_case", "default_cases_path",
           "load_cases", "stats", "summary"]
