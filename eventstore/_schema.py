"""The SQLite file format of the event store: schema, identification and version checks.

A store is identified by SQLite's ``application_id`` header field and versioned by its
``user_version`` field. Both are read from the raw file header *before* SQLite opens the
file, so a file that is not a store (or comes from a newer release) is never modified.
"""

from __future__ import annotations

import os
import sqlite3
import zlib

from ._errors import NotAStoreError, SchemaVersionError

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "check_file",
    "check_schema",
    "create_schema",
    "load_body",
    "store_body",
]

#: "MAGS" in ASCII: marks a SQLite file as a magistrate event store.
APPLICATION_ID = 0x4D414753
#: The version of the store's tables this release reads and writes.
SCHEMA_VERSION = 1

_SQLITE_MAGIC = b"SQLite format 3\x00"

# Runs get a small integer key so each event row and index entry stores 1-3 bytes instead of
# the run id string; hashes are raw 32-byte blobs; an event's prev_hash is the hash of the
# row before it, so it is not stored twice. This keeps per-event overhead near 60 bytes.
_DDL = """
CREATE TABLE runs (
    run        INTEGER PRIMARY KEY,
    run_id     TEXT    NOT NULL UNIQUE,
    status     TEXT    NOT NULL,
    created    REAL    NOT NULL,
    updated    REAL    NOT NULL,
    last_seq   INTEGER NOT NULL,
    graph_hash TEXT
);
CREATE TABLE events (
    position INTEGER PRIMARY KEY,
    run      INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    ts       REAL    NOT NULL,
    type     TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    hash     BLOB    NOT NULL,
    body     BLOB    NOT NULL
);
CREATE UNIQUE INDEX events_run_seq ON events (run, seq);
"""


def check_file(path: str) -> bool:
    """Inspect ``path`` without modifying it; return True if a new store must be created.

    Raises NotAStoreError for a directory, a non-SQLite file or another application's SQLite
    database, and SchemaVersionError for a store of a newer schema version.
    """
    if not os.path.exists(path):
        return True
    if os.path.isdir(path):
        raise NotAStoreError(path, "it is a directory")
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise NotAStoreError(path, f"cannot read it: {exc}") from exc
    if not header:
        return True  # an empty file is an empty SQLite database: make it a store
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise NotAStoreError(path, "it is not an SQLite database")
    app_id = int.from_bytes(header[68:72], "big")
    version = int.from_bytes(header[60:64], "big")
    if app_id != APPLICATION_ID:
        raise NotAStoreError(path, f"an SQLite database with application_id {app_id:#x}")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(path, version, SCHEMA_VERSION)
    return False


def create_schema(conn: sqlite3.Connection, page_size: int) -> None:
    """Create the tables in an empty database (``conn`` in autocommit mode)."""
    conn.execute(f"PRAGMA page_size = {int(page_size)}")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _DDL.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def check_schema(conn: sqlite3.Connection, path: str) -> None:
    """Check an opened store through SQL (the header may lag behind an unmerged WAL)."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app_id != APPLICATION_ID:
        raise NotAStoreError(path, f"an SQLite database with application_id {app_id:#x}")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(path, version, SCHEMA_VERSION)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    missing = {"runs", "events"} - tables
    if missing:
        raise NotAStoreError(path, f"tables missing: {', '.join(sorted(missing))}")


# How a body is stored. Encoded bodies are JSON objects that start with their tag,
# '{"type":"<tag>"', which the row's type column already holds, so small bodies are stored
# without it and start with "," or "}". Bodies of at least COMPRESS_AT bytes are stored
# zlib-compressed when that saves a tenth or more (large memory values and tool results
# dominate a store's size); a zlib stream starts with 0x78 ("x"). A body stored whole starts
# with "{" (stores written before the tag was dropped). So the first byte tells the forms
# apart. Hashes are always over the whole encoded body.
COMPRESS_AT = 1024


_PREFIXES: dict[str, bytes] = {}


def tag_prefix(tag: str) -> bytes:
    prefix = _PREFIXES.get(tag)
    if prefix is None:
        prefix = _PREFIXES[tag] = b'{"type":"' + tag.encode() + b'"'
    return prefix


def store_body(body: bytes, tag: str) -> bytes:
    """The bytes to store for the encoded body of a ``tag`` event."""
    if len(body) >= COMPRESS_AT:
        packed = zlib.compress(body, 1)
        if len(packed) * 10 <= len(body) * 9:
            return packed
    prefix = tag_prefix(tag)
    if body.startswith(prefix) and body[len(prefix) : len(prefix) + 1] in (b",", b"}"):
        return body[len(prefix) :]
    return body


def load_body(stored: bytes, tag: str) -> bytes:
    """The encoded body back from its stored bytes. Raises zlib.error if corrupt."""
    first = stored[:1]
    if first == b"x":
        return zlib.decompress(stored)
    if first == b"," or first == b"}":
        return tag_prefix(tag) + stored
    return stored
