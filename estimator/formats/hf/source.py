"""Where a ``config.json`` comes from: a file, a model directory holding one, a catalog Hub id (the offline
catalog's copy, never a download) or a dict given to the Python API; and the note for an id that resolves to a
catalogued sibling (another tuning suffix)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...config import yamlio
from ...config.errors import ConfigError, Problem, clip


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def read_hf_config(source) -> dict:
    """The parsed ``config.json`` of a file, a model directory, a catalog Hub id or a dict (returned as is)."""
    if isinstance(source, dict):       # (only the keys known are read, in linear time: no size limit needed)
        from ...config.load import too_deep
        if too_deep(source):
            raise ConfigError(Problem("hf", None, f"the config.json nests deeper than {yamlio.MAX_DEPTH} levels"))
        return source
    if not isinstance(source, (str, os.PathLike)) or not isinstance(os.fspath(source), str):
        raise ConfigError(Problem("hf", type(source).__name__,
                                  "expected a config.json path, a model directory or a dict"))
    from ...config.load import path_kind, read_text_file
    path = Path(source)
    kind = path_kind(path)
    if kind is None:
        text = clip(os.fspath(source))
        if _HUB_ID.match(text) and not text.endswith(".json"):
            from ..hf_catalog import get         # a Hub id: the offline catalog's copy, never a download
            return get(text).config()
        raise ConfigError(Problem("hf", text, f"file not found: {text}"))
    if kind == "dir":
        path = path / "config.json"
        if path_kind(path) != "file":
            raise ConfigError(Problem("hf", os.fspath(source), f"directory {source} holds no config.json"))
    try:
        data = yamlio.load_json(read_text_file(path, "hf"))
    except yamlio.YamlError as exc:
        raise ConfigError(Problem("hf", clip(os.fspath(path)), f"invalid JSON in {clip(os.fspath(path))}: "
                                  f"{exc}")) from None
    if not isinstance(data, dict):
        raise ConfigError(Problem("hf", os.fspath(path), "a config.json must hold a JSON object"))
    return data


def sibling_note(source) -> str | None:
    """The note for a Hub id that resolves to a catalogued sibling (another tuning suffix), else None."""
    if not isinstance(source, str) or not _HUB_ID.match(source.strip()) or source.strip().endswith(".json"):
        return None
    from ...config.load import path_kind
    if path_kind(Path(source)) is not None:          # a local file or directory wins
        return None
    from ..hf_catalog import resolve
    try:
        return resolve(source)[1]
    except ConfigError:
        return None
