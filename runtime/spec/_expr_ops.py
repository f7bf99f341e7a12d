"""The expression language's bounds, checked operators and allowed functions.

Everything here refuses work that would exceed a bound *before* doing it; see
:mod:`runtime.spec._expr` for the language itself.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final

MAX_SOURCE_LENGTH: Final = 1_000
MAX_NODES: Final = 500
MAX_DEPTH: Final = 40
MAX_INT_BITS: Final = 1024
MAX_SIZE: Final = 100_000
#: The work one evaluation may do, in units of roughly a nanosecond of C-level work on one
#: item (see :class:`_Meter`): every expression that compiles finishes in tens of
#: milliseconds or is refused, however its operations are chained.
MAX_WORK: Final = 15_000_000
#: Units charged per item an operation touches in C (comparing, searching, copying).
_ITEM: Final = 20
#: Units charged per item the weight check walks in Python, and per flat item it counts
#: at C speed.
_WALK_STEP: Final = 500
_FLAT_ITEM: Final = 25
_SCALARS: Final = frozenset({int, float, bool, type(None)})
#: ``round(x, n)`` computes ``10**-n`` for ints: keep ``n`` small.
_MAX_ROUND_DIGITS: Final = 400

_Env = Mapping[str, Any]
_Fn = Callable[[_Env], Any]


class _Refusal(Exception):
    """Internal: an evaluation step failed; converted to ExpressionError at the top."""

    def __init__(self, reason: str, position: int | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.position = position


class _Meter:
    """The work budget of one evaluation, charged as it goes (never after the fact).

    Weights of containers already measured in this evaluation are remembered by identity
    (with a reference, so an id is never reused while remembered): a value is walked once
    however many operations read it.
    """

    __slots__ = ("kept", "left", "weights")

    def __init__(self, budget: int = MAX_WORK) -> None:
        self.left = budget
        # id -> weight, and the objects themselves kept alive (a list, not a tuple per
        # entry: no new objects for the garbage collector to scan while walking).
        self.weights: dict[int, int] = {}
        self.kept: list[Any] = []

    def remember(self, value: Any, weight: int) -> None:
        self.weights[id(value)] = weight
        self.kept.append(value)

    def spend(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            reason = f"the expression does more work than its budget ({MAX_WORK} units)"
            raise _Refusal(reason, None)


#: The meter of the evaluation running in this context (none outside an evaluation).
_METER: ContextVar[_Meter | None] = ContextVar("magistrate_expression_meter", default=None)


def _spend(units: int) -> None:
    meter = _METER.get()
    if meter is not None:
        meter.spend(units)


def _items(value: Any) -> int:
    """How many items an operation on ``value`` may touch (strings count per 8 chars)."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value) // 8 + 1
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return _weight(value, 1 << 62) + 1
    return 1


def _charge(*values: Any, factor: int = 1) -> None:
    """Charge an operation touching ``values`` in C, before it runs."""
    if _METER.get() is not None:
        _spend(_ITEM * factor * sum(_items(v) for v in values))


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- size bounds -------------------------------------------------------------------


def _weight(value: Any, budget: int = MAX_SIZE) -> int:
    """Weight of ``value`` (see module doc), or ``budget + 1`` once it exceeds ``budget``.

    Iterative and stopped by the budget, so self-referencing or giant shared structures
    cost at most ``budget`` steps. Inside an evaluation the walk is charged to its meter
    as it goes, and containers it has weighed before cost one step.
    """
    meter = _METER.get()
    if meter is not None:
        cached = meter.weights.get(id(value))
        if cached is not None:
            return cached if cached <= budget else budget + 1
    total = 0
    steps = 0
    flat = 0
    stack = [value]
    while stack:
        item = stack.pop()
        steps += 1
        if isinstance(item, (str, bytes, bytearray)):
            total += max(1, len(item))
        elif isinstance(item, (list, tuple, set, frozenset, dict)):
            known = meter.weights.get(id(item)) if meter is not None else None
            if known is not None:
                total += known
            elif not item:
                total += 1
            elif isinstance(item, dict):
                if total + 2 * len(item) > budget:
                    return _walked(meter, steps, flat, budget + 1)
                stack.extend(item.keys())
                stack.extend(item.values())
            else:
                if total + len(item) > budget:
                    return _walked(meter, steps, flat, budget + 1)
                if set(map(type, item)) <= _SCALARS:  # counted in C: the common case
                    total += len(item)
                    flat += len(item)
                    if meter is not None:  # a leaf shared many times is walked once
                        meter.remember(item, len(item))
                else:
                    stack.extend(item)
        else:
            total += 1
        if total > budget:
            return _walked(meter, steps, flat, budget + 1)
        if meter is not None and (steps & 1023) == 0:
            meter.spend(steps * _WALK_STEP + flat * _FLAT_ITEM)
            steps = flat = 0
    _walked(meter, steps, flat, total)
    if meter is not None and isinstance(value, (list, tuple, set, frozenset, dict)):
        meter.remember(value, total)
    return total


def _walked(meter: _Meter | None, steps: int, flat: int, result: int) -> int:
    if meter is not None:
        meter.spend(steps * _WALK_STEP + flat * _FLAT_ITEM)
    return result


def _check_size(value: Any, what: str) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise _Refusal(f"{what} gives an integer above 2**{MAX_INT_BITS}", None)
        return value
    if isinstance(value, complex):
        raise _Refusal(f"{what} gives a complex number", None)
    if isinstance(value, (str, list, tuple, set, frozenset, dict)):
        if _weight(value) > MAX_SIZE:
            raise _Refusal(f"{what} gives a value larger than {MAX_SIZE} items", None)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))


def _add(a: Any, b: Any) -> Any:
    if not _is_number(a) and not _is_number(b):
        wa = _weight(a)
        if wa + _weight(b, MAX_SIZE - min(wa, MAX_SIZE)) > MAX_SIZE:
            raise _Refusal(f"concatenation larger than {MAX_SIZE} items", None)
    return _check_size(a + b, "addition")


def _mul(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        if a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
            raise _Refusal(f"product above 2**{MAX_INT_BITS}", None)
        return _check_size(a * b, "multiplication")
    seq, count = (a, b) if isinstance(b, int) and not _is_number(a) else (b, a)
    if isinstance(count, int) and not _is_number(seq) and count > 0:
        if _weight(seq) * count > MAX_SIZE:
            raise _Refusal(f"repetition larger than {MAX_SIZE} items", None)
    return _check_size(a * b, "multiplication")


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        # a >= 2**(bits-1), so a**b >= 2**((bits-1)*b): refuse before computing.
        if (a.bit_length() - 1) * b > MAX_INT_BITS:
            raise _Refusal(f"power above 2**{MAX_INT_BITS}", None)
    return _check_size(a**b, "power")


def _mod(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes, bytearray)):
        raise _Refusal("string formatting with % is not allowed", None)
    return a % b


def _sub(a: Any, b: Any) -> Any:
    return _check_size(a - b, "subtraction")


_BINOPS: Final[dict[type[ast.operator], Callable[[Any, Any], Any]]] = {
    ast.Add: _add,
    ast.Sub: _sub,
    ast.Mult: _mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: _mod,
    ast.Pow: _pow,
}

_COMPARES: Final[dict[type[ast.cmpop], Callable[[Any, Any], Any]]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}


# --- the allowed functions ---------------------------------------------------------


def _need_str(value: Any, fn: str) -> str:
    if not isinstance(value, str):
        raise _Refusal(f"{fn}() takes a string, got {type(value).__name__}", None)
    return value


def _f_round(x: Any, ndigits: Any = None) -> Any:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > _MAX_ROUND_DIGITS:
        raise _Refusal(
            f"round() takes ndigits between -{_MAX_ROUND_DIGITS} and {_MAX_ROUND_DIGITS}", None
        )
    return round(x, ndigits)


def _f_int(x: Any, base: Any = None) -> int:
    if isinstance(x, str) and len(x) > 400:
        raise _Refusal("int() of a string longer than 400 characters", None)
    return int(x) if base is None else int(x, base)


def _f_str(x: Any) -> str:
    if _weight(x) > MAX_SIZE:
        raise _Refusal(f"str() of a value larger than {MAX_SIZE} items", None)
    return str(x)


def _f_sum(items: Any, start: Any = 0) -> Any:
    if not _is_number(start):
        raise _Refusal("sum() takes numbers only", None)
    values = list(items)
    if not set(map(type, values)) <= _SCALARS - {type(None)}:
        raise _Refusal("sum() takes numbers only", None)
    # Each int is below 2**MAX_INT_BITS, so the total stays small enough to compute
    # before _check_size refuses it.
    return _check_size(sum(values, start), "sum()")


def _f_sorted(items: Any) -> list[Any]:
    if _weight(items) > MAX_SIZE:
        raise _Refusal(f"sorted() of a value larger than {MAX_SIZE} items", None)
    return sorted(items)


def _f_lower(s: Any) -> str:
    return _need_str(s, "lower").lower()


def _f_upper(s: Any) -> str:
    return _need_str(s, "upper").upper()


def _affix(value: Any, fn: str) -> str | tuple[str, ...]:
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return value
    return _need_str(value, fn)


def _f_startswith(s: Any, prefix: Any) -> bool:
    return _need_str(s, "startswith").startswith(_affix(prefix, "startswith"))


def _f_endswith(s: Any, suffix: Any) -> bool:
    return _need_str(s, "endswith").endswith(_affix(suffix, "endswith"))


#: name -> (implementation, min positional args, max positional args)
FUNCTIONS: Final[dict[str, tuple[Callable[..., Any], int, int]]] = {
    "len": (len, 1, 1),
    "length": (len, 1, 1),
    "min": (min, 1, 16),
    "max": (max, 1, 16),
    "abs": (abs, 1, 1),
    "round": (_f_round, 1, 2),
    "int": (_f_int, 1, 2),
    "float": (float, 1, 1),
    "str": (_f_str, 1, 1),
    "bool": (bool, 1, 1),
    "sum": (_f_sum, 1, 2),
    "any": (any, 1, 1),
    "all": (all, 1, 1),
    "sorted": (_f_sorted, 1, 1),
    "lower": (_f_lower, 1, 1),
    "upper": (_f_upper, 1, 1),
    "startswith": (_f_startswith, 2, 2),
    "endswith": (_f_endswith, 2, 2),
    "contains": (operator.contains, 2, 2),
}
