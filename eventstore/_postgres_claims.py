"""Run ownership on PostgreSQL: claims, renewals and releases on the runs table.

Every statement takes "now" from the server's clock, so leases mean the same to every
machine. These run on a connection of their own, never queued behind appends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import psycopg

from ._claims import Claim
from ._errors import RunOwnedError, StoreClosedError, StoreError
from ._postgres_alive import spoke_unasked
from ._postgres_schema import one_line

__all__ = [
    "EXTEND",
    "RELEASE",
    "LeaseConnection",
    "claim",
    "claim_runnable",
    "due_leases",
    "mark_draining",
    "release",
    "renew",
]

Connection = psycopg.AsyncConnection[tuple[Any, ...]]


class LeaseConnection:
    """The connection ownership statements run on, one at a time, reconnecting after a
    connection error (reported as StoreError)."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[Connection]],
        where: str,
        is_open: Callable[[], bool],
    ) -> None:
        self._connect = connect
        self._is_open = is_open
        self._where = where
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()
        self.closed = False

    async def call(
        self,
        operation: str,
        statement: Callable[[Connection], Awaitable[Any]],
        *,
        again: bool = False,
    ) -> Any:
        """Run ``statement`` on the connection (a new one if it has none, or if its server
        closed it while idle). ``again``: a statement that may run twice (a renewal, a
        release, a claim of runnable runs, whose repeat changes nothing or takes only runs
        no one holds) runs once more on a new connection when its connection was lost
        under it. Raises StoreError when it fails."""
        async with self._lock:
            for attempt in range(2 if again else 1):
                if self.closed or not self._is_open():
                    raise StoreClosedError(operation)
                if self._conn is not None and spoke_unasked(self._conn):
                    stale, self._conn = self._conn, None  # its backend is gone
                    await stale.close()
                if self._conn is None:
                    self._conn = await self._connect()
                conn = self._conn
                try:
                    return await statement(conn)
                except psycopg.OperationalError as exc:
                    self._conn = None
                    await conn.close()
                    if attempt == 0 and again:
                        continue
                    raise StoreError(f"{operation}: {self._where}: {one_line(exc)}") from exc
            raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        self.closed = True
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()


_NOW = "extract(epoch FROM clock_timestamp())::float8"

_CLAIM = f"""
INSERT INTO runs AS r (run_id, status, created, updated, last_seq, last_hash, owner,
                       lease_expires, claim_epoch)
VALUES (%(run_id)s, 'new', {_NOW}, {_NOW}, 0, '', %(owner)s, {_NOW} + %(lease)s, 1)
ON CONFLICT (run_id) DO UPDATE
SET owner = excluded.owner, lease_expires = excluded.lease_expires,
    claim_epoch = r.claim_epoch + 1, draining = NULL, draining_since = NULL
WHERE r.owner IS NULL OR r.owner = excluded.owner OR r.lease_expires < {_NOW}
RETURNING r.claim_epoch, r.lease_expires
"""

_RENEW = f"""
UPDATE runs r SET lease_expires = {_NOW} + %s
FROM unnest(%s::text[], %s::bigint[]) AS v(run_id, epoch)
WHERE r.run_id = v.run_id AND r.claim_epoch = v.epoch AND r.owner = %s
RETURNING r.run_id, r.lease_expires
"""

#: The leases a writer's transaction confirms: the claims its appends were fenced on (the
#: runs rows are locked, their epochs checked), from now on the server's clock.
EXTEND = f"""
UPDATE runs r SET lease_expires = {_NOW} + v.lease
FROM unnest(%s::text[], %s::bigint[], %s::float8[]) AS v(run_id, epoch, lease)
WHERE r.run_id = v.run_id AND r.claim_epoch = v.epoch AND r.owner IS NOT NULL
"""

RELEASE = (
    "UPDATE runs SET owner = NULL, lease_expires = NULL, draining = NULL, draining_since = NULL "
    "WHERE run_id = %s AND claim_epoch = %s AND owner = %s RETURNING status"
)

# SKIP LOCKED: a run another claimer is taking right now is passed over, not waited for.
_CLAIM_RUNNABLE = f"""
WITH c AS (
    SELECT run FROM runs
    WHERE status = 'running' AND (owner IS NULL OR lease_expires < {_NOW})
        AND NOT (run_id = ANY(%(exclude)s::text[]))
    ORDER BY run LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE runs r SET owner = %(owner)s, lease_expires = {_NOW} + %(lease)s,
    claim_epoch = r.claim_epoch + 1, draining = NULL, draining_since = NULL
FROM c WHERE r.run = c.run
RETURNING r.run_id, r.claim_epoch, r.lease_expires
"""

_DRAIN = (
    "UPDATE runs SET draining = %s, draining_since = CASE WHEN %s::text IS NULL THEN NULL "
    f"ELSE {_NOW} END WHERE run_id = %s AND claim_epoch = %s AND owner = %s RETURNING run"
)


async def claim(conn: Connection, run_id: str, owner: str, lease: float) -> Claim:
    """See ClaimingStore.claim."""
    params = {"run_id": run_id, "owner": owner, "lease": lease}
    cur = await conn.execute(_CLAIM, params)
    row = await cur.fetchone()
    if row is not None:
        return Claim(run_id, owner, int(row[0]), float(row[1]))
    cur = await conn.execute("SELECT owner, lease_expires FROM runs WHERE run_id = %s", (run_id,))
    held = await cur.fetchone()
    if held is None or held[0] is None:  # released meanwhile: try once more
        cur = await conn.execute(_CLAIM, params)
        row = await cur.fetchone()
        if row is not None:
            return Claim(run_id, owner, int(row[0]), float(row[1]))
        raise RunOwnedError(run_id, "(another claimer)", 0.0)
    raise RunOwnedError(run_id, str(held[0]), float(held[1]))


async def renew(
    conn: Connection, claims: Sequence[Claim], owner: str, lease: float
) -> list[Claim | None]:
    """See ClaimingStore.renew (all of ``claims`` are ``owner``'s)."""
    cur = await conn.execute(
        _RENEW, (lease, [c.run_id for c in claims], [c.epoch for c in claims], owner)
    )
    renewed = {str(row[0]): float(row[1]) for row in await cur.fetchall()}
    return [
        None if c.run_id not in renewed else Claim(c.run_id, owner, c.epoch, renewed[c.run_id])
        for c in claims
    ]


async def release(conn: Connection, claim: Claim, runnable_channel: str) -> bool:
    """See ClaimingStore.release; False when the run no longer held ``claim`` (it was
    taken over, or released before). A run given up while running is claimable at once:
    ``runnable_channel`` is notified, after the release committed."""
    cur = await conn.execute(RELEASE, (claim.run_id, claim.epoch, claim.owner))
    row = await cur.fetchone()
    if row is not None and row[0] == "running":
        await conn.execute("SELECT pg_notify(%s, '')", (runnable_channel,))
    return row is not None


async def claim_runnable(
    conn: Connection, owner: str, lease: float, limit: int, exclude: list[str]
) -> list[Claim]:
    """See ClaimingStore.claim_runnable."""
    params = {"owner": owner, "lease": lease, "limit": limit, "exclude": exclude}
    cur = await conn.execute(_CLAIM_RUNNABLE, params)
    rows = await cur.fetchall()
    return [Claim(str(r[0]), owner, int(r[1]), float(r[2])) for r in sorted(rows)]


async def mark_draining(conn: Connection, claim: Claim, nodes: str | None) -> bool:
    """See ClaimingStore.mark_draining."""
    cur = await conn.execute(_DRAIN, (nodes, nodes, claim.run_id, claim.epoch, claim.owner))
    return await cur.fetchone() is not None


def due_leases(
    leases: dict[str, tuple[float, float]],
    epochs: dict[str, int],
    run_ids: Collection[str],
    now: float,
) -> tuple[list[str], list[int], list[float]] | None:
    """The claims among ``run_ids`` (runs a transaction appends to under their claims)
    whose lease an append is to extend: ``leases`` (run_id -> (lease, due on the monotonic
    clock)) says it started a third of a lease ago or more. EXTEND's parameters, or None
    when there is none (most transactions)."""
    due: tuple[list[str], list[int], list[float]] | None = None
    for run_id in run_ids:
        held = leases.get(run_id)
        if held is not None and now >= held[1]:
            if due is None:
                due = ([], [], [])
            due[0].append(run_id)
            due[1].append(epochs[run_id])
            due[2].append(held[0])
    return due
