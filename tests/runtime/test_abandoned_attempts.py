"""An attempt the runtime abandons (cancelled, stopped, past its deadline) is fenced:
it records nothing more, and its code can see that it was abandoned."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, NodeContext, NodeError, NodeSpec, RetryPolicy, Runtime
from runtime.events import OutputSet

pytestmark = pytest.mark.anyio


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _graph(node: NodeSpec) -> GraphSpec:
    return GraphSpec(id="g", nodes=[node], entry_node=node.id, retry=RetryPolicy(max_attempts=1))


async def test_a_cancelled_sync_node_sees_ctx_cancelled_and_stops(tmp_path: Path) -> None:
    entered, saw_cancel = threading.Event(), threading.Event()

    def polls(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        entered.set()
        while not ctx.cancelled:
            time.sleep(0.005)
        saw_cancel.set()
        return {"late": True}

    async with Runtime(tmp_path / "runs.db", functions={"polls": polls}) as rt:
        handle = await rt.start(_graph(NodeSpec(id="a", function="polls")))
        assert await anyio.to_thread.run_sync(entered.wait, 30)
        await rt.cancel(handle.run_id)
        result = await handle.result()
        assert await anyio.to_thread.run_sync(saw_cancel.wait, 30)
        state = await rt.get_state(handle.run_id)
    assert result.status == "cancelled" and result.resume_at == ["a"]
    assert "late" not in state.memory  # what the abandoned attempt returned is dropped


async def test_a_node_that_swallows_its_cancellation_records_nothing_more(
    tmp_path: Path,
) -> None:
    entered = anyio.Event()
    refused: list[BaseException] = []

    async def stubborn(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await ctx.set_output("progress", 1)
        entered.set()
        try:
            await anyio.sleep(3600)
        except asyncio.CancelledError:
            pass  # misbehaving: swallowed
        try:
            await ctx.set_output("progress", 2)
        except NodeError as exc:
            refused.append(exc)
        return {"progress": 3}

    async with Runtime(tmp_path / "runs.db", functions={"stubborn": stubborn}) as rt:
        handle = await rt.start(_graph(NodeSpec(id="a", function="stubborn")))
        await entered.wait()
        await rt.cancel(handle.run_id)
        result = await handle.result()
        events = [e.body for e in await rt.read_events(handle.run_id)]
    assert result.status == "cancelled"
    assert result.memory["progress"] == 1  # the partial output flushed by the cancel
    assert [b.value for b in events if isinstance(b, OutputSet)] == [1]
    assert len(refused) == 1 and "was abandoned: it records nothing" in str(refused[0])


async def test_an_attempt_past_its_deadline_sees_ctx_cancelled(gate: threading.Event) -> None:
    saw: list[bool] = []
    done = threading.Event()

    def slow(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        while not ctx.cancelled and not gate.is_set():
            time.sleep(0.005)
        saw.append(ctx.cancelled)
        done.set()
        return {}

    async with Runtime(None, functions={"slow": slow}) as rt:
        handle = await rt.start(_graph(NodeSpec(id="a", function="slow", timeout=0.05)))
        result = await handle.result()
        assert await anyio.to_thread.run_sync(done.wait, 30)
    assert result.status == "failed" and "NodeTimeoutError" in (result.error or "")
    assert saw == [True]


async def test_an_async_node_that_swallows_cancellation_is_abandoned_at_its_deadline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    release = False
    entered = anyio.Event()
    contexts: list[NodeContext] = []

    async def stubborn(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        contexts.append(ctx)
        entered.set()
        while not release:  # misbehaving: every cancellation is swallowed
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                pass
        return {"late": True}

    graph = _graph(NodeSpec(id="a", function="stubborn", timeout=0.05))
    try:
        with caplog.at_level("WARNING", logger="magistrate.runtime"):
            async with Runtime(tmp_path / "runs.db", functions={"stubborn": stubborn}) as rt:
                result = await (await rt.start(graph)).result()
                # A second run whose stubborn node is running when the runtime closes.
                entered = anyio.Event()
                second = await rt.start(_graph(NodeSpec(id="a", function="stubborn")))
                await entered.wait()
        # Closing finished although the second node never stops: it was abandoned.
        async with Runtime(tmp_path / "runs.db") as reader:
            closed = await reader.get_state(second.run_id)
    finally:
        release = True
    assert closed.status == "cancelled"
    assert result.status == "failed"
    assert "NodeTimeoutError: node 'a' did not finish within 0.05 s" in (result.error or "")
    assert "late" not in result.memory
    assert [c.cancelled for c in contexts] == [True, True]
    abandoned = [r for r in caplog.records if "catches CancelledError" in r.getMessage()]
    assert len(abandoned) == 2


async def test_an_abandoned_attempt_that_ends_late_leaves_the_next_node_its_deadline(
    tmp_path: Path,
) -> None:
    # The main path's nodes share one lane: node a, abandoned past its deadline, fails
    # over to node b, and ends only once b runs; its end must not take b's time limit
    # away with it (the lane's deadline is its current attempt's).
    b_started = asyncio.Event()

    async def stubborn(inputs: dict[str, Any]) -> dict[str, Any]:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass  # misbehaving: its deadline's cancellation is swallowed
        await b_started.wait()  # abandoned meanwhile; it ends once b runs
        await asyncio.sleep(0)
        return {"late": True}

    async def fallback(inputs: dict[str, Any]) -> dict[str, Any]:
        b_started.set()
        await asyncio.sleep(3600)  # cut off at its own deadline
        return {}

    graph = GraphSpec(
        id="g",
        nodes=[
            NodeSpec(id="a", function="stubborn", timeout=0.1),
            NodeSpec(id="b", function="fallback", timeout=0.3),
        ],
        edges=[EdgeSpec(source="a", target="b", condition="on_failure")],
        entry_node="a",
        retry=RetryPolicy(max_attempts=1),
    )
    functions = {"stubborn": stubborn, "fallback": fallback}
    async with Runtime(tmp_path / "runs.db", functions=functions) as rt:
        handle = await rt.start(graph)
        with anyio.fail_after(30):
            result = await handle.result()
    assert b_started.is_set()
    assert result.status == "failed"
    assert "NodeTimeoutError: node 'b' did not finish within 0.3 s" in (result.error or "")
    assert "late" not in result.memory
