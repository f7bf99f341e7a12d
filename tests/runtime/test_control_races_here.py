"""Controls that race in one runtime (as two requests to one server do), on SQLite and
PostgreSQL, 20 pairs each: two approvals of one gate, an approval and a resume, two
resumes of a cancelled run. One wins and the run goes on to its end; the other is refused
(RunChangedError or RunStateError, recording nothing), never leaves the run "running" with
nobody executing it, and never answers that it failed after it was recorded."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, RunStateError, Runtime
from runtime.events import ApprovalGranted, RunResumed
from runtime.testing import function_node

pytestmark = pytest.mark.anyio

PAIRS = 20

GATED = GraphSpec(
    id="gated",
    nodes=[
        function_node("draft", output_keys=["reply"]),
        function_node("send", output_keys=["sent"]),
    ],
    edges=[EdgeSpec(source="draft", target="send")],
    entry_node="draft",
    pause_nodes=["send"],
)


class Nodes:
    """``draft`` answers at once; ``send`` waits until ``go`` is set (so a cancel finds it
    running) unless ``go`` is already set."""

    def __init__(self) -> None:
        self.go = anyio.Event()
        self.go.set()

    async def send(self, inputs: dict[str, Any]) -> dict[str, Any]:
        await self.go.wait()
        return {"sent": "yes"}

    def functions(self) -> dict[str, Any]:
        return {"draft": lambda inputs: {"reply": "dear ann"}, "send": self.send}


async def _at_gate(rt: Runtime) -> str:
    result = await (await rt.start(GATED)).result()
    assert (result.status, result.resume_at) == ("paused", ["send"])
    return result.run_id


async def _both(first: Any, second: Any) -> list[str]:
    """Run both at once; each answers "ok", or "refused" for a RunStateError (a
    RunChangedError is one: the run moved on since)."""
    answers: list[str] = []

    async def one(action: Any) -> None:
        try:
            await action()
            answers.append("ok")
        except RunStateError:
            answers.append("refused")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(one, first)
        tasks.start_soon(one, second)
    return sorted(answers)


async def _ends_completed(rt: Runtime, run_id: str) -> None:
    """The run reaches its end here (no stuck "running"), and its claim is given up."""
    with anyio.fail_after(10):
        result = await rt.result(run_id)
    assert result.status == "completed", (run_id, result.status, result.error)
    assert rt.store is not None
    info = await rt.store.get_run(run_id)
    assert info is not None and info.owner is None


def _count(events: list[Any], kind: type) -> int:
    return sum(type(e.body) is kind for e in events)


async def test_two_approvals_at_once_one_passes_the_gate(store: str) -> None:
    async with Runtime(store, functions=Nodes().functions()) as rt:
        for _ in range(PAIRS):
            run_id = await _at_gate(rt)
            answers = await _both(
                partial(rt.approve, run_id, by="ann"), partial(rt.approve, run_id, by="bob")
            )
            assert answers == ["ok", "refused"]
            await _ends_completed(rt, run_id)
            assert _count(await rt.read_events(run_id), ApprovalGranted) == 1
            assert len(rt._running.actions) == 0  # a run's lock is kept only while in use


async def test_an_approval_and_a_resume_at_once_the_approval_passes(store: str) -> None:
    async with Runtime(store, functions=Nodes().functions()) as rt:
        for _ in range(PAIRS):
            run_id = await _at_gate(rt)
            answers = await _both(partial(rt.approve, run_id, by="ann"), partial(rt.resume, run_id))
            # The resume is refused whichever goes first: at the gate, or running here.
            assert answers == ["ok", "refused"]
            await _ends_completed(rt, run_id)
            events = await rt.read_events(run_id)
            assert _count(events, ApprovalGranted) == 1
            assert _count(events, RunResumed) == 1  # the approval's


async def test_two_resumes_of_a_cancelled_run_at_once_one_runs_it(store: str) -> None:
    nodes = Nodes()
    async with Runtime(store, functions=nodes.functions()) as rt:
        for _ in range(PAIRS):
            run_id = await _at_gate(rt)
            nodes.go = anyio.Event()
            handle = await rt.approve(run_id, by="ann")
            assert handle is not None
            await rt.cancel(run_id, reason="later")
            assert (await handle.result()).status == "cancelled"
            nodes.go.set()
            answers = await _both(partial(rt.resume, run_id), partial(rt.resume, run_id))
            assert answers == ["ok", "refused"]
            await _ends_completed(rt, run_id)
            assert _count(await rt.read_events(run_id), RunResumed) == 2
