"""Run ownership in a SQLite store: the ``claims`` table of the store's own file, written by
the store's writer thread inside its group commits.

A claim, renewal, release or claim of runnable runs is a request queued to the store's
writer like an append (:class:`OwnershipRequest`) and done in the writer's next
transaction, together with the appends and claims queued beside it: a burst of claims, or
a claim queued just before a run's first append, costs no transaction of its own. The
requests of a transaction take effect in the order they were queued, appends included, so
a claim queued before a run's first append is committed with it or before it.

The writer keeps the epoch of every claim the store holds (:class:`ClaimFence`). Each
append of such a run checks, in its transaction, that the claims table still holds that
epoch: once another claimer took the run over (its lease expired), the store's appends to
it fail with LeaseLostError and write nothing, and so does every later append of the run
by this store, with or without an expected seq, until it claims the run again (releasing
the lost claim does not lift the fence). This is the second fence beside the
``(run, seq)`` one. Leases are on this machine's clock (a SQLite file is shared by the
processes of one machine).

An append that passes the fence also confirms its claim: a transaction extends, in one
statement, the lease of every such run whose lease started more than a third of it ago
(what the store's own transactions wrote, which it keeps beside the epochs), so a
committed append leaves its claim at least two thirds of a lease to run however far
behind the renewals are. Most transactions extend nothing.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal, TypeGuard, cast

from ._claims import Claim
from ._errors import LeaseLostError, RunOwnedError, StoreError
from ._requests import AppendRequest, Pending

__all__ = ["ClaimFence", "ClaimTurn", "OwnershipRequest", "Request"]

Operation = Literal["claim", "renew", "release", "claim_runnable", "drain"]

_SELECT = (
    "SELECT run_id, owner, expires, epoch FROM claims "
    "WHERE run_id IN (SELECT value FROM json_each(?))"
)
_SELECT_ONE = "SELECT run_id, owner, expires, epoch FROM claims WHERE run_id = ?"
_UPSERT = "INSERT OR REPLACE INTO claims (run_id, owner, expires, epoch) VALUES (?, ?, ?, ?)"
_RENEW = "UPDATE claims SET expires = ? WHERE run_id = ?"
# The leases a transaction's appends confirm (their epochs were checked in it).
_EXTEND = "UPDATE claims SET expires = ? WHERE run_id IN (SELECT value FROM json_each(?))"
_RELEASE = (
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

    def __init__(self) -> None:
        self.appends: list[AppendRequest] = []
        # The indexes in ``appends`` of those carrying their run's release (release_after).
        self.releasing: list[int] | None = None
        self.answers: list[tuple[Pending[Any], object, StoreError | None]] = []
        # run_id -> its new epoch, the error its appends raise, or None (no longer held).
        self.epochs: dict[str, int | StoreError | None] = {}
        # run_id -> (lease, when an append is to extend it next) of the leases it wrote.
        self.leases: dict[str, tuple[float, float]] = {}
        # When its leases start on this process's monotonic clock (with ``now``).
        self.since = time.monotonic()

    def started(self, run_id: str, lease: float, now: float) -> None:
        """The transaction gives ``run_id``'s claim a lease of ``lease`` from ``now``."""
        self.leases[run_id] = (lease, now + lease / 3)


class ClaimFence:
    """The epochs of the claims a store holds, and the ownership part of its transactions.

    Used by the writer thread only.
    """

    def __init__(self) -> None:
        # run_id -> the epoch its appends must find in the claims table, or the error
        # they raise (a fenced claim that was refused).
        self.epochs: dict[str, int | StoreError] = {}
        # run_id -> (lease, due) of each claim in ``epochs``: its lease as the store's own
        # transactions last wrote it, to be extended by an append from ``due`` on (a third
        # of the lease after it started, on the store's clock).
        self.leases: dict[str, tuple[float, float]] = {}
        #: (claims as (run_id, epoch), since) of each committed transaction that started
        #: leases (claims, renewals, appends' extensions), for the event loop to hand to the
        #: ``watchers`` (filled by the writer thread, emptied on the loop: deque ends are
        #: atomic); see eventstore.LeaseConfirmingStore.
        self.confirmed: deque[tuple[list[tuple[str, int]], float]] = deque()
        self.watchers: list[Callable[[Sequence[tuple[str, int]], float], None]] = []
        # The file's data_version when the last transaction began: it changes when another
        # connection commits. While it stands still, the claims table holds what this
        # store's own transactions left there, which ``epochs`` follows.
        self._version: int | None = None

    def involved(self, requests: Sequence[Request]) -> bool:
        """Whether a batch holds an ownership request or an append the fence checks."""
        epochs = self.epochs
        for request in requests:
            if type(request) is not AppendRequest or request.run_id in epochs:
                return True
        return False

    def walk(self, db: sqlite3.Cursor, requests: Sequence[Request]) -> ClaimTurn:
        """Inside the transaction (on ``db``, the writer's cursor): do the ownership requests
        and check the fenced appends, in the order of ``requests``. Writes the claims rows;
        answers nothing (see apply)."""
        now = time.time()
        epochs = self.epochs
        turn = ClaimTurn()
        changes = turn.epochs
        version = db.execute("PRAGMA data_version").fetchone()[0]
        # Nobody else committed since this store's last transaction: the epochs it holds
        # are the file's, and its appends need no reading of their claims rows.
        trusted = version == self._version
        self._version = version
        rows = self._rows(db, requests, appends=not trusted)
        leases, extend = self.leases, None
        for request in requests:
            if type(request) is AppendRequest:
                run_id = request.run_id
                expected = changes[run_id] if run_id in changes else epochs.get(run_id)
                if type(expected) is int:
                    row = rows.get(run_id)
                    if (row is None and trusted) or (row is not None and row[2] == expected):
                        if request.release is not None:
                            turn.releasing = turn.releasing or []
                            turn.releasing.append(len(turn.appends))
                        turn.appends.append(request)
                        held = turn.leases.get(run_id) or leases.get(run_id)
                        if held is not None and now >= held[1]:  # confirmed by the append
                            turn.started(run_id, held[0], now)
                            if row is not None:
                                row[1] = now + held[0]
                            extend = extend or {}
                            extend[run_id] = (held[0], expected)
                    else:
                        found, owner = (0, None) if row is None else (row[2], row[0])
                        lost = LeaseLostError(run_id, expected, found, owner)
                        turn.answers.append((request, None, lost))
                        if request.release is not None:
                            turn.answers.append((request.release, None, lost))
                        # The fence stays strict: every later append of the run raises
                        # this (whatever its expected seq) until this store claims it
                        # again. Holding the old epoch instead would let the next
                        # transaction, finding the file unchanged, trust it.
                        changes[run_id] = lost
                elif expected is None:
                    if request.release is not None:  # no claim here to give up with it
                        turn.answers.append((request.release, None, _not_held(run_id)))
                    turn.appends.append(request)
                else:  # the error its appends raise (a lost or refused claim)
                    refused = cast(StoreError, expected)
                    turn.answers.append((request, None, refused))
                    if request.release is not None:
                        turn.answers.append((request.release, None, refused))
                continue
            assert isinstance(request, OwnershipRequest)
            operation = request.operation
            if operation == "claim":
                self._claim(db, request, rows, turn, now)
            elif operation == "renew":
                self._renew(db, request, rows, turn, now)
            elif operation == "release":
                if request.with_append is None:  # else: with its append (release_after)
                    self._release(db, request, rows, turn)
            elif operation == "drain":
                self._drain(db, request, rows, turn, now)
            else:
                self._claim_runnable(db, request, rows, turn, now)
        if extend is not None:
            self._extend(db, extend, turn, now)
        return turn

    def release_after(
        self, db: sqlite3.Cursor, turn: ClaimTurn, outcomes: Sequence[object]
    ) -> None:
        """Inside the transaction, once its appends are planned and written (``outcomes``:
        theirs, in the order of ``turn.appends``): give up the claims whose release goes
        with an append that passed the fence and was written; a release whose append was
        not written is answered with the append's error, and its claim stays held."""
        for i in turn.releasing or ():
            request = turn.appends[i]
            release = request.release
            assert isinstance(release, OwnershipRequest)
            outcome = outcomes[i]
            if isinstance(outcome, StoreError):
                turn.answers.append((release, None, outcome))
                continue
            run_id = request.run_id
            epoch = release.claims[0].epoch
            held = turn.epochs[run_id] if run_id in turn.epochs else self.epochs.get(run_id)
            if held != epoch:  # the append passed the fence under another claim
                turn.answers.append((release, None, _not_held(run_id)))
                continue
            # The append checked this epoch in this transaction: the row is the claim's.
            db.execute(_RELEASE, (run_id,))
            turn.epochs[run_id] = None  # the store no longer holds it: no fence
            turn.answers.append((release, None, None))

    def apply(self, turn: ClaimTurn) -> None:
        """After COMMIT: the store holds the new epochs; the requests get their answers."""
        epochs, leases = self.epochs, self.leases
        for run_id, epoch in turn.epochs.items():
            if epoch is None:
                epochs.pop(run_id, None)
            else:
                epochs[run_id] = epoch
            if type(epoch) is not int:
                leases.pop(run_id, None)
        if turn.leases:  # most transactions start no lease
            started: list[tuple[str, int]] = []
            for run_id, lease in turn.leases.items():
                epoch = epochs.get(run_id)
                if type(epoch) is int:
                    leases[run_id] = lease
                    started.append((run_id, epoch))
            if started and self.watchers:
                self.confirmed.append((started, turn.since))
        for request, result, error in turn.answers:
            request.result = result
            request.error = error

    # -- the operations, inside the transaction ---------------------------------------------

    def _extend(
        self,
        db: sqlite3.Cursor,
        extend: dict[str, tuple[float, int]],
        turn: ClaimTurn,
        now: float,
    ) -> None:
        """Extend the leases that the transaction's appends confirmed (run_id -> (lease,
        the epoch the append found)), in one statement per lease length (one, usually),
        but not a claim released or claimed anew later in the same transaction."""
        by_lease: dict[float, list[str]] = {}
        for run_id, (lease, epoch) in extend.items():
            final = turn.epochs[run_id] if run_id in turn.epochs else self.epochs.get(run_id)
            if final == epoch:
                by_lease.setdefault(lease, []).append(run_id)
        for lease, run_ids in by_lease.items():
            db.execute(_EXTEND, (now + lease, json.dumps(run_ids)))

    def _rows(
        self, db: sqlite3.Cursor, requests: Sequence[Request], *, appends: bool
    ) -> dict[str, list[Any]]:
        """The claims rows the batch's requests name (those of its fenced appends only if
        ``appends``): run_id -> [owner, expires, epoch]."""
        epochs = self.epochs
        ids: set[str] = set()
        for request in requests:
            if type(request) is AppendRequest:
                if appends and request.run_id in epochs:
                    ids.add(request.run_id)
            elif type(request) is OwnershipRequest and request.with_append is None:
                if request.operation in ("renew", "release", "drain"):
                    ids.update(claim.run_id for claim in request.claims)
                elif request.operation == "claim":
                    ids.add(request.run_id)
        rows: dict[str, list[Any]] = {}
        if ids:  # else none to read (the usual transaction: appends, the file unchanged)
            # One run (a start's claim): read by its key, with no JSON array made and walked.
            found = (
                db.execute(_SELECT_ONE, (next(iter(ids)),))
                if len(ids) == 1
                else db.execute(_SELECT, (json.dumps(list(ids)),))
            )
            for run_id, owner, expires, epoch in found:
                rows[run_id] = [owner, expires, epoch]
        return rows

    def _claim(
        self,
        db: sqlite3.Cursor,
        request: OwnershipRequest,
        rows: dict[str, list[Any]],
        turn: ClaimTurn,
        now: float,
    ) -> None:
        run_id, owner = request.run_id, request.owner
        row = rows.get(run_id)
        if row is not None and row[0] not in (None, owner) and row[1] >= now:
            refused = RunOwnedError(run_id, row[0], row[1])
            turn.answers.append((request, None, refused))
            if request.fence:
                turn.epochs[run_id] = refused
            return
        epoch = 1 if row is None else row[2] + 1
        expires = now + request.lease
        rows[run_id] = [owner, expires, epoch]
        db.execute(_UPSERT, (run_id, owner, expires, epoch))
        turn.epochs[run_id] = epoch
        turn.started(run_id, request.lease, now)
        turn.answers.append((request, Claim(run_id, owner, epoch, expires), None))

    def _renew(
        self,
        db: sqlite3.Cursor,
        request: OwnershipRequest,
        rows: dict[str, list[Any]],
        turn: ClaimTurn,
        now: float,
    ) -> None:
        expires = now + request.lease
        answers: list[Claim | None] = []
        for claim in request.claims:
            row = rows.get(claim.run_id)
            if _holds(row, claim):
                row[1] = expires
                db.execute(_RENEW, (expires, claim.run_id))
                turn.started(claim.run_id, request.lease, now)
                answers.append(Claim(claim.run_id, claim.owner, claim.epoch, expires))
            else:
                answers.append(None)
        turn.answers.append((request, answers, None))

    def _release(
        self,
        db: sqlite3.Cursor,
        request: OwnershipRequest,
        rows: dict[str, list[Any]],
        turn: ClaimTurn,
    ) -> None:
        claim = request.claims[0]
        run_id = claim.run_id
        row = rows.get(run_id)
        held = turn.epochs[run_id] if run_id in turn.epochs else self.epochs.get(run_id)
        if _holds(row, claim):
            row[0] = row[1] = None
            db.execute(_RELEASE, (run_id,))
            if held == claim.epoch:
                turn.epochs[run_id] = None  # the store no longer holds it: no fence
        elif held == claim.epoch:
            # Taken over: giving the lost claim up does not lift the fence.
            found, owner = (0, None) if row is None else (row[2], row[0])
            turn.epochs[run_id] = LeaseLostError(run_id, claim.epoch, found, owner)
        turn.answers.append((request, None, None))

    def _drain(
        self,
        db: sqlite3.Cursor,
        request: OwnershipRequest,
        rows: dict[str, list[Any]],
        turn: ClaimTurn,
        now: float,
    ) -> None:
        claim = request.claims[0]
        marked = _holds(rows.get(claim.run_id), claim)
        if marked:
            since = None if request.draining is None else now
            db.execute(_DRAIN, (request.draining, since, claim.run_id))
        turn.answers.append((request, marked, None))

    def _claim_runnable(
        self,
        db: sqlite3.Cursor,
        request: OwnershipRequest,
        rows: dict[str, list[Any]],
        turn: ClaimTurn,
        now: float,
    ) -> None:
        expires = now + request.lease
        claims = [
            Claim(run_id, request.owner, epoch + 1, expires)
            for run_id, epoch in db.execute(
                _RUNNABLE, (now, request.exclude, request.limit)
            ).fetchall()
        ]
        db.executemany(_UPSERT, [(c.run_id, c.owner, c.expires, c.epoch) for c in claims])
        for claim in claims:
            rows[claim.run_id] = [claim.owner, claim.expires, claim.epoch]
            turn.epochs[claim.run_id] = claim.epoch
            turn.started(claim.run_id, request.lease, now)
        turn.answers.append((request, claims, None))


def _not_held(run_id: str) -> StoreError:
    return StoreError(f"run {run_id}: its claim is not held here at its epoch: not released")


def _holds(row: list[Any] | None, claim: Claim) -> TypeGuard[list[Any]]:
    """Whether the claims row (owner, expires, epoch) is still ``claim``'s."""
    return row is not None and row[2] == claim.epoch and row[0] == claim.owner
