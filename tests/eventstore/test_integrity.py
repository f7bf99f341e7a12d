"""Reads that check the chain, a verify that reports instead of raising, and clear errors
for files that cannot be opened or read (SQLite store, its file tampered with)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from eventstore import CorruptLogError, SqliteEventStore, StoreError, StoreFileError
from eventstore._format import store_body
from runtime.events import NodeCompleted, NodeStarted, RunFinished, RunStarted

pytestmark = pytest.mark.anyio


def tamper(path: Path, sql: str, *params: object) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


def cut(path: Path, keep: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(keep)


def overwrite_second_half(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\xff" * (size - size // 2))


async def make_run(path: Path, *, framed: bool = False) -> None:
    """Run r1: started, three steps, finished (11 events); one row each unless framed."""
    events = [RunStarted(graph={}, graph_hash="g", entry="n0")]
    for i in range(3):
        events += [NodeStarted(node_id=f"n{i}", visit=1), NodeCompleted(node_id=f"n{i}")]
    events.append(RunFinished(status="completed", quality="clean"))
    async with SqliteEventStore(path) as store:
        if framed:
            await store.append("r1", events, expected_seq=0)
            return
        for seq, event in enumerate(events):
            await store.append("r1", [event], expected_seq=seq)


async def test_a_verified_read_reads_an_untouched_run_as_a_plain_one(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_run(path, framed=True)
    async with SqliteEventStore(path) as store:
        plain = await store.read_all("r1")
        checked = await store.read_all("r1", verify=True)
        middle = [e async for e in store.read("r1", from_seq=3, to_seq=5, verify=True)]
        assert await store.read_all("nobody", verify=True) == []
    assert checked == plain and len(plain) == 8
    assert middle == plain[2:5]


@pytest.mark.parametrize("framed", [False, True], ids=["rows", "frame"])
async def test_a_verified_read_names_the_seq_of_an_edited_event(
    tmp_path: Path, framed: bool
) -> None:
    path = tmp_path / "s.db"
    await make_run(path, framed=framed)
    forged = NodeStarted(node_id="evil", visit=1)
    if framed:
        from eventstore import encode_body
        from eventstore._format import pack_frame

        conn = sqlite3.connect(path)
        (body,) = conn.execute("SELECT body FROM events").fetchone()
        conn.close()
        import msgspec

        items = msgspec.msgpack.decode(body)
        items[3][2] = store_body(encode_body(forged), "node.started")
        frame = pack_frame([i[0] for i in items], [i[1] for i in items], [i[2] for i in items])
        tamper(path, "UPDATE events SET body = ?", frame)
    else:
        from eventstore import encode_body

        tamper(
            path,
            "UPDATE events SET body = ? WHERE seq = 4",
            store_body(encode_body(forged), "node.started"),
        )
    async with SqliteEventStore(path) as store:
        unchecked = await store.read_all("r1")  # a plain read still decodes it
        with pytest.raises(CorruptLogError) as caught:
            await store.read_all("r1", verify=True)
        report = await store.verify("r1")
    assert unchecked[3].body == forged
    assert caught.value.seq == 4 and caught.value.run_id == "r1"
    assert "hash" in caught.value.reason
    assert not report.ok and report.broken_at == 4 and report.checked == 3


async def test_a_verified_read_finds_deleted_last_events(tmp_path: Path) -> None:
    # A completed run whose last rows were deleted must not read as a running one.
    path = tmp_path / "s.db"
    await make_run(path)
    tamper(path, "DELETE FROM events WHERE seq >= 7")
    async with SqliteEventStore(path) as store:
        assert len(await store.read_all("r1")) == 6  # unchecked, it looks like a live run
        with pytest.raises(CorruptLogError) as caught:
            await store.read_all("r1", verify=True)
        report = await store.verify("r1")
        # A read that stops before the cut does not need the end.
        assert len(await store.read_all("r1", to_seq=5, verify=True)) == 5
    assert caught.value.seq == 7 and "missing" in caught.value.reason
    assert not report.ok and report.broken_at == 7 and report.checked == 6


async def test_a_deleted_middle_event_and_a_rewritten_last_hash_are_found(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await make_run(path)
    tamper(path, "DELETE FROM events WHERE seq = 3")
    async with SqliteEventStore(path) as store:
        with pytest.raises(CorruptLogError) as gap:
            await store.read_all("r1", verify=True)
    assert gap.value.seq == 3
    # The whole log rewritten consistently but for the run's record of its last hash.
    other = tmp_path / "t.db"
    await make_run(other)
    tamper(other, "UPDATE runs SET last_hash = zeroblob(32)")
    async with SqliteEventStore(other) as store:
        with pytest.raises(CorruptLogError) as last:
            await store.read_all("r1", verify=True)
        report = await store.verify("r1")
    assert last.value.seq == 8
    assert not report.ok and report.broken_at == 8


@pytest.mark.parametrize(
    "garbage",
    [
        "UPDATE events SET hash = x'00' WHERE seq = 2",
        "UPDATE events SET hash = 'not a blob' WHERE seq = 2",
        "UPDATE events SET type = 42 WHERE seq = 2",
        "UPDATE events SET body = x'' WHERE seq = 2",
        "UPDATE events SET type = '', body = x'00ff' WHERE seq = 2",
        "UPDATE events SET version = 'x' WHERE seq = 2",
    ],
)
async def test_verify_reports_garbage_rows_and_never_raises(tmp_path: Path, garbage: str) -> None:
    path = tmp_path / "s.db"
    await make_run(path)
    tamper(path, garbage)
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
        with pytest.raises(StoreError):  # a read names it too, as a store error
            await store.read_all("r1", verify=True)
    assert not report.ok and report.broken_at == 2 and report.reason


async def test_a_path_in_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "s.db"
    with pytest.raises(StoreFileError) as caught:
        await SqliteEventStore(path).open()
    assert caught.value.path == str(path) and "does not exist" in caught.value.reason
    assert not path.parent.exists()


async def test_a_truncated_store_file_is_a_clear_error_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        for i in range(200):
            events = [RunStarted(graph={"n": "x" * 200}, graph_hash="g", entry="a")]
            await store.append(f"r{i}", events, expected_seq=0)
    cut(path, keep=path.stat().st_size // 3)
    # Whether SQLite notices at open or at the first read, it is a StoreError naming the
    # file, never a raw sqlite3 error.
    with pytest.raises(StoreFileError) as caught:
        async with SqliteEventStore(path) as store:
            await store.list_runs(limit=1000)
            for i in range(200):
                await store.read_all(f"r{i}")
    assert caught.value.path == str(path)
    assert not isinstance(caught.value, sqlite3.Error)


async def test_verify_of_a_damaged_file_reports(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        await store.append("r1", [RunStarted(graph={}, graph_hash="g", entry="a")], expected_seq=0)
        events = [NodeStarted(node_id="a" * 500, visit=i) for i in range(1, 400)]
        await store.append("r1", events, expected_seq=1)
    # Overwrite the second half of the file (the events' pages; the schema is in front).
    overwrite_second_half(path)
    async with SqliteEventStore(path) as store:
        report = await store.verify("r1")
        with pytest.raises(StoreError):
            await store.read_all("r1")
    assert not report.ok and report.reason
