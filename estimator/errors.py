"""The exception hierarchy of the estimator.

Every error the package raises on purpose is an :class:`EstimatorError`. Each class also
subclasses the builtin it resembles, so ``except ValueError`` keeps working for callers that
do not know this package.

- :class:`ConfigError` (``ValueError``): the configuration is invalid. ``problems`` holds every
  problem found, each naming the field, the value and the rule.
- :class:`UnsupportedError` (``ValueError``): valid input that the estimator cannot model honestly
  (an unknown Hugging Face architecture, a key that would change the count but is not understood).
- :class:`PresetNotFoundError` (``LookupError``): no preset of that name.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConfigError", "EstimatorError", "PresetNotFoundError", "Problem", "UnsupportedError"]


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
        value = self.value if isinstance(self.value, (int, float, str, bool, type(None), list)) else repr(self.value)
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
