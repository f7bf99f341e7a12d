"""Fixtures for the backend-neutral store suite: each test runs against every store factory.

A factory takes a name (the same name reopens the same store) and returns an unopened store.
PostgreSQL runs on schemas of the test's own (skipped, saying why, when no server answers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from eventstore import EventStore, PostgresEventStore, SqliteEventStore
from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

StoreFactory = Callable[[str], EventStore]


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    if request.param == "sqlite":

        def make(name: str = "store") -> EventStore:
            return SqliteEventStore(tmp_path / f"{name}.db")

        yield make
        return
    if request.param == "postgres":
        url = pg_url()
        prefix = fresh_prefix()

        def make_pg(name: str = "store") -> EventStore:
            return PostgresEventStore(url, schema=f"{prefix}_{name}")

        yield make_pg
        drop_schemas(prefix)
        return
    raise AssertionError(request.param)
