"""The PostgreSQL store's room for a new run (eventstore.BackpressuringStore): there while
its writer would queue a run's first append, waited for while its queue is full."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest

from eventstore import BackpressuringStore, PostgresEventStore, StoreClosedError
from runtime.events import RunStarted
from tests.pgsupport import full_writer, pg_url, schema_prefix

pytestmark = pytest.mark.anyio


@pytest.fixture
def schema() -> Iterator[str]:
    for prefix in schema_prefix():  # dropped once the test is done
        yield f"{prefix}_room"


def _started() -> list[RunStarted]:
    return [RunStarted(graph={}, graph_hash="gh", entry="a")]


def _ignore(*_answer: object) -> None:
    pass


async def test_an_idle_writer_has_room_and_a_closed_store_none(schema: str) -> None:
    store = PostgresEventStore(pg_url(), schema=schema)
    assert isinstance(store, BackpressuringStore)
    with pytest.raises(StoreClosedError):
        store.has_room()  # not yet open
    async with store:
        assert store.has_room()
        with anyio.fail_after(5):
            await store.wait_for_room()
        await store.append("r", _started(), expected_seq=0)
        assert store.has_room()
    with pytest.raises(StoreClosedError):
        store.has_room()
    with pytest.raises(StoreClosedError):
        await store.wait_for_room()


async def test_a_full_writer_has_no_room_until_it_takes_its_next_batch(schema: str) -> None:
    async with PostgresEventStore(pg_url(), schema=schema, max_batch=512) as store:
        async with full_writer(store) as answers:
            assert not store.has_room()
            waited = asyncio.ensure_future(store.wait_for_room())
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
            assert not waited.done()
            # No room is what the writer says too: it refuses a new run's first append.
            assert not store.submit("refused", _started(), expected_seq=0, on_done=_ignore)
            second = asyncio.ensure_future(store.wait_for_room())
            await anyio.lowlevel.checkpoint()
            assert not waited.done() and not second.done()
            assert answers == []
        with anyio.fail_after(10):
            await waited
            await second
        # The stalled commit went through, and the writer took its next batch off the queue.
        assert len(answers) == 1 and answers[0][1] is None
        assert store.has_room()
    assert len(answers) == store.statistics().appends
    assert all(error is None for _result, error in answers)


async def test_a_wait_for_room_ends_when_the_store_closes(schema: str) -> None:
    store = PostgresEventStore(pg_url(), schema=schema, max_batch=512)
    await store.open()
    try:
        async with full_writer(store) as answers:
            waited = asyncio.ensure_future(store.wait_for_room())
            await anyio.lowlevel.checkpoint()
            assert not waited.done()
            closing = asyncio.ensure_future(store.close())
            with anyio.fail_after(10):
                await waited  # while the writer still waits for the lock
            assert not closing.done()
        with anyio.fail_after(30):
            await closing
    finally:
        await store.close()
    # The close committed what was queued.
    assert len(answers) == store.statistics().appends
    assert all(error is None for _result, error in answers)
