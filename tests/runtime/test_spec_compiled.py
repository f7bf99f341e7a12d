"""Graph structures are compiled once per graph hash: an equal spec built anew (an app
building its graph per request) is not validated again, a different one is."""

from __future__ import annotations

import pytest

from runtime._errors import SpecErrors
from runtime.spec import _compiled
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec, graph_hash, shared_graph_dict
from runtime.spec._validate import validate_graph


def _graph(target: str = "b", graph_id: str = "compiled") -> GraphSpec:
    return GraphSpec(
        id=graph_id,
        nodes=[NodeSpec(id="a", function="f"), NodeSpec(id="b", function="f")],
        edges=[EdgeSpec(source="a", target=target)],
        entry_node="a",
    )


def test_an_equal_spec_built_anew_shares_the_validated_structure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = _graph()
    validate_graph(first)
    calls: list[GraphSpec] = []
    monkeypatch.setattr(
        "runtime.spec._validate.check_types", lambda graph: calls.append(graph) or []
    )
    again = _graph()
    assert again is not first and again == first
    validate_graph(again)
    assert calls == []  # not validated again
    assert graph_hash(again) == graph_hash(first)
    assert shared_graph_dict(again) is shared_graph_dict(first)
    assert again.node("b") is again.nodes[1]  # lookups hand out its own nodes


def test_a_spec_that_differs_is_validated_and_its_errors_raised() -> None:
    validate_graph(_graph())
    broken = _graph(target="nowhere")
    with pytest.raises(SpecErrors, match="nowhere"):
        validate_graph(broken)
    with pytest.raises(SpecErrors, match="nowhere"):  # and not remembered as valid
        validate_graph(_graph(target="nowhere"))


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_compiled, "KEEP", 3)
    monkeypatch.setattr(_compiled, "_BY_HASH", {})
    graphs = [_graph(graph_id=f"g{i}") for i in range(5)]
    for graph in graphs:
        validate_graph(graph)
    assert len(_compiled._BY_HASH) == 3
    assert set(_compiled._BY_HASH) == {graph_hash(g) for g in graphs[2:]}
