"""The model catalog's data: the Hugging Face ``config.json`` of popular open models, by Hub id, offline.

One JSON file per model lies beside this module, named ``<org>--<name>.json`` after the Hub id, with:

- ``hf_id``: the Hugging Face Hub id the configuration belongs to;
- ``family``: the model family (Llama 3.1, Qwen3-MoE, DeepSeek-V3, ...), for grouping;
- ``source``: where the configuration was read, as ``repo`` @ ``commit`` : ``path`` of a public repository that
  carries it, ``copy`` (``file``: the repository vendors the ``config.json`` itself; ``quoted``: a document
  quotes it; ``python-dict``: a tool's preset holds it as a Python dict, ``locator`` saying which), the
  ``dropped_keys`` that belong to that tool and not to the model, and a ``note``;
- ``published_parameters`` (optional): a published parameter count: ``total`` (an exact integer, or a
  rounded text such as ``"671B"``), ``of`` (the Hub id it was published for, where a sibling with the same
  shapes stands in), ``kind`` (``safetensors``: the Hub API's total; ``keras-hub``: a KerasHub preset's
  ``params``; ``model-card``: the owner's README; ``checkpoint``: the checkpoint's tensor elements as a
  conversion round trip counted them), ``source``, ``excludes`` (``["mtp"]`` where the figure
  leaves out multi-token-prediction layers, ``["embeddings"]`` where it leaves out the word embedding and the
  output layer), ``mtp_layers`` (where the figure counts that many MTP layers the
  ``config.json`` does not state: the checkpoint's ``mtp.*`` tensors), ``vision_parameters`` (where the figure
  counts a vision encoder and projector the language-model estimate leaves out: their count by hand, held by a
  test) and a ``note``;
- ``config``: the configuration, every key and value exactly as published.

:func:`get` resolves an id (case-insensitive); an id that differs from a catalogued one only by its tuning
suffix (``-Instruct``, ``-Base``, ``-it``, ``-Chat``) resolves to that sibling, whose ``config.json`` has the same
architecture (:func:`resolve` also returns the note saying so); for an unknown one it raises
:class:`ConfigError` naming the closest ids (:mod:`difflib`). Nothing is downloaded. :mod:`estimator.catalog` imports each configuration and
says which ones the estimator can count, and why the others are refused.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ...config import yamlio
from ...config.errors import ConfigError, Problem

__all__ = ["CatalogEntry", "closest", "entries", "get", "ids", "resolve", "sibling_key"]

DIRECTORY = Path(__file__).resolve().parent
#: Suggestions offered for an unknown id, and how alike (difflib ratio, 0..1) an id must be to be offered.
SUGGESTIONS, CUTOFF = 5, 0.5
#: Tuning suffixes that leave the architecture as it is: an id differing only by one of them is a sibling.
TUNING_SUFFIXES = ("-instruct", "-base", "-it", "-chat")


@dataclass(frozen=True)
class CatalogEntry:
    """One catalog model as stored; :meth:`config` returns a fresh copy of its ``config.json`` dict."""

    hf_id: str
    family: str
    source: dict
    published: dict | None
    _config: dict

    def config(self) -> dict:
        return copy.deepcopy(self._config)

    def source_text(self) -> str:
        """``repo @ commit : path`` with the locator inside the file, if any."""
        s = self.source
        text = f"{s['repo']} @ {s['commit']} : {s['path']}"
        return text + (f", {s['locator']}" if s.get("locator") else "")

    def to_dict(self) -> dict:
        return {"hf_id": self.hf_id, "family": self.family, "source": copy.deepcopy(self.source),
                "published_parameters": copy.deepcopy(self.published), "config": self.config()}


@lru_cache(maxsize=1)
def _load() -> dict[str, CatalogEntry]:
    out: dict[str, CatalogEntry] = {}
    for path in sorted(DIRECTORY.glob("*.json")):
        data = yamlio.load_json(path.read_text(encoding="utf-8"))   # the readers' limits: size, depth, duplicates
        e = CatalogEntry(data["hf_id"], data["family"], data["source"], data.get("published_parameters"),
                         data["config"])
        out[e.hf_id.lower()] = e
    return out


def entries() -> list[CatalogEntry]:
    """Every catalog model, sorted by Hub id (case-insensitive)."""
    return [e for _, e in sorted(_load().items())]


def ids() -> list[str]:
    """The Hub ids of the catalog, sorted (case-insensitive)."""
    return [e.hf_id for e in entries()]


def closest(text: str, n: int = SUGGESTIONS) -> list[str]:
    """The catalog ids most like ``text``, best first, comparing the whole id and its name after the org."""
    q = text.strip().lower()
    scored = []
    for hf_id in ids():
        low = hf_id.lower()
        name = low.split("/", 1)[-1]
        ratio = max(difflib.SequenceMatcher(None, q, low).ratio(),
                    difflib.SequenceMatcher(None, q.split("/", 1)[-1], name).ratio())
        if ratio >= CUTOFF:
            scored.append((-ratio, hf_id))
    return [hf_id for _, hf_id in sorted(scored)[:n]]


def sibling_key(hf_id: str) -> str:
    """The id lower-cased without one trailing tuning suffix: ``Qwen/Qwen2.5-7B-Instruct`` -> ``qwen/qwen2.5-7b``."""
    low = str(hf_id).strip().lower()
    for suffix in TUNING_SUFFIXES:
        if low.endswith(suffix) and "/" in low[:-len(suffix)]:
            return low[:-len(suffix)]
    return low


@lru_cache(maxsize=1)
def _siblings() -> dict[str, list[CatalogEntry]]:
    out: dict[str, list[CatalogEntry]] = {}
    for key, e in sorted(_load().items()):
        out.setdefault(sibling_key(key), []).append(e)
    return out


def resolve(hf_id: str) -> tuple[CatalogEntry, str | None]:
    """(entry, None) for a catalogued id (case-insensitive); (the sibling's entry, a note) for an id that differs
    from a catalogued one only by -Instruct / -Base / -it / -Chat (the id without a suffix first);
    :class:`ConfigError` with the closest ids otherwise."""
    entry = _load().get(str(hf_id).strip().lower())
    if entry is not None:
        return entry, None
    family = _siblings().get(sibling_key(hf_id))
    if family:
        entry = min(family, key=lambda e: (sibling_key(e.hf_id) != e.hf_id.lower(), e.hf_id.lower()))
        return entry, (f"using '{entry.hf_id}' for '{str(hf_id).strip()}': the catalog has this sibling, whose "
                       "id differs only by its tuning suffix (-Instruct / -Base / -it / -Chat), with the same "
                       "architecture")
    near = closest(str(hf_id))
    hint = f"closest: {', '.join(near)}" if near else "`python -m estimator catalog` lists them"
    raise ConfigError(Problem("hf", hf_id, f"'{hf_id}' is not in the model catalog ({len(_load())} models; "
                              f"{hint}); this tool never downloads anything: for another model pass the "
                              "path of its config.json (or the directory holding it)"))


def get(hf_id: str) -> CatalogEntry:
    """The catalog model of a Hub id (case-insensitive) or of its sibling (see :func:`resolve`);
    :class:`ConfigError` with the closest ids otherwise."""
    return resolve(hf_id)[0]

