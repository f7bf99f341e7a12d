"""The single writer of a SQLite store: an actor whose thread group-commits appends.

Every append goes through one :class:`WriterActor`. Its thread owns the write connection
and, whenever it is free, takes what is queued at that moment (at most ``max_batch``
requests, and at most half of the appends in flight) into ONE write transaction (one
autocommit INSERT, or ``BEGIN IMMEDIATE`` ... ``COMMIT`` when runs rows change too), so a
batch costs one fsync and one hand-back to the event loop, whatever its size. While a batch
commits the next one gathers.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections import deque
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

import anyio

from actors import Actor, Message

from ._errors import ConcurrencyError, StoreClosedError, StoreError
from ._events import chain_digest
from ._protocol import AppendResult
from ._requests import AppendRequest
from ._statements import (
    CHUNK_ROWS,
    CHUNK_SQL,
    INSERT_RUNS_SQL,
    LOOKUP_IDS,
    LOOKUP_SQL,
    NULL_ROW,
    ONE_STATEMENT_ROWS,
    PADDED_SQL,
    RUN_ROWS,
    UPDATE_FROM,
    UPDATE_RUN,
    UPDATE_RUNS_SQL,
    padded_size,
    wal_autocheckpoint_pages,
)

if TYPE_CHECKING:
    from ._sqlite import SqliteEventStore

__all__ = ["WriterActor", "WriterCore"]

# Bound the writer's per-run cache; when exceeded it is dropped and refilled by queries.
_RUN_CACHE_LIMIT = 50_000


class _Plan:
    """One transaction worked out before it is written: rows, run changes, outcomes."""

    __slots__ = ("changed", "new_runs", "next_position", "next_run", "outcomes", "rows", "touched")

    def __init__(self) -> None:
        self.rows: list[Any] = []  # the rows' column values, flat, 8 per row
        self.new_runs: list[tuple[Any, ...]] = []
        self.changed: list[tuple[Any, ...]] = []
        self.outcomes: list[AppendResult | StoreError] = []
        self.touched: dict[str, tuple[int, int, bytes]] = {}
        self.next_position = 0
        self.next_run = 0


class WriterCore:
    """The write connection and the writer's caches; used by the writer thread only.

    A batch is committed in three parts: :meth:`plan` (seq checks, hash chain and rows; it
    reads the file only for runs not in the cache), :meth:`write` (one transaction) and
    :meth:`apply` (caches and results, once COMMIT succeeded).
    """

    def __init__(self, path: str, synchronous: str) -> None:
        self.path = path
        self.synchronous = synchronous
        self.conn: sqlite3.Connection | None = None
        # run_id -> (run key, last seq, last digest); valid while no other process writes.
        self._runs: dict[str, tuple[int, int, bytes]] = {}
        self._next_position: int | None = None
        self._next_run: int | None = None
        self._one_statement_rows = ONE_STATEMENT_ROWS
        self._chunk_rows = CHUNK_ROWS

    def connect(self, create: bool, page_size: int) -> None:
        from ._schema import check_schema, create_schema, migrate_schema

        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            if create:
                create_schema(conn, page_size)
            check_schema(conn, self.path)
            migrate_schema(conn)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute(f"PRAGMA wal_autocheckpoint = {wal_autocheckpoint_pages(conn)}")
            rows = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // 8
            fits = 1 << (rows.bit_length() - 1)  # the largest power of two <= rows
            self._one_statement_rows = min(ONE_STATEMENT_ROWS, fits)
            self._chunk_rows = min(CHUNK_ROWS, fits)
        except BaseException:
            conn.close()
            raise
        self.conn = conn

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            # Merge the WAL so the database file alone holds everything.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()

    def invalidate(self) -> None:
        """Forget the caches (another process may have written; a transaction failed)."""
        self._runs.clear()
        self._next_position = None
        self._next_run = None

    def commit(self, requests: list[AppendRequest]) -> None:
        """Plan, write and apply ``requests`` in one transaction (in the commit thread).

        A request whose expected_seq does not match gets ConcurrencyError and writes nothing;
        the others still commit. If the whole transaction fails, it raises (every request
        failed). Results are published only after COMMIT succeeded. Retries once when another
        process changed the file under our caches (a UNIQUE violation).
        """
        for attempt in (1, 2):
            try:
                plan = self.plan(requests, assume_new=attempt == 1)
                self.write(plan)
            except sqlite3.IntegrityError:
                self.invalidate()
                if attempt == 2:
                    raise
                continue
            except BaseException:
                self.invalidate()
                raise
            self.apply(requests, plan)
            return

    def plan(self, requests: list[AppendRequest], *, assume_new: bool = False) -> _Plan:
        """Work out the transaction: seq checks, hash chain, rows. Reads only on cache misses.

        ``assume_new``: a run that is not in the cache and is appended at expected_seq 0 is
        taken to be new without asking the file. If the file does hold it, inserting its
        runs row breaks the UNIQUE run_id constraint, nothing is written, and
        :meth:`commit` plans again without assuming.
        """
        plan = _Plan()
        if self._next_position is None or self._next_run is None:
            conn = self._connection()
            # The row with the highest position; a frame's events take the positions after.
            last = conn.execute(
                "SELECT position + length(hash) / 32 FROM events ORDER BY position DESC LIMIT 1"
            ).fetchone()
            self._next_position = 1 if last is None else last[0]
            self._next_run = conn.execute("SELECT coalesce(max(run), 0) + 1 FROM runs").fetchone()[
                0
            ]
        position: int = self._next_position
        next_run: int = self._next_run
        now = time.time()
        cache = self._runs
        touched = plan.touched
        rows = plan.rows
        outcomes = plan.outcomes
        new_runs: dict[str, list[Any]] = {}  # run_id -> [key, status, graph_hash, seq]
        changed: dict[int, list[Any]] = {}  # run key -> [status, graph_hash, seq]
        missing = {
            request.run_id
            for request in requests
            if request.run_id not in cache and not (assume_new and request.expected_seq == 0)
        }
        loaded = self._load_runs(missing) if missing else {}
        for request in requests:
            run_id = request.run_id
            state = touched.get(run_id) or cache.get(run_id) or loaded.get(run_id)
            seq = 0 if state is None else state[1]
            if request.expected_seq is not None and request.expected_seq != seq:
                outcomes.append(ConcurrencyError(run_id, request.expected_seq, seq))
                continue
            if state is None:
                state = (next_run, 0, b"")
                new_runs[run_id] = [next_run, "new", None, 0]
                next_run += 1
            key, seq, prev = state
            first = seq + 1
            digests: list[bytes] = []
            for tag, version, body in zip(
                request.tags, request.versions, request.bodies, strict=True
            ):
                seq += 1
                prev = chain_digest(prev, run_id, seq, tag, version, body)
                digests.append(prev)
            row_seq = first
            for count, row_type, row_version, stored in request.stored_rows():
                done = row_seq - first
                hashes = digests[done] if count == 1 else b"".join(digests[done : done + count])
                rows += (position, key, row_seq, now, row_type, row_version, hashes, stored)
                position += count
                row_seq += count
            touched[run_id] = (key, seq, prev)
            status, graph_hash = request.status
            created = new_runs.get(run_id)
            if created is not None:
                created[3] = seq
                if status is not None:
                    created[1] = status
                if graph_hash is not None:
                    created[2] = graph_hash
            elif status is not None or graph_hash is not None:
                change = changed.setdefault(key, [None, None, seq])
                change[2] = seq
                if status is not None:
                    change[0] = status
                if graph_hash is not None:
                    change[1] = graph_hash
            outcomes.append(AppendResult(first, seq, position - 1, prev.hex()))
        plan.new_runs = [
            (key, rid, st, now, now, sq, gh) for rid, (key, st, gh, sq) in new_runs.items()
        ]
        plan.changed = [(st, now, sq, gh, k) for k, (st, gh, sq) in changed.items()]
        plan.next_position = position
        plan.next_run = next_run
        return plan

    def write(self, plan: _Plan) -> None:
        """Run ``plan``'s transaction (commit thread). Rolls back and raises on any error."""
        conn = self._connection()
        rows = plan.rows
        total = len(rows) // 8
        if not plan.new_runs and not plan.changed and total <= self._one_statement_rows:
            size = padded_size(total)
            # A transaction of its own (autocommit).
            conn.execute(PADDED_SQL[size], rows + NULL_ROW * (size - total))
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            done = 0
            while done < total:
                size = min(total - done, self._chunk_rows)
                size = 1 << (size.bit_length() - 1)  # the largest power of two <= size
                conn.execute(CHUNK_SQL[size], rows[done * 8 : (done + size) * 8])
                done += size
            if plan.new_runs:
                _padded_statements(conn, INSERT_RUNS_SQL, plan.new_runs, 7)
            if plan.changed:
                if UPDATE_FROM:
                    _padded_statements(conn, UPDATE_RUNS_SQL, plan.changed, 5)
                else:
                    conn.executemany(UPDATE_RUN, plan.changed)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def apply(self, requests: list[AppendRequest], plan: _Plan) -> None:
        """After COMMIT: advance the caches and hand each request its outcome."""
        self._next_position = plan.next_position
        self._next_run = plan.next_run
        cache = self._runs
        if len(cache) > _RUN_CACHE_LIMIT:
            cache.clear()
        cache.update(plan.touched)
        for request, outcome in zip(requests, plan.outcomes, strict=True):
            if isinstance(outcome, AppendResult):
                request.result = outcome
            else:
                request.error = outcome

    def _connection(self) -> sqlite3.Connection:
        if self.conn is None:
            raise StoreClosedError("append")
        return self.conn

    def _load_runs(self, run_ids: set[str]) -> dict[str, tuple[int, int, bytes]]:
        """The (run key, last seq, last digest) of those of ``run_ids`` the file holds.

        One query finds up to 256 runs: each statement the writer thread runs gives up the
        GIL, and getting it back may wait for the event loop (up to the 5 ms switch interval
        while the loop is busy).
        """
        conn = self._connection()
        found: dict[str, tuple[int, int, bytes]] = {}
        ids: list[str | None] = [*sorted(run_ids)]
        keys: list[tuple[str, int]] = []
        for start in range(0, len(ids), LOOKUP_IDS):
            chunk = ids[start : start + LOOKUP_IDS]
            size = padded_size(len(chunk))
            keys += conn.execute(LOOKUP_SQL[size], chunk + [None] * (size - len(chunk)))
        for run_id, key in keys:
            last = conn.execute(
                "SELECT seq, hash FROM events WHERE run = ? ORDER BY seq DESC LIMIT 1", (key,)
            ).fetchone()
            if last is None:
                found[run_id] = (key, 0, b"")
            else:  # the last row may be a frame: its last event's seq and hash
                hashes = bytes(last[1])
                found[run_id] = (key, last[0] + len(hashes) // 32 - 1, hashes[-32:])
        return found


def _padded_statements(
    conn: sqlite3.Connection, sql: dict[int, str], rows: list[tuple[Any, ...]], width: int
) -> None:
    """Run ``sql`` (by padded row count) over ``rows``, RUN_ROWS rows per statement."""
    for start in range(0, len(rows), RUN_ROWS):
        chunk = rows[start : start + RUN_ROWS]
        size = padded_size(len(chunk))
        params = [value for row in chunk for value in row]
        conn.execute(sql[size], params + [None] * (width * (size - len(chunk))))


class _Drain(Message, frozen=True, tag="eventstore.drain"):
    request: Any  # an AppendRequest with no events, finished once everything before it is


class WriterActor(Actor):
    """Owns the write connection's thread and commits append requests in groups.

    Appenders put requests in the writer's queue (:meth:`submit`, bounded: the caller waits
    for space). The writer's own thread takes what is queued whenever it is free (at most
    ``max_batch`` requests, and at most half of those in flight), commits it as ONE
    transaction, and queues the outcomes for the event loop, which hands them out from a
    wake-up the thread schedules (one at a time) or at its next append. So while a
    batch commits, the next one gathers, and the thread never waits for the event loop to
    hand it work. After a :class:`_Drain` message the writer refuses new appends and answers
    the drain once everything queued before it is committed, so closing never leaves an
    acknowledged append unwritten.
    """

    def __init__(
        self, store: SqliteEventStore, core: WriterCore, max_batch: int, capacity: int
    ) -> None:
        self._store = store
        self._core = core
        self._max_batch = max_batch
        self._capacity = capacity
        # Put by the loop, taken by the thread (a C queue: putting costs no lock dance in
        # Python, and the thread blocks in it with the GIL released). None wakes the thread
        # to stop.
        self._queue: SimpleQueue[AppendRequest | None] = SimpleQueue()
        self._in_flight = 0  # submitted and not yet answered (changed on the loop only)
        self._stopping = False
        self._space = anyio.Event()
        self._space_waiters = 0
        # Outcomes the thread finished, for deliver() on the loop: (batch, writes, error,
        # seconds). Appended by the thread, taken by the loop (deque ends are atomic).
        self._answers: deque[
            tuple[list[AppendRequest], list[AppendRequest], StoreError | None, float]
        ] = deque()
        self._wake_pending = False
        self._draining = False
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._run, name=f"eventstore-writer:{core.path}", daemon=True
        )
        self._thread.start()

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def submit(self, request: AppendRequest) -> bool:
        """Queue ``request`` without waiting; False if the queue is full (see wait_for_space).

        Raises StoreClosedError once the writer drains for close or has stopped.
        """
        if self._draining or self.ref.stopped:
            raise StoreClosedError("append")
        if self._queue.qsize() >= self._capacity:
            return False
        self._in_flight += 1
        self._queue.put(request)
        return True

    async def wait_for_space(self) -> None:
        """Wait until the writer next answers a batch."""
        self._space_waiters += 1
        await self._space.wait()

    async def receive(self, message: Any) -> None:
        if isinstance(message, _Drain):
            self._draining = True
            self._in_flight += 1
            self._queue.put(message.request)

    # -- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        get, get_nowait, core, max_batch = (
            self._queue.get,
            self._queue.get_nowait,
            self._core,
            self._max_batch,
        )
        while True:
            first = get()
            if first is None or self._stopping:
                return  # on_stop fails whatever is still queued
            # At most half of the requests in flight: their callers then form two groups
            # that take turns, one group's batch committing while the event loop serves the
            # other's callers, instead of all callers waiting on one batch and the thread
            # idling while the loop serves them all (measured: 15-20% more events/s with
            # 200 appenders, 9% with 10).
            limit = min(max_batch, (self._in_flight + 1) // 2)
            batch = [first]
            while len(batch) < limit:
                try:
                    request = get_nowait()
                except Empty:
                    break
                if request is None:
                    self._stopping = True  # commit what was taken, then stop
                    break
                batch.append(request)
            writes = [request for request in batch if request.bodies]  # drains have none
            error: StoreError | None = None
            started = time.perf_counter()
            if writes:
                try:
                    core.commit(writes)
                except StoreError as exc:
                    error = exc
                except Exception as exc:
                    # sqlite3 errors, and anything unforeseen: every waiter of the batch
                    # learns it failed, and the thread goes on with the next batch.
                    error = StoreError(f"append failed: {exc}")
                    error.__cause__ = exc
            seconds = time.perf_counter() - started
            self._answers.append((batch, writes, error, seconds))
            # Wake the loop for these answers unless a wake-up is already due (the loop
            # is behind: that one, or the next append on the loop, takes them too). Not
            # waking while more work is queued would save a socket write, but the callers
            # of this batch would then wait for the next one too, and the loop could not
            # serve them while the thread commits (measured: 200 appenders lost a third
            # of their throughput).
            self._wake_loop()
            if self._stopping:
                return

    def _wake_loop(self) -> None:
        # On the writer thread, after a batch: make sure the loop sees the answers.
        if self._wake_pending:
            return  # a wake-up is scheduled and has not run yet: it takes these too
        self._wake_pending = True
        try:
            self._loop.call_soon_threadsafe(self.deliver)
        except RuntimeError:
            pass  # the event loop is closed: nobody is waiting any more

    def deliver(self) -> None:
        """Hand the outcomes of every batch the thread has finished to their callers.

        On the event loop: from the thread's wake-up, and from every append (so a busy loop
        collects answers without being woken for them).
        """
        self._wake_pending = False  # before draining: a later answer schedules a new wake
        answers = self._answers
        while answers:
            batch, writes, error, seconds = answers.popleft()
            self._in_flight -= len(batch)
            if error is None:
                self._store._record_batch(writes, seconds)
            for request in batch:
                if error is not None and request.bodies:
                    request.fail(error)
                else:
                    request.finish()
        if self._space_waiters:
            space, self._space = self._space, anyio.Event()
            self._space_waiters = 0
            space.set()

    async def on_stop(self) -> None:
        # Let the thread finish the transaction it is in (if any), then fail whatever is
        # still queued: it was never written.
        self._draining = True
        self._stopping = True
        self._queue.put(None)
        await anyio.to_thread.run_sync(self._thread.join)
        await anyio.lowlevel.checkpoint()  # run the thread's last wake-up, if any
        self.deliver()  # batches it committed: their callers learn so, whatever happened
        closed = StoreClosedError("append", "the store closed before it was written")
        while True:
            try:
                request = self._queue.get_nowait()
            except Empty:
                break
            if request is not None:
                request.fail(closed)
        self._space.set()
        self._store._fail_inflight()
