"""The types of a GraphSpec built in Python, checked as a graph file's are.

msgspec checks a struct's field types when it decodes or converts data, not when code
constructs the struct: ``NodeSpec(retry={"max_attempts": 1})`` or
``NodeSpec(max_iterations="5")`` builds without complaint and would fail deep inside a
run (``AttributeError``, ``TypeError``). :func:`check_types` converts the graph's
builtins back strictly, as ``graph_from_dict`` does for a file, and names the field.
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
# msgspec: "Object missing required field `entry_node`" / "... unknown field `x`"
_FIELD = re.compile(r"(?:missing required|contains unknown) field `(?P<field>[^`]*)`")


def spec_error(exc: msgspec.ValidationError, root: type | None = None) -> SpecError:
    """Turn msgspec's message into SpecError(path="edges[3].condition", reason=...); an
    unknown field of a struct under ``root`` (the type converted to) names the field of
    that struct it is closest to, if one is close."""
    message = str(exc)
    path = ""
    match = _AT.match(message)
    if match:
        message = match["reason"]
        path = match["path"].lstrip(".")
    field = _FIELD.search(message)
    if field:
        if root is not None and "unknown field" in message:
            names = _field_names(root, path)
            close = difflib.get_close_matches(field["field"], names, n=1)
            message += f"; did you mean `{close[0]}`?" if close else ""
        path = f"{path}.{field['field']}" if path else field["field"]
    return SpecError(path, message)


def _field_names(root: type, path: str) -> list[str]:
    """The field names of the struct at ``path`` ("nodes[0].retry") under ``root``."""
    info: Any = _struct(msgspec.inspect.type_info(root))
    for name in filter(None, (part.partition("[")[0] for part in path.split("."))):
        fields = {f.encode_name: f.type for f in getattr(info, "fields", ())}
        info = _struct(fields.get(name))
    return [f.encode_name for f in getattr(info, "fields", ())]


def _struct(info: Any) -> Any:
    """The struct type ``info`` holds: itself, a list's items, a dict's values, a union's."""
    if isinstance(info, msgspec.inspect.StructType):
        return info
    if isinstance(info, msgspec.inspect.ListType | msgspec.inspect.VarTupleType):
        return _struct(info.item_type)
    if isinstance(info, msgspec.inspect.DictType):
        return _struct(info.value_type)
    if isinstance(info, msgspec.inspect.UnionType):
        return next(filter(None, map(_struct, info.types)), None)
    return None


def check_types(graph: msgspec.Struct) -> list[SpecError]:
    """The type problems of ``graph`` (a GraphSpec), each naming its field; [] if none."""
    try:
        rebuilt = msgspec.convert(msgspec.to_builtins(graph), type(graph))
    except msgspec.ValidationError as exc:
        return [spec_error(exc)]
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
