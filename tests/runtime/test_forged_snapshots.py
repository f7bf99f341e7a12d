"""A snapshot decides nothing unless the chained log binds it: an edited or inserted
snapshot row is ignored by ``get_state`` and ``resume``, and ``verify`` reports it, on a
real SQLite file and on PostgreSQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest

from eventstore import Snapshot, SnapshotAfter, SnapshotTaken, SqliteEventStore, binds
from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime
from runtime.events import fold
from runtime.events._catalogue import NodeStarted
from runtime.events._snapshots import FOLD_VERSION, SNAPSHOT_EVERY, encode_state
from runtime.reads import RunReader
from tests.pgsupport import PG_URL, drop_schemas, fresh_prefix, pg_url

pytestmark = pytest.mark.anyio

STEPS = SNAPSHOT_EVERY // 3  # a step writes ~5 events: the run crosses a snapshot
paid: list[Any] = []


def count(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"n": int(inputs.get("n", 0)) + 1}


def pay(inputs: dict[str, Any]) -> dict[str, Any]:
    paid.append(inputs["amount"])
    return {"paid": inputs["amount"]}


FUNCTIONS = {"count": count, "pay": pay}


def payment_graph() -> GraphSpec:
    """Counts past a snapshot, then pauses before the payment node."""
    return GraphSpec(
        id="payment",
        nodes=[
            NodeSpec(id="count", kind="function", function="count"),
            NodeSpec(id="pay", kind="function", function="pay"),
        ],
        edges=[
            EdgeSpec(
                source="count", target="count", condition="conditional", expression=f"n < {STEPS}"
            ),
            EdgeSpec(source="count", target="pay", condition="always"),
        ],
        entry_node="count",
        pause_nodes=["pay"],
        terminal_nodes=["pay"],
        max_steps=STEPS + 10,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    url = pg_url()
    prefix = fresh_prefix()
    try:
        yield f"{url}?schema={prefix}_store"
    finally:
        drop_schemas(prefix)


def execute(store_url: str, sql: str, params: tuple[Any, ...]) -> None:
    """Run one statement on the store's database, outside the store."""
    if store_url.startswith("postgresql"):
        schema = store_url.split("schema=")[1]
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {schema}")
            conn.execute(sql.replace("?", "%s"), params)
        return
    conn = sqlite3.connect(store_url)
    try:
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


def forged(data: bytes) -> bytes:
    state = msgspec.json.decode(data)
    assert state["memory"]["amount"] == 100
    state["memory"]["amount"] = 999999
    return msgspec.json.encode(state)


async def paused_payment(store_url: str) -> tuple[str, Snapshot]:
    """A payment run paused before ``pay`` with a bound snapshot; the snapshot."""
    async with Runtime(store_url, functions=FUNCTIONS) as rt:
        assert rt.store is not None
        handle = await rt.start(payment_graph(), input={"amount": 100})
        result = await handle.result()
        assert result.status == "paused" and result.resume_at == ["pay"]
        snapshot = await rt.store.load_snapshot(handle.run_id)
        assert snapshot is not None and snapshot.version == FOLD_VERSION
        events = await rt.read_events(handle.run_id)
        # The owner's snapshot is bound by the snapshot.taken event at its seq.
        taken = events[snapshot.seq - 1]
        assert isinstance(taken.body, SnapshotTaken)
        assert binds(taken, snapshot.seq, snapshot.hash, snapshot.version, snapshot.data)
        assert (await RunReader(rt.store).verify(handle.run_id)).ok
        # The taken event only counts: the state is otherwise the log's without it.
        plain = [e for e in events if not isinstance(e.body, SnapshotTaken)]
        taken_events = len(events) - len(plain)
        assert taken_events >= 1
        assert fold(events).event_counts == {
            **fold(plain).event_counts,
            "snapshot.taken": taken_events,
        }
        assert msgspec.structs.replace(
            fold(plain), event_counts={}, last_seq=0, last_hash="", last_position=0
        ) == msgspec.structs.replace(
            fold(events), event_counts={}, last_seq=0, last_hash="", last_position=0
        )
    return handle.run_id, snapshot


async def test_an_edited_snapshot_decides_nothing(store_url: str) -> None:
    run_id, snapshot = await paused_payment(store_url)
    # Memory changed; seq, hash and version kept.
    execute(
        store_url,
        "UPDATE snapshots SET data = ? WHERE seq = ?",
        (forged(snapshot.data), snapshot.seq),
    )
    paid.clear()
    async with Runtime(store_url, functions=FUNCTIONS) as rt:
        assert rt.store is not None
        stored = await rt.store.load_snapshot(run_id)
        assert stored is not None and stored.data != snapshot.data
        assert (stored.seq, stored.hash, stored.version) == (
            snapshot.seq,
            snapshot.hash,
            snapshot.version,
        )
        state = await rt.get_state(run_id)
        assert state.memory["amount"] == 100
        assert state == fold(await rt.read_events(run_id))
        report = await RunReader(rt.store).verify(run_id)
        assert not report.ok and report.broken_at == snapshot.seq
        assert report.reason is not None and "not bound to the log" in report.reason
        approved = await rt.approve(run_id, by="ann")
        assert approved is not None
        result = await approved.result()
    assert result.status == "completed"
    assert paid == [100]


async def test_an_inserted_snapshot_row_without_its_event_is_ignored(store_url: str) -> None:
    run_id, snapshot = await paused_payment(store_url)
    async with Runtime(store_url, functions=FUNCTIONS) as rt:
        assert rt.store is not None
        events = await rt.read_events(run_id)
    # The owner's snapshot is at the run's last event (taken as it paused): in its place,
    # a row at the event before (a real hash, this fold's version) that binds nothing.
    assert snapshot.seq == events[-1].seq
    last = events[-2]
    wrong = fold(events)
    wrong.memory["amount"] = 999999
    execute(store_url, "DELETE FROM snapshots", ())
    if store_url.startswith("postgresql"):
        execute(
            store_url,
            "INSERT INTO snapshots (run_id, seq, hash, version, data) VALUES (?, ?, ?, ?, ?)",
            (run_id, last.seq, last.hash, FOLD_VERSION, encode_state(wrong)),
        )
    else:
        execute(
            store_url,
            "INSERT INTO snapshots (run, seq, hash, version, data) "
            "SELECT run, ?, ?, ?, ? FROM runs WHERE run_id = ?",
            (last.seq, bytes.fromhex(last.hash), FOLD_VERSION, encode_state(wrong), run_id),
        )
    paid.clear()
    async with Runtime(store_url, functions=FUNCTIONS) as rt:
        assert rt.store is not None
        stored = await rt.store.load_snapshot(run_id)
        assert stored is not None and stored.seq == last.seq
        state = await rt.get_state(run_id)
        assert state.memory["amount"] == 100 and state == fold(events)
        report = await RunReader(rt.store).verify(run_id)
        assert not report.ok and report.broken_at == last.seq
        approved = await rt.approve(run_id, by="ann")
        assert approved is not None
        result = await approved.result()
    assert result.status == "completed"
    assert paid == [100]


async def test_a_time_travel_read_to_the_snapshot_event_does_not_trust_it(
    tmp_path: Path,
) -> None:
    # Read to exactly the taken event, no later event checks its hash: the log is folded.
    path = str(tmp_path / "runs.db")
    run_id, snapshot = await paused_payment(path)
    execute(
        path, "UPDATE snapshots SET data = ? WHERE seq = ?", (forged(snapshot.data), snapshot.seq)
    )
    async with Runtime(path, functions=FUNCTIONS) as rt:
        state = await rt.get_state(run_id, at_seq=snapshot.seq)
        assert state.memory["amount"] == 100
        assert state == fold(await rt.read_events(run_id, to_seq=snapshot.seq))


async def test_a_snapshot_handed_over_without_its_bound_event_is_refused(
    tmp_path: Path,
) -> None:
    data = b'{"memory": {}}'
    async with SqliteEventStore(tmp_path / "runs.db") as store:
        await store.append("r", [NodeStarted(node_id="a", visit=1)], expected_seq=0)
        unbound = [
            # No snapshot.taken at all.
            [NodeStarted(node_id="a", visit=2)],
            # A digest of other bytes.
            [SnapshotTaken(digest="00" * 32, version=FOLD_VERSION)],
            # Another version than the snapshot's.
            [SnapshotTaken(digest=SnapshotTaken.__name__, version="other")],
        ]
        for bodies in unbound:
            with pytest.raises(ValueError, match=r"snapshot\.taken"):
                await store.append(
                    "r",
                    bodies,
                    expected_seq=1,
                    snapshot=SnapshotAfter(1, FOLD_VERSION, data),
                )
        assert len(await store.read_all("r")) == 1
        assert await store.load_snapshot("r") is None
