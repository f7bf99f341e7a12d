"""The package's curated surface."""

from __future__ import annotations

import subprocess
import sys

import eventstore


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(eventstore).items()
        if not name.startswith("_") and not isinstance(value, type(eventstore))
    }
    # The PostgreSQL names are imported on first use (see test_psycopg_loads_only_...).
    assert set(eventstore.__all__) == public | set(eventstore._LAZY)
    assert all(not name.startswith("_") for name in eventstore.__all__)
    for name in eventstore.__all__:
        assert getattr(eventstore, name) is not None


def test_psycopg_loads_only_when_a_postgresql_store_is_used() -> None:
    def loaded(code: str) -> str:
        check = f"{code}\nimport sys\nprint(sorted(m for m in sys.modules if 'psycopg' in m))"
        out = subprocess.run(
            [sys.executable, "-c", check], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()

    assert loaded("import eventstore") == "[]"
    assert loaded("import runtime.cli") == "[]"
    assert loaded("import eventstore; eventstore.open_store('runs.db')") == "[]"
    opened = "import eventstore; eventstore.open_store('postgresql://localhost/db')"
    assert "'psycopg'" in loaded(opened)
    assert "'psycopg'" in loaded("from eventstore import PostgresEventStore")


def test_errors_hang_from_the_magistrate_root() -> None:
    from actors import MagistrateError

    for name in (
        "StoreError",
        "ConcurrencyError",
        "CorruptLogError",
        "NotAStoreError",
        "SchemaVersionError",
        "StoreClosedError",
        "UnknownEventError",
    ):
        cls = getattr(eventstore, name)
        assert issubclass(cls, eventstore.StoreError)
        assert issubclass(cls, MagistrateError)
