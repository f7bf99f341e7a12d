"""Hostile expressions: every one must be refused with ExpressionError, and nothing else.

Refusal may happen at compile time (forbidden construct, bound on the source) or at
evaluation (a bound on a value, a failing operation); both count. A hang would fail the
test through the per-test timeout.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime._errors import ExpressionError
from runtime.spec._expr import compile_expression

pytestmark = pytest.mark.anyio

ENV: dict[str, Any] = {
    "x": [1, 2, 3],
    "s": "abc",
    "d": {"a": 1, "f": len},
    "n": 5,
    "y": 1,
    "z": 2,
    # Memory may legitimately hold big values; building bigger ones from them is refused.
    "big": [0] * 200_000,
    "bigs": "a" * 200_000,
}

HOSTILE: list[str] = [
    # attribute and dunder escapes
    "().__class__.__bases__[0].__subclasses__()",
    "[].__class__.__base__.__subclasses__()",
    "x.__class__",
    "x.__dict__",
    "x[0].__class__",
    "x[0].__globals__",
    "d['a'].__class__",
    "len.__call__('a')",
    "len.__self__",
    "x.append(1)",
    "s.upper()",
    "'abc'.upper()",
    "'{}'.format(1)",
    "''.join(x)",
    "str.join('', x)",
    # names that are not data
    "__import__",
    "__import__('os')",
    "__import__('os').system('true')",
    "__builtins__",
    "__builtins__['eval']",
    "__class__",
    "_private",
    "_",
    "print",
    "missing_name",
    "x[len]",
    # calls outside the allow-list, or to non-names
    "open('/etc/passwd')",
    "open('/etc/passwd').read()",
    "eval('1')",
    "exec('x = 1')",
    "getattr(x, '__class__')",
    "setattr(x, 'a', 1)",
    "globals()",
    "locals()",
    "vars()",
    "dir()",
    "compile('1', 'f', 'eval')",
    "type(x)",
    "type('X', (), {})",
    "object()",
    "help()",
    "input()",
    "print(1)",
    "breakpoint()",
    "memoryview(b'a')",
    "bytearray(10**9)",
    "range(10**9)",
    "list(range(10**9))",
    "not_allowed_fn(1)",
    "x[0]()",
    "d['f']('abc')",
    "(x)()",
    "(lambda: 1)()",
    # forbidden syntax
    "lambda: 1",
    "[i for i in x]",
    "{i for i in x}",
    "{i: i for i in x}",
    "(i for i in x)",
    "sum(i for i in x)",
    "(q := 1)",
    "x if y else (q := 1)",
    "f'{x}'",
    "f'{x.__class__}'",
    "await x",
    "(yield)",
    "(yield from x)",
    "b'bytes'",
    "1j",
    "...",
    "import os",
    "x = 1",
    "1; 2",
    "del x",
    "\x00",
    "",
    "   ",
    "1 +",
    "x is 1",
    "x is x",
    "y is not True",
    # starred, unpacking and keyword arguments
    "len(*x)",
    "max(*x)",
    "[*x]",
    "(*x,)",
    "{*x}",
    "{**d}",
    "{'a': 1, **d}",
    "max(x, key=len)",
    "sorted(x, reverse=True)",
    "round(1.5, ndigits=1)",
    "len(s, **d)",
    "max(x, default=0)",
    # bit operations and shifts
    "1 << 10**9",
    "1 >> 1",
    "1 | 2",
    "1 & 2",
    "1 ^ 2",
    "~1",
    "x @ x",
    # huge numbers
    "10**10**10",
    "9**9**9",
    "2**100000",
    "(-2)**100000",
    "2**1024",
    "10**400 * 10**400",
    "int(1e308) * int(1e308)",
    "10**308 * 10**10",
    "abs(-10**400)",
    "sum([10**307] * 100)",
    "int('9' * 5000)",
    "int('1' * 400)",
    "10.0 ** 400",
    "round(5, -10**9)",
    "round(5, 10**9)",
    "round(5, -1000)",
    "1" + "0" * 400,
    # huge strings and collections
    "'a' * 10**9",
    "[1] * 10**9",
    "10**9 * s",
    "s * 10**9",
    "x * 10**9",
    "True * 'a' * 10**6",
    "'a' * 100001",
    "'a' * 50000 + 'a' * 50001",
    "[0] * 100000 + [0]",
    "[[0] * 1000] * 1000",
    "('a',) * 200000",
    "[x] * 100000",
    "s[::-1] * 10**5",
    "str(10**300) * 1000",
    "upper('\u00df' * 60000)",
    "sorted('a' * 10**6)",
    "sorted(s * 10**6)",
    "min([0] * 10**7)",
    "max('a' * 10**8)",
    "len('a' * 10**9)",
    "str([0] * 10**6)",
    "sum([1] * 10**6)",
    "str([[0] * 100000] * 2)",
    "sorted(bigs)",
    "sorted(big)",
    "str(big)",
    "[big]",
    "(big, big)",
    "{big[0]: big}",
    "{'k': bigs}",
    "big + big",
    "bigs + bigs",
    "big + [1]",
    "upper(bigs)",
    "lower(bigs)",
    "big * 2",
    "'%s' % 1",
    "'%999999999d' % 1",
    "s % ()",
    # bounds on the source itself
    "(" * 10_000 + "1" + ")" * 10_000,
    "[" * 100 + "]" * 100,
    "-" * 900 + "1",
    "not " * 100 + "y",
    "x" + "[0]" * 60,
    "1" + "+1" * 50_000,
    "n" * 100_001,
    "'" + "a" * 100_000 + "'",
    # failing operations
    "1 / 0",
    "1 // 0",
    "1 % 0",
    "'a' < 1",
    "d['missing']",
    "x[100]",
    "x[1:2:0]",
    "(-8) ** 0.5",
    "d * 2",
    "s - s",
    "-s",
    "+[1]",
    "lower(1)",
    "startswith(1, 'a')",
    "contains(1, 1)",
    "len(1)",
    "min()",
    "max([])",
    "len(x, x)",
    "sorted([1, 'a'])",
    "int('abc')",
    "float('abc')",
    "{[1]: 2}",
    "{[1]}",
    "sum(['a'])",
    "sum(x, [])",
]


def test_the_hostile_list_is_long_and_distinct() -> None:
    assert len(HOSTILE) >= 100
    assert len(set(HOSTILE)) == len(HOSTILE)


@pytest.mark.parametrize("source", HOSTILE, ids=[repr(s[:40]) for s in HOSTILE])
def test_hostile_expression_is_refused(source: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression(source).evaluate(ENV)
    assert info.value.expression == source
    assert info.value.reason


def test_refusal_at_compile_time_names_the_construct_and_column() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression("a and x.__class__")
    assert "attribute access" in info.value.reason
    assert info.value.position == 7


def test_huge_power_is_refused_before_it_is_computed() -> None:
    expression = compile_expression("10**10**10")
    with pytest.raises(ExpressionError, match=r"power above 2\*\*1024"):
        expression.evaluate({})


def test_function_names_are_not_looked_up_in_the_mapping() -> None:
    # A hostile mapping cannot swap in its own callable under an allowed name.
    env = {"len": eval, "s": "1+1"}
    assert compile_expression("len(s)").evaluate(env) == 3


def test_a_name_holding_a_callable_cannot_be_called() -> None:
    with pytest.raises(ExpressionError, match="calling f is not allowed"):
        compile_expression("f('x')").evaluate({"f": print})
