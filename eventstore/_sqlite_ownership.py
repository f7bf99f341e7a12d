"""Run ownership in a SQLite store (see eventstore.ClaimingStore; leases on this
machine's clock): the store's claim, renew and release requests, handed to its writer."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._claims import Claim
from ._errors import StoreClosedError
from ._sqlite_claims import OwnershipRequest, Request
from ._writer import ThreadWriter

__all__ = ["SqliteOwnership"]


class SqliteOwnership:
    """The ownership part of :class:`eventstore.SqliteEventStore`."""

    _state: str
    _writer: ThreadWriter | None
    _held: dict[str, OwnershipRequest]

    if TYPE_CHECKING:

        async def _submit(self, writer: ThreadWriter, request: Request, operation: str) -> None: ...

        async def _fetch(self, operation: str, sql: str, params: tuple[Any, ...]) -> list[Any]: ...

    # -- ownership (see eventstore.ClaimingStore; leases on this machine's clock) -----------
    # Claims live in the store's file and are written by its writer, in its transactions
    # (eventstore._sqlite_claims); each append of a run this store claimed checks the epoch.

    async def _own(self, request: OwnershipRequest) -> Any:
        writer = self._writer
        if self._state != "open" or writer is None:
            raise StoreClosedError(request.operation)
        await self._submit(writer, request, request.operation)
        return request.result

    async def claim(self, run_id: str, owner: str, *, lease: float) -> Claim:
        """Take ``run_id`` for ``owner`` for ``lease`` seconds (see ClaimingStore), in the
        writer's next transaction; from then on every append of this store to the run
        checks the claim's epoch in its transaction (LeaseLostError after a takeover)."""
        claim: Claim = await self._own(
            OwnershipRequest("claim", run_id=run_id, owner=owner, lease=lease)
        )
        return claim

    def submit_claim(
        self,
        run_id: str,
        owner: str,
        *,
        lease: float,
        on_done: Callable[[Claim | None, BaseException | None], None],
    ) -> None:
        """Claim ``run_id`` with its next append, without waiting (see :meth:`claim`).

        The claim is held until this store's next append to the run and committed in that
        append's transaction, just before it, so a new run's claim costs no transaction
        or round trip of its own. It fences the run's appends: if it is refused, they fail
        with its RunOwnedError and write nothing. ``on_done(claim, None)`` or
        ``on_done(None, error)`` is called on the event loop before the append's own
        answer (as for :meth:`submit`, it must not append to this store). A claim whose
        run is never appended to is never taken; closing the store answers it with
        StoreClosedError. Raises StoreClosedError if the store is not open.
        """
        if self._state != "open" or self._writer is None:
            raise StoreClosedError("claim")
        request = OwnershipRequest("claim", run_id=run_id, owner=owner, lease=lease, fence=True)
        request.on_done = on_done  # type: ignore[assignment]
        self._held[run_id] = request

    def submit_release(
        self, claim: Claim, on_done: Callable[[None, BaseException | None], None]
    ) -> bool:
        """:meth:`release` without waiting: queued for the writer's next transaction;
        ``on_done(None, error)`` is called on the event loop once it is committed or
        failed. Returns False, queuing nothing, when the writer is full (then use
        :meth:`release`). Raises StoreClosedError if the store is not open."""
        writer = self._writer
        if self._state != "open" or writer is None:
            raise StoreClosedError("release")
        request = OwnershipRequest("release", claims=(claim,))
        request.on_done = on_done  # type: ignore[assignment]
        return writer.submit(request)

    async def renew(self, claims: Sequence[Claim], *, lease: float) -> list[Claim | None]:
        """Extend the leases of ``claims`` in the writer's next transaction; None for each
        one lost (see ClaimingStore)."""
        if not claims:
            return []
        renewed: list[Claim | None] = await self._own(
            OwnershipRequest("renew", claims=list(claims), lease=lease)
        )
        return renewed

    async def release(self, claim: Claim) -> None:
        """Give the run up if ``claim`` still holds it (see ClaimingStore); this store's
        appends to the run are no longer fenced on it."""
        await self._own(OwnershipRequest("release", claims=(claim,)))

    async def heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """The last seq of each of ``run_ids`` the store holds (see ClaimingStore)."""
        rows = await self._fetch(
            "heads",
            "SELECT run_id, last_seq FROM runs WHERE run_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(run_ids)),),
        )
        return {str(run_id): int(seq) for run_id, seq in rows}

    async def claim_runnable(self, owner: str, *, lease: float, limit: int) -> list[Claim]:
        """Claim up to ``limit`` running runs no live lease holds (see ClaimingStore); their
        appends are fenced on the claim as with :meth:`claim`."""
        claims: list[Claim] = await self._own(
            OwnershipRequest("claim_runnable", owner=owner, lease=lease, limit=limit)
        )
        return claims
