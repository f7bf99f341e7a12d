"""Parsing spec text into builtins, defensively: a graph file is untrusted input.

Before a parser sees the text its size is checked; the parsers are given hooks that
refuse duplicate keys (YAML, JSON; TOML refuses them itself), integers of more than
:data:`MAX_INT_DIGITS` digits and nesting deeper than :data:`MAX_SPEC_DEPTH`, each with
the line and column. After parsing, :func:`check_values` walks the builtins once,
without recursion: at most :data:`MAX_SPEC_VALUES` values counted with repetition (a
YAML alias bomb is tiny as text), no nesting deeper than :data:`MAX_SPEC_DEPTH`, no
integer outside 64 bits and no NaN or infinity, each refusal naming the path.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from typing import Any, Literal

from .._errors import SpecError
from ._limits import (
    MAX_INT_DIGITS,
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    MAX_SPEC_VALUES,
    Refused,
)

__all__ = [
    "MAX_INT_DIGITS",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_DEPTH",
    "MAX_SPEC_VALUES",
    "check_values",
    "parse_text",
]

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


def _check_brackets(text: str, tokens: re.Pattern[str]) -> None:
    """Refuse nesting deeper than MAX_SPEC_DEPTH, before a recursive parser meets it."""
    depth = 0
    for match in tokens.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_SPEC_DEPTH:
                raise Refused(
                    f"nested deeper than {MAX_SPEC_DEPTH} levels", _at(text, match.start())
                )
        elif token in "]}":
            depth = max(0, depth - 1)
        elif depth > 0 and token.lstrip().startswith("["):  # not a table header inside [ ]
            depth += token.count("[") - token.count("]")
            if depth > MAX_SPEC_DEPTH:
                raise Refused(
                    f"nested deeper than {MAX_SPEC_DEPTH} levels", _at(text, match.start())
                )


# --- JSON ------------------------------------------------------------------------------


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise Refused(f"duplicate key {key!r}")
        result[key] = value
    return result


def _json_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise Refused(f"integer of {len(digits)} digits (at most {MAX_INT_DIGITS})", digits)
    return int(digits)


def _json_constant(name: str) -> float:
    raise Refused(f"{name} is not a number a spec may hold")


def _parse_json(text: str) -> Any:
    _check_brackets(text, _JSON_TOKENS)
    try:
        return json.loads(
            text,
            object_pairs_hook=_json_pairs,
            parse_int=_json_int,
            parse_constant=_json_constant,
        )
    except Refused as refused:
        # The hooks are not told where they are: locate the digits in the text.
        found = text.find(refused.where) if refused.where else -1
        raise Refused(refused.reason, _at(text, found) if found >= 0 else "") from None


# --- TOML ------------------------------------------------------------------------------

_LONG_INT = re.compile(r"(?<![\w.\"'])[-+]?\d[\d_]{" + str(MAX_INT_DIGITS) + ",}")


def _parse_toml(text: str) -> Any:
    _check_brackets(text, _TOML_TOKENS)
    try:
        return tomllib.loads(text)
    except ValueError as exc:
        if isinstance(exc, tomllib.TOMLDecodeError):
            raise
        # tomllib has no integer hook: a literal past Python's digit limit lands here.
        match = _LONG_INT.search(text)
        where = _at(text, match.start()) if match else ""
        raise Refused(f"integer of too many digits (at most {MAX_INT_DIGITS})", where) from exc


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


def parse_text(text: str | bytes, format: Literal["toml", "yaml", "json"], *, source: str) -> Any:
    """Spec text to builtins; SpecError (path empty, line and column in the reason)."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SPEC_BYTES:
        raise SpecError("", f"{source}: {size} bytes, more than a spec may hold ({MAX_SPEC_BYTES})")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError("", f"{source}: not UTF-8 text: {exc}") from exc
    label = {"toml": "TOML", "yaml": "YAML", "json": "JSON"}.get(format, format)
    try:
        if format == "toml":
            return _parse_toml(text)
        if format == "yaml":
            from ._yaml import parse_yaml  # PyYAML is imported when YAML is read

            return parse_yaml(text)
        if format == "json":
            return _parse_json(text)
    except Refused as refused:
        where = f" ({refused.where})" if refused.where else ""
        raise SpecError("", f"{source}: invalid {label}: {refused.reason}{where}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError("", f"{source}: invalid TOML: {exc}{_toml_key(text, exc)}") from exc
    except json.JSONDecodeError as exc:
        raise SpecError("", f"{source}: invalid JSON: {exc}") from exc
    except (RecursionError, ValueError) as exc:  # whatever a parser still lets through
        raise SpecError("", f"{source}: invalid {label}: {exc}") from exc
    raise SpecError("", f"unknown spec format {format!r} (toml, yaml or json)")


def _path(trail: tuple[Any, ...] | None) -> str:
    parts: list[str] = []
    while trail is not None:
        trail, key = trail
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".")


def check_values(data: Any) -> None:
    """Walk parsed builtins once (iteratively); SpecError naming the path of the first
    value that is too deep, too big an integer, or not a finite number, or when there
    are more than MAX_SPEC_VALUES values."""
    count = 0
    stack: list[tuple[Any, int, tuple[Any, ...] | None]] = [(data, 0, None)]
    while stack:
        item, depth, trail = stack.pop()
        count += 1
        if count > MAX_SPEC_VALUES:
            raise SpecError("", f"a graph spec may hold at most {MAX_SPEC_VALUES} values")
        if isinstance(item, dict):
            if depth >= MAX_SPEC_DEPTH:
                raise SpecError(_path(trail), f"nested deeper than {MAX_SPEC_DEPTH} levels")
            stack.extend((value, depth + 1, (trail, key)) for key, value in item.items())
        elif isinstance(item, list):
            if depth >= MAX_SPEC_DEPTH:
                raise SpecError(_path(trail), f"nested deeper than {MAX_SPEC_DEPTH} levels")
            stack.extend((value, depth + 1, (trail, i)) for i, value in enumerate(item))
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if not _INT64[0] <= item <= _INT64[1]:
                raise SpecError(_path(trail), "integer outside the 64-bit range")
        elif isinstance(item, float) and not math.isfinite(item):
            raise SpecError(_path(trail), f"{item} is not a finite number")
