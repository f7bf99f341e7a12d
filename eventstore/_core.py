"""The write side of a SQLite store: plan, write and apply one group commit.

Used by the writer thread (:class:`eventstore._writer.ThreadWriter`), which owns the write
connection. The file is the fence: every events row passes the ``events_fence`` trigger
(see :mod:`eventstore._schema`), which refuses a row that does not follow its run's last
seq as the runs row records it, and advances that record. The writer's caches only save
reading the file; they never decide a conflict. A batch is planned from the caches and
written; if the file refuses it (another process wrote since), nothing of it is written
and it is planned again from the file inside one write transaction, where each append
whose expected seq the file contradicts gets ConcurrencyError.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from typing import Any, cast

import msgspec

from ._errors import ConcurrencyError, StoreClosedError, StoreError, StoreFileError
from ._events import UNCHANGED_INDEX, chain_digests
from ._format import HASH_WIDTH
from ._protocol import AppendResult
from ._requests import AppendRequest
from ._schema import describe, file_uri, open_file
from ._sqlite_claims import PLAIN, ClaimFence
from ._sqlite_turn import Request
from ._statements import (
    DROP_OLDER_SNAPSHOTS,
    INSERT_EVENT,
    INSERT_RUN,
    INSERT_SNAPSHOT,
    LOOKUP_RUNS,
    UPDATE_RUN,
    wal_autocheckpoint_pages,
)

__all__ = ["WriterCore"]

_log = logging.getLogger("magistrate.eventstore")

# Bound the writer's per-run cache; when exceeded it is dropped and refilled by queries.
_RUN_CACHE_LIMIT = 50_000

_RunState = tuple[int, int, bytes]  # (run key, last seq, last digest)

#: What plan reads when it loads no run (never changed).
_NO_RUNS: dict[str, _RunState] = {}

_BLOB = bytearray()  # joins digests into a bytearray (never changed itself)
_blob = bytearray


class _Plan(msgspec.Struct, gc=False):
    """One transaction worked out before it is written: rows, run changes, outcomes.

    ``gc=False``: it holds only what plan made (rows, outcomes, run states), nothing that
    refers back to it, so it is never part of a reference cycle."""

    rows: list[tuple[Any, ...]]  # the events rows' column values
    outcomes: list[AppendResult | StoreError]
    touched: dict[str, _RunState]
    # Set by plan when the batch has any (most have neither: shared empty, never changed).
    new_runs: Sequence[tuple[Any, ...]] = ()
    changed: Sequence[tuple[Any, ...]] = ()
    # run key -> its snapshots row (the batch's last for that run: only the newest stays)
    snapshots: dict[int, tuple[int, int, bytes, str, bytes]] | None = None
    next_position: int = 0
    next_run: int = 0


class WriterCore:
    """The write connection and the writer's caches; used by the writer thread only.

    A batch is committed in three parts: :meth:`plan` (seq checks, hash chain and rows),
    :meth:`write` (one transaction) and :meth:`apply` (caches and results, once COMMIT
    succeeded).
    """

    def __init__(self, path: str, synchronous: str) -> None:
        self.path = path
        self.synchronous = synchronous
        self.conn: sqlite3.Connection | None = None
        # One cursor for the statements of every transaction (BEGIN, the writes, COMMIT):
        # Connection.execute would make and drop a cursor for each.
        self._db: sqlite3.Cursor | None = None
        # run_id -> (run key, last seq, last digest), as this writer last wrote or read them.
        self._runs: dict[str, _RunState] = {}
        self._next_position: int | None = None
        self._next_run: int | None = None
        #: The claims this store holds, checked in every append of their runs.
        self.fence = ClaimFence()
        #: Why the file is read as it is and nothing can be written to it, or None.
        self.read_only: str | None = None

    def connect(self, create: bool, page_size: int) -> None:
        """Open the write connection, creating or upgrading the schema (blocking).

        Raises StoreFileError (with the path) when SQLite cannot open or read the file. A
        store whose directory cannot be written is opened to be read as it is
        (:attr:`read_only` says why; see eventstore._schema.open_file): its appends fail.
        """
        conn, self.read_only = open_file(self.path, create, page_size)
        if self.read_only is None:
            try:
                _to_wal(conn)
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                conn.execute(f"PRAGMA wal_autocheckpoint = {wal_autocheckpoint_pages(conn)}")
            except sqlite3.Error as exc:
                conn.close()
                raise StoreFileError(self.path, describe(self.path, exc)) from exc
            except BaseException:
                conn.close()
                raise
        self.conn = conn
        self._db = conn.cursor()

    @property
    def uri(self) -> str | None:
        """The URI the store's other connections open its file with (a store read as it
        is), or None: they open its path."""
        return None if self.read_only is None else file_uri(self.path)

    def close(self) -> None:
        conn, self.conn = self.conn, None
        self._db = None
        if conn is None:
            return
        try:
            # Merge the WAL so the database file alone holds everything.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            # A full disk (or a file size limit) refuses the merge; every commit is still
            # in the WAL, which the next opening merges. Closing goes on: raising here
            # would hide the error that brought the caller to close, and stop the heads
            # file from being written.
            why = describe(self.path, exc)
            _log.warning("could not merge the WAL of %s into it on close: %s", self.path, why)
        finally:
            conn.close()

    def invalidate(self) -> None:
        """Forget the caches (another process may have written; a transaction failed)."""
        self._runs.clear()
        self._next_position = None
        self._next_run = None

    def commit(self, batch: Sequence[Request]) -> None:
        """Plan, write and apply ``batch`` in one transaction (in the writer thread).

        A request whose expected_seq does not match the file gets ConcurrencyError and
        writes nothing; the others still commit. If the whole transaction fails, it raises
        (every request failed). Results are published only after COMMIT succeeded.
        Ownership requests, and appends of runs the store holds a claim on, go through the
        claims table in the same transaction (see eventstore._sqlite_claims).
        """
        shape = self.fence.sort(batch)
        if shape != PLAIN:
            self._commit_owned(batch, shape)
            return
        requests = cast(Sequence[AppendRequest], batch)  # sort() found nothing else
        try:
            plan = self.plan(requests, assume_new=True)
            self.write(plan)
        except sqlite3.IntegrityError:
            # The file refused the batch: another process wrote since the caches were
            # filled. Plan again from the file, holding its write lock meanwhile.
            self.invalidate()
            plan = self._commit_from_file(requests)
        except BaseException:
            self.invalidate()
            raise
        self.apply(requests, plan)

    def _commit_owned(self, batch: Sequence[Request], shape: int) -> None:
        """The transaction of a batch that touches ownership: claims first walked in batch
        order (epoch fence included), then the appends that passed it, all in one
        transaction (planned again from the file if the caches were stale)."""
        db = self._db
        if db is None:
            raise StoreClosedError("append")
        fence = self.fence
        assume_new = True
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    turn = fence.walk(db, batch, shape)
                    # None: a batch of appends only, all through the fence as they are.
                    appends = cast(list[AppendRequest], batch) if turn is None else turn.appends
                    plan = self.plan(appends, assume_new=assume_new)
                    _write(db, plan)
                    if turn is not None and turn.releasing is not None:
                        fence.release_after(db, turn, plan.outcomes)  # releases with appends
                    db.execute("COMMIT")
                except BaseException:
                    if db.connection.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.IntegrityError:
                self.invalidate()
                if not assume_new:
                    raise
                assume_new = False  # another process wrote since: plan from the file
                continue
            except BaseException:
                self.invalidate()
                raise
            break
        if turn is not None:
            fence.apply(turn)
        self.apply(appends, plan)

    def _commit_from_file(self, requests: Sequence[AppendRequest]) -> _Plan:
        db = self._cursor()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                plan = self.plan(requests)
                self.write(plan, in_transaction=True)
                db.execute("COMMIT")
            except BaseException:
                if db.connection.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except BaseException:
            self.invalidate()
            raise
        return plan

    def plan(self, requests: Sequence[AppendRequest], *, assume_new: bool = False) -> _Plan:
        """Work out the transaction: seq checks, hash chain, rows. Reads only on cache misses.

        ``assume_new``: a run that is not in the cache and is appended at expected_seq 0 is
        taken to be new without asking the file. If the file does hold it, inserting its
        runs row breaks the UNIQUE run_id constraint, nothing is written, and
        :meth:`commit` plans again from the file.
        """
        plan = _Plan([], [], {})
        if self._next_position is None or self._next_run is None:
            conn = self._connection()
            # The row with the highest position; a frame's events take the positions after.
            last = conn.execute(
                f"SELECT position + length(hash) / {HASH_WIDTH} FROM events "
                "ORDER BY position DESC LIMIT 1"
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
        add_row = plan.rows.append
        add_outcome = plan.outcomes.append
        # run_id -> [key, status, graph_hash, graph_id, quality, origin] of a new run
        new_runs: dict[str, list[Any]] | None = None
        # run key -> [status, graph_hash, graph_id, quality, origin]
        changed: dict[int, list[Any]] | None = None
        missing: set[str] | None = None  # the runs to read (none, usually)
        for request in requests:
            if request.run_id not in cache and not (assume_new and request.expected_seq == 0):
                missing = missing or set()
                missing.add(request.run_id)
        loaded = _NO_RUNS if missing is None else self._load_runs(missing)
        for request in requests:
            run_id = request.run_id
            expected = request.expected_seq
            state = touched.get(run_id) or cache.get(run_id) or loaded.get(run_id)
            seq = 0 if state is None else state[1]
            if expected is not None and expected != seq:
                if run_id not in touched and run_id in cache:
                    # The cache may be behind the file (another store on it appended
                    # since): only the file's last seq answers a conflict.
                    del cache[run_id]
                    state = self._load_runs({run_id}).get(run_id)
                    seq = 0 if state is None else state[1]
                if expected != seq:
                    add_outcome(ConcurrencyError(run_id, expected, seq))
                    continue
            if state is None:
                key, prev = next_run, b""
                new_runs = new_runs or {}
                new_runs[run_id] = [next_run, "new", None, None, None, None]
                next_run += 1
            else:
                key, seq, prev = state
            first = seq + 1
            digests = chain_digests(
                prev, run_id, first, request.tags, request.versions, request.bodies
            )
            seq += len(digests)
            prev = digests[-1]  # a batch holds at least one event (the front checks)
            # The blobs go to SQLite as bytearrays: Python's sqlite3 binds a bytearray as
            # it is, while it first looks for an adapter (in vain) for each bytes value.
            rows = request.rows or request.stored_rows()
            if len(rows) == 1:  # one frame (or one event): the batch's hashes side by side
                count, row_type, row_version, stored = rows[0]
                hashes = _BLOB.join(digests)
                add_row((position, key, first, now, row_type, row_version, hashes, _blob(stored)))
                position += count
            else:
                row_seq = first
                for count, row_type, row_version, stored in rows:
                    done = row_seq - first
                    hashes = _BLOB.join(digests[done : done + count])
                    add_row(
                        (position, key, row_seq, now, row_type, row_version, hashes, _blob(stored))
                    )
                    position += count
                    row_seq += count
            touched[run_id] = (key, seq, prev)
            snapshot = request.snapshot
            if snapshot is not None:
                at = snapshot.events
                plan.snapshots = plan.snapshots or {}
                plan.snapshots[key] = (
                    key,
                    first + at - 1,
                    digests[at - 1],
                    snapshot.version,
                    snapshot.data,
                )
            index = request.index
            if index is not UNCHANGED_INDEX:
                created = None if new_runs is None else new_runs.get(run_id)
                if created is not None:
                    for i, value in enumerate(index, 1):
                        if value is not None:
                            created[i] = value or None
                elif index != UNCHANGED_INDEX:
                    changed = changed or {}
                    change = changed.setdefault(key, [None, None, None, None, None])
                    for i, value in enumerate(index):
                        if value is not None:
                            change[i] = value
            add_outcome(AppendResult(first, seq, position - 1, prev.hex()))
        # A new run's row starts at seq 0; the trigger advances it with each events row.
        if new_runs is not None:
            plan.new_runs = [
                (key, rid, st or "new", now, now, 0, gh, gid, q, o)
                for rid, (key, st, gh, gid, q, o) in new_runs.items()
            ]
        if changed is not None:
            plan.changed = [(*change, k) for k, change in changed.items()]
        plan.next_position = position
        plan.next_run = next_run
        return plan

    def write(self, plan: _Plan, *, in_transaction: bool = False) -> None:
        """Run ``plan``'s statements, in a transaction of their own unless
        ``in_transaction``. Rolls back (its own transaction) and raises on any error."""
        db = self._cursor()
        if in_transaction:
            _write(db, plan)
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            _write(db, plan)
            db.execute("COMMIT")
        except BaseException:
            if db.connection.in_transaction:
                db.execute("ROLLBACK")
            raise

    def apply(self, requests: Sequence[AppendRequest], plan: _Plan) -> None:
        """After COMMIT: advance the caches and hand each request its outcome."""
        self._next_position = plan.next_position
        self._next_run = plan.next_run
        cache = self._runs
        if len(cache) > _RUN_CACHE_LIMIT:
            cache.clear()
        cache.update(plan.touched)
        outcomes = plan.outcomes  # one per request (plan's): no zip made and parsed
        i = 0
        for request in requests:
            outcome = outcomes[i]
            i += 1
            if type(outcome) is AppendResult:
                request.result = outcome
            else:
                request.error = cast(StoreError, outcome)

    def _connection(self) -> sqlite3.Connection:
        if self.conn is None:
            raise StoreClosedError("append")
        return self.conn

    def _cursor(self) -> sqlite3.Cursor:
        if self._db is None:
            raise StoreClosedError("append")
        return self._db

    def _load_runs(self, run_ids: set[str]) -> dict[str, _RunState]:
        """The (run key, last seq, last digest) the file records for those of ``run_ids``
        it holds (one query)."""
        found: dict[str, _RunState] = {}
        for run_id, key, last_seq, last_hash in self._connection().execute(
            LOOKUP_RUNS, (json.dumps(sorted(run_ids)),)
        ):
            found[run_id] = (key, last_seq, bytes(last_hash))
        return found


#: How long opening a store waits for the lock it needs to turn the file to WAL (as long
#: as the connection's busy timeout).
_WAL_WAIT_S = 10.0


def _to_wal(conn: sqlite3.Connection) -> None:
    """Turn the file to WAL (nothing to do once it is), waiting for the lock that takes.

    A new store's schema is committed before its file turns to WAL; another process
    opening it then may hold the write lock while this one asks for WAL, and SQLite
    answers "database is locked" at once, without its busy handler (waiting could
    deadlock: the pragma reads before it writes). So it is asked again until the lock
    is free, for at most the busy timeout."""
    deadline = time.monotonic() + _WAL_WAIT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_BUSY")
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)  # in a worker thread (SqliteEventStore.open)


def _write(db: sqlite3.Cursor, plan: _Plan) -> None:
    """Run ``plan``'s statements on ``db``, inside the caller's transaction."""
    if plan.new_runs:  # before their events: the fence checks each runs row
        db.executemany(INSERT_RUN, plan.new_runs)
    if plan.rows:
        db.executemany(INSERT_EVENT, plan.rows)
    if plan.changed:
        db.executemany(UPDATE_RUN, plan.changed)
    if plan.snapshots:
        snapshots = list(plan.snapshots.values())
        db.executemany(INSERT_SNAPSHOT, snapshots)
        db.executemany(DROP_OLDER_SNAPSHOTS, [(row[0], row[1]) for row in snapshots])
