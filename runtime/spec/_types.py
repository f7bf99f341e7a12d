"""The types of a GraphSpec built in Python, checked as a graph file's are, and msgspec's
type errors told as a user can act on them.

msgspec checks a struct's field types when it decodes or converts data, not when code
constructs the struct: ``NodeSpec(retry={"max_attempts": 1})`` or
``NodeSpec(max_iterations="5")`` builds without complaint and would fail deep inside a
run (``AttributeError``, ``TypeError``). :func:`check_types` converts the graph's
builtins back strictly, as ``graph_from_dict`` does for a file, and names the field.
:func:`spec_error` says what to write instead: the field an unknown one is closest to,
the values a field takes, how to write a value of its type.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import msgspec

from .._errors import SpecError

__all__ = ["check_types", "spec_error"]

# msgspec: "Expected `int`, got `str` - at `$.edges[3].priority`"
_AT = re.compile(r"^(?P<reason>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)
# msgspec, of a mapping key: "Expected `str` - at `key` in `$.nodes[0]`"
_KEY_AT = re.compile(r"^(?P<reason>.*) - at `key` in `\$(?P<path>[^`]*)`$", re.DOTALL)
# msgspec: "Object missing required field `entry_node`" / "... unknown field `x`"
_FIELD = re.compile(r"(?:missing required|contains unknown) field `(?P<field>[^`]*)`")
# msgspec: "Invalid enum value 'fucntion'" (a Literal) / "Invalid value 'x'" (a union's tag)
_CHOICE = re.compile(r"^Invalid (?:enum )?value (?P<value>.+)$", re.DOTALL)
_EXPECTED = re.compile(r"^Expected `(?P<expected>[^`]*)`, got `(?P<got>[^`]*)`$")
_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def spec_error(
    exc: msgspec.ValidationError, root: type | None = None, data: Any = None
) -> SpecError:
    """Turn msgspec's message into SpecError(path="edges[3].condition", reason=...), with
    what to write instead where ``root`` (the type converted to) and ``data`` (what was
    converted) tell: the field of that struct an unknown field is closest to, the values
    a field takes and the closest one, how to write a value of the field's type."""
    message = str(exc)
    key = _KEY_AT.match(message)
    if key:
        path = key["path"].lstrip(".")
        found = _value_at(data, path)
        bad = [k for k in found if not isinstance(k, str)] if isinstance(found, dict) else []
        shown = f"the key {bad[0]!r} is not a string: " if bad else ""
        return SpecError(path, f"{shown}field names are strings (quote it if it is one)")
    path = ""
    match = _AT.match(message)
    if match:
        message = match["reason"]
        path = match["path"].lstrip(".")
    field = _FIELD.search(message)
    if field:
        if root is not None and "unknown field" in message:
            names = _field_names(_types_at(root, path))
            close = difflib.get_close_matches(field["field"], names, n=1)
            message += f"; did you mean `{close[0]}`?" if close else ""
        path = f"{path}.{field['field']}" if path else field["field"]
        return SpecError(path, message)
    if root is not None and (choice := _CHOICE.match(message)):
        message += _choices(root, path, choice["value"])
    elif expected := _EXPECTED.match(message):
        message += _write_instead(expected["expected"], expected["got"], _value_at(data, path))
    return SpecError(path, message)


def _parts(path: str) -> list[str | int]:
    return [int(index) if index else name for name, index in _PART.findall(path)]


def _value_at(data: Any, path: str) -> Any:
    """The value at ``path`` in builtins, or None."""
    for part in _parts(path):
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _types_at(root: type, path: str) -> list[Any]:
    """The msgspec type infos the field at ``path`` ("nodes[0].retry") may have under
    ``root``: several where the members of a union (the verifier variants) have it."""
    infos: list[Any] = [msgspec.inspect.type_info(root)]
    for part in _parts(path):
        if isinstance(part, str):  # (an index: _structs looks inside lists)
            infos = [f.type for s in _structs(infos) for f in s.fields if f.encode_name == part]
    return infos


def _structs(infos: list[Any]) -> list[Any]:
    """The struct types ``infos`` hold: themselves, a list's items, a dict's values, every
    member of a union."""
    found: list[Any] = []
    stack = list(infos)
    while stack:
        info = stack.pop(0)
        if isinstance(info, msgspec.inspect.StructType):
            found.append(info)
        elif isinstance(info, msgspec.inspect.ListType | msgspec.inspect.VarTupleType):
            stack.append(info.item_type)
        elif isinstance(info, msgspec.inspect.DictType):
            stack.append(info.value_type)
        elif isinstance(info, msgspec.inspect.UnionType):
            stack.extend(info.types)
    return found


def _field_names(infos: list[Any]) -> list[str]:
    return list(dict.fromkeys(f.encode_name for s in _structs(infos) for f in s.fields))


def _choices(root: type, path: str, given: str) -> str:
    """``: one of 'a', 'b'; did you mean 'a'?`` for a field that takes a few values."""
    values: list[str] = []
    for info in _types_at(root, path):
        for member in getattr(info, "types", (info,)):
            if isinstance(member, msgspec.inspect.LiteralType):
                values += [str(v) for v in member.values]
    parent, _, name = path.rpartition(".")
    if not values:  # a tagged union's tag: each member's
        for struct in _structs(_types_at(root, parent)):
            if struct.tag_field == name and struct.tag is not None:
                values.append(str(struct.tag))
    if not values:
        return ""
    shown = ", ".join(repr(v) for v in dict.fromkeys(values))
    close = difflib.get_close_matches(given.strip("'\""), values, n=1)
    return f": one of {shown}" + (f"; did you mean {close[0]!r}?" if close else "")


def _write_instead(expected: str, got: str, value: Any) -> str:
    """How to write a value of the ``expected`` type where one of type ``got`` was."""
    text = expected.startswith("str")
    if ("int" in expected or "float" in expected) and got == "str":
        return f"; write the number without quotes ({value} rather than {value!r})"
    if expected.startswith("int") and got == "float":
        return "; write a whole number"
    if text and got == "bool":
        return "; quote it (YAML reads yes, no, on, off, true and false as booleans)"
    if text and got in ("int", "float"):
        return f"; quote it ('{value}': unquoted, it is a number)"
    if text and got in ("date", "datetime", "time"):
        return f"; quote it ('{value}': unquoted, YAML reads it as a {got})"
    if expected.startswith("array") and got == "str":
        return f"; write a list: [{value}]"
    if expected.startswith("object") and got not in ("null", "array"):
        return "; write a mapping of fields (name: value)"
    if got == "null" and "null" not in expected:
        return "; a value is required here (YAML reads an empty value as null)"
    return ""


def check_types(graph: msgspec.Struct) -> list[SpecError]:
    """The type problems of ``graph`` (a GraphSpec), each naming its field; [] if none."""
    try:
        builtins = msgspec.to_builtins(graph)
        rebuilt = msgspec.convert(builtins, type(graph))
    except msgspec.ValidationError as exc:
        return [spec_error(exc, type(graph), builtins)]
    except (TypeError, msgspec.EncodeError) as exc:  # a value with no builtin form
        return [SpecError("", f"not a spec of plain values: {exc}")]
    return _structs_given_as_other("", graph, rebuilt)


def _structs_given_as_other(path: str, given: Any, rebuilt: Any) -> list[SpecError]:
    """Where a struct field (a RetryPolicy, a verifier...) holds something else, such as
    the dict that converted into it."""
    if isinstance(rebuilt, msgspec.Struct):
        if type(given) is not type(rebuilt):
            name = type(rebuilt).__name__
            return [
                SpecError(
                    path,
                    f"expected {name}, got {type(given).__name__}: build it as {name}(...), "
                    "or load the whole graph with graph_from_dict",
                )
            ]
        errors: list[SpecError] = []
        for field in rebuilt.__struct_fields__:
            inner = f"{path}.{field}" if path else field
            errors += _structs_given_as_other(inner, getattr(given, field), getattr(rebuilt, field))
        return errors
    if isinstance(rebuilt, list) and isinstance(given, list | tuple):
        errors = []
        for i, (a, b) in enumerate(zip(given, rebuilt, strict=False)):
            errors += _structs_given_as_other(f"{path}[{i}]", a, b)
        return errors
    return []
