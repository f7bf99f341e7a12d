"""The PostgreSQL store's writer: one task, one connection, one transaction per group commit.

Appends queue up while a commit is in flight and the next transaction takes them all (up
to ``max_batch``). Each transaction locks the runs rows of its appends (``FOR UPDATE``, in
run_id order so that two writers never deadlock on them), checks every append against the
run's head in the database (and, for a run this store has claimed, the claim epoch), writes
the accepted ones and moves each run's head (a compare-and-set under the row lock), takes
the positions from the meta row last and commits. The transaction runs in pipeline mode:
two round trips (BEGIN with the lock of the runs rows; then the writes, the positions and
COMMIT together) or three when it creates runs. A NOTIFY after the commit wakes the
followers of other processes; it is a transaction of its own, so it never holds a commit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ._errors import StoreClosedError, StoreError
from ._front import CommitCounters
from ._postgres_alive import spoke_unasked
from ._postgres_batch import Retry, write_batch
from ._postgres_schema import one_line
from ._protocol import AppendResult, StoreStatistics
from ._requests import AppendRequest, HeldRelease

__all__ = ["PostgresWriter"]

_log = logging.getLogger("magistrate.eventstore")

Connection = psycopg.AsyncConnection[tuple[Any, ...]]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _lost(error: BaseException, in_flight: int) -> None:
    """Say, in one line, that the writer's connection is gone (a terminated backend, a
    restarted or unreachable server) and that it reconnects; the appends in flight fail
    with their own errors, which their runs handle."""
    # The server's own reason (a terminated backend's) may be a cause of what was raised
    # (psycopg's pipeline reports its own failure to close over it).
    reason = _first_line(error)
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, psycopg.Error) and cause.sqlstate:
            reason = _first_line(cause)
            break
        cause = cause.__cause__ or cause.__context__
    lost = f"; {in_flight} append(s) in flight were not written" if in_flight else ""
    _log.warning("lost the connection to PostgreSQL (%s)%s; reconnecting", reason, lost)


class PostgresWriter:
    """The writer of a PostgreSQL store (see eventstore._front.Writer): group-commits queued
    appends on its own connection, in a task of the store's. ``on_commit`` is called after
    each transaction (the store wakes the followers of its ``tail`` with it)."""

    def __init__(
        self,
        connect: Callable[[], Any],
        channels: tuple[str, str],
        max_batch: int,
        capacity: int,
        on_commit: Callable[[], None],
    ) -> None:
        self._connect = connect
        self._conn: Connection | None = None
        # NOTIFY channels: every commit; a commit that made a run runnable.
        self._channel, self._runnable_channel = channels
        self._max_batch = max_batch
        self._capacity = capacity
        self._on_commit = on_commit
        self._counters = CommitCounters()
        self._queue: deque[AppendRequest] = deque()
        # The batch being committed: answered by the task, or failed at close if the task
        # ended without answering it.
        self._batch: list[AppendRequest] = []
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        #: run_id -> the claim epoch every append of that run must still find in the store.
        self.epochs: dict[str, int] = {}
        #: run_id -> (lease, due): from ``due`` on (this process's monotonic clock, a third
        #: of the lease after it last started at the latest) an append extends the claim.
        self.leases: dict[str, tuple[float, float]] = {}
        #: Releases held for their run's next append (hold_release).
        self._releases: dict[str, HeldRelease] = {}
        #: Told of each committed extension (see eventstore.LeaseConfirmingStore).
        self.lease_watchers: list[Callable[[Sequence[tuple[str, int]], float], None]] = []

    def statistics(self) -> StoreStatistics:
        """Counters of the group commits since the writer started."""
        return self._counters.statistics(queued=len(self._queue))

    async def start(self) -> None:
        self._conn = await self._connect()
        self._task = asyncio.create_task(self._run(), name="eventstore-pg-writer")

    def submit(self, request: AppendRequest) -> bool:
        """Queue ``request``; False (nothing queued) when the queue is full and it is a
        run's first append (backpressure falls on new runs: see ThreadWriter). A release
        held for its run (:meth:`hold_release`) goes with it if it is at the seq the
        release names, and is answered with an error otherwise."""
        if len(self._queue) >= self._capacity and not request.expected_seq:
            self._space.clear()
            return False
        if self._releases:
            release = self._releases.pop(request.run_id, None)
            if release is not None:
                if release.with_append == request.expected_seq:
                    request.release = release
                else:
                    release.fail(_went_without(request.run_id))
        self._queue.append(request)
        self._wake.set()
        return True

    def hold_release(self, release: HeldRelease) -> None:
        """Hold ``release`` until the next append of its run is submitted (see
        :meth:`submit`), replacing one held for the run before (answered with an error)."""
        if self._closing:
            raise StoreClosedError("release")
        run_id = release.claim.run_id
        replaced = self._releases.get(run_id)
        self._releases[run_id] = release
        if replaced is not None:
            replaced.fail(_went_without(run_id))

    def drop_release(self, run_id: str) -> None:
        """A release of ``run_id``'s claim goes on its own: one held for it goes without."""
        release = self._releases.pop(run_id, None)
        if release is not None:
            release.fail(_went_without(run_id))

    async def wait_for_space(self) -> None:
        await self._space.wait()

    def has_room(self) -> bool:
        """Whether :meth:`wait_for_room` would return at once: a new run's first append
        would be queued now (or the writer is closing)."""
        return self._closing or len(self._queue) < self._capacity

    async def wait_for_room(self) -> None:
        """Return once a new run's first append would be queued (at once if so now, or
        once the writer closes)."""
        while not self.has_room():
            # The queue is full: the next batch the writer takes off it (or its close)
            # sets the event. Left set from an earlier batch, it would not wait at all.
            self._space.clear()
            await self.wait_for_space()

    async def close(self) -> None:
        """Commit what is queued, then stop and close the connection."""
        self._closing = True
        self._wake.set()
        self._space.set()
        if self._task is not None:
            task, self._task = self._task, None
            try:
                await task
            except Exception as exc:  # the writer failed; its requests were failed too
                _log.warning("the PostgreSQL writer stopped with %r", exc)
        await self._disconnect()
        closed = StoreClosedError("append", "the store closed before it was written")
        for request in (*self._batch, *self._queue):
            if request.release is not None:
                request.release.fail(closed)
            request.fail(closed)
        releases, self._releases = self._releases, {}
        for release in releases.values():
            release.fail(closed)
        self._batch = []
        self._queue.clear()

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _run(self) -> None:
        queue = self._queue
        while True:
            if not queue:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._batch = [queue.popleft() for _ in range(min(len(queue), self._max_batch))]
            self._space.set()
            started = time.perf_counter()
            try:
                await self._commit(batch)
            except (psycopg.Error, OSError, StoreError) as exc:
                error = (
                    exc
                    if isinstance(exc, StoreError)
                    else StoreError(f"append: the PostgreSQL transaction failed: {one_line(exc)}")
                )
                for request in batch:
                    request.error = error
                    request.result = None
                if isinstance(exc, (psycopg.OperationalError, OSError)):
                    _lost(exc, len(batch))
                await self._disconnect()  # reconnect for the next batch
            self._counters.record(batch, time.perf_counter() - started)
            self._on_commit()
            for request in batch:
                release = request.release
                if release is not None:  # answered first: see submit_release
                    if request.error is not None:
                        release.error = request.error  # not written: the claim stays held
                    release.finish()
                request.finish()
            self._batch = []
            if any(request.error is None for request in batch):
                await self._notify(any(self._submits(request) for request in batch))

    def _submits(self, request: AppendRequest) -> bool:
        """Whether ``request`` made its run runnable: a committed append that sets the
        status running, to a run this store has not claimed (a submission)."""
        return (
            request.error is None
            and request.status[0] == "running"
            and request.run_id not in self.epochs
        )

    async def _notify(self, runnable: bool) -> None:
        try:
            conn = await self._connection()
            if runnable:
                await conn.execute(
                    "SELECT pg_notify(%s, ''), pg_notify(%s, '')",
                    (self._channel, self._runnable_channel),
                )
            else:
                await conn.execute("SELECT pg_notify(%s, '')", (self._channel,))
        except (psycopg.Error, OSError, StoreError) as exc:  # followers still poll
            if isinstance(exc, (psycopg.OperationalError, OSError)):
                _lost(exc, 0)
            else:
                _log.debug("NOTIFY failed: %r", exc)
            await self._disconnect()

    async def _connection(self) -> Connection:
        if self._conn is not None and spoke_unasked(self._conn):
            try:  # the server's reason (nothing was sent on it since its last commit)
                await self._conn.execute("")
            except psycopg.Error as exc:
                _lost(exc, 0)
                await self._disconnect()
        if self._conn is None:
            self._conn = await self._connect()
        return self._conn

    async def _commit(self, batch: list[AppendRequest]) -> None:
        for attempt in range(5):
            conn = await self._connection()
            try:
                began = time.monotonic()
                async with conn.pipeline():
                    async with conn.transaction():
                        written = await write_batch(conn, batch, self.epochs, self.leases, began)
                for release in written.released:  # committed: no longer held, no fence
                    claim = release.claim
                    if self.epochs.get(claim.run_id) == claim.epoch:
                        del self.epochs[claim.run_id]
                        self.leases.pop(claim.run_id, None)
                if written.extended is not None:  # committed: they run a lease from began
                    for run_id, epoch, lease in zip(*written.extended, strict=True):
                        if self.epochs.get(run_id) == epoch:
                            self.leases[run_id] = (lease, began + lease / 3)
                    extended = list(zip(written.extended[0], written.extended[1], strict=True))
                    for watcher in self.lease_watchers:
                        watcher(extended, began)
                # The pipeline sent the events, the positions and COMMIT in one go.
                positions = written.positions
                if positions is not None:
                    row = await positions.fetchone()
                    assert row is not None
                    self._answer(batch, int(row[0]))
                return
            except (Retry, psycopg.errors.DeadlockDetected):
                if attempt == 4:
                    raise
            except BaseException:
                for request in batch:  # nothing of a failed transaction was written
                    request.result = None
                raise

    @staticmethod
    def _answer(batch: list[AppendRequest], position: int) -> None:
        """Give each accepted request (its result holds the first seq and the digests'
        last) the positions from ``position`` on, in batch order."""
        for request in batch:
            result = request.result
            if result is None:
                continue
            n = result.last_seq - result.first_seq + 1
            position += n
            request.result = AppendResult(
                result.first_seq, result.last_seq, position - 1, result.last_hash
            )


def _went_without(run_id: str) -> StoreError:
    return StoreError(f"run {run_id}: the release held for its append went without it")
