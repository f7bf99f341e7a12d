"""Operations of an expression that fail whatever memory holds, refused when it compiles.

Memory keys have no declared types, but literals and the results of the allowed functions
do: ``len(x) > '3'`` compares a number with a string, ``lower(5)`` passes a number, and
``x / 0`` divides by zero, whatever ``x`` is. Each would raise at every evaluation, so on
a conditional edge it would fail the run at that node, only when the run gets there.
:func:`check_kinds` walks the parsed expression once, infers the kind of each part that
has one (a number, a string, None, a list, ...; a memory key's is unknown), and raises
:class:`ExpressionError` at the column of the first operation whose operands' kinds can
never work together, saying what to write instead. An operation with an operand of
unknown kind is left to the evaluation.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Final

from .._errors import ExpressionError

__all__ = ["check_kinds"]

_NUM: Final = "a number"  # bool included: True + 1 is 2
_STR: Final = "a string"
_NONE: Final = "None"
_LIST: Final = "a list"
_TUPLE: Final = "a tuple"
_DICT: Final = "a mapping"
_SET: Final = "a set"
_SEQUENCES: Final = (_STR, _LIST, _TUPLE)
_ORDERED: Final = (_NUM, _STR, _LIST, _TUPLE, _SET)  # each with its own kind only
_NO_ITEMS: Final = (_NUM, _NONE)  # kinds that hold no items (len, in, [ ])

#: The kind each allowed function gives.
_RETURNS: Final = {
    "len": _NUM, "length": _NUM, "abs": _NUM, "round": _NUM, "int": _NUM, "float": _NUM,
    "sum": _NUM, "bool": _NUM, "any": _NUM, "all": _NUM, "startswith": _NUM,
    "endswith": _NUM, "contains": _NUM, "str": _STR, "lower": _STR, "upper": _STR,
    "sorted": _LIST,
}  # fmt: skip
_OPS: Final = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
}  # fmt: skip
_Kind = str | None


def check_kinds(tree: ast.expr, source: str, column: Callable[[ast.AST], int | None]) -> None:
    """Raise ExpressionError for the first operation of ``tree`` that always fails."""
    _Checker(source, column).kind(tree)


class _Checker:
    def __init__(self, source: str, column: Callable[[ast.AST], int | None]) -> None:
        self.source = source
        self.column = column

    def refuse(self, node: ast.AST, reason: str) -> ExpressionError:
        return ExpressionError(self.source, reason, position=self.column(node))

    def kind(self, node: ast.AST) -> _Kind:
        """The kind of ``node``'s value (None: unknown), its operations checked."""
        method = getattr(self, "k_" + type(node).__name__, None)
        if method is not None:
            result: _Kind = method(node)
            return result
        for child in ast.iter_child_nodes(node):
            self.kind(child)
        return None

    def k_Constant(self, node: ast.Constant) -> _Kind:
        if node.value is None:
            return _NONE
        return _STR if isinstance(node.value, str) else _NUM

    def k_List(self, node: ast.List) -> _Kind:
        return self._items(node, _LIST)

    def k_Tuple(self, node: ast.Tuple) -> _Kind:
        return self._items(node, _TUPLE)

    def k_Set(self, node: ast.Set) -> _Kind:
        return self._items(node, _SET)

    def k_Dict(self, node: ast.Dict) -> _Kind:
        return self._items(node, _DICT)

    def _items(self, node: ast.AST, kind: str) -> _Kind:
        for child in ast.iter_child_nodes(node):
            self.kind(child)
        return kind

    def k_UnaryOp(self, node: ast.UnaryOp) -> _Kind:
        operand = self.kind(node.operand)
        if isinstance(node.op, ast.Not):
            return _NUM
        if operand not in (None, _NUM):
            sign = "negates" if isinstance(node.op, ast.USub) else "applies unary + to"
            raise self.refuse(node, f"{sign} {operand}: only numbers have a sign")
        return _NUM

    def k_BoolOp(self, node: ast.BoolOp) -> _Kind:
        kinds = {self.kind(value) for value in node.values}
        return kinds.pop() if len(kinds) == 1 else None

    def k_IfExp(self, node: ast.IfExp) -> _Kind:
        self.kind(node.test)
        body, orelse = self.kind(node.body), self.kind(node.orelse)
        return body if body == orelse else None

    def k_BinOp(self, node: ast.BinOp) -> _Kind:
        left, right = self.kind(node.left), self.kind(node.right)
        op = node.op
        divides = isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod))
        divisor = node.right
        if divides and isinstance(divisor, ast.Constant) and divisor.value in (0, 0.0):
            if not isinstance(divisor.value, bool):  # (False is 0 too, and as wrong)
                raise self.refuse(node, "divides by zero: a ZeroDivisionError whenever it runs")
        if left is None or right is None:
            known = left or right
            if isinstance(op, (ast.Add, ast.Sub)):
                return known if known in (_NUM, _STR, _LIST, _TUPLE, _SET) else None
            return _NUM if known == _NUM and not isinstance(op, ast.Mult) else None
        if isinstance(op, ast.Add):
            if left == right and left in (_NUM, *_SEQUENCES):
                return left
            raise self.refuse(node, f"adds {right} to {left}: {_CONVERT}")
        if isinstance(op, ast.Mult):
            if left == right == _NUM:
                return _NUM
            if {left, right} & {_NUM} and {left, right} & set(_SEQUENCES):
                return left if left != _NUM else right
            raise self.refuse(node, f"multiplies {left} by {right}: {_CONVERT}")
        if isinstance(op, ast.Sub) and left == right == _SET:
            return _SET
        if isinstance(op, ast.Mod) and left == _STR:
            raise self.refuse(node, "string formatting with % is not allowed")
        if left == right == _NUM:
            return _NUM
        what = {ast.Sub: "subtracts", ast.Div: "divides", ast.FloorDiv: "divides"}
        verb = what.get(type(op), "computes with")
        raise self.refuse(node, f"{verb} {left} and {right}: only numbers do; {_CONVERT}")

    def k_Compare(self, node: ast.Compare) -> _Kind:
        left = self.kind(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self.kind(comparator)
            self._compare(node, type(op), left, right)
            left = right
        return _NUM

    def _compare(self, node: ast.Compare, op: type[ast.cmpop], left: _Kind, right: _Kind) -> None:
        shown = _OPS.get(op, "")
        if op in (ast.Lt, ast.LtE, ast.Gt, ast.GtE):
            if _NONE in (left, right):
                raise self.refuse(
                    node,
                    f"orders None ({shown}): None is neither less nor greater than anything; "
                    "test 'x is not None and x ...' first",
                )
            if left and right and (left != right or left not in _ORDERED):
                raise self.refuse(
                    node, f"compares {left} with {right} ({shown}): they have no order; {_CONVERT}"
                )
        elif op in (ast.Eq, ast.NotEq) and {left, right} == {_NUM, _STR}:
            always = "false" if op is ast.Eq else "true"
            raise self.refuse(
                node, f"compares {left} with {right} ({shown}): always {always}; {_CONVERT}"
            )
        elif op in (ast.In, ast.NotIn):
            if right in _NO_ITEMS:
                raise self.refuse(
                    node, f"looks for an item 'in' {right}: only strings and collections hold items"
                )
            if right == _STR and left not in (None, _STR):
                raise self.refuse(node, f"looks for {left} 'in' a string: only a string can be")

    def k_Subscript(self, node: ast.Subscript) -> _Kind:
        value, index = self.kind(node.value), self.kind(node.slice)
        if value in (*_NO_ITEMS, _SET):
            raise self.refuse(
                node, f"subscripts {value}: only strings, lists, tuples and mappings take [ ]"
            )
        if value in _SEQUENCES and index not in (None, _NUM):
            raise self.refuse(node, f"indexes {value} with {index}: positions are numbers")
        return _STR if value == _STR else None

    def k_Call(self, node: ast.Call) -> _Kind:
        args = [self.kind(arg) for arg in node.args]
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        first = args[0] if args else None
        wrong = _wrong_argument(name, first, args[1] if len(args) > 1 else None, len(args))
        if wrong:
            raise self.refuse(node, f"{name}() takes {wrong[0]}, not {wrong[1]}")
        return _RETURNS.get(name)


_CONVERT: Final = "convert one side first, e.g. int(s), float(s) or str(n)"


def _wrong_argument(name: str, first: _Kind, second: _Kind, count: int) -> tuple[str, str] | None:
    """(what ``name`` takes, what it was given) when an argument can never do."""
    if name in ("lower", "upper", "startswith", "endswith"):
        if first not in (None, _STR):
            return "a string", first
        if name in ("startswith", "endswith") and second not in (None, _STR, _TUPLE):
            return "a string or a tuple of strings to look for", second
    if name in ("len", "length", "contains") and first in _NO_ITEMS:
        return "a string or a collection", first
    if name == "abs" and first not in (None, _NUM):
        return "a number", first
    if name in ("int", "float") and first not in (None, _NUM, _STR):
        return "a number or a string", first
    if name in ("sum", "any", "all", "sorted") and first in _NO_ITEMS:
        return "a collection", first
    if name in ("min", "max") and count == 1 and first in _NO_ITEMS:
        return "a collection, or several values", first
    if name == "sum" and first == _STR:
        return "a collection of numbers", first
    return None
