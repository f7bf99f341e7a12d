"""The SQLite event store: WAL, one group-committing writer, a separate read connection."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any

import aiosqlite
import anyio

from ._core import WriterCore
from ._errors import CorruptLogError, StoreClosedError, StoreFileError, UnknownEventError
from ._events import Event, EventBody
from ._format import HASH_WIDTH
from ._protocol import (
    AppendResult,
    DurabilityConfig,
    RunInfo,
    Snapshot,
    SnapshotAfter,
    StoreStatistics,
    VerifyReport,
)
from ._requests import AppendRequest, prepare
from ._rows import row_events
from ._runquery import RunPage, RunQuery, page_of, page_sql
from ._schema import check_file
from ._snapshots import SnapshotTable
from ._sqlite_claims import OwnershipRequest, Request
from ._sqlite_ownership import SqliteOwnership
from ._writer import ThreadWriter

__all__ = ["SqliteEventStore", "page_statement"]

_CHUNK = 1000
_DEFAULT_CONFIG = DurabilityConfig()
_ALL_RUNS = RunQuery()
_EVENT_COLUMNS = "position, seq, ts, type, version, hash, body"
# The runs row holds each run's live last seq and update time (the fence advances them).
# Then the run's owner: its claim's, while the lease is unexpired at the time given as the
# parameter (leases are on this machine's clock), found by the claims table's primary key,
# one lookup per row of the page.
_RUN_COLUMNS = (
    "r.run_id, r.status, r.created, r.updated, r.last_seq, r.graph_hash, r.graph_id, r.quality, "
    "CASE WHEN c.expires >= ? THEN c.owner END"
)
_CLAIM_JOIN = "LEFT JOIN claims c ON c.run_id = r.run_id"


def page_statement(
    query: RunQuery, cursor: str | None, limit: int, now: float
) -> tuple[str, tuple[Any, ...]]:
    """The statement (and parameters) of one page of the run listing, owners as of ``now``."""
    return page_sql(_RUN_COLUMNS, query, cursor, limit, "?", join=_CLAIM_JOIN, column_params=(now,))


class SqliteEventStore(SqliteOwnership):
    """An :class:`EventStore` in one SQLite file (WAL mode).

    Use ``async with SqliteEventStore(path) as store:`` or :meth:`open` / :meth:`close` (from
    any tasks). Appends from every task go through one writer thread that group-commits
    them; reads use a separate connection and run beside it. Several stores (in one process
    or several) may share a file: the file itself refuses an append that does not follow
    its run's last seq (ConcurrencyError). asyncio only (as aiosqlite is).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, config: DurabilityConfig = _DEFAULT_CONFIG
    ) -> None:
        self.path = os.fspath(path)
        self.config = config
        self._state = "new"  # new -> open -> closing -> closed
        self._writer: ThreadWriter | None = None
        self._capacity = max(1024, 2 * config.max_batch)  # appends in flight at most
        self._core = WriterCore(self.path, config.synchronous)
        self._reader: aiosqlite.Connection | None = None
        self._snapshots = SnapshotTable(self.path)
        # Claims queued by submit_claim, each held until its run's next append.
        self._held: dict[str, OwnershipRequest] = {}
        self._run_keys: dict[str, int] = {}
        # Set at the next commit; made by a follower (tail) when it waits, so a store
        # nobody tails makes none.
        self._committed: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"<SqliteEventStore {self.path!r} {self._state}>"

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Open (creating it if absent) the store at ``path``.

        Blocks on file I/O in a worker thread. Raises NotAStoreError if the file is not a
        magistrate store, SchemaVersionError if a newer release wrote it (in both cases the
        file is left byte-for-byte unchanged), StoreFileError if it cannot be created,
        opened or read (a missing directory, a truncated file), StoreClosedError if the
        store was already opened.
        """
        if self._state != "new":
            raise StoreClosedError("open", f"the store is {self._state}; open it only once")
        create = await anyio.to_thread.run_sync(check_file, self.path)
        await anyio.to_thread.run_sync(self._core.connect, create, self.config.page_size)
        try:
            try:
                self._reader = await aiosqlite.connect(self.path)
                await self._reader.execute("PRAGMA query_only = ON")
            except sqlite3.Error as exc:
                raise StoreFileError(self.path, str(exc)) from exc
        except BaseException:
            await self._release()
            raise
        self._writer = ThreadWriter(
            self._core, self.config.max_batch, self._capacity, self._wake_followers
        )
        self._state = "open"

    async def close(self) -> None:
        """Close the store; idempotent; may be called from any task.

        Appends already submitted are committed first and their callers answered; appends
        that arrive after close began raise StoreClosedError. Then the writer stops, the WAL
        is merged into the database file and the connections close. Shielded from
        cancellation (it finishes what it started). Followers in :meth:`tail` end.
        """
        if self._state in ("closing", "closed"):
            return
        if self._state == "new":
            self._state = "closed"
            return
        self._state = "closing"
        held, self._held = self._held, {}
        for request in held.values():
            request.fail(StoreClosedError("claim", "the store closed before the run's append"))
        with anyio.CancelScope(shield=True):
            if self._writer is not None:
                await self._writer.close()
            await self._release()
        self._state = "closed"
        self._wake_followers()

    async def _release(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._reader is not None:
                reader, self._reader = self._reader, None
                await reader.close()
            await anyio.to_thread.run_sync(self._snapshots.close)
            await anyio.to_thread.run_sync(self._core.close)

    async def __aenter__(self) -> SqliteEventStore:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- writing ---------------------------------------------------------------------------

    async def append(
        self,
        run_id: str,
        events: Sequence[EventBody],
        *,
        expected_seq: int | None,
        snapshot: SnapshotAfter | None = None,
    ) -> AppendResult:
        """Append one run's batch atomically; return once it is committed (durably, per config).

        ``expected_seq`` is the run's last seq before this batch (0 for a new run); the batch
        gets seqs ``expected_seq + 1, ...``. ``None`` skips the check (append at the end).
        Several appends of one run may be in flight: they commit in the order submitted, each
        checked against the ones before it. Blocks on the writer's mailbox (backpressure) and
        on the group commit. Raises ConcurrencyError if the run's last seq differs (nothing
        of the batch is written), StoreClosedError if the store is closed or closes before the
        batch was written, StoreError if the transaction failed, ValueError for an empty
        batch. Cancelling the caller does not withdraw a batch already handed to the writer:
        it may still commit. ``snapshot`` (see :class:`SnapshotAfter`) is saved as the run's
        snapshot in the batch's transaction; ValueError if it names no event of the batch.
        """
        writer, request = self._request(run_id, events, expected_seq, snapshot)
        await self._submit(writer, request, "append")
        assert request.result is not None
        return request.result

    def _queue(self, writer: ThreadWriter, request: Request) -> bool:
        """Queue ``request``, after the claim held for its run (see submit_claim)."""
        if self._held and type(request) is AppendRequest:
            held = self._held.pop(request.run_id, None)
            if held is not None and not writer.submit(held):
                self._held[request.run_id] = held
                return False
        return writer.submit(request)

    async def _submit(self, writer: ThreadWriter, request: Request, operation: str) -> None:
        """Queue ``request`` (waiting for space), wait for its answer; raise its error."""
        while not self._queue(writer, request):
            await writer.wait_for_space()  # backpressure: the writer is full
            if self._state != "open":
                raise StoreClosedError(operation)
        await request.wait()
        if request.error is not None:
            raise request.error

    def submit(
        self,
        run_id: str,
        events: Sequence[EventBody],
        *,
        expected_seq: int | None,
        on_done: Callable[[AppendResult | None, BaseException | None], None],
        snapshot: SnapshotAfter | None = None,
    ) -> bool:
        """Hand a batch to the writer without waiting; ``on_done`` learns how it ended.

        The same append as :meth:`append` (same checks, same order among appends), for a
        caller that has nothing to do until the commit and would rather not be woken for
        it: ``on_done(result, None)`` or ``on_done(None, error)`` is called on the event
        loop once the batch is committed or failed (keep it short; it must not raise).
        Answers are handed out as soon as the store sees them, which may be inside a later
        ``submit`` or ``append`` call on this store, from another task: ``on_done`` must
        not append to this store itself (tell an actor, set a future).
        Returns False, and submits nothing, when the writer's queue is full: then use
        :meth:`append`, which waits for space. Raises as ``append`` does for a closed store
        or an empty batch, and encoding errors at once.
        """
        writer, request = self._request(run_id, events, expected_seq, snapshot)
        request.on_done = on_done
        return self._queue(writer, request)

    def _request(
        self,
        run_id: str,
        events: Sequence[EventBody],
        expected_seq: int | None,
        snapshot: SnapshotAfter | None,
    ) -> tuple[ThreadWriter, AppendRequest]:
        """The checks every append starts with, then the encoded request (not yet queued)."""
        writer = self._writer
        if self._state != "open" or writer is None:
            raise StoreClosedError("append")
        if not events:
            raise ValueError("append needs at least one event")
        if snapshot is not None and not 1 <= snapshot.events <= len(events):
            raise ValueError(f"a snapshot after {snapshot.events} of {len(events)} events")
        return writer, prepare(run_id, events, expected_seq, snapshot=snapshot)

    def _wake_followers(self) -> None:
        committed, self._committed = self._committed, None
        if committed is not None:
            committed.set()

    def statistics(self) -> StoreStatistics:
        """Counters of the writer since open (read by the Prometheus exporter)."""
        if self._writer is None:
            return StoreStatistics(
                appends=0,
                events=0,
                batches=0,
                mean_batch_size=0.0,
                max_batch_size=0,
                commit_seconds_total=0.0,
            )
        return self._writer.statistics()

    # -- reading ---------------------------------------------------------------------------

    def _conn(self, operation: str) -> aiosqlite.Connection:
        if self._reader is None or self._state not in ("open", "closing"):
            raise StoreClosedError(operation)
        return self._reader

    async def _fetch(self, operation: str, sql: str, params: tuple[Any, ...]) -> list[Any]:
        conn = self._conn(operation)
        try:
            return list(await conn.execute_fetchall(sql, params))
        except (ValueError, sqlite3.ProgrammingError) as exc:
            # aiosqlite raises these when the connection closed under the call.
            if self._reader is None:
                raise StoreClosedError(operation) from exc
            raise
        except sqlite3.Error as exc:  # a damaged or truncated file, an I/O error
            raise StoreFileError(self.path, f"{operation}: {exc}") from exc

    async def _run_key(self, operation: str, run_id: str) -> int | None:
        key = self._run_keys.get(run_id)
        if key is None:
            rows = await self._fetch(operation, "SELECT run FROM runs WHERE run_id = ?", (run_id,))
            if not rows:
                return None
            key = self._run_keys[run_id] = rows[0][0]
        return key

    async def read(
        self,
        run_id: str,
        *,
        from_seq: int = 1,
        to_seq: int | None = None,
        verify: bool = False,
    ) -> AsyncIterator[Event]:
        """Yield the run's events with ``from_seq <= seq <= to_seq`` in seq order.

        Reads in chunks (no cursor stays open between yields), each from a committed
        snapshot; events committed while iterating are included if they fall in range.
        Yields nothing for an unknown run. ``verify=True`` checks the hash chain of what
        it reads (for a fold that must not trust an edited file): each event's hash is
        recomputed from its stored bytes and the hash before it, and a read that reaches
        the run's end must end at the last seq and hash the run's record holds (so deleted
        last events show). Raises CorruptLogError naming the seq on a gap, an undecodable
        body or (verify) a broken chain, UnknownEventError for an unregistered type,
        StoreFileError if the file cannot be read, StoreClosedError if the store is closed.
        """
        key = await self._run_key("read", run_id)
        if key is None:
            return
        record: tuple[int, bytes] | None = None
        if verify:
            rows = await self._fetch(
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
            rows = await self._fetch(
                "read",
                "SELECT seq FROM events WHERE run = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
                (key, first),
            )
            expected = rows[0][0] if rows else first
            rows = await self._fetch(
                "read",
                f"SELECT substr(hash, -{HASH_WIDTH}) FROM events WHERE run = ? AND seq < ? "
                "ORDER BY seq DESC LIMIT 1",
                (key, expected),
            )
            if rows:
                prev = bytes(rows[0][0]).hex()
        while expected <= high:
            rows = await self._fetch(
                "read",
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE run = ? AND seq >= ? AND seq <= ? "
                "ORDER BY seq LIMIT ?",
                (key, expected, high, _CHUNK),
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
            if len(rows) < _CHUNK:
                break
        if record is not None and expected <= min(record[0], high):
            raise CorruptLogError(
                run_id,
                expected,
                f"events missing: the log ends at seq {expected - 1} but the run's record "
                f"says {record[0]}",
            )

    async def read_all(
        self, run_id: str, *, to_seq: int | None = None, verify: bool = False
    ) -> list[Event]:
        """All of the run's events up to ``to_seq`` (inclusive), in order; see :meth:`read`."""
        return [event async for event in self.read(run_id, to_seq=to_seq, verify=verify)]

    async def verify(self, run_id: str) -> VerifyReport:
        """Recompute the run's hash chain from the stored bytes and say where it first breaks.

        Detects an edited body, type, version, hash or seq, a missing event (gap), rows that
        cannot be read at all, and missing last events (the log ends before the last seq
        and hash the run's record holds). Never raises for a broken log or file (the report
        says what is wrong); raises StoreClosedError if the store is closed.
        """
        try:
            return await self._verify(run_id)
        except StoreFileError as exc:
            return VerifyReport(run_id, False, 0, None, f"the file cannot be read: {exc.reason}")

    async def _verify(self, run_id: str) -> VerifyReport:
        rows = await self._fetch(
            "verify", "SELECT run, last_seq, last_hash FROM runs WHERE run_id = ?", (run_id,)
        )
        if not rows:
            return VerifyReport(run_id, False, 0, None, "no such run")
        key, last_seq, last_hash = rows[0]
        prev = ""
        expected = 1
        while True:
            rows = await self._fetch(
                "verify",
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE run = ? AND seq >= ? "
                "ORDER BY seq LIMIT ?",
                (key, expected, _CHUNK),
            )
            for row in rows:
                if row[1] != expected:
                    return VerifyReport(run_id, False, expected - 1, expected, "event missing")
                try:
                    events = row_events(run_id, row, prev, check=True)
                except CorruptLogError as exc:
                    return VerifyReport(run_id, False, exc.seq - 1, exc.seq, exc.reason)
                except UnknownEventError as exc:
                    return VerifyReport(run_id, False, expected - 1, expected, str(exc))
                prev = events[-1].hash
                expected = events[-1].seq + 1
            if len(rows) < _CHUNK:
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

    async def tail(
        self, *, from_position: int = 0, poll_interval: float = 0.05
    ) -> AsyncIterator[Event]:
        """Yield every event with ``position > from_position`` in position order, then follow.

        Catches up in chunks, then waits for new commits: woken by this store's writer at
        each commit, and polling every ``poll_interval`` seconds for other writers of the
        file. Runs until the caller stops iterating (or is cancelled) or the store closes,
        when it ends. Raises CorruptLogError / UnknownEventError like :meth:`read`.
        """
        position = from_position
        while self._state in ("open", "closing"):
            wake = self._committed
            if wake is None:
                wake = self._committed = anyio.Event()
            try:
                # From the row holding position + 1 (a frame may start before it); each
                # row's previous hash is the last of the run's row before it.
                rows = await self._fetch(
                    "tail",
                    "SELECT e.position, e.seq, e.ts, e.type, e.version, e.hash, e.body, r.run_id, "
                    f"(SELECT substr(p.hash, -{HASH_WIDTH}) FROM events p WHERE p.run = e.run "
                    "AND p.seq < e.seq ORDER BY p.seq DESC LIMIT 1) "
                    "FROM events e JOIN runs r ON r.run = e.run WHERE e.position >= coalesce("
                    "(SELECT position FROM events WHERE position <= ? "
                    "ORDER BY position DESC LIMIT 1), 0) ORDER BY e.position LIMIT ?",
                    (position + 1, _CHUNK),
                )
            except StoreClosedError:
                return
            for row in rows:
                prev = row[8]
                for event in row_events(row[7], row, "" if prev is None else bytes(prev).hex()):
                    if event.position > position:  # only the first row may hold older ones
                        position = event.position
                        yield event
            if len(rows) < _CHUNK:
                with anyio.move_on_after(poll_interval):
                    await wake.wait()

    async def list_runs(self, *, status: str | None = None, limit: int = 100) -> list[RunInfo]:
        """Runs, newest first, optionally only those with ``status`` (see :meth:`query_runs`)."""
        return (await self.query_runs(RunQuery(status=status), limit=limit)).runs

    async def query_runs(
        self, query: RunQuery = _ALL_RUNS, *, cursor: str | None = None, limit: int = 100
    ) -> RunPage:
        """A page of the runs matching ``query``, newest first (by creation time, then key).

        ``cursor`` is a page's ``next_cursor``: the page after it, however many runs were
        created since (they sort before it). Each page is one range scan of an index.
        Raises ValueError for a cursor no store made or a limit below 1.
        """
        sql, params = page_statement(query, cursor, limit, time.time())
        return page_of(await self._fetch("query_runs", sql, params), limit)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's listing row, or None if no event of it was ever appended."""
        rows = await self._fetch(
            "get_run",
            f"SELECT {_RUN_COLUMNS} FROM runs r {_CLAIM_JOIN} WHERE r.run_id = ?",
            (time.time(), run_id),
        )
        return RunInfo(*rows[0]) if rows else None

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot`` as the run's newest (its older snapshots are dropped).

        A snapshot is a cache, never part of the log: :meth:`verify` and :meth:`read`
        ignore it. Blocks on one short transaction in a worker thread (it may wait for the
        writer's commit in progress). Raises StoreError if the run has no events or the
        write failed, ValueError if ``hash`` is not hex, StoreClosedError if the store is
        not open.
        """
        self._check_open("save_snapshot")
        await anyio.to_thread.run_sync(self._snapshots.save, snapshot)

    async def load_snapshot(self, run_id: str) -> Snapshot | None:
        """The run's newest snapshot, or None (no snapshot, or no such run).

        The caller checks ``version`` and ``hash`` against its fold and the log.
        """
        self._check_open("load_snapshot")
        return await anyio.to_thread.run_sync(self._snapshots.load, run_id)

    async def delete_snapshots(self, run_id: str | None = None) -> int:
        """Delete the run's snapshots, or every run's for None; return how many went."""
        self._check_open("delete_snapshots")
        return await anyio.to_thread.run_sync(self._snapshots.delete, run_id)

    def _check_open(self, operation: str) -> None:
        if self._state != "open":
            raise StoreClosedError(operation)
