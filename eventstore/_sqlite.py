"""The SQLite event store: WAL, one group-committing writer, a separate read connection."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from types import TracebackType

import anyio

from ._claims import Claim
from ._core import WriterCore
from ._errors import StoreMissingError
from ._events import Event, EventBody
from ._front import StoreFront
from ._heads import HeadsFile
from ._protocol import (
    AppendResult,
    DurabilityConfig,
    Snapshot,
    SnapshotAfter,
    StoreStatistics,
    VerifyReport,
)
from ._requests import prepare
from ._runquery import RunInfo, RunPage, RunQuery
from ._schema import check_file
from ._snapshots import SnapshotTable
from ._sqlite_ownership import SqliteOwnership
from ._sqlite_read import SqliteReader, page_statement
from ._writer import ThreadWriter

__all__ = ["SqliteEventStore", "page_statement"]

_DEFAULT_CONFIG = DurabilityConfig()
_ALL_RUNS = RunQuery()


class SqliteEventStore:
    """An :class:`EventStore` in one SQLite file (WAL mode); also a :class:`ClaimingStore`
    and a :class:`BackpressuringStore`.

    Use ``async with SqliteEventStore(path) as store:`` or :meth:`open` / :meth:`close` (from
    any tasks). Appends from every task go through one writer thread that group-commits
    them; reads use a separate connection and run beside it. Several stores (in one process
    or several) may share a file: the file itself refuses an append that does not follow
    its run's last seq (ConcurrencyError). asyncio only (as aiosqlite is).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        config: DurabilityConfig = _DEFAULT_CONFIG,
        heads_file: str | os.PathLike[str] | None = None,
        create: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self.create = create
        self.config = config
        self._front: StoreFront[ThreadWriter] = StoreFront(
            prepare, None if heads_file is None else HeadsFile(heads_file)
        )
        self._capacity = max(1024, 2 * config.max_batch)  # appends in flight at most
        self._core = WriterCore(self.path, config.synchronous)
        self._reader = SqliteReader(self.path, self._front.check_readable)
        self._snapshots = SnapshotTable(self.path)
        self._ownership = SqliteOwnership(self._front.open_writer, self._reader)

    @property
    def heads_file(self) -> HeadsFile | None:
        """The heads file runs' owners record heads in (``heads_file=``), or None."""
        return self._front.heads

    def __repr__(self) -> str:
        return f"<SqliteEventStore {self.path!r} {self._front.state}>"

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Open (creating it if absent, unless ``create=False``) the store at ``path``.

        Blocks on file I/O in a worker thread. Raises NotAStoreError if the file is not a
        magistrate store, SchemaVersionError if a newer release wrote it (in both cases the
        file is left byte-for-byte unchanged), StoreFileError if it cannot be created,
        opened or read (a missing directory, a truncated file), StoreMissingError if there
        is none (no file, or an empty one) and ``create=False``, StoreClosedError if the
        store was already opened. A store in a directory this process may not write (where
        SQLite keeps the WAL's files) is read as it is, without locks (nothing may write it
        meanwhile); its writes raise StoreFileError saying so.
        """
        await self._front.open(self._start, on_failure="new")

    async def _start(self) -> ThreadWriter:
        create = await anyio.to_thread.run_sync(check_file, self.path)
        if create and not self.create:
            there = await anyio.Path(self.path).exists()
            reason = "the file is empty" if there else "no such file"
            raise StoreMissingError(self.path, reason)
        await anyio.to_thread.run_sync(self._core.connect, create, self.config.page_size)
        self._snapshots.uri = self._core.uri
        try:
            await self._reader.connect(self._core.uri)
        except BaseException:
            await self._release()
            raise
        return ThreadWriter(
            self._core, self.config.max_batch, self._capacity, self._front.wake_followers
        )

    async def close(self) -> None:
        """Close the store; idempotent; may be called from any task.

        Appends already submitted are committed first and their callers answered; appends
        that arrive after close began raise StoreClosedError, and claims held for a run's
        next append (:meth:`submit_claim`) fail with it. Then the writer stops, the WAL is
        merged into the database file and the connections close. Shielded from
        cancellation (it finishes what it started). Followers in :meth:`tail` end.
        """
        await self._front.close(self._release)

    async def _release(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._reader.close()
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
        checked against the ones before it. Blocks on the group commit, and a run's first
        batch (``expected_seq`` 0 or None) also on the writer's room (backpressure, which
        falls on new runs only): a batch appended while the run's first still waits is
        not held behind it, so append a new run's next batches once its first returned.
        Raises ConcurrencyError if the run's last seq differs (nothing
        of the batch is written), StoreClosedError if the store is closed or closes before the
        batch was written, StoreError if the transaction failed, ValueError for an empty
        batch. Cancelling the caller does not withdraw a batch already handed to the writer:
        it may still commit. ``snapshot`` (see :class:`SnapshotAfter`) is saved as the run's
        snapshot in the batch's transaction; ValueError if it names no event of the batch.
        """
        return await self._front.append(run_id, events, expected_seq, snapshot)

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
        Returns False, and submits nothing, when the writer's queue is full and the batch
        is a run's first (``expected_seq`` 0 or None; a run's next batch is always taken,
        since backpressure falls on new runs): then use :meth:`append`, which waits for
        space. Raises as ``append`` does for a closed store
        or an empty batch, and encoding errors at once.
        """
        return self._front.submit(run_id, events, expected_seq, snapshot, on_done)

    def has_room(self) -> bool:
        """Whether :meth:`wait_for_room` would return at once: a caller about to start a
        run awaits it only when not (no coroutine a start otherwise). Raises
        StoreClosedError unless the store is open."""
        return self._front.open_writer("append").has_room()

    async def wait_for_room(self) -> None:
        """Return once the writer would take a new run's first append (and a claim held
        for it) at once: at once if it would now. Backpressure for a caller about to start
        a run, before it makes anything of it (the store's appends wait for room anyway).
        Raises StoreClosedError unless the store is open."""
        await self._front.open_writer("append").wait_for_room()

    def watch_leases(self, confirmed: Callable[[Sequence[tuple[str, int]], float], None]) -> None:
        """See :class:`LeaseConfirmingStore`: the writer's transactions extend the leases
        of the claims their appends are fenced on, a third of a lease after they started."""
        self._core.fence.watchers.append(confirmed)

    def statistics(self) -> StoreStatistics:
        """Counters of the writer since open (read by the Prometheus exporter)."""
        return self._front.statistics()

    # -- reading ---------------------------------------------------------------------------

    def read(
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
        return self._reader.read(run_id, from_seq, to_seq, verify)

    async def read_all(
        self, run_id: str, *, to_seq: int | None = None, verify: bool = False
    ) -> list[Event]:
        """All of the run's events up to ``to_seq`` (inclusive), in order; see :meth:`read`."""
        return [event async for event in self.read(run_id, to_seq=to_seq, verify=verify)]

    async def verify(self, run_id: str) -> VerifyReport:
        """Recompute the run's hash chain from the stored bytes and say where it first breaks.

        Detects an edited body, type, version, hash or seq, a missing event (gap), rows that
        cannot be read at all, and missing last events (the log ends before the last seq
        and hash the run's record holds). No body is decoded: the chain covers the stored
        bytes, so a process that registered no event types checks the same. Never raises
        for a broken log or file (the report says what is wrong); raises StoreClosedError
        if the store is closed.
        """
        return await self._reader.verify(run_id)

    def tail(self, *, from_position: int = 0, poll_interval: float = 0.05) -> AsyncIterator[Event]:
        """Yield every event with ``position > from_position`` in position order, then follow.

        Catches up in chunks, then waits for new commits: woken by this store's writer at
        each commit, and, for other writers of the file, by a poll of the store's head every
        ``poll_interval`` seconds that every follower of this store shares (one query of
        the head, however many follow; a follower reads only once the head passed its
        position). Runs until the caller stops iterating (or is cancelled) or the store
        closes, when it ends. Raises CorruptLogError / UnknownEventError like :meth:`read`.
        """
        return self._front.follow(
            self._reader.tail_chunk, self._reader.head_position, from_position, poll_interval
        )

    async def head_position(self) -> int:
        """The position of the newest committed event (0 for an empty store): a follower
        that starts :meth:`tail` there sees what is committed from now on, and nothing
        older. Another writer of the file may have committed more since it returned."""
        return await self._reader.head_position()

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
        return await self._reader.query_runs(query, cursor, limit)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's listing row, or None if no event of it was ever appended."""
        return await self._reader.get_run(run_id)

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot`` as the run's newest (its older snapshots are dropped).

        A snapshot is a cache, never part of the log: :meth:`verify` and :meth:`read`
        ignore it, and a load uses it only if the log's event at its seq binds it (see
        :class:`Snapshot`): a run's owner saves its snapshots with its appends
        (:class:`SnapshotAfter`). Blocks on one short transaction in a worker thread (it
        may wait for the writer's commit in progress). Raises StoreError if the run has no
        events or the write failed, ValueError if ``hash`` is not hex, StoreClosedError if
        the store is not open.
        """
        self._front.check_open("save_snapshot")
        await anyio.to_thread.run_sync(self._snapshots.save, snapshot)

    async def load_snapshot(self, run_id: str) -> Snapshot | None:
        """The run's newest snapshot, or None (no snapshot, or no such run).

        The caller checks it against its fold and the log (see :class:`Snapshot`).
        """
        self._front.check_open("load_snapshot")
        return await anyio.to_thread.run_sync(self._snapshots.load, run_id)

    async def delete_snapshots(self, run_id: str | None = None) -> int:
        """Delete the run's snapshots, or every run's for None; return how many went."""
        self._front.check_open("delete_snapshots")
        return await anyio.to_thread.run_sync(self._snapshots.delete, run_id)

    # -- ownership (see ClaimingStore; leases on this machine's clock) ---------------------

    async def claim(self, run_id: str, owner: str, *, lease: float) -> Claim:
        """Take ``run_id`` for ``owner`` for ``lease`` seconds (see ClaimingStore), in the
        writer's next transaction; from then on every append of this store to the run
        checks the claim's epoch in its transaction (LeaseLostError after a takeover)."""
        return await self._ownership.claim(run_id, owner, lease=lease)

    def submit_claim(
        self,
        run_id: str,
        owner: str,
        *,
        lease: float,
        on_done: Callable[[Claim | None, BaseException | None], None],
    ) -> bool:
        """Claim ``run_id`` with its next append, without waiting (see :meth:`claim`).

        The claim is held until this store's next append to the run and committed in that
        append's transaction, just before it, so a new run's claim costs no transaction
        or round trip of its own. It fences the run's appends: if it is refused, they fail
        with its RunOwnedError and write nothing. ``on_done(claim, None)`` or
        ``on_done(None, error)`` is called on the event loop before the append's own
        answer (as for :meth:`submit`, it must not append to this store). A claim whose
        run is never appended to is never taken; closing the store answers it with
        StoreClosedError. Returns True (this store always holds the claim). Raises
        StoreClosedError if the store is not open.
        """
        return self._ownership.submit_claim(run_id, owner, lease=lease, on_done=on_done)

    def submit_release(
        self,
        claim: Claim,
        on_done: Callable[[None, BaseException | None], None],
        *,
        with_append: int | None = None,
    ) -> bool:
        """:meth:`release` without waiting: queued for the writer's next transaction;
        ``on_done(None, error)`` is called on the event loop once it is committed or
        failed. Returns False, queuing nothing, when the writer is full (then use
        :meth:`release`). Raises StoreClosedError if the store is not open.

        ``with_append``: held until this store's next append to the claim's run instead,
        and given up in that append's transaction, after it, if the append is at that
        expected seq and is written under the claim (its epoch checked in the
        transaction); ``on_done`` is called before the append's own answer. If the append
        is not written (a conflict, a lost claim, a failed transaction), or another append
        of the run or a plain release of it comes first, ``on_done`` gets an error and the
        claim stays held. Returns True."""
        return self._ownership.submit_release(claim, on_done, with_append=with_append)

    async def renew(self, claims: Sequence[Claim], *, lease: float) -> list[Claim | None]:
        """Extend the leases of ``claims`` in the writer's next transaction; None for each
        one lost (see ClaimingStore)."""
        return await self._ownership.renew(claims, lease=lease)

    async def release(self, claim: Claim) -> None:
        """Give the run up if ``claim`` still holds it (see ClaimingStore); this store's
        appends to the run are then no longer fenced on it (they stay fenced when the
        claim was taken over)."""
        await self._ownership.release(claim)

    async def heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """The last seq of each of ``run_ids`` the store holds (see ClaimingStore)."""
        return await self._ownership.heads(run_ids)

    async def mark_draining(self, claim: Claim, nodes: str | None) -> bool:
        """Mark (or clear, None) the draining of the run ``claim`` holds (see
        ClaimingStore); written by the store's writer like a renewal."""
        return await self._ownership.mark_draining(claim, nodes)

    async def claim_runnable(
        self, owner: str, *, lease: float, limit: int, exclude: Collection[str] = ()
    ) -> list[Claim]:
        """Claim up to ``limit`` running runs no live lease holds (see ClaimingStore); their
        appends are fenced on the claim as with :meth:`claim`."""
        return await self._ownership.claim_runnable(
            owner, lease=lease, limit=limit, exclude=exclude
        )
