"""An application cancels a call to the runtime at the worst moment, as asyncio does it
(``asyncio.wait_for`` whose timeout passes, ``Task.cancel``): natively, through any anyio
shield. Nothing is left half-done: a fork whose copy is written is launched, a start's
claim on a run that never began is given up, and a control event committed for a run not
live here (a cancel, a pause, an input, a graph change) reaches the commit hooks. Each
call still raises the cancellation.

The worst moment is reached without timing: a commit hook, or the runtime's own store
with one method wrapped, cancels the caller's task just as the call hands its write to
the store."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import EventBody
from runtime import RunHandle, Runtime
from runtime.events import GraphReplaced, InputInjected, RunCancelled, RunForked, RunPaused
from runtime.testing import linear_graph

pytestmark = pytest.mark.anyio

DEADLINE = 30  # seconds: a test that would hang fails here instead


def _functions(gate: asyncio.Event) -> dict[str, Any]:
    async def a(inputs: dict[str, Any]) -> dict[str, Any]:
        await gate.wait()  # until the test has asked for a pause
        return {"x": 1}

    return {"a": a, "b": lambda inputs: {"y": 2}, "c": lambda inputs: {"z": 3}}


class Seen:
    """A commit hook: every committed batch's event types, by run."""

    def __init__(self) -> None:
        self.batches: dict[str, list[list[str]]] = {}

    def __call__(self, run_id: str, seq: int, events: Sequence[EventBody]) -> None:
        self.batches.setdefault(run_id, []).append([type(e).__name__ for e in events])


class CancelAt:
    """A commit hook that cancels ``task`` once a batch holding an event of ``kind`` is
    committed (the hook runs in the appending task: the call in flight)."""

    def __init__(self, kind: type[EventBody]) -> None:
        self.kind = kind
        self.task: asyncio.Task[Any] | None = None

    def __call__(self, run_id: str, seq: int, events: Sequence[EventBody]) -> None:
        if self.task is not None and any(isinstance(e, self.kind) for e in events):
            self.task.cancel()
            self.task = None


async def _paused(rt: Runtime, gate: asyncio.Event) -> RunHandle:
    """A run of a, b paused (by the user) before b."""
    handle = await rt.start(linear_graph(["a", "b"]))
    await rt.pause(handle.run_id)  # asked while a runs: the run pauses once a returns
    gate.set()
    paused = await handle.result()
    assert (paused.status, paused.resume_at) == ("paused", ["b"])
    return handle


async def _cancelled(call: Awaitable[Any], on_task: Callable[[asyncio.Task[Any]], None]) -> None:
    """Run ``call`` in a task of its own (given to ``on_task`` first); it is cancelled."""
    task = asyncio.ensure_future(call)
    on_task(task)
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_fork_cancelled_once_its_copy_is_written_still_runs(tmp_path: Path) -> None:
    # Before: the copy (claimed here) was written and never launched: the fork stayed
    # "running", its claim renewed by this runtime, and after it closed "running" with
    # nobody to run it.
    gate = asyncio.Event()
    gate.set()
    cancel_at = CancelAt(RunForked)
    with anyio.fail_after(DEADLINE):
        async with Runtime(
            tmp_path / "runs.db", functions=_functions(gate), hooks=[cancel_at]
        ) as rt:
            source = await rt.start(linear_graph(["a", "b"]))
            assert (await source.result()).status == "completed"
            events = await rt.read_events(source.run_id)
            at = next(e.seq for e in events if getattr(e.body, "node_id", None) == "b")
            fork = rt.fork(source.run_id, at)
            await _cancelled(fork, lambda task: setattr(cancel_at, "task", task))
            assert rt.store is not None
            [forked] = [i for i in await rt.store.list_runs() if i.origin == source.run_id]
            done = await rt.result(forked.run_id)
            assert (done.status, done.memory) == ("completed", {"x": 1, "y": 2})
        async with Runtime(tmp_path / "runs.db") as after:
            assert after.store is not None
            info = await after.store.get_run(forked.run_id)
            assert info is not None and (info.status, info.owner) == ("completed", None)


async def test_a_start_cancelled_while_it_claims_its_run_id_gives_the_claim_up(
    tmp_path: Path,
) -> None:
    # Before: the claim was held (and renewed) here for as long as the runtime lived,
    # though no run of that id began: no other process could start it.
    gate = asyncio.Event()
    gate.set()
    graph = linear_graph(["a", "b"])
    with anyio.fail_after(DEADLINE):
        async with (
            Runtime(tmp_path / "runs.db", functions=_functions(gate)) as rt,
            Runtime(tmp_path / "runs.db", functions=_functions(gate)) as other,
        ):
            store: Any = rt.store  # the runtime's own store, one method wrapped
            claim = store.claim
            starting: list[asyncio.Task[Any]] = []

            async def cancelled_while_claiming(*args: Any, **kwargs: Any) -> Any:
                starting.pop().cancel()  # the start in flight, as its claim is asked
                return await claim(*args, **kwargs)

            store.claim = cancelled_while_claiming
            await _cancelled(rt.start(graph, run_id="r1"), starting.append)
            store.claim = claim
            assert await store.get_run("r1") is None  # no run of it began
            result = await (await other.start(graph, run_id="r1")).result()
            assert result.status == "completed", result.error


async def _control(rt: Runtime, gate: asyncio.Event, what: str) -> tuple[str, Awaitable[Any]]:
    """A run not live here and a control call on it; the event it records."""
    if what == "pause":  # running, with nobody executing it yet (left for a worker)
        run_id = await rt.submit(linear_graph(["a", "b"]))
        return run_id, rt.pause(run_id)
    run_id = (await _paused(rt, gate)).run_id
    if what == "cancel":
        return run_id, rt.cancel(run_id, reason="enough")
    if what == "inject":
        return run_id, rt.inject_input(run_id, {"note": "hi"})
    return run_id, rt.resume(run_id, graph=linear_graph(["a", "b", "c"]))


RECORDED = {
    "cancel": RunCancelled,
    "pause": RunPaused,
    "inject": InputInjected,
    "regraph": GraphReplaced,
}


@pytest.mark.parametrize("what", sorted(RECORDED))
async def test_a_control_event_committed_under_a_native_cancel_reaches_the_hooks(
    tmp_path: Path, what: str
) -> None:
    # Before: the cancellation went through the log's anyio shield while the store
    # committed the batch: the event was in the log, and the commit hooks never saw it.
    gate = asyncio.Event()
    seen = Seen()
    kind = RECORDED[what]
    with anyio.fail_after(DEADLINE):
        async with Runtime(tmp_path / "runs.db", functions=_functions(gate), hooks=[seen]) as rt:
            run_id, call = await _control(rt, gate, what)
            store: Any = rt.store  # the runtime's own store, one method wrapped
            append = store.append
            calling: list[asyncio.Task[Any]] = []

            async def cancelled_while_committing(
                run: str, events: Sequence[EventBody], **kwargs: Any
            ) -> Any:
                if run == run_id and calling and any(isinstance(e, kind) for e in events):
                    # Handed over below, then the caller is cancelled while it waits.
                    calling.pop().cancel()
                return await append(run, events, **kwargs)

            store.append = cancelled_while_committing
            await _cancelled(call, calling.append)
            store.append = append
            assert not calling  # the call reached its append
            logged = [type(e.body).__name__ for e in await rt.read_events(run_id)]
            assert kind.__name__ in logged  # committed, though the call was cancelled
            hooked = [name for batch in seen.batches.get(run_id, []) for name in batch]
            assert kind.__name__ in hooked


async def test_a_submit_cancelled_while_it_commits_is_counted_where_it_started(
    tmp_path: Path,
) -> None:
    # Before: the run was recorded (a worker would run it), but the start counted nowhere:
    # runs started - finished came out short by one across the fleet.
    from prometheus_client import CollectorRegistry

    from runtime import RuntimeMetrics

    registry = CollectorRegistry()
    with anyio.fail_after(DEADLINE):
        async with Runtime(tmp_path / "runs.db", metrics=RuntimeMetrics(registry)) as rt:
            store: Any = rt.store  # the runtime's own store, one method wrapped
            append = store.append
            calling: list[asyncio.Task[Any]] = []

            async def cancelled_while_committing(*args: Any, **kwargs: Any) -> Any:
                calling.pop().cancel()  # handed over below; the caller waits for it
                return await append(*args, **kwargs)

            store.append = cancelled_while_committing
            await _cancelled(rt.submit(linear_graph(["a", "b"]), run_id="s1"), calling.append)
            store.append = append
            info = await store.get_run("s1")
            assert info is not None and (info.status, info.owner) == ("running", None)
    assert registry.get_sample_value("magistrate_runs_started_total") == 1
