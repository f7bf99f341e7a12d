"""Run ownership in a PostgreSQL store (see eventstore.ClaimingStore; leases on the
server's clock): claims on a connection of their own, and the claim epochs the writer
fences each append on."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from . import _postgres_claims as claims_sql
from ._claims import Claim
from ._postgres_read import Fetch
from ._postgres_schema import check_text
from ._postgres_writer import Connection, PostgresWriter
from ._requests import HeldRelease

__all__ = ["PostgresOwnership"]


class PostgresOwnership:
    """The claims of a PostgreSQL store. ``writer()`` is the store's writer (None before
    open), whose ``epochs`` fence the appends of the runs claimed here; ``fetch`` the
    store's one-query reads; ``runnable_channel`` the NOTIFY channel of a release."""

    __slots__ = ("_fetch", "_runnable_channel", "_writer", "leases", "watchers")

    def __init__(
        self,
        connect: Callable[[], Awaitable[Connection]],
        where: str,
        is_open: Callable[[], bool],
        writer: Callable[[], PostgresWriter | None],
        fetch: Fetch,
        runnable_channel: str,
    ) -> None:
        #: Claims and renewals have a connection of their own, never queued behind appends.
        self.leases = claims_sql.LeaseConnection(connect, where, is_open)
        self._writer = writer
        self._fetch = fetch
        self._runnable_channel = runnable_channel
        #: Told of the leases the writer's appends extend (LeaseConfirmingStore).
        self.watchers: list[Callable[[Sequence[tuple[str, int]], float], None]] = []

    def _fence(self, claims: Sequence[Claim], lease: float, asked: float) -> None:
        """The writer fences the appends of ``claims`` on their epochs, and its appends
        extend their leases (asked at ``asked`` on this process's monotonic clock)."""
        writer = self._writer()
        if writer is not None:
            for claim in claims:
                writer.epochs[claim.run_id] = claim.epoch
                writer.leases[claim.run_id] = (lease, asked + lease / 3)

    async def claim(self, run_id: str, owner: str, *, lease: float) -> Claim:
        """See :meth:`PostgresEventStore.claim`."""
        check_text("claim", "the run id", run_id)
        check_text("claim", "the owner", owner)
        asked = time.monotonic()
        claim: Claim = await self.leases.call(
            "claim", lambda conn: claims_sql.claim(conn, run_id, owner, lease)
        )
        self._fence((claim,), lease, asked)
        return claim

    async def renew(self, claims: Sequence[Claim], *, lease: float) -> list[Claim | None]:
        """See :meth:`PostgresEventStore.renew`."""
        if not claims:
            return []
        owners = {claim.owner for claim in claims}
        asked = time.monotonic()
        answers: dict[tuple[str, int], Claim | None] = {}
        for owner in owners:
            mine = [claim for claim in claims if claim.owner == owner]

            def call(conn: Connection, owner: str = owner, mine: list[Claim] = mine) -> Any:
                return claims_sql.renew(conn, mine, owner, lease)

            renewed: list[Claim | None] = await self.leases.call("renew", call, again=True)
            for claim, answer in zip(mine, renewed, strict=True):
                answers[claim.run_id, claim.epoch] = answer
        writer = self._writer()
        if writer is not None:  # the writer's appends extend them from a third on
            for claim in claims:
                if (
                    answers[claim.run_id, claim.epoch]
                    and writer.epochs.get(claim.run_id) == claim.epoch
                ):
                    writer.leases[claim.run_id] = (lease, asked + lease / 3)
        return [answers[claim.run_id, claim.epoch] for claim in claims]

    def release_with_append(
        self,
        claim: Claim,
        on_done: Callable[[None, BaseException | None], None],
        with_append: int,
    ) -> bool:
        """See :meth:`PostgresEventStore.submit_release` (``with_append``): held by the
        writer for the run's next append; False before the store opened."""
        writer = self._writer()
        if writer is None:
            return False
        release = HeldRelease(claim, with_append)
        release.on_done = on_done
        writer.hold_release(release)
        return True

    async def release(self, claim: Claim) -> None:
        """See :meth:`PostgresEventStore.release`. Releasing a claim that was taken over
        leaves the run's appends fenced on it (they raise LeaseLostError)."""
        writer = self._writer()
        if writer is not None:
            writer.drop_release(claim.run_id)  # given up on its own instead
        released: bool = await self.leases.call(
            "release",
            lambda conn: claims_sql.release(conn, claim, self._runnable_channel),
            again=True,
        )
        writer = self._writer()
        if released and writer is not None and writer.epochs.get(claim.run_id) == claim.epoch:
            del writer.epochs[claim.run_id]
            writer.leases.pop(claim.run_id, None)

    async def mark_draining(self, claim: Claim, nodes: str | None) -> bool:
        """See :meth:`PostgresEventStore.mark_draining`."""
        marked: bool = await self.leases.call(
            "mark_draining", lambda conn: claims_sql.mark_draining(conn, claim, nodes), again=True
        )
        return marked

    async def heads(self, run_ids: Sequence[str]) -> dict[str, int]:
        """See :meth:`PostgresEventStore.heads`."""
        held = [run_id for run_id in run_ids if "\x00" not in run_id]  # no stored id has NUL
        rows = await self._fetch(
            "heads",
            "SELECT run_id, last_seq FROM runs WHERE run_id = ANY(%s) AND last_seq > 0",
            (held,),
        )
        return {str(run_id): int(seq) for run_id, seq in rows}

    async def claim_runnable(
        self, owner: str, *, lease: float, limit: int, exclude: Collection[str] = ()
    ) -> list[Claim]:
        """See :meth:`PostgresEventStore.claim_runnable`."""
        check_text("claim_runnable", "the owner", owner)
        excluded = [run_id for run_id in exclude if "\x00" not in run_id]  # none is stored
        asked = time.monotonic()
        got: list[Claim] = await self.leases.call(
            "claim_runnable",
            lambda conn: claims_sql.claim_runnable(conn, owner, lease, limit, excluded),
            again=True,
        )
        self._fence(got, lease, asked)
        return got
