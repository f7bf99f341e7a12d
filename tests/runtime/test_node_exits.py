"""A node whose code calls ``sys.exit()`` (or raises KeyboardInterrupt in its worker
thread), raises another BaseException, or lets out a CancelledError that nothing sent it
(a task it awaited was cancelled) fails that attempt like any other error, retried and
recorded; the run never stays "running", and the process that embeds the runtime, and its
other runs, go on. A tool doing the same fails its call, which the model is told."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime import NodeSpec, RetryPolicy, Runtime, tool
from runtime.events import ToolResult
from runtime.testing import ScriptedProvider, function_node, linear_graph, reply, tool_call

pytestmark = pytest.mark.anyio


def exits_in_a_thread(inputs: dict[str, Any]) -> dict[str, Any]:
    sys.exit(3)


def interrupts_in_a_thread(inputs: dict[str, Any]) -> dict[str, Any]:
    raise KeyboardInterrupt


async def exits_on_the_loop(inputs: dict[str, Any]) -> dict[str, Any]:
    sys.exit(0)


class Abort(BaseException):
    pass


async def aborts_on_the_loop(inputs: dict[str, Any]) -> dict[str, Any]:
    raise Abort("stop everything")


async def awaits_a_cancelled_task(inputs: dict[str, Any]) -> dict[str, Any]:
    other = asyncio.get_running_loop().create_future()
    other.cancel()  # cancelled by some other part of the application
    await other
    return {}


def fine(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"done": True}


FUNCTIONS = {
    "exits_in_a_thread": exits_in_a_thread,
    "interrupts_in_a_thread": interrupts_in_a_thread,
    "exits_on_the_loop": exits_on_the_loop,
    "aborts_on_the_loop": aborts_on_the_loop,
    "awaits_a_cancelled_task": awaits_a_cancelled_task,
    "fine": fine,
}


@pytest.mark.parametrize(
    ("function", "raised"),
    [
        ("exits_in_a_thread", "SystemExit(3) raised"),
        ("interrupts_in_a_thread", "KeyboardInterrupt() raised"),
        ("exits_on_the_loop", "SystemExit(0) raised"),
        ("aborts_on_the_loop", "Abort('stop everything') raised"),
        ("awaits_a_cancelled_task", "CancelledError raised though nothing cancelled"),
    ],
)
async def test_an_exit_in_a_node_fails_the_node_not_the_process(
    tmp_path: Path, function: str, raised: str
) -> None:
    retry = RetryPolicy(max_attempts=2, initial_delay=0.0, jitter=0.0)
    # A deadline too: the attempt fails at once, not when it passes.
    graph = linear_graph([function_node("a", function, retry=retry, timeout=30)])
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        result = await (await rt.start(graph)).result()
        assert result.status == "failed"
        assert result.error is not None
        assert raised in result.error
        state = await rt.get_state(result.run_id)
        assert state.total_retries == 1  # retried like any failure
        # The runtime goes on: another run completes.
        after = await (await rt.start(linear_graph(["fine"]))).result()
        assert after.status == "completed"


@tool
async def lookup(query: str) -> str:
    """Looks something up (awaits a request another part of the app cancelled)."""
    raise asyncio.CancelledError


async def test_a_tool_that_lets_out_a_stray_cancellation_fails_its_call(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [
            reply("", tool_call("lookup", query="x")),
            reply("", tool_call("set_output", key="answer", value="none")),
            reply("done"),
        ]
    )
    node = NodeSpec(id="n", kind="llm", output_keys=["answer"], tools=["lookup"])
    async with Runtime(tmp_path / "runs.db", provider=provider, tools=[lookup]) as rt:
        result = await (await rt.start(linear_graph([node]))).result()
        assert result.status == "completed" and result.memory["answer"] == "none"
        events = await rt.read_events(result.run_id)
        told = [e.body for e in events if type(e.body) is ToolResult and e.body.name == "lookup"]
        assert len(told) == 1 and told[0].is_error
        assert "CancelledError raised though nothing cancelled" in told[0].content
