"""Closing a Runtime always finishes: runs still live are recorded as cancelled (with the
point a resume continues from), except in worker mode, where they are handed over."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import (
    EdgeSpec,
    GraphSpec,
    LlmRequest,
    LlmResponse,
    OwnershipConfig,
    RecoveryConfig,
    Runtime,
)
from runtime.events import RunCancelled, RunResumed
from runtime.testing import function_node, linear_graph
from tests.pgsupport import wait_until

pytestmark = pytest.mark.anyio

CLOSED = "the runtime closed"


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event blocked threads wait on; set at the end so no thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()


async def _cancellations(rt: Runtime, run_id: str) -> list[RunCancelled]:
    return [e.body for e in await rt.read_events(run_id) if isinstance(e.body, RunCancelled)]


def _finish(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"finished": True}


async def test_a_run_blocked_in_a_node_reads_back_cancelled_and_resume_finishes_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    entered = anyio.Event()
    calls: list[str] = []

    async def blocked(inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append("blocked")
        entered.set()
        await anyio.sleep_forever()
        return {}

    graph = linear_graph(["first", "wait", "last"])
    functions = {"first": lambda inputs: {"n": 1}, "wait": blocked, "last": _finish}
    with anyio.fail_after(60):
        async with Runtime(path, functions=functions) as rt:
            handle = await rt.start(graph)
            await entered.wait()
        # The handle tells the same as the log.
        result = await handle.result()
    assert result.status == "cancelled" and result.resume_at == ["wait"]
    assert result.error == CLOSED

    functions["wait"] = lambda inputs: {"waited": inputs["n"]}
    async with Runtime(path, functions=functions) as rt:
        state = await rt.get_state(handle.run_id)
        assert state.status == "cancelled" and state.pending == ["wait"]
        assert state.memory == {"n": 1}
        cancelled = await _cancellations(rt, handle.run_id)
        assert [(c.node_id, c.reason) for c in cancelled] == [("wait", CLOSED)]
        resumed = await (await rt.resume(handle.run_id)).result()
    assert resumed.status == "completed"
    assert resumed.memory == {"n": 1, "waited": 1, "finished": True}
    assert resumed.path == ["first", "wait", "last"]
    assert calls == ["blocked"]


async def test_closing_finishes_when_a_node_ignores_cancellation_in_a_thread(
    tmp_path: Path, gate: threading.Event
) -> None:
    path = tmp_path / "runs.db"
    entered = threading.Event()

    def stuck(inputs: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        gate.wait()  # never set while the runtime is open: cancellation cannot reach it
        return {}

    with anyio.fail_after(60):
        async with Runtime(path, functions={"stuck": stuck, "last": _finish}) as rt:
            handle = await rt.start(linear_graph(["stuck", "last"]))
            assert await anyio.to_thread.run_sync(entered.wait, 30)
    assert not gate.is_set()  # the thread was abandoned, not waited for

    functions = {"stuck": lambda inputs: {"unstuck": True}, "last": _finish}
    async with Runtime(path, functions=functions) as rt:
        state = await rt.get_state(handle.run_id)
        assert state.status == "cancelled" and state.pending == ["stuck"]
        assert state.error == CLOSED
        resumed = await (await rt.resume(handle.run_id)).result()
    assert resumed.status == "completed"
    assert resumed.memory == {"unstuck": True, "finished": True}


class HangingProvider:
    """A model that never answers (and is not asked to: the executor itself waits)."""

    name = "hanging"

    def __init__(self) -> None:
        self.asked = anyio.Event()

    async def complete(self, request: LlmRequest) -> LlmResponse:
        self.asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_closing_finishes_when_the_run_itself_waits_on_a_model(tmp_path: Path) -> None:
    # A model that never answers chooses an llm_decide edge: the closing's cancel still
    # reaches the run, which records node a as its resume point.
    path = tmp_path / "runs.db"
    provider = HangingProvider()
    graph = GraphSpec(
        id="decide",
        nodes=[function_node("a"), function_node("b"), function_node("c")],
        edges=[
            EdgeSpec(source="a", target="b", condition="llm_decide", fallback="b"),
            EdgeSpec(source="a", target="c", condition="llm_decide", fallback="b"),
        ],
        entry_node="a",
    )
    functions = {"a": lambda inputs: {"a": 1}, "b": _finish, "c": _finish}
    with anyio.fail_after(60):
        async with Runtime(path, functions=functions, provider=provider) as rt:
            handle = await rt.start(graph)
            await provider.asked.wait()
    async with Runtime(path, functions=functions) as rt:
        state = await rt.get_state(handle.run_id)
        cancelled = await _cancellations(rt, handle.run_id)
    assert state.status == "cancelled"
    # Node a's completion was not committed yet: a resume runs it again.
    assert state.pending == ["a"] and [c.reason for c in cancelled] == [CLOSED]


async def test_a_worker_hands_its_live_runs_over_instead_of_cancelling_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    entered = anyio.Event()

    async def blocked(inputs: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await anyio.sleep_forever()
        return {}

    recovery = RecoveryConfig(interval=0.05)
    functions = {"wait": lambda inputs: {"waited": True}, "last": _finish}
    async with Runtime(path, functions=functions) as submitter:
        run_id = await submitter.submit(linear_graph(["wait", "last"]))
    with anyio.fail_after(60):
        async with Runtime(
            path,
            functions={"wait": blocked, "last": _finish},
            ownership=OwnershipConfig(worker_id="first", lease_seconds=2.0),
            recovery=recovery,
        ):
            await entered.wait()
    async with Runtime(
        path,
        functions=functions,
        ownership=OwnershipConfig(worker_id="second", lease_seconds=2.0),
        recovery=recovery,
    ) as rt:

        async def finished() -> bool:
            return (await rt.get_state(run_id)).status != "running"

        await wait_until(finished, 60)
        state = await rt.get_state(run_id)
        events = await rt.read_events(run_id)
    assert state.status == "completed" and state.memory == {"waited": True, "finished": True}
    assert not [e for e in events if isinstance(e.body, RunCancelled)]
    assert len([e for e in events if isinstance(e.body, RunResumed)]) == 2  # one per worker


async def test_a_closing_that_is_itself_cancelled_still_records_the_cancellation(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    entered = anyio.Event()

    async def blocked(inputs: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await anyio.sleep_forever()
        return {}

    with anyio.fail_after(60), anyio.CancelScope() as scope:
        async with Runtime(path, functions={"wait": blocked}) as rt:
            handle = await rt.start(linear_graph(["wait"]))
            await entered.wait()
            scope.cancel()  # the block and the closing run under a cancelled scope
            await anyio.sleep_forever()
    async with Runtime(path) as rt:
        state = await rt.get_state(handle.run_id)
    assert state.status == "cancelled" and state.pending == ["wait"] and state.error == CLOSED
