"""A store file that cannot be written: an append fails with StoreFileError saying the file
is read-only (nothing of the batch written), which the CLI reports as one line, exit 2."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from eventstore import SqliteEventStore, StoreFileError
from eventstore._writer import _failed
from runtime.events import MemoryWritten
from tests.cli.conftest import MAGISTRATE

pytestmark = pytest.mark.anyio


def test_a_read_only_refusal_from_sqlite_is_said_as_such(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    sqlite3.connect(path).execute("CREATE TABLE t (a)").connection.close()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as refused:
        conn.execute("INSERT INTO t VALUES (1)")
    conn.close()
    error = _failed(str(path), refused.value)
    assert isinstance(error, StoreFileError) and error.__cause__ is refused.value
    assert str(error).startswith(f"{path}: cannot write to the event store: the file is read-only")
    other = _failed(str(path), sqlite3.OperationalError("disk I/O error"))
    assert type(other) is not StoreFileError and "append failed: disk I/O error" in str(other)


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Path]:
    """A store whose file the system refuses to change (``chattr +i``; root ignores modes)."""
    path = tmp_path / "runs.db"
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    yield path
    subprocess.run(["chattr", "-i", str(path)], check=False, capture_output=True)


async def test_appends_to_an_immutable_store_fail_saying_it_is_read_only(immutable: Path) -> None:
    async with SqliteEventStore(immutable) as store:
        await store.append("r", [MemoryWritten(key="k", value=1)], expected_seq=0)
    made = await anyio.run_process(["chattr", "+i", str(immutable)], check=False)
    if made.returncode != 0:
        pytest.skip(f"the file system refuses chattr +i: {made.stderr.decode().strip()}")
    async with SqliteEventStore(immutable) as store:
        with pytest.raises(StoreFileError, match="the file is read-only"):
            await store.append("r", [MemoryWritten(key="k", value=2)], expected_seq=1)
        assert len(await store.read_all("r")) == 1
    done = await anyio.run_process(
        [str(MAGISTRATE), "cancel", "r", "--store", str(immutable)], check=False
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().strip().splitlines() == [
        f"magistrate: error: {immutable}: cannot write to the event store: the file is read-only "
        "(attempt to write a readonly database)"
    ]
