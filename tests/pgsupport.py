"""Real PostgreSQL for tests: the server's URL, or a skip that says why there is none.

Tests use ``MAGISTRATE_TEST_PG_URL`` (default: the local server, trust auth, database
``test``); each test gets schemas of its own (named with a fresh prefix) that are dropped
afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager

import anyio
import psycopg
import pytest
from psycopg import sql

from eventstore import AppendResult, PostgresEventStore
from runtime.events import RunStarted

__all__ = [
    "PG_URL",
    "Answers",
    "drop_schemas",
    "fresh_prefix",
    "full_writer",
    "pg_url",
    "wait_until",
]

PG_URL = os.environ.get("MAGISTRATE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

_reachable: str | None = None  # "" when reachable, else why not


def pg_url() -> str:
    """The test server's URL; skips the calling test (saying why) when none answers."""
    global _reachable
    if _reachable is None:
        try:
            with psycopg.connect(PG_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            _reachable = ""
        except psycopg.Error as exc:
            _reachable = f"no PostgreSQL server at {PG_URL}: {str(exc).strip()}"
    if _reachable:
        pytest.skip(_reachable)
    return PG_URL


def fresh_prefix() -> str:
    """A schema-name prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}"


def drop_schemas(prefix: str) -> None:
    """Drop every schema whose name starts with ``prefix``."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (prefix + "%",)
        ).fetchall()
        for (name,) in rows:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def schema_prefix() -> Iterator[str]:
    """Fixture body: a fresh prefix for the test's schemas, dropped afterwards."""
    pg_url()
    prefix = fresh_prefix()
    yield prefix
    drop_schemas(prefix)


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float) -> None:
    """Return once ``check()`` is true (asked every 50 ms); TimeoutError after ``timeout``."""
    with anyio.fail_after(timeout):
        while True:
            if await check():
                return
            await anyio.sleep(0.05)


#: The answers of a store's appends, in the order given.
Answers = list[tuple[AppendResult | None, BaseException | None]]


@asynccontextmanager
async def full_writer(store: PostgresEventStore) -> AsyncIterator[Answers]:
    """An open PostgreSQL store's writer without room until the block ends: another
    connection holds the lock of the store's meta row (every append transaction updates
    it), one append waits for it in the writer's commit, and new runs' first appends
    (runs ``filler-N``) fill the writer's queue while the store has room. Yields the
    appends' answers, given as the writer commits them once the block has ended."""
    answers: Answers = []

    def answered(result: AppendResult | None, error: BaseException | None) -> None:
        answers.append((result, error))

    def submit(run_id: str) -> bool:
        started = [RunStarted(graph={}, graph_hash="gh", entry="a")]
        return store.submit(run_id, started, expected_seq=0, on_done=answered)

    async def taken() -> bool:
        return store.statistics().queued == 0

    locked = sql.SQL("SELECT 1 FROM {}.meta FOR UPDATE").format(sql.Identifier(store.schema))
    async with await psycopg.AsyncConnection.connect(PG_URL) as conn, conn.transaction():
        await conn.execute(locked)
        assert submit("filler-0")
        await wait_until(taken, 10)  # in the writer's transaction, which waits for the lock
        for index in range(1, 10_000):
            if not store.has_room():
                break
            assert submit(f"filler-{index}")
        else:
            raise AssertionError("the writer took 10,000 first appends while stalled")
        yield answers
