"""Run ownership: who executes a run, until when, and under which claim epoch.

A run being executed has one owner. Its claim is recorded in the store (owner id, lease
expiry on the store's clock, claim epoch) and renewed while the run is live; a claim is
taken atomically and only when the run has no owner or the owner's lease expired. Every
claim raises the run's epoch by one, so an owner whose claim was taken over can tell (and,
on PostgreSQL, its appends are refused in the append transaction itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

__all__ = ["Claim", "ClaimingStore"]


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

    async def renew(self, claims: Sequence[Claim], *, lease: float) -> list[Claim | None]:
        """Extend each claim's lease by ``lease`` seconds from now, on a connection of its
        own; ``None`` in the answer for a claim that was lost (taken over or released)."""
        ...

    async def release(self, claim: Claim) -> None:
        """Give the run up (owner and lease cleared) if ``claim`` still holds it."""
        ...

    async def heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """The last seq in the store of each of ``run_ids`` that has events (one query)."""
        ...

    async def claim_runnable(self, owner: str, *, lease: float, limit: int) -> list[Claim]:
        """Claim up to ``limit`` runnable runs that no live lease holds: runs whose status
        is ``running`` (a crashed owner's, one submitted for any worker, or one resumed for
        any worker) and whose owner's lease expired or who has none, oldest first.
        Concurrent claimers never get the same run."""
        ...
