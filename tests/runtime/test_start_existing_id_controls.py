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


@pytest.mark.parametrize("store", [True, False])
async def test_starts_naming_one_id_at_once_start_it_once(tmp_path: Path, store: bool) -> None:
    # A client's retries of one start, sent at once: one starts the run; each other is
    # refused as a start of a run running here is (before: an ActorError about an actor
    # named 'run:X' from the second spawn).
    release = anyio.Event()

    async def a(inputs: dict[str, Any]) -> dict[str, Any]:
        await release.wait()
        return {"x": 1}

    outcomes: list[object] = []

    async def start(rt: Runtime) -> None:
        try:
            outcomes.append(await rt.start(GRAPH, run_id="X"))
        except RunStateError as exc:
            outcomes.append(exc)

    with anyio.fail_after(30):
        async with Runtime(
            tmp_path / "runs.db" if store else None, functions={**FUNCTIONS, "a": a}
        ) as rt:
            async with anyio.create_task_group() as tasks:
                for _ in range(5):
                    tasks.start_soon(start, rt)
            handles = [o for o in outcomes if not isinstance(o, RunStateError)]
            refusals = [o for o in outcomes if isinstance(o, RunStateError)]
            assert len(handles) == 1 and len(refusals) == 4, outcomes
            assert all("already running in this runtime" in str(r) for r in refusals)
            release.set()
            result = await handles[0].result()  # type: ignore[attr-defined]
    assert (result.status, result.memory) == ("completed", {"x": 1, "y": 2})
