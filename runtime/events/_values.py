"""What a memory value may be: exactly the values the run log stores and reads back
unchanged (its events are JSON).

A node's outputs, its partial outputs and a run's input are checked where they enter
(the node boundary, ``Runtime.start``, ``inject_input``), so the live result and the
fold of the log never disagree: a value that would change type on the way through the
log (NaN and infinity become null, sets and tuples lists, bytes base64 text, int keys
strings, datetimes strings) or that cannot be written at all (an arbitrary object, a
string with a lone surrogate, as a value or as a key, a list that contains itself, an
integer of more than :data:`MAX_INT_DIGITS` digits, which Python refuses to turn into
text or read back from it) is refused naming the key, the place inside the value and its
type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from .._errors import MemoryValueError, quoted_id

__all__ = [
    "MAX_INT_DIGITS",
    "MAX_VALUE_DEPTH",
    "MAX_VALUE_ITEMS",
    "check_input",
    "check_memory_value",
    "check_run_id",
    "check_seq",
    "check_text",
    "not_utf8",
]

#: Deepest nesting of lists and dicts in one memory value (a cycle is found by it too).
MAX_VALUE_DEPTH: Final = 100
#: Most digits of an integer in a memory value. The log's JSON writes integers as decimal
#: text: CPython converts at most 4300 digits (``sys.get_int_max_str_digits``), and the
#: log's decoder reads at most 4300 characters, a minus sign included.
MAX_INT_DIGITS: Final = 4299
#: Most items (list items and dict entries) in one memory value, counted as the log
#: writes them: a list or dict met several times (shared) counts each time.
MAX_VALUE_ITEMS: Final = 10_000_000
#: Integers of at most this many bits have fewer digits than that: no comparison needed.
_SHORT_INT_BITS: Final = 14_000
_TOO_LONG_INT: Final = 10**MAX_INT_DIGITS
_NONE_OR_BOOL: Final = frozenset({bool, type(None)})

_SURROGATE = "a string with a lone surrogate (not UTF-8)"
_ALLOWED = "a memory value is JSON: None, bool, int, finite float, str, list, dict with str keys"


def check_memory_value(key: str, value: Any) -> None:
    """Raise :class:`MemoryValueError` unless ``value`` survives the log unchanged.

    The key is checked too: a key, at the top or in a nested dict, must be text the log
    can write (no lone surrogate). Walks the value once, without recursion, and no further
    than :data:`MAX_VALUE_ITEMS` items (a value built of shared lists can be far larger
    than the memory it takes). Does not block.
    """
    if not key.isascii() and not_utf8(key):  # an ASCII key (most) without the call
        raise MemoryValueError(key, "the key", _SURROGATE)
    kind = type(value)
    if kind is int:  # most outputs: no walk (no stack)
        if value.bit_length() > _SHORT_INT_BITS:
            _check_int(key, None, value)
        return
    if kind is bool or value is None:
        return
    stack: list[tuple[Any, int, tuple[Any, ...] | None]] = [(value, 0, None)]
    items = 0
    while stack:
        item, depth, trail = stack.pop()
        kind = type(item)
        if kind is str:
            if not_utf8(item):
                raise MemoryValueError(key, _path(trail), _SURROGATE)
        elif kind is int:
            if item.bit_length() > _SHORT_INT_BITS:
                _check_int(key, trail, item)
        elif kind is bool or item is None:
            continue
        elif kind is float:
            if not math.isfinite(item):
                raise MemoryValueError(key, _path(trail), f"{item} (JSON has no NaN or infinity)")
        elif kind is list or kind is dict:
            if depth >= MAX_VALUE_DEPTH:
                raise MemoryValueError(
                    key,
                    _path(trail),
                    f"nested deeper than {MAX_VALUE_DEPTH} levels (or a list or dict "
                    "that contains itself)",
                )
            items += len(item)
            if items > MAX_VALUE_ITEMS:
                raise MemoryValueError(
                    key,
                    _path(trail),
                    f"a list or dict that brings the value past {MAX_VALUE_ITEMS} items "
                    "(list items and dict entries, a shared one counted each time it recurs)",
                )
            if kind is list:
                if not _plain(item):
                    stack.extend((v, depth + 1, (trail, i)) for i, v in enumerate(item))
            else:
                for k, v in item.items():
                    if type(k) is not str:
                        raise MemoryValueError(
                            key,
                            _path(trail),
                            f"a dict with a {type(k).__name__} key {k!r} (keys are read "
                            "back as strings)",
                        )
                    if not_utf8(k):
                        raise MemoryValueError(
                            key,
                            _path(trail),
                            f"a dict with a key {k!r} that holds a lone surrogate (not UTF-8)",
                        )
                    stack.append((v, depth + 1, (trail, k)))
        else:
            raise MemoryValueError(key, _path(trail), f"a {_type_name(item)}; {_ALLOWED}")


def _plain(items: list[Any]) -> bool:
    """Whether a list holds only values of one kind that the log takes as they are,
    checked at C speed (a list of numbers or ASCII strings); False: walk its items."""
    kinds = set(map(type, items))
    if kinds <= _NONE_OR_BOOL:
        return True
    if len(kinds) != 1:
        return False
    kind = kinds.pop()
    if kind is int:
        high: int = max(items)
        low: int = min(items)
        return high.bit_length() <= _SHORT_INT_BITS >= low.bit_length()
    if kind is str:
        return all(map(str.isascii, items))
    return kind is float and all(map(math.isfinite, items))


def _check_int(key: str, trail: tuple[Any, ...] | None, value: int) -> None:
    if abs(value) >= _TOO_LONG_INT:
        raise MemoryValueError(
            key,
            _path(trail),
            f"an integer of {value.bit_length()} bits, more than {MAX_INT_DIGITS} digits "
            "(the log writes integers as decimal text, and reads back no more)",
        )


def check_run_id(run_id: str | None) -> None:
    """Refuse a run id that a front could not name: empty, over 200 characters, holding a
    ``/`` (a path separator in URLs and the HTTP API's routes), a control character (NUL
    included) or a lone surrogate, or made of dots only (``.`` and ``..`` are path steps
    that HTTP clients and browsers resolve away). Raises ValueError naming the problem;
    None passes (a fresh id is made)."""
    if run_id is None:
        return
    if not isinstance(run_id, str):
        raise TypeError(f"a run id is a str, got {_type_name(run_id)}")
    if not run_id.strip() or len(run_id) > 200:
        raise ValueError(f"a run id has 1 to 200 characters, not all spaces: {quoted_id(run_id)}")
    if not run_id.strip("."):
        raise ValueError(f"a run id may not be dots only (a URL path step): {run_id!r}")
    bad = next((ch for ch in run_id if ch == "/" or ord(ch) < 32 or ord(ch) == 127), None)
    if bad is not None:
        raise ValueError(f"a run id may not hold {bad!r}: {run_id!r}")
    if not_utf8(run_id):
        raise ValueError(f"a run id must be UTF-8 text (a lone surrogate): {run_id!r}")


def check_seq(name: str, value: object, *, below_one: bool = False) -> None:
    """Refuse what cannot be a seq of a run's log (they count 1, 2, 3...): not an int
    (TypeError, a bool included), or below 1 (ValueError) unless ``below_one`` (the
    caller says why itself); None passes (no bound)."""
    if value is None:
        return
    if type(value) is bool or not isinstance(value, int):
        raise TypeError(f"{name} must be a seq (an int), got {_type_name(value)}")
    if value < 1 and not below_one:
        raise ValueError(f"{name} must be 1 or more (seqs start at 1), got {value}")


def check_text(name: str, value: object, *, required: bool = False) -> None:
    """Refuse, before anything is recorded, text a control event would carry (who approved,
    why a run was cancelled) that its log could not read back: not a ``str`` (TypeError), a
    lone surrogate, or, where ``required``, nothing but spaces (ValueError)."""
    if type(value) is not str and not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {_type_name(value)}")
    if required and not value.strip():
        raise ValueError(f"{name} must name someone, got {value!r}")
    if not_utf8(value):
        raise ValueError(f"{name} must be UTF-8 text (a lone surrogate): {value!r}")


def not_utf8(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (half a UTF-16 pair), which no log can write."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_input(data: Mapping[str, Any] | None, name: str = "input") -> None:
    """Raise unless ``data`` can be merged into a run's memory: None, or a mapping of str
    keys to values the log stores unchanged (TypeError naming what it is instead, or
    :class:`MemoryValueError` for a value)."""
    if data is None:
        return
    if type(data) is not dict and not isinstance(data, Mapping):  # an ABC check: ~1 us
        raise TypeError(
            f"{name} must be a mapping of memory keys to values, got {_type_name(data)}"
        )
    for key, value in data.items():
        if type(key) is not str:
            raise TypeError(f"{name} keys are memory keys (str), got the {_type_name(key)} {key!r}")
        check_memory_value(key, value)


def _type_name(value: Any) -> str:
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _path(trail: tuple[Any, ...] | None) -> str:
    parts: list[str] = []
    while trail is not None:
        trail, step = trail
        parts.append(f"[{step!r}]")
    return "value" + "".join(reversed(parts))
