"""The SQL the event store's writer runs."""

from __future__ import annotations

import sqlite3

__all__ = [
    "DROP_OLDER_SNAPSHOTS",
    "INSERT_EVENT",
    "INSERT_RUN",
    "INSERT_SNAPSHOT",
    "LOOKUP_RUNS",
    "UPDATE_RUN",
    "WAL_CHECKPOINT_BYTES",
    "wal_autocheckpoint_pages",
]

# Plain statements, run by executemany inside BEGIN IMMEDIATE ... COMMIT.
INSERT_EVENT = (
    "INSERT INTO events (position, run, seq, ts, type, version, hash, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
# A new run's row starts at last seq 0 with no hash; the fence trigger advances it.
# A snapshot saved with a batch (SnapshotAfter); a run keeps only its newest.
INSERT_SNAPSHOT = (
    "INSERT OR REPLACE INTO snapshots (run, seq, hash, version, data) VALUES (?, ?, ?, ?, ?)"
)
DROP_OLDER_SNAPSHOTS = "DELETE FROM snapshots WHERE run = ? AND seq <> ?"

INSERT_RUN = (
    "INSERT INTO runs (run, run_id, status, created, updated, last_seq, graph_hash, graph_id, "
    "quality, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# The writer changes only what the run_index hooks give: a value of None leaves a column
# unchanged, "" clears it (status is never cleared). The run's last seq, last hash and
# update time are the fence trigger's.
UPDATE_RUN = (
    "UPDATE runs SET status = coalesce(nullif(?, ''), status), "
    "graph_hash = nullif(coalesce(?, graph_hash), ''), "
    "graph_id = nullif(coalesce(?, graph_id), ''), quality = nullif(coalesce(?, quality), ''), "
    "origin = nullif(coalesce(?, origin), '') WHERE run = ?"
)
# Runs looked up by run_id, all of a batch's at once (the ids as one JSON array).
LOOKUP_RUNS = (
    "SELECT run_id, run, last_seq, last_hash FROM runs "
    "WHERE run_id IN (SELECT value FROM json_each(?))"
)

# Checkpoint the WAL into the database file once it holds this many bytes (SQLite's default
# of 1,000 pages on our 1 KB pages). After a checkpoint SQLite writes the WAL again from its
# start, over blocks the file already has; a commit that has to extend the file instead
# makes its fsync write the file's metadata too, which costs more CPU per commit than a
# longer WAL saves by copying hot index pages once for more commits. So only the commits of
# the first megabyte after the store opens (its WAL starts empty) grow the file.
WAL_CHECKPOINT_BYTES = 1024 * 1024


def wal_autocheckpoint_pages(conn: sqlite3.Connection) -> int:
    """The ``wal_autocheckpoint`` pragma value for WAL_CHECKPOINT_BYTES on ``conn``'s file."""
    page_size: int = conn.execute("PRAGMA page_size").fetchone()[0]
    return max(1000, WAL_CHECKPOINT_BYTES // page_size)
