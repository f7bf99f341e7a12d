"""Event store: group-commit append throughput against the raw SQLite floor, and replay speed.

Workload: each appender appends batches of 1-3 realistic events (150-700 bytes encoded) to
its own run, awaiting each commit, with 1, 10 and 200 appenders. The floor is plain sqlite3
inserting the same encoded rows, same schema (with the fence trigger every row passes) and
pragmas, in transactions of 1,000; the floor without the fence shows what the fence costs.
Load: 2,500 to 10,000 short runs (5 appends each) started at once, far more than the
writer takes in flight: the wall time per run must stay flat as the runs grow. Replay
reads a 10,000-event run and folds it.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import tempfile
import time
from typing import Any

import anyio

from eventstore import DurabilityConfig, EventBody, SqliteEventStore, encode_body, event_tag
from eventstore._events import chain_digest
from eventstore._format import store_body
from eventstore._schema import create_schema
from eventstore._statements import wal_autocheckpoint_pages
from runtime.events import (
    LlmTurn,
    MemoryWritten,
    NodeCompleted,
    NodeStarted,
    ToolCallRecord,
    ToolResult,
    Verdict,
    fold,
)

from ._common import Timer, figure, print_table

_WORDS = (
    "the agent reads the ticket checks the customer's order history and drafts a reply "
    "explaining the refund policy with the relevant dates and the amount due"
).split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n_words))


def make_bodies(rng: random.Random, count: int) -> list[EventBody]:
    """A realistic mix of event bodies (a node's turn loop)."""
    bodies: list[EventBody] = []
    for i in range(count):
        kind = i % 6
        node = f"node-{i % 7}"
        if kind == 0:
            bodies.append(NodeStarted(node_id=node, visit=1 + i % 3))
        elif kind == 1:
            bodies.append(
                LlmTurn(
                    node_id=node,
                    iteration=i % 10,
                    text=_text(rng, 60),
                    tool_calls=[
                        ToolCallRecord(
                            id=f"call_{i}", name="search", arguments={"q": _text(rng, 6)}
                        )
                    ],
                    input_tokens=1200 + i % 500,
                    output_tokens=180,
                    latency_ms=812.5,
                    model="gpt-4o-mini",
                )
            )
        elif kind == 2:
            bodies.append(
                ToolResult(node_id=node, call_id=f"call_{i}", name="search", content=_text(rng, 45))
            )
        elif kind == 3:
            bodies.append(
                MemoryWritten(key="notes", value=_text(rng, 25), op="append", node_id=node)
            )
        elif kind == 4:
            bodies.append(
                Verdict(
                    node_id=node,
                    iteration=i % 10,
                    action="retry",
                    level="quality",
                    feedback=_text(rng, 15),
                    confidence=0.62,
                )
            )
        else:
            bodies.append(NodeCompleted(node_id=node))
    return bodies


async def store_throughput(path: str, appenders: int, seconds: float) -> tuple[float, float, int]:
    """Events/s with ``appenders`` concurrent appenders; also mean batch size, total events."""
    rng = random.Random(appenders)
    pool = make_bodies(rng, 600)
    async with SqliteEventStore(path) as store:
        deadline = 0.0
        counts = [0] * appenders

        async def appender(index: int) -> None:
            r = random.Random(index)
            run_id = f"bench-{appenders}-{index}"
            seq = 0
            while time.perf_counter() < deadline:
                size = r.randint(1, 3)
                start = r.randrange(len(pool) - 3)
                result = await store.append(run_id, pool[start : start + size], expected_seq=seq)
                seq = result.last_seq
            counts[index] = seq

        started = time.perf_counter()
        deadline = started + seconds
        async with anyio.create_task_group() as tg:
            for index in range(appenders):
                tg.start_soon(appender, index)
        elapsed = time.perf_counter() - started
        stats = store.statistics()
    total = sum(counts)
    return total / elapsed, stats.mean_batch_size, total


def floor_rows(count: int, runs: int) -> list[tuple[Any, ...]]:
    """The rows the 200-appender workload writes: ``runs`` runs taking turns appending 1-3
    events each, so the (run, seq) index is touched the same way. Hashes precomputed."""
    pool = make_bodies(random.Random(7), 600)
    rng = random.Random(11)
    seqs = [0] * runs
    prevs = [b""] * runs
    rows: list[tuple[Any, ...]] = []
    now = time.time()
    while len(rows) < count:
        for run in range(runs):
            start = rng.randrange(len(pool) - 3)
            for body in pool[start : start + rng.randint(1, 3)]:
                data = encode_body(body)
                tag = event_tag(body)
                seqs[run] += 1
                prevs[run] = chain_digest(prevs[run], f"floor-{run}", seqs[run], tag, 1, data)
                stored = store_body(data, tag)
                rows.append((len(rows) + 1, run + 1, seqs[run], now, tag, 1, prevs[run], stored))
    return rows[:count]


def raw_floor(
    path: str,
    rows: list[tuple[Any, ...]],
    per_txn: int,
    page_size: int | None = None,
    *,
    fence: bool = True,
) -> float:
    """Events/s for plain sqlite3 inserts of pre-encoded rows, ``per_txn`` per transaction,
    on the store's schema (with its fence unless ``fence`` is False: each row then costs
    no check and no update of its runs row) and default page size unless ``page_size``."""
    conn = sqlite3.connect(path, isolation_level=None)
    create_schema(conn, page_size or DurabilityConfig().page_size)
    if not fence:
        conn.execute("DROP TRIGGER events_fence")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(f"PRAGMA wal_autocheckpoint = {wal_autocheckpoint_pages(conn)}")
    runs = {row[1] for row in rows}
    conn.executemany(
        "INSERT INTO runs (run, run_id, status, created, updated, last_seq) "
        "VALUES (?, ?, 'running', 0, 0, 0)",
        [(run, f"floor-{run}") for run in sorted(runs)],
    )
    sql = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    with Timer() as t:
        for i in range(0, len(rows), per_txn):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(sql, rows[i : i + per_txn])
            conn.execute("COMMIT")
    conn.close()
    return len(rows) / t.seconds


async def replay_speed(path: str, count: int, repeats: int) -> float:
    """Events/s for read_all + fold of one ``count``-event run (best of ``repeats``)."""
    bodies = make_bodies(random.Random(3), count)
    best = 0.0
    async with SqliteEventStore(path, config=DurabilityConfig(synchronous="OFF")) as store:
        seq = 0
        for i in range(0, count, 500):
            seq = (await store.append("replay", bodies[i : i + 500], expected_seq=seq)).last_seq
        for _ in range(repeats):
            with Timer() as t:
                state = fold(await store.read_all("replay"))
            assert state.last_seq == count
            best = max(best, count / t.seconds)
    return best


async def load_wall(path: str, runs: int, appends: int) -> float:
    """Seconds for ``runs`` concurrent short runs of ``appends`` appends each (1-3 events,
    like a run's steps) to finish, all started at once: far more appenders than the
    writer takes in flight, so most wait for space."""
    pool = make_bodies(random.Random(5), 600)
    async with SqliteEventStore(path) as store:

        async def run(index: int) -> None:
            r = random.Random(index)
            seq = 0
            for _ in range(appends):
                start = r.randrange(len(pool) - 3)
                batch = pool[start : start + r.randint(1, 3)]
                seq = (await store.append(f"load-{index}", batch, expected_seq=seq)).last_seq

        with Timer() as t:
            async with anyio.create_task_group() as tg:
                for index in range(runs):
                    tg.start_soon(run, index)
    return t.seconds


def main(quick: bool) -> None:
    seconds = 2.5 if quick else 8.0
    floor_count = 50_000 if quick else 200_000
    workdir = tempfile.mkdtemp(prefix="bench-eventstore-")
    try:
        rows = floor_rows(floor_count, 200)
        floors = [raw_floor(os.path.join(workdir, "floor-a.db"), rows, 1000)]
        single = raw_floor(os.path.join(workdir, "floor-1.db"), rows[:300], 1)
        table: list[list[object]] = []
        results: dict[int, float] = {}
        for appenders in (1, 10, 200):
            path = os.path.join(workdir, f"store-{appenders}.db")
            rate, mean_batch, total = anyio.run(store_throughput, path, appenders, seconds)
            results[appenders] = rate
            table.append([f"store, {appenders} appenders", rate, mean_batch, total])
        floors.append(raw_floor(os.path.join(workdir, "floor-b.db"), rows, 1000))
        floor = sum(floors) / len(floors)
        # For reference: the floor on 4 KB pages (SQLite's default; ours is 1 KB, see
        # DurabilityConfig), which bulk inserts favour. The ratio uses the same-pragma floor.
        floor_4k = raw_floor(os.path.join(workdir, "floor-4k.db"), rows, 1000, 4096)
        unfenced = raw_floor(os.path.join(workdir, "floor-nofence.db"), rows, 1000, fence=False)
        page = DurabilityConfig().page_size
        table.append(
            [f"raw sqlite3, 1000 per txn ({page} B pages)", floor, 1000.0, floor_count * 2]
        )
        table.append(["raw sqlite3, 1000 per txn (4096 B pages)", floor_4k, 1000.0, floor_count])
        table.append(["raw sqlite3, 1000 per txn, no fence", unfenced, 1000.0, floor_count])
        table.append(["raw sqlite3, 1 per txn", single, 1.0, 300])
        replay = anyio.run(replay_speed, os.path.join(workdir, "replay.db"), 10_000, 3)
        loads: dict[int, float] = {}
        for runs in (1_250, 2_500, 5_000, 10_000) if not quick else (2_500, 10_000):
            loads[runs] = anyio.run(load_wall, os.path.join(workdir, f"load-{runs}.db"), runs, 5)
        print_table(
            "Append throughput (synchronous=FULL, WAL)",
            ["writer", "events/s", "mean batch", "events"],
            table,
        )
        print_table("Replay", ["what", "events/s"], [["read_all + fold, 10,000 events", replay]])
        print_table(
            "Load: concurrent short runs (5 appends each), all started at once",
            ["runs", "wall s", "ms per run"],
            [[runs, seconds, 1000 * seconds / runs] for runs, seconds in loads.items()],
        )
        figure("eventstore.append.1_appender.events_per_s", results[1], "events/s")
        figure("eventstore.append.10_appenders.events_per_s", results[10], "events/s")
        figure("eventstore.append.200_appenders.events_per_s", results[200], "events/s")
        figure("eventstore.floor.events_per_s", floor, "events/s")
        figure("eventstore.floor_4k_pages.events_per_s", floor_4k, "events/s")
        figure("eventstore.floor_without_fence.events_per_s", unfenced, "events/s")
        figure("eventstore.group_commit_vs_floor", results[200] / floor, "x")
        figure("eventstore.replay.events_per_s", replay, "events/s")
        figure("eventstore.load.10000_runs_s", loads[10_000], "s")
        # Linear in the number of runs when the time per run stays flat: 1.0 x.
        figure(
            "eventstore.load.per_run_10000_over_2500",
            (loads[10_000] / 10_000) / (loads[2_500] / 2_500),
            "x",
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
