"""A new run waits for the store's room before anything of it is made (Runtime.start)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from eventstore import PostgresEventStore, SqliteEventStore, StoreClosedError
from runtime import Runtime

from ..pgsupport import full_writer, pg_url, schema_prefix
from .fast_path_support import GRAPH, OWNERSHIP, RUN, Gated

pytestmark = pytest.mark.anyio


class _Room:
    """Stands for a full writer: no room (``has_room``) and ``wait_for_room`` waits until
    ``free`` is set."""

    def __init__(self) -> None:
        self.asked = anyio.Event()
        self.free = anyio.Event()

    async def wait_for_room(self) -> None:
        self.asked.set()
        await self.free.wait()


def _gated_room(monkeypatch: pytest.MonkeyPatch) -> _Room:
    """A SQLite store's room, as ``_Room`` gates it (no room until ``free`` is set)."""
    room = _Room()
    monkeypatch.setattr(SqliteEventStore, "has_room", lambda self: room.free.is_set())
    monkeypatch.setattr(SqliteEventStore, "wait_for_room", lambda self: room.wait_for_room())
    return room


async def test_a_start_waits_for_the_stores_room_holding_nothing_of_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    room = _gated_room(monkeypatch)
    gated = Gated(None)
    async with SqliteEventStore(tmp_path / "s.db") as store:
        async with Runtime(store, functions=gated.functions(), ownership=OWNERSHIP) as rt:
            handles = []

            async def start() -> None:
                handles.append(await rt.start(GRAPH, run_id=RUN))

            async with anyio.create_task_group() as tg:
                tg.start_soon(start)
                with anyio.fail_after(10):
                    await room.asked.wait()
                # Waiting: no run live here, nothing stored, no claim taken.
                assert rt._running.live.get(RUN) is None
                assert await store.get_run(RUN) is None
                assert RUN not in rt._running.ownership.claims  # type: ignore[union-attr]
                room.free.set()
            result = await handles[0].result()
    assert (result.status, result.path, gated.ran) == ("completed", ["a", "b", "c"], list("abc"))


async def test_a_start_cancelled_while_it_waits_for_room_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    room = _gated_room(monkeypatch)
    gated = Gated(None)
    async with SqliteEventStore(tmp_path / "s.db") as store:
        async with Runtime(store, functions=gated.functions(), ownership=OWNERSHIP) as rt:
            with anyio.move_on_after(5) as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(rt.start, GRAPH)
                    with anyio.fail_after(3):
                        await room.asked.wait()
                    tg.cancel_scope.cancel()
            assert not scope.cancelled_caught
            assert await store.list_runs() == []
            assert len(rt._running.live) == 0
    assert gated.ran == []


async def test_the_sqlite_stores_room_is_there_at_once_when_its_writer_has_room(
    tmp_path: Path,
) -> None:
    async with SqliteEventStore(tmp_path / "s.db") as store:
        assert store.has_room()
        with anyio.fail_after(5):
            await store.wait_for_room()
    with pytest.raises(StoreClosedError):
        store.has_room()  # as wait_for_room: only an open store has room


@pytest.fixture
def pg_schema() -> Iterator[str]:
    for prefix in schema_prefix():  # dropped once the test is done
        yield f"{prefix}_start"


async def test_on_postgresql_a_start_waits_while_the_writer_is_full(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real full writer (its commit stalled on a lock, its queue filled); the store's own
    # wait_for_room, spied on only to know the start has reached it.
    asked = anyio.Event()
    wait_for_room = PostgresEventStore.wait_for_room

    async def spied(self: PostgresEventStore) -> None:
        asked.set()
        await wait_for_room(self)

    monkeypatch.setattr(PostgresEventStore, "wait_for_room", spied)
    gated = Gated(None)
    handles = []
    async with PostgresEventStore(pg_url(), schema=pg_schema, max_batch=512) as store:
        async with Runtime(store, functions=gated.functions(), ownership=OWNERSHIP) as rt:

            async def start() -> None:
                handles.append(await rt.start(GRAPH, run_id=RUN))

            async with anyio.create_task_group() as tg:
                async with full_writer(store):
                    tg.start_soon(start)
                    with anyio.fail_after(10):
                        await asked.wait()
                    # Waiting: no run live here, nothing stored, no claim taken.
                    assert rt._running.live.get(RUN) is None
                    assert await store.get_run(RUN) is None
                    assert await store.heads([RUN]) == {}
                    assert RUN not in rt._running.ownership.claims  # type: ignore[union-attr]
                    assert handles == []
            result = await handles[0].result()
    assert (result.status, result.path, gated.ran) == ("completed", ["a", "b", "c"], list("abc"))


class _Unpaced:
    """A SQLite store seen without ``has_room`` and ``wait_for_room``: every other name
    is the store's own."""

    def __init__(self, store: SqliteEventStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        if name in ("has_room", "wait_for_room"):
            raise AttributeError(name)
        return getattr(self._store, name)


@pytest.mark.parametrize("backend", ["memory", "store"])
async def test_a_start_on_a_store_without_room_to_wait_for_does_not_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    room = _gated_room(monkeypatch)  # a SQLite store's room would never come
    gated = Gated(None)
    async with SqliteEventStore(tmp_path / "s.db") as sqlite:
        store = None if backend == "memory" else _Unpaced(sqlite)
        async with Runtime(store, functions=gated.functions()) as rt:  # type: ignore[arg-type]
            with anyio.fail_after(10):
                result = await (await rt.start(GRAPH, run_id=RUN)).result()
        assert not room.asked.is_set()
        if backend == "store":
            assert (await sqlite.get_run(RUN)) is not None
    assert (result.status, gated.ran) == ("completed", list("abc"))
