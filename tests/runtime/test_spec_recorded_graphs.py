"""A graph a run already recorded is read back with the checks that keep a run sound, not
with the checks of what a new graph surely does that nobody meant (fields its nodes' kinds
ignore, a loop no run can leave, contradicting edges): a run started before such a check
came in still resumes, forks and is cancelled from another process as it was, while a new
run of the same graph is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import SqliteEventStore
from runtime import Runtime, SpecErrors
from runtime.events import (
    EdgeTaken,
    MemoryWritten,
    NodeCompleted,
    NodeStarted,
    RunPaused,
    RunStarted,
)
from runtime.spec import compact_graph_dict, graph_from_dict
from runtime.testing import linear_graph

pytestmark = pytest.mark.anyio

FUNCTIONS: dict[str, Any] = {"a": lambda inputs: {"x": 1}, "b": lambda inputs: {"y": 2}}


def _recorded_graph() -> dict[str, Any]:
    """The graph of a run an earlier release started: ``model`` set on a function node,
    which a new graph is refused for (it would be ignored)."""
    graph = compact_graph_dict(linear_graph(["a", "b"]))
    graph["nodes"][0]["model"] = "gpt-4o"
    return graph


async def _paused_run(path: Path) -> None:
    """Run ``old`` as an earlier release left it: a done, paused before b."""
    async with SqliteEventStore(path) as store:
        await store.append(
            "old",
            [
                RunStarted(graph=_recorded_graph(), graph_hash="", entry="a"),
                NodeStarted(node_id="a", visit=1),
                MemoryWritten(key="x", value=1, node_id="a"),
                NodeCompleted(node_id="a"),
                EdgeTaken(source="a", target="b", edge_index=0, condition="always"),
                RunPaused(reason="user", node_id=None),
            ],
            expected_seq=0,
        )


def test_a_new_graph_with_an_ignored_field_is_refused() -> None:
    with pytest.raises(SpecErrors, match="only llm nodes use 'model'"):
        graph_from_dict(_recorded_graph())


async def test_a_recorded_graph_with_an_ignored_field_still_resumes_and_forks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    await _paused_run(path)
    with anyio.fail_after(30):
        async with Runtime(path, functions=FUNCTIONS) as rt:
            forked = await rt.fork("old", 5)  # after the edge to b
            resumed = await (await rt.resume("old")).result()
            assert resumed.status == "completed", resumed.error
            assert resumed.memory == {"x": 1, "y": 2}
            done = await forked.result()
            assert (done.status, done.memory) == ("completed", {"x": 1, "y": 2})
        # Cancelled from another process (this one holds no live run of it).
        await _paused_run(tmp_path / "again.db")
        async with Runtime(tmp_path / "again.db") as other:
            await other.cancel("old", reason="not wanted")
            assert (await other.get_state("old")).status == "cancelled"


def _recorded_branching_graph() -> dict[str, Any]:
    """A graph an earlier release started: from ``a``, an edge on ``'1' == 1`` (always
    false, which a new graph is refused for) to ``b``, and one on ``True`` to ``c``."""
    graph = compact_graph_dict(linear_graph(["a"]))
    graph["nodes"] += [{"id": "b", "function": "b"}, {"id": "c", "function": "c"}]
    graph["edges"] = [
        {"source": "a", "target": "b", "condition": "conditional", "expression": "'1' == 1"},
        {"source": "a", "target": "c", "condition": "conditional", "expression": "True"},
    ]
    graph["terminal_nodes"] = ["b", "c"]
    return graph


def test_a_new_graph_with_an_expression_that_always_fails_its_kinds_is_refused() -> None:
    with pytest.raises(SpecErrors, match="'1' == 1"):
        graph_from_dict(_recorded_branching_graph())


async def test_a_recorded_expression_edge_evaluates_as_it_did_when_the_run_began(
    tmp_path: Path,
) -> None:
    # The run paused at a's start; resumed, a's edges are evaluated as the release that
    # recorded it did: '1' == 1 is false (not a failure at that edge), so the run goes to c.
    path = tmp_path / "runs.db"
    async with SqliteEventStore(path) as store:
        await store.append(
            "old",
            [
                RunStarted(graph=_recorded_branching_graph(), graph_hash="", entry="a"),
                RunPaused(reason="user", node_id=None),
            ],
            expected_seq=0,
        )
    functions = {**FUNCTIONS, "c": lambda inputs: {"z": 3}}
    with anyio.fail_after(30):
        async with Runtime(path, functions=functions) as rt:
            result = await (await rt.resume("old")).result()
    assert result.status == "completed", result.error
    assert result.path == ["a", "c"]
