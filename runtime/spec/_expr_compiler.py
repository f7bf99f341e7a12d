"""The expression compiler: an allow-list over Python's expression AST, turned into
nested closures.

:class:`Compiler` visits a parsed expression node by node (one ``c_<NodeType>`` method per
allowed construct; a node type without one is refused, named for the user) and returns a
closure that evaluates it, charging the work meter and checking sizes as it goes (see
``_expr_ops``). The language, its bounds and the cached front door are in ``_expr``.
"""

from __future__ import annotations

import ast
import difflib
import operator
from collections.abc import Callable
from typing import Any, Final

from .._errors import ExpressionError
from ._expr_ops import (
    _BINOPS,
    _COMPARES,
    FUNCTIONS,
    MAX_INT_BITS,
    MAX_SIZE,
    _charge,
    _check_size,
    _describe,
    _Env,
    _Fn,
    _Refusal,
    _weight,
)

__all__ = ["Compiler", "source_offset"]


class Compiler:
    """Checks an AST against the allow-list and turns it into nested closures."""

    def __init__(self, source: str, text: str, lead: int) -> None:
        self.source = source
        self.text = text
        self.lines = text.split("\n")
        self.lead = lead
        self.names: set[str] = set()

    def column(self, node: ast.AST) -> int | None:
        """1-based character offset of ``node`` in the source (ast gives UTF-8 bytes)."""
        lineno = getattr(node, "lineno", None)
        col = getattr(node, "col_offset", None)
        if lineno is None or col is None or lineno > len(self.lines):
            return None
        prefix = self.lines[lineno - 1].encode("utf-8")[:col].decode("utf-8", "replace")
        return source_offset(self.lines, lineno, len(prefix) + 1, self.lead)

    def refuse(self, node: ast.AST, reason: str) -> ExpressionError:
        return ExpressionError(self.source, reason, position=self.column(node))

    def compile(self, node: ast.expr) -> _Fn:
        method = getattr(self, "c_" + type(node).__name__, None)
        if method is None:
            raise self.refuse(node, f"{_construct_name(node)} is not allowed")
        fn: _Fn = method(node)
        return fn

    # Each c_* method returns the closure for its node type.

    def c_Constant(self, node: ast.Constant) -> _Fn:
        value = node.value
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise self.refuse(node, f"{type(value).__name__} literals are not allowed")
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise self.refuse(node, f"integer literal above 2**{MAX_INT_BITS}")
        return lambda env: value

    def spelling(self, node: ast.expr) -> str:
        """``node``'s text as written (a name as written: Python reads the identifier
        ``ﬁx`` as ``fix``, NFKC-normalised, but a memory key is matched exactly)."""
        return ast.get_source_segment(self.text, node) or ""

    def c_Name(self, node: ast.Name) -> _Fn:
        name = self.spelling(node) or node.id
        if name.startswith("_"):
            raise self.refuse(node, f"names starting with '_' are not allowed: {name!r}")
        self.names.add(name)
        pos = self.column(node)

        def load(env: _Env) -> Any:
            try:
                return env[name]
            except KeyError:
                raise _Refusal(f"unknown name {name!r}", pos) from None

        return load

    def _display(self, parts: list[ast.expr], node: ast.expr, build: Callable[..., Any]) -> _Fn:
        """A literal: evaluate ``parts``, bound their total weight, then ``build`` them."""
        items = [self.compile(part) for part in parts]
        pos = self.column(node)

        def run(env: _Env) -> Any:
            values = [item(env) for item in items]
            total = 0
            for value in values:
                total += _weight(value, MAX_SIZE - total)
                if total > MAX_SIZE:
                    raise _Refusal(f"literal larger than {MAX_SIZE} items", pos)
            try:
                return build(values)
            except Exception as exc:  # unhashable set item or key: reported, not swallowed
                raise _Refusal(_describe(exc), pos) from exc

        return run

    def c_List(self, node: ast.List) -> _Fn:
        return self._display(node.elts, node, list)

    def c_Tuple(self, node: ast.Tuple) -> _Fn:
        return self._display(node.elts, node, tuple)

    def c_Set(self, node: ast.Set) -> _Fn:
        return self._display(node.elts, node, set)

    def c_Dict(self, node: ast.Dict) -> _Fn:
        keys = [key for key in node.keys if key is not None]
        if len(keys) != len(node.keys):
            raise self.refuse(node, "dict unpacking (**) is not allowed")
        flat = [part for pair in zip(keys, node.values, strict=True) for part in pair]
        return self._display(flat, node, _pairs_to_dict)

    def c_BoolOp(self, node: ast.BoolOp) -> _Fn:
        parts = [self.compile(v) for v in node.values]
        if isinstance(node.op, ast.And):

            def run_and(env: _Env) -> Any:
                value: Any = True
                for part in parts:
                    value = part(env)
                    if not value:
                        return value
                return value

            return run_and

        def run_or(env: _Env) -> Any:
            value: Any = False
            for part in parts:
                value = part(env)
                if value:
                    return value
            return value

        return run_or

    def c_UnaryOp(self, node: ast.UnaryOp) -> _Fn:
        operand = self.compile(node.operand)
        pos = self.column(node)
        if isinstance(node.op, ast.Not):
            return lambda env: not operand(env)
        if isinstance(node.op, (ast.USub, ast.UAdd)):
            op = operator.neg if isinstance(node.op, ast.USub) else operator.pos

            def run(env: _Env) -> Any:
                value = operand(env)
                try:
                    return op(value)
                except Exception as exc:
                    raise _Refusal(_describe(exc), pos) from exc

            return run
        raise self.refuse(node, f"operator {type(node.op).__name__} is not allowed")

    def c_BinOp(self, node: ast.BinOp) -> _Fn:
        impl = _BINOPS.get(type(node.op))
        if impl is None:
            raise self.refuse(node, f"operator {type(node.op).__name__} is not allowed")
        left = self.compile(node.left)
        right = self.compile(node.right)
        pos = self.column(node)

        def run(env: _Env) -> Any:
            a = left(env)
            b = right(env)
            try:
                return impl(a, b)
            except _Refusal as refusal:
                raise _Refusal(refusal.reason, pos) from refusal.__cause__
            except Exception as exc:
                raise _Refusal(_describe(exc), pos) from exc

        return run

    def c_Compare(self, node: ast.Compare) -> _Fn:
        ops: list[Callable[[Any, Any], Any]] = []
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.Is, ast.IsNot)) and not (
                isinstance(comparator, ast.Constant) and comparator.value is None
            ):
                raise self.refuse(node, "'is' / 'is not' are only allowed with None")
            ops.append(_COMPARES[type(op)])
        first = self.compile(node.left)
        rest = [self.compile(c) for c in node.comparators]
        pos = self.column(node)

        def run(env: _Env) -> Any:
            left = first(env)
            result: Any = True
            for op, comparator in zip(ops, rest, strict=True):
                right = comparator(env)
                try:
                    _charge(left, right)
                    result = op(left, right)
                except _Refusal as refusal:
                    raise _Refusal(refusal.reason, pos) from refusal.__cause__
                except Exception as exc:
                    raise _Refusal(_describe(exc), pos) from exc
                if not result:
                    return result
                left = right
            return result

        return run

    def c_IfExp(self, node: ast.IfExp) -> _Fn:
        test = self.compile(node.test)
        body = self.compile(node.body)
        orelse = self.compile(node.orelse)
        return lambda env: body(env) if test(env) else orelse(env)

    def c_Subscript(self, node: ast.Subscript) -> _Fn:
        value = self.compile(node.value)
        index = self.compile(node.slice)
        pos = self.column(node)

        def run(env: _Env) -> Any:
            container = value(env)
            key = index(env)
            try:
                item = container[key]
                if type(key) is slice:
                    _charge(item)  # a copy
                return item
            except _Refusal as refusal:
                raise _Refusal(refusal.reason, pos) from refusal.__cause__
            except Exception as exc:
                raise _Refusal(_describe(exc), pos) from exc

        return run

    def c_Slice(self, node: ast.Slice) -> _Fn:
        parts = [
            None if p is None else self.compile(p) for p in (node.lower, node.upper, node.step)
        ]

        def run(env: _Env) -> slice:
            return slice(*(None if p is None else p(env) for p in parts))

        return run

    def c_Attribute(self, node: ast.Attribute) -> _Fn:
        hint = (
            ""
            if node.attr.startswith("_")
            else f": write {self.spelling(node.value)}[{node.attr!r}]"
        )
        raise self.refuse(node, f"attribute access is not allowed{hint}")

    def c_Call(self, node: ast.Call) -> _Fn:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in FUNCTIONS:  # s.lower()
            written = ", ".join(self.spelling(part) for part in (func.value, *node.args))
            raise self.refuse(node, f"method calls are not allowed: write {func.attr}({written})")
        if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
            allowed = ", ".join(sorted(FUNCTIONS))
            what = func.id if isinstance(func, ast.Name) else "anything but a name"
            close = difflib.get_close_matches(what, list(FUNCTIONS), n=1)
            hint = f"; did you mean {close[0]}()?" if close and isinstance(func, ast.Name) else ""
            raise self.refuse(node, f"calling {what} is not allowed{hint} (allowed: {allowed})")
        name = func.id
        if node.keywords:
            raise self.refuse(node, f"keyword arguments are not allowed ({name})")
        impl, low, high = FUNCTIONS[name]
        factor = _CALL_FACTORS.get(name, 1)
        if not low <= len(node.args) <= high:
            raise self.refuse(
                node,
                f"{name}() takes {low}"
                + (f" to {high}" if high != low else "")
                + (" argument" if high == 1 else " arguments")
                + f", got {len(node.args)}",
            )
        args = [self.compile(a) for a in node.args]
        pos = self.column(node)

        def run(env: _Env) -> Any:
            values = [a(env) for a in args]
            try:
                if factor:
                    _charge(*values, factor=factor)
                return _check_size(impl(*values), f"{name}()")
            except _Refusal as refusal:
                raise _Refusal(refusal.reason, pos) from refusal.__cause__
            except Exception as exc:
                raise _Refusal(f"{name}(): {_describe(exc)}", pos) from exc

        return run


#: Work per item touched by a call, relative to a comparison (``len`` touches none;
#: sorting and formatting cost many times a comparison per item).
_CALL_FACTORS: Final = {"len": 0, "sorted": 8, "str": 3, "sum": 2}

_CONSTRUCT_NAMES: Final = {
    "Attribute": "attribute access",
    "Lambda": "lambda",
    "ListComp": "a list comprehension",
    "SetComp": "a set comprehension",
    "DictComp": "a dict comprehension",
    "GeneratorExp": "a generator expression",
    "NamedExpr": "the walrus operator (:=)",
    "JoinedStr": "an f-string",
    "FormattedValue": "an f-string",
    "Starred": "starred unpacking",
    "Await": "await",
    "Yield": "yield",
    "YieldFrom": "yield from",
}


def _pairs_to_dict(values: list[Any]) -> dict[Any, Any]:
    return dict(zip(values[::2], values[1::2], strict=True))


def _construct_name(node: ast.AST) -> str:
    return _CONSTRUCT_NAMES.get(type(node).__name__, type(node).__name__)


def source_offset(lines: list[str], lineno: int, column: int, lead: int) -> int:
    """Absolute 1-based offset in the original source of (line, 1-based column)."""
    return lead + sum(len(line) + 1 for line in lines[: lineno - 1]) + column
