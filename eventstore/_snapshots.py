"""Snapshot storage of a SQLite store: a cache of folded run states beside the log.

Snapshots have a connection of their own, used from worker threads one call at a time:
saving one is rare (every N events of a run) and must not wait behind, or hold up, the
writer's group commits more than one short transaction does. Only the newest snapshot of a
run is kept. The store never reads ``data``; whoever loads one checks it against the
``snapshot.taken`` event at its seq (see :mod:`eventstore._snapshot_event`).
"""

from __future__ import annotations

import sqlite3
import threading

from ._errors import StoreClosedError, StoreError
from ._protocol import Snapshot
from ._schema import sqlite_name

__all__ = ["SnapshotTable"]


class SnapshotTable:
    """Saves, loads and deletes the snapshots of the store at ``path`` (blocking calls)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._lock = threading.Lock()
        #: The URI to open the file with instead of its path (a store read as it is).
        self.uri: str | None = None

    def _connection(self, operation: str) -> sqlite3.Connection:
        if self._closed:
            raise StoreClosedError(operation)
        if self._conn is None:
            conn = sqlite3.connect(
                sqlite_name(self._path) if self.uri is None else self.uri,
                uri=self.uri is not None,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA busy_timeout = 10000")
            self._conn = conn
        return self._conn

    def save(self, snapshot: Snapshot) -> None:
        """Store ``snapshot`` as its run's newest, dropping the run's older ones.

        Raises ValueError for a hash that is not hex, StoreError if the run has no events
        or the transaction failed, StoreClosedError once closed.
        """
        digest = bytes.fromhex(snapshot.hash)
        with self._lock:
            conn = self._connection("save_snapshot")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    row = conn.execute(
                        "SELECT run FROM runs WHERE run_id = ?", (snapshot.run_id,)
                    ).fetchone()
                    if row is None:
                        raise StoreError(
                            f"save_snapshot: run {snapshot.run_id!r} has no events in the store"
                        )
                    conn.execute(
                        "INSERT OR REPLACE INTO snapshots (run, seq, hash, version, data) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (row[0], snapshot.seq, digest, snapshot.version, snapshot.data),
                    )
                    conn.execute(
                        "DELETE FROM snapshots WHERE run = ? AND seq <> ?", (row[0], snapshot.seq)
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StoreError(f"{self._path}: save_snapshot failed: {exc}") from exc

    def load(self, run_id: str) -> Snapshot | None:
        """The run's newest snapshot, or None."""
        with self._lock:
            conn = self._connection("load_snapshot")
            try:
                row = conn.execute(
                    "SELECT s.seq, s.hash, s.version, s.data FROM snapshots s "
                    "JOIN runs r ON r.run = s.run WHERE r.run_id = ? "
                    "ORDER BY s.seq DESC LIMIT 1",
                    (run_id,),
                ).fetchone()
            except sqlite3.Error as exc:
                raise StoreError(f"{self._path}: load_snapshot failed: {exc}") from exc
        if row is None:
            return None
        seq, digest, version, data = row
        return Snapshot(run_id, seq, bytes(digest).hex(), version, bytes(data))

    def delete(self, run_id: str | None) -> int:
        """Delete the run's snapshots (every run's for None); return how many there were."""
        with self._lock:
            conn = self._connection("delete_snapshots")
            try:
                if run_id is None:
                    cursor = conn.execute("DELETE FROM snapshots")
                else:
                    cursor = conn.execute(
                        "DELETE FROM snapshots WHERE run = (SELECT run FROM runs WHERE run_id = ?)",
                        (run_id,),
                    )
            except sqlite3.Error as exc:
                raise StoreError(f"{self._path}: delete_snapshots failed: {exc}") from exc
            return cursor.rowcount

    def close(self) -> None:
        """Close the connection (idempotent); later calls raise StoreClosedError."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
