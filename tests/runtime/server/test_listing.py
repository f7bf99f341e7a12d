"""The runs list over real HTTP on both stores: filters and cursors reach past any scan
limit, and a long run's detail and events read only what they need."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import EventBody, EventStore, PostgresEventStore, SqliteEventStore
from runtime.events import (
    EdgeTaken,
    NodeCompleted,
    NodeStarted,
    RunFinished,
    RunStarted,
    Verdict,
    fold,
)
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

from ..snapshot_support import save_bound_snapshot
from .support import served

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(300)]

StoreMaker = Callable[[], EventStore]


@pytest.fixture(params=["sqlite", "postgres"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreMaker]:
    if request.param == "sqlite":
        yield lambda: SqliteEventStore(tmp_path / "runs.db")
        return
    url = pg_url()
    prefix = fresh_prefix()
    yield lambda: PostgresEventStore(url, schema=f"{prefix}_api")
    drop_schemas(prefix)


def hash_of(graph: str) -> str:
    return hashlib.sha256(graph.encode()).hexdigest()


def run_events(graph: str, quality: str | None) -> list[EventBody]:
    events: list[EventBody] = [
        RunStarted(graph={"id": graph}, graph_hash=hash_of(graph), entry="a")
    ]
    if quality is not None:
        status = "failed" if quality == "failed" else "completed"
        events.append(RunFinished(status=status, quality=quality))
    return events


async def add_runs(store: EventStore, specs: list[tuple[str, str, str | None]]) -> None:
    """Append each (run id, graph, quality) run, many at once (they group-commit)."""

    async def add(run_id: str, graph: str, quality: str | None) -> None:
        await store.append(run_id, run_events(graph, quality), expected_seq=0)

    for start in range(0, len(specs), 500):
        async with anyio.create_task_group() as tg:
            for spec in specs[start : start + 500]:
                tg.start_soon(add, *spec)


async def test_filters_and_cursors_page_through_more_than_ten_thousand_runs(
    make_store: StoreMaker,
) -> None:
    # The three oldest runs are the only degraded ones, behind 10,050 newer runs.
    specs: list[tuple[str, str, str | None]] = [(f"old{i}", "trip", "degraded") for i in range(3)]
    specs += [
        (f"r{i:05d}", ("trip", "mail")[i % 2], ("clean", None)[i % 3 == 0]) for i in range(10_050)
    ]
    async with make_store() as store:
        await add_runs(store, specs[:3])
        await add_runs(store, specs[3:])
        async with served(store) as s:

            async def page(**params: Any) -> dict[str, Any]:
                response = await s.client.get("/api/runs", params=params)
                assert response.status_code == 200, response.text
                body: dict[str, Any] = response.json()
                return body

            degraded = await page(quality="degraded", graph="trip")
            assert sorted(r["run_id"] for r in degraded["runs"]) == ["old0", "old1", "old2"]
            assert degraded["next_cursor"] is None
            assert {r["quality"] for r in degraded["runs"]} == {"degraded"}
            assert {r["graph_id"] for r in degraded["runs"]} == {"trip"}

            seen: list[str] = []
            cursor = None
            pages = 0
            while True:
                body = await page(limit=500, **({"cursor": cursor} if cursor else {}))
                seen += [r["run_id"] for r in body["runs"]]
                pages += 1
                cursor = body["next_cursor"]
                if cursor is None:
                    break
            assert pages == 21 and len(seen) == len(set(seen)) == 10_053
            assert set(seen[-3:]) == {"old0", "old1", "old2"}  # the oldest come last

            mail_clean: list[str] = []
            cursor = None
            while True:
                params = {"graph": "mail", "quality": "clean", "status": "completed", "limit": 400}
                body = await page(**params, **({"cursor": cursor} if cursor else {}))
                mail_clean += [r["run_id"] for r in body["runs"]]
                cursor = body["next_cursor"]
                if cursor is None:
                    break
            expected = {r for r, g, q in specs if g == "mail" and q == "clean"}
            assert set(mail_clean) == expected and len(mail_clean) == len(expected)
            by_hash = await page(graph=hash_of("mail"), limit=1)
            assert [r["graph_id"] for r in by_hash["runs"]] == ["mail"]


def long_run(steps: int) -> list[EventBody]:
    events: list[EventBody] = [
        RunStarted(
            graph={"id": "long", "nodes": [{"id": "n", "kind": "llm"}]}, graph_hash="h", entry="n"
        )
    ]
    for i in range(steps):
        events += [
            NodeStarted(node_id="n", visit=i + 1),
            Verdict(node_id="n", iteration=i, action="accept", level="structural"),
            NodeCompleted(node_id="n"),
            EdgeTaken(source="n", target="n", edge_index=0, condition="always"),
        ]
    return events


async def test_a_long_runs_detail_and_events_page_by_seq(make_store: StoreMaker) -> None:
    async with make_store() as store:
        events = long_run(3_000)  # 12,001 events
        seq = 0
        for start in range(0, len(events), 1000):
            seq = (
                await store.append("long", events[start : start + 1000], expected_seq=seq)
            ).last_seq
        async with served(store) as s:
            detail = (await s.client.get("/api/runs/long")).json()
            assert detail["visit_counts"] == {"n": 3000}
            (node,) = detail["llm_nodes"]
            assert node["total_verdicts"] == 3000 and len(node["verdicts"]) == 500
            assert node["verdicts"][-1]["seq"] == seq - 2  # the newest kept
            assert detail["edges_taken"] == ["n>n"]
            assert detail["event_counts"]["judge.verdict"] == 3000
            # A read saves no snapshot; its writer saves one as a run's owner does: the
            # next read folds only what follows it.
            assert await store.load_snapshot("long") is None
            snapshot = await save_bound_snapshot(store, fold(await store.read_all("long")))
            seq = snapshot.seq
            await store.append(
                "long", [RunFinished(status="completed", quality="clean")], expected_seq=seq
            )
            detail = (await s.client.get("/api/runs/long")).json()
            assert detail["summary"]["status"] == "completed"
            assert detail["event_counts"]["run.finished"] == 1
            assert detail["llm_nodes"][0]["total_verdicts"] == 3000

            # A sparse filter reads at most 10,000 events a page, and says where to go on.
            first = (await s.client.get("/api/runs/long/events", params={"type": "run."})).json()
            assert [e["seq"] for e in first["events"]] == [1]
            assert first["next_after"] == 10_000
            rest = (
                await s.client.get(
                    "/api/runs/long/events", params={"type": "run.", "after": 10_000}
                )
            ).json()
            assert [e["type"] for e in rest["events"]] == ["run.finished"]
            assert rest["next_after"] is None
            middle = (
                await s.client.get("/api/runs/long/events", params={"after": 6000, "limit": 3})
            ).json()
            assert [e["seq"] for e in middle["events"]] == [6001, 6002, 6003]
            assert middle["next_after"] == 6003
