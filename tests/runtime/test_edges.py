"""Edge resolution against a graph's pre-sorted edge index."""

from __future__ import annotations

from typing import Any

import pytest

from runtime._errors import SpecErrors
from runtime.engine._edges import decide_edge, resolve_edges
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec
from runtime.spec._validate import validate_graph

pytestmark = pytest.mark.anyio


def _graph(edges: list[EdgeSpec]) -> GraphSpec:
    ids = sorted({e.source for e in edges} | {e.target for e in edges} | {"a"})
    return GraphSpec(
        id="g",
        nodes=[NodeSpec(id=i, kind="router") for i in ids],
        edges=edges,
        entry_node="a",
    )


def _edge(target: str, condition: str = "on_success", **kw: Any) -> EdgeSpec:
    return EdgeSpec(source="a", target=target, condition=condition, **kw)  # type: ignore[arg-type]


def test_a_higher_priority_conditional_edge_wins_over_declaration_order() -> None:
    graph = _graph(
        [
            _edge("b", "conditional", expression="x > 0"),
            _edge("c", "conditional", expression="x > 0", priority=5),
            _edge("d", "always"),
        ]
    )
    routes = resolve_edges(graph, "a", success=True, memory={"x": 1}, outputs={})
    assert routes is not None
    assert [(r.target, r.index, r.condition, r.reason) for r in routes] == [
        ("c", 1, "conditional", "x > 0")
    ]


def test_expressions_read_the_outputs_over_memory() -> None:
    graph = _graph([_edge("b", "conditional", expression="x == 2"), _edge("c", "on_success")])
    routes = resolve_edges(graph, "a", success=True, memory={"x": 1}, outputs={"x": 2})
    assert routes is not None and [r.target for r in routes] == ["b"]
    routes = resolve_edges(graph, "a", success=True, memory={"x": 2}, outputs={"x": 1})
    assert routes is not None and [r.target for r in routes] == ["c"]


def test_success_and_failure_fire_their_edges_in_priority_then_declaration_order() -> None:
    graph = _graph(
        [
            _edge("b", "on_success"),
            _edge("c", "on_failure"),
            _edge("d", "always", priority=1),
            _edge("e", "on_failure", priority=2),
            _edge("f", "on_success"),
        ]
    )
    ok = resolve_edges(graph, "a", success=True, memory={}, outputs={})
    failed = resolve_edges(graph, "a", success=False, memory={}, outputs={})
    assert ok is not None and [r.target for r in ok] == ["d", "b", "f"]
    assert failed is not None and [r.target for r in failed] == ["e", "d", "c"]
    assert [r.index for r in failed] == [3, 2, 1]


def test_llm_decide_edges_are_left_to_the_model() -> None:
    graph = _graph(
        [
            _edge("b", "llm_decide", fallback="c"),
            _edge("c", "llm_decide", fallback="c"),
        ]
    )
    assert resolve_edges(graph, "a", success=True, memory={}, outputs={}) is None
    failed = resolve_edges(graph, "a", success=False, memory={}, outputs={})
    assert failed == []


async def test_llm_decide_without_a_provider_takes_the_fallback() -> None:
    graph = _graph([_edge("b", "llm_decide", fallback="c"), _edge("c", "llm_decide")])
    route = await decide_edge(graph, "a", {}, None)
    assert (route.target, route.condition) == ("c", "llm_decide")
    assert route.reason.startswith("fallback")


def test_a_node_without_edges_resolves_to_nothing() -> None:
    graph = _graph([_edge("b")])
    assert resolve_edges(graph, "b", success=True, memory={}, outputs={}) == []


def test_an_invalid_graph_is_refused_every_time_it_is_validated() -> None:
    graph = _graph([_edge("b", "conditional", expression="x >")])
    for _ in range(2):  # only a sound graph is remembered as validated
        with pytest.raises(SpecErrors):
            validate_graph(graph)
    sound = _graph([_edge("b")])
    validate_graph(sound)
    validate_graph(sound)
