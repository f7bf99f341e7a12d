"""The work budget of one evaluation: bounded operations chained up to the source limit
are refused with ExpressionError once their total work passes MAX_WORK.

Time itself is measured by ``python -m benchmarks expressions``; these tests check that
the budget is charged for each kind of work, so the refusal does not depend on speed.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime._errors import ExpressionError
from runtime.spec._expr import MAX_SOURCE_LENGTH, compile_expression

ENV: dict[str, Any] = {
    "big": [0] * 200_000,
    "floats": [random.Random(7).random() for _ in range(20_000)],
    "nested": [[i] for i in range(5_000)],
    "table": {str(i): i for i in range(10_000)},
    "text": "a" * 200_000,
    "amount": 120,
}

#: Each term is cheap enough alone; chained to the source limit, each kind of work
#: (building, size checks, comparing, searching, sorting, summing, slicing, hashing)
#: adds up past the budget.
HEAVY_TERMS = [
    "[0]*99999+[]",
    "[0]*99999==[0]*99999",
    "-1 not in [0]*99999",
    "sorted([0]*30000)",
    "sorted(floats)",
    "-1 not in big",
    "-1 not in nested+nested",
    "nested==nested[:]",
    "sum(floats)",
    "sum([1]*99999)",
    "big[1:]",
    "max(floats)",
    "not any(big)",
    "{(0,)*99999}",
    "'x' not in table",
    "[[0]]*5000+[]",
    "[[0]*300]*300==[[0]*300]*300",
]


def chain(term: str, joiner: str = " and ") -> str:
    source = term
    while len(source) + len(joiner) + len(term) <= MAX_SOURCE_LENGTH:
        source += joiner + term
    return source


@pytest.mark.parametrize("term", HEAVY_TERMS)
def test_one_heavy_term_evaluates(term: str) -> None:
    compile_expression(term).evaluate(ENV)


@pytest.mark.parametrize("term", HEAVY_TERMS)
def test_heavy_terms_chained_to_the_source_limit_exceed_the_budget(term: str) -> None:
    source = chain(term)
    with pytest.raises(ExpressionError, match="more work than its budget") as info:
        compile_expression(source).evaluate(ENV)
    assert info.value.expression == source


def test_the_budget_is_per_evaluation() -> None:
    expression = compile_expression("[0]*99999+[] and [0]*99999+[]")
    for _ in range(20):  # a fresh budget each time: never refused
        assert expression.evaluate({}) == [0] * 99999


def test_an_ordinary_edge_expression_is_far_below_the_budget() -> None:
    source = chain("amount > 100 and len(text) > 3 and 'a' in text[:10]")
    assert compile_expression(source).evaluate(ENV) is True


@settings(max_examples=60, deadline=None)
@given(
    terms=st.lists(st.sampled_from([*HEAVY_TERMS, "amount", "1", "[1, 2]"]), min_size=1),
    joiners=st.lists(st.sampled_from([" and ", " or ", " == ", " + ", " * 2 and "])),
)
def test_any_chain_of_bounded_terms_returns_or_raises_expression_error(
    terms: list[str], joiners: list[str]
) -> None:
    source = terms[0]
    for i, term in enumerate(terms[1:]):
        part = joiners[i % len(joiners)] + term if joiners else " and " + term
        if len(source) + len(part) > MAX_SOURCE_LENGTH:
            break
        source += part
    try:
        compile_expression(source).evaluate(ENV)
    except ExpressionError:
        pass
