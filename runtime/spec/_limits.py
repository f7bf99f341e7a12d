"""The bounds text is parsed within, shared by every parser of spec text and data.

:mod:`runtime.spec._parse` checks JSON and TOML text and the parsed builtins;
:mod:`runtime.spec._yaml` (imported only when YAML is read) hooks PyYAML's loader. Both
refuse with :class:`Refused`, which the parser turns into a :class:`SpecError` (a graph
file) or a ValueError (data: ``read_data``). A graph file is read within
:data:`SPEC_LIMITS`; data (a run's input, a model script) within :data:`DATA_LIMITS`,
which keep the rules and drop the bounds only a graph spec needs.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = [
    "DATA_LIMITS",
    "MAX_DATA_DEPTH",
    "MAX_DATA_INT_DIGITS",
    "MAX_INT_DIGITS",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_DEPTH",
    "MAX_SPEC_VALUES",
    "SPEC_LIMITS",
    "Limits",
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

#: Deepest nesting in data: past the 100 levels a run's memory value may have below its
#: key, and well within what the parsers read without running out of stack.
MAX_DATA_DEPTH: Final = 128
#: Longest integer literal in data: Python turns at most 4300 digits into an int, and a
#: run's log writes and reads back no more (4299 and a sign).
MAX_DATA_INT_DIGITS: Final = 4299


class Limits(msgspec.Struct, frozen=True):
    """The bounds one kind of text is read within."""

    #: What the messages call the text: "a spec", "data".
    noun: str
    #: Most bytes (UTF-8), checked before parsing; None: no bound.
    max_bytes: int | None
    #: Deepest nesting of mappings and lists.
    max_depth: int
    #: Longest integer literal.
    max_int_digits: int
    #: Most values, counted with repetition (a YAML alias bomb is tiny as text); None: no
    #: bound, and a list or mapping met again (a YAML alias) is not walked again.
    max_values: int | None
    #: Whether integers must fit in 64 bits.
    int64: bool


#: A graph file: untrusted, small, and read into a schema of 64-bit numbers.
SPEC_LIMITS: Final = Limits(
    noun="a spec",
    max_bytes=MAX_SPEC_BYTES,
    max_depth=MAX_SPEC_DEPTH,
    max_int_digits=MAX_INT_DIGITS,
    max_values=MAX_SPEC_VALUES,
    int64=True,
)
#: Data (a run's input, a script): the same rules, the bounds of what a run's log holds.
DATA_LIMITS: Final = Limits(
    noun="data",
    max_bytes=None,
    max_depth=MAX_DATA_DEPTH,
    max_int_digits=MAX_DATA_INT_DIGITS,
    max_values=None,
    int64=False,
)


class Refused(Exception):
    """A parser hook refused the text; ``where`` locates it if known."""

    def __init__(self, reason: str, where: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.where = where


def mark_text(mark: Any) -> str:
    """A parser's 0-based line/column mark as the 1-based text a refusal shows."""
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
