"""The server's reads of many runs and of a long run: listing pages and a run's detail.

``python -m benchmarks listing [--quick]``. A SQLite store holds 200,000 runs (20,000
with ``--quick``) of two graphs, most of them completed clean; the ten oldest are the
only degraded ones. The server's app answers in this process (httpx's ASGI transport, no
socket). Figures (medians):

- ``GET /api/runs`` (50 a page): the first page, and the last page reached by walking
  the cursor (500 a page); then that page's statement alone, the one ``list_runs`` runs
  (``eventstore._sqlite.page_statement``: the runs index and the claims lookup of each
  row), straight from the file, beside the same statement reading that depth with OFFSET
  instead of the cursor (what a listing without a cursor costs);
- ``quality=degraded``: the ten oldest runs behind every other one, found through the
  quality index;
- ``GET /api/runs/{run}`` of a run of 100,000 events (20,000 with ``--quick``) whose
  last batch carries a snapshot, as its owner's log does: the first request, then each
  request after five more events were appended, then the first request of a second app
  started on the same store (a restarted server); each reads the snapshot and the
  events after it (a read saves no snapshot: only the run's owner appends the event
  that binds one);
- 200 idle event streams (``GET /api/runs/{run}/stream``, 200 runs, nothing appended):
  the process's CPU time per second of wall time while they are open, beside the same
  without them (the app called directly as ASGI, as httpx buffers a whole answer).
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import anyio
import httpx
from starlette.types import ASGIApp, Message, Scope

from eventstore import EventBody, RunQuery, SqliteEventStore
from eventstore._sqlite import page_statement
from runtime import Runtime
from runtime.engine._log_snapshot import snapshot_due
from runtime.events import EdgeTaken, NodeCompleted, NodeStarted, RunFinished, RunStarted, Verdict
from runtime.events._state import apply, fold
from runtime.server import create_app

from ._common import Timer, figure, print_table

__all__ = ["main"]

STREAMS = 200


def _run(graph: str, quality: str) -> list[EventBody]:
    return [
        RunStarted(graph={"id": graph}, graph_hash=graph * 8, entry="a"),
        RunFinished(status="completed", quality=quality),
    ]


def _step(i: int) -> list[EventBody]:
    return [
        NodeStarted(node_id="n", visit=i + 1),
        Verdict(node_id="n", iteration=i, action="accept", level="structural"),
        NodeCompleted(node_id="n"),
        EdgeTaken(source="n", target="n", edge_index=0, condition="always"),
        NodeStarted(node_id="n", visit=i + 2),
    ]


async def _fill(path: Path, runs: int, long_events: int) -> None:
    async with SqliteEventStore(path) as store:

        async def add(i: int) -> None:
            quality = "degraded" if i < 10 else "clean"
            await store.append(f"r{i:07d}", _run(("trip", "mail")[i % 2], quality), expected_seq=0)

        for start in range(0, runs, 2000):
            async with anyio.create_task_group() as tg:
                for i in range(start, min(runs, start + 2000)):
                    tg.start_soon(add, i)
        started = RunStarted(
            graph={"id": "long", "nodes": [{"id": "n", "kind": "llm"}]}, graph_hash="h", entry="n"
        )
        seq = (await store.append("long", [started], expected_seq=0)).last_seq
        step = 0
        while seq < long_events:
            batch: list[EventBody] = []
            for _ in range(200):
                batch += _step(step)
                step += 1
            seq = (await store.append("long", batch, expected_seq=seq)).last_seq
        # Its last batch carries a snapshot, as its owner's log does (a read saves none).
        state = fold(await store.read_all("long"))
        batch = _step(step)
        for body in batch:
            state.last_seq += 1
            apply(state, body, state.last_seq)
        snapshot = snapshot_due(state, batch, len(batch), True, since_seq=0, every=1, last_bytes=0)
        await store.append("long", batch, expected_seq=seq, snapshot=snapshot)


async def _cpu_per_second(seconds: float) -> float:
    """The process's CPU time (every thread's) per second of ``seconds`` of wall time."""
    cpu, wall = time.process_time(), time.perf_counter()
    await anyio.sleep(seconds)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


async def _idle_streams_cpu(app: ASGIApp, runs: list[str], seconds: float) -> float:
    """CPU per second while each of ``runs`` has an open, idle event stream."""
    opened = anyio.Event()
    started: set[str] = set()
    leave = anyio.Event()

    async def stream(run_id: str) -> None:
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": f"/api/runs/{run_id}/stream",
            "raw_path": f"/api/runs/{run_id}/stream".encode(),
            "query_string": b"after=2",
            "root_path": "",
            "headers": [(b"host", b"bench"), (b"authorization", b"Bearer t")],
            "client": ("127.0.0.1", 1),
            "server": ("bench", 80),
        }

        async def receive() -> Message:
            await leave.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                assert message["status"] == 200, message
            elif run_id not in started:
                started.add(run_id)  # its first line: the stream is open
                if len(started) == len(runs):
                    opened.set()

        await app(scope, receive, send)
        assert leave.is_set(), f"the stream of {run_id} ended by itself"

    async with anyio.create_task_group() as tg:
        for run_id in runs:
            tg.start_soon(stream, run_id)
        await opened.wait()
        await anyio.sleep(0.5)  # every stream read its run and follows the store
        cpu = await _cpu_per_second(seconds)
        leave.set()
        tg.cancel_scope.cancel()
    return cpu


def _sql_ms(path: Path, sql: str, params: tuple[object, ...], reps: int) -> float:
    conn = sqlite3.connect(path)
    try:
        times = []
        for _ in range(reps):
            with Timer() as t:
                rows = conn.execute(sql, params).fetchall()
            times.append(t.seconds * 1000)
            assert rows
        return statistics.median(times)
    finally:
        conn.close()


async def _measure(quick: bool) -> dict[str, float]:
    runs = 20_000 if quick else 200_000
    long_events = 20_000 if quick else 100_000
    reps = 3 if quick else 7
    figures: dict[str, float] = {"runs": runs}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.db"
        await _fill(path, runs, long_events)
        async with Runtime(path) as rt:
            app = create_app(rt, token="t")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:

                async def timed(url: str, **params: object) -> tuple[float, dict[str, object]]:
                    with Timer() as t:
                        response = await client.get(url, params=params)
                    assert response.status_code == 200, response.text
                    return t.seconds * 1000, response.json()

                first = [(await timed("/api/runs", limit=50))[0] for _ in range(reps)]
                figures["first_page"] = statistics.median(first)
                cursor = None
                walked = 0
                while True:
                    params: dict[str, object] = {"limit": 500}
                    if cursor is not None:
                        params["cursor"] = cursor
                    _, page = await timed("/api/runs", **params)
                    rows = page["runs"]
                    assert isinstance(rows, list)
                    walked += len(rows)
                    if page["next_cursor"] is None:
                        break
                    last_cursor = cursor
                    cursor = page["next_cursor"]
                assert walked == runs + 1
                deep = [
                    (await timed("/api/runs", limit=50, cursor=last_cursor))[0] for _ in range(reps)
                ]
                figures["deep_page"] = statistics.median(deep)
                # The store's own statement for that page, against the same statement
                # (columns, claims lookup, order) reaching that depth with OFFSET.
                now = time.time()
                keyset, keyset_params = page_statement(RunQuery(), last_cursor, 50, now)
                figures["keyset_sql"] = _sql_ms(path, keyset, keyset_params, reps)
                top, top_params = page_statement(RunQuery(), None, 50, now)
                figures["offset_sql"] = _sql_ms(
                    path, f"{top} OFFSET ?", (*top_params, runs - 450), reps
                )
                rare = []
                for _ in range(reps):
                    ms, page = await timed("/api/runs", quality="degraded", limit=50)
                    assert isinstance(page["runs"], list) and len(page["runs"]) == 10
                    rare.append(ms)
                figures["rare_filter"] = statistics.median(rare)

                figures["detail_first"], detail = await timed("/api/runs/long")
                figures["long_events"] = float(detail["summary"]["last_seq"])  # type: ignore[index]
                assert rt.store is not None
                later = []
                for i in range(reps):
                    info = await rt.store.get_run("long")
                    assert info is not None
                    await rt.store.append("long", _step(10**6 + i), expected_seq=info.last_seq)
                    later.append((await timed("/api/runs/long"))[0])
                figures["detail_next"] = statistics.median(later)
                # A server started after the run has a snapshot (a restart, another process):
                # its first request, with nothing of the run in memory.
                restarted = httpx.ASGITransport(app=create_app(rt, token="t"))
                async with httpx.AsyncClient(transport=restarted, base_url="http://bench") as other:
                    with Timer() as t:
                        response = await other.get("/api/runs/long")
                    assert response.status_code == 200, response.text
                figures["detail_restarted"] = t.seconds * 1000
            window = 2.0 if quick else 5.0
            figures["no_streams_cpu"] = await _cpu_per_second(window) * 100
            streamed = [f"r{i:07d}" for i in range(STREAMS)]
            figures["idle_streams_cpu"] = await _idle_streams_cpu(app, streamed, window) * 100
    return figures


def main(quick: bool = False) -> None:
    f = anyio.run(_measure, quick)
    runs, events = int(f["runs"]), int(f["long_events"])
    print_table(
        f"The server's reads, {runs} runs and a run of {events} events on SQLite (medians)",
        ["what", "ms"],
        [
            ["GET /api/runs, first page of 50", f["first_page"]],
            ["GET /api/runs, last page of 50 (cursor)", f["deep_page"]],
            ["  its statement alone, straight from the file", f["keyset_sql"]],
            ["  the same depth with OFFSET instead", f["offset_sql"]],
            ["GET /api/runs?quality=degraded (the 10 oldest runs)", f["rare_filter"]],
            ["GET /api/runs/{run}, first request", f["detail_first"]],
            ["GET /api/runs/{run}, after 5 more events", f["detail_next"]],
            ["GET /api/runs/{run}, first request of a restarted server", f["detail_restarted"]],
        ],
    )
    print_table(
        f"CPU of the server's process, {STREAMS} idle event streams open or none",
        ["what", "% of a core"],
        [
            ["no stream open", f["no_streams_cpu"]],
            [f"{STREAMS} idle streams (GET /api/runs/{{run}}/stream)", f["idle_streams_cpu"]],
        ],
    )
    figure("listing.first_page_ms", f["first_page"], "ms")
    figure("listing.last_page_ms", f["deep_page"], "ms")
    figure("listing.keyset_sql_ms", f["keyset_sql"], "ms")
    figure("listing.offset_sql_ms", f["offset_sql"], "ms")
    figure("listing.rare_quality_ms", f["rare_filter"], "ms")
    figure("listing.detail_first_ms", f["detail_first"], "ms")
    figure("listing.detail_next_ms", f["detail_next"], "ms")
    figure("listing.detail_restarted_ms", f["detail_restarted"], "ms")
    figure("listing.idle_streams_cpu_pct", f["idle_streams_cpu"], "%")
