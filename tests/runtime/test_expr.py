"""The safe expression language: what it computes, and that it only ever raises its error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime._errors import ExpressionError
from runtime.spec._expr import FUNCTIONS, MAX_SIZE, Expression, compile_expression

pytestmark = pytest.mark.anyio


def ev(source: str, **names: Any) -> Any:
    return compile_expression(source).evaluate(names)


# --- the seed's examples and everyday conditions -----------------------------------


def test_confidence_threshold() -> None:
    expression = compile_expression("confidence >= 0.8")
    assert expression.truthy({"confidence": 0.8}) is True
    assert expression.truthy({"confidence": 0.79}) is False


def test_category_membership() -> None:
    expression = compile_expression("category in ['billing', 'technical']")
    assert expression.truthy({"category": "billing"})
    assert not expression.truthy({"category": "sales"})
    assert ev("category not in ('billing', 'technical')", category="sales") is True


def test_memory_subscripts() -> None:
    memory = {"draft": "x" * 300, "order": {"items": [{"amount": 5}, {"amount": 7}]}}
    assert ev("len(memory['draft']) > 280", memory=memory) is True
    assert ev("memory['order']['items'][1]['amount']", memory=memory) == 7
    assert ev("memory['order']['items'][-1]['amount'] > 6", memory=memory) is True


def test_names_lists_every_name_read_but_not_functions() -> None:
    expression = compile_expression("len(draft) > limit and meta['k'] in allowed")
    assert expression.names == frozenset({"draft", "limit", "meta", "allowed"})
    assert compile_expression("1 + 2").names == frozenset()


def test_unknown_name_is_an_error_naming_it() -> None:
    with pytest.raises(ExpressionError, match="unknown name 'confidence'") as info:
        ev("confidence > 0.5 and category == 'x'", category="x")
    assert info.value.position == 1


def test_operators_behave_like_python() -> None:
    assert ev("1 + 2 * 3 - 4 / 2") == 5.0
    assert ev("7 // 2 + 7 % 3") == 4
    assert ev("2 ** 10") == 1024
    assert ev("2 ** -1") == 0.5
    assert ev("-x + +y", x=3, y=5) == 2
    assert ev("'ab' + 'cd'") == "abcd"
    assert ev("[1] + [2]") == [1, 2]
    assert ev("'ab' * 3") == "ababab"
    assert ev("3 * [0]") == [0, 0, 0]
    assert ev("'a' * -1") == ""


def test_chained_comparisons() -> None:
    assert ev("1 < x <= 3", x=3) is True
    assert ev("1 < x <= 3", x=4) is False
    assert ev("0 <= x < 10 != x", x=5) is True


def test_boolean_logic_short_circuits() -> None:
    # The right side would fail (unknown name) if it were evaluated.
    assert ev("x > 1 or missing", x=2) is True
    assert ev("x > 1 and missing", x=0) is False
    assert ev("not x", x=[]) is True
    assert ev("a or b", a=0, b="fallback") == "fallback"


def test_is_none_and_is_not_none() -> None:
    assert ev("x is None", x=None) is True
    assert ev("x is not None", x=0) is True
    assert ev("x is None or x > 3", x=None) is True


def test_conditional_expression_evaluates_only_the_chosen_branch() -> None:
    assert ev("'big' if n > 10 else 'small'", n=11) == "big"
    assert ev("missing if n > 10 else 'small'", n=1) == "small"


def test_subscripts_and_slices() -> None:
    assert ev("x[1:3]", x=[1, 2, 3, 4]) == [2, 3]
    assert ev("x[::-1]", x="abc") == "cba"
    assert ev("x[:2]", x=(1, 2, 3)) == (1, 2)
    assert ev("d['a']['b']", d={"a": {"b": 4}}) == 4


def test_literals() -> None:
    assert ev("{'a': 1, 'b': [1, 2]}") == {"a": 1, "b": [1, 2]}
    assert ev("{1, 2, 2}") == {1, 2}
    assert ev("(1,)") == (1,)
    assert ev("None") is None
    assert ev("True and 1.5") == 1.5


def test_every_allowed_function() -> None:
    assert ev("len(x)", x=[1, 2]) == 2
    assert ev("min(3, 1, 2)") == 1
    assert ev("min(x)", x=[3, 1]) == 1
    assert ev("max(x)", x=[3, 1]) == 3
    assert ev("abs(-2)") == 2
    assert ev("round(2.567, 2)") == 2.57
    assert ev("round(2.5)") == 2
    assert ev("int('42')") == 42
    assert ev("int('ff', 16)") == 255
    assert ev("float('1.5')") == 1.5
    assert ev("str(12)") == "12"
    assert ev("bool(0)") is False
    assert ev("sum([1, 2, 3.5])") == 6.5
    assert ev("sum([1, 2], 10)") == 13
    assert ev("any([0, 1])") is True
    assert ev("all([1, 0])") is False
    assert ev("sorted([3, 1, 2])") == [1, 2, 3]
    assert ev("lower('AbC')") == "abc"
    assert ev("upper('AbC')") == "ABC"
    assert ev("startswith('hello', 'he')") is True
    assert ev("startswith('hello', ('x', 'h'))") is True
    assert ev("endswith('hello', 'lo')") is True
    assert ev("contains('hello', 'ell')") is True
    assert ev("contains([1, 2], 3)") is False
    assert ev("length('abc')") == 3  # the seed's name for len
    assert set(FUNCTIONS) == {
        "len", "length", "min", "max", "abs", "round", "int", "float", "str", "bool", "sum",
        "any", "all", "sorted", "lower", "upper", "startswith", "endswith", "contains",
    }  # fmt: skip


def test_bounds_allow_values_up_to_the_limit() -> None:
    assert len(ev("'a' * n", n=MAX_SIZE)) == MAX_SIZE
    assert len(ev("[0] * n", n=MAX_SIZE)) == MAX_SIZE
    assert ev("2 ** 1023") == 2**1023
    assert ev("len(big)", big=[0] * (MAX_SIZE * 2)) == MAX_SIZE * 2
    assert ev("big[:3]", big=[0] * (MAX_SIZE * 2)) == [0, 0, 0]


def test_evaluation_error_carries_the_column_of_the_failing_operation() -> None:
    with pytest.raises(ExpressionError) as info:
        ev("a > 0 and b / 0 > 1", a=1, b=2)
    assert "ZeroDivisionError" in info.value.reason
    assert info.value.position == 11


def test_syntax_error_carries_a_column() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression("a b")
    assert info.value.reason.startswith("syntax error")
    assert info.value.position == 3


def test_leading_and_trailing_blanks_are_allowed() -> None:
    assert ev("  x + 1  ", x=1) == 2
    with pytest.raises(ExpressionError) as info:
        compile_expression("  x.y")
    assert info.value.position == 3


def test_non_string_source_is_an_expression_error() -> None:
    with pytest.raises(ExpressionError):
        compile_expression(None)  # type: ignore[arg-type]


def test_compiled_expressions_are_cached_and_comparable() -> None:
    a = compile_expression("x > 1")
    assert compile_expression("x > 1") is a
    assert a == Expression("x > 1", frozenset({"x"}), lambda env: None)
    assert hash(a) == hash(compile_expression("x > 1"))
    assert "x > 1" in repr(a)


def test_a_non_mapping_or_foreign_value_gives_an_expression_error() -> None:
    class Untruthy:
        def __bool__(self) -> bool:
            raise RuntimeError("no truth")

    with pytest.raises(ExpressionError, match="no truth"):
        compile_expression("x").truthy({"x": Untruthy()})
    with pytest.raises(ExpressionError, match="no truth"):
        ev("x and 1", x=Untruthy())
    with pytest.raises(ExpressionError):
        compile_expression("x").evaluate(None)  # type: ignore[arg-type]


def test_evaluation_is_repeatable() -> None:
    expression = compile_expression("[a] * 2")
    first = expression.evaluate({"a": 1})
    first.append(9)  # results are fresh values: mutating one does not leak
    assert expression.evaluate({"a": 1}) == [1, 1]


# --- properties --------------------------------------------------------------------

NAMES = ["a", "b", "c", "s", "xs", "d"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=5), children, max_size=5)
    ),
    max_leaves=20,
)
environments = st.dictionaries(st.sampled_from(NAMES), json_values, max_size=len(NAMES))

SAFE_ATOMS = st.one_of(
    st.sampled_from([*NAMES, "None", "True", "False"]),
    st.integers(min_value=-(10**6), max_value=10**40).map(str),
    st.sampled_from(["0", "1", "2", "10", "64", "1000", "10**9", "0.5", "1e308", "-1"]),
    st.text(alphabet="ab'\\%{}", max_size=6).map(repr),
)
HOSTILE_ATOMS = st.sampled_from(["_x", "zz", "__import__", "print"])
SAFE_BINARY = ["+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", "<=", ">", ">=",
               "in", "not in", "and", "or"]  # fmt: skip
HOSTILE_BINARY = ["is", "is not", "<<", "|", "@"]
SAFE_UNARY = ["not ", "-", "+"]


def _combine(hostile: bool) -> Any:
    binary = SAFE_BINARY + HOSTILE_BINARY if hostile else SAFE_BINARY
    unary = [*SAFE_UNARY, "~"] if hostile else SAFE_UNARY
    callables = [*FUNCTIONS, "eval", "getattr", "open"] if hostile else list(FUNCTIONS)

    def combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        options = [
            st.tuples(children, st.sampled_from(binary), children).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            st.tuples(children, st.sampled_from(["is None", "is not None"])).map(
                lambda t: f"({t[0]} {t[1]})"
            ),
            st.tuples(st.sampled_from(unary), children).map(lambda t: f"({t[0]}{t[1]})"),
            st.tuples(st.sampled_from(callables), st.lists(children, max_size=3)).map(
                lambda t: f"{t[0]}({', '.join(t[1])})"
            ),
            st.tuples(children, children).map(lambda t: f"{t[0]}[{t[1]}]"),
            st.tuples(children, children, children).map(lambda t: f"{t[0]}[{t[1]}:{t[2]}]"),
            st.lists(children, max_size=4).map(lambda xs: f"[{', '.join(xs)}]"),
            st.lists(children, max_size=3).map(lambda xs: f"({', '.join(xs)},)"),
            st.lists(st.tuples(children, children), max_size=3).map(
                lambda ps: "{" + ", ".join(f"{k}: {v}" for k, v in ps) + "}"
            ),
            st.tuples(children, children, children).map(
                lambda t: f"({t[0]} if {t[1]} else {t[2]})"
            ),
        ]
        if hostile:
            options += [
                children.map(lambda c: f"{c}.__class__"),
                children.map(lambda c: f"[q for q in {c}]"),
                children.map(lambda c: f"len(*{c})"),
            ]
        return st.one_of(*options)

    return combine


safe_expressions = st.recursive(SAFE_ATOMS, _combine(hostile=False), max_leaves=12)
mixed_expressions = st.recursive(SAFE_ATOMS | HOSTILE_ATOMS, _combine(hostile=True), max_leaves=12)


def _only_expression_errors(source: str, env: dict[str, Any]) -> None:
    try:
        expression = compile_expression(source)
    except ExpressionError:
        return
    try:
        expression.evaluate(env)
        expression.truthy(env)
    except ExpressionError:
        pass


@settings(max_examples=200, deadline=None)
@given(source=st.text(max_size=200), env=environments)
def test_random_text_only_ever_raises_expression_error(source: str, env: dict[str, Any]) -> None:
    _only_expression_errors(source, env)


@settings(max_examples=200, deadline=None)
@given(source=safe_expressions, env=environments)
def test_random_allowed_expressions_only_ever_raise_expression_error(
    source: str, env: dict[str, Any]
) -> None:
    _only_expression_errors(source, env)


@settings(max_examples=200, deadline=None)
@given(source=mixed_expressions, env=environments)
def test_random_mixed_expressions_only_ever_raise_expression_error(
    source: str, env: dict[str, Any]
) -> None:
    _only_expression_errors(source, env)


small_ints = st.integers(min_value=-50, max_value=50).map(str)
ARITH = ["+", "-", "*", "//", "%", "==", "<", ">=", "!="]


@st.composite
def arithmetic(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(small_ints | st.sampled_from(["a", "b"]))
    left = draw(arithmetic(depth - 1))
    right = draw(arithmetic(depth - 1))
    return f"({left} {draw(st.sampled_from(ARITH))} {right})"


@settings(max_examples=200, deadline=None)
@given(
    source=arithmetic(),
    a=st.integers(min_value=-100, max_value=100),
    b=st.integers(min_value=-100, max_value=100),
)
def test_arithmetic_agrees_with_python(source: str, a: int, b: int) -> None:
    try:
        expected: Any = eval(source, {"__builtins__": {}}, {"a": a, "b": b})
    except ZeroDivisionError:
        with pytest.raises(ExpressionError, match="ZeroDivisionError"):
            ev(source, a=a, b=b)
        return
    assert ev(source, a=a, b=b) == expected
