"""The runtime embedded in an app that runs on uvloop (uvicorn's default loop, for one).

uvloop's loop is not an asyncio.BaseEventLoop and its pipes are not asyncio transport
subclasses. The store's writer, the actors and the store's followers must work there.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import Event, SqliteEventStore
from runtime import Runtime
from runtime.events import NodeCompleted, RunFinished
from runtime.spec._model import EdgeSpec, GraphSpec, NodeSpec

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform == "win32", reason="uvloop does not run on Windows"),
]


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("asyncio", {"use_uvloop": True})


async def add_one(inputs: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(0.001)
    return {"x": inputs["x"] + 1}


def chain(length: int) -> GraphSpec:
    return GraphSpec(
        id="chain",
        nodes=[NodeSpec(id=f"n{i}", function="add_one") for i in range(length)],
        edges=[EdgeSpec(source=f"n{i}", target=f"n{i + 1}") for i in range(length - 1)],
        entry_node="n0",
    )


async def test_durable_runs_and_a_follower_on_uvloop(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.startswith("uvloop"), type(loop)
    path = tmp_path / "events.db"
    seen: list[Event] = []

    async def follow(store: SqliteEventStore, finished: int) -> None:
        async for event in store.tail():
            seen.append(event)
            if sum(isinstance(e.body, RunFinished) for e in seen) == finished:
                return

    store = SqliteEventStore(path)
    async with store, Runtime(store, functions={"add_one": add_one}) as rt:
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow, store, 5)
            handles = [await rt.start(chain(4), input={"x": i * 10}) for i in range(5)]
            results = [await handle.result() for handle in handles]
        for i, result in enumerate(results):
            assert result.status == "completed", result
            assert result.memory["x"] == i * 10 + 4
            assert result.path == ["n0", "n1", "n2", "n3"]
        for handle in handles:
            assert (await store.verify(handle.run_id)).ok
    # The follower saw every run's whole log, in position order.
    assert [e.position for e in seen] == sorted(e.position for e in seen)
    assert sum(isinstance(e.body, NodeCompleted) for e in seen) == 20
    # And it is all in the file for a store opened afterwards.
    async with SqliteEventStore(path) as reopened:
        events = await reopened.read_all(handles[2].run_id)
        assert [e.body.node_id for e in events if isinstance(e.body, NodeCompleted)] == [
            "n0",
            "n1",
            "n2",
            "n3",
        ]
