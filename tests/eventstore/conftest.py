"""Fixtures for the backend-neutral store suite: each test runs against every store factory.

A factory takes a name (the same name reopens the same store) and returns an unopened store.
SQLite runs twice: with its writer process (the default) and with its writer thread.
PostgreSQL will add a parameter here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from eventstore import DurabilityConfig, EventStore, SqliteEventStore

StoreFactory = Callable[[str], EventStore]


@pytest.fixture(params=["sqlite", "sqlite-thread"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    if request.param in ("sqlite", "sqlite-thread"):
        # The default writer is a process; "sqlite-thread" runs the suite on a writer thread.
        config = DurabilityConfig(
            writer="thread" if request.param == "sqlite-thread" else "process"
        )

        def make(name: str = "store") -> EventStore:
            return SqliteEventStore(tmp_path / f"{name}.db", config=config)

        return make
    raise AssertionError(request.param)
