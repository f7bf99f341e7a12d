"""The heads file: a run's owner records its head when it pauses or ends, and verify
catches a log that lost its tail or was rechained consistently after that, which the
chain alone cannot (SQLite and PostgreSQL)."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import (
    PostgresEventStore,
    SqliteEventStore,
    read_heads_file,
)
from runtime import EdgeSpec, GraphSpec, NodeSpec, Runtime
from runtime.reads import RunReader

from ..pgsupport import PG_URL, schema_prefix

pytestmark = pytest.mark.anyio

GRAPH = GraphSpec(
    id="pay",
    nodes=[
        NodeSpec(id="a", function="step", input_keys=["amount"], output_keys=["paid"]),
        NodeSpec(id="b", function="step", input_keys=["amount"], output_keys=["paid"]),
    ],
    edges=[EdgeSpec(source="a", target="b")],
    entry_node="a",
    terminal_nodes=["b"],
    pause_nodes=["b"],
)


async def step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"paid": inputs["amount"]}


async def paused_then_completed(store: Any, run_id: str, amount: int) -> None:
    async with store, Runtime(store, functions={"step": step}) as rt:
        handle = await rt.start(GRAPH, input={"amount": amount}, run_id=run_id)
        assert (await handle.result()).status == "paused"
        resumed = await rt.approve(run_id, by="ops")
        assert resumed is not None
        assert (await resumed.result()).status == "completed"


def edit_last_line(heads: Path) -> list[str]:
    """Change the last head's seq, keeping its link; return the lines."""
    lines = heads.read_text().splitlines(keepends=True)
    lines[-1] = lines[-1].replace('"seq":', '"seq":1', 1)
    heads.write_text("".join(lines))
    return lines


def sqlite_store(path: Path) -> SqliteEventStore:
    return SqliteEventStore(path, heads_file=f"{path}.heads")


async def test_the_writer_records_a_head_after_each_commit_and_verify_checks_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    await paused_then_completed(sqlite_store(path), "r1", 100)
    kept = read_heads_file(f"{path}.heads")
    assert kept.ok
    async with sqlite_store(path) as store:
        events = await store.read_all("r1")
        # The run's first commit (its start and its first node's), then the newest head of
        # each later gathering of 50 ms, up to the end's: each a head of the log then.
        heads = [(h.run_id, h.seq) for h in kept.heads]
        assert heads[0] == ("r1", 2)
        assert heads[-1] == ("r1", events[-1].seq)
        assert [seq for _, seq in heads] == sorted({seq for _, seq in heads})
        by_seq = {e.seq: e.hash for e in events}
        assert all(by_seq[h.seq] == h.hash for h in kept.heads)
        assert (await RunReader(store).verify("r1")).ok


async def test_a_running_run_has_its_head_in_the_file_before_it_pauses_or_ends(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    release = anyio.Event()

    async def slow(inputs: dict[str, Any]) -> dict[str, Any]:
        await release.wait()
        return {"paid": inputs["amount"]}

    store = sqlite_store(path)
    async with store, Runtime(store, functions={"step": slow}) as rt:
        handle = await rt.start(GRAPH, input={"amount": 7}, run_id="r2")
        # Node a runs and will not end until released: only commits of a running run so
        # far, and a crash now would lose nothing the heads file does not know of.
        assert store.heads_file is not None
        await anyio.to_thread.run_sync(store.heads_file.flush)
        kept = read_heads_file(f"{path}.heads")
        state = await rt.get_state("r2")
        assert state.status == "running" and kept.heads[-1].seq == state.last_seq == 2
        release.set()
        assert (await handle.result()).status == "paused"


async def test_verify_fails_a_log_that_lost_its_tail_after_its_head_was_recorded(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    await paused_then_completed(sqlite_store(path), "r1", 100)
    # Roll the run back by its last commit, as a damaged WAL would; the rest chains.
    db = sqlite3.connect(path)
    with db:
        (key,) = db.execute("SELECT run FROM runs WHERE run_id = 'r1'").fetchone()
        db.execute(
            "DELETE FROM events WHERE position = (SELECT max(position) FROM events WHERE run = ?)",
            (key,),
        )
        db.execute(
            "UPDATE runs SET last_seq = (SELECT max(seq + length(hash) / 32 - 1) "
            "FROM events WHERE run = ?), last_hash = (SELECT substr(hash, -32) FROM events "
            "WHERE run = ? ORDER BY seq DESC LIMIT 1), status = 'running' WHERE run = ?",
            (key, key, key),
        )
    db.close()
    async with SqliteEventStore(path) as plain:
        assert (await plain.verify("r1")).ok  # the chain alone sees nothing wrong
    async with sqlite_store(path) as store:
        report = await RunReader(store).verify("r1")
    newest = read_heads_file(f"{path}.heads").heads[-1]
    assert not report.ok and report.broken_at == newest.seq
    assert report.reason is not None and report.reason.startswith("log lost its tail")
    assert f"{path}.heads" in report.reason


async def test_verify_fails_a_log_rewritten_with_a_consistent_chain(tmp_path: Path) -> None:
    path, forged = tmp_path / "runs.db", tmp_path / "forged.db"
    await paused_then_completed(sqlite_store(path), "r1", 100)
    # The same run with another amount, its own chain intact, put in the store's place.
    await paused_then_completed(SqliteEventStore(forged), "r1", 999999)
    shutil.copyfile(forged, path)
    async with sqlite_store(path) as store:
        assert (await store.verify("r1")).ok
        report = await RunReader(store).verify("r1")
    assert not report.ok
    assert report.reason is not None and "hash at the kept head's seq differs" in report.reason


async def test_an_edited_heads_file_line_is_reported_and_the_lines_before_it_still_count(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    await paused_then_completed(sqlite_store(path), "r1", 100)
    await paused_then_completed(sqlite_store(path), "r2", 100)
    heads = Path(f"{path}.heads")
    lines = edit_last_line(heads)
    assert len(lines) >= 4
    kept = read_heads_file(heads)
    assert not kept.ok and kept.broken_line == len(lines)
    assert kept.reason is not None and "link does not follow" in kept.reason
    assert len(kept.heads) == len(lines) - 1


@pytest.fixture
def pg_prefix() -> Iterator[str]:
    yield from schema_prefix()


async def test_postgresql_a_cut_tail_fails_verify_against_the_heads_file(
    tmp_path: Path, pg_prefix: str
) -> None:
    import psycopg
    from psycopg import sql

    schema = f"{pg_prefix}_heads"
    heads = tmp_path / "pg.heads"
    await paused_then_completed(
        PostgresEventStore(PG_URL, schema=schema, heads_file=heads), "r1", 100
    )
    assert read_heads_file(heads).heads[-1].run_id == "r1"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        key, last = conn.execute("SELECT run, last_seq FROM runs WHERE run_id = 'r1'").fetchone()
        conn.execute("DELETE FROM events WHERE run = %s AND seq = %s", (key, last))
        conn.execute(
            "UPDATE runs SET last_seq = e.seq, last_hash = e.hash FROM events e "
            "WHERE runs.run = %s AND e.run = %s AND e.seq = %s",
            (key, key, last - 1),
        )
    async with PostgresEventStore(PG_URL, schema=schema, heads_file=heads) as store:
        assert (await store.verify("r1")).ok
        report = await RunReader(store).verify("r1")
    assert not report.ok and report.reason is not None
    assert report.reason.startswith("log lost its tail")
