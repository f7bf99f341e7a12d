"""The bounds a graph file is parsed within, shared by every parser of spec text.

:mod:`runtime.spec._parse` checks JSON and TOML text and the parsed builtins;
:mod:`runtime.spec._yaml` (imported only when YAML is read) hooks PyYAML's loader. Both
refuse with :class:`Refused`, which the parser turns into a :class:`SpecError`.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "MAX_INT_DIGITS",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_DEPTH",
    "MAX_SPEC_VALUES",
    "Refused",
    "mark_text",
]

#: Largest graph file (or text) accepted, in bytes (UTF-8), checked before parsing.
MAX_SPEC_BYTES: Final = 1_048_576
#: Deepest nesting of mappings and lists in a spec (the schema itself needs 4).
MAX_SPEC_DEPTH: Final = 64
#: Bound on the values in a parsed spec, counted with repetition.
MAX_SPEC_VALUES: Final = 1_000_000
#: Longest integer literal accepted (64-bit integers have at most 20 digits).
MAX_INT_DIGITS: Final = 20


class Refused(Exception):
    """A parser hook refused the text; ``where`` locates it if known."""

    def __init__(self, reason: str, where: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.where = where


def mark_text(mark: Any) -> str:
    """A parser's 0-based line/column mark as the 1-based text a refusal shows."""
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
