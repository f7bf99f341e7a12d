"""Real PostgreSQL for tests: the server's URL, or a skip that says why there is none.

Tests use ``MAGISTRATE_TEST_PG_URL`` (default: the local server, trust auth, database
``test``); each test gets schemas of its own (named with a fresh prefix) that are dropped
afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable, Iterator

import anyio
import psycopg
import pytest
from psycopg import sql

__all__ = ["PG_URL", "drop_schemas", "fresh_prefix", "pg_url", "wait_until"]

PG_URL = os.environ.get("MAGISTRATE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

_reachable: str | None = None  # "" when reachable, else why not


def pg_url() -> str:
    """The test server's URL; skips the calling test (saying why) when none answers."""
    global _reachable
    if _reachable is None:
        try:
            with psycopg.connect(PG_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            _reachable = ""
        except psycopg.Error as exc:
            _reachable = f"no PostgreSQL server at {PG_URL}: {str(exc).strip()}"
    if _reachable:
        pytest.skip(_reachable)
    return PG_URL


def fresh_prefix() -> str:
    """A schema-name prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}"


def drop_schemas(prefix: str) -> None:
    """Drop every schema whose name starts with ``prefix``."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (prefix + "%",)
        ).fetchall()
        for (name,) in rows:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def schema_prefix() -> Iterator[str]:
    """Fixture body: a fresh prefix for the test's schemas, dropped afterwards."""
    pg_url()
    prefix = fresh_prefix()
    yield prefix
    drop_schemas(prefix)


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float) -> None:
    """Return once ``check()`` is true (asked every 50 ms); TimeoutError after ``timeout``."""
    with anyio.fail_after(timeout):
        while True:
            if await check():
                return
            await anyio.sleep(0.05)
