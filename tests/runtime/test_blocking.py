"""Blocking user code: plain def nodes run in worker threads, node and tool time limits
fail the node like any failure, and cancel or shutdown abandons a blocked thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from runtime import (
    EdgeSpec,
    GraphSpec,
    NodeSpec,
    RetryPolicy,
    Runtime,
    ScriptedProvider,
    TimeoutConfig,
    tool,
)
from runtime.events import NodeFailed
from runtime.testing import reply, tool_call

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.001, jitter=0.0)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event blocked threads wait on; set at the end so no thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()


def _graph(*nodes: NodeSpec, edges: list[EdgeSpec] | None = None) -> GraphSpec:
    return GraphSpec(
        id="g", nodes=list(nodes), edges=edges or [], entry_node=nodes[0].id, retry=FAST
    )


async def test_a_blocking_def_node_does_not_block_other_runs(gate: threading.Event) -> None:
    # Run 1's node blocks until run 2's node sets the gate: on the event loop this
    # would never finish (run 2 could not start); in worker threads it does.
    def wait(inputs: dict[str, Any]) -> dict[str, Any]:
        assert gate.wait(timeout=30), "the other run never ran"
        return {"waited": threading.current_thread() is not threading.main_thread()}

    def release(inputs: dict[str, Any]) -> dict[str, Any]:
        gate.set()
        return {}

    async with Runtime(None, functions={"wait": wait, "release": release}) as rt:
        first = await rt.start(_graph(NodeSpec(id="a", function="wait")))
        second = await rt.start(_graph(NodeSpec(id="b", function="release")))
        assert (await second.result()).status == "completed"
        result = await first.result()
    assert result.status == "completed" and result.memory == {"waited": True}


@pytest.mark.parametrize("where", ["spec", "runtime"])
async def test_a_node_past_its_timeout_fails_is_retried_and_takes_on_failure(
    gate: threading.Event, where: str
) -> None:
    calls: list[int] = []

    def stuck(inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        gate.wait()
        return {}

    graph = _graph(
        NodeSpec(id="a", function="stuck", timeout=0.05 if where == "spec" else None),
        NodeSpec(id="recover", function="recover"),
        edges=[EdgeSpec(source="a", target="recover", condition="on_failure")],
    )
    functions = {"stuck": stuck, "recover": lambda inputs: {"recovered": True}}
    timeout = 0.05 if where == "runtime" else 600.0
    async with Runtime(None, functions=functions, timeouts=TimeoutConfig(node=timeout)) as rt:
        handle = await rt.start(graph)
        result = await handle.result()
        failures = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, NodeFailed)
        ]
    # The retry never overlaps the abandoned attempt, whose thread is stuck: it waits
    # for it as long as the node's time limit, then fails saying so.
    assert [(f.error_type, f.will_retry) for f in failures] == [
        ("NodeTimeoutError", True),
        ("NodeError", False),
    ]
    assert "did not finish within 0.05 s" in failures[0].error
    assert "attempt 1 still runs" in failures[1].error
    assert len(calls) == 1
    assert result.path == ["a", "recover"] and result.memory == {"recovered": True}


async def test_an_async_node_past_its_timeout_fails_too() -> None:
    async def sleepy(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep_forever()
        return {}

    graph = _graph(NodeSpec(id="a", function="sleepy", timeout=0.05))
    async with Runtime(None, functions={"sleepy": sleepy}) as rt:
        handle = await rt.start(graph)
        result = await handle.result()
        failures = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, NodeFailed)
        ]
    assert result.status == "failed"
    assert [f.error_type for f in failures] == ["NodeTimeoutError", "NodeTimeoutError"]


async def test_each_node_of_a_lane_gets_its_own_time_limit() -> None:
    # One lane (actor) runs a, b, c in turn. a's limit (600 s) arms the lane's timer far
    # ahead: b's shorter limit must still cut b off; c, past b's failure, runs under a
    # limit again and finishes.
    async def quick(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"quick": True}

    async def sleepy(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep_forever()
        return {}

    graph = GraphSpec(
        id="g",
        nodes=[
            NodeSpec(id="a", function="quick"),
            NodeSpec(id="b", function="sleepy", timeout=0.05),
            NodeSpec(id="c", function="quick", timeout=0.05),
        ],
        edges=[
            EdgeSpec(source="a", target="b"),
            EdgeSpec(source="b", target="c", condition="on_failure"),
        ],
        entry_node="a",
        retry=RetryPolicy(max_attempts=1),
    )
    async with Runtime(None, functions={"quick": quick, "sleepy": sleepy}) as rt:
        handle = await rt.start(graph)
        result = await handle.result()
        failures = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, NodeFailed)
        ]
    assert [(f.node_id, f.error_type) for f in failures] == [("b", "NodeTimeoutError")]
    assert "did not finish within 0.05 s" in failures[0].error
    assert result.status == "completed" and result.path == ["a", "b", "c"]


async def test_a_limit_armed_by_an_earlier_attempt_still_cuts_off_the_next() -> None:
    # a finishes well within its limit; the timer armed for a's deadline fires while b
    # runs (b's deadline is later), moves on to b's deadline and then cuts b off.
    async def brief(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(0.05)
        return {"brief": True}

    async def sleepy(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep_forever()
        return {}

    graph = GraphSpec(
        id="g",
        nodes=[NodeSpec(id="a", function="brief"), NodeSpec(id="b", function="sleepy")],
        edges=[EdgeSpec(source="a", target="b")],
        entry_node="a",
        retry=RetryPolicy(max_attempts=1),
    )
    functions = {"brief": brief, "sleepy": sleepy}
    async with Runtime(None, functions=functions, timeouts=TimeoutConfig(node=0.2)) as rt:
        handle = await rt.start(graph)
        result = await handle.result()
        failures = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, NodeFailed)
        ]
    assert result.status == "failed" and result.memory == {"brief": True}
    assert [(f.node_id, f.error_type) for f in failures] == [("b", "NodeTimeoutError")]


async def test_a_node_that_swallows_its_time_limit_still_fails_by_it() -> None:
    async def stubborn(inputs: dict[str, Any]) -> dict[str, Any]:
        try:
            await anyio.sleep_forever()
        except BaseException:  # a callable that ignores cancellation and returns
            pass
        return {"done": True}

    graph = GraphSpec(
        id="g",
        nodes=[
            NodeSpec(id="a", function="stubborn", timeout=0.05),
            NodeSpec(id="b", kind="router"),
        ],
        edges=[EdgeSpec(source="a", target="b", condition="on_failure")],
        entry_node="a",
        retry=RetryPolicy(max_attempts=1),
    )
    async with Runtime(None, functions={"stubborn": stubborn}) as rt:
        handle = await rt.start(graph)
        result = await handle.result()
        failures = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, NodeFailed)
        ]
    assert [(f.node_id, f.error_type) for f in failures] == [("a", "NodeTimeoutError")]
    # The lane took its cancellation back: the router after it ran and the run completed.
    assert result.status == "completed" and result.path == ["a", "b"]
    assert "done" not in result.memory


async def test_cancel_of_an_async_node_under_a_time_limit_is_a_cancel() -> None:
    entered = anyio.Event()

    async def sleepy(inputs: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await anyio.sleep_forever()
        return {}

    async with Runtime(None, functions={"sleepy": sleepy}, timeouts=TimeoutConfig(node=60.0)) as rt:
        handle = await rt.start(_graph(NodeSpec(id="a", function="sleepy")))
        await entered.wait()
        await rt.cancel(handle.run_id)
        result = await handle.result()
        failures = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, NodeFailed)
        ]
    assert result.status == "cancelled" and result.resume_at == ["a"]
    assert failures == []


async def test_cancel_abandons_a_blocked_thread_and_the_runtime_closes(
    gate: threading.Event,
) -> None:
    entered = threading.Event()

    def stuck(inputs: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        gate.wait()
        return {}

    async with Runtime(None, functions={"stuck": stuck}) as rt:
        handle = await rt.start(_graph(NodeSpec(id="a", function="stuck")))
        assert await anyio.to_thread.run_sync(entered.wait, 30)
        await rt.cancel(handle.run_id)
        result = await handle.result()
        assert result.status == "cancelled" and result.resume_at == ["a"]
    # The thread is still blocked: leaving the runtime did not wait for it.
    assert not gate.is_set()


async def test_closing_the_runtime_abandons_a_blocked_thread(gate: threading.Event) -> None:
    entered = threading.Event()

    def stuck(inputs: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        gate.wait()
        return {}

    async with Runtime(None, functions={"stuck": stuck}) as rt:
        await rt.start(_graph(NodeSpec(id="a", function="stuck")))
        assert await anyio.to_thread.run_sync(entered.wait, 30)
    assert not gate.is_set()


@pytest.mark.parametrize("where", ["spec", "runtime"])
async def test_a_tool_past_its_timeout_fails_the_llm_node(
    gate: threading.Event, where: str
) -> None:
    @tool
    def lookup(city: str) -> str:
        """Look a city up (never answers)."""
        gate.wait()
        return city

    provider = ScriptedProvider([reply("", tool_call("lookup", city="Porto"))])
    limit = 0.05 if where == "spec" else None
    graph = _graph(
        NodeSpec(id="ask", kind="llm", tools=["lookup"], output_keys=["a"], tool_timeout=limit),
        NodeSpec(id="recover", function="recover"),
        edges=[EdgeSpec(source="ask", target="recover", condition="on_failure")],
    )
    runtime = Runtime(
        None,
        provider=provider,
        tools=[lookup],
        functions={"recover": lambda inputs: {}},
        timeouts=TimeoutConfig(tool=0.05 if where == "runtime" else 120.0),
    )
    async with runtime as rt:
        handle = await rt.start(graph)
        result = await handle.result()
        failures = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, NodeFailed)
        ]
    assert [f.error_type for f in failures] == ["ToolTimeoutError"]
    assert "tool 'lookup' did not finish within 0.05 s" in failures[0].error
    assert result.path == ["ask", "recover"]


async def test_cancel_abandons_a_tool_blocked_in_its_thread(gate: threading.Event) -> None:
    entered = threading.Event()

    @tool
    def lookup(city: str) -> str:
        """Look a city up (never answers)."""
        entered.set()
        gate.wait()
        return city

    provider = ScriptedProvider([reply("", tool_call("lookup", city="Porto"))])
    graph = _graph(NodeSpec(id="ask", kind="llm", tools=["lookup"], output_keys=["a"]))
    async with Runtime(None, provider=provider, tools=[lookup]) as rt:
        handle = await rt.start(graph)
        assert await anyio.to_thread.run_sync(entered.wait, 30)
        await rt.cancel(handle.run_id)
        result = await handle.result()
        assert result.status == "cancelled" and result.resume_at == ["ask"]
    assert not gate.is_set()  # leaving the runtime did not wait for the thread
