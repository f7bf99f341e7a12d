"""The PostgreSQL store's run listing: its indexes serve every filter and page, and a
store of the first layout is upgraded with the runs' graph ids and qualities."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from eventstore import PG_SCHEMA_VERSION, EventBody, PostgresEventStore, RunQuery
from eventstore._postgres_runs import page_statement
from runtime.events import RunFinished, RunForked, RunStarted
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

pytestmark = pytest.mark.anyio


@pytest.fixture
def prefix() -> Iterator[str]:
    pg_url()
    name = fresh_prefix()
    yield name
    drop_schemas(name)


def _run(i: int) -> list[EventBody]:
    events: list[EventBody] = [
        RunStarted(graph={"id": f"g{i % 3}"}, graph_hash=f"h{i % 3}", entry="a")
    ]
    if i % 2:
        events.append(RunFinished(status="completed", quality=("clean", "failed")[i % 4 // 2]))
    return events


@pytest.mark.parametrize(
    ("query", "index"),
    [
        (RunQuery(), "runs_created"),
        (RunQuery(since=1.0, until=2.0), "runs_created"),
        (RunQuery(status="completed"), "runs_status"),
        (RunQuery(status="completed", since=1.0), "runs_status"),
        (RunQuery(quality="clean", until=2.0), "runs_quality"),
        (RunQuery(graph_id="g1"), "runs_graph"),
        (RunQuery(graph_hash="h1"), "runs_graph_hash"),
    ],
)
async def test_each_run_filter_and_page_has_an_index_that_needs_no_sort(
    prefix: str, query: RunQuery, index: str
) -> None:
    # With sequential scans and sorts priced out, the plan of the store's own statement
    # still needs neither: an index gives the rows in the listing's order, and the
    # cursor is a range on it (no OFFSET).
    schema = f"{prefix}_plan"
    async with PostgresEventStore(pg_url(), schema=schema) as store:
        for i in range(30):
            await store.append(f"r{i}", _run(i), expected_seq=0)
    for cursor in (None, "5.0~12"):
        sql, params = page_statement(query, cursor, 10)
        with psycopg.connect(pg_url(), autocommit=True) as conn:
            conn.execute(f"SET search_path = {schema}")
            conn.execute("SET enable_seqscan = off")
            conn.execute("SET enable_sort = off")
            conn.execute("SET enable_bitmapscan = off")
            plan = "\n".join(str(row[0]) for row in conn.execute(f"EXPLAIN {sql}", params))
        assert f"Index Scan Backward using {index} on runs" in plan, plan
        assert "Sort" not in plan and "Seq Scan" not in plan, plan


async def test_a_first_layout_store_is_upgraded_with_graph_ids_and_qualities(
    prefix: str,
) -> None:
    schema = f"{prefix}_old"
    async with PostgresEventStore(pg_url(), schema=schema) as store:
        for i in range(4):
            await store.append(f"r{i}", _run(i), expected_seq=0)
        fork = [_run(1)[0], RunForked(source_run_id="r1", source_seq=1, source_hash="0" * 64)]
        await store.append("f1", fork, expected_seq=0)
    with psycopg.connect(pg_url(), autocommit=True) as conn:  # as version 1 left it
        for name in ("runs_status", "runs_created", "runs_quality", "runs_graph"):
            conn.execute(f"DROP INDEX {schema}.{name}")
        conn.execute(f"DROP INDEX {schema}.runs_graph_hash")
        conn.execute(f"CREATE INDEX runs_status ON {schema}.runs (status, run)")
        conn.execute(
            f"ALTER TABLE {schema}.runs DROP COLUMN graph_id, DROP COLUMN quality, "
            "DROP COLUMN origin, DROP COLUMN draining, DROP COLUMN draining_since"
        )
        conn.execute(f"UPDATE {schema}.meta SET schema_version = 1")
    async with PostgresEventStore(pg_url(), schema=schema) as store:
        runs = {r.run_id: (r.graph_id, r.quality, r.origin) for r in await store.list_runs()}
        assert runs == {
            "r0": ("g0", None, None),
            "r1": ("g1", "clean", None),
            "r2": ("g2", None, None),
            "r3": ("g0", "failed", None),
            "f1": ("g1", None, "r1"),
        }
        page = await store.query_runs(RunQuery(graph_id="g0", quality="failed"))
        assert [r.run_id for r in page.runs] == ["r3"]
        claim = await store.claim("r0", "worker", lease=5)  # a claim's draining mark too
        assert await store.mark_draining(claim, "work")
        info = await store.get_run("r0")
        assert info is not None and (info.owner, info.draining) == ("worker", "work")
    with psycopg.connect(pg_url()) as conn:
        row = conn.execute(f"SELECT schema_version FROM {schema}.meta").fetchone()
    assert row == (PG_SCHEMA_VERSION,)


async def test_a_fork_whose_source_id_a_listing_cannot_hold_is_listed_without_it(
    prefix: str,
) -> None:
    # A hand-written log's source id may hold NUL, which PostgreSQL text cannot store.
    fork = [_run(0)[0], RunForked(source_run_id="a\x00b", source_seq=1, source_hash="0" * 64)]
    async with PostgresEventStore(pg_url(), schema=f"{prefix}_nul") as store:
        await store.append("f", fork, expected_seq=0)
        info = await store.get_run("f")
        assert info is not None and info.origin is None and info.last_seq == 2
