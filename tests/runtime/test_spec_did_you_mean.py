"""A misspelt name in a graph names what it was probably meant to be."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runtime import GraphSpec, NodeSpec, Runtime, SpecError, parse_graph

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        (
            "id: g\nentry_node: a\nnodes: [{id: a, function: f, inputs_keys: [x]}]",
            "nodes[0].inputs_keys: Object contains unknown field `inputs_keys`; "
            "did you mean `input_keys`?",
        ),
        (
            "id: g\nentry_node: a\nnodes: [{id: a, function: f, retry: {max_attemps: 2}}]",
            "did you mean `max_attempts`?",
        ),
        ("id: g\nentrynode: a\nnodes: [{id: a, function: f}]", "did you mean `entry_node`?"),
        (
            "id: g\nentry_node: a\nnodes: [{id: a, function: f}]\nedges: [{source: a, traget: a}]",
            "edges[0].traget: Object contains unknown field `traget`; did you mean `target`?",
        ),
    ],
)
def test_an_unknown_field_names_the_field_it_is_closest_to(text: str, hint: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_graph(text, "yaml")
    assert hint in str(caught.value)


def test_an_unknown_field_like_no_field_suggests_nothing() -> None:
    with pytest.raises(SpecError) as caught:
        parse_graph("id: g\nentry_node: a\nnodes: [{id: a, function: f, zzz: 1}]", "yaml")
    assert "did you mean" not in str(caught.value)


async def test_a_misspelt_registered_function_names_the_registered_one() -> None:
    graph = GraphSpec(id="g", nodes=[NodeSpec(id="a", function="gret")], entry_node="a")
    async with Runtime(None, functions={"greet": lambda inputs: {}}) as rt:
        with pytest.raises(SpecError) as caught:
            await rt.start(graph)
    assert "'gret' is not a registered function; did you mean 'greet'?" in str(caught.value)


async def test_a_misspelt_attribute_of_an_allowed_module_names_the_one_it_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "didyoumean_steps.py").write_text("def greet(inputs):\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "didyoumean_steps", raising=False)
    node = NodeSpec(id="a", function="didyoumean_steps:greeet")
    graph = GraphSpec(id="g", nodes=[node], entry_node="a")
    async with Runtime(None, allow_imports=["didyoumean_steps"]) as rt:
        with pytest.raises(SpecError) as caught:
            await rt.start(graph)
    assert "module 'didyoumean_steps' has no attribute 'greeet'; did you mean 'greet'?" in str(
        caught.value
    )
