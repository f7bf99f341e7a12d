"""Two SQLite stores on one file: each answers a conflict from the file, never from its
own caches, which the other store's appends leave behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from eventstore import ConcurrencyError, SqliteEventStore
from eventstore._core import WriterCore
from eventstore._schema import check_file
from runtime.events import MemoryWritten

pytestmark = pytest.mark.anyio


def written(value: int) -> list[MemoryWritten]:
    return [MemoryWritten(key="k", value=value)]


async def test_an_append_at_the_files_last_seq_passes_after_the_other_store_appended(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with SqliteEventStore(path) as one, SqliteEventStore(path) as two:
        for round_ in range(20):
            seq = round_ * 2
            # ``one`` appends (its cache now says seq + 1), then ``two`` appends behind it.
            assert (await one.append("r", written(seq + 1), expected_seq=seq)).last_seq == seq + 1
            assert (await two.append("r", written(seq + 2), expected_seq=seq + 1)).last_seq == (
                seq + 2
            )
        # At the file's last seq, ``one`` appends; at its cache's stale seq, it is refused
        # with the file's position.
        with pytest.raises(ConcurrencyError) as refused:
            await one.append("r", written(0), expected_seq=39)
        assert refused.value.actual_seq == 40
        assert (await one.append("r", written(41), expected_seq=40)).last_seq == 41
        assert (await one.verify("r")).ok
        events = await two.read_all("r")
    assert [e.body.value for e in events] == list(range(1, 42))  # type: ignore[attr-defined]


def test_a_store_another_process_created_after_the_file_was_found_new_is_opened(
    tmp_path: Path,
) -> None:
    # Both processes found no file (check_file: create it); the first created the schema.
    path = str(tmp_path / "runs.db")
    assert check_file(path)
    first, second = WriterCore(path, "FULL"), WriterCore(path, "FULL")
    first.connect(True, 4096)
    try:
        second.connect(True, 4096)  # was: "table runs already exists"
        second.close()
    finally:
        first.close()
    assert not check_file(path)


_OPEN_AT_ONCE = r"""
import asyncio, os, sys, time
from eventstore import SqliteEventStore
from runtime.events import MemoryWritten
path, go, name = sys.argv[1], sys.argv[2], sys.argv[3]
while not os.path.exists(go):
    time.sleep(0.001)
async def main():
    async with SqliteEventStore(path) as store:
        await store.append(name, [MemoryWritten(key="k", value=1)], expected_seq=0)
asyncio.run(main())
"""


async def test_processes_opening_a_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    for trial in range(3):
        path, go = tmp_path / f"runs{trial}.db", tmp_path / f"go{trial}"
        processes = [
            await anyio.open_process(
                [sys.executable, "-c", _OPEN_AT_ONCE, str(path), str(go), f"r{i}"],
                stderr=subprocess.PIPE,
            )
            for i in range(6)
        ]
        await anyio.sleep(1.0)  # every process imported and polls for the go file
        go.touch()
        for process in processes:
            await process.wait()
            assert process.stderr is not None
            errors = (await process.stderr.receive()).decode() if process.returncode else ""
            assert process.returncode == 0, errors
        async with SqliteEventStore(path) as store:
            assert len(await store.list_runs()) == 6


async def test_a_store_opened_while_another_connection_holds_the_write_lock_waits(
    tmp_path: Path,
) -> None:
    # A new store's schema is committed before its file turns to WAL: another process
    # opening it at that moment (here a plain connection) may hold the write lock while
    # this one turns the file to WAL. SQLite then answers "database is locked" at once,
    # without waiting (its busy handler is not called where waiting could deadlock), and
    # the store refused to open. It waits for the lock instead, as any of its writes does.
    import sqlite3
    import threading

    path = tmp_path / "runs.db"
    async with SqliteEventStore(path):
        pass
    plain = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    plain.execute("PRAGMA journal_mode = DELETE")  # as a new store is before it turns
    plain.execute("BEGIN IMMEDIATE")  # the other opener, in its schema check
    released = threading.Timer(0.5, plain.execute, ("COMMIT",))
    released.start()
    try:
        with anyio.fail_after(30):
            async with SqliteEventStore(path) as store:
                await store.append("r", written(1), expected_seq=0)
                assert [e.seq async for e in store.read("r")] == [1]
    finally:
        released.join()
        plain.close()
