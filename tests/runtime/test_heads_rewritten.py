"""A log rewritten with a consistent chain and then extended: the heads recorded after the
rewrite match it, the ones recorded before do not. Every recorded head counts, so verify,
the auditor's report (``magistrate show``, the API's run), replay and fork all refuse it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eventstore import CorruptLogError, Event, RecordedHead, SqliteEventStore, read_heads_file
from runtime import Runtime
from runtime.events import RunStarted
from runtime.reads import RunReader
from runtime.reads._heads import heads_missing

from .test_heads_file import GRAPH, sqlite_store, step

pytestmark = pytest.mark.anyio


async def _paused(store: SqliteEventStore, amount: int) -> int:
    """Run ``r1`` to its gate on ``store``; the seq it paused at."""
    async with store, Runtime(store, functions={"step": step}) as rt:
        result = await (await rt.start(GRAPH, input={"amount": amount}, run_id="r1")).result()
        assert result.status == "paused"
        return (await rt.get_state("r1")).last_seq


async def test_a_log_rewritten_then_extended_fails_every_check(tmp_path: Path) -> None:
    path, forged = tmp_path / "runs.db", tmp_path / "forged.db"
    paused_at = await _paused(sqlite_store(path), 100)
    # The same run paused with another amount, its own chain intact, in the store's place.
    assert await _paused(SqliteEventStore(forged), 999999) == paused_at
    shutil.copyfile(forged, path)
    # The run goes on from the forged log: its owner records heads that match it.
    async with sqlite_store(path) as store, Runtime(store, functions={"step": step}) as rt:
        handle = await rt.approve("r1", by="ops")
        assert handle is not None
        assert (await handle.result()).memory["paid"] == 999999
    heads = [h for h in read_heads_file(f"{path}.heads").heads if h.run_id == "r1"]
    assert heads[-1].seq > paused_at  # the newest head is the forged log's own

    async with sqlite_store(path) as store, Runtime(store, functions={"step": step}) as rt:
        assert (await store.verify("r1")).ok  # the chain alone sees nothing wrong
        reader = RunReader(store)
        report = await reader.verify("r1")
        assert not report.ok and report.broken_at is not None
        assert report.broken_at <= paused_at
        assert report.reason is not None and "hash at the kept head's seq differs" in report.reason
        chain = (await reader.report("r1")).chain
        assert (chain.ok, chain.broken_at, chain.reason) == (False, report.broken_at, report.reason)
        with pytest.raises(CorruptLogError, match="hash at the kept head's seq differs"):
            await rt.replay("r1")
        with pytest.raises(CorruptLogError, match="hash at the kept head's seq differs"):
            await rt.fork("r1", paused_at)
        # A prefix before every recorded head has none to be checked against: it forks.
        first = min(h.seq for h in heads)
        assert first == 2  # the first commit: run.started and the first node.started
        forked = await rt.fork("r1", 1)
        assert (await rt.get_state(forked.run_id)).forked_from is not None


def test_heads_missing_names_the_first_head_the_events_do_not_hold() -> None:
    events = [
        Event(
            run_id="r",
            seq=seq,
            position=seq,
            ts=0.0,
            version=1,
            prev_hash="",
            hash=f"h{seq}",
            body=RunStarted(graph={}, graph_hash="", entry="a"),
        )
        for seq in (1, 2, 3)
    ]

    def head(seq: int, hash: str) -> RecordedHead:
        return RecordedHead(run_id="r", seq=seq, hash=hash)

    assert heads_missing(events, [head(2, "h2"), head(3, "h3")]) is None
    assert heads_missing(events, [head(3, "h3"), head(2, "x")]) == (
        2,
        "hash at the kept head's seq differs",
    )
    assert heads_missing(events, [head(2, "h2"), head(5, "h5")]) == (
        5,
        "log lost its tail: the kept head is seq 5, the log ends before it",
    )
    assert heads_missing(events, [head(2, "h2"), head(2, "other")]) == (
        2,
        "two different hashes were recorded at this seq (a rewritten log)",
    )
