"""The safe expression language of conditional edges and expression verifiers.

An allow-list over Python's expression AST, compiled once into nested closures (by
``_expr_compiler``):

- literals: ints, floats, strings, ``True``/``False``/``None``, and list, tuple, set
  and dict displays of expressions;
- names, looked up in the mapping given to :meth:`Expression.evaluate` (node outputs
  and memory keys); an unknown name is an :class:`ExpressionError`, never ``None``;
  names starting with ``_`` are refused;
- comparisons (chained), ``and``/``or``/``not``, ``in``/``not in``, ``is None`` and
  ``is not None`` (``is`` against anything but the literal ``None`` is refused);
- arithmetic ``+ - * / // %`` and ``**``, unary ``-`` and ``+``; ``a if c else b``;
- subscripts ``x["a"]``, ``x[0]``, ``x[1:3]``;
- calls by plain name to the pure functions in :data:`FUNCTIONS` only, positional
  arguments only.

Everything else is refused when the expression is compiled: attribute access, any
other call, comprehensions, generator expressions, lambdas, ``:=``, f-strings,
starred arguments, ``**`` in dict displays, keyword arguments, bit operations and
shifts, ``await``/``yield``.

Bounds (each refusal is an :class:`ExpressionError`, checked *before* the work that
would exceed it, so ``10**10**10`` or ``'a' * 10**9`` are refused at once):

- source at most :data:`MAX_SOURCE_LENGTH` characters, at most :data:`MAX_NODES`
  AST nodes, nesting depth at most :data:`MAX_DEPTH`;
- integers below ``2**MAX_INT_BITS`` in magnitude (the range of a float);
- every string, list, tuple, set or dict the expression builds weighs at most
  :data:`MAX_SIZE`, where a string weighs its length, a collection the sum of its
  items' weights (so ``[[0] * 1000] * 1000`` is refused as well);
- ``str % args`` formatting is refused (``'%999999999d' % 1``);
- the total work of one evaluation is at most :data:`MAX_WORK` units, charged as it
  goes: a unit is roughly a nanosecond of C-level work on one item (comparing,
  searching, copying, sorting cost per item they touch; the size checks cost per item
  they walk, once per value). So every expression that compiles evaluates in tens of
  milliseconds or raises, however its bounded operations are chained
  (``[0]*99999+[] and [0]*99999+[] and ...`` is refused after a few terms).

Evaluation never raises anything but :class:`ExpressionError`: a ``TypeError``,
``ZeroDivisionError``, ``KeyError`` or ``IndexError`` inside it is converted, with the
column of the operation that failed where known.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from typing import Any

from .._errors import ExpressionError
from ._expr_compiler import Compiler, source_offset
from ._expr_ops import (
    _METER,
    FUNCTIONS,
    MAX_DEPTH,
    MAX_INT_BITS,
    MAX_NODES,
    MAX_SIZE,
    MAX_SOURCE_LENGTH,
    MAX_WORK,
    _describe,
    _Fn,
    _Meter,
    _Refusal,
)
from ._expr_types import check_kinds

__all__ = [
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_INT_BITS",
    "MAX_NODES",
    "MAX_SIZE",
    "MAX_SOURCE_LENGTH",
    "MAX_WORK",
    "Expression",
    "compile_expression",
]


def _depth(tree: ast.AST) -> int:
    """Nesting depth, computed without recursion (the tree may be pathologically deep)."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


class Expression:
    """A compiled, checked expression. Immutable; safe to share between tasks and threads.

    ``source`` is the text, ``names`` every name it reads (not the called functions).
    """

    __slots__ = ("_fn", "names", "source")

    def __init__(self, source: str, names: frozenset[str], fn: _Fn) -> None:
        self.source = source
        self.names = names
        self._fn = fn

    def __repr__(self) -> str:
        return f"Expression({self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expression) and other.source == self.source

    def __hash__(self) -> int:
        return hash(("Expression", self.source))

    def evaluate(self, names: Mapping[str, Any]) -> Any:
        """Evaluate against ``names`` (output and memory keys). Does not block.

        Raises :class:`ExpressionError` (and nothing else) for an unknown name, a bound
        exceeded, or any error of an operation (type mismatch, division by zero, missing
        key or index); the error's ``position`` is the column of the failing operation.
        """
        token = _METER.set(_Meter(MAX_WORK))
        try:
            return self._fn(names)
        except _Refusal as refusal:
            raise ExpressionError(
                self.source, refusal.reason, position=refusal.position
            ) from refusal.__cause__
        except Exception as exc:  # e.g. truthiness of a foreign object: converted, not lost
            raise ExpressionError(self.source, _describe(exc)) from exc
        finally:
            _METER.reset(token)

    def truthy(self, names: Mapping[str, Any]) -> bool:
        """``bool(evaluate(names))``; raises :class:`ExpressionError` like ``evaluate``."""
        value = self.evaluate(names)
        try:
            return bool(value)
        except Exception as exc:
            raise ExpressionError(self.source, _describe(exc)) from exc


def compile_expression(source: str, *, kinds: bool = True) -> Expression:
    """Parse and check ``source``; the result is cached per source text.

    Raises :class:`ExpressionError` with a reason and a 1-based column for a syntax
    error, a forbidden construct or a bound exceeded (length, nodes, depth), and, with
    ``kinds`` (the default), an operation that fails whatever memory holds
    (``'1' == 1``, ``x / 0``: see ``_expr_types``). ``kinds=False`` leaves that check to
    the evaluation: how a graph already validated is evaluated, and how a graph recorded
    in a run's log before the check came in goes on as it did (``'1' == 1`` is false).
    """
    if not isinstance(source, str):
        raise ExpressionError(
            repr(source), f"an expression must be a string, got {type(source).__name__}"
        )
    return _compile_cached(source, kinds)


@functools.lru_cache(maxsize=2048)
def _compile_cached(source: str, kinds: bool) -> Expression:
    if len(source) > MAX_SOURCE_LENGTH:
        raise ExpressionError(source, f"longer than {MAX_SOURCE_LENGTH} characters ({len(source)})")
    # Leading blanks would be an IndentationError in "eval" mode: parse the stripped
    # text and shift every reported position by the blanks removed.
    text = source.strip()
    if not text:
        raise ExpressionError(source, "empty expression")
    lead = len(source) - len(source.lstrip())
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        position = None
        if exc.lineno is not None and exc.offset:
            position = source_offset(text.split("\n"), exc.lineno, exc.offset, lead)
        else:  # CPython reports offset 0 for an unexpected end of input
            position = lead + len(text) + 1
        raise ExpressionError(source, f"syntax error: {exc.msg}", position=position) from exc
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise ExpressionError(source, f"cannot parse: {_describe(exc)}") from exc
    # Count expressions only: contexts and operators are not work.
    nodes = sum(1 for node in ast.walk(tree) if isinstance(node, ast.expr))
    if nodes > MAX_NODES:
        raise ExpressionError(source, f"more than {MAX_NODES} syntax nodes ({nodes})")
    if _depth(tree) > MAX_DEPTH:
        raise ExpressionError(source, f"nested deeper than {MAX_DEPTH} levels")
    compiler = Compiler(source, text, lead)
    fn = compiler.compile(tree.body)
    if kinds:
        check_kinds(tree.body, source, compiler.column)  # what fails whatever memory holds
    return Expression(source, frozenset(compiler.names), fn)
