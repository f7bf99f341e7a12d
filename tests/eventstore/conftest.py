"""Fixtures for the backend-neutral store suite: each test runs against every store factory.

A factory takes a name (the same name reopens the same store) and returns an unopened store.
PostgreSQL will add a parameter here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from eventstore import EventStore, SqliteEventStore

StoreFactory = Callable[[str], EventStore]


@pytest.fixture(params=["sqlite"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    if request.param == "sqlite":

        def make(name: str = "store") -> EventStore:
            return SqliteEventStore(tmp_path / f"{name}.db")

        return make
    raise AssertionError(request.param)
