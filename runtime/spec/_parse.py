"""Parsing text into builtins, defensively: a graph file, and data, are untrusted input.

One parser for graph files (:func:`parse_text`, :func:`check_values`) and for data, a run's
input or a model script (:func:`read_data`): the same rules, each within its
:class:`~runtime.spec._limits.Limits`. Before a parser sees the text its size is checked
(a graph file's) and its UTF-8; the parsers are given hooks that refuse duplicate keys
(YAML, JSON; TOML refuses them itself), integers of too many digits and nesting too deep,
each with the line and column. After parsing, :func:`check_values` walks the builtins
once, without recursion: no NaN or infinity, no nesting too deep and, in a graph spec, no
integer outside 64 bits and at most :data:`MAX_SPEC_VALUES` values counted with
repetition (a YAML alias bomb is tiny as text), each refusal naming the path.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from functools import partial
from typing import Any, Literal

from .._errors import SpecError
from ._limits import (
    DATA_LIMITS,
    MAX_INT_DIGITS,
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    MAX_SPEC_VALUES,
    SPEC_LIMITS,
    Limits,
    Refused,
)

__all__ = [
    "MAX_INT_DIGITS",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_DEPTH",
    "MAX_SPEC_VALUES",
    "DataFormat",
    "check_values",
    "parse_text",
    "read_data",
]

#: The formats text is read in.
DataFormat = Literal["toml", "yaml", "json"]

_LABELS = {"toml": "TOML", "yaml": "YAML", "json": "JSON"}
_INT64 = (-(2**63), 2**64 - 1)


def _at(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


# --- nesting of bracketed text (JSON, TOML) ------------------------------------------

_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_TOML_TOKENS = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*'
    r"|^[ \t]*\[\[?[^\]\n]*\]\]?|[\[\]{}]",
    re.MULTILINE,
)


def _check_brackets(text: str, tokens: re.Pattern[str], max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth``, before a recursive parser meets it."""
    depth = 0
    for match in tokens.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
        elif token in "]}":
            depth = max(0, depth - 1)
        elif depth > 0 and token.lstrip().startswith("["):  # not a table header inside [ ]
            depth += token.count("[") - token.count("]")
        if depth > max_depth:
            raise Refused(f"nested deeper than {max_depth} levels", _at(text, match.start()))


# --- JSON ------------------------------------------------------------------------------

_JSON_KEYS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:]')


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise Refused(f"duplicate key {key!r}")
        result[key] = value
    return result


def _json_duplicate(text: str) -> Refused | None:
    """The first key (in the text's order) that one object holds twice, with its place:
    the decoder's hook is not told where it is. The text is JSON but for that key."""
    objects: list[set[str] | None] = []  # the keys of each open object; None: a list
    before, start = "", 0
    for match in _JSON_KEYS.finditer(text):
        token = match.group()
        if token in ("{", "["):
            objects.append(set() if token == "{" else None)
        elif token in ("}", "]"):
            if objects:
                objects.pop()
        elif token == ":" and objects and (keys := objects[-1]) is not None:
            key = json.loads(before)
            if key in keys:
                return Refused(f"duplicate key {key!r}", _at(text, start))
            keys.add(key)
        before, start = token, match.start()
    return None


def _json_int(max_digits: int, digits: str) -> int:
    if len(digits.lstrip("-")) > max_digits:
        raise Refused(f"integer of {len(digits)} digits (at most {max_digits})", digits)
    return int(digits)


def _json_constant(name: str) -> float:
    raise Refused(f"{name} is not a finite number (JSON has no NaN or infinity)")


def _parse_json(text: str, limits: Limits) -> Any:
    _check_brackets(text, _JSON_TOKENS, limits.max_depth)
    try:
        return json.loads(
            text,
            object_pairs_hook=_json_pairs,
            parse_int=partial(_json_int, limits.max_int_digits),
            parse_constant=_json_constant,
        )
    except Refused as refused:
        if refused.reason.startswith("duplicate key"):
            raise _json_duplicate(text) or refused from None
        # The hooks are not told where they are: locate the digits in the text.
        found = text.find(refused.where) if refused.where else -1
        raise Refused(refused.reason, _at(text, found) if found >= 0 else "") from None


# --- TOML ------------------------------------------------------------------------------


def _parse_toml(text: str, limits: Limits) -> Any:
    _check_brackets(text, _TOML_TOKENS, limits.max_depth)
    try:
        return tomllib.loads(text)
    except ValueError as exc:
        if isinstance(exc, tomllib.TOMLDecodeError):
            raise
        # tomllib has no integer hook: a literal past Python's digit limit lands here.
        digits = limits.max_int_digits
        match = re.search(r"(?<![\w.\"'])[-+]?\d[\d_]{" + str(digits) + ",}", text)
        where = _at(text, match.start()) if match else ""
        raise Refused(f"integer of too many digits (at most {digits})", where) from exc


_TOML_AT = re.compile(r"\(at line (\d+), column \d+\)")


def _toml_key(text: str, exc: tomllib.TOMLDecodeError) -> str:
    """Name the key of a "Cannot overwrite/declare" error (tomllib gives only the line)."""
    match = _TOML_AT.search(str(exc))
    if "Cannot" not in str(exc) or match is None:
        return ""
    lines = text.split("\n")
    number = int(match.group(1))
    if not 0 < number <= len(lines):
        return ""
    line = lines[number - 1].strip()
    key = line.strip("[]").strip() if line.startswith("[") else line.partition("=")[0].strip()
    return f": duplicate key {key!r}" if key else ""


# --- entry points ----------------------------------------------------------------------


class _Unreadable(Exception):
    """Text that cannot be read; ``label`` names the format for a problem in its syntax."""

    def __init__(self, reason: str, label: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.label = label


def _parse(text: str | bytes, format: DataFormat, limits: Limits) -> Any:
    """Text to builtins within ``limits``; _Unreadable saying why not (where it can, with
    the line and column). The format is one of DataFormat."""
    most = limits.max_bytes
    if most is not None:
        size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
        if size > most:
            raise _Unreadable(f"{size} bytes, more than {limits.noun} may hold ({most})")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Unreadable(f"not UTF-8 text: {exc}") from exc
    text = text.removeprefix("\ufeff")  # a byte order mark, as some editors write one
    label = _LABELS[format]
    try:
        if format == "toml":
            return _parse_toml(text, limits)
        if format == "yaml":
            from ._yaml import parse_yaml  # PyYAML is imported when YAML is read

            return parse_yaml(text, limits)
        return _parse_json(text, limits)
    except Refused as refused:
        where = f" ({refused.where})" if refused.where else ""
        raise _Unreadable(f"{refused.reason}{where}", label) from None
    except tomllib.TOMLDecodeError as exc:
        raise _Unreadable(f"{exc}{_toml_key(text, exc)}", label) from exc
    except (RecursionError, ValueError) as exc:  # JSON's syntax; what a parser lets through
        raise _Unreadable(" ".join(str(exc).split()), label) from exc  # on one line


def parse_text(text: str | bytes, format: DataFormat, *, source: str) -> Any:
    """Spec text to builtins; SpecError (path empty, line and column in the reason)."""
    if format not in _LABELS:
        raise SpecError("", f"unknown spec format {format!r} (toml, yaml or json)")
    try:
        return _parse(text, format, SPEC_LIMITS)
    except _Unreadable as exc:
        invalid = f"invalid {exc.label}: " if exc.label else ""
        raise SpecError("", f"{source}: {invalid}{exc.reason}") from exc.__cause__


def read_data(text: str | bytes, format: DataFormat, *, source: str = "<data>") -> Any:
    """Read JSON, YAML or TOML data (a run's input, a model script) by the rules graph
    files are read by, into builtins.

    ``text`` is a ``str`` or UTF-8 bytes; ``source`` names it in messages (a file name).
    No key twice in one mapping; no NaN or infinity; numbers in exponent form (``1e-9``)
    are numbers in YAML too, as in YAML 1.2 and JSON; nesting at most 128 levels deep and
    integers of at most 4299 digits (what a run's log holds). None of a graph file's own
    bounds (its size, 64-bit integers, its count of values) apply. Does not block.

    Raises ValueError, one line naming ``source`` and the problem, with the line and
    column where the parser gives them: ``in.yaml is not valid: duplicate key 'a' (line
    3, column 1)``.
    """
    if format not in _LABELS:
        raise ValueError(f"unknown data format {format!r} (toml, yaml or json)")
    try:
        data = _parse(text, format, DATA_LIMITS)
        check_values(data, DATA_LIMITS)
    except _Unreadable as exc:
        raise ValueError(f"{source} is not valid: {exc.reason}") from exc.__cause__
    except SpecError as exc:
        raise ValueError(f"{source} is not valid: {exc}") from None
    return data


def _path(trail: tuple[Any, ...] | None) -> str:
    parts: list[str] = []
    while trail is not None:
        trail, key = trail
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".")


def check_values(data: Any, limits: Limits = SPEC_LIMITS) -> None:
    """Walk parsed builtins once (iteratively); SpecError naming the path of the first
    value that is too deep, too big an integer, or not a finite number, or when there
    are more values than ``limits`` allow (counted with repetition). Without a bound on
    values, a list or dict met again (a YAML alias) is not walked again: the walk stays
    as long as the text."""
    count = 0
    walked: set[int] | None = None if limits.max_values is not None else set()
    stack: list[tuple[Any, int, tuple[Any, ...] | None]] = [(data, 0, None)]
    while stack:
        item, depth, trail = stack.pop()
        count += 1
        if limits.max_values is not None and count > limits.max_values:
            raise SpecError("", f"a graph spec may hold at most {limits.max_values} values")
        if isinstance(item, (dict, list)):
            if walked is not None:
                if id(item) in walked:
                    continue
                walked.add(id(item))
            if depth >= limits.max_depth:
                raise SpecError(_path(trail), f"nested deeper than {limits.max_depth} levels")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((value, depth + 1, (trail, key)) for key, value in pairs)
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if limits.int64 and not _INT64[0] <= item <= _INT64[1]:
                raise SpecError(_path(trail), "integer outside the 64-bit range")
        elif isinstance(item, float) and not math.isfinite(item):
            raise SpecError(_path(trail), f"{item} is not a finite number")
