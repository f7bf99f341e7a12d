"""The PostgreSQL layout of the event store: tables, identification and version checks.

A store lives in one PostgreSQL schema (``magistrate`` unless told otherwise). Its ``meta``
table names the application and the layout's version, and holds the store-wide position
counter. A schema that holds tables but no such row is someone else's and is never
modified; a newer version is refused unchanged.
"""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

from ._errors import (
    NotAStoreError,
    SchemaVersionError,
    StoreError,
    StoreMissingError,
    StoreUnreachableError,
)
from ._postgres_runs import V2_DDL, V3_DDL, V4_DDL, fill_run_index

__all__ = [
    "PG_APPLICATION",
    "PG_SCHEMA_VERSION",
    "check_text",
    "ensure_schema",
    "one_line",
    "valid_schema_name",
]

#: What the meta row's ``application`` column holds in a magistrate store.
PG_APPLICATION = "magistrate-eventstore"
#: The version of the tables this release reads and writes. Version 2 added the runs' graph
#: id and quality and the indexes of filtered listings (eventstore._postgres_runs), version
#: 3 the runs' origin (a fork's source), version 4 a claim's draining mark; an older store is
#: upgraded when opened.
PG_SCHEMA_VERSION = 4

# One row per event (no frames: PostgreSQL's per-row cost is not SQLite's, and rows stay
# plain to query). ``position`` is the store-wide commit order that tail follows: it is
# taken from meta.next_position inside the append transaction, whose row lock keeps
# positions gap-free and visible in order. ``body`` holds the encoded body bytes the hash
# covers. ``runs.last_seq`` / ``last_hash`` are the run's head, the fence every append
# checks (compare-and-set under the row lock); ``owner`` / ``lease_expires`` /
# ``claim_epoch`` record who executes the run (see claim / renew).
_DDL = """
CREATE TABLE {schema}.meta (
    application    TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    next_position  BIGINT  NOT NULL
);
CREATE TABLE {schema}.runs (
    run           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        TEXT             NOT NULL UNIQUE,
    status        TEXT             NOT NULL,
    created       DOUBLE PRECISION NOT NULL,
    updated       DOUBLE PRECISION NOT NULL,
    last_seq      BIGINT           NOT NULL,
    last_hash     BYTEA            NOT NULL,
    graph_hash    TEXT,
    owner         TEXT,
    lease_expires DOUBLE PRECISION,
    claim_epoch   BIGINT           NOT NULL DEFAULT 0
);
CREATE INDEX runs_status ON {schema}.runs (status, run);
CREATE TABLE {schema}.events (
    position BIGINT           PRIMARY KEY,
    run      BIGINT           NOT NULL,
    seq      BIGINT           NOT NULL,
    ts       DOUBLE PRECISION NOT NULL,
    type     TEXT             NOT NULL,
    version  INTEGER          NOT NULL,
    hash     BYTEA            NOT NULL,
    body     BYTEA            NOT NULL,
    UNIQUE (run, seq)
);
CREATE TABLE {schema}.snapshots (
    run_id  TEXT    NOT NULL,
    seq     BIGINT  NOT NULL,
    hash    TEXT    NOT NULL,
    version TEXT    NOT NULL,
    data    BYTEA   NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


#: The longest text (in UTF-8 bytes) the store keeps in a column it indexes (a run id, the
#: values of the run listing): an index entry of PostgreSQL holds at most about 2,700
#: bytes, and a longer one would fail the whole group commit it is in.
MAX_KEY_BYTES = 2000


def check_text(operation: str, what: str, value: str | None) -> None:
    """ValueError naming ``what`` if ``value`` holds a NUL character, which PostgreSQL's
    text columns cannot store (event bodies are bytes and may hold any), or is longer than
    MAX_KEY_BYTES, which its indexes cannot hold."""
    if value is None:
        return
    if "\x00" in value:
        raise ValueError(
            f"{operation}: {what} {value!r} contains a NUL character (\\x00), which a "
            "PostgreSQL store cannot hold in text; nothing was written"
        )
    if len(value) > MAX_KEY_BYTES // 4 and len(value.encode(errors="replace")) > MAX_KEY_BYTES:
        raise ValueError(
            f"{operation}: {what} {value[:40]!r}... is {len(value.encode(errors='replace'))} "
            f"bytes long; a PostgreSQL store holds at most {MAX_KEY_BYTES}; nothing was written"
        )


def valid_schema_name(name: str) -> str:
    """``name`` if it is a plain lower-case PostgreSQL identifier that is not reserved for
    PostgreSQL's own schemas (``pg_...``); else ValueError."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"a store's PostgreSQL schema name must match [a-z_][a-z0-9_]*, got {name!r}"
        )
    if name.startswith("pg_") or name == "information_schema":
        raise ValueError(f"schema {name!r} is PostgreSQL's own: name a schema of the store's")
    return name


async def ensure_schema(
    conn: psycopg.AsyncConnection[tuple[object, ...]],
    schema: str,
    where: str,
    *,
    create: bool = True,
) -> None:
    """Create the store's tables in ``schema`` if it holds none; check them otherwise.

    ``create=False`` creates nothing: a schema that is missing or holds no tables raises
    StoreMissingError instead.

    ``conn`` is in autocommit mode. An advisory lock keyed on the schema name makes
    concurrent first opens create the tables once. Raises NotAStoreError for a schema
    holding other tables, views or sequences (whether or not this login may read them),
    or no meta row of ours, and SchemaVersionError for a newer layout; neither changes
    anything. A store of an older layout is upgraded (in the same transaction). What the
    server refuses (no right to create the schema or read its tables) raises StoreError
    saying so, and a connection lost meanwhile StoreUnreachableError; nothing is changed.
    """
    try:
        await _ensure(conn, schema, where, create)
    except psycopg.OperationalError as exc:
        raise StoreUnreachableError(where, one_line(exc)) from exc
    except psycopg.Error as exc:
        raise StoreError(
            f"{where}: cannot open the event store: {one_line(exc)}; nothing was changed"
        ) from exc


def one_line(error: BaseException) -> str:
    """``error``'s message on one line (the server's DETAIL, HINT and CONTEXT lines kept)."""
    return " ".join(str(error).split()) or type(error).__name__


# Every relation of a schema (tables, views, sequences, indexes...), from the catalogue:
# information_schema lists only the tables this login has a right to, so another
# application's tables may be there without being listed.
_RELATIONS = (
    "SELECT c.relname, c.relkind FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s"
)


async def _ensure(
    conn: psycopg.AsyncConnection[tuple[object, ...]], schema: str, where: str, create: bool
) -> None:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"magistrate:{schema}",))
        cur = await conn.execute(_RELATIONS, (schema,))
        relations = await cur.fetchall()
        tables = {str(name) for name, kind in relations if kind in ("r", "p", "v", "m", "f")}
        if not relations and not create:
            cur = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
            found = await cur.fetchone() is not None
            raise StoreMissingError(
                where, "the schema holds no tables" if found else "no such schema"
            )
        if not relations:
            ident = sql.Identifier(schema)
            await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            await _run_script(conn, _DDL + ";" + V2_DDL + ";" + V3_DDL + ";" + V4_DDL, ident)
            await conn.execute(
                sql.SQL("INSERT INTO {}.meta VALUES (%s, %s, 1)").format(ident),
                (PG_APPLICATION, PG_SCHEMA_VERSION),
            )
            return
        if "meta" not in tables:
            raise NotAStoreError(
                where,
                f"schema {schema!r} holds other tables (or views, sequences) and no meta table",
            )
        try:
            cur = await conn.execute(
                sql.SQL("SELECT application, schema_version FROM {}.meta").format(
                    sql.Identifier(schema)
                )
            )
            rows = await cur.fetchall()
        except psycopg.errors.UndefinedColumn as exc:
            raise NotAStoreError(
                where, f"schema {schema!r} has a meta table of another kind"
            ) from exc
        if len(rows) != 1 or rows[0][0] != PG_APPLICATION:
            raise NotAStoreError(where, f"schema {schema!r} is not a magistrate store")
        version = int(str(rows[0][1]))
        if version > PG_SCHEMA_VERSION:
            raise SchemaVersionError(where, version, PG_SCHEMA_VERSION)
        missing = {"runs", "events", "snapshots"} - tables
        if missing:
            raise NotAStoreError(where, f"tables missing: {', '.join(sorted(missing))}")
        if version < PG_SCHEMA_VERSION:
            ident = sql.Identifier(schema)
            if version < 2:
                await _run_script(conn, V2_DDL, ident)
            if version < 3:
                await _run_script(conn, V3_DDL, ident)
                await fill_run_index(conn, schema)
            await _run_script(conn, V4_DDL, ident)
            await conn.execute(
                sql.SQL("UPDATE {}.meta SET schema_version = %s").format(ident),
                (PG_SCHEMA_VERSION,),
            )


async def _run_script(
    conn: psycopg.AsyncConnection[tuple[object, ...]], script: str, ident: sql.Identifier
) -> None:
    """Run the ";"-separated statements of ``script`` with ``{schema}`` as ``ident``."""
    for statement in script.split(";"):
        if statement.strip():
            await conn.execute(sql.SQL(statement).format(schema=ident))
