"""Expressions a user gets wrong are refused when the graph is validated, naming the edge,
the column and what to write instead; memory keys are read as they are written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import ExpressionError, Runtime, SpecErrors, graph_from_dict
from runtime.spec import compile_expression

pytestmark = pytest.mark.anyio


def _edge_graph(expression: str, outputs: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": "g",
        "entry_node": "a",
        "nodes": [
            {"id": "a", "function": "f", "output_keys": outputs or ["x", "amount", "status"]},
            {"id": "b", "function": "f", "output_keys": ["done"]},
        ],
        "edges": [
            {"source": "a", "target": "b", "condition": "conditional", "expression": expression}
        ],
    }


def _edge_problem(expression: str, outputs: list[str] | None = None) -> str:
    with pytest.raises(SpecErrors) as caught:
        graph_from_dict(_edge_graph(expression, outputs))
    [error] = caught.value.errors
    assert error.path == "edges[0].expression"
    return error.reason


@pytest.mark.parametrize(
    ("expression", "says", "neighbour"),
    [
        ("'a' > 1", "(column 1): compares a string with a number", "x > 1"),
        (
            "amount > 0 and len(x) > '3'",
            "(column 16): compares a number with a string",
            "len(x) > 3 and lower(status) == 'ok'",
        ),
        (
            "status == 1 or '1' == 1",
            "(column 16): compares a string with a number",
            "(1, 2) < (1, 3)",
        ),
        ("x > None", "(column 1): orders None", "x is None or amount >= 0"),
        ("len(x) + 'EUR' == x", "(column 1): adds a string to a number", "amount + 'EUR' == x"),
        (
            "'total: ' + len(x) == status",
            "(column 1): adds a number to a string",
            "str(amount) + ' EUR' == x",
        ),
        ("-'a' == x", "(column 1): negates a string", "amount / 2 > 1 and -amount < 0"),
        ("x in 5", "(column 1): looks for an item 'in' a number", "'a' in x or x in 'abc'"),
        ("amount / 0 > 1", "(column 1): divides by zero", "[1] + x == x"),
        ("amount % 0.0 > 1", "(column 1): divides by zero", "True + 1 == 2"),
        ("lower(5) == x", "(column 1): lower() takes a string, not a number", "'a' * 3 == x"),
        (
            "len(3) > x",
            "(column 1): len() takes a string or a collection, not a number",
            "x if amount > 1 else 'none'",
        ),
        ("x[0] > 1 and 5[0] > 1", "(column 14): subscripts a number", "False and 'a' < x"),
    ],
)
def test_an_operation_that_always_fails_is_refused_before_any_run(
    expression: str, says: str, neighbour: str
) -> None:
    reason = _edge_problem(expression)
    assert says in reason, reason
    graph_from_dict(_edge_graph(neighbour))  # what can succeed is accepted


def test_a_misspelt_memory_key_names_the_key_meant() -> None:
    reason = _edge_problem("amont > 100")
    assert reason.endswith("; did you mean 'amount'?"), reason


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("lenght(x) > 1", "calling lenght is not allowed; did you mean length()?"),
        ("x.lower() == 'ok'", "method calls are not allowed: write lower(x)"),
        ("x.startswith('a')", "method calls are not allowed: write startswith(x, 'a')"),
        ("x.total > 3", "attribute access is not allowed: write x['total']"),
    ],
)
def test_a_construct_of_python_says_how_the_language_spells_it(expression: str, says: str) -> None:
    reason = _edge_problem(expression)
    assert says in reason, reason


# --- names are read as written -----------------------------------------------------


def test_a_key_with_characters_python_would_normalise_is_read_as_written() -> None:
    # Python reads the identifier "ﬁx" (U+FB01) as "fix" (NFKC); a memory key is exact.
    expression = compile_expression("\ufb01x == 1")
    assert expression.names == frozenset({"\ufb01x"})
    assert expression.evaluate({"\ufb01x": 1}) is True
    with pytest.raises(ExpressionError, match="unknown name '\ufb01x'"):
        expression.evaluate({"fix": 1})
    graph_from_dict(_edge_graph("\ufb01x == 1 and über > 2", ["\ufb01x", "über"]))


async def test_a_run_routes_on_a_key_written_with_such_characters(tmp_path: Path) -> None:
    def write(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"\u2168": 9}  # ROMAN NUMERAL NINE, "IX" once normalised

    data = _edge_graph("\u2168 == 9", ["\u2168"])
    data["nodes"][1]["function"] = "done"
    data["terminal_nodes"] = ["b"]
    functions = {"f": write, "done": lambda inputs: {"done": True}}
    async with Runtime(tmp_path / "runs.db", functions=functions) as rt:
        result = await (await rt.start(graph_from_dict(data))).result()
    assert (result.status, result.path) == ("completed", ["a", "b"])
