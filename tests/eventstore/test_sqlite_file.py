"""SQLite-specific behaviour: the file format, bad files, tampering and durability."""

from __future__ import annotations

import itertools
import os
import random
import re
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from eventstore import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    ConcurrencyError,
    CorruptLogError,
    DurabilityConfig,
    EventBody,
    NotAStoreError,
    RunQuery,
    SchemaVersionError,
    Snapshot,
    SqliteEventStore,
    UnknownEventError,
    chain_hash,
    encode_body,
    event_tag,
)
from eventstore._format import FRAME_TYPE, BodyForm, pack_frame, store_body
from eventstore._sqlite import page_statement
from runtime.events import (
    MemoryWritten,
    NodeCompleted,
    NodeStarted,
    RunFinished,
    RunForked,
    RunPaused,
    RunStarted,
)

pytestmark = pytest.mark.anyio


def started() -> RunStarted:
    return RunStarted(graph={}, graph_hash="gh", entry="a")


def make_events(steps: int = 3) -> list[EventBody]:
    events: list[EventBody] = [started()]
    for i in range(steps):
        events += [NodeStarted(node_id=f"n{i}", visit=1), NodeCompleted(node_id=f"n{i}")]
    return events


async def make_store(path: Path, steps: int = 3, *, framed: bool = False) -> None:
    """Run r1 with ``steps`` steps: one append per event (a row each), or ``framed``: all
    in one append (one row, a frame)."""
    events = make_events(steps)
    async with SqliteEventStore(path) as store:
        if framed:
            await store.append("r1", events, expected_seq=0)
            return
        for seq, event in enumerate(events):
            await store.append("r1", [event], expected_seq=seq)


def side_files(path: Path) -> list[Path]:
    return [p for p in path.parent.iterdir() if p != path]


async def test_a_new_store_is_marked_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 7
    finally:
        conn.close()


async def test_one_append_of_several_events_is_one_row_a_frame(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path, framed=True)
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT position, seq, type, version, hash FROM events").fetchall()
    finally:
        conn.close()
    assert [row[:4] for row in rows] == [(1, 1, FRAME_TYPE, 0)]
    assert len(rows[0][4]) == 7 * 32  # every event's hash
    async with SqliteEventStore(path) as store:
        events = await store.read_all("r1")
        assert (await store.verify("r1")).ok
        info = await store.get_run("r1")
    assert [e.body for e in events] == make_events()
    assert [(e.seq, e.position) for e in events] == [(i, i) for i in range(1, 8)]
    assert all(e.prev_hash == p.hash for p, e in itertools.pairwise(events))
    assert info is not None and info.last_seq == 7


async def test_reads_and_tails_start_and_stop_inside_frames(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        await store.append("r1", make_events(), expected_seq=0)  # seqs 1-7, one row
        await store.append("r2", [started()], expected_seq=0)  # position 8
        await store.append("r1", make_events(2)[1:], expected_seq=7)  # seqs 8-11, one row
        whole = await store.read_all("r1")
        assert [e.seq for e in whole] == list(range(1, 12))
        middle = [e async for e in store.read("r1", from_seq=3, to_seq=9)]
        assert middle == whole[2:9]  # same events, hashes and prev hashes
        assert [e.seq for e in await store.read_all("r1", to_seq=5)] == [1, 2, 3, 4, 5]
        assert [e async for e in store.read("r1", from_seq=12)] == []
        followed: list[tuple[str, int, int]] = []
        async for event in store.tail(from_position=4):
            followed.append((event.run_id, event.seq, event.position))
            if event.position == 12:
                break
    assert followed == [
        ("r1", 5, 5),
        ("r1", 6, 6),
        ("r1", 7, 7),
        ("r2", 1, 8),
        ("r1", 8, 9),
        ("r1", 9, 10),
        ("r1", 10, 11),
        ("r1", 11, 12),
    ]


def strip_form_bytes(path: Path) -> None:
    """Store every body as releases before schema version 5 did: without its form byte
    (those forms were told apart by their first byte)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT position, type, body FROM events").fetchall()
        for position, row_type, body in rows:
            if row_type == FRAME_TYPE:
                items = msgspec.msgpack.decode(body)
                old = msgspec.msgpack.encode([[t, v, b[1:]] for t, v, b in items])
            else:
                old = body[1:]
            conn.execute("UPDATE events SET body = ? WHERE position = ?", (old, position))
        conn.commit()
    finally:
        conn.close()


def downgrade(path: Path, version: int) -> None:
    """Make ``path`` a store as a release of schema ``version`` (1 to 7) left it: version 3
    added the snapshots table and the runs index; version 4 the fence (before it, a runs
    row's last seq was that of the run's last status change); version 5 the form byte;
    version 6 the claims table; version 7 the runs' graph id and quality and the listing's
    indexes; version 8 the runs' origin; version 9 a claim's draining mark."""
    if version < 9 and version >= 6:
        tamper(path, "ALTER TABLE claims DROP COLUMN draining")
        tamper(path, "ALTER TABLE claims DROP COLUMN draining_since")
    if version < 8:
        tamper(path, "ALTER TABLE runs DROP COLUMN origin")
    if version < 7:
        for index in ("runs_created", "runs_quality", "runs_graph", "runs_graph_hash"):
            tamper(path, f"DROP INDEX {index}")
        tamper(path, "DROP INDEX runs_status")
        tamper(path, "CREATE INDEX runs_status ON runs (status, run)")
        tamper(path, "ALTER TABLE runs DROP COLUMN graph_id")
        tamper(path, "ALTER TABLE runs DROP COLUMN quality")
    if version < 6:
        tamper(path, "DROP TABLE claims")
    if version < 5:
        strip_form_bytes(path)
    if version < 4:
        tamper(path, "DROP TRIGGER events_fence")
        tamper(path, "ALTER TABLE runs DROP COLUMN last_hash")
        tamper(path, "UPDATE runs SET last_seq = 1")  # as of its run.started
    if version < 3:
        tamper(path, "DROP TABLE snapshots")
        tamper(path, "DROP INDEX runs_status")
    tamper(path, f"PRAGMA user_version = {version}")


@pytest.mark.parametrize("framed", [False, True], ids=["rows", "frame"])
@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 7, 8])
async def test_a_store_of_an_older_schema_is_upgraded_and_keeps_reading(
    tmp_path: Path, version: int, framed: bool
) -> None:
    # Version 1 rows are rows of one event: the upgrade raises the version (so older
    # releases, which cannot read frames, refuse the file), adds what version 3 added, and
    # frames follow the old rows.
    path = tmp_path / "s.db"
    await make_store(path, framed=framed and version > 1)  # frames came with version 2
    async with SqliteEventStore(path) as store:  # a body stored compressed, too
        await store.append("r0", [MemoryWritten(key="k", value="abc " * 1000)], expected_seq=0)
        finished: list[EventBody] = [
            RunStarted(graph={"id": "trip"}, graph_hash="gh2", entry="a"),
            *make_events(1)[1:],
            RunFinished(status="completed", quality="degraded"),
        ]
        if framed:
            await store.append("r2", finished, expected_seq=0)
        else:
            for seq, event in enumerate(finished):
                await store.append("r2", [event], expected_seq=seq)
        fork: list[EventBody] = [
            finished[0],
            RunForked(source_run_id="r2", source_seq=1, source_hash="0" * 64),
            RunPaused(reason="user", node_id=None),
        ]
        await store.append("f2", fork, expected_seq=0)
    downgrade(path, version)
    async with SqliteEventStore(path) as store:
        # The upgrade takes the graph id and quality from the log (the run_index hooks).
        done = await store.get_run("r2")
        assert done is not None and (done.graph_id, done.quality) == ("trip", "degraded")
        forked = await store.get_run("f2")
        assert forked is not None and (forked.origin, done.origin) == ("r2", None)
        page = await store.query_runs(RunQuery(quality="degraded", graph_id="trip"))
        assert [r.run_id for r in page.runs] == ["r2"] and page.next_cursor is None
        info = await store.get_run("r1")
        assert info is not None and info.last_seq == 7  # the upgrade took it from the log
        with pytest.raises(ConcurrencyError):
            await store.append("r1", make_events(1)[1:], expected_seq=1)
        await store.append("r1", make_events(1)[1:], expected_seq=7)
        events = await store.read_all("r1")
        assert (await store.verify("r1")).ok
        snapshot = Snapshot("r1", 9, events[-1].hash, "v", b"state")
        await store.save_snapshot(snapshot)
        assert await store.load_snapshot("r1") == snapshot
        assert [r.run_id for r in await store.list_runs(status="running")] == ["r1"]
        claim = await store.claim("r1", "worker", lease=5)  # the upgrade added the claims
        assert claim.epoch == 1
        assert await store.mark_draining(claim, "work")  # the upgrade added its mark
        listed = await store.get_run("r1")
        assert listed is not None and (listed.owner, listed.draining) == ("worker", "work")
        await store.append("r1", make_events(1)[1:], expected_seq=9)  # fenced on it
        assert (await store.verify("r0")).ok
        assert [e.body for e in await store.read_all("r0")] == [
            MemoryWritten(key="k", value="abc " * 1000)
        ]
    assert [e.body for e in events] == make_events() + make_events(1)[1:]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


async def test_runs_are_listed_by_status_through_an_index(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        for i in range(50):
            events: list[EventBody] = [started()]
            if i % 10 == 0:
                events.append(RunFinished(status="completed", quality="clean"))
            await store.append(f"r{i}", events, expected_seq=0)
        done = await store.list_runs(status="completed", limit=3)
        assert [r.run_id for r in done] == ["r40", "r30", "r20"]
        assert len(await store.list_runs(status="running", limit=1000)) == 45


@pytest.mark.parametrize(
    ("query", "index"),
    [
        (RunQuery(), "runs_created"),
        (RunQuery(since=1.0, until=2.0), "runs_created"),
        (RunQuery(status="completed"), "runs_status"),
        (RunQuery(status="completed", since=1.0), "runs_status"),
        (RunQuery(quality="clean", until=2.0), "runs_quality"),
        (RunQuery(graph_id="g1"), "runs_graph"),
        (RunQuery(graph_hash="h1"), "runs_graph_hash"),
    ],
)
@pytest.mark.parametrize("paged", [False, True], ids=["first", "next"])
async def test_each_run_filter_and_page_is_one_index_range_scan(
    tmp_path: Path, query: RunQuery, index: str, paged: bool
) -> None:
    # The plan of the very statement the store runs: an index gives the rows in the
    # listing's order (no sort), and a cursor is a range on it (no OFFSET).
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        for i in range(30):
            events: list[EventBody] = [
                RunStarted(graph={"id": f"g{i % 3}"}, graph_hash=f"h{i % 3}", entry="a")
            ]
            if i % 2:
                events.append(
                    RunFinished(status="completed", quality=("clean", "failed")[i % 4 // 2])
                )
            await store.append(f"r{i}", events, expected_seq=0)
    sql, params = page_statement(query, "5.0~12" if paged else None, 10, 1.0)
    conn = sqlite3.connect(path)
    try:
        plan = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
    finally:
        conn.close()
    details = " | ".join(row[-1] for row in plan)
    assert re.search(rf"USING (COVERING )?INDEX {index}\b", details), details
    assert "TEMP B-TREE" not in details, details  # the index gives the order too
    # Each row's owner is one lookup of the claims table by its primary key.
    assert re.search(r"SEARCH c USING PRIMARY KEY \(run_id=\?\)", details), details
    if query != RunQuery() or paged:  # a seek into the index, not a walk along it
        assert details.startswith("SEARCH r USING"), details


async def test_close_merges_the_wal_into_the_database_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path)
    wal = path.with_name("s.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    # Readable with the WAL gone: everything is in the main file.
    wal.unlink(missing_ok=True)
    path.with_name("s.db-shm").unlink(missing_ok=True)
    async with SqliteEventStore(path) as store:
        assert len(await store.read_all("r1")) == 7


@pytest.mark.parametrize(
    "content",
    [b"hello, this is a text file\n" * 10, b"SQLite format 3\x00 but truncated"],
    ids=["text", "truncated"],
)
async def test_a_file_that_is_not_sqlite_is_refused_and_left_unchanged(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(NotAStoreError) as caught:
        await SqliteEventStore(path).open()
    assert caught.value.path == str(path)
    assert "not an SQLite database" in str(caught.value)
    assert path.read_bytes() == content
    assert side_files(path) == []


async def test_another_sqlite_database_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT)")
    conn.execute("INSERT INTO events (what) VALUES ('x')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    store = SqliteEventStore(path)
    with pytest.raises(NotAStoreError) as caught:
        await store.open()
    assert "application_id" in caught.value.reason
    assert path.read_bytes() == before
    assert side_files(path) == []
    await store.close()  # closing a store that never opened is harmless


async def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotAStoreError):
        await SqliteEventStore(tmp_path).open()


async def test_a_store_from_a_newer_release_is_refused_and_left_unchanged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    await make_store(path)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(SchemaVersionError) as caught:
        await SqliteEventStore(path).open()
    assert (caught.value.found, caught.value.supported) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    assert path.read_bytes() == before
    assert side_files(path) == []


def tamper(path: Path, sql: str, *params: object) -> None:
    conn = sqlite3.connect(path)
    conn.execute(sql, params)
    conn.commit()
    conn.close()


async def test_verify_finds_an_edited_body(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path)
    forged = store_body(encode_body(NodeStarted(node_id="evil", visit=1)), "node.started")
    tamper(path, "UPDATE events SET body = ? WHERE seq = 4", forged)
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
        events = await store.read_all("r1")  # reads still decode: it is well-formed
    assert not report.ok and report.broken_at == 4 and report.checked == 3
    assert report.reason is not None and "hash" in report.reason
    assert events[3].body == NodeStarted(node_id="evil", visit=1)


async def test_small_bodies_are_stored_without_their_tag_and_whole_ones_still_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    await make_store(path)
    conn = sqlite3.connect(path)
    try:
        stored = conn.execute("SELECT body FROM events WHERE seq = 2").fetchone()[0]
    finally:
        conn.close()
    whole = encode_body(NodeStarted(node_id="n0", visit=1))
    # The form byte, then the body without its tag (the type column has it).
    assert stored == bytes([BodyForm.TAGLESS]) + whole[len(b'{"type":"node.started"') :]
    # The same event stored whole (as a body whose encoding lacks the tag is) reads and
    # verifies the same.
    tamper(path, "UPDATE events SET body = ? WHERE seq = 2", bytes([BodyForm.WHOLE]) + whole)
    async with SqliteEventStore(path) as store:
        assert (await store.verify("r1")).ok
        events = await store.read_all("r1")
    assert events[1].body == NodeStarted(node_id="n0", visit=1)


async def test_verify_finds_an_edited_hash_and_a_rewritten_chain_tail(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path)
    tamper(path, "UPDATE events SET hash = zeroblob(32) WHERE seq = 6")
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
    assert not report.ok and report.broken_at == 6


async def test_verify_finds_a_missing_event(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path)
    tamper(path, "DELETE FROM events WHERE seq = 2")
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
        with pytest.raises(Exception, match="gap"):
            await store.read_all("r1")
    assert not report.ok and report.broken_at == 2 and report.checked == 1


async def test_verify_finds_a_cut_off_end(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        await store.append("r1", [started()], expected_seq=0)
        await store.append("r1", [RunFinished(status="completed", quality="clean")], expected_seq=1)
    tamper(path, "DELETE FROM events WHERE seq = 2")
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
    assert not report.ok and report.broken_at == 2


async def test_an_unknown_event_type_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path, steps=0)
    body = b'{"type":"from.the.future","x":1}'
    digest = chain_hash("", "r1", 2, "from.the.future", 1, body)
    conn = sqlite3.connect(path)
    prev = conn.execute("SELECT hash FROM events WHERE seq = 1").fetchone()[0]
    digest = chain_hash(prev.hex(), "r1", 2, "from.the.future", 1, body)
    conn.execute(
        "INSERT INTO events VALUES (2, 1, 2, 0, 'from.the.future', 1, ?, ?)",
        (bytes.fromhex(digest), store_body(body, "from.the.future")),
    )
    conn.execute("UPDATE runs SET last_seq = 2, last_hash = ?", (bytes.fromhex(digest),))
    conn.commit()
    conn.close()
    async with SqliteEventStore(path) as store:
        with pytest.raises(UnknownEventError) as caught:
            await store.read_all("r1")
        report = await store.verify("r1")
    assert caught.value.tag == "from.the.future" and caught.value.run_id == "r1"
    # Verifying checks the stored bytes' chain: it needs no type to be known.
    assert report.ok and report.checked == 2


async def test_two_stores_on_one_file_never_duplicate_a_seq(tmp_path: Path) -> None:
    from eventstore import ConcurrencyError

    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as a, SqliteEventStore(path) as b:
        await b.append("r1", [started()], expected_seq=0)  # b caches r1 at seq 1
        await a.append("r1", [NodeStarted(node_id="a", visit=1)], expected_seq=1)
        with pytest.raises(ConcurrencyError) as caught:
            # b's cache is stale; the UNIQUE key catches it and b re-checks.
            await b.append("r1", [NodeCompleted(node_id="a")], expected_seq=1)
        assert caught.value.actual_seq == 2
        result = await b.append("r1", [NodeCompleted(node_id="a")], expected_seq=2)
        assert result.last_position == 3
        assert (await a.verify("r1")).ok


def _failing_batch(shape: str) -> list[EventBody]:
    if shape == "one row":
        return [NodeStarted(node_id="a", visit=1)]
    if shape == "runs row changes":  # INSERT, UPDATE runs
        return [NodeStarted(node_id="a", visit=1), RunPaused(reason="user", node_id="a")]
    # Many rows (frames of 64 events): the earlier ones are written when the last fails.
    return [NodeStarted(node_id=f"n{i}", visit=1) for i in range(3000)]


@pytest.mark.parametrize("shape", ["one row", "runs row changes", "many rows"])
async def test_a_failed_transaction_fails_its_waiters_and_the_writer_goes_on(
    tmp_path: Path, shape: str
) -> None:
    from eventstore import StoreError

    path = tmp_path / "s.db"
    batch = _failing_batch(shape)
    async with SqliteEventStore(path) as store:
        await store.append("r1", [started()], expected_seq=0)
        # Another connection makes SQLite refuse the row holding the batch's last event:
        # when the batch has several rows, the earlier ones are written by then.
        other = sqlite3.connect(path, isolation_level=None)
        other.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events "
            f"WHEN NEW.seq + length(NEW.hash) / 32 - 1 = {len(batch) + 1} "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
        with pytest.raises(StoreError, match="refused by the test"):
            await store.append("r1", batch, expected_seq=1)
        other.execute("DROP TRIGGER refuse")
        other.close()
        # Nothing of the failed batch was written, the run's row is as it was, and the
        # writer still commits later batches.
        assert [e.seq for e in await store.read_all("r1")] == [1]
        info = await store.get_run("r1")
        assert info is not None and info.status == "running"
        result = await store.append("r1", batch, expected_seq=1)
        assert (result.first_seq, result.last_seq) == (2, len(batch) + 1)
        info = await store.get_run("r1")
        assert info is not None
        assert info.status == ("paused" if shape == "runs row changes" else "running")
        assert info.last_seq == len(batch) + 1
        assert [e.body for e in await store.read_all("r1")] == [started(), *batch]
        assert (await store.verify("r1")).ok


async def test_batches_of_every_size_read_back_in_order(tmp_path: Path) -> None:
    # Positions stay dense and in commit order, whatever the batch's size.
    path = tmp_path / "s.db"
    sizes = [1, 2, 3, 5, 8, 9, 31, 64, 65, 127, 200, 2047, 2048, 2049]
    async with SqliteEventStore(path) as store:
        seq = (await store.append("r1", [started()], expected_seq=0)).last_seq
        expected: list[EventBody] = [started()]
        for size in sizes:
            batch = [MemoryWritten(key="k", value=f"{size}:{i}") for i in range(size)]
            result = await store.append("r1", batch, expected_seq=seq)
            assert (result.first_seq, result.last_seq) == (seq + 1, seq + size)
            assert result.last_position == result.last_seq  # one run: position == seq
            seq = result.last_seq
            expected += batch
        events = await store.read_all("r1")
        assert [e.body for e in events] == expected
        assert [e.seq for e in events] == list(range(1, len(expected) + 1))
        assert (await store.verify("r1")).ok
    raw = sqlite3.connect(path)
    try:
        rows = raw.execute(
            "SELECT position, length(hash) / 32 FROM events ORDER BY position"
        ).fetchall()
    finally:
        raw.close()
    # A row per append, or per 64 events of a larger one; each row's events take the
    # positions up to the next row's.
    assert len(rows) == 1 + sum(-(-size // 64) for size in sizes)
    assert [p for p, _ in rows[1:]] == [p + n for p, n in rows[:-1]]
    assert rows[-1][0] + rows[-1][1] - 1 == len(expected)


async def test_synchronous_setting_is_applied(tmp_path: Path) -> None:
    config = DurabilityConfig(synchronous="NORMAL")
    async with SqliteEventStore(tmp_path / "s.db", config=config) as store:
        assert store._core.conn is not None
        settings = {
            name: store._core.conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("synchronous", "journal_mode")
        }
        assert settings["synchronous"] == 1  # NORMAL
        assert settings["journal_mode"] == "wal"


def test_durability_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        DurabilityConfig(max_batch=0)
    with pytest.raises(ValueError):
        DurabilityConfig(page_size=3000)


def _children() -> set[str]:
    """The pids of this process's child processes (Linux)."""
    found: set[str] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            found.update(f.read().split())
    return found


async def test_a_store_starts_no_process_and_changes_no_interpreter_setting(
    tmp_path: Path,
) -> None:
    # An embedded library: the writer is a thread of this process, and the interpreter's
    # process-wide settings stay as the application left them.
    if not sys.platform.startswith("linux"):
        pytest.skip("child processes are listed from /proc (Linux)")
    interval = sys.getswitchinterval()
    children = _children()
    async with SqliteEventStore(tmp_path / "s.db") as store:
        await store.append("r1", [started()], expected_seq=0)
        assert _children() == children
        assert sys.getswitchinterval() == interval
        writers = [t for t in threading.enumerate() if t.name.startswith("eventstore-writer:")]
        assert len(writers) == 1 and writers[0].is_alive()
    assert not writers[0].is_alive()  # and it ends with the store
    assert sys.getswitchinterval() == interval


async def test_memory_payload_overhead_stays_small(tmp_path: Path) -> None:
    # The size budget: a run writing 50 x 2 KB to memory stays within 1.5x the payload.
    # Hex of random bytes: realistic-looking data that compresses only about 2:1.
    path = tmp_path / "s.db"
    rng = random.Random(5)
    payload = 0
    async with SqliteEventStore(path) as store:
        seq = (await store.append("r1", [started()], expected_seq=0)).last_seq
        for i in range(50):
            value = rng.randbytes(1024).hex()
            payload += len(value)
            batch: list[EventBody] = [
                NodeStarted(node_id=f"step{i}", visit=1),
                MemoryWritten(key="notes", value=value, op="append", node_id=f"step{i}"),
                NodeCompleted(node_id=f"step{i}"),
            ]
            seq = (await store.append("r1", batch, expected_seq=seq)).last_seq
    assert path.stat().st_size <= 1.5 * payload


async def test_verify_finds_an_edited_compressed_body(tmp_path: Path) -> None:
    import zlib

    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        value = "abc " * 1000
        await store.append("r1", [started()], expected_seq=0)
        await store.append("r1", [MemoryWritten(key="k", value=value)], expected_seq=1)
    forged = bytes([BodyForm.ZLIB]) + zlib.compress(
        encode_body(MemoryWritten(key="k", value="abd " * 1000))
    )
    tamper(path, "UPDATE events SET body = ? WHERE seq = 2", forged)
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
    assert not report.ok and report.broken_at == 2


def rewrite_frame(path: Path, seq: int, body: EventBody) -> None:
    """Replace the event at ``seq`` inside run r1's one frame with ``body``, hashes kept."""
    events = make_events()
    events[seq - 1] = body
    tags = [event_tag(type(e)) for e in events]
    stored = [store_body(encode_body(e), t) for e, t in zip(events, tags, strict=True)]
    frame = pack_frame(tags, [1] * len(events), stored)
    tamper(path, "UPDATE events SET body = ? WHERE seq = 1", frame)


async def test_verify_finds_an_event_edited_inside_a_frame(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path, framed=True)
    rewrite_frame(path, 4, NodeStarted(node_id="evil", visit=1))
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
        events = await store.read_all("r1")  # well-formed: reads still decode
    assert not report.ok and report.broken_at == 4 and report.checked == 3
    assert report.reason is not None and "hash" in report.reason
    assert events[3].body == NodeStarted(node_id="evil", visit=1)


async def test_verify_finds_a_frame_hash_edited_or_cut(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path, framed=True)
    # The sixth event's hash zeroed: the first five still check.
    conn = sqlite3.connect(path)
    hashes = conn.execute("SELECT hash FROM events WHERE seq = 1").fetchone()[0]
    conn.close()
    tamper(
        path, "UPDATE events SET hash = ? WHERE seq = 1", hashes[:160] + bytes(32) + hashes[192:]
    )
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
    assert not report.ok and report.broken_at == 6 and report.checked == 5
    # A hash dropped: the row no longer says how many events it holds.
    tamper(path, "UPDATE events SET hash = substr(hash, 33) WHERE seq = 1")
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
        with pytest.raises(CorruptLogError, match="frame of 7 events"):
            await store.read_all("r1")
    assert not report.ok and report.broken_at == 1 and report.checked == 0


async def test_an_undecodable_frame_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_store(path, framed=True)
    tamper(path, "UPDATE events SET body = x'c1c2c3' WHERE seq = 1")
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
        with pytest.raises(CorruptLogError, match="undecodable frame"):
            await store.read_all("r1")
    assert not report.ok and report.broken_at == 1
    assert report.reason is not None and "corrupt row" in report.reason


async def test_concurrent_appends_share_transactions_of_at_most_half_those_in_flight(
    tmp_path: Path,
) -> None:
    # Group commit: appends queued together share a transaction, but a
    # transaction takes at most half of the appends in flight, so two groups of callers
    # take turns (the event loop serves one while the other commits).
    async with SqliteEventStore(tmp_path / "s.db") as store:
        stats = await _hundred_appenders(store)
    assert stats.max_batch_size <= 50  # never more than half of the 100 in flight


@pytest.mark.parametrize("max_batch", [1000, 7])
async def test_the_writer_commits_concurrent_appends_in_groups(
    tmp_path: Path, max_batch: int
) -> None:
    # The writer takes what has arrived (at most max_batch) into one transaction: 100
    # appenders need far fewer transactions than appends.
    config = DurabilityConfig(max_batch=max_batch)
    async with SqliteEventStore(tmp_path / "s.db", config=config) as store:
        stats = await _hundred_appenders(store)
    assert stats.batches < stats.appends / 4
    assert 1 < stats.max_batch_size <= max_batch


async def _hundred_appenders(store: SqliteEventStore) -> Any:
    async def appender(index: int) -> None:
        seq = 0
        for visit in range(1, 6):
            batch = [NodeStarted(node_id="a", visit=visit)]
            seq = (await store.append(f"r{index}", batch, expected_seq=seq)).last_seq

    async with anyio.create_task_group() as tg:
        for index in range(100):
            tg.start_soon(appender, index)
    stats = store.statistics()
    assert [len(await store.read_all(f"r{i}")) for i in range(100)] == [5] * 100
    assert stats.appends == 500
    assert stats.events == 500
    return stats


async def test_runs_rows_written_with_a_batch_record_each_runs_last_change(
    tmp_path: Path,
) -> None:
    # One transaction holding new runs, status changes and plain appends.
    from eventstore._core import WriterCore
    from eventstore._requests import prepare

    core = WriterCore(str(tmp_path / "s.db"), "FULL")
    core.connect(True, 1024)
    try:
        core.commit([prepare("r2", [started()], 0)])
        core.commit(
            [
                prepare("r1", [started(), NodeStarted(node_id="a", visit=1)], 0),
                prepare("r2", [NodeStarted(node_id="a", visit=1)], 1),
                prepare("r3", [NodeStarted(node_id="a", visit=1)], 0),
                prepare("r2", [RunPaused(reason="user", node_id="a")], 2),
                prepare("r2", [NodeStarted(node_id="b", visit=1)], 3),
            ]
        )
        assert core.conn is not None
        rows = core.conn.execute(
            "SELECT run_id, status, last_seq, graph_hash, created <= updated FROM runs "
            "ORDER BY run_id"
        ).fetchall()
        counts = core.conn.execute(
            "SELECT r.run_id, sum(length(e.hash) / 32) FROM events e JOIN runs r ON r.run = e.run "
            "GROUP BY r.run_id ORDER BY r.run_id"
        ).fetchall()
    finally:
        core.close()
    assert rows == [
        ("r1", "running", 2, "gh", 1),
        ("r2", "paused", 4, "gh", 1),  # the status as of the pause, the live last seq
        ("r3", "new", 1, None, 1),
    ]
    assert counts == [("r1", 2), ("r2", 4), ("r3", 1)]


async def test_hundreds_of_runs_rows_in_one_transaction(tmp_path: Path) -> None:
    # 300 new runs, then 300 status changes, in one transaction each: every one lands
    # exactly once.
    from eventstore._core import WriterCore
    from eventstore._requests import prepare

    core = WriterCore(str(tmp_path / "s.db"), "FULL")
    core.connect(True, 1024)
    try:
        core.commit([prepare(f"r{i:03}", [started()], 0) for i in range(300)])
        finished = [
            prepare(f"r{i:03}", [RunFinished(status="completed", quality="clean")], 1)
            for i in range(0, 300, 2)
        ] + [
            prepare(f"r{i:03}", [RunPaused(reason="user", node_id="a")], 1)
            for i in range(1, 300, 2)
        ]
        core.commit(finished)
        assert all(request.error is None for request in finished)
        assert core.conn is not None
        rows = core.conn.execute(
            "SELECT run_id, status, last_seq, graph_hash FROM runs ORDER BY run_id"
        ).fetchall()
    finally:
        core.close()
    assert rows == [
        (f"r{i:03}", "completed" if i % 2 == 0 else "paused", 2, "gh") for i in range(300)
    ]


@pytest.mark.parametrize("appends", [1, 3, 63, 64, 65, 100, 129, 200])
async def test_a_group_commit_writes_every_row_once_in_order_whatever_its_size(
    tmp_path: Path, appends: int
) -> None:
    # However many appends one transaction holds, each lands whole, in position order,
    # with its hash chain intact.
    from eventstore._core import WriterCore
    from eventstore._requests import prepare

    path = tmp_path / "s.db"
    core = WriterCore(str(path), "FULL")
    core.connect(True, 1024)
    try:
        requests = [
            prepare(
                f"r{i:03}",
                [started(), NodeStarted(node_id="a", visit=1)][: 1 + i % 2],
                0,
            )
            for i in range(appends)
        ]
        core.commit(requests)
        followers = [
            prepare(f"r{i:03}", [NodeStarted(node_id="b", visit=1)], 1 + i % 2)
            for i in range(appends)
        ]
        core.commit(followers)
    finally:
        core.close()
    assert all(r.error is None for r in requests + followers)
    positions = [r.result.last_position for r in requests + followers if r.result]
    assert positions == sorted(positions) and len(set(positions)) == 2 * appends
    async with SqliteEventStore(path) as store:
        for i in range(appends):
            events = await store.read_all(f"r{i:03}")
            kinds = [type(e.body).__name__ for e in events]
            first = ["RunStarted", "NodeStarted"][: 1 + i % 2]
            assert kinds == [*first, "NodeStarted"]
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert (await store.verify(f"r{i:03}")).ok


async def test_a_run_taken_for_new_that_the_file_holds_gets_a_conflict_and_the_rest_commits(
    tmp_path: Path,
) -> None:
    # A writer that has not seen a run takes an append at expected_seq 0 for a new run
    # without asking the file; when the file does hold it, the batch is planned again.
    from eventstore import ConcurrencyError
    from eventstore._core import WriterCore
    from eventstore._requests import prepare

    path = tmp_path / "s.db"
    await make_store(path)  # r1 with 7 events
    core = WriterCore(str(path), "FULL")
    core.connect(False, 1024)
    try:
        again = prepare("r1", [started()], 0)
        fresh = prepare("r2", [started()], 0)
        core.commit([again, fresh])
        assert isinstance(again.error, ConcurrencyError) and again.result is None
        assert fresh.error is None and fresh.result is not None
        assert (fresh.result.first_seq, fresh.result.last_seq) == (1, 1)
    finally:
        core.close()
    async with SqliteEventStore(path) as store:
        assert len(await store.read_all("r1")) == 7
        assert [e.body for e in await store.read_all("r2")] == [started()]
        assert (await store.verify("r1")).ok and (await store.verify("r2")).ok


async def test_a_reopened_writer_finds_hundreds_of_runs_it_has_not_seen(tmp_path: Path) -> None:
    # Runs the writer's cache does not hold are looked up in the file, all at once.
    from eventstore._core import WriterCore
    from eventstore._requests import prepare

    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        for i in range(300):
            await store.append(f"r{i}", [started()], expected_seq=0)
    core = WriterCore(str(path), "FULL")
    core.connect(False, 1024)
    try:
        requests = [prepare(f"r{i}", [NodeStarted(node_id="a", visit=1)], None) for i in range(300)]
        core.commit(requests)
        assert [(r.error, r.result and r.result.last_seq) for r in requests] == [(None, 2)] * 300
    finally:
        core.close()
    async with SqliteEventStore(path) as store:
        assert all([(await store.verify(f"r{i}")).ok for i in (0, 255, 256, 299)])
        assert len(await store.read_all("r299")) == 2


async def test_submit_answers_through_its_callback_in_order_and_checks_like_append(
    tmp_path: Path,
) -> None:
    from eventstore import AppendResult, ConcurrencyError, StoreClosedError

    answers: list[tuple[AppendResult | None, BaseException | None]] = []
    done = anyio.Event()

    def on_done(result: AppendResult | None, error: BaseException | None) -> None:
        answers.append((result, error))
        if len(answers) == 3:
            done.set()

    async with SqliteEventStore(tmp_path / "s.db") as store:
        assert store.submit("r", [started()], expected_seq=0, on_done=on_done)
        assert store.submit(
            "r", [NodeStarted(node_id="a", visit=1)], expected_seq=1, on_done=on_done
        )
        assert store.submit(
            "r", [NodeStarted(node_id="b", visit=1)], expected_seq=1, on_done=on_done
        )
        with pytest.raises(ValueError):
            store.submit("r", [], expected_seq=2, on_done=on_done)
        with anyio.fail_after(5):
            await done.wait()
        events = await store.read_all("r")
    assert [(r.first_seq, r.last_seq) for r, _ in answers[:2] if r is not None] == [(1, 1), (2, 2)]
    assert isinstance(answers[2][1], ConcurrencyError) and answers[2][0] is None
    assert [e.seq for e in events] == [1, 2]
    with pytest.raises(StoreClosedError):
        store.submit("r", [started()], expected_seq=2, on_done=on_done)


async def test_two_processes_opening_an_older_store_at_once_upgrade_it_once(
    tmp_path: Path,
) -> None:
    # Two workers of a new release start on a store of the previous schema version: both
    # read its version, and one upgrades it while the other waits for the write lock.
    # Before, the second then ran the same upgrade again on the upgraded file and failed
    # ("duplicate column name"): the version is read again under the lock.
    path = tmp_path / "s.db"
    await make_store(path)
    downgrade(path, 8)
    plain = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    plain.execute("BEGIN IMMEDIATE")  # holds both openers at the upgrade's write lock
    opened: list[str] = []

    async def open_and_append(run_id: str) -> None:
        async with SqliteEventStore(path) as store:
            await store.append(run_id, [MemoryWritten(key="k", value=1)], expected_seq=0)
            opened.append(run_id)

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(open_and_append, "w1")
                tasks.start_soon(open_and_append, "w2")
                await anyio.sleep(0.5)  # both read version 8 and wait for the lock
                plain.execute("COMMIT")
    finally:
        plain.close()
    assert sorted(opened) == ["w1", "w2"]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()
