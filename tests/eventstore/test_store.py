"""The backend-neutral store suite: every EventStore implementation must pass it."""

from __future__ import annotations

import itertools

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import (
    AppendResult,
    ConcurrencyError,
    EventBody,
    EventStore,
    Snapshot,
    SnapshotAfter,
    SnapshotTaken,
    StoreClosedError,
    StoreError,
    snapshot_digest,
)
from runtime.events import (
    MemoryWritten,
    NodeCompleted,
    NodeStarted,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
    fold,
)

from .conftest import StoreFactory
from .strategies import BODY_STRATEGIES

pytestmark = pytest.mark.anyio


def started(entry: str = "a") -> RunStarted:
    return RunStarted(graph={"nodes": [entry]}, graph_hash="gh-1", entry=entry, input={"x": 1})


def step(node: str, value: int) -> list[MemoryWritten | NodeStarted | NodeCompleted]:
    return [
        NodeStarted(node_id=node, visit=1),
        MemoryWritten(key="log", value=value, op="append", node_id=node),
        NodeCompleted(node_id=node),
    ]


async def test_store_implements_the_protocol(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        assert isinstance(store, EventStore)


async def test_appended_events_read_back_in_order_with_a_hash_chain(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as store:
        first = await store.append("r1", [started(), *step("a", 1)], expected_seq=0)
        second = await store.append("r1", step("b", 2), expected_seq=4)
        events = await store.read_all("r1")
    assert (first.first_seq, first.last_seq) == (1, 4)
    assert (second.first_seq, second.last_seq) == (5, 7)
    assert [e.seq for e in events] == list(range(1, 8))
    assert [type(e.body) for e in events[:2]] == [RunStarted, NodeStarted]
    assert events[0].prev_hash == ""
    for before, after in itertools.pairwise(events):
        assert after.prev_hash == before.hash
        assert after.position > before.position
    assert events[-1].hash == second.last_hash
    assert events[-1].position == second.last_position
    assert len({e.hash for e in events}) == 7
    assert all(e.ts > 0 and e.version == 1 and e.run_id == "r1" for e in events)


async def test_a_stale_expected_seq_raises_and_writes_nothing(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        await store.append("r1", [started()], expected_seq=0)
        with pytest.raises(ConcurrencyError) as caught:
            await store.append("r1", step("a", 1), expected_seq=0)
        assert (caught.value.run_id, caught.value.expected_seq, caught.value.actual_seq) == (
            "r1",
            0,
            1,
        )
        with pytest.raises(ConcurrencyError):
            await store.append("r2", [started()], expected_seq=3)  # a new run is at 0
        events = await store.read_all("r1")
        assert [e.seq for e in events] == [1]
        assert await store.get_run("r2") is None
        assert store.statistics().conflicts == 2


async def test_a_conflict_in_a_group_commit_fails_only_its_own_append(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as store:
        results: dict[str, AppendResult | Exception] = {}

        async def append(run_id: str, expected: int) -> None:
            try:
                results[run_id] = await store.append(run_id, [started()], expected_seq=expected)
            except ConcurrencyError as exc:
                results[run_id] = exc

        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(append, f"r{i}", 5 if i == 17 else 0)
        assert isinstance(results["r17"], ConcurrencyError)
        ok = [r for r in results.values() if isinstance(r, AppendResult)]
        assert len(ok) == 39
        assert len({r.last_position for r in ok}) == 39
        assert await store.read_all("r17") == []
        assert len(await store.read_all("r3")) == 1


async def test_in_flight_appends_of_one_run_commit_in_submission_order(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as store:
        results: list[AppendResult] = []

        async def append(expected: int) -> None:
            body = MemoryWritten(key="k", value=expected, op="append")
            results.append(await store.append("r1", [body], expected_seq=expected))

        async with anyio.create_task_group() as tg:
            for expected in range(30):  # all submitted before any is committed
                tg.start_soon(append, expected)
        events = await store.read_all("r1")
    assert sorted(r.last_seq for r in results) == list(range(1, 31))
    assert [e.body.value for e in events] == list(range(30))  # type: ignore[attr-defined]


async def test_expected_seq_none_appends_at_the_end(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        await store.append("r1", [started()], expected_seq=None)
        result = await store.append("r1", step("a", 1), expected_seq=None)
        assert (result.first_seq, result.last_seq) == (2, 4)


async def test_an_empty_batch_is_refused(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        with pytest.raises(ValueError):
            await store.append("r1", [], expected_seq=0)


async def test_read_honours_from_and_to_seq(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        await store.append("r1", [started(), *step("a", 1), *step("b", 2)], expected_seq=0)
        middle = [e async for e in store.read("r1", from_seq=3, to_seq=5)]
        everything = await store.read_all("r1")
        prefix = await store.read_all("r1", to_seq=2)
        assert [e.seq for e in middle] == [3, 4, 5]
        assert middle == everything[2:5]  # prev_hash of the first is filled in too
        assert prefix == everything[:2]
        assert [e async for e in store.read("nope")] == []
        assert [e async for e in store.read("r1", from_seq=99)] == []


async def test_every_event_type_survives_the_store(store_factory: StoreFactory) -> None:
    examples = []

    @settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.tuples(*BODY_STRATEGIES.values()))
    def collect(bodies: tuple[EventBody, ...]) -> None:
        examples.append(list(bodies))

    collect()
    async with store_factory("s") as store:
        seq = 0
        for batch in examples:
            seq = (await store.append("r1", batch, expected_seq=seq)).last_seq
        events = await store.read_all("r1")
    assert [e.body for e in events] == [b for batch in examples for b in batch]


async def test_runs_are_listed_with_their_status(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        await store.append("r1", [started()], expected_seq=0)
        await store.append("r2", [started(), RunPaused(reason="hitl", node_id="a")], expected_seq=0)
        await store.append("r3", [started()], expected_seq=0)
        await store.append(
            "r3", [*step("a", 1), RunFinished(status="completed", quality="clean")], expected_seq=1
        )
        await store.append("r4", [NodeStarted(node_id="a", visit=1)], expected_seq=0)
        runs = {info.run_id: info for info in await store.list_runs()}
        assert {k: v.status for k, v in runs.items()} == {
            "r1": "running",
            "r2": "paused",
            "r3": "completed",
            "r4": "new",
        }
        assert runs["r3"].last_seq == 5 and runs["r1"].last_seq == 1
        assert runs["r3"].graph_hash == "gh-1" and runs["r4"].graph_hash is None
        assert runs["r3"].updated >= runs["r3"].created
        assert [r.run_id for r in await store.list_runs(status="paused")] == ["r2"]
        assert [r.run_id for r in await store.list_runs(limit=2)] == ["r4", "r3"]
        await store.append("r2", [RunResumed()], expected_seq=2)
        info = await store.get_run("r2")
        assert info is not None and info.status == "running" and info.last_seq == 3
        assert await store.get_run("missing") is None


async def test_verify_accepts_an_untouched_run(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        seq = (await store.append("r1", [started()], expected_seq=0)).last_seq
        for i in range(5):
            seq = (await store.append("r1", step(f"n{i}", i), expected_seq=seq)).last_seq
        report = await store.verify("r1")
        missing = await store.verify("nobody")
    assert report.ok and report.checked == 16 and report.broken_at is None
    assert not missing.ok and missing.checked == 0


async def test_tail_replays_then_follows_live_appends(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        await store.append("r1", [started(), *step("a", 1)], expected_seq=0)
        await store.append("r2", [started()], expected_seq=0)
        seen: list[tuple[str, int, int]] = []
        done = anyio.Event()

        async def follow() -> None:
            async for event in store.tail(from_position=2, poll_interval=5.0):
                seen.append((event.run_id, event.seq, event.position))
                if len(seen) == 6:
                    done.set()
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await store.append("r1", step("b", 2), expected_seq=4)  # woken by the commit
            with anyio.fail_after(10):
                await done.wait()
        prev_of_r1_seq5 = (await store.read_all("r1"))[4].prev_hash
    assert seen == [
        ("r1", 3, 3),
        ("r1", 4, 4),
        ("r2", 1, 5),
        ("r1", 5, 6),
        ("r1", 6, 7),
        ("r1", 7, 8),
    ]
    assert prev_of_r1_seq5 != ""


async def test_head_position_is_the_newest_committed_event(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        empty = await store.head_position()
        await store.append("r1", [started(), *step("a", 1)], expected_seq=0)
        await store.append("r2", [started()], expected_seq=0)
        head = await store.head_position()
        newest = (await store.read_all("r2"))[-1].position
        await store.append("r1", step("b", 2), expected_seq=4)
        seen = []
        async for event in store.tail(from_position=head):
            seen.append((event.run_id, event.seq))
            if len(seen) == 3:
                break
    assert empty == 0
    assert head == newest == 5
    assert seen == [("r1", 5), ("r1", 6), ("r1", 7)]


async def test_tail_events_carry_the_same_envelope_as_read(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        await store.append("r1", [started(), *step("a", 1)], expected_seq=0)
        await store.append("r2", [started()], expected_seq=0)
        await store.append("r1", step("b", 2), expected_seq=4)
        tailed = []
        async for event in store.tail():
            tailed.append(event)
            if len(tailed) == 8:
                break
        read = await store.read_all("r1") + await store.read_all("r2")
    assert sorted(tailed, key=lambda e: (e.run_id, e.seq)) == read


async def test_tail_ends_when_the_store_closes(store_factory: StoreFactory) -> None:
    store = store_factory("s")
    await store.open()
    await store.append("r1", [started()], expected_seq=0)
    seen = []

    async def follow() -> None:
        async for event in store.tail(poll_interval=0.01):
            seen.append(event.seq)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await anyio.sleep(0.05)
            await store.close()
    assert seen == [1]


async def test_a_reopened_store_continues_the_chain(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        await store.append("r1", [started(), *step("a", 1)], expected_seq=0)
    async with store_factory("s") as store:
        with pytest.raises(ConcurrencyError):
            await store.append("r1", step("b", 2), expected_seq=0)
        result = await store.append("r1", step("b", 2), expected_seq=4)
        other = await store.append("r2", [started()], expected_seq=0)
        report = await store.verify("r1")
        state = fold(await store.read_all("r1"))
    assert (result.first_seq, result.last_seq) == (5, 7)
    assert other.last_position == 8
    assert report.ok and report.checked == 7
    assert state.memory["log"] == [1, 2] and state.path == ["a", "b"]


async def test_calls_on_a_closed_store_raise(store_factory: StoreFactory) -> None:
    store = store_factory("s")
    with pytest.raises(StoreClosedError):
        await store.append("r1", [started()], expected_seq=0)
    async with store:
        await store.append("r1", [started()], expected_seq=0)
    await store.close()  # idempotent
    with pytest.raises(StoreClosedError):
        await store.append("r1", [started()], expected_seq=1)
    with pytest.raises(StoreClosedError):
        await store.read_all("r1")
    with pytest.raises(StoreClosedError):
        await store.list_runs()


async def test_close_with_appends_in_flight_never_loses_an_acknowledged_one(
    store_factory: StoreFactory,
) -> None:
    store = store_factory("s")
    await store.open()
    acknowledged: dict[str, int] = {}
    refused: list[str] = []
    enough = anyio.Event()

    async def appender(run_id: str) -> None:
        seq = 0
        while True:
            body = MemoryWritten(key="k", value=seq, op="append")
            try:
                result = await store.append(run_id, [body, body], expected_seq=seq)
            except StoreClosedError:
                refused.append(run_id)
                return
            seq = acknowledged[run_id] = result.last_seq
            if sum(acknowledged.values()) > 2000:
                enough.set()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(appender, f"r{i}")
            await enough.wait()
            await store.close()
    assert len(refused) == 60  # every appender learned of the close
    async with store_factory("s") as reopened:
        for run_id, last in acknowledged.items():
            events = await reopened.read_all(run_id)
            # Everything acknowledged is there, and nothing that was refused.
            assert len(events) == last
            assert (await reopened.verify(run_id)).ok


async def append_new_run(store: EventStore, run_id: str) -> None:
    await store.append(run_id, [started(), *step("a", 0)], expected_seq=0)


async def test_statistics_count_appends_and_batches(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(append_new_run, store, f"r{i}")
        stats = store.statistics()
    assert stats.appends == 20 and stats.events == 80
    assert 1 <= stats.batches <= 20 and stats.max_batch_size >= 1
    assert stats.mean_batch_size == pytest.approx(20 / stats.batches)
    assert stats.commit_seconds_total > 0


async def test_large_bodies_round_trip_and_verify(store_factory: StoreFactory) -> None:
    big = MemoryWritten(key="doc", value="lorem ipsum " * 2000, op="replace")
    odd = MemoryWritten(key="raw", value="".join(chr(0x4E00 + i % 500) for i in range(3000)))
    async with store_factory("s") as store:
        await store.append("r1", [started(), big, odd], expected_seq=0)
        events = await store.read_all("r1")
        report = await store.verify("r1")
    assert [e.body for e in events[1:]] == [big, odd]
    assert report.ok and report.checked == 3


async def test_snapshots_are_saved_loaded_replaced_and_deleted(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as store:
        await store.append("r1", [started(), *step("a", 1)], expected_seq=0)
        await store.append("r2", [started()], expected_seq=0)
        events = await store.read_all("r1")
        assert await store.load_snapshot("r1") is None
        assert await store.load_snapshot("nobody") is None
        first = Snapshot("r1", 2, events[1].hash, "fold-1", b"\x00state at 2")
        await store.save_snapshot(first)
        assert await store.load_snapshot("r1") == first
        # A newer one replaces it; another run's is its own.
        newer = Snapshot("r1", 4, events[3].hash, "fold-1", b"state at 4" * 1000)
        await store.save_snapshot(newer)
        other = Snapshot("r2", 1, (await store.read_all("r2"))[0].hash, "fold-2", b"")
        await store.save_snapshot(other)
        assert await store.load_snapshot("r1") == newer
        assert await store.load_snapshot("r2") == other
        # Snapshots are a cache: the log, its listing and its chain do not see them.
        assert await store.read_all("r1") == events
        assert (await store.verify("r1")).ok
        assert await store.delete_snapshots("r1") == 1
        assert await store.load_snapshot("r1") is None
        assert await store.load_snapshot("r2") == other
        await store.save_snapshot(newer)
    async with store_factory("s") as store:  # they are kept in the store
        assert await store.load_snapshot("r1") == newer
        assert await store.delete_snapshots() == 2
        assert await store.load_snapshot("r2") is None
        assert await store.delete_snapshots() == 0


async def test_a_snapshot_handed_over_with_an_append_is_saved_with_its_batch(
    store_factory: StoreFactory,
) -> None:
    def taken(version: str, data: bytes) -> SnapshotTaken:
        return SnapshotTaken(digest=snapshot_digest(data), version=version)

    async with store_factory("s") as store:
        # After the batch's second event, its snapshot.taken: seq 2, that event's hash.
        await store.append(
            "r1",
            [started(), taken("f", b"2"), *step("a", 1)],
            expected_seq=0,
            snapshot=SnapshotAfter(2, "f", b"2"),
        )
        events = await store.read_all("r1")
        assert await store.load_snapshot("r1") == Snapshot("r1", 2, events[1].hash, "f", b"2")
        # A batch the fence refuses saves no snapshot either.
        with pytest.raises(ConcurrencyError):
            await store.append(
                "r1",
                [taken("f", b"x"), *step("b", 1)],
                expected_seq=1,
                snapshot=SnapshotAfter(1, "f", b"x"),
            )
        assert (await store.load_snapshot("r1")).seq == 2  # type: ignore[union-attr]
        # The newest replaces it; a snapshot naming no event of the batch is refused.
        first, *rest = step("b", 1)
        await store.append(
            "r1",
            [first, taken("g", b""), *rest],
            expected_seq=5,
            snapshot=SnapshotAfter(2, "g", b""),
        )
        events = await store.read_all("r1")
        assert await store.load_snapshot("r1") == Snapshot("r1", 7, events[6].hash, "g", b"")
        for bad in (0, 4):
            with pytest.raises(ValueError, match="snapshot"):
                await store.append(
                    "r1", step("c", 1), expected_seq=9, snapshot=SnapshotAfter(bad, "g", b"")
                )
        assert await store.delete_snapshots("r1") == 1
        assert (await store.verify("r1")).ok


async def test_a_snapshot_of_a_run_without_events_is_refused(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        with pytest.raises(StoreError, match="nobody"):
            await store.save_snapshot(Snapshot("nobody", 1, "00" * 32, "v", b""))
    with pytest.raises(StoreClosedError):
        await store.load_snapshot("r1")
