"""An application embedding the runtime misuses its lifecycle: enters one Runtime twice at
once, leaves a block it never entered, enters it off asyncio (trio), or cancels a resume
or an approval whose run is already under way (``asyncio.wait_for`` around the call, a
request handler that timed out). Each gets a clear error at the wrong call, and no run is
left "running" with nobody to run it: a cancelled call whose run was launched leaves the
run going, as a cancelled start does."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors import finish
from eventstore import EventBody
from runtime import RunStateError, Runtime
from runtime.events import ApprovalGranted, RunResumed
from runtime.testing import linear_graph

pytestmark = pytest.mark.anyio

FUNCTIONS = {"a": lambda inputs: {"x": 1}, "b": lambda inputs: {"y": 2}}


async def test_a_second_entry_while_the_first_is_opening_is_refused(tmp_path: Path) -> None:
    rt = Runtime(tmp_path / "runs.db", functions=FUNCTIONS)
    refused: list[RunStateError] = []

    async def enter_again() -> None:
        try:
            await rt.__aenter__()
        except RunStateError as exc:
            refused.append(exc)
        else:  # the old behaviour: a second store and actor system, never closed
            raise AssertionError("entered twice")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(enter_again)  # runs while the block below is still opening
        async with rt:
            done = await (await rt.start(linear_graph(["a"]))).result()
    assert len(refused) == 1 and "open already" in str(refused[0])
    assert done.status == "completed"


async def test_leaving_a_block_never_entered_says_so(tmp_path: Path) -> None:
    rt = Runtime(tmp_path / "runs.db")
    with pytest.raises(RunStateError, match="the Runtime is not open"):
        await rt.__aexit__(None, None, None)


def test_entering_off_asyncio_is_refused_before_anything_is_opened(tmp_path: Path) -> None:
    # Driven by hand, as another event loop (trio) would: no asyncio loop is running.
    rt = Runtime(tmp_path / "runs.db", functions=FUNCTIONS)
    entering = rt.__aenter__()
    with pytest.raises(RunStateError, match="a Runtime runs on asyncio"):
        entering.send(None)
    assert not (tmp_path / "runs.db").exists()  # nothing was opened
    with pytest.raises(RunStateError, match="the Runtime is not open"):
        rt.system  # noqa: B018


def test_under_trio_the_entry_says_the_runtime_runs_on_asyncio(tmp_path: Path) -> None:
    pytest.importorskip("trio")

    async def main() -> None:
        with pytest.raises(RunStateError, match="runs on asyncio"):
            async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS):
                pass

    anyio.run(main, backend="trio")


class CancelAt:
    """A commit hook that cancels ``task`` once a batch holding an event of ``kind`` is
    committed: the call in flight is cancelled just after its run's event is in the store."""

    def __init__(self, kind: type[EventBody]) -> None:
        self.kind = kind
        self.task: asyncio.Task[Any] | None = None

    def __call__(self, run_id: str, seq: int, events: Sequence[EventBody]) -> None:
        if self.task is not None and any(isinstance(e, self.kind) for e in events):
            self.task.cancel()
            self.task = None


async def test_a_resume_cancelled_once_its_run_is_launched_leaves_the_run_going(
    tmp_path: Path,
) -> None:
    # Before: the cancelled resume gave the claim of its launched run up, the run stopped
    # ("its claim was lost") and stayed "running" in the log, with nobody to run it.
    cancel_at = CancelAt(RunResumed)
    graph = linear_graph(["a", "b"])
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS, hooks=[cancel_at]) as rt:
        handle = await rt.start(graph)
        await rt.pause(handle.run_id)  # stops before b
        first = await handle.result()
        assert (first.status, first.resume_at) == ("paused", ["b"])
        resuming = asyncio.ensure_future(rt.resume(handle.run_id))
        cancel_at.task = resuming
        with pytest.raises(asyncio.CancelledError):
            await resuming
        done = await rt.result(handle.run_id)
        assert done.status == "completed" and done.memory == {"x": 1, "y": 2}
        assert rt.store is not None
        info = await rt.store.get_run(handle.run_id)
        assert info is not None and info.status == "completed" and info.owner is None


async def test_an_approval_cancelled_once_recorded_still_continues_its_run(
    tmp_path: Path,
) -> None:
    # Before: the approval was recorded, then the cancellation stopped its continuation
    # and gave the claim up: the run stayed "running" with nobody to run it.
    cancel_at = CancelAt(ApprovalGranted)
    graph = linear_graph(["a", "b"], pause_nodes=["b"])
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS, hooks=[cancel_at]) as rt:
        paused = await (await rt.start(graph)).result()
        assert (paused.status, paused.paused_reason) == ("paused", "hitl")
        approving = asyncio.ensure_future(rt.approve(paused.run_id, by="ann"))
        cancel_at.task = approving
        with pytest.raises(asyncio.CancelledError):
            await approving
        done = await rt.result(paused.run_id)
        assert done.status == "completed" and done.memory == {"x": 1, "y": 2}
    async with Runtime(tmp_path / "runs.db") as after:  # as the log has it, once closed
        assert (await after.get_state(paused.run_id)).status == "completed"


async def test_finish_holds_a_cancellation_until_its_work_has_ended() -> None:
    began, release = asyncio.Event(), asyncio.Event()
    ended: list[str] = []

    async def work() -> str:
        began.set()
        await release.wait()
        ended.append("work")
        return "done"

    async def caller() -> str:
        return await finish(work())

    task = asyncio.ensure_future(caller())
    await began.wait()
    task.cancel()
    await asyncio.sleep(0)  # the cancellation reaches the caller, which holds it
    assert not task.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended == ["work"]
    assert await finish(asyncio.sleep(0, "plain")) == "plain"
