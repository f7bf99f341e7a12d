"""Filtered, keyset-paged run listings (EventStore.query_runs), on every store."""

from __future__ import annotations

import pytest

from eventstore import EventBody, RunQuery
from runtime.events import RunFinished, RunResumed, RunStarted

from .conftest import StoreFactory

pytestmark = pytest.mark.anyio


def started(graph: str) -> RunStarted:
    return RunStarted(graph={"id": graph}, graph_hash=f"hash-{graph}", entry="a")


def finished(quality: str) -> RunFinished:
    return RunFinished(status="failed" if quality == "failed" else "completed", quality=quality)


async def test_runs_are_filtered_by_the_values_their_events_index(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as store:
        await store.append("a1", [started("trip"), finished("clean")], expected_seq=0)
        await store.append("a2", [started("trip"), finished("degraded")], expected_seq=0)
        await store.append("b1", [started("mail"), finished("clean")], expected_seq=0)
        await store.append("b2", [started("mail")], expected_seq=0)

        async def ids(query: RunQuery) -> list[str]:
            return [r.run_id for r in (await store.query_runs(query)).runs]

        assert await ids(RunQuery()) == ["b2", "b1", "a2", "a1"]
        assert await ids(RunQuery(graph_id="trip")) == ["a2", "a1"]
        assert await ids(RunQuery(graph_hash="hash-mail")) == ["b2", "b1"]
        assert await ids(RunQuery(quality="clean")) == ["b1", "a1"]
        assert await ids(RunQuery(quality="clean", graph_id="mail")) == ["b1"]
        assert await ids(RunQuery(status="running")) == ["b2"]
        assert await ids(RunQuery(status="completed", quality="degraded")) == ["a2"]
        assert await ids(RunQuery(graph_id="nope")) == []
        info = await store.get_run("a2")
        assert info is not None
        assert (info.graph_id, info.quality, info.graph_hash) == ("trip", "degraded", "hash-trip")
        # A run that goes on has no quality until it finishes again (its hook clears it).
        await store.append("a2", [RunResumed()], expected_seq=2)
        resumed = await store.get_run("a2")
        assert resumed is not None and (resumed.status, resumed.quality) == ("running", None)
        assert await ids(RunQuery(quality="degraded")) == []


async def test_runs_are_filtered_by_when_they_were_created(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        for i in range(6):
            await store.append(f"r{i}", [started("g")], expected_seq=0)
        runs = (await store.query_runs()).runs
        created = {r.run_id: r.created for r in runs}
        since, until = created["r1"], created["r4"]
        window = await store.query_runs(RunQuery(since=since, until=until))
        # since is inclusive, until exclusive (runs of one commit share a time: compare sets)
        expected = {r for r, t in created.items() if since <= t < until}
        assert {r.run_id for r in window.runs} == expected
        assert "r1" in expected and "r4" not in expected
        assert (await store.query_runs(RunQuery(since=until + 3600))).runs == []


async def test_pages_follow_a_cursor_unshaken_by_runs_created_meanwhile(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as store:
        for i in range(25):
            events: list[EventBody] = [started("even" if i % 2 == 0 else "odd")]
            await store.append(f"r{i:02d}", events, expected_seq=0)
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = await store.query_runs(RunQuery(graph_id="even"), cursor=cursor, limit=4)
            seen += [r.run_id for r in page.runs]
            pages += 1
            # New runs arrive between pages: they sort first, so no later page changes.
            await store.append(f"new{pages}", [started("even")], expected_seq=0)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == [f"r{i:02d}" for i in range(24, -1, -2)]
        assert pages == 4  # 13 runs by 4, the last page short
        # Exactly a page's worth left: the page before says so, and the last page is full.
        first = await store.query_runs(RunQuery(graph_id="odd"), limit=6)
        assert len(first.runs) == 6 and first.next_cursor is not None
        last = await store.query_runs(RunQuery(graph_id="odd"), cursor=first.next_cursor, limit=6)
        assert len(last.runs) == 6 and last.next_cursor is None


async def test_a_foreign_cursor_or_a_bad_limit_is_refused(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        await store.append("r1", [started("g")], expected_seq=0)
        for cursor in ("", "abc", "1.5", "nan~3", "1.0~-1", "1.0~x", "9" * 100):
            with pytest.raises(ValueError, match="cursor"):
                await store.query_runs(cursor=cursor)
        with pytest.raises(ValueError, match="limit"):
            await store.query_runs(limit=0)
    with pytest.raises(ValueError, match="finite"):
        RunQuery(since=float("nan"))
