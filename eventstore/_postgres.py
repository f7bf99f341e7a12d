"""The PostgreSQL event store: psycopg 3 (async), one group-committing writer, pooled reads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any

import anyio
import psycopg
import psycopg_pool

from . import _postgres_claims as claims_sql
from . import _postgres_runs as runs_sql
from ._claims import Claim
from ._errors import (
    ConcurrencyError,
    StoreClosedError,
    StoreError,
    StoreUnreachableError,
)
from ._events import Event, EventBody
from ._postgres_read import CHUNK, read_events, tail_chunk, verify_run
from ._postgres_schema import check_text, ensure_schema, valid_schema_name
from ._postgres_writer import Connection, PostgresWriter
from ._protocol import (
    AppendResult,
    CommitCounters,
    RunInfo,
    Snapshot,
    SnapshotAfter,
    StoreStatistics,
    VerifyReport,
)
from ._requests import AppendRequest, prepare
from ._runquery import RunPage, RunQuery, page_of

__all__ = ["PostgresEventStore"]

_log = logging.getLogger("magistrate.eventstore")

_ALL_RUNS = RunQuery()


class PostgresEventStore:
    """An :class:`EventStore` in a PostgreSQL database (tables in one schema, ``magistrate``
    by default), shared by any number of processes and machines.

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
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.url = url
        self.schema = valid_schema_name(schema)
        self.max_batch = max_batch
        self._pool_size = pool_size
        self._state = "new"  # new -> open -> closing -> closed
        self._writer: PostgresWriter | None = None
        self._pool: psycopg_pool.AsyncConnectionPool[Any] | None = None
        self._capacity = max(1024, 2 * max_batch)
        self._inflight: set[AppendRequest] = set()
        self._committed: anyio.Event | None = None
        self._listener: asyncio.Task[None] | None = None
        # Claims and renewals have a connection of their own, never queued behind appends.
        self._leases = claims_sql.LeaseConnection(
            self._connect, self.where, lambda: self._state == "open"
        )
        self._channel = f"magistrate_{self.schema}"
        self._runnable_channel = f"magistrate_runnable_{self.schema}"
        self._runnable: anyio.Event | None = None
        self._counters = CommitCounters()

    def __repr__(self) -> str:
        return f"<PostgresEventStore schema={self.schema!r} {self._state}>"

    @property
    def where(self) -> str:
        """The database and schema, for messages (no password)."""
        try:
            info = psycopg.conninfo.conninfo_to_dict(self.url)
        except psycopg.ProgrammingError:
            return f"PostgreSQL schema {self.schema}"
        host = info.get("host", "localhost")
        return f"postgresql://{host}:{info.get('port', 5432)}/{info.get('dbname', '')} " + (
            f"schema {self.schema}"
        )

    def _connect_failure(self, error: psycopg.Error) -> str:
        """libpq's reason for a failed connection as one line, without the URL's password."""
        reason = " ".join(str(error).split())
        try:
            password = psycopg.conninfo.conninfo_to_dict(self.url).get("password")
        except psycopg.ProgrammingError:
            password = None
        if password:
            reason = reason.replace(str(password), "***")
        return reason

    # -- lifecycle -------------------------------------------------------------------------

    async def _connect(self) -> Connection:
        try:
            conn: Connection = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreUnreachableError(self.where, self._connect_failure(exc)) from exc
        await conn.execute(f"SET search_path TO {self.schema}")
        return conn

    async def _configure(self, conn: Connection) -> None:
        await conn.execute(f"SET search_path TO {self.schema}")

    async def open(self) -> None:
        """Connect, and create the store's tables if its schema holds none.

        Raises StoreUnreachableError if the server cannot be reached, NotAStoreError if the schema
        holds tables that are not a magistrate store's, SchemaVersionError if a newer
        release made them (in both cases nothing is changed), StoreClosedError if the store
        was already opened.
        """
        if self._state != "new":
            raise StoreClosedError("open", f"the store is {self._state}; open it only once")
        self._state = "opening"
        try:
            conn = await self._connect()
            try:
                await ensure_schema(conn, self.schema, self.where)
            finally:
                await conn.close()
            writer = PostgresWriter(
                self._connect,
                (self._channel, self._runnable_channel),
                self.max_batch,
                self._capacity,
                self._record_batch,
            )
            await writer.start()
            self._writer = writer
            pool: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
                self.url,
                min_size=1,
                max_size=self._pool_size,
                kwargs={"autocommit": True},
                configure=self._configure,
                open=False,
            )
            await pool.open(wait=True)
            self._pool = pool
        except BaseException:
            await self._release()
            self._state = "closed"
            raise
        self._state = "open"

    async def close(self) -> None:
        """Close the store; idempotent. Queued appends are committed and answered first;
        appends after close began raise StoreClosedError. Followers in :meth:`tail` end."""
        if self._state in ("closing", "closed"):
            return
        if self._state == "new":
            self._state = "closed"
            return
        self._state = "closing"
        with anyio.CancelScope(shield=True):
            await self._release()
        self._state = "closed"
        self._wake_followers()
        self._wake_runnable()

    async def _release(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await writer.close()
        for request in list(self._inflight):
            request.fail(StoreClosedError("append", "the store closed before it was written"))
        if self._listener is not None:
            listener, self._listener = self._listener, None
            listener.cancel()
            with anyio.move_on_after(5):
                try:
                    await listener
                except asyncio.CancelledError:
                    pass
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()
        await self._leases.close()

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
        writer, request = self._request(run_id, events, expected_seq, snapshot)
        self._inflight.add(request)
        try:
            while not writer.submit(request):
                await writer.wait_for_space()
                if self._state != "open":
                    raise StoreClosedError("append")
            await request.wait()
        finally:
            self._inflight.discard(request)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

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
        writer, request = self._request(run_id, events, expected_seq, snapshot)
        request.on_done = on_done
        if not writer.submit(request):
            return False
        self._inflight.add(request)
        return True

    def _request(
        self,
        run_id: str,
        events: Sequence[EventBody],
        expected_seq: int | None,
        snapshot: SnapshotAfter | None,
    ) -> tuple[PostgresWriter, AppendRequest]:
        writer = self._writer
        if self._state != "open" or writer is None:
            raise StoreClosedError("append")
        if not events:
            raise ValueError("append needs at least one event")
        if snapshot is not None and not 1 <= snapshot.events <= len(events):
            raise ValueError(f"a snapshot after {snapshot.events} of {len(events)} events")
        check_text("append", "the run id", run_id)
        request = prepare(run_id, events, expected_seq, snapshot=snapshot, rows=False)
        for index, tag in enumerate(request.tags, 1):
            check_text("append", f"run {run_id!r}: the type of event {index} of the batch", tag)
        for field, value in request.index._asdict().items():  # the run listing's values
            check_text("append", f"run {run_id!r}: the {field.replace('_', ' ')}", value)
        return writer, request

    def _record_batch(self, batch: list[AppendRequest], seconds: float) -> None:
        events = conflicts = 0
        for request in batch:
            self._inflight.discard(request)
            if request.error is None:
                events += len(request.bodies)
            elif isinstance(request.error, ConcurrencyError):
                conflicts += 1
        self._counters.record(len(batch), events, conflicts, seconds)
        self._wake_followers()

    def _wake_followers(self) -> None:
        committed, self._committed = self._committed, None
        if committed is not None:
            committed.set()

    def statistics(self) -> StoreStatistics:
        """Counters of the writer since open."""
        return self._counters.statistics(queued=0 if self._writer is None else self._writer.queued)

    # -- reading ---------------------------------------------------------------------------

    async def _fetch(self, operation: str, query: str, params: tuple[Any, ...]) -> list[Any]:
        pool = self._pool
        if pool is None or self._state not in ("open", "closing"):
            raise StoreClosedError(operation)
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(query, params)
                rows: list[Any] = await cur.fetchall()
                return rows
        except psycopg_pool.PoolClosed as exc:
            raise StoreClosedError(operation) from exc
        except psycopg.OperationalError as exc:
            raise StoreError(f"{operation}: {self.where}: {exc}") from exc

    async def read(
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
        async for event in read_events(self._fetch, run_id, from_seq, to_seq, verify):
            yield event

    async def read_all(
        self, run_id: str, *, to_seq: int | None = None, verify: bool = False
    ) -> list[Event]:
        """All of the run's events up to ``to_seq`` (inclusive), in order; see :meth:`read`."""
        return [event async for event in self.read(run_id, to_seq=to_seq, verify=verify)]

    async def verify(self, run_id: str) -> VerifyReport:
        """Recompute the run's hash chain from the stored bytes and say where it first
        breaks (see :meth:`SqliteEventStore.verify`); the run's head must be the log's end."""
        return await verify_run(self._fetch, run_id)

    def _start_listener(self) -> None:
        if self._listener is None and self._state == "open":
            self._listener = asyncio.create_task(self._listen(), name="eventstore-pg-listen")

    async def _listen(self) -> None:
        """Wake the followers at every NOTIFY of any writer of this store, and the
        claimers at every NOTIFY that a run may have become runnable."""
        while self._state == "open":
            try:
                conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            except psycopg.Error:
                await anyio.sleep(1.0)  # followers and claimers poll meanwhile
                continue
            try:
                await conn.execute(f"LISTEN {self._channel}")
                await conn.execute(f"LISTEN {self._runnable_channel}")
                # What was announced before this LISTEN went unheard: look once more.
                self._wake_followers()
                self._wake_runnable()
                async for note in conn.notifies():
                    if note.channel == self._runnable_channel:
                        self._wake_runnable()
                    else:
                        self._wake_followers()
            except psycopg.Error:
                await anyio.sleep(0.1)
            finally:
                await conn.close()

    async def tail(
        self, *, from_position: int = 0, poll_interval: float = 0.05
    ) -> AsyncIterator[Event]:
        """Yield every event with ``position > from_position`` in position order, then follow.

        Woken by this store's commits and by other processes' NOTIFY (a hint: every wait
        also ends after ``poll_interval`` seconds). Ends when the store closes.
        """
        self._start_listener()
        position = from_position
        while self._state in ("open", "closing"):
            wake = self._committed
            if wake is None:
                wake = self._committed = anyio.Event()
            try:
                events = await tail_chunk(self._fetch, position)
            except StoreClosedError:
                return
            for event in events:
                position = event.position
                yield event
            if len(events) < CHUNK:
                with anyio.move_on_after(poll_interval):
                    await wake.wait()

    async def list_runs(self, *, status: str | None = None, limit: int = 100) -> list[RunInfo]:
        """Runs, newest first, optionally only those with ``status`` (see :meth:`query_runs`)."""
        return (await self.query_runs(RunQuery(status=status), limit=limit)).runs

    async def query_runs(
        self, query: RunQuery = _ALL_RUNS, *, cursor: str | None = None, limit: int = 100
    ) -> RunPage:
        """A page of the runs matching ``query``, newest first; see SqliteEventStore."""
        statement, params = runs_sql.page_statement(query, cursor, limit)
        return page_of(await self._fetch("query_runs", statement, params), limit)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's listing row, or None if no event of it was ever appended."""
        rows = await self._fetch(
            "get_run",
            f"SELECT {runs_sql.RUN_COLUMNS} FROM runs r WHERE r.run_id = %s AND r.last_seq > 0",
            (run_id,),
        )
        return RunInfo(*rows[0]) if rows else None

    # -- snapshots -------------------------------------------------------------------------

    async def _snapshot_rows(
        self, operation: str, statements: Sequence[tuple[str, tuple[Any, ...]]]
    ) -> list[Any]:
        """Run ``statements`` in one transaction; the rows of the last one that has any."""
        pool = self._pool
        if pool is None or self._state != "open":
            raise StoreClosedError(operation)
        rows: list[Any] = []
        try:
            async with pool.connection() as conn, conn.transaction():
                for query, params in statements:
                    cur = await conn.execute(query, params)
                    if cur.description is not None:
                        rows = await cur.fetchall()
                    elif query.startswith("DELETE"):
                        rows = [(cur.rowcount,)]
        except psycopg_pool.PoolClosed as exc:
            raise StoreClosedError(operation) from exc
        except psycopg.Error as exc:
            raise StoreError(f"{operation}: {self.where}: {exc}") from exc
        return rows

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot`` as the run's newest (its older snapshots are dropped); see
        :meth:`SqliteEventStore.save_snapshot`."""
        bytes.fromhex(snapshot.hash)  # ValueError for a hash that is not hex
        check_text("save_snapshot", "the run id", snapshot.run_id)
        check_text("save_snapshot", f"run {snapshot.run_id!r}: the version", snapshot.version)
        if not await self._fetch(
            "save_snapshot", "SELECT 1 FROM runs WHERE run_id = %s", (snapshot.run_id,)
        ):
            raise StoreError(f"save_snapshot: run {snapshot.run_id!r} has no events in the store")
        await self._snapshot_rows(
            "save_snapshot",
            [
                (
                    "INSERT INTO snapshots (run_id, seq, hash, version, data) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id, seq) DO UPDATE SET "
                    "hash = EXCLUDED.hash, version = EXCLUDED.version, data = EXCLUDED.data",
                    (snapshot.run_id, snapshot.seq, snapshot.hash, snapshot.version, snapshot.data),
                ),
                (
                    "DELETE FROM snapshots WHERE run_id = %s AND seq <> %s",
                    (snapshot.run_id, snapshot.seq),
                ),
            ],
        )

    async def load_snapshot(self, run_id: str) -> Snapshot | None:
        """The run's newest snapshot, or None."""
        rows = await self._snapshot_rows(
            "load_snapshot",
            [
                (
                    "SELECT seq, hash, version, data FROM snapshots WHERE run_id = %s "
                    "ORDER BY seq DESC LIMIT 1",
                    (run_id,),
                )
            ],
        )
        if not rows:
            return None
        seq, digest, version, data = rows[0]
        return Snapshot(run_id, int(seq), str(digest), str(version), bytes(data))

    async def delete_snapshots(self, run_id: str | None = None) -> int:
        """Delete the run's snapshots, or every run's for None; return how many went."""
        if run_id is None:
            statement: tuple[str, tuple[Any, ...]] = ("DELETE FROM snapshots", ())
        else:
            statement = ("DELETE FROM snapshots WHERE run_id = %s", (run_id,))
        rows = await self._snapshot_rows("delete_snapshots", [statement])
        return int(rows[0][0]) if rows else 0

    # -- ownership -------------------------------------------------------------------------

    async def claim(self, run_id: str, owner: str, *, lease: float) -> Claim:
        """Take ``run_id`` for ``owner`` (see :class:`ClaimingStore`); from then on every
        append of this store to the run checks the claim's epoch in its transaction and
        raises LeaseLostError once another claimer took the run over."""
        check_text("claim", "the run id", run_id)
        check_text("claim", "the owner", owner)
        claim: Claim = await self._leases.call(
            "claim", lambda conn: claims_sql.claim(conn, run_id, owner, lease)
        )
        if self._writer is not None:
            self._writer.epochs[run_id] = claim.epoch
        return claim

    async def renew(self, claims: Sequence[Claim], *, lease: float) -> list[Claim | None]:
        """Extend the leases of ``claims`` (see :class:`ClaimingStore`)."""
        if not claims:
            return []
        owners = {claim.owner for claim in claims}
        answers: dict[tuple[str, int], Claim | None] = {}
        for owner in owners:
            mine = [claim for claim in claims if claim.owner == owner]

            def call(conn: Connection, owner: str = owner, mine: list[Claim] = mine) -> Any:
                return claims_sql.renew(conn, mine, owner, lease)

            renewed: list[Claim | None] = await self._leases.call("renew", call)
            for claim, answer in zip(mine, renewed, strict=True):
                answers[claim.run_id, claim.epoch] = answer
        return [answers[claim.run_id, claim.epoch] for claim in claims]

    async def release(self, claim: Claim) -> None:
        """Give the run up if ``claim`` still holds it (see :class:`ClaimingStore`); a run
        given up while still running is announced to the claimers (see runnable_signal)."""
        if self._writer is not None and self._writer.epochs.get(claim.run_id) == claim.epoch:
            del self._writer.epochs[claim.run_id]
        await self._leases.call(
            "release", lambda conn: claims_sql.release(conn, claim, self._runnable_channel)
        )

    def runnable_signal(self) -> anyio.Event:
        """An event that is set when a run may have become runnable, in this process or
        any other: a run submitted (appended to with status running, unclaimed), or a
        claim given up before its run ended. A hint sent by NOTIFY after the commit:
        claimers wait on it with a timeout and look for runnable runs on their own
        schedule as well (a lease that expires sends nothing)."""
        self._start_listener()
        if self._runnable is None:
            self._runnable = anyio.Event()
        return self._runnable

    def _wake_runnable(self) -> None:
        runnable, self._runnable = self._runnable, None
        if runnable is not None:
            runnable.set()

    async def heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """The head (last seq) of each of ``run_ids`` the store holds, in one query."""
        rows = await self._fetch(
            "heads", "SELECT run_id, last_seq FROM runs WHERE run_id = ANY(%s)", (list(run_ids),)
        )
        return {str(run_id): int(seq) for run_id, seq in rows}

    async def claim_runnable(self, owner: str, *, lease: float, limit: int) -> list[Claim]:
        """Claim up to ``limit`` runnable runs with ``FOR UPDATE SKIP LOCKED`` (see
        :class:`ClaimingStore`); their appends are fenced on the claim as with claim()."""
        check_text("claim_runnable", "the owner", owner)
        got: list[Claim] = await self._leases.call(
            "claim_runnable", lambda conn: claims_sql.claim_runnable(conn, owner, lease, limit)
        )
        if self._writer is not None:
            for claim in got:
                self._writer.epochs[claim.run_id] = claim.epoch
        return got
