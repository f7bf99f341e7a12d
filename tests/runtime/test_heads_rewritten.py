"""A log rewritten with a consistent chain and then extended: the heads recorded after the
rewrite match it, the ones recorded before do not. Every recorded head counts, so verify,
the auditor's report (``magistrate show``, the API's run), replay and fork all refuse it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eventstore import (
    CorruptLogError,
    Event,
    HeadsFile,
    RecordedHead,
    SqliteEventStore,
    read_heads_file,
)
from runtime import Runtime
from runtime.events import RunStarted
from runtime.reads import RunReader
from runtime.reads._heads import HeadsCache, heads_missing

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
    # The same run paused with another amount, its own chain intact, and approved there.
    assert await _paused(SqliteEventStore(forged), 999999) == paused_at
    async with SqliteEventStore(forged) as store, Runtime(store, functions={"step": step}) as rt:
        handle = await rt.approve("r1", by="ops")
        assert handle is not None
        assert (await handle.result()).memory["paid"] == 999999
        ended = await rt.get_state("r1")
    # In the store's place, with its head recorded after the ones the real run left: as
    # if an owner had gone on from the forged log (this runtime refuses to: see below).
    shutil.copyfile(forged, path)
    recorder = HeadsFile(f"{path}.heads")
    recorder.record("r1", ended.last_seq, ended.last_hash)
    recorder.close()
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
        assert first >= 2  # the first commit: run.started and the first node.started
        forked = await rt.fork("r1", first - 1)
        assert (await rt.get_state(forked.run_id)).forked_from is not None


async def test_a_log_rewritten_while_its_run_waits_is_not_approved_resumed_or_rejected(
    tmp_path: Path,
) -> None:
    """The payment gate: the log is rechained with another amount while the run waits at
    its gate. The chain checks out, the heads recorded at the pause do not: every control
    refuses the run, nothing is appended, and a read of its state says so."""
    path, forged = tmp_path / "runs.db", tmp_path / "forged.db"
    paused_at = await _paused(sqlite_store(path), 100)
    assert await _paused(SqliteEventStore(forged), 999999) == paused_at
    shutil.copyfile(forged, path)
    async with sqlite_store(path) as store, Runtime(store, functions={"step": step}) as rt:
        for control in (
            rt.approve("r1", by="ops"),
            rt.reject("r1", by="ops", reason="no"),
            rt.resume("r1"),
        ):
            with pytest.raises(CorruptLogError, match="hash at the kept head's seq differs"):
                await control
        assert (await store.get_run("r1")).last_seq == paused_at  # type: ignore[union-attr]
        # A read of its state (``magistrate state``, the dashboard) says its chain is broken.
        chain = (await RunReader(store).state("r1")).chain
        assert not chain.ok and chain.broken_at is not None and chain.broken_at <= paused_at
        assert chain.reason is not None and "hash at the kept head's seq differs" in chain.reason


async def test_a_log_that_lost_its_tail_is_not_approved(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    paused_at = await _paused(sqlite_store(path), 100)
    async with sqlite_store(path) as store:
        last = (await store.read_all("r1"))[-1]
    # A head past the log's end: the events after it were cut (and the run row set back).
    recorder = HeadsFile(f"{path}.heads")
    recorder.record("r1", paused_at + 2, last.hash)
    recorder.close()
    async with sqlite_store(path) as store, Runtime(store, functions={"step": step}) as rt:
        with pytest.raises(CorruptLogError, match="log lost its tail"):
            await rt.approve("r1", by="ops")


async def test_a_read_checks_the_heads_at_its_seqs_and_the_newest_around_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    paused_at = await _paused(sqlite_store(path), 100)
    async with sqlite_store(path) as store:
        events = await store.read_all("r1")
        cache = HeadsCache(store.heads_file)
        recorded = [h for h in read_heads_file(f"{path}.heads").heads if h.run_id == "r1"]
        assert recorded[-1].seq == paused_at
        # A read of the run's first events only: the newest head, after them, is read on
        # its own (appended since the read, as a live run's are) and holds.
        assert await cache.check_read(store, "r1", events[:2], 1) is None
        # A read from seq 3 on: the heads before it (seq 2) are read on their own.
        assert await cache.check_read(store, "r1", events[2:], 3) is None
        # A head recorded later with another hash at a seq inside, before or after the read.
        for seq, read, first in ((2, events, 1), (2, events[3:], 4), (paused_at, events[:2], 1)):
            recorder = HeadsFile(f"{path}.heads")
            recorder.record("r1", seq, "0" * 64)
            recorder.close()
            missing = await cache.check_read(store, "r1", read, first)
            assert missing is not None and missing[0] == seq, (seq, first)
            assert ("differs" in missing[1]) != ("two different hashes" in missing[1])
            assert f"{path}.heads" in missing[1]
            _drop_last_line(f"{path}.heads")


def _drop_last_line(path: str) -> None:
    with open(path, "rb+") as file:
        lines = file.read().splitlines(keepends=True)
        file.truncate(sum(len(line) for line in lines[:-1]))


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
