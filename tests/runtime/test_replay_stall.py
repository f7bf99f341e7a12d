"""A changed stall threshold (``NodeSpec.stall_threshold``) is reported where the recorded
run's stall warning was: today's node would not have stalled there."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import GraphSpec, NodeSpec, Runtime, tool
from runtime.events import StallDetected
from runtime.testing import ScriptedProvider, reply, tool_call

from .replay_graphs import Failing

pytestmark = pytest.mark.anyio


@tool
def search(query: str) -> str:
    """Search.

    Args:
        query: what to look for
    """
    return "nothing new"


def graph(threshold: int = 3) -> GraphSpec:
    node = NodeSpec(
        id="look",
        kind="llm",
        tools=["search"],
        output_keys=["found"],
        stall_threshold=threshold,
        max_iterations=10,
    )
    return GraphSpec(id="stall", nodes=[node], entry_node="look")


async def test_a_raised_stall_threshold_diverges_at_the_recorded_stall(tmp_path: Path) -> None:
    same = [reply("", tool_call("search", query="x")) for _ in range(3)]
    model = ScriptedProvider(
        [*same, reply("", tool_call("set_output", key="found", value="no")), reply("done")]
    )
    store = tmp_path / "runs.db"
    async with Runtime(store, provider=model, tools=[search]) as rt:
        result = await (await rt.start(graph())).result()
        events = await rt.read_events(result.run_id)
    assert result.status == "completed"
    [stalled] = [e.seq for e in events if isinstance(e.body, StallDetected)]

    failing = Failing()
    async with Runtime(store, provider=failing, tools=[search]) as rt:
        assert (await rt.replay(result.run_id)).equal
        report = await rt.replay(result.run_id, graph(threshold=5))
    assert failing.calls == 0 and not report.equal
    first = report.divergences[0]
    assert (first.seq, first.kind) == (stalled, "node.stalled")
    assert first.reason.startswith("no stall now: stall detected at turn 3")
    assert first.reason.endswith("now stalls after 5 identical turns")
