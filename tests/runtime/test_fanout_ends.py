"""A fan-out whose branches never meet again ends the run with them: completed when one
branch ended at a terminal node (if the graph names any), failed otherwise, as a node on
the main path from which no edge fires."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime._runtime import Runtime
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec

pytestmark = pytest.mark.anyio


async def plain(inputs: dict[str, Any]) -> dict[str, Any]:
    return {}


def _graph(terminal: list[str]) -> GraphSpec:
    # a forks into x and y, which meet nowhere; z, reached only when flag == 1, is the end.
    return GraphSpec(
        id="g",
        nodes=[NodeSpec(id=n, function="plain") for n in "axyz"],
        edges=[
            EdgeSpec(source="a", target="x"),
            EdgeSpec(source="a", target="y"),
            EdgeSpec(source="a", target="z", condition="conditional", expression="flag == 1"),
        ],
        entry_node="a",
        terminal_nodes=terminal,
    )


async def test_branches_that_end_short_of_every_terminal_node_fail_the_run(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "run.db", functions={"plain": plain}) as rt:
        handle = await rt.start(_graph(["z"]), input={"flag": 0})
        result = await handle.result()
        assert result.status == "failed" and result.quality == "failed"
        assert result.error == "no branch ended at a terminal node (they ended at 'x', 'y')"
        assert sorted(result.path) == ["a", "x", "y"]
        state = await rt.get_state(handle.run_id)
        assert state.status == "failed" and state.fanout is None


async def test_one_branch_ending_at_a_terminal_node_completes_the_run(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "run.db", functions={"plain": plain}) as rt:
        result = await (await rt.start(_graph(["x", "z"]), input={"flag": 0})).result()
        assert result.status == "completed" and result.quality == "clean"
        # A graph that names no terminal node completes where its branches end.
        result = await (await rt.start(_graph([]), input={"flag": 0})).result()
        assert result.status == "completed" and result.quality == "clean"
