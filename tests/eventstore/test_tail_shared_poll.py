"""The followers of a store's ``tail`` share one poll of its head (eventstore._followers):
idle followers of a SQLite store cost one query of its head per poll interval, however
many they are, and another writer's commit still reaches every one of them."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from eventstore import Event, SqliteEventStore
from runtime.events import MemoryWritten

pytestmark = pytest.mark.anyio

INTERVAL = 0.02


async def read_statements(store: SqliteEventStore) -> list[str]:
    """Every statement the store's read connection runs from now on (SQLite's own trace)."""
    statements: list[str] = []
    conn = store._reader._conn
    assert conn is not None
    await conn.set_trace_callback(statements.append)
    return statements


async def idle_reads(statements: list[str], followers: int, intervals: int) -> int:
    """The statements run over ``intervals`` poll intervals once ``followers`` followers
    (started since ``statements`` was empty) read their chunk and wait, checked against a
    bound: one poll per interval in the time that really passed."""
    for _ in range(3000):  # every follower made its first read: all wait from now on
        if sum("JOIN runs" in statement for statement in statements) >= followers:
            break
        await anyio.sleep(0.01)
    await anyio.sleep(2 * INTERVAL)
    before, started = len(statements), time.monotonic()
    await anyio.sleep(intervals * INTERVAL)
    reads, elapsed = len(statements) - before, time.monotonic() - started
    # The first poll perhaps at once, then one per interval: the bound holds however slow
    # the machine is (fewer intervals pass, fewer polls), and does not grow with followers.
    assert reads <= elapsed / INTERVAL + 2, (followers, reads, elapsed)
    return reads


async def follow(
    store: SqliteEventStore,
    head: int,
    seen: list[Event],
    scope: anyio.CancelScope,
    until: int,
    interval: float = INTERVAL,
) -> None:
    """Follow ``store`` from ``head`` into ``seen``, ``until`` events or ``scope`` cancelled."""
    with scope:
        async for event in store.tail(from_position=head, poll_interval=interval):
            seen.append(event)
            if len(seen) == until:
                return


async def test_idle_followers_make_one_poll_per_interval_however_many(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SqliteEventStore(path) as store:
        await store.append("r", [MemoryWritten(key="k", value=0)], expected_seq=0)
        head = await store.head_position()
        statements = await read_statements(store)
        for count in (1, 30):
            statements.clear()
            async with anyio.create_task_group() as tg:
                for _ in range(count):
                    tg.start_soon(follow, store, head, [], anyio.CancelScope(), 1)
                await idle_reads(statements, count, intervals=15)
                tg.cancel_scope.cancel()


async def test_another_stores_commit_reaches_every_follower(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    followers = 25
    async with SqliteEventStore(path) as store, SqliteEventStore(path) as other:
        await store.append("r", [MemoryWritten(key="k", value=0)], expected_seq=0)
        head = await store.head_position()
        statements = await read_statements(store)
        seen: list[list[Event]] = [[] for _ in range(followers)]
        scopes = [anyio.CancelScope() for _ in range(followers)]
        with anyio.fail_after(30):  # a guard against hanging, not a measure
            async with anyio.create_task_group() as tg:
                # The first polls the head every INTERVAL, the shortest poll_interval: the
                # others wait without polling.
                for index, (events, scope) in enumerate(zip(seen, scopes, strict=True)):
                    interval = INTERVAL if index == 0 else 10 * INTERVAL
                    tg.start_soon(follow, store, head, events, scope, 4, interval)
                await idle_reads(statements, followers, intervals=10)
                # Followers that stop, the one polling among them first, hand the poll on
                # to those still following.
                for scope in scopes[:5]:
                    scope.cancel()
                await anyio.sleep(2 * INTERVAL)
                for value in range(1, 5):
                    await other.append(
                        "r", [MemoryWritten(key="k", value=value)], expected_seq=value
                    )
        for events in seen[:5]:
            assert events == []
        for events in seen[5:]:
            assert [e.body.value for e in events] == [1, 2, 3, 4]  # type: ignore[attr-defined]
            assert [e.position for e in events] == sorted(e.position for e in events)
            assert all(e.position > head for e in events)
