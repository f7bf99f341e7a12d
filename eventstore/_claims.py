"""Run ownership: who executes a run, until when, and under which claim epoch.

A run being executed has one owner. Its claim is recorded in the store (owner id, lease
expiry on the store's clock, claim epoch) and renewed while the run is live; a claim is
taken atomically and only when the run has no owner or the owner's lease expired. Every
claim raises the run's epoch by one, so an owner whose claim was taken over can tell (and,
on PostgreSQL, its appends are refused in the append transaction itself).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol, runtime_checkable

import anyio
import msgspec

__all__ = ["Claim", "ClaimingStore", "LeaseConfirmingStore", "NotifyingStore"]


class Claim(msgspec.Struct, frozen=True):
    """``owner`` holds ``run_id`` at ``epoch`` until ``expires`` (seconds since the Unix
    epoch, on the store's clock) unless it renews the lease."""

    run_id: str
    owner: str
    epoch: int
    expires: float


@runtime_checkable
class ClaimingStore(Protocol):
    """A store that records run ownership (both built-in stores do)."""

    async def claim(self, run_id: str, owner: str, *, lease: float) -> Claim:
        """Take ``run_id`` for ``owner`` for ``lease`` seconds, atomically.

        Succeeds when the run has no owner, ``owner`` holds it already, or its owner's
        lease expired; a run not yet in the store is recorded (status ``new``, no events).
        Raises RunOwnedError naming the owner otherwise.
        """
        ...

    def submit_claim(
        self,
        run_id: str,
        owner: str,
        *,
        lease: float,
        on_done: Callable[[Claim | None, BaseException | None], None],
    ) -> bool:
        """Claim ``run_id`` (a run not yet in the store) with its next append, without
        waiting: the claim commits in that append's transaction, and a refused claim fails
        the run's appends, which write nothing. ``on_done(claim, None)`` or ``on_done(None,
        error)`` runs on the event loop before the append's own answer. Returns False,
        doing nothing, when the store cannot hold a claim for an append (then use
        :meth:`claim`). Raises StoreClosedError if the store is not open."""
        ...

    def submit_release(
        self,
        claim: Claim,
        on_done: Callable[[None, BaseException | None], None],
        *,
        with_append: int | None = None,
    ) -> bool:
        """:meth:`release` without waiting, queued with the store's next transaction;
        ``on_done(None, error)`` runs on the event loop once it is committed or failed.
        With ``with_append`` (an expected seq), it goes with the store's next append to
        the run instead, if that append is at that seq: in its transaction, after it, and
        only if it is written under the claim (else ``on_done`` gets an error and the
        claim stays held), ``on_done`` running before the append's own answer; the
        runtime asks for this for a run's final append. Returns False, doing nothing,
        when the store cannot queue it (then use :meth:`release`). Raises
        StoreClosedError if the store is not open."""
        ...

    async def renew(self, claims: Sequence[Claim], *, lease: float) -> list[Claim | None]:
        """Extend each claim's lease by ``lease`` seconds from now, on a connection of its
        own; ``None`` in the answer for a claim that was lost (taken over or released)."""
        ...

    async def release(self, claim: Claim) -> None:
        """Give the run up (owner and lease cleared) if ``claim`` still holds it. If it was
        taken over, this store's appends to the run stay fenced on it (they raise
        LeaseLostError) until it claims the run again."""
        ...

    async def mark_draining(self, claim: Claim, nodes: str | None) -> bool:
        """Mark the run ``claim`` holds as draining (``nodes``: the nodes whose abandoned
        attempts still run in the owner's process, since now on the store's clock), or
        clear the mark (None); the run listing shows it while the claim holds. False if
        ``claim`` no longer holds the run. A release or a new claim clears it."""
        ...

    async def heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """The last seq in the store of each of ``run_ids`` that has events (one query)."""
        ...

    async def claim_runnable(
        self, owner: str, *, lease: float, limit: int, exclude: Collection[str] = ()
    ) -> list[Claim]:
        """Claim up to ``limit`` runnable runs that no live lease holds: runs whose status
        is ``running`` (a crashed owner's, one submitted for any worker, or one resumed for
        any worker) and whose owner's lease expired or who has none, oldest first,
        skipping the runs named in ``exclude`` (those the claimer is not ready to take
        again, such as runs it cannot execute). Concurrent claimers never get the same
        run."""
        ...


@runtime_checkable
class LeaseConfirmingStore(Protocol):
    """A store whose appends confirm the claims they are made under (both built-in stores).

    The transaction that appends to a run under a claim this store holds (its epoch
    checked in that transaction) also extends the claim's lease when a third of it or more
    has gone since it last started, for all such runs at once: a run whose appends keep
    coming keeps its claim without renewals. The store tells who watches when it did.
    """

    def watch_leases(self, confirmed: Callable[[Sequence[tuple[str, int]], float], None]) -> None:
        """After each transaction that extended leases, call ``confirmed(claims, since)``
        on the event loop: the claims named ``(run_id, epoch)`` run a whole lease from
        ``since`` (``time.monotonic()`` of this process, no later than the transaction's
        own clock reading). A store may report the leases its claims and renewals start
        too. ``confirmed`` must be quick and must not raise."""
        ...


@runtime_checkable
class NotifyingStore(Protocol):
    """A store that announces runs that may have become runnable, in this process or any
    other (PostgreSQL's, by NOTIFY); claimers wait on the announcement instead of only
    polling :meth:`ClaimingStore.claim_runnable`."""

    def runnable_signal(self) -> anyio.Event:
        """An event set when a run may have become runnable: a run submitted (appended to
        with status running, unclaimed), or a claim given up before its run ended. A hint:
        wait on it with a timeout (a lease that expires announces nothing), and take a new
        one before each look for runnable runs."""
        ...
