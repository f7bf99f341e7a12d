"""A node that waits for its own run's end would wait until its time limit (forever with
none): the run ends only after the node returns. ``RunHandle.result`` and
``Runtime.result`` of the node's own run refuse at once with RunStateError; a run a
node starts is not the node's run, so its nodes and tools may wait for the starter."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from runtime import (
    EdgeSpec,
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


def _graph(id: str, *nodes: NodeSpec) -> GraphSpec:
    edges = [EdgeSpec(source=a.id, target=b.id) for a, b in pairwise(nodes)]
    return GraphSpec(id=id, nodes=list(nodes), edges=edges, entry_node=nodes[0].id, retry=ONCE)


async def test_a_node_awaiting_its_own_runs_result_is_refused_at_once(tmp_path: Path) -> None:
    handed: asyncio.Future[RunHandle] = asyncio.get_running_loop().create_future()
    said: list[str] = []

    async def wait_own(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        handle = await handed
        for wait in (handle.result(), rt.result(ctx.run_id)):
            try:
                await wait
            except RunStateError as exc:
                said.append(str(exc))
        return {"done": True}

    # Its time limit (before: the wait ended only there, the run failed) is a bound on a
    # broken wait, not what the test measures.
    node = NodeSpec(id="w", function="wait_own", output_keys=["done"], timeout=30)
    async with Runtime(tmp_path / "runs.db", functions={"wait_own": wait_own}) as rt:
        handle = await rt.start(_graph("own", node))
        handed.set_result(handle)
        result = await handle.result()
    assert result.status == "completed", result.error
    refused = (
        f"run {handle.run_id} is running: a node cannot wait for its own run's end (the run "
        "ends only after the node returns): return instead, or wait for another run"
    )
    assert said == [refused, refused]


async def test_a_run_a_node_starts_may_wait_for_the_starters_end(tmp_path: Path) -> None:
    children: list[RunHandle] = []
    parents: list[str] = []
    waited: list[str] = []

    async def spawn(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        parents.append(ctx.run_id)
        children.append(await rt.start(child, input={"parent": ctx.run_id}))
        return {"spawned": True}  # without waiting for the child

    @tool
    async def wait_parent() -> str:
        """Wait for the parent run's end."""
        waited.append((await rt.result(parents[0])).status)
        return "parent ended"

    async def check(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return {"checked": (await rt.result(inputs["parent"])).status}

    child = _graph(
        "child",
        NodeSpec(id="ask", kind="llm", tools=["wait_parent"], output_keys=["a"]),
        NodeSpec(id="check", function="check", input_keys=["parent"], output_keys=["checked"]),
    )
    parent = _graph("parent", NodeSpec(id="spawn", function="spawn", output_keys=["spawned"]))
    provider = ScriptedProvider(
        [
            reply("", ToolCall(id="t1", name="wait_parent", arguments={})),
            reply("", ToolCall(id="t2", name="set_output", arguments={"key": "a", "value": 1})),
            reply("done"),
        ]
    )
    async with Runtime(
        tmp_path / "runs.db",
        functions={"spawn": spawn, "check": check},
        tools=[wait_parent],
        provider=provider,
    ) as rt:
        started = await rt.start(parent)
        assert (await started.result()).status == "completed"
        [handle] = children
        result = await handle.result()
    assert result.status == "completed", result.error
    assert waited == ["completed"]
    assert result.memory["checked"] == "completed"
