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
    NodeFailed,
    NodeSpec,
    RetryPolicy,
    Runtime,
    ScriptedProvider,
    tool,
)
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
    async with Runtime(None, functions=functions, node_timeout=timeout) as rt:
        handle = await rt.start(graph)
        result = await handle.result()
        failures = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, NodeFailed)
        ]
    assert [(f.error_type, f.will_retry) for f in failures] == [
        ("NodeTimeoutError", True),
        ("NodeTimeoutError", False),
    ]
    assert "did not finish within 0.05 s" in failures[0].error
    assert len(calls) == 2
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
        tool_timeout=0.05 if where == "runtime" else 120.0,
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
