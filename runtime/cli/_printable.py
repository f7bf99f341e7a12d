"""Text from a run (a model's answer, a node's output, an error's message) shown in a
terminal as text, never as terminal commands.

A run's values and errors may hold control characters (an escape sequence that recolours,
retitles or clears the terminal, a carriage return that hides what came before on its
line). Written to a terminal, each is shown as its ``\\uXXXX`` escape instead, which is
also what it would be inside a JSON string, so JSON output stays valid JSON. Output to a
pipe or a file (a program reading it, ``export`` to a file) is written unchanged.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

__all__ = ["PrintableStream", "printable"]

# C0 controls but tab and newline, DEL, and the C1 controls (0x9b is a CSI of its own).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str) -> str:
    """``text`` with its control characters (but tab and newline) as ``\\uXXXX``."""
    return _CONTROL.sub(_escaped, text)


class PrintableStream:
    """A text stream that writes through ``inner``, with :func:`printable` applied."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(printable(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
