"""Two edges of a runtime's runs, on real SQLite files.

Closing: a start (resume, fork) that meets the runtime closing either made its run live
first, and the close ends it as it ends the others (recorded cancelled, or in a worker
handed over with no owner), or is refused with RunStateError ("the Runtime is closing")
having recorded nothing; no run is left running with the closed runtime as its owner.

Input from another process: given to a run live elsewhere, it is taken into the owner's
live state without stopping the run, as a pause request is: the node in progress runs
once, the nodes after it read the input, and the live result equals the fold of the log.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from eventstore import SqliteEventStore
from runtime import (
    GraphSpec,
    NodeContext,
    OwnershipConfig,
    RecoveryConfig,
    RunStateError,
    Runtime,
)
from runtime.events import InputInjected, OutputSet
from runtime.testing import function_node, linear_graph
from tests.pgsupport import wait_until

pytestmark = pytest.mark.anyio

CLOSED = "the runtime closed"
CLOSING = "the Runtime is closing"


class Gate:
    """What the nodes of a closing test wait on: set once the runs may finish."""

    def __init__(self) -> None:
        self.open = anyio.Event()
        self.entered = anyio.Event()

    async def waits(self, inputs: dict[str, Any]) -> dict[str, Any]:
        self.entered.set()
        await self.open.wait()
        return {"done": True}


async def _stored(path: Path) -> dict[str, tuple[str, str | None]]:
    """Every run in the store: its status and owner."""
    async with SqliteEventStore(path) as store:
        runs = await store.list_runs(limit=10_000)
    return {info.run_id: (info.status, info.owner) for info in runs}


async def _start_against_close(
    rt: Runtime, graphs: list[GraphSpec], *, starters: int, before_close: int
) -> tuple[list[str], list[BaseException]]:
    """Start runs from ``starters`` tasks at once (half naming their run ids) while another
    task closes ``rt`` once ``before_close`` starts returned; the started runs' ids and the
    starts' errors."""
    started: list[str] = []
    errors: list[BaseException] = []
    enough = anyio.Event()

    async def keep_starting(n: int) -> None:
        i = 0
        while True:
            i += 1
            run_id = f"s{n}-{i}" if n % 2 else None
            try:
                handle = await rt.start(graphs[i % len(graphs)], run_id=run_id)
            except Exception as exc:
                errors.append(exc)
                return
            started.append(handle.run_id)
            if len(started) >= before_close:
                enough.set()
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        await rt.__aenter__()
        for n in range(starters):
            tg.start_soon(keep_starting, n)
        await enough.wait()
        await rt.__aexit__(None, None, None)  # the starts go on meanwhile
    return started, errors


@pytest.mark.parametrize("worker", [False, True], ids=["cancels", "hands-over"])
async def test_a_start_meeting_the_close_is_refused_having_recorded_nothing_or_ends_as_live_runs_do(
    tmp_path: Path, worker: bool
) -> None:
    gate = Gate()
    sync = GraphSpec(id="sync", nodes=[function_node("waits")], entry_node="waits")
    written_behind = GraphSpec(
        id="behind", nodes=[function_node("waits")], entry_node="waits", durability="async"
    )
    refused_seen = started_seen = 0
    for round_ in range(6):  # each round one close, against starts of every kind
        path = tmp_path / f"runs{round_}.db"
        recovery = RecoveryConfig(interval=60) if worker else None
        rt = Runtime(path, functions={"waits": gate.waits}, recovery=recovery)
        with anyio.fail_after(60):
            started, errors = await _start_against_close(
                rt, [sync, written_behind], starters=6, before_close=1 + 3 * round_
            )
        # Every start that failed says why, in one line, and made nothing of its run.
        assert errors
        for error in errors:
            assert isinstance(error, RunStateError), repr(error)
            assert CLOSING in str(error) and error.run_id == "-" and error.status == "closing"
        stored = await _stored(path)
        assert set(stored) == set(started)  # a refused named start left no run behind
        for run_id, (status, owner) in stored.items():
            assert owner is None, (run_id, status, owner)  # no run kept by the closed runtime
            assert status == ("running" if worker else "cancelled"), (run_id, status)
        refused_seen += len(errors)
        started_seen += len(started)
        if not worker:
            async with Runtime(path) as reader:
                for run_id in started:
                    result = await reader.result(run_id)
                    assert (result.status, result.error) == ("cancelled", CLOSED)
                    assert result.resume_at == ["waits"]  # a resume continues it
    assert refused_seen and started_seen  # both ends of the race were met
    if worker:
        # Handed over: another worker takes each run and finishes it.
        gate.open.set()
        async with Runtime(
            path, functions={"waits": gate.waits}, recovery=RecoveryConfig(interval=0.05)
        ) as other:

            async def finished() -> bool:
                return all(s == "completed" for s, _ in (await _stored(path)).values())

            await wait_until(finished, 60)
            assert other.worker_id


async def test_a_submit_meeting_the_close_is_refused_having_recorded_nothing_or_is_recorded(
    tmp_path: Path,
) -> None:
    graph = GraphSpec(id="sync", nodes=[function_node("waits")], entry_node="waits")
    path = tmp_path / "runs.db"
    rt = Runtime(path)
    submitted: list[str] = []
    errors: list[BaseException] = []
    enough = anyio.Event()

    async def keep_submitting(n: int) -> None:
        i = 0
        while True:
            i += 1
            try:
                submitted.append(await rt.submit(graph, run_id=f"u{n}-{i}"))
            except Exception as exc:
                errors.append(exc)
                return
            if len(submitted) >= 5:
                enough.set()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await rt.__aenter__()
            for n in range(4):
                tg.start_soon(keep_submitting, n)
            await enough.wait()
            await rt.__aexit__(None, None, None)
    assert len(errors) == 4
    for error in errors:
        assert isinstance(error, RunStateError) and CLOSING in str(error), repr(error)
    stored = await _stored(path)
    assert set(stored) == set(submitted)  # for any worker: running, owned by none
    assert set(stored.values()) == {("running", None)}


async def _fork_against_close(
    rt: Runtime, source: str, at_seq: int, before_close: int
) -> tuple[list[str], list[str], list[BaseException]]:
    """Fork ``source`` at ``at_seq`` from three tasks at once and resume it from a fourth
    while another task closes ``rt`` once ``before_close`` forks returned; the forks' ids,
    the resumed runs' ids and the calls' errors."""
    forked: list[str] = []
    resumed: list[str] = []
    errors: list[BaseException] = []
    enough = anyio.Event()

    async def keep_forking() -> None:
        while True:
            try:
                handle = await rt.fork(source, at_seq)
            except Exception as exc:
                errors.append(exc)
                return
            forked.append(handle.run_id)
            if len(forked) >= before_close:
                enough.set()
            await anyio.lowlevel.checkpoint()

    async def resume_once() -> None:
        await enough.wait()
        try:
            resumed.append((await rt.resume(source)).run_id)
        except Exception as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        await rt.__aenter__()
        for _ in range(3):
            tg.start_soon(keep_forking)
        tg.start_soon(resume_once)
        await enough.wait()
        await rt.__aexit__(None, None, None)
    return forked, resumed, errors


async def test_a_fork_or_resume_meeting_the_close_is_refused_or_its_run_recorded_cancelled(
    tmp_path: Path,
) -> None:
    gate = Gate()
    path = tmp_path / "runs.db"
    graph = linear_graph(["first", "waits"])
    functions = {"first": lambda inputs: {"n": 1}, "waits": gate.waits}
    async with Runtime(path, functions=functions) as rt:
        source = await rt.start(graph)
        await gate.entered.wait()
        await rt.cancel(source.run_id)
        assert (await source.result()).status == "cancelled"
        at_seq = len(await rt.read_events(source.run_id)) - 1  # waits started, not done
    recorded: set[str] = set()  # the forks in the store
    for round_ in range(4):
        with anyio.fail_after(60):
            forked, resumed, errors = await _fork_against_close(
                Runtime(path, functions=functions), source.run_id, at_seq, 1 + round_
            )
        recorded.update(forked)
        assert set(resumed) <= {source.run_id}
        for error in errors:
            assert isinstance(error, RunStateError), repr(error)
            if error.status == "closing":  # refused: nothing of it was recorded
                assert CLOSING in str(error) and error.run_id == "-"
            else:  # its copy was written first: the close recorded it cancelled
                assert error.status == "cancelled" and CLOSED in str(error), str(error)
                recorded.add(error.run_id)
        stored = await _stored(path)
        assert set(stored) - {source.run_id} == recorded
        for run_id, (status, owner) in stored.items():
            assert (status, owner) == ("cancelled", None), run_id
    async with Runtime(path) as reader:
        for run_id in stored:  # each one's resume continues where the close stopped it
            assert (await reader.result(run_id)).resume_at == ["waits"]


async def test_input_from_another_runtime_reaches_a_quiet_running_run_without_rerunning_its_node(
    tmp_path: Path,
) -> None:
    """The brief's case: a node that runs a while and appends nothing; another runtime on
    the store gives input, then asks for a pause (the node's signal that the input, the
    earlier event, was taken in). The node runs once, the next node reads the input."""
    path = tmp_path / "runs.db"
    calls: list[str] = []
    entered = anyio.Event()

    async def slow(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        calls.append("slow")
        entered.set()
        while not ctx.pause_requested:  # noqa: ASYNC110 (the run's state says it)
            await anyio.sleep(0.01)
        return {"slow": "done"}

    def after(inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append("after")
        return {"seen": inputs["x"]}

    graph = linear_graph(["slow", function_node("after", input_keys=["x"])])
    ownership = OwnershipConfig(control_interval=0.2)
    functions: dict[str, Callable[..., Any]] = {"slow": slow, "after": after}
    with anyio.fail_after(60):
        async with (
            Runtime(path, functions=functions, ownership=ownership) as owner,
            Runtime(path) as other,
        ):
            handle = await owner.start(graph)
            await entered.wait()
            await other.inject_input(handle.run_id, {"x": 42})
            await other.pause(handle.run_id)
            paused = await handle.result()
            assert (paused.status, paused.resume_at) == ("paused", ["after"])
            assert paused.memory["x"] == 42
            assert paused == await other.result(handle.run_id)  # the live result is the fold
            done = await (await owner.resume(handle.run_id)).result()
            assert done == await other.result(handle.run_id)
    assert calls == ["slow", "after"]
    assert done.status == "completed"
    assert done.memory == {"slow": "done", "x": 42, "seen": 42}


async def test_input_from_another_runtime_reaches_a_busy_run_in_a_worker_without_rerunning_its_node(
    tmp_path: Path,
) -> None:
    """A worker's run whose node keeps recording partial outputs: its next append meets
    the input (or its watch sees it first); the input is taken in, the node goes on."""
    path = tmp_path / "runs.db"
    calls: list[str] = []
    entered = anyio.Event()
    release = anyio.Event()

    async def busy(inputs: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        calls.append("busy")
        entered.set()
        i = 0
        while not release.is_set():
            i += 1
            await ctx.set_output("ticks", i)
            await anyio.sleep(0.01)
        return {"ticks": i}

    def after(inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append("after")
        return {"seen": inputs["x"]}

    graph = linear_graph(["busy", function_node("after", input_keys=["x"])])
    functions: dict[str, Callable[..., Any]] = {"busy": busy, "after": after}
    with anyio.fail_after(60):
        async with (
            Runtime(
                path,
                functions=functions,
                recovery=RecoveryConfig(interval=0.05),
                ownership=OwnershipConfig(control_interval=0.2),
            ) as worker,
            Runtime(path) as other,
        ):
            run_id = await other.submit(graph)
            await entered.wait()
            live_results: list[Any] = []

            async def live_result() -> None:
                live_results.append(await worker.result(run_id))  # the live run's outcome

            async with anyio.create_task_group() as tg:
                tg.start_soon(live_result)
                await other.inject_input(run_id, {"x": 7})
                given = [
                    e.seq for e in await other.read_events(run_id) if type(e.body) is InputInjected
                ]

                async def went_on() -> bool:  # the owner appended after the input
                    events = await other.read_events(run_id)
                    return any(type(e.body) is OutputSet and e.seq > given[0] for e in events)

                await wait_until(went_on, 30)
                release.set()
            result = live_results[0]
            assert result == await other.result(run_id)  # the live result is the fold
    assert calls == ["busy", "after"]
    assert result.status == "completed"
    assert result.memory["x"] == 7 and result.memory["seen"] == 7
