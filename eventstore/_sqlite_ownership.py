"""Run ownership in a SQLite store (see eventstore.ClaimingStore; leases on this
machine's clock): the store's claim, renew and release requests, handed to its writer.

Claims live in the store's file and are written by its writer, in its transactions
(eventstore._sqlite_claims); each append of a run this store claimed checks the epoch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from ._claims import Claim
from ._sqlite_read import SqliteReader
from ._sqlite_turn import OwnershipRequest
from ._writer import ThreadWriter

__all__ = ["SqliteOwnership"]


class SqliteOwnership:
    """The claims of a SQLite store, made by its writer and read on its read connection.

    ``open_writer(operation)`` is the store's writer while it is open (StoreClosedError
    otherwise).
    """

    __slots__ = ("_open_writer", "_reader")

    def __init__(self, open_writer: Callable[[str], ThreadWriter], reader: SqliteReader) -> None:
        self._open_writer = open_writer
        self._reader = reader

    async def _own(self, request: OwnershipRequest) -> Any:
        """Queue ``request`` (never refused for space: the writer takes ownership requests
        beyond its appends' capacity), wait for its answer; raise its error."""
        operation = request.operation
        writer = self._open_writer(operation)
        while not writer.submit(request):
            await writer.wait_for_space()  # backpressure: the writer is full
            self._open_writer(operation)
        await request.wait()
        if request.error is not None:
            raise request.error
        return request.result

    async def claim(self, run_id: str, owner: str, *, lease: float) -> Claim:
        """See :meth:`SqliteEventStore.claim`."""
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
    ) -> bool:
        """See :meth:`SqliteEventStore.submit_claim`."""
        writer = self._open_writer("claim")
        request = OwnershipRequest("claim", run_id=run_id, owner=owner, lease=lease, fence=True)
        request.on_done = on_done  # type: ignore[assignment]
        writer.hold(request)
        return True

    def submit_release(
        self,
        claim: Claim,
        on_done: Callable[[None, BaseException | None], None],
        *,
        with_append: int | None = None,
    ) -> bool:
        """See :meth:`SqliteEventStore.submit_release`."""
        writer = self._open_writer("release")
        request = OwnershipRequest("release", claims=(claim,), with_append=with_append)
        request.on_done = on_done  # type: ignore[assignment]
        if with_append is None:
            return writer.submit(request)
        writer.hold_release(request)
        return True

    async def renew(self, claims: Sequence[Claim], *, lease: float) -> list[Claim | None]:
        """See :meth:`SqliteEventStore.renew`."""
        if not claims:
            return []
        renewed: list[Claim | None] = await self._own(
            OwnershipRequest("renew", claims=list(claims), lease=lease)
        )
        return renewed

    async def release(self, claim: Claim) -> None:
        """See :meth:`SqliteEventStore.release`."""
        await self._own(OwnershipRequest("release", claims=(claim,)))

    async def mark_draining(self, claim: Claim, nodes: str | None) -> bool:
        """See :meth:`SqliteEventStore.mark_draining`."""
        marked: bool = await self._own(OwnershipRequest("drain", claims=(claim,), draining=nodes))
        return marked

    async def heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """See :meth:`SqliteEventStore.heads`."""
        rows = await self._reader.fetch(
            "heads",
            "SELECT run_id, last_seq FROM runs WHERE run_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(run_ids)),),
        )
        return {str(run_id): int(seq) for run_id, seq in rows}

    async def claim_runnable(
        self, owner: str, *, lease: float, limit: int, exclude: Collection[str] = ()
    ) -> list[Claim]:
        """See :meth:`SqliteEventStore.claim_runnable`."""
        claims: list[Claim] = await self._own(
            OwnershipRequest(
                "claim_runnable", owner=owner, lease=lease, limit=limit, exclude=exclude
            )
        )
        return claims
