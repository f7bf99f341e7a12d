"""After a LeaseLostError the epoch fence stays strict: two stores on one file (or one
PostgreSQL schema), the first's lease taken over by the second, at the store API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import pytest

from eventstore import ClaimingStore, LeaseLostError, PostgresEventStore, SqliteEventStore
from runtime.events import MemoryWritten
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

pytestmark = pytest.mark.anyio

OpenStore = Callable[[], AbstractAsyncContextManager[ClaimingStore]]


def written(value: int) -> list[MemoryWritten]:
    return [MemoryWritten(key="k", value=value)]


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    if request.param == "sqlite":
        yield lambda: SqliteEventStore(tmp_path / "s.db")
        return
    url = pg_url()
    prefix = fresh_prefix()
    try:
        yield lambda: PostgresEventStore(url, schema=f"{prefix}_store")
    finally:
        drop_schemas(prefix)


async def test_a_stale_owner_stays_fenced_after_its_lease_was_lost(
    open_store: OpenStore,
) -> None:
    async with open_store() as stale, open_store() as taker:
        claim = await stale.claim("r", "stale", lease=0.2)
        await stale.append("r", written(1), expected_seq=0)
        await anyio.sleep(0.3)  # the lease runs out
        taken = await taker.claim("r", "taker", lease=30)
        assert taken.epoch == claim.epoch + 1
        await taker.append("r", written(2), expected_seq=1)
        with pytest.raises(LeaseLostError) as first:
            await stale.append("r", written(3), expected_seq=2)
        assert (first.value.expected_epoch, first.value.actual_epoch) == (1, 2)
        # Not written without a seq check, and no ConcurrencyError (naming a stale log
        # position) for the right seq: the lease is what was lost, whatever the seq.
        for expected in (None, 2, 1):
            with pytest.raises(LeaseLostError):
                await stale.append("r", written(4), expected_seq=expected)
        # Nor after the stale owner releases the claim it lost.
        await stale.release(claim)
        with pytest.raises(LeaseLostError):
            await stale.append("r", written(5), expected_seq=None)
        assert [e.body for e in await taker.read_all("r")] == [*written(1), *written(2)]
        await taker.append("r", written(6), expected_seq=2)
        # Claimed again (the taker let it go), the first store appends as its owner.
        await taker.release(taken)
        again = await stale.claim("r", "stale", lease=30)
        assert again.epoch == taken.epoch + 1
        assert (await stale.append("r", written(7), expected_seq=None)).last_seq == 4
