"""The PostgreSQL event store: psycopg 3 (async), one group-committing writer, pooled reads."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from types import TracebackType
from typing import Any

import anyio
import psycopg
import psycopg_pool

from . import _postgres_runs as runs_sql
from ._claims import Claim
from ._errors import StoreClosedError, StoreError, StoreUnreachableError
from ._events import Event, EventBody
from ._front import StoreFront
from ._heads import HeadsFile
from ._postgres_alive import check_on_checkout
from ._postgres_listen import Listener, channels
from ._postgres_ownership import PostgresOwnership
from ._postgres_read import CHUNK, read_events, tail_chunk, verify_run
from ._postgres_schema import check_text, ensure_schema, one_line, valid_schema_name
from ._postgres_snapshots import PostgresSnapshots
from ._postgres_url import address, connect_failure
from ._postgres_writer import Connection, PostgresWriter
from ._protocol import AppendResult, Snapshot, SnapshotAfter, StoreStatistics, VerifyReport
from ._requests import AppendRequest, prepare
from ._runquery import RunInfo, RunPage, RunQuery, page_of

__all__ = ["PostgresEventStore"]

_ALL_RUNS = RunQuery()


def _prepare(
    run_id: str,
    events: Sequence[EventBody],
    expected_seq: int | None,
    snapshot: SnapshotAfter | None,
) -> AppendRequest:
    """The request of a batch, refusing text PostgreSQL cannot store (NUL characters)."""
    check_text("append", "the run id", run_id)
    request = prepare(run_id, events, expected_seq, snapshot=snapshot, rows=False)
    for index, tag in enumerate(request.tags, 1):
        check_text("append", f"run {run_id!r}: the type of event {index} of the batch", tag)
    for field, value in request.index._asdict().items():  # the run listing's values
        check_text("append", f"run {run_id!r}: the {field.replace('_', ' ')}", value)
    return request


class PostgresEventStore:
    """An :class:`EventStore` in a PostgreSQL database (tables in one schema, ``magistrate``
    by default), shared by any number of processes and machines; also a
    :class:`ClaimingStore`, a :class:`NotifyingStore` and a :class:`BackpressuringStore`.

    ``url`` is a libpq connection string or ``postgresql://`` URL. Appends from every task
    of this store go through one writer task that group-commits them on its own connection;
    each transaction checks every append against the run's head in the database (the fence:
    two processes appending to one run never both succeed). Reads use a small connection
    pool. :meth:`tail` is woken by LISTEN/NOTIFY and polls as a fallback. The semantics of
    every method are :class:`SqliteEventStore`'s; the differences: ``RunInfo.last_seq`` and
    ``updated`` are the run's head, and ``statistics().commit_seconds_total`` includes the
    round trips to the server. asyncio only.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str = "magistrate",
        max_batch: int = 1000,
        pool_size: int = 4,
        heads_file: str | os.PathLike[str] | None = None,
        create: bool = True,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.url = url
        self.schema = valid_schema_name(schema)
        self.max_batch = max_batch
        self.create = create
        self._pool_size = pool_size
        self._front: StoreFront[PostgresWriter] = StoreFront(
            _prepare, None if heads_file is None else HeadsFile(heads_file)
        )
        self._pool: psycopg_pool.AsyncConnectionPool[Any] | None = None
        self._capacity = max(1024, 2 * max_batch)
        self._channels = channels(self.schema)
        self._listener = Listener(url, self._channels, self._is_open, self._front.wake_followers)
        self._ownership = PostgresOwnership(
            self._connect,
            self.where,
            self._is_open,
            lambda: self._front.writer,
            self._fetch,
            self._channels[1],
        )
        self._snapshots = PostgresSnapshots(self._open_pool, self._fetch, self.where)

    @property
    def heads_file(self) -> HeadsFile | None:
        """The heads file runs' owners record heads in (``heads_file=``), or None."""
        return self._front.heads

    def __repr__(self) -> str:
        return f"<PostgresEventStore schema={self.schema!r} {self._front.state}>"

    @property
    def where(self) -> str:
        """The database and schema, for messages (no password)."""
        return address(self.url, self.schema)

    def _is_open(self) -> bool:
        return self._front.state == "open"

    # -- lifecycle -------------------------------------------------------------------------

    async def _connect(self) -> Connection:
        try:
            conn: Connection = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreUnreachableError(self.where, connect_failure(self.url, exc)) from exc
        await conn.execute(f"SET search_path TO {self.schema}")
        return conn

    async def _configure(self, conn: Connection) -> None:
        await conn.execute(f"SET search_path TO {self.schema}")

    async def open(self) -> None:
        """Connect, and create the store's tables if its schema holds none (unless
        ``create=False``, when StoreMissingError says so and nothing is created).

        Raises StoreUnreachableError if the server cannot be reached, NotAStoreError if the schema
        holds tables that are not a magistrate store's, SchemaVersionError if a newer
        release made them (in both cases nothing is changed), StoreClosedError if the store
        was already opened.
        """
        await self._front.open(self._start, on_failure="closed")

    async def _start(self) -> PostgresWriter:
        writer: PostgresWriter | None = None
        try:
            conn = await self._connect()
            try:
                await ensure_schema(conn, self.schema, self.where, create=self.create)
            finally:
                await conn.close()
            writer = PostgresWriter(
                self._connect,
                self._channels,
                self.max_batch,
                self._capacity,
                self._front.wake_followers,
            )
            writer.lease_watchers = self._ownership.watchers
            await writer.start()
            pool: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
                self.url,
                min_size=1,
                max_size=self._pool_size,
                kwargs={"autocommit": True},
                configure=self._configure,
                check=check_on_checkout,
                open=False,
            )
            await pool.open(wait=True)
            self._pool = pool
        except BaseException:
            with anyio.CancelScope(shield=True):
                if writer is not None:
                    await writer.close()
                await self._release()
            raise
        return writer

    async def close(self) -> None:
        """Close the store; idempotent. Queued appends are committed and answered first;
        appends after close began raise StoreClosedError. Followers in :meth:`tail` end."""
        await self._front.close(self._release)
        self._listener.wake_runnable()

    async def _release(self) -> None:
        await self._listener.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()
        await self._ownership.leases.close()

    async def __aenter__(self) -> PostgresEventStore:
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
        """Append one run's batch atomically; return once it is committed.

        As :meth:`SqliteEventStore.append`; the seq check runs in the database inside the
        commit. Also raises LeaseLostError for a run this store claimed whose claim was
        taken over (nothing written).
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
        """Hand a batch to the writer without waiting (see :meth:`SqliteEventStore.submit`)."""
        return self._front.submit(run_id, events, expected_seq, snapshot, on_done)

    def has_room(self) -> bool:
        """Whether :meth:`wait_for_room` would return at once (see
        :meth:`SqliteEventStore.has_room`). Raises StoreClosedError unless the store is open."""
        return self._front.open_writer("append").has_room()

    async def wait_for_room(self) -> None:
        """Return once the writer would queue a new run's first append at once (it holds no
        claim for one: see :meth:`submit_claim`), as :meth:`SqliteEventStore.wait_for_room`
        does. Raises StoreClosedError unless the store is open."""
        await self._front.open_writer("append").wait_for_room()

    def statistics(self) -> StoreStatistics:
        """Counters of the writer since open."""
        return self._front.statistics()

    # -- reading ---------------------------------------------------------------------------

    def _open_pool(self, operation: str) -> psycopg_pool.AsyncConnectionPool[Any]:
        self._front.check_open(operation)
        if self._pool is None:
            raise StoreClosedError(operation)
        return self._pool

    async def _fetch(self, operation: str, query: str, params: tuple[Any, ...]) -> list[Any]:
        self._front.check_readable(operation)
        pool = self._pool
        if pool is None:
            raise StoreClosedError(operation)
        for attempt in range(2):
            lent: Connection | None = None
            try:
                async with pool.connection() as conn:
                    lent = conn
                    cur = await conn.execute(query, params)
                    rows: list[Any] = await cur.fetchall()
                    return rows
            except psycopg_pool.PoolClosed as exc:
                raise StoreClosedError(operation) from exc
            except psycopg.Error as exc:
                # A read may run twice: once more on another connection when this one
                # was lost under it (the pool replaces a broken connection).
                if attempt == 0 and lent is not None and lent.broken:
                    continue
                raise StoreError(f"{operation}: {self.where}: {one_line(exc)}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def read(
        self,
        run_id: str,
        *,
        from_seq: int = 1,
        to_seq: int | None = None,
        verify: bool = False,
    ) -> AsyncIterator[Event]:
        """Yield the run's events with ``from_seq <= seq <= to_seq`` in seq order (in
        chunks, each from a committed snapshot); ``verify`` checks the hash chain and the
        run's head as :meth:`SqliteEventStore.read` does."""
        return read_events(self._fetch, run_id, from_seq, to_seq, verify)

    async def read_all(
        self, run_id: str, *, to_seq: int | None = None, verify: bool = False
    ) -> list[Event]:
        """All of the run's events up to ``to_seq`` (inclusive), in order; see :meth:`read`."""
        return [event async for event in self.read(run_id, to_seq=to_seq, verify=verify)]

    async def verify(self, run_id: str) -> VerifyReport:
        """Recompute the run's hash chain from the stored bytes and say where it first
        breaks (see :meth:`SqliteEventStore.verify`); the run's head must be the log's end."""
        return await verify_run(self._fetch, run_id)

    async def tail(
        self, *, from_position: int = 0, poll_interval: float = 0.05
    ) -> AsyncIterator[Event]:
        """Yield every event with ``position > from_position`` in position order, then follow.

        Woken by this store's commits and by other processes' NOTIFY (a hint: the head is
        also polled every ``poll_interval`` s, one query for all followers). Ends at close.
        """
        self._listener.start()
        chunk, head = self._tail_chunk, self.head_position
        async for event in self._front.follow(chunk, head, from_position, poll_interval):
            yield event

    async def _tail_chunk(self, position: int) -> tuple[list[Event], bool]:
        events = await tail_chunk(self._fetch, position)
        return events, len(events) >= CHUNK

    async def head_position(self) -> int:
        """The position of the newest committed event (0 for an empty store); see
        :meth:`SqliteEventStore.head_position`. Positions become visible in order (the
        meta row's lock orders the commits), so nothing below it commits later."""
        rows = await self._fetch("head_position", "SELECT max(position) FROM events", ())
        return int(rows[0][0] or 0)

    async def list_runs(self, *, status: str | None = None, limit: int = 100) -> list[RunInfo]:
        """Runs, newest first, optionally only those with ``status`` (see :meth:`query_runs`)."""
        return (await self.query_runs(RunQuery(status=status), limit=limit)).runs

    async def query_runs(
        self, query: RunQuery = _ALL_RUNS, *, cursor: str | None = None, limit: int = 100
    ) -> RunPage:
        """A page of the runs matching ``query``, newest first; see SqliteEventStore."""
        statement, params = runs_sql.page_statement(query, cursor, limit)
        texts = (query.status, query.quality, query.graph_id, query.graph_hash)
        if any("\x00" in text for text in texts if text):  # PostgreSQL text holds none
            return RunPage([], None)
        return page_of(await self._fetch("query_runs", statement, params), limit)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's listing row, or None if no event of it was ever appended."""
        if "\x00" in run_id:  # PostgreSQL text holds no NUL: no run has this id
            return None
        rows = await self._fetch(
            "get_run",
            f"SELECT {runs_sql.RUN_COLUMNS} FROM runs r WHERE r.run_id = %s AND r.last_seq > 0",
            (run_id,),
        )
        return RunInfo(*rows[0]) if rows else None

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot`` as the run's newest (its older snapshots are dropped); see
        :meth:`SqliteEventStore.save_snapshot`."""
        await self._snapshots.save(snapshot)

    async def load_snapshot(self, run_id: str) -> Snapshot | None:
        """The run's newest snapshot, or None."""
        return await self._snapshots.load(run_id)

    async def delete_snapshots(self, run_id: str | None = None) -> int:
        """Delete the run's snapshots, or every run's for None; return how many went."""
        return await self._snapshots.delete(run_id)

    # -- ownership (see ClaimingStore; leases on the server's clock) -----------------------

    async def claim(self, run_id: str, owner: str, *, lease: float) -> Claim:
        """Take ``run_id`` for ``owner`` (see :class:`ClaimingStore`); from then on every
        append of this store to the run checks the claim's epoch in its transaction and
        raises LeaseLostError once another claimer took the run over."""
        return await self._ownership.claim(run_id, owner, lease=lease)

    def submit_claim(
        self,
        run_id: str,
        owner: str,
        *,
        lease: float,
        on_done: Callable[[Claim | None, BaseException | None], None],
    ) -> bool:
        """Always False: this store's writer takes appends only, so it cannot hold a claim
        for a run's next append (use :meth:`claim`). Raises StoreClosedError if the store
        is not open."""
        self._front.check_open("claim")
        return False

    def submit_release(
        self,
        claim: Claim,
        on_done: Callable[[None, BaseException | None], None],
        *,
        with_append: int | None = None,
    ) -> bool:
        """Without ``with_append``, always False: claims are given up on their own
        connection, not queued with the writer's transactions (use :meth:`release`).
        With it, the release is held by the writer until the store's next append to the
        run and made in that append's transaction, after it, if the append is at that
        expected seq and is written under the claim (its epoch checked under the runs
        row's lock); ``on_done`` is called before the append's own answer, with an error
        if the claim was not given up (it stays held). Raises StoreClosedError if the
        store is not open."""
        self._front.check_open("release")
        if with_append is None:
            return False
        return self._ownership.release_with_append(claim, on_done, with_append)

    def watch_leases(self, confirmed: Callable[[Sequence[tuple[str, int]], float], None]) -> None:
        """See :class:`LeaseConfirmingStore`: the writer's transactions extend the leases
        of the claims their appends are fenced on, a third of a lease after they started."""
        self._ownership.watchers.append(confirmed)

    async def renew(self, claims: Sequence[Claim], *, lease: float) -> list[Claim | None]:
        """Extend the leases of ``claims`` (see :class:`ClaimingStore`)."""
        return await self._ownership.renew(claims, lease=lease)

    async def release(self, claim: Claim) -> None:
        """Give the run up if ``claim`` still holds it (see :class:`ClaimingStore`); a run
        given up while still running is announced to the claimers (see runnable_signal)."""
        await self._ownership.release(claim)

    async def heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """The head (last seq) of each of ``run_ids`` the store holds, in one query."""
        return await self._ownership.heads(run_ids)

    async def mark_draining(self, claim: Claim, nodes: str | None) -> bool:
        """Mark (or clear, None) the draining of the run ``claim`` holds (see
        :class:`ClaimingStore`), on the claims' own connection."""
        return await self._ownership.mark_draining(claim, nodes)

    async def claim_runnable(
        self, owner: str, *, lease: float, limit: int, exclude: Collection[str] = ()
    ) -> list[Claim]:
        """Claim up to ``limit`` runnable runs with ``FOR UPDATE SKIP LOCKED`` (see
        :class:`ClaimingStore`); their appends are fenced on the claim as with claim()."""
        return await self._ownership.claim_runnable(
            owner, lease=lease, limit=limit, exclude=exclude
        )

    def runnable_signal(self) -> anyio.Event:
        """An event that is set when a run may have become runnable, in this process or
        any other: a run submitted (appended to with status running, unclaimed), or a
        claim given up before its run ended. A hint sent by NOTIFY after the commit:
        claimers wait on it with a timeout and look for runnable runs on their own
        schedule as well (a lease that expires sends nothing)."""
        return self._listener.runnable_signal()
