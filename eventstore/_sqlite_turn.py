"""The ownership requests of a SQLite store, and what each does inside one of its writer's
transactions (see eventstore._sqlite_claims for the fence that walks them)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal, TypeGuard

from ._claims import Claim
from ._errors import LeaseLostError, RunOwnedError, StoreError
from ._requests import AppendRequest, Pending

__all__ = [
    "ClaimTurn",
    "OwnershipRequest",
    "Request",
    "claim",
    "claim_runnable",
    "drain",
    "extend",
    "not_held",
    "release",
    "renew",
    "rows_named",
]

Operation = Literal["claim", "renew", "release", "claim_runnable", "drain"]

_SELECT = (
    "SELECT run_id, owner, expires, epoch FROM claims "
    "WHERE run_id IN (SELECT value FROM json_each(?))"
)
_SELECT_ONE = "SELECT owner, expires, epoch FROM claims WHERE run_id = ?"
# A start's claim of a run the file has no claims row for: epoch 1, or nothing if it has.
_INSERT_NEW = (
    "INSERT INTO claims (run_id, owner, expires, epoch) VALUES (?, ?, ?, 1) "
    "ON CONFLICT (run_id) DO NOTHING"
)
_UPSERT = "INSERT OR REPLACE INTO claims (run_id, owner, expires, epoch) VALUES (?, ?, ?, ?)"
_RENEW = "UPDATE claims SET expires = ? WHERE run_id = ?"
# The leases a transaction's appends confirm (their epochs were checked in it).
_EXTEND = "UPDATE claims SET expires = ? WHERE run_id IN (SELECT value FROM json_each(?))"
_EXTEND_ONE = "UPDATE claims SET expires = ? WHERE run_id = ?"
RELEASE = (
    "UPDATE claims SET owner = NULL, expires = NULL, draining = NULL, draining_since = NULL "
    "WHERE run_id = ?"
)
_DRAIN = "UPDATE claims SET draining = ?, draining_since = ? WHERE run_id = ?"
# Running runs that no live lease holds, oldest first (the runs_status index).
_RUNNABLE = (
    "SELECT r.run_id, coalesce(c.epoch, 0) FROM runs r "
    "LEFT JOIN claims c ON c.run_id = r.run_id "
    "WHERE r.status = 'running' AND (c.owner IS NULL OR c.expires < ?) "
    "AND r.run_id NOT IN (SELECT value FROM json_each(?)) "
    "ORDER BY r.run LIMIT ?"
)

#: run_id -> [owner, expires, epoch]: the claims rows a transaction read or wrote.
Rows = dict[str, list[Any]]
#: run_id -> the epoch the store holds, or the error its appends raise.
Held = Mapping[str, "int | StoreError"]


class OwnershipRequest(Pending[object]):
    """A claim, renewal, release or runnable-claim on its way through the store's writer.

    ``fence`` (for a claim): if the claim is refused, every later append of the run by
    this store fails with the refusal (RunOwnedError) until the run is claimed again, so a
    caller that does not wait for the claim's answer never writes without it.
    ``with_append`` (for a release): the release goes with the run's append at that
    expected seq (AppendRequest.release), in its transaction after it, only if it is written.
    """

    __slots__ = (
        "claims",
        "draining",
        "exclude",
        "fence",
        "lease",
        "limit",
        "operation",
        "owner",
        "run_id",
        "with_append",
    )

    def __init__(
        self,
        operation: Operation,
        *,
        run_id: str = "",
        owner: str = "",
        lease: float = 0.0,
        claims: Sequence[Claim] = (),
        limit: int = 0,
        exclude: Collection[str] = (),
        fence: bool = False,
        draining: str | None = None,
        with_append: int | None = None,
    ) -> None:
        super().__init__()
        self.with_append = with_append
        self.draining = draining
        self.operation = operation
        self.run_id = run_id
        self.owner = owner
        self.lease = lease
        self.claims = claims
        self.limit = limit
        self.exclude = json.dumps(list(exclude)) if exclude else "[]"  # claims, releases: none
        self.fence = fence


#: What a SQLite store's writer takes: appends and ownership requests, in one queue.
Request = AppendRequest | OwnershipRequest


class ClaimTurn:
    """The ownership part of one transaction: the appends that passed the epoch fence, the
    answers of the other requests, and the store's epochs and leases as they are once it
    commits."""

    __slots__ = ("answers", "appends", "epochs", "leases", "releasing", "since")

    def __init__(self, appends: list[AppendRequest], since: float) -> None:
        self.appends = appends
        # The indexes in ``appends`` of those carrying their run's release (release_after).
        self.releasing: list[int] | None = None
        self.answers: list[tuple[Pending[Any], object, StoreError | None]] = []
        # run_id -> its new epoch, the error its appends raise, or None (no longer held).
        self.epochs: dict[str, int | StoreError | None] = {}
        # run_id -> (lease, when an append is to extend it next) of the leases it wrote.
        self.leases: dict[str, tuple[float, float]] = {}
        # When its leases start on this process's monotonic clock (no later than ``now``).
        self.since = since

    def started(self, run_id: str, lease: float, now: float) -> None:
        """The transaction gives ``run_id``'s claim a lease of ``lease`` from ``now``."""
        self.leases[run_id] = (lease, now + lease / 3)

    def held(self, run_id: str, epochs: Held) -> int | StoreError | None:
        """The epoch the store holds ``run_id`` at as of this point of the transaction."""
        return self.epochs[run_id] if run_id in self.epochs else epochs.get(run_id)


# -- the operations, inside the transaction (on ``db``, the writer's cursor) -----------------


def rows_named(db: sqlite3.Cursor, requests: Sequence[Request], held: Held, appends: bool) -> Rows:
    """The claims rows the batch's requests name (those of its fenced appends only if
    ``appends``; not a start's claim's, which tries its insert first)."""
    ids: set[str] = set()
    for request in requests:
        if type(request) is AppendRequest:
            if appends and request.run_id in held:
                ids.add(request.run_id)
        elif type(request) is OwnershipRequest and request.with_append is None:
            if request.operation in ("renew", "release", "drain"):
                ids.update(claim.run_id for claim in request.claims)
            elif request.operation == "claim" and not request.fence:
                ids.add(request.run_id)
    rows: Rows = {}
    if not ids:  # none to read (the usual transaction: appends, the file unchanged)
        return rows
    if len(ids) == 1:  # one run: read by its key, with no JSON array made and walked
        run_id = next(iter(ids))
        found = db.execute(_SELECT_ONE, (run_id,)).fetchone()
        if found is not None:
            rows[run_id] = list(found)
        return rows
    for run_id, owner, expires, epoch in db.execute(_SELECT, (json.dumps(list(ids)),)):
        rows[run_id] = [owner, expires, epoch]
    return rows


def extend(
    db: sqlite3.Cursor,
    extending: dict[str, tuple[float, int]],
    turn: ClaimTurn,
    held: Held,
    now: float,
) -> None:
    """Extend the leases that the transaction's appends confirmed (run_id -> (lease, the
    epoch the append found)), in one statement per lease length (one, usually), but not a
    claim released or claimed anew later in the same transaction."""
    by_lease: dict[float, list[str]] = {}
    for run_id, (lease, epoch) in extending.items():
        if turn.held(run_id, held) == epoch:
            by_lease.setdefault(lease, []).append(run_id)
    for lease, run_ids in by_lease.items():
        if len(run_ids) == 1:
            db.execute(_EXTEND_ONE, (now + lease, run_ids[0]))
        else:
            db.execute(_EXTEND, (now + lease, json.dumps(run_ids)))


def claim(
    db: sqlite3.Cursor, request: OwnershipRequest, rows: Rows, turn: ClaimTurn, now: float
) -> None:
    run_id, owner = request.run_id, request.owner
    expires = now + request.lease
    row = rows.get(run_id)
    if row is None and request.fence:
        # A start's claim: its run is new, so its claims row is, as a rule. Inserted at
        # epoch 1 unless the file holds one; then read, and the rules below apply to it.
        if db.execute(_INSERT_NEW, (run_id, owner, expires)).rowcount == 1:
            _claimed(request, rows, turn, 1, expires, now)
            return
        found = db.execute(_SELECT_ONE, (run_id,)).fetchone()
        row = rows[run_id] = list(found)
    if row is not None and row[0] not in (None, owner) and row[1] >= now:
        refused = RunOwnedError(run_id, row[0], row[1])
        turn.answers.append((request, None, refused))
        if request.fence:
            turn.epochs[run_id] = refused
        return
    epoch = 1 if row is None else row[2] + 1
    db.execute(_UPSERT, (run_id, owner, expires, epoch))
    _claimed(request, rows, turn, epoch, expires, now)


def _claimed(
    request: OwnershipRequest, rows: Rows, turn: ClaimTurn, epoch: int, expires: float, now: float
) -> None:
    run_id, owner = request.run_id, request.owner
    rows[run_id] = [owner, expires, epoch]
    turn.epochs[run_id] = epoch
    turn.started(run_id, request.lease, now)
    turn.answers.append((request, Claim(run_id, owner, epoch, expires), None))


def renew(
    db: sqlite3.Cursor, request: OwnershipRequest, rows: Rows, turn: ClaimTurn, now: float
) -> None:
    expires = now + request.lease
    answers: list[Claim | None] = []
    for held in request.claims:
        row = rows.get(held.run_id)
        if _holds(row, held):
            row[1] = expires
            db.execute(_RENEW, (expires, held.run_id))
            turn.started(held.run_id, request.lease, now)
            answers.append(Claim(held.run_id, held.owner, held.epoch, expires))
        else:
            answers.append(None)
    turn.answers.append((request, answers, None))


def release(
    db: sqlite3.Cursor, request: OwnershipRequest, rows: Rows, turn: ClaimTurn, held: Held
) -> None:
    given = request.claims[0]
    run_id = given.run_id
    row = rows.get(run_id)
    holding = turn.held(run_id, held)
    if _holds(row, given):
        row[0] = row[1] = None
        db.execute(RELEASE, (run_id,))
        if holding == given.epoch:
            turn.epochs[run_id] = None  # the store no longer holds it: no fence
    elif holding == given.epoch:
        # Taken over: giving the lost claim up does not lift the fence.
        found, owner = (0, None) if row is None else (row[2], row[0])
        turn.epochs[run_id] = LeaseLostError(run_id, given.epoch, found, owner)
    turn.answers.append((request, None, None))


def drain(
    db: sqlite3.Cursor, request: OwnershipRequest, rows: Rows, turn: ClaimTurn, now: float
) -> None:
    given = request.claims[0]
    marked = _holds(rows.get(given.run_id), given)
    if marked:
        since = None if request.draining is None else now
        db.execute(_DRAIN, (request.draining, since, given.run_id))
    turn.answers.append((request, marked, None))


def claim_runnable(
    db: sqlite3.Cursor, request: OwnershipRequest, rows: Rows, turn: ClaimTurn, now: float
) -> None:
    expires = now + request.lease
    claims = [
        Claim(run_id, request.owner, epoch + 1, expires)
        for run_id, epoch in db.execute(_RUNNABLE, (now, request.exclude, request.limit)).fetchall()
    ]
    db.executemany(_UPSERT, [(c.run_id, c.owner, c.expires, c.epoch) for c in claims])
    for taken in claims:
        rows[taken.run_id] = [taken.owner, taken.expires, taken.epoch]
        turn.epochs[taken.run_id] = taken.epoch
        turn.started(taken.run_id, request.lease, now)
    turn.answers.append((request, claims, None))


def not_held(run_id: str) -> StoreError:
    return StoreError(f"run {run_id}: its claim is not held here at its epoch: not released")


def _holds(row: list[Any] | None, claim: Claim) -> TypeGuard[list[Any]]:
    """Whether the claims row (owner, expires, epoch) is still ``claim``'s."""
    return row is not None and row[2] == claim.epoch and row[0] == claim.owner
