"""A branch of a fan-out that surely fans out again (two or more success edges that all
fire) is refused when the graph is validated, before anything runs; a fan-out after the
branches joined is fine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import EdgeSpec, GraphSpec, Runtime, SpecErrors, validate_graph
from runtime.testing import function_node

pytestmark = pytest.mark.anyio


def _graph(nodes: str, edges: list[tuple[str, str]]) -> GraphSpec:
    return GraphSpec(
        id="fans",
        nodes=[function_node(n, "step") for n in nodes],
        edges=[EdgeSpec(source=s, target=t) for s, t in edges],
        entry_node=nodes[0],
    )


NESTED = _graph(
    "abcdef", [("a", "b"), ("a", "c"), ("c", "d"), ("c", "e"), ("b", "f"), ("d", "f"), ("e", "f")]
)
AFTER_THE_JOIN = _graph(
    "abcdefg",
    [
        ("a", "b"),
        ("a", "c"),
        ("b", "d"),
        ("c", "d"),
        ("d", "e"),
        ("d", "f"),
        ("e", "g"),
        ("f", "g"),
    ],
)


def step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {}


async def test_a_branch_that_fans_out_again_is_refused_before_it_runs(tmp_path: Path) -> None:
    with pytest.raises(SpecErrors) as refused:
        validate_graph(NESTED)
    assert [(e.path, e.reason) for e in refused.value.errors] == [
        (
            "nodes[2]",
            "node 'c' fans out inside a branch of node 'a''s fan-out (a branch cannot fan out "
            "again: join the branches first)",
        )
    ]
    async with Runtime(tmp_path / "runs.db", functions={"step": step}) as rt:
        with pytest.raises(SpecErrors):
            await rt.start(NESTED)
        assert rt.store is not None and await rt.store.list_runs() == []


async def test_a_fan_out_after_the_join_runs(tmp_path: Path) -> None:
    validate_graph(AFTER_THE_JOIN)
    async with Runtime(tmp_path / "runs.db", functions={"step": step}) as rt:
        result = await (await rt.start(AFTER_THE_JOIN)).result()
    assert result.status == "completed" and result.path[-1] == "g"
