"""Where in a graph file's text a field is written, for the errors that name the field.

A problem with a field (a type error, a validation error) is found in the builtins the
text was parsed into, which keep no positions; when one is raised for a file,
:func:`with_places` looks the path (``nodes[1].retry.max_attempts``) up in the text and
adds its line and column to the reason: ``... (line 10, column 7)``. YAML and JSON are
composed again with PyYAML's node tree (which keeps every position; JSON is YAML once its
tabs are spaces); TOML, which ``tomllib`` reads without positions, is scanned line by line
for its table headers and keys. It runs only when there is an error to place, and a path
it cannot follow is placed at the deepest part of it found, or not at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .._errors import SpecError, SpecErrors
from ._limits import SPEC_LIMITS

__all__ = ["with_places"]

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_Place = tuple[int, int]  # 1-based line and column


def with_places(exc: SpecError, text: str | bytes, format: str) -> SpecError:
    """``exc`` with the line and column of each problem's field added to its reason (a new
    exception), or ``exc`` itself when none can be placed."""
    errors = list(exc.errors) if isinstance(exc, SpecErrors) else [exc]
    if not any(error.path for error in errors):
        return exc
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        find = _finder(text.removeprefix("\ufeff"), format)
        places = [find(_parts(error.path)) if error.path else None for error in errors]
    except Exception:  # the error stays as it was: placing it is only a help
        return exc
    if not any(places):
        return exc
    placed = [
        SpecError(error.path, f"{error.reason} (line {place[0]}, column {place[1]})")
        if place
        else error
        for error, place in zip(errors, places, strict=True)
    ]
    return SpecErrors(placed) if isinstance(exc, SpecErrors) else placed[0]


def _parts(path: str) -> tuple[str | int, ...]:
    return tuple(int(index) if index else name for name, index in _PART.findall(path))


def _finder(text: str, format: str) -> Callable[[tuple[str | int, ...]], _Place | None]:
    if format == "toml":
        places = _toml_places(text)

        def in_toml(parts: tuple[str | int, ...]) -> _Place | None:
            for end in range(len(parts), 0, -1):
                if parts[:end] in places:
                    return places[parts[:end]]
            return None

        return in_toml
    from ._yaml import compose_yaml  # PyYAML is imported when an error is placed

    root = compose_yaml(text.replace("\t", " ") if format == "json" else text, SPEC_LIMITS)
    return lambda parts: _yaml_place(root, parts)


def _yaml_place(root: Any, parts: tuple[str | int, ...]) -> _Place | None:
    """The place of the deepest part of ``parts`` found: a mapping's key (where the field
    is written), a list's item; None when not even the first part is there."""
    node, mark = root, None
    for part in parts:
        entries: Any = node.value if node is not None else None
        if node is not None and node.id == "mapping" and isinstance(part, str):
            found = [(k, v) for k, v in entries if k.id == "scalar" and k.value == part]
            if not found:
                break
            key, node = found[-1]
            mark = key.start_mark
        elif node is not None and node.id == "sequence" and isinstance(part, int):
            if part >= len(entries):
                break
            node = entries[part]
            mark = node.start_mark
        else:
            break
    return (mark.line + 1, mark.column + 1) if mark is not None else None


# --- TOML ----------------------------------------------------------------------------

_NAME = r"(?:[A-Za-z0-9_-]+|\"[^\"\n]*\"|'[^'\n]*')"
_DOTTED = rf"{_NAME}(?:\s*\.\s*{_NAME})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]")
_KEY = re.compile(rf"^\s*({_DOTTED})\s*=")
_INLINE_KEY = re.compile(rf"({_NAME})\s*=(?!=)")
_SPLIT = re.compile(rf"{_NAME}")


def _names(dotted: str) -> tuple[str, ...]:
    return tuple(name.strip("\"'") for name in _SPLIT.findall(dotted))


def _toml_places(text: str) -> dict[tuple[str | int, ...], _Place]:
    """The place of every table header and key of ``text`` by its path, the items of
    arrays of tables numbered as the parser numbers them (``("nodes", 2, "retry")``);
    keys of an inline table on the key's line too, one level deep."""
    places: dict[tuple[str | int, ...], _Place] = {}
    counts: dict[tuple[str | int, ...], int] = {}  # an array of tables -> its last index
    table: tuple[str | int, ...] = ()
    open_quote = ""  # inside a multi-line string: its quotes
    for number, line in enumerate(text.split("\n"), start=1):
        if open_quote:
            if line.count(open_quote) % 2:
                open_quote = ""
            continue
        header = _HEADER.match(line)
        if header:
            names = _names(header.group(2))
            resolved: tuple[str | int, ...] = ()
            for name in names[:-1]:
                resolved += (name,)
                if resolved in counts:  # a table inside the array's current item
                    resolved += (counts[resolved],)
            resolved += (names[-1],)
            if header.group(1) == "[[":
                counts[resolved] = counts.get(resolved, -1) + 1
                resolved += (counts[resolved],)
            table = resolved
            places.setdefault(table, (number, header.start(1) + 1))
            continue
        key = _KEY.match(line)
        if not key:
            continue
        path = table + _names(key.group(1))
        places.setdefault(path, (number, key.start(1) + 1))
        rest = line[key.end() :]
        brace = rest.find("{")
        if brace >= 0:
            for inner in _INLINE_KEY.finditer(rest, brace):
                column = key.end() + inner.start(1) + 1
                places.setdefault((*path, *_names(inner.group(1))), (number, column))
        for quote in ('"""', "'''"):
            if rest.count(quote) % 2:
                open_quote = quote
    return places
