"""The read model (runtime.reads.RunReader) on a real SQLite file: every read says what it
checked of the hash chain, and a broken log is answered, never raised."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import RunNotFoundError, RunStateError, Runtime
from runtime.reads import RunReader
from runtime.testing import linear_graph

pytestmark = pytest.mark.anyio


def _writer(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def write(inputs: dict[str, Any]) -> dict[str, Any]:
        return {name: f"value of {name}"}

    return write


FUNCTIONS = {name: _writer(name) for name in "abcd"}


async def _run(path: Path) -> str:
    async with Runtime(path, functions=FUNCTIONS) as rt:
        result = await (await rt.start(linear_graph(list("abcd")))).result()
    assert result.status == "completed"
    return result.run_id


def _edit(path: Path, old: bytes, new: bytes) -> None:
    db = sqlite3.connect(path)
    with db:
        rows = db.execute("SELECT position, body FROM events").fetchall()
        edited = [(bytes(b).replace(old, new), p) for p, b in rows if old in bytes(b)]
        assert len(edited) == 1
        db.executemany("UPDATE events SET body = ? WHERE position = ?", edited)
    db.close()


async def test_reads_of_an_intact_run_check_what_they_read(tmp_path: Path) -> None:
    run_id = await _run(tmp_path / "runs.db")
    async with Runtime(tmp_path / "runs.db") as rt:
        assert rt.store is not None
        reader = RunReader(rt.store)
        view = await reader.state(run_id)
        assert view.state == await rt.get_state(run_id)
        assert (view.chain.ok, view.chain.scope, view.chain.from_seq) == (True, "full", 1)
        assert view.chain.to_seq == view.state.last_seq
        back = await reader.state(run_id, at_seq=3)
        assert back.state.last_seq == 3 and back.chain.to_seq == 3
        with pytest.raises(ValueError, match="past the run's last event"):
            await reader.state(run_id, at_seq=view.state.last_seq + 1)
        with pytest.raises(RunNotFoundError):
            await reader.state("ghost")
        report = await reader.report(run_id)
        assert report.chain.ok and report.events == view.state.last_seq
        assert report.path == ["a", "b", "c", "d"] and report.forked_from is None
        page = await reader.events(run_id, after=2, limit=3, types=["node."])
        events = await rt.read_events(run_id)
        expected = [
            e.seq for e in events if e.seq > 2 and e.body.__class__.__name__.startswith("Node")
        ]
        assert [e.seq for e in page.events] == expected[:3]
        assert all(e.type.startswith("node.") for e in page.events)
        assert page.chain.ok and page.chain.from_seq == 3


async def test_an_edited_run_is_read_with_the_break_named(tmp_path: Path) -> None:
    run_id = await _run(tmp_path / "runs.db")
    _edit(tmp_path / "runs.db", b"value of c", b"value of X")
    async with Runtime(tmp_path / "runs.db") as rt:
        assert rt.store is not None
        reader = RunReader(rt.store)
        view = await reader.state(run_id)
        assert not view.chain.ok and view.chain.reason
        broken_at = view.chain.broken_at
        assert broken_at is not None and 1 < broken_at <= view.state.last_seq
        assert view.state.memory["c"] == "value of X"  # what the log holds, marked broken
        records = [(event.seq, chain) async for event, chain in reader.records(run_id)]
        assert [seq for seq, _ in records] == list(range(1, view.state.last_seq + 1))
        *_, (_, last) = records
        assert last is not None and (last.ok, last.broken_at) == (False, broken_at)
        assert last.to_seq == view.state.last_seq
        assert (await reader.detail(run_id)).chain == view.chain
        # Nothing forged is carried on: a fork of the edited prefix is refused.
        with pytest.raises(Exception, match="corrupt log"):
            await rt.fork(run_id, view.state.last_seq - 1)
        assert [r.run_id for r in await rt.store.list_runs()] == [run_id]


async def test_approve_refuses_a_run_that_is_not_paused(tmp_path: Path) -> None:
    run_id = await _run(tmp_path / "runs.db")
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        with pytest.raises(RunStateError, match="it waits at no gate"):
            await rt.approve(run_id, input={"x": 1}, by="ann")
        with pytest.raises(RunNotFoundError):
            await rt.approve("ghost", by="ann")


@pytest.mark.parametrize(
    "bad",
    ["", "   ", "a/b", "nul\x00", "tab\there", "end\n", "x" * 201, "\ud800", ".", "..", "..."],
)
async def test_a_run_id_no_front_could_name_is_refused_before_anything_is_written(
    tmp_path: Path, bad: str
) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        assert rt.store is not None
        with pytest.raises(ValueError, match="run id"):
            await rt.start(linear_graph(["a"]), run_id=bad)
        assert await rt.store.list_runs() == []
        done = await (await rt.start(linear_graph(["a"]), run_id="ok.id:1-x_y")).result()
        assert done.status == "completed"


async def test_a_summary_looks_past_a_trailing_snapshot_event(tmp_path: Path) -> None:
    # The owner's snapshot.taken may follow the event that paused or ended the run.
    from tests.runtime.snapshot_support import save_bound_snapshot

    gated = linear_graph(["a", "b"])
    gated = msgspec.structs.replace(gated, pause_nodes=["b"])
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        assert rt.store is not None
        paused = await (await rt.start(gated)).result()
        assert paused.status == "paused"
        await save_bound_snapshot(rt.store, await rt.get_state(paused.run_id))
        events = await rt.read_events(paused.run_id)
        assert events[-1].body.__class__.__name__ == "SnapshotTaken"
        summary = await RunReader(rt.store).summary(paused.run_id)
        assert summary.paused is not None and summary.paused.node_id == "b"
        assert summary.paused.waiting_for == []
