"""The file is the fence: stores in several processes appending to one run on one file.

Every append is checked against the run's last seq as the file records it, inside the
transaction, whatever the writer's cache says; the loser of a race gets ConcurrencyError
and writes nothing. These tests start real processes.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from eventstore import ConcurrencyError, SqliteEventStore
from runtime.events import NodeCompleted, NodeStarted, RunStarted

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 60

# One racer: appends a step of three events (node started / memory / completed, all
# naming the racer) at what it believes is the run's last seq; learns the real one only
# from a ConcurrencyError. Prints its acknowledged appends and its conflicts as JSON.
RACER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    sys.path.insert(0, {root!r})
    from eventstore import ConcurrencyError, SqliteEventStore
    from runtime.events import MemoryWritten, NodeCompleted, NodeStarted

    NAME, PATH, GO, ROUNDS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    async def main():
        acknowledged, conflicts, seq = [], 0, 0
        async with SqliteEventStore(PATH) as store:
            open(PATH + "." + NAME + ".ready", "w").close()
            while not os.path.exists(GO):
                time.sleep(0.001)
            for visit in range(1, ROUNDS + 1):
                step = [
                    NodeStarted(node_id=NAME, visit=visit),
                    MemoryWritten(key="by", value=NAME, node_id=NAME),
                    NodeCompleted(node_id=NAME),
                ]
                while True:
                    try:
                        result = await store.append("race", step, expected_seq=seq)
                    except ConcurrencyError as exc:
                        conflicts += 1
                        seq = exc.actual_seq
                        continue
                    acknowledged.append([result.first_seq, result.last_seq])
                    seq = result.last_seq
                    break
        print(json.dumps({{"acknowledged": acknowledged, "conflicts": conflicts}}))

    asyncio.run(main())
    """
)


async def _race(path: Path, names: list[str]) -> dict[str, dict[str, list[list[int]] | int]]:
    script = RACER.format(root=str(ROOT))
    go = path.with_name("go")
    outcomes: dict[str, dict[str, list[list[int]] | int]] = {}

    async def racer(name: str) -> None:
        done = await anyio.run_process(
            [sys.executable, "-c", script, name, str(path), str(go), str(ROUNDS)], check=False
        )
        assert done.returncode == 0, done.stderr.decode()
        outcomes[name] = json.loads(done.stdout)

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(racer, name)
        # Start them together: each has its store open before any appends.
        with anyio.fail_after(30):
            while not all(path.with_name(f"{path.name}.{n}.ready").exists() for n in names):  # noqa: ASYNC110 (files from other processes)
                await anyio.sleep(0.01)
        go.touch()
    return outcomes


async def test_stores_in_two_processes_race_on_one_run_and_every_seq_is_written_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:  # the run exists before the race
        await store.append(
            "race", [RunStarted(graph={}, graph_hash="g", entry="a")], expected_seq=0
        )
    outcomes = await _race(path, ["p1", "p2"])

    # Each racer got every one of its steps in; the one that found the run moved on got
    # ConcurrencyError (both started at seq 0 and the run was at 1: at least two).
    conflicts = [outcome["conflicts"] for outcome in outcomes.values()]
    assert all(isinstance(c, int) for c in conflicts) and sum(conflicts) >= 2  # type: ignore[arg-type]
    ranges = {
        name: [tuple(r) for r in outcome["acknowledged"]]  # type: ignore[union-attr]
        for name, outcome in outcomes.items()
    }
    assert all(len(acknowledged) == ROUNDS for acknowledged in ranges.values())
    async with SqliteEventStore(path) as store:
        events = await store.read_all("race")
        report = await store.verify("race")
        info = await store.get_run("race")
    # Every seq exactly once, nothing of a refused append, and the chain holds.
    assert [e.seq for e in events] == list(range(1, 1 + 2 * ROUNDS * 3 + 1))
    assert report.ok and report.checked == len(events)
    assert info is not None and info.last_seq == len(events)
    # No interleaving: each acknowledged append is three consecutive events of its racer,
    # and together the racers' appends cover the log after run.started exactly.
    covered: list[int] = []
    for name, acknowledged in ranges.items():
        for first, last in acknowledged:
            assert last - first == 2
            step = events[first - 1 : last]
            assert isinstance(step[0].body, NodeStarted) and step[0].body.node_id == name
            assert isinstance(step[2].body, NodeCompleted) and step[2].body.node_id == name
            covered += range(first, last + 1)
    assert sorted(covered) == list(range(2, len(events) + 1))


async def test_a_store_whose_cache_is_stale_gets_a_conflict_and_writes_nothing(
    tmp_path: Path,
) -> None:
    # Store a's writer has seen the run at seq 4; another process's store moved it on.
    # a's cache still says 4, so only the file can tell: its append at 4 is refused.
    path = tmp_path / "s.db"
    started = RunStarted(graph={}, graph_hash="g", entry="a")
    steps = [NodeStarted(node_id="a", visit=1), NodeCompleted(node_id="a")]
    async with SqliteEventStore(path) as a:
        await a.append("r1", [started, *steps, NodeStarted(node_id="b", visit=1)], expected_seq=0)
        other = await anyio.run_process(
            [
                sys.executable,
                "-c",
                textwrap.dedent(
                    f"""
                    import asyncio, sys
                    sys.path.insert(0, {str(ROOT)!r})
                    from eventstore import SqliteEventStore
                    from runtime.events import NodeCompleted

                    async def main():
                        async with SqliteEventStore({str(path)!r}) as b:
                            await b.append("r1", [NodeCompleted(node_id="b")], expected_seq=4)

                    asyncio.run(main())
                    """
                ),
            ],
            check=False,
        )
        assert other.returncode == 0, other.stderr.decode()
        with pytest.raises(ConcurrencyError) as caught:
            await a.append("r1", [NodeCompleted(node_id="stale")], expected_seq=4)
        assert (caught.value.expected_seq, caught.value.actual_seq) == (4, 5)
        # And an append at the end goes after the other process's event.
        result = await a.append("r1", [NodeStarted(node_id="c", visit=1)], expected_seq=None)
        assert (result.first_seq, result.last_seq) == (6, 6)
        events = await a.read_all("r1")
        assert (await a.verify("r1")).ok
    assert [getattr(e.body, "node_id", None) for e in events] == [None, "a", "a", "b", "b", "c"]


async def test_the_file_refuses_a_row_that_does_not_follow_its_run(tmp_path: Path) -> None:
    # Whoever writes the file (another release, a tool), a row must start right after its
    # run's recorded last seq: the fence is in the file, not in our writer.
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        await store.append("r1", [RunStarted(graph={}, graph_hash="g", entry="a")], expected_seq=0)
    conn = sqlite3.connect(path)
    try:
        for seq in (1, 3):
            with pytest.raises(sqlite3.IntegrityError, match="seq conflict"):
                conn.execute(
                    "INSERT INTO events VALUES (10, 1, ?, 0, 'node.completed', 1, ?, x'7d')",
                    (seq, b"\0" * 32),
                )
    finally:
        conn.close()
    async with SqliteEventStore(path) as store:
        assert (await store.verify("r1")).ok
