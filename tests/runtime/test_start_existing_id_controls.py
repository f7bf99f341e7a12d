"""A start with a run id the store already holds does nothing and its handle's result
raises; it returns once that refusal is settled here, so a control of that id right after
it meets the stored run, not the refused start (before: ActorStoppedError from pause and
cancel, "already running in this runtime" from resume)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import SqliteEventStore
from runtime import RunChangedError, RunStateError, Runtime
from runtime.events import NodeStarted, RunStarted
from runtime.spec import compact_graph_dict, graph_hash
from runtime.testing import linear_graph

pytestmark = pytest.mark.anyio

FUNCTIONS: dict[str, Any] = {"a": lambda inputs: {"x": 1}, "b": lambda inputs: {"y": 2}}
GRAPH = linear_graph(["a", "b"])


async def test_controls_right_after_a_refused_start_meet_the_stored_finished_run(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
            assert (await (await rt.start(GRAPH, run_id="X")).result()).status == "completed"
            refused = await rt.start(GRAPH, run_id="X")
            with pytest.raises(RunChangedError, match="already completed"):
                await rt.pause("X")
            with pytest.raises(RunChangedError, match="already completed"):
                await rt.cancel("X")
            with pytest.raises(RunChangedError, match="already completed"):
                await rt.resume("X")
            with pytest.raises(RunStateError, match="already in the store"):
                await refused.result()
            assert (await rt.get_state("X")).status == "completed"


async def test_a_cancel_right_after_a_refused_start_cancels_the_stored_running_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with SqliteEventStore(path) as store:  # a run left running, nobody holding it
        started = RunStarted(
            graph=compact_graph_dict(GRAPH), graph_hash=graph_hash(GRAPH), entry="a"
        )
        await store.append("X", [started, NodeStarted(node_id="a", visit=1)], expected_seq=0)
    with anyio.fail_after(30):
        async with Runtime(path, functions=FUNCTIONS) as rt:
            refused = await rt.start(GRAPH, run_id="X")
            await rt.cancel("X", reason="not wanted")
            assert (await rt.get_state("X")).status == "cancelled"
            with pytest.raises(RunStateError, match="already in the store"):
                await refused.result()
