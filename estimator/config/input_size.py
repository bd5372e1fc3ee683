"""How much input is read: one limit, checked on every surface before anything is parsed.

A configuration is a few kilobytes. The presets are at most 5 KB of YAML, the largest published ``config.json`` in
the model catalog 26 KB (Nemotron Super's per-block list), a ``pretrain_gpt.py`` launch script a few KB, and the
largest configuration the schema admits (two 10,000-entry layer lists, a 10,000-layer hybrid pattern and pipeline
layout, a TP-overlap YAML) about 100 KB. :data:`MAX_INPUT_BYTES`, 1 MiB, is ten times that. Without a limit a
48-75 MB hostile configuration took 0.6-2.4 GiB and 24-36 s before its error (the calculator's worker reached
2 GiB); at 1 MiB the slowest input found (a YAML flow list of half a million entries) takes 1 s to be refused.

The limit applies to configuration files, texts and dicts (:mod:`estimator.config.load`), Hugging Face
``config.json`` files and texts (:mod:`estimator.formats.hf`; a dict given to the Python API is read key by key,
in linear time), Megatron-LM argument texts and token lists and the files they name
(:mod:`estimator.formats.megatron_args`); a calculator request, which carries such a text JSON-escaped, may be
:data:`MAX_REQUEST_CHARS` (:mod:`estimator.web.protocol`). A text is measured in characters, a file in bytes, a dict
as the length of its JSON text (counted without writing it, stopping at the limit).
"""

from __future__ import annotations

import os

from .errors import Problem, clip

__all__ = ["MAX_INPUT_BYTES", "MAX_REQUEST_CHARS", "data_problem", "limit_text", "read_limited", "size_problem",
           "text_problem"]

#: Largest input read: a configuration, a config.json, a Megatron argument list or a file holding one (1 MiB).
MAX_INPUT_BYTES = 2 ** 20
#: Largest calculator request (8 MiB): room for a text of MAX_INPUT_BYTES characters after JSON escaping (a
#: control character takes six) besides the form's state.
MAX_REQUEST_CHARS = 8 * 2 ** 20


def limit_text(limit: int = MAX_INPUT_BYTES) -> str:
    """A limit in MiB, as messages state it: ``1 MiB``."""
    return f"{limit / 2 ** 20:g} MiB"


def _rule(unit: str, limit: int) -> str:
    """The limit broken, for the end of a message: ``the limit of 1 MiB (1,048,576 characters) on any input; ...``."""
    if limit == MAX_REQUEST_CHARS:
        return (f"the limit of {limit_text(limit)} ({limit:,} {unit}) on a calculator request, which carries at most "
                f"a {limit_text()} text")
    return f"the limit of {limit_text(limit)} ({limit:,} {unit}) on any input; a configuration is a few KB"


def size_problem(size: int, field: str, what: str = "the text", limit: int = MAX_INPUT_BYTES) -> Problem | None:
    """A :class:`Problem` naming ``field`` when a text of ``size`` characters is more than ``limit``, else None."""
    if size <= limit:
        return None
    return Problem(field, None, f"{what} is {size:,} characters, more than {_rule('characters', limit)}")


def text_problem(text: str, field: str, what: str = "the text", limit: int = MAX_INPUT_BYTES) -> Problem | None:
    """A :class:`Problem` naming ``field`` when ``text`` has more than ``limit`` characters, else None."""
    return size_problem(len(text), field, what, limit)


def read_limited(path: str | os.PathLike, field: str, limit: int = MAX_INPUT_BYTES) -> tuple[bytes, Problem | None]:
    """At most ``limit`` bytes of a file, and a :class:`Problem` naming ``field`` when it holds more (what is past
    the limit is never read: a named pipe or ``/dev/zero`` ends there too). OS errors propagate."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) <= limit:
        return data, None
    name = clip(os.fspath(path))
    return b"", Problem(field, name, f"{name} is larger than {_rule('bytes', limit)}")


def _json_length(data, stop: int) -> int:
    """The length of ``data`` written as compact JSON, about (strings without escapes), counted until it passes
    ``stop``; iterative, and bounded by ``stop`` even for a structure that contains itself."""
    total = 0
    stack = [data]
    while stack and total <= stop:
        obj = stack.pop()
        if isinstance(obj, str):
            total += len(obj) + 3                      # quotes and a separator
        elif isinstance(obj, bool) or obj is None:
            total += 5
        elif isinstance(obj, int):
            total += obj.bit_length() * 3 // 10 + 2    # its digits (log10 2 ~ 0.3) and a separator
        elif isinstance(obj, dict):
            total += 2
            for k, v in obj.items():
                stack.append(k)
                stack.append(v)
                if len(stack) > stop:                  # a dict of millions of entries: past the limit anyway
                    return stop + 1
        elif isinstance(obj, (list, tuple)):
            total += 2
            if len(obj) > stop:
                return stop + 1
            stack.extend(obj)
        else:                                          # floats and anything else JSON would write briefly
            total += 8
    return total


def data_problem(data, field: str, what: str = "the configuration",
                 limit: int = MAX_INPUT_BYTES) -> Problem | None:
    """A :class:`Problem` naming ``field`` when plain data (a dict from Python) would be more than ``limit``
    characters of JSON, else None."""
    if _json_length(data, limit) <= limit:
        return None
    return Problem(field, None, f"{what}, written as JSON, is more than {_rule('characters', limit)}")
