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

The fence walks each transaction's requests here; the requests, and what each does inside
the transaction, are eventstore._sqlite_turn's.
"""

from __future__ import annotations

import sqlite3
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import cast

from . import _sqlite_turn as ops
from ._errors import LeaseLostError, StoreError
from ._requests import AppendRequest
from ._sqlite_turn import ClaimTurn, OwnershipRequest, Request

__all__ = ["LEAN", "PLAIN", "WALK", "ClaimFence"]

_DATA_VERSION = "PRAGMA data_version"

#: How a batch goes through the fence (ClaimFence.sort).
PLAIN, LEAN, WALK = 0, 1, 2


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

    def sort(self, requests: Sequence[Request]) -> int:
        """How a batch goes through the fence: PLAIN (appends only, of runs the store holds
        no claim on: no fence), LEAN (appends only, with the releases going with them, each
        of a run held at an epoch or, with no release, of one not held) or WALK (anything
        else: ownership requests, runs fenced on an error)."""
        epochs = self.epochs
        shape = PLAIN
        for request in requests:
            if type(request) is AppendRequest:
                epoch = epochs.get(request.run_id)
                if type(epoch) is int:
                    shape = LEAN
                elif epoch is not None or request.release is not None:
                    return WALK  # fenced on an error, or a release with no claim held
            elif cast(OwnershipRequest, request).with_append is None:
                return WALK  # an ownership request of its own
            # else a release going with its append, which is sorted itself
        return shape

    def walk(self, db: sqlite3.Cursor, requests: Sequence[Request], shape: int) -> ClaimTurn | None:
        """Inside the transaction (on ``db``, the writer's cursor): do the ownership requests
        and check the fenced appends, in the order of ``requests`` (sorted as ``shape``,
        LEAN or WALK). Writes the claims rows; answers nothing (see apply). None for a LEAN
        batch that asks nothing of the claims table (see _lean): all of it goes through."""
        since = time.monotonic()  # first: the leases the turn starts run from no earlier
        now = time.time()
        version = db.execute(_DATA_VERSION).fetchone()[0]
        # Nobody else committed since this store's last transaction: the epochs it holds
        # are the file's, and its appends need no reading of their claims rows.
        trusted = version == self._version
        if trusted and shape == LEAN:
            return self._lean(db, requests, now, since)
        self._version = version
        epochs = self.epochs
        turn = ClaimTurn([], since)
        changes = turn.epochs
        rows = ops.rows_named(db, requests, epochs, not trusted)
        leases, extending = self.leases, None
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
                            extending = extending or {}
                            extending[run_id] = (held[0], expected)
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
                        turn.answers.append((request.release, None, ops.not_held(run_id)))
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
                ops.claim(db, request, rows, turn, now)
            elif operation == "renew":
                ops.renew(db, request, rows, turn, now)
            elif operation == "release":
                if request.with_append is None:  # else: with its append (release_after)
                    ops.release(db, request, rows, turn, epochs)
            elif operation == "drain":
                ops.drain(db, request, rows, turn, now)
            else:
                ops.claim_runnable(db, request, rows, turn, now)
        if extending is not None:
            ops.extend(db, extending, turn, epochs, now)
        return turn

    def _lean(
        self, db: sqlite3.Cursor, requests: Sequence[Request], now: float, since: float
    ) -> ClaimTurn | None:
        """The turn of a LEAN batch (see sort), the file unchanged since the store's last
        transaction: the claims table holds what the store's own transactions left there,
        so every append passes the fence, and only the leases due are extended. None when
        no lease is due and no release goes with an append (the usual transaction)."""
        leases = self.leases  # those of the runs held at an epoch only
        for request in requests:
            if type(request) is not AppendRequest or request.release is not None:
                break
            held = leases.get(request.run_id)
            if held is not None and now >= held[1]:
                break
        else:
            return None
        appends: list[AppendRequest] = []
        releasing: list[int] | None = None
        extending: dict[str, tuple[float, int]] | None = None
        for request in requests:
            if type(request) is not AppendRequest:
                continue  # a release going with its append (release_after)
            if request.release is not None:
                releasing = releasing or []
                releasing.append(len(appends))
            held = leases.get(request.run_id)
            if held is not None and now >= held[1]:  # confirmed by the append
                extending = extending or {}
                extending[request.run_id] = (held[0], cast(int, self.epochs[request.run_id]))
            appends.append(request)
        turn = ClaimTurn(appends, since)
        turn.releasing = releasing
        if extending is not None:
            for run_id, (lease, _) in extending.items():
                turn.started(run_id, lease, now)
            ops.extend(db, extending, turn, self.epochs, now)
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
            if turn.held(run_id, self.epochs) != release.claims[0].epoch:
                # The append passed the fence under another claim.
                turn.answers.append((release, None, ops.not_held(run_id)))
                continue
            # The append checked this epoch in this transaction: the row is the claim's.
            db.execute(ops.RELEASE, (run_id,))
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
