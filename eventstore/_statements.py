"""The SQL the event store's writer runs, and the statement caches behind it."""

from __future__ import annotations

import sqlite3

__all__ = [
    "CHUNK_ROWS",
    "CHUNK_SQL",
    "INSERT_RUNS_SQL",
    "LOOKUP_IDS",
    "LOOKUP_SQL",
    "NULL_ROW",
    "ONE_STATEMENT_ROWS",
    "PADDED_SQL",
    "RUN_ROWS",
    "UPDATE_FROM",
    "UPDATE_RUN",
    "UPDATE_RUNS_SQL",
    "WAL_CHECKPOINT_BYTES",
    "padded_size",
    "wal_autocheckpoint_pages",
]

# A runs row's last seq, last hash and update time are advanced by the fence trigger with
# each events row (see _schema); the writer changes only its status and graph hash.
UPDATE_RUN = (
    "UPDATE runs SET status = coalesce(?, status), graph_hash = coalesce(?, graph_hash) "
    "WHERE run = ?"
)

# Runs rows are inserted and updated by one statement per up to RUN_ROWS rows (padded with
# NULL rows to a power of two): executemany would run one statement per row, and each gives
# up the GIL and waits to get it back (a batch of new runs, or of runs finishing, holds up
# to hundreds). UPDATE ... FROM needs SQLite 3.33; older builds use UPDATE_RUN per row.
RUN_ROWS = 256
_RUN_COLUMNS = "run, run_id, status, created, updated, last_seq, graph_hash"
INSERT_RUNS_SQL = {
    1 << i: f"INSERT INTO runs ({_RUN_COLUMNS}) SELECT * FROM (VALUES "
    + ",".join(("(?,?,?,?,?,?,?)",) * (1 << i))
    + ") WHERE column1 NOTNULL"
    for i in range(RUN_ROWS.bit_length())
}
UPDATE_RUNS_SQL = {
    1 << i: "UPDATE runs SET status = coalesce(v.column1, status), "
    "graph_hash = coalesce(v.column2, graph_hash) FROM (VALUES "
    + ",".join(("(?,?,?)",) * (1 << i))
    + ") AS v WHERE runs.run = v.column3"
    for i in range(RUN_ROWS.bit_length())
}
UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)

_COLUMNS = "position, run, seq, ts, type, version, hash, body"
_ROW_PARAMS = "(?,?,?,?,?,?,?,?)"
NULL_ROW: list[None] = [None] * 8


def padded_size(count: int) -> int:
    """The smallest power of two >= ``count`` (statements are cached per padded size)."""
    return 1 << (count - 1).bit_length()


def _insert_sql(count: int) -> str:
    return f"INSERT INTO events ({_COLUMNS}) VALUES " + ",".join((_ROW_PARAMS,) * count)


def _padded_insert_sql(count: int) -> str:
    # Rows of NULLs pad the batch to ``count``; the WHERE drops them (position is never NULL).
    values = ",".join((_ROW_PARAMS,) * count)
    return f"INSERT INTO events ({_COLUMNS}) SELECT * FROM (VALUES {values}) WHERE column1 NOTNULL"


# A batch that changes no runs row is written by ONE statement in autocommit mode: SQLite
# runs it as a transaction of its own, which takes the write lock at its start as BEGIN
# IMMEDIATE does and commits (and syncs) before the statement returns. sqlite3 releases the
# GIL for a statement's whole execution, so the writer thread needs the GIL back once per
# batch instead of after each of BEGIN, every insert and COMMIT; each time it does, it may
# wait for the event loop. The statement is padded to a power-of-two row count, so at most a
# dozen distinct statements are prepared and cached. Batches that also insert or update runs
# rows, or are larger than ONE_STATEMENT_ROWS rows, use BEGIN IMMEDIATE ... COMMIT with
# multi-row inserts of at most CHUNK_ROWS rows.
# 8 parameters a row: 2,048 rows are within SQLite's default limit of 32,766 parameters (a
# build with a lower limit gets smaller statements: WriterCore.connect reads the limit).
ONE_STATEMENT_ROWS = 2048
PADDED_SQL = {1 << i: _padded_insert_sql(1 << i) for i in range(ONE_STATEMENT_ROWS.bit_length())}
# Runs looked up by run_id, up to LOOKUP_IDS per query, the list padded with NULLs (which
# match nothing) to a power of two so few distinct statements are cached.
LOOKUP_IDS = 256
LOOKUP_SQL = {
    1 << i: "SELECT run_id, run, last_seq, last_hash FROM runs WHERE run_id IN ("
    + ",".join("?" * (1 << i))
    + ")"
    for i in range(LOOKUP_IDS.bit_length())
}
CHUNK_ROWS = 128
CHUNK_SQL = {1 << i: _insert_sql(1 << i) for i in range(CHUNK_ROWS.bit_length())}


# Checkpoint the WAL into the database file once it holds this many bytes. SQLite's default
# is 1,000 pages (1 MB on our 1 KB pages): with many runs appending, commits rewrite the
# same index pages, so a longer WAL lets one checkpoint copy each page once for many commits
# (measured ~25% less commit time per event at 110 appends per commit, 8 MB vs 1 MB).
WAL_CHECKPOINT_BYTES = 8 * 1024 * 1024


def wal_autocheckpoint_pages(conn: sqlite3.Connection) -> int:
    """The ``wal_autocheckpoint`` pragma value for WAL_CHECKPOINT_BYTES on ``conn``'s file."""
    page_size: int = conn.execute("PRAGMA page_size").fetchone()[0]
    return max(1000, WAL_CHECKPOINT_BYTES // page_size)
