"""A resume through a runtime that saw the run earlier acts on the log as it is now."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import EdgeSpec, GraphSpec, NodeSpec, RunResult, Runtime
from runtime.events import RunResumed

pytestmark = pytest.mark.anyio


def step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {}


GATED = GraphSpec(
    id="gated",
    nodes=[NodeSpec(id=n, function="step") for n in ("a", "b", "c")],
    edges=[EdgeSpec(source="a", target="b"), EdgeSpec(source="b", target="c")],
    entry_node="a",
    pause_nodes=["b", "c"],
)


async def _approved(rt: Runtime, run_id: str) -> RunResult:
    """Pass the gate the run waits at (only an approval does), here, and wait for it."""
    handle = await rt.approve(run_id, by="ann")
    assert handle is not None  # this runtime can run the graph
    return await handle.result()


async def test_a_resume_through_a_runtime_that_saw_the_run_earlier_acts(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    functions = {"step": step}
    async with Runtime(db, functions=functions) as a, Runtime(db, functions=functions) as b:
        first = await (await a.start(GATED)).result()
        assert (first.status, first.resume_at) == ("paused", ["b"])
        second = await _approved(b, first.run_id)
        assert (second.status, second.resume_at) == ("paused", ["c"])
        third = await _approved(a, first.run_id)
        events = await a.read_events(first.run_id)
    # A's resume acted on the log as B left it: it is recorded and the run went on.
    assert sum(isinstance(e.body, RunResumed) for e in events) == 2
    assert third.status == "completed" and third.path == ["a", "b", "c"]


async def test_a_runs_claim_is_released_before_its_result_is_delivered(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    functions = {"step": step}
    async with Runtime(db, functions=functions) as a, Runtime(db, functions=functions) as b:
        assert a.store is not None
        for _ in range(40):
            paused = await (await a.start(GATED)).result()
            # No wait: the result says "paused", so another runtime may resume it now.
            again = await _approved(b, paused.run_id)
            assert (again.status, again.resume_at) == ("paused", ["c"])
            info = await a.store.get_run(paused.run_id)
            assert info is not None and info.owner is None
