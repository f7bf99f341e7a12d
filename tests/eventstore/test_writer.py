"""The SQLite store's writer thread (eventstore._writer): close, callbacks, backpressure."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from eventstore import AppendResult, DurabilityConfig, SqliteEventStore, StoreClosedError
from eventstore._core import WriterCore
from eventstore._requests import prepare
from eventstore._sqlite_turn import OwnershipRequest, Request
from eventstore._writer import ThreadWriter
from runtime.events import NodeStarted, RunStarted


class _GatedCore(WriterCore):
    """A writer core whose transactions wait for ``gate`` (so no answer frees a slot
    meanwhile) and which records each batch's request types."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "OFF")
        self.gate = threading.Event()
        self.batches: list[list[str]] = []

    def commit(self, batch: Sequence[Request]) -> None:
        self.gate.wait(10)
        self.batches.append([type(request).__name__ for request in batch])
        super().commit(batch)


pytestmark = pytest.mark.anyio


def started() -> RunStarted:
    return RunStarted(graph={}, graph_hash="gh", entry="a")


async def test_appends_made_before_close_are_all_committed(tmp_path: Path) -> None:
    # Close lets the writer commit and answer everything submitted before it stops.
    store = SqliteEventStore(tmp_path / "s.db")
    await store.open()
    results: list[int] = []

    async def append(index: int) -> None:
        result = await store.append(f"r{index}", [started()], expected_seq=0)
        results.append(result.last_seq)

    async with anyio.create_task_group() as tg:
        for index in range(300):
            tg.start_soon(append, index)
        await anyio.lowlevel.checkpoint()  # every append is submitted, few are answered
        await store.close()
    assert results == [1] * 300
    with pytest.raises(StoreClosedError):
        await store.append("late", [started()], expected_seq=0)
    async with SqliteEventStore(tmp_path / "s.db") as store:
        runs = await store.list_runs(limit=1000)
    assert len(runs) == 300


async def test_a_callback_that_submits_while_answers_are_handed_out_gets_its_own_answer(
    tmp_path: Path,
) -> None:
    # A callback may tell someone who appends at once; that append's answer must be its
    # own, not one of the answers still being handed out. Each run appends its own number
    # of events, so an answer given to the wrong request shows in last_seq.
    results: dict[str, int] = {}
    order: list[str] = []
    all_answered = anyio.Event()

    def batch(index: int) -> list[Any]:
        return [started()] + [NodeStarted(node_id=f"n{i}", visit=1) for i in range(index)]

    def submit(run_id: str, index: int) -> None:
        assert store.submit(run_id, batch(index), expected_seq=0, on_done=record(run_id))

    def record(run_id: str) -> Any:
        def on_done(result: AppendResult | None, error: BaseException | None) -> None:
            assert error is None and result is not None
            results[run_id] = result.last_seq
            order.append(run_id)
            if run_id.startswith("a"):
                submit("c" + run_id[1:], int(run_id[1:]))
            if len(results) == 48:
                all_answered.set()

        return on_done

    async with SqliteEventStore(tmp_path / "s.db", config=DurabilityConfig(max_batch=8)) as store:
        for i in range(16):
            submit(f"a{i}", i)
        for i in range(16):
            submit(f"b{i}", 16 + i)
        with anyio.fail_after(20):
            await all_answered.wait()
    expected = {f"a{i}": i + 1 for i in range(16)}
    expected |= {f"b{i}": 17 + i for i in range(16)}
    expected |= {f"c{i}": i + 1 for i in range(16)}
    assert results == expected
    # Answers come in submission order (a, then b); each c after the a that submitted it.
    assert [r for r in order if r[0] != "c"] == [f"a{i}" for i in range(16)] + [
        f"b{i}" for i in range(16)
    ]
    assert all(order.index(f"c{i}") > order.index(f"a{i}") for i in range(16))


async def test_waiting_for_space_wakes_one_waiter_per_freed_slot(tmp_path: Path) -> None:
    # 200 appenders against room for 4 in flight: each waits for space once and gets a
    # slot when woken; nobody is woken for a slot someone else then takes.
    core = WriterCore(str(tmp_path / "s.db"), "OFF")
    core.connect(True, 1024)
    writer = ThreadWriter(core, max_batch=2, capacity=4, on_commit=lambda: None)
    refused = 0
    last: dict[str, int] = {}

    async def append(run_id: str) -> None:
        nonlocal refused
        request = prepare(run_id, [started()], 0)
        while not writer.submit(request):
            refused += 1
            await writer.wait_for_space()
        await request.wait()
        assert request.error is None and request.result is not None
        last[run_id] = request.result.last_seq

    try:
        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(append, f"r{i}")
        stats = writer.statistics()
    finally:
        await writer.close()
        core.close()
    assert last == {f"r{i}": 1 for i in range(200)}
    assert refused == 196  # the first four found room; every other one was refused once
    assert stats.appends == 200 and stats.max_batch_size <= 2


async def test_a_full_writer_refuses_a_new_runs_first_append_not_a_runs_next_one(
    tmp_path: Path,
) -> None:
    # Backpressure falls on new runs: with its one slot taken (and the commit held at a
    # gate, so no answer frees it), the writer refuses another run's first append and an
    # unchecked one, but takes the next append of the run going, behind its first.
    core = _GatedCore(str(tmp_path / "s.db"))
    core.connect(True, 1024)
    writer = ThreadWriter(core, max_batch=1, capacity=1, on_commit=lambda: None)
    try:
        first = prepare("r0", [started()], 0)
        assert writer.submit(first)
        assert not writer.submit(prepare("r1", [started()], 0))
        assert not writer.submit(prepare("r0", [started()], None))
        following = prepare("r0", [NodeStarted(node_id="a", visit=1)], 1)
        assert writer.submit(following)
        core.gate.set()
        await following.wait()
        assert first.error is None and following.error is None
        assert following.result is not None and following.result.last_seq == 2
    finally:
        core.gate.set()
        await writer.close()
        core.close()


async def test_room_for_a_new_run_means_room_for_its_append_and_a_held_claim(
    tmp_path: Path,
) -> None:
    # wait_for_room returns at once with two slots free, and waits while one append is in
    # flight of two (a claim held for the new run goes with its append) until it is answered.
    core = WriterCore(str(tmp_path / "s.db"), "OFF")
    core.connect(True, 1024)
    writer = ThreadWriter(core, max_batch=1, capacity=2, on_commit=lambda: None)
    try:
        assert writer.has_room()
        with anyio.fail_after(5):
            await writer.wait_for_room()
        first = prepare("r0", [started()], 0)
        assert writer.submit(first)
        assert not writer.has_room()  # answered on the loop only, not before this await
        waited = asyncio.ensure_future(writer.wait_for_room())
        await anyio.lowlevel.checkpoint()
        assert not waited.done() or first.result is not None
        with anyio.fail_after(10):
            await waited
        assert first.result is not None  # its answer made the room
    finally:
        await writer.close()
        core.close()


async def test_a_waiter_cancelled_after_it_was_woken_passes_its_slot_on(tmp_path: Path) -> None:
    core = WriterCore(str(tmp_path / "s.db"), "OFF")
    core.connect(True, 1024)
    writer = ThreadWriter(core, max_batch=1, capacity=1, on_commit=lambda: None)
    done: list[str] = []

    async def wait(name: str) -> None:
        await writer.wait_for_space()
        done.append(name)

    try:
        # asyncio tasks: the cancellation must reach a waiter already woken, which
        # anyio's cancel scopes put off until the task next waits.
        doomed = asyncio.create_task(wait("doomed"))
        await anyio.lowlevel.checkpoint()
        patient = asyncio.create_task(wait("patient"))
        await anyio.lowlevel.checkpoint()
        first = prepare("r0", [started()], 0)
        assert writer.submit(first)
        # Its answer frees one slot: the first waiter is woken for it (after this task,
        # whose answer came first) and cancelled before it runs.
        await first.wait()
        doomed.cancel()
        with anyio.fail_after(10):
            await patient
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert done == ["patient"]
    finally:
        await writer.close()
        core.close()


async def test_a_held_claim_goes_with_its_runs_append_only_when_both_fit(tmp_path: Path) -> None:
    # A claim held for a run's next append is queued just before it: with room for one
    # more request only, neither is queued (the claim stays held), and once a slot is
    # freed both go, the claim first.
    core = WriterCore(str(tmp_path / "s.db"), "OFF")
    core.connect(True, 1024)
    writer = ThreadWriter(core, max_batch=1, capacity=2, on_commit=lambda: None)
    answers: list[str] = []
    try:
        claim = OwnershipRequest("claim", run_id="r1", owner="w", lease=5, fence=True)
        claim.on_done = lambda result, error: answers.append("claim")  # type: ignore[assignment]
        writer.hold(claim)
        other = prepare("r0", [started()], 0)
        assert writer.submit(other)  # one slot left
        append = prepare("r1", [started()], 0)
        assert not writer.submit(append)  # room for the append alone, not with its claim
        await other.wait()
        assert answers == []  # still held
        assert writer.submit(append)
        await append.wait()
        assert append.error is None and answers == ["claim"]
    finally:
        await writer.close()
        core.close()


async def test_a_held_claim_commits_in_the_transaction_of_its_runs_append(
    tmp_path: Path,
) -> None:
    # Ownership requests do not count against the appends a transaction may take: a claim
    # held for a run's append is taken with it, even where the writer takes one append
    # per transaction.
    core = _GatedCore(str(tmp_path / "s.db"))
    core.connect(True, 1024)
    writer = ThreadWriter(core, max_batch=1, capacity=10, on_commit=lambda: None)
    try:
        other = prepare("r0", [started()], 0)
        assert writer.submit(other)  # the thread takes it and waits at the gate
        writer.hold(OwnershipRequest("claim", run_id="r1", owner="w", lease=5, fence=True))
        append = prepare("r1", [started()], 0)
        assert writer.submit(append)  # queued after its claim, behind r0's transaction
        core.gate.set()
        await append.wait()
        assert append.error is None
        assert core.batches == [["AppendRequest"], ["OwnershipRequest", "AppendRequest"]]
    finally:
        await writer.close()
        core.close()


async def test_a_full_postgresql_writer_refuses_only_a_new_runs_first_append() -> None:
    # The same rule in the PostgreSQL writer: its queue full (no task drains it here), a
    # new run's first append is refused, the next append of a run queued is taken.
    from eventstore._postgres_writer import PostgresWriter

    writer = PostgresWriter(
        lambda: None, ("c", "r"), max_batch=1, capacity=1, on_commit=lambda: None
    )
    assert writer.submit(prepare("r0", [started()], 0, rows=False))
    assert not writer.submit(prepare("r1", [started()], 0, rows=False))
    assert writer.submit(prepare("r0", [NodeStarted(node_id="a", visit=1)], 1, rows=False))
    assert writer.statistics().queued == 2
