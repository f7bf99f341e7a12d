"""Loading GraphSpecs from dicts and from TOML, YAML and JSON text or files.

One schema for every format: the text is parsed to builtins, then converted with
``msgspec.convert`` so a type error names the field; every failure is a
:class:`SpecError` (never a raw msgspec, YAML or TOML exception).
"""

from __future__ import annotations

import errno
import os
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal

import msgspec

from .._errors import SpecError
from ._locate import with_places
from ._model import GraphSpec
from ._parse import MAX_SPEC_BYTES, check_values, parse_text
from ._types import spec_error as _spec_error
from ._validate import validate_graph

__all__ = ["SpecFormat", "graph_from_dict", "load_graph", "parse_graph"]

SpecFormat = Literal["toml", "yaml", "json"]

_SUFFIXES: dict[str, SpecFormat] = {
    ".toml": "toml",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
}


def graph_from_dict(data: Any, *, validate: bool = True, recorded: bool = False) -> GraphSpec:
    """Build a GraphSpec from builtins (as ``graph_to_dict`` gives); validate it unless told.
    ``recorded``: the graph of a run's log, validated without the lint checks
    (``validate_graph(lint=False)``: a run started before one came in goes on).

    Strict types: a string is never coerced to a number. Unknown fields are errors.
    Raises :class:`SpecError` (a type or shape problem, with its path) or
    :class:`SpecErrors` (validation problems).
    """
    if not isinstance(data, dict):
        raise SpecError("", f"a graph spec must be a mapping, got {type(data).__name__}")
    check_values(data)
    try:
        graph = msgspec.convert(data, GraphSpec)
    except msgspec.ValidationError as exc:
        raise _spec_error(exc, GraphSpec, data) from exc
    if validate:
        validate_graph(graph, lint=not recorded)
    return graph


def parse_graph(
    text: str | bytes, format: SpecFormat, *, validate: bool = True, source: str = "<string>"
) -> GraphSpec:
    """Parse spec text in ``format`` (``"toml"``, ``"yaml"`` or ``"json"``).

    ``source`` names the text in error messages. Raises :class:`SpecError` for a syntax
    error (path empty, line and column in the reason), a type problem (with its path)
    or, if ``validate``, :class:`SpecErrors`; a problem with a field has the line and
    column where the text writes it at the end of its reason.
    """
    data = parse_text(text, format, source=source)
    try:
        return graph_from_dict(data, validate=validate)
    except SpecError as exc:
        placed = with_places(exc, text, format)
        placed.add_note(f"in {source}")
        if placed is exc:
            raise
        raise placed.with_traceback(exc.__traceback__) from exc.__cause__


def _unreadable(file: Path, exc: OSError) -> str:
    """Why a file could not be read, in a few words; for a loop of symbolic links, the
    links followed until one repeats (``a.yaml -> b.yaml -> a.yaml``)."""
    if exc.errno != errno.ELOOP:
        return exc.strerror or str(exc)
    chain, seen, current = [str(file)], {os.path.abspath(file)}, file
    with suppress(OSError):  # a link changed meanwhile: the short answer
        while current.is_symlink() and len(chain) <= 40:
            current = current.parent / current.readlink()
            chain.append(str(current))
            if os.path.abspath(current) in seen:
                return f"its symbolic links form a loop: {' -> '.join(chain)}"
            seen.add(os.path.abspath(current))
    return "a loop of symbolic links on its path"


def load_graph(path: str | Path, *, validate: bool = True) -> GraphSpec:
    """Load a spec file; the format follows the suffix (.toml, .yaml/.yml, .json).

    Blocks on reading the file (call it from a worker thread in async code if the file
    may be slow). Raises :class:`SpecError` for an unknown suffix, an unreadable file or
    any problem ``parse_graph`` reports.
    """
    file = Path(path)
    format = _SUFFIXES.get(file.suffix.lower())
    if format is None:
        raise SpecError(
            "", f"{file}: unknown spec file suffix {file.suffix!r} (.toml, .yaml, .yml, .json)"
        )
    try:
        size = file.stat().st_size
        if size > MAX_SPEC_BYTES:  # before reading, let alone parsing
            raise SpecError(
                "", f"{file}: {size} bytes, more than a spec may hold ({MAX_SPEC_BYTES})"
            )
        with file.open("rb") as stream:
            text = stream.read(MAX_SPEC_BYTES + 1)  # the file may grow meanwhile
    except OSError as exc:
        raise SpecError("", f"{file}: cannot read: {_unreadable(file, exc)}") from exc
    return parse_graph(text, format, validate=validate, source=str(file))
