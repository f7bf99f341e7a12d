"""What only the PostgreSQL store has: URLs, its schema's checks, NOTIFY, one log on both
backends, and the fence between two stores on one database."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import anyio
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import (
    PG_SCHEMA_VERSION,
    ConcurrencyError,
    EventBody,
    EventStore,
    LeaseLostError,
    NotAStoreError,
    PostgresEventStore,
    RunOwnedError,
    SchemaVersionError,
    SqliteEventStore,
    StoreError,
    StoreMissingError,
    StoreUnreachableError,
    open_store,
)
from runtime.events import MemoryWritten, RunPaused, RunStarted, fold
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

from .strategies import BODY_STRATEGIES

pytestmark = pytest.mark.anyio


@pytest.fixture
def prefix() -> Iterator[str]:
    pg_url()
    name = fresh_prefix()
    yield name
    drop_schemas(name)


def test_open_store_maps_urls_to_backends(tmp_path: Path) -> None:
    pg = open_store("postgresql://postgres@127.0.0.1:5432/test?schema=jobs&connect_timeout=3")
    assert isinstance(pg, PostgresEventStore)
    assert pg.schema == "jobs" and "schema" not in pg.url and "connect_timeout=3" in pg.url
    assert isinstance(open_store("postgres://h/db"), PostgresEventStore)
    assert open_store("postgres://h/db").schema == "magistrate"  # type: ignore[attr-defined]
    relative = open_store("sqlite:///runs.db")
    absolute = open_store(f"sqlite:///{tmp_path}/runs.db")
    assert isinstance(relative, SqliteEventStore) and relative.path == "runs.db"
    assert isinstance(absolute, SqliteEventStore) and absolute.path == f"{tmp_path}/runs.db"
    plain = open_store(tmp_path / "x.db")
    assert isinstance(plain, SqliteEventStore) and plain.path == str(tmp_path / "x.db")
    with pytest.raises(ValueError, match="mysql"):
        open_store("mysql://h/db")
    with pytest.raises(ValueError, match="schema name"):
        open_store("postgresql://h/db?schema=Robert');DROP")
    with pytest.raises(ValueError, match="names one schema, got 2"):
        open_store("postgresql://h/db?schema=a&schema=b")


async def test_an_unreachable_server_gives_a_clear_error() -> None:
    store = PostgresEventStore(
        "postgresql://postgres:hunter2@127.0.0.1:1/test?connect_timeout=2&password=hunter2"
    )
    with pytest.raises(StoreUnreachableError, match="cannot connect") as caught:
        await store.open()
    assert isinstance(caught.value, StoreError)
    assert caught.value.where == "postgresql://127.0.0.1:1/test schema magistrate"
    message = str(caught.value)
    assert "\n" not in message and "hunter2" not in message


def _tables(schema: str) -> list[tuple[str, str]]:
    with psycopg.connect(pg_url()) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s ORDER BY 1, 2",
            (schema,),
        ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


async def test_a_schema_that_is_not_ours_is_refused_and_left_unchanged(prefix: str) -> None:
    schema = f"{prefix}_theirs"
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.orders (id int, meta text)")
        conn.execute(f"CREATE TABLE {schema}.meta (key text, value text)")
        conn.execute(f"INSERT INTO {schema}.meta VALUES ('a', 'b')")
    before = _tables(schema)
    with pytest.raises(NotAStoreError, match="meta table of another kind"):
        await PostgresEventStore(pg_url(), schema=schema).open()
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(f"DROP TABLE {schema}.meta")
    with pytest.raises(NotAStoreError, match="other tables"):
        await PostgresEventStore(pg_url(), schema=schema).open()
    assert _tables(schema) == [t for t in before if t[0] != "meta"]


async def test_a_newer_schema_is_refused_and_left_unchanged(prefix: str) -> None:
    schema = f"{prefix}_newer"
    async with PostgresEventStore(pg_url(), schema=schema) as store:
        await store.append("r1", [MemoryWritten(key="k", value=1)], expected_seq=0)
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(f"UPDATE {schema}.meta SET schema_version = %s", (PG_SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaVersionError) as caught:
        await PostgresEventStore(pg_url(), schema=schema).open()
    assert caught.value.found == PG_SCHEMA_VERSION + 1
    with psycopg.connect(pg_url()) as conn:
        row = conn.execute(f"SELECT schema_version, next_position FROM {schema}.meta").fetchone()
    assert row == (PG_SCHEMA_VERSION + 1, 2)


def _schemas(prefix: str) -> list[str]:
    with psycopg.connect(pg_url()) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (prefix + "%",)
        ).fetchall()
    return sorted(str(row[0]) for row in rows)


async def test_create_false_creates_no_schema_and_names_the_missing_one(
    prefix: str, tmp_path: Path
) -> None:
    for url in (f"{pg_url()}?schema={prefix}_typo", tmp_path / "typo.db"):
        store = open_store(url, create=False)
        with pytest.raises(StoreMissingError, match="nothing was created") as caught:
            await store.open()
        assert "\n" not in str(caught.value)
    assert "typo.db: no event store there: no such file" in str(caught.value)
    assert _schemas(prefix) == [] and not (tmp_path / "typo.db").exists()
    with pytest.raises(
        StoreMissingError, match=f"schema {prefix}_typo: no event store there: no such schema"
    ):
        await PostgresEventStore(pg_url(), schema=f"{prefix}_typo", create=False).open()
    with psycopg.connect(pg_url(), autocommit=True) as conn:  # a schema, but no tables
        conn.execute(f"CREATE SCHEMA {prefix}_empty")
    with pytest.raises(StoreMissingError, match="the schema holds no tables"):
        await PostgresEventStore(pg_url(), schema=f"{prefix}_empty", create=False).open()
    assert _tables(f"{prefix}_empty") == []
    # A store that exists opens as ever; create=True (the default) makes one.
    async with PostgresEventStore(pg_url(), schema=f"{prefix}_real") as store:
        await store.append("r1", [MemoryWritten(key="k", value=1)], expected_seq=0)
    async with open_store(f"{pg_url()}?schema={prefix}_real", create=False) as store:
        assert [e.seq async for e in store.read("r1")] == [1]
    assert _schemas(prefix) == [f"{prefix}_empty", f"{prefix}_real"]


def _sample_batches() -> list[list[EventBody]]:
    batches: list[list[EventBody]] = [
        [RunStarted(graph={"nodes": ["a"]}, graph_hash="g", entry="a", input={"x": 1})]
    ]

    @settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.tuples(*BODY_STRATEGIES.values()))
    def collect(bodies: tuple[EventBody, ...]) -> None:
        batches.append(list(bodies))

    collect()
    batches.append([MemoryWritten(key="doc", value="lorem ipsum " * 500)])  # compressed in SQLite
    return batches


async def _copy(source: EventStore, target: EventStore, run_id: str) -> None:
    """Export a run from one store into another, batch by batch at the same seqs."""
    events = await source.read_all(run_id)
    seq = 0
    for start in range(0, len(events), 7):
        chunk = [event.body for event in events[start : start + 7]]
        seq = (await target.append(run_id, chunk, expected_seq=seq)).last_seq


async def test_a_log_moves_between_backends_with_the_same_chain_and_fold(
    prefix: str, tmp_path: Path
) -> None:
    batches = _sample_batches()
    async with (
        SqliteEventStore(tmp_path / "a.db") as lite,
        PostgresEventStore(pg_url(), schema=f"{prefix}_a") as pg,
        SqliteEventStore(tmp_path / "b.db") as lite_again,
    ):
        seq = 0
        for batch in batches:
            seq = (await lite.append("r1", batch, expected_seq=seq)).last_seq
        await _copy(lite, pg, "r1")
        await _copy(pg, lite_again, "r1")
        logs = [await store.read_all("r1") for store in (lite, pg, lite_again)]
        reports = [await store.verify("r1") for store in (lite, pg, lite_again)]
    hashes = [[(e.seq, e.prev_hash, e.hash) for e in log] for log in logs]
    assert hashes[0] == hashes[1] == hashes[2] and len(hashes[0]) == seq
    assert [e.body for e in logs[1]] == [b for batch in batches for b in batch]
    assert all(report.ok and report.checked == seq for report in reports)
    assert fold(logs[0]) == fold(logs[1]) == fold(logs[2])


async def test_two_stores_on_one_database_never_both_append_a_seq(prefix: str) -> None:
    schema = f"{prefix}_race"
    wins: dict[str, list[int]] = {"a": [], "b": []}
    conflicts = {"a": 0, "b": 0}
    async with (
        PostgresEventStore(pg_url(), schema=schema) as a,
        PostgresEventStore(pg_url(), schema=schema) as b,
    ):

        async def racer(name: str, store: PostgresEventStore) -> None:
            seq = 0
            while seq < 120:
                body = MemoryWritten(key="k", value=name, op="append")
                try:
                    result = await store.append("r1", [body, body], expected_seq=seq)
                except ConcurrencyError as exc:
                    conflicts[name] += 1
                    seq = exc.actual_seq
                    continue
                wins[name].append(result.last_seq)
                seq = result.last_seq

        async with anyio.create_task_group() as tg:
            tg.start_soon(racer, "a", a)
            tg.start_soon(racer, "b", b)
        events = await a.read_all("r1")
        report = await b.verify("r1")
    assert sorted(wins["a"] + wins["b"]) == list(range(2, 121, 2))
    assert [e.seq for e in events] == list(range(1, 121))
    for first, second in zip(events[::2], events[1::2], strict=True):
        assert first.body == second.body  # no batch interleaved with another
    assert report.ok and report.checked == 120
    assert conflicts["a"] + conflicts["b"] > 0


async def test_tail_is_woken_by_another_stores_commit(prefix: str) -> None:
    schema = f"{prefix}_notify"
    async with (
        PostgresEventStore(pg_url(), schema=schema) as follower,
        PostgresEventStore(pg_url(), schema=schema) as writer,
    ):
        await writer.append("r1", [MemoryWritten(key="k", value=0)], expected_seq=0)
        seen: list[int] = []
        waiting = anyio.Event()

        async def follow() -> None:
            # The poll interval is far longer than the test's bound: only NOTIFY wakes it.
            async for event in follower.tail(poll_interval=120):
                seen.append(event.seq)
                waiting.set()
                if len(seen) == 3:
                    return

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await waiting.wait()
                await anyio.sleep(0.3)  # the follower waits, with its LISTEN in place
                await writer.append("r1", [MemoryWritten(key="k", value=1)], expected_seq=1)
                await anyio.sleep(0.3)
                await writer.append("r1", [MemoryWritten(key="k", value=2)], expected_seq=2)
    assert seen == [1, 2, 3]


async def test_a_claim_is_exclusive_until_its_lease_expires_and_fences_appends(
    prefix: str,
) -> None:
    schema = f"{prefix}_claims"
    async with (
        PostgresEventStore(pg_url(), schema=schema) as a,
        PostgresEventStore(pg_url(), schema=schema) as b,
    ):
        first = await a.claim("r1", "worker-a", lease=0.5)
        await a.append("r1", [MemoryWritten(key="k", value=1)], expected_seq=0)
        with pytest.raises(RunOwnedError) as caught:
            await b.claim("r1", "worker-b", lease=5)
        assert caught.value.owner == "worker-a"
        renewed = await a.renew([first], lease=0.5)
        assert renewed[0] is not None and renewed[0].epoch == first.epoch
        await anyio.sleep(0.7)  # worker-a stops renewing: its lease expires
        second = await b.claim("r1", "worker-b", lease=5)
        assert second.epoch == first.epoch + 1
        # worker-a's append is at the right seq, but its claim is gone: the epoch fences it.
        with pytest.raises(LeaseLostError) as lost:
            await a.append("r1", [MemoryWritten(key="k", value=2)], expected_seq=1)
        assert (lost.value.expected_epoch, lost.value.actual_epoch) == (first.epoch, second.epoch)
        assert lost.value.owner == "worker-b"
        assert await a.renew([first], lease=5) == [None]
        await b.append("r1", [MemoryWritten(key="k", value=3)], expected_seq=1)
        assert [e.body.value for e in await a.read_all("r1")] == [1, 3]  # type: ignore[attr-defined]
        # Released, the run can be claimed at once; a stale release changes nothing.
        await a.release(first)
        with pytest.raises(RunOwnedError):
            await a.claim("r1", "worker-a", lease=5)
        await b.release(second)
        assert (await a.claim("r1", "worker-a", lease=5)).epoch == second.epoch + 1


async def test_claim_runnable_hands_each_run_to_one_claimer(prefix: str) -> None:
    schema = f"{prefix}_runnable"
    started = RunStarted(graph={"nodes": ["a"]}, graph_hash="g", entry="a", input={})
    async with (
        PostgresEventStore(pg_url(), schema=schema) as a,
        PostgresEventStore(pg_url(), schema=schema) as b,
    ):
        for i in range(30):
            await a.append(f"r{i}", [started], expected_seq=0)  # submitted: running, no owner
        await a.append("paused", [started, RunPaused(reason="hitl", node_id="a")], expected_seq=0)
        got: dict[str, list[str]] = {"a": [], "b": []}

        async def claimer(name: str, store: PostgresEventStore) -> None:
            while True:
                claims = await store.claim_runnable(name, lease=30, limit=4)
                if not claims:
                    return
                got[name] += [claim.run_id for claim in claims]

        async with anyio.create_task_group() as tg:
            tg.start_soon(claimer, "a", a)
            tg.start_soon(claimer, "b", b)
    assert sorted(got["a"] + got["b"]) == sorted(f"r{i}" for i in range(30))


async def test_text_with_a_nul_character_is_refused_up_front_and_nothing_is_written(
    prefix: str,
) -> None:
    started = RunStarted(graph={}, graph_hash="g\x00h", entry="a", goal=None, input={})
    note = MemoryWritten(key="k", value="a\x00b", op="replace", node_id="n")
    async with PostgresEventStore(pg_url(), schema=f"{prefix}_s") as store:
        with pytest.raises(ValueError, match=r"the run id 'r\\x00' contains a NUL"):
            await store.append("r\x00", [note], expected_seq=0)
        with pytest.raises(ValueError, match=r"run 'r1': the graph hash 'g\\x00h' contains a NUL"):
            await store.append("r1", [note, started], expected_seq=0)
        with pytest.raises(ValueError, match=r"the run id 'r\\x00' contains a NUL"):
            store.submit("r\x00", [note], expected_seq=0, on_done=lambda *_: None)
        with pytest.raises(ValueError, match=r"claim: the owner 'w\\x00' contains a NUL"):
            await store.claim("r1", "w\x00", lease=5)
        assert await store.list_runs() == []  # nothing of the refused appends was written
        assert store.statistics().appends == 0
        # Bodies are stored as bytes: a NUL inside a value is kept.
        await store.append("r1", [note], expected_seq=0)
        (event,) = await store.read_all("r1", verify=True)
        assert event.body == note


def _terminate(application: str) -> int:
    """Terminate every backend of ``application`` (as an administrator would); how many."""
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (application,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_terminated_backends_are_replaced_with_one_warning_and_nothing_fails(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    application = f"{prefix}_dropped"
    url = f"{pg_url()}?application_name={application}&schema={prefix}_dropped"
    async with open_store(url) as store:
        await store.append("r1", [MemoryWritten(key="k", value=1)], expected_seq=0)
        claim = await store.claim("r1", "worker-a", lease=30)
        assert len(await store.read_all("r1")) == 1  # a pooled reading connection exists
        assert _terminate(application) >= 3  # the writer's, the pool's, the claims'
        await anyio.sleep(0.2)  # the server's notice reaches the idle sockets
        caplog.clear()
        # Every kind of connection is used again: none of them fails.
        assert [e.body.value for e in await store.read_all("r1")] == [1]  # type: ignore[attr-defined]
        await store.append("r1", [MemoryWritten(key="k", value=2)], expected_seq=1)
        assert (await store.renew([claim], lease=30))[0] is not None
        assert (await store.load_snapshot("r1")) is None
        await store.release(claim)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "lost the connection to PostgreSQL (terminating connection due to administrator "
        "command); reconnecting"
    ]
    assert warnings[0].name == "magistrate.eventstore"
