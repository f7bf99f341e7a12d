"""Mistakes in a graph's shape, each refused by validation with one error naming the place
and what to write instead: a misspelt node id, a loop a run can never leave, edges that
contradict each other, fields the node's kind never reads, a router that routes nowhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime, SpecErrors, graph_from_dict

pytestmark = pytest.mark.anyio


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecErrors) as caught:
        graph_from_dict(data)
    return [(e.path, e.reason) for e in caught.value.errors]


def _graph(
    nodes: list[dict[str, Any]], edges: list[dict[str, Any]], **fields: Any
) -> dict[str, Any]:
    return {"id": "g", "entry_node": nodes[0]["id"], "nodes": nodes, "edges": edges, **fields}


def _fn(node_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": node_id, "function": "f", "output_keys": ["x"], **fields}


# --- node ids ----------------------------------------------------------------------


def test_a_misspelt_node_id_is_one_error_naming_the_id_meant() -> None:
    data = _graph(
        [_fn("start"), _fn("billing"), _fn("invoice"), _fn("done")],
        [
            {"source": "start", "target": "biling"},
            {"source": "billing", "target": "invoice"},
            {"source": "invoce", "target": "done"},
        ],
    )
    assert _problems(data) == [
        ("edges[0].target", "unknown node 'biling'; did you mean 'billing'?"),
        ("edges[2].source", "unknown node 'invoce'; did you mean 'invoice'?"),
    ]  # and not also "node 'billing' (nor 'invoice', nor 'done') is unreachable"


def test_every_reference_to_an_unknown_node_suggests_the_close_one() -> None:
    data = _graph(
        [_fn("start"), _fn("billing"), _fn("handoff")],
        [
            {"source": "start", "target": "billing"},
            {"source": "biling", "target": "handoff"},
            {
                "source": "start",
                "target": "handoff",
                "condition": "llm_decide",
                "fallback": "hand_off",
            },
            {
                "source": "start",
                "target": "billing",
                "condition": "llm_decide",
                "fallback": "handoff",
            },
        ],
        terminal_nodes=["handof"],
        pause_nodes=["billling"],
    )
    data["entry_node"] = "strat"
    problems = dict(_problems(data))
    assert problems["edges[1].source"] == "unknown node 'biling'; did you mean 'billing'?"
    assert problems["edges[2].fallback"] == (
        "unknown fallback node 'hand_off'; did you mean 'handoff'?"
    )
    assert problems["entry_node"] == "unknown node 'strat'; did you mean 'start'?"
    assert problems["terminal_nodes[0]"] == "unknown node 'handof'; did you mean 'handoff'?"
    assert problems["pause_nodes[0]"] == "unknown node 'billling'; did you mean 'billing'?"


def test_an_unknown_node_like_no_node_lists_the_nodes() -> None:
    data = _graph([_fn("start"), _fn("end")], [{"source": "start", "target": "zzz"}])
    problems = dict(_problems(data))
    assert problems["edges[0].target"] == "unknown node 'zzz' (the nodes: 'start', 'end')"


# --- loops with no way out ---------------------------------------------------------


def test_a_loop_no_run_can_leave_is_refused_naming_its_nodes() -> None:
    data = _graph(
        [_fn("draft"), _fn("review"), _fn("send")],
        [
            {"source": "draft", "target": "review"},
            {"source": "review", "target": "draft"},
            {"source": "review", "target": "send", "condition": "on_failure"},
            {"source": "send", "target": "send", "condition": "always"},
        ],
        terminal_nodes=["draft"],
    )
    # draft <-> review has ways out (draft is terminal, review's on_failure edge); send has none.
    [(path, reason)] = _problems(data)
    assert path == "nodes[2].id"
    assert reason.startswith("node 'send' loops back to itself with no way out"), reason
    assert "max_steps" in reason and "terminal_nodes" in reason


def test_a_two_node_loop_names_its_cycle() -> None:
    data = _graph(
        [_fn("a"), _fn("b"), _fn("c")],
        [
            {"source": "a", "target": "b"},
            {"source": "b", "target": "c", "condition": "always"},
            {"source": "c", "target": "b", "condition": "llm_decide", "fallback": "b"},
        ],
    )
    [(path, reason)] = _problems(data)
    assert path == "nodes[1].id"
    assert reason.startswith("nodes 'b' -> 'c' -> 'b' loop with no way out"), reason


def test_a_loop_is_accepted_once_it_has_a_way_out_or_a_bound_chosen_on_purpose() -> None:
    loop = _graph(
        [_fn("a"), _fn("b")], [{"source": "a", "target": "b"}, {"source": "b", "target": "b"}]
    )
    [(path, reason)] = _problems(loop)
    assert (path, reason.split(" with")[0]) == ("nodes[1].id", "node 'b' loops back to itself")
    leave = {"source": "b", "target": "b", "condition": "conditional", "expression": "x"}
    for way_out in (
        {"max_steps": 20},  # a bound chosen on purpose: the run fails there, as it says
        {"terminal_nodes": ["b"]},
        {"pause_nodes": ["b"]},
        {"edges": [loop["edges"][0], leave]},  # no match: no edge fires, the run ends
        {
            "edges": [
                *loop["edges"],
                {"source": "b", "target": "a", "condition": "on_failure"},
                {"source": "a", "target": "c", "condition": "on_failure"},
            ],
            "nodes": [*loop["nodes"], _fn("c")],
        },
    ):
        graph_from_dict({**loop, **way_out})


# --- edges that contradict each other -----------------------------------------------


def test_llm_decide_edges_of_one_node_naming_different_fallbacks_are_refused() -> None:
    data = _graph(
        [_fn("a"), _fn("b"), _fn("c")],
        [
            {"source": "a", "target": "b", "condition": "llm_decide", "fallback": "b"},
            {"source": "a", "target": "c", "condition": "llm_decide", "fallback": "c"},
        ],
    )
    [(path, reason)] = _problems(data)
    assert path == "edges[1].fallback"
    assert "edges[0] names 'b'" in reason and "one fallback" in reason, reason


def test_an_on_success_edge_beside_llm_decide_edges_never_fires_and_is_refused() -> None:
    data = _graph(
        [_fn("a"), _fn("b"), _fn("c"), _fn("d")],
        [
            {"source": "a", "target": "b", "condition": "llm_decide", "fallback": "b"},
            {"source": "a", "target": "c", "condition": "llm_decide", "fallback": "b"},
            {"source": "a", "target": "d"},
        ],
    )
    [(path, reason)] = _problems(data)
    assert path == "edges[2].condition"
    assert reason.startswith("never fires"), reason


def test_an_llm_decide_choice_offering_one_node_twice_is_refused() -> None:
    decide = {"source": "a", "target": "b", "condition": "llm_decide", "fallback": "b"}
    data = _graph([_fn("a"), _fn("b")], [decide, {**decide, "description": "again"}])
    [(path, reason)] = _problems(data)
    assert path == "edges[1]"
    assert reason == "repeats edges[0] ('a' -> 'b'): the same llm_decide choice twice; remove one"


# --- fields the node's kind never reads --------------------------------------------


@pytest.mark.parametrize(
    ("node", "path"),
    [
        ({"id": "a", "function": "f", "tools": ["search"]}, "nodes[0].tools"),
        ({"id": "a", "function": "f", "system_prompt": "Be brief."}, "nodes[0].system_prompt"),
        ({"id": "a", "kind": "router", "model": "fast"}, "nodes[0].model"),
        ({"id": "a", "kind": "llm", "function": "f"}, "nodes[0].function"),
    ],
)
def test_a_field_the_node_s_kind_ignores_is_refused(node: dict[str, Any], path: str) -> None:
    [(where, reason)] = _problems(_graph([node], []))
    assert where == path
    assert "ignored" in reason and "kind" in reason, reason


async def test_a_graph_built_in_python_is_refused_the_same_way_before_it_runs(
    tmp_path: Path,
) -> None:
    graph = GraphSpec(
        id="g",
        entry_node="a",
        nodes=[NodeSpec(id="a", function="f", tools=["search"]), NodeSpec(id="b", function="f")],
        edges=[EdgeSpec(source="a", target="bb")],
    )
    async with Runtime(tmp_path / "runs.db", functions={"f": lambda inputs: {}}) as rt:
        with pytest.raises(SpecErrors) as caught:
            await rt.start(graph)
        assert rt.store is not None and await rt.store.list_runs() == []
    assert [e.path for e in caught.value.errors] == ["nodes[0].tools", "edges[0].target"]


# --- a router that routes nowhere --------------------------------------------------


def test_a_router_without_edges_in_a_graph_with_terminal_nodes_is_refused() -> None:
    data = _graph(
        [_fn("a"), {"id": "route", "kind": "router"}, _fn("done")],
        [
            {"source": "a", "target": "route"},
            {"source": "a", "target": "done", "condition": "on_failure"},
        ],
        terminal_nodes=["done"],
    )
    [(path, reason)] = _problems(data)
    assert path == "nodes[1].id"
    assert reason.startswith(
        "router 'route' has no outgoing edges and is not one of terminal_nodes"
    ), reason
