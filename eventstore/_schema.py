"""The SQLite file format of the event store: schema, identification and version checks.

A store is identified by SQLite's ``application_id`` header field and versioned by its
``user_version`` field. Both are read from the raw file header *before* SQLite opens the
file, so a file that is not a store (or comes from a newer release) is never modified.
"""

from __future__ import annotations

import os
import sqlite3
import zlib
from collections.abc import Sequence

import msgspec

from ._errors import NotAStoreError, SchemaVersionError

__all__ = [
    "APPLICATION_ID",
    "FRAME_EVENTS",
    "FRAME_TYPE",
    "SCHEMA_VERSION",
    "check_file",
    "check_schema",
    "create_schema",
    "frame_rows",
    "load_body",
    "migrate_schema",
    "pack_frame",
    "row_events",
    "store_body",
]

#: "MAGS" in ASCII: marks a SQLite file as a magistrate event store.
APPLICATION_ID = 0x4D414753
#: The version of the store's tables this release reads and writes. Version 2 added frames
#: (rows holding several events, see below); version 3 the snapshots table and the index of
#: runs by status; version 4 the fence (below). Older files are upgraded when opened.
SCHEMA_VERSION = 4
#: Bytes of one event's chain hash (SHA-256) in an events row's ``hash`` column.
HASH_WIDTH = 32

_SQLITE_MAGIC = b"SQLite format 3\x00"

# Runs get a small integer key so each event row and index entry stores 1-3 bytes instead of
# the run id string; hashes are raw 32-byte blobs; an event's prev_hash is the hash of the
# row before it, so it is not stored twice. This keeps per-event overhead near 60 bytes.
#
# Frames (version 2): the events of one append are stored as one row of up to FRAME_EVENTS
# events. ``position`` and ``seq`` are the first event's (the others follow without gaps),
# ``hash`` holds every event's 32-byte hash in order (so a row holds len(hash) / 32 events),
# and a row of several events has type FRAME_TYPE, version 0 and a body made by pack_frame.
# A row of one event is stored as in version 1. A step of a graph appends 3-5 events at
# once; as one row it costs SQLite a third of the work (one table and one index entry).
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
# Version 3: runs listed by status without a scan, and snapshots (a cache of a run's folded
# state, see eventstore.Snapshot; only the newest of a run is kept).
_V3_DDL = """
CREATE INDEX runs_status ON runs (status, run);
CREATE TABLE snapshots (
    run     INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    hash    BLOB    NOT NULL,
    version TEXT    NOT NULL,
    data    BLOB    NOT NULL,
    PRIMARY KEY (run, seq)
) WITHOUT ROWID;
"""
# Version 4: the file is the fence between writers. The runs row records the run's last
# seq and last hash; every events row must start right after that seq (and after every
# position in the file), and advances the record. So a writer whose idea of a run is stale
# (another process appended since) cannot write: its statement fails and the whole
# transaction with it, whatever the writer's caches said. The runs row also tells a read
# or verify where the log must end (a deleted tail shows).
_V4_DDL = """
ALTER TABLE runs ADD COLUMN last_hash BLOB NOT NULL DEFAULT x'';
UPDATE runs SET
    last_seq = max(last_seq, coalesce((SELECT e.seq + length(e.hash) / 32 - 1 FROM events e
        WHERE e.run = runs.run ORDER BY e.seq DESC LIMIT 1), 0)),
    last_hash = coalesce((SELECT substr(e.hash, -32) FROM events e
        WHERE e.run = runs.run ORDER BY e.seq DESC LIMIT 1), x'');
CREATE TRIGGER events_fence BEFORE INSERT ON events
BEGIN
    SELECT RAISE(ABORT, 'magistrate event store: the run moved on (seq conflict)')
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE run = NEW.run AND last_seq = NEW.seq - 1)
        OR NEW.position < coalesce((SELECT position + length(hash) / 32 FROM events
            ORDER BY position DESC LIMIT 1), 1);
    UPDATE runs SET last_seq = NEW.seq + length(NEW.hash) / 32 - 1,
        last_hash = substr(NEW.hash, -32), updated = NEW.ts WHERE run = NEW.run;
END;
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
        for script in (_DDL, _V3_DDL, _V4_DDL):
            _run_script(conn, script)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def migrate_schema(conn: sqlite3.Connection) -> None:
    """Upgrade an older store in place (``conn`` in autocommit mode, before any append).

    In one transaction. Version 1 -> 2 changes no table: version 1 rows are rows of one
    event; the version is raised so that a release that cannot read frames refuses the file
    instead of misreading it. Version 2 -> 3 adds the snapshots table and the runs index;
    3 -> 4 the fence (the runs row's last seq and hash, taken from the events).
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version >= SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if version < 3:
            _run_script(conn, _V3_DDL)
        if version < 4:
            _run_script(conn, _V4_DDL)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run each statement of ``script`` (inside the caller's transaction, unlike
    executescript, which commits first)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            conn.execute(statement)
            statement = ""
    if statement.strip():
        raise ValueError(f"an incomplete statement in a schema script: {statement!r}")


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


#: The type column of a row holding several events (a frame); no event type has this tag.
FRAME_TYPE = ""
#: At most this many events share one row (an append of more is split into several rows).
FRAME_EVENTS = 64

_FRAME_ENCODER = msgspec.msgpack.Encoder()
_FRAME_DECODER = msgspec.msgpack.Decoder(list[tuple[str, int, bytes]])


def pack_frame(tags: Sequence[str], versions: Sequence[int], stored: Sequence[bytes]) -> bytes:
    """The body of a row holding several events: a msgpack array of [tag, version, stored
    body] (each body in its store_body form)."""
    return _FRAME_ENCODER.encode(list(zip(tags, versions, stored, strict=True)))


def frame_rows(
    tags: list[str], versions: list[int], stored: list[bytes]
) -> list[tuple[int, str, int, bytes]]:
    """The rows that store one append's events, given their stored bodies: (event count,
    type, version, body). One event is a plain row; more share frames of up to
    FRAME_EVENTS events (a last frame of one event is a plain row)."""
    if len(stored) == 1:
        return [(1, tags[0], versions[0], stored[0])]
    rows: list[tuple[int, str, int, bytes]] = []
    for start in range(0, len(stored), FRAME_EVENTS):
        end = min(start + FRAME_EVENTS, len(stored))
        if end - start == 1:
            rows.append((1, tags[start], versions[start], stored[start]))
        else:
            frame = pack_frame(tags[start:end], versions[start:end], stored[start:end])
            rows.append((end - start, FRAME_TYPE, 0, frame))
    return rows


def stored_rows(
    tags: list[str], versions: list[int], bodies: list[bytes]
) -> list[tuple[int, str, int, bytes]]:
    """The rows that store one append's encoded ``bodies`` (store_body, then frame_rows)."""
    stored = [store_body(body, tag) for body, tag in zip(bodies, tags, strict=True)]
    return frame_rows(tags, versions, stored)


def row_events(
    row_type: str, version: int, hashes: bytes, body: bytes
) -> list[tuple[str, int, bytes, bytes]]:
    """A stored row's events as (tag, version, 32-byte hash, stored body), in seq order.

    Raises ValueError for a frame that cannot be read or whose hashes do not match its
    events in number (a row of one event is returned as stored, whatever its hash).
    """
    if row_type != FRAME_TYPE:
        return [(row_type, version, hashes, body)]
    try:
        items = _FRAME_DECODER.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"undecodable frame: {exc}") from exc
    if not items or len(hashes) != 32 * len(items):
        raise ValueError(f"a frame of {len(items)} events with {len(hashes)} bytes of hashes")
    return [
        (tag, item_version, hashes[32 * i : 32 * i + 32], stored)
        for i, (tag, item_version, stored) in enumerate(items)
    ]
