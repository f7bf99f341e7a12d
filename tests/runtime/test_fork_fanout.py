"""A fork inside a fan-out's edges (before its last ``edge.taken`` or its
``branches.forked``) is refused, naming where the edges end: resumed from there, the copy
would go on with some of its branches only, or never join. At the end of the edges, and
anywhere else, it reproduces the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import EdgeSpec, GraphSpec, RunStateError, Runtime
from runtime.events import BranchesForked, EdgeTaken
from runtime.testing import function_node

pytestmark = pytest.mark.anyio

FUNCTIONS: dict[str, Any] = {
    "a": lambda inputs: {"x": 1},
    "b": lambda inputs: {"bk": 1},
    "c": lambda inputs: {"ck": 1},
    "d": lambda inputs: {"dk": 1},
}

FAN = GraphSpec(
    id="fan",
    nodes=[function_node(n) for n in "abcd"],
    edges=[
        EdgeSpec(source="a", target="b"),
        EdgeSpec(source="a", target="c"),
        EdgeSpec(source="b", target="d"),
        EdgeSpec(source="c", target="d"),
    ],
    entry_node="a",
)


async def test_a_fork_among_a_fan_outs_edges_is_refused(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        source = await (await rt.start(FAN)).result()
        assert source.status == "completed"
        events = await rt.read_events(source.run_id)
        edges = [e.seq for e in events if type(e.body) is EdgeTaken and e.body.source == "a"]
        forked = next(e.seq for e in events if type(e.body) is BranchesForked)
        assert edges == [forked - 2, forked - 1]
        for at in edges:
            with pytest.raises(
                RunStateError, match=f"among node 'a'.s edges, which end at seq {forked}"
            ):
                await rt.fork(source.run_id, at)
        copy = await (await rt.fork(source.run_id, forked)).result()
        assert copy.status == "completed" and copy.memory == source.memory
        before = await (await rt.fork(source.run_id, 2)).result()  # a started: it runs again
        assert before.status == "completed" and before.memory == source.memory
        # The refusal says the run's status, not the prefix's.
        with pytest.raises(RunStateError) as refused:
            await rt.fork(source.run_id, edges[0])
        assert refused.value.status == "completed"
