"""Layer 8, ``web``: the calculator page's Python side, run in the browser under Pyodide.

- :mod:`.protocol`: the entry point, :func:`handle`: one JSON request in, one strict-JSON answer out (its docstring
  lists the requests); :func:`boot_data` for the build, :func:`warm` for the memory snapshot;
- :mod:`.state`: the form's state, the configuration it describes (a preset, a catalog model by Hub id) and the GPU it
  names; :mod:`.checks`: the shape of requests; :mod:`.form`: the quick controls and labels; :mod:`.models`: the Model
  box (a preset or a Hub id picked by name, the closest names for an unknown one);
- the panels: :mod:`.view` (the estimate as the page draws it), :mod:`.layouts` (the layout search),
  :mod:`.plan` ("Make it fit" and the sweeps), :mod:`.charts` (timeline and breakdown), :mod:`.compare` (pinned
  configurations side by side).

Imports: every layer below (``config`` to ``plan``). Imported by the page's worker (``import estimator.web``) and
the site build (``hooks/runtime.py``). A new calculator panel is a new module here, answered by a new ``op`` in
:mod:`.protocol`.
"""

from __future__ import annotations

from .layouts import find_layouts, layout_state
from .protocol import DEFAULT_PRESET, advise, boot_data, compute, handle, import_text, warm
from .state import UNSET, merged_config, parse_value, schema

__all__ = ["DEFAULT_PRESET", "UNSET", "advise", "boot_data", "compute", "find_layouts", "handle", "import_text",
           "layout_state", "merged_config", "parse_value", "schema", "warm"]
