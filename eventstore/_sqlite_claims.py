"""Run ownership in a SQLite store: a ``claims`` table in a file beside the log
(``PATH-claims``), on a connection of its own.

The claims live in their own file so that taking one never waits for the store's writer
(whose commits hold the log's write lock); the log is attached read-only for the run
statuses and heads that claiming reads. Every claim runs in a ``BEGIN IMMEDIATE``
transaction, so claims are atomic across processes. The file commits with
``synchronous=NORMAL``: a claim survives a process crash, and one lost to a power cut is a
lease that expired early. Leases are on this machine's clock (a SQLite file is shared by
the processes of one machine). Deleting the file forgets every claim and nothing else.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio

from ._claims import Claim
from ._errors import RunOwnedError, StoreClosedError

__all__ = ["CLAIMS_SUFFIX", "SqliteClaims"]

#: The claims file is the store's path with this suffix.
CLAIMS_SUFFIX = "-claims"

_T = TypeVar("_T")
#: A queued call: (operation, its work in the transaction, the caller's future).
_Call = tuple[str, Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]"]

_DDL = (
    "CREATE TABLE IF NOT EXISTS claims ("
    "run_id TEXT PRIMARY KEY, owner TEXT, expires REAL, epoch INTEGER NOT NULL)"
)
_HEAD = (
    # A row holds len(hash) / 32 events (frames): the run's last seq is its last row's last.
    "SELECT r.run_id, coalesce((SELECT e.seq + length(e.hash) / 32 - 1 FROM log.events e "
    "WHERE e.run = r.run ORDER BY e.seq DESC LIMIT 1), 0) FROM log.runs r WHERE r.run_id = ?"
)


class SqliteClaims:
    """Claims, renewals, releases and run heads of one store file, in worker threads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._queue: list[_Call] = []
        self._flusher: asyncio.Task[None] | None = None

    def _connection(self, operation: str) -> sqlite3.Connection:
        if self._closed:
            raise StoreClosedError(operation)
        if self._conn is None:
            conn = sqlite3.connect(
                self.path + CLAIMS_SUFFIX,
                isolation_level=None,
                check_same_thread=False,
                uri=False,
            )
            try:
                conn.execute("PRAGMA busy_timeout = 10000")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute(_DDL)
                # The log is read (run status, heads) through the same connection, never
                # written: claims never wait for the store's writer.
                uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
                conn.execute("ATTACH DATABASE ? AS log", (uri,))
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _run(self, operation: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` in a ``BEGIN IMMEDIATE`` transaction, together with the work of every
        other call that arrives meanwhile (one transaction for a burst of claims: each one
        would otherwise wait for the store's writer to let go of the file)."""
        if self._closed:
            raise StoreClosedError(operation)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((operation, work, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="eventstore-claims")
        result: _T = await future
        return result

    async def _flush(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                outcomes = await anyio.to_thread.run_sync(self._commit, batch)
            except Exception as exc:  # the transaction failed: every call in it did
                outcomes = [exc] * len(batch)
            for (_, _, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    def _commit(self, batch: list[_Call]) -> list[Any]:
        with self._lock:
            conn = self._connection(batch[0][0])
            conn.execute("BEGIN IMMEDIATE")
            outcomes: list[Any] = []
            try:
                for _, work, _ in batch:
                    try:
                        outcomes.append(work(conn))
                    except RunOwnedError as exc:  # refused before writing anything
                        outcomes.append(exc)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return outcomes

    async def claim(self, run_id: str, owner: str, lease: float) -> Claim:
        def work(conn: sqlite3.Connection) -> Claim:
            now = time.time()
            row = conn.execute(
                "SELECT owner, expires, epoch FROM claims WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is not None and row[0] not in (None, owner) and row[1] >= now:
                raise RunOwnedError(run_id, row[0], row[1])
            epoch = 1 if row is None else row[2] + 1
            conn.execute(
                "INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)",
                (run_id, owner, now + lease, epoch),
            )
            return Claim(run_id, owner, epoch, now + lease)

        return await self._run("claim", work)

    async def renew(self, claims: Sequence[Claim], lease: float) -> list[Claim | None]:
        def work(conn: sqlite3.Connection) -> list[Claim | None]:
            expires = time.time() + lease
            answers: list[Claim | None] = []
            for c in claims:
                cur = conn.execute(
                    "UPDATE claims SET expires = ? WHERE run_id = ? AND epoch = ? AND owner = ?",
                    (expires, c.run_id, c.epoch, c.owner),
                )
                answers.append(Claim(c.run_id, c.owner, c.epoch, expires) if cur.rowcount else None)
            return answers

        return await self._run("renew", work)

    async def release(self, claim: Claim) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE claims SET owner = NULL, expires = NULL "
                "WHERE run_id = ? AND epoch = ? AND owner = ?",
                (claim.run_id, claim.epoch, claim.owner),
            )

        await self._run("release", work)

    async def claim_runnable(self, owner: str, lease: float, limit: int) -> list[Claim]:
        def work(conn: sqlite3.Connection) -> list[Claim]:
            now = time.time()
            rows = conn.execute(
                "SELECT r.run_id, coalesce(c.epoch, 0) FROM log.runs r "
                "LEFT JOIN main.claims c ON c.run_id = r.run_id "
                "WHERE r.status = 'running' AND (c.owner IS NULL OR c.expires < ?) "
                "ORDER BY r.run LIMIT ?",
                (now, limit),
            ).fetchall()
            claims = [Claim(run_id, owner, epoch + 1, now + lease) for run_id, epoch in rows]
            conn.executemany(
                "INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)",
                [(c.run_id, c.owner, c.expires, c.epoch) for c in claims],
            )
            return claims

        return await self._run("claim_runnable", work)

    async def heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        def call() -> dict[str, int]:
            with self._lock:
                conn = self._connection("heads")
                found: dict[str, int] = {}
                for run_id in run_ids:
                    row: Any = conn.execute(_HEAD, (run_id,)).fetchone()
                    if row is not None:
                        found[row[0]] = int(row[1])
                return found

        return await anyio.to_thread.run_sync(call)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
