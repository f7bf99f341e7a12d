"""Reading a SQLite store: its read connection, a run's log in chunks, its verification,
the rows a follower of every run tails, and the run listing."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiosqlite

from ._errors import CorruptLogError, StoreClosedError, StoreFileError
from ._events import Event
from ._format import HASH_WIDTH
from ._protocol import VerifyReport
from ._rows import check_row, row_events
from ._runquery import RunInfo, RunPage, RunQuery, page_of, page_sql
from ._schema import describe, sqlite_name

__all__ = ["CHUNK", "SqliteReader", "page_statement"]

CHUNK = 1000
_EVENT_COLUMNS = "position, seq, ts, type, version, hash, body"
# The runs row holds each run's live last seq and update time (the fence advances them).
# Then the run's owner: its claim's, while the lease is unexpired at the time given as the
# parameter (leases are on this machine's clock), found by the claims table's primary key,
# one lookup per row of the page; after the origin, the claim's draining mark (the same).
_RUN_COLUMNS = (
    "r.run_id, r.status, r.created, r.updated, r.last_seq, r.graph_hash, r.graph_id, r.quality, "
    "CASE WHEN c.expires >= ? THEN c.owner END, r.origin, "
    "CASE WHEN c.expires >= ? THEN c.draining END, "
    "CASE WHEN c.expires >= ? THEN c.draining_since END"
)
_CLAIM_JOIN = "LEFT JOIN claims c ON c.run_id = r.run_id"
# From the row holding position + 1 (a frame may start before it); each row's previous
# hash is the last of the run's row before it.
_TAIL = (
    "SELECT e.position, e.seq, e.ts, e.type, e.version, e.hash, e.body, r.run_id, "
    f"(SELECT substr(p.hash, -{HASH_WIDTH}) FROM events p WHERE p.run = e.run "
    "AND p.seq < e.seq ORDER BY p.seq DESC LIMIT 1) "
    "FROM events e JOIN runs r ON r.run = e.run WHERE e.position >= coalesce("
    "(SELECT position FROM events WHERE position <= ? "
    "ORDER BY position DESC LIMIT 1), 0) ORDER BY e.position LIMIT ?"
)


def page_statement(
    query: RunQuery, cursor: str | None, limit: int, now: float
) -> tuple[str, tuple[Any, ...]]:
    """The statement (and parameters) of one page of the run listing, owners as of ``now``."""
    params = (now,) * 3
    return page_sql(_RUN_COLUMNS, query, cursor, limit, "?", join=_CLAIM_JOIN, column_params=params)


class SqliteReader:
    """The read connection of a SQLite store (``query_only``), beside its writer's.

    ``check_readable(operation)`` raises StoreClosedError when the store no longer serves
    reads. Every query maps a damaged or unreadable file to StoreFileError.
    """

    __slots__ = ("_check_readable", "_conn", "_run_keys", "path")

    def __init__(self, path: str, check_readable: Callable[[str], None]) -> None:
        self.path = path
        self._check_readable = check_readable
        self._conn: aiosqlite.Connection | None = None
        self._run_keys: dict[str, int] = {}

    async def connect(self, uri: str | None = None) -> None:
        """Open the read connection (to ``uri`` if given, else to the path); StoreFileError
        if the file cannot be opened."""
        try:
            # Waits for a lock as long as the writer does (10 s: see eventstore._schema).
            if uri is None:
                self._conn = await aiosqlite.connect(sqlite_name(self.path), timeout=10.0)
            else:
                self._conn = await aiosqlite.connect(uri, uri=True, timeout=10.0)
            await self._conn.execute("PRAGMA query_only = ON")
        except sqlite3.Error as exc:
            raise StoreFileError(self.path, describe(self.path, exc)) from exc

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def fetch(self, operation: str, sql: str, params: tuple[Any, ...]) -> list[Any]:
        """The rows of one statement on the read connection."""
        self._check_readable(operation)
        conn = self._conn
        if conn is None:
            raise StoreClosedError(operation)
        try:
            return list(await conn.execute_fetchall(sql, params))
        except (ValueError, sqlite3.ProgrammingError) as exc:
            # aiosqlite raises these when the connection closed under the call.
            if self._conn is None:
                raise StoreClosedError(operation) from exc
            raise
        except sqlite3.Error as exc:  # a damaged or truncated file, an I/O error
            raise StoreFileError(self.path, f"{operation}: {describe(self.path, exc)}") from exc

    async def _run_key(self, operation: str, run_id: str) -> int | None:
        key = self._run_keys.get(run_id)
        if key is None:
            rows = await self.fetch(operation, "SELECT run FROM runs WHERE run_id = ?", (run_id,))
            if not rows:
                return None
            key = self._run_keys[run_id] = rows[0][0]
        return key

    async def read(
        self, run_id: str, from_seq: int, to_seq: int | None, verify: bool
    ) -> AsyncIterator[Event]:
        """See :meth:`SqliteEventStore.read`."""
        key = await self._run_key("read", run_id)
        if key is None:
            return
        record: tuple[int, bytes] | None = None
        if verify:
            rows = await self.fetch(
                "read", "SELECT last_seq, last_hash FROM runs WHERE run = ?", (key,)
            )
            record = (rows[0][0], bytes(rows[0][1]))
        first = max(1, from_seq)
        high = to_seq if to_seq is not None else 2**62
        # Rows are keyed by their first event's seq: start at the row holding ``first``,
        # chained from the last hash of the row before it.
        expected = first
        prev = ""
        if first > 1:
            rows = await self.fetch(
                "read",
                "SELECT seq FROM events WHERE run = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
                (key, first),
            )
            expected = rows[0][0] if rows else first
            rows = await self.fetch(
                "read",
                f"SELECT substr(hash, -{HASH_WIDTH}) FROM events WHERE run = ? AND seq < ? "
                "ORDER BY seq DESC LIMIT 1",
                (key, expected),
            )
            if rows:
                prev = bytes(rows[0][0]).hex()
        while expected <= high:
            rows = await self.fetch(
                "read",
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE run = ? AND seq >= ? AND seq <= ? "
                "ORDER BY seq LIMIT ?",
                (key, expected, high, CHUNK),
            )
            for row in rows:
                if row[1] != expected:
                    raise CorruptLogError(run_id, expected, "event missing (gap in seq)")
                for event in row_events(run_id, row, prev, check=verify):
                    if record is not None and event.seq == record[0]:
                        if event.hash != record[1].hex():
                            raise CorruptLogError(
                                run_id, event.seq, "the hash differs from the run's record"
                            )
                    prev = event.hash
                    expected = event.seq + 1
                    if event.seq > high:
                        return
                    if event.seq >= first:
                        yield event
            if len(rows) < CHUNK:
                break
        if record is not None and expected <= min(record[0], high):
            raise CorruptLogError(
                run_id,
                expected,
                f"events missing: the log ends at seq {expected - 1} but the run's record "
                f"says {record[0]}",
            )

    async def verify(self, run_id: str) -> VerifyReport:
        """See :meth:`SqliteEventStore.verify`."""
        try:
            return await self._verify(run_id)
        except StoreFileError as exc:
            return VerifyReport(run_id, False, 0, None, f"the file cannot be read: {exc.reason}")

    async def _verify(self, run_id: str) -> VerifyReport:
        rows = await self.fetch(
            "verify", "SELECT run, last_seq, last_hash FROM runs WHERE run_id = ?", (run_id,)
        )
        if not rows:
            return VerifyReport(run_id, False, 0, None, "no such run")
        key, last_seq, last_hash = rows[0]
        prev = ""
        expected = 1
        while True:
            rows = await self.fetch(
                "verify",
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE run = ? AND seq >= ? "
                "ORDER BY seq LIMIT ?",
                (key, expected, CHUNK),
            )
            for row in rows:
                if row[1] != expected:
                    return VerifyReport(run_id, False, expected - 1, expected, "event missing")
                try:
                    prev, expected = check_row(run_id, row, prev)
                except CorruptLogError as exc:
                    return VerifyReport(run_id, False, exc.seq - 1, exc.seq, exc.reason)
            if len(rows) < CHUNK:
                break
        checked = expected - 1
        if checked < last_seq:
            return VerifyReport(
                run_id,
                False,
                checked,
                checked + 1,
                f"events missing: the log ends at seq {checked} but the run's record says "
                f"{last_seq}",
            )
        if checked == last_seq and last_seq and prev != bytes(last_hash).hex():
            return VerifyReport(
                run_id, False, checked - 1, checked, "the last hash differs from the run's record"
            )
        return VerifyReport(run_id, True, checked, None, None)

    async def tail_chunk(self, position: int) -> tuple[list[Event], bool]:
        """The events of every run after ``position`` (up to a chunk of rows), in position
        order, and whether the chunk was full."""
        rows = await self.fetch("tail", _TAIL, (position + 1, CHUNK))
        events: list[Event] = []
        for row in rows:
            prev = row[8]
            for event in row_events(row[7], row, "" if prev is None else bytes(prev).hex()):
                if event.position > position:  # only the first row may hold older ones
                    position = event.position
                    events.append(event)
        return events, len(rows) == CHUNK

    async def query_runs(self, query: RunQuery, cursor: str | None, limit: int) -> RunPage:
        """See :meth:`SqliteEventStore.query_runs`."""
        sql, params = page_statement(query, cursor, limit, time.time())
        return page_of(await self.fetch("query_runs", sql, params), limit)

    async def head_position(self) -> int:
        """See :meth:`SqliteEventStore.head_position`."""
        rows = await self.fetch(
            "head_position",
            # The row with the highest position; a frame's events take the positions after.
            f"SELECT position + length(hash) / {HASH_WIDTH} - 1 FROM events "
            "ORDER BY position DESC LIMIT 1",
            (),
        )
        return int(rows[0][0]) if rows else 0

    async def get_run(self, run_id: str) -> RunInfo | None:
        """See :meth:`SqliteEventStore.get_run`."""
        rows = await self.fetch(
            "get_run",
            f"SELECT {_RUN_COLUMNS} FROM runs r {_CLAIM_JOIN} WHERE r.run_id = ?",
            (*(time.time(),) * 3, run_id),
        )
        return RunInfo(*rows[0]) if rows else None
