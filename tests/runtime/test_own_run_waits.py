"""A node waiting for its own run's end would wait until its time limit: the run ends only
after the node returns. Every such wait is refused at once with RunStateError, whichever
way the node waits: a tool of an LLM node awaiting the run's result (async, or sync in its
worker thread through ``anyio.from_thread.run``), a node following the run's events
(``RunHandle.events`` ends only with the run), a plain ``def`` node handing those waits to
the loop. What a tool or node starts is another run, which it may wait for.

Each test is bounded by a deadline, so a wait that is not refused fails the test instead
of hanging it."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest

from runtime import (
    GraphSpec,
    NodeContext,
    NodeSpec,
    RetryPolicy,
    RunHandle,
    RunStateError,
    Runtime,
    ToolCall,
    tool,
)
from runtime.providers import ScriptedProvider, reply

pytestmark = pytest.mark.anyio

ONCE = RetryPolicy(max_attempts=1)
DEADLINE = 30  # seconds: a wait that is not refused ends the test here, failed


def _refused(run_id: str, instead: str = "return instead, or wait for another run") -> str:
    return (
        f"run {run_id} is running: a node cannot wait for its own run's end (the run ends "
        f"only after the node returns): {instead}"
    )


FOLLOW = "read the events committed so far with Runtime.read_events"


def _one(node: NodeSpec) -> GraphSpec:
    return GraphSpec(id=f"g_{node.id}", nodes=[node], edges=[], entry_node=node.id, retry=ONCE)


def _llm(tool_name: str) -> tuple[GraphSpec, ScriptedProvider]:
    """A graph of one LLM node that calls ``tool_name`` once, then sets its output."""
    provider = ScriptedProvider(
        [
            reply("", ToolCall(id="t1", name=tool_name, arguments={})),
            reply("", ToolCall(id="t2", name="set_output", arguments={"key": "a", "value": 1})),
            reply("done"),
        ]
    )
    node = NodeSpec(id="ask", kind="llm", tools=[tool_name], output_keys=["a"])
    return _one(node), provider


async def _refusal(wait: Any) -> str:
    """What awaiting ``wait`` raised (RunStateError expected)."""
    try:
        await wait
    except RunStateError as exc:
        return str(exc)
    return "not refused"


async def _follow(handle: RunHandle) -> list[int]:
    return [event.seq async for event in handle.events()]


async def test_an_async_tool_waiting_for_its_own_run_is_refused_at_once(tmp_path: Path) -> None:
    handed: asyncio.Future[RunHandle] = asyncio.get_running_loop().create_future()
    said: list[str] = []
    child_status: list[str] = []

    @tool
    async def wait_own() -> str:
        """Wait for this run's end, then for a run it starts."""
        handle = await handed
        said.append(await _refusal(handle.result()))
        said.append(await _refusal(rt.result(handle.run_id)))
        said.append(await _refusal(_follow(handle)))
        # A run the tool starts is another run: waiting for it is allowed.
        child = await rt.start(_one(NodeSpec(id="c", function="child", output_keys=["c"])))
        await _follow(child)
        child_status.append((await child.result()).status)
        return "waited"

    graph, provider = _llm("wait_own")
    functions = {"child": lambda inputs: {"c": 1}}
    with anyio.fail_after(DEADLINE):
        async with Runtime(
            tmp_path / "runs.db", functions=functions, tools=[wait_own], provider=provider
        ) as rt:
            handle = await rt.start(graph)
            handed.set_result(handle)
            result = await handle.result()
    assert result.status == "completed", result.error
    run = handle.run_id
    assert said == [_refused(run), _refused(run), _refused(run, FOLLOW)]
    assert child_status == ["completed"]


async def test_a_sync_tool_waiting_through_from_thread_is_refused_at_once(tmp_path: Path) -> None:
    handed: concurrent.futures.Future[RunHandle] = concurrent.futures.Future()
    token = anyio.lowlevel.current_token()
    said: list[str] = []

    @tool
    def wait_own() -> str:
        """Wait, from the tool's worker thread, for this run's end."""
        handle = handed.result(timeout=DEADLINE)
        for wait in (handle.result, lambda: _follow(handle)):
            try:
                anyio.from_thread.run(wait, token=token)
            except RunStateError as exc:
                said.append(str(exc))
        return "waited"

    graph, provider = _llm("wait_own")
    with anyio.fail_after(DEADLINE):
        async with Runtime(tmp_path / "runs.db", tools=[wait_own], provider=provider) as rt:
            handle = await rt.start(graph)
            handed.set_result(handle)
            result = await handle.result()
    assert result.status == "completed", result.error
    assert said == [_refused(handle.run_id), _refused(handle.run_id, FOLLOW)]


async def test_a_node_following_its_own_runs_events_is_refused_at_once(tmp_path: Path) -> None:
    handed: asyncio.Future[RunHandle] = asyncio.get_running_loop().create_future()
    said: list[str] = []
    read: list[int] = []

    async def follow_own(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        handle = await handed
        said.append(await _refusal(_follow(handle)))
        # What the refusal points to: the events committed so far, without waiting.
        read.extend(event.seq for event in await rt.read_events(ctx.run_id))
        return {"done": True}

    node = NodeSpec(id="f", function="follow_own", output_keys=["done"])
    with anyio.fail_after(DEADLINE):
        async with Runtime(tmp_path / "runs.db", functions={"follow_own": follow_own}) as rt:
            handle = await rt.start(_one(node))
            handed.set_result(handle)
            result = await handle.result()
    assert result.status == "completed", result.error
    assert said == [_refused(handle.run_id, FOLLOW)]
    assert read and read == list(range(1, len(read) + 1))


async def test_a_plain_def_node_handing_its_waits_to_the_loop_is_refused(tmp_path: Path) -> None:
    handed: concurrent.futures.Future[RunHandle] = concurrent.futures.Future()
    token = anyio.lowlevel.current_token()
    loop = asyncio.get_running_loop()
    said: list[str] = []

    def wait_own(inputs: dict[str, Any]) -> dict[str, Any]:
        handle = handed.result(timeout=DEADLINE)
        waits: list[Callable[[], object]] = [
            lambda: anyio.from_thread.run(handle.result, token=token),
            lambda: anyio.from_thread.run(_follow, handle, token=token),
            lambda: asyncio.run_coroutine_threadsafe(_follow(handle), loop).result(),
        ]
        for wait in waits:
            try:
                wait()
            except RunStateError as exc:
                said.append(str(exc))
        return {"done": True}

    node = NodeSpec(id="w", function="wait_own", output_keys=["done"])
    with anyio.fail_after(DEADLINE):
        async with Runtime(tmp_path / "runs.db", functions={"wait_own": wait_own}) as rt:
            handle = await rt.start(_one(node))
            handed.set_result(handle)
            result = await handle.result()
    assert result.status == "completed", result.error
    run = handle.run_id
    assert said == [_refused(run), _refused(run, FOLLOW), _refused(run, FOLLOW)]
