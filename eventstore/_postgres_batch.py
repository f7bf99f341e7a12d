"""The writes of one PostgreSQL group commit: the runs rows locked, every append checked
against its run's head (and, for a run the store has claimed, the claim epoch), the
accepted ones written with their snapshots, and the claims released with their runs'
final appends (see eventstore._postgres_writer for the transaction's round trips)."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from ._errors import ConcurrencyError, LeaseLostError, StoreError
from ._events import chain_digest
from ._postgres_claims import EXTEND, RELEASE, due_leases
from ._postgres_snapshots import SNAPSHOT_UPSERT
from ._protocol import AppendResult
from ._requests import AppendRequest, HeldRelease

__all__ = ["Retry", "Written", "write_batch"]

Connection = psycopg.AsyncConnection[tuple[Any, ...]]

_LOCK_RUNS = (
    "SELECT run_id, run, last_seq, last_hash, claim_epoch, owner FROM runs "
    "WHERE run_id = ANY(%s) ORDER BY run_id FOR UPDATE"
)
_INSERT_RUNS = (
    "INSERT INTO runs (run_id, status, created, updated, last_seq, last_hash, graph_hash, "
    "graph_id, quality, origin) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::float8[], %s::float8[], %s::bigint[], "
    "%s::bytea[], %s::text[], %s::text[], %s::text[], %s::text[]) "
    "ON CONFLICT (run_id) DO NOTHING RETURNING run_id, run"
)
# The run_index hooks' values: None leaves a column unchanged, "" clears it (never status).
_UPDATE_RUNS = (
    "UPDATE runs r SET last_seq = v.seq, last_hash = v.hash, updated = v.ts, "
    "status = coalesce(nullif(v.status, ''), r.status), "
    "graph_hash = nullif(coalesce(v.graph_hash, r.graph_hash), ''), "
    "graph_id = nullif(coalesce(v.graph_id, r.graph_id), ''), "
    "quality = nullif(coalesce(v.quality, r.quality), ''), "
    "origin = nullif(coalesce(v.origin, r.origin), '') "
    "FROM unnest(%s::bigint[], %s::bigint[], %s::bytea[], %s::float8[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::text[]) "
    "AS v(run, seq, hash, ts, status, graph_hash, graph_id, quality, origin) "
    "WHERE r.run = v.run"
)
# Positions last, in the statement that writes the events: the meta row's lock is taken
# by the server inside it and, as the COMMIT goes out in the same pipeline, held only
# until the commit is durable, never across a round trip to this process.
_INSERT_EVENTS = (
    "WITH p AS (UPDATE meta SET next_position = next_position + %(count)s "
    "RETURNING next_position - %(count)s AS base), "
    "e AS (INSERT INTO events (position, run, seq, ts, type, version, hash, body) "
    "SELECT p.base + v.i - 1, v.run, v.seq, v.ts, v.type, v.version, v.hash, v.body "
    "FROM p, unnest(%(runs)s::bigint[], %(seqs)s::bigint[], %(ts)s::float8[], "
    "%(types)s::text[], %(versions)s::int[], %(hashes)s::bytea[], %(bodies)s::bytea[]) "
    "WITH ORDINALITY AS v(run, seq, ts, type, version, hash, body, i)) "
    "SELECT base FROM p"
)


class Retry(Exception):
    """Another writer created one of the batch's new runs meanwhile: plan again."""


class Written:
    """What :func:`write_batch` queued: the cursor whose row is the first position (None
    if nothing was accepted), the leases it extends (EXTEND's parameters, or None) and
    the releases it made."""

    __slots__ = ("extended", "positions", "released")

    def __init__(self) -> None:
        self.positions: psycopg.AsyncCursor[Any] | None = None
        self.extended: tuple[list[str], list[int], list[float]] | None = None
        self.released: list[HeldRelease] = []


async def write_batch(
    conn: Connection,
    batch: list[AppendRequest],
    held: dict[str, int],
    leases: dict[str, tuple[float, float]],
    began: float,
) -> Written:
    """Queue the batch's writes in the transaction on ``conn``: ``held`` is the writer's
    claim epochs (run_id -> the epoch its appends must find), ``leases`` its leases' due
    times. The results are answered after COMMIT (PostgresWriter._answer). The claims its
    appends pass the fence of are confirmed (EXTEND) where due, and the claims whose
    release goes with an accepted append (``AppendRequest.release``) are given up after
    it; a release whose append passed no fence at its epoch is answered with an error."""
    now = time.time()
    written = Written()
    fenced: set[str] = set()
    run_ids = sorted({request.run_id for request in batch})
    cur = await conn.execute(_LOCK_RUNS, (run_ids,))
    # run_id -> [run key or None (new), last seq, last digest]
    rows = await cur.fetchall()
    heads: dict[str, list[Any]] = {row[0]: [row[1], row[2], bytes(row[3])] for row in rows}
    epochs = {row[0]: (row[4], row[5]) for row in rows}
    # run_id -> [status, graph_hash, graph_id, quality, origin]: a new run's, a known
    # run's change
    new_runs: dict[str, list[Any]] = {}
    changed: dict[str, list[Any]] = {}
    accepted: list[tuple[AppendRequest, int, list[bytes]]] = []
    for request in batch:
        request.result = None
        request.error = None
        if request.release is not None:
            request.release.error = None
        run_id = request.run_id
        claimed = held.get(run_id)
        if claimed is not None:
            found = epochs.get(run_id, (0, None))
            if found[0] != claimed:
                request.error = LeaseLostError(run_id, claimed, found[0], found[1])
                continue
            fenced.add(run_id)
        head = heads.get(run_id)
        seq = 0 if head is None else head[1]
        if request.expected_seq is not None and request.expected_seq != seq:
            request.error = ConcurrencyError(run_id, request.expected_seq, seq)
            continue
        if head is None:
            head = heads[run_id] = [None, 0, b""]
            new_runs[run_id] = ["new", None, None, None, None]
        first = seq + 1
        prev = head[2]
        digests: list[bytes] = []
        for tag, version, body in zip(request.tags, request.versions, request.bodies, strict=True):
            seq += 1
            prev = chain_digest(prev, run_id, seq, tag, version, body)
            digests.append(prev)
        head[1], head[2] = seq, prev
        change = new_runs.get(run_id) or changed.setdefault(run_id, [None] * 5)
        for i, value in enumerate(request.index):
            if value is not None:
                change[i] = value
        accepted.append((request, first, digests))
    if not accepted:
        return written
    if fenced:
        written.extended = due_leases(leases, held, fenced, began)
        if written.extended is not None:
            await conn.execute(EXTEND, written.extended)
    if new_runs:
        ids = list(new_runs)
        cur = await conn.execute(
            _INSERT_RUNS,
            (
                ids,
                [new_runs[i][0] or "new" for i in ids],
                [now] * len(ids),
                [now] * len(ids),
                [heads[i][1] for i in ids],
                [heads[i][2] for i in ids],
                [new_runs[i][1] or None for i in ids],
                [new_runs[i][2] or None for i in ids],
                [new_runs[i][3] or None for i in ids],
                [new_runs[i][4] or None for i in ids],
            ),
        )
        inserted = {row[0]: row[1] for row in await cur.fetchall()}
        if len(inserted) != len(ids):
            raise Retry
        for run_id, key in inserted.items():
            heads[run_id][0] = key
    if changed:
        ids = list(changed)
        await conn.execute(
            _UPDATE_RUNS,
            (
                [heads[i][0] for i in ids],
                [heads[i][1] for i in ids],
                [heads[i][2] for i in ids],
                [now] * len(ids),
                [changed[i][0] for i in ids],
                [changed[i][1] for i in ids],
                [changed[i][2] for i in ids],
                [changed[i][3] for i in ids],
                [changed[i][4] for i in ids],
            ),
        )
    count = sum(len(digests) for _, _, digests in accepted)
    columns: list[list[Any]] = [[] for _ in range(7)]
    runs, seqs, stamps, types, versions, hashes, bodies = columns
    for request, first, digests in accepted:
        key = heads[request.run_id][0]
        n = len(digests)
        runs.extend([key] * n)
        seqs.extend(range(first, first + n))
        stamps.extend([now] * n)
        types.extend(request.tags)
        versions.extend(request.versions)
        hashes.extend(digests)
        bodies.extend(request.bodies)
        # The position is filled in by _answer once committed.
        request.result = AppendResult(first, first + n - 1, 0, digests[-1].hex())
    # Snapshots first: the events' statement takes the positions' lock last.
    await _save_snapshots(conn, accepted)
    await _release_with(conn, accepted, held, fenced, written)
    written.positions = await conn.execute(
        _INSERT_EVENTS,
        {
            "count": count,
            "runs": runs,
            "seqs": seqs,
            "ts": stamps,
            "types": types,
            "versions": versions,
            "hashes": hashes,
            "bodies": bodies,
        },
    )
    return written


async def _release_with(
    conn: Connection,
    accepted: list[tuple[AppendRequest, int, list[bytes]]],
    held: dict[str, int],
    fenced: set[str],
    written: Written,
) -> None:
    """Give up the claims whose release goes with an accepted append that passed the
    fence at the claim's epoch (its runs row is locked since: the claim holds)."""
    for request, _, _ in accepted:
        release = request.release
        if release is None:
            continue
        assert isinstance(release, HeldRelease)
        claim = release.claim
        if request.run_id in fenced and held.get(request.run_id) == claim.epoch:
            await conn.execute(RELEASE, (claim.run_id, claim.epoch, claim.owner))
            written.released.append(release)
        else:
            release.error = StoreError(
                f"run {request.run_id}: its claim is not held here at its epoch: not released"
            )


async def _save_snapshots(
    conn: Connection, accepted: list[tuple[AppendRequest, int, list[bytes]]]
) -> None:
    """Save the snapshots handed over with the batch's appends (a run keeps its newest)."""
    newest: dict[str, tuple[str, int, str, str, bytes]] = {}
    for request, first, digests in accepted:
        snapshot = request.snapshot
        if snapshot is not None:
            at = snapshot.events
            newest[request.run_id] = (
                request.run_id,
                first + at - 1,
                digests[at - 1].hex(),
                snapshot.version,
                snapshot.data,
            )
    for row in newest.values():
        await conn.execute(SNAPSHOT_UPSERT, row)
        await conn.execute(
            "DELETE FROM snapshots WHERE run_id = %s AND seq <> %s", (row[0], row[1])
        )
