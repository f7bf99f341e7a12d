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

from ._errors import ConcurrencyError, LeaseLostError, StoreClosedError, StoreError
from ._events import chain_digest
from ._front import CommitCounters
from ._postgres_alive import spoke_unasked
from ._postgres_claims import EXTEND, due_leases
from ._postgres_snapshots import SNAPSHOT_UPSERT
from ._protocol import AppendResult, StoreStatistics
from ._requests import AppendRequest

__all__ = ["PostgresWriter"]

_log = logging.getLogger("magistrate.eventstore")

Connection = psycopg.AsyncConnection[tuple[Any, ...]]

_LOCK_RUNS = (
    "SELECT run_id, run, last_seq, last_hash, claim_epoch, owner FROM runs "
    "WHERE run_id = ANY(%s) ORDER BY run_id FOR UPDATE"
)
_INSERT_RUNS = (
    "INSERT INTO runs (run_id, status, created, updated, last_seq, last_hash, graph_hash, "
    "graph_id, quality, origin) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::float8[], %s::float8[], %s::bigint[], "
    "%s::bytea[], %s::text[], %s::text[], %s::text[], %s::text[]) "
    "ON CONFLICT (run_id) DO NOTHING RETURNING run_id, run"
)
# The run_index hooks' values: None leaves a column unchanged, "" clears it (never status).
_UPDATE_RUNS = (
    "UPDATE runs r SET last_seq = v.seq, last_hash = v.hash, updated = v.ts, "
    "status = coalesce(nullif(v.status, ''), r.status), "
    "graph_hash = nullif(coalesce(v.graph_hash, r.graph_hash), ''), "
    "graph_id = nullif(coalesce(v.graph_id, r.graph_id), ''), "
    "quality = nullif(coalesce(v.quality, r.quality), ''), "
    "origin = nullif(coalesce(v.origin, r.origin), '') "
    "FROM unnest(%s::bigint[], %s::bigint[], %s::bytea[], %s::float8[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::text[]) "
    "AS v(run, seq, hash, ts, status, graph_hash, graph_id, quality, origin) "
    "WHERE r.run = v.run"
)
# Positions last, in the statement that writes the events: the meta row's lock is taken
# by the server inside it and, as the COMMIT goes out in the same pipeline, held only
# until the commit is durable, never across a round trip to this process.
_INSERT_EVENTS = (
    "WITH p AS (UPDATE meta SET next_position = next_position + %(count)s "
    "RETURNING next_position - %(count)s AS base), "
    "e AS (INSERT INTO events (position, run, seq, ts, type, version, hash, body) "
    "SELECT p.base + v.i - 1, v.run, v.seq, v.ts, v.type, v.version, v.hash, v.body "
    "FROM p, unnest(%(runs)s::bigint[], %(seqs)s::bigint[], %(ts)s::float8[], "
    "%(types)s::text[], %(versions)s::int[], %(hashes)s::bytea[], %(bodies)s::bytea[]) "
    "WITH ORDINALITY AS v(run, seq, ts, type, version, hash, body, i)) "
    "SELECT base FROM p"
)


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


class _Retry(Exception):
    """Another writer created one of the batch's new runs meanwhile: plan again."""


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
        self._extended: tuple[list[str], list[int], list[float]] | None = None
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
        run's first append (backpressure falls on new runs: see ThreadWriter)."""
        if len(self._queue) >= self._capacity and not request.expected_seq:
            self._space.clear()
            return False
        self._queue.append(request)
        self._wake.set()
        return True

    async def wait_for_space(self) -> None:
        await self._space.wait()

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
            request.fail(closed)
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
                    else StoreError(f"append: the PostgreSQL transaction failed: {exc}")
                )
                for request in batch:
                    request.error = error
                    request.result = None
                if isinstance(exc, (psycopg.OperationalError, OSError)):
                    _lost(exc, len(batch))
                await self._disconnect()  # reconnect for the next batch
            self._record(batch, time.perf_counter() - started)
            self._on_commit()
            for request in batch:
                request.finish()
            self._batch = []
            if any(request.error is None for request in batch):
                await self._notify(any(self._submits(request) for request in batch))

    def _record(self, batch: list[AppendRequest], seconds: float) -> None:
        events = conflicts = 0
        for request in batch:
            if request.error is None:
                events += len(request.bodies)
            elif isinstance(request.error, ConcurrencyError):
                conflicts += 1
        self._counters.record(len(batch), events, conflicts, seconds)

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
                        positions = await self._transaction(conn, batch, began)
                if self._extended is not None:  # committed: they run a lease from began
                    for run_id, epoch, lease in zip(*self._extended, strict=True):
                        if self.epochs.get(run_id) == epoch:
                            self.leases[run_id] = (lease, began + lease / 3)
                    extended = list(zip(self._extended[0], self._extended[1], strict=True))
                    for watcher in self.lease_watchers:
                        watcher(extended, began)
                # The pipeline sent the events, the positions and COMMIT in one go.
                if positions is not None:
                    row = await positions.fetchone()
                    assert row is not None
                    self._answer(batch, int(row[0]))
                return
            except (_Retry, psycopg.errors.DeadlockDetected):
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

    async def _transaction(
        self, conn: Connection, batch: list[AppendRequest], began: float
    ) -> psycopg.AsyncCursor[Any] | None:
        """Queue the batch's writes; the cursor whose row is the first position (None if
        nothing was accepted). The results are answered by :meth:`_answer` after COMMIT.
        The claims its appends pass the fence of are confirmed (EXTEND) where due."""
        now = time.time()
        self._extended = None
        fenced: set[str] = set()
        run_ids = sorted({request.run_id for request in batch})
        cur = await conn.execute(_LOCK_RUNS, (run_ids,))
        # run_id -> [run key or None (new), last seq, last digest]
        rows = await cur.fetchall()
        heads: dict[str, list[Any]] = {row[0]: [row[1], row[2], bytes(row[3])] for row in rows}
        epochs = {row[0]: (row[4], row[5]) for row in rows}
        # run_id -> [status, graph_hash, graph_id, quality, origin]: a new run's, a known
        # run's change
        new_runs: dict[str, list[Any]] = {}
        changed: dict[str, list[Any]] = {}
        accepted: list[tuple[AppendRequest, int, list[bytes]]] = []
        for request in batch:
            request.result = None
            request.error = None
            run_id = request.run_id
            claimed = self.epochs.get(run_id)
            if claimed is not None:
                found = epochs.get(run_id, (0, None))
                if found[0] != claimed:
                    request.error = LeaseLostError(run_id, claimed, found[0], found[1])
                    continue
                fenced.add(run_id)
            head = heads.get(run_id)
            seq = 0 if head is None else head[1]
            if request.expected_seq is not None and request.expected_seq != seq:
                request.error = ConcurrencyError(run_id, request.expected_seq, seq)
                continue
            if head is None:
                head = heads[run_id] = [None, 0, b""]
                new_runs[run_id] = ["new", None, None, None, None]
            first = seq + 1
            prev = head[2]
            digests: list[bytes] = []
            for tag, version, body in zip(
                request.tags, request.versions, request.bodies, strict=True
            ):
                seq += 1
                prev = chain_digest(prev, run_id, seq, tag, version, body)
                digests.append(prev)
            head[1], head[2] = seq, prev
            change = new_runs.get(run_id) or changed.setdefault(run_id, [None] * 5)
            for i, value in enumerate(request.index):
                if value is not None:
                    change[i] = value
            accepted.append((request, first, digests))
        if not accepted:
            return None
        if fenced:
            self._extended = due_leases(self.leases, self.epochs, fenced, began)
            if self._extended is not None:
                await conn.execute(EXTEND, self._extended)
        if new_runs:
            ids = list(new_runs)
            cur = await conn.execute(
                _INSERT_RUNS,
                (
                    ids,
                    [new_runs[i][0] or "new" for i in ids],
                    [now] * len(ids),
                    [now] * len(ids),
                    [heads[i][1] for i in ids],
                    [heads[i][2] for i in ids],
                    [new_runs[i][1] or None for i in ids],
                    [new_runs[i][2] or None for i in ids],
                    [new_runs[i][3] or None for i in ids],
                    [new_runs[i][4] or None for i in ids],
                ),
            )
            inserted = {row[0]: row[1] for row in await cur.fetchall()}
            if len(inserted) != len(ids):
                raise _Retry
            for run_id, key in inserted.items():
                heads[run_id][0] = key
        if changed:
            ids = list(changed)
            await conn.execute(
                _UPDATE_RUNS,
                (
                    [heads[i][0] for i in ids],
                    [heads[i][1] for i in ids],
                    [heads[i][2] for i in ids],
                    [now] * len(ids),
                    [changed[i][0] for i in ids],
                    [changed[i][1] for i in ids],
                    [changed[i][2] for i in ids],
                    [changed[i][3] for i in ids],
                    [changed[i][4] for i in ids],
                ),
            )
        count = sum(len(digests) for _, _, digests in accepted)
        columns: list[list[Any]] = [[] for _ in range(7)]
        runs, seqs, stamps, types, versions, hashes, bodies = columns
        for request, first, digests in accepted:
            key = heads[request.run_id][0]
            n = len(digests)
            runs.extend([key] * n)
            seqs.extend(range(first, first + n))
            stamps.extend([now] * n)
            types.extend(request.tags)
            versions.extend(request.versions)
            hashes.extend(digests)
            bodies.extend(request.bodies)
            # The position is filled in by _answer once committed.
            request.result = AppendResult(first, first + n - 1, 0, digests[-1].hex())
        # Snapshots first: the events' statement takes the positions' lock last.
        await _save_snapshots(conn, accepted)
        return await conn.execute(
            _INSERT_EVENTS,
            {
                "count": count,
                "runs": runs,
                "seqs": seqs,
                "ts": stamps,
                "types": types,
                "versions": versions,
                "hashes": hashes,
                "bodies": bodies,
            },
        )


async def _save_snapshots(
    conn: Connection, accepted: list[tuple[AppendRequest, int, list[bytes]]]
) -> None:
    """Save the snapshots handed over with the batch's appends (a run keeps its newest)."""
    newest: dict[str, tuple[str, int, str, str, bytes]] = {}
    for request, first, digests in accepted:
        snapshot = request.snapshot
        if snapshot is not None:
            at = snapshot.events
            newest[request.run_id] = (
                request.run_id,
                first + at - 1,
                digests[at - 1].hex(),
                snapshot.version,
                snapshot.data,
            )
    for row in newest.values():
        await conn.execute(SNAPSHOT_UPSERT, row)
        await conn.execute(
            "DELETE FROM snapshots WHERE run_id = %s AND seq <> %s", (row[0], row[1])
        )
