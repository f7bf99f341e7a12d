"""A PostgreSQL schema that is not a store's, and text the store's indexes cannot hold:
refused with a clear error, and nothing of anyone's is changed."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from eventstore import (
    AppendResult,
    NotAStoreError,
    PostgresEventStore,
    StoreError,
    open_store,
)
from runtime.events import MemoryWritten, RunStarted
from tests.pgsupport import PG_URL, schema_prefix, wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def prefix() -> Iterator[str]:
    yield from schema_prefix()  # its schemas are dropped once the test is done


@pytest.fixture
def role(prefix: str) -> Iterator[str]:
    """A login role that is not a superuser (dropped, with its rights, afterwards)."""
    name = f"{prefix}_role"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for (schema,) in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (prefix + "%",)
        ).fetchall():
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _relations(schema: str) -> list[tuple[str, str]]:
    with psycopg.connect(PG_URL) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s ORDER BY 1",
            (schema,),
        ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


def _as(role: str) -> str:
    """The test server's URL, logged in as ``role``."""
    parts = urlsplit(PG_URL)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


async def test_a_schema_holding_only_a_sequence_is_not_ours(prefix: str) -> None:
    schema = f"{prefix}_theirs"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE SEQUENCE {schema}.order_numbers")
    before = _relations(schema)
    for create in (True, False):
        with pytest.raises(NotAStoreError, match="holds other tables"):
            await PostgresEventStore(PG_URL, schema=schema, create=create).open()
    assert _relations(schema) == before


async def test_a_schema_whose_tables_the_login_may_not_see_is_not_ours(
    prefix: str, role: str
) -> None:
    schema = f"{prefix}_hidden"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.orders (id int)")
        conn.execute(f'GRANT USAGE, CREATE ON SCHEMA {schema} TO "{role}"')
        conn.execute(f'GRANT CREATE ON DATABASE {conn.info.dbname} TO "{role}"')
    before = _relations(schema)
    with pytest.raises(NotAStoreError, match="holds other tables"):
        await PostgresEventStore(_as(role), schema=schema).open()
    assert _relations(schema) == before


async def test_what_the_server_refuses_the_login_is_a_store_error_naming_it(
    prefix: str, role: str
) -> None:
    # No right to create a schema in the database: said as the store's error, one line.
    store = open_store(f"{_as(role)}?schema={prefix}_new")
    with pytest.raises(StoreError, match="permission denied") as caught:
        await store.open()
    assert not isinstance(caught.value, psycopg.Error)
    assert "\n" not in str(caught.value) and "nothing was changed" in str(caught.value)
    assert _relations(f"{prefix}_new") == []


@pytest.mark.parametrize("name", ["pg_catalog", "pg_temp", "pg_toast", "pg_mine"])
def test_a_schema_name_postgresql_keeps_for_itself_is_refused_up_front(name: str) -> None:
    with pytest.raises(ValueError, match="PostgreSQL's own"):
        open_store(f"{PG_URL}?schema={name}")


async def test_a_store_in_a_schema_of_the_longest_name_notifies_without_reconnecting(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Its NOTIFY channels must be identifiers too (63 bytes at most).
    schema = (prefix + "_" + "x" * 63)[:63]
    caplog.set_level(logging.DEBUG, logger="magistrate.eventstore")
    async with PostgresEventStore(PG_URL, schema=schema) as store:
        started = [RunStarted(graph={}, graph_hash="gh", entry="a")]  # runnable: both channels
        seq = (await store.append("r", started, expected_seq=0)).last_seq
        await store.append("r", [MemoryWritten(key="k", value=1)], expected_seq=seq)
    failures = [r.getMessage() for r in caplog.records if "NOTIFY" in r.getMessage()]
    assert failures == []
    assert not [r for r in caplog.records if "lost the connection" in r.getMessage()]


async def test_a_run_id_too_long_to_index_is_refused_alone_and_the_batch_commits(
    prefix: str,
) -> None:
    long_id = os.urandom(1500).hex()  # 3,000 bytes that do not compress
    answers: dict[str, tuple[AppendResult | None, BaseException | None]] = {}
    async with PostgresEventStore(PG_URL, schema=f"{prefix}_long") as store:
        body = [MemoryWritten(key="k", value=1)]

        def answered(run_id: str) -> object:
            return lambda result, error: answers.__setitem__(run_id, (result, error))

        # Both handed to the writer before it runs: one group commit, were both taken.
        assert store.submit("short", body, expected_seq=0, on_done=answered("short"))
        with pytest.raises(ValueError, match=r"3000 bytes long.*nothing was written"):
            store.submit(long_id, body, expected_seq=0, on_done=answered("long"))
        with pytest.raises(ValueError, match="bytes long"):
            await store.claim(long_id, "me", lease=5)
        with pytest.raises(ValueError, match="bytes long"):
            await store.append(
                "g", [RunStarted(graph={"id": long_id}, graph_hash="gh", entry="a")], expected_seq=0
            )

        async def answered_short() -> bool:
            return "short" in answers

        await wait_until(answered_short, 10)
        assert [e.seq for e in await store.read_all("short")] == [1]
        assert await store.read_all(long_id) == [] and await store.get_run(long_id) is None
    assert "long" not in answers and answers["short"][1] is None
