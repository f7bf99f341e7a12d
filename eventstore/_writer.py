"""The single writer of a SQLite store: an actor that group-commits appends.

Every append goes through one :class:`WriterActor`. It takes requests from its mailbox one
at a time but commits only when the mailbox is empty (or ``max_batch`` requests are
buffered), so everything queued at that moment lands in ONE ``BEGIN IMMEDIATE`` transaction
and costs one fsync. The transaction runs in one call to a worker thread
(:class:`WriterCore`), so a batch costs one thread round trip, whatever its size.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from actors import Actor, ActorStoppedError, Message

from ._errors import ConcurrencyError, StoreClosedError, StoreError
from ._events import (
    EventBody,
    RunCancelled,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
    chain_digest,
    encode_body,
    event_tag,
)
from ._protocol import AppendResult
from ._schema import store_body

if TYPE_CHECKING:
    from ._sqlite import SqliteEventStore

__all__ = ["AppendRequest", "WriterActor", "WriterCore", "prepare"]

# Bound the writer's per-run cache; when exceeded it is dropped and refilled by queries.
_RUN_CACHE_LIMIT = 50_000

_INSERT_EVENT = (
    "INSERT INTO events (position, run, seq, ts, type, version, hash, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_RUN = (
    "INSERT INTO runs (run, run_id, status, created, updated, last_seq, graph_hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
# The runs row changes only when the run's status does (new runs, RunStarted, RunPaused...),
# not at every append: ``updated`` / ``last_seq`` there are as of that change, and listings
# read the live last seq from the events index.
_UPDATE_RUN = (
    "UPDATE runs SET status = coalesce(?, status), updated = ?, last_seq = ?, "
    "graph_hash = coalesce(?, graph_hash) WHERE run = ?"
)


class AppendRequest:
    """One caller's batch on its way through the writer, with the slot for its outcome.

    Created and awaited on the event loop thread; the commit thread only fills ``result`` /
    ``error``, and the writer actor then resolves ``future`` back on the loop.
    """

    __slots__ = (
        "bodies",
        "error",
        "expected_seq",
        "future",
        "result",
        "run_id",
        "status",
        "tags",
        "versions",
    )

    def __init__(
        self,
        run_id: str,
        tags: list[str],
        versions: list[int],
        bodies: list[bytes],
        status: tuple[str | None, str | None],
        expected_seq: int | None,
    ) -> None:
        self.run_id = run_id
        self.tags = tags
        self.versions = versions
        self.bodies = bodies
        self.status = status  # (new run status or None, graph_hash or None)
        self.expected_seq = expected_seq
        # A bare future, not an anyio.Event: it is the cheapest wake-up on asyncio (the
        # store is asyncio-only, as aiosqlite is), and appends are the hot path.
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.result: AppendResult | None = None
        self.error: BaseException | None = None

    def finish(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.error = error
            self.result = None
            self.future.set_result(None)


def _started(body: Any) -> tuple[str | None, str | None]:
    return "running", body.graph_hash


_STATUS_OF: dict[type[EventBody], Callable[[Any], tuple[str | None, str | None]]] = {
    RunStarted: _started,
    RunPaused: lambda body: ("paused", None),
    RunResumed: lambda body: ("running", None),
    RunCancelled: lambda body: ("cancelled", None),
    RunFinished: lambda body: (body.status, None),
}
_TYPE_INFO: dict[type[EventBody], tuple[str, int]] = {}


def prepare(run_id: str, events: Sequence[EventBody], expected_seq: int | None) -> AppendRequest:
    """Encode a batch into a request (in the caller's task, so bad input raises there)."""
    tags: list[str] = []
    versions: list[int] = []
    bodies: list[bytes] = []
    status: str | None = None
    graph_hash: str | None = None
    for body in events:
        cls = type(body)
        info = _TYPE_INFO.get(cls)
        if info is None:
            info = _TYPE_INFO[cls] = (event_tag(cls), cls.schema_version)
        tags.append(info[0])
        versions.append(info[1])
        bodies.append(encode_body(body))
        change = _STATUS_OF.get(cls)
        if change is not None:
            new_status, new_hash = change(body)
            status = new_status
            graph_hash = new_hash or graph_hash
    return AppendRequest(run_id, tags, versions, bodies, (status, graph_hash), expected_seq)


class WriterCore:
    """The write connection and the writer's caches. Used from one worker thread at a time."""

    def __init__(self, path: str, synchronous: str) -> None:
        self.path = path
        self.synchronous = synchronous
        self.conn: sqlite3.Connection | None = None
        # run_id -> (run key, last seq, last digest); valid while no other process writes.
        self._runs: dict[str, tuple[int, int, bytes]] = {}
        self._next_position: int | None = None
        self._next_run: int | None = None

    def connect(self, create: bool, page_size: int) -> None:
        from ._schema import check_schema, create_schema

        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            if create:
                create_schema(conn, page_size)
            check_schema(conn, self.path)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA busy_timeout = 10000")
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

    def _invalidate(self) -> None:
        self._runs.clear()
        self._next_position = None
        self._next_run = None

    def commit(self, requests: list[AppendRequest]) -> None:
        """Write every acceptable request in one transaction; set each one's result or error.

        A request whose expected_seq does not match gets ConcurrencyError and writes nothing;
        the others still commit. If the whole transaction fails, it raises (every request
        failed). Results are published only after COMMIT succeeded. Retries once when another
        process changed the file under our caches (a UNIQUE violation).
        """
        for attempt in (1, 2):
            try:
                outcomes = self._commit_once(requests)
            except sqlite3.IntegrityError:
                self._invalidate()
                if attempt == 2:
                    raise
                continue
            except BaseException:
                self._invalidate()
                raise
            for request, outcome in zip(requests, outcomes, strict=True):
                if isinstance(outcome, AppendResult):
                    request.result = outcome
                else:
                    request.error = outcome
            return

    def _commit_once(self, requests: list[AppendRequest]) -> list[AppendResult | StoreError]:
        conn = self.conn
        if conn is None:
            raise StoreClosedError("append")
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        try:
            if self._next_position is None:
                self._next_position = conn.execute(
                    "SELECT coalesce(max(position), 0) + 1 FROM events"
                ).fetchone()[0]
            if self._next_run is None:
                self._next_run = conn.execute(
                    "SELECT coalesce(max(run), 0) + 1 FROM runs"
                ).fetchone()[0]
            position: int = self._next_position
            next_run: int = self._next_run
            cache = self._runs
            # run_id -> (key, last seq, last digest) as of this transaction so far
            touched: dict[str, tuple[int, int, bytes]] = {}
            new_runs: dict[str, list[Any]] = {}  # run_id -> [key, status, graph_hash, seq]
            changed: dict[int, list[Any]] = {}  # run key -> [status, graph_hash, seq]
            rows: list[tuple[Any, ...]] = []
            outcomes: list[AppendResult | StoreError] = []
            for request in requests:
                run_id = request.run_id
                state = touched.get(run_id) or cache.get(run_id) or self._load_run(conn, run_id)
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
                for tag, version, body in zip(
                    request.tags, request.versions, request.bodies, strict=True
                ):
                    seq += 1
                    prev = chain_digest(prev, run_id, seq, tag, version, body)
                    rows.append((position, key, seq, now, tag, version, prev, store_body(body)))
                    position += 1
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
            if rows:
                conn.executemany(_INSERT_EVENT, rows)
            if new_runs:
                conn.executemany(
                    _INSERT_RUN,
                    [(k, rid, st, now, now, sq, gh) for rid, (k, st, gh, sq) in new_runs.items()],
                )
            if changed:
                conn.executemany(
                    _UPDATE_RUN, [(st, now, sq, gh, k) for k, (st, gh, sq) in changed.items()]
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._next_position = position
        self._next_run = next_run
        if len(cache) > _RUN_CACHE_LIMIT:
            cache.clear()
        cache.update(touched)
        return outcomes

    @staticmethod
    def _load_run(conn: sqlite3.Connection, run_id: str) -> tuple[int, int, bytes] | None:
        row = conn.execute("SELECT run FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        last = conn.execute(
            "SELECT seq, hash FROM events WHERE run = ? ORDER BY seq DESC LIMIT 1", (row[0],)
        ).fetchone()
        if last is None:
            return (row[0], 0, b"")
        return (row[0], last[0], bytes(last[1]))


class _Wake(Message, frozen=True, tag="eventstore.wake"):
    """Requests are waiting in the writer's inbox."""


class _Drain(Message, frozen=True, tag="eventstore.drain"):
    request: Any  # an AppendRequest with no events, finished once everything before it is


# From idle, an inbox at least this full is committed in two halves. While the first half
# commits, the second waits; while the second commits, the first half's appenders (answered)
# prepare their next appends. The two groups then keep alternating, so the event loop's work
# overlaps the commit thread's instead of adding to it.
_SPLIT_AT = 8


class WriterActor(Actor):
    """Commits append requests in groups; see the module docstring.

    Appenders put requests in the writer's inbox (:meth:`submit`, bounded: the caller waits
    for space) and tell the actor once per wake-up; the actor then drains the inbox into
    transactions of at most ``max_batch`` requests until it is empty. After a
    :class:`_Drain` message it commits what it holds and refuses later appends with
    StoreClosedError, so closing never leaves an acknowledged append unwritten.
    """

    def __init__(
        self, store: SqliteEventStore, core: WriterCore, max_batch: int, capacity: int
    ) -> None:
        self._store = store
        self._core = core
        self._max_batch = max_batch
        self._capacity = capacity
        self._inbox: deque[AppendRequest] = deque()
        self._space = anyio.Event()
        self._woken = False
        self._draining = False
        self._limiter = anyio.CapacityLimiter(1)

    @property
    def queued(self) -> int:
        return len(self._inbox)

    def submit(self, request: AppendRequest) -> bool:
        """Queue ``request`` without waiting; False if the inbox is full (see wait_for_space).

        Raises StoreClosedError once the writer drains for close or has stopped.
        """
        if self._draining or self.ref.stopped:
            raise StoreClosedError("append")
        if len(self._inbox) >= self._capacity:
            return False
        self._inbox.append(request)
        if not self._woken:
            self._woken = True
            try:
                self.ref.tell_nowait(_Wake())
            except ActorStoppedError:
                raise StoreClosedError("append") from None
        return True

    async def wait_for_space(self) -> None:
        """Wait until the writer next takes requests from its inbox."""
        await self._space.wait()

    async def receive(self, message: Any) -> None:
        if isinstance(message, _Wake):
            await self._drain_inbox()
        elif isinstance(message, _Drain):
            await self._drain_inbox()
            self._draining = True
            message.request.finish()

    async def _drain_inbox(self) -> None:
        inbox = self._inbox
        from_idle = True
        while inbox:
            available = len(inbox)
            take = min(available, self._max_batch)
            if from_idle and available >= _SPLIT_AT:
                take = min(take, (available + 1) // 2)
            from_idle = False
            batch = [inbox.popleft() for _ in range(take)]
            space, self._space = self._space, anyio.Event()
            space.set()
            await self._commit(batch)
        self._woken = False

    async def _commit(self, batch: list[AppendRequest]) -> None:
        # Shielded: once a transaction starts, its callers must learn its outcome, even if the
        # writer is being stopped (a committed append is never reported as lost).
        with anyio.CancelScope(shield=True):
            started = time.perf_counter()
            try:
                await anyio.to_thread.run_sync(self._core.commit, batch, limiter=self._limiter)
            except (sqlite3.Error, StoreError) as exc:
                error = exc if isinstance(exc, StoreError) else StoreError(f"append failed: {exc}")
                if error is not exc:
                    error.__cause__ = exc
                for request in batch:
                    request.fail(error)
                return
            self._store._record_batch(batch, time.perf_counter() - started)
            for request in batch:
                request.finish()

    async def on_stop(self) -> None:
        # Whatever is still waiting in the inbox was never written.
        self._draining = True
        closed = StoreClosedError("append", "the store closed before it was written")
        while self._inbox:
            self._inbox.popleft().fail(closed)
        self._space.set()
        self._store._fail_inflight()
