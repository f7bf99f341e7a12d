"""The PostgreSQL store's snapshots table: saving, loading and deleting a run's newest
snapshot on a pooled connection (snapshots handed over with an append are saved by the
writer, in the append's transaction)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import psycopg_pool

from ._errors import StoreClosedError, StoreError
from ._postgres_read import Fetch
from ._postgres_schema import check_text, one_line
from ._protocol import Snapshot

__all__ = ["SNAPSHOT_UPSERT", "PostgresSnapshots"]

#: Saves a run's snapshot at a seq (the run's older ones are deleted after it).
SNAPSHOT_UPSERT = (
    "INSERT INTO snapshots (run_id, seq, hash, version, data) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id, seq) DO UPDATE SET "
    "hash = EXCLUDED.hash, version = EXCLUDED.version, data = EXCLUDED.data"
)


class PostgresSnapshots:
    """The snapshots of a PostgreSQL store. ``pool(operation)`` is the store's read pool
    while it is open (StoreClosedError otherwise); ``fetch`` its one-query reads; ``where``
    names the database in messages."""

    __slots__ = ("_fetch", "_pool", "_where")

    def __init__(
        self,
        pool: Callable[[str], psycopg_pool.AsyncConnectionPool[Any]],
        fetch: Fetch,
        where: str,
    ) -> None:
        self._pool = pool
        self._fetch = fetch
        self._where = where

    async def _rows(
        self, operation: str, statements: Sequence[tuple[str, tuple[Any, ...]]]
    ) -> list[Any]:
        """Run ``statements`` in one transaction; the rows of the last one that has any."""
        pool = self._pool(operation)
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
            raise StoreError(f"{operation}: {self._where}: {one_line(exc)}") from exc
        return rows

    async def save(self, snapshot: Snapshot) -> None:
        """See :meth:`PostgresEventStore.save_snapshot`."""
        bytes.fromhex(snapshot.hash)  # ValueError for a hash that is not hex
        check_text("save_snapshot", "the run id", snapshot.run_id)
        check_text("save_snapshot", f"run {snapshot.run_id!r}: the version", snapshot.version)
        if not await self._fetch(
            "save_snapshot",
            "SELECT 1 FROM runs WHERE run_id = %s AND last_seq > 0",
            (snapshot.run_id,),
        ):
            raise StoreError(f"save_snapshot: run {snapshot.run_id!r} has no events in the store")
        await self._rows(
            "save_snapshot",
            [
                (
                    SNAPSHOT_UPSERT,
                    (snapshot.run_id, snapshot.seq, snapshot.hash, snapshot.version, snapshot.data),
                ),
                (
                    "DELETE FROM snapshots WHERE run_id = %s AND seq <> %s",
                    (snapshot.run_id, snapshot.seq),
                ),
            ],
        )

    async def load(self, run_id: str) -> Snapshot | None:
        """See :meth:`PostgresEventStore.load_snapshot`."""
        if "\x00" in run_id:  # PostgreSQL text holds no NUL: no run has this id
            return None
        rows = await self._rows(
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

    async def delete(self, run_id: str | None) -> int:
        """See :meth:`PostgresEventStore.delete_snapshots`."""
        if run_id is not None and "\x00" in run_id:  # no run has this id
            return 0
        if run_id is None:
            statement: tuple[str, tuple[Any, ...]] = ("DELETE FROM snapshots", ())
        else:
            statement = ("DELETE FROM snapshots WHERE run_id = %s", (run_id,))
        rows = await self._rows("delete_snapshots", [statement])
        return int(rows[0][0]) if rows else 0
