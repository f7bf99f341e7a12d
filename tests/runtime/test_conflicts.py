"""Conflict strategies follow the order branches finish, and pauses and cancels inside
fan-outs and retry backoffs report every resume point."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, RetryPolicy, Runtime
from runtime.events import RunCancelled

pytestmark = pytest.mark.anyio


def _race(strategy: str) -> GraphSpec:
    # Branch "a" writes k first (a1), then finishes last (a2 waits for branch "b").
    # Branch "b" writes k after a1 did, and finishes first.
    return GraphSpec(
        id="g",
        nodes=[
            NodeSpec(id="s", function="noop"),
            NodeSpec(id="a1", function="a1"),
            NodeSpec(id="a2", function="a2"),
            NodeSpec(id="b1", function="b1"),
            NodeSpec(id="j", function="noop"),
        ],
        edges=[
            EdgeSpec(source="s", target="a1"),
            EdgeSpec(source="s", target="b1"),
            EdgeSpec(source="a1", target="a2"),
            EdgeSpec(source="a2", target="j"),
            EdgeSpec(source="b1", target="j"),
        ],
        entry_node="s",
        conflict_strategy=strategy,  # type: ignore[arg-type]
    )


def _functions() -> dict[str, Any]:
    a_wrote = anyio.Event()
    b_done = anyio.Event()

    async def a1(inputs: dict[str, Any]) -> dict[str, Any]:
        a_wrote.set()
        return {"k": "from a"}

    async def b1(inputs: dict[str, Any]) -> dict[str, Any]:
        await a_wrote.wait()
        b_done.set()
        return {"k": "from b"}

    async def a2(inputs: dict[str, Any]) -> dict[str, Any]:
        await b_done.wait()
        await anyio.sleep(0.01)  # b's completion is handled first
        return {}

    return {"noop": lambda inputs: {}, "a1": a1, "a2": a2, "b1": b1}


@pytest.mark.parametrize(
    ("strategy", "winner"), [("last_wins", "from a"), ("first_wins", "from b")]
)
async def test_conflicts_go_by_the_order_branches_finish(
    tmp_path: Path, strategy: str, winner: str
) -> None:
    async with Runtime(tmp_path / "r.db", functions=_functions()) as rt:
        handle = await rt.start(_race(strategy))
        result = await handle.result()
        state = await rt.get_state(handle.run_id)
    assert result.status == "completed"
    assert result.memory["k"] == state.memory["k"] == winner


async def test_cancel_during_a_retry_backoff_records_the_resume_point() -> None:
    attempts: list[int] = []
    failed = threading.Event()

    def flaky(inputs: dict[str, Any]) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            failed.set()
            raise ValueError("first attempt fails")
        return {"ok": True}

    graph = GraphSpec(
        id="g",
        nodes=[NodeSpec(id="a", function="flaky")],
        entry_node="a",
        retry=RetryPolicy(max_attempts=2, initial_delay=60, max_delay=60, jitter=0),
    )
    async with Runtime(None, functions={"flaky": flaky}) as rt:
        handle = await rt.start(graph)
        assert await anyio.to_thread.run_sync(failed.wait, 30)
        await anyio.sleep(0.05)  # the failure is recorded and the backoff timer set
        await rt.cancel(handle.run_id)
        result = await handle.result()
        cancelled = [
            e.body for e in await rt.read_events(handle.run_id) if isinstance(e.body, RunCancelled)
        ]
        assert result.status == "cancelled" and result.resume_at == ["a"]
        assert [c.node_id for c in cancelled] == ["a"]
        resumed = await (await rt.resume(handle.run_id)).result()
    assert resumed.status == "completed" and resumed.memory == {"ok": True}


async def test_a_pause_inside_parallel_branches_reports_every_resume_point() -> None:
    gate = anyio.Event()
    entered: list[str] = []
    both = anyio.Event()

    async def slow(inputs: dict[str, Any]) -> dict[str, Any]:
        entered.append("x")
        if len(entered) == 2:
            both.set()
        await gate.wait()
        return {}

    nodes = [
        NodeSpec(id=n, function="slow" if n in ("b1", "b2") else "noop")
        for n in ("s", "b1", "b2", "c1", "c2", "j")
    ]
    edges = [
        EdgeSpec(source=a, target=b)
        for a, b in [("s", "b1"), ("s", "b2"), ("b1", "c1"), ("b2", "c2"), ("c1", "j"), ("c2", "j")]
    ]
    graph = GraphSpec(id="g", nodes=nodes, edges=edges, entry_node="s")
    async with Runtime(None, functions={"slow": slow, "noop": lambda inputs: {}}) as rt:
        handle = await rt.start(graph)
        await both.wait()  # both branches run
        await rt.pause(handle.run_id)
        gate.set()
        result = await handle.result()
        assert result.status == "paused" and sorted(result.resume_at) == ["c1", "c2"]
        assert sorted((await rt.get_state(handle.run_id)).pending) == ["c1", "c2"]
        resumed = await (await rt.resume(handle.run_id)).result()
    assert resumed.status == "completed" and resumed.path[-1] == "j"
