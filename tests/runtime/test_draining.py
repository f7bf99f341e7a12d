"""An abandoned attempt cannot overlap the next one: while a cancelled plain-def node's
thread runs on, its process keeps the run's claim ("draining"); a resume elsewhere is
refused with that reason, one in the same process waits for it, and the claim is given up
once the thread ends. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, RetryPolicy, RunDrainingError, Runtime
from runtime.events import NodeFailed
from runtime.testing import function_node

pytestmark = pytest.mark.anyio

GRAPH = GraphSpec(
    id="blocking",
    nodes=[function_node("work", output_keys=["done"]), function_node("after")],
    edges=[EdgeSpec(source="work", target="after")],
    entry_node="work",
)


class Blocking:
    """``work``: a plain def the runtime cannot interrupt; its first attempt blocks until
    released. Records when each attempt enters and leaves."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.marks: list[str] = []

    def work(self, inputs: dict[str, Any]) -> dict[str, Any]:
        attempt = sum(m.startswith("enter") for m in self.marks) + 1
        self.marks.append(f"enter {attempt}")
        self.entered.set()
        if attempt == 1:
            self.release.wait(60)
        self.marks.append(f"exit {attempt}")
        return {"done": True}

    async def work_async(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """As ``work``, async, swallowing its cancellation: abandoned after its grace,
        its task runs on until released."""
        attempt = sum(m.startswith("enter") for m in self.marks) + 1
        self.marks.append(f"enter {attempt}")
        self.entered.set()
        while attempt == 1 and not self.release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass  # swallowed: the runtime cannot stop it
        self.marks.append(f"exit {attempt}")
        return {"done": True}

    def functions(self, kind: str = "thread") -> dict[str, Any]:
        work = self.work if kind == "thread" else self.work_async
        return {"work": work, "after": lambda inputs: {}}


async def _owner_of(store: str, run_id: str) -> str | None:
    async with Runtime(store) as reader:
        assert reader.store is not None
        info = await reader.store.get_run(run_id)
        assert info is not None
        return info.owner


async def test_a_cancelled_blocking_node_keeps_its_run_draining(store: str) -> None:
    blocking = Blocking()
    async with (
        Runtime(store, functions=blocking.functions()) as here,
        Runtime(store, functions=blocking.functions()) as elsewhere,
    ):
        handle = await here.start(GRAPH)
        await anyio.to_thread.run_sync(blocking.entered.wait, 30)
        await here.cancel(handle.run_id)
        result = await handle.result()
        assert result.status == "cancelled" and result.resume_at == ["work"]
        # The thread runs on: the claim stays with this process, draining.
        assert await _owner_of(store, handle.run_id) == here.worker_id
        with pytest.raises(RunDrainingError, match="draining") as refused:
            await elsewhere.resume(handle.run_id)
        assert refused.value.status == "cancelled"
        # A resume here waits for the abandoned attempt to end, then runs the node again.
        threading.Timer(0.2, blocking.release.set).start()
        resumed = await (await here.resume(handle.run_id)).result()
        assert resumed.status == "completed"
    # Never two attempts at once: the first left before the second entered.
    assert blocking.marks == ["enter 1", "exit 1", "enter 2", "exit 2"]
    assert await _owner_of(store, handle.run_id) is None


async def test_the_claim_is_given_up_once_the_abandoned_attempt_ends(store: str) -> None:
    blocking = Blocking()
    async with Runtime(store, functions=blocking.functions()) as rt:
        handle = await rt.start(GRAPH)
        await anyio.to_thread.run_sync(blocking.entered.wait, 30)
        await rt.cancel(handle.run_id)
        assert (await handle.result()).status == "cancelled"
        assert await _owner_of(store, handle.run_id) == rt.worker_id
        blocking.release.set()
        with anyio.fail_after(30):
            while await _owner_of(store, handle.run_id) is not None:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        async with Runtime(store, functions=blocking.functions()) as other:
            resumed = await (await other.resume(handle.run_id)).result()
    assert resumed.status == "completed"
    assert blocking.marks == ["enter 1", "exit 1", "enter 2", "exit 2"]


@pytest.mark.parametrize("kind", ["thread", "async"])
async def test_a_retry_waits_for_the_attempt_abandoned_at_its_deadline(
    tmp_path: Path, kind: str
) -> None:
    blocking = Blocking()
    graph = GraphSpec(
        id="deadline",
        nodes=[function_node("work", output_keys=["done"], timeout=1.0)],
        entry_node="work",
        retry=RetryPolicy(max_attempts=2, initial_delay=0, jitter=0),
    )

    def release_when_it_fails(run_id: str, seq: int, bodies: Any) -> None:
        # Attempt 1 passed its deadline (recorded): its thread ends only now, while the
        # retry is about to start; the retry waits for it.
        if any(isinstance(b, NodeFailed) and b.will_retry for b in bodies):
            blocking.release.set()

    functions = blocking.functions(kind)
    async with Runtime(tmp_path / "r.db", functions=functions, hooks=[release_when_it_fails]) as rt:
        result = await (await rt.start(graph)).result()
    assert result.status == "completed" and result.total_retries == 1
    assert blocking.marks == ["enter 1", "exit 1", "enter 2", "exit 2"]


async def test_an_abandoned_async_task_keeps_its_run_draining(store: str) -> None:
    """The same rule for an async node that swallows its cancellation: abandoned after
    its grace, its task runs on; the claim stays here until it ends."""
    blocking = Blocking()
    functions = blocking.functions("async")
    async with (
        Runtime(store, functions=functions) as here,
        Runtime(store, functions=functions) as elsewhere,
    ):
        handle = await here.start(GRAPH)
        await anyio.to_thread.run_sync(blocking.entered.wait, 30)
        await here.cancel(handle.run_id)
        result = await handle.result()
        assert result.status == "cancelled" and result.resume_at == ["work"]
        assert blocking.marks == ["enter 1"]  # abandoned, still running
        assert await _owner_of(store, handle.run_id) == here.worker_id
        with pytest.raises(RunDrainingError, match="draining") as refused:
            await elsewhere.resume(handle.run_id)
        assert refused.value.status == "cancelled"
        threading.Timer(0.2, blocking.release.set).start()
        resumed = await (await here.resume(handle.run_id)).result()
        assert resumed.status == "completed"
    assert blocking.marks == ["enter 1", "exit 1", "enter 2", "exit 2"]
    assert await _owner_of(store, handle.run_id) is None


async def test_an_abandoned_async_task_gives_the_claim_up_when_it_ends(store: str) -> None:
    blocking = Blocking()
    functions = blocking.functions("async")
    async with Runtime(store, functions=functions) as rt:
        handle = await rt.start(GRAPH)
        await anyio.to_thread.run_sync(blocking.entered.wait, 30)
        await rt.cancel(handle.run_id)
        assert (await handle.result()).status == "cancelled"
        assert await _owner_of(store, handle.run_id) == rt.worker_id
        blocking.release.set()
        with anyio.fail_after(30):
            while await _owner_of(store, handle.run_id) is not None:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        async with Runtime(store, functions=functions) as other:
            resumed = await (await other.resume(handle.run_id)).result()
    assert resumed.status == "completed"
    assert blocking.marks == ["enter 1", "exit 1", "enter 2", "exit 2"]
