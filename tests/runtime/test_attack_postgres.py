"""A PostgreSQL store answers as a SQLite store does where a run cannot be there: a run id
holding NUL (PostgreSQL text cannot hold one) and a run claimed before its first append
are no run; what the server refuses is a StoreError on one line."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from eventstore import (
    ClaimingStore,
    PostgresEventStore,
    RunQuery,
    Snapshot,
    StoreError,
    open_store,
)
from runtime import RunNotFoundError, Runtime
from runtime.events import RunStarted
from runtime.testing import function_node, linear_graph
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

pytestmark = pytest.mark.anyio

NUL_ID = "run\x00one"


async def _echo(inputs: dict[str, object]) -> dict[str, object]:
    return {"out": inputs.get("text")}


GRAPH = linear_graph([function_node("echo", input_keys=["text"], output_keys=["out"])])


@pytest.fixture
def prefix() -> Iterator[str]:
    pg_url()
    name = fresh_prefix()
    yield name
    drop_schemas(name)


async def test_a_run_id_holding_nul_is_no_run_on_either_store(store: str) -> None:
    async with Runtime(store, functions={"echo": _echo}) as rt:
        done = await (await rt.start(GRAPH, input={"text": "a\x00b"})).result()
        assert done.memory["out"] == "a\x00b"  # values hold NUL on both: bodies are bytes
        assert await rt.read_events(NUL_ID) == []
        for call in (
            lambda: rt.get_state(NUL_ID),
            lambda: rt.result(NUL_ID),
            lambda: rt.cancel(NUL_ID),
            lambda: rt.pause(NUL_ID),
            lambda: rt.resume(NUL_ID),
            lambda: rt.fork(NUL_ID, at_seq=1),
        ):
            with pytest.raises(RunNotFoundError):
                await call()


async def test_store_reads_of_text_holding_nul_find_nothing(store: str) -> None:
    async with open_store(store) as events:
        started = [RunStarted(graph={}, graph_hash="gh", entry="a")]
        await events.append("r1", started, expected_seq=0)
        assert await events.get_run(NUL_ID) is None
        assert await events.read_all(NUL_ID) == []
        report = await events.verify(NUL_ID)
        assert (report.ok, report.reason) == (False, "no such run")
        assert await events.load_snapshot(NUL_ID) is None
        assert await events.delete_snapshots(NUL_ID) == 0
        page = await events.query_runs(RunQuery(graph_id="g\x00"))
        assert page.runs == [] and page.next_cursor is None
        assert (await events.query_runs(RunQuery(status="running\x00"))).runs == []
        assert isinstance(events, ClaimingStore)
        assert await events.heads([NUL_ID, "r1"]) == {"r1": 1}
        claims = await events.claim_runnable("w", lease=30, limit=5, exclude=[NUL_ID])
        assert [claim.run_id for claim in claims] == ["r1"]


async def test_a_run_claimed_before_its_first_append_is_no_run_yet(store: str) -> None:
    async with open_store(store) as events:
        assert isinstance(events, ClaimingStore)
        claim = await events.claim("ghost", "w", lease=30)
        report = await events.verify("ghost")
        assert (report.ok, report.checked, report.reason) == (False, 0, "no such run")
        assert await events.heads(["ghost"]) == {}
        with pytest.raises(StoreError, match="has no events"):
            await events.save_snapshot(Snapshot("ghost", 1, "ab" * 32, "1", b"{}"))
        assert await events.load_snapshot("ghost") is None
        started = [RunStarted(graph={}, graph_hash="gh", entry="a")]
        await events.append("ghost", started, expected_seq=0)
        assert (await events.verify("ghost")).ok
        assert await events.heads(["ghost"]) == {"ghost": 1}
        await events.release(claim)


async def test_a_commit_the_server_refuses_is_one_store_error_line(prefix: str) -> None:
    schema = f"{prefix}_store"
    async with PostgresEventStore(pg_url(), schema=schema) as events:
        started = [RunStarted(graph={}, graph_hash="gh", entry="a")]
        await events.append("r1", started, expected_seq=0)
        with psycopg.connect(pg_url(), autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "CREATE FUNCTION {}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "RAISE EXCEPTION 'the disk is full' USING DETAIL = 'no room left', "
                    "HINT = 'free some'; END $$"
                ).format(sql.Identifier(schema))
            )
            conn.execute(
                sql.SQL(
                    "CREATE TRIGGER refuse BEFORE INSERT ON {}.events "
                    "FOR EACH ROW EXECUTE FUNCTION {}.refuse()"
                ).format(sql.Identifier(schema), sql.Identifier(schema))
            )
        with pytest.raises(StoreError) as refused:
            await events.append("r2", started, expected_seq=0)
        message = str(refused.value)
        assert "\n" not in message
        assert "the disk is full" in message and "no room left" in message  # nothing lost


async def test_a_read_the_server_refuses_is_one_store_error_line(prefix: str) -> None:
    schema = f"{prefix}_store"
    async with PostgresEventStore(pg_url(), schema=schema) as events:
        started = [RunStarted(graph={}, graph_hash="gh", entry="a")]
        await events.append("r1", started, expected_seq=0)
        with psycopg.connect(pg_url(), autocommit=True) as conn:  # a damaged store
            conn.execute(
                sql.SQL("ALTER TABLE {}.events RENAME COLUMN body TO lost").format(
                    sql.Identifier(schema)
                )
            )
        with pytest.raises(StoreError, match=f"read: .*schema {schema}: .*body") as refused:
            await events.read_all("r1")
        assert "\n" not in str(refused.value)
