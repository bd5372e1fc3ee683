"""The exception hierarchy of the estimator.

Every error the package raises on purpose is an :class:`EstimatorError`. Each class also
subclasses the builtin it resembles, so ``except ValueError`` keeps working for callers that
do not know this package.

- :class:`ConfigError` (``ValueError``): the configuration is invalid. ``problems`` holds every
  problem found, each naming the field, the value and the rule.
- :class:`UnsupportedError` (``ValueError``): valid input that the estimator cannot model honestly
  (an unknown Hugging Face architecture, a key that would change the count but is not understood).
- :class:`PresetNotFoundError` (``LookupError``): no preset of that name.
- :class:`InputTypeError` (``TypeError``): a function of the public API was given an object of the wrong kind
  (``fit(None, ...)``, ``validate({...})``), which no configuration rule covers; the message says what it takes.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass

__all__ = ["ConfigError", "EstimatorError", "InputTypeError", "PresetNotFoundError", "Problem", "UnsupportedError",
           "clip", "n_gpus", "show", "wrong_type"]

#: Longest text :func:`show` returns for one value.
SHOW_CHARS = 80


class _ShortRepr(reprlib.Repr):
    """reprlib's bounded repr (depth, length), also for integers too long to print (Python refuses to
    convert an int of more than 4,300 digits to text)."""

    def repr_int(self, x, level):
        if x.bit_length() > 256:
            digits = int(x.bit_length() * math.log10(2)) + 1
            return f"<an integer of about {digits:,} digits>"
        return super().repr_int(x, level)


_REPR = _ShortRepr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, SHOW_CHARS, SHOW_CHARS, SHOW_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8


def show(value) -> str:
    """A value as error messages quote it: its repr, bounded in length and depth, and never raising (a
    100,000-deep list, a 5,000-digit integer or a megabyte of text give a short description)."""
    try:
        text = _REPR.repr(value)
    except Exception:       # a repr that fails is no reason to lose the error being reported
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS - 3] + "..."


def n_gpus(n) -> str:
    """A GPU count in words, singular or plural: '1 GPU', '8 GPUs', '1,024 GPUs'."""
    return f"{n:,} GPU" if n == 1 else (f"{n:,} GPUs" if isinstance(n, int) else f"{n} GPUs")


def clip(text: str, limit: int = 2 * SHOW_CHARS) -> str:
    """Text (a path, a name) as messages quote it, without quotes: at most ``limit`` characters, and a null
    byte shown as \\0."""
    text = text.replace("\0", "\\0")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _json_safe(value, depth: int = 0) -> bool:
    """True when ``value`` serialises to strict JSON as it is, compactly (small, finite, shallow)."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return value.bit_length() <= 256
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return len(value) <= 4 * SHOW_CHARS
    if isinstance(value, list) and depth == 0:
        return len(value) <= 10_000 and all(not isinstance(x, (list, dict)) and _json_safe(x, 1) for x in value)
    return False


class EstimatorError(Exception):
    """Base class of every error raised by ``estimator``."""


@dataclass(frozen=True)
class Problem:
    """One validation problem: the dotted field path, the offending value and the rule broken."""

    field: str
    value: object
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    def to_dict(self) -> dict:
        """Plain, strict-JSON data: a value that is not small, finite and shallow comes as :func:`show` text."""
        value = self.value if _json_safe(self.value) else show(self.value)
        return {"field": self.field, "value": value, "message": self.message}


class ConfigError(EstimatorError, ValueError):
    """The configuration is invalid; ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem("config", None, problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: tuple[Problem, ...] = tuple(problems)
        lines = [str(p) for p in self.problems]
        head = "invalid configuration" if len(lines) == 1 else f"invalid configuration ({len(lines)} problems)"
        super().__init__(head + ":\n  - " + "\n  - ".join(lines))

    def to_dict(self) -> dict:
        return {"error": "ConfigError", "problems": [p.to_dict() for p in self.problems]}


class UnsupportedError(EstimatorError, ValueError):
    """The input is well-formed but describes something the estimator cannot count honestly."""


class PresetNotFoundError(EstimatorError, LookupError):
    """No preset has that name."""


class InputTypeError(EstimatorError, TypeError):
    """A public function was given an object of the wrong kind (not a configuration problem: nothing to name but
    the argument); the message says what the function takes and what it got."""


def wrong_type(function: str, argument: str, wanted: str, got, hint: str = "") -> InputTypeError:
    """The :class:`InputTypeError` of ``function(argument=got)`` where ``wanted`` was expected."""
    return InputTypeError(f"{function}() takes {wanted} as {argument}, got {type(got).__name__} {show(got)}"
                          + (f"; {hint}" if hint else ""))
