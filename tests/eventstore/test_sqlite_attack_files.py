"""A SQLite store's file as users meet it: in a directory that cannot be written, behind a
dangling symbolic link, cut short, named like a URI, on a disk that fills; and the heads
file beside it on such a disk. Each says what is wrong and keeps what was committed."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from eventstore import (
    HeadsFile,
    Snapshot,
    SqliteEventStore,
    StoreFileError,
    read_heads_file,
)
from runtime.events import MemoryWritten
from tests.eventstore.test_sqlite_file import downgrade

pytestmark = pytest.mark.anyio

#: Every async test's deadline: a hang fails instead of stalling the suite.
DEADLINE = 60


def written(value: object) -> list[MemoryWritten]:
    return [MemoryWritten(key="k", value=value)]


def _chattr(flag: str, path: Path) -> None:
    """``chattr FLAG PATH`` (+i: nobody may change it, root included; root ignores modes),
    or skip the test where the tool or the file system refuses."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    done = subprocess.run(["chattr", flag, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"the file system refuses chattr {flag}: {done.stderr.strip()}")


@pytest.fixture
def frozen(tmp_path: Path) -> Iterator[Path]:
    """A directory the test may make immutable (it is made writable again after)."""
    directory = tmp_path / "frozen"
    directory.mkdir()
    yield directory
    subprocess.run(["chattr", "-i", str(directory)], check=False, capture_output=True)


async def _fill(path: Path) -> None:
    async with SqliteEventStore(path) as store:
        await store.append("a", written(1), expected_seq=0)
        result = await store.append("a", written(2), expected_seq=1)
        await store.append("b", written(3), expected_seq=0)
        await store.save_snapshot(Snapshot("a", 2, result.last_hash, "v1", b"state"))


async def test_a_store_in_a_directory_that_cannot_be_written_is_read_and_refuses_writes(
    frozen: Path,
) -> None:
    # A closed store leaves no WAL files; SQLite needs to make them (its -shm file) beside
    # the file to read a WAL-mode file. In a directory it may not write it refused even
    # to read ('unable to open database file'): the file is read as it is instead.
    path = frozen / "runs.db"
    await _fill(path)
    before = path.read_bytes()
    _chattr("+i", frozen)
    with anyio.fail_after(DEADLINE):
        async with SqliteEventStore(path, create=False) as store:
            assert sorted(run.run_id for run in await store.list_runs()) == ["a", "b"]
            assert [e.seq for e in await store.read_all("a", verify=True)] == [1, 2]
            assert (await store.verify("a")).ok and (await store.verify("b")).ok
            snapshot = await store.load_snapshot("a")
            assert snapshot is not None and snapshot.data == b"state"
            with pytest.raises(StoreFileError) as refused:
                await store.append("a", written(9), expected_seq=2)
            assert str(refused.value) == (
                f"{path}: cannot write to the event store: its directory {frozen} is not "
                "writable (a store keeps its WAL files there), so it was opened for reading only"
            )
            with pytest.raises(StoreFileError, match="is not writable"):
                await store.claim("b", "me", lease=5.0)
            assert len(await store.read_all("a")) == 2
    assert path.read_bytes() == before
    assert sorted(os.listdir(frozen)) == ["runs.db"]


async def test_a_new_store_in_a_directory_that_cannot_be_written_says_so(frozen: Path) -> None:
    _chattr("+i", frozen)
    path = frozen / "runs.db"
    with anyio.fail_after(DEADLINE), pytest.raises(StoreFileError) as refused:
        async with SqliteEventStore(path):
            pass
    assert str(refused.value) == (
        f"{path}: cannot create the event store: unable to open database file: "
        f"its directory {frozen} is not writable"
    )


async def test_an_older_store_that_cannot_be_written_says_it_must_be_upgraded_first(
    tmp_path: Path,
) -> None:
    # It said only 'attempt to write a readonly database'.
    path = tmp_path / "runs.db"
    await _fill(path)
    downgrade(path, 8)
    _chattr("+i", path)
    try:
        with anyio.fail_after(DEADLINE), pytest.raises(StoreFileError) as refused:
            async with SqliteEventStore(path, create=False):
                pass
    finally:
        _chattr("-i", path)
    assert str(refused.value) == (
        f"{path}: cannot open or read the event store: the file is read-only (attempt to "
        "write a readonly database), and the store (schema version 8) must be upgraded to "
        "9, which writes to it: open it once where it can be written"
    )
    with anyio.fail_after(DEADLINE):
        async with SqliteEventStore(path, create=False) as store:
            assert (await store.verify("a")).ok


async def test_a_write_lock_held_past_the_busy_timeout_is_said_to_be_held_elsewhere(
    tmp_path: Path,
) -> None:
    # Opening an older store upgrades it under the write lock. Another process that keeps
    # the lock longer than the 10 s an opener waits (its own upgrade of a large store, or
    # a process stopped while writing) made it fail with only 'database is locked'.
    path = tmp_path / "runs.db"
    await _fill(path)
    downgrade(path, 8)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with anyio.fail_after(DEADLINE), pytest.raises(StoreFileError) as refused:
            async with SqliteEventStore(path):
                pass
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert str(refused.value) == (
        f"{path}: cannot open or read the event store: database is locked: another process "
        "has held its write lock for over 10 s (upgrading a large store, or stopped while "
        "writing); try again once it is done"
    )
    with anyio.fail_after(DEADLINE):
        async with SqliteEventStore(path) as store:
            assert len(await store.list_runs()) == 2


_WRITER = r"""
import asyncio, sys
from eventstore import SqliteEventStore
from runtime.events import MemoryWritten
from tests.eventstore.test_sqlite_file import downgrade
async def main(path):
    store = SqliteEventStore(path)
    await store.open()
    for seq in range(1, 1_000_000):
        await store.append("r", [MemoryWritten(key="k", value=seq)], expected_seq=seq - 1)
        print(seq, flush=True)  # committed
asyncio.run(main(sys.argv[1]))
"""


async def test_a_killed_writers_wal_in_a_directory_that_cannot_be_written_is_not_passed_over(
    frozen: Path,
) -> None:
    # A writer killed mid-run leaves its commits in runs.db-wal. Without a -shm file (and
    # no way to make one), SQLite cannot read them: reading the file as it is would miss
    # them, so the store refuses, saying what to do; once it may, nothing is lost.
    path = frozen / "runs.db"
    with anyio.fail_after(DEADLINE):
        writer = await anyio.open_process([sys.executable, "-c", _WRITER, str(path)])
        assert writer.stdout is not None
        lines = BufferedByteReceiveStream(writer.stdout)
        committed = 0
        while committed < 30:
            committed = int(await lines.receive_until(b"\n", 100))
        writer.send_signal(signal.SIGKILL)
        await writer.wait()
        await writer.aclose()
    assert (frozen / "runs.db-wal").stat().st_size > 0
    (frozen / "runs.db-shm").unlink()
    _chattr("+i", frozen)
    with anyio.fail_after(DEADLINE), pytest.raises(StoreFileError) as refused:
        async with SqliteEventStore(path, create=False):
            pass
    assert f"its directory {frozen} is not writable" in str(refused.value)
    assert "may hold commits not yet merged" in str(refused.value)
    assert "make the directory writable and open the store once" in str(refused.value)
    _chattr("-i", frozen)
    with anyio.fail_after(DEADLINE):
        async with SqliteEventStore(path, create=False) as store:
            seqs = [e.seq for e in await store.read_all("r", verify=True)]
            assert seqs[:committed] == list(range(1, committed + 1))
            assert (await store.verify("r")).ok


async def test_a_dangling_symbolic_link_names_the_missing_directory(tmp_path: Path) -> None:
    link = tmp_path / "runs.db"
    link.symlink_to(tmp_path / "gone" / "runs.db")
    with anyio.fail_after(DEADLINE), pytest.raises(StoreFileError) as refused:
        async with SqliteEventStore(link):
            pass
    assert str(refused.value) == (
        f"{link}: cannot open or read the event store: its directory {tmp_path / 'gone'} "
        f"does not exist (it is a symbolic link to {tmp_path / 'gone' / 'runs.db'})"
    )


async def test_a_store_cut_short_says_so(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SqliteEventStore(path) as store:
        for n in range(200):
            await store.append(f"r{n}", written("x" * 500), expected_seq=0)
    size = path.stat().st_size
    os.truncate(path, size - 4096)  # a copy that stopped early
    with anyio.fail_after(DEADLINE), pytest.raises(StoreFileError) as refused:
        async with SqliteEventStore(path):
            pass
    assert str(refused.value).endswith(
        f": the file is cut short ({size - 4096} bytes, its header says {size}); "
        "restore it from a backup"
    )


async def test_a_store_path_that_looks_like_a_uri_is_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite (built to read URIs anywhere, as Debian's is) opened 'file:runs.db' as
    # runs.db: not the file the store checked, nor the one its heads file is named after.
    monkeypatch.chdir(tmp_path)
    with anyio.fail_after(DEADLINE):
        async with SqliteEventStore("file:runs.db") as store:
            await store.append("r", written(1), expected_seq=0)
            assert len(await store.read_all("r")) == 1
    assert sorted(os.listdir(tmp_path)) == ["file:runs.db"]


_FILLER = r"""
import asyncio, os, sys
from eventstore import SqliteEventStore, StoreError
from runtime.events import MemoryWritten
from tests.eventstore.test_sqlite_file import downgrade
async def main(path):
    async with SqliteEventStore(path) as store:
        for n in range(1000):
            try:
                body = [MemoryWritten(key="k", value=os.urandom(20_000).hex())]
                await store.append(f"r{n}", body, expected_seq=0)
            except StoreError as exc:
                print(n, type(exc).__name__, exc)
                return
asyncio.run(main(sys.argv[1]))
"""

#: The file size limit of the processes that fill a disk (Python ignores SIGXFSZ: a write
#: past it fails with EFBIG, as on a full disk).
LIMIT = 1_000_000


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


async def test_an_append_the_disk_refuses_says_why_and_what_was_committed_stays(
    tmp_path: Path,
) -> None:
    # It said 'append failed: disk I/O error'.
    path = tmp_path / "runs.db"
    with anyio.fail_after(DEADLINE):
        done = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, "-c", _FILLER, str(path)],
                capture_output=True,
                text=True,
                timeout=DEADLINE,
                preexec_fn=_limit,
            )
        )
    assert done.returncode == 0, done.stderr
    failed_at, kind, message = done.stdout.strip().split(" ", 2)
    assert kind == "StoreError"
    assert message == (
        f"{path}: append failed: disk I/O error: the file could not grow: it reached this "
        f"process's file size limit ({LIMIT} bytes)"
    )
    with anyio.fail_after(DEADLINE):
        async with SqliteEventStore(path, create=False) as store:
            runs = await store.list_runs(limit=1000)
            assert len(runs) == int(failed_at) > 0
            for run in runs:
                assert (await store.verify(run.run_id)).ok


_HEADS = r"""
import logging, sys
from eventstore import HeadsFile
logging.basicConfig(format="%(message)s")
heads = HeadsFile(sys.argv[1])
heads.record("first", 1, "ab" * 32)
assert heads.flush()
for n in range(40):  # one write of about 7 kB: cut short at the limit
    heads.record(f"run-{n}", 1, "ab" * 32)
heads.close()
"""


def test_heads_a_file_size_limit_cuts_short_are_said_to_be_lost(tmp_path: Path) -> None:
    # os.write writes what fits and returns how much: the rest of the batch was dropped
    # without a word. The writer writes on, and the limit's refusal is logged.
    path = tmp_path / "runs.db.heads"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    done = subprocess.run(
        [sys.executable, "-c", _HEADS, str(path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        preexec_fn=limit,
    )
    assert done.returncode == 0, done.stderr
    assert f"could not record 40 head(s) in {path}: [Errno 27] File too large" in done.stderr
    kept = read_heads_file(path)
    assert kept.ok and 1 < len(kept.heads) < 41 and path.stat().st_size == 2000
    # With room again, the next writer ends the cut line and links on from it.
    heads = HeadsFile(path)
    heads.record("later", 1, "cd" * 32)
    heads.close()
    kept = read_heads_file(path)
    assert kept.ok and kept.heads[-1].run_id == "later"
